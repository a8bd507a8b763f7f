/* Tests for balancers/leastconn.c: weighted least connections. */
#include "dm_test.h"

#include <stdbool.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/fixture.h"
#include "balancers/registry.h"
#include "balancers/rng.h"
#include "balancers/servers.h"

static struct dm_fixture *
lc_fixture_create(const unsigned *weights, const uint64_t *conns, size_t n)
{
    struct dm_fixture *f = dm_fixture_create(n);
    dm_fixture_set_weights(f, weights);
    for (size_t i = 0; i < n; i++) {
        atomic_store(&f->sv->s[i].conns, conns != NULL ? conns[i] : 0);
    }
    dm_fixture_set_balancer(f, dm_balancer_find("leastconn"), NULL);
    return f;
}

static void
test_create_sets_ops_and_table(void **state)
{
    (void)state;
    static const unsigned w[] = { 1 };
    struct dm_fixture *f = lc_fixture_create(w, NULL, 1);
    assert_ptr_equal(f->bal->ops, &dm_bal_leastconn);
    assert_ptr_equal(f->bal->sv, f->sv);
    dm_fixture_destroy(f);
}

static void
test_picks_least_connections_per_weight(void **state)
{
    (void)state;
    static const struct {
        unsigned w[3];
        uint64_t conns[3];
        int want;
    } cases[] = {
        { { 1, 1, 1 }, { 3, 1, 2 }, 1 },
        { { 1, 1, 2 }, { 10, 4, 6 }, 2 },   /* 6/2 = 3 beats 4/1 */
        { { 3, 2, 1 }, { 5, 3, 2 }, 1 },    /* 3/2 beats 5/3 and 2/1 */
        { { 3, 2, 1 }, { 4, 3, 2 }, 0 },    /* 4/3 beats 3/2 */
        { { 1, 100, 1 }, { 1, 99, 1 }, 1 }, /* 0.99 beats 1 */
        { { 1, 100, 1 }, { 0, 1, 1 }, 0 },  /* an idle server beats any load */
        { { 7, 1, 5 }, { 1000, 200, 701 }, 2 },
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct dm_fixture *f = lc_fixture_create(cases[c].w, cases[c].conns, 3);
        /* Every start offset of the rotor gives the same answer. */
        for (int k = 0; k < 9; k++) {
            assert_int_equal(dm_balancer_pick(f->bal, &f->pick), cases[c].want);
        }
        dm_fixture_destroy(f);
    }
}

static void
test_ties_rotate(void **state)
{
    (void)state;
    static const unsigned w[] = { 1, 1, 1, 1 };
    struct dm_fixture *f = lc_fixture_create(w, NULL, 4);
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
test_ties_rotate_among_the_least_loaded_only(void **state)
{
    (void)state;
    /* Servers 0, 2 and 3 all carry one connection per unit of weight. */
    static const unsigned w[] = { 2, 1, 1, 3 };
    static const uint64_t conns[] = { 2, 5, 1, 3 };
    struct dm_fixture *f = lc_fixture_create(w, conns, 4);
    unsigned count[4] = { 0 };
    for (int k = 0; k < 300; k++) {
        count[dm_balancer_pick(f->bal, &f->pick)]++;
    }
    assert_int_equal(count[1], 0);
    assert_true(count[0] >= 75 && count[2] >= 75 && count[3] >= 75);
    dm_fixture_destroy(f);
}

static void
test_unusable_servers_are_never_picked(void **state)
{
    (void)state;
    static const unsigned w[] = { 1, 1, 1, 1, 1 };
    static const uint64_t conns[] = { 0, 0, 0, 9, 9 };
    struct dm_fixture *f = lc_fixture_create(w, conns, 5);
    atomic_store(&f->sv->s[0].host->down, true);
    atomic_store(&f->sv->s[1].host->down_until_us, f->pick.now_us + 1);
    atomic_store(&f->sv->s[2].host->power, DM_POWER_DRAINING);
    /* The idle servers are all unusable, so the loaded ones take everything. */
    for (int k = 0; k < 1000; k++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 3, 4);
        dm_counter_add(&f->sv->s[i].conns, 1);
    }
    assert_int_equal(dm_counter_get(&f->sv->s[3].conns), 509);
    assert_int_equal(dm_counter_get(&f->sv->s[4].conns), 509);
    /* The passive down period ends. */
    f->pick.now_us += 1;
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 1);
    dm_fixture_destroy(f);
}

static void
test_tried_servers_are_skipped(void **state)
{
    (void)state;
    static const unsigned w[] = { 1, 1, 1 };
    static const uint64_t conns[] = { 0, 4, 5 };
    struct dm_fixture *f = lc_fixture_create(w, conns, 3);
    f->pick.tried = f->tried;
    f->tried[0] = 1u << 0;
    for (int k = 0; k < 6; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 1);
    }
    f->tried[0] = 1u << 0 | 1u << 1;
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 2);
    f->tried[0] = 0x07;
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    dm_fixture_destroy(f);
}

static void
test_no_usable_server_gives_no_server(void **state)
{
    (void)state;
    static const unsigned w[] = { 1, 2 };
    struct dm_fixture *f = lc_fixture_create(w, NULL, 2);
    atomic_store(&f->sv->s[0].host->down, true);
    atomic_store(&f->sv->s[1].host->power, DM_POWER_ASLEEP);
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    dm_fixture_destroy(f);

    f = lc_fixture_create(NULL, NULL, 0);
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    dm_fixture_destroy(f);
}

/*
 * A closed loop: every pick opens a connection on the chosen server, and once
 * LIVE connections are open each step also closes one chosen uniformly at
 * random. Servers that hold more connections lose more, so in steady state
 * picks follow the weights; and every pick must go to a server whose
 * conns / weight was the lowest at that moment. LIVE is large because whole
 * connections round in the light servers' favour: with 80 open, weight 1 of
 * 10 gets 8 or 9 of them, and 5% more picks than its share.
 */
static void
test_picks_follow_weights_under_random_closes(void **state)
{
    (void)state;
    enum { N = 4, LIVE = 1000, STEPS = 200000, WARMUP = 2000 };
    static const unsigned w[N] = { 4, 3, 2, 1 };
    struct dm_fixture *f = lc_fixture_create(w, NULL, N);
    uint64_t picks[N] = { 0 };
    uint64_t open = 0;
    for (int step = 0; step < STEPS; step++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 0, N - 1);
        uint64_t ci = dm_counter_get(&f->sv->s[i].conns);
        for (size_t j = 0; j < N; j++) {
            uint64_t cj = dm_counter_get(&f->sv->s[j].conns);
            assert_true(ci * w[j] <= cj * w[i]);
        }
        dm_counter_add(&f->sv->s[i].conns, 1);
        open++;
        if (step >= WARMUP) {
            picks[i]++;
        }
        if (open > LIVE) {
            uint64_t r = dm_rng_below(&f->rng, open);
            size_t j = 0;
            while (r >= dm_counter_get(&f->sv->s[j].conns)) {
                r -= dm_counter_get(&f->sv->s[j].conns);
                j++;
            }
            dm_counter_sub(&f->sv->s[j].conns, 1);
            open--;
        }
    }
    for (size_t i = 0; i < N; i++) {
        double want = (double)(STEPS - WARMUP) * w[i] / 10.0;
        assert_true(picks[i] > want * 0.97 && picks[i] < want * 1.03);
    }
    dm_fixture_destroy(f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_sets_ops_and_table),
        cmocka_unit_test(test_picks_least_connections_per_weight),
        cmocka_unit_test(test_ties_rotate),
        cmocka_unit_test(test_ties_rotate_among_the_least_loaded_only),
        cmocka_unit_test(test_unusable_servers_are_never_picked),
        cmocka_unit_test(test_tried_servers_are_skipped),
        cmocka_unit_test(test_no_usable_server_gives_no_server),
        cmocka_unit_test(test_picks_follow_weights_under_random_closes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
