/*
 * Tests for proxy/route.c: first matching route wins, else the default pool;
 * the index by host (dm_routes_match) answers as the scan does.
 */
#include "dm_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/rng.h"
#include "conf/conf.h"
#include "proxy/route.h"

/* Route hosts and prefixes are char * in the config; the tests never free them. */
#define ROUTE(h, p, ix)                                                                            \
    {                                                                                              \
        .host = (char *)(h), .path_prefix = (char *)(p), .pool = (ix)                              \
    }

static size_t
route(const struct dm_conf *c, const char *host, const char *path)
{
    /* Exactly sized heap copies, so ASan sees any read past the given lengths. */
    size_t hl = strlen(host);
    size_t pl = strlen(path);
    char *h = malloc(hl > 0 ? hl : 1);
    char *p = malloc(pl > 0 ? pl : 1);
    assert_non_null(h);
    assert_non_null(p);
    memcpy(h, host, hl);
    memcpy(p, path, pl);
    size_t pool = dm_route_match(c, h, hl, p, pl);
    struct dm_routes *rs = dm_routes_build(c);
    assert_non_null(rs);
    assert_int_equal(dm_routes_match(rs, c, h, hl, p, pl), pool);
    dm_routes_free(rs);
    free(h);
    free(p);
    return pool;
}

static void
test_exact_host(void **state)
{
    (void)state;
    struct dm_conf_route r[] = { ROUTE("www.example.com", NULL, 1) };
    struct dm_conf c = { .routes = r, .nroutes = 1, .default_pool = 0 };
    assert_int_equal(route(&c, "www.example.com", "/"), 1);
    assert_int_equal(route(&c, "example.com", "/"), 0);
    assert_int_equal(route(&c, "www.example.co", "/"), 0);
    assert_int_equal(route(&c, "www.example.com.evil", "/"), 0);
    assert_int_equal(route(&c, "xwww.example.com", "/"), 0);
    assert_int_equal(route(&c, "", "/"), 0);
}

static void
test_host_compare_ignores_case(void **state)
{
    (void)state;
    struct dm_conf_route r[] = { ROUTE("Www.Example.COM", NULL, 1), ROUTE("*.Img.Net", NULL, 2) };
    struct dm_conf c = { .routes = r, .nroutes = 2, .default_pool = 0 };
    assert_int_equal(route(&c, "WWW.EXAMPLE.COM", "/"), 1);
    assert_int_equal(route(&c, "www.example.com", "/"), 1);
    assert_int_equal(route(&c, "A.IMG.NET", "/"), 2);
}

static void
test_port_in_host_is_ignored(void **state)
{
    (void)state;
    struct dm_conf_route r[] = {
        ROUTE("www.example.com", NULL, 1),
        ROUTE("*.example.org", NULL, 2),
        ROUTE("[::1]", NULL, 3),
    };
    struct dm_conf c = { .routes = r, .nroutes = 3, .default_pool = 0 };
    assert_int_equal(route(&c, "www.example.com:8080", "/"), 1);
    assert_int_equal(route(&c, "www.example.com:", "/"), 1);
    assert_int_equal(route(&c, "a.example.org:443", "/"), 2);
    assert_int_equal(route(&c, "[::1]:8080", "/"), 3);
    assert_int_equal(route(&c, "[::1]", "/"), 3);
    assert_int_equal(route(&c, "www.example.com.:80", "/"), 1);
    /* The port is not part of the name a wildcard sees. */
    assert_int_equal(route(&c, "example.org:1.example.org", "/"), 0);
}

static void
test_wildcard_matches_subdomains_only(void **state)
{
    (void)state;
    struct dm_conf_route r[] = { ROUTE("*.x.com", NULL, 1) };
    struct dm_conf c = { .routes = r, .nroutes = 1, .default_pool = 0 };
    assert_int_equal(route(&c, "a.x.com", "/"), 1);
    assert_int_equal(route(&c, "a.b.x.com", "/"), 1);
    assert_int_equal(route(&c, "x.com", "/"), 0);
    assert_int_equal(route(&c, ".x.com", "/"), 0);
    assert_int_equal(route(&c, "ax.com", "/"), 0);
    assert_int_equal(route(&c, "a.x.com.org", "/"), 0);
    assert_int_equal(route(&c, "com", "/"), 0);
}

static void
test_path_prefix(void **state)
{
    (void)state;
    struct dm_conf_route r[] = {
        ROUTE(NULL, "/api/", 1),
        ROUTE(NULL, "/static", 2),
    };
    struct dm_conf c = { .routes = r, .nroutes = 2, .default_pool = 0 };
    assert_int_equal(route(&c, "h", "/api/v1/users?x=1"), 1);
    assert_int_equal(route(&c, "h", "/api/"), 1);
    assert_int_equal(route(&c, "h", "/api"), 0);
    assert_int_equal(route(&c, "h", "/API/"), 0); /* paths are case-sensitive */
    assert_int_equal(route(&c, "h", "/static"), 2);
    assert_int_equal(route(&c, "h", "/static/a.png"), 2);
    assert_int_equal(route(&c, "h", "/"), 0);
    assert_int_equal(route(&c, "h", ""), 0);
}

static void
test_missing_or_root_prefix_matches_any_path(void **state)
{
    (void)state;
    struct dm_conf_route r[] = { ROUTE("a.com", "/", 1), ROUTE("b.com", NULL, 2) };
    struct dm_conf c = { .routes = r, .nroutes = 2, .default_pool = 0 };
    assert_int_equal(route(&c, "a.com", "/x"), 1);
    assert_int_equal(route(&c, "a.com", "*"), 1);
    assert_int_equal(route(&c, "a.com", ""), 1);
    assert_int_equal(route(&c, "b.com", "/y/z"), 2);
    assert_int_equal(route(&c, "b.com", "*"), 2);
}

static void
test_host_and_prefix_must_both_match(void **state)
{
    (void)state;
    struct dm_conf_route r[] = { ROUTE("a.com", "/api", 1) };
    struct dm_conf c = { .routes = r, .nroutes = 1, .default_pool = 2 };
    assert_int_equal(route(&c, "a.com", "/api/x"), 1);
    assert_int_equal(route(&c, "b.com", "/api/x"), 2);
    assert_int_equal(route(&c, "a.com", "/web"), 2);
}

static void
test_first_matching_route_wins(void **state)
{
    (void)state;
    struct dm_conf_route r[] = {
        ROUTE("a.com", "/api/v2", 1), ROUTE("*.com", "/api", 2), ROUTE("a.com", NULL, 3),
        ROUTE(NULL, "/api", 4),       ROUTE(NULL, NULL, 5),
    };
    struct dm_conf c = { .routes = r, .nroutes = 5, .default_pool = 0 };
    assert_int_equal(route(&c, "a.com", "/api/v2/x"), 1);
    assert_int_equal(route(&c, "a.com", "/api/v1"), 2);
    assert_int_equal(route(&c, "a.com", "/"), 3);
    assert_int_equal(route(&c, "a.org", "/api"), 4);
    assert_int_equal(route(&c, "a.org", "/"), 5);
    assert_int_equal(route(&c, "", "/"), 5);
}

static void
test_default_pool_when_nothing_matches(void **state)
{
    (void)state;
    struct dm_conf_route r[] = { ROUTE("a.com", NULL, 1) };
    struct dm_conf c = { .routes = r, .nroutes = 1, .default_pool = 3 };
    assert_int_equal(route(&c, "b.com", "/"), 3);
    assert_int_equal(route(&c, "", "/"), 3);
    assert_int_equal(dm_route_match(&c, NULL, 0, NULL, 0), 3);

    struct dm_conf none = { .default_pool = 2 };
    assert_int_equal(route(&none, "a.com", "/"), 2);
}

/* Random routes and requests over a few names: the index answers as the scan, every time. */
static void
test_index_agrees_with_the_scan(void **state)
{
    (void)state;
    static const char *const hosts[] = { NULL,    "a",     "A",  "b.a", "*.a",     "*.b.a",
                                         "*.B.A", "c.b.a", "*.", "*",   "x.c.b.a", "*.c.b.a" };
    static const char *const paths[] = { NULL, "/",   "/x",  "/x/y", "/y",
                                         "",   "/xy", "/x/", "/xyz", "x" };
    static const char *const asked[] = { "a",       "A",      "b.a",   "B.a:80", "c.b.a",
                                         "x.c.b.a", ".a",     "a.",    "a..",    "",
                                         "z",       "c.B.a.", "[::1]", "*",      "q.x.c.b.a" };
    static const char *const asked_paths[] = { "/", "/x",  "/x/y/z", "/y", "",
                                               "*", "/xy", "/xyzw",  "x",  "/x/" };
    struct dm_rng rng;
    dm_rng_init(&rng, 7);
    /* Up to 48 routes: lists longer than the index's scan bound (8) are indexed by path. */
    struct dm_conf_route r[48];
    for (int round = 0; round < 400; round++) {
        size_t n = (size_t)dm_rng_below(&rng, 48) + 1;
        for (size_t i = 0; i < n; i++) {
            r[i] = (struct dm_conf_route){
                .host = (char *)hosts[dm_rng_below(&rng, sizeof(hosts) / sizeof(hosts[0]))],
                .path_prefix = (char *)paths[dm_rng_below(&rng, sizeof(paths) / sizeof(paths[0]))],
                .pool = i + 1,
            };
        }
        struct dm_conf c = { .routes = r, .nroutes = n, .default_pool = 0 };
        for (size_t h = 0; h < sizeof(asked) / sizeof(asked[0]); h++) {
            for (size_t p = 0; p < sizeof(asked_paths) / sizeof(asked_paths[0]); p++) {
                (void)route(&c, asked[h], asked_paths[p]); /* asserts the two agree */
            }
        }
        struct dm_routes *rs = dm_routes_build(&c);
        assert_non_null(rs);
        assert_int_equal(dm_routes_match(rs, &c, NULL, 0, NULL, 0),
                         dm_route_match(&c, NULL, 0, NULL, 0));
        dm_routes_free(rs);
    }
}

/* Thousands of virtual hosts: each request finds its own. */
static void
test_many_hosts(void **state)
{
    (void)state;
    enum { N = 5000 };
    struct dm_conf_route *r = calloc(N + 1, sizeof(*r));
    char(*names)[32] = calloc(N, sizeof(*names));
    assert_non_null(r);
    assert_non_null(names);
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), i % 2 ? "h%zu.example" : "*.w%zu.example", i);
        r[i] = (struct dm_conf_route){ .host = names[i], .pool = i + 1 };
    }
    r[N] = (struct dm_conf_route){ .path_prefix = (char *)"/any", .pool = N + 1 };
    struct dm_conf c = { .routes = r, .nroutes = N + 1, .default_pool = 0 };
    struct dm_routes *rs = dm_routes_build(&c);
    assert_non_null(rs);
    char host[64];
    for (size_t i = 0; i < N; i++) {
        int len = snprintf(host, sizeof(host), i % 2 ? "H%zu.Example:80" : "a.w%zu.example", i);
        assert_int_equal(dm_routes_match(rs, &c, host, (size_t)len, "/any", 4), i + 1);
    }
    assert_int_equal(dm_routes_match(rs, &c, "w2.example", 10, "/any", 4), N + 1);
    assert_int_equal(dm_routes_match(rs, &c, "w2.example", 10, "/", 1), 0);
    dm_routes_free(rs);
    free(names);
    free(r);
}

/* Thousands of path routes, of every host and of one: each request finds its own. */
static void
test_many_paths(void **state)
{
    (void)state;
    enum { N = 5000 };
    struct dm_conf_route *r = calloc(2 * N + 1, sizeof(*r));
    char(*names)[32] = calloc(N, sizeof(*names));
    assert_non_null(r);
    assert_non_null(names);
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "/p%zu/", i);
        r[i] = (struct dm_conf_route){ .host = (char *)"h.example",
                                       .path_prefix = names[i],
                                       .pool = i + 1 };
        r[N + i] = (struct dm_conf_route){ .path_prefix = names[i], .pool = N + i + 1 };
    }
    r[2 * N] = (struct dm_conf_route){ .path_prefix = (char *)"/", .pool = 2 * N + 1 };
    struct dm_conf c = { .routes = r, .nroutes = 2 * N + 1, .default_pool = 0 };
    struct dm_routes *rs = dm_routes_build(&c);
    assert_non_null(rs);
    char path[64];
    for (size_t i = 0; i < N; i++) {
        int len = snprintf(path, sizeof(path), "/p%zu/x?y", i);
        assert_int_equal(dm_routes_match(rs, &c, "h.example", 9, path, (size_t)len), i + 1);
        assert_int_equal(dm_routes_match(rs, &c, "other", 5, path, (size_t)len), N + i + 1);
        assert_int_equal(dm_route_match(&c, "other", 5, path, (size_t)len), N + i + 1);
    }
    /* "/p1" is a prefix of no route's "/p1x/": the catch-all. */
    assert_int_equal(dm_routes_match(rs, &c, "h.example", 9, "/p1x/", 5), 2 * N + 1);
    assert_int_equal(dm_routes_match(rs, &c, "h.example", 9, "/p", 2), 2 * N + 1);
    dm_routes_free(rs);
    free(names);
    free(r);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_host),
        cmocka_unit_test(test_host_compare_ignores_case),
        cmocka_unit_test(test_port_in_host_is_ignored),
        cmocka_unit_test(test_wildcard_matches_subdomains_only),
        cmocka_unit_test(test_path_prefix),
        cmocka_unit_test(test_missing_or_root_prefix_matches_any_path),
        cmocka_unit_test(test_host_and_prefix_must_both_match),
        cmocka_unit_test(test_first_matching_route_wins),
        cmocka_unit_test(test_default_pool_when_nothing_matches),
        cmocka_unit_test(test_index_agrees_with_the_scan),
        cmocka_unit_test(test_many_hosts),
        cmocka_unit_test(test_many_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
