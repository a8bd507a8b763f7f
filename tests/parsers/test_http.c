/*
 * Tests of parsers/http.c: heads recorded as spans, the pauses at the end of
 * the head and of the message, the checks that refuse what could be read two
 * ways, and the rewriting of request and response heads.
 *
 * Every input goes through parse_all(), which feeds it the way the proxy does:
 * one exactly sized heap copy (so ASan sees any read past its end), parsed
 * whole, then split in two at every offset (first [0,k), then [k,n) of the
 * same buffer), then one byte per call. At every head it runs the check and
 * the rewrite, and it fails unless every way of feeding gives what the whole
 * parse gave. Tests then assert on the whole parse.
 */
#include "dm_test.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parsers/http.h"

#define MAX_FIELDS 40 /* room for a field past the 32nd */
#define MAX_EVENTS 16
#define MAX_HEADS  4
#define TEXT_CAP   128
#define OUT_CAP    2048
#define BODY_CAP   256
#define NO_OFF     ((size_t)-1)
#define BYTEWISE   ((size_t)-1)
#define NO_EOF     100 /* dm_http_parse_eof() was not called */

/* Feeds a string literal with its exact length (it may hold NUL bytes). */
#define LIT(s) (s), (sizeof(s) - 1)

/* What the proxy adds, in every request rewrite of this file. */
static const struct dm_http_forward forward = {
    .client_addr = "10.0.0.9",
    .proto = "http",
    .via = "1.1 dimmer",
    .default_host = "backend:8080",
};

/* A span, copied out of the buffer so runs can be compared after it is freed. */
struct text {
    bool set;   /* the span's pointer was not NULL */
    size_t off; /* where it starts in the buffer, NO_OFF when outside it */
    size_t len;
    char s[TEXT_CAP];
};

/* One head, as seen at DM_HTTP_HEAD_DONE, with its check and rewrite. */
struct head {
    size_t start, end; /* its bytes in the buffer */
    struct text method, target;
    unsigned nfields;
    bool too_many_fields;
    struct text name[MAX_FIELDS], value[MAX_FIELDS];
    unsigned status, version;
    bool needs_eof;
    int check; /* dm_http_check_request() or _response() */
    const char *reason;
    /* struct dm_http_info, when check is 0 */
    unsigned i_version;
    bool keep_alive, chunked, has_length, upgrade, expect_continue;
    uint64_t content_length;
    bool conn_fields;
    struct text host, path;
    /* dm_http_write_request() or _response(), when check is 0 */
    size_t outlen;
    char out[OUT_CAP + 1];
};

struct run {
    unsigned nev;
    int ev[MAX_EVENTS];
    size_t at[MAX_EVENTS];           /* offset in the buffer after the event */
    uint64_t body_bytes[MAX_EVENTS]; /* parser's body_bytes at the event */
    unsigned nheads;
    struct head head[MAX_HEADS];
    int eof; /* dm_http_parse_eof(), or NO_EOF */
    size_t nbody;
    char body[BODY_CAP]; /* decoded body bytes of all messages */
};

struct opts {
    bool response;
    unsigned max_fields;              /* 0: MAX_FIELDS */
    bool no_body;                     /* response to a HEAD request */
    bool eof;                         /* signal EOF after the last byte */
    unsigned client_version;          /* responses; 0: 11 */
    bool close;                       /* responses */
    const struct dm_http_forward *fw; /* requests; NULL: forward */
};

struct feeder {
    struct dm_http_parser p;
    struct dm_http_msg msg;
    const char *buf;
    size_t n;
    size_t msg_start;
    bool stopped;
    bool sweep; /* try every too small cap for the rewrite */
    const struct opts *o;
    struct run *r;
};

static void
text_of(struct text *t, const char *buf, size_t n, struct dm_span s)
{
    memset(t, 0, sizeof(*t));
    t->set = s.p != NULL;
    t->len = s.len;
    t->off = NO_OFF;
    if (s.p == NULL) {
        assert_int_equal(s.len, 0);
        return;
    }
    uintptr_t b = (uintptr_t)buf;
    uintptr_t q = (uintptr_t)s.p;
    if (q >= b && q - b <= n) {
        t->off = (size_t)(q - b);
        assert_true(s.len <= n - t->off); /* a span never runs past the buffer */
    }
    memcpy(t->s, s.p, s.len < TEXT_CAP - 1 ? s.len : TEXT_CAP - 1);
}

static void
on_body(void *arg, const char *p, size_t len)
{
    struct run *r = arg;
    assert_true(len <= BODY_CAP - r->nbody);
    memcpy(r->body + r->nbody, p, len);
    r->nbody += len;
}

static size_t
rewrite(struct feeder *f, char *out, size_t cap, const char *head, size_t head_len,
        const struct dm_http_info *info)
{
    const struct opts *o = f->o;
    if (!o->response) {
        return dm_http_write_request(out, cap, &f->msg, info, o->fw != NULL ? o->fw : &forward);
    }
    return dm_http_write_response(out, cap, head, head_len, &f->msg, info,
                                  o->client_version != 0 ? o->client_version : 11, o->close);
}

/* Rewrites the head into exactly sized heap buffers: 0 for every cap too small. */
static void
record_rewrite(struct feeder *f, struct head *h, const char *head, size_t head_len,
               const struct dm_http_info *info)
{
    char *out = malloc(OUT_CAP);
    assert_non_null(out);
    size_t n = rewrite(f, out, OUT_CAP, head, head_len, info);
    assert_true(n > 0 && n <= OUT_CAP);
    memcpy(h->out, out, n);
    h->out[n] = '\0';
    h->outlen = n;
    free(out);
    /* Every rewrite ends its head, and says HTTP/1.1. */
    assert_true(n >= 4 && memcmp(h->out + n - 4, "\r\n\r\n", 4) == 0);
    if (f->o->response) {
        assert_memory_equal(h->out, "HTTP/1.1 ", 9);
    } else {
        char *eol = strstr(h->out, "\r\n");
        assert_non_null(eol);
        assert_true(eol - h->out > 9);
        assert_memory_equal(eol - 9, " HTTP/1.1", 9);
    }
    if (!f->sweep) {
        return;
    }
    for (size_t cap = 0; cap <= n; cap++) {
        char *small = malloc(cap);
        if (small == NULL) {
            assert_int_equal(cap, 0); /* malloc(0) may return NULL */
            continue;
        }
        size_t m = rewrite(f, small, cap, head, head_len, info);
        if (cap < n) {
            assert_int_equal(m, 0);
        } else {
            assert_int_equal(m, n);
            assert_memory_equal(small, h->out, n);
        }
        free(small);
    }
}

static void
record_head(struct feeder *f, size_t end)
{
    struct run *r = f->r;
    assert_true(r->nheads < MAX_HEADS);
    struct head *h = &r->head[r->nheads++];
    const struct dm_http_msg *m = &f->msg;
    h->start = f->msg_start;
    h->end = end;
    text_of(&h->method, f->buf, f->n, m->method);
    text_of(&h->target, f->buf, f->n, m->target);
    h->nfields = m->nfields;
    h->too_many_fields = m->too_many_fields;
    assert_true(m->nfields <= m->max_fields);
    for (unsigned i = 0; i < m->nfields; i++) {
        text_of(&h->name[i], f->buf, f->n, m->fields[i].name);
        text_of(&h->value[i], f->buf, f->n, m->fields[i].value);
        /* A head field lies inside its head. */
        assert_true(h->name[i].off != NO_OFF && h->name[i].off >= h->start);
        assert_true(h->name[i].off + h->name[i].len <= end);
        if (h->value[i].set) {
            assert_true(h->value[i].off != NO_OFF && h->value[i].off >= h->start);
            assert_true(h->value[i].off + h->value[i].len <= end);
        }
    }
    h->status = dm_http_parser_status(&f->p);
    h->version = dm_http_parser_version(&f->p);
    h->needs_eof = dm_http_parser_needs_eof(&f->p);

    const char *head = f->buf + h->start;
    size_t head_len = end - h->start;
    struct dm_http_info info;
    const char *reason = NULL;
    if (f->o->response) {
        h->check = dm_http_check_response(head, head_len, m, h->version, &info, &reason);
    } else {
        h->check = dm_http_check_request(head, head_len, m, h->version, &info, &reason);
    }
    h->reason = reason;
    if (h->check != 0) {
        assert_non_null(reason);
        return;
    }
    h->i_version = info.version;
    h->keep_alive = info.keep_alive;
    h->chunked = info.chunked;
    h->has_length = info.has_length;
    h->content_length = info.content_length;
    h->upgrade = info.upgrade;
    h->expect_continue = info.expect_continue;
    h->conn_fields = info.conn_fields;
    text_of(&h->host, f->buf, f->n, info.host);
    text_of(&h->path, f->buf, f->n, info.path);
    record_rewrite(f, h, head, head_len, &info);
}

static void
record_event(struct feeder *f, int ev, size_t at)
{
    struct run *r = f->r;
    assert_true(r->nev < MAX_EVENTS);
    r->ev[r->nev] = ev;
    r->at[r->nev] = at;
    r->body_bytes[r->nev] = f->p.body_bytes;
    r->nev++;
}

/* Feeds buf[from, to) as the proxy does: after each event, again with the rest. */
static void
feed(struct feeder *f, size_t from, size_t to)
{
    size_t off = from;
    while (!f->stopped) {
        size_t used = 0;
        int ev = dm_http_parse(&f->p, f->buf + off, to - off, &used);
        if (ev < 0) {
            record_event(f, ev, NO_OFF);
            f->stopped = true;
            return;
        }
        assert_true(used <= to - off);
        off += used;
        if (ev == DM_HTTP_AGAIN) {
            assert_int_equal(off, to);
            return;
        }
        record_event(f, ev, off);
        if (ev == DM_HTTP_HEAD_DONE) {
            record_head(f, off);
        } else if (ev == DM_HTTP_MSG_DONE) {
            dm_http_parser_next(&f->p);
            f->msg_start = off;
        } else if (ev == DM_HTTP_TRAILERS) {
            /* the caller holds the trailer section from here */
        } else {
            assert_int_equal(ev, DM_HTTP_UPGRADE);
            f->stopped = true;
        }
    }
}

/* One run over text[0, n): whole (k == 0), split at k, or BYTEWISE. */
static struct run *
run_once(const char *text, size_t n, const struct opts *o, size_t k, bool sweep)
{
    struct run *r = calloc(1, sizeof(*r));
    char *buf = malloc(n > 0 ? n : 1);
    unsigned max_fields = o->max_fields != 0 ? o->max_fields : MAX_FIELDS;
    struct dm_http_field *fields = malloc(max_fields * sizeof(*fields));
    struct feeder *f = calloc(1, sizeof(*f));
    assert_non_null(r);
    assert_non_null(buf);
    assert_non_null(fields);
    assert_non_null(f);
    memcpy(buf, text, n);
    f->msg.fields = fields;
    f->msg.max_fields = max_fields;
    f->p.msg = &f->msg;
    dm_http_parser_init(&f->p, !o->response);
    assert_ptr_equal(f->p.msg, &f->msg);
    f->p.on_body = on_body;
    f->p.body_arg = r;
    dm_http_parser_expect_no_body(&f->p, o->no_body);
    f->buf = buf;
    f->n = n;
    f->o = o;
    f->r = r;
    f->sweep = sweep;
    if (k == BYTEWISE) {
        for (size_t i = 0; i < n; i++) {
            feed(f, i, i + 1);
        }
    } else if (k == 0 || k >= n) {
        feed(f, 0, n);
    } else {
        feed(f, 0, k);
        feed(f, k, n);
    }
    r->eof = NO_EOF;
    if (o->eof && !f->stopped) {
        r->eof = dm_http_parse_eof(&f->p);
    }
    free(f);
    free(fields);
    free(buf);
    return r;
}

#define SAME(cond, what)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fail_msg("%s: %s differs from the whole parse", how, what);                            \
        }                                                                                          \
    } while (0)

static void
same_text(const char *how, const char *what, const struct text *a, const struct text *b)
{
    SAME(a->set == b->set && a->off == b->off && a->len == b->len && strcmp(a->s, b->s) == 0, what);
}

static void
same_head(const char *how, const struct head *a, const struct head *b)
{
    SAME(a->start == b->start && a->end == b->end, "head position");
    same_text(how, "method", &a->method, &b->method);
    same_text(how, "target", &a->target, &b->target);
    SAME(a->nfields == b->nfields && a->too_many_fields == b->too_many_fields, "field count");
    for (unsigned i = 0; i < a->nfields; i++) {
        same_text(how, "field name", &a->name[i], &b->name[i]);
        same_text(how, "field value", &a->value[i], &b->value[i]);
    }
    SAME(a->status == b->status && a->version == b->version && a->needs_eof == b->needs_eof,
         "status, version or needs_eof");
    SAME(a->check == b->check, "check status");
    SAME((a->reason == NULL) == (b->reason == NULL) &&
             (a->reason == NULL || strcmp(a->reason, b->reason) == 0),
         "check reason");
    SAME(a->i_version == b->i_version && a->keep_alive == b->keep_alive &&
             a->chunked == b->chunked && a->has_length == b->has_length &&
             a->content_length == b->content_length && a->upgrade == b->upgrade &&
             a->expect_continue == b->expect_continue && a->conn_fields == b->conn_fields,
         "info");
    same_text(how, "info host", &a->host, &b->host);
    same_text(how, "info path", &a->path, &b->path);
    SAME(a->outlen == b->outlen && memcmp(a->out, b->out, a->outlen) == 0, "rewritten head");
}

/* b (a prefix parse when prefix) agrees with the whole parse a. */
static void
same_run(const char *how, const struct run *a, const struct run *b, bool prefix)
{
    if (prefix) {
        SAME(b->nev <= a->nev && b->nheads <= a->nheads, "event count");
    } else {
        SAME(a->nev == b->nev && a->nheads == b->nheads, "event count");
    }
    for (unsigned i = 0; i < b->nev; i++) {
        SAME(a->ev[i] == b->ev[i] && a->at[i] == b->at[i], "event");
        SAME(a->body_bytes[i] == b->body_bytes[i], "body_bytes");
    }
    for (unsigned i = 0; i < b->nheads; i++) {
        same_head(how, &a->head[i], &b->head[i]);
    }
    if (prefix) {
        SAME(b->nbody <= a->nbody && memcmp(a->body, b->body, b->nbody) == 0, "body");
    } else {
        SAME(a->eof == b->eof, "dm_http_parse_eof");
        SAME(a->nbody == b->nbody && memcmp(a->body, b->body, a->nbody) == 0, "body");
    }
}

/* Parses text whole, split at every offset and bytewise; returns the whole run. */
static struct run *
parse_all(const char *text, size_t n, const struct opts *o)
{
    struct run *whole = run_once(text, n, o, 0, true);
    char how[64];
    for (size_t k = 1; k < n; k++) {
        struct run *r = run_once(text, n, o, k, false);
        snprintf(how, sizeof(how), "split at %zu of %zu", k, n);
        same_run(how, whole, r, false);
        free(r);
    }
    struct run *r = run_once(text, n, o, BYTEWISE, false);
    snprintf(how, sizeof(how), "one byte per call (%zu)", n);
    same_run(how, whole, r, false);
    free(r);
    return whole;
}

static struct run *
parse_request(const char *text, size_t n)
{
    const struct opts o = { 0 };
    return parse_all(text, n, &o);
}

/* The index of the first field called name (case-sensitive), or -1. */
static int
field_index(const struct head *h, const char *name)
{
    for (unsigned i = 0; i < h->nfields; i++) {
        if (strcmp(h->name[i].s, name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* The request never reaches a server: llhttp fails before the head ends (and
 * the proxy answers 400), or the check answers status with a reason. */
static void
assert_request_refused(const char *text, size_t n, int status)
{
    struct run *r = parse_request(text, n);
    assert_true(r->nev >= 1);
    if (r->ev[0] < 0) {
        assert_int_equal(status, 400);
        assert_int_equal(r->nheads, 0);
    } else {
        assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
        assert_int_equal(r->head[0].check, status);
        assert_non_null(r->head[0].reason);
    }
    free(r);
}

/* The head is parsed, and the check itself answers status with a reason. */
static void
assert_check_answers(const char *text, size_t n, const struct opts *o, int status)
{
    struct run *r = parse_all(text, n, o);
    assert_true(r->nev >= 1);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->head[0].check, status);
    assert_non_null(r->head[0].reason);
    free(r);
}

/* The request head passes the check; returns its run. */
static struct run *
parse_accepted(const char *text, size_t n)
{
    struct run *r = parse_request(text, n);
    assert_true(r->nev >= 1);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    if (r->head[0].check != 0) {
        fail_msg("refused with %d: %s", r->head[0].check, r->head[0].reason);
    }
    return r;
}

static void
assert_rewritten(const char *text, size_t n, const struct opts *o, const char *expected)
{
    struct run *r = parse_all(text, n, o);
    assert_true(r->nev >= 1);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    if (r->head[0].check != 0) {
        fail_msg("refused with %d: %s", r->head[0].check, r->head[0].reason);
    }
    assert_string_equal(r->head[0].out, expected);
    free(r);
}

/* ---- parsing ---- */

static void
test_get_head_is_spans_and_message_ends_with_it(void **state)
{
    (void)state;
    static const char req[] = "GET /index.html?q=1 HTTP/1.1\r\n"
                              "Host: example.com\r\n"
                              "User-Agent: t/1\r\n"
                              "Accept: */*\r\n"
                              "\r\n";
    size_t n = sizeof(req) - 1;
    struct run *r = parse_request(LIT(req));
    assert_int_equal(r->nev, 2);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->at[0], n);
    assert_int_equal(r->ev[1], DM_HTTP_MSG_DONE);
    assert_int_equal(r->at[1], n);
    assert_int_equal(r->body_bytes[1], 0);
    assert_int_equal(r->nheads, 1);
    const struct head *h = &r->head[0];
    assert_int_equal(h->start, 0);
    assert_int_equal(h->end, n);
    assert_string_equal(h->method.s, "GET");
    assert_int_equal(h->method.off, 0);
    assert_string_equal(h->target.s, "/index.html?q=1");
    assert_int_equal(h->target.off, 4);
    assert_int_equal(h->nfields, 3);
    static const char *const names[] = { "Host", "User-Agent", "Accept" };
    static const char *const values[] = { "example.com", "t/1", "*/*" };
    for (unsigned i = 0; i < 3; i++) {
        assert_string_equal(h->name[i].s, names[i]);
        assert_string_equal(h->value[i].s, values[i]);
        /* Spans point at the bytes in the caller's buffer. */
        assert_int_equal(h->name[i].off, (size_t)(strstr(req, names[i]) - req));
        assert_int_equal(h->value[i].off, (size_t)(strstr(req, values[i]) - req));
    }
    assert_int_equal(h->version, 11);
    assert_int_equal(h->check, 0);
    assert_string_equal(h->host.s, "example.com");
    assert_string_equal(h->path.s, "/index.html?q=1");
    assert_true(h->keep_alive);
    assert_false(h->has_length);
    assert_false(h->chunked);
    assert_int_equal(r->nbody, 0);
    free(r);
}

static void
test_empty_field_value_is_its_own_field(void **state)
{
    (void)state;
    static const char req[] = "GET / HTTP/1.1\r\n"
                              "Host: a\r\n"
                              "X-Empty:\r\n"
                              "X-Blank:   \r\n"
                              "X-Next: 1\r\n"
                              "\r\n";
    struct run *r = parse_accepted(LIT(req));
    const struct head *h = &r->head[0];
    assert_int_equal(h->nfields, 4);
    assert_string_equal(h->name[1].s, "X-Empty");
    assert_int_equal(h->value[1].len, 0);
    assert_string_equal(h->name[2].s, "X-Blank");
    assert_string_equal(h->name[3].s, "X-Next");
    assert_string_equal(h->value[3].s, "1");
    assert_non_null(strstr(h->out, "\r\nX-Empty: \r\nX-Blank: "));
    free(r);
}

static void
test_post_body_ends_after_content_length_bytes(void **state)
{
    (void)state;
    static const char head[] = "POST /up HTTP/1.1\r\n"
                               "Host: a\r\n"
                               "Content-Length: 11\r\n"
                               "\r\n";
    static const char req[] = "POST /up HTTP/1.1\r\n"
                              "Host: a\r\n"
                              "Content-Length: 11\r\n"
                              "\r\n"
                              "hello world";
    struct run *r = parse_request(LIT(req));
    assert_int_equal(r->nev, 2);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->at[0], sizeof(head) - 1);
    assert_int_equal(r->body_bytes[0], 0);
    assert_int_equal(r->ev[1], DM_HTTP_MSG_DONE);
    assert_int_equal(r->at[1], sizeof(req) - 1);
    assert_int_equal(r->body_bytes[1], 11);
    assert_int_equal(r->nbody, 11);
    assert_memory_equal(r->body, "hello world", 11);
    assert_int_equal(r->head[0].check, 0);
    assert_true(r->head[0].has_length);
    assert_int_equal(r->head[0].content_length, 11);
    assert_false(r->head[0].chunked);
    free(r);
}

static void
test_chunked_body_with_extensions_and_trailer_is_decoded(void **state)
{
    (void)state;
    static const char head[] = "POST /c HTTP/1.1\r\n"
                               "Host: a\r\n"
                               "Transfer-Encoding: chunked\r\n"
                               "\r\n";
    static const char req[] = "POST /c HTTP/1.1\r\n"
                              "Host: a\r\n"
                              "Transfer-Encoding: chunked\r\n"
                              "\r\n"
                              "5;name=val\r\n"
                              "hello\r\n"
                              "6;a;b=c\r\n"
                              " world\r\n"
                              "A\r\n"
                              "0123456789\r\n"
                              "0;last\r\n"
                              "X-Trailer: t\r\n"
                              "\r\n";
    static const char trailers[] = "X-Trailer: t\r\n"
                                   "\r\n";
    struct run *r = parse_request(LIT(req));
    assert_int_equal(r->nev, 3);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->at[0], sizeof(head) - 1);
    /* The trailer section begins right after the last-chunk line. */
    assert_int_equal(r->ev[1], DM_HTTP_TRAILERS);
    assert_int_equal(r->at[1], sizeof(req) - sizeof(trailers));
    assert_int_equal(r->ev[2], DM_HTTP_MSG_DONE);
    assert_int_equal(r->at[2], sizeof(req) - 1);
    assert_int_equal(r->body_bytes[2], 21);
    assert_int_equal(r->nbody, 21);
    assert_memory_equal(r->body, "hello world0123456789", 21);
    assert_int_equal(r->head[0].check, 0);
    assert_true(r->head[0].chunked);
    assert_false(r->head[0].has_length);
    assert_int_equal(r->head[0].nfields, 2);
    free(r);
}

/* A chunked request whose second chunk-size line is "1;" and ext bytes of
 * 'a' (or, with zeros, that many '0's then "1"): its length in *n. */
static char *
long_chunk_line(size_t pad, bool zeros, size_t *n)
{
    static const char head[] = "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                               "1\r\nx\r\n";
    static const char tail[] = "\r\ny\r\n0\r\n\r\n";
    char *t = malloc(sizeof(head) + pad + 2 + sizeof(tail));
    assert_non_null(t);
    size_t k = sizeof(head) - 1;
    memcpy(t, head, k);
    if (zeros) {
        memset(t + k, '0', pad);
        k += pad;
        t[k++] = '1';
    } else {
        t[k++] = '1';
        t[k++] = ';';
        memset(t + k, 'a', pad);
        k += pad;
    }
    memcpy(t + k, tail, sizeof(tail));
    *n = k + sizeof(tail) - 1;
    return t;
}

static void
test_a_chunk_size_line_is_bounded(void **state)
{
    (void)state;
    /* Within DM_HTTP_CHUNK_LINE_MAX: decoded, however the bytes are split. */
    for (int zeros = 0; zeros < 2; zeros++) {
        size_t n;
        char *t = long_chunk_line(DM_HTTP_CHUNK_LINE_MAX - 100, zeros, &n);
        struct run *r = parse_request(t, n);
        assert_int_equal(r->nev, 3);
        assert_int_equal(r->ev[2], DM_HTTP_MSG_DONE);
        assert_int_equal(r->nbody, 2);
        assert_memory_equal(r->body, "xy", 2);
        free(r);
        free(t);
        /* Past it: an error once the line is too long (it carried 20 MB of
         * extension, or of leading zeros, to the server under limits.body_bytes: 1k). */
        t = long_chunk_line(DM_HTTP_CHUNK_LINE_MAX + 10, zeros, &n);
        r = parse_request(t, n);
        assert_int_equal(r->nev, 2);
        assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
        assert_true(r->ev[1] < 0);
        assert_int_equal(r->nbody, 1);
        free(r);
        free(t);
    }
    /* Trailers are not framing (the proxy bounds them as a head): 6000
     * bytes of them pass, in a request and in a response (they were counted,
     * and a request's trailers over 4096 bytes got a 400). A request's last
     * chunk line is bounded as any; a server's framing is not. */
    static const char req_head[] = "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                                   "\r\n1\r\nx\r\n0";
    static const char resp_head[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                                    "\r\n1\r\nx\r\n0";
    for (int resp = 0; resp < 2; resp++) {
        for (int ext = 0; ext < 2; ext++) {
            const char *h = resp ? resp_head : req_head;
            size_t hl = strlen(h), n = 0;
            char *t = malloc(hl + 6100);
            assert_non_null(t);
            memcpy(t, h, hl);
            n = hl;
            if (ext) { /* "0;aaa...": too long a line */
                t[n++] = ';';
                memset(t + n, 'a', 5000);
                n += 5000;
                memcpy(t + n, "\r\n\r\n", 4);
                n += 4;
            } else { /* "0\r\nX-T: aaa...\r\n\r\n" */
                memcpy(t + n, "\r\nX-T: ", 7);
                n += 7;
                memset(t + n, 'a', 6000);
                n += 6000;
                memcpy(t + n, "\r\n\r\n", 4);
                n += 4;
            }
            const struct opts o = { .response = resp != 0 };
            struct run *r = parse_all(t, n, &o);
            if (ext && !resp) {
                assert_true(r->ev[r->nev - 1] < 0);
            } else if (!ext) {
                assert_int_equal(r->ev[r->nev - 1], DM_HTTP_MSG_DONE);
                assert_int_equal(r->nbody, 1);
            }
            free(r);
            free(t);
        }
    }
}

#define PIPE_1 "GET /a HTTP/1.1\r\nHost: a\r\n\r\n"
#define PIPE_2 "POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n"
#define PIPE_3 "GET /c HTTP/1.1\r\nHost: a\r\n\r\n"

static void
test_pipelined_requests_are_each_found_after_next(void **state)
{
    (void)state;
    static const char req[] = PIPE_1 PIPE_2 "xyz" PIPE_3;
    size_t a1 = sizeof(PIPE_1) - 1;
    size_t a2 = a1 + sizeof(PIPE_2) - 1;
    size_t a3 = a2 + 3;
    size_t n = sizeof(req) - 1;
    struct run *r = parse_request(LIT(req));
    static const int ev[] = { DM_HTTP_HEAD_DONE, DM_HTTP_MSG_DONE,  DM_HTTP_HEAD_DONE,
                              DM_HTTP_MSG_DONE,  DM_HTTP_HEAD_DONE, DM_HTTP_MSG_DONE };
    size_t at[] = { a1, a1, a2, a3, n, n };
    assert_int_equal(r->nev, 6);
    for (unsigned i = 0; i < 6; i++) {
        assert_int_equal(r->ev[i], ev[i]);
        assert_int_equal(r->at[i], at[i]);
    }
    assert_int_equal(r->body_bytes[3], 3);
    assert_int_equal(r->body_bytes[5], 0);
    assert_int_equal(r->nheads, 3);
    static const char *const targets[] = { "/a", "/b", "/c" };
    static const char *const methods[] = { "GET", "POST", "GET" };
    size_t starts[] = { 0, a1, a3 };
    for (unsigned i = 0; i < 3; i++) {
        assert_string_equal(r->head[i].method.s, methods[i]);
        assert_int_equal(r->head[i].method.off, starts[i]);
        assert_string_equal(r->head[i].target.s, targets[i]);
        assert_int_equal(r->head[i].start, starts[i]);
        assert_int_equal(r->head[i].check, 0);
        assert_string_equal(r->head[i].host.s, "a");
    }
    assert_int_equal(r->nbody, 3);
    assert_memory_equal(r->body, "xyz", 3);
    free(r);
}

static void
test_response_body_ends_after_content_length_bytes(void **state)
{
    (void)state;
    static const char head[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Length: 5\r\n"
                               "Content-Type: text/plain\r\n"
                               "\r\n";
    static const char resp[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Length: 5\r\n"
                               "Content-Type: text/plain\r\n"
                               "\r\n"
                               "hello";
    const struct opts o = { .response = true, .eof = true };
    struct run *r = parse_all(LIT(resp), &o);
    assert_int_equal(r->nev, 2);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->at[0], sizeof(head) - 1);
    assert_int_equal(r->ev[1], DM_HTTP_MSG_DONE);
    assert_int_equal(r->at[1], sizeof(resp) - 1);
    assert_int_equal(r->body_bytes[1], 5);
    assert_memory_equal(r->body, "hello", 5);
    const struct head *h = &r->head[0];
    assert_int_equal(h->status, 200);
    assert_int_equal(h->version, 11);
    assert_false(h->needs_eof);
    assert_int_equal(h->nfields, 2);
    assert_int_equal(h->check, 0);
    assert_true(h->has_length);
    assert_int_equal(h->content_length, 5);
    assert_true(h->keep_alive);
    free(r);
}

static void
test_eof_after_a_complete_message_reports_no_message(void **state)
{
    (void)state;
    /* parse_all() calls dm_http_parse() again after MSG_DONE, as the proxy
     * does, so the parser is back at the start of the next message. */
    const struct opts o = { .response = true, .eof = true };
    struct run *r = parse_all(LIT("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"), &o);
    assert_int_equal(r->nev, 2);
    assert_int_equal(r->ev[1], DM_HTTP_MSG_DONE);
    assert_int_equal(r->eof, DM_HTTP_AGAIN);
    free(r);
    r = parse_all(LIT("HTTP/1.1 204 No Content\r\n\r\n"), &o);
    assert_int_equal(r->nev, 2);
    assert_int_equal(r->eof, DM_HTTP_AGAIN);
    free(r);
    const struct opts ro = { .eof = true };
    r = parse_all(LIT("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), &ro);
    assert_int_equal(r->nev, 2);
    assert_int_equal(r->eof, DM_HTTP_AGAIN);
    free(r);
}

static void
test_response_to_head_has_no_body_despite_content_length(void **state)
{
    (void)state;
    static const char first[] = "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n";
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"
                               "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    const struct opts o = { .response = true, .no_body = true };
    struct run *r = parse_all(LIT(resp), &o);
    assert_int_equal(r->nev, 4);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->at[0], sizeof(first) - 1);
    assert_int_equal(r->ev[1], DM_HTTP_MSG_DONE);
    assert_int_equal(r->at[1], sizeof(first) - 1);
    assert_int_equal(r->body_bytes[1], 0);
    assert_int_equal(r->ev[2], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->ev[3], DM_HTTP_MSG_DONE);
    assert_int_equal(r->at[3], sizeof(resp) - 1);
    assert_int_equal(r->head[0].status, 200);
    assert_false(r->head[0].needs_eof);
    assert_int_equal(r->head[1].status, 404);
    assert_int_equal(r->head[1].start, sizeof(first) - 1);
    assert_int_equal(r->nbody, 0);
    free(r);
}

static void
test_204_and_304_have_no_body_despite_content_length(void **state)
{
    (void)state;
    static const char first[] = "HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n";
    static const char resp[] = "HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n"
                               "HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n";
    const struct opts o = { .response = true };
    struct run *r = parse_all(LIT(resp), &o);
    assert_int_equal(r->nev, 4);
    static const int ev[] = { DM_HTTP_HEAD_DONE, DM_HTTP_MSG_DONE, DM_HTTP_HEAD_DONE,
                              DM_HTTP_MSG_DONE };
    size_t at[] = { sizeof(first) - 1, sizeof(first) - 1, sizeof(resp) - 1, sizeof(resp) - 1 };
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(r->ev[i], ev[i]);
        assert_int_equal(r->at[i], at[i]);
        assert_int_equal(r->body_bytes[i], 0);
    }
    assert_int_equal(r->head[0].status, 204);
    assert_int_equal(r->head[1].status, 304);
    assert_false(r->head[0].needs_eof);
    assert_false(r->head[1].needs_eof);
    assert_int_equal(r->nbody, 0);
    free(r);
}

static void
test_100_continue_then_final_response_in_one_buffer(void **state)
{
    (void)state;
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    static const char resp[] = "HTTP/1.1 100 Continue\r\n\r\n"
                               "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    size_t c = sizeof(cont) - 1;
    size_t n = sizeof(resp) - 1;
    const struct opts o = { .response = true };
    struct run *r = parse_all(LIT(resp), &o);
    assert_int_equal(r->nev, 4);
    static const int ev[] = { DM_HTTP_HEAD_DONE, DM_HTTP_MSG_DONE, DM_HTTP_HEAD_DONE,
                              DM_HTTP_MSG_DONE };
    size_t at[] = { c, c, n - 2, n };
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(r->ev[i], ev[i]);
        assert_int_equal(r->at[i], at[i]);
    }
    assert_int_equal(r->head[0].status, 100);
    assert_int_equal(r->head[0].nfields, 0);
    assert_string_equal(r->head[0].out, "HTTP/1.1 100 Continue\r\n\r\n");
    assert_int_equal(r->head[1].status, 200);
    assert_int_equal(r->head[1].start, c);
    assert_int_equal(r->body_bytes[3], 2);
    assert_memory_equal(r->body, "ok", 2);
    free(r);
}

static void
test_101_ends_message_then_reports_upgrade_at_head_end(void **state)
{
    (void)state;
    static const char head[] = "HTTP/1.1 101 Switching Protocols\r\n"
                               "Upgrade: websocket\r\n"
                               "Connection: Upgrade\r\n"
                               "\r\n";
    static const char resp[] = "HTTP/1.1 101 Switching Protocols\r\n"
                               "Upgrade: websocket\r\n"
                               "Connection: Upgrade\r\n"
                               "\r\n"
                               "\x81\x05hello";
    size_t h = sizeof(head) - 1;
    const struct opts o = { .response = true };
    struct run *r = parse_all(LIT(resp), &o);
    /* The proxy counts on this order: MSG_DONE, then the upgrade pause. */
    assert_int_equal(r->nev, 3);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->at[0], h);
    assert_int_equal(r->ev[1], DM_HTTP_MSG_DONE);
    assert_int_equal(r->at[1], h);
    assert_int_equal(r->ev[2], DM_HTTP_UPGRADE);
    assert_int_equal(r->at[2], h);
    assert_int_equal(r->nbody, 0);
    assert_int_equal(r->head[0].status, 101);
    assert_int_equal(r->head[0].check, 0);
    assert_true(r->head[0].upgrade);
    free(r);
}

static void
test_upgrade_request_reports_upgrade_at_head_end(void **state)
{
    (void)state;
    static const char head[] = "GET /ws HTTP/1.1\r\n"
                               "Host: a\r\n"
                               "Connection: Upgrade\r\n"
                               "Upgrade: websocket\r\n"
                               "\r\n";
    static const char req[] = "GET /ws HTTP/1.1\r\n"
                              "Host: a\r\n"
                              "Connection: Upgrade\r\n"
                              "Upgrade: websocket\r\n"
                              "\r\n"
                              "\x81\x05hello";
    size_t h = sizeof(head) - 1;
    struct run *r = parse_request(LIT(req));
    assert_int_equal(r->nev, 3);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->ev[1], DM_HTTP_MSG_DONE);
    assert_int_equal(r->ev[2], DM_HTTP_UPGRADE);
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(r->at[i], h);
    }
    assert_int_equal(r->head[0].check, 0);
    assert_true(r->head[0].upgrade);
    free(r);
}

static void
test_close_delimited_body_ends_at_eof(void **state)
{
    (void)state;
    static const char head11[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n";
    static const char resp11[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close";
    static const char resp10[] = "HTTP/1.0 200 OK\r\n\r\nuntil close";
    const struct opts o = { .response = true, .eof = true };
    struct run *r = parse_all(LIT(resp11), &o);
    assert_int_equal(r->nev, 1);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->at[0], sizeof(head11) - 1);
    assert_true(r->head[0].needs_eof);
    assert_int_equal(r->head[0].check, 0);
    assert_false(r->head[0].has_length);
    assert_false(r->head[0].chunked);
    assert_int_equal(r->eof, DM_HTTP_MSG_DONE);
    assert_int_equal(r->nbody, 11);
    assert_memory_equal(r->body, "until close", 11);
    free(r);

    r = parse_all(LIT(resp10), &o);
    assert_int_equal(r->nev, 1);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_true(r->head[0].needs_eof);
    assert_int_equal(r->head[0].version, 10);
    assert_false(r->head[0].keep_alive);
    assert_int_equal(r->eof, DM_HTTP_MSG_DONE);
    assert_int_equal(r->nbody, 11);
    free(r);
}

static void
test_eof_inside_a_response_head_is_an_error(void **state)
{
    (void)state;
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Le";
    const struct opts o = { .response = true, .eof = true };
    struct run *r = parse_all(LIT(resp), &o);
    assert_int_equal(r->nev, 0);
    assert_true(r->eof < 0);
    free(r);
}

static void
test_eof_inside_a_content_length_body_is_an_error(void **state)
{
    (void)state;
    /* dm_http_parse_eof() returns AGAIN only when no message is open. */
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe";
    static const char chunked[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe";
    const struct opts o = { .response = true, .eof = true };
    struct run *r = parse_all(LIT(resp), &o);
    assert_int_equal(r->nev, 1);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_not_equal(r->eof, DM_HTTP_MSG_DONE);
    assert_true(r->eof < 0);
    free(r);
    r = parse_all(LIT(chunked), &o);
    assert_int_equal(r->nev, 1);
    assert_int_not_equal(r->eof, DM_HTTP_MSG_DONE);
    assert_true(r->eof < 0);
    free(r);
}

/* ---- checks ---- */

static void
test_content_length_with_transfer_encoding_is_refused(void **state)
{
    (void)state;
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
                           400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                               "Content-Length: 5\r\n\r\n0\r\n\r\n"),
                           400);
    const struct opts o = { .response = true };
    struct run *r = parse_all(LIT("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                                  "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
                              &o);
    /* From a server: an error the proxy answers with 502. */
    assert_true(r->nev >= 1);
    if (r->ev[0] >= 0) {
        assert_int_equal(r->head[0].check, 502);
        assert_non_null(r->head[0].reason);
    }
    free(r);
}

static void
test_duplicate_content_length_is_refused(void **state)
{
    (void)state;
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
        400);
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
        400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello"),
                           400);
    const struct opts o = { .response = true };
    struct run *r =
        parse_all(LIT("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc"), &o);
    assert_true(r->nev >= 1);
    if (r->ev[0] >= 0) {
        assert_int_equal(r->head[0].check, 502);
    }
    free(r);
}

static void
test_malformed_content_length_is_refused(void **state)
{
    (void)state;
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n"), 400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"), 400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello"),
                           400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n"), 400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n"), 400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n"), 400);
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n"), 400);
}

static void
test_transfer_encoding_other_than_one_final_chunked_is_refused(void **state)
{
    (void)state;
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nhello"), 400);
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"),
        400);
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"),
        400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
                           400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                               "Transfer-Encoding: gzip\r\n\r\n0\r\n\r\n"),
                           400);
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"), 400);
}

static void
test_transfer_encoding_without_a_coding_is_refused(void **state)
{
    (void)state;
    /* No coding at all is not "ends in chunked" either; llhttp passes the
     * first and fails the second only after the head, once forwarded. */
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n"), 400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,\r\n\r\n"), 400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
                               "Transfer-Encoding: \r\n\r\nabc"),
                           400);
}

static void
test_transfer_encoding_exactly_chunked_is_accepted(void **state)
{
    (void)state;
    struct run *r =
        parse_accepted(LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \t Chunked \r\n"
                           "\r\n2\r\nab\r\n0\r\n\r\n"));
    assert_true(r->head[0].chunked);
    assert_int_equal(r->nev, 3);
    assert_int_equal(r->ev[1], DM_HTTP_TRAILERS);
    assert_int_equal(r->ev[2], DM_HTTP_MSG_DONE);
    assert_int_equal(r->body_bytes[2], 2);
    free(r);
    /* A response may have other codings before chunked: the client decodes them. */
    const struct opts o = { .response = true };
    r = parse_all(LIT("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                      "2\r\nab\r\n0\r\n\r\n"),
                  &o);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->head[0].check, 0);
    assert_true(r->head[0].chunked);
    free(r);
}

static void
test_transfer_encoding_with_codings_before_chunked_is_501(void **state)
{
    (void)state;
    /* Forwarded as they were, a server that knows gzip reads another body
     * than the proxy did (nginx answers 501, HAProxy 422). */
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        501);
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity,chunked\r\n\r\n"
            "0\r\n\r\n"),
        501);
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , chunked\r\n\r\n0\r\n\r\n"), 501);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
                           501);
}

static void
test_transfer_encoding_in_http10_is_refused(void **state)
{
    (void)state;
    assert_request_refused(
        LIT("POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 400);
    /* In a response too: faulty framing (RFC 9112, 6.1), the connection not reused. */
    const struct opts o = { .response = true };
    assert_check_answers(LIT("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n"
                             "Connection: keep-alive\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
                         &o, 502);
}

/* A status line goes out as it came: a control byte in its reason is the server's fault. */
static void
test_control_byte_in_a_status_line_is_refused(void **state)
{
    (void)state;
    const struct opts o = { .response = true };
    assert_check_answers(LIT("HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n"), &o, 502);
    assert_check_answers(LIT("HTTP/1.1 200 O\x7fK\r\nContent-Length: 0\r\n\r\n"), &o, 502);
    struct run *r = parse_all(LIT("HTTP/1.1 200 O\tK \xe9\r\nContent-Length: 0\r\n\r\n"), &o);
    assert_int_equal(r->head[0].check, 0);
    free(r);
}

static void
test_obs_fold_is_refused(void **state)
{
    (void)state;
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-A: one\r\n two\r\n\r\n"), 400);
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-A: one\r\n\ttwo\r\n\r\n"), 400);
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip,\r\n chunked\r\n\r\n"), 400);
}

static void
test_whitespace_before_colon_is_refused(void **state)
{
    (void)state;
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), 400);
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-A\t: 1\r\n\r\n"), 400);
    assert_request_refused(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\nhello"),
                           400);
    assert_request_refused(
        LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n"), 400);
}

static void
test_control_bytes_in_a_value_are_refused(void **state)
{
    (void)state;
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x01"
                               "b\r\n\r\n"),
                           400);
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x1b"
                               "b\r\n\r\n"),
                           400);
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x7f"
                               "b\r\n\r\n"),
                           400);
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\0b\r\n\r\n"), 400);
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n"), 400);
    /* A tab is allowed in a value. */
    struct run *r = parse_accepted(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\tb\r\n\r\n"));
    assert_string_equal(r->head[0].value[1].s, "a\tb");
    free(r);
}

static void
test_bare_line_feeds_are_refused(void **state)
{
    (void)state;
    assert_request_refused(LIT("GET / HTTP/1.1\nHost: a\n\n"), 400);
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a\nX-A: 1\r\n\r\n"), 400);
}

static void
test_missing_host_is_refused_in_http11_only(void **state)
{
    (void)state;
    const struct opts o = { 0 };
    assert_check_answers(LIT("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"), &o, 400);
    struct run *r = parse_accepted(LIT("GET / HTTP/1.0\r\nAccept: */*\r\n\r\n"));
    assert_int_equal(r->head[0].version, 10);
    assert_int_equal(r->head[0].host.len, 0);
    free(r);
}

static void
test_two_host_fields_are_refused(void **state)
{
    (void)state;
    const struct opts o = { 0 };
    assert_check_answers(LIT("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), &o, 400);
    assert_check_answers(LIT("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"), &o, 400);
    assert_check_answers(LIT("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"), &o, 400);
}

static void
test_invalid_host_is_refused(void **state)
{
    (void)state;
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a.com/x\r\n\r\n"), 400);
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: user@a.com\r\n\r\n"), 400);
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a.com b.com\r\n\r\n"), 400);
    assert_request_refused(LIT("GET / HTTP/1.1\r\nHost: a\\b\r\n\r\n"), 400);
    struct run *r = parse_accepted(LIT("GET / HTTP/1.1\r\nHost:  a.com:8080  \r\n\r\n"));
    assert_string_equal(r->head[0].host.s, "a.com:8080");
    free(r);
}

static void
test_unsupported_version_is_505(void **state)
{
    (void)state;
    const struct opts o = { 0 };
    assert_check_answers(LIT("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), &o, 505);
    /* llhttp itself refuses versions other than 0.9, 1.0, 1.1 and 2.0. */
    struct run *r = parse_request(LIT("GET / HTTP/1.2\r\nHost: a\r\n\r\n"));
    assert_true(r->nev >= 1);
    if (r->ev[0] >= 0) {
        assert_int_equal(r->head[0].check, 505);
    }
    free(r);
    assert_check_answers(LIT("GET / HTTP/0.9\r\nHost: a\r\n\r\n"), &o, 505);
    const struct opts ro = { .response = true };
    assert_check_answers(LIT("HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n"), &ro, 502);
}

static void
test_request_line_without_version_is_refused_at_once(void **state)
{
    (void)state;
    /* HTTP/0.9's simple request: an error as soon as the line ends, without
     * waiting for header fields that will never come. */
    struct dm_http_parser p;
    struct dm_http_field fields[8];
    struct dm_http_msg msg = { .fields = fields, .max_fields = 8 };
    p.msg = &msg;
    dm_http_parser_init(&p, true);
    size_t used = 0;
    assert_int_equal(dm_http_parse(&p, LIT("GET /path"), &used), DM_HTTP_AGAIN);
    assert_true(dm_http_parse(&p, LIT("\r\n"), &used) < 0);
    assert_non_null(strstr(dm_http_parser_error(&p), "HTTP/0.9"));
    dm_http_parser_init(&p, true);
    assert_true(dm_http_parse(&p, LIT("GET /path\r\nHost: a\r\n\r\n"), &used) < 0);
    /* A written version 0.9 still reaches the check, which answers 505. */
    dm_http_parser_init(&p, true);
    assert_int_equal(dm_http_parse(&p, LIT("GET / HTTP/0.9\r\nHost: a\r\n\r\n"), &used),
                     DM_HTTP_HEAD_DONE);
}

static void
test_trailers_are_checked_as_strictly_as_a_head(void **state)
{
    (void)state;
    const char *reason = NULL;
    assert_int_equal(dm_http_check_trailers(LIT("\r\n"), &reason), 0);
    assert_int_equal(dm_http_check_trailers(LIT("X-Sum: 1\r\nX-B:\r\n\r\n"), &reason), 0);
    static const char *const bad[] = {
        "X-A: 1\r\n b\r\n\r\n",             /* obs-fold */
        " X-A: 1\r\n\r\n",                  /* folded first line */
        "X-A: 1\n\r\n",                     /* bare LF */
        "X-A: 1\rb\r\n\r\n",                /* bare CR */
        "X-A : 1\r\n\r\n",                  /* space before the colon */
        "X-A 1\r\n\r\n",                    /* no colon */
        "X-A: \x01\r\n\r\n",                /* control byte */
        "Content-Length: 5\r\n\r\n",        /* framing */
        "transfer-encoding: x\r\n\r\n",     /* framing, any case */
        "Host: evil\r\n\r\n",               /* routing */
        "Connection: close\r\n\r\n",        /* hop-by-hop */
        "X-Forwarded-For: 1.2.3.4\r\n\r\n", /* set by the proxy */
        "X-A: 1\r\n",                       /* no final empty line */
        "\r\nGET / HTTP/1.1\r\n\r\n",       /* bytes after the end */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        reason = NULL;
        if (dm_http_check_trailers(bad[i], strlen(bad[i]), &reason) != 400) {
            fail_msg("trailer section %zu accepted: %s", i, bad[i]);
        }
        assert_non_null(reason);
    }
}

static void
test_response_trailers_are_checked_and_bounded(void **state)
{
    (void)state;
    const char *reason = NULL;
    assert_int_equal(dm_http_check_response_trailers(LIT("\r\n"), 2, &reason), 0);
    assert_int_equal(dm_http_check_response_trailers(LIT("X-Sum: 1\r\nVia: a\r\n\r\n"), 2, &reason),
                     0);
    assert_int_equal(dm_http_check_response_trailers(LIT("X-A: 1\r\nX-B: 2\r\n\r\n"), 0, &reason),
                     0);
    assert_int_equal(
        dm_http_check_response_trailers(LIT("A: 1\r\nB: 2\r\nC: 3\r\n\r\n"), 2, &reason), 502);
    assert_string_equal(reason, "too many trailer fields");
    static const char *const bad[] = {
        "\n",                           /* a bare LF ends the body: "0\r\n\n" */
        "X-T: 1\r\n\n",                 /* the same after a field */
        "X-A: 1\r\n b\r\n\r\n",         /* obs-fold */
        ": x\r\n\r\n",                  /* empty name */
        "Content-Length: 5\r\n\r\n",    /* framing */
        "Transfer-Encoding: x\r\n\r\n", /* framing */
        "Connection: close\r\n\r\n",    /* hop-by-hop */
        "Trailer: X-A\r\n\r\n",         /* names trailers: never one itself */
        "X-A: 1\r\n",                   /* no final empty line */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        reason = NULL;
        if (dm_http_check_response_trailers(bad[i], strlen(bad[i]), 0, &reason) != 502) {
            fail_msg("response trailer section %zu accepted: %s", i, bad[i]);
        }
        assert_non_null(reason);
    }
}

static void
test_connect_is_405(void **state)
{
    (void)state;
    const struct opts o = { 0 };
    assert_check_answers(LIT("CONNECT a.com:443 HTTP/1.1\r\nHost: a.com:443\r\n\r\n"), &o, 405);
}

static void
test_too_many_fields_is_431(void **state)
{
    (void)state;
    static const char req[] = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    const struct opts four = { .max_fields = 4 };
    struct run *r = parse_all(LIT(req), &four);
    assert_int_equal(r->head[0].check, 0);
    assert_int_equal(r->head[0].nfields, 4);
    assert_false(r->head[0].too_many_fields);
    free(r);
    const struct opts three = { .max_fields = 3 };
    assert_check_answers(LIT(req), &three, 431);
    r = parse_all(LIT(req), &three);
    assert_true(r->head[0].too_many_fields);
    assert_int_equal(r->head[0].nfields, 3);
    /* The head still ends where it ends. */
    assert_int_equal(r->at[0], sizeof(req) - 1);
    free(r);
    const struct opts one = { .max_fields = 1 };
    assert_check_answers(LIT(req), &one, 431);
}

static void
test_absolute_form_target_is_reduced_to_its_path(void **state)
{
    (void)state;
    struct run *r =
        parse_accepted(LIT("GET http://example.com/a/b?c=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"));
    assert_string_equal(r->head[0].target.s, "http://example.com/a/b?c=1");
    assert_string_equal(r->head[0].path.s, "/a/b?c=1");
    assert_true(strncmp(r->head[0].out, "GET /a/b?c=1 HTTP/1.1\r\n", 23) == 0);
    free(r);
    r = parse_accepted(LIT("GET HTTP://EXAMPLE.COM:8080/x HTTP/1.1\r\nHost: example.com\r\n\r\n"));
    assert_string_equal(r->head[0].path.s, "/x");
    free(r);
    r = parse_accepted(LIT("GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n"));
    assert_string_equal(r->head[0].path.s, "/");
    assert_true(strncmp(r->head[0].out, "GET / HTTP/1.1\r\n", 16) == 0);
    free(r);
}

/*
 * The absolute form's authority is the request's host (RFC 9112 3.2.2):
 * it must name Host's host (the port aside, as routing reads it), and be a
 * host without user information (RFC 9110 4.2). https is a scheme too. The
 * asterisk form is OPTIONS's only (RFC 9112 3.2.4).
 */
static void
test_absolute_and_asterisk_forms_are_checked(void **state)
{
    (void)state;
    static const struct opts o = { 0 };
    assert_check_answers(LIT("GET http://evil.example/p HTTP/1.1\r\nHost: good.example\r\n\r\n"),
                         &o, 400);
    assert_check_answers(LIT("GET http://u:p@a/p HTTP/1.1\r\nHost: a\r\n\r\n"), &o, 400);
    assert_check_answers(LIT("GET http:///p HTTP/1.1\r\nHost: a\r\n\r\n"), &o, 400);
    assert_check_answers(LIT("GET http://:80/p HTTP/1.1\r\nHost: a\r\n\r\n"), &o, 400);
    assert_check_answers(LIT("GET * HTTP/1.1\r\nHost: a\r\n\r\n"), &o, 400);
    assert_check_answers(LIT("GET /a.php#.png HTTP/1.1\r\nHost: a\r\n\r\n"), &o, 400);
    assert_check_answers(LIT("GET http://a/x?q#f HTTP/1.1\r\nHost: a\r\n\r\n"), &o, 400);
    struct run *r =
        parse_accepted(LIT("GET https://A.example:8443/x HTTP/1.1\r\nHost: a.EXAMPLE\r\n\r\n"));
    assert_string_equal(r->head[0].path.s, "/x");
    free(r);
    r = parse_accepted(LIT("GET http://[::1]:81/y HTTP/1.1\r\nHost: [::1]\r\n\r\n"));
    assert_string_equal(r->head[0].path.s, "/y");
    free(r);
    r = parse_accepted(LIT("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"));
    assert_string_equal(r->head[0].path.s, "*");
    free(r);
}

static void
test_absolute_form_without_path_keeps_its_query(void **state)
{
    (void)state;
    /* RFC 9112 3.2.1: an empty path is "/", and the query stays. The path
     * span points into the request ("?q=1"); the rewritten line adds the "/". */
    struct run *r =
        parse_accepted(LIT("GET http://example.com?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"));
    assert_string_equal(r->head[0].path.s, "?q=1");
    assert_true(strncmp(r->head[0].out, "GET /?q=1 HTTP/1.1\r\n", 20) == 0);
    free(r);
}

static void
test_keep_alive_follows_version_and_connection(void **state)
{
    (void)state;
    static const struct {
        const char *req;
        bool keep_alive;
    } cases[] = {
        { "GET / HTTP/1.1\r\nHost: a\r\n\r\n", true },
        { "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", false },
        { "GET / HTTP/1.1\r\nHost: a\r\nConnection: CLOSE\r\n\r\n", false },
        { "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", true },
        { "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n", false },
        { "GET / HTTP/1.1\r\nHost: a\r\nConnection: x\r\nConnection: close\r\n\r\n", false },
        { "GET / HTTP/1.0\r\nHost: a\r\n\r\n", false },
        { "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", true },
        { "GET / HTTP/1.0\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n", true },
        { "GET / HTTP/1.0\r\nHost: a\r\nConnection: close\r\n\r\n", false },
        { "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive,close\r\n\r\n", false },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct run *r = parse_accepted(cases[i].req, strlen(cases[i].req));
        if (r->head[0].keep_alive != cases[i].keep_alive) {
            fail_msg("keep_alive is %d for %s", r->head[0].keep_alive, cases[i].req);
        }
        free(r);
    }
    const struct opts o = { .response = true };
    struct run *r = parse_all(LIT("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbye"), &o);
    assert_false(r->head[0].keep_alive);
    free(r);
    r = parse_all(LIT("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"),
                  &o);
    assert_true(r->head[0].keep_alive);
    free(r);
}

static void
test_upgrade_needs_connection_token_and_upgrade_field(void **state)
{
    (void)state;
    struct run *r = parse_accepted(
        LIT("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: ws\r\n\r\n"));
    assert_true(r->head[0].upgrade);
    free(r);
    r = parse_accepted(LIT("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: ws\r\n\r\n"));
    assert_false(r->head[0].upgrade);
    assert_int_equal(r->ev[r->nev - 1], DM_HTTP_MSG_DONE);
    free(r);
    r = parse_accepted(LIT("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n"));
    assert_false(r->head[0].upgrade);
    assert_int_equal(r->ev[r->nev - 1], DM_HTTP_MSG_DONE);
    free(r);
}

/* A method llhttp does not know is the client's to send (nginx and HAProxy
 * forward it), however the bytes are split; the same rules as nginx's. */
static void
test_a_method_llhttp_does_not_know_is_forwarded(void **state)
{
    (void)state;
    static const char two[] = "QUERY /q?a=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nok"
                              "\r\nBAN-ALL_X / HTTP/1.1\r\nHost: a\r\n\r\n"
                              "GET /g HTTP/1.1\r\nHost: a\r\n\r\n";
    struct run *r = parse_accepted(LIT(two));
    assert_int_equal(r->nheads, 3);
    assert_string_equal(r->head[0].method.s, "QUERY");
    assert_int_equal(r->head[0].method.off, 0);
    assert_string_equal(r->head[0].target.s, "/q?a=1");
    assert_int_equal(r->nbody, 2);
    assert_string_equal(r->head[1].method.s, "BAN-ALL_X");
    assert_string_equal(r->head[2].method.s, "GET");
    assert_int_equal(r->head[2].method.off,
                     strlen(two) - strlen("GET /g HTTP/1.1\r\nHost: a\r\n\r\n"));
    assert_int_equal(r->ev[r->nev - 1], DM_HTTP_MSG_DONE);
    free(r);
    /* Known ones are still llhttp's, prefixes of them included. */
    r = parse_accepted(LIT("PROPFINDX / HTTP/1.1\r\nHost: a\r\n\r\n"));
    assert_string_equal(r->head[0].method.s, "PROPFINDX");
    free(r);
    r = parse_accepted(LIT("M-SEARCH / HTTP/1.1\r\nHost: a\r\n\r\n"));
    assert_string_equal(r->head[0].method.s, "M-SEARCH");
    free(r);
    assert_rewritten(LIT("QUERY /q HTTP/1.1\r\nHost: a\r\n\r\n"), &(const struct opts){ 0 },
                     "QUERY /q HTTP/1.1\r\n"
                     "Host: a\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "\r\n");
    /* Not a method: lower case, a digit or another byte in it, no space after it. */
    assert_request_refused(LIT("query / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_request_refused(LIT("head / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_request_refused(LIT("QUERY2 / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_request_refused(LIT("QU.ERY / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_request_refused(LIT("QUERY\t/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_request_refused(LIT("QUERY\r\nHost: a\r\n\r\n"), 400);
    assert_request_refused(LIT("QU ERY / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_request_refused(LIT(" QUERY / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    /* PRI is llhttp's: HTTP/2's preface, refused saying what it is. */
    struct dm_http_parser p;
    struct dm_http_msg msg = { .fields = NULL, .max_fields = 0 };
    p.msg = &msg;
    dm_http_parser_init(&p, true);
    size_t used = 0;
    assert_true(dm_http_parse(&p, LIT("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), &used) < 0);
    assert_non_null(strstr(dm_http_parser_error(&p), "HTTP/2 connection preface"));
}

static void
test_expect_continue_is_detected(void **state)
{
    (void)state;
    struct run *r = parse_accepted(LIT("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                                       "Content-Length: 2\r\n\r\nok"));
    assert_true(r->head[0].expect_continue);
    free(r);
    r = parse_accepted(LIT("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\n"
                           "Content-Length: 2\r\n\r\nok"));
    assert_true(r->head[0].expect_continue);
    free(r);
    r = parse_accepted(LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nok"));
    assert_false(r->head[0].expect_continue);
    free(r);
    /* An HTTP/1.0 client sends its body without waiting (RFC 9110, 10.1.1). */
    r = parse_accepted(LIT("POST / HTTP/1.0\r\nExpect: 100-continue\r\n"
                           "Content-Length: 2\r\n\r\nok"));
    assert_false(r->head[0].expect_continue);
    free(r);
}

static void
test_rewrite_request_drops_expect_continue_of_http_1_0(void **state)
{
    (void)state;
    const struct opts o = { 0 };
    /* The upstream request is HTTP/1.1: forwarded, the expectation would count. */
    assert_rewritten(LIT("POST / HTTP/1.0\r\nHost: a\r\nExpect: 100-continue\r\n"
                         "Content-Length: 2\r\n\r\nok"),
                     &o,
                     "POST / HTTP/1.1\r\n"
                     "Host: a\r\n"
                     "Content-Length: 2\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "\r\n");
    assert_rewritten(LIT("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                         "Content-Length: 2\r\n\r\nok"),
                     &o,
                     "POST / HTTP/1.1\r\n"
                     "Host: a\r\n"
                     "Expect: 100-continue\r\n"
                     "Content-Length: 2\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "\r\n");
}

/* ---- rewriting ---- */

static void
test_rewrite_request_removes_hop_by_hop_fields(void **state)
{
    (void)state;
    static const char req[] = "GET /p HTTP/1.1\r\n"
                              "Host: a.example\r\n"
                              "Connection: keep-alive\r\n"
                              "Keep-Alive: timeout=5\r\n"
                              "TE: trailers\r\n"
                              "Trailer: X-T\r\n"
                              "Proxy-Connection: keep-alive\r\n"
                              "Upgrade: h2c\r\n"
                              "Connection: close, x-secret\r\n"
                              "X-Secret: 1\r\n"
                              "Accept: */*\r\n"
                              "\r\n";
    const struct opts o = { 0 };
    /* Trailer is end-to-end (RFC 9110, 6.6.2): it stays. */
    assert_rewritten(LIT(req), &o,
                     "GET /p HTTP/1.1\r\n"
                     "Host: a.example\r\n"
                     "Trailer: X-T\r\n"
                     "Accept: */*\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "\r\n");
}

static void
test_rewrite_request_appends_client_to_x_forwarded_for(void **state)
{
    (void)state;
    const struct opts o = { 0 };
    assert_rewritten(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n"), &o,
                     "GET / HTTP/1.1\r\n"
                     "Host: a\r\n"
                     "X-Forwarded-For: 1.2.3.4, 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "\r\n");
    /* Several fields make one list: the client goes at the end of the last. */
    assert_rewritten(LIT("GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.1.1.1\r\n"
                         "Accept: */*\r\nx-forwarded-for: 2.2.2.2\r\n\r\n"),
                     &o,
                     "GET / HTTP/1.1\r\n"
                     "Host: a\r\n"
                     "X-Forwarded-For: 1.1.1.1\r\n"
                     "Accept: */*\r\n"
                     "x-forwarded-for: 2.2.2.2, 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "\r\n");
}

static void
test_rewrite_request_replaces_x_forwarded_proto(void **state)
{
    (void)state;
    const struct opts o = { 0 };
    assert_rewritten(LIT("GET / HTTP/1.1\r\nX-Forwarded-Proto: https\r\nHost: a\r\n"
                         "x-forwarded-proto: https\r\n\r\n"),
                     &o,
                     "GET / HTTP/1.1\r\n"
                     "Host: a\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "\r\n");
}

/* A field the proxy sets (a session's rate tier) replaces the client's, in any case. */
static void
test_rewrite_request_sets_the_proxys_field(void **state)
{
    (void)state;
    struct dm_http_forward fw = forward;
    fw.set_name[0] = "X-Rate-Tier";
    fw.set_value[0] = "25";
    const struct opts o = { .fw = &fw };
    assert_rewritten(LIT("GET /ws HTTP/1.1\r\nx-rate-tier: 60\r\nHost: a\r\nConnection: Upgrade\r\n"
                         "Upgrade: websocket\r\nX-RATE-TIER: 90\r\nX-Rate-Tiers: 1\r\n\r\n"),
                     &o,
                     "GET /ws HTTP/1.1\r\n"
                     "Host: a\r\n"
                     "Upgrade: websocket\r\n"
                     "X-Rate-Tiers: 1\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "X-Rate-Tier: 25\r\n"
                     "Connection: upgrade\r\n"
                     "\r\n");
}

static void
test_rewrite_request_appends_to_via(void **state)
{
    (void)state;
    const struct opts o = { 0 };
    assert_rewritten(LIT("GET / HTTP/1.1\r\nVia: 1.0 fred\r\nHost: a\r\n\r\n"), &o,
                     "GET / HTTP/1.1\r\n"
                     "Via: 1.0 fred, 1.1 dimmer\r\n"
                     "Host: a\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "\r\n");
}

static void
test_rewrite_http10_request_gets_default_host_and_http11(void **state)
{
    (void)state;
    const struct opts o = { 0 };
    assert_rewritten(LIT("GET /old HTTP/1.0\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n"), &o,
                     "GET /old HTTP/1.1\r\n"
                     "Accept: */*\r\n"
                     "Host: backend:8080\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "\r\n");
    /* An HTTP/1.0 request with a Host keeps it, and gets no second one. */
    assert_rewritten(LIT("GET /old HTTP/1.0\r\nHost: www\r\n\r\n"), &o,
                     "GET /old HTTP/1.1\r\n"
                     "Host: www\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "\r\n");
}

static void
test_rewrite_upgrade_request_keeps_upgrade(void **state)
{
    (void)state;
    const struct opts o = { 0 };
    assert_rewritten(LIT("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
                         "Upgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n"),
                     &o,
                     "GET /ws HTTP/1.1\r\n"
                     "Host: a\r\n"
                     "Upgrade: websocket\r\n"
                     "Sec-WebSocket-Key: k\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "Connection: upgrade\r\n"
                     "\r\n");
    /* Connection naming another field too: that one goes, Upgrade stays
     * (it went, and the server answered 426). */
    assert_rewritten(LIT("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, X-Foo\r\n"
                         "X-Foo: 1\r\nUpgrade: websocket\r\n\r\n"),
                     &o,
                     "GET /ws HTTP/1.1\r\n"
                     "Host: a\r\n"
                     "Upgrade: websocket\r\n"
                     "X-Forwarded-For: 10.0.0.9\r\n"
                     "X-Forwarded-Proto: http\r\n"
                     "Via: 1.1 dimmer\r\n"
                     "Connection: upgrade\r\n"
                     "\r\n");
}

static void
test_rewrite_request_with_too_small_cap_returns_zero(void **state)
{
    (void)state;
    /* parse_all() tries every cap below the length (exactly sized buffers, so
     * ASan sees any write past cap) on every head; here is one that grows. */
    static const char req[] = "POST /form HTTP/1.0\r\nX-Forwarded-For: 1.2.3.4\r\nVia: 1.0 a\r\n"
                              "Content-Length: 3\r\n\r\nabc";
    struct run *r = parse_accepted(LIT(req));
    assert_true(r->head[0].outlen > sizeof(req) - 1);
    free(r);
}

static void
test_rewrite_request_keeps_framing_fields_named_in_connection(void **state)
{
    (void)state;
    /* The proxy frames the body by these fields: dropping them when forwarding
     * would let the body be read by the server as a second request. */
    static const char cl[] = "POST / HTTP/1.1\r\nHost: a\r\nConnection: Content-Length\r\n"
                             "Content-Length: 5\r\n\r\nhello";
    static const char te[] = "POST / HTTP/1.1\r\nHost: a\r\nConnection: Transfer-Encoding\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    struct run *r = parse_request(LIT(cl));
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    if (r->head[0].check == 0) {
        assert_true(r->head[0].has_length);
        assert_non_null(strstr(r->head[0].out, "\r\nContent-Length: 5\r\n"));
    } else {
        assert_int_equal(r->head[0].check, 400);
    }
    free(r);
    r = parse_request(LIT(te));
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    if (r->head[0].check == 0) {
        assert_true(r->head[0].chunked);
        assert_non_null(strstr(r->head[0].out, "\r\nTransfer-Encoding: chunked\r\n"));
    } else {
        assert_int_equal(r->head[0].check, 400);
    }
    free(r);
}

static void
test_rewrite_request_drops_any_field_named_in_connection(void **state)
{
    (void)state;
    /* X-Secret is the 36th field: past the first 32 fields. */
    char req[1024];
    int len = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Secret\r\n");
    for (int i = 0; i < 33; i++) {
        len += snprintf(req + len, sizeof(req) - (size_t)len, "X-F%d: %d\r\n", i, i);
    }
    len += snprintf(req + len, sizeof(req) - (size_t)len, "X-Secret: 1\r\n\r\n");
    assert_true(len > 0 && (size_t)len < sizeof(req));
    struct run *r = parse_request(req, (size_t)len);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    assert_int_equal(r->head[0].nfields, 36);
    assert_int_equal(field_index(&r->head[0], "X-Secret"), 35);
    if (r->head[0].check == 0) {
        assert_non_null(strstr(r->head[0].out, "\r\nX-F32: 32\r\n"));
        assert_null(strstr(r->head[0].out, "X-Secret"));
    }
    free(r);
}

static void
test_rewrite_response_removes_hop_by_hop_fields(void **state)
{
    (void)state;
    static const char resp[] = "HTTP/1.1 200 OK\r\n"
                               "Connection: keep-alive, X-Hop\r\n"
                               "Keep-Alive: timeout=5\r\n"
                               "X-Hop: 1\r\n"
                               "Trailer: X-T\r\n"
                               "Upgrade: h2\r\n"
                               "Proxy-Connection: keep-alive\r\n"
                               "TE: trailers\r\n"
                               "Content-Length: 2\r\n"
                               "Server: s\r\n"
                               "\r\n"
                               "ok";
    const struct opts o = { .response = true };
    /* Trailer is end-to-end (RFC 9110, 6.6.2): it stays. */
    assert_rewritten(LIT(resp), &o,
                     "HTTP/1.1 200 OK\r\nTrailer: X-T\r\nContent-Length: 2\r\nServer: s\r\n\r\n");
}

static void
test_rewrite_1xx_and_204_drop_framing_fields(void **state)
{
    (void)state;
    const struct opts o = { .response = true };
    assert_rewritten(LIT("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n"), &o,
                     "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n");
    assert_rewritten(LIT("HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"), &o,
                     "HTTP/1.1 204 No Content\r\n\r\n");
    assert_rewritten(LIT("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\nContent-Length: 0\r\n\r\n"), &o,
                     "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n");
    /* Others keep theirs: a 304's Content-Length is the representation's. */
    assert_rewritten(LIT("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n"), &o,
                     "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n");
    assert_rewritten(LIT("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), &o,
                     "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
}

static void
test_rewrite_response_says_close_when_closing(void **state)
{
    (void)state;
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    const struct opts close11 = { .response = true, .close = true };
    assert_rewritten(LIT(resp), &close11,
                     "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n");
    const struct opts close10 = { .response = true, .client_version = 10, .close = true };
    assert_rewritten(LIT(resp), &close10,
                     "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n");
    const struct opts open11 = { .response = true };
    assert_rewritten(LIT(resp), &open11, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n");
}

static void
test_rewrite_response_keeps_http10_client_alive(void **state)
{
    (void)state;
    const struct opts o = { .response = true, .client_version = 10 };
    assert_rewritten(
        LIT("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"), &o,
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n");
}

static void
test_rewrite_response_for_http10_client_drops_every_transfer_encoding(void **state)
{
    (void)state;
    /* Its body goes out de-chunked: no Transfer-Encoding field may stay,
     * however many there were (only the first went before). */
    const struct opts o10 = { .response = true, .client_version = 10, .close = true };
    static const char resp[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nX-A: 1\r\n"
                               "transfer-encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_rewritten(LIT(resp), &o10, "HTTP/1.1 200 OK\r\nX-A: 1\r\nConnection: close\r\n\r\n");
    const struct opts o11 = { .response = true };
    assert_rewritten(LIT(resp), &o11,
                     "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nX-A: 1\r\n"
                     "transfer-encoding: chunked\r\n\r\n");
    struct run *r = parse_all(LIT(resp), &o11);
    assert_true(r->head[0].chunked);
    free(r);
}

static void
test_rewrite_101_keeps_upgrade(void **state)
{
    (void)state;
    static const char resp[] = "HTTP/1.1 101 Switching Protocols\r\n"
                               "Upgrade: websocket\r\n"
                               "Connection: Upgrade\r\n"
                               "Sec-WebSocket-Accept: s\r\n"
                               "\r\n";
    static const char *const expected = "HTTP/1.1 101 Switching Protocols\r\n"
                                        "Upgrade: websocket\r\n"
                                        "Sec-WebSocket-Accept: s\r\n"
                                        "Connection: upgrade\r\n"
                                        "\r\n";
    const struct opts o = { .response = true };
    assert_rewritten(LIT(resp), &o, expected);
    /* Even when the client connection is to close after it. */
    const struct opts close = { .response = true, .close = true };
    assert_rewritten(LIT(resp), &close, expected);
    assert_rewritten(LIT("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                         "Connection: X-Bar, Upgrade\r\nX-Bar: 1\r\n\r\n"),
                     &o,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: upgrade\r\n\r\n");
}

static void
test_rewrite_response_keeps_code_and_reason(void **state)
{
    (void)state;
    const struct opts o = { .response = true };
    assert_rewritten(LIT("HTTP/1.0 404 Not Found Here\r\nContent-Length: 0\r\n\r\n"), &o,
                     "HTTP/1.1 404 Not Found Here\r\nContent-Length: 0\r\n\r\n");
    assert_rewritten(LIT("HTTP/1.1 599 \r\nContent-Length: 0\r\n\r\n"), &o,
                     "HTTP/1.1 599 \r\nContent-Length: 0\r\n\r\n");
}

static void
test_rewrite_response_keeps_framing_fields_named_in_connection(void **state)
{
    (void)state;
    /* The client frames the body by Content-Length; without it, a kept-alive
     * client could not tell where this response ends. */
    const struct opts o = { .response = true };
    struct run *r = parse_all(
        LIT("HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 2\r\n\r\nok"), &o);
    assert_int_equal(r->ev[0], DM_HTTP_HEAD_DONE);
    if (r->head[0].check == 0) {
        assert_non_null(strstr(r->head[0].out, "\r\nContent-Length: 2\r\n"));
    } else {
        assert_int_equal(r->head[0].check, 502);
    }
    free(r);
}

static void
test_rewrite_response_after_an_empty_line_keeps_its_status_line(void **state)
{
    (void)state;
    /* llhttp skips an empty line before a status line, and the check passes
     * the head that starts with it: the rewrite must not fail on it. */
    const struct opts o = { .response = true };
    struct run *r = parse_all(LIT("HTTP/1.1 100 Continue\r\n\r\n"
                                  "\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
                              &o);
    assert_int_equal(r->nheads, 2);
    assert_int_equal(r->head[1].status, 200);
    assert_int_equal(r->head[1].check, 0);
    assert_string_equal(r->head[1].out, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    free(r);
}

static void
test_rewrite_response_with_too_small_cap_returns_zero(void **state)
{
    (void)state;
    /* parse_all() tries every cap below the length on every head. */
    const struct opts o = { .response = true, .client_version = 10 };
    struct run *r = parse_all(LIT("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), &o);
    assert_string_equal(r->head[0].out,
                        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n");
    free(r);
}

/* ---- fail safety ---- */

/* Inputs of all kinds, good and bad, for the prefix test below. */
static const struct {
    const char *text;
    size_t len;
    struct opts o;
} corpus[] = {
    { LIT("GET /index.html HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n"), { 0 } },
    { LIT(PIPE_1 PIPE_2 "xyz" PIPE_3), { 0 } },
    { LIT(PIPE_1 PIPE_2 "xyz" PIPE_3), { .max_fields = 1 } },
    { LIT("POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
          "5;n=v\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"),
      { 0 } },
    { LIT("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: ws\r\n\r\nxyz"), { 0 } },
    { LIT("GET / HTTP/1.1\r\nHost: a\r\nX-A: one\r\n two\r\n\r\n"), { 0 } },
    { LIT("GET / HTTP/1.1\r\nHost : a\r\nX-A: a\0b\r\n\r\n"), { 0 } },
    { LIT("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nhello"), { 0 } },
    { LIT("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
      { 0 } },
    { LIT("GET http://example.com/a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), { 0 } },
    { LIT("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
      { .response = true } },
    { LIT("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"),
      { .response = true, .no_body = true } },
    { LIT("HTTP/1.1 101 Switching Protocols\r\nUpgrade: ws\r\nConnection: upgrade\r\n\r\nxyz"),
      { .response = true } },
    { LIT("HTTP/1.1 200 OK\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\n\r\nuntil close"),
      { .response = true, .eof = true, .client_version = 10 } },
    { LIT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
      { .response = true, .close = true } },
};

static void
test_every_prefix_agrees_with_the_whole_input(void **state)
{
    (void)state;
    /* Each prefix of each input, alone in an exactly sized buffer, gives the
     * events and heads of the whole input up to where it stops. */
    for (size_t i = 0; i < sizeof(corpus) / sizeof(corpus[0]); i++) {
        struct run *whole = parse_all(corpus[i].text, corpus[i].len, &corpus[i].o);
        struct opts o = corpus[i].o;
        o.eof = false;
        for (size_t m = 0; m < corpus[i].len; m++) {
            char how[64];
            snprintf(how, sizeof(how), "input %zu cut at %zu", i, m);
            struct run *r = run_once(corpus[i].text, m, &o, 0, false);
            same_run(how, whole, r, true);
            free(r);
        }
        free(whole);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_head_is_spans_and_message_ends_with_it),
        cmocka_unit_test(test_empty_field_value_is_its_own_field),
        cmocka_unit_test(test_post_body_ends_after_content_length_bytes),
        cmocka_unit_test(test_chunked_body_with_extensions_and_trailer_is_decoded),
        cmocka_unit_test(test_a_chunk_size_line_is_bounded),
        cmocka_unit_test(test_pipelined_requests_are_each_found_after_next),
        cmocka_unit_test(test_response_body_ends_after_content_length_bytes),
        cmocka_unit_test(test_response_to_head_has_no_body_despite_content_length),
        cmocka_unit_test(test_204_and_304_have_no_body_despite_content_length),
        cmocka_unit_test(test_100_continue_then_final_response_in_one_buffer),
        cmocka_unit_test(test_101_ends_message_then_reports_upgrade_at_head_end),
        cmocka_unit_test(test_upgrade_request_reports_upgrade_at_head_end),
        cmocka_unit_test(test_close_delimited_body_ends_at_eof),
        cmocka_unit_test(test_eof_after_a_complete_message_reports_no_message),
        cmocka_unit_test(test_eof_inside_a_response_head_is_an_error),
        cmocka_unit_test(test_eof_inside_a_content_length_body_is_an_error),
        cmocka_unit_test(test_content_length_with_transfer_encoding_is_refused),
        cmocka_unit_test(test_duplicate_content_length_is_refused),
        cmocka_unit_test(test_malformed_content_length_is_refused),
        cmocka_unit_test(test_transfer_encoding_other_than_one_final_chunked_is_refused),
        cmocka_unit_test(test_transfer_encoding_without_a_coding_is_refused),
        cmocka_unit_test(test_transfer_encoding_exactly_chunked_is_accepted),
        cmocka_unit_test(test_transfer_encoding_with_codings_before_chunked_is_501),
        cmocka_unit_test(test_transfer_encoding_in_http10_is_refused),
        cmocka_unit_test(test_obs_fold_is_refused),
        cmocka_unit_test(test_control_byte_in_a_status_line_is_refused),
        cmocka_unit_test(test_whitespace_before_colon_is_refused),
        cmocka_unit_test(test_control_bytes_in_a_value_are_refused),
        cmocka_unit_test(test_bare_line_feeds_are_refused),
        cmocka_unit_test(test_missing_host_is_refused_in_http11_only),
        cmocka_unit_test(test_two_host_fields_are_refused),
        cmocka_unit_test(test_invalid_host_is_refused),
        cmocka_unit_test(test_unsupported_version_is_505),
        cmocka_unit_test(test_connect_is_405),
        cmocka_unit_test(test_request_line_without_version_is_refused_at_once),
        cmocka_unit_test(test_trailers_are_checked_as_strictly_as_a_head),
        cmocka_unit_test(test_response_trailers_are_checked_and_bounded),
        cmocka_unit_test(test_too_many_fields_is_431),
        cmocka_unit_test(test_absolute_form_target_is_reduced_to_its_path),
        cmocka_unit_test(test_absolute_form_without_path_keeps_its_query),
        cmocka_unit_test(test_absolute_and_asterisk_forms_are_checked),
        cmocka_unit_test(test_keep_alive_follows_version_and_connection),
        cmocka_unit_test(test_upgrade_needs_connection_token_and_upgrade_field),
        cmocka_unit_test(test_a_method_llhttp_does_not_know_is_forwarded),
        cmocka_unit_test(test_expect_continue_is_detected),
        cmocka_unit_test(test_rewrite_request_drops_expect_continue_of_http_1_0),
        cmocka_unit_test(test_rewrite_request_removes_hop_by_hop_fields),
        cmocka_unit_test(test_rewrite_request_appends_client_to_x_forwarded_for),
        cmocka_unit_test(test_rewrite_request_replaces_x_forwarded_proto),
        cmocka_unit_test(test_rewrite_request_appends_to_via),
        cmocka_unit_test(test_rewrite_request_sets_the_proxys_field),
        cmocka_unit_test(test_rewrite_http10_request_gets_default_host_and_http11),
        cmocka_unit_test(test_rewrite_upgrade_request_keeps_upgrade),
        cmocka_unit_test(test_rewrite_request_with_too_small_cap_returns_zero),
        cmocka_unit_test(test_rewrite_request_keeps_framing_fields_named_in_connection),
        cmocka_unit_test(test_rewrite_request_drops_any_field_named_in_connection),
        cmocka_unit_test(test_rewrite_response_removes_hop_by_hop_fields),
        cmocka_unit_test(test_rewrite_1xx_and_204_drop_framing_fields),
        cmocka_unit_test(test_rewrite_response_says_close_when_closing),
        cmocka_unit_test(test_rewrite_response_keeps_http10_client_alive),
        cmocka_unit_test(test_rewrite_response_for_http10_client_drops_every_transfer_encoding),
        cmocka_unit_test(test_rewrite_101_keeps_upgrade),
        cmocka_unit_test(test_rewrite_response_keeps_code_and_reason),
        cmocka_unit_test(test_rewrite_response_keeps_framing_fields_named_in_connection),
        cmocka_unit_test(test_rewrite_response_after_an_empty_line_keeps_its_status_line),
        cmocka_unit_test(test_rewrite_response_with_too_small_cap_returns_zero),
        cmocka_unit_test(test_every_prefix_agrees_with_the_whole_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
