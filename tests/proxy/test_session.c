/*
 * The session placers (proxy/session.c) on runtimes built from configs: a
 * client's delays from the longest network prefix or the measured connect
 * time, servers that are down or tried left out, asked rates rounded to the
 * game's list, refusals with their status and reason, the batch window on
 * the control thread's clock, a reload through the same placer (by pool
 * name) keeping the running sessions, and the /stats JSON. No loop runs
 * (the placer only takes its mutex) but for the batch pass on a loop's
 * thread pool.
 */
#include "dm_test.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "balancers/hosts.h"
#include "balancers/servers.h"
#include "conf/conf.h"
#include "proxy/internal.h"
#include "proxy/sbuf.h"
#include "proxy/session.h"

/* Servers a, b, c with room for three chess groups at 30 (300) each... */
#define CONF(extra)                                                                                \
    "listen: 127.0.0.1:8080\n"                                                                     \
    "pools:\n"                                                                                     \
    "  web:\n"                                                                                     \
    "    servers:\n"                                                                               \
    "      - {name: w, address: 127.0.0.1:9009}\n"                                                 \
    "  games:\n"                                                                                   \
    "    balance: session\n"                                                                       \
    "    servers:\n"                                                                               \
    "      - {name: a, address: 127.0.0.1:9001, session_capacity: 1000}\n"                         \
    "      - {name: b, address: 127.0.0.1:9002, session_capacity: 1000}\n"                         \
    "      - {name: c, address: 127.0.0.1:9003, session_capacity: 1000}\n"                         \
    "    session:\n"                                                                               \
    "      dmax: 150\n"                                                                            \
    "      dvmax: 50\n" extra "      games:\n"                                                     \
    "        chess: {frame_load: 10, rates: [10, 20, 30]}\n"                                       \
    "        go: {frame_load: 0, rates: [1], rate: 1}\n"                                           \
    "      networks:\n"                                                                            \
    "        - {prefix: 10.0.0.0/8, delays: {a: 10, b: 100, c: 100}}\n"                            \
    "        - {prefix: 10.1.0.0/16, delays: {a: 100, b: 10}}\n"                                   \
    "        - {prefix: 10.2.0.0/16, delays: {a: 200, b: 200, c: 200}}\n"

struct fx {
    struct dm_hosts *hosts;
    struct dm_placers *placers;
    struct dm_runtime *rt;
};

static struct dm_runtime *
runtime(struct fx *f, const char *yaml)
{
    struct dm_conf_errors err = { 0 };
    struct dm_conf *conf = dm_conf_load_string(yaml, strlen(yaml), "t.yaml", &err);
    for (size_t i = 0; i < err.n; i++) {
        print_error("%s\n", err.msg[i]);
    }
    dm_conf_errors_fini(&err);
    assert_non_null(conf);
    const char *why = NULL;
    struct dm_runtime *rt = dm_runtime_create(conf, 1, f->hosts, NULL, f->placers, &why);
    assert_non_null(rt);
    return rt;
}

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->hosts = dm_hosts_create();
    f->placers = dm_placers_create();
    f->rt = runtime(f, CONF(""));
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    dm_runtime_unref(f->rt);
    dm_placers_destroy(f->placers);
    dm_hosts_destroy(f->hosts);
    free(f);
    return 0;
}

static struct sockaddr_in
addr4(const char *ip)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    return a;
}

static struct dm_placer_ask
ask(const char *group, const struct sockaddr_in *client)
{
    return (struct dm_placer_ask){
        .group = group,
        .group_len = group != NULL ? strlen(group) : 0,
        .rate = -1,
        .client = (const struct sockaddr *)client,
        .now_us = 1000000,
    };
}

/* The name of the server of the pool "games" an answer names. */
static const char *
server_of(struct fx *f, const struct dm_placer_answer *ans)
{
    const struct dm_servers *sv = f->rt->pools[1].sv;
    for (size_t i = 0; i < sv->n; i++) {
        if (sv->s[i].host == ans->host) {
            return sv->s[i].name;
        }
    }
    return "?";
}

static struct dm_placer *
placer(struct fx *f)
{
    assert_null(f->rt->pools[0].placer); /* roundrobin: no placer */
    assert_non_null(f->rt->pools[1].placer);
    return f->rt->pools[1].placer;
}

static void
test_delays_come_from_the_longest_prefix(void **state)
{
    struct fx *f = *state;
    struct dm_placer *pl = placer(f);
    struct dm_sessions_member *t[8];
    struct dm_placer_answer ans;
    /* 10.9.x: the /8, near a only; 10.1.x: the /16, near b; c left out there takes
     * the /16's "measured" connect time (0: none yet), so c is nearest of all. */
    struct sockaddr_in near_a = addr4("10.9.0.1"), near_b = addr4("10.1.0.1");
    struct dm_placer_ask q = ask("g", &near_a);
    assert_int_equal(dm_placer_join(pl, &q, &t[0], &ans), 0);
    assert_string_equal(server_of(f, &ans), "a");
    assert_true(ans.rate == 30 && !ans.lowered);
    /* g's server is a: a 10.1 client is 100 away there, spread 90 > dvmax. */
    q = ask("g", &near_b);
    assert_true(dm_placer_join(pl, &q, &t[1], &ans) < 0);
    assert_int_equal(ans.status, 503);
    assert_string_equal(ans.reason,
                        "client out of reach of its session group's server (dmax, dvmax)");
    /* A 10.1 group of its own goes where its delays allow: b (10) or c (0, measured). */
    q = ask("h", &near_b);
    assert_int_equal(dm_placer_join(pl, &q, &t[1], &ans), 0);
    assert_string_equal(server_of(f, &ans), "b"); /* a and c: a has 300 */
    /* Measured: once c's connects are timed at 120 ms, a 10.1 client's c is 120. */
    dm_host_connect_sample(f->rt->pools[1].sv->s[2].host, 120000);
    q = ask("h", &near_b); /* on b: 10 and 10 */
    assert_int_equal(dm_placer_join(pl, &q, &t[2], &ans), 0);
    assert_string_equal(server_of(f, &ans), "b");
    /* 10.2.x is 200 from everywhere: beyond dmax 150. */
    struct sockaddr_in far = addr4("10.2.0.1");
    q = ask(NULL, &far);
    assert_true(dm_placer_join(pl, &q, &t[3], &ans) < 0);
    assert_string_equal(ans.reason,
                        "no server can take the session (session_capacity, dmax, dvmax)");
    /* An IPv4-mapped IPv6 client is its IPv4 address. */
    struct sockaddr_in6 m6 = { .sin6_family = AF_INET6 };
    assert_int_equal(inet_pton(AF_INET6, "::ffff:10.2.0.9", &m6.sin6_addr), 1);
    q = ask(NULL, &near_a);
    q.client = (const struct sockaddr *)&m6;
    assert_true(dm_placer_join(pl, &q, &t[3], &ans) < 0);
    for (int i = 0; i < 3; i++) {
        dm_placer_leave(pl, t[i]);
    }
    dm_placer_leave(pl, NULL);
}

static void
test_down_and_tried_servers_are_left_out(void **state)
{
    struct fx *f = *state;
    struct dm_placer *pl = placer(f);
    const struct dm_servers *sv = f->rt->pools[1].sv;
    struct sockaddr_in local = addr4("127.0.0.1"); /* no network: measured (0) everywhere */
    struct dm_sessions_member *t[4];
    struct dm_placer_answer ans;
    atomic_store(&sv->s[0].host->down, true);
    struct dm_placer_ask q = ask("g", &local);
    assert_int_equal(dm_placer_join(pl, &q, &t[0], &ans), 0);
    assert_string_equal(server_of(f, &ans), "b");
    /* b was tried (a retry): the next member of g cannot follow it there. */
    uint8_t tried[1] = { 1u << 1 };
    q = ask("g", &local);
    q.tried_sv = sv;
    q.tried = tried;
    assert_true(dm_placer_join(pl, &q, &t[1], &ans) < 0);
    assert_string_equal(ans.reason, "the session group's server is unavailable");
    /* A new group with a down and b tried: c. */
    q = ask("h", &local);
    q.tried_sv = sv;
    q.tried = tried;
    assert_int_equal(dm_placer_join(pl, &q, &t[1], &ans), 0);
    assert_string_equal(server_of(f, &ans), "c");
    atomic_store(&sv->s[0].host->down, false);
    q = ask("i", &local);
    assert_int_equal(dm_placer_join(pl, &q, &t[2], &ans), 0);
    assert_string_equal(server_of(f, &ans), "a");
    for (int i = 0; i < 3; i++) {
        dm_placer_leave(pl, t[i]);
    }
}

static void
test_games_and_rates(void **state)
{
    struct fx *f = *state;
    struct dm_placer *pl = placer(f);
    struct sockaddr_in local = addr4("127.0.0.1");
    struct dm_sessions_member *t[16];
    size_t n = 0;
    struct dm_placer_answer ans;
    struct dm_placer_ask q = ask(NULL, &local);
    q.game = "poker";
    q.game_len = 5;
    assert_true(dm_placer_join(pl, &q, &t[n], &ans) < 0);
    assert_int_equal(ans.status, 400);
    assert_string_equal(ans.reason, "unknown game");
    q.game = "go";
    q.game_len = 2;
    assert_int_equal(dm_placer_join(pl, &q, &t[n++], &ans), 0);
    assert_true(ans.rate == 1);
    /* Asked rates are rounded down to the list; below it, the lowest. */
    static const double asked[] = { 25, 5, 30, 1000, 20 };
    static const double got[] = { 20, 10, 30, 30, 20 };
    for (size_t i = 0; i < 5; i++) {
        q = ask(NULL, &local);
        q.rate = asked[i];
        assert_int_equal(dm_placer_join(pl, &q, &t[n++], &ans), 0);
        assert_true(ans.rate == got[i]);
        assert_false(ans.lowered);
    }
    /* 0 + 200 + 100 + 300 + 300 + 200 = 1100 of 3000 so far; fill up at 30. */
    int lowered = 0, refused = 0;
    for (int i = 0; i < 8; i++) {
        q = ask(NULL, &local);
        struct dm_sessions_member *x;
        int rc = dm_placer_join(pl, &q, &x, &ans);
        if (rc == 0) {
            t[n++] = x;
            lowered += ans.lowered;
        } else {
            refused++;
            assert_int_equal(ans.status, 503);
        }
    }
    assert_true(lowered > 0 && refused > 0);
    char id[200];
    memset(id, 'x', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    q = ask(id, &local);
    assert_true(dm_placer_join(pl, &q, &t[n], &ans) < 0);
    assert_int_equal(ans.status, 400);
    for (size_t i = 0; i < n; i++) {
        dm_placer_leave(pl, t[i]);
    }
    struct dm_sbuf b = { 0 };
    dm_placer_stats_json(pl, &b);
    assert_non_null(strstr(b.p, "\"groups\":0,\"sessions\":0,"));
    assert_non_null(strstr(b.p, "\"lbf\":0.000"));
    free(b.p);
}

static void
test_batch_window_and_reload(void **state)
{
    struct fx *f = *state;
    dm_runtime_unref(f->rt);
    f->rt = runtime(f, CONF("      window: 500ms\n"));
    struct dm_placer *pl = placer(f);
    struct sockaddr_in near_a = addr4("10.9.0.1"), near_b = addr4("10.1.0.1");
    struct dm_sessions_member *t[8];
    struct dm_placer_answer ans;
    /* Two members of g in one window, one near a, one near b: no server holds both
     * (a: 10 and 100; b: 100 and 10; c: 100 and 0, spread 100 > 50). The second
     * is refused at once; it would have had the whole group refused at the pass. */
    struct dm_placer_ask q = ask("g", &near_a);
    q.now_us = 1000000;
    assert_int_equal(dm_placer_join(pl, &q, &t[0], &ans), 1);
    q = ask("g", &near_b);
    q.now_us = 1100000;
    assert_true(dm_placer_join(pl, &q, &t[1], &ans) < 0);
    assert_int_equal(ans.status, 503);
    assert_string_equal(ans.reason,
                        "client out of reach of its session group's server (dmax, dvmax)");
    q = ask("h", &near_a);
    q.now_us = 1200000;
    assert_int_equal(dm_placer_join(pl, &q, &t[2], &ans), 1);
    /* The window runs from the first: nothing happens before 1.5 s. */
    assert_false(dm_placers_run(f->placers, 1400000));
    assert_int_equal(dm_placer_status(pl, t[0], &ans), 1);
    assert_true(dm_placers_run(f->placers, 1500000));
    assert_int_equal(dm_placer_status(pl, t[0], &ans), 0);
    assert_string_equal(server_of(f, &ans), "a");
    assert_int_equal(dm_placer_status(pl, t[2], &ans), 0);
    char home[32], want[160];
    snprintf(home, sizeof(home), "%s", server_of(f, &ans)); /* where the pass balanced it */
    dm_placer_leave(pl, t[0]);
    assert_false(dm_placers_run(f->placers, 9000000)); /* nothing waits */
    /* A reload through the same placer: "h" stays on its server, with its new capacity. */
    struct dm_runtime *old = f->rt;
    f->rt = runtime(f, CONF(""));
    assert_ptr_equal(placer(f), pl);
    dm_runtime_unref(old);
    q = ask("h", &near_a);
    assert_int_equal(dm_placer_join(pl, &q, &t[3], &ans), 0); /* no window any more */
    assert_string_equal(server_of(f, &ans), home);
    struct dm_sbuf b = { 0 };
    dm_placer_stats_json(pl, &b);
    assert_non_null(strstr(b.p, "\"window_ms\":0,"));
    assert_non_null(strstr(b.p,
                           "\"groups\":1,\"sessions\":2,\"waiting\":0,\"solving\":0,\"detached\":0,"
                           "\"placed\":2,\"lowered\":0,\"refused\":0,"));
    snprintf(want, sizeof(want),
             "{\"name\":\"%s\",\"groups\":1,\"sessions\":2,\"load\":300.000,"
             "\"capacity\":1000.000}",
             home);
    assert_non_null(strstr(b.p, want));
    free(b.p);
    dm_placer_leave(pl, t[2]);
    dm_placer_leave(pl, t[3]);
}

static void
count_decided(void *arg)
{
    (*(unsigned *)arg)++;
}

/* The waiting / solving counts of the placer's /stats object. */
static void
assert_waiting(struct dm_placer *pl, const char *want)
{
    struct dm_sbuf b = { 0 };
    dm_placer_stats_json(pl, &b);
    if (strstr(b.p, want) == NULL) {
        print_error("%s\nwants %s\n", b.p, want);
        fail();
    }
    free(b.p);
}

/*
 * With a loop, the pass's solve runs on its thread pool and comes back to
 * the loop's thread: while it is out, arrivals are answered (they wait for
 * the next pass, whose window opens with them), no second pass starts, and
 * /stats says how many groups it solves; a stop while it is out has the
 * groups that came since placed when it is back.
 */
static void
test_batch_pass_on_the_thread_pool(void **state)
{
    struct fx *f = *state;
    dm_runtime_unref(f->rt);
    f->rt = runtime(f, CONF("      window: 500ms\n"));
    struct dm_placer *pl = placer(f);
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    unsigned decided = 0;
    dm_placers_set_loop(f->placers, &loop, count_decided, &decided);
    struct sockaddr_in near_a = addr4("10.9.0.1");
    struct dm_sessions_member *t[4];
    struct dm_placer_answer ans;
    struct dm_placer_ask q = ask("g", &near_a);
    assert_int_equal(dm_placer_join(pl, &q, &t[0], &ans), 1);
    assert_false(dm_placers_run(f->placers, 1500000)); /* out, not decided here */
    assert_waiting(pl, "\"waiting\":1,\"solving\":1,");
    q = ask("h", &near_a);
    q.now_us = 1600000;
    assert_int_equal(dm_placer_join(pl, &q, &t[1], &ans), 1);
    assert_waiting(pl, "\"waiting\":2,\"solving\":1,");
    assert_false(dm_placers_run(f->placers, 9000000)); /* one pass at a time */
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(decided, 1);
    assert_int_equal(dm_placer_status(pl, t[0], &ans), 0);
    assert_string_equal(server_of(f, &ans), "a");
    assert_int_equal(dm_placer_status(pl, t[1], &ans), 1);
    assert_waiting(pl, "\"waiting\":1,\"solving\":0,");
    /* h's window opened at its arrival: 2.1 s. */
    assert_false(dm_placers_run(f->placers, 2000000));
    assert_waiting(pl, "\"waiting\":1,\"solving\":0,");
    assert_false(dm_placers_run(f->placers, 2100000));
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(decided, 2);
    assert_int_equal(dm_placer_status(pl, t[1], &ans), 0);
    /* A stop while a pass is out: k is in it, m came after; both are placed. */
    q = ask("k", &near_a);
    q.now_us = 3000000;
    assert_int_equal(dm_placer_join(pl, &q, &t[2], &ans), 1);
    assert_false(dm_placers_run(f->placers, 3500000));
    q = ask("m", &near_a);
    q.now_us = 3600000;
    assert_int_equal(dm_placer_join(pl, &q, &t[3], &ans), 1);
    assert_false(dm_placers_run(f->placers, UINT64_MAX));
    assert_int_equal(dm_placer_status(pl, t[3], &ans), 1);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(decided, 3);
    assert_int_equal(dm_placer_status(pl, t[2], &ans), 0);
    assert_int_equal(dm_placer_status(pl, t[3], &ans), 0);
    assert_waiting(pl, "\"groups\":4,\"sessions\":4,\"waiting\":0,\"solving\":0,");
    for (int i = 0; i < 4; i++) {
        dm_placer_leave(pl, t[i]);
    }
    assert_int_equal(uv_loop_close(&loop), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_delays_come_from_the_longest_prefix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_down_and_tried_servers_are_left_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_games_and_rates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_window_and_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_pass_on_the_thread_pool, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
