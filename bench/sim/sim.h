/*
 * dimmer-sim's core (bench/sim/README.md): a deterministic discrete-event
 * clock and queue, and the random variates the experiments draw. Pure code,
 * part of dm_sim with the server model (server.h), checked by
 * tests/purity.cmake as the policy libraries are: the simulator runs the
 * balancers and power policies of dimmer in virtual time, so it must not
 * read a clock or call rand() either.
 *
 * Time is a double in seconds from the start of a run; policies get it as
 * now_us = dm_sim_now_us(). Events fire in time order, and two events at the
 * same time in the order they were scheduled (a sequence number breaks the
 * tie), so a run is a function of its seed and its parameters alone.
 *
 * An event is a callback with two arguments; it cannot be cancelled.
 * Callers that need to move an event (a server whose next completion
 * changes) schedule a new one with a new tag and ignore the stale one when
 * it fires (server.c does so).
 */
#ifndef DM_BENCH_SIM_SIM_H
#define DM_BENCH_SIM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "balancers/rng.h"

struct dm_sim;

typedef void (*dm_sim_event_cb)(struct dm_sim *sim, void *arg, uint64_t tag);

struct dm_sim_event {
    double t;
    uint64_t seq;
    dm_sim_event_cb cb;
    void *arg;
    uint64_t tag;
};

/* One run's clock, queue and generator; caller-owned (dm_sim_init/fini). */
struct dm_sim {
    double now;        /* seconds */
    struct dm_rng rng; /* the run's generator */
    uint64_t events;   /* events fired so far */
    struct dm_sim_event *_heap;
    size_t _n, _cap;
    uint64_t _seq;
    bool _oom;
};

void dm_sim_init(struct dm_sim *sim, uint64_t seed);
void dm_sim_fini(struct dm_sim *sim);

/*
 * Schedules cb(sim, arg, tag) at time t (a time in the past fires at once,
 * at now). An allocation failure is remembered: dm_sim_failed() tells, and
 * the run should be given up (the experiments check it at the end).
 */
void dm_sim_at(struct dm_sim *sim, double t, dm_sim_event_cb cb, void *arg, uint64_t tag);
static inline void
dm_sim_after(struct dm_sim *sim, double dt, dm_sim_event_cb cb, void *arg, uint64_t tag)
{
    dm_sim_at(sim, sim->now + dt, cb, arg, tag);
}

/* Fires events in order while the next one is at or before t_end; now ends at t_end. */
void dm_sim_run_until(struct dm_sim *sim, double t_end);

/* Fires the next event; false when the queue is empty. */
bool dm_sim_step(struct dm_sim *sim);

size_t dm_sim_pending(const struct dm_sim *sim);
bool dm_sim_failed(const struct dm_sim *sim);

static inline uint64_t
dm_sim_now_us(const struct dm_sim *sim)
{
    return (uint64_t)(sim->now * 1e6 + 0.5);
}

/* ---- random variates, from the run's generator ---- */

/* Uniform in [0, 1), 53 bits. */
double dm_sim_uniform(struct dm_rng *r);
/* Exponential with the given mean (> 0). */
double dm_sim_exp(struct dm_rng *r, double mean);
/* Bounded Pareto on [lo, hi] with shape alpha (> 0); lo < hi. */
double dm_sim_pareto(struct dm_rng *r, double alpha, double lo, double hi);
/* Its mean. */
double dm_sim_pareto_mean(double alpha, double lo, double hi);
/* Lognormal: exp(N(mu, sigma^2)). */
double dm_sim_lognormal(struct dm_rng *r, double mu, double sigma);
/* Geometric on {1, 2, ...} with the given mean (>= 1). */
unsigned dm_sim_geometric(struct dm_rng *r, double mean);

/*
 * Zipf over ranks 0..n-1 with exponent s: a cumulative table built once
 * (dm_sim_zipf_init, n doubles), drawn by binary search.
 */
struct dm_sim_zipf {
    double *cdf;
    size_t n;
};
int dm_sim_zipf_init(struct dm_sim_zipf *z, size_t n, double s);
size_t dm_sim_zipf_draw(const struct dm_sim_zipf *z, struct dm_rng *r);
void dm_sim_zipf_fini(struct dm_sim_zipf *z);

#endif
