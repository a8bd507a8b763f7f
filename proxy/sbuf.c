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
    size_t n = 0, i = 0;
    for (; s != NULL && i < len && n + 7 < cap; i++) {
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
    if (i < len) {
        /* Cut short: a UTF-8 sequence at the end that lacks bytes goes
         * (its lead byte 11xxxxxx says how many it has, 10xxxxxx follow). */
        size_t k = n;
        while (k > 0 && ((unsigned char)buf[k - 1] & 0xc0) == 0x80) {
            k--;
        }
        unsigned char lead = k > 0 ? (unsigned char)buf[k - 1] : 0;
        size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
        if (lead >= 0xc0 && n - (k - 1) < need) {
            n = k - 1;
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
