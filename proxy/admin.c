/*
 * The admin listener, on the control thread's loop: GET /stats answers the
 * live server tables as JSON, GET /metrics the same for Prometheus, GET / the
 * dashboard (proxy/dashboard.html), GET /help a short index, and POST /hosts/ADDR/...
 * sends a command about a host to every worker and answers once every worker
 * has acknowledged it. One request per connection.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "balancers/hosts.h"
#include "parsers/catalog.h"
#include "proxy/inherit.h"
#include "proxy/internal.h"
#include "proxy/log.h"
#include "proxy/metrics.h"
#include "proxy/power.h"
#include "proxy/sbuf.h"
#include "proxy/session.h"
#include "proxy/worker.h"

/* Close callback for a handle that was malloc'ed on its own. */
static void
free_handle(uv_handle_t *h)
{
    free(h);
}

#define ADMIN_REQ_MAX 8192
/* A request target's bytes at most, with its NUL: a longer one is answered
 * 414. A pool or host is named by as many bytes as the target holds (any
 * name the config takes that fits in it), never by a shorter bound of its own. */
#define ADMIN_TARGET_MAX 512
_Static_assert(ADMIN_TARGET_MAX == 512, "the 414 answer and dimmer(8) say 511 bytes");
#define ADMIN_ACK_MS  5000 /* a command not acknowledged by every worker by then: 504 */
#define ADMIN_POLL_MS 100  /* pending commands are checked at least this often */
/* A connection is answered 408 when its request is not in within
 * ADMIN_REQ_MS, and closed when its answer is not read within ADMIN_CONN_MS
 * of its opening: one that sends a few bytes and waits would otherwise hold
 * its socket, and dimmer's stop, for ever. */
#define ADMIN_REQ_S   10
#define ADMIN_REQ_MS  (ADMIN_REQ_S * 1000)
#define ADMIN_CONN_MS 30000
#define DM_STR_(x)    #x
#define DM_STR(x)     DM_STR_(x)
/* After its answer, what the client still sends (a body, a pipelined
 * request) is read and dropped for at most this long: a close with unread
 * bytes would reset the connection, and the answer with it (nginx's
 * lingering close). */
#define ADMIN_LINGER_MS 2000

struct admin_conn;

enum page { PAGE_METRICS, PAGE_STATS, PAGE_POWER, PAGES };

/*
 * A page's body (/metrics, /stats, /power) shared by the reads of it in one
 * turn of the loop: a crowd of them at once (64 Prometheus, or a client that
 * opens as many) costs one build, not one each (a /metrics of 20,000 servers
 * is half a second of the control thread and 71 MB). It is dropped at the
 * end of the turn, or by a POST: a read accepted after an answer was written
 * sees a new one.
 */
struct shared_body {
    unsigned refs;
    size_t len;
    char *p;
};

static void
shared_release(struct shared_body *sb)
{
    if (sb != NULL && --sb->refs == 0) {
        free(sb->p);
        free(sb);
    }
}

struct dm_admin {
    uv_tcp_t tcp;
    uv_timer_t timer; /* bounds pending commands */
    bool timer_open;
    uv_check_t turn_end; /* drops the pages at the end of the turn that built them */
    struct shared_body *page[PAGES];
    uint64_t metrics_built;
    struct dm_hosts *hosts;
    struct dm_worker *workers;
    unsigned nworkers;
    struct admin_conn *pending; /* commands waiting for every worker's acknowledgement */
    struct admin_conn *conns;   /* every open connection, the newest first */
    unsigned nconns;
    bool stopping;
    struct dm_powermgr *power;
    const char *token; /* POSTs need "Authorization: Bearer <token>"; NULL: none */
    bool loopback;     /* bound to a loopback address: POSTs without a token are taken */
    bool token_reads;  /* GETs of /stats, /metrics and /power need the token too */
    double start_unix_s;
    /* Refused requests (401, 403) are logged one a second at most: when the last was, and how
     * many were refused since without a line of their own. */
    uint64_t refused_ms;
    bool refused_logged;
    unsigned long refused_quiet;
};

struct admin_conn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    struct dm_admin *admin;
    size_t len;
    char *out, *out_body;       /* the answer's head and body, until written */
    struct shared_body *shared; /* the body, when it is shared */
    bool answered;
    bool head;         /* a HEAD request: the answer's head alone */
    const char *allow; /* a 405's Allow header, else NULL */
    bool waiting;      /* in the admin's pending list */
    bool lingering;    /* answered, written, shut down: reading to the client's close */
    bool no_linger; /* closed once its answer is written (pushed out for room: it sent nothing) */
    uint64_t opened_ms;
    uint64_t linger_until_ms;
    uv_shutdown_t sreq;
    struct admin_conn *cprev, *cnext; /* in the admin's conns */
    /* A command waiting for its acknowledgements. */
    struct admin_conn *next;
    struct dm_host *host;
    const char *command;
    uint64_t epoch;
    uint64_t deadline_ms;
    char req[ADMIN_REQ_MAX];
};

static struct dm_catalog *admin_catalog;

/* The shared pages are built again at their next read: something they show changed. */
static void
pages_drop(struct dm_admin *a)
{
    for (size_t i = 0; i < PAGES; i++) {
        shared_release(a->page[i]);
        a->page[i] = NULL;
    }
}

/* proxy/dashboard.html, embedded by the build (cmake/embed.cmake). */
extern const unsigned char dm_dashboard_html[];
extern const unsigned long dm_dashboard_html_len;

void
dm_admin_set_catalog(struct dm_catalog *c)
{
    admin_catalog = c;
}

static const char *
power_name(int p)
{
    switch (p) {
    case DM_POWER_AWAKE:
        return "awake";
    case DM_POWER_ASLEEP:
        return "asleep";
    case DM_POWER_BOOTING:
        return "booting";
    case DM_POWER_DRAINING:
        return "draining";
    case DM_POWER_FAILED:
        return "failed";
    case DM_POWER_MAINT:
        return "maint";
    default:
        return "?";
    }
}

/* Milliseconds since the monotonic time t_us, 0 when t_us is 0 (never) or later. */
static unsigned long long
ms_since(uint64_t now_us, uint64_t t_us)
{
    return t_us > 0 && now_us > t_us ? (unsigned long long)((now_us - t_us) / 1000) : 0;
}

/* One host's state and counters as a JSON object. */
static void
host_json(struct dm_sbuf *b, const struct dm_host *h, uint64_t now_us)
{
    uint64_t until = atomic_load(&h->down_until_us);
    const char *state = atomic_load(&h->down) ? "down" : until > now_us ? "failing" : "up";
    char text[DM_JSON_TEXT];
    dm_sb_printf(b,
                 "{\"host\":\"%s\",\"state\":\"%s\",\"power\":\"%s\",\"power_for_ms\":%llu,"
                 "\"inflight\":%llu,\"started\":%llu,\"server_connections\":%llu,"
                 "\"bound_clients\":%llu}",
                 dm_json_esc(text, sizeof(text), h->text), state,
                 power_name(atomic_load(&h->power)),
                 ms_since(now_us, atomic_load(&h->power_since_us)),
                 (unsigned long long)dm_counter_get(&h->inflight),
                 (unsigned long long)dm_counter_get(&h->started),
                 (unsigned long long)dm_counter_get(&h->connections),
                 (unsigned long long)dm_counter_get(&h->bound));
}

/*
 * The limits' counters, summed over the workers: accept_pauses (times a
 * worker at limits.max_conns stopped accepting), paused_workers (those
 * paused now), open_files (the open-file limit), sockets (client and
 * server connections open), clients (client connections among them),
 * socket_cap (the descriptors the open-file limit leaves them: accepting
 * pauses once sockets + clients reach it) and refused (connections closed at once, by the limit,
 * and requests answered 429 by limits.rate).
 */
static void
limits_json(struct dm_sbuf *b, const struct dm_admin *a)
{
    struct dm_limits_counts l;
    dm_workers_limits(a->workers, a->nworkers, &l);
    dm_sb_printf(b,
                 ",\"limits\":{\"accept_pauses\":%llu,\"paused_workers\":%llu,"
                 "\"open_files\":%llu,\"sockets\":%llu,\"clients\":%llu,"
                 "\"socket_cap\":%llu,"
                 "\"refused\":{\"max_conns_per_client\":%llu,\"rate\":%llu}}",
                 (unsigned long long)l.accept_pauses, (unsigned long long)l.paused_workers,
                 (unsigned long long)l.open_files, (unsigned long long)l.sockets,
                 (unsigned long long)l.clients, (unsigned long long)l.socket_cap,
                 (unsigned long long)l.per_client, (unsigned long long)l.rate);
}

/*
 * JSON of every pool and server of the current runtime. Per server: its
 * host's state (host: the address as its host first saw it written; state,
 * power, down_for_ms, fails, server_connections, bound_clients: shared by
 * every pool naming the address), then the pool's own load counters. A
 * session pool has its placer's state besides (proxy/session.h).
 */
static void
stats_json(struct dm_sbuf *b, const struct dm_admin *a)
{
    struct dm_runtime *rt = dm_runtime_current();
    dm_sb_printf(b, "{\"generation\":%llu,\"pools\":[",
                 (unsigned long long)(rt != NULL ? rt->generation : 0));
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
    for (size_t i = 0; rt != NULL && i < rt->npools; i++) {
        struct dm_rpool *p = &rt->pools[i];
        char name[DM_JSON_TEXT], addr[DM_JSON_TEXT], host[DM_JSON_TEXT];
        dm_sb_printf(b, "%s{\"name\":\"%s\",\"balance\":\"%s\",\"servers\":[", i ? "," : "",
                     dm_json_esc(name, sizeof(name), p->cf->name), p->cf->balance);
        for (size_t j = 0; j < p->sv->n; j++) {
            struct dm_server *s = &p->sv->s[j];
            const struct dm_host *h = s->host;
            const char *state = "up";
            if (atomic_load(&h->down)) {
                state = "down";
            } else if (atomic_load(&h->down_until_us) > now) {
                state = "failing";
            }
            uint64_t until = atomic_load(&h->down_until_us);
            dm_sb_printf(
                b,
                "%s{\"name\":\"%s\",\"address\":\"%s\",\"host\":\"%s\",\"state\":\"%s\","
                "\"power\":\"%s\",\"down_for_ms\":%llu,\"fails\":%u,"
                "\"server_connections\":%llu,\"bound_clients\":%llu,\"weight\":%u,"
                "\"capacity\":%u,\"max_conns\":%u,\"connections\":%llu,\"inflight\":%llu,"
                "\"picks\":%llu,"
                "\"requests\":%llu,\"failures\":%llu,\"inflight_work\":%lld,"
                "\"potential\":%lld}",
                j ? "," : "", dm_json_esc(name, sizeof(name), s->name),
                dm_json_esc(addr, sizeof(addr), p->cf->servers[j].addr.text),
                dm_json_esc(host, sizeof(host), h->text), state, power_name(atomic_load(&h->power)),
                (unsigned long long)(until > now ? (until - now) / 1000 : 0),
                atomic_load(&h->fails), (unsigned long long)dm_counter_get(&h->connections),
                (unsigned long long)dm_counter_get(&h->bound), s->weight, s->capacity,
                p->cf->servers[j].max_conns, (unsigned long long)dm_counter_get(&s->conns),
                (unsigned long long)dm_counter_get(&s->inflight),
                (unsigned long long)dm_counter_get(&s->picks),
                (unsigned long long)dm_counter_get(&s->requests),
                (unsigned long long)dm_counter_get(&s->failures),
                (long long)atomic_load_explicit(&s->inflight_work, memory_order_relaxed),
                (long long)atomic_load_explicit(&s->potential, memory_order_relaxed));
        }
        dm_sb_printf(b,
                     "],\"queue\":{\"now\":%llu,\"peak\":%llu,\"max_queue\":%u,"
                     "\"order\":\"%s\",\"timeout_ms\":%llu,\"timeouts\":%llu,\"full\":%llu}",
                     (unsigned long long)dm_counter_get(&p->queued),
                     (unsigned long long)dm_counter_get(&p->queue_peak), p->cf->max_queue,
                     p->cf->queue_order == DM_QO_SIZE   ? "size"
                     : p->cf->queue_order == DM_QO_PAGE ? "page"
                                                        : "arrival",
                     (unsigned long long)rt->conf->timeouts.queue_ms,
                     (unsigned long long)dm_counter_get(&p->queue_timeouts),
                     (unsigned long long)dm_counter_get(&p->queue_full));
        if (p->placer != NULL) {
            /* The session allocator's state: per server its groups, sessions and load. */
            dm_sb_printf(b, ",\"session\":");
            dm_placer_stats_json(p->placer, b);
        }
        dm_sb_printf(b, "}");
    }
    dm_sb_printf(b, "]");
    if (a->hosts != NULL) {
        dm_sb_printf(b, ",\"hosts\":[");
        for (size_t i = 0; i < a->hosts->n; i++) {
            dm_sb_printf(b, "%s", i ? "," : "");
            host_json(b, a->hosts->h[i], now);
        }
        dm_sb_printf(b, "]");
    }
    limits_json(b, a);
    dm_sb_printf(b, ",");
    dm_power_stats_json(a->power, b);
    if (admin_catalog != NULL) {
        struct dm_catalog_stats cs;
        dm_catalog_stats(admin_catalog, &cs);
        dm_sb_printf(b,
                     ",\"catalog\":{\"pages\":%llu,\"objects\":%llu,\"bytes\":%llu,\"cap\":%llu,"
                     "\"hits\":%llu,\"misses\":%llu,\"evictions\":%llu}",
                     (unsigned long long)cs.pages, (unsigned long long)cs.objects,
                     (unsigned long long)cs.bytes, (unsigned long long)cs.cap,
                     (unsigned long long)cs.hits, (unsigned long long)cs.misses,
                     (unsigned long long)cs.evictions);
    }
    dm_sb_printf(b, "}\n");
    dm_runtime_unref(rt);
}

static void
conn_closed(uv_handle_t *h)
{
    struct admin_conn *ac = h->data;
    struct dm_admin *a = ac->admin;
    if (ac->cprev != NULL) {
        ac->cprev->cnext = ac->cnext;
    } else {
        a->conns = ac->cnext;
    }
    if (ac->cnext != NULL) {
        ac->cnext->cprev = ac->cprev;
    }
    a->nconns--;
    free(ac->out);
    free(ac->out_body);
    shared_release(ac->shared);
    free(ac);
}

static void
conn_close(struct admin_conn *ac)
{
    if (!uv_is_closing((uv_handle_t *)&ac->tcp)) {
        uv_close((uv_handle_t *)&ac->tcp, conn_closed);
    }
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

static void
shut(uv_shutdown_t *req, int status)
{
    if (status < 0) {
        conn_close(req->data);
    }
}

static void
written(uv_write_t *w, int status)
{
    struct admin_conn *ac = w->data;
    if (status < 0 || ac->no_linger || ac->admin->stopping ||
        uv_is_closing((uv_handle_t *)&ac->tcp)) {
        conn_close(ac); /* also when the write was cancelled by a close */
        return;
    }
    /* The answer is out: FIN, then what the client still sends is dropped
     * until it closes, or ADMIN_LINGER_MS. */
    ac->lingering = true;
    ac->linger_until_ms = uv_now(ac->tcp.loop) + ADMIN_LINGER_MS;
    ac->len = 0;
    ac->sreq.data = ac;
    if (uv_shutdown(&ac->sreq, (uv_stream_t *)&ac->tcp, shut) < 0 ||
        uv_read_start((uv_stream_t *)&ac->tcp, alloc_cb, read_cb) < 0) {
        conn_close(ac);
    }
}

static void
alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct admin_conn *ac = h->data;
    *buf = uv_buf_init(ac->req + ac->len, (unsigned)(ADMIN_REQ_MAX - 1 - ac->len));
}

/* Writes the answer; its body, which the connection holds already (out_body
 * or shared), is written as it is: a /metrics of many servers is tens of MB. */
static void
respond_with(struct admin_conn *ac, const char *status, const char *type, char *body, size_t len)
{
    struct dm_sbuf out = { 0 };
    dm_sb_printf(&out,
                 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
                 "Cache-Control: no-store\r\n%s%s%s\r\n",
                 status, type, len, ac->allow != NULL ? "Allow: " : "",
                 ac->allow != NULL ? ac->allow : "", ac->allow != NULL ? "\r\n" : "");
    ac->out = out.p;
    uv_buf_t b[2] = { uv_buf_init(out.p, (unsigned)out.len),
                      uv_buf_init(body, ac->head ? 0 : (unsigned)len) };
    ac->wreq.data = ac;
    if (out.p == NULL || (len > 0 && body == NULL) || len > UINT_MAX ||
        uv_write(&ac->wreq, (uv_stream_t *)&ac->tcp, b, b[1].len > 0 ? 2 : 1, written) < 0) {
        conn_close(ac);
    }
}

/* Sends status and body (taken) and closes the connection once written. */
static void
respond(struct admin_conn *ac, const char *status, const char *type, struct dm_sbuf body)
{
    ac->out_body = body.p;
    respond_with(ac, status, type, body.p, body.len);
}

static void
respond_text(struct admin_conn *ac, const char *status, const char *text)
{
    struct dm_sbuf body = { 0 };
    dm_sb_printf(&body, "%s\n", text);
    respond(ac, status, "text/plain", body);
}

/* Answers a request that is not read to its end (too long, too slow), and closes. */
static void
refuse(struct admin_conn *ac, const char *status, const char *text)
{
    ac->answered = true;
    uv_read_stop((uv_stream_t *)&ac->tcp);
    respond_text(ac, status, text);
}

/*
 * The host ADDR of a command path names: the address as a configuration
 * wrote it ("backend1:8080", as /stats shows it), or a numeric address that
 * equals the host's ("127.0.0.1:8081", "[::1]:8081"). NULL when none.
 */
static struct dm_host *
find_host(const struct dm_admin *a, const char *addr)
{
    if (a->hosts == NULL) {
        return NULL;
    }
    /* A name may have stood for other addresses before a reload (DNS moved
     * it): the table keeps those hosts too, under the same text, so the
     * hosts the running configuration serves with are asked first. */
    struct dm_host *named = NULL;
    struct dm_runtime *rt = dm_runtime_current();
    for (size_t i = 0; rt != NULL && named == NULL && i < rt->npools; i++) {
        const struct dm_servers *sv = rt->pools[i].sv;
        for (size_t j = 0; named == NULL && j < sv->n; j++) {
            const char *text = sv->s[j].host->text;
            named = text != NULL && strcmp(text, addr) == 0 ? sv->s[j].host : NULL;
        }
    }
    dm_runtime_unref(rt);
    for (size_t i = 0; named == NULL && i < a->hosts->n; i++) {
        if (a->hosts->h[i]->text != NULL && strcmp(a->hosts->h[i]->text, addr) == 0) {
            named = a->hosts->h[i];
        }
    }
    if (named != NULL) {
        return named;
    }
    char host[INET6_ADDRSTRLEN + 2];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || (size_t)(colon - addr) >= sizeof(host) || colon[1] == 0) {
        return NULL;
    }
    const char *start = addr;
    size_t len = (size_t)(colon - addr);
    if (len >= 2 && addr[0] == '[' && addr[len - 1] == ']') {
        start++;
        len -= 2;
    }
    memcpy(host, start, len);
    host[len] = 0;
    struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                              .ai_socktype = SOCK_STREAM };
    struct addrinfo *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0) {
        return NULL;
    }
    struct sockaddr_storage sa = { 0 };
    memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    for (size_t i = 0; i < a->hosts->n; i++) {
        if (dm_host_addr_equal(&a->hosts->h[i]->addr, &sa)) {
            return a->hosts->h[i];
        }
    }
    return NULL;
}

/* Answers a command: 200 once every worker acknowledged its epoch, else 504. */
static void
command_answer(struct admin_conn *ac, unsigned acked)
{
    struct dm_admin *a = ac->admin;
    pages_drop(a); /* the workers have acted on it: a read after this answer sees it */
    struct dm_sbuf body = { 0 };
    dm_sb_printf(&body, "{\"command\":\"%s\",\"epoch\":%llu,\"workers\":%u,\"acked\":%u,",
                 ac->command, (unsigned long long)ac->epoch, a->nworkers, acked);
    /* Read after every acknowledgement: for a drain, `started` is final. */
    dm_sb_printf(&body, "\"after\":");
    host_json(&body, ac->host, dm_mono_us());
    dm_sb_printf(&body, "}\n");
    respond(ac, acked == a->nworkers ? "200 OK" : "504 Gateway Timeout", "application/json", body);
}

static void admin_timer_cb(uv_timer_t *t);

/* Answers the pending commands that every worker acknowledged, or that expired. */
static void
pending_check(struct dm_admin *a, bool stopping)
{
    uint64_t now = uv_now(a->tcp.loop);
    struct admin_conn **pp = &a->pending;
    while (*pp != NULL) {
        struct admin_conn *ac = *pp;
        unsigned acked = dm_workers_acked(a->workers, a->nworkers, ac->epoch);
        if (acked == a->nworkers || now >= ac->deadline_ms || stopping) {
            *pp = ac->next;
            ac->waiting = false;
            command_answer(ac, acked);
        } else {
            pp = &ac->next;
        }
    }
}

/* A request not in within ADMIN_REQ_MS is answered 408, an answer not read within
 * ADMIN_CONN_MS is dropped. A command waiting for the workers is not: it is answered
 * within ADMIN_ACK_MS. */
static void
conns_reap(struct dm_admin *a)
{
    uint64_t now = uv_now(a->tcp.loop);
    for (struct admin_conn *ac = a->conns; ac != NULL; ac = ac->cnext) {
        uint64_t age = now - ac->opened_ms;
        if (ac->waiting || uv_is_closing((uv_handle_t *)&ac->tcp)) {
            continue;
        }
        if (ac->lingering && now >= ac->linger_until_ms) {
            conn_close(ac);
        } else if (!ac->answered && age >= ADMIN_REQ_MS) {
            refuse(ac, "408 Request Timeout",
                   "the request did not come in within " DM_STR(ADMIN_REQ_S) " s");
        } else if (ac->answered && age >= ADMIN_CONN_MS) {
            conn_close(ac);
        }
    }
}

static void
admin_timer_cb(uv_timer_t *t)
{
    struct dm_admin *a = t->data;
    pending_check(a, false);
    conns_reap(a);
    if (a->pending == NULL && a->conns == NULL) {
        uv_timer_stop(&a->timer);
    }
}

/* The timer runs while a command waits or a connection is open. */
static void
timer_wanted(struct dm_admin *a)
{
    if (a->timer_open && !uv_is_active((uv_handle_t *)&a->timer)) {
        uv_timer_start(&a->timer, admin_timer_cb, ADMIN_POLL_MS, ADMIN_POLL_MS);
    }
}

void
dm_admin_acked(struct dm_admin *a)
{
    if (a != NULL) {
        pending_check(a, false);
    }
}

/* POST /hosts/ADDR/COMMAND: sends it to every worker, answers once acknowledged. */
static void
command(struct admin_conn *ac, const char *path)
{
    struct dm_admin *a = ac->admin;
    char addr[ADMIN_TARGET_MAX];
    const char *slash = strrchr(path, '/');
    size_t len = slash != NULL ? (size_t)(slash - path) : 0;
    if (len == 0 || len >= sizeof(addr)) {
        respond_text(ac, "404 Not Found",
                     "expected POST /hosts/ADDR/drain|ready|close-idle|wake|sleep|maint");
        return;
    }
    memcpy(addr, path, len);
    addr[len] = 0;
    struct dm_host *h = find_host(a, addr);
    const char *cmd = slash + 1;
    if (h == NULL) {
        respond_text(ac, "404 Not Found", "no such host (GET /stats lists them)");
        return;
    }
    if (a->workers == NULL || !a->timer_open) {
        respond_text(ac, "503 Service Unavailable", "workers not running");
        return;
    }
    static const char *const power_actions[] = { "wake", "sleep", "maint", "drain", "ready" };
    for (size_t i = 0; i < sizeof(power_actions) / sizeof(power_actions[0]); i++) {
        if (strcmp(cmd, power_actions[i]) != 0) {
            continue;
        }
        if (!dm_power_manages(a->power, h)) {
            if (i < 3) {
                respond_text(ac, "409 Conflict",
                             "the host is not a server of a power-managed pool");
                return;
            }
            break; /* drain and ready of any host: below */
        }
        char msg[160];
        int st = dm_power_admin(a->power, h, cmd, &ac->epoch, msg, sizeof(msg));
        if (st != 200) {
            respond_text(ac, st == 409 ? "409 Conflict" : "404 Not Found", msg);
            return;
        }
        ac->command = power_actions[i];
        goto wait;
    }
    if (strcmp(cmd, "drain") == 0) {
        ac->command = "drain";
        ac->epoch =
            dm_workers_set_power(a->workers, a->nworkers, h, DM_POWER_DRAINING, dm_mono_us());
    } else if (strcmp(cmd, "ready") == 0) {
        ac->command = "ready";
        ac->epoch = dm_workers_set_power(a->workers, a->nworkers, h, DM_POWER_AWAKE, dm_mono_us());
    } else if (strcmp(cmd, "close-idle") == 0) {
        ac->command = "close-idle";
        ac->epoch = dm_workers_close_idle(a->workers, a->nworkers, h);
    } else {
        respond_text(ac, "404 Not Found",
                     "expected POST /hosts/ADDR/drain|ready|close-idle|wake|sleep|maint");
        return;
    }
wait:
    dm_log_info("admin: %s %s (command epoch %llu)", ac->command, h->text,
                (unsigned long long)ac->epoch);
    ac->host = h;
    ac->deadline_ms = uv_now(a->tcp.loop) + ADMIN_ACK_MS;
    ac->next = a->pending;
    a->pending = ac;
    ac->waiting = true;
    timer_wanted(a);
    pending_check(a, false); /* no workers at all: answered at once */
}

/*
 * The first header name in the head after the line where `from` points
 * (the head NUL-terminated, its lines ending in CRLF or LF, its end a blank
 * line: a body is not a header): its value without the spaces about it,
 * *len its length, *next where to look for the next one; NULL when none.
 * Header names are case-insensitive.
 */
static const char *
header_from(const char *from, const char *name, size_t *len, const char **next)
{
    size_t nlen = strlen(name);
    for (const char *p = strchr(from, '\n'); p != NULL; p = strchr(p + 1, '\n')) {
        const char *line = p + 1;
        if (*line == '\n' || (line[0] == '\r' && line[1] == '\n') || *line == 0) {
            break;
        }
        if (strncasecmp(line, name, nlen) != 0 || line[nlen] != ':') {
            continue;
        }
        const char *v = line + nlen + 1;
        v += strspn(v, " \t");
        size_t n = strcspn(v, "\r\n");
        while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) {
            n--;
        }
        *len = n;
        *next = v;
        return v;
    }
    return NULL;
}

/* The first value of header name in the head (NULL when absent); *count is how many it has. */
static const char *
header(const char *head, const char *name, size_t *len, unsigned *count)
{
    const char *first = NULL, *next = head, *v;
    size_t n;
    *count = 0;
    *len = 0;
    while ((v = header_from(next, name, &n, &next)) != NULL) {
        if ((*count)++ == 0) {
            first = v;
            *len = n;
        }
    }
    return first;
}

/*
 * A 401 or 403 answered, logged with the client's address: one line a second
 * at most, a flood of them counted in the next line, not written each.
 */
static void
deny(struct admin_conn *ac, const char *status, const char *text)
{
    struct dm_admin *a = ac->admin;
    uint64_t now = uv_now(a->tcp.loop);
    if (a->refused_logged && now - a->refused_ms < 1000) {
        a->refused_quiet++;
    } else {
        struct sockaddr_storage ss;
        int len = (int)sizeof(ss);
        char peer[DM_ADDR_TEXT];
        const char *who = uv_tcp_getpeername(&ac->tcp, (struct sockaddr *)&ss, &len) == 0
                              ? dm_addr_text((const struct sockaddr *)&ss, peer, sizeof(peer))
                              : "?";
        if (a->refused_quiet > 0) {
            dm_log_info("admin: a request from %s refused: %s (and %lu more since the last line)",
                        who, status, a->refused_quiet);
        } else {
            dm_log_info("admin: a request from %s refused: %s", who, status);
        }
        a->refused_ms = now;
        a->refused_logged = true;
        a->refused_quiet = 0;
    }
    respond_text(ac, status, text);
}

/*
 * POSTs change state (and with token_reads, GETs of the data need the token
 * too): taken from anyone on a loopback admin listener without
 * a token, else only with one "Authorization: Bearer <token>" whose value
 * after the scheme (in any case) and its spaces is the token and nothing
 * else (a 400, 401 or 403 is answered here).
 */
static bool
authorized(struct admin_conn *ac)
{
    const struct dm_admin *a = ac->admin;
    if (a->token == NULL) {
        if (a->loopback) {
            return true;
        }
        deny(ac, "403 Forbidden",
             "the admin listener is not on loopback: set power.admin_token_file");
        return false;
    }
    size_t n;
    unsigned count;
    const char *v = header(ac->req, "Authorization", &n, &count);
    if (count > 1) {
        respond_text(ac, "400 Bad Request", "one Authorization header at most");
        return false;
    }
    if (v != NULL) {
        /* The value to its line's end: a bare CR is part of it, not an end. */
        n = strcspn(v, "\n");
        if (n > 0 && v[n - 1] == '\r') {
            n--;
        }
        while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) {
            n--;
        }
        if (n > 7 && strncasecmp(v, "Bearer ", 7) == 0) {
            size_t at = 7 + strspn(v + 7, " ");
            size_t given = n > at ? n - at : 0;
            /* The length is not secret; the bytes are compared in constant time. */
            if (given == strlen(a->token) && CRYPTO_memcmp(v + at, a->token, given) == 0) {
                return true;
            }
        }
    }
    deny(ac, "401 Unauthorized", "a bearer token is needed (power.admin_token_file)");
    return false;
}

/* Decodes the %XX of path in place; false for a bad one, or one that gives NUL. */
static bool
percent_decode(char *path)
{
    char *out = path;
    for (const char *in = path; *in != 0; in++) {
        if (*in != '%') {
            *out++ = *in;
            continue;
        }
        if (!isxdigit((unsigned char)in[1]) || !isxdigit((unsigned char)in[2])) {
            return false;
        }
        char hex[3] = { in[1], in[2], 0 };
        long v = strtol(hex, NULL, 16);
        if (v == 0) {
            return false;
        }
        *out++ = (char)v;
        in += 2;
    }
    *out = 0;
    return true;
}

/*
 * The one parameter a POST takes: the query is empty (*val NULL) or
 * "key=VALUE", VALUE percent-decoded in place into *val. Anything else (another
 * key, a second parameter, a bad %XX) is answered 400 here and gives false:
 * an operator's typo is never taken for no parameter. key NULL: none at all.
 */
static bool
query_param(struct admin_conn *ac, char *query, const char *key, char **val)
{
    *val = NULL;
    if (query == NULL || *query == 0) {
        return true;
    }
    size_t klen = key != NULL ? strlen(key) : 0;
    if (key == NULL || strncmp(query, key, klen) != 0 || query[klen] != '=' ||
        strchr(query, '&') != NULL || strchr(query, ';') != NULL) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s%s%s", key != NULL ? "expected ?" : "",
                 key != NULL ? key : "this command takes no parameter",
                 key != NULL ? "=VALUE and no other parameter" : "");
        respond_text(ac, "400 Bad Request", msg);
        return false;
    }
    *val = query + klen + 1;
    if (!percent_decode(*val)) {
        respond_text(ac, "400 Bad Request", "bad percent-encoding in the query");
        return false;
    }
    return true;
}

/* POST /power/POOL/pin?servers=N, /power/POOL/unpin and /power/POOL/policy?name=P. */
static void
pin(struct admin_conn *ac, const char *path, char *query)
{
    char pool[ADMIN_TARGET_MAX], msg[256];
    const char *slash = strrchr(path, '/');
    size_t len = slash != NULL ? (size_t)(slash - path) : 0;
    if (slash == NULL || len == 0 || len >= sizeof(pool)) {
        respond_text(ac, "404 Not Found",
                     "expected POST /power/POOL/pin?servers=N, unpin or policy?name=P");
        return;
    }
    memcpy(pool, path, len);
    pool[len] = 0;
    long servers = -1;
    if (strcmp(slash + 1, "policy") == 0) {
        /* ?name=POLICY runs that policy; no name gives the config's back. */
        char *name;
        if (!query_param(ac, query, "name", &name)) {
            return;
        }
        int st =
            dm_power_choose(ac->admin->power, pool, name != NULL ? name : "", msg, sizeof(msg));
        respond_text(ac,
                     st == 200   ? "200 OK"
                     : st == 400 ? "400 Bad Request"
                                 : "404 Not Found",
                     msg);
        return;
    }
    if (strcmp(slash + 1, "pin") == 0) {
        char *n, *end = NULL;
        if (!query_param(ac, query, "servers", &n)) {
            return;
        }
        if (n != NULL && n[0] >= '0' && n[0] <= '9') {
            servers = strtol(n, &end, 10);
        }
        if (end == NULL || *end != 0 || servers < 0 || servers > 100000) {
            respond_text(ac, "400 Bad Request",
                         "expected ?servers=N, N a whole number from 0 to the pool's servers");
            return;
        }
    } else if (strcmp(slash + 1, "unpin") != 0) {
        respond_text(ac, "404 Not Found",
                     "expected POST /power/POOL/pin?servers=N, unpin or policy?name=P");
        return;
    } else {
        char *none;
        if (!query_param(ac, query, NULL, &none)) {
            return;
        }
    }
    int st = dm_power_pin(ac->admin->power, pool, servers, msg, sizeof(msg));
    respond_text(ac, st == 200 ? "200 OK" : st == 400 ? "400 Bad Request" : "404 Not Found", msg);
}

/*
 * Whether the Host value names this machine by an address or as localhost:
 * an IPv4 address in any form inet_aton takes (127.1, as curl sends it) or
 * IPv6 in brackets, which no DNS answer can rebind; localhost, or a name
 * under .localhost, which browsers resolve to loopback themselves (RFC 6761).
 */
static bool
host_is_local_name(const char *v, size_t len)
{
    char name[256];
    if (len == 0 || len >= sizeof(name)) {
        return false;
    }
    memcpy(name, v, len);
    name[len] = 0;
    if (name[0] == '[') {
        char *end = strchr(name, ']');
        if (end == NULL || (end[1] != 0 && end[1] != ':')) {
            return false;
        }
        *end = 0;
        struct in6_addr a6;
        return inet_pton(AF_INET6, name + 1, &a6) == 1;
    }
    char *colon = strchr(name, ':');
    if (colon != NULL) {
        *colon = 0;
    }
    size_t n = strlen(name);
    if (n > 0 && name[n - 1] == '.') {
        name[--n] = 0;
    }
    static const char sub[] = ".localhost";
    size_t sn = sizeof(sub) - 1;
    if (strcasecmp(name, "localhost") == 0 || (n > sn && strcasecmp(name + n - sn, sub) == 0)) {
        return true;
    }
    /* inet_aton stops at a blank: only the characters of a number. */
    struct in_addr a4;
    return n > 0 && strspn(name, "0123456789abcdefABCDEFxX.") == n && inet_aton(name, &a4) != 0;
}

/*
 * Whether every header line of the head is "name: value", its name a token
 * right before the colon: a folded line (obs-fold, RFC 9112, 5.2) or a line
 * without a name is refused, not read as part of another header or skipped.
 */
static bool
fields_ok(const char *head)
{
    for (const char *p = strchr(head, '\n'); p != NULL; p = strchr(p + 1, '\n')) {
        const char *line = p + 1;
        if (*line == '\n' || (line[0] == '\r' && line[1] == '\n') || *line == 0) {
            return true;
        }
        size_t name = dm_http_token_len(line);
        if (name == 0 || line[name] != ':') {
            return false;
        }
    }
    return true;
}

/*
 * What every request must be before it is acted on: a request line
 * "METHOD TARGET HTTP/1.x", header lines "name: value", one Host (HTTP/1.1), no body; on a loopback
 * listener (where POSTs need no token), a Host that names the machine by
 * address or as localhost, so that a page a browser loaded from a name
 * rebound to 127.0.0.1 is refused (DNS rebinding). Answers and returns false
 * when it is not; the method and the target (its path percent-decoded, the
 * query after a NUL) are filled when it is.
 */
static bool
request_ok(struct admin_conn *ac, char *method, size_t msize, char *target, size_t tsize,
           char **query)
{
    const char *req = ac->req;
    size_t mlen = strcspn(req, " \r\n");
    const char *t = req + mlen;
    size_t tlen = *t == ' ' ? strcspn(t + 1, " \r\n") : 0;
    if (mlen == 0 || tlen == 0 || dm_http_token_len(req) != mlen) {
        respond_text(ac, "400 Bad Request", "bad request line");
        return false;
    }
    if (tlen >= tsize) {
        /* Never a cut of it: the rest could change what it asks. */
        respond_text(ac, "414 URI Too Long", "request target over 511 bytes");
        return false;
    }
    const char *v = t + 1 + tlen;
    size_t vlen = *v == ' ' ? strcspn(v + 1, "\r\n") : 0;
    v++;
    if (vlen != 8 || strncmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
        v[7] < '0' || v[7] > '9') {
        respond_text(ac, "400 Bad Request", "bad request line (METHOD TARGET HTTP/1.1)");
        return false;
    }
    if (v[5] != '1') {
        respond_text(ac, "505 HTTP Version Not Supported", "HTTP/1.0 and HTTP/1.1 only");
        return false;
    }
    if (!fields_ok(req)) {
        respond_text(ac, "400 Bad Request", "a header line that is not \"name: value\"");
        return false;
    }
    /* A method longer than any this listener knows is one it does not
     * implement: 405 where the target exists, as another unknown one. */
    if (mlen >= msize) {
        mlen = 0;
    }
    memcpy(method, req, mlen);
    method[mlen] = 0;
    memcpy(target, t + 1, tlen);
    target[tlen] = 0;
    *query = strchr(target, '?');
    if (*query != NULL) {
        *(*query)++ = 0;
    }
    size_t hlen;
    unsigned hosts;
    const char *host = header(req, "Host", &hlen, &hosts);
    if (hosts > 1 || (hosts == 0 && v[7] != '0')) {
        respond_text(ac, "400 Bad Request", "one Host header, please");
        return false;
    }
    if (ac->admin->loopback && host != NULL && !host_is_local_name(host, hlen)) {
        deny(ac, "403 Forbidden",
             "a loopback admin listener answers requests to an address or localhost "
             "only, not to a name (a page could point one at this machine)");
        return false;
    }
    if (!percent_decode(target)) {
        respond_text(ac, "400 Bad Request", "bad percent-encoding in the request target");
        return false;
    }
    return true;
}

/*
 * A POST that a browser sent from another origin (a page of any site can
 * send a form's POST to 127.0.0.1 with no preflight) is refused: its Origin,
 * when given, must be this listener's own, as the Host names it, and
 * Sec-Fetch-Site, when given, same-origin or none.
 */
static bool
same_origin(struct admin_conn *ac)
{
    size_t olen, hlen, flen;
    unsigned n;
    const char *origin = header(ac->req, "Origin", &olen, &n);
    const char *host = header(ac->req, "Host", &hlen, &n);
    const char *site = header(ac->req, "Sec-Fetch-Site", &flen, &n);
    bool ok = true;
    if (origin != NULL) {
        size_t scheme = olen > 7 && strncasecmp(origin, "http://", 7) == 0    ? 7
                        : olen > 8 && strncasecmp(origin, "https://", 8) == 0 ? 8
                                                                              : 0;
        ok = scheme > 0 && host != NULL && olen - scheme == hlen &&
             strncasecmp(origin + scheme, host, hlen) == 0;
    }
    if (site != NULL && !(flen == 11 && strncasecmp(site, "same-origin", 11) == 0) &&
        !(flen == 4 && strncasecmp(site, "none", 4) == 0)) {
        ok = false;
    }
    if (!ok) {
        deny(ac, "403 Forbidden", "a POST from another origin is refused");
    }
    return ok;
}

/* Admin requests carry no body: one given is refused before anything is done. */
static bool
no_body(struct admin_conn *ac)
{
    size_t len, te_len;
    unsigned n, te;
    const char *cl = header(ac->req, "Content-Length", &len, &n);
    header(ac->req, "Transfer-Encoding", &te_len, &te);
    if (te > 0 || n > 1 || (cl != NULL && strspn(cl, "0") != len)) {
        respond_text(ac, "413 Content Too Large", "admin requests take no body");
        return false;
    }
    return true;
}

static void
turn_ended(uv_check_t *h)
{
    uv_check_stop(h);
    pages_drop(h->data);
}

/* A page's body of this turn of the loop, built by its first read. */
static struct shared_body *
page_of_turn(struct dm_admin *a, enum page page)
{
    if (a->page[page] != NULL) {
        return a->page[page];
    }
    struct dm_sbuf body = { 0 };
    if (page == PAGE_METRICS) {
        struct dm_metrics_view v = {
            .workers = a->workers,
            .nworkers = a->workers != NULL ? a->nworkers : 0,
            .hosts = a->hosts,
            .catalog = admin_catalog,
            .power = a->power,
            .start_unix_s = a->start_unix_s,
            .bodies = ++a->metrics_built,
        };
        dm_metrics_text(&body, &v);
    } else if (page == PAGE_STATS) {
        stats_json(&body, a);
    } else {
        dm_power_json(a->power, &body);
    }
    struct shared_body *sb = malloc(sizeof(*sb));
    if (sb == NULL || (body.len > 0 && body.p == NULL)) {
        free(sb);
        free(body.p);
        return NULL;
    }
    *sb = (struct shared_body){ .refs = 1, .len = body.len, .p = body.p };
    a->page[page] = sb;
    uv_check_start(&a->turn_end, turn_ended);
    return sb;
}

/* Answers with the page of this turn. */
static void
respond_page(struct admin_conn *ac, enum page page, const char *type)
{
    struct shared_body *sb = page_of_turn(ac->admin, page);
    if (sb == NULL) {
        conn_close(ac);
        return;
    }
    sb->refs++;
    ac->shared = sb;
    respond_with(ac, "200 OK", type, sb->p, sb->len);
}

static void
answer(struct admin_conn *ac)
{
    ac->answered = true;
    uv_read_stop((uv_stream_t *)&ac->tcp);
    ac->req[ac->len] = 0;
    /* HEAD is GET without the body (RFC 9110, 9.3.2), its errors too. */
    ac->head = strncmp(ac->req, "HEAD ", 5) == 0;
    char method[8], target[ADMIN_TARGET_MAX];
    char *q;
    if (!request_ok(ac, method, sizeof(method), target, sizeof(target), &q)) {
        return;
    }
    bool get = strcmp(method, "GET") == 0 || ac->head;
    bool post = strcmp(method, "POST") == 0;
    if (post && (!same_origin(ac) || !authorized(ac))) {
        return;
    }
    /* The pages that are the same for everyone (the dashboard's, the help)
     * need no token: the dashboard sends it with its reads. */
    if (get && ac->admin->token_reads && strcmp(target, "/") != 0 && strcmp(target, "/help") != 0 &&
        !authorized(ac)) {
        return;
    }
    if (!no_body(ac)) {
        return;
    }
    if (post) {
        pages_drop(ac->admin); /* what it changes is seen by any read after it */
    }
    if (strcmp(target, "/power") == 0 && get) {
        respond_page(ac, PAGE_POWER, "application/json");
    } else if (strncmp(target, "/power/", 7) == 0 && post) {
        pin(ac, target + 7, q);
    } else if (strcmp(target, "/metrics") == 0 && get) {
        respond_page(ac, PAGE_METRICS, "text/plain; version=0.0.4; charset=utf-8");
    } else if (strcmp(target, "/stats") == 0 && get) {
        respond_page(ac, PAGE_STATS, "application/json");
    } else if (strcmp(target, "/") == 0 && get) {
        struct dm_sbuf body = { 0 };
        dm_sb_printf(&body, "%.*s", (int)dm_dashboard_html_len, (const char *)dm_dashboard_html);
        respond(ac, "200 OK", "text/html; charset=utf-8", body);
    } else if (strcmp(target, "/help") == 0 && get) {
        respond_text(ac, "200 OK",
                     "dimmer admin\n"
                     "  GET  /                        the dashboard (a page for a browser)\n"
                     "  GET  /help                    this text\n"
                     "  GET  /stats                   pools, servers and hosts as JSON\n"
                     "  GET  /metrics                 the same and more, for Prometheus\n"
                     "  POST /hosts/ADDR/drain        no new request to the host; "
                     "its idle connections close\n"
                     "  POST /hosts/ADDR/ready        the host takes requests again\n"
                     "  POST /hosts/ADDR/close-idle   close the idle connections to the host\n"
                     "  GET  /power                   the power manager: pools, servers, "
                     "decisions\n"
                     "  POST /hosts/ADDR/wake|sleep|maint   power actions (ready: back to "
                     "the manager)\n"
                     "  POST /power/POOL/pin?servers=N, /power/POOL/unpin\n"
                     "  POST /power/POOL/policy?name=P   run policy P (no name: the config's)\n"
                     "  (each POST answers once every worker has acknowledged it)");
    } else if (strncmp(target, "/hosts/", 7) == 0 && post) {
        char *none;
        if (query_param(ac, q, NULL, &none)) {
            command(ac, target + 7);
        }
    } else if (strcmp(target, "/stats") == 0 || strcmp(target, "/") == 0 ||
               strcmp(target, "/metrics") == 0 || strcmp(target, "/help") == 0 ||
               strncmp(target, "/hosts/", 7) == 0 || strcmp(target, "/power") == 0 ||
               strncmp(target, "/power/", 7) == 0) {
        ac->allow = strncmp(target, "/hosts/", 7) == 0 || strncmp(target, "/power/", 7) == 0
                        ? "POST"
                        : "GET, HEAD";
        respond_text(ac, "405 Method Not Allowed", "method not allowed");
    } else {
        respond_text(ac, "404 Not Found", "not found");
    }
}

static void
read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    struct admin_conn *ac = s->data;
    if (ac->lingering) {
        if (nread < 0) {
            conn_close(ac); /* the client's close, at last */
        }
        ac->len = 0; /* dropped */
        return;
    }
    if (ac->answered) {
        return;
    }
    if (nread < 0) {
        conn_close(ac);
        return;
    }
    if (memchr(ac->req + ac->len, 0, (size_t)nread) != NULL) {
        refuse(ac, "400 Bad Request", "a NUL byte in the request");
        return;
    }
    ac->len += (size_t)nread;
    ac->req[ac->len] = 0;
    if (strstr(ac->req, "\n\r\n") != NULL || strstr(ac->req, "\n\n") != NULL) {
        answer(ac);
    } else if (ac->len >= ADMIN_REQ_MAX - 1) {
        refuse(ac, "431 Request Header Fields Too Large", "the request is over 8 KiB");
    }
}

static void
on_conn(uv_stream_t *server, int status)
{
    if (status < 0) {
        return;
    }
    struct admin_conn *ac = calloc(1, sizeof(*ac));
    if (ac == NULL) {
        return;
    }
    if (uv_tcp_init(server->loop, &ac->tcp) < 0) {
        free(ac); /* never initialized: no close */
        return;
    }
    struct dm_admin *a = server->data;
    ac->tcp.data = ac;
    ac->admin = a;
    ac->opened_ms = uv_now(server->loop);
    ac->cnext = a->conns;
    if (a->conns != NULL) {
        a->conns->cprev = ac;
    }
    a->conns = ac;
    a->nconns++;
    if (uv_accept(server, (uv_stream_t *)&ac->tcp) < 0 || a->stopping ||
        uv_read_start((uv_stream_t *)&ac->tcp, alloc_cb, read_cb) < 0) {
        conn_close(ac);
        return;
    }
    if (a->nconns > DM_ADMIN_CONNS_MAX) {
        /* The oldest one still sending its request makes room: a few idle
         * connections do not lock the operator out. Nor do clients that
         * never read their answers: the oldest answer still being written
         * is cut before a newcomer is turned away. */
        struct admin_conn *old = NULL, *done = NULL, *unread = NULL;
        for (struct admin_conn *o = ac->cnext; o != NULL; o = o->cnext) {
            if (uv_is_closing((uv_handle_t *)&o->tcp)) {
                continue;
            }
            if (o->lingering) {
                done = o;
            } else if (!o->answered) {
                old = o;
            } else if (o->out != NULL && !o->waiting) {
                unread = o;
            }
        }
        if (done != NULL) {
            conn_close(done); /* answered already: what it still sends is dropped anyway */
        } else if (old != NULL) {
            old->no_linger = true; /* its place is given back once the 503 is out */
            refuse(old, "503 Service Unavailable", "too many admin connections");
        } else if (unread != NULL) {
            dm_log_debug("admin: %d connections: the oldest answer not yet read is cut",
                         DM_ADMIN_CONNS_MAX);
            conn_close(unread);
        } else {
            conn_close(ac); /* all of them waiting for the workers: this one waits for none */
            return;
        }
    }
    timer_wanted(a);
}

struct dm_admin *
dm_admin_start(uv_loop_t *loop, const struct dm_conf_addr *addr, struct sockaddr_storage *bound,
               int *err)
{
    int r = UV_ENOMEM;
    struct dm_admin *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        goto fail;
    }
    /* One handed over by the process this one replaces listens already. */
    int fd = -1;
    socklen_t blen = sizeof(*bound);
    if (dm_inherit_take(dm_inherited, DM_INHERIT_ADMIN, addr->text, &fd, 1) == 1) {
        memset(bound, 0, sizeof(*bound));
        if (getsockname(fd, (struct sockaddr *)bound, &blen) < 0) {
            fd = -errno;
        }
    } else if ((fd = dm_listen_probe((const struct sockaddr *)&addr->sa)) == 0) {
        fd = dm_listen_socket((const struct sockaddr *)&addr->sa, 128, bound);
    }
    if (fd < 0) {
        r = fd;
        goto free_admin;
    }
    r = uv_tcp_init(loop, &a->tcp);
    if (r < 0) {
        goto close_fd;
    }
    a->tcp.data = a;
    r = uv_tcp_open(&a->tcp, fd);
    if (r < 0) {
        goto close_tcp_and_fd;
    }
    r = uv_listen((uv_stream_t *)&a->tcp, 128, on_conn);
    if (r < 0) {
        goto close_tcp; /* the handle has the socket */
    }
    r = uv_timer_init(loop, &a->timer);
    if (r < 0) {
        goto close_tcp;
    }
    a->timer.data = a;
    a->timer_open = true;
    uv_check_init(loop, &a->turn_end);
    a->turn_end.data = a;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    a->start_unix_s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (bound->ss_family == AF_INET) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)bound;
        a->loopback = (ntohl(in4->sin_addr.s_addr) >> 24) == 127;
    } else if (bound->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)bound;
        a->loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    char text[DM_ADDR_TEXT];
    dm_log_info("admin listening on %s",
                dm_addr_text((const struct sockaddr *)bound, text, sizeof(text)));
    return a;

close_tcp_and_fd:
    close(fd);
close_tcp:
    uv_close((uv_handle_t *)&a->tcp, free_handle); /* frees a */
    goto fail;
close_fd:
    close(fd);
free_admin:
    free(a);
fail:
    *err = r;
    return NULL;
}

void
dm_admin_set_power(struct dm_admin *a, struct dm_powermgr *pm, const char *token, bool token_reads)
{
    if (a != NULL) {
        pages_drop(a); /* a reload: the pages show its configuration from now on */
        a->power = pm;
        a->token = token;
        a->token_reads = token != NULL && token_reads;
    }
}

void
dm_admin_set_workers(struct dm_admin *a, struct dm_hosts *hosts, struct dm_worker *ws, unsigned n)
{
    if (a != NULL) {
        pages_drop(a);
        a->hosts = hosts;
        a->workers = ws;
        a->nworkers = n;
    }
}

static void
timer_closed(uv_handle_t *h)
{
    struct dm_admin *a = h->data;
    uv_close((uv_handle_t *)&a->tcp, free_handle);
}

void
dm_admin_stop(struct dm_admin *a)
{
    if (a == NULL) {
        return;
    }
    pending_check(a, true); /* what is still waiting is answered as it stands */
    /* No connection holds the stop: the answers just given were written at
     * once if the socket took them; the rest, and every request still coming
     * in, are cut. */
    a->stopping = true;
    for (struct admin_conn *ac = a->conns; ac != NULL; ac = ac->cnext) {
        conn_close(ac);
    }
    pages_drop(a);
    uv_close((uv_handle_t *)&a->turn_end, NULL); /* closed before a is freed, as the timer */
    a->timer_open = false;
    uv_close((uv_handle_t *)&a->timer, timer_closed);
}

int
dm_admin_fd(const struct dm_admin *a)
{
    uv_os_fd_t fd = -1;
    return a != NULL && uv_fileno((const uv_handle_t *)&a->tcp, &fd) == 0 ? fd : -1;
}
