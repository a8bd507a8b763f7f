/*
 * Latency histograms (bench/load/hist.c): quantiles against the exact ones
 * of a sorted array for several distributions (uniform, exponential,
 * constant, every small value, huge values), each value's bucket read back
 * within 1/256 of it, exact min and max, values past the top, merging equal
 * to adding everything to one histogram, and the empty histogram.
 *
 * The exact quantile at q of n sorted values is the one of rank ceil(q * n)
 * (1-based), as hist.h defines it. Random values come from a fixed LCG.
 */
#include "dm_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/load/hist.h"

struct lcg {
    uint64_t s;
};

/* 53 random bits (Knuth's MMIX LCG, high bits only). */
static uint64_t
lcg_next(struct lcg *r)
{
    r->s = r->s * 6364136223846793005u + 1442695040888963407u;
    return r->s >> 11;
}

/* Uniform in [0, 1). */
static double
lcg_unit(struct lcg *r)
{
    return (double)lcg_next(r) / 9007199254740992.0;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static struct dm_hist *
hist_new(void)
{
    struct dm_hist *h = malloc(sizeof(*h));
    assert_non_null(h);
    dm_hist_init(h);
    return h;
}

/* The worst relative errors seen so far, for the report: quantiles of distributions, read-backs. */
static double worst_quantile, worst_bucket;

static size_t
rank_of(double q, size_t n)
{
    double x = q * (double)n;
    size_t r = (size_t)x;
    if ((double)r < x) {
        r++;
    }
    return r < 1 ? 1 : r;
}

/*
 * Adds the n values v to a histogram and checks its quantiles against the
 * sorted values: min, max and q = 0 and 1 exact, others within 1/256 (and so
 * within the 1% asked for), mean exact when the sum fits.
 */
static void
check_quantiles(const char *what, const uint64_t *v, size_t n)
{
    static const double qs[] = { 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999 };
    struct dm_hist *h = hist_new();
    uint64_t *sorted = malloc(n * sizeof(*sorted));
    assert_non_null(sorted);
    long double sum = 0;
    for (size_t i = 0; i < n; i++) {
        dm_hist_add(h, v[i]);
        sorted[i] = v[i];
        sum += v[i];
    }
    qsort(sorted, n, sizeof(*sorted), cmp_u64);
    assert_int_equal(h->count, n);
    assert_int_equal(h->min, sorted[0]);
    assert_int_equal(h->max, sorted[n - 1]);
    assert_int_equal(dm_hist_quantile(h, 0), sorted[0]);
    assert_int_equal(dm_hist_quantile(h, 1), sorted[n - 1]);
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        uint64_t exact = sorted[rank_of(qs[i], n) - 1];
        uint64_t got = dm_hist_quantile(h, qs[i]);
        double diff = got > exact ? (double)(got - exact) : (double)(exact - got);
        double rel = exact > 0 ? diff / (double)exact : (got == 0 ? 0 : 1);
        if (rel > 1.0 / 256 || rel > 0.01) {
            fail_msg("%s q=%g: got %llu, exact %llu (%.4f%%)", what, qs[i], (unsigned long long)got,
                     (unsigned long long)exact, rel * 100);
        }
        worst_quantile = rel > worst_quantile ? rel : worst_quantile;
    }
    if (sum < 1.8e19L) {
        assert_int_equal(h->sum, (uint64_t)sum);
        assert_true(fabs(dm_hist_mean(h) - (double)(sum / n)) <= 1e-9 * (double)(sum / n));
    }
    free(sorted);
    free(h);
}

static void
test_uniform(void **state)
{
    (void)state;
    struct lcg r = { 1 };
    size_t n = 200000;
    uint64_t *v = malloc(n * sizeof(*v));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        v[i] = lcg_next(&r) % 10000000; /* up to 10 s */
    }
    check_quantiles("uniform 0..10 s", v, n);
    for (size_t i = 0; i < n; i++) {
        v[i] = 1000 + lcg_next(&r) % 1000; /* 1..2 ms: few buckets, many values each */
    }
    check_quantiles("uniform 1..2 ms", v, n);
    free(v);
}

static void
test_exponential(void **state)
{
    (void)state;
    struct lcg r = { 42 };
    size_t n = 200000;
    uint64_t *v = malloc(n * sizeof(*v));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        v[i] = (uint64_t)(-50000.0 * log(1 - lcg_unit(&r))); /* mean 50 ms */
    }
    check_quantiles("exponential, mean 50 ms", v, n);
    for (size_t i = 0; i < n; i++) {
        /* Log-uniform over 35 powers of two: every range of buckets in use. */
        unsigned bits = (unsigned)(lcg_next(&r) % 35);
        v[i] = (lcg_next(&r) >> (53 - 35)) >> (35 - bits);
    }
    check_quantiles("log-uniform 1 us..9 h", v, n);
    free(v);
}

static void
test_constant_is_exact(void **state)
{
    (void)state;
    const uint64_t values[] = {
        0, 1, 127, 128, 255, 256, 257, 123456, 999999, 1u << 30, DM_HIST_TOP
    };
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        struct dm_hist *h = hist_new();
        for (int k = 0; k < 1000; k++) {
            dm_hist_add(h, values[i]);
        }
        /* The bucket's middle, clamped to [min, max], is the value itself. */
        const double qs[] = { 0, 0.001, 0.5, 0.9, 0.99, 0.999, 1 };
        for (size_t j = 0; j < sizeof(qs) / sizeof(qs[0]); j++) {
            assert_int_equal(dm_hist_quantile(h, qs[j]), values[i]);
        }
        assert_true(dm_hist_mean(h) == (double)values[i]);
        free(h);
    }
}

static void
test_small_values_are_exact(void **state)
{
    (void)state;
    /* Every value below 256, value v added v % 7 + 1 times. */
    struct dm_hist *h = hist_new();
    uint64_t sorted[256 * 7];
    size_t n = 0;
    for (uint64_t v = 0; v < 256; v++) {
        for (uint64_t k = 0; k <= v % 7; k++) {
            dm_hist_add(h, v);
            sorted[n++] = v;
        }
    }
    for (double q = 0; q <= 1; q += 1.0 / 1024) {
        assert_int_equal(dm_hist_quantile(h, q), sorted[rank_of(q, n) - 1]);
    }
    free(h);
    /* 0..127 once each: the median is 63, p99 is 126. */
    h = hist_new();
    for (uint64_t v = 0; v < 128; v++) {
        dm_hist_add(h, v);
    }
    assert_int_equal(dm_hist_quantile(h, 0.5), 63);
    assert_int_equal(dm_hist_quantile(h, 0.9), 115);
    assert_int_equal(dm_hist_quantile(h, 0.99), 126);
    assert_int_equal(dm_hist_quantile(h, 0.999), 127);
    assert_true(dm_hist_mean(h) == 63.5);
    free(h);
}

/* Reads v back from a histogram of {0, v, DM_HIST_TOP}: the median is v's bucket. */
static uint64_t
read_back(struct dm_hist *h, uint64_t v)
{
    dm_hist_init(h);
    dm_hist_add(h, 0);
    dm_hist_add(h, v);
    dm_hist_add(h, DM_HIST_TOP);
    return dm_hist_quantile(h, 0.5);
}

static void
test_every_value_reads_back_within_its_bucket(void **state)
{
    (void)state;
    struct dm_hist *h = hist_new();
    uint64_t prev = 0;
    for (uint64_t v = 0; v < 8192; v++) {
        uint64_t got = read_back(h, v);
        if (v < 256) {
            assert_int_equal(got, v);
        }
        uint64_t diff = got > v ? got - v : v - got;
        assert_true(diff * 256 <= v);
        assert_true(got >= prev); /* buckets are in order */
        prev = got;
    }
    struct lcg r = { 7 };
    for (unsigned k = 13; k < DM_HIST_TOP_BITS; k++) {
        uint64_t lo = UINT64_C(1) << k;
        const uint64_t edges[] = { lo - 1, lo, lo + 1, 2 * lo - 1 };
        for (size_t i = 0; i < 4 + 200; i++) {
            uint64_t v = i < 4 ? edges[i] : lo + lcg_next(&r) % lo;
            uint64_t got = read_back(h, v);
            uint64_t diff = got > v ? got - v : v - got;
            if (diff > v / 256) {
                fail_msg("%llu reads back as %llu", (unsigned long long)v, (unsigned long long)got);
            }
            double rel = (double)diff / (double)v;
            worst_bucket = rel > worst_bucket ? rel : worst_bucket;
        }
    }
    free(h);
}

static void
test_huge_values(void **state)
{
    (void)state;
    struct lcg r = { 99 };
    size_t n = 100000;
    uint64_t *v = malloc(n * sizeof(*v));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        /* 2^38 .. 2^41 - 1 us (3 to 25 days), with 2^40 itself now and then. */
        v[i] = i % 100 == 0
                   ? UINT64_C(1) << 40
                   : (UINT64_C(1) << 38) + lcg_next(&r) % (DM_HIST_TOP - (UINT64_C(1) << 38));
    }
    check_quantiles("2^38..2^41 us", v, n);
    free(v);

    /* Past the top: counted in the last bucket; max, q = 1 and count exact; sum saturates. */
    struct dm_hist *h = hist_new();
    dm_hist_add(h, 5);
    dm_hist_add(h, DM_HIST_TOP + 1);
    dm_hist_add(h, UINT64_C(1) << 50);
    dm_hist_add(h, UINT64_MAX);
    assert_int_equal(h->count, 4);
    assert_int_equal(h->min, 5);
    assert_int_equal(h->max, UINT64_MAX);
    assert_int_equal(h->sum, UINT64_MAX);
    assert_int_equal(h->_b[DM_HIST_BUCKETS - 1], 3); /* a private field, read to prove the clamp */
    assert_int_equal(dm_hist_quantile(h, 1), UINT64_MAX);
    assert_int_equal(dm_hist_quantile(h, 0), 5);
    assert_int_equal(dm_hist_quantile(h, 0.25), 5);
    uint64_t last = dm_hist_quantile(h, 0.5); /* in the last bucket */
    assert_true(last > DM_HIST_TOP - (DM_HIST_TOP >> DM_HIST_SUB_BITS) && last <= DM_HIST_TOP);
    assert_int_equal(dm_hist_quantile(h, 0.99), last);
    assert_true(dm_hist_mean(h) == (double)UINT64_MAX / 4);
    free(h);
}

static void
test_merge_equals_adding_all(void **state)
{
    (void)state;
    struct lcg r = { 2024 };
    struct dm_hist *all = hist_new(), *a = hist_new(), *b = hist_new(), *empty = hist_new();
    struct dm_hist *m = hist_new();
    for (int i = 0; i < 50000; i++) {
        uint64_t v = i % 3 == 0 ? 17 + lcg_next(&r) % 1000 : lcg_next(&r) % 30000000;
        dm_hist_add(all, v);
        dm_hist_add(i % 2 ? a : b, v);
    }
    /* A zeroed destination takes the sources' min, not its own 0. */
    memset(m, 0, sizeof(*m));
    dm_hist_merge(m, empty);
    dm_hist_merge(m, a);
    dm_hist_merge(m, empty);
    dm_hist_merge(m, b);
    assert_memory_equal(m, all, sizeof(*m));
    /* The other order, and into an empty histogram from an empty one. */
    dm_hist_init(m);
    dm_hist_merge(m, b);
    dm_hist_merge(m, a);
    assert_memory_equal(m, all, sizeof(*m));
    dm_hist_init(m);
    dm_hist_merge(m, empty);
    assert_memory_equal(m, empty, sizeof(*m));
    /* The sources are unchanged: merging again doubles every count. */
    dm_hist_init(m);
    dm_hist_merge(m, all);
    dm_hist_merge(m, all);
    assert_int_equal(m->count, 2 * all->count);
    assert_int_equal(m->sum, 2 * all->sum);
    assert_int_equal(m->min, all->min);
    assert_int_equal(m->max, all->max);
    for (double q = 0.01; q < 1; q += 0.01) {
        assert_int_equal(dm_hist_quantile(m, q), dm_hist_quantile(all, q));
    }
    /* Sums saturate in a merge too. */
    dm_hist_init(a);
    dm_hist_add(a, UINT64_MAX - 1);
    dm_hist_merge(m, a);
    assert_int_equal(m->sum, UINT64_MAX);
    assert_int_equal(m->max, UINT64_MAX - 1);
    free(all);
    free(a);
    free(b);
    free(empty);
    free(m);
}

static void
test_empty_and_out_of_range_q(void **state)
{
    (void)state;
    struct dm_hist *h = malloc(sizeof(*h));
    assert_non_null(h);
    memset(h, 0xa5, sizeof(*h));
    dm_hist_init(h);
    struct dm_hist *zero = calloc(1, sizeof(*zero));
    assert_non_null(zero);
    assert_memory_equal(h, zero, sizeof(*h));
    assert_int_equal(dm_hist_quantile(h, 0), 0);
    assert_int_equal(dm_hist_quantile(h, 0.5), 0);
    assert_int_equal(dm_hist_quantile(h, 1), 0);
    assert_true(dm_hist_mean(h) == 0);
    assert_int_equal(h->min, 0);
    assert_int_equal(h->max, 0);
    /* q outside [0, 1] and NaN. */
    dm_hist_add(h, 300);
    dm_hist_add(h, 7000);
    dm_hist_add(h, 90000);
    assert_int_equal(dm_hist_quantile(h, -1), 300);
    assert_int_equal(dm_hist_quantile(h, NAN), 300);
    assert_int_equal(dm_hist_quantile(h, 2), 90000);
    assert_int_equal(dm_hist_quantile(h, INFINITY), 90000);
    assert_int_equal(dm_hist_quantile(h, 1e-9), 300); /* rank 1 */
    assert_true(dm_hist_mean(h) == (300 + 7000 + 90000) / 3.0);
    free(h);
    free(zero);
}

static void
test_size_is_as_documented(void **state)
{
    (void)state;
    assert_int_equal(sizeof(struct dm_hist), 35872);
    assert_int_equal(DM_HIST_BUCKETS, 4480);
    assert_true(DM_HIST_TOP >= UINT64_C(1) << 40);
}

static void
test_report_worst_error(void **state)
{
    (void)state;
    /* Runs last: what the others measured, for the record. */
    assert_true(worst_quantile > 0 && worst_quantile <= 1.0 / 256);
    assert_true(worst_bucket > 0 && worst_bucket <= 1.0 / 256);
    print_message("worst relative error: quantiles of the distributions %.4f%%, one value read "
                  "back %.4f%% (bound 1/256 = %.4f%%)\n",
                  worst_quantile * 100, worst_bucket * 100, 100.0 / 256);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_exponential),
        cmocka_unit_test(test_constant_is_exact),
        cmocka_unit_test(test_small_values_are_exact),
        cmocka_unit_test(test_every_value_reads_back_within_its_bucket),
        cmocka_unit_test(test_huge_values),
        cmocka_unit_test(test_merge_equals_adding_all),
        cmocka_unit_test(test_empty_and_out_of_range_q),
        cmocka_unit_test(test_size_is_as_documented),
        cmocka_unit_test(test_report_worst_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
