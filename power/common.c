/*
 * The power policies' shared parts (power/policy.h): defaults, the trend
 * classes of the seed's Table 3, the weight tiers of its Table 5, and the
 * server count from a power and a threshold.
 */
#include <math.h>
#include <string.h>

#include "power/policy.h"

void
dm_power_params_default(struct dm_power_params *p)
{
    memset(p, 0, sizeof(*p));
    p->t1_w = 60;
    p->step_w = 5;
    p->tcp_max = 200;
    p->full_w = 70;
    p->idle_w = 40;
    /* Table 5: alpha : beta = 3 : 2, sensitive : normal : insensitive = 10 : 5 : 1. */
    p->tiers[0] = (struct dm_power_weights){ 0.15, 0.10, -0.01, -0.015 };
    p->tiers[1] = (struct dm_power_weights){ 0.075, 0.05, -0.05, -0.075 };
    p->tiers[2] = (struct dm_power_weights){ 0.015, 0.01, -0.10, -0.15 };
    p->normal = p->tiers[1];
    p->tier_low_w = 57.5;
    p->tier_high_w = 66.5;
    p->min_active = 1;
    p->boot_us = 7000000;
    p->delay_off_us = 30000000;
    p->margin = 0.25;
    p->history_us = 3600000000;
}

const char *
dm_power_class_name(enum dm_power_class c)
{
    static const char *const names[DM_PC_CLASSES] = { "rapid-growth", "growth", "steady", "decline",
                                                      "rapid-decline" };
    return (unsigned)c < DM_PC_CLASSES ? names[c] : "?";
}

enum dm_power_class
dm_power_classify(const struct dm_power_weights *w, double tcp_max, unsigned n_live, double d_tcp)
{
    double cap = tcp_max * (double)n_live;
    if (d_tcp > w->alpha * cap) {
        return DM_PC_RAPID_GROWTH;
    }
    if (d_tcp > w->beta * cap) {
        return DM_PC_GROWTH;
    }
    if (d_tcp >= w->neg_beta * cap) {
        return DM_PC_STEADY;
    }
    if (d_tcp >= w->neg_alpha * cap) {
        return DM_PC_DECLINE;
    }
    return DM_PC_RAPID_DECLINE;
}

const struct dm_power_weights *
dm_power_tier(const struct dm_power_params *p, double avg_w)
{
    if (avg_w <= p->tier_low_w) {
        return &p->tiers[0]; /* much spare capacity */
    }
    if (avg_w >= p->tier_high_w) {
        return &p->tiers[2]; /* little spare capacity */
    }
    return &p->tiers[1];
}

unsigned
dm_power_servers_for(const struct dm_power_params *p, const struct dm_power_metrics *m,
                     double need_w, double threshold_w)
{
    /* Scale to zero: with no connection left, idle power needs no server. */
    if (p->min_active == 0 && m->tcp <= 0 && m->d_tcp <= 0) {
        return 0;
    }
    double n = threshold_w > 0 && need_w > 0 ? ceil(need_w / threshold_w - 1e-9) : 0;
    unsigned k = n > (double)m->n_total ? m->n_total : (unsigned)n;
    unsigned lo = p->min_active < m->n_total ? p->min_active : m->n_total;
    return k < lo ? lo : k;
}

const struct dm_power_ops *const dm_power_registry[] = {
    &dm_power_always_on,  /* always_on.c */
    &dm_power_single,     /* single.c */
    &dm_power_dual,       /* dual.c */
    &dm_power_multi,      /* multi.c */
    &dm_power_flexible,   /* multi.c */
    &dm_power_boot_aware, /* boot_aware.c */
    NULL,
};

const struct dm_power_ops *
dm_power_find(const char *name)
{
    for (size_t i = 0; name != NULL && dm_power_registry[i] != NULL; i++) {
        if (strcmp(dm_power_registry[i]->name, name) == 0) {
            return dm_power_registry[i];
        }
    }
    return NULL;
}
