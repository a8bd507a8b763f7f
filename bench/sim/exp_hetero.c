/*
 * Experiment "hetero": heterogeneous power of two (bench/sim/README.md;
 * DESIGN.md, "Heterogeneous power-of-two"; Mukhopadhyay and Mazumdar,
 * "Analysis of load balancing in large heterogeneous processor sharing
 * systems", 2013).
 *
 * Many processor-sharing servers in a few speed classes take a Poisson
 * stream of jobs of mean size 1, placed by dimmer's own balancers over a
 * struct dm_servers whose counters are kept as the proxy keeps them
 * (proxy/request.c): picks at the pick; conns, inflight and the host's
 * inflight from the pick to the end of the job; requests at the end. Each
 * (job sizes, load, policy) is one run with its own clock, server table and
 * balancer. A run measures, over a window after a warm-up, the mean sojourn
 * time of the jobs that finish in it and the number of jobs in the pool,
 * whose growth through the window tells an unstable (or unsettled) pool.
 * Beside the runs: the mean field of power of two with server classes
 * (bench/sim/meanfield.h) and its stability edge, the mean field of the
 * hybrid, and the exact values of the static policies (each server an
 * M/G/1-PS queue, insensitive to the job sizes).
 *
 * Common random numbers: a run's arrival times and job sizes come from its
 * dm_sim generator, seeded by the seed and the load alone, and a job's size
 * takes one uniform whatever the distribution, so at one load every policy
 * sees the same arrivals, and the exponential and Pareto runs the same
 * arrivals with sizes from the same uniforms. The balancer draws from a
 * generator of its own, seeded by the seed, the load and the policy.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/balancer.h"
#include "balancers/registry.h"
#include "balancers/servers.h"
#include "bench/sim/exp.h"
#include "bench/sim/meanfield.h"
#include "bench/sim/server.h"
#include "bench/sim/sim.h"

#define HET_MAX_ARRIVALS 2e9 /* what one command may ask of all its runs */
#define HET_MAX_CLASSES  8
#define HET_MAX_LOADS    32
#define HET_CURVE        48

/* The edge check: p2 at these multiples of its edge, exponential sizes, a window and
 * warm-up HET_EDGE_STRETCH times the others', for a growth that small to show. */
#define HET_EDGE_RUNS    4
#define HET_EDGE_STRETCH 5
static const double het_edge_at[HET_EDGE_RUNS] = { 0.97, 0.99, 1.01, 1.03 };

/* ---- the policies: dimmer's balancers, as configured ---- */

struct het_policy {
    const char *name;     /* as in --policies and the tables */
    const char *balancer; /* dimmer's policy, by its config name */
    unsigned draws;       /* dm_bal_conf.draws (random) */
    bool weight_capacity; /* s->weight = capacity, else 1 */
};

static const struct het_policy het_policies[] = {
    { "random", "random", 1, false },         /* uniform random */
    { "wrandom", "random", 1, true },         /* random in proportion to capacity */
    { "p2", "random", 2, false },             /* power of two on jobs, the paper's SQ(2) */
    { "p2c-shadow", "p2c-shadow", 0, false }, /* drawn by capacity, (jobs + 1) / capacity */
    { "hybrid", "hybrid", 0, false },         /* class by capacity share, then power of two */
    { "jsq", "leastconn", 0, false },         /* join the shortest queue */
    { "jsq-cap", "leastconn", 0, true },      /* fewest jobs per unit of capacity */
};
#define HET_NPOLICIES (sizeof(het_policies) / sizeof(het_policies[0]))
#define HET_P2        2 /* its index */

enum het_sizes { HET_EXP = 0, HET_PARETO, HET_NSIZES };
static const char *const het_size_names[HET_NSIZES] = { "exp", "pareto" };

/* ---- parameters ---- */

struct het_params {
    unsigned servers;
    size_t nclasses;
    unsigned capacity[HET_MAX_CLASSES];
    double share[HET_MAX_CLASSES];   /* normalised */
    unsigned count[HET_MAX_CLASSES]; /* servers of each class */
    double loads[HET_MAX_LOADS];
    size_t nloads;
    bool sizes[HET_NSIZES];
    bool policy[HET_NPOLICIES];
    double time;         /* measured window, seconds of virtual time */
    double warmup;       /* before it */
    double jobs_per_run; /* > 0: a window of this many arrivals instead */
    double pareto_alpha, pareto_lo, pareto_hi;
    double mean_speed;     /* sum_c gamma_c mu_c over the actual counts */
    enum dm_sim_disc disc; /* --discipline: processor sharing (default) or FIFO */
};

/* ---- one run ---- */

struct het_result {
    double mean_sojourn; /* over the jobs that finished in the window */
    double class_sojourn[HET_MAX_CLASSES];
    double class_share[HET_MAX_CLASSES]; /* of the jobs placed in the window */
    uint64_t completed;                  /* in the window */
    double pop_first, pop_second; /* time-average jobs in the pool, each half of the window */
    double growth;                /* (pop_second - pop_first) / (window / 2), jobs a second */
    uint64_t pop_end;
    bool growing;
    bool failed;
};

struct het_job {
    struct dm_sim_job j; /* first: the server hands back &j */
    struct het_job *next_free;
};

struct het_chunk {
    struct het_chunk *next;
    struct het_job jobs[4096];
};

struct het_run {
    const struct het_params *p;
    enum het_sizes sizes;
    double load;
    const struct het_policy *pol;
    struct het_result *out;
    struct dm_sim sim;
    struct dm_rng brng; /* the balancer's */
    struct dm_servers *sv;
    struct dm_balancer *bal;
    struct dm_sim_srv *srv;
    unsigned *class_of;
    double rate; /* arrivals a second */
    double t_start, t_mid, t_end;
    struct het_job *free_jobs;
    struct het_chunk *chunks;
    uint64_t pop;
    double area, area_at; /* integral of pop since 0, up to area_at */
    double area_start, area_mid;
    double sum_sojourn, class_sum[HET_MAX_CLASSES];
    uint64_t class_done[HET_MAX_CLASSES], class_placed[HET_MAX_CLASSES], placed;
    bool failed;
};

static struct het_job *
het_job_get(struct het_run *r)
{
    if (r->free_jobs == NULL) {
        struct het_chunk *c = malloc(sizeof(*c));
        if (c == NULL) {
            r->failed = true;
            return NULL;
        }
        c->next = r->chunks;
        r->chunks = c;
        size_t n = sizeof(c->jobs) / sizeof(c->jobs[0]);
        for (size_t i = 0; i < n; i++) {
            c->jobs[i].next_free = i + 1 < n ? &c->jobs[i + 1] : NULL;
        }
        r->free_jobs = &c->jobs[0];
    }
    struct het_job *j = r->free_jobs;
    r->free_jobs = j->next_free;
    memset(&j->j, 0, sizeof(j->j));
    return j;
}

static void
het_pop_advance(struct het_run *r)
{
    r->area += (double)r->pop * (r->sim.now - r->area_at);
    r->area_at = r->sim.now;
}

static bool
het_in_window(const struct het_run *r)
{
    return r->sim.now >= r->t_start && r->sim.now <= r->t_end;
}

static void
het_done(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job)
{
    struct het_run *r = srv->owner;
    size_t i = (size_t)job->data;
    struct dm_server *s = &r->sv->s[i];
    dm_counter_sub(&s->conns, 1);
    dm_counter_sub(&s->inflight, 1);
    dm_counter_sub(&s->host->inflight, 1);
    dm_counter_add(&s->requests, 1);
    het_pop_advance(r);
    r->pop--;
    if (het_in_window(r)) {
        double t = sim->now - job->arrived;
        r->sum_sojourn += t;
        r->class_sum[r->class_of[i]] += t;
        r->class_done[r->class_of[i]]++;
    }
    struct het_job *hj = (struct het_job *)job;
    hj->next_free = r->free_jobs;
    r->free_jobs = hj;
}

static void
het_arrival(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)tag;
    struct het_run *r = arg;
    /* The next arrival and this job's size first: the stream is the same whatever the policy. */
    double gap = dm_sim_exp(&sim->rng, 1.0 / r->rate);
    double size = r->sizes == HET_EXP ? dm_sim_exp(&sim->rng, 1.0)
                                      : dm_sim_pareto(&sim->rng, r->p->pareto_alpha,
                                                      r->p->pareto_lo, r->p->pareto_hi);
    dm_sim_after(sim, gap, het_arrival, r, 0);
    struct dm_pick in = { .now_us = dm_sim_now_us(sim), .rng = &r->brng };
    int i = dm_balancer_pick(r->bal, &in);
    struct het_job *hj = i != DM_NO_SERVER ? het_job_get(r) : NULL;
    if (hj == NULL) {
        r->failed = true; /* every server is usable: no pick fails */
        return;
    }
    struct dm_server *s = &r->sv->s[i];
    dm_counter_add(&s->picks, 1);
    dm_counter_add(&s->conns, 1);
    dm_counter_add(&s->inflight, 1);
    dm_counter_add(&s->host->inflight, 1);
    hj->j.size = size;
    hj->j.data = (uint64_t)i;
    het_pop_advance(r);
    r->pop++;
    if (het_in_window(r)) {
        r->placed++;
        r->class_placed[r->class_of[i]]++;
    }
    dm_sim_srv_add(sim, &r->srv[i], &hj->j);
}

/* The start (tag 0) and the middle (tag 1) of the window: the area so far. */
static void
het_mark(struct dm_sim *sim, void *arg, uint64_t tag)
{
    (void)sim;
    struct het_run *r = arg;
    het_pop_advance(r);
    *(tag == 0 ? &r->area_start : &r->area_mid) = r->area;
}

static uint64_t
het_mix(uint64_t seed, uint64_t a, uint64_t b)
{
    uint64_t z =
        seed * 0x9E3779B97F4A7C15u + (a + 1) * 0xBF58476D1CE4E5B9u + (b + 1) * 0x94D049BB133111EBu;
    return z ^ z >> 31;
}

/*
 * Growing: the time-average number in the pool over the window's second
 * half exceeds that over its first half by more than 10 % plus 4 standard
 * deviations of a Poisson count of that size. A pool that has settled moves
 * by less (about 5 % at worst here, near p2's edge, where it wanders most);
 * an unstable one grows linearly, by (arrival rate - throughput) x window / 2
 * between the halves. A stable pool that relaxes more slowly than the window
 * (single servers near full load: an M/M/1 queue at utilisation u relaxes in
 * about 1 / (mu (1 - sqrt u))^2 s) grows too, so "growing" says "unstable, or
 * not settled within the window"; the theory row tells which.
 */
static bool
het_is_growing(double first, double second)
{
    return second > 1.1 * first + 4 * sqrt(first > 1 ? first : 1);
}

static void
het_run_one(struct het_run *r, uint64_t sim_seed, uint64_t bal_seed)
{
    const struct het_params *p = r->p;
    struct het_result *res = r->out;
    dm_sim_init(&r->sim, sim_seed);
    dm_rng_init(&r->brng, bal_seed);
    r->sv = dm_servers_create(p->servers);
    r->srv = calloc(p->servers, sizeof(*r->srv));
    r->class_of = calloc(p->servers, sizeof(*r->class_of));
    const struct dm_balancer_ops *ops = dm_balancer_find(r->pol->balancer);
    if (r->sv == NULL || r->srv == NULL || r->class_of == NULL || ops == NULL) {
        res->failed = true;
        goto done;
    }
    double capacity = 0;
    size_t i = 0;
    for (size_t c = 0; c < p->nclasses; c++) {
        for (unsigned k = 0; k < p->count[c]; k++, i++) {
            struct dm_server *s = &r->sv->s[i];
            s->capacity = p->capacity[c];
            s->weight = r->pol->weight_capacity ? p->capacity[c] : 1;
            r->class_of[i] = (unsigned)c;
            dm_sim_srv_init(&r->srv[i], p->disc, p->capacity[c], 1, het_done, r);
            capacity += p->capacity[c];
        }
    }
    struct dm_bal_conf cf = { .draws = r->pol->draws };
    r->bal = dm_balancer_create(ops, r->sv, &cf);
    if (r->bal == NULL) {
        res->failed = true;
        goto done;
    }
    r->rate = r->load * capacity;
    double window = p->jobs_per_run > 0 ? p->jobs_per_run / r->rate : p->time;
    double warmup = p->jobs_per_run > 0 ? window * p->warmup / p->time : p->warmup;
    r->t_start = warmup;
    r->t_mid = warmup + window / 2;
    r->t_end = warmup + window;
    dm_sim_at(&r->sim, 0, het_arrival, r, 0);
    dm_sim_at(&r->sim, r->t_start, het_mark, r, 0);
    dm_sim_at(&r->sim, r->t_mid, het_mark, r, 1);
    dm_sim_run_until(&r->sim, r->t_end);
    het_pop_advance(r);

    uint64_t done = 0;
    for (size_t c = 0; c < p->nclasses; c++) {
        done += r->class_done[c];
        res->class_sojourn[c] = r->class_done[c] ? r->class_sum[c] / (double)r->class_done[c] : NAN;
        res->class_share[c] = r->placed ? (double)r->class_placed[c] / (double)r->placed : NAN;
    }
    res->completed = done;
    res->mean_sojourn = done ? r->sum_sojourn / (double)done : NAN;
    res->pop_first = (r->area_mid - r->area_start) / (r->t_mid - r->t_start);
    res->pop_second = (r->area - r->area_mid) / (r->t_end - r->t_mid);
    res->growth = (res->pop_second - res->pop_first) / (r->t_mid - r->t_start);
    res->pop_end = r->pop;
    res->growing = het_is_growing(res->pop_first, res->pop_second);
    res->failed = r->failed || dm_sim_failed(&r->sim);
    for (size_t k = 0; k < p->servers; k++) {
        /* The counters the balancers read hold exactly the jobs on each server. */
        const struct dm_server *s = &r->sv->s[k];
        uint64_t n = r->srv[k].n;
        res->failed = res->failed || dm_sim_srv_failed(&r->srv[k]) ||
                      dm_counter_get(&s->conns) != n || dm_counter_get(&s->inflight) != n ||
                      dm_counter_get(&s->host->inflight) != n;
    }

done:
    dm_balancer_destroy(r->bal);
    if (r->srv != NULL) {
        for (size_t k = 0; k < p->servers; k++) {
            dm_sim_srv_fini(&r->srv[k]);
        }
    }
    free(r->srv);
    free(r->class_of);
    dm_servers_destroy(r->sv);
    while (r->chunks != NULL) {
        struct het_chunk *c = r->chunks;
        r->chunks = c->next;
        free(c);
    }
    dm_sim_fini(&r->sim);
}

/* ---- theory, per load ---- */

struct het_theory {
    struct dm_meanfield p2; /* power of two over the pool's classes */
    int p2_rc;
    double p2_drift; /* jobs a second the pool gains past the edge, at least */
    double hybrid;   /* the mean field of power of two inside each class */
    double random;   /* exact; INFINITY past the slowest class's speed */
    double random_drift;
    double wrandom; /* exact */
};

/* ---- the plan: every run and every theory point, one parallel batch ---- */

struct het_plan {
    const struct het_params *p;
    uint64_t seed;
    bool curve; /* the plot's mean-field curve is wanted */
    size_t pols[HET_NPOLICIES], npols;
    size_t szs[HET_NSIZES], nszs;
    size_t nruns; /* sizes x loads x policies */
    struct het_result *res;
    struct het_theory *th; /* per load */
    struct dm_meanfield_class mfc[HET_MAX_CLASSES];
    double edge;        /* closed form */
    double edge_search; /* by bisection on the solver */
    double edge_tol;
    struct het_params edge_p; /* p, stretched */
    size_t nedge;             /* HET_EDGE_RUNS, or 0: no p2, or no edge below load 1 */
    double edge_load[HET_EDGE_RUNS];
    struct het_result edge_res[HET_EDGE_RUNS];
    struct het_theory edge_th[HET_EDGE_RUNS];
    double xmin, xmax; /* the plot's load axis */
    double curve_load[HET_CURVE], curve_t[HET_CURVE];
    size_t ncurve;
};

static struct het_result *
het_result_at(const struct het_plan *pl, size_t si, size_t li, size_t k)
{
    return &pl->res[(si * pl->p->nloads + li) * pl->npols + k];
}

static void
het_theory_at(const struct het_plan *pl, double load, struct het_theory *th)
{
    const struct het_params *p = pl->p;
    double lambda = load * p->mean_speed; /* per server */
    th->p2_rc = dm_meanfield_p2(pl->mfc, p->nclasses, lambda, &th->p2, NULL, 0);
    th->p2_drift = p->servers * dm_meanfield_p2_drift(pl->mfc, p->nclasses, lambda);
    /* Hybrid: class c takes load x its capacity, a homogeneous power of two at
     * `load`, x(k) = load^(2^k - 1); jobs per server sum_k x(k), in every class. */
    double jobs = 0;
    for (int k = 1; k < 60; k++) {
        double x = pow(load, ldexp(1, k) - 1);
        jobs += x;
        if (x < 1e-300) {
            break;
        }
    }
    th->hybrid = load < 1 ? jobs / lambda : INFINITY;
    /* Uniform random: each server an M/G/1-PS queue at rate lambda. */
    double t = 0, drift = 0;
    bool stable = true;
    for (size_t c = 0; c < p->nclasses; c++) {
        double gamma = (double)p->count[c] / p->servers;
        stable = stable && lambda < p->capacity[c];
        t += gamma / (p->capacity[c] - lambda);
        drift += lambda > p->capacity[c] ? p->count[c] * (lambda - p->capacity[c]) : 0;
    }
    th->random = stable ? t : INFINITY;
    th->random_drift = drift;
    /* By capacity: every server at utilisation `load`, 1 / (mu (1 - load)) for a
     * share mu / sum mu of the jobs. */
    th->wrandom = load < 1 ? 1 / (p->mean_speed * (1 - load)) : INFINITY;
}

static void
het_task(size_t i, void *arg)
{
    struct het_plan *pl = arg;
    const struct het_params *p = pl->p;
    if (i < pl->nedge) { /* the longest first */
        struct het_run r = {
            .p = &pl->edge_p,
            .sizes = HET_EXP,
            .load = pl->edge_load[i],
            .pol = &het_policies[HET_P2],
            .out = &pl->edge_res[i],
        };
        het_run_one(&r, het_mix(pl->seed, 1000 + i, 0), het_mix(pl->seed, 1000 + i, 1));
        het_theory_at(pl, pl->edge_load[i], &pl->edge_th[i]);
        return;
    }
    i -= pl->nedge;
    if (i < pl->nruns) {
        size_t k = i % pl->npols, li = i / pl->npols % p->nloads, si = i / pl->npols / p->nloads;
        struct het_run r = {
            .p = p,
            .sizes = (enum het_sizes)pl->szs[si],
            .load = p->loads[li],
            .pol = &het_policies[pl->pols[k]],
            .out = het_result_at(pl, si, li, k),
        };
        het_run_one(&r, het_mix(pl->seed, li, 0), het_mix(pl->seed, li, 1 + pl->pols[k]));
    } else if (i < pl->nruns + p->nloads) {
        het_theory_at(pl, p->loads[i - pl->nruns], &pl->th[i - pl->nruns]);
    } else if (i == pl->nruns + p->nloads) {
        pl->edge_search =
            dm_meanfield_p2_edge_search(pl->mfc, p->nclasses, 0.01, 1.0, pl->edge_tol);
    } else if (pl->curve) {
        /* The mean field of p2 up to near its edge, for the plot. */
        pl->ncurve = 0;
        for (size_t k = 0; k < HET_CURVE; k++) {
            double load = pl->xmin + (pl->edge - pl->xmin) * (1 - pow(0.85, (double)k));
            struct dm_meanfield mf;
            if (dm_meanfield_p2(pl->mfc, p->nclasses, load * p->mean_speed, &mf, NULL, 0) == 0 &&
                mf.stable) {
                pl->curve_load[pl->ncurve] = load;
                pl->curve_t[pl->ncurve++] = mf.mean_sojourn;
            }
            if (pl->edge - load < 2e-3) {
                break;
            }
        }
    }
}

/* ---- options ---- */

static const char het_usage[] =
    "options:\n"
    "  --servers N        servers in the pool (default 400; --quick: 40)\n"
    "  --capacity A,B,..  each class's speed in work units a second, whole numbers\n"
    "                     as dm_server.capacity is (default 1,4); a job's mean size\n"
    "                     is 1, so it takes 1/A s alone on a server of class A\n"
    "  --share a,b,..     the share of the servers in each class (default 0.8,0.2;\n"
    "                     normalised; counts rounded, the last class takes the rest)\n"
    "  --loads L,..       offered loads: arrival rate / total capacity\n"
    "                     (default 0.5,0.7,0.75,0.8,0.9,0.95,0.98; --quick: 0.5,0.9)\n"
    "  --sizes exp|pareto|both\n"
    "                     job sizes: exponential of mean 1, bounded Pareto of mean 1,\n"
    "                     or each (default both)\n"
    "  --pareto ALPHA,MAX the bounded Pareto's shape and upper bound (default\n"
    "                     1.5,100: lower bound 0.354, squared coefficient of\n"
    "                     variation 5.0; the lower bound is set for mean 1)\n"
    "  --policies P,..    which of (default all):\n"
    "                       random      uniform random: random, draws 1, weights 1\n"
    "                       wrandom     random by capacity: random, draws 1,\n"
    "                                   weight = capacity\n"
    "                       p2          power of two on jobs, the paper's SQ(2):\n"
    "                                   random, draws 2, weights 1\n"
    "                       p2c-shadow  two drawn by capacity, the fewer\n"
    "                                   (jobs + 1) / capacity\n"
    "                       hybrid      a class by capacity share, then power of two\n"
    "                                   inside it\n"
    "                       jsq         join the shortest queue: leastconn, weights 1\n"
    "                       jsq-cap     fewest jobs per unit of capacity: leastconn,\n"
    "                                   weight = capacity\n"
    "  --time T           the measured window, seconds of virtual time (default\n"
    "                     300; --quick: 20)\n"
    "  --warmup W         seconds before it (default 100; --quick: 10)\n"
    "  --jobs-per-run J   instead of --time: a window of J arrivals at every load\n"
    "                     (the warm-up keeps its ratio to the window)\n"
    "  --discipline D     ps (default: processor sharing, the paper's) or fifo (each\n"
    "                     server one job at a time, the rest in arrival order; the\n"
    "                     theory rows and insensitivity are processor sharing's)\n"
    "\n"
    "Prints the mean sojourn time of every policy at every load and job-size\n"
    "distribution, with a theory row (exact for random and wrandom, the mean field\n"
    "for p2 and hybrid), p2's stability edge, and how fast the number of jobs in\n"
    "the pool grows in each run; then p2 alone at 0.97, 0.99, 1.01 and 1.03 times\n"
    "its edge, exponential sizes, over a window and warm-up 5 times longer. With\n"
    "--out: hetero.csv, hetero_growth.csv, hetero_edge.csv, hetero_runs.csv (every\n"
    "run's numbers), hetero.png.\n";

static int
het_parse_policies(const char *val, bool *sel)
{
    for (size_t i = 0; i < HET_NPOLICIES; i++) {
        sel[i] = false;
    }
    const char *s = val;
    while (*s != '\0') {
        const char *e = strchr(s, ',');
        size_t len = e != NULL ? (size_t)(e - s) : strlen(s);
        bool found = false;
        for (size_t i = 0; i < HET_NPOLICIES; i++) {
            if (strlen(het_policies[i].name) == len && strncmp(het_policies[i].name, s, len) == 0) {
                sel[i] = found = true;
            }
        }
        if (!found) {
            fprintf(stderr, "dimmer-sim hetero: --policies: unknown policy '%.*s'\n", (int)len, s);
            return -1;
        }
        s = e != NULL ? e + 1 : s + len;
    }
    return 0;
}

/* The rest of het_parse: class counts, the mean speed, the Pareto's lower bound. */
static int
het_derive(struct het_params *p, int nshare)
{
    if ((size_t)nshare != p->nclasses) {
        fprintf(stderr, "dimmer-sim hetero: --share wants one share per --capacity class\n");
        return 2;
    }
    double total = 0;
    for (size_t c = 0; c < p->nclasses; c++) {
        total += p->share[c];
    }
    unsigned given = 0;
    for (size_t c = 0; c < p->nclasses; c++) {
        p->share[c] /= total;
        double want = c + 1 < p->nclasses ? round(p->share[c] * p->servers) : p->servers - given;
        if (want < 1 || given + want > p->servers) {
            fprintf(stderr, "dimmer-sim hetero: --share: every class needs a server\n");
            return 2;
        }
        p->count[c] = (unsigned)want;
        given += p->count[c];
    }
    p->mean_speed = 0;
    for (size_t c = 0; c < p->nclasses; c++) {
        p->mean_speed += (double)p->count[c] / p->servers * p->capacity[c];
    }
    /* The Pareto's lower bound for mean 1, by bisection: the mean grows with it. */
    double lo = 1e-12, hi = 1;
    for (int k = 0; k < 200; k++) {
        double mid = (lo + hi) / 2;
        *(dm_sim_pareto_mean(p->pareto_alpha, mid, p->pareto_hi) < 1 ? &lo : &hi) = mid;
    }
    p->pareto_lo = (lo + hi) / 2;
    return 0;
}

static int
het_parse(const struct dm_sim_ctx *ctx, int argc, char **argv, struct het_params *p)
{
    *p = (struct het_params){
        .servers = ctx->quick ? 40 : 400,
        .nclasses = 2,
        .capacity = { 1, 4 },
        .share = { 0.8, 0.2 },
        .loads = { 0.5, 0.7, 0.75, 0.8, 0.9, 0.95, 0.98 },
        .nloads = 7,
        .sizes = { true, true },
        .time = ctx->quick ? 20 : 300,
        .warmup = ctx->quick ? 10 : 100,
        .pareto_alpha = 1.5,
        .pareto_hi = 100,
    };
    for (size_t i = 0; i < HET_NPOLICIES; i++) {
        p->policy[i] = true;
    }
    if (ctx->quick) {
        p->loads[1] = 0.9;
        p->nloads = 2;
    }
    int nshare = 2;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1 < argc ? i + 1 : i];
        double list[HET_MAX_LOADS];
        int n = 0;
        if (i + 1 >= argc) {
            fprintf(stderr, "dimmer-sim hetero: %s wants a value (hetero --help)\n", a);
            return 2;
        } else if (strcmp(a, "--servers") == 0) {
            if (!dm_sim_opt_unsigned("hetero", a, v, 2, 1000000, &p->servers)) {
                return 2;
            }
        } else if (strcmp(a, "--capacity") == 0) {
            if ((n = dm_sim_opt_list("hetero", a, v, list, HET_MAX_CLASSES)) < 0) {
                return 2;
            }
            for (int k = 0; k < n; k++) {
                if (!(list[k] >= 1 && list[k] <= 1e6) || list[k] != floor(list[k])) {
                    fprintf(stderr, "dimmer-sim hetero: --capacity: whole numbers from 1\n");
                    return 2;
                }
                p->capacity[k] = (unsigned)list[k];
            }
            p->nclasses = (size_t)n;
        } else if (strcmp(a, "--share") == 0) {
            if ((nshare = dm_sim_opt_list("hetero", a, v, p->share, HET_MAX_CLASSES)) < 0) {
                return 2;
            }
            for (int k = 0; k < nshare; k++) {
                if (!(p->share[k] > 0 && p->share[k] < 1e9)) {
                    fprintf(stderr, "dimmer-sim hetero: --share: positive numbers\n");
                    return 2;
                }
            }
        } else if (strcmp(a, "--loads") == 0) {
            if ((n = dm_sim_opt_list("hetero", a, v, p->loads, HET_MAX_LOADS)) < 0) {
                return 2;
            }
            for (int k = 0; k < n; k++) {
                if (!(p->loads[k] > 0 && p->loads[k] <= 1.2)) {
                    fprintf(stderr, "dimmer-sim hetero: --loads: each in (0, 1.2]\n");
                    return 2;
                }
            }
            p->nloads = (size_t)n;
        } else if (strcmp(a, "--sizes") == 0) {
            bool e = strcmp(v, "exp") == 0, pa = strcmp(v, "pareto") == 0;
            if (!e && !pa && strcmp(v, "both") != 0) {
                fprintf(stderr, "dimmer-sim hetero: --sizes: exp, pareto or both\n");
                return 2;
            }
            p->sizes[HET_EXP] = !pa;
            p->sizes[HET_PARETO] = !e;
        } else if (strcmp(a, "--pareto") == 0) {
            n = dm_sim_opt_list("hetero", a, v, list, 2);
            if (n != 2 || !(list[0] > 0.1 && list[0] < 10 && fabs(list[0] - 1) > 1e-9) ||
                !(list[1] > 1 && list[1] <= 1e9)) {
                fprintf(stderr, "dimmer-sim hetero: --pareto: ALPHA,MAX with ALPHA in "
                                "(0.1, 10) but not 1, and MAX in (1, 1e9]\n");
                return 2;
            }
            p->pareto_alpha = list[0];
            p->pareto_hi = list[1];
        } else if (strcmp(a, "--policies") == 0) {
            if (het_parse_policies(v, p->policy) != 0) {
                return 2;
            }
        } else if (strcmp(a, "--time") == 0) {
            if (!dm_sim_opt_double("hetero", a, v, 1, 1e7, &p->time)) {
                return 2;
            }
        } else if (strcmp(a, "--warmup") == 0) {
            if (!dm_sim_opt_double("hetero", a, v, 0, 1e7, &p->warmup)) {
                return 2;
            }
        } else if (strcmp(a, "--jobs-per-run") == 0) {
            if (!dm_sim_opt_double("hetero", a, v, 100, 1e10, &p->jobs_per_run)) {
                return 2;
            }
        } else if (strcmp(a, "--discipline") == 0) {
            if (!dm_sim_opt_disc("hetero", a, v, &p->disc)) {
                return 2;
            }
        } else {
            fprintf(stderr, "dimmer-sim hetero: unknown option %s (hetero --help)\n", a);
            return 2;
        }
    }
    return het_derive(p, nshare);
}

/* ---- tables, the runs' CSV and the plot ---- */

static void
het_cell_value(struct dm_sim_table *t, double v)
{
    if (isnan(v)) {
        dm_sim_table_cell(t, "failed");
    } else if (isinf(v)) {
        dm_sim_table_cell(t, "unstable");
    } else {
        dm_sim_table_cell(t, "%.3f", v);
    }
}

static const char *
het_title(const struct het_plan *pl, const char *what, char *buf, size_t len)
{
    const struct het_params *p = pl->p;
    int n = snprintf(buf, len, "hetero: %s; %u %s servers:", what, p->servers,
                     p->disc == DM_SIM_FIFO ? "FIFO" : "PS");
    for (size_t c = 0; c < p->nclasses && n > 0 && (size_t)n < len; c++) {
        n += snprintf(buf + n, len - (size_t)n, "%s %u of speed %u", c ? "," : "", p->count[c],
                      p->capacity[c]);
    }
    return buf;
}

/* The header row of both tables: load, sizes, the policies. */
static struct dm_sim_table *
het_table(const struct het_plan *pl, const char *name, const char *title)
{
    const char *headers[2 + HET_NPOLICIES];
    headers[0] = "load";
    headers[1] = "sizes";
    for (size_t k = 0; k < pl->npols; k++) {
        headers[2 + k] = het_policies[pl->pols[k]].name;
    }
    return dm_sim_table_create(name, title, 2 + pl->npols, headers);
}

static int
het_emit_sojourn(const struct dm_sim_ctx *ctx, const struct het_plan *pl)
{
    const struct het_params *p = pl->p;
    char title[512];
    struct dm_sim_table *t =
        het_table(pl, "hetero", het_title(pl, "mean sojourn time (s)", title, sizeof(title)));
    for (size_t li = 0; li < p->nloads; li++) {
        for (size_t si = 0; si < pl->nszs; si++) {
            dm_sim_table_cell(t, "%.3g", p->loads[li]);
            dm_sim_table_cell(t, "%s", het_size_names[pl->szs[si]]);
            for (size_t k = 0; k < pl->npols; k++) {
                const struct het_result *r = het_result_at(pl, si, li, k);
                if (r->failed) {
                    dm_sim_table_cell(t, "failed");
                } else if (r->growing) {
                    dm_sim_table_cell(t, "growing");
                } else {
                    dm_sim_table_cell(t, "%.3f", r->mean_sojourn);
                }
            }
        }
        const struct het_theory *th = &pl->th[li];
        dm_sim_table_cell(t, "%.3g", p->loads[li]);
        dm_sim_table_cell(t, "theory");
        for (size_t k = 0; k < pl->npols; k++) {
            const char *name = het_policies[pl->pols[k]].name;
            if (strcmp(name, "random") == 0) {
                het_cell_value(t, th->random);
            } else if (strcmp(name, "wrandom") == 0) {
                het_cell_value(t, th->wrandom);
            } else if (strcmp(name, "p2") == 0) {
                het_cell_value(t, th->p2_rc != 0  ? NAN
                                  : th->p2.stable ? th->p2.mean_sojourn
                                                  : INFINITY);
            } else if (strcmp(name, "hybrid") == 0) {
                het_cell_value(t, th->hybrid);
            } else {
                dm_sim_table_cell(t, "%s", "");
            }
        }
    }
    dm_sim_table_note(t,
                      "Jobs of mean size 1 (work units), Poisson arrivals at load x total "
                      "capacity; the mean over the jobs that end in a window of %g s after %g s "
                      "of warm-up (--time, --warmup), one run per cell.",
                      p->time, p->warmup);
    if (p->disc == DM_SIM_FIFO) {
        dm_sim_table_note(t, "servers: FIFO (--discipline fifo), one job at a time each; the "
                             "theory rows are processor sharing's.");
    }
    if (pl->szs[pl->nszs - 1] == HET_PARETO) {
        dm_sim_table_note(t,
                          "pareto: bounded Pareto, shape %g on [%.4g, %g], mean 1 (as exp): "
                          "the theory rows hold for both (insensitivity).",
                          p->pareto_alpha, p->pareto_lo, p->pareto_hi);
    }
    dm_sim_table_note(t,
                      "theory: random and wrandom exact (every server an M/G/1-PS queue); p2 the "
                      "mean-field fixed point with server classes (bench/sim/meanfield.h); "
                      "hybrid the mean field of power of two in each class, x(k) = load^(2^k-1).");
    dm_sim_table_note(t,
                      "p2's stability edge: load %.4f (the paper's condition: for every set S of "
                      "classes, lambda share_S^2 < capacity of S), %.4f +- %.4f by bisection "
                      "on the mean-field solver alone.",
                      pl->edge, pl->edge_search, pl->edge_tol / 2);
    dm_sim_table_note(t, "growing: the number of jobs in the pool still grows through the window "
                         "(its mean over the second half > 1.1 x that over the first + 4 sqrt of "
                         "it): unstable, or slower to settle than the window (hetero_growth).");
    int rc = dm_sim_table_emit(ctx, t);
    dm_sim_table_destroy(t);
    return rc;
}

static int
het_emit_growth(const struct dm_sim_ctx *ctx, const struct het_plan *pl)
{
    const struct het_params *p = pl->p;
    char title[512];
    struct dm_sim_table *t =
        het_table(pl, "hetero_growth",
                  het_title(pl, "growth of the number in the pool (jobs/s)", title, sizeof(title)));
    for (size_t li = 0; li < p->nloads; li++) {
        for (size_t si = 0; si < pl->nszs; si++) {
            dm_sim_table_cell(t, "%.3g", p->loads[li]);
            dm_sim_table_cell(t, "%s", het_size_names[pl->szs[si]]);
            for (size_t k = 0; k < pl->npols; k++) {
                const struct het_result *r = het_result_at(pl, si, li, k);
                dm_sim_table_cell(t, "%+.1f%s", r->growth, r->growing ? " *" : "");
            }
        }
        const struct het_theory *th = &pl->th[li];
        dm_sim_table_cell(t, "%.3g", p->loads[li]);
        dm_sim_table_cell(t, "theory");
        for (size_t k = 0; k < pl->npols; k++) {
            const char *name = het_policies[pl->pols[k]].name;
            if (strcmp(name, "random") == 0) {
                dm_sim_table_cell(t, th->random_drift > 0 ? "%.1f" : "0", th->random_drift);
            } else if (strcmp(name, "p2") == 0) {
                dm_sim_table_cell(t, th->p2_drift > 0 ? ">= %.1f" : "0", th->p2_drift);
            } else if (strcmp(name, "wrandom") == 0 || strcmp(name, "hybrid") == 0) {
                dm_sim_table_cell(t, "0");
            } else {
                dm_sim_table_cell(t, "%s", "");
            }
        }
    }
    dm_sim_table_note(t, "(mean number in the pool over the window's second half - over its "
                         "first half) / (window / 2); * marks a growing run.");
    dm_sim_table_note(t,
                      "theory: the fluid drift once the pool has settled, 0 when stable. "
                      "random: the slow servers' excess, N gamma_c (lambda - mu_c); p2: at least "
                      "N max_S (lambda share_S^2 - capacity of S), what a set S of classes must "
                      "take (both draws in S) over what it serves.");
    dm_sim_table_note(t, "The drift is that of exponential sizes: with heavy tails an overloaded "
                         "PS server sheds its short jobs and keeps the long ones, so the number "
                         "grows more slowly while the work grows as fast.");
    dm_sim_table_note(t, "A stable pool that settles slowly still grows in the window: "
                         "wrandom's servers are M/M/1-PS queues at the load itself, which "
                         "relax in about 1 / (mu (1 - sqrt load))^2 s.");
    int rc = dm_sim_table_emit(ctx, t);
    dm_sim_table_destroy(t);
    return rc;
}

static int
het_emit_edge(const struct dm_sim_ctx *ctx, const struct het_plan *pl)
{
    if (pl->nedge == 0) {
        return 0;
    }
    const char *headers[] = { "load",       "of edge",         "p2 (s)",
                              "mean field", "growth (jobs/s)", "fluid drift" };
    char title[512];
    struct dm_sim_table *t = dm_sim_table_create(
        "hetero_edge",
        het_title(pl, "p2 around its stability edge, exponential sizes", title, sizeof(title)), 6,
        headers);
    for (size_t j = 0; j < pl->nedge; j++) {
        const struct het_result *r = &pl->edge_res[j];
        const struct het_theory *th = &pl->edge_th[j];
        dm_sim_table_cell(t, "%.4f", pl->edge_load[j]);
        dm_sim_table_cell(t, "%.2f", het_edge_at[j]);
        if (r->failed) {
            dm_sim_table_cell(t, "failed");
        } else if (r->growing) {
            dm_sim_table_cell(t, "growing");
        } else {
            dm_sim_table_cell(t, "%.3f", r->mean_sojourn);
        }
        het_cell_value(t, th->p2_rc != 0 ? NAN : th->p2.stable ? th->p2.mean_sojourn : INFINITY);
        dm_sim_table_cell(t, "%+.1f%s", r->growth, r->growing ? " *" : "");
        dm_sim_table_cell(t, th->p2_drift > 0 ? ">= %.1f" : "0", th->p2_drift);
    }
    dm_sim_table_note(t,
                      "The edge above, checked: a window of %g s after %g s of warm-up, %d times "
                      "the others, so that a growth of a few jobs a second shows.",
                      pl->edge_p.time, pl->edge_p.warmup, HET_EDGE_STRETCH);
    int rc = dm_sim_table_emit(ctx, t);
    dm_sim_table_destroy(t);
    return rc;
}

/* Every run's numbers, for machines: OUT/hetero_runs.csv. */
static int
het_write_runs(const struct dm_sim_ctx *ctx, const struct het_plan *pl)
{
    const struct het_params *p = pl->p;
    FILE *f = dm_sim_file(ctx, "hetero_runs.csv");
    if (f == NULL) {
        return ctx->out_dir != NULL ? -1 : 0;
    }
    fprintf(f, "sizes,load,policy,mean_sojourn,growing,growth_per_s,pop_first,pop_second,"
               "pop_end,completed,theory");
    for (size_t c = 0; c < p->nclasses; c++) {
        fprintf(f, ",sojourn_speed%u,share_speed%u", p->capacity[c], p->capacity[c]);
    }
    fprintf(f, "\n");
    for (size_t si = 0; si < pl->nszs; si++) {
        for (size_t li = 0; li < p->nloads; li++) {
            const struct het_theory *th = &pl->th[li];
            for (size_t k = 0; k < pl->npols; k++) {
                const struct het_result *r = het_result_at(pl, si, li, k);
                const char *name = het_policies[pl->pols[k]].name;
                double v = strcmp(name, "p2") == 0
                               ? (th->p2.stable ? th->p2.mean_sojourn : INFINITY)
                           : strcmp(name, "hybrid") == 0  ? th->hybrid
                           : strcmp(name, "random") == 0  ? th->random
                           : strcmp(name, "wrandom") == 0 ? th->wrandom
                                                          : NAN;
                fprintf(f, "%s,%g,%s,%.6g,%d,%.6g,%.6g,%.6g,%llu,%llu,%.6g",
                        het_size_names[pl->szs[si]], p->loads[li], name, r->mean_sojourn,
                        r->growing, r->growth, r->pop_first, r->pop_second,
                        (unsigned long long)r->pop_end, (unsigned long long)r->completed, v);
                for (size_t c = 0; c < p->nclasses; c++) {
                    fprintf(f, ",%.6g,%.6g", r->class_sojourn[c], r->class_share[c]);
                }
                fprintf(f, "\n");
            }
        }
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* OUT/hetero.png: mean sojourn against load, a line per policy and sizes, log y. */
static int
het_plot(const struct dm_sim_ctx *ctx, const struct het_plan *pl)
{
    const struct het_params *p = pl->p;
    if (ctx->out_dir == NULL || !ctx->plots) {
        return 0;
    }
    FILE *f = dm_sim_file(ctx, "hetero_plot.dat");
    if (f == NULL) {
        return -1;
    }
    /* One block per (policy, sizes), the settled runs only; then the mean-field curve. */
    for (size_t k = 0; k < pl->npols; k++) {
        for (size_t si = 0; si < pl->nszs; si++) {
            fprintf(f, "# %s %s\n", het_policies[pl->pols[k]].name, het_size_names[pl->szs[si]]);
            for (size_t li = 0; li < p->nloads; li++) {
                const struct het_result *r = het_result_at(pl, si, li, k);
                if (!r->growing && !r->failed) {
                    fprintf(f, "%g %.6g\n", p->loads[li], r->mean_sojourn);
                }
            }
            fprintf(f, "\n\n");
        }
    }
    fprintf(f, "# p2 mean field\n");
    for (size_t i = 0; i < pl->ncurve; i++) {
        fprintf(f, "%.6g %.6g\n", pl->curve_load[i], pl->curve_t[i]);
    }
    if (fclose(f) != 0) {
        return -1;
    }
    char script[8192];
    int n = snprintf(script, sizeof(script),
                     "set title 'hetero: mean sojourn time, %u %s servers (growing runs left "
                     "out)'\n"
                     "set xlabel 'offered load'\nset ylabel 'mean sojourn time (s)'\n"
                     "set logscale y\nset key top left\nset grid\nset xrange [%g:%g]\n"
                     "set arrow from %g, graph 0 to %g, graph 1 nohead lc 'black'\n"
                     "plot ",
                     p->servers, p->disc == DM_SIM_FIFO ? "FIFO" : "PS", pl->xmin, pl->xmax,
                     pl->edge, pl->edge);
    size_t block = 0;
    for (size_t k = 0; k < pl->npols; k++) {
        for (size_t si = 0; si < pl->nszs; si++, block++) {
            if (n > 0 && (size_t)n < sizeof(script)) {
                n += snprintf(script + n, sizeof(script) - (size_t)n,
                              "'hetero_plot.dat' index %zu using 1:2 with linespoints lc %zu "
                              "dashtype %d pt %d title '%s %s', ",
                              block, k + 1, pl->szs[si] == HET_EXP ? 1 : 2,
                              pl->szs[si] == HET_EXP ? 7 : 6, het_policies[pl->pols[k]].name,
                              het_size_names[pl->szs[si]]);
            }
        }
    }
    if (n > 0 && (size_t)n < sizeof(script)) {
        snprintf(script + n, sizeof(script) - (size_t)n,
                 "'hetero_plot.dat' index %zu using 1:2 with lines lw 2 lc 'black' "
                 "title 'p2 mean field, to its edge (vertical line)'\n",
                 block);
    }
    return dm_sim_plot(ctx, "hetero", script);
}

static int
het_run(const struct dm_sim_ctx *ctx, int argc, char **argv)
{
    struct het_params p;
    int rc = het_parse(ctx, argc, argv, &p);
    if (rc != 0) {
        return rc;
    }
    struct het_plan pl = {
        .p = &p,
        .seed = ctx->seed,
        .curve = ctx->out_dir != NULL && ctx->plots,
        .edge_tol = ctx->quick ? 1e-2 : 1e-3,
    };
    for (size_t k = 0; k < HET_NPOLICIES; k++) {
        if (p.policy[k]) {
            pl.pols[pl.npols++] = k;
        }
    }
    for (size_t s = 0; s < HET_NSIZES; s++) {
        if (p.sizes[s]) {
            pl.szs[pl.nszs++] = s;
        }
    }
    for (size_t c = 0; c < p.nclasses; c++) {
        pl.mfc[c] = (struct dm_meanfield_class){ (double)p.count[c] / p.servers, p.capacity[c] };
    }
    pl.edge = dm_meanfield_p2_edge(pl.mfc, p.nclasses);
    pl.xmin = 1, pl.xmax = 0;
    for (size_t li = 0; li < p.nloads; li++) {
        pl.xmin = fmin(pl.xmin, p.loads[li] - 0.05);
        pl.xmax = fmax(pl.xmax, p.loads[li] + 0.02);
    }
    pl.xmin = fmax(pl.xmin, 0.01);
    pl.nruns = pl.nszs * p.nloads * pl.npols;
    /* The work a mistyped option asks (a million servers for a year of
     * virtual time) ran for days: the arrivals of every run, counted first
     * (about 180,000 a second of CPU here; the default run has 2e7). */
    double capacity = 0, arrivals = 0;
    for (size_t c = 0; c < p.nclasses; c++) {
        capacity += (double)p.count[c] * p.capacity[c];
    }
    for (size_t li = 0; li < p.nloads; li++) {
        arrivals += p.jobs_per_run > 0 ? p.jobs_per_run * (1 + p.warmup / p.time)
                                       : p.loads[li] * capacity * (p.time + p.warmup);
    }
    arrivals *= (double)(pl.nszs * pl.npols);
    if (arrivals > HET_MAX_ARRIVALS) {
        fprintf(stderr,
                "dimmer-sim hetero: about %.2g arrivals over its %zu runs, more than %.0g (hours "
                "of work): ask for fewer --servers, a shorter --time or --jobs-per-run, or fewer "
                "--loads, --sizes or --policies\n",
                arrivals, pl.nruns, HET_MAX_ARRIVALS);
        return 2;
    }
    pl.res = calloc(pl.nruns, sizeof(*pl.res));
    pl.th = calloc(p.nloads, sizeof(*pl.th));
    if (pl.res == NULL || pl.th == NULL) {
        free(pl.res);
        free(pl.th);
        fprintf(stderr, "dimmer-sim hetero: out of memory\n");
        return 1;
    }
    if (p.policy[HET_P2] && pl.edge < 1) {
        pl.nedge = HET_EDGE_RUNS;
        pl.edge_p = p;
        pl.edge_p.time *= HET_EDGE_STRETCH;
        pl.edge_p.warmup *= HET_EDGE_STRETCH;
        pl.edge_p.jobs_per_run *= HET_EDGE_STRETCH;
        for (size_t j = 0; j < HET_EDGE_RUNS; j++) {
            pl.edge_load[j] = pl.edge * het_edge_at[j];
        }
    }
    dm_sim_parallel(ctx->jobs, pl.nedge + pl.nruns + p.nloads + 2, het_task, &pl);
    rc = het_emit_sojourn(ctx, &pl) | het_emit_growth(ctx, &pl) | het_emit_edge(ctx, &pl) |
         het_write_runs(ctx, &pl);
    het_plot(ctx, &pl); /* a missing gnuplot is said once, and is no failure */
    for (size_t i = 0; i < pl.nruns; i++) {
        rc |= pl.res[i].failed ? 1 : 0;
    }
    for (size_t li = 0; li < p.nloads; li++) {
        rc |= pl.th[li].p2_rc != 0 ? 1 : 0;
    }
    for (size_t j = 0; j < pl.nedge; j++) {
        rc |= pl.edge_res[j].failed || pl.edge_th[j].p2_rc != 0 ? 1 : 0;
    }
    free(pl.res);
    free(pl.th);
    return rc != 0 ? 1 : 0;
}

const struct dm_sim_exp dm_sim_exp_hetero = {
    .name = "hetero",
    .summary = "heterogeneous power of two: random, p2, p2c-shadow, hybrid, JSQ on PS servers of "
               "two speeds, beside the mean field",
    .usage = het_usage,
    .run = het_run,
};
