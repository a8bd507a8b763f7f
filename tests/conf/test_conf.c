/*
 * Tests of conf/: the bundled example, defaults, every class of error with its
 * exact "file:line:column: message", the value parsers and the quick start.
 * Configs are loaded from strings named "t.yaml"; line 1 is the first line.
 */
#include "dm_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "balancers/balancer.h"
#include "conf/conf.h"
#include "conf/internal.h"

/* A valid config of one pool "web" with one server: lines 1 to 6. */
#define LISTEN "listen: 127.0.0.1:8080\n"
#define POOL_WEB                                                                                   \
    "pools:\n"                                                                                     \
    "  web:\n"                                                                                     \
    "    servers:\n"                                                                               \
    "      - name: a\n"                                                                            \
    "        address: 127.0.0.1:9001\n"

static struct dm_conf *
load(const char *yaml, struct dm_conf_errors *err)
{
    return dm_conf_load_string(yaml, strlen(yaml), "t.yaml", err);
}

static void
print_errors(const struct dm_conf_errors *err)
{
    for (size_t i = 0; i < err->n; i++) {
        print_error("  got: %s\n", err->msg[i]);
    }
}

/* Loading yaml fails with exactly the messages in expected (NULL-terminated). */
static void
expect_errors(const char *yaml, const char *const *expected)
{
    struct dm_conf_errors err = { 0 };
    struct dm_conf *c = load(yaml, &err);
    size_t n = 0;

    while (expected[n] != NULL) {
        n++;
    }
    assert_null(c);
    if (err.n != n) {
        print_errors(&err);
    }
    assert_int_equal(err.n, n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(err.msg[i], expected[i]);
    }
    dm_conf_errors_fini(&err);
    assert_int_equal(err.n, 0);
    assert_null(err.msg);
}

static void
expect_error(const char *yaml, const char *expected)
{
    const char *const one[] = { expected, NULL };
    expect_errors(yaml, one);
}

/* Loads a config that must be valid. */
static struct dm_conf *
load_ok(const char *yaml)
{
    struct dm_conf_errors err = { 0 };
    struct dm_conf *c = load(yaml, &err);

    if (c == NULL) {
        print_errors(&err);
    }
    assert_non_null(c);
    assert_int_equal(err.n, 0);
    return c;
}

static uint16_t
port_of(const struct dm_conf_addr *a)
{
    if (a->sa.ss_family == AF_INET6) {
        return ntohs(((const struct sockaddr_in6 *)&a->sa)->sin6_port);
    }
    return ntohs(((const struct sockaddr_in *)&a->sa)->sin_port);
}

static void
assert_ipv4(const struct dm_conf_addr *a, const char *ip, uint16_t port)
{
    const struct sockaddr_in *sin = (const struct sockaddr_in *)&a->sa;
    char buf[INET_ADDRSTRLEN];

    assert_int_equal(a->sa.ss_family, AF_INET);
    assert_int_equal(a->salen, sizeof(struct sockaddr_in));
    assert_non_null(inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)));
    assert_string_equal(buf, ip);
    assert_int_equal(port_of(a), port);
}

/* ---- valid configs ---- */

static void
test_bundled_example_loads(void **state)
{
    const char *path = DM_TEST_DATA_DIR "/../conf/dimmer.yaml";
    struct dm_conf_errors err = { 0 };
    /* Its relative paths (the demo's agent key) are from the source tree, where
     * scripts/demo.sh runs it. */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(DM_TEST_DATA_DIR "/.."), 0);
    struct dm_conf *c = dm_conf_load(path, &err);
    assert_int_equal(chdir(cwd), 0);
    const struct dm_conf_pool *p;
    (void)state;

    if (c == NULL) {
        print_errors(&err);
    }
    assert_non_null(c);
    assert_string_equal(c->file, path);
    assert_int_equal(c->workers, 1);
    assert_int_equal(c->nlisteners, 1);
    assert_string_equal(c->listeners[0].text, "127.0.0.1:8080");
    assert_ipv4(&c->listeners[0], "127.0.0.1", 8080);
    assert_string_equal(c->admin.text, "127.0.0.1:9901");
    assert_ipv4(&c->admin, "127.0.0.1", 9901);

    assert_int_equal(c->timeouts.connect_ms, 2000);
    assert_int_equal(c->timeouts.client_header_ms, 10000);
    assert_int_equal(c->timeouts.client_keepalive_ms, 60000);
    assert_int_equal(c->timeouts.client_send_ms, 60000);
    assert_int_equal(c->timeouts.server_response_ms, 30000);
    assert_int_equal(c->timeouts.request_ms, 0);
    assert_int_equal(c->timeouts.shutdown_ms, 10000);
    assert_int_equal(c->timeouts.tunnel_ms, 3600000);
    assert_int_equal(c->limits.header_bytes, 16384);
    assert_int_equal(c->limits.header_count, 100);
    assert_int_equal(c->limits.body_bytes, UINT64_C(1) << 30);
    assert_int_equal(c->limits.max_conns, 10000);
    assert_int_equal(c->limits.max_conns_per_client, 0);
    assert_int_equal(c->limits.rate, 0);
    assert_int_equal(c->timeouts.client_body_ms, 10000);
    assert_int_equal(c->limits.body_min_rate, 500);
    assert_null(c->access_log);
    assert_null(c->error_log);
    assert_string_equal(c->metrics.text, "127.0.0.1:9902");
    assert_true(c->metrics_key_len > 0);

    assert_int_equal(c->npools, 1);
    p = &c->pools[0];
    assert_string_equal(p->name, "web");
    assert_string_equal(p->balance, "age");
    assert_true(p->affinity_connection);
    assert_true(p->age.weight > 0.099 && p->age.weight < 0.101);
    assert_int_equal(p->age.half_life_ms, 10000);
    assert_int_equal(p->age.request_cost, 8192);
    assert_int_equal(c->catalog.memory, 16u << 20);
    assert_int_equal(c->catalog.scan_limit, 256u << 10);
    assert_int_equal(p->draws, 2);
    assert_true(p->health.enabled);
    assert_string_equal(p->health.path, "/healthz");
    assert_int_equal(p->health.interval_ms, 1000);
    assert_int_equal(p->health.timeout_ms, 500);
    assert_int_equal(p->health.rise, 2);
    assert_int_equal(p->health.fall, 2);
    assert_int_equal(p->passive.max_fails, 3);
    assert_int_equal(p->passive.fail_timeout_ms, 10000);
    assert_true(p->power.enabled);
    assert_string_equal(p->power.policy, "boot-aware");
    assert_int_equal(p->power.boot_ms, 5000);
    assert_int_equal(p->nservers, 4);
    for (size_t i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof(name), "backend-%zu", 9001 + i);
        assert_string_equal(p->servers[i].name, name);
        assert_ipv4(&p->servers[i].addr, "127.0.0.1", (uint16_t)(9001 + i));
        assert_int_equal(p->servers[i].weight, 1);
        assert_int_equal(p->servers[i].capacity, 50);
        assert_int_equal(p->servers[i].power.wake, DM_ACT_HTTP);
        assert_int_equal(p->servers[i].power.sleep, DM_ACT_HTTP);
        assert_ipv4(&p->servers[i].power.control, "127.0.0.1", (uint16_t)(9101 + i));
    }
    assert_int_equal(c->nroutes, 1);
    assert_null(c->routes[0].host);
    assert_string_equal(c->routes[0].path_prefix, "/");
    assert_int_equal(c->routes[0].pool, 0);
    assert_int_equal(c->default_pool, 0);
    dm_conf_destroy(c);
}

static void
assert_catalog_defaults(const struct dm_conf_catalog *cat)
{
    assert_int_equal(cat->memory, 16 << 20);
    assert_int_equal(cat->scan_limit, 256 << 10);
    assert_true(cat->learn);
    assert_int_equal(cat->default_object_bytes, 10240);
    assert_null(cat->docroot);
    assert_null(cat->manifest);
    assert_null(cat->host);
}

static void
test_defaults_apply_when_keys_are_absent(void **state)
{
    struct dm_conf *c = load_ok(LISTEN POOL_WEB);
    const struct dm_conf_pool *p = &c->pools[0];
    (void)state;

    assert_string_equal(c->file, "t.yaml");
    assert_int_equal(c->workers, 0);
    assert_null(c->admin.text);
    assert_int_equal(c->timeouts.connect_ms, 5000);
    assert_int_equal(c->timeouts.client_header_ms, 10000);
    assert_int_equal(c->timeouts.client_keepalive_ms, 60000);
    assert_int_equal(c->timeouts.server_response_ms, 60000);
    assert_int_equal(c->timeouts.request_ms, 0);
    assert_int_equal(c->timeouts.shutdown_ms, 10000);
    assert_int_equal(c->limits.header_bytes, 16384);
    assert_int_equal(c->limits.header_count, 100);
    assert_int_equal(c->limits.body_bytes, 0);
    assert_int_equal(c->limits.max_conns, 10000);
    assert_null(c->access_log);
    assert_string_equal(c->access_log_format, "default");
    assert_null(c->error_log);
    assert_string_equal(p->balance, "roundrobin");
    assert_int_equal(p->draws, 2);
    assert_false(p->health.enabled);
    assert_string_equal(p->health.path, "/healthz");
    assert_int_equal(p->health.interval_ms, 2000);
    assert_int_equal(p->health.timeout_ms, 1000);
    assert_int_equal(p->health.rise, 2);
    assert_int_equal(p->health.fall, 3);
    assert_int_equal(p->passive.max_fails, 3);
    assert_int_equal(p->passive.fail_timeout_ms, 10000);
    assert_int_equal(p->servers[0].weight, 1);
    assert_int_equal(p->servers[0].capacity, 100);
    assert_int_equal(p->hash.key, DM_HASH_CLIENT);
    assert_null(p->hash.name);
    assert_true(p->hash.balance == 1.25);
    assert_true(p->age.weight == 0.1);
    assert_int_equal(p->age.half_life_ms, 10000);
    assert_int_equal(p->age.request_cost, 8192);
    assert_false(p->affinity_connection);
    assert_int_equal(c->nroutes, 0);
    assert_int_equal(c->default_pool, 0);
    assert_catalog_defaults(&c->catalog);
    dm_conf_destroy(c);
}

static void
test_rate_burst_defaults_to_rate(void **state)
{
    (void)state;
    struct dm_conf *c = load_ok(LISTEN POOL_WEB "limits: {rate: 7}\n");
    assert_int_equal(c->limits.rate, 7);
    assert_int_equal(c->limits.burst, 7);
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB "limits: {rate: 7, burst: 1}\n");
    assert_int_equal(c->limits.burst, 1);
    dm_conf_destroy(c);
}

static void
test_every_key_is_read(void **state)
{
    struct dm_conf *c =
        load_ok("workers: auto\n"
                "listen: ['[::1]:8081', '*:8082', ':8083']\n"
                "admin: localhost:9901\n"
                "timeouts: {connect: 1500, client_header: 1m, client_keepalive: 1h,"
                " server_response: 250ms, request: 30s, shutdown: 0, client_body: 3s, tunnel: 0}\n"
                "limits: {header_bytes: 8k, header_count: 50, body_bytes: 2M,"
                " max_conns: 7, body_min_rate: 2k, max_conns_per_client: 3, rate: 10, burst: 20}\n"
                "access_log: {path: /var/log/a.log, format: json}\n"
                "error_log: /var/log/e.log\n"
                "pools:\n"
                "  web:\n"
                "    servers: [{name: a, address: 127.0.0.1:1}]\n"
                "  api:\n"
                "    balance: leastconn\n"
                "    draws: 3\n"
                "    health_check:\n"
                "    passive: {max_fails: 0, fail_timeout: 1m}\n"
                "    servers:\n"
                "      - {name: x, address: '10.0.0.1:80', weight: 256, capacity: 7}\n"
                "      - {name: y, address: '10.0.0.2:80'}\n"
                "routes:\n"
                "  - {host: '*.example.com', path: /api, pool: api}\n"
                "  - {host: www.example.com, pool: web}\n"
                "  - {host: '*', pool: api}\n"
                "default_pool: api\n");
    const struct dm_conf_pool *api = &c->pools[1];
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&c->listeners[0].sa;
    (void)state;

    assert_int_equal(c->workers, 0);
    assert_int_equal(c->nlisteners, 3);
    assert_int_equal(v6->sin6_family, AF_INET6);
    assert_true(IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr));
    assert_int_equal(port_of(&c->listeners[0]), 8081);
    assert_ipv4(&c->listeners[1], "0.0.0.0", 8082);
    assert_ipv4(&c->listeners[2], "0.0.0.0", 8083);
    assert_string_equal(c->admin.text, "localhost:9901");
    assert_int_equal(port_of(&c->admin), 9901);
    assert_int_equal(c->timeouts.connect_ms, 1500);
    assert_int_equal(c->timeouts.client_header_ms, 60000);
    assert_int_equal(c->timeouts.client_keepalive_ms, 3600000);
    assert_int_equal(c->timeouts.server_response_ms, 250);
    assert_int_equal(c->timeouts.request_ms, 30000);
    assert_int_equal(c->timeouts.shutdown_ms, 0);
    assert_int_equal(c->timeouts.tunnel_ms, 0);
    assert_int_equal(c->limits.header_bytes, 8192);
    assert_int_equal(c->limits.header_count, 50);
    assert_int_equal(c->limits.body_bytes, 2 << 20);
    assert_int_equal(c->limits.max_conns, 7);
    assert_int_equal(c->limits.max_conns_per_client, 3);
    assert_int_equal(c->limits.rate, 10);
    assert_int_equal(c->limits.burst, 20);
    assert_int_equal(c->timeouts.client_body_ms, 3000);
    assert_int_equal(c->limits.body_min_rate, 2048);
    assert_string_equal(c->access_log, "/var/log/a.log");
    assert_string_equal(c->access_log_format, "json");
    assert_string_equal(c->error_log, "/var/log/e.log");

    assert_int_equal(c->npools, 2);
    assert_string_equal(c->pools[0].name, "web");
    assert_string_equal(api->name, "api");
    assert_string_equal(api->balance, "leastconn");
    assert_int_equal(api->draws, 3);
    assert_true(api->health.enabled); /* an empty health_check block turns checks on */
    assert_int_equal(api->health.interval_ms, 2000);
    assert_int_equal(api->passive.max_fails, 0);
    assert_int_equal(api->passive.fail_timeout_ms, 60000);
    assert_int_equal(api->nservers, 2);
    assert_int_equal(api->servers[0].weight, 256);
    assert_int_equal(api->servers[0].capacity, 7);
    assert_string_equal(api->servers[1].name, "y");
    assert_ipv4(&api->servers[1].addr, "10.0.0.2", 80);

    assert_int_equal(c->nroutes, 3);
    assert_string_equal(c->routes[0].host, "*.example.com");
    assert_string_equal(c->routes[0].path_prefix, "/api");
    assert_int_equal(c->routes[0].pool, 1);
    assert_string_equal(c->routes[1].host, "www.example.com");
    assert_null(c->routes[1].path_prefix);
    assert_int_equal(c->routes[1].pool, 0);
    assert_null(c->routes[2].host); /* "*" is any host */
    assert_int_equal(c->default_pool, 1);
    dm_conf_destroy(c);
}

static void
test_hash_age_and_affinity_keys_are_read(void **state)
{
    struct dm_conf *c = load_ok(LISTEN "pools:\n"
                                       "  h:\n"
                                       "    balance: hash\n"
                                       "    hash: {key: header, name: X-User-Id, balance: 1.5}\n"
                                       "    age: {weight: 0.25, half_life: 2m, request_cost: 4k}\n"
                                       "    affinity: connection\n"
                                       "    servers: [{name: a, address: '127.0.0.1:1'}]\n"
                                       "  k:\n"
                                       "    hash: {key: cookie, name: sid, balance: 1}\n"
                                       "    age: {weight: 0}\n"
                                       "    servers: [{name: a, address: '127.0.0.1:1'}]\n"
                                       "  u:\n"
                                       "    hash: {key: uri, balance: 3}\n"
                                       "    age:\n"
                                       "    affinity: request\n"
                                       "    servers: [{name: a, address: '127.0.0.1:1'}]\n"
                                       "  e:\n"
                                       "    hash:\n"
                                       "    age: {weight: '-0', half_life: 1}\n"
                                       "    servers: [{name: a, address: '127.0.0.1:1'}]\n");
    const struct dm_conf_pool *h = &c->pools[0], *k = &c->pools[1], *u = &c->pools[2];
    const struct dm_conf_pool *e = &c->pools[3];
    (void)state;

    assert_int_equal(h->hash.key, DM_HASH_HEADER);
    assert_string_equal(h->hash.name, "X-User-Id");
    assert_true(h->hash.balance == 1.5);
    assert_true(h->age.weight == 0.25);
    assert_int_equal(h->age.half_life_ms, 120000);
    assert_int_equal(h->age.request_cost, 4096);
    assert_true(h->affinity_connection);

    assert_int_equal(k->hash.key, DM_HASH_COOKIE);
    assert_string_equal(k->hash.name, "sid");
    assert_true(k->hash.balance == 1.0);
    assert_true(k->age.weight == 0.0);
    assert_int_equal(k->age.half_life_ms, 10000); /* the keys left out keep their defaults */
    assert_int_equal(k->age.request_cost, 8192);
    assert_false(k->affinity_connection);

    assert_int_equal(u->hash.key, DM_HASH_URI);
    assert_null(u->hash.name);
    assert_true(u->hash.balance == 3.0);
    assert_true(u->age.weight == 0.1); /* an empty age block is all defaults */
    assert_false(u->affinity_connection);

    /* An empty hash block is all defaults; "-0" reads as a plain 0. */
    assert_int_equal(e->hash.key, DM_HASH_CLIENT);
    assert_null(e->hash.name);
    assert_true(e->hash.balance == 1.25);
    assert_true(e->age.weight == 0.0 && !signbit(e->age.weight));
    assert_int_equal(e->age.half_life_ms, 1);
    dm_conf_destroy(c);
}

static void
test_numbers_are_read_strictly(void **state)
{
    static const struct {
        const char *text;
        double value;
    } good[] = {
        { "1.25", 1.25 }, { "2", 2.0 },  { "+1.5", 1.5 },    { "1e1", 10.0 },
        { "15E-1", 1.5 }, { "1.", 1.0 }, { "'1.75'", 1.75 },
    };
    char yaml[256];
    (void)state;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct dm_conf *c;
        snprintf(yaml, sizeof(yaml), LISTEN POOL_WEB "    hash: {balance: %s}\n", good[i].text);
        c = load_ok(yaml);
        assert_true(c->pools[0].hash.balance == good[i].value);
        dm_conf_destroy(c);
    }
}

static void
test_affinity_default_depends_on_balance(void **state)
{
    struct dm_conf *c;
    (void)state;

    c = load_ok(LISTEN POOL_WEB "    balance: leastconn\n");
    assert_false(c->pools[0].affinity_connection);
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB "    balance: hash\n");
    assert_false(c->pools[0].affinity_connection);
    dm_conf_destroy(c);
    /* The key may come before balance: the default is settled after both are read. */
    c = load_ok(LISTEN "pools:\n  web:\n    affinity: connection\n    balance: roundrobin\n"
                       "    servers: [{name: a, address: '127.0.0.1:1'}]\n");
    assert_true(c->pools[0].affinity_connection);
    dm_conf_destroy(c);

    /* "age" is checked against the registry like every policy: test it once it is there. */
    if (dm_balancer_find("age") == NULL) {
        return;
    }
    c = load_ok(LISTEN POOL_WEB "    balance: age\n");
    assert_true(c->pools[0].affinity_connection);
    dm_conf_destroy(c);
    c = load_ok(LISTEN "pools:\n  web:\n    affinity: request\n    balance: age\n"
                       "    servers: [{name: a, address: '127.0.0.1:1'}]\n");
    assert_false(c->pools[0].affinity_connection);
    dm_conf_destroy(c);
}

static void
test_catalog_keys_are_read(void **state)
{
    /* The test sources stand in for a docroot and a manifest: both must exist. */
    const char *docroot = DM_TEST_DATA_DIR "/conf";
    const char *manifest = DM_TEST_DATA_DIR "/conf/test_conf.c";
    char yaml[8192];
    struct dm_conf *c;
    (void)state;

    snprintf(yaml, sizeof(yaml),
             LISTEN POOL_WEB "catalog:\n"
                             "  memory: 64m\n"
                             "  scan_limit: 0\n"
                             "  learn: no\n"
                             "  default_object_bytes: 2k\n"
                             "  docroot: '%s'\n"
                             "  manifest: '%s'\n"
                             "  host: www.example.com\n",
             docroot, manifest);
    c = load_ok(yaml);
    assert_int_equal(c->catalog.memory, 64 << 20);
    assert_int_equal(c->catalog.scan_limit, 0);
    assert_false(c->catalog.learn);
    assert_int_equal(c->catalog.default_object_bytes, 2048);
    assert_string_equal(c->catalog.docroot, docroot);
    assert_string_equal(c->catalog.manifest, manifest);
    assert_string_equal(c->catalog.host, "www.example.com");
    dm_conf_destroy(c);

    c = load_ok(LISTEN POOL_WEB "catalog: {learn: yes, host: '[::1]'}\n");
    assert_true(c->catalog.learn);
    assert_string_equal(c->catalog.host, "[::1]");
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB "catalog: {learn: false}\n");
    assert_false(c->catalog.learn);
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB "catalog: {learn: true}\n");
    assert_true(c->catalog.learn);
    dm_conf_destroy(c);

    c = load_ok(LISTEN POOL_WEB "catalog:\n");
    assert_catalog_defaults(&c->catalog);
    dm_conf_destroy(c);
}

static void
test_access_log_forms(void **state)
{
    struct dm_conf *c;
    (void)state;

    c = load_ok(LISTEN POOL_WEB "access_log: off\n");
    assert_null(c->access_log);
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB "access_log: /tmp/access.log\n");
    assert_string_equal(c->access_log, "/tmp/access.log");
    assert_string_equal(c->access_log_format, "default");
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB "access_log: {format: json}\n");
    assert_string_equal(c->access_log, "-");
    assert_string_equal(c->access_log_format, "json");
    dm_conf_destroy(c);
}

static void
test_pools_may_come_after_routes(void **state)
{
    struct dm_conf *c = load_ok(LISTEN "routes: [{path: /s, pool: static}]\n"
                                       "default_pool: static\n" POOL_WEB "  static:\n"
                                       "    servers: [{name: s, address: '127.0.0.1:9009'}]\n");
    (void)state;

    assert_int_equal(c->routes[0].pool, 1);
    assert_int_equal(c->default_pool, 1);
    dm_conf_destroy(c);
}

static void
test_yaml_anchors_and_aliases_are_resolved(void **state)
{
    struct dm_conf *c;
    (void)state;

    c = load_ok(LISTEN "timeouts: {connect: &t 3s, shutdown: *t}\n" POOL_WEB);
    assert_int_equal(c->timeouts.shutdown_ms, 3000);
    dm_conf_destroy(c);
}

/* ---- errors ---- */

static void
test_yaml_syntax_errors_carry_libyaml_problem_and_mark(void **state)
{
    (void)state;
    expect_error("listen: a: b\n", "t.yaml:1:10: mapping values are not allowed in this context");
    expect_error("pools:\n  web: 1\n bad: 2\n",
                 "t.yaml:3:2: did not find expected key (while parsing a block mapping at line 1)");
    expect_error("listen: [a, b\n", "t.yaml:2:1: did not find expected ',' or ']' "
                                    "(while parsing a flow sequence at line 1)");
    expect_error("listen: \"127.0.0.1:80\n", "t.yaml:2:1: found unexpected end of stream "
                                             "(while scanning a quoted scalar at line 1)");
    expect_error("listen: *nowhere\n",
                 "t.yaml:1:9: found undefined alias; quote a value that starts with \"*\"");
    expect_error("listen: *:80\n",
                 "t.yaml:1:10: did not find expected alphabetic or numeric character "
                 "(while scanning an alias at line 1); quote a value that starts with \"*\"");
    expect_error("listen: \xff\n", "t.yaml:1:9: invalid leading UTF-8 octet (byte 0xFF)");
    /* Its column counts characters, as every other error's. */
    expect_error("listen: \"\xc3\xa9\xc3\xa9\xc3\xa9\xff\"\n",
                 "t.yaml:1:13: invalid leading UTF-8 octet (byte 0xFF)");
    /* A lone CR ends a line, as for libyaml. */
    expect_error("workers: 1\rlisten: \xff\n",
                 "t.yaml:2:9: invalid leading UTF-8 octet (byte 0xFF)");
}

static void
test_document_must_be_one_mapping(void **state)
{
    (void)state;
    expect_error("", "t.yaml:1:1: empty configuration (\"listen\" and \"pools\" are required)");
    expect_error("# nothing\n",
                 "t.yaml:1:1: empty configuration (\"listen\" and \"pools\" are required)");
    expect_error("- listen\n", "t.yaml:1:1: expected a mapping, got a list");
    expect_error(LISTEN POOL_WEB "---\n" LISTEN,
                 "t.yaml:8:1: a second YAML document (a config file holds one)");
}

static void
test_wrong_types_are_named(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_WEB "timeouts: 5s\n", "t.yaml:7:11: expected a mapping, got \"5s\"");
    expect_error(LISTEN POOL_WEB "        weight: abc\n",
                 "t.yaml:7:17: expected an integer, got \"abc\"");
    expect_error(LISTEN POOL_WEB "        weight: [1]\n",
                 "t.yaml:7:17: expected an integer, got a list");
    expect_error(LISTEN POOL_WEB "workers: many\n",
                 "t.yaml:7:10: expected an integer or \"auto\", got \"many\"");
    expect_error(LISTEN POOL_WEB "error_log:\n",
                 "t.yaml:7:11: expected a string, got an empty value");
    expect_errors("listen: {a: 1}\n" POOL_WEB,
                  (const char *const[]){ "t.yaml:1:9: listen: a listener needs an address",
                                         "t.yaml:1:10: unknown key \"a\"", NULL });
    expect_error("listen: [[1]]\n" POOL_WEB, "t.yaml:1:10: expected an address, got a list");
    expect_error(LISTEN "pools:\n  web:\n", "t.yaml:3:7: expected a mapping, got an empty value");
    expect_error(LISTEN "pools:\n  web:\n    servers: 127.0.0.1:9001\n",
                 "t.yaml:4:14: expected a list of servers, got \"127.0.0.1:9001\"");
    expect_error(LISTEN POOL_WEB "routes: {pool: web}\n",
                 "t.yaml:7:9: expected a list, got a mapping");
    /* A NUL cuts nothing short, whatever the key reads: a string, an integer, a boolean. */
    expect_error(LISTEN POOL_WEB "error_log: \"a\\0b\"\n",
                 "t.yaml:7:12: a NUL character in a key or value");
    expect_error(LISTEN POOL_WEB "limits: {max_conns: \"5\\0junk\"}\n",
                 "t.yaml:7:21: a NUL character in a key or value");
    expect_error(LISTEN POOL_WEB "catalog: {learn: \"yes\\0no\"}\n",
                 "t.yaml:7:18: a NUL character in a key or value");
    /* A log switched on is not a file named "on". */
    expect_error(LISTEN POOL_WEB "access_log: on\n",
                 "t.yaml:7:13: access_log: \"on\" is not a path: write the log's path (\"-\": "
                 "standard output), or off");
    expect_error(LISTEN POOL_WEB "access_log: {path: NO}\n",
                 "t.yaml:7:20: access_log: \"NO\" is not a path: write the log's path (\"-\": "
                 "standard output), or off");
    expect_error(LISTEN POOL_WEB "error_log: off\n",
                 "t.yaml:7:12: error_log: \"off\" is not a path: write the log's path (\"-\": "
                 "standard error)");
    expect_error(LISTEN POOL_WEB "error_log: yes\n",
                 "t.yaml:7:12: error_log: \"yes\" is not a path: write the log's path (\"-\": "
                 "standard error)");
    struct dm_conf *quoted = load_ok(LISTEN POOL_WEB "access_log: \"on\"\n");
    assert_string_equal(quoted->access_log, "on");
    dm_conf_destroy(quoted);
}

static void
test_missing_required_keys(void **state)
{
    (void)state;
    expect_error(POOL_WEB, "t.yaml:1:1: missing required key \"listen\"");
    expect_error("# comment\n" LISTEN, "t.yaml:2:1: missing required key \"pools\"");
    expect_error(LISTEN "pools:\n  web:\n    balance: roundrobin\n",
                 "t.yaml:4:5: pool \"web\": missing required key \"servers\"");
    expect_error(LISTEN "pools:\n  web:\n    servers:\n      - name: a\n",
                 "t.yaml:5:9: pool \"web\": server 1: missing required key \"address\"");
    expect_error(LISTEN POOL_WEB "      - address: 127.0.0.1:9002\n",
                 "t.yaml:7:9: pool \"web\": server 2: missing required key \"name\"");
    expect_error(LISTEN POOL_WEB "routes:\n  - path: /\n",
                 "t.yaml:8:5: route 1: missing required key \"pool\"");
}

static void
test_empty_lists_are_rejected(void **state)
{
    (void)state;
    expect_error("listen: []\n" POOL_WEB, "t.yaml:1:9: listen: expected at least one address");
    expect_error(LISTEN "pools: {}\n", "t.yaml:2:8: pools: expected at least one pool");
    expect_error(LISTEN "pools:\n  web:\n    servers: []\n",
                 "t.yaml:4:14: pool \"web\": expected at least one server");
}

static void
test_unknown_keys_suggest_the_nearest_known_key(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_WEB "timeout: {connect: 1s}\n",
                 "t.yaml:7:1: unknown key \"timeout\" (did you mean \"timeouts\"?)");
    expect_error(LISTEN POOL_WEB "Workers: 2\n",
                 "t.yaml:7:1: unknown key \"Workers\" (did you mean \"workers\"?)");
    expect_error(LISTEN POOL_WEB "    helth_check: {}\n",
                 "t.yaml:7:5: unknown key \"helth_check\" (did you mean \"health_check\"?)");
    expect_error(LISTEN POOL_WEB "        wieght: 2\n",
                 "t.yaml:7:9: unknown key \"wieght\" (did you mean \"weight\"?)");
    expect_error(LISTEN POOL_WEB "colour: red\n", "t.yaml:7:1: unknown key \"colour\"");
    expect_error(LISTEN POOL_WEB "limits: {bytes: 1}\n", "t.yaml:7:10: unknown key \"bytes\"");
    /* A merge key is named as such, not as a key that might be misspelt. */
    expect_errors(LISTEN POOL_WEB "t: &t {connect: 1s}\ntimeouts:\n  <<: *t\n",
                  (const char *const[]){ "t.yaml:7:1: unknown key \"t\"",
                                         "t.yaml:9:3: merge keys (<<) are not supported: write "
                                         "the keys out (an alias may stand for a whole value)",
                                         NULL });
    expect_error(LISTEN POOL_WEB "timeouts:\n  <<: {connect: 1s}\n",
                 "t.yaml:8:3: merge keys (<<) are not supported: write the keys out (an alias "
                 "may stand for a whole value)");
}

static void
test_duplicate_keys_and_names(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_WEB LISTEN, "t.yaml:7:1: duplicate key \"listen\" (first at line 1)");
    expect_error(LISTEN POOL_WEB "        address: 127.0.0.1:9002\n",
                 "t.yaml:7:9: duplicate key \"address\" (first at line 6)");
    expect_error(LISTEN POOL_WEB "  web:\n    servers: [{name: b, address: '127.0.0.1:2'}]\n",
                 "t.yaml:7:3: duplicate pool \"web\" (first at line 3)");
    expect_error(LISTEN POOL_WEB "      - name: a\n        address: 127.0.0.1:9002\n",
                 "t.yaml:7:15: pool \"web\": duplicate server \"a\" (first at line 5)");
    expect_error("listen: ['127.0.0.1:80', '*:81', '0.0.0.0:81']\n" POOL_WEB,
                 "t.yaml:1:34: duplicate listen address \"0.0.0.0:81\" (same as *:81)");
    expect_error(LISTEN "admin: 127.0.0.1:8080\n" POOL_WEB,
                 "t.yaml:2:8: admin address \"127.0.0.1:8080\" is also a listen address");
}

static void
test_bad_addresses(void **state)
{
    (void)state;
    expect_error("listen: 127.0.0.1:99999\n" POOL_WEB,
                 "t.yaml:1:9: bad address \"127.0.0.1:99999\" (port must be between 0 and 65535)");
    /* Port 0 is for listeners only: nothing can be connected to on it. */
    expect_error(LISTEN "pools: {web: {servers: [{name: a, address: '127.0.0.1:0'}]}}\n",
                 "t.yaml:2:44: bad address \"127.0.0.1:0\" (port must be between 1 and 65535)");
    expect_error("listen: 127.0.0.1\n" POOL_WEB,
                 "t.yaml:1:9: bad address \"127.0.0.1\" (missing port)");
    expect_error("listen: '127.0.0.1:'\n" POOL_WEB,
                 "t.yaml:1:9: bad address \"127.0.0.1:\" (missing port)");
    expect_error("listen: 300.0.0.1:80\n" POOL_WEB,
                 "t.yaml:1:9: bad address \"300.0.0.1:80\" (bad IPv4 address)");
    expect_error("listen: '::1:80'\n" POOL_WEB, "t.yaml:1:9: bad address \"::1:80\" "
                                                "(an IPv6 address needs brackets, as in [::1]:80)");
    expect_error(LISTEN POOL_WEB "admin: 'bad host:80'\n",
                 "t.yaml:7:8: bad address \"bad host:80\" (bad host name)");
}

/* Port 0 in listen and admin: the kernel picks a free port for each of them. */
static void
test_listeners_may_use_port_0(void **state)
{
    struct dm_conf_errors err = { 0 };
    struct dm_conf *c;
    (void)state;

    c = load_ok("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\n" POOL_WEB);
    assert_int_equal(c->nlisteners, 1);
    assert_string_equal(c->listeners[0].text, "127.0.0.1:0");
    assert_ipv4(&c->listeners[0], "127.0.0.1", 0);
    assert_string_equal(c->admin.text, "127.0.0.1:0");
    assert_ipv4(&c->admin, "127.0.0.1", 0);
    dm_conf_destroy(c);

    /* Two of them are two sockets on two ports, not a duplicate. */
    c = load_ok("listen: ['127.0.0.1:0', '127.0.0.1:0', '[::1]:0']\n" POOL_WEB);
    assert_int_equal(c->nlisteners, 3);
    assert_int_equal(port_of(&c->listeners[2]), 0);
    dm_conf_destroy(c);

    c = dm_conf_from_args("127.0.0.1:0", "127.0.0.1:9001", &err);
    assert_non_null(c);
    assert_ipv4(&c->listeners[0], "127.0.0.1", 0);
    dm_conf_destroy(c);
    assert_null(dm_conf_from_args("127.0.0.1:0", "127.0.0.1:0", &err));
    assert_int_equal(err.n, 1);
    assert_string_equal(err.msg[0], "--backend: bad address \"127.0.0.1:0\" "
                                    "(port must be between 1 and 65535)");
    dm_conf_errors_fini(&err);
}

static void
test_unknown_pools_and_policies(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_WEB "routes:\n  - {path: /, pool: wbe}\n",
                 "t.yaml:8:21: unknown pool \"wbe\" (did you mean \"web\"?)");
    expect_error(LISTEN POOL_WEB "routes:\n  - {path: /, pool: images}\n",
                 "t.yaml:8:21: unknown pool \"images\" (pools: web)");
    expect_error(LISTEN POOL_WEB "default_pool: api\n",
                 "t.yaml:7:15: unknown pool \"api\" (pools: web)");
    /* The list of known policies is the registry, whatever it holds. */
    char want[512];
    size_t n =
        (size_t)snprintf(want, sizeof(want), "t.yaml:7:14: unknown balance policy \"rr\" (known: ");
    for (size_t i = 0; dm_balancer_registry[i] != NULL; i++) {
        n += (size_t)snprintf(want + n, sizeof(want) - n, "%s%s", i ? ", " : "",
                              dm_balancer_registry[i]->name);
    }
    snprintf(want + n, sizeof(want) - n, ")");
    expect_error(LISTEN POOL_WEB "    balance: rr\n", want);
    expect_error(LISTEN POOL_WEB "access_log: {format: xml}\n",
                 "t.yaml:7:22: unknown access_log format \"xml\" (known: default, json, "
                 "combined)");
    expect_error(LISTEN POOL_WEB "log_level: loud\n",
                 "t.yaml:7:12: unknown log_level \"loud\" (known: error, warn, info, debug)");
    struct dm_conf *c = load_ok(LISTEN POOL_WEB "access_log: {format: combined}\n"
                                                "log_level: debug\n");
    assert_string_equal(c->access_log_format, "combined");
    assert_int_equal(c->log_level, 3);
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB);
    assert_int_equal(c->log_level, 2);
    assert_null(c->user);
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB "user: root\n");
    assert_string_equal(c->user, "root");
    assert_int_equal(c->uid, 0);
    assert_int_equal(c->gid, 0);
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB "user: \"54321\"\ngroup: root\n");
    assert_int_equal(c->uid, 54321);
    assert_int_equal(c->gid, 0);
    dm_conf_destroy(c);
    expect_error(LISTEN POOL_WEB "user: no-such-user-here\n",
                 "t.yaml:7:7: unknown user \"no-such-user-here\"");
    expect_error(LISTEN POOL_WEB "user: root\ngroup: no-such-group-here\n",
                 "t.yaml:8:8: unknown group \"no-such-group-here\"");
    expect_error(LISTEN POOL_WEB "group: root\n",
                 "t.yaml:7:8: group: needs user: (the user to run as)");
}

static void
test_bad_values(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_WEB "timeouts: {connect: 5x}\n",
                 "t.yaml:7:21: bad duration \"5x\" (use ms, s, m, h)");
    expect_error(LISTEN POOL_WEB "timeouts: {connect: 0}\n",
                 "t.yaml:7:21: connect must be more than 0");
    expect_error(LISTEN POOL_WEB "timeouts: {client_body: 1001h}\n",
                 "t.yaml:7:25: client_body must be at most 1000h");
    expect_error(LISTEN POOL_WEB "limits: {max_conns_per_client: -1}\n",
                 "t.yaml:7:32: max_conns_per_client must be between 0 and 10000000, got -1");
    expect_error(LISTEN POOL_WEB "limits: {max_conns_per_client: 10000001}\n",
                 "t.yaml:7:32: max_conns_per_client must be between 0 and 10000000, got "
                 "10000001");
    expect_error(LISTEN POOL_WEB "limits: {rate: -1}\n",
                 "t.yaml:7:16: rate must be between 0 and 1000000, got -1");
    expect_error(LISTEN POOL_WEB "limits: {rate: 1000001}\n",
                 "t.yaml:7:16: rate must be between 0 and 1000000, got 1000001");
    expect_error(LISTEN POOL_WEB "limits: {rate: 5, burst: 0}\n",
                 "t.yaml:7:26: burst must be between 1 and 10000000, got 0");
    expect_error(LISTEN POOL_WEB "limits: {burst: 10000001}\n",
                 "t.yaml:7:17: burst must be between 1 and 10000000, got 10000001");
    expect_error(LISTEN POOL_WEB "limits: {body_min_rate: 2g}\n",
                 "t.yaml:7:25: body_min_rate must be between 0 and 1g, got \"2g\"");
    expect_error(LISTEN POOL_WEB "limits: {body_bytes: 1t}\n",
                 "t.yaml:7:22: bad size \"1t\" (use a number of bytes, or k, m, g)");
    expect_error(LISTEN POOL_WEB "limits: {header_bytes: 1g}\n",
                 "t.yaml:7:24: header_bytes must be between 1 and 64m, got \"1g\"");
    expect_error(LISTEN POOL_WEB "    health_check: {path: healthz}\n",
                 "t.yaml:7:26: bad path \"healthz\" (must start with \"/\")");
    expect_error(LISTEN POOL_WEB "routes: [{path: '/a b', pool: web}]\n",
                 "t.yaml:7:17: bad path \"/a b\" (no spaces or control characters)");
    expect_error(LISTEN POOL_WEB "routes: [{host: 'a/b', pool: web}]\n",
                 "t.yaml:7:17: bad host \"a/b\" (a name, or \"*.\" and a suffix)");
}

static void
test_integers_out_of_range(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_WEB "        weight: 300\n",
                 "t.yaml:7:17: weight must be between 1 and 256, got 300");
    expect_error(LISTEN POOL_WEB "        capacity: -1\n",
                 "t.yaml:7:19: capacity must be between 1 and 1000000, got -1");
    expect_error(LISTEN POOL_WEB "workers: 0\n",
                 "t.yaml:7:10: workers must be between 1 and 1024, got 0");
    expect_error(LISTEN POOL_WEB "    draws: 99999999999999999999999\n",
                 "t.yaml:7:12: draws must be between 1 and 1000, got 99999999999999999999999");
}

static void
test_hash_errors(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_WEB "    hash: {key: url}\n",
                 "t.yaml:7:17: unknown hash key \"url\" (known: client, uri, header, cookie)");
    expect_error(
        LISTEN POOL_WEB "    hash: {key: header}\n",
        "t.yaml:7:11: pool \"web\": hash: missing required key \"name\" for key \"header\"");
    expect_error(
        LISTEN POOL_WEB "    hash:\n      key: cookie\n",
        "t.yaml:8:7: pool \"web\": hash: missing required key \"name\" for key \"cookie\"");
    expect_error(LISTEN POOL_WEB "    hash: {key: uri, name: x}\n",
                 "t.yaml:7:28: hash name is only for key header or cookie (key is \"uri\")");
    expect_error(LISTEN POOL_WEB "    hash: {name: X-Id}\n",
                 "t.yaml:7:18: hash name is only for key header or cookie (key is \"client\")");
    expect_error(LISTEN POOL_WEB "    hash: {key: header, name: 'X Id'}\n",
                 "t.yaml:7:31: bad header name \"X Id\" "
                 "(letters, digits and !#$%&'*+-.^_`|~ only)");
    expect_error(LISTEN POOL_WEB "    hash: {key: cookie, name: 'a=b'}\n",
                 "t.yaml:7:31: bad cookie name \"a=b\" "
                 "(letters, digits and !#$%&'*+-.^_`|~ only)");
    expect_error(LISTEN POOL_WEB "    hash: {key: header, name: [a]}\n",
                 "t.yaml:7:31: expected a string, got a list");
    expect_error(LISTEN POOL_WEB "    hash: {balance: 0.5}\n",
                 "t.yaml:7:21: balance must be at least 1, got 0.5");
    expect_error(LISTEN POOL_WEB "    hash: {balance: -2}\n",
                 "t.yaml:7:21: balance must be at least 1, got -2");
    expect_error(LISTEN POOL_WEB "    hash: {balance: 1e999}\n",
                 "t.yaml:7:21: balance is too large, got 1e999");
    expect_error(LISTEN POOL_WEB "    hash: {balance: }\n",
                 "t.yaml:7:21: expected a number, got an empty value");
    expect_error(LISTEN POOL_WEB "    hash: 1.25\n",
                 "t.yaml:7:11: expected a mapping, got \"1.25\"");
    expect_error(LISTEN POOL_WEB "    hash: {kye: uri}\n",
                 "t.yaml:7:12: unknown key \"kye\" (did you mean \"key\"?)");
    expect_error(LISTEN POOL_WEB "    hash: {key: uri, key: client}\n",
                 "t.yaml:7:22: duplicate key \"key\" (first at line 7)");
    expect_error(LISTEN POOL_WEB "    hash: {}\n    hash: {}\n",
                 "t.yaml:8:5: duplicate key \"hash\" (first at line 7)");
}

static void
test_numbers_that_are_not_numbers(void **state)
{
    static const char *const bad[] = {
        "abc", "1.5x", "0x2", "inf", "nan", "1e", ".", "+", "'1,5'", "' 2'", "'2 '", "1_000",
    };
    char yaml[256], want[256];
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *shown = bad[i];
        size_t len = strlen(shown);
        snprintf(yaml, sizeof(yaml), LISTEN POOL_WEB "    hash: {balance: %s}\n", bad[i]);
        /* A quoted scalar is shown without its YAML quotes. */
        if (shown[0] == '\'') {
            snprintf(want, sizeof(want), "t.yaml:7:21: expected a number, got \"%.*s\"",
                     (int)(len - 2), shown + 1);
        } else {
            snprintf(want, sizeof(want), "t.yaml:7:21: expected a number, got \"%s\"", shown);
        }
        expect_error(yaml, want);
    }
    expect_error(LISTEN POOL_WEB "    hash: {balance: [1]}\n",
                 "t.yaml:7:21: expected a number, got a list");
}

static void
test_age_and_affinity_errors(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_WEB "    age: {weight: -0.1}\n",
                 "t.yaml:7:19: weight must be at least 0, got -0.1");
    expect_error(LISTEN POOL_WEB "    age: {weight: heavy}\n",
                 "t.yaml:7:19: expected a number, got \"heavy\"");
    expect_error(LISTEN POOL_WEB "    age: {half_life: 0}\n",
                 "t.yaml:7:22: half_life must be more than 0");
    expect_error(LISTEN POOL_WEB "    age: {half_life: 1.5s}\n",
                 "t.yaml:7:22: bad duration \"1.5s\" (use ms, s, m, h)");
    expect_error(LISTEN POOL_WEB "    age: {request_cost: 8kb}\n",
                 "t.yaml:7:25: bad size \"8kb\" (use a number of bytes, or k, m, g)");
    expect_error(LISTEN POOL_WEB "    age: {halflife: 5s}\n",
                 "t.yaml:7:11: unknown key \"halflife\" (did you mean \"half_life\"?)");
    expect_error(LISTEN POOL_WEB "    age: [0.1]\n", "t.yaml:7:10: expected a mapping, got a list");
    expect_error(LISTEN POOL_WEB "    affinity: sticky\n",
                 "t.yaml:7:15: unknown affinity \"sticky\" (known: connection, request)");
    expect_error(LISTEN POOL_WEB "    affinity:\n",
                 "t.yaml:7:14: expected a string, got an empty value");
    expect_error(LISTEN POOL_WEB "    afinity: request\n",
                 "t.yaml:7:5: unknown key \"afinity\" (did you mean \"affinity\"?)");
}

static void
test_catalog_errors(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_WEB "catalog: {memory: 0}\n",
                 "t.yaml:7:19: memory must be at least 1, got \"0\"");
    expect_error(LISTEN POOL_WEB "catalog: {scan_limit: 1t}\n",
                 "t.yaml:7:23: bad size \"1t\" (use a number of bytes, or k, m, g)");
    expect_error(LISTEN POOL_WEB "catalog: {default_object_bytes: -1}\n",
                 "t.yaml:7:33: bad size \"-1\" (use a number of bytes, or k, m, g)");
    expect_error(LISTEN POOL_WEB "catalog: {learn: maybe}\n",
                 "t.yaml:7:18: expected true or false, got \"maybe\"");
    expect_error(LISTEN POOL_WEB "catalog: {learn: on}\n",
                 "t.yaml:7:18: expected true or false, got \"on\"");
    expect_error(LISTEN POOL_WEB "catalog: {learn: }\n",
                 "t.yaml:7:18: expected true or false, got an empty value");
    expect_error(LISTEN POOL_WEB "catalog:\n  docroot: /nonexistent/dimmer/www\n",
                 "t.yaml:8:12: docroot \"/nonexistent/dimmer/www\": No such file or directory");
    expect_error(LISTEN POOL_WEB "catalog: {docroot: /dev/null}\n",
                 "t.yaml:7:20: docroot \"/dev/null\": Not a directory");
    expect_error(LISTEN POOL_WEB "catalog: {docroot: }\n",
                 "t.yaml:7:20: expected a path, got an empty value");
    expect_error(LISTEN POOL_WEB "catalog: {manifest: /nonexistent/manifest}\n",
                 "t.yaml:7:21: manifest \"/nonexistent/manifest\": No such file or directory");
    expect_error(LISTEN POOL_WEB "catalog: {manifest: /}\n",
                 "t.yaml:7:21: manifest \"/\": Is a directory");
    expect_error(LISTEN POOL_WEB "catalog: {manifest: /dev/null}\n",
                 "t.yaml:7:21: manifest \"/dev/null\": not a regular file");
    expect_error(LISTEN POOL_WEB "catalog: {host: 'www.example.com:80'}\n",
                 "t.yaml:7:17: bad host \"www.example.com:80\" (a host name, with no port)");
    expect_error(LISTEN POOL_WEB "catalog: {host: 'a b'}\n",
                 "t.yaml:7:17: bad host \"a b\" (a host name, with no port)");
    expect_error(LISTEN POOL_WEB "catalog: {host: '[::1]:80'}\n",
                 "t.yaml:7:17: bad host \"[::1]:80\" (a host name, with no port)");
    expect_error(LISTEN POOL_WEB "catalog: {scanlimit: 1m}\n",
                 "t.yaml:7:11: unknown key \"scanlimit\" (did you mean \"scan_limit\"?)");
    expect_error(LISTEN POOL_WEB "catalog: {memory: 1m, memory: 2m}\n",
                 "t.yaml:7:23: duplicate key \"memory\" (first at line 7)");
    expect_error(LISTEN POOL_WEB "catalog: 16m\n", "t.yaml:7:10: expected a mapping, got \"16m\"");
    expect_error(LISTEN POOL_WEB "catalogue: {}\n",
                 "t.yaml:7:1: unknown key \"catalogue\" (did you mean \"catalog\"?)");
}

/* A file the loader cannot read is refused with the system's reason. */
static void
test_catalog_manifest_must_be_readable(void **state)
{
    char path[] = "/tmp/dimmer-conf-XXXXXX";
    char yaml[512], want[512];
    int fd = mkstemp(path);
    (void)state;

    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(chmod(path, 0), 0);
    snprintf(yaml, sizeof(yaml), LISTEN POOL_WEB "catalog: {manifest: '%s'}\n", path);
    if (geteuid() == 0) {
        /* root reads a file of mode 000: the check cannot fail here. */
        dm_conf_destroy(load_ok(yaml));
    } else {
        snprintf(want, sizeof(want), "t.yaml:7:21: manifest \"%s\": Permission denied", path);
        expect_error(yaml, want);
    }
    assert_int_equal(unlink(path), 0);
}

static void
test_several_errors_are_reported_in_file_order(void **state)
{
    const char *const expected[] = {
        "t.yaml:1:9: bad address \"127.0.0.1:65536\" (port must be between 0 and 65535)",
        "t.yaml:2:26: unknown pool \"nope\" (pools: web)",
        "t.yaml:3:14: pool \"web\": missing required key \"servers\"",
        "t.yaml:3:15: unknown key \"draw\" (did you mean \"draws\"?)",
        "t.yaml:5:1: unknown key \"limit\" (did you mean \"limits\"?)",
        NULL,
    };
    (void)state;
    /*
     * Routes are checked after pools, and a missing key is found after the
     * unknown ones, but the report is in file order.
     */
    expect_errors("listen: 127.0.0.1:65536\n"
                  "routes: [{path: /, pool: nope}]\n"
                  "pools: {web: {draw: 2,\n"
                  "    health_check: {}}}\n"
                  "limit: {}\n",
                  expected);
}

static void
test_unreadable_files(void **state)
{
    const char *missing = DM_TEST_DATA_DIR "/conf/no-such-file.yaml";
    struct dm_conf_errors err = { 0 };
    char expected[4096];
    (void)state;

    assert_null(dm_conf_load(missing, &err));
    assert_int_equal(err.n, 1);
    snprintf(expected, sizeof(expected), "%s: cannot open: No such file or directory", missing);
    assert_string_equal(err.msg[0], expected);

    /* The sink keeps collecting until it is freed. */
    assert_null(dm_conf_load(DM_TEST_DATA_DIR, &err));
    assert_int_equal(err.n, 2);
    snprintf(expected, sizeof(expected), "%s: cannot read: Is a directory", DM_TEST_DATA_DIR);
    assert_string_equal(err.msg[1], expected);
    dm_conf_errors_fini(&err);

    /*
     * Nor a FIFO, which would block the load until a writer came (a start,
     * or a reload on the control thread, which then heard no SIGTERM), nor
     * a device (/dev/zero never ends). The alarm fails the test that hangs.
     */
    char dir[] = "/tmp/dm-conf-fifo-XXXXXX", fifo[64];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof(fifo), "%s/dimmer.yaml", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(10);
    assert_null(dm_conf_load(fifo, &err));
    assert_null(dm_conf_load("/dev/zero", &err));
    alarm(0);
    unlink(fifo);
    rmdir(dir);
    assert_int_equal(err.n, 2);
    snprintf(expected, sizeof(expected), "%s: cannot read: not a regular file", fifo);
    assert_string_equal(err.msg[0], expected);
    assert_string_equal(err.msg[1], "/dev/zero: cannot read: not a regular file");
    dm_conf_errors_fini(&err);

    /* No sink: errors are dropped, the result is still NULL. */
    assert_null(dm_conf_load(missing, NULL));
    assert_null(dm_conf_load_string("x", 1, "t.yaml", NULL));
    dm_conf_destroy(NULL);
    dm_conf_errors_fini(NULL);
}

/* ---- value parsers ---- */

static void
test_parse_duration(void **state)
{
    static const struct {
        const char *text;
        uint64_t ms;
    } good[] = {
        { "0", 0 },       { "250", 250 },
        { "250ms", 250 }, { "5s", 5000 },
        { "2m", 120000 }, { "1h", 3600000 },
        { "007s", 7000 }, { "18446744073709551615", UINT64_MAX },
    };
    static const char *const bad[] = {
        "",
        "s",
        "5x",
        "5 s",
        " 5s",
        "5s ",
        "-5s",
        "+5s",
        "1.5s",
        "5S",
        "5sec",
        "1ms2",
        "18446744073709551616",
        "18446744073709552h",
    };
    uint64_t v;
    (void)state;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        v = 12345;
        assert_int_equal(dm_conf_parse_duration_ms(good[i].text, &v), 0);
        assert_int_equal(v, good[i].ms);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (dm_conf_parse_duration_ms(bad[i], &v) != -EINVAL) {
            fail_msg("duration \"%s\" was accepted", bad[i]);
        }
    }
    assert_int_equal(dm_conf_parse_duration_ms(NULL, &v), -EINVAL);
}

static void
test_parse_size(void **state)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {
        { "0", 0 },
        { "512", 512 },
        { "16k", 16384 },
        { "16K", 16384 },
        { "1m", 1 << 20 },
        { "2g", UINT64_C(2) << 30 },
        { "2G", UINT64_C(2) << 30 },
        { "17179869183g", UINT64_C(17179869183) << 30 },
    };
    static const char *const bad[] = {
        "", "k", "1t", "1kb", "1 k", "-1", "1.5m", "17179869184g", "99999999999999999999",
    };
    uint64_t v;
    (void)state;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        v = 12345;
        assert_int_equal(dm_conf_parse_size(good[i].text, &v), 0);
        assert_int_equal(v, good[i].bytes);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (dm_conf_parse_size(bad[i], &v) != -EINVAL) {
            fail_msg("size \"%s\" was accepted", bad[i]);
        }
    }
}

static void
test_parse_addr(void **state)
{
    static const char *const bad[] = {
        "",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:80x",
        "127.0.0.1:-1",
        "1.2.3:80",
        "::1:80",
        "[::1]",
        "[::1]80",
        "[::1",
        "[]:80",
        "[nothost]:80",
        "a b:80",
        "-x:80",
        "*:99999",
        ":",
    };
    struct dm_conf_addr a;
    (void)state;

    assert_int_equal(dm_conf_parse_addr("127.0.0.1:80", &a), 0);
    assert_string_equal(a.text, "127.0.0.1:80");
    assert_ipv4(&a, "127.0.0.1", 80);
    free(a.text);

    assert_int_equal(dm_conf_parse_addr("*:65535", &a), 0);
    assert_ipv4(&a, "0.0.0.0", 65535);
    free(a.text);
    assert_int_equal(dm_conf_parse_addr(":1", &a), 0);
    assert_ipv4(&a, "0.0.0.0", 1);
    free(a.text);

    assert_int_equal(dm_conf_parse_addr("[::1]:443", &a), 0);
    assert_int_equal(a.sa.ss_family, AF_INET6);
    assert_int_equal(a.salen, sizeof(struct sockaddr_in6));
    assert_true(IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&a.sa)->sin6_addr));
    assert_int_equal(port_of(&a), 443);
    free(a.text);

    /* Names resolve through getaddrinfo; /etc/hosts knows localhost. */
    assert_int_equal(dm_conf_parse_addr("localhost:8080", &a), 0);
    assert_true(a.sa.ss_family == AF_INET || a.sa.ss_family == AF_INET6);
    assert_int_equal(port_of(&a), 8080);
    free(a.text);

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (dm_conf_parse_addr(bad[i], &a) != -EINVAL) {
            fail_msg("address \"%s\" was accepted", bad[i]);
        }
        assert_null(a.text);
    }
}

static void
test_suggestions_need_a_close_match(void **state)
{
    static const char *const keys[] = { "workers", "listen", "timeouts", NULL, "pools" };
    (void)state;

    assert_int_equal(dm_conf_edit_distance("", ""), 0);
    assert_int_equal(dm_conf_edit_distance("web", "wbe"), 1);
    assert_int_equal(dm_conf_edit_distance("Listen", "listen"), 0);
    assert_int_equal(dm_conf_edit_distance("kitten", "sitting"), 3);
    assert_int_equal(dm_conf_edit_distance("", "abc"), 3);
    assert_string_equal(dm_conf_suggest("pool", keys, 5), "pools");
    assert_string_equal(dm_conf_suggest("lisetn", keys, 5), "listen");
    assert_null(dm_conf_suggest("xyz", keys, 5));
    assert_null(dm_conf_suggest("", keys, 5));
}

#define A10 "aaaaaaaaaa"
#define A59 A10 A10 A10 A10 A10 "aaaaaaaaa"

static void
test_messages_quote_values_safely(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_WEB "workers: \"a\\tb\\\"c\"\n",
                 "t.yaml:7:10: expected an integer or \"auto\", got \"a\\x09b\\\"c\"");
    /* Long values are cut after 60 bytes, but never inside a UTF-8 character. */
    expect_error(LISTEN POOL_WEB "workers: " A59 "\xc3\xa9\xc3\xa9\n",
                 "t.yaml:7:10: expected an integer or \"auto\", got \"" A59 "\xc3\xa9...\"");
}

/* The string loader reads exactly len bytes: no terminator needed (ASan checks). */
static void
test_load_string_reads_only_len_bytes(void **state)
{
    const char *text = LISTEN POOL_WEB "workers: 3\n";
    size_t len = strlen(text);
    char *copy = malloc(len);
    struct dm_conf_errors err = { 0 };
    struct dm_conf *c;
    (void)state;

    assert_non_null(copy);
    memcpy(copy, text, len);
    c = dm_conf_load_string(copy, len, "t.yaml", &err);
    assert_non_null(c);
    assert_int_equal(c->workers, 3);
    dm_conf_destroy(c);

    /* Cut inside the last value: "workers: " with no value. */
    assert_null(dm_conf_load_string(copy, len - 2, "t.yaml", &err));
    assert_int_equal(err.n, 1);
    assert_string_equal(err.msg[0],
                        "t.yaml:7:9: expected an integer or \"auto\", got an empty value");
    dm_conf_errors_fini(&err);

    /* A reader error at the very end of the buffer. */
    copy[len - 2] = (char)0xc3;
    assert_null(dm_conf_load_string(copy, len - 1, "t.yaml", &err));
    assert_int_equal(err.n, 1);
    dm_conf_errors_fini(&err);
    free(copy);
}

/* ---- quick start ---- */

static void
test_from_args_builds_one_pool(void **state)
{
    struct dm_conf_errors err = { 0 };
    struct dm_conf *c = dm_conf_from_args("127.0.0.1:8080", "127.0.0.1:9001, 127.0.0.1:9002", &err);
    const struct dm_conf_pool *p;
    (void)state;

    assert_non_null(c);
    assert_int_equal(err.n, 0);
    assert_null(c->file);
    assert_int_equal(c->nlisteners, 1);
    assert_ipv4(&c->listeners[0], "127.0.0.1", 8080);
    assert_int_equal(c->npools, 1);
    p = &c->pools[0];
    assert_string_equal(p->name, "default");
    assert_string_equal(p->balance, "roundrobin");
    assert_false(p->health.enabled);
    assert_int_equal(p->nservers, 2);
    assert_string_equal(p->servers[0].name, "s1");
    assert_string_equal(p->servers[1].name, "s2");
    assert_string_equal(p->servers[1].addr.text, "127.0.0.1:9002");
    assert_ipv4(&p->servers[1].addr, "127.0.0.1", 9002);
    assert_int_equal(p->servers[1].weight, 1);
    assert_int_equal(p->servers[1].capacity, 100);
    assert_int_equal(c->nroutes, 0);
    assert_int_equal(c->default_pool, 0);
    assert_int_equal(c->timeouts.connect_ms, 5000);
    assert_null(c->access_log);
    assert_int_equal(p->hash.key, DM_HASH_CLIENT);
    assert_null(p->hash.name);
    assert_true(p->hash.balance == 1.25);
    assert_true(p->age.weight == 0.1);
    assert_int_equal(p->age.half_life_ms, 10000);
    assert_int_equal(p->age.request_cost, 8192);
    assert_false(p->affinity_connection);
    assert_catalog_defaults(&c->catalog);
    dm_conf_destroy(c);
}

static void
test_from_args_reports_each_bad_flag(void **state)
{
    struct dm_conf_errors err = { 0 };
    (void)state;

    assert_null(dm_conf_from_args("127.0.0.1:8080", "x", &err));
    assert_int_equal(err.n, 1);
    assert_string_equal(err.msg[0], "--backend: bad address \"x\" (missing port)");
    dm_conf_errors_fini(&err);

    assert_null(dm_conf_from_args("8080", "127.0.0.1:1,,127.0.0.1:99999", &err));
    assert_int_equal(err.n, 3);
    assert_string_equal(err.msg[0], "--listen: bad address \"8080\" (missing port)");
    assert_string_equal(err.msg[1], "--backend: bad address \"\" (expected host:port)");
    assert_string_equal(err.msg[2], "--backend: bad address \"127.0.0.1:99999\" "
                                    "(port must be between 1 and 65535)");
    dm_conf_errors_fini(&err);

    assert_null(dm_conf_from_args(NULL, NULL, &err));
    assert_int_equal(err.n, 2);
    assert_string_equal(err.msg[0], "--listen: missing address");
    assert_string_equal(err.msg[1], "--backend: missing address");
    dm_conf_errors_fini(&err);
}

/* ---- power ---- */

#define POWER_POOL(block, server)                                                                  \
    "pools:\n"                                                                                     \
    "  web:\n"                                                                                     \
    "    power:\n" block "    servers:\n"                                                          \
    "      - name: a\n"                                                                            \
    "        address: 127.0.0.1:9001\n" server

static void
test_power_keys_are_read(void **state)
{
    (void)state;
    char key[] = "/tmp/dimmer-conf-key-XXXXXX";
    int fd = mkstemp(key);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "k3y\n", 4), 4);
    close(fd);
    char yaml[4096];
    snprintf(yaml, sizeof(yaml),
             LISTEN
             "power:\n  metrics: 127.0.0.1:0\n  key_file: %s\n  report_max_age: 2s\n"
             "  admin_token_file: %s\n" POWER_POOL(
                 "      policy: multi\n      period: 3s\n      trend_interval: 500ms\n"
                 "      min_active: 0\n      min_change_interval: 4s\n      t1: 55\n"
                 "      step: 4\n      tcp_max: 150\n      full_w: 90\n"
                 "      weights: {multi: [0.3, 0.2, -0.2, -0.3], little_spare: "
                 "[0.02, 0.01, -0.2, -0.3]}\n      tier_low: 50\n      tier_high: 80\n"
                 "      boot_time: 2s\n      boot_timeout: 9s\n      drain_timeout: 8s\n"
                 "      delay_off: 7s\n      history: 10m\n      margin: 0.5\n      slow_start: 0\n"
                 "      hold_timeout: 6s\n      hold_queue: 5\n      wake: first\n"
                 "      sleep: last\n      tcp: agent\n",
                 "        power:\n          idle_w: 30\n          mac: 02:00:00:00:00:0A\n"
                 "          wol_to: 127.0.0.1:4009\n          control: 127.0.0.1:9101\n"
                 "          control_token_file: %s\n"
                 "          agent: web-a\n          keep_on: yes\n"),
             key, key, key);
    struct dm_conf *c = load_ok(yaml);
    /* A control token needs a control to go to. */
    snprintf(yaml, sizeof(yaml),
             LISTEN POWER_POOL("      policy: multi\n",
                               "        power: {sleep_command: x, control_token_file: %s}\n"),
             key);
    expect_error(yaml, "t.yaml:9:55: control_token_file: there is no \"control\"");
    unlink(key);
    assert_int_equal(c->metrics_key_len, 3);
    assert_memory_equal(c->metrics_key, "k3y", 3);
    assert_string_equal(c->admin_token, "k3y");
    assert_int_equal(c->report_max_age_ms, 2000);
    assert_non_null(c->metrics.text);
    const struct dm_conf_power *pw = &c->pools[0].power;
    assert_true(pw->enabled);
    assert_string_equal(pw->policy, "multi");
    assert_int_equal(pw->period_ms, 3000);
    assert_int_equal(pw->trend_interval_ms, 500);
    assert_int_equal(pw->min_active, 0);
    assert_int_equal(pw->min_change_ms, 4000);
    assert_true(pw->t1_w == 55 && pw->step_w == 4 && pw->tcp_max == 150 && pw->full_w == 90);
    assert_true(pw->normal.alpha == 0.3 && pw->normal.neg_alpha == -0.3);
    assert_true(pw->tiers[2].alpha == 0.02 && pw->tiers[0].alpha == 0.15);
    assert_true(pw->tier_low_w == 50 && pw->tier_high_w == 80);
    assert_int_equal(pw->boot_ms, 2000);
    assert_int_equal(pw->boot_timeout_ms, 9000);
    assert_int_equal(pw->drain_timeout_ms, 8000);
    assert_int_equal(pw->delay_off_ms, 7000);
    assert_int_equal(pw->history_ms, 600000);
    assert_true(pw->margin == 0.5);
    assert_int_equal(pw->slow_start_ms, 0);
    assert_int_equal(pw->hold_timeout_ms, 6000);
    assert_int_equal(pw->hold_queue, 5);
    assert_int_equal(pw->wake_rule, DM_WAKE_FIRST);
    assert_int_equal(pw->sleep_rule, DM_SLEEP_LAST);
    assert_int_equal(pw->tcp_source, DM_TCP_AGENT);
    const struct dm_conf_server_power *sp = &c->pools[0].servers[0].power;
    assert_true(sp->idle_w == 30 && sp->full_w == 90 && sp->booting_w == 90 && sp->asleep_w == 3);
    assert_int_equal(sp->wake, DM_ACT_WOL);
    assert_int_equal(sp->sleep, DM_ACT_HTTP);
    assert_true(sp->has_mac && sp->mac[5] == 0x0a);
    assert_ipv4(&sp->wol_to, "127.0.0.1", 4009);
    assert_ipv4(&sp->control, "127.0.0.1", 9101);
    assert_string_equal(sp->control_token, "k3y");
    assert_string_equal(sp->agent, "web-a");
    assert_true(sp->keep_on);
    dm_conf_destroy(c);

    /* Defaults: boot-aware, the seed's numbers, the agent named as the server. */
    c = load_ok(
        LISTEN POWER_POOL("      period: 5s\n", "        power: {wake_command: 'x {host}'}\n"));
    pw = &c->pools[0].power;
    assert_string_equal(pw->policy, "boot-aware");
    assert_true(pw->t1_w == 60 && pw->step_w == 5 && pw->tcp_max == 200 && pw->full_w == 70);
    assert_false(pw->tcp_max_auto);
    assert_int_equal(pw->boot_ms, 7000);
    assert_int_equal(pw->min_active, 1);
    sp = &c->pools[0].servers[0].power;
    assert_int_equal(sp->wake, DM_ACT_COMMAND);
    assert_int_equal(sp->sleep, DM_ACT_NONE);
    assert_string_equal(sp->agent, "a");
    assert_true(sp->full_w == 70 && sp->idle_w == 40);
    dm_conf_destroy(c);

    /* tcp_max: auto learns it, from the seed's 200. */
    c = load_ok(LISTEN POWER_POOL("      tcp_max: auto\n", ""));
    assert_true(c->pools[0].power.tcp_max_auto && c->pools[0].power.tcp_max == 200);
    dm_conf_destroy(c);

    /* No power block, or power: off: not managed. */
    c = load_ok(LISTEN POOL_WEB);
    assert_false(c->pools[0].power.enabled);
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB "    power: off\n");
    assert_false(c->pools[0].power.enabled);
    dm_conf_destroy(c);
}

static void
test_power_errors(void **state)
{
    (void)state;
    expect_error(LISTEN POWER_POOL("      policy: mulit\n", ""),
                 "t.yaml:5:15: unknown power policy \"mulit\" (did you mean \"multi\"? known: "
                 "always-on, single, dual, multi, flexible, boot-aware)");
    expect_error(LISTEN POWER_POOL("      weights: {multi: [0.1, 0.2, -0.1, -0.2]}\n", ""),
                 "t.yaml:5:24: multi: expected alpha > beta > 0 > -beta > -alpha");
    expect_error(LISTEN POWER_POOL("      weights: {multi: [1e308, 0.2, -0.2, -0.5]}\n", ""),
                 "t.yaml:5:24: multi: each weight between -1 and 1 (a share of tcp_max x live "
                 "servers)");
    expect_error(LISTEN POWER_POOL("      weights: {normal: [0.1, 0.05]}\n", ""),
                 "t.yaml:5:25: normal: expected four numbers [alpha, beta, -beta, -alpha], got 2");
    expect_error(LISTEN POWER_POOL("      perod: 5s\n", ""),
                 "t.yaml:5:7: unknown key \"perod\" (did you mean \"period\"?)");
    expect_error(LISTEN POWER_POOL("      tcp_max: automatic\n", ""),
                 "t.yaml:5:16: expected a number or auto, got \"automatic\"");
    expect_error(LISTEN POWER_POOL("      tcp_max: 0\n", ""),
                 "t.yaml:5:16: tcp_max must be at least 0.001, got 0");
    /* Watts are bounded: sums of them stay finite (/power was "inf"). */
    expect_error(LISTEN POWER_POOL("      full_w: 1e308\n", ""),
                 "t.yaml:5:15: full_w must be at most 100000, got 1e308");
    expect_error(LISTEN POWER_POOL("", "        power: {idle_w: 1e308}\n"),
                 "t.yaml:8:25: idle_w must be at most 100000, got 1e308");
    /* A server's power grows with its use: asleep <= idle <= full. */
    static const char *const watts[][2] = {
        { LISTEN POWER_POOL("", "        power: {idle_w: 90, full_w: 70}\n"),
          "t.yaml:8:16: pool \"web\": server \"a\": idle_w 90 is above full_w 70" },
        { LISTEN POWER_POOL("      full_w: 30\n", ""),
          "t.yaml:7:9: pool \"web\": server \"a\": idle_w 40 is above full_w 30 (the pool's)" },
        { LISTEN POWER_POOL("", "        power: {idle_w: 20, asleep_w: 21}\n"),
          "t.yaml:8:16: pool \"web\": server \"a\": asleep_w 21 is above idle_w 20" },
    };
    for (size_t i = 0; i < sizeof(watts) / sizeof(watts[0]); i++) {
        expect_error(watts[i][0], watts[i][1]);
    }
    expect_error(LISTEN POWER_POOL("      margin: 1e300\n", ""),
                 "t.yaml:5:15: margin must be at most 100, got 1e300");
    expect_error(LISTEN POWER_POOL("      period: 0\n", ""),
                 "t.yaml:5:15: period must be more than 0");
    expect_error(LISTEN POWER_POOL("      tier_low: 70\n      tier_high: 60\n", ""),
                 "t.yaml:5:7: pool \"web\": power: tier_low (70) is above tier_high (60)");
    expect_error(LISTEN POWER_POOL("      wake: random\n", ""),
                 "t.yaml:5:13: unknown wake rule \"random\" (known: most-efficient, first)");
    expect_error(LISTEN POWER_POOL("", "        power: {wake: wol}\n"),
                 "t.yaml:8:16: pool \"web\": server \"a\": wake: wol needs \"mac\"");
    expect_error(LISTEN POWER_POOL("", "        power: {mac: '02:00:00:00:00'}\n"),
                 "t.yaml:8:22: bad MAC address \"02:00:00:00:00\" (want aa:bb:cc:dd:ee:ff)");
    expect_error(LISTEN POWER_POOL("", "        power: {sleep: wol, mac: '02:00:00:00:00:01'}\n"),
                 "t.yaml:8:24: sleep: wol can only wake (use http or command)");
    expect_error(LISTEN POWER_POOL("", "        power: {sleep: http}\n"),
                 "t.yaml:8:16: pool \"web\": server \"a\": http actuator needs \"control\"");
    expect_error(LISTEN POWER_POOL("", "        power: {agent: 'a b'}\n"),
                 "t.yaml:8:24: bad agent name \"a b\" (1 to 63 of A-Z a-z 0-9 . _ -)");
    expect_error(LISTEN "power: {metrics: 127.0.0.1:0}\n" POOL_WEB,
                 "t.yaml:2:8: power: metrics needs key_file (reports are signed with it)");
    /* Command templates: placeholders known, {mac} with a mac, {name} safe for a shell. */
    expect_error(LISTEN POWER_POOL("", "        power: {wake_command: 'wake {hostname}'}\n"),
                 "t.yaml:8:31: wake_command: unknown placeholder \"{hostname}\" (host, port, "
                 "name, mac)");
    expect_error(LISTEN POWER_POOL("", "        power: {sleep_command: 'x {mac}'}\n"),
                 "t.yaml:8:32: sleep_command: {mac}, but the server has no \"mac\"");
    expect_error(LISTEN "pools:\n  web:\n    power: {}\n    servers:\n"
                        "      - name: 'a;reboot'\n        address: 127.0.0.1:9001\n"
                        "        power: {wake_command: 'ssh {host} wake {name}'}\n",
                 "t.yaml:8:31: wake_command: {name}, but the server's name \"a;reboot\" has "
                 "characters a shell would read (use A-Z a-z 0-9 . _ - : @ + = , /)");
    dm_conf_destroy(load_ok(LISTEN POWER_POOL(
        "", "        power: {mac: '02:00:00:00:00:01', wake: command,\n"
            "                wake_command: 'etherwake {mac} # ${HOME} {a,b} {name}:{port}'}\n")));
    expect_error(LISTEN "power: {key_file: /nonexistent/k}\n" POOL_WEB,
                 "t.yaml:2:19: key_file \"/nonexistent/k\": No such file or directory");
    expect_error(LISTEN "power: {key_file: /}\n" POOL_WEB,
                 "t.yaml:2:19: key_file \"/\": Is a directory");
    /* A FIFO would block the load (and a reload's control thread) until a writer came. */
    char dir[] = "/tmp/dm-conf-fifo-XXXXXX", fifo[64], yaml[256];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof(fifo), "%s/k", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(yaml, sizeof(yaml), LISTEN "power: {key_file: %s}\n" POOL_WEB, fifo);
    char want[160];
    snprintf(want, sizeof(want), "t.yaml:2:19: key_file \"%s\": not a regular file", fifo);
    expect_error(yaml, want);
    unlink(fifo);
    rmdir(dir);
    /* A power-managed pool's servers are its own. */
    expect_error(
        LISTEN POWER_POOL(
            "      policy: multi\n",
            "") "  other:\n    servers:\n      - name: b\n        address: 127.0.0.1:9001\n",
        "t.yaml:11:9: pool \"web\": server \"a\" (127.0.0.1:9001) is also server \"b\" of "
        "pool \"other\": a power-managed pool's servers must be its own");
    /* Two of power pools: the first named first, as always. */
    expect_error(LISTEN POWER_POOL("      policy: multi\n",
                                   "      - name: b\n        address: 127.0.0.1:9001\n"),
                 "t.yaml:9:9: pool \"web\": server \"a\" (127.0.0.1:9001) is also server \"b\" of "
                 "pool \"web\": a power-managed pool's servers must be its own");
    /* Each server that breaks a rule is named once, against the first it
     * clashes with (not once for every pair: n servers at one address were
     * n(n-1)/2 messages, and as much time); a server of a plain pool before
     * the power pool's is one of them. Each is reported where the file has
     * the later server of the two. */
    const char *const clash[] = {
        "t.yaml:10:9: pool \"web\": server \"a\" (127.0.0.1:9001) is also server \"p\" of "
        "pool \"plain\": a power-managed pool's servers must be its own",
        "t.yaml:11:9: pool \"web\": server \"b\" (127.0.0.1:9001) is also server \"p\" of "
        "pool \"plain\": a power-managed pool's servers must be its own",
        "t.yaml:12:9: pool \"web\": server \"c\" (127.0.0.1:9001) is also server \"p\" of "
        "pool \"plain\": a power-managed pool's servers must be its own",
        "t.yaml:12:9: agent name \"x\" is used by server \"a\" and \"c\"",
        NULL,
    };
    expect_errors(LISTEN "pools:\n"
                         "  plain:\n    servers:\n      - {name: p, address: 127.0.0.1:9001}\n"
                         "      - {name: q, address: 127.0.0.1:9002}\n"
                         "  web:\n    power: {}\n    servers:\n"
                         "      - {name: a, address: 127.0.0.1:9001, power: {agent: x}}\n"
                         "      - {name: b, address: 127.0.0.1:9001, power: {agent: y}}\n"
                         "      - {name: c, address: 127.0.0.1:9001, power: {agent: x}}\n"
                         "      - {name: d, address: 127.0.0.1:9003}\n",
                  clash);
}

/* ---- what a small file may cost ---- */

/* Appends to a growing text (a config of thousands of items). */
static void
grow(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char item[512];
    int n = vsnprintf(item, sizeof(item), fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < sizeof(item));
    if (*len + (size_t)n + 1 > *cap) {
        *cap = (*len + (size_t)n + 1) * 2;
        *buf = realloc(*buf, *cap);
        assert_non_null(*buf);
    }
    memcpy(*buf + *len, item, (size_t)n + 1);
    *len += (size_t)n;
}

/* What libyaml's loader or the checks would take the square of, or a
 * product of, is bounded before they run: anchors (each looked up among all
 * before it), aliases, listeners (each checked against all), networks. */
static void
test_anchors_listeners_and_networks_are_bounded(void **state)
{
    (void)state;
    char *b = NULL, want[160];
    size_t len = 0, cap = 0, at = 0;
    grow(&b, &len, &cap, "x: [");
    for (int i = 0; i <= 1000; i++) {
        at = len;
        grow(&b, &len, &cap, "&a%d 1, ", i);
    }
    grow(&b, &len, &cap, "1]\n" LISTEN POOL_WEB);
    snprintf(want, sizeof(want), "t.yaml:1:%zu: more than 1000 anchors (&name)", at + 1);
    expect_error(b, want);
    len = 0;
    grow(&b, &len, &cap, "a: &a 1\nx: [");
    for (int i = 0; i <= 20000; i++) {
        at = len;
        grow(&b, &len, &cap, "*a, ");
    }
    grow(&b, &len, &cap, "1]\n" LISTEN POOL_WEB);
    snprintf(want, sizeof(want), "t.yaml:2:%zu: more than 20000 aliases (*name)",
             at - strlen("a: &a 1\n") + 1);
    expect_error(b, want);
    len = 0;
    grow(&b, &len, &cap, "listen: [");
    for (int i = 0; i < 1025; i++) {
        grow(&b, &len, &cap, "\"127.0.0.1:%d\", ", 20000 + i);
    }
    grow(&b, &len, &cap, "]\n" POOL_WEB);
    expect_error(b, "t.yaml:1:9: listen: 1025 addresses, at most 1024");
    len = 0;
    grow(&b, &len, &cap,
         LISTEN "pools:\n  g:\n    balance: session\n    servers:\n"
                "      - {name: a, address: \"127.0.0.1:9001\"}\n    session:\n"
                "      games: {chess: {frame_load: 15, rates: [15]}}\n"
                "      networks: [");
    for (int i = 0; i < 4097; i++) {
        grow(&b, &len, &cap, "{prefix: 10.0.%d.%d}, ", i / 256, i % 256);
    }
    grow(&b, &len, &cap, "]\n");
    expect_error(b, "t.yaml:9:17: 4097 networks with 1 server: at most 4096 networks, and 1048576 "
                    "delays (networks times servers), in a pool");
    free(b);
}

/* Aliases that would make the loader walk millions of nodes, a loop, and deep nesting. */
static void
test_expansion_and_depth_are_bounded(void **state)
{
    (void)state;
    /* A server, a list of 40 aliases of it, a list of 40 of that, and of that: 64,000
     * servers (and their keys: past 200,000 nodes) for a few lines. */
    char *bomb = malloc(4096);
    assert_non_null(bomb);
    size_t n = (size_t)snprintf(bomb, 4096,
                                "listen: 127.0.0.1:8080\nsrv: &X0 {name: a, address: "
                                "127.0.0.1:1, weight: 1}\n");
    for (int level = 1; level <= 3; level++) {
        n += (size_t)snprintf(bomb + n, 4096 - n, "l%d: &X%d [", level, level);
        for (int i = 0; i < 40; i++) {
            n += (size_t)snprintf(bomb + n, 4096 - n, "%s*X%d", i > 0 ? ", " : "", level - 1);
        }
        n += (size_t)snprintf(bomb + n, 4096 - n, "]\n");
    }
    n += (size_t)snprintf(bomb + n, 4096 - n, "pools: {web: {servers: *X3}}\n");
    assert_true(n < 4096);
    expect_error(bomb, "t.yaml:1:1: its aliases expand it to more than 200000 nodes (the file "
                       "has 22)");
    free(bomb);
    /* Sizes added to a server's in-flight work are bounded, so that the sum cannot overflow. */
    expect_error(LISTEN "catalog: {default_object_bytes: 2000g}\n" POOL_WEB,
                 "t.yaml:2:33: default_object_bytes must be between 0 and 1024g, got \"2000g\"");
    expect_error("listen: &L [127.0.0.1:8080, *L]\n", "t.yaml:1:9: an alias inside the node it "
                                                      "names (a loop)");
    /* A few aliases within bounds are fine. */
    struct dm_conf *c = load_ok("listen: &L 127.0.0.1:8080\nadmin: 127.0.0.1:9901\n"
                                "pools: {web: {servers: &S [{name: a, address: 127.0.0.1:1}]},"
                                " api: {servers: *S}}\n");
    assert_int_equal(c->npools, 2);
    dm_conf_destroy(c);
    char deep[256];
    n = (size_t)snprintf(deep, sizeof(deep), "listen: ");
    for (int i = 0; i < 65; i++) {
        deep[n++] = '[';
    }
    for (int i = 0; i < 65; i++) {
        deep[n++] = ']';
    }
    deep[n++] = '\n';
    deep[n] = 0;
    expect_error(deep, "t.yaml:1:72: nested more than 64 lists or mappings deep");
    /* A tag is refused, not silently passed over. */
    expect_error(LISTEN "limits: {max_conns: !!str 5}\n" POOL_WEB,
                 "t.yaml:2:21: YAML tags are not supported (got \"tag:yaml.org,2002:str\"): "
                 "write the value without it; each key says how its value is read");
    expect_error(LISTEN "limits: !custom {max_conns: 5}\n" POOL_WEB,
                 "t.yaml:2:9: YAML tags are not supported (got \"!custom\"): write the value "
                 "without it; each key says how its value is read");
}

/* Duplicates among many pools and many servers (found by an index, not by comparing each
 * with every one before it), reported as among a few. */
static void
test_duplicates_among_many(void **state)
{
    (void)state;
    size_t cap = 64 + 300 * 80;
    char *y = malloc(cap);
    assert_non_null(y);
    size_t n = (size_t)snprintf(y, cap, "listen: 127.0.0.1:8080\npools:\n");
    for (int i = 0; i < 200; i++) { /* lines 3 to 202; pool p7 again on line 203 */
        n += (size_t)snprintf(y + n, cap - n,
                              "  p%d: {servers: [{name: a, address: 127.0.0.1:%d}]}\n", i, i + 1);
    }
    n += (size_t)snprintf(y + n, cap - n, "  p7: {servers: [{name: a, address: 127.0.0.1:1}]}\n");
    n += (size_t)snprintf(y + n, cap - n, "  big:\n    servers:\n"); /* lines 204, 205 */
    for (int i = 0; i < 100; i++) { /* lines 206 to 305; s42 again on line 306 */
        n += (size_t)snprintf(y + n, cap - n, "      - {name: s%d, address: 127.0.0.2:%d}\n", i,
                              i + 1);
    }
    n += (size_t)snprintf(y + n, cap - n, "      - {name: s42, address: 127.0.0.3:1}\n");
    assert_true(n < cap);
    static const char *const want[] = {
        "t.yaml:203:3: duplicate pool \"p7\" (first at line 10)",
        "t.yaml:306:16: pool \"big\": duplicate server \"s42\" (first at line 248)",
        NULL,
    };
    expect_errors(y, want);
    free(y);
}

/* Past DM_CONF_MSGS_MAX errors, the rest are counted, not kept. */
static void
test_errors_are_capped(void **state)
{
    (void)state;
    size_t cap = 64 + 150 * 64;
    char *y = malloc(cap);
    assert_non_null(y);
    size_t n = (size_t)snprintf(y, cap, "listen: 127.0.0.1:8080\npools:\n");
    for (int i = 0; i < 150; i++) {
        n += (size_t)snprintf(y + n, cap - n, "  p%d: {servers: [{name: a, address: x}]}\n", i);
    }
    struct dm_conf_errors err = { 0 };
    assert_null(load(y, &err));
    assert_int_equal(err.n, 100);
    assert_string_equal(err.msg[0], "t.yaml:3:37: bad address \"x\" (missing port)");
    assert_string_equal(err.msg[99], "t.yaml: and 51 more errors, not shown");
    dm_conf_errors_fini(&err);
    free(y);
}

/* Routes find their pools among many (by a sorted index), and unknown
 * pools past the cap are counted too, as every other error. */
static void
test_routes_find_pools_among_many(void **state)
{
    (void)state;
    enum { NP = 300 };
    size_t cap = 256 + NP * 128;
    char *y = malloc(cap);
    assert_non_null(y);
    for (int unknown = 0; unknown <= 1; unknown++) {
        size_t n = (size_t)snprintf(y, cap, "listen: 127.0.0.1:8080\npools:\n");
        for (int i = 0; i < NP; i++) {
            /* Names in no order: pool<i*7 mod NP>. */
            n += (size_t)snprintf(y + n, cap - n,
                                  "  pool%d: {servers: [{name: a, address: 127.0.0.1:80}]}\n",
                                  i * 7 % NP);
        }
        n += (size_t)snprintf(y + n, cap - n, "routes:\n");
        for (int i = 0; i < NP; i++) {
            n += (size_t)snprintf(y + n, cap - n, "  - {path: /%d, pool: %s%d}\n", i,
                                  unknown ? "poo" : "pool", i);
        }
        struct dm_conf_errors err = { 0 };
        struct dm_conf *c = load(y, &err);
        if (!unknown) {
            assert_non_null(c);
            assert_int_equal(c->nroutes, NP);
            for (int i = 0; i < NP; i++) {
                char want[16];
                snprintf(want, sizeof want, "pool%d", i);
                assert_string_equal(c->pools[c->routes[i].pool].name, want);
            }
            dm_conf_destroy(c);
            continue;
        }
        assert_null(c);
        assert_int_equal(err.n, 100);
        assert_string_equal(err.msg[0], "t.yaml:304:22: unknown pool \"poo0\" (did you mean "
                                        "\"pool0\"?)");
        char want[64];
        snprintf(want, sizeof want, "t.yaml: and %d more errors, not shown", NP - 99);
        assert_string_equal(err.msg[99], want);
        dm_conf_errors_fini(&err);
    }
    /* Names too long to be typos (the distance costs the product of the
     * lengths) get the list, not a search: 300 w's, and 299 then an x. */
    char name[301];
    memset(name, 'w', 300);
    name[300] = 0;
    int k = snprintf(y, cap, LISTEN "pools:\n  %s: {servers: [{name: a, address: 127.0.0.1:80}]}\n",
                     name);
    name[299] = 'x';
    snprintf(y + k, cap - (size_t)k, "default_pool: %s\n", name);
    struct dm_conf_errors err = { 0 };
    assert_null(load(y, &err));
    assert_int_equal(err.n, 1);
    assert_null(strstr(err.msg[0], "did you mean"));
    assert_non_null(strstr(err.msg[0], "(pools: "));
    dm_conf_errors_fini(&err);
    free(y);
}

/* ---- session ---- */

/* Lines 1 to 7: a session pool "g" of servers a and b, the session block follows. */
#define POOL_G                                                                                     \
    "pools:\n"                                                                                     \
    "  g:\n"                                                                                       \
    "    balance: session\n"                                                                       \
    "    servers:\n"                                                                               \
    "      - {name: a, address: \"127.0.0.1:9001\"}\n"                                             \
    "      - {name: b, address: \"127.0.0.1:9002\"}\n"
#define GAMES                                                                                      \
    "      games:\n"                                                                               \
    "        chess: {frame_load: 15, rates: [15, 20, 25, 30]}\n"

static void
test_session_keys_are_read(void **state)
{
    (void)state;
    struct dm_conf *c =
        load_ok(LISTEN "pools:\n"
                       "  g:\n"
                       "    balance: session\n"
                       "    servers:\n"
                       "      - {name: a, address: \"127.0.0.1:9001\", "
                       "session_capacity: 1000.5}\n"
                       "      - {name: b, address: \"127.0.0.1:9002\"}\n"
                       "    session:\n"
                       "      group: {key: cookie, name: table}\n"
                       "      game_header: X-Title\n"
                       "      rate_header: X-Fps\n"
                       "      tier_header: X-Fps-Given\n"
                       "      default_game: racer\n"
                       "      dmax: 150ms\n"
                       "      dvmax: 100\n"
                       "      window: 250ms\n"
                       "      alpha: 0.9\n"
                       "      anneal: {iterations: 100, t0: 0.5}\n"
                       "      max_sessions: 50\n"
                       "      max_members: 4\n"
                       "      games:\n"
                       "        chess: {frame_load: 15, rates: [15, 20, 25, 30], rate: 25}\n"
                       "        racer: {frame_load: 60.5, rates: [30, 45]}\n"
                       "      networks:\n"
                       "        - {prefix: 10.1.0.0/16, delays: {a: 20ms, b: 80}}\n"
                       "        - {prefix: \"2001:db8::/32\", delays: {b: 5}}\n"
                       "        - {prefix: 192.0.2.7}\n");
    const struct dm_conf_pool *p = &c->pools[0];
    const struct dm_conf_session *s = &p->session;
    assert_true(p->servers[0].session_capacity == 1000.5);
    assert_true(p->servers[1].session_capacity == 40000);
    assert_false(p->affinity_connection);
    assert_int_equal(s->group_key, DM_HASH_COOKIE);
    assert_string_equal(s->group_name, "table");
    assert_string_equal(s->game_header, "X-Title");
    assert_string_equal(s->rate_header, "X-Fps");
    assert_string_equal(s->tier_header, "X-Fps-Given");
    assert_int_equal(s->ngames, 2);
    assert_int_equal(s->default_game, 1);
    assert_string_equal(s->games[0].name, "chess");
    assert_true(s->games[0].frame_load == 15);
    assert_int_equal(s->games[0].nrates, 4);
    assert_true(s->games[0].rates[3] == 30);
    assert_int_equal(s->games[0].rate, 2);
    assert_true(s->games[1].frame_load == 60.5);
    assert_int_equal(s->games[1].rate, 1); /* the highest, by default */
    assert_true(s->dmax_ms == 150 && s->dvmax_ms == 100);
    assert_int_equal(s->window_ms, 250);
    assert_true(s->alpha == 0.9);
    assert_int_equal(s->anneal_iterations, 100);
    assert_true(s->anneal_t0 == 0.5);
    assert_int_equal(s->max_sessions, 50);
    assert_int_equal(s->max_members, 4);
    assert_int_equal(s->nnetworks, 3);
    assert_int_equal(s->networks[0].prefix.family, AF_INET);
    assert_int_equal(s->networks[0].prefix.bits, 16);
    assert_true(s->networks[0].delay_ms[0] == 20 && s->networks[0].delay_ms[1] == 80);
    assert_int_equal(s->networks[1].prefix.family, AF_INET6);
    assert_true(s->networks[1].delay_ms[0] == -1 && s->networks[1].delay_ms[1] == 5);
    assert_int_equal(s->networks[2].prefix.bits, 32);
    assert_true(s->networks[2].delay_ms[0] == -1);
    dm_conf_destroy(c);

    /* The defaults, and a session block on another policy is read but unused. */
    c = load_ok(LISTEN POOL_G "    session:\n" GAMES);
    s = &c->pools[0].session;
    assert_int_equal(s->group_key, DM_HASH_HEADER);
    assert_string_equal(s->group_name, "X-Session-Group");
    assert_string_equal(s->game_header, "X-Game");
    assert_string_equal(s->rate_header, "X-Frame-Rate");
    assert_string_equal(s->tier_header, "X-Rate-Tier");
    assert_int_equal(s->default_game, 0);
    assert_int_equal(s->games[0].rate, 3);
    assert_true(isinf(s->dmax_ms) && isinf(s->dvmax_ms));
    assert_int_equal(s->window_ms, 0);
    assert_true(s->alpha == 1 && s->anneal_t0 == 0.05);
    assert_int_equal(s->anneal_iterations, 4000);
    assert_int_equal(s->max_sessions, 10000);
    assert_int_equal(s->max_members, 64);
    assert_int_equal(s->nnetworks, 0);
    dm_conf_destroy(c);
    c = load_ok(LISTEN POOL_WEB "    session: {group: {key: header, name: X-Room}}\n");
    assert_string_equal(c->pools[0].session.group_name, "X-Room");
    dm_conf_destroy(c);
}

static void
test_session_errors(void **state)
{
    (void)state;
    expect_error(LISTEN POOL_G,
                 "t.yaml:4:5: pool \"g\": balance session needs session.games (at least one game)");
    expect_error(LISTEN POOL_G "    session: {}\n",
                 "t.yaml:4:5: pool \"g\": balance session needs session.games (at least one game)");
    expect_error(LISTEN POOL_G "    session: {games: {}}\n",
                 "t.yaml:4:5: pool \"g\": balance session needs session.games (at least one game)");
    /* Games given and each refused: each said once, not again as "no game". */
    expect_error(LISTEN POOL_G "    session: {games: {\"\": {frame_load: 1, rates: [1]}}}\n",
                 "t.yaml:8:23: expected a name, got \"\"");
    expect_error(LISTEN POOL_G "    session:\n" GAMES "      default_game: go\n",
                 "t.yaml:11:21: unknown game \"go\" (games: chess)");
    expect_error(LISTEN POOL_G "    session:\n      games:\n        go: {rates: [1]}\n",
                 "t.yaml:10:13: game \"go\": missing required key \"frame_load\"");
    expect_error(LISTEN POOL_G "    session:\n      games:\n        go: {frame_load: 1}\n",
                 "t.yaml:10:13: game \"go\": missing required key \"rates\"");
    expect_error(LISTEN POOL_G
                 "    session:\n      games:\n        go: {frame_load: 1, rates: [30, 25]}\n",
                 "t.yaml:10:41: rates must be increasing, got 25 after 30");
    expect_error(LISTEN POOL_G
                 "    session:\n      games:\n        go: {frame_load: 1, rates: [0, 25]}\n",
                 "t.yaml:10:37: a rate must be above 0");
    expect_error(LISTEN POOL_G
                 "    session:\n      games:\n        go: {frame_load: 1, rates: []}\n",
                 "t.yaml:10:36: game \"go\": expected 1 to 16 rates, got 0");
    expect_error(
        LISTEN POOL_G
        "    session:\n      games:\n        go: {frame_load: 1, rates: [1, 2], rate: 3}\n",
        "t.yaml:10:50: game \"go\": rate 3 is not one of its rates");
    expect_error(LISTEN POOL_G
                 "    session:\n      games:\n        go: {frame_load: -1, rates: [1]}\n",
                 "t.yaml:10:26: frame_load must be at least 0, got -1");
    expect_error(LISTEN POOL_G "    session:\n" GAMES "      group: {key: client}\n",
                 "t.yaml:11:20: unknown group key \"client\" (known: header, cookie)");
    expect_error(
        LISTEN POOL_G "    session:\n" GAMES "      group: {key: cookie, name: 'a=b'}\n",
        "t.yaml:11:34: bad cookie name \"a=b\" (letters, digits and !#$%&'*+-.^_`|~ only)");
    expect_error(
        LISTEN POOL_G "    session:\n" GAMES "      tier_header: 'X Tier'\n",
        "t.yaml:11:20: bad header name \"X Tier\" (letters, digits and !#$%&'*+-.^_`|~ only)");
    /* dimmer writes the tier header: never a framing field, nor one the session is read from;
     * the numbers are bounded (an LBF of inf made /stats invalid JSON). */
    static const char *const tiers[][2] = {
        { LISTEN POOL_G "    session:\n" GAMES "      tier_header: content-length\n",
          "t.yaml:11:20: tier_header \"content-length\" is a field dimmer frames requests by or "
          "writes itself (" DM_CONF_OURS_TEXT ")" },
        { LISTEN POOL_G "    session:\n" GAMES "      tier_header: X-GAME\n",
          "t.yaml:11:20: tier_header \"X-GAME\" is also a header the session is read from "
          "(group, game_header or rate_header): dimmer replaces it" },
        { LISTEN POOL_G "    session:\n      games:\n        go: {frame_load: 1e290, rates: [1]}\n",
          "t.yaml:10:26: frame_load must be at most 1e+06, got 1e290" },
    };
    for (size_t i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
        expect_error(tiers[i][0], tiers[i][1]);
    }
    expect_error(LISTEN POOL_G "    session:\n" GAMES "      dvmax: 1.5s\n",
                 "t.yaml:11:14: bad duration \"1.5s\" (use ms, s, m, h)");
    expect_error(LISTEN POOL_G "    session:\n" GAMES "      window: soon\n",
                 "t.yaml:11:15: bad duration \"soon\" (use ms, s, m, h)");
    expect_error(LISTEN POOL_G "    session:\n" GAMES "      max_members: 0\n",
                 "t.yaml:11:20: max_members must be between 1 and 65535, got 0");
    expect_error(LISTEN POOL_G "    session:\n" GAMES "      anneal: {iterations: -1}\n",
                 "t.yaml:11:28: iterations must be between 0 and 1000000, got -1");
    expect_error(LISTEN POOL_G "    session:\n" GAMES "      dmaxx: 1\n",
                 "t.yaml:11:7: unknown key \"dmaxx\" (did you mean \"dmax\"?)");
    expect_error(LISTEN POOL_G "    session:\n" GAMES
                               "      networks:\n        - {prefix: 10.0.0.0/33}\n",
                 "t.yaml:12:20: bad prefix \"10.0.0.0/33\" (bits must be 0 to 32)");
    expect_error(LISTEN POOL_G "    session:\n" GAMES
                               "      networks:\n        - {prefix: 10.0.0.1/8}\n",
                 "t.yaml:12:20: bad prefix \"10.0.0.1/8\" (address bits set past the prefix "
                 "length)");
    expect_error(LISTEN POOL_G "    session:\n" GAMES "      networks:\n        - {prefix: lan}\n",
                 "t.yaml:12:20: bad prefix \"lan\" (not an IPv4 or IPv6 address)");
    expect_error(LISTEN POOL_G "    session:\n" GAMES
                               "      networks:\n        - {prefix: \"::/129\"}\n",
                 "t.yaml:12:20: bad prefix \"::/129\" (bits must be 0 to 128)");
    expect_error(LISTEN POOL_G "    session:\n" GAMES
                               "      networks:\n        - {delays: {a: 1}}\n",
                 "t.yaml:12:11: network 1: missing required key \"prefix\"");
    expect_error(LISTEN POOL_G "    session:\n" GAMES "      networks:\n"
                               "        - {prefix: 10.0.0.0/8}\n        - {prefix: 10.0.0.0/8}\n",
                 "t.yaml:13:20: duplicate prefix \"10.0.0.0/8\" (first at line 12)");
    expect_error(LISTEN POOL_G "    session:\n" GAMES
                               "      networks:\n        - {prefix: 10.0.0.0/8, delays: {c: 1}}\n",
                 "t.yaml:12:41: unknown server \"c\" in pool \"g\" (servers: a, b)");
    expect_error(LISTEN POOL_G "    session:\n" GAMES
                               "      networks:\n        - {prefix: 10.0.0.0/8, delays: {a: x}}\n",
                 "t.yaml:12:44: bad duration \"x\" (use ms, s, m, h)");
    expect_error(LISTEN POOL_G "    session:\n" GAMES "      networks: {prefix: 10.0.0.0/8}\n",
                 "t.yaml:11:17: expected a list of networks, got a mapping");
    expect_error(LISTEN "pools:\n  g:\n    servers:\n"
                        "      - {name: a, address: \"127.0.0.1:9001\", session_capacity: -5}\n",
                 "t.yaml:5:64: session_capacity must be at least 0, got -5");
}

static void
test_queue_keys(void **state)
{
    (void)state;
    /* Defaults: no limit, no bound on the queue, timeouts.queue = connect. */
    struct dm_conf *c = load_ok(LISTEN "timeouts: {connect: 2s}\n"
                                       "pools:\n  p:\n    servers:\n"
                                       "      - {name: a, address: \"127.0.0.1:9001\"}\n");
    assert_int_equal(c->timeouts.queue_ms, 2000);
    assert_int_equal(c->pools[0].max_queue, 0);
    assert_int_equal(c->pools[0].servers[0].max_conns, 0);
    dm_conf_destroy(c);
    c = load_ok(LISTEN "pools:\n  p:\n    servers:\n"
                       "      - {name: a, address: \"127.0.0.1:9001\"}\n");
    assert_int_equal(c->timeouts.queue_ms, 5000);
    dm_conf_destroy(c);
    c = load_ok(LISTEN "timeouts: {connect: 2s, queue: 250ms}\n"
                       "pools:\n  p:\n    max_queue: 7\n    servers:\n"
                       "      - {name: a, address: \"127.0.0.1:9001\", max_conns: 3}\n"
                       "      - {name: b, address: \"127.0.0.1:9002\"}\n");
    assert_int_equal(c->timeouts.queue_ms, 250);
    assert_int_equal(c->pools[0].max_queue, 7);
    assert_int_equal(c->pools[0].servers[0].max_conns, 3);
    assert_int_equal(c->pools[0].servers[1].max_conns, 0);
    assert_int_equal(c->pools[0].queue_order, DM_QO_ARRIVAL); /* by default */
    assert_int_equal(c->pools[0].page_gap_ms, 250);
    assert_int_equal(c->pools[0].page_bound_ms, 2000);
    dm_conf_destroy(c);
    expect_error(LISTEN "timeouts: {queue: 0}\npools:\n  p:\n    servers:\n"
                        "      - {name: a, address: \"127.0.0.1:9001\"}\n",
                 "t.yaml:2:19: queue must be more than 0");
    static const struct {
        const char *order;
        enum dm_queue_order is;
    } orders[] = { { "size", DM_QO_SIZE }, { "arrival", DM_QO_ARRIVAL }, { "page", DM_QO_PAGE } };
    for (size_t i = 0; i < sizeof orders / sizeof orders[0]; i++) {
        char y[256];
        snprintf(y, sizeof y,
                 LISTEN "pools:\n  p:\n    queue_order: %s\n    servers:\n"
                        "      - {name: a, address: \"127.0.0.1:9001\", max_conns: 1}\n",
                 orders[i].order);
        c = load_ok(y);
        assert_int_equal(c->pools[0].queue_order, orders[i].is);
        dm_conf_destroy(c);
    }
    expect_error(LISTEN "pools:\n  p:\n    queue_order: smallest\n    servers:\n"
                        "      - {name: a, address: \"127.0.0.1:9001\"}\n",
                 "t.yaml:4:18: unknown queue_order \"smallest\" (known: arrival, size, page)");
    c = load_ok(LISTEN "pools:\n  p:\n    queue_order: page\n    page_gap: 100ms\n"
                       "    page_bound: 4s\n    servers:\n"
                       "      - {name: a, address: \"127.0.0.1:9001\", max_conns: 1}\n");
    assert_int_equal(c->pools[0].page_gap_ms, 100);
    assert_int_equal(c->pools[0].page_bound_ms, 4000);
    dm_conf_destroy(c);
    expect_error(LISTEN "pools:\n  p:\n    queue_order: size\n    page_bound: 4s\n    servers:\n"
                        "      - {name: a, address: \"127.0.0.1:9001\"}\n",
                 "t.yaml:5:17: page_bound applies to queue_order: page");
    expect_error(LISTEN "pools:\n  p:\n    page_gap: 1s\n    servers:\n"
                        "      - {name: a, address: \"127.0.0.1:9001\"}\n",
                 "t.yaml:4:15: page_gap applies to queue_order: page");
    expect_error(LISTEN "pools:\n  p:\n    queue_order: page\n    page_bound: 0\n    servers:\n"
                        "      - {name: a, address: \"127.0.0.1:9001\"}\n",
                 "t.yaml:5:17: page_bound must be more than 0");
    expect_error(LISTEN "pools:\n  p:\n    max_queue: -1\n    servers:\n"
                        "      - {name: a, address: \"127.0.0.1:9001\"}\n",
                 "t.yaml:4:16: max_queue must be between 0 and 10000000, got -1");
    expect_error(LISTEN "pools:\n  p:\n    servers:\n"
                        "      - {name: a, address: \"127.0.0.1:9001\", max_conns: x}\n",
                 "t.yaml:5:57: expected an integer, got \"x\"");
}

static void
test_prefixes_parse_and_match(void **state)
{
    (void)state;
    struct dm_conf_prefix p;
    const char *why = NULL;
    struct sockaddr_in a4 = { .sin_family = AF_INET };
    struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 };

    assert_int_equal(dm_conf_parse_prefix("10.1.0.0/16", &p, &why), 0);
    assert_int_equal(inet_pton(AF_INET, "10.1.200.3", &a4.sin_addr), 1);
    assert_true(dm_conf_prefix_match(&p, (struct sockaddr *)&a4));
    assert_int_equal(inet_pton(AF_INET, "10.2.0.1", &a4.sin_addr), 1);
    assert_false(dm_conf_prefix_match(&p, (struct sockaddr *)&a4));
    /* An IPv4-mapped IPv6 address is its IPv4 address; another IPv6 one is not. */
    assert_int_equal(inet_pton(AF_INET6, "::ffff:10.1.9.9", &a6.sin6_addr), 1);
    assert_true(dm_conf_prefix_match(&p, (struct sockaddr *)&a6));
    assert_int_equal(inet_pton(AF_INET6, "::a01:909", &a6.sin6_addr), 1);
    assert_false(dm_conf_prefix_match(&p, (struct sockaddr *)&a6));
    /* Bits that do not fall on a byte. */
    assert_int_equal(dm_conf_parse_prefix("127.0.0.0/31", &p, NULL), 0);
    assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &a4.sin_addr), 1);
    assert_true(dm_conf_prefix_match(&p, (struct sockaddr *)&a4));
    assert_int_equal(inet_pton(AF_INET, "127.0.0.2", &a4.sin_addr), 1);
    assert_false(dm_conf_prefix_match(&p, (struct sockaddr *)&a4));
    /* /0 matches every address of its family, /32 one. */
    assert_int_equal(dm_conf_parse_prefix("0.0.0.0/0", &p, NULL), 0);
    assert_true(dm_conf_prefix_match(&p, (struct sockaddr *)&a4));
    assert_false(dm_conf_prefix_match(&p, (struct sockaddr *)&a6));
    assert_int_equal(dm_conf_parse_prefix("127.0.0.2", &p, NULL), 0);
    assert_int_equal(p.bits, 32);
    assert_true(dm_conf_prefix_match(&p, (struct sockaddr *)&a4));
    assert_int_equal(dm_conf_parse_prefix("2001:db8::/33", &p, NULL), 0);
    assert_int_equal(inet_pton(AF_INET6, "2001:db8:7fff::1", &a6.sin6_addr), 1);
    assert_true(dm_conf_prefix_match(&p, (struct sockaddr *)&a6));
    assert_int_equal(inet_pton(AF_INET6, "2001:db8:8000::1", &a6.sin6_addr), 1);
    assert_false(dm_conf_prefix_match(&p, (struct sockaddr *)&a6));
    assert_false(dm_conf_prefix_match(&p, (struct sockaddr *)&a4));
    struct sockaddr un = { .sa_family = AF_UNIX };
    assert_false(dm_conf_prefix_match(&p, &un));
    static const char *const bad[] = {
        "",        "/8",         "10.0.0.0/",   "10.0.0.0/x",   "10.0.0.0/8/8", "10.0.0.0/08x",
        "::1/129", "1.2.3.4/33", "10.0.0.1/31", "host.example", "[::1]/128"
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = NULL;
        assert_int_equal(dm_conf_parse_prefix(bad[i], &p, &why), -EINVAL);
        assert_non_null(why);
        assert_int_equal(p.family, 0);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expansion_and_depth_are_bounded),
        cmocka_unit_test(test_errors_are_capped),
        cmocka_unit_test(test_routes_find_pools_among_many),
        cmocka_unit_test(test_duplicates_among_many),
        cmocka_unit_test(test_bundled_example_loads),
        cmocka_unit_test(test_defaults_apply_when_keys_are_absent),
        cmocka_unit_test(test_every_key_is_read),
        cmocka_unit_test(test_hash_age_and_affinity_keys_are_read),
        cmocka_unit_test(test_numbers_are_read_strictly),
        cmocka_unit_test(test_affinity_default_depends_on_balance),
        cmocka_unit_test(test_catalog_keys_are_read),
        cmocka_unit_test(test_access_log_forms),
        cmocka_unit_test(test_pools_may_come_after_routes),
        cmocka_unit_test(test_yaml_anchors_and_aliases_are_resolved),
        cmocka_unit_test(test_anchors_listeners_and_networks_are_bounded),
        cmocka_unit_test(test_yaml_syntax_errors_carry_libyaml_problem_and_mark),
        cmocka_unit_test(test_document_must_be_one_mapping),
        cmocka_unit_test(test_wrong_types_are_named),
        cmocka_unit_test(test_missing_required_keys),
        cmocka_unit_test(test_empty_lists_are_rejected),
        cmocka_unit_test(test_unknown_keys_suggest_the_nearest_known_key),
        cmocka_unit_test(test_duplicate_keys_and_names),
        cmocka_unit_test(test_bad_addresses),
        cmocka_unit_test(test_listeners_may_use_port_0),
        cmocka_unit_test(test_unknown_pools_and_policies),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_rate_burst_defaults_to_rate),
        cmocka_unit_test(test_integers_out_of_range),
        cmocka_unit_test(test_hash_errors),
        cmocka_unit_test(test_numbers_that_are_not_numbers),
        cmocka_unit_test(test_age_and_affinity_errors),
        cmocka_unit_test(test_catalog_errors),
        cmocka_unit_test(test_catalog_manifest_must_be_readable),
        cmocka_unit_test(test_several_errors_are_reported_in_file_order),
        cmocka_unit_test(test_unreadable_files),
        cmocka_unit_test(test_parse_duration),
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_parse_addr),
        cmocka_unit_test(test_suggestions_need_a_close_match),
        cmocka_unit_test(test_messages_quote_values_safely),
        cmocka_unit_test(test_load_string_reads_only_len_bytes),
        cmocka_unit_test(test_from_args_builds_one_pool),
        cmocka_unit_test(test_from_args_reports_each_bad_flag),
        cmocka_unit_test(test_power_keys_are_read),
        cmocka_unit_test(test_power_errors),
        cmocka_unit_test(test_session_keys_are_read),
        cmocka_unit_test(test_session_errors),
        cmocka_unit_test(test_queue_keys),
        cmocka_unit_test(test_prefixes_parse_and_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
