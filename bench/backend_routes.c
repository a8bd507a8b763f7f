/*
 * The endpoints of dimmer-backend, one function each, and route(), which picks one by
 * the request's path. An endpoint answers at once, or starts a generator of
 * backend_conn.c (a body from memory, the echo, the digest) or a timer (/slow).
 * route_control() does the same for the control listener's few endpoints.
 */
#include "bench/backend_routes.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llhttp.h>
#include <openssl/evp.h>
#include <uv.h>

#include "bench/backend_conn.h"
#include "bench/backend_power.h"
#include "bench/backend_site.h"
#include "bench/backend_ws.h"

#define MAX_BYTES   (UINT64_C(1) << 40)
#define MAX_SLOW_MS (UINT64_C(3600) * 1000)

static bool
method_is_get(struct dm_backend_conn *c)
{
    uint8_t m = llhttp_get_method(&c->parser);
    if (m == HTTP_GET || m == HTTP_HEAD) {
        return true;
    }
    dm_backend_respond_msg(c, 405, "method not allowed\n", "Allow: GET, HEAD\r\n");
    return false;
}

static bool
method_is_post(struct dm_backend_conn *c)
{
    if (llhttp_get_method(&c->parser) == HTTP_POST) {
        return true;
    }
    dm_backend_respond_msg(c, 405, "method not allowed\n", "Allow: POST\r\n");
    return false;
}

/* The energy figure with enough digits that a test can tell 3 W from 3.1 W over 0.1 s. */
#define ENERGY_FMT "%.9f"

/* Answers the JSON of n bytes that snprintf() formatted into body (cap bytes). */
static void
respond_json(struct dm_backend_conn *c, const char *body, int n, size_t cap)
{
    if (n < 0 || (size_t)n >= cap) {
        /* Only a bug in this file gets here: every figure is bounded. */
        abort();
    }
    dm_backend_respond_text(c, 200, "application/json", body, (size_t)n, NULL);
}

static void
route_stats(struct dm_backend_conn *c)
{
    struct dm_backend *be = c->be;
    const struct dm_backend_queue *q = &be->queue;
    const struct dm_backend_power *p = &be->power;
    struct dm_backend_power_reading m = dm_backend_power_read(be);
    char body[2048];
    int n = snprintf(
        body, sizeof body,
        "{\"name\":\"%s\",\"requests\":%" PRIu64 ",\"connections\":%" PRIu64 ",\"open\":%" PRIu64
        ",\"pages\":%" PRIu64 ",\"page_objects\":%" PRIu64 ",\"objects\":%" PRIu64
        ",\"power\":\"%s\",\"power_for_ms\":%" PRIu64 ",\"watts\":%.3f,\"energy_wh\":" ENERGY_FMT
        ",\"capacity\":%" PRIu64 ",\"in_service\":%" PRIu64 ",\"in_service_max\":%" PRIu64
        ",\"queued\":%" PRIu64 ",\"queued_max\":%" PRIu64 ",\"rejected_full\":%" PRIu64
        ",\"refused\":%" PRIu64 ",\"lost_at_sleep\":%" PRIu64 ",\"requests_not_awake\":%" PRIu64
        ",\"sleeps\":%" PRIu64 ",\"wakes\":%" PRIu64 ",\"wol_ignored\":%" PRIu64
        ",\"served\":%" PRIu64 ",\"timed_out\":%" PRIu64 "}\n",
        be->name, be->requests, be->connections, be->open, be->pages, be->page_objects, be->objects,
        m.state, m.for_ms, m.watts, m.energy_wh, q->capacity, q->in_service, q->in_service_max,
        q->queued, q->queued_max, q->rejected_full, p->refused, p->lost_at_sleep,
        p->requests_not_awake, p->sleeps, p->wakes, p->wol_ignored, q->served, be->timed_out);
    respond_json(c, body, n, sizeof body);
}

/* GET /power, and the answer of POST /sleep and /wake: the state and the model. */
static void
route_power(struct dm_backend_conn *c)
{
    const struct dm_backend_power *p = &c->be->power;
    struct dm_backend_power_reading m = dm_backend_power_read(c->be);
    char body[512];
    int n =
        snprintf(body, sizeof body,
                 "{\"state\":\"%s\",\"for_ms\":%" PRIu64 ",\"watts\":%.3f,\"energy_wh\":" ENERGY_FMT
                 ",\"idle_w\":%.3f,\"full_w\":%.3f,\"asleep_w\":%.3f,\"booting_w\":%.3f"
                 ",\"boot_ms\":%" PRIu64 "}\n",
                 m.state, m.for_ms, m.watts, m.energy_wh, p->idle_w, p->full_w, p->asleep_w,
                 p->booting_w, p->boot_ms);
    respond_json(c, body, n, sizeof body);
}

static void
route_page(struct dm_backend_conn *c, struct dm_backend_span rest)
{
    const struct dm_site *site = c->be->site;
    const char *dot = memchr(rest.p, '.', rest.len);
    uint64_t n;
    if (!dot ||
        !dm_backend_parse_u64((struct dm_backend_span){ rest.p, (size_t)(dot - rest.p) },
                              UINT32_MAX, &n) ||
        n >= dm_site_pages(site)) {
        dm_backend_respond_msg(c, 404, "no such page\n", NULL);
        return;
    }
    struct dm_backend_span ext = { dot, (size_t)(rest.p + rest.len - dot) };
    size_t len;
    if (dm_backend_span_eq(ext, ".html")) {
        size_t nobj_len;
        unsigned nobj;
        dm_site_page_objects(site, (unsigned)n, &nobj_len, &nobj);
        char extra[48];
        snprintf(extra, sizeof extra, "X-Page-Objects: %u\r\n", nobj);
        const char *html = dm_site_page(site, (unsigned)n, &len);
        c->be->pages++;
        c->be->page_objects += nobj;
        dm_backend_respond_mem(c, 200, "text/html", html, 0, len, 0, extra);
    } else if (dm_backend_span_eq(ext, ".objects")) {
        unsigned nobj;
        const char *list = dm_site_page_objects(site, (unsigned)n, &len, &nobj);
        dm_backend_respond_mem(c, 200, "text/plain", list, 0, len, 0, NULL);
    } else {
        dm_backend_respond_msg(c, 404, "no such page\n", NULL);
    }
}

static void
route_obj(struct dm_backend_conn *c, struct dm_backend_span rest)
{
    /* Pictures are SVG whatever the extension says: a browser shows them
     * (an <img> takes the type from Content-Type), and a size of 102 bytes
     * still holds a whole picture. */
    static const struct {
        const char *ext;
        const char *ctype;
        int fill;
    } types[] = {
        { ".png", "image/svg+xml", 0 },
        { ".jpg", "image/svg+xml", 0 },
        { ".js", "application/javascript", 1 },
        { ".css", "text/css", 2 },
    };
    const char *dot = memchr(rest.p, '.', rest.len);
    uint64_t id;
    if (!dot || !dm_backend_parse_u64((struct dm_backend_span){ rest.p, (size_t)(dot - rest.p) },
                                      999999999, &id)) {
        dm_backend_respond_msg(c, 404, "no such object\n", NULL);
        return;
    }
    struct dm_backend_span ext = { dot, (size_t)(rest.p + rest.len - dot) };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (dm_backend_span_eq(ext, types[i].ext)) {
            c->be->objects++;
            dm_backend_respond_mem(c, 200, types[i].ctype, c->be->fill[types[i].fill], 0,
                                   dm_site_obj_size(id), 0, NULL);
            return;
        }
    }
    dm_backend_respond_msg(c, 404, "no such object\n", NULL);
}

bool
dm_backend_make_fills(struct dm_backend *be)
{
    static const char *const heads[3] = {
        /* One element, written on two lines: parentheses say the concatenation is meant. */
        ("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"96\" height=\"64\">"
         "<rect width=\"96\" height=\"64\" fill=\"#7a9\"/></svg>"),
        "// dimmer-backend demo script",
        "/* dimmer-backend demo stylesheet",
    };
    size_t max = DM_SITE_OBJ_MAX;
    for (int i = 0; i < 3; i++) {
        be->fill[i] = malloc(max);
        if (be->fill[i] == NULL) {
            return false;
        }
        memset(be->fill[i], ' ', max);
        memcpy(be->fill[i], heads[i], strlen(heads[i]));
    }
    return true;
}

/* /bytes/N, /chunked/N, /close/N: the pattern, framed three ways. */
static void
route_bytes(struct dm_backend_conn *c, struct dm_backend_span num, int64_t framing)
{
    uint64_t n;
    if (!dm_backend_parse_u64(num, MAX_BYTES, &n)) {
        dm_backend_respond_msg(c, 400, "length must be a decimal number up to 2^40\n", NULL);
        return;
    }
    if (framing == DM_CLEN_CHUNKED && c->http10) {
        /* HTTP/1.0 has no chunked coding: fall back to ending the body at close. */
        framing = DM_CLEN_NONE;
    }
    if (framing == DM_CLEN_NONE) {
        c->r.close_after = true;
    }
    dm_backend_respond_mem(c, 200, "application/octet-stream",
                           (const char *)dm_site_pattern(c->be->site), DM_PATTERN_PERIOD, n,
                           framing, NULL);
}

static void
route_status(struct dm_backend_conn *c, struct dm_backend_span num)
{
    uint64_t n;
    if (!dm_backend_parse_u64(num, 599, &n) || n < 100 || n == 101) {
        dm_backend_respond_msg(c, 400, "status must be 100..599 and not 101\n", NULL);
        return;
    }
    int status = (int)n;
    if (status < 200) {
        /* An interim response on its own would leave the client waiting, so a 1xx is
         * sent as interim and followed by a final 200 (HTTP/1.0 gets only the 200). */
        if (!c->http10) {
            char line[128];
            int len = snprintf(line, sizeof line, "HTTP/1.1 %d %s\r\nX-Backend: %s\r\n\r\n", status,
                               dm_backend_reason(status), c->be->name);
            if (dm_backend_send_copy(c, line, (size_t)len) < 0) {
                return;
            }
        }
        dm_backend_respond_msg(c, 200, "ok\n", NULL);
        return;
    }
    if (status == 204 || status == 304) {
        struct dm_backend_out *o = dm_backend_head_make(c, status, NULL, DM_CLEN_NONE, NULL);
        if (o) {
            dm_backend_out_send_copy(c, o, NULL, 0);
        }
        return;
    }
    char body[32];
    int len = snprintf(body, sizeof body, "status %d\n", status);
    dm_backend_respond_text(c, status, "text/plain", body, (size_t)len, NULL);
}

static void
on_slow_timer(uv_timer_t *t)
{
    struct dm_backend_conn *c = t->data;
    if (c->closing || c->r.gen != DM_GEN_SLOW) {
        return;
    }
    c->r.active = false;
    c->r.gen = DM_GEN_NONE;
    dm_backend_respond_msg(c, 200, "slept\n", NULL);
    dm_backend_drive(c);
}

static void
route_slow(struct dm_backend_conn *c, struct dm_backend_span num)
{
    uint64_t ms;
    if (!dm_backend_parse_u64(num, MAX_SLOW_MS, &ms)) {
        dm_backend_respond_msg(c, 400, "delay must be 0..3600000 ms\n", NULL);
        return;
    }
    c->r.gen = DM_GEN_SLOW;
    c->r.active = true;
    uv_timer_start(&c->timer, on_slow_timer, ms, 0);
}

static void
route_echo(struct dm_backend_conn *c)
{
    struct dm_backend_resp *r = &c->r;
    int64_t framing;
    if (c->parser.flags & F_CHUNKED) {
        framing = c->http10 ? DM_CLEN_NONE : DM_CLEN_CHUNKED;
    } else {
        /* Content-Length, or no body at all: both are a known length. */
        framing = (int64_t)c->parser.content_length;
    }
    if (framing == DM_CLEN_NONE) {
        r->close_after = true;
    }
    r->chunked = framing == DM_CLEN_CHUNKED;
    struct dm_backend_out *o =
        dm_backend_head_make(c, 200, "application/octet-stream", framing, NULL);
    if (!o || dm_backend_out_send_copy(c, o, NULL, 0) < 0) {
        return;
    }
    r->gen = DM_GEN_ECHO;
    r->active = true;
}

static void
route_sha(struct dm_backend_conn *c)
{
    if (!c->md) {
        c->md = EVP_MD_CTX_new();
    }
    if (!c->md || !EVP_DigestInit_ex(c->md, EVP_sha256(), NULL)) {
        dm_backend_respond_msg(c, 500, "digest unavailable\n", NULL);
        return;
    }
    c->r.gen = DM_GEN_SHA;
    c->r.active = true;
}

/*
 * What every request gets before its endpoint: a fresh response, keep-alive and HTTP
 * version from the parser, 100 Continue when asked, CONNECT refused. The path of the
 * head in[head_start, parse_off) into *path; false when the request is answered already.
 */
static bool
route_begin(struct dm_backend_conn *c, struct dm_backend_span *path)
{
    const char *head = c->in + c->head_start;
    size_t hlen = c->parse_off - c->head_start;
    c->r = (struct dm_backend_resp){ 0 };
    c->r.started = true;
    c->r.close_after = !llhttp_should_keep_alive(&c->parser);
    c->r.head_only = llhttp_get_method(&c->parser) == HTTP_HEAD;
    c->http10 = llhttp_get_http_major(&c->parser) == 1 && llhttp_get_http_minor(&c->parser) == 0;
    *path = dm_backend_head_path(head, hlen);

    if (!c->control && !dm_backend_span_eq(*path, "/stats") &&
        !dm_backend_span_eq(*path, "/healthz")) {
        c->be->requests++;
    }
    bool has_body = (c->parser.flags & F_CHUNKED) || c->parser.content_length > 0;
    struct dm_backend_span expect;
    if (has_body && !c->http10 && dm_backend_head_header(head, hlen, "Expect", &expect) &&
        dm_backend_span_caseeq(expect, "100-continue")) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (dm_backend_send_copy(c, cont, sizeof cont - 1) < 0) {
            return false;
        }
    }
    if (llhttp_get_method(&c->parser) == HTTP_CONNECT) {
        c->r.close_after = true;
        dm_backend_respond_msg(c, 405, "CONNECT is not supported\n", NULL);
        return false;
    }
    return true;
}

/* Routes the request whose head is in[head_start, parse_off). */
static void
route(struct dm_backend_conn *c)
{
    struct dm_backend *be = c->be;
    const char *head = c->in + c->head_start;
    size_t hlen = c->parse_off - c->head_start;
    struct dm_backend_span path, rest;
    bool busy = c->busy;
    c->busy = false;
    if (!route_begin(c, &path)) {
        return;
    }
    if (busy) {
        /* Every slot taken and the queue full: come back in a second (its body, if any,
         * is read and dropped, so the connection stays usable). */
        dm_backend_respond_msg(c, 503, "busy\n", "Retry-After: 1\r\n");
        return;
    }

    if (dm_backend_span_eq(path, "/healthz")) {
        if (method_is_get(c)) {
            dm_backend_respond_msg(c, 200, "ok\n", NULL);
        }
    } else if (dm_backend_span_eq(path, "/stats")) {
        if (method_is_get(c)) {
            route_stats(c);
        }
    } else if (dm_backend_span_eq(path, "/") || dm_backend_span_eq(path, "/index.html")) {
        if (method_is_get(c)) {
            size_t len;
            const char *html = dm_site_index(be->site, &len);
            dm_backend_respond_mem(c, 200, "text/html", html, 0, len, 0, NULL);
        }
    } else if (dm_backend_span_prefix(path, "/page/", &rest)) {
        if (method_is_get(c)) {
            route_page(c, rest);
        }
    } else if (dm_backend_span_prefix(path, "/obj/", &rest)) {
        if (method_is_get(c)) {
            route_obj(c, rest);
        }
    } else if (dm_backend_span_prefix(path, "/bytes/", &rest)) {
        if (method_is_get(c)) {
            route_bytes(c, rest, 0);
        }
    } else if (dm_backend_span_prefix(path, "/chunked/", &rest)) {
        if (method_is_get(c)) {
            route_bytes(c, rest, DM_CLEN_CHUNKED);
        }
    } else if (dm_backend_span_prefix(path, "/close/", &rest)) {
        if (method_is_get(c)) {
            route_bytes(c, rest, DM_CLEN_NONE);
        }
    } else if (dm_backend_span_eq(path, "/echo") || dm_backend_span_eq(path, "/sha256")) {
        uint8_t m = llhttp_get_method(&c->parser);
        if (m != HTTP_POST && m != HTTP_PUT) {
            dm_backend_respond_msg(c, 405, "method not allowed\n", "Allow: POST, PUT\r\n");
        } else if (dm_backend_span_eq(path, "/echo")) {
            route_echo(c);
        } else {
            route_sha(c);
        }
    } else if (dm_backend_span_eq(path, "/headers")) {
        dm_backend_respond_text(c, 200, "text/plain", head, hlen, NULL);
    } else if (dm_backend_span_prefix(path, "/status/", &rest)) {
        route_status(c, rest);
    } else if (dm_backend_span_prefix(path, "/slow/", &rest)) {
        route_slow(c, rest);
    } else if (dm_backend_span_eq(path, "/ws")) {
        dm_backend_ws_upgrade(c, head, hlen);
    } else {
        dm_backend_respond_msg(c, 404, "not found\n", NULL);
    }
}

/* The control listener: the machine's agent or BMC, up in every power state. */
/* A power action's credentials: not a browser's (no Origin); none asked, or the
 * bearer token (in constant time). */
static bool
control_authorized(struct dm_backend_conn *c)
{
    const struct dm_backend *be = c->be;
    struct dm_backend_span v;
    const char *head = c->in + c->head_start;
    size_t hlen = c->parse_off - c->head_start;
    if (dm_backend_head_header(head, hlen, "Origin", &v)) {
        /* A browser sends Origin with every POST, and dimmer never does:
         * a page of another site could otherwise POST a form here. */
        dm_backend_respond_msg(c, 403, "this listener serves dimmer, not a browser\n", NULL);
        return false;
    }
    if (be->control_token_len == 0) {
        return true;
    }
    if (dm_backend_head_header(head, hlen, "Authorization", &v) && v.len > 7 &&
        strncasecmp(v.p, "Bearer ", 7) == 0 && v.len - 7 == be->control_token_len &&
        CRYPTO_memcmp(v.p + 7, be->control_token, be->control_token_len) == 0) {
        return true;
    }
    dm_backend_respond_msg(c, 401, "a bearer token is needed (--control-token-file)\n",
                           "WWW-Authenticate: Bearer\r\n");
    return false;
}

static void
route_control(struct dm_backend_conn *c)
{
    struct dm_backend_span path;
    if (!route_begin(c, &path)) {
        return;
    }
    if (dm_backend_span_eq(path, "/sleep")) {
        if (method_is_post(c) && control_authorized(c)) {
            dm_backend_power_sleep(c->be);
            route_power(c);
        }
    } else if (dm_backend_span_eq(path, "/wake")) {
        if (method_is_post(c) && control_authorized(c)) {
            dm_backend_power_wake(c->be);
            route_power(c);
        }
    } else if (dm_backend_span_eq(path, "/power")) {
        if (method_is_get(c)) {
            route_power(c);
        }
    } else if (dm_backend_span_eq(path, "/stats")) {
        if (method_is_get(c)) {
            route_stats(c);
        }
    } else {
        dm_backend_respond_msg(c, 404, "not found\n", NULL);
    }
}

const struct dm_backend_handlers dm_backend_endpoints = {
    .route = route,
    .route_control = route_control,
    .ws_input = dm_backend_ws_parse,
};
