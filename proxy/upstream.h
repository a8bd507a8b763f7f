/*
 * Server connections of one worker: connecting, the idle keep-alive pool
 * (per worker and server, in the runtime), writes corked until the end of the
 * loop iteration, lazy deadlines, reading responses and forwarding them to the
 * client (a 101 turns the pair into a tunnel). Everything here runs on the
 * worker's thread; the server table's counters are relaxed atomics.
 */
#ifndef DM_PROXY_UPSTREAM_H
#define DM_PROXY_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proxy/conn.h" /* dm_upstream_ready_cb */

struct dm_buf;
struct dm_req;
struct dm_runtime;
struct dm_worker;

/* dm_upstream_take() handed out an idle connection: usable now, no callback. */
#define DM_UPSTREAM_NOW 1

/*
 * Gives req a server connection to server index `server` of pool `pool`, and
 * returns how:
 *   DM_UPSTREAM_NOW  an idle connection of the worker's pool, in req->up and
 *                    usable at once; ready is not called, so a request to a
 *                    kept-alive server goes on without a loop iteration;
 *   0                a new connection is under way: ready(req, up, status) is
 *                    called exactly once, later, with status 0 (connected,
 *                    usable) or <0 and up NULL (connect failed or timed out),
 *                    unless req gives the connection up first (up->req = NULL,
 *                    then dm_upstream_close());
 *   <0               failed (out of memory, or the connect could not start):
 *                    ready is not called and req->up stays NULL.
 */
int dm_upstream_take(struct dm_worker *w, struct dm_runtime *rt, size_t pool, int server,
                     struct dm_req *req, dm_upstream_ready_cb ready);

/* Returns a connection whose response completed to the idle pool, or closes it. */
void dm_upstream_release(struct dm_upstream *up, bool reusable);

/* Closes up (taken off the idle pool, corked writes dropped); freed once closed. */
void dm_upstream_close(struct dm_upstream *up);

/* Closes every idle connection of rt held by worker w. */
void dm_upstream_close_idle(struct dm_worker *w, struct dm_runtime *rt);

/*
 * Closes worker w's idle connections to server `server` of pool `pool` of rt
 * for a command of the control thread, and returns how many: each is counted
 * in w->commanded_closing until its close callback has run (the socket is
 * closed and its host's connections count is down), which is what the
 * worker's acknowledgement of the command waits for.
 */
unsigned dm_upstream_close_idle_server(struct dm_worker *w, struct dm_runtime *rt, size_t pool,
                                       size_t server);

/* Sends what the server connections corked this loop iteration (check phase). */
void dm_upstreams_flush(struct dm_worker *w);

/*
 * Queues n buffers for the server, each holding one reference of hold[] (taken
 * here) until written; they go out at the end of the loop iteration, or at
 * once when the cork is full.
 */
void dm_upstream_write(struct dm_upstream *up, uv_buf_t *bufs, unsigned n, struct dm_buf **hold,
                       unsigned nhold);

/*
 * Times the connection out ms from now (connect, response, idle); 0 clears
 * the deadline. Lazy: activity only moves the deadline, the timer catches up.
 */
void dm_upstream_deadline(struct dm_upstream *up, uint64_t ms);
/* Bytes went through up's tunnel (either way): timeouts.tunnel starts again. */
void dm_upstream_tunnel_active(struct dm_upstream *up);

/* Starts reading responses (or, when idle, noticing the server close). */
void dm_upstream_read_start(struct dm_upstream *up);
/* After a pause for back-pressure: reads again, and server_response again if it was held. */
void dm_upstream_resume(struct dm_upstream *up);

/*
 * Counts a failure of server `server` of pool `pool` of rt and logs why;
 * passive: one towards passive.max_fails (after that many in a row the
 * server is down for fail_timeout), else the server answered.
 */
void dm_upstream_failed(struct dm_runtime *rt, size_t pool, int server, const char *why,
                        bool passive);

#endif
