#include "bench/sim/meanfield.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MF_MAX_CLASSES 16
/*
 * Iterations of Phi allowed. Near the edge the iterates crawl (the fixed point
 * is about to vanish and the contraction rate goes to 1): in the default pool
 * of dimmer-sim hetero, 8e3 iterations at 0.2 % below the edge, 1.7e5 at
 * 0.006 %. Past the cap the answer is "unstable".
 */
#define MF_MAX_ITERATIONS 300000u
/*
 * The edge search asks only for a verdict, many times near the edge, so it
 * cuts the chains lower and gives up sooner: a stable fixed point there
 * needs some 20 to 30 levels, and the cap makes it answer "unstable" within
 * about 2e-4 of the edge (10 / distance iterations), inside its tolerance.
 */
#define MF_SEARCH_LEVELS     64
#define MF_SEARCH_ITERATIONS 50000u
/* Converged: no level moved by more than this in one iteration. */
#define MF_TOL 1e-13

/* Normalised shares and speeds; 0 or -EINVAL. */
static int
mf_classes(const struct dm_meanfield_class *cls, size_t n, double *share, double *speed)
{
    if (cls == NULL || n == 0 || n > MF_MAX_CLASSES) {
        return -EINVAL;
    }
    double total = 0;
    for (size_t c = 0; c < n; c++) {
        if (!(cls[c].share > 0) || !(cls[c].speed > 0)) {
            return -EINVAL;
        }
        total += cls[c].share;
    }
    for (size_t c = 0; c < n; c++) {
        share[c] = cls[c].share / total;
        speed[c] = cls[c].speed;
    }
    return 0;
}

/*
 * Phi: the occupancy x_c(0..top) of each class's birth-death chain with
 * birth rate a(k) = lambda (y(k-1) + y(k)) into level k and death rate
 * mu_c, cut at top; y(k) = 0 past the support. The chain's weights q(k) =
 * prod_{i<=k} a(i) / mu_c are rescaled when they grow large, so no logs.
 */
static void
mf_phi(size_t n, const double *share, const double *speed, double lambda, const double *y, size_t K,
       size_t top, double *q, double *x, double *ynew)
{
    for (size_t k = 0; k <= top; k++) {
        ynew[k] = 0;
    }
    for (size_t c = 0; c < n; c++) {
        double *xc = x + c * (K + 1);
        q[0] = 1;
        double scale_at = 1e250;
        for (size_t k = 1; k <= top; k++) {
            q[k] = q[k - 1] * lambda * (y[k - 1] + y[k]) / speed[c];
            if (q[k] > scale_at) {
                for (size_t j = 0; j <= k; j++) {
                    q[j] *= 1e-250;
                }
            }
        }
        /* Tails from the top, so that small fractions keep their digits. */
        double tail = 0;
        for (size_t k = top + 1; k-- > 0;) {
            tail += q[k];
            xc[k] = tail;
        }
        for (size_t k = 1; k <= top; k++) {
            xc[k] /= tail;
        }
        xc[0] = 1;
        for (size_t k = 0; k <= top; k++) {
            ynew[k] += share[c] * xc[k];
        }
    }
}

/* The least fixed point with the chains cut at K levels, from the empty pool. */
static int
mf_solve(const double *share, const double *speed, size_t n, double lambda, size_t K,
         unsigned max_it, struct dm_meanfield *out, double *x, size_t kmax)
{
    /* y and ynew have a zero past the top level, read as y(k) for k = top + 1. */
    double *y = calloc(K + 2, sizeof(double));
    double *ynew = calloc(K + 2, sizeof(double));
    double *q = calloc(K + 1, sizeof(double));
    double *xs = calloc(n * (K + 1), sizeof(double));
    if (y == NULL || ynew == NULL || q == NULL || xs == NULL) {
        free(y);
        free(ynew);
        free(q);
        free(xs);
        return -ENOMEM;
    }
    memset(out, 0, sizeof(*out));
    y[0] = 1; /* the empty pool */
    size_t support = 0;
    bool stable = false;
    double residual = 1;
    unsigned it = 0;
    while (it < max_it) {
        it++;
        size_t top = support + 1 < K ? support + 1 : K;
        mf_phi(n, share, speed, lambda, y, K, top, q, xs, ynew);
        residual = 0;
        size_t s = 0;
        for (size_t k = 0; k <= top; k++) {
            double d = fabs(ynew[k] - y[k]);
            residual = d > residual ? d : residual;
            s = ynew[k] > 0 ? k : s;
            y[k] = ynew[k];
        }
        support = s;
        if (y[K] > DM_MEANFIELD_SPILL) {
            break; /* the iterates only grow: no fixed point below K levels */
        }
        if (residual < MF_TOL) {
            stable = true;
            break;
        }
    }
    double jobs = 0;
    size_t levels = 0;
    for (size_t k = 1; k <= K; k++) {
        jobs += y[k];
        levels = y[k] > 1e-300 ? k : levels;
    }
    out->stable = stable;
    out->mean_jobs = jobs;
    out->mean_sojourn = jobs / lambda;
    out->residual = residual;
    out->levels = levels;
    out->iterations = it;
    if (x != NULL) {
        for (size_t c = 0; c < n; c++) {
            for (size_t k = 0; k < kmax; k++) {
                x[c * kmax + k] = k <= support && k <= K ? xs[c * (K + 1) + k] : 0;
            }
        }
    }
    free(y);
    free(ynew);
    free(q);
    free(xs);
    return 0;
}

int
dm_meanfield_p2(const struct dm_meanfield_class *cls, size_t n, double lambda,
                struct dm_meanfield *out, double *x, size_t kmax)
{
    double share[MF_MAX_CLASSES], speed[MF_MAX_CLASSES];
    if (out == NULL || !(lambda > 0) || mf_classes(cls, n, share, speed) != 0) {
        return -EINVAL;
    }
    return mf_solve(share, speed, n, lambda, DM_MEANFIELD_LEVELS, MF_MAX_ITERATIONS, out, x, kmax);
}

double
dm_meanfield_p2_edge(const struct dm_meanfield_class *cls, size_t n)
{
    double share[MF_MAX_CLASSES], speed[MF_MAX_CLASSES];
    if (mf_classes(cls, n, share, speed) != 0) {
        return -EINVAL;
    }
    double mean_speed = 0;
    for (size_t c = 0; c < n; c++) {
        mean_speed += share[c] * speed[c];
    }
    double edge = 1;
    for (unsigned set = 1; set < 1u << n; set++) {
        double g = 0, cap = 0;
        for (size_t c = 0; c < n; c++) {
            if (set >> c & 1) {
                g += share[c];
                cap += share[c] * speed[c];
            }
        }
        double e = cap / (g * g) / mean_speed;
        edge = e < edge ? e : edge;
    }
    return edge;
}

double
dm_meanfield_p2_drift(const struct dm_meanfield_class *cls, size_t n, double lambda)
{
    double share[MF_MAX_CLASSES], speed[MF_MAX_CLASSES];
    if (mf_classes(cls, n, share, speed) != 0) {
        return -EINVAL;
    }
    double drift = 0;
    for (unsigned set = 1; set < 1u << n; set++) {
        double g = 0, cap = 0;
        for (size_t c = 0; c < n; c++) {
            if (set >> c & 1) {
                g += share[c];
                cap += share[c] * speed[c];
            }
        }
        double d = lambda * g * g - cap;
        drift = d > drift ? d : drift;
    }
    return drift;
}

double
dm_meanfield_p2_edge_search(const struct dm_meanfield_class *cls, size_t n, double lo, double hi,
                            double tol)
{
    double share[MF_MAX_CLASSES], speed[MF_MAX_CLASSES];
    if (mf_classes(cls, n, share, speed) != 0 || !(lo >= 0 && lo < hi && tol > 0)) {
        return -EINVAL;
    }
    double mean_speed = 0;
    for (size_t c = 0; c < n; c++) {
        mean_speed += share[c] * speed[c];
    }
    while (hi - lo > tol) {
        double mid = (lo + hi) / 2;
        struct dm_meanfield mf;
        int rc = mf_solve(share, speed, n, mid * mean_speed, MF_SEARCH_LEVELS, MF_SEARCH_ITERATIONS,
                          &mf, NULL, 0);
        if (rc != 0) {
            return rc;
        }
        if (mf.stable) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return (lo + hi) / 2;
}
