/* single: servers needed = total estimated power / T1 (power/policy.h). */
#include "power/policy.h"

static void
decide(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
       uint64_t now_us, struct dm_power_target *out)
{
    (void)state;
    (void)now_us;
    *out = (struct dm_power_target){ .cls = DM_PC_STEADY,
                                     .threshold_w = p->t1_w,
                                     .need_w = m->total_w };
    out->servers = dm_power_servers_for(p, m, m->total_w, p->t1_w);
}

const struct dm_power_ops dm_power_single = { .name = "single", .decide = decide };
