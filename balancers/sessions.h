/*
 * Live sessions over the session allocator (balancers/alloc.h): the
 * bookkeeping that `balance: session` keeps for a pool. proxy/session.c
 * wraps it with a lock and the pool's configuration (conf/README.md,
 * "session"); dimmer-sim and the unit tests can drive it directly.
 *
 * A session is one client of a group, and a group is one game session
 * (alloc.h): its clients share one rendering, so the group's load is
 * frame_load x rate whatever its size, and the group is placed whole on one
 * server. On live traffic the clients of a group arrive one by one (each
 * opens its own WebSocket or other Upgrade tunnel) and leave one by one
 * (its tunnel closes):
 *
 *   arrival (dm_sessions_join): the first client of a group makes it. Placed
 *     at once (conf.batch false), it goes by the greedy rule (dm_alloc_place,
 *     the least loaded server where C2-C4 hold) at its requested rate, and
 *     when no server can take it there, at the highest lower rate that
 *     fits: as close to the request as the servers allow. With conf.batch
 *     it waits for the next dm_sessions_batch(). A later client of a
 *     waiting group joins it; of a placed group, it joins it on the group's
 *     server if C3 and C4 still hold with its delays (the load does not
 *     change), and is refused (-ERANGE) if not: the group's other clients
 *     run there, and a running session is never moved;
 *   the batch pass (dm_sessions_batch): the waiting groups are solved
 *     together as Client_Server_Alloc (dm_alloc_solve: greedy at the
 *     requested rates, or rate lowering when they do not fit, then annealing
 *     of LBF) on what the placed groups leave of each server (their load is
 *     the pass's base load): annealing moves only groups that wait, never a
 *     running one. What the pass cannot place is refused (-ENOSPC);
 *   departure (dm_sessions_leave): the client's delays leave its group, and
 *     the last client's departure takes the group's load off its server;
 *   reconfiguration (dm_sessions_configure): new servers, capacities and
 *     limits. A placed group stays on its server (matched by key) whatever
 *     the new capacity says (dm_alloc_put); a group whose server is gone is
 *     detached: it counts on no server and takes no new client, and it ends
 *     when its last client leaves, unless a later reconfiguration has its
 *     server (its key) again: then it is placed there again, as it runs. Every client's delays are
 * computed again from the client it was given (the caller's row callback).
 *
 * A request with no group id is a group of its own. Group ids are compared
 * as bytes. Everything is bounded: max_groups groups at once, max_members
 * clients per group, DM_SESSIONS_ID_MAX bytes of id, DM_SESSIONS_RATES_MAX
 * rates per game, DM_SESSIONS_CLIENT_MAX bytes of client.
 *
 * Pure (dm_balancers): no lock, no clock, no globals; one thread at a time
 * on the table (the caller's lock), randomness from the caller's
 * generator. dm_sessions_pass_solve() touches only its pass.
 */
#ifndef DM_BALANCERS_SESSIONS_H
#define DM_BALANCERS_SESSIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "balancers/alloc.h"
#include "balancers/hash.h"
#include "balancers/rng.h"

#define DM_SESSIONS_ID_MAX     128 /* bytes of a group id */
#define DM_SESSIONS_RATES_MAX  16  /* rates in one game's list */
#define DM_SESSIONS_CLIENT_MAX 128 /* bytes kept per client (a struct sockaddr_storage) */

/* What dm_sessions_join() and _status() return besides errors. */
#define DM_SESSIONS_PLACED  0 /* on a server: see struct dm_sessions_place */
#define DM_SESSIONS_WAITING 1 /* waiting for the next dm_sessions_batch() */

struct dm_sessions_conf {
    double dmax_ms;             /* C3; HUGE_VAL: no limit */
    double dvmax_ms;            /* C4; HUGE_VAL: no limit */
    bool batch;                 /* new groups wait for dm_sessions_batch() */
    size_t max_groups;          /* groups at once, >= 1 */
    size_t max_members;         /* clients of one group, >= 1 */
    struct dm_alloc_conf solve; /* the batch pass: alpha and the annealing schedules */
    struct dm_hash_secret key;  /* group ids are hashed under it: dm_sessions_create()'s counts */
};

struct dm_sessions_server {
    double capacity; /* FMAX, >= 0 */
    const void *key; /* identifies the server across dm_sessions_configure() (compared as a
                        pointer; the proxy gives its host) */
};

/* One arrival. Everything is borrowed for the call; client's bytes are copied. */
struct dm_sessions_ask {
    const char *group; /* the group id; NULL or group_len 0: a group of its own */
    size_t group_len;  /* <= DM_SESSIONS_ID_MAX */
    /* The game, used when the client makes a new group (a later client joins
     * its group's session at the group's rate). */
    double frame_load;      /* >= 0 */
    const double *rates;    /* strictly increasing, > 0; 1..DM_SESSIONS_RATES_MAX of them */
    size_t nrates;          /* >= 1 */
    size_t want;            /* the requested rate: an index into rates */
    const double *delay_ms; /* the client's delay to each server; NaN: not that server */
    const void *client;     /* handed back to the row callback of dm_sessions_configure() */
    size_t client_len;      /* <= DM_SESSIONS_CLIENT_MAX */
};

/* Where a session is. */
struct dm_sessions_place {
    int server;   /* index among the servers of the last configuration */
    size_t tier;  /* index of its rate */
    double rate;  /* the group's rate */
    bool lowered; /* below the group's request */
};

struct dm_sessions;
struct dm_sessions_member; /* one client: the ticket that join hands out and leave takes back */

/*
 * Makes an empty table for cf and the n servers sv (copied). NULL for a bad
 * configuration (max_groups or max_members 0, a capacity that is negative
 * or not a number, more than INT_MAX servers or groups) or out of memory.
 */
struct dm_sessions *dm_sessions_create(const struct dm_sessions_conf *cf,
                                       const struct dm_sessions_server *sv, size_t n);

/*
 * Frees the table and the groups and members it lists; NULL is a no-op.
 * Meant for when every ticket is back: one still out is invalid after it
 * (and one of a refused group, which the table no longer lists, leaks).
 */
void dm_sessions_destroy(struct dm_sessions *t);

/*
 * A client arrives (the rules at the top). Returns DM_SESSIONS_PLACED with
 * *pl filled, or DM_SESSIONS_WAITING; either way *out is its ticket, which
 * the caller gives back once with dm_sessions_leave(). Errors (nothing
 * kept, *out untouched): -ENOSPC no server can take the new group even at
 * its lowest rate; -ERANGE the client is out of reach (C3, C4) of its
 * placed group's server, whose index is in pl->server; -ENXIO its group's
 * server left the pool (a detached group); -EMLINK its group has
 * max_members clients; -EUSERS max_groups groups exist; -EINVAL a bad ask;
 * -ENOMEM.
 */
int dm_sessions_join(struct dm_sessions *t, const struct dm_sessions_ask *ask,
                     struct dm_sessions_member **out, struct dm_sessions_place *pl);

/*
 * The state of member m: DM_SESSIONS_PLACED with *pl filled,
 * DM_SESSIONS_WAITING, or the error that ended its wait: -ENOSPC (the batch
 * pass found no room for its group), -ENXIO (its group's server left).
 */
int dm_sessions_status(const struct dm_sessions *t, const struct dm_sessions_member *m,
                       struct dm_sessions_place *pl);

/* Member m leaves (m is freed): its group shrinks, and goes when it is empty. NULL: no-op. */
void dm_sessions_leave(struct dm_sessions *t, struct dm_sessions_member *m);

/*
 * The batch pass over every waiting group (the rules at the top), with
 * cf.solve and rng: dm_sessions_pass_take(), _solve(), _commit() and
 * _free() in a row. Returns the number of groups it decided (placed or
 * refused), 0 when none waits, -EBUSY while a pass taken apart is out, or
 * -ENOMEM (they keep waiting).
 */
int dm_sessions_batch(struct dm_sessions *t, struct dm_rng *rng);

/*
 * The batch pass taken apart, so that its solve, the long part (bounded by
 * cf.solve's iterations and the number of waiting groups), runs without
 * the caller's lock on the table:
 *
 *   dm_sessions_pass_take(t, &p)   (table locked) copies the waiting groups,
 *       their delays and the room the placed groups leave; returns how many
 *       (0: none waits, *p NULL), -EBUSY when a pass is out, or -ENOMEM;
 *   dm_sessions_pass_solve(p, rng) (no table) solves the copy: 0 or -ENOMEM;
 *   dm_sessions_pass_commit(t, p)  (table locked) applies the answer to the
 *       groups that still wait: each placement is checked again against the
 *       table as it is now (clients may have joined a group, groups may
 *       have left their servers) and falls back to the greedy rule; groups
 *       that left meanwhile are skipped. Returns the number of groups it
 *       decided; -ESTALE when the table was configured again since the
 *       take, -ENOMEM when the solve failed: then the groups wait for the
 *       next pass;
 *   dm_sessions_pass_free(p).
 *
 * Groups that start waiting while a pass is out are not in it: they wait
 * for the next (dm_sessions_untaken). One pass is out at a time.
 */
struct dm_sessions_pass;
int dm_sessions_pass_take(struct dm_sessions *t, struct dm_sessions_pass **p);
int dm_sessions_pass_solve(struct dm_sessions_pass *p, struct dm_rng *rng);
int dm_sessions_pass_commit(struct dm_sessions *t, struct dm_sessions_pass *p);
void dm_sessions_pass_free(struct dm_sessions_pass *p);

/* Groups waiting for the batch pass. */
size_t dm_sessions_waiting(const struct dm_sessions *t);

/* Of them, those that no pass out has taken: those the next pass is for. */
size_t dm_sessions_untaken(const struct dm_sessions *t);

/*
 * Fills row (one delay per server of the new configuration) for the client
 * whose bytes join was given: how dm_sessions_configure() recomputes delays.
 */
typedef void (*dm_sessions_row_cb)(void *arg, const void *client, size_t client_len, double *row);

/*
 * Takes the configuration cf and the n servers sv (the rules at the top;
 * the id table grows to hold every group that exists if max_groups is now
 * smaller). Returns 0, -EINVAL for a bad configuration or -ENOMEM; on error
 * the table is as it was.
 */
int dm_sessions_configure(struct dm_sessions *t, const struct dm_sessions_conf *cf,
                          const struct dm_sessions_server *sv, size_t n, dm_sessions_row_cb row,
                          void *arg);

struct dm_sessions_stats {
    size_t groups;    /* groups on a server */
    size_t members;   /* their clients */
    size_t waiting;   /* groups waiting for the batch pass */
    size_t solving;   /* of them, those a pass out is solving */
    size_t detached;  /* groups whose server left the pool, still running */
    double lbf;       /* standard deviation of the servers' loads */
    uint64_t placed;  /* groups placed, since the table was made */
    uint64_t lowered; /* of them, at a rate below their request */
    uint64_t refused; /* groups refused for want of room (-ENOSPC) */
};

struct dm_sessions_server_stats {
    size_t groups;   /* groups on the server */
    size_t members;  /* their clients */
    double load;     /* their load */
    double capacity; /* its FMAX */
};

/*
 * Fills *st, and per[i] for the first n servers (per may be NULL). The
 * counts are exact: from the table's own lists, not from running sums.
 */
void dm_sessions_stats(const struct dm_sessions *t, struct dm_sessions_stats *st,
                       struct dm_sessions_server_stats *per, size_t n);

/* The number of servers of the last configuration. */
size_t dm_sessions_nservers(const struct dm_sessions *t);

#endif
