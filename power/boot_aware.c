/*
 * boot-aware (power/policy.h): keeps awake what the load will need by the
 * time a server woken now is up. The need is the live servers' power plus
 * what the load's slope adds within one boot delay (and a margin), the slope
 * fitted over the last boot delay's readings (at least four) so that one
 * burst is not a trend; it scales up at once, whatever the class, on the
 * power now, and down only to the most servers that the need over the last
 * delay_off (mean power and slope) called for during that delay_off (each
 * surplus server's own delay-off timer has run out), and not while a server
 * was added within the last boot delay
 * (the seed's rules sleep a server on a dip and wake it again a few seconds
 * later, paying the boot delay in lost quality of service).
 */
#include "power/policy.h"

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
    double tcp[SAMPLES], watts[SAMPLES];
    unsigned n, head;
    double level; /* the summed count */
};

static void
init(void *state, const struct dm_power_params *p)
{
    (void)p;
    *(struct state *)state = (struct state){ 0 };
}

/*
 * The slope (connections a second, least squares) and the mean power of the
 * readings within the last window_us. One reading's change is mostly noise
 * (a page's objects come in a burst); a boot delay's worth of them is the
 * trend a boot has to keep up with.
 */
static void
trend(const struct state *s, uint64_t now_us, uint64_t window_us, double *slope, double *watts)
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
        sw += s->watts[k];
    }
    double d = n * stt - st * st;
    *slope = n >= 2 && d > 0 ? (n * sty - st * sy) / d : 0;
    *watts = n > 0 ? sw / n : 0;
}

static void
decide(void *state, const struct dm_power_params *p, const struct dm_power_metrics *m,
       uint64_t now_us, struct dm_power_target *out)
{
    struct state *s = state;
    s->level += m->d_tcp;
    s->t_us[s->head] = now_us;
    s->tcp[s->head] = s->level;
    s->watts[s->head] = m->total_w;
    s->head = (s->head + 1) % SAMPLES;
    s->n += s->n < SAMPLES;
    double trend_s = m->trend_s > 0 ? m->trend_s : 1;
    /* Up on a boot delay's readings (at least four), down on delay_off's
     * (at least as many): a lower need must hold over the longer window. */
    uint64_t four = 4 * (uint64_t)(trend_s * 1e6);
    uint64_t up_window = p->boot_us > four ? p->boot_us : four;
    uint64_t down_window = p->delay_off_us > up_window ? p->delay_off_us : up_window;
    double slope, mean_w, slope_down, mean_down_w;
    trend(s, now_us, up_window, &slope, &mean_w);
    trend(s, now_us, down_window, &slope_down, &mean_down_w);
    /* Watts per connection at full use: the slope in connections a second,
     * turned into the power it will add within a boot delay. */
    double w_per_conn = p->tcp_max > 0 ? p->full_w / p->tcp_max : 0;
    double boot_s = (double)p->boot_us / 1e6;
    double spare = slope > 0 ? slope * w_per_conn * boot_s * (1 + p->margin) : 0;
    double spare_down = slope_down > 0 ? slope_down * w_per_conn * boot_s * (1 + p->margin) : 0;
    /* Up on what is there now or lately, whichever is more. */
    double now_w = m->total_w > mean_w ? m->total_w : mean_w;
    double need = now_w + spare;
    enum dm_power_class cls = dm_power_classify(&p->normal, p->tcp_max, m->n_live, m->d_tcp);
    unsigned want = dm_power_servers_for(p, m, need, p->t1_w);
    /* Down on the longer window's mean, and never below what the load's
     * slope over it would need again within a boot delay. */
    double need_down = mean_down_w + spare_down;
    unsigned want_down = dm_power_servers_for(p, m, need_down, p->t1_w);
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
