/* Tests for balancers/hybrid.c: split by class capacity, then power of two in the class. */
#include "dm_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/fixture.h"
#include "balancers/registry.h"
#include "balancers/servers.h"

#define MAX_CLASSES 8

static struct dm_fixture *
hy_fixture_create(const unsigned *caps, size_t n)
{
    return dm_fixture_create_by_capacity(&dm_bal_hybrid, caps, n);
}

/*
 * The split the policy must follow, computed here from the table: the
 * distinct capacities in increasing order, and each class's share, its
 * usable capacity over the pool's. Returns the number of classes.
 */
static size_t
expected_split(const struct dm_fixture *f, unsigned *class_cap, double *share)
{
    size_t nclasses = 0;
    for (size_t i = 0; i < f->sv->n; i++) {
        unsigned c = f->sv->s[i].capacity;
        size_t k = 0;
        while (k < nclasses && class_cap[k] != c) {
            k++;
        }
        if (k == nclasses) {
            size_t at = nclasses++;
            while (at > 0 && class_cap[at - 1] > c) {
                class_cap[at] = class_cap[at - 1];
                at--;
            }
            class_cap[at] = c;
        }
    }
    double total = 0;
    for (size_t k = 0; k < nclasses; k++) {
        share[k] = 0;
        for (size_t i = 0; i < f->sv->n; i++) {
            if (f->sv->s[i].capacity == class_cap[k] &&
                dm_server_is_usable(&f->sv->s[i], f->pick.now_us)) {
                share[k] += class_cap[k];
            }
        }
        total += share[k];
    }
    for (size_t k = 0; k < nclasses; k++) {
        share[k] = total > 0 ? share[k] / total : 0;
    }
    return nclasses;
}

/* Picks `picks` times with no load and checks each class's share within `tol`. */
static void
check_split(struct dm_fixture *f, const double *want, size_t nclasses, int picks, double tol)
{
    unsigned class_cap[MAX_CLASSES];
    double share[MAX_CLASSES];
    assert_int_equal(expected_split(f, class_cap, share), nclasses);
    /* The computed split is exactly the numbers worked out by hand. */
    for (size_t k = 0; k < nclasses; k++) {
        assert_true(fabs(share[k] - want[k]) < 1e-12);
    }
    unsigned count[MAX_CLASSES] = { 0 };
    for (int p = 0; p < picks; p++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 0, f->sv->n - 1);
        assert_true(dm_server_is_usable(&f->sv->s[i], f->pick.now_us));
        size_t k = 0;
        while (class_cap[k] != f->sv->s[i].capacity) {
            k++;
        }
        count[k]++;
    }
    for (size_t k = 0; k < nclasses; k++) {
        double got = (double)count[k] / picks;
        print_message("class of capacity %u: share %.4f, want %.4f\n", class_cap[k], got, want[k]);
        assert_true(fabs(got - want[k]) <= tol);
    }
}

static void
test_create_sets_ops_and_table(void **state)
{
    (void)state;
    struct dm_fixture *f = hy_fixture_create(NULL, 3);
    assert_ptr_equal(f->bal->ops, &dm_bal_hybrid);
    assert_ptr_equal(f->bal->sv, f->sv);
    assert_ptr_equal(dm_balancer_find("hybrid"), &dm_bal_hybrid);
    dm_fixture_destroy(f);
}

static void
test_unusable_and_tried_servers_are_never_picked(void **state)
{
    (void)state;
    enum { N = 10 };
    static const unsigned caps[N] = { 4, 4, 4, 4, 4, 4, 1, 1, 4, 2 };
    struct dm_fixture *f = hy_fixture_create(caps, N);
    static const struct dm_fixture_out out = {
        .down = 0, .passive = 1, .asleep = 2, .booting = 3, .draining = 4, .tried = 5
    };
    dm_fixture_take_out(f, &out);
    unsigned count[N] = { 0 };
    for (int k = 0; k < 30000; k++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 6, 9);
        count[i]++;
        dm_counter_add(&f->sv->s[i].inflight, 1);
        if (k % 50 == 0) {
            for (size_t j = 0; j < N; j++) {
                atomic_store(&f->sv->s[j].inflight, 0);
            }
        }
    }
    /* Server 8 is alone in its class now: it gets the class's share, 4/8. */
    assert_true(count[8] > 14000 && count[8] < 16000);
    assert_true(count[6] > 3000 && count[7] > 3000 && count[9] > 6500);
    f->pick.now_us++;
    assert_true(dm_fixture_picks_within(f, 1, 1000));
    dm_fixture_destroy(f);
}

static void
test_no_usable_server_gives_no_server(void **state)
{
    (void)state;
    static const unsigned caps[3] = { 1, 2, 2 };
    struct dm_fixture *f = hy_fixture_create(caps, 3);
    atomic_store(&f->sv->s[0].host->down, true);
    atomic_store(&f->sv->s[1].host->power, DM_POWER_ASLEEP);
    f->pick.tried = f->tried;
    f->tried[0] = 1u << 2;
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    f->tried[0] = 0;
    for (int k = 0; k < 10; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 2);
    }
    dm_fixture_destroy(f);

    f = hy_fixture_create(NULL, 0);
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    dm_fixture_destroy(f);
}

/*
 * The split follows the usable capacity of each class, and changes as soon
 * as a server goes down or comes back.
 */
static void
test_split_follows_class_capacity(void **state)
{
    (void)state;
    enum { PICKS = 300000 };
    /* Classes 1 (x4), 2 (x2), 4 (x1): capacities 4, 4, 4. */
    static const unsigned caps[7] = { 1, 2, 1, 4, 1, 2, 1 };
    struct dm_fixture *f = hy_fixture_create(caps, 7);
    static const double thirds[3] = { 1.0 / 3, 1.0 / 3, 1.0 / 3 };
    check_split(f, thirds, 3, PICKS, 0.005);

    /* The capacity-4 server goes down: 4 and 4 of 8. */
    atomic_store(&f->sv->s[3].host->down, true);
    static const double halves[3] = { 0.5, 0.5, 0 };
    check_split(f, halves, 3, PICKS, 0.005);

    /* A capacity-2 server falls asleep too: 4 and 2 of 6. */
    atomic_store(&f->sv->s[5].host->power, DM_POWER_ASLEEP);
    static const double two_thirds[3] = { 4.0 / 6, 2.0 / 6, 0 };
    check_split(f, two_thirds, 3, PICKS, 0.005);

    /* Both come back. */
    atomic_store(&f->sv->s[3].host->down, false);
    atomic_store(&f->sv->s[5].host->power, DM_POWER_AWAKE);
    check_split(f, thirds, 3, PICKS, 0.005);
    dm_fixture_destroy(f);

    /* Uneven classes: 1+1+1 = 3, 3+3 = 6, 8: shares 3/17, 6/17, 8/17. */
    static const unsigned caps2[6] = { 8, 3, 1, 3, 1, 1 };
    f = hy_fixture_create(caps2, 6);
    static const double seventeenths[3] = { 3.0 / 17, 6.0 / 17, 8.0 / 17 };
    check_split(f, seventeenths, 3, PICKS, 0.005);
    dm_fixture_destroy(f);
}

/*
 * Inside a class, the better of two: a class of three with 0, 5 and 9
 * requests in flight never gives the third, and gives the first whenever it
 * is one of the two drawn, 2/3 of the class's picks.
 */
static void
test_power_of_two_inside_the_class(void **state)
{
    (void)state;
    enum { PICKS = 110000 };
    static const unsigned caps[4] = { 2, 2, 2, 5 };
    struct dm_fixture *f = hy_fixture_create(caps, 4);
    atomic_store(&f->sv->s[0].inflight, 0);
    atomic_store(&f->sv->s[1].inflight, 5);
    atomic_store(&f->sv->s[2].inflight, 9);
    atomic_store(&f->sv->s[3].inflight, 100); /* alone in its class: load does not matter */
    unsigned count[4] = { 0 };
    for (int k = 0; k < PICKS; k++) {
        count[dm_balancer_pick(f->bal, &f->pick)]++;
    }
    /* The class of capacity 2 holds 6 of 11. */
    assert_int_equal(count[2], 0);
    double cls = PICKS * 6.0 / 11;
    assert_true(count[0] > cls * 2 / 3 * 0.98 && count[0] < cls * 2 / 3 * 1.02);
    assert_true(count[3] > PICKS * 5.0 / 11 * 0.98 && count[3] < PICKS * 5.0 / 11 * 1.02);
    dm_fixture_destroy(f);
}

/*
 * A closed loop with servers that work at the speed of their capacity
 * (dm_fixture_run_capacity_loop): picks follow capacity, every class at the
 * same utilisation.
 */
static void
test_picks_follow_capacity_under_load(void **state)
{
    (void)state;
    enum { N = 8, LIVE = 160, STEPS = 200000, WARMUP = 2000 };
    static const unsigned caps[N] = { 1, 1, 1, 1, 2, 2, 4, 4 };
    struct dm_fixture *f = hy_fixture_create(caps, N);
    uint64_t picks[N] = { 0 };
    dm_fixture_run_capacity_loop(f, LIVE, STEPS, WARMUP, picks);
    for (size_t i = 0; i < N; i++) {
        double want = (double)(STEPS - WARMUP) * caps[i] / 16.0;
        print_message("server %zu capacity %u: %.3f of its share\n", i, caps[i], picks[i] / want);
        assert_true(picks[i] > want * 0.95 && picks[i] < want * 1.05);
    }
    dm_fixture_destroy(f);
}

/* A big pool with three servers awake in two classes: the split still holds. */
static void
test_mostly_asleep_pool(void **state)
{
    (void)state;
    enum { N = 1024, PICKS = 60000 };
    unsigned *caps = calloc(N, sizeof(*caps));
    for (size_t i = 0; i < N; i++) {
        caps[i] = 1 + (unsigned)(i % 4);
    }
    struct dm_fixture *f = hy_fixture_create(caps, N);
    for (size_t i = 0; i < N; i++) {
        atomic_store(&f->sv->s[i].host->power, DM_POWER_ASLEEP);
    }
    /* 4 (capacity 1), 8 (capacity 1), 11 (capacity 4): classes 2 and 4 of 6. */
    atomic_store(&f->sv->s[4].host->power, DM_POWER_AWAKE);
    atomic_store(&f->sv->s[8].host->power, DM_POWER_AWAKE);
    atomic_store(&f->sv->s[11].host->power, DM_POWER_AWAKE);
    unsigned c4 = 0, c8 = 0, c11 = 0;
    for (int k = 0; k < PICKS; k++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        c4 += i == 4;
        c8 += i == 8;
        c11 += i == 11;
    }
    assert_int_equal(c4 + c8 + c11, PICKS);
    assert_true(c11 > PICKS * 4 / 6 * 0.97 && c11 < PICKS * 4 / 6 * 1.03);
    dm_fixture_destroy(f);
    free(caps);
}

/* Four threads share the balancer and the table, as the workers do. */
static void
test_concurrent_picks_add_up(void **state)
{
    (void)state;
    enum { N = 16 };
    static const unsigned caps[N] = { 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8 };
    struct dm_fixture *f = hy_fixture_create(caps, N);
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
        cmocka_unit_test(test_split_follows_class_capacity),
        cmocka_unit_test(test_power_of_two_inside_the_class),
        cmocka_unit_test(test_picks_follow_capacity_under_load),
        cmocka_unit_test(test_mostly_asleep_pool),
        cmocka_unit_test(test_concurrent_picks_add_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
