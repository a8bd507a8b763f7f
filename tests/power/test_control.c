/*
 * The power manager's pure arithmetic (power/control.h): tcp_max learned from
 * the agents' reports (tcp_max: auto), which leaves out saturated and nearly
 * idle servers, the proxy's own estimates and held or inactive servers,
 * waits for enough evidence, follows a change of the servers at its
 * half-life in steps of more than a tenth, and does not forget over a quiet
 * night.
 */
#include "dm_test.h"

#include <math.h>

#include "power/control.h"

#define S 1000000ull /* one second in microseconds */

/* A reported reading of an active server (35 W idle to 70 W full) holding
 * tcp connections, each 1/tcp_max of a server's work. */
static struct dm_pm_reading
reading(double tcp, double tcp_max)
{
    double u = tcp / tcp_max;
    return (struct dm_pm_reading){ .state = DM_PM_ACTIVE,
                                   .w = 35 + 35 * (u < 1 ? u : 1),
                                   .tcp = tcp,
                                   .reported = true,
                                   .idle_w = 35,
                                   .full_w = 70 };
}

/* Feeds the same readings once a second for `seconds`; how many times the
 * value in use changed. */
static int
feed(struct dm_pm_tcpmax *l, const struct dm_pm_reading *r, size_t n, uint64_t *now, int seconds,
     double *in_use)
{
    int changes = 0;
    for (int i = 0; i < seconds; i++, *now += S) {
        changes += dm_pm_tcpmax_learn(l, r, n, *now, in_use);
    }
    return changes;
}

static void
test_learns_connections_per_server_at_full_power(void **st)
{
    (void)st;
    struct dm_pm_tcpmax l = { 0 };
    double in_use = 200;
    uint64_t now = 1000 * S;
    /* Two servers at 20 % and 50 % of a 130-connection server: 0.7 of a
     * server a reading, so seven readings (4.9) are not yet five servers'
     * worth, and the eighth is. */
    struct dm_pm_reading r[2] = { reading(26, 130), reading(65, 130) };
    for (int i = 0; i < 7; i++, now += S) {
        assert_false(dm_pm_tcpmax_learn(&l, r, 2, now, &in_use));
        assert_false(l.learned);
        assert_true(in_use == 200);
    }
    assert_true(dm_pm_tcpmax_learn(&l, r, 2, now, &in_use));
    assert_true(l.learned);
    assert_true(fabs(in_use - 130) < 0.5);
    /* Steady: the value in use stays, and nothing is said to change. */
    for (int i = 0; i < 100; i++) {
        now += S;
        assert_false(dm_pm_tcpmax_learn(&l, r, 2, now, &in_use));
    }
    assert_true(fabs(in_use - 130) < 0.5);
}

static void
test_leaves_out_saturated_idle_estimated_and_inactive_readings(void **st)
{
    (void)st;
    struct dm_pm_tcpmax l = { 0 };
    double in_use = 200;
    uint64_t now = 1000 * S;
    for (int i = 0; i < 60; i++, now += S) {
        /* Only the first counts: 0.4 of a server at 100 a server. Each other
         * one would teach another figure if it counted. */
        struct dm_pm_reading r[8] = {
            reading(40, 100),  reading(30, 30), /* a burst: full with 30 connections */
            reading(500, 100),                  /* a backlog: full (capped) with 500 */
            reading(20, 40),                    /* the proxy's own estimate: made from tcp_max */
            reading(20, 40),                    /* held by the operator */
            reading(20, 40),                    /* draining: not taking requests */
            reading(4, 40),                     /* 10 % of its span: counts... */
            reading(3, 40),                     /* ...7.5 %: mostly the idle figure's error */
        };
        r[3].reported = false;
        r[4].held = true;
        r[5].state = DM_PM_DRAINING;
        r[6].w += 0.01; /* clear of rounding at the 10 % edge */
        dm_pm_tcpmax_learn(&l, r, 8, now, &in_use);
    }
    assert_true(l.learned);
    /* (40 + 4) / (0.4 + 0.1) = 88; with any other reading it is not. */
    assert_true(fabs(in_use - 88) < 0.5);
}

static void
test_follows_a_change_in_steps_of_a_tenth(void **st)
{
    (void)st;
    struct dm_pm_tcpmax l = { 0 };
    double in_use = 200;
    uint64_t now = 1000 * S;
    struct dm_pm_reading a = reading(50, 100), b = reading(50, 200);
    feed(&l, &a, 1, &now, 3600, &in_use);
    assert_true(fabs(in_use - 100) < 0.5);
    /* Servers that hold twice the connections: after one half-life (600 s)
     * of their readings, the old and the new weigh about the same, (50 + 50)
     * / (0.5 + 0.25) = 133, and the value in use is within a tenth of it,
     * reached in a few steps (each one resets a policy's memory). */
    int steps = feed(&l, &b, 1, &now, DM_PM_TCPMAX_HALF_LIFE_S, &in_use);
    assert_true(in_use > 115 && in_use < 138);
    assert_true(steps >= 1 && steps <= 3);
    steps += feed(&l, &b, 1, &now, 10 * DM_PM_TCPMAX_HALF_LIFE_S, &in_use);
    assert_true(in_use > 200 / 1.1 && in_use <= 200.5);
    assert_true(steps <= 10);
}

static void
test_a_quiet_night_forgets_nothing(void **st)
{
    (void)st;
    struct dm_pm_tcpmax l = { 0 };
    double in_use = 200;
    uint64_t now = 1000 * S;
    struct dm_pm_reading busy = reading(50, 100), idle = reading(2, 100);
    feed(&l, &busy, 1, &now, 60, &in_use);
    assert_true(fabs(in_use - 100) < 0.5);
    double work = l.work;
    /* Twelve hours of idle servers (2 % of the span): nothing to learn from. */
    assert_int_equal(feed(&l, &idle, 1, &now, 12 * 3600, &in_use), 0);
    assert_true(l.learned);
    assert_true(l.work == work);
    assert_true(fabs(in_use - 100) < 0.5);
    /* The morning's first reading weighs one second's worth, not the night's. */
    struct dm_pm_reading other = reading(50, 300);
    dm_pm_tcpmax_learn(&l, &other, 1, now, &in_use);
    assert_true(l.work > work);
    assert_true(fabs(in_use - 100) < 0.5);
}

static void
test_nothing_to_divide_is_never_learned(void **st)
{
    (void)st;
    struct dm_pm_tcpmax l = { 0 };
    double in_use = 200;
    uint64_t now = 1000 * S;
    /* Busy servers without a connection counted (tcp: agent with clients
     * elsewhere): nothing to divide. */
    struct dm_pm_reading r = reading(50, 100);
    r.tcp = 0;
    assert_int_equal(feed(&l, &r, 1, &now, 100, &in_use), 0);
    assert_false(l.learned);
    /* Idle servers with connections, or below idle (a power model that does
     * not fit): no work to learn from. */
    l = (struct dm_pm_tcpmax){ 0 };
    r = reading(50, 100);
    for (int i = 0; i < 100; i++, now += S) {
        r.w = i % 2 ? 35 : 20;
        assert_false(dm_pm_tcpmax_learn(&l, &r, 1, now, &in_use));
    }
    assert_false(l.learned);
    /* A power model without a span (full_w at idle_w) says nothing either. */
    l = (struct dm_pm_tcpmax){ 0 };
    r = reading(50, 100);
    r.full_w = r.idle_w;
    assert_int_equal(feed(&l, &r, 1, &now, 100, &in_use), 0);
    assert_false(l.learned);
    assert_true(in_use == 200);
    /* Learned within a tenth of the value in use: it stays. */
    l = (struct dm_pm_tcpmax){ 0 };
    r = reading(50, 190);
    assert_int_equal(feed(&l, &r, 1, &now, 100, &in_use), 0);
    assert_true(l.learned);
    assert_true(in_use == 200);
}

/* What a pool's readings count: every server not held in n_total, a failed
 * one too (its wake is tried again: a pool whose servers all failed wanted
 * none of them back, for ever); live only active and not down; power of the
 * live; connections of the active and draining. */
static void
test_metrics_count_every_server_not_held(void **st)
{
    (void)st;
    struct dm_pm_reading r[7];
    enum dm_pm_state states[7] = { DM_PM_ACTIVE, DM_PM_ACTIVE,   DM_PM_BOOTING, DM_PM_SLEEPING,
                                   DM_PM_FAILED, DM_PM_DRAINING, DM_PM_ACTIVE };
    for (int i = 0; i < 7; i++) {
        r[i] = reading(10, 100);
        r[i].state = states[i];
    }
    r[1].down = true;
    r[6].held = true;
    struct dm_pm_trend tr = { 0 };
    struct dm_power_metrics m;
    dm_pm_metrics(&tr, r, 7, 1, &m);
    assert_int_equal(m.n_total, 6);
    assert_int_equal(m.n_live, 1);
    assert_int_equal(m.n_booting, 1);
    assert_true(fabs(m.total_w - r[0].w) < 1e-9);
    assert_true(fabs(m.tcp - 30) < 1e-9); /* two active (one down), one draining */
    /* Every server failed: all of them are still the pool's. */
    for (int i = 0; i < 3; i++) {
        r[i].state = DM_PM_FAILED;
        r[i].down = false;
    }
    dm_pm_metrics(&tr, r, 3, 1, &m);
    assert_int_equal(m.n_total, 3);
    assert_int_equal(m.n_live, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learns_connections_per_server_at_full_power),
        cmocka_unit_test(test_metrics_count_every_server_not_held),
        cmocka_unit_test(test_leaves_out_saturated_idle_estimated_and_inactive_readings),
        cmocka_unit_test(test_follows_a_change_in_steps_of_a_tenth),
        cmocka_unit_test(test_a_quiet_night_forgets_nothing),
        cmocka_unit_test(test_nothing_to_divide_is_never_learned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
