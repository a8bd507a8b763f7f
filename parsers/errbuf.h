/*
 * Error messages into a caller's buffer, as the parsers' loaders give them
 * ("file:line: what is wrong").
 */
#ifndef DM_PARSERS_ERRBUF_H
#define DM_PARSERS_ERRBUF_H

#include <stddef.h>

/* Formats into err (errlen bytes, NUL-terminated, cut to fit); errlen 0: nothing. */
__attribute__((format(printf, 3, 4))) void dm_errbuf_set(char *err, size_t errlen, const char *fmt,
                                                         ...);

#endif
