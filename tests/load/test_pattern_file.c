/*
 * Reading a pattern file (bench/load/pattern_file.c): a file written by the
 * test, its parse errors named by path and line, a missing file, a
 * directory, an empty file, and the size cap (exactly at it and one byte
 * past it).
 */
#include "dm_test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/load/pattern.h"
#include "bench/load/pattern_file.h"

#define ERR_CAP 512

struct tmp {
    char dir[64];
    char path[128];
};

static int
setup(void **state)
{
    struct tmp *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    strcpy(t->dir, "/tmp/dm-load-test-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof t->path, "%s/pat.csv", t->dir);
    *state = t;
    return 0;
}

static int
teardown(void **state)
{
    struct tmp *t = *state;
    unlink(t->path);
    rmdir(t->dir);
    free(t);
    return 0;
}

static void
write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void
test_load_a_file(void **state)
{
    struct tmp *t = *state;
    const char text[] = "seconds,sessions\r\n0,0\r\n# up\r\n30,100\r\n60,100\r\n";
    write_file(t->path, text, sizeof text - 1);
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP] = "stale";
    assert_int_equal(dm_load_pattern_load(&p, t->path, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(p.n, 3);
    assert_true(dm_load_pattern_at(&p, 15) == 50);
    assert_true(dm_load_pattern_duration(&p) == 60);
    dm_load_pattern_fini(&p);
}

static void
test_load_names_path_and_line(void **state)
{
    struct tmp *t = *state;
    const char text[] = "0,1\n12,3\n10,4\n";
    write_file(t->path, text, sizeof text - 1);
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP], want[ERR_CAP];
    assert_int_equal(dm_load_pattern_load(&p, t->path, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s:3: time 10 is not after 12", t->path);
    assert_string_equal(err, want);
    assert_int_equal(p.n, 0);
    assert_null(p.t);
    /* An empty file has no points. */
    write_file(t->path, "", 0);
    assert_int_equal(dm_load_pattern_load(&p, t->path, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s: no points", t->path);
    assert_string_equal(err, want);
}

static void
test_load_missing_file_and_directory(void **state)
{
    struct tmp *t = *state;
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP], want[ERR_CAP], missing[256];
    snprintf(missing, sizeof missing, "%s/missing.csv", t->dir);
    assert_int_equal(dm_load_pattern_load(&p, missing, err, sizeof err), -ENOENT);
    snprintf(want, sizeof want, "%s: %s", missing, strerror(ENOENT));
    assert_string_equal(err, want);
    assert_int_equal(dm_load_pattern_load(&p, t->dir, err, sizeof err), -EISDIR);
    snprintf(want, sizeof want, "%s: %s", t->dir, strerror(EISDIR));
    assert_string_equal(err, want);
    assert_int_equal(dm_load_pattern_load(&p, missing, NULL, 0), -ENOENT);
    assert_int_equal(p.n, 0);
}

static void
test_load_size_cap(void **state)
{
    struct tmp *t = *state;
    /* Exactly DM_LOAD_PATTERN_FILE_MAX bytes: one point, then one long comment. */
    size_t max = DM_LOAD_PATTERN_FILE_MAX;
    char *text = malloc(max + 1);
    assert_non_null(text);
    memcpy(text, "0,1\n7,2\n", 8);
    memset(text + 8, '#', max - 9);
    text[max - 1] = '\n';
    write_file(t->path, text, max);
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP], want[ERR_CAP];
    assert_int_equal(dm_load_pattern_load(&p, t->path, err, sizeof err), 0);
    assert_int_equal(p.n, 2);
    dm_load_pattern_fini(&p);
    text[max] = '\n';
    write_file(t->path, text, max + 1);
    assert_int_equal(dm_load_pattern_load(&p, t->path, err, sizeof err), -EFBIG);
    snprintf(want, sizeof want, "%s: larger than 16 MiB", t->path);
    assert_string_equal(err, want);
    assert_int_equal(p.n, 0);
    free(text);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_load_a_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_names_path_and_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_missing_file_and_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_size_cap, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
