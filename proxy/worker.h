/*
 * Worker threads: each runs one libuv loop with its own SO_REUSEPORT listener
 * on every configured address, its own buffers and its own keep-alive pools.
 * The control thread starts them, tells them about a new runtime (reload) and
 * asks them to drain and stop (SIGTERM).
 */
#ifndef DM_PROXY_WORKER_H
#define DM_PROXY_WORKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct dm_worker;
struct dm_runtime;

/*
 * Opens a listening socket on addr with SO_REUSEPORT set before bind, so every
 * worker can have its own. Returns the fd or -errno.
 */
int dm_listen_socket(const struct sockaddr *addr, int backlog);

/*
 * Creates and starts n workers serving rt (each takes its own reference).
 * access_log_fd: -1 for none; json selects the JSON format. Returns NULL
 * with *err (a libuv or errno code) on failure, with nothing left running.
 */
struct dm_worker *dm_workers_start(unsigned n, struct dm_runtime *rt, int access_log_fd, int json,
                                   int *err);

/* Asks every worker to pick up the runtime now published (after a reload). */
void dm_workers_reload(struct dm_worker *w, unsigned n);

/*
 * Asks every worker to stop accepting and finish in-flight requests within
 * shutdown_ms, then joins them and frees them.
 */
void dm_workers_stop(struct dm_worker *w, unsigned n, uint64_t shutdown_ms);

#endif
