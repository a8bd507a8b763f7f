/*
 * Weighted least connections: the usable, not yet tried server with the
 * fewest connections per unit of weight, conns / weight, as haproxy's
 * leastconn and nginx's least_conn do (nginx/nginx:src/http/modules/
 * ngx_http_upstream_least_conn_module.c). The ratios are compared by
 * cross-multiplication, a.conns * b.weight < b.conns * a.weight, so no floats.
 *
 * Equal ratios are broken round robin: each pick starts its scan one server
 * further along (an atomic rotor) and keeps the first best server it meets,
 * so a fresh pool with no connections is walked in order rather than all
 * sent to server 0.
 *
 * The scan is linear in the number of servers. That is inherent here:
 * connection counts change on every worker thread without a lock, so there
 * is no ordered structure to keep up to date (haproxy keeps a tree under its
 * lock, lb_fwlc.c); pools are small, and one pass over n counters is cheap.
 */
#include "balancers/registry.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/servers.h"

struct lc_balancer {
    struct dm_balancer base;
    atomic_uint_fast64_t rotor; /* where the next scan starts, modulo n */
};

static struct dm_balancer *
lc_create(const struct dm_servers *sv, const struct dm_bal_conf *cf)
{
    (void)sv;
    (void)cf;
    struct lc_balancer *lc = calloc(1, sizeof(*lc));
    if (lc == NULL) {
        return NULL;
    }
    atomic_init(&lc->rotor, 0);
    return &lc->base;
}

/*
 * Connections clamped to 32 bits, so that conns * weight (weight is an
 * unsigned, 32 bits) cannot overflow 64; no pool comes near that many.
 */
static uint64_t
lc_conns(const struct dm_server *s)
{
    uint64_t c = dm_counter_get(&s->conns);
    return c > UINT32_MAX ? UINT32_MAX : c;
}

static uint64_t
lc_weight(const struct dm_server *s)
{
    return s->weight > 0 ? s->weight : 1;
}

static int
lc_pick(struct dm_balancer *b, const struct dm_pick *in)
{
    struct lc_balancer *lc = (struct lc_balancer *)b;
    const struct dm_servers *sv = b->sv;
    if (sv->n == 0) {
        return DM_NO_SERVER;
    }
    /* Relaxed: the rotor only spreads ties; it publishes nothing. */
    uint64_t start = atomic_fetch_add_explicit(&lc->rotor, 1, memory_order_relaxed) % sv->n;
    int best = DM_NO_SERVER;
    uint64_t best_conns = 0;
    uint64_t best_weight = 1;
    size_t i = (size_t)start;
    for (size_t k = 0; k < sv->n; k++) {
        const struct dm_server *s = &sv->s[i];
        if (!dm_pick_tried(in, i) && dm_server_is_usable(s, in->now_us)) {
            uint64_t c = lc_conns(s);
            uint64_t w = lc_weight(s);
            /* c / w < best_conns / best_weight, strictly: the first of equals wins. */
            if (best == DM_NO_SERVER || c * best_weight < best_conns * w) {
                best = (int)i;
                best_conns = c;
                best_weight = w;
            }
        }
        i = i + 1 == sv->n ? 0 : i + 1;
    }
    return best;
}

static void
lc_destroy(struct dm_balancer *b)
{
    free(b);
}

const struct dm_balancer_ops dm_bal_leastconn = {
    .name = "leastconn",
    .create = lc_create,
    .pick = lc_pick,
    .destroy = lc_destroy,
};
