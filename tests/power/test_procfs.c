/*
 * What dimmer-agent reads (power/procfs.h): /proc/stat's CPU line, the seed's
 * power estimate from the time shares, and ESTABLISHED sockets of served
 * ports in /proc/net/tcp and tcp6.
 */
#include "dm_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "power/procfs.h"

static void
test_procstat(void **st)
{
    (void)st;
    const char *t = "cpu  572908 0 537387 2027083 3170 0 155130 1673 0 0\n"
                    "cpu0 280648 0 246600 1046231 1042 0 71620 873 0 0\nintr 1 2 3\n";
    struct dm_cpu_times c;
    assert_int_equal(dm_procstat_parse(t, strlen(t), &c), 0);
    assert_int_equal(c.user, 572908);
    assert_int_equal(c.system, 537387);
    assert_int_equal(c.idle, 2027083);
    assert_int_equal(c.iowait, 3170);
    assert_int_equal(c.softirq, 155130);
    assert_int_equal(c.steal, 1673);
    const char *bad = "intr 1 2\ncpu0 1 2 3 4\n";
    assert_int_equal(dm_procstat_parse(bad, strlen(bad), &c), -1);
    assert_int_equal(dm_procstat_parse("cpu  1 2\n", 9, &c), -1);
}

static void
test_estimate(void **st)
{
    (void)st;
    const struct dm_power_model m = { .idle_w = 30, .sys_w = 70, .io_w = 50, .wait_w = 40 };
    struct dm_cpu_times a = { 0 }, b = { 0 };
    assert_true(dm_power_estimate(&m, &a, &b) == 30); /* no time passed */
    b.idle = 100;
    assert_true(dm_power_estimate(&m, &a, &b) == 30); /* all idle */
    b = (struct dm_cpu_times){ .user = 30, .system = 20, .irq = 10, .iowait = 20, .idle = 20 };
    /* 50% SYS, 10% I/O, 20% WAIT: 30 + 0.5 x 40 + 0.1 x 20 + 0.2 x 10 = 54 W. */
    double w = dm_power_estimate(&m, &a, &b);
    assert_true(w > 53.999 && w < 54.001);
    b = (struct dm_cpu_times){ .user = 100 };
    assert_true(dm_power_estimate(&m, &a, &b) == 70); /* full use */
    /* A counter that went backwards counts as nothing. */
    a.user = 200;
    b = (struct dm_cpu_times){ .user = 100, .idle = 10 };
    assert_true(dm_power_estimate(&m, &a, &b) == 30);
}

static void
test_tcp_count(void **st)
{
    (void)st;
    const char *t =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
        "   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0\n"
        "   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000 0\n"
        "   2: 0100007F:1F90 0100007F:D432 01 00000000:00000000 00:00000000 00000000 0\n"
        "   3: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000 0\n"
        "   4: 0100007F:1F90 0100007F:D433 06 00000000:00000000 03:00000156 00000000 0\n"
        "   5: 0100007F:1F91 0100007F:D434 01 00000000:00000000 00:00000000 00000000 0\n"
        "   6: garbage\n";
    const uint16_t one[] = { 8080 }, two[] = { 8080, 8081 }, none[] = { 9 };
    /* Port 0x1F90 = 8080: two ESTABLISHED (the listener is 0A, 4 is TIME_WAIT, 3 is
     * the client side of a connection, whose local port is the ephemeral one). */
    assert_int_equal(dm_proctcp_count(t, strlen(t), one, 1), 2);
    assert_int_equal(dm_proctcp_count(t, strlen(t), two, 2), 3);
    assert_int_equal(dm_proctcp_count(t, strlen(t), none, 1), 0);
    const char *v6 = "   0: 0000000000000000FFFF00000100007F:1F90 "
                     "0000000000000000FFFF00000100007F:A000 01 00000000:00000000\n";
    assert_int_equal(dm_proctcp_count(v6, strlen(v6), one, 1), 1); /* tcp6: 32 hex digits */
}

/*
 * A table read in chunks counts as the whole: every chunk size from 1 byte,
 * so every line is split at every place; a table of 40,000 sockets (6 MB,
 * more than the agent once read at all); a line longer than the kept span is
 * skipped, and the lines around it count.
 */
static void
test_tcp_stream(void **st)
{
    (void)st;
    const char *head =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n";
    const char *est = "   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 0\n";
    const char *tw = "   4: 0100007F:1F90 0100007F:D433 06 00000000:00000000 03:00000156 0\n";
    const uint16_t one[] = { 8080 };
    char small[1024];
    snprintf(small, sizeof(small), "%s%s%s%s%s", head, est, tw, est, est);
    size_t len = strlen(small);
    for (size_t chunk = 1; chunk <= len; chunk++) {
        struct dm_proctcp_stream s;
        dm_proctcp_init(&s, one, 1);
        for (size_t off = 0; off < len; off += chunk) {
            dm_proctcp_feed(&s, small + off, off + chunk <= len ? chunk : len - off);
        }
        assert_int_equal(dm_proctcp_finish(&s), 3);
    }
    /* No newline at the end: finish counts the last line. */
    struct dm_proctcp_stream s;
    dm_proctcp_init(&s, one, 1);
    dm_proctcp_feed(&s, est, strlen(est) - 1);
    assert_int_equal(dm_proctcp_finish(&s), 1);
    /* 40,000 sockets, 10,000 of them established on the port, fed 64 KiB at a time. */
    size_t el = strlen(est), n = 40000;
    char *big = malloc(n * el + 1);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++) {
        memcpy(big + i * el, i % 4 == 0 ? est : tw, el);
    }
    dm_proctcp_init(&s, one, 1);
    for (size_t off = 0; off < n * el; off += 65536) {
        size_t k = n * el - off < 65536 ? n * el - off : 65536;
        dm_proctcp_feed(&s, big + off, k);
    }
    assert_int_equal(dm_proctcp_finish(&s), 10000);
    free(big);
    /* A line too long to keep is skipped, whole, across chunks. */
    char longl[2 * DM_PROCTCP_LINE_MAX];
    memset(longl, 'x', sizeof(longl) - 1);
    longl[sizeof(longl) - 1] = '\n';
    dm_proctcp_init(&s, one, 1);
    dm_proctcp_feed(&s, est, 10);
    dm_proctcp_feed(&s, est + 10, el - 10);
    for (size_t off = 0; off < sizeof(longl); off += 100) {
        dm_proctcp_feed(&s, longl + off, off + 100 <= sizeof(longl) ? 100 : sizeof(longl) - off);
    }
    dm_proctcp_feed(&s, est, el);
    assert_int_equal(dm_proctcp_finish(&s), 2);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_procstat),
        cmocka_unit_test(test_estimate),
        cmocka_unit_test(test_tcp_count),
        cmocka_unit_test(test_tcp_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
