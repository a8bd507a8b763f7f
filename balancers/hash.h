/*
 * Hashing for the "hash" policy (balancers/hash.c): the proxy hashes the
 * request's key (client address, a header, a cookie or the URI) with
 * dm_hash_bytes() and passes the result as dm_pick.key; the policy places
 * it on its ring of server points, which are hashed with the same function.
 */
#ifndef DM_BALANCERS_HASH_H
#define DM_BALANCERS_HASH_H

#include <stddef.h>
#include <stdint.h>

/*
 * A 64-bit non-cryptographic hash of len bytes at p (p may be NULL when len
 * is 0): eight bytes per step, read little-endian so that every host gives the
 * same value, and a full-avalanche finalizer, so nearby keys (addresses,
 * counters) spread over the whole ring. Not for keys chosen by an attacker
 * who wants collisions. Pure; any thread.
 */
uint64_t dm_hash_bytes(const void *p, size_t len);

/* A secret key for dm_hash_keyed(). */
struct dm_hash_secret {
    uint64_t k0, k1;
};

/*
 * SipHash-2-4 (Aumasson and Bernstein) of len bytes at p under key k: for
 * tables whose keys a client chooses (its address, a group id), which with
 * a key the client cannot know it cannot fill one chain of. Pure; any thread.
 */
uint64_t dm_hash_keyed(const struct dm_hash_secret *k, const void *p, size_t len);

/*
 * MurmurHash3's 64-bit finalizer: a bijection in which every input bit flips
 * each output bit with probability about 1/2. Pure; any thread.
 */
static inline uint64_t
dm_hash_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

#endif
