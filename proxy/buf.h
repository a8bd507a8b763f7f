/*
 * Buffers of the data path: refcounted, pooled per worker in two size classes
 * (small buffers for heads and error pages, read buffers of rt->buf_cap), and
 * the write that holds them until the bytes are out. Everything here belongs
 * to one worker and is called only from its thread.
 */
#ifndef DM_PROXY_BUF_H
#define DM_PROXY_BUF_H

#include <stdint.h>
#include <uv.h>

#define DM_SMALL_CAP 4096 /* pooled size class for heads and error pages */

struct dm_worker;

struct dm_buf {
    struct dm_buf *next; /* free list */
    uint32_t refs;
    uint32_t cap;
    uint32_t off; /* parsed up to here */
    uint32_t len; /* filled up to here */
    char data[];
};

/*
 * Returns a buffer of at least cap bytes with one reference, empty (off = len
 * = 0): from the worker's free list when cap fits a pooled size class, else
 * allocated exactly. NULL when out of memory.
 */
struct dm_buf *dm_buf_get(struct dm_worker *w, uint32_t cap);

/* As dm_buf_get, but of exactly cap bytes, never from a pool (a waiting
 * request's head). */
struct dm_buf *dm_buf_get_exact(struct dm_worker *w, uint32_t cap);

/*
 * Appends n bytes at p to *b, which it makes (DM_SMALL_CAP, or n) when NULL
 * and replaces by one twice as large when full; *b must have no other
 * reference. Returns 0, or -ENOMEM (*b as it was). Held sections: a
 * request's trailers, a response's last chunk and trailers.
 */
int dm_buf_append(struct dm_worker *w, struct dm_buf **b, const char *p, uint32_t n);

/* Drops one reference to b (NULL: nothing); the last one pools or frees it. */
void dm_buf_unref(struct dm_worker *w, struct dm_buf *b);

/*
 * For a libuv alloc callback: the free tail of *in, getting a read buffer of
 * cap bytes from w's pool first when *in is NULL (kept in *in, owned by the
 * caller's connection). Out of memory gives an empty buffer, which libuv
 * reports as UV_ENOBUFS. Worker thread only.
 */
void dm_buf_read_space(struct dm_worker *w, struct dm_buf **in, uint32_t cap, uv_buf_t *out);

/*
 * Frees every buffer and request on the worker's free lists: after a burst,
 * once the worker is quiet, and when it stops.
 */
void dm_buf_trim(struct dm_worker *w);
/*
 * Frees the pooled buffers and requests that sat unused since the last
 * call (the fewest the pool held meanwhile), so that a pool filled by a
 * peak of load gives its memory back once the peak is over, in steps of one
 * decay period. Returns the bytes freed.
 */
size_t dm_buf_decay(struct dm_worker *w);

/*
 * Writes bufs to s, holding a reference to each of hold[] (at most 4) until
 * the bytes are written. done(arg, status) is called once the write completes
 * (from the write callback, or never when everything went out at once: then 1
 * is returned). Returns 1 (all written now), 0 (queued; done() will follow) or
 * <0 (nothing queued, done() will not be called).
 */
typedef void (*dm_write_cb)(void *arg, int status);
int dm_buf_write(struct dm_worker *w, uv_stream_t *s, uv_buf_t *bufs, unsigned nbufs,
                 struct dm_buf **hold, unsigned nhold, dm_write_cb done, void *arg);

#endif
