/*
 * The server table: one entry per backend server of a pool, shared by every
 * worker thread. The static part (name, weight, capacity) is written once when
 * the table is built; the counters are C11 atomics, updated with relaxed
 * ordering on the request path because they are statistics and hints, never
 * used to publish other memory.
 */
#ifndef DM_BALANCERS_SERVERS_H
#define DM_BALANCERS_SERVERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Power state of a server (the power manager of a later issue moves it). */
enum dm_power_state {
    DM_POWER_AWAKE = 0,
    DM_POWER_ASLEEP,
    DM_POWER_BOOTING,
    DM_POWER_DRAINING,
};

struct dm_server {
    const char *name;  /* borrowed from the configuration */
    unsigned weight;   /* >= 1 */
    unsigned capacity; /* >= 1, requests the server serves at once at full speed */
    unsigned index;    /* position in its table */

    atomic_bool down;                   /* active health check says down */
    atomic_uint_fast64_t down_until_us; /* passive: down until this monotonic time */
    atomic_uint fails;                  /* consecutive failures seen on the request path */
    atomic_int power;                   /* enum dm_power_state */

    /*
     * What the counters promise to an observer (GET /stats, another worker):
     *   - a request is in conns and inflight from its pick until its response
     *     is complete (or it fails), and leaves them, and enters `requests`,
     *     before the last byte of its response is handed to the client's
     *     socket: a client that has read a whole response and then asks
     *     /stats sees it counted and no longer in flight (a response whose
     *     end only its close tells, as one de-chunked for an HTTP/1.0 client,
     *     is counted before that close);
     *   - picks counts every balancer decision (retries included), at the
     *     moment of the pick; failures counts each failure as it is seen.
     * Each is exact once the proxy is quiet; under load they are read with
     * relaxed loads, one at a time, so they need not agree with each other.
     */
    atomic_uint_fast64_t conns;    /* server-side connections in use by a request */
    atomic_uint_fast64_t inflight; /* requests being served now */
    atomic_uint_fast64_t picks;    /* times a balancer chose it */
    atomic_uint_fast64_t requests; /* requests whose response completed */
    atomic_uint_fast64_t failures; /* connect failures, resets, timeouts */
    /*
     * In-flight work: expected bytes still to come (plus a per-request cost)
     * of the requests being served now, kept by the proxy. Potential load:
     * the aged potential of the connections bound to this server, kept by the
     * age policy (DESIGN.md, AGE). Both are zero when nothing is open.
     */
    atomic_int_fast64_t inflight_work;
    atomic_int_fast64_t potential;
};

struct dm_servers {
    struct dm_server *s;
    size_t n;
};

/*
 * True when a request may be sent to the server at now_us: not marked down by
 * the health checks, not inside a passive down period, and awake.
 */
bool dm_server_is_usable(const struct dm_server *s, uint64_t now_us);

/*
 * Builds a table of n servers, zeroed, index set, weight and capacity 1.
 * Returns NULL on allocation failure. dm_servers_destroy(NULL) is a no-op.
 */
struct dm_servers *dm_servers_create(size_t n);
void dm_servers_destroy(struct dm_servers *sv);

static inline uint64_t
dm_counter_get(const atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

static inline void
dm_counter_add(atomic_uint_fast64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static inline void
dm_counter_sub(atomic_uint_fast64_t *c, uint64_t v)
{
    atomic_fetch_sub_explicit(c, v, memory_order_relaxed);
}

#endif
