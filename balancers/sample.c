#include "balancers/sample.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "balancers/rng.h"

int
dm_sample_init(struct dm_sample *t, const unsigned *server, const uint64_t *weight, size_t n)
{
    *t = (struct dm_sample){ 0 };
    if (n == 0) {
        return 0;
    }
    bool equal = true;
    for (size_t j = 1; j < n; j++) {
        uint64_t a = weight[j - 1] > 0 ? weight[j - 1] : 1;
        uint64_t b = weight[j] > 0 ? weight[j] : 1;
        equal = equal && a == b;
    }
    if (!equal) {
        t->_cum = calloc(n, sizeof(*t->_cum));
        if (t->_cum == NULL) {
            goto fail;
        }
    }
    if (server != NULL) {
        t->_server = calloc(n, sizeof(*t->_server));
        if (t->_server == NULL) {
            goto fail;
        }
    }
    uint64_t total = 0;
    for (size_t j = 0; j < n; j++) {
        uint64_t w = weight[j] > 0 ? weight[j] : 1;
        assert(total + w > total); /* weights are 32-bit, pools far below 2^32 servers */
        total += w;
        if (t->_cum != NULL) {
            t->_cum[j] = total;
        }
        if (t->_server != NULL) {
            t->_server[j] = server[j];
        }
    }
    t->_total = total;
    t->n = n;
    return 0;

fail:
    dm_sample_fini(t);
    return -ENOMEM;
}

void
dm_sample_fini(struct dm_sample *t)
{
    free(t->_cum);
    t->_cum = NULL;
    free(t->_server);
    t->_server = NULL;
    t->_total = 0;
    t->n = 0;
}

static inline unsigned
sample_server(const struct dm_sample *t, size_t j)
{
    return t->_server != NULL ? t->_server[j] : (unsigned)j;
}

static inline uint64_t
sample_weight(const struct dm_sample *t, size_t j)
{
    if (t->_cum == NULL) {
        return 1;
    }
    return j == 0 ? t->_cum[0] : t->_cum[j] - t->_cum[j - 1];
}

/*
 * One entry by weight, eligible or not: the first j with _cum[j] > x. The
 * search is branch-free (the compiler turns the select into a conditional
 * move): x is random, so a branch would be mispredicted half the time, and
 * ten of those cost more than the rest of a pick at 1024 servers.
 */
static inline size_t
sample_entry(const struct dm_sample *t, struct dm_rng *rng)
{
    if (t->_cum == NULL) {
        return (size_t)dm_rng_below(rng, t->n);
    }
    uint64_t x = dm_rng_below(rng, t->_total);
    /* The answer stays in [lo, lo + len - 1]; x < _total = _cum[n - 1] puts it in range. */
    size_t lo = 0;
    size_t len = t->n;
    while (len > 1) {
        size_t half = len / 2;
        lo = t->_cum[lo + half - 1] <= x ? lo + half : lo;
        len -= half;
    }
    return lo;
}

static inline bool
sample_is_chosen(const int *chosen, size_t have, unsigned s)
{
    for (size_t k = 0; k < have; k++) {
        if (chosen[k] == (int)s) {
            return true;
        }
    }
    return false;
}

/*
 * One eligible, not yet chosen server by weight, by two passes over the
 * table: the total weight of the candidates, then the one under a random
 * point of it. A server may change state between the passes (another thread's
 * health check); the second pass then settles for the last candidate it saw.
 * Returns DM_NO_SERVER when there is no candidate.
 */
static int
sample_linear(const struct dm_sample *t, const struct dm_servers *sv, const struct dm_pick *in,
              const int *chosen, size_t have)
{
    uint64_t total = 0;
    for (size_t j = 0; j < t->n; j++) {
        unsigned s = sample_server(t, j);
        if (dm_sample_is_eligible(sv, in, s) && !sample_is_chosen(chosen, have, s)) {
            total += sample_weight(t, j);
        }
    }
    if (total == 0) {
        return DM_NO_SERVER;
    }
    uint64_t x = dm_rng_below(in->rng, total);
    int last = DM_NO_SERVER;
    for (size_t j = 0; j < t->n; j++) {
        unsigned s = sample_server(t, j);
        if (dm_sample_is_eligible(sv, in, s) && !sample_is_chosen(chosen, have, s)) {
            uint64_t w = sample_weight(t, j);
            if (x < w) {
                return (int)s;
            }
            x -= w;
            last = (int)s;
        }
    }
    return last;
}

size_t
dm_sample_draw(const struct dm_sample *t, const struct dm_servers *sv, const struct dm_pick *in,
               int *chosen, size_t have, size_t want)
{
    /* chosen[0..have) are servers of the table: at most n can be drawn. */
    if (want > t->n) {
        want = t->n;
    }
    /*
     * Rejection until it has cost about what the linear passes would, so
     * that a pick never costs much more than twice the cheaper of the two
     * (the ski-rental rule): a draw costs about as much as reading the state
     * of eight servers (dimmer-pickbench), and the passes read each server
     * twice, so they cost about n / 4 draws.
     */
    size_t budget = t->n / 4 > DM_SAMPLE_MISSES ? t->n / 4 : DM_SAMPLE_MISSES;
    size_t misses = 0;
    while (have < want && misses < budget) {
        unsigned s = sample_server(t, sample_entry(t, in->rng));
        if (!dm_sample_is_eligible(sv, in, s) || sample_is_chosen(chosen, have, s)) {
            misses++;
            continue;
        }
        chosen[have++] = (int)s;
    }
    while (have < want) {
        int s = sample_linear(t, sv, in, chosen, have);
        if (s == DM_NO_SERVER) {
            break;
        }
        chosen[have++] = s;
    }
    return have;
}
