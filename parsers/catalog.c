/*
 * The object catalog: a hash table split into 64 shards, each under its own
 * mutex, with its own least-recently-used list and its own share of the
 * memory cap.
 *
 * Why a mutex per shard is enough: the catalog is called once per client
 * connection (a lookup), once per response (a size) and once per scanned
 * HTML page, never per byte. Each call holds one shard lock for a hash probe
 * and a few pointer moves (a page copy is at most 2 KiB); a lookup visits the
 * shards of its objects one after the other, grouped so each shard is locked
 * once, and never holds two locks. The shard is picked by the top bits of
 * the key mixed again (dm_hash_mix, a bijection, so keys need not be well spread
 * by their maker). A call finds its shard's lock taken only when one of the
 * other W - 1 workers is inside that same shard at that instant: at most
 * (W - 1) / 64 times the fraction of its time a worker spends in the catalog,
 * which is well under 1% of a request's work; and the wait is then one short
 * critical section. Shards are cache-line aligned so their locks do not
 * share lines.
 *
 * Memory: each shard may use cap' / 64 bytes, cap' being the cap less the
 * catalog's fixed part. An entry costs what glibc's malloc takes for it on a
 * 64-bit system (request + 8-byte header, rounded up to 16, at least 32):
 * the entry itself, its page's object array, and the shard's bucket array.
 * Before anything is allocated its cost must fit, evicting from the cold end
 * of the shard's LRU list; the bucket array only grows when the larger one
 * fits beside the old one, so even a rehash never goes over. LRU is per
 * shard: the entry evicted is the oldest of its shard, which with keys
 * spread evenly is among the oldest 1/64 of the catalog.
 *
 * An entry is one key with an object list (a page), a size (an object), or
 * both. Eviction drops the whole entry.
 */
#include "parsers/catalog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "balancers/balancer.h"
#include "balancers/hash.h"
#include "parsers/errbuf.h"
#include "parsers/html_scan.h"
#include "parsers/manifest.h"

#define SHARD_BITS  6
#define SHARDS      (1u << SHARD_BITS)
#define BUCKETS_MIN 16
#define WALK_DEPTH  16 /* directory levels below the docroot */

struct entry {
    uint64_t key;
    struct entry *next_in_bucket;
    struct entry *newer, *older; /* the shard's LRU list */
    uint64_t *objects;           /* the page's object keys; NULL when it has none */
    uint64_t bytes;              /* the learned size, when has_size */
    uint32_t nobjects;
    bool is_page;
    bool has_size;
};

struct shard {
    _Alignas(64) pthread_mutex_t lock;
    struct entry **buckets; /* nbuckets chains, a power of two, or NULL */
    size_t nbuckets;
    size_t count;
    struct entry *newest, *oldest;
    uint64_t used;   /* bytes counted, <= budget */
    uint64_t budget; /* this shard's share of the cap */
    uint64_t pages, sizes, hits, misses, evictions;
};

struct dm_catalog {
    uint64_t cap;
    uint64_t fixed; /* cost of this struct, outside the shards' budgets */
    struct shard shards[SHARDS];
};

/* ------------------------------------------------------------------------ */
/* Keys                                                                     */
/* ------------------------------------------------------------------------ */

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME  0x100000001b3ull

/* FNV-1a alone mixes poorly (its multiply carries only upward, so its low
 * bits depend on few input bits): keys and shard choices go through
 * dm_hash_mix(), MurmurHash3's finalizer. */

/* The host without its port: "[v6]:port" keeps "[v6]", "name:port" keeps "name". */
static size_t
host_without_port(const char *host, size_t n)
{
    if (n > 0 && host[0] == '[') {
        const char *close = memchr(host, ']', n);
        return close ? (size_t)(close - host) + 1 : n;
    }
    const char *colon = memchr(host, ':', n);
    return colon ? (size_t)(colon - host) : n;
}

uint64_t
dm_catalog_key(const char *host, size_t host_len, const char *path, size_t path_len)
{
    host_len = host_len ? host_without_port(host, host_len) : 0;
    const char *hash = path_len ? memchr(path, '#', path_len) : NULL;
    if (hash) {
        path_len = (size_t)(hash - path);
    }
    if (path_len == 0) {
        path = "/";
        path_len = 1;
    }

    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < host_len; i++) {
        unsigned char ch = (unsigned char)host[i];
        /* ASCII only, whatever the locale: hosts are ASCII (IDNA). */
        ch = ch >= 'A' && ch <= 'Z' ? (unsigned char)(ch + ('a' - 'A')) : ch;
        h = (h ^ ch) * FNV_PRIME;
    }
    /* The host's length separates it from the path, so no two (host, path)
     * pairs hash the same bytes. */
    for (unsigned i = 0; i < 8; i++) {
        h = (h ^ ((host_len >> (8 * i)) & 0xff)) * FNV_PRIME;
    }
    for (size_t i = 0; i < path_len; i++) {
        h = (h ^ (unsigned char)path[i]) * FNV_PRIME;
    }
    return dm_hash_mix(h);
}

/* A bounded set of distinct keys in insertion order: a page's object list
 * being built. slot[] is an open-addressed index (load <= 1/2) so adding is
 * O(1) however many times a page repeats an object. */
#define SET_BITS  9
#define SET_SLOTS (1u << SET_BITS)
_Static_assert(SET_SLOTS >= 2 * DM_CATALOG_PAGE_MAX, "keyset load must stay <= 1/2");

struct keyset {
    size_t n;
    uint64_t keys[DM_CATALOG_PAGE_MAX];
    uint16_t slot[SET_SLOTS]; /* index + 1 into keys; 0 = empty */
};

static void
keyset_clear(struct keyset *s)
{
    s->n = 0;
    memset(s->slot, 0, sizeof s->slot);
}

/* Adds key unless present; false once the set is full. */
static bool
keyset_add(struct keyset *s, uint64_t key)
{
    if (s->n == DM_CATALOG_PAGE_MAX) {
        return false;
    }
    /* Fibonacci hashing: the top bits of key * 2^64/phi, well spread even
     * for small integer keys. */
    size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - SET_BITS));
    while (s->slot[i] != 0) {
        if (s->keys[s->slot[i] - 1] == key) {
            return true;
        }
        i = (i + 1) & (SET_SLOTS - 1);
    }
    s->keys[s->n++] = key;
    s->slot[i] = (uint16_t)s->n;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Shards                                                                   */
/* ------------------------------------------------------------------------ */

/* What glibc's malloc takes for n bytes on a 64-bit system. */
static uint64_t
alloc_cost(uint64_t n)
{
    uint64_t c = (n + 8 + 15) & ~(uint64_t)15;
    return c < 32 ? 32 : c;
}

static uint64_t
entry_cost(const struct entry *e)
{
    uint64_t c = alloc_cost(sizeof *e);
    if (e->objects) {
        c += alloc_cost((uint64_t)e->nobjects * sizeof e->objects[0]);
    }
    return c;
}

static inline struct shard *
shard_of(struct dm_catalog *c, uint64_t mixed)
{
    return &c->shards[mixed >> (64 - SHARD_BITS)];
}

static inline struct entry **
bucket_of(struct shard *sh, uint64_t mixed)
{
    return &sh->buckets[mixed & (sh->nbuckets - 1)];
}

static struct entry *
find(struct shard *sh, uint64_t key, uint64_t mixed)
{
    if (sh->nbuckets == 0) {
        return NULL;
    }
    for (struct entry *e = *bucket_of(sh, mixed); e; e = e->next_in_bucket) {
        if (e->key == key) {
            return e;
        }
    }
    return NULL;
}

static void
lru_unlink(struct shard *sh, struct entry *e)
{
    if (e->newer) {
        e->newer->older = e->older;
    } else {
        sh->newest = e->older;
    }
    if (e->older) {
        e->older->newer = e->newer;
    } else {
        sh->oldest = e->newer;
    }
    e->newer = e->older = NULL;
}

static void
lru_push(struct shard *sh, struct entry *e)
{
    e->newer = NULL;
    e->older = sh->newest;
    if (sh->newest) {
        sh->newest->newer = e;
    } else {
        sh->oldest = e;
    }
    sh->newest = e;
}

static void
touch(struct shard *sh, struct entry *e)
{
    if (sh->newest != e) {
        lru_unlink(sh, e);
        lru_push(sh, e);
    }
}

static void
remove_entry(struct shard *sh, struct entry *e)
{
    struct entry **pp = bucket_of(sh, dm_hash_mix(e->key));
    while (*pp != e) {
        pp = &(*pp)->next_in_bucket;
    }
    *pp = e->next_in_bucket;
    lru_unlink(sh, e);
    sh->used -= entry_cost(e);
    sh->count--;
    sh->pages -= e->is_page;
    sh->sizes -= e->has_size;
    free(e->objects);
    free(e);
}

/* Evicts the oldest entries, never keep, until need more bytes fit. */
static bool
make_room(struct shard *sh, uint64_t need, const struct entry *keep)
{
    while (sh->budget - sh->used < need) {
        struct entry *victim = sh->oldest;
        if (victim == NULL || victim == keep) {
            return false;
        }
        remove_entry(sh, victim);
        sh->evictions++;
    }
    return true;
}

/* Doubles the bucket array when chains grow past one entry on average and
 * both arrays fit in the budget at once; otherwise chains just get longer. */
static void
maybe_grow(struct shard *sh)
{
    if (sh->count <= sh->nbuckets) {
        return;
    }
    size_t n = sh->nbuckets * 2;
    uint64_t cost = alloc_cost((uint64_t)n * sizeof *sh->buckets);
    if (sh->budget - sh->used < cost) {
        return;
    }
    struct entry **b = calloc(n, sizeof *b);
    if (b == NULL) {
        return;
    }
    for (size_t i = 0; i < sh->nbuckets; i++) {
        struct entry *e = sh->buckets[i];
        while (e) {
            struct entry *next = e->next_in_bucket;
            struct entry **to = &b[dm_hash_mix(e->key) & (n - 1)];
            e->next_in_bucket = *to;
            *to = e;
            e = next;
        }
    }
    free(sh->buckets);
    sh->used -= alloc_cost((uint64_t)sh->nbuckets * sizeof *sh->buckets);
    sh->used += cost;
    sh->buckets = b;
    sh->nbuckets = n;
}

/* The entry of key, marked used, created empty when missing; NULL when it
 * is missing and does not fit. */
static struct entry *
get_entry(struct shard *sh, uint64_t key, uint64_t mixed)
{
    struct entry *e = find(sh, key, mixed);
    if (e) {
        touch(sh, e);
        return e;
    }
    if (sh->nbuckets == 0) {
        uint64_t cost = alloc_cost(BUCKETS_MIN * sizeof *sh->buckets);
        if (sh->budget - sh->used < cost) {
            return NULL;
        }
        sh->buckets = calloc(BUCKETS_MIN, sizeof *sh->buckets);
        if (sh->buckets == NULL) {
            return NULL;
        }
        sh->nbuckets = BUCKETS_MIN;
        sh->used += cost;
    }
    uint64_t cost = alloc_cost(sizeof *e);
    if (!make_room(sh, cost, NULL)) {
        return NULL;
    }
    e = calloc(1, sizeof *e);
    if (e == NULL) {
        return NULL;
    }
    e->key = key;
    struct entry **b = bucket_of(sh, mixed);
    e->next_in_bucket = *b;
    *b = e;
    lru_push(sh, e);
    sh->count++;
    sh->used += cost;
    maybe_grow(sh);
    return e;
}

/* ------------------------------------------------------------------------ */
/* API                                                                      */
/* ------------------------------------------------------------------------ */

struct dm_catalog *
dm_catalog_create(uint64_t memory_cap)
{
    struct dm_catalog *c = aligned_alloc(_Alignof(struct dm_catalog), sizeof *c);
    if (c == NULL) {
        return NULL;
    }
    memset(c, 0, sizeof *c);
    c->cap = memory_cap;
    /* aligned_alloc may take up to the alignment more than asked. */
    c->fixed = alloc_cost(sizeof *c) + _Alignof(struct dm_catalog);
    uint64_t budget = memory_cap > c->fixed ? (memory_cap - c->fixed) / SHARDS : 0;
    unsigned i;
    for (i = 0; i < SHARDS; i++) {
        if (pthread_mutex_init(&c->shards[i].lock, NULL) != 0) {
            goto undo_locks;
        }
        c->shards[i].budget = budget;
    }
    return c;

undo_locks:
    while (i-- > 0) {
        pthread_mutex_destroy(&c->shards[i].lock);
    }
    free(c);
    return NULL;
}

void
dm_catalog_destroy(struct dm_catalog *c)
{
    if (c == NULL) {
        return;
    }
    for (unsigned i = 0; i < SHARDS; i++) {
        struct shard *sh = &c->shards[i];
        struct entry *e = sh->newest;
        while (e) {
            struct entry *older = e->older;
            free(e->objects);
            free(e);
            e = older;
        }
        free(sh->buckets);
        sh->buckets = NULL;
        pthread_mutex_destroy(&sh->lock);
    }
    free(c);
}

/* EWMA with alpha 1/4, rounded away from the old value so that a constant
 * sample is reached exactly instead of stalling up to 3 bytes short. */
static uint64_t
smooth(uint64_t old, uint64_t sample)
{
    if (sample >= old) {
        uint64_t d = sample - old;
        return old + d / 4 + (d % 4 != 0);
    }
    uint64_t d = old - sample;
    return old - d / 4 - (d % 4 != 0);
}

void
dm_catalog_learn_size(struct dm_catalog *c, uint64_t object_key, uint64_t bytes)
{
    uint64_t mixed = dm_hash_mix(object_key);
    struct shard *sh = shard_of(c, mixed);
    pthread_mutex_lock(&sh->lock);
    struct entry *e = get_entry(sh, object_key, mixed);
    if (e && !e->has_size) {
        e->has_size = true;
        e->bytes = bytes;
        sh->sizes++;
    } else if (e) {
        e->bytes = smooth(e->bytes, bytes);
    }
    pthread_mutex_unlock(&sh->lock);
}

void
dm_catalog_learn_page(struct dm_catalog *c, uint64_t page_key, const uint64_t *object_keys,
                      size_t n)
{
    /* Dedupe and allocate before taking the lock, to keep it short. */
    struct keyset set;
    keyset_clear(&set);
    for (size_t i = 0; i < n; i++) {
        if (!keyset_add(&set, object_keys[i])) {
            break; /* full: the first DM_CATALOG_PAGE_MAX distinct keys are kept */
        }
    }
    uint64_t *list = NULL;
    if (set.n > 0) {
        list = malloc(set.n * sizeof *list);
        if (list) {
            memcpy(list, set.keys, set.n * sizeof *list);
        }
    }

    uint64_t mixed = dm_hash_mix(page_key);
    struct shard *sh = shard_of(c, mixed);
    pthread_mutex_lock(&sh->lock);
    struct entry *e = get_entry(sh, page_key, mixed);
    if (e == NULL) {
        goto unlock;
    }
    if (e->objects) {
        sh->used -= alloc_cost((uint64_t)e->nobjects * sizeof *list);
        free(e->objects);
        e->objects = NULL;
    }
    e->nobjects = 0;
    uint64_t cost = set.n > 0 ? alloc_cost(set.n * sizeof *list) : 0;
    if ((set.n == 0 || list != NULL) && make_room(sh, cost, e)) {
        e->objects = list;
        e->nobjects = (uint32_t)set.n;
        sh->used += cost;
        list = NULL;
        if (!e->is_page) {
            e->is_page = true;
            sh->pages++;
        }
    } else {
        /* Replacing means the old list is wrong now: forget the page. */
        if (e->is_page) {
            e->is_page = false;
            sh->pages--;
        }
        if (!e->has_size) {
            remove_entry(sh, e);
        }
    }
unlock:
    pthread_mutex_unlock(&sh->lock);
    free(list);
}

/* Copies the page's object keys; counts a hit, or a miss when count_miss. */
static bool
page_copy(struct dm_catalog *c, uint64_t page_key, uint64_t *keys, size_t *n, bool count_miss)
{
    uint64_t mixed = dm_hash_mix(page_key);
    struct shard *sh = shard_of(c, mixed);
    pthread_mutex_lock(&sh->lock);
    struct entry *e = find(sh, page_key, mixed);
    bool found = e != NULL && e->is_page;
    if (found) {
        touch(sh, e);
        if (e->nobjects > 0) {
            memcpy(keys, e->objects, e->nobjects * sizeof *keys);
        }
        *n = e->nobjects;
        sh->hits++;
    } else if (count_miss) {
        sh->misses++;
    }
    pthread_mutex_unlock(&sh->lock);
    return found;
}

static inline uint64_t
add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The work of each of the n objects, visiting each shard once. */
static size_t
fill_objects(struct dm_catalog *c, const uint64_t *keys, size_t n, struct dm_bal_object *out,
             size_t max, uint64_t request_cost, uint64_t default_bytes, uint64_t *total_work)
{
    uint64_t mixed[DM_CATALOG_PAGE_MAX];
    uint64_t work[DM_CATALOG_PAGE_MAX];
    uint16_t order[DM_CATALOG_PAGE_MAX];
    uint16_t start[SHARDS + 1] = { 0 };

    /* Counting sort of the objects by shard. */
    for (size_t i = 0; i < n; i++) {
        mixed[i] = dm_hash_mix(keys[i]);
        start[(mixed[i] >> (64 - SHARD_BITS)) + 1]++;
    }
    for (unsigned s = 0; s < SHARDS; s++) {
        start[s + 1] += start[s];
    }
    uint16_t fill[SHARDS];
    memcpy(fill, start, sizeof fill);
    for (size_t i = 0; i < n; i++) {
        order[fill[mixed[i] >> (64 - SHARD_BITS)]++] = (uint16_t)i;
    }

    for (unsigned s = 0; s < SHARDS; s++) {
        if (start[s] == start[s + 1]) {
            continue;
        }
        struct shard *sh = &c->shards[s];
        pthread_mutex_lock(&sh->lock);
        for (unsigned j = start[s]; j < start[s + 1]; j++) {
            size_t i = order[j];
            struct entry *e = find(sh, keys[i], mixed[i]);
            uint64_t bytes = default_bytes;
            if (e && e->has_size) {
                touch(sh, e);
                bytes = e->bytes;
            }
            work[i] = add_sat(bytes, request_cost);
        }
        pthread_mutex_unlock(&sh->lock);
    }

    uint64_t total = 0;
    size_t written = n < max ? n : max;
    for (size_t i = 0; i < n; i++) {
        if (i < written) {
            out[i].key = keys[i];
            out[i].work = work[i];
        }
        total = add_sat(total, work[i]);
    }
    if (total_work) {
        *total_work = total;
    }
    return written;
}

size_t
dm_catalog_lookup(struct dm_catalog *c, uint64_t page_key, struct dm_bal_object *out, size_t max,
                  uint64_t request_cost, uint64_t default_bytes, uint64_t *total_work)
{
    uint64_t keys[DM_CATALOG_PAGE_MAX];
    size_t n = 0;
    if (!page_copy(c, page_key, keys, &n, true)) {
        if (total_work) {
            *total_work = 0;
        }
        return 0;
    }
    return fill_objects(c, keys, n, out, max, request_cost, default_bytes, total_work);
}

size_t
dm_catalog_lookup_url(struct dm_catalog *c, const char *host, size_t host_len, const char *path,
                      size_t path_len, struct dm_bal_object *out, size_t max, uint64_t request_cost,
                      uint64_t default_bytes, uint64_t *total_work, bool *any_host)
{
    uint64_t keys[DM_CATALOG_PAGE_MAX];
    size_t n = 0;
    uint64_t with_host = dm_catalog_key(host, host_len, path, path_len);
    uint64_t hostless = dm_catalog_key("", 0, path, path_len);
    bool found = page_copy(c, with_host, keys, &n, with_host == hostless);
    bool fell_back = false;
    if (!found && with_host != hostless) {
        found = page_copy(c, hostless, keys, &n, true);
        fell_back = found;
    }
    if (any_host) {
        *any_host = fell_back;
    }
    if (!found) {
        if (total_work) {
            *total_work = 0;
        }
        return 0;
    }
    return fill_objects(c, keys, n, out, max, request_cost, default_bytes, total_work);
}

uint64_t
dm_catalog_size(struct dm_catalog *c, uint64_t object_key, uint64_t default_bytes)
{
    uint64_t mixed = dm_hash_mix(object_key);
    struct shard *sh = shard_of(c, mixed);
    uint64_t bytes = default_bytes;
    pthread_mutex_lock(&sh->lock);
    struct entry *e = find(sh, object_key, mixed);
    if (e && e->has_size) {
        touch(sh, e);
        bytes = e->bytes;
    }
    pthread_mutex_unlock(&sh->lock);
    return bytes;
}

void
dm_catalog_stats(struct dm_catalog *c, struct dm_catalog_stats *out)
{
    memset(out, 0, sizeof *out);
    out->cap = c->cap;
    out->bytes = c->fixed;
    for (unsigned i = 0; i < SHARDS; i++) {
        struct shard *sh = &c->shards[i];
        pthread_mutex_lock(&sh->lock);
        out->pages += sh->pages;
        out->objects += sh->sizes;
        out->bytes += sh->used;
        out->hits += sh->hits;
        out->misses += sh->misses;
        out->evictions += sh->evictions;
        pthread_mutex_unlock(&sh->lock);
    }
}

/* ------------------------------------------------------------------------ */
/* Preload: manifest                                                        */
/* ------------------------------------------------------------------------ */

/* What the catalog learns from a manifest (parsers/manifest.h), per pass. */
struct manifest_learn {
    struct dm_catalog *c; /* NULL while checking: nothing is learned */
    uint64_t page_key;
    struct keyset objects;
};

static int
learn_page(void *arg, const char *host, size_t host_len, const char *path, size_t len)
{
    struct manifest_learn *l = arg;
    l->page_key = dm_catalog_key(host, host_len, path, len);
    keyset_clear(&l->objects);
    return 0;
}

static int
learn_object(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
             bool sized, uint64_t bytes)
{
    struct manifest_learn *l = arg;
    uint64_t key = dm_catalog_key(host, host_len, path, path_len);
    keyset_add(&l->objects, key); /* past DM_CATALOG_PAGE_MAX: ignored */
    if (sized && l->c) {
        dm_catalog_learn_size(l->c, key, bytes);
    }
    return 0;
}

static int
learn_page_end(void *arg)
{
    struct manifest_learn *l = arg;
    if (l->c) {
        dm_catalog_learn_page(l->c, l->page_key, l->objects.keys, l->objects.n);
    }
    return 0;
}

static int
learn_size(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
           uint64_t bytes)
{
    struct manifest_learn *l = arg;
    if (l->c) {
        dm_catalog_learn_size(l->c, dm_catalog_key(host, host_len, path, path_len), bytes);
    }
    return 0;
}

int
dm_catalog_preload_manifest(struct dm_catalog *c, const char *path, const char *host, char *err,
                            size_t errlen)
{
    static const struct dm_manifest_cb cb = {
        .page = learn_page,
        .object = learn_object,
        .page_end = learn_page_end,
        .size = learn_size,
    };
    struct manifest_learn *l = calloc(1, sizeof *l);
    if (l == NULL) {
        dm_errbuf_set(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    /* First check the whole file, then learn it: a bad manifest changes nothing. */
    int rc = dm_manifest_read(path, host, &cb, l, err, errlen);
    if (rc == 0) {
        l->c = c;
        rc = dm_manifest_read(path, host, &cb, l, err, errlen);
    }
    free(l);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Preload: document root                                                   */
/* ------------------------------------------------------------------------ */

struct walk {
    struct dm_catalog *c;
    const char *host;
    size_t host_len;
    uint64_t scan_limit;
    size_t fs_len, url_len;
    dev_t dev[WALK_DEPTH + 1]; /* the directories being walked, root first */
    ino_t ino[WALK_DEPTH + 1];
    char fs[4096];      /* file system path */
    char url[3 * 4096]; /* its URL path, percent-encoded, NUL-terminated */
    struct keyset objects;
    struct dm_html_scan scan;
    char buf[16384];
};

/* Bytes that cannot stand for themselves in a URL path: those a browser
 * percent-encodes (WHATWG path percent-encode set), '%' itself, and '\'
 * which browsers read as '/'. */
static bool
url_must_encode(unsigned char ch)
{
    return ch <= 0x20 || ch >= 0x7f || strchr("\"#%<>?`{}\\", ch) != NULL;
}

/* Appends "/name" to both paths; false (paths unchanged) when too long. */
static bool
walk_push(struct walk *w, const char *name)
{
    size_t n = strlen(name);
    if (w->fs_len + 1 + n >= sizeof w->fs || w->url_len + 1 + 3 * n >= sizeof w->url) {
        return false;
    }
    w->fs[w->fs_len++] = '/';
    memcpy(w->fs + w->fs_len, name, n + 1);
    w->fs_len += n;
    w->url[w->url_len++] = '/';
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (url_must_encode(ch)) {
            w->url_len += (size_t)sprintf(w->url + w->url_len, "%%%02X", ch);
        } else {
            w->url[w->url_len++] = (char)ch;
        }
    }
    w->url[w->url_len] = '\0';
    return true;
}

static void
walk_on_object(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
               enum dm_html_kind kind)
{
    struct walk *w = arg;
    (void)kind;
    if (host_len == 0) {
        host = w->host;
        host_len = w->host_len;
    }
    keyset_add(&w->objects, dm_catalog_key(host, host_len, path, path_len));
}

static bool
has_suffix_nocase(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcasecmp(s + n - k, suffix) == 0;
}

/* Scans the HTML file at w->fs and learns it as the page w->url. */
static void
walk_page(struct walk *w, const char *name)
{
    /* O_NONBLOCK: should the file have become a FIFO since stat(), do not hang. */
    int fd = open(w->fs, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        return;
    }
    keyset_clear(&w->objects);
    dm_html_scan_init(&w->scan, w->host, w->url, w->scan_limit);
    bool ok = true;
    while (!w->scan.stopped) {
        ssize_t n = read(fd, w->buf, sizeof w->buf);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            ok = n == 0;
            break;
        }
        dm_html_scan_feed(&w->scan, w->buf, (size_t)n, walk_on_object, w);
    }
    dm_html_scan_finish(&w->scan);
    close(fd);
    if (!ok) {
        return;
    }
    dm_catalog_learn_page(w->c, dm_catalog_key(w->host, w->host_len, w->url, w->url_len),
                          w->objects.keys, w->objects.n);
    if (strcmp(name, "index.html") == 0 || strcmp(name, "index.htm") == 0) {
        /* Its directory, with the trailing slash: "/d/" (or "/"). */
        size_t dir_len = w->url_len - strlen(name); /* index names need no encoding */
        dm_catalog_learn_page(w->c, dm_catalog_key(w->host, w->host_len, w->url, dir_len),
                              w->objects.keys, w->objects.n);
    }
}

static int
walk_dir(struct walk *w, unsigned depth)
{
    DIR *d = opendir(w->fs);
    if (d == NULL) {
        return -errno;
    }
    size_t fs_len = w->fs_len, url_len = w->url_len;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || !walk_push(w, name)) {
            continue;
        }
        struct stat st;
        if (stat(w->fs, &st) != 0) {
            /* A dangling link or a race with a removal: nothing to learn. */
        } else if (S_ISDIR(st.st_mode) && depth < WALK_DEPTH) {
            /* A link back to a directory being walked would loop. */
            bool loop = false;
            for (unsigned i = 0; i <= depth && !loop; i++) {
                loop = w->dev[i] == st.st_dev && w->ino[i] == st.st_ino;
            }
            if (!loop) {
                w->dev[depth + 1] = st.st_dev;
                w->ino[depth + 1] = st.st_ino;
                walk_dir(w, depth + 1); /* unreadable: skipped */
            }
        } else if (S_ISREG(st.st_mode)) {
            dm_catalog_learn_size(w->c, dm_catalog_key(w->host, w->host_len, w->url, w->url_len),
                                  (uint64_t)st.st_size);
            if (has_suffix_nocase(name, ".html") || has_suffix_nocase(name, ".htm")) {
                walk_page(w, name);
            }
        }
        w->fs_len = fs_len;
        w->fs[fs_len] = '\0';
        w->url_len = url_len;
        w->url[url_len] = '\0';
    }
    closedir(d);
    return 0;
}

int
dm_catalog_preload_docroot(struct dm_catalog *c, const char *dir, const char *host,
                           uint64_t scan_limit, char *err, size_t errlen)
{
    dm_errbuf_set(err, errlen, "%s", "");
    struct walk *w = calloc(1, sizeof *w);
    if (w == NULL) {
        dm_errbuf_set(err, errlen, "%s: out of memory", dir);
        return -ENOMEM;
    }
    w->c = c;
    w->host = host ? host : "";
    w->host_len = strlen(w->host);
    w->scan_limit = scan_limit;

    int rc = 0;
    struct stat st;
    size_t n = strlen(dir);
    if (n >= sizeof w->fs) {
        rc = -ENAMETOOLONG;
        dm_errbuf_set(err, errlen, "%s: path too long", dir);
    } else if (stat(dir, &st) != 0) {
        rc = -errno;
        dm_errbuf_set(err, errlen, "%s: %s", dir, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        rc = -ENOTDIR;
        dm_errbuf_set(err, errlen, "%s: not a directory", dir);
    } else {
        memcpy(w->fs, dir, n + 1);
        w->fs_len = n;
        w->dev[0] = st.st_dev;
        w->ino[0] = st.st_ino;
        rc = walk_dir(w, 0);
        if (rc < 0) {
            dm_errbuf_set(err, errlen, "%s: cannot read: %s", dir, strerror(-rc));
        }
    }
    free(w);
    return rc;
}
