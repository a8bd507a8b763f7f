/*
 * The host table (balancers/hosts.h): one host per address, found again by a
 * later "generation", distinct for distinct addresses, ports and families,
 * and never moved by later insertions.
 */
#include "dm_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "balancers/hosts.h"
#include "balancers/servers.h"

static struct sockaddr_storage
v4(const char *ip, unsigned port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET, ip, &sin->sin_addr), 1);
    return ss;
}

static struct sockaddr_storage
v6(const char *ip, unsigned port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET6, ip, &sin6->sin6_addr), 1);
    return ss;
}

static void
test_same_address_same_host_across_generations(void **state)
{
    (void)state;
    struct dm_hosts *t = dm_hosts_create();
    assert_non_null(t);
    /* Generation 1 names two servers; it marks one down and puts the other to sleep. */
    struct sockaddr_storage a = v4("127.0.0.1", 9001), b = v4("127.0.0.1", 9002);
    struct dm_host *ha = dm_hosts_get(t, &a, "127.0.0.1:9001");
    struct dm_host *hb = dm_hosts_get(t, &b, "127.0.0.1:9002");
    assert_non_null(ha);
    assert_non_null(hb);
    assert_ptr_not_equal(ha, hb);
    assert_false(atomic_load(&ha->down));
    assert_int_equal(atomic_load(&ha->power), DM_POWER_AWAKE);
    atomic_store(&ha->down, true);
    atomic_store(&hb->power, DM_POWER_ASLEEP);
    atomic_store(&hb->power_since_us, 77);
    /* Generation 2: the same addresses, written another way, built afresh. */
    struct sockaddr_storage a2 = v4("127.0.0.1", 9001), b2 = v4("127.0.0.1", 9002);
    struct dm_host *ha2 = dm_hosts_get(t, &b2, "localhost:9002");
    struct dm_host *hb2 = dm_hosts_get(t, &a2, "localhost:9001");
    assert_ptr_equal(ha2, hb);
    assert_ptr_equal(hb2, ha);
    assert_string_equal(ha2->text, "127.0.0.1:9002"); /* the first text stays */
    assert_true(atomic_load(&hb2->down));
    assert_int_equal(atomic_load(&ha2->power), DM_POWER_ASLEEP);
    assert_int_equal(atomic_load(&ha2->power_since_us), 77);
    assert_int_equal(t->n, 2);
    dm_hosts_destroy(t);
    dm_hosts_destroy(NULL);
}

static void
test_distinct_addresses_ports_and_families(void **state)
{
    (void)state;
    struct dm_hosts *t = dm_hosts_create();
    assert_non_null(t);
    struct sockaddr_storage addrs[] = {
        v4("127.0.0.1", 80), v4("127.0.0.2", 80), v4("127.0.0.1", 81),
        v6("::1", 80),       v6("::2", 80),       v6("::ffff:127.0.0.1", 80),
    };
    size_t n = sizeof(addrs) / sizeof(addrs[0]);
    struct dm_host *h[sizeof(addrs) / sizeof(addrs[0])];
    for (size_t i = 0; i < n; i++) {
        h[i] = dm_hosts_get(t, &addrs[i], NULL);
        assert_non_null(h[i]);
        assert_string_equal(h[i]->text, "");
        for (size_t j = 0; j < i; j++) {
            assert_ptr_not_equal(h[i], h[j]); /* IPv4-mapped IPv6 is not the IPv4 host */
        }
    }
    /* Garbage in the padding of a sockaddr does not make another host. */
    struct sockaddr_storage dirty = v4("127.0.0.1", 80);
    memset((char *)&dirty + sizeof(struct sockaddr_in), 0xa5,
           sizeof(dirty) - sizeof(struct sockaddr_in));
    ((struct sockaddr_in *)&dirty)->sin_zero[0] = 1;
    assert_ptr_equal(dm_hosts_get(t, &dirty, NULL), h[0]);
    /* A scope makes another IPv6 host. */
    struct sockaddr_storage scoped = v6("fe80::1", 80), other = v6("fe80::1", 80);
    ((struct sockaddr_in6 *)&other)->sin6_scope_id = 2;
    assert_ptr_not_equal(dm_hosts_get(t, &scoped, NULL), dm_hosts_get(t, &other, NULL));
    assert_int_equal(t->n, n + 2);
    dm_hosts_destroy(t);
}

static void
test_pointers_stay_valid_across_many_insertions(void **state)
{
    (void)state;
    enum { N = 5000 };
    struct dm_hosts *t = dm_hosts_create();
    assert_non_null(t);
    static struct dm_host *first[N];
    for (unsigned i = 0; i < N; i++) {
        struct sockaddr_storage a = v4("10.0.0.1", 1 + i);
        first[i] = dm_hosts_get(t, &a, "x");
        assert_non_null(first[i]);
        /* Something a worker would have written through its pointer. */
        atomic_store(&first[i]->connections, i);
    }
    for (unsigned i = 0; i < N; i++) {
        struct sockaddr_storage a = v4("10.0.0.1", 1 + i);
        assert_ptr_equal(dm_hosts_get(t, &a, "y"), first[i]);
        assert_int_equal(atomic_load(&first[i]->connections), i);
    }
    assert_int_equal(t->n, N);
    dm_hosts_destroy(t);
}

static void
test_servers_without_a_table_have_private_hosts(void **state)
{
    (void)state;
    struct dm_servers *sv = dm_servers_create(3);
    assert_non_null(sv);
    assert_non_null(sv->s[0].host);
    assert_ptr_not_equal(sv->s[0].host, sv->s[1].host);
    assert_true(dm_server_is_usable(&sv->s[1], 10));
    atomic_store(&sv->s[0].host->down, true);
    atomic_store(&sv->s[1].host->power, DM_POWER_BOOTING);
    atomic_store(&sv->s[2].host->down_until_us, 11);
    assert_false(dm_server_is_usable(&sv->s[0], 10));
    assert_false(dm_server_is_usable(&sv->s[1], 10));
    assert_false(dm_server_is_usable(&sv->s[2], 10));
    assert_true(dm_server_is_usable(&sv->s[2], 11));
    /* Two servers (two pools) pointing to one host share its state. */
    struct dm_servers *other = dm_servers_create(1);
    assert_non_null(other);
    other->s[0].host = sv->s[0].host;
    assert_false(dm_server_is_usable(&other->s[0], 10));
    atomic_store(&sv->s[0].host->down, false);
    assert_true(dm_server_is_usable(&other->s[0], 10));
    dm_servers_destroy(other);
    dm_servers_destroy(sv);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_address_same_host_across_generations),
        cmocka_unit_test(test_distinct_addresses_ports_and_families),
        cmocka_unit_test(test_pointers_stay_valid_across_many_insertions),
        cmocka_unit_test(test_servers_without_a_table_have_private_hosts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
