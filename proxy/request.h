/*
 * A request between the two sides of the data path: it exists only while one
 * is being served. Its memory comes from the worker's free list; it picks a
 * server (the pool's balancer, affinity, retries on servers not tried yet),
 * takes a server connection, sends the rewritten head, accounts the response
 * on the server's counters, and hands the client connection back once the
 * response is complete. Everything here runs on the worker's thread.
 */
#ifndef DM_PROXY_REQUEST_H
#define DM_PROXY_REQUEST_H

#include <stdbool.h>

struct dm_client;
struct dm_req;
struct dm_upstream;
struct dm_worker;

/*
 * Returns a zeroed request of client c, sized for c's runtime (header_count
 * fields for the request and the response, the bitmap of servers tried), and
 * counts it busy on the worker. NULL when out of memory.
 */
struct dm_req *dm_req_get(struct dm_client *c);

/* Frees req and what it holds (buffers, timeouts.request bound, HTML scan). */
void dm_req_free(struct dm_worker *w, struct dm_req *req);

/*
 * Picks a server for the request (its head is checked and routed) and takes a
 * connection to it; with no server left, answers the client 503 (or 502 after
 * an attempt) and closes it.
 */
void dm_req_pick_and_connect(struct dm_req *req);

/*
 * The request is all sent: from now on a server that stays silent for
 * timeouts.server_response is timed out (not while a slow client uploads).
 */
void dm_req_await_response(struct dm_req *req);

/*
 * A 1xx went to the client: Expect: 100-continue is answered, the client
 * uploads from now on, and its body window starts afresh.
 */
void dm_req_continued(struct dm_req *req);

/*
 * The reused connection up died before answering: when nothing of the request
 * body went out, closes up and sends the request again on a new connection to
 * the same server (or, when that server is no longer usable, to another one
 * the balancer picks), and returns true; the client may be closing by then.
 * Returns false (up untouched) otherwise.
 */
bool dm_req_retry(struct dm_req *req, struct dm_upstream *up);

/*
 * Gives back what the request's pick counted on its server (conns, inflight)
 * and its host (inflight): at the end of the request, or before it is placed
 * again. Does something once per pick.
 */
void dm_req_unpick(struct dm_req *req);

/*
 * The response is complete: counts it and gives its server's counters back.
 * Called before its last bytes go to the client, so that a client that has
 * read a whole response and then asks /stats sees it counted (the promise in
 * balancers/servers.h); does something once per request.
 */
void dm_req_account(struct dm_req *req);

/*
 * After the response: learns, logs, releases the server connection (to the
 * pool when reusable), frees req and goes on with the client's next request,
 * or closes the client.
 */
void dm_req_finish(struct dm_req *req);

#endif
