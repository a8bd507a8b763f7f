/*
 * The object catalog (DESIGN.md item 1, AGE): for each page, the embedded
 * objects a browser fetches after it (images, scripts, stylesheets...), and
 * for each object the bytes its responses carry. On the first request of a
 * client connection the proxy looks the page up; the sum is the potential
 * load that connection will bring to the server that gets it.
 *
 * Pages and objects are named by 64-bit keys from dm_catalog_key(). One key
 * may be both a page (it has an object list) and an object (it has a size).
 * The catalog learns object sizes from responses, page lists from scanned
 * HTML (parsers/html_scan.h), and can be preloaded from a manifest or a
 * document root at start.
 *
 * Any host: a page stored under an empty host (preloaded with no host in the
 * config) is found for every host. Its object keys are host-less too, so a
 * caller that found a page that way keys the connection's later requests
 * with an empty host. dm_catalog_lookup_url() does the fallback and says
 * which way it found the page.
 *
 * Memory: everything the catalog allocates is counted, as glibc's malloc
 * takes it, and never goes above the cap given to dm_catalog_create(); the
 * least recently used entries (a page with its list, or an object size) go
 * first. Threads: every function except create and destroy may be called
 * from any thread at any time; the catalog has no global state.
 *
 * The one lock on the request path (DESIGN.md: "no lock on the request
 * path" holds for the data path and the policies; the catalog is the stated
 * exception). The catalog is 64 shards, each under its own mutex, called once
 * per client connection (a page lookup) and once per response (a size), never
 * per byte, and never holding two locks (parsers/catalog.c says why). Its
 * cost, measured with dimmer-catalogbench on a 2-core VM (2026-12-01, medians
 * of 5): one page visit (a lookup of 24 objects and 25 sizes learnt) takes
 * 0.73 us on one thread, of which at most 0.30 us is uncontended lock/unlock
 * pairs (6 ns each); two threads doing nothing but visits at once take 2.3 us
 * per visit each (cache lines of shards and entries move between cores). A
 * visit is 25 requests, about 400 us of the proxy's CPU at 16 us a request
 * (bench/README.md), so the catalog is 0.2% of it alone and at most about 0.6%
 * under that worst contention. A lock-free table would save part of this at
 * the price of a far harder eviction under a memory cap: not worth it today.
 */
#ifndef DM_PARSERS_CATALOG_H
#define DM_PARSERS_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DM_CATALOG_PAGE_MAX 256 /* objects kept per page: the first distinct ones */

struct dm_bal_object;
struct dm_catalog;

/* For the admin page; a snapshot, each shard read at a slightly different time. */
struct dm_catalog_stats {
    uint64_t pages;     /* pages with an object list */
    uint64_t objects;   /* objects with a learned size */
    uint64_t bytes;     /* memory used, <= cap */
    uint64_t cap;       /* the cap given to dm_catalog_create() */
    uint64_t hits;      /* lookups that found their page */
    uint64_t misses;    /* lookups that did not */
    uint64_t evictions; /* entries dropped to stay under the cap */
};

/*
 * The key of a URL: host (Host header or absolute-form authority) and path
 * (origin-form request target). The host is lowercased and its ":port"
 * dropped ("[v6]:port" too); an empty host is the "any host" key. The path
 * loses its "#fragment" and keeps its query; an empty path reads "/". The
 * bytes are otherwise taken as they are (no percent-decoding). FNV-1a with
 * a 64-bit finalizer. Pure: any thread.
 */
uint64_t dm_catalog_key(const char *host, size_t host_len, const char *path, size_t path_len);

/*
 * Creates an empty catalog that will use at most memory_cap bytes, its own
 * fixed part (about 12 KiB) included: a cap below that stores nothing. Returns
 * NULL when out of memory. One thread, before the catalog is shared.
 */
struct dm_catalog *dm_catalog_create(uint64_t memory_cap);

/* Frees the catalog and everything in it; NULL is a no-op. No other call may run. */
void dm_catalog_destroy(struct dm_catalog *c);

/*
 * Learns that the object's responses carry bytes bytes (Content-Length, or
 * the body bytes counted; pass only complete 200 bodies, not 304, HEAD or
 * range answers). The first sample is kept as is; later ones move the value
 * a quarter of the way (EWMA, alpha 1/4, rounded so a constant size is kept
 * exactly). May evict. Any thread; when memory runs out nothing is learned.
 */
void dm_catalog_learn_size(struct dm_catalog *c, uint64_t object_key, uint64_t bytes);

/*
 * Replaces the page's object list with the n keys (duplicates removed, the
 * first DM_CATALOG_PAGE_MAX distinct ones kept, in order). n == 0 records a
 * page known to have no objects. object_keys is only read. May evict. Any
 * thread; when memory runs out the page is forgotten instead.
 */
void dm_catalog_learn_page(struct dm_catalog *c, uint64_t page_key, const uint64_t *object_keys,
                           size_t n);

/*
 * Looks the page up. Writes its first max objects to out (out may be NULL
 * when max is 0), each with work = (learned size, or default_bytes when
 * none) + request_cost, saturating; sets *total_work (may be NULL) to the
 * work of all its objects, max or not. Returns the number written: 0 when
 * the page is unknown (total 0). Marks the page and its objects used. Any
 * thread.
 */
size_t dm_catalog_lookup(struct dm_catalog *c, uint64_t page_key, struct dm_bal_object *out,
                         size_t max, uint64_t request_cost, uint64_t default_bytes,
                         uint64_t *total_work);

/*
 * dm_catalog_lookup() of the page (host, path), falling back to the page
 * with the same path under the empty host when the host has none (one hit or
 * one miss is counted either way). *any_host (may be NULL) is set to true
 * when the page was found under the empty host. Any thread.
 */
size_t dm_catalog_lookup_url(struct dm_catalog *c, const char *host, size_t host_len,
                             const char *path, size_t path_len, struct dm_bal_object *out,
                             size_t max, uint64_t request_cost, uint64_t default_bytes,
                             uint64_t *total_work, bool *any_host);

/*
 * The object's learned size, or default_bytes when it has none. Marks it
 * used. Any thread.
 */
uint64_t dm_catalog_size(struct dm_catalog *c, uint64_t object_key, uint64_t default_bytes);

/* Fills *out with the counters and memory use. Any thread. */
void dm_catalog_stats(struct dm_catalog *c, struct dm_catalog_stats *out);

/*
 * Preloads pages and sizes from the manifest file at path (the format of
 * parsers/manifest.h); host is the host of its pages (NULL or "" for any
 * host). The whole file is checked before anything is learned. A page
 * listed again replaces the earlier list; objects past the
 * DM_CATALOG_PAGE_MAX-th distinct one are ignored. Returns 0, -EINVAL with
 * "path:line: message" in err (errlen bytes, NUL-terminated, may be 0), or
 * another negative errno ("path: message").
 * Reads the file: call it from the control thread, not a worker.
 */
int dm_catalog_preload_manifest(struct dm_catalog *c, const char *path, const char *host, char *err,
                                size_t errlen);

/*
 * Preloads from a document root: walks dir (symbolic links followed, but
 * never into a directory that contains them, at most 16 levels down) and
 * learns every regular file's size under its URL path (the path below dir,
 * bytes a browser would percent-encode encoded), and every *.html or *.htm
 * file as a page, scanned for its objects up to scan_limit bytes (0: all).
 * index.html and index.htm are also the page of their directory ("/d/").
 * host as for the manifest. Entries that cannot be read are skipped.
 * Returns 0, or a negative errno with "dir: message" in err when dir cannot
 * be read. Control thread, as for the manifest.
 */
int dm_catalog_preload_docroot(struct dm_catalog *c, const char *dir, const char *host,
                               uint64_t scan_limit, char *err, size_t errlen);

#endif
