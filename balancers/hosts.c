#include "balancers/hosts.h"

#include <stdlib.h>
#include <string.h>

void
dm_host_init(struct dm_host *h)
{
    memset(h, 0, sizeof(*h));
    atomic_init(&h->down, false);
    atomic_init(&h->down_gen, 0);
    atomic_init(&h->health_oks, 0);
    atomic_init(&h->down_until_us, 0);
    atomic_init(&h->fails, 0);
    atomic_init(&h->power, DM_POWER_AWAKE);
    atomic_init(&h->power_since_us, 0);
    atomic_init(&h->connections, 0);
    atomic_init(&h->bound, 0);
    atomic_init(&h->inflight, 0);
    atomic_init(&h->started, 0);
    atomic_init(&h->close_idle_epoch, 0);
    atomic_init(&h->ramp_from_us, 0);
    atomic_init(&h->ramp_until_us, 0);
    atomic_init(&h->connect_us, 0);
}

bool
dm_host_is_usable(const struct dm_host *h, uint64_t now_us)
{
    if (atomic_load_explicit(&h->down, memory_order_relaxed)) {
        return false;
    }
    if (atomic_load_explicit(&h->power, memory_order_relaxed) != DM_POWER_AWAKE) {
        return false;
    }
    return atomic_load_explicit(&h->down_until_us, memory_order_relaxed) <= now_us;
}

void
dm_host_connect_sample(struct dm_host *h, uint64_t sample_us)
{
    uint64_t avg = atomic_load_explicit(&h->connect_us, memory_order_relaxed);
    /* The first sample is the average; +1 keeps a 0 us connect from meaning "none". */
    uint64_t next = avg == 0 ? sample_us + 1 : avg - avg / 8 + (sample_us + 1) / 8;
    atomic_store_explicit(&h->connect_us, next > 0 ? next : 1, memory_order_relaxed);
}

bool
dm_host_ramp_full(const struct dm_host *h, unsigned capacity, uint64_t now_us)
{
    uint64_t from = atomic_load_explicit(&h->ramp_from_us, memory_order_relaxed);
    uint64_t until = atomic_load_explicit(&h->ramp_until_us, memory_order_relaxed);
    if (from == 0 || now_us >= until || until <= from) {
        return false;
    }
    uint64_t elapsed = now_us > from ? now_us - from : 0;
    uint64_t allowed = (uint64_t)capacity * elapsed / (until - from);
    allowed = allowed > 0 ? allowed : 1;
    return atomic_load_explicit(&h->inflight, memory_order_relaxed) >= allowed;
}

struct dm_hosts *
dm_hosts_create(void)
{
    return calloc(1, sizeof(struct dm_hosts));
}

void
dm_hosts_destroy(struct dm_hosts *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->n; i++) {
        free(t->h[i]->text);
        free(t->h[i]);
    }
    free(t->h);
    free(t->slots);
    free(t);
}

bool
dm_host_addr_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family) {
        return false;
    }
    /* Field by field: the padding of a sockaddr need not be zero. */
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const struct sockaddr_in *)a;
        const struct sockaddr_in *y = (const struct sockaddr_in *)b;
        return x->sin_port == y->sin_port &&
               memcmp(&x->sin_addr, &y->sin_addr, sizeof(x->sin_addr)) == 0;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a;
        const struct sockaddr_in6 *y = (const struct sockaddr_in6 *)b;
        return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return memcmp(a, b, sizeof(*a)) == 0;
}

/* FNV-1a of n bytes into h. */
static uint64_t
fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ b[i]) * 1099511628211ull;
    }
    return h;
}

/* A hash of what dm_host_addr_equal compares: equal addresses hash alike. */
static uint64_t
addr_hash(const struct sockaddr_storage *a)
{
    uint64_t h = fnv(14695981039346656037ull, &a->ss_family, sizeof(a->ss_family));
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const struct sockaddr_in *)a;
        h = fnv(h, &x->sin_port, sizeof(x->sin_port));
        return fnv(h, &x->sin_addr, sizeof(x->sin_addr));
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a;
        h = fnv(h, &x->sin6_port, sizeof(x->sin6_port));
        h = fnv(h, &x->sin6_scope_id, sizeof(x->sin6_scope_id));
        return fnv(h, &x->sin6_addr, sizeof(x->sin6_addr));
    }
    return fnv(h, a, sizeof(*a));
}

/* The slot of sa in t's index: its entry's, or the free one it would take. */
static size_t *
hosts_slot(const struct dm_hosts *t, const struct sockaddr_storage *sa)
{
    size_t mask = t->nslots - 1;
    for (size_t i = (size_t)addr_hash(sa) & mask;; i = (i + 1) & mask) {
        size_t *slot = &t->slots[i];
        if (*slot == 0 || dm_host_addr_equal(&t->h[*slot - 1]->addr, sa)) {
            return slot;
        }
    }
}

/* Makes room in the index for one more host; false when out of memory. */
static bool
hosts_index_grow(struct dm_hosts *t)
{
    if (2 * (t->n + 1) <= t->nslots) {
        return true;
    }
    size_t nslots = t->nslots > 0 ? t->nslots * 2 : 64;
    size_t *slots = calloc(nslots, sizeof(*slots));
    if (slots == NULL) {
        return false;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = nslots;
    for (size_t i = 0; i < t->n; i++) {
        *hosts_slot(t, &t->h[i]->addr) = i + 1;
    }
    return true;
}

struct dm_host *
dm_hosts_get(struct dm_hosts *t, const struct sockaddr_storage *sa, const char *text)
{
    if (t->nslots > 0) {
        size_t *slot = hosts_slot(t, sa);
        if (*slot != 0) {
            return t->h[*slot - 1];
        }
    }
    if (!hosts_index_grow(t)) {
        return NULL;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap > 0 ? t->cap * 2 : 16;
        /* Only the array of pointers moves; the hosts stay where they are. */
        struct dm_host **h = realloc(t->h, cap * sizeof(*h));
        if (h == NULL) {
            return NULL;
        }
        t->h = h;
        t->cap = cap;
    }
    struct dm_host *host = malloc(sizeof(*host));
    if (host == NULL) {
        return NULL;
    }
    dm_host_init(host);
    size_t len = text != NULL ? strlen(text) : 0;
    host->text = malloc(len + 1);
    if (host->text == NULL) {
        free(host);
        return NULL;
    }
    memcpy(host->text, text != NULL ? text : "", len);
    host->text[len] = '\0';
    memcpy(&host->addr, sa, sizeof(host->addr));
    t->h[t->n++] = host;
    *hosts_slot(t, sa) = t->n;
    return host;
}
