/*
 * The hybrid scheme ("hybrid") for pools of a few kinds of server (DESIGN.md,
 * "Balancers from the research"): servers of equal capacity form a class; a
 * request first goes to a class by a static split, then to the better of two
 * servers drawn at random inside that class, as power of two choices does in
 * a homogeneous pool.
 *
 * The split. Class k receives the share
 *
 *     p_k = C_k / C,   C_k = total capacity of the usable servers of class k,
 *                      C   = total usable capacity of the pool,
 *
 * which maximises the stability region. Take capacity as service rate and
 * let requests arrive at rate L. Class k then sees L * p_k, and power of two
 * choices inside a class of equal servers is stable whenever that class is
 * below full load, L * p_k < C_k. The pool is stable for every
 * L < min_k C_k / p_k, and since sum_k p_k = 1, min_k C_k / p_k <= C with
 * equality only when every C_k / p_k is the same, that is p_k = C_k / C. Any
 * other split overloads some class while the pool as a whole still has room;
 * this one gives every class the same utilisation L / C, and the pool the
 * whole region L < C.
 *
 * Keeping the split current. The split must follow the usable servers: a
 * class with half its servers down must get half its share. Scanning the pool
 * at every pick is O(n), and there is no event when a health check or the
 * power manager changes a server. Instead the class is drawn through a server:
 * a server is drawn over the whole pool with probability proportional to its
 * capacity, again until it is usable and untried (balancers/sample.h). That
 * server lands in class k with probability exactly C_k / C over the usable
 * servers at this very moment, so the split is recomputed, exactly, on every
 * pick, at the cost of a draw: O(1) expected while most of the capacity is
 * usable, O(n) at worst. Inside its class the server is uniform among the
 * usable members (they have equal capacity), so it also serves as the first
 * of the two choices; the second is drawn uniformly among the other usable
 * members of the class.
 *
 * The two are compared on in-flight requests per unit of capacity; inside a
 * class the capacities are equal, so that is fewer in-flight requests. Ties go
 * to the first drawn. A class with one usable server gets it.
 */
#include "balancers/registry.h"

#include <stdint.h>
#include <stdlib.h>

#include "balancers/balancer.h"
#include "balancers/sample.h"
#include "balancers/servers.h"

struct hybrid_balancer {
    struct dm_balancer base;
    struct dm_sample by_capacity; /* every server, by capacity: draws the class */
    unsigned *class_of;           /* class of each server */
    struct dm_sample *classes;    /* the members of each class, uniform */
    size_t nclasses;
};

static unsigned
hybrid_capacity(const struct dm_server *s)
{
    return s->capacity > 0 ? s->capacity : 1;
}

struct hybrid_member {
    unsigned capacity;
    unsigned server;
};

static int
hybrid_member_cmp(const void *a, const void *b)
{
    const struct hybrid_member *x = a;
    const struct hybrid_member *y = b;
    if (x->capacity != y->capacity) {
        return x->capacity < y->capacity ? -1 : 1;
    }
    return x->server < y->server ? -1 : x->server > y->server;
}

/* Groups the servers by capacity, in increasing capacity; 0 or -ENOMEM. */
static int
hybrid_build_classes(struct hybrid_balancer *h, const struct dm_servers *sv, uint64_t *scratch)
{
    struct hybrid_member *m = calloc(sv->n, sizeof(*m));
    unsigned *members = calloc(sv->n, sizeof(*members));
    if (m == NULL || members == NULL) {
        goto fail;
    }
    for (size_t i = 0; i < sv->n; i++) {
        m[i] = (struct hybrid_member){ hybrid_capacity(&sv->s[i]), (unsigned)i };
    }
    qsort(m, sv->n, sizeof(*m), hybrid_member_cmp);
    size_t nclasses = 0;
    for (size_t i = 0; i < sv->n; i++) {
        nclasses += i == 0 || m[i].capacity != m[i - 1].capacity;
    }
    h->classes = calloc(nclasses, sizeof(*h->classes));
    if (h->classes == NULL) {
        goto fail;
    }
    h->nclasses = nclasses;
    size_t k = 0;
    for (size_t i = 0; i < sv->n;) {
        size_t j = i;
        while (j < sv->n && m[j].capacity == m[i].capacity) {
            members[j - i] = m[j].server;
            scratch[j - i] = 1;
            h->class_of[m[j].server] = (unsigned)k;
            j++;
        }
        if (dm_sample_init(&h->classes[k], members, scratch, j - i) != 0) {
            goto fail;
        }
        k++;
        i = j;
    }
    free(members);
    free(m);
    return 0;

fail:
    free(members);
    free(m);
    return -1;
}

static void
hybrid_destroy(struct dm_balancer *b)
{
    struct hybrid_balancer *h = (struct hybrid_balancer *)b;
    if (h == NULL) {
        return;
    }
    for (size_t k = 0; k < h->nclasses; k++) {
        dm_sample_fini(&h->classes[k]);
    }
    free(h->classes);
    h->classes = NULL;
    free(h->class_of);
    h->class_of = NULL;
    dm_sample_fini(&h->by_capacity);
    free(h);
}

static struct dm_balancer *
hybrid_create(const struct dm_servers *sv, const struct dm_bal_conf *cf)
{
    (void)cf;
    struct hybrid_balancer *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        return NULL;
    }
    if (sv->n == 0) {
        return &h->base;
    }
    uint64_t *scratch = calloc(sv->n, sizeof(*scratch));
    h->class_of = calloc(sv->n, sizeof(*h->class_of));
    if (scratch == NULL || h->class_of == NULL) {
        goto fail;
    }
    for (size_t i = 0; i < sv->n; i++) {
        scratch[i] = hybrid_capacity(&sv->s[i]);
    }
    if (dm_sample_init(&h->by_capacity, NULL, scratch, sv->n) != 0) {
        goto fail;
    }
    if (hybrid_build_classes(h, sv, scratch) != 0) {
        goto fail;
    }
    free(scratch);
    return &h->base;

fail:
    free(scratch);
    hybrid_destroy(&h->base);
    return NULL;
}

static int
hybrid_pick(struct dm_balancer *b, const struct dm_pick *in)
{
    struct hybrid_balancer *h = (struct hybrid_balancer *)b;
    const struct dm_servers *sv = b->sv;
    int cand[2];
    /* The class, by usable capacity, and the first choice inside it. */
    if (dm_sample_draw(&h->by_capacity, sv, in, cand, 0, 1) == 0) {
        return DM_NO_SERVER;
    }
    const struct dm_sample *cls = &h->classes[h->class_of[cand[0]]];
    if (cls->n == 1 || dm_sample_draw(cls, sv, in, cand, 1, 2) == 1) {
        return cand[0];
    }
    /* Equal capacities in a class: in-flight per capacity orders as in-flight. */
    uint64_t first = dm_counter_get(&sv->s[cand[0]].inflight);
    uint64_t second = dm_counter_get(&sv->s[cand[1]].inflight);
    return second < first ? cand[1] : cand[0];
}

const struct dm_balancer_ops dm_bal_hybrid = {
    .name = "hybrid",
    .create = hybrid_create,
    .pick = hybrid_pick,
    .destroy = hybrid_destroy,
};
