/*
 * Request routing: the first route of the config whose host and path prefix
 * both match wins; otherwise the config's default pool. Pure: no I/O.
 */
#ifndef DM_PROXY_ROUTE_H
#define DM_PROXY_ROUTE_H

#include <stddef.h>

struct dm_conf;

/*
 * Returns the pool index for a request to host (the Host header value, may
 * carry ":port", which is ignored; compared case-insensitively; may be empty)
 * and path (the origin-form target, query included). A route host "*.x.com"
 * matches any name ending in ".x.com" (not "x.com" itself); a route without
 * host matches every host. A path prefix matches when the path starts with it.
 */
size_t dm_route_match(const struct dm_conf *c, const char *host, size_t host_len, const char *path,
                      size_t path_len);

/*
 * The routes of a config indexed by host: a request's candidates are the
 * routes of its exact host, of each wildcard suffix of it and of every host,
 * so thousands of virtual hosts cost a few hash lookups, not a scan (as
 * nginx's server_name hash). Built from c, which must outlive it; NULL when
 * out of memory.
 */
struct dm_routes;
struct dm_routes *dm_routes_build(const struct dm_conf *c);
void dm_routes_free(struct dm_routes *rs);

/* dm_route_match() through rs (built from c), with the same answer. */
size_t dm_routes_match(const struct dm_routes *rs, const struct dm_conf *c, const char *host,
                       size_t host_len, const char *path, size_t path_len);

#endif
