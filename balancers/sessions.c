/*
 * Live sessions over the allocator (sessions.h has the rules).
 *
 * The allocation (struct dm_alloc) holds one slot per group that has a
 * place in it, waiting or placed; a slot's struct dm_alloc_group points to
 * the group's own copy of its game's rates and to its clients' delay rows,
 * and says as many clients as the group has. A group that is refused or
 * detached gives its slot back at once (its clients still hold tickets to
 * it, and it is freed with the last of them). Waiting groups sit in the
 * allocation unplaced; nothing here ever calls the allocation-wide passes
 * (greedy, annealing) on it, so they stay so until the batch pass, which
 * solves them in an allocation of their own whose base loads are the live
 * ones, and then puts each on its server in the live allocation
 * (dm_alloc_place_on; the one that cannot go there after all, its server's
 * sum being one rounding above the pass's, is placed by the greedy rule).
 *
 * Group ids are found through a chained hash table of at least twice
 * max_groups buckets. The ids are chosen by clients, so a crafted set of
 * them could fill one chain; a chain is at most max_groups long, and a
 * lookup runs only for an Upgrade request, under the caller's lock.
 */
#include "balancers/sessions.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/alloc.h"
#include "balancers/hash.h"

enum group_state {
    G_WAITING,  /* in the allocation, unplaced, until the batch pass */
    G_PLACED,   /* in the allocation, on a server */
    G_REFUSED,  /* no slot, no id: its clients are being answered */
    G_DETACHED, /* no slot, its id kept: its server left the pool */
};

/*
 * A group's delays to one server, kept as clients join and leave, so that
 * C3 and C4 are checked in O(servers) (a scan of every client was
 * quadratic over a large group's life): the extremes of its clients within
 * dmax, how many are at each (a leave scans again only when the last at an
 * extreme goes), and how many are beyond dmax (or have no delay: NaN).
 */
struct span {
    double lo, hi;
    size_t nlo, nhi; /* 0: no client within dmax */
    size_t far;
};

struct sgroup {
    struct sgroup *prev, *next; /* the table's groups with an id or a slot */
    struct sgroup *hnext;       /* its hash chain */
    bool hashed;
    bool listed;
    uint64_t hash;
    int state; /* enum group_state */
    int refused;
    size_t slot;
    bool in_pass;      /* waiting, and taken by the batch pass that is out */
    size_t pass_index; /* then: its index in that pass */
    int server;        /* placed: its server */
    const void *home;  /* detached: the key of the server it runs on */
    size_t tier;       /* placed or detached: its rate */
    double frame_load;
    double rates[DM_SESSIONS_RATES_MAX];
    size_t nrates, want;
    struct dm_sessions_member **members;
    size_t nmembers, cap;
    double *rows;       /* cap x nservers delays */
    struct span *spans; /* nservers: its clients' delays to each server */
    size_t id_len;
    char id[DM_SESSIONS_ID_MAX];
};

struct dm_sessions_member {
    struct sgroup *g;
    size_t index; /* in g->members */
    size_t client_len;
    unsigned char client[DM_SESSIONS_CLIENT_MAX];
};

struct dm_sessions {
    struct dm_sessions_conf cf;
    struct dm_sessions_server *servers;
    size_t nservers;
    struct dm_alloc_server *asv;
    struct dm_alloc_group *groups; /* slots */
    size_t nslots;
    struct dm_alloc_problem p;
    struct dm_alloc a;
    size_t *free_slots;
    size_t nfree;
    struct sgroup **buckets;
    size_t nbuckets; /* a power of two */
    struct sgroup *list;
    size_t waiting;            /* groups waiting, in a pass or not */
    size_t untaken;            /* of them, those no pass has taken */
    bool pass_out;             /* a pass taken and not yet committed */
    uint64_t gen;              /* configurations taken: a pass of an older one is stale */
    struct dm_hash_secret key; /* of group ids: the first configuration's, for the table's life */
    uint64_t placed, lowered, refused;
};

static void *
zalloc(size_t n, size_t size)
{
    return calloc(n > 0 ? n : 1, size);
}

static bool
conf_is_valid(const struct dm_sessions_conf *cf)
{
    return cf != NULL && cf->max_groups > 0 && cf->max_groups <= INT_MAX && cf->max_members > 0 &&
           cf->dmax_ms >= 0 && cf->dvmax_ms >= 0;
}

static bool
servers_are_valid(const struct dm_sessions_server *sv, size_t n)
{
    if (n > INT_MAX || (n > 0 && sv == NULL)) {
        return false;
    }
    for (size_t s = 0; s < n; s++) {
        if (!(sv[s].capacity >= 0 && sv[s].capacity < HUGE_VAL)) {
            return false;
        }
    }
    return true;
}

/* The smallest power of two >= 2 * n. */
static size_t
buckets_for(size_t n)
{
    size_t b = 16;
    while (b < 2 * n) {
        b *= 2;
    }
    return b;
}

/* ---- the parts one configuration owns ---- */

struct parts {
    struct dm_sessions_server *servers;
    struct dm_alloc_server *asv;
    struct dm_alloc_group *groups;
    size_t *free_slots;
    struct sgroup **buckets;
    size_t nbuckets;
};

static void
parts_free(struct parts *x)
{
    free(x->servers);
    free(x->asv);
    free(x->groups);
    free(x->free_slots);
    free(x->buckets);
    *x = (struct parts){ 0 };
}

static int
parts_make(struct parts *x, const struct dm_sessions_server *sv, size_t n, size_t nslots)
{
    *x = (struct parts){ 0 };
    x->nbuckets = buckets_for(nslots);
    x->servers = zalloc(n, sizeof(*x->servers));
    x->asv = zalloc(n, sizeof(*x->asv));
    x->groups = zalloc(nslots, sizeof(*x->groups));
    x->free_slots = zalloc(nslots, sizeof(*x->free_slots));
    x->buckets = zalloc(x->nbuckets, sizeof(*x->buckets));
    if (x->servers == NULL || x->asv == NULL || x->groups == NULL || x->free_slots == NULL ||
        x->buckets == NULL) {
        parts_free(x);
        return -ENOMEM;
    }
    for (size_t s = 0; s < n; s++) {
        x->servers[s] = sv[s];
        x->asv[s] = (struct dm_alloc_server){ .capacity = sv[s].capacity };
    }
    return 0;
}

/* Moves x into t (which must hold none), with an empty allocation made on them. */
static int
parts_take(struct dm_sessions *t, struct parts *x, size_t n, size_t nslots)
{
    struct dm_alloc_problem p = {
        .servers = x->asv,
        .nservers = n,
        .groups = x->groups,
        .ngroups = nslots,
        .dmax_ms = t->cf.dmax_ms,
        .dvmax_ms = t->cf.dvmax_ms,
    };
    t->p = p;
    int rc = dm_alloc_init(&t->a, &t->p, nslots);
    if (rc < 0) {
        return rc;
    }
    t->servers = x->servers;
    t->asv = x->asv;
    t->groups = x->groups;
    t->free_slots = x->free_slots;
    t->buckets = x->buckets;
    t->nbuckets = x->nbuckets;
    t->nservers = n;
    t->nslots = nslots;
    t->p.servers = t->asv;
    t->p.groups = t->groups;
    *x = (struct parts){ 0 };
    return 0;
}

/* ---- groups ---- */

static void
list_add(struct dm_sessions *t, struct sgroup *g)
{
    g->prev = NULL;
    g->next = t->list;
    if (t->list != NULL) {
        t->list->prev = g;
    }
    t->list = g;
    g->listed = true;
}

static void
list_remove(struct dm_sessions *t, struct sgroup *g)
{
    if (!g->listed) {
        return;
    }
    if (g->prev != NULL) {
        g->prev->next = g->next;
    } else {
        t->list = g->next;
    }
    if (g->next != NULL) {
        g->next->prev = g->prev;
    }
    g->prev = g->next = NULL;
    g->listed = false;
}

static void
hash_link(struct dm_sessions *t, struct sgroup *g)
{
    if (g->id_len == 0) {
        return; /* a group of its own: nobody can join it */
    }
    size_t b = (size_t)g->hash & (t->nbuckets - 1);
    g->hnext = t->buckets[b];
    t->buckets[b] = g;
    g->hashed = true;
}

static void
hash_unlink(struct dm_sessions *t, struct sgroup *g)
{
    if (!g->hashed) {
        return;
    }
    struct sgroup **pp = &t->buckets[(size_t)g->hash & (t->nbuckets - 1)];
    while (*pp != g) {
        pp = &(*pp)->hnext;
    }
    *pp = g->hnext;
    g->hnext = NULL;
    g->hashed = false;
}

static struct sgroup *
hash_find(const struct dm_sessions *t, const char *id, size_t len, uint64_t h)
{
    for (struct sgroup *g = t->buckets[(size_t)h & (t->nbuckets - 1)]; g != NULL; g = g->hnext) {
        if (g->hash == h && g->id_len == len && memcmp(g->id, id, len) == 0) {
            return g;
        }
    }
    return NULL;
}

/* The slot's view of g: what the allocation reads. */
static void
slot_sync(struct dm_sessions *t, const struct sgroup *g)
{
    t->groups[g->slot] = (struct dm_alloc_group){
        .frame_load = g->frame_load,
        .rates = g->rates,
        .nrates = g->nrates,
        .want = g->want,
        .nclients = g->nmembers,
        .delay_ms = g->rows,
    };
}

/* Gives g's slot back (g off its server first). */
static void
slot_release(struct dm_sessions *t, struct sgroup *g)
{
    t->groups[g->slot] = (struct dm_alloc_group){ 0 };
    t->free_slots[t->nfree++] = g->slot;
    g->slot = SIZE_MAX;
}

static void
group_free(struct sgroup *g)
{
    free(g->members);
    free(g->rows);
    free(g->spans);
    free(g);
}

/* Room for one more member (and its delay row). */
static int
group_reserve(struct sgroup *g, size_t nservers)
{
    if (g->nmembers < g->cap) {
        return 0;
    }
    size_t cap = g->cap > 0 ? 2 * g->cap : 2;
    struct dm_sessions_member **m = realloc(g->members, cap * sizeof(*m));
    if (m == NULL) {
        return -ENOMEM;
    }
    g->members = m;
    double *rows = realloc(g->rows, (cap * nservers > 0 ? cap * nservers : 1) * sizeof(*rows));
    if (rows == NULL) {
        return -ENOMEM;
    }
    g->rows = rows;
    g->cap = cap;
    return 0;
}

/* Appends m with its delays (room reserved). */
static void
group_push(struct dm_sessions *t, struct sgroup *g, struct dm_sessions_member *m,
           const double *delay_ms)
{
    m->g = g;
    m->index = g->nmembers;
    g->members[g->nmembers] = m;
    if (t->nservers > 0) {
        memcpy(&g->rows[g->nmembers * t->nservers], delay_ms, t->nservers * sizeof(double));
    }
    g->nmembers++;
}

/*
 * Takes m out of g, the last member moving into its place; with rows, its
 * row and m's trade places, so m's is at g->nmembers after. A refused
 * group's rows are left alone: it is on no list, so a reconfiguration did
 * not rebuild them, and nobody reads them again.
 */
static void
group_drop(struct dm_sessions *t, struct sgroup *g, struct dm_sessions_member *m, bool rows)
{
    size_t i = m->index, last = g->nmembers - 1, n = t->nservers;
    if (i != last) {
        g->members[i] = g->members[last];
        g->members[i]->index = i;
        for (size_t s = 0; rows && s < n; s++) {
            double d = g->rows[i * n + s];
            g->rows[i * n + s] = g->rows[last * n + s];
            g->rows[last * n + s] = d;
        }
    }
    g->nmembers--;
    m->g = NULL;
}

/* ---- spans ---- */

static bool
within_dmax(const struct dm_sessions *t, double d)
{
    return d <= t->cf.dmax_ms; /* false for NaN */
}

static void
span_add(const struct dm_sessions *t, struct span *sp, double d)
{
    if (!within_dmax(t, d)) {
        sp->far++;
        return;
    }
    if (sp->nlo == 0 || d < sp->lo) {
        sp->lo = d;
        sp->nlo = 1;
    } else if (d == sp->lo) {
        sp->nlo++;
    }
    if (sp->nhi == 0 || d > sp->hi) {
        sp->hi = d;
        sp->nhi = 1;
    } else if (d == sp->hi) {
        sp->nhi++;
    }
}

/* g's span to server s from its clients' rows. */
static void
span_scan(const struct dm_sessions *t, struct sgroup *g, size_t s)
{
    struct span *sp = &g->spans[s];
    *sp = (struct span){ 0 };
    for (size_t i = 0; i < g->nmembers; i++) {
        span_add(t, sp, g->rows[i * t->nservers + s]);
    }
}

static void
spans_scan(const struct dm_sessions *t, struct sgroup *g)
{
    for (size_t s = 0; s < t->nservers; s++) {
        span_scan(t, g, s);
    }
}

/* A client at d left g (its row is gone from the first nmembers). */
static void
span_remove(const struct dm_sessions *t, struct sgroup *g, size_t s, double d)
{
    struct span *sp = &g->spans[s];
    if (!within_dmax(t, d)) {
        sp->far--;
        return;
    }
    bool lost_lo = d == sp->lo && --sp->nlo == 0;
    bool lost_hi = d == sp->hi && --sp->nhi == 0; /* both when lo == hi == d */
    if (lost_lo || lost_hi) {
        span_scan(t, g, s);
    }
}

/* Whether C3 and C4 hold on server s for g with one more client at d. */
static bool
span_takes(const struct dm_sessions *t, const struct sgroup *g, size_t s, double d)
{
    const struct span *sp = &g->spans[s];
    if (sp->far > 0 || !within_dmax(t, d)) {
        return false;
    }
    double lo = sp->nlo > 0 && sp->lo < d ? sp->lo : d;
    double hi = sp->nhi > 0 && sp->hi > d ? sp->hi : d;
    return hi - lo <= t->cf.dvmax_ms;
}

static void
fill_place(const struct sgroup *g, struct dm_sessions_place *pl)
{
    if (pl != NULL) {
        *pl = (struct dm_sessions_place){
            .server = g->server,
            .tier = g->tier,
            .rate = g->rates[g->tier],
            .lowered = g->tier < g->want,
        };
    }
}

/*
 * The greedy rule for g, in its slot: the least loaded server where it fits
 * at its request, else at the highest lower rate that fits anywhere.
 */
static int
place_now(struct dm_sessions *t, struct sgroup *g)
{
    for (size_t tier = g->want + 1; tier-- > 0;) {
        int s = dm_alloc_place(&t->a, g->slot, tier);
        if (s >= 0) {
            g->server = s;
            g->tier = tier;
            return s;
        }
        if (s != -ENOSPC) {
            return s;
        }
    }
    return -ENOSPC;
}

static void
count_placed(struct dm_sessions *t, const struct sgroup *g)
{
    t->placed++;
    t->lowered += g->tier < g->want;
}

/* ---- the table ---- */

struct dm_sessions *
dm_sessions_create(const struct dm_sessions_conf *cf, const struct dm_sessions_server *sv, size_t n)
{
    if (!conf_is_valid(cf) || !servers_are_valid(sv, n)) {
        return NULL;
    }
    struct dm_sessions *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return NULL;
    }
    t->cf = *cf;
    t->key = cf->key;
    struct parts x;
    if (parts_make(&x, sv, n, cf->max_groups) < 0) {
        free(t);
        return NULL;
    }
    if (parts_take(t, &x, n, cf->max_groups) < 0) {
        parts_free(&x);
        free(t);
        return NULL;
    }
    for (size_t i = 0; i < t->nslots; i++) {
        t->free_slots[t->nfree++] = t->nslots - 1 - i; /* the lowest slot first */
    }
    return t;
}

void
dm_sessions_destroy(struct dm_sessions *t)
{
    if (t == NULL) {
        return;
    }
    /* Refused groups are on no list: they are reached through their members,
     * which only their callers hold; a table destroyed with tickets out
     * frees what it can reach. */
    struct sgroup *g = t->list;
    while (g != NULL) {
        struct sgroup *next = g->next;
        for (size_t i = 0; i < g->nmembers; i++) {
            free(g->members[i]);
        }
        group_free(g);
        g = next;
    }
    dm_alloc_fini(&t->a);
    free(t->servers);
    free(t->asv);
    free(t->groups);
    free(t->free_slots);
    free(t->buckets);
    free(t);
}

static bool
ask_is_valid(const struct dm_sessions *t, const struct dm_sessions_ask *ask)
{
    if (ask == NULL || ask->group_len > DM_SESSIONS_ID_MAX ||
        (ask->group_len > 0 && ask->group == NULL) || ask->client_len > DM_SESSIONS_CLIENT_MAX ||
        (ask->client_len > 0 && ask->client == NULL) || ask->rates == NULL || ask->nrates == 0 ||
        ask->nrates > DM_SESSIONS_RATES_MAX || ask->want >= ask->nrates ||
        !(ask->frame_load >= 0 && ask->frame_load < HUGE_VAL) ||
        (t->nservers > 0 && ask->delay_ms == NULL)) {
        return false;
    }
    for (size_t i = 0; i < ask->nrates; i++) {
        double r = ask->rates[i];
        if (!(r > 0 && r < HUGE_VAL) || (i > 0 && !(r > ask->rates[i - 1]))) {
            return false;
        }
    }
    return true;
}

static struct dm_sessions_member *
member_new(const struct dm_sessions_ask *ask)
{
    struct dm_sessions_member *m = calloc(1, sizeof(*m));
    if (m != NULL && ask->client_len > 0) {
        memcpy(m->client, ask->client, ask->client_len);
        m->client_len = ask->client_len;
    }
    return m;
}

/* A later client of existing group g. */
static int
join_group(struct dm_sessions *t, struct sgroup *g, const struct dm_sessions_ask *ask,
           struct dm_sessions_member **out, struct dm_sessions_place *pl)
{
    if (g->state == G_DETACHED) {
        return -ENXIO;
    }
    if (g->nmembers >= t->cf.max_members) {
        return -EMLINK;
    }
    /* Placed: C3 and C4 on its server. Waiting: on some server, or the one
     * out of reach would have the whole group refused at the batch pass. */
    const double *d = ask->delay_ms;
    bool takes = false;
    if (g->state == G_PLACED) {
        takes = span_takes(t, g, (size_t)g->server, d[g->server]);
    }
    for (size_t s = 0; g->state == G_WAITING && !takes && s < t->nservers; s++) {
        takes = span_takes(t, g, s, d[s]);
    }
    if (!takes) {
        fill_place(g, pl);
        return -ERANGE;
    }
    struct dm_sessions_member *m = member_new(ask);
    if (m == NULL || group_reserve(g, t->nservers) < 0) {
        free(m);
        return -ENOMEM;
    }
    group_push(t, g, m, d);
    for (size_t s = 0; s < t->nservers; s++) {
        span_add(t, &g->spans[s], d[s]);
    }
    slot_sync(t, g);
    *out = m;
    if (g->state == G_WAITING) {
        return DM_SESSIONS_WAITING;
    }
    fill_place(g, pl);
    return DM_SESSIONS_PLACED;
}

int
dm_sessions_join(struct dm_sessions *t, const struct dm_sessions_ask *ask,
                 struct dm_sessions_member **out, struct dm_sessions_place *pl)
{
    if (t == NULL || out == NULL || !ask_is_valid(t, ask)) {
        return -EINVAL;
    }
    size_t len = ask->group != NULL ? ask->group_len : 0;
    uint64_t h = dm_hash_keyed(&t->key, ask->group, len);
    if (len > 0) {
        struct sgroup *g = hash_find(t, ask->group, len, h);
        if (g != NULL) {
            return join_group(t, g, ask, out, pl);
        }
    }
    /* The table keeps a slot for every group a reload found running, so
     * it may have more than max_groups: a new group comes in only below
     * the limit of the configuration now. */
    if (t->nfree == 0 || t->nslots - t->nfree >= t->cf.max_groups) {
        return -EUSERS;
    }
    struct sgroup *g = calloc(1, sizeof(*g));
    struct dm_sessions_member *m = member_new(ask);
    if (g == NULL || m == NULL || group_reserve(g, t->nservers) < 0 ||
        (g->spans = zalloc(t->nservers, sizeof(*g->spans))) == NULL) {
        if (g != NULL) {
            group_free(g);
        }
        free(m);
        return -ENOMEM;
    }
    if (len > 0) {
        memcpy(g->id, ask->group, len);
    }
    g->id_len = len;
    g->hash = h;
    g->frame_load = ask->frame_load;
    memcpy(g->rates, ask->rates, ask->nrates * sizeof(double));
    g->nrates = ask->nrates;
    g->want = ask->want;
    g->server = DM_ALLOC_NONE;
    g->tier = ask->want;
    group_push(t, g, m, ask->delay_ms);
    spans_scan(t, g);
    g->slot = t->free_slots[--t->nfree];
    slot_sync(t, g);
    if (t->cf.batch) {
        g->state = G_WAITING;
        t->waiting++;
        t->untaken++;
    } else {
        int s = place_now(t, g);
        if (s < 0) {
            slot_release(t, g);
            group_free(g);
            free(m);
            t->refused += s == -ENOSPC;
            return s;
        }
        g->state = G_PLACED;
        count_placed(t, g);
        fill_place(g, pl);
    }
    hash_link(t, g);
    list_add(t, g);
    *out = m;
    return g->state == G_PLACED ? DM_SESSIONS_PLACED : DM_SESSIONS_WAITING;
}

int
dm_sessions_status(const struct dm_sessions *t, const struct dm_sessions_member *m,
                   struct dm_sessions_place *pl)
{
    (void)t;
    if (m == NULL || m->g == NULL) {
        return -EINVAL;
    }
    const struct sgroup *g = m->g;
    switch (g->state) {
    case G_PLACED:
        fill_place(g, pl);
        return DM_SESSIONS_PLACED;
    case G_WAITING:
        return DM_SESSIONS_WAITING;
    case G_DETACHED:
        return -ENXIO;
    default:
        return g->refused;
    }
}

void
dm_sessions_leave(struct dm_sessions *t, struct dm_sessions_member *m)
{
    if (m == NULL || m->g == NULL) {
        free(m);
        return;
    }
    struct sgroup *g = m->g;
    bool rows = g->state != G_REFUSED;
    group_drop(t, g, m, rows);
    free(m);
    if (rows && g->nmembers > 0) {
        const double *gone = &g->rows[g->nmembers * t->nservers];
        for (size_t s = 0; s < t->nservers; s++) {
            span_remove(t, g, s, gone[s]);
        }
    }
    bool in_alloc = g->state == G_WAITING || g->state == G_PLACED;
    if (g->nmembers > 0) {
        if (in_alloc) {
            slot_sync(t, g); /* fewer clients: the limits hold */
        }
        return;
    }
    if (g->state == G_PLACED) {
        dm_alloc_remove(&t->a, g->slot); /* its load leaves the server */
    } else if (g->state == G_WAITING) {
        t->waiting--;
        t->untaken -= !g->in_pass;
    }
    if (in_alloc) {
        slot_release(t, g);
    }
    hash_unlink(t, g);
    list_remove(t, g);
    group_free(g);
}

/* The batch pass could not place g: its clients are answered, its id is free. */
static void
refuse(struct dm_sessions *t, struct sgroup *g, int why)
{
    g->state = G_REFUSED;
    g->refused = why;
    slot_release(t, g);
    hash_unlink(t, g);
    list_remove(t, g);
    t->refused++;
}

/* A batch pass: copies of everything its solve reads, so that it runs without the table. */
struct dm_sessions_pass {
    uint64_t gen;
    struct dm_alloc_server *sv;
    struct dm_alloc_group *gr;
    double *rates; /* ngroups x DM_SESSIONS_RATES_MAX */
    double *rows;  /* every group's delay rows, back to back */
    struct dm_alloc_problem p;
    struct dm_alloc_conf solve;
    struct dm_alloc sa;
    bool solved;
};

void
dm_sessions_pass_free(struct dm_sessions_pass *p)
{
    if (p == NULL) {
        return;
    }
    dm_alloc_fini(&p->sa);
    free(p->sv);
    free(p->gr);
    free(p->rates);
    free(p->rows);
    free(p);
}

int
dm_sessions_pass_take(struct dm_sessions *t, struct dm_sessions_pass **out)
{
    *out = NULL;
    if (t->pass_out) {
        return -EBUSY;
    }
    size_t w = t->waiting, m = t->nservers, nrows = 0;
    if (w == 0) {
        return 0;
    }
    for (struct sgroup *g = t->list; g != NULL; g = g->next) {
        nrows += g->state == G_WAITING ? g->nmembers : 0;
    }
    struct dm_sessions_pass *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return -ENOMEM;
    }
    p->sv = zalloc(m, sizeof(*p->sv));
    p->gr = zalloc(w, sizeof(*p->gr));
    p->rates = zalloc(w * DM_SESSIONS_RATES_MAX, sizeof(double));
    p->rows = zalloc(nrows * m, sizeof(double));
    if (p->sv == NULL || p->gr == NULL || p->rates == NULL || p->rows == NULL) {
        dm_sessions_pass_free(p);
        return -ENOMEM;
    }
    /* What the running groups leave of each server is the pass's room. */
    for (size_t s = 0; s < m; s++) {
        p->sv[s] =
            (struct dm_alloc_server){ .capacity = t->asv[s].capacity, .base_load = t->a.load[s] };
    }
    size_t k = 0;
    double *row = p->rows;
    for (struct sgroup *g = t->list; g != NULL; g = g->next) {
        if (g->state != G_WAITING) {
            continue;
        }
        const struct dm_alloc_group *src = &t->groups[g->slot];
        double *rates = &p->rates[k * DM_SESSIONS_RATES_MAX];
        memcpy(rates, src->rates, src->nrates * sizeof(double));
        if (src->nclients * m > 0) {
            memcpy(row, src->delay_ms, src->nclients * m * sizeof(double));
        }
        p->gr[k] = *src;
        p->gr[k].rates = rates;
        p->gr[k].delay_ms = row;
        row += src->nclients * m;
        g->in_pass = true;
        g->pass_index = k++;
    }
    p->p = (struct dm_alloc_problem){
        .servers = p->sv,
        .nservers = m,
        .groups = p->gr,
        .ngroups = w,
        .dmax_ms = t->cf.dmax_ms,
        .dvmax_ms = t->cf.dvmax_ms,
    };
    p->gen = t->gen;
    p->solve = t->cf.solve;
    t->untaken = 0;
    t->pass_out = true;
    *out = p;
    return (int)w;
}

int
dm_sessions_pass_solve(struct dm_sessions_pass *p, struct dm_rng *rng)
{
    int rc = dm_alloc_init(&p->sa, &p->p, p->p.ngroups);
    if (rc == 0) {
        rc = dm_alloc_solve(&p->sa, &p->solve, rng);
    }
    p->solved = rc >= 0;
    return rc >= 0         ? 0
           : rc == -EINVAL ? -ENOMEM
                           : rc; /* the groups were checked at their arrival */
}

int
dm_sessions_pass_commit(struct dm_sessions *t, struct dm_sessions_pass *p)
{
    bool apply = p->solved && p->gen == t->gen;
    struct sgroup **gs = apply ? zalloc(p->p.ngroups, sizeof(*gs)) : NULL;
    apply = apply && gs != NULL;
    /* The pass's groups that still wait, by their index in it; the others
     * left (their last client went) while it was solved. */
    for (struct sgroup *g = t->list; g != NULL; g = g->next) {
        if (g->state != G_WAITING || !g->in_pass) {
            continue;
        }
        g->in_pass = false;
        if (apply) {
            gs[g->pass_index] = g;
        } else {
            t->untaken++; /* they wait for the next pass */
        }
    }
    t->pass_out = false;
    if (!apply) {
        return p->solved && p->gen != t->gen ? -ESTALE : -ENOMEM;
    }
    int decided = 0;
    for (size_t k = 0; k < p->p.ngroups; k++) {
        struct sgroup *g = gs[k];
        if (g == NULL) {
            continue;
        }
        /* The table moved on while the pass was solved (clients joined its
         * groups, groups left their servers): its answer is checked again
         * against the table, and the greedy rule has the last word. */
        int s = p->sa.server[k];
        int got =
            s != DM_ALLOC_NONE ? dm_alloc_place_on(&t->a, g->slot, p->sa.tier[k], s) : -ENOSPC;
        if (got >= 0) {
            g->server = got;
            g->tier = p->sa.tier[k];
        } else if (s != DM_ALLOC_NONE) {
            got = place_now(t, g);
        }
        t->waiting--;
        decided++;
        if (got < 0) {
            refuse(t, g, -ENOSPC);
            continue;
        }
        g->state = G_PLACED;
        count_placed(t, g);
    }
    free(gs);
    return decided;
}

int
dm_sessions_batch(struct dm_sessions *t, struct dm_rng *rng)
{
    struct dm_sessions_pass *p;
    int rc = dm_sessions_pass_take(t, &p);
    if (rc <= 0) {
        return rc;
    }
    rc = dm_sessions_pass_solve(p, rng);
    int decided = dm_sessions_pass_commit(t, p);
    dm_sessions_pass_free(p);
    return rc < 0 ? rc : decided;
}

size_t
dm_sessions_waiting(const struct dm_sessions *t)
{
    return t->waiting;
}

size_t
dm_sessions_untaken(const struct dm_sessions *t)
{
    return t->untaken;
}

size_t
dm_sessions_nservers(const struct dm_sessions *t)
{
    return t->nservers;
}

/* The index of the server of key among sv[0..n), DM_ALLOC_NONE when none. */
static int
key_index(const struct dm_sessions_server *sv, size_t n, const void *key)
{
    for (size_t j = 0; j < n; j++) {
        if (sv[j].key == key) {
            return (int)j;
        }
    }
    return DM_ALLOC_NONE;
}

/* Whether g takes a slot of the allocation for servers sv: waiting, placed,
 * or detached from a server that sv has again. */
static bool
in_allocation(const struct sgroup *g, const struct dm_sessions_server *sv, size_t n)
{
    return g->state == G_WAITING || g->state == G_PLACED ||
           (g->state == G_DETACHED && key_index(sv, n, g->home) != DM_ALLOC_NONE);
}

int
dm_sessions_configure(struct dm_sessions *t, const struct dm_sessions_conf *cf,
                      const struct dm_sessions_server *sv, size_t n, dm_sessions_row_cb row,
                      void *arg)
{
    if (!conf_is_valid(cf) || !servers_are_valid(sv, n) || row == NULL) {
        return -EINVAL;
    }
    size_t live = 0, listed = 0;
    for (struct sgroup *g = t->list; g != NULL; g = g->next) {
        live += in_allocation(g, sv, n);
        listed++;
    }
    size_t nslots = cf->max_groups > live ? cf->max_groups : live;
    struct parts x;
    if (parts_make(&x, sv, n, nslots) < 0) {
        return -ENOMEM;
    }
    /* Every new delay row first, of every group (one detached still has
     * members that join and leave, rows n wide): past this loop nothing can
     * fail. */
    double **rows = zalloc(listed, sizeof(*rows));
    struct span **spans = zalloc(listed, sizeof(*spans));
    int rc = rows != NULL && spans != NULL ? 0 : -ENOMEM;
    size_t k = 0;
    for (struct sgroup *g = t->list; g != NULL && rc == 0; g = g->next) {
        double *r = zalloc(g->cap * n, sizeof(*r));
        struct span *sp = zalloc(n, sizeof(*sp));
        if (r == NULL || sp == NULL) {
            free(r);
            free(sp);
            rc = -ENOMEM;
            break;
        }
        spans[k] = sp;
        for (size_t i = 0; i < g->nmembers; i++) {
            const struct dm_sessions_member *m = g->members[i];
            row(arg, m->client, m->client_len, &r[i * n]);
        }
        rows[k++] = r;
    }
    struct dm_sessions old = *t;
    if (rc == 0) {
        t->cf = *cf;
        t->a = (struct dm_alloc){ 0 };
        rc = parts_take(t, &x, n, nslots);
        if (rc < 0) {
            *t = old;
        }
    }
    if (rc < 0) {
        for (size_t i = 0; i < k; i++) {
            free(rows[i]);
            free(spans[i]);
        }
        free(rows);
        free(spans);
        parts_free(&x);
        return rc;
    }
    /* Commit: each group to a slot of the new allocation, its server by key. */
    t->nfree = 0;
    k = 0;
    size_t slot = 0;
    for (struct sgroup *g = t->list; g != NULL; g = g->next) {
        free(g->rows);
        free(g->spans);
        g->rows = rows[k];
        g->spans = spans[k++];
        spans_scan(t, g); /* new delays, dmax and dvmax */
        if (!in_allocation(g, sv, n)) {
            continue;
        }
        g->slot = slot++;
        if (g->state == G_DETACHED) {
            /* Its server is back: the group, still running there, counts on it again. */
            g->state = G_PLACED;
            g->server = key_index(sv, n, g->home);
            g->home = NULL;
            slot_sync(t, g);
            g->server = dm_alloc_put(&t->a, g->slot, g->tier, g->server);
            continue;
        }
        slot_sync(t, g);
        if (g->state != G_PLACED) {
            continue;
        }
        const void *key = old.servers[g->server].key;
        int s = key_index(sv, n, key);
        if (s != DM_ALLOC_NONE) {
            /* Running: it stays, whatever the new capacity says. */
            g->server = dm_alloc_put(&t->a, g->slot, g->tier, s);
        } else {
            g->state = G_DETACHED;
            g->home = key;
            g->server = DM_ALLOC_NONE;
            t->groups[g->slot] = (struct dm_alloc_group){ 0 };
            g->slot = SIZE_MAX;
        }
    }
    for (size_t i = nslots; i-- > 0;) {
        if (t->groups[i].nclients == 0) {
            t->free_slots[t->nfree++] = i;
        }
    }
    for (struct sgroup *g = t->list; g != NULL; g = g->next) {
        g->hashed = false;
        g->hnext = NULL;
        hash_link(t, g);
    }
    free(rows);
    free(spans);
    dm_alloc_fini(&old.a);
    free(old.servers);
    free(old.asv);
    free(old.groups);
    free(old.free_slots);
    free(old.buckets);
    t->gen++;
    return 0;
}

void
dm_sessions_stats(const struct dm_sessions *t, struct dm_sessions_stats *st,
                  struct dm_sessions_server_stats *per, size_t n)
{
    *st = (struct dm_sessions_stats){
        .waiting = t->waiting,
        .solving = t->waiting - t->untaken,
        .lbf = dm_alloc_lbf(&t->a),
        .placed = t->placed,
        .lowered = t->lowered,
        .refused = t->refused,
    };
    for (size_t s = 0; per != NULL && s < n; s++) {
        per[s] = (struct dm_sessions_server_stats){ 0 };
        if (s < t->nservers) {
            per[s].load = t->a.load[s];
            per[s].capacity = t->asv[s].capacity;
        }
    }
    for (const struct sgroup *g = t->list; g != NULL; g = g->next) {
        if (g->state == G_DETACHED) {
            st->detached++;
        }
        if (g->state != G_PLACED) {
            continue;
        }
        st->groups++;
        st->members += g->nmembers;
        if (per != NULL && (size_t)g->server < n) {
            per[g->server].groups++;
            per[g->server].members += g->nmembers;
        }
    }
}
