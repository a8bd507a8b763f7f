/*
 * Tests for balancers/registry.c, and the contract every registered policy
 * keeps: a pick is a usable, untried index or DM_NO_SERVER.
 */
#include "dm_test.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/balancer.h"
#include "balancers/registry.h"
#include "balancers/rng.h"
#include "balancers/servers.h"

static void
test_find_by_config_name(void **state)
{
    (void)state;
    assert_ptr_equal(dm_balancer_find("roundrobin"), &dm_bal_roundrobin);
    assert_ptr_equal(dm_balancer_find("leastconn"), &dm_bal_leastconn);
    assert_null(dm_balancer_find("RoundRobin"));
    assert_null(dm_balancer_find("round"));
    assert_null(dm_balancer_find(""));
    assert_null(dm_balancer_find(NULL));
}

static void
test_registry_names_are_unique_and_tables_complete(void **state)
{
    (void)state;
    size_t n = 0;
    for (size_t i = 0; dm_balancer_registry[i] != NULL; i++, n++) {
        const struct dm_balancer_ops *ops = dm_balancer_registry[i];
        assert_non_null(ops->name);
        assert_non_null(ops->create);
        assert_non_null(ops->pick);
        assert_non_null(ops->destroy);
        assert_ptr_equal(dm_balancer_find(ops->name), ops);
        /* Only known needs; per-connection state comes with a page's objects
         * (the proxy builds it on a connection's first request). */
        const unsigned known = DM_BAL_NEEDS_KEY | DM_BAL_NEEDS_WORK | DM_BAL_NEEDS_OBJECTS |
                               DM_BAL_BINDS_CONNECTIONS | DM_BAL_NEEDS_SESSIONS;
        assert_int_equal(ops->needs & ~known, 0);
        if (ops->conn_state_size != NULL || ops->on_tick != NULL) {
            assert_true(ops->needs & DM_BAL_NEEDS_OBJECTS);
        }
        for (size_t j = 0; j < i; j++) {
            assert_string_not_equal(dm_balancer_registry[j]->name, ops->name);
        }
    }
    assert_true(n >= 2);
}

static void
test_every_policy_picks_only_usable_untried_servers(void **state)
{
    (void)state;
    enum { N = 6 };
    for (size_t p = 0; dm_balancer_registry[p] != NULL; p++) {
        struct dm_servers *sv = dm_servers_create(N);
        assert_non_null(sv);
        for (size_t i = 0; i < N; i++) {
            sv->s[i].weight = (unsigned)(i + 1);
        }
        struct dm_balancer *b = dm_balancer_create(dm_balancer_registry[p], sv, NULL);
        assert_non_null(b);
        assert_ptr_equal(b->ops, dm_balancer_registry[p]);
        assert_ptr_equal(b->sv, sv);

        struct dm_rng rng;
        dm_rng_init(&rng, p);
        uint8_t tried[1] = { 1u << 5 };
        struct dm_pick pick = { .tried = tried, .now_us = 10, .rng = &rng };
        atomic_store(&sv->s[1].host->down, true);
        atomic_store(&sv->s[2].host->down_until_us, 11);
        atomic_store(&sv->s[3].host->power, DM_POWER_BOOTING);
        for (int k = 0; k < 1000; k++) {
            pick.key = dm_rng_next(&rng);
            int i = dm_balancer_pick(b, &pick);
            assert_true(i == 0 || i == 4);
        }
        atomic_store(&sv->s[0].host->power, DM_POWER_ASLEEP);
        atomic_store(&sv->s[4].host->down, true);
        assert_int_equal(dm_balancer_pick(b, &pick), DM_NO_SERVER);
        dm_balancer_destroy(b);
        dm_servers_destroy(sv);
    }
}

static void
test_destroy_null_is_a_no_op(void **state)
{
    (void)state;
    dm_balancer_destroy(NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_by_config_name),
        cmocka_unit_test(test_registry_names_are_unique_and_tables_complete),
        cmocka_unit_test(test_every_policy_picks_only_usable_untried_servers),
        cmocka_unit_test(test_destroy_null_is_a_no_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
