/*
 * The power manager's arithmetic, pure (part of dm_power), shared by the
 * proxy's manager (proxy/power.c) and the simulator (bench/sim/exp_power.c)
 * so that both run the same control loop: the proxy's power estimate of a
 * server without a fresh agent report, a pool's metrics for the policy from
 * its servers' readings, and when a policy's target is acted on.
 */
#ifndef DM_POWER_CONTROL_H
#define DM_POWER_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "power/machine.h"
#include "power/policy.h"

/*
 * idle + (full - idle) x u, with u = max(inflight / capacity, tcp / tcp_max)
 * clamped to [0, 1]: the proxy's own estimate from its counters (a capacity
 * of 0 is taken as 1; a tcp_max of 0 ignores tcp).
 */
double dm_pm_estimate_w(double idle_w, double full_w, double inflight, double capacity, double tcp,
                        double tcp_max);

/* One server of a pool as the manager measured it this tick. */
struct dm_pm_reading {
    enum dm_pm_state state;
    bool held; /* the operator's: not counted */
    bool down; /* active, but its health check fails or it is in a passive down period: not live */
    double w;  /* its estimated power */
    double tcp;
    /* For learning tcp_max: w came from the server's own agent (not the
     * proxy's estimate, which is made from tcp_max), and its power model. */
    bool reported;
    double idle_w, full_w;
};

/* A pool's memory between trend readings. All zero: nothing read yet. */
struct dm_pm_trend {
    double last_tcp;
    bool have_tcp;
    uint64_t last_period_us;
};

/*
 * The metrics of a pool of n servers for the policy, read every trend_s
 * seconds: servers not failed, live (active), booting, the power of the live
 * ones, the TCP count of the active and draining ones (a draining server's
 * clients are still the load), and dTCP since the last reading (0 at the
 * first), which tr remembers.
 */
void dm_pm_metrics(struct dm_pm_trend *tr, const struct dm_pm_reading *r, size_t n, double trend_s,
                   struct dm_power_metrics *m);

/*
 * tcp_max learned (power.tcp_max: auto): connections per server at full
 * power, as the pool's connections over the servers' worth of work its
 * agents report, (w - idle_w) / (full_w - idle_w), both summed over the
 * active servers with a fresh report and over time, the past fading with a
 * half-life (only while readings come in: a quiet night does not forget).
 * A reading under 10 % of the span is left out (at low load the power is
 * mostly the error of the idle figure, which would drag the value down),
 * and so is one at 90 % or more: a saturated server's power says only that
 * it is full (a burst of new sessions fills it with few connections, a
 * backlog with many), not how many connections fill it. All zero: nothing
 * learned yet.
 */
struct dm_pm_tcpmax {
    double tcp, work; /* the faded sums: connections and servers' worth of work */
    uint64_t last_us;
    bool learned; /* work has reached DM_PM_TCPMAX_EVIDENCE with connections seen */
};

#define DM_PM_TCPMAX_HALF_LIFE_S 600  /* the past's weight halves every 10 minutes of readings */
#define DM_PM_TCPMAX_EVIDENCE    5    /* readings' worth of one full server before it counts */
#define DM_PM_TCPMAX_MOVE        0.10 /* the value in use follows moves of more than this share */

/*
 * Adds the readings of one trend tick at now_us. *tcp_max is the value in
 * use (the configured one to start with): it becomes the learned value once
 * there is enough evidence and whenever that moves by more than
 * DM_PM_TCPMAX_MOVE of it. Returns whether *tcp_max changed: a policy's
 * memory of connections counted against the old value is then stale.
 */
bool dm_pm_tcpmax_learn(struct dm_pm_tcpmax *l, const struct dm_pm_reading *r, size_t n,
                        uint64_t now_us, double *tcp_max);

/*
 * Whether the manager acts on the policy's target t now: at once when the
 * policy says so, else at a control period boundary (every period_us, which
 * tr keeps), and only when t differs from the servers live or booting.
 */
bool dm_pm_should_act(struct dm_pm_trend *tr, const struct dm_power_target *t,
                      const struct dm_power_metrics *m, uint64_t period_us, uint64_t now_us);

#endif
