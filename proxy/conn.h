/*
 * The structs of the data path, shared by proxy/client.c, proxy/request.c
 * and proxy/upstream.c and read by proxy/learn.c and proxy/accesslog.c: a
 * client connection, a request, a server connection. Their functions are in
 * proxy/client.h, proxy/request.h and proxy/upstream.h; proxy/internal.h has
 * the shape of the data path. Each belongs to one worker, and only its thread
 * touches it.
 */
#ifndef DM_PROXY_CONN_H
#define DM_PROXY_CONN_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "parsers/http.h"
#include "proxy/internal.h"

#define DM_CORK_MAX 4 /* writes a server connection holds until the flush */

struct dm_buf;
struct dm_learn;
struct dm_tls;
struct dm_placer;
struct dm_req;
struct dm_sessions_member;
struct dm_upstream;

enum dm_client_state {
    DM_C_IDLE,    /* between requests */
    DM_C_HEAD,    /* reading a request head */
    DM_C_CONNECT, /* head read, waiting for a server connection */
    DM_C_BODY,    /* forwarding the request body */
    DM_C_WAIT,    /* request forwarded, response under way */
    DM_C_TUNNEL,  /* after a 101: raw bytes both ways */
};

struct dm_client {
    uv_tcp_t tcp;
    struct dm_worker *w;
    struct dm_runtime *rt; /* reference: the worker's at accept, or at a later request's start */
    struct dm_runtime *tls_rt;     /* reference: a TLS client's accept-time one, once rt moved on */
    struct dm_client *prev, *next; /* all of the worker's clients */
    struct dm_tnode timer;         /* header, keep-alive or body timeout */
    struct dm_tnode send_timer;    /* timeouts.client_send, while bytes are queued for it */
    size_t send_mark;              /* bytes queued at the last check, plus those queued since */
    struct dm_http_parser parser;
    struct dm_buf *in;  /* read buffer; NULL while idle */
    struct dm_req *req; /* request being served; NULL while idle */
    union {
        struct sockaddr sa;
        struct sockaddr_in in4;
        struct sockaddr_in6 in6;
    } peer;
    struct dm_tls *tls; /* a TLS listener's connection (proxy/tls.h), or NULL */
    void *conn_state;   /* the pool policy's per-connection state (ops->conn_state_size), or NULL */
    struct dm_client *aprev, *anext; /* the worker's list of clients with state */
    int32_t bound;                   /* affinity: server of the last request, or -1 */
    uint16_t bound_pool;             /* its pool */
    uint16_t conn_state_pool;        /* pool whose policy owns conn_state */
    uint16_t held_pool;              /* the pool whose held or queued count has it */
    uint32_t writes;                 /* writes in flight */
    uint32_t head_start;             /* offset in `in` where the current head starts */
    /* queue_order: page, loop time's low 32 bits: when the connection's
     * current page began, and when its last response was done. */
    uint32_t page_start_ms, page_done_ms;
    uint8_t state; /* enum dm_client_state */
    bool reading;
    bool paused;       /* reading stopped by back-pressure */
    bool eof;          /* the client sent FIN */
    bool close_after;  /* close when the writes in flight are done */
    bool peer_counted; /* counted in proxy/peers.h (max_conns_per_client) */
    bool closing;
    bool served;      /* at least one request was served (header vs keep-alive timeout) */
    bool any_host;    /* its page is known under the empty host (a host-less preload) */
    bool held;        /* its request is counted in its pool's held (DM_T_HOLD) */
    bool queued;      /* its request is counted in its pool's queued (DM_T_QUEUE) */
    bool write_wait;  /* a pipelined request waits for the client to take what is queued */
    bool tls_wait;    /* reading waits for the client to take TLS's own answers (key updates) */
    uint8_t listener; /* index of the listener it came through (255: 255 or later) */
};

enum dm_upstream_state {
    DM_U_CONNECTING,
    DM_U_IDLE, /* in the keep-alive pool */
    DM_U_HEAD, /* waiting for / reading a response head */
    DM_U_BODY,
    DM_U_TUNNEL,
};

struct dm_upstream;
typedef void (*dm_upstream_ready_cb)(struct dm_req *req, struct dm_upstream *up, int status);

struct dm_upstream {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t creq;
    struct dm_tls *tls; /* a TLS pool's connection (proxy/tls.h), or NULL */
    struct dm_worker *w;
    struct dm_runtime *rt; /* reference */
    size_t pool;
    int server;
    struct dm_upstream *prev, *next; /* idle list */
    struct dm_req *req;
    dm_upstream_ready_cb ready;
    struct dm_http_parser parser;
    struct dm_buf *in;
    /* A chunked response's framing since its last data byte, not forwarded
     * yet (bounded by DM_HTTP_CHUNK_LINE_MAX), then its last chunk and trailer
     * section (from trailers_at), forwarded once checked; or NULL. */
    struct dm_buf *held;
    uint32_t trailers_at; /* UINT32_MAX: not in the trailer section */
    bool chunked;         /* the response being read has a chunked body */
    uint64_t deadline_ms; /* loop time of the current timeout, UINT64_MAX = none */
    uint64_t connect_us;  /* when its connect began (uv_hrtime), for the host's connect_us */
    uint32_t head_start;
    uint32_t writes;
    struct dm_upstream *cork_next;   /* the worker's list of corked connections */
    uv_buf_t cork_bufs[DM_CORK_MAX]; /* writes waiting for the end of the iteration */
    struct dm_buf *cork_hold[DM_CORK_MAX];
    uint8_t ncork;
    bool corked;   /* on the worker's list */
    uint8_t state; /* enum dm_upstream_state */
    bool reused;
    bool got_bytes;
    bool paused;
    bool deadline_held; /* paused: server_response stopped while the client is not reading */
    bool closing;
    bool counted;   /* connected: in its host's connections until the close callback */
    bool commanded; /* closed by a command: in the worker's commanded_closing until freed */
};

struct dm_req {
    size_t alloc_size; /* bytes allocated, for the worker's free list */
    uint32_t max_fields;
    uint32_t tried_bytes;
    struct dm_client *c;
    struct dm_upstream *up;
    struct dm_buf *head_buf;  /* holds the request head (msg spans point into it) */
    struct dm_buf *out_head;  /* the rewritten head, kept for a retry */
    struct dm_buf *resp_head; /* the rewritten response head, until written */
    struct dm_buf *trailers;  /* a chunked request's trailer section, held until checked */
    struct dm_http_msg msg;
    struct dm_http_info info;
    struct dm_http_msg rmsg; /* response head */
    struct dm_http_info rinfo;
    size_t pool;
    int server;
    unsigned attempts;
    unsigned status;
    uint32_t head_len;
    uint32_t tail;          /* last four bytes of a chunked request body */
    uint64_t key;           /* catalog key of the target (work pools) */
    int64_t work;           /* expected work still counted in the server's inflight_work */
    int64_t added;          /* expected work this request added, for on_response */
    struct dm_learn *learn; /* HTML scan of this response (work pools), or NULL */
    uint64_t start_us;
    uint64_t up_start_us;
    struct dm_tnode bound;    /* timeouts.request, when set */
    uint64_t body_raw;        /* request body bytes read, framing included */
    uint64_t body_mark;       /* body_raw when the current body window began */
    uint64_t resp_bytes;      /* to the client: head and body */
    uint64_t resp_head_bytes; /* of which the head (and any 1xx heads) */
    bool body_done;
    bool counted;      /* dm_req_account() ran: the server's counters are given back */
    bool picked;       /* in its server's conns and inflight and its host's inflight */
    bool continued;    /* a 1xx went to the client (Expect: 100-continue answered) */
    bool head_pending; /* out_head not written to the server yet */
    bool body_sent;    /* request body bytes went to the server: no retry */
    bool resp_started;
    uint16_t interim; /* interim (1xx) responses passed on: at most DM_INTERIM_MAX */
    bool head_done;   /* its head was read whole: a request, logged and counted once */
    bool routed;      /* its pool is chosen (before: answered by the listener, e.g. 400, 429) */
    bool logged;      /* dm_accesslog_write() ran for it */
    bool cut;         /* it ended with its connection before its response did */
    uint64_t hold_deadline_ms;  /* loop time a held request gets its 503; 0: never held */
    uint64_t queue_deadline_ms; /* loop time a queued request gets its 503; 0: never queued */
    /* Its place in the worker's queue, set when it is first queued: the
     * arrival in arrival order, arrival + dm_queue_class_offset_us of its
     * expected size's class (queue_class) with queue_order: size, its
     * page's start + page_bound with queue_order: page (DM_QUEUE_LATE_MS
     * more once that has passed, internal.h). */
    uint64_t queue_key_ms;
    uint8_t queue_class;
    bool close_client;
    bool dechunk; /* HTTP/1.0 client, chunked response: strip the framing */
    /* A session (an Upgrade of a session pool): its place in the pool's
     * placer, given back when the request is freed (its tunnel closed, or it
     * failed) or placed anew (a retry). */
    struct dm_placer *placer;
    struct dm_sessions_member *ticket;
    double rate;                  /* its rate tier, sent in session.tier_header; < 0: none */
    bool session_waiting;         /* the ticket waits for a batch pass */
    uint64_t session_deadline_ms; /* loop time a waiting session gets its 503 */
    uint8_t *tried;
    bool tried_own; /* tried is a block of its own (moved to a config with a larger pool) */
    struct dm_http_field fields[];
};

#endif
