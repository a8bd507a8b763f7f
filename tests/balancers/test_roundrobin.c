/* Tests for balancers/roundrobin.c: smooth weighted round robin. */
#include "dm_test.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/balancer.h"
#include "balancers/fixture.h"
#include "balancers/registry.h"
#include "balancers/servers.h"

static struct dm_fixture *
rr_fixture_create(const unsigned *weights, size_t n)
{
    struct dm_fixture *f = dm_fixture_create(n);
    dm_fixture_set_weights(f, weights);
    dm_fixture_set_balancer(f, dm_balancer_find("roundrobin"), NULL);
    return f;
}

static unsigned
sum_weights(const unsigned *w, size_t n)
{
    unsigned total = 0;
    for (size_t i = 0; i < n; i++) {
        total += w[i];
    }
    return total;
}

static void
test_create_sets_ops_and_table(void **state)
{
    (void)state;
    static const unsigned w[] = { 1, 1 };
    struct dm_fixture *f = rr_fixture_create(w, 2);
    assert_ptr_equal(f->bal->ops, &dm_bal_roundrobin);
    assert_ptr_equal(f->bal->sv, f->sv);
    dm_fixture_destroy(f);
}

static void
test_weights_5_1_1_give_smooth_sequence(void **state)
{
    (void)state;
    static const unsigned w[] = { 5, 1, 1 };
    /* nginx's documented order: a a b a c a a, repeated. */
    static const int want[] = { 0, 0, 1, 0, 2, 0, 0 };
    struct dm_fixture *f = rr_fixture_create(w, 3);
    for (int round = 0; round < 3; round++) {
        for (size_t k = 0; k < 7; k++) {
            assert_int_equal(dm_balancer_pick(f->bal, &f->pick), want[k]);
        }
    }
    dm_fixture_destroy(f);
}

static void
test_whole_periods_match_weights_exactly(void **state)
{
    (void)state;
    static const unsigned sets[][4] = {
        { 1, 2, 3, 4 }, { 7, 3, 1, 1 }, { 2, 4, 6, 8 }, { 10, 1, 1, 1 }, { 1, 1, 1, 1 },
    };
    for (size_t set = 0; set < sizeof(sets) / sizeof(sets[0]); set++) {
        const unsigned *w = sets[set];
        struct dm_fixture *f = rr_fixture_create(w, 4);
        unsigned total = sum_weights(w, 4);
        /* Start at an arbitrary point of the period: the ticket is shared. */
        for (unsigned k = 0; k < 13; k++) {
            dm_balancer_pick(f->bal, &f->pick);
        }
        unsigned count[4] = { 0 };
        for (unsigned k = 0; k < 10 * total; k++) {
            int i = dm_balancer_pick(f->bal, &f->pick);
            assert_in_range(i, 0, 3);
            count[i]++;
        }
        for (size_t i = 0; i < 4; i++) {
            assert_int_equal(count[i], 10 * w[i]);
        }
        dm_fixture_destroy(f);
    }
}

/*
 * In smooth WRR each server's current value stays within (-W, (n-1)W) for a
 * weight sum W, so over any run of L picks a server's count differs from
 * L * w / W by less than n. A burst schedule (all of a, then all of b) fails it.
 */
static void
test_any_window_is_close_to_weights(void **state)
{
    (void)state;
    static const unsigned sets[][3] = { { 50, 50, 1 }, { 5, 1, 1 }, { 9, 7, 3 }, { 100, 1, 1 } };
    for (size_t set = 0; set < sizeof(sets) / sizeof(sets[0]); set++) {
        const unsigned *w = sets[set];
        struct dm_fixture *f = rr_fixture_create(w, 3);
        unsigned total = sum_weights(w, 3);
        int *seq = calloc(2 * total, sizeof(*seq));
        assert_non_null(seq);
        for (unsigned k = 0; k < 2 * total; k++) {
            seq[k] = dm_balancer_pick(f->bal, &f->pick);
        }
        for (unsigned start = 0; start < total; start++) {
            long count[3] = { 0 };
            for (unsigned len = 1; len <= total; len++) {
                count[seq[start + len - 1]]++;
                for (size_t i = 0; i < 3; i++) {
                    /* |count - len * w / W| < n, scaled by W to stay in integers. */
                    long dev = count[i] * (long)total - (long)len * (long)w[i];
                    assert_true(labs(dev) < 3 * (long)total);
                }
            }
        }
        free(seq);
        dm_fixture_destroy(f);
    }
}

static void
test_large_weights_are_scaled_in_proportion(void **state)
{
    (void)state;
    /* gcd 1 and a sum above the 64Ki schedule cap. */
    static const unsigned w[] = { 70001, 30000, 50000, 1 };
    struct dm_fixture *f = rr_fixture_create(w, 4);
    unsigned total = sum_weights(w, 4);
    unsigned count[4] = { 0 };
    const unsigned picks = 4 * 65536;
    for (unsigned k = 0; k < picks; k++) {
        count[dm_balancer_pick(f->bal, &f->pick)]++;
    }
    for (size_t i = 0; i < 3; i++) {
        double want = (double)picks * w[i] / total;
        assert_true(count[i] > want * 0.999 && count[i] < want * 1.001);
    }
    /* The lightest server keeps a slot in every period. */
    assert_true(count[3] >= 4);
    dm_fixture_destroy(f);
}

static void
test_down_server_is_never_picked(void **state)
{
    (void)state;
    static const unsigned w[] = { 5, 1, 1 };
    struct dm_fixture *f = rr_fixture_create(w, 3);
    atomic_store(&f->sv->s[0].host->down, true);
    unsigned count[3] = { 0 };
    for (int k = 0; k < 1000; k++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 1, 2);
        count[i]++;
    }
    /* The down server's share is split by weight, not handed to its neighbour. */
    assert_int_equal(count[1], 500);
    assert_int_equal(count[2], 500);
    dm_fixture_destroy(f);
}

static void
test_down_server_share_keeps_other_ratios(void **state)
{
    (void)state;
    static const unsigned w[] = { 2, 6, 3, 1 };
    struct dm_fixture *f = rr_fixture_create(w, 4);
    atomic_store(&f->sv->s[1].host->down, true);
    unsigned count[4] = { 0 };
    for (int k = 0; k < 6 * 100; k++) {
        count[dm_balancer_pick(f->bal, &f->pick)]++;
    }
    assert_int_equal(count[0], 200);
    assert_int_equal(count[1], 0);
    assert_int_equal(count[2], 300);
    assert_int_equal(count[3], 100);
    dm_fixture_destroy(f);
}

static void
test_passive_down_until_is_respected(void **state)
{
    (void)state;
    static const unsigned w[] = { 1, 3, 1 };
    struct dm_fixture *f = rr_fixture_create(w, 3);
    atomic_store(&f->sv->s[1].host->down_until_us, f->pick.now_us + 500);
    for (int k = 0; k < 100; k++) {
        assert_int_not_equal(dm_balancer_pick(f->bal, &f->pick), 1);
    }
    /* Once now_us reaches the deadline the server is back. */
    f->pick.now_us += 500;
    unsigned count[3] = { 0 };
    for (int k = 0; k < 500; k++) {
        count[dm_balancer_pick(f->bal, &f->pick)]++;
    }
    assert_int_equal(count[1], 300);
    dm_fixture_destroy(f);
}

static void
test_tried_servers_are_skipped(void **state)
{
    (void)state;
    static const unsigned w[] = { 4, 2, 1, 1 };
    struct dm_fixture *f = rr_fixture_create(w, 4);
    f->pick.tried = f->tried;
    f->tried[0] = 1u << 0 | 1u << 2;
    for (int k = 0; k < 200; k++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_true(i == 1 || i == 3);
    }
    f->tried[0] = 0x0f;
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    dm_fixture_destroy(f);
}

static void
test_no_usable_server_gives_no_server(void **state)
{
    (void)state;
    static const unsigned w[] = { 3, 1, 2 };
    struct dm_fixture *f = rr_fixture_create(w, 3);
    atomic_store(&f->sv->s[0].host->down, true);
    atomic_store(&f->sv->s[1].host->power, DM_POWER_ASLEEP);
    atomic_store(&f->sv->s[2].host->down_until_us, f->pick.now_us + 1);
    for (int k = 0; k < 20; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    }
    /* One coming back is found again wherever the ticket stands. */
    atomic_store(&f->sv->s[1].host->power, DM_POWER_AWAKE);
    for (int k = 0; k < 20; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 1);
    }
    dm_fixture_destroy(f);
}

static void
test_empty_table_gives_no_server(void **state)
{
    (void)state;
    struct dm_fixture *f = rr_fixture_create(NULL, 0);
    assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
    dm_fixture_destroy(f);
}

#define THREADS        4
#define PERIODS_PER_TH 20000

struct rr_worker {
    pthread_t tid;
    struct dm_balancer *bal;
    unsigned period;
    unsigned count[4];
};

static void *
rr_worker_run(void *arg)
{
    struct rr_worker *w = arg;
    struct dm_pick pick = { .now_us = 1 };
    for (unsigned k = 0; k < PERIODS_PER_TH * w->period; k++) {
        int i = dm_balancer_pick(w->bal, &pick);
        if (i >= 0 && i < 4) {
            w->count[i]++;
        }
    }
    return NULL;
}

static void
test_concurrent_picks_keep_exact_totals(void **state)
{
    (void)state;
    static const unsigned w[] = { 5, 3, 1, 1 };
    struct dm_fixture *f = rr_fixture_create(w, 4);
    struct rr_worker workers[THREADS];
    memset(workers, 0, sizeof(workers));
    for (int t = 0; t < THREADS; t++) {
        workers[t].bal = f->bal;
        workers[t].period = sum_weights(w, 4);
        assert_int_equal(pthread_create(&workers[t].tid, NULL, rr_worker_run, &workers[t]), 0);
    }
    unsigned total[4] = { 0 };
    for (int t = 0; t < THREADS; t++) {
        assert_int_equal(pthread_join(workers[t].tid, NULL), 0);
        for (size_t i = 0; i < 4; i++) {
            total[i] += workers[t].count[i];
        }
    }
    /* Every ticket was handed out once, so whole periods were served. */
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(total[i], THREADS * PERIODS_PER_TH * w[i]);
    }
    dm_fixture_destroy(f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_sets_ops_and_table),
        cmocka_unit_test(test_weights_5_1_1_give_smooth_sequence),
        cmocka_unit_test(test_whole_periods_match_weights_exactly),
        cmocka_unit_test(test_any_window_is_close_to_weights),
        cmocka_unit_test(test_large_weights_are_scaled_in_proportion),
        cmocka_unit_test(test_down_server_is_never_picked),
        cmocka_unit_test(test_down_server_share_keeps_other_ratios),
        cmocka_unit_test(test_passive_down_until_is_respected),
        cmocka_unit_test(test_tried_servers_are_skipped),
        cmocka_unit_test(test_no_usable_server_gives_no_server),
        cmocka_unit_test(test_empty_table_gives_no_server),
        cmocka_unit_test(test_concurrent_picks_keep_exact_totals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
