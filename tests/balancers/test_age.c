/* Tests for balancers/age.c: aged potential load with FIN correction. */
#include "dm_test.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/balancer.h"
#include "balancers/fixture.h"
#include "balancers/registry.h"
#include "balancers/rng.h"
#include "balancers/servers.h"

#define HALF_LIFE_US 1000000u /* 1 s, so that tests age in few ticks */
#define T0_US        5000000u

static struct dm_fixture *
age_fixture_create(size_t n, double weight, uint64_t half_life_us)
{
    struct dm_fixture *f = dm_fixture_create(n);
    f->pick.now_us = T0_US;
    struct dm_bal_conf cf = { .age_weight = weight, .age_half_life_us = half_life_us };
    dm_fixture_set_balancer(f, dm_balancer_find("age"), &cf);
    return f;
}

/* Zeroed per-connection state, sized the way the proxy sizes it. */
static void *
conn_create(const struct dm_balancer *b, size_t nobjects)
{
    size_t size = dm_balancer_conn_state_size(b, nobjects);
    assert_true(size > 0);
    void *c = calloc(1, size);
    assert_non_null(c);
    return c;
}

static int64_t
potential(const struct dm_fixture *f, size_t i)
{
    return atomic_load(&f->sv->s[i].potential);
}

static void
first_request(struct dm_balancer *b, void *conn, int server, uint64_t now_us,
              const struct dm_bal_object *objs, size_t n)
{
    struct dm_bal_event ev = {
        .server = server,
        .now_us = now_us,
        .work = 1000,
        .conn = conn,
        .object = 0xfa9e,
        .objects = objs,
        .nobjects = n,
        .first = true,
    };
    dm_balancer_on_request(b, &ev);
}

static void
object_request(struct dm_balancer *b, void *conn, int server, uint64_t now_us, uint64_t key)
{
    struct dm_bal_event ev = {
        .server = server, .now_us = now_us, .work = 10, .conn = conn, .object = key
    };
    dm_balancer_on_request(b, &ev);
}

static void
tick(struct dm_balancer *b, void *conn, int server, uint64_t now_us)
{
    struct dm_bal_event ev = { .server = server, .now_us = now_us, .conn = conn };
    dm_balancer_on_tick(b, &ev);
}

static void
close_conn(struct dm_balancer *b, void *conn, int server, uint64_t now_us)
{
    struct dm_bal_event ev = { .server = server, .now_us = now_us, .conn = conn };
    dm_balancer_on_close(b, &ev);
}

static const struct dm_bal_object page3[] = {
    { .key = 11, .work = 100 },
    { .key = 22, .work = 250 },
    { .key = 33, .work = 51 },
};

static void
test_registered_with_its_hooks(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(1, 0.1, 0);
    assert_ptr_equal(f->bal->ops, &dm_bal_age);
    assert_ptr_equal(f->bal->sv, f->sv);
    assert_non_null(dm_bal_age.conn_state_size);
    assert_non_null(dm_bal_age.on_tick);
    assert_non_null(dm_bal_age.on_close);
    /* The state grows with the page, up to a cap. */
    size_t s0 = dm_balancer_conn_state_size(f->bal, 0);
    size_t s1 = dm_balancer_conn_state_size(f->bal, 1);
    assert_true(s0 > 0 && s1 > s0);
    assert_true(dm_balancer_conn_state_size(f->bal, 256) >
                dm_balancer_conn_state_size(f->bal, 255));
    assert_int_equal(dm_balancer_conn_state_size(f->bal, 257),
                     dm_balancer_conn_state_size(f->bal, 256));
    assert_int_equal(dm_balancer_conn_state_size(f->bal, 100000),
                     dm_balancer_conn_state_size(f->bal, 256));
    dm_fixture_destroy(f);
}

static void
test_first_request_adds_exactly_the_page_potential(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(3, 0.1, HALF_LIFE_US);
    void *c = conn_create(f->bal, 3);
    first_request(f->bal, c, 1, T0_US, page3, 3);
    assert_int_equal(potential(f, 0), 0);
    assert_int_equal(potential(f, 1), 401);
    assert_int_equal(potential(f, 2), 0);
    /* A tick at the same instant changes nothing. */
    tick(f->bal, c, 1, T0_US);
    assert_int_equal(potential(f, 1), 401);
    /* A page without embedded objects brings no potential. */
    void *c2 = conn_create(f->bal, 0);
    first_request(f->bal, c2, 2, T0_US, NULL, 0);
    assert_int_equal(potential(f, 2), 0);
    close_conn(f->bal, c, 1, T0_US);
    close_conn(f->bal, c2, 2, T0_US);
    assert_int_equal(potential(f, 1), 0);
    free(c);
    free(c2);
    dm_fixture_destroy(f);
}

static void
test_one_half_life_halves_it(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(2, 0.1, HALF_LIFE_US);
    void *c = conn_create(f->bal, 3);
    first_request(f->bal, c, 0, T0_US, page3, 3);
    tick(f->bal, c, 0, T0_US + HALF_LIFE_US);
    assert_in_range(potential(f, 0), 200, 201);
    tick(f->bal, c, 0, T0_US + 2 * HALF_LIFE_US);
    assert_in_range(potential(f, 0), 100, 101);
    /* Many half-lives: nothing is left, and close has nothing to remove. */
    tick(f->bal, c, 0, T0_US + 100 * (uint64_t)HALF_LIFE_US);
    assert_int_equal(potential(f, 0), 0);
    close_conn(f->bal, c, 0, T0_US + 100 * (uint64_t)HALF_LIFE_US);
    assert_int_equal(potential(f, 0), 0);
    free(c);
    dm_fixture_destroy(f);
}

static void
test_default_half_life_is_ten_seconds(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(1, 0.1, 0);
    static const struct dm_bal_object big[] = { { .key = 1, .work = 1000000 } };
    void *c = conn_create(f->bal, 1);
    first_request(f->bal, c, 0, T0_US, big, 1);
    tick(f->bal, c, 0, T0_US + 10000000);
    assert_int_equal(potential(f, 0), 500000);
    close_conn(f->bal, c, 0, T0_US + 10000000);
    assert_int_equal(potential(f, 0), 0);
    free(c);
    dm_fixture_destroy(f);
}

/* Ticks every 100 ms follow 2^(-t / half-life) and never raise the potential. */
static void
test_ticks_follow_the_decay_and_only_shrink(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(1, 0.1, HALF_LIFE_US);
    static const struct dm_bal_object big[] = { { .key = 1, .work = 123456789 } };
    void *c = conn_create(f->bal, 1);
    first_request(f->bal, c, 0, T0_US, big, 1);
    int64_t last = potential(f, 0);
    for (uint64_t t = 0; t <= 80 * HALF_LIFE_US; t += 100000) {
        tick(f->bal, c, 0, T0_US + t);
        int64_t p = potential(f, 0);
        double want = 123456789.0 * exp2(-(double)t / HALF_LIFE_US);
        assert_true(p <= last);
        assert_true((double)p >= want - 1 && (double)p <= want + 1);
        last = p;
    }
    assert_int_equal(last, 0);
    /* A clock that steps back cannot bring potential back. */
    tick(f->bal, c, 0, T0_US);
    assert_int_equal(potential(f, 0), 0);
    close_conn(f->bal, c, 0, T0_US);
    free(c);
    dm_fixture_destroy(f);
}

static void
test_requested_object_subtracts_its_work_once(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(2, 0.1, HALF_LIFE_US);
    void *c = conn_create(f->bal, 3);
    first_request(f->bal, c, 1, T0_US, page3, 3);
    object_request(f->bal, c, 1, T0_US, 22);
    assert_int_equal(potential(f, 1), 151);
    object_request(f->bal, c, 1, T0_US, 22);
    assert_int_equal(potential(f, 1), 151);
    object_request(f->bal, c, 1, T0_US, 33);
    assert_int_equal(potential(f, 1), 100);
    /* After a half-life, the last object takes what is left of it. */
    tick(f->bal, c, 1, T0_US + HALF_LIFE_US);
    assert_int_equal(potential(f, 1), 50);
    object_request(f->bal, c, 1, T0_US + HALF_LIFE_US, 11);
    assert_int_equal(potential(f, 1), 0);
    close_conn(f->bal, c, 1, T0_US + HALF_LIFE_US);
    assert_int_equal(potential(f, 1), 0);
    assert_int_equal(potential(f, 0), 0);
    free(c);
    dm_fixture_destroy(f);
}

static void
test_unknown_object_changes_nothing(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(1, 0.1, HALF_LIFE_US);
    void *c = conn_create(f->bal, 3);
    first_request(f->bal, c, 0, T0_US, page3, 3);
    object_request(f->bal, c, 0, T0_US + 10, 12);
    object_request(f->bal, c, 0, T0_US + 10, 0);
    object_request(f->bal, c, 0, T0_US + 10, UINT64_MAX);
    object_request(f->bal, c, 0, T0_US + 10, 0xfa9e); /* the page itself */
    assert_int_equal(potential(f, 0), 401);
    close_conn(f->bal, c, 0, T0_US + 10);
    free(c);
    dm_fixture_destroy(f);
}

static void
test_duplicates_in_the_page_count_once(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(1, 0.1, HALF_LIFE_US);
    static const struct dm_bal_object dup[] = {
        { .key = 7, .work = 300 }, { .key = 5, .work = 40 },  { .key = 7, .work = 300 },
        { .key = 9, .work = 2 },   { .key = 7, .work = 300 },
    };
    void *c = conn_create(f->bal, 5);
    first_request(f->bal, c, 0, T0_US, dup, 5);
    assert_int_equal(potential(f, 0), 342);
    object_request(f->bal, c, 0, T0_US, 7);
    assert_int_equal(potential(f, 0), 42);
    object_request(f->bal, c, 0, T0_US, 7);
    object_request(f->bal, c, 0, T0_US, 7);
    assert_int_equal(potential(f, 0), 42);
    close_conn(f->bal, c, 0, T0_US);
    assert_int_equal(potential(f, 0), 0);
    free(c);
    dm_fixture_destroy(f);
}

static void
test_fin_removes_the_rest_at_once(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(2, 0.1, HALF_LIFE_US);
    void *a = conn_create(f->bal, 3);
    void *b = conn_create(f->bal, 3);
    first_request(f->bal, a, 1, T0_US, page3, 3);
    first_request(f->bal, b, 1, T0_US + 1, page3, 3);
    object_request(f->bal, b, 1, T0_US + 2, 11);
    assert_int_equal(potential(f, 1), 401 + 301);
    close_conn(f->bal, a, 1, T0_US + 3);
    assert_int_equal(potential(f, 1), 301);
    /* Events after the FIN change nothing; a second close neither. */
    object_request(f->bal, a, 1, T0_US + 4, 22);
    tick(f->bal, a, 1, T0_US + HALF_LIFE_US);
    close_conn(f->bal, a, 1, T0_US + HALF_LIFE_US);
    assert_int_equal(potential(f, 1), 301);
    close_conn(f->bal, b, 1, T0_US + 5);
    assert_int_equal(potential(f, 1), 0);
    assert_int_equal(potential(f, 0), 0);
    free(a);
    free(b);
    dm_fixture_destroy(f);
}

static void
test_no_state_and_bad_server_are_ignored(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(2, 0.1, HALF_LIFE_US);
    first_request(f->bal, NULL, 0, T0_US, page3, 3);
    object_request(f->bal, NULL, 0, T0_US, 11);
    tick(f->bal, NULL, 0, T0_US);
    close_conn(f->bal, NULL, 0, T0_US);
    void *c = conn_create(f->bal, 3);
    first_request(f->bal, c, DM_NO_SERVER, T0_US, page3, 3);
    first_request(f->bal, c, 2, T0_US, page3, 3);
    /* Requests on a connection that never had a first request. */
    void *d = conn_create(f->bal, 3);
    object_request(f->bal, d, 0, T0_US, 11);
    tick(f->bal, d, 0, T0_US);
    close_conn(f->bal, d, 0, T0_US);
    assert_int_equal(potential(f, 0), 0);
    assert_int_equal(potential(f, 1), 0);
    close_conn(f->bal, c, 0, T0_US);
    free(c);
    free(d);
    dm_fixture_destroy(f);
}

/* A second first request (a retry on another server) moves the potential. */
static void
test_second_first_request_moves_the_potential(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(2, 0.1, HALF_LIFE_US);
    void *c = conn_create(f->bal, 3);
    first_request(f->bal, c, 0, T0_US, page3, 3);
    object_request(f->bal, c, 0, T0_US, 22);
    assert_int_equal(potential(f, 0), 151);
    first_request(f->bal, c, 1, T0_US + 7, page3, 3);
    assert_int_equal(potential(f, 0), 0);
    assert_int_equal(potential(f, 1), 401);
    close_conn(f->bal, c, 1, T0_US + 8);
    assert_int_equal(potential(f, 1), 0);
    free(c);
    dm_fixture_destroy(f);
}

/* Objects past the cap count in the potential but cannot be consumed. */
static void
test_objects_past_the_cap_count_but_are_not_consumable(void **state)
{
    (void)state;
    enum { N = 300, CAP = 256 };
    struct dm_fixture *f = age_fixture_create(1, 0.1, HALF_LIFE_US);
    struct dm_bal_object *objs = calloc(N + 1, sizeof(*objs));
    assert_non_null(objs);
    for (size_t k = 0; k < N; k++) {
        objs[k].key = 1000 - k; /* descending, so sorting matters */
        objs[k].work = 3;
    }
    objs[N] = objs[0]; /* a duplicate past the cap of a stored key */
    void *c = conn_create(f->bal, N + 1);
    first_request(f->bal, c, 0, T0_US, objs, N + 1);
    assert_int_equal(potential(f, 0), 3 * N);
    for (size_t k = 0; k < N; k++) {
        object_request(f->bal, c, 0, T0_US, objs[k].key);
    }
    assert_int_equal(potential(f, 0), 3 * (N - CAP));
    close_conn(f->bal, c, 0, T0_US);
    assert_int_equal(potential(f, 0), 0);
    free(c);
    free(objs);
    dm_fixture_destroy(f);
}

static void
set_load(struct dm_fixture *f, size_t i, unsigned cap, int64_t work, int64_t pot)
{
    f->sv->s[i].capacity = cap;
    atomic_store(&f->sv->s[i].inflight_work, work);
    atomic_store(&f->sv->s[i].potential, pot);
}

static void
test_picks_lowest_weighted_load_per_capacity(void **state)
{
    (void)state;
    static const struct {
        double w;
        unsigned cap[3];
        int64_t work[3];
        int64_t pot[3];
        int want;
    } cases[] = {
        { 0.1, { 1, 1, 1 }, { 300, 100, 200 }, { 0, 0, 0 }, 1 },
        { 0.1, { 1, 1, 1 }, { 300, 100, 200 }, { 0, 2500, 0 }, 2 },    /* 100 + 250 > 200 */
        { 0.1, { 1, 1, 1 }, { 300, 100, 200 }, { 0, 900, 0 }, 1 },     /* 100 + 90 < 200 */
        { 0.1, { 4, 1, 2 }, { 1000, 300, 501 }, { 0, 0, 0 }, 0 },      /* 250 < 300, 250.5 */
        { 0.1, { 4, 1, 2 }, { 1000, 300, 480 }, { 0, 0, 0 }, 2 },      /* 240 < 250 */
        { 0.1, { 4, 1, 2 }, { 1000, 300, 480 }, { 1000, 0, 300 }, 2 }, /* 275 > 255 */
        { 1.0, { 8, 1, 1 }, { 0, 0, 0 }, { 800, 99, 101 }, 1 },
        { 0.0, { 1, 1, 1 }, { 300, 100, 200 }, { 0, 1000000, 0 }, 1 }, /* w = 0 ignores it */
        { 0.0, { 1, 2, 1 }, { 50, 100, 60 }, { 0, 5, 0 }, 1 },         /* 100/2 = 50 ties 50 */
        { 0.5, { 1, 1, 1 }, { -40, 10, 5 }, { 0, 0, 0 }, 0 },          /* negative reads as 0 */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct dm_fixture *f = age_fixture_create(3, cases[c].w, HALF_LIFE_US);
        for (size_t i = 0; i < 3; i++) {
            set_load(f, i, cases[c].cap[i], cases[c].work[i], cases[c].pot[i]);
        }
        for (int k = 0; k < 9; k++) {
            int got = dm_balancer_pick(f->bal, &f->pick);
            if (c == 8) {
                assert_true(got == 0 || got == 1);
            } else {
                assert_int_equal(got, cases[c].want);
            }
        }
        dm_fixture_destroy(f);
    }
}

static void
test_ties_rotate(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(4, 0.1, HALF_LIFE_US);
    unsigned count[4] = { 0 };
    int last = DM_NO_SERVER;
    for (int k = 0; k < 400; k++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 0, 3);
        assert_int_not_equal(i, last);
        last = i;
        count[i]++;
    }
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(count[i], 100);
    }
    dm_fixture_destroy(f);
}

static void
test_unusable_and_tried_servers_are_never_picked(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(6, 0.1, HALF_LIFE_US);
    for (size_t i = 0; i < 6; i++) {
        set_load(f, i, 1, i < 4 ? 0 : 1000, 0);
    }
    atomic_store(&f->sv->s[0].host->down, true);
    atomic_store(&f->sv->s[1].host->down_until_us, f->pick.now_us + 1);
    atomic_store(&f->sv->s[2].host->power, DM_POWER_ASLEEP);
    atomic_store(&f->sv->s[3].host->power, DM_POWER_BOOTING);
    for (int k = 0; k < 1000; k++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 4, 5);
    }
    f->pick.tried = f->tried;
    f->tried[0] = 1u << 4;
    for (int k = 0; k < 10; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 5);
    }
    f->tried[0] = 1u << 4 | 1u << 5;
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    /* The passive down period ends. */
    f->pick.now_us += 1;
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 1);
    dm_fixture_destroy(f);

    f = age_fixture_create(0, 0.1, HALF_LIFE_US);
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    dm_fixture_destroy(f);
}

/* The potential a first request writes steers the next picks away. */
static void
test_potential_steers_later_picks(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(2, 0.5, HALF_LIFE_US);
    void *c = conn_create(f->bal, 3);
    int i = dm_balancer_pick(f->bal, &f->pick);
    first_request(f->bal, c, i, T0_US, page3, 3);
    for (int k = 0; k < 10; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 1 - i);
    }
    /* Once the connection closes the two are even again and ties rotate. */
    close_conn(f->bal, c, i, T0_US);
    int a = dm_balancer_pick(f->bal, &f->pick);
    int b = dm_balancer_pick(f->bal, &f->pick);
    assert_int_not_equal(a, b);
    free(c);
    dm_fixture_destroy(f);
}

/*
 * A driver of many connections with random pages, requests, ticks and closes.
 * It keeps the page of each connection, so that it can bound what the table
 * may hold: a server's potential never exceeds the unrequested work of the
 * pages bound to it, and it only grows on a first request.
 */
enum { DRV_CONNS = 48, DRV_PAGE_MAX = 40 };

struct drv_conn {
    void *state;
    int server; /* DM_NO_SERVER when closed */
    struct dm_bal_object page[DRV_PAGE_MAX];
    bool requested[DRV_PAGE_MAX];
    size_t n;
};

struct driver {
    struct dm_balancer *bal;
    struct dm_rng rng;
    uint64_t now_us;
    struct drv_conn conns[DRV_CONNS];
    uint64_t first_requests;
};

static void
driver_init(struct driver *d, struct dm_balancer *bal, uint64_t seed)
{
    memset(d, 0, sizeof(*d));
    d->bal = bal;
    dm_rng_init(&d->rng, seed);
    d->now_us = T0_US;
    for (size_t k = 0; k < DRV_CONNS; k++) {
        d->conns[k].state = calloc(1, dm_balancer_conn_state_size(bal, DRV_PAGE_MAX));
        d->conns[k].server = DM_NO_SERVER;
    }
}

static void
driver_fini(struct driver *d)
{
    for (size_t k = 0; k < DRV_CONNS; k++) {
        free(d->conns[k].state);
    }
}

/*
 * One random step on one random connection. Returns the kind of step (0
 * first request, 1 object, 2 tick, 3 close), or -1 when nothing happened.
 * Pages draw keys from a small range, so they hold duplicates and requests
 * for unknown objects happen.
 */
static int
driver_step(struct driver *d, struct dm_pick *in)
{
    struct drv_conn *c = &d->conns[dm_rng_below(&d->rng, DRV_CONNS)];
    d->now_us += dm_rng_below(&d->rng, 20000);
    uint64_t r = dm_rng_below(&d->rng, 100);
    if (c->server == DM_NO_SERVER) {
        in->now_us = d->now_us;
        int s = dm_balancer_pick(d->bal, in);
        if (s == DM_NO_SERVER) {
            return -1;
        }
        c->n = dm_rng_below(&d->rng, DRV_PAGE_MAX + 1);
        for (size_t k = 0; k < c->n; k++) {
            c->page[k].key = dm_rng_below(&d->rng, 64);
            c->page[k].work = dm_rng_below(&d->rng, 300000);
            c->requested[k] = false;
        }
        c->server = s;
        first_request(d->bal, c->state, s, d->now_us, c->page, c->n);
        d->first_requests++;
        return 0;
    }
    if (r < 55) {
        uint64_t key = dm_rng_below(&d->rng, 64);
        object_request(d->bal, c->state, c->server, d->now_us, key);
        for (size_t k = 0; k < c->n; k++) {
            c->requested[k] |= c->page[k].key == key;
        }
        return 1;
    }
    if (r < 90) {
        tick(d->bal, c->state, c->server, d->now_us);
        return 2;
    }
    close_conn(d->bal, c->state, c->server, d->now_us);
    c->server = DM_NO_SERVER;
    return 3;
}

static void
driver_close_all(struct driver *d)
{
    for (size_t k = 0; k < DRV_CONNS; k++) {
        struct drv_conn *c = &d->conns[k];
        if (c->server != DM_NO_SERVER) {
            close_conn(d->bal, c->state, c->server, d->now_us);
            c->server = DM_NO_SERVER;
        }
    }
}

/* Upper bound of what server s may hold: unrequested work, duplicates and all. */
static int64_t
driver_bound(const struct driver *d, int s)
{
    int64_t sum = 0;
    for (size_t k = 0; k < DRV_CONNS; k++) {
        const struct drv_conn *c = &d->conns[k];
        for (size_t j = 0; c->server == s && j < c->n; j++) {
            sum += c->requested[j] ? 0 : (int64_t)c->page[j].work;
        }
    }
    return sum;
}

static void
test_random_interleavings_never_negative_and_zero_at_rest(void **state)
{
    (void)state;
    enum { N = 5, STEPS = 200000 };
    for (uint64_t seed = 1; seed <= 4; seed++) {
        struct dm_fixture *f =
            age_fixture_create(N, seed == 4 ? 0.0 : 0.1 * (double)seed, seed * 300000);
        for (size_t i = 0; i < N; i++) {
            f->sv->s[i].capacity = 1 + (unsigned)i % 3;
        }
        struct driver *d = malloc(sizeof(*d));
        assert_non_null(d);
        driver_init(d, f->bal, seed);
        int64_t last[N] = { 0 };
        for (int step = 0; step < STEPS; step++) {
            int kind = driver_step(d, &f->pick);
            for (size_t i = 0; i < N; i++) {
                int64_t p = potential(f, i);
                assert_true(p >= 0);
                assert_true(p <= driver_bound(d, (int)i));
                if (kind != 0) {
                    assert_true(p <= last[i]);
                }
                last[i] = p;
            }
            if (step % 50000 == 49999) {
                /* Everyone closes now and then: the table is exactly zero. */
                driver_close_all(d);
                for (size_t i = 0; i < N; i++) {
                    assert_int_equal(potential(f, i), 0);
                    last[i] = 0;
                }
            }
        }
        assert_true(d->first_requests > 10000);
        driver_close_all(d);
        for (size_t i = 0; i < N; i++) {
            assert_int_equal(potential(f, i), 0);
        }
        driver_fini(d);
        free(d);
        dm_fixture_destroy(f);
    }
}

/*
 * Four threads, each driving its own connections, on one shared balancer and
 * table; a fifth watches the table. Every counter is exactly zero at the end.
 */
enum { THREADS = 4, THREAD_STEPS = 200000 };

struct thread_arg {
    struct dm_balancer *bal;
    uint64_t seed;
};

static atomic_bool watch_stop;
static atomic_uint_fast64_t negatives_seen;

static void *
thread_drive(void *p)
{
    struct thread_arg *a = p;
    struct driver *d = malloc(sizeof(*d));
    if (d == NULL) {
        return p;
    }
    driver_init(d, a->bal, a->seed);
    struct dm_rng rng;
    dm_rng_init(&rng, a->seed ^ 0x5eed);
    struct dm_pick in = { .rng = &rng, .now_us = T0_US };
    for (int step = 0; step < THREAD_STEPS; step++) {
        driver_step(d, &in);
    }
    driver_close_all(d);
    driver_fini(d);
    free(d);
    return NULL;
}

static void *
thread_watch(void *p)
{
    const struct dm_servers *sv = p;
    while (!atomic_load(&watch_stop)) {
        for (size_t i = 0; i < sv->n; i++) {
            if (atomic_load_explicit(&sv->s[i].potential, memory_order_relaxed) < 0) {
                atomic_fetch_add(&negatives_seen, 1);
            }
        }
    }
    return NULL;
}

static void
test_threads_on_a_shared_table_end_at_zero(void **state)
{
    (void)state;
    struct dm_fixture *f = age_fixture_create(4, 0.1, HALF_LIFE_US);
    pthread_t th[THREADS];
    struct thread_arg args[THREADS];
    pthread_t watcher;
    atomic_store(&watch_stop, false);
    atomic_store(&negatives_seen, 0);
    assert_int_equal(pthread_create(&watcher, NULL, thread_watch, f->sv), 0);
    for (size_t t = 0; t < THREADS; t++) {
        args[t] = (struct thread_arg){ .bal = f->bal, .seed = 100 + t };
        assert_int_equal(pthread_create(&th[t], NULL, thread_drive, &args[t]), 0);
    }
    for (size_t t = 0; t < THREADS; t++) {
        void *ret = &ret;
        assert_int_equal(pthread_join(th[t], &ret), 0);
        assert_null(ret);
    }
    atomic_store(&watch_stop, true);
    assert_int_equal(pthread_join(watcher, NULL), 0);
    assert_int_equal(atomic_load(&negatives_seen), 0);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(potential(f, i), 0);
    }
    dm_fixture_destroy(f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registered_with_its_hooks),
        cmocka_unit_test(test_first_request_adds_exactly_the_page_potential),
        cmocka_unit_test(test_one_half_life_halves_it),
        cmocka_unit_test(test_default_half_life_is_ten_seconds),
        cmocka_unit_test(test_ticks_follow_the_decay_and_only_shrink),
        cmocka_unit_test(test_requested_object_subtracts_its_work_once),
        cmocka_unit_test(test_unknown_object_changes_nothing),
        cmocka_unit_test(test_duplicates_in_the_page_count_once),
        cmocka_unit_test(test_fin_removes_the_rest_at_once),
        cmocka_unit_test(test_no_state_and_bad_server_are_ignored),
        cmocka_unit_test(test_second_first_request_moves_the_potential),
        cmocka_unit_test(test_objects_past_the_cap_count_but_are_not_consumable),
        cmocka_unit_test(test_picks_lowest_weighted_load_per_capacity),
        cmocka_unit_test(test_ties_rotate),
        cmocka_unit_test(test_unusable_and_tried_servers_are_never_picked),
        cmocka_unit_test(test_potential_steers_later_picks),
        cmocka_unit_test(test_random_interleavings_never_negative_and_zero_at_rest),
        cmocka_unit_test(test_threads_on_a_shared_table_end_at_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
