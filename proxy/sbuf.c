#include "proxy/sbuf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for n more bytes and a NUL in b; false when out of memory (b unchanged). */
static bool
sb_room(struct dm_sbuf *b, size_t n)
{
    if (b->cap - b->len > n) {
        return true;
    }
    size_t cap = (b->cap + n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

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
        if (!sb_room(b, (size_t)n)) {
            return;
        }
    }
}

void
dm_sb_put(struct dm_sbuf *b, const char *s, size_t n)
{
    if (!sb_room(b, n)) {
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void
dm_sb_puts(struct dm_sbuf *b, const char *s)
{
    dm_sb_put(b, s, strlen(s));
}

void
dm_sb_u64(struct dm_sbuf *b, unsigned long long v)
{
    char d[20];
    size_t i = sizeof(d);
    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    dm_sb_put(b, d + i, sizeof(d) - i);
}

/* The length of the well-formed UTF-8 sequence at s (at most len bytes), or 0. */
static size_t
utf8_len(const unsigned char *s, size_t len)
{
    size_t need = s[0] >= 0xc2 && s[0] <= 0xdf   ? 2
                  : s[0] >= 0xe0 && s[0] <= 0xef ? 3
                  : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                                 : 0;
    if (need == 0 || need > len) {
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            return 0;
        }
    }
    /* No overlong form, no surrogate, nothing above U+10FFFF. */
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f)) {
        return 0;
    }
    return need;
}

const char *
dm_json_esc_n(char *buf, size_t cap, const char *s, size_t len)
{
    size_t n = 0, i = 0;
    /* Room for the longest piece (an escape of 6) and the NUL. */
    while (s != NULL && i < len && n + 7 < cap) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char)c;
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            buf[n++] = (char)c;
            i++;
        } else {
            /* A byte that is no part of well-formed UTF-8 (a reply of a
             * machine, say) is U+FFFD: the JSON stays valid. */
            size_t k = utf8_len((const unsigned char *)s + i, len - i);
            if (k == 0) {
                memcpy(buf + n, "\\ufffd", 6);
                n += 6;
                i++;
            } else {
                memcpy(buf + n, s + i, k);
                n += k;
                i += k;
            }
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
