/*
 * Client connections of one worker: accept, reading request heads and
 * checking them, forwarding request bodies and trailers to the server,
 * the client timeouts (per-worker lists in deadline order, no timer per
 * connection), error answers and close. A request goes through the states of
 * enum dm_client_state:
 *   IDLE -> HEAD (bytes of a request head arrive)
 *        -> CONNECT (head checked, a server picked, its connection coming)
 *        -> BODY (head written to the server, body bytes forwarded as they come)
 *        -> WAIT (request complete, response under way)
 *        -> IDLE again when the response is complete, or TUNNEL after a 101.
 * Pipelined requests wait in the read buffer until the response before them
 * is complete, so responses go out in order. Everything here runs on the
 * worker's thread.
 */
#ifndef DM_PROXY_CLIENT_H
#define DM_PROXY_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct dm_buf;
struct dm_client;
struct dm_placer;
struct dm_tnode;
struct dm_worker;

/*
 * Accepts one connection from listener and starts reading it, under the
 * worker's current runtime (a reference of its own). A failed accept drops
 * the connection. Returns 0 once the connection is off the listener, or
 * -ENOMEM when nothing could be allocated: it then stays pending in libuv,
 * which stops polling the listener until the next call.
 */
int dm_client_accept(struct dm_worker *w, uv_stream_t *listener);

/*
 * Graceful stop: every connection is closed after its response; one waiting
 * for a request (idle keep-alive, or just accepted) gets a second at most
 * for it.
 */
void dm_clients_drain(struct dm_worker *w);

/* Closes every client connection of w, abandoning their requests. */
void dm_clients_close_all(struct dm_worker *w);

/* Answers 503 (Retry-After) every request no server took yet: queued, held
 * for a wake, waiting for a session pass. Returns how many. */
size_t dm_clients_refuse_waiting(struct dm_worker *w);

/*
 * Holds c's request, which found no server awake, when its pool is power
 * managed with a hold queue (scale to zero): it waits, in state CONNECT,
 * until a command of the control thread makes a server usable
 * (dm_clients_hold_retry) or power.hold_timeout from its first hold has
 * passed (503 with Retry-After). False when it cannot be held (no hold, the
 * queue is full): the caller answers it.
 */
bool dm_client_hold(struct dm_client *c);

/* Picks a server again for every held request of w (after a power command). */
void dm_clients_hold_retry(struct dm_worker *w);
/*
 * Puts c's request, which found every usable server of its pool at its
 * max_conns, in the pool's queue, in state CONNECT, until a place frees
 * (dm_clients_queue_retry) or timeouts.queue from its first wait has passed
 * (503); answers it 503 at once when that time has passed or the queue is
 * full (max_queue). Queued already: it keeps its turn.
 */
void dm_client_queue(struct dm_client *c);
/* Takes c's request out of the queue, if it is queued (it found a place, or gets an answer). */
void dm_client_unqueue(struct dm_client *c);
/* A second over: logs how many clients' 4xx lines the error log left out in it. */
void dm_clients_err_roll(struct dm_worker *w);

/* The queued requests of w try for a place, in turn (a place freed). */
void dm_clients_queue_retry(struct dm_worker *w);
/*
 * Keeps c's request, a session waiting for its pool's batch pass, in state
 * CONNECT until dm_clients_session_retry() finds it placed, or until
 * session.window + timeouts.connect from its first wait have passed (503).
 * False when that time has passed already: the caller answers it.
 */
bool dm_client_session_wait(struct dm_client *c);
/*
 * A session request whose placer (one per pool name for the process) has
 * answered with a server of a configuration newer than c's: c moves to its
 * worker's runtime, the request to the pool there with the same placer.
 * Returns that pool's index, or -1 when there is none (or c is on the
 * worker's runtime already, or out of memory).
 */
int dm_client_session_rebase(struct dm_client *c, const struct dm_placer *placer);
/* Asks the placer again about every waiting session of w (after a batch pass). */
void dm_clients_session_retry(struct dm_worker *w);

/* Handles every client timeout of w that is due (the worker's tick). */
void dm_clients_expire(struct dm_worker *w);

/*
 * Closes the client and abandons its request (and that request's server
 * connection); c is freed by the close callback. A second call does nothing.
 */
void dm_client_close(struct dm_client *c);

/*
 * Binds the client to server `server` of pool `pool` of its runtime
 * (connection affinity), counted in that server's host's `bound` until the
 * client closes or is bound again; server -1 unbinds. Its worker's thread.
 */
void dm_client_bind(struct dm_client *c, size_t pool, int server);

/* Closes the client now if no write is in flight, else after the last one. */
void dm_client_close_when_written(struct dm_client *c);

/*
 * Writes n buffers to the client, holding hold[] (nhold references, taken
 * here) until written. A failed write closes the client once nothing else is
 * in flight.
 */
void dm_client_write(struct dm_client *c, uv_buf_t *bufs, unsigned n, struct dm_buf **hold,
                     unsigned nhold);

/*
 * Answers the current request with status and closes the connection once it
 * is written; closes at once when part of a response went out already. Logs
 * the reason, and the request when there is one. Closes the request's server
 * connection.
 */
void dm_client_respond_error(struct dm_client *c, unsigned status, const char *reason);

/* Starts reading, unless the client is closing or sent FIN. */
void dm_client_read_start(struct dm_client *c);

/* Stops reading (back-pressure, an error answer, the end of a request). */
void dm_client_read_stop(struct dm_client *c);

/* Takes the client off its header, keep-alive or body timeout list. */
void dm_client_timer_stop(struct dm_client *c);

/* A new window of the request body's minimum rate starts now (timeouts.client_body). */
void dm_client_body_window(struct dm_client *c);

/*
 * Goes on with what the read buffer holds in the current state: parses heads,
 * forwards body bytes, or waits. May close c.
 */
void dm_client_process(struct dm_client *c);

/*
 * Sends bytes [from, to) of the client's read buffer to the request's server
 * connection, after the request head when it is still pending; nothing
 * without a server connection.
 */
void dm_client_forward_slice(struct dm_client *c, uint32_t from, uint32_t to);

/* Takes n off the worker's timeout list it is on (none: nothing). */
void dm_tq_remove(struct dm_worker *w, struct dm_tnode *n);

#endif
