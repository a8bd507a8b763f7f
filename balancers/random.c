/*
 * Power of d choices ("random"): draw d distinct usable servers at random,
 * each with probability proportional to its weight, and send the request to
 * the one with the fewest connections per unit of weight, conns / weight
 * (Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing",
 * 2001; nginx's "random two least_conn", ngx_http_upstream_random_module.c).
 * d is the pool's `draws`, 2 by default. With d = 1 this is weighted random;
 * d = 2 already brings the maximum load from log n / log log n down to
 * log log n / log 2 over the average, with no shared state at all.
 *
 * The draws are weighted rather than uniform-then-compared-per-weight, so
 * that d = 1 follows the weights and every d sends a heavier server a
 * proportionally larger share even when loads tie (an idle pool).
 * Ratios are compared by cross-multiplication, as leastconn does; ties go to
 * the server drawn first, which is itself random.
 *
 * When d is at least the number of servers every eligible server is in the
 * sample, so the pick is a scan for the least loaded (ties by weight). The
 * same scan serves d above RANDOM_DRAWS_MAX: such a sample is already close
 * to the whole pool, and d draws with a duplicate check each cost more than
 * one pass over the servers.
 */
#include "balancers/registry.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/rng.h"
#include "balancers/sample.h"
#include "balancers/servers.h"

#define RANDOM_DRAWS_DEFAULT 2
#define RANDOM_DRAWS_MAX     64

struct random_balancer {
    struct dm_balancer base;
    unsigned draws;             /* d >= 1 */
    struct dm_sample by_weight; /* every server, by weight */
};

static struct dm_balancer *
random_create(const struct dm_servers *sv, const struct dm_bal_conf *cf)
{
    struct random_balancer *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return NULL;
    }
    r->draws = cf->draws > 0 ? cf->draws : RANDOM_DRAWS_DEFAULT;
    uint64_t *w = calloc(sv->n > 0 ? sv->n : 1, sizeof(*w));
    if (w == NULL) {
        goto fail_random;
    }
    for (size_t i = 0; i < sv->n; i++) {
        w[i] = sv->s[i].weight;
    }
    if (dm_sample_init(&r->by_weight, NULL, w, sv->n) != 0) {
        goto fail_weights;
    }
    free(w);
    return &r->base;

fail_weights:
    free(w);
fail_random:
    free(r);
    return NULL;
}

/* Connections clamped to 32 bits so that conns * weight fits in 64. */
static uint64_t
random_conns(const struct dm_server *s)
{
    uint64_t c = dm_counter_get(&s->conns);
    return c > UINT32_MAX ? UINT32_MAX : c;
}

static uint64_t
random_weight(const struct dm_server *s)
{
    return s->weight > 0 ? s->weight : 1;
}

/* True when a carries strictly fewer connections per unit of weight than b. */
static bool
random_is_lighter(const struct dm_server *a, const struct dm_server *b)
{
    return random_conns(a) * random_weight(b) < random_conns(b) * random_weight(a);
}

/*
 * The whole pool is the sample: the least loaded eligible server. Ties go to
 * one of the tied servers with probability proportional to its weight (a
 * weighted reservoir of one), as the first drawn of them would in a sample.
 */
static int
random_scan(const struct dm_servers *sv, const struct dm_pick *in)
{
    int best = DM_NO_SERVER;
    uint64_t tied_weight = 0;
    for (size_t i = 0; i < sv->n; i++) {
        if (!dm_sample_is_eligible(sv, in, i)) {
            continue;
        }
        const struct dm_server *s = &sv->s[i];
        if (best == DM_NO_SERVER || random_is_lighter(s, &sv->s[best])) {
            best = (int)i;
            tied_weight = random_weight(s);
        } else if (!random_is_lighter(&sv->s[best], s)) {
            tied_weight += random_weight(s);
            if (dm_rng_below(in->rng, tied_weight) < random_weight(s)) {
                best = (int)i;
            }
        }
    }
    return best;
}

static int
random_pick(struct dm_balancer *b, const struct dm_pick *in)
{
    struct random_balancer *r = (struct random_balancer *)b;
    const struct dm_servers *sv = b->sv;
    if (sv->n == 0) {
        return DM_NO_SERVER;
    }
    if (r->draws >= sv->n || r->draws > RANDOM_DRAWS_MAX) {
        return random_scan(sv, in);
    }
    int cand[RANDOM_DRAWS_MAX];
    size_t got = dm_sample_draw(&r->by_weight, sv, in, cand, 0, r->draws);
    if (got == 0) {
        return DM_NO_SERVER;
    }
    int best = cand[0];
    for (size_t k = 1; k < got; k++) {
        if (random_is_lighter(&sv->s[cand[k]], &sv->s[best])) {
            best = cand[k];
        }
    }
    return best;
}

static void
random_destroy(struct dm_balancer *b)
{
    struct random_balancer *r = (struct random_balancer *)b;
    if (r == NULL) {
        return;
    }
    dm_sample_fini(&r->by_weight);
    free(r);
}

const struct dm_balancer_ops dm_bal_random = {
    .name = "random",
    .create = random_create,
    .pick = random_pick,
    .destroy = random_destroy,
};
