/*
 * Active health checks. Runs on the control thread's loop: for every server of
 * every pool whose config has a health_check block, an HTTP/1.1 GET of the
 * check path every interval; a 2xx or 3xx answer within the timeout is a
 * success. `fall` consecutive failures mark the server's host down (struct
 * dm_host.down = true), `rise` consecutive successes mark it up again; each
 * change is logged. A host is checked once however many pools name it (by
 * the first pool, in config order, with a health_check block). A new host
 * starts up; a host that checks had marked down stays down when the checks
 * restart (a reload) until `rise` successes, and a host no check looks at is
 * marked up. A reload's checker goes on with each host where the last one
 * was: its pace, and its run of successes or failures.
 */
#ifndef DM_PROXY_HEALTH_H
#define DM_PROXY_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

struct dm_conf;
struct dm_servers;
struct dm_health;

/*
 * Starts checks on loop for conf's pools; servers[i] is the live table of
 * conf->pools[i] (same order as conf->pools[i].servers). Both are borrowed and
 * must outlive the checker. Returns NULL when out of memory or when a timer
 * cannot be made; then nothing runs (handles already made close and free
 * what is left from the loop).
 */
struct dm_health *dm_health_start(uv_loop_t *loop, const struct dm_conf *conf,
                                  struct dm_servers *const *servers);

/*
 * Stops every check, closes its handles and frees the checker; done(arg) is
 * called from the loop once everything is closed. NULL h calls nothing.
 */
void dm_health_stop(struct dm_health *h, void (*done)(void *arg), void *arg);

/*
 * As dm_health_stop, for a reload: no check begins any more, but the checks
 * in flight go on to their verdict or their timeout, and the checker that
 * replaces this one waits for them (each host's run of successes and
 * failures is the host's, struct dm_host_check). The configuration and the
 * servers must live until done(arg) is called.
 */
void dm_health_retire(struct dm_health *h, void (*done)(void *arg), void *arg);

/* Ends a retired checker's checks in flight now, without their verdict (dimmer
 * stops); its done(arg) follows from the loop. Nothing for any other h. */
void dm_health_cancel(struct dm_health *h);

/*
 * Whether a libuv error is this process's own (descriptors, memory or local
 * ports ran out), not the server's doing: neither a health check nor a
 * request counts it against the server.
 */
bool dm_local_error(int uv_err);

#endif
