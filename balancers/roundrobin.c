/*
 * Smooth weighted round robin, as nginx does it
 * (nginx/nginx:src/http/ngx_http_upstream_round_robin.c,
 * ngx_http_upstream_get_peer): at every step each server's current value
 * grows by its weight, the server with the largest current value is chosen
 * and its current value drops by the sum of the weights. Weights 5,1,1 give
 * a a b a c a a rather than a a a a a b c, so a heavy server never takes a
 * long burst in a row.
 *
 * nginx updates the current values under the upstream lock. Here one
 * balancer serves every worker thread and the request path takes no lock, so
 * the sequence is computed once at create: it repeats with a period of
 * sum(weights) / gcd(weights) steps. The table holds one period (at most
 * SCHED_MAX slots; larger weights are scaled down in proportion first), and a
 * pick takes the next slot with one atomic increment of a ticket. A slot whose
 * server is unusable or already tried is passed over for the next slot, at
 * most one period far (see consume_skipped for how the others keep their
 * ratios then).
 *
 * Building the table costs O(period * n) at create, and a pick reads one slot,
 * or up to a period of them when servers are down.
 */
#include "balancers/registry.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/servers.h"

/* Upper bound on the schedule length, in slots (256 KiB of table). */
#define SCHED_MAX 65536u

struct rr_balancer {
    struct dm_balancer base;
    atomic_uint_fast64_t ticket; /* next slot to hand out, modulo period */
    size_t period;               /* slots in sched; 0 for an empty table */
    unsigned *sched;             /* one period of server indexes */
};

static uint64_t
gcd_u64(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/*
 * Reduces the weights by their gcd and, when their sum still exceeds
 * SCHED_MAX, scales them to about SCHED_MAX in total, never below 1 so that
 * every server keeps a slot. Returns the sum, the schedule period.
 */
static uint64_t
reduce_weights(uint64_t *w, size_t n)
{
    uint64_t g = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        g = gcd_u64(g, w[i]);
    }
    for (size_t i = 0; i < n; i++) {
        w[i] /= g;
        total += w[i];
    }
    if (total <= SCHED_MAX) {
        return total;
    }
    uint64_t scaled = 0;
    g = 0;
    for (size_t i = 0; i < n; i++) {
        /* Weights are 32-bit and total fits in 64, so w * SCHED_MAX cannot overflow. */
        w[i] = w[i] * SCHED_MAX / total;
        if (w[i] == 0) {
            w[i] = 1;
        }
        g = gcd_u64(g, w[i]);
    }
    for (size_t i = 0; i < n; i++) {
        w[i] /= g;
        scaled += w[i];
    }
    return scaled;
}

/* Fills sched with one period of nginx's smooth weighted round robin. */
static void
build_schedule(unsigned *sched, size_t period, const uint64_t *w, int64_t *cur, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cur[i] = 0;
    }
    for (size_t t = 0; t < period; t++) {
        size_t best = 0;
        for (size_t i = 0; i < n; i++) {
            cur[i] += (int64_t)w[i];
            if (cur[i] > cur[best]) {
                best = i;
            }
        }
        cur[best] -= (int64_t)period;
        sched[t] = (unsigned)best;
    }
}

static struct dm_balancer *
rr_create(const struct dm_servers *sv, const struct dm_bal_conf *cf)
{
    (void)cf;
    struct rr_balancer *rr = calloc(1, sizeof(*rr));
    if (rr == NULL) {
        return NULL;
    }
    atomic_init(&rr->ticket, 0);
    if (sv->n == 0) {
        return &rr->base;
    }
    uint64_t *w = calloc(sv->n, sizeof(*w));
    int64_t *cur = calloc(sv->n, sizeof(*cur));
    if (w == NULL || cur == NULL) {
        goto fail_scratch;
    }
    for (size_t i = 0; i < sv->n; i++) {
        w[i] = sv->s[i].weight > 0 ? sv->s[i].weight : 1;
    }
    rr->period = (size_t)reduce_weights(w, sv->n);
    rr->sched = calloc(rr->period, sizeof(*rr->sched));
    if (rr->sched == NULL) {
        goto fail_scratch;
    }
    build_schedule(rr->sched, rr->period, w, cur, sv->n);
    free(cur);
    free(w);
    return &rr->base;

fail_scratch:
    free(cur);
    free(w);
    free(rr);
    return NULL;
}

/*
 * A pick that passed over k slots to reach a usable server consumes them too,
 * when no other pick took a ticket meanwhile: the next pick then starts after
 * the slot used. Without this, every slot of a down server would fall to the
 * server in the slot after it (weights 5,1,1 with the first down would give
 * the second five picks in seven); with it, the picks of one thread follow the
 * smooth schedule with the down servers left out, so the others keep their
 * weight ratios. When the compare fails, another thread has the next tickets;
 * the skipped slots are then served again, and only that ratio suffers.
 */
static void
consume_skipped(struct rr_balancer *rr, uint64_t ticket, size_t k)
{
    uint64_t expected = ticket + 1;
    atomic_compare_exchange_strong_explicit(&rr->ticket, &expected, ticket + 1 + k,
                                            memory_order_relaxed, memory_order_relaxed);
}

static int
rr_pick(struct dm_balancer *b, const struct dm_pick *in)
{
    struct rr_balancer *rr = (struct rr_balancer *)b;
    if (rr->period == 0) {
        return DM_NO_SERVER;
    }
    /*
     * Relaxed: the ticket only has to be unique per pick. The schedule is
     * written before the balancer is handed to the workers and never again.
     */
    uint64_t ticket = atomic_fetch_add_explicit(&rr->ticket, 1, memory_order_relaxed);
    size_t slot = (size_t)(ticket % rr->period);
    for (size_t k = 0; k < rr->period; k++) {
        unsigned i = rr->sched[slot];
        if (!dm_pick_tried(in, i) && dm_server_is_usable(&b->sv->s[i], in->now_us)) {
            if (k > 0) {
                consume_skipped(rr, ticket, k);
            }
            return (int)i;
        }
        slot = slot + 1 == rr->period ? 0 : slot + 1;
    }
    return DM_NO_SERVER;
}

static void
rr_destroy(struct dm_balancer *b)
{
    struct rr_balancer *rr = (struct rr_balancer *)b;
    if (rr == NULL) {
        return;
    }
    free(rr->sched);
    rr->sched = NULL;
    free(rr);
}

const struct dm_balancer_ops dm_bal_roundrobin = {
    .name = "roundrobin",
    .create = rr_create,
    .pick = rr_pick,
    .destroy = rr_destroy,
};
