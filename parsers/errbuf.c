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

void
dm_errbuf_vat(char *err, size_t errlen, const char *name, unsigned line, const char *fmt,
              va_list ap)
{
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    dm_errbuf_set(err, errlen, "%s:%u: %s", name, line, msg);
}
