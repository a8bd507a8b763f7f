/*
 * The schema of the pools: one loader per mapping (a pool, its servers,
 * health_check, passive, hash and age), the defaults of a pool, and the
 * lookup of a pool by name for routes and default_pool.
 */
#include "conf/internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "balancers/balancer.h"
#include "balancers/hash.h"
#include "conf/conf.h"

bool
dm_conf_header_is_ours(const char *name)
{
    static const char *const ours[] = { "host",       "content-length",  "transfer-encoding",
                                        "connection", "keep-alive",      "proxy-connection",
                                        "te",         "trailer",         "upgrade",
                                        "expect",     "x-forwarded-for", "x-forwarded-proto",
                                        "via" };
    for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++) {
        if (strcasecmp(name, ours[i]) == 0) {
            return true;
        }
    }
    return false;
}

bool
dm_conf_is_token(const char *s)
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

enum { HC_PATH, HC_INTERVAL, HC_TIMEOUT, HC_RISE, HC_FALL, HC_N };
static const char *const health_keys[HC_N] = {
    [HC_PATH] = "path", [HC_INTERVAL] = "interval", [HC_TIMEOUT] = "timeout",
    [HC_RISE] = "rise", [HC_FALL] = "fall",
};

static void
load_health(struct dm_conf_loader *ld, struct dm_conf_health *h, const yaml_node_t *n)
{
    yaml_node_t *v[HC_N];

    if (!dm_conf_walk(ld, n, true, health_keys, HC_N, v)) {
        return;
    }
    h->enabled = true;
    if (v[HC_PATH] != NULL) {
        (void)dm_conf_get_path(ld, v[HC_PATH], &h->path);
    }
    if (v[HC_INTERVAL] != NULL) {
        (void)dm_conf_get_duration(ld, v[HC_INTERVAL], "interval", false, &h->interval_ms);
    }
    if (v[HC_TIMEOUT] != NULL) {
        (void)dm_conf_get_duration(ld, v[HC_TIMEOUT], "timeout", false, &h->timeout_ms);
    }
    if (v[HC_RISE] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[HC_RISE], "rise", 1, 1000, &h->rise);
    }
    if (v[HC_FALL] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[HC_FALL], "fall", 1, 1000, &h->fall);
    }
}

enum { PS_MAX_FAILS, PS_FAIL_TIMEOUT, PS_N };
static const char *const passive_keys[PS_N] = {
    [PS_MAX_FAILS] = "max_fails",
    [PS_FAIL_TIMEOUT] = "fail_timeout",
};

static void
load_passive(struct dm_conf_loader *ld, struct dm_conf_passive *ps, const yaml_node_t *n)
{
    yaml_node_t *v[PS_N];

    if (!dm_conf_walk(ld, n, true, passive_keys, PS_N, v)) {
        return;
    }
    if (v[PS_MAX_FAILS] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[PS_MAX_FAILS], "max_fails", 0, 1000000, &ps->max_fails);
    }
    if (v[PS_FAIL_TIMEOUT] != NULL) {
        (void)dm_conf_get_duration(ld, v[PS_FAIL_TIMEOUT], "fail_timeout", true,
                                   &ps->fail_timeout_ms);
    }
}

enum {
    SRV_NAME,
    SRV_ADDRESS,
    SRV_WEIGHT,
    SRV_CAPACITY,
    SRV_SESSION_CAPACITY,
    SRV_MAX_CONNS,
    SRV_POWER,
    SRV_N
};
static const char *const server_keys[SRV_N] = {
    [SRV_NAME] = "name",
    [SRV_ADDRESS] = "address",
    [SRV_WEIGHT] = "weight",
    [SRV_CAPACITY] = "capacity",
    [SRV_SESSION_CAPACITY] = "session_capacity",
    [SRV_MAX_CONNS] = "max_conns",
    [SRV_POWER] = "power",
};

/* The servers' names seen so far in a pool: open addressing, server index + 1 (0: empty). */
struct names {
    size_t *slots;
    size_t cap; /* a power of two, at least twice the servers; 0: no table (out of memory) */
};

/* The index of an earlier server of p named name, or i after noting server i under it. */
static size_t
names_first(struct names *t, const struct dm_conf_pool *p, const char *name, size_t i)
{
    if (t->cap == 0) {
        for (size_t j = 0; j < i; j++) {
            if (p->servers[j].name != NULL && strcmp(p->servers[j].name, name) == 0) {
                return j;
            }
        }
        return i;
    }
    uint64_t h = dm_hash_bytes(name, strlen(name));
    for (size_t s = (size_t)h & (t->cap - 1);; s = (s + 1) & (t->cap - 1)) {
        if (t->slots[s] == 0) {
            t->slots[s] = i + 1;
            return i;
        }
        if (strcmp(p->servers[t->slots[s] - 1].name, name) == 0) {
            return t->slots[s] - 1;
        }
    }
}

static void
load_server(struct dm_conf_loader *ld, struct dm_conf_pool *p, yaml_node_item_t *items, size_t i,
            struct names *names)
{
    struct dm_conf_server *s = &p->servers[i];
    const yaml_node_t *n = dm_conf_node(ld, items[i]);
    yaml_node_t *v[SRV_N];
    char buf[DM_CONF_SHOW_BUF];

    s->weight = 1;
    s->capacity = 100;
    s->session_capacity = 40000; /* the paper's FMAX */
    s->at = (struct dm_conf_at){ n->start_mark.line, n->start_mark.column };
    dm_conf_server_power_defaults(&s->power);
    if (!dm_conf_walk(ld, n, false, server_keys, SRV_N, v)) {
        return;
    }
    static const size_t required[] = { SRV_NAME, SRV_ADDRESS };
    for (size_t k = 0; k < DM_CONF_NKEYS(required); k++) {
        if (v[required[k]] == NULL) {
            dm_conf_fail_at(ld, n, "pool \"%s\": server %zu: missing required key \"%s\"", p->name,
                            i + 1, server_keys[required[k]]);
        }
    }
    if (v[SRV_NAME] != NULL && dm_conf_get_string(ld, v[SRV_NAME], &s->name)) {
        size_t j = names_first(names, p, s->name, i);
        if (j < i) {
            /* Server j has a name, so its item is a mapping with that key. */
            const yaml_node_t *first = dm_conf_lookup(ld, dm_conf_node(ld, items[j]), "name");
            dm_conf_fail_at(ld, v[SRV_NAME], "pool \"%s\": duplicate server %s (first at line %zu)",
                            p->name, dm_conf_quote(s->name, strlen(s->name), buf, sizeof(buf)),
                            first->start_mark.line + 1);
        }
    }
    if (v[SRV_ADDRESS] != NULL) {
        (void)dm_conf_get_addr(ld, v[SRV_ADDRESS], false, &s->addr);
    }
    if (v[SRV_WEIGHT] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[SRV_WEIGHT], "weight", 1, 256, &s->weight);
    }
    if (v[SRV_CAPACITY] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[SRV_CAPACITY], "capacity", 1, 1000000, &s->capacity);
    }
    if (v[SRV_SESSION_CAPACITY] != NULL) {
        (void)dm_conf_get_double_in(ld, v[SRV_SESSION_CAPACITY], "session_capacity", 0.0,
                                    DM_CONF_SESSION_CAPACITY_MAX, &s->session_capacity);
    }
    if (v[SRV_MAX_CONNS] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[SRV_MAX_CONNS], "max_conns", 0, 1000000, &s->max_conns);
    }
    if (v[SRV_POWER] != NULL) {
        dm_conf_load_server_power(ld, p, s, v[SRV_POWER]);
    }
    dm_conf_server_power_finish(ld, p, s, v[SRV_POWER] != NULL ? v[SRV_POWER] : n);
}

static void
load_servers(struct dm_conf_loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    yaml_node_item_t *items;
    size_t count;

    if (dm_conf_is_null(n) || n->type != YAML_SEQUENCE_NODE) {
        dm_conf_fail_type(ld, n, "a list of servers");
        return;
    }
    items = dm_conf_list_items(ld, n, &count);
    if (count == 0) {
        dm_conf_fail_at(ld, n, "pool \"%s\": expected at least one server", p->name);
        return;
    }
    p->servers = calloc(count, sizeof(*p->servers));
    if (p->servers == NULL) {
        ld->oom = true;
        return;
    }
    p->nservers = count;
    struct names names = { 0 };
    size_t cap = 16;
    while (cap < 2 * count) {
        cap *= 2;
    }
    names.slots = calloc(cap, sizeof(*names.slots));
    if (names.slots == NULL) {
        ld->oom = true; /* the load fails; the names are compared one by one meanwhile */
    } else {
        names.cap = cap;
    }
    for (size_t i = 0; i < count; i++) {
        load_server(ld, p, items, i, &names);
    }
    free(names.slots);
}

static void
check_balance(struct dm_conf_loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    const char *names[32];
    size_t nnames = 0;
    char buf[DM_CONF_SHOW_BUF], list[256];

    if (!dm_conf_get_string(ld, n, &p->balance)) {
        return;
    }
    if (dm_balancer_find(p->balance) != NULL) {
        return;
    }
    for (size_t i = 0; dm_balancer_registry[i] != NULL && nnames < DM_CONF_NKEYS(names); i++) {
        names[nnames++] = dm_balancer_registry[i]->name;
    }
    dm_conf_fail_at(ld, n, "unknown balance policy %s (known: %s)",
                    dm_conf_quote(p->balance, strlen(p->balance), buf, sizeof(buf)),
                    dm_conf_join_names(names, nnames, list, sizeof(list)));
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
load_hash(struct dm_conf_loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    struct dm_conf_hash *h = &p->hash;
    yaml_node_t *v[HASH_N];
    char buf[DM_CONF_SHOW_BUF];
    bool named;
    int key;

    if (!dm_conf_walk(ld, n, true, hash_keys, HASH_N, v)) {
        return;
    }
    if (v[HASH_BALANCE] != NULL) {
        (void)dm_conf_get_double(ld, v[HASH_BALANCE], "balance", 1.0, &h->balance);
    }
    if (v[HASH_KEY] != NULL) {
        key = dm_conf_get_choice(ld, v[HASH_KEY], "hash key", hash_key_names,
                                 DM_CONF_NKEYS(hash_key_names));
        if (key < 0) {
            /* Whether a name belongs here depends on the key: nothing more to check. */
            return;
        }
        h->key = (enum dm_hash_key)key;
    }
    named = h->key == DM_HASH_HEADER || h->key == DM_HASH_COOKIE;
    if (named && v[HASH_NAME] == NULL) {
        dm_conf_fail_at(ld, n, "pool \"%s\": hash: missing required key \"name\" for key \"%s\"",
                        p->name, hash_key_names[h->key]);
    } else if (!named && v[HASH_NAME] != NULL) {
        dm_conf_fail_at(ld, v[HASH_NAME],
                        "hash name is only for key header or cookie (key is \"%s\")",
                        hash_key_names[h->key]);
    } else if (named) {
        const char *s = dm_conf_get_text(ld, v[HASH_NAME], "a string");
        if (s == NULL) {
            return;
        }
        if (!dm_conf_is_token(s)) {
            dm_conf_fail_at(ld, v[HASH_NAME],
                            "bad %s name %s (letters, digits and !#$%%&'*+-.^_`|~ only)",
                            hash_key_names[h->key], dm_conf_quote(s, strlen(s), buf, sizeof(buf)));
            return;
        }
        (void)dm_conf_get_string(ld, v[HASH_NAME], &h->name);
    }
}

enum { AGE_WEIGHT, AGE_HALF_LIFE, AGE_REQUEST_COST, AGE_N };
static const char *const age_keys[AGE_N] = {
    [AGE_WEIGHT] = "weight",
    [AGE_HALF_LIFE] = "half_life",
    [AGE_REQUEST_COST] = "request_cost",
};

static void
load_age(struct dm_conf_loader *ld, struct dm_conf_age *a, const yaml_node_t *n)
{
    yaml_node_t *v[AGE_N];

    if (!dm_conf_walk(ld, n, true, age_keys, AGE_N, v)) {
        return;
    }
    if (v[AGE_WEIGHT] != NULL) {
        (void)dm_conf_get_double(ld, v[AGE_WEIGHT], "weight", 0.0, &a->weight);
    }
    if (v[AGE_HALF_LIFE] != NULL) {
        (void)dm_conf_get_duration(ld, v[AGE_HALF_LIFE], "half_life", false, &a->half_life_ms);
    }
    if (v[AGE_REQUEST_COST] != NULL) {
        (void)dm_conf_get_size(ld, v[AGE_REQUEST_COST], "request_cost", 0, UINT64_C(1) << 40,
                               &a->request_cost);
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
    POOL_POWER,
    POOL_SESSION,
    POOL_MAX_QUEUE,
    POOL_QUEUE_ORDER,
    POOL_PAGE_GAP,
    POOL_PAGE_BOUND,
    POOL_TLS,
    POOL_N
};
static const char *const pool_keys[POOL_N] = {
    [POOL_BALANCE] = "balance",
    [POOL_DRAWS] = "draws",
    [POOL_SERVERS] = "servers",
    [POOL_HEALTH] = "health_check",
    [POOL_PASSIVE] = "passive",
    [POOL_HASH] = "hash",
    [POOL_AGE] = "age",
    [POOL_AFFINITY] = "affinity",
    [POOL_POWER] = "power",
    [POOL_SESSION] = "session",
    [POOL_MAX_QUEUE] = "max_queue",
    [POOL_QUEUE_ORDER] = "queue_order",
    [POOL_PAGE_GAP] = "page_gap",
    [POOL_PAGE_BOUND] = "page_bound",
    [POOL_TLS] = "tls",
};

static const char *const affinity_names[] = { "connection", "request" };
static const char *const queue_order_names[] = { "arrival", "size", "page" };

bool
dm_conf_pool_defaults(struct dm_conf_pool *p)
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
    p->page_gap_ms = 250;
    p->page_bound_ms = 2000; /* SPECweb's bound of a good page */
    /* Right for the default policy; load_pool sets it again once balance is known. */
    p->affinity_connection = false;
    dm_conf_power_defaults(&p->power);
    bool session = dm_conf_session_defaults(&p->session);
    return p->balance != NULL && p->health.path != NULL && session;
}

static void
load_pool(struct dm_conf_loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    yaml_node_t *v[POOL_N];

    if (!dm_conf_walk(ld, n, false, pool_keys, POOL_N, v)) {
        return;
    }
    if (v[POOL_BALANCE] != NULL) {
        check_balance(ld, p, v[POOL_BALANCE]);
    }
    if (v[POOL_DRAWS] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[POOL_DRAWS], "draws", 1, 1000, &p->draws);
    }
    if (v[POOL_MAX_QUEUE] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[POOL_MAX_QUEUE], "max_queue", 0, 10000000, &p->max_queue);
    }
    if (v[POOL_QUEUE_ORDER] != NULL) {
        int o = dm_conf_get_choice(ld, v[POOL_QUEUE_ORDER], "queue_order", queue_order_names,
                                   DM_CONF_NKEYS(queue_order_names));
        if (o >= 0) {
            p->queue_order = (enum dm_queue_order)o;
        }
    }
    static const int page_keys[] = { POOL_PAGE_GAP, POOL_PAGE_BOUND };
    uint64_t *page_ms[] = { &p->page_gap_ms, &p->page_bound_ms };
    for (size_t i = 0; i < DM_CONF_NKEYS(page_keys); i++) {
        const yaml_node_t *k = v[page_keys[i]];
        if (k == NULL) {
            continue;
        }
        if (dm_conf_get_duration(ld, k, pool_keys[page_keys[i]], i == 0, page_ms[i]) &&
            p->queue_order != DM_QO_PAGE) {
            dm_conf_fail_at(ld, k, "%s applies to queue_order: page", pool_keys[page_keys[i]]);
        }
    }
    /* Before the servers: their power blocks take their defaults from it. */
    if (v[POOL_POWER] != NULL) {
        dm_conf_load_pool_power(ld, p, v[POOL_POWER]);
    }
    if (v[POOL_SERVERS] == NULL) {
        dm_conf_fail_at(ld, n, "pool \"%s\": missing required key \"servers\"", p->name);
    } else {
        load_servers(ld, p, v[POOL_SERVERS]);
    }
    if (v[POOL_HEALTH] != NULL) {
        load_health(ld, &p->health, v[POOL_HEALTH]);
    }
    if (v[POOL_PASSIVE] != NULL) {
        load_passive(ld, &p->passive, v[POOL_PASSIVE]);
    }
    if (v[POOL_TLS] != NULL) {
        dm_conf_load_pool_tls(ld, v[POOL_TLS], &p->tls);
    }
    /* hash and age are read whatever the policy: only their own policy looks at them. */
    if (v[POOL_HASH] != NULL) {
        load_hash(ld, p, v[POOL_HASH]);
    }
    if (v[POOL_AGE] != NULL) {
        load_age(ld, &p->age, v[POOL_AGE]);
    }
    /* After the servers: a network's delays name them. */
    if (v[POOL_SESSION] != NULL) {
        dm_conf_load_pool_session(ld, p, v[POOL_SESSION]);
    }
    dm_conf_check_pool_session(ld, p, n);
    /*
     * A policy that decides for a whole connection (AGE charges a page's
     * potential load to the server of its first request) keeps the rest of
     * the connection there by default; the others balance each request.
     */
    const struct dm_balancer_ops *ops = dm_balancer_find(p->balance);
    p->affinity_connection = ops != NULL && (ops->needs & DM_BAL_BINDS_CONNECTIONS) != 0;
    if (v[POOL_AFFINITY] != NULL) {
        int a = dm_conf_get_choice(ld, v[POOL_AFFINITY], "affinity", affinity_names,
                                   DM_CONF_NKEYS(affinity_names));
        if (a >= 0) {
            p->affinity_connection = a == 0;
        }
    }
}

void
dm_conf_load_pools(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    struct dm_conf *c = ld->c;
    size_t count;

    if (!dm_conf_is_mapping(ld, n)) {
        return;
    }
    count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    if (count == 0) {
        dm_conf_fail_at(ld, n, "pools: expected at least one pool");
        return;
    }
    c->pools = calloc(count, sizeof(*c->pools));
    if (c->pools == NULL) {
        ld->oom = true;
        return;
    }
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
        const char *name = dm_conf_pair_key(ld, n, pr, "pool");
        struct dm_conf_pool *p;

        if (name == NULL) {
            continue;
        }
        /* Counted before it is loaded, so routes to a broken pool do not add errors. */
        p = &c->pools[c->npools++];
        p->name = dm_conf_dup_str(ld, name);
        if (p->name == NULL || !dm_conf_pool_defaults(p)) {
            ld->oom = true;
            return;
        }
        load_pool(ld, p, dm_conf_node(ld, pr->value));
    }
}

static int
pool_name_cmp(const void *a, const void *b)
{
    const struct dm_conf_pool_key *x = a, *y = b;
    return dm_conf_cmp_then(strcmp(x->name, y->name), x->i, y->i);
}

/* The index of the pool named name, by a binary search of ld->pool_index
 * (built once the pools are loaded: 40,000 routes to 40,000 pools no
 * longer compare every pair); -1 when there is none, -2 out of memory. */
static long
pool_lookup(struct dm_conf_loader *ld, const char *name)
{
    const struct dm_conf *c = ld->c;
    if (ld->pool_index == NULL || ld->pool_index_n != c->npools) {
        struct dm_conf_pool_key *idx = malloc((c->npools > 0 ? c->npools : 1) * sizeof(*idx));
        if (idx == NULL) {
            return -2;
        }
        for (size_t i = 0; i < c->npools; i++) {
            idx[i] = (struct dm_conf_pool_key){ .name = c->pools[i].name, .i = i };
        }
        qsort(idx, c->npools, sizeof(*idx), pool_name_cmp);
        free(ld->pool_index);
        ld->pool_index = idx;
        ld->pool_index_n = c->npools;
    }
    /* The first of equal names (the lowest index), as a scan in order finds. */
    size_t lo = 0, hi = c->npools;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ld->pool_index[mid].name, name) < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < c->npools && strcmp(ld->pool_index[lo].name, name) == 0 ? (long)ld->pool_index[lo].i
                                                                        : -1;
}

long
dm_conf_find_pool(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    struct dm_conf *c = ld->c;
    const char *name = dm_conf_get_text(ld, n, "a pool name");
    const char **names;
    const char *near;
    char buf[DM_CONF_SHOW_BUF], list[256];

    if (name == NULL) {
        return -1;
    }
    long found = pool_lookup(ld, name);
    if (found == -2) {
        ld->oom = true;
        return -1;
    }
    if (found >= 0) {
        return found;
    }
    if (c->npools == 0) {
        /* The pools are missing or broken, which is reported already. */
        return -1;
    }
    if (ld->nmsgs >= DM_CONF_MSGS_MAX) {
        /* Counted, not shown: no suggestion to look for among every pool. */
        dm_conf_fail_at(ld, n, "unknown pool");
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
        dm_conf_fail_at(ld, n, "unknown pool %s (did you mean \"%s\"?)",
                        dm_conf_quote(name, strlen(name), buf, sizeof(buf)), near);
    } else {
        dm_conf_fail_at(ld, n, "unknown pool %s (pools: %s)",
                        dm_conf_quote(name, strlen(name), buf, sizeof(buf)),
                        dm_conf_join_names(names, c->npools, list, sizeof(list)));
    }
    free(names);
    return -1;
}
