/*
 * The session placers (proxy/session.h): balancers/sessions.h's table
 * behind a mutex, with a copy of the pool's session configuration.
 *
 * A client's delay to a server (its row, balancers/sessions.h) comes from
 * the longest configured network prefix that holds the client's address,
 * when that network gives a delay to that server; otherwise from the
 * proxy's measured connect time to the server's host (dm_host.connect_us),
 * which is the proxy's own distance to the server, not the client's: the
 * right figure when the clients are near the proxy, and the same for
 * every such client, so such a group's spread (C4) is 0. A server that is
 * down, asleep or draining, or that this request has tried already, gets
 * NaN, which the allocator reads as "not this server".
 *
 * The batch window: a pass runs one window after the first session that
 * started waiting since the last pass (so the clients of a group that
 * arrive within a window of its first are placed with it), on the control
 * thread's timer (dm_placers_run); the workers are then told to look at
 * their waiting requests again.
 */
#include "proxy/session.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "balancers/hash.h"
#include "balancers/hosts.h"
#include "balancers/rng.h"
#include "balancers/servers.h"
#include "balancers/sessions.h"
#include "conf/conf.h"
#include "proxy/internal.h"
#include "proxy/peers.h"
#include "proxy/sbuf.h"

_Static_assert(DM_CONF_RATES_MAX <= DM_SESSIONS_RATES_MAX, "a game's rates fit a group");

struct pgame {
    char *name;
    size_t name_len;
    double frame_load;
    double rates[DM_SESSIONS_RATES_MAX];
    size_t nrates;
    size_t rate; /* the asked rate when a request names none */
};

struct pnet {
    struct dm_conf_prefix prefix;
    double *delay_ms; /* per server; < 0: the measured connect time */
};

/* One configuration of a placer, copied from the pool's. */
struct pconf {
    struct pgame *games;
    size_t ngames, default_game;
    struct pnet *nets;
    size_t nnets;
    struct dm_host **hosts; /* per server */
    char **names;           /* per server, for /stats */
    size_t n;
    uint64_t window_us;
    struct dm_sessions_conf sc;
};

struct dm_placer {
    uv_mutex_t lock; /* everything below but next and name */
    struct dm_placer *next;
    char *name;
    struct dm_sessions *t;
    struct pconf *cf;
    struct dm_rng rng;
    uint64_t next_pass_us;
    atomic_size_t waiting; /* dm_sessions_untaken(t), for the control timer without the lock */
    /* The control thread's, without the lock: */
    struct dm_placers *r;
    uv_work_t work;                /* the pass out on the thread pool */
    struct dm_sessions_pass *pass; /* NULL: none is out */
    bool flush;                    /* when it is back, run the groups it left waiting */
};

struct dm_placers {
    struct dm_placer *list;
    uv_loop_t *loop; /* NULL: passes run in dm_placers_run() */
    void (*decided)(void *arg);
    void *arg;
};

/* ---- configurations ---- */

static void
pconf_free(struct pconf *cf)
{
    if (cf == NULL) {
        return;
    }
    for (size_t i = 0; i < cf->ngames; i++) {
        free(cf->games[i].name);
    }
    free(cf->games);
    for (size_t i = 0; i < cf->nnets; i++) {
        free(cf->nets[i].delay_ms);
    }
    free(cf->nets);
    for (size_t i = 0; i < cf->n; i++) {
        free(cf->names[i]);
    }
    free(cf->names);
    free(cf->hosts);
    free(cf);
}

/* The annealing schedule of a batch pass: T falls 1000-fold in 100 geometric steps. */
static struct dm_alloc_sa
schedule(uint64_t iterations, double t0)
{
    return (struct dm_alloc_sa){
        .iterations = iterations,
        .t0 = t0,
        .cooling = pow(1e-3, 1.0 / 100),
        .steps = iterations / 100 > 0 ? iterations / 100 : 1,
    };
}

static struct pconf *
pconf_make(const struct dm_conf_pool *pc, const struct dm_servers *sv)
{
    const struct dm_conf_session *s = &pc->session;
    struct pconf *cf = calloc(1, sizeof(*cf));
    if (cf == NULL) {
        return NULL;
    }
    size_t n = sv->n;
    cf->games = calloc(s->ngames > 0 ? s->ngames : 1, sizeof(*cf->games));
    cf->nets = calloc(s->nnetworks > 0 ? s->nnetworks : 1, sizeof(*cf->nets));
    cf->hosts = calloc(n > 0 ? n : 1, sizeof(*cf->hosts));
    cf->names = calloc(n > 0 ? n : 1, sizeof(*cf->names));
    if (cf->games == NULL || cf->nets == NULL || cf->hosts == NULL || cf->names == NULL) {
        goto fail;
    }
    for (size_t i = 0; i < s->ngames; i++) {
        const struct dm_conf_game *g = &s->games[i];
        struct pgame *pg = &cf->games[cf->ngames];
        pg->name = strdup(g->name);
        if (pg->name == NULL) {
            goto fail;
        }
        cf->ngames++;
        pg->name_len = strlen(g->name);
        pg->frame_load = g->frame_load;
        pg->nrates = g->nrates;
        memcpy(pg->rates, g->rates, g->nrates * sizeof(double));
        pg->rate = g->rate;
    }
    cf->default_game = s->default_game;
    for (size_t i = 0; i < s->nnetworks; i++) {
        struct pnet *pn = &cf->nets[cf->nnets];
        pn->delay_ms = calloc(n > 0 ? n : 1, sizeof(double));
        if (pn->delay_ms == NULL) {
            goto fail;
        }
        cf->nnets++;
        pn->prefix = s->networks[i].prefix;
        memcpy(pn->delay_ms, s->networks[i].delay_ms, n * sizeof(double));
    }
    for (size_t j = 0; j < n; j++) {
        cf->names[j] = strdup(pc->servers[j].name);
        if (cf->names[j] == NULL) {
            goto fail;
        }
        cf->n++;
        cf->hosts[j] = sv->s[j].host;
    }
    cf->window_us = s->window_ms * 1000;
    cf->sc = (struct dm_sessions_conf){
        .dmax_ms = s->dmax_ms,
        .dvmax_ms = s->dvmax_ms,
        .batch = s->window_ms > 0,
        .max_groups = s->max_sessions,
        .max_members = s->max_members,
        .solve = { .alpha = s->alpha,
                   .balance = schedule(s->anneal_iterations, s->anneal_t0),
                   .rates = schedule(s->anneal_iterations, s->anneal_t0) },
        .key = dm_client_hash_key, /* group ids are the client's choice */
    };
    return cf;
fail:
    pconf_free(cf);
    return NULL;
}

/* The network of a client: the longest prefix that holds its address, or NULL. */
static const struct pnet *
net_of(const struct pconf *cf, const struct sockaddr *sa)
{
    const struct pnet *best = NULL;
    for (size_t i = 0; i < cf->nnets; i++) {
        const struct pnet *pn = &cf->nets[i];
        if ((best == NULL || pn->prefix.bits > best->prefix.bits) &&
            dm_conf_prefix_match(&pn->prefix, sa)) {
            best = pn;
        }
    }
    return best;
}

static double
delay_to(const struct pconf *cf, const struct pnet *net, size_t s)
{
    if (net != NULL && net->delay_ms[s] >= 0) {
        return net->delay_ms[s];
    }
    return (double)atomic_load_explicit(&cf->hosts[s]->connect_us, memory_order_relaxed) / 1000.0;
}

/* The row callback of a reconfiguration: arg is the new configuration. */
static void
row_again(void *arg, const void *client, size_t len, double *row)
{
    const struct pconf *cf = arg;
    struct sockaddr_storage ss = { 0 };
    memcpy(&ss, client, len < sizeof(ss) ? len : sizeof(ss));
    const struct pnet *net = len > 0 ? net_of(cf, (const struct sockaddr *)&ss) : NULL;
    for (size_t s = 0; s < cf->n; s++) {
        row[s] = delay_to(cf, net, s);
    }
}

static bool
was_tried(const struct dm_placer_ask *ask, const struct dm_host *h)
{
    if (ask->tried == NULL || ask->tried_sv == NULL) {
        return false;
    }
    for (size_t j = 0; j < ask->tried_sv->n; j++) {
        if ((ask->tried[j / 8] >> (j % 8) & 1) && ask->tried_sv->s[j].host == h) {
            return true;
        }
    }
    return false;
}

/* ---- the registry ---- */

struct dm_placers *
dm_placers_create(void)
{
    return calloc(1, sizeof(struct dm_placers));
}

static void
placer_free(struct dm_placer *pl)
{
    dm_sessions_destroy(pl->t);
    pconf_free(pl->cf);
    uv_mutex_destroy(&pl->lock);
    free(pl->name);
    free(pl);
}

void
dm_placers_destroy(struct dm_placers *r)
{
    if (r == NULL) {
        return;
    }
    struct dm_placer *pl = r->list;
    while (pl != NULL) {
        struct dm_placer *next = pl->next;
        placer_free(pl);
        pl = next;
    }
    free(r);
}

/* The table's servers for cf: capacities from the pool, keyed by host. */
static struct dm_sessions_server *
servers_of(const struct dm_conf_pool *pc, const struct pconf *cf)
{
    struct dm_sessions_server *ss = calloc(cf->n > 0 ? cf->n : 1, sizeof(*ss));
    for (size_t j = 0; ss != NULL && j < cf->n; j++) {
        ss[j] = (struct dm_sessions_server){ .capacity = pc->servers[j].session_capacity,
                                             .key = cf->hosts[j] };
    }
    return ss;
}

struct dm_placer *
dm_placers_configure(struct dm_placers *r, const struct dm_conf_pool *pc,
                     const struct dm_servers *sv)
{
    struct dm_placer *pl = r->list;
    while (pl != NULL && strcmp(pl->name, pc->name) != 0) {
        pl = pl->next;
    }
    struct pconf *cf = pconf_make(pc, sv);
    struct dm_sessions_server *ss = cf != NULL ? servers_of(pc, cf) : NULL;
    if (ss == NULL) {
        pconf_free(cf);
        return NULL;
    }
    if (pl != NULL) {
        uv_mutex_lock(&pl->lock);
        int rc = dm_sessions_configure(pl->t, &cf->sc, ss, cf->n, row_again, cf);
        if (rc == 0) {
            struct pconf *old = pl->cf;
            pl->cf = cf;
            cf = old;
            atomic_store(&pl->waiting, dm_sessions_untaken(pl->t));
        }
        uv_mutex_unlock(&pl->lock);
        pconf_free(cf); /* the old one, or the new one that did not take */
        free(ss);
        return rc == 0 ? pl : NULL;
    }
    pl = calloc(1, sizeof(*pl));
    if (pl == NULL || (pl->name = strdup(pc->name)) == NULL) {
        goto fail;
    }
    pl->t = dm_sessions_create(&cf->sc, ss, cf->n);
    if (pl->t == NULL || uv_mutex_init(&pl->lock) != 0) {
        dm_sessions_destroy(pl->t);
        goto fail;
    }
    free(ss);
    pl->cf = cf;
    /* The annealing's draws: any fixed seed will do, one per pool. */
    dm_rng_init(&pl->rng, dm_hash_bytes(pc->name, strlen(pc->name)));
    atomic_init(&pl->waiting, 0);
    pl->next = r->list;
    r->list = pl;
    return pl;
fail:
    if (pl != NULL) {
        free(pl->name);
        free(pl);
    }
    free(ss);
    pconf_free(cf);
    return NULL;
}

void
dm_placers_set_loop(struct dm_placers *r, uv_loop_t *loop, void (*decided)(void *arg), void *arg)
{
    r->loop = loop;
    r->decided = decided;
    r->arg = arg;
}

/* Takes pl's pass when its window has ended (or at once with now_us
 * UINT64_MAX), under the lock; NULL when there is none to run. */
static struct dm_sessions_pass *
pass_take(struct dm_placer *pl, uint64_t now_us)
{
    struct dm_sessions_pass *pass = NULL;
    uv_mutex_lock(&pl->lock);
    if (now_us >= pl->next_pass_us) {
        (void)dm_sessions_pass_take(pl->t, &pass); /* no memory: the next tick tries again */
        atomic_store(&pl->waiting, dm_sessions_untaken(pl->t));
    }
    uv_mutex_unlock(&pl->lock);
    return pass;
}

/* Applies pl's solved pass under the lock; true when it decided groups. */
static bool
pass_commit(struct dm_placer *pl, struct dm_sessions_pass *pass, uint64_t now_us)
{
    uv_mutex_lock(&pl->lock);
    bool none_new = dm_sessions_untaken(pl->t) == 0;
    int n = dm_sessions_pass_commit(pl->t, pass);
    if (n < 0 && none_new) {
        pl->next_pass_us = now_us; /* a reload came meanwhile: its groups waited their window */
    }
    atomic_store(&pl->waiting, dm_sessions_untaken(pl->t));
    uv_mutex_unlock(&pl->lock);
    dm_sessions_pass_free(pass);
    return n > 0;
}

/* A pass from take to commit on this thread. */
static bool
pass_here(struct dm_placer *pl, uint64_t now_us)
{
    struct dm_sessions_pass *pass = pass_take(pl, now_us);
    if (pass == NULL) {
        return false;
    }
    (void)dm_sessions_pass_solve(pass, &pl->rng);
    return pass_commit(pl, pass, now_us);
}

/* The thread pool's: the solve, on the pass's own copy (and pl's generator,
 * which only passes use, one at a time). */
static void
on_pass_work(uv_work_t *w)
{
    struct dm_placer *pl = w->data;
    (void)dm_sessions_pass_solve(pl->pass, &pl->rng);
}

static void
on_pass_done(uv_work_t *w, int status)
{
    (void)status; /* never cancelled */
    struct dm_placer *pl = w->data;
    struct dm_sessions_pass *pass = pl->pass;
    pl->pass = NULL;
    bool decided = pass_commit(pl, pass, dm_mono_us());
    if (pl->flush) {
        /* A stop came while it was out: the groups that arrived since go now. */
        pl->flush = false;
        decided = pass_here(pl, UINT64_MAX) || decided;
    }
    if (decided && pl->r->decided != NULL) {
        pl->r->decided(pl->r->arg);
    }
}

bool
dm_placers_run(struct dm_placers *r, uint64_t now_us)
{
    bool decided = false;
    for (struct dm_placer *pl = r != NULL ? r->list : NULL; pl != NULL; pl = pl->next) {
        if (pl->pass != NULL) {
            /* One pass at a time: the next waits for this one to come back. */
            pl->flush = pl->flush || now_us == UINT64_MAX;
            continue;
        }
        if (atomic_load(&pl->waiting) == 0) {
            continue;
        }
        if (r->loop == NULL || now_us == UINT64_MAX) {
            decided = pass_here(pl, now_us) || decided;
            continue;
        }
        /* The solve, bounded by the iterations but long enough to matter
         * (seconds at the most), runs on the thread pool: arrivals and
         * departures go on meanwhile, and so does this thread. */
        pl->pass = pass_take(pl, now_us);
        if (pl->pass == NULL) {
            continue;
        }
        pl->r = r;
        pl->work.data = pl;
        if (uv_queue_work(r->loop, &pl->work, on_pass_work, on_pass_done) < 0) {
            (void)dm_sessions_pass_solve(pl->pass, &pl->rng);
            decided = pass_commit(pl, pl->pass, now_us) || decided;
            pl->pass = NULL;
        }
    }
    return decided;
}

/* ---- sessions ---- */

/* The answer for rc of the table, under the lock. */
static int
answer(struct dm_placer *pl, int rc, const struct dm_sessions_place *place, const double *row,
       struct dm_placer_answer *ans)
{
    const struct pconf *cf = pl->cf;
    if (rc == DM_SESSIONS_PLACED) {
        ans->host = cf->hosts[place->server];
        ans->rate = place->rate;
        ans->lowered = place->lowered;
        return rc;
    }
    if (rc == DM_SESSIONS_WAITING) {
        return rc;
    }
    ans->status = 503;
    switch (rc) {
    case -ENOSPC:
        ans->reason = "no server can take the session (session_capacity, dmax, dvmax)";
        break;
    case -ERANGE:
        ans->reason = row != NULL && place->server >= 0 && isnan(row[place->server])
                          ? "the session group's server is unavailable"
                          : "client out of reach of its session group's server (dmax, dvmax)";
        break;
    case -ENXIO:
        ans->reason = "the session group's server left the pool";
        break;
    case -EMLINK:
        ans->reason = "session group full (session.max_members)";
        break;
    case -EUSERS:
        ans->reason = "too many session groups (session.max_sessions)";
        break;
    case -EINVAL:
        ans->status = 400;
        ans->reason = "bad session request";
        break;
    default:
        ans->reason = "out of memory";
        break;
    }
    return rc;
}

/* The index of the game named (name, len), the default for NULL; -1 when unknown. */
static long
game_of(const struct pconf *cf, const char *name, size_t len)
{
    if (name == NULL) {
        return cf->ngames > 0 ? (long)cf->default_game : -1;
    }
    for (size_t i = 0; i < cf->ngames; i++) {
        if (cf->games[i].name_len == len && memcmp(cf->games[i].name, name, len) == 0) {
            return (long)i;
        }
    }
    return -1;
}

int
dm_placer_join(struct dm_placer *pl, const struct dm_placer_ask *ask,
               struct dm_sessions_member **ticket, struct dm_placer_answer *ans)
{
    *ans = (struct dm_placer_answer){ 0 };
    if (ask->group_len > DM_SESSIONS_ID_MAX) {
        ans->status = 400;
        ans->reason = "session group id longer than 128 bytes";
        return -EINVAL;
    }
    uv_mutex_lock(&pl->lock);
    const struct pconf *cf = pl->cf;
    long gi = game_of(cf, ask->game, ask->game_len);
    if (gi < 0) {
        uv_mutex_unlock(&pl->lock);
        ans->status = 400;
        ans->reason = "unknown game";
        return -EINVAL;
    }
    const struct pgame *g = &cf->games[gi];
    size_t want = g->rate;
    if (ask->rate >= 0) {
        /* The highest listed rate at or below the asked one (the lowest below them all). */
        for (want = 0; want + 1 < g->nrates && g->rates[want + 1] <= ask->rate; want++) {
        }
    }
    double stack[32];
    double *row = cf->n <= 32 ? stack : malloc(cf->n * sizeof(double));
    int rc = -ENOMEM;
    struct dm_sessions_place place = { .server = -1 };
    if (row != NULL) {
        const struct pnet *net = net_of(cf, ask->client);
        for (size_t s = 0; s < cf->n; s++) {
            const struct dm_host *h = cf->hosts[s];
            row[s] = !dm_host_is_usable(h, ask->now_us) || was_tried(ask, h) ? NAN
                                                                             : delay_to(cf, net, s);
        }
        size_t clen = ask->client->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                         : sizeof(struct sockaddr_in);
        struct dm_sessions_ask sa = {
            .group = ask->group,
            .group_len = ask->group != NULL ? ask->group_len : 0,
            .frame_load = g->frame_load,
            .rates = g->rates,
            .nrates = g->nrates,
            .want = want,
            .delay_ms = row,
            .client = ask->client,
            .client_len = clen,
        };
        size_t before = dm_sessions_untaken(pl->t);
        rc = dm_sessions_join(pl->t, &sa, ticket, &place);
        if (before == 0 && dm_sessions_untaken(pl->t) > 0) {
            /* The first group to wait since the last pass opens the window. */
            pl->next_pass_us = ask->now_us + cf->window_us;
        }
        atomic_store(&pl->waiting, dm_sessions_untaken(pl->t));
    }
    rc = answer(pl, rc, &place, row, ans);
    uv_mutex_unlock(&pl->lock);
    if (row != stack) {
        free(row);
    }
    return rc;
}

int
dm_placer_status(struct dm_placer *pl, struct dm_sessions_member *ticket,
                 struct dm_placer_answer *ans)
{
    *ans = (struct dm_placer_answer){ 0 };
    struct dm_sessions_place place = { .server = -1 };
    uv_mutex_lock(&pl->lock);
    int rc = dm_sessions_status(pl->t, ticket, &place);
    rc = answer(pl, rc, &place, NULL, ans);
    uv_mutex_unlock(&pl->lock);
    return rc;
}

void
dm_placer_leave(struct dm_placer *pl, struct dm_sessions_member *ticket)
{
    if (ticket == NULL) {
        return;
    }
    uv_mutex_lock(&pl->lock);
    dm_sessions_leave(pl->t, ticket);
    atomic_store(&pl->waiting, dm_sessions_untaken(pl->t));
    uv_mutex_unlock(&pl->lock);
}

void
dm_placer_stats_json(struct dm_placer *pl, struct dm_sbuf *b)
{
    uv_mutex_lock(&pl->lock);
    const struct pconf *cf = pl->cf;
    struct dm_sessions_server_stats *per = calloc(cf->n > 0 ? cf->n : 1, sizeof(*per));
    struct dm_sessions_stats st;
    dm_sessions_stats(pl->t, &st, per, per != NULL ? cf->n : 0);
    dm_sb_printf(
        b,
        "{\"window_ms\":%llu,\"lbf\":%.3f,\"groups\":%zu,\"sessions\":%zu,\"waiting\":%zu,"
        "\"solving\":%zu,\"detached\":%zu,\"placed\":%llu,\"lowered\":%llu,\"refused\":%llu,"
        "\"servers\":[",
        (unsigned long long)(cf->window_us / 1000), st.lbf, st.groups, st.members, st.waiting,
        st.solving, st.detached, (unsigned long long)st.placed, (unsigned long long)st.lowered,
        (unsigned long long)st.refused);
    char name[DM_JSON_TEXT];
    for (size_t s = 0; per != NULL && s < cf->n; s++) {
        dm_sb_printf(b,
                     "%s{\"name\":\"%s\",\"groups\":%zu,\"sessions\":%zu,\"load\":%.3f,"
                     "\"capacity\":%.3f}",
                     s ? "," : "", dm_json_esc(name, sizeof(name), cf->names[s]), per[s].groups,
                     per[s].members, per[s].load, per[s].capacity);
    }
    dm_sb_printf(b, "]}");
    uv_mutex_unlock(&pl->lock);
    free(per);
}
