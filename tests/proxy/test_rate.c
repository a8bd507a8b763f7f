/* Tests for proxy/rate.c: the token bucket's arithmetic and the bounded table of buckets. */
#include "dm_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "proxy/rate.h"

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
v6(const char *ip)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip, &a->sin6_addr);
    return ss;
}

/* 10.0.x.y for i = x * 256 + y. */
static struct sockaddr_storage
nth(unsigned i)
{
    char ip[32];
    snprintf(ip, sizeof(ip), "10.0.%u.%u", (i >> 8) & 255, i & 255);
    return v4(ip, 1000);
}

#define SA(ss) ((const struct sockaddr *)&(ss))

static void
test_full_bucket_gives_burst_then_refuses_with_the_wait(void **state)
{
    (void)state;
    struct dm_rate_bucket b;
    dm_rate_bucket_init(&b, 5, 1000);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(dm_rate_bucket_take(&b, 5, 5, 1000), 0);
    }
    /* 5 a second: one token every 200 ms. */
    assert_int_equal(dm_rate_bucket_take(&b, 5, 5, 1000), 200);
    assert_int_equal(dm_rate_bucket_take(&b, 5, 5, 1150), 50);
    assert_int_equal(dm_rate_bucket_take(&b, 5, 5, 1199), 1);
    assert_int_equal(dm_rate_bucket_take(&b, 5, 5, 1200), 0);
    assert_int_equal(dm_rate_bucket_take(&b, 5, 5, 1200), 200);
    assert_int_equal(dm_rate_retry_after_s(200), 1);
    assert_int_equal(dm_rate_retry_after_s(1000), 1);
    assert_int_equal(dm_rate_retry_after_s(1001), 2);
    assert_int_equal(dm_rate_retry_after_s(0), 1);
}

static void
test_refill_is_capped_at_burst_and_never_overflows(void **state)
{
    (void)state;
    struct dm_rate_bucket b;
    dm_rate_bucket_init(&b, 3, 0);
    /* Idle for ages at the highest rate: still only burst tokens. */
    uint64_t later = UINT64_C(1) << 62;
    int taken = 0;
    while (dm_rate_bucket_take(&b, 1000000, 3, later) == 0) {
        taken++;
    }
    assert_int_equal(taken, 3);
    /* A rate of 1000000/s refills one token per microsecond, so after 1 ms at most 3 again. */
    taken = 0;
    while (dm_rate_bucket_take(&b, 1000000, 3, later + 1) == 0) {
        taken++;
    }
    assert_int_equal(taken, 3);
    /* Slow rates: 1 a second waits 1000 ms, 3 a second 334 (rounded up). */
    dm_rate_bucket_init(&b, 1, 0);
    assert_int_equal(dm_rate_bucket_take(&b, 1, 1, 0), 0);
    assert_int_equal(dm_rate_bucket_take(&b, 1, 1, 0), 1000);
    assert_int_equal(dm_rate_bucket_take(&b, 1, 1, 999), 1);
    assert_int_equal(dm_rate_bucket_take(&b, 1, 1, 1000), 0);
    dm_rate_bucket_init(&b, 1, 0);
    assert_int_equal(dm_rate_bucket_take(&b, 3, 1, 0), 0);
    assert_int_equal(dm_rate_bucket_take(&b, 3, 1, 0), 334);
    assert_int_equal(dm_rate_bucket_take(&b, 3, 1, 334), 0);
}

static void
test_clock_going_back_refills_nothing(void **state)
{
    (void)state;
    struct dm_rate_bucket b;
    dm_rate_bucket_init(&b, 1, 5000);
    assert_int_equal(dm_rate_bucket_take(&b, 10, 1, 5000), 0);
    /* Another worker's loop time, read a moment before. */
    assert_int_equal(dm_rate_bucket_take(&b, 10, 1, 4990), 100);
    assert_int_equal(dm_rate_bucket_take(&b, 10, 1, 5099), 1);
    assert_int_equal(dm_rate_bucket_take(&b, 10, 1, 5100), 0);
}

static void
test_lower_burst_after_reload_caps_the_bucket(void **state)
{
    (void)state;
    struct dm_rate_bucket b;
    dm_rate_bucket_init(&b, 100, 0);
    int taken = 0;
    while (dm_rate_bucket_take(&b, 1, 2, 0) == 0) {
        taken++;
    }
    assert_int_equal(taken, 2);
}

static void
test_steady_rate_over_many_steps(void **state)
{
    (void)state;
    /* 7 a second, a request every ms for 10 s: 7 * 10 + the burst of 4 pass. */
    struct dm_rate_bucket b;
    dm_rate_bucket_init(&b, 4, 0);
    unsigned passed = 0;
    for (uint64_t t = 0; t < 10000; t++) {
        uint64_t wait = dm_rate_bucket_take(&b, 7, 4, t);
        if (wait == 0) {
            passed++;
        } else {
            assert_true(wait <= 143);
        }
    }
    assert_true(passed >= 73 && passed <= 74);
}

static void
test_table_keys_by_address_not_port(void **state)
{
    (void)state;
    struct dm_ratetab *t = dm_ratetab_create(16);
    assert_non_null(t);
    for (unsigned i = 0; i < 2; i++) {
        struct sockaddr_storage a = v4("10.0.0.1", 1000 + i);
        assert_int_equal(dm_ratetab_take(t, SA(a), 1, 2, 0), 0);
    }
    struct sockaddr_storage a = v4("10.0.0.1", 3000);
    assert_int_equal(dm_ratetab_take(t, SA(a), 1, 2, 0), 1000);
    struct sockaddr_storage other = v4("10.0.0.2", 1000);
    assert_int_equal(dm_ratetab_take(t, SA(other), 1, 2, 0), 0);
    struct sockaddr_storage mapped = v6("::ffff:10.0.0.1");
    assert_int_equal(dm_ratetab_take(t, SA(mapped), 1, 2, 0),
                     1000); /* 10.0.0.1, mapped: its bucket */
    struct sockaddr_storage six = v6("2001:db8::1");
    assert_int_equal(dm_ratetab_take(t, SA(six), 1, 2, 0), 0); /* another family, another key */
    assert_int_equal(dm_ratetab_size(t), 3);
    struct sockaddr_storage unix_sa;
    memset(&unix_sa, 0, sizeof(unix_sa));
    unix_sa.ss_family = AF_UNIX;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(dm_ratetab_take(t, SA(unix_sa), 1, 1, 0), 0);
    }
    assert_int_equal(dm_ratetab_size(t), 3);
    dm_ratetab_destroy(t);
    dm_ratetab_destroy(NULL);
}

static void
test_full_table_forgets_the_least_recently_used(void **state)
{
    (void)state;
    enum { CAP = 8 };
    struct dm_ratetab *t = dm_ratetab_create(CAP);
    assert_non_null(t);
    for (unsigned i = 0; i < CAP; i++) {
        struct sockaddr_storage a = nth(i);
        assert_int_equal(dm_ratetab_take(t, SA(a), 1, 1, 0), 0);
    }
    assert_int_equal(dm_ratetab_size(t), CAP);
    /* Address 0 used again (refused): now 1 is the least recently used. */
    struct sockaddr_storage a0 = nth(0);
    assert_int_not_equal(dm_ratetab_take(t, SA(a0), 1, 1, 10), 0);
    struct sockaddr_storage n = nth(100);
    assert_int_equal(dm_ratetab_take(t, SA(n), 1, 1, 20), 0);
    assert_int_equal(dm_ratetab_size(t), CAP);
    struct sockaddr_storage a1 = nth(1);
    assert_false(dm_ratetab_has(t, SA(a1)));
    assert_true(dm_ratetab_has(t, SA(a0)));
    assert_true(dm_ratetab_has(t, SA(n)));
    /* Address 0 kept its empty bucket. */
    assert_int_not_equal(dm_ratetab_take(t, SA(a0), 1, 1, 30), 0);
    /* Many more addresses than the cap: the size stays at the cap, and the
     * newest CAP are the ones kept. */
    for (unsigned i = 1000; i < 1000 + 50 * CAP; i++) {
        struct sockaddr_storage a = nth(i);
        assert_int_equal(dm_ratetab_take(t, SA(a), 1, 1, 40), 0);
        assert_true(dm_ratetab_size(t) <= CAP);
    }
    assert_int_equal(dm_ratetab_size(t), CAP);
    for (unsigned i = 1000 + 49 * CAP; i < 1000 + 50 * CAP; i++) {
        struct sockaddr_storage a = nth(i);
        assert_true(dm_ratetab_has(t, SA(a)));
    }
    assert_false(dm_ratetab_has(t, SA(a0)));
    dm_ratetab_destroy(t);
}

static void
test_cap_of_one(void **state)
{
    (void)state;
    struct dm_ratetab *t = dm_ratetab_create(1);
    assert_non_null(t);
    for (unsigned i = 0; i < 20; i++) {
        struct sockaddr_storage a = nth(i % 3);
        assert_int_equal(dm_ratetab_take(t, SA(a), 1, 1, 0), 0); /* always forgotten: full */
        assert_int_equal(dm_ratetab_size(t), 1);
    }
    dm_ratetab_destroy(t);
}

static void
test_process_table(void **state)
{
    (void)state;
    struct sockaddr_storage a = v4("192.0.2.7", 1);
    assert_int_equal(dm_rate_take(SA(a), 2, 1, 100), 0);
    assert_int_equal(dm_rate_take(SA(a), 2, 1, 100), 500);
    assert_int_equal(dm_rate_take(SA(a), 2, 1, 600), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_bucket_gives_burst_then_refuses_with_the_wait),
        cmocka_unit_test(test_refill_is_capped_at_burst_and_never_overflows),
        cmocka_unit_test(test_clock_going_back_refills_nothing),
        cmocka_unit_test(test_lower_burst_after_reload_caps_the_bucket),
        cmocka_unit_test(test_steady_rate_over_many_steps),
        cmocka_unit_test(test_table_keys_by_address_not_port),
        cmocka_unit_test(test_full_table_forgets_the_least_recently_used),
        cmocka_unit_test(test_cap_of_one),
        cmocka_unit_test(test_process_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
