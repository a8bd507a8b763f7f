/*
 * The request path of one worker: client connections, requests and server
 * connections. Everything here runs on the worker's own thread; the only
 * shared memory it touches is the runtime's server table (relaxed atomics).
 *
 * A request goes through the client states of enum dm_client_state:
 *   IDLE -> HEAD (bytes of a request head arrive)
 *        -> CONNECT (head checked, a server picked, its connection coming)
 *        -> BODY (head written to the server, body bytes forwarded as they come)
 *        -> WAIT (request complete, response under way)
 *        -> IDLE again when the response is complete, or TUNNEL after a 101.
 * Pipelined requests wait in the read buffer until the response before them
 * is complete, so responses go out in order.
 */
#include "proxy/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/hash.h"
#include "parsers/catalog.h"
#include "parsers/html_scan.h"
#include "proxy/log.h"
#include "proxy/route.h"

#define DM_FREE_REQS_MAX 64

static void client_process(struct dm_client *c);
static void client_close(struct dm_client *c);
static void client_respond_error(struct dm_client *c, unsigned status, const char *reason);
static void req_pick_and_connect(struct dm_req *req);
static void up_process(struct dm_upstream *up);
static void up_start_read(struct dm_upstream *up);
static void req_finish(struct dm_req *req);
static void req_await_response(struct dm_req *req);
static void req_work_done(struct dm_req *req, int64_t n);
static void req_reserve(struct dm_req *req);
static void tq_remove(struct dm_worker *w, struct dm_tnode *n);
static void up_deadline(struct dm_upstream *up, uint64_t ms);
static void up_cork_drop(struct dm_upstream *up);
static void up_flush(struct dm_upstream *up);
static void client_age_close(struct dm_client *c);
static void learn_object(void *arg, const char *host, size_t host_len, const char *path,
                         size_t path_len, enum dm_html_kind kind);

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
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Error";
    }
}

static const struct dm_conf_server *
server_conf(const struct dm_runtime *rt, size_t pool, int server)
{
    return &rt->conf->pools[pool].servers[server];
}

static struct dm_server *
server_of(const struct dm_runtime *rt, size_t pool, int server)
{
    return &rt->pools[pool].sv->s[server];
}

static void
peer_text(const struct dm_client *c, char *out, size_t cap)
{
    if (c->peer.sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &c->peer.in6.sin6_addr, out, (socklen_t)cap);
        return;
    }
    /* IPv4 by hand: glibc's inet_ntop goes through sprintf, on every request. */
    const uint8_t *b = (const uint8_t *)&c->peer.in4.sin_addr;
    char *p = out;
    for (int i = 0; i < 4; i++) {
        unsigned v = b[i];
        if (v >= 100) {
            *p++ = (char)('0' + v / 100);
        }
        if (v >= 10) {
            *p++ = (char)('0' + v / 10 % 10);
        }
        *p++ = (char)('0' + v % 10);
        *p++ = i < 3 ? '.' : '\0';
    }
    (void)cap; /* 16 bytes always suffice and cap is INET6_ADDRSTRLEN */
}

/* ---- requests ---- */

static struct dm_req *
req_get(struct dm_client *c)
{
    struct dm_runtime *rt = c->rt;
    struct dm_worker *w = c->w;
    uint32_t max_fields = rt->conf->limits.header_count;
    uint32_t tried_bytes = rt->tried_bytes > 0 ? rt->tried_bytes : 1;
    size_t size =
        sizeof(struct dm_req) + 2 * (size_t)max_fields * sizeof(struct dm_http_field) + tried_bytes;
    struct dm_req *req;
    if (w->free_reqs != NULL && w->free_reqs->size == size) {
        struct dm_req_free *f = w->free_reqs;
        w->free_reqs = f->next;
        w->nfree_reqs--;
        req = (struct dm_req *)f;
    } else {
        req = malloc(size > sizeof(struct dm_req_free) ? size : sizeof(struct dm_req_free));
        if (req == NULL) {
            return NULL;
        }
    }
    req->alloc_size = size;
    size_t alloc_size = req->alloc_size;
    memset(req, 0, sizeof(*req));
    req->alloc_size = alloc_size;
    req->max_fields = max_fields;
    req->tried_bytes = tried_bytes;
    req->c = c;
    req->msg.fields = req->fields;
    req->msg.max_fields = max_fields;
    req->rmsg.fields = req->fields + max_fields;
    req->rmsg.max_fields = max_fields;
    req->tried = (uint8_t *)(req->fields + 2 * (size_t)max_fields);
    memset(req->tried, 0, tried_bytes);
    req->server = DM_NO_SERVER;
    req->start_us = uv_hrtime() / 1000;
    c->w->busy++;
    if (c->w->busy > c->w->busy_peak) {
        c->w->busy_peak = c->w->busy;
    }
    return req;
}

static void
req_free(struct dm_worker *w, struct dm_req *req)
{
    dm_buf_unref(w, req->head_buf);
    dm_buf_unref(w, req->out_head);
    dm_buf_unref(w, req->resp_head);
    dm_buf_unref(w, req->trailers);
    tq_remove(w, &req->bound);
    free(req->learn);
    req->learn = NULL;
    w->busy--;
    if (w->nfree_reqs < DM_FREE_REQS_MAX) {
        struct dm_req_free *f = (struct dm_req_free *)req;
        size_t size = req->alloc_size;
        f->size = size;
        f->next = w->free_reqs;
        w->free_reqs = f;
        w->nfree_reqs++;
        return;
    }
    free(req);
}

/* ---- client connections ---- */

/*
 * Client timeouts without a timer per connection (an idle keep-alive
 * connection should cost as little memory as possible): each kind of timeout
 * has one list per worker, kept in deadline order, and the worker's tick
 * expires entries from the head. Entries of a kind mostly share one duration,
 * so an insertion almost always lands at the tail; a shorter one (a reload
 * changed the duration, or a request's remaining bound) walks back to its
 * place.
 */
static void
tq_remove(struct dm_worker *w, struct dm_tnode *n)
{
    if (n->kind == DM_T_NONE) {
        return;
    }
    struct dm_tq *q = &w->tq[n->kind];
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

/* Puts n on the list of `kind`, to fire at loop time deadline_ms. */
static void
tq_insert(struct dm_worker *w, struct dm_tnode *n, enum dm_tkind kind, uint64_t deadline_ms)
{
    tq_remove(w, n);
    struct dm_tq *q = &w->tq[kind];
    struct dm_tnode *after = q->tail;
    while (after != NULL && after->deadline_ms > deadline_ms) {
        after = after->prev;
    }
    n->deadline_ms = deadline_ms;
    n->kind = (uint8_t)kind;
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

static void
client_timer_stop(struct dm_client *c)
{
    tq_remove(c->w, &c->timer);
}

/* Arms the client's timeout of `kind` for ms from now; 0 leaves it on no list. */
static void
client_timer_start(struct dm_client *c, enum dm_tkind kind, uint64_t ms)
{
    if (ms == 0) {
        client_timer_stop(c);
        return;
    }
    tq_insert(c->w, &c->timer, kind, uv_now(&c->w->loop) + ms);
}

static void client_timeout(struct dm_client *c, enum dm_tkind kind);

void
dm_clients_expire(struct dm_worker *w)
{
    uint64_t now = uv_now(&w->loop);
    for (int k = DM_T_NONE + 1; k < DM_T_KINDS; k++) {
        /* Bounded: each pass takes the head off the list (a body window that
         * is re-armed goes back to a later deadline). */
        struct dm_tnode *n;
        while ((n = w->tq[k].head) != NULL && n->deadline_ms <= now) {
            tq_remove(w, n);
            struct dm_client *c =
                k == DM_T_REQUEST
                    ? ((struct dm_req *)((char *)n - offsetof(struct dm_req, bound)))->c
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
    if (c->in == NULL) {
        c->in = dm_buf_get(c->w, c->rt->buf_cap);
    }
    if (c->in == NULL) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init(c->in->data + c->in->len, c->in->cap - c->in->len);
}

static void client_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void
client_read_start(struct dm_client *c)
{
    if (!c->reading && !c->closing && !c->eof) {
        if (uv_read_start((uv_stream_t *)&c->tcp, client_alloc_cb, client_read_cb) == 0) {
            c->reading = true;
        }
    }
}

static void
client_read_stop(struct dm_client *c)
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
    dm_runtime_unref(c->rt);
    free(c);
    (void)w;
}

/* Closes the client and abandons its request (and that request's server connection). */
static void
client_close(struct dm_client *c)
{
    if (c->closing) {
        return;
    }
    c->closing = true;
    struct dm_worker *w = c->w;
    struct dm_req *req = c->req;
    if (req != NULL) {
        if (req->up != NULL) {
            struct dm_upstream *up = req->up;
            req->up = NULL;
            up->req = NULL;
            dm_upstream_close(up);
        }
        req_work_done(req, req->work);
        if (req->server != DM_NO_SERVER && req->attempts > 0 && !req->counted) {
            /* A request that was counted against its server ends here. */
            struct dm_server *s = server_of(c->rt, req->pool, req->server);
            dm_counter_sub(&s->conns, 1);
            dm_counter_sub(&s->inflight, 1);
            req->server = DM_NO_SERVER;
        }
        req_free(w, req);
        c->req = NULL;
    }
    client_age_close(c);
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
    client_timer_stop(c);
    uv_close((uv_handle_t *)&c->tcp, client_free_cb);
}

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
        client_close(c);
        return;
    }
    if (c->close_after && c->writes == 0) {
        client_close(c);
        return;
    }
    /* Back-pressure: the server side paused while this queue was full. */
    struct dm_upstream *up = c->req != NULL ? c->req->up : NULL;
    if (up != NULL && up->paused &&
        uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) < DM_WRITE_HIGH) {
        up->paused = false;
        up_start_read(up);
    }
}

/* Writes to the client; bufs reference hold[] (kept until written). */
static void
client_write(struct dm_client *c, uv_buf_t *bufs, unsigned n, struct dm_buf **hold, unsigned nhold)
{
    int r =
        dm_stream_write(c->w, (uv_stream_t *)&c->tcp, bufs, n, hold, nhold, client_write_done, c);
    if (r == 0) {
        c->writes++;
    } else if (r < 0) {
        c->close_after = true;
        if (c->writes == 0) {
            client_close(c);
        }
    }
}

/* Closes the client now if nothing is in flight, else after the last write. */
static void
client_close_when_written(struct dm_client *c)
{
    c->close_after = true;
    if (c->writes == 0) {
        client_close(c);
    }
}

/* Copies s into out for a JSON string (quotes, backslashes and control bytes escaped). */
static size_t
json_escape(char *out, size_t cap, const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n + 7 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            out[n++] = '\\';
            out[n++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", ch);
        } else {
            out[n++] = (char)ch;
        }
    }
    out[n] = 0;
    return n;
}

/* One access-log line per request: see conf/README.md for both formats. */
static void
log_access(struct dm_req *req)
{
    struct dm_client *c = req->c;
    struct dm_worker *w = c->w;
    if (w->log_fd < 0) {
        return;
    }
    char addr[INET6_ADDRSTRLEN];
    peer_text(c, addr, sizeof(addr));
    uint64_t now = uv_hrtime() / 1000;
    const char *server = "-";
    if (req->server != DM_NO_SERVER) {
        server = server_conf(c->rt, req->pool, req->server)->name;
    }
    double up_s = req->up_start_us > 0 ? (double)(now - req->up_start_us) / 1e6 : 0.0;
    double total_s = (double)(now - req->start_us) / 1e6;
    time_t t = time(NULL);
    if (t != w->log_time) {
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(w->log_time_text, sizeof(w->log_time_text), "%Y-%m-%dT%H:%M:%SZ", &tm);
        w->log_time = t;
    }
    struct dm_span m = req->msg.method.p != NULL ? req->msg.method : (struct dm_span){ "-", 1 };
    struct dm_span tg = req->msg.target.p != NULL ? req->msg.target : (struct dm_span){ "-", 1 };
    char method[64];
    char target[1200];
    char line[2048];
    int n;
    if (w->json_log) {
        json_escape(method, sizeof(method), m.p, m.len);
        json_escape(target, sizeof(target), tg.p, tg.len);
        n = snprintf(line, sizeof(line),
                     "{\"time\":\"%s\",\"client\":\"%s\",\"method\":\"%s\",\"target\":\"%s\","
                     "\"status\":%u,\"bytes\":%llu,\"upstream\":\"%s\",\"upstream_time\":%.6f,"
                     "\"request_time\":%.6f}",
                     w->log_time_text, addr, method, target, req->status,
                     (unsigned long long)req->resp_bytes, server, up_s, total_s);
    } else {
        /* Bytes that would break the line (control bytes) never pass the parser. */
        int mlen = m.len > 32 ? 32 : (int)m.len;
        int tlen = tg.len > 1024 ? 1024 : (int)tg.len;
        n = snprintf(line, sizeof(line), "%s %s \"%.*s %.*s HTTP/%u.%u\" %u %llu %s %.6f %.6f",
                     w->log_time_text, addr, mlen, m.p, tlen, tg.p, req->info.version / 10,
                     req->info.version % 10, req->status, (unsigned long long)req->resp_bytes,
                     server, up_s, total_s);
    }
    if (n > 0) {
        dm_worker_log_access(w, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
    }
}

/* Answers the current request with an error and closes the connection. */
static void
client_respond_error(struct dm_client *c, unsigned status, const char *reason)
{
    struct dm_req *req = c->req;
    char addr[INET6_ADDRSTRLEN];
    peer_text(c, addr, sizeof(addr));
    dm_log_warn("client %s: %u %s", addr, status, reason);
    if (req != NULL && req->up != NULL) {
        struct dm_upstream *up = req->up;
        req->up = NULL;
        up->req = NULL;
        dm_upstream_close(up);
    }
    client_read_stop(c);
    client_timer_stop(c);
    if (req != NULL && req->resp_started) {
        /* Part of a response went out already: all we can do is close. */
        client_close(c);
        return;
    }
    struct dm_buf *b = dm_buf_get(c->w, DM_ERRBUF);
    if (b == NULL) {
        client_close(c);
        return;
    }
    char body[256];
    int blen = snprintf(body, sizeof(body), "%u %s: %s\n", status, status_text(status), reason);
    int n = snprintf(b->data, b->cap,
                     "HTTP/1.1 %u %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                     "Connection: close\r\n\r\n%s",
                     status, status_text(status), blen, body);
    if (n < 0 || (uint32_t)n >= b->cap) {
        n = 0;
    }
    b->len = (uint32_t)n;
    if (req != NULL) {
        req->status = status;
        req->resp_bytes = (uint64_t)n;
        req->resp_started = true;
        log_access(req);
    }
    uv_buf_t out = uv_buf_init(b->data, b->len);
    c->close_after = true;
    client_write(c, &out, 1, &b, 1);
    dm_buf_unref(c->w, b);
    if (!c->closing && c->writes == 0) {
        client_close(c);
    }
}

/* A new window of the request body's minimum rate starts now (timeouts.client_body). */
static void
client_body_window(struct dm_client *c)
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
            client_respond_error(c, 408, "request head not received in time");
        } else {
            client_close(c);
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
            client_body_window(c);
            break;
        }
        client_respond_error(c, 408, "request body slower than limits.body_min_rate");
        break;
    }
    case DM_T_REQUEST:
        client_respond_error(c, 504, "request took longer than timeouts.request");
        break;
    default:
        client_close(c);
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
    if (in->refs == 1) {
        memmove(in->data, in->data + in->off, rest);
        in->off = 0;
        in->len = rest;
        return 0;
    }
    struct dm_buf *nb = dm_buf_get(c->w, c->rt->buf_cap);
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
    if (client_make_room(c) < 0) {
        client_close(c);
        return false;
    }
    c->req = req_get(c);
    if (c->req == NULL) {
        client_close(c);
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

/* Sends bytes [from, to) of the client's read buffer to the server. */
static void up_write(struct dm_upstream *up, uv_buf_t *bufs, unsigned n, struct dm_buf **hold,
                     unsigned nhold);

static void
client_forward_slice(struct dm_client *c, uint32_t from, uint32_t to)
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
        up_write(req->up, b, n, hold, n);
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
        client_respond_error(c, 431, "request trailers larger than limits.header_bytes");
        return -1;
    }
    if (t->len + n > t->cap) {
        uint32_t cap = t->cap * 2 > t->len + n ? t->cap * 2 : t->len + n;
        struct dm_buf *nt = dm_buf_get(c->w, cap);
        if (nt == NULL) {
            client_respond_error(c, 500, "out of memory");
            return -1;
        }
        memcpy(nt->data, t->data, t->len);
        nt->len = t->len;
        dm_buf_unref(c->w, t);
        req->trailers = t = nt;
    }
    memcpy(t->data + t->len, c->in->data + from, n);
    t->len += n;
    return 0;
}

/* The request's trailer section is whole: checked, then forwarded (or 400). */
static int
client_send_trailers(struct dm_client *c)
{
    struct dm_req *req = c->req;
    const char *reason = NULL;
    if (dm_http_check_trailers(req->trailers->data, req->trailers->len, &reason) != 0) {
        client_respond_error(c, 400, reason);
        return -1;
    }
    if (req->up != NULL) {
        uv_buf_t b = uv_buf_init(req->trailers->data, req->trailers->len);
        up_write(req->up, &b, 1, &req->trailers, 1);
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

static void
client_head_done(struct dm_client *c)
{
    struct dm_req *req = c->req;
    const struct dm_conf *cf = c->rt->conf;
    uint32_t head_len = c->in->off - c->head_start;
    const char *reason = NULL;
    if (head_len > cf->limits.header_bytes) {
        client_respond_error(c, 431, "request head larger than limits.header_bytes");
        return;
    }
    int st = dm_http_check_request(c->in->data + c->head_start, head_len, &req->msg,
                                   dm_http_parser_version(&c->parser), &req->info, &reason);
    if (st != 0) {
        client_respond_error(c, (unsigned)st, reason);
        return;
    }
    if (cf->limits.body_bytes > 0 && req->info.has_length &&
        req->info.content_length > cf->limits.body_bytes) {
        client_respond_error(c, 413, "request body larger than limits.body_bytes");
        return;
    }
    req->head_buf = c->in;
    req->head_len = head_len;
    c->in->refs++;
    req->close_client = !req->info.keep_alive || c->w->stopping;
    req->pool = dm_route_match(cf, req->info.host.p, req->info.host.len, req->info.path.p,
                               req->info.path.len);
    if (c->rt->pools[req->pool].age) {
        /* A connection whose page came from a host-less preload keys its
         * objects without host too, so that they match the page's list. */
        bool any = c->any_host;
        req->key = dm_catalog_key(any ? "" : req->info.host.p, any ? 0 : req->info.host.len,
                                  req->info.path.p, req->info.path.len);
    }
    c->state = DM_C_CONNECT;
    client_timer_stop(c);
    if (cf->timeouts.request_ms > 0) {
        tq_insert(c->w, &req->bound, DM_T_REQUEST, uv_now(&c->w->loop) + cf->timeouts.request_ms);
    }
    req_pick_and_connect(req);
}

static void
client_process(struct dm_client *c)
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
                    client_close(c);
                    return;
                }
                if (c->served && c->timer.kind != DM_T_KEEPALIVE) {
                    client_timer_start(c, DM_T_KEEPALIVE,
                                       c->rt->conf->timeouts.client_keepalive_ms);
                } else if (!c->served && c->timer.kind != DM_T_HEADER) {
                    client_timer_start(c, DM_T_HEADER, c->rt->conf->timeouts.client_header_ms);
                }
                client_read_start(c);
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
                client_respond_error(c, 400, dm_http_parser_error(&c->parser));
                return;
            }
            in->off += (uint32_t)used;
            if (r == DM_HTTP_HEAD_DONE) {
                client_head_done(c);
                return;
            }
            if (in->len - c->head_start > c->rt->conf->limits.header_bytes) {
                client_respond_error(c, 431, "request head larger than limits.header_bytes");
                return;
            }
            if (c->eof) {
                client_close(c);
            }
            return;
        }
        case DM_C_CONNECT:
        case DM_C_WAIT:
            /* Pipelined bytes wait; stop reading when there is no room left. */
            if (in != NULL && in->len == in->cap) {
                client_read_stop(c);
            }
            return;
        case DM_C_BODY: {
            struct dm_req *req = c->req;
            if (in == NULL || (in->off == in->len &&
                               !(req->info.chunked == false && req->info.content_length == 0))) {
                return;
            }
            size_t used = 0;
            uint32_t from = in->off;
            int r = dm_http_parse(&c->parser, in->data + in->off, in->len - in->off, &used);
            if (r < 0) {
                client_respond_error(c, 400, dm_http_parser_error(&c->parser));
                return;
            }
            uint64_t limit = c->rt->conf->limits.body_bytes;
            if (limit > 0 && c->parser.body_bytes > limit) {
                client_respond_error(c, 413, "request body larger than limits.body_bytes");
                return;
            }
            in->off += (uint32_t)used;
            if (req->body_raw == 0 && used > 0 && req->info.expect_continue && !req->continued &&
                req->up != NULL) {
                up_deadline(req->up, 0); /* the client went on without the 100 */
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
                    client_respond_error(c, 400, "chunked body does not end with CRLF CRLF");
                    return;
                }
            }
            if (req->trailers != NULL) {
                /* The trailer section is held until it is whole and checked. */
                if (client_hold_trailers(c, from, in->off) < 0) {
                    return;
                }
            } else {
                client_forward_slice(c, from, in->off);
            }
            if (c->closing || c->req == NULL) {
                return;
            }
            if (r == DM_HTTP_TRAILERS) {
                req->trailers = dm_buf_get(c->w, DM_SMALL_CAP);
                if (req->trailers == NULL) {
                    client_respond_error(c, 500, "out of memory");
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
                client_timer_stop(c); /* the body window */
                req_await_response(req);
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
                client_forward_slice(c, from, in->len);
                client_recycle_in(c);
            }
            return;
        }
    }
}

static void
client_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    struct dm_client *c = s->data;
    if (nread == 0) {
        return;
    }
    if (nread == UV_ENOBUFS) {
        client_read_stop(c);
        return;
    }
    if (nread < 0) {
        client_read_stop(c);
        c->eof = true;
        if (nread != UV_EOF) {
            client_close(c);
            return;
        }
        switch (c->state) {
        case DM_C_IDLE:
        case DM_C_HEAD:
            if (c->writes == 0) {
                client_close(c);
            } else {
                client_close_when_written(c);
            }
            return;
        case DM_C_BODY:
        case DM_C_TUNNEL:
            /* The request body was cut short, or a tunnel ends: end both sides. */
            client_close_when_written(c);
            if (c->req != NULL && c->req->up != NULL) {
                struct dm_upstream *up = c->req->up;
                c->req->up = NULL;
                up->req = NULL;
                dm_upstream_close(up);
            }
            return;
        default:
            /* The response can still be delivered; close after it. */
            if (c->req != NULL) {
                c->req->close_client = true;
            }
            return;
        }
    }
    c->in->len += (uint32_t)nread;
    client_process(c);
}

void
dm_client_accept(struct dm_worker *w, uv_stream_t *listener)
{
    struct dm_client *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return;
    }
    c->w = w;
    uv_tcp_init(&w->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        free(c);
        return;
    }
    c->rt = w->rt;
    dm_runtime_ref(c->rt);
    uv_tcp_nodelay(&c->tcp, 1);
    int len = sizeof(c->peer);
    uv_tcp_getpeername(&c->tcp, &c->peer.sa, &len);
    dm_http_parser_init(&c->parser, true);
    c->next = w->clients;
    if (w->clients != NULL) {
        w->clients->prev = c;
    }
    w->clients = c;
    w->nclients++;
    c->state = DM_C_IDLE;
    c->bound = -1;
    client_timer_start(c, DM_T_HEADER, c->rt->conf->timeouts.client_header_ms);
    client_read_start(c);
}

void
dm_clients_drain(struct dm_worker *w)
{
    struct dm_client *c = w->clients;
    while (c != NULL) {
        struct dm_client *next = c->next;
        if (c->state == DM_C_IDLE && c->writes == 0) {
            client_close(c);
        } else if (c->req != NULL) {
            c->req->close_client = true;
        }
        c = next;
    }
}

void
dm_clients_close_all(struct dm_worker *w)
{
    while (w->clients != NULL) {
        client_close(w->clients);
    }
}

/* ---- picking a server ---- */

static uint64_t
mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void
server_failed(struct dm_runtime *rt, size_t pool, int server, const char *why)
{
    struct dm_server *s = server_of(rt, pool, server);
    const struct dm_conf_pool *pc = &rt->conf->pools[pool];
    dm_counter_add(&s->failures, 1);
    unsigned fails = atomic_fetch_add_explicit(&s->fails, 1, memory_order_relaxed) + 1;
    dm_log_warn("server %s/%s: %s", pc->name, pc->servers[server].name, why);
    if (pc->passive.max_fails > 0 && fails >= pc->passive.max_fails) {
        atomic_store_explicit(&s->down_until_us, mono_us() + pc->passive.fail_timeout_ms * 1000,
                              memory_order_relaxed);
        atomic_store_explicit(&s->fails, 0, memory_order_relaxed);
        dm_log_warn("server %s/%s is DOWN for %llu ms (%u consecutive failures)", pc->name,
                    pc->servers[server].name, (unsigned long long)pc->passive.fail_timeout_ms,
                    fails);
    }
}

static void req_upstream_ready(struct dm_req *req, struct dm_upstream *up, int status);
static void up_timer_cb(uv_timer_t *t);

/*
 * Server connection timeouts are lazy: activity only moves deadline_ms, and a
 * timer that fires before the deadline re-arms for the rest. That keeps timer
 * heap operations off the per-read path. ms == 0 clears the deadline.
 */
static void
up_deadline(struct dm_upstream *up, uint64_t ms)
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

/* The key a hashing policy places the request by (conf: pool hash.key). */
static uint64_t
req_hash_key(struct dm_req *req)
{
    const struct dm_conf_hash *h = &req->c->rt->conf->pools[req->pool].hash;
    const struct dm_http_msg *m = &req->msg;
    if (h->key == DM_HASH_URI) {
        return dm_hash_bytes(req->info.path.p, req->info.path.len);
    }
    if (h->key == DM_HASH_HEADER || h->key == DM_HASH_COOKIE) {
        size_t nlen = strlen(h->name);
        for (unsigned i = 0; i < m->nfields; i++) {
            struct dm_span n = m->fields[i].name;
            struct dm_span v = m->fields[i].value;
            if (h->key == DM_HASH_HEADER) {
                if (n.len == nlen && strncasecmp(n.p, h->name, nlen) == 0) {
                    return dm_hash_bytes(v.p, v.len);
                }
                continue;
            }
            if (!dm_span_ieq(n, "cookie")) {
                continue;
            }
            /* Cookie: a=1; b=2 */
            const char *p = v.p;
            const char *end = v.p + v.len;
            while (p < end) {
                while (p < end && (*p == ' ' || *p == ';')) {
                    p++;
                }
                const char *semi = memchr(p, ';', (size_t)(end - p));
                const char *e = semi != NULL ? semi : end;
                if ((size_t)(e - p) > nlen && memcmp(p, h->name, nlen) == 0 && p[nlen] == '=') {
                    return dm_hash_bytes(p + nlen + 1, (size_t)(e - p - (ptrdiff_t)nlen - 1));
                }
                p = e;
            }
        }
        /* No such header or cookie: fall back to the client address. */
    }
    const struct dm_client *c = req->c;
    if (c->peer.sa.sa_family == AF_INET6) {
        return dm_hash_bytes(&c->peer.in6.sin6_addr, sizeof(c->peer.in6.sin6_addr));
    }
    return dm_hash_bytes(&c->peer.in4.sin_addr, sizeof(c->peer.in4.sin_addr));
}

static void
req_pick_and_connect(struct dm_req *req)
{
    struct dm_client *c = req->c;
    struct dm_rpool *p = &c->rt->pools[req->pool];
    struct dm_pick pick = {
        .key = p->hashing ? req_hash_key(req) : 0,
        .tried = req->tried,
        .now_us = mono_us(),
        .rng = &c->w->rng,
    };
    int idx = DM_NO_SERVER;
    bool affinity = p->cf->affinity_connection;
    if (affinity && c->bound >= 0 && c->bound_pool == req->pool &&
        !dm_pick_tried(&pick, (size_t)c->bound) &&
        dm_server_is_usable(&p->sv->s[c->bound], pick.now_us)) {
        idx = c->bound; /* affinity: connection */
    } else {
        idx = dm_balancer_pick(p->bal, &pick);
        if (idx == DM_NO_SERVER) {
            if (req->attempts == 0) {
                client_respond_error(c, 503, "no server available");
            } else {
                client_respond_error(c, 502, "could not connect to any server");
            }
            return;
        }
        dm_counter_add(&p->sv->s[idx].picks, 1);
    }
    req->server = idx;
    req->attempts++;
    req->tried[idx / 8] |= (uint8_t)(1u << (idx % 8));
    struct dm_server *s = &p->sv->s[idx];
    dm_counter_add(&s->conns, 1);
    dm_counter_add(&s->inflight, 1);
    /* Everything the pick decided is on the server's counters before the
     * next pick can read them, or a burst of new connections would all see
     * the same minimum (the stale-information herd). */
    req_reserve(req);
    req->up_start_us = uv_hrtime() / 1000;
    dm_upstream_take(c->w, c->rt, req->pool, idx, req, req_upstream_ready);
}

/* ---- AGE: expected work and the policy's per-connection state ---- */

/* Subtracts up to n of the request's expected work from its server. */
static void
req_work_done(struct dm_req *req, int64_t n)
{
    if (req->work <= 0 || req->server == DM_NO_SERVER) {
        return;
    }
    int64_t d = n < req->work ? n : req->work;
    req->work -= d;
    struct dm_server *s = server_of(req->c->rt, req->pool, req->server);
    atomic_fetch_sub_explicit(&s->inflight_work, d, memory_order_relaxed);
}

static void
client_age_unlink(struct dm_client *c)
{
    if (c->aprev != NULL) {
        c->aprev->anext = c->anext;
    } else {
        c->w->aging = c->anext;
    }
    if (c->anext != NULL) {
        c->anext->aprev = c->aprev;
    }
    c->aprev = c->anext = NULL;
}

/* FIN correction: the connection's potential leaves the table at once. */
static void
client_age_close(struct dm_client *c)
{
    if (c->age == NULL) {
        return;
    }
    struct dm_bal_event ev = { .server = -1, .now_us = mono_us(), .conn = c->age };
    dm_balancer_on_close(c->rt->pools[c->age_pool].bal, &ev);
    client_age_unlink(c);
    free(c->age);
    c->age = NULL;
}

void
dm_clients_age(struct dm_worker *w)
{
    uint64_t now = mono_us();
    for (struct dm_client *c = w->aging; c != NULL; c = c->anext) {
        struct dm_bal_event ev = { .server = -1, .now_us = now, .conn = c->age };
        dm_balancer_on_tick(c->rt->pools[c->age_pool].bal, &ev);
    }
}

/*
 * The request has just been given its server: count its expected work there
 * and tell the policy (for age, the first request of a connection brings the
 * potential load of its page's embedded objects, from the catalog). When the
 * server cannot be reached, req_upstream_ready gives the work back and the
 * next pick reserves again (the policy's state is rebound by the retry).
 */
static void
req_reserve(struct dm_req *req)
{
    struct dm_client *c = req->c;
    struct dm_rpool *p = &c->rt->pools[req->pool];
    struct dm_bal_event ev = { .server = req->server, .now_us = mono_us() };
    if (!p->age) {
        dm_balancer_on_request(p->bal, &ev);
        return;
    }
    const struct dm_conf *cf = c->rt->conf;
    uint64_t cost = cf->pools[req->pool].age.request_cost;
    uint64_t dflt = cf->catalog.default_object_bytes;
    struct dm_catalog *cat = c->rt->catalog;
    int64_t work = (int64_t)((cat != NULL ? dm_catalog_size(cat, req->key, dflt) : dflt) + cost);
    req->work = req->added = work;
    atomic_fetch_add_explicit(&p->sv->s[req->server].inflight_work, work, memory_order_relaxed);
    ev.conn = c->age;
    ev.object = req->key;
    ev.bytes = (uint64_t)work;
    if (!c->served && cat != NULL && (c->age == NULL || c->age_pool == req->pool)) {
        /* First request of the connection: its page's potential load (again
         * on a retry elsewhere, which moves it: the policy starts over). */
        struct dm_bal_object objs[DM_CATALOG_PAGE_MAX];
        bool any_host = false;
        size_t n = dm_catalog_lookup_url(cat, req->info.host.p, req->info.host.len,
                                         req->info.path.p, req->info.path.len, objs,
                                         DM_CATALOG_PAGE_MAX, cost, dflt, NULL, &any_host);
        c->any_host = any_host;
        client_age_close(c); /* a retry: what the failed pick held goes */
        ev.conn = NULL;
        size_t size = dm_balancer_conn_state_size(p->bal, n);
        c->age = size > 0 ? calloc(1, size) : NULL;
        if (c->age != NULL) {
            c->age_pool = (uint16_t)req->pool;
            c->anext = c->w->aging;
            if (c->w->aging != NULL) {
                c->w->aging->aprev = c;
            }
            c->w->aging = c;
            ev.conn = c->age;
            ev.first = true;
            ev.objects = objs;
            ev.nobjects = n;
        }
        dm_balancer_on_request(p->bal, &ev);
        return;
    }
    if (c->age != NULL && c->age_pool != req->pool) {
        ev.conn = NULL; /* another pool's request: not this state's business */
    }
    dm_balancer_on_request(p->bal, &ev);
}

/* Learning a page's embedded objects as its HTML passes (age pools). */
struct dm_learn {
    struct dm_html_scan scan;
    char host[256];
    size_t host_len;
    unsigned n;
    uint64_t keys[DM_CATALOG_PAGE_MAX];
};

static void
learn_object(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
             enum dm_html_kind kind)
{
    (void)kind;
    struct dm_learn *l = arg;
    if (l->n == DM_CATALOG_PAGE_MAX) {
        return;
    }
    if (host_len == 0) {
        host = l->host;
        host_len = l->host_len;
    }
    uint64_t key = dm_catalog_key(host, host_len, path, path_len);
    for (unsigned i = 0; i < l->n; i++) {
        if (l->keys[i] == key) {
            return; /* a repeated image must not crowd out later objects */
        }
    }
    l->keys[l->n++] = key;
}

static void
learn_start(struct dm_req *req)
{
    const struct dm_conf *cf = req->c->rt->conf;
    if (!cf->catalog.learn || req->c->rt->catalog == NULL || req->status != 200 ||
        !dm_span_ieq(req->msg.method, "get")) {
        return;
    }
    bool html = false;
    for (unsigned i = 0; i < req->rmsg.nfields; i++) {
        struct dm_span n = req->rmsg.fields[i].name;
        struct dm_span v = req->rmsg.fields[i].value;
        if (dm_span_ieq(n, "content-type")) {
            html = v.len >= 9 && strncasecmp(v.p, "text/html", 9) == 0;
        } else if (dm_span_ieq(n, "content-encoding") && !dm_span_ieq(v, "identity")) {
            return; /* compressed: nothing to scan */
        }
    }
    char path[1024];
    if (!html || req->info.host.len >= sizeof(((struct dm_learn *)0)->host) ||
        req->info.path.len >= sizeof(path)) {
        return;
    }
    struct dm_learn *l = malloc(sizeof(*l));
    if (l == NULL) {
        return;
    }
    memcpy(l->host, req->info.host.p, req->info.host.len);
    l->host[req->info.host.len] = 0;
    l->host_len = req->info.host.len;
    memcpy(path, req->info.path.p, req->info.path.len);
    path[req->info.path.len] = 0;
    l->n = 0;
    dm_html_scan_init(&l->scan, l->host, path, cf->catalog.scan_limit);
    req->learn = l;
}

/* At the end of a response: what the catalog learns from it. */
static void
learn_finish(struct dm_req *req, uint64_t body_bytes)
{
    struct dm_catalog *cat = req->c->rt->catalog;
    if (cat == NULL || !req->c->rt->conf->catalog.learn) {
        return;
    }
    if (req->status == 200 && dm_span_ieq(req->msg.method, "get")) {
        dm_catalog_learn_size(cat, req->key, body_bytes);
    }
    if (req->learn != NULL) {
        dm_html_scan_finish(&req->learn->scan);
        dm_catalog_learn_page(cat, req->key, req->learn->keys, req->learn->n);
    }
}

/* Undoes the counters of the current pick (before another pick or at the end). */
static void
req_unpick(struct dm_req *req)
{
    if (req->server == DM_NO_SERVER) {
        return;
    }
    struct dm_rpool *p = &req->c->rt->pools[req->pool];
    struct dm_server *s = &p->sv->s[req->server];
    dm_counter_sub(&s->conns, 1);
    dm_counter_sub(&s->inflight, 1);
}

static void
req_send_head(struct dm_req *req, struct dm_upstream *up)
{
    struct dm_client *c = req->c;
    if (req->out_head == NULL) {
        char addr[INET6_ADDRSTRLEN];
        peer_text(c, addr, sizeof(addr));
        struct dm_http_forward fw = {
            .client_addr = addr,
            .proto = "http",
            .via = "1.1 dimmer",
            .default_host = server_conf(c->rt, req->pool, req->server)->addr.text,
        };
        /* Sized to the head (plus what we add), so a request holds little memory. */
        uint32_t cap = req->head_len + 512;
        struct dm_buf *b = dm_buf_get(c->w, cap);
        if (b == NULL) {
            client_respond_error(c, 502, "out of memory");
            return;
        }
        size_t n = dm_http_write_request(b->data, b->cap, &req->msg, &req->info, &fw);
        if (n == 0) {
            dm_buf_unref(c->w, b);
            client_respond_error(c, 431, "request head too large once rewritten");
            return;
        }
        b->len = (uint32_t)n;
        req->out_head = b;
    }
    /* Written with the first body bytes, in one system call (client_forward_slice). */
    (void)up;
    req->head_pending = true;
}

/*
 * A 1xx went to the client: Expect: 100-continue is answered, the client
 * uploads from now on, and its body window starts afresh.
 */
static void
req_continued(struct dm_req *req)
{
    struct dm_client *c = req->c;
    if (req->continued || c->state != DM_C_BODY) {
        return;
    }
    req->continued = true;
    if (req->up != NULL) {
        up_deadline(req->up, 0);
    }
    client_body_window(c);
}

/*
 * The request is all sent: from now on a server that stays silent for
 * timeouts.server_response is timed out (not while a slow client uploads).
 */
static void
req_await_response(struct dm_req *req)
{
    uint64_t t = req->c->rt->conf->timeouts.server_response_ms;
    if (req->up != NULL && t > 0 && req->up->deadline_ms == UINT64_MAX) {
        up_deadline(req->up, t);
    }
}

static void
req_upstream_ready(struct dm_req *req, struct dm_upstream *up, int status)
{
    struct dm_client *c = req->c;
    if (status < 0) {
        req->up = NULL;
        req_work_done(req, req->work);
        req_unpick(req);
        server_failed(c->rt, req->pool, req->server,
                      status == UV_ETIMEDOUT ? "connect timed out" : uv_strerror(status));
        req->server = DM_NO_SERVER;
        /* Nothing was sent yet: another server may take it. */
        req_pick_and_connect(req);
        return;
    }
    req->up = up;
    up->req = req;
    if (c->rt->pools[req->pool].cf->affinity_connection && c->bound < 0) {
        c->bound = req->server;
        c->bound_pool = (uint16_t)req->pool;
    }
    dm_http_parser_init(&up->parser, false);
    up->parser.msg = &req->rmsg;
    dm_http_parser_expect_no_body(&up->parser, dm_span_ieq(req->msg.method, "head"));
    up->state = DM_U_HEAD;
    up->got_bytes = false;
    req_send_head(req, up);
    if (c->closing || req->up == NULL) {
        return;
    }
    up_start_read(up);
    c->state = DM_C_BODY;
    if (req->body_done) {
        c->state = DM_C_WAIT; /* a retry: the request went out whole before */
        req_await_response(req);
    } else if (req->info.chunked || req->info.content_length > 0) {
        client_body_window(c); /* the body is read from now on */
        if (req->info.expect_continue && req->body_raw == 0) {
            /* The client may wait for the server's 100 Continue: the server's
             * silence is what is bounded until then. */
            up_deadline(up, c->rt->conf->timeouts.server_response_ms);
        }
    }
    client_read_start(c);
    client_process(c);
    if (!c->closing && c->req == req && req->head_pending) {
        client_forward_slice(c, 0, 0); /* no body bytes yet: the head alone */
    }
}

/* A reused connection died before answering: send the request again on a new one. */
static bool
req_retry(struct dm_req *req, struct dm_upstream *up)
{
    if (!up->reused || up->got_bytes || req->body_sent || req->attempts > 3) {
        return false;
    }
    req->up = NULL;
    up->req = NULL;
    dm_upstream_close(up);
    req->c->state = DM_C_CONNECT;
    req->attempts++;
    req->up_start_us = uv_hrtime() / 1000;
    dm_upstream_take(req->c->w, req->c->rt, req->pool, req->server, req, req_upstream_ready);
    return true;
}

/*
 * The response is complete: count it and give its server's counters back.
 * Called before its last bytes go to the client, so that a client that has
 * read a whole response and then asks /stats sees it counted (the promise in
 * balancers/servers.h); once per request.
 */
static void
req_account(struct dm_req *req)
{
    if (req->counted) {
        return;
    }
    req->counted = true;
    struct dm_client *c = req->c;
    struct dm_rpool *p = &c->rt->pools[req->pool];
    dm_counter_add(&p->sv->s[req->server].requests, 1);
    struct dm_bal_event ev = {
        .server = req->server,
        .now_us = mono_us(),
        .bytes = (uint64_t)req->added,
        .conn = c->age != NULL && c->age_pool == req->pool ? c->age : NULL,
        .object = req->key,
    };
    dm_balancer_on_response(p->bal, &ev);
    req_work_done(req, req->work);
    req_unpick(req);
}

/* After the response: learn, log, release the server connection, go on. */
static void
req_finish(struct dm_req *req)
{
    struct dm_client *c = req->c;
    struct dm_upstream *up = req->up;
    struct dm_rpool *p = &c->rt->pools[req->pool];
    req_account(req);
    uint64_t body = up != NULL ? up->parser.body_bytes : 0;
    if (p->age) {
        learn_finish(req, body);
    }
    log_access(req);
    if (up != NULL) {
        bool reusable = req->rinfo.keep_alive && req->body_done && !c->w->stopping &&
                        !dm_http_parser_needs_eof(&up->parser) && up->in != NULL &&
                        up->in->off == up->in->len;
        if (up->in != NULL && up->in->off != up->in->len) {
            reusable = false;
        }
        req->up = NULL;
        up->req = NULL;
        dm_upstream_release(up, reusable);
    }
    /* A response that came before the whole request body leaves the rest of
     * the body unread on the client connection: it cannot carry another
     * request. */
    bool close = req->close_client || c->eof || c->w->stopping || !req->body_done;
    c->paused = false;
    c->req = NULL;
    c->parser.msg = NULL;
    req_free(c->w, req);
    c->served = true;
    dm_http_parser_next(&c->parser);
    if (close) {
        client_read_stop(c);
        client_close_when_written(c);
        return;
    }
    c->state = DM_C_IDLE;
    client_timer_stop(c);
    client_read_start(c);
    client_process(c);
}

/* ---- server connections ---- */

static void
up_free_cb(uv_handle_t *h)
{
    struct dm_upstream *up = h->data;
    dm_runtime_unref(up->rt);
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
    dm_buf_unref(up->w, up->in);
    up->in = NULL;
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
    if (req != NULL && req->c->paused &&
        uv_stream_get_write_queue_size((uv_stream_t *)&up->tcp) < DM_WRITE_HIGH) {
        req->c->paused = false;
        client_read_start(req->c);
        if (req->c->state == DM_C_BODY && req->c->timer.kind == DM_T_BODY) {
            client_body_window(req->c); /* the pause did not count against it */
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
static void
up_flush(struct dm_upstream *up)
{
    unsigned n = up->ncork;
    if (n == 0) {
        return;
    }
    up->ncork = 0;
    int r = dm_stream_write(up->w, (uv_stream_t *)&up->tcp, up->cork_bufs, n, up->cork_hold, n,
                            up_write_done, up);
    for (unsigned i = 0; i < n; i++) {
        dm_buf_unref(up->w, up->cork_hold[i]);
    }
    if (r == 0) {
        up->writes++;
        struct dm_req *req = up->req;
        if (req != NULL &&
            uv_stream_get_write_queue_size((uv_stream_t *)&up->tcp) >= DM_WRITE_HIGH) {
            req->c->paused = true;
            client_read_stop(req->c);
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

static void
up_write(struct dm_upstream *up, uv_buf_t *bufs, unsigned n, struct dm_buf **hold, unsigned nhold)
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
    if (up->in == NULL) {
        up->in = dm_buf_get(up->w, up->rt->buf_cap);
    }
    if (up->in == NULL) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init(up->in->data + up->in->len, up->in->cap - up->in->len);
}

static void up_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void
up_start_read(struct dm_upstream *up)
{
    if (!up->closing) {
        uv_read_start((uv_stream_t *)&up->tcp, up_alloc_cb, up_read_cb);
    }
}

/* Fails the request on this connection: 502/504 when nothing was answered yet. */
static void
up_fail(struct dm_upstream *up, unsigned status, const char *why)
{
    struct dm_req *req = up->req;
    if (req == NULL) {
        dm_upstream_close(up);
        return;
    }
    struct dm_client *c = req->c;
    if (!up->got_bytes) {
        server_failed(up->rt, up->pool, up->server, why);
    }
    req->up = NULL;
    up->req = NULL;
    dm_upstream_close(up);
    if (req->resp_started) {
        dm_log_warn("response cut short: %s", why);
        client_close(c);
        return;
    }
    client_respond_error(c, status, why);
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
    default:
        up_fail(up, 504, "server response timed out");
        break;
    }
}

/* Forwards [from, to) of the server's read buffer to the client. */
static void
up_forward_slice(struct dm_upstream *up, uint32_t from, uint32_t to)
{
    struct dm_req *req = up->req;
    struct dm_client *c = req->c;
    uv_buf_t b[2];
    struct dm_buf *hold[2];
    unsigned n = 0;
    struct dm_buf *head = req->resp_head;
    if (head != NULL) {
        /* The response head goes out with the first body bytes: one write. */
        req->resp_head = NULL;
        b[n] = uv_buf_init(head->data, head->len);
        hold[n++] = head;
    }
    if (to > from) {
        b[n] = uv_buf_init(up->in->data + from, to - from);
        hold[n++] = up->in;
        req->resp_bytes += to - from;
        req_work_done(req, (int64_t)(to - from));
    }
    if (n == 0) {
        return;
    }
    client_write(c, b, n, hold, n);
    dm_buf_unref(c->w, head);
    if (!c->closing && uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) >= DM_WRITE_HIGH) {
        up->paused = true;
        uv_read_stop((uv_stream_t *)&up->tcp);
    }
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
        dm_html_scan_feed(&req->learn->scan, p, len, learn_object, req->learn);
    }
    if (!req->dechunk) {
        return;
    }
    up_forward_slice(up, 0, 0); /* the pending head first */
    if (req->c->closing) {
        return;
    }
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)len);
    req->resp_bytes += len;
    req_work_done(req, (int64_t)len);
    client_write(req->c, &b, 1, &up->in, 1);
}

static void
up_head_done(struct dm_upstream *up)
{
    struct dm_req *req = up->req;
    struct dm_client *c = req->c;
    uint32_t head_len = up->in->off - up->head_start;
    const char *reason = NULL;
    unsigned version = dm_http_parser_version(&up->parser);
    if (dm_http_check_response(up->in->data + up->head_start, head_len, &req->rmsg, version,
                               &req->rinfo, &reason) != 0) {
        up_fail(up, 502, reason);
        return;
    }
    unsigned status = dm_http_parser_status(&up->parser);
    atomic_store_explicit(&server_of(up->rt, up->pool, up->server)->fails, 0, memory_order_relaxed);
    bool informational = status >= 100 && status < 200 && status != 101;
    bool close = false;
    if (!informational) {
        req->status = status;
        bool needs_eof = !req->rinfo.chunked && !req->rinfo.has_length && status != 204 &&
                         status != 304 && !dm_span_ieq(req->msg.method, "head");
        req->dechunk = req->rinfo.chunked && req->info.version == 10;
        close = req->close_client || needs_eof || req->dechunk || c->eof || c->w->stopping ||
                (req->info.upgrade && status != 101);
        req->close_client = close;
    }
    struct dm_buf *b = dm_buf_get(c->w, head_len + 256);
    if (b == NULL) {
        up_fail(up, 502, "out of memory");
        return;
    }
    size_t n = dm_http_write_response(b->data, b->cap, up->in->data + up->head_start, head_len,
                                      &req->rmsg, &req->rinfo, req->info.version, close);
    if (n == 0) {
        dm_buf_unref(c->w, b);
        up_fail(up, 502, "response head too large");
        return;
    }
    if (!informational && c->rt->pools[req->pool].age) {
        if (req->rinfo.has_length && req->work > 0) {
            /* The real size replaces the estimate in the server's in-flight work. */
            int64_t cost = (int64_t)c->rt->conf->pools[req->pool].age.request_cost;
            int64_t real = (int64_t)req->rinfo.content_length + cost;
            struct dm_server *s = server_of(c->rt, req->pool, req->server);
            atomic_fetch_add_explicit(&s->inflight_work, real - req->work, memory_order_relaxed);
            req->work = real;
        }
        learn_start(req);
    }
    if (req->dechunk || req->learn != NULL) {
        up->parser.on_body = up_body_cb;
        up->parser.body_arg = up;
    }
    if (req->dechunk && n < b->cap) {
        /* Drop "Transfer-Encoding: chunked": the body goes out raw until close. */
        b->data[n] = 0;
        char *te = strcasestr(b->data, "\r\ntransfer-encoding:");
        if (te != NULL) {
            char *eol = strstr(te + 2, "\r\n");
            if (eol != NULL) {
                memmove(te, eol, n - (size_t)(eol - b->data));
                n -= (size_t)(eol - te);
            }
        }
    }
    b->len = (uint32_t)n;
    req->resp_bytes += n;
    req->resp_started = !informational || req->resp_started;
    dm_buf_unref(c->w, req->resp_head);
    req->resp_head = b; /* written by up_forward_slice, with the body's first bytes */
    up->state = DM_U_BODY;
}

static void
up_enter_tunnel(struct dm_upstream *up)
{
    struct dm_req *req = up->req;
    struct dm_client *c = req->c;
    if (!req->body_done) {
        /* Held trailers or body bytes still to come would be read as the new
         * protocol: a server that switches this early is not followed. */
        up_fail(up, 502, "server switched protocols before the request was complete");
        return;
    }
    up->state = DM_U_TUNNEL;
    c->state = DM_C_TUNNEL;
    up_deadline(up, 0);
    client_timer_stop(c);
    tq_remove(c->w, &req->bound); /* timeouts.request ends with the exchange */
    /* Bytes after the 101 head are already the new protocol. */
    uint32_t from = up->in->off;
    up->in->off = up->in->len;
    up_forward_slice(up, from, up->in->len);
    client_read_start(c);
    client_process(c);
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
            up_forward_slice(up, from, in->len);
            up_recycle_in(up);
            return;
        }
        if (in == NULL) {
            return;
        }
        uint32_t from = in->off;
        size_t used = 0;
        int r = dm_http_parse(&up->parser, in->data + in->off, in->len - in->off, &used);
        if (r < 0) {
            up_fail(up, 502, dm_http_parser_error(&up->parser));
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
                up_fail(up, 502, "response head too large");
            }
            return;
        }
        /* Body. */
        if (r == DM_HTTP_MSG_DONE && dm_http_parser_status(&up->parser) >= 200) {
            req_account(req); /* before its last bytes leave */
        }
        up_forward_slice(up, from, req->dechunk ? from : in->off);
        if (up->closing || up->req == NULL) {
            return;
        }
        if (r == DM_HTTP_MSG_DONE) {
            unsigned st = dm_http_parser_status(&up->parser);
            if (st >= 100 && st < 200 && st != 101) {
                req_continued(req);
                up->state = DM_U_HEAD;
                up->head_start = in->off;
                dm_http_parser_next(&up->parser);
                continue;
            }
            if (st == 101) {
                continue; /* the upgrade pause follows */
            }
            up_deadline(up, 0);
            req_finish(req);
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

static void
up_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    struct dm_upstream *up = s->data;
    if (nread == 0) {
        return;
    }
    struct dm_req *req = up->req;
    if (up->state == DM_U_IDLE || req == NULL) {
        /* An idle connection closed or sent something unasked for: drop it. */
        dm_upstream_close(up);
        return;
    }
    if (nread == UV_ENOBUFS) {
        up_fail(up, 502, "no buffer for the response");
        return;
    }
    if (nread < 0) {
        if (up->state == DM_U_TUNNEL) {
            struct dm_client *c = req->c;
            req->up = NULL;
            up->req = NULL;
            dm_upstream_close(up);
            client_close_when_written(c);
            return;
        }
        if (!up->got_bytes) {
            if (req_retry(req, up)) {
                return;
            }
            up_fail(up, 502,
                    nread == UV_EOF ? "server closed the connection without answering"
                                    : uv_strerror((int)nread));
            return;
        }
        if (nread == UV_EOF && up->state == DM_U_BODY &&
            dm_http_parse_eof(&up->parser) == DM_HTTP_MSG_DONE) {
            uv_read_stop(s);
            req->rinfo.keep_alive = false;
            up_deadline(up, 0);
            req_finish(req);
            return;
        }
        up_fail(up, 502,
                nread == UV_EOF ? "server closed the connection mid-response"
                                : uv_strerror((int)nread));
        return;
    }
    if (!up->got_bytes) {
        up->got_bytes = true;
        up->head_start = up->in->off;
    }
    up->in->len += (uint32_t)nread;
    if (up->deadline_ms != UINT64_MAX) {
        /* Only the deadline moves; the timer catches up when it fires. */
        up->deadline_ms = uv_now(&up->w->loop) + up->rt->conf->timeouts.server_response_ms;
    }
    up_process(up);
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
    up_deadline(up, 0);
    if (status < 0) {
        up->req = NULL;
        dm_upstream_close(up);
        if (req != NULL) {
            ready(req, NULL, status);
        }
        return;
    }
    uv_tcp_nodelay(&up->tcp, 1);
    up->state = DM_U_HEAD;
    if (req != NULL) {
        ready(req, up, 0);
    } else {
        dm_upstream_release(up, true);
    }
}

void
dm_upstream_take(struct dm_worker *w, struct dm_runtime *rt, size_t pool, int server,
                 struct dm_req *req, dm_upstream_ready_cb ready)
{
    struct dm_rpool *p = &rt->pools[pool];
    struct dm_upstream **head = &p->idle[(size_t)w->id * p->sv->n + (size_t)server];
    if (*head != NULL) {
        struct dm_upstream *up = *head;
        idle_remove(up);
        up_deadline(up, 0);
        up->reused = true;
        up->req = req;
        up->ready = ready;
        req->up = up;
        ready(req, up, 0);
        return;
    }
    struct dm_upstream *up = calloc(1, sizeof(*up));
    if (up == NULL) {
        ready(req, NULL, UV_ENOMEM);
        return;
    }
    up->w = w;
    up->rt = rt;
    dm_runtime_ref(rt);
    up->pool = pool;
    up->server = server;
    up->req = req;
    req->up = up; /* so that a client closing meanwhile cancels the connect */
    up->ready = ready;
    up->state = DM_U_CONNECTING;
    uv_tcp_init(&w->loop, &up->tcp);
    uv_timer_init(&w->loop, &up->timer);
    up->tcp.data = up;
    up->timer.data = up;
    up->creq.data = up;
    const struct dm_conf_server *sc = &rt->conf->pools[pool].servers[server];
    int r =
        uv_tcp_connect(&up->creq, &up->tcp, (const struct sockaddr *)&sc->addr.sa, up_connect_cb);
    if (r < 0) {
        up->req = NULL;
        req->up = NULL;
        dm_upstream_close(up);
        ready(req, NULL, r);
        return;
    }
    up_deadline(up, rt->conf->timeouts.connect_ms);
}

void
dm_upstream_release(struct dm_upstream *up, bool reusable)
{
    up_flush(up);
    up->req = NULL;
    up->parser.on_body = NULL;
    if (!reusable || up->closing || up->w->stopping || up->rt != up->w->rt) {
        dm_upstream_close(up);
        return;
    }
    if (up->in != NULL && up->in->refs == 1) {
        dm_buf_unref(up->w, up->in);
        up->in = NULL;
    } else if (up->in != NULL) {
        dm_buf_unref(up->w, up->in);
        up->in = NULL;
    }
    up->state = DM_U_IDLE;
    up->paused = false;
    struct dm_upstream **head = idle_head(up);
    up->prev = NULL;
    up->next = *head;
    if (*head != NULL) {
        (*head)->prev = up;
    }
    *head = up;
    /* Keep reading: a server closing an idle connection is noticed at once. */
    up_start_read(up);
    up_deadline(up, up->rt->conf->timeouts.client_keepalive_ms);
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
