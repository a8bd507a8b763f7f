/*
 * AGE: aged potential-load balancing with FIN correction (DESIGN.md, item 1).
 *
 * Potential load. On the first request of a client connection the proxy
 * looks the page up in the object catalog and hands us its embedded objects,
 * each with its expected work (expected bytes plus a per-request cost). Their
 * sum is the potential load the persistent connection will bring to the
 * server that got it, and it is written at once to that server's s->potential.
 * The page itself is not part of it: its work is already in-flight work.
 *
 * Aging. The potential shrinks two ways:
 *   - with time: held = remaining * 2^(-(now - start) / half_life), where
 *     start is the time of the first request and half_life is
 *     cf->age_half_life_us (10 s when 0). The proxy calls on_tick about every
 *     100 ms per connection, which recomputes it;
 *   - with use: when an embedded object of the page is requested on the
 *     connection, its work leaves `remaining` for good. Each distinct object
 *     counts once: duplicates in the page's list are merged when the state is
 *     built (a browser fetches a URL once; if their works differ, the
 *     larger is kept), and a second request for the same object changes
 *     nothing; neither does a request for an object that is not in the page.
 *     The page's own key on a later request is no embedded object either.
 *
 * FIN correction. When the connection closes, whatever it still holds is
 * removed from the table at once, so one wrong guess does not linger.
 *
 * Exact table arithmetic. The table is integer. Each connection remembers
 * exactly what it has added to its server's s->potential (`held`, >= 0), and
 * every update adds (new_held - old_held) atomically; close subtracts held.
 * So at any moment, in the counter's modification order, s->potential is the
 * sum of the helds of the connections bound to it: never negative, and
 * exactly zero once every connection has closed, whatever the rounding of
 * the decay. A connection's held never grows after its first request (it is
 * clamped, so a clock that steps back cannot raise it).
 *
 * Per-connection state (conn_state_size(n) bytes, zeroed by the proxy, one
 * worker thread per connection, so no atomics inside): a 32-byte header
 * (server, flags, entry count, start_us, remaining, held) then up to
 * AGE_MAX_OBJECTS entries of 16 bytes (key, work with the top bit as the
 * "consumed" mark), sorted by key so a request finds its object by binary
 * search. Objects past AGE_MAX_OBJECTS in the page's list still count in the
 * potential (and age with time and vanish at FIN) but cannot be consumed one
 * by one; duplicates among them are not merged.
 *
 * The proxy's side of the contract: the memory is aligned for uint64_t (as
 * malloc's is), and the first request's ev->nobjects is no more than the
 * count the state was sized for; later events may carry any object key.
 *
 * Pick: among usable, untried servers, the lowest
 *     (inflight_work + w * potential) / capacity,  w = cf->age_weight,
 * used as given (0 ignores the potential; a negative or non-finite weight is
 * taken as 0). Ratios are compared by cross-multiplication in double. Ties
 * are broken round robin by an atomic rotor, as in leastconn.c. The scan is
 * linear in the number of servers, inherently: the scores move on every
 * worker thread without a lock, so there is no ordered structure to keep.
 */
#include "balancers/registry.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/balancer.h"
#include "balancers/servers.h"

#define AGE_MAX_OBJECTS       256
#define AGE_DEFAULT_HALF_LIFE 10000000u           /* 10 s in microseconds */
#define AGE_WORK_MAX          ((uint64_t)1 << 62) /* works and sums saturate here */
#define AGE_CONSUMED          ((uint64_t)1 << 63) /* top bit of age_obj.work */
#define AGE_BOUND             1u                  /* the connection holds potential on `server` */

struct age_obj {
    uint64_t key;
    uint64_t work; /* expected work; AGE_CONSUMED once the object was requested */
};

struct age_conn {
    int32_t server;     /* index of the server the potential is held on */
    uint16_t flags;     /* AGE_BOUND */
    uint16_t nobjects;  /* entries in obj[], <= AGE_MAX_OBJECTS, sorted by key */
    uint64_t start_us;  /* time of the first request: aging starts here */
    uint64_t remaining; /* work of the objects not yet requested, before aging */
    int64_t held;       /* exactly what this connection has added to s->potential */
    struct age_obj obj[];
};

_Static_assert(sizeof(struct age_conn) == 32, "the header stays compact");
_Static_assert(sizeof(struct age_obj) == 16, "an entry stays compact");

struct age_balancer {
    struct dm_balancer base;
    atomic_uint_fast64_t rotor; /* where the next scan starts, modulo n */
    double weight;              /* w: weight of the potential load in a pick */
    double half_life_us;
};

static struct dm_balancer *
age_create(const struct dm_servers *sv, const struct dm_bal_conf *cf)
{
    (void)sv;
    struct age_balancer *ab = calloc(1, sizeof(*ab));
    if (ab == NULL) {
        return NULL;
    }
    atomic_init(&ab->rotor, 0);
    /* The weight is used as given, so that 0 can switch the potential off. */
    ab->weight = isfinite(cf->age_weight) && cf->age_weight > 0 ? cf->age_weight : 0;
    ab->half_life_us =
        (double)(cf->age_half_life_us != 0 ? cf->age_half_life_us : AGE_DEFAULT_HALF_LIFE);
    return &ab->base;
}

static size_t
age_conn_state_size(size_t nobjects)
{
    size_t n = nobjects < AGE_MAX_OBJECTS ? nobjects : AGE_MAX_OBJECTS;
    return sizeof(struct age_conn) + n * sizeof(struct age_obj);
}

static int64_t
load_clamped(const atomic_int_fast64_t *c)
{
    int64_t v = atomic_load_explicit(c, memory_order_relaxed);
    return v > 0 ? v : 0;
}

static int
age_pick(struct dm_balancer *b, const struct dm_pick *in)
{
    struct age_balancer *ab = (struct age_balancer *)b;
    const struct dm_servers *sv = b->sv;
    if (sv->n == 0) {
        return DM_NO_SERVER;
    }
    /* Relaxed: the rotor only spreads ties; it publishes nothing. */
    uint64_t start = atomic_fetch_add_explicit(&ab->rotor, 1, memory_order_relaxed) % sv->n;
    int best = DM_NO_SERVER;
    double best_load = 0;
    double best_cap = 1;
    size_t i = (size_t)start;
    for (size_t k = 0; k < sv->n; k++) {
        const struct dm_server *s = &sv->s[i];
        /*
         * Load = in-flight work + w * potential (DESIGN.md, AGE); the proxy's
         * in-flight work may dip below zero for a moment when a response
         * outruns its estimate, so both terms are clamped.
         */
        double load = (double)load_clamped(&s->inflight_work);
        if (ab->weight > 0) {
            load += ab->weight * (double)load_clamped(&s->potential);
        }
        double cap = s->capacity > 0 ? (double)s->capacity : 1;
        /*
         * load / cap < best_load / best_cap, strictly: the first of equals
         * wins. Usability is checked only for a server that would win, which
         * saves most of its loads on a busy pool.
         */
        if ((best == DM_NO_SERVER || load * best_cap < best_load * cap) && !dm_pick_tried(in, i) &&
            dm_server_is_usable(s, in->now_us)) {
            best = (int)i;
            best_load = load;
            best_cap = cap;
        }
        i = i + 1 == sv->n ? 0 : i + 1;
    }
    return best;
}

/* Moves the connection's held potential to new_held, by an exact delta. */
static void
conn_set_held(const struct dm_servers *sv, struct age_conn *c, int64_t new_held)
{
    if (new_held != c->held) {
        atomic_fetch_add_explicit(&sv->s[c->server].potential, new_held - c->held,
                                  memory_order_relaxed);
        c->held = new_held;
    }
}

/* The aged potential at now_us; never more than held (time only shrinks it). */
static int64_t
conn_aged(const struct age_balancer *ab, const struct age_conn *c, uint64_t now_us)
{
    int64_t v;
    if (now_us <= c->start_us) {
        v = (int64_t)c->remaining;
    } else {
        double age = (double)(now_us - c->start_us) / ab->half_life_us;
        v = llround((double)c->remaining * exp2(-age));
    }
    if (v < 0) {
        v = 0;
    }
    return v < c->held ? v : c->held;
}

static int
obj_cmp(const void *a, const void *b)
{
    uint64_t ka = ((const struct age_obj *)a)->key;
    uint64_t kb = ((const struct age_obj *)b)->key;
    return ka < kb ? -1 : ka > kb;
}

static struct age_obj *
conn_find(struct age_conn *c, uint64_t key)
{
    size_t lo = 0;
    size_t hi = c->nobjects;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->obj[mid].key < key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < c->nobjects && c->obj[lo].key == key ? &c->obj[lo] : NULL;
}

static uint64_t
work_add(uint64_t a, uint64_t b)
{
    return b >= AGE_WORK_MAX - a ? AGE_WORK_MAX : a + b;
}

/* Gives back everything the connection holds and leaves an all-zero state. */
static void
conn_release(const struct dm_servers *sv, struct age_conn *c)
{
    if (c->flags & AGE_BOUND) {
        conn_set_held(sv, c, 0);
    }
    memset(c, 0, sizeof(*c));
}

/*
 * First request: bind the connection to ev->server and write the page's
 * potential. The stored entries are the first AGE_MAX_OBJECTS of the list,
 * sorted by key, duplicates merged into one entry with the larger work.
 */
static void
conn_bind(struct age_balancer *ab, struct age_conn *c, const struct dm_bal_event *ev)
{
    const struct dm_servers *sv = ab->base.sv;
    /* A second first request (a retry moved the connection) starts over. */
    conn_release(sv, c);
    if (ev->server < 0 || (size_t)ev->server >= sv->n) {
        return;
    }
    size_t n = ev->nobjects < AGE_MAX_OBJECTS ? ev->nobjects : AGE_MAX_OBJECTS;
    for (size_t k = 0; k < n; k++) {
        uint64_t w = ev->objects[k].work;
        c->obj[k].key = ev->objects[k].key;
        c->obj[k].work = w < AGE_WORK_MAX ? w : AGE_WORK_MAX;
    }
    qsort(c->obj, n, sizeof(c->obj[0]), obj_cmp);
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        if (m > 0 && c->obj[m - 1].key == c->obj[k].key) {
            if (c->obj[k].work > c->obj[m - 1].work) {
                c->obj[m - 1].work = c->obj[k].work;
            }
        } else {
            c->obj[m++] = c->obj[k];
        }
    }
    c->nobjects = (uint16_t)m;
    uint64_t total = 0;
    for (size_t k = 0; k < m; k++) {
        total = work_add(total, c->obj[k].work);
    }
    /* Past the cap: counted, not consumable; duplicates of stored keys skipped. */
    for (size_t k = n; k < ev->nobjects; k++) {
        if (conn_find(c, ev->objects[k].key) == NULL) {
            total = work_add(total, ev->objects[k].work);
        }
    }
    c->server = ev->server;
    c->flags = AGE_BOUND;
    c->start_us = ev->now_us;
    c->remaining = total;
    c->held = 0;
    conn_set_held(sv, c, (int64_t)total);
}

static void
age_on_request(struct dm_balancer *b, const struct dm_bal_event *ev)
{
    struct age_balancer *ab = (struct age_balancer *)b;
    struct age_conn *c = ev->conn;
    if (c == NULL) {
        return;
    }
    if (ev->first) {
        conn_bind(ab, c, ev);
        return;
    }
    if (!(c->flags & AGE_BOUND)) {
        return;
    }
    struct age_obj *o = conn_find(c, ev->object);
    if (o == NULL || (o->work & AGE_CONSUMED)) {
        return;
    }
    c->remaining = o->work < c->remaining ? c->remaining - o->work : 0;
    o->work |= AGE_CONSUMED;
    conn_set_held(b->sv, c, conn_aged(ab, c, ev->now_us));
}

static void
age_on_tick(struct dm_balancer *b, const struct dm_bal_event *ev)
{
    struct age_balancer *ab = (struct age_balancer *)b;
    struct age_conn *c = ev->conn;
    if (c == NULL || !(c->flags & AGE_BOUND)) {
        return;
    }
    conn_set_held(b->sv, c, conn_aged(ab, c, ev->now_us));
}

static void
age_on_close(struct dm_balancer *b, const struct dm_bal_event *ev)
{
    struct age_conn *c = ev->conn;
    if (c != NULL) {
        conn_release(b->sv, c);
    }
}

static void
age_destroy(struct dm_balancer *b)
{
    free(b);
}

const struct dm_balancer_ops dm_bal_age = {
    .name = "age",
    .needs = DM_BAL_NEEDS_WORK | DM_BAL_NEEDS_OBJECTS | DM_BAL_BINDS_CONNECTIONS,
    .create = age_create,
    .pick = age_pick,
    .on_request = age_on_request,
    .on_close = age_on_close,
    .destroy = age_destroy,
    .conn_state_size = age_conn_state_size,
    .on_tick = age_on_tick,
};
