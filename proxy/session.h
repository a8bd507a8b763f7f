/*
 * The session placers of `balance: session` pools (DESIGN.md "Session
 * allocation", conf/README.md "session"): the live state of the session
 * allocator, shared by every worker, and the configuration it is placed by.
 *
 * One placer per session pool name, for the life of the process (struct
 * dm_placers, made by the control thread like the host table): a reload
 * reconfigures the placer of a pool that keeps its name, so the sessions
 * running under the old configuration keep their load on their servers,
 * matched by host (balancers/sessions.h, dm_sessions_configure), and end
 * into the same placer whichever runtime they were accepted under. A
 * placer's answers name servers by host, never by index, because workers
 * on the old and the new runtime ask the same placer during a reload.
 *
 * Locking. The placement state (groups, members, per-server loads) is one
 * table behind one mutex per placer. The mutex is taken only when a
 * session starts or ends: an Upgrade request of a session pool is placed
 * (dm_placer_join, and dm_placer_status while it waits in a batch window),
 * its tunnel or failed attempt gives its place back (dm_placer_leave), and
 * the control thread runs the batch pass (dm_placers_run), reconfigures
 * (dm_placers_configure) and reads statistics. Ordinary requests never
 * take it: plain requests of a session pool are picked lock-free by the
 * policy (leastconn), and the bytes of a running tunnel never look at the
 * placer. That is acceptable because sessions are long-lived and rare
 * next to requests (one lock per session start and one per end, against
 * thousands of requests and tunnelled frames in between), and a placement
 * is short: a greedy pass over the servers, and for a group member a check
 * of its delays against its group's. The batch pass takes the lock twice,
 * briefly: to copy the waiting groups, then to apply its answer (checked
 * again against the table, balancers/sessions.h); its solve, bounded by
 * session.anneal.iterations and the number of waiting groups, runs on the
 * copy without the lock, so arrivals and departures never wait for it.
 */
#ifndef DM_PROXY_SESSION_H
#define DM_PROXY_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

struct dm_conf_pool;
struct dm_host;
struct dm_placer;
struct dm_placers;
struct dm_sbuf;
struct dm_servers;
struct dm_sessions_member;

/*
 * The process's placers: an empty registry, or NULL when out of memory.
 * dm_placers_destroy() frees every placer, so only once no runtime points
 * to one and no session holds a ticket (after the workers are joined);
 * NULL is a no-op. Control thread.
 */
struct dm_placers *dm_placers_create(void);
void dm_placers_destroy(struct dm_placers *r);

/*
 * The placer of pool pc (whose servers' live entries are sv), made on the
 * first call for its name and reconfigured on every later one (a reload):
 * games, networks, limits and servers are copied from pc. Returns it, or
 * NULL when out of memory (the placer, if it existed, keeps its previous
 * configuration). Control thread, while building a runtime.
 */
struct dm_placer *dm_placers_configure(struct dm_placers *r, const struct dm_conf_pool *pc,
                                       const struct dm_servers *sv);

/*
 * Where the batch passes run: each solve on loop's thread pool, then
 * decided(arg) on loop's thread when a pass decided groups (the workers
 * then look at their waiting requests again). Without it, passes run in
 * dm_placers_run() itself. Control thread, once.
 */
void dm_placers_set_loop(struct dm_placers *r, uv_loop_t *loop, void (*decided)(void *arg),
                         void *arg);

/*
 * Starts the batch pass of every placer whose window has ended at now_us
 * and that has sessions waiting, one pass at a time per placer. With
 * now_us UINT64_MAX (a stop), every placer's waiting groups are solved at
 * once, here, and a placer whose pass is out runs its later groups when
 * that pass is back. Returns true when a pass run here decided any.
 * Control thread, from a timer.
 */
bool dm_placers_run(struct dm_placers *r, uint64_t now_us);

/* A session request, as the worker read it from the Upgrade request. */
struct dm_placer_ask {
    const char *group; /* the group id (header or cookie), NULL: a group of its own */
    size_t group_len;
    const char *game; /* the game header's value, NULL: the default game */
    size_t game_len;
    double rate;                   /* the asked rate; < 0: the game's configured rate */
    const struct sockaddr *client; /* the client's address */
    /* Servers the request must not go to (already tried): the tried bits of
     * tried_sv, the worker's runtime's table of the pool. NULL: none. */
    const struct dm_servers *tried_sv;
    const uint8_t *tried;
    uint64_t now_us;
};

/* Where a session goes, or why it does not. */
struct dm_placer_answer {
    struct dm_host *host; /* placed: its server's host */
    double rate;          /* placed: the group's frame rate (the rate tier header's value) */
    bool lowered;         /* placed: below what was asked */
    unsigned status;      /* refused: the status to answer (400 or 503) */
    const char *reason;   /* refused: why, a static string */
};

/*
 * Places a session (balancers/sessions.h, dm_sessions_join, with the
 * client's delays from the pool's networks, or measured connect times, and
 * servers that are down, asleep or tried left out). Returns 0 placed (ans
 * host, rate), 1 waiting for the batch pass, or <0 refused (ans status and
 * reason); on 0 or 1 *ticket is the session's, which the caller gives back
 * once with dm_placer_leave(). Worker threads (takes the lock).
 */
int dm_placer_join(struct dm_placer *pl, const struct dm_placer_ask *ask,
                   struct dm_sessions_member **ticket, struct dm_placer_answer *ans);

/*
 * The state of a waiting session: as dm_placer_join() returns, the ticket
 * still the caller's whatever the answer. Worker threads (takes the lock).
 */
int dm_placer_status(struct dm_placer *pl, struct dm_sessions_member *ticket,
                     struct dm_placer_answer *ans);

/* The session of ticket ends (its load leaves when its group is empty). NULL: no-op. */
void dm_placer_leave(struct dm_placer *pl, struct dm_sessions_member *ticket);

/*
 * Appends the placer's state as a JSON object: per server its groups,
 * sessions, load and capacity; the pool's LBF and counters. Control thread.
 */
void dm_placer_stats_json(struct dm_placer *pl, struct dm_sbuf *b);

#endif
