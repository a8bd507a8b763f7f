/*
 * dimmer-load: a SPECweb-style load generator (bench/load/load.h). This file:
 * options, the load threads of the rate and closed modes, gathering the
 * seconds, the live line, the CSV timeline, the JSON summary and the plot.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/load/load.h"
#include "parsers/manifest.h"

#define EXIT_USAGE 2

/* A connection of the rate and closed modes, with its schedule. */
struct dm_load_fixed {
    uv_timer_t due; /* rate mode: the next request's due time; closed: a pause after a failure */
    struct dm_load_thread *t;
    struct dm_load_conn *lc;
    uint64_t next_due_ns;
    unsigned index; /* among every thread's */
    bool sending;   /* in dm_load_conn_request: a failure there comes back at once */
};

static atomic_uint_fast64_t stop_sec = UINT64_MAX;

/* ---- options ---- */

static void
usage(FILE *f)
{
    fprintf(f, "usage: dimmer-load [options] URL\n"
               "\n"
               "SPECweb-style HTTP/1.1 load: users in sessions (the default), an open-loop\n"
               "rate (--rate), or wrk's closed loop (-c/-d). Every response is scored good\n"
               "(< --good), tolerable (< --tolerable) or failed (slower, connect error, reset,\n"
               "timeout, 5xx, malformed), and so is every page whole.\n"
               "\n"
               "  URL                  http://HOST[:PORT][/PATH]; PATH is the request of the\n"
               "                       rate and closed modes\n"
               "Modes:\n"
               "  --mode M             sessions, rate or closed (default: rate with --rate,\n"
               "                       closed with -c or -d, else sessions)\n"
               "  --rate R             rate mode: R requests/s in all, over -c connections;\n"
               "                       latency counts from when a request was due, not sent\n"
               "  -c N                 connections of the rate and closed modes (default 10)\n"
               "  -d SECONDS           length of the rate and closed modes, whole seconds\n"
               "                       (default 10)\n"
               "Sessions:\n"
               "  --pattern P          exp1, exp2, steps, ramp, constant, or a CSV file of\n"
               "                       seconds,sessions points, interpolated (default exp1)\n"
               "  --max-sessions N     the built-in pattern's peak (exp1 1200, exp2 800,\n"
               "                       others 100)\n"
               "  --scale F            play the pattern F times faster (10: 30 min in 3)\n"
               "  --ramp S             every rise and fall of the pattern lasts at least S s\n"
               "                       (before --scale), widened about its middle into the\n"
               "                       levels beside it (default 0: as the pattern has it)\n"
               "  --conns-per-user N   connections a user loads objects over (default 6)\n"
               "  --think MS           mean of the exponential think time (default 10000)\n"
               "  --session-pages N    pages per session, then a new user (default 0: no bound)\n"
               "  --session-time S     seconds per session (default 0: no bound)\n"
               "  --keepalive MS       close a connection idle this long (default 15000;\n"
               "                       0: close at every think time)\n"
               "  --pages N            pages of the demo site, /page/0.html .. (default 50)\n"
               "  --urls FILE          page paths instead, one a line, the most popular first\n"
               "  --manifest FILE      pages and their objects from a catalog manifest (the\n"
               "                       format of parsers/manifest.h): pages are not scanned\n"
               "  --zipf S             page popularity exponent (default 1.0)\n"
               "  --no-objects         pages only: do not scan them for embedded objects\n"
               "  --scan-limit BYTES   scan the first BYTES of a page (default 0: all)\n"
               "Common:\n"
               "  --threads T          load threads, one event loop each (default 1)\n"
               "  --source LIST        local addresses to connect from, in turn (A,B or an\n"
               "                       IPv4 range A-B such as 127.0.0.2-127.0.0.9): each has\n"
               "                       its own ports, for more connections than one has\n"
               "  --timeout MS         a request not answered by then fails (default 10000)\n"
               "  --connect-timeout MS (default 3000)\n"
               "  --good MS            good below this (default 2000)\n"
               "  --tolerable MS       tolerable below this (default 4000)\n"
               "  --seed N             random seed (default 1)\n"
               "  --csv FILE           the per-second timeline\n"
               "  --json FILE          the summary\n"
               "  --plot FILE.png      offered vs served sessions and the scores per second\n"
               "                       (needs gnuplot: apt-get install gnuplot-nox)\n"
               "  --quiet              no live line\n"
               "  --help               this text\n");
}

static void __attribute__((format(printf, 1, 2), noreturn)) die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dimmer-load: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (dimmer-load --help)\n");
    va_end(ap);
    exit(EXIT_USAGE);
}

static double
parse_number(const char *opt, const char *v, double lo, double hi)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno != 0 || end == v || *end != 0 || !isfinite(d) || d < lo || d > hi) {
        die_usage("%s: expected a number from %g to %g, got \"%s\"", opt, lo, hi, v);
    }
    return d;
}

/* A whole number from lo to hi, digits only: a count is never rounded or cut. */
static uint64_t
parse_count(const char *opt, const char *v, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    unsigned long long n = v[0] >= '0' && v[0] <= '9' ? strtoull(v, &end, 10) : 0;
    if (v[0] < '0' || v[0] > '9' || errno != 0 || *end != 0 || n < lo || n > hi) {
        die_usage("%s: expected a whole number from %llu to %llu, got \"%s\"", opt,
                  (unsigned long long)lo, (unsigned long long)hi, v);
    }
    return (uint64_t)n;
}

/* Seconds, with an optional s, m or h suffix; the caller bounds them from below. */
static double
parse_seconds(const char *opt, const char *v)
{
    char buf[64];
    size_t n = strlen(v);
    double mul = 1;
    if (n > 0 && n < sizeof(buf) && strchr("smh", v[n - 1]) != NULL) {
        mul = v[n - 1] == 'm' ? 60 : v[n - 1] == 'h' ? 3600 : 1;
        memcpy(buf, v, n - 1);
        buf[n - 1] = 0;
        v = buf;
    }
    return parse_number(opt, v, 0, 1e7 / mul) * mul;
}

static void
parse_url(struct dm_load_opts *o, const char *url)
{
    if (strncmp(url, "https://", 8) == 0) {
        die_usage("%s: https is not supported yet", url);
    }
    if (strncmp(url, "http://", 7) != 0) {
        die_usage("%s: expected http://HOST[:PORT][/PATH]", url);
    }
    const char *h = url + 7;
    /* The authority ends at the path, the query or the fragment (RFC 3986, 3.2). */
    size_t hlen = strcspn(h, "/?#");
    if (hlen == 0 || hlen >= sizeof(o->host)) {
        die_usage("%s: expected http://HOST[:PORT][/PATH]", url);
    }
    memcpy(o->host, h, hlen);
    o->host[hlen] = 0;
    if (memchr(o->host, '@', hlen) != NULL) {
        die_usage("%s: a user name in the URL is not supported", url);
    }
    /* The request target: the path (/ when there is none) and the query; the
     * fragment is the client's own, never sent (as curl and wrk do). */
    const char *rest = h + hlen;
    size_t plen = strcspn(rest, "#");
    const char *lead = *rest == '/' ? "" : "/";
    if (strlen(lead) + plen >= sizeof(o->path)) {
        die_usage("%s: path too long", url);
    }
    snprintf(o->path, sizeof(o->path), "%s%.*s", lead, (int)plen, rest);
    for (const char *c = o->path; *c != 0; c++) {
        if ((unsigned char)*c <= ' ' || *c == 0x7f) {
            /* It would end the request line or start a header of its own. */
            die_usage("%.*s: a space or control character (0x%02x) in the path (percent-encode "
                      "it)",
                      (int)(rest - url) + (int)(c - o->path) - (int)strlen(lead), url,
                      (unsigned char)*c);
        }
    }
    char name[300];
    const char *port = "80";
    memcpy(name, o->host, hlen + 1);
    if (name[0] == '[') {
        char *close = strchr(name, ']');
        if (close == NULL || (close[1] != 0 && close[1] != ':')) {
            die_usage("%s: bad IPv6 address", url);
        }
        if (close[1] == ':') {
            port = close + 2;
        }
        *close = 0;
        memmove(name, name + 1, strlen(name));
    } else {
        char *colon = strrchr(name, ':');
        if (colon != NULL) {
            *colon = 0;
            port = colon + 1;
        }
    }
    if (*port == 0) {
        die_usage("%s: empty port", url);
    }
    if (strspn(port, "0123456789") != strlen(port) || strlen(port) > 5 || atoi(port) < 1 ||
        atoi(port) > 65535) {
        /* getaddrinfo() would take 99999 as 34463 (its low 16 bits). */
        die_usage("%s: port %s: want a number from 1 to 65535", url, port);
    }
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    int r = getaddrinfo(name, port, &hints, &ai);
    if (r != 0) {
        die_usage("%s: cannot resolve %s port %s: %s", url, name, port, gai_strerror(r));
    }
    memcpy(&o->addr, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
}

static void
read_urls(struct dm_load_opts *o, const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        die_usage("%s: %s", path, strerror(errno));
    }
    char line[DM_LOAD_PATH_MAX + 2];
    unsigned lineno = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        size_t n = strcspn(line, "\r\n");
        if (line[n] == 0 && !feof(f)) {
            die_usage("%s:%u: line too long", path, lineno);
        }
        line[n] = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t') {
            p++;
        }
        if (*p == 0 || *p == '#') {
            continue;
        }
        bool bad = *p != '/';
        for (const char *c = p; *c != 0 && !bad; c++) {
            bad = (unsigned char)*c <= ' ' || *c == 0x7f; /* it would break the request line */
        }
        if (bad) {
            die_usage("%s:%u: expected a path such as /index.html", path, lineno);
        }
        p[strcspn(p, "#")] = 0; /* the fragment is the client's own, as in the URL */
        char **u = realloc(o->urls, (o->nurls + 1) * sizeof(*u));
        char *copy = strdup(p);
        if (u == NULL || copy == NULL) {
            die_usage("out of memory");
        }
        o->urls = u;
        o->urls[o->nurls++] = copy;
    }
    if (ferror(f)) {
        die_usage("%s: %s", path, strerror(errno)); /* a directory: EISDIR */
    }
    fclose(f);
    if (o->nurls == 0) {
        die_usage("%s: no paths", path);
    }
}

#define SOURCES_MAX 65536 /* --source addresses in all, as in one range */

/* --source: numeric addresses, comma-separated; A-B is every IPv4 address from A to B. */

static void
parse_sources(struct dm_load_opts *o, const char *list)
{
    char *copy = strdup(list);
    if (copy == NULL) {
        die_usage("out of memory");
    }
    char *save = NULL;
    size_t cap = 0;
    for (char *item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        char *dash = strchr(item, '-');
        struct in_addr a, b;
        struct sockaddr_storage one = { 0 };
        uint32_t from = 0, to = 0;
        if (dash != NULL) {
            *dash = 0;
            if (inet_pton(AF_INET, item, &a) != 1 || inet_pton(AF_INET, dash + 1, &b) != 1 ||
                ntohl(b.s_addr) < ntohl(a.s_addr) || ntohl(b.s_addr) - ntohl(a.s_addr) > 65535) {
                die_usage("--source: bad range %s-%s", item, dash + 1);
            }
            from = ntohl(a.s_addr);
            to = ntohl(b.s_addr);
        } else if (inet_pton(AF_INET, item, &a) == 1) {
            from = to = ntohl(a.s_addr);
        } else if (inet_pton(AF_INET6, item, &((struct sockaddr_in6 *)&one)->sin6_addr) == 1) {
            one.ss_family = AF_INET6;
        } else {
            die_usage("--source: expected numeric addresses, got \"%s\"", item);
        }
        /* Counted before anything is made: the list in all is bounded. */
        uint64_t more = one.ss_family == AF_INET6 ? 1 : (uint64_t)to - from + 1;
        if (o->nsources + more > SOURCES_MAX) {
            die_usage("--source: at most %d addresses in all", SOURCES_MAX);
        }
        if (o->nsources + more > cap) { /* doubled: many single addresses stay linear */
            cap = o->nsources + more > 2 * cap ? o->nsources + more : 2 * cap;
            o->sources = realloc(o->sources, cap * sizeof(*o->sources));
            if (o->sources == NULL) {
                die_usage("out of memory");
            }
        }
        struct sockaddr_storage *s = o->sources;
        if (one.ss_family == AF_INET6) {
            s[o->nsources++] = one;
            continue;
        }
        for (uint64_t v = from; v <= to; v++) {
            struct sockaddr_in *in = (struct sockaddr_in *)&s[o->nsources++];
            memset(in, 0, sizeof(struct sockaddr_storage));
            in->sin_family = AF_INET;
            in->sin_addr.s_addr = htonl((uint32_t)v);
        }
    }
    free(copy);
    if (o->nsources == 0) {
        die_usage("--source: no address");
    }
}

/* A --source address this machine cannot send from is an error now, not
 * every connection's failure with no reason given. */
static void
source_check(const struct sockaddr_storage *src)
{
    int fd = socket(src->ss_family, SOCK_STREAM, 0);
    socklen_t len =
        src->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (fd < 0 || bind(fd, (const struct sockaddr *)src, len) < 0) {
        int e = errno;
        char text[INET6_ADDRSTRLEN] = "?";
        const void *a = src->ss_family == AF_INET6
                            ? (const void *)&((const struct sockaddr_in6 *)src)->sin6_addr
                            : (const void *)&((const struct sockaddr_in *)src)->sin_addr;
        inet_ntop(src->ss_family, a, text, sizeof(text));
        die_usage("--source %s: %s", text, strerror(e));
    }
    close(fd);
}

/* --manifest: pages in file order (the most popular first) and their objects. */
struct manifest_read {
    struct dm_load_opts *o;
    struct dm_load_objects *cur;
};

static int
manifest_page(void *arg, const char *host, size_t host_len, const char *path, size_t len)
{
    (void)host;
    (void)host_len;
    struct manifest_read *m = arg;
    struct dm_load_opts *o = m->o;
    char **u = realloc(o->urls, (o->nurls + 1) * sizeof(*u));
    if (u == NULL) {
        return -ENOMEM;
    }
    o->urls = u;
    struct dm_load_objects *ob = realloc(o->objects, (o->nurls + 1) * sizeof(*ob));
    if (ob == NULL) {
        return -ENOMEM;
    }
    o->objects = ob;
    char *copy = len < DM_LOAD_PATH_MAX ? strndup(path, len) : NULL;
    if (copy == NULL) {
        return -ENOMEM;
    }
    o->urls[o->nurls] = copy;
    m->cur = &o->objects[o->nurls++];
    *m->cur = (struct dm_load_objects){ 0 };
    return 0;
}

static int
manifest_object(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
                bool sized, uint64_t bytes)
{
    (void)host;
    (void)sized;
    (void)bytes;
    struct manifest_read *m = arg;
    struct dm_load_objects *ob = m->cur;
    if (host_len > 0 || ob->n >= DM_LOAD_MAX_OBJECTS) {
        return 0; /* another site's, or more than a page load keeps */
    }
    char *p = realloc(ob->paths, ob->used + path_len + 1);
    if (p == NULL) {
        return -ENOMEM;
    }
    memcpy(p + ob->used, path, path_len);
    p[ob->used + path_len] = 0;
    ob->paths = p;
    ob->used += path_len + 1;
    ob->n++;
    return 0;
}

static void
read_manifest(struct dm_load_opts *o, const char *path)
{
    static const struct dm_manifest_cb cb = { .page = manifest_page, .object = manifest_object };
    struct manifest_read m = { .o = o };
    char err[512];
    int r = dm_manifest_read(path, NULL, &cb, &m, err, sizeof(err));
    if (r == -ENOMEM) {
        die_usage("%s: out of memory", path);
    }
    if (r < 0) {
        die_usage("--manifest: %s", err);
    }
    if (o->nurls == 0) {
        die_usage("--manifest: %s: no pages", path);
    }
}

static bool
have_gnuplot(void)
{
    const char *path = getenv("PATH");
    if (path == NULL) {
        return false;
    }
    char buf[4096];
    while (*path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && n + 9 < sizeof(buf)) {
            memcpy(buf, path, n);
            strcpy(buf + n, "/gnuplot");
            if (access(buf, X_OK) == 0) {
                return true;
            }
        }
        path += n + (path[n] == ':');
    }
    return false;
}

struct outputs {
    const char *csv, *json, *plot;
    bool quiet;
};

static void
parse_args(int argc, char **argv, struct dm_load_opts *o, struct outputs *out)
{
    const char *mode = NULL, *pattern = "exp1", *urls = NULL, *url = NULL, *sources = NULL;
    const char *manifest = NULL;
    double max_sessions = -1, scale = 1, ramp = 0;
    bool have_c = false, have_d = false;
    /* The sessions mode's own options: the first one given, refused in the others. */
    static const char *const sessions_only[] = {
        "--pattern",  "--max-sessions",  "--scale",        "--ramp",       "--conns-per-user",
        "--think",    "--session-pages", "--session-time", "--pages",      "--urls",
        "--manifest", "--zipf",          "--no-objects",   "--scan-limit",
    };
    const char *sessions_opt = NULL;
    *o = (struct dm_load_opts){
        .threads = 1,
        .conns = 10,
        .duration_s = 10,
        .timeout_ms = 10000,
        .connect_timeout_ms = 3000,
        .conns_per_user = 6,
        .think_ms = 10000,
        .keepalive_ms = 15000,
        .site_pages = 50,
        .zipf = 1.0,
        .scan = true,
        .bounds = { .good_us = 2000000, .tolerable_us = 4000000 },
        .seed = 1,
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VALUE()                                                                                    \
    do {                                                                                           \
        if (v == NULL) {                                                                           \
            die_usage("%s needs a value", a);                                                      \
        }                                                                                          \
        i++;                                                                                       \
    } while (0)
        for (size_t k = 0; k < sizeof(sessions_only) / sizeof(*sessions_only); k++) {
            if (sessions_opt == NULL && strcmp(a, sessions_only[k]) == 0) {
                sessions_opt = sessions_only[k];
            }
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--mode") == 0) {
            VALUE();
            mode = v;
        } else if (strcmp(a, "--rate") == 0) {
            VALUE();
            o->rate = parse_number(a, v, 0.001, 1e8);
        } else if (strcmp(a, "-c") == 0) {
            VALUE();
            o->conns = (unsigned)parse_count(a, v, 1, 100000);
            have_c = true;
        } else if (strcmp(a, "-d") == 0) {
            VALUE();
            o->duration_s = parse_seconds(a, v);
            /* Measured and reported second by second: 1.5 ran 2 s. */
            if (o->duration_s < 1 || o->duration_s != floor(o->duration_s)) {
                die_usage("-d: whole seconds, at least 1 (the run is measured second by second), "
                          "not \"%s\"",
                          v);
            }
            have_d = true;
        } else if (strcmp(a, "--pattern") == 0) {
            VALUE();
            pattern = v;
        } else if (strcmp(a, "--max-sessions") == 0) {
            VALUE();
            max_sessions = parse_number(a, v, 1, 1000000);
        } else if (strcmp(a, "--scale") == 0) {
            VALUE();
            scale = parse_number(a, v, 0.0001, 1e6);
        } else if (strcmp(a, "--ramp") == 0) {
            VALUE();
            ramp = parse_number(a, v, 0, 1e6);
        } else if (strcmp(a, "--conns-per-user") == 0) {
            VALUE();
            o->conns_per_user = (unsigned)parse_count(a, v, 1, DM_LOAD_MAX_CPU);
        } else if (strcmp(a, "--think") == 0) {
            VALUE();
            o->think_ms = parse_number(a, v, 0, 1e9);
        } else if (strcmp(a, "--session-pages") == 0) {
            VALUE();
            o->session_pages = (unsigned)parse_count(a, v, 0, 1000000000);
        } else if (strcmp(a, "--session-time") == 0) {
            VALUE();
            o->session_s = parse_number(a, v, 0, 1e9);
        } else if (strcmp(a, "--keepalive") == 0) {
            VALUE();
            o->keepalive_ms = (uint64_t)parse_number(a, v, 0, 1e9);
        } else if (strcmp(a, "--pages") == 0) {
            VALUE();
            o->site_pages = (unsigned)parse_count(a, v, 1, 100000);
        } else if (strcmp(a, "--urls") == 0) {
            VALUE();
            urls = v;
        } else if (strcmp(a, "--manifest") == 0) {
            VALUE();
            manifest = v;
        } else if (strcmp(a, "--zipf") == 0) {
            VALUE();
            o->zipf = parse_number(a, v, 0, 10);
        } else if (strcmp(a, "--no-objects") == 0) {
            o->scan = false;
        } else if (strcmp(a, "--scan-limit") == 0) {
            VALUE();
            o->scan_limit = parse_count(a, v, 0, 1000000000000000ull);
        } else if (strcmp(a, "--threads") == 0) {
            VALUE();
            o->threads = (unsigned)parse_count(a, v, 1, 256);
        } else if (strcmp(a, "--timeout") == 0) {
            VALUE();
            o->timeout_ms = (uint64_t)parse_number(a, v, 0, 1e9);
        } else if (strcmp(a, "--connect-timeout") == 0) {
            VALUE();
            o->connect_timeout_ms = (uint64_t)parse_number(a, v, 0, 1e9);
        } else if (strcmp(a, "--good") == 0) {
            VALUE();
            o->bounds.good_us = (uint64_t)(parse_number(a, v, 0.001, 1e9) * 1000);
        } else if (strcmp(a, "--tolerable") == 0) {
            VALUE();
            o->bounds.tolerable_us = (uint64_t)(parse_number(a, v, 0.001, 1e9) * 1000);
        } else if (strcmp(a, "--seed") == 0) {
            VALUE();
            o->seed = parse_count(a, v, 0, 1000000000000000000ull);
        } else if (strcmp(a, "--csv") == 0) {
            VALUE();
            out->csv = v;
        } else if (strcmp(a, "--json") == 0) {
            VALUE();
            out->json = v;
        } else if (strcmp(a, "--plot") == 0) {
            VALUE();
            out->plot = v;
        } else if (strcmp(a, "--source") == 0) {
            VALUE();
            sources = v;
        } else if (strcmp(a, "--quiet") == 0) {
            out->quiet = true;
        } else if (a[0] == '-' && a[1] != 0) {
            die_usage("unknown option %s", a);
        } else if (url == NULL) {
            url = a;
        } else {
            die_usage("one URL only (got %s and %s)", url, a);
        }
#undef VALUE
    }
    if (url == NULL) {
        die_usage("no URL");
    }
    parse_url(o, url);
    if (sources != NULL) {
        parse_sources(o, sources);
        for (unsigned i = 0; i < o->nsources; i++) {
            if (o->sources[i].ss_family != o->addr.ss_family) {
                die_usage("--source: the addresses must be of the URL's family");
            }
            source_check(&o->sources[i]);
        }
    }
    if (mode == NULL) {
        o->mode = o->rate > 0          ? DM_LOAD_RATE
                  : (have_c || have_d) ? DM_LOAD_CLOSED
                                       : DM_LOAD_SESSIONS;
    } else if (strcmp(mode, "sessions") == 0) {
        o->mode = DM_LOAD_SESSIONS;
    } else if (strcmp(mode, "rate") == 0) {
        o->mode = DM_LOAD_RATE;
    } else if (strcmp(mode, "closed") == 0) {
        o->mode = DM_LOAD_CLOSED;
    } else {
        die_usage("--mode: expected sessions, rate or closed, got \"%s\"", mode);
    }
    if (o->mode == DM_LOAD_RATE && o->rate <= 0) {
        die_usage("rate mode needs --rate R");
    }
    /* An option of another mode would be silently ignored. */
    if (o->mode == DM_LOAD_CLOSED && o->rate > 0) {
        die_usage("--rate is the rate mode's: the closed mode sends each request as the last "
                  "is answered (wrk's loop)");
    }
    if (o->mode != DM_LOAD_SESSIONS && sessions_opt != NULL) {
        die_usage("%s is the sessions mode's: the %s mode asks for the URL's path", sessions_opt,
                  o->mode == DM_LOAD_RATE ? "rate" : "closed");
    }
    if (o->mode == DM_LOAD_SESSIONS && (o->rate > 0 || have_c || have_d)) {
        die_usage("%s: the sessions mode follows --pattern",
                  o->rate > 0 ? "--rate is the rate mode's"
                  : have_c    ? "-c is the rate and closed modes'"
                              : "-d is the rate and closed modes'");
    }
    if (o->bounds.tolerable_us < o->bounds.good_us) {
        die_usage("--tolerable must not be below --good");
    }
    if (o->mode != DM_LOAD_SESSIONS && o->conns < o->threads) {
        o->threads = o->conns;
    }
    if (out->plot != NULL && !have_gnuplot()) {
        die_usage("--plot needs gnuplot, which is not installed (apt-get install gnuplot-nox)");
    }
    if (o->mode == DM_LOAD_SESSIONS) {
        char err[512];
        bool builtin = strchr(pattern, '.') == NULL && strchr(pattern, '/') == NULL;
        if (builtin) {
            if (max_sessions < 0) {
                max_sessions = strcmp(pattern, "exp1") == 0   ? 1200
                               : strcmp(pattern, "exp2") == 0 ? 800
                                                              : 100;
            }
            if (dm_load_pattern_builtin(&o->pattern, pattern, max_sessions, err, sizeof(err)) < 0) {
                die_usage("--pattern: %s", err);
            }
        } else if (dm_load_pattern_load(&o->pattern, pattern, err, sizeof(err)) < 0) {
            die_usage("--pattern: %s", err);
        }
        if (ramp > 0) {
            double got = dm_load_pattern_ramp(&o->pattern, ramp);
            if (got < ramp) {
                fprintf(stderr,
                        "dimmer-load: --ramp %g: the pattern's levels leave room for %g s "
                        "ramps at the shortest\n",
                        ramp, got);
            }
        }
        dm_load_pattern_scale(&o->pattern, scale);
        o->duration_s = dm_load_pattern_duration(&o->pattern);
        if (o->duration_s <= 0) {
            die_usage("--pattern: the pattern lasts no time");
        }
        double peak = 0;
        for (size_t i = 0; i < o->pattern.n; i++) {
            peak = o->pattern.sessions[i] > peak ? o->pattern.sessions[i] : peak;
        }
        if (peak > 1000000) {
            die_usage("--pattern: %.0f sessions at the peak, more than 1,000,000 (--max-sessions' "
                      "bound)",
                      peak);
        }
        if (o->duration_s > 86400 * 30) {
            die_usage("--pattern: the pattern lasts %.0f s, more than 30 days", o->duration_s);
        }
        o->max_sessions = ceil(peak);
        if (urls != NULL && manifest != NULL) {
            die_usage("--urls and --manifest: one or the other");
        }
        if (urls != NULL) {
            read_urls(o, urls);
        }
        if (manifest != NULL) {
            read_manifest(o, manifest);
        }
        unsigned n = o->urls != NULL ? o->nurls : o->site_pages;
        o->zipf_cdf = malloc(n * sizeof(double));
        if (o->zipf_cdf == NULL) {
            die_usage("out of memory");
        }
        double sum = 0;
        for (unsigned i = 0; i < n; i++) {
            sum += 1.0 / pow((double)i + 1, o->zipf);
            o->zipf_cdf[i] = sum;
        }
        for (unsigned i = 0; i < n; i++) {
            o->zipf_cdf[i] /= sum;
        }
        o->zipf_cdf[n - 1] = 1.0;
    }
}

/* ---- rate and closed modes ---- */

static void fixed_send(struct dm_load_fixed *f);

static void
fixed_due_cb(uv_timer_t *timer)
{
    fixed_send(timer->data);
}

/* Sends the slot's next request now, or arms its timer for when it is due. */
static void
fixed_next(struct dm_load_fixed *f)
{
    struct dm_load_thread *t = f->t;
    if (t->stopping) {
        return;
    }
    if (t->o->mode == DM_LOAD_CLOSED) {
        fixed_send(f);
        return;
    }
    uint64_t now = dm_load_now_ns();
    if (f->next_due_ns <= now) {
        fixed_send(f);
    } else {
        uint64_t ms = (f->next_due_ns - now + 999999) / 1000000;
        uv_timer_start(&f->due, fixed_due_cb, ms, 0);
    }
}

static void
fixed_done(struct dm_load_conn *lc, const struct dm_load_result *r)
{
    struct dm_load_fixed *f = lc->owner;
    if (f->t->o->mode == DM_LOAD_CLOSED && r->status == 0) {
        /* A failure in the closed loop: pause a little rather than spin. */
        uv_timer_start(&f->due, fixed_due_cb, 10, 0);
        return;
    }
    if (f->sending) {
        /* The request failed before it left (no socket, no source address,
         * no port): the next one goes from the loop, not from this call,
         * which sends it (a rate behind its schedule recursed until the
         * stack ran out). A millisecond on: libuv 1.44 runs a timer of 0 ms
         * started by a timer again in the same pass, which would never end. */
        uv_timer_start(&f->due, fixed_due_cb, 1, 0);
        return;
    }
    fixed_next(f);
}

static void
fixed_send(struct dm_load_fixed *f)
{
    struct dm_load_thread *t = f->t;
    if (t->stopping) {
        return;
    }
    uint64_t due = dm_load_now_ns();
    if (t->o->mode == DM_LOAD_RATE) {
        due = f->next_due_ns;
        f->next_due_ns += (uint64_t)t->interval_ns;
    }
    if (f->lc == NULL && dm_load_conn_get(t, &f->lc, f) == NULL) {
        uv_timer_start(&f->due, fixed_due_cb, 10, 0);
        return;
    }
    f->sending = true;
    dm_load_conn_request(f->lc, t->o->path, strlen(t->o->path), due, NULL, fixed_done);
    f->sending = false;
}

static int
fixed_start(struct dm_load_thread *t, unsigned first, unsigned n)
{
    const struct dm_load_opts *o = t->o;
    t->fixed = calloc(n > 0 ? n : 1, sizeof(*t->fixed));
    if (t->fixed == NULL) {
        return -1;
    }
    t->nfixed = n;
    /* Each connection carries rate / conns requests a second, on a schedule of
     * its own, the connections staggered over one interval. */
    t->interval_ns = o->rate > 0 ? 1e9 * o->conns / o->rate : 0;
    for (unsigned i = 0; i < n; i++) {
        struct dm_load_fixed *f = &t->fixed[i];
        f->t = t;
        f->index = first + i;
        if (uv_timer_init(&t->loop, &f->due) < 0) {
            return -1;
        }
        f->due.data = f;
        f->next_due_ns = t->t0_ns + (uint64_t)(t->interval_ns * f->index / o->conns);
        fixed_next(f);
    }
    return 0;
}

/* ---- load threads ---- */

/* Adds the counts of s (what happened during it) to into. */
static void
sec_add_counts(struct dm_load_sec *into, const struct dm_load_sec *s)
{
    into->responses += s->responses;
    into->bytes += s->bytes;
    for (size_t i = 0; i < sizeof(into->by_class) / sizeof(*into->by_class); i++) {
        into->by_class[i] += s->by_class[i];
    }
    dm_score_counts_merge(&into->score, &s->score);
    dm_score_counts_merge(&into->pages, &s->pages);
    dm_hist_merge(&into->hist, &s->hist);
    into->sessions_started += s->sessions_started;
    into->sessions_ended += s->sessions_ended;
    into->connects += s->connects;
    into->unanswered += s->unanswered;
    if (s->unanswered_oldest_us > into->unanswered_oldest_us) {
        into->unanswered_oldest_us = s->unanswered_oldest_us;
    }
}

/* One thread's second into the whole run's: its counts and its levels. */
static void
sec_merge(struct dm_load_sec *into, const struct dm_load_sec *s)
{
    sec_add_counts(into, s);
    into->active += s->active;
    into->thinking += s->thinking;
    into->open += s->open;
    into->target += s->target;
}

static void
publish(struct dm_load_thread *t)
{
    struct dm_load_slot *slot = &t->slots[t->sec % DM_LOAD_SLOTS];
    t->cur.active = t->active;
    t->cur.thinking = t->thinking;
    t->cur.open = t->open;
    t->cur.target = t->target;
    /* Marked as no second while it is written: the main thread, were it
     * DM_LOAD_SLOTS seconds late and reading this slot, sees a change
     * (merge_second), never a mix of two seconds taken for one. */
    atomic_store_explicit(&slot->published, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    slot->s = t->cur;
    atomic_store_explicit(&slot->published, t->sec + 1, memory_order_release);
    sec_add_counts(&t->total, &t->cur); /* the run's totals: counts only */
    memset(&t->cur, 0, sizeof(t->cur)); /* an all-zero histogram is empty */
    t->sec++;
}

static void
close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h)) {
        uv_close(h, NULL);
    }
}

static void
thread_stop(struct dm_load_thread *t)
{
    t->stopping = true;
    close_handle((uv_handle_t *)&t->sec_timer);
    close_handle((uv_handle_t *)&t->sched);
    if (t->o->mode == DM_LOAD_SESSIONS) {
        dm_load_sessions_stop(t);
    }
    for (unsigned i = 0; i < t->nfixed; i++) {
        if (t->fixed[i].lc != NULL) {
            dm_load_conn_close(t->fixed[i].lc);
        }
        close_handle((uv_handle_t *)&t->fixed[i].due);
    }
}

/*
 * The run ends: the requests due and not answered go into its last second,
 * not scored (their latency is not known) but counted, so that a server that
 * stopped answering does not look like one that was only asked less.
 */
static void
count_unanswered(struct dm_load_thread *t, uint64_t now)
{
    if (t->o->mode == DM_LOAD_SESSIONS) {
        dm_load_sessions_unanswered(t, now);
    }
    for (unsigned i = 0; i < t->nfixed; i++) {
        struct dm_load_fixed *f = &t->fixed[i];
        if (f->lc != NULL) {
            dm_load_conn_unanswered(f->lc, now);
        }
        uint64_t step = (uint64_t)t->interval_ns;
        if (t->o->mode != DM_LOAD_RATE || step == 0 || f->next_due_ns > now) {
            continue;
        }
        /* Rate mode: those due while the connection was busy, not sent. */
        dm_load_unanswered(t, f->next_due_ns, now);
        t->cur.unanswered += (now - f->next_due_ns) / step;
    }
}

static void
sec_cb(uv_timer_t *timer)
{
    struct dm_load_thread *t = timer->data;
    uint64_t now = dm_load_now_ns();
    /* Publish every second that has ended (one, unless the loop was late). */
    while (now >= t->t0_ns + (t->sec + 1) * 1000000000ull) {
        uint64_t s = t->sec;
        bool last = s + 1 >= atomic_load(t->stop_sec);
        if (last) {
            count_unanswered(t, now);
        }
        publish(t);
        if (last) {
            thread_stop(t);
            return;
        }
    }
    uint64_t next = t->t0_ns + (t->sec + 1) * 1000000000ull;
    uv_timer_start(&t->sec_timer, sec_cb, (next - now + 999999) / 1000000, 0);
}

static void
sched_cb(uv_timer_t *timer)
{
    struct dm_load_thread *t = timer->data;
    uint64_t now = dm_load_now_ns();
    dm_load_sessions_sched(t, (double)(now - t->t0_ns) / 1e9);
}

static void
thread_main(void *arg)
{
    struct dm_load_thread *t = arg;
    uv_run(&t->loop, UV_RUN_DEFAULT);
}

static int
thread_init(struct dm_load_thread *t, unsigned id, const struct dm_load_opts *o, uint64_t t0)
{
    t->id = id;
    t->o = o;
    t->t0_ns = t0;
    t->stop_sec = &stop_sec;
    dm_rng_init(&t->rng, o->seed * 0x9e3779b97f4a7c15ULL + id);
    t->head_tail_len = (size_t)snprintf(t->head_tail, sizeof(t->head_tail),
                                        " HTTP/1.1\r\nHost: %s\r\nUser-Agent: dimmer-load\r\n"
                                        "Accept: */*\r\n\r\n",
                                        o->host);
    if (uv_loop_init(&t->loop) < 0) {
        return -1;
    }
    if (uv_timer_init(&t->loop, &t->sec_timer) < 0 || uv_timer_init(&t->loop, &t->sched) < 0) {
        return -1;
    }
    t->sec_timer.data = t;
    t->sched.data = t;
    uv_timer_start(&t->sec_timer, sec_cb, 1000, 0);
    if (o->mode == DM_LOAD_SESSIONS) {
        t->max_sessions = (unsigned)ceil(o->max_sessions / o->threads) + 1;
        if (dm_load_sessions_init(t) < 0) {
            return -1;
        }
        uv_timer_start(&t->sched, sched_cb, 0, DM_LOAD_SCHED_MS);
        return 0;
    }
    /* Connections split as evenly as they go: thread i gets the i-th of each T. */
    unsigned n = o->conns / o->threads + (id < o->conns % o->threads ? 1 : 0);
    unsigned first =
        id * (o->conns / o->threads) + (id < o->conns % o->threads ? id : o->conns % o->threads);
    return fixed_start(t, first, n);
}

/* ---- gathering and output ---- */

static double
pct(uint64_t part, uint64_t whole)
{
    return whole > 0 ? 100.0 * (double)part / (double)whole : 0;
}

static uint64_t
score_total(const struct dm_score_counts *c)
{
    return c->good + c->tolerable + c->fail;
}

static void
live_line(FILE *f, bool tty, const struct dm_load_opts *o, uint64_t sec,
          const struct dm_load_sec *m)
{
    char line[320];
    int n = snprintf(line, sizeof(line), "%5llus", (unsigned long long)sec + 1);
    if (o->mode == DM_LOAD_SESSIONS) {
        n += snprintf(line + n, sizeof(line) - (size_t)n, "  target %5.0f  active %5llu", m->target,
                      (unsigned long long)m->active);
    }
    uint64_t tot = score_total(&m->score);
    snprintf(line + n, sizeof(line) - (size_t)n,
             "  %7llu req/s  good %5.1f%%  tol %5.1f%%  fail %5.1f%%  p50 %7.2f ms  p99 %8.2f ms",
             (unsigned long long)m->responses, pct(m->score.good, tot),
             pct(m->score.tolerable, tot), pct(m->score.fail, tot),
             (double)dm_hist_quantile(&m->hist, 0.5) / 1000.0,
             (double)dm_hist_quantile(&m->hist, 0.99) / 1000.0);
    if (tty) {
        fprintf(f, "\r\033[K%s", line);
    } else {
        fprintf(f, "%s\n", line);
    }
    fflush(f);
}

static void
csv_header(FILE *f)
{
    fprintf(f, "second,target_sessions,active_sessions,thinking_sessions,responses,good,tolerable,"
               "fail,pages,pages_good,pages_tolerable,pages_fail,bytes,p50_ms,p99_ms,"
               "connections,connects\n");
}

static void
csv_row(FILE *f, uint64_t sec, const struct dm_load_sec *m)
{
    fprintf(
        f, "%llu,%.1f,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%.3f,%.3f,%llu,%llu\n",
        (unsigned long long)sec + 1, m->target, (unsigned long long)m->active,
        (unsigned long long)m->thinking, (unsigned long long)m->responses,
        (unsigned long long)m->score.good, (unsigned long long)m->score.tolerable,
        (unsigned long long)m->score.fail, (unsigned long long)score_total(&m->pages),
        (unsigned long long)m->pages.good, (unsigned long long)m->pages.tolerable,
        (unsigned long long)m->pages.fail, (unsigned long long)m->bytes,
        (double)dm_hist_quantile(&m->hist, 0.5) / 1000.0,
        (double)dm_hist_quantile(&m->hist, 0.99) / 1000.0, (unsigned long long)m->open,
        (unsigned long long)m->connects);
    fflush(f);
}

static void
json_scores(FILE *f, const struct dm_score_counts *c)
{
    uint64_t tot = score_total(c);
    fprintf(f,
            "{\"total\":%llu,\"good\":%llu,\"tolerable\":%llu,\"fail\":%llu,"
            "\"good_pct\":%.3f,\"tolerable_pct\":%.3f,\"fail_pct\":%.3f,\"fail_by_kind\":{",
            (unsigned long long)tot, (unsigned long long)c->good, (unsigned long long)c->tolerable,
            (unsigned long long)c->fail, pct(c->good, tot), pct(c->tolerable, tot),
            pct(c->fail, tot));
    for (int k = 0; k < DM_FAIL_KINDS; k++) {
        fprintf(f, "%s\"%s\":%llu", k ? "," : "", dm_fail_kind_name((enum dm_fail_kind)k),
                (unsigned long long)c->by_kind[k]);
    }
    fprintf(f, "}}");
}

static const char *
mode_name(enum dm_load_mode m)
{
    return m == DM_LOAD_RATE ? "rate" : m == DM_LOAD_CLOSED ? "closed" : "sessions";
}

/*
 * Whether path can be written: the file if it is there, else its folder
 * (errno says why not). Asked before the run, so that a bad path fails at
 * once; the file itself is written after it, so that a run cut short
 * leaves a summary already there as it was.
 */
static bool
writable(const char *path)
{
    if (access(path, W_OK) == 0) {
        return true;
    }
    if (errno != ENOENT) {
        return false;
    }
    char *dir = strdup(path);
    if (dir == NULL) {
        return false;
    }
    char *slash = strrchr(dir, '/');
    const char *d = slash == NULL ? "." : slash == dir ? "/" : (*slash = 0, dir);
    bool ok = access(d, W_OK | X_OK) == 0;
    free(dir);
    return ok;
}

static int
write_json(const char *path, const struct dm_load_opts *o, double secs, const struct dm_load_sec *t)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        return -1;
    }
    const struct dm_hist *h = &t->hist;
    fprintf(f, "{\"mode\":\"%s\",\"seconds\":%.3f,\"threads\":%u,", mode_name(o->mode), secs,
            o->threads);
    if (o->mode == DM_LOAD_RATE) {
        fprintf(f, "\"rate\":%.3f,", o->rate);
    }
    fprintf(f, "\"responses\":%llu,\"responses_per_s\":%.3f,\"bytes\":%llu,\"connects\":%llu,",
            (unsigned long long)t->responses, secs > 0 ? (double)t->responses / secs : 0,
            (unsigned long long)t->bytes, (unsigned long long)t->connects);
    fprintf(f, "\"sessions_started\":%llu,\"sessions_ended\":%llu,",
            (unsigned long long)t->sessions_started, (unsigned long long)t->sessions_ended);
    fprintf(f, "\"unanswered\":%llu,\"unanswered_oldest_ms\":%.3f,",
            (unsigned long long)t->unanswered, (double)t->unanswered_oldest_us / 1000.0);
    fprintf(f, "\"status\":{");
    for (unsigned c = 1; c <= 5; c++) {
        fprintf(f, "%s\"%uxx\":%llu", c > 1 ? "," : "", c, (unsigned long long)t->by_class[c]);
    }
    fprintf(f, "},\"score\":");
    json_scores(f, &t->score);
    fprintf(f, ",\"pages\":");
    json_scores(f, &t->pages);
    fprintf(f,
            ",\"latency_ms\":{\"count\":%llu,\"mean\":%.3f,\"p50\":%.3f,\"p90\":%.3f,"
            "\"p99\":%.3f,\"p99_9\":%.3f,\"max\":%.3f},",
            (unsigned long long)h->count, dm_hist_mean(h) / 1000.0,
            (double)dm_hist_quantile(h, 0.5) / 1000.0, (double)dm_hist_quantile(h, 0.9) / 1000.0,
            (double)dm_hist_quantile(h, 0.99) / 1000.0, (double)dm_hist_quantile(h, 0.999) / 1000.0,
            (double)dm_hist_quantile(h, 1.0) / 1000.0);
    fprintf(f, "\"bounds_ms\":{\"good\":%.3f,\"tolerable\":%.3f}}\n",
            (double)o->bounds.good_us / 1000.0, (double)o->bounds.tolerable_us / 1000.0);
    return fclose(f) == 0 ? 0 : -1;
}

/* Runs gnuplot on the timeline CSV; returns 0, or -1 after saying why. */
static int
plot(const char *png, const char *csv, const struct dm_load_opts *o)
{
    FILE *g = popen("gnuplot", "w");
    if (g == NULL) {
        fprintf(stderr, "dimmer-load: cannot run gnuplot: %s\n", strerror(errno));
        return -1;
    }
    fprintf(g,
            "set terminal pngcairo size 1200,800 noenhanced\n"
            "set output '%s'\n"
            "set datafile separator ','\n"
            "set key top left\n"
            "set multiplot layout 2,1 title 'dimmer-load, %s mode'\n"
            "set ylabel 'sessions'\n"
            "plot '%s' using 1:2 skip 1 with lines lw 2 title 'offered (target)', "
            "'' using 1:3 skip 1 with lines lw 2 title 'served (active)'\n"
            "set xlabel 'seconds'\n"
            "set ylabel 'responses per second'\n"
            "plot '%s' using 1:6 skip 1 with lines lw 2 lc rgb '#2ca02c' title 'good', "
            "'' using 1:7 skip 1 with lines lw 2 lc rgb '#ff7f0e' title 'tolerable', "
            "'' using 1:8 skip 1 with lines lw 2 lc rgb '#d62728' title 'fail'\n"
            "unset multiplot\n",
            png, mode_name(o->mode), csv, csv);
    int st = pclose(g);
    if (st != 0) {
        fprintf(stderr, "dimmer-load: gnuplot failed (status %d) drawing %s\n", st, png);
        return -1;
    }
    return 0;
}

/*
 * Second s of every thread merged into m: 1; 0 when a thread has not
 * published it yet; -1 when one has published past it, over its slot (the
 * main thread was DM_LOAD_SLOTS seconds late: its output was not read), or
 * while it was read.
 */
static int
merge_second(struct dm_load_thread *ts, unsigned n, uint64_t s, struct dm_load_sec *m)
{
    for (unsigned i = 0; i < n; i++) {
        uint64_t p =
            atomic_load_explicit(&ts[i].slots[s % DM_LOAD_SLOTS].published, memory_order_acquire);
        if (p < s + 1) {
            return 0;
        }
        if (p > s + 1) {
            return -1;
        }
    }
    memset(m, 0, sizeof(*m));
    for (unsigned i = 0; i < n; i++) {
        sec_merge(m, &ts[i].slots[s % DM_LOAD_SLOTS].s);
    }
    atomic_thread_fence(memory_order_acquire);
    for (unsigned i = 0; i < n; i++) {
        if (atomic_load_explicit(&ts[i].slots[s % DM_LOAD_SLOTS].published, memory_order_relaxed) !=
            s + 1) {
            return -1;
        }
    }
    return 1;
}

/* Prints and writes second s (merged in m), or says it was lost. */
static void
second_out(const struct dm_load_opts *o, const struct outputs *out, bool tty, FILE *csv, uint64_t s,
           int got, const struct dm_load_sec *m)
{
    if (got < 0) {
        fprintf(stderr,
                "%sdimmer-load: second %llu lost: the output was not read for %d s (its "
                "counts are in the totals)\n",
                tty ? "\n" : "", (unsigned long long)s + 1, DM_LOAD_SLOTS);
        return;
    }
    if (!out->quiet) {
        live_line(stdout, tty, o, s, m);
    }
    if (csv != NULL) {
        csv_row(csv, s, m);
    }
}

static void
on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_sec, 0); /* every thread stops at its next second */
}

static void
raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int
main(int argc, char **argv)
{
    struct dm_load_opts o;
    struct outputs out = { 0 };
    parse_args(argc, argv, &o, &out);
    raise_fd_limit();
    signal(SIGPIPE, SIG_IGN);
    char tmp_csv[] = "/tmp/dimmer-load-XXXXXX";
    const char *csv_path = out.csv;
    if (out.plot != NULL && csv_path == NULL) {
        int fd = mkstemp(tmp_csv);
        if (fd < 0) {
            fprintf(stderr, "dimmer-load: cannot make a temporary file: %s\n", strerror(errno));
            return 1;
        }
        close(fd);
        csv_path = tmp_csv;
    }
    FILE *csv = NULL;
    if (csv_path != NULL && (csv = fopen(csv_path, "w")) == NULL) {
        fprintf(stderr, "dimmer-load: %s: %s\n", csv_path, strerror(errno));
        return EXIT_USAGE;
    }
    if (csv != NULL) {
        csv_header(csv);
    }
    if (out.json != NULL && !writable(out.json)) {
        fprintf(stderr, "dimmer-load: %s: %s\n", out.json, strerror(errno));
        if (csv != NULL) {
            fclose(csv);
        }
        if (csv_path == tmp_csv) {
            unlink(tmp_csv);
        }
        return EXIT_USAGE;
    }
    uint64_t nsec = (uint64_t)ceil(o.duration_s - 1e-9);
    atomic_store(&stop_sec, nsec);
    struct dm_load_thread *ts = calloc(o.threads, sizeof(*ts));
    if (ts == NULL) {
        fprintf(stderr, "dimmer-load: out of memory\n");
        return 1;
    }
    uint64_t t0 = dm_load_now_ns();
    for (unsigned i = 0; i < o.threads; i++) {
        if (thread_init(&ts[i], i, &o, t0) < 0) {
            fprintf(stderr, "dimmer-load: cannot start thread %u: out of memory\n", i);
            return 1;
        }
    }
    for (unsigned i = 0; i < o.threads; i++) {
        if (uv_thread_create(&ts[i].thread, thread_main, &ts[i]) < 0) {
            fprintf(stderr, "dimmer-load: cannot start thread %u\n", i);
            return 1;
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    bool tty = isatty(STDOUT_FILENO) && !out.quiet;
    struct dm_load_sec *m = malloc(sizeof(*m));
    if (m == NULL) {
        return 1;
    }
    uint64_t secs = 0;
    for (uint64_t s = 0;; s++) {
        /* Wait until every thread has published second s (or stopped). */
        int got;
        while ((got = merge_second(ts, o.threads, s, m)) == 0 && s < atomic_load(&stop_sec)) {
            usleep(5000);
        }
        if (got == 0) {
            break; /* stopped (a signal) before the threads ended second s */
        }
        secs = s + 1;
        second_out(&o, &out, tty, csv, s, got, m);
        if (secs >= atomic_load(&stop_sec)) {
            break;
        }
    }
    /* Every thread stops by itself once it has published the last second. */
    for (unsigned i = 0; i < o.threads; i++) {
        uv_thread_join(&ts[i].thread);
    }
    /* After a signal, the seconds the threads ended meanwhile (their totals
     * count them: the rate is over all of them). */
    for (int got; (got = merge_second(ts, o.threads, secs, m)) != 0;) {
        second_out(&o, &out, tty, csv, secs, got, m);
        secs++;
    }
    if (tty) {
        printf("\n");
    }
    memset(m, 0, sizeof(*m));
    for (unsigned i = 0; i < o.threads; i++) {
        sec_add_counts(m, &ts[i].total);
    }
    const struct dm_hist *h = &m->hist;
    uint64_t tot = score_total(&m->score);
    printf("%llu responses in %llu s, %.1f/s, %.1f MB; good %.2f%%, tolerable %.2f%%, fail "
           "%.2f%%\n",
           (unsigned long long)m->responses, (unsigned long long)secs,
           secs > 0 ? (double)m->responses / (double)secs : 0, (double)m->bytes / 1e6,
           pct(m->score.good, tot), pct(m->score.tolerable, tot), pct(m->score.fail, tot));
    printf("latency ms: p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n",
           (double)dm_hist_quantile(h, 0.5) / 1000.0, (double)dm_hist_quantile(h, 0.9) / 1000.0,
           (double)dm_hist_quantile(h, 0.99) / 1000.0, (double)dm_hist_quantile(h, 0.999) / 1000.0,
           (double)dm_hist_quantile(h, 1.0) / 1000.0);
    if (m->score.fail > 0) {
        printf("failures:");
        for (int k = 0; k < DM_FAIL_KINDS; k++) {
            if (m->score.by_kind[k] > 0) {
                printf(" %s %llu", dm_fail_kind_name((enum dm_fail_kind)k),
                       (unsigned long long)m->score.by_kind[k]);
            }
        }
        printf("\n");
    }
    if (m->by_class[1] + m->by_class[4] + m->by_class[5] > 0) {
        /* As wrk says: a 404 or a 429 is scored by its time, as any answer. */
        printf("non-2xx/3xx responses:");
        for (unsigned c = 1; c <= 5; c++) {
            if (c != 2 && c != 3 && m->by_class[c] > 0) {
                printf(" %uxx %llu", c, (unsigned long long)m->by_class[c]);
            }
        }
        printf("\n");
    }
    if (m->unanswered > 0) {
        printf("unanswered at the end: %llu request%s, the oldest due %.3f s before\n",
               (unsigned long long)m->unanswered, m->unanswered == 1 ? "" : "s",
               (double)m->unanswered_oldest_us / 1e6);
    }
    if (o.mode == DM_LOAD_SESSIONS) {
        uint64_t pt = score_total(&m->pages);
        printf("pages: %llu; good %.2f%%, tolerable %.2f%%, fail %.2f%%; sessions started %llu\n",
               (unsigned long long)pt, pct(m->pages.good, pt), pct(m->pages.tolerable, pt),
               pct(m->pages.fail, pt), (unsigned long long)m->sessions_started);
    }
    fflush(stdout);
    int rc = 0;
    if (csv != NULL && fclose(csv) != 0) {
        fprintf(stderr, "dimmer-load: %s: %s\n", csv_path, strerror(errno));
        rc = 1;
    }
    if (out.json != NULL && write_json(out.json, &o, (double)secs, m) < 0) {
        fprintf(stderr, "dimmer-load: %s: %s\n", out.json, strerror(errno));
        rc = 1;
    }
    if (out.plot != NULL && plot(out.plot, csv_path, &o) < 0) {
        rc = 1;
    }
    if (csv_path == tmp_csv) {
        unlink(tmp_csv);
    }
    for (unsigned i = 0; i < o.threads; i++) {
        uv_loop_close(&ts[i].loop);
        dm_load_sessions_fini(&ts[i]);
        while (ts[i].free_conns != NULL) {
            struct dm_load_conn *lc = ts[i].free_conns;
            ts[i].free_conns = lc->next_free;
            free(lc);
        }
        free(ts[i].fixed);
    }
    free(ts);
    free(m);
    free(o.zipf_cdf);
    for (unsigned i = 0; i < o.nurls; i++) {
        free(o.urls[i]);
    }
    free(o.urls);
    for (unsigned i = 0; o.objects != NULL && i < o.nurls; i++) {
        free(o.objects[i].paths);
    }
    free(o.objects);
    free(o.sources);
    dm_load_pattern_fini(&o.pattern);
    return rc;
}
