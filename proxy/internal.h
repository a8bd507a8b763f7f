/*
 * Shared definitions of the proxy's data path (proxy/ only). One worker is
 * one thread with one libuv loop; every struct here except struct dm_runtime
 * belongs to exactly one worker and is touched only by its thread.
 *
 * A client connection (struct dm_client) reads requests into a refcounted
 * buffer (struct dm_buf); a request (struct dm_req) exists only while one is
 * being served, so an idle keep-alive connection holds no buffer and no
 * request. A request is forwarded over a server connection (struct
 * dm_upstream) taken from the worker's keep-alive pool or newly connected.
 * Bodies are forwarded as slices of the read buffers, which stay referenced
 * until their write completes: no copy, and reading stops while the other
 * side's write queue is above DM_WRITE_HIGH (back-pressure).
 */
#ifndef DM_PROXY_INTERNAL_H
#define DM_PROXY_INTERNAL_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "balancers/balancer.h"
#include "balancers/rng.h"
#include "conf/conf.h"
#include "parsers/http.h"

#define DM_WRITE_HIGH (256 * 1024) /* stop reading the other side above this */
#define DM_BUF_MIN    (32 * 1024)
#define DM_ERRBUF     512
#define DM_SMALL_CAP  4096 /* pooled size class for heads and error pages */
#define DM_CORK_MAX   4    /* writes a server connection holds until the flush */

/* ---- buffers ---- */

struct dm_buf {
    struct dm_buf *next; /* free list */
    uint32_t refs;
    uint32_t cap;
    uint32_t off; /* parsed up to here */
    uint32_t len; /* filled up to here */
    char data[];
};

/* ---- the runtime: one config generation, shared by all workers ---- */

struct dm_upstream;

struct dm_rpool {
    const struct dm_conf_pool *cf;
    struct dm_servers *sv;
    struct dm_balancer *bal;
    /* Idle keep-alive server connections: idle[worker * sv->n + server]. */
    struct dm_upstream **idle;
    bool age;     /* the policy keeps per-connection state (AGE): track work, learn */
    bool hashing; /* the policy reads dm_pick.key */
};

struct dm_runtime {
    atomic_uint refs;
    struct dm_conf *conf;
    struct dm_rpool *pools;
    size_t npools;
    unsigned nworkers;
    uint64_t generation;
    uint32_t buf_cap;
    uint32_t tried_bytes;       /* bitmap bytes for the largest pool */
    struct dm_catalog *catalog; /* borrowed: the process's object catalog */
};

/* Builds the runtime of conf (taken) for nworkers; NULL with *err on failure. */
struct dm_catalog;
struct dm_runtime *dm_runtime_create(struct dm_conf *conf, unsigned nworkers,
                                     const struct dm_runtime *previous, struct dm_catalog *catalog,
                                     const char **err);
void dm_runtime_ref(struct dm_runtime *rt);
void dm_runtime_unref(struct dm_runtime *rt);

/* The runtime new connections use; swapped by a reload. */
struct dm_runtime *dm_runtime_current(void);    /* returns a new reference */
void dm_runtime_publish(struct dm_runtime *rt); /* takes a reference of its own */

/* ---- workers ---- */

struct dm_client;

/* A request on the worker's free list: its size class, then the memory. */
struct dm_req_free {
    struct dm_req_free *next;
    size_t size;
};

/*
 * Kinds of timeout; each has its own list per worker, in deadline order.
 * DM_T_NONE is 0 so that a zeroed node is on no list. A client connection is
 * on at most one of the first three; a request with a timeouts.request bound
 * is on the last one besides.
 */
enum dm_tkind {
    DM_T_NONE = 0,
    DM_T_HEADER,    /* timeouts.client_header: the whole head, from its first byte or accept */
    DM_T_KEEPALIVE, /* timeouts.client_keepalive */
    DM_T_BODY,      /* timeouts.client_body: one window of the request body's minimum rate */
    DM_T_REQUEST,   /* timeouts.request: a request's whole exchange (a node in struct dm_req) */
    DM_T_KINDS,
};

/* A node of a timeout list, embedded in what it times. */
struct dm_tnode {
    struct dm_tnode *prev, *next;
    uint64_t deadline_ms; /* loop time at which it fires */
    uint8_t kind;         /* enum dm_tkind: the list it is on, DM_T_NONE for none */
};

struct dm_tq {
    struct dm_tnode *head, *tail;
};

struct dm_worker {
    unsigned id;
    uv_loop_t loop;
    uv_thread_t thread;
    uv_async_t wake;
    uv_check_t flush; /* flushes the access log once per loop iteration */
    uv_timer_t stop_timer;
    uv_timer_t drain_timer;
    uv_timer_t tick;             /* expires client timeouts */
    struct dm_tq tq[DM_T_KINDS]; /* timeout lists, by enum dm_tkind */
    struct dm_client *aging;     /* clients with policy state, for on_tick */
    struct dm_upstream *corked;  /* server connections with writes to flush */
    unsigned ticks;
    uv_tcp_t *listeners;
    size_t nlisteners;
    struct dm_runtime *rt; /* the runtime this worker last saw */
    struct dm_rng rng;
    struct dm_buf *free_bufs; /* read buffers (rt->buf_cap) */
    unsigned nfree_bufs;
    struct dm_buf *free_small; /* DM_SMALL_CAP buffers */
    unsigned nfree_small;
    struct dm_req_free *free_reqs; /* requests, for reuse (proxy/conn.c) */
    unsigned nfree_reqs;
    struct dm_client *clients; /* every open client connection */
    size_t nclients;
    size_t busy;      /* requests in progress */
    size_t busy_peak; /* most requests at once since the last trim */
    uint64_t idle_since_ms;
    bool stopping;
    bool warned_full; /* max_conns warning logged */
    int log_fd;
    char *log_buf;
    size_t log_len;
    int json_log;
    time_t log_time; /* second that log_time_text shows */
    char log_time_text[32];
    /* Listener sockets are opened by the control thread and handed over. */
    int *listen_fds;
};

struct dm_buf *dm_buf_get(struct dm_worker *w, uint32_t cap);
void dm_buf_unref(struct dm_worker *w, struct dm_buf *b);

/*
 * Writes bufs to s, holding a reference to each of hold[] until the bytes are
 * written. done(arg) is called once the write completes (from the write
 * callback, or never when everything went out at once: then 1 is returned).
 * Returns 1 (all written now), 0 (queued; done() will follow) or <0.
 */
typedef void (*dm_write_cb)(void *arg, int status);
int dm_stream_write(struct dm_worker *w, uv_stream_t *s, uv_buf_t *bufs, unsigned nbufs,
                    struct dm_buf **hold, unsigned nhold, dm_write_cb done, void *arg);

/* Appends one access-log line (without newline) for the worker to flush. */
void dm_worker_log_access(struct dm_worker *w, const char *line, size_t len);

/* ---- client side (proxy/client.c) ---- */

void dm_client_accept(struct dm_worker *w, uv_stream_t *listener);
/* Graceful stop: close idle connections, close the others after their response. */
void dm_clients_drain(struct dm_worker *w);
void dm_clients_close_all(struct dm_worker *w);
/* Handles every client timeout that is due (called by the worker's tick). */
void dm_clients_expire(struct dm_worker *w);
/* Lets the policies age the state of every client that has some. */
void dm_clients_age(struct dm_worker *w);

/* ---- server side (proxy/upstream.c) ---- */

struct dm_req;

/*
 * Gives req a server connection to server index `server` of pool `p`: an idle
 * one from the worker's pool, or a new connection. ready(req, up, status) is
 * called once: status 0 (connected, usable), or <0 (connect failed or timed out).
 */
typedef void (*dm_upstream_ready_cb)(struct dm_req *req, struct dm_upstream *up, int status);
void dm_upstream_take(struct dm_worker *w, struct dm_runtime *rt, size_t pool, int server,
                      struct dm_req *req, dm_upstream_ready_cb ready);

/* Returns a connection whose response completed to the idle pool, or closes it. */
void dm_upstream_release(struct dm_upstream *up, bool reusable);
void dm_upstream_close(struct dm_upstream *up);
/* Closes every idle connection of rt held by worker w. */
void dm_upstream_close_idle(struct dm_worker *w, struct dm_runtime *rt);
/* Sends what the server connections corked this loop iteration (check phase). */
void dm_upstreams_flush(struct dm_worker *w);

/* ---- admin (proxy/admin.c) ---- */

struct dm_admin;
/*
 * Starts the admin listener on addr (port 0: a free port) and logs the address
 * it is bound to, which bound receives. NULL with *err (-errno or a libuv code).
 */
struct dm_admin *dm_admin_start(uv_loop_t *loop, const struct dm_conf_addr *addr,
                                struct sockaddr_storage *bound, int *err);
void dm_admin_stop(struct dm_admin *a);
/* The catalog whose counters GET /stats shows (borrowed, outlives the admin). */
void dm_admin_set_catalog(struct dm_catalog *c);

#endif
