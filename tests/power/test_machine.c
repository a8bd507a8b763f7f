/*
 * The servers' power state machine (power/machine.h): drain with connections
 * left, boot timeout -> failed -> another woken, and the wake and sleep
 * choice rules with their limits (min_active, min_change, held servers,
 * servers that could not be woken again).
 */
#include "dm_test.h"

#include <string.h>

#include "power/machine.h"

#define S 1000000ull /* one second in microseconds */

static struct dm_pm_rules
rules(void)
{
    return (struct dm_pm_rules){
        .drain_timeout_us = 30 * S,
        .boot_us = 7 * S,
        .boot_timeout_us = 60 * S,
        .min_change_us = 10 * S,
        .action_interval_us = 1 * S,
        .min_active = 1,
        .health_checked = true,
    };
}

static struct dm_pm_server
server(enum dm_pm_state st, uint64_t since, double cost, double load)
{
    return (struct dm_pm_server){
        .state = st, .since_us = since, .can_wake = true, .cost = cost, .load = load
    };
}

static void
test_drain_waits_for_acks_requests_and_bound_clients(void **st)
{
    (void)st;
    struct dm_pm_rules r = rules();
    struct dm_pm_server s = server(DM_PM_DRAINING, 100 * S, 1, 0);
    struct dm_pm_observed o = { .acked = false, .inflight = 0, .bound = 0 };
    /* Counts of zero mean nothing before every worker acknowledged the drain. */
    assert_int_equal(dm_pm_progress(&r, &s, &o, 101 * S), DM_PM_NOTHING);
    o.acked = true;
    o.inflight = 2;
    assert_int_equal(dm_pm_progress(&r, &s, &o, 101 * S), DM_PM_NOTHING);
    o.inflight = 0;
    o.bound = 3; /* connections left: bound clients still on it */
    assert_int_equal(dm_pm_progress(&r, &s, &o, 129 * S), DM_PM_NOTHING);
    assert_int_equal(dm_pm_progress(&r, &s, &o, 130 * S), DM_PM_DRAIN_TIMEOUT);
    assert_int_equal(dm_pm_event_state(DM_PM_DRAIN_TIMEOUT), DM_PM_SLEEPING);
    o.bound = 0;
    assert_int_equal(dm_pm_progress(&r, &s, &o, 102 * S), DM_PM_DRAINED);
    assert_int_equal(dm_pm_event_state(DM_PM_DRAINED), DM_PM_SLEEPING);
}

static void
test_boot_timeout_fails_and_another_is_woken(void **st)
{
    (void)st;
    struct dm_pm_rules r = rules();
    struct dm_pm_server s[3] = {
        server(DM_PM_ACTIVE, 0, 1, 5),
        server(DM_PM_BOOTING, 100 * S, 1, 0),
        server(DM_PM_SLEEPING, 0, 1, 0),
    };
    struct dm_pm_observed sick = { .acked = true, .healthy = false };
    assert_int_equal(dm_pm_progress(&r, &s[1], &sick, 159 * S), DM_PM_NOTHING);
    enum dm_pm_event e = dm_pm_progress(&r, &s[1], &sick, 160 * S);
    assert_int_equal(e, DM_PM_BOOT_TIMEOUT);
    s[1].state = dm_pm_event_state(e);
    assert_int_equal(s[1].state, DM_PM_FAILED);
    s[1].last_change_us = 160 * S;
    /* Two were wanted (one active, one booting): the failed one is not
     * counted, so the plan wakes the other sleeping server in its place. */
    struct dm_pm_move m[4];
    unsigned short_by;
    size_t k = dm_pm_plan(&r, s, 3, 2, 160 * S, false, m, 4, &short_by);
    assert_int_equal(k, 1);
    assert_int_equal(m[0].index, 2);
    assert_int_equal(m[0].to, DM_PM_BOOTING);
    assert_int_equal(short_by, 0);
    /* A healthy booting server is up; without health checks, after boot_us. */
    struct dm_pm_observed well = { .acked = true, .healthy = true };
    assert_int_equal(dm_pm_progress(&r, &s[2], &well, 0), DM_PM_NOTHING); /* sleeping */
    struct dm_pm_server b = server(DM_PM_BOOTING, 10 * S, 1, 0);
    assert_int_equal(dm_pm_progress(&r, &b, &well, 11 * S), DM_PM_UP);
    r.health_checked = false;
    assert_int_equal(dm_pm_progress(&r, &b, &sick, 16 * S), DM_PM_NOTHING);
    assert_int_equal(dm_pm_progress(&r, &b, &sick, 17 * S), DM_PM_UP);
    /* While its wake waits (for the sleep command, or action_interval) or
     * runs, a booting server is neither up nor timed out: a health check
     * that passes is the machine still going to sleep. */
    b.busy = true;
    assert_int_equal(dm_pm_progress(&r, &b, &sick, 100 * S), DM_PM_NOTHING);
    r.health_checked = true;
    assert_int_equal(dm_pm_progress(&r, &b, &well, 11 * S), DM_PM_NOTHING);
    assert_int_equal(dm_pm_progress(&r, &b, &sick, 100 * S), DM_PM_NOTHING);
    b.busy = false;
    assert_int_equal(dm_pm_progress(&r, &b, &well, 11 * S), DM_PM_UP);
}

static void
test_a_failed_server_that_comes_up_is_active(void **st)
{
    (void)st;
    struct dm_pm_rules r = rules();
    struct dm_pm_server f = server(DM_PM_FAILED, 100 * S, 1, 0);
    struct dm_pm_observed sick = { .acked = true, .healthy = false };
    struct dm_pm_observed well = { .acked = true, .healthy = true };
    /* It booted after boot_timeout: its health check passing brings it back
     * (it was failed for good, and scale to zero answered 503 for ever). */
    assert_int_equal(dm_pm_progress(&r, &f, &sick, 500 * S), DM_PM_NOTHING);
    enum dm_pm_event e = dm_pm_progress(&r, &f, &well, 101 * S);
    assert_int_equal(e, DM_PM_UP);
    assert_int_equal(dm_pm_event_state(e), DM_PM_ACTIVE);
    /* Not while an actuator of it runs, and not without a health check to say so. */
    f.busy = true;
    assert_int_equal(dm_pm_progress(&r, &f, &well, 101 * S), DM_PM_NOTHING);
    f.busy = false;
    r.health_checked = false;
    assert_int_equal(dm_pm_progress(&r, &f, &well, 500 * S), DM_PM_NOTHING);
}

static void
test_a_failed_server_is_woken_again_after_boot_timeout(void **st)
{
    (void)st;
    struct dm_pm_rules r = rules();
    struct dm_pm_server s[2] = {
        server(DM_PM_FAILED, 100 * S, 1, 0),
        server(DM_PM_FAILED, 100 * S, 2, 0),
    };
    s[0].last_change_us = s[1].last_change_us = 100 * S;
    struct dm_pm_move m[4];
    unsigned short_by;
    /* Within boot_timeout of its failure, none is woken again (a wake lost
     * or failed once left it failed for good: every request 503). */
    assert_false(dm_pm_retry_due(&r, &s[0], 159 * S));
    assert_int_equal(dm_pm_plan(&r, s, 2, 1, 159 * S, true, m, 4, &short_by), 0);
    assert_int_equal(short_by, 1);
    /* A failure stamped after the caller read its clock (a wake that failed
     * at its start, in the same tick) has only just happened. */
    assert_false(dm_pm_retry_due(&r, &s[0], 100 * S - 1));
    assert_int_equal(dm_pm_plan(&r, s, 2, 1, 100 * S - 1, true, m, 4, &short_by), 0);
    /* Then one is, as a sleeping one would be (the efficient first), urgent or not. */
    assert_true(dm_pm_retry_due(&r, &s[0], 160 * S));
    for (int urgent = 0; urgent <= 1; urgent++) {
        assert_int_equal(dm_pm_plan(&r, s, 2, 1, 160 * S, urgent, m, 4, &short_by), 1);
        assert_int_equal(m[0].index, 0);
        assert_int_equal(m[0].to, DM_PM_BOOTING);
    }
    /* A sleeping one first, whatever its cost; none held or without a wake. */
    struct dm_pm_server t[3] = { s[0], server(DM_PM_SLEEPING, 0, 9, 0), s[1] };
    assert_int_equal(dm_pm_plan(&r, t, 3, 1, 160 * S, false, m, 4, &short_by), 1);
    assert_int_equal(m[0].index, 1);
    assert_int_equal(dm_pm_plan(&r, t, 3, 3, 160 * S, false, m, 4, &short_by), 3);
    assert_int_equal(m[1].index, 0);
    assert_int_equal(m[2].index, 2);
    t[0].held = true;
    t[2].can_wake = false;
    assert_false(dm_pm_retry_due(&r, &t[0], 500 * S));
    assert_false(dm_pm_retry_due(&r, &t[2], 500 * S));
    assert_int_equal(dm_pm_plan(&r, t, 3, 3, 500 * S, false, m, 4, &short_by), 1);
    assert_int_equal(short_by, 2);
}

static void
test_an_active_server_that_is_down_is_replaced(void **st)
{
    (void)st;
    struct dm_pm_rules r = rules();
    struct dm_pm_server s[2] = {
        server(DM_PM_ACTIVE, 0, 1, 5),
        server(DM_PM_SLEEPING, 0, 1, 0),
    };
    struct dm_pm_move m[4];
    unsigned short_by;
    assert_int_equal(dm_pm_plan(&r, s, 2, 1, 100 * S, false, m, 4, &short_by), 0);
    /* Its health check fails: it serves nothing, so one is woken in its
     * place (it was counted as serving, and every request was held). */
    s[0].down = true;
    unsigned active, booting, draining;
    dm_pm_count(s, 2, &active, &booting, &draining);
    assert_int_equal(active, 0);
    size_t k = dm_pm_plan(&r, s, 2, 1, 100 * S, false, m, 4, &short_by);
    assert_int_equal(k, 1);
    assert_int_equal(m[0].index, 1);
    assert_int_equal(m[0].to, DM_PM_BOOTING);
    /* Once the other serves, the down one is not drained in its place. */
    s[1].state = DM_PM_ACTIVE;
    assert_int_equal(dm_pm_plan(&r, s, 2, 1, 100 * S, false, m, 4, &short_by), 0);
}

static void
test_plan_takes_back_draining_then_wakes_the_most_efficient(void **st)
{
    (void)st;
    struct dm_pm_rules r = rules();
    struct dm_pm_server s[4] = {
        server(DM_PM_ACTIVE, 0, 1, 5),
        server(DM_PM_SLEEPING, 0, 0.9, 0),
        server(DM_PM_DRAINING, 0, 1, 2),
        server(DM_PM_SLEEPING, 0, 0.5, 0),
    };
    struct dm_pm_move m[4];
    unsigned short_by;
    size_t k = dm_pm_plan(&r, s, 4, 3, 100 * S, false, m, 4, &short_by);
    assert_int_equal(k, 2);
    assert_int_equal(m[0].index, 2); /* still up: back at once */
    assert_int_equal(m[0].to, DM_PM_ACTIVE);
    assert_int_equal(m[1].index, 3); /* 0.5 W per unit of capacity beats 0.9 */
    assert_int_equal(m[1].to, DM_PM_BOOTING);
    r.wake_rule = DM_PM_WAKE_FIRST;
    k = dm_pm_plan(&r, s, 4, 3, 100 * S, false, m, 4, &short_by);
    assert_int_equal(m[1].index, 1);
    /* More than there are: what can be done, and how many are missing. */
    k = dm_pm_plan(&r, s, 4, 6, 100 * S, false, m, 4, &short_by);
    assert_int_equal(k, 3);
    assert_int_equal(short_by, 2);
}

static void
test_plan_drains_the_least_loaded_never_below_min_active(void **st)
{
    (void)st;
    struct dm_pm_rules r = rules();
    struct dm_pm_server s[4] = {
        server(DM_PM_ACTIVE, 0, 1, 30),
        server(DM_PM_ACTIVE, 0, 1, 4),
        server(DM_PM_ACTIVE, 0, 1, 12),
        server(DM_PM_ACTIVE, 0, 1, 50),
    };
    struct dm_pm_move m[4];
    unsigned short_by;
    size_t k = dm_pm_plan(&r, s, 4, 2, 100 * S, false, m, 4, &short_by);
    assert_int_equal(k, 2);
    assert_int_equal(m[0].index, 1);
    assert_int_equal(m[0].to, DM_PM_DRAINING);
    assert_int_equal(m[1].index, 2);
    r.sleep_rule = DM_PM_SLEEP_LAST;
    k = dm_pm_plan(&r, s, 4, 3, 100 * S, false, m, 4, &short_by);
    assert_int_equal(k, 1);
    assert_int_equal(m[0].index, 3);
    /* A target of 0 keeps min_active. */
    r.sleep_rule = DM_PM_SLEEP_LEAST_LOADED;
    r.min_active = 2;
    k = dm_pm_plan(&r, s, 4, 0, 100 * S, false, m, 4, &short_by);
    assert_int_equal(k, 2);
    r.min_active = 0;
    k = dm_pm_plan(&r, s, 4, 0, 100 * S, false, m, 4, &short_by);
    assert_int_equal(k, 4);
}

static void
test_plan_respects_min_change_holds_and_wakeability(void **st)
{
    (void)st;
    struct dm_pm_rules r = rules();
    struct dm_pm_server s[4] = {
        server(DM_PM_ACTIVE, 0, 1, 1),
        server(DM_PM_ACTIVE, 0, 1, 2),
        server(DM_PM_ACTIVE, 0, 1, 3),
        server(DM_PM_SLEEPING, 0, 1, 0),
    };
    struct dm_pm_move m[4];
    unsigned short_by;
    s[0].last_change_us = 95 * S; /* changed 5 s ago: min_change is 10 s */
    s[1].held = true;             /* the operator's */
    s[2].can_wake = false;        /* would never come back */
    assert_int_equal(dm_pm_plan(&r, s, 4, 1, 100 * S, false, m, 4, &short_by), 0);
    s[2].can_wake = true;
    s[2].keep_on = true; /* must stay on */
    assert_int_equal(dm_pm_plan(&r, s, 4, 1, 100 * S, false, m, 4, &short_by), 0);
    s[2].keep_on = false;
    s[2].can_wake = false;
    s[0].last_change_us = 90 * S;
    size_t k = dm_pm_plan(&r, s, 4, 1, 100 * S, false, m, 4, &short_by);
    assert_int_equal(k, 1);
    assert_int_equal(m[0].index, 0);
    /* Held servers are not counted: want 3 of the unheld (0, 2) wakes 3. */
    k = dm_pm_plan(&r, s, 4, 3, 100 * S, false, m, 4, &short_by);
    assert_int_equal(k, 1);
    assert_int_equal(m[0].index, 3);
    /* Waking waits for min_change and the action interval, unless urgent. */
    s[3].last_change_us = 99 * S;
    assert_int_equal(dm_pm_plan(&r, s, 4, 3, 100 * S, false, m, 4, &short_by), 0);
    assert_int_equal(short_by, 1);
    s[3].last_change_us = 0;
    s[3].last_action_us = 995 * S / 10;
    assert_int_equal(dm_pm_plan(&r, s, 4, 3, 100 * S, false, m, 4, &short_by), 0);
    assert_int_equal(dm_pm_plan(&r, s, 4, 3, 100 * S, true, m, 4, &short_by), 1);
    /* Urgent with two asleep: the one whose action_interval has passed
     * first, though the other is cheaper; then the cheaper if both are due. */
    struct dm_pm_server u[3] = {
        server(DM_PM_ACTIVE, 0, 1, 1),
        server(DM_PM_SLEEPING, 0, 1, 0),
        server(DM_PM_SLEEPING, 0, 2, 0),
    };
    u[1].last_action_us = 995 * S / 10;
    k = dm_pm_plan(&r, u, 3, 2, 100 * S, true, m, 4, &short_by);
    assert_int_equal(k, 1);
    assert_int_equal(m[0].index, 2);
    u[1].last_action_us = 0;
    k = dm_pm_plan(&r, u, 3, 2, 100 * S, true, m, 4, &short_by);
    assert_int_equal(k, 1);
    assert_int_equal(m[0].index, 1);
    /* An actuator still running: never a second action, urgent or not. */
    s[3].busy = true;
    assert_int_equal(dm_pm_plan(&r, s, 4, 3, 100 * S, true, m, 4, &short_by), 0);
}

static void
test_an_unseen_server_is_woken_after_sleeping_ones(void **st)
{
    (void)st;
    struct dm_pm_rules r = rules();
    /* Active and down since a restart, never seen up: maybe asleep. Woken
     * (after a sleeping one, before one whose retry is due), though it
     * changed within min_change (the manager just took it), but not within
     * action_interval of its last action, nor while its actuator runs, nor
     * held, nor without a wake actuator. */
    struct dm_pm_server s[3] = {
        server(DM_PM_ACTIVE, 100 * S, 1, 0),
        server(DM_PM_SLEEPING, 0, 9, 0),
        server(DM_PM_FAILED, 0, 1, 0),
    };
    s[0].down = s[0].unseen = true;
    s[0].last_change_us = 100 * S;
    struct dm_pm_move m[4];
    unsigned short_by;
    size_t k = dm_pm_plan(&r, s, 3, 3, 101 * S, false, m, 4, &short_by);
    assert_int_equal(k, 3);
    assert_int_equal(m[0].index, 1);
    assert_int_equal(m[1].index, 0);
    assert_int_equal(m[1].to, DM_PM_BOOTING);
    assert_int_equal(m[2].index, 2);
    assert_int_equal(dm_pm_plan(&r, s, 1, 1, 101 * S, false, m, 4, &short_by), 1);
    assert_int_equal(m[0].index, 0);
    s[0].last_action_us = 1005 * S / 10;
    assert_int_equal(dm_pm_plan(&r, s, 1, 1, 101 * S, false, m, 4, &short_by), 0);
    assert_int_equal(short_by, 1);
    s[0].last_action_us = 0;
    s[0].busy = true;
    assert_int_equal(dm_pm_plan(&r, s, 1, 1, 101 * S, true, m, 4, &short_by), 0);
    s[0].busy = false;
    s[0].held = true;
    assert_int_equal(dm_pm_plan(&r, s, 1, 1, 101 * S, true, m, 4, &short_by), 0);
    s[0].held = false;
    s[0].can_wake = false;
    assert_int_equal(dm_pm_plan(&r, s, 1, 1, 101 * S, true, m, 4, &short_by), 0);
    /* Down but seen up once: not woken (another would be in its place). */
    s[0].can_wake = true;
    s[0].unseen = false;
    assert_int_equal(dm_pm_plan(&r, s, 1, 1, 101 * S, true, m, 4, &short_by), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drain_waits_for_acks_requests_and_bound_clients),
        cmocka_unit_test(test_boot_timeout_fails_and_another_is_woken),
        cmocka_unit_test(test_a_failed_server_that_comes_up_is_active),
        cmocka_unit_test(test_a_failed_server_is_woken_again_after_boot_timeout),
        cmocka_unit_test(test_an_active_server_that_is_down_is_replaced),
        cmocka_unit_test(test_an_unseen_server_is_woken_after_sleeping_ones),
        cmocka_unit_test(test_plan_takes_back_draining_then_wakes_the_most_efficient),
        cmocka_unit_test(test_plan_drains_the_least_loaded_never_below_min_active),
        cmocka_unit_test(test_plan_respects_min_change_holds_and_wakeability),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
