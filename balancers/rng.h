/*
 * A small seeded random generator (xoshiro256**, seeded by splitmix64) for
 * policies: they never call rand(). Each worker owns one; not thread-safe.
 */
#ifndef DM_BALANCERS_RNG_H
#define DM_BALANCERS_RNG_H

#include <stdint.h>

struct dm_rng {
    uint64_t _s[4];
};

/* Seeds the generator; any seed, including 0, gives a usable state. */
void dm_rng_init(struct dm_rng *r, uint64_t seed);

/* Next 64 random bits. */
uint64_t dm_rng_next(struct dm_rng *r);

/* Uniform integer in [0, n); n must be >= 1. */
uint64_t dm_rng_below(struct dm_rng *r, uint64_t n);

#endif
