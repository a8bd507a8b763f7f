/*
 * The power manager's pure arithmetic (power/control.h): tcp_max learned from
 * the agents' reports (tcp_max: auto), which leaves out saturated servers,
 * the proxy's own estimates and held or inactive servers, waits for enough
 * evidence, and follows a change of the servers at its half-life.
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

static void
test_learns_connections_per_server_at_full_power(void **st)
{
    (void)st;
    struct dm_pm_tcpmax l = { 0 };
    bool learned = true;
    uint64_t now = 1000 * S;
    /* Two servers at 20 % and 50 % of a 130-connection server: 0.7 of a
     * server a reading, so eight readings are not yet five servers' worth. */
    struct dm_pm_reading r[2] = { reading(26, 130), reading(65, 130) };
    for (int i = 0; i < 7; i++, now += S) {
        assert_true(dm_pm_tcpmax_learn(&l, r, 2, now, 200, &learned) == 200);
        assert_false(learned);
    }
    double v = 0;
    for (int i = 0; i < 3; i++, now += S) {
        v = dm_pm_tcpmax_learn(&l, r, 2, now, 200, &learned);
    }
    assert_true(learned);
    assert_true(fabs(v - 130) < 0.5);
}

static void
test_leaves_out_saturated_estimated_and_idle_readings(void **st)
{
    (void)st;
    struct dm_pm_tcpmax l = { 0 };
    bool learned = false;
    uint64_t now = 1000 * S;
    double v = 0;
    for (int i = 0; i < 60; i++, now += S) {
        struct dm_pm_reading r[6] = {
            reading(40, 100),  /* the one that counts: 0.4 of a server */
            reading(30, 30),   /* a burst: full with 30 connections */
            reading(500, 100), /* a backlog: full (capped) with 500 */
            reading(20, 100),  reading(20, 100), reading(20, 100),
        };
        r[3].reported = false;       /* the proxy's own estimate: made from tcp_max */
        r[4].held = true;            /* the operator's */
        r[5].state = DM_PM_DRAINING; /* not taking requests */
        v = dm_pm_tcpmax_learn(&l, r, 6, now, 200, &learned);
    }
    assert_true(learned);
    assert_true(fabs(v - 100) < 0.5);
}

static void
test_follows_a_change_at_its_half_life(void **st)
{
    (void)st;
    struct dm_pm_tcpmax l = { 0 };
    bool learned = false;
    uint64_t now = 1000 * S;
    struct dm_pm_reading a = reading(50, 100), b = reading(50, 200);
    /* An hour at 100, then servers that hold twice the connections: after one
     * half-life (600 s) of readings at 200, the old readings and the new
     * weigh about the same, (50 + 50) / (0.5 + 0.25) = 133; ten half-lives
     * later the old are forgotten. */
    for (int i = 0; i < 3600; i++, now += S) {
        dm_pm_tcpmax_learn(&l, &a, 1, now, 200, &learned);
    }
    double v = 0;
    for (int i = 0; i < DM_PM_TCPMAX_HALF_LIFE_S; i++, now += S) {
        v = dm_pm_tcpmax_learn(&l, &b, 1, now, 200, &learned);
    }
    assert_true(learned);
    assert_true(v > 128 && v < 138);
    for (int i = 0; i < 10 * DM_PM_TCPMAX_HALF_LIFE_S; i++, now += S) {
        v = dm_pm_tcpmax_learn(&l, &b, 1, now, 200, &learned);
    }
    assert_true(fabs(v - 200) < 2);
}

static void
test_no_connections_or_no_work_is_not_learned(void **st)
{
    (void)st;
    struct dm_pm_tcpmax l = { 0 };
    bool learned = true;
    uint64_t now = 1000 * S;
    /* Busy servers without a connection counted (tcp: agent with clients
     * elsewhere): nothing to divide. */
    struct dm_pm_reading r = reading(50, 100);
    r.tcp = 0;
    for (int i = 0; i < 100; i++, now += S) {
        assert_true(dm_pm_tcpmax_learn(&l, &r, 1, now, 200, &learned) == 200);
    }
    assert_false(learned);
    /* Idle servers with connections, or below idle (a power model that does
     * not fit): no work to learn from, ever. */
    l = (struct dm_pm_tcpmax){ 0 };
    r = reading(50, 100);
    for (int i = 0; i < 100; i++, now += S) {
        r.w = i % 2 ? 35 : 20;
        assert_true(dm_pm_tcpmax_learn(&l, &r, 1, now, 200, &learned) == 200);
    }
    assert_false(learned);
    /* And they do not tip what the others teach. */
    struct dm_pm_reading two[2] = { reading(50, 100), reading(500, 100) };
    two[1].w = 20;
    for (int i = 0; i < 20; i++, now += S) {
        dm_pm_tcpmax_learn(&l, two, 2, now, 200, &learned);
    }
    assert_true(learned);
    assert_true(fabs(dm_pm_tcpmax_learn(&l, two, 2, now, 200, &learned) - 100) < 0.5);
    /* A power model without a span (full_w at idle_w) says nothing either. */
    l = (struct dm_pm_tcpmax){ 0 };
    r = reading(50, 100);
    r.full_w = r.idle_w;
    for (int i = 0; i < 100; i++, now += S) {
        assert_true(dm_pm_tcpmax_learn(&l, &r, 1, now, 200, &learned) == 200);
    }
    assert_false(learned);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learns_connections_per_server_at_full_power),
        cmocka_unit_test(test_leaves_out_saturated_estimated_and_idle_readings),
        cmocka_unit_test(test_follows_a_change_at_its_half_life),
        cmocka_unit_test(test_no_connections_or_no_work_is_not_learned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
