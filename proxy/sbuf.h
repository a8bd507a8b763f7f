/*
 * A growing text buffer for the control thread's JSON (admin, power): append
 * with printf formats; out of memory leaves what was written so far.
 */
#ifndef DM_PROXY_SBUF_H
#define DM_PROXY_SBUF_H

#include <stddef.h>

struct dm_sbuf {
    char *p; /* malloc'd, NUL-terminated once anything is written; NULL when empty */
    size_t len, cap;
};

void dm_sb_printf(struct dm_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends the n bytes at s as they are (no format: the fast way for text
 * written a million times over, a /metrics of many servers). */
void dm_sb_put(struct dm_sbuf *b, const char *s, size_t n);
void dm_sb_puts(struct dm_sbuf *b, const char *s);
/* Appends v in decimal. */
void dm_sb_u64(struct dm_sbuf *b, unsigned long long v);

/*
 * s (NULL: "") escaped for the inside of a JSON string into buf (cap bytes,
 * NUL-terminated): names and addresses from a config may hold any byte, and
 * a byte that is not part of well-formed UTF-8 is written \ufffd. A text too
 * long for buf is cut, never inside an escape or a UTF-8 sequence. Returns
 * buf.
 */
#define DM_JSON_TEXT 1024
const char *dm_json_esc(char *buf, size_t cap, const char *s);
/* The same for the len bytes at s (any thread: it only writes buf). */
const char *dm_json_esc_n(char *buf, size_t cap, const char *s, size_t len);

#endif
