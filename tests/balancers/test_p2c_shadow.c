/* Tests for balancers/p2c_shadow.c: power of two choices on the shadow cost. */
#include "dm_test.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/registry.h"
#include "balancers/rng.h"
#include "balancers/servers.h"

#define MAX_SERVERS 1024

struct p2c_fixture {
    struct dm_servers *sv;
    struct dm_balancer *bal;
    struct dm_pick pick;
    struct dm_rng rng;
    uint8_t tried[MAX_SERVERS / 8];
};

static struct p2c_fixture *
p2c_fixture_create(const unsigned *caps, size_t n)
{
    struct p2c_fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->sv = dm_servers_create(n);
    assert_non_null(f->sv);
    for (size_t i = 0; i < n; i++) {
        f->sv->s[i].capacity = caps != NULL ? caps[i] : 1;
        /* Weights are not this policy's business: make them disagree. */
        f->sv->s[i].weight = (unsigned)(n - i);
    }
    f->bal = dm_balancer_create(&dm_bal_p2c_shadow, f->sv, NULL);
    assert_non_null(f->bal);
    dm_rng_init(&f->rng, 42);
    f->pick.rng = &f->rng;
    f->pick.now_us = 1000000;
    return f;
}

static void
p2c_fixture_destroy(struct p2c_fixture *f)
{
    dm_balancer_destroy(f->bal);
    dm_servers_destroy(f->sv);
    free(f);
}

static void
test_create_sets_ops_and_table(void **state)
{
    (void)state;
    struct p2c_fixture *f = p2c_fixture_create(NULL, 3);
    assert_ptr_equal(f->bal->ops, &dm_bal_p2c_shadow);
    assert_ptr_equal(f->bal->sv, f->sv);
    assert_ptr_equal(dm_balancer_find("p2c-shadow"), &dm_bal_p2c_shadow);
    p2c_fixture_destroy(f);
}

static void
test_unusable_and_tried_servers_are_never_picked(void **state)
{
    (void)state;
    enum { N = 9 };
    static const unsigned caps[N] = { 8, 8, 8, 8, 8, 8, 1, 2, 3 };
    struct p2c_fixture *f = p2c_fixture_create(caps, N);
    atomic_store(&f->sv->s[0].down, true);
    atomic_store(&f->sv->s[1].down_until_us, f->pick.now_us + 1);
    atomic_store(&f->sv->s[2].power, DM_POWER_ASLEEP);
    atomic_store(&f->sv->s[3].power, DM_POWER_BOOTING);
    atomic_store(&f->sv->s[4].power, DM_POWER_DRAINING);
    f->pick.tried = f->tried;
    f->tried[0] = 1u << 5;
    unsigned count[N] = { 0 };
    for (int k = 0; k < 30000; k++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 6, 8);
        count[i]++;
        dm_counter_add(&f->sv->s[i].inflight, 1);
        if (k % 50 == 0) {
            for (size_t j = 0; j < N; j++) {
                atomic_store(&f->sv->s[j].inflight, 0);
            }
        }
    }
    assert_true(count[6] > 2000 && count[7] > 4000 && count[8] > 6000);
    f->pick.now_us++;
    bool seen = false;
    for (int k = 0; k < 1000 && !seen; k++) {
        seen = dm_balancer_pick(f->bal, &f->pick) == 1;
    }
    assert_true(seen);
    p2c_fixture_destroy(f);
}

static void
test_no_usable_server_gives_no_server(void **state)
{
    (void)state;
    struct p2c_fixture *f = p2c_fixture_create(NULL, 3);
    atomic_store(&f->sv->s[0].down, true);
    atomic_store(&f->sv->s[1].power, DM_POWER_ASLEEP);
    f->pick.tried = f->tried;
    f->tried[0] = 1u << 2;
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    f->tried[0] = 0;
    /* One eligible server: no second choice, it is the pick. */
    for (int k = 0; k < 10; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 2);
    }
    p2c_fixture_destroy(f);

    f = p2c_fixture_create(NULL, 0);
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    p2c_fixture_destroy(f);
}

/* With two servers both are always drawn: the pick is the lower shadow cost. */
static void
test_picks_the_lower_shadow_cost(void **state)
{
    (void)state;
    static const struct {
        unsigned caps[2];
        uint64_t inflight[2];
        int want;
    } cases[] = {
        { { 1, 4 }, { 0, 0 }, 1 },   /* idle: 1/1 against 1/4, the fast one */
        { { 1, 4 }, { 0, 3 }, 1 },   /* 1/1 against 4/4: a tie, see below */
        { { 1, 4 }, { 0, 4 }, 0 },   /* 1/1 against 5/4 */
        { { 1, 4 }, { 1, 4 }, 1 },   /* 2/1 against 5/4 */
        { { 3, 2 }, { 5, 3 }, 1 },   /* 6/3 against 4/2: a tie */
        { { 3, 2 }, { 4, 3 }, 0 },   /* 5/3 against 4/2 */
        { { 10, 1 }, { 30, 2 }, 1 }, /* 31/10 against 3/1 */
        { { 10, 1 }, { 29, 2 }, 0 }, /* 30/10 against 3/1: a tie */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct p2c_fixture *f = p2c_fixture_create(cases[c].caps, 2);
        atomic_store(&f->sv->s[0].inflight, cases[c].inflight[0]);
        atomic_store(&f->sv->s[1].inflight, cases[c].inflight[1]);
        uint64_t c0 = (cases[c].inflight[0] + 1) * cases[c].caps[1];
        uint64_t c1 = (cases[c].inflight[1] + 1) * cases[c].caps[0];
        unsigned count[2] = { 0 };
        for (int k = 0; k < 10000; k++) {
            count[dm_balancer_pick(f->bal, &f->pick)]++;
        }
        if (c0 == c1) {
            /* A tie goes to the first drawn, drawn by capacity. */
            double want = 10000.0 * cases[c].caps[0] / (cases[c].caps[0] + cases[c].caps[1]);
            assert_true(count[0] > want * 0.9 && count[0] < want * 1.1);
        } else {
            assert_int_equal(count[cases[c].want], 10000);
        }
        p2c_fixture_destroy(f);
    }
}

/*
 * Draws are by capacity, without replacement. Capacities 1, 2, 5 and costs
 * ordered 0 < 1 < 2: server 0 wins whenever drawn, with probability
 * 1/8 + 2/8 * 1/6 + 5/8 * 1/3 = 3/8; server 2 never.
 */
static void
test_draws_are_by_capacity(void **state)
{
    (void)state;
    enum { PICKS = 200000 };
    static const unsigned caps[3] = { 1, 2, 5 };
    struct p2c_fixture *f = p2c_fixture_create(caps, 3);
    atomic_store(&f->sv->s[0].inflight, 0);
    atomic_store(&f->sv->s[1].inflight, 100);
    atomic_store(&f->sv->s[2].inflight, 1000);
    unsigned count[3] = { 0 };
    for (int k = 0; k < PICKS; k++) {
        count[dm_balancer_pick(f->bal, &f->pick)]++;
    }
    assert_int_equal(count[2], 0);
    double want = PICKS * 3.0 / 8.0;
    assert_true(count[0] > want * 0.98 && count[0] < want * 1.02);
    p2c_fixture_destroy(f);
}

/*
 * A closed loop with servers that work at the speed of their capacity: LIVE
 * requests are always in the system; at each step one ends, at a busy server
 * chosen with probability proportional to its capacity (the next to finish),
 * and a new one is picked. The picks then follow capacity as long as the
 * policy keeps every server busy, which the shadow cost does by giving a
 * server a queue in proportion to its speed.
 */
static void
run_closed_loop(struct p2c_fixture *f, size_t n, uint64_t live, int steps, int warmup,
                uint64_t *picks)
{
    for (uint64_t k = 0; k < live; k++) {
        dm_counter_add(&f->sv->s[dm_balancer_pick(f->bal, &f->pick)].inflight, 1);
    }
    for (int step = 0; step < steps; step++) {
        uint64_t busy = 0;
        for (size_t j = 0; j < n; j++) {
            busy += dm_counter_get(&f->sv->s[j].inflight) > 0 ? f->sv->s[j].capacity : 0;
        }
        uint64_t r = dm_rng_below(&f->rng, busy);
        size_t j = 0;
        for (;; j++) {
            uint64_t c = dm_counter_get(&f->sv->s[j].inflight) > 0 ? f->sv->s[j].capacity : 0;
            if (r < c) {
                break;
            }
            r -= c;
        }
        dm_counter_sub(&f->sv->s[j].inflight, 1);
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 0, n - 1);
        dm_counter_add(&f->sv->s[i].inflight, 1);
        if (step >= warmup) {
            picks[i]++;
        }
    }
}

static void
test_picks_follow_capacity_under_load(void **state)
{
    (void)state;
    enum { STEPS = 200000, WARMUP = 2000 };
    /* Capacities 1 and 4: one pick in five for the slow server. */
    static const unsigned two[2] = { 1, 4 };
    struct p2c_fixture *f = p2c_fixture_create(two, 2);
    uint64_t picks[8] = { 0 };
    run_closed_loop(f, 2, 20, STEPS, WARMUP, picks);
    double share = (double)picks[1] / (STEPS - WARMUP);
    print_message("capacities 1 and 4: the fast server took %.4f of the picks\n", share);
    assert_true(share > 0.78 && share < 0.82);
    p2c_fixture_destroy(f);

    enum { N = 6 };
    static const unsigned caps[N] = { 1, 1, 2, 4, 8, 16 };
    f = p2c_fixture_create(caps, N);
    uint64_t p6[N] = { 0 };
    run_closed_loop(f, N, 128, STEPS, WARMUP, p6);
    for (size_t i = 0; i < N; i++) {
        double want = (double)(STEPS - WARMUP) * caps[i] / 32.0;
        print_message("capacity %u: %.3f of its share\n", caps[i], p6[i] / want);
        assert_true(p6[i] > want * 0.95 && p6[i] < want * 1.05);
    }
    p2c_fixture_destroy(f);
}

/* A big pool with two servers awake: the draws miss, the linear passes find them. */
static void
test_mostly_asleep_pool(void **state)
{
    (void)state;
    enum { N = 1024 };
    struct p2c_fixture *f = p2c_fixture_create(NULL, N);
    for (size_t i = 0; i < N; i++) {
        atomic_store(&f->sv->s[i].power, DM_POWER_ASLEEP);
    }
    atomic_store(&f->sv->s[100].power, DM_POWER_AWAKE);
    atomic_store(&f->sv->s[900].power, DM_POWER_AWAKE);
    atomic_store(&f->sv->s[900].inflight, 5);
    for (int k = 0; k < 200; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 100);
    }
    atomic_store(&f->sv->s[100].inflight, 6);
    for (int k = 0; k < 200; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 900);
    }
    p2c_fixture_destroy(f);
}

/* Four threads share the balancer and the table, as the workers do. */
struct thread_arg {
    struct dm_balancer *bal;
    struct dm_servers *sv;
    uint64_t seed;
    uint64_t picks[16];
    unsigned errors;
};

static void *
picker_thread(void *p)
{
    struct thread_arg *a = p;
    struct dm_rng rng;
    dm_rng_init(&rng, a->seed);
    struct dm_pick in = { .rng = &rng, .now_us = 1 };
    int open[64];
    size_t nopen = 0;
    for (int k = 0; k < 100000; k++) {
        int i = dm_balancer_pick(a->bal, &in);
        if (i < 0 || i >= 16 || i == 3) {
            a->errors++;
            continue;
        }
        a->picks[i]++;
        dm_counter_add(&a->sv->s[i].conns, 1);
        dm_counter_add(&a->sv->s[i].inflight, 1);
        open[nopen++] = i;
        if (nopen == 64) {
            size_t j = (size_t)dm_rng_below(&rng, nopen);
            dm_counter_sub(&a->sv->s[open[j]].conns, 1);
            dm_counter_sub(&a->sv->s[open[j]].inflight, 1);
            open[j] = open[--nopen];
        }
    }
    while (nopen > 0) {
        nopen--;
        dm_counter_sub(&a->sv->s[open[nopen]].conns, 1);
        dm_counter_sub(&a->sv->s[open[nopen]].inflight, 1);
    }
    return NULL;
}

static void
test_concurrent_picks_add_up(void **state)
{
    (void)state;
    enum { N = 16, THREADS = 4 };
    static const unsigned caps[N] = { 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8 };
    struct p2c_fixture *f = p2c_fixture_create(caps, N);
    atomic_store(&f->sv->s[3].down, true);
    struct thread_arg args[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (struct thread_arg){ .bal = f->bal, .sv = f->sv, .seed = 100 + t };
        assert_int_equal(pthread_create(&th[t], NULL, picker_thread, &args[t]), 0);
    }
    uint64_t total = 0;
    for (int t = 0; t < THREADS; t++) {
        assert_int_equal(pthread_join(th[t], NULL), 0);
        assert_int_equal(args[t].errors, 0);
        for (size_t i = 0; i < N; i++) {
            total += args[t].picks[i];
        }
    }
    assert_int_equal(total, THREADS * 100000);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(dm_counter_get(&f->sv->s[i].conns), 0);
        assert_int_equal(dm_counter_get(&f->sv->s[i].inflight), 0);
    }
    p2c_fixture_destroy(f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_sets_ops_and_table),
        cmocka_unit_test(test_unusable_and_tried_servers_are_never_picked),
        cmocka_unit_test(test_no_usable_server_gives_no_server),
        cmocka_unit_test(test_picks_the_lower_shadow_cost),
        cmocka_unit_test(test_draws_are_by_capacity),
        cmocka_unit_test(test_picks_follow_capacity_under_load),
        cmocka_unit_test(test_mostly_asleep_pool),
        cmocka_unit_test(test_concurrent_picks_add_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
