/*
 * "session": the policy of pools that serve long-lived sessions (WebSocket
 * and other Upgrade tunnels: game or media streams). Sessions are not picked
 * one request at a time: the proxy places them whole, group by group, with
 * the session allocator (balancers/sessions.h over balancers/alloc.h,
 * shared by the workers in proxy/session.c), because the policy says so
 * with DM_BAL_NEEDS_SESSIONS. What is left for pick is the pool's other
 * requests (a lobby page, a plain GET, a probe): weighted least
 * connections, as dm_bal_leastconn, whose instance this one wraps. A
 * tunnel stays counted in its server's conns while it is open, so plain
 * requests also keep off the servers that carry the most sessions.
 */
#include "balancers/registry.h"

#include <stdlib.h>

#include "balancers/balancer.h"

struct session_balancer {
    struct dm_balancer base;
    struct dm_balancer *plain; /* leastconn, for what is not a session */
};

static struct dm_balancer *
session_create(const struct dm_servers *sv, const struct dm_bal_conf *cf)
{
    struct session_balancer *sb = calloc(1, sizeof(*sb));
    if (sb == NULL) {
        return NULL;
    }
    sb->plain = dm_balancer_create(&dm_bal_leastconn, sv, cf);
    if (sb->plain == NULL) {
        free(sb);
        return NULL;
    }
    return &sb->base;
}

static int
session_pick(struct dm_balancer *b, const struct dm_pick *in)
{
    return dm_balancer_pick(((struct session_balancer *)b)->plain, in);
}

static void
session_destroy(struct dm_balancer *b)
{
    struct session_balancer *sb = (struct session_balancer *)b;
    dm_balancer_destroy(sb->plain);
    free(sb);
}

const struct dm_balancer_ops dm_bal_session = {
    .name = "session",
    .needs = DM_BAL_NEEDS_SESSIONS,
    .create = session_create,
    .pick = session_pick,
    .destroy = session_destroy,
};
