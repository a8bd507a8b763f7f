#include "proxy/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

const char *
dm_json_esc_n(char *buf, size_t cap, const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; s != NULL && i < len && n + 7 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", c);
        } else {
            buf[n++] = (char)c;
        }
    }
    buf[n] = 0;
    return buf;
}

const char *
dm_json_esc(char *buf, size_t cap, const char *s)
{
    return dm_json_esc_n(buf, cap, s, s != NULL ? strlen(s) : 0);
}
