/*
 * dimmer-sim experiments 1 and 2: power control as the seed power paper
 * (../shared/papers/power-multi-threshold.txt, Tables 6-9, Figs. 30-32), and
 * our boot-aware policy against it (bench/sim/README.md has the reading).
 *
 * The cluster: `servers` machines, each a dm_sim_srv (PS with `slots`
 * slots, one unit of work per slot-second), with a power model (idle W, full
 * W, linear in the busy share of the slots, W while booting, W asleep) and a
 * boot delay. In front of them, dimmer as it is: the pool's balancer (one of
 * dm_balancers, picked through dm_balancer_pick_past_ramps as the proxy
 * does), connection affinity, the slow-start ramp, the server counters the
 * proxy keeps (conns, inflight, the host's inflight and bound), and the
 * power manager's loop: every 100 ms the state machine (dm_pm_progress),
 * every trend interval the pool's metrics (dm_pm_metrics), the policy's
 * decide(), dm_pm_should_act() and dm_pm_plan(), all from dm_power. What is
 * the simulator's own: the clients, the servers' queues and power, and
 * carrying out the plan's moves (a wake boots for boot_s, a drained server
 * sleeps).
 *
 * The clients are SPECweb-banking-like sessions: a page request, then its
 * embedded objects one after another on the same connection, then a think
 * time, for a geometric number of pages; the number of sessions follows the
 * pattern (exp1 or exp2 of dimmer-load, bench/load/pattern.h), sessions
 * beyond the target ending at their next think, as dimmer-load's do.
 *
 * The mechanisms that can cost quality of service, each switchable:
 *   affinity   a session stays on the server of its first request (dimmer's
 *              affinity: connection); off, every request is balanced anew
 *   abrupt     a server is powered off with whatever it holds (its requests
 *              fail, its sessions reconnect), as the seed's servers were
 *              suspended; off, dimmer drains it first
 *   saturation the servers' estimated power saturates below full power: an
 *              agent's CPU-share estimate reads sat_w when the slots are all
 *              busy, so the decline thresholds (T1+5, T1+10) are never met
 *              by a saturated server
 *   burst      no slow start: a server that comes up takes every new
 *              session the balancer sends (least connections sends them all
 *              to the empty one); off, dimmer's slow-start ramp
 *   bounds     SPECweb's 2 s / 4 s bounds apply to a whole page with its
 *              embedded objects; off, to each request alone
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/balancer.h"
#include "balancers/servers.h"
#include "bench/load/pattern.h"
#include "bench/load/score.h"
#include "bench/sim/exp.h"
#include "bench/sim/server.h"
#include "bench/sim/sim.h"
#include "power/control.h"
#include "power/machine.h"
#include "power/policy.h"

#define EXP          "power"
#define MAX_SERVERS  64
#define MAX_POLICIES 8
#define TICK_S       0.1
/* What one command may ask of all its runs: requests at most (about an hour
 * of CPU here; the default command asks about 1.2e8, 35 s of CPU). */
#define POWER_MAX_REQUESTS 1e10
#define SESSION_TICK       0.1
#define M_AFFINITY         (1u << 0)
#define M_ABRUPT           (1u << 1)
#define M_SATURATION       (1u << 2)
#define M_BURST            (1u << 3)
#define M_BOUNDS           (1u << 4)
#define M_ALL              (M_AFFINITY | M_ABRUPT | M_SATURATION | M_BURST | M_BOUNDS)
#define MECHS              5

static const char *const mech_names[MECHS] = { "affinity", "abrupt", "saturation", "burst",
                                               "bounds" };

/* Everything a run depends on. */
struct pw_params {
    /* cluster */
    unsigned servers, slots;
    enum dm_sim_disc disc; /* --discipline: processor sharing (default) or FIFO */
    bool page_order;       /* --queue-order page: FIFO's waiting requests as dimmer's page order */
    double page_bound_s;   /* --page-bound: its page_bound */
    double full_w, idle_w, asleep_w, booting_w, sat_w;
    double boot_s;
    /* workload */
    char pattern[16];
    double max_sessions, time_scale;
    double ramp_s; /* --ramp: each ramp at least this long (dm_load_pattern_ramp); 0: none */
    double think_s, objects, page_work, obj_work, session_pages;
    unsigned conns; /* connections a session (1..MAX_CONNS) */
    /* dimmer */
    char balancer[32];
    char policy[32];
    double period_s, trend_s, min_change_s, drain_timeout_s, slow_start_s, delay_off_s, margin;
    double oracle_u; /* 0: u1 */
    double
        static_n; /* the static yardstick's servers; 0: the pattern's peak at the oracle's share */
    double history_s; /* boot-aware */
    double action_interval_s;
    double t1_w, tcp_max;
    bool tcp_max_auto; /* --tcp-max auto: learned as the proxy learns it (power/control.h) */
    unsigned min_active;
    unsigned mech;
    unsigned seeds; /* runs pooled, seed, seed + 1, ... */
    uint64_t seed;
    bool timeline; /* keep the per-second series */
    bool warm;     /* --warm: play the pattern twice, score the second */
};

struct pw_sample {
    float active, booting, est_w, true_w, sessions;
    unsigned valid, good; /* scored units that ended in this second */
};

struct pw_result {
    double energy_j, seconds;
    uint64_t valid, good, tolerable, errors; /* scored units: pages or requests */
    uint64_t requests, pages;
    uint64_t wakes, sleeps, events;
    double mean_rt;
    double ramp_s;  /* the shortest ramp the pattern got with --ramp (inf: none widened) */
    double tcp_max; /* in use at the end (learned with --tcp-max auto) */
    struct pw_sample *series; /* one a second when timeline */
    size_t nseries;
    bool failed;
};

struct pw_run;

struct pw_srv {
    struct dm_sim_srv q;
    struct pw_run *run;
    unsigned index;
    enum dm_pm_state state;
    uint64_t since_us, last_change_us, last_action_us;
    double busy_mark, mark_at; /* the busy integral at the last report */
    double est_w, tcp;
    double energy_j, energy_at, energy_busy;
    double util_now; /* the busy share over the last report */
};

#define MAX_CONNS 4

struct pw_session;

/* One of a session's keep-alive connections: one request at a time. */
struct pw_conn {
    struct pw_session *ss;
    struct dm_sim_job job;
    int bound; /* server it is bound to (affinity), -1 none */
    int at;    /* server of its request in flight, -1 none */
    double start;
};

struct pw_session {
    struct pw_run *run;
    struct pw_conn conns[MAX_CONNS];
    uint64_t gen;
    unsigned pages;       /* left */
    unsigned objs;        /* objects of this page not yet asked for */
    unsigned outstanding; /* requests of this page in flight */
    double page_start;
    bool live, ending, loading, page_failed;
    struct pw_session *next_free;
};

struct pw_run {
    const struct pw_params *p;
    struct dm_sim sim;
    struct dm_load_pattern pattern;
    struct dm_servers *sv;
    struct dm_balancer *bal;
    struct pw_srv srv[MAX_SERVERS];
    const struct dm_power_ops *ops;
    struct dm_power_params pp;
    _Alignas(max_align_t) unsigned char state[2048];
    struct dm_pm_rules rules;
    struct dm_pm_trend trend;
    struct dm_pm_tcpmax learn;
    double next_trend;
    struct pw_session *sessions;
    size_t nsessions;
    struct pw_session *free_list;
    unsigned live, ending;
    double end_s;
    double score_from; /* --warm: the second play's start (0: the run's) */
    double energy_from_j;
    uint8_t tried[MAX_SERVERS / 8 + 1];
    struct pw_result *r;
    double rt_sum;
    uint64_t rt_n;
};

/* ---- power and state ---- */

static void account(struct pw_srv *s);

/*
 * --warm: the pattern played twice, one after the other (its points again,
 * a duration later), so that the policy meets the second play with what
 * the first taught it; only the second is scored.
 */
static int
warm_pattern(struct dm_load_pattern *p)
{
    double d = dm_load_pattern_duration(p);
    double *t = malloc(2 * p->n * sizeof(*t)), *v = malloc(2 * p->n * sizeof(*v));
    if (t == NULL || v == NULL) {
        free(t);
        free(v);
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++, n++) {
        t[n] = p->t[i];
        v[n] = p->sessions[i];
    }
    for (size_t i = 0; i < p->n; i++) {
        if (d + p->t[i] > t[n - 1]) {
            t[n] = d + p->t[i];
            v[n++] = p->sessions[i];
        } else if (p->sessions[i] != v[n - 1]) {
            /* At the seam, a level that is not the one the first play ends
             * on: a step there (times must increase). */
            t[n] = t[n - 1] + 1e-6;
            v[n++] = p->sessions[i];
        }
    }
    free(p->t);
    free(p->sessions);
    p->t = t;
    p->sessions = v;
    p->n = n;
    return 0;
}

/* --warm: the energy so far, at the second play's start, is not the run's. */
static void
energy_mark(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)sim;
    (void)tag;
    struct pw_run *run = arg;
    run->energy_from_j = 0;
    for (unsigned i = 0; i < run->p->servers; i++) {
        account(&run->srv[i]);
        run->energy_from_j += run->srv[i].energy_j;
    }
}

static double
true_w(const struct pw_srv *s)
{
    const struct pw_params *p = s->run->p;
    switch (s->state) {
    case DM_PM_SLEEPING:
        return p->asleep_w;
    case DM_PM_BOOTING:
    case DM_PM_FAILED:
        return p->booting_w;
    default:
        return p->idle_w + (p->full_w - p->idle_w) * dm_sim_srv_util(&s->q);
    }
}

/*
 * Brings the server's energy up to now; called before its state changes. An
 * awake server's is exact through the busy integral of its slots, whenever
 * its jobs came and went.
 */
static void
account(struct pw_srv *s)
{
    const struct pw_params *p = s->run->p;
    double now = s->run->sim.now;
    double busy = dm_sim_srv_busy(&s->run->sim, &s->q);
    if (s->state == DM_PM_ACTIVE || s->state == DM_PM_DRAINING || s->state == DM_PM_MAINT) {
        s->energy_j +=
            p->idle_w * (now - s->energy_at) + (p->full_w - p->idle_w) * (busy - s->energy_busy);
    } else {
        s->energy_j += true_w(s) * (now - s->energy_at);
    }
    s->energy_at = now;
    s->energy_busy = busy;
}

static void
set_state(struct pw_srv *s, enum dm_pm_state st)
{
    static const enum dm_power_state host_of[DM_PM_STATES] = {
        [DM_PM_ACTIVE] = DM_POWER_AWAKE,    [DM_PM_DRAINING] = DM_POWER_DRAINING,
        [DM_PM_SLEEPING] = DM_POWER_ASLEEP, [DM_PM_BOOTING] = DM_POWER_BOOTING,
        [DM_PM_FAILED] = DM_POWER_FAILED,   [DM_PM_MAINT] = DM_POWER_MAINT,
    };
    account(s);
    uint64_t now = dm_sim_now_us(&s->run->sim);
    s->state = st;
    s->since_us = now;
    s->last_change_us = now;
    atomic_store(&s->run->sv->s[s->index].host->power, (int)host_of[st]);
}

/* ---- requests ---- */

static void start_page(struct pw_session *ss);
static void think(struct pw_session *ss);
static void session_free(struct pw_session *ss);

/* The per-second series' counts of a scored unit that ends now. */
static void
count_second(struct pw_run *run, bool good)
{
    struct pw_result *r = run->r;
    size_t i = (size_t)(run->sim.now - run->score_from);
    if (r->series != NULL && i < r->nseries) {
        r->series[i].valid++;
        r->series[i].good += good;
    }
}

/* Scores one unit (a request, or a page with its objects) as dimmer-load does: SPECweb's bounds. */
static void
score(struct pw_run *run, bool ok, double rt)
{
    struct pw_result *r = run->r;
    if (run->sim.now < run->score_from) {
        return; /* --warm: the first play is not scored */
    }
    if (!ok) {
        r->errors++;
        return;
    }
    enum dm_score sc = dm_score(NULL, 200, (uint64_t)(rt * 1e6));
    r->valid++;
    r->good += sc == DM_SCORE_GOOD;
    r->tolerable += sc != DM_SCORE_FAIL;
    count_second(run, sc == DM_SCORE_GOOD);
}

static void
count_request(struct pw_run *run, bool ok, double rt)
{
    if (run->sim.now < run->score_from) {
        return;
    }
    run->r->requests++;
    if (!(run->p->mech & M_BOUNDS)) {
        score(run, ok, rt);
    }
    if (ok) {
        run->rt_sum += rt;
        run->rt_n++;
    }
}

static void
count_page(struct pw_run *run, bool ok, double rt)
{
    if (run->sim.now < run->score_from) {
        return;
    }
    run->r->pages++;
    if (run->p->mech & M_BOUNDS) {
        score(run, ok, rt);
    }
}

/* The server counters the proxy keeps for a request, from pick to end. */
static void
counters_start(struct pw_run *run, int idx, bool picked)
{
    struct dm_server *s = &run->sv->s[idx];
    dm_counter_add(&s->conns, 1);
    dm_counter_add(&s->inflight, 1);
    dm_counter_add(&s->host->inflight, 1);
    dm_counter_add(&s->host->started, 1);
    if (picked) {
        dm_counter_add(&s->picks, 1);
    }
}

static void
counters_end(struct pw_run *run, int idx, bool ok)
{
    struct dm_server *s = &run->sv->s[idx];
    dm_counter_sub(&s->conns, 1);
    dm_counter_sub(&s->inflight, 1);
    dm_counter_sub(&s->host->inflight, 1);
    dm_counter_add(ok ? &s->requests : &s->failures, 1);
}

static void
bind_to(struct pw_conn *c, int idx)
{
    struct pw_run *run = c->ss->run;
    if (c->bound == idx) {
        return;
    }
    if (c->bound >= 0) {
        dm_counter_sub(&run->sv->s[c->bound].host->bound, 1);
    }
    c->bound = idx;
    if (idx >= 0) {
        dm_counter_add(&run->sv->s[idx].host->bound, 1);
    }
}

/* Where the proxy sends the connection's next request (request.c's rule), -1: none usable. */
static int
route(struct pw_conn *c, bool *picked)
{
    struct pw_run *run = c->ss->run;
    uint64_t now = dm_sim_now_us(&run->sim);
    *picked = false;
    if ((run->p->mech & M_AFFINITY) && c->bound >= 0) {
        if (dm_server_keeps_affinity(&run->sv->s[c->bound], now,
                                     !(run->bal->ops->needs & DM_BAL_BINDS_CONNECTIONS))) {
            return c->bound;
        }
    }
    memset(run->tried, 0, sizeof(run->tried));
    struct dm_pick in = { .tried = run->tried, .now_us = now, .rng = &run->sim.rng };
    int idx = dm_balancer_pick_past_ramps(run->bal, &in, run->tried);
    *picked = idx != DM_NO_SERVER;
    return idx;
}

static void page_step(struct pw_session *ss);

static void
send_request(struct pw_conn *c, double work)
{
    struct pw_session *ss = c->ss;
    struct pw_run *run = ss->run;
    bool picked;
    int idx = route(c, &picked);
    c->start = run->sim.now;
    if (idx == DM_NO_SERVER) {
        /* 503: nothing awake to take it (min_active keeps one, so rare). */
        count_request(run, false, 0);
        ss->page_failed = true;
        return;
    }
    if (run->p->mech & M_AFFINITY) {
        bind_to(c, idx);
    }
    counters_start(run, idx, picked);
    struct dm_bal_event ev = { .server = idx, .now_us = dm_sim_now_us(&run->sim) };
    dm_balancer_on_request(run->bal, &ev);
    c->at = idx;
    c->job.size = work;
    c->job.owner = c;
    if (run->p->page_order) {
        /* dimmer's queue_order: page: the page's start (no earlier than its
         * bound ago) plus page_bound; past that, after every other. */
        double b = run->p->page_bound_s, now = run->sim.now;
        c->job.key = (ss->page_start > now - b ? ss->page_start : now - b) + b;
    }
    ss->outstanding++;
    dm_sim_srv_add(&run->sim, &run->srv[idx].q, &c->job);
}

/*
 * The page goes on: each idle connection asks for the next object, as a
 * browser does over its few connections; once none is left and none is in
 * flight, the page is done (scored whole) and the session thinks.
 */
static void
page_step(struct pw_session *ss)
{
    struct pw_run *run = ss->run;
    unsigned nconns = run->p->conns;
    for (unsigned i = 0; i < nconns && ss->objs > 0; i++) {
        struct pw_conn *c = &ss->conns[i];
        if (c->at < 0) {
            ss->objs--;
            send_request(c, dm_sim_exp(&run->sim.rng, run->p->obj_work));
        }
    }
    if (ss->outstanding == 0 && ss->objs == 0) {
        count_page(run, !ss->page_failed, run->sim.now - ss->page_start);
        think(ss);
    }
}

static void
request_done(struct dm_sim *sim, struct dm_sim_srv *q, struct dm_sim_job *job)
{
    struct pw_srv *s = q->owner;
    struct pw_conn *c = job->owner;
    struct pw_session *ss = c->ss;
    struct pw_run *run = s->run;
    int idx = c->at;
    c->at = -1;
    ss->outstanding--;
    counters_end(run, idx, true);
    struct dm_bal_event ev = { .server = idx, .now_us = dm_sim_now_us(sim) };
    dm_balancer_on_response(run->bal, &ev);
    count_request(run, true, sim->now - c->start);
    page_step(ss);
}

static void
resume_cb(struct dm_sim *sim, void *arg, uint64_t gen)
{
    (void)sim;
    struct pw_session *ss = arg;
    if (ss->live && ss->gen == gen && ss->loading) {
        page_step(ss);
    }
}

/*
 * An abrupt power-off: the request on it fails, the connection is reset
 * (the next request of the page reconnects, through the balancer), and the
 * page counts as failed.
 */
static void
aborted(struct dm_sim *sim, struct dm_sim_srv *q, struct dm_sim_job *job, void *arg)
{
    (void)q;
    (void)arg;
    struct pw_conn *c = job->owner;
    struct pw_session *ss = c->ss;
    struct pw_run *run = ss->run;
    int idx = c->at;
    c->at = -1;
    ss->outstanding--;
    counters_end(run, idx, false);
    count_request(run, false, 0);
    ss->page_failed = true;
    bind_to(c, -1);
    /* The page goes on once the server is off, not from inside its abort. */
    dm_sim_after(sim, 0, resume_cb, ss, ss->gen);
}

/* ---- sessions ---- */

static void
think_done(struct dm_sim *sim, void *arg, uint64_t gen)
{
    (void)sim;
    struct pw_session *ss = arg;
    if (!ss->live || ss->gen != gen || ss->loading) {
        return;
    }
    if (ss->ending || ss->pages == 0) {
        session_free(ss);
        return;
    }
    start_page(ss);
}

static void
think(struct pw_session *ss)
{
    struct pw_run *run = ss->run;
    ss->loading = false;
    if (ss->ending || ss->pages == 0 || run->sim.now >= run->end_s) {
        session_free(ss);
        return;
    }
    dm_sim_after(&run->sim, dm_sim_exp(&run->sim.rng, run->p->think_s), think_done, ss, ss->gen);
}

static void
start_page(struct pw_session *ss)
{
    struct pw_run *run = ss->run;
    ss->pages--;
    ss->loading = true;
    ss->page_failed = false;
    ss->page_start = run->sim.now;
    ss->objs = run->p->objects > 0 ? dm_sim_geometric(&run->sim.rng, run->p->objects + 1) - 1 : 0;
    send_request(&ss->conns[0], dm_sim_exp(&run->sim.rng, run->p->page_work));
    if (ss->outstanding == 0) {
        ss->objs = 0; /* the page itself was refused: nothing to fetch */
        page_step(ss);
    }
}

static void
session_free(struct pw_session *ss)
{
    struct pw_run *run = ss->run;
    if (!ss->live) {
        return;
    }
    if (ss->ending) {
        run->ending--;
    }
    for (unsigned i = 0; i < MAX_CONNS; i++) {
        bind_to(&ss->conns[i], -1);
    }
    ss->live = false;
    ss->ending = false;
    ss->gen++;
    run->live--;
    ss->next_free = run->free_list;
    run->free_list = ss;
}

static void
session_start(struct pw_run *run)
{
    struct pw_session *ss = run->free_list;
    if (ss == NULL) {
        return;
    }
    run->free_list = ss->next_free;
    ss->gen++;
    ss->live = true;
    ss->ending = false;
    ss->outstanding = 0;
    for (unsigned i = 0; i < MAX_CONNS; i++) {
        ss->conns[i] = (struct pw_conn){ .ss = ss, .bound = -1, .at = -1 };
    }
    ss->pages = dm_sim_geometric(&run->sim.rng, run->p->session_pages);
    run->live++;
    /* Its first page within the next tick, so that a ramp is not one instant. */
    ss->loading = false;
    dm_sim_after(&run->sim, dm_sim_uniform(&run->sim.rng) * SESSION_TICK, think_done, ss, ss->gen);
}

/* Keeps the number of sessions on the pattern (dimmer-load's rule). */
static void
sessions_tick(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)tag;
    struct pw_run *run = arg;
    if (sim->now >= run->end_s) {
        return;
    }
    double target = dm_load_pattern_at(&run->pattern, sim->now);
    unsigned want = (unsigned)(target + 0.5);
    unsigned staying = run->live - run->ending;
    for (size_t i = 0; i < run->nsessions && staying < want && run->ending > 0; i++) {
        struct pw_session *ss = &run->sessions[i];
        if (ss->live && ss->ending) {
            ss->ending = false;
            run->ending--;
            staying++;
        }
    }
    while (staying < want && run->free_list != NULL) {
        session_start(run);
        staying++;
    }
    for (size_t i = 0; i < run->nsessions && staying > want; i++) {
        struct pw_session *ss = &run->sessions[i];
        if (ss->live && !ss->ending) {
            if (!ss->loading) {
                session_free(ss); /* thinking: ends now */
            } else {
                ss->ending = true;
                run->ending++;
            }
            staying--;
        }
    }
    dm_sim_after(sim, SESSION_TICK, sessions_tick, run, 0);
}

/* ---- the power manager ---- */

static struct dm_pm_server
machine_view(const struct pw_srv *s)
{
    const struct dm_server *d = &s->run->sv->s[s->index];
    return (struct dm_pm_server){
        .state = s->state,
        .since_us = s->since_us,
        .last_change_us = s->last_change_us,
        .last_action_us = s->last_action_us,
        .can_wake = true,
        .cost = s->run->p->full_w / d->capacity,
        .load = s->tcp + (double)dm_counter_get(&d->host->inflight),
    };
}

static void
go_to_sleep(struct pw_srv *s)
{
    struct pw_run *run = s->run;
    if (s->q.n > 0) {
        dm_sim_srv_abort(&run->sim, &s->q, aborted, NULL);
    }
    set_state(s, DM_PM_SLEEPING);
    s->last_action_us = dm_sim_now_us(&run->sim);
    run->r->sleeps += run->sim.now >= run->score_from;
}

static void
activate(struct pw_srv *s)
{
    struct pw_run *run = s->run;
    uint64_t now = dm_sim_now_us(&run->sim);
    struct dm_host *h = run->sv->s[s->index].host;
    uint64_t ramp = (run->p->mech & M_BURST) ? 0 : (uint64_t)(run->p->slow_start_s * 1e6);
    atomic_store(&h->ramp_from_us, ramp > 0 ? now : 0);
    atomic_store(&h->ramp_until_us, ramp > 0 ? now + ramp : 0);
    set_state(s, DM_PM_ACTIVE);
}

static void
progress(struct pw_srv *s)
{
    struct pw_run *run = s->run;
    const struct dm_host *h = run->sv->s[s->index].host;
    struct dm_pm_server v = machine_view(s);
    struct dm_pm_observed o = {
        .acked = true,
        .inflight = dm_counter_get(&h->inflight),
        .bound = dm_counter_get(&h->bound),
        .healthy = true,
    };
    switch (dm_pm_progress(&run->rules, &v, &o, dm_sim_now_us(&run->sim))) {
    case DM_PM_DRAINED:
    case DM_PM_DRAIN_TIMEOUT:
        go_to_sleep(s);
        break;
    case DM_PM_UP:
        activate(s);
        break;
    case DM_PM_BOOT_TIMEOUT:
        set_state(s, DM_PM_FAILED);
        break;
    default:
        break;
    }
}

/* What the agent reports for the last second, and the proxy's TCP count. */
static void
measure(struct pw_srv *s)
{
    struct pw_run *run = s->run;
    const struct pw_params *p = run->p;
    const struct dm_server *d = &run->sv->s[s->index];
    double now = run->sim.now;
    double busy = dm_sim_srv_busy(&run->sim, &s->q);
    double dt = now - s->mark_at;
    double u = dt > 0 ? (busy - s->busy_mark) / dt : 0;
    s->busy_mark = busy;
    s->mark_at = now;
    s->util_now = u;
    double inflight = (double)dm_counter_get(&d->host->inflight);
    double bound = (double)dm_counter_get(&d->host->bound);
    s->tcp = bound > inflight ? bound : inflight;
    double top = (p->mech & M_SATURATION) ? p->sat_w : p->full_w;
    switch (s->state) {
    case DM_PM_SLEEPING:
        s->est_w = p->asleep_w;
        break;
    case DM_PM_BOOTING:
    case DM_PM_FAILED:
        s->est_w = p->booting_w;
        break;
    default:
        s->est_w = p->idle_w + (top - p->idle_w) * (u < 0 ? 0 : u > 1 ? 1 : u);
        break;
    }
}

static void
act(struct pw_run *run, unsigned want)
{
    struct dm_pm_server view[MAX_SERVERS];
    struct dm_pm_move moves[MAX_SERVERS];
    for (unsigned i = 0; i < run->p->servers; i++) {
        view[i] = machine_view(&run->srv[i]);
    }
    unsigned short_by;
    uint64_t now = dm_sim_now_us(&run->sim);
    size_t k = dm_pm_plan(&run->rules, view, run->p->servers, want, now, false, moves, MAX_SERVERS,
                          &short_by);
    for (size_t i = 0; i < k; i++) {
        struct pw_srv *s = &run->srv[moves[i].index];
        if (moves[i].to == DM_PM_ACTIVE) {
            set_state(s, DM_PM_ACTIVE);
        } else if (moves[i].to == DM_PM_BOOTING) {
            set_state(s, DM_PM_BOOTING);
            s->last_action_us = now;
            run->r->wakes += run->sim.now >= run->score_from;
        } else if (run->p->mech & M_ABRUPT) {
            go_to_sleep(s);
        } else {
            set_state(s, DM_PM_DRAINING);
        }
    }
}

static void
trend(struct pw_run *run)
{
    struct dm_pm_reading rd[MAX_SERVERS];
    for (unsigned i = 0; i < run->p->servers; i++) {
        struct pw_srv *s = &run->srv[i];
        measure(s);
        /* Every server's power is its own (an agent's): full_w as a proxy's
         * config would give it, whatever the saturation mechanism does. */
        rd[i] = (struct dm_pm_reading){ .state = s->state,
                                        .w = s->est_w,
                                        .tcp = s->tcp,
                                        .reported = true,
                                        .idle_w = run->p->idle_w,
                                        .full_w = run->p->full_w };
    }
    uint64_t now = dm_sim_now_us(&run->sim);
    if (run->p->tcp_max_auto &&
        dm_pm_tcpmax_learn(&run->learn, rd, run->p->servers, now, &run->pp.tcp_max) &&
        run->ops->init != NULL && dm_power_find(run->p->policy) != NULL) {
        /* As the proxy does: a policy's memory is stale (the yardsticks have none). */
        run->ops->init(run->state, &run->pp);
    }
    run->r->tcp_max = run->pp.tcp_max;
    struct dm_power_metrics m;
    dm_pm_metrics(&run->trend, rd, run->p->servers, run->p->trend_s, &m);
    struct dm_power_target t;
    run->ops->decide(run->state, &run->pp, &m, now, &t);
    if (dm_pm_should_act(&run->trend, &t, &m, (uint64_t)(run->p->period_s * 1e6), now)) {
        act(run, t.servers);
    }
}

static void
sample(struct pw_run *run)
{
    struct pw_result *r = run->r;
    if (!run->p->timeline || r->series == NULL) {
        return;
    }
    if (run->sim.now + 1e-9 < run->score_from) {
        return;
    }
    size_t i = (size_t)(run->sim.now - run->score_from + 1e-9);
    if (i >= r->nseries) {
        return;
    }
    struct pw_sample *x = &r->series[i];
    x->active = x->booting = x->est_w = x->true_w = 0;
    x->sessions = (float)run->live;
    for (unsigned k = 0; k < run->p->servers; k++) {
        const struct pw_srv *s = &run->srv[k];
        x->active += s->state == DM_PM_ACTIVE;
        x->booting += s->state == DM_PM_BOOTING;
        if (s->state == DM_PM_ACTIVE || s->state == DM_PM_DRAINING) {
            x->est_w += (float)s->est_w;
        }
        x->true_w += (float)true_w(s);
    }
}

static void
manager_tick(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)tag;
    struct pw_run *run = arg;
    for (unsigned i = 0; i < run->p->servers; i++) {
        progress(&run->srv[i]);
    }
    if (sim->now + 1e-9 >= run->next_trend) {
        run->next_trend += run->p->trend_s;
        trend(run);
        sample(run);
    }
    if (sim->now + TICK_S <= run->end_s + 1e-9) {
        dm_sim_after(sim, TICK_S, manager_tick, run, 0);
    }
}

/*
 * The oracle: not a dimmer policy, a yardstick. It reads the pattern itself
 * and keeps, boot_s + one period ahead, the servers the coming peak of
 * sessions needs at the share u1 = (T1 - idle) / (full - idle) of each that
 * the seed's T1 stands for (sessions x conns / tcp_max servers' worth). No
 * causal policy does better on a step it cannot see coming: its power at
 * its quality of service bounds what any of them could reach here.
 */
struct oracle_state {
    const struct dm_load_pattern *pattern;
    double conns, tcp_max, u1, horizon_s;
};

static void
oracle_decide(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
              uint64_t now_us, struct dm_power_target *out)
{
    const struct oracle_state *o = state;
    double t = (double)now_us / 1e6, most = 0;
    for (double dt = 0; dt <= o->horizon_s; dt += 0.5) {
        double v = dm_load_pattern_at(o->pattern, t + dt);
        most = v > most ? v : most;
    }
    double need_w = most * o->conns / o->tcp_max / o->u1 * p->t1_w;
    *out = (struct dm_power_target){
        .servers = dm_power_servers_for(p, m, need_w, p->t1_w),
        .immediate = true,
        .cls = DM_PC_STEADY,
        .threshold_w = p->t1_w,
        .need_w = need_w,
    };
}

static const struct dm_power_ops oracle_ops = {
    .name = "oracle",
    .state_size = sizeof(struct oracle_state),
    .decide = oracle_decide,
};

/*
 * The static yardstick: no power management, a fixed number of servers
 * awake from the first decision on, by default as many as the pattern's
 * peak needs at the oracle's share of each (provisioning for the peak, as
 * an operator without a power manager would). A policy that does not beat
 * it on both power and quality of service has not earned its wakes.
 */
struct static_state {
    unsigned n;
};

static void
static_decide(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
              uint64_t now_us, struct dm_power_target *out)
{
    (void)now_us;
    const struct static_state *st = state;
    unsigned n = st->n < m->n_total ? st->n : m->n_total;
    *out = (struct dm_power_target){
        .servers = n,
        .immediate = true,
        .cls = DM_PC_STEADY,
        .threshold_w = p->t1_w,
        .need_w = n * p->t1_w,
    };
}

static const struct dm_power_ops static_ops = {
    .name = "static",
    .state_size = sizeof(struct static_state),
    .decide = static_decide,
};

/* ---- a run ---- */

static void
params_of(const struct pw_params *p, struct dm_power_params *pp)
{
    dm_power_params_default(pp);
    pp->t1_w = p->t1_w;
    pp->tcp_max = p->tcp_max;
    pp->full_w = p->full_w;
    pp->min_active = p->min_active;
    pp->boot_us = (uint64_t)(p->boot_s * 1e6);
    pp->delay_off_us = (uint64_t)(p->delay_off_s * 1e6);
    pp->margin = p->margin;
    pp->idle_w = p->idle_w;
    pp->history_us = (uint64_t)(p->history_s * 1e6);
}

static int
run_one(const struct pw_params *p, struct pw_result *r)
{
    struct pw_run *run = calloc(1, sizeof(*run));
    if (run == NULL) {
        return -1;
    }
    memset(r, 0, sizeof(*r));
    run->p = p;
    run->r = r;
    dm_sim_init(&run->sim, p->seed);
    char err[256];
    int rc = -1;
    if (dm_load_pattern_builtin(&run->pattern, p->pattern, p->max_sessions, err, sizeof(err)) !=
        0) {
        fprintf(stderr, "dimmer-sim power: %s\n", err);
        goto out_sim;
    }
    if (p->ramp_s > 0) {
        r->ramp_s = dm_load_pattern_ramp(&run->pattern, p->ramp_s);
    }
    if (p->time_scale != 1.0) {
        dm_load_pattern_scale(&run->pattern, p->time_scale);
    }
    run->end_s = dm_load_pattern_duration(&run->pattern);
    if (p->warm && warm_pattern(&run->pattern) != 0) {
        goto out_pattern;
    }
    run->score_from = p->warm ? run->end_s : 0;
    run->end_s = dm_load_pattern_duration(&run->pattern);
    run->ops = strcmp(p->policy, "oracle") == 0   ? &oracle_ops
               : strcmp(p->policy, "static") == 0 ? &static_ops
                                                  : dm_power_find(p->policy);
    run->sv = dm_servers_create(p->servers);
    if (run->ops == NULL || run->sv == NULL) {
        goto out_pattern;
    }
    for (unsigned i = 0; i < p->servers; i++) {
        run->sv->s[i].capacity = p->slots;
        run->sv->s[i].weight = 1;
    }
    run->bal = dm_balancer_create(dm_balancer_find(p->balancer), run->sv, NULL);
    if (run->bal == NULL) {
        goto out_servers;
    }
    run->nsessions = (size_t)(p->max_sessions * 1.05) + 16;
    run->sessions = calloc(run->nsessions, sizeof(*run->sessions));
    if (run->sessions == NULL) {
        goto out_bal;
    }
    for (size_t i = run->nsessions; i-- > 0;) {
        run->sessions[i].run = run;
        run->sessions[i].next_free = run->free_list;
        run->free_list = &run->sessions[i];
    }
    if (p->timeline) {
        r->nseries = (size_t)(run->end_s - run->score_from) + 2;
        r->series = calloc(r->nseries, sizeof(*r->series));
    }
    params_of(p, &run->pp);
    if (run->ops->state_size > sizeof(run->state)) {
        fprintf(stderr, "dimmer-sim power: policy %s: state too large\n", p->policy);
        goto out_sessions;
    }
    if (run->ops->init != NULL) {
        run->ops->init(run->state, &run->pp);
    }
    double span = p->full_w - p->idle_w;
    double u1 = p->oracle_u > 0 ? p->oracle_u : span > 0 ? (p->t1_w - p->idle_w) / span : 1;
    if (run->ops == &oracle_ops) {
        struct oracle_state *os = (struct oracle_state *)run->state;
        *os = (struct oracle_state){
            .pattern = &run->pattern,
            .conns = p->conns,
            .tcp_max = p->tcp_max,
            .u1 = u1,
            .horizon_s = p->boot_s + p->period_s,
        };
    } else if (run->ops == &static_ops) {
        double most = 0;
        for (size_t i = 0; i < run->pattern.n; i++) {
            most = run->pattern.sessions[i] > most ? run->pattern.sessions[i] : most;
        }
        double n = p->static_n > 0 ? p->static_n : ceil(most * p->conns / p->tcp_max / u1 - 1e-9);
        ((struct static_state *)run->state)->n = n < 1 ? 1 : (unsigned)n;
    }
    run->rules = (struct dm_pm_rules){
        .drain_timeout_us = (uint64_t)(p->drain_timeout_s * 1e6),
        .boot_us = (uint64_t)(p->boot_s * 1e6),
        .boot_timeout_us = (uint64_t)(p->boot_s * 1e6) * 10,
        .min_change_us = (uint64_t)(p->min_change_s * 1e6),
        .action_interval_us = (uint64_t)(p->action_interval_s * 1e6),
        .min_active = p->min_active,
        .health_checked = false,
    };
    for (unsigned i = 0; i < p->servers; i++) {
        struct pw_srv *s = &run->srv[i];
        s->run = run;
        s->index = i;
        dm_sim_srv_init(&s->q, p->disc, p->slots, p->slots, request_done, s);
        if (p->page_order) {
            dm_sim_srv_keyed(&s->q);
        }
        s->state = DM_PM_ACTIVE; /* every server awake at the start */
    }
    dm_sim_at(&run->sim, 0, sessions_tick, run, 0);
    run->next_trend = p->trend_s;
    dm_sim_at(&run->sim, TICK_S, manager_tick, run, 0);
    if (run->score_from > 0) {
        dm_sim_at(&run->sim, run->score_from, energy_mark, run, 0);
    }
    dm_sim_run_until(&run->sim, run->end_s);
    for (unsigned i = 0; i < p->servers; i++) {
        account(&run->srv[i]);
        r->energy_j += run->srv[i].energy_j;
        r->failed |= dm_sim_srv_failed(&run->srv[i].q);
    }
    r->energy_j -= run->energy_from_j;
    r->seconds = run->end_s - run->score_from;
    r->events = run->sim.events;
    r->mean_rt = run->rt_n ? run->rt_sum / (double)run->rt_n : 0;
    r->failed |= dm_sim_failed(&run->sim);
    rc = r->failed ? -1 : 0;
    for (unsigned i = 0; i < p->servers; i++) {
        dm_sim_srv_fini(&run->srv[i].q);
    }
out_sessions:
    free(run->sessions);
out_bal:
    dm_balancer_destroy(run->bal);
out_servers:
    dm_servers_destroy(run->sv);
out_pattern:
    dm_load_pattern_fini(&run->pattern);
out_sim:
    dm_sim_fini(&run->sim);
    free(run);
    return rc;
}

/* ---- the experiment ---- */

static void
defaults(struct pw_params *p)
{
    *p = (struct pw_params){
        .servers = 15,
        .slots = 8,
        .full_w = 70,
        .idle_w = 40,
        .asleep_w = 3,
        .booting_w = 70,
        .sat_w = 62,
        .boot_s = 7,
        .time_scale = 1,
        .think_s = 10,
        .objects = 8,
        .page_work = 0.1,
        .obj_work = 0.0375,
        .conns = 1,
        .session_pages = 15,
        .period_s = 5,
        .trend_s = 1,
        .min_change_s = 10,
        .drain_timeout_s = 30,
        .slow_start_s = 10,
        .delay_off_s = 30,
        .history_s = 3600,
        .page_bound_s = 2,
        .margin = 0.25,
        .action_interval_s = 1,
        .t1_w = 60,
        .tcp_max = 200,
        .min_active = 1,
        .mech = M_ALL,
        .seed = 1,
        .seeds = 1,
    };
    snprintf(p->balancer, sizeof(p->balancer), "leastconn");
    snprintf(p->policy, sizeof(p->policy), "multi");
}

struct job {
    struct pw_params p;
    struct pw_result r;
    int rc;
};

/* Runs the job once a seed (seed, seed + 1, ...) and pools the counts; the series is the first's.
 */
static void
job_cb(size_t i, void *arg)
{
    struct job *j = &((struct job *)arg)[i];
    unsigned n = j->p.seeds ? j->p.seeds : 1;
    j->rc = 0;
    for (unsigned k = 0; k < n; k++) {
        struct pw_params p = j->p;
        p.seed = j->p.seed + k;
        p.timeline = j->p.timeline && k == 0;
        struct pw_result r;
        j->rc |= run_one(&p, &r);
        if (k == 0) {
            j->r = r;
            j->r.mean_rt *= (double)r.requests;
            continue;
        }
        struct pw_result *a = &j->r;
        a->energy_j += r.energy_j;
        a->seconds += r.seconds;
        a->valid += r.valid;
        a->good += r.good;
        a->tolerable += r.tolerable;
        a->errors += r.errors;
        a->requests += r.requests;
        a->pages += r.pages;
        a->wakes += r.wakes;
        a->sleeps += r.sleeps;
        a->events += r.events;
        a->mean_rt += r.mean_rt * (double)r.requests;
        a->failed |= r.failed;
        free(r.series);
    }
    j->r.mean_rt = j->r.requests ? j->r.mean_rt / (double)j->r.requests : 0;
}

static double
pct(uint64_t a, uint64_t b)
{
    return b ? 100.0 * (double)a / (double)b : 0;
}

/* The paper's table for one experiment and period: rows[0] is always-on (the reference). */
static int
emit_table(const struct dm_sim_ctx *ctx, const char *name, const char *title, struct job *rows,
           size_t n, size_t ref)
{
    static const char *const h[] = { "policy",    "power W", "power %", "valid",  "good %",
                                     "tol. %",    "fail %",  "errors",  "thru %", "norm QoS",
                                     "QoS/ref %", "good/W",  "wakes",   "mean s" };
    struct dm_sim_table *t = dm_sim_table_create(name, title, sizeof(h) / sizeof(h[0]), h);
    const struct pw_result *a = &rows[ref].r;
    double a_w = a->energy_j / a->seconds;
    double a_q = pct(a->good, a->valid) * 1.0;
    for (size_t i = 0; i < n; i++) {
        const struct pw_result *r = &rows[i].r;
        double w = r->energy_j / r->seconds;
        double thru = pct(r->valid, a->valid);
        double good = pct(r->good, r->valid);
        double q = good * thru / 100;
        if (rows[i].p.tcp_max_auto) {
            dm_sim_table_cell(t, "%s [tcp_max %.0f]", rows[i].p.policy, r->tcp_max);
        } else {
            dm_sim_table_cell(t, "%s", rows[i].p.policy);
        }
        dm_sim_table_cell(t, "%.1f", w);
        dm_sim_table_cell(t, "%.1f", 100 * w / a_w);
        dm_sim_table_cell(t, "%llu", (unsigned long long)r->valid);
        dm_sim_table_cell(t, "%.1f", good);
        dm_sim_table_cell(t, "%.1f", pct(r->tolerable, r->valid));
        dm_sim_table_cell(t, "%.1f", 100 - pct(r->tolerable, r->valid));
        dm_sim_table_cell(t, "%llu", (unsigned long long)r->errors);
        dm_sim_table_cell(t, "%.1f", thru);
        dm_sim_table_cell(t, "%.1f", q);
        dm_sim_table_cell(t, "%.1f", a_q > 0 ? 100 * q / a_q : 0);
        dm_sim_table_cell(t, "%.1f", w > 0 ? (double)r->good / w : 0);
        dm_sim_table_cell(t, "%llu", (unsigned long long)r->wakes);
        dm_sim_table_cell(t, "%.3f", r->mean_rt);
    }
    dm_sim_table_note(t,
                      "power: average W over the run (energy / time); power %%: of always-on's.");
    dm_sim_table_note(t, "valid: %s answered; good < 2 s, tol. < 4 s, fail >= 4 s (of valid);",
                      (rows[0].p.mech & M_BOUNDS) ? "pages (with their objects)" : "requests");
    dm_sim_table_note(t,
                      "errors: not answered (reset by an abrupt sleep, or no server); thru: valid "
                      "/ always-on's valid;");
    dm_sim_table_note(t,
                      "norm QoS = good %% x thru; QoS/ref: of always-on's norm QoS; good/W: good "
                      "responses / average W;");
    dm_sim_table_note(t, "wakes: servers woken; mean s: mean request response time.");
    if (rows[0].p.disc == DM_SIM_FIFO) {
        if (rows[0].p.page_order) {
            dm_sim_table_note(t,
                              "servers: FIFO (--discipline fifo), %u requests served at once a "
                              "server, the rest waiting oldest page first, pages past %g s after "
                              "every other (--queue-order page, dimmer's queue_order: page).",
                              rows[0].p.slots, rows[0].p.page_bound_s);
        } else {
            dm_sim_table_note(t,
                              "servers: FIFO (--discipline fifo), %u requests served at once a "
                              "server, the rest waiting in arrival order.",
                              rows[0].p.slots);
        }
    }
    int rc = dm_sim_table_emit(ctx, t);
    dm_sim_table_destroy(t);
    return rc;
}

static void
emit_plot(const struct dm_sim_ctx *ctx, const char *name, const char *title, struct job *rows,
          size_t n)
{
    if (ctx->out_dir == NULL) {
        return;
    }
    char file[256];
    snprintf(file, sizeof(file), "%s_timeline.csv", name);
    FILE *f = dm_sim_file(ctx, file);
    if (f == NULL) {
        return;
    }
    fprintf(f, "second");
    for (size_t i = 0; i < n; i++) {
        const char *pn = rows[i].p.policy;
        fprintf(f, ",%s_active,%s_booting,%s_est_w,%s_w,%s_sessions,%s_good_pct", pn, pn, pn, pn,
                pn, pn);
    }
    fprintf(f, "\n");
    size_t len = rows[0].r.nseries;
    for (size_t s = 1; s < len; s++) {
        fprintf(f, "%zu", s);
        for (size_t i = 0; i < n; i++) {
            const struct pw_sample *x =
                rows[i].r.series != NULL && s < rows[i].r.nseries ? &rows[i].r.series[s] : NULL;
            if (x == NULL) {
                fprintf(f, ",,,,,,");
            } else {
                fprintf(f, ",%.0f,%.0f,%.1f,%.1f,%.0f,", x->active, x->booting, x->est_w, x->true_w,
                        x->sessions);
                if (x->valid > 0) {
                    fprintf(f, "%.1f", 100.0 * x->good / x->valid);
                }
            }
        }
        fprintf(f, "\n");
    }
    fclose(f);
    char script[8192];
    size_t o = 0;
    o += (size_t)snprintf(script + o, sizeof(script) - o,
                          "set datafile separator ','\nset key outside right\nset multiplot "
                          "layout 3,1 title '%s'\nset xlabel 'seconds'\n",
                          title);
    static const char *const label[3] = { "active servers (Fig. 30)", "booting servers (Fig. 31)",
                                          "estimated power, W (Fig. 32)" };
    for (int k = 0; k < 3; k++) {
        o += (size_t)snprintf(script + o, sizeof(script) - o, "set ylabel '%s'\nplot ", label[k]);
        for (size_t i = 0; i < n && o < sizeof(script); i++) {
            o += (size_t)snprintf(script + o, sizeof(script) - o,
                                  "%s'%s' using 1:%zu with lines title '%s'", i ? ", " : "", file,
                                  2 + i * 6 + (size_t)k, rows[i].p.policy);
        }
        o += (size_t)snprintf(script + o, sizeof(script) - o, "\n");
    }
    snprintf(script + o, sizeof(script) - o, "unset multiplot\n");
    dm_sim_plot(ctx, name, script);
}

static const char usage_text[] =
    "Power control as the seed power paper: 15 servers, SPECweb-banking-like sessions,\n"
    "Experiment I (exp1, a day in an hour, 1,200 sessions) and II (exp2, rapid changes,\n"
    "800 sessions), each policy at 5 s and 1 s control periods, then which of the QoS\n"
    "mechanisms reproduces the paper's ordering (ablation, Experiment II at 5 s).\n"
    "\n"
    "  --exp 1|2|both        which experiment (default both)\n"
    "  --periods LIST        control periods, s (default 5,1)\n"
    "  --policies LIST       of always-on,single,dual,multi,flexible,boot-aware, and the\n"
    "                        yardsticks oracle and static (default all)\n"
    "  --mech LIST|all|none  QoS mechanisms on: affinity,abrupt,saturation,burst,bounds\n"
    "                        (default all)\n"
    "  --no-ablation         skip the mechanism table\n"
    "  --servers N           15        --slots N          8 (slots a server)\n"
    "  --discipline D        ps (default: processor sharing over the slots) or fifo\n"
    "                        (the slots serve one request each, the rest wait in order)\n"
    "  --queue-order O       with fifo: arrival (default) or page (dimmer's queue_order:\n"
    "                        page: the oldest page first, past --page-bound after all)\n"
    "  --page-bound S        2 (page_bound)\n"
    "  --warm                play the pattern twice and score the second play only: the\n"
    "                        policies meet it with what the first taught them\n"
    "  --full-w W            70        --idle-w W         40\n"
    "  --asleep-w W          3         --booting-w W      70\n"
    "  --sat-w W             62 (estimate of a saturated server, with saturation)\n"
    "  --boot S              7 (boot delay)\n"
    "  --sessions N          peak sessions (default 1200 for exp1, 800 for exp2)\n"
    "  --time-scale X        play the pattern X times faster (default 1)\n"
    "  --ramp S              every rise and fall of the pattern lasts at least S s (of\n"
    "                        the pattern, before --time-scale), widened about its\n"
    "                        middle into the levels beside it (default 0: exp2's 5 s)\n"
    "  --think S             10 (mean think time)\n"
    "  --objects N           8 (mean embedded objects a page)\n"
    "  --page-work S         0.1 (mean slot-seconds of a page request)\n"
    "  --obj-work S          0.0375 (of an object request)\n"
    "  --conns N             1 (keep-alive connections a session, 1..4)\n"
    "  --session-pages N     15 (mean pages a session)\n"
    "  --balancer NAME       leastconn (any dimmer balancer)\n"
    "  --t1 W                60        --tcp-max N|auto   200 (auto: learned from power)\n"
    "  --min-change S        10        --drain-timeout S  30\n"
    "  --slow-start S        10 (without burst)\n"
    "  --delay-off S         30        --margin X         0.25 (boot-aware)\n"
    "  --history S           3600 (boot-aware's memory of steps, half-life)\n"
    "  --seeds N             1 (runs pooled a row: seeds S, S+1, ...; the mechanism table: 1)\n"
    "  --oracle-u X          share of a server the oracle fills (default (T1-idle)/(full-idle))\n"
    "  --static-n N          servers the static yardstick keeps awake (default: the\n"
    "                        pattern's peak at the oracle's share)\n";

struct opts {
    struct pw_params p;
    int exps; /* bit 0: exp1, bit 1: exp2 */
    double periods[4];
    int nperiods;
    char policies[MAX_POLICIES][32];
    int npolicies;
    bool ablation;
    bool sessions_set;
};

static bool
parse_list_names(const char *val, char out[][32], int cap, int *n, const char *const *allowed)
{
    *n = 0;
    const char *p = val;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= 32 || *n == cap) {
            return false;
        }
        memcpy(out[*n], p, len);
        out[*n][len] = '\0';
        bool ok = allowed == NULL;
        for (size_t i = 0; allowed != NULL && allowed[i] != NULL; i++) {
            ok |= strcmp(allowed[i], out[*n]) == 0;
        }
        if (!ok) {
            return false;
        }
        (*n)++;
        p += len;
        p += *p == ',';
    }
    return *n > 0;
}

static int
parse(int argc, char **argv, struct opts *o)
{
    static const char *const policies[] = { "always-on",  "single", "dual",   "multi", "flexible",
                                            "boot-aware", "oracle", "static", NULL };
    defaults(&o->p);
    o->exps = 3;
    o->periods[0] = 5;
    o->periods[1] = 1;
    o->nperiods = 2;
    o->npolicies = 0;
    for (int i = 0; policies[i] != NULL; i++) {
        snprintf(o->policies[o->npolicies++], 32, "%s", policies[i]);
    }
    o->ablation = true;
    struct pw_params *p = &o->p;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        bool takes = true;
        if (strcmp(a, "--no-ablation") == 0) {
            o->ablation = false;
            takes = false;
        } else if (strcmp(a, "--warm") == 0) {
            p->warm = true;
            takes = false;
        } else if (v == NULL) {
            fprintf(stderr, "dimmer-sim power: %s needs a value (or unknown option)\n", a);
            return 2;
        } else if (strcmp(a, "--exp") == 0) {
            o->exps = strcmp(v, "1") == 0      ? 1
                      : strcmp(v, "2") == 0    ? 2
                      : strcmp(v, "both") == 0 ? 3
                                               : 0;
            ok = o->exps != 0;
            if (!ok) {
                fprintf(stderr, "dimmer-sim power: --exp: 1, 2 or both, not '%s'\n", v);
            }
        } else if (strcmp(a, "--periods") == 0) {
            o->nperiods = dm_sim_opt_list(EXP, a, v, o->periods, 4);
            ok = o->nperiods > 0;
            for (int k = 0; ok && k < o->nperiods; k++) {
                ok = o->periods[k] >= 0.1 && o->periods[k] <= 600;
                if (!ok) {
                    fprintf(stderr, "dimmer-sim power: --periods: each in [0.1, 600] s, not %g\n",
                            o->periods[k]);
                }
            }
        } else if (strcmp(a, "--policies") == 0) {
            ok = parse_list_names(v, o->policies, MAX_POLICIES, &o->npolicies, policies);
            if (!ok) {
                fprintf(stderr,
                        "dimmer-sim power: --policies: a list of always-on, single, "
                        "dual, multi, flexible, boot-aware, oracle, static, not '%s'\n",
                        v);
            }
        } else if (strcmp(a, "--mech") == 0) {
            char names[MECHS][32];
            int n = 0;
            p->mech = 0;
            if (strcmp(v, "all") == 0) {
                p->mech = M_ALL;
            } else if (strcmp(v, "none") != 0) {
                ok = parse_list_names(v, names, MECHS, &n, mech_names);
                for (int k = 0; ok && k < n; k++) {
                    for (int m = 0; m < MECHS; m++) {
                        p->mech |= strcmp(names[k], mech_names[m]) == 0 ? 1u << m : 0;
                    }
                }
                if (!ok) {
                    fprintf(stderr,
                            "dimmer-sim power: --mech: all, none or a list of affinity, "
                            "abrupt, saturation, burst, bounds, not '%s'\n",
                            v);
                }
            }
        } else if (strcmp(a, "--balancer") == 0) {
            ok = dm_balancer_find(v) != NULL && strlen(v) < sizeof(p->balancer);
            if (ok) {
                snprintf(p->balancer, sizeof(p->balancer), "%s", v);
            } else {
                fprintf(stderr, "dimmer-sim power: --balancer: no balancer '%s'\n", v);
            }
        } else if (strcmp(a, "--servers") == 0) {
            ok = dm_sim_opt_unsigned(EXP, a, v, 1, MAX_SERVERS, &p->servers);
        } else if (strcmp(a, "--slots") == 0) {
            ok = dm_sim_opt_unsigned(EXP, a, v, 1, 4096, &p->slots);
        } else if (strcmp(a, "--discipline") == 0) {
            ok = dm_sim_opt_disc(EXP, a, v, &p->disc);
        } else if (strcmp(a, "--queue-order") == 0) {
            ok = v != NULL && (strcmp(v, "page") == 0 || strcmp(v, "arrival") == 0);
            if (ok) {
                p->page_order = strcmp(v, "page") == 0;
            } else {
                fprintf(stderr, "dimmer-sim power: --queue-order wants arrival or page\n");
            }
        } else if (strcmp(a, "--sessions") == 0) {
            ok = dm_sim_opt_double(EXP, a, v, 1, 100000, &p->max_sessions);
            o->sessions_set = true;
        } else if (strcmp(a, "--conns") == 0) {
            ok = dm_sim_opt_unsigned(EXP, a, v, 1, MAX_CONNS, &p->conns);
        } else if (strcmp(a, "--seeds") == 0) {
            ok = dm_sim_opt_unsigned(EXP, a, v, 1, 100, &p->seeds);
        } else if (strcmp(a, "--tcp-max") == 0) {
            p->tcp_max_auto = v != NULL && strcmp(v, "auto") == 0;
            ok = p->tcp_max_auto || dm_sim_opt_double(EXP, a, v, 1, 1e6, &p->tcp_max);
        } else {
            static const struct {
                const char *name;
                size_t off;
                double lo, hi;
            } num[] = {
                { "--full-w", offsetof(struct pw_params, full_w), 1, 1e4 },
                { "--idle-w", offsetof(struct pw_params, idle_w), 0, 1e4 },
                { "--asleep-w", offsetof(struct pw_params, asleep_w), 0, 1e4 },
                { "--booting-w", offsetof(struct pw_params, booting_w), 0, 1e4 },
                { "--sat-w", offsetof(struct pw_params, sat_w), 0, 1e4 },
                { "--boot", offsetof(struct pw_params, boot_s), 0, 3600 },
                { "--time-scale", offsetof(struct pw_params, time_scale), 0.01, 100 },
                { "--ramp", offsetof(struct pw_params, ramp_s), 0, 3600 },
                { "--think", offsetof(struct pw_params, think_s), 0.01, 3600 },
                { "--objects", offsetof(struct pw_params, objects), 0, 1000 },
                { "--page-work", offsetof(struct pw_params, page_work), 1e-6, 1000 },
                { "--obj-work", offsetof(struct pw_params, obj_work), 1e-6, 1000 },
                { "--session-pages", offsetof(struct pw_params, session_pages), 1, 1e6 },
                { "--t1", offsetof(struct pw_params, t1_w), 1, 1e4 },
                { "--min-change", offsetof(struct pw_params, min_change_s), 0, 3600 },
                { "--drain-timeout", offsetof(struct pw_params, drain_timeout_s), 0, 3600 },
                { "--slow-start", offsetof(struct pw_params, slow_start_s), 0, 3600 },
                { "--delay-off", offsetof(struct pw_params, delay_off_s), 0, 3600 },
                { "--margin", offsetof(struct pw_params, margin), 0, 100 },
                { "--history", offsetof(struct pw_params, history_s), 0, 1e7 },
                { "--page-bound", offsetof(struct pw_params, page_bound_s), 0.001, 3600 },
                { "--oracle-u", offsetof(struct pw_params, oracle_u), 0.05, 1 },
                { "--static-n", offsetof(struct pw_params, static_n), 0, 10000 },
            };
            size_t k = 0;
            while (k < sizeof(num) / sizeof(num[0]) && strcmp(num[k].name, a) != 0) {
                k++;
            }
            if (k == sizeof(num) / sizeof(num[0])) {
                fprintf(stderr, "dimmer-sim power: unknown option %s (dimmer-sim power --help)\n",
                        a);
                return 2;
            }
            ok = dm_sim_opt_double(EXP, a, v, num[k].lo, num[k].hi,
                                   (double *)((char *)p + num[k].off));
        }
        if (!ok) {
            return 2;
        }
        i += takes;
    }
    if (p->idle_w > p->full_w) {
        fprintf(stderr, "dimmer-sim power: --idle-w must not exceed --full-w\n");
        return 2;
    }
    if (p->asleep_w > p->idle_w) {
        fprintf(stderr, "dimmer-sim power: --asleep-w must not exceed --idle-w\n");
        return 2;
    }
    if (p->page_order && p->disc != DM_SIM_FIFO) {
        fprintf(stderr, "dimmer-sim power: --queue-order page needs --discipline fifo (a queue "
                        "to order)\n");
        return 2;
    }
    return 0;
}

static void
mech_text(unsigned mech, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int m = 0; m < MECHS; m++) {
        if (mech & (1u << m)) {
            o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? "," : "", mech_names[m]);
        }
    }
    if (o == 0) {
        snprintf(buf, len, "none");
    }
}

/* Index of a policy in the list, or -1. */
static int
policy_index(const struct opts *o, const char *name)
{
    for (int i = 0; i < o->npolicies; i++) {
        if (strcmp(o->policies[i], name) == 0) {
            return i;
        }
    }
    return -1;
}

static int
ablation(const struct dm_sim_ctx *ctx, const struct opts *o, const struct pw_params *base)
{
    /* Experiment II at the first period: all on, none, and each one off alone. */
    unsigned variants[2 * MECHS + 2];
    size_t nv = 0;
    variants[nv++] = M_ALL;
    for (int m = 0; m < MECHS; m++) {
        variants[nv++] = M_ALL & ~(1u << m);
    }
    variants[nv++] = 0;
    for (int m = 0; m < MECHS; m++) {
        variants[nv++] = 1u << m;
    }
    size_t np = (size_t)o->npolicies;
    struct job *jobs = calloc(nv * np, sizeof(*jobs));
    if (jobs == NULL) {
        return 1;
    }
    for (size_t v = 0; v < nv; v++) {
        for (size_t k = 0; k < np; k++) {
            struct job *j = &jobs[v * np + k];
            j->p = *base;
            j->p.mech = variants[v];
            j->p.timeline = false;
            j->p.seeds = 1;
            snprintf(j->p.policy, sizeof(j->p.policy), "%s", o->policies[k]);
        }
    }
    dm_sim_parallel(ctx->jobs, nv * np, job_cb, jobs);
    const char *h[2 + MAX_POLICIES + 1];
    h[0] = "mechanisms";
    h[1] = "off";
    for (size_t k = 0; k < np; k++) {
        h[2 + k] = o->policies[k];
    }
    h[2 + np] = "paper's order";
    char title[256];
    snprintf(title, sizeof(title),
             "Which mechanism reproduces the paper's ordering: Experiment II, %g s period, "
             "normalized QoS %% by policy",
             base->period_s);
    struct dm_sim_table *t = dm_sim_table_create("power_mechanisms", title, 3 + np, h);
    int ia = policy_index(o, "always-on"), is = policy_index(o, "single"),
        id = policy_index(o, "dual"), im = policy_index(o, "multi");
    int rc = 0;
    for (size_t v = 0; v < nv; v++) {
        char on[128];
        mech_text(variants[v], on, sizeof(on));
        char off[128];
        mech_text(M_ALL & ~variants[v], off, sizeof(off));
        dm_sim_table_cell(t, "%s", on);
        dm_sim_table_cell(t, "%s", off);
        double q[MAX_POLICIES];
        const struct pw_result *ref = ia >= 0 ? &jobs[v * np + (size_t)ia].r : NULL;
        for (size_t k = 0; k < np; k++) {
            const struct pw_result *r = &jobs[v * np + k].r;
            rc |= jobs[v * np + k].rc;
            double thru = ref != NULL ? pct(r->valid, ref->valid) : 100;
            q[k] = pct(r->good, r->valid) * thru / 100;
            dm_sim_table_cell(t, "%.1f", q[k]);
        }
        bool order = ia >= 0 && is >= 0 && id >= 0 && im >= 0 && q[ia] > q[im] && q[im] > q[id] &&
                     q[id] > q[is];
        dm_sim_table_cell(t, "%s",
                          ia < 0 || is < 0 || id < 0 || im < 0 ? "n/a"
                          : order                              ? "yes"
                                                               : "no");
    }
    dm_sim_table_note(t, "paper's order: always-on > multi > dual > single in normalized QoS "
                         "(Table 8: 98.7, 88.3, 65.5, 54.4).");
    rc |= dm_sim_table_emit(ctx, t);
    dm_sim_table_destroy(t);
    free(jobs);
    return rc != 0;
}

/*
 * Whether the runs asked would take hours (a mistyped option: a hundred
 * thousand sessions of a thousand objects played a hundred times slower),
 * said on stderr. Counted before any run, at most: the pattern's
 * session-seconds, each session asking a page and its objects every think
 * time.
 */
static bool
power_too_much(const struct opts *o, bool quick)
{
    double requests = 0;
    for (int e = 1; e <= 2; e++) {
        if (!(o->exps & e)) {
            continue;
        }
        double sessions = o->sessions_set ? o->p.max_sessions : e == 1 ? 1200 : 800;
        sessions = quick ? sessions * 6 / 15 : sessions;
        struct dm_load_pattern pat = { 0 };
        char err[256];
        if (dm_load_pattern_builtin(&pat, e == 1 ? "exp1" : "exp2", sessions, err, sizeof(err)) !=
            0) {
            continue; /* said by the run that builds it */
        }
        double session_s = 0;
        for (size_t i = 1; i < pat.n; i++) {
            session_s += (pat.t[i] - pat.t[i - 1]) * (pat.sessions[i] + pat.sessions[i - 1]) / 2;
        }
        dm_load_pattern_fini(&pat);
        double scale = o->p.time_scale * (quick ? 10 : 1);
        double run = session_s / scale * (1 + o->p.objects) / o->p.think_s * (o->p.warm ? 2 : 1);
        double runs = (double)o->npolicies * o->nperiods * o->p.seeds;
        if (e == 2 && o->ablation) {
            runs += (2.0 * MECHS + 2) * o->npolicies;
        }
        requests += run * runs;
    }
    if (requests <= POWER_MAX_REQUESTS) {
        return false;
    }
    fprintf(stderr,
            "dimmer-sim power: up to %.2g requests over its runs, more than %.0g (an hour of "
            "work or more): ask for fewer --sessions or --objects, a longer --think, a larger "
            "--time-scale, fewer --policies, --periods or --seeds, or --no-ablation\n",
            requests, POWER_MAX_REQUESTS);
    return true;
}

static int
power_run(const struct dm_sim_ctx *ctx, int argc, char **argv)
{
    struct opts o;
    memset(&o, 0, sizeof(o));
    int prc = parse(argc, argv, &o);
    if (prc != 0) {
        return prc;
    }
    o.p.seed = ctx->seed;
    if (power_too_much(&o, ctx->quick)) {
        return 2;
    }
    if (ctx->quick) {
        o.p.time_scale = o.p.time_scale * 10;
        o.p.servers = o.p.servers > 6 ? 6 : o.p.servers;
    }
    int rc = 0;
    for (int e = 1; e <= 2; e++) {
        if (!(o.exps & e)) {
            continue;
        }
        struct pw_params base = o.p;
        snprintf(base.pattern, sizeof(base.pattern), "exp%d", e);
        if (!o.sessions_set) {
            base.max_sessions = e == 1 ? 1200 : 800;
        }
        if (ctx->quick) {
            base.max_sessions = base.max_sessions * 6 / 15;
        }
        size_t np = (size_t)o.npolicies, nper = (size_t)o.nperiods;
        struct job *jobs = calloc(np * nper, sizeof(*jobs));
        if (jobs == NULL) {
            return 1;
        }
        for (size_t q = 0; q < nper; q++) {
            for (size_t k = 0; k < np; k++) {
                struct job *j = &jobs[q * np + k];
                j->p = base;
                j->p.period_s = o.periods[q];
                j->p.timeline = true;
                snprintf(j->p.policy, sizeof(j->p.policy), "%s", o.policies[k]);
            }
        }
        dm_sim_parallel(ctx->jobs, np * nper, job_cb, jobs);
        char ramp[64] = "";
        if (base.ramp_s > 0) {
            /* Every run widened the same pattern: said once, from the first. */
            double got = jobs[0].r.ramp_s;
            if (got < base.ramp_s) {
                fprintf(stderr,
                        "dimmer-sim power: --ramp %g: exp%d's levels leave room for %g s "
                        "ramps at the shortest\n",
                        base.ramp_s, e, got);
            }
            snprintf(ramp, sizeof(ramp), ", ramps %g s", isinf(got) ? base.ramp_s : got);
        }
        int ia = policy_index(&o, "always-on");
        for (size_t q = 0; q < nper; q++) {
            char name[64], title[512], mech[128];
            mech_text(base.mech, mech, sizeof(mech));
            snprintf(name, sizeof(name), "power_exp%d_%gs", e, o.periods[q]);
            snprintf(title, sizeof(title),
                     "Experiment %s (%s, %.0f sessions at most, %.0f s%s%s), %g s period: %u "
                     "servers, %s, mechanisms %s",
                     e == 1 ? "I" : "II", e == 1 ? "a day in an hour" : "rapid changes",
                     base.max_sessions, jobs[q * np].r.seconds, ramp,
                     base.warm ? ", the second of two plays (--warm)" : "", o.periods[q],
                     base.servers, base.balancer, mech);
            for (size_t k = 0; k < np; k++) {
                rc |= jobs[q * np + k].rc != 0;
            }
            rc |= emit_table(ctx, name, title, jobs + q * np, np, ia >= 0 ? (size_t)ia : 0) != 0;
            emit_plot(ctx, name, title, jobs + q * np, np);
        }
        for (size_t i = 0; i < np * nper; i++) {
            free(jobs[i].r.series);
        }
        free(jobs);
        if (e == 2 && o.ablation) {
            base.period_s = o.periods[0];
            rc |= ablation(ctx, &o, &base);
        }
    }
    return rc;
}

const struct dm_sim_exp dm_sim_exp_power = {
    .name = "power",
    .summary = "power control as the seed power paper (Tables 6-9, Figs. 30-32), boot-aware too",
    .usage = usage_text,
    .run = power_run,
};
