#include "proxy/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void
dm_sb_printf(struct dm_sbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p != NULL ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}
