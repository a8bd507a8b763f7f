/*
 * The pure pieces of dimmer-sim's age experiment: the SURGE-style site
 * (SPECweb99 sizes, heavy-tailed embedded objects, Zipf visits) and the
 * server model's view of unfinished work that the experiment's hit ratio
 * and in-flight work read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "bench/sim/server.h"
#include "bench/sim/sim.h"
#include "bench/sim/surge.h"

/* The 36 files of the SPECweb96/99 mix, and the shares that pick them. */
static void
test_specweb_files(void **state)
{
    (void)state;
    assert_int_equal(dm_surge_file_bytes(0, 0), 102);
    assert_int_equal(dm_surge_file_bytes(0, 4), 512);
    assert_int_equal(dm_surge_file_bytes(0, 8), 921);
    assert_int_equal(dm_surge_file_bytes(1, 0), 1024);
    assert_int_equal(dm_surge_file_bytes(1, 8), 9216);
    assert_int_equal(dm_surge_file_bytes(2, 0), 10240);
    assert_int_equal(dm_surge_file_bytes(3, 8), 921600);
    assert_int_equal(dm_surge_file_bytes(4, 0), 0);
    assert_int_equal(dm_surge_file_bytes(0, 9), 0);
    double cs = 0, fs = 0;
    for (unsigned c = 0; c < DM_SURGE_CLASSES; c++) {
        cs += dm_surge_class_share(c);
    }
    unsigned peak = 0;
    for (unsigned f = 0; f < DM_SURGE_FILES; f++) {
        fs += dm_surge_file_share(f);
        peak = dm_surge_file_share(f) > dm_surge_file_share(peak) ? f : peak;
    }
    assert_true(fabs(cs - 1) < 1e-12);
    assert_true(fabs(fs - 1) < 1e-12);
    assert_int_equal(peak, 4); /* SPECweb99's within-class peak is the fifth file */
    /* About 14.7 KB: 4.9 x (0.35 x 102.4 + 0.5 x 1024 + 0.14 x 10240 + 0.01 x 102400). */
    double m = dm_surge_size_mean();
    assert_true(m > 14600 && m < 14800);
}

/* Draws follow the class mix and the within-class shares, and average the exact mean. */
static void
test_specweb_draws(void **state)
{
    (void)state;
    struct dm_rng r;
    dm_rng_init(&r, 42);
    enum { N = 400000 };
    unsigned cls[DM_SURGE_CLASSES] = { 0 };
    unsigned fifth = 0;
    double sum = 0;
    for (unsigned i = 0; i < N; i++) {
        uint64_t b = dm_surge_size(&r);
        sum += (double)b;
        unsigned c = b < 1024 ? 0 : b < 10240 ? 1 : b < 102400 ? 2 : 3;
        cls[c]++;
        fifth += b == dm_surge_file_bytes(c, 4);
    }
    for (unsigned c = 0; c < DM_SURGE_CLASSES; c++) {
        assert_true(fabs((double)cls[c] / N - dm_surge_class_share(c)) < 0.004);
    }
    assert_true(fabs((double)fifth / N - dm_surge_file_share(4)) < 0.004);
    /* The 1% class carries a third of the bytes: the standard error is 0.6%, 2% is 3.5 of it. */
    assert_true(fabs(sum / N / dm_surge_size_mean() - 1) < 0.02);
}

/* Embedded objects: the asked mean, a tail heavier than the exponential's, the cap. */
static void
test_objects(void **state)
{
    (void)state;
    struct dm_rng r;
    dm_rng_init(&r, 7);
    enum { N = 400000 };
    double sum = 0;
    unsigned zero = 0, over50 = 0, top = 0;
    for (unsigned i = 0; i < N; i++) {
        unsigned n = dm_surge_objects(&r, 12.5, 2.43, 256);
        assert_true(n <= 256);
        sum += n;
        zero += n == 0;
        over50 += n > 50;
        top = n > top ? n : top;
    }
    assert_true(fabs(sum / N - 12.5) < 0.5);
    assert_true(zero > 0);
    /* Lomax(2.43): P(X > 50) = (1 + 50 / 17.9)^-2.43 = 3.9%; an exponential of
     * mean 12.5 gives 1.8%. */
    double p50 = (double)over50 / N;
    assert_true(p50 > 0.033 && p50 < 0.045);
    assert_true(top > 150);
    /* The cap holds, and is reached. */
    unsigned capped = 0;
    for (unsigned i = 0; i < 10000; i++) {
        unsigned n = dm_surge_objects(&r, 12.5, 2.43, 10);
        assert_true(n <= 10);
        capped += n == 10;
    }
    assert_true(capped > 0);
    assert_int_equal(dm_surge_objects(&r, 0, 2.43, 256), 0);
    assert_int_equal(dm_surge_objects(&r, 5, 1.0, 256), 0); /* no mean for alpha <= 1 */
}

static const struct dm_surge_conf site_conf = {
    .pages = 500, .zipf = 1.0, .objects_mean = 12.5, .objects_alpha = 2.43, .objects_max = 256
};

/* A site is a function of its seed; its pages own contiguous runs of objects. */
static void
test_site_build(void **state)
{
    (void)state;
    struct dm_surge_site a, b, c;
    assert_int_equal(dm_surge_site_init(&a, &site_conf, 11), 0);
    assert_int_equal(dm_surge_site_init(&b, &site_conf, 11), 0);
    assert_int_equal(dm_surge_site_init(&c, &site_conf, 12), 0);
    assert_int_equal(a.npages, 500);
    assert_int_equal(a.nobjects, b.nobjects);
    assert_memory_equal(a.pages, b.pages, a.npages * sizeof(*a.pages));
    assert_memory_equal(a.obj_bytes, b.obj_bytes, a.nobjects * sizeof(*a.obj_bytes));
    assert_true(a.nobjects != c.nobjects ||
                memcmp(a.obj_bytes, c.obj_bytes, a.nobjects * sizeof(*a.obj_bytes)) != 0);
    size_t next = 0;
    for (size_t p = 0; p < a.npages; p++) {
        assert_int_equal(a.pages[p].first, next);
        next += a.pages[p].n;
        assert_true(a.pages[p].bytes >= 102 && a.pages[p].bytes <= 921600);
    }
    assert_int_equal(next, a.nobjects);
    /* Page 0 is the most popular: Zipf 1 over 500 pages gives it 1 / H(500) = 14.7%. */
    struct dm_rng r;
    dm_rng_init(&r, 3);
    unsigned first = 0;
    for (unsigned i = 0; i < 100000; i++) {
        first += dm_surge_site_draw(&a, &r) == 0;
    }
    assert_true(fabs(first / 100000.0 - 0.147) < 0.006);
    dm_surge_site_fini(&a);
    dm_surge_site_fini(&b);
    dm_surge_site_fini(&c);
}

/* The visit means are what drawing visits by popularity averages. */
static void
test_site_visit_mean(void **state)
{
    (void)state;
    struct dm_surge_site s;
    assert_int_equal(dm_surge_site_init(&s, &site_conf, 5), 0);
    double req, bytes;
    dm_surge_site_visit_mean(&s, &req, &bytes);
    assert_true(req > 1);
    struct dm_rng r;
    dm_rng_init(&r, 9);
    enum { N = 300000 };
    double sreq = 0, sbytes = 0;
    for (unsigned i = 0; i < N; i++) {
        const struct dm_surge_page *pg = &s.pages[dm_surge_site_draw(&s, &r)];
        sreq += 1.0 + pg->n;
        sbytes += (double)pg->bytes;
        for (unsigned k = 0; k < pg->n; k++) {
            sbytes += (double)s.obj_bytes[pg->first + k];
        }
    }
    assert_true(fabs(sreq / N / req - 1) < 0.02);
    assert_true(fabs(sbytes / N / bytes - 1) < 0.03);
    dm_surge_site_fini(&s);
}

static void
done_cb(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job)
{
    (void)sim;
    (void)srv;
    job->data = 1;
}

/* Processor sharing: each of n jobs gets speed / n; left and backlog follow. */
static void
test_srv_left_ps(void **state)
{
    (void)state;
    struct dm_sim sim;
    dm_sim_init(&sim, 1);
    struct dm_sim_srv srv;
    dm_sim_srv_init(&srv, DM_SIM_PS, 10, 1, done_cb, NULL);
    struct dm_sim_job a = { .size = 10 }, b = { .size = 30 };
    dm_sim_srv_add(&sim, &srv, &a);
    dm_sim_srv_add(&sim, &srv, &b);
    assert_true(fabs(dm_sim_srv_backlog(&sim, &srv) - 40) < 1e-9);
    dm_sim_run_until(&sim, 1.0);
    assert_true(fabs(dm_sim_srv_left(&sim, &srv, &a) - 5) < 1e-9);
    assert_true(fabs(dm_sim_srv_left(&sim, &srv, &b) - 25) < 1e-9);
    assert_true(fabs(dm_sim_srv_backlog(&sim, &srv) - 30) < 1e-9);
    /* a is done at 2; then b alone gets all 10 per second. */
    dm_sim_run_until(&sim, 2.5);
    assert_int_equal(a.data, 1);
    assert_int_equal(b.data, 0);
    assert_true(fabs(dm_sim_srv_left(&sim, &srv, &b) - 15) < 1e-9);
    assert_true(fabs(dm_sim_srv_backlog(&sim, &srv) - 15) < 1e-9);
    dm_sim_run_until(&sim, 10);
    assert_int_equal(b.data, 1);
    assert_true(dm_sim_srv_backlog(&sim, &srv) == 0);
    dm_sim_srv_fini(&srv);
    dm_sim_fini(&sim);
}

/* FIFO: a waiting job has received nothing. */
static void
test_srv_left_fifo(void **state)
{
    (void)state;
    struct dm_sim sim;
    dm_sim_init(&sim, 1);
    struct dm_sim_srv srv;
    dm_sim_srv_init(&srv, DM_SIM_FIFO, 10, 1, done_cb, NULL);
    struct dm_sim_job a = { .size = 10 }, b = { .size = 30 };
    dm_sim_srv_add(&sim, &srv, &a);
    dm_sim_srv_add(&sim, &srv, &b);
    dm_sim_run_until(&sim, 0.5);
    assert_true(fabs(dm_sim_srv_left(&sim, &srv, &a) - 5) < 1e-9);
    assert_true(fabs(dm_sim_srv_left(&sim, &srv, &b) - 30) < 1e-9);
    assert_true(fabs(dm_sim_srv_backlog(&sim, &srv) - 35) < 1e-9);
    dm_sim_run_until(&sim, 2.0);
    assert_int_equal(a.data, 1);
    assert_true(fabs(dm_sim_srv_left(&sim, &srv, &b) - 20) < 1e-9);
    dm_sim_srv_fini(&srv);
    dm_sim_fini(&sim);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specweb_files),   cmocka_unit_test(test_specweb_draws),
        cmocka_unit_test(test_objects),         cmocka_unit_test(test_site_build),
        cmocka_unit_test(test_site_visit_mean), cmocka_unit_test(test_srv_left_ps),
        cmocka_unit_test(test_srv_left_fifo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
