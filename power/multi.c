/*
 * multi and flexible: five trend classes with thresholds T1 - 2 step ...
 * T1 + 2 step (the seed's Table 3), acted on at once on rapid growth or
 * rapid decline; flexible takes the class weights from the tier of the
 * average estimated power per live server (Table 5), multi the normal ones.
 */
#include "power/policy.h"

static void
decide_with(const struct dm_power_params *p, const struct dm_power_metrics *m,
            const struct dm_power_weights *w, struct dm_power_target *out)
{
    enum dm_power_class cls = dm_power_classify(w, p->tcp_max, m->n_live, m->d_tcp);
    double t = p->t1_w + p->step_w * ((double)cls - (double)DM_PC_STEADY);
    *out = (struct dm_power_target){
        .cls = cls,
        .threshold_w = t,
        .w = *w,
        .need_w = m->total_w,
        .immediate = cls == DM_PC_RAPID_GROWTH || cls == DM_PC_RAPID_DECLINE,
    };
    out->servers = dm_power_servers_for(p, m, m->total_w, t);
}

static void
decide_multi(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
             uint64_t now_us, struct dm_power_target *out)
{
    (void)state;
    (void)now_us;
    decide_with(p, m, &p->normal, out);
}

static void
decide_flexible(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
                uint64_t now_us, struct dm_power_target *out)
{
    (void)state;
    (void)now_us;
    double avg = m->n_live > 0 ? m->total_w / m->n_live : 0;
    decide_with(p, m, dm_power_tier(p, avg), out);
}

const struct dm_power_ops dm_power_multi = { .name = "multi", .decide = decide_multi };
const struct dm_power_ops dm_power_flexible = { .name = "flexible", .decide = decide_flexible };
