/*
 * dimmer-tlsload: TLS handshakes per second against a server on 127.0.0.1, for bench/tls.sh.
 *
 * It keeps --conns connection slots busy for --duration seconds. A slot connects over TCP,
 * does the TLS handshake (ALPN http/1.1 offered, SNI if --sni), sends one GET with
 * "Connection: close", reads the whole response, sends close_notify and closes, then starts
 * over. One thread, one epoll set, nonblocking sockets and OpenSSL's own state machine.
 *
 * --mode new offers no session, so every handshake is a full one. --mode resume keeps, per
 * slot, the session of the slot's first full handshake (a TLS 1.3 ticket or the TLS 1.2
 * session the server issued) and offers it on every later connection of that slot; whether
 * the server took it is read from SSL_session_reused() and counted, and a run where it did
 * not is reported as such on stderr and in the exit status. When the server refuses the
 * session, the slot keeps the one of that new full handshake instead, so one refusal does
 * not turn the rest of the run into full handshakes. --reuse latest offers the newest
 * ticket instead, as a browser would.
 *
 * Figures count completions inside the window only: a slot still under way at the end is
 * dropped. The tool's own CPU share is reported too: near 100 %, the client, not the server,
 * bounds the figure.
 *
 * Exit status: 0, 1 on bad usage or setup, 2 if no response completed, 3 if --mode resume
 * resumed less than 90 % of the sessions offered.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#define HEAD_MAX      8192
#define READ_BUF      16384
#define MAX_CONNS     10000
#define MAX_EVENTS    256
#define READS_PER_RUN 64 /* SSL_read calls per wakeup, so one slot cannot starve the others */
#define RETRY_US      (10 * 1000) /* a slot that failed waits this long before it reconnects */
#define SCAN_US       (5 * 1000)  /* how often deadlines are checked */
#define MIN_RESUMED   0.9         /* below this share of offered sessions, exit status 3 */

enum state { ST_WAIT, ST_CONNECTING, ST_HANDSHAKE, ST_WRITING, ST_READING };

enum fail_kind { F_CONNECT, F_TLS, F_IO, F_HTTP, F_TIMEOUT, F_KINDS };

static const char *const fail_names[F_KINDS] = { "connect", "tls", "io", "http", "timeout" };

struct opts {
    int port;
    int conns;
    double duration_s;
    long count; /* stop after this many responses; 0: run for duration_s */
    bool resume;
    bool reuse_latest;
    int tls_version; /* 0: whatever the two sides agree on */
    const char *sni;
    const char *cafile;
    const char *path;
    int timeout_ms;
    bool json;
};

struct stats {
    uint64_t handshakes;
    uint64_t resumed;
    uint64_t offered; /* handshakes where a session was offered */
    uint64_t responses;
    uint64_t body_bytes;
    uint64_t fails[F_KINDS];
};

struct load;

struct slot {
    struct load *ld;
    int fd;
    enum state st;
    uint32_t events; /* epoll interest now registered for fd */
    SSL *ssl;
    SSL_SESSION *sess; /* resume mode: what this slot offers next */
    uint64_t deadline_us;
    bool head_done;
    size_t head_len;
    long long body_left; /* -1: the body ends at EOF */
    char head[HEAD_MAX];
};

struct load {
    struct opts o;
    SSL_CTX *ctx;
    int ep;
    struct slot *slots;
    struct stats st;
    bool counting; /* false once the window is over */
    char req[1024];
    int req_len;
    char first_fail[F_KINDS][200];
    /* What the first completed handshake negotiated, to check the peers are alike. */
    bool have_params;
    char protocol[16];
    char cipher[64];
    char group[32];
    char alpn[32];
    char cert[32];
};

static uint64_t
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t
cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static void
set_interest(struct slot *s, uint32_t events)
{
    if (s->events == events) {
        return;
    }
    struct epoll_event ev = { .events = events, .data.ptr = s };
    if (epoll_ctl(s->ld->ep, EPOLL_CTL_MOD, s->fd, &ev) == 0) {
        s->events = events;
    }
}

/* Ends the slot's connection; the slot waits in ST_WAIT until ready_us. */
static void
slot_close(struct slot *s, uint64_t ready_us)
{
    if (s->ssl) {
        SSL_free(s->ssl);
        s->ssl = NULL;
    }
    if (s->fd >= 0) {
        close(s->fd); /* also takes it out of the epoll set */
        s->fd = -1;
    }
    s->st = ST_WAIT;
    s->deadline_us = ready_us;
}

static void
slot_fail(struct slot *s, enum fail_kind kind, const char *what)
{
    struct load *ld = s->ld;
    if (ld->counting) {
        ld->st.fails[kind]++;
        if (ld->first_fail[kind][0] == '\0') {
            char detail[120] = "";
            unsigned long e = ERR_peek_error();
            if (e != 0) {
                ERR_error_string_n(e, detail, sizeof(detail));
            } else if (errno != 0) {
                snprintf(detail, sizeof(detail), "%s", strerror(errno));
            }
            snprintf(ld->first_fail[kind], sizeof(ld->first_fail[kind]), "%s%s%s", what,
                     detail[0] ? ": " : "", detail);
        }
    }
    ERR_clear_error();
    slot_close(s, now_us() + RETRY_US);
}

static void
slot_start(struct slot *s)
{
    struct load *ld = s->ld;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)ld->o.port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    errno = 0;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->fd < 0) {
        slot_fail(s, F_CONNECT, "socket");
        return;
    }
    int one = 1;
    setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(s->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        slot_fail(s, F_CONNECT, "connect");
        return;
    }
    /* Even a connect that is done at once goes through EPOLLOUT, which fires at once. */
    struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = s };
    if (epoll_ctl(ld->ep, EPOLL_CTL_ADD, s->fd, &ev) != 0) {
        slot_fail(s, F_CONNECT, "epoll_ctl");
        return;
    }
    s->events = EPOLLOUT;
    s->st = ST_CONNECTING;
    s->head_done = false;
    s->head_len = 0;
    s->body_left = -1;
    s->deadline_us = now_us() + (uint64_t)ld->o.timeout_ms * 1000u;
}

/* Waits for what OpenSSL asked for; false if r was an error, not a wait. */
static bool
tls_wait(struct slot *s, int r)
{
    switch (SSL_get_error(s->ssl, r)) {
    case SSL_ERROR_WANT_READ:
        set_interest(s, EPOLLIN);
        return true;
    case SSL_ERROR_WANT_WRITE:
        set_interest(s, EPOLLOUT);
        return true;
    default:
        return false;
    }
}

static int
tls_begin(struct slot *s)
{
    struct load *ld = s->ld;
    s->ssl = SSL_new(ld->ctx);
    if (!s->ssl || !SSL_set_fd(s->ssl, s->fd)) {
        return -1;
    }
    SSL_set_app_data(s->ssl, s);
    SSL_set_connect_state(s->ssl);
    if (ld->o.sni && !SSL_set_tlsext_host_name(s->ssl, ld->o.sni)) {
        return -1;
    }
    if (ld->o.cafile && !SSL_set1_host(s->ssl, ld->o.sni ? ld->o.sni : "localhost")) {
        return -1;
    }
    if (s->sess) {
        if (!SSL_set_session(s->ssl, s->sess)) {
            return -1;
        }
        if (ld->counting) {
            ld->st.offered++;
        }
    }
    return 0;
}

static void
group_name(SSL *ssl, char *out, size_t size)
{
    int nid = SSL_get_negotiated_group(ssl);
    const char *sn = nid > 0 ? OBJ_nid2sn(nid & ~TLSEXT_nid_unknown) : NULL;
    snprintf(out, size, "%s", (nid & TLSEXT_nid_unknown) || !sn ? "?" : sn);
}

static void
note_params(struct load *ld, SSL *ssl)
{
    const unsigned char *alpn = NULL;
    unsigned int alpn_len = 0;
    ld->have_params = true;
    snprintf(ld->protocol, sizeof(ld->protocol), "%s", SSL_get_version(ssl));
    snprintf(ld->cipher, sizeof(ld->cipher), "%s", SSL_get_cipher_name(ssl));
    group_name(ssl, ld->group, sizeof(ld->group));
    SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
    snprintf(ld->alpn, sizeof(ld->alpn), "%.*s", alpn_len ? (int)alpn_len : 4,
             alpn_len ? (const char *)alpn : "none");
    X509 *peer = SSL_get1_peer_certificate(ssl);
    EVP_PKEY *key = peer ? X509_get0_pubkey(peer) : NULL;
    if (key) {
        int id = EVP_PKEY_get_base_id(key);
        snprintf(ld->cert, sizeof(ld->cert), "%s-%d",
                 id == EVP_PKEY_EC    ? "ecdsa"
                 : id == EVP_PKEY_RSA ? "rsa"
                                      : "other",
                 EVP_PKEY_get_bits(key));
    } else {
        snprintf(ld->cert, sizeof(ld->cert), "none");
    }
    X509_free(peer);
}

static void
handshake_done(struct slot *s)
{
    struct load *ld = s->ld;
    bool reused = SSL_session_reused(s->ssl);
    if (ld->counting) {
        ld->st.handshakes++;
        ld->st.resumed += reused;
    }
    if (!ld->have_params && !reused) {
        note_params(ld, s->ssl);
    }
    if (!ld->o.resume || reused) {
        return;
    }
    /* A full handshake: keep its session. TLS 1.2 has it now; TLS 1.3 sends tickets after
     * the handshake, and on_new_session() stores the first of them. */
    SSL_SESSION_free(s->sess);
    s->sess = NULL;
    SSL_SESSION *cur = SSL_get1_session(s->ssl);
    if (cur && SSL_SESSION_is_resumable(cur)) {
        s->sess = cur;
    } else {
        SSL_SESSION_free(cur);
    }
}

/* OpenSSL calls this for each session the server issues; taking it returns 1. */
static int
on_new_session(SSL *ssl, SSL_SESSION *sess)
{
    struct slot *s = SSL_get_app_data(ssl);
    if (s->sess && !s->ld->o.reuse_latest) {
        return 0;
    }
    SSL_SESSION_free(s->sess);
    s->sess = sess;
    return 1;
}

/* Parses the status line and Content-Length once the head is complete; <0 if malformed. */
static int
parse_head(struct slot *s, const char *end)
{
    const char *p = s->head;
    if (end - p < 12 || strncmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ') {
        return -1;
    }
    if (strncmp(p + 9, "200", 3) != 0) {
        return -2;
    }
    s->body_left = -1;
    for (const char *line = memchr(p, '\n', (size_t)(end - p)); line && line < end;) {
        line++;
        static const char cl[] = "content-length:";
        if (end - line > (long)sizeof(cl) && strncasecmp(line, cl, sizeof(cl) - 1) == 0) {
            s->body_left = strtoll(line + sizeof(cl) - 1, NULL, 10);
            if (s->body_left < 0) {
                return -1;
            }
        }
        line = memchr(line, '\n', (size_t)(end - line));
    }
    return 0;
}

/* Takes n bytes of the response; returns 1 when it is complete, 0 for more, <0 if bad. */
static int
feed(struct slot *s, const char *p, size_t n)
{
    if (!s->head_done) {
        size_t room = HEAD_MAX - 1 - s->head_len;
        size_t take = n < room ? n : room;
        memcpy(s->head + s->head_len, p, take);
        s->head_len += take;
        s->head[s->head_len] = '\0';
        char *end = strstr(s->head, "\r\n\r\n");
        if (!end) {
            return s->head_len == HEAD_MAX - 1 ? -1 : 0;
        }
        end += 4;
        int r = parse_head(s, end);
        if (r < 0) {
            return r;
        }
        s->head_done = true;
        /* What came after the head in this read is body. */
        size_t body = (size_t)(s->head + s->head_len - end) + (n - take);
        n = body;
    }
    s->ld->st.body_bytes += n;
    if (s->body_left < 0) {
        return 0;
    }
    s->body_left -= (long long)n < s->body_left ? (long long)n : s->body_left;
    return s->body_left == 0;
}

static void
response_done(struct slot *s)
{
    struct load *ld = s->ld;
    if (ld->counting) {
        ld->st.responses++;
    }
    /* One close_notify, not waited for: the server has said Connection: close. */
    SSL_shutdown(s->ssl);
    ERR_clear_error();
    slot_close(s, 0);
    if (ld->counting) {
        slot_start(s);
    }
}

static void
slot_read(struct slot *s)
{
    static char buf[READ_BUF];
    for (int i = 0; i < READS_PER_RUN; i++) {
        int r = SSL_read(s->ssl, buf, sizeof(buf));
        if (r > 0) {
            int done = feed(s, buf, (size_t)r);
            if (done < 0) {
                slot_fail(s, F_HTTP, done == -2 ? "status not 200" : "malformed response");
                return;
            }
            if (done) {
                response_done(s);
                return;
            }
            continue;
        }
        int e = SSL_get_error(s->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            tls_wait(s, r);
            return;
        }
        /* With SSL_OP_IGNORE_UNEXPECTED_EOF a bare TCP close also reads as ZERO_RETURN. */
        if (e == SSL_ERROR_ZERO_RETURN && s->head_done && s->body_left < 0) {
            response_done(s);
            return;
        }
        slot_fail(s, F_IO,
                  e == SSL_ERROR_ZERO_RETURN ? "closed before the response ended" : "read");
        return;
    }
}

/* Runs the slot's state machine as far as its socket lets it. */
static void
slot_run(struct slot *s)
{
    struct load *ld = s->ld;
    int r;
    ERR_clear_error();
    errno = 0;
    switch (s->st) {
    case ST_WAIT:
        return;
    case ST_CONNECTING: {
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
            errno = err;
            slot_fail(s, F_CONNECT, "connect");
            return;
        }
        if (tls_begin(s) != 0) {
            slot_fail(s, F_TLS, "SSL setup");
            return;
        }
        s->st = ST_HANDSHAKE;
    }
        /* fall through */
    case ST_HANDSHAKE:
        r = SSL_do_handshake(s->ssl);
        if (r != 1) {
            if (!tls_wait(s, r)) {
                slot_fail(s, F_TLS, "handshake");
            }
            return;
        }
        handshake_done(s);
        s->st = ST_WRITING;
        /* fall through */
    case ST_WRITING:
        r = SSL_write(s->ssl, ld->req, ld->req_len);
        if (r <= 0) {
            if (!tls_wait(s, r)) {
                slot_fail(s, F_IO, "write");
            }
            return;
        }
        s->st = ST_READING;
        set_interest(s, EPOLLIN);
        /* fall through */
    case ST_READING:
        slot_read(s);
        return;
    }
}

/* Restarts waiting slots and fails those past their deadline. */
static void
scan_deadlines(struct load *ld, uint64_t now)
{
    for (int i = 0; i < ld->o.conns; i++) {
        struct slot *s = &ld->slots[i];
        if (s->deadline_us > now) {
            continue;
        }
        if (s->st == ST_WAIT) {
            slot_start(s);
        } else {
            errno = 0;
            slot_fail(s, F_TIMEOUT, "no response within --timeout-ms");
        }
    }
}

static SSL_CTX *
make_ctx(const struct opts *o)
{
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        return NULL;
    }
    if (o->tls_version) {
        SSL_CTX_set_min_proto_version(ctx, o->tls_version);
        SSL_CTX_set_max_proto_version(ctx, o->tls_version);
    }
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    if (SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1) != 0) {
        goto fail;
    }
    if (o->cafile) {
        if (!SSL_CTX_load_verify_locations(ctx, o->cafile, NULL)) {
            goto fail;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    if (o->resume) {
        /* Sessions go to on_new_session() and from there to their slot, nowhere else. */
        SSL_CTX_set_session_cache_mode(ctx,
                                       SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: dimmer-tlsload --port PORT [--mode new|resume] [--conns C] [--duration S]\n"
            "           [--tls 1.2|1.3] [--sni NAME] [--cafile FILE] [--path PATH]\n"
            "           [--reuse first|latest] [--count N] [--timeout-ms MS] [--json]\n"
            "\n"
            "TLS handshakes per second against 127.0.0.1:PORT: C connections at once, each\n"
            "connect, handshake (ALPN http/1.1), GET PATH with Connection: close, read the\n"
            "response, close, again, for S seconds.\n"
            "  --port PORT      server port on 127.0.0.1 (required)\n"
            "  --mode MODE      new: full handshakes only (default); resume: each slot offers\n"
            "                   the session of its first full handshake every time and counts\n"
            "                   how often the server really resumed it\n"
            "  --conns C        connections at once (default 50, max %d)\n"
            "  --duration S     seconds (default 5)\n"
            "  --tls V          only TLS 1.2 or only TLS 1.3 (default: either)\n"
            "  --sni NAME       send NAME as SNI and Host (default: no SNI, Host localhost)\n"
            "  --cafile FILE    verify the server's chain against FILE and its name against\n"
            "                   --sni or localhost (default: no verification)\n"
            "  --path PATH      request path (default /1k)\n"
            "  --reuse WHICH    resume mode: first (default) or latest session of the slot\n"
            "  --count N        stop after N responses (or at --duration)\n"
            "  --timeout-ms MS  a connection taking longer fails (default 5000)\n"
            "  --json           one JSON object on stdout instead of text\n"
            "Exit status: 0; 1 usage or setup; 2 no response; 3 resume mode without\n"
            "(enough) resumption.\n",
            MAX_CONNS);
}

static bool
parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        return false;
    }
    *out = v;
    return true;
}

static int
parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        { "port", required_argument, NULL, 'p' },
        { "mode", required_argument, NULL, 'm' },
        { "conns", required_argument, NULL, 'c' },
        { "duration", required_argument, NULL, 'd' },
        { "tls", required_argument, NULL, 't' },
        { "sni", required_argument, NULL, 's' },
        { "cafile", required_argument, NULL, 'a' },
        { "path", required_argument, NULL, 'u' },
        { "reuse", required_argument, NULL, 'r' },
        { "count", required_argument, NULL, 'n' },
        { "timeout-ms", required_argument, NULL, 'T' },
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    *o = (struct opts){ .conns = 50, .duration_s = 5, .path = "/1k", .timeout_ms = 5000 };
    int c;
    long v;
    char *end;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (!parse_long(optarg, 1, 65535, &v)) {
                goto bad;
            }
            o->port = (int)v;
            break;
        case 'm':
            if (strcmp(optarg, "new") != 0 && strcmp(optarg, "resume") != 0) {
                goto bad;
            }
            o->resume = strcmp(optarg, "resume") == 0;
            break;
        case 'c':
            if (!parse_long(optarg, 1, MAX_CONNS, &v)) {
                goto bad;
            }
            o->conns = (int)v;
            break;
        case 'd':
            o->duration_s = strtod(optarg, &end);
            if (end == optarg || *end || !(o->duration_s >= 0.1 && o->duration_s <= 3600)) {
                goto bad;
            }
            break;
        case 't':
            if (strcmp(optarg, "1.2") == 0) {
                o->tls_version = TLS1_2_VERSION;
            } else if (strcmp(optarg, "1.3") == 0) {
                o->tls_version = TLS1_3_VERSION;
            } else {
                goto bad;
            }
            break;
        case 's':
            if (!*optarg || strlen(optarg) > 253 || strpbrk(optarg, " \r\n")) {
                goto bad;
            }
            o->sni = optarg;
            break;
        case 'a':
            o->cafile = optarg;
            break;
        case 'u':
            if (optarg[0] != '/' || strlen(optarg) > 512 || strpbrk(optarg, " \r\n")) {
                goto bad;
            }
            o->path = optarg;
            break;
        case 'r':
            if (strcmp(optarg, "first") != 0 && strcmp(optarg, "latest") != 0) {
                goto bad;
            }
            o->reuse_latest = strcmp(optarg, "latest") == 0;
            break;
        case 'n':
            if (!parse_long(optarg, 1, 1000000000L, &o->count)) {
                goto bad;
            }
            break;
        case 'T':
            if (!parse_long(optarg, 1, 600000, &v)) {
                goto bad;
            }
            o->timeout_ms = (int)v;
            break;
        case 'j':
            o->json = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind != argc || o->port == 0) {
        fprintf(stderr, "dimmer-tlsload: --port is required and takes no other arguments\n");
        usage(stderr);
        return -1;
    }
    return 0;
bad:
    for (const struct option *lo = longopts; lo->name; lo++) {
        if (lo->val == c) {
            fprintf(stderr, "dimmer-tlsload: bad value for --%s: %s\n", lo->name, optarg);
        }
    }
    return -1;
}

/* "ok", "none" (nothing resumed), "partial" (under MIN_RESUMED of the offers) or "n/a". */
static const char *
resumption_verdict(const struct load *ld)
{
    if (!ld->o.resume) {
        return "n/a";
    }
    if (ld->st.resumed == 0) {
        return "none";
    }
    return (double)ld->st.resumed < MIN_RESUMED * (double)ld->st.offered ? "partial" : "ok";
}

static void
report(const struct load *ld, double secs, double cpu_pct)
{
    const struct stats *st = &ld->st;
    uint64_t fails = 0;
    for (int k = 0; k < F_KINDS; k++) {
        fails += st->fails[k];
    }
    double hs = (double)st->handshakes / secs;
    double pct = st->handshakes ? 100.0 * (double)st->resumed / (double)st->handshakes : 0;
    const char *tls = ld->o.tls_version == TLS1_2_VERSION   ? "1.2"
                      : ld->o.tls_version == TLS1_3_VERSION ? "1.3"
                                                            : "any";
    if (ld->o.json) {
        printf("{\"port\": %d, \"mode\": \"%s\", \"tls\": \"%s\", \"conns\": %d, "
               "\"duration_s\": %.3f, \"handshakes\": %llu, \"handshakes_per_s\": %.1f, "
               "\"resumed\": %llu, \"full\": %llu, \"offered\": %llu, \"resumed_pct\": %.2f, "
               "\"resumption\": \"%s\", \"responses\": %llu, \"responses_per_s\": %.1f, "
               "\"body_bytes\": %llu, \"errors\": %llu",
               ld->o.port, ld->o.resume ? "resume" : "new", tls, ld->o.conns, secs,
               (unsigned long long)st->handshakes, hs, (unsigned long long)st->resumed,
               (unsigned long long)(st->handshakes - st->resumed), (unsigned long long)st->offered,
               pct, resumption_verdict(ld), (unsigned long long)st->responses,
               (double)st->responses / secs, (unsigned long long)st->body_bytes,
               (unsigned long long)fails);
        for (int k = 0; k < F_KINDS; k++) {
            printf(", \"errors_%s\": %llu", fail_names[k], (unsigned long long)st->fails[k]);
        }
        printf(", \"client_cpu_pct\": %.1f, \"protocol\": \"%s\", \"cipher\": \"%s\", "
               "\"group\": \"%s\", \"alpn\": \"%s\", \"cert\": \"%s\"}\n",
               cpu_pct, ld->have_params ? ld->protocol : "", ld->have_params ? ld->cipher : "",
               ld->have_params ? ld->group : "", ld->have_params ? ld->alpn : "",
               ld->have_params ? ld->cert : "");
    } else {
        printf("127.0.0.1:%d mode %s, TLS %s, %d conns, %.2f s\n", ld->o.port,
               ld->o.resume ? "resume" : "new", tls, ld->o.conns, secs);
        printf("  handshakes %llu (%.1f/s), resumed %llu (%.1f %%) of %llu offered\n",
               (unsigned long long)st->handshakes, hs, (unsigned long long)st->resumed, pct,
               (unsigned long long)st->offered);
        printf("  responses %llu (%.1f/s), body %llu bytes, errors %llu",
               (unsigned long long)st->responses, (double)st->responses / secs,
               (unsigned long long)st->body_bytes, (unsigned long long)fails);
        for (int k = 0; k < F_KINDS; k++) {
            printf("%s%s %llu", k ? ", " : " (", fail_names[k], (unsigned long long)st->fails[k]);
        }
        printf(")\n  client CPU %.1f %%", cpu_pct);
        if (ld->have_params) {
            printf(", negotiated %s %s group %s, ALPN %s, server key %s", ld->protocol, ld->cipher,
                   ld->group, ld->alpn, ld->cert);
        }
        printf("\n");
    }
    for (int k = 0; k < F_KINDS; k++) {
        if (ld->first_fail[k][0]) {
            fprintf(stderr, "dimmer-tlsload: first %s error: %s\n", fail_names[k],
                    ld->first_fail[k]);
        }
    }
    const char *v = resumption_verdict(ld);
    if (strcmp(v, "none") == 0) {
        fprintf(stderr,
                "dimmer-tlsload: RESUMPTION DID NOT HAPPEN: 0 of %llu offered "
                "sessions were resumed; these are full handshakes\n",
                (unsigned long long)st->offered);
    } else if (strcmp(v, "partial") == 0) {
        fprintf(stderr,
                "dimmer-tlsload: RESUMPTION PARTIAL: %llu of %llu offered sessions "
                "were resumed%s\n",
                (unsigned long long)st->resumed, (unsigned long long)st->offered,
                ld->o.reuse_latest ? ""
                                   : " (a server that takes each TLS 1.3 ticket only once "
                                     "resumes every other one: try --reuse latest)");
    }
}

int
main(int argc, char **argv)
{
    static struct load ld;
    if (parse_opts(argc, argv, &ld.o) != 0) {
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)ld.o.conns + 64) {
        rl.rlim_cur = rl.rlim_max < (rlim_t)ld.o.conns + 64 ? rl.rlim_max : (rlim_t)ld.o.conns + 64;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    ld.req_len = snprintf(ld.req, sizeof(ld.req),
                          "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: dimmer-tlsload\r\n"
                          "Connection: close\r\n\r\n",
                          ld.o.path, ld.o.sni ? ld.o.sni : "localhost");
    ld.ctx = make_ctx(&ld.o);
    if (!ld.ctx) {
        fprintf(stderr, "dimmer-tlsload: TLS setup failed: %s\n",
                ERR_error_string(ERR_get_error(), NULL));
        return 1;
    }
    ld.ep = epoll_create1(EPOLL_CLOEXEC);
    ld.slots = calloc((size_t)ld.o.conns, sizeof(*ld.slots));
    if (ld.ep < 0 || !ld.slots) {
        fprintf(stderr, "dimmer-tlsload: %s\n", strerror(errno));
        return 1;
    }
    ld.counting = true;
    uint64_t start = now_us(), cpu0 = cpu_us();
    uint64_t end = start + (uint64_t)(ld.o.duration_s * 1e6);
    for (int i = 0; i < ld.o.conns; i++) {
        ld.slots[i] = (struct slot){ .ld = &ld, .fd = -1, .st = ST_WAIT, .deadline_us = start };
    }
    struct epoll_event evs[MAX_EVENTS];
    uint64_t now = start, last_scan = 0;
    while (now < end && !(ld.o.count && ld.st.responses >= (uint64_t)ld.o.count)) {
        if (now - last_scan >= SCAN_US) {
            scan_deadlines(&ld, now);
            last_scan = now;
        }
        uint64_t left_ms = (end - now + 999) / 1000;
        int n = epoll_wait(ld.ep, evs, MAX_EVENTS, left_ms < 5 ? (int)left_ms : 5);
        for (int i = 0; i < n; i++) {
            slot_run(evs[i].data.ptr);
        }
        now = now_us();
    }
    ld.counting = false;
    double secs = (double)(now - start) / 1e6;
    double cpu_pct = 100.0 * (double)(cpu_us() - cpu0) / (double)(now - start);
    for (int i = 0; i < ld.o.conns; i++) {
        slot_close(&ld.slots[i], 0);
        SSL_SESSION_free(ld.slots[i].sess);
    }
    report(&ld, secs, cpu_pct);
    free(ld.slots);
    close(ld.ep);
    SSL_CTX_free(ld.ctx);
    if (ld.st.responses == 0) {
        return 2;
    }
    return ld.o.resume && strcmp(resumption_verdict(&ld), "ok") != 0 ? 3 : 0;
}
