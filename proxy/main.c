/*
 * dimmer: the proxy's main(). The main thread is the control thread: it loads
 * the config, starts the workers, and runs a loop with the signal handlers
 * (SIGHUP reloads, SIGTERM/SIGINT drain and stop), the health checks and the
 * admin listener.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include <uv.h>

#include "balancers/hosts.h"
#include "conf/conf.h"
#include "conf/tls.h"
#include "parsers/catalog.h"
#include "proxy/accesslog.h"
#include "proxy/health.h"
#include "proxy/inherit.h"
#include "proxy/internal.h"
#include "proxy/log.h"
#include "proxy/peers.h"
#include "proxy/power.h"
#include "proxy/session.h"
#include "proxy/worker.h"

#define DM_SESSIONS_TICK_MS 10 /* how often the session placers' batch windows are looked at */
/* How long the new process of a SIGUSR2 may take to be ready (a big catalog loads). */
#define DM_UPGRADE_READY_S 60
/* The most of DIMMER_INHERIT handed over (execve takes 128 KiB a string). */
#define DM_UPGRADE_ENV_MAX (100 * 1024)

struct control {
    uv_loop_t *loop;
    uv_signal_t signals[6];  /* handled_signals[] */
    unsigned nsignals;       /* initialized and not closed */
    struct dm_runtime *rt;   /* live runtime (our reference) */
    struct dm_runtime *prev; /* the one before, kept until the next reload */
    /* The listeners bound at start: their addresses as written, and whether TLS. */
    char **bound_text;
    bool *bound_tls;
    size_t nbound;
    char *admin_text; /* the admin and metrics listeners' addresses as written at start */
    char *metrics_text;
    char **argv;          /* as started: SIGUSR2 starts the program of argv[0] again */
    uv_process_t upgrade; /* SIGUSR2: the new process, until it is ready or gone */
    bool upgrade_open;
    uv_pipe_t upgrade_pipe; /* on which it says it is ready */
    bool upgrade_pipe_open;
    uv_timer_t upgrade_timer; /* bounds how long it may take */
    bool upgrade_timer_open;
    char upgrade_byte;
    struct health_of *health_of; /* the running checker and what it borrows; NULL: none */
    struct health_of *retired;   /* checkers a reload retired, their last checks still out */
    struct dm_admin *admin;
    struct dm_worker *workers;
    unsigned nworkers;
    struct dm_catalog *catalog;
    struct dm_hosts *hosts;     /* every server address seen, for the life of the process */
    struct dm_placers *placers; /* every session pool's placer, for the life of the process */
    uv_timer_t sessions;        /* runs the placers' batch passes */
    bool sessions_open;
    uv_async_t acked; /* workers acknowledged a command (worker.h) */
    bool acked_open;
    uv_async_t held; /* a worker held a request: no server awake (dm_hold_notify) */
    bool held_open;
    struct dm_powermgr *power;
    const char *conf_path;
    int access_fd;       /* the access log's descriptor, > 2 when it is a file */
    char *access_path;   /* its path */
    uv_timer_t watchdog; /* systemd's watchdog, fed while every worker ticks */
    bool watchdog_open;
    uint64_t *beats_seen; /* each worker's heartbeat at the last feed */
    uv_timer_t reload;    /* a SIGHUP's reload, at the next turn: a burst of them is one */
    bool reload_open;
    bool stopping;
};

/* SIGQUIT stops gracefully too, as nginx's; while dimmer drains, each is
 * still handled (taken and set aside), never the default action's kill. */
static const int handled_signals[6] = { SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2 };

static void
usage(FILE *f)
{
    fprintf(f, "usage: dimmer -c FILE          run with a YAML configuration\n"
               "       dimmer -t -c FILE       check a configuration and exit\n"
               "       dimmer --listen ADDR --backend ADDR[,ADDR...] [--workers N]\n"
               "                               quick start: one pool, round robin, defaults\n"
               "options:\n"
               "  -c, --config FILE   configuration file (see conf/README.md)\n"
               "  -t, --test          check the configuration, print \"configuration ok\"\n"
               "  --listen ADDR       quick start listener, e.g. 127.0.0.1:8080\n"
               "  --backend LIST      quick start servers, e.g. 127.0.0.1:9001,127.0.0.1:9002\n"
               "  --workers N         worker threads (overrides the config; default auto)\n"
               "  --ports-file FILE   once listening, write FILE (atomically), one line per\n"
               "                      listener: \"listen ADDR BOUND\", then \"admin ADDR BOUND\"\n"
               "                      and \"metrics ADDR BOUND\" when configured (ADDR as\n"
               "                      configured; port 0 binds a free port)\n"
               "  -v, --version       print the version\n"
               "signals: SIGHUP reloads the configuration, SIGTERM drains and stops, SIGUSR1\n"
               "reopens the error and access logs (after logrotate moved them), SIGUSR2\n"
               "starts the program again (a new binary at the same path) with the listening\n"
               "sockets open, and drains and stops once it is ready\n");
}

static void
print_errors(struct dm_conf_errors *err)
{
    for (size_t i = 0; i < err->n; i++) {
        fprintf(stderr, "%s\n", err->msg[i]);
    }
}

/* A checker's configuration and servers: a reference to their runtime, held
 * until the checker is closed (a retired one's checks run on after a reload). */
struct health_of {
    struct dm_runtime *rt;
    struct control *ctl;
    struct dm_health *h;
    struct health_of *next; /* in ctl->retired, once retired */
    struct dm_servers *servers[];
};

static void
health_stopped(void *arg)
{
    struct health_of *of = arg;
    for (struct health_of **p = &of->ctl->retired; *p != NULL; p = &(*p)->next) {
        if (*p == of) {
            *p = of->next;
            break;
        }
    }
    dm_runtime_unref(of->rt);
    free(of);
}

/* Starts the health checks of rt; 0, or -ENOMEM with none running (the
 * checker before is the caller's to stop or retire either way). */
static int
health_start(struct control *ctl, struct dm_runtime *rt)
{
    struct health_of *of = malloc(sizeof(*of) + (rt->npools + 1) * sizeof(of->servers[0]));
    ctl->health_of = NULL;
    if (of == NULL) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < rt->npools; i++) {
        of->servers[i] = rt->pools[i].sv;
    }
    of->h = dm_health_start(ctl->loop, rt->conf, (struct dm_servers *const *)of->servers);
    if (of->h == NULL) {
        free(of);
        return -ENOMEM;
    }
    dm_runtime_ref(rt);
    of->rt = rt;
    of->ctl = ctl;
    of->next = NULL;
    ctl->health_of = of;
    return 0;
}

/* Whether c's listeners are those bound at start, as written (the sockets a
 * reload keeps whatever it says: not the previous config's). */
static bool
same_listeners(const struct dm_conf *c, const struct control *ctl)
{
    if (c->nlisteners != ctl->nbound) {
        return false;
    }
    for (size_t i = 0; i < c->nlisteners; i++) {
        if (ctl->bound_text[i] == NULL || strcmp(c->listeners[i].text, ctl->bound_text[i]) != 0) {
            return false;
        }
    }
    return true;
}

/* Fills the catalog from the configured docroot and manifest. */
static int
preload(struct dm_catalog *cat, const struct dm_conf *conf, char *err, size_t errlen)
{
    const struct dm_conf_catalog *cc = &conf->catalog;
    if (cc->docroot != NULL) {
        int r = dm_catalog_preload_docroot(cat, cc->docroot, cc->host, cc->scan_limit, err, errlen);
        if (r < 0) {
            return r;
        }
    }
    if (cc->manifest != NULL) {
        return dm_catalog_preload_manifest(cat, cc->manifest, cc->host, err, errlen);
    }
    return 0;
}

static void reload_conf(struct control *ctl);

/* SIGHUP: systemd hears RELOADING=1 before and READY=1 after (sd_notify(3)). */
static void
reload(struct control *ctl)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
               (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
    /* A reload runs on this thread (name lookups, a catalog preload): the
     * watchdog is fed on both sides of it. */
    if (ctl->watchdog_open) {
        sd_notify(0, "WATCHDOG=1");
    }
    reload_conf(ctl);
    sd_notify(0, ctl->watchdog_open ? "READY=1\nWATCHDOG=1" : "READY=1");
}

/* Two optional texts alike: both absent, or equal. */
static bool
same_text(const char *a, const char *b)
{
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

/*
 * The descriptors the control thread may hold at once under cf: a check of
 * each server checked, a power action of each power-managed one (a command's
 * pipe and process, or a connection), the admin's connections and listener,
 * the agents' socket.
 */
static uint64_t
control_fds(const struct dm_conf *cf)
{
    uint64_t n = DM_ADMIN_CONNS_MAX + 2;
    for (size_t i = 0; i < cf->npools; i++) {
        const struct dm_conf_pool *p = &cf->pools[i];
        n += (p->health.enabled ? p->nservers : 0) + (p->power.enabled ? 2 * p->nservers : 0);
    }
    return n;
}

static void
reload_conf(struct control *ctl)
{
    if (ctl->conf_path == NULL) {
        dm_log_warn("reload: no configuration file (quick start): nothing to reload");
        return;
    }
    struct dm_conf_errors err = { 0 };
    struct dm_conf *conf = dm_conf_load(ctl->conf_path, &err);
    if (conf == NULL) {
        dm_log_error("reload failed, keeping the running configuration:");
        for (size_t i = 0; i < err.n; i++) {
            dm_log_error("%s", err.msg[i]);
        }
        dm_conf_errors_fini(&err);
        return;
    }
    dm_conf_errors_fini(&err);
    for (size_t i = 0; i < conf->nwarnings; i++) {
        dm_log_warn("reload: %s", conf->warnings[i]);
    }
    if (!same_listeners(conf, ctl)) {
        /* The sockets stay those bound at start, and listener i takes the tls
         * block of the new listener i: one that would speak TLS where it did
         * not, or stop where it did, on a socket other than its own, waits
         * for the restart. */
        for (size_t i = 0; i < ctl->nbound; i++) {
            bool had = ctl->bound_tls[i];
            bool same = i < conf->nlisteners && ctl->bound_text[i] != NULL &&
                        strcmp(conf->listeners[i].text, ctl->bound_text[i]) == 0;
            bool has =
                i < conf->nlisteners && conf->listener_tls != NULL && conf->listener_tls[i] != NULL;
            if (!same && (had || has)) {
                dm_log_error("reload failed, keeping the running configuration: listener %s "
                             "(TLS) moved or changed; listener changes need a restart or SIGUSR2",
                             ctl->bound_text[i] != NULL ? ctl->bound_text[i] : "?");
                dm_conf_destroy(conf);
                return;
            }
        }
        dm_log_warn("reload: listener changes take effect at the next restart or SIGUSR2");
    }
    if (!same_text(conf->admin.text, ctl->rt->conf->admin.text)) {
        dm_log_warn("reload: admin listener changes take effect at the next restart or SIGUSR2");
    }
    if (!same_text(conf->metrics.text, ctl->rt->conf->metrics.text)) {
        dm_log_warn(
            "reload: power metrics listener changes take effect at the next restart or SIGUSR2");
    }
    const struct dm_conf *was = ctl->rt->conf;
    if (conf->workers != was->workers) {
        dm_log_warn("reload: workers take effect at the next restart or SIGUSR2 (%u running)",
                    ctl->nworkers);
    }
    if (conf->catalog.memory != was->catalog.memory) {
        dm_log_warn("reload: catalog.memory takes effect at the next restart");
    }
    if (!same_text(conf->access_log, was->access_log) ||
        !same_text(conf->error_log, was->error_log)) {
        dm_log_warn("reload: access_log and error_log take effect at the next restart");
    }
    if (conf->uid != was->uid || conf->gid != was->gid ||
        (conf->user == NULL) != (was->user == NULL)) {
        dm_log_warn("reload: user and group changes take effect at the next restart");
    }
    char perr[512];
    if (preload(ctl->catalog, conf, perr, sizeof(perr)) < 0) {
        dm_log_error("reload: %s (the catalog keeps what it had)", perr);
    }
    const char *why = NULL;
    struct dm_runtime *rt =
        dm_runtime_create(conf, ctl->nworkers, ctl->hosts, ctl->catalog, ctl->placers, &why);
    if (rt == NULL) {
        dm_log_error("reload failed (%s), keeping the running configuration", why);
        return;
    }
    dm_runtime_publish(rt);
    dm_conf_tls_apply(rt->conf);
    dm_log_set_level((enum dm_log_level)rt->conf->log_level);
    dm_workers_reload(ctl->workers, ctl->nworkers);
    dm_power_reload(ctl->power, rt);
    dm_admin_set_power(ctl->admin, ctl->power, rt->conf->admin_token, rt->conf->admin_token_reads);
    /* The new checker goes on where the old one was; the old one's checks
     * out now end with their verdict (proxy/health.h). */
    struct health_of *old = ctl->health_of;
    if (health_start(ctl, rt) < 0) {
        dm_log_error("reload: out of memory: no health checks until the next reload");
    }
    if (old != NULL) {
        old->next = ctl->retired;
        ctl->retired = old;
        dm_health_retire(old->h, health_stopped, old);
    }
    dm_runtime_unref(ctl->prev);
    ctl->prev = ctl->rt;
    ctl->rt = rt;
    dm_log_info("configuration reloaded from %s (generation %llu)", ctl->conf_path,
                (unsigned long long)rt->generation);
    dm_workers_control_fds(control_fds(rt->conf));
    if (rt->conf->limits.max_conns != ctl->prev->conf->limits.max_conns) {
        dm_workers_check_open_files(ctl->nworkers, rt->conf->limits.max_conns);
    }
}

/*
 * Closes what the control loop has open (admin, health checks, timers), once;
 * the signal handlers only with signals: until the workers have drained, a
 * signal must not get its default action (SIGHUP, SIGUSR1 and a second
 * SIGTERM killed dimmer in the middle of its drain).
 */
static void upgrade_end(struct control *ctl);

static void
control_close(struct control *ctl, bool signals)
{
    upgrade_end(ctl); /* a new process not ready yet runs on alone */
    dm_admin_stop(ctl->admin);
    ctl->admin = NULL;
    dm_power_stop(ctl->power);
    ctl->power = NULL;
    if (ctl->health_of != NULL) {
        dm_health_stop(ctl->health_of->h, health_stopped, ctl->health_of);
        ctl->health_of = NULL;
    }
    for (struct health_of *of = ctl->retired; of != NULL; of = of->next) {
        dm_health_cancel(of->h);
    }
    if (ctl->sessions_open) {
        uv_close((uv_handle_t *)&ctl->sessions, NULL);
        ctl->sessions_open = false;
    }
    if (ctl->reload_open) {
        uv_close((uv_handle_t *)&ctl->reload, NULL);
        ctl->reload_open = false;
    }
    for (unsigned i = 0; i < ctl->nsignals; i++) {
        if (signals) {
            uv_close((uv_handle_t *)&ctl->signals[i], NULL);
        } else {
            uv_unref((uv_handle_t *)&ctl->signals[i]); /* the loop may run out */
        }
    }
    if (signals && ctl->nsignals > 0) {
        /* Closing a handler gives its signal the default action back: a
         * SIGHUP (systemctl reload) or SIGUSR1 (logrotate) in the rest of the
         * exit, the workers drained, then killed dimmer, which exited on the
         * signal, not 0, and without its last log line. */
        signal(SIGHUP, SIG_IGN);
        signal(SIGUSR1, SIG_IGN);
        signal(SIGUSR2, SIG_IGN);
    }
    ctl->nsignals = signals ? 0 : ctl->nsignals;
    if (ctl->watchdog_open) {
        uv_close((uv_handle_t *)&ctl->watchdog, NULL);
        ctl->watchdog_open = false;
    }
}

/* A batch pass decided sessions: the workers look at their waiting requests again. */
static void
on_sessions_decided(void *arg)
{
    struct control *ctl = arg;
    if (ctl->workers != NULL) {
        dm_workers_sessions_decided(ctl->workers, ctl->nworkers);
    }
}

static void
stop(struct control *ctl)
{
    if (ctl->stopping) {
        return;
    }
    ctl->stopping = true;
    sd_notify(0, "STOPPING=1");
    dm_log_info("stopping: draining connections (at most %llu ms)",
                (unsigned long long)ctl->rt->conf->timeouts.shutdown_ms);
    /* Sessions waiting for a batch pass get it now: the control loop ends
     * here, and no pass would come (they waited for their timeout, then 503). */
    if (dm_placers_run(ctl->placers, UINT64_MAX)) {
        on_sessions_decided(ctl);
    }
    control_close(ctl, false);
}

static void
on_acked(uv_async_t *a)
{
    struct control *ctl = a->data;
    dm_admin_acked(ctl->admin);
}

/* The batch passes of the session placers whose window has ended. */
static void
on_sessions_tick(uv_timer_t *t)
{
    struct control *ctl = t->data;
    if (dm_placers_run(ctl->placers, dm_mono_us())) {
        on_sessions_decided(ctl);
    }
}

static void
on_held(uv_async_t *a)
{
    struct control *ctl = a->data;
    dm_power_kick(ctl->power);
}

/* An async handle of the control loop that never keeps it alive; *open once made. */
static int
control_async(struct control *ctl, uv_async_t *a, uv_async_cb cb, bool *open)
{
    int r = uv_async_init(ctl->loop, a, cb);
    if (r == 0) {
        a->data = ctl;
        *open = true;
        uv_unref((uv_handle_t *)a);
    }
    return r;
}

/*
 * systemd's watchdog (WatchdogSec=): fed every half period, but only while
 * every worker's tick has run since the last feed, so that a worker stuck
 * in a loop gets the service restarted rather than hidden.
 */
static void
on_watchdog(uv_timer_t *t)
{
    struct control *ctl = t->data;
    bool alive = true;
    for (unsigned i = 0; ctl->workers != NULL && i < ctl->nworkers; i++) {
        uint64_t b = dm_worker_beats(ctl->workers, i);
        if (b == ctl->beats_seen[i]) {
            dm_log_error("worker %u has not ticked for %llu ms: the watchdog is not fed", i,
                         (unsigned long long)uv_timer_get_repeat(t));
            alive = false;
        }
        ctl->beats_seen[i] = b;
    }
    if (alive) {
        sd_notify(0, "WATCHDOG=1");
    }
}

static int
watchdog_start(struct control *ctl)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) {
        return 0;
    }
    ctl->beats_seen = calloc(ctl->nworkers, sizeof(*ctl->beats_seen));
    int r = ctl->beats_seen != NULL ? uv_timer_init(ctl->loop, &ctl->watchdog) : UV_ENOMEM;
    if (r < 0) {
        return r;
    }
    ctl->watchdog.data = ctl;
    ctl->watchdog_open = true;
    uint64_t ms = usec / 2000 > 0 ? usec / 2000 : 1;
    uv_timer_start(&ctl->watchdog, on_watchdog, ms, ms);
    uv_unref((uv_handle_t *)&ctl->watchdog);
    dm_log_info("systemd watchdog: fed every %llu ms while every worker ticks",
                (unsigned long long)ms);
    return 0;
}

/*
 * user: and group: once everything is bound and open (the logs, the
 * listeners, the admin and metrics listeners): a process started as root
 * runs on as them, with no capability left. Not root: nothing to drop
 * (said in the log). 0, or -1 with the reason on stderr.
 */
static int
drop_privileges(const struct dm_conf *c, const char *conf_path)
{
    if (c->user == NULL) {
        return 0;
    }
    if (geteuid() != 0 && geteuid() == (uid_t)c->uid) {
        return 0; /* started so (a SIGUSR2 of a process that dropped them) */
    }
    if (geteuid() != 0) {
        dm_log_warn("user: %s ignored: not started as root (running as uid %u)", c->user,
                    (unsigned)geteuid());
        return 0;
    }
    gid_t gid = (gid_t)c->gid;
    if (setgroups(1, &gid) < 0 || setgid(gid) < 0 || setuid((uid_t)c->uid) < 0) {
        fprintf(stderr, "dimmer: cannot run as user %s (uid %u, gid %u): %s\n", c->user, c->uid,
                c->gid, strerror(errno));
        return -1;
    }
    if ((c->uid != 0 && setuid(0) == 0) || getuid() != (uid_t)c->uid || getgid() != gid) {
        fprintf(stderr, "dimmer: dropping privileges to %s did not hold\n", c->user);
        return -1;
    }
    dm_log_info("running as user %s (uid %u), group %s (gid %u)", c->user, c->uid,
                c->group != NULL ? c->group : "of the user", c->gid);
    /* A reload reads the files again, as this user now. */
    const char *files[] = { conf_path, c->catalog.manifest };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (files[i] != NULL && access(files[i], R_OK) != 0) {
            dm_log_warn("%s is not readable by user %s: a reload will fail (%s)", files[i], c->user,
                        strerror(errno));
        }
    }
    return 0;
}

/* SIGUSR1 (logrotate's postrotate): the error and access logs open their paths again. */
static void
reopen_logs(struct control *ctl)
{
    int r = dm_log_reopen();
    if (r < 0) {
        dm_log_error("SIGUSR1: cannot reopen the error log: %s (writing on to the old file)",
                     strerror(-r));
    }
    if (ctl->access_fd > 2 && ctl->access_path != NULL) {
        int a = dm_reopen_fd(ctl->access_fd, ctl->access_path);
        if (a < 0) {
            dm_log_error("SIGUSR1: cannot reopen the access log %s: %s (writing on to the old "
                         "file)",
                         ctl->access_path, strerror(-a));
        }
        r = r < 0 ? r : a;
    }
    if (r == 0) {
        dm_log_info("SIGUSR1: logs reopened");
    }
}

static void
on_reload(uv_timer_t *t)
{
    reload(t->data);
}

/* ---- SIGUSR2: a new process takes over the listening sockets ---- */

/*
 * The hosts' health as the process this one replaced knew it: one down
 * there starts down here (its checks mark it up after `rise` successes),
 * not up until `fall` failures, as a restart would.
 */
static void
inherit_hosts(struct dm_hosts *hosts)
{
    size_t known = 0, down = 0;
    for (size_t i = 0; dm_inherited != NULL && i < hosts->n; i++) {
        struct dm_host *h = hosts->h[i];
        char at[DM_ADDR_TEXT];
        const struct dm_inherited_host *ih = dm_inherit_host(
            dm_inherited, dm_addr_text((const struct sockaddr *)&h->addr, at, sizeof(at)));
        if (ih != NULL && ih->down >= 0) {
            atomic_store(&h->down, ih->down == 1);
            known++;
            down += ih->down == 1;
        }
    }
    if (known > 0) {
        dm_log_info("took the health of %zu hosts from the process this one replaces (%zu down)",
                    known, down);
    }
}

static void
upgrade_handle_closed(uv_handle_t *h)
{
    (void)h;
}

/* Closes what the upgrade has open; the new process, detached, runs on. */
static void
upgrade_end(struct control *ctl)
{
    if (ctl->upgrade_pipe_open) {
        uv_close((uv_handle_t *)&ctl->upgrade_pipe, upgrade_handle_closed);
        ctl->upgrade_pipe_open = false;
    }
    if (ctl->upgrade_timer_open) {
        uv_close((uv_handle_t *)&ctl->upgrade_timer, upgrade_handle_closed);
        ctl->upgrade_timer_open = false;
    }
    if (ctl->upgrade_open) {
        uv_close((uv_handle_t *)&ctl->upgrade, upgrade_handle_closed);
        ctl->upgrade_open = false;
    }
}

static void
upgrade_exited(uv_process_t *p, int64_t status, int signum)
{
    struct control *ctl = p->data;
    if (signum != 0) {
        dm_log_error("SIGUSR2: the new process (pid %d) was killed by %s before it was ready: "
                     "this one serves on",
                     p->pid, strsignal(signum));
    } else {
        dm_log_error("SIGUSR2: the new process (pid %d) exited with status %lld before it was "
                     "ready (its error is above or in its log): this one serves on",
                     p->pid, (long long)status);
    }
    upgrade_end(ctl);
}

static void
upgrade_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf)
{
    struct control *ctl = h->data;
    (void)size;
    *buf = uv_buf_init(&ctl->upgrade_byte, 1);
}

/* The new process said it is ready, or closed the pipe (it exits: see upgrade_exited). */
static void
upgrade_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct control *ctl = s->data;
    (void)buf;
    if (nread == 0) {
        return;
    }
    uv_close((uv_handle_t *)&ctl->upgrade_pipe, upgrade_handle_closed);
    ctl->upgrade_pipe_open = false;
    if (nread < 0 || ctl->upgrade_byte != 'R' || ctl->stopping) {
        return;
    }
    int pid = ctl->upgrade.pid;
    dm_log_info("SIGUSR2: the new process (pid %d) is ready: this one drains and stops", pid);
    /* systemd follows the new one (the old is the main process, whose word counts). */
    sd_notifyf(0, "MAINPID=%d", pid);
    upgrade_end(ctl);
    stop(ctl);
}

static void
upgrade_timeout(uv_timer_t *t)
{
    struct control *ctl = t->data;
    if (ctl->upgrade_open) {
        dm_log_error("SIGUSR2: the new process (pid %d) was not ready within %d s: it is asked "
                     "to stop (SIGTERM), and this one serves on",
                     ctl->upgrade.pid, DM_UPGRADE_READY_S);
        uv_process_kill(&ctl->upgrade, SIGTERM);
    }
}

/* The environment of the new process: ours, DIMMER_INHERIT set, WATCHDOG_PID
 * left out (systemd's watchdog would not be fed by a process of another pid). */
static char **
upgrade_env(char *inherit)
{
    size_t n = 0;
    while (environ[n] != NULL) {
        n++;
    }
    char **env = calloc(n + 2, sizeof(*env));
    size_t k = 0;
    for (size_t i = 0; env != NULL && i < n; i++) {
        if (strncmp(environ[i], DM_INHERIT_ENV "=", sizeof(DM_INHERIT_ENV)) != 0 &&
            strncmp(environ[i], "WATCHDOG_PID=", 13) != 0) {
            env[k++] = environ[i];
        }
    }
    if (env != NULL) {
        env[k] = inherit;
    }
    return env;
}

/* The session ticket keys in the pipe a SIGUSR2 handed over, made the
 * process's; the pipe closed. How many, 0 for none, -1 when not such keys. */
static int
take_tickets(struct dm_inherit *in)
{
    if (in->tickets_fd < 0) {
        return 0;
    }
    unsigned char buf[DM_TLS_TICKETS_MAX + 1];
    size_t len = 0;
    ssize_t r;
    /* Written whole before this process started: all there, and read
     * without blocking (a pipe someone else holds open never hangs the start). */
    (void)fcntl(in->tickets_fd, F_SETFL, fcntl(in->tickets_fd, F_GETFL) | O_NONBLOCK);
    while (len < sizeof(buf) && ((r = read(in->tickets_fd, buf + len, sizeof(buf) - len)) > 0 ||
                                 (r < 0 && errno == EINTR))) {
        len += r > 0 ? (size_t)r : 0;
    }
    close(in->tickets_fd);
    in->tickets_fd = -1;
    int n = dm_tls_tickets_load(buf, len);
    OPENSSL_cleanse(buf, sizeof(buf));
    return n;
}

/* A pipe holding this process's session ticket keys, its write end closed:
 * the read end, or -1 (none, or no pipe). */
static int
give_tickets(void)
{
    unsigned char buf[DM_TLS_TICKETS_MAX];
    size_t len = dm_tls_tickets_save(buf, sizeof(buf));
    int fds[2] = { -1, -1 };
    /* Within PIPE_BUF: written at once, whole, without a reader yet. */
    if (len > 0 && pipe2(fds, O_CLOEXEC) == 0) {
        if (write(fds[1], buf, len) != (ssize_t)len) {
            close(fds[0]);
            fds[0] = -1;
        }
        close(fds[1]);
    }
    OPENSSL_cleanse(buf, sizeof(buf));
    return fds[0];
}

/*
 * SIGUSR2, as nginx's binary upgrade: starts the program again (argv[0] as
 * started, so a new binary installed at that path runs) with the same
 * arguments and environment, handing it every listening socket (the
 * listeners', the admin's, the metrics'), which it takes for the listeners
 * its configuration still has. Once it says it is ready, this process drains
 * and stops as on SIGTERM; if it exits first, this one serves on.
 */
static void
upgrade_start(struct control *ctl)
{
    if (ctl->upgrade_open) {
        dm_log_warn("SIGUSR2: a new process (pid %d) is starting already", ctl->upgrade.pid);
        return;
    }
    size_t ns = dm_workers_sockets(ctl->workers, ctl->nworkers);
    int *fds = calloc(ns + 2, sizeof(*fds));
    size_t *lis = calloc(ns + 1, sizeof(*lis));
    uv_stdio_container_t *io = calloc(ns + 7, sizeof(*io));
    char *inherit = NULL;
    int tickets = -1;
    char **env = NULL;
    int r = UV_ENOMEM;
    if (fds == NULL || lis == NULL || io == NULL || dm_inherit_append(&inherit, "ready", 3, NULL)) {
        goto done;
    }
    for (size_t i = 0; i < ctl->nbound; i++) {
        if (ctl->bound_text[i] == NULL) {
            goto done; /* its copy failed at start */
        }
    }
    size_t n = dm_workers_listen_fds(ctl->workers, ctl->nworkers, fds, lis, ns);
    int admin = dm_admin_fd(ctl->admin), metrics = dm_power_metrics_fd(ctl->power);
    for (int k = 0; k < 3; k++) {
        io[k].flags = UV_INHERIT_FD;
        io[k].data.fd = k;
    }
    if ((r = uv_pipe_init(ctl->loop, &ctl->upgrade_pipe, 0)) < 0) {
        goto done;
    }
    ctl->upgrade_pipe.data = ctl;
    ctl->upgrade_pipe_open = true;
    io[3].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE; /* the child's side writes */
    io[3].data.stream = (uv_stream_t *)&ctl->upgrade_pipe;
    int nio = 4;
    r = UV_ENOMEM;
    for (size_t i = 0; i < n; i++, nio++) {
        io[nio].flags = UV_INHERIT_FD;
        io[nio].data.fd = fds[i];
        size_t before = 0;
        for (size_t j = 0; lis[i] < ctl->nbound && j < lis[i]; j++) {
            before += strcmp(ctl->bound_text[j], ctl->bound_text[lis[i]]) == 0;
        }
        char key[512];
        if (lis[i] >= ctl->nbound ||
            dm_inherit_append(
                &inherit, "listen", nio,
                dm_inherit_listen_key(key, sizeof(key), ctl->bound_text[lis[i]], before)) < 0) {
            goto done;
        }
    }
    if (admin >= 0 && ctl->admin_text != NULL) {
        io[nio].flags = UV_INHERIT_FD;
        io[nio].data.fd = admin;
        if (dm_inherit_append(&inherit, "admin", nio++, ctl->admin_text) < 0) {
            goto done;
        }
    }
    if (metrics >= 0 && ctl->metrics_text != NULL) {
        io[nio].flags = UV_INHERIT_FD;
        io[nio].data.fd = metrics;
        if (dm_inherit_append(&inherit, "metrics", nio++, ctl->metrics_text) < 0) {
            goto done;
        }
    }
    if ((tickets = give_tickets()) >= 0) {
        io[nio].flags = UV_INHERIT_FD;
        io[nio].data.fd = tickets;
        if (dm_inherit_append(&inherit, "tickets", nio++, NULL) < 0) {
            goto done;
        }
    }
    /* What this process knows of its hosts goes too, as long as the variable
     * stays well within what execve takes (128 KiB a string). */
    char *state = NULL;
    bool known = dm_inherit_append(&state, "from", (int)getpid(), NULL) == 0;
    for (size_t i = 0; known && i < ctl->hosts->n; i++) { /* "from" first, then the hosts */
        const struct dm_host *h = ctl->hosts->h[i];
        char at[DM_ADDR_TEXT];
        known = dm_inherit_append_host(
                    &state, dm_addr_text((const struct sockaddr *)&h->addr, at, sizeof(at)),
                    atomic_load(&h->down)) == 0;
    }
    known = known && dm_power_state_words(ctl->power, &state) == 0;
    bool fits = known && strlen(state) + strlen(inherit) < DM_UPGRADE_ENV_MAX;
    char *grown = fits ? realloc(inherit, strlen(inherit) + strlen(state) + 2) : NULL;
    if (grown != NULL) {
        inherit = grown;
        strcat(strcat(inherit, " "), state);
    } else {
        dm_log_warn("SIGUSR2: what this process knows of its %zu hosts is not handed over (%s): "
                    "the new one learns it afresh, as at a restart",
                    ctl->hosts->n, known && !fits ? "too long" : "out of memory");
    }
    free(state);
    size_t vlen = strlen(inherit);
    char *var = malloc(sizeof(DM_INHERIT_ENV) + 1 + vlen);
    if (var == NULL) {
        goto done;
    }
    memcpy(var, DM_INHERIT_ENV "=", sizeof(DM_INHERIT_ENV));
    memcpy(var + sizeof(DM_INHERIT_ENV), inherit, vlen + 1);
    free(inherit);
    inherit = var;
    if ((env = upgrade_env(inherit)) == NULL) {
        goto done;
    }
    uv_process_options_t o = {
        .exit_cb = upgrade_exited,
        .file = ctl->argv[0],
        .args = ctl->argv,
        .env = env,
        .flags = UV_PROCESS_DETACHED, /* its own session: it outlives this one */
        .stdio_count = nio,
        .stdio = io,
    };
    ctl->upgrade.data = ctl;
    r = uv_spawn(ctl->loop, &ctl->upgrade, &o);
    if (r < 0) {
        /* The handle is to close even so (libuv's uv_spawn). */
        uv_close((uv_handle_t *)&ctl->upgrade, upgrade_handle_closed);
        goto done;
    }
    ctl->upgrade_open = true;
    if ((r = uv_read_start((uv_stream_t *)&ctl->upgrade_pipe, upgrade_alloc, upgrade_read)) < 0 ||
        (r = uv_timer_init(ctl->loop, &ctl->upgrade_timer)) < 0) {
        dm_log_error("SIGUSR2: cannot wait for the new process (pid %d): %s; it is asked to stop",
                     ctl->upgrade.pid, uv_strerror(r));
        uv_process_kill(&ctl->upgrade, SIGTERM);
        r = 0;
        goto done;
    }
    ctl->upgrade_timer.data = ctl;
    ctl->upgrade_timer_open = true;
    uv_timer_start(&ctl->upgrade_timer, upgrade_timeout, DM_UPGRADE_READY_S * 1000ull, 0);
    dm_log_info("SIGUSR2: started %s again (pid %d), handing it %zu listening socket%s%s%s%s",
                ctl->argv[0], ctl->upgrade.pid, n, n == 1 ? "" : "s",
                admin >= 0 ? ", the admin's" : "", metrics >= 0 ? ", the metrics'" : "",
                tickets >= 0 ? ", the TLS session ticket keys" : "");

done:
    if (r < 0) {
        dm_log_error("SIGUSR2: cannot start %s again: %s; this one serves on", ctl->argv[0],
                     uv_strerror(r));
        upgrade_end(ctl);
    }
    if (tickets >= 0) {
        close(tickets); /* the new process's now */
    }
    free(env);
    free(inherit);
    free(io);
    free(lis);
    free(fds);
}

static void
on_signal(uv_signal_t *h, int signum)
{
    struct control *ctl = h->data;
    if (signum == SIGUSR1) {
        reopen_logs(ctl);
    } else if (ctl->stopping) {
        dm_log_info("%s while stopping: the drain goes on", strsignal(signum));
    } else if (signum == SIGHUP) {
        uv_timer_start(&ctl->reload, on_reload, 0, 0); /* those that came with it, once */
    } else if (signum == SIGUSR2) {
        upgrade_start(ctl);
    } else {
        stop(ctl);
    }
}

/*
 * Writes the ports file: "listen TEXT BOUND" per listener, then "admin TEXT
 * BOUND". Written to a temp file in the same directory and renamed over path,
 * so a reader sees the whole file or none. Returns 0 or -errno.
 */
static int
write_ports_file(const char *path, const struct dm_conf *c, const struct sockaddr_storage *bound,
                 const struct sockaddr_storage *admin_bound,
                 const struct sockaddr_storage *metrics_bound)
{
    char at[DM_ADDR_TEXT];
    size_t cap = (c->nlisteners + 1) * (2 * DM_ADDR_TEXT + 16);
    for (size_t i = 0; i < c->nlisteners; i++) {
        cap += strlen(c->listeners[i].text);
    }
    cap += c->admin.text != NULL ? strlen(c->admin.text) : 0;
    cap += c->metrics.text != NULL ? strlen(c->metrics.text) + 2 * DM_ADDR_TEXT + 16 : 0;
    char *text = malloc(cap);
    if (text == NULL) {
        return -ENOMEM;
    }
    size_t len = 0;
    for (size_t i = 0; i < c->nlisteners; i++) {
        len += (size_t)snprintf(text + len, cap - len, "listen %s %s\n", c->listeners[i].text,
                                dm_addr_text((const struct sockaddr *)&bound[i], at, sizeof(at)));
    }
    if (c->admin.text != NULL) {
        len += (size_t)snprintf(text + len, cap - len, "admin %s %s\n", c->admin.text,
                                dm_addr_text((const struct sockaddr *)admin_bound, at, sizeof(at)));
    }
    if (c->metrics.text != NULL) {
        len +=
            (size_t)snprintf(text + len, cap - len, "metrics %s %s\n", c->metrics.text,
                             dm_addr_text((const struct sockaddr *)metrics_bound, at, sizeof(at)));
    }

    size_t tmp_len = strlen(path) + 32;
    char *tmp = malloc(tmp_len);
    if (tmp == NULL) {
        free(text);
        return -ENOMEM;
    }
    snprintf(tmp, tmp_len, "%s.%ld.tmp", path, (long)getpid());
    /* O_EXCL: never write through a file or link left there; one left by a
     * dead process with our pid is ours to replace. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST && unlink(tmp) == 0) {
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    int rc = fd < 0 ? -errno : 0;
    for (size_t off = 0; rc == 0 && off < len;) {
        ssize_t n = write(fd, text + off, len - off);
        if (n > 0) {
            off += (size_t)n;
        } else if (n == 0 || errno != EINTR) {
            rc = n == 0 ? -EIO : -errno;
        }
    }
    if (fd >= 0 && close(fd) < 0 && rc == 0) {
        rc = -errno;
    }
    if (rc == 0 && rename(tmp, path) < 0) {
        rc = -errno;
    }
    if (rc < 0 && fd >= 0) {
        unlink(tmp);
    }
    free(tmp);
    free(text);
    return rc;
}

/*
 * 0 when a log at path could be opened for appending as the start opens it,
 * or -errno; nothing is created ("-" and NULL, standard error, are fine).
 */
static int
log_path_check(const char *path)
{
    struct stat st;
    if (path == NULL || strcmp(path, "-") == 0) {
        return 0;
    }
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            return -EISDIR;
        }
        return access(path, W_OK) == 0 ? 0 : -errno;
    }
    if (errno != ENOENT) {
        return -errno;
    }
    char *copy = strdup(path);
    if (copy == NULL) {
        return -ENOMEM;
    }
    int r = access(dirname(copy), W_OK | X_OK) == 0 ? 0 : -errno;
    free(copy);
    return r;
}

static int
open_access_log(const struct dm_conf *c)
{
    if (c->access_log == NULL) {
        return -1;
    }
    if (strcmp(c->access_log, "-") == 0) {
        return 1;
    }
    int fd = open(c->access_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "dimmer: cannot open access log %s: %s\n", c->access_log, strerror(errno));
    }
    return fd < 0 ? -2 : fd;
}

int
main(int argc, char **argv)
{
    const char *conf_path = NULL;
    const char *listen = NULL;
    const char *backends = NULL;
    const char *ports_file = NULL;
    const char *workers_text = NULL;
    long workers_arg = -1;
    bool test_only = false;
    /* SIGHUP and SIGUSR1 wait until their handlers are in (below): one sent
     * while the config loads (logrotate, systemctl reload) must not kill. */
    sigset_t early;
    sigemptyset(&early);
    sigaddset(&early, SIGHUP);
    sigaddset(&early, SIGUSR1);
    sigaddset(&early, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &early, NULL);
    dm_hash_key_init(); /* before any table a client fills */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_next = i + 1 < argc;
        const char **slot = NULL;
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
            slot = &conf_path;
        } else if (strcmp(a, "--listen") == 0) {
            slot = &listen;
        } else if (strcmp(a, "--backend") == 0) {
            slot = &backends;
        } else if (strcmp(a, "--ports-file") == 0) {
            slot = &ports_file;
        } else if (strcmp(a, "--workers") == 0) {
            slot = &workers_text;
        }
        if (slot != NULL && has_next) {
            /* A second one would silently replace the first: HAProxy loads
             * every -f, and --backend a --backend b reads as two servers. */
            if (*slot != NULL) {
                fprintf(stderr, "dimmer: %s given twice%s\n", a,
                        slot == &backends ? " (give one, the addresses separated by commas)" : "");
                return 2;
            }
            *slot = argv[++i];
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--test") == 0) {
            test_only = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
            printf("dimmer %s\n", DM_VERSION);
            return 0;
        } else {
            fprintf(stderr, "dimmer: unknown or incomplete option \"%s\"\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (workers_text != NULL) {
        /* Digits only, as the config's workers (strtol took " 4" and "+4"). */
        size_t nd = strspn(workers_text, "0123456789");
        workers_arg = nd > 0 && nd <= 4 && workers_text[nd] == '\0' ? atol(workers_text) : 0;
        if (workers_arg < 1 || workers_arg > 1024) {
            /* The config's own bound (workers: 1..1024). */
            fprintf(stderr, "dimmer: --workers: expected 1..1024, got \"%s\"\n", workers_text);
            return 2;
        }
    }
    if (conf_path != NULL && *conf_path == '\0') {
        fprintf(stderr, "dimmer: -c: empty file name\n");
        return 2;
    }
    struct dm_conf_errors err = { 0 };
    struct dm_conf *conf = NULL;
    if (conf_path != NULL && (listen != NULL || backends != NULL)) {
        /* One or the other: a config file would silently win. */
        fprintf(stderr, "dimmer: -c and --listen/--backend: give a config file or the two "
                        "flags, not both\n");
        return 2;
    }
    if (conf_path != NULL) {
        conf = dm_conf_load(conf_path, &err);
    } else if (listen != NULL && backends != NULL) {
        conf = dm_conf_from_args(listen, backends, &err);
    } else {
        usage(stderr);
        return 2;
    }
    if (conf == NULL) {
        print_errors(&err);
        dm_conf_errors_fini(&err);
        return 1;
    }
    dm_conf_errors_fini(&err);

    int rc = 1;
    int r = 0;
    int access_fd = -1;
    uint64_t shutdown_ms = 0; /* 0 while starting: a failure stops the workers at once */
    struct sockaddr_storage *bound = NULL;
    struct sockaddr_storage admin_bound = { 0 };
    struct sockaddr_storage metrics_bound = { 0 };
    struct control ctl = { .conf_path = conf_path, .argv = argv };
    struct dm_inherit inherit = { .ready_fd = -1, .tickets_fd = -1 };
    if (test_only) {
        /* What the start would open: a log the start cannot open is a failed check. */
        const char *logs[2] = { conf->error_log, conf->access_log };
        const char *what[2] = { "error_log", "access_log" };
        const struct dm_conf_at *at[2] = { &conf->error_log_at, &conf->access_log_at };
        for (int k = 0; k < 2; k++) {
            int e = log_path_check(logs[k]);
            if (e < 0) {
                fprintf(stderr, "%s:%zu:%zu: %s %s: %s\n", conf_path, at[k]->line + 1,
                        at[k]->column + 1, what[k], logs[k], strerror(-e));
                goto destroy_conf;
            }
        }
        for (size_t i = 0; i < conf->nwarnings; i++) {
            fprintf(stderr, "%s\n", conf->warnings[i]);
        }
        printf("configuration ok\n");
        rc = 0;
        goto destroy_conf;
    }
    signal(SIGPIPE, SIG_IGN);
    /* Started by a dimmer's SIGUSR2: its listening sockets are ours to take. */
    const char *handed = getenv(DM_INHERIT_ENV);
    if (handed != NULL) {
        char why[256];
        if (dm_inherit_parse(handed, &inherit, why, sizeof(why)) < 0 ||
            dm_inherit_check(&inherit, why, sizeof(why)) < 0) {
            fprintf(stderr, "dimmer: %s: %s\n", DM_INHERIT_ENV, why);
            goto destroy_conf;
        }
        unsetenv(DM_INHERIT_ENV); /* not handed down again to a process of ours */
        dm_inherited = &inherit;
    }
    int tickets_taken = take_tickets(&inherit);
    if (dm_log_open(conf->error_log) < 0) {
        fprintf(stderr, "dimmer: cannot open error log %s: %s\n", conf->error_log, strerror(errno));
        goto destroy_conf;
    }
    dm_log_set_level((enum dm_log_level)conf->log_level);
    for (size_t i = 0; i < conf->nwarnings; i++) {
        dm_log_warn("%s", conf->warnings[i]);
    }
    if (tickets_taken > 0) {
        dm_log_info("took %d TLS session ticket key%s from the process this one replaces: its "
                    "clients' tickets resume here",
                    tickets_taken, tickets_taken == 1 ? "" : "s");
    } else if (tickets_taken < 0) {
        dm_log_warn("the TLS session ticket keys handed over are not such keys: new ones are "
                    "made, and the clients' tickets no longer resume");
    }
    access_fd = open_access_log(conf);
    if (access_fd == -2) {
        goto destroy_conf;
    }
    ctl.access_fd = access_fd;
    ctl.access_path = access_fd > 2 ? strdup(conf->access_log) : NULL;
    int log_format = (int)dm_accesslog_format_of(conf->access_log_format);
    unsigned nworkers = workers_arg > 0 ? (unsigned)workers_arg : conf->workers;
    if (nworkers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nworkers = n > 0 ? (unsigned)n : 1;
    }
    ctl.nworkers = nworkers;
    /* One catalog for the life of the process: a reload keeps what it learnt. */
    ctl.catalog = dm_catalog_create(conf->catalog.memory);
    char perr[512];
    if (ctl.catalog == NULL) {
        fprintf(stderr, "dimmer: out of memory\n");
        goto close_access_log;
    }
    if (preload(ctl.catalog, conf, perr, sizeof(perr)) < 0) {
        fprintf(stderr, "dimmer: catalog: %s\n", perr);
        goto destroy_catalog;
    }
    dm_admin_set_catalog(ctl.catalog);
    /* One host table too: health and power state outlive every reload. */
    ctl.hosts = dm_hosts_create();
    if (ctl.hosts == NULL) {
        fprintf(stderr, "dimmer: out of memory\n");
        goto destroy_catalog;
    }
    const char *why = NULL;
    /* And one set of session placers: a reload keeps the sessions running. */
    ctl.placers = dm_placers_create();
    if (ctl.placers == NULL) {
        fprintf(stderr, "dimmer: out of memory\n");
        goto destroy_catalog;
    }
    ctl.rt = dm_runtime_create(conf, nworkers, ctl.hosts, ctl.catalog, ctl.placers, &why);
    conf = NULL; /* taken, whether or not the runtime was made */
    if (ctl.rt == NULL) {
        fprintf(stderr, "dimmer: %s\n", why);
        goto destroy_catalog;
    }
    dm_runtime_publish(ctl.rt);
    dm_conf_tls_apply(ctl.rt->conf);
    inherit_hosts(ctl.hosts);
    const struct dm_conf *bc = ctl.rt->conf;
    ctl.nbound = bc->nlisteners;
    ctl.bound_text = calloc(ctl.nbound + 1, sizeof(*ctl.bound_text));
    ctl.bound_tls = calloc(ctl.nbound + 1, sizeof(*ctl.bound_tls));
    for (size_t i = 0; ctl.bound_text != NULL && ctl.bound_tls != NULL && i < ctl.nbound; i++) {
        ctl.bound_text[i] = strdup(bc->listeners[i].text);
        ctl.bound_tls[i] = bc->listener_tls != NULL && bc->listener_tls[i] != NULL;
    }
    if (ctl.bound_text == NULL || ctl.bound_tls == NULL) {
        ctl.nbound = 0;
    }
    ctl.loop = uv_default_loop();
    if (ctl.loop == NULL) {
        fprintf(stderr, "dimmer: cannot make the control loop\n");
        goto unpublish_runtime;
    }
    if ((r = uv_timer_init(ctl.loop, &ctl.reload)) < 0) {
        fprintf(stderr, "dimmer: cannot make the control loop: %s\n", uv_strerror(r));
        goto unpublish_runtime;
    }
    ctl.reload.data = &ctl;
    ctl.reload_open = true;
    /* Handlers first: a SIGHUP that arrives once the listeners answer must
     * reload, not kill the process with the default action. */
    for (unsigned i = 0; i < 6 && r == 0; i++) {
        r = uv_signal_init(ctl.loop, &ctl.signals[i]);
        if (r == 0) {
            ctl.nsignals++;
            ctl.signals[i].data = &ctl;
            r = uv_signal_start(&ctl.signals[i], on_signal, handled_signals[i]);
        }
    }
    if (r < 0) {
        fprintf(stderr, "dimmer: cannot handle signals: %s\n", uv_strerror(r));
        goto close_control;
    }
    pthread_sigmask(SIG_UNBLOCK, &early, NULL); /* one that came meanwhile is handled now */
    /* The workers' acknowledgements of commands, and their held requests;
     * neither keeps the loop alive, and both close once the workers are joined. */
    if ((r = control_async(&ctl, &ctl.acked, on_acked, &ctl.acked_open)) < 0 ||
        (r = control_async(&ctl, &ctl.held, on_held, &ctl.held_open)) < 0) {
        fprintf(stderr, "dimmer: cannot make the control loop: %s\n", uv_strerror(r));
        goto close_control;
    }
    dm_workers_set_notify(&ctl.acked);
    atomic_store(&dm_hold_notify, &ctl.held);
    const struct dm_conf *cf = ctl.rt->conf;
    bound = calloc(cf->nlisteners, sizeof(*bound));
    if (bound == NULL) {
        fprintf(stderr, "dimmer: out of memory\n");
        goto close_control;
    }
    if (cf->admin.text != NULL) {
        ctl.admin = dm_admin_start(ctl.loop, &cf->admin, &admin_bound, &r);
        if (ctl.admin == NULL) {
            fprintf(stderr, "dimmer: cannot listen on admin address %s: %s\n",
                    ctl.rt->conf->admin.text, r < -1000 ? uv_strerror(r) : strerror(-r));
            goto close_control;
        }
    }
    ctl.workers = dm_workers_start(nworkers, ctl.rt, access_fd, log_format, bound, &r);
    if (ctl.workers == NULL) {
        fprintf(stderr, "dimmer: cannot start: %s\n", r < -1000 ? uv_strerror(r) : strerror(-r));
        goto close_control;
    }
    dm_admin_set_workers(ctl.admin, ctl.hosts, ctl.workers, ctl.nworkers);
    ctl.power = dm_power_start(ctl.loop, ctl.rt, ctl.workers, ctl.nworkers, &metrics_bound, &r);
    if (ctl.power == NULL) {
        fprintf(stderr, "dimmer: cannot start the power manager%s%s: %s\n",
                cf->metrics.text != NULL ? " on metrics address " : "",
                cf->metrics.text != NULL ? cf->metrics.text : "",
                r < -1000 ? uv_strerror(r) : strerror(-r));
        goto stop_workers;
    }
    dm_admin_set_power(ctl.admin, ctl.power, cf->admin_token, cf->admin_token_reads);
    /* Handed-over sockets of listeners the configuration no longer has close
     * here (the process that handed them closes its own as it stops). */
    dm_inherit_close_rest(dm_inherited);
    dm_inherited = NULL;
    ctl.admin_text = cf->admin.text != NULL ? strdup(cf->admin.text) : NULL;
    ctl.metrics_text = cf->metrics.text != NULL ? strdup(cf->metrics.text) : NULL;
    dm_workers_fit_open_files(nworkers, cf->limits.max_conns, control_fds(cf));
    for (size_t i = 0; i < cf->nlisteners; i++) {
        char at[DM_ADDR_TEXT];
        dm_log_info("listening on %s (%u workers)",
                    dm_addr_text((const struct sockaddr *)&bound[i], at, sizeof(at)), nworkers);
    }
    if (health_start(&ctl, ctl.rt) < 0) {
        fprintf(stderr, "dimmer: out of memory\n");
        goto stop_workers;
    }
    /* Batch windows end on this tick (its period bounds how late); it never
     * keeps the loop alive. */
    if ((r = uv_timer_init(ctl.loop, &ctl.sessions)) < 0) {
        fprintf(stderr, "dimmer: cannot make the control loop: %s\n", uv_strerror(r));
        goto stop_workers;
    }
    ctl.sessions.data = &ctl;
    ctl.sessions_open = true;
    uv_timer_start(&ctl.sessions, on_sessions_tick, DM_SESSIONS_TICK_MS, DM_SESSIONS_TICK_MS);
    uv_unref((uv_handle_t *)&ctl.sessions);
    dm_placers_set_loop(ctl.placers, ctl.loop, on_sessions_decided, &ctl);
    /* Last, so that whoever waits for the file finds everything listening. */
    if (ports_file != NULL &&
        (r = write_ports_file(ports_file, cf, bound, &admin_bound, &metrics_bound)) < 0) {
        fprintf(stderr, "dimmer: cannot write --ports-file %s: %s\n", ports_file, strerror(-r));
        goto stop_workers;
    }
    free(bound);
    bound = NULL;
    if (drop_privileges(cf, conf_path) < 0) {
        goto stop_workers;
    }
    if ((r = watchdog_start(&ctl)) < 0) {
        fprintf(stderr, "dimmer: cannot start the watchdog timer: %s\n", uv_strerror(r));
        goto stop_workers;
    }
    sd_notifyf(0, "READY=1\nSTATUS=serving on %zu listener%s with %u workers\nMAINPID=%lu",
               cf->nlisteners, cf->nlisteners == 1 ? "" : "s", nworkers, (unsigned long)getpid());
    if (inherit.ready_fd >= 0) {
        /* The process that started us drains and stops once it reads this
         * (gone already, it reads nothing: SIGPIPE is ignored). */
        if (write(inherit.ready_fd, "R", 1) != 1) {
            dm_log_warn("the process that started this one did not hear it is ready: %s",
                        strerror(errno));
        }
        close(inherit.ready_fd);
        inherit.ready_fd = -1;
    }
    uv_run(ctl.loop, UV_RUN_DEFAULT);
    /* The control loop ran out: signals, admin and health checks are closed. */
    shutdown_ms = ctl.rt->conf->timeouts.shutdown_ms;
    rc = 0;

stop_workers:
    control_close(&ctl, false); /* the admin first: its commands address the workers */
    dm_workers_stop(ctl.workers, ctl.nworkers, shutdown_ms);
close_control:
    control_close(&ctl, true); /* nothing left when the loop ran out */
    if (ctl.acked_open) {
        dm_workers_set_notify(NULL);
        uv_close((uv_handle_t *)&ctl.acked, NULL);
    }
    if (ctl.held_open) {
        atomic_store(&dm_hold_notify, NULL);
        uv_close((uv_handle_t *)&ctl.held, NULL);
    }
    dm_power_wait_orphans(); /* a wake or sleep under way ends before dimmer does */
    uv_run(ctl.loop, UV_RUN_DEFAULT);
    uv_loop_close(ctl.loop);
    free(bound);
unpublish_runtime:
    dm_runtime_publish(NULL);
    dm_runtime_unref(ctl.prev);
    dm_runtime_unref(ctl.rt);
destroy_catalog:
    dm_placers_destroy(ctl.placers); /* after the last runtime and session pointing to one */
    dm_hosts_destroy(ctl.hosts);     /* after the last runtime pointing to its hosts */
    dm_catalog_destroy(ctl.catalog);
close_access_log:
    if (access_fd > 2) {
        close(access_fd);
    }
    free(ctl.access_path);
    free(ctl.beats_seen);
    for (size_t i = 0; i < ctl.nbound; i++) {
        free(ctl.bound_text[i]);
    }
    free(ctl.bound_text);
    free(ctl.bound_tls);
    free(ctl.admin_text);
    free(ctl.metrics_text);
    dm_inherit_close_rest(&inherit);
    dm_inherit_free(&inherit);
    if (inherit.ready_fd >= 0) {
        close(inherit.ready_fd);
    }
destroy_conf:
    dm_conf_destroy(conf);
    if (rc == 0 && !test_only) {
        dm_log_info("stopped");
    }
    return rc;
}
