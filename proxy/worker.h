/*
 * Worker threads: each runs one libuv loop with its own SO_REUSEPORT listener
 * on every configured address, its own buffers and its own keep-alive pools.
 * The control thread starts them, tells them about a new runtime (reload),
 * sends them commands about a host (close idle connections, power state) and
 * asks them to drain and stop (SIGTERM).
 */
#ifndef DM_PROXY_WORKER_H
#define DM_PROXY_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

struct dm_host;
struct dm_worker;
struct dm_runtime;

/*
 * Opens a listening socket on addr with SO_REUSEPORT set before bind, so every
 * worker can have its own. When bound is not NULL, it receives the address
 * the socket is bound to (with port 0 in addr: the port the kernel picked).
 * Returns the fd or -errno.
 */
int dm_listen_socket(const struct sockaddr *addr, int backlog, struct sockaddr_storage *bound);

/*
 * -EADDRINUSE when another socket listens on addr already (a port of 0: never),
 * else 0: SO_REUSEPORT would share the port with another process silently,
 * so each address is probed once before its first socket is bound.
 */
int dm_listen_probe(const struct sockaddr *addr);

/* Enough bytes for any text of dm_addr_text(), "[v6%scope]:port" included. */
#define DM_ADDR_TEXT 96

/*
 * Writes sa as "127.0.0.1:8080" or "[::1]:8080" into buf (len bytes, at least
 * DM_ADDR_TEXT) and returns buf; "?" for an address of another family.
 */
const char *dm_addr_text(const struct sockaddr *sa, char *buf, size_t len);

/*
 * Creates and starts n workers serving rt (each takes its own reference).
 * access_log_fd: -1 for none; log_format: enum dm_accesslog_format. Worker 0 binds
 * every listen address of rt->conf first, and the others bind the port it
 * got, so a listener on port 0 is one port shared by all workers. bound
 * (rt->conf->nlisteners entries) receives the address each listener is
 * bound to. Returns NULL with *err (a libuv or errno code) on failure, with
 * nothing left running and nothing left allocated; an address that cannot be
 * listened on is logged.
 */
struct dm_worker *dm_workers_start(unsigned n, struct dm_runtime *rt, int access_log_fd,
                                   int log_format, struct sockaddr_storage *bound, int *err);

/*
 * Every listening socket of the n workers (for the process that replaces
 * this one, proxy/inherit.h): up to max of them, each with its listener's
 * index in lis[]. Returns how many; dm_workers_sockets() says how many there
 * are. Control thread, and never once the workers stop (their sockets close).
 */
size_t dm_workers_listen_fds(const struct dm_worker *ws, unsigned n, int *fds, size_t *lis,
                             size_t max);
size_t dm_workers_sockets(const struct dm_worker *ws, unsigned n);

/* Asks every worker to pick up the runtime now published (after a reload). */
void dm_workers_reload(struct dm_worker *w, unsigned n);

/*
 * Tells every worker that a batch pass of a session placer decided
 * sessions (proxy/session.h): each asks again about its waiting ones.
 * Control thread.
 */
void dm_workers_sessions_decided(struct dm_worker *w, unsigned n);

/*
 * A place under a server's max_conns freed: every worker with requests
 * queued for one tries them again (dm_clients_queue_retry). Any worker thread.
 */
void dm_workers_queue_kick(void);
/* The same for w alone, from w's own thread (a request it just queued). */
void dm_workers_queue_kick_self(struct dm_worker *w);

/* The limits' counters summed over the workers (GET /stats and /metrics). */
struct dm_limits_counts {
    uint64_t accept_pauses;  /* times a worker at limits.max_conns stopped accepting */
    uint64_t paused_workers; /* those paused now */
    uint64_t per_client;     /* connections closed at once by limits.max_conns_per_client */
    uint64_t rate;           /* requests answered 429 by limits.rate */
    uint64_t open_files;     /* the open-file limit (RLIMIT_NOFILE) the workers run under */
    uint64_t sockets;        /* client and server connections open now, every worker */
    uint64_t socket_cap;     /* descriptors the open-file limit leaves them */
    uint64_t clients;        /* client connections among sockets: accepting pauses once
                              * sockets + clients (a server connection each) reach socket_cap */
};
/*
 * Fits the workers to the open-file limit, once they and every listener and
 * log are open: the limit goes up to what limits.max_conns asks, two
 * descriptors a connection (as HAProxy raises its own; the hard limit too
 * when allowed, else the soft one up to the hard one). The data path then
 * accepts a client only while its sockets, and one more for each client
 * (the server connection it may open), stay below the limit less a reserve
 * and what the control thread may hold at once (control: its health
 * checks, power actions, admin connections): past it every worker
 * stops accepting, as at limits.max_conns, and the connections wait in the
 * listen queue. Past the limit accept() would fail, and libuv would close
 * them unanswered. Warns when max_conns asks for more than that allows.
 */
void dm_workers_fit_open_files(unsigned nworkers, unsigned max_conns, uint64_t control);
/* What the control thread may hold at once, as a reload changes it (the
 * servers it checks, the power-managed ones); warns when it is more than
 * half of what the limit leaves. */
void dm_workers_control_fds(uint64_t n);
/* The same warning, at a reload that changes limits.max_conns. */
void dm_workers_check_open_files(unsigned nworkers, unsigned max_conns);
/* A data-path socket opened (1) or closed (-1): client or server connection. */
void dm_sockets_add(int64_t n, bool client);

void dm_workers_limits(const struct dm_worker *ws, unsigned n, struct dm_limits_counts *out);

/* Worker i's heartbeat: its ticks so far (one each DM_TICK_MS while its loop runs). */
uint64_t dm_worker_beats(const struct dm_worker *ws, unsigned i);

/*
 * Commands to every worker about a host, from the control thread (the only
 * one that may send them). Each returns its epoch, a number that grows with
 * every command. A worker acknowledges an epoch once it has carried out every
 * command up to it, in its loop, and once the connections they closed are
 * gone (closed, and out of their host's connections count);
 * dm_workers_acked() counts the workers that have acknowledged an epoch.
 *
 * dm_workers_close_idle: every worker closes its idle keep-alive connections
 * to h (in every pool naming it). Connections in use are left alone.
 *
 * dm_workers_set_power: h's power state becomes `power` (enum dm_power_state;
 * power_since_us is now_us when it changes). Any state but DM_POWER_AWAKE
 * makes h unusable: once every worker has acknowledged the epoch, no worker
 * starts a request on h (no pick, no affinity, no retry chooses it), the idle
 * connections to h are closed, and a connection to h whose request completes
 * is closed rather than kept. Requests already on h finish; h is drained when
 * its inflight and connections counts are zero (balancers/hosts.h).
 * DM_POWER_AWAKE makes h usable again.
 */
uint64_t dm_workers_close_idle(struct dm_worker *ws, unsigned n, struct dm_host *h);
uint64_t dm_workers_set_power(struct dm_worker *ws, unsigned n, struct dm_host *h, int power,
                              uint64_t now_us);
unsigned dm_workers_acked(const struct dm_worker *ws, unsigned n, uint64_t epoch);

/*
 * An async handle of the control loop that every worker sends after each
 * acknowledgement (NULL: none), so the control thread learns of them without
 * polling. Set before dm_workers_start(); it must stay open until
 * dm_workers_stop() has returned.
 */
void dm_workers_set_notify(uv_async_t *a);

/*
 * Asks every worker to stop accepting and finish in-flight requests within
 * shutdown_ms, then joins them and frees them.
 */
void dm_workers_stop(struct dm_worker *w, unsigned n, uint64_t shutdown_ms);

#endif
