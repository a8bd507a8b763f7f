/*
 * A runtime is one configuration generation made live: server tables and
 * balancers for its pools. Connections hold a reference to the runtime they
 * were accepted under, so a reload lets old connections finish on the old
 * config while new ones use the new; the last reference frees it. A server's
 * health, power state and connection counts are in its host, which outlives
 * every runtime (the process's host table), so a reload keeps them.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/balancer.h"
#include "balancers/hosts.h"
#include "conf/tls.h"
#include "proxy/internal.h"
#include "proxy/route.h"
#include "proxy/session.h"
#include "proxy/tls.h"

/* The published runtime. Its load and its reference are taken together under
 * the lock: a worker descheduled between the two, over two reloads, took a
 * reference to a runtime already freed. Taken only at a reload's wake-up and
 * by the admin, so never contended. */
static struct dm_runtime *current;
static pthread_mutex_t current_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t generations;

struct dm_runtime *
dm_runtime_create(struct dm_conf *conf, unsigned nworkers, struct dm_hosts *hosts,
                  struct dm_catalog *catalog, struct dm_placers *placers, const char **err)
{
    struct dm_runtime *rt = calloc(1, sizeof(*rt));
    if (rt == NULL) {
        *err = "out of memory";
        dm_conf_destroy(conf);
        return NULL;
    }
    atomic_init(&rt->refs, 1);
    rt->conf = conf;
    rt->nworkers = nworkers;
    rt->generation = atomic_fetch_add(&generations, 1) + 1;
    rt->catalog = catalog;
    uint32_t cap = (uint32_t)conf->limits.header_bytes + 8192;
    rt->buf_cap = cap < DM_BUF_MIN ? DM_BUF_MIN : cap;
    rt->pools = calloc(conf->npools, sizeof(*rt->pools));
    if (rt->pools == NULL || (rt->routes = dm_routes_build(conf)) == NULL) {
        goto fail;
    }
    rt->npools = conf->npools;
    for (size_t i = 0; i < conf->npools; i++) {
        const struct dm_conf_pool *pc = &conf->pools[i];
        struct dm_rpool *p = &rt->pools[i];
        p->cf = pc;
        p->sv = dm_servers_create(pc->nservers);
        if (p->sv == NULL) {
            goto fail;
        }
        for (size_t j = 0; j < pc->nservers; j++) {
            struct dm_server *s = &p->sv->s[j];
            s->name = pc->servers[j].name;
            s->weight = pc->servers[j].weight;
            s->capacity = pc->servers[j].capacity;
            p->limited = p->limited || pc->servers[j].max_conns > 0;
            if (hosts != NULL) {
                /* Same address, same host: in every pool and every generation. */
                const struct dm_conf_addr *a = &pc->servers[j].addr;
                s->host = dm_hosts_get(hosts, &a->sa, a->text);
                if (s->host == NULL) {
                    goto fail;
                }
            }
        }
        uint32_t tb = (uint32_t)((pc->nservers + 7) / 8);
        rt->tried_bytes = tb > rt->tried_bytes ? tb : rt->tried_bytes;
        rt->nlimited += p->limited;
        const struct dm_balancer_ops *ops = dm_balancer_find(pc->balance);
        struct dm_bal_conf bc = {
            .draws = pc->draws,
            .hash_balance = pc->hash.balance,
            .age_weight = pc->age.weight,
            .age_half_life_us = pc->age.half_life_ms * 1000,
        };
        p->bal = ops != NULL ? dm_balancer_create(ops, p->sv, &bc) : NULL;
        if (p->bal == NULL) {
            goto fail;
        }
        p->work = (ops->needs & (DM_BAL_NEEDS_WORK | DM_BAL_NEEDS_OBJECTS)) != 0;
        p->keyed = p->work || pc->queue_order == DM_QO_SIZE;
        p->hashing = (ops->needs & DM_BAL_NEEDS_KEY) != 0;
        p->idle =
            calloc((size_t)nworkers * (pc->nservers > 0 ? pc->nservers : 1), sizeof(*p->idle));
        p->stats =
            calloc((size_t)(nworkers > 0 ? nworkers : 1) * (pc->nservers + 1), sizeof(*p->stats));
        if (p->idle == NULL || p->stats == NULL) {
            goto fail;
        }
        if (pc->tls != NULL) {
            /* One session per server and worker: a new connection resumes the last one's. */
            p->tls_sessions = calloc((size_t)nworkers * (pc->nservers > 0 ? pc->nservers : 1),
                                     sizeof(*p->tls_sessions));
            if (p->tls_sessions == NULL) {
                goto fail;
            }
            dm_tls_client_ctx_init(pc->tls->ctx);
        }
    }
    for (size_t i = 0; i < conf->npools && placers != NULL; i++) {
        struct dm_rpool *p = &rt->pools[i];
        if (p->bal->ops->needs & DM_BAL_NEEDS_SESSIONS) {
            p->placer = dm_placers_configure(placers, p->cf, p->sv);
            if (p->placer == NULL) {
                goto fail;
            }
        }
    }
    return rt;
fail:
    *err = "out of memory";
    atomic_store(&rt->refs, 1);
    dm_runtime_unref(rt);
    return NULL;
}

void
dm_runtime_ref(struct dm_runtime *rt)
{
    atomic_fetch_add_explicit(&rt->refs, 1, memory_order_relaxed);
}

void
dm_runtime_unref(struct dm_runtime *rt)
{
    if (rt == NULL) {
        return;
    }
    /* acq_rel: the thread that frees must see every other thread's last use. */
    if (atomic_fetch_sub_explicit(&rt->refs, 1, memory_order_acq_rel) != 1) {
        return;
    }
    for (size_t i = 0; i < rt->npools && rt->pools != NULL; i++) {
        if (rt->pools[i].tls_sessions != NULL) {
            size_t ns = (size_t)rt->nworkers * rt->pools[i].sv->n;
            for (size_t j = 0; j < ns; j++) {
                SSL_SESSION_free(rt->pools[i].tls_sessions[j]);
            }
            free(rt->pools[i].tls_sessions);
        }
        dm_balancer_destroy(rt->pools[i].bal);
        dm_servers_destroy(rt->pools[i].sv);
        free(rt->pools[i].idle);
        free(rt->pools[i].stats);
    }
    free(rt->pools);
    dm_routes_free(rt->routes);
    dm_conf_destroy(rt->conf);
    free(rt);
}

struct dm_runtime *
dm_runtime_current(void)
{
    pthread_mutex_lock(&current_lock);
    struct dm_runtime *rt = current;
    if (rt != NULL) {
        dm_runtime_ref(rt);
    }
    pthread_mutex_unlock(&current_lock);
    return rt;
}

void
dm_runtime_publish(struct dm_runtime *rt)
{
    if (rt != NULL) {
        dm_runtime_ref(rt);
    }
    pthread_mutex_lock(&current_lock);
    struct dm_runtime *old = current;
    current = rt;
    pthread_mutex_unlock(&current_lock);
    dm_runtime_unref(old);
}
