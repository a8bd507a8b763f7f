/*
 * Load patterns of dimmer-load: the number of concurrent sessions the load
 * generator should keep open at each moment of a run, as points joined by
 * straight lines. Pure code (bench/load/CMakeLists.txt, tests/purity.cmake):
 * no clock, no I/O, no globals; reading a pattern file is in pattern_file.h.
 *
 * A pattern file is CSV text, one point a line:
 *
 *   # Experiment I, first hour       a comment (the first non-blank char is #)
 *   seconds,sessions                 an optional header: the first line whose
 *                                    first field is not a number
 *   0, 0                             seconds,sessions; blanks around fields
 *   60, 120                          times strictly increasing, the first >= 0;
 *   90.5, 400                        sessions >= 0; decimal or 1e3 notation
 *
 * Blank lines are skipped, lines may end in CRLF, a UTF-8 byte order mark
 * before the first line is skipped. Numbers are read by strtod() in the C
 * locale (dimmer-load never calls setlocale()), so "inf" and "nan" are read
 * as numbers and refused as not finite.
 *
 * Built-in shapes (dm_load_pattern_builtin()), as fractions of max_sessions:
 *
 *   "exp1": one day of web traffic in one hour (one hour of the day = 150 s),
 *   the power paper's Experiment I (1,200 sessions at most there):
 *       hour    0    1    2    3    4    5    6    7    8    9   10   11   12
 *       t (s)   0  150  300  450  600  750  900 1050 1200 1350 1500 1650 1800
 *       share .20  .15  .11  .09  .08  .10  .16  .27  .42  .58  .71  .82  .88
 *       hour   13   14   15   16   17   18   19   20   21   22   23   24
 *       t (s) 1950 2100 2250 2400 2550 2700 2850 3000 3150 3300 3450 3600
 *       share .84  .72  .68  .72  .80  .88  .96 1.00  .92  .70  .42  .20
 *     night low at 4 am, slow morning rise, noon peak (.88), afternoon dip
 *     (.68 at 3 pm), evening peak at 8 pm (the maximum), fall back to .20.
 *
 *   "exp2": 1800 s of rapid rises and falls, the paper's Experiment II (800
 *   sessions at most there). Each row is a level held from..to; between two
 *   rows the level moves in a 5 s straight ramp (e.g. 60..65 s: 15% -> 100%):
 *   from..to s  share   from..to s  share   from..to s  share
 *        0..60    .15     595..655   1.00   1205..1280    .10
 *      65..155   1.00     660..780    .50   1285..1405    .75
 *     160..220    .15     785..830    .15   1410..1440    .15
 *     225..270    .50     835..895    .75   1445..1550   1.00
 *     275..395   1.00     900..930   1.00   1555..1615    .50
 *     400..430    .20    935..1055    .20   1620..1680    .20
 *     435..525    .75   1060..1105   1.00   1685..1740   1.00
 *     530..590    .10   1110..1200    .60   1745..1800    .15
 *
 *   "steps": 0 at 0 s, then 4 equal steps, each reached by a 1 s ramp and
 *   held 30 s: .25 over 1..31 s, .50 over 32..62, .75 over 63..93, 1.00
 *   over 94..124 s (124 s in all).
 *   "ramp": 0 at 0 s to 1.00 at 60 s. "constant": 1.00 from 0 to 60 s.
 */
#ifndef DM_BENCH_LOAD_PATTERN_H
#define DM_BENCH_LOAD_PATTERN_H

#include <stddef.h>

/*
 * A pattern: n >= 1 points, t strictly increasing with t[0] >= 0, every
 * sessions[i] >= 0 and finite. Both arrays are owned by the struct (one
 * allocation each, freed by dm_load_pattern_fini()). An all-zero struct is
 * the empty pattern: 0 sessions at every time, duration 0.
 */
struct dm_load_pattern {
    size_t n;         /* points */
    double *t;        /* seconds from the start of the run */
    double *sessions; /* target concurrent sessions at t[i] */
};

/*
 * Parses the CSV text (text, len), which need not be NUL-terminated, into p
 * (format at the top of this file); name is the file name used in messages.
 * p is overwritten, not freed: pass a zeroed or finished pattern. Returns 0
 * (err set to ""), -EINVAL with "NAME:LINE: what is wrong" or "NAME: no
 * points" in err, or -ENOMEM with "NAME: out of memory"; on an error p is
 * left as it was. err gets at most errlen bytes, NUL-terminated (errlen may
 * be 0). Any thread.
 */
int dm_load_pattern_parse(struct dm_load_pattern *p, const char *text, size_t len, const char *name,
                          char *err, size_t errlen);

/*
 * The built-in shape name (table at the top of this file), scaled so that
 * its highest point is max_sessions (finite, >= 0), into p, which is
 * overwritten as by dm_load_pattern_parse(). Returns 0, -EINVAL with
 * "unknown pattern NAME (exp1, exp2, steps, ramp, constant)" or a message on
 * a bad max_sessions in err, or -ENOMEM. Any thread.
 */
int dm_load_pattern_builtin(struct dm_load_pattern *p, const char *name, double max_sessions,
                            char *err, size_t errlen);

/*
 * Divides every time of p by scale, which must be finite and > 0 (the
 * caller checks its option): scale 10 plays a 30-minute pattern in 3
 * minutes, 0.5 plays it at half speed. Times stay increasing, but two times
 * closer together than a double's precision may become equal (then at()
 * jumps there).
 */
void dm_load_pattern_scale(struct dm_load_pattern *p, double scale);

/*
 * Makes every ramp of p last at least `seconds` (finite, >= 0; the caller
 * checks its option), for patterns of levels joined by short ramps such as
 * exp2. A ramp is a segment between two points whose sessions differ and
 * which lasts less than `seconds`; it is widened about its middle, each end
 * taking time from the level (a segment whose two points are equal) beside
 * it, at most half of that level, so that two ramps never overlap. A side
 * without a level does not move. Returns the shortest ramp that p has
 * afterwards among those it tried to widen (`seconds` when every one got
 * its length; +inf when none was shorter), so that the caller can say that
 * a level was too short. Times stay non-decreasing (a level may shrink to
 * no time). Any thread.
 */
double dm_load_pattern_ramp(struct dm_load_pattern *p, double seconds);

/*
 * Target sessions at t seconds from the start: linear interpolation between
 * the two points around t, the value of a point at its time, the first
 * point's value before it, and 0 after the last point (the run is over) or
 * when t is NaN or p is empty. Never negative. Any thread; p is not changed.
 */
double dm_load_pattern_at(const struct dm_load_pattern *p, double t);

/* The time of the last point, the run's length in seconds (0 when empty). */
double dm_load_pattern_duration(const struct dm_load_pattern *p);

/* Frees the arrays and zeroes p; a zeroed or finished p is a no-op. */
void dm_load_pattern_fini(struct dm_load_pattern *p);

#endif
