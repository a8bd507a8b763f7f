/*
 * Consistent hashing with bounded loads ("hash"; Mirrokni, Thorup and
 * Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA 2018).
 *
 * The ring. Every server owns HASH_POINTS_PER_WEIGHT points per unit of
 * weight on a ring of 64-bit values; point k of a server is a strong mix of
 * dm_hash_bytes(name) and k, so a server's points depend on its name only,
 * never on its place in the table or on the other servers. A key (already
 * hashed by the proxy, dm_pick.key) belongs to the first point at or after it,
 * clockwise. Adding a server to N others takes about 1/(N+1) of the keys, all
 * of them to the new server; removing one moves only its own keys. With 100
 * points per unit of weight a server's share of the ring is within about 10%
 * of its weight's share. (Pools whose weights add up to more than
 * HASH_RING_MAX / 100 get fewer points per unit, so there a change of weights
 * moves more keys.) Servers are expected to have distinct names; two
 * with the same name share their points (ties go to the lower index), and a
 * server without a name is hashed by its index.
 *
 * The bound. Plain consistent hashing sends a popular key's whole load to one
 * server. Here a server takes a new request only while its load after taking
 * it stays within c times its fair share of the pool's load counting the new
 * request: with T connections on the usable servers, W their total weight,
 *
 *     conns_i + 1 <= ceil(c * (T + 1) * w_i / W),  i.e.  conns_i < c * (T + 1) * w_i / W,
 *
 * which with equal weights is MTZ's capacity ceil(c * (T + 1) / n); the
 * weighted form is haproxy's (haproxy/haproxy:src/lb_chash.c,
 * chash_server_is_eligible). A server over its bound passes the request on,
 * clockwise, to the next point's server. The bounds add up to at least
 * c * (T + 1) > T, so some usable server is always under its bound: the walk
 * ends. c = 1 + epsilon is the pool's hash_balance, 1.25 by default; MTZ show
 * that no server's load then exceeds ceil(c * average), and that one request
 * arriving or leaving, or one server added or removed, moves O(1/epsilon^2)
 * requests in expectation. A key stays on its own server as long as that
 * server is not overloaded.
 *
 * T and W change on every pick and every health change, and summing them is
 * a pass over the pool. A pick therefore reads them from a snapshot, one
 * 64-bit atomic that holds both, recomputed by one pick in
 * max(1, n / HASH_REFRESH_DIVISOR): pools under 32 servers get exact sums at
 * every pick, and a pool of 1024 sees sums at most 64 picks old while
 * spending 16 server reads per pick on them. Staleness only moves the bound
 * by as many connections as opened or closed meanwhile.
 *
 * A pick is a lookup (a bucket index on the top bits of the key, then a
 * binary search inside the bucket, usually a handful of points) and a walk
 * that usually stops at the first point, or after about n / n_usable points
 * when most servers are down. If no eligible server is under its bound
 * (those under it were all tried, or the snapshot is stale), the walk goes
 * once round the ring, 100 points per unit of weight, and returns the least
 * loaded eligible server it met; with no eligible server at all it returns
 * DM_NO_SERVER.
 */
#include "balancers/hash.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/balancer.h"
#include "balancers/registry.h"
#include "balancers/sample.h"
#include "balancers/servers.h"

#define HASH_POINTS_PER_WEIGHT 100u
#define HASH_RING_MAX          (1u << 20) /* points, 12 bytes each plus the index */
#define HASH_BALANCE_DEFAULT   1.25
#define HASH_REFRESH_DIVISOR   16u

/* Constants of MurmurHash3 (Austin Appleby, public domain), whose structure this follows. */
#define HASH_C1 0x87c37b91114253d5ULL
#define HASH_C2 0x4cf5ad432745937fULL

static inline uint64_t
hash_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t
hash_load_le(const unsigned char *b, size_t len)
{
    uint64_t w = 0;
    for (size_t i = 0; i < len; i++) {
        w |= (uint64_t)b[i] << (8 * i);
    }
    return w;
}

static inline uint64_t
hash_word(uint64_t w)
{
    w *= HASH_C1;
    w = hash_rotl(w, 31);
    return w * HASH_C2;
}

uint64_t
dm_hash_bytes(const void *p, size_t len)
{
    const unsigned char *b = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    size_t left = len;
    while (left >= 8) {
        h ^= hash_word(hash_load_le(b, 8));
        h = hash_rotl(h, 27) * 5 + 0x52dce729;
        b += 8;
        left -= 8;
    }
    if (left > 0) {
        h ^= hash_word(hash_load_le(b, left));
    }
    /* The length tells "" from "\0" and "ab" from "ab\0". */
    h ^= (uint64_t)len;
    return dm_hash_mix(h);
}

#define SIP_ROUND(v0, v1, v2, v3)                                                                  \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = hash_rotl(v1, 13) ^ v0;                                                               \
        v0 = hash_rotl(v0, 32);                                                                    \
        v2 += v3;                                                                                  \
        v3 = hash_rotl(v3, 16) ^ v2;                                                               \
        v0 += v3;                                                                                  \
        v3 = hash_rotl(v3, 21) ^ v0;                                                               \
        v2 += v1;                                                                                  \
        v1 = hash_rotl(v1, 17) ^ v2;                                                               \
        v2 = hash_rotl(v2, 32);                                                                    \
    } while (0)

uint64_t
dm_hash_keyed(const struct dm_hash_secret *k, const void *p, size_t len)
{
    const unsigned char *b = p;
    uint64_t v0 = k->k0 ^ 0x736f6d6570736575ULL, v1 = k->k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k->k0 ^ 0x6c7967656e657261ULL, v3 = k->k1 ^ 0x7465646279746573ULL;
    size_t left = len;
    for (; left >= 8; b += 8, left -= 8) {
        uint64_t m = hash_load_le(b, 8);
        v3 ^= m;
        SIP_ROUND(v0, v1, v2, v3);
        SIP_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t m = ((uint64_t)len << 56) | (left > 0 ? hash_load_le(b, left) : 0);
    v3 ^= m;
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    v0 ^= m;
    v2 ^= 0xff;
    for (int i = 0; i < 4; i++) {
        SIP_ROUND(v0, v1, v2, v3);
    }
    return v0 ^ v1 ^ v2 ^ v3;
}

struct hash_point {
    uint64_t at;
    unsigned server;
};

struct hash_balancer {
    struct dm_balancer base;
    double balance;                /* c >= 1 */
    size_t npoints;                /* points on the ring; 0 when the pool is empty */
    uint64_t *at;                  /* ring positions, increasing */
    unsigned *owner;               /* server of each point */
    unsigned bucket_bits;          /* the top bits of a key index bucket[] */
    uint32_t *bucket;              /* first point of each bucket, 2^bucket_bits + 1 entries */
    uint64_t refresh;              /* picks between two snapshots */
    atomic_uint_fast64_t ticket;   /* picks so far */
    atomic_uint_fast64_t snapshot; /* T << 32 | W, see the top of the file */
};

static int
hash_point_cmp(const void *a, const void *b)
{
    const struct hash_point *x = a;
    const struct hash_point *y = b;
    if (x->at != y->at) {
        return x->at < y->at ? -1 : 1;
    }
    return x->server < y->server ? -1 : x->server > y->server;
}

static uint64_t
hash_weight(const struct dm_server *s)
{
    return s->weight > 0 ? s->weight : 1;
}

/* The hash a server's points derive from: its name, or its index when it has none. */
static uint64_t
hash_server_seed(const struct dm_server *s, size_t i)
{
    if (s->name != NULL) {
        return dm_hash_bytes(s->name, strlen(s->name));
    }
    unsigned char b[9] = { '#' };
    for (int k = 0; k < 8; k++) {
        b[1 + k] = (unsigned char)((uint64_t)i >> (8 * k));
    }
    return dm_hash_bytes(b, sizeof(b));
}

/* Points per server: HASH_POINTS_PER_WEIGHT per unit, scaled down to fit HASH_RING_MAX. */
static uint64_t
hash_points_of(const struct dm_server *s, uint64_t total_weight)
{
    uint64_t want = hash_weight(s) * HASH_POINTS_PER_WEIGHT;
    if (total_weight * HASH_POINTS_PER_WEIGHT > HASH_RING_MAX) {
        want = hash_weight(s) * HASH_RING_MAX / total_weight;
    }
    return want > 0 ? want : 1;
}

static int
hash_build_ring(struct hash_balancer *h, const struct dm_servers *sv)
{
    uint64_t total_weight = 0;
    for (size_t i = 0; i < sv->n; i++) {
        total_weight += hash_weight(&sv->s[i]);
    }
    size_t npoints = 0;
    for (size_t i = 0; i < sv->n; i++) {
        npoints += (size_t)hash_points_of(&sv->s[i], total_weight);
    }
    struct hash_point *pt = calloc(npoints, sizeof(*pt));
    h->at = calloc(npoints, sizeof(*h->at));
    h->owner = calloc(npoints, sizeof(*h->owner));
    if (pt == NULL || h->at == NULL || h->owner == NULL) {
        free(pt);
        return -1;
    }
    size_t j = 0;
    for (size_t i = 0; i < sv->n; i++) {
        uint64_t seed = hash_server_seed(&sv->s[i], i);
        uint64_t count = hash_points_of(&sv->s[i], total_weight);
        for (uint64_t k = 0; k < count; k++) {
            /* fmix is a bijection: a server's points are distinct. */
            pt[j++] = (struct hash_point){ dm_hash_mix(seed + (k + 1) * 0x9e3779b97f4a7c15ULL),
                                           (unsigned)i };
        }
    }
    qsort(pt, npoints, sizeof(*pt), hash_point_cmp);
    for (j = 0; j < npoints; j++) {
        h->at[j] = pt[j].at;
        h->owner[j] = pt[j].server;
    }
    free(pt);
    h->npoints = npoints;

    /* About two points per bucket. */
    unsigned bits = 0;
    while (bits < 24 && ((size_t)2 << bits) <= npoints) {
        bits++;
    }
    h->bucket_bits = bits;
    size_t nb = (size_t)1 << bits;
    h->bucket = calloc(nb + 1, sizeof(*h->bucket));
    if (h->bucket == NULL) {
        return -1;
    }
    j = 0;
    for (size_t k = 0; k < nb; k++) {
        while (j < npoints && (bits == 0 ? 0 : h->at[j] >> (64 - bits)) < k) {
            j++;
        }
        h->bucket[k] = (uint32_t)j;
    }
    h->bucket[nb] = (uint32_t)npoints;
    return 0;
}

/* The first point at or after key, wrapping past the end. */
static size_t
hash_find(const struct hash_balancer *h, uint64_t key)
{
    size_t k = h->bucket_bits == 0 ? 0 : (size_t)(key >> (64 - h->bucket_bits));
    size_t lo = h->bucket[k];
    size_t hi = h->bucket[k + 1];
    /* Points before lo are in earlier buckets, points from hi on in later ones. */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->at[mid] < key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo == h->npoints ? 0 : lo;
}

static uint64_t
hash_conns(const struct dm_server *s)
{
    uint64_t c = dm_counter_get(&s->conns);
    return c > UINT32_MAX ? UINT32_MAX : c;
}

/* T << 32 | W over the usable servers, each clamped to 32 bits. */
static uint64_t
hash_sum_load(const struct dm_servers *sv, uint64_t now_us)
{
    uint64_t conns = 0;
    uint64_t weight = 0;
    for (size_t i = 0; i < sv->n; i++) {
        if (dm_server_is_usable(&sv->s[i], now_us)) {
            conns += hash_conns(&sv->s[i]);
            weight += hash_weight(&sv->s[i]);
        }
    }
    conns = conns > UINT32_MAX ? UINT32_MAX : conns;
    weight = weight > UINT32_MAX ? UINT32_MAX : weight;
    return conns << 32 | weight;
}

static void
hash_destroy(struct dm_balancer *b)
{
    struct hash_balancer *h = (struct hash_balancer *)b;
    if (h == NULL) {
        return;
    }
    free(h->bucket);
    h->bucket = NULL;
    free(h->owner);
    h->owner = NULL;
    free(h->at);
    h->at = NULL;
    free(h);
}

static struct dm_balancer *
hash_create(const struct dm_servers *sv, const struct dm_bal_conf *cf)
{
    struct hash_balancer *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        return NULL;
    }
    /* 0 is "the default"; below 1 the bounds could leave no server under them: use 1. */
    h->balance = cf->hash_balance == 0   ? HASH_BALANCE_DEFAULT
                 : cf->hash_balance >= 1 ? cf->hash_balance
                                         : 1;
    h->refresh = sv->n / HASH_REFRESH_DIVISOR > 0 ? sv->n / HASH_REFRESH_DIVISOR : 1;
    atomic_init(&h->ticket, 0);
    atomic_init(&h->snapshot, hash_sum_load(sv, 0));
    if (sv->n > 0 && hash_build_ring(h, sv) != 0) {
        hash_destroy(&h->base);
        return NULL;
    }
    return &h->base;
}

static int
hash_pick(struct dm_balancer *b, const struct dm_pick *in)
{
    struct hash_balancer *h = (struct hash_balancer *)b;
    const struct dm_servers *sv = b->sv;
    if (h->npoints == 0) {
        return DM_NO_SERVER;
    }
    /*
     * Relaxed: the ticket only spreads the refreshes over the picks, and the
     * snapshot is one value, read whole, that publishes nothing else.
     */
    uint64_t ticket = atomic_fetch_add_explicit(&h->ticket, 1, memory_order_relaxed);
    uint64_t snap;
    if (ticket % h->refresh == 0) {
        snap = hash_sum_load(sv, in->now_us);
        atomic_store_explicit(&h->snapshot, snap, memory_order_relaxed);
    } else {
        snap = atomic_load_explicit(&h->snapshot, memory_order_relaxed);
    }
    uint64_t total = snap >> 32;
    uint64_t weight = snap & UINT32_MAX;
    /* conns_i < c * (T + 1) * w_i / W; a stale W of 0 bounds nothing. */
    double per_weight = weight > 0 ? h->balance * (double)(total + 1) / (double)weight : HUGE_VAL;

    int lightest = DM_NO_SERVER;
    size_t j = hash_find(h, in->key);
    for (size_t k = 0; k < h->npoints; k++) {
        unsigned i = h->owner[j];
        if (dm_sample_is_eligible(sv, in, i)) {
            const struct dm_server *s = &sv->s[i];
            uint64_t c = hash_conns(s);
            if ((double)c < per_weight * (double)hash_weight(s)) {
                return (int)i;
            }
            const struct dm_server *l = lightest != DM_NO_SERVER ? &sv->s[lightest] : NULL;
            if (l == NULL || c * hash_weight(l) < hash_conns(l) * hash_weight(s)) {
                lightest = (int)i;
            }
        }
        j = j + 1 == h->npoints ? 0 : j + 1;
    }
    return lightest;
}

const struct dm_balancer_ops dm_bal_hash = {
    .name = "hash",
    .needs = DM_BAL_NEEDS_KEY,
    .create = hash_create,
    .pick = hash_pick,
    .destroy = hash_destroy,
};
