#include "proxy/route.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"

/*
 * The name part of a Host value: "[v6]:port" keeps "[v6]", "name:port" keeps
 * "name", and a trailing dot of a fully qualified name is dropped, since
 * "example.com." and "example.com" are the same host (RFC 3986 section 3.2.2).
 */
static size_t
host_name_len(const char *host, size_t len)
{
    if (len > 0 && host[0] == '[') {
        const char *close = memchr(host, ']', len);
        return close != NULL ? (size_t)(close - host) + 1 : len;
    }
    const char *colon = memchr(host, ':', len);
    if (colon != NULL) {
        len = (size_t)(colon - host);
    }
    if (len > 0 && host[len - 1] == '.') {
        len--;
    }
    return len;
}

static bool
route_host_matches(const char *want, const char *host, size_t len)
{
    if (want == NULL) {
        return true;
    }
    size_t want_len = strlen(want);
    if (want_len >= 2 && want[0] == '*' && want[1] == '.') {
        /* "*.x.com": some non-empty name, then ".x.com"; "x.com" itself is not covered. */
        const char *suffix = want + 1;
        size_t suffix_len = want_len - 1;
        return len > suffix_len && strncasecmp(host + len - suffix_len, suffix, suffix_len) == 0;
    }
    return len == want_len && (len == 0 || strncasecmp(host, want, len) == 0);
}

static bool
route_path_matches(const char *prefix, const char *path, size_t len)
{
    /* "/" is any path too, so that "OPTIONS *" and an empty target still match. */
    if (prefix == NULL || prefix[0] == '\0' || strcmp(prefix, "/") == 0) {
        return true;
    }
    size_t prefix_len = strlen(prefix);
    return len >= prefix_len && memcmp(path, prefix, prefix_len) == 0;
}

size_t
dm_route_match(const struct dm_conf *c, const char *host, size_t host_len, const char *path,
               size_t path_len)
{
    size_t name_len = host != NULL ? host_name_len(host, host_len) : 0;
    for (size_t i = 0; i < c->nroutes; i++) {
        const struct dm_conf_route *r = &c->routes[i];
        if (route_host_matches(r->host, host, name_len) &&
            route_path_matches(r->path_prefix, path, path_len)) {
            return r->pool;
        }
    }
    return c->default_pool;
}
