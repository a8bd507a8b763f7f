/*
 * Load patterns (bench/load/pattern.c): the CSV parser with its comments,
 * header, blanks and CRLF, each of its messages with its line number,
 * interpolation at, between, before and after the points, scaling, and every
 * built-in shape. Every text is parsed from an exactly sized heap copy with
 * no NUL after it, so ASan sees any read past its end.
 */
#include "dm_test.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/load/pattern.h"

#define ERR_CAP 256

/* Parses the string s (without its NUL) as the file "pat.csv". */
static int
parse(struct dm_load_pattern *p, const char *s, char *err)
{
    size_t len = strlen(s);
    char *copy = malloc(len > 0 ? len : 1);
    assert_non_null(copy);
    memcpy(copy, s, len);
    int rc = dm_load_pattern_parse(p, copy, len, "pat.csv", err, ERR_CAP);
    free(copy);
    return rc;
}

static void
assert_point(const struct dm_load_pattern *p, size_t i, double t, double sessions)
{
    assert_true(i < p->n);
    assert_true(p->t[i] == t);
    assert_true(p->sessions[i] == sessions);
}

static void
assert_near(double got, double want)
{
    if (fabs(got - want) > 1e-9 * (fabs(want) + 1)) {
        fail_msg("got %.17g, want %.17g", got, want);
    }
}

static void
test_parse_skips_comments_blanks_and_header_and_reads_crlf(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP] = "stale";
    assert_int_equal(parse(&p,
                           "# Experiment I, by hand\r\n"
                           "\r\n"
                           "  # an indented comment\n"
                           "seconds,sessions\r\n"
                           " 0 , 10 \r\n"
                           "\t60,\t120\r\n"
                           "   \t \n"
                           "90.5,400\n"
                           "1e3,0",
                           err),
                     0);
    assert_string_equal(err, "");
    assert_int_equal(p.n, 4);
    assert_point(&p, 0, 0, 10);
    assert_point(&p, 1, 60, 120);
    assert_point(&p, 2, 90.5, 400);
    assert_point(&p, 3, 1000, 0);
    assert_true(dm_load_pattern_duration(&p) == 1000);
    dm_load_pattern_fini(&p);
    assert_int_equal(p.n, 0);
    assert_null(p.t);
    assert_null(p.sessions);
}

static void
test_parse_without_header_and_with_byte_order_mark(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP];
    assert_int_equal(parse(&p, "5,7\n10,0.25\n", err), 0);
    assert_int_equal(p.n, 2);
    assert_point(&p, 0, 5, 7);
    assert_point(&p, 1, 10, 0.25);
    dm_load_pattern_fini(&p);
    /* A spreadsheet's UTF-8 mark, then a header. */
    assert_int_equal(parse(&p, "\xEF\xBB\xBFtime,sessions\r\n0,1\r\n", err), 0);
    assert_int_equal(p.n, 1);
    assert_point(&p, 0, 0, 1);
    dm_load_pattern_fini(&p);
    assert_int_equal(parse(&p,
                           "\xEF\xBB\xBF"
                           "0,1\n",
                           err),
                     0);
    assert_int_equal(p.n, 1);
    dm_load_pattern_fini(&p);
    /* -0 sessions is 0, and a single point is a pattern. */
    assert_int_equal(parse(&p, "3,-0\n", err), 0);
    assert_int_equal(p.n, 1);
    assert_false(signbit(p.sessions[0]));
    dm_load_pattern_fini(&p);
}

static void
test_parse_reads_many_points(void **state)
{
    (void)state;
    /* More points than the first allocation holds. */
    char *text = malloc(20000 * 16);
    assert_non_null(text);
    size_t len = 0;
    for (int i = 0; i < 20000; i++) {
        len += (size_t)sprintf(text + len, "%d,%d\n", i, 3 * i);
    }
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP];
    assert_int_equal(dm_load_pattern_parse(&p, text, len, "big.csv", err, sizeof err), 0);
    free(text);
    assert_int_equal(p.n, 20000);
    for (size_t i = 0; i < p.n; i++) {
        assert_point(&p, i, (double)i, 3.0 * (double)i);
    }
    dm_load_pattern_fini(&p);
}

static const struct bad {
    const char *text;
    const char *err;
} bad[] = {
    { "0,1\n5,2\nabc\n", "pat.csv:3: expected seconds,sessions" },
    { "0,1\n\n12,3\n10,4\n", "pat.csv:4: time 10 is not after 12" },
    { "0,1\n1,1\n1.0,2\n", "pat.csv:3: time 1.0 is not after 1" },
    { "# c\n0,-5\n", "pat.csv:2: sessions -5 is negative" },
    { "-1,5\n", "pat.csv:1: time -1 is negative" },
    { "0,1\ninf,2\n", "pat.csv:2: time inf is not finite" },
    { "0,nan\n", "pat.csv:1: sessions nan is not finite" },
    { "0,1\n1,1e999\n", "pat.csv:2: sessions 1e999 is not finite" },
    { "0,1\n10x,2\n", "pat.csv:2: trailing garbage \"x\" after time 10" },
    { "0,1\n2 3,2\n", "pat.csv:2: trailing garbage \"3\" after time 2" },
    { "0,1,2\n", "pat.csv:1: trailing garbage \",2\" after sessions 1" },
    { "0,5 6\r\n", "pat.csv:1: trailing garbage \"6\" after sessions 5" },
    { "0,1\r\n5,abc\r\n", "pat.csv:2: sessions \"abc\" is not a number" },
    { "0,1\nabc,5\n", "pat.csv:2: time \"abc\" is not a number" },
    { "seconds,sessions\nminutes,sessions\n", "pat.csv:2: time \"minutes\" is not a number" },
    { "0,\n", "pat.csv:1: expected seconds,sessions" },
    { ",5\n", "pat.csv:1: expected seconds,sessions" },
    { "0;5\n", "pat.csv:1: expected seconds,sessions" },
    { "0,1\n1,"
      "1000000000000000000000000000000000000000000000000000000000000000000000\n",
      "pat.csv:2: sessions is longer than 63 characters" },
    { "", "pat.csv: no points" },
    { "# nothing\n\n  \r\nseconds,sessions\r\n", "pat.csv: no points" },
};

static void
test_parse_errors_name_the_line(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        /* p must come back as it was: a sentinel, not a zeroed struct. */
        double t = 1, s = 2;
        struct dm_load_pattern p = { .n = 1, .t = &t, .sessions = &s };
        char err[ERR_CAP] = "";
        int rc = parse(&p, bad[i].text, err);
        if (rc != -EINVAL || strcmp(err, bad[i].err) != 0) {
            fail_msg("case %zu: rc %d, err \"%s\", want \"%s\"", i, rc, err, bad[i].err);
        }
        assert_int_equal(p.n, 1);
        assert_ptr_equal(p.t, &t);
        assert_ptr_equal(p.sessions, &s);
    }
}

static void
test_parse_error_fits_errlen(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 };
    char err[8];
    memset(err, 'x', sizeof err);
    assert_int_equal(dm_load_pattern_parse(&p, "0,-1", 4, "pat.csv", err, sizeof err), -EINVAL);
    assert_string_equal(err, "pat.csv");
    assert_int_equal(dm_load_pattern_parse(&p, "0,-1", 4, "pat.csv", NULL, 0), -EINVAL);
    assert_int_equal(dm_load_pattern_parse(&p, "0,1", 3, "pat.csv", NULL, 0), 0);
    assert_int_equal(p.n, 1);
    dm_load_pattern_fini(&p);
}

static void
test_at_interpolates_between_points(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP];
    assert_int_equal(parse(&p, "10,100\n20,200\n40,50\n", err), 0);
    /* At the points. */
    assert_true(dm_load_pattern_at(&p, 10) == 100);
    assert_true(dm_load_pattern_at(&p, 20) == 200);
    assert_true(dm_load_pattern_at(&p, 40) == 50);
    /* Between them. */
    assert_near(dm_load_pattern_at(&p, 15), 150);
    assert_near(dm_load_pattern_at(&p, 12.5), 125);
    assert_near(dm_load_pattern_at(&p, 30), 125);
    assert_near(dm_load_pattern_at(&p, 39), 57.5);
    /* Before the first point: its value; after the last: the run is over. */
    assert_true(dm_load_pattern_at(&p, 0) == 100);
    assert_true(dm_load_pattern_at(&p, -5) == 100);
    assert_true(dm_load_pattern_at(&p, 9.999) == 100);
    assert_true(dm_load_pattern_at(&p, 40.001) == 0);
    assert_true(dm_load_pattern_at(&p, 1e12) == 0);
    assert_true(dm_load_pattern_at(&p, INFINITY) == 0);
    assert_true(dm_load_pattern_at(&p, -INFINITY) == 100);
    assert_true(dm_load_pattern_at(&p, NAN) == 0);
    assert_true(dm_load_pattern_duration(&p) == 40);
    dm_load_pattern_fini(&p);
}

static void
test_at_finds_every_segment(void **state)
{
    (void)state;
    /* 1000 points, t = i, sessions = i * i: the search must land in each segment. */
    struct dm_load_pattern p = { 0 };
    size_t n = 1000;
    p.n = n;
    p.t = malloc(n * sizeof(double));
    p.sessions = malloc(n * sizeof(double));
    assert_non_null(p.t);
    assert_non_null(p.sessions);
    for (size_t i = 0; i < n; i++) {
        p.t[i] = (double)i;
        p.sessions[i] = (double)(i * i);
    }
    for (size_t i = 0; i + 1 < n; i++) {
        double a = (double)(i * i), b = (double)((i + 1) * (i + 1));
        assert_true(dm_load_pattern_at(&p, (double)i) == a);
        assert_near(dm_load_pattern_at(&p, (double)i + 0.25), a + (b - a) * 0.25);
    }
    assert_true(dm_load_pattern_at(&p, (double)(n - 1)) == (double)((n - 1) * (n - 1)));
    assert_true(dm_load_pattern_at(&p, (double)n) == 0);
    dm_load_pattern_fini(&p);
}

static void
test_empty_pattern_is_zero_everywhere(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 };
    assert_true(dm_load_pattern_at(&p, 0) == 0);
    assert_true(dm_load_pattern_at(&p, 5) == 0);
    assert_true(dm_load_pattern_duration(&p) == 0);
    dm_load_pattern_scale(&p, 10);
    dm_load_pattern_fini(&p);
    dm_load_pattern_fini(&p);
    assert_int_equal(p.n, 0);
}

static void
test_single_point(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP];
    assert_int_equal(parse(&p, "30,9\n", err), 0);
    assert_true(dm_load_pattern_at(&p, 0) == 9);
    assert_true(dm_load_pattern_at(&p, 30) == 9);
    assert_true(dm_load_pattern_at(&p, 30.5) == 0);
    assert_true(dm_load_pattern_duration(&p) == 30);
    dm_load_pattern_fini(&p);
}

static void
test_scale_plays_faster_or_slower(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 }, orig = { 0 };
    char err[ERR_CAP];
    assert_int_equal(dm_load_pattern_builtin(&p, "exp2", 800, err, sizeof err), 0);
    assert_int_equal(dm_load_pattern_builtin(&orig, "exp2", 800, err, sizeof err), 0);
    /* 30 minutes in 3. */
    dm_load_pattern_scale(&p, 10);
    assert_near(dm_load_pattern_duration(&p), 180);
    assert_int_equal(p.n, orig.n);
    for (double t = 0; t <= 1800; t += 0.5) {
        assert_near(dm_load_pattern_at(&p, t / 10), dm_load_pattern_at(&orig, t));
    }
    assert_true(dm_load_pattern_at(&p, 180.1) == 0);
    /* Back, then at half speed. */
    dm_load_pattern_scale(&p, 0.1);
    assert_near(dm_load_pattern_duration(&p), 1800);
    dm_load_pattern_scale(&p, 0.5);
    assert_near(dm_load_pattern_duration(&p), 3600);
    assert_near(dm_load_pattern_at(&p, 2 * 62.5), dm_load_pattern_at(&orig, 62.5));
    for (size_t i = 1; i < p.n; i++) {
        assert_true(p.t[i] > p.t[i - 1]);
    }
    dm_load_pattern_fini(&p);
    dm_load_pattern_fini(&orig);
}

/* The invariants every shape keeps, with max sessions m. */
static void
check_shape(const char *name, double m, double duration)
{
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP] = "stale";
    assert_int_equal(dm_load_pattern_builtin(&p, name, m, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_true(p.n >= 2);
    assert_true(p.t[0] == 0);
    double hi = 0;
    for (size_t i = 0; i < p.n; i++) {
        assert_true(i == 0 || p.t[i] > p.t[i - 1]);
        assert_true(p.sessions[i] >= 0);
        hi = p.sessions[i] > hi ? p.sessions[i] : hi;
    }
    if (hi != m) {
        fail_msg("%s: highest point %.17g, want %.17g", name, hi, m);
    }
    assert_true(dm_load_pattern_duration(&p) == duration);
    dm_load_pattern_fini(&p);
}

static void
test_builtin_shapes_peak_at_max(void **state)
{
    (void)state;
    const double maxes[] = { 1200, 800, 1, 0, 333.3, 1e6 };
    for (size_t i = 0; i < sizeof(maxes) / sizeof(maxes[0]); i++) {
        check_shape("exp1", maxes[i], 3600);
        check_shape("exp2", maxes[i], 1800);
        check_shape("steps", maxes[i], 124);
        check_shape("ramp", maxes[i], 60);
        check_shape("constant", maxes[i], 60);
    }
}

static void
test_exp1_is_a_day(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP];
    const double m = 1200;
    assert_int_equal(dm_load_pattern_builtin(&p, "exp1", m, err, sizeof err), 0);
    /* The maximum is the evening peak (6 pm to 10 pm, 150 s an hour). */
    double best_t = -1, best = -1;
    for (double t = 0; t <= 3600; t += 1) {
        double v = dm_load_pattern_at(&p, t);
        if (v > best) {
            best = v;
            best_t = t;
        }
    }
    assert_true(best == m);
    assert_true(best_t >= 18 * 150 && best_t <= 22 * 150);
    /* A noon peak above its neighbours, then an afternoon dip below it. */
    double noon = dm_load_pattern_at(&p, 12 * 150);
    assert_true(noon > dm_load_pattern_at(&p, 11 * 150));
    assert_true(noon > dm_load_pattern_at(&p, 13 * 150));
    assert_true(noon > 0.8 * m && noon < m);
    double dip = dm_load_pattern_at(&p, 15 * 150);
    assert_true(dip < noon - 0.1 * m);
    /* Low at night and at the end; a slow morning rise (no more than 20% an hour). */
    assert_true(dm_load_pattern_at(&p, 4 * 150) <= 0.1 * m);
    assert_true(dm_load_pattern_at(&p, 3600) <= 0.25 * m);
    for (int h = 4; h < 12; h++) {
        double a = dm_load_pattern_at(&p, h * 150), b = dm_load_pattern_at(&p, (h + 1) * 150);
        assert_true(b > a && b - a <= 0.2 * m);
    }
    dm_load_pattern_fini(&p);
}

static void
test_exp2_rises_and_falls_rapidly(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP];
    const double m = 800;
    assert_int_equal(dm_load_pattern_builtin(&p, "exp2", m, err, sizeof err), 0);
    /* Changes of at least 40% of max within 10 s, both up and down. */
    unsigned rises = 0, falls = 0;
    for (double t = 0; t + 10 <= 1800; t += 1) {
        double d = dm_load_pattern_at(&p, t + 10) - dm_load_pattern_at(&p, t);
        rises += d >= 0.4 * m;
        falls += d <= -0.4 * m;
    }
    assert_true(rises >= 5 && falls >= 5);
    /* Levels held for tens of seconds to two minutes; low, intermediate and high ones. */
    bool low = false, mid = false, high = false;
    unsigned holds = 0;
    for (size_t i = 0; i + 1 < p.n; i++) {
        if (p.sessions[i] != p.sessions[i + 1]) {
            assert_true(p.t[i + 1] - p.t[i] <= 5); /* a ramp */
            continue;
        }
        double held = p.t[i + 1] - p.t[i], level = p.sessions[i] / m;
        assert_true(held >= 20 && held <= 120);
        holds++;
        low |= level >= 0.1 && level <= 0.2;
        mid |= level >= 0.5 && level <= 0.75;
        high |= level == 1;
        assert_true(level >= 0.1);
    }
    assert_true(holds >= 10);
    assert_true(low && mid && high);
    dm_load_pattern_fini(&p);
}

/*
 * dm_load_pattern_ramp: every ramp of exp2 widened about its middle, the
 * levels giving the time, the sessions at each level's middle unchanged;
 * a ramp beside no level keeps that end; a level too short for both of its
 * ramps gives each half of itself, and the return says how far it got.
 */
static void
test_ramp_widens_each_rise_and_fall(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 }, orig = { 0 };
    char err[ERR_CAP];
    assert_int_equal(dm_load_pattern_builtin(&p, "exp2", 800, err, sizeof err), 0);
    assert_int_equal(dm_load_pattern_builtin(&orig, "exp2", 800, err, sizeof err), 0);
    /* exp2's shortest levels last 30 s: 20 s ramps fit, taking 7.5 s from each side. */
    assert_true(dm_load_pattern_ramp(&p, 20) == 20);
    assert_int_equal(p.n, orig.n);
    unsigned ramps = 0;
    for (size_t i = 0; i + 1 < p.n; i++) {
        assert_true(p.t[i + 1] >= p.t[i]);
        assert_true(p.sessions[i] == orig.sessions[i]);
        double mid = (p.t[i] + p.t[i + 1]) / 2, omid = (orig.t[i] + orig.t[i + 1]) / 2;
        if (orig.sessions[i] != orig.sessions[i + 1]) {
            ramps++;
            assert_near(p.t[i + 1] - p.t[i], 20);
            assert_near(mid, omid); /* about its middle */
        } else {
            /* A level keeps its middle and its sessions there, shorter by 7.5 s at each
             * end that a ramp took (the first and the last have one ramp beside them). */
            assert_near(dm_load_pattern_at(&p, omid), orig.sessions[i]);
            double lost = (orig.t[i + 1] - orig.t[i]) - (p.t[i + 1] - p.t[i]);
            assert_near(lost, i == 0 || i + 2 == p.n ? 7.5 : 15);
        }
    }
    assert_true(ramps >= 20);
    assert_near(dm_load_pattern_duration(&p), 1800);
    /* Already long enough: nothing moves, nothing was tried. */
    struct dm_load_pattern q = { 0 };
    assert_int_equal(dm_load_pattern_builtin(&q, "exp2", 800, err, sizeof err), 0);
    assert_true(isinf(dm_load_pattern_ramp(&q, 5)));
    for (size_t i = 0; i < q.n; i++) {
        assert_true(q.t[i] == orig.t[i]);
    }
    /* Too long for the 30 s levels: each gives half of itself. The shortest ramp
     * is 395..400 s, between a 120 s level (27.5 s of it) and a 30 s one (15 s). */
    assert_near(dm_load_pattern_ramp(&q, 60), 5 + 27.5 + 15);
    for (size_t i = 0; i + 1 < q.n; i++) {
        assert_true(q.t[i + 1] >= q.t[i]);
    }
    dm_load_pattern_fini(&q);
    dm_load_pattern_fini(&p);
    dm_load_pattern_fini(&orig);

    /* Two ramps with no level between: the shared point stays; the outer ends move. */
    const char *csv = "0,0\n10,0\n12,50\n14,100\n24,100\n";
    assert_int_equal(parse(&p, csv, err), 0);
    assert_near(dm_load_pattern_ramp(&p, 6), 4);
    assert_point(&p, 0, 0, 0);
    assert_point(&p, 1, 8, 0);   /* took 2 s: half of the 4 s it wanted */
    assert_point(&p, 2, 12, 50); /* between two ramps: no level beside it */
    assert_point(&p, 3, 16, 100);
    assert_point(&p, 4, 24, 100);
    dm_load_pattern_fini(&p);
}

static void
test_steps_ramp_and_constant(void **state)
{
    (void)state;
    struct dm_load_pattern p = { 0 };
    char err[ERR_CAP];
    assert_int_equal(dm_load_pattern_builtin(&p, "steps", 400, err, sizeof err), 0);
    assert_true(dm_load_pattern_at(&p, 0) == 0);
    assert_near(dm_load_pattern_at(&p, 0.5), 50);
    const double level[] = { 100, 200, 300, 400 };
    for (int s = 0; s < 4; s++) {
        double from = 1 + 31 * s; /* each step: a 1 s ramp, then 30 s held */
        assert_true(dm_load_pattern_at(&p, from) == level[s]);
        assert_true(dm_load_pattern_at(&p, from + 15) == level[s]);
        assert_true(dm_load_pattern_at(&p, from + 30) == level[s]);
    }
    assert_true(dm_load_pattern_at(&p, 124.5) == 0);
    dm_load_pattern_fini(&p);

    assert_int_equal(dm_load_pattern_builtin(&p, "ramp", 60, err, sizeof err), 0);
    for (double t = 0; t <= 60; t += 0.25) {
        assert_near(dm_load_pattern_at(&p, t), t);
    }
    dm_load_pattern_fini(&p);

    assert_int_equal(dm_load_pattern_builtin(&p, "constant", 75, err, sizeof err), 0);
    for (double t = 0; t <= 60; t += 0.25) {
        assert_true(dm_load_pattern_at(&p, t) == 75);
    }
    assert_true(dm_load_pattern_at(&p, 60.25) == 0);
    dm_load_pattern_fini(&p);
}

static void
test_builtin_errors(void **state)
{
    (void)state;
    double t = 1, s = 2;
    struct dm_load_pattern p = { .n = 1, .t = &t, .sessions = &s };
    char err[ERR_CAP];
    assert_int_equal(dm_load_pattern_builtin(&p, "exp3", 10, err, sizeof err), -EINVAL);
    assert_string_equal(err, "unknown pattern exp3 (exp1, exp2, steps, ramp, constant)");
    assert_int_equal(dm_load_pattern_builtin(&p, "", 10, err, sizeof err), -EINVAL);
    assert_string_equal(err, "unknown pattern  (exp1, exp2, steps, ramp, constant)");
    assert_int_equal(dm_load_pattern_builtin(&p, "EXP1", 10, err, sizeof err), -EINVAL);
    const double maxes[] = { -1, -1e-9, NAN, INFINITY };
    for (size_t i = 0; i < sizeof(maxes) / sizeof(maxes[0]); i++) {
        err[0] = '\0';
        assert_int_equal(dm_load_pattern_builtin(&p, "ramp", maxes[i], err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "is not a finite number >= 0"));
    }
    assert_int_equal(p.n, 1);
    assert_ptr_equal(p.t, &t);
    assert_ptr_equal(p.sessions, &s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_skips_comments_blanks_and_header_and_reads_crlf),
        cmocka_unit_test(test_parse_without_header_and_with_byte_order_mark),
        cmocka_unit_test(test_parse_reads_many_points),
        cmocka_unit_test(test_parse_errors_name_the_line),
        cmocka_unit_test(test_parse_error_fits_errlen),
        cmocka_unit_test(test_at_interpolates_between_points),
        cmocka_unit_test(test_at_finds_every_segment),
        cmocka_unit_test(test_ramp_widens_each_rise_and_fall),
        cmocka_unit_test(test_empty_pattern_is_zero_everywhere),
        cmocka_unit_test(test_single_point),
        cmocka_unit_test(test_scale_plays_faster_or_slower),
        cmocka_unit_test(test_builtin_shapes_peak_at_max),
        cmocka_unit_test(test_exp1_is_a_day),
        cmocka_unit_test(test_exp2_rises_and_falls_rapidly),
        cmocka_unit_test(test_steps_ramp_and_constant),
        cmocka_unit_test(test_builtin_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
