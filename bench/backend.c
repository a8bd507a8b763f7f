/*
 * dimmer-backend: the demo backend the proxy's default config, demo and integration tests
 * run behind. One thread, one libuv loop, HTTP/1.1 parsed by llhttp.
 *
 * Connection model. Each connection owns one input buffer (IN_CAP bytes) and handles one
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
 *
 * The connection embeds its handles (tcp, timer) and frees itself from the last close
 * callback. Write requests come from a small free list, so a request served from memory
 * costs no malloc.
 */
#include "bench/backend_site.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <llhttp.h>
#include <openssl/evp.h>
#include <uv.h>

#define IN_CAP       (32 * 1024)       /* input buffer; also the largest request head */
#define OUT_INLINE   512               /* bytes carried inside a write request */
#define HEAD_CAP     (OUT_INLINE - 32) /* response head; the rest is chunk framing */
#define OUT_FREE_MAX 256               /* write requests kept for reuse */
#define WQ_HIGH      (256 * 1024)      /* stop producing and reading above this write queue */
#define WRITE_SPAN   DM_PATTERN_SPAN   /* body bytes per uv_write */
/* Write requests in flight per connection, so one fast reader cannot starve the others
 * while the kernel takes everything it is given. */
#define MAX_INFLIGHT 16
#define LINGER_MS    2000
#define MAX_BYTES    (UINT64_C(1) << 40)
#define MAX_SLOW_MS  (UINT64_C(3600) * 1000)
#define NAME_MAX_LEN 64

#define CLEN_NONE    (-1)
#define CLEN_CHUNKED (-2)

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

struct conn;

struct out {
    uv_write_t req;
    struct out *next; /* free list */
    struct conn *conn;
    char *heap; /* freed when the write completes */
    size_t inl_len;
    char inl[OUT_INLINE];
};

struct backend {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_signal_t sigterm, sigint;
    llhttp_settings_t settings;
    struct dm_site *site;
    char *fill[3]; /* object bodies: picture, script, stylesheet (see make_fills) */
    const char *name;
    uint64_t requests;
    uint64_t connections;
    struct out *free_outs;
    unsigned nfree;
    struct conn *conns;
    bool stopping;
};

enum conn_mode {
    MODE_HTTP,
    MODE_WS,
    MODE_LINGER, /* write side shut down; reading and discarding until EOF or timeout */
};

enum gen {
    GEN_NONE, /* response fully queued */
    GEN_MEM,  /* body from memory: src[off % period] or src[off] */
    GEN_ECHO, /* body is the request body */
    GEN_SHA,  /* answer once the request body is hashed */
    GEN_SLOW, /* answer when the timer fires */
};

enum parse_ev { EV_NONE, EV_HEAD, EV_DONE };

/* The response to the current request; zeroed when a request head is routed. */
struct resp {
    enum gen gen;
    bool active;      /* generator not finished */
    bool started;     /* a final response was begun for the current request */
    bool chunked;     /* body framed with Transfer-Encoding: chunked */
    bool close_after; /* close the connection after this response */
    bool head_only;   /* HEAD: headers with the length a GET would have, no body */
    bool ws_upgrade;  /* 101 sent: switch to WebSocket when the request ends */
    const char *src;
    size_t period; /* 0: src is plain memory */
    uint64_t off, remaining;
    uint64_t body_bytes; /* request body bytes seen */
    struct out *hdr;     /* response head waiting to go with the first body write */
};

struct ws_state {
    bool in_payload;
    bool discard; /* pong: read and drop */
    uint8_t opcode;
    uint8_t mask[4];
    unsigned mask_off;
    uint64_t remaining;
};

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* /slow, then the linger timeout */
    uv_shutdown_t shutdown_req;
    llhttp_t parser;
    struct backend *be;
    struct conn *prev, *next;
    enum conn_mode mode;
    enum parse_ev ev;
    int open_handles;
    unsigned inflight;
    bool reading, eof, closing, shutting;
    bool http10;
    bool in_head, head_known, req_active, wait_resp;
    size_t in_len, parse_off, head_start;
    struct resp r;
    struct ws_state ws;
    EVP_MD_CTX *md;
    char in[IN_CAP]; /* last: not zeroed at accept */
};

struct span {
    const char *p;
    size_t len;
};

static void conn_close(struct conn *c);
static void drive(struct conn *c);

/* ---- write requests ---- */

static struct out *
out_take(struct conn *c)
{
    struct backend *be = c->be;
    struct out *o = be->free_outs;
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

static void
out_release(struct backend *be, struct out *o)
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
    struct out *o = (struct out *)((char *)req - offsetof(struct out, req));
    struct conn *c = o->conn;
    out_release(c->be, o);
    c->inflight--;
    if (c->closing) {
        return;
    }
    if (status < 0) {
        conn_close(c);
        return;
    }
    drive(c);
}

/* Sends `o` with `bufs`, taking `o`. On failure closes the connection. */
static int
out_send(struct conn *c, struct out *o, const uv_buf_t *bufs, unsigned n)
{
    if (c->closing) {
        out_release(c->be, o);
        return -ECANCELED;
    }
    int err = uv_write(&o->req, (uv_stream_t *)&c->tcp, bufs, n, on_write);
    if (err < 0) {
        out_release(c->be, o);
        conn_close(c);
        return err;
    }
    c->inflight++;
    return 0;
}

/* Sends `pre` (already in o->inl, o->inl_len bytes) followed by a copy of `data`. */
static int
out_send_copy(struct conn *c, struct out *o, const void *data, size_t len)
{
    uv_buf_t b[2];
    unsigned nb = 0;
    /* With len 0, data may be NULL: memcpy must not see it. */
    if (len > 0 && o->inl_len + len <= OUT_INLINE) {
        memcpy(o->inl + o->inl_len, data, len);
        o->inl_len += len;
    } else if (len > 0) {
        o->heap = malloc(len);
        if (!o->heap) {
            out_release(c->be, o);
            conn_close(c);
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
        out_release(c->be, o);
        return 0;
    }
    return out_send(c, o, b, nb);
}

static int
send_copy(struct conn *c, const void *data, size_t len)
{
    struct out *o = out_take(c);
    if (!o) {
        conn_close(c);
        return -ENOMEM;
    }
    return out_send_copy(c, o, data, len);
}

/* ---- response heads ---- */

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

static const char *
reason(int status)
{
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
        if (reasons[i].status == status) {
            return reasons[i].text;
        }
    }
    return "Status";
}

/* Formats a response head into o->inl. `clen` is a length, CLEN_NONE or CLEN_CHUNKED;
 * `extra` is more header lines, each ending in CRLF, or NULL. The inputs are bounded
 * (name, content types and extra lines are ours), so the head always fits. */
static struct out *
head_make(struct conn *c, int status, const char *ctype, int64_t clen, const char *extra)
{
    struct out *o = out_take(c);
    if (!o) {
        conn_close(c);
        return NULL;
    }
    char len_line[64] = "";
    if (clen >= 0) {
        snprintf(len_line, sizeof len_line, "Content-Length: %" PRId64 "\r\n", clen);
    } else if (clen == CLEN_CHUNKED) {
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
                 reason(status), c->be->name, ctype ? "Content-Type: " : "", ctype ? ctype : "",
                 ctype ? "\r\n" : "", len_line, extra ? extra : "", conn_line);
    if (n < 0 || n >= HEAD_CAP) {
        /* Only a bug in this file gets here: every input is bounded. */
        abort();
    }
    o->inl_len = (size_t)n;
    return o;
}

/* A complete response whose body is copied: one write. */
static void
respond_text(struct conn *c, int status, const char *ctype, const void *body, size_t len,
             const char *extra)
{
    struct out *o = head_make(c, status, ctype, (int64_t)len, extra);
    if (!o) {
        return;
    }
    out_send_copy(c, o, body, c->r.head_only ? 0 : len);
}

static void
respond_msg(struct conn *c, int status, const char *msg, const char *extra)
{
    respond_text(c, status, "text/plain", msg, strlen(msg), extra);
}

/* Produces GEN_MEM output while the write queue is low. */
static void
produce(struct conn *c)
{
    struct resp *r = &c->r;
    while (r->active && r->gen == GEN_MEM && !c->closing) {
        size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
        if (!r->hdr && (queued >= WQ_HIGH || c->inflight >= MAX_INFLIGHT)) {
            return;
        }
        struct out *o = r->hdr ? r->hdr : out_take(c);
        r->hdr = NULL;
        if (!o) {
            conn_close(c);
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
            r->gen = GEN_NONE;
        }
        if (nb == 0) {
            out_release(c->be, o);
        } else if (out_send(c, o, b, nb) < 0) {
            return;
        }
    }
}

/* Starts a response whose body is `len` bytes of memory (see enum gen), framed with
 * Content-Length, chunked or by close; `src` must outlive the connection. */
static void
respond_mem(struct conn *c, int status, const char *ctype, const char *src, size_t period,
            uint64_t len, int64_t framing, const char *extra)
{
    struct resp *r = &c->r;
    r->chunked = framing == CLEN_CHUNKED;
    r->hdr = head_make(c, status, ctype, framing == 0 ? (int64_t)len : framing, extra);
    if (!r->hdr) {
        return;
    }
    r->gen = GEN_MEM;
    r->active = true;
    r->src = src;
    r->period = period;
    r->off = 0;
    r->remaining = r->head_only ? 0 : len;
    if (r->head_only) {
        /* No body, and for chunked no terminator either. */
        struct out *o = r->hdr;
        r->hdr = NULL;
        r->active = false;
        r->gen = GEN_NONE;
        out_send_copy(c, o, NULL, 0);
        return;
    }
    produce(c);
}

/* ---- connection lifetime ---- */

static void
on_handle_close(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->open_handles > 0) {
        return;
    }
    EVP_MD_CTX_free(c->md);
    free(c);
}

static void
conn_close(struct conn *c)
{
    if (c->closing) {
        return;
    }
    c->closing = true;
    out_release(c->be, c->r.hdr);
    c->r.hdr = NULL;
    if (c->prev) {
        c->prev->next = c->next;
    } else {
        c->be->conns = c->next;
    }
    if (c->next) {
        c->next->prev = c->prev;
    }
    c->prev = c->next = NULL;
    uv_close((uv_handle_t *)&c->tcp, on_handle_close);
    uv_close((uv_handle_t *)&c->timer, on_handle_close);
}

static void
on_linger_timeout(uv_timer_t *t)
{
    conn_close(t->data);
}

static void update_reading(struct conn *c);

static void
on_shutdown(uv_shutdown_t *req, int status)
{
    struct conn *c = req->data;
    if (c->closing) {
        return;
    }
    if (status < 0 || c->eof) {
        conn_close(c);
        return;
    }
    c->mode = MODE_LINGER;
    uv_timer_start(&c->timer, on_linger_timeout, LINGER_MS, 0);
    update_reading(c);
}

/* Closes the write side once the queued writes are out, then lingers. */
static void
begin_shutdown(struct conn *c)
{
    if (c->shutting || c->closing) {
        return;
    }
    c->shutting = true;
    uv_timer_stop(&c->timer);
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
        conn_close(c);
    }
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    (void)suggested;
    if (c->mode == MODE_LINGER) {
        *buf = uv_buf_init(c->in, IN_CAP);
    } else {
        *buf = uv_buf_init(c->in + c->in_len, (unsigned)(IN_CAP - c->in_len));
    }
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    (void)buf;
    if (c->closing) {
        return;
    }
    if (nread == 0) {
        return;
    }
    if (c->mode == MODE_LINGER) {
        if (nread < 0) {
            conn_close(c);
        }
        return;
    }
    if (nread == UV_EOF) {
        c->eof = true;
    } else if (nread < 0) {
        conn_close(c);
        return;
    } else {
        c->in_len += (size_t)nread;
    }
    drive(c);
}

static void
update_reading(struct conn *c)
{
    if (c->closing) {
        return;
    }
    bool want;
    if (c->mode == MODE_LINGER) {
        want = true;
    } else {
        /* Reading goes on while a response is pending (wait_resp), into the buffer only,
         * so a reset is seen early; the bytes are parsed when the response is done. */
        want = !c->eof && !c->shutting && c->in_len < IN_CAP &&
               uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) < WQ_HIGH;
    }
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
            conn_close(c);
            return;
        }
        c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

/* ---- request heads ---- */

static bool
span_eq(struct span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && memcmp(s.p, lit, n) == 0;
}

static bool
span_prefix(struct span s, const char *lit, struct span *rest)
{
    size_t n = strlen(lit);
    if (s.len < n || memcmp(s.p, lit, n) != 0) {
        return false;
    }
    rest->p = s.p + n;
    rest->len = s.len - n;
    return true;
}

static bool
span_caseeq(struct span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && strncasecmp(s.p, lit, n) == 0;
}

/* Decimal digits only, at most `max`. */
static bool
parse_u64(struct span s, uint64_t max, uint64_t *out)
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

/* The path of the request line's target: absolute-form loses scheme and authority, and the
 * query is dropped. llhttp has already validated the line. */
static struct span
head_path(const char *head, size_t len)
{
    struct span t = { "", 0 };
    const char *sp = memchr(head, ' ', len);
    if (!sp) {
        return t;
    }
    const char *start = sp + 1;
    const char *end = memchr(start, ' ', len - (size_t)(start - head));
    if (!end) {
        return t;
    }
    t.p = start;
    t.len = (size_t)(end - start);
    struct span rest;
    if (span_prefix(t, "http://", &rest) || span_prefix(t, "https://", &rest)) {
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

/* The value of the first header called `name` (any case), without surrounding blanks. */
static bool
head_header(const char *head, size_t len, const char *name, struct span *val)
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

/* ---- endpoints ---- */

static bool
method_is_get(struct conn *c)
{
    uint8_t m = llhttp_get_method(&c->parser);
    if (m == HTTP_GET || m == HTTP_HEAD) {
        return true;
    }
    respond_msg(c, 405, "method not allowed\n", "Allow: GET, HEAD\r\n");
    return false;
}

static void
route_stats(struct conn *c)
{
    char body[256];
    int n = snprintf(body, sizeof body,
                     "{\"name\":\"%s\",\"requests\":%" PRIu64 ",\"connections\":%" PRIu64 "}\n",
                     c->be->name, c->be->requests, c->be->connections);
    respond_text(c, 200, "application/json", body, (size_t)n, NULL);
}

static void
route_page(struct conn *c, struct span rest)
{
    const struct dm_site *site = c->be->site;
    const char *dot = memchr(rest.p, '.', rest.len);
    uint64_t n;
    if (!dot || !parse_u64((struct span){ rest.p, (size_t)(dot - rest.p) }, UINT32_MAX, &n) ||
        n >= dm_site_pages(site)) {
        respond_msg(c, 404, "no such page\n", NULL);
        return;
    }
    struct span ext = { dot, (size_t)(rest.p + rest.len - dot) };
    size_t len;
    if (span_eq(ext, ".html")) {
        size_t nobj_len;
        unsigned nobj;
        dm_site_page_objects(site, (unsigned)n, &nobj_len, &nobj);
        char extra[48];
        snprintf(extra, sizeof extra, "X-Page-Objects: %u\r\n", nobj);
        const char *html = dm_site_page(site, (unsigned)n, &len);
        respond_mem(c, 200, "text/html", html, 0, len, 0, extra);
    } else if (span_eq(ext, ".objects")) {
        unsigned nobj;
        const char *list = dm_site_page_objects(site, (unsigned)n, &len, &nobj);
        respond_mem(c, 200, "text/plain", list, 0, len, 0, NULL);
    } else {
        respond_msg(c, 404, "no such page\n", NULL);
    }
}

static void
route_obj(struct conn *c, struct span rest)
{
    /* Pictures are SVG whatever the extension says: a browser shows them
     * (an <img> takes the type from Content-Type), and a size of 102 bytes
     * still holds a whole picture. */
    static const struct {
        const char *ext;
        const char *ctype;
        int fill;
    } types[] = {
        { ".png", "image/svg+xml", 0 },
        { ".jpg", "image/svg+xml", 0 },
        { ".js", "application/javascript", 1 },
        { ".css", "text/css", 2 },
    };
    const char *dot = memchr(rest.p, '.', rest.len);
    uint64_t id;
    if (!dot || !parse_u64((struct span){ rest.p, (size_t)(dot - rest.p) }, 999999999, &id)) {
        respond_msg(c, 404, "no such object\n", NULL);
        return;
    }
    struct span ext = { dot, (size_t)(rest.p + rest.len - dot) };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (span_eq(ext, types[i].ext)) {
            respond_mem(c, 200, types[i].ctype, c->be->fill[types[i].fill], 0, dm_site_obj_size(id),
                        0, NULL);
            return;
        }
    }
    respond_msg(c, 404, "no such object\n", NULL);
}

/*
 * The object bodies, each as long as the largest object: a valid file of its
 * type padded with blanks, so every prefix that an object size asks for is
 * still valid (an SVG picture then spaces, which XML allows after the root;
 * a script that is one line comment; a stylesheet that is one comment, left
 * open at the end as CSS allows).
 */
static bool
make_fills(struct backend *be)
{
    static const char *const heads[3] = {
        /* One element, written on two lines: parentheses say the concatenation is meant. */
        ("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"96\" height=\"64\">"
         "<rect width=\"96\" height=\"64\" fill=\"#7a9\"/></svg>"),
        "// dimmer-backend demo script",
        "/* dimmer-backend demo stylesheet",
    };
    size_t max = DM_SITE_OBJ_MAX;
    for (int i = 0; i < 3; i++) {
        be->fill[i] = malloc(max);
        if (be->fill[i] == NULL) {
            return false;
        }
        memset(be->fill[i], ' ', max);
        memcpy(be->fill[i], heads[i], strlen(heads[i]));
    }
    return true;
}

/* /bytes/N, /chunked/N, /close/N: the pattern, framed three ways. */
static void
route_bytes(struct conn *c, struct span num, int64_t framing)
{
    uint64_t n;
    if (!parse_u64(num, MAX_BYTES, &n)) {
        respond_msg(c, 400, "length must be a decimal number up to 2^40\n", NULL);
        return;
    }
    if (framing == CLEN_CHUNKED && c->http10) {
        /* HTTP/1.0 has no chunked coding: fall back to ending the body at close. */
        framing = CLEN_NONE;
    }
    if (framing == CLEN_NONE) {
        c->r.close_after = true;
    }
    respond_mem(c, 200, "application/octet-stream", (const char *)dm_site_pattern(c->be->site),
                DM_PATTERN_PERIOD, n, framing, NULL);
}

static void
route_status(struct conn *c, struct span num)
{
    uint64_t n;
    if (!parse_u64(num, 599, &n) || n < 100 || n == 101) {
        respond_msg(c, 400, "status must be 100..599 and not 101\n", NULL);
        return;
    }
    int status = (int)n;
    if (status < 200) {
        /* An interim response on its own would leave the client waiting, so a 1xx is
         * sent as interim and followed by a final 200 (HTTP/1.0 gets only the 200). */
        if (!c->http10) {
            char line[128];
            int len = snprintf(line, sizeof line, "HTTP/1.1 %d %s\r\nX-Backend: %s\r\n\r\n", status,
                               reason(status), c->be->name);
            if (send_copy(c, line, (size_t)len) < 0) {
                return;
            }
        }
        respond_msg(c, 200, "ok\n", NULL);
        return;
    }
    if (status == 204 || status == 304) {
        struct out *o = head_make(c, status, NULL, CLEN_NONE, NULL);
        if (o) {
            out_send_copy(c, o, NULL, 0);
        }
        return;
    }
    char body[32];
    int len = snprintf(body, sizeof body, "status %d\n", status);
    respond_text(c, status, "text/plain", body, (size_t)len, NULL);
}

static void
on_slow_timer(uv_timer_t *t)
{
    struct conn *c = t->data;
    if (c->closing || c->r.gen != GEN_SLOW) {
        return;
    }
    c->r.active = false;
    c->r.gen = GEN_NONE;
    respond_msg(c, 200, "slept\n", NULL);
    drive(c);
}

static void
route_slow(struct conn *c, struct span num)
{
    uint64_t ms;
    if (!parse_u64(num, MAX_SLOW_MS, &ms)) {
        respond_msg(c, 400, "delay must be 0..3600000 ms\n", NULL);
        return;
    }
    c->r.gen = GEN_SLOW;
    c->r.active = true;
    uv_timer_start(&c->timer, on_slow_timer, ms, 0);
}

static void
route_echo(struct conn *c)
{
    struct resp *r = &c->r;
    int64_t framing;
    if (c->parser.flags & F_CHUNKED) {
        framing = c->http10 ? CLEN_NONE : CLEN_CHUNKED;
    } else {
        /* Content-Length, or no body at all: both are a known length. */
        framing = (int64_t)c->parser.content_length;
    }
    if (framing == CLEN_NONE) {
        r->close_after = true;
    }
    r->chunked = framing == CLEN_CHUNKED;
    struct out *o = head_make(c, 200, "application/octet-stream", framing, NULL);
    if (!o || out_send_copy(c, o, NULL, 0) < 0) {
        return;
    }
    r->gen = GEN_ECHO;
    r->active = true;
}

static void
echo_body(struct conn *c, const char *at, size_t len)
{
    struct out *o = out_take(c);
    if (!o) {
        conn_close(c);
        return;
    }
    if (c->r.chunked) {
        o->inl_len = (size_t)sprintf(o->inl, "%zx\r\n", len);
    }
    if (o->inl_len + len + 2 <= OUT_INLINE) {
        memcpy(o->inl + o->inl_len, at, len);
        o->inl_len += len;
        if (c->r.chunked) {
            memcpy(o->inl + o->inl_len, "\r\n", 2);
            o->inl_len += 2;
        }
        uv_buf_t b = uv_buf_init(o->inl, (unsigned)o->inl_len);
        out_send(c, o, &b, 1);
        return;
    }
    o->heap = malloc(len);
    if (!o->heap) {
        out_release(c->be, o);
        conn_close(c);
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
    out_send(c, o, b, nb);
}

static void
route_sha(struct conn *c)
{
    if (!c->md) {
        c->md = EVP_MD_CTX_new();
    }
    if (!c->md || !EVP_DigestInit_ex(c->md, EVP_sha256(), NULL)) {
        respond_msg(c, 500, "digest unavailable\n", NULL);
        return;
    }
    c->r.gen = GEN_SHA;
    c->r.active = true;
}

static void
sha_finish(struct conn *c)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    c->r.active = false;
    c->r.gen = GEN_NONE;
    if (!EVP_DigestFinal_ex(c->md, md, &mdlen)) {
        respond_msg(c, 500, "digest failed\n", NULL);
        return;
    }
    char body[160];
    int n = snprintf(body, sizeof body, "{\"bytes\":%" PRIu64 ",\"sha256\":\"", c->r.body_bytes);
    for (unsigned i = 0; i < mdlen; i++) {
        n += snprintf(body + n, sizeof body - (size_t)n, "%02x", md[i]);
    }
    n += snprintf(body + n, sizeof body - (size_t)n, "\"}\n");
    respond_text(c, 200, "application/json", body, (size_t)n, NULL);
}

static void
route_ws(struct conn *c, const char *head, size_t hlen)
{
    struct span up, key;
    if (llhttp_get_method(&c->parser) != HTTP_GET || !llhttp_get_upgrade(&c->parser) ||
        !head_header(head, hlen, "Upgrade", &up) || !span_caseeq(up, "websocket")) {
        respond_msg(c, 426, "websocket upgrade required\n", "Upgrade: websocket\r\n");
        return;
    }
    if (!head_header(head, hlen, "Sec-WebSocket-Key", &key) || key.len == 0 || key.len > 64) {
        respond_msg(c, 400, "missing Sec-WebSocket-Key\n", NULL);
        return;
    }
    char buf[64 + sizeof WS_GUID];
    memcpy(buf, key.p, key.len);
    memcpy(buf + key.len, WS_GUID, sizeof WS_GUID - 1);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    if (!EVP_Digest(buf, key.len + sizeof WS_GUID - 1, md, &mdlen, EVP_sha1(), NULL)) {
        respond_msg(c, 500, "digest failed\n", NULL);
        return;
    }
    unsigned char accept[64];
    EVP_EncodeBlock(accept, md, (int)mdlen);
    char line[256];
    int n = snprintf(line, sizeof line,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\nX-Backend: %s\r\n\r\n",
                     (const char *)accept, c->be->name);
    c->r.ws_upgrade = true;
    send_copy(c, line, (size_t)n);
}

/* Routes the request whose head is in[head_start, parse_off). */
static void
route(struct conn *c)
{
    struct backend *be = c->be;
    const char *head = c->in + c->head_start;
    size_t hlen = c->parse_off - c->head_start;
    c->r = (struct resp){ 0 };
    c->r.started = true;
    c->r.close_after = !llhttp_should_keep_alive(&c->parser);
    c->r.head_only = llhttp_get_method(&c->parser) == HTTP_HEAD;
    c->http10 = llhttp_get_http_major(&c->parser) == 1 && llhttp_get_http_minor(&c->parser) == 0;
    struct span path = head_path(head, hlen);
    struct span rest;

    if (!span_eq(path, "/stats") && !span_eq(path, "/healthz")) {
        be->requests++;
    }
    bool has_body = (c->parser.flags & F_CHUNKED) || c->parser.content_length > 0;
    struct span expect;
    if (has_body && !c->http10 && head_header(head, hlen, "Expect", &expect) &&
        span_caseeq(expect, "100-continue")) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (send_copy(c, cont, sizeof cont - 1) < 0) {
            return;
        }
    }
    if (llhttp_get_method(&c->parser) == HTTP_CONNECT) {
        c->r.close_after = true;
        respond_msg(c, 405, "CONNECT is not supported\n", NULL);
        return;
    }

    if (span_eq(path, "/healthz")) {
        if (method_is_get(c)) {
            respond_msg(c, 200, "ok\n", NULL);
        }
    } else if (span_eq(path, "/stats")) {
        if (method_is_get(c)) {
            route_stats(c);
        }
    } else if (span_eq(path, "/") || span_eq(path, "/index.html")) {
        if (method_is_get(c)) {
            size_t len;
            const char *html = dm_site_index(be->site, &len);
            respond_mem(c, 200, "text/html", html, 0, len, 0, NULL);
        }
    } else if (span_prefix(path, "/page/", &rest)) {
        if (method_is_get(c)) {
            route_page(c, rest);
        }
    } else if (span_prefix(path, "/obj/", &rest)) {
        if (method_is_get(c)) {
            route_obj(c, rest);
        }
    } else if (span_prefix(path, "/bytes/", &rest)) {
        if (method_is_get(c)) {
            route_bytes(c, rest, 0);
        }
    } else if (span_prefix(path, "/chunked/", &rest)) {
        if (method_is_get(c)) {
            route_bytes(c, rest, CLEN_CHUNKED);
        }
    } else if (span_prefix(path, "/close/", &rest)) {
        if (method_is_get(c)) {
            route_bytes(c, rest, CLEN_NONE);
        }
    } else if (span_eq(path, "/echo") || span_eq(path, "/sha256")) {
        uint8_t m = llhttp_get_method(&c->parser);
        if (m != HTTP_POST && m != HTTP_PUT) {
            respond_msg(c, 405, "method not allowed\n", "Allow: POST, PUT\r\n");
        } else if (span_eq(path, "/echo")) {
            route_echo(c);
        } else {
            route_sha(c);
        }
    } else if (span_eq(path, "/headers")) {
        respond_text(c, 200, "text/plain", head, hlen, NULL);
    } else if (span_prefix(path, "/status/", &rest)) {
        route_status(c, rest);
    } else if (span_prefix(path, "/slow/", &rest)) {
        route_slow(c, rest);
    } else if (span_eq(path, "/ws")) {
        route_ws(c, head, hlen);
    } else {
        respond_msg(c, 404, "not found\n", NULL);
    }
}

/* ---- HTTP parsing ---- */

static int
on_message_begin(llhttp_t *p)
{
    struct conn *c = p->data;
    c->in_head = true;
    c->head_known = false;
    c->req_active = true;
    return 0;
}

/* The method is the first thing of a request, so its first byte starts the head. */
static int
on_method(llhttp_t *p, const char *at, size_t len)
{
    struct conn *c = p->data;
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
    struct conn *c = p->data;
    c->in_head = false;
    c->ev = EV_HEAD;
    return HPE_PAUSED;
}

static int
on_body(llhttp_t *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (c->closing) {
        return HPE_USER;
    }
    c->r.body_bytes += len;
    if (c->r.gen == GEN_ECHO) {
        echo_body(c, at, len);
    } else if (c->r.gen == GEN_SHA) {
        if (!EVP_DigestUpdate(c->md, at, len)) {
            return HPE_USER;
        }
    }
    return c->closing ? HPE_USER : 0;
}

static int
on_message_complete(llhttp_t *p)
{
    struct conn *c = p->data;
    c->ev = EV_DONE;
    return HPE_PAUSED;
}

/* The current request and its response are both done: on to the next, or close. */
static void
exchange_done(struct conn *c)
{
    c->r.started = false;
    if (c->r.close_after) {
        begin_shutdown(c);
    } else if (c->r.ws_upgrade) {
        c->mode = MODE_WS;
        c->ws = (struct ws_state){ 0 };
    } else {
        llhttp_resume(&c->parser);
    }
}

static void
request_end(struct conn *c)
{
    c->req_active = false;
    if (c->r.gen == GEN_ECHO) {
        c->r.active = false;
        c->r.gen = GEN_NONE;
        if (c->r.chunked) {
            send_copy(c, "0\r\n\r\n", 5);
        }
    } else if (c->r.gen == GEN_SHA) {
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
bad_request(struct conn *c, int status, const char *why)
{
    if (c->r.started) {
        /* Part of a response is out already: no way to say more than a reset. */
        conn_close(c);
        return;
    }
    c->be->requests++;
    c->r = (struct resp){ 0 };
    c->r.close_after = true;
    char body[128];
    int n = snprintf(body, sizeof body, "bad request: %s\n", why);
    respond_text(c, status, "text/plain", body, (size_t)n, NULL);
    begin_shutdown(c);
}

static void
parse_http(struct conn *c)
{
    /* After the head, llhttp needs one more call, even with no bytes, to end a request
     * without a body. */
    bool after_head = false;
    while (c->mode == MODE_HTTP && !c->closing && !c->shutting && !c->wait_resp &&
           (c->parse_off < c->in_len || after_head)) {
        after_head = false;
        c->ev = EV_NONE;
        llhttp_errno_t err =
            llhttp_execute(&c->parser, c->in + c->parse_off, c->in_len - c->parse_off);
        if (c->closing) {
            return;
        }
        if (err == HPE_OK) {
            c->parse_off = c->in_len;
        } else if (err == HPE_PAUSED) {
            c->parse_off = (size_t)(llhttp_get_error_pos(&c->parser) - c->in);
            if (c->ev == EV_HEAD) {
                route(c);
                llhttp_resume(&c->parser);
                after_head = true;
            } else if (c->ev == EV_DONE) {
                request_end(c);
            }
        } else if (err == HPE_PAUSED_UPGRADE) {
            /* An Upgrade or CONNECT we did not take: keep speaking HTTP. */
            c->parse_off = (size_t)(llhttp_get_error_pos(&c->parser) - c->in);
            llhttp_resume_after_upgrade(&c->parser);
        } else {
            bad_request(c, 400, llhttp_errno_name(err));
        }
    }
}

/* ---- WebSocket echo (RFC 6455) ---- */

static void
ws_fail(struct conn *c, unsigned code)
{
    uint8_t frame[4] = { 0x88, 2, (uint8_t)(code >> 8), (uint8_t)code };
    if (send_copy(c, frame, sizeof frame) == 0) {
        begin_shutdown(c);
    }
}

/* Sends `hl` bytes of frame head (may be 0) and `n` payload bytes unmasked from `src`. */
static void
ws_emit(struct conn *c, const uint8_t *hdr, size_t hl, const uint8_t *src, size_t n)
{
    struct ws_state *ws = &c->ws;
    struct out *o = out_take(c);
    if (!o) {
        conn_close(c);
        return;
    }
    memcpy(o->inl, hdr, hl);
    o->inl_len = hl;
    uint8_t *dst;
    if (hl + n <= OUT_INLINE) {
        dst = (uint8_t *)o->inl + hl;
        o->inl_len += n;
    } else {
        o->heap = malloc(n);
        if (!o->heap) {
            out_release(c->be, o);
            conn_close(c);
            return;
        }
        dst = (uint8_t *)o->heap;
    }
    for (size_t i = 0; i < n; i++) {
        dst[i] = src[i] ^ ws->mask[(ws->mask_off + i) & 3];
    }
    uv_buf_t b[2];
    unsigned nb = 0;
    if (o->inl_len) {
        b[nb++] = uv_buf_init(o->inl, (unsigned)o->inl_len);
    }
    if (o->heap) {
        b[nb++] = uv_buf_init(o->heap, (unsigned)n);
    }
    if (nb == 0) {
        out_release(c->be, o);
        return;
    }
    out_send(c, o, b, nb);
}

static void
parse_ws(struct conn *c)
{
    struct ws_state *ws = &c->ws;
    while (c->mode == MODE_WS && !c->closing && !c->shutting) {
        const uint8_t *p = (const uint8_t *)c->in + c->parse_off;
        size_t avail = c->in_len - c->parse_off;
        uint8_t out_hdr[10];
        size_t out_hl = 0;
        if (!ws->in_payload) {
            if (avail < 2) {
                return;
            }
            size_t hl = 2;
            uint64_t len = p[1] & 0x7f;
            hl += len == 126 ? 2 : len == 127 ? 8 : 0;
            bool masked = p[1] & 0x80;
            hl += masked ? 4 : 0;
            if (avail < hl) {
                return;
            }
            if (len == 126) {
                len = (uint64_t)p[2] << 8 | p[3];
            } else if (len == 127) {
                len = 0;
                for (int i = 0; i < 8; i++) {
                    len = len << 8 | p[2 + i];
                }
            }
            bool fin = p[0] & 0x80;
            uint8_t op = p[0] & 0x0f;
            bool control = op & 0x08;
            bool known = op <= 2 || (op >= 8 && op <= 10);
            /* Clients mask, use no extensions (no RSV bits) and keep control frames
             * short and whole (RFC 6455 5.1, 5.2, 5.5). */
            if (!masked || (p[0] & 0x70) || !known || (len >> 63) ||
                (control && (!fin || len > 125))) {
                ws_fail(c, 1002);
                return;
            }
            memcpy(ws->mask, p + hl - 4, 4);
            ws->mask_off = 0;
            ws->opcode = op;
            ws->remaining = len;
            ws->in_payload = true;
            ws->discard = op == 0x0a;
            c->parse_off += hl;
            avail -= hl;
            p += hl;
            if (!ws->discard) {
                uint8_t out_op = op == 0x09 ? 0x0a : op;
                out_hdr[0] = (uint8_t)((fin ? 0x80 : 0) | out_op);
                if (len < 126) {
                    out_hdr[1] = (uint8_t)len;
                    out_hl = 2;
                } else if (len <= 0xffff) {
                    out_hdr[1] = 126;
                    out_hdr[2] = (uint8_t)(len >> 8);
                    out_hdr[3] = (uint8_t)len;
                    out_hl = 4;
                } else {
                    out_hdr[1] = 127;
                    for (int i = 0; i < 8; i++) {
                        out_hdr[2 + i] = (uint8_t)(len >> (56 - 8 * i));
                    }
                    out_hl = 10;
                }
            }
        }
        size_t n = ws->remaining < avail ? (size_t)ws->remaining : avail;
        if (!ws->discard && (out_hl > 0 || n > 0)) {
            ws_emit(c, out_hdr, out_hl, p, n);
        }
        ws->mask_off = (unsigned)((ws->mask_off + n) & 3);
        ws->remaining -= n;
        c->parse_off += n;
        if (ws->remaining > 0) {
            return; /* need more input */
        }
        ws->in_payload = false;
        if (ws->opcode == 0x08) {
            begin_shutdown(c);
            return;
        }
    }
}

/* ---- driving a connection ---- */

/* Drops consumed input; keeps the request head being received, and pipelined bytes. */
static void
compact(struct conn *c)
{
    size_t keep = c->parse_off;
    if (c->mode == MODE_HTTP && c->in_head && c->head_known) {
        keep = c->head_start;
    }
    if (keep == 0) {
        return;
    }
    if (keep == c->in_len) {
        c->in_len = c->parse_off = c->head_start = 0;
        return;
    }
    if (IN_CAP - c->in_len >= IN_CAP / 4) {
        return; /* room enough: move the bytes only when the space runs low */
    }
    memmove(c->in, c->in + keep, c->in_len - keep);
    c->in_len -= keep;
    c->parse_off -= keep;
    c->head_start = c->head_start >= keep ? c->head_start - keep : 0;
}

static void
check_input_end(struct conn *c)
{
    if (c->closing || c->shutting || c->mode != MODE_HTTP) {
        if (c->mode == MODE_WS && c->eof && !c->shutting && !c->closing) {
            begin_shutdown(c);
        }
        return;
    }
    if (c->in_len == IN_CAP && c->in_head) {
        bad_request(c, 431, "request head larger than the input buffer");
        return;
    }
    if (!c->eof || c->wait_resp || c->parse_off < c->in_len) {
        return;
    }
    /* The peer sent all it will send and every complete request has been answered or
     * is being answered by a generator that needs no more input. */
    if (!c->req_active) {
        begin_shutdown(c);
    } else if (c->r.active) {
        conn_close(c); /* a cut request whose response is under way */
    } else {
        begin_shutdown(c);
    }
}

static void
drive(struct conn *c)
{
    if (c->closing) {
        return;
    }
    produce(c);
    if (c->wait_resp && !c->r.active && !c->closing) {
        c->wait_resp = false;
        exchange_done(c);
    }
    if (c->mode == MODE_HTTP) {
        parse_http(c);
    } else if (c->mode == MODE_WS) {
        parse_ws(c);
    }
    if (c->closing) {
        return;
    }
    compact(c);
    check_input_end(c);
    update_reading(c);
}

/* ---- listener and process ---- */

static void
on_connection(uv_stream_t *server, int status)
{
    struct backend *be = server->data;
    if (status < 0 || be->stopping) {
        return;
    }
    struct conn *c = malloc(sizeof *c);
    if (!c) {
        return; /* the connection stays in the backlog until memory returns */
    }
    memset(c, 0, offsetof(struct conn, in));
    c->be = be;
    uv_tcp_init(be->loop, &c->tcp);
    uv_timer_init(be->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->open_handles = 2;
    c->next = be->conns;
    if (be->conns) {
        be->conns->prev = c;
    }
    be->conns = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    be->connections++;
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_REQUEST, &be->settings);
    c->parser.data = c;
    update_reading(c);
}

static void
on_signal(uv_signal_t *s, int signum)
{
    struct backend *be = s->data;
    (void)signum;
    if (be->stopping) {
        return;
    }
    be->stopping = true;
    uv_close((uv_handle_t *)&be->listener, NULL);
    uv_close((uv_handle_t *)&be->sigterm, NULL);
    uv_close((uv_handle_t *)&be->sigint, NULL);
    while (be->conns) {
        conn_close(be->conns);
    }
}

static void
usage(FILE *f)
{
    fprintf(
        f,
        "usage: dimmer-backend --listen ADDR [--name NAME] [--seed N] [--pages N]\n"
        "\n"
        "Demo HTTP/1.1 backend for dimmer.\n"
        "  --listen ADDR  address to listen on: 127.0.0.1:9001, [::1]:9001 (required;\n"
        "                 port 0 picks one; the bound address is printed on stdout)\n"
        "  --name NAME    sent as X-Backend on every response (default backend;\n"
        "                 letters, digits, '.', '_', '-', up to 64)\n"
        "  --seed N       site generation seed (default 1)\n"
        "  --pages N      number of generated pages (default 50, max %u)\n"
        "  --help         this text\n"
        "\n"
        "Endpoints (every response has X-Backend and, unless noted, Content-Length):\n"
        "  GET /healthz            200 \"ok\\n\"\n"
        "  GET /stats              {\"name\":..,\"requests\":N,\"connections\":N}; requests\n"
        "                          counts all requests but /stats and /healthz\n"
        "  GET /                   index of the generated site\n"
        "  GET /page/N.html        page N (0..pages-1); X-Page-Objects: count\n"
        "  GET /page/N.objects     the page's embedded objects, one path a line\n"
        "  GET /obj/ID.EXT         object (png jpg js css), size fixed by ID\n"
        "  GET /bytes/N            N bytes (N <= 2^40) of the pattern below\n"
        "  GET /chunked/N          the same, Transfer-Encoding: chunked\n"
        "  GET /close/N            the same, no length, Connection: close\n"
        "  POST|PUT /echo          the request body back (chunked if it was)\n"
        "  POST|PUT /sha256        {\"bytes\":N,\"sha256\":\"hex\"} of the request body\n"
        "  ANY /headers            the request head exactly as received\n"
        "  ANY /status/N           status N (204 and 304: no body, no length;\n"
        "                          1xx: interim then a final 200)\n"
        "  ANY /slow/MS            200 after MS milliseconds\n"
        "  GET /ws                 WebSocket echo (ping gets pong, close gets close)\n"
        "\n"
        "Pattern: byte i is block[i %% 65521] with block[j] = ((j * 2654435761) >> 13) & 0xff;\n"
        "  python3: block = bytes((j * 2654435761 >> 13) & 255 for j in range(65521))\n"
        "           data = (block * (N // 65521 + 1))[:N]\n"
        "  Object bodies: pictures (png, jpg) are an SVG image (image/svg+xml) padded\n"
        "  with spaces, scripts one // comment, stylesheets one /* comment.\n",
        DM_SITE_MAX_PAGES);
}

static bool
name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > NAME_MAX_LEN) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
        if (!ok) {
            return false;
        }
    }
    return true;
}

static bool
parse_num(const char *s, uint64_t max, uint64_t *out)
{
    return parse_u64((struct span){ s, strlen(s) }, max, out);
}

/* "host:port" or "[v6]:port". */
static int
parse_addr(const char *s, struct sockaddr_storage *ss)
{
    char host[128];
    const char *colon = strrchr(s, ':');
    uint64_t port;
    if (!colon || !parse_num(colon + 1, 65535, &port)) {
        return -EINVAL;
    }
    size_t hlen = (size_t)(colon - s);
    if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
        if (hlen - 2 >= sizeof host) {
            return -EINVAL;
        }
        memcpy(host, s + 1, hlen - 2);
        host[hlen - 2] = '\0';
        return uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss);
    }
    if (hlen == 0 || hlen >= sizeof host) {
        return -EINVAL;
    }
    memcpy(host, s, hlen);
    host[hlen] = '\0';
    return uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss);
}

static void
print_bound(struct backend *be)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getsockname(&be->listener, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            uv_ip6_name(a, ip, sizeof ip);
            port = ntohs(a->sin6_port);
            printf("dimmer-backend %s listening on [%s]:%d\n", be->name, ip, port);
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            uv_ip4_name(a, ip, sizeof ip);
            port = ntohs(a->sin_port);
            printf("dimmer-backend %s listening on %s:%d\n", be->name, ip, port);
        }
        fflush(stdout);
    }
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "listen", required_argument, NULL, 'l' }, { "name", required_argument, NULL, 'n' },
        { "seed", required_argument, NULL, 's' },   { "pages", required_argument, NULL, 'p' },
        { "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
    };
    const char *listen_addr = NULL;
    const char *name = "backend";
    uint64_t seed = 1, pages = 50;
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'l':
            listen_addr = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 's':
            if (!parse_num(optarg, UINT64_MAX, &seed)) {
                fprintf(stderr, "dimmer-backend: --seed wants a decimal number\n");
                return 2;
            }
            break;
        case 'p':
            if (!parse_num(optarg, DM_SITE_MAX_PAGES, &pages) || pages == 0) {
                fprintf(stderr, "dimmer-backend: --pages wants 1..%u\n", DM_SITE_MAX_PAGES);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !listen_addr) {
        if (!listen_addr) {
            fprintf(stderr, "dimmer-backend: --listen ADDR is required\n");
        }
        usage(stderr);
        return 2;
    }
    if (!name_ok(name)) {
        fprintf(stderr, "dimmer-backend: --name wants 1..%d of [A-Za-z0-9._-]\n", NAME_MAX_LEN);
        return 2;
    }
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    if (parse_addr(listen_addr, &addr) < 0) {
        fprintf(stderr, "dimmer-backend: bad --listen address '%s' (want HOST:PORT)\n",
                listen_addr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    struct backend be = { 0 };
    be.name = name;
    be.loop = uv_default_loop();
    be.site = dm_site_create(seed, (unsigned)pages);
    if (!be.site || !make_fills(&be)) {
        fprintf(stderr, "dimmer-backend: out of memory building the site\n");
        return 1;
    }
    llhttp_settings_init(&be.settings);
    be.settings.on_message_begin = on_message_begin;
    be.settings.on_method = on_method;
    be.settings.on_headers_complete = on_headers_complete;
    be.settings.on_body = on_body;
    be.settings.on_message_complete = on_message_complete;

    int rc = 0;
    uv_tcp_init(be.loop, &be.listener);
    be.listener.data = &be;
    int err = uv_tcp_bind(&be.listener, (const struct sockaddr *)&addr, 0);
    if (err == 0) {
        err = uv_listen((uv_stream_t *)&be.listener, 1024, on_connection);
    }
    if (err < 0) {
        fprintf(stderr, "dimmer-backend: cannot listen on %s: %s\n", listen_addr, uv_strerror(err));
        uv_close((uv_handle_t *)&be.listener, NULL);
        rc = 1;
    } else {
        uv_signal_init(be.loop, &be.sigterm);
        uv_signal_init(be.loop, &be.sigint);
        be.sigterm.data = &be;
        be.sigint.data = &be;
        uv_signal_start(&be.sigterm, on_signal, SIGTERM);
        uv_signal_start(&be.sigint, on_signal, SIGINT);
        print_bound(&be);
    }
    uv_run(be.loop, UV_RUN_DEFAULT);

    while (be.free_outs) {
        struct out *o = be.free_outs;
        be.free_outs = o->next;
        free(o);
    }
    dm_site_destroy(be.site);
    for (int i = 0; i < 3; i++) {
        free(be.fill[i]);
    }
    if (uv_loop_close(be.loop) != 0) {
        fprintf(stderr, "dimmer-backend: handles left open at exit\n");
    }
    return rc;
}
