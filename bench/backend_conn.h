/*
 * The HTTP serving core of dimmer-backend: the process state that every connection
 * shares, a connection (its model is described at the top of backend_conn.c), and the
 * functions the endpoints answer through. Every one of them runs on the loop thread, and
 * one that fails closes the connection itself, so the caller only has to stop.
 */
#ifndef DM_BENCH_BACKEND_CONN_H
#define DM_BENCH_BACKEND_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llhttp.h>
#include <openssl/evp.h>
#include <uv.h>

#include "bench/backend_power.h"
#include "bench/backend_queue.h"

#define DM_IN_CAP     (32 * 1024) /* input buffer; also the largest request head */
#define DM_OUT_INLINE 512         /* bytes carried inside a write request */

/* Framing of a response body, where a head takes a length. */
#define DM_CLEN_NONE    (-1)
#define DM_CLEN_CHUNKED (-2)

struct dm_backend_conn;
struct dm_backend_out;
struct dm_site;

/*
 * What the connection core asks of the endpoints (backend_routes.c fills it in, as
 * dm_backend_endpoints): route answers the request whose head is complete,
 * in[head_start, parse_off); route_control does the same on the control listener;
 * ws_input consumes the buffered input of a connection that has switched to DM_MODE_WS.
 */
struct dm_backend_handlers {
    void (*route)(struct dm_backend_conn *c);
    void (*route_control)(struct dm_backend_conn *c);
    void (*ws_input)(struct dm_backend_conn *c);
};

/* The process: what every connection shares. */
struct dm_backend {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_tcp_t control; /* the control listener, when has_control */
    bool has_control;
    /* --control-token-file: POST /sleep and /wake need "Authorization: Bearer
     * TOKEN" (token_len > 0); GET /power and /stats stay open. */
    char control_token[257];
    size_t control_token_len;
    uv_signal_t sigterm, sigint, sigusr1, sigusr2;
    llhttp_settings_t settings;
    const struct dm_backend_handlers *handlers; /* the endpoints: &dm_backend_endpoints */
    struct dm_site *site;
    char *fill[3]; /* object bodies: picture, script, stylesheet (see dm_backend_make_fills) */
    const char *name;
    uint64_t requests;     /* on the serving listener, as the two below */
    uint64_t connections;  /* accepted, ever */
    uint64_t open;         /* open now (the one asking /stats included) */
    uint64_t pages;        /* GET /page/N.html served */
    uint64_t page_objects; /* the embedded objects of those pages, summed */
    uint64_t objects;      /* GET /obj/... served */
    struct dm_backend_out *free_outs;
    unsigned nfree;
    struct dm_backend_conn *conns;     /* of the serving listener */
    struct dm_backend_conn *ctl_conns; /* of the control listener */
    bool stopping;
    uint64_t header_ms;    /* a request head must come whole within this (0: no bound) */
    uint64_t keepalive_ms; /* a connection that waits for a request closes after this (0: never) */
    uint64_t timed_out;    /* connections closed by one of the two */
    struct dm_backend_queue queue; /* capacity and service times (backend_queue.c) */
    struct dm_backend_power power; /* power states, meter, WOL, agent (backend_power.c) */
};

struct dm_backend_out {
    uv_write_t req;
    struct dm_backend_out *next; /* free list */
    struct dm_backend_conn *conn;
    char *heap; /* freed when the write completes */
    size_t inl_len;
    char inl[DM_OUT_INLINE];
};

enum dm_backend_mode {
    DM_MODE_HTTP,
    DM_MODE_WS,
    DM_MODE_LINGER, /* write side shut down; reading and discarding until EOF or timeout */
};

enum dm_backend_gen {
    DM_GEN_NONE, /* response fully queued */
    DM_GEN_MEM,  /* body from memory: src[off % period] or src[off] */
    DM_GEN_ECHO, /* body is the request body */
    DM_GEN_SHA,  /* answer once the request body is hashed */
    DM_GEN_SLOW, /* answer when the timer fires */
};

enum dm_backend_ev { DM_EV_NONE, DM_EV_HEAD, DM_EV_DONE };

/* The response to the current request; zeroed when a request head is routed. */
struct dm_backend_resp {
    enum dm_backend_gen gen;
    bool active;      /* generator not finished */
    bool started;     /* a final response was begun for the current request */
    bool chunked;     /* body framed with Transfer-Encoding: chunked */
    bool close_after; /* close the connection after this response */
    bool head_only;   /* HEAD: headers with the length a GET would have, no body */
    bool ws_upgrade;  /* 101 sent: switch to WebSocket when the request ends */
    const char *src;
    size_t period; /* 0: src is plain memory */
    uint64_t off, remaining;
    uint64_t body_bytes;        /* request body bytes seen */
    struct dm_backend_out *hdr; /* response head waiting to go with the first body write */
};

/* Where the WebSocket echo is in the frame it reads (backend_ws.c). */
struct dm_backend_ws {
    bool in_payload;
    bool discard; /* pong: read and drop */
    uint8_t opcode;
    uint8_t mask[4];
    unsigned mask_off;
    uint64_t remaining;
};

struct dm_backend_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;        /* the service time, then /slow, then the linger timeout */
    uv_timer_t idle;         /* waiting for a request (keepalive_ms), or for its head (header_ms) */
    unsigned char idle_kind; /* which of the two idle runs for: IDLE_NONE, ... */
    uv_shutdown_t shutdown_req;
    llhttp_t parser;
    struct dm_backend *be;
    struct dm_backend_conn *prev, *next;
    enum dm_backend_mode mode;
    enum dm_backend_ev ev;
    int open_handles;
    unsigned inflight;
    bool counted; /* in be->open */
    bool reading, eof, closing, shutting;
    bool http10;
    bool in_head, head_known, req_active, wait_resp;
    bool resume_head; /* routed: llhttp needs one more call to finish a bodiless request */
    bool control;     /* of the control listener: never queued, not in the serving counts */
    bool busy;        /* the queue was full: route() answers 503 */
    enum dm_backend_slot slot;
    uint64_t service_ms;                   /* of the parked request */
    struct dm_backend_conn *qprev, *qnext; /* in be->queue while DM_SLOT_QUEUED */
    size_t in_len, parse_off, head_start;
    struct dm_backend_resp r;
    struct dm_backend_ws ws;
    EVP_MD_CTX *md;
    char in[DM_IN_CAP]; /* last: not zeroed at accept */
};

/* Bytes inside a buffer that someone else owns. */
struct dm_backend_span {
    const char *p;
    size_t len;
};

/* ---- accepting and driving ---- */

/* Fills llhttp's callbacks for the requests of every connection. */
void dm_backend_settings_init(llhttp_settings_t *settings);

/*
 * The serving listener's connection callback (server->data is the struct dm_backend):
 * accepts one connection and starts reading; while the node is not awake, resets it
 * unread instead (counted as refused). Out of memory leaves it in the backlog.
 */
void dm_backend_on_connection(uv_stream_t *server, int status);

/* The same for the control listener, whose connections are served in every state. */
void dm_backend_on_control_connection(uv_stream_t *server, int status);

/* Routes c's parked request, whose service time has ended, and drives c on. */
void dm_backend_conn_serve(struct dm_backend_conn *c);

/*
 * Moves c on after an event: produces more of the response, parses what is buffered,
 * and stops or restarts reading. The endpoints call it when a timer of theirs answers.
 */
void dm_backend_drive(struct dm_backend_conn *c);

/* Closes c now: its handles close and the last close callback frees it. Idempotent. */
void dm_backend_conn_close(struct dm_backend_conn *c);

/* Closes c with a reset (SO_LINGER 0), dropping whatever it had not sent yet. */
void dm_backend_conn_reset(struct dm_backend_conn *c);

/* Closes the write side once the queued writes are out, then lingers. */
void dm_backend_begin_shutdown(struct dm_backend_conn *c);

/* ---- writing ---- */

/* A write request from the free list (or malloc), empty; NULL when out of memory. */
struct dm_backend_out *dm_backend_out_take(struct dm_backend_conn *c);

/* Frees o's heap part and returns o to the free list (or frees it); NULL is a no-op. */
void dm_backend_out_release(struct dm_backend *be, struct dm_backend_out *o);

/* Sends `o` with `bufs`, taking `o`. On failure closes the connection. 0 or <0. */
int dm_backend_out_send(struct dm_backend_conn *c, struct dm_backend_out *o, const uv_buf_t *bufs,
                        unsigned n);

/*
 * Sends what is already in o->inl (o->inl_len bytes) followed by a copy of the len bytes
 * at data (NULL when len is 0), taking `o`. 0 or <0, having closed the connection.
 */
int dm_backend_out_send_copy(struct dm_backend_conn *c, struct dm_backend_out *o, const void *data,
                             size_t len);

/* Sends a copy of the len bytes at data. 0 or <0, having closed the connection. */
int dm_backend_send_copy(struct dm_backend_conn *c, const void *data, size_t len);

/* ---- responses ---- */

/* The reason phrase of status ("Not Found"), or "Status" for one not in the table. */
const char *dm_backend_reason(int status);

/*
 * Formats a response head into o->inl. `clen` is a length, DM_CLEN_NONE or
 * DM_CLEN_CHUNKED; `extra` is more header lines, each ending in CRLF, or NULL. The inputs
 * are bounded (name, content types and extra lines are ours), so the head always fits.
 * NULL, having closed the connection, when out of memory.
 */
struct dm_backend_out *dm_backend_head_make(struct dm_backend_conn *c, int status,
                                            const char *ctype, int64_t clen, const char *extra);

/* A complete response whose body is copied: one write (no body for HEAD). */
void dm_backend_respond_text(struct dm_backend_conn *c, int status, const char *ctype,
                             const void *body, size_t len, const char *extra);

/* dm_backend_respond_text() of the string msg as text/plain. */
void dm_backend_respond_msg(struct dm_backend_conn *c, int status, const char *msg,
                            const char *extra);

/*
 * Starts a response whose body is `len` bytes of memory (see enum dm_backend_gen),
 * src[off % period] or, with period 0, src[off]; framed with Content-Length (framing 0),
 * DM_CLEN_CHUNKED or DM_CLEN_NONE (by close). `src` must outlive the connection.
 */
void dm_backend_respond_mem(struct dm_backend_conn *c, int status, const char *ctype,
                            const char *src, size_t period, uint64_t len, int64_t framing,
                            const char *extra);

/* ---- request heads ---- */

/* Whether s is exactly the string lit. */
bool dm_backend_span_eq(struct dm_backend_span s, const char *lit);

/* Whether s starts with lit; then *rest is the remainder. */
bool dm_backend_span_prefix(struct dm_backend_span s, const char *lit,
                            struct dm_backend_span *rest);

/* Whether s is lit, ignoring ASCII case. */
bool dm_backend_span_caseeq(struct dm_backend_span s, const char *lit);

/* Decimal digits only, at most `max`, into *out; false otherwise. */
bool dm_backend_parse_u64(struct dm_backend_span s, uint64_t max, uint64_t *out);

/*
 * The path of the request line's target: absolute-form loses scheme and authority, and
 * the query is dropped. llhttp has already validated the line. Points into head.
 */
struct dm_backend_span dm_backend_head_path(const char *head, size_t len);

/* The query of the request line's target, after the '?' (empty without one). */
struct dm_backend_span dm_backend_head_query(const char *head, size_t len);

/* The value of the first header called `name` (any case), without surrounding blanks. */
bool dm_backend_head_header(const char *head, size_t len, const char *name,
                            struct dm_backend_span *val);

#endif
