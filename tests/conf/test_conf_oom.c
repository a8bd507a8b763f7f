/*
 * Out-of-memory tests of conf/conf.c: dm_conf_load_string() on the bundled
 * conf/dimmer.yaml, on a config with errors, and dm_conf_from_args(), with
 * the n-th allocation failing for n = 1, 2, ... until the call runs without
 * a failure. Each failing run must return NULL, report no error other than
 * "out of memory" for a valid config, and leak nothing (the wrapper's count
 * below, and ASan's leak checker at exit in a DM_SANITIZE build).
 *
 * libyaml's own allocations are not failed (see the wrapper's comment).
 */
#include "dm_test.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"

#include "dm_oom.h"

#define MAX_RUNS 100000 /* bound on n: a loop that never succeeds is a failure */

/* The whole file at path, NUL-terminated, from the real allocator. */
static char *
read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    char *buf = __real_malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static bool
is_oom_message(const char *msg, const char *name)
{
    size_t n = strlen(name);
    return strncmp(msg, name, n) == 0 && strcmp(msg + n, ": out of memory") == 0;
}

/*
 * Loads yaml with the n-th allocation failing for n = 1, 2, ... until a load
 * sees no failure. want_ok: the load without a failure returns a config;
 * otherwise it returns NULL with the messages of the first, unarmed load.
 * Returns the number of runs that failed an allocation.
 */
static unsigned long
load_until_success(const char *yaml, size_t len, const char *name, bool want_ok)
{
    struct dm_conf_errors base = { 0 };
    struct dm_conf *c = dm_conf_load_string(yaml, len, name, &base);
    if (want_ok) {
        assert_non_null(c);
        assert_int_equal(base.n, 0);
    } else {
        assert_null(c);
        assert_true(base.n > 0);
    }
    dm_conf_destroy(c);
    long live0 = oom_live; /* base's messages */

    unsigned long n;
    for (n = 1; n < MAX_RUNS; n++) {
        struct dm_conf_errors err = { 0 };
        oom_arm(n);
        c = dm_conf_load_string(yaml, len, name, &err);
        oom_disarm();
        if (!oom_failed) {
            /* No allocation failed: the same answer as the first load. */
            if (want_ok) {
                assert_non_null(c);
                assert_int_equal(err.n, 0);
            } else {
                assert_null(c);
                assert_int_equal(err.n, base.n);
                for (size_t i = 0; i < err.n; i++) {
                    assert_string_equal(err.msg[i], base.msg[i]);
                }
            }
            dm_conf_destroy(c);
            dm_conf_errors_fini(&err);
            break;
        }
        if (c != NULL) {
            fail_msg("allocation %lu failed but the load returned a config", n);
        }
        for (size_t i = 0; i < err.n; i++) {
            assert_non_null(err.msg[i]);
            /* A valid config must not be reported with made-up errors. */
            if (want_ok && !is_oom_message(err.msg[i], name)) {
                fail_msg("allocation %lu failed: unexpected message \"%s\"", n, err.msg[i]);
            }
        }
        dm_conf_errors_fini(&err);
        if (oom_live != live0) {
            fail_msg("allocation %lu failed: %ld blocks leaked", n, oom_live - live0);
        }
    }
    assert_true(n < MAX_RUNS);
    dm_conf_errors_fini(&base);
    assert_int_equal(oom_live, 0);
    return n - 1;
}

static void
test_bundled_config_load_survives_each_failed_allocation(void **state)
{
    (void)state;
    size_t len;
    char *yaml = read_text(DM_TEST_DATA_DIR "/../conf/dimmer.yaml", &len);
    /* Its relative paths (the demo's agent key) are from the source tree. */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(DM_TEST_DATA_DIR "/.."), 0);
    unsigned long runs = load_until_success(yaml, len, "dimmer.yaml", true);
    assert_int_equal(chdir(cwd), 0);
    assert_true(runs > 10); /* the loader allocates: the test did fail some */
    __real_free(yaml);
}

static void
test_config_with_errors_reports_them_or_fails_cleanly(void **state)
{
    (void)state;
    static const char yaml[] = "listen:\n"
                               "  - 127.0.0.1:80\n"
                               "  - not-an-address\n"
                               "timeouts:\n"
                               "  conect: 5s\n"
                               "  client_header: soon\n"
                               "pools:\n"
                               "  a:\n"
                               "    balance: nosuch\n"
                               "    servers:\n"
                               "      - name: s1\n"
                               "        address: 127.0.0.1:9001\n"
                               "      - name: s1\n"
                               "        address: 127.0.0.1:99999\n"
                               "routes:\n"
                               "  - path: /x\n"
                               "    pool: b\n"
                               "default_pool: c\n";
    unsigned long runs = load_until_success(yaml, sizeof yaml - 1, "bad.yaml", false);
    assert_true(runs > 10);
}

/* The session block: games, rate lists, networks and their delays, and one error. */
static void
test_session_block_survives_each_failed_allocation(void **state)
{
    (void)state;
    static const char ok[] = "listen: 127.0.0.1:80\n"
                             "pools:\n"
                             "  g:\n"
                             "    balance: session\n"
                             "    servers:\n"
                             "      - {name: a, address: \"127.0.0.1:9001\"}\n"
                             "      - {name: b, address: \"127.0.0.1:9002\"}\n"
                             "    session:\n"
                             "      group: {key: cookie, name: table}\n"
                             "      default_game: racer\n"
                             "      games:\n"
                             "        chess: {frame_load: 15, rates: [15, 20, 25, 30]}\n"
                             "        racer: {frame_load: 60, rates: [30, 45]}\n"
                             "      networks:\n"
                             "        - {prefix: 10.1.0.0/16, delays: {a: 20ms, b: 80}}\n"
                             "        - {prefix: 10.2.0.0/16, delays: {b: 5}}\n";
    assert_true(load_until_success(ok, sizeof ok - 1, "session.yaml", true) > 10);
    static const char bad[] = "listen: 127.0.0.1:80\n"
                              "pools:\n"
                              "  g:\n"
                              "    balance: session\n"
                              "    servers:\n"
                              "      - {name: a, address: \"127.0.0.1:9001\"}\n"
                              "    session:\n"
                              "      default_game: go\n"
                              "      games:\n"
                              "        chess: {frame_load: 15, rates: [15, 10]}\n"
                              "      networks:\n"
                              "        - {prefix: 10.1.0.0/16, delays: {c: 20ms}}\n"
                              "        - {prefix: 10.1.0.0/16}\n";
    assert_true(load_until_success(bad, sizeof bad - 1, "session.yaml", false) > 10);
}

static void
test_quick_start_survives_each_failed_allocation(void **state)
{
    (void)state;
    unsigned long n;
    for (n = 1; n < MAX_RUNS; n++) {
        struct dm_conf_errors err = { 0 };
        oom_arm(n);
        struct dm_conf *c =
            dm_conf_from_args("127.0.0.1:8080", "127.0.0.1:9001, 127.0.0.1:9002", &err);
        oom_disarm();
        if (!oom_failed) {
            assert_non_null(c);
            assert_int_equal(c->pools[0].nservers, 2);
            dm_conf_destroy(c);
            dm_conf_errors_fini(&err);
            break;
        }
        assert_null(c);
        dm_conf_errors_fini(&err);
        if (oom_live != 0) {
            fail_msg("allocation %lu failed: %ld blocks leaked", n, oom_live);
        }
    }
    assert_true(n > 1 && n < MAX_RUNS);
    assert_int_equal(oom_live, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundled_config_load_survives_each_failed_allocation),
        cmocka_unit_test(test_config_with_errors_reports_them_or_fails_cleanly),
        cmocka_unit_test(test_quick_start_survives_each_failed_allocation),
        cmocka_unit_test(test_session_block_survives_each_failed_allocation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
