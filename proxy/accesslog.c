/*
 * The access log (proxy/accesslog.h): lines are formatted on the request
 * path into the worker's buffer, which the worker's check phase writes.
 */
#include "proxy/accesslog.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxy/conn.h"
#include "proxy/internal.h"
#include "proxy/metrics.h"
#include "proxy/sbuf.h"

#define DM_LOG_BUF (64 * 1024)

void
dm_accesslog_client_addr(const struct dm_client *c, char *out, size_t cap)
{
    if (c->peer.sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &c->peer.in6.sin6_addr, out, (socklen_t)cap);
        return;
    }
    /* IPv4 by hand: glibc's inet_ntop goes through sprintf, on every request. */
    const uint8_t *b = (const uint8_t *)&c->peer.in4.sin_addr;
    char *p = out;
    for (int i = 0; i < 4; i++) {
        unsigned v = b[i];
        if (v >= 100) {
            *p++ = (char)('0' + v / 100);
        }
        if (v >= 10) {
            *p++ = (char)('0' + v / 10 % 10);
        }
        *p++ = (char)('0' + v % 10);
        *p++ = i < 3 ? '.' : '\0';
    }
    (void)cap; /* 16 bytes always suffice and cap is INET6_ADDRSTRLEN */
}

static unsigned
client_port(const struct dm_client *c)
{
    return ntohs(c->peer.sa.sa_family == AF_INET6 ? c->peer.in6.sin6_port : c->peer.in4.sin_port);
}

enum dm_accesslog_format
dm_accesslog_format_of(const char *name)
{
    if (name != NULL && strcmp(name, "json") == 0) {
        return DM_ALOG_JSON;
    }
    if (name != NULL && strcmp(name, "combined") == 0) {
        return DM_ALOG_COMBINED;
    }
    return DM_ALOG_DEFAULT;
}

int
dm_accesslog_init(struct dm_worker *w, int fd, int format)
{
    w->log_fd = fd;
    w->log_format = format;
    if (fd >= 0) {
        w->log_buf = malloc(DM_LOG_BUF);
        if (w->log_buf == NULL) {
            return -ENOMEM;
        }
    }
    return 0;
}

void
dm_accesslog_fini(struct dm_worker *w)
{
    if (w->log_len > 0) {
        dm_accesslog_flush(w);
    }
    free(w->log_buf);
    w->log_buf = NULL;
}

void
dm_accesslog_flush(struct dm_worker *w)
{
    size_t off = 0;
    while (off < w->log_len) {
        ssize_t n = write(w->log_fd, w->log_buf + off, w->log_len - off);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        off += (size_t)n;
    }
    w->log_len = 0;
}

static void
log_append(struct dm_worker *w, const char *line, size_t len)
{
    if (w->log_buf == NULL) {
        return;
    }
    if (w->log_len + len + 1 > DM_LOG_BUF) {
        dm_accesslog_flush(w);
    }
    if (len + 1 > DM_LOG_BUF) {
        len = DM_LOG_BUF - 1;
    }
    memcpy(w->log_buf + w->log_len, line, len);
    w->log_len += len;
    w->log_buf[w->log_len++] = '\n';
}

/*
 * Copies s into out for a quoted field of the combined format as nginx
 * writes it: '"', '\\' and bytes outside printable ASCII as \xHH. An empty
 * or absent value is "-".
 */
static size_t
combined_escape(char *out, size_t cap, const char *s, size_t len)
{
    size_t n = 0;
    if (s == NULL || len == 0) {
        out[n++] = '-';
    }
    for (size_t i = 0; s != NULL && i < len && n + 5 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x7f) {
            n += (size_t)snprintf(out + n, cap - n, "\\x%02X", ch);
        } else {
            out[n++] = (char)ch;
        }
    }
    out[n] = 0;
    return n;
}

/* The value of the request's header `name` (lower case), or an empty span. */
static struct dm_span
req_header(const struct dm_req *req, const char *name)
{
    for (unsigned i = 0; i < req->msg.nfields; i++) {
        if (dm_span_ieq(req->msg.fields[i].name, name)) {
            return req->msg.fields[i].value;
        }
    }
    return (struct dm_span){ NULL, 0 };
}

/* One access-log line per request: see conf/README.md for the formats. */
void
dm_accesslog_write(struct dm_req *req)
{
    struct dm_client *c = req->c;
    struct dm_worker *w = c->w;
    req->logged = true;
    uint64_t now = uv_hrtime() / 1000; /* one clock read for the counters and the line */
    dm_metrics_request_done(req, now);
    if (w->log_fd < 0) {
        return;
    }
    char addr[INET6_ADDRSTRLEN];
    dm_accesslog_client_addr(c, addr, sizeof(addr));
    /* A server's name is any YAML string: escaped in JSON; in the text
     * formats a space or a control byte (which would shift or split the
     * line) is written '_'. */
    char server[256] = "-";
    if (req->server != DM_NO_SERVER) {
        const char *name = dm_runtime_server_conf(c->rt, req->pool, req->server)->name;
        if (w->log_format == DM_ALOG_JSON) {
            dm_json_esc(server, sizeof(server), name);
        } else {
            size_t k = 0;
            for (; name[k] != 0 && k + 1 < sizeof(server); k++) {
                unsigned char ch = (unsigned char)name[k];
                server[k] = ch <= ' ' || ch == 0x7f ? '_' : (char)ch;
            }
            server[k] = 0;
        }
    }
    double up_s = req->up_start_us > 0 ? (double)(now - req->up_start_us) / 1e6 : 0.0;
    double total_s = (double)(now - req->start_us) / 1e6;
    time_t t = time(NULL);
    if (t != w->log_time) {
        struct tm tm;
        if (w->log_format == DM_ALOG_COMBINED) {
            localtime_r(&t, &tm); /* nginx's $time_local */
            strftime(w->log_time_text, sizeof(w->log_time_text), "%d/%b/%Y:%H:%M:%S %z", &tm);
        } else {
            gmtime_r(&t, &tm);
            strftime(w->log_time_text, sizeof(w->log_time_text), "%Y-%m-%dT%H:%M:%SZ", &tm);
        }
        w->log_time = t;
    }
    struct dm_span m = req->msg.method.p != NULL ? req->msg.method : (struct dm_span){ "-", 1 };
    struct dm_span tg = req->msg.target.p != NULL ? req->msg.target : (struct dm_span){ "-", 1 };
    char method[64];
    char target[1200];
    char line[2048];
    int n;
    if (w->log_format == DM_ALOG_COMBINED) {
        /* $remote_addr - $remote_user [$time_local] "$request" $status
         * $body_bytes_sent "$http_referer" "$http_user_agent" */
        char request[1200], referer[600], agent[600];
        char *rp = request;
        size_t rl = combined_escape(rp, sizeof(request), m.p, m.len > 32 ? 32 : m.len);
        rp[rl++] = ' ';
        rl += combined_escape(rp + rl, sizeof(request) - rl, tg.p, tg.len > 1024 ? 1024 : tg.len);
        snprintf(rp + rl, sizeof(request) - rl, " HTTP/%u.%u", req->info.version / 10,
                 req->info.version % 10);
        struct dm_span ref = req_header(req, "referer");
        struct dm_span ua = req_header(req, "user-agent");
        combined_escape(referer, sizeof(referer), ref.p, ref.len > 512 ? 512 : ref.len);
        combined_escape(agent, sizeof(agent), ua.p, ua.len > 512 ? 512 : ua.len);
        uint64_t body =
            req->resp_bytes > req->resp_head_bytes ? req->resp_bytes - req->resp_head_bytes : 0;
        n = snprintf(line, sizeof(line), "%s - - [%s] \"%s\" %u %llu \"%s\" \"%s\"", addr,
                     w->log_time_text, req->msg.method.p != NULL ? request : "-", req->status,
                     (unsigned long long)body, referer, agent);
    } else if (w->log_format == DM_ALOG_JSON) {
        dm_json_esc_n(method, sizeof(method), m.p, m.len);
        dm_json_esc_n(target, sizeof(target), tg.p, tg.len);
        n = snprintf(line, sizeof(line),
                     "{\"time\":\"%s\",\"client\":\"%s\",\"client_port\":%u,\"method\":\"%s\","
                     "\"target\":\"%s\","
                     "\"status\":%u,\"bytes\":%llu,\"upstream\":\"%s\",\"upstream_time\":%.6f,"
                     "\"request_time\":%.6f}",
                     w->log_time_text, addr, client_port(c), method, target, req->status,
                     (unsigned long long)req->resp_bytes, server, up_s, total_s);
    } else {
        /* Bytes that would break the line (control bytes) never pass the parser. */
        int mlen = m.len > 32 ? 32 : (int)m.len;
        int tlen = tg.len > 1024 ? 1024 : (int)tg.len;
        n = snprintf(line, sizeof(line), "%s %s \"%.*s %.*s HTTP/%u.%u\" %u %llu %s %.6f %.6f",
                     w->log_time_text, addr, mlen, m.p, tlen, tg.p, req->info.version / 10,
                     req->info.version % 10, req->status, (unsigned long long)req->resp_bytes,
                     server, up_s, total_s);
    }
    if (n > 0) {
        log_append(w, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
    }
}
