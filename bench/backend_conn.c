/*
 * The connections of dimmer-backend: reading, HTTP/1.1 parsed by llhttp, the response
 * generators and writing, lingering close. The endpoints (backend_routes.c,
 * backend_ws.c) are called through be->handlers.
 *
 * Connection model. Each connection owns one input buffer (DM_IN_CAP bytes) and handles one
 * request at a time, which is what keeps pipelined responses in order:
 *
 *   - llhttp runs over the unparsed bytes of the buffer. on_headers_complete and
 *     on_message_complete return HPE_PAUSED, so routing and the end of a request are
 *     handled outside the parser's callbacks, and the pause position gives the exact end
 *     of the request head (kept contiguous in the buffer for /headers).
 *   - A response is produced by a generator: a body from memory (site pages, or the
 *     repeating pattern for /bytes and objects), the request body echoed back, a digest of
 *     it, or a timer. Memory bodies are written straight from their storage, 64 KiB per
 *     uv_write, and only while the write queue holds less than WQ_HIGH bytes; each write
 *     callback produces more, so a 1 GiB download uses bounded memory.
 *   - When a request ends before its response is fully produced, the parser stays paused
 *     (wait_resp); pipelined bytes wait in the buffer, and reading stops when it is full,
 *     until the response is done. Reading also stops while the write queue is above
 *     WQ_HIGH, so an echo of an upload the client does not read pushes back on the client.
 *   - A connection that must close (Connection: close, /close/N, 400, WebSocket close)
 *     shuts down its write side after the queued writes, then reads and discards for up to
 *     LINGER_MS so the peer sees the response rather than a reset.
 *   - With a capacity or a service time (backend_queue.c), a request is parked when its
 *     head is complete: the parser stays paused there, the head stays in the buffer, and
 *     the connection neither parses nor reads until the queue routes it
 *     (dm_backend_conn_serve).
 *
 * The connection embeds its handles (tcp, timer) and frees itself from the last close
 * callback. Write requests come from a small free list, so a request served from memory
 * costs no malloc.
 */
#include "bench/backend_conn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "bench/backend_site.h"

#define HEAD_CAP     (DM_OUT_INLINE - 32) /* response head; the rest is chunk framing */
#define OUT_FREE_MAX 256                  /* write requests kept for reuse */
#define WQ_HIGH      (256 * 1024)         /* stop producing and reading above this write queue */
#define WRITE_SPAN   DM_PATTERN_SPAN      /* body bytes per uv_write */
/* Write requests in flight per connection, so one fast reader cannot starve the others
 * while the kernel takes everything it is given. */
#define MAX_INFLIGHT 16
#define LINGER_MS    2000

/* ---- write requests ---- */

struct dm_backend_out *
dm_backend_out_take(struct dm_backend_conn *c)
{
    struct dm_backend *be = c->be;
    struct dm_backend_out *o = be->free_outs;
    if (o) {
        be->free_outs = o->next;
        be->nfree--;
    } else {
        o = malloc(sizeof *o);
        if (!o) {
            return NULL;
        }
    }
    o->next = NULL;
    o->conn = c;
    o->heap = NULL;
    o->inl_len = 0;
    return o;
}

void
dm_backend_out_release(struct dm_backend *be, struct dm_backend_out *o)
{
    if (!o) {
        return;
    }
    free(o->heap);
    o->heap = NULL;
    if (be->nfree < OUT_FREE_MAX) {
        o->next = be->free_outs;
        be->free_outs = o;
        be->nfree++;
    } else {
        free(o);
    }
}

static void
on_write(uv_write_t *req, int status)
{
    struct dm_backend_out *o =
        (struct dm_backend_out *)((char *)req - offsetof(struct dm_backend_out, req));
    struct dm_backend_conn *c = o->conn;
    dm_backend_out_release(c->be, o);
    c->inflight--;
    if (c->closing) {
        return;
    }
    if (status < 0) {
        dm_backend_conn_close(c);
        return;
    }
    dm_backend_drive(c);
}

int
dm_backend_out_send(struct dm_backend_conn *c, struct dm_backend_out *o, const uv_buf_t *bufs,
                    unsigned n)
{
    if (c->closing) {
        dm_backend_out_release(c->be, o);
        return -ECANCELED;
    }
    int err = uv_write(&o->req, (uv_stream_t *)&c->tcp, bufs, n, on_write);
    if (err < 0) {
        dm_backend_out_release(c->be, o);
        dm_backend_conn_close(c);
        return err;
    }
    c->inflight++;
    return 0;
}

int
dm_backend_out_send_copy(struct dm_backend_conn *c, struct dm_backend_out *o, const void *data,
                         size_t len)
{
    uv_buf_t b[2];
    unsigned nb = 0;
    /* With len 0, data may be NULL: memcpy must not see it. */
    if (len > 0 && o->inl_len + len <= DM_OUT_INLINE) {
        memcpy(o->inl + o->inl_len, data, len);
        o->inl_len += len;
    } else if (len > 0) {
        o->heap = malloc(len);
        if (!o->heap) {
            dm_backend_out_release(c->be, o);
            dm_backend_conn_close(c);
            return -ENOMEM;
        }
        memcpy(o->heap, data, len);
    }
    if (o->inl_len > 0) {
        b[nb++] = uv_buf_init(o->inl, (unsigned)o->inl_len);
    }
    if (o->heap) {
        b[nb++] = uv_buf_init(o->heap, (unsigned)len);
    }
    if (nb == 0) {
        dm_backend_out_release(c->be, o);
        return 0;
    }
    return dm_backend_out_send(c, o, b, nb);
}

int
dm_backend_send_copy(struct dm_backend_conn *c, const void *data, size_t len)
{
    struct dm_backend_out *o = dm_backend_out_take(c);
    if (!o) {
        dm_backend_conn_close(c);
        return -ENOMEM;
    }
    return dm_backend_out_send_copy(c, o, data, len);
}

/* ---- responses and their generators ---- */

static const struct {
    int status;
    const char *text;
} reasons[] = {
    { 100, "Continue" },
    { 101, "Switching Protocols" },
    { 102, "Processing" },
    { 103, "Early Hints" },
    { 200, "OK" },
    { 201, "Created" },
    { 202, "Accepted" },
    { 204, "No Content" },
    { 206, "Partial Content" },
    { 301, "Moved Permanently" },
    { 302, "Found" },
    { 303, "See Other" },
    { 304, "Not Modified" },
    { 307, "Temporary Redirect" },
    { 308, "Permanent Redirect" },
    { 400, "Bad Request" },
    { 401, "Unauthorized" },
    { 403, "Forbidden" },
    { 404, "Not Found" },
    { 405, "Method Not Allowed" },
    { 408, "Request Timeout" },
    { 409, "Conflict" },
    { 413, "Content Too Large" },
    { 426, "Upgrade Required" },
    { 429, "Too Many Requests" },
    { 431, "Request Header Fields Too Large" },
    { 500, "Internal Server Error" },
    { 501, "Not Implemented" },
    { 502, "Bad Gateway" },
    { 503, "Service Unavailable" },
    { 504, "Gateway Timeout" },
};

const char *
dm_backend_reason(int status)
{
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
        if (reasons[i].status == status) {
            return reasons[i].text;
        }
    }
    return "Status";
}

struct dm_backend_out *
dm_backend_head_make(struct dm_backend_conn *c, int status, const char *ctype, int64_t clen,
                     const char *extra)
{
    struct dm_backend_out *o = dm_backend_out_take(c);
    if (!o) {
        dm_backend_conn_close(c);
        return NULL;
    }
    char len_line[64] = "";
    if (clen >= 0) {
        snprintf(len_line, sizeof len_line, "Content-Length: %" PRId64 "\r\n", clen);
    } else if (clen == DM_CLEN_CHUNKED) {
        snprintf(len_line, sizeof len_line, "Transfer-Encoding: chunked\r\n");
    }
    const char *conn_line = "";
    if (c->r.close_after) {
        conn_line = "Connection: close\r\n";
    } else if (c->http10) {
        conn_line = "Connection: keep-alive\r\n";
    }
    int n =
        snprintf(o->inl, HEAD_CAP, "HTTP/1.1 %d %s\r\nX-Backend: %s\r\n%s%s%s%s%s%s\r\n", status,
                 dm_backend_reason(status), c->be->name, ctype ? "Content-Type: " : "",
                 ctype ? ctype : "", ctype ? "\r\n" : "", len_line, extra ? extra : "", conn_line);
    if (n < 0 || n >= HEAD_CAP) {
        /* Only a bug in this file gets here: every input is bounded. */
        abort();
    }
    o->inl_len = (size_t)n;
    return o;
}

void
dm_backend_respond_text(struct dm_backend_conn *c, int status, const char *ctype, const void *body,
                        size_t len, const char *extra)
{
    struct dm_backend_out *o = dm_backend_head_make(c, status, ctype, (int64_t)len, extra);
    if (!o) {
        return;
    }
    dm_backend_out_send_copy(c, o, body, c->r.head_only ? 0 : len);
}

void
dm_backend_respond_msg(struct dm_backend_conn *c, int status, const char *msg, const char *extra)
{
    dm_backend_respond_text(c, status, "text/plain", msg, strlen(msg), extra);
}

/* Produces DM_GEN_MEM output while the write queue is low. */
static void
produce(struct dm_backend_conn *c)
{
    struct dm_backend_resp *r = &c->r;
    while (r->active && r->gen == DM_GEN_MEM && !c->closing) {
        size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
        if (!r->hdr && (queued >= WQ_HIGH || c->inflight >= MAX_INFLIGHT)) {
            return;
        }
        struct dm_backend_out *o = r->hdr ? r->hdr : dm_backend_out_take(c);
        r->hdr = NULL;
        if (!o) {
            dm_backend_conn_close(c);
            return;
        }
        size_t n = r->remaining < WRITE_SPAN ? (size_t)r->remaining : WRITE_SPAN;
        const char *data = r->src + (r->period ? r->off % r->period : r->off);
        size_t pre = o->inl_len;
        if (r->chunked && n > 0) {
            pre += (size_t)sprintf(o->inl + pre, "%zx\r\n", n);
        }
        r->off += n;
        r->remaining -= n;
        bool last = r->remaining == 0;
        size_t post = pre;
        if (r->chunked && n > 0) {
            memcpy(o->inl + post, "\r\n", 2);
            post += 2;
        }
        if (r->chunked && last) {
            memcpy(o->inl + post, "0\r\n\r\n", 5);
            post += 5;
        }
        uv_buf_t b[3];
        unsigned nb = 0;
        if (pre > 0) {
            b[nb++] = uv_buf_init(o->inl, (unsigned)pre);
        }
        if (n > 0) {
            b[nb++] = uv_buf_init((char *)data, (unsigned)n);
        }
        if (post > pre) {
            b[nb++] = uv_buf_init(o->inl + pre, (unsigned)(post - pre));
        }
        if (last) {
            r->active = false;
            r->gen = DM_GEN_NONE;
        }
        if (nb == 0) {
            dm_backend_out_release(c->be, o);
        } else if (dm_backend_out_send(c, o, b, nb) < 0) {
            return;
        }
    }
}

void
dm_backend_respond_mem(struct dm_backend_conn *c, int status, const char *ctype, const char *src,
                       size_t period, uint64_t len, int64_t framing, const char *extra)
{
    struct dm_backend_resp *r = &c->r;
    r->chunked = framing == DM_CLEN_CHUNKED;
    r->hdr = dm_backend_head_make(c, status, ctype, framing == 0 ? (int64_t)len : framing, extra);
    if (!r->hdr) {
        return;
    }
    r->gen = DM_GEN_MEM;
    r->active = true;
    r->src = src;
    r->period = period;
    r->off = 0;
    r->remaining = r->head_only ? 0 : len;
    if (r->head_only) {
        /* No body, and for chunked no terminator either. */
        struct dm_backend_out *o = r->hdr;
        r->hdr = NULL;
        r->active = false;
        r->gen = DM_GEN_NONE;
        dm_backend_out_send_copy(c, o, NULL, 0);
        return;
    }
    produce(c);
}

/* DM_GEN_ECHO: sends body bytes back as they arrive, framed as the head said. */
static void
echo_body(struct dm_backend_conn *c, const char *at, size_t len)
{
    struct dm_backend_out *o = dm_backend_out_take(c);
    if (!o) {
        dm_backend_conn_close(c);
        return;
    }
    if (c->r.chunked) {
        o->inl_len = (size_t)sprintf(o->inl, "%zx\r\n", len);
    }
    if (o->inl_len + len + 2 <= DM_OUT_INLINE) {
        memcpy(o->inl + o->inl_len, at, len);
        o->inl_len += len;
        if (c->r.chunked) {
            memcpy(o->inl + o->inl_len, "\r\n", 2);
            o->inl_len += 2;
        }
        uv_buf_t b = uv_buf_init(o->inl, (unsigned)o->inl_len);
        dm_backend_out_send(c, o, &b, 1);
        return;
    }
    o->heap = malloc(len);
    if (!o->heap) {
        dm_backend_out_release(c->be, o);
        dm_backend_conn_close(c);
        return;
    }
    memcpy(o->heap, at, len);
    uv_buf_t b[3];
    unsigned nb = 0;
    if (o->inl_len) {
        b[nb++] = uv_buf_init(o->inl, (unsigned)o->inl_len);
    }
    b[nb++] = uv_buf_init(o->heap, (unsigned)len);
    if (c->r.chunked) {
        memcpy(o->inl + o->inl_len, "\r\n", 2);
        b[nb++] = uv_buf_init(o->inl + o->inl_len, 2);
    }
    dm_backend_out_send(c, o, b, nb);
}

/* DM_GEN_SHA: the request body has ended; answers with its length and digest. */
static void
sha_finish(struct dm_backend_conn *c)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    c->r.active = false;
    c->r.gen = DM_GEN_NONE;
    if (!EVP_DigestFinal_ex(c->md, md, &mdlen)) {
        dm_backend_respond_msg(c, 500, "digest failed\n", NULL);
        return;
    }
    char body[160];
    int n = snprintf(body, sizeof body, "{\"bytes\":%" PRIu64 ",\"sha256\":\"", c->r.body_bytes);
    for (unsigned i = 0; i < mdlen; i++) {
        n += snprintf(body + n, sizeof body - (size_t)n, "%02x", md[i]);
    }
    n += snprintf(body + n, sizeof body - (size_t)n, "\"}\n");
    dm_backend_respond_text(c, 200, "application/json", body, (size_t)n, NULL);
}

/* ---- connection lifetime ---- */

static void
on_handle_close(uv_handle_t *h)
{
    struct dm_backend_conn *c = h->data;
    if (--c->open_handles > 0) {
        return;
    }
    if (c->counted) {
        c->be->open--;
    }
    EVP_MD_CTX_free(c->md);
    free(c);
}

void
dm_backend_conn_close(struct dm_backend_conn *c)
{
    if (c->closing) {
        return;
    }
    c->closing = true;
    dm_backend_queue_forget(c);
    dm_backend_out_release(c->be, c->r.hdr);
    c->r.hdr = NULL;
    if (c->prev) {
        c->prev->next = c->next;
    } else if (c->control) {
        c->be->ctl_conns = c->next;
    } else {
        c->be->conns = c->next;
    }
    if (c->next) {
        c->next->prev = c->prev;
    }
    c->prev = c->next = NULL;
    uv_close((uv_handle_t *)&c->tcp, on_handle_close);
    uv_close((uv_handle_t *)&c->timer, on_handle_close);
    uv_close((uv_handle_t *)&c->idle, on_handle_close);
}

/* The close of t sends a reset and drops unsent data. uv_tcp_close_reset() would refuse a
 * connection whose write side is being shut down; the socket option does not. */
static void
set_reset(uv_tcp_t *t)
{
    uv_os_fd_t fd;
    struct linger l = { .l_onoff = 1, .l_linger = 0 };
    if (uv_fileno((const uv_handle_t *)t, &fd) == 0) {
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
}

void
dm_backend_conn_reset(struct dm_backend_conn *c)
{
    if (!c->closing) {
        set_reset(&c->tcp);
    }
    dm_backend_conn_close(c);
}

static void
on_linger_timeout(uv_timer_t *t)
{
    dm_backend_conn_close(t->data);
}

static void update_reading(struct dm_backend_conn *c);
static void idle_update(struct dm_backend_conn *c);

static void
on_shutdown(uv_shutdown_t *req, int status)
{
    struct dm_backend_conn *c = req->data;
    if (c->closing) {
        return;
    }
    if (status < 0 || c->eof) {
        dm_backend_conn_close(c);
        return;
    }
    c->mode = DM_MODE_LINGER;
    uv_timer_start(&c->timer, on_linger_timeout, LINGER_MS, 0);
    update_reading(c);
}

void
dm_backend_begin_shutdown(struct dm_backend_conn *c)
{
    if (c->shutting || c->closing) {
        return;
    }
    c->shutting = true;
    uv_timer_stop(&c->timer);
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
        dm_backend_conn_close(c);
    }
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct dm_backend_conn *c = h->data;
    (void)suggested;
    if (c->mode == DM_MODE_LINGER) {
        *buf = uv_buf_init(c->in, DM_IN_CAP);
    } else {
        *buf = uv_buf_init(c->in + c->in_len, (unsigned)(DM_IN_CAP - c->in_len));
    }
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct dm_backend_conn *c = s->data;
    (void)buf;
    if (c->closing) {
        return;
    }
    if (nread == 0) {
        return;
    }
    if (c->mode == DM_MODE_LINGER) {
        if (nread < 0) {
            dm_backend_conn_close(c);
        }
        return;
    }
    if (nread == UV_EOF) {
        c->eof = true;
    } else if (nread < 0) {
        dm_backend_conn_close(c);
        return;
    } else {
        c->in_len += (size_t)nread;
    }
    dm_backend_drive(c);
}

static void
update_reading(struct dm_backend_conn *c)
{
    if (c->closing) {
        return;
    }
    bool want;
    if (c->mode == DM_MODE_LINGER) {
        want = true;
    } else {
        /* Reading goes on while a response is pending (wait_resp), into the buffer only,
         * so a reset is seen early; the bytes are parsed when the response is done. */
        want = !c->eof && !c->shutting && c->slot == DM_SLOT_NONE && c->in_len < DM_IN_CAP &&
               uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) < WQ_HIGH;
    }
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
            dm_backend_conn_close(c);
            return;
        }
        c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

/* ---- request heads ---- */

bool
dm_backend_span_eq(struct dm_backend_span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && memcmp(s.p, lit, n) == 0;
}

bool
dm_backend_span_prefix(struct dm_backend_span s, const char *lit, struct dm_backend_span *rest)
{
    size_t n = strlen(lit);
    if (s.len < n || memcmp(s.p, lit, n) != 0) {
        return false;
    }
    rest->p = s.p + n;
    rest->len = s.len - n;
    return true;
}

bool
dm_backend_span_caseeq(struct dm_backend_span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && strncasecmp(s.p, lit, n) == 0;
}

bool
dm_backend_parse_u64(struct dm_backend_span s, uint64_t max, uint64_t *out)
{
    if (s.len == 0 || s.len > 20) {
        return false;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < s.len; i++) {
        if (s.p[i] < '0' || s.p[i] > '9') {
            return false;
        }
        unsigned d = (unsigned)(s.p[i] - '0');
        if (v > (max - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* The request line's target, as it was sent. */
static struct dm_backend_span
head_target(const char *head, size_t len)
{
    struct dm_backend_span t = { "", 0 };
    const char *sp = memchr(head, ' ', len);
    if (!sp) {
        return t;
    }
    const char *start = sp + 1;
    const char *end = memchr(start, ' ', len - (size_t)(start - head));
    if (end) {
        t.p = start;
        t.len = (size_t)(end - start);
    }
    return t;
}

struct dm_backend_span
dm_backend_head_query(const char *head, size_t len)
{
    struct dm_backend_span t = head_target(head, len);
    const char *q = memchr(t.p, '?', t.len);
    if (!q) {
        return (struct dm_backend_span){ "", 0 };
    }
    return (struct dm_backend_span){ q + 1, (size_t)(t.p + t.len - q - 1) };
}

struct dm_backend_span
dm_backend_head_path(const char *head, size_t len)
{
    struct dm_backend_span t = head_target(head, len);
    struct dm_backend_span rest;
    if (dm_backend_span_prefix(t, "http://", &rest) ||
        dm_backend_span_prefix(t, "https://", &rest)) {
        const char *slash = memchr(rest.p, '/', rest.len);
        t.p = slash ? slash : "/";
        t.len = slash ? (size_t)(rest.p + rest.len - slash) : 1;
    }
    const char *q = memchr(t.p, '?', t.len);
    if (q) {
        t.len = (size_t)(q - t.p);
    }
    return t;
}

bool
dm_backend_head_header(const char *head, size_t len, const char *name, struct dm_backend_span *val)
{
    size_t nlen = strlen(name);
    const char *end = head + len;
    const char *p = memchr(head, '\n', len);
    while (p && p + 1 < end) {
        const char *line = p + 1;
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol) {
            eol = end;
        }
        if ((size_t)(eol - line) > nlen && line[nlen] == ':' &&
            strncasecmp(line, name, nlen) == 0) {
            const char *v = line + nlen + 1;
            const char *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t')) {
                v++;
            }
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) {
                ve--;
            }
            val->p = v;
            val->len = (size_t)(ve - v);
            return true;
        }
        p = eol < end ? eol : NULL;
    }
    return false;
}

/* ---- HTTP parsing ---- */

static int
on_message_begin(llhttp_t *p)
{
    struct dm_backend_conn *c = p->data;
    c->in_head = true;
    c->head_known = false;
    c->req_active = true;
    /* A new request: the waits of idle_update() begin again from here. */
    uv_timer_stop(&c->idle);
    c->idle_kind = 0;
    return 0;
}

/* The method is the first thing of a request, so its first byte starts the head. */
static int
on_method(llhttp_t *p, const char *at, size_t len)
{
    struct dm_backend_conn *c = p->data;
    (void)len;
    if (!c->head_known) {
        c->head_start = (size_t)(at - c->in);
        c->head_known = true;
    }
    return 0;
}

static int
on_headers_complete(llhttp_t *p)
{
    struct dm_backend_conn *c = p->data;
    c->in_head = false;
    c->ev = DM_EV_HEAD;
    return HPE_PAUSED;
}

static int
on_body(llhttp_t *p, const char *at, size_t len)
{
    struct dm_backend_conn *c = p->data;
    if (c->closing) {
        return HPE_USER;
    }
    c->r.body_bytes += len;
    if (c->r.gen == DM_GEN_ECHO) {
        echo_body(c, at, len);
    } else if (c->r.gen == DM_GEN_SHA) {
        if (!EVP_DigestUpdate(c->md, at, len)) {
            return HPE_USER;
        }
    }
    return c->closing ? HPE_USER : 0;
}

static int
on_message_complete(llhttp_t *p)
{
    struct dm_backend_conn *c = p->data;
    c->ev = DM_EV_DONE;
    return HPE_PAUSED;
}

void
dm_backend_settings_init(llhttp_settings_t *settings)
{
    llhttp_settings_init(settings);
    settings->on_message_begin = on_message_begin;
    settings->on_method = on_method;
    settings->on_headers_complete = on_headers_complete;
    settings->on_body = on_body;
    settings->on_message_complete = on_message_complete;
}

/* The current request and its response are both done: on to the next, or close. */
static void
exchange_done(struct dm_backend_conn *c)
{
    c->r.started = false;
    if (c->r.close_after) {
        dm_backend_begin_shutdown(c);
    } else if (c->r.ws_upgrade) {
        c->mode = DM_MODE_WS;
        c->ws = (struct dm_backend_ws){ 0 };
    } else {
        llhttp_resume(&c->parser);
    }
}

static void
request_end(struct dm_backend_conn *c)
{
    c->req_active = false;
    if (c->r.gen == DM_GEN_ECHO) {
        c->r.active = false;
        c->r.gen = DM_GEN_NONE;
        if (c->r.chunked) {
            dm_backend_send_copy(c, "0\r\n\r\n", 5);
        }
    } else if (c->r.gen == DM_GEN_SHA) {
        sha_finish(c);
    }
    if (c->closing) {
        return;
    }
    if (c->r.active) {
        c->wait_resp = true;
    } else {
        exchange_done(c);
    }
}

static void
bad_request(struct dm_backend_conn *c, int status, const char *why)
{
    if (c->r.started) {
        /* Part of a response is out already: no way to say more than a reset. */
        dm_backend_conn_close(c);
        return;
    }
    c->be->requests++;
    c->r = (struct dm_backend_resp){ 0 };
    c->r.close_after = true;
    char body[128];
    int n = snprintf(body, sizeof body, "%s%s\n", status < 500 ? "bad request: " : "", why);
    dm_backend_respond_text(c, status, "text/plain", body, (size_t)n, NULL);
    dm_backend_begin_shutdown(c);
}

/* Routes the request whose head is complete, then lets llhttp go on past the head. */
static void
route_head(struct dm_backend_conn *c)
{
    const struct dm_backend_handlers *h = c->be->handlers;
    (c->control ? h->route_control : h->route)(c);
    llhttp_resume(&c->parser);
    /* After the head, llhttp needs one more call, even with no bytes, to end a request
     * without a body. */
    c->resume_head = true;
}

void
dm_backend_conn_serve(struct dm_backend_conn *c)
{
    route_head(c);
    dm_backend_drive(c);
}

/* A request head is complete: routed now, parked by the queue, or (never, if the power
 * states work) refused because the node is not awake. */
static void
on_head(struct dm_backend_conn *c)
{
    if (c->control) {
        route_head(c);
        return;
    }
    if (!dm_backend_power_is_awake(c->be)) {
        /* A node that is not awake has no serving connection left to parse: going to
         * sleep resets them all and new ones are refused. Counted, should that break. */
        c->be->power.requests_not_awake++;
        dm_backend_conn_reset(c);
        return;
    }
    if (!dm_backend_queue_park(c)) {
        route_head(c);
    }
}

static void
parse_http(struct dm_backend_conn *c)
{
    while (c->mode == DM_MODE_HTTP && !c->closing && !c->shutting && !c->wait_resp &&
           c->slot == DM_SLOT_NONE && (c->parse_off < c->in_len || c->resume_head)) {
        c->resume_head = false;
        c->ev = DM_EV_NONE;
        llhttp_errno_t err =
            llhttp_execute(&c->parser, c->in + c->parse_off, c->in_len - c->parse_off);
        if (c->closing) {
            return;
        }
        if (err == HPE_OK) {
            c->parse_off = c->in_len;
        } else if (err == HPE_PAUSED) {
            c->parse_off = (size_t)(llhttp_get_error_pos(&c->parser) - c->in);
            if (c->ev == DM_EV_HEAD) {
                on_head(c);
            } else if (c->ev == DM_EV_DONE) {
                request_end(c);
            }
        } else if (err == HPE_PAUSED_UPGRADE) {
            /* An Upgrade or CONNECT we did not take: keep speaking HTTP. */
            c->parse_off = (size_t)(llhttp_get_error_pos(&c->parser) - c->in);
            llhttp_resume_after_upgrade(&c->parser);
        } else if (err == HPE_INVALID_METHOD) {
            /* A method it does not implement (RFC 9110, 9.1: 501), which a
             * proxy in front forwards: not the client's mistake. */
            bad_request(c, 501, "method not implemented");
        } else {
            bad_request(c, 400, llhttp_errno_name(err));
        }
    }
}

/* ---- driving a connection ---- */

/* Drops consumed input; keeps the request head being received, and pipelined bytes. */
static void
compact(struct dm_backend_conn *c)
{
    size_t keep = c->parse_off;
    /* A parked request is routed later, from its head in the buffer. */
    if (c->mode == DM_MODE_HTTP && ((c->in_head && c->head_known) || c->slot != DM_SLOT_NONE)) {
        keep = c->head_start;
    }
    if (keep == 0) {
        return;
    }
    if (keep == c->in_len) {
        c->in_len = c->parse_off = c->head_start = 0;
        return;
    }
    if (DM_IN_CAP - c->in_len >= DM_IN_CAP / 4) {
        return; /* room enough: move the bytes only when the space runs low */
    }
    memmove(c->in, c->in + keep, c->in_len - keep);
    c->in_len -= keep;
    c->parse_off -= keep;
    c->head_start = c->head_start >= keep ? c->head_start - keep : 0;
}

static void
check_input_end(struct dm_backend_conn *c)
{
    if (c->closing || c->shutting || c->mode != DM_MODE_HTTP) {
        if (c->mode == DM_MODE_WS && c->eof && !c->shutting && !c->closing) {
            dm_backend_begin_shutdown(c);
        }
        return;
    }
    if (c->slot != DM_SLOT_NONE) {
        return; /* a parked request is answered, EOF or not */
    }
    if (c->in_len == DM_IN_CAP && c->in_head) {
        bad_request(c, 431, "request head larger than the input buffer");
        return;
    }
    if (!c->eof || c->wait_resp || c->parse_off < c->in_len) {
        return;
    }
    /* The peer sent all it will send and every complete request has been answered or
     * is being answered by a generator that needs no more input. */
    if (!c->req_active) {
        dm_backend_begin_shutdown(c);
    } else if (c->r.active) {
        dm_backend_conn_close(c); /* a cut request whose response is under way */
    } else {
        dm_backend_begin_shutdown(c);
    }
}

void
dm_backend_drive(struct dm_backend_conn *c)
{
    if (c->closing) {
        return;
    }
    produce(c);
    if (c->wait_resp && !c->r.active && !c->closing) {
        c->wait_resp = false;
        exchange_done(c);
    }
    if (c->mode == DM_MODE_HTTP) {
        parse_http(c);
    } else if (c->mode == DM_MODE_WS) {
        c->be->handlers->ws_input(c);
    }
    if (c->closing) {
        return;
    }
    compact(c);
    check_input_end(c);
    update_reading(c);
    idle_update(c);
}

/* ---- waiting for a request ---- */

enum { IDLE_NONE, IDLE_KEEPALIVE, IDLE_HEADER, IDLE_BODY };

static void
on_idle_timeout(uv_timer_t *t)
{
    struct dm_backend_conn *c = t->data;
    if (c->closing) {
        return;
    }
    c->be->timed_out++;
    if (c->idle_kind == IDLE_HEADER) {
        /* No response under way (the last one ended before this head began). */
        c->r.started = false;
        bad_request(c, 408, "request head not received within --header-ms");
        return;
    }
    /* Waiting for a request (as nginx's keepalive_timeout: nothing said), or
     * for more of a body whose request is routed: closed. */
    dm_backend_conn_close(c);
}

/*
 * A connection of the HTTP mode with no request under way waits at most
 * --keepalive-ms for one, a request head that has begun must be whole
 * within --header-ms of its first byte, however it trickles in, and each
 * wait for more of a request's body is bounded by --header-ms too (nginx's
 * keepalive_timeout, client_header_timeout and client_body_timeout). A
 * request in its queue, its service time or its response is not waiting for
 * the client: no bound here.
 */
static void
idle_update(struct dm_backend_conn *c)
{
    const struct dm_backend *be = c->be;
    bool free_slot = c->slot == DM_SLOT_NONE;
    bool in_head = c->req_active && c->in_head && free_slot;
    bool in_body = c->req_active && !c->in_head && free_slot && !c->r.ws_upgrade;
    bool waiting = !c->req_active && !c->wait_resp && !c->r.active && free_slot;
    unsigned kind = c->closing || c->shutting || c->mode != DM_MODE_HTTP ? IDLE_NONE
                    : in_head                                            ? IDLE_HEADER
                    : in_body                                            ? IDLE_BODY
                    : waiting                                            ? IDLE_KEEPALIVE
                                                                         : IDLE_NONE;
    uint64_t ms = kind == IDLE_KEEPALIVE ? be->keepalive_ms : kind != IDLE_NONE ? be->header_ms : 0;
    if (kind == IDLE_NONE || ms == 0) {
        if (c->idle_kind != IDLE_NONE) {
            uv_timer_stop(&c->idle);
            c->idle_kind = IDLE_NONE;
        }
        return;
    }
    if (kind == c->idle_kind && kind != IDLE_BODY) {
        return; /* runs from the moment this wait began; a body's from its last bytes */
    }
    c->idle_kind = (unsigned char)kind;
    uv_timer_start(&c->idle, on_idle_timeout, ms, 0);
}

/* ---- accepting ---- */

static void
on_refused_close(uv_handle_t *h)
{
    free(h);
}

/* Accepts one connection and resets it at once, unread: a node that is not awake. */
static void
refuse(struct dm_backend *be, uv_stream_t *server)
{
    uv_tcp_t *t = malloc(sizeof *t);
    if (!t) {
        return; /* the connection stays in the backlog until memory returns */
    }
    uv_tcp_init(be->loop, t);
    if (uv_accept(server, (uv_stream_t *)t) == 0) {
        be->power.refused++;
        set_reset(t);
    }
    uv_close((uv_handle_t *)t, on_refused_close);
}

static void
accept_conn(uv_stream_t *server, bool control)
{
    struct dm_backend *be = server->data;
    struct dm_backend_conn *c = malloc(sizeof *c);
    if (!c) {
        return; /* the connection stays in the backlog until memory returns */
    }
    memset(c, 0, offsetof(struct dm_backend_conn, in));
    c->be = be;
    c->control = control;
    uv_tcp_init(be->loop, &c->tcp);
    uv_timer_init(be->loop, &c->timer);
    uv_timer_init(be->loop, &c->idle);
    c->tcp.data = c;
    c->timer.data = c;
    c->idle.data = c;
    c->open_handles = 3;
    struct dm_backend_conn **list = control ? &be->ctl_conns : &be->conns;
    c->next = *list;
    if (*list) {
        (*list)->prev = c;
    }
    *list = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        dm_backend_conn_close(c);
        return;
    }
    if (!control) {
        be->connections++;
        be->open++;
        c->counted = true;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_REQUEST, &be->settings);
    c->parser.data = c;
    update_reading(c);
    idle_update(c);
}

void
dm_backend_on_connection(uv_stream_t *server, int status)
{
    struct dm_backend *be = server->data;
    if (status < 0 || be->stopping) {
        return;
    }
    if (!dm_backend_power_is_awake(be)) {
        refuse(be, server);
        return;
    }
    accept_conn(server, false);
}

void
dm_backend_on_control_connection(uv_stream_t *server, int status)
{
    struct dm_backend *be = server->data;
    if (status < 0 || be->stopping) {
        return;
    }
    accept_conn(server, true);
}
