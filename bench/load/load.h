/*
 * dimmer-load: the program's shared definitions (bench/load/ only).
 *
 * One process, --threads T load threads, each with its own libuv loop, its
 * own connections and its own share of the sessions (session mode) or of the
 * connections (rate and closed modes); the main thread only gathers the
 * seconds and writes the outputs. A thread never waits for another: every
 * second it publishes what it saw in a slot of its own (struct dm_load_slot)
 * and the main thread merges the slots of one second once every thread has
 * published it.
 *
 * Files: main.c options, threads, the per-second line, CSV, JSON and plot;
 * conn.c one HTTP/1.1 client connection (connect, request, response, scoring
 * data); session.c users (page, embedded objects over up to
 * --conns-per-user connections, think time) and the pattern that sets how
 * many there are; pattern.c, hist.c and score.c are pure (libdm_load).
 *
 * Memory: no allocation per request in the steady state. Connections and
 * page loads are taken from per-thread free lists that grow to the peak and
 * are reused; a session is a fixed struct (sizeof(struct dm_load_session)),
 * and a session that is thinking holds no page load, only the keep-alive
 * connections it kept (none with --keepalive 0).
 */
#ifndef DM_BENCH_LOAD_LOAD_H
#define DM_BENCH_LOAD_LOAD_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "balancers/rng.h"
#include "bench/load/hist.h"
#include "bench/load/pattern.h"
#include "bench/load/pattern_file.h"
#include "bench/load/score.h"
#include "parsers/html_scan.h"
#include "parsers/http.h"

/* The embedded objects of one page of a manifest: paths, one after another. */
struct dm_load_objects {
    char *paths; /* NUL-terminated, back to back */
    size_t used;
    unsigned n;
};

enum dm_load_mode {
    DM_LOAD_SESSIONS = 0, /* users following a pattern (the default) */
    DM_LOAD_RATE,         /* open loop at --rate requests/s */
    DM_LOAD_CLOSED,       /* wrk's model: the next request when the last one is answered */
};

#define DM_LOAD_MAX_CPU     16  /* most --conns-per-user */
#define DM_LOAD_MAX_OBJECTS 256 /* embedded objects fetched per page (more are dropped) */
#define DM_LOAD_OBJ_BYTES   (32 * 1024)
#define DM_LOAD_PATH_MAX    1024 /* longest page path */
#define DM_LOAD_READ_BUF    (64 * 1024)
#define DM_LOAD_HEAD_MAX    (100 * 1024) /* a response head longer is malformed (curl's bound) */
#define DM_LOAD_INTERIM_MAX 64           /* interim (1xx) responses before the final one */
#define DM_LOAD_SLOTS       4            /* seconds a thread may run ahead of the main thread */
#define DM_LOAD_SCHED_MS    100

struct dm_load_opts {
    enum dm_load_mode mode;
    /* Target. */
    struct sockaddr_storage addr;
    char host[300];                   /* Host header: host[:port] as in the URL */
    char path[DM_LOAD_PATH_MAX];      /* rate and closed modes: the request target */
    struct sockaddr_storage *sources; /* --source: local addresses, in turn; NULL: the kernel's */
    unsigned nsources;
    /* Threads and connections. */
    unsigned threads;
    unsigned conns;      /* -c: rate and closed modes */
    double duration_s;   /* -d: rate and closed modes; session mode: the pattern's */
    double rate;         /* --rate: requests/s, all threads together */
    uint64_t timeout_ms; /* a request not answered by then fails (timeout) */
    uint64_t connect_timeout_ms;
    /* Sessions. */
    struct dm_load_pattern pattern;
    double max_sessions;
    unsigned conns_per_user;
    double think_ms;        /* mean of the exponential think time */
    unsigned session_pages; /* pages per session, 0: until the pattern ends it */
    double session_s;       /* seconds per session, 0: no bound */
    uint64_t keepalive_ms;  /* a connection idle this long is closed; 0: at each think */
    unsigned site_pages;    /* pages /page/0.html .. of the demo site */
    char **urls; /* --urls or --manifest: page paths, the most popular first; NULL: the site */
    unsigned nurls;
    struct dm_load_objects *objects; /* --manifest: urls[i]'s objects; NULL: scan the pages */
    double zipf;                     /* exponent of page popularity */
    double *zipf_cdf;                /* per page, cumulative, ends at 1 */
    bool scan;                       /* find embedded objects in pages (--no-objects: false) */
    uint64_t scan_limit;
    /* Scoring. */
    struct dm_score_bounds bounds;
    uint64_t seed;
};

/* What one thread saw during one second (or the whole run). */
struct dm_load_sec {
    uint64_t responses;           /* requests that ended: answered or failed */
    uint64_t bytes;               /* response bytes, heads included */
    uint64_t by_class[6];         /* responses by status class: [2] 2xx .. [5] 5xx */
    struct dm_score_counts score; /* every response */
    struct dm_score_counts pages; /* whole pages (session mode) */
    struct dm_hist hist;          /* latency of the answered ones, us */
    uint64_t sessions_started;
    uint64_t sessions_ended;
    uint64_t connects;
    /* The run's last second only: requests due and not answered when the run
     * ended (out on a connection, or in rate mode not sent yet), not scored,
     * and how long ago the oldest of them was due. */
    uint64_t unanswered;
    uint64_t unanswered_oldest_us;
    /* Levels, at the end of the second. */
    uint64_t active; /* sessions */
    uint64_t thinking;
    uint64_t open; /* connections */
    double target; /* sessions the pattern asked of this thread */
};

struct dm_load_slot {
    atomic_uint_fast64_t published; /* second + 1 once s holds that second */
    struct dm_load_sec s;
};

struct dm_load_thread;
struct dm_load_session;
struct dm_load_page;
struct dm_load_fixed;

/* Why a request ended without a valid response (or DM_FAIL_SLOW if it had one). */
struct dm_load_result {
    unsigned status; /* 0: none */
    enum dm_fail_kind kind;
    uint64_t latency_us; /* from the time the request was due */
    uint64_t bytes;
};

struct dm_load_conn;
typedef void (*dm_load_done_cb)(struct dm_load_conn *lc, const struct dm_load_result *r);

enum dm_load_conn_state {
    DM_LC_FREE = 0,
    DM_LC_CONNECTING,
    DM_LC_IDLE, /* connected, no request */
    DM_LC_BUSY, /* a request is out */
    DM_LC_CLOSING,
};

struct dm_load_conn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_timer_t timer; /* connect and response timeouts; rate mode: the next due time */
    struct dm_load_thread *t;
    struct dm_http_parser parser;
    dm_load_done_cb done;        /* the request's end */
    void *owner;                 /* the session, or the rate or closed mode's slot */
    struct dm_load_conn **where; /* the owner's pointer to it: NULL once it closes */
    struct dm_load_page *page;   /* set: the response is a page whose objects are scanned */
    struct dm_load_conn *next_free;
    unsigned index;  /* rate and closed modes: the connection's number */
    uint8_t state;   /* enum dm_load_conn_state */
    uint8_t handles; /* handles open, for the close */
    bool reused;     /* a request went out on it before: a stale close is retried */
    bool got_bytes;  /* of the current response */
    bool retried;
    bool want_close;      /* the response said Connection: close */
    bool writing;         /* wreq is out: its callback has not run yet */
    bool write_deferred;  /* the current request waits for that callback */
    bool in_head;         /* reading a response head */
    bool in_trailers;     /* reading a chunked body's trailer section */
    uint8_t interims;     /* interim responses to the current request */
    uint32_t head_bytes;  /* of the head or trailer section being read */
    const char *req_path; /* the request target (owned by the caller until done) */
    size_t req_path_len;
    uint64_t due_ns; /* when the request was due: its latency counts from here */
    uint64_t bytes;
    unsigned status;
};

/* One user: a page, its objects, a think time, again. */
enum dm_load_session_state {
    DM_LS_FREE = 0,
    DM_LS_LOADING,  /* a page and its objects */
    DM_LS_THINKING, /* between pages */
};

struct dm_load_session {
    uv_timer_t timer; /* think time */
    struct dm_load_thread *t;
    struct dm_load_conn *conns[DM_LOAD_MAX_CPU]; /* kept alive between pages */
    struct dm_load_page *page;                   /* while loading */
    struct dm_load_session *next_free;
    uint64_t start_ns;
    unsigned pages_done;
    uint8_t state; /* enum dm_load_session_state */
    bool ending;   /* ends at its next think time */
    bool timer_open;
};

/* A page being loaded: its path, the objects found, progress. */
struct dm_load_page {
    struct dm_load_page *next_free;
    struct dm_html_scan scan;
    uint64_t due_ns;
    unsigned nobj, next_obj, running; /* found, sent, out now */
    bool failed;
    enum dm_fail_kind fail_kind; /* of a failed response of the page, when failed */
    char path[DM_LOAD_PATH_MAX];
    size_t path_len;
    uint32_t obj_off[DM_LOAD_MAX_OBJECTS];
    uint16_t obj_len[DM_LOAD_MAX_OBJECTS];
    uint32_t obj_used;
    char obj[DM_LOAD_OBJ_BYTES];
};

struct dm_load_thread {
    unsigned id;
    uv_loop_t loop;
    uv_thread_t thread;
    uv_timer_t sec_timer;
    uv_timer_t sched; /* session mode: follow the pattern */
    const struct dm_load_opts *o;
    struct dm_rng rng;
    uint64_t t0_ns; /* the run's start, shared by every thread */
    uint64_t sec;   /* the second being recorded */
    bool stopping;
    struct dm_load_sec cur;
    struct dm_load_sec total;
    struct dm_load_slot slots[DM_LOAD_SLOTS];
    /* Connections. */
    struct dm_load_conn *free_conns;
    struct dm_load_fixed *fixed; /* rate and closed modes: this thread's connections */
    unsigned nfixed;
    uint64_t open;                        /* connections open or opening */
    unsigned next_source;                 /* --source: the address the next connection binds */
    double interval_ns;                   /* rate mode: between two requests of one connection */
    const atomic_uint_fast64_t *stop_sec; /* main: stop once this second is published */
    /* Sessions. */
    struct dm_load_session *sessions; /* max_per_thread of them */
    unsigned max_sessions;
    struct dm_load_session *free_sessions;
    unsigned active, ending, thinking;
    struct dm_load_page *free_pages;
    double target;
    /* The request head after the target: " HTTP/1.1\r\nHost: ...\r\n\r\n". */
    char head_tail[400];
    size_t head_tail_len;
    char rbuf[DM_LOAD_READ_BUF];
};

static inline uint64_t
dm_load_now_ns(void)
{
    return uv_hrtime();
}

/*
 * conn.c. A connection belongs to an owner that keeps a pointer to it in
 * *where: conn.c sets *where to NULL as soon as the connection starts
 * closing (the server closed it, a failure, Connection: close), and moves it
 * to the new connection when a stale keep-alive request is sent again, so an
 * owner's pointer is always a usable connection or NULL.
 */
struct dm_load_conn *dm_load_conn_get(struct dm_load_thread *t, struct dm_load_conn **where,
                                      void *owner);
/*
 * Sends GET path on lc (connecting first when it is not connected yet); done
 * is called exactly once, later, with the result (not when the owner closes
 * lc first). path stays valid until then. page: the response is that page,
 * whose body is scanned for objects (NULL: not scanned).
 */
void dm_load_conn_request(struct dm_load_conn *lc, const char *path, size_t len, uint64_t due_ns,
                          struct dm_load_page *page, dm_load_done_cb done);
/* Closes lc (a request on it is dropped without done); it goes back to the free list. */
void dm_load_conn_close(struct dm_load_conn *lc);
/* Records one ended request in the thread's current second. */
void dm_load_record(struct dm_load_thread *t, const struct dm_load_result *r);
/* The run ends: counts lc's request as unanswered when one is out on it. */
void dm_load_conn_unanswered(struct dm_load_conn *lc, uint64_t now_ns);
/* Counts a request due at due_ns and not answered at now_ns (the run's end). */
void dm_load_unanswered(struct dm_load_thread *t, uint64_t due_ns, uint64_t now_ns);

/* session.c */
void dm_load_page_body(struct dm_load_page *pg, const char *p, size_t len);
int dm_load_sessions_init(struct dm_load_thread *t);
void dm_load_sessions_fini(struct dm_load_thread *t);
void dm_load_sessions_sched(struct dm_load_thread *t, double elapsed_s);
void dm_load_sessions_stop(struct dm_load_thread *t);
/* The run ends: counts the requests out on the sessions' connections as unanswered. */
void dm_load_sessions_unanswered(struct dm_load_thread *t, uint64_t now_ns);
/* The page to load: index by popularity (Zipf over the pages). */
unsigned dm_load_pick_page(struct dm_load_thread *t);

#endif
