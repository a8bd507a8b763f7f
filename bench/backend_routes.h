/*
 * The endpoints of dimmer-backend: `dimmer-backend --help` lists them. They answer
 * through backend_conn.h and run on the loop thread.
 */
#ifndef DM_BENCH_BACKEND_ROUTES_H
#define DM_BENCH_BACKEND_ROUTES_H

#include <stdbool.h>

struct dm_backend;
struct dm_backend_handlers;

/* The endpoints as the connection core calls them: route() and the WebSocket echo. */
extern const struct dm_backend_handlers dm_backend_endpoints;

/*
 * Builds be->fill, the object bodies, each as long as the largest object: a valid file
 * of its type padded with blanks, so every prefix that an object size asks for is still
 * valid (an SVG picture then spaces, which XML allows after the root; a script that is
 * one line comment; a stylesheet that is one comment, left open at the end as CSS
 * allows). false when out of memory; main() frees them.
 */
bool dm_backend_make_fills(struct dm_backend *be);

#endif
