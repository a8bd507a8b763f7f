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
 *
 * The files of proxy/ (a module's header has its name; this one declares
 * the runtime and the admin listener):
 *   main.c       main(): the control thread (config, signals, reload), with
 *                admin.c (the admin listener and its host commands) and
 *                health.c (health checks)
 *   worker.c     worker threads: loops, listeners, the timeout tick, reload
 *                and stop, and the control thread's commands about a host
 *                (close idle, power state) with their acknowledgements; it
 *                calls into the client side (accept, expire, drain) and the
 *                server side (close idle), and the data path never calls
 *                back into it
 *   client.c     client connections: accept, reading and checking request
 *                heads, forwarding request bodies and trailers, the client
 *                timeouts (the worker's lists), error answers, close, drain
 *   request.c    a request between the two sides: its memory, picking a
 *                server and connecting, sending the head, retry, accounting,
 *                and going on with the client once the response is complete
 *   upstream.c   server connections: connect, the idle keep-alive pool,
 *                corked writes, reading responses and forwarding them
 *   conn.h       the structs these three share (client, request, server
 *                connection); no conn.c: their functions are in the headers
 *                of the three
 *   learn.c      the AGE glue: a request's expected work on its server, the
 *                policy's per-connection state, what the catalog learns
 *   accesslog.c  access-log lines, buffered per worker, flushed once per
 *                loop iteration
 *   buf.c        refcounted buffers and the worker's free lists; writes that
 *                hold buffers until they complete
 *   runtime.c    a config generation made live (declared here): per pool a
 *                server table (the load table) and a balancer; the servers
 *                point to hosts (balancers/hosts.h) that live for the
 *                process, so health and power state survive a reload; route.c
 *                routing; log.c the error log; session.c the session
 *                placers of balance: session pools (shared by the workers,
 *                one lock each, taken only when a session starts or ends)
 * client.c, request.c and upstream.c serve one exchange between them and
 * call each other; below them, learn.c, accesslog.c and buf.c call none of
 * the three.
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

#define DM_VERSION          "0.1.0"
#define DM_WRITE_HIGH       (256 * 1024) /* stop reading the other side above this */
#define DM_BUF_MIN          (32 * 1024)
#define DM_CLIENT_ERR_LINES 20 /* error-log lines about clients' 4xx a second, per worker */

/* ---- the runtime: one config generation, shared by all workers ---- */

/*
 * The control loop's async handle a worker sends when it holds a request
 * (dm_rpool.held), so the power manager wakes a server without waiting for
 * its next tick; NULL: none. Set by the control thread before the workers
 * start, cleared after they stop.
 */
extern _Atomic(uv_async_t *) dm_hold_notify;

struct dm_upstream;

/*
 * GET /metrics counters of one server of a pool, kept by one worker: only
 * that worker writes them (a relaxed load and store, dm_stat_add: no locked
 * instruction on the request path), any thread reads them.
 */
#define DM_DUR_BUCKETS 12 /* request duration: 11 bounds (proxy/metrics.c) and +Inf */
struct dm_srv_stats {
    atomic_uint_fast64_t responses[6];        /* by status class 1xx..5xx; [5]: none (cut short) */
    atomic_uint_fast64_t bytes_in;            /* request bytes from the client, head and body */
    atomic_uint_fast64_t bytes_out;           /* response bytes to the client, head and body */
    atomic_uint_fast64_t retries;             /* attempts after the first */
    atomic_uint_fast64_t dur[DM_DUR_BUCKETS]; /* requests by duration, each bucket its own */
    atomic_uint_fast64_t dur_sum_us;
    atomic_uint_fast64_t idle;   /* keep-alive connections to it idle in the worker's pool now */
    atomic_uint_fast64_t tls[3]; /* TLS handshakes with it (a TLS pool): DM_TLS_FULL, ... */
};

/* The TLS handshake counters' slots: complete and full, complete and resumed, failed. */
enum { DM_TLS_FULL, DM_TLS_RESUMED, DM_TLS_FAILED };

/* Adds v to a counter that only the calling thread writes. */
static inline void
dm_stat_add(atomic_uint_fast64_t *c, uint64_t v)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

/* Per listener, kept by one worker as dm_srv_stats are. */
struct dm_lst_stats {
    atomic_uint_fast64_t accepted; /* client connections accepted */
    atomic_uint_fast64_t open;     /* open now (added and taken back by this worker) */
    atomic_uint_fast64_t requests; /* requests answered or cut short (dm_metrics_request_done) */
    atomic_uint_fast64_t local[6]; /* of which answered before routing (400, 408, 413, 431, 429) */
    atomic_uint_fast64_t tls[3];   /* TLS handshakes (a TLS listener): DM_TLS_FULL, ... */
};

struct dm_rpool {
    const struct dm_conf_pool *cf;
    struct dm_servers *sv;
    struct dm_balancer *bal;
    /* Idle keep-alive server connections: idle[worker * sv->n + server]. */
    struct dm_upstream **idle;
    /* Counters: stats[worker * (sv->n + 1) + server]; server sv->n: the
     * requests answered with no server. */
    struct dm_srv_stats *stats;
    /* Requests held by every worker because no server of the pool is awake
     * (scale to zero, power.hold_timeout); the power manager wakes one. */
    atomic_uint_fast64_t held;
    /* Set by the power manager while no server of the pool is worth
     * holding a request for (every one in maint, slept or drained by hand,
     * or down by its health check): a request is then answered 503 at once,
     * not held. Kept in the newest runtime only. */
    atomic_bool hold_off;
    /* Per-server max_conns (timeouts.queue, max_queue): requests waiting now
     * for a place (all workers), those answered 503 at the end of
     * timeouts.queue or over max_queue, and the most that waited at once. */
    atomic_uint_fast64_t queued;
    atomic_uint_fast64_t queue_timeouts;
    atomic_uint_fast64_t queue_full;
    atomic_uint_fast64_t queue_peak;
    bool limited; /* a server has max_conns */
    bool work;    /* the policy needs work or objects: track expected work, learn the catalog */
    bool keyed;   /* work, or queue_order: size: requests keyed, sizes learnt in the catalog */
    bool hashing; /* the policy reads dm_pick.key */
    /* The policy places sessions (DM_BAL_NEEDS_SESSIONS): the pool's placer,
     * which belongs to the process's placers (proxy/session.h); else NULL. */
    struct dm_placer *placer;
    /* TLS to the servers: the last session of each, per worker:
     * tls_sessions[worker * sv->n + server]; NULL for a plain pool. */
    struct ssl_session_st **tls_sessions;
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
    unsigned nlimited;          /* pools with a server that has max_conns */
    struct dm_catalog *catalog; /* borrowed: the process's object catalog */
    struct dm_routes *routes;   /* conf's routes indexed by host */
};

/*
 * Builds the runtime of conf (taken) for nworkers; NULL with *err on failure.
 * Each server's host is found or added in hosts (the process's table, which
 * must outlive the runtime): that is how a reload keeps health and power
 * state. hosts NULL: each server has a private host (tests). A pool whose
 * policy places sessions gets its placer from placers (made, or
 * reconfigured for a pool that keeps its name: how a reload keeps running
 * sessions; done last, once nothing else can fail); placers NULL: none, and
 * such a pool's Upgrades are picked as its other requests (tests). Control
 * thread.
 */
struct dm_catalog;
struct dm_hosts;
struct dm_placers;
struct dm_runtime *dm_runtime_create(struct dm_conf *conf, unsigned nworkers,
                                     struct dm_hosts *hosts, struct dm_catalog *catalog,
                                     struct dm_placers *placers, const char **err);
void dm_runtime_ref(struct dm_runtime *rt);
void dm_runtime_unref(struct dm_runtime *rt);

/* The runtime new connections use; swapped by a reload. */
struct dm_runtime *dm_runtime_current(void);    /* returns a new reference */
void dm_runtime_publish(struct dm_runtime *rt); /* takes a reference of its own */

/* Server `server` of pool `pool` of rt: its config, its live table entry, its host. */
static inline const struct dm_conf_server *
dm_runtime_server_conf(const struct dm_runtime *rt, size_t pool, int server)
{
    return &rt->conf->pools[pool].servers[server];
}

static inline struct dm_server *
dm_runtime_server(const struct dm_runtime *rt, size_t pool, int server)
{
    return &rt->pools[pool].sv->s[server];
}

static inline struct dm_host *
dm_runtime_host(const struct dm_runtime *rt, size_t pool, int server)
{
    return rt->pools[pool].sv->s[server].host;
}

/* The index of host h among pool `pool`'s servers in rt, or -1. */
static inline int
dm_runtime_find_host(const struct dm_runtime *rt, size_t pool, const struct dm_host *h)
{
    const struct dm_servers *sv = rt->pools[pool].sv;
    for (size_t i = 0; i < sv->n; i++) {
        if (sv->s[i].host == h) {
            return (int)i;
        }
    }
    return -1;
}

/* The monotonic clock in microseconds: the now_us the policies are given. */
static inline uint64_t
dm_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* ---- workers ---- */

struct dm_buf;
struct dm_client;

/* A request on the worker's free list: its size class, then the memory. */
struct dm_req_free {
    struct dm_req_free *next;
    size_t size;
};

/*
 * Kinds of timeout; each has its own list per worker, in deadline order.
 * DM_T_NONE is 0 so that a zeroed node is on no list. A client connection is
 * on at most one of the first six, and on DM_T_SEND besides while bytes are
 * queued for it; a request with a timeouts.request bound is on the last one
 * besides.
 */
enum dm_tkind {
    DM_T_NONE = 0,
    DM_T_HEADER,    /* timeouts.client_header: the whole head, from its first byte or accept */
    DM_T_KEEPALIVE, /* timeouts.client_keepalive */
    DM_T_BODY,      /* timeouts.client_body: one window of the request body's minimum rate */
    DM_T_HOLD,      /* power.hold_timeout: a request held while no server is awake */
    DM_T_SESSION,   /* session.window + timeouts.connect: a session waiting for a batch pass */
    DM_T_QUEUE,     /* timeouts.queue: a request waiting for a server under its max_conns */
    DM_T_SEND,    /* timeouts.client_send: a client taking nothing of what is queued (send_timer) */
    DM_T_REQUEST, /* timeouts.request: a request's whole exchange (a node in struct dm_req) */
    DM_T_KINDS,
};

/*
 * The worker's queue lists: DM_QUEUE_CLASSES by size class, then those of
 * queue_order: page, keyed by their page's start plus page_bound: pages
 * within their bound, and (keys DM_QUEUE_LATE_MS higher, so after every
 * other) those past it, moved there as their bound passes.
 */
#define DM_QUEUE_PAGE    DM_QUEUE_CLASSES
#define DM_QUEUE_LATE    (DM_QUEUE_CLASSES + 1)
#define DM_QUEUE_LISTS   (DM_QUEUE_CLASSES + 2)
#define DM_QUEUE_LATE_MS (1ull << 48)

/* A node of a timeout list, embedded in what it times. */
struct dm_tnode {
    struct dm_tnode *prev, *next;
    uint64_t deadline_ms; /* loop time at which it fires */
    uint8_t kind;         /* enum dm_tkind: the list it is on, DM_T_NONE for none */
    uint8_t cls;          /* DM_T_QUEUE: its class's list (dm_queue_class) */
};

struct dm_tq {
    struct dm_tnode *head, *tail;
};

struct dm_tls;

struct dm_worker {
    unsigned id;
    uv_loop_t loop;
    uv_thread_t thread;
    uv_async_t wake;
    uv_check_t flush; /* flushes the access log once per loop iteration */
    uv_timer_t stop_timer;
    uv_timer_t drain_timer;
    uv_timer_t tick;             /* expires client timeouts */
    uv_prepare_t ack;            /* acknowledges commands (worker.h), while one is pending */
    uint64_t cmd_seen;           /* the last command epoch carried out */
    unsigned commanded_closing;  /* connections a command closed, not yet freed */
    struct dm_tq tq[DM_T_KINDS]; /* timeout lists, by enum dm_tkind */
    /* The queue (DM_T_QUEUE, max_conns) in place of tq[DM_T_QUEUE]: one
     * list a size class (balancers/balancer.h), then queue_order: page's
     * two (DM_QUEUE_PAGE, DM_QUEUE_LATE), each in the order of its keys;
     * served smallest key first over their heads. */
    struct dm_tq queue[DM_QUEUE_LISTS];
    struct dm_client *aging;    /* clients with policy state, for on_tick */
    struct dm_upstream *corked; /* server connections with writes to flush */
    /* TLS (proxy/tls.h): the scratch buffer ciphertext is read into, and
     * the connections whose input waits for the next loop pass. */
    char *tls_scratch;
    struct dm_tls *tls_pumps, *tls_pumping;
    uv_idle_t tls_idle;
    bool tls_idle_ready;
    char up_why[200]; /* why a server connection failed, for the request's log line */
    unsigned ticks;
    /* The listening sockets: one per configured listener, or those handed
     * over by the process this one replaced (proxy/inherit.h), which may be
     * more or fewer; lof[] says which listener each belongs to. */
    uv_tcp_t *listeners;
    bool *held;  /* per socket: a connection left pending at max_conns (libuv holds its fd) */
    size_t *lof; /* per socket: its listener */
    int *hfd;    /* per socket: its descriptor, fixed before the thread runs */
    size_t nhandles;
    struct dm_lst_stats *lstats; /* per listener */
    size_t nlisteners;
    size_t held_next;      /* the socket to resume first, so none starves */
    struct dm_runtime *rt; /* the runtime this worker last saw */
    struct dm_rng rng;
    struct dm_buf *free_bufs; /* read buffers (rt->buf_cap) */
    unsigned nfree_bufs;
    struct dm_buf *free_small; /* DM_SMALL_CAP buffers */
    unsigned nfree_small;
    struct dm_req_free *free_reqs; /* requests, for reuse (proxy/request.c) */
    unsigned nfree_reqs;
    /* The fewest pooled of each kind since the last decay pass: that many
     * sat unused the whole time, and the pass frees them (dm_buf_decay). */
    unsigned low_bufs, low_small, low_reqs;
    bool busy_since_decay;     /* a tick saw requests in progress since the last decay pass */
    struct dm_client *clients; /* every open client connection */
    size_t nclients;
    size_t busy;      /* requests in progress */
    size_t busy_peak; /* most requests at once since the last trim */
    uint64_t idle_since_ms;
    bool stopping;
    bool accept_paused; /* at max_conns with a connection left waiting */
    /* The error log's lines about clients' own errors (4xx), at most
     * DM_CLIENT_ERR_LINES a second: this second's, and those left out. */
    uint64_t client_err_sec;
    unsigned client_err_lines;
    uint64_t client_err_dropped;
    bool accept_draining;                    /* pending ones taken: unpaused after one more poll */
    uint64_t paused_since_ms;                /* uv_now() when accept_paused was set */
    atomic_uint_fast64_t accept_pauses;      /* times accept_paused was set (GET /stats) */
    atomic_bool paused_now;                  /* accept_paused, for GET /stats */
    atomic_uint_fast64_t refused_per_client; /* closed at max_conns_per_client */
    atomic_uint_fast64_t refused_rate;       /* requests answered 429 by limits.rate */
    atomic_uint_fast64_t nqueued;            /* its requests on queue[] (other workers read) */
    atomic_uint_fast64_t beats;              /* ticks run: the control thread's watchdog reads it */
    int log_fd;
    char *log_buf;
    size_t log_len;
    int log_format;  /* enum dm_accesslog_format */
    time_t log_time; /* second that log_time_text shows */
    char log_time_text[32];
};

/* ---- admin (proxy/admin.c) ---- */

struct dm_admin;
/* Open admin connections at most; the oldest idle one makes room. */
#define DM_ADMIN_CONNS_MAX 64
/*
 * Starts the admin listener on addr (port 0: a free port) and logs the address
 * it is bound to, which bound receives. NULL with *err (-errno or a libuv code).
 */
struct dm_admin *dm_admin_start(uv_loop_t *loop, const struct dm_conf_addr *addr,
                                struct sockaddr_storage *bound, int *err);
void dm_admin_stop(struct dm_admin *a);
/* The admin listener's descriptor (for the process that replaces this one), or -1. */
int dm_admin_fd(const struct dm_admin *a);
/*
 * The hosts and the running workers that the admin's commands address (after
 * dm_workers_start(); NULL workers: commands answer 503).
 */
struct dm_worker;
void dm_admin_set_workers(struct dm_admin *a, struct dm_hosts *hosts, struct dm_worker *ws,
                          unsigned n);
/* Every worker's acknowledgement notice comes here (the notify of worker.h). */
void dm_admin_acked(struct dm_admin *a);
/* The catalog whose counters GET /stats shows (borrowed, outlives the admin). */
void dm_admin_set_catalog(struct dm_catalog *c);
/*
 * The power manager that GET /power shows and that the power actions go to
 * (NULL: none), and the token the POST requests need (NULL: none; then only
 * an admin listener bound to a loopback address takes them). Both borrowed.
 */
struct dm_powermgr;
void dm_admin_set_power(struct dm_admin *a, struct dm_powermgr *pm, const char *token,
                        bool token_reads);

#endif
