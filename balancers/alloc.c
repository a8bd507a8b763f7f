/*
 * Session allocation (alloc.h), after Kim 2020 (the paper; DESIGN.md
 * "Session allocation"). Where the paper is silent or says two things, the
 * reading used here:
 *
 * Groups are whole. C5 puts each session on exactly one server, and a
 * session is one group, so a group is never split across servers.
 *
 * Greedy order. Fig. 4 step 2 sorts sessions in non-decreasing order of
 * load, but the text of 3.1 places them "in order of high per-second GPU
 * load", and only that order (the longest-processing-time rule) makes the
 * greedy a sensible start: heaviest first, the lowest index among equals.
 * The greedy rule itself (step 3-2) is "the least loaded server among those
 * where C2-C6 hold after placing it", by absolute load, as LBF is.
 *
 * Constraints. The steps of Figs. 4 and the SA neighbour name only C2 and
 * C6, but a placement that breaks the delay limits C3/C4 is not a solution
 * of Fig. 1, so every placement and move here checks C2, C3 and C4.
 *
 * Annealing of LBF (3.1, steps A-D): take the least loaded server s_min and
 * the most loaded s_max; swap some group a of s_min with some group b of
 * s_max that is heavier than a, when the constraints still hold. Here "some"
 * is a uniform draw (up to SWAP_TRIES of them) and two additions keep the
 * walk from sticking: a may be "none", so b moves alone (a swap with an empty
 * seat; without it an empty or nearly empty s_min could never be filled),
 * and when no valid pair turns up between the extremes, two random servers
 * are tried the same way. Swapping b (heavier) for a moves d = load(b) -
 * load(a) from s_max to s_min, which lowers the sum of squares exactly when
 * d < load(s_max) - load(s_min), so both better and worse neighbours arise
 * and the Metropolis rule (accept a worse one with probability
 * exp(-delta/T)) decides. The schedule is geometric (Kirkpatrick et al., the
 * paper's [3], gives no numbers and neither does the paper): T starts at
 * t0 mean group loads and is multiplied by `cooling` every `steps`
 * iterations, for a fixed number of iterations. The best allocation seen is
 * the one returned, so LBF never ends above its start.
 *
 * Rate lowering (Fig. 5). Every tier starts at the lowest rate, the greedy
 * places everyone there, and then tiers go up one at a time: among the groups
 * below their request whose server has room for the next tier, the one whose
 * raise makes FU largest (step 3-3), that is the largest gain
 * (rate[t+1] - rate[t]) / rate[request]. Among equal gains the group now
 * furthest below its request goes first, so equal groups are lowered
 * evenly (30 and 30 of 40, not 40 and 20), then the smaller load step, then
 * the lowest index. A server's raises depend on its own groups only,
 * so this is done server by server, with the same result. When it stops, no
 * group can go up on its server: the rates are as close to the requests as
 * this placement allows.
 *
 * Annealing of FU (Fig. 5 step 4, steps A-D): two random servers s_i, s_j;
 * swap a group of s_i with one of s_j (here, again, one side may be none),
 * of which the paper asks both and this code at least one to be below its
 * request, within the delay limits; then each moved group tries to go up one
 * tier on its new server, and when that would pass FMAX a group there is
 * lowered one tier to make room (D-2, D-3), here only when the trade gains
 * FU. The paper's swap may itself pass FMAX; this code then lowers the
 * server's cheapest tiers (in FU) until it fits, and rejects the move when
 * even that cannot make it fit, so C2 holds after every move. Both servers
 * are raised again as above, and the Metropolis rule on 1 - FU (temperature
 * in units of one group's whole request) decides.
 *
 * FU counts a group left on no server as 0: a session that does not start
 * gets none of its rate. Fig. 3 gives one greedy pass at the requested rates
 * when demand is below alpha * capacity and returns no solution when the
 * greedy fails; dm_alloc_solve() lowers rates in that case too.
 */
#include "balancers/alloc.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/rng.h"

/* Random pairs tried for one neighbour before giving up on it. */
#define SWAP_TRIES 8

/* No group: the empty side of a move. */
#define NO_GROUP SIZE_MAX

struct order {
    double load;
    size_t g;
};

/* A move between two servers: group a of server from_a and group b of server from_b. */
struct move {
    size_t a, b; /* either may be NO_GROUP, not both */
    int sa, sb;  /* a is on sa and goes to sb; b is on sb and goes to sa */
};

static bool
is_finite_nonneg(double x)
{
    return x >= 0 && x < HUGE_VAL;
}

static size_t
nslots(const struct dm_alloc *a)
{
    const struct dm_alloc_problem *p = a->problem;
    return p->ngroups < a->max_groups ? p->ngroups : a->max_groups;
}

static bool
group_is_valid(const struct dm_alloc_problem *p, const struct dm_alloc_group *g)
{
    if (g->nclients == 0) {
        return true; /* an empty slot: never read */
    }
    if (!is_finite_nonneg(g->frame_load) || g->rates == NULL || g->nrates == 0 ||
        g->want >= g->nrates) {
        return false;
    }
    if (p->nservers > 0 && (g->delay_ms == NULL || g->nclients > SIZE_MAX / p->nservers)) {
        return false;
    }
    for (size_t t = 0; t < g->nrates; t++) {
        double r = g->rates[t];
        if (!(r > 0 && r < HUGE_VAL) || (t > 0 && !(r > g->rates[t - 1]))) {
            return false;
        }
    }
    return true;
}

static bool
is_active(const struct dm_alloc *a, size_t g)
{
    return a->problem->groups[g].nclients > 0;
}

/* The problem is still one this allocation can work on: sizes and every group. */
static bool
problem_is_usable(const struct dm_alloc *a)
{
    const struct dm_alloc_problem *p = a->problem;
    if (p == NULL || p->ngroups > a->max_groups || (p->ngroups > 0 && p->groups == NULL)) {
        return false;
    }
    for (size_t g = 0; g < p->ngroups; g++) {
        if (!group_is_valid(p, &p->groups[g])) {
            return false;
        }
    }
    return true;
}

static bool
schedule_is_valid(const struct dm_alloc_sa *sa)
{
    return sa->t0 >= 0 && sa->t0 < HUGE_VAL && sa->cooling >= 0 && sa->cooling <= 1;
}

double
dm_alloc_group_load(const struct dm_alloc_group *g, size_t tier)
{
    return g->frame_load * g->rates[tier];
}

static double
load_of(const struct dm_alloc *a, size_t g)
{
    return dm_alloc_group_load(&a->problem->groups[g], a->tier[g]);
}

/* Share of its request that group g gets at its tier. */
static double
ratio_of(const struct dm_alloc *a, size_t g)
{
    const struct dm_alloc_group *gr = &a->problem->groups[g];
    return gr->rates[a->tier[g]] / gr->rates[gr->want];
}

static double
uniform01(struct dm_rng *rng)
{
    return (double)(dm_rng_next(rng) >> 11) * 0x1.0p-53;
}

static void *
zalloc(size_t n, size_t size)
{
    return calloc(n > 0 ? n : 1, size);
}

int
dm_alloc_init(struct dm_alloc *a, const struct dm_alloc_problem *p, size_t max_groups)
{
    *a = (struct dm_alloc){ 0 };
    if (p == NULL || (p->nservers > 0 && p->servers == NULL) ||
        (p->ngroups > 0 && p->groups == NULL)) {
        return -EINVAL;
    }
    if (max_groups == 0) {
        max_groups = p->ngroups;
    }
    if (max_groups < p->ngroups || max_groups > INT_MAX || p->nservers > INT_MAX ||
        !(p->dmax_ms >= 0) || !(p->dvmax_ms >= 0)) {
        return -EINVAL;
    }
    for (size_t s = 0; s < p->nservers; s++) {
        if (!is_finite_nonneg(p->servers[s].capacity) ||
            !is_finite_nonneg(p->servers[s].base_load)) {
            return -EINVAL;
        }
    }
    for (size_t g = 0; g < p->ngroups; g++) {
        if (!group_is_valid(p, &p->groups[g])) {
            return -EINVAL;
        }
    }
    size_t n = max_groups, m = p->nservers;
    if (n > 0 && m > SIZE_MAX / n) {
        return -ENOMEM;
    }
    a->server = zalloc(n, sizeof(*a->server));
    a->tier = zalloc(n, sizeof(*a->tier));
    a->load = zalloc(m, sizeof(*a->load));
    a->_ok = zalloc(n * m, sizeof(*a->_ok));
    a->_first = zalloc(m + 1, sizeof(*a->_first));
    a->_members = zalloc(n, sizeof(*a->_members));
    a->_pos = zalloc(n, sizeof(*a->_pos));
    a->_best_server = zalloc(n, sizeof(*a->_best_server));
    a->_best_tier = zalloc(n, sizeof(*a->_best_tier));
    a->_saved_tier = zalloc(n, sizeof(*a->_saved_tier));
    a->_order = zalloc(n, sizeof(struct order));
    a->_heap = zalloc(n, sizeof(*a->_heap));
    if (a->server == NULL || a->tier == NULL || a->load == NULL || a->_ok == NULL ||
        a->_first == NULL || a->_members == NULL || a->_pos == NULL || a->_best_server == NULL ||
        a->_best_tier == NULL || a->_saved_tier == NULL || a->_order == NULL || a->_heap == NULL) {
        dm_alloc_fini(a);
        return -ENOMEM;
    }
    a->problem = p;
    a->max_groups = max_groups;
    dm_alloc_clear(a);
    return 0;
}

void
dm_alloc_fini(struct dm_alloc *a)
{
    free(a->server);
    free(a->tier);
    free(a->load);
    free(a->_ok);
    free(a->_first);
    free(a->_members);
    free(a->_pos);
    free(a->_best_server);
    free(a->_best_tier);
    free(a->_saved_tier);
    free(a->_order);
    free(a->_heap);
    *a = (struct dm_alloc){ 0 };
}

/* Sets every server's load from scratch: no rounding carried over from moves. */
static void
recompute_loads(struct dm_alloc *a)
{
    const struct dm_alloc_problem *p = a->problem;
    for (size_t s = 0; s < p->nservers; s++) {
        a->load[s] = p->servers[s].base_load;
    }
    size_t n = nslots(a);
    for (size_t g = 0; g < n; g++) {
        if (a->server[g] != DM_ALLOC_NONE) {
            a->load[a->server[g]] += load_of(a, g);
        }
    }
}

void
dm_alloc_clear(struct dm_alloc *a)
{
    const struct dm_alloc_problem *p = a->problem;
    if (p == NULL) {
        return;
    }
    size_t n = nslots(a);
    for (size_t g = 0; g < a->max_groups; g++) {
        a->server[g] = DM_ALLOC_NONE;
        a->tier[g] =
            g < n && is_active(a, g) && group_is_valid(p, &p->groups[g]) ? p->groups[g].want : 0;
    }
    recompute_loads(a);
}

/* C3 and C4 for group gi on server s. */
static bool
delays_hold(const struct dm_alloc_problem *p, const struct dm_alloc_group *g, size_t s)
{
    double lo = HUGE_VAL, hi = -HUGE_VAL;
    for (size_t c = 0; c < g->nclients; c++) {
        double d = g->delay_ms[c * p->nservers + s];
        if (!(d <= p->dmax_ms)) {
            return false; /* too far, or NaN */
        }
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
    }
    return hi - lo <= p->dvmax_ms;
}

/* Checks that unplaced group gi may be placed at `tier`: 0, -EINVAL or -EEXIST. */
static int
check_slot(const struct dm_alloc *a, size_t gi, size_t tier)
{
    const struct dm_alloc_problem *p = a->problem;
    if (p == NULL || gi >= p->ngroups || gi >= a->max_groups) {
        return -EINVAL;
    }
    const struct dm_alloc_group *g = &p->groups[gi];
    if (g->nclients == 0 || !group_is_valid(p, g) || tier > g->want) {
        return -EINVAL;
    }
    return a->server[gi] != DM_ALLOC_NONE ? -EEXIST : 0;
}

bool
dm_alloc_can_place(const struct dm_alloc *a, size_t gi, size_t tier, int s)
{
    if (check_slot(a, gi, tier) != 0 || s < 0 || (size_t)s >= a->problem->nservers) {
        return false;
    }
    const struct dm_alloc_problem *p = a->problem;
    const struct dm_alloc_group *g = &p->groups[gi];
    return a->load[s] + dm_alloc_group_load(g, tier) <= p->servers[s].capacity &&
           delays_hold(p, g, (size_t)s);
}

/* Fills group gi's row of the delay table. */
static void
compute_ok(struct dm_alloc *a, size_t gi)
{
    const struct dm_alloc_problem *p = a->problem;
    for (size_t s = 0; s < p->nservers; s++) {
        a->_ok[gi * p->nservers + s] = delays_hold(p, &p->groups[gi], s);
    }
}

static bool
ok_on(const struct dm_alloc *a, size_t g, int s)
{
    return a->_ok[g * a->problem->nservers + (size_t)s] != 0;
}

static bool
fits(const struct dm_alloc *a, size_t g, size_t tier, int s)
{
    return ok_on(a, g, s) && a->load[s] + dm_alloc_group_load(&a->problem->groups[g], tier) <=
                                 a->problem->servers[s].capacity;
}

static void
put(struct dm_alloc *a, size_t g, size_t tier, int s)
{
    a->server[g] = s;
    a->tier[g] = tier;
    a->load[s] += load_of(a, g);
}

int
dm_alloc_place(struct dm_alloc *a, size_t gi, size_t tier)
{
    int rc = check_slot(a, gi, tier);
    if (rc != 0) {
        return rc;
    }
    compute_ok(a, gi);
    int best = DM_ALLOC_NONE;
    for (int s = 0; s < (int)a->problem->nservers; s++) {
        if (fits(a, gi, tier, s) && (best == DM_ALLOC_NONE || a->load[s] < a->load[best])) {
            best = s;
        }
    }
    if (best == DM_ALLOC_NONE) {
        return -ENOSPC;
    }
    put(a, gi, tier, best);
    return best;
}

/* Puts group gi on server s at tier, if it fits there (check) or whatever it costs. */
static int
place_at(struct dm_alloc *a, size_t gi, size_t tier, int s, bool check)
{
    int rc = check_slot(a, gi, tier);
    if (rc != 0) {
        return rc;
    }
    if (s < 0 || (size_t)s >= a->problem->nservers) {
        return -EINVAL;
    }
    compute_ok(a, gi);
    if (check && !fits(a, gi, tier, s)) {
        return -ENOSPC;
    }
    put(a, gi, tier, s);
    return s;
}

int
dm_alloc_place_on(struct dm_alloc *a, size_t gi, size_t tier, int s)
{
    return place_at(a, gi, tier, s, true);
}

int
dm_alloc_put(struct dm_alloc *a, size_t gi, size_t tier, int s)
{
    return place_at(a, gi, tier, s, false);
}

int
dm_alloc_place_random(struct dm_alloc *a, size_t gi, size_t tier, struct dm_rng *rng)
{
    int rc = check_slot(a, gi, tier);
    if (rc != 0 || rng == NULL) {
        return rc != 0 ? rc : -EINVAL;
    }
    compute_ok(a, gi);
    uint64_t k = 0;
    for (int s = 0; s < (int)a->problem->nservers; s++) {
        k += fits(a, gi, tier, s);
    }
    if (k == 0) {
        return -ENOSPC;
    }
    uint64_t r = dm_rng_below(rng, k);
    for (int s = 0;; s++) {
        if (fits(a, gi, tier, s) && r-- == 0) {
            put(a, gi, tier, s);
            return s;
        }
    }
}

void
dm_alloc_remove(struct dm_alloc *a, size_t gi)
{
    if (a->problem == NULL || gi >= a->max_groups || a->server[gi] == DM_ALLOC_NONE) {
        return;
    }
    int s = a->server[gi];
    a->load[s] -= load_of(a, gi);
    a->server[gi] = DM_ALLOC_NONE;
    a->tier[gi] = a->problem->groups[gi].want;
    /* The last group off a server leaves exactly its base load, not a rounding residue. */
    bool empty = true;
    for (size_t g = 0, n = nslots(a); g < n && empty; g++) {
        empty = a->server[g] != s;
    }
    if (empty) {
        a->load[s] = a->problem->servers[s].base_load;
    }
}

static size_t
count_unplaced(const struct dm_alloc *a)
{
    size_t left = 0, n = nslots(a);
    for (size_t g = 0; g < n; g++) {
        left += is_active(a, g) && a->server[g] == DM_ALLOC_NONE;
    }
    return left;
}

static int
by_load_desc(const void *x, const void *y)
{
    const struct order *a = x, *b = y;
    if (a->load != b->load) {
        return a->load > b->load ? -1 : 1;
    }
    return a->g < b->g ? -1 : a->g > b->g;
}

/* Greedy_Alloc over the unplaced groups, each at its request or at its lowest rate. */
static int
greedy_at(struct dm_alloc *a, bool lowest)
{
    if (!problem_is_usable(a)) {
        return -EINVAL;
    }
    struct order *o = a->_order;
    size_t k = 0, n = nslots(a);
    for (size_t g = 0; g < n; g++) {
        if (is_active(a, g) && a->server[g] == DM_ALLOC_NONE) {
            const struct dm_alloc_group *gr = &a->problem->groups[g];
            o[k++] = (struct order){ dm_alloc_group_load(gr, lowest ? 0 : gr->want), g };
        }
    }
    qsort(o, k, sizeof(*o), by_load_desc);
    for (size_t i = 0; i < k; i++) {
        const struct dm_alloc_group *gr = &a->problem->groups[o[i].g];
        dm_alloc_place(a, o[i].g, lowest ? 0 : gr->want);
    }
    return (int)count_unplaced(a);
}

int
dm_alloc_greedy(struct dm_alloc *a)
{
    return greedy_at(a, false);
}

int
dm_alloc_random(struct dm_alloc *a, struct dm_rng *rng)
{
    if (!problem_is_usable(a) || rng == NULL) {
        return -EINVAL;
    }
    size_t n = nslots(a);
    for (size_t g = 0; g < n; g++) {
        if (is_active(a, g) && a->server[g] == DM_ALLOC_NONE) {
            dm_alloc_place_random(a, g, a->problem->groups[g].want, rng);
        }
    }
    return (int)count_unplaced(a);
}

double
dm_alloc_lbf(const struct dm_alloc *a)
{
    size_t m = a->problem != NULL ? a->problem->nservers : 0;
    if (m == 0) {
        return 0;
    }
    double mean = 0;
    for (size_t s = 0; s < m; s++) {
        mean += a->load[s];
    }
    mean /= (double)m;
    double ss = 0;
    for (size_t s = 0; s < m; s++) {
        ss += (a->load[s] - mean) * (a->load[s] - mean);
    }
    return sqrt(ss / (double)m);
}

/* ---- groups by server: contiguous blocks of _members, moved in place ---- */

/* Lists the placed groups server by server, each block in index order. */
static void
build_members(struct dm_alloc *a)
{
    size_t m = a->problem->nservers, n = nslots(a);
    memset(a->_first, 0, (m + 1) * sizeof(*a->_first));
    for (size_t g = 0; g < n; g++) {
        if (a->server[g] != DM_ALLOC_NONE) {
            a->_first[a->server[g]]++;
        }
    }
    size_t end = 0;
    for (size_t s = 0; s < m; s++) {
        end += a->_first[s];
        a->_first[s] = end;
    }
    a->_first[m] = end;
    for (size_t g = n; g-- > 0;) {
        if (a->server[g] != DM_ALLOC_NONE) {
            size_t at = --a->_first[a->server[g]];
            a->_members[at] = g;
            a->_pos[g] = at;
        }
    }
}

static size_t
members_of(const struct dm_alloc *a, int s)
{
    return a->_first[s + 1] - a->_first[s];
}

static size_t
member(const struct dm_alloc *a, int s, size_t i)
{
    return a->_members[a->_first[s] + i];
}

static void
swap_slots(struct dm_alloc *a, size_t i, size_t j)
{
    size_t gi = a->_members[i], gj = a->_members[j];
    a->_members[i] = gj;
    a->_members[j] = gi;
    a->_pos[gj] = i;
    a->_pos[gi] = j;
}

/*
 * Moves group g's entry from block `from` to block `to`, shifting the
 * blocks between them by one: O(|to - from|) swaps, the block sizes change
 * and nothing else does. The server field is the caller's.
 */
static void
members_move(struct dm_alloc *a, size_t g, int from, int to)
{
    if (from < to) {
        /* Carry g rightwards along the block ends. */
        swap_slots(a, a->_pos[g], a->_first[from + 1] - 1);
        for (int k = from + 1; k < to; k++) {
            swap_slots(a, a->_pos[g], a->_first[k + 1] - 1);
            a->_first[k]--;
        }
        a->_first[to]--;
    } else if (from > to) {
        /* Carry g leftwards along the block starts. */
        swap_slots(a, a->_pos[g], a->_first[from]);
        for (int k = from - 1; k > to; k--) {
            swap_slots(a, a->_pos[g], a->_first[k]);
            a->_first[k + 1]++;
        }
        a->_first[to + 1]++;
    }
}

/* Moves or swaps the groups of mv (a: sa -> sb, b: sb -> sa); loads follow. */
static void
apply_move(struct dm_alloc *a, const struct move *mv)
{
    double la = mv->a != NO_GROUP ? load_of(a, mv->a) : 0;
    double lb = mv->b != NO_GROUP ? load_of(a, mv->b) : 0;
    if (mv->a != NO_GROUP && mv->b != NO_GROUP) {
        swap_slots(a, a->_pos[mv->a], a->_pos[mv->b]);
    } else if (mv->a != NO_GROUP) {
        members_move(a, mv->a, mv->sa, mv->sb);
    } else {
        members_move(a, mv->b, mv->sb, mv->sa);
    }
    if (mv->a != NO_GROUP) {
        a->server[mv->a] = mv->sb;
    }
    if (mv->b != NO_GROUP) {
        a->server[mv->b] = mv->sa;
    }
    a->load[mv->sa] += lb - la;
    a->load[mv->sb] += la - lb;
}

/* The move that undoes mv once mv is applied. */
static struct move
reverse(const struct move *mv)
{
    return (struct move){ .a = mv->a, .b = mv->b, .sa = mv->sb, .sb = mv->sa };
}

/* Load of server s summed over its block afresh. */
static void
resum_load(struct dm_alloc *a, int s)
{
    double l = a->problem->servers[s].base_load;
    for (size_t i = 0, k = members_of(a, s); i < k; i++) {
        l += load_of(a, member(a, s, i));
    }
    a->load[s] = l;
}

/* Draws a group of server s, or NO_GROUP with probability 1 / (members + 1). */
static size_t
draw_member_or_none(const struct dm_alloc *a, int s, struct dm_rng *rng)
{
    size_t k = members_of(a, s);
    size_t r = (size_t)dm_rng_below(rng, k + 1);
    return r < k ? member(a, s, r) : NO_GROUP;
}

static void
save_best(struct dm_alloc *a)
{
    size_t n = nslots(a);
    memcpy(a->_best_server, a->server, n * sizeof(*a->server));
    memcpy(a->_best_tier, a->tier, n * sizeof(*a->tier));
}

static void
restore_best(struct dm_alloc *a)
{
    size_t n = nslots(a);
    memcpy(a->server, a->_best_server, n * sizeof(*a->server));
    memcpy(a->tier, a->_best_tier, n * sizeof(*a->tier));
    recompute_loads(a);
}

/* ---- annealing of LBF ---- */

/*
 * Step C: a lighter group of `lo` (or none) and a heavier one of `hi` that
 * may trade places within C2-C4. Tried SWAP_TRIES times at random.
 */
static bool
propose_balance(const struct dm_alloc *a, int lo, int hi, struct dm_rng *rng, struct move *mv)
{
    size_t nhi = members_of(a, hi);
    if (nhi == 0) {
        return false;
    }
    const struct dm_alloc_server *sv = a->problem->servers;
    for (int t = 0; t < SWAP_TRIES; t++) {
        size_t b = member(a, hi, (size_t)dm_rng_below(rng, nhi));
        size_t g = draw_member_or_none(a, lo, rng);
        double la = g != NO_GROUP ? load_of(a, g) : 0, lb = load_of(a, b);
        if (!(la < lb) || !ok_on(a, b, lo) || (g != NO_GROUP && !ok_on(a, g, hi)) ||
            a->load[lo] - la + lb > sv[lo].capacity || a->load[hi] - lb + la > sv[hi].capacity) {
            continue;
        }
        *mv = (struct move){ .a = g, .b = b, .sa = lo, .sb = hi };
        return true;
    }
    return false;
}

int
dm_alloc_anneal(struct dm_alloc *a, const struct dm_alloc_sa *sa, struct dm_rng *rng)
{
    if (a->problem == NULL || sa == NULL || !schedule_is_valid(sa) ||
        (sa->iterations > 0 && rng == NULL)) {
        return -EINVAL;
    }
    int m = (int)a->problem->nservers;
    if (sa->iterations == 0 || m < 2) {
        return 0;
    }
    recompute_loads(a);
    build_members(a);
    size_t placed = a->_first[m];
    double total = 0;
    for (size_t i = 0; i < placed; i++) {
        total += load_of(a, a->_members[i]);
    }
    if (placed == 0 || total <= 0) {
        return 0;
    }
    double temp = sa->t0 * total / (double)placed;
    double cooling = sa->cooling > 0 ? sa->cooling : 1;
    uint64_t steps = sa->steps > 0 ? sa->steps : 1;
    double cur = dm_alloc_lbf(a), best = cur;
    save_best(a);
    for (uint64_t it = 0; it < sa->iterations && cur > 0; it++) {
        if (it > 0 && it % steps == 0) {
            temp *= cooling;
        }
        int lo = 0, hi = 0;
        for (int s = 1; s < m; s++) {
            lo = a->load[s] < a->load[lo] ? s : lo;
            hi = a->load[s] > a->load[hi] ? s : hi;
        }
        struct move mv;
        if (!propose_balance(a, lo, hi, rng, &mv)) {
            int i = (int)dm_rng_below(rng, (uint64_t)m);
            int j = (int)dm_rng_below(rng, (uint64_t)m - 1);
            j += j >= i;
            if (a->load[i] > a->load[j]) {
                int x = i;
                i = j;
                j = x;
            }
            if (!propose_balance(a, i, j, rng, &mv)) {
                continue;
            }
        }
        apply_move(a, &mv);
        double next = dm_alloc_lbf(a), delta = next - cur;
        if (delta <= 0 || (temp > 0 && uniform01(rng) < exp(-delta / temp))) {
            resum_load(a, mv.sa);
            resum_load(a, mv.sb);
            cur = dm_alloc_lbf(a);
            if (cur < best) {
                best = cur;
                save_best(a);
            }
        } else {
            struct move back = reverse(&mv);
            apply_move(a, &back);
            resum_load(a, mv.sa);
            resum_load(a, mv.sb);
        }
    }
    if (cur > best) {
        restore_best(a);
    } else {
        recompute_loads(a);
    }
    return 0;
}

/* ---- rates ---- */

/* FU gain of raising g one tier (g below its request). */
static double
raise_gain(const struct dm_alloc *a, size_t g)
{
    const struct dm_alloc_group *gr = &a->problem->groups[g];
    size_t t = a->tier[g];
    return (gr->rates[t + 1] - gr->rates[t]) / gr->rates[gr->want];
}

/* FU loss of lowering g one tier (g above its lowest rate). */
static double
lower_loss(const struct dm_alloc *a, size_t g)
{
    const struct dm_alloc_group *gr = &a->problem->groups[g];
    size_t t = a->tier[g];
    return (gr->rates[t] - gr->rates[t - 1]) / gr->rates[gr->want];
}

static double
tier_step(const struct dm_alloc *a, size_t g, size_t from)
{
    const struct dm_alloc_group *gr = &a->problem->groups[g];
    return dm_alloc_group_load(gr, from + 1) - dm_alloc_group_load(gr, from);
}

/* Whether raising g comes before raising h: the larger FU gain, then the
 * smaller share of its request, the smaller load step, the lower index. */
static bool
raise_before(const struct dm_alloc *a, size_t g, size_t h)
{
    double gg = raise_gain(a, g), gh = raise_gain(a, h);
    if (gg != gh) {
        return gg > gh;
    }
    double rg = ratio_of(a, g), rh = ratio_of(a, h);
    if (rg != rh) {
        return rg < rh;
    }
    double sg = tier_step(a, g, a->tier[g]), sh = tier_step(a, h, a->tier[h]);
    if (sg != sh) {
        return sg < sh;
    }
    return g < h;
}

static void
heap_down(const struct dm_alloc *a, size_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, top = i;
        if (l < n && raise_before(a, h[l], h[top])) {
            top = l;
        }
        if (l + 1 < n && raise_before(a, h[l + 1], h[top])) {
            top = l + 1;
        }
        if (top == i) {
            return;
        }
        size_t t = h[i];
        h[i] = h[top];
        h[top] = t;
        i = top;
    }
}

/*
 * Step 3 of Fig. 5 on one server: raise the largest FU gain that fits, until
 * none does. The groups wait in a heap by gain: a raise changes only its own
 * group's key, and one that does not fit never will (the load only grows),
 * so the first that fits is the best that fits (a scan per raise was
 * quadratic: 10,000 groups took half a second a pass).
 */
static size_t
raise_server(struct dm_alloc *a, int s)
{
    double cap = a->problem->servers[s].capacity;
    size_t *h = a->_heap, n = 0, raised = 0;
    for (size_t i = 0, k = members_of(a, s); i < k; i++) {
        size_t g = member(a, s, i);
        if (a->tier[g] < a->problem->groups[g].want &&
            a->load[s] + tier_step(a, g, a->tier[g]) <= cap) {
            h[n++] = g; /* one that does not fit now never will */
        }
    }
    for (size_t i = n / 2; i-- > 0;) {
        heap_down(a, h, n, i);
    }
    while (n > 0) {
        size_t g = h[0];
        double step = tier_step(a, g, a->tier[g]);
        if (a->load[s] + step <= cap) {
            a->tier[g]++;
            a->load[s] += step;
            raised++;
            if (a->tier[g] < a->problem->groups[g].want) {
                heap_down(a, h, n, 0);
                continue;
            }
        }
        h[0] = h[--n];
        heap_down(a, h, n, 0);
    }
    return raised;
}

size_t
dm_alloc_raise(struct dm_alloc *a)
{
    if (a->problem == NULL) {
        return 0;
    }
    build_members(a);
    size_t raised = 0, round;
    /*
     * Until a pass over freshly summed loads raises nothing: a step refused
     * on a running sum one rounding above the fresh one is tried again, so
     * on return "no raise fits" holds on the loads the caller reads.
     */
    do {
        recompute_loads(a);
        round = 0;
        for (int s = 0; s < (int)a->problem->nservers; s++) {
            round += raise_server(a, s);
        }
        raised += round;
    } while (round > 0);
    recompute_loads(a);
    return raised;
}

/*
 * Lowers the groups of server s, the cheapest tier in FU first (then the
 * larger load step, then the lowest index), until s is within capacity;
 * false when it cannot be.
 */
static bool
repair_server(struct dm_alloc *a, int s)
{
    double cap = a->problem->servers[s].capacity;
    while (a->load[s] > cap) {
        size_t best = NO_GROUP;
        double bloss = 0, bstep = 0;
        for (size_t i = 0, k = members_of(a, s); i < k; i++) {
            size_t g = member(a, s, i);
            if (a->tier[g] == 0) {
                continue;
            }
            double loss = lower_loss(a, g), step = tier_step(a, g, a->tier[g] - 1);
            if (best == NO_GROUP || loss < bloss ||
                (loss == bloss && (step > bstep || (step == bstep && g < best)))) {
                best = g;
                bloss = loss;
                bstep = step;
            }
        }
        if (best == NO_GROUP) {
            return false;
        }
        a->tier[best]--;
        a->load[s] -= bstep;
    }
    return true;
}

/*
 * Steps D-2/D-3: group g, new on server s, goes up one tier; when that
 * passes capacity, another group of s goes down one tier to make room, if
 * that gains FU.
 */
static void
trade_up(struct dm_alloc *a, size_t g, int s)
{
    if (g == NO_GROUP || a->tier[g] >= a->problem->groups[g].want) {
        return;
    }
    double cap = a->problem->servers[s].capacity;
    double up = tier_step(a, g, a->tier[g]), gain = raise_gain(a, g);
    if (a->load[s] + up <= cap) {
        a->tier[g]++;
        a->load[s] += up;
        return;
    }
    size_t best = NO_GROUP;
    double bloss = 0, bstep = 0;
    for (size_t i = 0, k = members_of(a, s); i < k; i++) {
        size_t c = member(a, s, i);
        if (c == g || a->tier[c] == 0) {
            continue;
        }
        double down = tier_step(a, c, a->tier[c] - 1), loss = lower_loss(a, c);
        if (a->load[s] - down + up > cap || !(loss < gain)) {
            continue;
        }
        if (best == NO_GROUP || loss < bloss || (loss == bloss && c < best)) {
            best = c;
            bloss = loss;
            bstep = down;
        }
    }
    if (best != NO_GROUP) {
        a->tier[best]--;
        a->tier[g]++;
        a->load[s] += up - bstep;
    }
}

static double
ratio_sum(const struct dm_alloc *a, int s)
{
    double r = 0;
    for (size_t i = 0, k = members_of(a, s); i < k; i++) {
        r += ratio_of(a, member(a, s, i));
    }
    return r;
}

/* Step C of Fig. 5 step 4: a pair across si and sj, one of them below its request. */
static bool
propose_rates(const struct dm_alloc *a, int si, int sj, struct dm_rng *rng, struct move *mv)
{
    for (int t = 0; t < SWAP_TRIES; t++) {
        size_t ga = draw_member_or_none(a, si, rng);
        size_t gb = draw_member_or_none(a, sj, rng);
        if (ga == NO_GROUP && gb == NO_GROUP) {
            continue;
        }
        bool low = (ga != NO_GROUP && a->tier[ga] < a->problem->groups[ga].want) ||
                   (gb != NO_GROUP && a->tier[gb] < a->problem->groups[gb].want);
        if (!low || (ga != NO_GROUP && !ok_on(a, ga, sj)) ||
            (gb != NO_GROUP && !ok_on(a, gb, si))) {
            continue;
        }
        *mv = (struct move){ .a = ga, .b = gb, .sa = si, .sb = sj };
        return true;
    }
    return false;
}

static void
save_tiers(struct dm_alloc *a, int s)
{
    for (size_t i = 0, k = members_of(a, s); i < k; i++) {
        size_t g = member(a, s, i);
        a->_saved_tier[g] = a->tier[g];
    }
}

static void
restore_tiers(struct dm_alloc *a, int s)
{
    for (size_t i = 0, k = members_of(a, s); i < k; i++) {
        size_t g = member(a, s, i);
        a->tier[g] = a->_saved_tier[g];
    }
}

/* Fig. 5 step 4: annealing of FU (energy 1 - FU, here minus the sum of ratios). */
static void
anneal_rates(struct dm_alloc *a, const struct dm_alloc_sa *sa, struct dm_rng *rng)
{
    int m = (int)a->problem->nservers;
    recompute_loads(a);
    build_members(a);
    if (a->_first[m] == 0) {
        return;
    }
    double temp = sa->t0;
    double cooling = sa->cooling > 0 ? sa->cooling : 1;
    uint64_t steps = sa->steps > 0 ? sa->steps : 1;
    double cur = 0;
    for (int s = 0; s < m; s++) {
        cur += ratio_sum(a, s);
    }
    double best = cur;
    save_best(a);
    for (uint64_t it = 0; it < sa->iterations; it++) {
        if (it > 0 && it % steps == 0) {
            temp *= cooling;
        }
        int si = (int)dm_rng_below(rng, (uint64_t)m);
        int sj = (int)dm_rng_below(rng, (uint64_t)m - 1);
        sj += sj >= si;
        struct move mv;
        if (!propose_rates(a, si, sj, rng, &mv)) {
            continue;
        }
        double before = ratio_sum(a, si) + ratio_sum(a, sj);
        double li = a->load[si], lj = a->load[sj];
        save_tiers(a, si);
        save_tiers(a, sj);
        apply_move(a, &mv);
        bool ok = repair_server(a, si) && repair_server(a, sj);
        if (ok) {
            trade_up(a, mv.a, sj);
            trade_up(a, mv.b, si);
            raise_server(a, si);
            raise_server(a, sj);
        }
        double after = ratio_sum(a, si) + ratio_sum(a, sj), loss = before - after;
        if (ok && (loss <= 0 || (temp > 0 && uniform01(rng) < exp(-loss / temp)))) {
            resum_load(a, si);
            resum_load(a, sj);
            cur += after - before;
            if (cur > best) {
                best = cur;
                save_best(a);
            }
        } else {
            struct move back = reverse(&mv);
            apply_move(a, &back);
            restore_tiers(a, si);
            restore_tiers(a, sj);
            a->load[si] = li;
            a->load[sj] = lj;
        }
    }
    if (cur < best) {
        restore_best(a);
    } else {
        recompute_loads(a);
    }
}

int
dm_alloc_lower(struct dm_alloc *a, const struct dm_alloc_sa *sa, struct dm_rng *rng)
{
    if (!problem_is_usable(a) ||
        (sa != NULL && (!schedule_is_valid(sa) || (sa->iterations > 0 && rng == NULL)))) {
        return -EINVAL;
    }
    dm_alloc_clear(a);
    greedy_at(a, true);
    dm_alloc_raise(a);
    if (sa != NULL && sa->iterations > 0 && a->problem->nservers >= 2) {
        anneal_rates(a, sa, rng);
        dm_alloc_raise(a);
    }
    return (int)count_unplaced(a);
}

int
dm_alloc_solve(struct dm_alloc *a, const struct dm_alloc_conf *cf, struct dm_rng *rng)
{
    if (cf == NULL || !problem_is_usable(a) || !(cf->alpha >= 0) ||
        !schedule_is_valid(&cf->balance) || !schedule_is_valid(&cf->rates) ||
        ((cf->balance.iterations > 0 || cf->rates.iterations > 0) && rng == NULL)) {
        return -EINVAL;
    }
    const struct dm_alloc_problem *p = a->problem;
    dm_alloc_clear(a);
    double demand = 0, capacity = 0;
    for (size_t s = 0; s < p->nservers; s++) {
        demand += p->servers[s].base_load;
        capacity += p->servers[s].capacity;
    }
    for (size_t g = 0, n = nslots(a); g < n; g++) {
        if (is_active(a, g)) {
            demand += dm_alloc_group_load(&p->groups[g], p->groups[g].want);
        }
    }
    int left = -1;
    if (demand < cf->alpha * capacity) {
        left = dm_alloc_greedy(a);
    }
    if (left != 0) {
        dm_alloc_lower(a, &cf->rates, rng);
    }
    dm_alloc_anneal(a, &cf->balance, rng);
    dm_alloc_raise(a);
    return (int)count_unplaced(a);
}

void
dm_alloc_stats(const struct dm_alloc *a, struct dm_alloc_stats *st)
{
    *st = (struct dm_alloc_stats){ .fu = 1 };
    const struct dm_alloc_problem *p = a->problem;
    if (p == NULL) {
        return;
    }
    double fu = 0, capacity = 0;
    for (size_t g = 0, n = nslots(a); g < n; g++) {
        if (!is_active(a, g)) {
            continue;
        }
        st->groups++;
        st->clients += p->groups[g].nclients;
        if (a->server[g] != DM_ALLOC_NONE) {
            st->placed++;
            fu += ratio_of(a, g);
        } else {
            st->unplaced_clients += p->groups[g].nclients;
        }
    }
    for (size_t s = 0; s < p->nservers; s++) {
        st->load += a->load[s];
        capacity += p->servers[s].capacity;
    }
    st->fu = st->groups > 0 ? fu / (double)st->groups : 1;
    st->utilisation = capacity > 0 ? st->load / capacity : 0;
    st->lbf = dm_alloc_lbf(a);
}
