/*
 * The pick past slow-start ramps and the rule of connection affinity
 * (balancers/pick.c), which the proxy's request path and the simulator share.
 */
#include "fixture.h"

#include "balancers/registry.h"

/* A bound connection stays on a usable server, leaves an unusable or ramp-full one. */
static void
test_affinity_keeps_a_usable_server(void **state)
{
    (void)state;
    struct dm_fixture *f = dm_fixture_create(2);
    struct dm_server *s = &f->sv->s[0];
    s->capacity = 4;
    uint64_t now = f->pick.now_us;
    assert_true(dm_server_keeps_affinity(s, now, true));
    assert_true(dm_server_keeps_affinity(s, now, false));
    atomic_store(&s->host->power, DM_POWER_DRAINING);
    assert_false(dm_server_keeps_affinity(s, now, false));
    atomic_store(&s->host->power, DM_POWER_AWAKE);
    atomic_store(&s->host->down, true);
    assert_false(dm_server_keeps_affinity(s, now, false));
    atomic_store(&s->host->down, false);
    /* Slow start: a ramp of 10 s begun now allows 1 request; one in flight fills it. */
    atomic_store(&s->host->ramp_from_us, now);
    atomic_store(&s->host->ramp_until_us, now + 10000000);
    dm_counter_add(&s->host->inflight, 1);
    assert_false(dm_server_keeps_affinity(s, now, false));
    atomic_store(&s->host->ramp_from_us, 0);
    atomic_store(&s->host->ramp_until_us, 0);
    assert_true(dm_server_keeps_affinity(s, now, true));
    dm_fixture_destroy(f);
}

/* Full (in flight = capacity): left only when the caller spills. */
static void
test_affinity_spills_from_a_full_server(void **state)
{
    (void)state;
    struct dm_fixture *f = dm_fixture_create(1);
    struct dm_server *s = &f->sv->s[0];
    s->capacity = 3;
    uint64_t now = f->pick.now_us;
    dm_counter_add(&s->host->inflight, 2);
    assert_true(dm_server_keeps_affinity(s, now, true));
    dm_counter_add(&s->host->inflight, 1);
    assert_false(dm_server_keeps_affinity(s, now, true));
    assert_true(dm_server_keeps_affinity(s, now, false)); /* a policy that binds itself */
    dm_counter_sub(&s->host->inflight, 1);
    assert_true(dm_server_keeps_affinity(s, now, true));
    dm_fixture_destroy(f);
}

/* queue_order: size: 1 us a byte, at most half the queue's timeout. */
static void
test_queue_offset(void **state)
{
    (void)state;
    const uint64_t queue_us = 5000000; /* timeouts.queue's default */
    assert_int_equal(dm_queue_offset_us(0, queue_us), 0);
    assert_int_equal(dm_queue_offset_us(10, queue_us), 10);
    assert_int_equal(dm_queue_offset_us(200000, queue_us), 200000);
    /* Larger responses than half the timeout's worth all wait the same offset. */
    assert_int_equal(dm_queue_offset_us(2499999, queue_us), 2499999);
    assert_int_equal(dm_queue_offset_us(2500000, queue_us), 2500000);
    assert_int_equal(dm_queue_offset_us(UINT64_MAX, queue_us), 2500000);
    /* A smaller response is never placed after a larger one that came at once. */
    for (uint64_t b = 1; b < 4000000; b = b * 3 + 1) {
        assert_true(dm_queue_offset_us(b - 1, queue_us) <= dm_queue_offset_us(b, queue_us));
        assert_true(dm_queue_offset_us(b, queue_us) <= queue_us / 2);
    }
    assert_int_equal(dm_queue_offset_us(100, 1000), 100);
    assert_int_equal(dm_queue_offset_us(100, 100), 50);
}

/* A ramp-full server is passed over while another can take the request, not otherwise. */
static void
test_pick_past_ramps(void **state)
{
    (void)state;
    struct dm_fixture *f = dm_fixture_create(2);
    for (size_t i = 0; i < 2; i++) {
        f->sv->s[i].capacity = 100;
    }
    dm_fixture_set_balancer(f, dm_balancer_find("roundrobin"), NULL);
    uint64_t now = f->pick.now_us;
    struct dm_host *h = f->sv->s[0].host;
    atomic_store(&h->ramp_from_us, now);
    atomic_store(&h->ramp_until_us, now + 10000000);
    dm_counter_add(&h->inflight, 1); /* full: its ramp allows 1 now */
    f->pick.tried = f->tried;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(dm_balancer_pick_past_ramps(f->bal, &f->pick, f->tried), 1);
        for (size_t b = 0; b < sizeof(f->tried); b++) {
            assert_int_equal(f->tried[b], 0); /* as it was */
        }
    }
    /* The other one down: the ramp does not refuse, server 0 it is. */
    atomic_store(&f->sv->s[1].host->down, true);
    assert_int_equal(dm_balancer_pick_past_ramps(f->bal, &f->pick, f->tried), 0);
    /* Both unusable: none. */
    atomic_store(&h->power, DM_POWER_ASLEEP);
    assert_int_equal(dm_balancer_pick_past_ramps(f->bal, &f->pick, f->tried), DM_NO_SERVER);
    dm_fixture_destroy(f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_affinity_keeps_a_usable_server),
        cmocka_unit_test(test_affinity_spills_from_a_full_server),
        cmocka_unit_test(test_pick_past_ramps),
        cmocka_unit_test(test_queue_offset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
