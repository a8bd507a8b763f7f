#include "power/control.h"

#include <math.h>

double
dm_pm_estimate_w(double idle_w, double full_w, double inflight, double capacity, double tcp,
                 double tcp_max)
{
    double cap = capacity > 0 ? capacity : 1;
    double u = inflight / cap;
    double ut = tcp_max > 0 ? tcp / tcp_max : 0;
    u = u > ut ? u : ut;
    u = u < 0 ? 0 : u > 1 ? 1 : u;
    return idle_w + (full_w - idle_w) * u;
}

void
dm_pm_metrics(struct dm_pm_trend *tr, const struct dm_pm_reading *r, size_t n, double trend_s,
              struct dm_power_metrics *m)
{
    *m = (struct dm_power_metrics){ .trend_s = trend_s };
    for (size_t i = 0; i < n; i++) {
        if (r[i].held) {
            continue;
        }
        bool live = r[i].state == DM_PM_ACTIVE && !r[i].down;
        m->n_total++; /* a failed one too: it is woken again (dm_pm_retry_due) */
        m->n_live += live;
        m->n_booting += r[i].state == DM_PM_BOOTING;
        if (live) {
            m->total_w += r[i].w;
        }
        if (r[i].state == DM_PM_ACTIVE || r[i].state == DM_PM_DRAINING) {
            m->tcp += r[i].tcp;
        }
    }
    m->d_tcp = tr->have_tcp ? m->tcp - tr->last_tcp : 0;
    tr->last_tcp = m->tcp;
    tr->have_tcp = true;
}

bool
dm_pm_should_act(struct dm_pm_trend *tr, const struct dm_power_target *t,
                 const struct dm_power_metrics *m, uint64_t period_us, uint64_t now_us)
{
    bool period = now_us - tr->last_period_us >= period_us;
    if (period) {
        tr->last_period_us = now_us;
    }
    return (t->immediate || period) && t->servers != m->n_live + m->n_booting;
}

bool
dm_pm_tcpmax_learn(struct dm_pm_tcpmax *l, const struct dm_pm_reading *r, size_t n, uint64_t now_us,
                   double *tcp_max)
{
    double tcp = 0, work = 0;
    for (size_t i = 0; i < n; i++) {
        double span = r[i].full_w - r[i].idle_w;
        if (r[i].held || r[i].state != DM_PM_ACTIVE || !r[i].reported || !(span > 0)) {
            continue;
        }
        double u = (r[i].w - r[i].idle_w) / span;
        if (!(u >= 0.1 && u < 0.9)) {
            continue;
        }
        work += u;
        tcp += r[i].tcp > 0 ? r[i].tcp : 0;
    }
    if (work > 0) {
        if (l->last_us != 0 && now_us > l->last_us) {
            double keep = exp2(-(double)(now_us - l->last_us) / (DM_PM_TCPMAX_HALF_LIFE_S * 1e6));
            l->tcp *= keep;
            l->work *= keep;
        }
        l->tcp += tcp;
        l->work += work;
    }
    /* Ticks without a reading are skipped, not faded over. */
    l->last_us = now_us;
    l->learned = l->learned || (l->work >= DM_PM_TCPMAX_EVIDENCE && l->tcp > 0);
    if (!l->learned) {
        return false;
    }
    double v = l->tcp / l->work;
    v = v < 1 ? 1 : v > 1e6 ? 1e6 : v;
    if (fabs(v - *tcp_max) <= DM_PM_TCPMAX_MOVE * *tcp_max) {
        return false;
    }
    *tcp_max = v;
    return true;
}
