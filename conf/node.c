/*
 * Reading YAML nodes: the typed getters (text, integers, durations, sizes,
 * addresses, numbers, switches, choices, paths), each of which reports at the
 * node what is wrong with it, and the walk of a mapping against its known
 * keys, with the nearest known key suggested for an unknown one.
 */
#include "conf/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "balancers/hash.h"
#include "conf/conf.h"

const char *
dm_conf_text_of(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

bool
dm_conf_is_null(const yaml_node_t *n)
{
    static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        return false;
    }
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++) {
        if (strcmp(dm_conf_text_of(n), nulls[i]) == 0) {
            return true;
        }
    }
    return false;
}

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
        if (dm_conf_is_null(n)) {
            return "an empty value";
        }
        return dm_conf_quote(dm_conf_text_of(n), n->data.scalar.length, buf, DM_CONF_SHOW_BUF);
    default:
        return "nothing";
    }
}

void
dm_conf_fail_type(struct dm_conf_loader *ld, const yaml_node_t *n, const char *expected)
{
    char buf[DM_CONF_SHOW_BUF];
    dm_conf_fail_at(ld, n, "expected %s, got %s", expected, show(n, buf));
}

yaml_node_t *
dm_conf_node(struct dm_conf_loader *ld, int index)
{
    return yaml_document_get_node(&ld->doc, index);
}

char *
dm_conf_dup_str(struct dm_conf_loader *ld, const char *s)
{
    char *d = strdup(s);
    if (d == NULL) {
        ld->oom = true;
    }
    return d;
}

const char *
dm_conf_get_text(struct dm_conf_loader *ld, const yaml_node_t *n, const char *expected)
{
    if (n->type != YAML_SCALAR_NODE || dm_conf_is_null(n) || n->data.scalar.length == 0) {
        dm_conf_fail_type(ld, n, expected);
        return NULL;
    }
    if (strlen(dm_conf_text_of(n)) != n->data.scalar.length) {
        dm_conf_fail_at(ld, n, "%s must not contain a NUL character", expected);
        return NULL;
    }
    return dm_conf_text_of(n);
}

bool
dm_conf_get_string(struct dm_conf_loader *ld, const yaml_node_t *n, char **out)
{
    const char *s = dm_conf_get_text(ld, n, "a string");
    char *d;

    if (s == NULL) {
        return false;
    }
    d = dm_conf_dup_str(ld, s);
    if (d == NULL) {
        return false;
    }
    free(*out);
    *out = d;
    return true;
}

bool
dm_conf_get_uint(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, uint64_t min,
                 uint64_t max, uint64_t *out)
{
    const char *s;
    bool neg, overflow = false;
    uint64_t v = 0;
    const char *p;

    if (n->type != YAML_SCALAR_NODE || dm_conf_is_null(n)) {
        dm_conf_fail_type(ld, n, "an integer");
        return false;
    }
    s = dm_conf_text_of(n);
    neg = s[0] == '-';
    p = s + (neg ? 1 : 0);
    if (*p == '\0' || strspn(p, "0123456789") != strlen(p)) {
        dm_conf_fail_type(ld, n, "an integer");
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
        dm_conf_fail_at(ld, n, "%s must be between %llu and %llu, got %s", key,
                        (unsigned long long)min, (unsigned long long)max, s);
        return false;
    }
    *out = v;
    return true;
}

bool
dm_conf_get_unsigned(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, unsigned min,
                     unsigned max, unsigned *out)
{
    uint64_t v;
    if (!dm_conf_get_uint(ld, n, key, min, max, &v)) {
        return false;
    }
    *out = (unsigned)v;
    return true;
}

bool
dm_conf_get_duration(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, bool zero_ok,
                     uint64_t *out)
{
    const char *s = dm_conf_get_text(ld, n, "a duration");
    char buf[DM_CONF_SHOW_BUF];
    uint64_t v;

    if (s == NULL) {
        return false;
    }
    if (dm_conf_parse_duration_ms(s, &v) != 0) {
        dm_conf_fail_at(ld, n, "bad duration %s (use ms, s, m, h)",
                        dm_conf_quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    if (v == 0 && !zero_ok) {
        dm_conf_fail_at(ld, n, "%s must be more than 0", key);
        return false;
    }
    /* Bounded so that loop time plus a duration, or a rate times one, cannot wrap. */
    if (v > DM_CONF_DURATION_MAX_MS) {
        dm_conf_fail_at(ld, n, "%s must be at most 1000h", key);
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

bool
dm_conf_get_size(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, uint64_t min,
                 uint64_t max, uint64_t *out)
{
    const char *s = dm_conf_get_text(ld, n, "a size");
    char buf[DM_CONF_SHOW_BUF], lo[32], hi[32];
    uint64_t v;

    if (s == NULL) {
        return false;
    }
    if (dm_conf_parse_size(s, &v) != 0) {
        dm_conf_fail_at(ld, n, "bad size %s (use a number of bytes, or k, m, g)",
                        dm_conf_quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    if (v < min && max == UINT64_MAX) {
        /* "between 1 and 18446744073709551615" would only hide the point. */
        dm_conf_fail_at(ld, n, "%s must be at least %s, got %s", key,
                        show_size(min, lo, sizeof(lo)),
                        dm_conf_quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    if (v < min || v > max) {
        dm_conf_fail_at(ld, n, "%s must be between %s and %s, got %s", key,
                        show_size(min, lo, sizeof(lo)), show_size(max, hi, sizeof(hi)),
                        dm_conf_quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    *out = v;
    return true;
}

bool
dm_conf_get_addr(struct dm_conf_loader *ld, const yaml_node_t *n, bool listener,
                 struct dm_conf_addr *out)
{
    const char *s = dm_conf_get_text(ld, n, "an address");
    const char *why;
    char buf[DM_CONF_SHOW_BUF];
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
        dm_conf_fail_at(ld, n, "bad address %s (%s)", dm_conf_quote(s, strlen(s), buf, sizeof(buf)),
                        why);
        return false;
    }
    return true;
}

bool
dm_conf_is_off(const yaml_node_t *n)
{
    return dm_conf_is_null(n) ||
           (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
            (strcmp(dm_conf_text_of(n), "off") == 0 || strcmp(dm_conf_text_of(n), "false") == 0));
}

/* ---- mappings ---- */

/* The key of an earlier pair of map equal to pair's key, else NULL. */
/* A mapping with more pairs than this gets an index of its duplicate keys (a
 * pair's scan of the ones before it would cost the square of their number:
 * 50,000 pools took 25 s). */
#define DUP_SCAN_MAX 64

static uint64_t
key_hash(const yaml_node_t *k)
{
    return k->type == YAML_SCALAR_NODE ? dm_hash_bytes(k->data.scalar.value, k->data.scalar.length)
                                       : 0;
}

static bool
same_key(const yaml_node_t *a, const yaml_node_t *b)
{
    return a->type == YAML_SCALAR_NODE && b->type == YAML_SCALAR_NODE &&
           a->data.scalar.length == b->data.scalar.length &&
           memcmp(a->data.scalar.value, b->data.scalar.value, a->data.scalar.length) == 0;
}

/* ld->dup_first for map: an open-addressing table of the pairs by key, once. */
static bool
dup_index(struct dm_conf_loader *ld, const yaml_node_t *map)
{
    if (ld->dup_map == map) {
        return true;
    }
    size_t n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
    size_t cap = 64;
    while (cap < 2 * n) {
        cap *= 2;
    }
    size_t *first = malloc(n * sizeof(*first));
    size_t *slots = malloc(cap * sizeof(*slots)); /* pair index + 1; 0: empty */
    if (first == NULL || slots == NULL) {
        free(first);
        free(slots);
        ld->oom = true; /* the load fails; the slow scan finds the duplicates meanwhile */
        return false;
    }
    memset(slots, 0, cap * sizeof(*slots));
    const yaml_node_pair_t *pairs = map->data.mapping.pairs.start;
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *k = dm_conf_node(ld, pairs[i].key);
        first[i] = i;
        if (k->type != YAML_SCALAR_NODE) {
            continue;
        }
        for (size_t s = key_hash(k) & (cap - 1);; s = (s + 1) & (cap - 1)) {
            if (slots[s] == 0) {
                slots[s] = i + 1;
                break;
            }
            if (same_key(dm_conf_node(ld, pairs[slots[s] - 1].key), k)) {
                first[i] = slots[s] - 1;
                break;
            }
        }
    }
    free(slots);
    free(ld->dup_first);
    ld->dup_first = first;
    ld->dup_map = map;
    return true;
}

void
dm_conf_loader_fini(struct dm_conf_loader *ld)
{
    free(ld->dup_first);
    ld->dup_first = NULL;
    ld->dup_map = NULL;
    free(ld->pool_index);
    ld->pool_index = NULL;
    ld->pool_index_n = 0;
    dm_conf_tls_loader_fini(ld);
}

static const yaml_node_t *
earlier_key(struct dm_conf_loader *ld, const yaml_node_t *map, const yaml_node_pair_t *pair)
{
    const yaml_node_t *k = dm_conf_node(ld, pair->key);
    size_t n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);

    if (n > DUP_SCAN_MAX && dup_index(ld, map)) {
        size_t i = (size_t)(pair - map->data.mapping.pairs.start);
        size_t f = ld->dup_first[i];
        return f < i ? dm_conf_node(ld, map->data.mapping.pairs.start[f].key) : NULL;
    }
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pair; q++) {
        const yaml_node_t *e = dm_conf_node(ld, q->key);
        if (e->type == YAML_SCALAR_NODE && e->data.scalar.length == k->data.scalar.length &&
            memcmp(e->data.scalar.value, k->data.scalar.value, k->data.scalar.length) == 0) {
            return e;
        }
    }
    return NULL;
}

const char *
dm_conf_pair_key(struct dm_conf_loader *ld, const yaml_node_t *map, const yaml_node_pair_t *pair,
                 const char *what)
{
    const yaml_node_t *k = dm_conf_node(ld, pair->key);
    const yaml_node_t *first;
    char buf[DM_CONF_SHOW_BUF];
    const char *s = dm_conf_get_text(ld, k, "a name");

    if (s == NULL) {
        return NULL;
    }
    first = earlier_key(ld, map, pair);
    if (first != NULL) {
        dm_conf_fail_at(ld, k, "duplicate %s %s (first at line %zu)", what,
                        dm_conf_quote(s, strlen(s), buf, sizeof(buf)), first->start_mark.line + 1);
        return NULL;
    }
    return s;
}

bool
dm_conf_is_mapping(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    if (n->type != YAML_MAPPING_NODE) {
        dm_conf_fail_type(ld, n, "a mapping");
        return false;
    }
    return true;
}

bool
dm_conf_walk(struct dm_conf_loader *ld, const yaml_node_t *map, bool null_ok,
             const char *const *known, size_t n, yaml_node_t **vals)
{
    char buf[DM_CONF_SHOW_BUF];

    for (size_t i = 0; i < n; i++) {
        vals[i] = NULL;
    }
    if (null_ok && dm_conf_is_null(map)) {
        return true;
    }
    if (!dm_conf_is_mapping(ld, map)) {
        return false;
    }
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = dm_conf_node(ld, p->key);
        const char *key = dm_conf_pair_key(ld, map, p, "key");
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
            vals[i] = dm_conf_node(ld, p->value);
            continue;
        }
        if (strcmp(key, "<<") == 0) {
            /* YAML 1.1's merge key, which libyaml leaves to the application. */
            dm_conf_fail_at(ld, k,
                            "merge keys (<<) are not supported: write the keys out "
                            "(an alias may stand for a whole value)");
            continue;
        }
        near = dm_conf_suggest(key, known, n);
        if (near != NULL) {
            dm_conf_fail_at(ld, k, "unknown key %s (did you mean \"%s\"?)",
                            dm_conf_quote(key, strlen(key), buf, sizeof(buf)), near);
        } else {
            dm_conf_fail_at(ld, k, "unknown key %s",
                            dm_conf_quote(key, strlen(key), buf, sizeof(buf)));
        }
    }
    return true;
}

const yaml_node_t *
dm_conf_lookup(struct dm_conf_loader *ld, const yaml_node_t *map, const char *key)
{
    if (map->type != YAML_MAPPING_NODE) {
        return NULL;
    }
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = dm_conf_node(ld, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp(dm_conf_text_of(k), key) == 0) {
            return dm_conf_node(ld, p->value);
        }
    }
    return NULL;
}

yaml_node_item_t *
dm_conf_list_items(struct dm_conf_loader *ld, const yaml_node_t *n, size_t *count)
{
    *count = 0;
    if (dm_conf_is_null(n)) {
        return NULL;
    }
    if (n->type != YAML_SEQUENCE_NODE) {
        dm_conf_fail_type(ld, n, "a list");
        return NULL;
    }
    *count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    return n->data.sequence.items.start;
}

const char *
dm_conf_join_names(const char *const *names, size_t n, char *buf, size_t size)
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

bool
dm_conf_get_double(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, double min,
                   double *out)
{
    return dm_conf_get_double_in(ld, n, key, min, HUGE_VAL, out);
}

bool
dm_conf_get_double_in(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, double min,
                      double max, double *out)
{
    const char *s;
    char *end;
    double v;

    if (n->type != YAML_SCALAR_NODE || dm_conf_is_null(n)) {
        dm_conf_fail_type(ld, n, "a number");
        return false;
    }
    s = dm_conf_text_of(n);
    if (strspn(s, "0123456789+-.eE") != n->data.scalar.length) {
        dm_conf_fail_type(ld, n, "a number");
        return false;
    }
    v = strtod(s, &end);
    if (end == s || *end != '\0') {
        dm_conf_fail_type(ld, n, "a number");
        return false;
    }
    /* s holds only the characters above: safe to print as it is. */
    if (v < min) {
        dm_conf_fail_at(ld, n, "%s must be at least %g, got %s", key, min, s);
        return false;
    }
    if (v > max && isfinite(max)) {
        dm_conf_fail_at(ld, n, "%s must be at most %g, got %s", key, max, s);
        return false;
    }
    if (!isfinite(v)) {
        dm_conf_fail_at(ld, n, "%s is too large, got %s", key, s);
        return false;
    }
    /* Adding 0 turns "-0" into 0, so no policy sees a negative zero. */
    *out = v + 0.0;
    return true;
}

bool
dm_conf_get_bool(struct dm_conf_loader *ld, const yaml_node_t *n, bool *out)
{
    static const char *const words[] = { "true", "yes", "false", "no" };

    if (n->type == YAML_SCALAR_NODE && !dm_conf_is_null(n)) {
        for (size_t i = 0; i < DM_CONF_NKEYS(words); i++) {
            if (strcmp(dm_conf_text_of(n), words[i]) == 0) {
                *out = i < 2;
                return true;
            }
        }
    }
    dm_conf_fail_type(ld, n, "true or false");
    return false;
}

int
dm_conf_get_choice(struct dm_conf_loader *ld, const yaml_node_t *n, const char *what,
                   const char *const *names, size_t n_names)
{
    const char *s = dm_conf_get_text(ld, n, "a string");
    char buf[DM_CONF_SHOW_BUF], list[256];

    if (s == NULL) {
        return -1;
    }
    for (size_t i = 0; i < n_names; i++) {
        if (strcmp(s, names[i]) == 0) {
            return (int)i;
        }
    }
    dm_conf_fail_at(ld, n, "unknown %s %s (known: %s)", what,
                    dm_conf_quote(s, strlen(s), buf, sizeof(buf)),
                    dm_conf_join_names(names, n_names, list, sizeof(list)));
    return -1;
}

int
dm_conf_open_regular(const char *path, char *ebuf, size_t ebuf_len, const char **why)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        *why = strerror_r(errno, ebuf, ebuf_len);
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        *why = strerror_r(errno, ebuf, ebuf_len);
    } else if (S_ISDIR(st.st_mode)) {
        *why = strerror_r(EISDIR, ebuf, ebuf_len);
    } else if (!S_ISREG(st.st_mode)) {
        *why = "not a regular file";
    } else {
        return fd;
    }
    close(fd);
    return -1;
}

bool
dm_conf_get_existing_path(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key,
                          bool dir, char **out)
{
    const char *s = dm_conf_get_text(ld, n, "a path");
    char buf[DM_CONF_SHOW_BUF], ebuf[128];
    const char *why = NULL;
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
    } else {
        fd = dm_conf_open_regular(s, ebuf, sizeof(ebuf), &why);
    }
    if (why != NULL) {
        dm_conf_fail_at(ld, n, "%s %s: %s", key, dm_conf_quote(s, strlen(s), buf, sizeof(buf)),
                        why);
        return false;
    }
    close(fd);
    return dm_conf_get_string(ld, n, out);
}

bool
dm_conf_get_path(struct dm_conf_loader *ld, const yaml_node_t *n, char **out)
{
    const char *s = dm_conf_get_text(ld, n, "a path");
    char buf[DM_CONF_SHOW_BUF];

    if (s == NULL) {
        return false;
    }
    if (s[0] != '/') {
        dm_conf_fail_at(ld, n, "bad path %s (must start with \"/\")",
                        dm_conf_quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    for (const char *p = s; *p != '\0'; p++) {
        if ((unsigned char)*p <= ' ' || *p == 0x7f) {
            dm_conf_fail_at(ld, n, "bad path %s (no spaces or control characters)",
                            dm_conf_quote(s, strlen(s), buf, sizeof(buf)));
            return false;
        }
    }
    return dm_conf_get_string(ld, n, out);
}
