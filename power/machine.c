/*
 * The servers' power state machine (power/machine.h): pure, no clock, no I/O.
 */
#include "power/machine.h"

const char *
dm_pm_state_name(enum dm_pm_state s)
{
    static const char *const names[DM_PM_STATES] = { "active",  "draining", "sleeping",
                                                     "booting", "failed",   "maint" };
    return (unsigned)s < DM_PM_STATES ? names[s] : "?";
}

/* The time from then to now; 0 when then is later (a time an action stamped
 * after the caller read its clock: elapsed, it would wrap to centuries). */
static uint64_t
since(uint64_t now_us, uint64_t then_us)
{
    return now_us > then_us ? now_us - then_us : 0;
}

enum dm_pm_event
dm_pm_progress(const struct dm_pm_rules *r, const struct dm_pm_server *s,
               const struct dm_pm_observed *o, uint64_t now_us)
{
    uint64_t in_state = since(now_us, s->since_us);
    if (s->state == DM_PM_DRAINING) {
        /* Only once every worker has stopped starting requests on it do its
         * counts mean that nothing more will come. */
        if (o->acked && o->inflight == 0 && o->bound == 0) {
            return DM_PM_DRAINED;
        }
        return in_state >= r->drain_timeout_us ? DM_PM_DRAIN_TIMEOUT : DM_PM_NOTHING;
    }
    if (s->state == DM_PM_BOOTING) {
        /* Its wake has not run yet (it waits for the sleep command, or for
         * action_interval), or runs still: a machine that answers its health
         * check now is the one going to sleep, and its boot delay has not
         * begun (the manager starts it when the wake runs). */
        if (s->busy) {
            return DM_PM_NOTHING;
        }
        bool up = r->health_checked ? o->healthy : in_state >= r->boot_us;
        if (up) {
            return DM_PM_UP;
        }
        return in_state >= r->boot_timeout_us ? DM_PM_BOOT_TIMEOUT : DM_PM_NOTHING;
    }
    if (s->state == DM_PM_FAILED && !s->busy && r->health_checked && o->healthy) {
        return DM_PM_UP; /* it booted after its boot_timeout, or came back by itself */
    }
    return DM_PM_NOTHING;
}

enum dm_pm_state
dm_pm_event_state(enum dm_pm_event e)
{
    switch (e) {
    case DM_PM_DRAINED:
    case DM_PM_DRAIN_TIMEOUT:
        return DM_PM_SLEEPING;
    case DM_PM_UP:
        return DM_PM_ACTIVE;
    case DM_PM_BOOT_TIMEOUT:
        return DM_PM_FAILED;
    default:
        return DM_PM_STATES;
    }
}

void
dm_pm_count(const struct dm_pm_server *s, size_t n, unsigned *active, unsigned *booting,
            unsigned *draining)
{
    *active = *booting = *draining = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].held) {
            continue;
        }
        *active += s[i].state == DM_PM_ACTIVE && !s[i].down;
        *booting += s[i].state == DM_PM_BOOTING;
        *draining += s[i].state == DM_PM_DRAINING;
    }
}

/* Whether s's actuator may run now: action_interval since its last run. */
static bool
action_due(const struct dm_pm_rules *r, const struct dm_pm_server *s, uint64_t now_us)
{
    return s->last_action_us == 0 || since(now_us, s->last_action_us) >= r->action_interval_us;
}

/* Whether s may be acted on now: not held, no actuator running or waiting, action_interval. */
static bool
may_act(const struct dm_pm_rules *r, const struct dm_pm_server *s, uint64_t now_us)
{
    return !s->held && !s->busy && action_due(r, s, now_us);
}

static bool
may_change(const struct dm_pm_rules *r, const struct dm_pm_server *s, uint64_t now_us)
{
    return may_act(r, s, now_us) &&
           (s->last_change_us == 0 || since(now_us, s->last_change_us) >= r->min_change_us);
}

/* The order in which servers are woken: sleeping, unseen active ones, failed ones to try again
 * (lower first); -1: not one to wake. */
static int
wake_rank(const struct dm_pm_rules *r, const struct dm_pm_server *s, uint64_t now_us)
{
    if (s->state == DM_PM_SLEEPING) {
        return 0;
    }
    if (s->state == DM_PM_ACTIVE && s->unseen) {
        return 1;
    }
    return dm_pm_retry_due(r, s, now_us) ? 2 : -1;
}

bool
dm_pm_retry_due(const struct dm_pm_rules *r, const struct dm_pm_server *s, uint64_t now_us)
{
    return s->state == DM_PM_FAILED && s->can_wake && !s->held &&
           since(now_us, s->last_change_us) >= r->boot_timeout_us;
}

/* Whether moves[0..k) already names server i. */
static bool
moved(const struct dm_pm_move *m, size_t k, size_t i)
{
    for (size_t j = 0; j < k; j++) {
        if (m[j].index == i) {
            return true;
        }
    }
    return false;
}

size_t
dm_pm_plan(const struct dm_pm_rules *r, const struct dm_pm_server *s, size_t n, unsigned want,
           uint64_t now_us, bool urgent, struct dm_pm_move *out, size_t cap, unsigned *short_by)
{
    unsigned active, booting, draining;
    dm_pm_count(s, n, &active, &booting, &draining);
    unsigned have = active + booting;
    size_t k = 0;
    *short_by = 0;
    while (have < want && k < cap) {
        size_t best = n;
        for (size_t i = 0; i < n && best == n; i++) {
            if (s[i].state == DM_PM_DRAINING && !s[i].held && !moved(out, k, i)) {
                best = i;
            }
        }
        if (best < n) {
            out[k++] = (struct dm_pm_move){ best, DM_PM_ACTIVE };
            have++;
            continue;
        }
        int best_rank = 0;
        for (size_t i = 0; i < n; i++) {
            const struct dm_pm_server *c = &s[i];
            int rank = wake_rank(r, c, now_us);
            /* An unseen one never changed: only action_interval holds it back. */
            bool may = rank == 1 ? may_act(r, c, now_us) : may_change(r, c, now_us);
            if (rank < 0 || c->held || !c->can_wake || moved(out, k, i) || (!urgent && !may) ||
                (urgent && c->busy)) {
                continue;
            }
            /* A sleeping one before an unseen one, before one that failed;
             * urgent, one whose wake can run now (action_interval since its
             * last action) before one whose wake would wait for it. */
            bool due = action_due(r, c, now_us);
            bool best_due = best < n && action_due(r, &s[best], now_us);
            if (best == n || rank < best_rank ||
                (rank == best_rank &&
                 ((due && !best_due) || (due == best_due && r->wake_rule == DM_PM_WAKE_EFFICIENT &&
                                         c->cost < s[best].cost)))) {
                best = i;
                best_rank = rank;
            }
        }
        if (best == n) {
            *short_by = want - have;
            break;
        }
        out[k++] = (struct dm_pm_move){ best, DM_PM_BOOTING };
        have++;
    }
    while (have > want && active > r->min_active && k < cap) {
        size_t best = n;
        for (size_t i = 0; i < n; i++) {
            const struct dm_pm_server *c = &s[i];
            /* One that could not be woken again is never slept. */
            if (c->state != DM_PM_ACTIVE || c->down || !c->can_wake || c->keep_on ||
                !may_change(r, c, now_us) || moved(out, k, i)) {
                continue;
            }
            if (best == n || r->sleep_rule == DM_PM_SLEEP_LAST || c->load < s[best].load) {
                best = i;
            }
        }
        if (best == n) {
            break;
        }
        out[k++] = (struct dm_pm_move){ best, DM_PM_DRAINING };
        have--;
        active--;
    }
    return k;
}
