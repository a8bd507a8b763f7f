/*
 * HTTP/1.1 message heads on top of llhttp. A struct dm_http_parser wraps one
 * llhttp parser and records the head of the message being parsed as spans
 * into the caller's buffer, which must stay contiguous (and unmoved) from the
 * first byte of the head to its end. It pauses at the end of the head and at
 * the end of the message so the caller can forward raw bytes in between.
 *
 * llhttp in strict mode accepts a few things a proxy must refuse (obs-fold, a
 * space before the colon, Transfer-Encoding in HTTP/1.0, a missing Host, an
 * HTTP/2.0 request line, a Transfer-Encoding that does not end in chunked is
 * only refused after the head): dm_http_check_request() refuses those before
 * anything is forwarded. Parsers own nothing and never allocate.
 */
#ifndef DM_PARSERS_HTTP_H
#define DM_PARSERS_HTTP_H

#include <llhttp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dm_span {
    const char *p;
    size_t len;
};

struct dm_http_field {
    struct dm_span name;
    struct dm_span value;
};

/* A parsed head. fields is caller-owned storage for up to max_fields fields. */
struct dm_http_msg {
    struct dm_span method; /* requests */
    struct dm_span target; /* requests */
    struct dm_http_field *fields;
    unsigned nfields;
    unsigned max_fields;
    bool too_many_fields; /* more than max_fields were seen */
};

enum dm_http_event {
    DM_HTTP_AGAIN = 0,     /* all input consumed, nothing ended */
    DM_HTTP_HEAD_DONE = 1, /* the head ended at *consumed */
    DM_HTTP_MSG_DONE = 2,  /* the message (body included) ended at *consumed */
    DM_HTTP_UPGRADE = 3,   /* the message ended and the connection changes protocol */
    DM_HTTP_TRAILERS = 4,  /* a chunked body's trailer section begins at *consumed */
};

/* Called with decoded body bytes (chunk framing removed), when set. */
typedef void (*dm_http_body_cb)(void *arg, const char *p, size_t len);

struct dm_http_parser {
    llhttp_t _ll;
    struct dm_http_msg *msg; /* where the head goes; set before the head starts */
    dm_http_body_cb on_body; /* optional */
    void *body_arg;
    uint64_t body_bytes; /* decoded body bytes of the current message */
    uint8_t _last;       /* 0 none, 1 field name, 2 field value, 3 url, 4 method */
    bool _in_head;
    bool _no_body;        /* response to HEAD */
    bool _open;           /* a message has begun and not completed */
    bool _versioned;      /* the request line had a version */
    const char *_url_end; /* just past the request target seen so far */
    uint8_t _ev;          /* event the last pause stands for */
    const char *_reason;  /* our own reason for the last error, or NULL (llhttp's) */
    /* A chunked body's framing since its last data byte (a chunk-size line,
     * its extensions, the CRLFs), bounded by DM_HTTP_CHUNK_LINE_MAX: bytes
     * before this call, and where the last data of this call ended. */
    uint32_t _framing;
    const char *_call_start;
    const char *_data_end;
    bool _last_chunk; /* past the last chunk: trailers, bounded as a head is, not framing */
    /* A request's method, read before llhttp is given it (dm_http_parse):
     * where it starts (NULL: not begun) and its length so far; a method
     * llhttp does not know is given to it as GET, with _method_own set. */
    const char *_method_at;
    size_t _method_len;
    bool _method_own;
};

/* The most bytes a chunked request body may have between two chunks' data
 * (or before its trailers): a chunk-size line with its extensions and the
 * CRLFs around it. */
#define DM_HTTP_CHUNK_LINE_MAX 4096

/* Initialises p for requests (is_request) or responses; p is caller memory. */
void dm_http_parser_init(struct dm_http_parser *p, bool is_request);

/*
 * Feeds len bytes. Returns an enum dm_http_event with *consumed = the bytes up
 * to that event (all of them for DM_HTTP_AGAIN), or a negative value on
 * malformed input (dm_http_parser_error() says why). After HEAD_DONE,
 * TRAILERS or MSG_DONE, call again with the rest. After UPGRADE, the rest is
 * not HTTP. The parser returns TRAILERS right after the last-chunk line
 * of a chunked body: the bytes from there to MSG_DONE are the trailer section
 * (and its final CRLF), which llhttp does not check as strictly as a head.
 */
int dm_http_parse(struct dm_http_parser *p, const char *data, size_t len, size_t *consumed);

/* For a response parser: the request was HEAD, so the response has no body. */
void dm_http_parser_expect_no_body(struct dm_http_parser *p, bool no_body);

/*
 * Signals EOF. Returns MSG_DONE (a close-delimited body ends here), AGAIN (no
 * message is open), or <0 (a message was cut short).
 */
int dm_http_parse_eof(struct dm_http_parser *p);

/* After MSG_DONE: be ready for the next message on the same connection. */
void dm_http_parser_next(struct dm_http_parser *p);

const char *dm_http_parser_error(const struct dm_http_parser *p);
unsigned dm_http_parser_status(const struct dm_http_parser *p);  /* responses */
unsigned dm_http_parser_version(const struct dm_http_parser *p); /* 10, 11, 20, ... */
bool dm_http_parser_needs_eof(const struct dm_http_parser *p);
bool dm_http_parser_keep_alive(const struct dm_http_parser *p);

/* Just past the last body data byte the last dm_http_parse call passed
 * (chunk framing not included), or NULL when it passed none. */
const char *dm_http_parser_data_end(const struct dm_http_parser *p);

/* The length of the RFC 9110 token (5.6.2: a method, a field name) s starts with. */
size_t dm_http_token_len(const char *s);

/* What dm_http_check_request() or _response() learnt about a head. */
struct dm_http_info {
    unsigned version; /* 10 or 11 */
    bool keep_alive;  /* the peer wants the connection kept */
    bool chunked;     /* Transfer-Encoding ends in chunked */
    bool te_other;    /* ... after other codings (gzip, chunked) */
    bool has_length;  /* Content-Length present */
    uint64_t content_length;
    bool upgrade;         /* Connection: upgrade with an Upgrade field */
    bool expect_continue; /* Expect: 100-continue */
    struct dm_span host;  /* Host value, or empty */
    struct dm_span path;  /* origin-form target (absolute-form is reduced to its path) */
    bool conn_fields;     /* Connection names other fields (dropped when forwarding) */
};

/*
 * Checks a complete request head (head, head_len: its raw bytes; msg: as parsed
 * by dm_http_parse on those bytes) against everything that could be read two
 * ways. Returns 0 and fills info, or the status to answer (400, 405, 431, 501
 * for a Transfer-Encoding that ends in chunked but is not exactly chunked, 505)
 * with *reason set to a static string.
 */
int dm_http_check_request(const char *head, size_t head_len, const struct dm_http_msg *msg,
                          unsigned version, struct dm_http_info *info, const char **reason);

/*
 * Checks a request's trailer section (p, len: the raw bytes after the
 * last-chunk line, up to and including the final empty line) as strictly as
 * a head: CRLF line ends only, no obs-fold, token names with the colon right
 * after them, no control bytes in values, and none of the fields that frame
 * or route a message (Content-Length, Transfer-Encoding, Host), the hop-by-hop
 * ones (Connection, TE, Trailer, Upgrade, ...) or those the proxy sets
 * (X-Forwarded-For/Proto, Forwarded, Via).
 * Returns 0, or 400 with *reason set to a static string.
 */
int dm_http_check_trailers(const char *p, size_t len, const char **reason);

/*
 * Checks a response's trailer section the same way, with at most max_fields
 * fields (0: any number); of the fields, only those that frame a message and
 * the hop-by-hop ones (Trailer included) are refused. Returns 0, or 502.
 */
int dm_http_check_response_trailers(const char *p, size_t len, unsigned max_fields,
                                    const char **reason);

/* Checks a response head the same way (502 when it is unusable, Transfer-Encoding
 * in an HTTP/1.0 response included). */
int dm_http_check_response(const char *head, size_t head_len, const struct dm_http_msg *msg,
                           unsigned version, struct dm_http_info *info, const char **reason);

/* What the proxy adds to a forwarded request. */
struct dm_http_forward {
    const char *client_addr;  /* X-Forwarded-For */
    const char *proto;        /* X-Forwarded-Proto: "http" */
    const char *via;          /* Via: "1.1 dimmer" */
    const char *default_host; /* Host to send when an HTTP/1.0 request had none */
    /* Fields the proxy sets (a NULL name: none), e.g. a session's rate tier
     * or a client certificate's subject: every field of the request with
     * that name (in any case) is dropped, and this one is written with its
     * value, which must be a valid field value (NULL: dropped only). */
    const char *set_name[2];
    const char *set_value[2];
};

/*
 * Writes the request head to send to a server into out (cap bytes): request
 * line with the origin-form target and HTTP/1.1, fields without the hop-by-hop
 * ones (and those named in Connection), X-Forwarded-For appended to an existing
 * one, X-Forwarded-Proto replaced, Via appended, each fw->set_name[] replaced,
 * Connection kept only for an upgrade. Returns the length, or 0 when cap is
 * too small.
 */
size_t dm_http_write_request(char *out, size_t cap, const struct dm_http_msg *msg,
                             const struct dm_http_info *info, const struct dm_http_forward *fw);

/*
 * Writes the response head to send to a client: status line as received (with
 * the client's version), fields without the hop-by-hop ones (nor, in a 1xx or
 * 204, Content-Length and Transfer-Encoding), then
 * "Connection: close" when close is set, "Connection: keep-alive" for an
 * HTTP/1.0 client that keeps the connection, the upgrade fields for a 101.
 * An HTTP/1.0 client gets no Transfer-Encoding field: a chunked body goes to
 * it without its framing (an HTTP/1.0 client knows no transfer coding).
 * Returns the length, or 0 when cap is too small.
 */
size_t dm_http_write_response(char *out, size_t cap, const char *head, size_t head_len,
                              const struct dm_http_msg *msg, const struct dm_http_info *info,
                              unsigned client_version, bool close);

/* Case-insensitive compare of a span with a NUL-terminated lowercase string. */
bool dm_span_ieq(struct dm_span s, const char *lower);

#endif
