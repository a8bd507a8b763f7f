/*
 * Experiment "age" (bench/sim/README.md): AGE against RR, LC and WLC as in
 * the seed balancing paper (a dispatcher in front of 4 servers, a SURGE
 * workload with SPECweb99 sizes, heavy / moderate / light traffic), with
 * dimmer's p2c-shadow and hybrid in the same table.
 *
 * The model, in virtual time:
 *   - the site (surge.h): pages with heavy-tailed numbers of embedded
 *     objects, SPECweb99 sizes, Zipf popularity; one site per replication,
 *     the same for every policy and load;
 *   - SURGE users: each opens a persistent connection for a page, requests
 *     the page, then its embedded objects one after another on the same
 *     connection (an exponential gap between a response and the next
 *     request), closes it, thinks (bounded Pareto, SURGE's inactive OFF
 *     time) and visits the next page. Open mode (--loads): users arrive as a
 *     Poisson process at the rate that offers the given utilisation, each
 *     visits a geometric number of pages; closed mode (--users): a fixed
 *     population that never leaves;
 *   - servers: processor sharing (server.h), speed proportional to the
 *     capacity, a request's work its bytes plus a per-request cost;
 *   - the proxy: everything dimmer's data path does around a balancer,
 *     replayed in virtual time (proxy/request.c dm_req_pick_and_connect,
 *     dm_req_account; proxy/learn.c): the pick, the counters s->conns,
 *     s->inflight, s->host->inflight and s->host->bound, connection
 *     affinity, and for the policies that need it the expected work in
 *     s->inflight_work (the catalog's size plus request_cost reserved at the
 *     pick, replaced by the real length when the response head arrives, worn
 *     down as the body goes out, removed at the end), the catalog (pages and
 *     sizes learnt from the responses, or preloaded), the per-connection
 *     state with the page's embedded objects on the first request, on_tick
 *     every 100 ms and on_close at the connection's end. The balancers are
 *     dimmer's own objects, unchanged. The proxy's reads of inflight_work
 *     are continuous; here the counter is brought up to date (work_sync)
 *     just before every pick, which is all a pick can see.
 *
 * What it prints, per traffic level: the mean response time per request
 * (sent to complete, servers only, no network) and per page visit (the page
 * sent to its last object complete, gaps included) of every policy, AGE's
 * and the best other policy's margin over WLC, and the hit ratio: the share
 * of picks that chose the least-loaded server at that instant, the server
 * with the least (unfinished work + the request's own work) / speed, from
 * the server model's true backlog (so an idle fast server beats an idle
 * slow one). Where connections are bound, only first requests are picks.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/balancer.h"
#include "balancers/registry.h"
#include "balancers/servers.h"
#include "bench/sim/exp.h"
#include "bench/sim/server.h"
#include "bench/sim/sim.h"
#include "bench/sim/surge.h"
#include "parsers/catalog.h"

#define MAX_SERVERS      64
#define MAX_POLICIES     12
#define MAX_LEVELS       12
#define TICK_S           0.1                   /* the proxy's aging tick */
#define CATALOG_CAP      ((uint64_t)256 << 20) /* the catalog's memory cap, ample */
#define DFLT_OBJECT      10240                 /* catalog.default_object_bytes' default */
#define QUEUE_US         5000000               /* timeouts.queue's default (connect's) */
#define SITE_HOST        "sim"
#define AGE_MAX_REQUESTS 1e10 /* what one command may ask of all its runs: ~1 h of CPU */
#define AGE_MAX_OBJECTS  5e8  /* pages and objects of all its sites: ~17 B each */

enum catalog_mode { CAT_LEARN, CAT_PRELOAD, CAT_OFF };
enum affinity_mode { AFF_ALL, AFF_POLICY };

struct policy {
    char label[64];
    const struct dm_balancer_ops *ops;
    bool weighted;     /* weight = capacity (WRR, WLC, ...); else weight 1 */
    bool by_conns;     /* s->conns counts open connections, not requests (lc-conn, wlc-conn) */
    bool per_request;  /* NAME/request: balanced per request whatever --affinity says */
    double age_weight; /* age:W; < 0: --age-weight */
};

struct opts {
    unsigned nservers;
    unsigned cap[MAX_SERVERS];
    double speed; /* bytes/s of a server of mean capacity */
    unsigned slots;
    enum dm_sim_disc disc;
    double level[MAX_LEVELS]; /* utilisations (open) or users (closed) */
    int nlevels;
    bool closed;
    struct policy pol[MAX_POLICIES];
    int npol;
    double age_weight;
    double half_life; /* s */
    double horizon, warmup;
    unsigned reps;
    struct dm_surge_conf site;
    double think_lo, think_hi, think_alpha; /* bounded Pareto, s */
    double gap;                             /* mean, s */
    double visits;                          /* pages per user (open) */
    double cost;                            /* bytes */
    enum catalog_mode catalog;
    enum affinity_mode affinity;
    double queue; /* max_conns a unit of capacity for the columns that pick per request; 0: none */
    bool queue_size; /* queue_order: size (else arrival) */
};

/* One replication's site and its catalog keys, shared read-only by its runs. */
struct site {
    struct dm_surge_site s;
    uint64_t *page_key, *obj_key;
    double visit_requests, visit_bytes;
};

struct conn;

/* A request in flight; a connection has at most one (no pipelining). */
struct req {
    struct dm_sim_job job;
    struct conn *c;
    struct req *next, *prev; /* in flight on its server */
    uint64_t key, bytes;
    int64_t added; /* the expected work it added at the pick (work pools) */
    int64_t work;  /* what it still counts in the server's inflight_work */
    double sent;
    double qkey; /* its place in the pool's queue, s */
    int server;
    bool page;
};

struct user;

/* A persistent client connection: one page visit. */
struct conn {
    struct user *u;
    size_t page;
    unsigned next; /* embedded objects requested so far */
    int bound;     /* the server its first request went to, or -1 */
    void *state;   /* the policy's per-connection state, or NULL */
    struct conn *anext, *aprev;
    double start;
    bool measured; /* started after the warm-up */
    struct req req;
};

struct user {
    struct dm_rng rng;   /* its own: the workload is the same under every policy */
    unsigned pages_left; /* 0: forever (closed mode) */
    struct user *next, *prev;
    struct conn c;
};

struct result {
    double rt_sum, page_sum;
    uint64_t rt_n, page_n;
    uint64_t picks, hits;
    double util, max_util; /* over the measured window: mean of the servers, largest */
    bool failed;
};

struct world {
    struct dm_sim sim; /* first: the event callbacks get the world from it */
    const struct opts *o;
    const struct site *site;
    const struct policy *pol;
    struct dm_servers *sv;
    struct dm_balancer *bal;
    struct dm_catalog *cat;
    struct dm_sim_srv srv[MAX_SERVERS];
    struct req *inflight[MAX_SERVERS];
    double busy0[MAX_SERVERS];
    struct conn *aging;
    struct req *q; /* the pool's queue (--queue), in the order of qkey */
    struct user *users;
    struct dm_rng arrivals;
    uint64_t user_seed, nusers;
    double user_rate; /* open mode: users per second */
    bool work;        /* the policy needs in-flight work (and the catalog) */
    bool bind;        /* connections stay on their first server */
    bool queue; /* max_conns and the pool's queue (--queue, a column that picks per request) */
    bool oom;
    struct result *res;
};

static uint64_t
mix(uint64_t a, uint64_t b)
{
    uint64_t z = a ^ (b + 0x9e3779b97f4a7c15u + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static struct world *
world_of(struct dm_sim *sim)
{
    return (struct world *)sim;
}

/* ---- the proxy's side: expected work, the policy's connection state ---- */

/*
 * What the proxy counts for r in inflight_work now: the estimate until the
 * response head arrives (the server has done the request's fixed cost), then
 * the real length plus the cost, less the body bytes already out.
 */
static int64_t
work_view(const struct world *w, const struct req *r)
{
    double left = dm_sim_srv_left(&w->sim, &w->srv[r->server], &r->job);
    double served = r->job.size - left;
    if (served < w->o->cost) {
        return r->added;
    }
    return (int64_t)llround(left + w->o->cost);
}

/* Brings every server's inflight_work up to now, as the proxy's reads would have. */
static void
work_sync(struct world *w)
{
    for (unsigned i = 0; i < w->o->nservers; i++) {
        int64_t delta = 0;
        for (struct req *r = w->inflight[i]; r != NULL; r = r->next) {
            int64_t v = work_view(w, r);
            delta += v - r->work;
            r->work = v;
        }
        if (delta != 0) {
            atomic_fetch_add_explicit(&w->sv->s[i].inflight_work, delta, memory_order_relaxed);
        }
    }
}

static void
work_done(struct world *w, struct req *r)
{
    if (r->work > 0) {
        atomic_fetch_sub_explicit(&w->sv->s[r->server].inflight_work, r->work,
                                  memory_order_relaxed);
    }
    r->work = 0;
}

static void
aging_unlink(struct world *w, struct conn *c)
{
    if (c->aprev != NULL) {
        c->aprev->anext = c->anext;
    } else {
        w->aging = c->anext;
    }
    if (c->anext != NULL) {
        c->anext->aprev = c->aprev;
    }
    c->aprev = c->anext = NULL;
}

/* FIN correction: the policy's state of the connection goes (dm_learn_client_close). */
static void
conn_state_close(struct world *w, struct conn *c)
{
    if (c->state == NULL) {
        return;
    }
    struct dm_bal_event ev = { .server = -1, .now_us = dm_sim_now_us(&w->sim), .conn = c->state };
    dm_balancer_on_close(w->bal, &ev);
    aging_unlink(w, c);
    free(c->state);
    c->state = NULL;
}

/* The request has its server: count its expected work and tell the policy (dm_learn_reserve). */
static void
reserve(struct world *w, struct conn *c, struct req *r, bool first)
{
    struct dm_bal_event ev = { .server = r->server, .now_us = dm_sim_now_us(&w->sim) };
    if (!w->work) {
        dm_balancer_on_request(w->bal, &ev);
        return;
    }
    uint64_t cost = (uint64_t)w->o->cost;
    uint64_t size = w->cat != NULL ? dm_catalog_size(w->cat, r->key, DFLT_OBJECT) : DFLT_OBJECT;
    int64_t work = (int64_t)(size + cost);
    r->work = r->added = work;
    atomic_fetch_add_explicit(&w->sv->s[r->server].inflight_work, work, memory_order_relaxed);
    ev.conn = c->state;
    ev.object = r->key;
    ev.work = (uint64_t)work;
    struct dm_bal_object objs[DM_CATALOG_PAGE_MAX]; /* lives until on_request has read it */
    if (first && w->cat != NULL) {
        size_t n =
            dm_catalog_lookup(w->cat, r->key, objs, DM_CATALOG_PAGE_MAX, cost, DFLT_OBJECT, NULL);
        conn_state_close(w, c);
        ev.conn = NULL;
        size_t bytes = dm_balancer_conn_state_size(w->bal, n);
        c->state = bytes > 0 ? calloc(1, bytes) : NULL;
        if (bytes > 0 && c->state == NULL) {
            w->oom = true;
        }
        if (c->state != NULL) {
            c->anext = w->aging;
            if (w->aging != NULL) {
                w->aging->aprev = c;
            }
            w->aging = c;
            ev.conn = c->state;
            ev.first = true;
            ev.objects = objs;
            ev.nobjects = n;
        }
    }
    dm_balancer_on_request(w->bal, &ev);
}

/* The least-loaded server for the hit ratio: the least (unfinished work + x) / speed. */
static bool
is_least_loaded(const struct world *w, int idx, double x)
{
    double best = INFINITY, mine = 0;
    for (unsigned i = 0; i < w->o->nservers; i++) {
        double v = (dm_sim_srv_backlog(&w->sim, &w->srv[i]) + x) / w->srv[i].speed;
        best = v < best ? v : best;
        if ((int)i == idx) {
            mine = v;
        }
    }
    return mine <= best * (1 + 1e-9);
}

/* ---- the client side ---- */

static void visit_start_cb(struct dm_sim *sim, void *arg, uint64_t tag);

/* A server's max_conns under --queue: its share of the queue's places, at least one. */
static unsigned
qlimit(const struct world *w, unsigned i)
{
    unsigned l = (unsigned)(w->o->queue * w->o->cap[i] + 0.5);
    return l < 1 ? 1 : l;
}

/* Marks the servers at their max_conns as tried (the proxy passes them over); any left? */
static bool
qroom(const struct world *w, uint8_t *tried)
{
    bool any = false;
    for (unsigned i = 0; i < w->o->nservers; i++) {
        if (dm_counter_get(&w->sv->s[i].host->inflight) >= qlimit(w, i)) {
            tried[i / 8] |= (uint8_t)(1u << (i % 8));
        } else {
            any = true;
        }
    }
    return any;
}

static void dispatch(struct world *w, struct req *r, uint8_t *tried);

/*
 * As proxy/request.c sends a request: with --queue, to a server under its
 * max_conns, or into the pool's queue when every one is full or others
 * wait already (a newcomer does not take a place before them); the queue
 * is in arrival order, or by arrival plus dm_queue_class_offset_us of the
 * class of the size the catalog expects (queue_order: size).
 */
static void
send_request(struct world *w, struct conn *c, uint64_t key, uint64_t bytes, bool first)
{
    struct dm_sim *sim = &w->sim;
    struct req *r = &c->req;
    r->c = c;
    r->key = key;
    r->bytes = bytes;
    r->sent = sim->now;
    r->page = first;
    r->added = r->work = 0;
    uint8_t tried[MAX_SERVERS / 8 + 1] = { 0 };
    if (w->queue && (w->q != NULL || !qroom(w, tried))) {
        r->qkey = sim->now;
        if (w->o->queue_size) {
            uint64_t size =
                w->cat != NULL ? dm_catalog_size(w->cat, key, DFLT_OBJECT) : DFLT_OBJECT;
            r->qkey += (double)dm_queue_class_offset_us(dm_queue_class(size), QUEUE_US) / 1e6;
        }
        struct req **pp = &w->q;
        while (*pp != NULL && (*pp)->qkey <= r->qkey) {
            pp = &(*pp)->next;
        }
        r->next = *pp;
        *pp = r;
        return;
    }
    dispatch(w, r, w->queue ? tried : NULL);
}

/* A place freed: the queue's first requests take the places there are. */
static void
qdrain(struct world *w)
{
    while (w->q != NULL) {
        uint8_t tried[MAX_SERVERS / 8 + 1] = { 0 };
        if (!qroom(w, tried)) {
            return;
        }
        struct req *r = w->q;
        w->q = r->next;
        r->next = NULL;
        dispatch(w, r, tried);
    }
}

static void
dispatch(struct world *w, struct req *r, uint8_t *tried)
{
    struct dm_sim *sim = &w->sim;
    struct conn *c = r->c;
    uint64_t key = r->key, bytes = r->bytes;
    bool first = r->page;
    int idx;
    if (c->bound >= 0) {
        idx = c->bound; /* affinity: connection */
    } else {
        if (w->work) {
            work_sync(w);
        }
        struct dm_pick pk = {
            .key = key, .tried = tried, .now_us = dm_sim_now_us(sim), .rng = &sim->rng
        };
        idx = dm_balancer_pick(w->bal, &pk);
        if (idx < 0 || (unsigned)idx >= w->o->nservers) {
            w->oom = true; /* every server is up: a policy that finds none is broken */
            idx = 0;
        }
        dm_counter_add(&w->sv->s[idx].picks, 1);
        if (sim->now >= w->o->warmup) {
            w->res->picks++;
            w->res->hits += is_least_loaded(w, idx, (double)bytes + w->o->cost);
        }
    }
    r->server = idx;
    struct dm_server *s = &w->sv->s[idx];
    if (!w->pol->by_conns) {
        dm_counter_add(&s->conns, 1);
    }
    dm_counter_add(&s->inflight, 1);
    dm_counter_add(&s->host->inflight, 1);
    reserve(w, c, r, first);
    if (w->bind && c->bound < 0) {
        c->bound = idx;
        dm_counter_add(&s->host->bound, 1);
        if (w->pol->by_conns) {
            dm_counter_add(&s->conns, 1); /* the connection is open on it until its close */
        }
    }
    r->job.size = (double)bytes + w->o->cost;
    r->job.owner = r;
    r->prev = NULL;
    r->next = w->inflight[idx];
    if (r->next != NULL) {
        r->next->prev = r;
    }
    w->inflight[idx] = r;
    dm_sim_srv_add(sim, &w->srv[idx], &r->job);
}

static void
user_free(struct world *w, struct user *u)
{
    if (u->prev != NULL) {
        u->prev->next = u->next;
    } else {
        w->users = u->next;
    }
    if (u->next != NULL) {
        u->next->prev = u->prev;
    }
    free(u);
}

static double
think_time(const struct world *w, struct user *u)
{
    const struct opts *o = w->o;
    return dm_sim_pareto(&u->rng, o->think_alpha, o->think_lo, o->think_hi);
}

static void
conn_close(struct world *w, struct conn *c)
{
    struct result *res = w->res;
    if (c->measured) {
        res->page_sum += w->sim.now - c->start;
        res->page_n++;
    }
    conn_state_close(w, c);
    if (c->bound >= 0) {
        dm_counter_sub(&w->sv->s[c->bound].host->bound, 1);
        if (w->pol->by_conns) {
            dm_counter_sub(&w->sv->s[c->bound].conns, 1);
        }
        c->bound = -1;
    }
    struct user *u = c->u;
    if (u->pages_left > 0 && --u->pages_left == 0) {
        user_free(w, u);
        return;
    }
    dm_sim_after(&w->sim, think_time(w, u), visit_start_cb, u, 0);
}

static void
object_cb(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)tag;
    struct world *w = world_of(sim);
    struct conn *c = arg;
    const struct dm_surge_page *pg = &w->site->s.pages[c->page];
    size_t k = pg->first + c->next++;
    send_request(w, c, w->site->obj_key[k], w->site->s.obj_bytes[k], false);
}

/* A response is complete (dm_req_account, then dm_learn_finish). */
static void
done_cb(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job)
{
    (void)srv;
    struct world *w = world_of(sim);
    struct req *r = job->owner;
    struct conn *c = r->c;
    int idx = r->server;
    if (r->prev != NULL) {
        r->prev->next = r->next;
    } else {
        w->inflight[idx] = r->next;
    }
    if (r->next != NULL) {
        r->next->prev = r->prev;
    }
    r->next = r->prev = NULL;
    if (r->sent >= w->o->warmup) {
        w->res->rt_sum += sim->now - r->sent;
        w->res->rt_n++;
    }
    struct dm_server *s = &w->sv->s[idx];
    dm_counter_add(&s->requests, 1);
    struct dm_bal_event ev = {
        .server = idx,
        .now_us = dm_sim_now_us(sim),
        .work = (uint64_t)r->added,
        .conn = c->state,
        .object = r->key,
    };
    dm_balancer_on_response(w->bal, &ev);
    work_done(w, r);
    if (!w->pol->by_conns) {
        dm_counter_sub(&s->conns, 1);
    }
    dm_counter_sub(&s->inflight, 1);
    dm_counter_sub(&s->host->inflight, 1);
    if (w->queue) {
        qdrain(w);
    }
    const struct dm_surge_page *pg = &w->site->s.pages[c->page];
    if (w->cat != NULL) {
        dm_catalog_learn_size(w->cat, r->key, r->bytes);
        if (w->work && r->page) {
            dm_catalog_learn_page(w->cat, r->key, &w->site->obj_key[pg->first], pg->n);
        }
    }
    if (c->next < pg->n) {
        dm_sim_after(sim, w->o->gap > 0 ? dm_sim_exp(&c->u->rng, w->o->gap) : 0, object_cb, c, 0);
    } else {
        conn_close(w, c);
    }
}

static void
visit_start_cb(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)tag;
    struct world *w = world_of(sim);
    struct user *u = arg;
    struct conn *c = &u->c;
    c->u = u;
    c->page = dm_surge_site_draw(&w->site->s, &u->rng);
    c->next = 0;
    c->bound = -1;
    c->start = sim->now;
    c->measured = sim->now >= w->o->warmup;
    send_request(w, c, w->site->page_key[c->page], w->site->s.pages[c->page].bytes, true);
}

static struct user *
user_new(struct world *w)
{
    struct user *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        w->oom = true;
        return NULL;
    }
    dm_rng_init(&u->rng, mix(w->user_seed, w->nusers++));
    u->pages_left = w->o->closed ? 0 : dm_sim_geometric(&u->rng, w->o->visits);
    u->c.bound = -1;
    u->next = w->users;
    if (u->next != NULL) {
        u->next->prev = u;
    }
    w->users = u;
    return u;
}

static void
arrival_cb(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)arg;
    (void)tag;
    struct world *w = world_of(sim);
    struct user *u = user_new(w);
    if (u != NULL) {
        visit_start_cb(sim, u, 0);
    }
    dm_sim_after(sim, dm_sim_exp(&w->arrivals, 1.0 / w->user_rate), arrival_cb, NULL, 0);
}

static void
tick_cb(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)arg;
    (void)tag;
    struct world *w = world_of(sim);
    uint64_t now = dm_sim_now_us(sim);
    for (struct conn *c = w->aging; c != NULL; c = c->anext) {
        struct dm_bal_event ev = { .server = -1, .now_us = now, .conn = c->state };
        dm_balancer_on_tick(w->bal, &ev);
    }
    dm_sim_after(sim, TICK_S, tick_cb, NULL, 0);
}

static void
warmup_cb(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)arg;
    (void)tag;
    struct world *w = world_of(sim);
    for (unsigned i = 0; i < w->o->nservers; i++) {
        w->busy0[i] = dm_sim_srv_busy(sim, &w->srv[i]);
    }
}

/* ---- one run: a policy at a level, one replication ---- */

struct run {
    const struct opts *o;
    const struct site *site;
    const struct policy *pol;
    double level;
    uint64_t seed; /* the workload's: the same for every policy */
    struct result res;
};

static double
cap_sum(const struct opts *o)
{
    double s = 0;
    for (unsigned i = 0; i < o->nservers; i++) {
        s += o->cap[i];
    }
    return s;
}

static void
catalog_preload(struct world *w)
{
    const struct dm_surge_site *s = &w->site->s;
    for (size_t p = 0; p < s->npages; p++) {
        const struct dm_surge_page *pg = &s->pages[p];
        dm_catalog_learn_size(w->cat, w->site->page_key[p], pg->bytes);
        dm_catalog_learn_page(w->cat, w->site->page_key[p], &w->site->obj_key[pg->first], pg->n);
        for (unsigned k = 0; k < pg->n; k++) {
            dm_catalog_learn_size(w->cat, w->site->obj_key[pg->first + k],
                                  s->obj_bytes[pg->first + k]);
        }
    }
}

static void
run_one(struct run *run)
{
    const struct opts *o = run->o;
    struct result *res = &run->res;
    memset(res, 0, sizeof(*res));
    struct world *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        res->failed = true;
        return;
    }
    w->o = o;
    w->site = run->site;
    w->pol = run->pol;
    w->res = res;
    dm_sim_init(&w->sim, mix(run->seed, 0xba1));
    dm_rng_init(&w->arrivals, mix(run->seed, 0xa77));
    w->user_seed = mix(run->seed, 0x05e7);
    const struct dm_balancer_ops *ops = run->pol->ops;
    w->work = (ops->needs & (DM_BAL_NEEDS_WORK | DM_BAL_NEEDS_OBJECTS)) != 0;
    w->bind = (o->affinity == AFF_ALL && !run->pol->per_request) ||
              (ops->needs & DM_BAL_BINDS_CONNECTIONS) != 0 ||
              run->pol->by_conns; /* a connection is on one server: what it counts */
    w->queue = o->queue > 0 && !w->bind;
    double unit = o->speed * o->nservers / cap_sum(o); /* bytes/s per unit of capacity */
    w->sv = dm_servers_create(o->nservers);
    if (w->sv == NULL) {
        goto fail;
    }
    for (unsigned i = 0; i < o->nservers; i++) {
        w->sv->s[i].capacity = o->cap[i];
        w->sv->s[i].weight = run->pol->weighted ? o->cap[i] : 1;
        dm_sim_srv_init(&w->srv[i], o->disc, unit * o->cap[i], o->slots, done_cb, w);
    }
    struct dm_bal_conf cf = {
        .age_weight = run->pol->age_weight >= 0 ? run->pol->age_weight : o->age_weight,
        .age_half_life_us = (uint64_t)(o->half_life * 1e6 + 0.5),
    };
    w->bal = dm_balancer_create(ops, w->sv, &cf);
    if (w->bal == NULL) {
        goto fail;
    }
    if ((w->work || (w->queue && o->queue_size)) && o->catalog != CAT_OFF) {
        w->cat = dm_catalog_create(CATALOG_CAP);
        if (w->cat == NULL) {
            goto fail;
        }
        if (o->catalog == CAT_PRELOAD) {
            catalog_preload(w);
        }
    }
    if (o->closed) {
        for (unsigned k = 0; k < (unsigned)run->level; k++) {
            struct user *u = user_new(w);
            if (u == NULL) {
                goto fail;
            }
            /* Users start spread over a think time, not all at once. */
            dm_sim_at(&w->sim, think_time(w, u), visit_start_cb, u, 0);
        }
    } else {
        double visit_work = run->site->visit_bytes + o->cost * run->site->visit_requests;
        w->user_rate = run->level * unit * cap_sum(o) / visit_work / o->visits;
        dm_sim_at(&w->sim, dm_sim_exp(&w->arrivals, 1.0 / w->user_rate), arrival_cb, NULL, 0);
    }
    dm_sim_at(&w->sim, TICK_S, tick_cb, NULL, 0);
    dm_sim_at(&w->sim, o->warmup, warmup_cb, NULL, 0);
    dm_sim_run_until(&w->sim, o->horizon);

    double span = o->horizon - o->warmup;
    double sum = 0;
    for (unsigned i = 0; i < o->nservers; i++) {
        double u = (dm_sim_srv_busy(&w->sim, &w->srv[i]) - w->busy0[i]) / span;
        sum += u;
        res->max_util = u > res->max_util ? u : res->max_util;
        res->failed |= dm_sim_srv_failed(&w->srv[i]);
    }
    res->util = sum / o->nservers;
    res->failed |= dm_sim_failed(&w->sim) || w->oom;
    goto out;

fail:
    res->failed = true;
out:
    while (w->users != NULL) {
        struct user *u = w->users;
        free(u->c.state); /* the run is over: no FIN to tell */
        u->c.state = NULL;
        user_free(w, u);
    }
    for (unsigned i = 0; i < o->nservers; i++) {
        dm_sim_srv_fini(&w->srv[i]);
    }
    dm_balancer_destroy(w->bal);
    dm_catalog_destroy(w->cat);
    dm_servers_destroy(w->sv);
    dm_sim_fini(&w->sim);
    free(w);
}

static void
run_fn(size_t i, void *arg)
{
    run_one(&((struct run *)arg)[i]);
}

/* ---- the site of a replication ---- */

static int
site_build(struct site *st, const struct opts *o, uint64_t seed)
{
    memset(st, 0, sizeof(*st));
    if (dm_surge_site_init(&st->s, &o->site, seed) != 0) {
        return -ENOMEM;
    }
    st->page_key = malloc(st->s.npages * sizeof(uint64_t));
    st->obj_key = malloc((st->s.nobjects > 0 ? st->s.nobjects : 1) * sizeof(uint64_t));
    if (st->page_key == NULL || st->obj_key == NULL) {
        return -ENOMEM;
    }
    char path[64];
    for (size_t p = 0; p < st->s.npages; p++) {
        int n = snprintf(path, sizeof(path), "/p/%zu.html", p);
        st->page_key[p] = dm_catalog_key(SITE_HOST, strlen(SITE_HOST), path, (size_t)n);
    }
    for (size_t k = 0; k < st->s.nobjects; k++) {
        int n = snprintf(path, sizeof(path), "/o/%zu.gif", k);
        st->obj_key[k] = dm_catalog_key(SITE_HOST, strlen(SITE_HOST), path, (size_t)n);
    }
    dm_surge_site_visit_mean(&st->s, &st->visit_requests, &st->visit_bytes);
    return 0;
}

static void
site_free(struct site *st)
{
    dm_surge_site_fini(&st->s);
    free(st->page_key);
    free(st->obj_key);
}

/* ---- options ---- */

static const char usage[] =
    "  --servers N        servers (default 4)\n"
    "  --capacity LIST    their capacities, whole numbers, repeated over the servers\n"
    "                     (default 1,2,3,4): speed, weight of the weighted policies\n"
    "                     (WRR, WLC) and dm_server.capacity\n"
    "  --speed MB         speed of a server of mean capacity in MB/s (default 21, the\n"
    "                     paper's measured rate); the others in proportion\n"
    "  --slots K          service slots per server (default 1: classic PS)\n"
    "  --discipline D     ps (default: processor sharing, as a threaded web server)\n"
    "                     or fifo (K servers of speed / K, a queue in arrival order)\n"
    "  --loads LIST       offered utilisations, one row each (default 0.9,0.7,0.3:\n"
    "                     heavy, moderate, light); users arrive as a Poisson process\n"
    "  --users LIST       instead: closed populations of SURGE users (never leave)\n"
    "  --policies LIST    columns (default rr,wrr,lc,wlc,age,age:0.01,p2c-shadow,hybrid):\n"
    "                     rr and lc with weights 1, wrr and wlc with weight = capacity,\n"
    "                     lc-conn and wlc-conn the same counting open connections (as\n"
    "                     LVS and haproxy count them), not requests in flight (dimmer),\n"
    "                     age with --age-weight, age:W with weight W, or any dimmer\n"
    "                     policy name (weight = capacity). AGE vs WLC: the first age one.\n"
    "                     NAME/request (not age, lc-conn, wlc-conn): that column balances\n"
    "                     every request, whatever --affinity says (label NAME/req)\n"
    "  --age-weight W     AGE's weight of potential load (default 0.1, dimmer's default)\n"
    "  --half-life S      AGE's potential half-life in seconds (default 10)\n"
    "  --time T           virtual seconds per run (default 200; --quick: 30)\n"
    "  --warmup S         seconds not measured at the start (default 60; --quick: 15):\n"
    "                     users arrive from time 0, so the population takes a while\n"
    "  --reps R           replications, each its own site and workload (default 4;\n"
    "                     --quick: 1)\n"
    "  --pages N          pages of the site (default 2000)\n"
    "  --zipf S           page popularity exponent (default 1)\n"
    "  --objects M        mean embedded objects per page (default 12.5)\n"
    "  --objects-alpha A  their tail index (default 2.43, SURGE's)\n"
    "  --think S          inactive OFF time: bounded Pareto from S seconds (default 1)\n"
    "  --think-alpha A    its shape (default 1.5, SURGE's), bounded at 100 S\n"
    "  --gap MS           mean gap between a response and the next request of the\n"
    "                     connection, exponential (default 10)\n"
    "  --visits V         pages per user, geometric mean (default 5; open mode)\n"
    "  --request-cost B   work of a request apart from its bytes, in bytes, for the\n"
    "                     servers and for the proxy's request_cost (default 8192)\n"
    "  --catalog MODE     learn (default: pages and sizes learnt from the responses),\n"
    "                     preload (the whole site known at start) or off\n"
    "  --affinity MODE    all (default: every connection stays on its first server,\n"
    "                     as at the paper's dispatcher) or policy (only the policies\n"
    "                     that bind connections, as dimmer's defaults; the others pick\n"
    "                     for every request)\n"
    "  --queue K          the columns that pick every request get dimmer's per-server\n"
    "                     max_conns, K per unit of capacity (at least 1), and the pool's\n"
    "                     queue for a request that finds every server full (default 0:\n"
    "                     no limit, no queue)\n"
    "  --queue-order O    arrival (default) or size: the queue in arrival order, or\n"
    "                     by arrival plus the catalog's expected size as dimmer's\n"
    "                     queue_order: size (1 ms a kB by classes of sizes within\n"
    "                     1.5x, at most half of timeouts.queue)\n";

static bool
parse_policies(const char *val, struct opts *o)
{
    o->npol = 0;
    const char *p = val;
    while (*p != '\0') {
        const char *e = strchr(p, ',');
        size_t n = e != NULL ? (size_t)(e - p) : strlen(p);
        char name[64];
        if (n == 0 || n >= sizeof(name) || o->npol == MAX_POLICIES) {
            fprintf(stderr, "dimmer-sim age: --policies: want up to %d names, not '%s'\n",
                    MAX_POLICIES, val);
            return false;
        }
        memcpy(name, p, n);
        name[n] = '\0';
        struct policy *pl = &o->pol[o->npol];
        memset(pl, 0, sizeof(*pl));
        static const char suffix[] = "/request";
        size_t sl = sizeof(suffix) - 1;
        if (n > sl && strcmp(name + n - sl, suffix) == 0) {
            pl->per_request = true;
            name[n - sl] = '\0';
        }
        pl->age_weight = -1;
        pl->weighted = true;
        if (strcmp(name, "rr") == 0 || strcmp(name, "wrr") == 0) {
            pl->ops = &dm_bal_roundrobin;
            pl->weighted = name[0] == 'w';
            snprintf(pl->label, sizeof(pl->label), "%s", pl->weighted ? "WRR" : "RR");
        } else if (strcmp(name, "lc") == 0 || strcmp(name, "wlc") == 0) {
            pl->ops = &dm_bal_leastconn;
            pl->weighted = name[0] == 'w';
            snprintf(pl->label, sizeof(pl->label), "%s", pl->weighted ? "WLC" : "LC");
        } else if (strcmp(name, "lc-conn") == 0 || strcmp(name, "wlc-conn") == 0) {
            pl->ops = &dm_bal_leastconn;
            pl->weighted = name[0] == 'w';
            pl->by_conns = true;
            snprintf(pl->label, sizeof(pl->label), "%s", pl->weighted ? "WLC(conn)" : "LC(conn)");
        } else if (strncmp(name, "age:", 4) == 0) {
            char *end;
            errno = 0;
            double v = strtod(name + 4, &end);
            if (end == name + 4 || *end != '\0' || errno != 0 || !(v >= 0 && v <= 1e6)) {
                fprintf(stderr, "dimmer-sim age: --policies: bad weight in '%s'\n", name);
                return false;
            }
            pl->ops = &dm_bal_age;
            pl->age_weight = v;
            snprintf(pl->label, sizeof(pl->label), "AGE(w=%g)", v);
        } else if (strcmp(name, "age") == 0) {
            pl->ops = &dm_bal_age;
            snprintf(pl->label, sizeof(pl->label), "AGE");
        } else if ((pl->ops = dm_balancer_find(name)) != NULL) {
            snprintf(pl->label, sizeof(pl->label), "%s", name);
        } else {
            fprintf(stderr, "dimmer-sim age: --policies: unknown policy '%s'\n", name);
            return false;
        }
        if (pl->per_request) {
            if ((pl->ops->needs & DM_BAL_BINDS_CONNECTIONS) != 0 || pl->by_conns) {
                fprintf(stderr,
                        "dimmer-sim age: --policies: %s binds its connections, no /request\n",
                        name);
                return false;
            }
            size_t ll = strlen(pl->label);
            snprintf(pl->label + ll, sizeof(pl->label) - ll, "/req");
        }
        o->npol++;
        p = e != NULL ? e + 1 : p + n;
    }
    if (o->npol == 0) {
        fprintf(stderr, "dimmer-sim age: --policies: empty list\n");
        return false;
    }
    return true;
}

/* Returns 0, or 2 after a usage error. */
static int
parse(const struct dm_sim_ctx *ctx, int argc, char **argv, struct opts *o)
{
    static const char *const E = "age";
    double caps[MAX_SERVERS] = { 1, 2, 3, 4 };
    int ncaps = 4;
    bool time_set = false, warm_set = false, reps_set = false, pages_set = false;
    *o = (struct opts){
        .nservers = 4,
        .speed = 21e6,
        .slots = 1,
        .level = { 0.9, 0.7, 0.3 },
        .nlevels = 3,
        .age_weight = 0.1,
        .half_life = 10,
        .horizon = 200,
        .warmup = 60,
        .reps = 4,
        .site = { .pages = 2000,
                  .zipf = 1.0,
                  .objects_mean = 12.5,
                  .objects_alpha = 2.43,
                  .objects_max = DM_CATALOG_PAGE_MAX },
        .think_lo = 1,
        .think_alpha = 1.5,
        .gap = 0.010,
        .visits = 5,
        .cost = 8192,
    };
    if (!parse_policies("rr,wrr,lc,wlc,age,age:0.01,p2c-shadow,hybrid", o)) {
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        bool ok = true;
        if (v == NULL) {
            fprintf(stderr, "dimmer-sim age: %s: missing value (dimmer-sim age --help)\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--servers") == 0) {
            ok = dm_sim_opt_unsigned(E, a, v, 1, MAX_SERVERS, &o->nservers);
        } else if (strcmp(a, "--capacity") == 0) {
            ncaps = dm_sim_opt_list(E, a, v, caps, MAX_SERVERS);
            ok = ncaps > 0;
            for (int k = 0; ok && k < ncaps; k++) {
                if (!(caps[k] >= 1 && caps[k] <= 1e6) || caps[k] != floor(caps[k])) {
                    fprintf(stderr, "dimmer-sim age: --capacity: whole numbers >= 1\n");
                    ok = false;
                }
            }
        } else if (strcmp(a, "--speed") == 0) {
            ok = dm_sim_opt_double(E, a, v, 1e-3, 1e6, &d);
            o->speed = d * 1e6;
        } else if (strcmp(a, "--slots") == 0) {
            ok = dm_sim_opt_unsigned(E, a, v, 1, 100000, &o->slots);
        } else if (strcmp(a, "--discipline") == 0) {
            ok = dm_sim_opt_disc(E, a, v, &o->disc);
        } else if (strcmp(a, "--loads") == 0 || strcmp(a, "--users") == 0) {
            o->closed = a[2] == 'u';
            o->nlevels = dm_sim_opt_list(E, a, v, o->level, MAX_LEVELS);
            ok = o->nlevels > 0;
            for (int k = 0; ok && k < o->nlevels; k++) {
                bool good = o->closed ? o->level[k] >= 1 && o->level[k] <= 1e6 &&
                                            o->level[k] == floor(o->level[k])
                                      : o->level[k] > 0 && o->level[k] <= 2;
                if (!good) {
                    fprintf(stderr, "dimmer-sim age: %s: %s\n", a,
                            o->closed ? "whole numbers of users" : "utilisations in (0, 2]");
                    ok = false;
                }
            }
        } else if (strcmp(a, "--policies") == 0) {
            ok = parse_policies(v, o);
        } else if (strcmp(a, "--age-weight") == 0) {
            ok = dm_sim_opt_double(E, a, v, 0, 1e6, &o->age_weight);
        } else if (strcmp(a, "--half-life") == 0) {
            ok = dm_sim_opt_double(E, a, v, 1e-3, 1e6, &o->half_life);
        } else if (strcmp(a, "--time") == 0) {
            ok = dm_sim_opt_double(E, a, v, 0.1, 1e6, &o->horizon);
            time_set = true;
        } else if (strcmp(a, "--warmup") == 0) {
            ok = dm_sim_opt_double(E, a, v, 0, 1e6, &o->warmup);
            warm_set = true;
        } else if (strcmp(a, "--reps") == 0) {
            ok = dm_sim_opt_unsigned(E, a, v, 1, 1000, &o->reps);
            reps_set = true;
        } else if (strcmp(a, "--pages") == 0) {
            unsigned n;
            ok = dm_sim_opt_unsigned(E, a, v, 1, 10000000, &n);
            o->site.pages = n;
            pages_set = true;
        } else if (strcmp(a, "--zipf") == 0) {
            ok = dm_sim_opt_double(E, a, v, 0, 10, &o->site.zipf);
        } else if (strcmp(a, "--objects") == 0) {
            ok = dm_sim_opt_double(E, a, v, 0, 256, &o->site.objects_mean);
        } else if (strcmp(a, "--objects-alpha") == 0) {
            ok = dm_sim_opt_double(E, a, v, 1.01, 100, &o->site.objects_alpha);
        } else if (strcmp(a, "--think") == 0) {
            ok = dm_sim_opt_double(E, a, v, 1e-3, 1e5, &o->think_lo);
        } else if (strcmp(a, "--think-alpha") == 0) {
            ok = dm_sim_opt_double(E, a, v, 0.1, 100, &o->think_alpha);
        } else if (strcmp(a, "--gap") == 0) {
            ok = dm_sim_opt_double(E, a, v, 0, 1e6, &d);
            o->gap = d / 1000;
        } else if (strcmp(a, "--visits") == 0) {
            ok = dm_sim_opt_double(E, a, v, 1, 1e6, &o->visits);
        } else if (strcmp(a, "--request-cost") == 0) {
            ok = dm_sim_opt_double(E, a, v, 0, 1e12, &o->cost);
            o->cost = floor(o->cost);
        } else if (strcmp(a, "--catalog") == 0) {
            o->catalog = strcmp(v, "learn") == 0     ? CAT_LEARN
                         : strcmp(v, "preload") == 0 ? CAT_PRELOAD
                         : strcmp(v, "off") == 0     ? CAT_OFF
                                                     : (enum catalog_mode) - 1;
            if ((int)o->catalog < 0) {
                fprintf(stderr, "dimmer-sim age: --catalog: learn, preload or off\n");
                ok = false;
            }
        } else if (strcmp(a, "--affinity") == 0) {
            o->affinity = strcmp(v, "all") == 0      ? AFF_ALL
                          : strcmp(v, "policy") == 0 ? AFF_POLICY
                                                     : (enum affinity_mode) - 1;
            if ((int)o->affinity < 0) {
                fprintf(stderr, "dimmer-sim age: --affinity: all or policy\n");
                ok = false;
            }
        } else if (strcmp(a, "--queue") == 0) {
            ok = dm_sim_opt_double(E, a, v, 0, 1000, &o->queue);
        } else if (strcmp(a, "--queue-order") == 0) {
            o->queue_size = strcmp(v, "size") == 0;
            if (!o->queue_size && strcmp(v, "arrival") != 0) {
                fprintf(stderr, "dimmer-sim age: --queue-order: arrival or size\n");
                ok = false;
            }
        } else {
            fprintf(stderr, "dimmer-sim age: unknown option %s (dimmer-sim age --help)\n", a);
            return 2;
        }
        if (!ok) {
            return 2;
        }
    }
    for (unsigned i = 0; i < o->nservers; i++) {
        o->cap[i] = (unsigned)caps[i % (unsigned)ncaps];
    }
    o->think_hi = 100 * o->think_lo;
    if (ctx->quick) {
        o->horizon = time_set ? o->horizon : 30;
        o->warmup = warm_set ? o->warmup : 15;
        /* --quick shortens what was not given, as for --time and --warmup. */
        o->reps = reps_set ? o->reps : 1;
        o->site.pages = pages_set || o->site.pages < 300 ? o->site.pages : 300;
    }
    if (o->warmup >= o->horizon) {
        fprintf(stderr, "dimmer-sim age: --warmup must be below --time\n");
        return 2;
    }
    return 0;
}

/* ---- tables ---- */

static const char *
traffic_name(double util)
{
    return util >= 0.8 ? "heavy" : util >= 0.5 ? "moderate" : "light";
}

struct cell {
    double rt, page_rt, hit, util, max_util;
    bool failed;
};

static int
find_policy(const struct opts *o, const struct dm_balancer_ops *ops, bool weighted)
{
    for (int p = 0; p < o->npol; p++) {
        if (o->pol[p].ops == ops && (ops == &dm_bal_age || o->pol[p].weighted == weighted)) {
            return p;
        }
    }
    return -1;
}

static double
gain(double base, double x)
{
    return base > 0 ? 100.0 * (base - x) / base : 0;
}

static int
emit(const struct dm_sim_ctx *ctx, const struct opts *o, const struct cell *cells,
     const struct site *sites)
{
    int np = o->npol;
    int wlc = find_policy(o, &dm_bal_leastconn, true);
    int lc = find_policy(o, &dm_bal_leastconn, false);
    int age = find_policy(o, &dm_bal_age, true);
    const char *headers[3 + MAX_POLICIES + 5];
    char names[MAX_POLICIES][80];
    int nh = 0;
    headers[nh++] = "traffic";
    headers[nh++] = o->closed ? "users" : "load";
    headers[nh++] = "util %";
    for (int p = 0; p < np; p++) {
        snprintf(names[p], sizeof(names[p]), "%s ms", o->pol[p].label);
        headers[nh++] = names[p];
    }
    headers[nh++] = "AGE vs WLC %";
    headers[nh++] = "best";
    headers[nh++] = "best vs WLC %";
    headers[nh++] = "WLC vs LC %";
    /* With --queue, the tables (and files) of their own: `all` runs both. */
    const char *sfx = o->queue > 0 ? "_queue" : "";
    char name[3][32], title[256];
    snprintf(name[0], sizeof(name[0]), "age%s", sfx);
    snprintf(name[1], sizeof(name[1]), "age_hits%s", sfx);
    snprintf(name[2], sizeof(name[2]), "age_pages%s", sfx);
    snprintf(title, sizeof(title),
             "AGE vs RR, LC, WLC (and p2c-shadow, hybrid): mean response time per request%s%s%s",
             o->queue > 0 ? ", with max_conns (--queue) and the pool's queue in " : "",
             o->queue > 0 ? (o->queue_size ? "size" : "arrival") : "",
             o->queue > 0 ? " order" : "");
    struct dm_sim_table *t = dm_sim_table_create(name[0], title, (size_t)nh, headers);
    headers[2] = "util %";
    for (int p = 0; p < np; p++) {
        headers[3 + p] = o->pol[p].label;
    }
    struct dm_sim_table *th = dm_sim_table_create(
        name[1], "Hit ratio: % of picks that chose the least-loaded server at that instant",
        (size_t)(3 + np), headers);
    headers[3 + np] = "AGE vs WLC %";
    headers[4 + np] = "best";
    headers[5 + np] = "best vs WLC %";
    struct dm_sim_table *tp = dm_sim_table_create(
        name[2], "Mean response time per page visit (page + its objects, with the gaps), ms",
        (size_t)(6 + np), headers);
    bool any_failed = false;
    for (int l = 0; l < o->nlevels; l++) {
        const struct cell *row = &cells[l * np];
        double util = 0;
        for (int p = 0; p < np; p++) {
            util += row[p].util / np;
            any_failed |= row[p].failed;
        }
        const char *tn = traffic_name(o->closed ? util : o->level[l]);
        struct dm_sim_table *all[3] = { t, th, tp };
        for (int k = 0; k < 3; k++) {
            dm_sim_table_cell(all[k], "%s", tn);
            dm_sim_table_cell(all[k], "%g", o->level[l]);
            dm_sim_table_cell(all[k], "%.1f", 100 * util);
        }
        int best = -1, bestp = -1;
        for (int p = 0; p < np; p++) {
            dm_sim_table_cell(t, "%.2f", 1000 * row[p].rt);
            dm_sim_table_cell(th, "%.1f", 100 * row[p].hit);
            dm_sim_table_cell(tp, "%.1f", 1000 * row[p].page_rt);
            if (p != wlc && (best < 0 || row[p].rt < row[best].rt)) {
                best = p;
            }
            if (p != wlc && (bestp < 0 || row[p].page_rt < row[bestp].page_rt)) {
                bestp = p;
            }
        }
        if (age >= 0 && wlc >= 0) {
            dm_sim_table_cell(t, "%+.1f", gain(row[wlc].rt, row[age].rt));
            dm_sim_table_cell(tp, "%+.1f", gain(row[wlc].page_rt, row[age].page_rt));
        } else {
            dm_sim_table_cell(t, "-");
            dm_sim_table_cell(tp, "-");
        }
        dm_sim_table_cell(t, "%s", best >= 0 ? o->pol[best].label : "-");
        dm_sim_table_cell(tp, "%s", bestp >= 0 ? o->pol[bestp].label : "-");
        if (best >= 0 && wlc >= 0) {
            dm_sim_table_cell(t, "%+.1f", gain(row[wlc].rt, row[best].rt));
            dm_sim_table_cell(tp, "%+.1f", gain(row[wlc].page_rt, row[bestp].page_rt));
        } else {
            dm_sim_table_cell(t, "-");
            dm_sim_table_cell(tp, "-");
        }
        if (lc >= 0 && wlc >= 0) {
            dm_sim_table_cell(t, "%+.1f", gain(row[lc].rt, row[wlc].rt));
        } else {
            dm_sim_table_cell(t, "-");
        }
        for (int p = 0; p < np; p++) {
            if (row[p].max_util >= 0.98) {
                dm_sim_table_note(t,
                                  "! %s at %s %g: a server busy %.1f%% of the time (saturated: "
                                  "its queue grows, its mean counts only what finished)",
                                  o->pol[p].label, o->closed ? "users" : "load", o->level[l],
                                  100 * row[p].max_util);
            }
        }
    }
    double vreq = 0, vbytes = 0, vlo = INFINITY, vhi = 0;
    for (unsigned r = 0; r < o->reps; r++) {
        vreq += sites[r].visit_requests / o->reps;
        vbytes += sites[r].visit_bytes / o->reps;
        vlo = sites[r].visit_bytes < vlo ? sites[r].visit_bytes : vlo;
        vhi = sites[r].visit_bytes > vhi ? sites[r].visit_bytes : vhi;
    }
    char caps[256];
    size_t off = 0;
    for (unsigned i = 0; i < o->nservers && off < sizeof(caps) - 12; i++) {
        off += (size_t)snprintf(caps + off, sizeof(caps) - off, "%s%u", i ? "," : "", o->cap[i]);
    }
    dm_sim_table_note(t,
                      "%u %s servers of capacities %s (%.1f MB/s per unit), %u replication(s) of "
                      "%g s (first %g s not measured); util = measured mean server utilisation",
                      o->nservers, o->disc == DM_SIM_PS ? "PS" : "FIFO", caps,
                      o->speed * o->nservers / cap_sum(o) / 1e6, o->reps, o->horizon, o->warmup);
    dm_sim_table_note(
        t,
        "site: %zu pages, Zipf %g, %.1f embedded objects per page (Lomax, tail %.2f), "
        "SPECweb99 sizes (mean file %.1f KB)",
        o->site.pages, o->site.zipf, o->site.objects_mean, o->site.objects_alpha,
        dm_surge_size_mean() / 1000);
    dm_sim_table_note(t,
                      "mean visit (the paper's job): %.1f requests, %.0f KB (%.0f to %.0f KB by "
                      "site), %.0f KB of work with the %.0f B request cost",
                      vreq, vbytes / 1000, vlo / 1000, vhi / 1000, (vbytes + o->cost * vreq) / 1000,
                      o->cost);
    dm_sim_table_note(t, "paper (AGE vs WLC): +1.71%% heavy, +10.25%% moderate, +16.82%% light "
                         "(printed '1682%%'); WLC vs LC: +43.88%% moderate. Positive: lower "
                         "response time than the baseline");
    dm_sim_table_note(th,
                      "least-loaded: the server with the least (unfinished work + the request's "
                      "work) / speed at the pick, ties all count; picks are first requests of "
                      "connections where connections are bound");
    int rc = 0;
    rc |= dm_sim_table_emit(ctx, t);
    rc |= dm_sim_table_emit(ctx, tp);
    rc |= dm_sim_table_emit(ctx, th);
    if (ctx->out_dir != NULL) {
        char script[2048];
        int n = snprintf(script, sizeof(script),
                         "set datafile separator ','\n"
                         "set key autotitle columnhead left top\n"
                         "set logscale y\n"
                         "set grid\n"
                         "set title 'AGE vs RR, LC, WLC: %u servers, SURGE, SPECweb99 sizes'\n"
                         "set xlabel 'measured utilisation (%%)'\n"
                         "set ylabel 'mean response time per request (ms)'\n"
                         "plot for [i=4:%d] '%s.csv' using 3:i with linespoints lw 2\n",
                         o->nservers, 3 + np, name[0]);
        if (n > 0 && (size_t)n < sizeof(script)) {
            dm_sim_plot(ctx, name[0], script);
        }
    }
    dm_sim_table_destroy(t);
    dm_sim_table_destroy(tp);
    dm_sim_table_destroy(th);
    if (any_failed) {
        fprintf(stderr, "dimmer-sim age: a run failed (out of memory)\n");
        return 1;
    }
    return rc != 0 ? 1 : 0;
}

/*
 * Whether the runs asked would take hours (a mistyped option: a million
 * users for a day of virtual time, a thousand replications), said on
 * stderr. Counted before any run: the requests of every run, at most the
 * servers' full rate in a closed population (it never exceeds it) and the
 * offered rate in an open one (which may).
 */
static bool
age_too_much(const struct opts *o, const struct site *site)
{
    double requests = 0;
    /* The first site's mean request stands for every site's (they differ by
     * well under a percent): the others are not built yet. */
    double per_request = site->visit_bytes / site->visit_requests + o->cost;
    double full = o->speed * o->nservers / per_request; /* requests a second */
    for (int l = 0; l < o->nlevels; l++) {
        requests += (o->closed ? full : o->level[l] * full) * o->horizon * o->npol * o->reps;
    }
    if (requests <= AGE_MAX_REQUESTS) {
        return false;
    }
    fprintf(
        stderr,
        "dimmer-sim age: about %.2g requests over its %zu runs, more than %.0g (an hour "
        "of work or more): ask for a shorter --time, fewer --reps, --loads or --users, --policies, "
        "or less --speed\n",
        requests, (size_t)o->nlevels * (size_t)o->npol * o->reps, AGE_MAX_REQUESTS);
    return true;
}

static int
age_run(const struct dm_sim_ctx *ctx, int argc, char **argv)
{
    struct opts o;
    int rc = parse(ctx, argc, argv, &o);
    if (rc != 0) {
        return rc;
    }
    struct site *sites = calloc(o.reps, sizeof(*sites));
    size_t nruns = (size_t)o.nlevels * (size_t)o.npol * o.reps;
    struct run *runs = calloc(nruns, sizeof(*runs));
    struct cell *cells = calloc((size_t)o.nlevels * (size_t)o.npol, sizeof(*cells));
    rc = 1;
    if (sites == NULL || runs == NULL || cells == NULL) {
        goto out;
    }
    /* Every replication's site is built first: their size is bounded too. */
    double objects = (double)o.reps * o.site.pages * (1 + o.site.objects_mean);
    if (objects > AGE_MAX_OBJECTS) {
        fprintf(stderr,
                "dimmer-sim age: %u sites of %zu pages and their objects, about %.2g in all, more "
                "than %.0g (about 17 bytes each): ask for fewer --pages, --objects or --reps\n",
                o.reps, (size_t)o.site.pages, objects, AGE_MAX_OBJECTS);
        rc = 2;
        goto out;
    }
    for (unsigned r = 0; r < o.reps; r++) {
        if (site_build(&sites[r], &o, mix(ctx->seed, 0x5173 + r)) != 0) {
            goto out;
        }
        if (r == 0 && age_too_much(&o, &sites[0])) {
            rc = 2;
            goto out;
        }
    }
    /* Replication-major, then level, then policy; the heavy levels come first. */
    size_t k = 0;
    for (unsigned r = 0; r < o.reps; r++) {
        for (int l = 0; l < o.nlevels; l++) {
            for (int p = 0; p < o.npol; p++) {
                runs[k++] = (struct run){
                    .o = &o,
                    .site = &sites[r],
                    .pol = &o.pol[p],
                    .level = o.level[l],
                    .seed = mix(mix(ctx->seed, r), 0x10ad + (uint64_t)l),
                };
            }
        }
    }
    dm_sim_parallel(ctx->jobs, nruns, run_fn, runs);
    for (int l = 0; l < o.nlevels; l++) {
        for (int p = 0; p < o.npol; p++) {
            struct result sum = { 0 };
            double util = 0, max_util = 0;
            for (unsigned r = 0; r < o.reps; r++) {
                const struct result *x = &runs[((size_t)r * o.nlevels + l) * o.npol + p].res;
                sum.rt_sum += x->rt_sum;
                sum.rt_n += x->rt_n;
                sum.page_sum += x->page_sum;
                sum.page_n += x->page_n;
                sum.picks += x->picks;
                sum.hits += x->hits;
                sum.failed |= x->failed;
                util += x->util / o.reps;
                max_util = x->max_util > max_util ? x->max_util : max_util;
            }
            struct cell *c = &cells[l * o.npol + p];
            c->rt = sum.rt_n ? sum.rt_sum / (double)sum.rt_n : 0;
            c->page_rt = sum.page_n ? sum.page_sum / (double)sum.page_n : 0;
            c->hit = sum.picks ? (double)sum.hits / (double)sum.picks : 0;
            c->util = util;
            c->max_util = max_util;
            c->failed = sum.failed;
        }
    }
    rc = emit(ctx, &o, cells, sites);
out:
    if (rc == 1 && (sites == NULL || runs == NULL || cells == NULL)) {
        fprintf(stderr, "dimmer-sim age: out of memory\n");
    }
    for (unsigned r = 0; sites != NULL && r < o.reps; r++) {
        site_free(&sites[r]);
    }
    free(sites);
    free(runs);
    free(cells);
    return rc;
}

const struct dm_sim_exp dm_sim_exp_age = {
    .name = "age",
    .summary = "AGE vs RR, LC, WLC, p2c-shadow, hybrid: 4 servers, SURGE, SPECweb99 sizes",
    .usage = usage,
    .run = age_run,
};
