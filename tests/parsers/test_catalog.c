/*
 * Tests of parsers/catalog.c: key normalisation, learning and looking up
 * pages and sizes, the memory cap and its LRU eviction, four threads at
 * once, and the two preloads (a manifest and a document root, both written
 * to temporary files by the tests).
 *
 * Threads never call cmocka's assertions (a failure longjmps, which only the
 * main thread may do): they count what they saw go wrong, and the main
 * thread checks the counts.
 */
#include "dm_test.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "balancers/balancer.h"
#include "parsers/catalog.h"
#include "parsers/manifest.h"

#define MIB  (1024 * 1024)
#define COST 100 /* request_cost in the lookups below */
#define DEF  777 /* default_bytes in the lookups below */

static uint64_t
key(const char *host, const char *path)
{
    return dm_catalog_key(host, strlen(host), path, strlen(path));
}

static struct dm_catalog_stats
stats(struct dm_catalog *c)
{
    struct dm_catalog_stats st;
    dm_catalog_stats(c, &st);
    return st;
}

/* The page's total work, or UINT64_MAX when it is unknown (a page known to
 * have no objects also gives 0 objects, but counts a hit). */
static uint64_t
page_total(struct dm_catalog *c, uint64_t page)
{
    struct dm_bal_object out[DM_CATALOG_PAGE_MAX];
    uint64_t total = 12345;
    uint64_t hits = stats(c).hits;
    size_t n = dm_catalog_lookup(c, page, out, DM_CATALOG_PAGE_MAX, COST, DEF, &total);
    if (n == 0) {
        assert_int_equal(total, 0);
        return stats(c).hits > hits ? 0 : UINT64_MAX;
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += out[i].work;
    }
    assert_int_equal(sum, total);
    return total;
}

/* ------------------------------------------------------------------------ */
/* Keys                                                                     */
/* ------------------------------------------------------------------------ */

static void
test_key_ignores_host_case_port_and_fragment(void **state)
{
    (void)state;
    uint64_t k = key("example.com", "/a/b.html?x=1");
    assert_int_equal(key("Example.COM", "/a/b.html?x=1"), k);
    assert_int_equal(key("example.com:8080", "/a/b.html?x=1"), k);
    assert_int_equal(key("EXAMPLE.com:80", "/a/b.html?x=1#top"), k);
    assert_int_equal(key("[::1]:8080", "/"), key("[::1]", "/"));
    assert_int_equal(key("h", ""), key("h", "/"));
    assert_int_equal(key("h", "#x"), key("h", "/"));
    assert_int_equal(key("", "/a"), dm_catalog_key(NULL, 0, "/a", 2));

    /* The query is kept, the path is case-sensitive, the host matters. */
    assert_int_not_equal(key("example.com", "/a/b.html?x=2"), k);
    assert_int_not_equal(key("example.com", "/a/b.html"), k);
    assert_int_not_equal(key("example.com", "/A/b.html?x=1"), k);
    assert_int_not_equal(key("example.org", "/a/b.html?x=1"), k);
    assert_int_not_equal(key("", "/a/b.html?x=1"), k);
    assert_int_not_equal(key("[::1]", "/"), key("[::2]", "/"));
    /* Where the host ends is part of the key. */
    assert_int_not_equal(key("ab", "/c"), key("a", "b/c"));
}

static void
test_key_spreads_similar_urls(void **state)
{
    (void)state;
    /* 4096 near-identical URLs: no collision, and every one of the 64 values
     * of the top 6 bits and of the low 6 bits is used. */
    enum { N = 4096 };
    uint64_t *k = malloc(N * sizeof *k);
    assert_non_null(k);
    uint64_t top = 0, low = 0;
    for (int i = 0; i < N; i++) {
        char path[32];
        snprintf(path, sizeof path, "/img/%d.png", i);
        k[i] = key("example.com", path);
        top |= 1ull << (k[i] >> 58);
        low |= 1ull << (k[i] & 63);
        for (int j = 0; j < i; j++) {
            assert_int_not_equal(k[i], k[j]);
        }
    }
    assert_int_equal(top, UINT64_MAX);
    assert_int_equal(low, UINT64_MAX);
    free(k);
}

/* ------------------------------------------------------------------------ */
/* Learning and lookups                                                     */
/* ------------------------------------------------------------------------ */

static void
test_lookup_totals_learned_sizes_plus_request_cost(void **state)
{
    (void)state;
    struct dm_catalog *c = dm_catalog_create(16 * MIB);
    assert_non_null(c);
    uint64_t page = key("www.example.com", "/index.html");
    uint64_t objs[4] = { key("www.example.com", "/a.png"), key("www.example.com", "/b.css"),
                         key("cdn.example.com", "/c.js"), key("www.example.com", "/never.gif") };
    dm_catalog_learn_size(c, objs[0], 1000);
    dm_catalog_learn_size(c, objs[1], 20000);
    dm_catalog_learn_size(c, objs[2], 0);
    dm_catalog_learn_page(c, page, objs, 4);

    struct dm_bal_object out[8];
    uint64_t total = 0;
    assert_int_equal(dm_catalog_lookup(c, page, out, 8, COST, DEF, &total), 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(out[i].key, objs[i]);
    }
    assert_int_equal(out[0].work, 1000 + COST);
    assert_int_equal(out[1].work, 20000 + COST);
    assert_int_equal(out[2].work, 0 + COST);
    assert_int_equal(out[3].work, DEF + COST); /* never learned: the default */
    assert_int_equal(total, 1000 + 20000 + 0 + DEF + 4 * COST);

    /* max bounds what is written, not the total. */
    memset(out, 0, sizeof out);
    total = 0;
    assert_int_equal(dm_catalog_lookup(c, page, out, 2, COST, DEF, &total), 2);
    assert_int_equal(out[1].key, objs[1]);
    assert_int_equal(out[2].key, 0);
    assert_int_equal(total, 1000 + 20000 + 0 + DEF + 4 * COST);
    assert_int_equal(dm_catalog_lookup(c, page, NULL, 0, COST, DEF, &total), 0);
    assert_int_equal(total, 1000 + 20000 + 0 + DEF + 4 * COST);
    assert_int_equal(dm_catalog_lookup(c, page, out, 8, COST, DEF, NULL), 4);

    /* Huge sizes saturate instead of wrapping. */
    uint64_t huge = key("www.example.com", "/huge.iso");
    dm_catalog_learn_size(c, huge, UINT64_MAX - 1);
    dm_catalog_learn_page(c, key("www.example.com", "/huge.html"), &huge, 1);
    dm_catalog_learn_page(c, page, (uint64_t[]){ objs[0], huge, objs[1] }, 3);
    assert_int_equal(dm_catalog_lookup(c, page, out, 8, COST, DEF, &total), 3);
    assert_int_equal(out[1].work, UINT64_MAX);
    assert_int_equal(total, UINT64_MAX);

    struct dm_catalog_stats st = stats(c);
    assert_int_equal(st.pages, 2);
    assert_int_equal(st.objects, 4);
    assert_int_equal(st.hits, 5);
    assert_int_equal(st.misses, 0);
    assert_int_equal(st.cap, 16 * MIB);
    assert_true(st.bytes > 0 && st.bytes <= st.cap);
    dm_catalog_destroy(c);
}

static void
test_unknown_page_gives_zero_and_counts_a_miss(void **state)
{
    (void)state;
    struct dm_catalog *c = dm_catalog_create(MIB);
    struct dm_bal_object out[4];
    uint64_t total = 99;
    assert_int_equal(dm_catalog_lookup(c, key("h", "/nope"), out, 4, COST, DEF, &total), 0);
    assert_int_equal(total, 0);
    /* A size alone does not make a page. */
    dm_catalog_learn_size(c, key("h", "/img.png"), 5);
    assert_int_equal(dm_catalog_lookup(c, key("h", "/img.png"), out, 4, COST, DEF, &total), 0);
    struct dm_catalog_stats st = stats(c);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.hits, 0);
    assert_int_equal(st.pages, 0);
    dm_catalog_destroy(c);
    dm_catalog_destroy(NULL);
}

static void
test_page_with_no_objects_is_known_and_empty(void **state)
{
    (void)state;
    struct dm_catalog *c = dm_catalog_create(MIB);
    uint64_t total = 99;
    dm_catalog_learn_page(c, key("h", "/plain.html"), NULL, 0);
    assert_int_equal(dm_catalog_lookup(c, key("h", "/plain.html"), NULL, 0, COST, DEF, &total), 0);
    assert_int_equal(total, 0);
    struct dm_catalog_stats st = stats(c);
    assert_int_equal(st.pages, 1);
    assert_int_equal(st.hits, 1);
    dm_catalog_destroy(c);
}

static void
test_size_of_unknown_object_is_the_default(void **state)
{
    (void)state;
    struct dm_catalog *c = dm_catalog_create(MIB);
    assert_int_equal(dm_catalog_size(c, key("h", "/x"), 4242), 4242);
    dm_catalog_learn_size(c, key("h", "/x"), 10);
    assert_int_equal(dm_catalog_size(c, key("h", "/x"), 4242), 10);
    assert_int_equal(dm_catalog_size(c, key("H:81", "/x#frag"), 4242), 10);
    dm_catalog_destroy(c);
}

static void
test_sizes_are_smoothed_and_constant_sizes_kept_exactly(void **state)
{
    (void)state;
    struct dm_catalog *c = dm_catalog_create(MIB);
    uint64_t k = key("h", "/x");
    dm_catalog_learn_size(c, k, 1000);
    assert_int_equal(dm_catalog_size(c, k, 0), 1000); /* first sample as is */
    dm_catalog_learn_size(c, k, 2000);
    assert_int_equal(dm_catalog_size(c, k, 0), 1250); /* a quarter of the way */
    dm_catalog_learn_size(c, k, 250);
    assert_int_equal(dm_catalog_size(c, k, 0), 1000);
    for (int i = 0; i < 40; i++) {
        dm_catalog_learn_size(c, k, 1003);
    }
    assert_int_equal(dm_catalog_size(c, k, 0), 1003);
    for (int i = 0; i < 40; i++) {
        dm_catalog_learn_size(c, k, 999);
    }
    assert_int_equal(dm_catalog_size(c, k, 0), 999);
    dm_catalog_learn_size(c, k, UINT64_MAX);
    dm_catalog_learn_size(c, k, 0);
    assert_true(dm_catalog_size(c, k, 0) < UINT64_MAX);
    dm_catalog_destroy(c);
}

static void
test_relearning_a_page_replaces_its_list(void **state)
{
    (void)state;
    struct dm_catalog *c = dm_catalog_create(MIB);
    uint64_t page = key("h", "/p.html");
    uint64_t a[3] = { key("h", "/1"), key("h", "/2"), key("h", "/3") };
    uint64_t b[1] = { key("h", "/9") };
    dm_catalog_learn_size(c, a[0], 10);
    dm_catalog_learn_size(c, b[0], 90);
    dm_catalog_learn_page(c, page, a, 3);
    assert_int_equal(page_total(c, page), 10 + 2 * DEF + 3 * COST);
    dm_catalog_learn_page(c, page, b, 1);
    struct dm_bal_object out[4];
    assert_int_equal(dm_catalog_lookup(c, page, out, 4, COST, DEF, NULL), 1);
    assert_int_equal(out[0].key, b[0]);
    assert_int_equal(out[0].work, 90 + COST);
    dm_catalog_learn_page(c, page, NULL, 0);
    assert_int_equal(page_total(c, page), 0);
    assert_int_equal(stats(c).pages, 1);
    /* The object sizes are not touched by relearning. */
    assert_int_equal(dm_catalog_size(c, a[0], 0), 10);
    dm_catalog_destroy(c);
}

static void
test_page_list_is_deduped_in_order_and_capped(void **state)
{
    (void)state;
    struct dm_catalog *c = dm_catalog_create(16 * MIB);
    uint64_t page = key("h", "/dup.html");
    uint64_t x = key("h", "/x"), y = key("h", "/y"), z = key("h", "/z");
    uint64_t in[7] = { x, y, x, x, z, y, z };
    dm_catalog_learn_page(c, page, in, 7);
    struct dm_bal_object out[DM_CATALOG_PAGE_MAX];
    assert_int_equal(dm_catalog_lookup(c, page, out, 8, COST, DEF, NULL), 3);
    assert_int_equal(out[0].key, x);
    assert_int_equal(out[1].key, y);
    assert_int_equal(out[2].key, z);

    /* 1000 keys, each repeated: the first DM_CATALOG_PAGE_MAX distinct kept. Small
     * integers as keys too: the catalog mixes keys itself. */
    enum { N = 1000 };
    uint64_t *many = malloc(2 * N * sizeof *many);
    assert_non_null(many);
    for (int i = 0; i < N; i++) {
        many[2 * i] = (uint64_t)i;
        many[2 * i + 1] = (uint64_t)i / 2;
    }
    dm_catalog_learn_page(c, page, many, 2 * N);
    uint64_t total = 0;
    assert_int_equal(dm_catalog_lookup(c, page, out, DM_CATALOG_PAGE_MAX, COST, DEF, &total),
                     DM_CATALOG_PAGE_MAX);
    for (int i = 0; i < DM_CATALOG_PAGE_MAX; i++) {
        assert_int_equal(out[i].key, (uint64_t)i);
    }
    assert_int_equal(total, (uint64_t)DM_CATALOG_PAGE_MAX * (DEF + COST));
    free(many);
    dm_catalog_destroy(c);
}

static void
test_lookup_url_falls_back_to_the_any_host_page(void **state)
{
    (void)state;
    struct dm_catalog *c = dm_catalog_create(MIB);
    uint64_t o = key("", "/o.png");
    dm_catalog_learn_size(c, o, 50);
    dm_catalog_learn_page(c, key("", "/p.html"), &o, 1);
    uint64_t o2 = key("special.example", "/s.png");
    dm_catalog_learn_page(c, key("special.example", "/p.html"), &o2, 1);

    struct dm_bal_object out[2];
    uint64_t total = 0;
    bool any = false;
    size_t n = dm_catalog_lookup_url(c, "www.example.com:8080", 20, "/p.html#x", 9, out, 2, COST,
                                     DEF, &total, &any);
    assert_int_equal(n, 1);
    assert_true(any);
    assert_int_equal(out[0].key, o);
    assert_int_equal(total, 50 + COST);
    /* A host with its own page gets that one. */
    n = dm_catalog_lookup_url(c, "Special.Example", 15, "/p.html", 7, out, 2, COST, DEF, &total,
                              &any);
    assert_int_equal(n, 1);
    assert_false(any);
    assert_int_equal(out[0].key, o2);
    assert_int_equal(total, DEF + COST);
    /* Unknown everywhere: one miss. */
    n = dm_catalog_lookup_url(c, "www.example.com", 15, "/q.html", 7, out, 2, COST, DEF, &total,
                              NULL);
    assert_int_equal(n, 0);
    assert_int_equal(total, 0);
    struct dm_catalog_stats st = stats(c);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 1);
    dm_catalog_destroy(c);
}

/* ------------------------------------------------------------------------ */
/* Memory cap and LRU                                                       */
/* ------------------------------------------------------------------------ */

static uint64_t
nth_key(int i)
{
    char path[32];
    snprintf(path, sizeof path, "/obj/%d", i);
    return key("h", path);
}

static void
test_memory_cap_holds_and_lru_keeps_what_is_looked_up(void **state)
{
    (void)state;
    const uint64_t cap = 256 * 1024;
    struct dm_catalog *c = dm_catalog_create(cap);
    uint64_t page = key("h", "/hot.html");
    uint64_t objs[20];
    uint64_t expect = 0;
    for (int i = 0; i < 20; i++) {
        char path[32];
        snprintf(path, sizeof path, "/hot/%d.png", i);
        objs[i] = key("h", path);
        dm_catalog_learn_size(c, objs[i], 1000 + (uint64_t)i);
        expect += 1000 + (uint64_t)i + COST;
    }
    dm_catalog_learn_page(c, page, objs, 20);

    /* Far more entries than fit; the hot page is looked up now and then. */
    enum { N = 60000 };
    for (int i = 0; i < N; i++) {
        dm_catalog_learn_size(c, nth_key(i), (uint64_t)i);
        if (i % 50 == 0) {
            assert_int_equal(page_total(c, page), expect);
        }
        if (i % 997 == 0) {
            struct dm_catalog_stats st = stats(c);
            assert_true(st.bytes <= cap);
        }
    }
    struct dm_catalog_stats st = stats(c);
    assert_true(st.bytes <= cap);
    assert_true(st.bytes > cap / 2); /* and the memory is used */
    assert_true(st.evictions > 0);
    assert_true(st.objects < N);
    assert_int_equal(st.pages, 1);
    assert_int_equal(page_total(c, page), expect);
    /* The oldest went first; the newest are all there. */
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(dm_catalog_size(c, nth_key(i), UINT64_MAX), UINT64_MAX);
    }
    for (int i = N - 20; i < N; i++) {
        assert_int_equal(dm_catalog_size(c, nth_key(i), UINT64_MAX), (uint64_t)i);
    }
    /* Evicting pages too: many pages of 200 objects each. */
    uint64_t list[200];
    for (int p = 0; p < 2000; p++) {
        for (int j = 0; j < 200; j++) {
            list[j] = nth_key(p * 200 + j);
        }
        char path[32];
        snprintf(path, sizeof path, "/page/%d", p);
        dm_catalog_learn_page(c, key("h", path), list, 200);
        assert_true(stats(c).bytes <= cap);
    }
    assert_int_equal(page_total(c, key("h", "/page/0")), UINT64_MAX);
    assert_int_not_equal(page_total(c, key("h", "/page/1999")), UINT64_MAX);
    dm_catalog_destroy(c);
}

static void
test_tiny_cap_stores_nothing_and_stays_under(void **state)
{
    (void)state;
    struct dm_catalog *c = dm_catalog_create(1000);
    assert_non_null(c);
    uint64_t o = key("h", "/o");
    dm_catalog_learn_size(c, o, 5);
    dm_catalog_learn_page(c, key("h", "/p"), &o, 1);
    assert_int_equal(dm_catalog_size(c, o, 1), 1);
    assert_int_equal(page_total(c, key("h", "/p")), UINT64_MAX);
    struct dm_catalog_stats st = stats(c);
    assert_int_equal(st.pages + st.objects, 0);
    dm_catalog_destroy(c);

    /* A cap that leaves a shard too little for a full page: the page is not
     * kept, its old list neither, and nothing breaks. */
    c = dm_catalog_create(16 * 1024 + 64 * 1024);
    uint64_t list[DM_CATALOG_PAGE_MAX];
    for (int i = 0; i < DM_CATALOG_PAGE_MAX; i++) {
        list[i] = nth_key(i);
    }
    uint64_t page = key("h", "/big");
    dm_catalog_learn_page(c, page, list, 1);
    assert_int_equal(page_total(c, page), DEF + COST);
    dm_catalog_learn_page(c, page, list, DM_CATALOG_PAGE_MAX);
    assert_int_equal(page_total(c, page), UINT64_MAX);
    st = stats(c);
    assert_true(st.bytes <= st.cap);
    assert_int_equal(st.pages, 0);
    dm_catalog_destroy(c);
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                  */
/* ------------------------------------------------------------------------ */

#define THREADS 4
#define SHARED  16 /* objects of the shared page */

struct shared {
    struct dm_catalog *c;     /* large: nothing is evicted */
    struct dm_catalog *small; /* small: evicting all the time */
    uint64_t page;            /* its list flips between a and b */
    uint64_t a[SHARED], b[SHARED / 2];
    uint64_t total_a, total_b;
    atomic_uint bad;
};

struct worker {
    struct shared *sh;
    unsigned id;
};

static uint64_t
obj_size(uint64_t k)
{
    return 100 + k % 5000; /* every thread learns the same size for a key */
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    struct dm_bal_object out[DM_CATALOG_PAGE_MAX];
    uint64_t total;
    for (unsigned i = 0; i < 20000; i++) {
        /* The shared page: flipped by two threads, read by all. */
        if (w->id < 2 && i % 7 == 0) {
            if ((i / 7 + w->id) % 2) {
                dm_catalog_learn_page(sh->c, sh->page, sh->a, SHARED);
            } else {
                dm_catalog_learn_page(sh->c, sh->page, sh->b, SHARED / 2);
            }
        }
        size_t n = dm_catalog_lookup(sh->c, sh->page, out, DM_CATALOG_PAGE_MAX, COST, DEF, &total);
        if (!((n == SHARED && total == sh->total_a) || (n == SHARED / 2 && total == sh->total_b))) {
            atomic_fetch_add(&sh->bad, 1);
        }

        /* Pages of this thread, of objects everyone learns. */
        char path[48];
        snprintf(path, sizeof path, "/t%u/%u.html", w->id, i % 64);
        uint64_t page = key("h", path);
        uint64_t list[8];
        uint64_t expect = 0;
        for (unsigned j = 0; j < 8; j++) {
            list[j] = nth_key((int)((i + j) % 512));
            dm_catalog_learn_size(sh->c, list[j], obj_size(list[j]));
            expect += obj_size(list[j]) + COST;
        }
        dm_catalog_learn_page(sh->c, page, list, 8);
        n = dm_catalog_lookup(sh->c, page, out, DM_CATALOG_PAGE_MAX, COST, DEF, &total);
        /* Another thread may have relearned the page meanwhile, with another
         * window of the same objects: the count and key set still agree. */
        if (n != 8 || total < 8 * (100 + COST) || dm_catalog_size(sh->c, list[0], 0) == 0) {
            atomic_fetch_add(&sh->bad, 1);
        }
        (void)expect;

        /* The small catalog: every answer is a learned size or the default. */
        dm_catalog_learn_size(sh->small, list[i % 8], obj_size(list[i % 8]));
        dm_catalog_learn_page(sh->small, page, list, 8);
        n = dm_catalog_lookup(sh->small, page, out, DM_CATALOG_PAGE_MAX, COST, DEF, &total);
        uint64_t sum = 0;
        for (size_t j = 0; j < n; j++) {
            if (out[j].work != obj_size(out[j].key) + COST && out[j].work != DEF + COST) {
                atomic_fetch_add(&sh->bad, 1);
            }
            sum += out[j].work;
        }
        if (n > 8 || sum != total) {
            atomic_fetch_add(&sh->bad, 1);
        }
        if (i % 1000 == 0) {
            struct dm_catalog_stats st;
            dm_catalog_stats(sh->small, &st);
            if (st.bytes > st.cap) {
                atomic_fetch_add(&sh->bad, 1);
            }
        }
    }
    return NULL;
}

static void
test_four_threads_learn_and_look_up_at_once(void **state)
{
    (void)state;
    struct shared sh = { 0 };
    sh.c = dm_catalog_create(64 * MIB);
    sh.small = dm_catalog_create(64 * 1024);
    assert_non_null(sh.c);
    assert_non_null(sh.small);
    sh.page = key("h", "/shared.html");
    for (int i = 0; i < SHARED; i++) {
        char path[32];
        snprintf(path, sizeof path, "/shared/%d", i);
        sh.a[i] = key("h", path);
        dm_catalog_learn_size(sh.c, sh.a[i], 10 * (uint64_t)i);
        sh.total_a += 10 * (uint64_t)i + COST;
        if (i < SHARED / 2) {
            sh.b[i] = key("other", path);
            dm_catalog_learn_size(sh.c, sh.b[i], 3);
            sh.total_b += 3 + COST;
        }
    }
    dm_catalog_learn_page(sh.c, sh.page, sh.a, SHARED);
    atomic_init(&sh.bad, 0);

    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i].sh = &sh;
        w[i].id = i;
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
    }
    assert_int_equal(atomic_load(&sh.bad), 0);

    struct dm_catalog_stats st = stats(sh.c);
    assert_int_equal(st.misses, 0);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.pages, 1 + THREADS * 64);
    assert_int_equal(st.objects, SHARED + SHARED / 2 + 512);
    st = stats(sh.small);
    assert_true(st.bytes <= st.cap);
    assert_true(st.evictions > 0);
    dm_catalog_destroy(sh.c);
    dm_catalog_destroy(sh.small);
}

/* ------------------------------------------------------------------------ */
/* Preload: manifest                                                        */
/* ------------------------------------------------------------------------ */

/* Writes text to a new temporary file; returns its malloc'd path. */
static char *
write_temp(const char *text)
{
    const char *tmp = getenv("TMPDIR");
    char *path = malloc(4096);
    assert_non_null(path);
    snprintf(path, 4096, "%s/dm_catalog_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

static void
test_manifest_preloads_pages_and_sizes(void **state)
{
    (void)state;
    char *path = write_temp("# the demo site\n"
                            "\n"
                            "page /index.html\n"
                            "  /img/logo.png 12345\n"
                            "\tcss/site.css\t2048\n"
                            "  # a comment inside a page\n"
                            "  //CDN.example.com:8443/lib.js 900\n"
                            "  img/../img/logo.png\n"
                            "  nosize.gif\n"
                            "   \n"
                            "size /img/big.jpg 40000\n"
                            "page /a/b.html?x=1\r\n"
                            "  c.png 7\r\n"
                            "  /img/big.jpg\n"
                            "page /empty.html\n");
    struct dm_catalog *c = dm_catalog_create(16 * MIB);
    char err[256];
    assert_int_equal(dm_catalog_preload_manifest(c, path, "www.example.com", err, sizeof err), 0);
    assert_string_equal(err, "");

    const char *h = "www.example.com";
    struct dm_bal_object out[8];
    uint64_t total;
    assert_int_equal(dm_catalog_lookup(c, key(h, "/index.html"), out, 8, COST, DEF, &total), 4);
    assert_int_equal(out[0].key, key(h, "/img/logo.png"));
    assert_int_equal(out[0].work, 12345 + COST);
    assert_int_equal(out[1].key, key(h, "/css/site.css"));
    assert_int_equal(out[1].work, 2048 + COST);
    assert_int_equal(out[2].key, key("cdn.example.com", "/lib.js"));
    assert_int_equal(out[2].work, 900 + COST);
    assert_int_equal(out[3].key, key(h, "/nosize.gif"));
    assert_int_equal(out[3].work, DEF + COST);
    assert_int_equal(total, 12345 + 2048 + 900 + DEF + 4 * COST);

    assert_int_equal(dm_catalog_lookup(c, key(h, "/a/b.html?x=1"), out, 8, COST, DEF, &total), 2);
    assert_int_equal(out[0].key, key(h, "/a/c.png"));
    assert_int_equal(total, 7 + 40000 + 2 * COST);
    assert_int_equal(page_total(c, key(h, "/empty.html")), 0);
    assert_int_equal(dm_catalog_size(c, key(h, "/img/big.jpg"), 0), 40000);
    /* Pages belong to the host given, not to any host. */
    assert_int_equal(page_total(c, key("", "/index.html")), UINT64_MAX);
    dm_catalog_destroy(c);

    /* No host: the pages are every host's. */
    c = dm_catalog_create(16 * MIB);
    assert_int_equal(dm_catalog_preload_manifest(c, path, NULL, err, sizeof err), 0);
    bool any = false;
    assert_int_equal(
        dm_catalog_lookup_url(c, "x.org", 5, "/index.html", 11, out, 8, COST, DEF, &total, &any),
        4);
    assert_true(any);
    assert_int_equal(out[0].key, key("", "/img/logo.png"));
    assert_int_equal(total, 12345 + 2048 + 900 + DEF + 4 * COST);
    dm_catalog_destroy(c);
    unlink(path);
    free(path);
}

static void
test_manifest_errors_name_the_line_and_learn_nothing(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        unsigned line;
        const char *msg;
    } cases[] = {
        { "# x\n  /a.png 1\n", 2, "object line outside a page" },
        { "page /p\n  /a.png 12kb\n", 2, "size \"12kb\" is not a number of bytes" },
        { "page /p\n  /a.png 99999999999999999999\n", 2,
          "size \"99999999999999999999\" is not a number of bytes" },
        { "page /p\n  /a.png 1 2\n", 2, "object line: expected \"URL [bytes]\", got extra \"2\"" },
        { "page /p\n\n  /a.png 1\nobject /b.png\n", 4,
          "unknown item \"object\": expected page or size (object lines are indented)" },
        { "page p.html\n", 1, "page path \"p.html\" must start with one /" },
        { "page //h/p.html\n", 1, "page path \"//h/p.html\" must start with one /" },
        { "page\n", 1, "expected \"page PATH\"" },
        { "page /a /b\n", 1, "expected \"page PATH\"" },
        { "size /a.png\n", 1, "expected \"size URL bytes\"" },
        { "size /a.png -1\n", 1, "size \"-1\" is not a number of bytes" },
        { "page /p\n  javascript:alert(1) 5\n", 2, "not an http(s) URL: \"javascript:alert(1)\"" },
        { "page /p\n  a b c d e\n", 2, "too many fields: \"e\"" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = write_temp(cases[i].text);
        struct dm_catalog *c = dm_catalog_create(MIB);
        char err[256], want[512];
        assert_int_equal(dm_catalog_preload_manifest(c, path, "h", err, sizeof err), -EINVAL);
        snprintf(want, sizeof want, "%s:%u: %s", path, cases[i].line, cases[i].msg);
        assert_string_equal(err, want);
        struct dm_catalog_stats st = stats(c);
        assert_int_equal(st.pages + st.objects, 0);
        /* errlen 0 is allowed; a short one is cut, NUL-terminated. */
        assert_int_equal(dm_catalog_preload_manifest(c, path, "h", NULL, 0), -EINVAL);
        assert_int_equal(dm_catalog_preload_manifest(c, path, "h", err, 5), -EINVAL);
        assert_int_equal(strlen(err), 4);
        dm_catalog_destroy(c);
        unlink(path);
        free(path);
    }

    /* A line over DM_MANIFEST_LINE_MAX, or a NUL byte: an error at that
     * line, not a file read whole into memory (/dev/zero). The longest
     * line there may be is read, and its CR, if it ends in CRLF, is not
     * counted. */
    char *text = malloc(DM_MANIFEST_LINE_MAX + 64);
    assert_non_null(text);
    for (int i = 0; i < 4; i++) {
        int over = i < 2;
        int k = snprintf(text, 64, "page /p\n  /");
        /* Line 2: "  /", the a's, " 1". */
        size_t fill = DM_MANIFEST_LINE_MAX - 5 + (size_t)over;
        memset(text + k, 'a', fill);
        strcpy(text + k + fill, i % 2 ? " 1\r\n" : " 1\n");
        char *path = write_temp(text);
        struct dm_catalog *c = dm_catalog_create(MIB);
        char err[256], want[512];
        int rc = dm_catalog_preload_manifest(c, path, "h", err, sizeof err);
        if (over) {
            assert_int_equal(rc, -EINVAL);
            snprintf(want, sizeof want, "%s:2: line over %d bytes", path, DM_MANIFEST_LINE_MAX);
            assert_string_equal(err, want);
        } else {
            assert_int_equal(rc, 0);
            assert_int_equal(stats(c).objects, 1);
        }
        dm_catalog_destroy(c);
        unlink(path);
        free(path);
    }
    free(text);
    {
        FILE *f = fopen("/dev/zero", "r");
        if (f != NULL) {
            fclose(f);
            struct dm_catalog *c = dm_catalog_create(MIB);
            char err[256];
            assert_int_equal(dm_catalog_preload_manifest(c, "/dev/zero", "h", err, sizeof err),
                             -EINVAL);
            assert_string_equal(err, "/dev/zero:1: a NUL byte (not a text file?)");
            dm_catalog_destroy(c);
        }
    }

    struct dm_catalog *c = dm_catalog_create(MIB);
    char err[256];
    assert_int_equal(
        dm_catalog_preload_manifest(c, "/nonexistent/dm_catalog.manifest", NULL, err, sizeof err),
        -ENOENT);
    assert_string_equal(err, "/nonexistent/dm_catalog.manifest: cannot open: No such file or "
                             "directory");
    dm_catalog_destroy(c);
}

/* ------------------------------------------------------------------------ */
/* Preload: document root                                                   */
/* ------------------------------------------------------------------------ */

static void
put_file(const char *dir, const char *name, const char *text)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void
put_dir(const char *dir, const char *name)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(mkdir(path, 0700), 0);
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void
test_docroot_preloads_pages_sizes_and_index_directories(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    char root[1024];
    snprintf(root, sizeof root, "%s/dm_docroot_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(root));

    put_file(root, "index.html",
             "<html><head><link rel=stylesheet href=/css/s.css>"
             "<script src=\"missing.js\"></script></head>"
             "<body><img src=img/a.png><img src='img/a.png'>"
             "<img src=\"a b.png\"><script src=//CDN.Example.com/x.js></script>"
             "<a href=other.html>not an object</a></body></html>");
    put_file(root, "a b.png", "12345");
    put_dir(root, "img");
    put_file(root, "img/a.png", "0123456789"); /* 10 bytes */
    put_dir(root, "css");
    put_file(root, "css/s.css", "body{}"); /* 6 bytes */
    put_dir(root, "sub");
    put_file(root, "sub/index.htm", "<img src=../img/a.png><img src=b.png>");
    put_file(root, "sub/b.png", "1234567"); /* 7 bytes */
    put_file(root, "sub/Late.HTML", "<img src=b.png><!-- padding ------------><img src=c.png>");
    put_file(root, "notes.txt", "not html: <img src=img/a.png>");
    char link[2048];
    snprintf(link, sizeof link, "%s/sub/loop", root);
    assert_int_equal(symlink("..", link), 0); /* a loop back to the root */
    snprintf(link, sizeof link, "%s/sub/dangling", root);
    assert_int_equal(symlink("nowhere", link), 0);

    const char *h = "www.example.com";
    struct dm_catalog *c = dm_catalog_create(16 * MIB);
    char err[256];
    assert_int_equal(
        dm_catalog_preload_docroot(c, root, "WWW.example.com:8080", 0, err, sizeof err), 0);
    assert_string_equal(err, "");

    /* Sizes of every regular file. */
    assert_int_equal(dm_catalog_size(c, key(h, "/img/a.png"), 0), 10);
    assert_int_equal(dm_catalog_size(c, key(h, "/css/s.css"), 0), 6);
    assert_int_equal(dm_catalog_size(c, key(h, "/a%20b.png"), 0), 5);
    assert_int_equal(dm_catalog_size(c, key(h, "/sub/b.png"), 0), 7);
    assert_int_equal(dm_catalog_size(c, key(h, "/notes.txt"), 0), 29);
    assert_true(dm_catalog_size(c, key(h, "/index.html"), 0) > 100);

    struct dm_bal_object out[8];
    uint64_t total;
    assert_int_equal(dm_catalog_lookup(c, key(h, "/"), out, 8, COST, DEF, &total), 5);
    assert_int_equal(out[0].key, key(h, "/css/s.css"));
    assert_int_equal(out[3].key, key(h, "/a%20b.png"));
    assert_int_equal(total, 6 + DEF + 10 + 5 + DEF + 5 * COST);
    dm_catalog_destroy(c);

    /* Again with no scan limit and no host. */
    c = dm_catalog_create(16 * MIB);
    assert_int_equal(dm_catalog_preload_docroot(c, root, NULL, 0, err, sizeof err), 0);
    uint64_t want_root[5] = { key("", "/css/s.css"), key("", "/missing.js"), key("", "/img/a.png"),
                              key("", "/a%20b.png"), key("cdn.example.com", "/x.js") };
    uint64_t want_total = 6 + DEF + 10 + 5 + DEF + 5 * COST;
    const char *root_pages[2] = { "/index.html", "/" };
    for (int p = 0; p < 2; p++) {
        bool any = false;
        size_t n = dm_catalog_lookup_url(c, h, strlen(h), root_pages[p], strlen(root_pages[p]), out,
                                         8, COST, DEF, &total, &any);
        assert_int_equal(n, 5);
        assert_true(any);
        for (int i = 0; i < 5; i++) {
            assert_int_equal(out[i].key, want_root[i]);
        }
        assert_int_equal(total, want_total);
    }
    for (int p = 0; p < 2; p++) {
        const char *sub = p ? "/sub/" : "/sub/index.htm";
        assert_int_equal(dm_catalog_lookup(c, key("", sub), out, 8, COST, DEF, &total), 2);
        assert_int_equal(out[0].key, key("", "/img/a.png"));
        assert_int_equal(out[1].key, key("", "/sub/b.png"));
        assert_int_equal(total, 10 + 7 + 2 * COST);
    }
    assert_int_equal(dm_catalog_lookup(c, key("", "/sub/Late.HTML"), out, 8, COST, DEF, &total), 2);
    assert_int_equal(page_total(c, key("", "/notes.txt")), UINT64_MAX);
    assert_int_equal(page_total(c, key("", "/sub")), UINT64_MAX);
    /* The loop was not followed: nothing under /sub/loop/. */
    assert_int_equal(dm_catalog_size(c, key("", "/sub/loop/img/a.png"), 0), 0);
    assert_int_equal(stats(c).pages, 5);
    assert_int_equal(stats(c).objects, 8);
    dm_catalog_destroy(c);

    /* A limit cuts each page: Late.HTML's second image is past byte 40, and
     * index.html's first tag is still open there (a known page, no objects). */
    c = dm_catalog_create(16 * MIB);
    assert_int_equal(dm_catalog_preload_docroot(c, root, "", 40, err, sizeof err), 0);
    assert_int_equal(page_total(c, key("", "/index.html")), 0);
    assert_int_equal(dm_catalog_lookup(c, key("", "/sub/Late.HTML"), out, 8, COST, DEF, &total), 1);
    assert_int_equal(out[0].key, key("", "/sub/b.png"));
    dm_catalog_destroy(c);

    /* Errors: no such directory, not a directory. */
    c = dm_catalog_create(MIB);
    char bad[2048];
    snprintf(bad, sizeof bad, "%s/none", root);
    assert_int_equal(dm_catalog_preload_docroot(c, bad, NULL, 0, err, sizeof err), -ENOENT);
    char want[4300];
    snprintf(want, sizeof want, "%s: No such file or directory", bad);
    assert_string_equal(err, want);
    snprintf(bad, sizeof bad, "%s/notes.txt", root);
    assert_int_equal(dm_catalog_preload_docroot(c, bad, NULL, 0, err, sizeof err), -ENOTDIR);
    snprintf(want, sizeof want, "%s: not a directory", bad);
    assert_string_equal(err, want);
    dm_catalog_destroy(c);

    assert_int_equal(nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_ignores_host_case_port_and_fragment),
        cmocka_unit_test(test_key_spreads_similar_urls),
        cmocka_unit_test(test_lookup_totals_learned_sizes_plus_request_cost),
        cmocka_unit_test(test_unknown_page_gives_zero_and_counts_a_miss),
        cmocka_unit_test(test_page_with_no_objects_is_known_and_empty),
        cmocka_unit_test(test_size_of_unknown_object_is_the_default),
        cmocka_unit_test(test_sizes_are_smoothed_and_constant_sizes_kept_exactly),
        cmocka_unit_test(test_relearning_a_page_replaces_its_list),
        cmocka_unit_test(test_page_list_is_deduped_in_order_and_capped),
        cmocka_unit_test(test_lookup_url_falls_back_to_the_any_host_page),
        cmocka_unit_test(test_memory_cap_holds_and_lru_keeps_what_is_looked_up),
        cmocka_unit_test(test_tiny_cap_stores_nothing_and_stays_under),
        cmocka_unit_test(test_four_threads_learn_and_look_up_at_once),
        cmocka_unit_test(test_manifest_preloads_pages_and_sizes),
        cmocka_unit_test(test_manifest_errors_name_the_line_and_learn_nothing),
        cmocka_unit_test(test_docroot_preloads_pages_sizes_and_index_directories),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
