/*
 * dimmer-agent: runs on a backend and, every --interval, sends the proxy's
 * metrics listener one signed report (power/report.h): the estimated power
 * from /proc/stat's CPU time shares (power/procfs.h), the measured power of
 * an energy counter where the machine has one (RAPL:
 * /sys/class/powercap/intel-rapl:N/energy_uj), and the ESTABLISHED
 * connections of the served ports from /proc/net/tcp and tcp6.
 *
 *   dimmer-agent --name web1 --to 127.0.0.1:9902 --key-file /etc/dimmer/agent.key
 *                --ports 9001 [--interval 1000] [--idle-w 35] [--sys-w 70]
 *                [--io-w 50] [--wait-w 45] [--count N]
 *                [--control HOST:PORT [--control-token-file FILE]
 *                 [--sleep-command CMD] [--wake-command CMD] [--command-timeout MS]]
 *
 * With --control it also serves dimmer's http actuator (power/agent_control.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

#include "power/agent_control.h"
#include "power/procfs.h"
#include "power/report.h"

#define MAX_PORTS 32
#define FILE_MAX  (4 << 20)

struct agent {
    uv_loop_t *loop;
    uv_udp_t udp;
    uv_timer_t timer;
    uv_signal_t sigterm, sigint;
    struct sockaddr_storage to;
    struct dm_power_model model;
    uint8_t key[DM_REPORT_KEY_MAX];
    size_t key_len;
    struct dm_report r;
    uint16_t ports[MAX_PORTS];
    size_t nports;
    uint64_t interval_ms;
    uint64_t count; /* reports to send, 0: until stopped */
    uint64_t sent;  /* reports made so far */
    struct dm_cpu_times last;
    bool have_last;
    uint64_t rapl_uj, rapl_us; /* the last energy reading and its time */
    bool have_rapl;
    glob_t rapl; /* the energy counters' files */
    char *buf;
    struct dm_control *control; /* NULL: no --control */
};

static void __attribute__((noreturn)) usage_error(const char *what, const char *value)
{
    fprintf(stderr, "dimmer-agent: %s%s%s (dimmer-agent --help)\n", what, value ? ": " : "",
            value ? value : "");
    exit(2);
}

static void
usage(void)
{
    printf(
        "usage: dimmer-agent --name NAME --to HOST:PORT --key-file FILE --ports P[,P...]\n"
        "                    [--interval MS] [--idle-w W] [--sys-w W] [--io-w W] [--wait-w W]\n"
        "                    [--count N] [--control HOST:PORT [--control-token-file FILE]\n"
        "                    [--sleep-command CMD] [--wake-command CMD] [--command-timeout MS]]\n"
        "Sends a signed report of this server's estimated power and connections\n"
        "to dimmer's metrics listener every --interval ms (default 1000).\n"
        "  --name NAME      the server's name in dimmer's configuration\n"
        "  --to HOST:PORT   dimmer's metrics listener (UDP)\n"
        "  --key-file FILE  the shared key (the file's bytes, final newlines dropped)\n"
        "  --ports LIST     the served TCP ports whose connections are counted\n"
        "  --interval MS    one report every MS ms, 10 to 3600000 (default 1000)\n"
        "  --idle-w W       power with the CPU idle (default 35)\n"
        "  --sys-w W        at full SYS use (user, nice, system, steal; default 70)\n"
        "  --io-w W         at full I/O use (irq, softirq; default 50)\n"
        "  --wait-w W       at full WAIT (iowait; default 45)\n"
        "  --count N        send N reports, then exit (default: until SIGTERM)\n"
        "  --control HOST:PORT\n"
        "                   serve dimmer's http actuator here (TCP): POST /sleep runs\n"
        "                   --sleep-command and answers 202 at once; POST /wake runs\n"
        "                   --wake-command and answers 200 (exit status 0) or 502;\n"
        "                   GET /status; one command at a time\n"
        "  --control-token-file FILE\n"
        "                   the bearer token the POSTs must carry (dimmer's\n"
        "                   control_token_file); needed unless HOST is loopback\n"
        "  --sleep-command CMD, --wake-command CMD\n"
        "                   run with /bin/sh -c (e.g. \"systemctl suspend\"); without\n"
        "                   one, its POST is 501\n"
        "  --command-timeout MS\n"
        "                   a command running longer is killed (default 8000: below\n"
        "                   dimmer's command_timeout, 10 s, which waits for a wake)\n");
}

/* Reads a whole (small) file into a->buf; returns its length or -1. */
static ssize_t
slurp(struct agent *a, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, a->buf + len, FILE_MAX - 1 - len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        len += (size_t)n;
        if (len >= FILE_MAX - 1) {
            break;
        }
    }
    close(fd);
    a->buf[len] = 0;
    return (ssize_t)len;
}

/*
 * The established connections of the served ports in one of /proc/net/tcp
 * and tcp6, read in chunks: the table of a busy server runs to megabytes
 * (150 bytes a socket, TIME_WAIT ones included), more than any fixed buffer.
 */
static uint64_t
count_tcp(struct agent *a, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    struct dm_proctcp_stream st;
    dm_proctcp_init(&st, a->ports, a->nports);
    for (;;) {
        ssize_t n = read(fd, a->buf, FILE_MAX);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        dm_proctcp_feed(&st, a->buf, (size_t)n);
    }
    close(fd);
    return dm_proctcp_finish(&st);
}

static uint64_t
wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

/* The RAPL package counters (found once, at start) summed, in microjoules;
 * false when there are none. */
static bool
rapl_read(struct agent *a, uint64_t *uj)
{
    uint64_t sum = 0;
    bool any = false;
    for (size_t i = 0; i < a->rapl.gl_pathc; i++) {
        if (slurp(a, a->rapl.gl_pathv[i]) > 0) {
            sum += strtoull(a->buf, NULL, 10);
            any = true;
        }
    }
    *uj = sum;
    return any;
}

static void
sent(uv_udp_send_t *req, int status)
{
    if (status < 0) {
        fprintf(stderr, "dimmer-agent: send: %s\n", uv_strerror(status));
    }
    free(req);
}

static void stop(struct agent *a);

static void
tick(uv_timer_t *t)
{
    struct agent *a = t->data;
    struct dm_cpu_times now;
    ssize_t n = slurp(a, "/proc/stat");
    if (n < 0 || dm_procstat_parse(a->buf, (size_t)n, &now) < 0) {
        fprintf(stderr, "dimmer-agent: cannot read /proc/stat\n");
        return;
    }
    a->r.est_w = a->have_last ? dm_power_estimate(&a->model, &a->last, &now) : a->model.idle_w;
    a->last = now;
    a->have_last = true;
    uint64_t tcp = 0;
    const char *files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
    for (size_t i = 0; i < 2; i++) {
        tcp += count_tcp(a, files[i]);
    }
    a->r.tcp = tcp;
    uint64_t uj, us = uv_hrtime() / 1000;
    a->r.has_measured = false;
    if (rapl_read(a, &uj)) {
        if (a->have_rapl && uj >= a->rapl_uj && us > a->rapl_us) {
            a->r.measured_w = (double)(uj - a->rapl_uj) / (double)(us - a->rapl_us);
            a->r.has_measured = a->r.measured_w <= DM_REPORT_WATTS_MAX;
        }
        a->rapl_uj = uj;
        a->rapl_us = us;
        a->have_rapl = true;
    }
    a->r.seq++;
    a->r.ts_ms = wall_ms();
    uv_udp_send_t *req = malloc(sizeof(*req) + DM_REPORT_MAX);
    if (req == NULL) {
        return;
    }
    char *dgram = (char *)(req + 1);
    size_t len = dm_report_encode(&a->r, a->key, a->key_len, dgram, DM_REPORT_MAX);
    uv_buf_t b = uv_buf_init(dgram, (unsigned)len);
    if (len == 0 || uv_udp_send(req, &a->udp, &b, 1, (const struct sockaddr *)&a->to, sent) < 0) {
        free(req);
    }
    if (a->count > 0 && ++a->sent >= a->count) {
        stop(a);
    }
}

static void
stop(struct agent *a)
{
    uv_close((uv_handle_t *)&a->timer, NULL);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->udp, NULL); /* sends still queued finish with ECANCELED */
    dm_control_stop(a->control);
    a->control = NULL;
}

static void
on_signal(uv_signal_t *s, int sig)
{
    (void)sig;
    stop(s->data);
}

static double
number(const char *opt, const char *v, double lo, double hi)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end != 0 || !(d >= lo && d <= hi)) {
        usage_error(opt, v);
    }
    return d;
}

/* HOST:PORT (an IPv6 address in brackets), numeric port, into *out. */
static void
parse_addr(const char *opt, const char *v, int socktype, bool port0_ok,
           struct sockaddr_storage *out)
{
    char host[256];
    const char *colon = strrchr(v, ':');
    if (colon == NULL || (size_t)(colon - v) >= sizeof(host) || colon == v) {
        usage_error(opt, v);
    }
    /* The port by hand: getaddrinfo() would take 99999 as 34463 (its low 16 bits). */
    const char *port = colon + 1;
    size_t digits = strspn(port, "0123456789");
    if (digits == 0 || digits > 5 || port[digits] != 0 || atoi(port) > 65535 ||
        (atoi(port) == 0 && !port0_ok)) {
        usage_error(opt, v);
    }
    memcpy(host, v, (size_t)(colon - v));
    host[colon - v] = 0;
    char *h = host;
    size_t hl = strlen(h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h[hl - 1] = 0;
        h++;
    }
    struct addrinfo hints = { .ai_socktype = socktype, .ai_flags = AI_NUMERICSERV };
    struct addrinfo *ai;
    if (getaddrinfo(h, colon + 1, &hints, &ai) != 0) {
        usage_error(opt, v);
    }
    memcpy(out, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
}

static bool
is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
    }
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
    return ss->ss_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
}

/* The control token: printable, no spaces (it goes in a header). */
static void
read_token(const char *file, struct dm_control_conf *cc)
{
    uint8_t tok[DM_REPORT_KEY_MAX];
    size_t len = 0;
    int err = dm_report_key_read(file, tok, &len);
    bool printable = err == 0 && len < sizeof(cc->token);
    for (size_t i = 0; printable && i < len; i++) {
        printable = tok[i] > 0x20 && tok[i] < 0x7f;
    }
    if (err < 0 || !printable) {
        fprintf(stderr, "dimmer-agent: --control-token-file: %s: %s\n", file,
                err == -EINVAL ? "empty token"
                : err < 0      ? dm_report_key_error(err)
                               : "printable ASCII, no spaces, wanted");
        exit(2);
    }
    memcpy(cc->token, tok, len);
    cc->token_len = len;
}

static void
print_addr(const char *what, const struct sockaddr_storage *ss)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        port = ntohs(s6->sin6_port);
        printf("dimmer-agent %s on [%s]:%d\n", what, host, port);
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
        port = ntohs(s4->sin_port);
        printf("dimmer-agent %s on %s:%d\n", what, host, port);
    }
    fflush(stdout);
}

int
main(int argc, char **argv)
{
    static struct agent a;
    a.interval_ms = 1000;
    a.model = (struct dm_power_model){ .idle_w = 35, .sys_w = 70, .io_w = 50, .wait_w = 45 };
    const char *name = NULL, *to = NULL, *key_file = NULL, *ports = NULL;
    const char *control = NULL, *token_file = NULL;
    struct dm_control_conf cc = { .command_timeout_ms = 8000 };
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--help") == 0) {
            usage();
            return 0;
        }
        if (v == NULL) {
            usage_error(o[0] == '-' ? "option needs a value" : "unexpected argument", o);
        }
        i++;
        if (strcmp(o, "--name") == 0) {
            name = v;
        } else if (strcmp(o, "--to") == 0) {
            to = v;
        } else if (strcmp(o, "--key-file") == 0) {
            key_file = v;
        } else if (strcmp(o, "--ports") == 0) {
            ports = v;
        } else if (strcmp(o, "--interval") == 0) {
            a.interval_ms = (uint64_t)number(o, v, 10, 3600000);
        } else if (strcmp(o, "--idle-w") == 0) {
            a.model.idle_w = number(o, v, 0, DM_REPORT_WATTS_MAX);
        } else if (strcmp(o, "--sys-w") == 0) {
            a.model.sys_w = number(o, v, 0, DM_REPORT_WATTS_MAX);
        } else if (strcmp(o, "--io-w") == 0) {
            a.model.io_w = number(o, v, 0, DM_REPORT_WATTS_MAX);
        } else if (strcmp(o, "--wait-w") == 0) {
            a.model.wait_w = number(o, v, 0, DM_REPORT_WATTS_MAX);
        } else if (strcmp(o, "--count") == 0) {
            a.count = (uint64_t)number(o, v, 1, 1e12);
        } else if (strcmp(o, "--control") == 0) {
            control = v;
        } else if (strcmp(o, "--control-token-file") == 0) {
            token_file = v;
        } else if (strcmp(o, "--sleep-command") == 0) {
            cc.sleep_command = v;
        } else if (strcmp(o, "--wake-command") == 0) {
            cc.wake_command = v;
        } else if (strcmp(o, "--command-timeout") == 0) {
            cc.command_timeout_ms = (uint64_t)number(o, v, 1, 3600000);
        } else {
            usage_error("unknown option", o);
        }
    }
    if (name == NULL || to == NULL || key_file == NULL || ports == NULL) {
        usage_error("--name, --to, --key-file and --ports are required", NULL);
    }
    if (strlen(name) > DM_REPORT_NAME_MAX) {
        usage_error("--name: longer than 63", name);
    }
    strcpy(a.r.name, name);
    /* The proxy drops a sequence number not above the last it accepted, and
     * remembers that across its reloads: numbers start at the start time in
     * microseconds, so a restarted agent (one report per >= 10 ms) always
     * goes on above the run before it. */
    a.r.seq = wall_ms() * 1000;
    struct dm_report probe = a.r;
    char tmp[DM_REPORT_MAX];
    if (dm_report_encode(&probe, (const uint8_t *)"k", 1, tmp, sizeof(tmp)) == 0) {
        usage_error("--name: letters, digits, '.', '_', '-' only", name);
    }
    parse_addr("--to: expected HOST:PORT (1..65535)", to, SOCK_DGRAM, false, &a.to);
    if (control != NULL) {
        parse_addr("--control: expected HOST:PORT (0..65535)", control, SOCK_STREAM, true,
                   &cc.addr);
        if (token_file != NULL) {
            read_token(token_file, &cc);
        } else if (!is_loopback(&cc.addr)) {
            usage_error("--control on an address other than loopback needs --control-token-file",
                        control);
        }
        if (cc.sleep_command == NULL && cc.wake_command == NULL) {
            usage_error("--control needs --sleep-command or --wake-command", NULL);
        }
    } else if (token_file != NULL || cc.sleep_command != NULL || cc.wake_command != NULL) {
        usage_error("--control-token-file, --sleep-command and --wake-command need --control",
                    NULL);
    }
    if (*ports == 0) {
        usage_error("--ports: expected P[,P...] of 1..65535", ports);
    }
    for (const char *p = ports; *p;) {
        char *end;
        unsigned long port = strtoul(p, &end, 10);
        if (end == p || port == 0 || port > 65535 || a.nports == MAX_PORTS ||
            (*end != ',' && *end != 0)) {
            usage_error("--ports: expected P[,P...] of 1..65535", ports);
        }
        a.ports[a.nports++] = (uint16_t)port;
        p = *end == ',' ? end + 1 : end;
    }
    a.buf = malloc(FILE_MAX);
    if (a.buf == NULL) {
        fprintf(stderr, "dimmer-agent: out of memory\n");
        return 1;
    }
    int err = dm_report_key_read(key_file, a.key, &a.key_len);
    if (err < 0) {
        fprintf(stderr, "dimmer-agent: %s: %s\n", key_file,
                err == -EINVAL ? "empty key" : dm_report_key_error(err));
        return 2;
    }
    if (glob("/sys/class/powercap/intel-rapl:[0-9]*/energy_uj", 0, NULL, &a.rapl) != 0) {
        a.rapl.gl_pathc = 0; /* no counter: measured_w is "-" */
    }
    /* A requester that went away before its answer is an error of that
     * write, not the end of the agent. */
    signal(SIGPIPE, SIG_IGN);
    a.loop = uv_default_loop();
    if (uv_udp_init(a.loop, &a.udp) < 0 || uv_timer_init(a.loop, &a.timer) < 0 ||
        uv_signal_init(a.loop, &a.sigterm) < 0 || uv_signal_init(a.loop, &a.sigint) < 0) {
        fprintf(stderr, "dimmer-agent: cannot set up the event loop\n");
        return 1;
    }
    a.timer.data = &a;
    a.sigterm.data = &a;
    a.sigint.data = &a;
    if (control != NULL) {
        struct sockaddr_storage bound;
        int e;
        a.control = dm_control_start(a.loop, &cc, &bound, &e);
        if (a.control == NULL) {
            fprintf(stderr, "dimmer-agent: --control %s: %s\n", control, uv_strerror(e));
            return 1;
        }
        print_addr("control", &bound);
    }
    uv_signal_start(&a.sigterm, on_signal, SIGTERM);
    uv_signal_start(&a.sigint, on_signal, SIGINT);
    /* The first report at once (estimated as idle: no CPU interval yet). */
    uv_timer_start(&a.timer, tick, 0, a.interval_ms);
    uv_run(a.loop, UV_RUN_DEFAULT);
    uv_loop_close(a.loop);
    globfree(&a.rapl);
    free(a.buf);
    return 0;
}
