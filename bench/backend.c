/*
 * dimmer-backend: the demo backend the proxy's default config, demo and integration tests
 * run behind. One thread, one libuv loop, HTTP/1.1 parsed by llhttp. Its files:
 *
 *   backend.c         main(): options, the listener, signals, shutdown
 *   backend_conn.c    a connection: reading, HTTP/1.1 parsing with llhttp, writing
 *                     responses and their body generators, lingering close
 *   backend_routes.c  the endpoints (/healthz, /stats, the site, /bytes, /echo, ...)
 *   backend_ws.c      the WebSocket echo behind /ws
 *   backend_site.c    the generated site and the byte pattern (pure)
 *
 * The connection core calls the endpoints only through struct dm_backend_handlers, so
 * it sits below them.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "bench/backend_conn.h"
#include "bench/backend_routes.h"
#include "bench/backend_site.h"

#define NAME_MAX_LEN 64

static void
on_signal(uv_signal_t *s, int signum)
{
    struct dm_backend *be = s->data;
    (void)signum;
    if (be->stopping) {
        return;
    }
    be->stopping = true;
    uv_close((uv_handle_t *)&be->listener, NULL);
    uv_close((uv_handle_t *)&be->sigterm, NULL);
    uv_close((uv_handle_t *)&be->sigint, NULL);
    while (be->conns) {
        dm_backend_conn_close(be->conns);
    }
}

static void
usage(FILE *f)
{
    fprintf(
        f,
        "usage: dimmer-backend --listen ADDR [--name NAME] [--seed N] [--pages N]\n"
        "\n"
        "Demo HTTP/1.1 backend for dimmer.\n"
        "  --listen ADDR  address to listen on: 127.0.0.1:9001, [::1]:9001 (required;\n"
        "                 port 0 picks one; the bound address is printed on stdout)\n"
        "  --name NAME    sent as X-Backend on every response (default backend;\n"
        "                 letters, digits, '.', '_', '-', up to 64)\n"
        "  --seed N       site generation seed (default 1)\n"
        "  --pages N      number of generated pages (default 50, max %u)\n"
        "  --help         this text\n"
        "\n"
        "Endpoints (every response has X-Backend and, unless noted, Content-Length):\n"
        "  GET /healthz            200 \"ok\\n\"\n"
        "  GET /stats              {\"name\":..,\"requests\":N,\"connections\":N,\"open\":N,\n"
        "                          \"pages\":N,\"page_objects\":N,\"objects\":N}; requests\n"
        "                          counts all requests but /stats and /healthz, connections\n"
        "                          every accepted one, open those open now, pages the GETs\n"
        "                          of pages, page_objects their objects summed, objects the\n"
        "                          GETs of objects\n"
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
        "  GET /ws                 WebSocket echo (ping gets pong, close gets close)\n"
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

static void
print_bound(struct dm_backend *be)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getsockname(&be->listener, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            uv_ip6_name(a, ip, sizeof ip);
            port = ntohs(a->sin6_port);
            printf("dimmer-backend %s listening on [%s]:%d\n", be->name, ip, port);
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            uv_ip4_name(a, ip, sizeof ip);
            port = ntohs(a->sin_port);
            printf("dimmer-backend %s listening on %s:%d\n", be->name, ip, port);
        }
        fflush(stdout);
    }
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "listen", required_argument, NULL, 'l' }, { "name", required_argument, NULL, 'n' },
        { "seed", required_argument, NULL, 's' },   { "pages", required_argument, NULL, 'p' },
        { "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
    };
    const char *listen_addr = NULL;
    const char *name = "backend";
    uint64_t seed = 1, pages = 50;
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
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    if (parse_addr(listen_addr, &addr) < 0) {
        fprintf(stderr, "dimmer-backend: bad --listen address '%s' (want HOST:PORT)\n",
                listen_addr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    struct dm_backend be = { 0 };
    be.name = name;
    be.loop = uv_default_loop();
    be.site = dm_site_create(seed, (unsigned)pages);
    if (!be.site || !dm_backend_make_fills(&be)) {
        fprintf(stderr, "dimmer-backend: out of memory building the site\n");
        return 1;
    }
    be.handlers = &dm_backend_endpoints;
    dm_backend_settings_init(&be.settings);

    int rc = 0;
    uv_tcp_init(be.loop, &be.listener);
    be.listener.data = &be;
    int err = uv_tcp_bind(&be.listener, (const struct sockaddr *)&addr, 0);
    if (err == 0) {
        err = uv_listen((uv_stream_t *)&be.listener, 1024, dm_backend_on_connection);
    }
    if (err < 0) {
        fprintf(stderr, "dimmer-backend: cannot listen on %s: %s\n", listen_addr, uv_strerror(err));
        uv_close((uv_handle_t *)&be.listener, NULL);
        rc = 1;
    } else {
        uv_signal_init(be.loop, &be.sigterm);
        uv_signal_init(be.loop, &be.sigint);
        be.sigterm.data = &be;
        be.sigint.data = &be;
        uv_signal_start(&be.sigterm, on_signal, SIGTERM);
        uv_signal_start(&be.sigint, on_signal, SIGINT);
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
