/*
 * Request rate per client address, for limits.rate and limits.burst: a
 * token bucket per address (IPv4 or IPv6, any port), in one table for the
 * whole process shared by every worker under a mutex, as the connection
 * counts of proxy/peers.h are. A bucket holds up to burst tokens, gains rate
 * tokens a second and gives one to each request; a request that finds it
 * empty is refused (429). The table is bounded: at DM_RATE_CAP addresses
 * the least recently used one is forgotten to make room.
 */
#ifndef DM_PROXY_RATE_H
#define DM_PROXY_RATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Addresses in the process's table at most: about 5 MB (see rate.c). */
#define DM_RATE_CAP 65536

/* Tokens are counted in thousandths so that a millisecond's refill at any whole rate is exact. */
#define DM_RATE_MILLI 1000u

/*
 * One bucket, a value type. An all-zero bucket is empty as of time 0; a new
 * address's bucket is set full with dm_rate_bucket_init().
 */
struct dm_rate_bucket {
    uint64_t tokens_m; /* thousandths of a token */
    uint64_t last_ms;  /* when tokens_m was last brought up to date */
};

/* Sets b full (burst tokens) as of now_ms. Pure. */
void dm_rate_bucket_init(struct dm_rate_bucket *b, unsigned burst, uint64_t now_ms);

/*
 * Refills b for the time since its last use (rate > 0 tokens a second, at
 * most burst) and takes one token: returns 0 if there was one, else the
 * milliseconds until there will be (> 0), taking nothing. A now_ms before
 * the last one (another worker's clock read a moment earlier) refills
 * nothing. Pure.
 */
uint64_t dm_rate_bucket_take(struct dm_rate_bucket *b, unsigned rate, unsigned burst,
                             uint64_t now_ms);

/* Whole seconds for a Retry-After header: wait_ms rounded up, at least 1. Pure. */
unsigned dm_rate_retry_after_s(uint64_t wait_ms);

struct dm_ratetab;

/* A table of at most cap (> 0) addresses; NULL when out of memory. Not locked. */
struct dm_ratetab *dm_ratetab_create(size_t cap);

/* Frees t and its buckets; NULL is a no-op. */
void dm_ratetab_destroy(struct dm_ratetab *t);

/*
 * Takes one token from sa's address's bucket (made full if the address is
 * new, forgetting the least recently used address if t is full): 0 if
 * taken, else the milliseconds until a token is back. For a family other
 * than IPv4 and IPv6, or when out of memory, it returns 0 counting nothing.
 * The caller serialises calls on one table.
 */
uint64_t dm_ratetab_take(struct dm_ratetab *t, const struct sockaddr *sa, unsigned rate,
                         unsigned burst, uint64_t now_ms);

/* Addresses in t now. */
size_t dm_ratetab_size(const struct dm_ratetab *t);

/* Whether t has a bucket for sa's address (tests). */
bool dm_ratetab_has(const struct dm_ratetab *t, const struct sockaddr *sa);

/*
 * dm_ratetab_take() on the process's table (DM_RATE_CAP addresses, made on
 * first use) under its mutex. now_ms is a worker's uv_now(). Any thread.
 */
uint64_t dm_rate_take(const struct sockaddr *sa, unsigned rate, unsigned burst, uint64_t now_ms);

#endif
