/* Tests for balancers/p2c_shadow.c: power of two choices on the shadow cost. */
#include "dm_test.h"

#include <stdbool.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/fixture.h"
#include "balancers/registry.h"
#include "balancers/servers.h"

static struct dm_fixture *
p2c_fixture_create(const unsigned *caps, size_t n)
{
    return dm_fixture_create_by_capacity(&dm_bal_p2c_shadow, caps, n);
}

static void
test_create_sets_ops_and_table(void **state)
{
    (void)state;
    struct dm_fixture *f = p2c_fixture_create(NULL, 3);
    assert_ptr_equal(f->bal->ops, &dm_bal_p2c_shadow);
    assert_ptr_equal(f->bal->sv, f->sv);
    assert_ptr_equal(dm_balancer_find("p2c-shadow"), &dm_bal_p2c_shadow);
    dm_fixture_destroy(f);
}

static void
test_unusable_and_tried_servers_are_never_picked(void **state)
{
    (void)state;
    enum { N = 9 };
    static const unsigned caps[N] = { 8, 8, 8, 8, 8, 8, 1, 2, 3 };
    struct dm_fixture *f = p2c_fixture_create(caps, N);
    static const struct dm_fixture_out out = {
        .down = 0, .passive = 1, .asleep = 2, .booting = 3, .draining = 4, .tried = 5
    };
    dm_fixture_take_out(f, &out);
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
    assert_true(dm_fixture_picks_within(f, 1, 1000));
    dm_fixture_destroy(f);
}

static void
test_no_usable_server_gives_no_server(void **state)
{
    (void)state;
    struct dm_fixture *f = p2c_fixture_create(NULL, 3);
    atomic_store(&f->sv->s[0].host->down, true);
    atomic_store(&f->sv->s[1].host->power, DM_POWER_ASLEEP);
    f->pick.tried = f->tried;
    f->tried[0] = 1u << 2;
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    f->tried[0] = 0;
    /* One eligible server: no second choice, it is the pick. */
    for (int k = 0; k < 10; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 2);
    }
    dm_fixture_destroy(f);

    f = p2c_fixture_create(NULL, 0);
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    dm_fixture_destroy(f);
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
        struct dm_fixture *f = p2c_fixture_create(cases[c].caps, 2);
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
        dm_fixture_destroy(f);
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
    struct dm_fixture *f = p2c_fixture_create(caps, 3);
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
    dm_fixture_destroy(f);
}

/*
 * A closed loop with servers that work at the speed of their capacity
 * (dm_fixture_run_capacity_loop): the picks follow capacity as long as the
 * policy keeps every server busy, which the shadow cost does by giving a
 * server a queue in proportion to its speed.
 */
static void
test_picks_follow_capacity_under_load(void **state)
{
    (void)state;
    enum { STEPS = 200000, WARMUP = 2000 };
    /* Capacities 1 and 4: one pick in five for the slow server. */
    static const unsigned two[2] = { 1, 4 };
    struct dm_fixture *f = p2c_fixture_create(two, 2);
    uint64_t picks[8] = { 0 };
    dm_fixture_run_capacity_loop(f, 20, STEPS, WARMUP, picks);
    double share = (double)picks[1] / (STEPS - WARMUP);
    print_message("capacities 1 and 4: the fast server took %.4f of the picks\n", share);
    assert_true(share > 0.78 && share < 0.82);
    dm_fixture_destroy(f);

    enum { N = 6 };
    static const unsigned caps[N] = { 1, 1, 2, 4, 8, 16 };
    f = p2c_fixture_create(caps, N);
    uint64_t p6[N] = { 0 };
    dm_fixture_run_capacity_loop(f, 128, STEPS, WARMUP, p6);
    for (size_t i = 0; i < N; i++) {
        double want = (double)(STEPS - WARMUP) * caps[i] / 32.0;
        print_message("capacity %u: %.3f of its share\n", caps[i], p6[i] / want);
        assert_true(p6[i] > want * 0.95 && p6[i] < want * 1.05);
    }
    dm_fixture_destroy(f);
}

/* A big pool with two servers awake: the draws miss, the linear passes find them. */
static void
test_mostly_asleep_pool(void **state)
{
    (void)state;
    enum { N = 1024 };
    struct dm_fixture *f = p2c_fixture_create(NULL, N);
    for (size_t i = 0; i < N; i++) {
        atomic_store(&f->sv->s[i].host->power, DM_POWER_ASLEEP);
    }
    atomic_store(&f->sv->s[100].host->power, DM_POWER_AWAKE);
    atomic_store(&f->sv->s[900].host->power, DM_POWER_AWAKE);
    atomic_store(&f->sv->s[900].inflight, 5);
    for (int k = 0; k < 200; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 100);
    }
    atomic_store(&f->sv->s[100].inflight, 6);
    for (int k = 0; k < 200; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 900);
    }
    dm_fixture_destroy(f);
}

/* Four threads share the balancer and the table, as the workers do. */
static void
test_concurrent_picks_add_up(void **state)
{
    (void)state;
    enum { N = 16 };
    static const unsigned caps[N] = { 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8 };
    struct dm_fixture *f = p2c_fixture_create(caps, N);
    dm_fixture_run_pickers(f, 3, 100000, 0); /* server 3 down, no keys */
    dm_fixture_destroy(f);
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
