/*
 * Load patterns: the CSV parser, the built-in shapes and interpolation. The
 * format and the shapes' tables are in pattern.h.
 */
#include "bench/load/pattern.h"

#include "parsers/errbuf.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIELD_MAX 63 /* characters of one number, as written */

/* Points being built: p is written only once all of them are read. */
struct points {
    double *t, *s;
    size_t n, cap;
};

static int
points_push(struct points *pt, double t, double s)
{
    if (pt->n == pt->cap) {
        size_t cap = pt->cap ? pt->cap * 2 : 64;
        double *nt = realloc(pt->t, cap * sizeof(*nt));
        if (nt == NULL) {
            return -ENOMEM;
        }
        pt->t = nt;
        double *ns = realloc(pt->s, cap * sizeof(*ns));
        if (ns == NULL) {
            return -ENOMEM;
        }
        pt->s = ns;
        pt->cap = cap;
    }
    pt->t[pt->n] = t;
    pt->s[pt->n] = s + 0.0; /* -0 reads as 0 */
    pt->n++;
    return 0;
}

static void
points_free(struct points *pt)
{
    free(pt->t);
    free(pt->s);
    memset(pt, 0, sizeof(*pt));
}

/* Moves the points into p, which then owns them. */
static void
points_give(struct points *pt, struct dm_load_pattern *p)
{
    p->n = pt->n;
    p->t = pt->t;
    p->sessions = pt->s;
    memset(pt, 0, sizeof(*pt));
}

/* ------------------------------------------------------------------------ */
/* CSV                                                                      */
/* ------------------------------------------------------------------------ */

struct csv {
    const char *name;
    unsigned line;
    char *err;
    size_t errlen;
    const char *prev; /* the previous point's time, as written */
    size_t prev_len;
};

__attribute__((format(printf, 2, 3))) static int
csv_error(struct csv *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dm_errbuf_vat(c->err, c->errlen, c->name, c->line, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static bool
is_blank(char ch)
{
    return ch == ' ' || ch == '\t';
}

/* Drops the blanks at both ends of (*p, *len). */
static void
trim(const char **p, size_t *len)
{
    while (*len > 0 && is_blank((*p)[0])) {
        (*p)++;
        (*len)--;
    }
    while (*len > 0 && is_blank((*p)[*len - 1])) {
        (*len)--;
    }
}

enum num {
    NUM_OK,
    NUM_NONE,    /* does not start with a number */
    NUM_GARBAGE, /* a number, then more: *used says how much is the number */
    NUM_LONG,    /* longer than FIELD_MAX */
};

/* Reads the field (f, len), not NUL-terminated, as one number. */
static enum num
read_number(const char *f, size_t len, double *out, size_t *used)
{
    char buf[FIELD_MAX + 1];
    if (len > FIELD_MAX) {
        return NUM_LONG;
    }
    memcpy(buf, f, len);
    buf[len] = '\0';
    char *end;
    *out = strtod(buf, &end);
    *used = (size_t)(end - buf);
    if (*used == 0) {
        return NUM_NONE;
    }
    return *used == len ? NUM_OK : NUM_GARBAGE;
}

/*
 * One field as a finite number, or an error naming the field (what is
 * "time" or "sessions").
 */
static int
csv_number(struct csv *c, const char *what, const char *f, size_t len, double *out)
{
    size_t used = 0;
    int flen = (int)len;
    switch (read_number(f, len, out, &used)) {
    case NUM_OK:
        break;
    case NUM_NONE:
        return csv_error(c, "%s \"%.*s\" is not a number", what, flen, f);
    case NUM_LONG:
        return csv_error(c, "%s is longer than %d characters", what, FIELD_MAX);
    case NUM_GARBAGE: {
        const char *g = f + used;
        size_t glen = len - used;
        trim(&g, &glen);
        return csv_error(c, "trailing garbage \"%.*s\" after %s %.*s", (int)glen, g, what,
                         (int)used, f);
    }
    }
    if (!isfinite(*out)) {
        return csv_error(c, "%s %.*s is not finite", what, flen, f);
    }
    if (*out < 0) {
        return csv_error(c, "%s %.*s is negative", what, flen, f);
    }
    return 0;
}

/* One trimmed, non-empty line that is not a comment. */
static int
csv_line(struct csv *c, struct points *pt, const char *l, size_t len, bool first)
{
    const char *comma = memchr(l, ',', len);
    const char *tf = l, *sf;
    size_t tlen = comma ? (size_t)(comma - l) : len, slen;
    trim(&tf, &tlen);
    double t, s;
    size_t used;
    if (first && tlen > 0 && read_number(tf, tlen, &t, &used) == NUM_NONE) {
        return 0; /* the header */
    }
    if (comma == NULL) {
        return csv_error(c, "expected seconds,sessions");
    }
    sf = comma + 1;
    slen = (size_t)(l + len - sf);
    trim(&sf, &slen);
    if (tlen == 0 || slen == 0) {
        return csv_error(c, "expected seconds,sessions");
    }
    int rc = csv_number(c, "time", tf, tlen, &t);
    if (rc < 0) {
        return rc;
    }
    if (pt->n > 0 && !(t > pt->t[pt->n - 1])) {
        return csv_error(c, "time %.*s is not after %.*s", (int)tlen, tf, (int)c->prev_len,
                         c->prev);
    }
    rc = csv_number(c, "sessions", sf, slen, &s);
    if (rc < 0) {
        return rc;
    }
    if (points_push(pt, t, s) < 0) {
        dm_errbuf_set(c->err, c->errlen, "%s: out of memory", c->name);
        return -ENOMEM;
    }
    c->prev = tf;
    c->prev_len = tlen;
    return 0;
}

int
dm_load_pattern_parse(struct dm_load_pattern *p, const char *text, size_t len, const char *name,
                      char *err, size_t errlen)
{
    struct csv c = { .name = name, .err = err, .errlen = errlen };
    struct points pt = { 0 };
    bool first = true;
    size_t pos = 0;
    dm_errbuf_set(err, errlen, "%s", "");
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        pos = 3; /* a UTF-8 byte order mark, as spreadsheets write */
    }
    while (pos < len) {
        const char *l = text + pos;
        const char *nl = memchr(l, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - l) : len - pos;
        pos += ll + (nl ? 1 : 0);
        c.line++;
        if (ll > 0 && l[ll - 1] == '\r') {
            ll--;
        }
        trim(&l, &ll);
        if (ll == 0 || l[0] == '#') {
            continue;
        }
        int rc = csv_line(&c, &pt, l, ll, first);
        if (rc < 0) {
            points_free(&pt);
            return rc;
        }
        first = false;
    }
    if (pt.n == 0) {
        dm_errbuf_set(err, errlen, "%s: no points", name);
        return -EINVAL;
    }
    points_give(&pt, p);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Built-in shapes                                                          */
/* ------------------------------------------------------------------------ */

struct point {
    double t, share; /* seconds, fraction of max_sessions */
};

/* One day in one hour: a point per hour of the day, 150 s apart (pattern.h). */
static const struct point shape_exp1[] = {
    { 0, .20 },    { 150, .15 },  { 300, .11 },  { 450, .09 },  { 600, .08 },
    { 750, .10 },  { 900, .16 },  { 1050, .27 }, { 1200, .42 }, { 1350, .58 },
    { 1500, .71 }, { 1650, .82 }, { 1800, .88 }, { 1950, .84 }, { 2100, .72 },
    { 2250, .68 }, { 2400, .72 }, { 2550, .80 }, { 2700, .88 }, { 2850, .96 },
    { 3000, 1.0 }, { 3150, .92 }, { 3300, .70 }, { 3450, .42 }, { 3600, .20 },
};

/* Levels held from..to, with 5 s ramps between them (pattern.h). */
static const struct point shape_exp2[] = {
    { 0, .15 },    { 60, .15 },   { 65, 1.0 },   { 155, 1.0 },  { 160, .15 },  { 220, .15 },
    { 225, .50 },  { 270, .50 },  { 275, 1.0 },  { 395, 1.0 },  { 400, .20 },  { 430, .20 },
    { 435, .75 },  { 525, .75 },  { 530, .10 },  { 590, .10 },  { 595, 1.0 },  { 655, 1.0 },
    { 660, .50 },  { 780, .50 },  { 785, .15 },  { 830, .15 },  { 835, .75 },  { 895, .75 },
    { 900, 1.0 },  { 930, 1.0 },  { 935, .20 },  { 1055, .20 }, { 1060, 1.0 }, { 1105, 1.0 },
    { 1110, .60 }, { 1200, .60 }, { 1205, .10 }, { 1280, .10 }, { 1285, .75 }, { 1405, .75 },
    { 1410, .15 }, { 1440, .15 }, { 1445, 1.0 }, { 1550, 1.0 }, { 1555, .50 }, { 1615, .50 },
    { 1620, .20 }, { 1680, .20 }, { 1685, 1.0 }, { 1740, 1.0 }, { 1745, .15 }, { 1800, .15 },
};

static const struct point shape_steps[] = {
    { 0, 0 },    { 1, .25 },  { 31, .25 }, { 32, .50 },  { 62, .50 },
    { 63, .75 }, { 93, .75 }, { 94, 1.0 }, { 124, 1.0 },
};

static const struct point shape_ramp[] = { { 0, 0 }, { 60, 1.0 } };

static const struct point shape_constant[] = { { 0, 1.0 }, { 60, 1.0 } };

/* A table's name, points and their number. */
#define SHAPE(s) #s, shape_##s, sizeof(shape_##s) / sizeof(shape_##s[0])

static const struct shape {
    const char *name;
    const struct point *points;
    size_t n;
} shapes[] = {
    { SHAPE(exp1) }, { SHAPE(exp2) }, { SHAPE(steps) }, { SHAPE(ramp) }, { SHAPE(constant) },
};

#undef SHAPE

int
dm_load_pattern_builtin(struct dm_load_pattern *p, const char *name, double max_sessions, char *err,
                        size_t errlen)
{
    dm_errbuf_set(err, errlen, "%s", "");
    const struct shape *sh = NULL;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        if (strcmp(shapes[i].name, name) == 0) {
            sh = &shapes[i];
            break;
        }
    }
    if (sh == NULL) {
        dm_errbuf_set(err, errlen, "unknown pattern %s (exp1, exp2, steps, ramp, constant)", name);
        return -EINVAL;
    }
    if (!isfinite(max_sessions) || max_sessions < 0) {
        dm_errbuf_set(err, errlen, "pattern %s: max sessions %g is not a finite number >= 0", name,
                      max_sessions);
        return -EINVAL;
    }
    struct points pt = { 0 };
    for (size_t i = 0; i < sh->n; i++) {
        /* Each table's highest share is exactly 1.0, so its point is max_sessions exactly. */
        if (points_push(&pt, sh->points[i].t, sh->points[i].share * max_sessions) < 0) {
            points_free(&pt);
            dm_errbuf_set(err, errlen, "pattern %s: out of memory", name);
            return -ENOMEM;
        }
    }
    points_give(&pt, p);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Playing a pattern                                                        */
/* ------------------------------------------------------------------------ */

void
dm_load_pattern_scale(struct dm_load_pattern *p, double scale)
{
    assert(isfinite(scale) && scale > 0);
    for (size_t i = 0; i < p->n; i++) {
        p->t[i] /= scale;
    }
}

/* Whether segment i (points i, i + 1) of p is a level: both points at the same sessions. */
static bool
is_level(const struct dm_load_pattern *p, size_t i)
{
    return i + 1 < p->n && p->sessions[i] == p->sessions[i + 1];
}

double
dm_load_pattern_ramp(struct dm_load_pattern *p, double seconds)
{
    assert(isfinite(seconds) && seconds >= 0);
    double shortest = INFINITY;
    /* Each ramp moves only its own two points, by at most half of each level
     * beside it: the other half belongs to the ramp on the level's other
     * side, so widening one ramp never changes what another can take. The
     * lengths are those of the points as they were (t0: point i-1, t1: i). */
    double t0 = 0, t1 = p->n > 0 ? p->t[0] : 0;
    for (size_t i = 0; i + 1 < p->n; i++) {
        double t2 = p->t[i + 1]; /* not moved yet: only this ramp or the next moves it */
        double len = t2 - t1;
        if (p->sessions[i] != p->sessions[i + 1] && len < seconds) {
            double half = (seconds - len) / 2, left = 0, right = 0;
            if (i > 0 && is_level(p, i - 1)) {
                left = half < (t1 - t0) / 2 ? half : (t1 - t0) / 2;
            }
            if (is_level(p, i + 1)) {
                double room = (p->t[i + 2] - t2) / 2;
                right = half < room ? half : room;
            }
            p->t[i] = t1 - left;
            p->t[i + 1] = t2 + right;
            double got = len + left + right;
            shortest = got < shortest ? got : shortest;
        }
        t0 = t1;
        t1 = t2;
    }
    return shortest;
}

double
dm_load_pattern_at(const struct dm_load_pattern *p, double t)
{
    if (p->n == 0 || isnan(t)) {
        return 0;
    }
    size_t last = p->n - 1;
    if (t < p->t[0]) {
        return p->sessions[0];
    }
    if (t >= p->t[last]) {
        return t == p->t[last] ? p->sessions[last] : 0;
    }
    /* Binary search keeping t[lo] <= t < t[hi], so t[hi] > t[lo] even with equal times. */
    size_t lo = 0, hi = last;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->t[mid] <= t) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    double f = (t - p->t[lo]) / (p->t[hi] - p->t[lo]);
    double v = p->sessions[lo] + (p->sessions[hi] - p->sessions[lo]) * f;
    return v > 0 ? v : 0; /* both ends are >= 0: only rounding could go below */
}

double
dm_load_pattern_duration(const struct dm_load_pattern *p)
{
    return p->n > 0 ? p->t[p->n - 1] : 0;
}

void
dm_load_pattern_fini(struct dm_load_pattern *p)
{
    free(p->t);
    free(p->sessions);
    memset(p, 0, sizeof(*p));
}
