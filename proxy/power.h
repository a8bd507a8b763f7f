/*
 * The power manager, on the control thread's loop: it keeps only as many
 * servers of each power-managed pool awake as the pool's policy says
 * (power/policy.h), and moves each server through
 *
 *   active -> draining -> sleeping -> booting -> active
 *
 * draining: no new request (the workers' power command, proxy/worker.h);
 * sleeps once its requests and bound client connections are gone, or after
 * power.drain_timeout. sleeping: its sleep actuator ran; not health checked.
 * booting: its wake actuator ran; active once its health check passes (or,
 * without one, after power.boot_time), with a slow-start ramp; failed when
 * that takes longer than power.boot_timeout, and another is woken instead.
 * maint: held out of service by the operator. Only active servers take
 * requests.
 *
 * Metrics: the agents' signed UDP reports (power/report.h) on the metrics
 * listener, each checked and, when dropped, counted by reason; and the
 * proxy's own counters (bound client connections and requests in flight),
 * which give the TCP count of the seed's rules and, for a server whose
 * agent is silent, its power estimate. GET /power shows all of it, with the
 * source of each figure and the last decisions.
 */
#ifndef DM_PROXY_POWER_H
#define DM_PROXY_POWER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "proxy/sbuf.h"

struct dm_host;
struct dm_hosts;
struct dm_runtime;
struct dm_worker;
struct dm_powermgr;

/*
 * Starts the manager for rt (a reference of its own), commanding the workers
 * ws (n of them). When rt->conf has a metrics address, binds it and writes
 * the bound address to metrics_bound. Returns NULL with *err (a libuv or
 * negative errno code) on failure. A config without any power-managed pool
 * and without metrics gets a manager that does nothing but answer /power.
 */
struct dm_powermgr *dm_power_start(uv_loop_t *loop, struct dm_runtime *rt, struct dm_worker *ws,
                                   unsigned n, struct sockaddr_storage *metrics_bound, int *err);

/*
 * A new runtime after a reload: pools and numbers change, every server's
 * state, energy and agent history stay (servers are matched by host). A
 * server no longer power-managed is marked awake.
 */
void dm_power_reload(struct dm_powermgr *pm, struct dm_runtime *rt);

/* Appends what the manager knows of each of its servers to *s, for the
 * process that replaces this one (proxy/inherit.h). 0 or -1. */
int dm_power_state_words(const struct dm_powermgr *pm, char **s);

/* The metrics socket's descriptor (for the process that replaces this one), or -1. */
int dm_power_metrics_fd(const struct dm_powermgr *pm);

/* Something happened that the manager should look at now (a held request). */
void dm_power_kick(struct dm_powermgr *pm);

/* Closes everything; a wake or sleep under way is left to finish (bounded by
 * its command_timeout), its handles not holding the loop until
 * dm_power_wait_orphans. */
void dm_power_stop(struct dm_powermgr *pm);

/* The actions dm_power_stop left to finish hold the loop from now: its last
 * run ends once they have (after the workers drained). */
void dm_power_wait_orphans(void);

/* GET /power as JSON, appended to b. */
void dm_power_json(struct dm_powermgr *pm, struct dm_sbuf *b);

/* The agent report counters for /stats: "reports":{...}, appended to b. */
void dm_power_stats_json(struct dm_powermgr *pm, struct dm_sbuf *b);
/* The manager's part of GET /metrics (proxy/metrics.h); pm NULL: the report counters at 0. */
void dm_power_metrics_text(struct dm_powermgr *pm, struct dm_sbuf *b);

/* Whether h is a server of a power-managed pool. */
bool dm_power_manages(const struct dm_powermgr *pm, const struct dm_host *h);

/*
 * An operator's action on a managed host: "wake", "sleep", "maint", "drain"
 * (as maint: awake, out of service), "ready" (back to the manager). Returns
 * an HTTP status (200, or 409 with why in msg) and sets *epoch to the
 * workers' command epoch to wait for (0: none).
 */
int dm_power_admin(struct dm_powermgr *pm, struct dm_host *h, const char *action, uint64_t *epoch,
                   char *msg, size_t msglen);

/*
 * Pins pool `pool` to `servers` awake (the policy is not asked), or unpins
 * it with servers < 0. 200, or 404 for no such power-managed pool.
 */
int dm_power_pin(struct dm_powermgr *pm, const char *pool, long servers, char *msg, size_t msglen);

/*
 * Runs policy `policy` (a name of the registry) in pool `pool` in place of
 * the config's, from a fresh state, until it is called again with "" (or
 * the config's name): the config's then. The choice outlasts reloads. 200,
 * 400 for no such policy (msg lists them), 404 for no such pool.
 */
int dm_power_choose(struct dm_powermgr *pm, const char *pool, const char *policy, char *msg,
                    size_t msglen);

#endif
