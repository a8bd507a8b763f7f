/*
 * dimmer-backend: the demo backend the proxy's default config, demo and integration tests
 * run behind. One thread, one libuv loop, HTTP/1.1 parsed by llhttp. Its files:
 *
 *   backend.c         main(): options, the listeners, signals, shutdown
 *   backend_conn.c    a connection: reading, HTTP/1.1 parsing with llhttp, writing
 *                     responses and their body generators, lingering close
 *   backend_queue.c   capacity, the FIFO of waiting requests, service times
 *   backend_power.c   power states, the power model and energy, WOL, the agent
 *   backend_routes.c  the endpoints (/healthz, /stats, the site, /bytes, /echo, ...)
 *                     and those of the control listener (/sleep, /wake, /power)
 *   backend_ws.c      the WebSocket echo behind /ws
 *   backend_site.c    the generated site and the byte pattern (pure)
 *
 * The connection core calls the endpoints only through struct dm_backend_handlers, so
 * it sits below them.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "bench/backend_conn.h"
#include "bench/backend_power.h"
#include "bench/backend_routes.h"
#include "bench/backend_site.h"
#include "power/report.h"
#include "power/wol.h"

#define NAME_MAX_LEN 64
#define MAX_MS       (UINT64_C(3600) * 1000)
#define MAX_SLOTS    UINT64_C(1000000)

/* Closes every handle, so that uv_run() returns. */
static void
stop(struct dm_backend *be)
{
    if (be->stopping) {
        return;
    }
    be->stopping = true;
    uv_close((uv_handle_t *)&be->listener, NULL);
    if (be->has_control) {
        uv_close((uv_handle_t *)&be->control, NULL);
    }
    uv_close((uv_handle_t *)&be->sigterm, NULL);
    uv_close((uv_handle_t *)&be->sigint, NULL);
    uv_close((uv_handle_t *)&be->sigusr1, NULL);
    uv_close((uv_handle_t *)&be->sigusr2, NULL);
    dm_backend_power_stop(be);
    while (be->conns) {
        dm_backend_conn_close(be->conns);
    }
    while (be->ctl_conns) {
        dm_backend_conn_close(be->ctl_conns);
    }
}

static void
on_signal(uv_signal_t *s, int signum)
{
    struct dm_backend *be = s->data;
    if (signum == SIGUSR1) {
        dm_backend_power_sleep(be);
    } else if (signum == SIGUSR2) {
        dm_backend_power_wake(be);
    } else {
        stop(be);
    }
}

static void
usage(FILE *f)
{
    fprintf(
        f,
        "usage: dimmer-backend --listen ADDR [--name NAME] [--seed N] [--pages N]\n"
        "           [--header-ms MS] [--keepalive-ms MS]\n"
        "           [--capacity N] [--queue N] [--service-ms MS]\n"
        "           [--idle-w W] [--full-w W] [--asleep-w W] [--booting-w W]\n"
        "           [--start awake|asleep] [--boot-ms MS] [--control ADDR\n"
        "           [--control-token-file FILE]]\n"
        "           [--wol ADDR --mac MAC] [--agent-to ADDR --agent-key-file FILE\n"
        "           [--agent-name NAME] [--agent-interval-ms MS]]\n"
        "\n"
        "Demo HTTP/1.1 backend for dimmer; with the options below --help, also a machine\n"
        "of a power-managed web cluster (timers, not the CPU, stand for the work).\n"
        "  --listen ADDR  address to listen on: 127.0.0.1:9001, [::1]:9001 (required;\n"
        "                 port 0 picks one; the bound address is printed on stdout)\n"
        "  --name NAME    sent as X-Backend on every response (default backend;\n"
        "                 letters, digits, '.', '_', '-', up to 64)\n"
        "  --seed N       site generation seed (default 1)\n"
        "  --pages N      number of generated pages (default 50, max %u)\n"
        "  --header-ms MS    a request head must come whole within MS ms of its first\n"
        "                    byte (else 408, and the connection closes), and each wait\n"
        "                    for more of its body is as long at most (else the connection\n"
        "                    closes) (default 60000)\n"
        "  --keepalive-ms MS a connection with no request under way closes after MS ms\n"
        "                    (default 75000); 0 turns either off\n"
        "  --help         this text\n"
        "\n"
        "Capacity (without these, every request is routed as it arrives):\n"
        "  --capacity N      requests in service at once, all connections together\n"
        "                    (default 0: unlimited)\n"
        "  --queue N         requests waiting for a slot, first come first served, at most\n"
        "                    (default 1024); one more gets 503 with Retry-After: 1 at once\n"
        "  --service-ms MS   a request holds its slot MS ms, then its response starts\n"
        "                    (default 0); a GET or HEAD says its own with ?ms=N. A waiting\n"
        "                    request's connection is not read; /healthz and /stats never wait\n"
        "\n"
        "Power (a model: the process itself draws next to nothing):\n"
        "  --idle-w W, --full-w W  awake: idle + (full - idle) * min(1, in_service /\n"
        "                    capacity), capacity 100 when unlimited (defaults 40, 70);\n"
        "                    only requests in their service time are in service\n"
        "  --asleep-w W      asleep (default 3)\n"
        "  --booting-w W     booting (default 60); energy_wh integrates it all exactly\n"
        "  --start STATE     awake or asleep (default awake)\n"
        "  --boot-ms MS      after a wake, booting MS ms, then awake (default 0)\n"
        "                    Asleep or booting, the serving listener resets every connection\n"
        "                    at once, unread (a real machine would not even answer the SYN);\n"
        "                    going to sleep resets every serving connection, as a suspended\n"
        "                    machine's peers see it. SIGUSR1 sleeps, SIGUSR2 wakes.\n"
        "  --control ADDR    control listener (HTTP, up in every state), printed on stdout\n"
        "                    as 'dimmer-backend NAME control on HOST:PORT'\n"
        "  --control-token-file FILE\n"
        "                    POST /sleep and /wake need 'Authorization: Bearer TOKEN', TOKEN\n"
        "                    the file without its final newlines (dimmer's\n"
        "                    control_token_file); else 401\n"
        "  --wol ADDR        Wake-on-LAN receiver (UDP), printed as 'dimmer-backend NAME wol\n"
        "                    on HOST:PORT': a datagram that is exactly the magic packet of\n"
        "                    --mac (6 x 0xff, then the MAC 16 times) wakes the node\n"
        "  --mac MAC         this node's MAC: aa:bb:cc:dd:ee:ff\n"
        "\n"
        "Agent (reports as dimmer-agent does, while awake or booting):\n"
        "  --agent-to ADDR         the proxy's metrics listener (UDP)\n"
        "  --agent-key-file FILE   the shared key (the file's bytes, a final newline dropped)\n"
        "  --agent-name NAME       the name in the reports (default --name)\n"
        "  --agent-interval-ms MS  one report every MS ms, the first at once (default 1000,\n"
        "                          10..3600000): est_w the model's power, measured_w '-',\n"
        "                          tcp the serving connections open\n"
        "\n"
        "Endpoints (every response has X-Backend and, unless noted, Content-Length):\n"
        "  GET /healthz            200 \"ok\\n\"\n"
        "  GET /stats              {\"name\":..,\"requests\":N,\"connections\":N,\"open\":N,\n"
        "                          \"pages\":N,\"page_objects\":N,\"objects\":N,\"power\":STATE,\n"
        "                          \"power_for_ms\":N,\"watts\":W,\"energy_wh\":E,\n"
        "                          \"capacity\":N,\"in_service\":N,\"in_service_max\":N,\n"
        "                          \"queued\":N,\"queued_max\":N,\n"
        "                          \"rejected_full\":N,\"refused\":N,\"lost_at_sleep\":N,\n"
        "                          \"requests_not_awake\":N,\"sleeps\":N,\"wakes\":N,\n"
        "                          \"wol_ignored\":N,\"served\":N}; requests counts all\n"
        "                          requests but /stats and /healthz (a queued one once\n"
        "                          its service time is over), connections every\n"
        "                          accepted one, open those open now, pages the GETs of\n"
        "                          pages, page_objects their objects summed, objects the GETs\n"
        "                          of objects (all on the serving listener); power_for_ms is\n"
        "                          the time in that state, rejected_full the 503s of a full\n"
        "                          queue, refused the connections reset while not awake,\n"
        "                          lost_at_sleep the requests waiting or under way when it\n"
        "                          went to sleep, requests_not_awake request heads read while\n"
        "                          not awake (0 by construction), wol_ignored the datagrams\n"
        "                          that were not our magic packet, served the requests whose\n"
        "                          service time ended\n"
        "  GET /                   index of the generated site\n"
        "  GET /page/N.html        page N (0..pages-1); X-Page-Objects: count\n"
        "  GET /page/N.objects     the page's embedded objects, one path a line\n"
        "  GET /obj/ID.EXT         object (png jpg js css), size fixed by ID\n"
        "  GET /bytes/N            N bytes (N <= 2^40) of the pattern below\n"
        "  GET /chunked/N          the same, Transfer-Encoding: chunked\n"
        "  GET /close/N            the same, no length, Connection: close\n"
        "  POST|PUT /echo          the request body back (chunked if it was)\n"
        "  POST|PUT /sha256        {\"bytes\":N,\"sha256\":\"hex\"} of the request body\n"
        "  ANY /headers            the request head exactly as received\n"
        "  ANY /status/N           status N (204 and 304: no body, no length;\n"
        "                          1xx: interim then a final 200)\n"
        "  ANY /slow/MS            200 after MS milliseconds\n"
        "  GET /ws                 WebSocket echo (ping gets pong, close gets close); the\n"
        "                          101 says X-Backend: NAME and echoes X-Rate-Tier as\n"
        "                          X-Rate-Tier-Seen\n"
        "\n"
        "Control endpoints (--control):\n"
        "  POST /sleep, POST /wake the change (none when there already), then as GET /power\n"
        "  GET /power              {\"state\":STATE,\"for_ms\":N,\"watts\":W,\"energy_wh\":E,\n"
        "                          \"idle_w\":W,\"full_w\":W,\"asleep_w\":W,\"booting_w\":W,\n"
        "                          \"boot_ms\":N}\n"
        "  GET /stats              as above; others 404, a wrong method 405\n"
        "\n"
        "Pattern: byte i is block[i %% 65521] with block[j] = ((j * 2654435761) >> 13) & 0xff;\n"
        "  python3: block = bytes((j * 2654435761 >> 13) & 255 for j in range(65521))\n"
        "           data = (block * (N // 65521 + 1))[:N]\n"
        "  Object bodies: pictures (png, jpg) are an SVG image (image/svg+xml) padded\n"
        "  with spaces, scripts one // comment, stylesheets one /* comment.\n",
        DM_SITE_MAX_PAGES);
}

static bool
name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > NAME_MAX_LEN) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
        if (!ok) {
            return false;
        }
    }
    return true;
}

static bool
parse_num(const char *s, uint64_t max, uint64_t *out)
{
    return dm_backend_parse_u64((struct dm_backend_span){ s, strlen(s) }, max, out);
}

/* "host:port" or "[v6]:port". */
static int
parse_addr(const char *s, struct sockaddr_storage *ss)
{
    char host[128];
    const char *colon = strrchr(s, ':');
    uint64_t port;
    if (!colon || !parse_num(colon + 1, 65535, &port)) {
        return -EINVAL;
    }
    size_t hlen = (size_t)(colon - s);
    if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
        if (hlen - 2 >= sizeof host) {
            return -EINVAL;
        }
        memcpy(host, s + 1, hlen - 2);
        host[hlen - 2] = '\0';
        return uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss);
    }
    if (hlen == 0 || hlen >= sizeof host) {
        return -EINVAL;
    }
    memcpy(host, s, hlen);
    host[hlen] = '\0';
    return uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss);
}

/* Watts: a finite decimal, 0..DM_REPORT_WATTS_MAX (what a report can carry). */
static bool
parse_watts(const char *s, double *out)
{
    char *end;
    double d = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(d) || d < 0 || d > DM_REPORT_WATTS_MAX) {
        return false;
    }
    *out = d;
    return true;
}

/* "127.0.0.1:9001" or "[::1]:9001". */
static void
addr_text(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        uv_ip6_name(a, ip, sizeof ip);
        snprintf(out, cap, "[%s]:%d", ip, ntohs(a->sin6_port));
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        uv_ip4_name(a, ip, sizeof ip);
        snprintf(out, cap, "%s:%d", ip, ntohs(a->sin_port));
    }
}

/* The bound addresses, the serving one first: tests and scripts read them here. */
static void
print_bound(struct dm_backend *be)
{
    struct sockaddr_storage ss;
    char text[INET6_ADDRSTRLEN + 16];
    int len = sizeof ss;
    if (uv_tcp_getsockname(&be->listener, (struct sockaddr *)&ss, &len) == 0) {
        addr_text(&ss, text, sizeof text);
        printf("dimmer-backend %s listening on %s\n", be->name, text);
    }
    len = sizeof ss;
    if (be->has_control && uv_tcp_getsockname(&be->control, (struct sockaddr *)&ss, &len) == 0) {
        addr_text(&ss, text, sizeof text);
        printf("dimmer-backend %s control on %s\n", be->name, text);
    }
    if (be->power.wol_on && dm_backend_power_wol_name(be, &ss) == 0) {
        addr_text(&ss, text, sizeof text);
        printf("dimmer-backend %s wol on %s\n", be->name, text);
    }
    fflush(stdout);
}

static int
listen_on(struct dm_backend *be, uv_tcp_t *t, const struct sockaddr_storage *addr,
          uv_connection_cb cb)
{
    t->data = be;
    int err = uv_tcp_bind(t, (const struct sockaddr *)addr, 0);
    return err < 0 ? err : uv_listen((uv_stream_t *)t, 1024, cb);
}

/* What the options say beyond the site; checked and applied by main(). */
struct node_opts {
    const char *control, *control_token_file, *wol, *mac, *agent_to, *agent_key_file, *agent_name;
    bool agent_interval_set;
};

/* One line on stderr and exit code 2, as every bad option. */
static int
bad(const char *what, const char *value)
{
    fprintf(stderr, "dimmer-backend: %s%s%s\n", what, value ? ": " : "", value ? value : "");
    return 2;
}

/* Checks the power options and applies them to be; 0, or the exit code. */
static int
node_setup(struct dm_backend *be, const struct node_opts *o, struct sockaddr_storage *control)
{
    struct dm_backend_power *p = &be->power;
    if (p->full_w < p->idle_w) {
        return bad("--full-w must not be below --idle-w", NULL);
    }
    if (p->asleep_w > p->idle_w) {
        return bad("--asleep-w must not be above --idle-w", NULL);
    }
    if (o->control) {
        if (parse_addr(o->control, control) < 0) {
            return bad("bad --control address (want HOST:PORT)", o->control);
        }
        be->has_control = true;
    }
    if (o->control_token_file) {
        if (!o->control) {
            return bad("--control-token-file needs --control", NULL);
        }
        uint8_t tok[DM_REPORT_KEY_MAX];
        size_t len = 0;
        int err = dm_report_key_read(o->control_token_file, tok, &len);
        bool printable = err == 0;
        for (size_t i = 0; printable && i < len; i++) {
            printable = tok[i] > 0x20 && tok[i] < 0x7f; /* it comes in a header */
        }
        if (err < 0 || !printable || len >= sizeof(be->control_token)) {
            return bad(err == 0         ? "--control-token-file: printable ASCII, no spaces, wanted"
                       : err == -EINVAL ? "--control-token-file: empty token"
                                        : "--control-token-file",
                       err == 0 || err == -EINVAL ? o->control_token_file
                                                  : dm_report_key_error(err));
        }
        memcpy(be->control_token, tok, len);
        be->control_token_len = len;
    }
    if (!o->wol != !o->mac) {
        return bad("--wol and --mac go together", NULL);
    }
    if (o->wol) {
        if (parse_addr(o->wol, &p->wol_addr) < 0) {
            return bad("bad --wol address (want HOST:PORT)", o->wol);
        }
        if (dm_wol_parse_mac(o->mac, p->mac) < 0) {
            return bad("bad --mac (want aa:bb:cc:dd:ee:ff)", o->mac);
        }
        p->wol_on = true;
    }
    if (!o->agent_to != !o->agent_key_file) {
        return bad("--agent-to and --agent-key-file go together", NULL);
    }
    if (!o->agent_to) {
        if (o->agent_name || o->agent_interval_set) {
            return bad("--agent-name and --agent-interval-ms need --agent-to", NULL);
        }
        return 0;
    }
    if (parse_addr(o->agent_to, &p->agent_to) < 0) {
        return bad("bad --agent-to address (want HOST:PORT)", o->agent_to);
    }
    int err = dm_report_key_read(o->agent_key_file, p->key, &p->key_len);
    if (err < 0) {
        return bad(err == -EINVAL ? "--agent-key-file: empty key" : "--agent-key-file",
                   err == -EINVAL ? o->agent_key_file : dm_report_key_error(err));
    }
    const char *name = o->agent_name ? o->agent_name : be->name;
    if (strlen(name) > DM_REPORT_NAME_MAX) {
        return bad("--agent-name wants 1..63 of [A-Za-z0-9._-]", name);
    }
    strcpy(p->report.name, name);
    /* A report that encodes proves the name fits the format. */
    char probe[DM_REPORT_MAX];
    if (dm_report_encode(&p->report, p->key, p->key_len, probe, sizeof probe) == 0) {
        return bad("--agent-name wants 1..63 of [A-Za-z0-9._-]", name);
    }
    p->agent_on = true;
    return 0;
}

int
main(int argc, char **argv)
{
    enum {
        OPT_CAPACITY = 256,
        OPT_QUEUE,
        OPT_SERVICE_MS,
        OPT_IDLE_W,
        OPT_FULL_W,
        OPT_ASLEEP_W,
        OPT_BOOTING_W,
        OPT_START,
        OPT_BOOT_MS,
        OPT_CONTROL,
        OPT_WOL,
        OPT_MAC,
        OPT_AGENT_TO,
        OPT_AGENT_KEY_FILE,
        OPT_AGENT_NAME,
        OPT_AGENT_INTERVAL_MS,
        OPT_CONTROL_TOKEN_FILE,
        OPT_HEADER_MS,
        OPT_KEEPALIVE_MS,
    };
    static const struct option opts[] = {
        { "listen", required_argument, NULL, 'l' },
        { "name", required_argument, NULL, 'n' },
        { "seed", required_argument, NULL, 's' },
        { "pages", required_argument, NULL, 'p' },
        { "help", no_argument, NULL, 'h' },
        { "capacity", required_argument, NULL, OPT_CAPACITY },
        { "queue", required_argument, NULL, OPT_QUEUE },
        { "service-ms", required_argument, NULL, OPT_SERVICE_MS },
        { "idle-w", required_argument, NULL, OPT_IDLE_W },
        { "full-w", required_argument, NULL, OPT_FULL_W },
        { "asleep-w", required_argument, NULL, OPT_ASLEEP_W },
        { "booting-w", required_argument, NULL, OPT_BOOTING_W },
        { "start", required_argument, NULL, OPT_START },
        { "boot-ms", required_argument, NULL, OPT_BOOT_MS },
        { "control", required_argument, NULL, OPT_CONTROL },
        { "control-token-file", required_argument, NULL, OPT_CONTROL_TOKEN_FILE },
        { "wol", required_argument, NULL, OPT_WOL },
        { "mac", required_argument, NULL, OPT_MAC },
        { "agent-to", required_argument, NULL, OPT_AGENT_TO },
        { "agent-key-file", required_argument, NULL, OPT_AGENT_KEY_FILE },
        { "agent-name", required_argument, NULL, OPT_AGENT_NAME },
        { "agent-interval-ms", required_argument, NULL, OPT_AGENT_INTERVAL_MS },
        { "header-ms", required_argument, NULL, OPT_HEADER_MS },
        { "keepalive-ms", required_argument, NULL, OPT_KEEPALIVE_MS },
        { NULL, 0, NULL, 0 },
    };
    const char *listen_addr = NULL;
    const char *name = "backend";
    uint64_t seed = 1, pages = 50;
    struct dm_backend be = { 0 };
    be.queue.max = 1024;
    be.power.idle_w = 40;
    be.power.full_w = 70;
    be.power.asleep_w = 3;
    be.power.booting_w = 60;
    be.power.agent_interval_ms = 1000;
    be.header_ms = 60000;    /* nginx's client_header_timeout */
    be.keepalive_ms = 75000; /* nginx's keepalive_timeout */
    struct node_opts node = { 0 };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'l':
            listen_addr = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 's':
            if (!parse_num(optarg, UINT64_MAX, &seed)) {
                fprintf(stderr, "dimmer-backend: --seed wants a decimal number\n");
                return 2;
            }
            break;
        case 'p':
            if (!parse_num(optarg, DM_SITE_MAX_PAGES, &pages) || pages == 0) {
                fprintf(stderr, "dimmer-backend: --pages wants 1..%u\n", DM_SITE_MAX_PAGES);
                return 2;
            }
            break;
        case OPT_CAPACITY:
        case OPT_QUEUE:
            if (!parse_num(optarg, MAX_SLOTS,
                           ch == OPT_CAPACITY ? &be.queue.capacity : &be.queue.max)) {
                return bad(ch == OPT_CAPACITY ? "--capacity wants 0..1000000"
                                              : "--queue wants 0..1000000",
                           optarg);
            }
            break;
        case OPT_HEADER_MS:
        case OPT_KEEPALIVE_MS:
            if (!parse_num(optarg, MAX_MS,
                           ch == OPT_HEADER_MS ? &be.header_ms : &be.keepalive_ms)) {
                return bad(ch == OPT_HEADER_MS ? "--header-ms wants 0..3600000"
                                               : "--keepalive-ms wants 0..3600000",
                           optarg);
            }
            break;
        case OPT_SERVICE_MS:
        case OPT_BOOT_MS:
            if (!parse_num(optarg, MAX_MS,
                           ch == OPT_BOOT_MS ? &be.power.boot_ms : &be.queue.service_ms)) {
                return bad(ch == OPT_BOOT_MS ? "--boot-ms wants 0..3600000"
                                             : "--service-ms wants 0..3600000",
                           optarg);
            }
            break;
        case OPT_IDLE_W:
        case OPT_FULL_W:
        case OPT_ASLEEP_W:
        case OPT_BOOTING_W: {
            double *w[] = { &be.power.idle_w, &be.power.full_w, &be.power.asleep_w,
                            &be.power.booting_w };
            if (!parse_watts(optarg, w[ch - OPT_IDLE_W])) {
                return bad("watts must be a number, 0..100000", optarg);
            }
            break;
        }
        case OPT_START:
            if (strcmp(optarg, "asleep") != 0 && strcmp(optarg, "awake") != 0) {
                return bad("--start wants awake or asleep", optarg);
            }
            be.power.start_asleep = strcmp(optarg, "asleep") == 0;
            break;
        case OPT_CONTROL:
            node.control = optarg;
            break;
        case OPT_CONTROL_TOKEN_FILE:
            node.control_token_file = optarg;
            break;
        case OPT_WOL:
            node.wol = optarg;
            break;
        case OPT_MAC:
            node.mac = optarg;
            break;
        case OPT_AGENT_TO:
            node.agent_to = optarg;
            break;
        case OPT_AGENT_KEY_FILE:
            node.agent_key_file = optarg;
            break;
        case OPT_AGENT_NAME:
            node.agent_name = optarg;
            break;
        case OPT_AGENT_INTERVAL_MS:
            if (!parse_num(optarg, MAX_MS, &be.power.agent_interval_ms) ||
                be.power.agent_interval_ms < 10) {
                return bad("--agent-interval-ms wants 10..3600000", optarg);
            }
            node.agent_interval_set = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !listen_addr) {
        if (!listen_addr) {
            fprintf(stderr, "dimmer-backend: --listen ADDR is required\n");
        }
        usage(stderr);
        return 2;
    }
    if (!name_ok(name)) {
        fprintf(stderr, "dimmer-backend: --name wants 1..%d of [A-Za-z0-9._-]\n", NAME_MAX_LEN);
        return 2;
    }
    be.name = name;
    struct sockaddr_storage addr, control_addr;
    memset(&addr, 0, sizeof addr);
    memset(&control_addr, 0, sizeof control_addr);
    if (parse_addr(listen_addr, &addr) < 0) {
        fprintf(stderr, "dimmer-backend: bad --listen address '%s' (want HOST:PORT)\n",
                listen_addr);
        return 2;
    }
    int rc = node_setup(&be, &node, &control_addr);
    if (rc != 0) {
        return rc;
    }
    signal(SIGPIPE, SIG_IGN);

    be.loop = uv_default_loop();
    be.site = dm_site_create(seed, (unsigned)pages);
    if (!be.site || !dm_backend_make_fills(&be)) {
        fprintf(stderr, "dimmer-backend: out of memory building the site\n");
        return 1;
    }
    be.handlers = &dm_backend_endpoints;
    dm_backend_settings_init(&be.settings);

    uv_tcp_init(be.loop, &be.listener);
    if (be.has_control) {
        uv_tcp_init(be.loop, &be.control);
    }
    uv_signal_t *sigs[] = { &be.sigterm, &be.sigint, &be.sigusr1, &be.sigusr2 };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        uv_signal_init(be.loop, sigs[i]);
        sigs[i]->data = &be;
    }
    const char *what = listen_addr;
    int err = listen_on(&be, &be.listener, &addr, dm_backend_on_connection);
    if (err == 0 && be.has_control) {
        what = node.control;
        err = listen_on(&be, &be.control, &control_addr, dm_backend_on_control_connection);
    }
    if (err == 0) {
        what = node.wol;
        err = dm_backend_power_start(&be);
    }
    if (err < 0) {
        fprintf(stderr, "dimmer-backend: cannot listen on %s: %s\n", what, uv_strerror(err));
        stop(&be);
        rc = 1;
    } else {
        uv_signal_start(&be.sigterm, on_signal, SIGTERM);
        uv_signal_start(&be.sigint, on_signal, SIGINT);
        uv_signal_start(&be.sigusr1, on_signal, SIGUSR1);
        uv_signal_start(&be.sigusr2, on_signal, SIGUSR2);
        print_bound(&be);
    }
    uv_run(be.loop, UV_RUN_DEFAULT);

    while (be.free_outs) {
        struct dm_backend_out *o = be.free_outs;
        be.free_outs = o->next;
        free(o);
    }
    dm_site_destroy(be.site);
    for (int i = 0; i < 3; i++) {
        free(be.fill[i]);
    }
    if (uv_loop_close(be.loop) != 0) {
        fprintf(stderr, "dimmer-backend: handles left open at exit\n");
    }
    return rc;
}
