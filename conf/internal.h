/*
 * Helpers shared by the files of conf/; not part of the public API.
 *
 * One load is a struct dm_conf_loader: the YAML document, the config being
 * built and the messages found so far. errors.c keeps the messages, node.c
 * reads YAML nodes into typed values and reports what is wrong with them,
 * schema.c and pools.c are the loaders of the sections, conf.c parses the
 * file and runs a load, quick.c builds a config from the quick start flags,
 * and parse.c parses the values themselves, with no YAML. Functions that
 * take a loader report into it and go on; only a load's own thread calls them.
 */
#ifndef DM_CONF_INTERNAL_H
#define DM_CONF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

struct dm_conf;
struct dm_conf_addr;
struct dm_conf_errors;
struct dm_conf_msg;
struct dm_conf_pool;

#define DM_CONF_NKEYS(a) (sizeof(a) / sizeof((a)[0]))

/* Width of a quoted value inside a message, before it is cut with "...". */
#define DM_CONF_SHOW_MAX 60
/* Room for a value quoted by dm_conf_quote(), escapes and "..." included. */
#define DM_CONF_SHOW_BUF (DM_CONF_SHOW_MAX * 4 + 16)

/* One load: the document, the config being built and the errors found. */
struct dm_conf_loader {
    const char *name; /* file name in messages */
    yaml_document_t doc;
    struct dm_conf *c;
    struct dm_conf_msg *msgs; /* see errors.c */
    size_t nmsgs;
    size_t dropped; /* messages past DM_CONF_MSGS_MAX, counted, not kept */
    bool oom;
    /* The duplicate keys of the last large mapping asked about (node.c):
     * for each pair, the index of the first pair with its key. */
    const yaml_node_t *dup_map;
    size_t *dup_first;
    /* The pools sorted by name, for dm_conf_find_pool (pools.c). */
    struct dm_conf_pool_key {
        const char *name;
        size_t i;
    } * pool_index;
    size_t pool_index_n;
    /* The system's CAs, read once per load for every TLS context of it
     * (tls.c): each read takes tens of milliseconds. */
    struct x509_store_st *system_cas;
    bool system_cas_read;
};

/* c, or when it is 0 (equal keys) the order of x and y: qsort made stable. */
static inline int
dm_conf_cmp_then(int c, size_t x, size_t y)
{
    return c != 0 ? c : (x > y) - (x < y);
}

/* Frees what a load kept on the side (the duplicate-key and pool indices, the system's CAs). */
void dm_conf_loader_fini(struct dm_conf_loader *ld);

/* Frees the system's CAs a load read (tls.c). */
void dm_conf_tls_loader_fini(struct dm_conf_loader *ld);

/* The most messages one load keeps (and reports: the rest are counted). */
#define DM_CONF_MSGS_MAX 100

/* ---- parse.c: values without YAML ---- */

/*
 * dm_conf_parse_addr(), and on -EINVAL *why is set to a short static reason
 * ("missing port", "port must be between 1 and 65535", ...) for the message.
 * listener: an address to listen on, where port 0 is allowed too (the kernel
 * then picks a free port); otherwise the port is 1..65535. On success
 * out->text is a copy of text that the caller frees.
 */
int dm_conf_parse_addr_why(const char *text, bool listener, struct dm_conf_addr *out,
                           const char **why);

/*
 * Edit distance between a and b (insertions, deletions, substitutions and
 * swaps of two adjacent characters), ignoring ASCII case; strings longer than
 * 64 bytes are "far" (returns (size_t)-1 / 2).
 */
size_t dm_conf_edit_distance(const char *a, const char *b);

/*
 * The candidate nearest to word when it is close enough to be a likely typo
 * (at most a third of the longer string differs), else NULL. n candidates;
 * NULL entries are skipped. Ties go to the earliest candidate.
 */
const char *dm_conf_suggest(const char *word, const char *const *cands, size_t n);
/* Words longer than this get no suggestion (the distance costs their product). */
#define DM_CONF_SUGGEST_MAX 256

/* ---- errors.c: the messages of a load ---- */

/* A malloc'd printf; NULL when out of memory. */
char *dm_conf_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Adds "name:line:column: what" at mark (0-based, as libyaml counts) to the
 * messages of ld. Out of memory only sets ld->oom.
 */
void dm_conf_fail_mark(struct dm_conf_loader *ld, yaml_mark_t mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A warning at node's position, kept in ld->c->warnings: the config still loads. */
void dm_conf_warn_at(struct dm_conf_loader *ld, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* dm_conf_fail_mark() at the start of node. */
void dm_conf_fail_at(struct dm_conf_loader *ld, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * A message with no position, as it is written (the quick start flags, a
 * file that cannot be read); these keep the order they were added in.
 */
void dm_conf_fail_plain(struct dm_conf_loader *ld, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Moves the messages of ld to err (NULL drops them) sorted into file order,
 * with "name: out of memory" last when ld->oom; ld then holds none.
 */
void dm_conf_flush_msgs(struct dm_conf_loader *ld, struct dm_conf_errors *err);

/*
 * Writes the len bytes at s into buf (size bytes, DM_CONF_SHOW_BUF will do)
 * as a double-quoted string, escaped, cut to DM_CONF_SHOW_MAX characters.
 * Returns buf.
 */
const char *dm_conf_quote(const char *s, size_t len, char *buf, size_t size);

/* ---- node.c: YAML nodes and typed values ---- */

/* The text of a scalar node (NUL-terminated by libyaml). */
const char *dm_conf_text_of(const yaml_node_t *n);

/* A plain empty, "~" or "null" scalar: "key:" with nothing after it. */
bool dm_conf_is_null(const yaml_node_t *n);

/* A plain "off" or "false", or an empty value: how a section is switched off. */
bool dm_conf_is_off(const yaml_node_t *n);

/* Reports "expected <expected>, got <what n is>" at n. */
void dm_conf_fail_type(struct dm_conf_loader *ld, const yaml_node_t *n, const char *expected);

/* The node of the document at index (a pair's key or value, a list item). */
yaml_node_t *dm_conf_node(struct dm_conf_loader *ld, int index);

/* A malloc'd copy of s; NULL, with ld->oom set, when out of memory. */
char *dm_conf_dup_str(struct dm_conf_loader *ld, const char *s);

/*
 * The getters below read the value n. Each checks the type and range,
 * reports at n what is wrong (key names the value in the message) and then
 * returns false (NULL, -1). Only a success sets *out (a bad address zeroes it).
 */

/* A non-empty scalar without NUL bytes; NULL after reporting otherwise. */
const char *dm_conf_get_text(struct dm_conf_loader *ld, const yaml_node_t *n, const char *expected);

/* Replaces *out (freed) with a copy of the string; false after reporting an error. */
bool dm_conf_get_string(struct dm_conf_loader *ld, const yaml_node_t *n, char **out);

/*
 * An integer key in min..max. The text must be decimal digits with an optional
 * "-", so that "-1" is out of range rather than "not an integer".
 */
bool dm_conf_get_uint(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key,
                      uint64_t min, uint64_t max, uint64_t *out);

/* dm_conf_get_uint() into an unsigned. */
bool dm_conf_get_unsigned(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key,
                          unsigned min, unsigned max, unsigned *out);

/* A duration in ms, at most DM_CONF_DURATION_MAX_MS; zero only where it means "off". */
bool dm_conf_get_duration(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key,
                          bool zero_ok, uint64_t *out);

/* A size in bytes, in min..max (max UINT64_MAX: no upper bound). */
bool dm_conf_get_size(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key,
                      uint64_t min, uint64_t max, uint64_t *out);

/*
 * An address; listener: one to listen on, where port 0 (any free port) is
 * allowed. On success out->text is a copy that the config frees.
 */
bool dm_conf_get_addr(struct dm_conf_loader *ld, const yaml_node_t *n, bool listener,
                      struct dm_conf_addr *out);

/*
 * A decimal number of at least min ("1.25", "0.1", "2", "1e-3"). strtod must
 * take the whole scalar, and only digits, signs, "." and "e" may appear, so
 * "1.5x", "0x10", "inf", "nan" and " 1" are not numbers.
 */
bool dm_conf_get_double(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key,
                        double min, double *out);
/* The same, at most max too ("KEY must be at most MAX, got TEXT"). */
bool dm_conf_get_double_in(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key,
                           double min, double max, double *out);

/* true, yes, false or no: the four words people write for a switch. */
bool dm_conf_get_bool(struct dm_conf_loader *ld, const yaml_node_t *n, bool *out);

/*
 * The index of the scalar n among the n_names names, or -1 after reporting
 * "unknown <what> "x" (known: a, b, c)".
 */
int dm_conf_get_choice(struct dm_conf_loader *ld, const yaml_node_t *n, const char *what,
                       const char *const *names, size_t n_names);

/* A URL path prefix into *out: starts with "/", no spaces or control characters. */
bool dm_conf_get_path(struct dm_conf_loader *ld, const yaml_node_t *n, char **out);

/*
 * Opens path for reading when it is a regular file, without ever blocking
 * (a FIFO would hold the load, and a reload's control thread, until a writer
 * came); -1 with *why set to the reason otherwise (ebuf holds it when it is
 * the system's).
 */
int dm_conf_open_regular(const char *path, char *ebuf, size_t ebuf_len, const char **why);

/*
 * A path that must name, now, a directory we can open (dir) or a regular file
 * we can read (!dir). The message carries the system's reason at the value:
 * docroot "x": No such file or directory. Relative paths are taken from the
 * working directory, as the preload will take them.
 */
bool dm_conf_get_existing_path(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key,
                               bool dir, char **out);

/*
 * The key of pair in map when it is a usable name and not a repeat of an
 * earlier key ("duplicate <what> ..."); reports and returns NULL otherwise.
 */
const char *dm_conf_pair_key(struct dm_conf_loader *ld, const yaml_node_t *map,
                             const yaml_node_pair_t *pair, const char *what);

/* Whether n is a mapping; reports "expected a mapping" when not. */
bool dm_conf_is_mapping(struct dm_conf_loader *ld, const yaml_node_t *n);

/*
 * Checks every key of map against the n known keys and sets vals[i] to the
 * value of known[i], or NULL when absent. Unknown keys (with the nearest known
 * key suggested) and duplicate keys are reported and skipped. Returns false,
 * after reporting, when map is not a mapping; an empty value counts as an
 * empty mapping when null_ok.
 */
bool dm_conf_walk(struct dm_conf_loader *ld, const yaml_node_t *map, bool null_ok,
                  const char *const *known, size_t n, yaml_node_t **vals);

/* Value of key in map (already walked), for looking back at earlier items; NULL if none. */
const yaml_node_t *dm_conf_lookup(struct dm_conf_loader *ld, const yaml_node_t *map,
                                  const char *key);

/* Items of a list, or NULL (with *count = 0) after reporting; empty values are empty lists. */
yaml_node_item_t *dm_conf_list_items(struct dm_conf_loader *ld, const yaml_node_t *n,
                                     size_t *count);

/* "a, b, c" of the n names into buf (size bytes), cut with "..." when it does not fit. */
const char *dm_conf_join_names(const char *const *names, size_t n, char *buf, size_t size);

/* ---- schema.c: the top level and its sections ---- */

/* Sets everything that has a default outside the pools; false when out of memory. */
bool dm_conf_defaults(struct dm_conf *c);

/*
 * Loads the root mapping into ld->c: every section, then the checks that
 * tie them together (admin against listen, routes and default_pool against
 * the pools).
 */
void dm_conf_load_root(struct dm_conf_loader *ld, const yaml_node_t *root);

/* ---- tls.c: the tls: blocks (conf/tls.h) ---- */

struct dm_conf_tls;
struct dm_conf_tls_client;

/* A listener's tls: mapping n into *out (set even when it has errors, to be freed). */
void dm_conf_load_listener_tls(struct dm_conf_loader *ld, const yaml_node_t *n, const char *addr,
                               struct dm_conf_tls **out);

/* A pool's tls: mapping (or true) n into *out (NULL: false; set with errors too). */
void dm_conf_load_pool_tls(struct dm_conf_loader *ld, const yaml_node_t *n,
                           struct dm_conf_tls_client **out);

/* ---- pools.c: pools and their servers ---- */

/* Sets the defaults of a pool (p zeroed before); false when out of memory. */
bool dm_conf_pool_defaults(struct dm_conf_pool *p);

/* Loads the pools mapping into ld->c->pools, each pool counted even when broken. */
void dm_conf_load_pools(struct dm_conf_loader *ld, const yaml_node_t *n);

/* Index of the pool named by n, or -1 after reporting (with the nearest name, or the list). */
long dm_conf_find_pool(struct dm_conf_loader *ld, const yaml_node_t *n);

/* A token of RFC 9110 section 5.6.2: what a header or cookie name may be made of. */
bool dm_conf_is_token(const char *s);

/* Whether a header that dimmer sets on a request would be one it frames the
 * message by, or writes itself (Host, Content-Length, hop-by-hop fields,
 * X-Forwarded-*, Via): a configured one would replace it (smuggling). */
bool dm_conf_header_is_ours(const char *name);

/* Sessions' numbers, bounded so that their sums and squares stay finite (an
 * LBF of inf made /stats invalid JSON). */
#define DM_CONF_RATE_MAX             1e4  /* frames a second */
#define DM_CONF_FRAME_LOAD_MAX       1e6  /* load of a frame */
#define DM_CONF_SESSION_CAPACITY_MAX 1e12 /* a server's */
#define DM_CONF_OURS_TEXT                                                                          \
    "Host, Content-Length, Transfer-Encoding, Connection, Keep-Alive, Proxy-Connection, TE, "      \
    "Trailer, Upgrade, Expect, X-Forwarded-For, X-Forwarded-Proto, Via"

/* ---- session.c: the session block of balance: session ---- */

/* The defaults of a pool's session block (s zeroed before); false when out of memory. */
struct dm_conf_session;
bool dm_conf_session_defaults(struct dm_conf_session *s);

/* Frees what a session block holds; s is left all zero. */
void dm_conf_session_fini(struct dm_conf_session *s);

/* A pool's `session` block into p->session; after its servers, which its delays name. */
void dm_conf_load_pool_session(struct dm_conf_loader *ld, struct dm_conf_pool *p,
                               const yaml_node_t *n);

/* A pool whose policy places sessions needs at least one game: reported at the pool. */
void dm_conf_check_pool_session(struct dm_conf_loader *ld, const struct dm_conf_pool *p,
                                const yaml_node_t *pool);

/* ---- power.c: power management ---- */

/* The defaults of a pool's power block and of a server's. */
struct dm_conf_power;
void dm_conf_power_defaults(struct dm_conf_power *pw);
struct dm_conf_server_power;
struct dm_conf_server;
void dm_conf_server_power_defaults(struct dm_conf_server_power *sp);

/* A pool's `power` block into p->power (enabled unless it says off). */
void dm_conf_load_pool_power(struct dm_conf_loader *ld, struct dm_conf_pool *p,
                             const yaml_node_t *n);

/* A server's `power` block: its power model and actuators. */
void dm_conf_load_server_power(struct dm_conf_loader *ld, struct dm_conf_pool *p,
                               struct dm_conf_server *s, const yaml_node_t *n);

/* What a server's block left to the pool's (full_w, booting_w, agent name),
 * and asleep_w <= idle_w <= full_w checked (an error at n). */
void dm_conf_server_power_finish(struct dm_conf_loader *ld, const struct dm_conf_pool *p,
                                 struct dm_conf_server *s, const yaml_node_t *n);

/* The top-level `power` block: metrics listener, key, admin token. */
void dm_conf_load_power(struct dm_conf_loader *ld, const yaml_node_t *n);

/* The checks across pools (own servers, unique agent names), reported at
 * the later server of each clash. */
void dm_conf_check_power(struct dm_conf_loader *ld);

#endif
