/*
 * The admin listener, on the control thread's loop: GET /stats answers the
 * live server tables as JSON, GET / a short index. One request per connection.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parsers/catalog.h"
#include "proxy/internal.h"
#include "proxy/log.h"
#include "proxy/worker.h"

/* Close callback for a handle that was malloc'ed on its own. */
static void
free_handle(uv_handle_t *h)
{
    free(h);
}

#define ADMIN_REQ_MAX 8192

struct dm_admin {
    uv_tcp_t tcp;
};

struct admin_conn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    size_t len;
    char *out;
    bool answered;
    char req[ADMIN_REQ_MAX];
};

struct sbuf {
    char *p;
    size_t len, cap;
};

static void __attribute__((format(printf, 2, 3))) sb_printf(struct sbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static struct dm_catalog *admin_catalog;

void
dm_admin_set_catalog(struct dm_catalog *c)
{
    admin_catalog = c;
}

static const char *
power_name(int p)
{
    switch (p) {
    case DM_POWER_AWAKE:
        return "awake";
    case DM_POWER_ASLEEP:
        return "asleep";
    case DM_POWER_BOOTING:
        return "booting";
    case DM_POWER_DRAINING:
        return "draining";
    default:
        return "?";
    }
}

/*
 * JSON of every pool and server of the current runtime. Per server: its
 * host's state (host: the address as its host first saw it written; state,
 * power, down_for_ms, fails, server_connections, bound_clients: shared by
 * every pool naming the address), then the pool's own load counters.
 */
static void
stats_json(struct sbuf *b)
{
    struct dm_runtime *rt = dm_runtime_current();
    sb_printf(b, "{\"generation\":%llu,\"pools\":[",
              (unsigned long long)(rt != NULL ? rt->generation : 0));
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
    for (size_t i = 0; rt != NULL && i < rt->npools; i++) {
        struct dm_rpool *p = &rt->pools[i];
        sb_printf(b, "%s{\"name\":\"%s\",\"balance\":\"%s\",\"servers\":[", i ? "," : "",
                  p->cf->name, p->cf->balance);
        for (size_t j = 0; j < p->sv->n; j++) {
            struct dm_server *s = &p->sv->s[j];
            const struct dm_host *h = s->host;
            const char *state = "up";
            if (atomic_load(&h->down)) {
                state = "down";
            } else if (atomic_load(&h->down_until_us) > now) {
                state = "failing";
            }
            uint64_t until = atomic_load(&h->down_until_us);
            sb_printf(b,
                      "%s{\"name\":\"%s\",\"address\":\"%s\",\"host\":\"%s\",\"state\":\"%s\","
                      "\"power\":\"%s\",\"down_for_ms\":%llu,\"fails\":%u,"
                      "\"server_connections\":%llu,\"bound_clients\":%llu,\"weight\":%u,"
                      "\"capacity\":%u,\"connections\":%llu,\"inflight\":%llu,\"picks\":%llu,"
                      "\"requests\":%llu,\"failures\":%llu,\"inflight_work\":%lld,"
                      "\"potential\":%lld}",
                      j ? "," : "", s->name, p->cf->servers[j].addr.text,
                      h->text != NULL ? h->text : "", state, power_name(atomic_load(&h->power)),
                      (unsigned long long)(until > now ? (until - now) / 1000 : 0),
                      atomic_load(&h->fails), (unsigned long long)dm_counter_get(&h->connections),
                      (unsigned long long)dm_counter_get(&h->bound), s->weight, s->capacity,
                      (unsigned long long)dm_counter_get(&s->conns),
                      (unsigned long long)dm_counter_get(&s->inflight),
                      (unsigned long long)dm_counter_get(&s->picks),
                      (unsigned long long)dm_counter_get(&s->requests),
                      (unsigned long long)dm_counter_get(&s->failures),
                      (long long)atomic_load_explicit(&s->inflight_work, memory_order_relaxed),
                      (long long)atomic_load_explicit(&s->potential, memory_order_relaxed));
        }
        sb_printf(b, "]}");
    }
    sb_printf(b, "]");
    if (admin_catalog != NULL) {
        struct dm_catalog_stats cs;
        dm_catalog_stats(admin_catalog, &cs);
        sb_printf(b,
                  ",\"catalog\":{\"pages\":%llu,\"objects\":%llu,\"bytes\":%llu,\"cap\":%llu,"
                  "\"hits\":%llu,\"misses\":%llu,\"evictions\":%llu}",
                  (unsigned long long)cs.pages, (unsigned long long)cs.objects,
                  (unsigned long long)cs.bytes, (unsigned long long)cs.cap,
                  (unsigned long long)cs.hits, (unsigned long long)cs.misses,
                  (unsigned long long)cs.evictions);
    }
    sb_printf(b, "}\n");
    dm_runtime_unref(rt);
}

static void
conn_closed(uv_handle_t *h)
{
    struct admin_conn *ac = h->data;
    free(ac->out);
    free(ac);
}

static void
written(uv_write_t *w, int status)
{
    (void)status;
    struct admin_conn *ac = w->data;
    uv_close((uv_handle_t *)&ac->tcp, conn_closed);
}

static void
alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct admin_conn *ac = h->data;
    *buf = uv_buf_init(ac->req + ac->len, (unsigned)(ADMIN_REQ_MAX - 1 - ac->len));
}

static void
answer(struct admin_conn *ac)
{
    ac->answered = true;
    uv_read_stop((uv_stream_t *)&ac->tcp);
    ac->req[ac->len] = 0;
    struct sbuf body = { 0 };
    const char *status = "200 OK";
    const char *type = "application/json";
    if (strncmp(ac->req, "GET /stats ", 11) == 0 || strncmp(ac->req, "GET /stats?", 11) == 0) {
        stats_json(&body);
    } else if (strncmp(ac->req, "GET / ", 6) == 0) {
        type = "text/plain";
        sb_printf(&body, "dimmer admin\n  GET /stats  server tables as JSON\n");
    } else {
        status = "404 Not Found";
        type = "text/plain";
        sb_printf(&body, "not found\n");
    }
    struct sbuf out = { 0 };
    sb_printf(&out,
              "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
              "Cache-Control: no-store\r\n\r\n%.*s",
              status, type, body.len, (int)body.len, body.p ? body.p : "");
    free(body.p);
    ac->out = out.p;
    uv_buf_t b = uv_buf_init(out.p, (unsigned)out.len);
    ac->wreq.data = ac;
    if (out.p == NULL || uv_write(&ac->wreq, (uv_stream_t *)&ac->tcp, &b, 1, written) < 0) {
        uv_close((uv_handle_t *)&ac->tcp, conn_closed);
    }
}

static void
read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    struct admin_conn *ac = s->data;
    if (ac->answered) {
        return;
    }
    if (nread < 0) {
        uv_close((uv_handle_t *)&ac->tcp, conn_closed);
        return;
    }
    ac->len += (size_t)nread;
    ac->req[ac->len] = 0;
    if (strstr(ac->req, "\r\n\r\n") != NULL || strstr(ac->req, "\n\n") != NULL) {
        answer(ac);
    } else if (ac->len >= ADMIN_REQ_MAX - 1) {
        uv_close((uv_handle_t *)&ac->tcp, conn_closed);
    }
}

static void
on_conn(uv_stream_t *server, int status)
{
    if (status < 0) {
        return;
    }
    struct admin_conn *ac = calloc(1, sizeof(*ac));
    if (ac == NULL) {
        return;
    }
    if (uv_tcp_init(server->loop, &ac->tcp) < 0) {
        free(ac); /* never initialized: no close */
        return;
    }
    ac->tcp.data = ac;
    if (uv_accept(server, (uv_stream_t *)&ac->tcp) < 0 ||
        uv_read_start((uv_stream_t *)&ac->tcp, alloc_cb, read_cb) < 0) {
        uv_close((uv_handle_t *)&ac->tcp, conn_closed);
    }
}

struct dm_admin *
dm_admin_start(uv_loop_t *loop, const struct dm_conf_addr *addr, struct sockaddr_storage *bound,
               int *err)
{
    int r = UV_ENOMEM;
    struct dm_admin *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        goto fail;
    }
    int fd = dm_listen_socket((const struct sockaddr *)&addr->sa, 128, bound);
    if (fd < 0) {
        r = fd;
        goto free_admin;
    }
    r = uv_tcp_init(loop, &a->tcp);
    if (r < 0) {
        goto close_fd;
    }
    a->tcp.data = a;
    r = uv_tcp_open(&a->tcp, fd);
    if (r < 0) {
        goto close_tcp_and_fd;
    }
    r = uv_listen((uv_stream_t *)&a->tcp, 128, on_conn);
    if (r < 0) {
        goto close_tcp; /* the handle has the socket */
    }
    char text[DM_ADDR_TEXT];
    dm_log_info("admin listening on %s",
                dm_addr_text((const struct sockaddr *)bound, text, sizeof(text)));
    return a;

close_tcp_and_fd:
    close(fd);
close_tcp:
    uv_close((uv_handle_t *)&a->tcp, free_handle); /* frees a */
    goto fail;
close_fd:
    close(fd);
free_admin:
    free(a);
fail:
    *err = r;
    return NULL;
}

void
dm_admin_stop(struct dm_admin *a)
{
    if (a != NULL) {
        uv_close((uv_handle_t *)&a->tcp, free_handle);
    }
}
