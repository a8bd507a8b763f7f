/*
 * SPECweb-style scoring (bench/load/score.c): the good/tolerable/fail
 * boundaries at 2 s and 4 s (and custom ones), status 0, 4xx and 5xx, the
 * failure kinds and their names, and the counters.
 */
#include "dm_test.h"

#include <stdbool.h>
#include <string.h>

#include "bench/load/score.h"

#define S 1000000u /* one second in microseconds */

static void
test_default_boundaries(void **state)
{
    (void)state;
    const struct dm_score_bounds b = DM_SCORE_DEFAULT_BOUNDS;
    assert_int_equal(b.good_us, 2 * S);
    assert_int_equal(b.tolerable_us, 4 * S);
    const struct {
        unsigned status;
        uint64_t us;
        enum dm_score want;
    } cases[] = {
        { 200, 0, DM_SCORE_GOOD },
        { 200, 2 * S - 1, DM_SCORE_GOOD },
        { 200, 2 * S, DM_SCORE_TOLERABLE },
        { 200, 4 * S - 1, DM_SCORE_TOLERABLE },
        { 200, 4 * S, DM_SCORE_FAIL },
        { 200, UINT64_MAX, DM_SCORE_FAIL },
        /* 1xx..4xx are valid responses, scored by time. */
        { 1, 5, DM_SCORE_GOOD },
        { 304, 2 * S - 1, DM_SCORE_GOOD },
        { 404, 1, DM_SCORE_GOOD },
        { 404, 2 * S, DM_SCORE_TOLERABLE },
        { 404, 4 * S, DM_SCORE_FAIL },
        { 499, 3 * S, DM_SCORE_TOLERABLE },
        /* No response, or a 5xx (and anything above), fail however fast. */
        { 0, 0, DM_SCORE_FAIL },
        { 0, 1, DM_SCORE_FAIL },
        { 0, 2 * S, DM_SCORE_FAIL },
        { 500, 0, DM_SCORE_FAIL },
        { 500, 1, DM_SCORE_FAIL },
        { 503, 2 * S - 1, DM_SCORE_FAIL },
        { 599, 1, DM_SCORE_FAIL },
        { 600, 1, DM_SCORE_FAIL },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum dm_score got = dm_score(&b, cases[i].status, cases[i].us);
        if (got != cases[i].want || dm_score(NULL, cases[i].status, cases[i].us) != got) {
            fail_msg("status %u after %llu us: %d, want %d", cases[i].status,
                     (unsigned long long)cases[i].us, got, cases[i].want);
        }
    }
}

static void
test_custom_boundaries(void **state)
{
    (void)state;
    const struct dm_score_bounds b = { .good_us = 100, .tolerable_us = 200 };
    assert_int_equal(dm_score(&b, 200, 99), DM_SCORE_GOOD);
    assert_int_equal(dm_score(&b, 200, 100), DM_SCORE_TOLERABLE);
    assert_int_equal(dm_score(&b, 200, 199), DM_SCORE_TOLERABLE);
    assert_int_equal(dm_score(&b, 200, 200), DM_SCORE_FAIL);
    /* Equal bounds: nothing is tolerable. */
    const struct dm_score_bounds eq = { .good_us = 100, .tolerable_us = 100 };
    assert_int_equal(dm_score(&eq, 200, 99), DM_SCORE_GOOD);
    assert_int_equal(dm_score(&eq, 200, 100), DM_SCORE_FAIL);
    const struct dm_score_bounds zero = { 0, 0 };
    assert_int_equal(dm_score(&zero, 200, 0), DM_SCORE_FAIL);
}

static void
test_fail_kind_names(void **state)
{
    (void)state;
    const char *want[DM_FAIL_KINDS] = {
        [DM_FAIL_SLOW] = "slow",       [DM_FAIL_CONNECT] = "connect", [DM_FAIL_RESET] = "reset",
        [DM_FAIL_TIMEOUT] = "timeout", [DM_FAIL_5XX] = "5xx",         [DM_FAIL_PARSE] = "parse",
    };
    for (int k = 0; k < DM_FAIL_KINDS; k++) {
        assert_non_null(want[k]);
        assert_string_equal(dm_fail_kind_name((enum dm_fail_kind)k), want[k]);
    }
    assert_string_equal(dm_fail_kind_name(DM_FAIL_KINDS), "?");
    assert_string_equal(dm_fail_kind_name((enum dm_fail_kind) - 1), "?");
}

static uint64_t
kinds_total(const struct dm_score_counts *c)
{
    uint64_t n = 0;
    for (int k = 0; k < DM_FAIL_KINDS; k++) {
        n += c->by_kind[k];
    }
    return n;
}

static void
test_counts_add(void **state)
{
    (void)state;
    struct dm_score_counts c;
    memset(&c, 0, sizeof(c));
    dm_score_counts_add(&c, DM_SCORE_GOOD, DM_FAIL_RESET); /* the kind is ignored */
    dm_score_counts_add(&c, DM_SCORE_GOOD, DM_FAIL_SLOW);
    dm_score_counts_add(&c, DM_SCORE_TOLERABLE, DM_FAIL_5XX);
    dm_score_counts_add(&c, DM_SCORE_FAIL, DM_FAIL_TIMEOUT);
    dm_score_counts_add(&c, DM_SCORE_FAIL, DM_FAIL_TIMEOUT);
    dm_score_counts_add(&c, DM_SCORE_FAIL, DM_FAIL_PARSE);
    assert_int_equal(c.good, 2);
    assert_int_equal(c.tolerable, 1);
    assert_int_equal(c.fail, 3);
    assert_int_equal(c.by_kind[DM_FAIL_TIMEOUT], 2);
    assert_int_equal(c.by_kind[DM_FAIL_PARSE], 1);
    assert_int_equal(c.by_kind[DM_FAIL_RESET], 0);
    assert_int_equal(c.by_kind[DM_FAIL_5XX], 0);
    assert_int_equal(kinds_total(&c), c.fail);
}

static void
test_counts_record_classifies_failures(void **state)
{
    (void)state;
    struct dm_score_counts c = { 0 };
    const struct dm_score_bounds b = DM_SCORE_DEFAULT_BOUNDS;
    assert_int_equal(dm_score_counts_record(&c, &b, 200, 10, DM_FAIL_CONNECT), DM_SCORE_GOOD);
    assert_int_equal(dm_score_counts_record(&c, &b, 404, 3 * S, DM_FAIL_CONNECT),
                     DM_SCORE_TOLERABLE);
    assert_int_equal(dm_score_counts_record(&c, &b, 200, 4 * S, DM_FAIL_CONNECT), DM_SCORE_FAIL);
    assert_int_equal(dm_score_counts_record(&c, &b, 502, 10, DM_FAIL_CONNECT), DM_SCORE_FAIL);
    assert_int_equal(dm_score_counts_record(&c, &b, 500, 5 * S, DM_FAIL_CONNECT), DM_SCORE_FAIL);
    assert_int_equal(dm_score_counts_record(&c, NULL, 0, 10, DM_FAIL_CONNECT), DM_SCORE_FAIL);
    assert_int_equal(dm_score_counts_record(&c, NULL, 0, 5 * S, DM_FAIL_TIMEOUT), DM_SCORE_FAIL);
    assert_int_equal(dm_score_counts_record(&c, NULL, 0, 1, DM_FAIL_RESET), DM_SCORE_FAIL);
    assert_int_equal(c.good, 1);
    assert_int_equal(c.tolerable, 1);
    assert_int_equal(c.fail, 6);
    assert_int_equal(c.by_kind[DM_FAIL_SLOW], 1);
    assert_int_equal(c.by_kind[DM_FAIL_5XX], 2); /* a slow 5xx is a 5xx */
    assert_int_equal(c.by_kind[DM_FAIL_CONNECT], 1);
    assert_int_equal(c.by_kind[DM_FAIL_TIMEOUT], 1);
    assert_int_equal(c.by_kind[DM_FAIL_RESET], 1);
    assert_int_equal(c.by_kind[DM_FAIL_PARSE], 0);
    assert_int_equal(kinds_total(&c), c.fail);
}

static void
test_counts_merge(void **state)
{
    (void)state;
    struct dm_score_counts a = { 0 }, b = { 0 }, all = { 0 }, zero = { 0 };
    for (unsigned i = 0; i < 1000; i++) {
        unsigned status = i % 11 == 0 ? 0 : i % 13 == 0 ? 503 : 200;
        uint64_t us = (uint64_t)i * 5000;
        enum dm_fail_kind none = i % 2 ? DM_FAIL_RESET : DM_FAIL_TIMEOUT;
        dm_score_counts_record(&all, NULL, status, us, none);
        dm_score_counts_record(i % 3 ? &a : &b, NULL, status, us, none);
    }
    struct dm_score_counts m = { 0 };
    dm_score_counts_merge(&m, &a);
    dm_score_counts_merge(&m, &zero);
    dm_score_counts_merge(&m, &b);
    assert_memory_equal(&m, &all, sizeof(m));
    assert_true(all.good > 0 && all.tolerable > 0 && all.fail > 0);
    assert_true(all.by_kind[DM_FAIL_RESET] > 0 && all.by_kind[DM_FAIL_TIMEOUT] > 0);
    assert_true(all.by_kind[DM_FAIL_5XX] > 0 && all.by_kind[DM_FAIL_SLOW] > 0);
    assert_int_equal(all.good + all.tolerable + all.fail, 1000);
    assert_int_equal(kinds_total(&all), all.fail);
    /* from is unchanged. */
    dm_score_counts_merge(&m, &a);
    assert_int_equal(m.good, all.good + a.good);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_boundaries),
        cmocka_unit_test(test_custom_boundaries),
        cmocka_unit_test(test_fail_kind_names),
        cmocka_unit_test(test_counts_add),
        cmocka_unit_test(test_counts_record_classifies_failures),
        cmocka_unit_test(test_counts_merge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
