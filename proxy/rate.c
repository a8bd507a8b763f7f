#include "proxy/rate.h"

#include <assert.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "balancers/hash.h"
#include "proxy/peers.h"

/*
 * The table: a chained hash of addresses, with every entry also on a list in
 * order of last use, most recent first; a full table drops the list's tail.
 * An entry is 64 bytes on a 64-bit system (three pointers, the bucket's two
 * 8-byte fields, a 17-byte key padded to 24), plus the allocator's overhead
 * (16 bytes with glibc), and the table has one 8-byte chain head per 4
 * addresses of its cap: DM_RATE_CAP (65536) addresses take about 5.4 MB.
 */
struct rate_entry {
    struct rate_entry *chain; /* the next in its hash chain */
    struct rate_entry *newer; /* the use list: NULL at the head */
    struct rate_entry *older; /* NULL at the tail */
    struct dm_rate_bucket bucket;
    uint8_t key[DM_PEER_KEY_LEN]; /* family byte, then 4 or 16 address bytes, zero padded */
};

struct dm_ratetab {
    size_t cap;
    size_t size;
    size_t nchains; /* a power of two */
    struct rate_entry *newest;
    struct rate_entry *oldest;
    struct rate_entry **chains;
};

void
dm_rate_bucket_init(struct dm_rate_bucket *b, unsigned burst, uint64_t now_ms)
{
    b->tokens_m = (uint64_t)burst * DM_RATE_MILLI;
    b->last_ms = now_ms;
}

uint64_t
dm_rate_bucket_take(struct dm_rate_bucket *b, unsigned rate, unsigned burst, uint64_t now_ms)
{
    assert(rate > 0);
    uint64_t full = (uint64_t)(burst > 0 ? burst : 1) * DM_RATE_MILLI;
    if (now_ms > b->last_ms) {
        /* rate tokens a second is rate thousandths a millisecond. Compared
         * before multiplying: an address idle for days cannot overflow. */
        uint64_t dt = now_ms - b->last_ms;
        uint64_t room = full > b->tokens_m ? full - b->tokens_m : 0;
        b->tokens_m = dt >= room / rate + 1 ? full : b->tokens_m + dt * rate;
        b->last_ms = now_ms;
    }
    if (b->tokens_m > full) {
        b->tokens_m = full; /* the refill's last millisecond, or a reload lowered burst */
    }
    if (b->tokens_m >= DM_RATE_MILLI) {
        b->tokens_m -= DM_RATE_MILLI;
        return 0;
    }
    uint64_t need = DM_RATE_MILLI - b->tokens_m;
    return (need + rate - 1) / rate;
}

unsigned
dm_rate_retry_after_s(uint64_t wait_ms)
{
    uint64_t s = (wait_ms + 999) / 1000;
    return s > 0 ? (unsigned)s : 1;
}

struct dm_ratetab *
dm_ratetab_create(size_t cap)
{
    assert(cap > 0);
    struct dm_ratetab *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return NULL;
    }
    t->cap = cap;
    t->nchains = 1;
    while (t->nchains < cap / 4) {
        t->nchains <<= 1;
    }
    t->chains = calloc(t->nchains, sizeof(*t->chains));
    if (t->chains == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

void
dm_ratetab_destroy(struct dm_ratetab *t)
{
    if (t == NULL) {
        return;
    }
    struct rate_entry *e = t->newest;
    while (e != NULL) {
        struct rate_entry *next = e->older;
        free(e);
        e = next;
    }
    free(t->chains);
    free(t);
}

/* The link that points at key's entry, or at its chain's end. */
static struct rate_entry **
rate_find(const struct dm_ratetab *t, const uint8_t key[DM_PEER_KEY_LEN])
{
    struct rate_entry **pp = &t->chains[dm_peer_hash(key) & (t->nchains - 1)];
    while (*pp != NULL && memcmp((*pp)->key, key, DM_PEER_KEY_LEN) != 0) {
        pp = &(*pp)->chain;
    }
    return pp;
}

static void
use_unlink(struct dm_ratetab *t, struct rate_entry *e)
{
    if (e->newer != NULL) {
        e->newer->older = e->older;
    } else {
        t->newest = e->older;
    }
    if (e->older != NULL) {
        e->older->newer = e->newer;
    } else {
        t->oldest = e->newer;
    }
    e->newer = e->older = NULL;
}

static void
use_push(struct dm_ratetab *t, struct rate_entry *e)
{
    e->newer = NULL;
    e->older = t->newest;
    if (t->newest != NULL) {
        t->newest->newer = e;
    } else {
        t->oldest = e;
    }
    t->newest = e;
}

/* Drops the least recently used entry, to make room. */
static void
rate_evict(struct dm_ratetab *t)
{
    struct rate_entry *e = t->oldest;
    struct rate_entry **pp = rate_find(t, e->key);
    assert(*pp == e);
    *pp = e->chain;
    use_unlink(t, e);
    free(e);
    t->size--;
}

uint64_t
dm_ratetab_take(struct dm_ratetab *t, const struct sockaddr *sa, unsigned rate, unsigned burst,
                uint64_t now_ms)
{
    uint8_t key[DM_PEER_KEY_LEN];
    if (!dm_peer_key(sa, key)) {
        return 0;
    }
    struct rate_entry **pp = rate_find(t, key);
    struct rate_entry *e = *pp;
    if (e != NULL) {
        use_unlink(t, e);
    } else {
        e = calloc(1, sizeof(*e));
        if (e == NULL) {
            return 0; /* an allocation failure is no reason to refuse */
        }
        if (t->size >= t->cap) {
            rate_evict(t);
            pp = rate_find(t, key); /* the evicted entry may have been the link's owner */
        }
        memcpy(e->key, key, sizeof(e->key));
        dm_rate_bucket_init(&e->bucket, burst, now_ms);
        e->chain = NULL;
        *pp = e;
        t->size++;
    }
    use_push(t, e);
    return dm_rate_bucket_take(&e->bucket, rate, burst, now_ms);
}

size_t
dm_ratetab_size(const struct dm_ratetab *t)
{
    return t->size;
}

bool
dm_ratetab_has(const struct dm_ratetab *t, const struct sockaddr *sa)
{
    uint8_t key[DM_PEER_KEY_LEN];
    return dm_peer_key(sa, key) && *rate_find(t, key) != NULL;
}

static struct dm_ratetab *table;
static bool table_failed;
static uv_mutex_t lock;
static uv_once_t lock_once = UV_ONCE_INIT;

static void
lock_init(void)
{
    if (uv_mutex_init(&lock) != 0) {
        abort(); /* at start-up: no limit can be kept without it */
    }
}

uint64_t
dm_rate_take(const struct sockaddr *sa, unsigned rate, unsigned burst, uint64_t now_ms)
{
    uv_once(&lock_once, lock_init);
    uv_mutex_lock(&lock);
    if (table == NULL && !table_failed) {
        table = dm_ratetab_create(DM_RATE_CAP);
        table_failed = table == NULL; /* then no limit, rather than a retry per request */
    }
    uint64_t wait_ms = table != NULL ? dm_ratetab_take(table, sa, rate, burst, now_ms) : 0;
    uv_mutex_unlock(&lock);
    return wait_ms;
}
