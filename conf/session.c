/*
 * The `session` block of a pool: how `balance: session` places sessions
 * (conf/README.md "session"): where a request's group, game and asked rate
 * come from, the games, the delay limits, the batch window, the client
 * networks and their delays to the pool's servers. The block is read
 * whatever the policy, as hash and age are; a pool whose policy places
 * sessions (DM_BAL_NEEDS_SESSIONS) must have at least one game.
 */
#include "conf/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "balancers/balancer.h"
#include "conf/conf.h"

bool
dm_conf_session_defaults(struct dm_conf_session *s)
{
    *s = (struct dm_conf_session){
        .group_key = DM_HASH_HEADER,
        .group_name = strdup("X-Session-Group"),
        .game_header = strdup("X-Game"),
        .rate_header = strdup("X-Frame-Rate"),
        .tier_header = strdup("X-Rate-Tier"),
        .dmax_ms = HUGE_VAL,
        .dvmax_ms = HUGE_VAL,
        .alpha = 1,
        .anneal_iterations = 4000,
        .anneal_t0 = 0.05,
        .max_sessions = 10000,
        .max_members = 64,
    };
    return s->group_name != NULL && s->game_header != NULL && s->rate_header != NULL &&
           s->tier_header != NULL;
}

void
dm_conf_session_fini(struct dm_conf_session *s)
{
    free(s->group_name);
    free(s->game_header);
    free(s->rate_header);
    free(s->tier_header);
    for (size_t i = 0; i < s->ngames; i++) {
        free(s->games[i].name);
        free(s->games[i].rates);
    }
    free(s->games);
    for (size_t i = 0; i < s->nnetworks; i++) {
        free(s->networks[i].delay_ms);
    }
    free(s->networks);
    *s = (struct dm_conf_session){ 0 };
}

/* A header or cookie name into *out (replaced); false after reporting. */
static bool
get_name(struct dm_conf_loader *ld, const yaml_node_t *n, const char *what, char **out)
{
    char buf[DM_CONF_SHOW_BUF];
    const char *s = dm_conf_get_text(ld, n, "a string");
    if (s == NULL) {
        return false;
    }
    if (!dm_conf_is_token(s)) {
        dm_conf_fail_at(ld, n, "bad %s name %s (letters, digits and !#$%%&'*+-.^_`|~ only)", what,
                        dm_conf_quote(s, strlen(s), buf, sizeof(buf)));
        return false;
    }
    return dm_conf_get_string(ld, n, out);
}

enum { GR_KEY, GR_NAME, GR_N };
static const char *const group_keys[GR_N] = { [GR_KEY] = "key", [GR_NAME] = "name" };
static const char *const group_key_names[] = { "header", "cookie" };

static void
load_group(struct dm_conf_loader *ld, struct dm_conf_session *s, const yaml_node_t *n)
{
    yaml_node_t *v[GR_N];
    if (!dm_conf_walk(ld, n, true, group_keys, GR_N, v)) {
        return;
    }
    if (v[GR_KEY] != NULL) {
        int k = dm_conf_get_choice(ld, v[GR_KEY], "group key", group_key_names,
                                   DM_CONF_NKEYS(group_key_names));
        if (k >= 0) {
            s->group_key = k == 0 ? DM_HASH_HEADER : DM_HASH_COOKIE;
        }
    }
    if (v[GR_NAME] != NULL) {
        (void)get_name(ld, v[GR_NAME], s->group_key == DM_HASH_COOKIE ? "cookie" : "header",
                       &s->group_name);
    }
}

enum { GM_FRAME_LOAD, GM_RATES, GM_RATE, GM_N };
static const char *const game_keys[GM_N] = {
    [GM_FRAME_LOAD] = "frame_load",
    [GM_RATES] = "rates",
    [GM_RATE] = "rate",
};

/* The rate list of a game: 1..DM_CONF_RATES_MAX numbers > 0, strictly increasing. */
static void
load_rates(struct dm_conf_loader *ld, struct dm_conf_game *g, const yaml_node_t *n)
{
    size_t count;
    if (n->type != YAML_SEQUENCE_NODE) {
        dm_conf_fail_type(ld, n, "a list of frame rates");
        return;
    }
    yaml_node_item_t *items = dm_conf_list_items(ld, n, &count);
    if (count == 0 || count > DM_CONF_RATES_MAX) {
        dm_conf_fail_at(ld, n, "game \"%s\": expected 1 to %d rates, got %zu", g->name,
                        DM_CONF_RATES_MAX, count);
        return;
    }
    double *r = calloc(count, sizeof(*r));
    if (r == NULL) {
        ld->oom = true;
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item = dm_conf_node(ld, items[i]);
        if (!dm_conf_get_double_in(ld, item, "a rate", 0.0, DM_CONF_RATE_MAX, &r[i])) {
            free(r);
            return;
        }
        if (r[i] == 0) {
            dm_conf_fail_at(ld, item, "a rate must be above 0");
            free(r);
            return;
        }
        if (i > 0 && !(r[i] > r[i - 1])) {
            dm_conf_fail_at(ld, item, "rates must be increasing, got %g after %g", r[i], r[i - 1]);
            free(r);
            return;
        }
    }
    g->rates = r;
    g->nrates = count;
}

static void
load_game(struct dm_conf_loader *ld, struct dm_conf_game *g, const yaml_node_t *n)
{
    yaml_node_t *v[GM_N];
    if (!dm_conf_walk(ld, n, false, game_keys, GM_N, v)) {
        return;
    }
    static const size_t required[] = { GM_FRAME_LOAD, GM_RATES };
    for (size_t k = 0; k < DM_CONF_NKEYS(required); k++) {
        if (v[required[k]] == NULL) {
            dm_conf_fail_at(ld, n, "game \"%s\": missing required key \"%s\"", g->name,
                            game_keys[required[k]]);
        }
    }
    if (v[GM_FRAME_LOAD] != NULL) {
        (void)dm_conf_get_double_in(ld, v[GM_FRAME_LOAD], "frame_load", 0.0, DM_CONF_FRAME_LOAD_MAX,
                                    &g->frame_load);
    }
    if (v[GM_RATES] != NULL) {
        load_rates(ld, g, v[GM_RATES]);
    }
    g->rate = g->nrates > 0 ? g->nrates - 1 : 0;
    if (v[GM_RATE] != NULL && g->nrates > 0) {
        double want;
        if (!dm_conf_get_double(ld, v[GM_RATE], "rate", 0.0, &want)) {
            return;
        }
        for (g->rate = 0; g->rate < g->nrates && g->rates[g->rate] != want; g->rate++) {
        }
        if (g->rate == g->nrates) {
            dm_conf_fail_at(ld, v[GM_RATE], "game \"%s\": rate %g is not one of its rates", g->name,
                            want);
            g->rate = g->nrates - 1;
        }
    }
}

static void
load_games(struct dm_conf_loader *ld, struct dm_conf_session *s, const yaml_node_t *n)
{
    if (!dm_conf_is_mapping(ld, n)) {
        return;
    }
    size_t count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    s->games = calloc(count > 0 ? count : 1, sizeof(*s->games));
    if (s->games == NULL) {
        ld->oom = true;
        return;
    }
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
        const char *name = dm_conf_pair_key(ld, n, pr, "game");
        if (name == NULL) {
            continue;
        }
        struct dm_conf_game *g = &s->games[s->ngames];
        g->name = dm_conf_dup_str(ld, name);
        if (g->name == NULL) {
            return;
        }
        s->ngames++;
        load_game(ld, g, dm_conf_node(ld, pr->value));
    }
}

static void
find_default_game(struct dm_conf_loader *ld, struct dm_conf_session *s, const yaml_node_t *n)
{
    char buf[DM_CONF_SHOW_BUF], list[256];
    const char *name = dm_conf_get_text(ld, n, "a game name");
    if (name == NULL || s->ngames == 0 || ld->oom) {
        return; /* no games is reported where they are missing; a game may be lost to OOM */
    }
    const char **names = calloc(s->ngames, sizeof(*names));
    if (names == NULL) {
        ld->oom = true;
        return;
    }
    for (size_t i = 0; i < s->ngames; i++) {
        names[i] = s->games[i].name;
        if (strcmp(s->games[i].name, name) == 0) {
            s->default_game = i;
            free(names);
            return;
        }
    }
    dm_conf_fail_at(ld, n, "unknown game %s (games: %s)",
                    dm_conf_quote(name, strlen(name), buf, sizeof(buf)),
                    dm_conf_join_names(names, s->ngames, list, sizeof(list)));
    free(names);
}

enum { AN_ITERATIONS, AN_T0, AN_N };
static const char *const anneal_keys[AN_N] = { [AN_ITERATIONS] = "iterations", [AN_T0] = "t0" };

static void
load_anneal(struct dm_conf_loader *ld, struct dm_conf_session *s, const yaml_node_t *n)
{
    yaml_node_t *v[AN_N];
    if (!dm_conf_walk(ld, n, true, anneal_keys, AN_N, v)) {
        return;
    }
    if (v[AN_ITERATIONS] != NULL) {
        (void)dm_conf_get_uint(ld, v[AN_ITERATIONS], "iterations", 0, 1000000,
                               &s->anneal_iterations);
    }
    if (v[AN_T0] != NULL) {
        (void)dm_conf_get_double(ld, v[AN_T0], "t0", 0.0, &s->anneal_t0);
    }
}

/* A delay limit: a duration, in whole milliseconds. */
static void
get_limit(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, double *out)
{
    uint64_t ms;
    if (dm_conf_get_duration(ld, n, key, true, &ms)) {
        *out = (double)ms;
    }
}

enum { NW_PREFIX, NW_DELAYS, NW_N };
static const char *const network_keys[NW_N] = { [NW_PREFIX] = "prefix", [NW_DELAYS] = "delays" };

/* The delays of a network: a mapping from server name to duration. */
static void
load_delays(struct dm_conf_loader *ld, const struct dm_conf_pool *p, struct dm_conf_network *nw,
            const yaml_node_t *n)
{
    char buf[DM_CONF_SHOW_BUF], list[256];
    if (!dm_conf_is_mapping(ld, n) || ld->oom || p->nservers == 0) {
        return; /* without its servers (reported already) no name can be checked */
    }
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
        const char *name = dm_conf_pair_key(ld, n, pr, "server");
        if (name == NULL) {
            continue;
        }
        size_t j = 0;
        while (j < p->nservers &&
               (p->servers[j].name == NULL || strcmp(p->servers[j].name, name))) {
            j++;
        }
        if (j == p->nservers) {
            const char *names[64];
            size_t k = 0;
            for (size_t i = 0; i < p->nservers && k < DM_CONF_NKEYS(names); i++) {
                if (p->servers[i].name != NULL) {
                    names[k++] = p->servers[i].name;
                }
            }
            dm_conf_fail_at(ld, dm_conf_node(ld, pr->key),
                            "unknown server %s in pool \"%s\" (servers: %s)",
                            dm_conf_quote(name, strlen(name), buf, sizeof(buf)), p->name,
                            dm_conf_join_names(names, k, list, sizeof(list)));
            continue;
        }
        uint64_t ms;
        if (dm_conf_get_duration(ld, dm_conf_node(ld, pr->value), "delay", true, &ms)) {
            nw->delay_ms[j] = (double)ms;
        }
    }
}

static void
load_networks(struct dm_conf_loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    struct dm_conf_session *s = &p->session;
    char buf[DM_CONF_SHOW_BUF];
    size_t count;
    if (n->type != YAML_SEQUENCE_NODE) {
        dm_conf_fail_type(ld, n, "a list of networks");
        return;
    }
    yaml_node_item_t *items = dm_conf_list_items(ld, n, &count);
    if (count > DM_CONF_NETWORKS_MAX ||
        (uint64_t)count * p->nservers > DM_CONF_NETWORK_DELAYS_MAX) {
        /* Each network holds a delay for every server of the pool, in the
         * config and in each worker's placement: 20,000 of each was 3 GB. */
        dm_conf_fail_at(ld, n,
                        "%zu networks with %zu server%s: at most %u networks, and %u "
                        "delays (networks times servers), in a pool",
                        count, p->nservers, p->nservers == 1 ? "" : "s", DM_CONF_NETWORKS_MAX,
                        DM_CONF_NETWORK_DELAYS_MAX);
        return;
    }
    s->networks = calloc(count > 0 ? count : 1, sizeof(*s->networks));
    const yaml_node_t **at = calloc(count > 0 ? count : 1, sizeof(*at));
    if (s->networks == NULL || at == NULL) {
        free(at);
        ld->oom = true;
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item = dm_conf_node(ld, items[i]);
        yaml_node_t *v[NW_N];
        if (!dm_conf_walk(ld, item, false, network_keys, NW_N, v)) {
            continue;
        }
        if (v[NW_PREFIX] == NULL) {
            dm_conf_fail_at(ld, item, "network %zu: missing required key \"prefix\"", i + 1);
            continue;
        }
        struct dm_conf_network *nw = &s->networks[s->nnetworks];
        const char *text = dm_conf_get_text(ld, v[NW_PREFIX], "a prefix");
        const char *why = NULL;
        if (text == NULL) {
            continue;
        }
        if (dm_conf_parse_prefix(text, &nw->prefix, &why) < 0) {
            dm_conf_fail_at(ld, v[NW_PREFIX], "bad prefix %s (%s)",
                            dm_conf_quote(text, strlen(text), buf, sizeof(buf)), why);
            continue;
        }
        bool dup = false;
        for (size_t j = 0; j < s->nnetworks && !dup; j++) {
            const struct dm_conf_prefix *q = &s->networks[j].prefix;
            if (q->family == nw->prefix.family && q->bits == nw->prefix.bits &&
                memcmp(q->addr, nw->prefix.addr, sizeof(q->addr)) == 0) {
                dm_conf_fail_at(ld, v[NW_PREFIX], "duplicate prefix %s (first at line %zu)",
                                dm_conf_quote(text, strlen(text), buf, sizeof(buf)),
                                at[j]->start_mark.line + 1);
                dup = true;
            }
        }
        if (dup) {
            continue;
        }
        nw->delay_ms = calloc(p->nservers > 0 ? p->nservers : 1, sizeof(*nw->delay_ms));
        if (nw->delay_ms == NULL) {
            ld->oom = true;
            break;
        }
        for (size_t j = 0; j < p->nservers; j++) {
            nw->delay_ms[j] = -1; /* not given: the measured connect time */
        }
        at[s->nnetworks++] = v[NW_PREFIX];
        if (v[NW_DELAYS] != NULL) {
            load_delays(ld, p, nw, v[NW_DELAYS]);
        }
    }
    free(at);
}

enum {
    SS_GROUP,
    SS_GAME_HEADER,
    SS_RATE_HEADER,
    SS_TIER_HEADER,
    SS_GAMES,
    SS_DEFAULT_GAME,
    SS_DMAX,
    SS_DVMAX,
    SS_WINDOW,
    SS_ALPHA,
    SS_ANNEAL,
    SS_MAX_SESSIONS,
    SS_MAX_MEMBERS,
    SS_NETWORKS,
    SS_N
};
static const char *const session_keys[SS_N] = {
    [SS_GROUP] = "group",
    [SS_GAME_HEADER] = "game_header",
    [SS_RATE_HEADER] = "rate_header",
    [SS_TIER_HEADER] = "tier_header",
    [SS_GAMES] = "games",
    [SS_DEFAULT_GAME] = "default_game",
    [SS_DMAX] = "dmax",
    [SS_DVMAX] = "dvmax",
    [SS_WINDOW] = "window",
    [SS_ALPHA] = "alpha",
    [SS_ANNEAL] = "anneal",
    [SS_MAX_SESSIONS] = "max_sessions",
    [SS_MAX_MEMBERS] = "max_members",
    [SS_NETWORKS] = "networks",
};

void
dm_conf_load_pool_session(struct dm_conf_loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    struct dm_conf_session *s = &p->session;
    yaml_node_t *v[SS_N];
    if (!dm_conf_walk(ld, n, true, session_keys, SS_N, v)) {
        return;
    }
    if (v[SS_GROUP] != NULL) {
        load_group(ld, s, v[SS_GROUP]);
    }
    if (v[SS_GAME_HEADER] != NULL) {
        (void)get_name(ld, v[SS_GAME_HEADER], "header", &s->game_header);
    }
    if (v[SS_RATE_HEADER] != NULL) {
        (void)get_name(ld, v[SS_RATE_HEADER], "header", &s->rate_header);
    }
    if (v[SS_TIER_HEADER] != NULL && get_name(ld, v[SS_TIER_HEADER], "header", &s->tier_header)) {
        /* dimmer writes it: never a field the request is framed by, nor one it reads. */
        const char *t = s->tier_header;
        if (dm_conf_header_is_ours(t)) {
            dm_conf_fail_at(ld, v[SS_TIER_HEADER],
                            "tier_header \"%s\" is a field dimmer frames requests by or writes "
                            "itself (" DM_CONF_OURS_TEXT ")",
                            t);
        }
    }
    const char *t = s->tier_header;
    const yaml_node_t *at = v[SS_TIER_HEADER] != NULL ? v[SS_TIER_HEADER] : n;
    if (t != NULL && ((s->game_header != NULL && strcasecmp(t, s->game_header) == 0) ||
                      (s->rate_header != NULL && strcasecmp(t, s->rate_header) == 0) ||
                      (s->group_key == DM_HASH_HEADER && s->group_name != NULL &&
                       strcasecmp(t, s->group_name) == 0))) {
        dm_conf_fail_at(ld, at,
                        "tier_header \"%s\" is also a header the session is read from (group, "
                        "game_header or rate_header): dimmer replaces it",
                        t);
    }
    if (v[SS_GAMES] != NULL) {
        load_games(ld, s, v[SS_GAMES]);
    }
    if (v[SS_DEFAULT_GAME] != NULL) {
        find_default_game(ld, s, v[SS_DEFAULT_GAME]);
    }
    if (v[SS_DMAX] != NULL) {
        get_limit(ld, v[SS_DMAX], "dmax", &s->dmax_ms);
    }
    if (v[SS_DVMAX] != NULL) {
        get_limit(ld, v[SS_DVMAX], "dvmax", &s->dvmax_ms);
    }
    if (v[SS_WINDOW] != NULL) {
        (void)dm_conf_get_duration(ld, v[SS_WINDOW], "window", true, &s->window_ms);
    }
    if (v[SS_ALPHA] != NULL) {
        (void)dm_conf_get_double(ld, v[SS_ALPHA], "alpha", 0.0, &s->alpha);
    }
    if (v[SS_ANNEAL] != NULL) {
        load_anneal(ld, s, v[SS_ANNEAL]);
    }
    if (v[SS_MAX_SESSIONS] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[SS_MAX_SESSIONS], "max_sessions", 1, 1000000,
                                   &s->max_sessions);
    }
    if (v[SS_MAX_MEMBERS] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[SS_MAX_MEMBERS], "max_members", 1, 65535, &s->max_members);
    }
    if (v[SS_NETWORKS] != NULL) {
        load_networks(ld, p, v[SS_NETWORKS]);
    }
}

void
dm_conf_check_pool_session(struct dm_conf_loader *ld, const struct dm_conf_pool *p,
                           const yaml_node_t *pool)
{
    const struct dm_balancer_ops *ops = dm_balancer_find(p->balance);
    /* Games that were given but refused were reported each: not again as none. */
    const yaml_node_t *sn = dm_conf_lookup(ld, pool, "session");
    const yaml_node_t *gn =
        sn != NULL && sn->type == YAML_MAPPING_NODE ? dm_conf_lookup(ld, sn, "games") : NULL;
    bool given = gn != NULL && gn->type == YAML_MAPPING_NODE &&
                 gn->data.mapping.pairs.top > gn->data.mapping.pairs.start;
    if (ops != NULL && (ops->needs & DM_BAL_NEEDS_SESSIONS) && p->session.ngames == 0 && !given &&
        !ld->oom) {
        dm_conf_fail_at(ld, pool, "pool \"%s\": balance %s needs session.games (at least one game)",
                        p->name, p->balance);
    }
}
