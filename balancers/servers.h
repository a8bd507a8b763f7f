/*
 * The server table: one entry per backend server of a pool, per runtime
 * generation, shared by every worker thread: the pool's load table. The
 * static part (name, weight, capacity, host) is written once when the table
 * is built; the counters are C11 atomics, updated with relaxed ordering on the
 * request path because they are statistics and hints, never used to publish
 * other memory.
 *
 * What belongs to the machine rather than to the pool (health, power state,
 * open connections, bound clients) is in the server's host
 * (balancers/hosts.h), which lives for the process and is shared by every
 * pool and generation naming the same address.
 */
#ifndef DM_BALANCERS_SERVERS_H
#define DM_BALANCERS_SERVERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "balancers/hosts.h"

struct dm_server {
    const char *name;  /* borrowed from the configuration */
    unsigned weight;   /* >= 1 */
    unsigned capacity; /* >= 1, requests the server serves at once at full speed */
    unsigned index;    /* position in its table */
    /*
     * The machine: health, power, connections. Never NULL: the process's
     * host of the address, or a private one of the table's (dm_servers_create).
     * Not const: the proxy's health checks and passive checks write through it.
     */
    struct dm_host *host;

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
    atomic_uint_fast64_t conns;    /* requests of this pool picked for it, not yet done:
                                      server-side connections in use (or being made) */
    atomic_uint_fast64_t inflight; /* requests being served now (the same span as conns) */
    atomic_uint_fast64_t picks;    /* times a balancer of this pool chose it */
    atomic_uint_fast64_t requests; /* requests of this pool whose response completed */
    atomic_uint_fast64_t failures; /* connect failures, resets, timeouts, through this pool */
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
    struct dm_host *_own; /* the private hosts of dm_servers_create(), one per server */
};

/*
 * True when a request may be sent to the server at now_us: its host is not
 * marked down by the health checks, not inside a passive down period, and
 * awake.
 */
bool dm_server_is_usable(const struct dm_server *s, uint64_t now_us);

/*
 * Builds a table of n servers, zeroed, index set, weight and capacity 1, each
 * pointing to a private host of its own (up, awake, no address), which the
 * table owns: a caller with a host table points s[i].host to its hosts
 * instead. Returns NULL on allocation failure. dm_servers_destroy(NULL) is a
 * no-op; it frees the private hosts, never the ones of a host table.
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
