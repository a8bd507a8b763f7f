/*
 * A request between the client and the server connection (proxy/request.h).
 */
#include "proxy/request.h"

#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/hash.h"
#include "proxy/accesslog.h"
#include "proxy/buf.h"
#include "proxy/client.h"
#include "proxy/conn.h"
#include "proxy/health.h"
#include "proxy/learn.h"
#include "proxy/log.h"
#include "proxy/session.h"
#include "proxy/tls.h"
#include "proxy/upstream.h"
#include "proxy/worker.h"

#define DM_FREE_REQS_MAX 64

struct dm_req *
dm_req_get(struct dm_client *c)
{
    struct dm_runtime *rt = c->rt;
    struct dm_worker *w = c->w;
    uint32_t max_fields = rt->conf->limits.header_count;
    uint32_t tried_bytes = rt->tried_bytes > 0 ? rt->tried_bytes : 1;
    /* tried, then as many bytes for the servers a pick passes over as full. */
    size_t size = sizeof(struct dm_req) + 2 * (size_t)max_fields * sizeof(struct dm_http_field) +
                  2 * (size_t)tried_bytes;
    struct dm_req *req;
    if (w->free_reqs != NULL && w->free_reqs->size == size) {
        struct dm_req_free *f = w->free_reqs;
        w->free_reqs = f->next;
        w->nfree_reqs--;
        w->low_reqs = w->nfree_reqs < w->low_reqs ? w->nfree_reqs : w->low_reqs;
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
    memset(req->tried, 0, 2 * (size_t)tried_bytes);
    req->server = DM_NO_SERVER;
    req->rate = -1;
    req->start_us = uv_hrtime() / 1000;
    c->w->busy++;
    if (c->w->busy > c->w->busy_peak) {
        c->w->busy_peak = c->w->busy;
    }
    return req;
}

void
dm_req_free(struct dm_worker *w, struct dm_req *req)
{
    /* A session ends here, its tunnel closed or its request failed. */
    dm_placer_leave(req->placer, req->ticket);
    req->ticket = NULL;
    dm_buf_unref(w, req->head_buf);
    dm_buf_unref(w, req->out_head);
    dm_buf_unref(w, req->resp_head);
    dm_buf_unref(w, req->trailers);
    dm_tq_remove(w, &req->bound);
    free(req->learn);
    req->learn = NULL;
    if (req->tried_own) {
        free(req->tried);
        req->tried = NULL;
        req->tried_own = false;
    }
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

static void req_upstream_ready(struct dm_req *req, struct dm_upstream *up, int status);

/*
 * Takes a connection to the request's server. A pooled one goes on at once,
 * without waiting for the loop; so does a failure, which tries another
 * server. A new connection goes on from its callback.
 */
static void
req_connect(struct dm_req *req)
{
    struct dm_client *c = req->c;
    dm_counter_add(&dm_runtime_host(c->rt, req->pool, req->server)->started, 1);
    int r = dm_upstream_take(c->w, c->rt, req->pool, req->server, req, req_upstream_ready);
    if (r == DM_UPSTREAM_NOW) {
        req_upstream_ready(req, req->up, 0);
    } else if (r < 0) {
        req_upstream_ready(req, NULL, r);
    }
}

/* The value of the request's first field called name (any case); p NULL when none. */
static struct dm_span
req_field(const struct dm_req *req, const char *name)
{
    const struct dm_http_msg *m = &req->msg;
    size_t nlen = strlen(name);
    for (unsigned i = 0; i < m->nfields; i++) {
        struct dm_span n = m->fields[i].name;
        if (n.len == nlen && strncasecmp(n.p, name, nlen) == 0) {
            return m->fields[i].value;
        }
    }
    return (struct dm_span){ NULL, 0 };
}

/* [p, e) without the spaces and tabs around it. */
static struct dm_span
span_trim(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t')) {
        p++;
    }
    while (e > p && (e[-1] == ' ' || e[-1] == '\t')) {
        e--;
    }
    return (struct dm_span){ p, (size_t)(e - p) };
}

/*
 * The value of cookie name in the request's Cookie fields (a=1; b=2); p NULL
 * when none. As RFC 6265 reads a cookie: the spaces around its name and
 * value are not theirs, nor the double quotes around a quoted value.
 * count not NULL: how many times it is given, in *count (the first is returned).
 */
static struct dm_span
req_cookie(const struct dm_req *req, const char *name, unsigned *count)
{
    const struct dm_http_msg *m = &req->msg;
    size_t nlen = strlen(name);
    struct dm_span first = { NULL, 0 };
    unsigned n = 0;
    for (unsigned i = 0; i < m->nfields; i++) {
        if (!dm_span_ieq(m->fields[i].name, "cookie")) {
            continue;
        }
        struct dm_span v = m->fields[i].value;
        const char *p = v.p;
        const char *end = v.p + v.len;
        while (p < end) {
            const char *semi = memchr(p, ';', (size_t)(end - p));
            const char *e = semi != NULL ? semi : end;
            const char *eq = memchr(p, '=', (size_t)(e - p));
            if (eq != NULL) {
                struct dm_span nm = span_trim(p, eq);
                struct dm_span val = span_trim(eq + 1, e);
                if (val.len >= 2 && val.p[0] == '"' && val.p[val.len - 1] == '"') {
                    val.p++;
                    val.len -= 2;
                }
                if (nm.len == nlen && memcmp(nm.p, name, nlen) == 0) {
                    if (n++ == 0) {
                        first = val;
                    }
                    if (count == NULL) {
                        return first;
                    }
                }
            }
            p = semi != NULL ? semi + 1 : end;
        }
    }
    if (count != NULL) {
        *count = n;
    }
    return first;
}

/* How many fields of the request are called name (any case). */
static unsigned
req_field_count(const struct dm_req *req, const char *name)
{
    const struct dm_http_msg *m = &req->msg;
    size_t nlen = strlen(name);
    unsigned n = 0;
    for (unsigned i = 0; i < m->nfields; i++) {
        struct dm_span f = m->fields[i].name;
        n += f.len == nlen && strncasecmp(f.p, name, nlen) == 0;
    }
    return n;
}

/* The key a hashing policy places the request by (conf: pool hash.key). */
static uint64_t
req_hash_key(struct dm_req *req)
{
    const struct dm_conf_hash *h = &req->c->rt->conf->pools[req->pool].hash;
    if (h->key == DM_HASH_URI) {
        return dm_hash_bytes(req->info.path.p, req->info.path.len);
    }
    if (h->key == DM_HASH_HEADER || h->key == DM_HASH_COOKIE) {
        struct dm_span v =
            h->key == DM_HASH_HEADER ? req_field(req, h->name) : req_cookie(req, h->name, NULL);
        if (v.p != NULL) {
            return dm_hash_bytes(v.p, v.len);
        }
        /* No such header or cookie: fall back to the client address. */
    }
    const struct dm_client *c = req->c;
    if (c->peer.sa.sa_family == AF_INET6) {
        return dm_hash_bytes(&c->peer.in6.sin6_addr, sizeof(c->peer.in6.sin6_addr));
    }
    return dm_hash_bytes(&c->peer.in4.sin_addr, sizeof(c->peer.in4.sin_addr));
}

/* An asked frame rate: a decimal number >= 0, nothing around it; -1 when it is not one. */
static double
req_parse_rate(struct dm_span v)
{
    char text[32];
    if (v.len == 0 || v.len >= sizeof(text)) {
        return -1;
    }
    memcpy(text, v.p, v.len);
    text[v.len] = '\0';
    if (strspn(text, "0123456789.") != v.len) {
        return -1;
    }
    char *end;
    double r = strtod(text, &end);
    return *end == '\0' && isfinite(r) ? r : -1;
}

/*
 * When passive checks alone left the pool no server for a request (every
 * server it has not tried is resting after failures or down), the resting
 * ones (awake, not down by a health check) take requests again at once, as
 * nginx does when all its upstreams failed (it never takes out a pool's only
 * server) and as Envoy's panic threshold does. Else a few resets from an
 * overloaded only server answered every client 503 for fail_timeout.
 * max_fails more failures take them out again. True when one was brought
 * back; false, bringing none back, while an untried server is usable.
 */
static bool
req_forgive_passive(struct dm_rpool *p, const struct dm_pick *pick)
{
    for (size_t i = 0; i < p->sv->n; i++) {
        if (!dm_pick_tried(pick, i) && dm_host_is_usable(p->sv->s[i].host, pick->now_us)) {
            return false;
        }
    }
    bool any = false;
    for (size_t i = 0; i < p->sv->n; i++) {
        struct dm_host *h = p->sv->s[i].host;
        uint64_t until = atomic_load_explicit(&h->down_until_us, memory_order_relaxed);
        /* Resting now, and usable once the rest is over. */
        if (until <= pick->now_us || dm_pick_tried(pick, i) || !dm_host_is_usable(h, until)) {
            continue;
        }
        any = true;
        if (atomic_compare_exchange_strong(&h->down_until_us, &until, 0)) {
            dm_log_warn("server %s/%s is back before its fail_timeout: passive checks left pool "
                        "%s no other server",
                        p->cf->name, p->cf->servers[i].name, p->cf->name);
        }
    }
    return any;
}

/*
 * A session pool's Upgrade request is a session: its group, game and asked
 * rate (session.group, game_header, rate_header) go to the pool's placer,
 * which places it, or keeps it waiting for a batch pass, or refuses it.
 * Returns the index of its server in this runtime's pool, or -1 when the
 * request waits (dm_client_session_wait) or was answered. A retry (the
 * server refused the connection) gives its place back and is placed anew,
 * its tried servers left out.
 */
static int
req_session_place(struct dm_req *req, struct dm_rpool *p, uint64_t now_us)
{
    struct dm_client *c = req->c;
    struct dm_placer_answer ans;
    int rc;
    if (req->ticket != NULL && req->session_waiting) {
        rc = dm_placer_status(req->placer, req->ticket, &ans);
    } else {
        dm_placer_leave(req->placer, req->ticket);
        req->ticket = NULL;
        const struct dm_conf_session *sc = &p->cf->session;
        /* Two values of one of them: the server may read the other one. */
        if ((sc->group_key != DM_HASH_COOKIE && req_field_count(req, sc->group_name) > 1) ||
            req_field_count(req, sc->game_header) > 1 ||
            req_field_count(req, sc->rate_header) > 1) {
            dm_client_respond_error(c, 400, "a session header given more than once");
            return -1;
        }
        unsigned cookies = 0;
        struct dm_span group = sc->group_key == DM_HASH_COOKIE
                                   ? req_cookie(req, sc->group_name, &cookies)
                                   : req_field(req, sc->group_name);
        if (cookies > 1) {
            dm_client_respond_error(c, 400, "the session's group cookie given more than once");
            return -1;
        }
        struct dm_span game = req_field(req, sc->game_header);
        struct dm_span rate = req_field(req, sc->rate_header);
        double asked = rate.p != NULL ? req_parse_rate(rate) : -1;
        if (rate.p != NULL && asked < 0) {
            dm_client_respond_error(c, 400, "bad frame rate (session.rate_header)");
            return -1;
        }
        struct dm_placer_ask ask = {
            .group = group.len > 0 ? group.p : NULL,
            .group_len = group.len,
            .game = game.p,
            .game_len = game.len,
            .rate = asked,
            .client = &c->peer.sa,
            .tried_sv = p->sv,
            .tried = req->tried,
            .now_us = now_us,
        };
        req->placer = p->placer;
        rc = dm_placer_join(p->placer, &ask, &req->ticket, &ans);
        struct dm_pick pick = { .tried = req->tried, .now_us = now_us };
        if (rc < 0 && ans.status == 503 && req_forgive_passive(p, &pick)) {
            dm_placer_leave(req->placer, req->ticket);
            req->ticket = NULL;
            rc = dm_placer_join(p->placer, &ask, &req->ticket, &ans);
        }
    }
    if (rc == 1) { /* waiting for the batch pass */
        req->session_waiting = true;
        if (dm_client_session_wait(c)) {
            return -1;
        }
        dm_client_respond_error(c, 503,
                                "session not placed within session.window + timeouts.connect");
        return -1;
    }
    req->session_waiting = false;
    if (rc < 0) {
        dm_placer_leave(req->placer, req->ticket);
        req->ticket = NULL;
        if (req->attempts > 0 && ans.status == 503) {
            /* A server refused it and no other can take it: it ends as a
             * plain request whose retries ran out. */
            dm_client_respond_error(c, 502, "could not connect to any server");
        } else {
            dm_client_respond_error(c, ans.status, ans.reason);
        }
        return -1;
    }
    int idx = dm_runtime_find_host(c->rt, req->pool, ans.host);
    if (idx < 0) {
        /* The placer has moved on to a newer configuration than this
         * runtime's (a reload while the head came in, or while the session
         * waited for its batch pass): the request moves to it, where its
         * server is, as a later request of its connection would. */
        int moved = dm_client_session_rebase(c, req->placer);
        idx = moved >= 0 ? dm_runtime_find_host(c->rt, (size_t)moved, ans.host) : -1;
    }
    if (idx >= 0) {
        req->rate = ans.rate;
        return idx;
    }
    if (c->rt == c->w->rt && dm_client_session_wait(c)) {
        /* The placer is reconfigured before the workers hear of the new
         * runtime: it waits for it (as a session waits for its batch pass),
         * its ticket kept, until session.window + timeouts.connect. */
        req->session_waiting = true;
        return -1;
    }
    dm_placer_leave(req->placer, req->ticket);
    req->ticket = NULL;
    dm_client_respond_error(c, 503, "the session's server is not in this configuration");
    return -1;
}

/*
 * Takes a place among the requests server idx serves at once (its
 * max_conns): false when it has none. The place is its in-flight count,
 * taken with one atomic add so that two workers never both take the last.
 */
static bool
req_take_slot(struct dm_rpool *p, size_t idx)
{
    struct dm_server *s = &p->sv->s[idx];
    unsigned max = p->cf->servers[idx].max_conns;
    uint64_t before = atomic_fetch_add_explicit(&s->inflight, 1, memory_order_relaxed);
    if (max != 0 && before >= max) {
        dm_counter_sub(&s->inflight, 1);
        return false;
    }
    return true;
}

/*
 * The balancer's pick among the servers with room under their max_conns,
 * its place taken (req_take_slot); a full one is passed over as a tried one
 * would be, and is not tried for a retry. DM_NO_SERVER with *full set when
 * only full servers were left: the request waits in the pool's queue.
 */
static int
req_pick_with_room(struct dm_req *req, struct dm_rpool *p, const struct dm_pick *pick, bool *full)
{
    *full = false;
    int idx = dm_balancer_pick_past_ramps(p->bal, pick, req->tried);
    if (!p->limited) {
        if (idx != DM_NO_SERVER) {
            dm_counter_add(&p->sv->s[idx].inflight, 1);
        }
        return idx;
    }
    uint8_t *passed = req->tried + req->tried_bytes;
    bool any = false;
    while (idx != DM_NO_SERVER && !req_take_slot(p, (size_t)idx)) {
        passed[idx / 8] |= (uint8_t)(1u << (idx % 8));
        req->tried[idx / 8] |= (uint8_t)(1u << (idx % 8));
        any = true;
        idx = dm_balancer_pick_past_ramps(p->bal, pick, req->tried);
    }
    if (any) {
        for (size_t i = 0; i < req->tried_bytes; i++) {
            req->tried[i] &= (uint8_t)~passed[i];
            passed[i] = 0;
        }
        *full = idx == DM_NO_SERVER;
    }
    return idx;
}

void
dm_req_pick_and_connect(struct dm_req *req)
{
    struct dm_client *c = req->c;
    struct dm_rpool *p = &c->rt->pools[req->pool];
    struct dm_pick pick = {
        .key = p->hashing ? req_hash_key(req) : 0,
        .tried = req->tried,
        .now_us = dm_mono_us(),
        .rng = &c->w->rng,
    };
    int idx = DM_NO_SERVER;
    bool affinity = p->cf->affinity_connection;
    bool session = p->placer != NULL && req->info.upgrade;
    if (!session && p->limited && !c->queued && dm_counter_get(&p->queued) > 0) {
        /* Others wait already: a newcomer joins the queue behind them rather
         * than take a place that frees before their turn comes (HAProxy's
         * pending connections are served first in the same way). */
        dm_client_queue(c);
        return;
    }
    if (session) {
        idx = req_session_place(req, p, pick.now_us);
        if (idx < 0) {
            return;
        }
        p = &c->rt->pools[req->pool]; /* it may have moved to a reloaded config */
        dm_counter_add(&p->sv->s[idx].picks, 1);
        dm_counter_add(&p->sv->s[idx].inflight, 1);
    } else if (affinity && c->bound >= 0 && c->bound_pool == req->pool &&
               !dm_pick_tried(&pick, (size_t)c->bound) &&
               dm_server_keeps_affinity(&p->sv->s[c->bound], pick.now_us,
                                        !(p->bal->ops->needs & DM_BAL_BINDS_CONNECTIONS)) &&
               req_take_slot(p, (size_t)c->bound)) {
        idx = c->bound; /* affinity: connection */
        dm_client_unqueue(c);
    } else {
        bool full;
        idx = req_pick_with_room(req, p, &pick, &full);
        if (full) {
            dm_client_queue(c); /* waits for a place (or 503), keeping its turn */
            return;
        }
        dm_client_unqueue(c);
        if (idx == DM_NO_SERVER && req->attempts == 0 && dm_client_hold(c)) {
            return; /* scale to zero: held until a server wakes (or 503) */
        }
        if (idx == DM_NO_SERVER && req_forgive_passive(p, &pick)) {
            idx = req_pick_with_room(req, p, &pick, &full);
            if (full) {
                dm_client_queue(c);
                return;
            }
        }
        if (idx == DM_NO_SERVER) {
            if (req->attempts == 0) {
                dm_client_respond_error(c, 503, "no server available");
            } else {
                dm_client_respond_error(c, 502, "could not connect to any server");
            }
            return;
        }
        dm_counter_add(&p->sv->s[idx].picks, 1);
    }
    req->server = idx;
    req->attempts++;
    req->tried[idx / 8] |= (uint8_t)(1u << (idx % 8));
    struct dm_server *s = &p->sv->s[idx];
    dm_counter_add(&s->conns, 1); /* inflight: the pick took it */
    dm_counter_add(&s->host->inflight, 1);
    req->picked = true;
    /* Everything the pick decided is on the server's counters before the
     * next pick can read them, or a burst of new connections would all see
     * the same minimum (the stale-information herd). */
    dm_learn_reserve(req);
    req->up_start_us = uv_hrtime() / 1000;
    req_connect(req);
}

void
dm_req_unpick(struct dm_req *req)
{
    if (!req->picked) {
        return;
    }
    req->picked = false;
    struct dm_server *s = dm_runtime_server(req->c->rt, req->pool, req->server);
    dm_counter_sub(&s->conns, 1);
    dm_counter_sub(&s->inflight, 1);
    dm_counter_sub(&s->host->inflight, 1);
    struct dm_rpool *p = &req->c->rt->pools[req->pool];
    if (p->limited && dm_counter_get(&p->queued) > 0) {
        dm_workers_queue_kick(); /* a place freed: the queue's first may take it */
    }
}

static void
req_send_head(struct dm_req *req, struct dm_upstream *up)
{
    struct dm_client *c = req->c;
    if (req->out_head == NULL) {
        char addr[INET6_ADDRSTRLEN];
        dm_accesslog_client_addr(c, addr, sizeof(addr));
        struct dm_http_forward fw = {
            .client_addr = addr,
            .proto = c->tls != NULL ? "https" : "http",
            .via = "1.1 dimmer",
            .default_host = dm_runtime_server_conf(c->rt, req->pool, req->server)->addr.text,
        };
        if (c->tls != NULL && c->tls->subject_header != NULL) {
            /* The client certificate's subject, never one the client wrote itself. */
            fw.set_name[1] = c->tls->subject_header;
            fw.set_value[1] = c->tls->subject;
        }
        char rate[32];
        if (c->rt->pools[req->pool].placer != NULL) {
            /* The rate tier is the placer's word: a client's own is dropped
             * from every request of a session pool, sessions or not. */
            fw.set_name[0] = c->rt->conf->pools[req->pool].session.tier_header;
        }
        if (req->rate >= 0) {
            /* The session's rate tier: what it asked for, or as close to it as fits. */
            snprintf(rate, sizeof(rate), "%.10g", req->rate);
            fw.set_name[0] = c->rt->conf->pools[req->pool].session.tier_header;
            fw.set_value[0] = rate;
        }
        /* Sized to the head (plus what we add), so a request holds little memory. */
        uint32_t cap = req->head_len + 512;
        if (fw.set_value[1] != NULL) {
            cap += (uint32_t)(strlen(fw.set_name[1]) + strlen(fw.set_value[1]) + 4);
        }
        struct dm_buf *b = dm_buf_get(c->w, cap);
        if (b == NULL) {
            dm_client_respond_error(c, 502, "out of memory");
            return;
        }
        size_t n = dm_http_write_request(b->data, b->cap, &req->msg, &req->info, &fw);
        if (n == 0) {
            dm_buf_unref(c->w, b);
            dm_client_respond_error(c, 431, "request head too large once rewritten");
            return;
        }
        b->len = (uint32_t)n;
        req->out_head = b;
    }
    /* Written with the first body bytes, in one system call (dm_client_forward_slice). */
    (void)up;
    req->head_pending = true;
}

void
dm_req_continued(struct dm_req *req)
{
    struct dm_client *c = req->c;
    if (req->continued || c->state != DM_C_BODY) {
        return;
    }
    req->continued = true;
    if (req->up != NULL) {
        dm_upstream_deadline(req->up, 0);
    }
    dm_client_body_window(c);
}

void
dm_req_await_response(struct dm_req *req)
{
    uint64_t t = req->c->rt->conf->timeouts.server_response_ms;
    if (req->up != NULL && t > 0 && req->up->deadline_ms == UINT64_MAX) {
        dm_upstream_deadline(req->up, t);
    }
}

static void
req_upstream_ready(struct dm_req *req, struct dm_upstream *up, int status)
{
    struct dm_client *c = req->c;
    if (status < 0) {
        req->up = NULL;
        dm_learn_work_done(req, req->work);
        dm_req_unpick(req);
        if (dm_local_error(status)) {
            /* Descriptors, memory or local ports ran out here: the server is
             * not at fault (not counted towards passive.max_fails), and
             * another server would fare no better. 503, as HAProxy's
             * resource errors. */
            const struct dm_conf_pool *pc = &c->rt->conf->pools[req->pool];
            char why[160];
            snprintf(why, sizeof(why), "no connection to server %s/%s: %s (this process's limit)",
                     pc->name, pc->servers[req->server].name, uv_strerror(status));
            req->server = DM_NO_SERVER;
            dm_client_respond_error(c, 503, why);
            return;
        }
        dm_upstream_failed(c->rt, req->pool, req->server,
                           status == UV_ETIMEDOUT                        ? "connect timed out"
                           : status == UV_EPROTO && c->w->up_why[0] != 0 ? c->w->up_why
                                                                         : uv_strerror(status),
                           true);
        req->server = DM_NO_SERVER;
        /* Nothing was sent yet: another server may take it. */
        dm_req_pick_and_connect(req);
        return;
    }
    req->up = up;
    up->req = req;
    if (c->rt->pools[req->pool].cf->affinity_connection &&
        (c->bound != req->server || c->bound_pool != req->pool)) {
        /* The first request binds; one that had to go elsewhere (its
         * server failing, draining or asleep) binds again. */
        dm_client_bind(c, req->pool, req->server);
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
    dm_upstream_read_start(up);
    c->state = DM_C_BODY;
    if (req->body_done) {
        c->state = DM_C_WAIT; /* a retry: the request went out whole before */
        dm_req_await_response(req);
    } else if (req->info.chunked || req->info.content_length > 0) {
        dm_client_body_window(c); /* the body is read from now on */
        if (req->info.expect_continue && req->body_raw == 0) {
            /* The client may wait for the server's 100 Continue: the server's
             * silence is what is bounded until then. */
            dm_upstream_deadline(up, c->rt->conf->timeouts.server_response_ms);
        }
    }
    dm_client_read_start(c);
    dm_client_process(c);
    if (!c->closing && c->req == req && req->head_pending) {
        dm_client_forward_slice(c, 0, 0); /* no body bytes yet: the head alone */
    }
}

/* Whether a request may be sent twice (RFC 9110, 9.2.2): its method is idempotent. */
static bool
req_idempotent(const struct dm_req *req)
{
    static const char *const methods[] = { "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE" };
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        size_t n = strlen(methods[i]);
        if (req->msg.method.len == n && memcmp(req->msg.method.p, methods[i], n) == 0) {
            return true;
        }
    }
    return false;
}

/*
 * A reused connection died before answering: send the request again on a new
 * one, if it is idempotent. The server may have read it and acted before it
 * closed (the keep-alive race cannot tell), so a POST is not sent twice: the
 * client gets the 502 (as nginx's proxy_next_upstream without non_idempotent).
 */
bool
dm_req_retry(struct dm_req *req, struct dm_upstream *up)
{
    if (!up->reused || up->got_bytes || req->body_sent || req->attempts > 3 ||
        !req_idempotent(req)) {
        return false;
    }
    req->up = NULL;
    up->req = NULL;
    dm_upstream_close(up);
    req->c->state = DM_C_CONNECT;
    if (!dm_server_is_usable(dm_runtime_server(req->c->rt, req->pool, req->server), dm_mono_us())) {
        /* Its server went down, draining or asleep meanwhile: nothing new
         * starts on it, so the request is placed again (another server). */
        dm_learn_work_done(req, req->work);
        dm_req_unpick(req);
        req->server = DM_NO_SERVER;
        dm_req_pick_and_connect(req);
        return true;
    }
    req->attempts++;
    req->up_start_us = uv_hrtime() / 1000;
    req_connect(req);
    return true;
}

void
dm_req_account(struct dm_req *req)
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
        .now_us = dm_mono_us(),
        .work = (uint64_t)req->added,
        .conn = c->conn_state != NULL && c->conn_state_pool == req->pool ? c->conn_state : NULL,
        .object = req->key,
    };
    dm_balancer_on_response(p->bal, &ev);
    dm_learn_work_done(req, req->work);
    dm_req_unpick(req);
}

/* After the response: learn, log, release the server connection, go on. */
void
dm_req_finish(struct dm_req *req)
{
    struct dm_client *c = req->c;
    struct dm_upstream *up = req->up;
    struct dm_rpool *p = &c->rt->pools[req->pool];
    dm_req_account(req);
    uint64_t body = up != NULL ? up->parser.body_bytes : 0;
    if (p->keyed) {
        dm_learn_finish(req, body);
    }
    dm_accesslog_write(req);
    if (up != NULL) {
        bool reusable = req->rinfo.keep_alive && req->body_done && !c->w->stopping &&
                        !dm_http_parser_needs_eof(&up->parser) && up->in != NULL &&
                        up->in->off == up->in->len;
        if (reusable && up->tls != NULL && dm_tls_buffered(up->tls)) {
            /* More than session tickets after the response (a record OpenSSL
             * holds): bytes past it, as below. */
            char extra[1];
            int r = dm_tls_read(up->tls, extra, 1);
            reusable = r == DM_TLS_WANT;
            /* Its close_notify is an orderly close, no bytes: not reused, not warned of. */
            if (!reusable && r != DM_TLS_EOF) {
                const struct dm_conf_pool *pc = &up->rt->conf->pools[up->pool];
                dm_log_warn("server %s/%s sent bytes past its response: connection not reused",
                            pc->name, pc->servers[up->server].name);
            }
        }
        if (up->in != NULL && up->in->off != up->in->len) {
            /* Bytes past the response are no next response: not reused. */
            const struct dm_conf_pool *pc = &up->rt->conf->pools[up->pool];
            dm_log_warn("server %s/%s sent %u bytes past its response: connection not reused",
                        pc->name, pc->servers[up->server].name,
                        (unsigned)(up->in->len - up->in->off));
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
    dm_req_free(c->w, req);
    c->served = true;
    c->page_done_ms = (uint32_t)uv_now(&c->w->loop);
    dm_http_parser_next(&c->parser);
    if (close) {
        dm_client_read_stop(c);
        dm_client_close_when_written(c);
        return;
    }
    c->state = DM_C_IDLE;
    dm_client_timer_stop(c);
    dm_client_read_start(c);
    dm_client_process(c);
}
