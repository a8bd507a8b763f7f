#include "parsers/http.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* llhttp callbacks. A span split across two execute calls arrives in two
 * pieces that are adjacent in the caller's contiguous buffer: extend it. */

static struct dm_http_parser *
self(llhttp_t *ll)
{
    return ll->data;
}

static void
span_extend(struct dm_span *s, const char *at, size_t len)
{
    if (s->p == NULL) {
        s->p = at;
        s->len = len;
    } else {
        s->len = (size_t)(at + len - s->p);
    }
}

static int
on_message_begin(llhttp_t *ll)
{
    struct dm_http_parser *p = self(ll);
    p->_in_head = true;
    p->_open = true;
    p->_last = 0;
    p->_versioned = false;
    p->_url_end = NULL;
    p->body_bytes = 0;
    if (p->msg != NULL) {
        p->msg->method = (struct dm_span){ NULL, 0 };
        p->msg->target = (struct dm_span){ NULL, 0 };
        p->msg->nfields = 0;
        p->msg->too_many_fields = false;
    }
    return 0;
}

static int
on_method(llhttp_t *ll, const char *at, size_t len)
{
    struct dm_http_parser *p = self(ll);
    if (p->msg != NULL && !p->_method_own) {
        span_extend(&p->msg->method, at, len);
    }
    return 0;
}

static int
on_url(llhttp_t *ll, const char *at, size_t len)
{
    struct dm_http_parser *p = self(ll);
    p->_url_end = at + len;
    if (p->msg != NULL) {
        span_extend(&p->msg->target, at, len);
    }
    return 0;
}

static int
on_version(llhttp_t *ll, const char *at, size_t len)
{
    (void)at;
    (void)len;
    self(ll)->_versioned = true;
    return 0;
}

static int
on_header_field(llhttp_t *ll, const char *at, size_t len)
{
    struct dm_http_parser *p = self(ll);
    struct dm_http_msg *m = p->msg;
    if (m == NULL || !p->_in_head) {
        return 0; /* trailer fields are forwarded raw, not recorded */
    }
    if (p->_last != 1) {
        p->_last = 1;
        if (m->nfields == m->max_fields) {
            m->too_many_fields = true;
            return 0;
        }
        m->fields[m->nfields++] = (struct dm_http_field){ { NULL, 0 }, { NULL, 0 } };
    }
    if (!m->too_many_fields) {
        span_extend(&m->fields[m->nfields - 1].name, at, len);
    }
    return 0;
}

static int
on_header_value(llhttp_t *ll, const char *at, size_t len)
{
    struct dm_http_parser *p = self(ll);
    struct dm_http_msg *m = p->msg;
    p->_last = 2;
    if (m == NULL || !p->_in_head || m->too_many_fields || m->nfields == 0) {
        return 0;
    }
    span_extend(&m->fields[m->nfields - 1].value, at, len);
    return 0;
}

static int
on_headers_complete(llhttp_t *ll)
{
    struct dm_http_parser *p = self(ll);
    if (ll->type == HTTP_REQUEST && !p->_versioned) {
        p->_reason = "request line without an HTTP version (HTTP/0.9)";
        return -1;
    }
    p->_in_head = false;
    p->_framing = 0;
    p->_last_chunk = false;
    p->_ev = DM_HTTP_HEAD_DONE;
    /* Responses to HEAD, and 1xx, 204 and 304 responses, have no body whatever
     * their Content-Length says. */
    unsigned st = ll->status_code;
    if (ll->type == HTTP_RESPONSE &&
        (p->_no_body || (st >= 100 && st < 200) || st == 204 || st == 304)) {
        ll->flags |= F_SKIPBODY;
    }
    return HPE_PAUSED;
}

/* The framing read since the last data, up to end (in this call's input), bounded. */
static bool
body_framing(struct dm_http_parser *p, const char *end)
{
    size_t run = p->_data_end != NULL ? (size_t)(end - p->_data_end)
                                      : p->_framing + (size_t)(end - p->_call_start);
    if (run > DM_HTTP_CHUNK_LINE_MAX) {
        p->_reason = "chunk-size line (with its extensions) too long";
        return false;
    }
    p->_framing = (uint32_t)run;
    return true;
}

static int
on_body(llhttp_t *ll, const char *at, size_t len)
{
    struct dm_http_parser *p = self(ll);
    if (ll->type == HTTP_REQUEST && !body_framing(p, at)) {
        return -1;
    }
    p->_data_end = at + len;
    p->_framing = 0;
    p->body_bytes += len;
    if (p->on_body != NULL) {
        p->on_body(p->body_arg, at, len);
    }
    return 0;
}

/* The last chunk: pause where its trailer section begins, so the caller
 * holds the trailers until they are checked (dm_http_check_trailers, or
 * dm_http_check_response_trailers). */
static int
on_chunk_header(llhttp_t *ll)
{
    if (ll->content_length == 0) {
        self(ll)->_last_chunk = true;
        self(ll)->_ev = DM_HTTP_TRAILERS;
        return HPE_PAUSED;
    }
    return 0;
}

static int
on_message_complete(llhttp_t *ll)
{
    self(ll)->_open = false;
    self(ll)->_method_at = NULL;
    self(ll)->_method_own = false;
    self(ll)->_ev = DM_HTTP_MSG_DONE;
    return HPE_PAUSED;
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_method = on_method,
    .on_url = on_url,
    .on_version = on_version,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_chunk_header = on_chunk_header,
    .on_message_complete = on_message_complete,
};

void
dm_http_parser_init(struct dm_http_parser *p, bool is_request)
{
    struct dm_http_msg *msg = p->msg;
    memset(p, 0, sizeof(*p));
    p->msg = msg;
    llhttp_init(&p->_ll, is_request ? HTTP_REQUEST : HTTP_RESPONSE, &settings);
    p->_ll.data = p;
}

/* The request methods llhttp 8.1 knows (HTTP's, not RTSP's). */
static const char *const known_methods[] = {
#define DM_KNOWN_METHOD(num, name, string) #string,
    HTTP_METHOD_MAP(DM_KNOWN_METHOD)
#undef DM_KNOWN_METHOD
        "PRI",
};

/* The characters of a method: nginx's (upper case letters, '-' and '_'). */
static size_t
method_span(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len && ((s[i] >= 'A' && s[i] <= 'Z') || s[i] == '-' || s[i] == '_')) {
        i++;
    }
    return i;
}

/*
 * A request's method is read whole before llhttp sees it, so that one llhttp
 * does not know (QUERY, BAN, a site's own) is forwarded, as nginx and HAProxy
 * do, and not refused: llhttp is given GET in its place, and the method span
 * stays the client's. Whatever the reads' sizes, the same method is taken
 * the same way. Returns how many bytes of data were taken (the method so
 * far, all of data when it goes on), or -1 after an llhttp error.
 */
static long
take_method(struct dm_http_parser *p, const char *data, size_t len, bool *done)
{
    *done = false;
    if (p->_method_at == NULL) {
        size_t crlf = 0;
        while (crlf < len && (data[crlf] == '\r' || data[crlf] == '\n')) {
            crlf++;
        }
        if (crlf > 0) {
            /* Blank lines before a request line: llhttp's to take or refuse. */
            llhttp_errno_t e = llhttp_execute(&p->_ll, data, crlf);
            return e == HPE_OK ? (long)crlf : -1;
        }
        if (len == 0 || method_span(data, 1) == 0) {
            *done = true; /* not a method: llhttp says why */
            return 0;
        }
        p->_method_at = data;
        p->_method_len = 0;
    }
    size_t n = method_span(data, len);
    p->_method_len += n;
    if (n == len) {
        return (long)n; /* it goes on in the next read */
    }
    *done = true;
    bool known = false;
    for (size_t i = 0; i < sizeof(known_methods) / sizeof(known_methods[0]) && !known; i++) {
        known = strlen(known_methods[i]) == p->_method_len &&
                memcmp(known_methods[i], p->_method_at, p->_method_len) == 0;
    }
    /* Not followed by a space: llhttp refuses it as it is. */
    p->_method_own = !known && data[n] == ' ';
    llhttp_errno_t e = p->_method_own ? llhttp_execute(&p->_ll, "GET", 3)
                                      : llhttp_execute(&p->_ll, p->_method_at, p->_method_len);
    if (e != HPE_OK) {
        return -1;
    }
    if (p->_method_own && p->msg != NULL) {
        p->msg->method = (struct dm_span){ p->_method_at, p->_method_len };
    }
    return (long)n;
}

static int parse_on(struct dm_http_parser *p, const char *data, size_t len, size_t *consumed);

int
dm_http_parse(struct dm_http_parser *p, const char *data, size_t len, size_t *consumed)
{
    p->_ev = DM_HTTP_AGAIN;
    size_t taken = 0;
    if (p->_ll.type == HTTP_REQUEST && !p->_open) {
        bool done = false;
        while (!done && taken < len) {
            long n = take_method(p, data + taken, len - taken, &done);
            if (n < 0) {
                return -1;
            }
            taken += (size_t)n;
        }
        if (!done) {
            *consumed = len;
            return DM_HTTP_AGAIN;
        }
    }
    int r = parse_on(p, data + taken, len - taken, consumed);
    *consumed += taken;
    return r;
}

/* dm_http_parse() once a request's method is llhttp's. */
static int
parse_on(struct dm_http_parser *p, const char *data, size_t len, size_t *consumed)
{
    *consumed = 0;
    p->_call_start = data;
    p->_data_end = NULL;
    /* A request's body only: a server's framing is its own affair. */
    bool in_body = p->_ll.type == HTTP_REQUEST && p->_open && !p->_in_head && !p->_last_chunk;
    llhttp_errno_t e = llhttp_execute(&p->_ll, data, len);
    /* llhttp 8 reads a request line without a version (HTTP/0.9's simple
     * request) as a head and goes on to wait for header fields: refuse it at
     * once, as HAProxy does. The head is contiguous, so the byte after the
     * target is in this call's data or the next one's. */
    const char *u = p->_url_end;
    if (u != NULL && !p->_versioned && p->_in_head && u >= data && u < data + len &&
        (*u == '\r' || *u == '\n')) {
        p->_reason = "request line without an HTTP version (HTTP/0.9)";
        return -1;
    }
    if (e == HPE_OK) {
        *consumed = len;
        if (in_body && p->_open && !p->_last_chunk && !body_framing(p, data + len)) {
            return -1;
        }
        return DM_HTTP_AGAIN;
    }
    if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE) {
        const char *pos = llhttp_get_error_pos(&p->_ll);
        *consumed = (size_t)(pos - data);
        /* A request's last chunk line is counted up to its trailers, which
         * are bounded as a head is; a response's are not framing either. */
        bool counted = in_body && (p->_ev == DM_HTTP_TRAILERS || !p->_last_chunk);
        if (counted && !body_framing(p, pos)) {
            return -1;
        }
        if (p->_ev == DM_HTTP_TRAILERS || p->_ev == DM_HTTP_MSG_DONE) {
            p->_framing = 0;
        }
        if (e == HPE_PAUSED_UPGRADE) {
            return DM_HTTP_UPGRADE;
        }
        llhttp_resume(&p->_ll);
        return p->_ev;
    }
    if (e == HPE_PAUSED_H2_UPGRADE) {
        p->_reason = "an HTTP/2 connection preface (PRI *): this listener speaks HTTP/1.1";
    }
    return -1;
}

void
dm_http_parser_expect_no_body(struct dm_http_parser *p, bool no_body)
{
    p->_no_body = no_body;
}

int
dm_http_parse_eof(struct dm_http_parser *p)
{
    if (!p->_open) {
        return DM_HTTP_AGAIN;
    }
    if (p->_in_head || !llhttp_message_needs_eof(&p->_ll)) {
        return -1; /* cut short: inside a head, or a body with a known end */
    }
    llhttp_errno_t e = llhttp_finish(&p->_ll);
    if (e == HPE_OK || e == HPE_PAUSED) {
        return DM_HTTP_MSG_DONE;
    }
    return -1;
}

void
dm_http_parser_next(struct dm_http_parser *p)
{
    p->_last = 0;
}

const char *
dm_http_parser_error(const struct dm_http_parser *p)
{
    if (p->_reason != NULL) {
        return p->_reason;
    }
    const char *r = llhttp_get_error_reason(&p->_ll);
    return r != NULL ? r : llhttp_errno_name(llhttp_get_errno(&p->_ll));
}

unsigned
dm_http_parser_status(const struct dm_http_parser *p)
{
    return p->_ll.status_code;
}

unsigned
dm_http_parser_version(const struct dm_http_parser *p)
{
    return p->_ll.http_major * 10u + p->_ll.http_minor;
}

bool
dm_http_parser_needs_eof(const struct dm_http_parser *p)
{
    return llhttp_message_needs_eof(&p->_ll) != 0;
}

const char *
dm_http_parser_data_end(const struct dm_http_parser *p)
{
    return p->_data_end;
}

bool
dm_http_parser_keep_alive(const struct dm_http_parser *p)
{
    return llhttp_should_keep_alive(&p->_ll) != 0;
}

/* ---- checks ---- */

bool
dm_span_ieq(struct dm_span s, const char *lower)
{
    size_t n = strlen(lower);
    if (s.len != n) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s.p[i];
        if (c >= 'A' && c <= 'Z') {
            c = (char)(c + 32);
        }
        if (c != lower[i]) {
            return false;
        }
    }
    return true;
}

static bool
is_tchar(unsigned char c)
{
    /* RFC 9110 token characters. */
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
        return true;
    }
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

size_t
dm_http_token_len(const char *s)
{
    size_t n = 0;
    while (is_tchar((unsigned char)s[n])) {
        n++;
    }
    return n;
}

static bool
is_token(struct dm_span s)
{
    if (s.len == 0) {
        return false;
    }
    for (size_t i = 0; i < s.len; i++) {
        if (!is_tchar((unsigned char)s.p[i])) {
            return false;
        }
    }
    return true;
}

static bool
value_ok(struct dm_span s)
{
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.p[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            return false;
        }
    }
    return true;
}

static struct dm_span
trim(struct dm_span s)
{
    while (s.len > 0 && (s.p[0] == ' ' || s.p[0] == '\t')) {
        s.p++;
        s.len--;
    }
    while (s.len > 0 && (s.p[s.len - 1] == ' ' || s.p[s.len - 1] == '\t')) {
        s.len--;
    }
    return s;
}

/* Calls fn on each comma-separated, trimmed, non-empty element of v. */
static void
each_token(struct dm_span v, void (*fn)(void *arg, struct dm_span tok), void *arg)
{
    const char *p = v.p;
    const char *end = v.p + v.len;
    while (p < end) {
        const char *c = memchr(p, ',', (size_t)(end - p));
        if (c == NULL) {
            c = end;
        }
        struct dm_span t = trim((struct dm_span){ p, (size_t)(c - p) });
        if (t.len > 0) {
            fn(arg, t);
        }
        p = c + 1;
    }
}

/* Every LF is preceded by CR, every CR followed by LF, and no line folds. */
static const char *
check_raw_head(const char *head, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = head[i];
        if (c == '\r') {
            if (i + 1 >= len || head[i + 1] != '\n') {
                return "bare CR in head";
            }
        } else if (c == '\n') {
            if (i == 0 || head[i - 1] != '\r') {
                return "bare LF in head";
            }
            if (i + 1 < len && (head[i + 1] == ' ' || head[i + 1] == '\t')) {
                return "obs-fold (folded header line)";
            }
        } else if (c == 0) {
            return "NUL in head";
        }
    }
    return NULL;
}

struct conn_tokens {
    const struct dm_http_msg *msg;
    struct dm_http_info *info;
    bool close, keep_alive, upgrade;
};

static void
connection_token(void *arg, struct dm_span t)
{
    struct conn_tokens *ct = arg;
    if (dm_span_ieq(t, "close")) {
        ct->close = true;
    } else if (dm_span_ieq(t, "keep-alive")) {
        ct->keep_alive = true;
    } else if (dm_span_ieq(t, "upgrade")) {
        ct->upgrade = true;
    } else {
        /* Fields named here are hop-by-hop too: dropped when forwarding. */
        ct->info->conn_fields = true;
    }
}

struct te_state {
    unsigned fields;     /* Transfer-Encoding fields, even empty ones */
    unsigned count;      /* codings in them */
    unsigned chunked_at; /* 1-based index of "chunked", 0 = none */
    bool bad;
};

static void
te_token(void *arg, struct dm_span t)
{
    struct te_state *te = arg;
    te->count++;
    if (!is_token(t)) {
        te->bad = true;
    }
    if (dm_span_ieq(t, "chunked")) {
        if (te->chunked_at != 0) {
            te->bad = true;
        }
        te->chunked_at = te->count;
    }
}

static bool
parse_length(struct dm_span v, uint64_t *out)
{
    v = trim(v);
    if (v.len == 0 || v.len > 19) {
        return false;
    }
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.p[i] < '0' || v.p[i] > '9') {
            return false;
        }
        n = n * 10 + (uint64_t)(v.p[i] - '0');
    }
    *out = n;
    return true;
}

/* The checks common to requests and responses. */
static int
check_fields(const char *head, size_t head_len, const struct dm_http_msg *msg,
             struct dm_http_info *info, struct te_state *te, unsigned *nlength,
             struct conn_tokens *ct, const char **reason)
{
    if (msg->too_many_fields) {
        *reason = "too many header fields";
        return 431;
    }
    const char *raw = check_raw_head(head, head_len);
    if (raw != NULL) {
        *reason = raw;
        return 400;
    }
    for (unsigned i = 0; i < msg->nfields; i++) {
        const struct dm_http_field *f = &msg->fields[i];
        if (!is_token(f->name)) {
            *reason = "invalid header field name (whitespace before the colon?)";
            return 400;
        }
        if (!value_ok(f->value)) {
            *reason = "invalid character in a header field value";
            return 400;
        }
        if (dm_span_ieq(f->name, "content-length")) {
            (*nlength)++;
            if (!parse_length(f->value, &info->content_length)) {
                *reason = "malformed Content-Length";
                return 400;
            }
            info->has_length = true;
        } else if (dm_span_ieq(f->name, "transfer-encoding")) {
            te->fields++;
            each_token(f->value, te_token, te);
            if (trim(f->value).len == 0) {
                te->bad = true;
            }
        } else if (dm_span_ieq(f->name, "connection")) {
            each_token(f->value, connection_token, ct);
        }
    }
    if (*nlength > 1) {
        *reason = "more than one Content-Length";
        return 400;
    }
    if (te->fields > 0) {
        if (te->bad || te->count == 0 || te->chunked_at != te->count) {
            *reason = "Transfer-Encoding other than a final chunked";
            return 400;
        }
        if (info->has_length) {
            *reason = "both Content-Length and Transfer-Encoding";
            return 400;
        }
        info->chunked = true;
        info->te_other = te->count > 1;
    }
    return 0;
}

static bool is_hop_by_hop(struct dm_span n);

/*
 * Fields a trailer may not carry: those that frame a message, the hop-by-hop
 * ones and Trailer itself; in a request's, also those that route it and
 * those the proxy itself sets for the server, which a server merging
 * trailers into the head would otherwise trust.
 */
static bool
is_framing_or_proxied(struct dm_span n, bool response)
{
    static const char *const names[] = {
        "content-length",    "transfer-encoding", "trailer", "host", "forwarded", "via",
        "x-forwarded-proto", "x-forwarded-for",
    };
    size_t k = response ? 3 : sizeof(names) / sizeof(names[0]);
    for (size_t i = 0; i < k; i++) {
        if (dm_span_ieq(n, names[i])) {
            return true;
        }
    }
    return is_hop_by_hop(n);
}

static int check_trailers(const char *p, size_t len, bool response, unsigned max_fields,
                          const char **reason);

int
dm_http_check_trailers(const char *p, size_t len, const char **reason)
{
    return check_trailers(p, len, false, 0, reason) != 0 ? 400 : 0;
}

int
dm_http_check_response_trailers(const char *p, size_t len, unsigned max_fields, const char **reason)
{
    return check_trailers(p, len, true, max_fields, reason) != 0 ? 502 : 0;
}

static int
check_trailers(const char *p, size_t len, bool response, unsigned max_fields, const char **reason)
{
    unsigned nfields = 0;
    *reason = check_raw_head(p, len);
    if (*reason == NULL && len > 0 && (p[0] == ' ' || p[0] == '\t')) {
        *reason = "obs-fold (folded trailer line)";
    }
    if (*reason == NULL && (len < 2 || p[len - 2] != '\r' || p[len - 1] != '\n')) {
        *reason = "trailer section does not end with CRLF";
    }
    const char *end = p + len;
    bool ended = false;
    while (*reason == NULL && p < end) {
        const char *eol = memchr(p, '\r', (size_t)(end - p));
        if (eol == NULL) {
            break; /* not reached: check_raw_head saw every line end in CRLF */
        }
        if (eol == p) {
            ended = true;
            if (eol + 2 != end) {
                *reason = "bytes after the end of the trailer section";
            }
            break;
        }
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        struct dm_span name = { p, colon != NULL ? (size_t)(colon - p) : 0 };
        if (colon == NULL || !is_token(name)) {
            *reason = "malformed trailer field name";
        } else if (!value_ok((struct dm_span){ colon + 1, (size_t)(eol - colon - 1) })) {
            *reason = "control byte in a trailer field";
        } else if (is_framing_or_proxied(name, response)) {
            *reason = response ? "trailer field that frames the message or is hop-by-hop"
                               : "trailer field that frames, routes or is set by the proxy";
        } else if (max_fields > 0 && ++nfields > max_fields) {
            *reason = "too many trailer fields";
        }
        p = eol + 2;
    }
    if (*reason == NULL && !ended) {
        *reason = "trailer section without its final empty line";
    }
    return *reason != NULL ? -1 : 0;
}

/* The name part of a host[:port] (a bracketed IPv6 address keeps its brackets). */
static struct dm_span
host_name(struct dm_span h)
{
    if (h.len > 0 && h.p[0] == '[') {
        const char *close = memchr(h.p, ']', h.len);
        return close != NULL ? (struct dm_span){ h.p, (size_t)(close - h.p) + 1 } : h;
    }
    const char *colon = memchr(h.p, ':', h.len);
    return colon != NULL ? (struct dm_span){ h.p, (size_t)(colon - h.p) } : h;
}

static bool
same_name(struct dm_span a, struct dm_span b)
{
    return a.len == b.len && (a.len == 0 || strncasecmp(a.p, b.p, a.len) == 0);
}

int
dm_http_check_request(const char *head, size_t head_len, const struct dm_http_msg *msg,
                      unsigned version, struct dm_http_info *info, const char **reason)
{
    memset(info, 0, sizeof(*info));
    info->version = version;
    if (version != 10 && version != 11) {
        *reason = "HTTP version not supported";
        return 505;
    }
    if (dm_span_ieq(msg->method, "connect")) {
        *reason = "CONNECT is not supported";
        return 405;
    }
    struct te_state te = { 0 };
    struct conn_tokens ct = { .msg = msg, .info = info };
    unsigned nlength = 0;
    int st = check_fields(head, head_len, msg, info, &te, &nlength, &ct, reason);
    if (st != 0) {
        return st;
    }
    if (te.fields > 0 && version == 10) {
        *reason = "Transfer-Encoding in an HTTP/1.0 request";
        return 400;
    }
    if (te.fields > 0) {
        /* Chunked last, but after other codings (gzip, chunked), or in a
         * list with empty elements: one field of exactly chunked only (RFC
         * 9112, 6.1: a coding not understood is 501). */
        for (unsigned i = 0; i < msg->nfields; i++) {
            const struct dm_http_field *f = &msg->fields[i];
            if (dm_span_ieq(f->name, "transfer-encoding") &&
                (te.fields != 1 || !dm_span_ieq(trim(f->value), "chunked"))) {
                *reason = "Transfer-Encoding other than chunked";
                return 501;
            }
        }
    }
    unsigned nhost = 0;
    bool has_upgrade = false;
    for (unsigned i = 0; i < msg->nfields; i++) {
        const struct dm_http_field *f = &msg->fields[i];
        if (dm_span_ieq(f->name, "host")) {
            nhost++;
            info->host = trim(f->value);
        } else if (dm_span_ieq(f->name, "upgrade")) {
            has_upgrade = true;
        } else if (dm_span_ieq(f->name, "expect")) {
            /* RFC 9110, 10.1.1: an HTTP/1.0 request's 100-continue is ignored
             * (and not forwarded: dm_http_write_request). */
            if (version == 11 && dm_span_ieq(trim(f->value), "100-continue")) {
                info->expect_continue = true;
            }
        }
    }
    if (nhost > 1) {
        *reason = "more than one Host";
        return 400;
    }
    if (nhost == 0 && version == 11) {
        *reason = "missing Host in an HTTP/1.1 request";
        return 400;
    }
    for (size_t i = 0; i < info->host.len; i++) {
        unsigned char c = (unsigned char)info->host.p[i];
        if (c <= ' ' || c == '/' || c == '\\' || c == '@' || c == 0x7f) {
            *reason = "invalid Host";
            return 400;
        }
    }
    struct dm_span t = msg->target;
    if (t.len == 0) {
        *reason = "empty request target";
        return 400;
    }
    if (memchr(t.p, '#', t.len) != NULL) {
        /* RFC 9112 section 3.2: no fragment in a request target; forwarded,
         * a rule on the path's end would read one path and the server
         * serve another (as HAProxy's CVE-2023-45539). */
        *reason = "fragment (#) in the request target";
        return 400;
    }
    if (t.p[0] == '/') {
        info->path = t;
    } else if (t.len == 1 && t.p[0] == '*') {
        /* RFC 9112 section 3.2.4: the asterisk form is OPTIONS's only. */
        if (!dm_span_ieq(msg->method, "options")) {
            *reason = "request target * is for OPTIONS only";
            return 400;
        }
        info->path = t;
    } else if ((t.len > 7 && strncasecmp(t.p, "http://", 7) == 0) ||
               (t.len > 8 && strncasecmp(t.p, "https://", 8) == 0)) {
        /* Absolute form: route and forward by its path. Its authority is
         * the request's host (RFC 9112 section 3.2.2), so it must name the
         * host Host names, or the proxy would route by one and the client
         * mean the other; no user information, no empty host (RFC 9110
         * section 4.2). */
        const char *end = t.p + t.len;
        const char *a = t.p + (t.p[4] == ':' ? 7 : 8);
        const char *p = a;
        while (p < end && *p != '/' && *p != '?') {
            p++;
        }
        struct dm_span auth = { a, (size_t)(p - a) };
        if (host_name(auth).len == 0 || memchr(auth.p, '@', auth.len) != NULL) {
            *reason = "bad authority in the request target";
            return 400;
        }
        if (nhost == 1 && !same_name(host_name(auth), host_name(info->host))) {
            *reason = "Host does not name the request target's host";
            return 400;
        }
        if (nhost == 0) {
            info->host = auth; /* HTTP/1.0 without Host: the target's */
        }
        /* "http://host?q" has an empty path: the request line gets "/?q". */
        info->path =
            p < end ? (struct dm_span){ p, (size_t)(end - p) } : (struct dm_span){ "/", 1 };
    } else {
        *reason = "bad request target";
        return 400;
    }
    info->upgrade = ct.upgrade && has_upgrade;
    info->keep_alive = version == 11 ? !ct.close : (ct.keep_alive && !ct.close);
    return 0;
}

int
dm_http_check_response(const char *head, size_t head_len, const struct dm_http_msg *msg,
                       unsigned version, struct dm_http_info *info, const char **reason)
{
    memset(info, 0, sizeof(*info));
    info->version = version;
    if (version != 10 && version != 11) {
        *reason = "server answered with an unsupported HTTP version";
        return 502;
    }
    /* The status line goes to the client as it came: no control byte in
     * its reason phrase (RFC 9112 section 4: HTAB, SP, VCHAR, obs-text). */
    for (size_t i = 0; i < head_len && head[i] != '\r' && head[i] != '\n'; i++) {
        unsigned char ch = (unsigned char)head[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            *reason = "control byte in the status line";
            return 502;
        }
    }
    struct te_state te = { 0 };
    struct conn_tokens ct = { .msg = msg, .info = info };
    unsigned nlength = 0;
    int st = check_fields(head, head_len, msg, info, &te, &nlength, &ct, reason);
    if (st != 0) {
        return 502;
    }
    if (te.fields > 0 && version == 10) {
        /* Faulty framing (RFC 9112, 6.1): HTTP/1.0 has no chunked, and the
         * server may mean the body to end with the connection. */
        *reason = "Transfer-Encoding in an HTTP/1.0 response";
        return 502;
    }
    info->upgrade = ct.upgrade;
    info->keep_alive = version == 11 ? !ct.close : (ct.keep_alive && !ct.close);
    return 0;
}

/* ---- rewriting ---- */

struct out {
    char *p;
    size_t len, cap;
    bool full;
};

static void
put(struct out *o, const char *s, size_t n)
{
    if (o->full || o->cap - o->len < n) {
        o->full = true;
        return;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void
puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void
put_field(struct out *o, struct dm_span name, struct dm_span value)
{
    put(o, name.p, name.len);
    put(o, ": ", 2);
    put(o, value.p, value.len);
    put(o, "\r\n", 2);
}

static bool
is_hop_by_hop(struct dm_span n)
{
    /* Not Trailer: it is end-to-end (RFC 9110, 6.6.2). */
    static const char *const names[] = { "connection", "keep-alive", "proxy-connection", "te",
                                         "upgrade" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (dm_span_ieq(n, names[i])) {
            return true;
        }
    }
    return false;
}

struct named {
    struct dm_span name;
    bool found;
};

static void
match_token(void *arg, struct dm_span t)
{
    struct named *nm = arg;
    if (t.len == nm->name.len && strncasecmp(t.p, nm->name.p, t.len) == 0) {
        nm->found = true;
    }
}

/* True when field i is named in a Connection field. The framing fields and
 * Host are never dropped: the body is framed by them whatever Connection says. */
static bool
dropped(const struct dm_http_msg *msg, const struct dm_http_info *info, unsigned i)
{
    if (!info->conn_fields) {
        return false;
    }
    struct dm_span n = msg->fields[i].name;
    if (dm_span_ieq(n, "content-length") || dm_span_ieq(n, "transfer-encoding") ||
        dm_span_ieq(n, "host")) {
        return false;
    }
    struct named nm = { n, false };
    for (unsigned j = 0; j < msg->nfields && !nm.found; j++) {
        if (dm_span_ieq(msg->fields[j].name, "connection")) {
            each_token(msg->fields[j].value, match_token, &nm);
        }
    }
    return nm.found;
}

/* Whether name is fw's set_name[k] (in any case). */
static bool
is_set(const struct dm_http_forward *fw, int k, struct dm_span name)
{
    const char *n = fw->set_name[k];
    return n != NULL && name.len == strlen(n) && strncasecmp(name.p, n, name.len) == 0;
}

size_t
dm_http_write_request(char *out, size_t cap, const struct dm_http_msg *msg,
                      const struct dm_http_info *info, const struct dm_http_forward *fw)
{
    struct out o = { out, 0, cap, false };
    put(&o, msg->method.p, msg->method.len);
    put(&o, " ", 1);
    if (info->path.len > 0 && info->path.p[0] == '?') {
        put(&o, "/", 1);
    }
    put(&o, info->path.p, info->path.len);
    puts_(&o, " HTTP/1.1\r\n");
    bool xff = false;
    bool via = false;
    bool host = false;
    for (unsigned i = 0; i < msg->nfields; i++) {
        const struct dm_http_field *f = &msg->fields[i];
        /* Upgrade goes with an upgrade, even named in Connection (as it must be). */
        if (is_hop_by_hop(f->name)) {
            if (info->upgrade && dm_span_ieq(f->name, "upgrade")) {
                put_field(&o, f->name, f->value);
            }
            continue;
        }
        if (dropped(msg, info, i)) {
            continue;
        }
        if (info->version == 10 && dm_span_ieq(f->name, "expect") &&
            dm_span_ieq(trim(f->value), "100-continue")) {
            continue; /* ignored in an HTTP/1.0 request: the upstream request is 1.1 */
        }
        if (dm_span_ieq(f->name, "x-forwarded-proto")) {
            continue;
        }
        if (is_set(fw, 0, f->name) || is_set(fw, 1, f->name)) {
            continue;
        }
        if (dm_span_ieq(f->name, "host")) {
            host = true;
        }
        put(&o, f->name.p, f->name.len);
        put(&o, ": ", 2);
        put(&o, f->value.p, f->value.len);
        if (!xff && fw->client_addr != NULL && dm_span_ieq(f->name, "x-forwarded-for")) {
            /* Several X-Forwarded-For fields form one list: append to the last. */
            bool later = false;
            for (unsigned j = i + 1; j < msg->nfields; j++) {
                later = later || dm_span_ieq(msg->fields[j].name, "x-forwarded-for");
            }
            if (!later) {
                puts_(&o, ", ");
                puts_(&o, fw->client_addr);
                xff = true;
            }
        } else if (!via && fw->via != NULL && dm_span_ieq(f->name, "via")) {
            bool later = false;
            for (unsigned j = i + 1; j < msg->nfields; j++) {
                later = later || dm_span_ieq(msg->fields[j].name, "via");
            }
            if (!later) {
                puts_(&o, ", ");
                puts_(&o, fw->via);
                via = true;
            }
        }
        put(&o, "\r\n", 2);
    }
    if (!host && fw->default_host != NULL) {
        puts_(&o, "Host: ");
        puts_(&o, fw->default_host);
        puts_(&o, "\r\n");
    }
    if (!xff && fw->client_addr != NULL) {
        puts_(&o, "X-Forwarded-For: ");
        puts_(&o, fw->client_addr);
        puts_(&o, "\r\n");
    }
    if (fw->proto != NULL) {
        puts_(&o, "X-Forwarded-Proto: ");
        puts_(&o, fw->proto);
        puts_(&o, "\r\n");
    }
    if (!via && fw->via != NULL) {
        puts_(&o, "Via: ");
        puts_(&o, fw->via);
        puts_(&o, "\r\n");
    }
    for (int k = 0; k < 2; k++) {
        if (fw->set_name[k] != NULL && fw->set_value[k] != NULL) {
            puts_(&o, fw->set_name[k]);
            puts_(&o, ": ");
            puts_(&o, fw->set_value[k]);
            puts_(&o, "\r\n");
        }
    }
    if (info->upgrade) {
        puts_(&o, "Connection: upgrade\r\n");
    }
    put(&o, "\r\n", 2);
    return o.full ? 0 : o.len;
}

size_t
dm_http_write_response(char *out, size_t cap, const char *head, size_t head_len,
                       const struct dm_http_msg *msg, const struct dm_http_info *info,
                       unsigned client_version, bool close)
{
    struct out o = { out, 0, cap, false };
    /* Empty lines before a status line are allowed (and skipped by llhttp). */
    while (head_len >= 2 && head[0] == '\r' && head[1] == '\n') {
        head += 2;
        head_len -= 2;
    }
    /* Status line: our version, the server's code and reason. */
    const char *eol = memchr(head, '\r', head_len);
    const char *sp = memchr(head, ' ', head_len);
    if (eol == NULL || sp == NULL || sp > eol) {
        return 0;
    }
    puts_(&o, "HTTP/1.1");
    put(&o, sp, (size_t)(eol - sp));
    put(&o, "\r\n", 2);
    bool is101 = eol - sp >= 4 && memcmp(sp, " 101", 4) == 0;
    /* A 1xx or 204 has no body, and may not say it has one (RFC 9110, 8.6;
     * RFC 9112, 6.1): its framing fields are the server's error, not passed on. */
    bool bodiless = eol - sp >= 4 && (sp[1] == '1' || memcmp(sp, " 204", 4) == 0);
    for (unsigned i = 0; i < msg->nfields; i++) {
        const struct dm_http_field *f = &msg->fields[i];
        if (bodiless &&
            (dm_span_ieq(f->name, "content-length") || dm_span_ieq(f->name, "transfer-encoding"))) {
            continue;
        }
        if (client_version == 10 && dm_span_ieq(f->name, "transfer-encoding")) {
            continue; /* every one of them: the body goes out de-chunked */
        }
        if (is_hop_by_hop(f->name)) {
            if (is101 && dm_span_ieq(f->name, "upgrade")) {
                put_field(&o, f->name, f->value);
            }
            continue;
        }
        if (dropped(msg, info, i)) {
            continue;
        }
        put_field(&o, f->name, f->value);
    }
    if (is101) {
        puts_(&o, "Connection: upgrade\r\n");
    } else if (close) {
        puts_(&o, "Connection: close\r\n");
    } else if (client_version == 10) {
        puts_(&o, "Connection: keep-alive\r\n");
    }
    put(&o, "\r\n", 2);
    return o.full ? 0 : o.len;
}
