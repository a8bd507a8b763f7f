/* Tests for balancers/random.c: power of d choices with weighted draws. */
#include "dm_test.h"

#include <stdbool.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/fixture.h"
#include "balancers/registry.h"
#include "balancers/rng.h"
#include "balancers/servers.h"

static struct dm_fixture *
rnd_fixture_create(const unsigned *weights, size_t n, unsigned draws)
{
    struct dm_fixture *f = dm_fixture_create(n);
    dm_fixture_set_weights(f, weights);
    struct dm_bal_conf cf = { .draws = draws };
    dm_fixture_set_balancer(f, &dm_bal_random, &cf);
    return f;
}

/*
 * The proxy's side of a closed loop: every pick opens a request on the
 * chosen server (conns and inflight + 1); once more than `live` are open,
 * one open request chosen uniformly at random ends.
 */
struct live_set {
    int *server;
    size_t n;
};

static void
live_open(struct dm_servers *sv, struct live_set *l, int i)
{
    dm_counter_add(&sv->s[i].conns, 1);
    dm_counter_add(&sv->s[i].inflight, 1);
    l->server[l->n++] = i;
}

static void
live_close_random(struct dm_servers *sv, struct live_set *l, struct dm_rng *rng)
{
    size_t k = (size_t)dm_rng_below(rng, l->n);
    int i = l->server[k];
    l->server[k] = l->server[--l->n];
    dm_counter_sub(&sv->s[i].conns, 1);
    dm_counter_sub(&sv->s[i].inflight, 1);
}

static void
test_create_sets_ops_and_table(void **state)
{
    (void)state;
    struct dm_fixture *f = rnd_fixture_create(NULL, 3, 0);
    assert_ptr_equal(f->bal->ops, &dm_bal_random);
    assert_ptr_equal(f->bal->sv, f->sv);
    assert_ptr_equal(dm_balancer_find("random"), &dm_bal_random);
    dm_fixture_destroy(f);
}

static void
test_unusable_and_tried_servers_are_never_picked(void **state)
{
    (void)state;
    enum { N = 10 };
    static const unsigned w[N] = { 5, 1, 5, 1, 5, 1, 5, 1, 5, 1 };
    /* 1 and 2 go through the draws, 200 through the scan of the whole pool. */
    static const unsigned draws[] = { 1, 2, 3, 200 };
    for (size_t d = 0; d < sizeof(draws) / sizeof(draws[0]); d++) {
        struct dm_fixture *f = rnd_fixture_create(w, N, draws[d]);
        static const struct dm_fixture_out out = {
            .down = 0, .passive = 2, .asleep = 4, .booting = 6, .draining = 8, .tried = 1
        };
        dm_fixture_take_out(f, &out);
        unsigned count[N] = { 0 };
        for (int k = 0; k < 20000; k++) {
            int i = dm_balancer_pick(f->bal, &f->pick);
            assert_true(i == 3 || i == 5 || i == 7 || i == 9);
            count[i]++;
            /* Load moves, so that every eligible server is the lightest now and then. */
            dm_counter_add(&f->sv->s[i].conns, 1);
            if (k % 3 == 0) {
                for (size_t j = 0; j < N; j++) {
                    atomic_store(&f->sv->s[j].conns, 0);
                }
            }
        }
        for (size_t i = 3; i < N; i += 2) {
            assert_true(count[i] > 2000);
        }
        /* The passive down period ends: server 2 comes back. */
        f->pick.now_us++;
        assert_true(dm_fixture_picks_within(f, 2, 2000));
        dm_fixture_destroy(f);
    }
}

static void
test_no_usable_server_gives_no_server(void **state)
{
    (void)state;
    static const unsigned draws[] = { 1, 2, 200 };
    for (size_t d = 0; d < sizeof(draws) / sizeof(draws[0]); d++) {
        struct dm_fixture *f = rnd_fixture_create(NULL, 3, draws[d]);
        atomic_store(&f->sv->s[0].host->down, true);
        atomic_store(&f->sv->s[1].host->power, DM_POWER_ASLEEP);
        f->pick.tried = f->tried;
        f->tried[0] = 1u << 2;
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
        f->tried[0] = 0;
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 2);
        dm_fixture_destroy(f);

        f = rnd_fixture_create(NULL, 0, draws[d]);
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), DM_NO_SERVER);
        dm_fixture_destroy(f);
    }
}

/* With one draw the policy is weighted random, whatever the loads. */
static void
test_one_draw_is_weighted_random(void **state)
{
    (void)state;
    enum { N = 4, PICKS = 200000 };
    static const unsigned w[N] = { 1, 2, 3, 4 };
    struct dm_fixture *f = rnd_fixture_create(w, N, 1);
    atomic_store(&f->sv->s[3].conns, 1000);
    unsigned count[N] = { 0 };
    for (int k = 0; k < PICKS; k++) {
        count[dm_balancer_pick(f->bal, &f->pick)]++;
    }
    for (size_t i = 0; i < N; i++) {
        /* Binomial: 3% is over 4.5 standard deviations for the smallest share. */
        double want = PICKS * w[i] / 10.0;
        assert_true(count[i] > want * 0.97 && count[i] < want * 1.03);
    }
    dm_fixture_destroy(f);
}

/*
 * Two draws among three equal servers, server 0 the lightest and 2 the
 * heaviest: 2 is never chosen (the two draws are distinct), 0 is chosen
 * whenever it is drawn, 2/3 of the picks, and 1 the remaining third.
 */
static void
test_two_draws_choose_the_lighter(void **state)
{
    (void)state;
    enum { PICKS = 90000 };
    struct dm_fixture *f = rnd_fixture_create(NULL, 3, 2);
    atomic_store(&f->sv->s[0].conns, 1);
    atomic_store(&f->sv->s[1].conns, 5);
    atomic_store(&f->sv->s[2].conns, 10);
    unsigned count[3] = { 0 };
    for (int k = 0; k < PICKS; k++) {
        count[dm_balancer_pick(f->bal, &f->pick)]++;
    }
    assert_int_equal(count[2], 0);
    assert_true(count[0] > PICKS * 2 / 3 * 0.98 && count[0] < PICKS * 2 / 3 * 1.02);
    dm_fixture_destroy(f);

    /* Per unit of weight: 4 connections on weight 4 are lighter than 2 on weight 1. */
    static const unsigned w[2] = { 1, 4 };
    f = rnd_fixture_create(w, 2, 2);
    atomic_store(&f->sv->s[0].conns, 2);
    atomic_store(&f->sv->s[1].conns, 4);
    for (int k = 0; k < 100; k++) {
        assert_int_equal(dm_balancer_pick(f->bal, &f->pick), 1);
    }
    dm_fixture_destroy(f);
}

static void
test_zero_draws_means_two(void **state)
{
    (void)state;
    enum { N = 16 };
    struct dm_fixture *a = rnd_fixture_create(NULL, N, 0);
    struct dm_fixture *b = rnd_fixture_create(NULL, N, 2);
    for (size_t i = 0; i < N; i++) {
        atomic_store(&a->sv->s[i].conns, i * 7 % 5);
        atomic_store(&b->sv->s[i].conns, i * 7 % 5);
    }
    for (int k = 0; k < 1000; k++) {
        assert_int_equal(dm_balancer_pick(a->bal, &a->pick), dm_balancer_pick(b->bal, &b->pick));
    }
    dm_fixture_destroy(a);
    dm_fixture_destroy(b);
}

/* When d covers the pool (or exceeds the draw limit) the pick is the least loaded. */
static void
test_many_draws_pick_the_least_loaded(void **state)
{
    (void)state;
    enum { N = 100 };
    static const unsigned draws[] = { 100, 150, 80 };
    for (size_t d = 0; d < sizeof(draws) / sizeof(draws[0]); d++) {
        struct dm_fixture *f = rnd_fixture_create(NULL, N, draws[d]);
        for (size_t i = 0; i < N; i++) {
            atomic_store(&f->sv->s[i].conns, 10 + (i * 37) % 50);
        }
        atomic_store(&f->sv->s[33].conns, 3);
        atomic_store(&f->sv->s[66].conns, 3);
        unsigned count[N] = { 0 };
        for (int k = 0; k < 1000; k++) {
            count[dm_balancer_pick(f->bal, &f->pick)]++;
        }
        assert_int_equal(count[33] + count[66], 1000);
        /* Ties start from a random place: both get a fair part. */
        assert_true(count[33] > 400 && count[66] > 400);
        dm_fixture_destroy(f);
    }
}

/*
 * A pool of 1024 with all but three servers down: the draws mostly miss, so
 * the linear passes take over, and the three still share by weight.
 */
static void
test_mostly_down_pool_keeps_weights(void **state)
{
    (void)state;
    enum { N = 1024, PICKS = 60000 };
    struct dm_fixture *f = rnd_fixture_create(NULL, N, 1);
    for (size_t i = 0; i < N; i++) {
        atomic_store(&f->sv->s[i].host->power, DM_POWER_ASLEEP);
    }
    dm_balancer_destroy(f->bal);
    f->sv->s[10].weight = 1;
    f->sv->s[500].weight = 2;
    f->sv->s[1000].weight = 3;
    struct dm_bal_conf cf = { .draws = 1 };
    f->bal = dm_balancer_create(&dm_bal_random, f->sv, &cf);
    atomic_store(&f->sv->s[10].host->power, DM_POWER_AWAKE);
    atomic_store(&f->sv->s[500].host->power, DM_POWER_AWAKE);
    atomic_store(&f->sv->s[1000].host->power, DM_POWER_AWAKE);
    unsigned c10 = 0, c500 = 0, c1000 = 0;
    for (int k = 0; k < PICKS; k++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        c10 += i == 10;
        c500 += i == 500;
        c1000 += i == 1000;
    }
    assert_int_equal(c10 + c500 + c1000, PICKS);
    assert_true(c10 > PICKS / 6 * 0.95 && c10 < PICKS / 6 * 1.05);
    assert_true(c1000 > PICKS / 2 * 0.97 && c1000 < PICKS / 2 * 1.03);
    dm_fixture_destroy(f);
}

struct loop_result {
    uint64_t picks[DM_FIXTURE_MAX_SERVERS];
    uint64_t max_conns; /* the most connections any server held, after warm-up */
};

/* Runs the closed loop of live_set for `steps` picks, counting after `warmup`. */
static void
run_closed_loop(struct dm_fixture *f, size_t n, size_t live, int steps, int warmup,
                struct loop_result *out)
{
    struct live_set l = { calloc(live + 1, sizeof(int)), 0 };
    assert_non_null(l.server);
    *out = (struct loop_result){ { 0 }, 0 };
    for (int step = 0; step < steps; step++) {
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 0, n - 1);
        live_open(f->sv, &l, i);
        if (l.n > live) {
            live_close_random(f->sv, &l, &f->rng);
        }
        if (step >= warmup) {
            out->picks[i]++;
            for (size_t j = 0; j < n; j++) {
                uint64_t c = dm_counter_get(&f->sv->s[j].conns);
                out->max_conns = c > out->max_conns ? c : out->max_conns;
            }
        }
    }
    while (l.n > 0) {
        live_close_random(f->sv, &l, &f->rng);
    }
    for (size_t j = 0; j < n; j++) {
        assert_int_equal(dm_counter_get(&f->sv->s[j].conns), 0);
    }
    free(l.server);
}

/*
 * Under load (requests end uniformly at random, so a server's share of the
 * ends is its share of the open requests), picks follow the weights: each
 * draw is by weight, and the comparison keeps conns / weight level.
 */
static void
test_picks_follow_weights_under_load(void **state)
{
    (void)state;
    enum { N = 6, STEPS = 300000, WARMUP = 5000 };
    static const unsigned w[N] = { 1, 1, 2, 2, 4, 6 };
    struct dm_fixture *f = rnd_fixture_create(w, N, 2);
    struct loop_result *r = calloc(1, sizeof(*r));
    run_closed_loop(f, N, 800, STEPS, WARMUP, r);
    for (size_t i = 0; i < N; i++) {
        double want = (double)(STEPS - WARMUP) * w[i] / 16.0;
        assert_true(r->picks[i] > want * 0.95 && r->picks[i] < want * 1.05);
    }
    free(r);
    dm_fixture_destroy(f);
}

/*
 * The point of the policy: with 64 equal servers averaging 8 open requests,
 * one random draw lets some server reach far above the average (the balls
 * into bins maximum), two keep every server close to it.
 */
static void
test_two_draws_beat_one_on_max_load(void **state)
{
    (void)state;
    enum { N = 64, LIVE = 512, STEPS = 100000, WARMUP = 5000 };
    uint64_t max_load[3] = { 0 };
    for (unsigned d = 1; d <= 2; d++) {
        struct dm_fixture *f = rnd_fixture_create(NULL, N, d);
        struct loop_result *r = calloc(1, sizeof(*r));
        run_closed_loop(f, N, LIVE, STEPS, WARMUP, r);
        max_load[d] = r->max_conns;
        free(r);
        dm_fixture_destroy(f);
    }
    print_message("max open requests on one server (average 8): d=1 %llu, d=2 %llu\n",
                  (unsigned long long)max_load[1], (unsigned long long)max_load[2]);
    assert_true(max_load[2] < max_load[1]);
    assert_true(max_load[1] >= 18);
    assert_true(max_load[2] <= 14);
}

/* Four threads share the balancer and the table, as the workers do. */
static void
test_concurrent_picks_add_up(void **state)
{
    (void)state;
    enum { N = 16 };
    static const unsigned w[N] = { 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4 };
    struct dm_fixture *f = rnd_fixture_create(w, N, 2);
    dm_fixture_run_pickers(f, 3, 100000, 0); /* server 3 down, no keys */
    dm_fixture_destroy(f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_sets_ops_and_table),
        cmocka_unit_test(test_unusable_and_tried_servers_are_never_picked),
        cmocka_unit_test(test_no_usable_server_gives_no_server),
        cmocka_unit_test(test_one_draw_is_weighted_random),
        cmocka_unit_test(test_two_draws_choose_the_lighter),
        cmocka_unit_test(test_zero_draws_means_two),
        cmocka_unit_test(test_many_draws_pick_the_least_loaded),
        cmocka_unit_test(test_mostly_down_pool_keeps_weights),
        cmocka_unit_test(test_picks_follow_weights_under_load),
        cmocka_unit_test(test_two_draws_beat_one_on_max_load),
        cmocka_unit_test(test_concurrent_picks_add_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
