/*
 * One interface for every load-balancing policy (DESIGN.md). A policy is a
 * const table of functions over a shared server table; the instance embeds
 * struct dm_balancer as its first member and keeps its own state after it.
 * Policies are pure: no libuv, no clock, no globals; time arrives as now_us
 * and randomness from the caller's struct dm_rng. pick() may run on several
 * worker threads at once: shared state is atomic, there is no lock.
 */
#ifndef DM_BALANCERS_BALANCER_H
#define DM_BALANCERS_BALANCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "balancers/rng.h"
#include "balancers/servers.h"

#define DM_NO_SERVER (-1)

struct dm_balancer_ops;

struct dm_balancer {
    const struct dm_balancer_ops *ops;
    const struct dm_servers *sv; /* borrowed; outlives the balancer */
};

/* Per-pool settings a policy may read; zero means "the policy's default". */
struct dm_bal_conf {
    unsigned draws;      /* random: power of d choices, default 2 */
    double hash_balance; /* hash: load bound factor c >= 1, default 1.25 */
    double age_weight;   /* age: weight w of potential load, used as given (config default 0.1) */
    uint64_t age_half_life_us; /* age: potential load halves in this time, default 10 s */
};

/* Everything a pick may look at; built by the caller for each pick. */
struct dm_pick {
    uint64_t key;         /* hash of the request's key, for hashing policies */
    const uint8_t *tried; /* bitmap of server indexes already tried, or NULL */
    uint64_t now_us;      /* monotonic time */
    struct dm_rng *rng;   /* the calling worker's generator */
};

/* One embedded object of a page, as the catalog knows it. */
struct dm_bal_object {
    uint64_t key;  /* dm_catalog key of the object (host + path hash) */
    uint64_t work; /* expected work: expected bytes + the per-request cost */
};

/* What happened on the request path, for policies that keep their own state. */
struct dm_bal_event {
    int server; /* index in the table */
    uint64_t now_us;
    /*
     * on_request and on_response: the request's expected work (expected
     * bytes plus the per-request cost), the same value in both hooks, for
     * pools whose policy needs DM_BAL_NEEDS_WORK; 0 otherwise and elsewhere.
     */
    uint64_t work;
    /*
     * The connection's own state for the policy: ops->conn_state_size bytes,
     * zeroed before the first event of a connection, owned by the proxy,
     * touched only by the connection's worker. NULL when the size is 0.
     */
    void *conn;
    uint64_t object; /* on_request: catalog key of the requested object */
    /* on_request of a connection's first request: its page's embedded objects. */
    const struct dm_bal_object *objects;
    size_t nobjects;
    bool first; /* on_request: first request of the connection */
};

/*
 * What a policy needs from the proxy beyond the server table and its
 * counters, as flags in dm_balancer_ops.needs. The proxy provides each one to
 * the policies that ask for it, and never asks a policy its name.
 */
enum dm_bal_needs {
    /* dm_pick.key: the request's key (pool hash.key), hashed by the proxy. */
    DM_BAL_NEEDS_KEY = 1u << 0,
    /* s->inflight_work: each request's expected work (the catalog's size of
     * the object plus a per-request cost), reserved at the pick, replaced by
     * the response's length when it is known, and worn down as bytes go out. */
    DM_BAL_NEEDS_WORK = 1u << 1,
    /* The catalog: on a connection's first request, its page's embedded
     * objects (dm_bal_event.objects), and the proxy learns pages and sizes
     * from the responses that pass. */
    DM_BAL_NEEDS_OBJECTS = 1u << 2,
    /* A client connection stays, by default, on the server of its first
     * request (affinity: connection), since the policy's decision is about
     * the connection as a whole. */
    DM_BAL_BINDS_CONNECTIONS = 1u << 3,
    /* Upgrade requests (WebSocket and other tunnels) are long-lived sessions,
     * placed whole by the pool's session placer (proxy/session.c, after the
     * pool's `session` block: groups, games, delays, balancers/sessions.h)
     * and not by pick, which serves the pool's other requests. */
    DM_BAL_NEEDS_SESSIONS = 1u << 4,
};

struct dm_balancer_ops {
    const char *name; /* as written in the config */
    unsigned needs;   /* enum dm_bal_needs flags */
    struct dm_balancer *(*create)(const struct dm_servers *sv, const struct dm_bal_conf *cf);
    int (*pick)(struct dm_balancer *b, const struct dm_pick *in); /* index or DM_NO_SERVER */
    void (*on_request)(struct dm_balancer *b, const struct dm_bal_event *ev);  /* may be NULL */
    void (*on_response)(struct dm_balancer *b, const struct dm_bal_event *ev); /* may be NULL */
    void (*on_close)(struct dm_balancer *b, const struct dm_bal_event *ev);    /* may be NULL */
    void (*destroy)(struct dm_balancer *b);
    /*
     * Per-connection state: the proxy keeps conn_state_size(ev->nobjects...)
     * bytes per client connection for the policy and passes them as ev->conn.
     * NULL: no per-connection state. on_tick (may be NULL) is called about
     * every 100 ms for each connection that has state, for time-based aging.
     */
    size_t (*conn_state_size)(size_t nobjects);
    void (*on_tick)(struct dm_balancer *b, const struct dm_bal_event *ev);
};

/* The registry: every policy, NULL-terminated (balancers/registry.c). */
extern const struct dm_balancer_ops *const dm_balancer_registry[];

/* Finds a policy by its config name; NULL when unknown. */
const struct dm_balancer_ops *dm_balancer_find(const char *name);

/*
 * Creates a balancer of the given policy over sv (borrowed, must outlive it);
 * sets b->ops itself. Returns NULL on allocation failure.
 */
struct dm_balancer *dm_balancer_create(const struct dm_balancer_ops *ops,
                                       const struct dm_servers *sv, const struct dm_bal_conf *cf);

/* True when bit i of the tried bitmap is set (NULL bitmap: nothing tried). */
static inline bool
dm_pick_tried(const struct dm_pick *in, size_t i)
{
    return in->tried != NULL && (in->tried[i / 8] >> (i % 8) & 1) != 0;
}

/* A pick returns a usable server not yet tried, or DM_NO_SERVER. */
static inline int
dm_balancer_pick(struct dm_balancer *b, const struct dm_pick *in)
{
    return b->ops->pick(b, in);
}

static inline void
dm_balancer_on_request(struct dm_balancer *b, const struct dm_bal_event *ev)
{
    if (b->ops->on_request != NULL) {
        b->ops->on_request(b, ev);
    }
}

static inline void
dm_balancer_on_response(struct dm_balancer *b, const struct dm_bal_event *ev)
{
    if (b->ops->on_response != NULL) {
        b->ops->on_response(b, ev);
    }
}

static inline void
dm_balancer_on_close(struct dm_balancer *b, const struct dm_bal_event *ev)
{
    if (b->ops->on_close != NULL) {
        b->ops->on_close(b, ev);
    }
}

static inline void
dm_balancer_on_tick(struct dm_balancer *b, const struct dm_bal_event *ev)
{
    if (b->ops->on_tick != NULL) {
        b->ops->on_tick(b, ev);
    }
}

/* Bytes of per-connection state for a connection whose page has n objects. */
static inline size_t
dm_balancer_conn_state_size(const struct dm_balancer *b, size_t nobjects)
{
    return b->ops->conn_state_size != NULL ? b->ops->conn_state_size(nobjects) : 0;
}

/*
 * The balancer's pick, passing over a server in its slow start that already
 * has as many requests as its ramp allows (dm_host_ramp_full), as long as
 * another server can take the request: the ramp shapes where load goes, it
 * never refuses a request. tried is in->tried, writable (one bit per
 * server); it is as it was on return. At most 16 ramps are passed over.
 */
int dm_balancer_pick_past_ramps(struct dm_balancer *b, const struct dm_pick *in, uint8_t *tried);

/*
 * Whether a client connection bound to s (affinity: connection) keeps
 * sending its requests there at now_us: s is usable and not at the limit of
 * its slow-start ramp, and, with spill_when_full, not full (as many requests
 * in flight on its host as its capacity). Otherwise the request is balanced
 * anew and binds the connection where it goes, so that clients bound during
 * a burst to the few servers that were up spread out once more are. The
 * proxy passes spill_when_full unless the pool's policy binds connections
 * itself (DM_BAL_BINDS_CONNECTIONS: its accounting is per connection, as
 * AGE's potential load). The proxy's request path and the simulator both
 * ask this.
 */
bool dm_server_keeps_affinity(const struct dm_server *s, uint64_t now_us, bool spill_when_full);

/*
 * A waiting request's place in its pool's queue under `queue_order: size`
 * (HAProxy's set-priority-offset, set from the response's expected size):
 * its arrival plus 1 microsecond for each byte its response is expected to
 * be (1 ms a kB: served before any request that came later by more than
 * that), at most half of the queue's timeout, so that a large response
 * overtaken by small ones still has half its time left to find a place.
 *
 * The sizes go by classes, two to a power of two (a class's sizes within
 * 1.5x of one another), and the offset is the class's smallest size: the
 * requests of one class are in arrival order, so a queue can keep one list
 * a class, each in order by appending, and serve the smallest key of their
 * heads, instead of walking one list past every larger response to place a
 * smaller one (which a client could make quadratic). Class 0 is below 128
 * bytes (and every request of a queue in arrival order); the last,
 * DM_QUEUE_CLASSES - 1, from 4 MiB. The proxy's queue and the simulator's
 * both ask these.
 */
#define DM_QUEUE_CLASSES 32
unsigned dm_queue_class(uint64_t expected_bytes);
/* The offset to add to the arrival, in microseconds, of a class's requests. */
uint64_t dm_queue_class_offset_us(unsigned cls, uint64_t queue_timeout_us);

/* Frees the balancer; NULL is a no-op. */
static inline void
dm_balancer_destroy(struct dm_balancer *b)
{
    if (b != NULL) {
        b->ops->destroy(b);
    }
}

#endif
