/* always-on: every server awake (power/policy.h), the seed's baseline. */
#include "power/policy.h"

static void
decide(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
       uint64_t now_us, struct dm_power_target *out)
{
    (void)state;
    (void)p;
    (void)now_us;
    *out = (struct dm_power_target){ .servers = m->n_total,
                                     .cls = DM_PC_STEADY,
                                     .need_w = m->total_w };
}

const struct dm_power_ops dm_power_always_on = { .name = "always-on", .decide = decide };
