/*
 * dimmer-sim's core: the event queue and clock, the variates and the server
 * model against queueing theory.
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

struct order {
    uint64_t seen[16];
    double at[16];
    size_t n;
};

static void
record_cb(struct dm_sim *sim, void *arg, uint64_t tag)
{
    struct order *o = arg;
    o->at[o->n] = sim->now;
    o->seen[o->n++] = tag;
}

/* Events fire by time, ties in scheduling order, and the clock follows. */
static void
test_queue_order(void **state)
{
    (void)state;
    struct dm_sim sim;
    dm_sim_init(&sim, 1);
    struct order o = { 0 };
    dm_sim_at(&sim, 3.0, record_cb, &o, 30);
    dm_sim_at(&sim, 1.0, record_cb, &o, 10);
    dm_sim_at(&sim, 2.0, record_cb, &o, 20);
    dm_sim_at(&sim, 1.0, record_cb, &o, 11);
    dm_sim_at(&sim, 5.0, record_cb, &o, 50);
    dm_sim_run_until(&sim, 4.0);
    assert_int_equal(o.n, 4);
    assert_int_equal(o.seen[0], 10);
    assert_int_equal(o.seen[1], 11);
    assert_int_equal(o.seen[2], 20);
    assert_int_equal(o.seen[3], 30);
    assert_true(o.at[2] == 2.0);
    assert_true(sim.now == 4.0);
    assert_int_equal(dm_sim_pending(&sim), 1);
    /* The past is now: an event scheduled before now fires at now. */
    dm_sim_at(&sim, 0.5, record_cb, &o, 5);
    assert_true(dm_sim_step(&sim));
    assert_int_equal(o.seen[4], 5);
    assert_true(o.at[4] == 4.0);
    assert_true(dm_sim_step(&sim));
    assert_false(dm_sim_step(&sim));
    assert_int_equal(sim.events, 6);
    dm_sim_fini(&sim);
}

/* Many random events come out sorted, whatever order they went in. */
static void
test_queue_many(void **state)
{
    (void)state;
    struct dm_sim sim;
    dm_sim_init(&sim, 7);
    struct dm_rng r;
    dm_rng_init(&r, 3);
    enum { N = 20000 };
    static struct order o; /* only the last time is kept */
    for (size_t i = 0; i < N; i++) {
        dm_sim_at(&sim, dm_sim_uniform(&r) * 100, record_cb, &o, i);
    }
    double last = -1;
    while (dm_sim_pending(&sim) > 0) {
        o.n = 0;
        dm_sim_step(&sim);
        assert_true(o.at[0] >= last);
        last = o.at[0];
    }
    assert_int_equal(sim.events, N);
    dm_sim_fini(&sim);
}

/* The variates have the means they promise. */
static void
test_variates(void **state)
{
    (void)state;
    struct dm_rng r;
    dm_rng_init(&r, 11);
    enum { N = 400000 };
    double se = 0, sp = 0, sg = 0, su = 0;
    for (size_t i = 0; i < N; i++) {
        double u = dm_sim_uniform(&r);
        assert_true(u >= 0 && u < 1);
        su += u;
        se += dm_sim_exp(&r, 2.5);
        double p = dm_sim_pareto(&r, 1.2, 1, 1000);
        assert_true(p >= 1 - 1e-9 && p <= 1000 + 1e-6);
        sp += p;
        sg += dm_sim_geometric(&r, 4);
    }
    assert_true(fabs(su / N - 0.5) < 0.005);
    assert_true(fabs(se / N - 2.5) < 0.03);
    assert_true(fabs(sg / N - 4) < 0.05);
    double pm = dm_sim_pareto_mean(1.2, 1, 1000);
    assert_true(fabs(sp / N - pm) / pm < 0.05);
    /* Zipf: rank 0 is drawn most, in the proportion 1 / H(n, s). */
    struct dm_sim_zipf z;
    assert_int_equal(dm_sim_zipf_init(&z, 100, 1.0), 0);
    size_t first = 0;
    for (size_t i = 0; i < N; i++) {
        size_t k = dm_sim_zipf_draw(&z, &r);
        assert_true(k < 100);
        first += k == 0;
    }
    double h = 0;
    for (int k = 1; k <= 100; k++) {
        h += 1.0 / k;
    }
    assert_true(fabs((double)first / N - 1 / h) < 0.005);
    dm_sim_zipf_fini(&z);
}

/* ---- an M/M/1 queue on the server model ---- */

struct mm1 {
    struct dm_sim_srv srv;
    struct dm_sim_job *jobs;
    size_t njobs, next;
    double lambda, mu;
    double sum_sojourn;
    uint64_t done, counted;
    double warmup;
};

static void
mm1_done(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job)
{
    struct mm1 *q = srv->owner;
    q->done++;
    if (job->arrived >= q->warmup) {
        q->sum_sojourn += sim->now - job->arrived;
        q->counted++;
    }
}

static void
mm1_arrival(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)tag;
    struct mm1 *q = arg;
    if (q->next == q->njobs) {
        return;
    }
    struct dm_sim_job *j = &q->jobs[q->next++];
    j->size = dm_sim_exp(&sim->rng, 1.0 / q->mu);
    dm_sim_srv_add(sim, &q->srv, j);
    dm_sim_after(sim, dm_sim_exp(&sim->rng, 1.0 / q->lambda), mm1_arrival, q, 0);
}

static double
mm1_run(enum dm_sim_disc disc, unsigned slots, double lambda, uint64_t seed, double *busy_share)
{
    struct dm_sim sim;
    dm_sim_init(&sim, seed);
    struct mm1 q = { .lambda = lambda, .mu = 1.0, .njobs = 400000, .warmup = 1000 };
    q.jobs = calloc(q.njobs, sizeof(*q.jobs));
    assert_non_null(q.jobs);
    /* speed = slots: each slot serves one unit of work a second, so a job of size x takes x s
     * alone, and the machine's capacity is `slots` units a second. */
    dm_sim_srv_init(&q.srv, disc, slots, slots, mm1_done, &q);
    dm_sim_at(&sim, 0, mm1_arrival, &q, 0);
    while (dm_sim_step(&sim)) {
    }
    assert_int_equal(q.done, q.njobs);
    assert_int_equal(q.srv.n, 0);
    assert_false(dm_sim_failed(&sim));
    *busy_share = dm_sim_srv_busy(&sim, &q.srv) / sim.now;
    double mean = q.sum_sojourn / (double)q.counted;
    dm_sim_srv_fini(&q.srv);
    free(q.jobs);
    dm_sim_fini(&sim);
    return mean;
}

/* M/M/1-PS: mean sojourn 1 / (mu - lambda); utilisation lambda / mu. */
static void
test_mm1_ps(void **state)
{
    (void)state;
    double busy;
    for (int k = 0; k < 2; k++) {
        double lambda = k == 0 ? 0.5 : 0.8;
        double t = mm1_run(DM_SIM_PS, 1, lambda, 5 + k, &busy);
        double theory = 1 / (1 - lambda);
        assert_true(fabs(t - theory) / theory < 0.05);
        assert_true(fabs(busy - lambda) < 0.01);
    }
}

/* FIFO with one slot is M/M/1 too: the same mean, by another path in the model. */
static void
test_mm1_fifo(void **state)
{
    (void)state;
    double busy;
    double t = mm1_run(DM_SIM_FIFO, 1, 0.7, 9, &busy);
    assert_true(fabs(t - 1 / 0.3) / (1 / 0.3) < 0.05);
}

/*
 * M/M/2 FIFO (two slots of speed 1): Erlang C. With a = lambda / mu and
 * rho = a / 2, P(wait) = a^2 / (2 (1 - rho)) / (1 + a + a^2 / (2 (1 - rho)))
 * and the mean sojourn is 1 / mu + P(wait) / (2 mu - lambda).
 */
static void
test_mm2_fifo(void **state)
{
    (void)state;
    double busy;
    double lambda = 1.5, a = lambda, rho = a / 2;
    double c = a * a / (2 * (1 - rho));
    double pw = c / (1 + a + c);
    double theory = 1 + pw / (2 - lambda);
    double t = mm1_run(DM_SIM_FIFO, 2, lambda, 13, &busy);
    assert_true(fabs(t - theory) / theory < 0.05);
    assert_true(fabs(busy - rho) < 0.01);
}

/* PS with 4 slots below its slots: a job alone runs at one slot's speed, never faster. */
static void
test_ps_slots(void **state)
{
    (void)state;
    struct dm_sim sim;
    dm_sim_init(&sim, 1);
    struct mm1 q = { 0 };
    dm_sim_srv_init(&q.srv, DM_SIM_PS, 4, 4, mm1_done, &q);
    struct dm_sim_job j[6] = { 0 };
    for (int i = 0; i < 6; i++) {
        j[i].size = 1.0;
    }
    dm_sim_srv_add(&sim, &q.srv, &j[0]);
    dm_sim_run_until(&sim, 0.5);
    assert_true(fabs(dm_sim_srv_util(&q.srv) - 0.25) < 1e-12);
    /* Five more at 0.5: six share speed 4, each at 2/3; j0 has 0.5 left -> done at 1.25. */
    for (int i = 1; i < 6; i++) {
        dm_sim_srv_add(&sim, &q.srv, &j[i]);
    }
    dm_sim_run_until(&sim, 1.2499);
    assert_int_equal(q.done, 0);
    dm_sim_run_until(&sim, 1.2501);
    assert_int_equal(q.done, 1);
    /* The five others had 0.5 done at 1.25, then share 4 at 4/5 each: done at 1.875. */
    while (dm_sim_step(&sim)) {
    }
    assert_int_equal(q.done, 6);
    assert_true(fabs(sim.now - 1.875) < 1e-9);
    /* Busy slot-seconds / slots: the work done (6 units) over speed 4. */
    assert_true(fabs(dm_sim_srv_busy(&sim, &q.srv) - 6.0 / 4) < 1e-9);
    dm_sim_srv_fini(&q.srv);
    dm_sim_fini(&sim);
}

static void
count_abort(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job, void *arg)
{
    (void)sim;
    (void)srv;
    (void)job;
    (*(int *)arg)++;
}

/* An abort takes every job off, in service or waiting, and no completion follows. */
static void
test_abort(void **state)
{
    (void)state;
    struct dm_sim sim;
    dm_sim_init(&sim, 1);
    struct mm1 q = { 0 };
    dm_sim_srv_init(&q.srv, DM_SIM_FIFO, 1, 1, mm1_done, &q);
    struct dm_sim_job j[3] = { { .size = 1 }, { .size = 1 }, { .size = 1 } };
    for (int i = 0; i < 3; i++) {
        dm_sim_srv_add(&sim, &q.srv, &j[i]);
    }
    dm_sim_run_until(&sim, 0.5);
    int aborted = 0;
    dm_sim_srv_abort(&sim, &q.srv, count_abort, &aborted);
    assert_int_equal(aborted, 3);
    assert_int_equal(q.srv.n, 0);
    while (dm_sim_step(&sim)) {
    }
    assert_int_equal(q.done, 0);
    /* And it serves again afterwards. */
    dm_sim_srv_add(&sim, &q.srv, &j[0]);
    while (dm_sim_step(&sim)) {
    }
    assert_int_equal(q.done, 1);
    dm_sim_srv_fini(&q.srv);
    dm_sim_fini(&sim);
}

struct keyed {
    struct dm_sim_srv srv;
    uint64_t order[8];
    size_t n;
};

static void
keyed_done(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job)
{
    (void)sim;
    struct keyed *k = srv->owner;
    k->order[k->n++] = job->data;
}

/*
 * A keyed FIFO server (dimmer's queue_order: page): the waiting jobs go in
 * the order of their keys, ties in arrival order, and those whose key has
 * passed when a slot frees go after every other, in key order too.
 */
static void
test_keyed_fifo(void **state)
{
    (void)state;
    struct dm_sim sim;
    dm_sim_init(&sim, 1);
    struct keyed k = { 0 };
    dm_sim_srv_init(&k.srv, DM_SIM_FIFO, 1, 1, keyed_done, &k);
    dm_sim_srv_keyed(&k.srv);
    /* Job 0 holds the one slot for 2 s; then, waiting: keys 9, 3, 1.5
     * (passed at 2 s: after the others), 3 again (after the first 3), 0.5
     * (passed, before 1.5 among the passed ones). */
    static const double keys[] = { 0, 9, 3, 1.5, 3, 0.5 };
    struct dm_sim_job j[6];
    for (int i = 0; i < 6; i++) {
        j[i] = (struct dm_sim_job){ .size = i == 0 ? 2 : 0.1, .key = keys[i], .data = (uint64_t)i };
        dm_sim_srv_add(&sim, &k.srv, &j[i]);
    }
    assert_true(fabs(dm_sim_srv_backlog(&sim, &k.srv) - 2.5) < 1e-9);
    while (dm_sim_step(&sim)) {
    }
    assert_int_equal(k.n, 6);
    static const uint64_t want[] = { 0, 2, 4, 1, 5, 3 };
    assert_memory_equal(k.order, want, sizeof(want));
    /* An abort takes the keyed waiting jobs off too. */
    for (int i = 0; i < 3; i++) {
        j[i].key = 100;
        dm_sim_srv_add(&sim, &k.srv, &j[i]);
    }
    int aborted = 0;
    dm_sim_srv_abort(&sim, &k.srv, count_abort, &aborted);
    assert_int_equal(aborted, 3);
    dm_sim_srv_fini(&k.srv);
    dm_sim_fini(&sim);
}

/* Same seed, same run; another seed, another run. */
static void
test_determinism(void **state)
{
    (void)state;
    double b1, b2, b3;
    double a = mm1_run(DM_SIM_PS, 1, 0.6, 42, &b1);
    double b = mm1_run(DM_SIM_PS, 1, 0.6, 42, &b2);
    double c = mm1_run(DM_SIM_PS, 1, 0.6, 43, &b3);
    assert_true(a == b && b1 == b2);
    assert_true(a != c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_order), cmocka_unit_test(test_queue_many),
        cmocka_unit_test(test_variates),    cmocka_unit_test(test_mm1_ps),
        cmocka_unit_test(test_mm1_fifo),    cmocka_unit_test(test_mm2_fifo),
        cmocka_unit_test(test_ps_slots),    cmocka_unit_test(test_abort),
        cmocka_unit_test(test_keyed_fifo),  cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
