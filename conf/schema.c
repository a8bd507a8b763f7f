/*
 * The schema of the top level: one loader per section (workers, listen,
 * admin, timeouts, limits, access_log, routes, catalog; pools are in
 * pools.c), the defaults outside the pools, and the root, which loads the
 * sections in the order their checks need and ties them together.
 */
#include "conf/internal.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"

/* ---- defaults ---- */

bool
dm_conf_defaults(struct dm_conf *c)
{
    c->workers = 0;
    c->log_level = 2; /* info */
    c->timeouts = (struct dm_conf_timeouts){
        .connect_ms = 5000,
        .client_header_ms = 10000,
        .client_keepalive_ms = 60000,
        .client_body_ms = 10000,
        .server_response_ms = 60000,
        .client_send_ms = 60000,
        .request_ms = 0,
        .queue_ms = 5000, /* connect_ms's */
        .shutdown_ms = 10000,
        .tunnel_ms = 3600000,
    };
    c->limits = (struct dm_conf_limits){
        .header_bytes = 16384,
        .header_count = 100,
        .body_bytes = 0,
        .body_min_rate = 500,
        .max_conns = DM_CONF_DEFAULT_MAX_CONNS,
    };
    c->catalog = (struct dm_conf_catalog){
        .memory = 16u << 20,
        .scan_limit = 256u << 10,
        .learn = true,
        .default_object_bytes = 10240,
    };
    c->report_max_age_ms = 5000;
    c->access_log_format = strdup("default");
    return c->access_log_format != NULL;
}

/* ---- sections ---- */

static void
load_workers(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    uint64_t v;

    if (n->type == YAML_SCALAR_NODE && strcmp(dm_conf_text_of(n), "auto") == 0) {
        ld->c->workers = 0;
        return;
    }
    if (n->type != YAML_SCALAR_NODE || dm_conf_is_null(n) ||
        strspn(dm_conf_text_of(n), "-0123456789") != n->data.scalar.length) {
        dm_conf_fail_type(ld, n, "an integer or \"auto\"");
        return;
    }
    if (dm_conf_get_uint(ld, n, "workers", 1, 1024, &v)) {
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

enum { LI_ADDRESS, LI_TLS, LI_N };
static const char *const listen_keys[LI_N] = {
    [LI_ADDRESS] = "address",
    [LI_TLS] = "tls",
};

/* One listen item: an address, or a mapping {address, tls}. True when it is added. */
static bool
load_listener(struct dm_conf_loader *ld, const yaml_node_t *item)
{
    struct dm_conf *c = ld->c;
    struct dm_conf_addr *a = &c->listeners[c->nlisteners];
    const yaml_node_t *addr = item;
    yaml_node_t *v[LI_N] = { 0 };
    if (item->type == YAML_MAPPING_NODE) {
        if (!dm_conf_walk(ld, item, false, listen_keys, LI_N, v)) {
            return false;
        }
        if (v[LI_ADDRESS] == NULL) {
            dm_conf_fail_at(ld, item, "listen: a listener needs an address");
            return false;
        }
        addr = v[LI_ADDRESS];
    }
    if (!dm_conf_get_addr(ld, addr, true, a)) {
        return false;
    }
    c->nlisteners++;
    if (v[LI_TLS] != NULL) {
        dm_conf_load_listener_tls(ld, v[LI_TLS], a->text, &c->listener_tls[c->nlisteners - 1]);
    }
    return true;
}

static void
load_listen(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    struct dm_conf *c = ld->c;
    yaml_node_item_t *items = NULL;
    size_t count = 1;
    char buf[DM_CONF_SHOW_BUF];

    if (n->type == YAML_SEQUENCE_NODE) {
        items = dm_conf_list_items(ld, n, &count);
        if (count == 0) {
            dm_conf_fail_at(ld, n, "listen: expected at least one address");
            return;
        }
        if (count > DM_CONF_LISTENERS_MAX) {
            /* Each is a socket in every worker, checked against every other here. */
            dm_conf_fail_at(ld, n, "listen: %zu addresses, at most %u", count,
                            DM_CONF_LISTENERS_MAX);
            return;
        }
    } else if ((n->type != YAML_SCALAR_NODE || dm_conf_is_null(n)) &&
               n->type != YAML_MAPPING_NODE) {
        dm_conf_fail_type(ld, n, "an address, a listener or a list of them");
        return;
    }
    c->listeners = calloc(count, sizeof(*c->listeners));
    c->listener_tls = calloc(count, sizeof(*c->listener_tls));
    if (c->listeners == NULL || c->listener_tls == NULL) {
        ld->oom = true;
        return;
    }
    if (n->type != YAML_SEQUENCE_NODE) {
        (void)load_listener(ld, n);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item = dm_conf_node(ld, items[i]);
        if (!load_listener(ld, item)) {
            continue;
        }
        const struct dm_conf_addr *a = &c->listeners[c->nlisteners - 1];
        /* With SO_REUSEPORT a second bind of the same address would succeed silently. */
        for (size_t j = 0; j + 1 < c->nlisteners; j++) {
            if (same_addr(&c->listeners[j], a)) {
                dm_conf_fail_at(ld, item, "duplicate listen address %s (same as %s)",
                                dm_conf_quote(a->text, strlen(a->text), buf, sizeof(buf)),
                                c->listeners[j].text);
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
    TMO_CLIENT_SEND,
    TMO_REQUEST,
    TMO_QUEUE,
    TMO_SHUTDOWN,
    TMO_TUNNEL,
    TMO_N
};
static const char *const timeout_keys[TMO_N] = {
    [TMO_CONNECT] = "connect",
    [TMO_CLIENT_HEADER] = "client_header",
    [TMO_CLIENT_KEEPALIVE] = "client_keepalive",
    [TMO_CLIENT_BODY] = "client_body",
    [TMO_SERVER_RESPONSE] = "server_response",
    [TMO_CLIENT_SEND] = "client_send",
    [TMO_REQUEST] = "request",
    [TMO_QUEUE] = "queue",
    [TMO_SHUTDOWN] = "shutdown",
    [TMO_TUNNEL] = "tunnel",
};

static void
load_timeouts(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    struct dm_conf_timeouts *t = &ld->c->timeouts;
    uint64_t *fields[TMO_N] = {
        [TMO_CONNECT] = &t->connect_ms,
        [TMO_CLIENT_HEADER] = &t->client_header_ms,
        [TMO_CLIENT_KEEPALIVE] = &t->client_keepalive_ms,
        [TMO_CLIENT_BODY] = &t->client_body_ms,
        [TMO_SERVER_RESPONSE] = &t->server_response_ms,
        [TMO_CLIENT_SEND] = &t->client_send_ms,
        [TMO_REQUEST] = &t->request_ms,
        [TMO_QUEUE] = &t->queue_ms,
        [TMO_SHUTDOWN] = &t->shutdown_ms,
        [TMO_TUNNEL] = &t->tunnel_ms,
    };
    yaml_node_t *v[TMO_N];

    if (!dm_conf_walk(ld, n, true, timeout_keys, TMO_N, v)) {
        return;
    }
    for (size_t i = 0; i < TMO_N; i++) {
        if (v[i] != NULL) {
            /* 0 turns the whole-exchange and tunnel bounds off, and drains
             * nothing on shutdown. */
            bool zero_ok = i == TMO_REQUEST || i == TMO_SHUTDOWN || i == TMO_TUNNEL;
            (void)dm_conf_get_duration(ld, v[i], timeout_keys[i], zero_ok, fields[i]);
        }
    }
    if (v[TMO_QUEUE] == NULL) {
        t->queue_ms = t->connect_ms; /* as HAProxy's timeout queue */
    }
}

enum {
    LIM_HEADER_BYTES,
    LIM_HEADER_COUNT,
    LIM_BODY_BYTES,
    LIM_BODY_MIN_RATE,
    LIM_MAX_CONNS,
    LIM_MAX_CONNS_PER_CLIENT,
    LIM_RATE,
    LIM_BURST,
    LIM_N
};
static const char *const limit_keys[LIM_N] = {
    [LIM_HEADER_BYTES] = "header_bytes",
    [LIM_HEADER_COUNT] = "header_count",
    [LIM_BODY_BYTES] = "body_bytes",
    [LIM_BODY_MIN_RATE] = "body_min_rate",
    [LIM_MAX_CONNS] = "max_conns",
    [LIM_MAX_CONNS_PER_CLIENT] = "max_conns_per_client",
    [LIM_RATE] = "rate",
    [LIM_BURST] = "burst",
};

static void
load_limits(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    struct dm_conf_limits *l = &ld->c->limits;
    yaml_node_t *v[LIM_N];
    uint64_t x;

    if (!dm_conf_walk(ld, n, true, limit_keys, LIM_N, v)) {
        return;
    }
    /* header_bytes is a buffer per connection: bounded so a typo cannot exhaust memory. */
    if (v[LIM_HEADER_BYTES] != NULL &&
        dm_conf_get_size(ld, v[LIM_HEADER_BYTES], "header_bytes", 1, 64u << 20, &x)) {
        l->header_bytes = (size_t)x;
    }
    if (v[LIM_HEADER_COUNT] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[LIM_HEADER_COUNT], "header_count", 1, 65535,
                                   &l->header_count);
    }
    if (v[LIM_BODY_BYTES] != NULL) {
        (void)dm_conf_get_size(ld, v[LIM_BODY_BYTES], "body_bytes", 0, UINT64_MAX, &l->body_bytes);
    }
    if (v[LIM_BODY_MIN_RATE] != NULL) {
        (void)dm_conf_get_size(ld, v[LIM_BODY_MIN_RATE], "body_min_rate", 0, 1u << 30,
                               &l->body_min_rate);
    }
    if (v[LIM_MAX_CONNS] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[LIM_MAX_CONNS], "max_conns", 1, 10000000, &l->max_conns);
    }
    if (v[LIM_MAX_CONNS_PER_CLIENT] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[LIM_MAX_CONNS_PER_CLIENT], "max_conns_per_client", 0,
                                   10000000, &l->max_conns_per_client);
    }
    if (v[LIM_RATE] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[LIM_RATE], "rate", 0, 1000000, &l->rate);
    }
    if (v[LIM_BURST] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[LIM_BURST], "burst", 1, 10000000, &l->burst);
    }
    if (l->rate > 0 && l->burst == 0) {
        l->burst = l->rate; /* one second's worth; nginx's limit_req has no burst by default */
    }
}

enum { LOG_PATH, LOG_FORMAT, LOG_N };
static const char *const access_log_keys[LOG_N] = {
    [LOG_PATH] = "path",
    [LOG_FORMAT] = "format",
};

/* A log's path: a plain YAML 1.1 boolean word (on, off, yes, no, true,
 * false, y, n, in any case: a switch, not a file name) is refused, not
 * taken for a file of that name in the working directory. access_log's
 * own off comes before (dm_conf_is_off); error_log has none. */
static void
log_path(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, char **out,
         struct dm_conf_at *at)
{
    *at = (struct dm_conf_at){ n->start_mark.line, n->start_mark.column };
    static const char *const switches[] = { "on", "off", "yes", "no", "true", "false", "y", "n" };
    bool access = strcmp(key, "access_log") == 0;
    if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        for (size_t i = 0; i < DM_CONF_NKEYS(switches); i++) {
            if (strcasecmp(dm_conf_text_of(n), switches[i]) == 0) {
                dm_conf_fail_at(ld, n,
                                "%s: \"%s\" is not a path: write the log's path (\"-\": %s)%s", key,
                                dm_conf_text_of(n), access ? "standard output" : "standard error",
                                access ? ", or off" : "");
                return;
            }
        }
    }
    (void)dm_conf_get_string(ld, n, out);
}

static void
load_access_log(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    static const char *const formats[] = { "default", "json", "combined" };
    struct dm_conf *c = ld->c;
    yaml_node_t *v[LOG_N];
    char buf[DM_CONF_SHOW_BUF];

    if (dm_conf_is_off(n)) {
        return;
    }
    /* The short form "access_log: /var/log/dimmer.log" is a path with the default format. */
    if (n->type == YAML_SCALAR_NODE) {
        log_path(ld, n, "access_log", &c->access_log, &c->access_log_at);
        return;
    }
    if (!dm_conf_walk(ld, n, false, access_log_keys, LOG_N, v)) {
        return;
    }
    if (v[LOG_PATH] != NULL) {
        log_path(ld, v[LOG_PATH], "access_log", &c->access_log, &c->access_log_at);
    } else {
        c->access_log = dm_conf_dup_str(ld, "-");
    }
    if (v[LOG_FORMAT] != NULL) {
        const char *f = dm_conf_get_text(ld, v[LOG_FORMAT], "a string");
        if (f == NULL) {
            return;
        }
        if (strcmp(f, formats[0]) != 0 && strcmp(f, formats[1]) != 0 &&
            strcmp(f, formats[2]) != 0) {
            dm_conf_fail_at(ld, v[LOG_FORMAT],
                            "unknown access_log format %s (known: default, json, combined)",
                            dm_conf_quote(f, strlen(f), buf, sizeof(buf)));
            return;
        }
        free(c->access_log_format);
        c->access_log_format = dm_conf_dup_str(ld, f);
    }
}

/* Exact name, "*.suffix", or "*" for any host (stored as NULL). */
static void
get_host(struct dm_conf_loader *ld, const yaml_node_t *n, char **out)
{
    const char *s = dm_conf_get_text(ld, n, "a host name");
    const char *name;
    char buf[DM_CONF_SHOW_BUF];

    if (s == NULL || strcmp(s, "*") == 0) {
        return;
    }
    name = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
    if (*name == '\0' || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789-._[]:") != strlen(name)) {
        dm_conf_fail_at(ld, n, "bad host %s (a name, or \"*.\" and a suffix)",
                        dm_conf_quote(s, strlen(s), buf, sizeof(buf)));
        return;
    }
    (void)dm_conf_get_string(ld, n, out);
}

enum { RT_HOST, RT_PATH, RT_POOL, RT_N };
static const char *const route_keys[RT_N] = {
    [RT_HOST] = "host",
    [RT_PATH] = "path",
    [RT_POOL] = "pool",
};

static void
load_routes(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    struct dm_conf *c = ld->c;
    yaml_node_item_t *items;
    size_t count;

    items = dm_conf_list_items(ld, n, &count);
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
        const yaml_node_t *item = dm_conf_node(ld, items[i]);
        struct dm_conf_route *r = &c->routes[i];
        yaml_node_t *v[RT_N];
        long pool;

        if (!dm_conf_walk(ld, item, false, route_keys, RT_N, v)) {
            continue;
        }
        if (v[RT_HOST] != NULL) {
            get_host(ld, v[RT_HOST], &r->host);
        }
        if (v[RT_PATH] != NULL) {
            (void)dm_conf_get_path(ld, v[RT_PATH], &r->path_prefix);
        }
        if (v[RT_POOL] == NULL) {
            dm_conf_fail_at(ld, item, "route %zu: missing required key \"pool\"", i + 1);
        } else if ((pool = dm_conf_find_pool(ld, v[RT_POOL])) >= 0) {
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
get_catalog_host(struct dm_conf_loader *ld, const yaml_node_t *n, char **out)
{
    const char *s = dm_conf_get_text(ld, n, "a host name");
    size_t len;
    bool ok;
    char buf[DM_CONF_SHOW_BUF];

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
        dm_conf_fail_at(ld, n, "bad host %s (a host name, with no port)",
                        dm_conf_quote(s, len, buf, sizeof(buf)));
        return;
    }
    (void)dm_conf_get_string(ld, n, out);
}

static void
load_catalog(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    struct dm_conf_catalog *cat = &ld->c->catalog;
    yaml_node_t *v[CAT_N];

    if (!dm_conf_walk(ld, n, true, catalog_keys, CAT_N, v)) {
        return;
    }
    if (v[CAT_MEMORY] != NULL) {
        (void)dm_conf_get_size(ld, v[CAT_MEMORY], "memory", 1, UINT64_MAX, &cat->memory);
    }
    if (v[CAT_SCAN_LIMIT] != NULL) {
        (void)dm_conf_get_size(ld, v[CAT_SCAN_LIMIT], "scan_limit", 0, UINT64_MAX,
                               &cat->scan_limit);
    }
    if (v[CAT_LEARN] != NULL) {
        (void)dm_conf_get_bool(ld, v[CAT_LEARN], &cat->learn);
    }
    if (v[CAT_DEFAULT_OBJECT_BYTES] != NULL) {
        (void)dm_conf_get_size(ld, v[CAT_DEFAULT_OBJECT_BYTES], "default_object_bytes", 0,
                               UINT64_C(1) << 40, &cat->default_object_bytes);
    }
    /* Checked now, so that a typo in a path fails "dimmer -t" rather than the preload. */
    if (v[CAT_DOCROOT] != NULL) {
        (void)dm_conf_get_existing_path(ld, v[CAT_DOCROOT], "docroot", true, &cat->docroot);
    }
    if (v[CAT_MANIFEST] != NULL) {
        (void)dm_conf_get_existing_path(ld, v[CAT_MANIFEST], "manifest", false, &cat->manifest);
    }
    if (v[CAT_HOST] != NULL) {
        get_catalog_host(ld, v[CAT_HOST], &cat->host);
    }
}

/*
 * user: and group: (names, or numbers), looked up now so that a bad one is
 * an error of the file, with its place, and dimmer does not start.
 */
static void
load_user(struct dm_conf_loader *ld, const yaml_node_t *u, const yaml_node_t *g)
{
    struct dm_conf *c = ld->c;
    char buf[DM_CONF_SHOW_BUF];
    if (u == NULL) {
        dm_conf_fail_at(ld, g, "group: needs user: (the user to run as)");
        return;
    }
    if (!dm_conf_get_string(ld, u, &c->user)) {
        return;
    }
    char tmp[4096];
    struct passwd pw, *pwp = NULL;
    char *end = NULL;
    unsigned long num = strtoul(c->user, &end, 10);
    if (getpwnam_r(c->user, &pw, tmp, sizeof(tmp), &pwp) == 0 && pwp != NULL) {
        c->uid = (unsigned)pwp->pw_uid;
        c->gid = (unsigned)pwp->pw_gid;
    } else if (end != c->user && *end == 0 && num < 0xffffffffu) {
        c->uid = c->gid = (unsigned)num; /* a number with no name: its group the same */
    } else {
        dm_conf_fail_at(ld, u, "unknown user %s",
                        dm_conf_quote(c->user, strlen(c->user), buf, sizeof(buf)));
        return;
    }
    if (g == NULL || !dm_conf_get_string(ld, g, &c->group)) {
        return;
    }
    struct group gr, *grp = NULL;
    num = strtoul(c->group, &end, 10);
    if (getgrnam_r(c->group, &gr, tmp, sizeof(tmp), &grp) == 0 && grp != NULL) {
        c->gid = (unsigned)grp->gr_gid;
    } else if (end != c->group && *end == 0 && num < 0xffffffffu) {
        c->gid = (unsigned)num;
    } else {
        dm_conf_fail_at(ld, g, "unknown group %s",
                        dm_conf_quote(c->group, strlen(c->group), buf, sizeof(buf)));
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
    TOP_POWER,
    TOP_LOG_LEVEL,
    TOP_USER,
    TOP_GROUP,
    TOP_N
};
static const char *const top_keys[TOP_N] = {
    [TOP_WORKERS] = "workers",           [TOP_LISTEN] = "listen",   [TOP_ADMIN] = "admin",
    [TOP_TIMEOUTS] = "timeouts",         [TOP_LIMITS] = "limits",   [TOP_ACCESS_LOG] = "access_log",
    [TOP_ERROR_LOG] = "error_log",       [TOP_POOLS] = "pools",     [TOP_ROUTES] = "routes",
    [TOP_DEFAULT_POOL] = "default_pool", [TOP_CATALOG] = "catalog", [TOP_POWER] = "power",
    [TOP_LOG_LEVEL] = "log_level",       [TOP_USER] = "user",       [TOP_GROUP] = "group",
};

void
dm_conf_load_root(struct dm_conf_loader *ld, const yaml_node_t *root)
{
    struct dm_conf *c = ld->c;
    yaml_node_t *v[TOP_N];
    long pool;

    if (!dm_conf_walk(ld, root, false, top_keys, TOP_N, v)) {
        return;
    }
    if (v[TOP_WORKERS] != NULL) {
        load_workers(ld, v[TOP_WORKERS]);
    }
    if (v[TOP_LISTEN] == NULL) {
        dm_conf_fail_at(ld, root, "missing required key \"listen\"");
    } else {
        load_listen(ld, v[TOP_LISTEN]);
    }
    if (v[TOP_ADMIN] != NULL && dm_conf_get_addr(ld, v[TOP_ADMIN], true, &c->admin)) {
        for (size_t i = 0; i < c->nlisteners; i++) {
            if (same_addr(&c->admin, &c->listeners[i])) {
                dm_conf_fail_at(ld, v[TOP_ADMIN], "admin address \"%s\" is also a listen address",
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
        log_path(ld, v[TOP_ERROR_LOG], "error_log", &c->error_log, &c->error_log_at);
    }
    if (v[TOP_USER] != NULL || v[TOP_GROUP] != NULL) {
        load_user(ld, v[TOP_USER], v[TOP_GROUP]);
    }
    if (v[TOP_LOG_LEVEL] != NULL) {
        static const char *const levels[] = { "error", "warn", "info", "debug" };
        int l = dm_conf_get_choice(ld, v[TOP_LOG_LEVEL], "log_level", levels, 4);
        if (l >= 0) {
            c->log_level = (unsigned)l;
        }
    }
    /* Pools before routes and default_pool, which name them, wherever they are in the file. */
    if (v[TOP_POOLS] == NULL) {
        dm_conf_fail_at(ld, root, "missing required key \"pools\"");
    } else {
        dm_conf_load_pools(ld, v[TOP_POOLS]);
    }
    if (ld->oom) {
        /* The pool table may be cut short: nothing more worth checking. */
        return;
    }
    if (v[TOP_ROUTES] != NULL) {
        load_routes(ld, v[TOP_ROUTES]);
    }
    if (v[TOP_POWER] != NULL) {
        dm_conf_load_power(ld, v[TOP_POWER]);
    }
    dm_conf_check_power(ld);
    if (v[TOP_DEFAULT_POOL] != NULL && (pool = dm_conf_find_pool(ld, v[TOP_DEFAULT_POOL])) >= 0) {
        c->default_pool = (size_t)pool;
    }
}
