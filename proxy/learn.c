/*
 * The AGE glue of the data path (proxy/learn.h): expected work, the policy's
 * per-connection state, and learning pages and sizes for the catalog.
 */
#include "proxy/learn.h"

#include <stdlib.h>
#include <string.h>

#include "parsers/catalog.h"
#include "parsers/html_scan.h"
#include "proxy/conn.h"
#include "proxy/internal.h"

void
dm_learn_work_done(struct dm_req *req, int64_t n)
{
    if (req->work <= 0 || req->server == DM_NO_SERVER) {
        return;
    }
    int64_t d = n < req->work ? n : req->work;
    req->work -= d;
    struct dm_server *s = dm_runtime_server(req->c->rt, req->pool, req->server);
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
void
dm_learn_client_close(struct dm_client *c)
{
    if (c->conn_state == NULL) {
        return;
    }
    struct dm_bal_event ev = { .server = -1, .now_us = dm_mono_us(), .conn = c->conn_state };
    dm_balancer_on_close(c->rt->pools[c->conn_state_pool].bal, &ev);
    client_age_unlink(c);
    free(c->conn_state);
    c->conn_state = NULL;
}

void
dm_learn_age(struct dm_worker *w)
{
    uint64_t now = dm_mono_us();
    for (struct dm_client *c = w->aging; c != NULL; c = c->anext) {
        struct dm_bal_event ev = { .server = -1, .now_us = now, .conn = c->conn_state };
        dm_balancer_on_tick(c->rt->pools[c->conn_state_pool].bal, &ev);
    }
}
/* A request's work: its response's bytes plus the pool's request_cost, both
 * capped (a server's Content-Length may say 2^63) so that a server's sum of
 * in-flight work cannot overflow. */
static int64_t
work_of(uint64_t bytes, uint64_t cost)
{
    const uint64_t cap = UINT64_C(1) << 40; /* 1 TiB: a million of them still fit */
    bytes = bytes < cap ? bytes : cap;
    cost = cost < cap ? cost : cap;
    return (int64_t)(bytes + cost);
}

/*
 * The request has just been given its server: count its expected work there
 * and tell the policy (for age, the first request of a connection brings the
 * potential load of its page's embedded objects, from the catalog). When the
 * server cannot be reached, req_upstream_ready gives the work back and the
 * next pick reserves again (the policy's state is rebound by the retry).
 */
void
dm_learn_reserve(struct dm_req *req)
{
    struct dm_client *c = req->c;
    struct dm_rpool *p = &c->rt->pools[req->pool];
    struct dm_bal_event ev = { .server = req->server, .now_us = dm_mono_us() };
    if (!p->work) {
        dm_balancer_on_request(p->bal, &ev);
        return;
    }
    const struct dm_conf *cf = c->rt->conf;
    uint64_t cost = cf->pools[req->pool].age.request_cost;
    uint64_t dflt = cf->catalog.default_object_bytes;
    struct dm_catalog *cat = c->rt->catalog;
    int64_t work = work_of(cat != NULL ? dm_catalog_size(cat, req->key, dflt) : dflt, cost);
    req->work = req->added = work;
    atomic_fetch_add_explicit(&p->sv->s[req->server].inflight_work, work, memory_order_relaxed);
    ev.conn = c->conn_state;
    ev.object = req->key;
    ev.work = (uint64_t)work;
    if (!c->served && cat != NULL && (c->conn_state == NULL || c->conn_state_pool == req->pool)) {
        /* First request of the connection: its page's potential load (again
         * on a retry elsewhere, which moves it: the policy starts over). */
        struct dm_bal_object objs[DM_CATALOG_PAGE_MAX];
        bool any_host = false;
        size_t n = dm_catalog_lookup_url(cat, req->info.host.p, req->info.host.len,
                                         req->info.path.p, req->info.path.len, objs,
                                         DM_CATALOG_PAGE_MAX, cost, dflt, NULL, &any_host);
        c->any_host = any_host;
        dm_learn_client_close(c); /* a retry: what the failed pick held goes */
        ev.conn = NULL;
        size_t size = dm_balancer_conn_state_size(p->bal, n);
        c->conn_state = size > 0 ? calloc(1, size) : NULL;
        if (c->conn_state != NULL) {
            c->conn_state_pool = (uint16_t)req->pool;
            c->anext = c->w->aging;
            if (c->w->aging != NULL) {
                c->w->aging->aprev = c;
            }
            c->w->aging = c;
            ev.conn = c->conn_state;
            ev.first = true;
            ev.objects = objs;
            ev.nobjects = n;
        }
        dm_balancer_on_request(p->bal, &ev);
        return;
    }
    if (c->conn_state != NULL && c->conn_state_pool != req->pool) {
        ev.conn = NULL; /* another pool's request: not this state's business */
    }
    dm_balancer_on_request(p->bal, &ev);
}

/* Learning a page's embedded objects as its HTML passes (work pools). */
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

void
dm_learn_response(struct dm_req *req)
{
    struct dm_client *c = req->c;
    if (req->rinfo.has_length && req->work > 0) {
        /* The real size replaces the estimate in the server's in-flight work. */
        int64_t real =
            work_of(req->rinfo.content_length, c->rt->conf->pools[req->pool].age.request_cost);
        struct dm_server *s = dm_runtime_server(c->rt, req->pool, req->server);
        atomic_fetch_add_explicit(&s->inflight_work, real - req->work, memory_order_relaxed);
        req->work = real;
    }
    learn_start(req);
}

void
dm_learn_body(struct dm_req *req, const char *p, size_t len)
{
    dm_html_scan_feed(&req->learn->scan, p, len, learn_object, req->learn);
}

/* At the end of a response: what the catalog learns from it. */
void
dm_learn_finish(struct dm_req *req, uint64_t body_bytes)
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
