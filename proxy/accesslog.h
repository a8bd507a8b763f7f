/*
 * The access log: one line per request (formats in conf/README.md), appended
 * to the worker's buffer and written once per loop iteration, so a burst of
 * requests costs one write(2). Everything here runs on the worker's thread.
 */
#ifndef DM_PROXY_ACCESSLOG_H
#define DM_PROXY_ACCESSLOG_H

#include <stddef.h>

struct dm_client;
struct dm_req;
struct dm_worker;

/* The formats of conf/README.md, access_log. */
enum dm_accesslog_format {
    DM_ALOG_DEFAULT = 0,
    DM_ALOG_JSON,
    DM_ALOG_COMBINED, /* nginx's combined */
};

/* The format a config names ("default", "json", "combined"; NULL: default). */
enum dm_accesslog_format dm_accesslog_format_of(const char *name);

/*
 * Sets the worker up to log to fd (-1: no access log) in format, with a
 * buffer of its own. Returns 0, or -ENOMEM with nothing to undo. Called
 * before the worker's thread starts.
 */
int dm_accesslog_init(struct dm_worker *w, int fd, int format);

/* Writes what is buffered and frees the buffer (the worker has stopped). */
void dm_accesslog_fini(struct dm_worker *w);

/* Writes the lines buffered so far to the log (the end of a loop iteration). */
void dm_accesslog_flush(struct dm_worker *w);

/* Appends the line of req, answered or failed, to its worker's buffer. */
void dm_accesslog_write(struct dm_req *req);

/*
 * Writes the client's IP address, without port, into out (cap at least
 * INET6_ADDRSTRLEN): the text of access-log lines, error-log lines and
 * X-Forwarded-For, so that the three agree.
 */
void dm_accesslog_client_addr(const struct dm_client *c, char *out, size_t cap);

#endif
