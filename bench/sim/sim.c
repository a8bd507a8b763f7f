#include "bench/sim/sim.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void
dm_sim_init(struct dm_sim *sim, uint64_t seed)
{
    memset(sim, 0, sizeof(*sim));
    dm_rng_init(&sim->rng, seed);
}

void
dm_sim_fini(struct dm_sim *sim)
{
    free(sim->_heap);
    memset(sim, 0, sizeof(*sim));
}

static bool
before(const struct dm_sim_event *a, const struct dm_sim_event *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

void
dm_sim_at(struct dm_sim *sim, double t, dm_sim_event_cb cb, void *arg, uint64_t tag)
{
    if (sim->_n == sim->_cap) {
        size_t cap = sim->_cap ? sim->_cap * 2 : 1024;
        struct dm_sim_event *h = realloc(sim->_heap, cap * sizeof(*h));
        if (h == NULL) {
            sim->_oom = true;
            return;
        }
        sim->_heap = h;
        sim->_cap = cap;
    }
    struct dm_sim_event ev = {
        .t = t > sim->now ? t : sim->now, .seq = sim->_seq++, .cb = cb, .arg = arg, .tag = tag
    };
    size_t i = sim->_n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!before(&ev, &sim->_heap[up])) {
            break;
        }
        sim->_heap[i] = sim->_heap[up];
        i = up;
    }
    sim->_heap[i] = ev;
}

static struct dm_sim_event
pop(struct dm_sim *sim)
{
    struct dm_sim_event top = sim->_heap[0];
    struct dm_sim_event last = sim->_heap[--sim->_n];
    size_t n = sim->_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && before(&sim->_heap[c + 1], &sim->_heap[c])) {
            c++;
        }
        if (!before(&sim->_heap[c], &last)) {
            break;
        }
        sim->_heap[i] = sim->_heap[c];
        i = c;
    }
    if (n > 0) {
        sim->_heap[i] = last;
    }
    return top;
}

bool
dm_sim_step(struct dm_sim *sim)
{
    if (sim->_n == 0) {
        return false;
    }
    struct dm_sim_event ev = pop(sim);
    sim->now = ev.t;
    sim->events++;
    ev.cb(sim, ev.arg, ev.tag);
    return true;
}

void
dm_sim_run_until(struct dm_sim *sim, double t_end)
{
    while (sim->_n > 0 && sim->_heap[0].t <= t_end) {
        dm_sim_step(sim);
    }
    if (sim->now < t_end) {
        sim->now = t_end;
    }
}

size_t
dm_sim_pending(const struct dm_sim *sim)
{
    return sim->_n;
}

bool
dm_sim_failed(const struct dm_sim *sim)
{
    return sim->_oom;
}

double
dm_sim_uniform(struct dm_rng *r)
{
    return (double)(dm_rng_next(r) >> 11) * 0x1.0p-53;
}

double
dm_sim_exp(struct dm_rng *r, double mean)
{
    return -mean * log1p(-dm_sim_uniform(r));
}

double
dm_sim_pareto(struct dm_rng *r, double alpha, double lo, double hi)
{
    /* Inverse of F(x) = (1 - (lo/x)^a) / (1 - (lo/hi)^a). */
    double u = dm_sim_uniform(r);
    double la = pow(lo, alpha), ha = pow(hi, alpha);
    double x = -(u * ha - u * la - ha) / (ha * la);
    return pow(x, -1.0 / alpha);
}

double
dm_sim_pareto_mean(double alpha, double lo, double hi)
{
    if (fabs(alpha - 1.0) < 1e-12) {
        return lo * hi / (hi - lo) * log(hi / lo);
    }
    double la = pow(lo, alpha);
    return la / (1 - pow(lo / hi, alpha)) * alpha / (alpha - 1) *
           (1 / pow(lo, alpha - 1) - 1 / pow(hi, alpha - 1));
}

double
dm_sim_lognormal(struct dm_rng *r, double mu, double sigma)
{
    /* Box-Muller, one value of the pair. */
    double u1 = 1.0 - dm_sim_uniform(r), u2 = dm_sim_uniform(r);
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    return exp(mu + sigma * z);
}

unsigned
dm_sim_geometric(struct dm_rng *r, double mean)
{
    if (mean <= 1.0) {
        return 1;
    }
    double p = 1.0 / mean;
    double u = 1.0 - dm_sim_uniform(r);
    double k = ceil(log(u) / log1p(-p));
    return k < 1 ? 1 : k > 1e9 ? 1000000000u : (unsigned)k;
}

int
dm_sim_zipf_init(struct dm_sim_zipf *z, size_t n, double s)
{
    z->n = 0;
    z->cdf = malloc((n ? n : 1) * sizeof(double));
    if (z->cdf == NULL) {
        return -ENOMEM;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += pow((double)(i + 1), -s);
        z->cdf[i] = sum;
    }
    for (size_t i = 0; i < n; i++) {
        z->cdf[i] /= sum;
    }
    z->n = n;
    return 0;
}

size_t
dm_sim_zipf_draw(const struct dm_sim_zipf *z, struct dm_rng *r)
{
    double u = dm_sim_uniform(r);
    size_t lo = 0, hi = z->n ? z->n - 1 : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->cdf[mid] > u) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

void
dm_sim_zipf_fini(struct dm_sim_zipf *z)
{
    free(z->cdf);
    z->cdf = NULL;
    z->n = 0;
}
