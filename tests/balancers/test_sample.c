/* Tests for balancers/sample.c: weighted draws of distinct eligible servers. */
#include "dm_test.h"

#include <stdbool.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/rng.h"
#include "balancers/sample.h"
#include "balancers/servers.h"

static void
test_empty_table_draws_nothing(void **state)
{
    (void)state;
    struct dm_sample t = { 0 };
    struct dm_servers *sv = dm_servers_create(0);
    struct dm_rng rng;
    dm_rng_init(&rng, 1);
    struct dm_pick in = { .rng = &rng };
    int out[2];
    assert_int_equal(dm_sample_init(&t, NULL, NULL, 0), 0);
    assert_int_equal(dm_sample_draw(&t, sv, &in, out, 0, 2), 0);
    dm_sample_fini(&t);
    dm_sample_fini(&t);
    dm_servers_destroy(sv);
}

/* Probability that server i is among two drawn by weight without replacement. */
static double
in_pair_probability(const double *w, size_t n, size_t i)
{
    double total = 0;
    for (size_t j = 0; j < n; j++) {
        total += w[j];
    }
    double p = w[i] / total;
    for (size_t j = 0; j < n; j++) {
        if (j != i) {
            p += w[j] / total * w[i] / (total - w[j]);
        }
    }
    return p;
}

/*
 * Two draws follow weighted sampling without replacement, whether they come
 * from rejection (everything usable) or from the linear passes (most of the
 * table's weight unusable, so rejection gives up).
 */
static void
test_two_draws_follow_weights_without_replacement(void **state)
{
    (void)state;
    enum { N = 64, PICKS = 200000 };
    static const double w4[] = { 1, 2, 3, 4 };
    for (int mostly_down = 0; mostly_down <= 1; mostly_down++) {
        struct dm_servers *sv = dm_servers_create(N);
        uint64_t w[N];
        for (size_t i = 0; i < N; i++) {
            /* Servers 0..3 weigh 1..4; the 60 others are heavy and, in round 2, down. */
            w[i] = i < 4 ? i + 1 : 1000;
            if (mostly_down && i >= 4) {
                atomic_store(&sv->s[i].host->down, true);
            }
        }
        struct dm_sample t;
        assert_int_equal(dm_sample_init(&t, NULL, w, N), 0);
        struct dm_rng rng;
        dm_rng_init(&rng, 7);
        struct dm_pick in = { .rng = &rng, .now_us = 5 };
        unsigned count[N] = { 0 };
        for (int k = 0; k < PICKS; k++) {
            int out[2];
            assert_int_equal(dm_sample_draw(&t, sv, &in, out, 0, 2), 2);
            assert_int_not_equal(out[0], out[1]);
            count[out[0]]++;
            count[out[1]]++;
        }
        if (mostly_down) {
            for (size_t i = 0; i < 4; i++) {
                double want = PICKS * in_pair_probability(w4, 4, i);
                assert_true(count[i] > want * 0.98 && count[i] < want * 1.02);
            }
            for (size_t i = 4; i < N; i++) {
                assert_int_equal(count[i], 0);
            }
        } else {
            /* The light servers are rarely drawn; the heavy ones are all alike. */
            unsigned lo = PICKS, hi = 0;
            for (size_t i = 4; i < N; i++) {
                lo = count[i] < lo ? count[i] : lo;
                hi = count[i] > hi ? count[i] : hi;
            }
            double want = 2.0 * PICKS / 60;
            assert_true(lo > want * 0.95 && hi < want * 1.05);
        }
        dm_sample_fini(&t);
        dm_servers_destroy(sv);
    }
}

static void
test_draws_map_entries_to_servers_and_skip_tried(void **state)
{
    (void)state;
    struct dm_servers *sv = dm_servers_create(8);
    static const unsigned members[] = { 6, 2, 5 };
    static const uint64_t w[] = { 1, 1, 0 }; /* 0 counts as 1 */
    struct dm_sample t;
    assert_int_equal(dm_sample_init(&t, members, w, 3), 0);
    struct dm_rng rng;
    dm_rng_init(&rng, 3);
    uint8_t tried[1] = { 1u << 2 };
    struct dm_pick in = { .rng = &rng, .tried = tried };
    unsigned count[8] = { 0 };
    for (int k = 0; k < 30000; k++) {
        int out[3] = { -1, -1, -1 };
        assert_int_equal(dm_sample_draw(&t, sv, &in, out, 0, 3), 2);
        assert_true((out[0] == 6 && out[1] == 5) || (out[0] == 5 && out[1] == 6));
        count[out[0]]++;
    }
    assert_true(count[6] > 14000 && count[5] > 14000);
    /* Continuing a sample that already holds 6 gives 5 only. */
    int out[2] = { 6, -1 };
    assert_int_equal(dm_sample_draw(&t, sv, &in, out, 1, 2), 2);
    assert_int_equal(out[1], 5);
    dm_sample_fini(&t);
    dm_servers_destroy(sv);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_table_draws_nothing),
        cmocka_unit_test(test_two_draws_follow_weights_without_replacement),
        cmocka_unit_test(test_draws_map_entries_to_servers_and_skip_tried),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
