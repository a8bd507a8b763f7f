#include "balancers/registry.h"

#include <string.h>

const struct dm_balancer_ops *const dm_balancer_registry[] = {
    &dm_bal_roundrobin, /* roundrobin.c */
    &dm_bal_leastconn,  /* leastconn.c */
    &dm_bal_random,     /* random.c */
    &dm_bal_hash,       /* hash.c */
    &dm_bal_p2c_shadow, /* p2c_shadow.c */
    &dm_bal_hybrid,     /* hybrid.c */
    &dm_bal_age,        /* age.c */
    &dm_bal_session,    /* session.c */
    NULL,
};

const struct dm_balancer_ops *
dm_balancer_find(const char *name)
{
    if (name == NULL) {
        return NULL;
    }
    for (size_t i = 0; dm_balancer_registry[i] != NULL; i++) {
        if (strcmp(dm_balancer_registry[i]->name, name) == 0) {
            return dm_balancer_registry[i];
        }
    }
    return NULL;
}

struct dm_balancer *
dm_balancer_create(const struct dm_balancer_ops *ops, const struct dm_servers *sv,
                   const struct dm_bal_conf *cf)
{
    static const struct dm_bal_conf defaults; /* all zero: every policy's defaults */
    struct dm_balancer *b = ops->create(sv, cf != NULL ? cf : &defaults);
    if (b == NULL) {
        return NULL;
    }
    /* Set here, not in each policy, so that no policy can forget them. */
    b->ops = ops;
    b->sv = sv;
    return b;
}
