/*
 * The AGE glue of the data path (pools whose policy keeps per-connection
 * state): the expected work a request adds to its server's inflight_work, the
 * policy's state of each client connection and its aging, and what the
 * catalog learns from responses (sizes, and the objects an HTML page embeds).
 * Everything here runs on the worker's thread.
 */
#ifndef DM_PROXY_LEARN_H
#define DM_PROXY_LEARN_H

#include <stddef.h>
#include <stdint.h>

struct dm_client;
struct dm_req;
struct dm_worker;

/*
 * The request has just been given its server: counts its expected work there
 * (work pools) and tells the policy. The first request of a connection brings
 * its page's potential load from the catalog and creates the connection's
 * policy state (kept in the client until dm_learn_client_close()).
 */
void dm_learn_reserve(struct dm_req *req);

/* Subtracts up to n of the request's expected work from its server. */
void dm_learn_work_done(struct dm_req *req, int64_t n);

/* FIN correction: the connection's potential leaves the table; frees its state. */
void dm_learn_client_close(struct dm_client *c);

/* Lets the policies age the state of every client of w that has some (tick). */
void dm_learn_age(struct dm_worker *w);

/*
 * A final response head of a work pool arrived: its real size replaces the
 * estimate in the server's in-flight work, and a 200 HTML page of a GET starts
 * being scanned for embedded objects (req->learn, freed with the request).
 */
void dm_learn_response(struct dm_req *req);

/* Feeds decoded body bytes to the scan of req->learn (not NULL). */
void dm_learn_body(struct dm_req *req, const char *p, size_t len);

/* The response is complete with body_bytes: the catalog learns its size and page. */
void dm_learn_finish(struct dm_req *req, uint64_t body_bytes);

#endif
