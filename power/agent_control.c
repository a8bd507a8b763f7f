/*
 * dimmer-agent's control listener (power/agent_control.h): one request a
 * connection, parsed by llhttp, answered with Connection: close.
 */
#include "power/agent_control.h"

#include <llhttp.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { CMD_SLEEP, CMD_WAKE };

struct ctl_conn;

/* The command running, if any. */
struct ctl_cmd {
    struct dm_control *ctl;
    uv_process_t proc;
    uv_timer_t timer;
    int kind;
    struct ctl_conn *conn; /* a wake's requester, waiting for the outcome; NULL: gone */
    unsigned open;         /* handles not yet closed */
    bool exited, killed;
};

struct ctl_conn {
    struct dm_control *ctl;
    struct ctl_conn *next, **pprev;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wreq;
    llhttp_t parser;
    char in[DM_CONTROL_HEAD_MAX];
    size_t in_len;
    char url[64];
    size_t url_len;
    char field[16];
    size_t field_len;
    char auth[DM_CONTROL_TOKEN_MAX + 16];
    size_t auth_len;
    bool url_long, auth_long, in_auth, seen_auth, headers_done, complete, answered, closing;
    bool origin; /* an Origin header: a browser's request (dimmer sends none) */
    struct ctl_cmd *waiting_for;
    unsigned char peer[16]; /* the peer's address bytes (4 or 16) */
    size_t peer_len;
    uint64_t asked_ms; /* when a wake that waits for the sleep command was asked */
    bool waited;       /* ... and that it did */
    char *out;
    unsigned open;
};

struct dm_control {
    uv_loop_t *loop;
    struct dm_control_conf cf;
    uv_tcp_t server;
    struct ctl_conn *conns;
    unsigned nconns;
    struct ctl_cmd *running;
    struct ctl_conn *next_wake; /* a wake asked while the sleep command ran */
    uint64_t sleeps, wakes, failed;
    char last[96]; /* the last command's outcome */
    unsigned open; /* the server, the connections and the command not yet closed */
    bool stopping;
};

static void
ctl_release(struct dm_control *c)
{
    if (--c->open == 0 && c->stopping) {
        free(c);
    }
}

/* ---- connections ---- */

static void
conn_closed(uv_handle_t *h)
{
    struct ctl_conn *k = h->data;
    if (--k->open == 0) {
        struct dm_control *c = k->ctl;
        free(k->out);
        free(k);
        ctl_release(c);
    }
}

static void
conn_close(struct ctl_conn *k)
{
    if (k->closing) {
        return;
    }
    k->closing = true;
    if (k->waiting_for != NULL) {
        k->waiting_for->conn = NULL;
        k->waiting_for = NULL;
    }
    if (k->ctl->next_wake == k) {
        k->ctl->next_wake = NULL;
    }
    *k->pprev = k->next;
    if (k->next != NULL) {
        k->next->pprev = k->pprev;
    }
    k->ctl->nconns--;
    uv_close((uv_handle_t *)&k->timer, conn_closed);
    uv_close((uv_handle_t *)&k->tcp, conn_closed);
}

static void
answered(uv_write_t *w, int status)
{
    (void)status;
    conn_close(w->data);
}

static const char *
reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 202:
        return "Accepted";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 504:
        return "Gateway Timeout";
    default:
        return "Internal Server Error";
    }
}

/* Answers once, then closes; extra holds whole header lines. */
static void
answer(struct ctl_conn *k, int status, const char *type, const char *body, const char *extra)
{
    if (k->answered || k->closing) {
        return;
    }
    k->answered = true;
    uv_timer_stop(&k->timer);
    size_t blen = strlen(body);
    size_t cap = blen + strlen(extra) + 256;
    k->out = malloc(cap);
    if (k->out == NULL) {
        conn_close(k);
        return;
    }
    int n = snprintf(k->out, cap,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n%s",
                     status, reason(status), type, blen, extra, body);
    uv_buf_t b = uv_buf_init(k->out, (unsigned)n);
    k->wreq.data = k;
    uv_read_stop((uv_stream_t *)&k->tcp);
    if (uv_write(&k->wreq, (uv_stream_t *)&k->tcp, &b, 1, answered) < 0) {
        conn_close(k);
    }
}

static void
answer_text(struct ctl_conn *k, int status, const char *text, const char *extra)
{
    answer(k, status, "text/plain", text, extra);
}

/* ---- commands ---- */

static const char *const kind_name[] = { "sleep", "wake" };

static void
cmd_closed(uv_handle_t *h)
{
    struct ctl_cmd *m = h->data;
    if (--m->open == 0) {
        struct dm_control *c = m->ctl;
        free(m);
        ctl_release(c);
    }
}

static void act(struct ctl_conn *k, int kind);

/* A command runs in a process group of its own (UV_PROCESS_DETACHED): killed
 * with its children, not only its shell. */
static void
kill_command(uv_process_t *p)
{
    if (kill(-p->pid, SIGKILL) != 0) {
        uv_process_kill(p, SIGKILL);
    }
}

static void
cmd_close(struct ctl_cmd *m)
{
    if (m->ctl->running == m) {
        m->ctl->running = NULL;
    }
    uv_close((uv_handle_t *)&m->timer, cmd_closed);
    uv_close((uv_handle_t *)&m->proc, cmd_closed);
}

static void
cmd_exited(uv_process_t *p, int64_t status, int sig)
{
    struct ctl_cmd *m = p->data;
    struct dm_control *c = m->ctl;
    m->exited = true;
    bool ok = sig == 0 && status == 0;
    if (sig != 0) {
        snprintf(c->last, sizeof(c->last), "%s command: killed by signal %d%s", kind_name[m->kind],
                 sig, m->killed ? " (command timeout)" : "");
    } else {
        snprintf(c->last, sizeof(c->last), "%s command: exit status %lld", kind_name[m->kind],
                 (long long)status);
    }
    c->failed += !ok;
    fprintf(stderr, "dimmer-agent: %s\n", c->last);
    if (m->conn != NULL) {
        struct ctl_conn *k = m->conn;
        m->conn = NULL;
        k->waiting_for = NULL;
        char body[128];
        snprintf(body, sizeof(body), "%s\n", c->last);
        answer_text(k, ok ? 200 : 502, body, "");
    }
    cmd_close(m);
    /* A wake that waited for the sleep command runs now. */
    if (c->next_wake != NULL && !c->stopping) {
        struct ctl_conn *k = c->next_wake;
        c->next_wake = NULL;
        act(k, CMD_WAKE);
    }
}

static void
cmd_timeout(uv_timer_t *t)
{
    struct ctl_cmd *m = t->data;
    if (!m->exited) {
        m->killed = true;
        kill_command(&m->proc);
    }
}

/* Runs the kind's command; NULL with *err set when it could not start. */
static struct ctl_cmd *
cmd_run(struct dm_control *c, int kind, const char *command, uint64_t timeout_ms, int *err)
{
    struct ctl_cmd *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        *err = UV_ENOMEM;
        return NULL;
    }
    m->ctl = c;
    m->kind = kind;
    char *args[] = { "/bin/sh", "-c", (char *)command, NULL };
    uv_stdio_container_t io[3] = { { .flags = UV_IGNORE },
                                   { .flags = UV_INHERIT_FD, .data.fd = 2 },
                                   { .flags = UV_INHERIT_FD, .data.fd = 2 } };
    uv_process_options_t o = {
        .exit_cb = cmd_exited,
        .file = "/bin/sh",
        .args = args,
        .flags = UV_PROCESS_DETACHED,
        .stdio_count = 3,
        .stdio = io,
    };
    uv_timer_init(c->loop, &m->timer);
    m->timer.data = m;
    m->proc.data = m;
    m->open = 2;
    c->open++;
    /* uv_spawn initializes the handle even when it fails: closed either way. */
    *err = uv_spawn(c->loop, &m->proc, &o);
    if (*err < 0) {
        cmd_close(m);
        return NULL;
    }
    c->running = m;
    fprintf(stderr, "dimmer-agent: %s: running \"%s\" (pid %d, timeout %llu ms)\n", kind_name[kind],
            command, m->proc.pid, (unsigned long long)timeout_ms);
    uv_timer_start(&m->timer, cmd_timeout, timeout_ms, 0);
    return m;
}

/* ---- requests ---- */

static bool
authorized(const struct ctl_conn *k)
{
    const struct dm_control_conf *cf = &k->ctl->cf;
    if (cf->token_len == 0) {
        return true;
    }
    return k->seen_auth && !k->auth_long && k->auth_len == 7 + cf->token_len &&
           strncasecmp(k->auth, "Bearer ", 7) == 0 &&
           CRYPTO_memcmp(k->auth + 7, cf->token, cf->token_len) == 0;
}

static void
status_json(struct ctl_conn *k)
{
    const struct dm_control *c = k->ctl;
    char body[512];
    char last[sizeof(c->last) * 2];
    size_t j = 0;
    for (size_t i = 0; c->last[i] != 0 && j + 2 < sizeof(last); i++) {
        if (c->last[i] == '"' || c->last[i] == '\\') {
            last[j++] = '\\';
        }
        last[j++] = c->last[i];
    }
    last[j] = 0;
    snprintf(
        body, sizeof(body),
        "{\"running\": %s%s%s, \"sleeps\": %llu, \"wakes\": %llu, \"failed\": %llu, "
        "\"last\": \"%s\", \"sleep_command\": %s, \"wake_command\": %s}\n",
        c->running != NULL ? "\"" : "", c->running != NULL ? kind_name[c->running->kind] : "null",
        c->running != NULL ? "\"" : "", (unsigned long long)c->sleeps, (unsigned long long)c->wakes,
        (unsigned long long)c->failed, last, c->cf.sleep_command != NULL ? "true" : "false",
        c->cf.wake_command != NULL ? "true" : "false");
    answer(k, 200, "application/json", body, "");
}

static void
act(struct ctl_conn *k, int kind)
{
    struct dm_control *c = k->ctl;
    const char *command = kind == CMD_SLEEP ? c->cf.sleep_command : c->cf.wake_command;
    if (k->origin) {
        /* A browser sends Origin with every POST, and dimmer never does: a
         * page of any site (or a name rebound to this machine) could
         * otherwise POST a form here, with no preflight, and no token on
         * loopback. */
        answer_text(k, 403, "this listener serves dimmer, not a browser (an Origin header)\n", "");
        return;
    }
    if (!authorized(k)) {
        answer_text(k, 401, "a bearer token is needed (--control-token-file)\n",
                    "WWW-Authenticate: Bearer\r\n");
        return;
    }
    if (command == NULL) {
        answer_text(k, 501,
                    kind == CMD_SLEEP ? "no --sleep-command\n"
                                      : "no --wake-command: wake this machine with wol\n",
                    "");
        return;
    }
    if (c->running != NULL && kind == CMD_WAKE && c->running->kind == CMD_SLEEP &&
        c->next_wake == NULL) {
        /* The machine is going to sleep: wake it once the sleep command
         * ends (answered then, as any wake). */
        c->next_wake = k;
        k->asked_ms = uv_now(c->loop);
        k->waited = true;
        /* The two share one --command-timeout from the wake's asking: the
         * sleep command has half of it at most from now, the wake what is
         * left (a wake supersedes a sleep that hangs). */
        uint64_t half = c->cf.command_timeout_ms / 2;
        if (!c->running->exited && uv_timer_get_due_in(&c->running->timer) > half) {
            uv_timer_start(&c->running->timer, cmd_timeout, half, 0);
        }
        uv_timer_stop(&k->timer);
        uv_read_stop((uv_stream_t *)&k->tcp);
        fprintf(stderr, "dimmer-agent: wake: after the sleep command\n");
        return;
    }
    if (c->running != NULL) {
        char body[64];
        snprintf(body, sizeof(body), "the %s command is running\n", kind_name[c->running->kind]);
        answer_text(k, 409, body, "");
        return;
    }
    /* A wake that waited for the sleep command has what is left of
     * --command-timeout (half of it or more: the sleep had the other half at
     * most), so it is answered within it of its asking, within dimmer's wait
     * (its command_timeout is longer). */
    uint64_t timeout_ms = c->cf.command_timeout_ms;
    if (k->waited) {
        uint64_t waited = uv_now(c->loop) - k->asked_ms;
        if (waited >= timeout_ms) {
            c->failed++;
            snprintf(c->last, sizeof(c->last),
                     "wake command: not run (the sleep command used its --command-timeout)");
            fprintf(stderr, "dimmer-agent: %s\n", c->last);
            answer_text(k, 504, "the sleep command ran past the wake's --command-timeout\n", "");
            return;
        }
        timeout_ms -= waited;
    }
    int err;
    struct ctl_cmd *m = cmd_run(c, kind, command, timeout_ms, &err);
    if (m == NULL) {
        char body[128];
        snprintf(body, sizeof(body), "cannot run the %s command: %s\n", kind_name[kind],
                 uv_strerror(err));
        fprintf(stderr, "dimmer-agent: %s", body);
        answer_text(k, 500, body, "");
        return;
    }
    if (kind == CMD_SLEEP) {
        c->sleeps++;
        /* At once: a machine that suspends answers nothing after. */
        answer_text(k, 202, "sleeping: the sleep command runs\n", "");
    } else {
        c->wakes++;
        m->conn = k; /* answered when it ends (cmd_exited) */
        k->waiting_for = m;
        uv_timer_stop(&k->timer);
        uv_read_stop((uv_stream_t *)&k->tcp);
    }
}

static void
dispatch(struct ctl_conn *k)
{
    uint8_t method = llhttp_get_method(&k->parser);
    const char *u = k->url_long ? "" : k->url;
    int kind = strcmp(u, "/sleep") == 0 ? CMD_SLEEP : strcmp(u, "/wake") == 0 ? CMD_WAKE : -1;
    if (kind >= 0) {
        if (method != HTTP_POST) {
            answer_text(k, 405, "method not allowed\n", "Allow: POST\r\n");
        } else {
            act(k, kind);
        }
    } else if (strcmp(u, "/status") == 0) {
        if (method != HTTP_GET) {
            answer_text(k, 405, "method not allowed\n", "Allow: GET\r\n");
        } else {
            status_json(k);
        }
    } else {
        answer_text(k, 404, "not found: POST /sleep, POST /wake, GET /status\n", "");
    }
}

static struct ctl_conn *
conn_of(llhttp_t *p)
{
    return p->data;
}

static int
on_url(llhttp_t *p, const char *at, size_t len)
{
    struct ctl_conn *k = conn_of(p);
    if (k->url_len + len >= sizeof(k->url)) {
        k->url_long = true;
        return 0;
    }
    memcpy(k->url + k->url_len, at, len);
    k->url_len += len;
    k->url[k->url_len] = 0;
    return 0;
}

static int
on_header_field(llhttp_t *p, const char *at, size_t len)
{
    struct ctl_conn *k = conn_of(p);
    if (k->field_len + len < sizeof(k->field)) {
        memcpy(k->field + k->field_len, at, len);
    }
    k->field_len += len;
    return 0;
}

static int
on_header_field_complete(llhttp_t *p)
{
    struct ctl_conn *k = conn_of(p);
    /* A trailer's fields are not the request's credentials. */
    k->in_auth =
        !k->headers_done && k->field_len == 13 && strncasecmp(k->field, "Authorization", 13) == 0;
    k->origin |= !k->headers_done && k->field_len == 6 && strncasecmp(k->field, "Origin", 6) == 0;
    k->field_len = 0;
    if (k->in_auth) {
        /* A second Authorization makes the credentials ambiguous: none. */
        k->auth_long |= k->seen_auth;
        k->seen_auth = true;
        k->auth_len = 0;
    }
    return 0;
}

static int
on_header_value(llhttp_t *p, const char *at, size_t len)
{
    struct ctl_conn *k = conn_of(p);
    if (!k->in_auth) {
        return 0;
    }
    if (k->auth_len + len > sizeof(k->auth)) {
        k->auth_long = true;
        return 0;
    }
    memcpy(k->auth + k->auth_len, at, len);
    k->auth_len += len;
    return 0;
}

static int
on_header_value_complete(llhttp_t *p)
{
    conn_of(p)->in_auth = false;
    return 0;
}

static int
on_headers_complete(llhttp_t *p)
{
    conn_of(p)->headers_done = true;
    return 0;
}

static int
on_message_complete(llhttp_t *p)
{
    conn_of(p)->complete = true;
    return HPE_PAUSED; /* one request a connection: the rest is not read */
}

static const llhttp_settings_t settings = {
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_message_complete = on_message_complete,
};

static void
conn_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf)
{
    struct ctl_conn *k = h->data;
    (void)size;
    *buf = uv_buf_init(k->in + k->in_len, (unsigned)(sizeof(k->in) - k->in_len));
}

static void
conn_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    struct ctl_conn *k = st->data;
    (void)buf;
    if (n < 0) {
        conn_close(k);
        return;
    }
    if (n == 0 || k->answered) {
        return;
    }
    llhttp_errno_t e = llhttp_execute(&k->parser, k->in + k->in_len, (size_t)n);
    k->in_len += (size_t)n;
    if (k->complete) {
        dispatch(k);
    } else if (e != HPE_OK) {
        answer_text(k, 400, "bad request\n", "");
    } else if (k->in_len == sizeof(k->in)) {
        answer_text(k, 431, "request too large\n", "");
    }
}

static void
read_timeout(uv_timer_t *t)
{
    answer_text(t->data, 408, "the request took too long\n", "");
}

static void
free_handle(uv_handle_t *h)
{
    free(h);
}

static bool
reading(const struct ctl_conn *k)
{
    return !k->complete && !k->answered;
}

static bool
same_peer(const struct ctl_conn *a, const struct ctl_conn *b)
{
    return a->peer_len == b->peer_len && memcmp(a->peer, b->peer, a->peer_len) == 0;
}

/*
 * The connection to close when there are too many: of the peer with the
 * most connections still sending their heads, the one that has waited
 * longest; NULL when every one has a request (a wake waiting for its
 * command, an answer going out). A peer that opens connections and sends
 * nothing pushes out its own, not another's request half read.
 */
static struct ctl_conn *
to_evict(struct dm_control *c)
{
    struct ctl_conn *old = NULL;
    unsigned most = 0;
    for (struct ctl_conn *k = c->conns; k != NULL; k = k->next) {
        if (!reading(k)) {
            continue;
        }
        unsigned n = 0;
        for (struct ctl_conn *j = c->conns; j != NULL; j = j->next) {
            n += reading(j) && same_peer(j, k);
        }
        if (n >= most) { /* the list is newest first: ties go to the older */
            most = n;
            old = k;
        }
    }
    return old;
}

static void
on_accept(uv_stream_t *server, int status)
{
    struct dm_control *c = server->data;
    if (status < 0) {
        return;
    }
    /* Full, the new one is taken only when one can go after it (to_evict). */
    bool room = c->nconns < DM_CONTROL_CONNS || to_evict(c) != NULL;
    struct ctl_conn *k = room ? calloc(1, sizeof(*k)) : NULL;
    if (k == NULL) {
        /* Taken and closed at once: the backlog does not fill with them. */
        uv_tcp_t *spare = malloc(sizeof(*spare));
        if (spare != NULL && uv_tcp_init(c->loop, spare) == 0) {
            (void)uv_accept(server, (uv_stream_t *)spare);
            uv_close((uv_handle_t *)spare, free_handle);
        } else {
            free(spare);
        }
        return;
    }
    k->ctl = c;
    uv_tcp_init(c->loop, &k->tcp);
    uv_timer_init(c->loop, &k->timer);
    k->tcp.data = k;
    k->timer.data = k;
    k->open = 2;
    c->open++;
    c->nconns++;
    k->next = c->conns;
    if (c->conns != NULL) {
        c->conns->pprev = &k->next;
    }
    k->pprev = &c->conns;
    c->conns = k;
    llhttp_init(&k->parser, HTTP_REQUEST, &settings);
    k->parser.data = k;
    if (uv_accept(server, (uv_stream_t *)&k->tcp) < 0 ||
        uv_read_start((uv_stream_t *)&k->tcp, conn_alloc, conn_read) < 0) {
        conn_close(k);
        return;
    }
    struct sockaddr_storage sa;
    int salen = sizeof(sa);
    if (uv_tcp_getpeername(&k->tcp, (struct sockaddr *)&sa, &salen) == 0) {
        if (sa.ss_family == AF_INET) {
            k->peer_len = 4;
            memcpy(k->peer, &((struct sockaddr_in *)&sa)->sin_addr, 4);
        } else if (sa.ss_family == AF_INET6) {
            k->peer_len = 16;
            memcpy(k->peer, &((struct sockaddr_in6 *)&sa)->sin6_addr, 16);
        }
    }
    uv_timer_start(&k->timer, read_timeout, DM_CONTROL_READ_MS, 0);
    if (c->nconns > DM_CONTROL_CONNS) {
        /* Full: one still sending its head makes room (to_evict), so that
         * connections that send nothing cannot keep dimmer's requests out. */
        struct ctl_conn *old = to_evict(c);
        if (old != NULL) {
            conn_close(old);
        }
    }
}

static void
server_closed(uv_handle_t *h)
{
    ctl_release(h->data);
}

struct dm_control *
dm_control_start(uv_loop_t *loop, const struct dm_control_conf *conf,
                 struct sockaddr_storage *bound, int *err)
{
    struct dm_control *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        *err = UV_ENOMEM;
        return NULL;
    }
    c->loop = loop;
    c->cf = *conf;
    uv_tcp_init(loop, &c->server);
    c->server.data = c;
    c->open = 1;
    int namelen = sizeof(*bound);
    *err = uv_tcp_bind(&c->server, (const struct sockaddr *)&c->cf.addr, 0);
    if (*err == 0) {
        *err = uv_listen((uv_stream_t *)&c->server, 64, on_accept);
    }
    if (*err == 0) {
        *err = uv_tcp_getsockname(&c->server, (struct sockaddr *)bound, &namelen);
    }
    if (*err < 0) {
        c->stopping = true;
        uv_close((uv_handle_t *)&c->server, server_closed);
        return NULL;
    }
    return c;
}

void
dm_control_stop(struct dm_control *c)
{
    if (c == NULL || c->stopping) {
        return;
    }
    c->stopping = true;
    while (c->conns != NULL) {
        conn_close(c->conns);
    }
    if (c->running != NULL) {
        struct ctl_cmd *m = c->running;
        m->conn = NULL;
        /* Left to end by itself; its exit is no longer waited for. */
        uv_timer_stop(&m->timer);
        cmd_close(m);
    }
    uv_close((uv_handle_t *)&c->server, server_closed);
}
