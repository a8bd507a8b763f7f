#include "proxy/route.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"

/*
 * The name part of a Host value: "[v6]:port" keeps "[v6]", "name:port" keeps
 * "name", and a trailing dot of a fully qualified name is dropped, since
 * "example.com." and "example.com" are the same host (RFC 3986 section 3.2.2).
 */
static size_t
host_name_len(const char *host, size_t len)
{
    if (len > 0 && host[0] == '[') {
        const char *close = memchr(host, ']', len);
        return close != NULL ? (size_t)(close - host) + 1 : len;
    }
    const char *colon = memchr(host, ':', len);
    if (colon != NULL) {
        len = (size_t)(colon - host);
    }
    if (len > 0 && host[len - 1] == '.') {
        len--;
    }
    return len;
}

static bool
route_host_matches(const char *want, const char *host, size_t len)
{
    if (want == NULL) {
        return true;
    }
    size_t want_len = strlen(want);
    if (want_len >= 2 && want[0] == '*' && want[1] == '.') {
        /* "*.x.com": some non-empty name, then ".x.com"; "x.com" itself is not covered. */
        const char *suffix = want + 1;
        size_t suffix_len = want_len - 1;
        return len > suffix_len && strncasecmp(host + len - suffix_len, suffix, suffix_len) == 0;
    }
    return len == want_len && (len == 0 || strncasecmp(host, want, len) == 0);
}

/* Whether a route's prefix matches every path: none, empty, or "/", so
 * that "OPTIONS *" and an empty target still match. */
static bool
prefix_is_all(const char *prefix)
{
    return prefix == NULL || prefix[0] == '\0' || strcmp(prefix, "/") == 0;
}

static bool
route_path_matches(const char *prefix, const char *path, size_t len)
{
    if (prefix_is_all(prefix)) {
        return true;
    }
    size_t prefix_len = strlen(prefix);
    return len >= prefix_len && memcmp(path, prefix, prefix_len) == 0;
}

size_t
dm_route_match(const struct dm_conf *c, const char *host, size_t host_len, const char *path,
               size_t path_len)
{
    size_t name_len = host != NULL ? host_name_len(host, host_len) : 0;
    for (size_t i = 0; i < c->nroutes; i++) {
        const struct dm_conf_route *r = &c->routes[i];
        if (route_host_matches(r->host, host, name_len) &&
            route_path_matches(r->path_prefix, path, path_len)) {
            return r->pool;
        }
    }
    return c->default_pool;
}

/*
 * The index. A name's hash is read from its end, case folded (FNV-1a), so
 * that one pass over a request's host gives the hash of every suffix: the
 * wildcards' keys are their suffixes (".x.com" of "*.x.com").
 */
#define ROUTE_HASH_INIT  1469598103934665603ull
#define ROUTE_HASH_PRIME 1099511628211ull

static unsigned char
fold(unsigned char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (unsigned char)(ch + ('a' - 'A')) : ch;
}

static uint64_t
hash_step(uint64_t h, unsigned char ch)
{
    return (h ^ fold(ch)) * ROUTE_HASH_PRIME;
}

static uint64_t
hash_name(const char *name, size_t len)
{
    uint64_t h = ROUTE_HASH_INIT;
    for (size_t i = len; i > 0; i--) {
        h = hash_step(h, (unsigned char)name[i - 1]);
    }
    return h;
}

/* Compares two names case folded: <0, 0, >0. */
static int
fold_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    if (alen != blen) {
        return alen < blen ? -1 : 1;
    }
    for (size_t i = 0; i < alen; i++) {
        unsigned char x = fold((unsigned char)a[i]), y = fold((unsigned char)b[i]);
        if (x != y) {
            return x < y ? -1 : 1;
        }
    }
    return 0;
}

/*
 * A list of routes indexed by path prefix, for a list longer than
 * PATH_SCAN: a request's candidates are the routes whose prefix is one of
 * its path's prefixes, and one pass over the path hashes them all, so
 * thousands of path routes cost a lookup per distinct prefix length, not a
 * scan (as nginx's tree of prefix locations).
 */
#define PATH_SCAN 8

struct path_slot {
    const char *prefix; /* NULL: an empty slot */
    uint64_t hash;
    uint32_t len;
    uint32_t route; /* the first route of the list with this prefix */
};

struct path_index {
    uint32_t *lens; /* the prefixes' lengths, ascending, each once */
    size_t nlens;
    struct path_slot *slots;
    size_t mask;
    uint32_t all; /* the first route whose prefix matches every path; UINT32_MAX: none */
};

/* A host (or a wildcard's suffix) and its routes, rs->lists[start .. start + count). */
struct route_key {
    const char *name; /* NULL: an empty slot */
    uint64_t hash;
    uint32_t len;
    uint32_t start, count;
    struct path_index *paths; /* NULL: scanned */
};

struct route_table {
    struct route_key *slots;
    size_t mask; /* slots - 1; no slots: nothing in it */
};

struct dm_routes {
    struct route_table exact, wild;
    uint32_t *lists; /* route indices, ascending for each key */
    uint32_t *any;   /* the routes of every host (no host), ascending */
    size_t nany;
    struct path_index *any_paths; /* NULL: scanned */
};

/* A route of the config while the index is made. */
struct route_entry {
    const char *name;
    uint64_t hash;
    uint32_t len;
    uint32_t index;
    bool wild;
};

static bool
same_key(const struct route_entry *a, const struct route_entry *b)
{
    return a->wild == b->wild && a->hash == b->hash &&
           fold_cmp(a->name, a->len, b->name, b->len) == 0;
}

static int
entry_cmp(const void *pa, const void *pb)
{
    const struct route_entry *a = pa, *b = pb;
    if (a->wild != b->wild) {
        return a->wild ? 1 : -1;
    }
    if (a->hash != b->hash) {
        return a->hash < b->hash ? -1 : 1;
    }
    int r = fold_cmp(a->name, a->len, b->name, b->len);
    if (r != 0) {
        return r;
    }
    return a->index < b->index ? -1 : a->index > b->index;
}

static const struct route_key *
table_find(const struct route_table *t, uint64_t hash, const char *name, size_t len)
{
    if (t->slots == NULL) {
        return NULL;
    }
    for (size_t i = (size_t)hash & t->mask;; i = (i + 1) & t->mask) {
        const struct route_key *k = &t->slots[i];
        if (k->name == NULL) {
            return NULL;
        }
        if (k->hash == hash && fold_cmp(k->name, k->len, name, len) == 0) {
            return k;
        }
    }
}

/* Makes t for n keys (at most half full); false when out of memory. */
static bool
table_init(struct route_table *t, size_t n)
{
    if (n == 0) {
        return true;
    }
    size_t cap = 8;
    while (cap < 2 * n) {
        cap *= 2;
    }
    t->slots = calloc(cap, sizeof(*t->slots));
    t->mask = cap - 1;
    return t->slots != NULL;
}

static struct route_key *
table_put(struct route_table *t, const struct route_entry *e, uint32_t start, uint32_t count)
{
    size_t i = (size_t)e->hash & t->mask;
    while (t->slots[i].name != NULL) {
        i = (i + 1) & t->mask;
    }
    t->slots[i] = (struct route_key){
        .name = e->name, .hash = e->hash, .len = e->len, .start = start, .count = count
    };
    return &t->slots[i];
}

/* ---- the path index ---- */

static uint64_t
path_step(uint64_t h, unsigned char ch)
{
    return (h ^ ch) * ROUTE_HASH_PRIME;
}

static void
path_index_free(struct path_index *x)
{
    if (x != NULL) {
        free(x->lens);
        free(x->slots);
        free(x);
    }
}

static int
len_cmp(const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    return (a > b) - (a < b);
}

/*
 * The index of the n routes at routes (ascending); NULL when n is small
 * enough to scan. *oom when out of memory.
 */
static struct path_index *
path_index_build(const struct dm_conf *c, const uint32_t *routes, size_t n, bool *oom)
{
    if (n <= PATH_SCAN) {
        return NULL;
    }
    struct path_index *x = calloc(1, sizeof(*x));
    size_t cap = 8;
    while (cap < 2 * n) {
        cap *= 2;
    }
    if (x == NULL || (x->lens = calloc(n, sizeof(*x->lens))) == NULL ||
        (x->slots = calloc(cap, sizeof(*x->slots))) == NULL) {
        path_index_free(x);
        *oom = true;
        return NULL;
    }
    x->mask = cap - 1;
    x->all = UINT32_MAX;
    for (size_t i = 0; i < n; i++) {
        const char *prefix = c->routes[routes[i]].path_prefix;
        if (prefix_is_all(prefix)) {
            x->all = x->all != UINT32_MAX ? x->all : routes[i];
            continue;
        }
        size_t len = strlen(prefix);
        if (len > UINT32_MAX) {
            continue; /* never: a config line is not 4 GiB */
        }
        uint64_t h = ROUTE_HASH_INIT;
        for (size_t k = 0; k < len; k++) {
            h = path_step(h, (unsigned char)prefix[k]);
        }
        size_t j = (size_t)h & x->mask;
        while (x->slots[j].prefix != NULL && !(x->slots[j].hash == h && x->slots[j].len == len &&
                                               memcmp(x->slots[j].prefix, prefix, len) == 0)) {
            j = (j + 1) & x->mask;
        }
        if (x->slots[j].prefix == NULL) { /* the first route of the list with it */
            x->slots[j] = (struct path_slot){
                .prefix = prefix, .hash = h, .len = (uint32_t)len, .route = routes[i]
            };
            x->lens[x->nlens++] = (uint32_t)len;
        }
    }
    qsort(x->lens, x->nlens, sizeof(*x->lens), len_cmp);
    size_t m = 0;
    for (size_t i = 0; i < x->nlens; i++) {
        if (m == 0 || x->lens[m - 1] != x->lens[i]) {
            x->lens[m++] = x->lens[i];
        }
    }
    x->nlens = m;
    return x;
}

/* The first route of x's list whose prefix the path has; UINT32_MAX when none. */
static uint32_t
path_index_find(const struct path_index *x, const char *path, size_t path_len)
{
    uint32_t best = x->all;
    uint64_t h = ROUTE_HASH_INIT;
    size_t next = 0; /* the next length of x->lens to look up */
    for (size_t len = 1; len <= path_len && next < x->nlens; len++) {
        h = path_step(h, (unsigned char)path[len - 1]);
        if (x->lens[next] != len) {
            continue;
        }
        next++;
        for (size_t j = (size_t)h & x->mask; x->slots[j].prefix != NULL; j = (j + 1) & x->mask) {
            const struct path_slot *sl = &x->slots[j];
            if (sl->hash == h && sl->len == len && memcmp(sl->prefix, path, len) == 0) {
                best = sl->route < best ? sl->route : best;
                break;
            }
        }
    }
    return best;
}

void
dm_routes_free(struct dm_routes *rs)
{
    if (rs != NULL) {
        for (size_t i = 0; rs->exact.slots != NULL && i <= rs->exact.mask; i++) {
            path_index_free(rs->exact.slots[i].paths);
        }
        for (size_t i = 0; rs->wild.slots != NULL && i <= rs->wild.mask; i++) {
            path_index_free(rs->wild.slots[i].paths);
        }
        path_index_free(rs->any_paths);
        free(rs->exact.slots);
        free(rs->wild.slots);
        free(rs->lists);
        free(rs->any);
        free(rs);
    }
}

struct dm_routes *
dm_routes_build(const struct dm_conf *c)
{
    size_t n = c->nroutes;
    if (n > UINT32_MAX) {
        return NULL;
    }
    struct dm_routes *rs = calloc(1, sizeof(*rs));
    struct route_entry *e = calloc(n > 0 ? n : 1, sizeof(*e));
    if (rs == NULL || e == NULL ||
        (rs->lists = calloc(n > 0 ? n : 1, sizeof(*rs->lists))) == NULL ||
        (rs->any = calloc(n > 0 ? n : 1, sizeof(*rs->any))) == NULL) {
        free(e);
        dm_routes_free(rs);
        return NULL;
    }
    size_t ne = 0;
    for (size_t i = 0; i < n; i++) {
        const char *h = c->routes[i].host;
        if (h == NULL) {
            rs->any[rs->nany++] = (uint32_t)i;
            continue;
        }
        size_t len = strlen(h);
        bool wild = len >= 2 && h[0] == '*' && h[1] == '.';
        const char *name = wild ? h + 1 : h;
        size_t name_len = wild ? len - 1 : len;
        if (name_len > UINT32_MAX) {
            free(e);
            dm_routes_free(rs);
            return NULL;
        }
        e[ne++] = (struct route_entry){ .name = name,
                                        .hash = hash_name(name, name_len),
                                        .len = (uint32_t)name_len,
                                        .index = (uint32_t)i,
                                        .wild = wild };
    }
    /* Equal keys side by side, each key's routes in the config's order. */
    qsort(e, ne, sizeof(*e), entry_cmp);
    bool oom = false;
    size_t keys[2] = { 0, 0 };
    for (size_t i = 0; i < ne; i++) {
        keys[e[i].wild] += i == 0 || !same_key(&e[i - 1], &e[i]);
    }
    if (!table_init(&rs->exact, keys[0]) || !table_init(&rs->wild, keys[1])) {
        free(e);
        dm_routes_free(rs);
        return NULL;
    }
    for (size_t i = 0; i < ne;) {
        size_t j = i + 1;
        while (j < ne && same_key(&e[i], &e[j])) {
            j++;
        }
        for (size_t k = i; k < j; k++) {
            rs->lists[k] = e[k].index;
        }
        struct route_key *k =
            table_put(e[i].wild ? &rs->wild : &rs->exact, &e[i], (uint32_t)i, (uint32_t)(j - i));
        k->paths = path_index_build(c, rs->lists + i, j - i, &oom);
        i = j;
    }
    free(e);
    rs->any_paths = path_index_build(c, rs->any, rs->nany, &oom);
    if (oom) {
        dm_routes_free(rs);
        return NULL;
    }
    return rs;
}

/* The first of routes (ascending, their hosts matching; indexed by paths, or NULL) whose
 * path matches and that comes before *best: it becomes *best. */
static void
first_of(const struct dm_conf *c, const uint32_t *routes, size_t n, const struct path_index *paths,
         const char *path, size_t path_len, size_t *best)
{
    if (paths != NULL) {
        uint32_t r = path_index_find(paths, path, path_len);
        if (r != UINT32_MAX && r < *best) {
            *best = r;
        }
        return;
    }
    for (size_t i = 0; i < n && routes[i] < *best; i++) {
        if (route_path_matches(c->routes[routes[i]].path_prefix, path, path_len)) {
            *best = routes[i];
            return;
        }
    }
}

size_t
dm_routes_match(const struct dm_routes *rs, const struct dm_conf *c, const char *host,
                size_t host_len, const char *path, size_t path_len)
{
    if (c->nroutes == 0) {
        return c->default_pool; /* no route: nothing to look up */
    }
    size_t best = SIZE_MAX;
    first_of(c, rs->any, rs->nany, rs->any_paths, path, path_len, &best);
    if (rs->exact.slots != NULL || rs->wild.slots != NULL) {
        size_t len = host != NULL ? host_name_len(host, host_len) : 0;
        const char *name = host != NULL ? host : "";
        /* Every suffix that starts with a dot after the first byte: "*.x.com"
         * covers some non-empty name, then ".x.com". */
        uint64_t h = ROUTE_HASH_INIT;
        for (size_t i = len; i > 0; i--) {
            h = hash_step(h, (unsigned char)name[i - 1]);
            if (i > 1 && name[i - 1] == '.' && rs->wild.slots != NULL) {
                const struct route_key *k = table_find(&rs->wild, h, name + i - 1, len - (i - 1));
                if (k != NULL) {
                    first_of(c, rs->lists + k->start, k->count, k->paths, path, path_len, &best);
                }
            }
        }
        const struct route_key *k = table_find(&rs->exact, h, name, len);
        if (k != NULL) {
            first_of(c, rs->lists + k->start, k->count, k->paths, path, path_len, &best);
        }
    }
    return best != SIZE_MAX ? c->routes[best].pool : c->default_pool;
}
