/*
 * Runtimes and the host table (proxy/runtime.c): what a server's host holds
 * (health, power state, connection counts) is the same host in the next
 * generation, so a reload keeps it, even power state, which nothing outside
 * the process can move yet (no power manager); and pools that name one
 * address share its host.
 */
#include "dm_test.h"

#include <stdlib.h>
#include <string.h>

#include "balancers/hosts.h"
#include "balancers/servers.h"
#include "conf/conf.h"
#include "proxy/internal.h"

/* Generation 1: pools web (a, b) and api (c = a's address). */
static const char gen1[] = "listen: 127.0.0.1:8080\n"
                           "pools:\n"
                           "  web:\n"
                           "    servers:\n"
                           "      - {name: a, address: 127.0.0.1:9001}\n"
                           "      - {name: b, address: 127.0.0.1:9002}\n"
                           "  api:\n"
                           "    servers:\n"
                           "      - {name: c, address: 127.0.0.1:9001}\n";
/* Generation 2: pools reordered and renamed, servers renamed, one address new. */
static const char gen2[] = "listen: 127.0.0.1:8080\n"
                           "pools:\n"
                           "  other:\n"
                           "    servers:\n"
                           "      - {name: z, address: \"[::1]:9001\"}\n"
                           "      - {name: y, address: 127.0.0.1:9002}\n"
                           "  web:\n"
                           "    servers:\n"
                           "      - {name: x, address: 127.0.0.1:9001}\n";

static struct dm_runtime *
runtime(const char *yaml, struct dm_hosts *hosts)
{
    struct dm_conf_errors err = { 0 };
    struct dm_conf *conf = dm_conf_load_string(yaml, strlen(yaml), "t.yaml", &err);
    for (size_t i = 0; i < err.n; i++) {
        print_error("%s\n", err.msg[i]);
    }
    dm_conf_errors_fini(&err);
    assert_non_null(conf);
    const char *why = NULL;
    struct dm_runtime *rt = dm_runtime_create(conf, 2, hosts, NULL, NULL, &why);
    assert_non_null(rt);
    return rt;
}

static void
test_reload_keeps_health_power_and_counts(void **state)
{
    (void)state;
    struct dm_hosts *hosts = dm_hosts_create();
    assert_non_null(hosts);
    struct dm_runtime *r1 = runtime(gen1, hosts);
    struct dm_host *a = dm_runtime_host(r1, 0, 0);
    struct dm_host *b = dm_runtime_host(r1, 0, 1);
    assert_ptr_not_equal(a, b);
    assert_ptr_equal(dm_runtime_host(r1, 1, 0), a); /* api/c is web/a's machine */
    assert_int_equal(hosts->n, 2);
    assert_string_equal(a->text, "127.0.0.1:9001");

    /* What the checks, a power manager and the workers would have set. */
    atomic_store(&a->power, DM_POWER_ASLEEP);
    atomic_store(&a->power_since_us, 1234);
    atomic_store(&a->connections, 3);
    atomic_store(&b->down, true);
    atomic_store(&b->down_until_us, 99);
    atomic_store(&b->fails, 2);
    atomic_store(&b->bound, 5);
    dm_counter_add(&dm_runtime_server(r1, 0, 0)->requests, 7);
    assert_false(dm_server_is_usable(dm_runtime_server(r1, 1, 0), 100)); /* asleep via web/a */

    struct dm_runtime *r2 = runtime(gen2, hosts);
    dm_runtime_unref(r1); /* the old generation goes; its hosts do not */
    assert_int_equal(hosts->n, 3);
    struct dm_host *x = dm_runtime_host(r2, 1, 0);
    struct dm_host *y = dm_runtime_host(r2, 0, 1);
    struct dm_host *z = dm_runtime_host(r2, 0, 0);
    assert_ptr_equal(x, a);
    assert_ptr_equal(y, b);
    assert_ptr_not_equal(z, a); /* [::1]:9001 is another machine than 127.0.0.1:9001 */
    assert_int_equal(atomic_load(&x->power), DM_POWER_ASLEEP);
    assert_int_equal(atomic_load(&x->power_since_us), 1234);
    assert_int_equal(atomic_load(&x->connections), 3);
    assert_true(atomic_load(&y->down));
    assert_int_equal(atomic_load(&y->down_until_us), 99);
    assert_int_equal(atomic_load(&y->fails), 2);
    assert_int_equal(atomic_load(&y->bound), 5);
    assert_false(dm_server_is_usable(dm_runtime_server(r2, 1, 0), 100)); /* still asleep */
    assert_false(dm_server_is_usable(dm_runtime_server(r2, 0, 1), 100)); /* still down */
    assert_true(dm_server_is_usable(dm_runtime_server(r2, 0, 0), 100));
    /* The load table is the pool's, per generation: it starts at zero. */
    assert_int_equal(dm_counter_get(&dm_runtime_server(r2, 1, 0)->requests), 0);
    dm_runtime_unref(r2);
    dm_hosts_destroy(hosts);
}

static void
test_without_a_table_every_server_has_its_own_host(void **state)
{
    (void)state;
    struct dm_runtime *rt = runtime(gen1, NULL);
    struct dm_host *a = dm_runtime_host(rt, 0, 0);
    struct dm_host *c = dm_runtime_host(rt, 1, 0);
    assert_non_null(a);
    assert_non_null(c);
    assert_ptr_not_equal(a, c);
    atomic_store(&a->down, true);
    assert_true(dm_server_is_usable(dm_runtime_server(rt, 1, 0), 1));
    dm_runtime_unref(rt);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reload_keeps_health_power_and_counts),
        cmocka_unit_test(test_without_a_table_every_server_has_its_own_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
