/*
 * The policies known to dimmer. Each policy file exports exactly one of these
 * tables; balancers/registry.c lists them all in dm_balancer_registry[], so a
 * new policy is one file, one line here and one line there. Callers normally
 * go through dm_balancer_find() by config name; tests may name a table.
 */
#ifndef DM_BALANCERS_REGISTRY_H
#define DM_BALANCERS_REGISTRY_H

#include "balancers/balancer.h"

/* "roundrobin": smooth weighted round robin (balancers/roundrobin.c). */
extern const struct dm_balancer_ops dm_bal_roundrobin;

/* "leastconn": weighted least connections (balancers/leastconn.c). */
extern const struct dm_balancer_ops dm_bal_leastconn;

/* "random": power of d choices on conns / weight, weighted draws (balancers/random.c). */
extern const struct dm_balancer_ops dm_bal_random;

/* "hash": consistent hashing with bounded loads on dm_pick.key (balancers/hash.c). */
extern const struct dm_balancer_ops dm_bal_hash;

/* "p2c-shadow": power of two choices on the shadow cost (balancers/p2c_shadow.c). */
extern const struct dm_balancer_ops dm_bal_p2c_shadow;

/* "hybrid": split by server class capacity, then power of two (balancers/hybrid.c). */
extern const struct dm_balancer_ops dm_bal_hybrid;
extern const struct dm_balancer_ops dm_bal_age; /* "age": aged potential load (age.c) */

/* "session": Upgrade sessions placed by the session allocator, the rest leastconn (session.c). */
extern const struct dm_balancer_ops dm_bal_session;

#endif
