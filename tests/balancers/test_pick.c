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

/* queue_order: size: 1 us a byte of the class's smallest size, at most half the queue's timeout. */
static void
test_queue_offset(void **state)
{
    (void)state;
    const uint64_t queue_us = 5000000; /* timeouts.queue's default */
    assert_int_equal(dm_queue_class(0), 0);
    assert_int_equal(dm_queue_class(127), 0);
    assert_int_equal(dm_queue_class(128), 1);
    assert_int_equal(dm_queue_class(191), 1);
    assert_int_equal(dm_queue_class(192), 2);
    assert_int_equal(dm_queue_class(256), 3);
    assert_int_equal(dm_queue_class(4u << 20), DM_QUEUE_CLASSES - 1);
    assert_int_equal(dm_queue_class(UINT64_MAX), DM_QUEUE_CLASSES - 1);
    assert_int_equal(dm_queue_class_offset_us(0, queue_us), 0);
    assert_int_equal(dm_queue_class_offset_us(1, queue_us), 128);
    assert_int_equal(dm_queue_class_offset_us(2, queue_us), 192);
    assert_int_equal(dm_queue_class_offset_us(dm_queue_class(200000), queue_us), 196608);
    /* Larger responses than half the timeout's worth all wait the same offset. */
    assert_int_equal(dm_queue_class_offset_us(dm_queue_class(4000000), queue_us), 2500000);
    assert_int_equal(dm_queue_class_offset_us(DM_QUEUE_CLASSES - 1, queue_us), 2500000);
    assert_int_equal(dm_queue_class_offset_us(1000, queue_us), 2500000);
    assert_int_equal(dm_queue_class_offset_us(1, 100), 50);
    /* Every size is in the class whose smallest size is at or below it and
     * within 1.5x of it; a smaller response is never placed after a larger
     * one that came at once. */
    for (uint64_t b = 1; b < (8u << 20); b = b * 3 / 2 + 1) {
        unsigned c = dm_queue_class(b);
        uint64_t least = dm_queue_class_offset_us(c, UINT64_MAX);
        assert_true(least <= b);
        assert_true(c == 0 || c == DM_QUEUE_CLASSES - 1 || b < least + least / 2);
        assert_true(dm_queue_class(b - 1) <= c);
        assert_true(dm_queue_class_offset_us(dm_queue_class(b - 1), queue_us) <=
                    dm_queue_class_offset_us(c, queue_us));
        assert_true(dm_queue_class_offset_us(c, queue_us) <= queue_us / 2);
    }
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
