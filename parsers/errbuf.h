/*
 * Error messages into a caller's buffer, as the loaders give them ("file:line:
 * what is wrong"). A library of its own (dm_errbuf, plain libc: pure), used
 * by the parsers and by dimmer-load's pure core.
 */
#ifndef DM_PARSERS_ERRBUF_H
#define DM_PARSERS_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>

/* Formats into err (errlen bytes, NUL-terminated, cut to fit); errlen 0: nothing. */
__attribute__((format(printf, 3, 4))) void dm_errbuf_set(char *err, size_t errlen, const char *fmt,
                                                         ...);

/* "name:line: " then the message of fmt and ap, into err as dm_errbuf_set(). */
__attribute__((format(printf, 5, 0))) void dm_errbuf_vat(char *err, size_t errlen, const char *name,
                                                         unsigned line, const char *fmt,
                                                         va_list ap);

#endif
