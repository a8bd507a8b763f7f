/*
 * Weighted random draws of servers, shared by the randomised policies
 * (random, p2c-shadow, hybrid). A table is built once at create over some
 * servers of a pool, each with a static weight (the server's weight, or its
 * capacity); a draw then returns distinct servers that are usable and not yet
 * tried, each drawn with probability proportional to its weight among the
 * servers still eligible: sampling without replacement, conditioned on the
 * live state of the pool at the moment of the pick.
 *
 * A draw is by rejection: pick an entry by its weight (one random number and
 * a binary search in the cumulative weights, or one random number when all
 * weights are equal), and draw again when its server is unusable, tried or
 * already chosen. Rejection draws from exactly the conditional distribution
 * and needs no shared state, so health and power changes count at once and
 * there is nothing to recompute or lock. When most of the weight is unusable
 * (say a pool with most servers asleep) rejection could take long, so after
 * max(DM_SAMPLE_MISSES, n / 4) rejected draws, about the cost of a pass over
 * the table, the rest is drawn from the same conditional distribution by two
 * linear passes: O(n), but bounded.
 *
 * The table is written at create and only read afterwards, so any number of
 * worker threads may draw from it at once, each with its own generator.
 */
#ifndef DM_BALANCERS_SAMPLE_H
#define DM_BALANCERS_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "balancers/balancer.h"
#include "balancers/servers.h"

/* Rejected draws allowed in one dm_sample_draw() before the linear passes, at least. */
#define DM_SAMPLE_MISSES 16

/* A draw table; embed it, build it with dm_sample_init(). All zero is empty. */
struct dm_sample {
    uint64_t *_cum;    /* _cum[j]: total weight of entries 0..j; NULL when all are equal */
    unsigned *_server; /* server index of entry j; NULL when entry j is server j */
    uint64_t _total;   /* total weight */
    size_t n;          /* entries */
};

/*
 * Builds a table of n entries: entry j is server server[j] (or j when server
 * is NULL) with weight weight[j] (0 counts as 1). Both arrays are copied.
 * Returns 0, or -ENOMEM with t left empty. Called before the balancer is
 * shared.
 */
int dm_sample_init(struct dm_sample *t, const unsigned *server, const uint64_t *weight, size_t n);

/* Frees what dm_sample_init() allocated and leaves t empty; an empty t is fine. */
void dm_sample_fini(struct dm_sample *t);

/*
 * Appends to chosen[have..want) distinct servers of the table that are usable
 * at in->now_us, not tried in `in` and not already in chosen[0..have) (which
 * must be servers of the table), each drawn by weight among those still
 * eligible, with in->rng. Returns the new count, which is below want only
 * when no eligible server is left. Any thread may call it at once with its
 * own in->rng.
 */
size_t dm_sample_draw(const struct dm_sample *t, const struct dm_servers *sv,
                      const struct dm_pick *in, int *chosen, size_t have, size_t want);

/* True when server i may be returned by this pick: usable and not tried. */
static inline bool
dm_sample_is_eligible(const struct dm_servers *sv, const struct dm_pick *in, size_t i)
{
    return !dm_pick_tried(in, i) && dm_server_is_usable(&sv->s[i], in->now_us);
}

#endif
