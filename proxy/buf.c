/*
 * Buffers and writes of the data path (proxy/buf.h).
 */
#include "proxy/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/internal.h"

#define DM_FREE_BUFS_MAX  32
#define DM_FREE_SMALL_MAX 64

/*
 * Two size classes are pooled per worker: small buffers (rewritten heads, error
 * pages) and read buffers (rt->buf_cap). Anything else is allocated exactly.
 */
struct dm_buf *
dm_buf_get(struct dm_worker *w, uint32_t cap)
{
    struct dm_buf **list = NULL;
    unsigned *count = NULL;
    if (cap <= DM_SMALL_CAP) {
        cap = DM_SMALL_CAP;
        list = &w->free_small;
        count = &w->nfree_small;
    } else if (w->rt != NULL && cap <= w->rt->buf_cap) {
        cap = w->rt->buf_cap;
        list = &w->free_bufs;
        count = &w->nfree_bufs;
    }
    struct dm_buf *b = list != NULL ? *list : NULL;
    if (b != NULL && b->cap == cap) {
        *list = b->next;
        (*count)--;
        unsigned *low = list == &w->free_small ? &w->low_small : &w->low_bufs;
        *low = *count < *low ? *count : *low;
    } else {
        b = malloc(sizeof(*b) + cap);
        if (b == NULL) {
            return NULL;
        }
        b->cap = cap;
    }
    b->next = NULL;
    b->refs = 1;
    b->off = 0;
    b->len = 0;
    return b;
}

int
dm_buf_append(struct dm_worker *w, struct dm_buf **b, const char *p, uint32_t n)
{
    struct dm_buf *h = *b;
    if (h == NULL || h->len + n > h->cap) {
        uint32_t len = h != NULL ? h->len : 0;
        uint32_t cap = h != NULL ? h->cap * 2 : DM_SMALL_CAP;
        struct dm_buf *nh = dm_buf_get(w, cap > len + n ? cap : len + n);
        if (nh == NULL) {
            return -ENOMEM;
        }
        if (h != NULL) {
            memcpy(nh->data, h->data, h->len);
            nh->len = h->len;
            dm_buf_unref(w, h);
        }
        *b = h = nh;
    }
    memcpy(h->data + h->len, p, n);
    h->len += n;
    return 0;
}

struct dm_buf *
dm_buf_get_exact(struct dm_worker *w, uint32_t cap)
{
    (void)w;
    struct dm_buf *b = malloc(sizeof(*b) + cap);
    if (b != NULL) {
        *b = (struct dm_buf){ .refs = 1, .cap = cap };
    }
    return b;
}

void
dm_buf_read_space(struct dm_worker *w, struct dm_buf **in, uint32_t cap, uv_buf_t *out)
{
    if (*in == NULL) {
        *in = dm_buf_get(w, cap);
    }
    if (*in == NULL) {
        *out = uv_buf_init(NULL, 0);
        return;
    }
    *out = uv_buf_init((*in)->data + (*in)->len, (*in)->cap - (*in)->len);
}

void
dm_buf_unref(struct dm_worker *w, struct dm_buf *b)
{
    if (b == NULL || --b->refs > 0) {
        return;
    }
    if (b->cap == DM_SMALL_CAP && w->nfree_small < DM_FREE_SMALL_MAX) {
        b->next = w->free_small;
        w->free_small = b;
        w->nfree_small++;
        return;
    }
    if (w->rt != NULL && b->cap == w->rt->buf_cap && w->nfree_bufs < DM_FREE_BUFS_MAX) {
        b->next = w->free_bufs;
        w->free_bufs = b;
        w->nfree_bufs++;
        return;
    }
    free(b);
}

static void
free_list(struct dm_buf **list, unsigned *count)
{
    while (*list != NULL) {
        struct dm_buf *b = *list;
        *list = b->next;
        free(b);
    }
    *count = 0;
}

/* Frees the first n of a list; returns their bytes. */
static size_t
free_some(struct dm_buf **list, unsigned *count, unsigned n)
{
    size_t bytes = 0;
    for (; n > 0 && *list != NULL; n--) {
        struct dm_buf *b = *list;
        *list = b->next;
        (*count)--;
        bytes += sizeof(*b) + b->cap;
        free(b);
    }
    return bytes;
}

size_t
dm_buf_decay(struct dm_worker *w)
{
    size_t bytes = free_some(&w->free_bufs, &w->nfree_bufs, w->low_bufs);
    bytes += free_some(&w->free_small, &w->nfree_small, w->low_small);
    for (unsigned n = w->low_reqs; n > 0 && w->free_reqs != NULL; n--) {
        struct dm_req_free *r = w->free_reqs;
        w->free_reqs = r->next;
        w->nfree_reqs--;
        bytes += r->size;
        free(r);
    }
    w->low_bufs = w->nfree_bufs;
    w->low_small = w->nfree_small;
    w->low_reqs = w->nfree_reqs;
    return bytes;
}

/* Frees every pooled buffer and request of the worker. */
void
dm_buf_trim(struct dm_worker *w)
{
    free_list(&w->free_bufs, &w->nfree_bufs);
    free_list(&w->free_small, &w->nfree_small);
    while (w->free_reqs != NULL) {
        struct dm_req_free *r = w->free_reqs;
        w->free_reqs = r->next;
        free(r);
    }
    w->nfree_reqs = 0;
    w->low_bufs = w->low_small = w->low_reqs = 0;
}

struct wreq {
    uv_write_t req;
    struct dm_worker *w;
    dm_write_cb done;
    void *arg;
    unsigned nhold;
    struct dm_buf *hold[4];
};

static void
write_cb(uv_write_t *req, int status)
{
    struct wreq *wr = req->data;
    for (unsigned i = 0; i < wr->nhold; i++) {
        dm_buf_unref(wr->w, wr->hold[i]);
    }
    dm_write_cb done = wr->done;
    void *arg = wr->arg;
    free(wr);
    done(arg, status);
}

int
dm_buf_write(struct dm_worker *w, uv_stream_t *s, uv_buf_t *bufs, unsigned nbufs,
             struct dm_buf **hold, unsigned nhold, dm_write_cb done, void *arg)
{
    size_t total = 0;
    for (unsigned i = 0; i < nbufs; i++) {
        total += bufs[i].len;
    }
    int r = uv_try_write(s, bufs, nbufs);
    if (r >= 0 && (size_t)r == total) {
        return 1;
    }
    if (r < 0 && r != UV_EAGAIN) {
        return r;
    }
    size_t skip = r > 0 ? (size_t)r : 0;
    uv_buf_t rest[4];
    unsigned n = 0;
    for (unsigned i = 0; i < nbufs && n < 4; i++) {
        if (skip >= bufs[i].len) {
            skip -= bufs[i].len;
            continue;
        }
        rest[n++] = uv_buf_init(bufs[i].base + skip, (unsigned)(bufs[i].len - skip));
        skip = 0;
    }
    struct wreq *wr = malloc(sizeof(*wr));
    if (wr == NULL) {
        return UV_ENOMEM;
    }
    wr->w = w;
    wr->done = done;
    wr->arg = arg;
    wr->nhold = nhold < 4 ? nhold : 4;
    for (unsigned i = 0; i < wr->nhold; i++) {
        wr->hold[i] = hold[i];
        hold[i]->refs++;
    }
    wr->req.data = wr;
    r = uv_write(&wr->req, s, rest, n, write_cb);
    if (r < 0) {
        for (unsigned i = 0; i < wr->nhold; i++) {
            dm_buf_unref(w, wr->hold[i]);
        }
        free(wr);
        return r;
    }
    return 0;
}
