/*
 * Hosts: what belongs to a backend machine rather than to a pool. One
 * struct dm_host per distinct server address for the life of the process
 * (DESIGN.md, "Threads": servers are also hosts), shared by every pool of
 * every runtime generation that names that address, so health, power state
 * and per-address counters survive a reload.
 *
 * The table (struct dm_hosts) is written by one thread only, the control
 * thread that builds runtimes, so adding needs no lock. Every host is its own
 * allocation and is freed only by dm_hosts_destroy(): workers keep host
 * pointers (through struct dm_server) and read and update the atomics below,
 * never the table itself. Counters are relaxed C11 atomics (statistics and
 * hints, never used to publish other memory).
 */
#ifndef DM_BALANCERS_HOSTS_H
#define DM_BALANCERS_HOSTS_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * Power state of a host, as the power manager (proxy/power.c) or the admin
 * commands set it. Only AWAKE takes requests.
 */
enum dm_power_state {
    DM_POWER_AWAKE = 0,
    DM_POWER_ASLEEP,
    DM_POWER_BOOTING,
    DM_POWER_DRAINING,
    DM_POWER_FAILED, /* woken, but not healthy within the boot timeout */
    DM_POWER_MAINT,  /* held out of service by the operator, awake */
};

struct dm_host {
    struct sockaddr_storage addr; /* the key: family, address, port (and IPv6 scope) */
    char *text;                   /* as first written in a configuration, for display; owned */

    /* Health. */
    atomic_bool down; /* the active health checks say down */
    /* Bumped by the power manager when it marks the host down (a sleep, a
     * wake): a health check begun before says nothing of the machine now. */
    atomic_uint down_gen;
    /* Health checks passed (of the machine as it is: down_gen unchanged while
     * it ran), for the life of the process: whether it was ever seen up. */
    atomic_uint health_oks;
    atomic_uint_fast64_t down_until_us; /* passive checks: down until this monotonic time */
    atomic_uint fails;                  /* consecutive failures seen on the request path */
    /*
     * The active checks' run, the control thread's alone (never read
     * elsewhere, so not atomic). It is the host's, not the checker's, so that
     * the checker a reload starts goes on where the last one was: a server
     * failing its checks goes down however often the configuration is
     * reloaded (proxy/health.c).
     */
    struct dm_host_check {
        unsigned oks;        /* consecutive successes while down */
        unsigned fails;      /* consecutive failures */
        uint64_t started_ms; /* the control loop's clock when the last check began */
        uint64_t due_ms;     /* when the next check was to begin; 0: never checked */
        uint64_t until_ms;   /* a check out (maybe a retired checker's) ends by then; 0: none */
        bool checked;        /* the running checker checks it (not only a retired one) */
    } check;

    /* Power. */
    atomic_int power;                    /* enum dm_power_state */
    atomic_uint_fast64_t power_since_us; /* monotonic time of the last change of power */
    /*
     * Slow start after a wake: from ramp_from_us to ramp_until_us (monotonic;
     * 0: none) the host takes at most its capacity x the elapsed share of
     * that span in flight while another server can take the request
     * (dm_host_ramp_full). Written by the control thread.
     */
    atomic_uint_fast64_t ramp_from_us;
    atomic_uint_fast64_t ramp_until_us;

    /*
     * connections: server-side TCP connections open to the host, idle in a
     * keep-alive pool or in use, from every worker and every generation. A
     * connection enters when its connect succeeds (the server has accepted
     * it: what the server itself would count) and leaves in its close
     * callback; a connect in progress or failed is not counted.
     * bound: client connections bound to the host by connection affinity,
     * from the response that binds them until they close or rebind.
     * Both are exact once the proxy is quiet.
     */
    atomic_uint_fast64_t connections;
    atomic_uint_fast64_t bound;

    /*
     * inflight: requests of any pool and generation on the host, from their
     * pick until their response is complete or they fail (what a drain waits
     * for). started: requests sent to the host, one per attempt (a retry on a
     * new connection counts again), for the life of the process.
     */
    atomic_uint_fast64_t inflight;
    atomic_uint_fast64_t started;

    /*
     * The epoch of the last command asking every worker to close its idle
     * keep-alive connections to the host (proxy/worker.h). Written by the
     * control thread only, before it publishes the epoch.
     */
    atomic_uint_fast64_t close_idle_epoch;
    /*
     * How long a connect to the host takes, as the proxy sees it: a moving
     * average (1/8 of each new sample) of the successful connects of every
     * worker, in microseconds; 0 until the first. The session placer takes
     * it as a client's delay to the host when its network gives none
     * (proxy/session.c). Written without a lock: two workers' samples at
     * once may lose one, which an average can afford.
     */
    atomic_uint_fast64_t connect_us;
};

/*
 * Initializes h, memory the caller owns, as a host kept in no table: up,
 * awake, no counts, no address, text NULL. Any thread, before h is shared.
 */
void dm_host_init(struct dm_host *h);

/*
 * True when h is in its slow start at now_us and already has as many
 * requests in flight as the ramp allows it (at least one) for capacity.
 */
bool dm_host_ramp_full(const struct dm_host *h, unsigned capacity, uint64_t now_us);

/*
 * True when a request may be sent to h at now_us: not marked down by the
 * health checks, not inside a passive down period, awake (what
 * dm_server_is_usable() asks of a server's host). Any thread.
 */
bool dm_host_is_usable(const struct dm_host *h, uint64_t now_us);

/* Adds a connect time of sample_us to h's average (connect_us). Any thread. */
void dm_host_connect_sample(struct dm_host *h, uint64_t sample_us);

/* The table of every host the process has seen. */
struct dm_hosts {
    struct dm_host **h; /* each its own allocation, so pointers never move */
    size_t n, cap;
    /* The index by address, open addressing with linear probing: index + 1
     * into h, 0 for a free slot; nslots a power of two, at least 2n. */
    size_t *slots;
    size_t nslots;
};

/*
 * An empty table, or NULL when out of memory (an all-zero struct is an empty
 * table too). dm_hosts_destroy() frees every host, their texts and the table,
 * so only once nothing points to a host any more (no runtime left); NULL is a
 * no-op. The thread that adds (the control thread).
 */
struct dm_hosts *dm_hosts_create(void);
void dm_hosts_destroy(struct dm_hosts *t);

/*
 * The host of address sa (AF_INET or AF_INET6; others compare as bytes),
 * added up, awake and with zero counts when the table has none, its text a
 * copy of text (NULL: empty). Equal addresses written two ways ("localhost"
 * and "127.0.0.1") are one host, shown with the first text. Returns NULL on
 * allocation failure, the table unchanged. Only one thread may add at a time.
 */
struct dm_host *dm_hosts_get(struct dm_hosts *t, const struct sockaddr_storage *sa,
                             const char *text);

/*
 * True when a and b are the same address (what dm_hosts_get() keys on):
 * family, port and address, and the scope for IPv6; padding is ignored, and
 * an IPv4-mapped IPv6 address is not its IPv4 address. Any thread.
 */
bool dm_host_addr_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

#endif
