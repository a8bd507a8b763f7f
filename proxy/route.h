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

#endif
