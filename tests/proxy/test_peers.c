/* Tests for proxy/peers.c: connections counted per client address, refused at the cap. */
#include "dm_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "proxy/peers.h"

static struct sockaddr_storage
v4(const char *ip, unsigned port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, ip, &a->sin_addr);
    return ss;
}

static struct sockaddr_storage
v6(const char *ip, unsigned port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    inet_pton(AF_INET6, ip, &a->sin6_addr);
    return ss;
}

#define SA(ss) ((const struct sockaddr *)&(ss))

static void
test_address_refused_at_its_cap_whatever_the_port(void **state)
{
    (void)state;
    bool counted;
    for (unsigned i = 0; i < 3; i++) {
        struct sockaddr_storage a = v4("10.0.0.1", 1000 + i);
        assert_true(dm_peers_take(SA(a), 3, &counted));
        assert_true(counted);
    }
    struct sockaddr_storage a = v4("10.0.0.1", 2000);
    assert_false(dm_peers_take(SA(a), 3, &counted));
    assert_false(counted);
    assert_int_equal(dm_peers_count(SA(a)), 3);
    /* A larger cap (a reload) lets one more in. */
    assert_true(dm_peers_take(SA(a), 4, &counted));
    for (unsigned i = 0; i < 4; i++) {
        dm_peers_release(SA(a));
    }
    assert_int_equal(dm_peers_count(SA(a)), 0);
}

static void
test_addresses_count_apart(void **state)
{
    (void)state;
    bool counted;
    struct sockaddr_storage a = v4("10.0.0.2", 1);
    struct sockaddr_storage b = v4("10.0.0.3", 1);
    struct sockaddr_storage c = v6("2001:db8::2", 1);     /* another family: another key */
    struct sockaddr_storage m = v6("::ffff:10.0.0.2", 7); /* a's address, mapped: a's key */
    assert_true(dm_peers_take(SA(a), 1, &counted));
    assert_false(dm_peers_take(SA(a), 1, &counted));
    assert_false(dm_peers_take(SA(m), 1, &counted)); /* through a dual-stack listener: the same */
    assert_int_equal(dm_peers_count(SA(m)), 1);
    assert_true(dm_peers_take(SA(b), 1, &counted));
    assert_true(dm_peers_take(SA(c), 1, &counted));
    assert_false(dm_peers_take(SA(c), 1, &counted));
    dm_peers_release(SA(a));
    assert_int_equal(dm_peers_count(SA(a)), 0);
    assert_int_equal(dm_peers_count(SA(b)), 1);
    assert_true(dm_peers_take(SA(a), 1, &counted));
    dm_peers_release(SA(a));
    dm_peers_release(SA(b));
    dm_peers_release(SA(c));
    assert_int_equal(dm_peers_count(SA(c)), 0);
}

static void
test_many_addresses_share_chains(void **state)
{
    (void)state;
    bool counted;
    char ip[32];
    for (unsigned i = 0; i < 20000; i++) {
        snprintf(ip, sizeof(ip), "10.%u.%u.%u", i >> 16, (i >> 8) & 255, i & 255);
        struct sockaddr_storage a = v4(ip, 1);
        assert_true(dm_peers_take(SA(a), 1, &counted));
    }
    for (unsigned i = 0; i < 20000; i++) {
        snprintf(ip, sizeof(ip), "10.%u.%u.%u", i >> 16, (i >> 8) & 255, i & 255);
        struct sockaddr_storage a = v4(ip, 1);
        assert_false(dm_peers_take(SA(a), 1, &counted));
        dm_peers_release(SA(a));
        assert_int_equal(dm_peers_count(SA(a)), 0);
    }
}

static void
test_other_families_pass_uncounted(void **state)
{
    (void)state;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    ss.ss_family = AF_UNIX;
    bool counted = true;
    assert_true(dm_peers_take(SA(ss), 1, &counted));
    assert_false(counted);
    assert_true(dm_peers_take(SA(ss), 1, &counted));
    assert_int_equal(dm_peers_count(SA(ss)), 0);
}

/*
 * The tables' hash is keyed, per process: addresses one IPv6 /64 holds
 * that all fall in one chain under the unkeyed hash (found here by trying,
 * as a client would) spread under the drawn key; and two draws differ.
 */
static void
test_the_table_hash_is_keyed(void **state)
{
    (void)state;
    enum { WANT = 64, CHAINS = 4096 };
    struct sockaddr_in6 a = { .sin6_family = AF_INET6 };
    assert_int_equal(inet_pton(AF_INET6, "2001:db8::", &a.sin6_addr), 1);
    uint8_t keys[WANT][DM_PEER_KEY_LEN];
    size_t found = 0;
    uint64_t aim = 0;
    for (uint32_t i = 0; found < WANT && i < 4000000; i++) {
        memcpy(&a.sin6_addr.s6_addr[12], &i, sizeof(i));
        uint8_t k[DM_PEER_KEY_LEN];
        assert_true(dm_peer_key((const struct sockaddr *)&a, k));
        uint64_t chain = dm_hash_bytes(k, DM_PEER_KEY_LEN) % CHAINS;
        if (found == 0) {
            aim = chain;
        }
        if (chain == aim) {
            memcpy(keys[found++], k, DM_PEER_KEY_LEN);
        }
    }
    assert_int_equal(found, WANT);
    dm_hash_key_init();
    struct dm_hash_secret first = dm_client_hash_key;
    unsigned hits[CHAINS] = { 0 }, most = 0;
    for (size_t i = 0; i < WANT; i++) {
        unsigned n = ++hits[dm_peer_hash(keys[i]) % CHAINS];
        most = n > most ? n : most;
    }
    assert_true(most <= 4); /* 64 in 4096 chains: five in one has odds of 3e-8 */
    dm_hash_key_init();
    assert_true(dm_client_hash_key.k0 != first.k0 || dm_client_hash_key.k1 != first.k1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_address_refused_at_its_cap_whatever_the_port),
        cmocka_unit_test(test_addresses_count_apart),
        cmocka_unit_test(test_many_addresses_share_chains),
        cmocka_unit_test(test_other_families_pass_uncounted),
        cmocka_unit_test(test_the_table_hash_is_keyed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
