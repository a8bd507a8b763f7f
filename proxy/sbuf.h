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

#endif
