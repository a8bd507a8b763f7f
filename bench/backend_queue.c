/*
 * The capacity queue of dimmer-backend (backend_queue.h). A parked request's connection
 * stops parsing and reading; its head stays in the input buffer. When a slot is free the
 * request holds it for its service time on the connection's timer, then the slot goes to
 * the longest-waiting request and this one is routed, so its response starts only once
 * the service time has elapsed (the body may stream after). One request at a time per
 * connection keeps pipelined requests in order.
 */
#include "bench/backend_queue.h"

#include <stddef.h>
#include <string.h>

#include <llhttp.h>
#include <uv.h>

#include "bench/backend_conn.h"
#include "bench/backend_power.h"

#define MAX_SERVICE_MS (UINT64_C(3600) * 1000)

static bool
slot_free(const struct dm_backend_queue *q)
{
    return q->capacity == 0 || q->in_service < q->capacity;
}

static void
unlink_waiting(struct dm_backend_queue *q, struct dm_backend_conn *c)
{
    if (c->qprev) {
        c->qprev->qnext = c->qnext;
    } else {
        q->head = c->qnext;
    }
    if (c->qnext) {
        c->qnext->qprev = c->qprev;
    } else {
        q->tail = c->qprev;
    }
    c->qprev = c->qnext = NULL;
    c->slot = DM_SLOT_NONE;
    q->queued--;
}

static void on_service_done(uv_timer_t *t);

static void
start_service(struct dm_backend_conn *c)
{
    /* The power model follows in_service: integrate up to now before it changes. */
    dm_backend_power_account(c->be);
    if (++c->be->queue.in_service > c->be->queue.in_service_max) {
        c->be->queue.in_service_max = c->be->queue.in_service;
    }
    c->slot = DM_SLOT_SERVICE;
    uv_timer_start(&c->timer, on_service_done, c->service_ms, 0);
}

/* Gives the slots that are free to the requests waiting longest. */
static void
grant(struct dm_backend *be)
{
    struct dm_backend_queue *q = &be->queue;
    while (q->head && slot_free(q)) {
        struct dm_backend_conn *c = q->head;
        unlink_waiting(q, c);
        start_service(c);
    }
}

static void
release(struct dm_backend_conn *c)
{
    dm_backend_power_account(c->be);
    c->be->queue.in_service--;
    c->slot = DM_SLOT_NONE;
    grant(c->be);
}

static void
on_service_done(uv_timer_t *t)
{
    struct dm_backend_conn *c = t->data;
    release(c);
    c->be->queue.served++;
    dm_backend_conn_serve(c);
}

/* The value of name=VALUE in a query (no decoding: the values asked for are digits). */
static bool
query_param(struct dm_backend_span q, const char *name, struct dm_backend_span *val)
{
    size_t n = strlen(name);
    const char *p = q.p, *end = q.p + q.len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *e = amp ? amp : end;
        if ((size_t)(e - p) > n && memcmp(p, name, n) == 0 && p[n] == '=') {
            val->p = p + n + 1;
            val->len = (size_t)(e - val->p);
            return true;
        }
        p = amp ? amp + 1 : end;
    }
    return false;
}

/* ?ms=N on a GET or HEAD overrides the configured service time; a bad N is ignored. */
static uint64_t
service_ms(struct dm_backend_conn *c, const char *head, size_t hlen)
{
    uint64_t ms = c->be->queue.service_ms;
    uint8_t m = llhttp_get_method(&c->parser);
    struct dm_backend_span v;
    uint64_t n;
    if ((m == HTTP_GET || m == HTTP_HEAD) &&
        query_param(dm_backend_head_query(head, hlen), "ms", &v) &&
        dm_backend_parse_u64(v, MAX_SERVICE_MS, &n)) {
        ms = n;
    }
    return ms;
}

bool
dm_backend_queue_park(struct dm_backend_conn *c)
{
    struct dm_backend_queue *q = &c->be->queue;
    const char *head = c->in + c->head_start;
    size_t hlen = c->parse_off - c->head_start;
    struct dm_backend_span path = dm_backend_head_path(head, hlen);
    if (dm_backend_span_eq(path, "/healthz") || dm_backend_span_eq(path, "/stats")) {
        return false; /* the machine's management, not its work */
    }
    c->service_ms = service_ms(c, head, hlen);
    if (q->capacity == 0 && c->service_ms == 0) {
        q->served++; /* nothing to wait for: served as it is routed, as without a queue */
        return false;
    }
    if (slot_free(q) && !q->head) {
        start_service(c);
        return true;
    }
    if (q->queued >= q->max) {
        q->rejected_full++;
        c->busy = true;
        return false;
    }
    c->qprev = q->tail;
    c->qnext = NULL;
    if (q->tail) {
        q->tail->qnext = c;
    } else {
        q->head = c;
    }
    q->tail = c;
    c->slot = DM_SLOT_QUEUED;
    if (++q->queued > q->queued_max) {
        q->queued_max = q->queued;
    }
    return true;
}

void
dm_backend_queue_forget(struct dm_backend_conn *c)
{
    if (c->slot == DM_SLOT_QUEUED) {
        unlink_waiting(&c->be->queue, c);
    } else if (c->slot == DM_SLOT_SERVICE) {
        uv_timer_stop(&c->timer);
        release(c);
    }
}
