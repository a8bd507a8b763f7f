/*
 * One HTTP/1.1 client connection of dimmer-load (bench/load/load.h): connect,
 * send a GET, read the response with the project's parser, feed a page's
 * body to the HTML scanner, time it from when it was due, and score it.
 * Keep-alive: the connection is kept for the next request unless the server
 * says close. A request on a kept connection that the server had closed
 * meanwhile (closed before any byte of the response) is sent again once on a
 * new connection, as a browser does; its latency still counts from its due
 * time.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "bench/load/load.h"

static void conn_connect(struct dm_load_conn *lc);

void
dm_load_record(struct dm_load_thread *t, const struct dm_load_result *r)
{
    struct dm_load_sec *s = &t->cur;
    s->responses++;
    s->bytes += r->bytes;
    if (r->status >= 100 && r->status < 600) {
        s->by_class[r->status / 100]++;
    }
    dm_score_counts_record(&s->score, &t->o->bounds, r->status, r->latency_us, r->kind);
    if (r->status != 0) {
        dm_hist_add(&s->hist, r->latency_us);
    }
}

void
dm_load_unanswered(struct dm_load_thread *t, uint64_t due_ns, uint64_t now_ns)
{
    uint64_t age = now_ns > due_ns ? (now_ns - due_ns) / 1000 : 0;
    t->cur.unanswered++;
    if (age > t->cur.unanswered_oldest_us) {
        t->cur.unanswered_oldest_us = age;
    }
}

void
dm_load_conn_unanswered(struct dm_load_conn *lc, uint64_t now_ns)
{
    if (lc->done != NULL && (lc->state == DM_LC_BUSY || lc->state == DM_LC_CONNECTING)) {
        dm_load_unanswered(lc->t, lc->due_ns, now_ns);
    }
}

struct dm_load_conn *
dm_load_conn_get(struct dm_load_thread *t, struct dm_load_conn **where, void *owner)
{
    struct dm_load_conn *lc = t->free_conns;
    if (lc != NULL) {
        t->free_conns = lc->next_free;
    } else {
        lc = malloc(sizeof(*lc));
        if (lc == NULL) {
            return NULL;
        }
    }
    memset(lc, 0, sizeof(*lc));
    lc->t = t;
    lc->state = DM_LC_FREE;
    lc->owner = owner;
    lc->where = where;
    if (where != NULL) {
        *where = lc;
    }
    return lc;
}

static void
put_free(struct dm_load_conn *lc)
{
    struct dm_load_thread *t = lc->t;
    lc->state = DM_LC_FREE;
    lc->next_free = t->free_conns;
    t->free_conns = lc;
}

static void
conn_closed(uv_handle_t *h)
{
    struct dm_load_conn *lc = h->data;
    if (--lc->handles > 0) {
        return;
    }
    lc->t->open--;
    put_free(lc);
}

/* Starts closing: the owner's pointer goes at once, the memory once closed. */
static void
conn_start_close(struct dm_load_conn *lc)
{
    if (lc->where != NULL && *lc->where == lc) {
        *lc->where = NULL;
    }
    lc->where = NULL;
    if (lc->state == DM_LC_CLOSING) {
        return;
    }
    if (lc->state == DM_LC_FREE) {
        put_free(lc); /* never connected: nothing is open */
        return;
    }
    lc->state = DM_LC_CLOSING;
    uv_close((uv_handle_t *)&lc->timer, conn_closed);
    uv_close((uv_handle_t *)&lc->tcp, conn_closed);
}

void
dm_load_conn_close(struct dm_load_conn *lc)
{
    lc->done = NULL;
    conn_start_close(lc);
}

/* Ends the current request with r and tells its owner. */
static void
conn_finish(struct dm_load_conn *lc, struct dm_load_result *r)
{
    dm_load_done_cb done = lc->done;
    lc->done = NULL;
    uint64_t now = dm_load_now_ns();
    r->latency_us = now > lc->due_ns ? (now - lc->due_ns) / 1000 : 0;
    r->bytes = lc->bytes;
    dm_load_record(lc->t, r);
    if (done != NULL) {
        done(lc, r);
    }
}

/* Fails the request in progress and closes the connection. */
static void
conn_fail(struct dm_load_conn *lc, enum dm_fail_kind kind)
{
    struct dm_load_result r = { .status = 0, .kind = kind };
    conn_start_close(lc);
    conn_finish(lc, &r);
}

/* A kept connection closed before answering: the same request on a new one. */
static bool
conn_retry_stale(struct dm_load_conn *lc)
{
    if (!lc->reused || lc->got_bytes || lc->retried) {
        return false;
    }
    struct dm_load_conn **where = lc->where;
    lc->where = NULL; /* the owner's pointer moves to the new connection */
    struct dm_load_conn *fresh = dm_load_conn_get(lc->t, where, lc->owner);
    if (fresh == NULL) {
        lc->where = where;
        return false;
    }
    fresh->retried = true;
    fresh->done = lc->done;
    fresh->page = lc->page;
    fresh->index = lc->index;
    fresh->req_path = lc->req_path;
    fresh->req_path_len = lc->req_path_len;
    fresh->due_ns = lc->due_ns;
    lc->done = NULL;
    conn_start_close(lc);
    conn_connect(fresh);
    return true;
}

static void
conn_timer_cb(uv_timer_t *timer)
{
    struct dm_load_conn *lc = timer->data;
    if (lc->state == DM_LC_CONNECTING) {
        conn_fail(lc, DM_FAIL_CONNECT);
    } else if (lc->state == DM_LC_BUSY) {
        conn_fail(lc, DM_FAIL_TIMEOUT);
    } else if (lc->state == DM_LC_IDLE) {
        conn_start_close(lc); /* idle longer than --keepalive */
    }
}

static void
alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct dm_load_conn *lc = h->data;
    *buf = uv_buf_init(lc->t->rbuf, sizeof(lc->t->rbuf));
}

static void
on_body(void *arg, const char *p, size_t len)
{
    struct dm_load_conn *lc = arg;
    if (lc->page != NULL) {
        dm_load_page_body(lc->page, p, len);
    }
}

/* The response ended: keep the connection for the next request, or close it. */
static void
conn_response_done(struct dm_load_conn *lc)
{
    struct dm_load_result r = { .status = lc->status, .kind = DM_FAIL_SLOW };
    uv_timer_stop(&lc->timer);
    bool keep = !lc->want_close && dm_http_parser_keep_alive(&lc->parser);
    lc->reused = true;
    lc->retried = false;
    if (keep) {
        lc->state = DM_LC_IDLE;
        dm_http_parser_next(&lc->parser);
        uint64_t ka = lc->t->o->keepalive_ms;
        if (ka > 0) {
            uv_timer_start(&lc->timer, conn_timer_cb, ka, 0);
        }
    } else {
        conn_start_close(lc);
    }
    conn_finish(lc, &r);
}

static void
read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct dm_load_conn *lc = stream->data;
    if (nread == 0 || lc->state == DM_LC_CLOSING) {
        return;
    }
    if (lc->state != DM_LC_BUSY) {
        /* A kept connection the server closed (or sent bytes nobody asked
         * for on): it is just gone, the next request opens another. */
        conn_start_close(lc);
        return;
    }
    if (nread < 0) {
        if (nread == UV_EOF && lc->got_bytes &&
            dm_http_parse_eof(&lc->parser) == DM_HTTP_MSG_DONE) {
            lc->want_close = true; /* a response that ends with the connection */
            conn_response_done(lc);
            return;
        }
        if (!conn_retry_stale(lc)) {
            conn_fail(lc, DM_FAIL_RESET);
        }
        return;
    }
    lc->got_bytes = true;
    lc->bytes += (uint64_t)nread;
    const char *p = buf->base;
    size_t left = (size_t)nread;
    /* Parsed until the input is used up (DM_HTTP_AGAIN), not while bytes are
     * left: a message without a body (Content-Length: 0, a 204 or 304, an
     * interim response) ends in a call after its head's, with no bytes. */
    for (;;) {
        size_t used = 0;
        int ev = dm_http_parse(&lc->parser, p, left, &used);
        if (ev < 0) {
            conn_fail(lc, DM_FAIL_PARSE);
            return;
        }
        p += used;
        left -= used;
        if (lc->in_head || lc->in_trailers) {
            /* A head (or trailer section) without end, or interim ones
             * without a final: malformed, not read until the timeout (curl
             * stops at 100 KiB too). */
            lc->head_bytes += (uint32_t)used;
            if (lc->head_bytes > DM_LOAD_HEAD_MAX) {
                conn_fail(lc, DM_FAIL_PARSE);
                return;
            }
        }
        if (ev == DM_HTTP_AGAIN) {
            break;
        }
        if (ev == DM_HTTP_HEAD_DONE) {
            lc->in_head = false;
            lc->status = dm_http_parser_status(&lc->parser);
        } else if (ev == DM_HTTP_TRAILERS) {
            lc->in_trailers = true;
            lc->head_bytes = 0;
        } else if (ev == DM_HTTP_MSG_DONE || ev == DM_HTTP_UPGRADE) {
            if (lc->status >= 100 && lc->status < 200 && ev == DM_HTTP_MSG_DONE) {
                if (++lc->interims > DM_LOAD_INTERIM_MAX) {
                    conn_fail(lc, DM_FAIL_PARSE);
                    return;
                }
                dm_http_parser_next(&lc->parser); /* interim: the final response follows */
                lc->in_head = true;
                lc->head_bytes = 0;
                continue;
            }
            if (left > 0 || ev == DM_HTTP_UPGRADE) {
                lc->want_close = true; /* more than we asked for: not ours to read */
            }
            conn_response_done(lc);
            return;
        }
    }
}

static bool conn_write(struct dm_load_conn *lc);

static void
write_cb(uv_write_t *w, int status)
{
    struct dm_load_conn *lc = w->data;
    lc->writing = false;
    if (lc->state != DM_LC_BUSY) {
        return;
    }
    if (status < 0 && !lc->got_bytes) {
        if (!conn_retry_stale(lc)) {
            conn_fail(lc, DM_FAIL_RESET);
        }
    } else if (lc->write_deferred) {
        lc->write_deferred = false;
        (void)conn_write(lc);
    }
}

/*
 * Writes the request. A response can be read before the write callback of
 * its request has run (libuv defers it to the next iteration, and the reply
 * may arrive first), so while the connection's write request is still out,
 * the next request waits for that callback.
 */
static bool
conn_write(struct dm_load_conn *lc)
{
    struct dm_load_thread *t = lc->t;
    if (lc->writing) {
        lc->write_deferred = true;
        return true;
    }
    uv_buf_t b[3] = {
        uv_buf_init((char *)"GET ", 4),
        uv_buf_init((char *)lc->req_path, (unsigned)lc->req_path_len),
        uv_buf_init(t->head_tail, (unsigned)t->head_tail_len),
    };
    lc->wreq.data = lc;
    if (uv_write(&lc->wreq, (uv_stream_t *)&lc->tcp, b, 3, write_cb) < 0) {
        if (!conn_retry_stale(lc)) {
            conn_fail(lc, DM_FAIL_RESET);
        }
        return false; /* lc is the owner's again (or free): not to be touched */
    }
    lc->writing = true;
    return true;
}

static void
conn_send(struct dm_load_conn *lc)
{
    struct dm_load_thread *t = lc->t;
    lc->state = DM_LC_BUSY;
    lc->got_bytes = false;
    lc->want_close = false;
    lc->bytes = 0;
    lc->status = 0;
    lc->in_head = true;
    lc->in_trailers = false;
    lc->interims = 0;
    lc->head_bytes = 0;
    dm_http_parser_init(&lc->parser, false);
    lc->parser.msg = NULL;
    lc->parser.on_body = lc->page != NULL ? on_body : NULL;
    lc->parser.body_arg = lc;
    uv_timer_stop(&lc->timer);
    if (t->o->mode == DM_LOAD_CLOSED && !lc->retried) {
        /* wrk's model: from the write, the connect it needed left out (a
         * retry on a new connection counts from its first try). */
        lc->due_ns = dm_load_now_ns();
    }
    if (!conn_write(lc)) {
        return;
    }
    if (t->o->timeout_ms > 0) {
        uv_timer_start(&lc->timer, conn_timer_cb, t->o->timeout_ms, 0);
    }
}

static void
connect_cb(uv_connect_t *req, int status)
{
    struct dm_load_conn *lc = req->data;
    if (lc->state != DM_LC_CONNECTING) {
        return; /* closed meanwhile */
    }
    uv_timer_stop(&lc->timer);
    if (status < 0) {
        conn_fail(lc, status == UV_ECONNRESET ? DM_FAIL_RESET : DM_FAIL_CONNECT);
        return;
    }
    uv_tcp_nodelay(&lc->tcp, 1);
    if (uv_read_start((uv_stream_t *)&lc->tcp, alloc_cb, read_cb) < 0) {
        conn_fail(lc, DM_FAIL_CONNECT);
        return;
    }
    conn_send(lc);
}

/*
 * Binds the socket to the next --source address, its port left to connect():
 * with IP_BIND_ADDRESS_NO_PORT the kernel picks the port for the whole
 * 4-tuple, so each source address has a port space of its own.
 */
static int
conn_bind_source(struct dm_load_conn *lc)
{
    struct dm_load_thread *t = lc->t;
    const struct dm_load_opts *o = t->o;
    const struct sockaddr_storage *src = &o->sources[t->next_source++ % o->nsources];
    uv_os_fd_t fd;
    int one = 1;
    int r = uv_fileno((uv_handle_t *)&lc->tcp, &fd);
    if (r == 0 && setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one)) < 0) {
        r = -errno;
    }
    return r < 0 ? r : uv_tcp_bind(&lc->tcp, (const struct sockaddr *)src, 0);
}

static void
conn_connect(struct dm_load_conn *lc)
{
    struct dm_load_thread *t = lc->t;
    const struct dm_load_opts *o = t->o;
    int r = o->nsources > 0 ? uv_tcp_init_ex(&t->loop, &lc->tcp, o->addr.ss_family)
                            : uv_tcp_init(&t->loop, &lc->tcp);
    if (r < 0) {
        conn_fail(lc, DM_FAIL_CONNECT); /* nothing open: back to the free list */
        return;
    }
    lc->tcp.data = lc;
    t->open++;
    if (uv_timer_init(&t->loop, &lc->timer) < 0) {
        lc->handles = 1;
        lc->state = DM_LC_CLOSING;
        if (lc->where != NULL && *lc->where == lc) {
            *lc->where = NULL;
        }
        uv_close((uv_handle_t *)&lc->tcp, conn_closed);
        struct dm_load_result res = { .status = 0, .kind = DM_FAIL_CONNECT };
        conn_finish(lc, &res);
        return;
    }
    lc->timer.data = lc;
    lc->handles = 2;
    t->cur.connects++;
    lc->state = DM_LC_CONNECTING;
    lc->creq.data = lc;
    if (o->nsources > 0 && conn_bind_source(lc) < 0) {
        conn_fail(lc, DM_FAIL_CONNECT);
        return;
    }
    int rc = uv_tcp_connect(&lc->creq, &lc->tcp, (const struct sockaddr *)&t->o->addr, connect_cb);
    if (rc < 0) {
        conn_fail(lc, DM_FAIL_CONNECT);
        return;
    }
    if (t->o->connect_timeout_ms > 0) {
        uv_timer_start(&lc->timer, conn_timer_cb, t->o->connect_timeout_ms, 0);
    }
}

void
dm_load_conn_request(struct dm_load_conn *lc, const char *path, size_t len, uint64_t due_ns,
                     struct dm_load_page *page, dm_load_done_cb done)
{
    lc->req_path = path;
    lc->req_path_len = len;
    lc->due_ns = due_ns;
    lc->page = page;
    lc->done = done;
    lc->retried = false;
    if (lc->state == DM_LC_IDLE) {
        conn_send(lc);
    } else {
        lc->reused = false;
        conn_connect(lc);
    }
}
