/*
 * dimmer-sim's server model (pure, part of dm_sim): a machine of speed
 * `speed` (work units per second) with `slots` service slots, in one of two
 * disciplines:
 *
 *   DM_SIM_PS    processor sharing with slots: every job present is served
 *                at once, each at speed / max(n, slots). Below `slots` jobs a
 *                job runs at the speed of one slot (a request does not get the
 *                whole machine); above, they share it. slots 1 is classic PS.
 *   DM_SIM_FIFO  `slots` servers of speed / slots each, jobs beyond them wait
 *                in arrival order (M/G/k with k = slots); or, once
 *                dm_sim_srv_keyed() is called, in the order of their keys,
 *                those whose key has passed after every other (the order
 *                of dimmer's queue_order: page, a key being the page's
 *                start plus page_bound).
 *
 * The work done so far per job in service is tracked as a virtual time, so
 * an arrival or a departure costs O(log n), not O(n): each job's finish tag
 * is the virtual time at which it is done. The server schedules its next
 * completion on the run's queue, and moves it (a new tag, the old event
 * ignored) whenever the set of jobs changes.
 *
 * Utilisation is min(n, slots) / slots, the share of the slots busy; its
 * integral over time is kept for power models (dm_sim_srv_busy()).
 */
#ifndef DM_BENCH_SIM_SERVER_H
#define DM_BENCH_SIM_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/sim/sim.h"

enum dm_sim_disc { DM_SIM_PS = 0, DM_SIM_FIFO };

struct dm_sim_srv;
struct dm_sim_job;

typedef void (*dm_sim_done_cb)(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job);

/* A job, caller-owned; it must stay put while it is on a server. */
struct dm_sim_job {
    double size;    /* work units */
    double arrived; /* when it reached the server */
    void *owner;    /* the caller's */
    double key;     /* keyed FIFO: its place (smaller first; past, after all) */
    uint64_t data;  /* the caller's */
    double _tag;    /* virtual finish time (in service) */
    uint64_t _seq;  /* keyed: its turn among equal keys */
    size_t _pos;    /* index in the service heap, or in the wait queue */
    bool _waiting;
};

struct dm_sim_srv {
    enum dm_sim_disc disc;
    double speed;
    unsigned slots;
    dm_sim_done_cb done; /* called when a job finishes, after it left the server */
    void *owner;
    size_t n; /* jobs on the server: in service and waiting */
    uint64_t completed;
    double _v, _v_at; /* virtual time and when it was last brought up to date */
    double _busy, _busy_at;
    struct dm_sim_job **_svc; /* heap by _tag */
    size_t _nsvc, _capsvc;
    struct dm_sim_job **_wait; /* ring of waiting jobs (FIFO) */
    size_t _whead, _nwait, _capwait;
    bool keyed;
    uint64_t _kseq; /* keyed jobs added so far */
    struct dm_sim_heap {
        struct dm_sim_job **a;
        size_t n, cap;
    } _kw, _kl;    /* keyed: waiting jobs whose key is to come, and past */
    uint64_t _gen; /* tag of the completion event that counts */
    bool _oom;
};

/* Sets up srv; its arrays grow as needed. Returns 0. */
int dm_sim_srv_init(struct dm_sim_srv *srv, enum dm_sim_disc disc, double speed, unsigned slots,
                    dm_sim_done_cb done, void *owner);
void dm_sim_srv_fini(struct dm_sim_srv *srv);

/* Makes a FIFO srv serve its waiting jobs by key (before any is added). */
void dm_sim_srv_keyed(struct dm_sim_srv *srv);

/* Puts job (size set) on srv at sim->now. */
void dm_sim_srv_add(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job);

/*
 * Takes every job off srv at once (an abrupt power-off), calling cb for each
 * (in no promised order, but a deterministic one); done is not called.
 */
void dm_sim_srv_abort(struct dm_sim *sim, struct dm_sim_srv *srv,
                      void (*cb)(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job,
                                 void *arg),
                      void *arg);

/* Slot-seconds busy up to sim->now divided by slots: the integral of utilisation. */
double dm_sim_srv_busy(const struct dm_sim *sim, const struct dm_sim_srv *srv);

/* Utilisation now, min(n, slots) / slots. */
double dm_sim_srv_util(const struct dm_sim_srv *srv);

/*
 * Work still to do at sim->now of job, which is on srv: its size less the
 * work it has received (all of it while it waits). O(1).
 */
double dm_sim_srv_left(const struct dm_sim *sim, const struct dm_sim_srv *srv,
                       const struct dm_sim_job *job);

/* Unfinished work on srv at sim->now: dm_sim_srv_left summed over its jobs. O(n). */
double dm_sim_srv_backlog(const struct dm_sim *sim, const struct dm_sim_srv *srv);

bool dm_sim_srv_failed(const struct dm_sim_srv *srv);

#endif
