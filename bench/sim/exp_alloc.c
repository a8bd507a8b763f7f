/*
 * Experiment 5, "alloc": session allocation for game streaming (Kim 2020,
 * ../shared/papers/game-streaming-allocation.txt; DESIGN.md "Session
 * allocation"), on the pure allocator of balancers/alloc.h. It reproduces
 * the paper's Figs. 6-12:
 *
 *   6   LBF of RANDOM, GREEDY and SA (SA starts from GREEDY)
 *   7   LBF against DVMAX            8   LBF against the number of games K
 *   9   LBF against the clients      10  LBF against LHR (share of low-rate games)
 *   11  Unalloc Clients, FU and utilisation against the clients, FMAX 22,000
 *   12  the same against LHR, FMAX 22,000
 *
 * An instance: K games, each with a per-frame load drawn as a whole number
 * in 15..60 (a property of the game: Fig. 8's argument is that more games
 * give more distinct loads) and a rate list, {15,20,25,30} for the first
 * round(LHR * K) games and {30,35,40,45} for the others; each group of L
 * clients (the last one smaller when L does not divide the clients) plays a
 * game drawn uniformly and asks for its highest rate; each client's delay to
 * each server is uniform in 50..150 ms. Loads are per-frame load * rate.
 *
 * Feasibility: the paper's 10,000 clients are 1,667 sessions of about
 * 37.5 * 37.5 = 1,400 each, some 2.3 million in all, seven times the 320,000
 * that 8 servers of FMAX 40,000 carry, while Figs. 6-10 place everyone
 * without lowering a rate. The default reading is therefore 1,000 clients
 * (167 groups, about 73% of capacity): the largest round count at which the
 * requested rates fit with room for the greedy to place every group, and
 * with FMAX 22,000 (Figs. 11-12) the point where demand passes capacity
 * (about 750 clients) lies inside the swept range, as in Fig. 11.
 *
 * Each point is averaged over --seeds instances; instance s of a point uses
 * the seed derived from (--seed, s) alone, so the curves of a figure share
 * their instances (common random numbers) and the output is the same
 * whatever --jobs.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/alloc.h"
#include "balancers/rng.h"
#include "bench/sim/exp.h"
#include "bench/sim/sim.h"

#define NAME     "alloc"
#define MAX_LIST 32
#define NBUDGET  4 /* Fig. 6's extra SA rows: 1/1000, 1/100, 1/10 of the iterations, descent */
/* What one command may ask: about an hour of CPU, at the rates measured here
 * (client-server delays looked at, annealing iterations, a second each) and
 * an instance's delays (8 bytes a client and server) within 2 GiB. */
#define WORK_MAX_S     3600.0
#define CELLS_A_SECOND 2.4e7
#define ITERS_A_SECOND 3e6
#define CELLS_MAX      2.5e8

static const double low_rates[] = { 15, 20, 25, 30 };
static const double high_rates[] = { 30, 35, 40, 45 };

struct params {
    unsigned clients, group, servers, games;
    double fmax, dmax, dvmax, lhr;
    double delay_lo, delay_hi, load_lo, load_hi;
    double alpha, t0;
    uint64_t iterations;
};

enum kind { BALANCE, RATES };

/* What one run measures. */
struct result {
    double lbf[3];          /* RANDOM, GREEDY, SA */
    double unplaced[3];     /* % of clients left unplaced by each */
    double util[3];         /* utilisation after each, % */
    double eligible;        /* servers per group within DMAX and DVMAX */
    double demand;          /* requested load / capacity, % */
    double unalloc;         /* % of clients greedy cannot place at the requested rates */
    double fu, fu_util;     /* after Client_Server_Alloc, % */
    double left;            /* % of clients unplaced after it */
    double budget[NBUDGET]; /* Fig. 6: LBF of SA on smaller budgets, and of descent (t0 0) */
    int failed;             /* out of memory */
};

struct job {
    struct params prm;
    enum kind kind;
    bool budgets; /* Fig. 6: also run SA on smaller budgets */
    uint64_t seed;
    struct result r;
};

static uint64_t
mix(uint64_t a, uint64_t b)
{
    struct dm_rng r;
    dm_rng_init(&r, a ^ (b * 0x9e3779b97f4a7c15ULL));
    return dm_rng_next(&r);
}

/* The schedule: T falls 1000-fold over the run, in 100 geometric steps. */
static struct dm_alloc_sa
schedule(const struct params *prm)
{
    uint64_t steps = prm->iterations / 100 > 0 ? prm->iterations / 100 : 1;
    return (struct dm_alloc_sa){
        .iterations = prm->iterations,
        .t0 = prm->t0,
        .cooling = pow(1e-3, 1.0 / 100),
        .steps = steps,
    };
}

struct instance {
    struct dm_alloc_server *servers;
    struct dm_alloc_group *groups;
    double *delays;
    struct dm_alloc_problem p;
};

static void
instance_fini(struct instance *in)
{
    free(in->servers);
    free(in->groups);
    free(in->delays);
    *in = (struct instance){ 0 };
}

static int
instance_init(struct instance *in, const struct params *prm, uint64_t seed)
{
    *in = (struct instance){ 0 };
    size_t m = prm->servers, n = (prm->clients + prm->group - 1) / prm->group;
    double game_load[256];
    struct dm_rng rng;
    dm_rng_init(&rng, seed);
    unsigned span = (unsigned)(prm->load_hi - prm->load_lo);
    for (unsigned k = 0; k < prm->games; k++) {
        game_load[k] = prm->load_lo + (double)dm_rng_below(&rng, span + 1);
    }
    unsigned nlow = (unsigned)lround(prm->lhr * prm->games);
    in->servers = calloc(m, sizeof(*in->servers));
    in->groups = calloc(n > 0 ? n : 1, sizeof(*in->groups));
    in->delays = calloc((size_t)prm->clients * m + 1, sizeof(*in->delays));
    if (in->servers == NULL || in->groups == NULL || in->delays == NULL) {
        instance_fini(in);
        return -1;
    }
    for (size_t s = 0; s < m; s++) {
        in->servers[s] = (struct dm_alloc_server){ .capacity = prm->fmax };
    }
    size_t c = 0;
    for (size_t g = 0; g < n; g++) {
        unsigned k = (unsigned)dm_rng_below(&rng, prm->games);
        size_t size = prm->clients - c < prm->group ? prm->clients - c : prm->group;
        in->groups[g] = (struct dm_alloc_group){
            .frame_load = game_load[k],
            .rates = k < nlow ? low_rates : high_rates,
            .nrates = 4,
            .want = 3,
            .nclients = size,
            .delay_ms = in->delays + c * m,
        };
        for (size_t i = 0; i < size * m; i++) {
            in->delays[c * m + i] =
                prm->delay_lo + (prm->delay_hi - prm->delay_lo) * dm_sim_uniform(&rng);
        }
        c += size;
    }
    in->p = (struct dm_alloc_problem){
        .servers = in->servers,
        .nservers = m,
        .groups = in->groups,
        .ngroups = n,
        .dmax_ms = prm->dmax,
        .dvmax_ms = prm->dvmax,
    };
    return 0;
}

/* Servers per group within the delay limits (the paper's "selectable servers"). */
static double
eligible_servers(const struct instance *in)
{
    const struct dm_alloc_problem *p = &in->p;
    double sum = 0;
    for (size_t g = 0; g < p->ngroups; g++) {
        const struct dm_alloc_group *gr = &p->groups[g];
        for (size_t s = 0; s < p->nservers; s++) {
            double lo = HUGE_VAL, hi = -HUGE_VAL;
            for (size_t c = 0; c < gr->nclients; c++) {
                double d = gr->delay_ms[c * p->nservers + s];
                lo = fmin(lo, d);
                hi = fmax(hi, d);
            }
            sum += hi <= p->dmax_ms && hi - lo <= p->dvmax_ms;
        }
    }
    return p->ngroups > 0 ? sum / (double)p->ngroups : 0;
}

static double
pct_unplaced(const struct dm_alloc *a)
{
    struct dm_alloc_stats st;
    dm_alloc_stats(a, &st);
    return st.clients > 0 ? 100.0 * (double)st.unplaced_clients / (double)st.clients : 0;
}

static double
utilisation(const struct dm_alloc *a)
{
    struct dm_alloc_stats st;
    dm_alloc_stats(a, &st);
    return 100 * st.utilisation;
}

static void
run_balance(struct job *j, struct instance *in, struct dm_alloc *a)
{
    struct dm_rng rng;
    dm_rng_init(&rng, mix(j->seed, 1));
    struct dm_alloc_sa sa = schedule(&j->prm);
    dm_alloc_random(a, &rng);
    j->r.lbf[0] = dm_alloc_lbf(a);
    j->r.unplaced[0] = pct_unplaced(a);
    j->r.util[0] = utilisation(a);
    dm_alloc_clear(a);
    dm_alloc_greedy(a);
    j->r.lbf[1] = dm_alloc_lbf(a);
    j->r.unplaced[1] = pct_unplaced(a);
    j->r.util[1] = utilisation(a);
    dm_alloc_anneal(a, &sa, &rng);
    j->r.lbf[2] = dm_alloc_lbf(a);
    j->r.unplaced[2] = pct_unplaced(a);
    j->r.util[2] = utilisation(a);
    j->r.eligible = eligible_servers(in);
    for (int b = 0; j->budgets && b < NBUDGET; b++) {
        struct dm_alloc_sa small = sa;
        if (b < NBUDGET - 1) {
            small.iterations = sa.iterations / (b == 0 ? 1000 : b == 1 ? 100 : 10);
            small.steps = small.iterations / 100 > 0 ? small.iterations / 100 : 1;
        } else {
            small.t0 = 0;
        }
        dm_rng_init(&rng, mix(j->seed, 10 + (uint64_t)b));
        dm_alloc_clear(a);
        dm_alloc_greedy(a);
        dm_alloc_anneal(a, &small, &rng);
        j->r.budget[b] = dm_alloc_lbf(a);
    }
}

static void
run_rates(struct job *j, struct instance *in, struct dm_alloc *a)
{
    struct dm_rng rng;
    dm_rng_init(&rng, mix(j->seed, 2));
    double demand = 0;
    for (size_t g = 0; g < in->p.ngroups; g++) {
        demand += dm_alloc_group_load(&in->groups[g], in->groups[g].want);
    }
    j->r.demand = 100 * demand / (j->prm.fmax * j->prm.servers);
    dm_alloc_greedy(a);
    j->r.unalloc = pct_unplaced(a);
    struct dm_alloc_conf cf = {
        .alpha = j->prm.alpha,
        .balance = schedule(&j->prm),
        .rates = schedule(&j->prm),
    };
    dm_alloc_solve(a, &cf, &rng);
    struct dm_alloc_stats st;
    dm_alloc_stats(a, &st);
    j->r.fu = 100 * st.fu;
    j->r.fu_util = 100 * st.utilisation;
    j->r.left = pct_unplaced(a);
}

static void
run_job(size_t i, void *arg)
{
    struct job *j = (struct job *)arg + i;
    struct instance in;
    struct dm_alloc a;
    if (instance_init(&in, &j->prm, j->seed) != 0) {
        j->r.failed = 1;
        return;
    }
    if (dm_alloc_init(&a, &in.p, 0) != 0) {
        j->r.failed = 1;
        instance_fini(&in);
        return;
    }
    if (j->kind == BALANCE) {
        run_balance(j, &in, &a);
    } else {
        run_rates(j, &in, &a);
    }
    dm_alloc_fini(&a);
    instance_fini(&in);
}

/* ---- figures ---- */

enum axis { AX_METHOD, AX_DVMAX, AX_GAMES, AX_CLIENTS, AX_LHR };

struct figure {
    int number;
    enum kind kind;
    enum axis axis;
    const char *xlabel;
    double fmax_over; /* Figs. 11-12 run at --fmax-rates */
    double xs[MAX_LIST];
    int nx;
};

static void
set_x(struct params *prm, enum axis axis, double x)
{
    switch (axis) {
    case AX_METHOD:
        break;
    case AX_DVMAX:
        prm->dvmax = x;
        break;
    case AX_GAMES:
        prm->games = (unsigned)x;
        break;
    case AX_CLIENTS:
        prm->clients = (unsigned)x;
        break;
    case AX_LHR:
        prm->lhr = x;
        break;
    }
}

static double
mean_of(const struct job *jobs, unsigned seeds, size_t off)
{
    double s = 0;
    for (unsigned k = 0; k < seeds; k++) {
        s += *(const double *)((const char *)&jobs[k].r + off);
    }
    return s / seeds;
}

#define MEAN(field) mean_of(js, seeds, offsetof(struct result, field))

static int
emit_balance(const struct dm_sim_ctx *ctx, const struct figure *f, const struct job *jobs,
             unsigned seeds)
{
    char name[32], title[160], script[1024];
    snprintf(name, sizeof(name), "alloc_fig%d", f->number);
    int rc = 0;
    if (f->axis == AX_METHOD) {
        static const char *const h[] = { "method", "LBF", "vs GREEDY %", "unplaced clients %",
                                         "utilisation %" };
        static const char *const methods[] = { "RANDOM", "GREEDY" };
        snprintf(title, sizeof(title),
                 "alloc: Fig. 6, LBF by method (%u clients, %u servers, K %u, FMAX %g, mean of "
                 "%u seeds)",
                 jobs[0].prm.clients, jobs[0].prm.servers, jobs[0].prm.games, jobs[0].prm.fmax,
                 seeds);
        struct dm_sim_table *t = dm_sim_table_create(name, title, 5, h);
        const struct job *js = jobs;
        double greedy = MEAN(lbf[1]);
        uint64_t it = jobs[0].prm.iterations;
        /* Rows: RANDOM, GREEDY, SA on 1/1000, 1/100, 1/10 and all of --iterations, descent. */
        static const int row_budget[] = { -1, -1, 0, 1, 2, -1, 3 };
        static const unsigned row_div[] = { 0, 0, 1000, 100, 10, 1, 0 };
        for (int row = 0; row < 7; row++) {
            int b = row_budget[row], m = row < 2 ? row : 2;
            double l =
                b >= 0
                    ? mean_of(js, seeds,
                              offsetof(struct result, budget) + (size_t)b * sizeof(double))
                    : mean_of(js, seeds, offsetof(struct result, lbf) + (size_t)m * sizeof(double));
            if (row < 2) {
                dm_sim_table_cell(t, "%s", methods[row]);
            } else if (row < 6) {
                dm_sim_table_cell(t, "SA, %llu iterations",
                                  (unsigned long long)(it / row_div[row]));
            } else {
                dm_sim_table_cell(t, "SA, descent only (t0 0)");
            }
            dm_sim_table_cell(t, "%.1f", l);
            dm_sim_table_cell(t, "%+.1f", greedy > 0 ? 100 * (l - greedy) / greedy : 0);
            /* SA never changes who is placed: its rows share GREEDY's count. */
            dm_sim_table_cell(
                t, "%.2f",
                mean_of(js, seeds, offsetof(struct result, unplaced) + (size_t)m * sizeof(double)));
            dm_sim_table_cell(
                t, "%.1f",
                mean_of(js, seeds, offsetof(struct result, util) + (size_t)m * sizeof(double)));
        }
        dm_sim_table_note(t, "paper: SA about 70%% below GREEDY, RANDOM far above both");
        rc = dm_sim_table_emit(ctx, t);
        dm_sim_table_destroy(t);
        snprintf(script, sizeof(script),
                 "set datafile separator ','\nset style data histogram\nset style fill solid 0.6\n"
                 "set boxwidth 0.6\nset ylabel 'LBF (std. dev. of server load)'\nset title "
                 "'Fig. 6: load balance by method'\nunset key\n"
                 "set xtics rotate by -30\nset logscale y\nplot '%s.csv' using 2:xtic(1)\n",
                 name);
        dm_sim_plot(ctx, name, script);
        return rc;
    }
    static const char *const h[] = { "x",          "RANDOM",       "GREEDY", "SA", "SA vs GREEDY %",
                                     "unplaced %", "servers/group" };
    const char *hh[7];
    memcpy(hh, h, sizeof(hh));
    hh[0] = f->xlabel;
    snprintf(title, sizeof(title), "alloc: Fig. %d, LBF against %s (mean of %u seeds)", f->number,
             f->xlabel, seeds);
    struct dm_sim_table *t = dm_sim_table_create(name, title, 7, hh);
    for (int x = 0; x < f->nx; x++) {
        const struct job *js = jobs + (size_t)x * seeds;
        double g = MEAN(lbf[1]), s = MEAN(lbf[2]);
        dm_sim_table_cell(t, "%g", f->xs[x]);
        dm_sim_table_cell(t, "%.1f", MEAN(lbf[0]));
        dm_sim_table_cell(t, "%.1f", g);
        dm_sim_table_cell(t, "%.1f", s);
        dm_sim_table_cell(t, "%+.1f", g > 0 ? 100 * (s - g) / g : 0);
        dm_sim_table_cell(t, "%.2f", MEAN(unplaced[1]));
        dm_sim_table_cell(t, "%.2f", MEAN(eligible));
    }
    dm_sim_table_note(t, "unplaced: %% of clients GREEDY (and so SA) could not place; "
                         "servers/group: servers within DMAX and DVMAX of a group");
    switch (f->axis) {
    case AX_DVMAX:
        dm_sim_table_note(t, "paper: LBF falls as DVMAX grows and is flat above about 100");
        break;
    case AX_GAMES:
        dm_sim_table_note(t, "paper: LBF falls as K grows (more distinct session loads)");
        break;
    case AX_CLIENTS:
        dm_sim_table_note(t, "paper: no consistent effect once clients are many per server");
        break;
    default:
        dm_sim_table_note(t, "paper: LBF falls as LHR grows (lighter, closer session loads)");
        break;
    }
    rc = dm_sim_table_emit(ctx, t);
    dm_sim_table_destroy(t);
    snprintf(script, sizeof(script),
             "set datafile separator ','\nset key autotitle columnhead\nset xlabel '%s'\n"
             "set ylabel 'LBF (std. dev. of server load)'\nset logscale y\n"
             "set title 'Fig. %d: load balance against %s'\n"
             "plot for [c=2:4] '%s.csv' using 1:c with linespoints lw 2\n",
             f->xlabel, f->number, f->xlabel, name);
    dm_sim_plot(ctx, name, script);
    return rc;
}

static int
emit_rates(const struct dm_sim_ctx *ctx, const struct figure *f, const struct job *jobs,
           unsigned seeds)
{
    char name[32], title[160], script[1024];
    snprintf(name, sizeof(name), "alloc_fig%d", f->number);
    static const char *const h[] = { "x",    "demand %",      "Unalloc Clients %",
                                     "FU %", "Utilization %", "unplaced after %" };
    const char *hh[6];
    memcpy(hh, h, sizeof(hh));
    hh[0] = f->xlabel;
    snprintf(title, sizeof(title),
             "alloc: Fig. %d, frame-rate adjustment against %s (FMAX %g, mean of %u seeds)",
             f->number, f->xlabel, jobs[0].prm.fmax, seeds);
    struct dm_sim_table *t = dm_sim_table_create(name, title, 6, hh);
    for (int x = 0; x < f->nx; x++) {
        const struct job *js = jobs + (size_t)x * seeds;
        dm_sim_table_cell(t, "%g", f->xs[x]);
        dm_sim_table_cell(t, "%.1f", MEAN(demand));
        dm_sim_table_cell(t, "%.2f", MEAN(unalloc));
        dm_sim_table_cell(t, "%.2f", MEAN(fu));
        dm_sim_table_cell(t, "%.2f", MEAN(fu_util));
        dm_sim_table_cell(t, "%.2f", MEAN(left));
    }
    dm_sim_table_note(t, "demand: requested load / capacity; Unalloc Clients: %% of clients "
                         "GREEDY cannot place at the requested rates;");
    dm_sim_table_note(t, "FU, Utilization, unplaced after: after Client_Server_Alloc (rates "
                         "lowered when demand >= alpha * capacity)");
    dm_sim_table_note(t, f->axis == AX_CLIENTS
                             ? "paper: past the capacity, Unalloc Clients rises, FU falls, "
                               "utilisation nears 100%%"
                             : "paper: as LHR grows, Unalloc Clients falls and FU rises");
    int rc = dm_sim_table_emit(ctx, t);
    dm_sim_table_destroy(t);
    snprintf(script, sizeof(script),
             "set datafile separator ','\nset key autotitle columnhead\nset xlabel '%s'\n"
             "set ylabel '%%'\nset yrange [0:105]\nset key center right\n"
             "set title 'Fig. %d: frame-rate adjustment against %s (FMAX %g)'\n"
             "plot for [c=3:5] '%s.csv' using 1:c with linespoints lw 2\n",
             f->xlabel, f->number, f->xlabel, jobs[0].prm.fmax, name);
    dm_sim_plot(ctx, name, script);
    return rc;
}

/* ---- the command line ---- */

static const char usage_text[] =
    "Session allocation for game streaming (Kim 2020): Figs. 6-12 of the paper.\n"
    "Every option has the paper's default except --clients: the paper's 10,000 clients\n"
    "(1,667 sessions of ~1,400 load) ask for ~7x what 8 servers of FMAX 40,000 carry,\n"
    "while Figs. 6-10 place everyone at the requested rates; 1,000 clients ask ~73%.\n"
    "\n"
    "  --clients N       clients arriving (default 1000); groups = ceil(N / L)\n"
    "  --group L         clients per group, one game session each (default 6)\n"
    "  --servers M       servers (default 8)\n"
    "  --games K         games (default 10); per-frame load of each drawn in --frame-load\n"
    "  --fmax F          capacity of a server, Figs. 6-10 (default 40000)\n"
    "  --fmax-rates F    capacity of a server, Figs. 11-12 (default 22000)\n"
    "  --dmax MS         largest client-server delay (default none: 'inf')\n"
    "  --dvmax MS        largest delay spread inside a group (default 100)\n"
    "  --lhr R           share of games with the low rate list {15,20,25,30}, the rest\n"
    "                    {30,35,40,45}; groups ask for the highest (default 0.5)\n"
    "  --delay LO,HI     client-server delays, uniform (default 50,150 ms)\n"
    "  --frame-load LO,HI  per-frame load of a game, a whole number (default 15,60)\n"
    "  --alpha A         Fig. 3's alpha: rates are lowered when demand >= A * capacity\n"
    "                    (default 1)\n"
    "  --iterations N    simulated-annealing iterations per run, both annealings\n"
    "                    (default 40000; --quick 4000)\n"
    "  --t0 T            starting temperature in mean group loads (balance) and in one\n"
    "                    group's request (rates); it falls 1000-fold over the run (default 0.05)\n"
    "  --seeds N         instances averaged per point (default 20; --quick 1)\n"
    "  --fig LIST        figures to run, e.g. 6,7,11 (default 6,7,8,9,10,11,12)\n";

static int
parse_pair(const char *opt, const char *val, double *lo, double *hi)
{
    double v[2];
    int n = dm_sim_opt_list(NAME, opt, val, v, 2);
    if (n < 0) {
        return -1;
    }
    if (n != 2 || !(v[0] >= 0 && v[0] <= v[1])) {
        fprintf(stderr, "dimmer-sim " NAME ": %s: want LO,HI with 0 <= LO <= HI\n", opt);
        return -1;
    }
    *lo = v[0];
    *hi = v[1];
    return 0;
}

static int
parse(int argc, char **argv, struct params *prm, double *fmax_rates, unsigned *seeds, bool *figs)
{
    /* Every option takes a value: two arguments a step. */
    for (int i = 1; i < argc; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (v == NULL) {
            fprintf(stderr, "dimmer-sim " NAME ": %s needs a value (" NAME " --help)\n", o);
            return 2;
        }
        double d;
        unsigned u;
        if (strcmp(o, "--clients") == 0) {
            ok = dm_sim_opt_unsigned(NAME, o, v, 1, 1000000, &prm->clients);
        } else if (strcmp(o, "--group") == 0) {
            ok = dm_sim_opt_unsigned(NAME, o, v, 1, 1000, &prm->group);
        } else if (strcmp(o, "--servers") == 0) {
            ok = dm_sim_opt_unsigned(NAME, o, v, 1, 10000, &prm->servers);
        } else if (strcmp(o, "--games") == 0) {
            ok = dm_sim_opt_unsigned(NAME, o, v, 1, 256, &prm->games);
        } else if (strcmp(o, "--fmax") == 0) {
            ok = dm_sim_opt_double(NAME, o, v, 1, 1e12, &prm->fmax);
        } else if (strcmp(o, "--fmax-rates") == 0) {
            ok = dm_sim_opt_double(NAME, o, v, 1, 1e12, fmax_rates);
        } else if (strcmp(o, "--dmax") == 0) {
            ok = dm_sim_opt_double(NAME, o, v, 0, HUGE_VAL, &prm->dmax);
        } else if (strcmp(o, "--dvmax") == 0) {
            ok = dm_sim_opt_double(NAME, o, v, 0, HUGE_VAL, &prm->dvmax);
        } else if (strcmp(o, "--lhr") == 0) {
            ok = dm_sim_opt_double(NAME, o, v, 0, 1, &prm->lhr);
        } else if (strcmp(o, "--delay") == 0) {
            ok = parse_pair(o, v, &prm->delay_lo, &prm->delay_hi) == 0;
        } else if (strcmp(o, "--frame-load") == 0) {
            ok = parse_pair(o, v, &prm->load_lo, &prm->load_hi) == 0;
            if (ok && (prm->load_lo != floor(prm->load_lo) || prm->load_hi != floor(prm->load_hi) ||
                       prm->load_lo < 1 || prm->load_hi > 1e9)) {
                /* A game whose frames cost nothing asks nothing to place. */
                fprintf(stderr, "dimmer-sim " NAME ": %s: want whole numbers from 1 to 1e9\n", o);
                ok = false;
            }
        } else if (strcmp(o, "--alpha") == 0) {
            ok = dm_sim_opt_double(NAME, o, v, 0, 100, &prm->alpha);
        } else if (strcmp(o, "--iterations") == 0) {
            ok = dm_sim_opt_double(NAME, o, v, 0, 1e9, &d);
            prm->iterations = (uint64_t)d;
        } else if (strcmp(o, "--t0") == 0) {
            ok = dm_sim_opt_double(NAME, o, v, 0, 1e6, &prm->t0);
        } else if (strcmp(o, "--seeds") == 0) {
            ok = dm_sim_opt_unsigned(NAME, o, v, 1, 1000, &u);
            *seeds = u;
        } else if (strcmp(o, "--fig") == 0) {
            double list[MAX_LIST];
            int n = dm_sim_opt_list(NAME, o, v, list, MAX_LIST);
            ok = n > 0;
            memset(figs, 0, 13 * sizeof(*figs));
            for (int k = 0; ok && k < n; k++) {
                if (list[k] != floor(list[k]) || list[k] < 6 || list[k] > 12) {
                    fprintf(stderr, "dimmer-sim " NAME ": --fig: figures are 6 to 12\n");
                    ok = false;
                } else {
                    figs[(int)list[k]] = true;
                }
            }
        } else {
            fprintf(stderr, "dimmer-sim " NAME ": unknown option %s (" NAME " --help)\n", o);
            return 2;
        }
        if (!ok) {
            return 2;
        }
    }
    return 0;
}

/*
 * Whether the jobs would take hours or an instance more memory than a
 * machine has (a mistyped option: a million clients on ten thousand servers,
 * a billion iterations a thousand times), said on stderr. Counted before any
 * job runs.
 */
static bool
too_much(const struct job *jobs, size_t njobs)
{
    double work = 0, cells_max = 0;
    for (size_t k = 0; k < njobs; k++) {
        const struct params *p = &jobs[k].prm;
        double cells = (double)p->clients * p->servers;
        /* Fig. 6 anneals again on 1/1000, 1/100 and 1/10 of the budget and
         * descends on all of it (run_balance); Figs. 11-12 twice (balance, rates). */
        double iters =
            (double)p->iterations * (jobs[k].budgets ? 2.111 : 1) * (jobs[k].kind == RATES ? 2 : 1);
        cells_max = fmax(cells_max, cells);
        work += cells / CELLS_A_SECOND + iters / ITERS_A_SECOND;
    }
    if (cells_max > CELLS_MAX) {
        fprintf(stderr,
                "dimmer-sim " NAME ": %.3g client-server delays in one instance, more than %.3g "
                "(8 bytes each): ask for fewer --clients or --servers\n",
                cells_max, CELLS_MAX);
        return true;
    }
    if (work > WORK_MAX_S) {
        fprintf(stderr,
                "dimmer-sim " NAME ": about %.2g CPU-seconds of work over its %zu instances, more "
                "than %.0f: ask for fewer --iterations, --seeds, --clients or --servers, or fewer "
                "figures (--fig)\n",
                work, njobs, WORK_MAX_S);
        return true;
    }
    return false;
}

static int
run(const struct dm_sim_ctx *ctx, int argc, char **argv)
{
    struct params prm = {
        .clients = 1000,
        .group = 6,
        .servers = 8,
        .games = 10,
        .fmax = 40000,
        .dmax = HUGE_VAL,
        .dvmax = 100,
        .lhr = 0.5,
        .delay_lo = 50,
        .delay_hi = 150,
        .load_lo = 15,
        .load_hi = 60,
        .alpha = 1,
        .t0 = 0.05,
        .iterations = ctx->quick ? 4000 : 40000,
    };
    double fmax_rates = 22000;
    unsigned seeds = ctx->quick ? 1 : 20;
    bool figs[13] = { false };
    for (int k = 6; k <= 12; k++) {
        figs[k] = true;
    }
    int rc = parse(argc, argv, &prm, &fmax_rates, &seeds, figs);
    if (rc != 0) {
        return rc;
    }
    struct figure all[] = {
        { 6, BALANCE, AX_METHOD, "method", 0, { 0 }, 1 },
        { 7, BALANCE, AX_DVMAX, "DVMAX (ms)", 0, { 50, 60, 70, 80, 90, 100, 110, 120, 150 }, 9 },
        { 8, BALANCE, AX_GAMES, "games K", 0, { 2, 4, 6, 8, 10, 12, 14, 16, 18, 20 }, 10 },
        { 9, BALANCE, AX_CLIENTS, "clients", 0, { 200, 400, 600, 800, 1000, 1200 }, 6 },
        { 10,
          BALANCE,
          AX_LHR,
          "LHR",
          0,
          { 0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1 },
          11 },
        { 11, RATES, AX_CLIENTS, "clients", 1, { 200, 400, 600, 800, 1000, 1200, 1400 }, 7 },
        { 12, RATES, AX_LHR, "LHR", 1, { 0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1 }, 11 },
    };
    enum { NFIG = sizeof(all) / sizeof(all[0]) };
    if (ctx->quick) {
        /* Two points a figure: the ends of each trend. */
        static const double quick_x[NFIG][2] = { { 0, 0 }, { 60, 100 },   { 2, 10 }, { 400, 1000 },
                                                 { 0, 1 }, { 400, 1200 }, { 0, 1 } };
        for (int f = 1; f < NFIG; f++) {
            all[f].xs[0] = quick_x[f][0];
            all[f].xs[1] = quick_x[f][1];
            all[f].nx = 2;
        }
    }
    size_t njobs = 0;
    for (int f = 0; f < NFIG; f++) {
        njobs += figs[all[f].number] ? (size_t)all[f].nx * seeds : 0;
    }
    struct job *jobs = calloc(njobs > 0 ? njobs : 1, sizeof(*jobs));
    if (jobs == NULL) {
        fprintf(stderr, "dimmer-sim " NAME ": out of memory\n");
        return 1;
    }
    size_t k = 0;
    for (int f = 0; f < NFIG; f++) {
        if (!figs[all[f].number]) {
            continue;
        }
        for (int x = 0; x < all[f].nx; x++) {
            for (unsigned s = 0; s < seeds; s++) {
                struct job *j = &jobs[k++];
                j->prm = prm;
                if (all[f].fmax_over != 0) {
                    j->prm.fmax = fmax_rates;
                }
                set_x(&j->prm, all[f].axis, all[f].xs[x]);
                j->kind = all[f].kind;
                j->budgets = all[f].axis == AX_METHOD;
                j->seed = mix(ctx->seed, s);
            }
        }
    }
    if (too_much(jobs, njobs)) {
        free(jobs);
        return 2;
    }
    dm_sim_parallel(ctx->jobs, njobs, run_job, jobs);
    rc = 0;
    k = 0;
    for (int f = 0; f < NFIG; f++) {
        if (!figs[all[f].number]) {
            continue;
        }
        for (size_t i = 0; i < (size_t)all[f].nx * seeds; i++) {
            if (jobs[k + i].r.failed) {
                fprintf(stderr, "dimmer-sim " NAME ": out of memory in a run\n");
                rc = 1;
            }
        }
        int e = all[f].kind == BALANCE ? emit_balance(ctx, &all[f], jobs + k, seeds)
                                       : emit_rates(ctx, &all[f], jobs + k, seeds);
        rc = e != 0 ? 1 : rc;
        k += (size_t)all[f].nx * seeds;
    }
    free(jobs);
    return rc;
}

const struct dm_sim_exp dm_sim_exp_alloc = {
    .name = NAME,
    .summary = "session allocation for game streaming: greedy and SA, DMAX/DVMAX, rate "
               "lowering (Kim 2020, Figs. 6-12)",
    .usage = usage_text,
    .run = run,
};
