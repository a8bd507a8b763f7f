#include "parsers/errbuf.h"

#include <stdarg.h>
#include <stdio.h>

void
dm_errbuf_set(char *err, size_t errlen, const char *fmt, ...)
{
    if (errlen == 0) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
