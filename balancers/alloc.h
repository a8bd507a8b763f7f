/*
 * Session allocation for game streaming (DESIGN.md "Session allocation";
 * ../shared/papers/game-streaming-allocation.txt, Kim 2020): groups of
 * clients, each group one game session, are placed on servers so that the
 * servers' GPU load is spread evenly, within delay limits, and, when the
 * servers cannot carry every session at the rate it asks for, with frame
 * rates lowered as little as possible.
 *
 * The model (the paper's Figs. 1 and 2):
 *   - a group n plays at a frame rate chosen from its game's list of rates
 *     (increasing; the chosen index is its tier) and costs the server
 *     load(n) = frame_load(n) * rate(n) per second;
 *   - a group is one session and goes to one server whole (C5, C6): its
 *     clients share the session's rendering, so it is never split;
 *   - C2: a server's load, base load included, stays at or below its
 *     capacity (FMAX);
 *   - C3: every client of a group has delay <= dmax_ms to the group's
 *     server; C4: the spread max - min of those delays is <= dvmax_ms;
 *   - LBF, the objective of balancing, is the standard deviation of the
 *     servers' loads (over all servers, base load included);
 *   - FU, the objective of rate lowering, is the mean over groups of
 *     rate / requested rate, where a group left on no server counts 0.
 *
 * Every function here keeps C2-C4 for every placed group: a group is never
 * put, moved or raised where one of them would fail. What cannot be placed
 * is left on no server (DM_ALLOC_NONE) and counted, never forced. The one
 * exception is dm_alloc_put(), which records a placement that exists
 * already (a running session carried over a reload) whatever they say.
 *
 * A delay that is NaN forbids its server to its group: C3 never holds with
 * it, whatever dmax_ms (a caller's way of saying "not this server", e.g. one
 * that is down, or one already tried).
 *
 * The procedures (allocation essay at the top of alloc.c):
 *   dm_alloc_place()   the greedy rule for one group: the least loaded
 *                      server where it fits (live arrivals use this alone);
 *   dm_alloc_greedy()  Greedy_Alloc: every unplaced group, heaviest first;
 *   dm_alloc_anneal()  simulated annealing of LBF by swapping groups between
 *                      the least and the most loaded server;
 *   dm_alloc_lower()   Lower_Frame_Rate: everyone at the lowest rate, then
 *                      raised one tier at a time by largest FU gain, then
 *                      simulated annealing of FU;
 *   dm_alloc_solve()   Client_Server_Alloc (Fig. 3): greedy at the requested
 *                      rates when they fit, rate lowering when they do not,
 *                      then annealing of LBF.
 *
 * Pure code (dm_balancers): no clock, no I/O, no globals; randomness from
 * the caller's generator, so a result is a function of the problem, the
 * parameters and the seed. One allocation is used by one thread at a time.
 */
#ifndef DM_BALANCERS_ALLOC_H
#define DM_BALANCERS_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "balancers/rng.h"

/* The server of a group that is on none. */
#define DM_ALLOC_NONE (-1)

struct dm_alloc_server {
    double capacity;  /* FMAX: the most load the server may carry (>= 0) */
    double base_load; /* load already there from sessions outside the problem (>= 0) */
};

/* One group of clients: one game session. All pointers are borrowed. */
struct dm_alloc_group {
    double frame_load;      /* GPU load of one frame of its session (>= 0) */
    const double *rates;    /* its game's frame rates, strictly increasing, all > 0 */
    size_t nrates;          /* >= 1 */
    size_t want;            /* the requested rate: an index into rates */
    size_t nclients;        /* 0: an empty slot, never placed and never counted */
    const double *delay_ms; /* nclients rows of nservers delays: client c to server s at
                               delay_ms[c * nservers + s] */
};

/*
 * The problem, borrowed by the allocation for its whole life. The servers
 * and every placed group must not change; a caller may rewrite unplaced
 * group slots and raise ngroups up to the allocation's max_groups (arrivals).
 * dmax_ms and dvmax_ms may be HUGE_VAL for no limit.
 */
struct dm_alloc_problem {
    const struct dm_alloc_server *servers;
    size_t nservers;
    const struct dm_alloc_group *groups;
    size_t ngroups;
    double dmax_ms;  /* C3: the longest delay a client may have to its server */
    double dvmax_ms; /* C4: the widest delay spread inside a group */
};

/*
 * An allocation: where each group is and at which rate. Caller-owned
 * (dm_alloc_init/fini); callers read the public fields, only the functions
 * below write them.
 */
struct dm_alloc {
    const struct dm_alloc_problem *problem;
    size_t max_groups; /* group slots the arrays hold */
    int *server;       /* per group: its server index, or DM_ALLOC_NONE */
    size_t *tier;      /* per group: index of its rate in its list (meaningful when placed) */
    double *load;      /* per server: base load + the load of its groups */
    uint8_t *_ok;      /* per group and server: C3 and C4 hold (set when placed) */
    size_t *_first;    /* nservers + 1 offsets into _members (scratch) */
    size_t *_members;  /* groups by server (scratch) */
    size_t *_pos;      /* per group: its index in _members (scratch) */
    int *_best_server; /* the best placement seen by annealing (scratch) */
    size_t *_best_tier;
    size_t *_saved_tier; /* tiers of two servers' groups before a move (scratch) */
    void *_order;        /* greedy order (scratch) */
    size_t *_heap;       /* one server's groups by raise gain (scratch) */
};

/*
 * A simulated-annealing schedule, bounded by a count of iterations (no clock):
 * the temperature starts at t0 and is multiplied by cooling after every
 * `steps` iterations (0 counts as 1). Temperatures are in units of one
 * group: for balancing, one mean group load; for rates, one group's whole
 * request (a move that costs t0 of that is accepted with probability 1/e at
 * the start). t0 = 0 accepts no worse move (descent); iterations = 0 does
 * nothing. All zero is "no annealing".
 */
struct dm_alloc_sa {
    uint64_t iterations;
    double t0;      /* >= 0 */
    double cooling; /* in (0, 1]; 0 counts as 1 */
    uint64_t steps;
};

/* dm_alloc_solve()'s settings. */
struct dm_alloc_conf {
    double alpha;               /* rates are lowered when demand >= alpha * capacity (Fig. 3) */
    struct dm_alloc_sa balance; /* annealing of LBF */
    struct dm_alloc_sa rates;   /* annealing of FU inside rate lowering */
};

/* What an allocation achieves (dm_alloc_stats()). */
struct dm_alloc_stats {
    size_t groups;           /* groups with clients */
    size_t placed;           /* of them, on a server */
    size_t clients;          /* clients of those groups */
    size_t unplaced_clients; /* clients of groups on no server */
    double lbf;              /* standard deviation of the servers' loads */
    double fu;               /* mean of rate / requested rate over groups; 0 for the unplaced */
    double load;             /* total load on the servers, base load included */
    double utilisation;      /* load / total capacity (0 when there is no capacity) */
};

/*
 * Makes an empty allocation of p (every group on no server, at its request)
 * with room for max_groups group slots (0: p->ngroups; at least p->ngroups).
 * Checks p: -EINVAL for NULL, a bad number (negative, NaN), rates that are
 * not increasing, a request out of its list, a client with no delays, or
 * more than INT_MAX servers or groups; -ENOMEM. a is left empty on error.
 */
int dm_alloc_init(struct dm_alloc *a, const struct dm_alloc_problem *p, size_t max_groups);

/* Frees what init allocated; a is left all zero. fini of an all-zero a is a no-op. */
void dm_alloc_fini(struct dm_alloc *a);

/* Takes every group off its server and back to its requested rate. */
void dm_alloc_clear(struct dm_alloc *a);

/* The load of group g at rate tier `tier` (< g->nrates): frame_load * rate. */
double dm_alloc_group_load(const struct dm_alloc_group *g, size_t tier);

/*
 * True when unplaced group gi could go on server s at rate tier `tier`
 * now: C2 (capacity), C3 (dmax) and C4 (dvmax). False for bad arguments.
 */
bool dm_alloc_can_place(const struct dm_alloc *a, size_t gi, size_t tier, int s);

/*
 * The greedy rule for one group (Fig. 4 step 3): puts unplaced group gi at
 * rate tier `tier` (<= its request) on the least loaded server where
 * dm_alloc_can_place() holds (the lowest index among equals). Returns the
 * server, -ENOSPC when there is none (gi stays unplaced), -EINVAL for a bad
 * or empty slot or tier, -EEXIST when gi is already placed.
 */
int dm_alloc_place(struct dm_alloc *a, size_t gi, size_t tier);

/*
 * Puts unplaced group gi at rate tier `tier` (<= its request) on server s
 * when dm_alloc_can_place() holds there. Returns s, -ENOSPC when it does not
 * fit on s (gi stays unplaced), -EINVAL for a bad slot, tier or server,
 * -EEXIST when gi is already placed.
 */
int dm_alloc_place_on(struct dm_alloc *a, size_t gi, size_t tier, int s);

/*
 * Records that unplaced group gi is on server s at rate tier `tier`, without
 * checking C2-C4: for a placement that exists outside the allocation and
 * cannot be undone (a session already running there, when the problem is
 * rebuilt with new capacities or delays). A server pushed over its capacity
 * takes no new group until enough load leaves it. Returns s, -EINVAL or
 * -EEXIST as dm_alloc_place_on().
 */
int dm_alloc_put(struct dm_alloc *a, size_t gi, size_t tier, int s);

/* As dm_alloc_place(), but on a server drawn uniformly among those where gi fits. */
int dm_alloc_place_random(struct dm_alloc *a, size_t gi, size_t tier, struct dm_rng *rng);

/* Takes group gi off its server (a no-op when it is on none); its tier goes back to its request. */
void dm_alloc_remove(struct dm_alloc *a, size_t gi);

/*
 * Greedy_Alloc (Fig. 4): places every unplaced group at its requested rate,
 * the heaviest first (the lowest index among equals), each by
 * dm_alloc_place(). Groups already placed stay. Returns how many groups are
 * left unplaced, or -EINVAL when the problem outgrew the allocation.
 */
int dm_alloc_greedy(struct dm_alloc *a);

/* The RANDOM baseline: as dm_alloc_greedy(), in index order, by dm_alloc_place_random(). */
int dm_alloc_random(struct dm_alloc *a, struct dm_rng *rng);

/*
 * Simulated annealing of LBF over the placed groups (Fig. 3 step 2-5): a
 * neighbour swaps a group of the least loaded server with a heavier one of
 * the most loaded server (or moves the latter alone), within C2-C4. Rates
 * do not change. Leaves the best allocation seen, so LBF never ends above
 * its start. Returns 0, or -EINVAL for a bad schedule or rng NULL with
 * iterations > 0.
 */
int dm_alloc_anneal(struct dm_alloc *a, const struct dm_alloc_sa *sa, struct dm_rng *rng);

/*
 * Raises placed groups one tier at a time toward their requests while their
 * server has room (Fig. 5 step 3), the largest FU gain first (then the
 * group furthest below its request, the smaller load step, the lowest
 * index). On return no placed group can go up a tier on its server.
 * Returns the number of tiers raised.
 */
size_t dm_alloc_raise(struct dm_alloc *a);

/*
 * Lower_Frame_Rate (Fig. 5): takes every group off, places them all greedily
 * at their lowest rate (the heaviest first), raises them (dm_alloc_raise),
 * then anneals FU with `sa` (NULL: none) by swapping groups between two
 * random servers and trading tiers inside each, and raises again. Every
 * tier stays within 0..request. Returns the groups left unplaced (those
 * that fit nowhere even at their lowest rate), or -EINVAL.
 */
int dm_alloc_lower(struct dm_alloc *a, const struct dm_alloc_sa *sa, struct dm_rng *rng);

/*
 * Client_Server_Alloc (Fig. 3): takes every group off; when total demand at
 * the requested rates (base load included) is below alpha * total capacity
 * and dm_alloc_greedy() then places every group, keeps that; otherwise
 * lowers rates (dm_alloc_lower with cf->rates). Then anneals LBF with
 * cf->balance and raises what the moves made room for. Returns the groups
 * left unplaced, or -EINVAL.
 */
int dm_alloc_solve(struct dm_alloc *a, const struct dm_alloc_conf *cf, struct dm_rng *rng);

/* LBF: the standard deviation of the servers' loads (0 with no servers). */
double dm_alloc_lbf(const struct dm_alloc *a);

/* Fills *st for the allocation as it is. */
void dm_alloc_stats(const struct dm_alloc *a, struct dm_alloc_stats *st);

#endif
