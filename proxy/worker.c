#include "proxy/worker.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy/accesslog.h"
#include "proxy/buf.h"
#include "proxy/client.h"
#include "proxy/inherit.h"
#include "proxy/internal.h"
#include "proxy/learn.h"
#include "proxy/log.h"
#include "proxy/upstream.h"

#define DM_TRIM_PEAK     64 /* requests at once that make a trim worth it */
#define DM_TRIM_QUIET_MS 500
#define DM_DECAY_TICKS   200 /* 10 s: the pools' decay period (dm_buf_decay) */
#define DM_TICK_MS       50  /* resolution of client timeouts */

enum {
    WAKE_RELOAD = 1,
    WAKE_STOP = 2,
    WAKE_COMMAND = 4,
    WAKE_SESSIONS = 8,
    WAKE_QUEUE = 16,
};

/* Per-worker requests from the control thread, read in the async callback. */
struct wake_flags {
    atomic_int flags;
    uint64_t shutdown_ms;
    atomic_uint_fast64_t acked; /* the last command epoch this worker carried out */
    /* Another worker wakes this one when a place frees for its queued
     * requests: under the lock, and only while its wake handle is open. */
    uv_mutex_t kick_lock;
    bool alive;
};

static struct wake_flags *wake_of;
static struct dm_worker *kick_ws; /* the running workers, for dm_workers_queue_kick() */
static unsigned kick_n;

static bool
wake_of_make(unsigned n)
{
    wake_of = calloc(n, sizeof(*wake_of));
    if (wake_of == NULL) {
        return false;
    }
    for (unsigned i = 0; i < n; i++) {
        if (uv_mutex_init(&wake_of[i].kick_lock) != 0) {
            for (unsigned j = 0; j < i; j++) {
                uv_mutex_destroy(&wake_of[j].kick_lock);
            }
            free(wake_of);
            wake_of = NULL;
            return false;
        }
        wake_of[i].alive = true;
    }
    kick_n = n;
    return true;
}

static void
wake_of_free(void)
{
    for (unsigned i = 0; wake_of != NULL && i < kick_n; i++) {
        uv_mutex_destroy(&wake_of[i].kick_lock);
    }
    free(wake_of);
    wake_of = NULL;
    kick_ws = NULL;
    kick_n = 0;
}

void
dm_workers_queue_kick_self(struct dm_worker *w)
{
    atomic_fetch_or(&wake_of[w->id].flags, WAKE_QUEUE);
    uv_async_send(&w->wake);
}

void
dm_workers_queue_kick(void)
{
    for (unsigned i = 0; i < kick_n; i++) {
        if (dm_counter_get(&kick_ws[i].nqueued) == 0) {
            continue;
        }
        uv_mutex_lock(&wake_of[i].kick_lock);
        if (wake_of[i].alive) {
            atomic_fetch_or(&wake_of[i].flags, WAKE_QUEUE);
            uv_async_send(&kick_ws[i].wake);
        }
        uv_mutex_unlock(&wake_of[i].kick_lock);
    }
}

/*
 * Commands (worker.h): the control thread writes what a command asks into
 * the host (power, close_idle_epoch), then publishes the command's epoch with
 * a release store; a worker reads the epoch with an acquire load, so it sees
 * everything the commands up to that epoch wrote before it acts.
 */
static atomic_uint_fast64_t cmd_epoch;
static uv_async_t *ack_notify; /* on the control loop, or NULL */

static void resume_accepting(struct dm_worker *w);

/* The data path's sockets (client and server connections, every worker),
 * the client connections among them, and how many descriptors the
 * open-file limit leaves them (dm_workers_fit_open_files). */
static atomic_uint_fast64_t sockets;
static atomic_uint_fast64_t clients;
static atomic_uint_fast64_t socket_cap = UINT64_MAX;
static atomic_uint_fast64_t open_files;
/* What the limit leaves once the descriptors open at the start and a fixed
 * reserve are counted, and what the control thread may hold of it at once
 * (dm_workers_control_fds): socket_cap is the difference. */
static atomic_uint_fast64_t socket_room = UINT64_MAX;
static atomic_uint_fast64_t control_fds;

/* The data path keeps at least half the room, whatever the control thread
 * may want (the warning of dm_workers_control_fds says so). */
static void
cap_update(void)
{
    uint64_t room = atomic_load(&socket_room), control = atomic_load(&control_fds);
    if (room != UINT64_MAX && control > room / 2) {
        control = room / 2;
    }
    atomic_store(&socket_cap, room > control + 1 ? room - control : 1);
}

void
dm_sockets_add(int64_t n, bool client)
{
    atomic_fetch_add_explicit(&sockets, (uint_fast64_t)n, memory_order_relaxed);
    if (client) {
        atomic_fetch_add_explicit(&clients, (uint_fast64_t)n, memory_order_relaxed);
    }
}

/* The descriptors the data path may need now: its sockets, and one more
 * for each client (the server connection it may open; counted twice for
 * those that have one, which errs on the safe side). */
static uint64_t
sockets_needed(void)
{
    return atomic_load_explicit(&sockets, memory_order_relaxed) +
           atomic_load_explicit(&clients, memory_order_relaxed);
}

/* Whether w accepts no more: at limits.max_conns, or when a client more
 * (and its server connection) would not fit the open files' cap. */
static bool
worker_full(const struct dm_worker *w)
{
    return w->nclients >= w->rt->conf->limits.max_conns ||
           sockets_needed() + 2 > atomic_load_explicit(&socket_cap, memory_order_relaxed);
}

static const char *
full_name(const struct dm_worker *w)
{
    return w->nclients >= w->rt->conf->limits.max_conns ? "limits.max_conns"
                                                        : "the open-file limit";
}

void
dm_workers_check_open_files(unsigned nworkers, unsigned max_conns)
{
    uint64_t cap = atomic_load(&socket_cap);
    uint64_t asked = (uint64_t)nworkers * max_conns;
    if (asked > cap / 2 && max_conns != DM_CONF_DEFAULT_MAX_CONNS) {
        dm_log_warn("limits.max_conns (%u) times %u workers is above what the open-file "
                    "limit (ulimit -n: %llu) allows, two descriptors a connection: "
                    "accepting pauses at %llu connections; raise the limit (LimitNOFILE= in "
                    "a systemd unit) to accept more",
                    max_conns, nworkers, (unsigned long long)atomic_load(&open_files),
                    (unsigned long long)(cap / 2));
    }
}

/* The descriptors this process has open now. */
static uint64_t
open_now(void)
{
    uint64_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            n += e->d_name[0] != '.';
        }
        closedir(d);
    }
    return n;
}

void
dm_workers_control_fds(uint64_t n)
{
    atomic_store(&control_fds, n);
    cap_update();
    uint64_t room = atomic_load(&socket_room);
    if (room != UINT64_MAX && n > room / 2) {
        dm_log_warn("health checks, power actions and the admin listener may hold %llu "
                    "descriptors at once, more than half of what the open-file limit (ulimit "
                    "-n: %llu) leaves: the clients and servers keep %llu, and checks may not "
                    "run; raise the limit (LimitNOFILE= in a systemd unit)",
                    (unsigned long long)n, (unsigned long long)atomic_load(&open_files),
                    (unsigned long long)atomic_load(&socket_cap));
    }
}

void
dm_workers_fit_open_files(unsigned nworkers, unsigned max_conns, uint64_t control)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return;
    }
    nworkers = nworkers > 0 ? nworkers : 1;
    uint64_t open = open_now();
    /* What max_conns asks: two a connection, and room for the reserve. */
    uint64_t want = 2 * (uint64_t)nworkers * max_conns;
    want += want / 16 + 32 + open + control;
    uint64_t most = 1048576;
    FILE *f = fopen("/proc/sys/fs/nr_open", "r");
    if (f != NULL) {
        unsigned long long v;
        if (fscanf(f, "%llu", &v) == 1 && v > 0) {
            most = v;
        }
        fclose(f);
    }
    want = want < most ? want : most;
    if (rl.rlim_cur < want) {
        uint64_t before = rl.rlim_cur;
        /* Up to what is wanted (the hard limit too, when allowed: as root),
         * else up to the hard limit. */
        struct rlimit up = { want, rl.rlim_max > want ? rl.rlim_max : want };
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) {
            rl = up;
        } else if (rl.rlim_cur < rl.rlim_max) {
            up = (struct rlimit){ rl.rlim_max, rl.rlim_max };
            if (setrlimit(RLIMIT_NOFILE, &up) == 0) {
                rl = up;
            }
        }
        if (rl.rlim_cur != before) {
            dm_log_info("open-file limit raised from %llu to %llu", (unsigned long long)before,
                        (unsigned long long)rl.rlim_cur);
        }
    }
    /* The descriptors open now (loops, listeners, logs), a reserve (log
     * files reopened, resolvers), and what the control thread may hold. */
    uint64_t used = open + 16 + rl.rlim_cur / 32;
    atomic_store(&open_files, rl.rlim_cur);
    atomic_store(&socket_room, rl.rlim_cur > used ? rl.rlim_cur - used : 0);
    dm_workers_control_fds(control);
    dm_workers_check_open_files(nworkers, max_conns);
}

/* The end of each loop iteration: paused accepting, corked server writes, the access log. */
static void
flush_cb(uv_check_t *h)
{
    struct dm_worker *w = h->data;
    if (w->accept_paused && !worker_full(w)) {
        resume_accepting(w);
    }
    dm_upstreams_flush(w);
    if (w->log_len > 0) {
        dm_accesslog_flush(w);
    }
}

/* ---- listeners ---- */

/*
 * -EADDRINUSE when something listens on addr already, else 0. With
 * SO_REUSEPORT on both sides, a second dimmer (or any server that sets it)
 * on the same address would bind too, silently, and each would get some of
 * the connections: bind once without it first, as nginx binds, and refuse.
 */
int
dm_listen_probe(const struct sockaddr *addr)
{
    socklen_t len =
        addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    in_port_t port = addr->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)addr)->sin6_port
                                                 : ((const struct sockaddr_in *)addr)->sin_port;
    if (port == 0) {
        return 0; /* the kernel picks a free one */
    }
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return 0; /* the real bind reports what is wrong */
    }
    int one = 1;
    int r = 0;
    /* SO_REUSEADDR: a connection of an earlier run in TIME_WAIT is no listener. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
        bind(fd, addr, len) < 0 && errno == EADDRINUSE) {
        r = -EADDRINUSE;
    }
    close(fd);
    return r;
}

int
dm_listen_socket(const struct sockaddr *addr, int backlog, struct sockaddr_storage *bound)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -errno;
    }
    int one = 1;
    /* libuv 1.44 has no flag for SO_REUSEPORT: set it before bind. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    socklen_t len =
        addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (bind(fd, addr, len) < 0 || listen(fd, backlog) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (bound != NULL) {
        socklen_t blen = sizeof(*bound);
        memset(bound, 0, sizeof(*bound));
        if (getsockname(fd, (struct sockaddr *)bound, &blen) < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
    }
    return fd;
}

const char *
dm_addr_text(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[NI_MAXHOST];
    char port[NI_MAXSERV];
    socklen_t salen;

    if (sa->sa_family == AF_INET) {
        salen = sizeof(struct sockaddr_in);
    } else if (sa->sa_family == AF_INET6) {
        salen = sizeof(struct sockaddr_in6);
    } else {
        snprintf(buf, len, "?");
        return buf;
    }
    /* getnameinfo rather than inet_ntop: it keeps an IPv6 scope ("%eth0"). */
    if (getnameinfo(sa, salen, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(buf, len, "?");
        return buf;
    }
    snprintf(buf, len, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
    return buf;
}

/* The address of the listener l for worker i: worker 0's port once it has one. */
static struct sockaddr_storage
worker_listen_addr(const struct dm_conf_addr *a, unsigned i, const struct sockaddr_storage *bound)
{
    struct sockaddr_storage sa = a->sa;
    if (i == 0) {
        return sa;
    }
    if (sa.ss_family == AF_INET6) {
        ((struct sockaddr_in6 *)&sa)->sin6_port = ((const struct sockaddr_in6 *)bound)->sin6_port;
    } else {
        ((struct sockaddr_in *)&sa)->sin_port = ((const struct sockaddr_in *)bound)->sin_port;
    }
    return sa;
}

/*
 * At limits.max_conns a worker stops accepting, as HAProxy and nginx do,
 * rather than accept and reset: the connection that woke the listener is
 * left pending, and libuv keeps its fd and stops polling the listener until
 * uv_accept() is called (libuv src/unix/stream.c: uv__server_io stops the
 * io watcher while accepted_fd is set, and uv_accept restarts it). Later
 * connections wait in the kernel's listen queue, their handshake complete.
 * Once a client connection closes, resume_accepting() (from the check
 * handle, so never inside the data path's own callbacks) takes the pending
 * connections while there is room. A pause, and its log line, lasts from
 * the first connection left waiting to the first moment the worker has a
 * free slot and nothing waiting, so a worker churning at its limit logs
 * one pause, not one per connection.
 */
static void
on_connection(uv_stream_t *listener, int status)
{
    struct dm_worker *w = listener->data;
    if (status < 0 || w->stopping) {
        return;
    }
    size_t l = (size_t)((uv_tcp_t *)listener - w->listeners); /* the socket */
    if (worker_full(w) || dm_client_accept(w, listener) < 0) {
        /* Out of memory pauses too: a later close, or the tick, tries again. */
        w->held[l] = true;
        w->accept_draining = false;
        if (!w->accept_paused) {
            w->accept_paused = true;
            w->paused_since_ms = uv_now(&w->loop);
            dm_counter_add(&w->accept_pauses, 1);
            atomic_store_explicit(&w->paused_now, true, memory_order_relaxed);
            dm_log_warn("worker %u: %s (%llu) reached: accepting paused, new "
                        "connections wait in the listen queue",
                        w->id, full_name(w),
                        (unsigned long long)(w->nclients >= w->rt->conf->limits.max_conns
                                                 ? w->rt->conf->limits.max_conns
                                                 : atomic_load(&socket_cap) / 2));
        }
    }
}

/* Takes the connections left pending while there is room (see on_connection). */
static void
resume_accepting(struct dm_worker *w)
{
    if (!w->accept_paused || w->stopping) {
        return;
    }
    for (size_t k = 0; k < w->nhandles && !worker_full(w); k++) {
        size_t l = (w->held_next + k) % w->nhandles;
        if (!w->held[l]) {
            continue;
        }
        if (dm_client_accept(w, (uv_stream_t *)&w->listeners[l]) < 0) {
            return; /* still pending: the next close or tick tries again */
        }
        w->held[l] = false;
        w->held_next = (l + 1) % w->nhandles;
    }
    for (size_t l = 0; l < w->nhandles; l++) {
        if (w->held[l]) {
            return;
        }
    }
    /* Every listener polls again, but its queue may hold more than there is
     * room for: the pause ends only once a whole iteration (one poll of the
     * listeners) went by without one pending again. */
    if (!w->accept_draining) {
        w->accept_draining = true;
        return;
    }
    w->accept_draining = false;
    w->accept_paused = false;
    atomic_store_explicit(&w->paused_now, false, memory_order_relaxed);
    dm_log_info("worker %u: below limits.max_conns (%u) and the open-file limit again: "
                "accepting resumed after %llu ms",
                w->id, w->rt->conf->limits.max_conns,
                (unsigned long long)(uv_now(&w->loop) - w->paused_since_ms));
}

/* ---- the worker loop ---- */

static void
noop_close(uv_handle_t *h)
{
    (void)h;
}

static void
close_once(uv_handle_t *h)
{
    if (!uv_is_closing(h)) {
        uv_close(h, noop_close);
    }
}

/* Closes the worker's own handles: listeners, wake, timers, check, prepare. */
static void
worker_close_handles(struct dm_worker *w)
{
    uv_mutex_lock(&wake_of[w->id].kick_lock);
    wake_of[w->id].alive = false;
    uv_mutex_unlock(&wake_of[w->id].kick_lock);
    for (size_t i = 0; i < w->nhandles; i++) {
        close_once((uv_handle_t *)&w->listeners[i]);
    }
    close_once((uv_handle_t *)&w->wake);
    close_once((uv_handle_t *)&w->stop_timer);
    close_once((uv_handle_t *)&w->drain_timer);
    close_once((uv_handle_t *)&w->flush);
    close_once((uv_handle_t *)&w->tick);
    close_once((uv_handle_t *)&w->ack);
    if (w->tls_idle_ready) {
        close_once((uv_handle_t *)&w->tls_idle);
    }
}

static void
worker_finish(struct dm_worker *w)
{
    /* Connections close through their own chains (timer, then socket); then
     * the worker's own handles, and the loop runs out. */
    dm_clients_close_all(w);
    dm_upstream_close_idle(w, w->rt);
    worker_close_handles(w);
}

static void
stop_timer_cb(uv_timer_t *t)
{
    struct dm_worker *w = t->data;
    if (w->nclients > 0) {
        /* A request no server took yet (queued, held for a wake, waiting for
         * a session pass) is answered 503 with Retry-After, not cut: it was
         * never sent, so the client may send it again elsewhere. */
        size_t open = w->nclients;
        size_t refused = dm_clients_refuse_waiting(w);
        dm_log_warn("worker %u: %zu connections still open at the shutdown bound: closing them "
                    "(answered 503, as no server took their request: %zu)",
                    w->id, open, refused);
    }
    worker_finish(w);
}

static void
drain_check_cb(uv_timer_t *t)
{
    struct dm_worker *w = t->data;
    if (w->nclients == 0) {
        worker_finish(w);
    }
}

/*
 * Acknowledges the commands carried out, once the connections they closed
 * are gone (their close callbacks ran at the end of an earlier iteration):
 * runs before the loop next waits for events, as long as one is pending.
 */
static void
ack_cb(uv_prepare_t *p)
{
    struct dm_worker *w = p->data;
    if (w->commanded_closing > 0) {
        return;
    }
    uv_prepare_stop(p);
    atomic_store_explicit(&wake_of[w->id].acked, w->cmd_seen, memory_order_release);
    if (ack_notify != NULL) {
        uv_async_send(ack_notify);
    }
}

/* Carries out the commands published since the last ones this worker saw. */
static void
worker_commands(struct dm_worker *w)
{
    uint64_t epoch = atomic_load_explicit(&cmd_epoch, memory_order_acquire);
    if (epoch == w->cmd_seen) {
        return;
    }
    /* From here on, every pick of this thread sees the power states that the
     * commands up to epoch set: a host being drained gets no new request. */
    struct dm_runtime *rt = w->rt;
    for (size_t p = 0; p < rt->npools; p++) {
        struct dm_servers *sv = rt->pools[p].sv;
        for (size_t i = 0; i < sv->n; i++) {
            const struct dm_host *h = sv->s[i].host;
            if (atomic_load_explicit(&h->close_idle_epoch, memory_order_relaxed) > w->cmd_seen) {
                dm_upstream_close_idle_server(w, rt, p, i);
            }
        }
    }
    w->cmd_seen = epoch;
    /* A command may have made a server usable: held requests try again. */
    dm_clients_hold_retry(w);
    uv_prepare_start(&w->ack, ack_cb);
}

static void
wake_cb(uv_async_t *a)
{
    struct dm_worker *w = a->data;
    int flags = atomic_exchange(&wake_of[w->id].flags, 0);
    if (flags & WAKE_RELOAD) {
        struct dm_runtime *rt = dm_runtime_current();
        if (rt != NULL && rt != w->rt) {
            struct dm_runtime *old = w->rt;
            dm_upstream_close_idle(w, old);
            w->rt = rt;
            dm_runtime_unref(old);
            /* Requests waiting for a server move to the new config now. */
            dm_clients_hold_retry(w);
        } else {
            dm_runtime_unref(rt);
        }
    }
    if ((flags & WAKE_STOP) && !w->stopping) {
        /* A connection left pending at max_conns (on_connection) is open
         * already, out of the listen queue, in libuv's hands: closing the
         * listener would reset it, and a SIGUSR2's new process can never
         * take it. It is taken now, over the limit, and drained as the rest
         * (its request answered, with Connection: close). */
        for (size_t i = 0; i < w->nhandles; i++) {
            if (w->held[i] && dm_client_accept(w, (uv_stream_t *)&w->listeners[i]) == 0) {
                w->held[i] = false;
            }
        }
        w->stopping = true;
        for (size_t i = 0; i < w->nhandles; i++) {
            close_once((uv_handle_t *)&w->listeners[i]);
        }
        dm_clients_drain(w);
        dm_upstream_close_idle(w, w->rt);
        uv_timer_start(&w->stop_timer, stop_timer_cb, wake_of[w->id].shutdown_ms, 0);
        /* Poll for the last connection to go; cheap, and only while stopping. */
        uv_timer_start(&w->drain_timer, drain_check_cb, 0, 20);
    }
    if (flags & WAKE_COMMAND) {
        worker_commands(w);
    }
    if (flags & WAKE_SESSIONS) {
        dm_clients_session_retry(w);
    }
    if (flags & WAKE_QUEUE) {
        dm_clients_queue_retry(w);
    }
}

static void
tick_cb(uv_timer_t *t)
{
    struct dm_worker *w = t->data;
    dm_stat_add(&w->beats, 1);
    dm_clients_expire(w);
    if (w->client_err_dropped > 0) {
        dm_clients_err_roll(w);
    }
    if (++w->ticks % 2 == 0 && w->aging != NULL) {
        dm_learn_age(w); /* every 100 ms */
    }
    /* Held requests (scale to zero) try again every 100 ms as well as on
     * every command: a server also becomes usable with no command at all,
     * when its health check rises or a passive down period ends. */
    if (w->ticks % 2 == 0 && w->tq[DM_T_HOLD].head != NULL) {
        dm_clients_hold_retry(w);
    }
    /* Sessions waiting for a batch pass hear of it at once (WAKE_SESSIONS);
     * this only bounds what a lost wake-up could cost. */
    if (w->ticks % 4 == 0 && w->tq[DM_T_SESSION].head != NULL) {
        dm_clients_session_retry(w);
    }
    /* Queued requests (max_conns) hear of each freed place at once
     * (WAKE_QUEUE); every tick besides, for a server that became usable. */
    for (unsigned k = 0; k < DM_QUEUE_LISTS; k++) {
        if (w->queue[k].head != NULL) {
            dm_clients_queue_retry(w);
            break;
        }
    }
    w->busy_since_decay |= w->busy > 0;
    if ((w->ticks + w->id * 37) % DM_DECAY_TICKS == 0) { /* workers apart */
        /* Under a steady load too: what a peak pooled goes back in steps of
         * the period, and the heap's free pages with it, so that memory
         * follows the load instead of keeping its highest mark. */
        size_t freed = dm_buf_decay(w);
        if (freed > 0 || w->busy_since_decay) {
            malloc_trim(0);
        }
        w->busy_since_decay = false;
    }
    /* After a burst, hand the memory of its requests back once the worker
     * has been quiet for a moment: idle connections should cost only their
     * own few hundred bytes, not the peak's buffers. */
    uint64_t now = uv_now(&w->loop);
    if (w->busy > 0) {
        w->idle_since_ms = now;
    } else if (w->busy_peak >= DM_TRIM_PEAK && now - w->idle_since_ms >= DM_TRIM_QUIET_MS) {
        dm_buf_trim(w);
        malloc_trim(0);
        w->busy_peak = 0;
    }
}

static void
worker_main(void *arg)
{
    struct dm_worker *w = arg;
    uv_run(&w->loop, UV_RUN_DEFAULT);
}

/*
 * Sets worker w (zeroed) up as worker i serving rt, everything but its
 * listeners: its loop and handles, its access-log buffer, the listener
 * table. Returns 0, or <0 with everything undone.
 */
static int
worker_init(struct dm_worker *w, unsigned i, struct dm_runtime *rt, int access_log_fd,
            int log_format)
{
    w->id = i;
    dm_rng_init(&w->rng, 0x9e3779b97f4a7c15ULL * (i + 1) ^ (uint64_t)getpid());
    int r = uv_loop_init(&w->loop);
    if (r < 0) {
        return r;
    }
    r = uv_async_init(&w->loop, &w->wake, wake_cb);
    if (r < 0) {
        goto close_loop;
    }
    w->wake.data = w;
    r = uv_timer_init(&w->loop, &w->stop_timer);
    if (r < 0) {
        goto close_wake;
    }
    w->stop_timer.data = w;
    r = uv_timer_init(&w->loop, &w->drain_timer);
    if (r < 0) {
        goto close_stop_timer;
    }
    w->drain_timer.data = w;
    r = uv_timer_init(&w->loop, &w->tick);
    if (r < 0) {
        goto close_drain_timer;
    }
    w->tick.data = w;
    uv_timer_start(&w->tick, tick_cb, DM_TICK_MS, DM_TICK_MS);
    r = uv_check_init(&w->loop, &w->flush);
    if (r < 0) {
        goto close_tick;
    }
    w->flush.data = w;
    uv_check_start(&w->flush, flush_cb);
    uv_unref((uv_handle_t *)&w->flush);
    r = uv_prepare_init(&w->loop, &w->ack);
    if (r < 0) {
        goto close_flush;
    }
    w->ack.data = w;
    r = dm_accesslog_init(w, access_log_fd, log_format);
    if (r < 0) {
        goto close_ack;
    }
    /* The sockets come with worker_listen(), which knows how many. */
    w->lstats = calloc(rt->conf->nlisteners, sizeof(*w->lstats));
    if (w->lstats == NULL && rt->conf->nlisteners > 0) {
        r = UV_ENOMEM;
        goto fini_accesslog;
    }
    w->nlisteners = rt->conf->nlisteners;
    w->rt = rt;
    dm_runtime_ref(rt);
    return 0;

fini_accesslog:
    dm_accesslog_fini(w);
close_ack:
    uv_close((uv_handle_t *)&w->ack, noop_close);
close_flush:
    uv_close((uv_handle_t *)&w->flush, noop_close);
close_tick:
    uv_close((uv_handle_t *)&w->tick, noop_close);
close_drain_timer:
    uv_close((uv_handle_t *)&w->drain_timer, noop_close);
close_stop_timer:
    uv_close((uv_handle_t *)&w->stop_timer, noop_close);
close_wake:
    uv_close((uv_handle_t *)&w->wake, noop_close);
    uv_run(&w->loop, UV_RUN_DEFAULT); /* the close callbacks */
close_loop:
    uv_loop_close(&w->loop);
    return r;
}

/* The sockets handed over for each listener (proxy/inherit.h), for every worker. */
struct handed {
    int *fd;
    size_t n;
};

static void
worker_free_sockets(struct dm_worker *w)
{
    free(w->listeners);
    free(w->held);
    free(w->lof);
    free(w->hfd);
    w->listeners = NULL;
    w->held = NULL;
    w->lof = NULL;
    w->hfd = NULL;
}

/*
 * Makes the worker's next socket, of listener l, listen on *fd; *fd is -1
 * once the handle has it (closed with it), else still the caller's. 0 or <0.
 */
static int
worker_socket(struct dm_worker *w, size_t l, int *fd)
{
    size_t k = w->nhandles;
    int r = uv_tcp_init(&w->loop, &w->listeners[k]);
    if (r < 0) {
        return r;
    }
    w->nhandles = k + 1;
    w->listeners[k].data = w;
    w->lof[k] = l;
    w->hfd[k] = *fd;
    r = uv_tcp_open(&w->listeners[k], *fd);
    if (r < 0) {
        return r;
    }
    *fd = -1; /* the handle's now */
    return uv_listen((uv_stream_t *)&w->listeners[k], 4096, on_connection);
}

/*
 * Opens worker i's (of nw) sockets on every listen address of cf (worker 0
 * first: it fills bound[], whose ports the others share). A listener with
 * sockets handed over (in[l]) takes them, not new ones: worker i those of
 * rank i, i + nw, ...; a worker left without one binds its own, which joins
 * them (SO_REUSEPORT) when this process runs as the user that made them,
 * and otherwise goes without (said in the log). Returns 0, or <0 after
 * logging which address failed; the sockets made so far are counted in
 * w->nhandles for worker_abandon().
 */
static int
worker_listen(struct dm_worker *w, unsigned i, unsigned nw, const struct dm_conf *cf,
              struct sockaddr_storage *bound, const struct handed *in)
{
    /* Every address is probed before any is bound: the config's own listeners
     * may overlap (*:80 and 127.0.0.1:80) and share their port. One handed
     * over listens already, and is ours. */
    for (size_t l = 0; i == 0 && l < cf->nlisteners; l++) {
        if (in[l].n == 0 && dm_listen_probe((const struct sockaddr *)&cf->listeners[l].sa) < 0) {
            dm_log_error("cannot listen on %s: %s (another process listens there)",
                         cf->listeners[l].text, strerror(EADDRINUSE));
            return -EADDRINUSE;
        }
    }
    size_t total = 0;
    for (size_t l = 0; l < cf->nlisteners; l++) {
        total += in[l].n > i ? (in[l].n - i + nw - 1) / nw : 1;
    }
    w->listeners = calloc(total, sizeof(*w->listeners));
    w->held = calloc(total, sizeof(*w->held));
    w->lof = calloc(total, sizeof(*w->lof));
    w->hfd = calloc(total, sizeof(*w->hfd));
    if (total > 0 &&
        (w->listeners == NULL || w->held == NULL || w->lof == NULL || w->hfd == NULL)) {
        return UV_ENOMEM;
    }
    for (size_t l = 0; l < cf->nlisteners; l++) {
        int r = 0;
        for (size_t j = i; j < in[l].n && r == 0; j += nw) {
            int fd = in[l].fd[j];
            r = worker_socket(w, l, &fd);
            if (fd >= 0) {
                close(fd);
            }
        }
        /* Port 0: worker 0 gets a free port from the kernel, the others share it. */
        struct sockaddr_storage sa = worker_listen_addr(&cf->listeners[l], i, &bound[l]);
        if (r == 0 && in[l].n <= i) {
            int fd = dm_listen_socket((const struct sockaddr *)&sa, 4096,
                                      i == 0 && in[l].n == 0 ? &bound[l] : NULL);
            if (fd < 0 && in[l].n > 0) {
                char at[DM_ADDR_TEXT];
                dm_log_warn("worker %u accepts nothing on %s (%s) until a restart: %zu sockets "
                            "were handed over for %u workers, and its own did not join them: %s",
                            i, cf->listeners[l].text,
                            dm_addr_text((const struct sockaddr *)&sa, at, sizeof(at)), in[l].n, nw,
                            strerror(-fd));
                continue;
            }
            r = fd < 0 ? fd : worker_socket(w, l, &fd);
            if (fd >= 0) {
                close(fd);
            }
        }
        if (r < 0) {
            char at[DM_ADDR_TEXT];
            dm_log_error("cannot listen on %s (%s): %s", cf->listeners[l].text,
                         dm_addr_text((const struct sockaddr *)&sa, at, sizeof(at)),
                         r < -1000 ? uv_strerror(r) : strerror(-r));
            return r;
        }
    }
    return 0;
}

size_t
dm_workers_listen_fds(const struct dm_worker *ws, unsigned n, int *fds, size_t *lis, size_t max)
{
    size_t k = 0;
    for (unsigned i = 0; ws != NULL && i < n; i++) {
        for (size_t h = 0; h < ws[i].nhandles && k < max; h++, k++) {
            fds[k] = ws[i].hfd[h];
            lis[k] = ws[i].lof[h];
        }
    }
    return k;
}

size_t
dm_workers_sockets(const struct dm_worker *ws, unsigned n)
{
    size_t k = 0;
    for (unsigned i = 0; ws != NULL && i < n; i++) {
        k += ws[i].nhandles;
    }
    return k;
}

/* Undoes worker_init() and worker_listen() for a worker whose thread never ran. */
static void
worker_abandon(struct dm_worker *w)
{
    worker_close_handles(w);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
    worker_free_sockets(w);
    free(w->lstats);
    dm_accesslog_fini(w);
    dm_runtime_unref(w->rt);
}

/*
 * Asks the first n workers, whose threads run, to stop within shutdown_ms,
 * joins them and frees what each holds (not ws itself).
 */
static void
workers_join(struct dm_worker *ws, unsigned n, uint64_t shutdown_ms)
{
    for (unsigned i = 0; i < n; i++) {
        wake_of[i].shutdown_ms = shutdown_ms;
        atomic_fetch_or(&wake_of[i].flags, WAKE_STOP);
        uv_async_send(&ws[i].wake);
    }
    for (unsigned i = 0; i < n; i++) {
        struct dm_worker *w = &ws[i];
        uv_thread_join(&w->thread);
        uv_loop_close(&w->loop);
        dm_accesslog_fini(w);
        dm_buf_trim(w);
        free(w->tls_scratch);
        worker_free_sockets(w);
        free(w->lstats);
        dm_runtime_unref(w->rt);
    }
}

struct dm_worker *
dm_workers_start(unsigned n, struct dm_runtime *rt, int access_log_fd, int log_format,
                 struct sockaddr_storage *bound, int *err)
{
    int r = UV_ENOMEM;
    struct handed *in = NULL;
    int *fds = NULL;
    unsigned made = 0;    /* workers set up (worker_init) */
    unsigned started = 0; /* workers whose thread runs */
    struct dm_worker *ws = calloc(n, sizeof(*ws));
    if (ws == NULL) {
        goto fail;
    }
    if (!wake_of_make(n)) {
        goto free_workers;
    }
    kick_ws = ws;
    const struct dm_conf *cf = rt->conf;
    size_t nin = dm_inherited != NULL ? dm_inherited->n : 0;
    in = calloc(cf->nlisteners + 1, sizeof(*in));
    fds = calloc(nin + 1, sizeof(*fds));
    if (in == NULL || fds == NULL) {
        goto free_in;
    }
    /* Sockets handed over by the process this one replaces: each listener
     * takes those of its own address text, and is bound where they are. */
    for (size_t l = 0, used = 0; l < cf->nlisteners; l++) {
        in[l].fd = fds + used;
        size_t before = 0;
        for (size_t j = 0; j < l; j++) {
            before += strcmp(cf->listeners[j].text, cf->listeners[l].text) == 0;
        }
        char key[512];
        dm_inherit_listen_key(key, sizeof(key), cf->listeners[l].text, before);
        in[l].n = dm_inherit_take(dm_inherited, DM_INHERIT_LISTEN, key, in[l].fd, nin - used);
        used += in[l].n;
        socklen_t blen = sizeof(bound[l]);
        if (in[l].n > 0 && getsockname(in[l].fd[0], (struct sockaddr *)&bound[l], &blen) < 0) {
            r = -errno;
            goto free_in;
        }
    }
    for (; made < n; made++) {
        r = worker_init(&ws[made], made, rt, access_log_fd, log_format);
        if (r < 0) {
            goto abandon_workers;
        }
        r = worker_listen(&ws[made], made, n, cf, bound, in);
        if (r < 0) {
            made++; /* set up: abandoned with the others */
            goto abandon_workers;
        }
    }
    for (; started < n; started++) {
        r = uv_thread_create(&ws[started].thread, worker_main, &ws[started]);
        if (r < 0) {
            goto join_threads;
        }
    }
    free(fds);
    free(in);
    return ws;

join_threads:
    workers_join(ws, started, 0);
abandon_workers:
    for (unsigned i = started; i < made; i++) {
        worker_abandon(&ws[i]);
    }
free_in:
    free(fds);
    free(in);
    wake_of_free();
free_workers:
    free(ws);
fail:
    *err = r;
    return NULL;
}

void
dm_workers_reload(struct dm_worker *ws, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        atomic_fetch_or(&wake_of[i].flags, WAKE_RELOAD);
        uv_async_send(&ws[i].wake);
    }
}

void
dm_workers_stop(struct dm_worker *ws, unsigned n, uint64_t shutdown_ms)
{
    workers_join(ws, n, shutdown_ms);
    free(ws);
    wake_of_free();
}

void
dm_workers_sessions_decided(struct dm_worker *ws, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        atomic_fetch_or(&wake_of[i].flags, WAKE_SESSIONS);
        uv_async_send(&ws[i].wake);
    }
}

void
dm_workers_set_notify(uv_async_t *a)
{
    ack_notify = a;
}

/* Publishes the next epoch and wakes every worker to carry it out. */
static uint64_t
command_publish(struct dm_worker *ws, unsigned n, uint64_t epoch)
{
    atomic_store_explicit(&cmd_epoch, epoch, memory_order_release);
    for (unsigned i = 0; i < n; i++) {
        atomic_fetch_or(&wake_of[i].flags, WAKE_COMMAND);
        uv_async_send(&ws[i].wake);
    }
    return epoch;
}

uint64_t
dm_workers_close_idle(struct dm_worker *ws, unsigned n, struct dm_host *h)
{
    uint64_t epoch = atomic_load_explicit(&cmd_epoch, memory_order_relaxed) + 1;
    atomic_store_explicit(&h->close_idle_epoch, epoch, memory_order_relaxed);
    return command_publish(ws, n, epoch);
}

uint64_t
dm_workers_set_power(struct dm_worker *ws, unsigned n, struct dm_host *h, int power,
                     uint64_t now_us)
{
    uint64_t epoch = atomic_load_explicit(&cmd_epoch, memory_order_relaxed) + 1;
    if (atomic_exchange_explicit(&h->power, power, memory_order_relaxed) != power) {
        atomic_store_explicit(&h->power_since_us, now_us, memory_order_relaxed);
    }
    if (power != DM_POWER_AWAKE) {
        atomic_store_explicit(&h->close_idle_epoch, epoch, memory_order_relaxed);
    }
    return command_publish(ws, n, epoch);
}

unsigned
dm_workers_acked(const struct dm_worker *ws, unsigned n, uint64_t epoch)
{
    (void)ws;
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        if (atomic_load_explicit(&wake_of[i].acked, memory_order_acquire) >= epoch) {
            k++;
        }
    }
    return k;
}

void
dm_workers_limits(const struct dm_worker *ws, unsigned n, struct dm_limits_counts *out)
{
    *out = (struct dm_limits_counts){ 0 };
    for (unsigned i = 0; ws != NULL && i < n; i++) {
        const struct dm_worker *w = &ws[i];
        out->accept_pauses += dm_counter_get(&w->accept_pauses);
        out->paused_workers += atomic_load_explicit(&w->paused_now, memory_order_relaxed) ? 1 : 0;
        out->per_client += dm_counter_get(&w->refused_per_client);
        out->rate += dm_counter_get(&w->refused_rate);
    }
    out->open_files = atomic_load(&open_files);
    out->sockets = atomic_load(&sockets);
    out->socket_cap = atomic_load(&socket_cap);
    out->clients = atomic_load(&clients);
}

uint64_t
dm_worker_beats(const struct dm_worker *ws, unsigned i)
{
    return dm_counter_get(&ws[i].beats);
}
