/*
 * Server connections (proxy/upstream.h): the connection, its pool and its
 * writes, and the response it reads for its request.
 */
#include "proxy/upstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/tls.h"

#include "proxy/accesslog.h"
#include "proxy/buf.h"
#include "proxy/client.h"
#include "proxy/conn.h"
#include "proxy/internal.h"
#include "proxy/learn.h"
#include "proxy/log.h"
#include "proxy/request.h"
#include "proxy/tls.h"
#include "proxy/worker.h"

/* Interim (1xx) responses one request may get; past them the server is taken as broken. */
#define DM_INTERIM_MAX 64

void
dm_upstream_failed(struct dm_runtime *rt, size_t pool, int server, const char *why, bool passive)
{
    struct dm_server *s = dm_runtime_server(rt, pool, server);
    struct dm_host *h = s->host;
    const struct dm_conf_pool *pc = &rt->conf->pools[pool];
    dm_counter_add(&s->failures, 1);
    dm_log_warn("server %s/%s: %s", pc->name, pc->servers[server].name, why);
    if (!passive) {
        return;
    }
    /* Consecutive failures are the host's, whichever pool saw them; the
     * threshold and the down period are those of the pool that saw the last. */
    unsigned fails = atomic_fetch_add_explicit(&h->fails, 1, memory_order_relaxed) + 1;
    if (pc->passive.max_fails > 0 && fails >= pc->passive.max_fails) {
        atomic_store_explicit(&h->down_until_us, dm_mono_us() + pc->passive.fail_timeout_ms * 1000,
                              memory_order_relaxed);
        atomic_store_explicit(&h->fails, 0, memory_order_relaxed);
        dm_log_warn("server %s/%s is DOWN for %llu ms (%u consecutive failures)", pc->name,
                    pc->servers[server].name, (unsigned long long)pc->passive.fail_timeout_ms,
                    fails);
    }
}

static void up_timer_cb(uv_timer_t *t);
static void up_cork_drop(struct dm_upstream *up);
static void up_tls_pump(void *arg);
static int up_tls_flush(struct dm_upstream *up);

/*
 * Server connection timeouts are lazy: activity only moves deadline_ms, and a
 * timer that fires before the deadline re-arms for the rest. That keeps timer
 * heap operations off the per-read path. ms == 0 clears the deadline.
 */
void
dm_upstream_deadline(struct dm_upstream *up, uint64_t ms)
{
    if (ms == 0) {
        up->deadline_ms = UINT64_MAX;
        return;
    }
    up->deadline_ms = uv_now(&up->w->loop) + ms;
    if (!uv_is_active((uv_handle_t *)&up->timer) || uv_timer_get_due_in(&up->timer) > ms) {
        uv_timer_start(&up->timer, up_timer_cb, ms, 0);
    }
}

static void
up_free_cb(uv_handle_t *h)
{
    struct dm_upstream *up = h->data;
    if (up->counted) {
        dm_counter_sub(&dm_runtime_host(up->rt, up->pool, up->server)->connections, 1);
    }
    if (up->commanded) {
        up->w->commanded_closing--; /* what the worker's acknowledgement waits for */
    }
    dm_buf_unref(up->w, up->in); /* NULL unless a read came after the close */
    dm_runtime_unref(up->rt);
    dm_sockets_add(-1, false);
    free(up);
}

static void
up_timer_closed(uv_handle_t *h)
{
    struct dm_upstream *up = h->data;
    uv_close((uv_handle_t *)&up->tcp, up_free_cb);
}

static struct dm_upstream **
idle_head(struct dm_upstream *up)
{
    struct dm_rpool *p = &up->rt->pools[up->pool];
    return &p->idle[(size_t)up->w->id * p->sv->n + (size_t)up->server];
}

static struct dm_srv_stats *
idle_stats(struct dm_upstream *up)
{
    struct dm_rpool *p = &up->rt->pools[up->pool];
    return &p->stats[(size_t)up->w->id * (p->sv->n + 1) + (size_t)up->server];
}

static void
idle_remove(struct dm_upstream *up)
{
    if (up->state != DM_U_IDLE) {
        return;
    }
    if (up->prev != NULL) {
        up->prev->next = up->next;
    } else {
        *idle_head(up) = up->next;
    }
    if (up->next != NULL) {
        up->next->prev = up->prev;
    }
    up->prev = up->next = NULL;
    up->state = DM_U_HEAD;
    dm_stat_add(&idle_stats(up)->idle, (uint64_t)-1);
}

void
dm_upstream_close(struct dm_upstream *up)
{
    if (up->closing) {
        return;
    }
    idle_remove(up);
    up->closing = true;
    up_cork_drop(up);
    /* The socket closes after the timer: until then no read may come, or
     * its buffer (up->in, taken anew) would outlive the connection. */
    uv_read_stop((uv_stream_t *)&up->tcp);
    dm_buf_unref(up->w, up->in);
    up->in = NULL;
    dm_buf_unref(up->w, up->held);
    up->held = NULL;
    dm_tls_free(up->tls);
    up->tls = NULL;
    uv_close((uv_handle_t *)&up->timer, up_timer_closed);
}

static void
up_write_done(void *arg, int status)
{
    struct dm_upstream *up = arg;
    up->writes--;
    if (up->closing) {
        return;
    }
    struct dm_req *req = up->req;
    if (status < 0) {
        if (req != NULL) {
            /* The server went away while we were sending: its answer decides. */
            return;
        }
        dm_upstream_close(up);
        return;
    }
    /* TLS output held while the socket was busy (dm_tls_flush) goes now. */
    if (up->tls != NULL && up->tls->out != NULL && up_tls_flush(up) < 0) {
        dm_tls_schedule(up->tls, up_tls_pump, up); /* which fails the request */
        return;
    }
    if (req != NULL && req->c->paused &&
        uv_stream_get_write_queue_size((uv_stream_t *)&up->tcp) < DM_WRITE_HIGH) {
        req->c->paused = false;
        dm_client_read_start(req->c);
        if (req->c->state == DM_C_BODY && req->c->timer.kind == DM_T_BODY) {
            dm_client_body_window(req->c); /* the pause did not count against it */
        }
    }
}

/*
 * Writes to a server are corked until the end of the loop iteration (the
 * worker's check phase, dm_upstreams_flush): the requests read in one
 * iteration go out in one burst, so a server sharing the CPU is woken once
 * per burst rather than once per request (HAProxy sends at the end of its
 * polling loop for the same reason). A full cork is flushed at once.
 */
/* Writes what TLS left in its output, four buffers to a write: 1 all out, 0 some queued, <0 failed.
 */
static int
up_tls_flush(struct dm_upstream *up)
{
    return dm_tls_flush(up->tls, (uv_stream_t *)&up->tcp, up_write_done, up, &up->writes);
}

static void
up_flush(struct dm_upstream *up)
{
    unsigned n = up->ncork;
    if (n == 0) {
        return;
    }
    up->ncork = 0;
    int r;
    if (up->tls != NULL) {
        /* Encrypted here (a copy), so the plain buffers go back at once. */
        r = dm_tls_writev(up->tls, up->cork_bufs, n) < 0 ? -1 : up_tls_flush(up);
        if (r < 0) {
            dm_tls_schedule(up->tls, up_tls_pump, up); /* which fails the request */
        }
    } else {
        r = dm_buf_write(up->w, (uv_stream_t *)&up->tcp, up->cork_bufs, n, up->cork_hold, n,
                         up_write_done, up);
        up->writes += r == 0;
    }
    for (unsigned i = 0; i < n; i++) {
        dm_buf_unref(up->w, up->cork_hold[i]);
    }
    if (r == 0) {
        struct dm_req *req = up->req;
        if (req != NULL &&
            uv_stream_get_write_queue_size((uv_stream_t *)&up->tcp) >= DM_WRITE_HIGH) {
            req->c->paused = true;
            dm_client_read_stop(req->c);
        }
    }
    /* A failed write shows up as a read error on the same connection. */
}

/* Drops what is corked (the connection is closing). */
static void
up_cork_drop(struct dm_upstream *up)
{
    for (unsigned i = 0; i < up->ncork; i++) {
        dm_buf_unref(up->w, up->cork_hold[i]);
    }
    up->ncork = 0;
}

void
dm_upstream_write(struct dm_upstream *up, uv_buf_t *bufs, unsigned n, struct dm_buf **hold,
                  unsigned nhold)
{
    (void)nhold; /* one hold per buffer */
    if (up->ncork + n > DM_CORK_MAX) {
        up_flush(up);
    }
    for (unsigned i = 0; i < n; i++) {
        up->cork_bufs[up->ncork] = bufs[i];
        up->cork_hold[up->ncork] = hold[i];
        hold[i]->refs++;
        up->ncork++;
    }
    if (!up->corked) {
        up->corked = true;
        up->cork_next = up->w->corked;
        up->w->corked = up;
    }
}

void
dm_upstreams_flush(struct dm_worker *w)
{
    while (w->corked != NULL) {
        struct dm_upstream *up = w->corked;
        w->corked = up->cork_next;
        up->cork_next = NULL;
        up->corked = false;
        /* A connection closed this iteration is still allocated (its close
         * callbacks run after this phase), with nothing corked. */
        if (!up->closing) {
            up_flush(up);
        }
    }
}

static void
up_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct dm_upstream *up = h->data;
    if (up->closing) {
        *buf = uv_buf_init(NULL, 0); /* UV_ENOBUFS; nothing is read any more */
        return;
    }
    dm_buf_read_space(up->w, &up->in, up->rt->buf_cap, buf);
}

static void up_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

void
dm_upstream_resume(struct dm_upstream *up)
{
    if (up->deadline_held) {
        up->deadline_held = false;
        dm_upstream_deadline(up, up->rt->conf->timeouts.server_response_ms);
    }
    dm_upstream_read_start(up);
}

/* A TLS connection's ciphertext goes to the worker's scratch, fed to OpenSSL at once. */
static void
up_tls_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    dm_tls_scratch(((struct dm_upstream *)h->data)->w, buf);
}

void
dm_upstream_read_start(struct dm_upstream *up)
{
    if (!up->closing && up->tls != NULL) {
        uv_read_start((uv_stream_t *)&up->tcp, up_tls_alloc_cb, up_read_cb);
        if (dm_tls_buffered(up->tls)) {
            dm_tls_schedule(up->tls, up_tls_pump, up);
        }
    } else if (!up->closing) {
        uv_read_start((uv_stream_t *)&up->tcp, up_alloc_cb, up_read_cb);
    }
}

/* Whose failure a failed request is. */
enum up_fault {
    UP_LOCAL,   /* this process's (out of memory): the server is not counted */
    UP_SILENT,  /* the server gave no response head: counted towards passive.max_fails */
    UP_REFUSED, /* the server answered a head refused here: logged, not counted */
};

static void up_fail_as(struct dm_upstream *up, unsigned status, const char *why,
                       enum up_fault fault);

/* Fails the request on this connection, the server's fault: 502/504 when nothing was answered yet.
 */
static void
up_fail(struct dm_upstream *up, unsigned status, const char *why)
{
    up_fail_as(up, status, why, UP_SILENT);
}

/*
 * The same for a response head the server sent and this proxy refuses
 * (malformed, too large, a status or a switch it may not send): the server
 * answers, so it is not taken out for it (as nginx's default
 * proxy_next_upstream leaves invalid_header out). A server that reflects a
 * client's bytes into its head would otherwise let any client take it out
 * with three requests.
 */
static void
up_fail_refused(struct dm_upstream *up, const char *why)
{
    up_fail_as(up, 502, why, UP_REFUSED);
}

/* The same for a failure of this process (out of memory): the server is not counted. */
static void
up_fail_local(struct dm_upstream *up, const char *why)
{
    up_fail_as(up, 503, why, UP_LOCAL);
}

static void
up_fail_as(struct dm_upstream *up, unsigned status, const char *why, enum up_fault fault)
{
    struct dm_req *req = up->req;
    if (req == NULL) {
        dm_upstream_close(up);
        return;
    }
    struct dm_client *c = req->c;
    /* No valid response head (nothing, half a status line, a malformed head):
     * the server failed. Once a head came, a cut body is not counted. */
    if (fault != UP_LOCAL && up->state != DM_U_BODY && up->state != DM_U_TUNNEL) {
        dm_upstream_failed(up->rt, up->pool, up->server, why, fault == UP_SILENT);
    }
    req->up = NULL;
    up->req = NULL;
    dm_upstream_close(up);
    if (req->resp_started && req->resp_head != NULL) {
        /* The head waits for the first body bytes, and the body was bad
         * before any (an invalid chunk size): nothing of the response went
         * out, so the client gets the 502 rather than a bare close. */
        dm_buf_unref(c->w, req->resp_head);
        req->resp_head = NULL;
        req->resp_started = false;
    }
    if (req->resp_started) {
        dm_log_warn("response cut short: %s", why);
        dm_client_close(c);
        return;
    }
    dm_client_respond_error(c, status, why);
}

/* A tunnel ends: both sides, the client once what is queued for it is written. */
static void
up_tunnel_end(struct dm_upstream *up)
{
    struct dm_req *req = up->req;
    struct dm_client *c = req->c;
    req->up = NULL;
    up->req = NULL;
    dm_upstream_close(up);
    dm_client_close_when_written(c);
}

void
dm_upstream_tunnel_active(struct dm_upstream *up)
{
    dm_upstream_deadline(up, up->rt->conf->timeouts.tunnel_ms);
}

static void
up_timer_cb(uv_timer_t *t)
{
    struct dm_upstream *up = t->data;
    uint64_t now = uv_now(&up->w->loop);
    if (up->deadline_ms == UINT64_MAX) {
        return;
    }
    if (now < up->deadline_ms) {
        uv_timer_start(&up->timer, up_timer_cb, up->deadline_ms - now, 0);
        return;
    }
    up->deadline_ms = UINT64_MAX;
    switch (up->state) {
    case DM_U_CONNECTING:
        /* The connect request is cancelled by closing the handle; report now. */
        if (up->req != NULL) {
            struct dm_req *req = up->req;
            dm_upstream_ready_cb ready = up->ready;
            up->req = NULL;
            dm_upstream_close(up);
            ready(req, NULL, UV_ETIMEDOUT);
        } else {
            dm_upstream_close(up);
        }
        break;
    case DM_U_IDLE:
        dm_upstream_close(up);
        break;
    case DM_U_TUNNEL:
        if (up->req != NULL) {
            char addr[INET6_ADDRSTRLEN];
            dm_accesslog_client_addr(up->req->c, addr, sizeof(addr));
            dm_log_info("client %s: tunnel closed: no byte either way for timeouts.tunnel", addr);
            up_tunnel_end(up);
        } else {
            dm_upstream_close(up);
        }
        break;
    default:
        up_fail(up, 504, "server response timed out");
        break;
    }
}

/*
 * Forwards the held bytes (up->held, when pre) and [from, to) of the
 * server's read buffer to the client.
 */
static void
up_forward(struct dm_upstream *up, bool pre, uint32_t from, uint32_t to)
{
    struct dm_req *req = up->req;
    struct dm_client *c = req->c;
    uv_buf_t b[3];
    struct dm_buf *hold[3];
    unsigned n = 0;
    struct dm_buf *head = req->resp_head;
    if (head != NULL) {
        /* The response head goes out with the first body bytes: one write. */
        req->resp_head = NULL;
        b[n] = uv_buf_init(head->data, head->len);
        hold[n++] = head;
    }
    struct dm_buf *held = pre ? up->held : NULL;
    if (held != NULL) {
        up->held = NULL;
        b[n] = uv_buf_init(held->data, held->len);
        hold[n++] = held;
        req->resp_bytes += held->len;
        dm_learn_work_done(req, (int64_t)held->len);
    }
    if (to > from) {
        b[n] = uv_buf_init(up->in->data + from, to - from);
        hold[n++] = up->in;
        req->resp_bytes += to - from;
        dm_learn_work_done(req, (int64_t)(to - from));
    }
    if (n == 0) {
        return;
    }
    dm_client_write(c, b, n, hold, n);
    dm_buf_unref(c->w, head);
    dm_buf_unref(c->w, held);
    if (!c->closing && uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) >= DM_WRITE_HIGH) {
        up->paused = true;
        uv_read_stop((uv_stream_t *)&up->tcp);
        /* The server is not silent, the client is not reading: that is for
         * timeouts.client_send, not server_response, to bound. */
        if (up->deadline_ms != UINT64_MAX) {
            up->deadline_ms = UINT64_MAX;
            up->deadline_held = true;
        }
    }
}

/* Forwards [from, to) of the server's read buffer to the client. */
static void
up_forward_slice(struct dm_upstream *up, uint32_t from, uint32_t to)
{
    up_forward(up, false, from, to);
}

static void
up_recycle_in(struct dm_upstream *up)
{
    struct dm_buf *in = up->in;
    if (in == NULL || in->off != in->len) {
        return;
    }
    if (in->refs == 1) {
        in->off = in->len = 0;
    } else if (in->len == in->cap) {
        dm_buf_unref(up->w, in);
        up->in = NULL;
    }
}

/*
 * Decoded body bytes: scanned for embedded objects when the page is learned,
 * and written to an HTTP/1.0 client that gets a chunked response without its
 * framing.
 */
static void
up_body_cb(void *arg, const char *p, size_t len)
{
    struct dm_upstream *up = arg;
    struct dm_req *req = up->req;
    if (req == NULL || req->c->closing) {
        return;
    }
    if (req->learn != NULL) {
        dm_learn_body(req, p, len);
    }
    if (!req->dechunk) {
        return;
    }
    up_forward_slice(up, 0, 0); /* the pending head first */
    if (up->closing || up->req != req || req->c->closing) {
        return; /* a failed write closed the client, and req with it */
    }
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)len);
    req->resp_bytes += len;
    dm_learn_work_done(req, (int64_t)len);
    dm_client_write(req->c, &b, 1, &up->in, 1);
}

static void
up_head_done(struct dm_upstream *up)
{
    struct dm_req *req = up->req;
    struct dm_client *c = req->c;
    uint32_t head_len = up->in->off - up->head_start;
    const char *reason = NULL;
    unsigned version = dm_http_parser_version(&up->parser);
    if (head_len > up->rt->conf->limits.header_bytes) {
        /* Whole in one read as in many (up_process bounds those). */
        up_fail_refused(up, "response head too large");
        return;
    }
    if (dm_http_check_response(up->in->data + up->head_start, head_len, &req->rmsg, version,
                               &req->rinfo, &reason) != 0) {
        up_fail_refused(up, reason);
        return;
    }
    unsigned status = dm_http_parser_status(&up->parser);
    if (status < 100 || status > 599) {
        up_fail_refused(up, "invalid status code (RFC 9110: 100 to 599)");
        return;
    }
    if (status == 101) {
        /* A switch only where the client asked for one (else what it sends
         * next would go to the server unparsed: WebSocket smuggling), and
         * only to a protocol the server names (RFC 9110, 15.2.2). */
        bool named = false;
        for (unsigned i = 0; i < req->rmsg.nfields && !named; i++) {
            named = dm_span_ieq(req->rmsg.fields[i].name, "upgrade");
        }
        if (!req->info.upgrade || !named || !req->rinfo.upgrade) {
            /* Without Connection: upgrade (RFC 9110, 7.8: a 101 must send
             * it) llhttp would read on as HTTP what the client is told is
             * the new protocol: refused rather than read two ways. */
            up_fail_refused(up, !req->info.upgrade ? "server switched protocols (101) for a "
                                                     "request that asked for none"
                                : !named           ? "server switched protocols (101) without an "
                                                     "Upgrade field"
                                                   : "server switched protocols (101) without "
                                                     "Connection: upgrade");
            return;
        }
    }
    atomic_store_explicit(&dm_runtime_host(up->rt, up->pool, up->server)->fails, 0,
                          memory_order_relaxed);
    bool informational = status >= 100 && status < 200 && status != 101;
    if (informational && ++req->interim > DM_INTERIM_MAX) {
        up_fail_refused(up, "more than 64 interim (1xx) responses");
        return;
    }
    if (informational && req->info.version == 10) {
        /* HTTP/1.0 has no 1xx: none goes to a 1.0 client (RFC 9110 section 15.2). */
        up->state = DM_U_BODY;
        return;
    }
    bool close = false;
    up->chunked = false;
    up->trailers_at = UINT32_MAX;
    if (!informational) {
        req->status = status;
        up->chunked = req->rinfo.chunked && status != 101 && status != 204 && status != 304 &&
                      !dm_span_ieq(req->msg.method, "head");
        if (up->chunked && req->info.version == 10 && req->rinfo.te_other) {
            /* The chunked framing comes off for it, the other codings could
             * not (and dropped, they would leave it a body it cannot read).
             * Not the server's failure: a client's version must not take it out. */
            up_fail_as(up, 502, "transfer coding other than chunked for an HTTP/1.0 client",
                       UP_LOCAL);
            return;
        }
        bool needs_eof = !req->rinfo.chunked && !req->rinfo.has_length && status != 204 &&
                         status != 304 && !dm_span_ieq(req->msg.method, "head");
        req->dechunk = req->rinfo.chunked && req->info.version == 10;
        /* A response before the whole request body (413, 401): the rest of
         * the body is never read, so the connection closes after it
         * (dm_req_finish), and the client is told so. */
        close = req->close_client || needs_eof || req->dechunk || c->eof || c->w->stopping ||
                (req->info.upgrade && status != 101) || !req->body_done;
        req->close_client = close;
    }
    struct dm_buf *b = dm_buf_get(c->w, head_len + 256);
    if (b == NULL) {
        up_fail_local(up, "out of memory");
        return;
    }
    size_t n = dm_http_write_response(b->data, b->cap, up->in->data + up->head_start, head_len,
                                      &req->rmsg, &req->rinfo, req->info.version, close);
    if (n == 0) {
        dm_buf_unref(c->w, b);
        up_fail_refused(up, "response head too large");
        return;
    }
    if (!informational && c->rt->pools[req->pool].work) {
        dm_learn_response(req);
    }
    if (req->dechunk || req->learn != NULL) {
        up->parser.on_body = up_body_cb;
        up->parser.body_arg = up;
    }
    b->len = (uint32_t)n;
    req->resp_bytes += n;
    req->resp_head_bytes += n;
    req->resp_started = !informational || req->resp_started;
    dm_buf_unref(c->w, req->resp_head);
    req->resp_head = b; /* written by up_forward_slice, with the body's first bytes */
    up->state = DM_U_BODY;
}

/* Appends [from, to) of the read buffer to up->held, up to max bytes in all:
 * 0, -1 past max, -2 out of memory. */
static int
up_hold(struct dm_upstream *up, uint32_t from, uint32_t to, size_t max)
{
    uint32_t n = to - from;
    size_t len = up->held != NULL ? up->held->len : 0;
    if (n == 0) {
        return 0;
    }
    if (len + n > max) {
        return -1;
    }
    return dm_buf_append(up->w, &up->held, up->in->data + from, n) < 0 ? -2 : 0;
}

/*
 * A chunked response's body: [from, up->in->off) was parsed, with the event
 * r. The chunks go out as they came, but the framing after the last data
 * byte of a read is held back until more data follows it: so the last chunk
 * never goes out before its trailer section is whole and checked (llhttp
 * takes a bare LF as the end of one, and does not check the fields), and
 * then goes out with it, with CRLF line ends only. A bad one ends the client
 * connection without the last chunk (the response is visibly cut short) and
 * the server connection with it. Returns <0 when the request failed.
 */
static int
up_chunked_slice(struct dm_upstream *up, uint32_t from, int r)
{
    struct dm_req *req = up->req;
    const struct dm_conf *conf = up->rt->conf;
    uint32_t to = up->in->off;
    int h = 0;
    if (up->trailers_at == UINT32_MAX) {
        const char *de = dm_http_parser_data_end(&up->parser);
        uint32_t data_to = de != NULL ? (uint32_t)(de - up->in->data) : from;
        if (req->dechunk) {
            data_to = to; /* the data went out decoded (up_body_cb), the framing goes */
        } else if (data_to > from) {
            up_forward(up, true, from, data_to);
            if (up->closing || up->req == NULL || req->c->closing) {
                return -1;
            }
        }
        h = up_hold(up, data_to, to, DM_HTTP_CHUNK_LINE_MAX);
        if (h == -1) {
            up_fail(up, 502, "chunk-size line (with its extensions) too long");
            return -1;
        }
        if (h == 0 && r == DM_HTTP_TRAILERS) {
            up->trailers_at = up->held != NULL ? up->held->len : 0;
        }
    } else {
        h = up_hold(up, from, to, (size_t)up->trailers_at + conf->limits.header_bytes);
        if (h == -1) {
            up_fail(up, 502, "response trailers larger than limits.header_bytes");
            return -1;
        }
    }
    if (h < 0) {
        up_fail_local(up, "out of memory");
        return -1;
    }
    if (r == DM_HTTP_MSG_DONE) {
        const char *reason = "no trailer section";
        struct dm_buf *t = up->held; /* not NULL: a trailer section has at least its LF */
        if (t == NULL ||
            dm_http_check_response_trailers(t->data + up->trailers_at, t->len - up->trailers_at,
                                            conf->limits.header_count, &reason) != 0) {
            up_fail(up, 502, reason);
            return -1;
        }
        up->trailers_at = UINT32_MAX;
        dm_req_account(req); /* before its last bytes leave */
        if (req->dechunk) {
            dm_buf_unref(up->w, up->held); /* the body ends with the connection */
            up->held = NULL;
        }
        up_forward(up, true, from, from);
    } else if (r == DM_HTTP_AGAIN) {
        up_forward_slice(up, from, from); /* the head, once all that was read is parsed */
    }
    return up->closing || up->req == NULL || req->c->closing ? -1 : 0;
}

static void
up_enter_tunnel(struct dm_upstream *up)
{
    struct dm_req *req = up->req;
    struct dm_client *c = req->c;
    if (!req->body_done) {
        /* Held trailers or body bytes still to come would be read as the new
         * protocol: a server that switches this early is not followed. */
        up_fail_refused(up, "server switched protocols before the request was complete");
        return;
    }
    up->state = DM_U_TUNNEL;
    c->state = DM_C_TUNNEL;
    dm_upstream_tunnel_active(up); /* timeouts.tunnel, from now and from each byte */
    dm_client_timer_stop(c);
    dm_tq_remove(c->w, &req->bound); /* timeouts.request ends with the exchange */
    /* Bytes after the 101 head are already the new protocol. */
    uint32_t from = up->in->off;
    up->in->off = up->in->len;
    up_forward_slice(up, from, up->in->len);
    dm_client_read_start(c);
    dm_client_process(c);
}

/*
 * After an interim response: what is left of the read buffer moves to its
 * start (or to a fresh buffer when a write still holds this one), so that
 * each head is measured against the buffer alone, not behind the interim
 * heads before it.
 */
static void
up_compact_in(struct dm_upstream *up)
{
    struct dm_buf *in = up->in;
    if (in == NULL || in->off == 0) {
        return;
    }
    uint32_t rest = in->len - in->off;
    if (in->refs == 1) {
        memmove(in->data, in->data + in->off, rest);
    } else {
        struct dm_buf *nb = dm_buf_get(up->w, in->cap);
        if (nb == NULL) {
            return; /* it stays where it is */
        }
        memcpy(nb->data, in->data + in->off, rest);
        dm_buf_unref(up->w, in);
        up->in = in = nb;
    }
    in->off = 0;
    in->len = rest;
}

static void
up_process(struct dm_upstream *up)
{
    for (;;) {
        struct dm_req *req = up->req;
        if (up->closing || req == NULL || req->c->closing) {
            return;
        }
        struct dm_buf *in = up->in;
        if (up->state == DM_U_TUNNEL) {
            uint32_t from = in->off;
            in->off = in->len;
            dm_upstream_tunnel_active(up);
            up_forward_slice(up, from, in->len);
            up_recycle_in(up);
            return;
        }
        if (in == NULL) {
            return;
        }
        uint32_t from = in->off;
        size_t used = 0;
        /* A write of up_body_cb's that fails closes the client, req and this
         * connection with it, and releases up->in, while llhttp still reads
         * the rest of it: held until the parse is over. */
        in->refs++;
        int r = dm_http_parse(&up->parser, in->data + in->off, in->len - in->off, &used);
        bool gone = up->closing || up->req != req || req->c->closing;
        dm_buf_unref(up->w, in);
        if (gone) {
            return;
        }
        if (r < 0) {
            /* Bytes came: a head that does not parse is one refused (in a
             * body, nothing is counted either way). */
            up_fail_refused(up, dm_http_parser_error(&up->parser));
            return;
        }
        in->off += (uint32_t)used;
        if (up->state == DM_U_HEAD) {
            if (r == DM_HTTP_HEAD_DONE) {
                up_head_done(up);
                continue;
            }
            if (in->len - up->head_start > up->rt->conf->limits.header_bytes ||
                in->len == in->cap) {
                up_fail_refused(up, "response head too large");
            }
            return;
        }
        /* Body. */
        if (up->chunked) {
            if (up_chunked_slice(up, from, r) < 0) {
                return;
            }
            if (r == DM_HTTP_TRAILERS) {
                continue;
            }
        } else {
            if (r == DM_HTTP_MSG_DONE && dm_http_parser_status(&up->parser) >= 200) {
                dm_req_account(req); /* before its last bytes leave */
            }
            up_forward_slice(up, from, req->dechunk ? from : in->off);
        }
        if (up->closing || up->req == NULL) {
            return;
        }
        if (r == DM_HTTP_MSG_DONE) {
            unsigned st = dm_http_parser_status(&up->parser);
            if (st >= 100 && st < 200 && st != 101) {
                dm_req_continued(req);
                up->state = DM_U_HEAD;
                dm_http_parser_next(&up->parser);
                up_compact_in(up);
                up->head_start = up->in->off;
                continue;
            }
            if (st == 101) {
                continue; /* the upgrade pause follows */
            }
            dm_upstream_deadline(up, 0);
            dm_req_finish(req);
            return;
        }
        if (r == DM_HTTP_UPGRADE) {
            up_enter_tunnel(up);
            return;
        }
        up_recycle_in(up);
        return;
    }
}

/* The connection ended (EOF, or error code nread) while it had a request, or was idle. */
static void
up_read_end(struct dm_upstream *up, ssize_t nread, const char *why)
{
    struct dm_req *req = up->req;
    if (up->state == DM_U_IDLE || req == NULL) {
        dm_upstream_close(up);
        return;
    }
    if (up->state == DM_U_TUNNEL) {
        up_tunnel_end(up);
        return;
    }
    if (!up->got_bytes) {
        if (dm_req_retry(req, up)) {
            return;
        }
        up_fail(up, 502,
                why != NULL       ? why
                : nread == UV_EOF ? "server closed the connection without answering"
                                  : uv_strerror((int)nread));
        return;
    }
    if (nread == UV_EOF && up->state == DM_U_BODY &&
        dm_http_parse_eof(&up->parser) == DM_HTTP_MSG_DONE) {
        uv_read_stop((uv_stream_t *)&up->tcp);
        req->rinfo.keep_alive = false;
        dm_upstream_deadline(up, 0);
        dm_req_finish(req);
        return;
    }
    up_fail(up, 502,
            why != NULL              ? why
            : nread != UV_EOF        ? uv_strerror((int)nread)
            : up->state == DM_U_HEAD ? "server closed the connection mid-head"
                                     : "server closed the connection mid-response");
}

/* n response bytes arrived at the end of up->in. */
static void
up_received(struct dm_upstream *up, size_t n)
{
    if (!up->got_bytes) {
        up->got_bytes = true;
        up->head_start = up->in->off;
    }
    up->in->len += (uint32_t)n;
    if (up->deadline_ms != UINT64_MAX) {
        /* Only the deadline moves; the timer catches up when it fires. */
        up->deadline_ms = uv_now(&up->w->loop) + up->rt->conf->timeouts.server_response_ms;
    }
    up_process(up);
}

/* The TLS handshake with the server is done: the connection is usable, as a plain one on connect.
 */
static void
up_tls_connected(struct dm_upstream *up)
{
    bool resumed = SSL_session_reused(up->tls->ssl) == 1;
    dm_stat_add(&idle_stats(up)->tls[resumed ? DM_TLS_RESUMED : DM_TLS_FULL], 1);
    struct dm_req *req = up->req;
    dm_upstream_ready_cb ready = up->ready;
    dm_upstream_deadline(up, 0);
    up->state = DM_U_HEAD;
    if (req != NULL) {
        ready(req, up, 0);
    } else {
        dm_upstream_release(up, true);
    }
}

/* The TLS handshake with the server failed: as a failed connect, with the reason. */
static void
up_tls_connect_failed(struct dm_upstream *up)
{
    dm_stat_add(&idle_stats(up)->tls[DM_TLS_FAILED], 1);
    struct dm_req *req = up->req;
    dm_upstream_ready_cb ready = up->ready;
    snprintf(up->w->up_why, sizeof(up->w->up_why), "TLS handshake failed: %s",
             dm_tls_error(up->tls));
    up->req = NULL;
    dm_upstream_close(up);
    if (req != NULL) {
        ready(req, NULL, UV_EPROTO); /* the request takes up_why for the log */
    } else {
        const struct dm_conf_pool *pc = &up->rt->conf->pools[up->pool];
        dm_log_warn("server %s/%s: %s", pc->name, pc->servers[up->server].name, up->w->up_why);
    }
    up->w->up_why[0] = 0;
}

/*
 * Goes on with a TLS connection's input: the handshake, then plain text
 * into the read buffer for up_process, while the connection is read
 * (back-pressure stops it); what is left waits with OpenSSL or in the
 * stash for dm_upstream_read_start.
 */
static void
up_tls_pump(void *arg)
{
    struct dm_upstream *up = arg;
    struct dm_tls *t = up->tls;
    if (up->closing || t == NULL) {
        return;
    }
    if (t->failed && up->state != DM_U_CONNECTING) {
        char why[160];
        snprintf(why, sizeof(why), "TLS: %s", dm_tls_error(t));
        up_fail(up, 502, why);
        return;
    }
    if (up->state == DM_U_CONNECTING) {
        int r = dm_tls_handshake(t);
        if (r == DM_TLS_ERROR || up_tls_flush(up) < 0) {
            up_tls_connect_failed(up);
            return;
        }
        if (r == DM_TLS_WANT) {
            if (dm_tls_keep_input(t) < 0) {
                up_tls_connect_failed(up);
            }
            return;
        }
        up_tls_connected(up);
        if (up->closing || up->tls != t) {
            return;
        }
    }
    while (!up->closing && !up->paused) {
        int n;
        if (up->state == DM_U_IDLE || up->req == NULL) {
            /* Idle: session tickets are taken in; plain text is a server
             * talking unasked, and the connection goes. */
            char tmp[64];
            n = dm_tls_read(t, tmp, sizeof(tmp));
            if (n != DM_TLS_WANT) {
                dm_upstream_close(up);
                return;
            }
            break;
        }
        uv_buf_t space;
        dm_buf_read_space(up->w, &up->in, up->rt->buf_cap, &space);
        if (space.len == 0) {
            up_fail_local(up, "no buffer for the response (out of memory)");
            return;
        }
        n = dm_tls_read(t, space.base, space.len);
        if (n == DM_TLS_WANT) {
            break;
        }
        if (n == DM_TLS_EOF || n == DM_TLS_ERROR) {
            char why[160];
            if (n == DM_TLS_ERROR) {
                snprintf(why, sizeof(why), "TLS: %s", dm_tls_error(t));
            }
            up_read_end(up, UV_EOF, n == DM_TLS_ERROR ? why : NULL);
            return;
        }
        up_received(up, (size_t)n);
        if (up->tls != t) {
            return; /* closed (and freed) meanwhile */
        }
    }
    if (!up->closing && (up_tls_flush(up) < 0 || dm_tls_keep_input(t) < 0)) {
        up_fail(up, 502, "TLS: cannot write to the server");
    }
}

static void
up_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct dm_upstream *up = s->data;
    if (nread == 0) {
        return;
    }
    if (up->tls != NULL && nread > 0) {
        if (dm_tls_feed(up->tls, buf->base, (size_t)nread) < 0) {
            up_fail_local(up, "out of memory");
            return;
        }
        up_tls_pump(up);
        return;
    }
    if (nread == UV_EOF && up->tls != NULL && up->state != DM_U_CONNECTING &&
        dm_tls_buffered(up->tls)) {
        /* Input still with OpenSSL or stashed goes first; if some is left
         * (paused meanwhile), the next read sees the end again. */
        struct dm_tls *t = up->tls;
        up_tls_pump(up);
        if (up->closing || up->tls != t || up->paused || dm_tls_buffered(t)) {
            return;
        }
    }
    if (up->tls != NULL && up->state == DM_U_CONNECTING) {
        dm_tls_feed(up->tls, NULL, 0);
        snprintf(up->tls->why, sizeof(up->tls->why), "%s",
                 nread == UV_EOF ? "the server closed the connection in the handshake"
                                 : uv_strerror((int)nread));
        up_tls_connect_failed(up);
        return;
    }
    if (up->state == DM_U_IDLE || up->req == NULL) {
        /* An idle connection closed or sent something unasked for: drop it. */
        dm_upstream_close(up);
        return;
    }
    if (nread == UV_ENOBUFS) {
        up_fail_local(up, "no buffer for the response (out of memory)");
        return;
    }
    if (nread < 0) {
        up_read_end(up, nread, NULL);
        return;
    }
    up_received(up, (size_t)nread);
}

static void
up_connect_cb(uv_connect_t *creq, int status)
{
    struct dm_upstream *up = creq->data;
    if (up->closing) {
        return; /* timed out and reported already */
    }
    struct dm_req *req = up->req;
    dm_upstream_ready_cb ready = up->ready;
    dm_upstream_deadline(up, 0);
    if (status < 0) {
        up->req = NULL;
        dm_upstream_close(up);
        if (req != NULL) {
            ready(req, NULL, status);
        }
        return;
    }
    /* Open from here until the close callback (struct dm_host, connections). */
    up->counted = true;
    struct dm_host *host = dm_runtime_host(up->rt, up->pool, up->server);
    dm_counter_add(&host->connections, 1);
    dm_host_connect_sample(host, uv_hrtime() / 1000 - up->connect_us);
    uv_tcp_nodelay(&up->tcp, 1);
    const struct dm_conf_pool *pc = &up->rt->conf->pools[up->pool];
    if (pc->tls != NULL) {
        /* The handshake, bounded by timeouts.connect as the connect was. */
        struct dm_rpool *p = &up->rt->pools[up->pool];
        SSL_SESSION **slot = &p->tls_sessions[(size_t)up->w->id * p->sv->n + (size_t)up->server];
        const struct dm_conf_addr *a = &pc->servers[up->server].addr;
        up->tls = dm_tls_new_client(up->w, pc->tls, a->text, (const struct sockaddr *)&a->sa, slot);
        if (up->tls == NULL) {
            up->req = NULL;
            dm_upstream_close(up);
            if (req != NULL) {
                ready(req, NULL, UV_ENOMEM);
            }
            return;
        }
        dm_upstream_deadline(up, up->rt->conf->timeouts.connect_ms);
        dm_upstream_read_start(up);
        up_tls_pump(up); /* the ClientHello */
        return;
    }
    up->state = DM_U_HEAD;
    if (req != NULL) {
        ready(req, up, 0);
    } else {
        dm_upstream_release(up, true);
    }
}

int
dm_upstream_take(struct dm_worker *w, struct dm_runtime *rt, size_t pool, int server,
                 struct dm_req *req, dm_upstream_ready_cb ready)
{
    struct dm_rpool *p = &rt->pools[pool];
    struct dm_upstream **head = &p->idle[(size_t)w->id * p->sv->n + (size_t)server];
    if (*head != NULL) {
        struct dm_upstream *up = *head;
        idle_remove(up);
        dm_upstream_deadline(up, 0);
        up->reused = true;
        up->req = req;
        req->up = up;
        return DM_UPSTREAM_NOW;
    }
    struct dm_upstream *up = calloc(1, sizeof(*up));
    if (up == NULL) {
        return UV_ENOMEM;
    }
    int r = uv_tcp_init(&w->loop, &up->tcp);
    if (r < 0) {
        free(up); /* never initialized: no close */
        return r;
    }
    dm_sockets_add(1, false); /* until up_free_cb */
    up->tcp.data = up;
    r = uv_timer_init(&w->loop, &up->timer);
    if (r < 0) {
        goto close_tcp;
    }
    up->timer.data = up;
    up->w = w;
    up->rt = rt;
    dm_runtime_ref(rt);
    up->pool = pool;
    up->server = server;
    up->req = req;
    req->up = up; /* so that a client closing meanwhile cancels the connect */
    up->ready = ready;
    up->state = DM_U_CONNECTING;
    up->creq.data = up;
    const struct dm_conf_server *sc = &rt->conf->pools[pool].servers[server];
    up->connect_us = uv_hrtime() / 1000;
    r = uv_tcp_connect(&up->creq, &up->tcp, (const struct sockaddr *)&sc->addr.sa, up_connect_cb);
    if (r < 0) {
        up->req = NULL;
        req->up = NULL;
        dm_upstream_close(up);
        return r;
    }
    dm_upstream_deadline(up, rt->conf->timeouts.connect_ms);
    return 0;

close_tcp:
    uv_close((uv_handle_t *)&up->tcp, up_free_cb); /* up->rt is NULL: nothing to unref */
    return r;
}

void
dm_upstream_release(struct dm_upstream *up, bool reusable)
{
    up_flush(up);
    up->req = NULL;
    up->parser.on_body = NULL;
    /* A host that is not awake (draining, asleep, booting) takes no new
     * request, so its connections are not kept either. */
    if (!reusable || up->closing || up->w->stopping || up->rt != up->w->rt ||
        atomic_load_explicit(&dm_runtime_host(up->rt, up->pool, up->server)->power,
                             memory_order_relaxed) != DM_POWER_AWAKE) {
        dm_upstream_close(up);
        return;
    }
    dm_buf_unref(up->w, up->in);
    up->in = NULL;
    dm_buf_unref(up->w, up->held);
    up->held = NULL;
    up->chunked = false;
    up->state = DM_U_IDLE;
    up->paused = false;
    up->deadline_held = false;
    struct dm_upstream **head = idle_head(up);
    up->prev = NULL;
    up->next = *head;
    if (*head != NULL) {
        (*head)->prev = up;
    }
    *head = up;
    dm_stat_add(&idle_stats(up)->idle, 1);
    /* Keep reading: a server closing an idle connection is noticed at once. */
    dm_upstream_read_start(up);
    dm_upstream_deadline(up, up->rt->conf->timeouts.client_keepalive_ms);
}

unsigned
dm_upstream_close_idle_server(struct dm_worker *w, struct dm_runtime *rt, size_t pool,
                              size_t server)
{
    struct dm_rpool *p = &rt->pools[pool];
    struct dm_upstream **head = &p->idle[(size_t)w->id * p->sv->n + server];
    unsigned n = 0;
    while (*head != NULL) {
        struct dm_upstream *up = *head;
        up->commanded = true;
        w->commanded_closing++;
        dm_upstream_close(up);
        n++;
    }
    return n;
}

void
dm_upstream_close_idle(struct dm_worker *w, struct dm_runtime *rt)
{
    for (size_t i = 0; i < rt->npools; i++) {
        struct dm_rpool *p = &rt->pools[i];
        for (size_t s = 0; s < p->sv->n; s++) {
            struct dm_upstream **head = &p->idle[(size_t)w->id * p->sv->n + s];
            while (*head != NULL) {
                dm_upstream_close(*head);
            }
        }
    }
}
