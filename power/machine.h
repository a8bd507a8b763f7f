/*
 * The servers' power state machine, pure (part of dm_power): what a server
 * in each state becomes given what the manager observed, and which servers
 * to wake or drain to bring a pool to a policy's target. The manager
 * (proxy/power.c) observes, calls these, and carries out what they return
 * (the workers' power commands, the actuators); it keeps no rule of its own.
 *
 *   active --drain--> draining --drained or drain_timeout--> sleeping
 *   sleeping --wake--> booting --healthy--> active
 *   booting --boot_timeout--> failed          (another is woken instead)
 *   failed --healthy--> active                (it came up late)
 *
 * An active server that is down (its health check fails) is not counted
 * among those serving: another is woken in its place. One that has been
 * down since the manager took it (unseen: never seen up since a restart or
 * the reload that made it power-managed) may well be asleep: it is woken
 * as a sleeping one would be, after every sleeping one.
 *
 * A booting server whose wake waits or runs (busy) stays booting: neither
 * up nor timed out until its wake has run.
 *   any --operator--> maint (held), and back
 *
 * A server can be slept only if it can be woken again (it has a wake
 * actuator) and is not one that must stay on; a server changed less than min_change ago, or whose
 * last action was less than action_interval ago, or whose actuator still runs or waits to run, or
 * that the operator holds, is left alone. A draining server is the first to take back when more are
 * wanted: it is still up.
 */
#ifndef DM_POWER_MACHINE_H
#define DM_POWER_MACHINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dm_pm_state {
    DM_PM_ACTIVE = 0,
    DM_PM_DRAINING,
    DM_PM_SLEEPING,
    DM_PM_BOOTING,
    DM_PM_FAILED,
    DM_PM_MAINT,
    DM_PM_STATES,
};

const char *dm_pm_state_name(enum dm_pm_state s); /* "active", "draining", ... */

enum dm_pm_wake_rule { DM_PM_WAKE_EFFICIENT = 0, DM_PM_WAKE_FIRST };
enum dm_pm_sleep_rule { DM_PM_SLEEP_LEAST_LOADED = 0, DM_PM_SLEEP_LAST };

/* A pool's rules and times (microseconds). */
struct dm_pm_rules {
    uint64_t drain_timeout_us;
    uint64_t boot_us;         /* without a health check: booting this long is up */
    uint64_t boot_timeout_us; /* booting longer, not healthy: failed */
    uint64_t min_change_us;
    uint64_t action_interval_us;
    unsigned min_active;
    bool health_checked;
    enum dm_pm_wake_rule wake_rule;
    enum dm_pm_sleep_rule sleep_rule;
};

/* One server as the machine sees it. */
struct dm_pm_server {
    enum dm_pm_state state;
    uint64_t since_us;       /* when it entered state */
    uint64_t last_change_us; /* its last change of state (0: never) */
    uint64_t last_action_us; /* its last actuator run (0: never) */
    bool held;               /* the operator's */
    bool down;               /* active, but its health check fails (or a passive down period) */
    bool unseen;             /* active and down by its health check, never seen up since the
                              * manager took it: maybe asleep */
    bool busy;               /* an actuator of it runs, or one waits to run */
    bool can_wake;           /* it has a wake actuator */
    bool keep_on;            /* it must stay on: never drained by a plan */
    double cost;             /* W at full use per unit of capacity: lower wakes first */
    double load;             /* its load now (connections and requests): lower sleeps first */
};

/* What the manager observed of a server this tick. */
struct dm_pm_observed {
    bool acked;        /* every worker carried out its last power command */
    uint64_t inflight; /* requests on it */
    uint64_t bound;    /* client connections bound to it */
    bool healthy;      /* its health check passes (when the pool has one) */
};

enum dm_pm_event {
    DM_PM_NOTHING = 0,
    DM_PM_DRAINED,       /* draining -> sleeping: nothing left on it */
    DM_PM_DRAIN_TIMEOUT, /* draining -> sleeping: drain_timeout, with work left */
    DM_PM_UP,            /* booting -> active */
    DM_PM_BOOT_TIMEOUT,  /* booting -> failed */
};

/*
 * The event the observation brings to s at now_us (the caller moves s to
 * the state dm_pm_event_state() names and runs what goes with it).
 */
enum dm_pm_event dm_pm_progress(const struct dm_pm_rules *r, const struct dm_pm_server *s,
                                const struct dm_pm_observed *o, uint64_t now_us);
enum dm_pm_state dm_pm_event_state(enum dm_pm_event e);

/* A move of the plan: server `index` goes to `to` (active, draining or booting). */
struct dm_pm_move {
    size_t index;
    enum dm_pm_state to;
};

/*
 * Whether s failed its boot (or its wake) boot_timeout ago or more, can be
 * woken and is not held: a wake may be tried again (a lost Wake-on-LAN
 * packet, a command that failed once), after every sleeping server.
 */
bool dm_pm_retry_due(const struct dm_pm_rules *r, const struct dm_pm_server *s, uint64_t now_us);

/*
 * The moves that bring the n servers (the pool's, held ones included, which
 * are never moved or counted) towards `want` active or booting: take back
 * draining ones, then wake sleeping ones by the wake rule, then unseen
 * active ones (which min_change does not hold back: they never changed), then
 * failed ones whose retry is due (dm_pm_retry_due); or drain active
 * ones by the sleep rule, never leaving fewer than min_active active.
 * urgent (a request is held with none awake): waking ignores min_change and
 * action_interval, and wakes first a server whose action_interval has passed
 * (the manager runs a wake only action_interval after the server's last
 * action, so another one's would wait). Writes at most cap moves to out and returns how many;
 * *short_by is how many more were wanted and could not be woken now.
 */
size_t dm_pm_plan(const struct dm_pm_rules *r, const struct dm_pm_server *s, size_t n,
                  unsigned want, uint64_t now_us, bool urgent, struct dm_pm_move *out, size_t cap,
                  unsigned *short_by);

/* Servers of the n that are active, booting, draining (held ones not counted). */
void dm_pm_count(const struct dm_pm_server *s, size_t n, unsigned *active, unsigned *booting,
                 unsigned *draining);

#endif
