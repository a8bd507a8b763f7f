/*
 * boot-aware (power/policy.h): keeps awake what the load will need by the
 * time a server woken now is up. The need is the live servers' power plus
 * what the current slope adds within one boot delay (and a margin); it
 * scales up at once, whatever the class, and down only when the lower need
 * has lasted delay_off and no server was added within the last boot delay
 * (the seed's rules sleep a server on a dip and wake it again a few seconds
 * later, paying the boot delay in lost quality of service).
 */
#include "power/policy.h"

struct state {
    uint64_t below_since_us; /* the need has been below the current count since; 0: not */
    uint64_t last_up_us;     /* the last time the count went up */
    unsigned last;           /* the last target */
    bool have_last;
};

static void
init(void *state, const struct dm_power_params *p)
{
    (void)p;
    *(struct state *)state = (struct state){ 0 };
}

static void
decide(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
       uint64_t now_us, struct dm_power_target *out)
{
    struct state *s = state;
    double trend_s = m->trend_s > 0 ? m->trend_s : 1;
    /* Watts per connection at full use: the slope in connections a second,
     * turned into the power it will add within a boot delay. */
    double w_per_conn = p->tcp_max > 0 ? p->full_w / p->tcp_max : 0;
    double slope_w = m->d_tcp / trend_s * w_per_conn;
    double boot_s = (double)p->boot_us / 1e6;
    double spare = slope_w > 0 ? slope_w * boot_s * (1 + p->margin) : 0;
    double need = m->total_w + spare;
    enum dm_power_class cls = dm_power_classify(&p->normal, p->tcp_max, m->n_live, m->d_tcp);
    unsigned want = dm_power_servers_for(p, m, need, p->t1_w);
    unsigned now = m->n_live + m->n_booting;
    if (!s->have_last) {
        s->last = now;
        s->have_last = true;
    }
    unsigned cur = s->last > now ? s->last : now;
    unsigned target = want;
    if (want >= cur) {
        s->below_since_us = 0;
        if (want > cur) {
            s->last_up_us = now_us;
        }
    } else {
        if (s->below_since_us == 0) {
            s->below_since_us = now_us;
        }
        bool long_enough = now_us - s->below_since_us >= p->delay_off_us;
        bool recently_up = s->last_up_us != 0 && now_us - s->last_up_us < p->boot_us;
        if (!long_enough || recently_up || slope_w > 0) {
            target = cur; /* not yet: the need may come back within a boot delay */
        } else {
            target = cur - 1; /* one at a time, each after its own delay */
            s->below_since_us = now_us;
        }
    }
    s->last = target;
    *out = (struct dm_power_target){
        .servers = target,
        .immediate = target > now,
        .cls = cls,
        .threshold_w = p->t1_w,
        .w = p->normal,
        .need_w = need,
    };
}

const struct dm_power_ops dm_power_boot_aware = {
    .name = "boot-aware",
    .state_size = sizeof(struct state),
    .init = init,
    .decide = decide,
};
