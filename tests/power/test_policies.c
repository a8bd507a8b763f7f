/*
 * The power policies (power/policy.h) on scripted metrics: the seed's Table 3
 * classes and thresholds, its Table 5 weights at 57/58/66/67 W, single and
 * dual by their formulas, immediate control on the rapid classes, and
 * boot-aware never sleeping a server that it wakes again within a boot
 * delay on an up-down-up sequence where multi does.
 */
#include "dm_test.h"

#include <math.h>
#include <string.h>

#include "power/policy.h"

static struct dm_power_params P;

static int
setup(void **st)
{
    (void)st;
    dm_power_params_default(&P);
    return 0;
}

static struct dm_power_metrics
metrics(unsigned total, unsigned live, double watts, double d_tcp)
{
    return (struct dm_power_metrics){
        .n_total = total, .n_live = live, .total_w = watts, .d_tcp = d_tcp, .trend_s = 1
    };
}

static struct dm_power_target
decide(const struct dm_power_ops *ops, void *state, const struct dm_power_metrics *m, uint64_t now)
{
    struct dm_power_target t;
    memset(&t, 0xa5, sizeof(t));
    ops->decide(state, &P, m, now, &t);
    return t;
}

static void
test_table3_classes(void **st)
{
    (void)st;
    /* 4 live servers x TCPmax 200 = 800; normal weights 0.075, 0.05: bounds 60 and 40. */
    const struct {
        double d;
        enum dm_power_class c;
    } cases[] = {
        { 61, DM_PC_RAPID_GROWTH }, { 60, DM_PC_GROWTH },   { 41, DM_PC_GROWTH },
        { 40, DM_PC_STEADY },       { 0, DM_PC_STEADY },    { -40, DM_PC_STEADY },
        { -41, DM_PC_DECLINE },     { -60, DM_PC_DECLINE }, { -61, DM_PC_RAPID_DECLINE },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(dm_power_classify(&P.normal, P.tcp_max, 4, cases[i].d), cases[i].c);
    }
    /* The bounds grow with the live servers: 61 is only growth with 8 live (120, 80). */
    assert_int_equal(dm_power_classify(&P.normal, P.tcp_max, 8, 61), DM_PC_STEADY);
    assert_int_equal(dm_power_classify(&P.normal, P.tcp_max, 8, 81), DM_PC_GROWTH);
    assert_string_equal(dm_power_class_name(DM_PC_RAPID_DECLINE), "rapid-decline");
}

static void
test_table5_tiers(void **st)
{
    (void)st;
    const struct dm_power_weights *w = dm_power_tier(&P, 57);
    assert_true(w->alpha == 0.15 && w->beta == 0.10 && w->neg_beta == -0.01 &&
                w->neg_alpha == -0.015);
    w = dm_power_tier(&P, 58);
    assert_true(w->alpha == 0.075 && w->beta == 0.05 && w->neg_beta == -0.05 &&
                w->neg_alpha == -0.075);
    assert_ptr_equal(dm_power_tier(&P, 66), w);
    w = dm_power_tier(&P, 67);
    assert_true(w->alpha == 0.015 && w->beta == 0.01 && w->neg_beta == -0.10 &&
                w->neg_alpha == -0.15);
    /* flexible through those weights: 4 live servers (TCPmax x 4 = 800) at an
     * average of 57, 58, 66 or 67 W, the load's connections rising or falling
     * by 100. The class comes from the tier's bounds (57 W: +-120/80 up,
     * -8/-12 down; 58 and 66 W: +-60/40; 67 W: +12/8 up, -80/-120 down), the
     * threshold from the class, the servers from total / threshold. */
    const struct {
        double avg_w, d_tcp;
        enum dm_power_class cls;
        double threshold;
        unsigned servers;
    } cases[] = {
        { 57, +100, DM_PC_GROWTH, 55, 5 },        /* 228 / 55 = 4.1 */
        { 57, -100, DM_PC_RAPID_DECLINE, 70, 4 }, /* 228 / 70 = 3.3 */
        { 58, +100, DM_PC_RAPID_GROWTH, 50, 5 },  /* 232 / 50 = 4.6 */
        { 58, -50, DM_PC_DECLINE, 65, 4 },        /* 232 / 65 = 3.6 */
        { 66, +50, DM_PC_GROWTH, 55, 5 },         /* 264 / 55 = 4.8 */
        { 66, -100, DM_PC_RAPID_DECLINE, 70, 4 }, /* 264 / 70 = 3.8 */
        { 67, +100, DM_PC_RAPID_GROWTH, 50, 6 },  /* 268 / 50 = 5.4 */
        { 67, -100, DM_PC_DECLINE, 65, 5 },       /* 268 / 65 = 4.1 */
        { 67, -121, DM_PC_RAPID_DECLINE, 70, 4 }, /* 268 / 70 = 3.8 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dm_power_metrics m = metrics(15, 4, 4 * cases[i].avg_w, cases[i].d_tcp);
        struct dm_power_target t = decide(&dm_power_flexible, NULL, &m, 0);
        assert_int_equal(t.cls, cases[i].cls);
        assert_true(t.threshold_w == cases[i].threshold);
        assert_int_equal(t.servers, cases[i].servers);
        assert_int_equal(t.immediate,
                         cases[i].cls == DM_PC_RAPID_GROWTH || cases[i].cls == DM_PC_RAPID_DECLINE);
    }
}

static void
test_single_and_dual_formulas(void **st)
{
    (void)st;
    /* single: ceil(total / T1), within [min_active, n_total]. */
    struct dm_power_metrics m = metrics(15, 6, 340, 0);
    struct dm_power_target t = decide(&dm_power_single, NULL, &m, 0);
    assert_int_equal(t.servers, (unsigned)ceil(340.0 / 60));
    assert_true(t.threshold_w == 60);
    m.total_w = 2000;
    assert_int_equal(decide(&dm_power_single, NULL, &m, 0).servers, 15);
    m.total_w = 0;
    assert_int_equal(decide(&dm_power_single, NULL, &m, 0).servers, 1); /* min_active */
    P.min_active = 0;
    assert_int_equal(decide(&dm_power_single, NULL, &m, 0).servers, 0); /* scale to zero */
    /* Idle servers draw power, but with no connection left none is needed... */
    m.total_w = 2 * 40;
    m.tcp = 0;
    assert_int_equal(decide(&dm_power_single, NULL, &m, 0).servers, 0);
    /* ...while one connection, or a growing load, needs what the power says. */
    m.tcp = 1;
    assert_int_equal(decide(&dm_power_single, NULL, &m, 0).servers, 2);
    m.tcp = 0;
    m.d_tcp = 1;
    assert_int_equal(decide(&dm_power_single, NULL, &m, 0).servers, 2);
    m.d_tcp = 0;
    P.min_active = 1;
    assert_int_equal(decide(&dm_power_single, NULL, &m, 0).servers, 2);
    /* dual: T1 - 5 while growing, T1 + 5 while declining. */
    m = metrics(15, 6, 300, +1);
    t = decide(&dm_power_dual, NULL, &m, 0);
    assert_true(t.threshold_w == 55);
    assert_int_equal(t.servers, 6); /* 300 / 55 = 5.45 */
    m.d_tcp = -1;
    t = decide(&dm_power_dual, NULL, &m, 0);
    assert_true(t.threshold_w == 65);
    assert_int_equal(t.servers, 5); /* 300 / 65 = 4.6 */
    m.d_tcp = 0;
    assert_int_equal(decide(&dm_power_dual, NULL, &m, 0).servers, 5); /* 300 / 60 */
    /* always-on: all of them. */
    assert_int_equal(decide(&dm_power_always_on, NULL, &m, 0).servers, 15);
}

static void
test_multi_thresholds_and_immediate_control(void **st)
{
    (void)st;
    /* 4 live, 340 W: thresholds 50, 55, 60, 65, 70 by class. */
    const struct {
        double d;
        double t;
        unsigned n;
        bool now;
    } cases[] = {
        { 100, 50, 7, true },  { 50, 55, 7, false },  { 0, 60, 6, false },
        { -50, 65, 6, false }, { -100, 70, 5, true },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dm_power_metrics m = metrics(15, 4, 340, cases[i].d);
        struct dm_power_target t = decide(&dm_power_multi, NULL, &m, 0);
        assert_true(t.threshold_w == cases[i].t);
        assert_int_equal(t.servers, cases[i].n);
        assert_int_equal(t.immediate, cases[i].now);
        assert_int_equal(t.servers, (unsigned)ceil(340.0 / cases[i].t));
    }
}

static void
test_flexible_tier_changes_the_class(void **st)
{
    (void)st;
    /* +10 connections on 4 live (800): steady with much spare capacity (beta 0.10 -> 80),
     * growth with little (beta 0.01 -> 8); -10 the other way round. */
    struct dm_power_metrics m = metrics(15, 4, 4 * 50.0, +10);
    assert_int_equal(decide(&dm_power_flexible, NULL, &m, 0).cls, DM_PC_STEADY);
    m.total_w = 4 * 68.0;
    assert_int_equal(decide(&dm_power_flexible, NULL, &m, 0).cls, DM_PC_GROWTH);
    m.d_tcp = -10;
    assert_int_equal(decide(&dm_power_flexible, NULL, &m, 0).cls, DM_PC_STEADY);
    m.total_w = 4 * 50.0;
    assert_int_equal(decide(&dm_power_flexible, NULL, &m, 0).cls, DM_PC_DECLINE);
    /* multi keeps the normal weights whatever the power. */
    m.total_w = 4 * 68.0;
    m.d_tcp = +10;
    assert_int_equal(decide(&dm_power_multi, NULL, &m, 0).cls, DM_PC_STEADY);
}

/* An up-down-up load: rise, a dip of 5 s, rise again. Returns the number of
 * times the policy's count went down and then up again within a boot delay. */
static unsigned
flaps(const struct dm_power_ops *ops, unsigned *peak)
{
    unsigned char state[1024] = { 0 };
    if (ops->init != NULL) {
        ops->init(state, &P);
    }
    unsigned live = 4, last = 4, n = 0;
    uint64_t down_at = 0;
    *peak = 0;
    for (unsigned sec = 0; sec < 40; sec++) {
        double d, w;
        if (sec < 10) {
            d = 60, w = 200 + 20.0 * sec; /* rising */
        } else if (sec < 15) {
            d = -60, w = 300 - 20.0 * (sec - 10); /* the dip */
        } else {
            d = 60, w = 200 + 20.0 * (sec - 15);
        }
        struct dm_power_metrics m = metrics(15, live, w, d);
        uint64_t now = (uint64_t)sec * 1000000;
        struct dm_power_target t = decide(ops, state, &m, now);
        if (t.servers < last) {
            down_at = now;
        } else if (t.servers > last && down_at != 0 && now - down_at < P.boot_us) {
            n++;
        }
        last = t.servers;
        live = t.servers;
        *peak = t.servers > *peak ? t.servers : *peak;
    }
    return n;
}

static void
test_boot_aware_does_not_flap(void **st)
{
    (void)st;
    unsigned peak_multi, peak_boot;
    assert_true(flaps(&dm_power_multi, &peak_multi) > 0); /* the seed's rule does */
    assert_int_equal(flaps(&dm_power_boot_aware, &peak_boot), 0);
    assert_true(peak_boot >= peak_multi);
}

/* One boot-aware reading of n live (of 15) at idle power with tcp connections. */
static struct dm_power_target
ba_reading(void *state, unsigned n, double tcp, double d_tcp, uint64_t sec)
{
    struct dm_power_metrics m = metrics(15, n, n * P.idle_w, d_tcp);
    m.tcp = tcp;
    return decide(&dm_power_boot_aware, state, &m, sec * 1000000);
}

/*
 * Load above idle, not watts: 10 live servers at 460 W carry 2 servers' worth
 * of work (60 W above idle, over 30 W from idle to full), which u1 = (60 - 40)
 * / 30 = 2/3 turns into 3 servers; single's 460 / 60 keeps 8. Down only once
 * the lower need has lasted delay_off (30 s), then at once.
 */
static void
test_boot_aware_counts_load_not_idle(void **st)
{
    (void)st;
    unsigned char state[1024];
    dm_power_boot_aware.init(state, &P);
    struct dm_power_metrics m = metrics(15, 10, 460, 0);
    assert_int_equal(decide(&dm_power_single, NULL, &m, 0).servers, 8);
    for (uint64_t s = 1; s < 31; s++) {
        assert_int_equal(decide(&dm_power_boot_aware, state, &m, s * 1000000).servers, 10);
    }
    struct dm_power_target t = decide(&dm_power_boot_aware, state, &m, 31 * 1000000);
    assert_int_equal(t.servers, 3);
    assert_true(t.immediate);
}

/*
 * Wakes ahead on a slope: connections rise 40 a second from 200 on 2 live
 * servers. At 3 s the load is 320 / 200 = 1.6 servers' worth (3 servers at
 * u1); the slope would add 40 x 7 s x 1.25 / 200 = 1.75 within a boot delay,
 * but no more than the largest rise a boot delay has brought so far, 0.6:
 * (1.6 + 0.6) / (2/3) = 3.3, so 4 servers, at once.
 */
static void
test_boot_aware_wakes_ahead(void **st)
{
    (void)st;
    unsigned char state[1024];
    dm_power_boot_aware.init(state, &P);
    for (uint64_t s = 0; s < 3; s++) {
        ba_reading(state, 2, 200 + 40.0 * s, s ? 40 : 0, s);
    }
    struct dm_power_target t = ba_reading(state, 2, 320, 40, 3);
    assert_int_equal(t.servers, 4);
    assert_true(t.immediate);
    /* Flat again: no slope, the load alone (and the room of that 0.6 rise). */
    for (uint64_t s = 4; s < 7; s++) {
        ba_reading(state, 4, 320, 0, s);
    }
    t = ba_reading(state, 4, 320, 0, 7);
    assert_int_equal(t.servers, 4);
}

/*
 * Room for a step: from 1 server's worth to 4 in one reading, then back
 * after 19 s. On the step it wakes for the load and the slope's spare,
 * capped by the rise just seen: (4 + 3) / (2/3) = 10.5, so 11. Long after
 * delay_off it keeps the room that step needs again, min(1 + 3, 4) = 4
 * servers' worth at u1 = 6 servers, where the load alone needs 2; with a
 * short memory (history 10 s) the room fades and it comes down to 2.
 */
static void
test_boot_aware_keeps_room_for_steps(void **st)
{
    (void)st;
    for (int k = 0; k < 2; k++) {
        struct dm_power_params saved = P;
        if (k == 1) {
            P.history_us = 10000000;
        }
        unsigned char state[1024];
        dm_power_boot_aware.init(state, &P);
        unsigned n = 2;
        double tcp = 200;
        for (uint64_t s = 1; s < 200; s++) {
            double want = s >= 2 && s < 21 ? 800 : 200;
            double d = s > 1 ? want - tcp : 0;
            tcp = want;
            n = ba_reading(state, n, tcp, d, s).servers;
            if (s == 2) {
                assert_int_equal(n, 11);
            }
            if (s >= 2 && s < 21) {
                assert_true(n >= 6); /* never below what 4 servers' worth needs */
            }
            if (k == 0 && s >= 100) {
                assert_int_equal(n, 6); /* the room stays */
            }
        }
        if (k == 1) {
            assert_int_equal(n, 2); /* the memory has faded: the load alone */
        }
        P = saved;
    }
}

/*
 * A burst is not a need: on 2 live servers holding 200 connections (1
 * server's worth at tcp_max 200, 2 servers at u1), a page burst fills both
 * to full power for 5 s while the connections stay. A server woken then
 * would be up 7 s later, after it: nothing is woken. Full power that lasts
 * (a load the connections undercount) is: once it has lasted a boot delay,
 * the servers it calls for are woken.
 */
static void
test_boot_aware_waits_out_a_burst_shorter_than_a_boot(void **st)
{
    (void)st;
    unsigned char state[1024];
    dm_power_boot_aware.init(state, &P);
    struct dm_power_metrics m = metrics(15, 2, 2 * P.idle_w, 0);
    m.tcp = 200;
    uint64_t s = 1;
    for (; s < 20; s++) {
        assert_int_equal(decide(&dm_power_boot_aware, state, &m, s * 1000000).servers, 2);
    }
    m.total_w = 2 * P.full_w;
    for (uint64_t end = s + 5; s < end; s++) {
        assert_int_equal(decide(&dm_power_boot_aware, state, &m, s * 1000000).servers, 2);
    }
    m.total_w = 2 * P.idle_w;
    for (uint64_t end = s + 20; s < end; s++) {
        assert_int_equal(decide(&dm_power_boot_aware, state, &m, s * 1000000).servers, 2);
    }
    /* Full power that stays: 2 servers' worth over a boot delay is 3
     * servers at u1 (2 / (2/3)), asked for once it has lasted one. */
    m.total_w = 2 * P.full_w;
    unsigned most = 0;
    for (uint64_t end = s + 9; s < end; s++) {
        unsigned n = decide(&dm_power_boot_aware, state, &m, s * 1000000).servers;
        most = n > most ? n : most;
    }
    assert_true(most >= 3);
}

static void
test_registry(void **st)
{
    (void)st;
    const char *names[] = { "always-on", "single", "dual", "multi", "flexible", "boot-aware" };
    size_t n = 0;
    for (; dm_power_registry[n] != NULL; n++) {
        assert_non_null(dm_power_registry[n]->decide);
        assert_true(dm_power_registry[n]->state_size <= 1024);
    }
    assert_int_equal(n, sizeof(names) / sizeof(names[0]));
    for (size_t i = 0; i < n; i++) {
        assert_ptr_equal(dm_power_find(names[i]), dm_power_registry[i]);
    }
    assert_null(dm_power_find("turbo"));
    assert_null(dm_power_find(NULL));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_table3_classes, setup),
        cmocka_unit_test_setup(test_table5_tiers, setup),
        cmocka_unit_test_setup(test_single_and_dual_formulas, setup),
        cmocka_unit_test_setup(test_multi_thresholds_and_immediate_control, setup),
        cmocka_unit_test_setup(test_flexible_tier_changes_the_class, setup),
        cmocka_unit_test_setup(test_boot_aware_does_not_flap, setup),
        cmocka_unit_test_setup(test_boot_aware_counts_load_not_idle, setup),
        cmocka_unit_test_setup(test_boot_aware_wakes_ahead, setup),
        cmocka_unit_test_setup(test_boot_aware_keeps_room_for_steps, setup),
        cmocka_unit_test_setup(test_boot_aware_waits_out_a_burst_shorter_than_a_boot, setup),
        cmocka_unit_test_setup(test_registry, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
