/*
 * What the balancer tests share: a server table with a balancer on it, a
 * seeded generator and a tried set (the fixture); a way to take servers out
 * of the pick, one way each; a closed loop of servers that work at the speed
 * of their capacity; and four threads picking at once on one balancer.
 *
 * Every tests/balancers/test_<x>.c is its own executable, so everything here
 * is static inline: a test file uses what it needs, and the rest does not
 * warn. Assertions here are cmocka's: call these from the test's thread.
 */
#ifndef DM_TESTS_BALANCERS_FIXTURE_H
#define DM_TESTS_BALANCERS_FIXTURE_H

#include "dm_test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/hash.h"
#include "balancers/rng.h"
#include "balancers/servers.h"

#define DM_FIXTURE_MAX_SERVERS 1024 /* the largest table a test builds: the tried set holds it */
#define DM_FIXTURE_NAME_MAX    24   /* bytes of a server name, NUL included */
#define DM_FIXTURE_PICKERS     4    /* threads of dm_fixture_run_pickers() */
#define DM_FIXTURE_PICKERS_MAX 64   /* servers dm_fixture_run_pickers() counts */

struct dm_fixture {
    struct dm_servers *sv;
    struct dm_balancer *bal;
    struct dm_pick pick; /* rng is &rng, seeded with 42; now_us is 1 s; tried is NULL */
    struct dm_rng rng;
    uint8_t tried[DM_FIXTURE_MAX_SERVERS / 8]; /* zero: point pick.tried here to use it */
    char (*names)[DM_FIXTURE_NAME_MAX];        /* one per server when a test names them */
};

/*
 * Creates a fixture of n zeroed servers (weight and capacity 1) and no
 * balancer yet: set the table up, then call dm_fixture_set_balancer().
 */
static inline struct dm_fixture *
dm_fixture_create(size_t n)
{
    struct dm_fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->sv = dm_servers_create(n);
    assert_non_null(f->sv);
    dm_rng_init(&f->rng, 42);
    f->pick.rng = &f->rng;
    f->pick.now_us = 1000000;
    return f;
}

/* Frees the balancer, the table, the names and the fixture. */
static inline void
dm_fixture_destroy(struct dm_fixture *f)
{
    dm_balancer_destroy(f->bal);
    dm_servers_destroy(f->sv);
    free(f->names);
    free(f);
}

/* Gives every server weights[i], or 1 when weights is NULL. */
static inline void
dm_fixture_set_weights(struct dm_fixture *f, const unsigned *weights)
{
    for (size_t i = 0; i < f->sv->n; i++) {
        f->sv->s[i].weight = weights != NULL ? weights[i] : 1;
    }
}

/*
 * Creates the policy ops over the table as it stands now (cf may be NULL),
 * destroying the balancer the fixture had, if any.
 */
static inline void
dm_fixture_set_balancer(struct dm_fixture *f, const struct dm_balancer_ops *ops,
                        const struct dm_bal_conf *cf)
{
    dm_balancer_destroy(f->bal);
    f->bal = dm_balancer_create(ops, f->sv, cf);
    assert_non_null(f->bal);
}

/*
 * A fixture for a policy that goes by capacity: server i has capacity
 * caps[i] (1 when caps is NULL) and weight n - i, so that weights, which are
 * not such a policy's business, disagree with the capacities.
 */
static inline struct dm_fixture *
dm_fixture_create_by_capacity(const struct dm_balancer_ops *ops, const unsigned *caps, size_t n)
{
    struct dm_fixture *f = dm_fixture_create(n);
    for (size_t i = 0; i < n; i++) {
        f->sv->s[i].capacity = caps != NULL ? caps[i] : 1;
        f->sv->s[i].weight = (unsigned)(n - i);
    }
    dm_fixture_set_balancer(f, ops, NULL);
    return f;
}

/* The servers dm_fixture_take_out() takes out of the pick, one way each. */
struct dm_fixture_out {
    size_t down;     /* marked down by the health checks */
    size_t passive;  /* passively down until now_us + 1 */
    size_t asleep;   /* DM_POWER_ASLEEP */
    size_t booting;  /* DM_POWER_BOOTING */
    size_t draining; /* DM_POWER_DRAINING */
    size_t tried;    /* the only server in the tried set, which pick.tried now points to */
};

static inline void
dm_fixture_take_out(struct dm_fixture *f, const struct dm_fixture_out *out)
{
    atomic_store(&f->sv->s[out->down].host->down, true);
    atomic_store(&f->sv->s[out->passive].host->down_until_us, f->pick.now_us + 1);
    atomic_store(&f->sv->s[out->asleep].host->power, DM_POWER_ASLEEP);
    atomic_store(&f->sv->s[out->booting].host->power, DM_POWER_BOOTING);
    atomic_store(&f->sv->s[out->draining].host->power, DM_POWER_DRAINING);
    f->pick.tried = f->tried;
    f->tried[out->tried / 8] = (uint8_t)(1u << (out->tried % 8));
}

/* Picks up to tries times with f->pick; true as soon as a pick gives server. */
static inline bool
dm_fixture_picks_within(struct dm_fixture *f, int server, int tries)
{
    for (int k = 0; k < tries; k++) {
        if (dm_balancer_pick(f->bal, &f->pick) == server) {
            return true;
        }
    }
    return false;
}

/*
 * A closed loop with servers that work at the speed of their capacity: live
 * requests are always in the system; at each step one ends, at a busy server
 * chosen with probability proportional to its capacity (the next to finish),
 * and a new one is picked. Adds the picks of the steps from warmup on to
 * picks[i]. The picks then follow capacity as long as the policy keeps every
 * server busy. Leaves the live requests counted in inflight.
 */
static inline void
dm_fixture_run_capacity_loop(struct dm_fixture *f, uint64_t live, int steps, int warmup,
                             uint64_t *picks)
{
    size_t n = f->sv->n;
    for (uint64_t k = 0; k < live; k++) {
        dm_counter_add(&f->sv->s[dm_balancer_pick(f->bal, &f->pick)].inflight, 1);
    }
    for (int step = 0; step < steps; step++) {
        uint64_t busy = 0;
        for (size_t j = 0; j < n; j++) {
            busy += dm_counter_get(&f->sv->s[j].inflight) > 0 ? f->sv->s[j].capacity : 0;
        }
        uint64_t r = dm_rng_below(&f->rng, busy);
        size_t j = 0;
        for (;; j++) {
            uint64_t c = dm_counter_get(&f->sv->s[j].inflight) > 0 ? f->sv->s[j].capacity : 0;
            if (r < c) {
                break;
            }
            r -= c;
        }
        dm_counter_sub(&f->sv->s[j].inflight, 1);
        int i = dm_balancer_pick(f->bal, &f->pick);
        assert_in_range(i, 0, n - 1);
        dm_counter_add(&f->sv->s[i].inflight, 1);
        if (step >= warmup) {
            picks[i]++;
        }
    }
}

/* One thread of dm_fixture_run_pickers(). */
struct dm_fixture_picker {
    struct dm_balancer *bal;
    struct dm_servers *sv;
    uint64_t seed;
    int picks;     /* picks to make */
    uint64_t keys; /* > 0: each pick's key is the hash of a number below keys */
    int down;      /* the server that must never come out */
    uint64_t count[DM_FIXTURE_PICKERS_MAX];
    unsigned errors; /* picks out of the table, or of the down server */
};

/*
 * The proxy's side, as one worker: every pick opens a request on its server
 * (conns and inflight + 1); with 64 open, one chosen at random ends. At the
 * end every request it opened has ended.
 */
static inline void *
dm_fixture_picker_run(void *p)
{
    struct dm_fixture_picker *a = p;
    struct dm_rng rng;
    dm_rng_init(&rng, a->seed);
    struct dm_pick in = { .rng = &rng, .now_us = 1 };
    int open[64];
    size_t nopen = 0;
    for (int k = 0; k < a->picks; k++) {
        if (a->keys > 0) {
            uint64_t key = dm_rng_below(&rng, a->keys);
            in.key = dm_hash_bytes(&key, sizeof(key));
        }
        int i = dm_balancer_pick(a->bal, &in);
        if (i < 0 || i >= (int)a->sv->n || i == a->down) {
            a->errors++;
            continue;
        }
        a->count[i]++;
        dm_counter_add(&a->sv->s[i].conns, 1);
        dm_counter_add(&a->sv->s[i].inflight, 1);
        open[nopen++] = i;
        if (nopen == 64) {
            size_t j = (size_t)dm_rng_below(&rng, nopen);
            dm_counter_sub(&a->sv->s[open[j]].conns, 1);
            dm_counter_sub(&a->sv->s[open[j]].inflight, 1);
            open[j] = open[--nopen];
        }
    }
    while (nopen > 0) {
        nopen--;
        dm_counter_sub(&a->sv->s[open[nopen]].conns, 1);
        dm_counter_sub(&a->sv->s[open[nopen]].inflight, 1);
    }
    return NULL;
}

/*
 * Marks server down down, then runs DM_FIXTURE_PICKERS threads (seeds 100,
 * 101, ...) that share the balancer and the table, as the workers do, each
 * making picks picks (with keys as in struct dm_fixture_picker). Checks that
 * no pick failed or gave the down server, that every pick was counted, and
 * that every counter is back to zero.
 */
static inline void
dm_fixture_run_pickers(struct dm_fixture *f, int down, int picks, uint64_t keys)
{
    assert_true(f->sv->n <= DM_FIXTURE_PICKERS_MAX);
    atomic_store(&f->sv->s[down].host->down, true);
    struct dm_fixture_picker args[DM_FIXTURE_PICKERS];
    pthread_t th[DM_FIXTURE_PICKERS];
    for (int t = 0; t < DM_FIXTURE_PICKERS; t++) {
        args[t] = (struct dm_fixture_picker){
            .bal = f->bal, .sv = f->sv, .seed = 100 + t, .picks = picks, .keys = keys, .down = down
        };
        assert_int_equal(pthread_create(&th[t], NULL, dm_fixture_picker_run, &args[t]), 0);
    }
    uint64_t total = 0;
    for (int t = 0; t < DM_FIXTURE_PICKERS; t++) {
        assert_int_equal(pthread_join(th[t], NULL), 0);
        assert_int_equal(args[t].errors, 0);
        for (size_t i = 0; i < f->sv->n; i++) {
            total += args[t].count[i];
        }
    }
    assert_int_equal(total, DM_FIXTURE_PICKERS * picks);
    for (size_t i = 0; i < f->sv->n; i++) {
        assert_int_equal(dm_counter_get(&f->sv->s[i].conns), 0);
        assert_int_equal(dm_counter_get(&f->sv->s[i].inflight), 0);
    }
}

#endif
