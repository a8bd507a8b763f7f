/*
 * dual: a lower threshold (T1 - step) while the load grows, a higher one
 * (T1 + step) while it declines, T1 when it does not move (power/policy.h).
 */
#include "power/policy.h"

static void
decide(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
       uint64_t now_us, struct dm_power_target *out)
{
    (void)state;
    (void)now_us;
    enum dm_power_class cls = m->d_tcp > 0   ? DM_PC_GROWTH
                              : m->d_tcp < 0 ? DM_PC_DECLINE
                                             : DM_PC_STEADY;
    double t = cls == DM_PC_GROWTH    ? p->t1_w - p->step_w
               : cls == DM_PC_DECLINE ? p->t1_w + p->step_w
                                      : p->t1_w;
    *out = (struct dm_power_target){ .cls = cls, .threshold_w = t, .need_w = m->total_w };
    out->servers = dm_power_servers_for(p, m, m->total_w, t);
}

const struct dm_power_ops dm_power_dual = { .name = "dual", .decide = decide };
