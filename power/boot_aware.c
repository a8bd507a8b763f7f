/*
 * boot-aware (power/policy.h): keeps awake what the load will need by the
 * time a server woken now is up.
 *
 * Load is counted in servers' worth of work, not in watts: the power above
 * idle over the span from idle to full, (total_w - n_live x idle_w) /
 * (full_w - idle_w), or the connections over tcp_max, whichever is more (a
 * saturated server's power stops rising while its connections still
 * count). The seed's total_w / T1 counts every awake server's idle power as
 * load, so it lets go of idle servers one step at a time; this rule asks at
 * once for load / u1 servers, u1 = (T1 - idle_w) / (full_w - idle_w) being
 * the share of a server the seed's threshold T1 keeps busy.
 *
 * Up: the load now as its connections count it, or the least load read
 * over the last boot delay, whichever is more (power that reads full for a
 * few seconds, a step's sessions all asking for their first page at once,
 * is a burst over before a server woken for it is up, and would move a
 * mean; full power that lasts a boot delay raises the least), plus
 * the spare its slope uses up within a boot delay (and a margin), the slope
 * fitted over the last boot delay's readings (at least four) so that one
 * burst is not a trend, and counted only while the last readings still
 * rise; and room for a step no slope foresees: the largest rise of the
 * demand (connections) within a boot delay, up to the largest demand seen,
 * both remembered with a half-life of history_us. While the demand is
 * within the margin of the largest seen before the last boot delay (a known
 * level), the slope's spare stops at the largest load remembered, so a step
 * back to a known level wakes what that level needed, not what its slope
 * would carry on to. It scales up at once, whatever the class.
 *
 * Down only to the most servers that the need over the last delay_off (mean
 * load, slope and room) called for during that delay_off (each surplus
 * server's own delay-off timer has run out, as AutoScale's), and not while
 * a server was added within the last boot delay (the seed's rules sleep a
 * server on a dip and wake it again a few seconds later, paying the boot
 * delay in lost quality of service).
 */
#include "power/policy.h"

#include <math.h>

#define SAMPLES 32

struct state {
    uint64_t below_since_us; /* the need has been below the current count since; 0: not */
    unsigned most_below;     /* the most servers needed since then */
    uint64_t last_up_us;     /* the last time the count went up */
    unsigned last;           /* the last target */
    bool have_last;
    /* The last SAMPLES trend readings: time, the connection count summed
     * from the changes (its level does not matter, only its slope), power. */
    uint64_t t_us[SAMPLES];
    float tcp[SAMPLES], load[SAMPLES], demand[SAMPLES]; /* floats: the state fits 1 KiB */
    unsigned n, head;
    double level; /* the summed count */
    /* The largest rise of the load within a boot delay, and the largest
     * load, both remembered with a half-life of history_us. */
    double burst, peak;
    double peak_old; /* the largest demand before the last boot delay */
    uint64_t memo_us;
};

static void
init(void *state, const struct dm_power_params *p)
{
    (void)p;
    *(struct state *)state = (struct state){ 0 };
}

/*
 * The slope (connections a second, least squares) and the mean load of the
 * readings within the last window_us. One reading's change is mostly noise
 * (a page's objects come in a burst); a boot delay's worth of them is the
 * trend a boot has to keep up with.
 */
static void
trend(const struct state *s, uint64_t now_us, uint64_t window_us, double *slope, double *load)
{
    double n = 0, st = 0, sy = 0, stt = 0, sty = 0, sw = 0;
    for (unsigned i = 0; i < s->n; i++) {
        unsigned k = (s->head + SAMPLES - 1 - i) % SAMPLES;
        if (i > 0 && now_us - s->t_us[k] > window_us) {
            break;
        }
        double t = (double)(now_us - s->t_us[k]) / -1e6; /* seconds, <= 0 */
        n++;
        st += t;
        sy += s->tcp[k];
        stt += t * t;
        sty += t * s->tcp[k];
        sw += s->load[k];
    }
    double d = n * stt - st * st;
    *slope = n >= 2 && d > 0 ? (n * sty - st * sy) / d : 0;
    *load = n > 0 ? sw / n : 0;
}

/* The load now in servers' worth of work (the top of this file). */
static double
load_of(const struct dm_power_params *p, const struct dm_power_metrics *m)
{
    double span = p->full_w - p->idle_w;
    double by_power = span > 0 ? (m->total_w - (double)m->n_live * p->idle_w) / span
                               : (p->full_w > 0 ? m->total_w / p->full_w : 0);
    double by_tcp = p->tcp_max > 0 ? m->tcp / p->tcp_max : 0;
    double load = by_power > by_tcp ? by_power : by_tcp;
    return load > 0 ? load : 0;
}

/* Servers for a load (in servers' worth), as a policy target through the threshold. */
static unsigned
servers_for(const struct dm_power_params *p, const struct dm_power_metrics *m, double load,
            double *need_w)
{
    double span = p->full_w - p->idle_w;
    double u1 = span > 0 ? (p->t1_w - p->idle_w) / span : p->t1_w / p->full_w;
    u1 = u1 > 0.05 ? u1 : 0.05;
    u1 = u1 < 1 ? u1 : 1;
    /* As watts at T1 a server, so that the count, the floor of min_active and
     * scale to zero come from the same rule as every policy's. */
    *need_w = load / u1 * p->t1_w;
    return dm_power_servers_for(p, m, *need_w, p->t1_w);
}

static void
decide(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
       uint64_t now_us, struct dm_power_target *out)
{
    struct state *s = state;
    double load_now = load_of(p, m);
    s->level += m->d_tcp;
    s->t_us[s->head] = now_us;
    s->tcp[s->head] = (float)s->level;
    s->load[s->head] = (float)load_now;
    /* The demand for the memory below: connections, which a burst of new
     * sessions raises by what will stay, not the power of servers that a
     * burst saturates for a few seconds (that would be remembered as a peak). */
    double demand_now = p->tcp_max > 0 && m->tcp > 0 ? m->tcp / p->tcp_max : load_now;
    s->demand[s->head] = (float)demand_now;
    s->head = (s->head + 1) % SAMPLES;
    s->n += s->n < SAMPLES;
    double trend_s = m->trend_s > 0 ? m->trend_s : 1;
    /* Up on a boot delay's readings (at least four), down on delay_off's
     * (at least as many): a lower need must hold over the longer window. */
    uint64_t four = 4 * (uint64_t)(trend_s * 1e6);
    uint64_t up_window = p->boot_us > four ? p->boot_us : four;
    uint64_t down_window = p->delay_off_us > up_window ? p->delay_off_us : up_window;
    double slope, mean_up, slope_down, mean_down;
    trend(s, now_us, up_window, &slope, &mean_up); /* the mean is not used: a burst moves it */
    trend(s, now_us, down_window, &slope_down, &mean_down);
    /* The slope in connections a second, turned into the servers' worth of
     * load it adds within a boot delay. */
    double boot_s = (double)p->boot_us / 1e6;
    double per_conn = p->tcp_max > 0 ? 1 / p->tcp_max : 0;
    /* The memory of steps: the largest rise of the demand within a boot
     * delay and the largest demand, each fading with a half-life of
     * history_us. */
    double low = demand_now, least_load = load_now;
    for (unsigned i = 0; i < s->n; i++) {
        unsigned k = (s->head + SAMPLES - 1 - i) % SAMPLES;
        if (now_us - s->t_us[k] > up_window) {
            break;
        }
        low = s->demand[k] < low ? s->demand[k] : low;
        least_load = s->load[k] < least_load ? s->load[k] : least_load;
    }
    double keep = p->history_us > 0 && s->memo_us != 0
                      ? exp2(-(double)(now_us - s->memo_us) / (double)p->history_us)
                      : 0;
    double peak_before = s->peak * keep;
    double peak_old = s->peak_old * keep;
    for (unsigned i = 0; i < s->n; i++) {
        unsigned k = (s->head + SAMPLES - 1 - i) % SAMPLES;
        if (now_us - s->t_us[k] > up_window && s->demand[k] > peak_old) {
            peak_old = s->demand[k];
        }
    }
    s->peak_old = peak_old;
    s->memo_us = now_us;
    s->burst = s->burst * keep > demand_now - low ? s->burst * keep : demand_now - low;
    s->peak = peak_before > demand_now ? peak_before : demand_now;
    /* The slope's spare, only while the load still rises (once the last
     * readings are flat, the window's slope is a step that is over), and no
     * more than the largest rise a boot delay has brought, once one has. */
    double recent, unused;
    trend(s, now_us, 2 * (uint64_t)(trend_s * 1e6), &recent, &unused);
    double rising = recent < slope ? recent : slope;
    double spare = rising > 0 ? rising * per_conn * boot_s * (1 + p->margin) : 0;
    spare = s->burst > 0 && spare > s->burst ? s->burst : spare;
    double spare_down = slope_down > 0 ? slope_down * per_conn * boot_s * (1 + p->margin) : 0;
    /* Up on what is there now or lately, whichever is more, plus the spare;
     * while the demand is within a peak remembered from before this boot
     * delay (and its margin, as the memory fades), not past the peak (a step
     * back to a known level needs what that level needed), nor past what is
     * there now. */
    double by_tcp_now = p->tcp_max > 0 ? m->tcp / p->tcp_max : 0;
    double base = by_tcp_now > least_load ? by_tcp_now : least_load; /* not a burst's power */
    double up_load = base + spare;
    double cap = base > peak_before ? base : peak_before;
    if (demand_now <= peak_old * (1 + p->margin) && up_load > cap) {
        up_load = cap;
    }
    enum dm_power_class cls = dm_power_classify(&p->normal, p->tcp_max, m->n_live, m->d_tcp);
    double need, need_down, room_w;
    unsigned want = servers_for(p, m, up_load, &need);
    /* Down on the longer window's mean, and never below what the load's
     * slope over it would need again within a boot delay. */
    unsigned want_down = servers_for(p, m, mean_down + spare_down, &need_down);
    /* A step no slope foresees: room for the largest rise a boot delay has
     * brought, up to the largest load seen, kept at the same share of each
     * server as the load itself (a step's new sessions all ask for their
     * first page at once). */
    double room_now = load_now + s->burst < s->peak ? load_now + s->burst : s->peak;
    double room_down = mean_down + s->burst < s->peak ? mean_down + s->burst : s->peak;
    unsigned want_room = servers_for(p, m, room_now, &room_w);
    want = want_room > want ? want_room : want;
    want_room = servers_for(p, m, room_down, &room_w);
    want_down = want_room > want_down ? want_room : want_down;
    unsigned now = m->n_live + m->n_booting;
    if (!s->have_last) {
        s->last = now;
        s->have_last = true;
    }
    unsigned cur = s->last > now ? s->last : now;
    unsigned target = cur;
    if (want > cur) {
        target = want;
        s->below_since_us = 0;
        s->last_up_us = now_us;
    } else if (want_down >= cur) {
        s->below_since_us = 0;
    } else {
        if (s->below_since_us == 0 || want_down > s->most_below) {
            s->most_below = want_down;
        }
        if (s->below_since_us == 0) {
            s->below_since_us = now_us;
        }
        bool long_enough = now_us - s->below_since_us >= p->delay_off_us;
        bool recently_up = s->last_up_us != 0 && now_us - s->last_up_us < p->boot_us;
        if (long_enough && !recently_up) {
            /* Every server that no reading of the last delay_off needed:
             * each one's own delay-off timer has run out. */
            target = s->most_below;
            s->below_since_us = now_us;
            s->most_below = want_down;
        }
    }
    s->last = target;
    *out = (struct dm_power_target){
        .servers = target,
        /* Its own delays are its hysteresis: what it decides is done now,
         * not at the next period (which would lose a step down it counted). */
        .immediate = target != now,
        .cls = cls,
        .threshold_w = p->t1_w,
        .w = p->normal,
        .need_w = target < cur ? need_down : need,
    };
}

const struct dm_power_ops dm_power_boot_aware = {
    .name = "boot-aware",
    .state_size = sizeof(struct state),
    .init = init,
    .decide = decide,
};
