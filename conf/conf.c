/*
 * The YAML loader. libyaml's document API builds the node tree with marks;
 * the loader then walks it once, key by key, with a fixed schema per mapping:
 * every mapping is checked for unknown keys (with the nearest known key
 * suggested) and duplicate keys, every value for its type and range. Errors
 * go to a list with their position and the walk goes on, so one run reports
 * as many mistakes as it can; at the end they are sorted into file order and
 * handed to the caller's struct dm_conf_errors, and any error means no config.
 */
#include "conf/conf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "balancers/balancer.h"
#include "conf/internal.h"

/* A config file larger than this is surely a mistake (a log file passed by -c?). */
#define CONF_MAX_BYTES (16u << 20)

#define NKEYS(a) (sizeof(a) / sizeof((a)[0]))

/* Width of a quoted value inside a message, before it is cut with "...". */
#define SHOW_MAX 60

struct conf_msg {
    size_t line; /* 1-based; 0 for messages with no position, kept in order found */
    size_t col;
    char *text;
};

/* One load: the document, the config being built and the errors found. */
struct loader {
    const char *name; /* file name in messages */
    yaml_document_t doc;
    struct dm_conf *c;
    struct conf_msg *msgs;
    size_t nmsgs;
    bool oom;
};

/* ---- messages ---- */

static char *
vformat(const char *fmt, va_list ap)
{
    va_list ap2;
    int n;
    char *s;

    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        return NULL;
    }
    s = malloc((size_t)n + 1);
    if (s != NULL) {
        vsnprintf(s, (size_t)n + 1, fmt, ap);
    }
    return s;
}

static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *
format(const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

/* Takes text (may be NULL after a failed allocation, which only sets oom). */
static void
add_msg(struct loader *ld, size_t line, size_t col, char *text)
{
    struct conf_msg *m;

    if (text == NULL) {
        ld->oom = true;
        return;
    }
    m = realloc(ld->msgs, (ld->nmsgs + 1) * sizeof(*m));
    if (m == NULL) {
        free(text);
        ld->oom = true;
        return;
    }
    ld->msgs = m;
    ld->msgs[ld->nmsgs++] = (struct conf_msg){ .line = line, .col = col, .text = text };
}

static void
vfail_mark(struct loader *ld, yaml_mark_t mark, const char *fmt, va_list ap)
{
    char *what = vformat(fmt, ap);

    if (what == NULL) {
        ld->oom = true;
        return;
    }
    add_msg(ld, mark.line + 1, mark.column + 1,
            format("%s:%zu:%zu: %s", ld->name, mark.line + 1, mark.column + 1, what));
    free(what);
}

static void fail_mark(struct loader *ld, yaml_mark_t mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
fail_mark(struct loader *ld, yaml_mark_t mark, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfail_mark(ld, mark, fmt, ap);
    va_end(ap);
}

/* Reports an error at the start of node. */
static void fail_at(struct loader *ld, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
fail_at(struct loader *ld, const yaml_node_t *node, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfail_mark(ld, node->start_mark, fmt, ap);
    va_end(ap);
}

/* A message with no position: the quick start flags. */
static void fail_plain(struct loader *ld, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
fail_plain(struct loader *ld, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    add_msg(ld, 0, 0, vformat(fmt, ap));
    va_end(ap);
}

static int
err_push(struct dm_conf_errors *err, char *text)
{
    char **m = realloc(err->msg, (err->n + 1) * sizeof(*m));
    if (m == NULL) {
        free(text);
        return -ENOMEM;
    }
    err->msg = m;
    err->msg[err->n++] = text;
    return 0;
}

/*
 * Moves the messages to err in file order; a stable insertion sort, as the
 * list is short and equal positions must keep the order they were found in.
 */
static void
flush_msgs(struct loader *ld, struct dm_conf_errors *err)
{
    for (size_t i = 1; i < ld->nmsgs; i++) {
        struct conf_msg m = ld->msgs[i];
        size_t j = i;
        while (j > 0 && (ld->msgs[j - 1].line > m.line ||
                         (ld->msgs[j - 1].line == m.line && ld->msgs[j - 1].col > m.col))) {
            ld->msgs[j] = ld->msgs[j - 1];
            j--;
        }
        ld->msgs[j] = m;
    }
    if (ld->oom) {
        char *s = format("%s: out of memory", ld->name);
        if (s != NULL) {
            add_msg(ld, 0, 0, s);
        }
    }
    for (size_t i = 0; i < ld->nmsgs; i++) {
        if (err == NULL) {
            free(ld->msgs[i].text);
        } else {
            (void)err_push(err, ld->msgs[i].text);
        }
    }
    free(ld->msgs);
    ld->msgs = NULL;
    ld->nmsgs = 0;
}

void
dm_conf_errors_fini(struct dm_conf_errors *err)
{
    if (err == NULL) {
        return;
    }
    for (size_t i = 0; i < err->n; i++) {
        free(err->msg[i]);
    }
    free(err->msg);
    err->msg = NULL;
    err->n = 0;
}

/* ---- nodes ---- */

static const char *
text_of(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* A plain empty, "~" or "null" scalar: "key:" with nothing after it. */
static bool
is_null(const yaml_node_t *n)
{
    static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        return false;
    }
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++) {
        if (strcmp(text_of(n), nulls[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* Writes s as a double-quoted string, escaped, cut to SHOW_MAX characters. */
static const char *
quote(const char *s, size_t len, char *buf, size_t size)
{
    size_t o = 0;

    buf[o++] = '"';
    for (size_t i = 0; i < len && o + 8 < size; i++) {
        unsigned char ch = (unsigned char)s[i];
        /* Cut at the first lead byte past the limit, never inside a UTF-8 sequence. */
        if (i >= SHOW_MAX && (ch & 0xc0) != 0x80) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (ch == '"' || ch == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", ch);
        } else {
            buf[o++] = (char)ch;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

#define SHOW_BUF (SHOW_MAX * 4 + 16)

/* What a node is, for "expected X, got Y". */
static const char *
show(const yaml_node_t *n, char *buf)
{
    switch (n->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a list";
    case YAML_SCALAR_NODE:
        if (is_null(n)) {
            return "an empty value";
        }
        return quote(text_of(n), n->data.scalar.length, buf, SHOW_BUF);
    default:
        return "nothing";
    }
}

static void
fail_type(struct loader *ld, const yaml_node_t *n, const char *expected)
{
    char buf[SHOW_BUF];
    fail_at(ld, n, "expected %s, got %s", expected, show(n, buf));
}

static yaml_node_t *
node(struct loader *ld, int index)
{
    return yaml_document_get_node(&ld->doc, index);
}

static char *
dup_str(struct loader *ld, const char *s)
{
    char *d = strdup(s);
    if (d == NULL) {
        ld->oom = true;
    }
    return d;
}

/* A non-empty scalar without NUL bytes; NULL after reporting otherwise. */
static const char *
get_text(struct loader *ld, const yaml_node_t *n, const char *expected)
{
    if (n->type != YAML_SCALAR_NODE || is_null(n) || n->data.scalar.length == 0) {
        fail_type(ld, n, expected);
        return NULL;
    }
    if (strlen(text_of(n)) != n->data.scalar.length) {
        fail_at(ld, n, "%s must not contain a NUL character", expected);
        return NULL;
    }
    return text_of(n);
}

/* Replaces *out with a copy of the string; false after reporting an error. */
static bool
get_string(struct loader *ld, const yaml_node_t *n, char **out)
{
    const char *s = get_text(ld, n, "a string");
    char *d;

    if (s == NULL) {
        return false;
    }
    d = dup_str(ld, s);
    if (d == NULL) {
        return false;
    }
    free(*out);
    *out = d;
    return true;
}

/*
 * An integer key in min..max. The text must be decimal digits with an optional
 * "-", so that "-1" is out of range rather than "not an integer".
 */
static bool
get_uint(struct loader *ld, const yaml_node_t *n, const char *key, uint64_t min, uint64_t max,
         uint64_t *out)
{
    const char *s;
    bool neg, overflow = false;
    uint64_t v = 0;
    const char *p;

    if (n->type != YAML_SCALAR_NODE || is_null(n)) {
        fail_type(ld, n, "an integer");
        return false;
    }
    s = text_of(n);
    neg = s[0] == '-';
    p = s + (neg ? 1 : 0);
    if (*p == '\0' || strspn(p, "0123456789") != strlen(p)) {
        fail_type(ld, n, "an integer");
        return false;
    }
    for (; *p != '\0'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) {
            overflow = true;
            break;
        }
        v = v * 10 + d;
    }
    if ((neg && v != 0) || overflow || v < min || v > max) {
        /* s is digits and maybe a "-", safe to print as it is. */
        fail_at(ld, n, "%s must be between %llu and %llu, got %s", key, (unsigned long long)min,
                (unsigned long long)max, s);
        return false;
    }
    *out = v;
    return true;
}

static bool
get_unsigned(struct loader *ld, const yaml_node_t *n, const char *key, unsigned min, unsigned max,
             unsigned *out)
{
    uint64_t v;
    if (!get_uint(ld, n, key, min, max, &v)) {
        return false;
    }
    *out = (unsigned)v;
    return true;
}

/* A duration; zero only where it means "off". */
static bool
get_duration(struct loader *ld, const yaml_node_t *n, const char *key, bool zero_ok, uint64_t *out)
{
    const char *s = get_text(ld, n, "a duration");
    char buf[SHOW_BUF];
    uint64_t v;

    if (s == NULL) {
        return false;
    }
    if (dm_conf_parse_duration_ms(s, &v) != 0) {
        fail_at(ld, n, "bad duration %s (use ms, s, m, h)", quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    if (v == 0 && !zero_ok) {
        fail_at(ld, n, "%s must be more than 0", key);
        return false;
    }
    /* Bounded so that loop time plus a duration, or a rate times one, cannot wrap. */
    if (v > DM_CONF_DURATION_MAX_MS) {
        fail_at(ld, n, "%s must be at most 1000h", key);
        return false;
    }
    *out = v;
    return true;
}

/* Writes a byte count the way a user would ("16k", "64m"). */
static const char *
show_size(uint64_t v, char *buf, size_t size)
{
    static const char units[] = { 'g', 'm', 'k' };
    for (unsigned i = 0; i < 3; i++) {
        unsigned shift = 30 - 10 * i;
        if (v != 0 && (v & ((UINT64_C(1) << shift) - 1)) == 0) {
            snprintf(buf, size, "%llu%c", (unsigned long long)(v >> shift), units[i]);
            return buf;
        }
    }
    snprintf(buf, size, "%llu", (unsigned long long)v);
    return buf;
}

static bool
get_size(struct loader *ld, const yaml_node_t *n, const char *key, uint64_t min, uint64_t max,
         uint64_t *out)
{
    const char *s = get_text(ld, n, "a size");
    char buf[SHOW_BUF], lo[32], hi[32];
    uint64_t v;

    if (s == NULL) {
        return false;
    }
    if (dm_conf_parse_size(s, &v) != 0) {
        fail_at(ld, n, "bad size %s (use a number of bytes, or k, m, g)",
                quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    if (v < min && max == UINT64_MAX) {
        /* "between 1 and 18446744073709551615" would only hide the point. */
        fail_at(ld, n, "%s must be at least %s, got %s", key, show_size(min, lo, sizeof(lo)),
                quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    if (v < min || v > max) {
        fail_at(ld, n, "%s must be between %s and %s, got %s", key, show_size(min, lo, sizeof(lo)),
                show_size(max, hi, sizeof(hi)), quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    *out = v;
    return true;
}

/* An address; listener: one to listen on, where port 0 (any free port) is allowed. */
static bool
get_addr(struct loader *ld, const yaml_node_t *n, bool listener, struct dm_conf_addr *out)
{
    const char *s = get_text(ld, n, "an address");
    const char *why;
    char buf[SHOW_BUF];
    int rc;

    if (s == NULL) {
        return false;
    }
    rc = dm_conf_parse_addr_why(s, listener, out, &why);
    if (rc == -ENOMEM) {
        ld->oom = true;
        return false;
    }
    if (rc != 0) {
        fail_at(ld, n, "bad address %s (%s)", quote(s, strlen(s), buf, sizeof(buf)), why);
        return false;
    }
    return true;
}

/*
 * A plain "off" or "false", or an empty value: how a section is switched off.
 */
static bool
is_off(const yaml_node_t *n)
{
    return is_null(n) ||
           (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
            (strcmp(text_of(n), "off") == 0 || strcmp(text_of(n), "false") == 0));
}

/* ---- mappings ---- */

/* The key of an earlier pair of map equal to pair's key, else NULL. */
static const yaml_node_t *
earlier_key(struct loader *ld, const yaml_node_t *map, const yaml_node_pair_t *pair)
{
    const yaml_node_t *k = node(ld, pair->key);

    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pair; q++) {
        const yaml_node_t *e = node(ld, q->key);
        if (e->type == YAML_SCALAR_NODE && e->data.scalar.length == k->data.scalar.length &&
            memcmp(e->data.scalar.value, k->data.scalar.value, k->data.scalar.length) == 0) {
            return e;
        }
    }
    return NULL;
}

/* The key of pair when it is a usable name; reports and returns NULL otherwise. */
static const char *
pair_key(struct loader *ld, const yaml_node_t *map, const yaml_node_pair_t *pair, const char *what)
{
    const yaml_node_t *k = node(ld, pair->key);
    const yaml_node_t *first;
    char buf[SHOW_BUF];
    const char *s = get_text(ld, k, "a name");

    if (s == NULL) {
        return NULL;
    }
    first = earlier_key(ld, map, pair);
    if (first != NULL) {
        fail_at(ld, k, "duplicate %s %s (first at line %zu)", what,
                quote(s, strlen(s), buf, sizeof(buf)), first->start_mark.line + 1);
        return NULL;
    }
    return s;
}

static bool
is_mapping(struct loader *ld, const yaml_node_t *n)
{
    if (n->type != YAML_MAPPING_NODE) {
        fail_type(ld, n, "a mapping");
        return false;
    }
    return true;
}

/*
 * Checks every key of map against the n known keys and sets vals[i] to the
 * value of known[i], or NULL when absent. Unknown and duplicate keys are
 * reported and skipped. Returns false, after reporting, when map is not a
 * mapping; an empty value counts as an empty mapping when null_ok.
 */
static bool
walk(struct loader *ld, const yaml_node_t *map, bool null_ok, const char *const *known, size_t n,
     yaml_node_t **vals)
{
    char buf[SHOW_BUF];

    for (size_t i = 0; i < n; i++) {
        vals[i] = NULL;
    }
    if (null_ok && is_null(map)) {
        return true;
    }
    if (!is_mapping(ld, map)) {
        return false;
    }
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = node(ld, p->key);
        const char *key = pair_key(ld, map, p, "key");
        const char *near;
        size_t i;

        if (key == NULL) {
            continue;
        }
        i = 0;
        while (i < n && strcmp(key, known[i]) != 0) {
            i++;
        }
        if (i < n) {
            vals[i] = node(ld, p->value);
            continue;
        }
        near = dm_conf_suggest(key, known, n);
        if (near != NULL) {
            fail_at(ld, k, "unknown key %s (did you mean \"%s\"?)",
                    quote(key, strlen(key), buf, sizeof(buf)), near);
        } else {
            fail_at(ld, k, "unknown key %s", quote(key, strlen(key), buf, sizeof(buf)));
        }
    }
    return true;
}

/* Value of key in map (already walked), for looking back at earlier items. */
static const yaml_node_t *
lookup(struct loader *ld, const yaml_node_t *map, const char *key)
{
    if (map->type != YAML_MAPPING_NODE) {
        return NULL;
    }
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = node(ld, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp(text_of(k), key) == 0) {
            return node(ld, p->value);
        }
    }
    return NULL;
}

/* Items of a list, or NULL (with *n = 0) after reporting; empty values are empty lists. */
static yaml_node_item_t *
list_items(struct loader *ld, const yaml_node_t *n, size_t *count)
{
    *count = 0;
    if (is_null(n)) {
        return NULL;
    }
    if (n->type != YAML_SEQUENCE_NODE) {
        fail_type(ld, n, "a list");
        return NULL;
    }
    *count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    return n->data.sequence.items.start;
}

/* "a, b, c" of names into buf, cut with "..." when it does not fit. */
static const char *
join_names(const char *const *names, size_t n, char *buf, size_t size)
{
    size_t o = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(buf + o, size - o, "%s%s", i > 0 ? ", " : "", names[i]);
        if (w < 0 || (size_t)w >= size - o) {
            snprintf(buf + (o < size - 4 ? o : size - 4), 4, "...");
            break;
        }
        o += (size_t)w;
    }
    return buf;
}

/* ---- more values ---- */

/*
 * A decimal number of at least min ("1.25", "0.1", "2", "1e-3"). strtod must
 * take the whole scalar, and only digits, signs, "." and "e" may appear, so
 * "1.5x", "0x10", "inf", "nan" and " 1" are not numbers.
 */
static bool
get_double(struct loader *ld, const yaml_node_t *n, const char *key, double min, double *out)
{
    const char *s;
    char *end;
    double v;

    if (n->type != YAML_SCALAR_NODE || is_null(n)) {
        fail_type(ld, n, "a number");
        return false;
    }
    s = text_of(n);
    if (strspn(s, "0123456789+-.eE") != n->data.scalar.length) {
        fail_type(ld, n, "a number");
        return false;
    }
    v = strtod(s, &end);
    if (end == s || *end != '\0') {
        fail_type(ld, n, "a number");
        return false;
    }
    /* s holds only the characters above: safe to print as it is. */
    if (v < min) {
        fail_at(ld, n, "%s must be at least %g, got %s", key, min, s);
        return false;
    }
    if (!isfinite(v)) {
        fail_at(ld, n, "%s is too large, got %s", key, s);
        return false;
    }
    /* Adding 0 turns "-0" into 0, so no policy sees a negative zero. */
    *out = v + 0.0;
    return true;
}

/* true, yes, false or no: the four words people write for a switch. */
static bool
get_bool(struct loader *ld, const yaml_node_t *n, bool *out)
{
    static const char *const words[] = { "true", "yes", "false", "no" };

    if (n->type == YAML_SCALAR_NODE && !is_null(n)) {
        for (size_t i = 0; i < NKEYS(words); i++) {
            if (strcmp(text_of(n), words[i]) == 0) {
                *out = i < 2;
                return true;
            }
        }
    }
    fail_type(ld, n, "true or false");
    return false;
}

/*
 * The index of the scalar n among the n_names names, or -1 after reporting
 * "unknown <what> "x" (known: a, b, c)".
 */
static int
get_choice(struct loader *ld, const yaml_node_t *n, const char *what, const char *const *names,
           size_t n_names)
{
    const char *s = get_text(ld, n, "a string");
    char buf[SHOW_BUF], list[256];

    if (s == NULL) {
        return -1;
    }
    for (size_t i = 0; i < n_names; i++) {
        if (strcmp(s, names[i]) == 0) {
            return (int)i;
        }
    }
    fail_at(ld, n, "unknown %s %s (known: %s)", what, quote(s, strlen(s), buf, sizeof(buf)),
            join_names(names, n_names, list, sizeof(list)));
    return -1;
}

/* A token of RFC 9110 section 5.6.2: what a header or cookie name may be made of. */
static bool
is_token(const char *s)
{
    if (*s == '\0') {
        return false;
    }
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        bool alnum =
            (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        if (!alnum && strchr("!#$%&'*+-.^_`|~", ch) == NULL) {
            return false;
        }
    }
    return true;
}

/*
 * A path that must name, now, a directory we can open (dir) or a regular file
 * we can read (!dir). The message carries the system's reason at the value:
 * docroot "x": No such file or directory. Relative paths are taken from the
 * working directory, as the preload will take them.
 */
static bool
get_existing_path(struct loader *ld, const yaml_node_t *n, const char *key, bool dir, char **out)
{
    const char *s = get_text(ld, n, "a path");
    char buf[SHOW_BUF], ebuf[128];
    const char *why = NULL;
    struct stat st;
    int fd = -1;

    if (s == NULL) {
        return false;
    }
    if (dir) {
        /* O_DIRECTORY gives ENOENT, ENOTDIR and EACCES in one call. */
        fd = open(s, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
            why = strerror_r(errno, ebuf, sizeof(ebuf));
        }
    } else if (stat(s, &st) != 0) {
        why = strerror_r(errno, ebuf, sizeof(ebuf));
    } else if (S_ISDIR(st.st_mode)) {
        why = strerror_r(EISDIR, ebuf, sizeof(ebuf));
    } else if (!S_ISREG(st.st_mode)) {
        /* Opening a FIFO would block the load until a writer comes. */
        why = "not a regular file";
    } else {
        fd = open(s, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            why = strerror_r(errno, ebuf, sizeof(ebuf));
        }
    }
    if (why != NULL) {
        fail_at(ld, n, "%s %s: %s", key, quote(s, strlen(s), buf, sizeof(buf)), why);
        return false;
    }
    close(fd);
    return get_string(ld, n, out);
}

/* ---- sections ---- */

static void
load_workers(struct loader *ld, const yaml_node_t *n)
{
    uint64_t v;

    if (n->type == YAML_SCALAR_NODE && strcmp(text_of(n), "auto") == 0) {
        ld->c->workers = 0;
        return;
    }
    if (n->type != YAML_SCALAR_NODE || is_null(n) ||
        strspn(text_of(n), "-0123456789") != n->data.scalar.length) {
        fail_type(ld, n, "an integer or \"auto\"");
        return;
    }
    if (get_uint(ld, n, "workers", 1, 1024, &v)) {
        ld->c->workers = (unsigned)v;
    }
}

static uint16_t
port_of(const struct dm_conf_addr *a)
{
    if (a->sa.ss_family == AF_INET6) {
        return ntohs(((const struct sockaddr_in6 *)&a->sa)->sin6_port);
    }
    return ntohs(((const struct sockaddr_in *)&a->sa)->sin_port);
}

/*
 * Whether two listen addresses would be the same socket. Port 0 never
 * collides: each such listener binds a free port of its own.
 */
static bool
same_addr(const struct dm_conf_addr *a, const struct dm_conf_addr *b)
{
    return a->salen == b->salen && memcmp(&a->sa, &b->sa, a->salen) == 0 && port_of(a) != 0;
}

static void
load_listen(struct loader *ld, const yaml_node_t *n)
{
    struct dm_conf *c = ld->c;
    yaml_node_item_t *items;
    size_t count;
    char buf[SHOW_BUF];

    if (n->type == YAML_SCALAR_NODE && !is_null(n)) {
        c->listeners = calloc(1, sizeof(*c->listeners));
        if (c->listeners == NULL) {
            ld->oom = true;
            return;
        }
        if (get_addr(ld, n, true, &c->listeners[0])) {
            c->nlisteners = 1;
        }
        return;
    }
    if (n->type != YAML_SEQUENCE_NODE) {
        fail_type(ld, n, "an address or a list of addresses");
        return;
    }
    items = list_items(ld, n, &count);
    if (count == 0) {
        fail_at(ld, n, "listen: expected at least one address");
        return;
    }
    c->listeners = calloc(count, sizeof(*c->listeners));
    if (c->listeners == NULL) {
        ld->oom = true;
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item = node(ld, items[i]);
        struct dm_conf_addr *a = &c->listeners[c->nlisteners];
        if (!get_addr(ld, item, true, a)) {
            continue;
        }
        c->nlisteners++;
        /* With SO_REUSEPORT a second bind of the same address would succeed silently. */
        for (size_t j = 0; j + 1 < c->nlisteners; j++) {
            if (same_addr(&c->listeners[j], a)) {
                fail_at(ld, item, "duplicate listen address %s (same as %s)",
                        quote(a->text, strlen(a->text), buf, sizeof(buf)), c->listeners[j].text);
                break;
            }
        }
    }
}

enum {
    TMO_CONNECT,
    TMO_CLIENT_HEADER,
    TMO_CLIENT_KEEPALIVE,
    TMO_CLIENT_BODY,
    TMO_SERVER_RESPONSE,
    TMO_REQUEST,
    TMO_SHUTDOWN,
    TMO_N
};
static const char *const timeout_keys[TMO_N] = {
    [TMO_CONNECT] = "connect",
    [TMO_CLIENT_HEADER] = "client_header",
    [TMO_CLIENT_KEEPALIVE] = "client_keepalive",
    [TMO_CLIENT_BODY] = "client_body",
    [TMO_SERVER_RESPONSE] = "server_response",
    [TMO_REQUEST] = "request",
    [TMO_SHUTDOWN] = "shutdown",
};

static void
load_timeouts(struct loader *ld, const yaml_node_t *n)
{
    struct dm_conf_timeouts *t = &ld->c->timeouts;
    uint64_t *fields[TMO_N] = {
        [TMO_CONNECT] = &t->connect_ms,
        [TMO_CLIENT_HEADER] = &t->client_header_ms,
        [TMO_CLIENT_KEEPALIVE] = &t->client_keepalive_ms,
        [TMO_CLIENT_BODY] = &t->client_body_ms,
        [TMO_SERVER_RESPONSE] = &t->server_response_ms,
        [TMO_REQUEST] = &t->request_ms,
        [TMO_SHUTDOWN] = &t->shutdown_ms,
    };
    yaml_node_t *v[TMO_N];

    if (!walk(ld, n, true, timeout_keys, TMO_N, v)) {
        return;
    }
    for (size_t i = 0; i < TMO_N; i++) {
        if (v[i] != NULL) {
            /* 0 turns the whole-exchange bound off, and drains nothing on shutdown. */
            bool zero_ok = i == TMO_REQUEST || i == TMO_SHUTDOWN;
            (void)get_duration(ld, v[i], timeout_keys[i], zero_ok, fields[i]);
        }
    }
}

enum {
    LIM_HEADER_BYTES,
    LIM_HEADER_COUNT,
    LIM_BODY_BYTES,
    LIM_BODY_MIN_RATE,
    LIM_MAX_CONNS,
    LIM_N
};
static const char *const limit_keys[LIM_N] = {
    [LIM_HEADER_BYTES] = "header_bytes", [LIM_HEADER_COUNT] = "header_count",
    [LIM_BODY_BYTES] = "body_bytes",     [LIM_BODY_MIN_RATE] = "body_min_rate",
    [LIM_MAX_CONNS] = "max_conns",
};

static void
load_limits(struct loader *ld, const yaml_node_t *n)
{
    struct dm_conf_limits *l = &ld->c->limits;
    yaml_node_t *v[LIM_N];
    uint64_t x;

    if (!walk(ld, n, true, limit_keys, LIM_N, v)) {
        return;
    }
    /* header_bytes is a buffer per connection: bounded so a typo cannot exhaust memory. */
    if (v[LIM_HEADER_BYTES] != NULL &&
        get_size(ld, v[LIM_HEADER_BYTES], "header_bytes", 1, 64u << 20, &x)) {
        l->header_bytes = (size_t)x;
    }
    if (v[LIM_HEADER_COUNT] != NULL) {
        (void)get_unsigned(ld, v[LIM_HEADER_COUNT], "header_count", 1, 65535, &l->header_count);
    }
    if (v[LIM_BODY_BYTES] != NULL) {
        (void)get_size(ld, v[LIM_BODY_BYTES], "body_bytes", 0, UINT64_MAX, &l->body_bytes);
    }
    if (v[LIM_BODY_MIN_RATE] != NULL) {
        (void)get_size(ld, v[LIM_BODY_MIN_RATE], "body_min_rate", 0, 1u << 30, &l->body_min_rate);
    }
    if (v[LIM_MAX_CONNS] != NULL) {
        (void)get_unsigned(ld, v[LIM_MAX_CONNS], "max_conns", 1, 10000000, &l->max_conns);
    }
}

enum { LOG_PATH, LOG_FORMAT, LOG_N };
static const char *const access_log_keys[LOG_N] = {
    [LOG_PATH] = "path",
    [LOG_FORMAT] = "format",
};

static void
load_access_log(struct loader *ld, const yaml_node_t *n)
{
    static const char *const formats[] = { "default", "json" };
    struct dm_conf *c = ld->c;
    yaml_node_t *v[LOG_N];
    char buf[SHOW_BUF];

    if (is_off(n)) {
        return;
    }
    /* The short form "access_log: /var/log/dimmer.log" is a path with the default format. */
    if (n->type == YAML_SCALAR_NODE) {
        (void)get_string(ld, n, &c->access_log);
        return;
    }
    if (!walk(ld, n, false, access_log_keys, LOG_N, v)) {
        return;
    }
    if (v[LOG_PATH] != NULL) {
        (void)get_string(ld, v[LOG_PATH], &c->access_log);
    } else {
        c->access_log = dup_str(ld, "-");
    }
    if (v[LOG_FORMAT] != NULL) {
        const char *f = get_text(ld, v[LOG_FORMAT], "a string");
        if (f == NULL) {
            return;
        }
        if (strcmp(f, formats[0]) != 0 && strcmp(f, formats[1]) != 0) {
            fail_at(ld, v[LOG_FORMAT], "unknown access_log format %s (known: default, json)",
                    quote(f, strlen(f), buf, sizeof(buf)));
            return;
        }
        free(c->access_log_format);
        c->access_log_format = dup_str(ld, f);
    }
}

/* A URL path prefix: starts with "/", no spaces or control characters. */
static bool
get_path(struct loader *ld, const yaml_node_t *n, char **out)
{
    const char *s = get_text(ld, n, "a path");
    char buf[SHOW_BUF];

    if (s == NULL) {
        return false;
    }
    if (s[0] != '/') {
        fail_at(ld, n, "bad path %s (must start with \"/\")",
                quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    for (const char *p = s; *p != '\0'; p++) {
        if ((unsigned char)*p <= ' ' || *p == 0x7f) {
            fail_at(ld, n, "bad path %s (no spaces or control characters)",
                    quote(s, strlen(s), buf, sizeof(buf)));
            return false;
        }
    }
    return get_string(ld, n, out);
}

enum { HC_PATH, HC_INTERVAL, HC_TIMEOUT, HC_RISE, HC_FALL, HC_N };
static const char *const health_keys[HC_N] = {
    [HC_PATH] = "path", [HC_INTERVAL] = "interval", [HC_TIMEOUT] = "timeout",
    [HC_RISE] = "rise", [HC_FALL] = "fall",
};

static void
load_health(struct loader *ld, struct dm_conf_health *h, const yaml_node_t *n)
{
    yaml_node_t *v[HC_N];

    if (!walk(ld, n, true, health_keys, HC_N, v)) {
        return;
    }
    h->enabled = true;
    if (v[HC_PATH] != NULL) {
        (void)get_path(ld, v[HC_PATH], &h->path);
    }
    if (v[HC_INTERVAL] != NULL) {
        (void)get_duration(ld, v[HC_INTERVAL], "interval", false, &h->interval_ms);
    }
    if (v[HC_TIMEOUT] != NULL) {
        (void)get_duration(ld, v[HC_TIMEOUT], "timeout", false, &h->timeout_ms);
    }
    if (v[HC_RISE] != NULL) {
        (void)get_unsigned(ld, v[HC_RISE], "rise", 1, 1000, &h->rise);
    }
    if (v[HC_FALL] != NULL) {
        (void)get_unsigned(ld, v[HC_FALL], "fall", 1, 1000, &h->fall);
    }
}

enum { PS_MAX_FAILS, PS_FAIL_TIMEOUT, PS_N };
static const char *const passive_keys[PS_N] = {
    [PS_MAX_FAILS] = "max_fails",
    [PS_FAIL_TIMEOUT] = "fail_timeout",
};

static void
load_passive(struct loader *ld, struct dm_conf_passive *ps, const yaml_node_t *n)
{
    yaml_node_t *v[PS_N];

    if (!walk(ld, n, true, passive_keys, PS_N, v)) {
        return;
    }
    if (v[PS_MAX_FAILS] != NULL) {
        (void)get_unsigned(ld, v[PS_MAX_FAILS], "max_fails", 0, 1000000, &ps->max_fails);
    }
    if (v[PS_FAIL_TIMEOUT] != NULL) {
        (void)get_duration(ld, v[PS_FAIL_TIMEOUT], "fail_timeout", true, &ps->fail_timeout_ms);
    }
}

enum { SRV_NAME, SRV_ADDRESS, SRV_WEIGHT, SRV_CAPACITY, SRV_N };
static const char *const server_keys[SRV_N] = {
    [SRV_NAME] = "name",
    [SRV_ADDRESS] = "address",
    [SRV_WEIGHT] = "weight",
    [SRV_CAPACITY] = "capacity",
};

static void
load_server(struct loader *ld, struct dm_conf_pool *p, yaml_node_item_t *items, size_t i)
{
    struct dm_conf_server *s = &p->servers[i];
    const yaml_node_t *n = node(ld, items[i]);
    yaml_node_t *v[SRV_N];
    char buf[SHOW_BUF];

    s->weight = 1;
    s->capacity = 100;
    if (!walk(ld, n, false, server_keys, SRV_N, v)) {
        return;
    }
    static const size_t required[] = { SRV_NAME, SRV_ADDRESS };
    for (size_t k = 0; k < NKEYS(required); k++) {
        if (v[required[k]] == NULL) {
            fail_at(ld, n, "pool \"%s\": server %zu: missing required key \"%s\"", p->name, i + 1,
                    server_keys[required[k]]);
        }
    }
    if (v[SRV_NAME] != NULL && get_string(ld, v[SRV_NAME], &s->name)) {
        for (size_t j = 0; j < i; j++) {
            if (p->servers[j].name != NULL && strcmp(p->servers[j].name, s->name) == 0) {
                /* Server j has a name, so its item is a mapping with that key. */
                const yaml_node_t *first = lookup(ld, node(ld, items[j]), "name");
                fail_at(ld, v[SRV_NAME], "pool \"%s\": duplicate server %s (first at line %zu)",
                        p->name, quote(s->name, strlen(s->name), buf, sizeof(buf)),
                        first->start_mark.line + 1);
                break;
            }
        }
    }
    if (v[SRV_ADDRESS] != NULL) {
        (void)get_addr(ld, v[SRV_ADDRESS], false, &s->addr);
    }
    if (v[SRV_WEIGHT] != NULL) {
        (void)get_unsigned(ld, v[SRV_WEIGHT], "weight", 1, 256, &s->weight);
    }
    if (v[SRV_CAPACITY] != NULL) {
        (void)get_unsigned(ld, v[SRV_CAPACITY], "capacity", 1, 1000000, &s->capacity);
    }
}

static void
load_servers(struct loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    yaml_node_item_t *items;
    size_t count;

    if (is_null(n) || n->type != YAML_SEQUENCE_NODE) {
        fail_type(ld, n, "a list of servers");
        return;
    }
    items = list_items(ld, n, &count);
    if (count == 0) {
        fail_at(ld, n, "pool \"%s\": expected at least one server", p->name);
        return;
    }
    p->servers = calloc(count, sizeof(*p->servers));
    if (p->servers == NULL) {
        ld->oom = true;
        return;
    }
    p->nservers = count;
    for (size_t i = 0; i < count; i++) {
        load_server(ld, p, items, i);
    }
}

static void
check_balance(struct loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    const char *names[32];
    size_t nnames = 0;
    char buf[SHOW_BUF], list[256];

    if (!get_string(ld, n, &p->balance)) {
        return;
    }
    if (dm_balancer_find(p->balance) != NULL) {
        return;
    }
    for (size_t i = 0; dm_balancer_registry[i] != NULL && nnames < NKEYS(names); i++) {
        names[nnames++] = dm_balancer_registry[i]->name;
    }
    fail_at(ld, n, "unknown balance policy %s (known: %s)",
            quote(p->balance, strlen(p->balance), buf, sizeof(buf)),
            join_names(names, nnames, list, sizeof(list)));
}

enum { HASH_KEY, HASH_NAME, HASH_BALANCE, HASH_N };
static const char *const hash_keys[HASH_N] = {
    [HASH_KEY] = "key",
    [HASH_NAME] = "name",
    [HASH_BALANCE] = "balance",
};
static const char *const hash_key_names[] = {
    [DM_HASH_CLIENT] = "client",
    [DM_HASH_URI] = "uri",
    [DM_HASH_HEADER] = "header",
    [DM_HASH_COOKIE] = "cookie",
};

static void
load_hash(struct loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    struct dm_conf_hash *h = &p->hash;
    yaml_node_t *v[HASH_N];
    char buf[SHOW_BUF];
    bool named;
    int key;

    if (!walk(ld, n, true, hash_keys, HASH_N, v)) {
        return;
    }
    if (v[HASH_BALANCE] != NULL) {
        (void)get_double(ld, v[HASH_BALANCE], "balance", 1.0, &h->balance);
    }
    if (v[HASH_KEY] != NULL) {
        key = get_choice(ld, v[HASH_KEY], "hash key", hash_key_names, NKEYS(hash_key_names));
        if (key < 0) {
            /* Whether a name belongs here depends on the key: nothing more to check. */
            return;
        }
        h->key = (enum dm_hash_key)key;
    }
    named = h->key == DM_HASH_HEADER || h->key == DM_HASH_COOKIE;
    if (named && v[HASH_NAME] == NULL) {
        fail_at(ld, n, "pool \"%s\": hash: missing required key \"name\" for key \"%s\"", p->name,
                hash_key_names[h->key]);
    } else if (!named && v[HASH_NAME] != NULL) {
        fail_at(ld, v[HASH_NAME], "hash name is only for key header or cookie (key is \"%s\")",
                hash_key_names[h->key]);
    } else if (named) {
        const char *s = get_text(ld, v[HASH_NAME], "a string");
        if (s == NULL) {
            return;
        }
        if (!is_token(s)) {
            fail_at(ld, v[HASH_NAME], "bad %s name %s (letters, digits and !#$%%&'*+-.^_`|~ only)",
                    hash_key_names[h->key], quote(s, strlen(s), buf, sizeof(buf)));
            return;
        }
        (void)get_string(ld, v[HASH_NAME], &h->name);
    }
}

enum { AGE_WEIGHT, AGE_HALF_LIFE, AGE_REQUEST_COST, AGE_N };
static const char *const age_keys[AGE_N] = {
    [AGE_WEIGHT] = "weight",
    [AGE_HALF_LIFE] = "half_life",
    [AGE_REQUEST_COST] = "request_cost",
};

static void
load_age(struct loader *ld, struct dm_conf_age *a, const yaml_node_t *n)
{
    yaml_node_t *v[AGE_N];

    if (!walk(ld, n, true, age_keys, AGE_N, v)) {
        return;
    }
    if (v[AGE_WEIGHT] != NULL) {
        (void)get_double(ld, v[AGE_WEIGHT], "weight", 0.0, &a->weight);
    }
    if (v[AGE_HALF_LIFE] != NULL) {
        (void)get_duration(ld, v[AGE_HALF_LIFE], "half_life", false, &a->half_life_ms);
    }
    if (v[AGE_REQUEST_COST] != NULL) {
        (void)get_size(ld, v[AGE_REQUEST_COST], "request_cost", 0, UINT64_MAX, &a->request_cost);
    }
}

enum {
    POOL_BALANCE,
    POOL_DRAWS,
    POOL_SERVERS,
    POOL_HEALTH,
    POOL_PASSIVE,
    POOL_HASH,
    POOL_AGE,
    POOL_AFFINITY,
    POOL_N
};
static const char *const pool_keys[POOL_N] = {
    [POOL_BALANCE] = "balance", [POOL_DRAWS] = "draws",
    [POOL_SERVERS] = "servers", [POOL_HEALTH] = "health_check",
    [POOL_PASSIVE] = "passive", [POOL_HASH] = "hash",
    [POOL_AGE] = "age",         [POOL_AFFINITY] = "affinity",
};

static const char *const affinity_names[] = { "connection", "request" };

/* Defaults of a pool; false when out of memory. */
static bool
pool_defaults(struct dm_conf_pool *p)
{
    p->balance = strdup("roundrobin");
    p->draws = 2;
    p->health.path = strdup("/healthz");
    p->health.interval_ms = 2000;
    p->health.timeout_ms = 1000;
    p->health.rise = 2;
    p->health.fall = 3;
    p->passive.max_fails = 3;
    p->passive.fail_timeout_ms = 10000;
    p->hash = (struct dm_conf_hash){ .key = DM_HASH_CLIENT, .name = NULL, .balance = 1.25 };
    p->age = (struct dm_conf_age){ .weight = 0.1, .half_life_ms = 10000, .request_cost = 8192 };
    /* Right for the default policy; load_pool sets it again once balance is known. */
    p->affinity_connection = false;
    return p->balance != NULL && p->health.path != NULL;
}

static void
load_pool(struct loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    yaml_node_t *v[POOL_N];

    if (!walk(ld, n, false, pool_keys, POOL_N, v)) {
        return;
    }
    if (v[POOL_BALANCE] != NULL) {
        check_balance(ld, p, v[POOL_BALANCE]);
    }
    if (v[POOL_DRAWS] != NULL) {
        (void)get_unsigned(ld, v[POOL_DRAWS], "draws", 1, 1000, &p->draws);
    }
    if (v[POOL_SERVERS] == NULL) {
        fail_at(ld, n, "pool \"%s\": missing required key \"servers\"", p->name);
    } else {
        load_servers(ld, p, v[POOL_SERVERS]);
    }
    if (v[POOL_HEALTH] != NULL) {
        load_health(ld, &p->health, v[POOL_HEALTH]);
    }
    if (v[POOL_PASSIVE] != NULL) {
        load_passive(ld, &p->passive, v[POOL_PASSIVE]);
    }
    /* hash and age are read whatever the policy: only their own policy looks at them. */
    if (v[POOL_HASH] != NULL) {
        load_hash(ld, p, v[POOL_HASH]);
    }
    if (v[POOL_AGE] != NULL) {
        load_age(ld, &p->age, v[POOL_AGE]);
    }
    /*
     * A policy that decides for a whole connection (AGE charges a page's
     * potential load to the server of its first request) keeps the rest of
     * the connection there by default; the others balance each request.
     */
    const struct dm_balancer_ops *ops = dm_balancer_find(p->balance);
    p->affinity_connection = ops != NULL && (ops->needs & DM_BAL_BINDS_CONNECTIONS) != 0;
    if (v[POOL_AFFINITY] != NULL) {
        int a = get_choice(ld, v[POOL_AFFINITY], "affinity", affinity_names, NKEYS(affinity_names));
        if (a >= 0) {
            p->affinity_connection = a == 0;
        }
    }
}

static void
load_pools(struct loader *ld, const yaml_node_t *n)
{
    struct dm_conf *c = ld->c;
    size_t count;

    if (!is_mapping(ld, n)) {
        return;
    }
    count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    if (count == 0) {
        fail_at(ld, n, "pools: expected at least one pool");
        return;
    }
    c->pools = calloc(count, sizeof(*c->pools));
    if (c->pools == NULL) {
        ld->oom = true;
        return;
    }
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
        const char *name = pair_key(ld, n, pr, "pool");
        struct dm_conf_pool *p;

        if (name == NULL) {
            continue;
        }
        /* Counted before it is loaded, so routes to a broken pool do not add errors. */
        p = &c->pools[c->npools++];
        p->name = dup_str(ld, name);
        if (p->name == NULL || !pool_defaults(p)) {
            ld->oom = true;
            return;
        }
        load_pool(ld, p, node(ld, pr->value));
    }
}

/* Index of the pool named by n, or -1 after reporting. */
static long
find_pool(struct loader *ld, const yaml_node_t *n)
{
    struct dm_conf *c = ld->c;
    const char *name = get_text(ld, n, "a pool name");
    const char **names;
    const char *near;
    char buf[SHOW_BUF], list[256];

    if (name == NULL) {
        return -1;
    }
    for (size_t i = 0; i < c->npools; i++) {
        if (strcmp(c->pools[i].name, name) == 0) {
            return (long)i;
        }
    }
    if (c->npools == 0) {
        /* The pools are missing or broken, which is reported already. */
        return -1;
    }
    names = calloc(c->npools, sizeof(*names));
    if (names == NULL) {
        ld->oom = true;
        return -1;
    }
    for (size_t i = 0; i < c->npools; i++) {
        names[i] = c->pools[i].name;
    }
    near = dm_conf_suggest(name, names, c->npools);
    if (near != NULL) {
        fail_at(ld, n, "unknown pool %s (did you mean \"%s\"?)",
                quote(name, strlen(name), buf, sizeof(buf)), near);
    } else {
        fail_at(ld, n, "unknown pool %s (pools: %s)", quote(name, strlen(name), buf, sizeof(buf)),
                join_names(names, c->npools, list, sizeof(list)));
    }
    free(names);
    return -1;
}

/* Exact name, "*.suffix", or "*" for any host (stored as NULL). */
static void
get_host(struct loader *ld, const yaml_node_t *n, char **out)
{
    const char *s = get_text(ld, n, "a host name");
    const char *name;
    char buf[SHOW_BUF];

    if (s == NULL || strcmp(s, "*") == 0) {
        return;
    }
    name = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
    if (*name == '\0' || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789-._[]:") != strlen(name)) {
        fail_at(ld, n, "bad host %s (a name, or \"*.\" and a suffix)",
                quote(s, strlen(s), buf, sizeof(buf)));
        return;
    }
    (void)get_string(ld, n, out);
}

enum { RT_HOST, RT_PATH, RT_POOL, RT_N };
static const char *const route_keys[RT_N] = {
    [RT_HOST] = "host",
    [RT_PATH] = "path",
    [RT_POOL] = "pool",
};

static void
load_routes(struct loader *ld, const yaml_node_t *n)
{
    struct dm_conf *c = ld->c;
    yaml_node_item_t *items;
    size_t count;

    items = list_items(ld, n, &count);
    if (count == 0) {
        return;
    }
    c->routes = calloc(count, sizeof(*c->routes));
    if (c->routes == NULL) {
        ld->oom = true;
        return;
    }
    c->nroutes = count;
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item = node(ld, items[i]);
        struct dm_conf_route *r = &c->routes[i];
        yaml_node_t *v[RT_N];
        long pool;

        if (!walk(ld, item, false, route_keys, RT_N, v)) {
            continue;
        }
        if (v[RT_HOST] != NULL) {
            get_host(ld, v[RT_HOST], &r->host);
        }
        if (v[RT_PATH] != NULL) {
            (void)get_path(ld, v[RT_PATH], &r->path_prefix);
        }
        if (v[RT_POOL] == NULL) {
            fail_at(ld, item, "route %zu: missing required key \"pool\"", i + 1);
        } else if ((pool = find_pool(ld, v[RT_POOL])) >= 0) {
            r->pool = (size_t)pool;
        }
    }
}

enum {
    CAT_MEMORY,
    CAT_SCAN_LIMIT,
    CAT_LEARN,
    CAT_DEFAULT_OBJECT_BYTES,
    CAT_DOCROOT,
    CAT_MANIFEST,
    CAT_HOST,
    CAT_N
};
static const char *const catalog_keys[CAT_N] = {
    [CAT_MEMORY] = "memory",   [CAT_SCAN_LIMIT] = "scan_limit",
    [CAT_LEARN] = "learn",     [CAT_DEFAULT_OBJECT_BYTES] = "default_object_bytes",
    [CAT_DOCROOT] = "docroot", [CAT_MANIFEST] = "manifest",
    [CAT_HOST] = "host",
};

/*
 * A host name as it appears in a Host header, without the port: DNS name
 * characters, or an IPv6 address in brackets.
 */
static void
get_catalog_host(struct loader *ld, const yaml_node_t *n, char **out)
{
    const char *s = get_text(ld, n, "a host name");
    size_t len;
    bool ok;
    char buf[SHOW_BUF];

    if (s == NULL) {
        return;
    }
    len = strlen(s);
    if (s[0] == '[') {
        ok = len > 2 && s[len - 1] == ']' && strspn(s + 1, "0123456789abcdefABCDEF:.") == len - 2;
    } else {
        ok = s[0] != '.' && s[0] != '-' &&
             strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._") == len;
    }
    if (!ok) {
        fail_at(ld, n, "bad host %s (a host name, with no port)", quote(s, len, buf, sizeof(buf)));
        return;
    }
    (void)get_string(ld, n, out);
}

static void
load_catalog(struct loader *ld, const yaml_node_t *n)
{
    struct dm_conf_catalog *cat = &ld->c->catalog;
    yaml_node_t *v[CAT_N];

    if (!walk(ld, n, true, catalog_keys, CAT_N, v)) {
        return;
    }
    if (v[CAT_MEMORY] != NULL) {
        (void)get_size(ld, v[CAT_MEMORY], "memory", 1, UINT64_MAX, &cat->memory);
    }
    if (v[CAT_SCAN_LIMIT] != NULL) {
        (void)get_size(ld, v[CAT_SCAN_LIMIT], "scan_limit", 0, UINT64_MAX, &cat->scan_limit);
    }
    if (v[CAT_LEARN] != NULL) {
        (void)get_bool(ld, v[CAT_LEARN], &cat->learn);
    }
    if (v[CAT_DEFAULT_OBJECT_BYTES] != NULL) {
        (void)get_size(ld, v[CAT_DEFAULT_OBJECT_BYTES], "default_object_bytes", 0, UINT64_MAX,
                       &cat->default_object_bytes);
    }
    /* Checked now, so that a typo in a path fails "dimmer -t" rather than the preload. */
    if (v[CAT_DOCROOT] != NULL) {
        (void)get_existing_path(ld, v[CAT_DOCROOT], "docroot", true, &cat->docroot);
    }
    if (v[CAT_MANIFEST] != NULL) {
        (void)get_existing_path(ld, v[CAT_MANIFEST], "manifest", false, &cat->manifest);
    }
    if (v[CAT_HOST] != NULL) {
        get_catalog_host(ld, v[CAT_HOST], &cat->host);
    }
}

enum {
    TOP_WORKERS,
    TOP_LISTEN,
    TOP_ADMIN,
    TOP_TIMEOUTS,
    TOP_LIMITS,
    TOP_ACCESS_LOG,
    TOP_ERROR_LOG,
    TOP_POOLS,
    TOP_ROUTES,
    TOP_DEFAULT_POOL,
    TOP_CATALOG,
    TOP_N
};
static const char *const top_keys[TOP_N] = {
    [TOP_WORKERS] = "workers",           [TOP_LISTEN] = "listen",   [TOP_ADMIN] = "admin",
    [TOP_TIMEOUTS] = "timeouts",         [TOP_LIMITS] = "limits",   [TOP_ACCESS_LOG] = "access_log",
    [TOP_ERROR_LOG] = "error_log",       [TOP_POOLS] = "pools",     [TOP_ROUTES] = "routes",
    [TOP_DEFAULT_POOL] = "default_pool", [TOP_CATALOG] = "catalog",
};

static void
load_root(struct loader *ld, const yaml_node_t *root)
{
    struct dm_conf *c = ld->c;
    yaml_node_t *v[TOP_N];
    long pool;

    if (!walk(ld, root, false, top_keys, TOP_N, v)) {
        return;
    }
    if (v[TOP_WORKERS] != NULL) {
        load_workers(ld, v[TOP_WORKERS]);
    }
    if (v[TOP_LISTEN] == NULL) {
        fail_at(ld, root, "missing required key \"listen\"");
    } else {
        load_listen(ld, v[TOP_LISTEN]);
    }
    if (v[TOP_ADMIN] != NULL && get_addr(ld, v[TOP_ADMIN], true, &c->admin)) {
        for (size_t i = 0; i < c->nlisteners; i++) {
            if (same_addr(&c->admin, &c->listeners[i])) {
                fail_at(ld, v[TOP_ADMIN], "admin address \"%s\" is also a listen address",
                        c->admin.text);
                break;
            }
        }
    }
    if (v[TOP_TIMEOUTS] != NULL) {
        load_timeouts(ld, v[TOP_TIMEOUTS]);
    }
    if (v[TOP_LIMITS] != NULL) {
        load_limits(ld, v[TOP_LIMITS]);
    }
    if (v[TOP_CATALOG] != NULL) {
        load_catalog(ld, v[TOP_CATALOG]);
    }
    if (v[TOP_ACCESS_LOG] != NULL) {
        load_access_log(ld, v[TOP_ACCESS_LOG]);
    }
    if (v[TOP_ERROR_LOG] != NULL) {
        (void)get_string(ld, v[TOP_ERROR_LOG], &c->error_log);
    }
    /* Pools before routes and default_pool, which name them, wherever they are in the file. */
    if (v[TOP_POOLS] == NULL) {
        fail_at(ld, root, "missing required key \"pools\"");
    } else {
        load_pools(ld, v[TOP_POOLS]);
    }
    if (ld->oom) {
        /* The pool table may be cut short: nothing more worth checking. */
        return;
    }
    if (v[TOP_ROUTES] != NULL) {
        load_routes(ld, v[TOP_ROUTES]);
    }
    if (v[TOP_DEFAULT_POOL] != NULL && (pool = find_pool(ld, v[TOP_DEFAULT_POOL])) >= 0) {
        c->default_pool = (size_t)pool;
    }
}

/* ---- loading ---- */

/* Everything that has a default outside the pools; false when out of memory. */
static bool
conf_defaults(struct dm_conf *c)
{
    c->workers = 0;
    c->timeouts = (struct dm_conf_timeouts){
        .connect_ms = 5000,
        .client_header_ms = 10000,
        .client_keepalive_ms = 60000,
        .client_body_ms = 10000,
        .server_response_ms = 60000,
        .request_ms = 0,
        .shutdown_ms = 10000,
    };
    c->limits = (struct dm_conf_limits){
        .header_bytes = 16384,
        .header_count = 100,
        .body_bytes = 0,
        .body_min_rate = 500,
        .max_conns = 10000,
    };
    c->catalog = (struct dm_conf_catalog){
        .memory = 16u << 20,
        .scan_limit = 256u << 10,
        .learn = true,
        .default_object_bytes = 10240,
    };
    c->access_log_format = strdup("default");
    return c->access_log_format != NULL;
}

static void
fail_parser(struct loader *ld, const yaml_parser_t *p, const char *buf, size_t len)
{
    yaml_mark_t mark = p->problem_mark;
    const char *problem = p->problem != NULL ? p->problem : "syntax error";
    const char *hint = "";

    if (p->error == YAML_MEMORY_ERROR) {
        ld->oom = true;
        return;
    }
    if (p->error == YAML_READER_ERROR) {
        /* The reader reports a byte offset only: count lines up to it. */
        size_t end = p->problem_offset < len ? p->problem_offset : len;
        mark = (yaml_mark_t){ 0 };
        for (size_t i = 0; i < end; i++) {
            if (buf[i] == '\n') {
                mark.line++;
                mark.column = 0;
            } else {
                mark.column++;
            }
        }
        if (p->problem_value != -1) {
            fail_mark(ld, mark, "%s (byte 0x%02X)", problem, (unsigned)p->problem_value);
        } else {
            fail_mark(ld, mark, "%s", problem);
        }
        return;
    }
    /* "listen: *:80" is an easy mistake: YAML reads the "*" as an alias. */
    if ((p->context != NULL && strcmp(p->context, "while scanning an alias") == 0) ||
        strcmp(problem, "found undefined alias") == 0) {
        hint = "; quote a value that starts with \"*\"";
    }
    if (p->context != NULL) {
        fail_mark(ld, mark, "%s (%s at line %zu)%s", problem, p->context, p->context_mark.line + 1,
                  hint);
    } else {
        fail_mark(ld, mark, "%s%s", problem, hint);
    }
}

/* Parses buf into ld->doc; false after reporting. Rejects a second document. */
static bool
parse_yaml(struct loader *ld, const char *buf, size_t len)
{
    yaml_parser_t parser;
    yaml_document_t extra;
    bool ok = false;

    if (!yaml_parser_initialize(&parser)) {
        ld->oom = true;
        return false;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &ld->doc)) {
        /* libyaml has freed the document already. */
        fail_parser(ld, &parser, buf, len);
        goto out_parser;
    }
    if (!yaml_parser_load(&parser, &extra)) {
        fail_parser(ld, &parser, buf, len);
        goto out_doc;
    }
    if (yaml_document_get_root_node(&extra) != NULL) {
        fail_at(ld, yaml_document_get_root_node(&extra),
                "a second YAML document (a config file holds one)");
        yaml_document_delete(&extra);
        goto out_doc;
    }
    yaml_document_delete(&extra);
    ok = true;
    goto out_parser;

out_doc:
    yaml_document_delete(&ld->doc);
out_parser:
    yaml_parser_delete(&parser);
    return ok;
}

static struct dm_conf *
load_buffer(const char *buf, size_t len, const char *name, struct dm_conf_errors *err)
{
    struct loader ld = { .name = name };
    const yaml_node_t *root;

    ld.c = calloc(1, sizeof(*ld.c));
    if (ld.c == NULL || !conf_defaults(ld.c) || (ld.c->file = strdup(name)) == NULL) {
        ld.oom = true;
        goto out;
    }
    if (!parse_yaml(&ld, buf, len)) {
        goto out;
    }
    root = yaml_document_get_root_node(&ld.doc);
    if (root == NULL) {
        fail_mark(&ld, (yaml_mark_t){ 0 },
                  "empty configuration (\"listen\" and \"pools\" are "
                  "required)");
    } else {
        load_root(&ld, root);
    }
    yaml_document_delete(&ld.doc);

out:
    if (ld.oom || ld.nmsgs > 0) {
        flush_msgs(&ld, err);
        dm_conf_destroy(ld.c);
        return NULL;
    }
    return ld.c;
}

struct dm_conf *
dm_conf_load_string(const char *yaml, size_t len, const char *name, struct dm_conf_errors *err)
{
    /* libyaml asserts on a NULL input even when it is empty. */
    return load_buffer(yaml != NULL ? yaml : "", yaml != NULL ? len : 0,
                       name != NULL ? name : "<string>", err);
}

/*
 * Reads the whole file; 0 or -errno (-EFBIG past CONF_MAX_BYTES), with *stage
 * naming the step that failed for the message.
 */
static int
read_file(const char *path, char **out, size_t *outlen, const char **stage)
{
    FILE *f;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;

    *stage = "open";
    f = fopen(path, "rb");
    if (f == NULL) {
        return -errno;
    }
    *stage = "read";
    for (;;) {
        size_t got;
        if (len == cap) {
            char *b;
            if (cap >= CONF_MAX_BYTES) {
                rc = -EFBIG;
                break;
            }
            cap = cap == 0 ? 4096 : cap * 2;
            b = realloc(buf, cap);
            if (b == NULL) {
                rc = -ENOMEM;
                break;
            }
            buf = b;
        }
        errno = 0;
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                rc = errno != 0 ? -errno : -EIO;
            }
            break;
        }
    }
    fclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    *outlen = len;
    return 0;
}

struct dm_conf *
dm_conf_load(const char *path, struct dm_conf_errors *err)
{
    char *buf = NULL;
    size_t len = 0;
    const char *stage;
    struct dm_conf *c;
    int rc;

    rc = read_file(path, &buf, &len, &stage);
    if (rc != 0) {
        struct loader ld = { .name = path };
        char ebuf[128];
        const char *what =
            rc == -EFBIG ? "file too large (over 16 MiB)" : strerror_r(-rc, ebuf, sizeof(ebuf));
        fail_plain(&ld, "%s: cannot %s: %s", path, stage, what);
        flush_msgs(&ld, err);
        return NULL;
    }
    c = load_buffer(buf != NULL ? buf : "", len, path, err);
    free(buf);
    return c;
}

/* ---- quick start ---- */

struct dm_conf *
dm_conf_from_args(const char *listen, const char *backends, struct dm_conf_errors *err)
{
    struct loader ld = { .name = "arguments" };
    struct dm_conf *c;
    struct dm_conf_pool *p;
    const char *why;
    char buf[SHOW_BUF];
    size_t n = 1;
    int rc;

    c = calloc(1, sizeof(*c));
    ld.c = c;
    if (c == NULL || !conf_defaults(c)) {
        ld.oom = true;
        goto out;
    }

    if (listen == NULL || *listen == '\0') {
        fail_plain(&ld, "--listen: missing address");
    } else if ((c->listeners = calloc(1, sizeof(*c->listeners))) == NULL) {
        ld.oom = true;
    } else if ((rc = dm_conf_parse_addr_why(listen, true, &c->listeners[0], &why)) == 0) {
        c->nlisteners = 1;
    } else if (rc == -ENOMEM) {
        ld.oom = true;
    } else {
        fail_plain(&ld, "--listen: bad address %s (%s)",
                   quote(listen, strlen(listen), buf, sizeof(buf)), why);
    }

    c->pools = calloc(1, sizeof(*c->pools));
    if (c->pools == NULL) {
        ld.oom = true;
        goto out;
    }
    c->npools = 1;
    p = &c->pools[0];
    if ((p->name = strdup("default")) == NULL || !pool_defaults(p)) {
        ld.oom = true;
        goto out;
    }
    if (backends == NULL || *backends == '\0') {
        fail_plain(&ld, "--backend: missing address");
        goto out;
    }
    for (const char *s = backends; *s != '\0'; s++) {
        n += *s == ',';
    }
    p->servers = calloc(n, sizeof(*p->servers));
    if (p->servers == NULL) {
        ld.oom = true;
        goto out;
    }
    for (const char *s = backends;; s++) {
        size_t len = strcspn(s, ",");
        struct dm_conf_server *sv = &p->servers[p->nservers];
        size_t skip = strspn(s, " \t");
        size_t trim = len;
        char *one;

        /* "a:80, b:80" is how people write lists: spaces around an address are dropped. */
        while (trim > skip && (s[trim - 1] == ' ' || s[trim - 1] == '\t')) {
            trim--;
        }
        skip = skip < trim ? skip : trim;
        one = strndup(s + skip, trim - skip);

        if (one == NULL) {
            ld.oom = true;
            goto out;
        }
        rc = dm_conf_parse_addr_why(one, false, &sv->addr, &why);
        if (rc == 0) {
            sv->weight = 1;
            sv->capacity = 100;
            sv->name = format("s%zu", p->nservers + 1);
            p->nservers++;
            if (sv->name == NULL) {
                ld.oom = true;
            }
        } else if (rc == -ENOMEM) {
            ld.oom = true;
        } else {
            fail_plain(&ld, "--backend: bad address %s (%s)",
                       quote(one, strlen(one), buf, sizeof(buf)), why);
        }
        free(one);
        s += len;
        if (*s == '\0') {
            break;
        }
    }

out:
    if (ld.oom || ld.nmsgs > 0) {
        flush_msgs(&ld, err);
        dm_conf_destroy(c);
        return NULL;
    }
    return c;
}

/* ---- freeing ---- */

void
dm_conf_destroy(struct dm_conf *c)
{
    if (c == NULL) {
        return;
    }
    free(c->file);
    for (size_t i = 0; i < c->nlisteners; i++) {
        free(c->listeners[i].text);
    }
    free(c->listeners);
    free(c->admin.text);
    for (size_t i = 0; i < c->npools; i++) {
        struct dm_conf_pool *p = &c->pools[i];
        free(p->name);
        free(p->balance);
        for (size_t j = 0; j < p->nservers; j++) {
            free(p->servers[j].name);
            free(p->servers[j].addr.text);
        }
        free(p->servers);
        free(p->health.path);
        free(p->hash.name);
    }
    free(c->pools);
    for (size_t i = 0; i < c->nroutes; i++) {
        free(c->routes[i].host);
        free(c->routes[i].path_prefix);
    }
    free(c->routes);
    free(c->catalog.docroot);
    free(c->catalog.manifest);
    free(c->catalog.host);
    free(c->access_log);
    free(c->access_log_format);
    free(c->error_log);
    free(c);
}
