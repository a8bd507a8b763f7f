/*
 * Out-of-memory tests of bench/load/pattern.c and pattern_file.c:
 * dm_load_pattern_parse(), dm_load_pattern_builtin() and
 * dm_load_pattern_load() with the n-th allocation failing for n = 1, 2, ...
 * until the call runs without a failure. A failed call returns -ENOMEM with
 * "NAME: out of memory", leaves the pattern as it was and leaks nothing (the
 * wrapper's count, and ASan's leak checker in a DM_SANITIZE build).
 *
 * fopen()'s own allocation is glibc's and is not failed (tests/dm_oom.h).
 */
#include "dm_test.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/load/pattern.h"
#include "bench/load/pattern_file.h"

#include "dm_oom.h"

#define MAX_RUNS 1000
#define POINTS   300 /* past the first two allocations of each array */

enum call { PARSE, BUILTIN, LOAD };

static char text[POINTS * 16];
static size_t text_len;
static char path[64];

static int
setup(void **state)
{
    (void)state;
    text_len = 0;
    for (int i = 0; i < POINTS; i++) {
        text_len += (size_t)snprintf(text + text_len, sizeof text - text_len, "%d,%d\n", i, i % 7);
    }
    strcpy(path, "/tmp/dm-load-oom-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, text_len), (ssize_t)text_len);
    assert_int_equal(close(fd), 0);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static int
call(enum call what, struct dm_load_pattern *p, char *err, size_t errlen)
{
    switch (what) {
    case PARSE:
        return dm_load_pattern_parse(p, text, text_len, "pat.csv", err, errlen);
    case BUILTIN:
        return dm_load_pattern_builtin(p, "exp2", 800, err, errlen);
    case LOAD:
        return dm_load_pattern_load(p, path, err, errlen);
    }
    return -1;
}

static void
until_success(enum call what, const char *name, size_t points)
{
    unsigned long n;
    for (n = 1; n < MAX_RUNS; n++) {
        double t = 1, s = 2;
        struct dm_load_pattern p = { .n = 1, .t = &t, .sessions = &s };
        char err[256], want[256];
        oom_arm(n);
        int rc = call(what, &p, err, sizeof err);
        oom_disarm();
        if (!oom_failed) {
            assert_int_equal(rc, 0);
            assert_int_equal(p.n, points);
            dm_load_pattern_fini(&p);
            assert_int_equal(oom_live, 0);
            break;
        }
        snprintf(want, sizeof want, "%s: out of memory", name);
        if (rc != -ENOMEM || strcmp(err, want) != 0) {
            fail_msg("allocation %lu failed: rc %d, err \"%s\"", n, rc, err);
        }
        assert_int_equal(p.n, 1);
        assert_ptr_equal(p.t, &t);
        assert_ptr_equal(p.sessions, &s);
        if (oom_live != 0) {
            fail_msg("allocation %lu failed: %ld blocks leaked", n, oom_live);
        }
    }
    assert_true(n > 1 && n < MAX_RUNS);
    print_message("%s: %lu runs failed an allocation\n", name, n - 1);
}

static void
test_parse_out_of_memory(void **state)
{
    (void)state;
    until_success(PARSE, "pat.csv", POINTS);
}

static void
test_builtin_out_of_memory(void **state)
{
    (void)state;
    until_success(BUILTIN, "pattern exp2", 48);
}

static void
test_load_out_of_memory(void **state)
{
    (void)state;
    until_success(LOAD, path, POINTS);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_out_of_memory),
        cmocka_unit_test(test_builtin_out_of_memory),
        cmocka_unit_test(test_load_out_of_memory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
