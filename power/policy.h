/*
 * Power policies: how many servers a pool needs awake (DESIGN.md, the power
 * part; the seed paper is ../shared/papers/power-multi-threshold.txt). A
 * policy is pure: decide(state, metrics, now_us) -> target, every input in
 * the arguments, no clock, no I/O, no threads (libdm_power, checked by
 * tests/purity.cmake as libdm_balancers is). The power manager (a later
 * increment) feeds it, picks which servers to wake or sleep, drains them and
 * runs the actuators; it never asks a policy its name.
 *
 * The seed's method: each server's estimated power is summed and divided by
 * a threshold in watts per server; the load trend is the change of the TCP
 * connection count over the trend interval (dTCP), classified against the
 * live capacity TCPmax x nLive (Table 3):
 *
 *   dTCP >  alpha x TCPmax x nLive            rapid growth   T1 - 2 step
 *   dTCP >  beta  x TCPmax x nLive            growth         T1 - step
 *   dTCP >= -beta' x TCPmax x nLive           steady         T1
 *   dTCP >= -alpha' x TCPmax x nLive          decline        T1 + step
 *   otherwise                                 rapid decline  T1 + 2 step
 *
 * with step 5 W (T1-10 ... T1+10). multi uses the fixed "normal" weights;
 * flexible takes (alpha, beta, -beta', -alpha') from the tier of the average
 * estimated power per active server (Table 5: <= 57 W 0.15, 0.10, -0.01,
 * -0.015; 58-66 W 0.075, 0.05, -0.05, -0.075; >= 67 W 0.015, 0.01, -0.10,
 * -0.15). Rapid growth and rapid decline are acted on at once, the others at
 * the next control period (target.immediate).
 *
 * boot-aware (ours, power/boot_aware.c has the whole rule): load in
 * servers' worth of work (power above idle, or connections over tcp_max),
 * not watts; it keeps the load's slope over one boot delay (plus a margin)
 * and room for the largest step a boot delay has brought (remembered with a
 * half-life), scales up at once on any class, and down only once the lower
 * need has held for delay_off, to the most servers it called for meanwhile
 * (per-server delay-off timers, as AutoScale's), and not within a boot
 * delay of a wake.
 */
#ifndef DM_POWER_POLICY_H
#define DM_POWER_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dm_power_class {
    DM_PC_RAPID_GROWTH = 0,
    DM_PC_GROWTH,
    DM_PC_STEADY,
    DM_PC_DECLINE,
    DM_PC_RAPID_DECLINE,
    DM_PC_CLASSES,
};

const char *dm_power_class_name(enum dm_power_class c); /* "rapid-growth", ... */

/* The four weights of one tier: alpha > beta > 0 > -beta' > -alpha'. */
struct dm_power_weights {
    double alpha, beta;         /* growth side */
    double neg_beta, neg_alpha; /* decline side, negative */
};

/* Every number a policy uses; dm_power_params_default() gives the seed's. */
struct dm_power_params {
    double t1_w;                      /* the single threshold, W per server (default 60) */
    double step_w;                    /* between the multi thresholds (default 5) */
    double tcp_max;                   /* connections per server at full power (default 200) */
    double full_w;                    /* a server's power at full use (default 70) */
    double idle_w;                    /* a live server's power at no load (default 40) */
    struct dm_power_weights normal;   /* multi's weights (Table 5's middle row) */
    struct dm_power_weights tiers[3]; /* flexible: many, normal, little spare capacity */
    double tier_low_w;   /* average W per server at or below: many spare (default 57.5) */
    double tier_high_w;  /* at or above: little spare (default 66.5) */
    unsigned min_active; /* never fewer awake (default 1) */
    /* boot-aware */
    uint64_t boot_us;      /* boot delay (default 7 s) */
    uint64_t delay_off_us; /* a lower need must last this long (default 30 s) */
    double margin;         /* extra share of the slope's need (default 0.25) */
    uint64_t history_us;   /* half-life of the largest rise and load it remembers (1 h) */
};

void dm_power_params_default(struct dm_power_params *p);

/* What the manager measured, for one pool, at now_us. */
struct dm_power_metrics {
    unsigned n_total;   /* servers in the pool not held (awake or not, failed too) */
    unsigned n_live;    /* active: taking requests */
    unsigned n_booting; /* woken, not active yet (counted as coming) */
    double total_w;     /* estimated power of the live servers, summed */
    double tcp;         /* the load's connection count (see issue: bound clients) */
    double d_tcp;       /* its change over the last trend interval */
    double trend_s;     /* that interval, seconds (> 0) */
};

struct dm_power_target {
    unsigned servers; /* how many should be live or booting */
    bool immediate;   /* act now, not at the next period */
    enum dm_power_class cls;
    double threshold_w;        /* the threshold used (0 when none) */
    struct dm_power_weights w; /* the weights used to classify */
    double need_w;             /* the power the count was computed from */
};

/* A policy: a const table; state is the policy's own, state_size bytes. */
struct dm_power_ops {
    const char *name;
    size_t state_size;
    void (*init)(void *state, const struct dm_power_params *p);
    void (*decide)(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
                   uint64_t now_us, struct dm_power_target *out);
};

extern const struct dm_power_ops dm_power_always_on, dm_power_single, dm_power_dual, dm_power_multi,
    dm_power_flexible, dm_power_boot_aware;

/* Every policy, NULL-terminated, and the one named name (NULL: none). */
extern const struct dm_power_ops *const dm_power_registry[];
const struct dm_power_ops *dm_power_find(const char *name);

/* Building blocks, exposed for tests and for the manager's log. */
enum dm_power_class dm_power_classify(const struct dm_power_weights *w, double tcp_max,
                                      unsigned n_live, double d_tcp);
const struct dm_power_weights *dm_power_tier(const struct dm_power_params *p, double avg_w);
/*
 * ceil(need_w / threshold_w), at least min_active, at most n_total; 0 when
 * min_active is 0 and the load has no connection and is not growing (idle
 * servers' power alone needs none: scale to zero).
 */
unsigned dm_power_servers_for(const struct dm_power_params *p, const struct dm_power_metrics *m,
                              double need_w, double threshold_w);

#endif
