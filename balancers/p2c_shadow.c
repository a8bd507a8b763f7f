/*
 * Power of two choices on the shadow cost ("p2c-shadow"), for pools whose
 * servers differ in speed. Plain power of two (draw two servers uniformly,
 * take the one with fewer jobs) loses part of the stability region when
 * speeds differ: a fast server is drawn no more often than a slow one, and
 * with a queue as long as a slow server's it is idle half the time. The
 * heterogeneous variant (DESIGN.md, "Balancers from the research") fixes
 * both halves:
 *
 *   - the two servers are drawn with probability proportional to capacity,
 *     so that a server twice as fast is offered twice the work;
 *   - they are compared on the shadow cost, the cost of taking one more job,
 *     (unfinished jobs + 1) / capacity, where unfinished = s->inflight and
 *     capacity = s->capacity: a server twice as fast may hold twice the queue
 *     for the same delay. The "+ 1" counts the job being placed, so an idle
 *     fast server beats an idle slow one.
 *
 * The costs are compared by cross-multiplication, (a + 1) * cap_b <
 * (b + 1) * cap_a, so no floats; ties go to the first drawn. The draw table is
 * built once at create (balancers/sample.h); a pick reads it and two servers'
 * counters, and shares no other state with the other threads.
 */
#include "balancers/registry.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/sample.h"
#include "balancers/servers.h"

struct p2c_balancer {
    struct dm_balancer base;
    struct dm_sample by_capacity; /* every server, by capacity */
};

static struct dm_balancer *
p2c_create(const struct dm_servers *sv, const struct dm_bal_conf *cf)
{
    (void)cf;
    struct p2c_balancer *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return NULL;
    }
    uint64_t *cap = calloc(sv->n > 0 ? sv->n : 1, sizeof(*cap));
    if (cap == NULL) {
        goto fail_p2c;
    }
    for (size_t i = 0; i < sv->n; i++) {
        cap[i] = sv->s[i].capacity;
    }
    if (dm_sample_init(&p->by_capacity, NULL, cap, sv->n) != 0) {
        goto fail_cap;
    }
    free(cap);
    return &p->base;

fail_cap:
    free(cap);
fail_p2c:
    free(p);
    return NULL;
}

/* In-flight requests clamped to 32 bits so that (inflight + 1) * capacity fits in 64. */
static uint64_t
p2c_unfinished(const struct dm_server *s)
{
    uint64_t u = dm_counter_get(&s->inflight);
    return u > UINT32_MAX - 1 ? UINT32_MAX - 1 : u;
}

static uint64_t
p2c_capacity(const struct dm_server *s)
{
    return s->capacity > 0 ? s->capacity : 1;
}

/* Shadow cost (unfinished jobs + 1) / capacity of a below that of b, strictly. */
static bool
p2c_is_cheaper(const struct dm_server *a, const struct dm_server *b)
{
    return (p2c_unfinished(a) + 1) * p2c_capacity(b) < (p2c_unfinished(b) + 1) * p2c_capacity(a);
}

static int
p2c_pick(struct dm_balancer *b, const struct dm_pick *in)
{
    struct p2c_balancer *p = (struct p2c_balancer *)b;
    int cand[2];
    size_t got = dm_sample_draw(&p->by_capacity, b->sv, in, cand, 0, 2);
    if (got == 0) {
        return DM_NO_SERVER;
    }
    if (got == 2 && p2c_is_cheaper(&b->sv->s[cand[1]], &b->sv->s[cand[0]])) {
        return cand[1];
    }
    return cand[0];
}

static void
p2c_destroy(struct dm_balancer *b)
{
    struct p2c_balancer *p = (struct p2c_balancer *)b;
    if (p == NULL) {
        return;
    }
    dm_sample_fini(&p->by_capacity);
    free(p);
}

const struct dm_balancer_ops dm_bal_p2c_shadow = {
    .name = "p2c-shadow",
    .create = p2c_create,
    .pick = p2c_pick,
    .destroy = p2c_destroy,
};
