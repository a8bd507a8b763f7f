/*
 * Tests for balancers/sessions.c: live sessions over the allocator. Loads
 * and constraints are checked from scratch against what the test itself
 * joined, never from the table's own sums.
 */
#include "dm_test.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/rng.h"
#include "balancers/sessions.h"

#define TOL 1e-9

static const double rates4[] = { 15, 20, 25, 30 };

static struct dm_sessions_conf
conf(bool batch)
{
    return (struct dm_sessions_conf){
        .dmax_ms = HUGE_VAL,
        .dvmax_ms = HUGE_VAL,
        .batch = batch,
        .max_groups = 64,
        .max_members = 8,
        .solve = { .alpha = 1,
                   .balance = { .iterations = 2000, .t0 = 0.05, .cooling = 0.93, .steps = 20 },
                   .rates = { .iterations = 2000, .t0 = 0.05, .cooling = 0.93, .steps = 20 } },
    };
}

/* One ask of game rates4 at frame load fl, asking 30, from the delays d. */
static struct dm_sessions_ask
ask(const char *group, double fl, const double *d)
{
    return (struct dm_sessions_ask){
        .group = group,
        .group_len = group != NULL ? strlen(group) : 0,
        .frame_load = fl,
        .rates = rates4,
        .nrates = 4,
        .want = 3,
        .delay_ms = d,
    };
}

/* The ask with a client of one double, which row_of() reads back. */
static struct dm_sessions_ask
with_client(struct dm_sessions_ask a, const double *client)
{
    a.client = client;
    a.client_len = sizeof(*client);
    return a;
}

static double
server_load(const struct dm_sessions *t, int s)
{
    struct dm_sessions_stats st;
    struct dm_sessions_server_stats per[8];
    dm_sessions_stats(t, &st, per, 8);
    return per[s].load;
}

/* Arrivals go by the greedy rule; clients of a group follow it; the last one takes its load. */
static void
test_groups_are_placed_whole_and_leave_whole(void **state)
{
    (void)state;
    const void *keys[3] = { &keys[0], &keys[1], &keys[2] };
    struct dm_sessions_server sv[3] = { { 1000, keys[0] }, { 1000, keys[1] }, { 1000, keys[2] } };
    struct dm_sessions_conf cf = conf(false);
    struct dm_sessions *t = dm_sessions_create(&cf, sv, 3);
    assert_non_null(t);
    static const double d[3] = { 10, 10, 10 };
    struct dm_sessions_member *m[6];
    struct dm_sessions_place pl;
    /* Three groups of 300 (10 x 30) spread over the three servers. */
    assert_int_equal(dm_sessions_join(t, &(struct dm_sessions_ask){ 0 }, &m[0], &pl), -EINVAL);
    struct dm_sessions_ask a = ask("A", 10, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[0], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 0);
    assert_true(pl.rate == 30 && !pl.lowered);
    a = ask("B", 10, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[1], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 1);
    /* A second client of A goes to A's server, whatever the loads say. */
    a = ask("A", 50, d); /* its own game is not the group's: the group's counts */
    assert_int_equal(dm_sessions_join(t, &a, &m[2], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 0);
    assert_true(pl.rate == 30);
    assert_true(fabs(server_load(t, 0) - 300) < TOL);
    a = ask(NULL, 10, d); /* no id: a group of its own */
    assert_int_equal(dm_sessions_join(t, &a, &m[3], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 2);
    a = ask(NULL, 10, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[4], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 0); /* 300, 300, 300: the lowest index */
    struct dm_sessions_stats st;
    struct dm_sessions_server_stats per[3];
    dm_sessions_stats(t, &st, per, 3);
    assert_int_equal(st.groups, 4);
    assert_int_equal(st.members, 5);
    assert_int_equal(per[0].groups, 2);
    assert_int_equal(per[0].members, 3);
    assert_true(fabs(per[0].load - 600) < TOL && per[0].capacity == 1000);
    /* LBF: loads 600, 300, 300. */
    assert_true(fabs(st.lbf - sqrt((200.0 * 200 + 100 * 100 * 2) / 3)) < 1e-6);
    /* A's first client leaves: A stays; its second leaves: A's 300 go. */
    dm_sessions_leave(t, m[0]);
    assert_true(fabs(server_load(t, 0) - 600) < TOL);
    dm_sessions_leave(t, m[2]);
    assert_true(fabs(server_load(t, 0) - 300) < TOL);
    /* The id is free again: a new A is placed anew, on the least loaded server. */
    dm_sessions_leave(t, m[4]);
    a = ask("A", 10, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[0], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 0);
    dm_sessions_leave(t, m[0]);
    dm_sessions_leave(t, m[1]);
    dm_sessions_leave(t, m[3]);
    dm_sessions_leave(t, NULL);
    dm_sessions_stats(t, &st, per, 3);
    assert_int_equal(st.groups, 0);
    for (int s = 0; s < 3; s++) {
        assert_true(per[s].load == 0);
    }
    assert_int_equal(st.placed, 5);
    dm_sessions_destroy(t);
    dm_sessions_destroy(NULL);
}

/* When the servers cannot take the asked rate, the highest rate that fits; then -ENOSPC. */
static void
test_rate_is_lowered_as_little_as_possible(void **state)
{
    (void)state;
    struct dm_sessions_server sv[2] = { { 700, &sv[0] }, { 700, &sv[1] } };
    struct dm_sessions_conf cf = conf(false);
    struct dm_sessions *t = dm_sessions_create(&cf, sv, 2);
    assert_non_null(t);
    static const double d[2] = { 10, 10 };
    struct dm_sessions_member *m[8];
    struct dm_sessions_place pl;
    /* 300 each: two per server fit (600 of 700). */
    for (int i = 0; i < 4; i++) {
        struct dm_sessions_ask a = ask(NULL, 10, d);
        assert_int_equal(dm_sessions_join(t, &a, &m[i], &pl), DM_SESSIONS_PLACED);
        assert_true(pl.rate == 30 && !pl.lowered);
    }
    /* 100 left on each: at 5 per frame, 20 (100) fits and 25 (125) does not. */
    struct dm_sessions_ask a = ask("x", 5, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[4], &pl), DM_SESSIONS_PLACED);
    assert_true(pl.rate == 20 && pl.lowered);
    assert_int_equal(pl.tier, 1);
    a = ask("y", 5, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[5], &pl), DM_SESSIONS_PLACED);
    assert_true(pl.rate == 20);
    a = ask("z", 5, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[6], &pl), -ENOSPC);
    /* A refused group leaves nothing behind: its id is not taken. */
    a = ask("z", 5, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[6], &pl), -ENOSPC);
    struct dm_sessions_stats st;
    dm_sessions_stats(t, &st, NULL, 0);
    assert_int_equal(st.groups, 6);
    assert_int_equal(st.lowered, 2);
    assert_int_equal(st.refused, 2);
    for (int i = 0; i < 6; i++) {
        dm_sessions_leave(t, m[i]);
    }
    dm_sessions_destroy(t);
}

/* A later client out of reach of its group's server is refused; the group stays as it was. */
static void
test_member_out_of_reach_is_refused(void **state)
{
    (void)state;
    struct dm_sessions_server sv[2] = { { 1000, &sv[0] }, { 1000, &sv[1] } };
    struct dm_sessions_conf cf = conf(false);
    cf.dmax_ms = 150;
    cf.dvmax_ms = 50;
    struct dm_sessions *t = dm_sessions_create(&cf, sv, 2);
    assert_non_null(t);
    static const double near0[2] = { 10, 100 }, near1[2] = { 100, 10 }, mid[2] = { 40, 40 };
    static const double far0[2] = { 200, 30 };
    double nan0[2] = { NAN, 30 };
    struct dm_sessions_member *m[4], *x = NULL;
    struct dm_sessions_place pl;
    struct dm_sessions_ask a = ask("g", 10, near0);
    assert_int_equal(dm_sessions_join(t, &a, &m[0], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 0);
    /* 10 and 100 on server 0: spread 90 > 50. */
    a = ask("g", 10, near1);
    assert_int_equal(dm_sessions_join(t, &a, &x, &pl), -ERANGE);
    assert_null(x);
    assert_int_equal(pl.server, 0);
    /* 200 > dmax. */
    a = ask("g", 10, far0);
    assert_int_equal(dm_sessions_join(t, &a, &x, &pl), -ERANGE);
    /* NaN: server 0 is not for this client (down, or tried). */
    a = ask("g", 10, nan0);
    assert_int_equal(dm_sessions_join(t, &a, &x, &pl), -ERANGE);
    /* 10 and 40: within both. */
    a = ask("g", 10, mid);
    assert_int_equal(dm_sessions_join(t, &a, &m[1], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 0);
    /* Now 10, 40 and a 55 would spread 45: fine; a 61 would not. */
    static const double d55[2] = { 55, 0 }, d61[2] = { 61, 0 };
    a = ask("g", 10, d61);
    assert_int_equal(dm_sessions_join(t, &a, &x, &pl), -ERANGE);
    a = ask("g", 10, d55);
    assert_int_equal(dm_sessions_join(t, &a, &m[2], &pl), DM_SESSIONS_PLACED);
    /* Once the 10 leaves, the spread is 40..55 and a 61 fits. */
    dm_sessions_leave(t, m[0]);
    a = ask("g", 10, d61);
    assert_int_equal(dm_sessions_join(t, &a, &m[0], &pl), DM_SESSIONS_PLACED);
    assert_true(fabs(server_load(t, 0) - 300) < TOL);
    /* A new group whose only reach is server 1 goes there, lighter or not. */
    a = ask("h", 10, nan0);
    assert_int_equal(dm_sessions_join(t, &a, &m[3], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 1);
    for (int i = 0; i < 4; i++) {
        dm_sessions_leave(t, m[i]);
    }
    dm_sessions_destroy(t);
}

/* max_members and max_groups bound the table. */
static void
test_limits(void **state)
{
    (void)state;
    struct dm_sessions_server sv[1] = { { 1e9, &sv[0] } };
    struct dm_sessions_conf cf = conf(false);
    cf.max_groups = 2;
    cf.max_members = 3;
    struct dm_sessions *t = dm_sessions_create(&cf, sv, 1);
    assert_non_null(t);
    static const double d[1] = { 1 };
    struct dm_sessions_member *m[5], *x;
    struct dm_sessions_place pl;
    struct dm_sessions_ask a = ask("g", 1, d);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dm_sessions_join(t, &a, &m[i], &pl), DM_SESSIONS_PLACED);
    }
    assert_int_equal(dm_sessions_join(t, &a, &x, &pl), -EMLINK);
    a = ask("h", 1, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[3], &pl), DM_SESSIONS_PLACED);
    a = ask("i", 1, d);
    assert_int_equal(dm_sessions_join(t, &a, &x, &pl), -EUSERS);
    /* Ids are bounded, and so are rate lists and client bytes. */
    char big[DM_SESSIONS_ID_MAX + 2];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    a = ask(big, 1, d);
    assert_int_equal(dm_sessions_join(t, &a, &x, &pl), -EINVAL);
    a = ask("h", 1, d);
    a.client_len = DM_SESSIONS_CLIENT_MAX + 1;
    a.client = big;
    assert_int_equal(dm_sessions_join(t, &a, &x, &pl), -EINVAL);
    static const double down[] = { 20, 10 };
    a = ask("h", 1, d);
    a.rates = down;
    a.nrates = 2;
    a.want = 1;
    assert_int_equal(dm_sessions_join(t, &a, &x, &pl), -EINVAL);
    dm_sessions_leave(t, m[3]);
    a = ask("i", 1, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[3], &pl), DM_SESSIONS_PLACED);
    for (int i = 0; i < 4; i++) {
        dm_sessions_leave(t, m[i]);
    }
    dm_sessions_destroy(t);
    cf.max_groups = 0;
    assert_null(dm_sessions_create(&cf, sv, 1));
    cf = conf(false);
    sv[0].capacity = NAN;
    assert_null(dm_sessions_create(&cf, sv, 1));
}

/*
 * Batch: arrivals wait; the pass places them all at once, balanced, with
 * every client of a group known; the running groups do not move.
 */
static void
test_batch_places_waiting_groups_together(void **state)
{
    (void)state;
    struct dm_sessions_server sv[3] = { { 2000, &sv[0] }, { 2000, &sv[1] }, { 2000, &sv[2] } };
    struct dm_sessions_conf cf = conf(true);
    cf.dvmax_ms = 50;
    struct dm_sessions *t = dm_sessions_create(&cf, sv, 3);
    assert_non_null(t);
    struct dm_rng rng;
    dm_rng_init(&rng, 42);
    static const double d[3] = { 10, 10, 10 };
    static const double near2[3] = { 200, 200, 20 }; /* with a 10: only server 2 holds C4 */
    struct dm_sessions_member *m[16];
    struct dm_sessions_place pl;
    size_t n = 0;
    /* Loads 600, 450, 300, 300, 150, 150 (frame loads 20, 15, 10, 10, 5, 5). */
    static const double fl[6] = { 20, 15, 10, 10, 5, 5 };
    static const char *const ids[6] = { "a", "b", "c", "d", "e", "f" };
    for (int i = 0; i < 6; i++) {
        struct dm_sessions_ask a = ask(ids[i], fl[i], d);
        assert_int_equal(dm_sessions_join(t, &a, &m[n++], &pl), DM_SESSIONS_WAITING);
    }
    /* A second client of "a" arrives in the same window: "a" must go to server 2. */
    struct dm_sessions_ask a = ask("a", 20, near2);
    assert_int_equal(dm_sessions_join(t, &a, &m[n++], &pl), DM_SESSIONS_WAITING);
    /* A third, 200 from every server but 80 from server 2 (the spread with
     * 10 is 70 > dvmax there): out of reach, refused at once, and "a" is
     * still placed by the pass (it made the whole group unplaceable). */
    static const double far[3] = { 200, 200, 80 };
    struct dm_sessions_member *gone = NULL;
    a = ask("a", 20, far);
    assert_int_equal(dm_sessions_join(t, &a, &gone, &pl), -ERANGE);
    assert_null(gone);
    assert_int_equal(dm_sessions_waiting(t), 6);
    assert_int_equal(dm_sessions_status(t, m[0], &pl), DM_SESSIONS_WAITING);
    assert_int_equal(dm_sessions_batch(t, &rng), 6);
    assert_int_equal(dm_sessions_waiting(t), 0);
    assert_int_equal(dm_sessions_batch(t, &rng), 0);
    struct dm_sessions_place first;
    assert_int_equal(dm_sessions_status(t, m[0], &first), DM_SESSIONS_PLACED);
    assert_int_equal(first.server, 2);
    assert_int_equal(dm_sessions_status(t, m[6], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 2);
    /* 1950 in all, with "a"'s 600 bound to server 2: 750, 600, 600 is the best split. */
    struct dm_sessions_stats st;
    struct dm_sessions_server_stats per[3];
    dm_sessions_stats(t, &st, per, 3);
    assert_int_equal(st.groups, 6);
    assert_true(st.lbf <= sqrt(15000.0 / 3) + 1e-6);
    double total = per[0].load + per[1].load + per[2].load;
    assert_true(fabs(total - 1950) < TOL);
    for (int s = 0; s < 3; s++) {
        assert_true(per[s].load <= 2000);
    }
    /* A second window: the placed groups stay where they are. */
    int where[6];
    for (int i = 0; i < 6; i++) {
        assert_int_equal(dm_sessions_status(t, m[i], &pl), DM_SESSIONS_PLACED);
        where[i] = pl.server;
    }
    a = ask("g", 60, d); /* 1800: fits only on the least loaded server */
    assert_int_equal(dm_sessions_join(t, &a, &m[n++], &pl), DM_SESSIONS_WAITING);
    a = ask("h", 100, d); /* 3000: fits nowhere, even at 15 (1500 > what is left) */
    assert_int_equal(dm_sessions_join(t, &a, &m[n++], &pl), DM_SESSIONS_WAITING);
    /* A later client of a placed group joins it at once. */
    a = ask("b", 15, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[n++], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, where[1]);
    assert_int_equal(dm_sessions_batch(t, &rng), 2);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(dm_sessions_status(t, m[i], &pl), DM_SESSIONS_PLACED);
        assert_int_equal(pl.server, where[i]);
    }
    assert_int_equal(dm_sessions_status(t, m[7], &pl), DM_SESSIONS_PLACED);
    assert_true(pl.lowered); /* 1800 at 30 does not fit beside 650: a lower rate does */
    assert_int_equal(dm_sessions_status(t, m[8], &pl), -ENOSPC);
    dm_sessions_stats(t, &st, per, 3);
    for (int s = 0; s < 3; s++) {
        assert_true(per[s].load <= 2000);
    }
    /* The refused group's id is free while its client is still being answered. */
    a = ask("h", 1, d);
    assert_int_equal(dm_sessions_join(t, &a, &m[n++], &pl), DM_SESSIONS_WAITING);
    for (size_t i = 0; i < n; i++) {
        dm_sessions_leave(t, m[i]);
    }
    dm_sessions_stats(t, &st, per, 3);
    assert_int_equal(st.groups + st.waiting, 0);
    for (int s = 0; s < 3; s++) {
        assert_true(per[s].load == 0);
    }
    dm_sessions_destroy(t);
}

struct rowctx {
    unsigned calls;
    double base;
};

/* Client bytes are one double: the client's delay to every server, plus base. */
static void
row_of(void *arg, const void *client, size_t len, double *row)
{
    struct rowctx *rc = arg;
    double d;
    assert_int_equal(len, sizeof(d));
    memcpy(&d, client, sizeof(d));
    rc->calls++;
    for (size_t s = 0; s < 3; s++) {
        row[s] = d + rc->base;
    }
}

/* Three servers keyed by k[0..2], and groups "a", "b", "c" placed one on each (m[0..2]). */
static struct dm_sessions *
three_groups(int *k, const struct dm_sessions_conf *cf, struct dm_sessions_member **m)
{
    struct dm_sessions_server sv[3] = { { 1000, &k[0] }, { 1000, &k[1] }, { 1000, &k[2] } };
    struct dm_sessions *t = dm_sessions_create(cf, sv, 3);
    assert_non_null(t);
    double cd = 10, d[3] = { 10, 10, 10 };
    struct dm_sessions_place pl;
    static const char *const ids[3] = { "a", "b", "c" };
    for (int i = 0; i < 3; i++) {
        struct dm_sessions_ask a = with_client(ask(ids[i], 10, d), &cd);
        assert_int_equal(dm_sessions_join(t, &a, &m[i], &pl), DM_SESSIONS_PLACED);
        assert_int_equal(pl.server, i);
    }
    return t;
}

/* A reload that takes k1 away: "b", which runs there, is detached. */
static void
reload_without_k1(struct dm_sessions *t, const struct dm_sessions_conf *cf, int *k,
                  struct rowctx *rc)
{
    struct dm_sessions_server without[2] = { { 1000, &k[0] }, { 1000, &k[2] } };
    assert_int_equal(dm_sessions_configure(t, cf, without, 2, row_of, rc), 0);
    struct dm_sessions_stats st;
    dm_sessions_stats(t, &st, NULL, 0);
    assert_int_equal(st.detached, 1);
}

/* A detached group whose server comes back (a later reload) counts on it again and takes clients.
 */
static void
test_configure_reattaches_a_detached_group(void **state)
{
    (void)state;
    int k[3];
    struct dm_sessions_conf cf = conf(false);
    struct dm_sessions_member *m[4];
    struct dm_sessions *t = three_groups(k, &cf, m);
    double cd = 10, d[3] = { 10, 10, 10 };
    struct dm_sessions_place pl;
    struct rowctx rc = { 0 };
    reload_without_k1(t, &cf, k, &rc);
    struct dm_sessions_stats st;
    struct dm_sessions_server_stats per[3];
    /* k1 back, last, at capacity 500: "b" runs there, 300 of it taken. */
    struct dm_sessions_server back[3] = { { 1000, &k[0] }, { 1000, &k[2] }, { 500, &k[1] } };
    assert_int_equal(dm_sessions_configure(t, &cf, back, 3, row_of, &rc), 0);
    dm_sessions_stats(t, &st, per, 3);
    assert_int_equal(st.detached, 0);
    assert_int_equal(st.groups, 3);
    assert_true(fabs(per[2].load - 300) < TOL);
    assert_int_equal(per[2].groups, 1);
    struct dm_sessions_ask a = with_client(ask("b", 10, d), &cd);
    assert_int_equal(dm_sessions_join(t, &a, &m[3], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 2);
    /* A new group of 300 does not fit beside it on k1 (500): the others take it. */
    a = with_client(ask("e", 10, d), &cd);
    struct dm_sessions_member *e;
    assert_int_equal(dm_sessions_join(t, &a, &e, &pl), DM_SESSIONS_PLACED);
    assert_int_not_equal(pl.server, 2);
    dm_sessions_leave(t, e);
    for (int i = 0; i < 4; i++) {
        dm_sessions_leave(t, m[i]);
    }
    dm_sessions_stats(t, &st, per, 3);
    assert_int_equal(st.groups, 0);
    assert_true(per[0].load == 0 && per[1].load == 0 && per[2].load == 0);
    dm_sessions_destroy(t);
}

/* A group detached by one reload and still detached after a second that grows the pool: its
 * members leave over delay rows as wide as the new pool (they were as the old: a heap overflow). */
static void
test_a_group_detached_across_two_reloads_leaves_cleanly(void **state)
{
    (void)state;
    int k[6];
    struct dm_sessions_conf cf = conf(false);
    struct dm_sessions_member *m[5];
    struct dm_sessions *t = three_groups(k, &cf, m);
    double cd = 10, d[3] = { 10, 10, 10 };
    struct dm_sessions_place pl;
    for (int i = 3; i < 5; i++) {
        struct dm_sessions_ask a = with_client(ask("b", 10, d), &cd);
        assert_int_equal(dm_sessions_join(t, &a, &m[i], &pl), DM_SESSIONS_PLACED);
        assert_int_equal(pl.server, 1);
    }
    struct rowctx rc = { 0 };
    reload_without_k1(t, &cf, k, &rc);
    struct dm_sessions_server five[5] = {
        { 1000, &k[0] }, { 1000, &k[2] }, { 1000, &k[3] }, { 1000, &k[4] }, { 1000, &k[5] }
    };
    assert_int_equal(dm_sessions_configure(t, &cf, five, 5, row_of, &rc), 0);
    struct dm_sessions_stats st;
    struct dm_sessions_server_stats per[5];
    dm_sessions_stats(t, &st, per, 5);
    assert_int_equal(st.detached, 1);
    /* Its first members leave: the last one's row moves into their places. */
    dm_sessions_leave(t, m[1]);
    dm_sessions_leave(t, m[3]);
    dm_sessions_leave(t, m[4]);
    dm_sessions_leave(t, m[0]);
    dm_sessions_leave(t, m[2]);
    dm_sessions_stats(t, &st, per, 5);
    assert_int_equal(st.groups, 0);
    assert_int_equal(st.detached, 0);
    dm_sessions_destroy(t);
}

/* A reload keeps running groups on their servers, by key; a group whose server left is detached. */
static void
test_configure_keeps_running_groups(void **state)
{
    (void)state;
    int k[4];
    struct dm_sessions_conf cf = conf(false);
    struct dm_sessions_member *m[8];
    struct dm_sessions *t = three_groups(k, &cf, m);
    double cd = 10, d[3] = { 10, 10, 10 };
    struct dm_sessions_place pl;
    /* New order k2, k0, a new k3; k1 is gone; capacities 200: below what runs. */
    struct dm_sessions_server nv[3] = { { 200, &k[2] }, { 200, &k[0] }, { 1000, &k[3] } };
    struct rowctx rc = { 0 };
    assert_int_equal(dm_sessions_configure(t, &cf, nv, 3, NULL, &rc), -EINVAL);
    assert_int_equal(dm_sessions_configure(t, &cf, nv, 3, row_of, &rc), 0);
    assert_int_equal(rc.calls, 3);
    struct dm_sessions_stats st;
    struct dm_sessions_server_stats per[3];
    dm_sessions_stats(t, &st, per, 3);
    assert_int_equal(st.groups, 2);
    assert_int_equal(st.detached, 1);
    assert_true(fabs(per[0].load - 300) < TOL && fabs(per[1].load - 300) < TOL);
    assert_true(per[2].load == 0 && per[0].capacity == 200);
    /* "c" runs on k2, now index 0; "b"'s server left: it takes no one new. */
    struct dm_sessions_ask a = with_client(ask("c", 10, d), &cd);
    assert_int_equal(dm_sessions_join(t, &a, &m[3], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 0);
    a = with_client(ask("b", 10, d), &cd);
    assert_int_equal(dm_sessions_join(t, &a, &m[4], &pl), -ENXIO);
    /* Over capacity, k2 and k0 take no new group: the new one goes to k3. */
    a = with_client(ask("d", 1, d), &cd);
    assert_int_equal(dm_sessions_join(t, &a, &m[4], &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, 2);
    /* The delays were recomputed: with base 100 and dvmax 50, a 10 cannot join "c". */
    cf.dvmax_ms = 50;
    rc.base = 100;
    assert_int_equal(dm_sessions_configure(t, &cf, nv, 3, row_of, &rc), 0);
    a = with_client(ask("c", 10, d), &cd);
    assert_int_equal(dm_sessions_join(t, &a, &m[5], &pl), -ERANGE);
    /* Detached "b" ends when its client leaves; then its id is new again. */
    dm_sessions_leave(t, m[1]);
    dm_sessions_stats(t, &st, per, 3);
    assert_int_equal(st.detached, 0);
    a = with_client(ask("b", 1, d), &cd);
    assert_int_equal(dm_sessions_join(t, &a, &m[1], &pl), DM_SESSIONS_PLACED);
    /* Fewer group slots than groups: the table keeps room for every one. */
    cf.max_groups = 1;
    assert_int_equal(dm_sessions_configure(t, &cf, nv, 3, row_of, &rc), 0);
    dm_sessions_stats(t, &st, NULL, 0);
    assert_int_equal(st.groups, 4);
    a = with_client(ask("e", 1, d), &cd);
    assert_int_equal(dm_sessions_join(t, &a, &m[5], &pl), -EUSERS);
    for (int i = 0; i < 5; i++) {
        dm_sessions_leave(t, m[i]);
    }
    dm_sessions_stats(t, &st, per, 3);
    assert_int_equal(st.groups, 0);
    for (int s = 0; s < 3; s++) {
        assert_true(per[s].load == 0);
    }
    /* Once they ended, the lowered limit holds: one group, not four. */
    a = with_client(ask("f", 1, d), &cd);
    assert_int_equal(dm_sessions_join(t, &a, &m[0], &pl), DM_SESSIONS_PLACED);
    a = with_client(ask("g", 1, d), &cd);
    assert_int_equal(dm_sessions_join(t, &a, &m[1], &pl), -EUSERS);
    dm_sessions_leave(t, m[0]);
    dm_sessions_destroy(t);
}

/* Waiting groups survive a reload, with delays recomputed, and are placed by the next pass. */
static void
test_configure_keeps_waiting_groups(void **state)
{
    (void)state;
    int k[2];
    struct dm_sessions_server sv[2] = { { 1000, &k[0] }, { 1000, &k[1] } };
    struct dm_sessions_conf cf = conf(true);
    struct dm_sessions *t = dm_sessions_create(&cf, sv, 2);
    assert_non_null(t);
    double cd = 10, d[3] = { 10, 10, 10 };
    struct dm_sessions_member *m;
    struct dm_sessions_place pl;
    struct dm_sessions_ask a = ask("w", 10, d);
    a.client = &cd;
    a.client_len = sizeof(cd);
    assert_int_equal(dm_sessions_join(t, &a, &m, &pl), DM_SESSIONS_WAITING);
    struct dm_sessions_server nv[3] = { { 0, &k[0] }, { 1000, &k[1] }, { 1000, &nv[0] } };
    struct rowctx rc = { 0 };
    assert_int_equal(dm_sessions_configure(t, &cf, nv, 3, row_of, &rc), 0);
    assert_int_equal(dm_sessions_waiting(t), 1);
    struct dm_rng rng;
    dm_rng_init(&rng, 1);
    assert_int_equal(dm_sessions_batch(t, &rng), 1);
    assert_int_equal(dm_sessions_status(t, m, &pl), DM_SESSIONS_PLACED);
    assert_true(pl.server == 1 || pl.server == 2);
    dm_sessions_leave(t, m);
    dm_sessions_destroy(t);
}

/*
 * The batch pass taken apart (its solve runs without the caller's lock):
 * what happens to the table between the take and the commit is met, not
 * overwritten. A client that joins a taken group and rules out the server
 * the solve chose sends the group where the greedy rule finds room; a
 * group whose clients all left is skipped; a group that arrives meanwhile
 * waits for the next pass; a reconfiguration makes the pass stale, and its
 * groups wait for the next.
 */
/* Client bytes are the client's row to two servers. */
static void
row_of_two(void *arg, const void *client, size_t len, double *row)
{
    (void)arg;
    assert_int_equal(len, 2 * sizeof(double));
    memcpy(row, client, len);
}

/* ask(group, fl, d) for two servers, with d as its client bytes. */
static struct dm_sessions_ask
ask2(const char *group, double fl, const double *d)
{
    struct dm_sessions_ask a = ask(group, fl, d);
    a.client = d;
    a.client_len = 2 * sizeof(double);
    return a;
}

static void
test_a_pass_taken_apart_meets_the_table_as_it_is(void **state)
{
    (void)state;
    int k[2];
    struct dm_sessions_server sv[2] = { { 1000, &k[0] }, { 1000, &k[1] } };
    struct dm_sessions_conf cf = conf(true);
    cf.dvmax_ms = 50;
    struct dm_sessions *t = dm_sessions_create(&cf, sv, 2);
    assert_non_null(t);
    struct dm_rng rng;
    dm_rng_init(&rng, 7);
    static const double d[2] = { 10, 10 };
    struct dm_sessions_member *z, *p1, *p2, *q, *r, *s;
    struct dm_sessions_place pl;
    /* z (600) on a server of its own first. */
    struct dm_sessions_ask a = ask2("z", 20, d);
    assert_int_equal(dm_sessions_join(t, &a, &z, &pl), DM_SESSIONS_WAITING);
    assert_int_equal(dm_sessions_batch(t, &rng), 1);
    assert_int_equal(dm_sessions_status(t, z, &pl), DM_SESSIONS_PLACED);
    int zs = pl.server, os = 1 - zs;
    /* p, q and r (300 each) wait, and a pass takes them. */
    a = ask2("p", 10, d);
    assert_int_equal(dm_sessions_join(t, &a, &p1, &pl), DM_SESSIONS_WAITING);
    a = ask2("q", 10, d);
    assert_int_equal(dm_sessions_join(t, &a, &q, &pl), DM_SESSIONS_WAITING);
    a = ask2("r", 10, d);
    assert_int_equal(dm_sessions_join(t, &a, &r, &pl), DM_SESSIONS_WAITING);
    assert_int_equal(dm_sessions_untaken(t), 3);
    struct dm_sessions_pass *pass, *other;
    assert_int_equal(dm_sessions_pass_take(t, &pass), 3);
    assert_non_null(pass);
    assert_int_equal(dm_sessions_untaken(t), 0);
    assert_int_equal(dm_sessions_waiting(t), 3);
    /* One pass at a time. */
    assert_int_equal(dm_sessions_pass_take(t, &other), -EBUSY);
    assert_null(other);
    assert_int_equal(dm_sessions_batch(t, &rng), -EBUSY);
    /* Meanwhile: r leaves, s arrives, and a second client of p is 100 ms
     * from the server z does not use (a spread of 90 there: only z's holds p). */
    dm_sessions_leave(t, r);
    a = ask2("s", 10, d);
    assert_int_equal(dm_sessions_join(t, &a, &s, &pl), DM_SESSIONS_WAITING);
    double far[2];
    far[zs] = 10;
    far[os] = 100;
    a = ask2("p", 10, far);
    assert_int_equal(dm_sessions_join(t, &a, &p2, &pl), DM_SESSIONS_WAITING);
    assert_int_equal(dm_sessions_untaken(t), 1);
    assert_int_equal(dm_sessions_pass_solve(pass, &rng), 0);
    assert_int_equal(dm_sessions_pass_commit(t, pass), 2);
    dm_sessions_pass_free(pass);
    assert_int_equal(dm_sessions_status(t, p1, &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, zs); /* the solve saw one client and chose os (600 | 300) */
    assert_int_equal(dm_sessions_status(t, p2, &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, zs);
    assert_int_equal(dm_sessions_status(t, q, &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, os);
    assert_true(fabs(server_load(t, zs) - 900) < TOL && fabs(server_load(t, os) - 300) < TOL);
    /* s waits for the next pass. */
    assert_int_equal(dm_sessions_status(t, s, &pl), DM_SESSIONS_WAITING);
    assert_int_equal(dm_sessions_waiting(t), 1);
    assert_int_equal(dm_sessions_untaken(t), 1);
    /* A reconfiguration while a pass is out: the pass is stale, s still waits. */
    assert_int_equal(dm_sessions_pass_take(t, &pass), 1);
    assert_int_equal(dm_sessions_configure(t, &cf, sv, 2, row_of_two, NULL), 0);
    assert_int_equal(dm_sessions_pass_solve(pass, &rng), 0);
    assert_int_equal(dm_sessions_pass_commit(t, pass), -ESTALE);
    dm_sessions_pass_free(pass);
    assert_int_equal(dm_sessions_status(t, s, &pl), DM_SESSIONS_WAITING);
    assert_int_equal(dm_sessions_untaken(t), 1);
    assert_int_equal(dm_sessions_batch(t, &rng), 1);
    assert_int_equal(dm_sessions_status(t, s, &pl), DM_SESSIONS_PLACED);
    assert_int_equal(pl.server, os); /* 900 | 300: only os has room for 300 */
    assert_int_equal(dm_sessions_untaken(t), 0);
    dm_sessions_leave(t, z);
    dm_sessions_leave(t, p1);
    dm_sessions_leave(t, p2);
    dm_sessions_leave(t, q);
    dm_sessions_leave(t, s);
    dm_sessions_destroy(t);
}

/*
 * A group the pass refused is on no list, so a reconfiguration does not
 * rebuild its rows: its clients, answered, leave after a reload that
 * widened every row. (Their leaving moved rows as wide as the new pool in
 * a buffer as wide as the old one: a heap overflow under ASan.)
 */
static void
test_a_refused_group_leaves_cleanly_after_a_reload(void **state)
{
    (void)state;
    int k[4];
    struct dm_sessions_server sv[4] = {
        { 100, &k[0] }, { 100, &k[1] }, { 100, &k[2] }, { 100, &k[3] }
    };
    struct dm_sessions_conf cf = conf(true);
    struct dm_sessions *t = dm_sessions_create(&cf, sv, 2);
    assert_non_null(t);
    static const double d[4] = { 10, 10, 10, 10 };
    struct dm_sessions_member *m[3];
    struct dm_sessions_place pl;
    /* 10 x 15 = 150 at the lowest rate: no server holds it. */
    for (int i = 0; i < 3; i++) {
        struct dm_sessions_ask a = ask2("big", 10, d);
        assert_int_equal(dm_sessions_join(t, &a, &m[i], &pl), DM_SESSIONS_WAITING);
    }
    struct dm_rng rng;
    dm_rng_init(&rng, 3);
    assert_int_equal(dm_sessions_batch(t, &rng), 1);
    assert_int_equal(dm_sessions_status(t, m[0], &pl), -ENOSPC);
    assert_int_equal(dm_sessions_configure(t, &cf, sv, 4, row_of_two, NULL), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dm_sessions_status(t, m[i], &pl), -ENOSPC);
        dm_sessions_leave(t, m[i]);
    }
    struct dm_sessions_stats st;
    dm_sessions_stats(t, &st, NULL, 0);
    assert_int_equal(st.groups + st.members + st.waiting, 0);
    assert_int_equal(st.refused, 1);
    dm_sessions_destroy(t);
}

/* The id of group g < 100: "g00" to "g99". */
static void
group_id(char *id, int g)
{
    id[0] = 'g';
    id[1] = (char)('0' + g / 10);
    id[2] = (char)('0' + g % 10);
    id[3] = '\0';
}

/*
 * Random joins and leaves, placed at once: every placed group within C2
 * (as placed), C3 and C4 over the clients the test knows it has, and each
 * server's load the sum of its groups' loads.
 */
static void
test_random_traffic_keeps_the_constraints(void **state)
{
    (void)state;
    enum { S = 4, N = 400, STEPS = 4000 };
    struct dm_sessions_server sv[S];
    for (int s = 0; s < S; s++) {
        sv[s] = (struct dm_sessions_server){ 3000, &sv[s] };
    }
    struct dm_sessions_conf cf = conf(false);
    cf.dmax_ms = 150;
    cf.dvmax_ms = 60;
    cf.max_groups = 40;
    struct dm_sessions *t = dm_sessions_create(&cf, sv, S);
    assert_non_null(t);
    struct {
        struct dm_sessions_member *m;
        int group; /* 0..49 */
        int server;
        double rate;
        double d[S];
    } live[N];
    size_t nlive = 0;
    unsigned joined = 0, refused[4] = { 0 };
    struct dm_rng r;
    dm_rng_init(&r, 7);
    for (int step = 0; step < STEPS; step++) {
        if (nlive > 0 && (nlive == N || dm_rng_below(&r, 2) == 0)) {
            size_t i = (size_t)dm_rng_below(&r, nlive);
            dm_sessions_leave(t, live[i].m);
            live[i] = live[--nlive];
        } else {
            int g = (int)dm_rng_below(&r, 50);
            char id[8];
            group_id(id, g);
            double d[S];
            for (int s = 0; s < S; s++) {
                d[s] = (double)dm_rng_below(&r, 200);
            }
            struct dm_sessions_ask a = ask(id, 5 + g % 20, d);
            struct dm_sessions_member *m;
            struct dm_sessions_place pl;
            int rc = dm_sessions_join(t, &a, &m, &pl);
            if (rc == DM_SESSIONS_PLACED) {
                live[nlive].m = m;
                live[nlive].group = g;
                live[nlive].server = pl.server;
                live[nlive].rate = pl.rate;
                memcpy(live[nlive].d, d, sizeof(d));
                nlive++;
                joined++;
            } else {
                assert_true(rc == -ENOSPC || rc == -ERANGE || rc == -EUSERS || rc == -EMLINK);
                refused[rc == -ENOSPC ? 0 : rc == -ERANGE ? 1 : rc == -EUSERS ? 2 : 3]++;
                if (rc == -ERANGE) {
                    /* Out of reach for a reason: with it, C3 or C4 fails on its group's server. */
                    double lo, hi;
                    int home = -1;
                    for (size_t i = 0; i < nlive; i++) {
                        if (live[i].group == g) {
                            home = live[i].server;
                        }
                    }
                    assert_true(home >= 0);
                    lo = hi = d[home];
                    for (size_t i = 0; i < nlive; i++) {
                        if (live[i].group == g) {
                            lo = fmin(lo, live[i].d[home]);
                            hi = fmax(hi, live[i].d[home]);
                        }
                    }
                    assert_true(hi > cf.dmax_ms || hi - lo > cf.dvmax_ms);
                }
            }
        }
        /* Check from scratch. */
        double load[S] = { 0 }, lo[50], hi[50], rate[50];
        int server[50];
        for (int g = 0; g < 50; g++) {
            server[g] = -1;
            lo[g] = HUGE_VAL;
            hi[g] = -HUGE_VAL;
        }
        for (size_t i = 0; i < nlive; i++) {
            int g = live[i].group;
            if (server[g] < 0) {
                server[g] = live[i].server;
                rate[g] = live[i].rate;
                load[server[g]] += (5 + g % 20) * rate[g];
            }
            assert_int_equal(live[i].server, server[g]);
            assert_true(live[i].rate == rate[g]);
            lo[g] = fmin(lo[g], live[i].d[server[g]]);
            hi[g] = fmax(hi[g], live[i].d[server[g]]);
        }
        for (int g = 0; g < 50; g++) {
            assert_true(server[g] < 0 || (hi[g] <= cf.dmax_ms && hi[g] - lo[g] <= cf.dvmax_ms));
        }
        for (int s = 0; s < S; s++) {
            assert_true(load[s] <= 3000 + TOL);
            assert_true(fabs(server_load(t, s) - load[s]) < 1e-6);
        }
    }
    /* The run went through joins and out-of-reach refusals, not only one of them. */
    assert_true(joined > 500 && refused[1] > 50);
    for (size_t i = 0; i < nlive; i++) {
        dm_sessions_leave(t, live[i].m);
    }
    dm_sessions_destroy(t);
}

/*
 * Random joins, leaves and batch passes taken apart, the table changing
 * between each pass's take and its commit: every placed group within C2,
 * C3 and C4 over all of its clients (those that joined while its pass was
 * solved too), and each server's load the sum of its groups' loads.
 */
static void
test_random_traffic_with_passes_out_keeps_the_constraints(void **state)
{
    (void)state;
    enum { S = 4, N = 300, STEPS = 3000, G = 40 };
    struct dm_sessions_server sv[S];
    for (int s = 0; s < S; s++) {
        sv[s] = (struct dm_sessions_server){ 1500, &sv[s] };
    }
    struct dm_sessions_conf cf = conf(true);
    cf.dmax_ms = 150;
    cf.dvmax_ms = 60;
    cf.max_groups = 30;
    cf.solve.balance.iterations = 200;
    cf.solve.rates.iterations = 200;
    struct dm_sessions *t = dm_sessions_create(&cf, sv, S);
    assert_non_null(t);
    struct {
        struct dm_sessions_member *m;
        int group;
        double d[S];
    } live[N];
    size_t nlive = 0;
    unsigned placed = 0, refused = 0, commits = 0, changed = 0;
    struct dm_sessions_pass *pass = NULL;
    struct dm_rng r, solve;
    dm_rng_init(&r, 11);
    dm_rng_init(&solve, 12);
    for (int step = 0; step < STEPS; step++) {
        unsigned what = dm_rng_below(&r, 10);
        if (what == 0 && pass == NULL) {
            int n = dm_sessions_pass_take(t, &pass);
            assert_true(n >= 0);
            assert_true((n == 0) == (pass == NULL));
        } else if (what == 1 && pass != NULL) {
            assert_int_equal(dm_sessions_pass_solve(pass, &solve), 0);
            int n = dm_sessions_pass_commit(t, pass);
            assert_true(n >= 0);
            dm_sessions_pass_free(pass);
            pass = NULL;
            commits++;
        } else if (nlive > 0 && (nlive == N || what < 5)) {
            size_t i = (size_t)dm_rng_below(&r, nlive);
            dm_sessions_leave(t, live[i].m);
            live[i] = live[--nlive];
            changed += pass != NULL;
        } else {
            int g = (int)dm_rng_below(&r, G);
            char id[8];
            group_id(id, g);
            for (int s = 0; s < S; s++) {
                live[nlive].d[s] = (double)dm_rng_below(&r, 200);
            }
            struct dm_sessions_ask a = ask(id, 5 + g % 20, live[nlive].d);
            struct dm_sessions_place pl;
            int rc = dm_sessions_join(t, &a, &live[nlive].m, &pl);
            if (rc == DM_SESSIONS_PLACED || rc == DM_SESSIONS_WAITING) {
                live[nlive++].group = g;
                changed += pass != NULL;
            } else {
                assert_true(rc == -ERANGE || rc == -EUSERS || rc == -EMLINK);
                if (rc == -ERANGE) {
                    /* Out of reach for a reason: with it, C3 or C4 fails on its
                     * group's server, or on every server while the group waits. */
                    const double *d = live[nlive].d;
                    for (int s = 0; s < S; s++) {
                        double lo = d[s], hi = d[s];
                        int st = -1;
                        for (size_t i = 0; i < nlive; i++) {
                            if (live[i].group == g) {
                                lo = fmin(lo, live[i].d[s]);
                                hi = fmax(hi, live[i].d[s]);
                                struct dm_sessions_place at;
                                st = dm_sessions_status(t, live[i].m, &at);
                                st = st == DM_SESSIONS_PLACED && at.server != s ? -1 : st;
                            }
                        }
                        assert_true(st < 0 || hi > cf.dmax_ms || hi - lo > cf.dvmax_ms);
                    }
                }
            }
        }
        /* Check from scratch; clients whose group was refused leave, as the proxy's do. */
        double load[S] = { 0 }, lo[G], hi[G], rate[G];
        int server[G];
        for (int g = 0; g < G; g++) {
            server[g] = -1;
            lo[g] = HUGE_VAL;
            hi[g] = -HUGE_VAL;
        }
        for (size_t i = 0; i < nlive;) {
            struct dm_sessions_place pl;
            int st = dm_sessions_status(t, live[i].m, &pl);
            if (st == -ENOSPC) {
                dm_sessions_leave(t, live[i].m);
                live[i] = live[--nlive];
                refused++;
                continue;
            }
            int g = live[i].group;
            if (st == DM_SESSIONS_PLACED) {
                placed++;
                if (server[g] < 0) {
                    server[g] = pl.server;
                    rate[g] = pl.rate;
                    load[pl.server] += (5 + g % 20) * pl.rate;
                }
                assert_int_equal(pl.server, server[g]);
                assert_true(pl.rate == rate[g]);
                lo[g] = fmin(lo[g], live[i].d[server[g]]);
                hi[g] = fmax(hi[g], live[i].d[server[g]]);
            } else {
                assert_int_equal(st, DM_SESSIONS_WAITING);
            }
            i++;
        }
        for (int g = 0; g < G; g++) {
            assert_true(server[g] < 0 || (hi[g] <= cf.dmax_ms && hi[g] - lo[g] <= cf.dvmax_ms));
        }
        for (int s = 0; s < S; s++) {
            assert_true(load[s] <= 1500 + TOL);
            assert_true(fabs(server_load(t, s) - load[s]) < 1e-6);
        }
    }
    /* The run went through passes that met a changed table, and refusals. */
    assert_true(commits > 100 && changed > 500 && placed > 1000 && refused > 20);
    dm_sessions_pass_free(pass);
    for (size_t i = 0; i < nlive; i++) {
        dm_sessions_leave(t, live[i].m);
    }
    dm_sessions_destroy(t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups_are_placed_whole_and_leave_whole),
        cmocka_unit_test(test_rate_is_lowered_as_little_as_possible),
        cmocka_unit_test(test_member_out_of_reach_is_refused),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_batch_places_waiting_groups_together),
        cmocka_unit_test(test_configure_keeps_running_groups),
        cmocka_unit_test(test_configure_reattaches_a_detached_group),
        cmocka_unit_test(test_a_group_detached_across_two_reloads_leaves_cleanly),
        cmocka_unit_test(test_configure_keeps_waiting_groups),
        cmocka_unit_test(test_a_pass_taken_apart_meets_the_table_as_it_is),
        cmocka_unit_test(test_a_refused_group_leaves_cleanly_after_a_reload),
        cmocka_unit_test(test_random_traffic_keeps_the_constraints),
        cmocka_unit_test(test_random_traffic_with_passes_out_keeps_the_constraints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
