#include "bench/sim/server.h"

#include <stdlib.h>
#include <string.h>

int
dm_sim_srv_init(struct dm_sim_srv *srv, enum dm_sim_disc disc, double speed, unsigned slots,
                dm_sim_done_cb done, void *owner)
{
    memset(srv, 0, sizeof(*srv));
    srv->disc = disc;
    srv->speed = speed;
    srv->slots = slots ? slots : 1;
    srv->done = done;
    srv->owner = owner;
    return 0;
}

void
dm_sim_srv_fini(struct dm_sim_srv *srv)
{
    free(srv->_svc);
    free(srv->_wait);
    free(srv->_kw.a);
    free(srv->_kl.a);
    srv->_svc = NULL;
    srv->_wait = NULL;
    srv->_kw = srv->_kl = (struct dm_sim_heap){ 0 };
}

void
dm_sim_srv_keyed(struct dm_sim_srv *srv)
{
    srv->keyed = true;
}

/* The rate of each job in service. */
static double
rate(const struct dm_sim_srv *srv)
{
    if (srv->_nsvc == 0) {
        return 0;
    }
    if (srv->disc == DM_SIM_FIFO || srv->_nsvc <= srv->slots) {
        return srv->speed / srv->slots;
    }
    return srv->speed / (double)srv->_nsvc;
}

double
dm_sim_srv_util(const struct dm_sim_srv *srv)
{
    size_t busy = srv->_nsvc < srv->slots ? srv->_nsvc : srv->slots;
    return (double)busy / srv->slots;
}

/* Brings the virtual time and the busy integral up to now. */
static void
advance(const struct dm_sim *sim, struct dm_sim_srv *srv)
{
    double dt = sim->now - srv->_v_at;
    if (dt > 0) {
        srv->_v += rate(srv) * dt;
        srv->_busy += dm_sim_srv_util(srv) * dt;
    }
    srv->_v_at = sim->now;
    srv->_busy_at = sim->now;
}

double
dm_sim_srv_busy(const struct dm_sim *sim, const struct dm_sim_srv *srv)
{
    double dt = sim->now - srv->_busy_at;
    return srv->_busy + (dt > 0 ? dm_sim_srv_util(srv) * dt : 0);
}

/* The virtual time at sim->now, without moving the server's own. */
static double
virtual_now(const struct dm_sim *sim, const struct dm_sim_srv *srv)
{
    double dt = sim->now - srv->_v_at;
    return srv->_v + (dt > 0 ? rate(srv) * dt : 0);
}

double
dm_sim_srv_left(const struct dm_sim *sim, const struct dm_sim_srv *srv,
                const struct dm_sim_job *job)
{
    if (job->_waiting) {
        return job->size;
    }
    double left = job->_tag - virtual_now(sim, srv);
    return left > 0 ? left : 0;
}

double
dm_sim_srv_backlog(const struct dm_sim *sim, const struct dm_sim_srv *srv)
{
    double v = virtual_now(sim, srv);
    double sum = 0;
    for (size_t i = 0; i < srv->_nsvc; i++) {
        double left = srv->_svc[i]->_tag - v;
        sum += left > 0 ? left : 0;
    }
    for (size_t i = 0; i < srv->_nwait; i++) {
        sum += srv->_wait[(srv->_whead + i) % srv->_capwait]->size;
    }
    for (size_t i = 0; i < srv->_kw.n; i++) {
        sum += srv->_kw.a[i]->size;
    }
    for (size_t i = 0; i < srv->_kl.n; i++) {
        sum += srv->_kl.a[i]->size;
    }
    return sum;
}

bool
dm_sim_srv_failed(const struct dm_sim_srv *srv)
{
    return srv->_oom;
}

/* ---- the service heap, by finish tag ---- */

static void
svc_set(struct dm_sim_srv *srv, size_t i, struct dm_sim_job *j)
{
    srv->_svc[i] = j;
    j->_pos = i;
}

static void
svc_up(struct dm_sim_srv *srv, size_t i)
{
    struct dm_sim_job *j = srv->_svc[i];
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (srv->_svc[up]->_tag <= j->_tag) {
            break;
        }
        svc_set(srv, i, srv->_svc[up]);
        i = up;
    }
    svc_set(srv, i, j);
}

static void
svc_down(struct dm_sim_srv *srv, size_t i)
{
    size_t n = srv->_nsvc;
    struct dm_sim_job *j = srv->_svc[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && srv->_svc[c + 1]->_tag < srv->_svc[c]->_tag) {
            c++;
        }
        if (srv->_svc[c]->_tag >= j->_tag) {
            break;
        }
        svc_set(srv, i, srv->_svc[c]);
        i = c;
    }
    svc_set(srv, i, j);
}

static bool
svc_push(struct dm_sim_srv *srv, struct dm_sim_job *j)
{
    if (srv->_nsvc == srv->_capsvc) {
        size_t cap = srv->_capsvc ? srv->_capsvc * 2 : 16;
        struct dm_sim_job **a = realloc(srv->_svc, cap * sizeof(*a));
        if (a == NULL) {
            srv->_oom = true;
            return false;
        }
        srv->_svc = a;
        srv->_capsvc = cap;
    }
    j->_tag = srv->_v + j->size;
    j->_waiting = false;
    srv->_svc[srv->_nsvc++] = j;
    svc_up(srv, srv->_nsvc - 1);
    return true;
}

static struct dm_sim_job *
svc_pop(struct dm_sim_srv *srv)
{
    struct dm_sim_job *top = srv->_svc[0];
    srv->_nsvc--;
    if (srv->_nsvc > 0) {
        svc_set(srv, 0, srv->_svc[srv->_nsvc]);
        svc_down(srv, 0);
    }
    return top;
}

/* ---- the keyed wait heaps, by key, then turn ---- */

static bool
key_less(const struct dm_sim_job *a, const struct dm_sim_job *b)
{
    return a->key < b->key || (a->key == b->key && a->_seq < b->_seq);
}

static bool
heap_push(struct dm_sim_srv *srv, struct dm_sim_heap *h, struct dm_sim_job *j)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        struct dm_sim_job **a = realloc(h->a, cap * sizeof(*a));
        if (a == NULL) {
            srv->_oom = true;
            return false;
        }
        h->a = a;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && key_less(j, h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = j;
    j->_waiting = true;
    return true;
}

static struct dm_sim_job *
heap_pop(struct dm_sim_heap *h)
{
    struct dm_sim_job *top = h->a[0], *last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) {
            break;
        }
        if (c + 1 < h->n && key_less(h->a[c + 1], h->a[c])) {
            c++;
        }
        if (!key_less(h->a[c], last)) {
            break;
        }
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n > 0) {
        h->a[i] = last;
    }
    return top;
}

static bool
wait_push(struct dm_sim_srv *srv, struct dm_sim_job *j)
{
    if (srv->keyed) {
        j->_seq = srv->_kseq++;
        return heap_push(srv, &srv->_kw, j);
    }
    if (srv->_nwait == srv->_capwait) {
        size_t cap = srv->_capwait ? srv->_capwait * 2 : 16;
        struct dm_sim_job **a = malloc(cap * sizeof(*a));
        if (a == NULL) {
            srv->_oom = true;
            return false;
        }
        for (size_t i = 0; i < srv->_nwait; i++) {
            a[i] = srv->_wait[(srv->_whead + i) % srv->_capwait];
        }
        free(srv->_wait);
        srv->_wait = a;
        srv->_whead = 0;
        srv->_capwait = cap;
    }
    srv->_wait[(srv->_whead + srv->_nwait++) % srv->_capwait] = j;
    j->_waiting = true;
    return true;
}

/* The next waiting job at now; there is one. */
static struct dm_sim_job *
wait_pop(struct dm_sim_srv *srv, double now)
{
    if (srv->keyed) {
        /* Past keys leave the first heap from its top (the smallest), each once. */
        while (srv->_kw.n > 0 && srv->_kw.a[0]->key <= now) {
            struct dm_sim_job *late = heap_pop(&srv->_kw);
            if (!heap_push(srv, &srv->_kl, late)) {
                return late; /* out of memory: served now rather than lost */
            }
        }
        return heap_pop(srv->_kw.n > 0 ? &srv->_kw : &srv->_kl);
    }
    struct dm_sim_job *j = srv->_wait[srv->_whead];
    srv->_whead = (srv->_whead + 1) % srv->_capwait;
    srv->_nwait--;
    return j;
}

/* ---- completions ---- */

static void completion_cb(struct dm_sim *sim, void *arg, uint64_t tag);

static void
schedule(struct dm_sim *sim, struct dm_sim_srv *srv)
{
    srv->_gen++;
    if (srv->_nsvc == 0) {
        return;
    }
    double left = srv->_svc[0]->_tag - srv->_v;
    double dt = left > 0 ? left / rate(srv) : 0;
    dm_sim_at(sim, sim->now + dt, completion_cb, srv, srv->_gen);
}

static void
completion_cb(struct dm_sim *sim, void *arg, uint64_t tag)
{
    struct dm_sim_srv *srv = arg;
    if (tag != srv->_gen || srv->_nsvc == 0) {
        return; /* moved since */
    }
    advance(sim, srv);
    struct dm_sim_job *j = svc_pop(srv);
    srv->n--;
    srv->completed++;
    if (srv->_nwait + srv->_kw.n + srv->_kl.n > 0) {
        svc_push(srv, wait_pop(srv, sim->now));
    }
    schedule(sim, srv);
    srv->done(sim, srv, j);
}

void
dm_sim_srv_add(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job)
{
    advance(sim, srv);
    job->arrived = sim->now;
    if (job->size < 0) {
        job->size = 0;
    }
    bool ok;
    if (srv->disc == DM_SIM_FIFO && srv->_nsvc >= srv->slots) {
        ok = wait_push(srv, job);
    } else {
        ok = svc_push(srv, job);
    }
    if (ok) {
        srv->n++;
    }
    schedule(sim, srv);
}

void
dm_sim_srv_abort(struct dm_sim *sim, struct dm_sim_srv *srv,
                 void (*cb)(struct dm_sim *sim, struct dm_sim_srv *srv, struct dm_sim_job *job,
                            void *arg),
                 void *arg)
{
    advance(sim, srv);
    size_t nsvc = srv->_nsvc, nwait = srv->_nwait;
    struct dm_sim_job **svc = srv->_svc, **wait = srv->_wait;
    size_t whead = srv->_whead, capwait = srv->_capwait;
    struct dm_sim_heap kw = srv->_kw, kl = srv->_kl;
    srv->_kw = srv->_kl = (struct dm_sim_heap){ 0 };
    srv->_svc = NULL;
    srv->_wait = NULL;
    srv->_nsvc = srv->_capsvc = srv->_nwait = srv->_capwait = srv->_whead = 0;
    srv->n = 0;
    srv->_gen++;
    for (size_t i = 0; i < nsvc; i++) {
        cb(sim, srv, svc[i], arg);
    }
    for (size_t i = 0; i < nwait; i++) {
        cb(sim, srv, wait[(whead + i) % capwait], arg);
    }
    for (size_t i = 0; i < kw.n; i++) {
        cb(sim, srv, kw.a[i], arg);
    }
    for (size_t i = 0; i < kl.n; i++) {
        cb(sim, srv, kl.a[i], arg);
    }
    free(svc);
    free(wait);
    free(kw.a);
    free(kl.a);
}
