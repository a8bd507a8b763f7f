/*
 * The power manager (proxy/power.h): metrics in, the policy asked, servers
 * moved through their states, actuators run. Control thread only.
 *
 * One timer ticks every POWER_TICK_MS: each pool's trend is read every
 * trend_interval and its policy asked then; what the policy says is done at
 * once when it says so (rapid classes; boot-aware's scale-up), else once per
 * period. Draining, booting and failed servers are looked at every tick.
 */
#include "proxy/power.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "balancers/hosts.h"
#include "balancers/servers.h"
#include "conf/conf.h"
#include "power/control.h"
#include "power/machine.h"
#include "power/policy.h"
#include "power/report.h"
#include "power/wol.h"
#include "proxy/inherit.h"
#include "proxy/internal.h"
#include "proxy/log.h"
#include "proxy/metrics.h"
#include "proxy/worker.h"

#define POWER_TICK_MS  100
#define DECISIONS      32
#define DECISION_TEXT  400
#define POLICY_STATE   1024 /* bytes of a policy's own state at most (tests/power check it) */
#define HTTP_REPLY_MAX 256

/* The host's power state of each of the machine's states. */
static const int state_power[DM_PM_STATES] = {
    DM_POWER_AWAKE,   DM_POWER_DRAINING, DM_POWER_ASLEEP,
    DM_POWER_BOOTING, DM_POWER_FAILED,   DM_POWER_MAINT
};

enum pm_act_kind { ACT_WAKE, ACT_SLEEP };

struct pm_server;

/* One actuator run in flight: a command, an HTTP POST, or nothing (WOL is one datagram). */
struct pm_action {
    struct pm_server *s; /* NULL once the manager stopped */
    char *name;          /* its server's, as when it began (a reload may take the config) */
    enum pm_act_kind kind;
    enum dm_power_act how;
    uv_process_t proc;
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_timer_t timer;
    uv_pipe_t out; /* a command's stdout and stderr */
    unsigned open; /* handles not yet closed */
    bool tcp_init, proc_init, out_init;
    bool running; /* the process has not exited yet */
    bool done;
    struct pm_action *next_orphan; /* in orphans (s NULL), while its handles are open */
    char *req;
    char reply[HTTP_REPLY_MAX]; /* the HTTP status line, or a command's first output */
    size_t reply_len;
    uint64_t out_dropped; /* a command's output past reply, read and dropped */
    bool out_capped;      /* OUTPUT_READ_MAX of it read: no more is */
    struct dm_powermgr *pm;
};

static const char *
kind_name(enum pm_act_kind k)
{
    return k == ACT_WAKE ? "wake" : "sleep";
}

/* The actuator of an action that has a process or a connection. */
static const char *
how_name(enum dm_power_act how)
{
    return how == DM_ACT_HTTP ? "http" : "command";
}

struct pm_pool;

struct pm_server {
    struct dm_host *h;
    struct pm_pool *pool;            /* NULL: not power-managed (any more) */
    const struct dm_conf_server *cf; /* in pm->rt's config */
    const struct dm_conf_pool *pcf;  /* its pool's */
    size_t index;                    /* in its pool's servers */
    enum dm_pm_state state;
    uint64_t since_us, last_change_us, last_action_us;
    uint64_t epoch;     /* of the last power command */
    bool held;          /* the operator's: the policy leaves it alone */
    bool managed;       /* in a power-managed pool at the last configure() */
    bool sleep_from_up; /* its last sleep was of a machine known up (drained, not failed) */
    bool handed;        /* its state came from the process this one replaced */
    /* Active since the manager took it, never moved and never seen up
     * (health_oks still oks_at): down by its health check, it may be asleep. */
    bool unseen;
    unsigned oks_at;
    /* The agent's last accepted report. */
    struct dm_report_last last; /* its last accepted report */
    /* The key its reports are checked with (its own, else the shared one), as
     * of the last configure: a new one starts its sequence numbers afresh. */
    uint8_t key[DM_REPORT_KEY_MAX];
    size_t key_len;
    uint64_t report_us, agent_tcp;
    double agent_w, measured_w;
    bool has_measured, has_report;
    /* This tick's figures. */
    double est_w, tcp;
    const char *w_source, *tcp_source;
    double energy_wh;
    uint64_t energy_us;
    struct pm_action *action;
    enum pm_act_kind pending; /* an action asked while one ran */
    bool has_pending;
    uint64_t actions, action_failures;
};

struct pm_pool {
    char *name;
    size_t index; /* in pm->rt */
    const struct dm_conf_pool *cf;
    const struct dm_power_ops *ops;
    struct dm_power_params params;
    _Alignas(max_align_t) unsigned char state[POLICY_STATE];
    struct dm_pm_trend trend;
    uint64_t next_trend_us;
    struct dm_power_metrics m;
    struct dm_power_target target;
    struct dm_pm_tcpmax tcpmax; /* tcp_max: auto, what the agents' reports taught */
    long pinned;                /* -1: the policy decides */
    /* The policy an operator put in the config's place (empty: the config's);
     * it outlasts reloads until the operator gives the pool back. */
    char chosen[32];
    bool present;     /* in the current config */
    bool was_present; /* in the one before */
    /* Decisions by load class and action: [class][0 up, 1 down, 2 stay]. */
    uint64_t decided[DM_PC_CLASSES][3];
    /* The last decision did nothing, and was short by this many (a decision
     * that does nothing again, short by as many, is not logged again). */
    bool idle;
    unsigned idle_short;
    bool held_stuck; /* requests held and none could be woken: said once */
};

/* The policy that runs: the operator's choice, else the config's. */
static const char *
policy_name(const struct pm_pool *p)
{
    return p->chosen[0] ? p->chosen : p->cf->power.policy;
}

struct decision {
    uint64_t unix_ms;
    char text[DECISION_TEXT];
};

struct dm_powermgr {
    uv_loop_t *loop;
    struct dm_runtime *rt; /* a reference: the config every pointer above is in */
    struct dm_worker *ws;
    unsigned nws;
    uv_timer_t tick;
    uv_udp_t metrics;
    uv_udp_t wol;
    bool metrics_open, wol_open, tick_open;
    unsigned open; /* handles not yet closed, while stopping */
    bool stopping;
    struct pm_server **servers;
    size_t nservers;
    struct pm_pool **pools;
    size_t npools;
    uint64_t reports[DM_REPORT_VERDICTS];
    struct decision decisions[DECISIONS];
    size_t ndecisions; /* ever made; the last DECISIONS are kept */
    char rbuf[DM_REPORT_MAX + 1];
    /* The process this one replaced (SIGUSR2), while it drains: it may
     * still have requests on a server that is drained here. 0: none. */
    long predecessor;
};

static uint64_t
unix_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

static void __attribute__((format(printf, 3, 4)))
decision(struct dm_powermgr *pm, const struct pm_pool *p, const char *fmt, ...)
{
    struct decision *d = &pm->decisions[pm->ndecisions++ % DECISIONS];
    d->unix_ms = unix_ms();
    int n = snprintf(d->text, sizeof(d->text), "pool %s: ", p != NULL ? p->name : "-");
    /* A pool's name may fill the text (and more): what follows is cut. */
    n = n < 0 ? 0 : n < (int)sizeof(d->text) ? n : (int)sizeof(d->text) - 1;
    d->text[n] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->text + n, sizeof(d->text) - (size_t)n, fmt, ap);
    va_end(ap);
    dm_log_info("power: %s", d->text);
}

/* Down until its health check passes again, by a check begun from now on:
 * one begun before saw the machine as it was (awake, before its sleep). */
static void
mark_down(struct dm_host *h)
{
    atomic_fetch_add(&h->down_gen, 1);
    atomic_store(&h->down, true);
}

/* ---- actuators ---- */

static void action_finish(struct pm_action *a, bool ok, const char *what);
static void set_state(struct dm_powermgr *pm, struct pm_server *s, enum dm_pm_state st,
                      uint64_t now);

/* The actions under way when their manager stopped (dm_power_stop), until
 * their handles are closed; the control loop's only. */
static struct pm_action *orphans;

static void
action_closed(uv_handle_t *h)
{
    struct pm_action *a = h->data;
    if (--a->open == 0) {
        for (struct pm_action **pp = &orphans; *pp != NULL; pp = &(*pp)->next_orphan) {
            if (*pp == a) {
                *pp = a->next_orphan;
                break;
            }
        }
        free(a->req);
        free(a->name);
        free(a);
    }
}

/* Closes the action's handles (the timer always; the socket or process once made). */
static void
action_close(struct pm_action *a)
{
    uv_close((uv_handle_t *)&a->timer, action_closed);
    if (a->tcp_init) {
        uv_close((uv_handle_t *)&a->tcp, action_closed);
    }
    if (a->out_init) {
        uv_close((uv_handle_t *)&a->out, action_closed);
        a->out_init = false;
    }
    /* A process is closed once it exited (or never started): an exit
     * callback may still come for one that runs, killed at the timeout. */
    if (a->proc_init && !a->running) {
        uv_close((uv_handle_t *)&a->proc, action_closed);
    }
}

static void run_action(struct dm_powermgr *pm, struct pm_server *s, enum pm_act_kind kind);

/* Whether the action's handles keep its loop running. */
static void
action_hold_loop(struct pm_action *a, bool hold)
{
    uv_handle_t *hs[] = { (uv_handle_t *)&a->timer, (uv_handle_t *)&a->proc, (uv_handle_t *)&a->out,
                          (uv_handle_t *)&a->tcp };
    bool init[] = { true, a->proc_init, a->out_init, a->tcp_init };
    for (size_t k = 0; k < 4; k++) {
        if (init[k]) {
            (hold ? uv_ref : uv_unref)(hs[k]);
        }
    }
}

/* A command runs in a process group of its own (UV_PROCESS_DETACHED): killed
 * with its children (an ssh it started, say), not only its shell. */
static void
kill_command(uv_process_t *p)
{
    if (kill(-p->pid, SIGKILL) != 0) {
        uv_process_kill(p, SIGKILL);
    }
}

/* Whether an actuator may run for s now: none running, and action_interval
 * since its last run. */
static bool
action_due(const struct pm_server *s, uint64_t now)
{
    return s->action == NULL &&
           (s->last_action_us == 0 ||
            now - s->last_action_us >= s->pcf->power.action_interval_ms * 1000);
}

/* Runs the action asked while s could not act, once it can (the tick calls
 * it too). */
static void
run_pending(struct dm_powermgr *pm, struct pm_server *s, uint64_t now)
{
    if (s->has_pending && action_due(s, now)) {
        s->has_pending = false;
        run_action(pm, s, s->pending);
    }
}

/* The action's outcome, logged, once; then its handles close. */
static void
action_finish(struct pm_action *a, bool ok, const char *what)
{
    if (a->done) {
        return;
    }
    a->done = true;
    struct pm_server *s = a->s;
    if (s == NULL) { /* under way when the manager stopped (dm_power_stop) */
        dm_log(ok ? DM_LOG_INFO : DM_LOG_WARN,
               "power: %s %s (%s), under way when dimmer stopped: %s", kind_name(a->kind),
               a->name != NULL ? a->name : "?", how_name(a->how), what);
    }
    if (s != NULL) {
        s->action = NULL;
        if (!ok) {
            s->action_failures++;
        }
        const char *name = a->name != NULL ? a->name : "?";
        dm_log(ok ? DM_LOG_INFO : DM_LOG_WARN, "power: %s %s (%s): %s%s", kind_name(a->kind), name,
               how_name(a->how), what, s->pool == NULL ? " (it is no longer power-managed)" : "");
        /* A server a reload took out of power management is left as it is. */
        bool managed = s->pool != NULL && a->pm != NULL && !a->pm->stopping;
        /* A machine known up whose sleep failed is most likely still up:
         * back in service (once its health check passes again). One that
         * was booting or failed is no better known than before: failed.
         * One whose wake failed is failed at once (another is woken in its
         * place), not taken as up when its boot delay has passed. */
        if (!ok && a->kind == ACT_SLEEP && s->state == DM_PM_SLEEPING && managed) {
            bool up = s->sleep_from_up;
            decision(a->pm, s->pool, "%s: its sleep failed: %s%s", name,
                     up ? "active again" : "failed (it was not known to be up)",
                     s->held ? " (the operator's sleep: no longer held)" : "");
            /* An operator's sleep that did not happen holds it no more: the
             * policy counts it again (held, it was active but never counted). */
            s->held = false;
            set_state(a->pm, s, up ? DM_PM_ACTIVE : DM_PM_FAILED, dm_mono_us());
        }
        if (!ok && a->kind == ACT_WAKE && s->state == DM_PM_BOOTING && managed) {
            decision(a->pm, s->pool, "%s: its wake failed (%s): failed", name, what);
            set_state(a->pm, s, DM_PM_FAILED, dm_mono_us());
        }
        if (managed) {
            run_pending(a->pm, s, dm_mono_us());
        }
    }
    action_close(a);
}

static void
action_timeout(uv_timer_t *t)
{
    struct pm_action *a = t->data;
    if (a->running) {
        kill_command(&a->proc); /* the exit callback finishes it */
        dm_log_warn("power: command for %s timed out: killed", a->name != NULL ? a->name : "?");
        return;
    }
    action_finish(a, false, "timed out");
}

/* A command's output read at most: past it, it is not read, and a command
 * that writes on blocks until its timeout kills it (one that wrote without
 * end kept the control thread reading 4 KiB at a time). */
#define OUTPUT_READ_MAX (1u << 20)

/* Where the output past the kept bytes is read to be dropped (the control
 * thread's, for every action). */
static char output_sink[65536];

/* A command's output: the first bytes kept (for its log line), the rest read and dropped. */
static void
output_alloc(uv_handle_t *h, size_t sz, uv_buf_t *buf)
{
    struct pm_action *a = h->data;
    (void)sz;
    if (a->reply_len + 1 < sizeof(a->reply)) {
        *buf =
            uv_buf_init(a->reply + a->reply_len, (unsigned)(sizeof(a->reply) - 1 - a->reply_len));
    } else {
        *buf = uv_buf_init(output_sink, sizeof(output_sink));
    }
}

static void
output_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    struct pm_action *a = st->data;
    if (n > 0) {
        if (buf->base == output_sink) {
            a->out_dropped += (uint64_t)n;
            if (a->out_dropped >= OUTPUT_READ_MAX) {
                a->out_capped = true;
                uv_read_stop(st);
            }
        } else {
            a->reply_len += (size_t)n;
        }
    } else if (n < 0) {
        uv_read_stop(st); /* EOF: every writer is gone */
    }
}

/* Reads what the command wrote before it exited and is not read yet. */
static void
output_drain(struct pm_action *a)
{
    uv_os_fd_t fd;
    if (!a->out_init || uv_fileno((uv_handle_t *)&a->out, &fd) != 0) {
        return;
    }
    while (!a->out_capped) { /* the group is killed: nothing writes more */
        uv_buf_t b;
        output_alloc((uv_handle_t *)&a->out, 0, &b);
        ssize_t n = read(fd, b.base, b.len);
        if (n <= 0) {
            break;
        }
        output_read((uv_stream_t *)&a->out, n, &b);
    }
}

/* a->reply (a command's first output, or an HTTP status line) made one line
 * of printable ASCII for the log and /power: each run of blanks one space,
 * any other byte '?', NUL-terminated. */
static void
printable_line(struct pm_action *a)
{
    size_t j = 0;
    for (size_t i = 0; i < a->reply_len; i++) {
        unsigned char c = (unsigned char)a->reply[i];
        if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            if (j > 0 && a->reply[j - 1] != ' ') {
                a->reply[j++] = ' ';
            }
        } else {
            a->reply[j++] = c > 0x20 && c < 0x7f ? (char)c : '?';
        }
    }
    while (j > 0 && a->reply[j - 1] == ' ') {
        j--;
    }
    a->reply[j] = 0;
    a->reply_len = j;
}

static void
command_exited(uv_process_t *p, int64_t status, int signo)
{
    struct pm_action *a = p->data;
    a->running = false;
    if (a->done) {
        /* Finished already (the manager stopped): only the handle is left. */
        uv_close((uv_handle_t *)&a->proc, action_closed);
        return;
    }
    /* What it left running in its group (a "cmd &") ends with it: nothing
     * it started outlives the action, as nothing outlives its timeout. */
    kill(-p->pid, SIGKILL);
    output_drain(a);
    char what[HTTP_REPLY_MAX + 96];
    int n;
    if (signo != 0) {
        n = snprintf(what, sizeof(what), "killed by signal %d", signo);
    } else {
        n = snprintf(what, sizeof(what), "exit status %lld", (long long)status);
    }
    if (a->reply_len > 0 && n > 0 && (size_t)n < sizeof(what)) {
        printable_line(a);
        snprintf(what + n, sizeof(what) - (size_t)n, ", output \"%s\"%s", a->reply,
                 a->out_capped        ? " and more, not read past 1 MiB"
                 : a->out_dropped > 0 ? " and more"
                                      : "");
    }
    action_finish(a, status == 0 && signo == 0, what);
}

/* "{host}", "{port}", "{name}" and "{mac}" of the template, replaced. */
static char *
expand(const char *tpl, const struct dm_conf_server *cs)
{
    char host[INET6_ADDRSTRLEN] = "", port[8] = "", mac[18] = "";
    const struct sockaddr_storage *sa = &cs->addr.sa;
    if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(port, sizeof(port), "%u", ntohs(in6->sin6_port));
    } else {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in4->sin_addr, host, sizeof(host));
        snprintf(port, sizeof(port), "%u", ntohs(in4->sin_port));
    }
    const uint8_t *m = cs->power.mac;
    if (cs->power.has_mac) {
        snprintf(mac, sizeof(mac), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                 m[5]);
    }
    const char *keys[] = { "{host}", "{port}", "{name}", "{mac}" };
    const char *vals[] = { host, port, cs->name != NULL ? cs->name : "", mac };
    struct dm_sbuf b = { 0 };
    for (const char *p = tpl; *p != 0;) {
        size_t k = 0;
        for (; k < 4; k++) {
            size_t kl = strlen(keys[k]);
            if (strncmp(p, keys[k], kl) == 0) {
                dm_sb_printf(&b, "%s", vals[k]);
                p += kl;
                break;
            }
        }
        if (k == 4) {
            dm_sb_printf(&b, "%c", *p++);
        }
    }
    return b.p != NULL ? b.p : strdup("");
}

static bool
start_command(struct dm_powermgr *pm, struct pm_action *a, const char *tpl)
{
    a->req = expand(tpl, a->s->cf);
    if (a->req == NULL) {
        return false;
    }
    char *args[] = { "/bin/sh", "-c", a->req, NULL };
    /* Its stdout and stderr go to one pipe that dimmer reads: what it says
     * is in the log line of its outcome (the first bytes; never all of a
     * command that writes without end, nor past error_log). */
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        dm_log_warn("power: cannot run \"%s\": pipe: %s", a->req, strerror(errno));
        return false;
    }
    uv_pipe_init(pm->loop, &a->out, 0);
    a->out.data = a;
    a->out_init = true; /* closed with the action from now on */
    a->open++;
    if (uv_pipe_open(&a->out, fds[0]) != 0) {
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    uv_stdio_container_t io[3] = { { .flags = UV_IGNORE },
                                   { .flags = UV_INHERIT_FD, .data.fd = fds[1] },
                                   { .flags = UV_INHERIT_FD, .data.fd = fds[1] } };
    uv_process_options_t o = {
        .exit_cb = command_exited,
        .file = "/bin/sh",
        .args = args,
        .flags = UV_PROCESS_DETACHED,
        .stdio_count = 3,
        .stdio = io,
    };
    a->proc.data = a;
    /* uv_spawn initializes the handle even when it fails: it is closed either way. */
    a->proc_init = true;
    a->open++;
    int r = uv_spawn(pm->loop, &a->proc, &o);
    close(fds[1]); /* the child's now: EOF once it and what it started are gone */
    if (r < 0) {
        dm_log_warn("power: cannot run \"%s\": %s", a->req, uv_strerror(r));
        return false;
    }
    uv_read_start((uv_stream_t *)&a->out, output_alloc, output_read);
    a->running = true;
    dm_log_info("power: running \"%s\" (pid %d)", a->req, a->proc.pid);
    return true;
}

static void
http_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    struct pm_action *a = st->data;
    (void)buf;
    if (n > 0) {
        a->reply_len += (size_t)n;
    }
    char *eol = memchr(a->reply, '\n', a->reply_len);
    if (eol != NULL || n < 0 || a->reply_len >= sizeof(a->reply) - 1) {
        /* The status line goes in the log and /power as printable ASCII (a
         * machine may answer anything: escapes for a terminal, bytes that
         * are not UTF-8). */
        if (eol != NULL) {
            a->reply_len = (size_t)(eol - a->reply);
        }
        printable_line(a);
        /* "HTTP/1.x 2xx", then a reason or nothing. */
        const char *r = a->reply;
        bool ok = strncmp(r, "HTTP/1.", 7) == 0 && isdigit((unsigned char)r[7]) && r[8] == ' ' &&
                  r[9] == '2' && isdigit((unsigned char)r[10]) && isdigit((unsigned char)r[11]) &&
                  (r[12] == ' ' || r[12] == 0);
        action_finish(a, ok, a->reply_len > 0 ? a->reply : "connection closed without an answer");
    }
}

static void
http_alloc(uv_handle_t *h, size_t sz, uv_buf_t *buf)
{
    struct pm_action *a = h->data;
    (void)sz;
    *buf = uv_buf_init(a->reply + a->reply_len, (unsigned)(sizeof(a->reply) - 1 - a->reply_len));
}

static void
http_written(uv_write_t *w, int status)
{
    struct pm_action *a = w->data;
    if (status < 0) {
        action_finish(a, false, uv_strerror(status));
    }
}

static void
http_connected(uv_connect_t *c, int status)
{
    struct pm_action *a = c->data;
    if (a->done) {
        return;
    }
    if (status < 0) {
        action_finish(a, false, uv_strerror(status));
        return;
    }
    uv_buf_t b = uv_buf_init(a->req, (unsigned)strlen(a->req));
    a->wreq.data = a;
    int r = uv_write(&a->wreq, (uv_stream_t *)&a->tcp, &b, 1, http_written);
    if (r == 0) {
        r = uv_read_start((uv_stream_t *)&a->tcp, http_alloc, http_read);
    }
    if (r < 0) {
        action_finish(a, false, uv_strerror(r));
    }
}

static bool
start_http(struct dm_powermgr *pm, struct pm_action *a)
{
    const struct dm_conf_addr *ctl = &a->s->cf->power.control;
    struct dm_sbuf b = { 0 };
    const char *token = a->s->cf->power.control_token;
    dm_sb_printf(&b,
                 "POST /%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: dimmer\r\nContent-Length: 0\r\n"
                 "%s%s%sConnection: close\r\n\r\n",
                 kind_name(a->kind), ctl->text, token != NULL ? "Authorization: Bearer " : "",
                 token != NULL ? token : "", token != NULL ? "\r\n" : "");
    a->req = b.p;
    if (a->req == NULL || uv_tcp_init(pm->loop, &a->tcp) < 0) {
        return false;
    }
    a->tcp.data = a;
    a->tcp_init = true;
    a->open++;
    a->creq.data = a;
    int r = uv_tcp_connect(&a->creq, &a->tcp, (const struct sockaddr *)&ctl->sa, http_connected);
    if (r < 0) {
        dm_log_warn("power: cannot connect to %s: %s", ctl->text, uv_strerror(r));
        return false;
    }
    return true;
}

static void
wol_sent(uv_udp_send_t *req, int status)
{
    if (status < 0) {
        dm_log_warn("power: wake-on-LAN packet not sent: %s", uv_strerror(status));
    }
    free(req);
}

/* The magic packet to the server's wol_to; one datagram, nothing to wait for. */
static bool
send_wol(struct dm_powermgr *pm, struct pm_server *s)
{
    if (!pm->wol_open) {
        return false;
    }
    struct {
        uv_udp_send_t req;
        uint8_t pkt[DM_WOL_PACKET];
    } *m = malloc(sizeof(*m));
    if (m == NULL) {
        return false;
    }
    size_t len = dm_wol_packet(s->cf->power.mac, m->pkt);
    uv_buf_t b = uv_buf_init((char *)m->pkt, (unsigned)len);
    int r = uv_udp_send(&m->req, &pm->wol, &b, 1, (const struct sockaddr *)&s->cf->power.wol_to.sa,
                        wol_sent);
    if (r < 0) {
        free(m);
        dm_log_warn("power: wake-on-LAN to %s: %s", s->cf->power.wol_to.text, uv_strerror(r));
        return false;
    }
    dm_log_info("power: wake %s: magic packet to %s", s->cf->name, s->cf->power.wol_to.text);
    return true;
}

/*
 * Runs s's wake or sleep actuator; never two at once for one server (a
 * second is run once the first is done), never blocking the loop.
 */
static void
run_action(struct dm_powermgr *pm, struct pm_server *s, enum pm_act_kind kind)
{
    const struct dm_conf_server_power *sp = &s->cf->power;
    enum dm_power_act how = kind == ACT_WAKE ? sp->wake : sp->sleep;
    uint64_t now = dm_mono_us();
    /* One at a time, and action_interval apart: a later ask replaces one
     * that waits (a sleep then a wake runs the wake only). */
    if (!action_due(s, now)) {
        if (!s->has_pending || s->pending != kind) {
            dm_log_info("power: %s %s: after %s", kind_name(kind), s->cf->name,
                        s->action != NULL ? "the action running" : "action_interval");
        }
        s->pending = kind;
        s->has_pending = true;
        return;
    }
    s->has_pending = false;
    s->actions++;
    s->last_action_us = now;
    if (kind == ACT_WAKE && s->state == DM_PM_BOOTING) {
        /* A wake that waited: the boot delay and timeout count from now, and
         * a health check that passed meanwhile was of the machine going to
         * sleep. */
        s->since_us = now;
        if (s->pcf->health.enabled) {
            mark_down(s->h);
        }
    }
    if (how == DM_ACT_NONE) {
        dm_log_info("power: %s %s: no actuator (%s)", kind_name(kind), s->cf->name,
                    kind == ACT_WAKE ? "it is expected to come up by itself"
                                     : "left idle, not suspended");
        return;
    }
    if (how == DM_ACT_WOL) {
        if (!send_wol(pm, s)) {
            s->action_failures++;
        }
        return;
    }
    struct pm_action *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        s->action_failures++;
        return;
    }
    a->s = s;
    a->name = strdup(s->cf->name);
    a->pm = pm;
    a->kind = kind;
    a->how = how;
    uv_timer_init(pm->loop, &a->timer);
    a->timer.data = a;
    a->open = 1;
    s->action = a;
    bool ok = how == DM_ACT_HTTP
                  ? start_http(pm, a)
                  : start_command(pm, a, kind == ACT_WAKE ? sp->wake_command : sp->sleep_command);
    if (!ok) {
        action_finish(a, false, "could not start");
        return;
    }
    uv_timer_start(&a->timer, action_timeout, s->pcf->power.command_timeout_ms, 0);
}

/* ---- server states ---- */

static void hold_update(struct dm_powermgr *pm, const struct pm_pool *p);

static void
set_state(struct dm_powermgr *pm, struct pm_server *s, enum dm_pm_state st, uint64_t now)
{
    s->state = st;
    s->since_us = now;
    s->last_change_us = now;
    if (st != DM_PM_ACTIVE) {
        s->unseen = false; /* the manager moved it: what it is now is known */
    }
    s->epoch = dm_workers_set_power(pm->ws, pm->nws, s->h, state_power[st], now);
    if (s->pool != NULL) {
        hold_update(pm, s->pool);
    }
}

static void
start_drain(struct dm_powermgr *pm, struct pm_server *s, uint64_t now)
{
    set_state(pm, s, DM_PM_DRAINING, now);
}

static void
go_to_sleep(struct dm_powermgr *pm, struct pm_server *s, uint64_t now)
{
    /* Down until its health check passes again after a wake. */
    if (s->pcf->health.enabled) {
        mark_down(s->h);
    }
    s->sleep_from_up = s->state != DM_PM_BOOTING && s->state != DM_PM_FAILED;
    set_state(pm, s, DM_PM_SLEEPING, now);
    run_action(pm, s, ACT_SLEEP);
}

static void
wake(struct dm_powermgr *pm, struct pm_server *s, uint64_t now)
{
    if (s->pcf->health.enabled) {
        mark_down(s->h);
    }
    set_state(pm, s, DM_PM_BOOTING, now);
    run_action(pm, s, ACT_WAKE);
}

static void
activate(struct dm_powermgr *pm, struct pm_server *s, uint64_t now)
{
    uint64_t ramp = s->pcf->power.slow_start_ms * 1000;
    atomic_store(&s->h->ramp_from_us, ramp > 0 ? now : 0);
    atomic_store(&s->h->ramp_until_us, ramp > 0 ? now + ramp : 0);
    set_state(pm, s, DM_PM_ACTIVE, now);
}

/* ---- metrics ---- */

static bool
report_fresh(const struct pm_server *s, uint64_t now)
{
    return s->has_report && now - s->report_us <= s->pcf->power.report_timeout_ms * 1000;
}

/* This tick's power and TCP figures of s, and its energy up to now. */
static void
measure(struct pm_server *s, uint64_t now)
{
    const struct dm_conf_server_power *sp = &s->cf->power;
    const struct dm_conf_power *pw = &s->pcf->power;
    double inflight = (double)dm_counter_get(&s->h->inflight);
    double bound = (double)dm_counter_get(&s->h->bound);
    bool fresh = report_fresh(s, now);
    if (pw->tcp_source == DM_TCP_AGENT && fresh) {
        s->tcp = (double)s->agent_tcp;
        s->tcp_source = "agent";
    } else {
        /* The seed's clients connected to the servers themselves: behind a
         * proxy the same count is the client connections bound to it, or,
         * without connection affinity, the requests in flight on it. */
        s->tcp = bound > inflight ? bound : inflight;
        s->tcp_source = "proxy";
    }
    double w;
    const char *src;
    switch (s->state) {
    case DM_PM_SLEEPING:
        w = sp->asleep_w;
        src = "model";
        break;
    case DM_PM_BOOTING:
    case DM_PM_FAILED:
        w = sp->booting_w;
        src = "model";
        break;
    default:
        if (fresh) {
            w = s->has_measured ? s->measured_w : s->agent_w;
            src = s->has_measured ? "agent-measured" : "agent";
        } else {
            w = dm_pm_estimate_w(sp->idle_w, sp->full_w, inflight, s->cf->capacity, s->tcp,
                                 s->pool != NULL ? s->pool->params.tcp_max : pw->tcp_max);
            src = "proxy";
        }
        break;
    }
    if (s->energy_us != 0 && now > s->energy_us) {
        s->energy_wh += s->est_w * (double)(now - s->energy_us) / 3.6e9;
    }
    s->energy_us = now;
    s->est_w = w;
    s->w_source = src;
}

/* ---- the state machine (power/machine.h) ---- */

static void
rules_of(const struct dm_conf_pool *cf, struct dm_pm_rules *r)
{
    const struct dm_conf_power *pw = &cf->power;
    *r = (struct dm_pm_rules){
        .drain_timeout_us = pw->drain_timeout_ms * 1000,
        .boot_us = pw->boot_ms * 1000,
        .boot_timeout_us = pw->boot_timeout_ms * 1000,
        .min_change_us = pw->min_change_ms * 1000,
        .action_interval_us = pw->action_interval_ms * 1000,
        .min_active = pw->min_active,
        .health_checked = cf->health.enabled,
        .wake_rule = pw->wake_rule == DM_WAKE_FIRST ? DM_PM_WAKE_FIRST : DM_PM_WAKE_EFFICIENT,
        .sleep_rule = pw->sleep_rule == DM_SLEEP_LAST ? DM_PM_SLEEP_LAST : DM_PM_SLEEP_LEAST_LOADED,
    };
}

/* s as the machine sees it. */
/* Whether s is active but not serving: down by its health check, or in a passive down period. */
static bool
server_down(const struct pm_server *s)
{
    return s->state == DM_PM_ACTIVE &&
           (atomic_load(&s->h->down) || atomic_load(&s->h->down_until_us) > dm_mono_us());
}

/* Whether s is active and down by its health check, and has never been seen up since the
 * manager took it (a restart does not know which machines sleep): it may be asleep. */
static bool
server_unseen(const struct pm_server *s)
{
    return s->unseen && s->state == DM_PM_ACTIVE && s->pcf->health.enabled &&
           atomic_load(&s->h->down) && atomic_load(&s->h->health_oks) == s->oks_at;
}

static struct dm_pm_server
machine_view(const struct pm_server *s)
{
    double cap = s->cf->capacity > 0 ? s->cf->capacity : 1;
    return (struct dm_pm_server){
        .state = s->state,
        .since_us = s->since_us,
        .last_change_us = s->last_change_us,
        .last_action_us = s->last_action_us,
        .held = s->held,
        .down = server_down(s),
        .unseen = server_unseen(s),
        .busy = s->action != NULL || s->has_pending,
        .can_wake = s->cf->power.wake != DM_ACT_NONE,
        .keep_on = s->cf->power.keep_on,
        .cost = s->cf->power.full_w / cap,
        .load = s->tcp + (double)dm_counter_get(&s->h->inflight),
    };
}

/* How many servers the manager manages in p (at least 1, a size to allocate). */
static size_t
pool_size(const struct dm_powermgr *pm, const struct pm_pool *p)
{
    size_t n = 0;
    for (size_t i = 0; i < pm->nservers; i++) {
        n += pm->servers[i]->pool == p;
    }
    return n > 0 ? n : 1;
}

/*
 * Brings the pool to `want` servers live or booting, as dm_pm_plan() says;
 * what it did goes in did. Returns how many servers it moved; *short_out is
 * how many more were wanted and could not be woken.
 */
static size_t
act(struct dm_powermgr *pm, struct pm_pool *p, unsigned want, uint64_t now, bool urgent,
    struct dm_sbuf *did, unsigned *short_out)
{
    *short_out = 0;
    size_t n = 0, cap = pool_size(pm, p);
    struct pm_server **mine = malloc(cap * sizeof(*mine));
    struct dm_pm_server *view = malloc(cap * sizeof(*view));
    struct dm_pm_move *moves = malloc(cap * sizeof(*moves));
    if (mine == NULL || view == NULL || moves == NULL) {
        free(mine);
        free(view);
        free(moves);
        dm_sb_printf(did, " nothing: out of memory;");
        return 0;
    }
    for (size_t i = 0; i < pm->nservers; i++) {
        if (pm->servers[i]->pool == p) {
            mine[n] = pm->servers[i];
            view[n] = machine_view(pm->servers[i]);
            n++;
        }
    }
    struct dm_pm_rules r;
    rules_of(p->cf, &r);
    unsigned short_by = 0;
    size_t k = dm_pm_plan(&r, view, n, want, now, urgent, moves, cap, &short_by);
    for (size_t i = 0; i < k; i++) {
        struct pm_server *s = mine[moves[i].index];
        if (moves[i].to == DM_PM_ACTIVE) {
            set_state(pm, s, DM_PM_ACTIVE, now);
            dm_sb_printf(did, " back to active %s;", s->cf->name);
        } else if (moves[i].to == DM_PM_BOOTING) {
            const char *why = s->state == DM_PM_FAILED   ? " (again: it failed)"
                              : s->state == DM_PM_ACTIVE ? " (down and never seen up: maybe asleep)"
                                                         : "";
            wake(pm, s, now);
            dm_sb_printf(did, " wake %s%s;", s->cf->name, why);
        } else {
            start_drain(pm, s, now);
            dm_sb_printf(did, " drain %s;", s->cf->name);
        }
    }
    if (short_by > 0) {
        dm_sb_printf(did, " %u more wanted, none can be woken now;", short_by);
    }
    *short_out = short_by;
    free(mine);
    free(view);
    free(moves);
    return k;
}

/* Whether the pool has a server serving or booting that the policy counts (not held). */
static bool
any_coming(const struct dm_powermgr *pm, const struct pm_pool *p)
{
    for (size_t i = 0; i < pm->nservers; i++) {
        const struct pm_server *s = pm->servers[i];
        if (s->pool == p && !s->held && !server_down(s) &&
            (s->state == DM_PM_ACTIVE || s->state == DM_PM_BOOTING)) {
            return true;
        }
    }
    return false;
}

/*
 * Whether a request of p is worth holding: a server of the pool serves,
 * boots, drains (the policy may take it back), failed its boot and may
 * still come up (its health check would say so; without one, only once its
 * wake may be tried again: dm_pm_retry_due), or sleeps with a wake actuator,
 * none of them held by the operator (maint, or slept or drained by hand).
 * Servers up but down by their health checks are not waited for, as no
 * proxy waits for them: HAProxy and nginx answer at once when every server
 * is down; but one down and never seen up since the manager took it, with a
 * wake actuator, is (it may be asleep: it is woken).
 */
static bool
any_prospect(const struct dm_powermgr *pm, const struct pm_pool *p)
{
    for (size_t i = 0; i < pm->nservers; i++) {
        const struct pm_server *s = pm->servers[i];
        /* Down by its health check: not waited for. Resting after failures
         * (passive checks): its rest ends within fail_timeout, and a machine
         * just woken whose service still starts is one (no health check). */
        if (s->pool != p || s->held ||
            (s->state == DM_PM_ACTIVE && atomic_load(&s->h->down) &&
             !(server_unseen(s) && s->cf->power.wake != DM_ACT_NONE))) {
            continue;
        }
        if (s->state == DM_PM_FAILED && !s->pcf->health.enabled) {
            struct dm_pm_rules r;
            rules_of(s->pcf, &r);
            struct dm_pm_server v = machine_view(s);
            if (dm_pm_retry_due(&r, &v, dm_mono_us())) {
                return true;
            }
            continue;
        }
        if (s->state != DM_PM_SLEEPING || s->cf->power.wake != DM_ACT_NONE) {
            return true;
        }
    }
    return false;
}

/*
 * Nothing to hold a request for: answered at once (the requests held now
 * get theirs at their next try, within 100 ms). Kept up to date at every
 * change of state and every tick (a health check's verdict changes no
 * state: the tick sees it).
 */
static void
hold_update(struct dm_powermgr *pm, const struct pm_pool *p)
{
    if (p->present && p->index < pm->rt->npools) {
        atomic_store_explicit(&pm->rt->pools[p->index].hold_off, !any_prospect(pm, p),
                              memory_order_relaxed);
    }
}

/* ---- the tick ---- */

/*
 * Whether the process this one replaced (SIGUSR2) still runs: it is our
 * parent until it exits. No server is slept meanwhile, its requests on it
 * unseen here.
 */
static bool
predecessor_runs(struct dm_powermgr *pm)
{
    if (pm->predecessor != 0 && getppid() != (pid_t)pm->predecessor) {
        dm_log_info("power: the process this one replaced has exited: drained servers may sleep");
        pm->predecessor = 0;
    }
    return pm->predecessor != 0;
}

/*
 * A new server takes what the process this one replaced (SIGUSR2) knew of
 * it: its state and whether the operator holds it (draining goes on: it is
 * slept once drained here and that process is gone), and its energy.
 */
static void
handed_state(struct pm_server *s)
{
    char at[DM_ADDR_TEXT];
    const struct dm_inherited_host *ih = dm_inherit_host(
        dm_inherited, dm_addr_text((const struct sockaddr *)&s->h->addr, at, sizeof(at)));
    if (ih == NULL || ih->pm_state < 0 || ih->pm_state >= DM_PM_STATES) {
        return;
    }
    s->state = (enum dm_pm_state)ih->pm_state;
    s->held = ih->held;
    s->energy_wh = ih->wh;
    s->unseen = s->state == DM_PM_ACTIVE && s->unseen;
    s->handed = true;
}

static void
progress(struct dm_powermgr *pm, struct pm_server *s, uint64_t now)
{
    struct dm_host *h = s->h;
    struct dm_pm_rules r;
    rules_of(s->pcf, &r);
    struct dm_pm_server v = machine_view(s);
    struct dm_pm_observed o = {
        .acked = dm_workers_acked(pm->ws, pm->nws, s->epoch) == pm->nws,
        .inflight = dm_counter_get(&h->inflight),
        .bound = dm_counter_get(&h->bound),
        .healthy = !atomic_load(&h->down),
    };
    double secs = (double)(now - s->since_us) / 1e6;
    enum dm_pm_event what = dm_pm_progress(&r, &v, &o, now);
    if ((what == DM_PM_DRAINED || what == DM_PM_DRAIN_TIMEOUT) && predecessor_runs(pm)) {
        return; /* the process this one replaced may still have requests on it */
    }
    switch (what) {
    case DM_PM_DRAINED:
        decision(pm, s->pool, "%s drained: sleep", s->cf->name);
        go_to_sleep(pm, s, now);
        break;
    case DM_PM_DRAIN_TIMEOUT:
        decision(pm, s->pool,
                 "%s: drain_timeout with %llu requests in flight and %llu bound clients: sleep",
                 s->cf->name, (unsigned long long)o.inflight, (unsigned long long)o.bound);
        go_to_sleep(pm, s, now);
        break;
    case DM_PM_UP:
        decision(pm, s->pool, "%s is up %.1f s after its %s: active", s->cf->name, secs,
                 s->state == DM_PM_FAILED ? "boot failed" : "wake");
        activate(pm, s, now);
        break;
    case DM_PM_BOOT_TIMEOUT:
        decision(pm, s->pool, "%s not healthy %.0f s after its wake: failed", s->cf->name, secs);
        set_state(pm, s, DM_PM_FAILED, now);
        break;
    default:
        break;
    }
}

/* The remaining-capacity tier of an average power per active server (Table 5). */
static const char *
tier_name(const struct pm_pool *p, double avg_w)
{
    static const char *const names[] = { "many-spare", "normal", "little-spare" };
    return names[dm_power_tier(&p->params, avg_w) - p->params.tiers];
}

/* Where the pool's tcp_max in use comes from: config, or learning / learned (auto). */
static const char *
tcp_max_source(const struct pm_pool *p)
{
    return !p->cf->power.tcp_max_auto ? "config" : p->tcpmax.learned ? "learned" : "learning";
}

static void
pool_trend(struct dm_powermgr *pm, struct pm_pool *p, uint64_t now)
{
    const struct dm_conf_power *pw = &p->cf->power;
    struct dm_pm_reading *r = malloc(pool_size(pm, p) * sizeof(*r));
    if (r == NULL) {
        dm_log_error("power: pool %s: out of memory: no reading this time", p->name);
        return;
    }
    size_t n = 0;
    struct dm_sbuf watts = { 0 };
    for (size_t i = 0; i < pm->nservers; i++) {
        struct pm_server *s = pm->servers[i];
        if (s->pool != p) {
            continue;
        }
        r[n++] = (struct dm_pm_reading){ .state = s->state,
                                         .held = s->held,
                                         .down = server_down(s),
                                         .w = s->est_w,
                                         .tcp = s->tcp,
                                         .reported = s->w_source != NULL &&
                                                     strncmp(s->w_source, "agent", 5) == 0,
                                         .idle_w = s->cf->power.idle_w,
                                         .full_w = s->cf->power.full_w };
        if (s->state == DM_PM_ACTIVE && !s->held) {
            dm_sb_printf(&watts, "%s%s %.1f", watts.len ? ", " : "", s->cf->name, s->est_w);
        }
    }
    if (pw->tcp_max_auto && dm_pm_tcpmax_learn(&p->tcpmax, r, n, now, &p->params.tcp_max) &&
        p->ops->init != NULL) {
        /* The policy's memory counted connections against the old value. */
        p->ops->init(p->state, &p->params);
    }
    struct dm_power_metrics m;
    dm_pm_metrics(&p->trend, r, n, (double)pw->trend_interval_ms / 1000, &m);
    free(r);
    struct dm_power_target t;
    p->ops->decide(p->state, &p->params, &m, now, &t);
    if (p->pinned >= 0) {
        t.servers = (unsigned)p->pinned;
        t.immediate = true;
    }
    double avg = m.n_live > 0 ? m.total_w / m.n_live : 0;
    p->m = m;
    p->target = t;
    unsigned now_on = m.n_live + m.n_booting;
    if ((unsigned)t.cls < DM_PC_CLASSES) {
        p->decided[t.cls][t.servers > now_on ? 0 : t.servers < now_on ? 1 : 2]++;
    }
    if (dm_pm_should_act(&p->trend, &t, &m, pw->period_ms * 1000, now)) {
        struct dm_sbuf did = { 0 };
        unsigned short_by;
        size_t moved = act(pm, p, t.servers, now, false, &did, &short_by);
        /* One that does nothing, as the one before did, is not said again
         * (a pin above the pool's size asks every trend_interval). */
        bool again = moved == 0 && p->idle && p->idle_short == short_by;
        p->idle = moved == 0;
        p->idle_short = short_by;
        if (again) {
            dm_log_debug("power: pool %s: %u servers wanted (live %u, booting %u):%s", p->name,
                         t.servers, m.n_live, m.n_booting, did.p != NULL ? did.p : " nothing");
            free(did.p);
            free(watts.p);
            return;
        }
        decision(pm, p,
                 "%s: W [%s] total %.1f (%.1f a server: tier %s), TCP %.0f dTCP %+.0f (tcp_max "
                 "%.0f%s%s), "
                 "alpha %g beta %g, class "
                 "%s, threshold %.1f W, need %.1f W: %u servers (live %u, booting %u)%s:%s",
                 p->pinned >= 0 ? "pinned" : policy_name(p), watts.p != NULL ? watts.p : "",
                 m.total_w, avg, tier_name(p, avg), m.tcp, m.d_tcp, p->params.tcp_max,
                 pw->tcp_max_auto ? ", " : "", pw->tcp_max_auto ? tcp_max_source(p) : "", t.w.alpha,
                 t.w.beta, dm_power_class_name(t.cls), t.threshold_w, t.need_w, t.servers, m.n_live,
                 m.n_booting, t.immediate ? " at once" : "", did.p != NULL ? did.p : " nothing");
        free(did.p);
    } else {
        dm_log_debug(
            "power: pool %s: %s: total %.1f W, TCP %.0f dTCP %+.0f, class %s, need %.1f W: "
            "%u servers (live %u, booting %u): nothing to do",
            p->name, policy_name(p), m.total_w, m.tcp, m.d_tcp, dm_power_class_name(t.cls),
            t.need_w, t.servers, m.n_live, m.n_booting);
    }
    free(watts.p);
}

static uint64_t
held_requests(const struct dm_powermgr *pm, const struct pm_pool *p)
{
    return dm_counter_get(&pm->rt->pools[p->index].held);
}

static void
tick_cb(uv_timer_t *t)
{
    struct dm_powermgr *pm = t->data;
    uint64_t now = dm_mono_us();
    for (size_t i = 0; i < pm->nservers; i++) {
        struct pm_server *s = pm->servers[i];
        if (s->unseen && atomic_load(&s->h->health_oks) != s->oks_at) {
            s->unseen = false; /* seen up: a later down is not a sleep the manager missed */
        }
        if (s->pool != NULL) {
            measure(s, now);
            progress(pm, s, now);
            if (!pm->stopping) {
                run_pending(pm, s, now);
            }
        }
    }
    for (size_t i = 0; i < pm->npools; i++) {
        struct pm_pool *p = pm->pools[i];
        if (!p->present) {
            continue;
        }
        hold_update(pm, p);
        /* Scale to zero: a held request and nothing coming wakes one now. */
        if (!any_coming(pm, p) && held_requests(pm, p) > 0) {
            struct dm_sbuf did = { 0 };
            unsigned short_by;
            size_t moved = act(pm, p, 1, now, true, &did, &short_by);
            /* None could be woken: said once, not every tick until one can. */
            if (moved > 0 || !p->held_stuck) {
                decision(pm, p, "%llu requests held with no server awake:%s",
                         (unsigned long long)held_requests(pm, p), did.p != NULL ? did.p : "");
            }
            p->held_stuck = moved == 0;
            free(did.p);
        } else {
            p->held_stuck = false;
        }
        if (now >= p->next_trend_us) {
            p->next_trend_us = now + p->cf->power.trend_interval_ms * 1000;
            pool_trend(pm, p, now);
        }
    }
}

/* ---- metrics listener ---- */

static struct pm_server *
find_agent(struct dm_powermgr *pm, const char *name)
{
    for (size_t i = 0; i < pm->nservers; i++) {
        struct pm_server *s = pm->servers[i];
        if (s->pool != NULL && s->cf->power.agent != NULL &&
            strcmp(s->cf->power.agent, name) == 0) {
            return s;
        }
    }
    return NULL;
}

static void
metrics_alloc(uv_handle_t *h, size_t sz, uv_buf_t *buf)
{
    struct dm_powermgr *pm = h->data;
    (void)sz;
    *buf = uv_buf_init(pm->rbuf, sizeof(pm->rbuf));
}

static void
metrics_recv(uv_udp_t *u, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
             unsigned flags)
{
    struct dm_powermgr *pm = u->data;
    if (n < 0 || (n == 0 && from == NULL)) {
        return; /* an error, or nothing more to read: there is no report to count */
    }
    if (n == 0) {
        pm->reports[DM_REPORT_MALFORMED]++; /* an empty datagram */
        return;
    }
    const struct dm_conf *cf = pm->rt->conf;
    struct dm_report r;
    enum dm_report_verdict v = DM_REPORT_MALFORMED;
    struct pm_server *s = NULL;
    if ((flags & UV_UDP_PARTIAL) == 0 && (size_t)n <= DM_REPORT_MAX) {
        /* Parsed first with no key (nothing trusted): its name says whose key
         * checks it, the server's own or the shared one. */
        v = dm_report_decode(buf->base, (size_t)n, NULL, 0, &r);
        if (v == DM_REPORT_BAD_HMAC) {
            s = find_agent(pm, r.name);
            /* No shared key (metrics gone from the config): nothing is trusted. */
            bool own = s != NULL && s->cf->power.agent_key != NULL && cf->metrics_key_len > 0;
            v = dm_report_decode(buf->base, (size_t)n,
                                 own ? s->cf->power.agent_key : cf->metrics_key,
                                 own ? s->cf->power.agent_key_len : cf->metrics_key_len, &r);
        }
    }
    if (v == DM_REPORT_OK && s == NULL) {
        v = DM_REPORT_UNKNOWN;
    }
    if (v == DM_REPORT_OK) {
        v = dm_report_accept(&r, &s->last, unix_ms(), cf->report_max_age_ms);
    }
    pm->reports[v]++;
    if (v != DM_REPORT_OK) {
        dm_log_debug("power: agent report dropped: %s", dm_report_verdict_name(v));
        return;
    }
    s->has_report = true;
    s->report_us = dm_mono_us();
    s->agent_w = r.est_w;
    s->has_measured = r.has_measured;
    s->measured_w = r.measured_w;
    s->agent_tcp = r.tcp;
}

/* ---- configuration ---- */

static void
params_of(const struct dm_conf_pool *cf, struct dm_power_params *pp)
{
    const struct dm_conf_power *pw = &cf->power;
    dm_power_params_default(pp);
    pp->t1_w = pw->t1_w;
    pp->step_w = pw->step_w;
    pp->tcp_max = pw->tcp_max;
    pp->full_w = pw->full_w;
    pp->normal = (struct dm_power_weights){ pw->normal.alpha, pw->normal.beta, pw->normal.neg_beta,
                                            pw->normal.neg_alpha };
    for (int i = 0; i < 3; i++) {
        pp->tiers[i] = (struct dm_power_weights){ pw->tiers[i].alpha, pw->tiers[i].beta,
                                                  pw->tiers[i].neg_beta, pw->tiers[i].neg_alpha };
    }
    pp->tier_low_w = pw->tier_low_w;
    pp->tier_high_w = pw->tier_high_w;
    pp->min_active = pw->min_active;
    pp->boot_us = pw->boot_ms * 1000;
    pp->delay_off_us = pw->delay_off_ms * 1000;
    pp->history_us = pw->history_ms * 1000;
    pp->margin = pw->margin;
    /* The servers' idle power, on average: what boot-aware counts load above. */
    double idle = 0;
    for (size_t i = 0; i < cf->nservers; i++) {
        idle += cf->servers[i].power.idle_w;
    }
    pp->idle_w = cf->nservers > 0 ? idle / (double)cf->nservers : pp->idle_w;
}

static struct pm_pool *
pool_named(struct dm_powermgr *pm, const char *name)
{
    for (size_t i = 0; i < pm->npools; i++) {
        if (strcmp(pm->pools[i]->name, name) == 0) {
            return pm->pools[i];
        }
    }
    return NULL;
}

static struct pm_server *
server_of(struct dm_powermgr *pm, const struct dm_host *h)
{
    for (size_t i = 0; i < pm->nservers; i++) {
        if (pm->servers[i]->h == h) {
            return pm->servers[i];
        }
    }
    return NULL;
}

/* Takes rt's pools and servers; 0 or -ENOMEM (then part of it may be taken). */
static int
configure(struct dm_powermgr *pm, struct dm_runtime *rt)
{
    uint64_t now = dm_mono_us();
    for (size_t i = 0; i < pm->npools; i++) {
        pm->pools[i]->was_present = pm->pools[i]->present;
        pm->pools[i]->present = false;
    }
    for (size_t i = 0; i < pm->nservers; i++) {
        pm->servers[i]->pool = NULL;
    }
    for (size_t i = 0; i < rt->npools; i++) {
        const struct dm_conf_pool *cf = rt->pools[i].cf;
        if (!cf->power.enabled) {
            continue;
        }
        struct pm_pool *p = pool_named(pm, cf->name);
        const char *name = p != NULL && p->chosen[0] ? p->chosen : cf->power.policy;
        const struct dm_power_ops *ops = dm_power_find(name);
        if (ops == NULL || ops->state_size > POLICY_STATE) {
            dm_log_error("power: pool %s: policy %s cannot run", cf->name, name);
            continue;
        }
        if (p == NULL) {
            void *grown = realloc(pm->pools, (pm->npools + 1) * sizeof(*pm->pools));
            if (grown == NULL) {
                return -ENOMEM;
            }
            pm->pools = grown;
            p = calloc(1, sizeof(*p));
            if (p == NULL || (p->name = strdup(cf->name)) == NULL) {
                free(p);
                return -ENOMEM;
            }
            p->pinned = -1;
            pm->pools[pm->npools++] = p;
        }
        struct dm_power_params pp;
        params_of(cf, &pp);
        if (!cf->power.tcp_max_auto || !p->was_present) {
            /* Learned afresh: the pool's servers may not be the ones it learned from. */
            p->tcpmax = (struct dm_pm_tcpmax){ 0 };
        } else if (p->tcpmax.learned) {
            pp.tcp_max = p->params.tcp_max; /* learned: a reload keeps it */
        }
        /* A policy's own state carries over a reload when the policy stays. */
        if (p->ops != ops || memcmp(&pp, &p->params, sizeof(pp)) != 0) {
            p->ops = ops;
            p->params = pp;
            if (ops->init != NULL) {
                ops->init(p->state, &p->params);
            }
        }
        p->cf = cf;
        p->index = i;
        p->present = true;
        uint64_t next_trend = now + cf->power.trend_interval_ms * 1000;
        if (p->next_trend_us > next_trend) {
            p->next_trend_us = next_trend; /* a shorter trend_interval applies at once */
        }
        if (p->pinned > (long)cf->nservers) {
            /* The operator's pin outlasts a reload, not the servers it counted. */
            dm_log_warn("power: pool %s: pinned to %ld servers, it has %zu now: pinned to %zu",
                        cf->name, p->pinned, cf->nservers, cf->nservers);
            p->pinned = (long)cf->nservers;
        }
        struct dm_servers *sv = rt->pools[i].sv;
        for (size_t j = 0; j < sv->n; j++) {
            struct pm_server *s = server_of(pm, sv->s[j].host);
            if (s == NULL) {
                void *grown = realloc(pm->servers, (pm->nservers + 1) * sizeof(*pm->servers));
                if (grown == NULL) {
                    return -ENOMEM;
                }
                pm->servers = grown;
                s = calloc(1, sizeof(*s));
                if (s == NULL) {
                    return -ENOMEM;
                }
                s->h = sv->s[j].host;
                s->since_us = now;
                /* Whatever state the host is in (maint by hand, asleep at a
                 * restart is unknown): a new server starts active, unseen
                 * until its health check passes (down all along, it is
                 * woken: server_unseen). */
                s->state = DM_PM_ACTIVE;
                s->unseen = true;
                s->oks_at = atomic_load(&s->h->health_oks);
                handed_state(s);
                pm->servers[pm->nservers++] = s;
            }
            s->pool = p;
            s->cf = &cf->servers[j];
            s->pcf = cf;
            s->index = j;
            const struct dm_conf_server_power *sp = &s->cf->power;
            const uint8_t *key = sp->agent_key != NULL ? sp->agent_key : rt->conf->metrics_key;
            size_t key_len = sp->agent_key != NULL ? sp->agent_key_len : rt->conf->metrics_key_len;
            if (key_len != s->key_len || (key_len > 0 && memcmp(key, s->key, key_len) != 0)) {
                /* What was taken under the old key (a number that key could
                 * push to any height) says nothing of what the new one signs. */
                s->last = (struct dm_report_last){ 0, 0 };
                if (key_len > 0) {
                    memcpy(s->key, key, key_len);
                }
                s->key_len = key_len;
            }
        }
    }
    for (size_t i = 0; i < pm->nservers; i++) {
        struct pm_server *s = pm->servers[i];
        if (s->pool == NULL && s->managed && s->state != DM_PM_ACTIVE) {
            /* Served as any server from now on. What the manager knows of it
             * stays should a later reload manage it again, not active: one
             * sleeping, or booting with its wake not run yet (dropped here), is
             * asleep; one booting whose wake ran (or runs: it goes on) stays
             * booting, and one failed stays failed: their health check or
             * boot_timeout says what they are then (taken as asleep, one up
             * meanwhile was believed asleep for good). */
            enum dm_pm_state was = s->state;
            bool asleep = was == DM_PM_SLEEPING || was == DM_PM_BOOTING || was == DM_PM_FAILED;
            bool unwoken = was == DM_PM_BOOTING && s->has_pending && s->pending == ACT_WAKE;
            dm_log_warn("power: %s is no longer power-managed: served as any server (it was "
                        "%s%s)",
                        s->h->text, dm_pm_state_name(was),
                        asleep ? ", and may be asleep: only a health check keeps requests off it"
                               : "");
            s->state = !asleep ? DM_PM_ACTIVE : unwoken ? DM_PM_SLEEPING : was;
            s->held = false;
            s->epoch = dm_workers_set_power(pm->ws, pm->nws, s->h, DM_POWER_AWAKE, now);
        }
        if (s->pool != NULL && !s->managed) {
            /* Managed (again): the workers hear its state, as it was when it
             * left, or active for a new one, whatever was asked of its host
             * meanwhile (POST /hosts/ADDR/drain): /power says what is. */
            s->energy_us = 0; /* its energy counts again from here, not over the gap */
            if (s->handed) {
                dm_log_info("power: %s: %s%s, as the process this one replaced left it", s->h->text,
                            dm_pm_state_name(s->state), s->held ? " (held)" : "");
                s->handed = false;
            } else if (s->state != DM_PM_ACTIVE) {
                dm_log_warn("power: %s is power-managed again: %s, as when it left", s->h->text,
                            dm_pm_state_name(s->state));
            } else if (atomic_load(&s->h->power) != DM_POWER_AWAKE) {
                dm_log_warn("power: %s is power-managed now: active (it was drained by hand)",
                            s->h->text);
            }
            set_state(pm, s, s->state, now);
        }
        if (s->pool != NULL && s->state == DM_PM_DRAINING &&
            (s->cf->power.wake == DM_ACT_NONE || (s->cf->power.keep_on && !s->held))) {
            /* The reload took its wake actuator away (it would not come
             * back), or keeps it on: it does not go to sleep. */
            dm_log_warn("power: %s: %s now: no longer drained for sleep, active", s->h->text,
                        s->cf->power.wake == DM_ACT_NONE ? "no wake actuator" : "keep_on");
            s->held = false;
            set_state(pm, s, DM_PM_ACTIVE, now);
        }
        s->managed = s->pool != NULL;
        /* An action that runs goes on, and the server stays busy until it
         * ends: managed again meanwhile, none of its other actions may run
         * at the same time (a wake while its sleep still runs). */
        if (s->pool == NULL) {
            s->has_pending = false; /* nothing runs for a server no longer managed */
        }
    }
    for (size_t i = 0; i < pm->npools; i++) {
        hold_update(pm, pm->pools[i]); /* the new runtime's flags, before the first tick */
    }
    return 0;
}

void
dm_power_reload(struct dm_powermgr *pm, struct dm_runtime *rt)
{
    if (pm == NULL) {
        return;
    }
    dm_runtime_ref(rt);
    const struct dm_conf *was = pm->rt->conf, *cf = rt->conf;
    /* A new key starts its agents' sequence numbers afresh (configure). */
    if (was->metrics_key_len > 0 && cf->metrics_key_len == 0 && pm->metrics_open) {
        dm_log_warn("power: no key_file any more: every agent report is dropped until the "
                    "next restart closes the metrics listener");
    }
    /* The new config's first: configure's changes of state speak of its pools. */
    struct dm_runtime *old = pm->rt;
    pm->rt = rt;
    if (configure(pm, rt) < 0) {
        dm_log_error("power: out of memory while reloading: some servers are not managed");
    }
    dm_runtime_unref(old);
}

struct dm_powermgr *
dm_power_start(uv_loop_t *loop, struct dm_runtime *rt, struct dm_worker *ws, unsigned n,
               struct sockaddr_storage *metrics_bound, int *err)
{
    struct dm_powermgr *pm = calloc(1, sizeof(*pm));
    int r = UV_ENOMEM;
    if (pm == NULL) {
        goto fail;
    }
    pm->loop = loop;
    pm->ws = ws;
    pm->nws = n;
    dm_runtime_ref(rt);
    pm->rt = rt;
    pm->predecessor = dm_inherited != NULL ? dm_inherited->from : 0;
    if (configure(pm, rt) < 0) {
        goto fail;
    }
    const struct dm_conf *cf = rt->conf;
    if (cf->metrics.text != NULL) {
        if ((r = uv_udp_init(loop, &pm->metrics)) < 0) {
            goto fail;
        }
        pm->metrics.data = pm;
        pm->metrics_open = true;
        /* No SO_REUSEADDR: a second dimmer on the same port is an error, not
         * a silent split of the reports. One handed over by the process this
         * one replaces is bound already. */
        int fd;
        if (dm_inherit_take(dm_inherited, DM_INHERIT_METRICS, cf->metrics.text, &fd, 1) == 1) {
            r = uv_udp_open(&pm->metrics, fd);
        } else {
            r = uv_udp_bind(&pm->metrics, (const struct sockaddr *)&cf->metrics.sa, 0);
        }
        int len = sizeof(*metrics_bound);
        if (r == 0) {
            r = uv_udp_getsockname(&pm->metrics, (struct sockaddr *)metrics_bound, &len);
        }
        if (r == 0) {
            r = uv_udp_recv_start(&pm->metrics, metrics_alloc, metrics_recv);
        }
        if (r < 0) {
            goto fail;
        }
        char at[DM_ADDR_TEXT];
        dm_log_info("power: agent metrics on udp %s",
                    dm_addr_text((const struct sockaddr *)metrics_bound, at, sizeof(at)));
    }
    if ((r = uv_udp_init(loop, &pm->wol)) < 0) {
        goto fail;
    }
    pm->wol.data = pm;
    pm->wol_open = true;
    struct sockaddr_in any = { .sin_family = AF_INET };
    if (uv_udp_bind(&pm->wol, (const struct sockaddr *)&any, 0) == 0) {
        (void)uv_udp_set_broadcast(&pm->wol, 1);
    }
    if ((r = uv_timer_init(loop, &pm->tick)) < 0) {
        goto fail;
    }
    pm->tick.data = pm;
    pm->tick_open = true;
    uv_timer_start(&pm->tick, tick_cb, POWER_TICK_MS, POWER_TICK_MS);
    uv_unref((uv_handle_t *)&pm->tick);
    return pm;

fail:
    *err = r;
    dm_power_stop(pm);
    return NULL;
}

void
dm_power_wait_orphans(void)
{
    for (struct pm_action *a = orphans; a != NULL; a = a->next_orphan) {
        action_hold_loop(a, true);
    }
}

void
dm_power_kick(struct dm_powermgr *pm)
{
    if (pm != NULL && pm->tick_open && !pm->stopping) {
        tick_cb(&pm->tick);
    }
}

static void
pm_free(struct dm_powermgr *pm)
{
    for (size_t i = 0; i < pm->npools; i++) {
        free(pm->pools[i]->name);
        free(pm->pools[i]);
    }
    for (size_t i = 0; i < pm->nservers; i++) {
        free(pm->servers[i]);
    }
    free(pm->pools);
    free(pm->servers);
    dm_runtime_unref(pm->rt);
    free(pm);
}

static void
pm_closed(uv_handle_t *h)
{
    struct dm_powermgr *pm = h->data;
    if (--pm->open == 0) {
        pm_free(pm);
    }
}

void
dm_power_stop(struct dm_powermgr *pm)
{
    if (pm == NULL || pm->stopping) {
        return;
    }
    pm->stopping = true;
    for (size_t i = 0; i < pm->nservers; i++) {
        struct pm_action *a = pm->servers[i]->action;
        if (a != NULL) {
            /*
             * A wake or sleep under way is left to finish, bounded by its
             * command_timeout as always, not cut short: killed, a wake that
             * SIGUSR2's new process takes over as booting never came (the
             * server failed at its boot timeout), and a command cut in its
             * middle (an ssh, a BMC's API) may leave the machine anywhere.
             * Its handles hold the control loop only once the workers have
             * drained (dm_power_wait_orphans): the stop is not delayed.
             */
            dm_log_info("power: %s %s (%s): under way as dimmer stops: left to finish (at most "
                        "%llu ms more, its command_timeout)",
                        kind_name(a->kind), a->name != NULL ? a->name : "?", how_name(a->how),
                        (unsigned long long)uv_timer_get_due_in(&a->timer));
            a->s = NULL;
            a->pm = NULL;
            pm->servers[i]->action = NULL;
            a->next_orphan = orphans;
            orphans = a;
            action_hold_loop(a, false);
        }
    }
    uv_handle_t *hs[] = { (uv_handle_t *)&pm->metrics, (uv_handle_t *)&pm->wol,
                          (uv_handle_t *)&pm->tick };
    bool open[] = { pm->metrics_open, pm->wol_open, pm->tick_open };
    pm->open = 1; /* held until every close is asked */
    for (size_t i = 0; i < 3; i++) {
        if (open[i]) {
            pm->open++;
            hs[i]->data = pm;
            uv_close(hs[i], pm_closed);
        }
    }
    pm->metrics_open = pm->wol_open = pm->tick_open = false;
    if (--pm->open == 0) {
        pm_free(pm);
    }
}

/* ---- the operator ---- */

bool
dm_power_manages(const struct dm_powermgr *pm, const struct dm_host *h)
{
    if (pm == NULL) {
        return false;
    }
    for (size_t i = 0; i < pm->nservers; i++) {
        if (pm->servers[i]->h == h && pm->servers[i]->pool != NULL) {
            return true;
        }
    }
    return false;
}

int
dm_power_admin(struct dm_powermgr *pm, struct dm_host *h, const char *action, uint64_t *epoch,
               char *msg, size_t msglen)
{
    struct pm_server *s = pm != NULL ? server_of(pm, h) : NULL;
    uint64_t now = dm_mono_us();
    *epoch = 0;
    if (s == NULL || s->pool == NULL) {
        snprintf(msg, msglen, "not a server of a power-managed pool");
        return 404;
    }
    enum dm_pm_state was = s->state;
    if (strcmp(action, "maint") == 0 || strcmp(action, "drain") == 0) {
        if (s->state == DM_PM_SLEEPING || s->state == DM_PM_BOOTING || s->state == DM_PM_FAILED) {
            snprintf(msg, msglen, "%s is %s: wake it first", s->cf->name,
                     dm_pm_state_name(s->state));
            return 409;
        }
        s->held = true;
        set_state(pm, s, DM_PM_MAINT, now);
    } else if (strcmp(action, "sleep") == 0) {
        if (s->cf->power.wake == DM_ACT_NONE) {
            snprintf(msg, msglen, "%s has no wake actuator: it would not come back", s->cf->name);
            return 409;
        }
        s->held = true;
        if (s->state == DM_PM_ACTIVE || s->state == DM_PM_MAINT) {
            start_drain(pm, s, now);
        } else if (s->state == DM_PM_BOOTING || s->state == DM_PM_FAILED) {
            go_to_sleep(pm, s, now);
        } else if (s->state == DM_PM_SLEEPING) {
            /* Asleep for the manager, maybe awake all the same (woken behind
             * its back: the operator knows): its sleep actuator runs again.
             * One whose sleep then fails is failed: it was not known up. */
            if (s->pcf->health.enabled) {
                mark_down(s->h);
            }
            s->sleep_from_up = false;
            run_action(pm, s, ACT_SLEEP);
        }
    } else if (strcmp(action, "wake") == 0) {
        s->held = false;
        if (s->state == DM_PM_SLEEPING || s->state == DM_PM_FAILED ||
            (s->state == DM_PM_ACTIVE && s->pcf->health.enabled && atomic_load(&s->h->down) &&
             s->cf->power.wake != DM_ACT_NONE && s->action == NULL && !s->has_pending)) {
            /* Active but down by its health check: maybe asleep (the
             * operator knows): its wake runs. */
            wake(pm, s, now);
        } else if (s->state == DM_PM_DRAINING || s->state == DM_PM_MAINT) {
            set_state(pm, s, DM_PM_ACTIVE, now);
        }
    } else if (strcmp(action, "ready") == 0) {
        s->held = false;
        if (s->state == DM_PM_MAINT) {
            set_state(pm, s, DM_PM_ACTIVE, now);
        } else if (s->state == DM_PM_ACTIVE) {
            /* Said to the workers again, whatever they were told meanwhile. */
            s->epoch = dm_workers_set_power(pm->ws, pm->nws, s->h, DM_POWER_AWAKE, now);
        } else if (s->state == DM_PM_FAILED) {
            set_state(pm, s, DM_PM_SLEEPING, now);
        }
    } else {
        snprintf(msg, msglen, "unknown action");
        return 404;
    }
    *epoch = s->epoch;
    hold_update(pm, s->pool); /* held or not, whether its state changed or not */
    decision(pm, s->pool, "operator: %s %s (%s -> %s%s)", action, s->cf->name,
             dm_pm_state_name(was), dm_pm_state_name(s->state), s->held ? ", held" : "");
    snprintf(msg, msglen, "%s", dm_pm_state_name(s->state));
    return 200;
}

int
dm_power_pin(struct dm_powermgr *pm, const char *pool, long servers, char *msg, size_t msglen)
{
    struct pm_pool *p = pm != NULL ? pool_named(pm, pool) : NULL;
    if (p == NULL || !p->present) {
        snprintf(msg, msglen, "no power-managed pool \"%s\"", pool);
        return 404;
    }
    if (servers > (long)p->cf->nservers) {
        snprintf(msg, msglen, "pool \"%s\" has %zu servers: servers=%ld is not in 0 to %zu", pool,
                 p->cf->nservers, servers, p->cf->nservers);
        return 400;
    }
    p->pinned = servers;
    p->next_trend_us = 0; /* asked at the next tick, not trend_interval later */
    decision(pm, p, servers >= 0 ? "operator: pinned to %ld servers" : "operator: unpinned%.0ld",
             servers >= 0 ? servers : 0);
    if (servers >= 0) {
        snprintf(msg, msglen, "pinned to %ld of %zu servers", servers, p->cf->nservers);
    } else {
        snprintf(msg, msglen, "unpinned");
    }
    return 200;
}

int
dm_power_choose(struct dm_powermgr *pm, const char *pool, const char *policy, char *msg,
                size_t msglen)
{
    struct pm_pool *p = pm != NULL ? pool_named(pm, pool) : NULL;
    if (p == NULL || !p->present) {
        snprintf(msg, msglen, "no power-managed pool \"%s\"", pool);
        return 404;
    }
    const char *name = policy[0] ? policy : p->cf->power.policy;
    const struct dm_power_ops *ops = dm_power_find(name);
    if (ops == NULL || ops->state_size > POLICY_STATE || strlen(name) >= sizeof(p->chosen)) {
        struct dm_sbuf known = { 0 };
        for (const struct dm_power_ops *const *o = dm_power_registry; *o != NULL; o++) {
            dm_sb_printf(&known, "%s%s", known.len ? ", " : "", (*o)->name);
        }
        snprintf(msg, msglen, "no power policy \"%.40s\" (%s)", name,
                 known.p != NULL ? known.p : "");
        free(known.p);
        return 400;
    }
    if (policy[0] && strcmp(policy, p->cf->power.policy) != 0) {
        snprintf(p->chosen, sizeof(p->chosen), "%s", policy);
    } else {
        p->chosen[0] = 0;
    }
    /* A policy starts afresh: another's memory means nothing to it, and the
     * same one chosen again is asked to forget. */
    p->ops = ops;
    if (ops->init != NULL) {
        ops->init(p->state, &p->params);
    }
    p->next_trend_us = 0;
    decision(pm, p, "operator: policy %s (%s)", policy_name(p),
             p->chosen[0] ? "chosen by hand" : "the config's");
    snprintf(msg, msglen, "policy %s%s", policy_name(p),
             p->chosen[0] ? " until POST /power/POOL/policy gives the config's back" : "");
    return 200;
}

/* ---- JSON ---- */

/* A JSON string of s (names and addresses from the config, decisions of ours). */
static void
json_str(struct dm_sbuf *b, const char *s)
{
    char text[DM_JSON_TEXT];
    dm_sb_printf(b, "\"%s\"", dm_json_esc(text, sizeof(text), s));
}

void
dm_power_stats_json(struct dm_powermgr *pm, struct dm_sbuf *b)
{
    dm_sb_printf(b, "\"reports\":{");
    for (int v = 0; v < DM_REPORT_VERDICTS; v++) {
        dm_sb_printf(b, "%s\"%s\":%llu", v ? "," : "",
                     dm_report_verdict_name((enum dm_report_verdict)v),
                     (unsigned long long)(pm != NULL ? pm->reports[v] : 0));
    }
    dm_sb_printf(b, "}");
}

static void
server_json(struct dm_sbuf *b, const struct pm_server *s, uint64_t now)
{
    dm_sb_printf(b, "{\"name\":");
    json_str(b, s->cf->name);
    dm_sb_printf(b, ",\"address\":");
    json_str(b, s->cf->addr.text);
    dm_sb_printf(b,
                 ",\"state\":\"%s\",\"for_ms\":%llu,\"held\":%s,\"watts\":%.2f,"
                 "\"watts_source\":\"%s\",\"tcp\":%.0f,\"tcp_source\":\"%s\",\"inflight\":%llu,"
                 "\"bound_clients\":%llu,\"energy_wh\":%.4f,",
                 dm_pm_state_name(s->state), (unsigned long long)((now - s->since_us) / 1000),
                 s->held ? "true" : "false", s->est_w, s->w_source != NULL ? s->w_source : "proxy",
                 s->tcp, s->tcp_source != NULL ? s->tcp_source : "proxy",
                 (unsigned long long)dm_counter_get(&s->h->inflight),
                 (unsigned long long)dm_counter_get(&s->h->bound), s->energy_wh);
    if (s->has_report) {
        dm_sb_printf(b, "\"agent\":{\"name\":");
        json_str(b, s->cf->power.agent);
        dm_sb_printf(b, ",\"age_ms\":%llu,\"est_w\":%.2f,\"measured_w\":",
                     (unsigned long long)((now - s->report_us) / 1000), s->agent_w);
        if (s->has_measured) {
            dm_sb_printf(b, "%.2f", s->measured_w);
        } else {
            dm_sb_printf(b, "null");
        }
        dm_sb_printf(b, ",\"tcp\":%llu,\"seq\":%llu},", (unsigned long long)s->agent_tcp,
                     (unsigned long long)s->last.seq);
    } else {
        dm_sb_printf(b, "\"agent\":null,");
    }
    dm_sb_printf(b, "\"actions\":%llu,\"action_failures\":%llu,\"action_running\":%s}",
                 (unsigned long long)s->actions, (unsigned long long)s->action_failures,
                 s->action != NULL ? "true" : "false");
}

void
dm_power_json(struct dm_powermgr *pm, struct dm_sbuf *b)
{
    uint64_t now = dm_mono_us();
    dm_sb_printf(b, "{\"pools\":[");
    bool first = true;
    for (size_t i = 0; pm != NULL && i < pm->npools; i++) {
        struct pm_pool *p = pm->pools[i];
        if (!p->present) {
            continue;
        }
        const struct dm_power_target *t = &p->target;
        double watts = 0, energy = 0;
        for (size_t j = 0; j < pm->nservers; j++) {
            if (pm->servers[j]->pool == p) {
                watts += pm->servers[j]->est_w;
                energy += pm->servers[j]->energy_wh;
            }
        }
        dm_sb_printf(b, "%s{\"name\":", first ? "" : ",");
        first = false;
        json_str(b, p->name);
        dm_sb_printf(b,
                     ",\"policy\":\"%s\",\"policy_source\":\"%s\",\"config_policy\":\"%s\","
                     "\"pinned\":%ld,\"class\":\"%s\",\"tier\":\"%s\","
                     "\"alpha\":%g,\"beta\":%g,\"neg_beta\":%g,\"neg_alpha\":%g,"
                     "\"threshold_w\":%.2f,\"need_w\":%.2f,\"target\":%u,\"immediate\":%s,"
                     "\"live\":%u,\"booting\":%u,\"total\":%u,\"total_w\":%.2f,\"tcp\":%.0f,"
                     "\"d_tcp\":%.0f,\"tcp_source\":\"%s\",\"tcp_max\":%.1f,"
                     "\"tcp_max_source\":\"%s\",\"held_requests\":%llu,"
                     "\"watts\":%.2f,\"energy_wh\":%.4f,\"servers\":[",
                     policy_name(p), p->chosen[0] ? "operator" : "config", p->cf->power.policy,
                     p->pinned, dm_power_class_name(t->cls),
                     tier_name(p, p->m.n_live > 0 ? p->m.total_w / p->m.n_live : 0), t->w.alpha,
                     t->w.beta, t->w.neg_beta, t->w.neg_alpha, t->threshold_w, t->need_w,
                     t->servers, t->immediate ? "true" : "false", p->m.n_live, p->m.n_booting,
                     p->m.n_total, p->m.total_w, p->m.tcp, p->m.d_tcp,
                     p->cf->power.tcp_source == DM_TCP_AGENT ? "agent" : "proxy", p->params.tcp_max,
                     tcp_max_source(p), (unsigned long long)held_requests(pm, p), watts, energy);
        bool sfirst = true;
        for (size_t j = 0; j < pm->nservers; j++) {
            if (pm->servers[j]->pool == p) {
                dm_sb_printf(b, "%s", sfirst ? "" : ",");
                sfirst = false;
                server_json(b, pm->servers[j], now);
            }
        }
        dm_sb_printf(b, "]}");
    }
    dm_sb_printf(b, "],");
    dm_power_stats_json(pm, b);
    dm_sb_printf(b, ",\"decisions\":[");
    size_t nd = pm != NULL ? pm->ndecisions : 0;
    size_t from = nd > DECISIONS ? nd - DECISIONS : 0;
    for (size_t k = nd; k > from; k--) {
        const struct decision *d = &pm->decisions[(k - 1) % DECISIONS];
        dm_sb_printf(b, "%s{\"unix_ms\":%llu,\"text\":", k == nd ? "" : ",",
                     (unsigned long long)d->unix_ms);
        json_str(b, d->text);
        dm_sb_printf(b, "}");
    }
    dm_sb_printf(b, "]}\n");
}

/* ---- GET /metrics ---- */

/* "name{pool="P",server="S"": a sample of s, its labels still open. */
static void
server_sample(struct dm_sbuf *b, const char *name, const struct pm_server *s)
{
    dm_sb_printf(b, "%s{pool=", name);
    dm_metrics_label(b, s->pool->name);
    dm_sb_printf(b, ",server=");
    dm_metrics_label(b, s->cf->name);
}

void
dm_power_metrics_text(struct dm_powermgr *pm, struct dm_sbuf *b)
{
    dm_metrics_family(b, "dimmer_power_reports_total", "counter",
                      "Agent reports received, by verdict: ok (accepted) or why dropped.");
    for (int v = 0; v < DM_REPORT_VERDICTS; v++) {
        dm_sb_printf(b, "dimmer_power_reports_total{verdict=\"%s\"} %llu\n",
                     dm_report_verdict_name((enum dm_report_verdict)v),
                     (unsigned long long)(pm != NULL ? pm->reports[v] : 0));
    }
    if (pm == NULL) {
        return;
    }
    uint64_t now = dm_mono_us();
    dm_metrics_family(b, "dimmer_power_server_watts", "gauge",
                      "A power-managed server's estimated power, by the source of the figure "
                      "(agent: its report; proxy: dimmer's own counters).");
    for (size_t i = 0; i < pm->nservers; i++) {
        const struct pm_server *s = pm->servers[i];
        if (s->pool != NULL) {
            server_sample(b, "dimmer_power_server_watts", s);
            dm_sb_printf(b, ",source=\"%s\"} %.3f\n", s->w_source != NULL ? s->w_source : "proxy",
                         s->est_w);
        }
    }
    dm_metrics_family(b, "dimmer_power_server_energy_wh_total", "counter",
                      "Energy a power-managed server used by the estimate, in watt-hours.");
    for (size_t i = 0; i < pm->nservers; i++) {
        const struct pm_server *s = pm->servers[i];
        if (s->pool != NULL) {
            server_sample(b, "dimmer_power_server_energy_wh_total", s);
            dm_sb_printf(b, "} %.6f\n", s->energy_wh);
        }
    }
    dm_metrics_family(b, "dimmer_power_server_state", "gauge",
                      "1 for a power-managed server's state in the manager's state machine.");
    for (size_t i = 0; i < pm->nservers; i++) {
        const struct pm_server *s = pm->servers[i];
        for (int k = 0; s->pool != NULL && k < DM_PM_STATES; k++) {
            server_sample(b, "dimmer_power_server_state", s);
            dm_sb_printf(b, ",state=\"%s\"} %d\n", dm_pm_state_name((enum dm_pm_state)k),
                         (int)s->state == k);
        }
    }
    dm_metrics_family(b, "dimmer_power_server_state_seconds", "gauge",
                      "Time a power-managed server has been in its state.");
    for (size_t i = 0; i < pm->nservers; i++) {
        const struct pm_server *s = pm->servers[i];
        if (s->pool != NULL) {
            server_sample(b, "dimmer_power_server_state_seconds", s);
            dm_sb_printf(b, "} %.3f\n", now > s->since_us ? (double)(now - s->since_us) / 1e6 : 0);
        }
    }
    dm_metrics_family(b, "dimmer_power_server_actions_total", "counter",
                      "Power actions (wake, sleep) carried out on a server, by result.");
    for (size_t i = 0; i < pm->nservers; i++) {
        const struct pm_server *s = pm->servers[i];
        for (int k = 0; s->pool != NULL && k < 2; k++) {
            server_sample(b, "dimmer_power_server_actions_total", s);
            dm_sb_printf(b, ",result=\"%s\"} %llu\n", k == 0 ? "ok" : "failed",
                         (unsigned long long)(k == 0 ? s->actions - s->action_failures
                                                     : s->action_failures));
        }
    }
    static const struct {
        const char *name, *help;
    } gauges[] = {
        { "dimmer_power_pool_watts",
          "Estimated power of the pool's awake servers (the policy's input)." },
        { "dimmer_power_pool_target_servers", "Servers the policy wants on." },
        { "dimmer_power_pool_active_servers", "Servers serving now." },
        { "dimmer_power_pool_booting_servers", "Servers booting now." },
        { "dimmer_power_pool_servers", "Servers the pool's power manager knows." },
        { "dimmer_power_pool_tcp", "The policy's TCP figure (client connections and requests)." },
    };
    for (size_t f = 0; f < sizeof(gauges) / sizeof(gauges[0]); f++) {
        dm_metrics_family(b, gauges[f].name, "gauge", gauges[f].help);
        for (size_t i = 0; i < pm->npools; i++) {
            const struct pm_pool *p = pm->pools[i];
            if (!p->present) {
                continue;
            }
            double v[] = { p->m.total_w,   p->target.servers, p->m.n_live,
                           p->m.n_booting, p->m.n_total,      p->m.tcp };
            dm_sb_printf(b, "%s{pool=", gauges[f].name);
            dm_metrics_label(b, p->name);
            dm_sb_printf(b, "} %.3f\n", v[f]);
        }
    }
    dm_metrics_family(b, "dimmer_power_decisions_total", "counter",
                      "The policy's decisions by load class and by what the target asks of the "
                      "servers on: up, down or stay.");
    static const char *const actions[] = { "up", "down", "stay" };
    for (size_t i = 0; i < pm->npools; i++) {
        const struct pm_pool *p = pm->pools[i];
        for (int c = 0; p->present && c < DM_PC_CLASSES; c++) {
            for (int a = 0; a < 3; a++) {
                dm_sb_printf(b, "dimmer_power_decisions_total{pool=");
                dm_metrics_label(b, p->name);
                dm_sb_printf(b, ",class=\"%s\",action=\"%s\"} %llu\n",
                             dm_power_class_name((enum dm_power_class)c), actions[a],
                             (unsigned long long)p->decided[c][a]);
            }
        }
    }
}

int
dm_power_metrics_fd(const struct dm_powermgr *pm)
{
    uv_os_fd_t fd = -1;
    return pm != NULL && pm->metrics_open && uv_fileno((const uv_handle_t *)&pm->metrics, &fd) == 0
               ? fd
               : -1;
}

int
dm_power_state_words(const struct dm_powermgr *pm, char **s)
{
    for (size_t i = 0; pm != NULL && i < pm->nservers; i++) {
        const struct pm_server *sv = pm->servers[i];
        char at[DM_ADDR_TEXT];
        if (sv->pool != NULL &&
            dm_inherit_append_power(
                s, dm_addr_text((const struct sockaddr *)&sv->h->addr, at, sizeof(at)),
                (int)sv->state, sv->held, sv->energy_wh) < 0) {
            return -1;
        }
    }
    return 0;
}
