/*
 * The capacity of dimmer-backend as a machine of a cluster: at most --capacity requests
 * in service at once across all connections, each holding its slot for a service time
 * on a timer (no CPU spent), at most --queue more waiting in arrival order, a 503 for
 * the rest. Loop thread only.
 */
#ifndef DM_BENCH_BACKEND_QUEUE_H
#define DM_BENCH_BACKEND_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

struct dm_backend_conn;

/* Where a connection's current request is in the queue. */
enum dm_backend_slot {
    DM_SLOT_NONE,    /* not parked: routed at once, or no request */
    DM_SLOT_QUEUED,  /* waiting for a slot, in the FIFO */
    DM_SLOT_SERVICE, /* holding a slot until its service timer fires */
};

/* Embedded in struct dm_backend; main() sets the configuration, the rest starts zeroed. */
struct dm_backend_queue {
    uint64_t capacity;   /* slots, 0: unlimited */
    uint64_t max;        /* requests waiting at most */
    uint64_t service_ms; /* a request's service time, unless its ?ms=N says otherwise */
    uint64_t in_service, in_service_max, queued, queued_max;
    uint64_t rejected_full; /* 503s: the queue was full */
    uint64_t served;        /* requests whose service time ended */
    struct dm_backend_conn *head, *tail;
};

/*
 * Called when the head of c's request is complete (in[head_start, parse_off)). true:
 * the request is parked (queued, or in service on c's timer) and c must neither parse
 * nor read until the queue calls dm_backend_conn_serve(c). false: route it now; then
 * c->busy says the queue was full and the answer is a 503. /healthz and /stats are never
 * parked, nor is anything when there is neither a capacity nor a service time.
 */
bool dm_backend_queue_park(struct dm_backend_conn *c);

/* Takes a closing connection out of the queue, freeing its slot for the next. */
void dm_backend_queue_forget(struct dm_backend_conn *c);

#endif
