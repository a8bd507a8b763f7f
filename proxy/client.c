/*
 * Client connections: see proxy/client.h for the states a request goes
 * through, and proxy/internal.h for the shape of the data path.
 */
#include "proxy/client.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "balancers/balancer.h"
#include "conf/tls.h"
#include "parsers/catalog.h"
#include "proxy/accesslog.h"
#include "proxy/buf.h"
#include "proxy/conn.h"
#include "proxy/learn.h"
#include "proxy/log.h"
#include "proxy/peers.h"
#include "proxy/rate.h"
#include "proxy/request.h"
#include "proxy/route.h"
#include "proxy/tls.h"
#include "proxy/upstream.h"
#include "proxy/worker.h"

#define DM_ERRBUF 512

static const char *
status_text(unsigned status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 501:
        return "Not Implemented";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Error";
    }
}

/*
 * Client timeouts without a timer per connection (an idle keep-alive
 * connection should cost as little memory as possible): each kind of timeout
 * has one list per worker, kept in deadline order, and the worker's tick
 * expires entries from the head. Entries of a kind mostly share one duration,
 * so an insertion almost always lands at the tail; a shorter one (a reload
 * changed the duration, or a request's remaining bound) walks back to its
 * place. The queue (max_conns) is the one kind with a list per size class
 * (queue_order: size) and two of pages (queue_order: page), each in the
 * order of its keys.
 */

/* The list a node of `kind` (and class cls, for DM_T_QUEUE) is on. */
static struct dm_tq *
tq_list(struct dm_worker *w, unsigned kind, unsigned cls)
{
    return kind == DM_T_QUEUE ? &w->queue[cls] : &w->tq[kind];
}

void
dm_tq_remove(struct dm_worker *w, struct dm_tnode *n)
{
    if (n->kind == DM_T_NONE) {
        return;
    }
    struct dm_tq *q = tq_list(w, n->kind, n->cls);
    if (n->prev != NULL) {
        n->prev->next = n->next;
    } else {
        q->head = n->next;
    }
    if (n->next != NULL) {
        n->next->prev = n->prev;
    } else {
        q->tail = n->prev;
    }
    n->prev = n->next = NULL;
    n->kind = DM_T_NONE;
}

/*
 * Puts n on the list of `kind` (of class cls for DM_T_QUEUE), to fire (or be
 * served) at loop time deadline_ms. From the tail: a list's deadlines come
 * in the order they are set, but for a timeout a reload changed, or a
 * queued request put back at its old place after a failed attempt.
 */
static void
tq_insert(struct dm_worker *w, struct dm_tnode *n, enum dm_tkind kind, unsigned cls,
          uint64_t deadline_ms)
{
    dm_tq_remove(w, n);
    struct dm_tq *q = tq_list(w, kind, cls);
    struct dm_tnode *after = q->tail;
    while (after != NULL && after->deadline_ms > deadline_ms) {
        after = after->prev;
    }
    n->deadline_ms = deadline_ms;
    n->kind = (uint8_t)kind;
    n->cls = (uint8_t)cls;
    n->prev = after;
    if (after != NULL) {
        n->next = after->next;
        after->next = n;
    } else {
        n->next = q->head;
        q->head = n;
    }
    if (n->next != NULL) {
        n->next->prev = n;
    } else {
        q->tail = n;
    }
}

_Atomic(uv_async_t *) dm_hold_notify;

static void client_request_rebase(struct dm_client *c);

/* Gives back c's place in its pool's held count. */
static void
hold_release(struct dm_client *c)
{
    if (c->held) {
        c->held = false;
        dm_counter_sub(&c->rt->pools[c->held_pool].held, 1);
    }
}

/* Gives back c's place in its pool's queue (and its worker's count). */
static void
queue_release(struct dm_client *c)
{
    if (c->queued) {
        c->queued = false;
        dm_counter_sub(&c->rt->pools[c->held_pool].queued, 1);
        dm_counter_sub(&c->w->nqueued, 1);
    }
}

void
dm_client_timer_stop(struct dm_client *c)
{
    hold_release(c);
    queue_release(c);
    dm_tq_remove(c->w, &c->timer);
}

/* Moves a span that points into [from, from + n) by delta. */
static void
span_move(struct dm_span *sp, const char *from, size_t n, ptrdiff_t delta)
{
    if (sp->p != NULL && sp->p >= from && sp->p + sp->len <= from + n) {
        sp->p += delta;
    }
}

/*
 * A request about to wait in the queue (or held for a server to wake) moves
 * its head, and what the client sent after it, out of the read buffer
 * (rt->buf_cap, 32 KiB or more) into a buffer of their size and
 * DM_QUEUE_SLACK more: a queue of many thousands costs a few hundred bytes
 * a request, and the read buffer goes back to the pool for the next
 * connection. Only before its first attempt (no rewritten
 * head yet, which would point into it), and only while the read buffer is
 * the request's head buffer and nobody else's. The slack keeps the client
 * read, so that one that goes away is seen; so does room for the body the
 * head announces, up to DM_QUEUE_BODY (a POST sends its body at once: with
 * only the slack its reading would stop, and a client gone meanwhile would
 * not be seen until its request went to a server). One that sends more than
 * that meanwhile is read again once its request goes to a server.
 */
#define DM_QUEUE_SLACK 512
#define DM_QUEUE_BODY  8192

static void
client_shrink_in(struct dm_client *c)
{
    struct dm_req *req = c->req;
    struct dm_buf *in = c->in;
    if (in == NULL || req->head_buf != in || in->refs != 2 || req->out_head != NULL ||
        req->trailers != NULL || c->head_start > in->off || in->off > in->len) {
        return;
    }
    uint32_t keep = in->len - c->head_start;
    uint64_t body = req->info.chunked ? DM_QUEUE_BODY : req->info.content_length;
    uint32_t room = body < DM_QUEUE_BODY ? (uint32_t)body : DM_QUEUE_BODY;
    uint32_t cap = (keep + DM_QUEUE_SLACK + room + 255) & ~255u;
    if (cap >= in->cap) {
        return;
    }
    struct dm_buf *nb = dm_buf_get_exact(c->w, cap);
    if (nb == NULL) {
        return; /* it waits in the read buffer, as before */
    }
    const char *from = in->data + c->head_start;
    memcpy(nb->data, from, keep);
    ptrdiff_t delta = nb->data - from;
    struct dm_http_msg *m = &req->msg;
    span_move(&m->method, from, keep, delta);
    span_move(&m->target, from, keep, delta);
    for (unsigned i = 0; i < m->nfields; i++) {
        span_move(&m->fields[i].name, from, keep, delta);
        span_move(&m->fields[i].value, from, keep, delta);
    }
    span_move(&req->info.host, from, keep, delta);
    span_move(&req->info.path, from, keep, delta);
    nb->off = in->off - c->head_start;
    nb->len = keep;
    nb->refs = 2; /* c->in and req->head_buf, as the old one had */
    c->head_start = 0;
    c->in = nb;
    req->head_buf = nb;
    dm_buf_unref(c->w, in);
    dm_buf_unref(c->w, in);
}

bool
dm_client_hold(struct dm_client *c)
{
    struct dm_req *req = c->req;
    const struct dm_conf_power *pw = &c->rt->conf->pools[req->pool].power;
    struct dm_rpool *p = &c->rt->pools[req->pool];
    uint64_t now = uv_now(&c->w->loop);
    /* The manager keeps hold_off in the newest runtime only: one the worker
     * left is not read (the hold's retry moves the request on anyway). */
    if (!pw->enabled || pw->hold_timeout_ms == 0 ||
        (c->rt == c->w->rt && atomic_load_explicit(&p->hold_off, memory_order_relaxed))) {
        return false;
    }
    if (req->hold_deadline_ms == 0) {
        req->hold_deadline_ms = now + pw->hold_timeout_ms;
    }
    if (now >= req->hold_deadline_ms ||
        atomic_fetch_add_explicit(&p->held, 1, memory_order_relaxed) >= pw->hold_queue) {
        if (now < req->hold_deadline_ms) {
            dm_counter_sub(&p->held, 1);
        }
        return false;
    }
    if (req->attempts == 0) {
        client_shrink_in(c);
    }
    c->held = true;
    c->held_pool = (uint16_t)req->pool;
    tq_insert(c->w, &c->timer, DM_T_HOLD, 0, req->hold_deadline_ms);
    uv_async_t *n = atomic_load(&dm_hold_notify);
    if (n != NULL) {
        uv_async_send(n);
    }
    return true;
}

void
dm_clients_hold_retry(struct dm_worker *w)
{
    /* Taken off whole first: a request that is held again goes on the new list. */
    struct dm_tnode *n = w->tq[DM_T_HOLD].head;
    w->tq[DM_T_HOLD].head = w->tq[DM_T_HOLD].tail = NULL;
    while (n != NULL) {
        struct dm_tnode *next = n->next;
        n->prev = n->next = NULL;
        n->kind = DM_T_NONE;
        struct dm_client *c = (struct dm_client *)((char *)n - offsetof(struct dm_client, timer));
        client_request_rebase(c);
        hold_release(c);
        if (!c->closing && c->req != NULL && c->state == DM_C_CONNECT) {
            dm_req_pick_and_connect(c->req);
        }
        n = next;
    }
}

void
dm_client_queue(struct dm_client *c)
{
    struct dm_req *req = c->req;
    if (c->queued) {
        return; /* still no place: it keeps its turn */
    }
    struct dm_rpool *p = &c->rt->pools[req->pool];
    uint64_t now = uv_now(&c->w->loop);
    if (req->queue_deadline_ms == 0) {
        uint64_t queue_ms = c->rt->conf->timeouts.queue_ms;
        req->queue_deadline_ms = now + queue_ms;
        req->queue_key_ms = now;
        req->queue_class = 0;
        if (p->cf->queue_order == DM_QO_PAGE) {
            /* Its page's start (no earlier than page_bound ago) plus
             * page_bound, from now on; at now, the page is late already. */
            uint64_t bound = p->cf->page_bound_ms;
            uint64_t age = (uint32_t)((uint32_t)now - c->page_start_ms);
            uint64_t key = now - (age < bound ? age : bound) + bound;
            req->queue_key_ms = key > now ? key : key + DM_QUEUE_LATE_MS;
            req->queue_class = key > now ? DM_QUEUE_PAGE : DM_QUEUE_LATE;
            req->queue_deadline_ms = key + queue_ms;
        } else if (p->cf->queue_order == DM_QO_SIZE) {
            uint64_t dflt = c->rt->conf->catalog.default_object_bytes;
            struct dm_catalog *cat = c->rt->catalog;
            uint64_t size = cat != NULL ? dm_catalog_size(cat, req->key, dflt) : dflt;
            unsigned cls = dm_queue_class(size);
            req->queue_class = (uint8_t)cls;
            req->queue_key_ms += dm_queue_class_offset_us(cls, queue_ms * 1000) / 1000;
        }
    }
    if (now >= req->queue_deadline_ms) {
        dm_counter_add(&p->queue_timeouts, 1);
        dm_client_respond_error(c, 503, "no server had a place within timeouts.queue");
        return;
    }
    unsigned max = p->cf->max_queue;
    uint64_t before = atomic_fetch_add_explicit(&p->queued, 1, memory_order_relaxed);
    if (max != 0 && before >= max) {
        dm_counter_sub(&p->queued, 1);
        dm_counter_add(&p->queue_full, 1);
        dm_client_respond_error(c, 503, "every server at max_conns and the queue full (max_queue)");
        return;
    }
    uint64_t peak = dm_counter_get(&p->queue_peak);
    while (before + 1 > peak &&
           !atomic_compare_exchange_weak_explicit(&p->queue_peak, &peak, before + 1,
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
    if (req->attempts == 0) {
        client_shrink_in(c);
    }
    dm_client_timer_stop(c);
    c->queued = true;
    c->held_pool = (uint16_t)req->pool;
    dm_counter_add(&c->w->nqueued, 1);
    tq_insert(c->w, &c->timer, DM_T_QUEUE, req->queue_class, req->queue_key_ms);
    /* A place freed between the full pick and the counts above woke nobody:
     * this worker looks again on its next loop pass. */
    dm_workers_queue_kick_self(c->w);
}

void
dm_client_unqueue(struct dm_client *c)
{
    if (c->queued) {
        queue_release(c);
        dm_tq_remove(c->w, &c->timer);
    }
}

/*
 * queue_order: page: the requests whose page's bound has passed go after
 * every other, in the order of their pages. They leave the page list from
 * its head (it is in that order), each once.
 */
static void
queue_late(struct dm_worker *w, uint64_t now)
{
    struct dm_tnode *n;
    while ((n = w->queue[DM_QUEUE_PAGE].head) != NULL && n->deadline_ms <= now) {
        struct dm_client *c = (struct dm_client *)((char *)n - offsetof(struct dm_client, timer));
        c->req->queue_key_ms = n->deadline_ms + DM_QUEUE_LATE_MS;
        c->req->queue_class = DM_QUEUE_LATE;
        tq_insert(w, n, DM_T_QUEUE, DM_QUEUE_LATE, c->req->queue_key_ms);
    }
}

void
dm_clients_queue_retry(struct dm_worker *w)
{
    /*
     * In turn from the first: each takes a place or stays where it is. Past
     * one that stays having tried no server yet, the others of its pool
     * would stay as well (they see the same full servers), so the pass
     * stops once every pool with a limit has had such a one stay; one that
     * stays after a failed attempt (its tried servers left out) does not
     * stop the others. A pass after a reload, or with more than 64 pools,
     * may stop early for a pool: the next place freed, or the next tick,
     * tries again.
     */
    uint64_t stayed = 0;
    queue_late(w, uv_now(&w->loop));
    struct dm_tnode *at[DM_QUEUE_LISTS]; /* each list's next */
    for (unsigned k = 0; k < DM_QUEUE_LISTS; k++) {
        at[k] = w->queue[k].head;
    }
    for (;;) {
        /* The smallest key of the lists' next (of two alike, the smaller list's). */
        unsigned best = DM_QUEUE_LISTS;
        for (unsigned k = 0; k < DM_QUEUE_LISTS; k++) {
            if (at[k] != NULL &&
                (best == DM_QUEUE_LISTS || at[k]->deadline_ms < at[best]->deadline_ms)) {
                best = k;
            }
        }
        if (best == DM_QUEUE_LISTS) {
            break;
        }
        struct dm_tnode *n = at[best];
        /* n->next is still queued afterwards: only c's own request moves. */
        at[best] = n->next;
        struct dm_client *c = (struct dm_client *)((char *)n - offsetof(struct dm_client, timer));
        uint64_t bit = 1ull << (c->held_pool % 64);
        if ((stayed & bit) == 0) {
            if (c->rt != w->rt) {
                /* A reload came: its pool in the new config, picked from at once
                 * (queued there again if full; never left out of every queue). */
                client_request_rebase(c);
                bit = 1ull << (c->req->pool % 64);
            }
            bool fresh = c->req->attempts == 0;
            dm_req_pick_and_connect(c->req);
            if (n->kind == DM_T_QUEUE && fresh) {
                stayed |= bit;
                unsigned limited = c->rt->nlimited;
                if ((unsigned)__builtin_popcountll(stayed) >= (limited < 64 ? limited : 64)) {
                    break;
                }
            }
        }
    }
}

bool
dm_client_session_wait(struct dm_client *c)
{
    struct dm_req *req = c->req;
    const struct dm_conf *cf = c->rt->conf;
    uint64_t now = uv_now(&c->w->loop);
    if (req->session_deadline_ms == 0) {
        req->session_deadline_ms =
            now + cf->pools[req->pool].session.window_ms + cf->timeouts.connect_ms;
    }
    if (now >= req->session_deadline_ms) {
        return false;
    }
    tq_insert(c->w, &c->timer, DM_T_SESSION, 0, req->session_deadline_ms);
    return true;
}

void
dm_clients_session_retry(struct dm_worker *w)
{
    /* Taken off whole first: one that still waits goes on the new list. */
    struct dm_tnode *n = w->tq[DM_T_SESSION].head;
    w->tq[DM_T_SESSION].head = w->tq[DM_T_SESSION].tail = NULL;
    while (n != NULL) {
        struct dm_tnode *next = n->next;
        n->prev = n->next = NULL;
        n->kind = DM_T_NONE;
        struct dm_client *c = (struct dm_client *)((char *)n - offsetof(struct dm_client, timer));
        if (!c->closing && c->req != NULL && c->state == DM_C_CONNECT) {
            dm_req_pick_and_connect(c->req);
        }
        n = next;
    }
}

/* Arms the client's timeout of `kind` for ms from now; 0 leaves it on no list. */
static void
client_timer_start(struct dm_client *c, enum dm_tkind kind, uint64_t ms)
{
    queue_release(c);
    if (ms == 0) {
        dm_client_timer_stop(c);
        return;
    }
    tq_insert(c->w, &c->timer, kind, 0, uv_now(&c->w->loop) + ms);
}

static void client_timeout(struct dm_client *c, enum dm_tkind kind);

/*
 * Each class's list is in the order of its keys (queue_key_ms), arrival plus
 * the class's offset, so in the order of its deadlines, arrival plus
 * timeouts.queue: the requests to time out are at the heads. (A reload that
 * shortens timeouts.queue may leave a newer, shorter deadline behind older
 * ones for at most the old timeout.)
 */
static void
queue_expire(struct dm_worker *w, uint64_t now)
{
    for (unsigned k = 0; k < DM_QUEUE_LISTS; k++) {
        struct dm_tnode *n;
        while ((n = w->queue[k].head) != NULL) {
            struct dm_client *c =
                (struct dm_client *)((char *)n - offsetof(struct dm_client, timer));
            if (c->req->queue_deadline_ms > now) {
                break;
            }
            dm_tq_remove(w, n);
            client_timeout(c, DM_T_QUEUE);
        }
    }
}

void
dm_clients_expire(struct dm_worker *w)
{
    uint64_t now = uv_now(&w->loop);
    for (int k = DM_T_NONE + 1; k < DM_T_KINDS; k++) {
        /* Bounded: each pass takes the head off the list (a body window that
         * is re-armed goes back to a later deadline). */
        struct dm_tnode *n;
        if (k == DM_T_QUEUE) {
            queue_expire(w, now);
            continue;
        }
        while ((n = w->tq[k].head) != NULL && n->deadline_ms <= now) {
            dm_tq_remove(w, n);
            struct dm_client *c =
                k == DM_T_REQUEST
                    ? ((struct dm_req *)((char *)n - offsetof(struct dm_req, bound)))->c
                : k == DM_T_SEND
                    ? (struct dm_client *)((char *)n - offsetof(struct dm_client, send_timer))
                    : (struct dm_client *)((char *)n - offsetof(struct dm_client, timer));
            client_timeout(c, (enum dm_tkind)k);
        }
    }
}

static void
client_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct dm_client *c = h->data;
    dm_buf_read_space(c->w, &c->in, c->rt->buf_cap, buf);
}

/* A TLS client's ciphertext goes to the worker's scratch: it is fed to OpenSSL at once. */
static void
client_tls_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    dm_tls_scratch(((struct dm_client *)h->data)->w, buf);
}

static void client_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void client_eof(struct dm_client *c);
static void client_tls_pump(void *arg);

void
dm_client_read_start(struct dm_client *c)
{
    if (!c->reading && !c->closing && !c->eof && !c->tls_wait) {
        uv_alloc_cb alloc = c->tls != NULL ? client_tls_alloc_cb : client_alloc_cb;
        if (uv_read_start((uv_stream_t *)&c->tcp, alloc, client_read_cb) == 0) {
            c->reading = true;
            /* What OpenSSL or the stash holds would wait for a read that may never come. */
            if (c->tls != NULL && dm_tls_buffered(c->tls)) {
                dm_tls_schedule(c->tls, client_tls_pump, c);
            }
        }
    }
}

void
dm_client_read_stop(struct dm_client *c)
{
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

static void
client_free_cb(uv_handle_t *h)
{
    struct dm_client *c = h->data;
    struct dm_worker *w = c->w;
    dm_sockets_add(-1, true);
    dm_runtime_unref(c->rt);
    if (c->tls_rt != NULL) {
        dm_runtime_unref(c->tls_rt);
    }
    free(c);
    (void)w;
}

void
dm_client_bind(struct dm_client *c, size_t pool, int server)
{
    if (c->bound >= 0) {
        dm_counter_sub(&dm_runtime_host(c->rt, c->bound_pool, c->bound)->bound, 1);
    }
    c->bound = server;
    c->bound_pool = (uint16_t)pool;
    if (server >= 0) {
        dm_counter_add(&dm_runtime_host(c->rt, pool, server)->bound, 1);
    }
}

/*
 * A connection older than its worker's configuration (a reload came since)
 * takes the new one as its next request begins: its routes, pools, servers,
 * limits and timeouts. (nginx and HAProxy close such connections after a
 * reload, at their next idle moment; this keeps them.) Its affinity stays
 * when the new configuration's pool of the same name has its server (the
 * same host); the page it was loading, if any, no longer counts as aged
 * potential load. A TLS connection keeps the configuration it was accepted
 * under as well, whose certificates and names its session reads.
 */
static void
client_rebase(struct dm_client *c)
{
    struct dm_runtime *old = c->rt, *rt = c->w->rt;
    if (old == rt) {
        return;
    }
    /* The same pool (by name) and server (by host) in the new one, if any. */
    size_t to_pool = 0;
    int to_server = -1;
    for (size_t p = 0; c->bound >= 0 && p < rt->npools; p++) {
        if (strcmp(rt->conf->pools[p].name, old->conf->pools[c->bound_pool].name) == 0) {
            if (rt->pools[p].cf->affinity_connection) {
                to_server =
                    dm_runtime_find_host(rt, p, dm_runtime_host(old, c->bound_pool, c->bound));
                to_pool = to_server >= 0 ? p : 0;
            }
            break;
        }
    }
    dm_learn_client_close(c);
    dm_client_bind(c, 0, -1);
    c->rt = rt;
    dm_runtime_ref(rt);
    if (c->tls != NULL && c->tls_rt == NULL) {
        c->tls_rt = old; /* its reference moves */
    } else {
        dm_runtime_unref(old);
    }
    dm_client_bind(c, to_pool, to_server);
}

/* The request's catalog key, when its pool keys them. */
static void
client_key(struct dm_client *c, struct dm_req *req)
{
    if (c->rt->pools[req->pool].keyed) {
        /* A connection whose page came from a host-less preload keys its
         * objects without host too, so that they match the page's list. */
        bool any = c->any_host;
        req->key = dm_catalog_key(any ? "" : req->info.host.p, any ? 0 : req->info.host.len,
                                  req->info.path.p, req->info.path.len);
    }
}

/* The request's pool by the routes of c's config, and its catalog key when the pool keys them. */
static void
client_route(struct dm_client *c, struct dm_req *req)
{
    req->pool = dm_routes_match(c->rt->routes, c->rt->conf, req->info.host.p, req->info.host.len,
                                req->info.path.p, req->info.path.len);
    client_key(c, req);
}

/*
 * The request's tried and passed servers, as bitmaps sized for the worker's
 * runtime's largest pool (a block of its own when that is larger), all
 * clear: the indices of the old one mean nothing in the new. False when out
 * of memory (the request then stays where it is).
 */
static bool
tried_rebase(struct dm_client *c)
{
    struct dm_req *req = c->req;
    uint32_t need = c->w->rt->tried_bytes > 0 ? c->w->rt->tried_bytes : 1;
    if (need > req->tried_bytes) {
        uint8_t *t = calloc(2, need);
        if (t == NULL) {
            return false;
        }
        if (req->tried_own) {
            free(req->tried);
        }
        req->tried = t;
        req->tried_bytes = need;
        req->tried_own = true;
    } else {
        memset(req->tried, 0, 2 * (size_t)req->tried_bytes);
    }
    return true;
}

/*
 * A request that waits for a server (held while every server sleeps, or
 * queued under max_conns) when a reload comes moves to the new
 * configuration with its connection, as a later request would: routed
 * again, it waits in the new configuration's pool, where the power manager
 * counts it and the new limits apply. (In the old one the manager, which
 * reads the new, no longer saw it, and woke nothing for it.) One already
 * sent to a server, or of a session pool, stays where it began.
 */
static void
client_request_rebase(struct dm_client *c)
{
    struct dm_req *req = c->req;
    if (c->rt == c->w->rt || c->closing || req == NULL || c->state != DM_C_CONNECT ||
        req->up != NULL || req->attempts != 0 || c->rt->pools[req->pool].placer != NULL) {
        return;
    }
    if (!tried_rebase(c)) {
        return; /* it stays where it is */
    }
    hold_release(c);
    dm_client_unqueue(c); /* queued again in the new pool if no place is free there */
    client_rebase(c);
    client_route(c, req);
}

int
dm_client_session_rebase(struct dm_client *c, const struct dm_placer *placer)
{
    struct dm_runtime *rt = c->w->rt;
    struct dm_req *req = c->req;
    if (c->rt == rt || req->up != NULL) {
        return -1;
    }
    for (size_t i = 0; i < rt->npools; i++) {
        if (rt->pools[i].placer == placer) {
            if (!tried_rebase(c)) {
                return -1;
            }
            client_rebase(c);
            req->pool = i;
            client_key(c, req);
            return (int)i;
        }
    }
    return -1;
}

/* Closes the client and abandons its request (and that request's server connection). */
void
dm_client_close(struct dm_client *c)
{
    if (c->closing) {
        return;
    }
    c->closing = true;
    struct dm_worker *w = c->w;
    struct dm_req *req = c->req;
    if (req != NULL) {
        if (req->head_done && !req->logged) {
            /* Ends with the connection: a tunnel that closed, or a request
             * cut short (its response, or the client gone first: nginx's
             * 499). Logged and counted here, once. */
            req->cut = c->state != DM_C_TUNNEL;
            if (req->cut && !req->resp_started) {
                req->status = 499;
            }
            dm_accesslog_write(req);
        }
        if (req->up != NULL) {
            struct dm_upstream *up = req->up;
            req->up = NULL;
            up->req = NULL;
            dm_upstream_close(up);
        }
        dm_learn_work_done(req, req->work);
        dm_req_unpick(req); /* a request counted against its server ends here */
        dm_req_free(w, req);
        c->req = NULL;
    }
    dm_learn_client_close(c);
    dm_client_bind(c, 0, -1);
    dm_buf_unref(w, c->in);
    c->in = NULL;
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        w->clients = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    w->nclients--;
    dm_stat_add(&w->lstats[c->listener].open, (uint64_t)-1);
    if (c->peer_counted) {
        dm_peers_release(&c->peer.sa);
        c->peer_counted = false;
    }
    dm_client_timer_stop(c);
    dm_tq_remove(w, &c->send_timer);
    if (c->tls != NULL) {
        /* The close_notify, if the socket takes it now (nothing else is
         * queued when a connection closes in order). */
        dm_tls_shutdown(c->tls);
        struct dm_buf *b;
        while ((b = dm_tls_take_output(c->tls)) != NULL) {
            uv_buf_t ub = uv_buf_init(b->data, b->len);
            (void)uv_try_write((uv_stream_t *)&c->tcp, &ub, 1);
            dm_buf_unref(w, b);
        }
        dm_tls_free(c->tls);
        c->tls = NULL;
    }
    uv_close((uv_handle_t *)&c->tcp, client_free_cb);
}

/* timeouts.client_send from now on, with `queued` bytes left to take. */
static void
client_send_arm(struct dm_client *c, size_t queued)
{
    c->send_mark = queued;
    tq_insert(c->w, &c->send_timer, DM_T_SEND, 0,
              uv_now(&c->w->loop) + c->rt->conf->timeouts.client_send_ms);
}

static int client_tls_flush(struct dm_client *c);

/* Called when writes to the client complete. */
static void
client_write_done(void *arg, int status)
{
    struct dm_client *c = arg;
    c->writes--;
    if (c->closing) {
        return;
    }
    if (status < 0) {
        dm_client_close(c);
        return;
    }
    /* TLS output held while the socket was busy (dm_tls_flush) goes now:
     * the last write done, nothing is held. */
    if (c->tls != NULL && c->tls->out != NULL && client_tls_flush(c) < 0) {
        c->close_after = true;
    }
    if (c->close_after && c->writes == 0) {
        dm_client_close(c);
        return;
    }
    /* The client took bytes: timeouts.client_send starts again, or stops
     * with nothing left queued. */
    size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    if (queued > 0) {
        client_send_arm(c, queued);
    } else {
        dm_tq_remove(c->w, &c->send_timer);
    }
    /* TLS's own answers taken: its input is read again, unless something
     * else wants it stopped (the server's back-pressure, a close). */
    if (c->tls_wait && queued < DM_WRITE_HIGH) {
        c->tls_wait = false;
        if (!c->paused && !c->close_after && !c->write_wait) {
            dm_client_read_start(c);
        }
    }
    /* Back-pressure: the server side paused while this queue was full. */
    struct dm_upstream *up = c->req != NULL ? c->req->up : NULL;
    if (up != NULL && up->paused && queued < DM_WRITE_HIGH) {
        up->paused = false;
        dm_upstream_resume(up);
    }
    if (c->write_wait && queued == 0) {
        c->write_wait = false;
        dm_client_read_start(c);
        dm_client_process(c);
    }
}

/*
 * Writes the ciphertext TLS left in its output to the client, four buffers
 * to a write. 0, or <0 when a write failed (the rest is dropped).
 */
static int
client_tls_flush(struct dm_client *c)
{
    int r = dm_tls_flush(c->tls, (uv_stream_t *)&c->tcp, client_write_done, c, &c->writes);
    return r < 0 ? r : 0;
}

/* Writes to a TLS client: encrypted (copied), then written. 0 or <0. */
static int
client_tls_write(struct dm_client *c, uv_buf_t *bufs, unsigned n)
{
    if (dm_tls_writev(c->tls, bufs, n) < 0) {
        char addr[INET6_ADDRSTRLEN];
        dm_accesslog_client_addr(c, addr, sizeof(addr));
        dm_log_warn("client %s: TLS: %s", addr, dm_tls_error(c->tls));
        client_tls_flush(c);
        return UV_EPROTO;
    }
    return client_tls_flush(c);
}

/* Writes to the client; bufs reference hold[] (kept until written). */
void
dm_client_write(struct dm_client *c, uv_buf_t *bufs, unsigned n, struct dm_buf **hold,
                unsigned nhold)
{
    size_t before = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    int r;
    if (c->tls != NULL) {
        r = client_tls_write(c, bufs, n);
    } else {
        r = dm_buf_write(c->w, (uv_stream_t *)&c->tcp, bufs, n, hold, nhold, client_write_done, c);
        c->writes += r == 0;
    }
    if (r >= 0) {
        /* What the socket did not take at once is bounded by timeouts.client_send. */
        size_t after = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
        if (c->send_timer.kind != DM_T_NONE) {
            c->send_mark += after > before ? after - before : 0;
        } else if (after > 0) {
            client_send_arm(c, after);
        }
    } else if (r < 0) {
        c->close_after = true;
        if (c->writes == 0) {
            dm_client_close(c);
        }
    }
}

/* Closes the client now if nothing is in flight, else after the last write. */
void
dm_client_close_when_written(struct dm_client *c)
{
    c->close_after = true;
    if (c->writes == 0) {
        dm_client_close(c);
    }
}

/* Answers the current request with an error and closes the connection. */
/*
 * Whether a client's own error (a 4xx) gets its line in the error log: at
 * most DM_CLIENT_ERR_LINES a second a worker, so that one client sending bad
 * requests as fast as it can does not fill the log (the access log still has
 * each). The count of those left out is logged once the second is over
 * (dm_clients_err_roll, from the worker's tick).
 */
void
dm_clients_err_roll(struct dm_worker *w)
{
    uint64_t sec = uv_now(&w->loop) / 1000;
    if (sec != w->client_err_sec) {
        if (w->client_err_dropped > 0) {
            dm_log_warn("worker %u: %llu more client errors (4xx) not logged in %llu s", w->id,
                        (unsigned long long)w->client_err_dropped,
                        (unsigned long long)(sec - w->client_err_sec));
        }
        w->client_err_sec = sec;
        w->client_err_lines = 0;
        w->client_err_dropped = 0;
    }
}

static bool
client_err_loggable(struct dm_worker *w)
{
    dm_clients_err_roll(w);
    if (w->client_err_lines >= DM_CLIENT_ERR_LINES) {
        w->client_err_dropped++;
        return false;
    }
    w->client_err_lines++;
    return true;
}

void
dm_client_respond_error(struct dm_client *c, unsigned status, const char *reason)
{
    struct dm_req *req = c->req;
    char addr[INET6_ADDRSTRLEN];
    dm_accesslog_client_addr(c, addr, sizeof(addr));
    if (req != NULL && req->resp_started) {
        dm_log_warn("client %s: response cut short: %s", addr, reason);
    } else if (status >= 500 || client_err_loggable(c->w)) {
        dm_log_warn("client %s: %u %s", addr, status, reason);
    }
    if (req != NULL && req->up != NULL) {
        struct dm_upstream *up = req->up;
        req->up = NULL;
        up->req = NULL;
        dm_upstream_close(up);
    }
    dm_client_read_stop(c);
    dm_client_timer_stop(c);
    if (req != NULL && req->resp_started) {
        /* Part of a response went out already: all we can do is close. */
        dm_client_close(c);
        return;
    }
    struct dm_buf *b = dm_buf_get(c->w, DM_ERRBUF);
    if (b == NULL) {
        dm_client_close(c);
        return;
    }
    char body[256];
    int blen = snprintf(body, sizeof(body), "%u %s: %s\n", status, status_text(status), reason);
    /* A 503 says when to come back: a power-managed pool's boot time, else 1 s. */
    char retry[40] = "";
    if (status == 503) {
        uint64_t s = 1;
        if (req != NULL && c->rt->conf->pools[req->pool].power.enabled) {
            s = (c->rt->conf->pools[req->pool].power.boot_ms + 999) / 1000;
        }
        snprintf(retry, sizeof(retry), "Retry-After: %llu\r\n",
                 (unsigned long long)(s > 0 ? s : 1));
    }
    int n = snprintf(b->data, b->cap,
                     "HTTP/1.1 %u %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                     "%sConnection: close\r\n\r\n%s",
                     status, status_text(status), blen, retry, body);
    if (n < 0 || (uint32_t)n >= b->cap) {
        n = 0;
    }
    b->len = (uint32_t)n;
    if (req != NULL) {
        req->status = status;
        req->resp_bytes = (uint64_t)n;
        req->resp_head_bytes = (uint64_t)(n >= blen ? n - blen : n);
        req->resp_started = true;
        dm_accesslog_write(req);
    }
    uv_buf_t out = uv_buf_init(b->data, b->len);
    c->close_after = true;
    dm_client_write(c, &out, 1, &b, 1);
    dm_buf_unref(c->w, b);
    if (!c->closing && c->writes == 0) {
        dm_client_close(c);
    }
}

void
dm_client_body_window(struct dm_client *c)
{
    c->req->body_mark = c->req->body_raw;
    client_timer_start(c, DM_T_BODY, c->rt->conf->timeouts.client_body_ms);
}

static void
client_timeout(struct dm_client *c, enum dm_tkind kind)
{
    struct dm_req *req = c->req;
    switch (kind) {
    case DM_T_HEADER:
        /* The whole head is bounded, however it trickles in (as HAProxy's
         * timeout http-request); a connection that sent nothing just closes. */
        if (c->state == DM_C_HEAD && c->in != NULL && c->in->len > c->head_start) {
            dm_client_respond_error(c, 408, "request head not received in time");
        } else {
            dm_client_close(c);
        }
        break;
    case DM_T_BODY: {
        if (req == NULL || c->state != DM_C_BODY) {
            break; /* a retry went back to CONNECT: the window restarts when it is ready */
        }
        const struct dm_conf *cf = c->rt->conf;
        /* Durations are at most 1000 h and the rate 1 GiB/s: no overflow. */
        uint64_t need = cf->limits.body_min_rate * cf->timeouts.client_body_ms / 1000;
        /* While the proxy does not read (the server is slower than the client),
         * or the client waits for the server's 100 Continue (the server's
         * silence is bounded by timeouts.server_response meanwhile), the client
         * is not to blame: that window does not count. */
        bool waiting = req->info.expect_continue && !req->continued && req->body_raw == 0;
        if (c->paused || !c->reading || waiting ||
            req->body_raw - req->body_mark >= (need > 0 ? need : 1)) {
            dm_client_body_window(c);
            break;
        }
        dm_client_respond_error(c, 408, "request body slower than limits.body_min_rate");
        break;
    }
    case DM_T_REQUEST:
        dm_client_respond_error(c, 504, "request took longer than timeouts.request");
        break;
    case DM_T_HOLD:
        hold_release(c);
        dm_client_respond_error(c, 503, "no server woke within power.hold_timeout");
        break;
    case DM_T_SESSION:
        dm_client_respond_error(c, 503,
                                "session not placed within session.window + timeouts.connect");
        break;
    case DM_T_QUEUE:
        queue_release(c);
        dm_counter_add(&c->rt->pools[req->pool].queue_timeouts, 1);
        dm_client_respond_error(c, 503, "no server had a place within timeouts.queue");
        break;
    case DM_T_SEND: {
        /* Bytes are queued for the client: it must take some of them in every
         * timeouts.client_send (nginx's send_timeout); else the connection
         * closes, and with it the server connection of its request. */
        size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
        if (queued == 0) {
            break;
        }
        if (queued < c->send_mark) {
            client_send_arm(c, queued); /* it took some since the last check */
            break;
        }
        const char *why = "client took nothing for timeouts.client_send";
        if (req != NULL && req->resp_started) {
            dm_client_respond_error(c, 0, why); /* logs the cut response, closes */
            break;
        }
        char addr[INET6_ADDRSTRLEN];
        dm_accesslog_client_addr(c, addr, sizeof(addr));
        dm_log_warn("client %s: closed: %s (%zu bytes queued)", addr, why, queued);
        dm_client_close(c);
        break;
    }
    case DM_T_KEEPALIVE:
        if (c->writes > 0) {
            /* Not idle while a response is still going out (timeouts.client_send
             * bounds that): the keep-alive bound starts again. */
            client_timer_start(c, DM_T_KEEPALIVE, c->rt->conf->timeouts.client_keepalive_ms);
            break;
        }
        dm_client_close(c);
        break;
    default:
        dm_client_close(c);
        break;
    }
}

/*
 * Makes sure the read buffer has room for a whole head from `off` on: compact it
 * when we are its only user, else move the unparsed bytes to a fresh buffer.
 */
static int
client_make_room(struct dm_client *c)
{
    struct dm_buf *in = c->in;
    uint32_t need = (uint32_t)c->rt->conf->limits.header_bytes + 1024;
    if (in == NULL) {
        return 0;
    }
    if (in->cap - in->off >= need && in->cap - in->len > 0) {
        return 0;
    }
    uint32_t rest = in->len - in->off;
    if (in->refs == 1 && in->cap >= need) { /* a waiting request's buffer is smaller */
        memmove(in->data, in->data + in->off, rest);
        in->off = 0;
        in->len = rest;
        return 0;
    }
    /* What a reload's smaller limits.header_bytes would not hold still fits. */
    struct dm_buf *nb = dm_buf_get(c->w, rest > c->rt->buf_cap ? rest : c->rt->buf_cap);
    if (nb == NULL) {
        return -ENOMEM;
    }
    memcpy(nb->data, in->data + in->off, rest);
    nb->len = rest;
    dm_buf_unref(c->w, in);
    c->in = nb;
    return 0;
}

static bool
client_start_request(struct dm_client *c)
{
    client_rebase(c);
    if (client_make_room(c) < 0) {
        dm_client_close(c);
        return false;
    }
    c->req = dm_req_get(c);
    if (c->req == NULL) {
        dm_client_close(c);
        return false;
    }
    c->parser.msg = &c->req->msg;
    c->parser.on_body = NULL;
    c->head_start = c->in->off;
    c->state = DM_C_HEAD;
    /* The first request's head is bounded from the accept on (its timer runs
     * already); a later one's from its first byte. */
    if (c->timer.kind != DM_T_HEADER) {
        client_timer_start(c, DM_T_HEADER, c->rt->conf->timeouts.client_header_ms);
    }
    return true;
}

void
dm_client_forward_slice(struct dm_client *c, uint32_t from, uint32_t to)
{
    struct dm_req *req = c->req;
    if (req->up == NULL) {
        return;
    }
    uv_buf_t b[2];
    struct dm_buf *hold[2];
    unsigned n = 0;
    if (req->head_pending) {
        req->head_pending = false;
        b[n] = uv_buf_init(req->out_head->data, req->out_head->len);
        hold[n++] = req->out_head;
    }
    if (to > from) {
        b[n] = uv_buf_init(c->in->data + from, to - from);
        hold[n++] = c->in;
        req->body_sent = true;
    }
    if (n > 0) {
        dm_upstream_write(req->up, b, n, hold, n);
    }
}

/*
 * Copies [from, to) of the read buffer to the request's held trailer section,
 * growing it up to limits.header_bytes. Returns 0, or <0 once the client has
 * been answered (431, or 500 when out of memory).
 */
static int
client_hold_trailers(struct dm_client *c, uint32_t from, uint32_t to)
{
    struct dm_req *req = c->req;
    struct dm_buf *t = req->trailers;
    uint32_t n = to - from;
    if ((size_t)t->len + n > c->rt->conf->limits.header_bytes) {
        dm_client_respond_error(c, 431, "request trailers larger than limits.header_bytes");
        return -1;
    }
    if (dm_buf_append(c->w, &req->trailers, c->in->data + from, n) < 0) {
        dm_client_respond_error(c, 500, "out of memory");
        return -1;
    }
    return 0;
}

/* Whether the trailer section t has a field called name (any case). */
static bool
trailers_name(const struct dm_buf *t, const char *name)
{
    size_t n = strlen(name);
    const char *p = t->data, *end = t->data + t->len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *colon = memchr(p, ':', (size_t)((eol != NULL ? eol : end) - p));
        if (colon != NULL && (size_t)(colon - p) == n && strncasecmp(p, name, n) == 0) {
            return true;
        }
        if (eol == NULL) {
            break;
        }
        p = eol + 1;
    }
    return false;
}

/* The request's trailer section is whole: checked, then forwarded (or 400). */
static int
client_send_trailers(struct dm_client *c)
{
    struct dm_req *req = c->req;
    const char *reason = NULL;
    if (dm_http_check_trailers(req->trailers->data, req->trailers->len, &reason) != 0) {
        dm_client_respond_error(c, 400, reason);
        return -1;
    }
    if (c->tls != NULL && c->tls->subject_header != NULL &&
        trailers_name(req->trailers, c->tls->subject_header)) {
        /* What only dimmer may set never comes from the client, in a trailer either. */
        dm_client_respond_error(c, 400, "trailer field named as client_subject_header");
        return -1;
    }
    if (req->up != NULL) {
        uv_buf_t b = uv_buf_init(req->trailers->data, req->trailers->len);
        dm_upstream_write(req->up, &b, 1, &req->trailers, 1);
    }
    return 0;
}

/* After forwarding: a full buffer is recycled or handed over to its writers. */
static void
client_recycle_in(struct dm_client *c)
{
    struct dm_buf *in = c->in;
    if (in == NULL || in->off != in->len) {
        return;
    }
    if (in->refs == 1) {
        in->off = in->len = 0;
        if (c->state == DM_C_IDLE) {
            dm_buf_unref(c->w, in);
            c->in = NULL;
        }
    } else if (in->len == in->cap || c->state == DM_C_IDLE) {
        dm_buf_unref(c->w, in);
        c->in = NULL;
    }
}

/*
 * limits.rate: takes a token from the client address's bucket, and with none
 * left answers 429 with a Retry-After (whole seconds until a token is back)
 * and forwards nothing. A bodiless HTTP/1.1 keep-alive request leaves the
 * connection ready for the next one, as nginx's limit_req does; any other
 * request (a body left unread, HTTP/1.0, an upgrade) has it closed after the
 * answer. Returns false when the request may go on, true when it was
 * answered: then c is idle again (true with c->state DM_C_IDLE) or closing.
 */
static bool
client_over_rate(struct dm_client *c)
{
    const struct dm_conf_limits *l = &c->rt->conf->limits;
    struct dm_req *req = c->req;
    /* The loop's cached time: no clock read per request. */
    uint64_t wait_ms = dm_rate_take(&c->peer.sa, l->rate, l->burst, uv_now(&c->w->loop));
    if (wait_ms == 0) {
        return false;
    }
    dm_counter_add(&c->w->refused_rate, 1);
    size_t used = 0;
    bool keep = !req->info.chunked && req->info.content_length == 0 && !req->info.upgrade &&
                req->info.keep_alive && dm_http_parser_version(&c->parser) >= 11 &&
                !c->w->stopping && !c->eof &&
                dm_http_parse(&c->parser, c->in->data + c->in->off, 0, &used) == DM_HTTP_MSG_DONE;
    struct dm_buf *b = dm_buf_get(c->w, DM_ERRBUF);
    if (b == NULL) {
        dm_client_close(c);
        return true;
    }
    static const char body[] = "429 Too Many Requests: over limits.rate for this address\n";
    int n = snprintf(b->data, b->cap,
                     "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain\r\n"
                     "Content-Length: %zu\r\nRetry-After: %u\r\n%s\r\n%s",
                     sizeof(body) - 1, dm_rate_retry_after_s(wait_ms),
                     keep ? "" : "Connection: close\r\n",
                     dm_span_ieq(req->msg.method, "head") ? "" : body);
    if (n < 0 || (uint32_t)n >= b->cap) {
        n = 0;
    }
    b->len = (uint32_t)n;
    req->status = 429;
    req->resp_bytes = (uint64_t)n;
    size_t blen = dm_span_ieq(req->msg.method, "head") ? 0 : sizeof(body) - 1;
    req->resp_head_bytes = (uint64_t)n >= blen ? (uint64_t)n - blen : (uint64_t)n;
    req->resp_started = true;
    dm_accesslog_write(req);
    uv_buf_t out = uv_buf_init(b->data, b->len);
    dm_client_timer_stop(c);
    if (!keep) {
        dm_client_read_stop(c);
        c->close_after = true;
    }
    dm_client_write(c, &out, 1, &b, 1);
    dm_buf_unref(c->w, b);
    if (c->closing) {
        return true;
    }
    if (!keep) {
        if (c->writes == 0) {
            dm_client_close(c);
        }
        return true;
    }
    c->req = NULL;
    c->parser.msg = NULL;
    dm_req_free(c->w, req);
    c->served = true;
    c->page_done_ms = (uint32_t)uv_now(&c->w->loop);
    dm_http_parser_next(&c->parser);
    c->state = DM_C_IDLE;
    return true;
}

/*
 * A head past limits.header_bytes (len bytes of it read): 414 when its
 * request line alone is (RFC 9112 section 3: a target longer than the
 * server will parse), 431 when its fields are.
 */
static void
client_head_too_large(struct dm_client *c, uint32_t len)
{
    size_t limit = c->rt->conf->limits.header_bytes;
    if (memchr(c->in->data + c->head_start, '\n', len < limit ? len : limit) == NULL) {
        dm_client_respond_error(c, 414, "request line longer than limits.header_bytes");
        return;
    }
    dm_client_respond_error(c, 431, "request head larger than limits.header_bytes");
}

/* The head is whole: check it, then route and connect. True when c went back to idle. */
static bool
client_head_done(struct dm_client *c)
{
    struct dm_req *req = c->req;
    const struct dm_conf *cf = c->rt->conf;
    uint32_t head_len = c->in->off - c->head_start;
    const char *reason = NULL;
    req->head_done = true;
    req->head_len = head_len;
    if (head_len > cf->limits.header_bytes) {
        client_head_too_large(c, head_len);
        return false;
    }
    int st = dm_http_check_request(c->in->data + c->head_start, head_len, &req->msg,
                                   dm_http_parser_version(&c->parser), &req->info, &reason);
    if (st != 0) {
        dm_client_respond_error(c, (unsigned)st, reason);
        return false;
    }
    if (cf->limits.body_bytes > 0 && req->info.has_length &&
        req->info.content_length > cf->limits.body_bytes) {
        dm_client_respond_error(c, 413, "request body larger than limits.body_bytes");
        return false;
    }
    if (cf->limits.rate > 0 && client_over_rate(c)) {
        return !c->closing && c->state == DM_C_IDLE;
    }
    req->head_buf = c->in;
    req->head_len = head_len;
    c->in->refs++;
    req->close_client = !req->info.keep_alive || c->w->stopping;
    req->routed = true;
    client_route(c, req);
    {
        /* A request within page_gap of the connection's last response is
         * of the same page (a browser asking for the page's objects); one
         * after a longer pause begins the next. Kept whatever the pool (a
         * page from one pool, its objects from a page-ordered one). */
        uint32_t now = (uint32_t)uv_now(&c->w->loop);
        if (!c->served || now - c->page_done_ms > cf->pools[req->pool].page_gap_ms) {
            c->page_start_ms = now;
        }
    }
    c->state = DM_C_CONNECT;
    dm_client_timer_stop(c);
    if (cf->timeouts.request_ms > 0) {
        tq_insert(c->w, &req->bound, DM_T_REQUEST, 0,
                  uv_now(&c->w->loop) + cf->timeouts.request_ms);
    }
    dm_req_pick_and_connect(req);
    return false;
}

void
dm_client_process(struct dm_client *c)
{
    for (;;) {
        if (c->closing) {
            return;
        }
        struct dm_buf *in = c->in;
        switch (c->state) {
        case DM_C_IDLE:
            if (in == NULL || in->off == in->len) {
                client_recycle_in(c);
                if (c->eof || c->w->stopping) {
                    dm_client_close(c);
                    return;
                }
                if (c->served && c->timer.kind != DM_T_KEEPALIVE) {
                    client_timer_start(c, DM_T_KEEPALIVE,
                                       c->rt->conf->timeouts.client_keepalive_ms);
                } else if (!c->served && c->timer.kind != DM_T_HEADER) {
                    client_timer_start(c, DM_T_HEADER, c->rt->conf->timeouts.client_header_ms);
                }
                dm_client_read_start(c);
                return;
            }
            if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > 0) {
                /* A pipelined request starts once the client has taken the
                 * responses before it (as nginx's and HAProxy's do): one
                 * that sends and never reads would have every answer
                 * queued in memory. timeouts.client_send bounds the wait. */
                dm_client_read_stop(c);
                c->write_wait = true;
                return;
            }
            if (!client_start_request(c)) {
                return;
            }
            continue;
        case DM_C_HEAD: {
            size_t used = 0;
            int r = dm_http_parse(&c->parser, in->data + in->off, in->len - in->off, &used);
            if (r < 0) {
                dm_client_respond_error(c, 400, dm_http_parser_error(&c->parser));
                return;
            }
            in->off += (uint32_t)used;
            if (r == DM_HTTP_HEAD_DONE) {
                if (client_head_done(c)) {
                    continue; /* answered here (429): the next request may be in `in` */
                }
                return;
            }
            if (in->len - c->head_start > c->rt->conf->limits.header_bytes) {
                client_head_too_large(c, in->len - c->head_start);
                return;
            }
            if (c->eof) {
                dm_client_close(c);
            }
            return;
        }
        case DM_C_CONNECT:
        case DM_C_WAIT:
            /* Pipelined bytes wait; stop reading when there is no room left. */
            if (in != NULL && in->len == in->cap) {
                dm_client_read_stop(c);
            }
            return;
        case DM_C_BODY: {
            struct dm_req *req = c->req;
            if (in == NULL || (in->off == in->len &&
                               !(req->info.chunked == false && req->info.content_length == 0))) {
                /* Everything read is parsed: a full buffer must make room (or go
                 * to its writers) here, or the next read finds no space (ENOBUFS,
                 * reading stops for good): a head or a chunked body's last-chunk
                 * line ending exactly at the end of the buffer. */
                client_recycle_in(c);
                return;
            }
            size_t used = 0;
            uint32_t from = in->off;
            int r = dm_http_parse(&c->parser, in->data + in->off, in->len - in->off, &used);
            if (r < 0) {
                dm_client_respond_error(c, 400, dm_http_parser_error(&c->parser));
                return;
            }
            uint64_t limit = c->rt->conf->limits.body_bytes;
            if (limit > 0 && c->parser.body_bytes > limit) {
                dm_client_respond_error(c, 413, "request body larger than limits.body_bytes");
                return;
            }
            in->off += (uint32_t)used;
            if (req->body_raw == 0 && used > 0 && req->info.expect_continue && !req->continued &&
                req->up != NULL) {
                dm_upstream_deadline(req->up, 0); /* the client went on without the 100 */
            }
            req->body_raw += used;
            if (req->info.chunked) {
                /* llhttp 8.1 accepts a bare LF as the last line of a chunked
                 * body: keep the last four bytes to check the ending ourselves. */
                uint32_t k = in->off - from > 4 ? in->off - 4 : from;
                for (; k < in->off; k++) {
                    req->tail = req->tail << 8 | (uint8_t)in->data[k];
                }
                if (r == DM_HTTP_MSG_DONE && req->tail != 0x0d0a0d0au) {
                    dm_client_respond_error(c, 400, "chunked body does not end with CRLF CRLF");
                    return;
                }
            }
            if (req->trailers != NULL) {
                /* The trailer section is held until it is whole and checked. */
                if (client_hold_trailers(c, from, in->off) < 0) {
                    return;
                }
            } else {
                dm_client_forward_slice(c, from, in->off);
            }
            if (c->closing || c->req == NULL) {
                return;
            }
            if (r == DM_HTTP_TRAILERS) {
                req->trailers = dm_buf_get(c->w, DM_SMALL_CAP);
                if (req->trailers == NULL) {
                    dm_client_respond_error(c, 500, "out of memory");
                    return;
                }
                continue;
            }
            if (r == DM_HTTP_MSG_DONE && req->trailers != NULL && client_send_trailers(c) < 0) {
                return;
            }
            if (r == DM_HTTP_MSG_DONE || r == DM_HTTP_UPGRADE) {
                req->body_done = true;
                c->state = DM_C_WAIT;
                dm_client_timer_stop(c); /* the body window */
                dm_req_await_response(req);
                if (req->info.upgrade) {
                    /* What follows belongs to the new protocol, after a 101. */
                    return;
                }
                continue;
            }
            client_recycle_in(c);
            return;
        }
        case DM_C_TUNNEL:
            if (in != NULL && in->off < in->len && c->req != NULL && c->req->up != NULL) {
                uint32_t from = in->off;
                in->off = in->len;
                dm_upstream_tunnel_active(c->req->up);
                dm_client_forward_slice(c, from, in->len);
                client_recycle_in(c);
            }
            if (c->eof) {
                /* The client's FIN came before the server switched (while the
                 * request waited for its 101): nothing will be read again,
                 * so the tunnel ends now, as one whose client leaves. */
                client_eof(c);
            }
            return;
        }
    }
}

/* Logs why the client's request in progress ends with the connection. */
static void
client_log_abort(struct dm_client *c, const char *why)
{
    char addr[INET6_ADDRSTRLEN];
    dm_accesslog_client_addr(c, addr, sizeof(addr));
    dm_log_warn("client %s: request aborted: %s (after %llu request body bytes)", addr, why,
                (unsigned long long)c->req->body_raw);
}

/*
 * No room to read into: pipelined requests waiting for the response before
 * them (CONNECT, WAIT) stop reading until it is done, which starts reading
 * again. In any other state nothing would start it again, and the exchange
 * would hang with no timeout running: out of memory, or a buffer left full
 * (a bug); the request is answered 500 and the connection closes.
 */
static void
client_no_room(struct dm_client *c)
{
    dm_client_read_stop(c);
    if (c->state == DM_C_CONNECT || c->state == DM_C_WAIT) {
        return;
    }
    if (c->req != NULL) {
        dm_client_respond_error(c, 500, "no buffer to read the request into");
    } else {
        dm_client_close(c);
    }
}

/* The client sent FIN (or TLS's close_notify): what that means in each state. */
static void
client_eof(struct dm_client *c)
{
    switch (c->state) {
    case DM_C_IDLE:
    case DM_C_HEAD:
        if (c->writes == 0) {
            dm_client_close(c);
        } else {
            dm_client_close_when_written(c);
        }
        return;
    case DM_C_BODY:
    case DM_C_TUNNEL:
        /* The request body was cut short, or a tunnel ends: end both sides. */
        if (c->state == DM_C_BODY && c->req != NULL) {
            client_log_abort(c, "client closed the connection mid-request body");
        }
        dm_client_close_when_written(c);
        if (c->req != NULL && c->req->up != NULL) {
            struct dm_upstream *up = c->req->up;
            c->req->up = NULL;
            up->req = NULL;
            dm_upstream_close(up);
        }
        return;
    default:
        if (c->queued || c->held || (c->req != NULL && c->req->session_waiting)) {
            /* Waiting for a place under max_conns, held for a server to
             * wake, or a session waiting for its batch pass: a place would
             * go to a request nobody reads (HAProxy's abortonclose, nginx's
             * default), so it gives its turn back (and wakes nothing more). */
            client_log_abort(c,
                             c->queued ? "client closed the connection while its request was queued"
                             : c->held ? "client closed the connection while its request was held"
                                       : "client closed the connection while its session waited "
                                         "for the batch pass");
            dm_client_close(c);
            return;
        }
        /* The response can still be delivered; close after it. */
        if (c->req != NULL) {
            c->req->close_client = true;
        }
        return;
    }
}

/* A TLS failure (the handshake, a bad record): logged, and the connection closes. */
static void
client_tls_failed(struct dm_client *c)
{
    char addr[INET6_ADDRSTRLEN];
    dm_accesslog_client_addr(c, addr, sizeof(addr));
    if (!c->tls->done) {
        dm_log_info("client %s: TLS handshake failed: %s", addr, dm_tls_error(c->tls));
    } else {
        if (c->req != NULL && c->state != DM_C_TUNNEL) {
            client_log_abort(c, dm_tls_error(c->tls));
        }
        dm_log_info("client %s: TLS: %s", addr, dm_tls_error(c->tls));
    }
    client_tls_flush(c); /* the alert, if the socket takes it */
    dm_client_close(c);
}

/*
 * Goes on with a TLS client's input: the handshake, then plain text into
 * the read buffer for dm_client_process, for as long as the client is read
 * (back-pressure and the states stop reading as they do for plain HTTP);
 * what is left stays with OpenSSL or in the stash for the next pass.
 */
static void
client_tls_pump(void *arg)
{
    struct dm_client *c = arg;
    struct dm_tls *t = c->tls;
    if (c->closing || t == NULL) {
        return;
    }
    if (!t->done) {
        int r = dm_tls_handshake(t);
        if (r == DM_TLS_ERROR) {
            dm_stat_add(&c->w->lstats[c->listener].tls[DM_TLS_FAILED], 1);
            client_tls_failed(c);
            return;
        }
        if (r == 1) {
            bool resumed = SSL_session_reused(t->ssl) == 1;
            dm_stat_add(&c->w->lstats[c->listener].tls[resumed ? DM_TLS_RESUMED : DM_TLS_FULL], 1);
        }
        if (client_tls_flush(c) < 0) {
            dm_client_close(c);
            return;
        }
        if (r == DM_TLS_WANT) {
            if (dm_tls_keep_input(t) < 0) {
                dm_client_close(c);
            }
            return;
        }
    }
    while (c->reading) {
        uv_buf_t space;
        dm_buf_read_space(c->w, &c->in, c->rt->buf_cap, &space);
        if (space.len == 0) {
            client_no_room(c);
            if (c->closing) {
                return;
            }
            break;
        }
        int n = dm_tls_read(t, space.base, space.len);
        if (n == DM_TLS_ERROR) {
            client_tls_failed(c);
            return;
        }
        if (n == DM_TLS_EOF) {
            dm_client_read_stop(c);
            c->eof = true;
            client_eof(c);
            return;
        }
        if (n == DM_TLS_WANT) {
            break;
        }
        c->in->len += (uint32_t)n;
        dm_client_process(c);
        if (c->closing) {
            return;
        }
    }
    /* Post-handshake messages (session tickets, a key update) go out too. */
    if (client_tls_flush(c) < 0 || dm_tls_keep_input(t) < 0) {
        dm_client_close(c);
        return;
    }
    /* Answers of TLS's own (a key update asked for) to a client that does
     * not take what is queued: its input waits until it does, and
     * timeouts.client_send bounds the wait (a client sending key updates
     * and reading nothing filled memory without end). */
    size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    if (queued > 0 && c->send_timer.kind == DM_T_NONE) {
        client_send_arm(c, queued);
    }
    if (t->own_out && queued >= DM_WRITE_HIGH && c->reading) {
        dm_client_read_stop(c);
        c->tls_wait = true;
    }
    t->own_out = false;
    if (c->in != NULL && c->in->len == 0 && c->state == DM_C_IDLE) {
        client_recycle_in(c); /* an idle connection keeps no buffer */
    }
}

static void
client_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct dm_client *c = s->data;
    if (nread == 0) {
        return;
    }
    if (nread == UV_ENOBUFS) {
        client_no_room(c);
        return;
    }
    if (nread == UV_EOF && c->tls != NULL && dm_tls_buffered(c->tls)) {
        /* Input still with OpenSSL or stashed goes first; if reading stopped
         * meanwhile (back-pressure), the next read sees the end again. What
         * is left while still reading is part of a record that cannot come
         * whole any more: the end is now (it would hold the connection
         * until a timeout, or for ever in a tunnel). */
        client_tls_pump(c);
        if (c->closing || c->tls == NULL || !c->reading) {
            return;
        }
    }
    if (nread < 0 && c->tls != NULL && c->tls->ssl != NULL && !c->tls->done) {
        /* Closed in the middle of a handshake (nginx: "peer closed
         * connection in SSL handshake"): a failed one, said and counted. */
        char addr[INET6_ADDRSTRLEN];
        dm_accesslog_client_addr(c, addr, sizeof(addr));
        dm_stat_add(&c->w->lstats[c->listener].tls[DM_TLS_FAILED], 1);
        dm_log_info("client %s: TLS handshake failed: %s in the handshake", addr,
                    nread == UV_EOF ? "connection closed" : uv_strerror((int)nread));
        dm_client_close(c);
        return;
    }
    if (nread < 0) {
        dm_client_read_stop(c);
        c->eof = true;
        if (nread != UV_EOF) {
            if (c->req != NULL && c->state != DM_C_TUNNEL) {
                client_log_abort(c, uv_strerror((int)nread));
            }
            dm_client_close(c);
            return;
        }
        client_eof(c);
        return;
    }
    if (c->tls != NULL) {
        if (c->tls->ssl == NULL && buf->base[0] >= 'A' && buf->base[0] <= 'Z') {
            /* A TLS record begins with its type (20..23), an SSLv2 hello
             * with 0x80 or more: this is a plain request's method. Answered
             * in plain text, as nginx does, rather than closed unanswered. */
            dm_stat_add(&c->w->lstats[c->listener].tls[DM_TLS_FAILED], 1);
            dm_tls_free(c->tls);
            c->tls = NULL;
            dm_client_respond_error(c, 400, "plain HTTP request sent to a TLS listener");
            return;
        }
        if (dm_tls_feed(c->tls, buf->base, (size_t)nread) < 0) {
            char addr[INET6_ADDRSTRLEN];
            dm_accesslog_client_addr(c, addr, sizeof(addr));
            dm_log_warn("client %s: TLS: out of memory for its input: closed", addr);
            dm_client_close(c);
            return;
        }
        client_tls_pump(c);
        return;
    }
    c->in->len += (uint32_t)nread;
    dm_client_process(c);
}

int
dm_client_accept(struct dm_worker *w, uv_stream_t *listener)
{
    struct dm_client *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return -ENOMEM;
    }
    c->w = w;
    if (uv_tcp_init(&w->loop, &c->tcp) < 0) {
        free(c); /* never initialized: no close */
        return -ENOMEM;
    }
    dm_sockets_add(1, true); /* until client_free_cb */
    c->tcp.data = c;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        /* Not counted nor listed yet: only the handle is to close and free. */
        uv_close((uv_handle_t *)&c->tcp, client_free_cb);
        return 0;
    }
    c->rt = w->rt;
    dm_runtime_ref(c->rt);
    uv_tcp_nodelay(&c->tcp, 1);
    int len = sizeof(c->peer);
    uv_tcp_getpeername(&c->tcp, &c->peer.sa, &len);
    unsigned per_client = c->rt->conf->limits.max_conns_per_client;
    if (per_client > 0 && !dm_peers_take(&c->peer.sa, per_client, &c->peer_counted)) {
        /* Closed at once, unread and unanswered, as HAProxy's "tcp-request
         * connection reject" does: not counted in nclients, not listed. */
        dm_counter_add(&w->refused_per_client, 1);
        uv_close((uv_handle_t *)&c->tcp, client_free_cb);
        return 0;
    }
    size_t l = w->lof[(uv_tcp_t *)listener - w->listeners];
    const struct dm_conf *cf = c->rt->conf;
    if (l < cf->nlisteners && cf->listener_tls != NULL && cf->listener_tls[l] != NULL) {
        c->tls = dm_tls_new_server(w, cf->listener_tls[l]);
        if (c->tls == NULL) {
            if (c->peer_counted) {
                dm_peers_release(&c->peer.sa);
            }
            uv_close((uv_handle_t *)&c->tcp, client_free_cb);
            return 0;
        }
    }
    dm_http_parser_init(&c->parser, true);
    c->next = w->clients;
    if (w->clients != NULL) {
        w->clients->prev = c;
    }
    w->clients = c;
    w->nclients++;
    c->listener = (uint8_t)(l < 255 ? l : 255);
    dm_stat_add(&w->lstats[c->listener].accepted, 1);
    dm_stat_add(&w->lstats[c->listener].open, 1);
    c->state = DM_C_IDLE;
    c->bound = -1;
    client_timer_start(c, DM_T_HEADER, c->rt->conf->timeouts.client_header_ms);
    dm_client_read_start(c);
    return 0;
}

/* How long a graceful stop waits for the next request of a connection
 * (timeouts.client_header when shorter). */
#define DM_DRAIN_GRACE_MS 1000

void
dm_clients_drain(struct dm_worker *w)
{
    struct dm_client *c = w->clients;
    while (c != NULL) {
        struct dm_client *next = c->next;
        if (c->state == DM_C_IDLE && c->writes == 0) {
            /* A connection waiting for a request gets a moment for it, and
             * the answer says Connection: close. Closed at once, a request
             * on its way was lost: reset unread, or sent as the close came
             * (a busy keep-alive client sends its next one at once, and
             * one just accepted sends its first). */
            uint64_t ms = c->rt->conf->timeouts.client_header_ms;
            client_timer_start(c, DM_T_HEADER, ms < DM_DRAIN_GRACE_MS ? ms : DM_DRAIN_GRACE_MS);
        } else if (c->req != NULL) {
            c->req->close_client = true;
        }
        c = next;
    }
}

size_t
dm_clients_refuse_waiting(struct dm_worker *w)
{
    size_t n = 0;
    struct dm_client *c = w->clients;
    while (c != NULL) {
        struct dm_client *next = c->next;
        if (!c->closing && c->state == DM_C_CONNECT && c->req != NULL && c->req->up == NULL &&
            !c->req->resp_started) {
            /* Written at once (the socket takes it, or it is lost with the close). */
            dm_client_respond_error(c, 503, "dimmer stopped before a server took the request");
            n++;
        }
        c = next;
    }
    return n;
}

void
dm_clients_close_all(struct dm_worker *w)
{
    while (w->clients != NULL) {
        dm_client_close(w->clients);
    }
}
