/*
 * Out-of-memory tests of parsers/catalog.c: dm_catalog_create(),
 * dm_catalog_learn_page(), dm_catalog_learn_size(), dm_catalog_lookup() and
 * dm_catalog_preload_manifest() (on a temporary file), with the n-th
 * allocation failing for n = 1, 2, ... until the call runs without a
 * failure. A failed create returns NULL, a failed learn learns nothing (the
 * page or size stays unknown), a failed preload returns -ENOMEM with "path:
 * out of memory" or 0 with each page either learned whole or not at all;
 * nothing leaks (the wrapper's count after destroy, and ASan's leak checker
 * at exit in a DM_SANITIZE build).
 *
 * glibc's own allocations (fopen(), getline()) are not failed (see the
 * wrapper's comment).
 */
#include "dm_test.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "balancers/balancer.h"
#include "parsers/catalog.h"

#include "dm_oom.h"

#define MAX_RUNS 100000
#define CAP      (16 * 1024 * 1024)
#define COST     100
#define DEF      777

static uint64_t
key(const char *path)
{
    return dm_catalog_key("", 0, path, strlen(path));
}

/* The page's object keys in *n, or false when the page is unknown. */
static bool
page_objects(struct dm_catalog *c, uint64_t page, uint64_t *keys, size_t *n)
{
    struct dm_bal_object out[DM_CATALOG_PAGE_MAX];
    struct dm_catalog_stats before, after;
    uint64_t total;
    dm_catalog_stats(c, &before);
    *n = dm_catalog_lookup(c, page, out, DM_CATALOG_PAGE_MAX, COST, DEF, &total);
    dm_catalog_stats(c, &after);
    for (size_t i = 0; i < *n; i++) {
        keys[i] = out[i].key;
    }
    return after.hits > before.hits;
}

static struct dm_catalog *
create_unarmed(void)
{
    struct dm_catalog *c = dm_catalog_create(CAP);
    assert_non_null(c);
    return c;
}

static void
destroy_and_check(struct dm_catalog *c, unsigned long n)
{
    dm_catalog_destroy(c);
    if (oom_live != 0) {
        fail_msg("allocation %lu failed: %ld blocks leaked", n, oom_live);
    }
}

static void
test_create_returns_null_on_each_failed_allocation(void **state)
{
    (void)state;
    unsigned long n;
    for (n = 1; n < MAX_RUNS; n++) {
        oom_arm(n);
        struct dm_catalog *c = dm_catalog_create(CAP);
        oom_disarm();
        if (!oom_failed) {
            assert_non_null(c);
            destroy_and_check(c, n);
            break;
        }
        assert_null(c);
        destroy_and_check(NULL, n);
    }
    assert_true(n > 1 && n < MAX_RUNS);
    print_message("create: %lu runs failed an allocation\n", n - 1);
}

/* Learns page (objects a, b, c, a) into a catalog that already holds
 * `others` pages, with the n-th allocation failing; then checks it. */
static void
learn_page_until_success(unsigned others, bool relearn)
{
    const uint64_t objs[] = { key("/a.png"), key("/b.css"), key("/c.js"), key("/a.png") };
    const uint64_t old[] = { key("/old.png") };
    uint64_t page = key("/index.html");
    unsigned long n;
    for (n = 1; n < MAX_RUNS; n++) {
        struct dm_catalog *c = create_unarmed();
        for (unsigned i = 0; i < others; i++) {
            char path[32];
            snprintf(path, sizeof path, "/p%u.html", i);
            dm_catalog_learn_page(c, key(path), objs, 2);
        }
        if (relearn) {
            dm_catalog_learn_page(c, page, old, 1);
        }
        oom_arm(n);
        dm_catalog_learn_page(c, page, objs, 4);
        oom_disarm();
        bool failed = oom_failed;

        uint64_t got[DM_CATALOG_PAGE_MAX];
        size_t k;
        bool known = page_objects(c, page, got, &k);
        if (!failed || known) {
            /* Learned whole: never the old list, never a part. */
            assert_true(known);
            assert_int_equal(k, 3);
            assert_int_equal(got[0], objs[0]);
            assert_int_equal(got[1], objs[1]);
            assert_int_equal(got[2], objs[2]);
        }
        if (failed) {
            /* "when memory runs out the page is forgotten instead" */
            assert_false(known);
        }
        for (unsigned i = 0; i < others; i++) {
            char path[32];
            snprintf(path, sizeof path, "/p%u.html", i);
            assert_true(page_objects(c, key(path), got, &k));
            assert_int_equal(k, 2);
        }
        destroy_and_check(c, n);
        if (!failed) {
            break;
        }
    }
    assert_true(n > 1 && n < MAX_RUNS);
    print_message("learn_page (%u other pages%s): %lu runs failed an allocation\n", others,
                  relearn ? ", relearned" : "", n - 1);
}

static void
test_learn_page_forgets_the_page_on_each_failed_allocation(void **state)
{
    (void)state;
    learn_page_until_success(0, false);
    learn_page_until_success(50, false);
    learn_page_until_success(0, true);
    learn_page_until_success(50, true);
}

static void
learn_size_until_success(bool relearn)
{
    uint64_t obj = key("/big.jpg");
    unsigned long n;
    for (n = 1; n < MAX_RUNS; n++) {
        struct dm_catalog *c = create_unarmed();
        dm_catalog_learn_size(c, key("/other.jpg"), 5);
        if (relearn) {
            dm_catalog_learn_size(c, obj, 40000);
        }
        oom_arm(n);
        dm_catalog_learn_size(c, obj, 40000);
        oom_disarm();
        uint64_t size = dm_catalog_size(c, obj, DEF);
        if (oom_failed && !relearn) {
            assert_int_equal(size, DEF); /* nothing learned */
        } else {
            assert_int_equal(size, 40000);
        }
        assert_int_equal(dm_catalog_size(c, key("/other.jpg"), DEF), 5);
        destroy_and_check(c, n);
        if (!oom_failed) {
            break;
        }
    }
    assert_true(n < MAX_RUNS);
    print_message("learn_size%s: %lu runs failed an allocation\n", relearn ? " (again)" : "",
                  n - 1);
}

static void
test_learn_size_learns_nothing_on_each_failed_allocation(void **state)
{
    (void)state;
    learn_size_until_success(false);
    learn_size_until_success(true);
}

static void
test_lookup_does_not_allocate(void **state)
{
    (void)state;
    const uint64_t objs[] = { key("/a.png"), key("/b.css") };
    struct dm_catalog *c = create_unarmed();
    dm_catalog_learn_page(c, key("/"), objs, 2);
    dm_catalog_learn_size(c, objs[0], 1000);
    unsigned long n;
    for (n = 1; n < MAX_RUNS; n++) {
        struct dm_bal_object out[4];
        uint64_t total;
        oom_arm(n);
        size_t k = dm_catalog_lookup(c, key("/"), out, 4, COST, DEF, &total);
        size_t miss = dm_catalog_lookup(c, key("/none"), out, 4, COST, DEF, &total);
        oom_disarm();
        assert_int_equal(miss, 0);
        assert_int_equal(k, 2);
        assert_int_equal(out[0].work, 1000 + COST);
        assert_int_equal(out[1].work, DEF + COST);
        if (!oom_failed) {
            break;
        }
    }
    assert_int_equal(n, 1); /* no allocation at all */
    destroy_and_check(c, n);
}

static const char manifest_text[] = "# two pages and a size\n"
                                    "page /index.html\n"
                                    "  /img/logo.png 12345\n"
                                    "  css/site.css\n"
                                    "  //cdn.example.com/a.js 9\n"
                                    "page /about.html\n"
                                    "  /img/logo.png\n"
                                    "size /img/big.jpg 40000\n";

/* Each page either whole or unknown, each size either right or unknown. */
static void
check_manifest_pages(struct dm_catalog *c, bool must_know)
{
    uint64_t got[DM_CATALOG_PAGE_MAX];
    size_t k;
    if (page_objects(c, key("/index.html"), got, &k) || must_know) {
        assert_int_equal(k, 3);
        assert_int_equal(got[0], key("/img/logo.png"));
        assert_int_equal(got[1], key("/css/site.css"));
        assert_int_equal(got[2], dm_catalog_key("cdn.example.com", 15, "/a.js", 5));
    }
    if (page_objects(c, key("/about.html"), got, &k) || must_know) {
        assert_int_equal(k, 1);
        assert_int_equal(got[0], key("/img/logo.png"));
    }
    uint64_t s = dm_catalog_size(c, key("/img/big.jpg"), DEF);
    assert_true(s == 40000 || (!must_know && s == DEF));
    s = dm_catalog_size(c, key("/img/logo.png"), DEF);
    assert_true(s == 12345 || (!must_know && s == DEF));
    s = dm_catalog_size(c, dm_catalog_key("cdn.example.com", 15, "/a.js", 5), DEF);
    assert_true(s == 9 || (!must_know && s == DEF));
}

static void
test_preload_manifest_fails_cleanly_on_each_failed_allocation(void **state)
{
    (void)state;
    char path[] = "/tmp/dm_catalog_oom_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, manifest_text, sizeof manifest_text - 1),
                     (ssize_t)(sizeof manifest_text - 1));
    close(fd);

    unsigned long n;
    unsigned long nomem = 0;
    for (n = 1; n < MAX_RUNS; n++) {
        char err[256];
        struct dm_catalog *c = create_unarmed();
        oom_arm(n);
        int rc = dm_catalog_preload_manifest(c, path, NULL, err, sizeof err);
        oom_disarm();
        if (!oom_failed) {
            assert_int_equal(rc, 0);
            check_manifest_pages(c, true);
            destroy_and_check(c, n);
            break;
        }
        if (rc == -ENOMEM) {
            char want[300];
            snprintf(want, sizeof want, "%s: out of memory", path);
            assert_string_equal(err, want);
            nomem++;
            /* Nothing learned. */
            uint64_t got[DM_CATALOG_PAGE_MAX];
            size_t k;
            assert_false(page_objects(c, key("/index.html"), got, &k));
            assert_int_equal(dm_catalog_size(c, key("/img/big.jpg"), DEF), DEF);
        } else {
            assert_int_equal(rc, 0); /* learns failed: those pages are forgotten */
            check_manifest_pages(c, false);
        }
        destroy_and_check(c, n);
    }
    unlink(path);
    assert_true(n > 1 && n < MAX_RUNS);
    assert_true(nomem > 0);
    print_message("preload_manifest: %lu runs failed an allocation (%lu -ENOMEM)\n", n - 1, nomem);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_returns_null_on_each_failed_allocation),
        cmocka_unit_test(test_learn_page_forgets_the_page_on_each_failed_allocation),
        cmocka_unit_test(test_learn_size_learns_nothing_on_each_failed_allocation),
        cmocka_unit_test(test_lookup_does_not_allocate),
        cmocka_unit_test(test_preload_manifest_fails_cleanly_on_each_failed_allocation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
