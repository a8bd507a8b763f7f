/*
 * The mean field of power of two with server classes (bench/sim/meanfield.h),
 * the theory beside dimmer-sim's "hetero" experiment: the classic fixed point
 * when the speeds are equal, the equations themselves at a heterogeneous fixed
 * point, the ODE integrated from an empty pool, and the stability edge.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <math.h>

#include "bench/sim/meanfield.h"

enum { KMAX = 64 };

/* Mitzenmacher's fixed point, x(k) = rho^(2^k - 1), and its E[T] = sum_k x(k) / lambda. */
static double
classic_sojourn(double rho, double mu)
{
    double jobs = 0;
    for (int k = 1; k < 60; k++) {
        jobs += pow(rho, ldexp(1, k) - 1);
    }
    return jobs / (rho * mu);
}

/* One class, or two of the same speed in any split: the classic fixed point. */
static void
test_homogeneous(void **state)
{
    (void)state;
    static double x[2 * KMAX];
    const double rhos[] = { 0.3, 0.7, 0.9, 0.99 };
    for (size_t i = 0; i < sizeof(rhos) / sizeof(rhos[0]); i++) {
        double rho = rhos[i];
        struct dm_meanfield_class one = { 1, 2.5 };
        struct dm_meanfield mf;
        assert_int_equal(dm_meanfield_p2(&one, 1, rho * 2.5, &mf, x, KMAX), 0);
        assert_true(mf.stable);
        for (int k = 0; k < 12; k++) {
            double want = pow(rho, ldexp(1, k) - 1);
            assert_true(fabs(x[k] - want) <= 1e-9 * want + 1e-12);
        }
        assert_true(fabs(mf.mean_sojourn - classic_sojourn(rho, 2.5)) < 1e-9);
        assert_true(fabs(mf.mean_jobs - mf.mean_sojourn * rho * 2.5) < 1e-12);

        struct dm_meanfield_class two[2] = { { 0.3, 2.5 }, { 0.7, 2.5 } };
        struct dm_meanfield mf2;
        assert_int_equal(dm_meanfield_p2(two, 2, rho * 2.5, &mf2, x, KMAX), 0);
        assert_true(mf2.stable);
        assert_true(fabs(mf2.mean_sojourn - mf.mean_sojourn) < 1e-9);
        for (int k = 0; k < KMAX; k++) {
            assert_true(fabs(x[k] - x[KMAX + k]) < 1e-12);
        }
    }
    /* Known values: rho = 0.9, mu = 1: E[T] = 1 + 0.9^2 + 0.9^6 + 0.9^14 + ... = 2.614057. */
    struct dm_meanfield_class one = { 1, 1 };
    struct dm_meanfield mf;
    assert_int_equal(dm_meanfield_p2(&one, 1, 0.9, &mf, NULL, 0), 0);
    assert_true(fabs(mf.mean_sojourn - 2.614057) < 1e-6);
    /* Equal speeds keep the whole region: stable at 0.999, not at 1. */
    assert_int_equal(dm_meanfield_p2(&one, 1, 0.999, &mf, NULL, 0), 0);
    assert_true(mf.stable);
    assert_int_equal(dm_meanfield_p2(&one, 1, 1.0, &mf, NULL, 0), 0);
    assert_false(mf.stable);
    assert_true(dm_meanfield_p2_edge(&one, 1) == 1.0);
}

/* A heterogeneous fixed point solves the equations of the header, level by level. */
static void
test_heterogeneous_fixed_point(void **state)
{
    (void)state;
    static double x[2 * KMAX];
    struct dm_meanfield_class cls[2] = { { 0.8, 1 }, { 0.2, 4 } };
    const double loads[] = { 0.5, 0.7, 0.77 };
    double last = 0;
    for (size_t i = 0; i < 3; i++) {
        double lambda = loads[i] * 1.6;
        struct dm_meanfield mf;
        assert_int_equal(dm_meanfield_p2(cls, 2, lambda, &mf, x, KMAX), 0);
        assert_true(mf.stable);
        const double *xs = x, *xf = x + KMAX;
        double jobs = 0;
        for (int k = 1; k + 1 < KMAX; k++) {
            double y0 = 0.8 * xs[k - 1] + 0.2 * xf[k - 1], y1 = 0.8 * xs[k] + 0.2 * xf[k];
            for (int c = 0; c < 2; c++) {
                const double *xc = x + c * KMAX;
                double dx =
                    lambda * (xc[k - 1] - xc[k]) * (y0 + y1) - cls[c].speed * (xc[k] - xc[k + 1]);
                assert_true(fabs(dx) < 1e-10);
                assert_true(xc[k] <= xc[k - 1] + 1e-15 && xc[k] >= 0);
            }
            jobs += y1;
        }
        /* Throughput: the busy servers' speeds add up to the arrival rate. */
        assert_true(fabs(0.8 * 1 * xs[1] + 0.2 * 4 * xf[1] - lambda) < 1e-10);
        assert_true(fabs(jobs - mf.mean_jobs) < 1e-9);
        assert_true(fabs(mf.mean_sojourn - jobs / lambda) < 1e-9);
        /* The slow servers are busier than the fast ones, and the mean grows with the load. */
        assert_true(xs[1] > xf[1]);
        assert_true(mf.mean_sojourn > last);
        last = mf.mean_sojourn;
    }
    /* At half load p2 barely beats random by capacity, 1 / (1.6 x 0.5) = 1.25: when speeds
     * differ, power of two need not help (the paper's point). */
    struct dm_meanfield mf;
    assert_int_equal(dm_meanfield_p2(cls, 2, 0.8, &mf, NULL, 0), 0);
    assert_true(fabs(mf.mean_sojourn - 1.2398) < 1e-3);
}

/* The ODE itself, integrated from an empty pool, settles on the solver's fixed point. */
static void
test_ode_reaches_fixed_point(void **state)
{
    (void)state;
    enum { K = 40 };
    static double x[2 * KMAX];
    struct dm_meanfield_class cls[2] = { { 0.6, 1 }, { 0.4, 3 } };
    double lambda = 0.75 * (0.6 * 1 + 0.4 * 3);
    struct dm_meanfield mf;
    assert_int_equal(dm_meanfield_p2(cls, 2, lambda, &mf, x, KMAX), 0);
    assert_true(mf.stable);
    double xt[2][K + 2] = { { 0 } }, d[2][K + 2];
    xt[0][0] = xt[1][0] = 1;
    double dt = 0.02;
    for (int step = 0; step < 40000; step++) { /* 800 s */
        for (int k = 1; k <= K; k++) {
            double y0 = 0.6 * xt[0][k - 1] + 0.4 * xt[1][k - 1];
            double y1 = 0.6 * xt[0][k] + 0.4 * xt[1][k];
            for (int c = 0; c < 2; c++) {
                d[c][k] = lambda * (xt[c][k - 1] - xt[c][k]) * (y0 + y1) -
                          cls[c].speed * (xt[c][k] - xt[c][k + 1]);
            }
        }
        for (int c = 0; c < 2; c++) {
            for (int k = 1; k <= K; k++) {
                xt[c][k] += dt * d[c][k];
            }
        }
    }
    double jobs = 0;
    for (int k = 1; k <= K; k++) {
        for (int c = 0; c < 2; c++) {
            assert_true(fabs(xt[c][k] - x[c * KMAX + k]) < 1e-6);
        }
        jobs += 0.6 * xt[0][k] + 0.4 * xt[1][k];
    }
    assert_true(fabs(jobs / lambda - mf.mean_sojourn) < 1e-5);
}

/* The edge: the closed form, the solver's verdict on each side, the bisection, the drift. */
static void
test_edge(void **state)
{
    (void)state;
    struct dm_meanfield_class cls[2] = { { 0.8, 1 }, { 0.2, 4 } };
    /* Slow class alone: lambda 0.8^2 < 0.8, lambda < 1.25, load 1.25 / 1.6. */
    double edge = dm_meanfield_p2_edge(cls, 2);
    assert_true(fabs(edge - 0.78125) < 1e-12);
    struct dm_meanfield mf;
    assert_int_equal(dm_meanfield_p2(cls, 2, (edge - 0.005) * 1.6, &mf, NULL, 0), 0);
    assert_true(mf.stable);
    assert_true(mf.mean_sojourn > 4 && mf.mean_sojourn < 10);
    assert_int_equal(dm_meanfield_p2(cls, 2, (edge + 0.005) * 1.6, &mf, NULL, 0), 0);
    assert_false(mf.stable);
    double found = dm_meanfield_p2_edge_search(cls, 2, 0.01, 1.0, 1e-3);
    assert_true(fabs(found - edge) < 1e-3);
    /* Drift: 0 below, lambda gamma_s^2 - gamma_s mu_s above. */
    assert_true(dm_meanfield_p2_drift(cls, 2, 0.7 * 1.6) == 0);
    assert_true(fabs(dm_meanfield_p2_drift(cls, 2, 0.9 * 1.6) - (1.44 * 0.64 - 0.8)) < 1e-12);

    /* Half and half, speeds 1 and 10: the slow half caps lambda at 0.5 / 0.25 = 2 of 5.5. */
    struct dm_meanfield_class wide[2] = { { 1, 1 }, { 1, 10 } };
    assert_true(fabs(dm_meanfield_p2_edge(wide, 2) - 2 / 5.5) < 1e-12);
    found = dm_meanfield_p2_edge_search(wide, 2, 0.01, 1.0, 1e-3);
    assert_true(fabs(found - 2 / 5.5) < 1e-3);
    /* Speeds close enough: the whole region (the slow set's bound is past load 1). */
    struct dm_meanfield_class close[2] = { { 0.5, 1 }, { 0.5, 1.2 } };
    assert_true(dm_meanfield_p2_edge(close, 2) == 1.0);
    /* Three classes: the two slowest together bind, (0.4 + 0.6) / 0.8^2 of 3.0. */
    struct dm_meanfield_class three[3] = { { 0.4, 1 }, { 0.4, 1.5 }, { 0.2, 10 } };
    assert_true(fabs(dm_meanfield_p2_edge(three, 3) - 1.0 / 0.64 / 3.0) < 1e-12);
}

static void
test_bad_arguments(void **state)
{
    (void)state;
    struct dm_meanfield mf;
    struct dm_meanfield_class ok = { 1, 1 }, bad = { 0, 1 };
    assert_int_equal(dm_meanfield_p2(&ok, 1, 0, &mf, NULL, 0), -EINVAL);
    assert_int_equal(dm_meanfield_p2(&bad, 1, 0.5, &mf, NULL, 0), -EINVAL);
    assert_int_equal(dm_meanfield_p2(&ok, 0, 0.5, &mf, NULL, 0), -EINVAL);
    assert_int_equal(dm_meanfield_p2(NULL, 1, 0.5, &mf, NULL, 0), -EINVAL);
    assert_true(dm_meanfield_p2_edge(&bad, 1) < 0);
    assert_true(dm_meanfield_p2_edge_search(&ok, 1, 0.5, 0.4, 1e-3) < 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_homogeneous),
        cmocka_unit_test(test_heterogeneous_fixed_point),
        cmocka_unit_test(test_ode_reaches_fixed_point),
        cmocka_unit_test(test_edge),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
