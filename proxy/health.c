/*
 * Active health checks.
 *
 * Each checked server has one struct health_check with two handles: a timer
 * and, while a check is in flight, a TCP handle. The timer does double duty:
 * while the check is idle it waits for the next check, and while a check is
 * in flight it is that check's deadline. A check runs
 *
 *   IDLE --timer--> CONNECTING --connect--> READING --status line--> CLOSING
 *
 * and any failure (connect error, reset, EOF, bad status line, deadline) also
 * goes to CLOSING. The verdict is applied when entering CLOSING; the next check
 * is scheduled only from the TCP close callback, so two checks of one server
 * never overlap, and requests libuv cancels while closing (the connect or the
 * write, with UV_ECANCELED) find the state CLOSING and are ignored. The next
 * check starts interval_ms after the previous one started, or at once when
 * the previous one took longer than that.
 *
 * Memory is one block for the checker and its checks plus one request string
 * per check, built at start; the status line is read into a fixed buffer in
 * the check. dm_health_stop closes every handle and the last close callback
 * frees the block. An extra, never started timer ("anchor") exists so that
 * done() is called from the loop even when no pool has checks.
 */
#include "proxy/health.h"

#include <arpa/inet.h>
#include <assert.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>

#include "balancers/servers.h"
#include "conf/conf.h"
#include "conf/tls.h"
#include "proxy/log.h"
#include "proxy/tls.h"

/* The longest status line accepted; a longer one is a failed check. */
#define HEALTH_LINE_MAX 512
/* The first checks of all servers are spread over at most this long. */
#define HEALTH_STAGGER_MAX_MS 1000

enum health_state {
    HEALTH_IDLE = 0,
    HEALTH_CONNECTING,
    HEALTH_READING,
    HEALTH_CLOSING,
};

struct health_check {
    struct dm_health *h;
    const struct dm_conf_pool *pool;
    const struct dm_conf_server *cs;
    struct dm_host *host; /* what the check marks down or up */
    uint64_t interval_ms;
    uint64_t timeout_ms;
    unsigned rise;
    unsigned fall;

    uv_timer_t timer; /* next check while idle, deadline while in flight */
    uv_tcp_t tcp;     /* open only while a check is in flight or closing */
    uv_connect_t connect;
    uv_write_t write;
    char *req; /* the GET request, built once */
    size_t req_len;
    char line[HEALTH_LINE_MAX]; /* the response so far, up to the status line */
    size_t line_len;
    bool skipping;    /* in an interim (1xx) head, to its end */
    unsigned interim; /* interim heads skipped in this check */
    SSL *ssl;         /* a TLS pool's check: OpenSSL over memory BIOs, or NULL */
    bool sent;        /* TLS: the request is written (after the handshake) */

    enum health_state state;
    unsigned gen; /* the host's down_gen at the check's start: its verdict counts if unchanged */
};

struct dm_health {
    uv_loop_t *loop;
    uv_timer_t anchor;
    size_t nhandles; /* initialized and not yet closed */
    bool stopping;
    bool retiring; /* stopping, and the checks in flight go on to their verdict */
    void (*done)(void *arg);
    void *done_arg;
    /* Checks not run for this process's limits: logged one a second at most,
     * the others counted meanwhile (2,000 at once were 2,000 lines a second). */
    uint64_t local_logged_ms;
    unsigned long local_quiet;
    size_t nchecks;
    struct health_check checks[];
};

static void health_timer_cb(uv_timer_t *t);

/*
 * Checks the start of a response. Returns 1 with *status set once a whole
 * status line "HTTP/1.x DDD reason\r\n" is in, 0 when it may still become one,
 * -1 as soon as it cannot (RFC 9112 section 4).
 */
static int
health_status_line_parse(const char *p, size_t len, int *status)
{
    static const char prefix[] = "HTTP/1.";
    for (size_t i = 0; i < len && i < sizeof(prefix) - 1; i++) {
        if (p[i] != prefix[i]) {
            return -1;
        }
    }
    if (len < 8) {
        return 0;
    }
    if (p[7] != '0' && p[7] != '1') {
        return -1;
    }
    if (len < 9) {
        return 0;
    }
    if (p[8] != ' ') {
        return -1;
    }
    int code = 0;
    for (size_t i = 9; i < 12; i++) {
        if (i >= len) {
            return 0;
        }
        if (p[i] < '0' || p[i] > '9') {
            return -1;
        }
        code = code * 10 + (p[i] - '0');
    }
    if (len < 13) {
        return 0;
    }
    /* An empty reason phrase may also lose its space. */
    if (p[12] != ' ' && p[12] != '\r') {
        return -1;
    }
    for (size_t i = 12; i < len; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\r') {
            if (i + 1 >= len) {
                return 0;
            }
            if (p[i + 1] != '\n') {
                return -1;
            }
            *status = code;
            return 1;
        }
        if (ch != '\t' && (ch < 0x20 || ch == 0x7f)) {
            return -1;
        }
    }
    return 0;
}

static const char *
health_name(const char *s)
{
    return s != NULL ? s : "?";
}

/* Counts one check's result and marks the server down or up when a run is long enough. */
static void
health_verdict(struct health_check *c, bool ok, const char *reason)
{
    struct dm_host_check *run = &c->host->check;
    if (atomic_load(&c->host->down_gen) != c->gen) {
        /* The power manager marked it down since this check began (a wake
         * while the machine, still awake, answered): no verdict. */
        dm_log_debug("server %s/%s: a health check begun before its power change: ignored",
                     health_name(c->pool->name), health_name(c->cs->name));
        run->oks = 0;
        return;
    }
    if (!run->checked) {
        /* A retired checker's last check of a host the configuration now
         * leaves unchecked, and so marked up: it stays up. */
        return;
    }
    bool down = atomic_load(&c->host->down);
    if (ok) {
        atomic_fetch_add(&c->host->health_oks, 1);
        run->fails = 0;
        if (down && ++run->oks >= c->rise) {
            atomic_store(&c->host->down, false);
            dm_log_info("server %s/%s is UP (health check: %u successes)",
                        health_name(c->pool->name), health_name(c->cs->name), run->oks);
            run->oks = 0;
        }
        return;
    }
    run->oks = 0;
    if (run->fails < UINT_MAX) {
        run->fails++;
    }
    dm_log_debug("server %s/%s: health check failed: %s", health_name(c->pool->name),
                 health_name(c->cs->name), reason);
    if (!down && run->fails >= c->fall) {
        atomic_store(&c->host->down, true);
        dm_log_warn("server %s/%s is DOWN (health check: %s, %u failures)",
                    health_name(c->pool->name), health_name(c->cs->name), reason, run->fails);
    }
}

static void
health_free_if_closed(struct dm_health *h)
{
    if (!h->stopping || h->nhandles > 0) {
        return;
    }
    void (*done)(void *arg) = h->done;
    void *arg = h->done_arg;
    for (size_t i = 0; i < h->nchecks; i++) {
        free(h->checks[i].req);
        h->checks[i].req = NULL;
    }
    free(h);
    if (done != NULL) {
        done(arg);
    }
}

static void
health_handle_close_cb(uv_handle_t *handle)
{
    struct dm_health *h = handle->data;
    assert(h->nhandles > 0);
    h->nhandles--;
    health_free_if_closed(h);
}

/* The next check: an interval after the last one began, or at once when that is past. */
static void
health_schedule(struct health_check *c)
{
    struct dm_host_check *run = &c->host->check;
    uint64_t now = uv_now(c->h->loop);
    uint64_t due = run->started_ms + c->interval_ms;
    run->due_ms = due > now ? due : now;
    uv_timer_start(&c->timer, health_timer_cb, run->due_ms - now, 0);
}

static void
health_tcp_close_cb(uv_handle_t *handle)
{
    struct health_check *c = handle->data;
    struct dm_health *h = c->h;
    c->state = HEALTH_IDLE;
    c->host->check.until_ms = 0;
    assert(h->nhandles > 0);
    h->nhandles--;
    if (h->retiring) {
        /* Its verdict is in: the timer, left open as its deadline, goes too. */
        c->timer.data = h;
        uv_close((uv_handle_t *)&c->timer, health_handle_close_cb);
    }
    if (h->stopping) {
        health_free_if_closed(h);
        return;
    }
    health_schedule(c);
}

/* Ends the check in flight with a verdict and closes its connection. */
static void
health_finish(struct health_check *c, bool ok, const char *reason)
{
    assert(c->state == HEALTH_CONNECTING || c->state == HEALTH_READING);
    c->state = HEALTH_CLOSING;
    uv_timer_stop(&c->timer);
    if (reason != NULL || ok) {
        health_verdict(c, ok, reason);
    }
    SSL_free(c->ssl);
    c->ssl = NULL;
    uv_close((uv_handle_t *)&c->tcp, health_tcp_close_cb);
}

/* Interim responses a check passes over (103 Early Hints, say) before its final one. */
#define HEALTH_INTERIM_MAX 8

/*
 * The response bytes so far in c->line: a verdict once the final status line
 * is whole. An interim (1xx) head is passed over to its end (kept to its last
 * three bytes while the end has not come, so that it may straddle reads).
 */
static void
health_got(struct health_check *c)
{
    for (;;) {
        if (c->skipping) {
            const char *end = memmem(c->line, c->line_len, "\r\n\r\n", 4);
            if (end == NULL) {
                size_t keep = c->line_len < 3 ? c->line_len : 3;
                memmove(c->line, c->line + c->line_len - keep, keep);
                c->line_len = keep;
                return;
            }
            size_t used = (size_t)(end + 4 - c->line);
            memmove(c->line, c->line + used, c->line_len - used);
            c->line_len -= used;
            c->skipping = false;
        }
        int status = 0;
        int rc = health_status_line_parse(c->line, c->line_len, &status);
        if (rc < 0) {
            health_finish(c, false, "malformed status line");
        } else if (rc > 0 && status >= 100 && status < 200 && status != 101) {
            if (++c->interim > HEALTH_INTERIM_MAX) {
                health_finish(c, false, "more than 8 interim (1xx) responses");
                return;
            }
            c->skipping = true;
            continue;
        } else if (rc > 0) {
            char reason[32];
            snprintf(reason, sizeof(reason), "HTTP status %d", status);
            health_finish(c, status >= 200 && status < 400, reason);
        } else if (c->line_len == sizeof(c->line)) {
            health_finish(c, false, "status line too long");
        }
        return;
    }
}

/* ---- TLS (a pool's tls: block): a check at the rate of its interval, so memory BIOs ---- */

struct health_tls_write {
    uv_write_t req;
    char data[];
};

static void
health_tls_write_cb(uv_write_t *req, int status)
{
    struct health_check *c = req->data;
    free(req); /* the request is the start of its block */
    if (status < 0 && c != NULL && c->state == HEALTH_READING) {
        health_finish(c, false, uv_strerror(status));
    }
}

/* Writes what OpenSSL left in the write BIO; false after finishing the check. */
static bool
health_tls_flush(struct health_check *c)
{
    BIO *wb = SSL_get_wbio(c->ssl);
    size_t n = BIO_ctrl_pending(wb);
    if (n == 0) {
        return true;
    }
    struct health_tls_write *w = malloc(sizeof(*w) + n);
    if (w == NULL) {
        health_finish(c, false, "out of memory");
        return false;
    }
    int got = BIO_read(wb, w->data, (int)n);
    w->req.data = c;
    uv_buf_t b = uv_buf_init(w->data, got > 0 ? (unsigned)got : 0);
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, health_tls_write_cb);
    if (rc < 0) {
        free(w);
        health_finish(c, false, uv_strerror(rc));
        return false;
    }
    return true;
}

/* Drives the handshake, writes the request once it is done, reads the status line. */
static void
health_tls_step(struct health_check *c)
{
    char why[160], msg[200];
    int e = SSL_ERROR_NONE;
    if (!c->sent) {
        int r = SSL_write(c->ssl, c->req, (int)c->req_len);
        if (r > 0) {
            c->sent = true;
        } else {
            e = SSL_get_error(c->ssl, r);
        }
    }
    while (e == SSL_ERROR_NONE && c->sent && c->line_len < sizeof(c->line)) {
        int n = SSL_read(c->ssl, c->line + c->line_len, (int)(sizeof(c->line) - c->line_len));
        if (n <= 0) {
            e = SSL_get_error(c->ssl, n);
            break;
        }
        c->line_len += (size_t)n;
        health_got(c);
        if (c->state != HEALTH_READING) {
            return;
        }
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        health_finish(c, false, "connection closed before the status line");
        return;
    }
    if (e != SSL_ERROR_NONE && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
        snprintf(msg, sizeof(msg), "TLS: %s", dm_tls_reason(c->ssl, e, why, sizeof(why)));
        (void)health_tls_flush(c); /* the alert */
        if (c->state == HEALTH_READING) {
            health_finish(c, false, msg);
        }
        return;
    }
    (void)health_tls_flush(c);
}

/* A new TLS connection for check c with its pool's settings; false after finishing it. */
static bool
health_tls_start(struct health_check *c)
{
    const struct dm_conf_tls_client *t = c->pool->tls;
    c->ssl = SSL_new(t->ctx);
    BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
    if (c->ssl == NULL || rb == NULL || wb == NULL) {
        BIO_free(rb);
        BIO_free(wb);
        health_finish(c, false, "out of memory");
        return false;
    }
    SSL_set_bio(c->ssl, rb, wb);
    SSL_set_connect_state(c->ssl);
    dm_tls_set_target(c->ssl, t, c->cs->addr.text, (const struct sockaddr *)&c->cs->addr.sa);
    c->sent = false;
    return true;
}

/* Ciphertext for a TLS check. */
static char health_tls_in[16384];

static void
health_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct health_check *c = handle->data;
    (void)suggested;
    if (c->ssl != NULL) {
        /* One loop thread: fed to the read BIO before the next read. */
        *buf = uv_buf_init(health_tls_in, sizeof(health_tls_in));
        return;
    }
    /* health_read_cb ends the check when the buffer is full, so there is room here. */
    *buf = uv_buf_init(c->line + c->line_len, (unsigned)(sizeof(c->line) - c->line_len));
}

static void
health_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct health_check *c = stream->data;
    if (c->state != HEALTH_READING || nread == 0) {
        return;
    }
    if (nread == UV_EOF) {
        health_finish(c, false, "connection closed before the status line");
        return;
    }
    if (nread < 0) {
        health_finish(c, false, uv_strerror((int)nread));
        return;
    }
    if (c->ssl != NULL) {
        if (BIO_write(SSL_get_rbio(c->ssl), buf->base, (int)nread) != (int)nread) {
            health_finish(c, false, "out of memory");
            return;
        }
        health_tls_step(c);
        return;
    }
    c->line_len += (size_t)nread;
    health_got(c);
}

static void
health_write_cb(uv_write_t *req, int status)
{
    struct health_check *c = req->data;
    if (status < 0 && c->state == HEALTH_READING) {
        health_finish(c, false, uv_strerror(status));
    }
}

static void
health_connect_cb(uv_connect_t *req, int status)
{
    struct health_check *c = req->data;
    if (c->state != HEALTH_CONNECTING) {
        return; /* closed meanwhile: timed out or stopped */
    }
    if (status < 0) {
        health_finish(c, false, uv_strerror(status));
        return;
    }
    c->state = HEALTH_READING;
    /* Read at once: a server may answer (or refuse) before the request is all written. */
    if (c->pool->tls != NULL && !health_tls_start(c)) {
        return;
    }
    int rc = uv_read_start((uv_stream_t *)&c->tcp, health_alloc_cb, health_read_cb);
    if (rc < 0) {
        health_finish(c, false, uv_strerror(rc));
        return;
    }
    if (c->ssl != NULL) {
        health_tls_step(c); /* the ClientHello */
        return;
    }
    uv_buf_t b = uv_buf_init(c->req, (unsigned)c->req_len);
    rc = uv_write(&c->write, (uv_stream_t *)&c->tcp, &b, 1, health_write_cb);
    if (rc < 0) {
        health_finish(c, false, uv_strerror(rc));
    }
}

bool
dm_local_error(int rc)
{
    return rc == UV_EMFILE || rc == UV_ENFILE || rc == UV_ENOMEM || rc == UV_ENOBUFS ||
           rc == UV_EADDRNOTAVAIL;
}

/* A check that could not begin here: it counts neither way, and is tried again at the next
 * interval. */
static void
health_local_failure(struct health_check *c, int rc)
{
    struct dm_health *h = c->h;
    uint64_t now = uv_now(h->loop);
    if (h->local_logged_ms != 0 && now < h->local_logged_ms + 1000) {
        h->local_quiet++;
        return;
    }
    if (h->local_quiet > 0) {
        dm_log_warn("%lu more health checks not run since (this process's limits)", h->local_quiet);
        h->local_quiet = 0;
    }
    h->local_logged_ms = now > 0 ? now : 1;
    dm_log_warn("server %s/%s: health check not run: %s (this process's limit; not counted)",
                health_name(c->pool->name), health_name(c->cs->name), uv_strerror(rc));
}

static void
health_begin(struct health_check *c)
{
    struct dm_health *h = c->h;
    c->host->check.started_ms = uv_now(h->loop);
    c->gen = atomic_load(&c->host->down_gen);
    c->line_len = 0;
    c->skipping = false;
    c->interim = 0;
    int rc = uv_tcp_init(h->loop, &c->tcp);
    if (rc < 0) {
        health_local_failure(c, rc);
        health_schedule(c);
        return;
    }
    h->nhandles++;
    c->tcp.data = c;
    c->connect.data = c;
    c->write.data = c;
    c->state = HEALTH_CONNECTING;
    c->host->check.until_ms = c->host->check.started_ms + c->timeout_ms;
    uv_timer_start(&c->timer, health_timer_cb, c->timeout_ms, 0);
    rc = uv_tcp_connect(&c->connect, &c->tcp, (const struct sockaddr *)&c->cs->addr.sa,
                        health_connect_cb);
    if (rc < 0 && dm_local_error(rc)) {
        health_local_failure(c, rc);
        health_finish(c, false, NULL); /* no verdict */
    } else if (rc < 0) {
        health_finish(c, false, uv_strerror(rc));
    }
}

static void
health_timer_cb(uv_timer_t *t)
{
    struct health_check *c = t->data;
    struct dm_host_check *run = &c->host->check;
    uint64_t now = uv_now(c->h->loop);
    if (c->state == HEALTH_IDLE && run->until_ms != 0) {
        /* The check of the checker a reload retired is still out: this one
         * waits for its verdict (two checks of a server never overlap), and
         * then for its interval. */
        uint64_t due = run->started_ms + c->interval_ms;
        due = due > run->until_ms ? due : run->until_ms;
        run->due_ms = due; /* what a later reload's checker goes on from */
        uv_timer_start(&c->timer, health_timer_cb, due > now ? due - now : 1, 0);
    } else if (c->state == HEALTH_IDLE &&
               atomic_load_explicit(&c->host->power, memory_order_relaxed) == DM_POWER_ASLEEP) {
        /* A sleeping machine is not checked (it would not answer); its
         * manager marked it down, so it rises again once woken. */
        run->oks = 0;
        run->fails = 0;
        run->started_ms = now;
        health_schedule(c);
    } else if (c->state == HEALTH_IDLE) {
        health_begin(c);
    } else if (c->state == HEALTH_CONNECTING || c->state == HEALTH_READING) {
        char reason[48];
        snprintf(reason, sizeof(reason), "timed out after %llu ms",
                 (unsigned long long)c->timeout_ms);
        health_finish(c, false, reason);
    }
}

/*
 * Builds the check request into a new string. The Host is the address as
 * written in the config, or the numeric address when there is no text.
 */
static char *
health_request_build(const struct dm_conf_pool *pool, const struct dm_conf_server *cs, size_t *len)
{
    char host[INET6_ADDRSTRLEN + 8];
    const char *host_text = cs->addr.text;
    if (host_text == NULL) {
        char ip[INET6_ADDRSTRLEN] = "";
        if (cs->addr.sa.ss_family == AF_INET6) {
            const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&cs->addr.sa;
            uv_ip6_name(sin6, ip, sizeof(ip));
            snprintf(host, sizeof(host), "[%s]:%u", ip, (unsigned)ntohs(sin6->sin6_port));
        } else {
            const struct sockaddr_in *sin = (const struct sockaddr_in *)&cs->addr.sa;
            uv_ip4_name(sin, ip, sizeof(ip));
            snprintf(host, sizeof(host), "%s:%u", ip, (unsigned)ntohs(sin->sin_port));
        }
        host_text = host;
    }
    const char *path = pool->health.path != NULL ? pool->health.path : "/healthz";
    static const char fmt[] = "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n"
                              "User-Agent: dimmer-health\r\n\r\n";
    int n = snprintf(NULL, 0, fmt, path, host_text);
    if (n < 0) {
        return NULL;
    }
    char *req = malloc((size_t)n + 1);
    if (req == NULL) {
        return NULL;
    }
    snprintf(req, (size_t)n + 1, fmt, path, host_text);
    *len = (size_t)n;
    return req;
}

struct dm_health *
dm_health_start(uv_loop_t *loop, const struct dm_conf *conf, struct dm_servers *const *servers)
{
    size_t n = 0;
    for (size_t p = 0; p < conf->npools; p++) {
        if (conf->pools[p].health.enabled) {
            assert(servers[p]->n == conf->pools[p].nservers);
            n += conf->pools[p].nservers;
        }
    }
    struct dm_health *h = calloc(1, sizeof(*h) + n * sizeof(h->checks[0]));
    if (h == NULL) {
        return NULL;
    }
    h->loop = loop;
    h->nchecks = n;

    /* Everything that can fail comes before the first handle is initialized.
     * check.checked marks the hosts given a check so far (one each, in
     * linear time however many servers). */
    for (size_t p = 0; p < conf->npools; p++) {
        for (size_t i = 0; i < servers[p]->n; i++) {
            servers[p]->s[i].host->check.checked = false;
        }
    }
    size_t k = 0;
    for (size_t p = 0; p < conf->npools; p++) {
        const struct dm_conf_pool *pool = &conf->pools[p];
        if (!pool->health.enabled) {
            continue;
        }
        for (size_t i = 0; i < pool->nservers; i++) {
            struct dm_host *host = servers[p]->s[i].host;
            if (host->check.checked) {
                continue; /* one check per host: the first pool naming it checks it */
            }
            host->check.checked = true;
            struct health_check *c = &h->checks[k++];
            c->h = h;
            c->pool = pool;
            c->cs = &pool->servers[i];
            c->host = host;
            c->interval_ms = pool->health.interval_ms > 0 ? pool->health.interval_ms : 1;
            c->timeout_ms = pool->health.timeout_ms > 0 ? pool->health.timeout_ms : 1;
            c->rise = pool->health.rise > 0 ? pool->health.rise : 1;
            c->fall = pool->health.fall > 0 ? pool->health.fall : 1;
            c->req = health_request_build(pool, c->cs, &c->req_len);
            if (c->req == NULL) {
                goto free_requests;
            }
        }
    }

    n = k;
    h->nchecks = n;
    /* A host no check looks at any more would stay down for good. */
    for (size_t p = 0; p < conf->npools; p++) {
        for (size_t i = 0; i < servers[p]->n; i++) {
            struct dm_host *host = servers[p]->s[i].host;
            if (!host->check.checked && atomic_exchange(&host->down, false)) {
                dm_log_info("server %s/%s is UP (no longer health-checked)",
                            health_name(conf->pools[p].name),
                            health_name(conf->pools[p].servers[i].name));
            }
        }
    }

    if (uv_timer_init(loop, &h->anchor) < 0) {
        goto free_requests;
    }
    h->anchor.data = h;
    h->nhandles++;
    for (k = 0; k < n; k++) {
        struct health_check *c = &h->checks[k];
        if (uv_timer_init(loop, &c->timer) < 0) {
            goto close_timers;
        }
        c->timer.data = c;
        h->nhandles++;
        /* A host checked until now (the checker before a reload) goes on
         * when its next check was due, with its run of successes or
         * failures. Else the first checks come soon, spread so that servers
         * are not all hit at once, and a run from a time the host was not
         * checked is over. */
        struct dm_host_check *run = &c->host->check;
        uint64_t now = uv_now(loop);
        uint64_t first;
        if (run->due_ms != 0 && now < run->due_ms + c->interval_ms + c->timeout_ms) {
            /* Due by the old interval, or by this one when it is shorter. */
            uint64_t due = run->due_ms;
            if (run->started_ms != 0 && run->started_ms + c->interval_ms < due) {
                due = run->started_ms + c->interval_ms;
            }
            first = due > now ? due - now : 1;
        } else {
            uint64_t spread =
                c->interval_ms < HEALTH_STAGGER_MAX_MS ? c->interval_ms : HEALTH_STAGGER_MAX_MS;
            first = 1 + k * spread / n;
            run->oks = 0;
            run->fails = 0;
            run->due_ms = now + first;
        }
        uv_timer_start(&c->timer, health_timer_cb, first, 0);
    }
    return h;

close_timers:
    /* The checks from k on have no handle: their requests go now, and the
     * handles made so far close, the last close callback freeing h. */
    for (size_t i = k; i < n; i++) {
        free(h->checks[i].req);
        h->checks[i].req = NULL;
    }
    h->nchecks = k;
    dm_health_stop(h, NULL, NULL);
    return NULL;
free_requests:
    for (size_t i = 0; i < n; i++) {
        free(h->checks[i].req);
    }
    free(h);
    return NULL;
}

static void
health_stop(struct dm_health *h, bool retire, void (*done)(void *arg), void *arg)
{
    if (h == NULL) {
        return;
    }
    assert(!h->stopping);
    h->stopping = true;
    h->retiring = retire;
    h->done = done;
    h->done_arg = arg;
    for (size_t k = 0; k < h->nchecks; k++) {
        struct health_check *c = &h->checks[k];
        if (retire && c->state != HEALTH_IDLE) {
            continue; /* its tcp close callback closes its timer, its deadline until then */
        }
        /* The tcp close callback only counts down while stopping, so c->timer may go first. */
        c->timer.data = h;
        uv_close((uv_handle_t *)&c->timer, health_handle_close_cb);
        if (c->state == HEALTH_CONNECTING || c->state == HEALTH_READING) {
            c->state = HEALTH_CLOSING;
            SSL_free(c->ssl);
            c->ssl = NULL;
            uv_close((uv_handle_t *)&c->tcp, health_tcp_close_cb);
        }
    }
    uv_close((uv_handle_t *)&h->anchor, health_handle_close_cb);
}

void
dm_health_stop(struct dm_health *h, void (*done)(void *arg), void *arg)
{
    health_stop(h, false, done, arg);
}

void
dm_health_retire(struct dm_health *h, void (*done)(void *arg), void *arg)
{
    health_stop(h, true, done, arg);
}

void
dm_health_cancel(struct dm_health *h)
{
    if (h == NULL || !h->retiring) {
        return;
    }
    for (size_t k = 0; k < h->nchecks; k++) {
        struct health_check *c = &h->checks[k];
        if (c->state == HEALTH_CONNECTING || c->state == HEALTH_READING) {
            c->state = HEALTH_CLOSING; /* no verdict; its close callback closes its timer */
            SSL_free(c->ssl);
            c->ssl = NULL;
            uv_close((uv_handle_t *)&c->tcp, health_tcp_close_cb);
        }
    }
}
