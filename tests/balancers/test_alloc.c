/*
 * Tests for balancers/alloc.c: session allocation (greedy, annealing of LBF,
 * rate lowering). The invariants are checked from scratch, never from the
 * allocator's own sums: every placed group within capacity (C2), DMAX (C3)
 * and DVMAX (C4), at a tier of its list no higher than its request, over
 * many random instances, feasible and not.
 */
#include "dm_test.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/alloc.h"
#include "balancers/rng.h"

/* Rounding allowed between the allocator's sums and ours. */
#define TOL 1e-9

/* A random instance: its own servers, groups, rate lists and delays. */
struct inst {
    struct dm_alloc_server *servers;
    struct dm_alloc_group *groups;
    double *rates;  /* 5 per group */
    double *delays; /* per group: nclients * nservers */
    struct dm_alloc_problem p;
};

static double
unit(struct dm_rng *r)
{
    return (double)(dm_rng_next(r) >> 11) * 0x1.0p-53;
}

/*
 * m servers, n groups of 1..4 clients, 1..5 rates each, demand about
 * `pressure` times the capacity, delays 0..200 ms, limits that bind in
 * about half the instances.
 */
static void
inst_make(struct inst *in, struct dm_rng *r, size_t m, size_t n, double pressure)
{
    in->servers = calloc(m + 1, sizeof(*in->servers));
    in->groups = calloc(n + 1, sizeof(*in->groups));
    in->rates = calloc(5 * n + 1, sizeof(*in->rates));
    in->delays = calloc(4 * m * n + 1, sizeof(*in->delays));
    assert_non_null(in->servers);
    assert_non_null(in->groups);
    assert_non_null(in->rates);
    assert_non_null(in->delays);
    double demand = 0;
    for (size_t g = 0; g < n; g++) {
        size_t nr = 1 + dm_rng_below(r, 5);
        double rate = 5 + 10 * unit(r);
        for (size_t t = 0; t < nr; t++) {
            in->rates[5 * g + t] = rate;
            rate += 1 + 10 * unit(r);
        }
        size_t nc = 1 + dm_rng_below(r, 4);
        in->groups[g] = (struct dm_alloc_group){
            .frame_load = 1 + 20 * unit(r),
            .rates = &in->rates[5 * g],
            .nrates = nr,
            .want = dm_rng_below(r, nr),
            .nclients = nc,
            .delay_ms = &in->delays[4 * m * g],
        };
        for (size_t i = 0; i < nc * m; i++) {
            in->delays[4 * m * g + i] = 200 * unit(r);
        }
        demand += dm_alloc_group_load(&in->groups[g], in->groups[g].want);
    }
    double cap = m > 0 ? demand / pressure / (double)m : 0;
    for (size_t s = 0; s < m; s++) {
        double base = dm_rng_below(r, 3) == 0 ? cap * 0.3 * unit(r) : 0;
        in->servers[s] =
            (struct dm_alloc_server){ .capacity = cap * (0.5 + unit(r)) + base, .base_load = base };
    }
    in->p = (struct dm_alloc_problem){
        .servers = in->servers,
        .nservers = m,
        .groups = in->groups,
        .ngroups = n,
        .dmax_ms = dm_rng_below(r, 2) ? HUGE_VAL : 120 + 80 * unit(r),
        .dvmax_ms = dm_rng_below(r, 2) ? HUGE_VAL : 60 + 140 * unit(r),
    };
}

static void
inst_free(struct inst *in)
{
    free(in->servers);
    free(in->groups);
    free(in->rates);
    free(in->delays);
}

static bool
delays_ok(const struct dm_alloc_problem *p, const struct dm_alloc_group *g, size_t s)
{
    double lo = HUGE_VAL, hi = -HUGE_VAL;
    for (size_t c = 0; c < g->nclients; c++) {
        double d = g->delay_ms[c * p->nservers + s];
        lo = fmin(lo, d);
        hi = fmax(hi, d);
    }
    return hi <= p->dmax_ms && hi - lo <= p->dvmax_ms;
}

/* C2-C4, tiers in 0..request, and the allocator's loads, all from scratch. */
static void
check_invariants(const struct dm_alloc *a)
{
    const struct dm_alloc_problem *p = a->problem;
    double *load = calloc(p->nservers + 1, sizeof(double));
    assert_non_null(load);
    for (size_t s = 0; s < p->nservers; s++) {
        load[s] = p->servers[s].base_load;
    }
    for (size_t g = 0; g < p->ngroups; g++) {
        int s = a->server[g];
        if (s == DM_ALLOC_NONE) {
            continue;
        }
        const struct dm_alloc_group *gr = &p->groups[g];
        assert_true(gr->nclients > 0);
        assert_true(s >= 0 && (size_t)s < p->nservers);
        assert_true(a->tier[g] <= gr->want);
        assert_true(a->tier[g] < gr->nrates);
        assert_true(delays_ok(p, gr, (size_t)s));
        load[s] += dm_alloc_group_load(gr, a->tier[g]);
    }
    for (size_t s = 0; s < p->nservers; s++) {
        double cap = p->servers[s].capacity;
        assert_true(load[s] <= cap * (1 + TOL) + TOL);
        assert_true(fabs(load[s] - a->load[s]) <= TOL * (1 + load[s]));
    }
    free(load);
}

/* Ours, from scratch. */
static double
lbf_of(const struct dm_alloc *a)
{
    const struct dm_alloc_problem *p = a->problem;
    if (p->nservers == 0) {
        return 0;
    }
    double mean = 0, ss = 0;
    for (size_t s = 0; s < p->nservers; s++) {
        mean += a->load[s];
    }
    mean /= (double)p->nservers;
    for (size_t s = 0; s < p->nservers; s++) {
        ss += (a->load[s] - mean) * (a->load[s] - mean);
    }
    return sqrt(ss / (double)p->nservers);
}

/* On return of dm_alloc_raise/lower: no placed group can go up a tier on its server. */
static void
check_no_raise_fits(const struct dm_alloc *a)
{
    const struct dm_alloc_problem *p = a->problem;
    for (size_t g = 0; g < p->ngroups; g++) {
        int s = a->server[g];
        const struct dm_alloc_group *gr = &p->groups[g];
        if (s == DM_ALLOC_NONE || a->tier[g] >= gr->want) {
            continue;
        }
        double step = dm_alloc_group_load(gr, a->tier[g] + 1) - dm_alloc_group_load(gr, a->tier[g]);
        assert_true(a->load[s] + step > p->servers[s].capacity);
    }
}

static const struct dm_alloc_sa warm = {
    .iterations = 3000, .t0 = 0.2, .cooling = 0.9, .steps = 100
};

/*
 * Greedy, RANDOM, annealing, raising, lowering and the whole procedure keep
 * every constraint over many random instances, from idle to four times
 * overloaded; annealing never ends above its start; lowering's annealing
 * never ends below lowering without it.
 */
static void
test_constraints_hold_on_random_instances(void **state)
{
    (void)state;
    struct dm_rng r;
    dm_rng_init(&r, 2020);
    for (int round = 0; round < 300; round++) {
        struct inst in;
        size_t m = dm_rng_below(&r, 7), n = dm_rng_below(&r, 40);
        static const double pressure[] = { 0.3, 0.8, 1.0, 1.5, 4.0 };
        inst_make(&in, &r, m, n, pressure[round % 5]);
        struct dm_alloc a;
        assert_int_equal(dm_alloc_init(&a, &in.p, 0), 0);
        check_invariants(&a);

        int left = dm_alloc_random(&a, &r);
        assert_true(left >= 0 && (size_t)left <= n);
        check_invariants(&a);
        double start = lbf_of(&a);
        struct dm_alloc_sa hot = { .iterations = 2000, .t0 = 50, .cooling = 1 };
        assert_int_equal(dm_alloc_anneal(&a, &hot, &r), 0);
        check_invariants(&a);
        assert_true(lbf_of(&a) <= start * (1 + TOL) + TOL);

        dm_alloc_clear(&a);
        left = dm_alloc_greedy(&a);
        assert_true(left >= 0 && (size_t)left <= n);
        check_invariants(&a);
        start = lbf_of(&a);
        assert_true(fabs(dm_alloc_lbf(&a) - start) <= TOL * (1 + start));
        assert_int_equal(dm_alloc_anneal(&a, &warm, &r), 0);
        check_invariants(&a);
        assert_true(lbf_of(&a) <= start * (1 + TOL) + TOL);
        dm_alloc_raise(&a);
        check_invariants(&a);
        check_no_raise_fits(&a);

        assert_true(dm_alloc_lower(&a, NULL, &r) >= 0);
        check_invariants(&a);
        check_no_raise_fits(&a);
        struct dm_alloc_stats plain, annealed;
        dm_alloc_stats(&a, &plain);
        assert_true(dm_alloc_lower(&a, &warm, &r) >= 0);
        check_invariants(&a);
        check_no_raise_fits(&a);
        dm_alloc_stats(&a, &annealed);
        assert_true(annealed.fu >= plain.fu - TOL);
        assert_int_equal(annealed.placed, plain.placed);

        struct dm_alloc_conf cf = { .alpha = 1, .balance = warm, .rates = warm };
        left = dm_alloc_solve(&a, &cf, &r);
        assert_true(left >= 0);
        check_invariants(&a);
        check_no_raise_fits(&a);
        struct dm_alloc_stats st;
        dm_alloc_stats(&a, &st);
        assert_int_equal(st.groups, n);
        assert_int_equal(st.groups - st.placed, (size_t)left);
        assert_true(st.fu >= 0 && st.fu <= 1 + TOL);
        assert_true(st.utilisation >= 0 && st.utilisation <= 1 + TOL);
        assert_true(fabs(st.lbf - lbf_of(&a)) <= TOL * (1 + st.lbf));

        dm_alloc_fini(&a);
        inst_free(&in);
    }
}

/*
 * Greedy places the heaviest first, each on the least loaded server: loads
 * 20, 50, 10, 40, 30 on three servers give 50 | 40 + 10 | 30 + 20.
 */
static void
test_greedy_places_heaviest_first_on_least_loaded(void **state)
{
    (void)state;
    static const double loads[] = { 20, 50, 10, 40, 30 };
    static const double rate[] = { 1 };
    double delay[3] = { 0, 0, 0 };
    struct dm_alloc_server sv[3];
    struct dm_alloc_group g[5];
    for (size_t s = 0; s < 3; s++) {
        sv[s] = (struct dm_alloc_server){ .capacity = 100 };
    }
    for (size_t i = 0; i < 5; i++) {
        g[i] = (struct dm_alloc_group){
            .frame_load = loads[i], .rates = rate, .nrates = 1, .nclients = 1, .delay_ms = delay
        };
    }
    struct dm_alloc_problem p = { sv, 3, g, 5, HUGE_VAL, HUGE_VAL };
    struct dm_alloc a;
    assert_int_equal(dm_alloc_init(&a, &p, 0), 0);
    assert_int_equal(dm_alloc_greedy(&a), 0);
    static const int want[] = { 2, 0, 1, 1, 2 };
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(a.server[i], want[i]);
    }
    assert_true(a.load[0] == 50 && a.load[1] == 50 && a.load[2] == 50);
    assert_true(dm_alloc_lbf(&a) == 0);
    dm_alloc_fini(&a);
}

/*
 * The delay limits steer the greedy: a group too far from one server (DMAX)
 * and one whose clients spread too widely on the other (DVMAX) go where they
 * may; the others go to the least loaded server with room, and one that
 * fits nowhere stays off, counted.
 */
static void
test_greedy_respects_delay_limits(void **state)
{
    (void)state;
    static const double rate[] = { 1 };
    /* Rows: clients; columns: servers 0 and 1. */
    static const double far_from_1[] = { 10, 200 };
    static const double spread_on_0[] = { 50, 60, 140, 70 };
    static const double near[] = { 10, 10 };
    struct dm_alloc_server sv[2] = { { .capacity = 100 }, { .capacity = 100 } };
    struct dm_alloc_group g[5] = {
        { .frame_load = 60, .rates = rate, .nrates = 1, .nclients = 1, .delay_ms = far_from_1 },
        { .frame_load = 50, .rates = rate, .nrates = 1, .nclients = 2, .delay_ms = spread_on_0 },
        { .frame_load = 30, .rates = rate, .nrates = 1, .nclients = 1, .delay_ms = near },
        { .frame_load = 45, .rates = rate, .nrates = 1, .nclients = 1, .delay_ms = near },
        { .frame_load = 15, .rates = rate, .nrates = 1, .nclients = 1, .delay_ms = near },
    };
    struct dm_alloc_problem p = { sv, 2, g, 5, .dmax_ms = 150, .dvmax_ms = 50 };
    struct dm_alloc a;
    assert_int_equal(dm_alloc_init(&a, &p, 0), 0);
    assert_int_equal(dm_alloc_greedy(&a), 1);
    assert_int_equal(a.server[0], 0);             /* 200 ms to server 1 > DMAX */
    assert_int_equal(a.server[1], 1);             /* spread 90 ms on server 0 > DVMAX */
    assert_int_equal(a.server[3], 1);             /* 45: no room on 60, room on 50 */
    assert_int_equal(a.server[2], 0);             /* 30: no room on 95, room on 60 */
    assert_int_equal(a.server[4], DM_ALLOC_NONE); /* 15: no room on 90 or 95 */
    struct dm_alloc_stats st;
    dm_alloc_stats(&a, &st);
    assert_int_equal(st.groups, 5);
    assert_int_equal(st.placed, 4);
    assert_int_equal(st.clients, 6);
    assert_int_equal(st.unplaced_clients, 1);
    assert_true(fabs(st.fu - 0.8) < 1e-12);
    assert_true(fabs(st.utilisation - 185.0 / 200) < 1e-12);
    /* Annealing cannot move a group where the limits forbid it. */
    struct dm_rng r;
    dm_rng_init(&r, 1);
    assert_int_equal(dm_alloc_anneal(&a, &warm, &r), 0);
    assert_int_equal(a.server[0], 0);
    assert_int_equal(a.server[1], 1);
    check_invariants(&a);
    dm_alloc_fini(&a);
}

/*
 * Annealing finds what the greedy misses: loads 3, 3, 2, 2, 2 on two
 * servers are 7 | 5 greedily and 6 | 6 after one swap.
 */
static void
test_anneal_evens_out_what_greedy_leaves(void **state)
{
    (void)state;
    static const double loads[] = { 3, 3, 2, 2, 2 };
    static const double rate[] = { 1 };
    double delay[2] = { 0, 0 };
    struct dm_alloc_server sv[2] = { { .capacity = 10 }, { .capacity = 10 } };
    struct dm_alloc_group g[5];
    for (size_t i = 0; i < 5; i++) {
        g[i] = (struct dm_alloc_group){
            .frame_load = loads[i], .rates = rate, .nrates = 1, .nclients = 1, .delay_ms = delay
        };
    }
    struct dm_alloc_problem p = { sv, 2, g, 5, HUGE_VAL, HUGE_VAL };
    struct dm_alloc a;
    assert_int_equal(dm_alloc_init(&a, &p, 0), 0);
    assert_int_equal(dm_alloc_greedy(&a), 0);
    assert_true(dm_alloc_lbf(&a) == 1);
    struct dm_rng r;
    dm_rng_init(&r, 9);
    assert_int_equal(dm_alloc_anneal(&a, &warm, &r), 0);
    assert_true(dm_alloc_lbf(&a) == 0);
    assert_true(a.server[0] == a.server[1]); /* 3 + 3 | 2 + 2 + 2 */
    /* An all-zero schedule does nothing; a bad one is refused. */
    struct dm_alloc_sa none = { 0 }, bad = { .iterations = 1, .cooling = 2 };
    assert_int_equal(dm_alloc_anneal(&a, &none, NULL), 0);
    assert_int_equal(dm_alloc_anneal(&a, &bad, &r), -EINVAL);
    assert_int_equal(dm_alloc_anneal(&a, &warm, NULL), -EINVAL);
    assert_int_equal(dm_alloc_anneal(&a, NULL, &r), -EINVAL);
    dm_alloc_fini(&a);
}

/*
 * Rate lowering on one server: equal lists rise in turn (ties to the lower
 * index, the more lowered first) until the next tier does not fit, so both
 * end at 30 of 40 rather than 40 and 20; a list whose step is worth more
 * of its request rises first.
 */
static void
test_lower_raises_largest_gain_first(void **state)
{
    (void)state;
    static const double r4[] = { 10, 20, 30, 40 };
    double delay[1] = { 0 };
    struct dm_alloc_server sv[1] = { { .capacity = 60 } };
    struct dm_alloc_group g[2] = {
        { .frame_load = 1, .rates = r4, .nrates = 4, .want = 3, .nclients = 1, .delay_ms = delay },
        { .frame_load = 1, .rates = r4, .nrates = 4, .want = 3, .nclients = 1, .delay_ms = delay },
    };
    struct dm_alloc_problem p = { sv, 1, g, 2, HUGE_VAL, HUGE_VAL };
    struct dm_alloc a;
    assert_int_equal(dm_alloc_init(&a, &p, 0), 0);
    assert_int_equal(dm_alloc_lower(&a, NULL, NULL), 0);
    assert_int_equal(a.tier[0], 2); /* 30 + 30 = 60: no 40 fits */
    assert_int_equal(a.tier[1], 2);
    struct dm_alloc_stats st;
    dm_alloc_stats(&a, &st);
    assert_true(fabs(st.fu - 0.75) < 1e-12);
    dm_alloc_fini(&a);

    /* A: 10 -> 20 is half its request; B: 10 -> 15 -> 20, a quarter a step. */
    static const double ra[] = { 10, 20 }, rb[] = { 10, 15, 20 };
    sv[0].capacity = 35;
    g[0] = (struct dm_alloc_group){
        .frame_load = 1, .rates = ra, .nrates = 2, .want = 1, .nclients = 1, .delay_ms = delay
    };
    g[1] = (struct dm_alloc_group){
        .frame_load = 1, .rates = rb, .nrates = 3, .want = 2, .nclients = 1, .delay_ms = delay
    };
    assert_int_equal(dm_alloc_init(&a, &p, 0), 0);
    assert_int_equal(dm_alloc_lower(&a, NULL, NULL), 0);
    assert_int_equal(a.tier[0], 1); /* 20 */
    assert_int_equal(a.tier[1], 1); /* 15: 20 + 15 = 35 */
    dm_alloc_stats(&a, &st);
    assert_true(fabs(st.fu - 0.875) < 1e-12);
    /* With room for every request, nothing is lowered. */
    sv[0].capacity = 40;
    assert_int_equal(dm_alloc_lower(&a, &warm, NULL), -EINVAL); /* annealing needs an rng */
    struct dm_rng r;
    dm_rng_init(&r, 5);
    assert_int_equal(dm_alloc_lower(&a, &warm, &r), 0);
    dm_alloc_stats(&a, &st);
    assert_true(st.fu == 1);
    dm_alloc_fini(&a);
}

/*
 * With servers each able to carry the whole demand, lowering gives everyone
 * its request; over capacity, every rate is in its list, at most the request,
 * and no group could go up a tier on its server.
 */
static void
test_lower_keeps_rates_close_to_requests(void **state)
{
    (void)state;
    struct dm_rng r;
    dm_rng_init(&r, 77);
    for (int round = 0; round < 100; round++) {
        struct inst in;
        size_t m = 1 + dm_rng_below(&r, 5), n = 1 + dm_rng_below(&r, 30);
        inst_make(&in, &r, m, n, round % 2 ? 0.1 : 2.0);
        in.p.dmax_ms = in.p.dvmax_ms = HUGE_VAL;
        struct dm_alloc a;
        assert_int_equal(dm_alloc_init(&a, &in.p, 0), 0);
        double demand = 0;
        for (size_t g = 0; g < n; g++) {
            demand += dm_alloc_group_load(&in.groups[g], in.groups[g].want);
        }
        if (round % 2) {
            for (size_t s = 0; s < m; s++) {
                in.servers[s].capacity = in.servers[s].base_load + demand * 1.01;
            }
        }
        int left = dm_alloc_lower(&a, &warm, &r);
        assert_true(left >= 0 && (size_t)left <= n);
        check_invariants(&a);
        check_no_raise_fits(&a);
        struct dm_alloc_stats st;
        dm_alloc_stats(&a, &st);
        if (round % 2) {
            assert_int_equal(left, 0);
            assert_true(st.fu == 1);
        }
        dm_alloc_fini(&a);
        inst_free(&in);
    }
}

/* Same problem, same seed: the same allocation, to the last group and tier. */
static void
test_same_seed_same_allocation(void **state)
{
    (void)state;
    struct dm_rng r;
    dm_rng_init(&r, 4);
    struct inst in;
    inst_make(&in, &r, 5, 60, 1.3);
    struct dm_alloc a, b;
    assert_int_equal(dm_alloc_init(&a, &in.p, 0), 0);
    assert_int_equal(dm_alloc_init(&b, &in.p, 0), 0);
    struct dm_alloc_conf cf = { .alpha = 1, .balance = warm, .rates = warm };
    struct dm_rng ra, rb;
    dm_rng_init(&ra, 123);
    dm_rng_init(&rb, 123);
    assert_int_equal(dm_alloc_solve(&a, &cf, &ra), dm_alloc_solve(&b, &cf, &rb));
    assert_memory_equal(a.server, b.server, 60 * sizeof(*a.server));
    assert_memory_equal(a.tier, b.tier, 60 * sizeof(*a.tier));
    assert_memory_equal(a.load, b.load, 5 * sizeof(*a.load));
    dm_alloc_fini(&a);
    dm_alloc_fini(&b);
    inst_free(&in);
}

/*
 * Live use: groups arrive one at a time into spare slots (ngroups grows up
 * to max_groups) and are placed by the greedy rule; some leave and their
 * slots are reused; a periodic annealing pass runs over what is placed.
 * Every step keeps the constraints, and a placement is exactly where
 * dm_alloc_can_place() said it could go, on the least loaded such server.
 */
static void
test_incremental_placement_keeps_constraints(void **state)
{
    (void)state;
    struct dm_rng r;
    dm_rng_init(&r, 31);
    struct inst in;
    enum { M = 4, SLOTS = 80 };
    inst_make(&in, &r, M, SLOTS, 1.2);
    size_t live = 10;
    in.p.ngroups = live;
    struct dm_alloc a;
    assert_int_equal(dm_alloc_init(&a, &in.p, SLOTS), 0);
    assert_true(dm_alloc_greedy(&a) >= 0);
    check_invariants(&a);
    for (int step = 0; step < 2000; step++) {
        size_t g = dm_rng_below(&r, SLOTS);
        if (g >= live) {
            in.p.ngroups = live = g + 1; /* an arrival in a new slot */
        }
        if (a.server[g] != DM_ALLOC_NONE) {
            assert_int_equal(dm_alloc_place(&a, g, in.groups[g].want), -EEXIST);
            dm_alloc_remove(&a, g); /* it leaves */
            assert_int_equal(a.server[g], DM_ALLOC_NONE);
        } else {
            size_t tier = dm_rng_below(&r, in.groups[g].want + 1);
            int best = DM_ALLOC_NONE;
            for (int s = 0; s < M; s++) {
                if (dm_alloc_can_place(&a, g, tier, s) &&
                    (best == DM_ALLOC_NONE || a.load[s] < a.load[best])) {
                    best = s;
                }
            }
            int got = dm_alloc_place(&a, g, tier);
            assert_int_equal(got, best == DM_ALLOC_NONE ? -ENOSPC : best);
            assert_int_equal(a.server[g], best);
        }
        check_invariants(&a);
        if (step % 250 == 249) {
            double before = lbf_of(&a);
            assert_int_equal(dm_alloc_anneal(&a, &warm, &r), 0);
            check_invariants(&a);
            assert_true(lbf_of(&a) <= before * (1 + TOL) + TOL);
        }
    }
    /* Past max_groups, or a tier above the request, is refused. */
    assert_int_equal(dm_alloc_place(&a, SLOTS, 0), -EINVAL);
    size_t g = 0;
    dm_alloc_remove(&a, g);
    assert_int_equal(dm_alloc_place(&a, g, in.groups[g].want + 1), -EINVAL);
    assert_false(dm_alloc_can_place(&a, g, 0, M));
    assert_false(dm_alloc_can_place(&a, g, 0, -1));
    in.p.ngroups = SLOTS + 1; /* outgrew the allocation */
    assert_int_equal(dm_alloc_greedy(&a), -EINVAL);
    in.p.ngroups = SLOTS;
    /* An empty slot (no clients) is never placed nor counted. */
    in.groups[g].nclients = 0;
    assert_int_equal(dm_alloc_place(&a, g, 0), -EINVAL);
    assert_true(dm_alloc_greedy(&a) >= 0);
    assert_int_equal(a.server[g], DM_ALLOC_NONE);
    struct dm_alloc_stats st;
    dm_alloc_stats(&a, &st);
    assert_int_equal(st.groups, SLOTS - 1);
    dm_alloc_fini(&a);
    inst_free(&in);
}

/* RANDOM spreads groups over every server where they fit, and nowhere else. */
static void
test_random_placement_uses_only_feasible_servers(void **state)
{
    (void)state;
    static const double rate[] = { 1 };
    static const double delay[] = { 10, 500, 10 }; /* server 1 is too far */
    struct dm_alloc_server sv[3] = { { .capacity = 1e9 },
                                     { .capacity = 1e9 },
                                     { .capacity = 1e9 } };
    enum { N = 3000 };
    struct dm_alloc_group *g = calloc(N, sizeof(*g));
    assert_non_null(g);
    for (size_t i = 0; i < N; i++) {
        g[i] = (struct dm_alloc_group){
            .frame_load = 1, .rates = rate, .nrates = 1, .nclients = 1, .delay_ms = delay
        };
    }
    struct dm_alloc_problem p = { sv, 3, g, N, 150, HUGE_VAL };
    struct dm_alloc a;
    assert_int_equal(dm_alloc_init(&a, &p, 0), 0);
    struct dm_rng r;
    dm_rng_init(&r, 8);
    assert_int_equal(dm_alloc_random(&a, &r), 0);
    assert_true(a.load[1] == 0);
    assert_true(a.load[0] > N * 0.45 && a.load[2] > N * 0.45);
    assert_int_equal(dm_alloc_random(&a, NULL), -EINVAL);
    dm_alloc_fini(&a);
    free(g);
}

/* Bad problems are refused at init; empty and oversized ones are handled. */
static void
test_bad_empty_and_oversized_inputs(void **state)
{
    (void)state;
    static const double rates[] = { 10, 20 }, down[] = { 20, 10 }, delay[] = { 1, 1 };
    struct dm_alloc_server sv[2] = { { .capacity = 100 }, { .capacity = 100 } };
    struct dm_alloc_group g = {
        .frame_load = 1, .rates = rates, .nrates = 2, .want = 1, .nclients = 1, .delay_ms = delay
    };
    struct dm_alloc_problem p = { sv, 2, &g, 1, HUGE_VAL, HUGE_VAL };
    struct dm_alloc a;
    assert_int_equal(dm_alloc_init(&a, NULL, 0), -EINVAL);
    dm_alloc_fini(&a); /* left empty: fini is a no-op */
    dm_alloc_fini(&a);

    struct dm_alloc_problem q = p;
    q.servers = NULL;
    assert_int_equal(dm_alloc_init(&a, &q, 0), -EINVAL);
    q = p;
    q.groups = NULL;
    assert_int_equal(dm_alloc_init(&a, &q, 0), -EINVAL);
    q = p;
    q.dvmax_ms = NAN;
    assert_int_equal(dm_alloc_init(&a, &q, 0), -EINVAL);
    q = p;
    q.nservers = (size_t)INT_MAX + 1;
    assert_int_equal(dm_alloc_init(&a, &q, 0), -EINVAL);
    assert_int_equal(dm_alloc_init(&a, &p, (size_t)INT_MAX + 1), -EINVAL);

    sv[1].capacity = -1;
    assert_int_equal(dm_alloc_init(&a, &p, 0), -EINVAL);
    sv[1].capacity = 100;
    sv[0].base_load = NAN;
    assert_int_equal(dm_alloc_init(&a, &p, 0), -EINVAL);
    sv[0].base_load = 0;

    struct dm_alloc_group bad[] = { g, g, g, g, g, g };
    bad[0].frame_load = NAN;
    bad[1].rates = down;
    bad[2].want = 2;
    bad[3].delay_ms = NULL;
    bad[4].nrates = 0;
    bad[5].nclients = SIZE_MAX; /* nclients * nservers overflows */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        q = p;
        q.groups = &bad[i];
        assert_int_equal(dm_alloc_init(&a, &q, 0), -EINVAL);
    }
    /* A slot with no clients is not checked: it is never read. */
    struct dm_alloc_group empty = { .nclients = 0 };
    q = p;
    q.groups = &empty;
    assert_int_equal(dm_alloc_init(&a, &q, 0), 0);
    assert_int_equal(dm_alloc_greedy(&a), 0);
    dm_alloc_fini(&a);

    /* No servers, no groups: everything is a no-op with sane numbers. */
    struct dm_alloc_problem none = { 0 };
    assert_int_equal(dm_alloc_init(&a, &none, 0), 0);
    struct dm_rng r;
    dm_rng_init(&r, 1);
    struct dm_alloc_conf cf = { .alpha = 1, .balance = warm, .rates = warm };
    assert_int_equal(dm_alloc_greedy(&a), 0);
    assert_int_equal(dm_alloc_anneal(&a, &warm, &r), 0);
    assert_int_equal(dm_alloc_lower(&a, &warm, &r), 0);
    assert_int_equal(dm_alloc_solve(&a, &cf, &r), 0);
    assert_int_equal(dm_alloc_raise(&a), 0);
    struct dm_alloc_stats st;
    dm_alloc_stats(&a, &st);
    assert_int_equal(st.groups, 0);
    assert_true(st.lbf == 0 && st.utilisation == 0 && st.fu == 1);
    dm_alloc_fini(&a);

    /* Groups but no servers: nothing can be placed. */
    q = p;
    q.servers = NULL;
    q.nservers = 0;
    g.delay_ms = NULL;
    assert_int_equal(dm_alloc_init(&a, &q, 0), 0);
    assert_int_equal(dm_alloc_greedy(&a), 1);
    assert_int_equal(dm_alloc_solve(&a, &cf, &r), 1);
    assert_int_equal(dm_alloc_place(&a, 0, 0), -ENOSPC);
    dm_alloc_fini(&a);
    g.delay_ms = delay;

    /* A group heavier than any server stays off, even at its lowest rate. */
    g.frame_load = 11; /* 110 and 220 > 100 */
    assert_int_equal(dm_alloc_init(&a, &p, 0), 0);
    assert_int_equal(dm_alloc_greedy(&a), 1);
    assert_int_equal(dm_alloc_lower(&a, NULL, NULL), 1);
    assert_int_equal(dm_alloc_solve(&a, &cf, &r), 1);
    assert_int_equal(a.server[0], DM_ALLOC_NONE);
    dm_alloc_stats(&a, &st);
    assert_int_equal(st.unplaced_clients, 1);
    assert_true(st.fu == 0);
    assert_int_equal(dm_alloc_solve(&a, NULL, &r), -EINVAL);
    dm_alloc_fini(&a);
}

/*
 * place_on puts a group on one chosen server only where C2-C4 hold; put
 * records it there whatever they say; a NaN delay forbids its server.
 */
static void
test_place_on_put_and_nan_delays(void **state)
{
    (void)state;
    static const double rates[] = { 10, 20 };
    double delay[2] = { 10, NAN }; /* server 1: "not this server" */
    struct dm_alloc_server sv[2] = { { .capacity = 100 }, { .capacity = 100 } };
    struct dm_alloc_group g[2] = {
        { .frame_load = 3,
          .rates = rates,
          .nrates = 2,
          .want = 1,
          .nclients = 1,
          .delay_ms = delay },
        { .frame_load = 3,
          .rates = rates,
          .nrates = 2,
          .want = 1,
          .nclients = 1,
          .delay_ms = delay },
    };
    struct dm_alloc_problem p = { sv, 2, g, 2, HUGE_VAL, HUGE_VAL };
    struct dm_alloc a;
    assert_int_equal(dm_alloc_init(&a, &p, 0), 0);
    /* NaN fails C3 even with no dmax at all. */
    assert_false(dm_alloc_can_place(&a, 0, 1, 1));
    assert_int_equal(dm_alloc_place_on(&a, 0, 1, 1), -ENOSPC);
    assert_int_equal(a.server[0], DM_ALLOC_NONE);
    assert_int_equal(dm_alloc_place_on(&a, 0, 1, 2), -EINVAL);
    assert_int_equal(dm_alloc_place_on(&a, 0, 2, 0), -EINVAL); /* above its request */
    assert_int_equal(dm_alloc_place_on(&a, 0, 1, 0), 0);
    assert_int_equal(dm_alloc_place_on(&a, 0, 1, 0), -EEXIST);
    assert_true(fabs(a.load[0] - 60) < TOL);
    /* 60 + 60 > 100: group 1 does not fit on server 0 at its request... */
    assert_int_equal(dm_alloc_place_on(&a, 1, 1, 0), -ENOSPC);
    /* ...and put records it there anyway, over capacity and past the NaN. */
    assert_int_equal(dm_alloc_put(&a, 1, 1, 1), 1);
    dm_alloc_remove(&a, 1);
    assert_int_equal(dm_alloc_put(&a, 1, 1, 0), 0);
    assert_true(fabs(a.load[0] - 120) < TOL);
    assert_int_equal(dm_alloc_put(&a, 1, 1, 0), -EEXIST);
    /* What put recorded counts: once group 0 is off, 60 are left for it. */
    dm_alloc_remove(&a, 0);
    assert_false(dm_alloc_can_place(&a, 0, 1, 0));
    assert_true(dm_alloc_can_place(&a, 0, 0, 0));
    dm_alloc_fini(&a);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constraints_hold_on_random_instances),
        cmocka_unit_test(test_greedy_places_heaviest_first_on_least_loaded),
        cmocka_unit_test(test_greedy_respects_delay_limits),
        cmocka_unit_test(test_anneal_evens_out_what_greedy_leaves),
        cmocka_unit_test(test_lower_raises_largest_gain_first),
        cmocka_unit_test(test_lower_keeps_rates_close_to_requests),
        cmocka_unit_test(test_same_seed_same_allocation),
        cmocka_unit_test(test_incremental_placement_keeps_constraints),
        cmocka_unit_test(test_random_placement_uses_only_feasible_servers),
        cmocka_unit_test(test_bad_empty_and_oversized_inputs),
        cmocka_unit_test(test_place_on_put_and_nan_delays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
