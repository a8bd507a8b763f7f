/*
 * The mean-field limit of power of two choices in a heterogeneous pool of
 * processor-sharing servers (pure, part of dm_sim): the prediction that
 * dimmer-sim's "hetero" experiment prints beside the simulated value
 * (bench/sim/README.md; Mukhopadhyay and Mazumdar, "Analysis of load
 * balancing in large heterogeneous processor sharing systems", 2013).
 *
 * The model. N servers in classes c = 1..M, a share gamma_c of them in class
 * c, each serving at speed mu_c (work units a second; a job of mean size 1
 * alone takes 1 / mu_c on average); jobs arrive in a Poisson stream of rate
 * lambda N (lambda per server), and each goes to the server with fewer jobs of
 * two drawn uniformly at random, ties at random. Let x_c(k) be the fraction
 * of class-c servers holding k jobs or more (x_c(0) = 1) and y(k) =
 * sum_c gamma_c x_c(k) the fraction over the pool. As N grows, with
 * exponential sizes,
 *
 *   dx_c(k)/dt = lambda (x_c(k-1) - x_c(k)) (y(k-1) + y(k)) - mu_c (x_c(k) - x_c(k+1)),  k >= 1.
 *
 * Arrivals: a given server with k - 1 jobs is one of the two draws of a job
 * with probability 2/N, and the job is its when the other draw holds k jobs or
 * more (fraction y(k)) or, half the time, exactly k - 1 (y(k-1) - y(k)):
 * lambda N (2/N) (y(k) + (y(k-1) - y(k)) / 2) = lambda (y(k-1) + y(k)) per
 * such server. Departures: under processor sharing a busy server of class c
 * finishes jobs at rate mu_c, however many it holds. These are the standard
 * mean-field equations of power of two with the server classes kept apart;
 * with one class they are Mitzenmacher's, whose fixed point is
 * x(k) = rho^(2^k - 1) (tests/sim/test_hetero.c checks both, and integrates
 * the equations from an empty pool to the fixed point found here).
 * The paper's own text was only at hand as a summary: its claims used here
 * are the reduced stability region of power of two when speeds differ and
 * the insensitivity of the fixed point to the job-size distribution beyond
 * its mean (under asymptotic independence).
 *
 * The fixed point. Setting the derivative to zero gives, level by level, the
 * balance of a birth-death chain in p_c(k) = x_c(k) - x_c(k+1):
 *
 *   mu_c p_c(k) = lambda (y(k-1) + y(k)) p_c(k-1),
 *
 * so, given y, each class's occupancy is that of a chain with birth rate
 * a(k) = lambda (y(k-1) + y(k)) into level k and death rate mu_c, the same a
 * for every class. dm_meanfield_p2 iterates y <- Phi(y), Phi computing the
 * chains' occupancies from y, starting from the empty pool y = (1, 0, 0...).
 * Phi is monotone (a larger y is a larger a, so every chain is larger in the
 * likelihood-ratio order, so a larger y), hence the iterates increase to the
 * least fixed point, which is the fixed point when one exists. The chains are
 * cut at DM_MEANFIELD_LEVELS jobs; when the iterates put a fraction above
 * DM_MEANFIELD_SPILL at the top level there is no fixed point within it and
 * the answer is "unstable" (monotone iterates never come back down, so this
 * is decided as soon as it is seen).
 *
 * The edge. Any scheme that draws two servers uniformly sends a job to a set
 * S of classes whenever both draws fall in S, so S receives at least
 * lambda gamma_S^2 N jobs a second while it can serve sum_{c in S} gamma_c mu_c N:
 * power of two can only be stable when lambda gamma_S^2 < sum_{c in S}
 * gamma_c mu_c for every S (S = every class: lambda below the mean speed).
 * dm_meanfield_p2_edge returns that bound; dm_meanfield_p2_edge_search finds
 * the edge by bisection on the solver's verdict alone, and finds the same
 * load (the condition is also sufficient for the mean field, numerically),
 * as does the simulation (dimmer-sim hetero's edge table).
 */
#ifndef DM_BENCH_SIM_MEANFIELD_H
#define DM_BENCH_SIM_MEANFIELD_H

#include <stdbool.h>
#include <stddef.h>

/* Levels the chains are cut at, and the top-level fraction that means "no fixed point". */
#define DM_MEANFIELD_LEVELS 256
#define DM_MEANFIELD_SPILL  1e-9

struct dm_meanfield_class {
    double share; /* gamma_c: fraction of the servers, the shares sum to 1 */
    double speed; /* mu_c: work units per second, > 0 */
};

struct dm_meanfield {
    bool stable;         /* a fixed point exists within the levels */
    double mean_jobs;    /* sum_c gamma_c sum_k x_c(k): jobs per server */
    double mean_sojourn; /* E[T] = mean_jobs / lambda (Little's law) */
    double residual;     /* max_k |Phi(y)(k) - y(k)| at the end */
    size_t levels;       /* highest level with a fraction above 1e-300 */
    unsigned iterations; /* of Phi */
};

/*
 * The fixed point for arrival rate lambda per server (> 0) over n classes
 * (1 <= n <= 16; shares > 0, normalised here). When x is not NULL it receives
 * x_c(k) for k in 0..kmax-1 at x[c * kmax + k] (zeros past the support; for an
 * unstable pool, the last iterate). Returns 0, -EINVAL on bad arguments or
 * -ENOMEM.
 */
int dm_meanfield_p2(const struct dm_meanfield_class *cls, size_t n, double lambda,
                    struct dm_meanfield *out, double *x, size_t kmax);

/*
 * The stability edge of power of two as an offered load, lambda / sum_c
 * gamma_c mu_c in (0, 1]: min over the sets S of classes of
 * sum_{c in S} gamma_c mu_c / (gamma_S^2 sum_c gamma_c mu_c). 1 means power of
 * two keeps the whole region (equal speeds, for one). A negative errno on bad
 * classes.
 */
double dm_meanfield_p2_edge(const struct dm_meanfield_class *cls, size_t n);

/*
 * Past the edge, the rate at which jobs pile up, per server: at least
 * max over S of (lambda gamma_S^2 - sum_{c in S} gamma_c mu_c), the excess of
 * what the set S must take over what it can serve (0 below the edge). When
 * the other classes keep up, as in two classes past the slow class's limit,
 * this is the fluid drift itself: the number in system of N servers grows by
 * N times it a second.
 */
double dm_meanfield_p2_drift(const struct dm_meanfield_class *cls, size_t n, double lambda);

/*
 * The edge found by bisection on dm_meanfield_p2's verdict, to within tol in
 * load (lo, hi: a stable and an unstable load, or 0 and 1). Returns the
 * midpoint of the last bracket, or a negative errno.
 */
double dm_meanfield_p2_edge_search(const struct dm_meanfield_class *cls, size_t n, double lo,
                                   double hi, double tol);

#endif
