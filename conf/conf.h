/*
 * dimmer's configuration: the YAML file (or the --listen/--backend quick start)
 * loaded into one immutable struct dm_conf. Every error found while loading is
 * reported as "file:line:column: what is wrong" into a struct dm_conf_errors,
 * and a config with any error is not returned. The config reference with all
 * keys and defaults is conf/README.md.
 */
#ifndef DM_CONF_CONF_H
#define DM_CONF_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* An address as written ("127.0.0.1:8080", "[::1]:80", "*:80") and resolved. */
struct dm_conf_tls;
struct dm_conf_tls_client;

struct dm_conf_addr {
    char *text;
    struct sockaddr_storage sa;
    socklen_t salen;
};

/* How the power manager wakes or sleeps a server (its `power:` block). */
enum dm_power_act {
    DM_ACT_NONE = 0, /* cannot: the manager never chooses this server for it */
    DM_ACT_WOL,      /* wake only: a Wake-on-LAN magic packet over UDP */
    DM_ACT_HTTP,     /* POST http://CONTROL/wake or /sleep */
    DM_ACT_COMMAND,  /* a command line, {host} {port} {name} {mac} replaced */
};

/* A server's power model and actuators; defaults from its pool's power block. */
struct dm_conf_server_power {
    double idle_w;      /* default 40 */
    double full_w;      /* default the pool's full_w */
    double asleep_w;    /* default 3 */
    double booting_w;   /* default the full_w */
    char *agent;        /* name its agent reports under; default the server's name */
    uint8_t *agent_key; /* its agent's own key (key_file); NULL: power.key_file's */
    size_t agent_key_len;
    enum dm_power_act wake, sleep;
    uint8_t mac[6];
    bool has_mac;
    struct dm_conf_addr wol_to;  /* where the magic packet goes; default 255.255.255.255:9 */
    struct dm_conf_addr control; /* http actuator: host:port of the node's control */
    char *control_token; /* its bearer token (control_token_file, final newlines dropped); NULL:
                            none */
    char *wake_command, *sleep_command;
    bool keep_on; /* never slept by the policy (the operator may still) */
};

/* Where the file has a value: its line and column, from 0 (as libyaml's marks). */
struct dm_conf_at {
    size_t line, column;
};

struct dm_conf_server {
    char *name;
    struct dm_conf_addr addr;
    unsigned weight;         /* default 1 */
    unsigned capacity;       /* default 100 */
    double session_capacity; /* balance session: FMAX, the session load it carries; 40000 */
    unsigned max_conns;      /* requests it serves at once through this pool; 0 = no limit */
    struct dm_conf_server_power power;
    struct dm_conf_at at; /* where the file has it (for the checks across pools) */
};

struct dm_conf_health {
    bool enabled;         /* true when the pool has a health_check block */
    char *path;           /* default "/healthz" */
    uint64_t interval_ms; /* default 2000 */
    uint64_t timeout_ms;  /* default 1000 */
    unsigned rise;        /* default 2 */
    unsigned fall;        /* default 3 */
};

struct dm_conf_passive {
    unsigned max_fails;       /* consecutive failures that mark a server down; default 3, 0 = off */
    uint64_t fail_timeout_ms; /* how long it then stays down; default 10000 */
};

enum dm_queue_order { DM_QO_ARRIVAL = 0, DM_QO_SIZE, DM_QO_PAGE };

/* hash: where the key of a request comes from. */
enum dm_hash_key {
    DM_HASH_CLIENT = 0, /* client address (default) */
    DM_HASH_URI,        /* request target */
    DM_HASH_HEADER,     /* value of the header `name` */
    DM_HASH_COOKIE,     /* value of the cookie `name` */
};

struct dm_conf_hash {
    enum dm_hash_key key;
    char *name;     /* header or cookie name; NULL for client and uri */
    double balance; /* load bound factor c >= 1; default 1.25 */
};

/* age: aged potential-load balancing (DESIGN.md). */
struct dm_conf_age {
    double weight;         /* w: weight of potential load in a pick; default 0.1 */
    uint64_t half_life_ms; /* potential load halves in this time; default 10000 */
    uint64_t request_cost; /* work of one request, in bytes; default 8192 */
};

/* Four weights of one trend tier: alpha > beta > 0 > -beta' > -alpha'. */
struct dm_conf_weights {
    double alpha, beta, neg_beta, neg_alpha;
};

enum dm_power_wake_rule { DM_WAKE_EFFICIENT = 0, DM_WAKE_FIRST };
enum dm_power_sleep_rule { DM_SLEEP_LEAST_LOADED = 0, DM_SLEEP_LAST };
enum dm_power_tcp_source { DM_TCP_PROXY = 0, DM_TCP_AGENT };

/* A pool's power block: the power manager keeps only what it needs awake. */
struct dm_conf_power {
    bool enabled;
    char *policy;                 /* default "boot-aware"; checked against power/policy.h */
    uint64_t period_ms;           /* default 5000 */
    uint64_t trend_interval_ms;   /* default 1000 */
    unsigned min_active;          /* default 1 */
    uint64_t min_change_ms;       /* default 10000: between two changes of one server */
    double t1_w, step_w, tcp_max; /* 60, 5, 200 */
    bool tcp_max_auto;            /* tcp_max: auto, learned from agents' reports (200 until then) */
    double full_w;                /* default 70 */
    struct dm_conf_weights normal; /* multi's; default Table 5's middle row */
    struct dm_conf_weights tiers[3];
    double tier_low_w, tier_high_w; /* 57.5, 66.5 */
    uint64_t boot_ms;               /* default 7000: the policy's boot delay */
    uint64_t boot_timeout_ms;       /* default 60000: booting longer is failed */
    uint64_t drain_timeout_ms;      /* default 30000 */
    uint64_t delay_off_ms;          /* default 30000 */
    uint64_t history_ms;            /* boot-aware's memory of steps, default 3600000 */
    double margin;                  /* default 0.25 */
    uint64_t slow_start_ms;         /* default 10000, 0 = off */
    uint64_t command_timeout_ms;    /* default 10000 */
    uint64_t action_interval_ms;    /* default 1000: the least time between two actions */
    uint64_t report_timeout_ms;     /* default 3000: a server silent longer is estimated */
    uint64_t hold_timeout_ms;       /* default 30000: a request held while none is awake */
    unsigned hold_queue;            /* default 1024 held requests at most */
    enum dm_power_wake_rule wake_rule;
    enum dm_power_sleep_rule sleep_rule;
    enum dm_power_tcp_source tcp_source;
};

/* An address prefix: "10.1.0.0/16", "192.0.2.7" (/32), "2001:db8::/32", "::1" (/128). */
struct dm_conf_prefix {
    int family;       /* AF_INET or AF_INET6 */
    unsigned bits;    /* 0..32 or 0..128 */
    uint8_t addr[16]; /* network order (AF_INET: the first 4); the bits past `bits` are 0 */
};

#define DM_CONF_RATES_MAX 16 /* rates in one game's list (balancers/sessions.h) */

/* A game of a session pool (DESIGN.md "Session allocation"). */
struct dm_conf_game {
    char *name;
    double frame_load; /* load of one frame of its session, >= 0 */
    double *rates;     /* its frame rates, strictly increasing, > 0 */
    size_t nrates;     /* 1..DM_CONF_RATES_MAX */
    size_t rate;       /* index of the rate asked when a request names none; default the last */
};

/* listen: at most this many addresses. */
#define DM_CONF_LISTENERS_MAX 1024

/* Clients from prefix, and their delays to the pool's servers; a pool has
 * at most DM_CONF_NETWORKS_MAX of them, and DM_CONF_NETWORK_DELAYS_MAX
 * delays in all (networks times servers). */
#define DM_CONF_NETWORKS_MAX       4096
#define DM_CONF_NETWORK_DELAYS_MAX (1u << 20)
struct dm_conf_network {
    struct dm_conf_prefix prefix;
    double *delay_ms; /* one per server of the pool, or -1 when not given (then measured) */
};

/* session: how balance: session places sessions (conf/README.md "session"). */
struct dm_conf_session {
    enum dm_hash_key group_key; /* DM_HASH_HEADER (default) or DM_HASH_COOKIE */
    char *group_name;           /* default "X-Session-Group" */
    char *game_header;          /* default "X-Game" */
    char *rate_header;          /* the asked rate; default "X-Frame-Rate" */
    char *tier_header;          /* the rate given, to the server; default "X-Rate-Tier" */
    struct dm_conf_game *games;
    size_t ngames;
    size_t default_game;        /* index; default 0, the first */
    double dmax_ms, dvmax_ms;   /* C3, C4; HUGE_VAL (the default): no limit */
    uint64_t window_ms;         /* batch window; default 0: placed at once */
    double alpha;               /* rates lowered when demand >= alpha x capacity; default 1 */
    uint64_t anneal_iterations; /* per annealing of a batch pass; default 4000 */
    double anneal_t0;           /* starting temperature; default 0.05 */
    unsigned max_sessions;      /* groups at once; default 10000 */
    unsigned max_members;       /* clients of one group; default 64 */
    struct dm_conf_network *networks;
    size_t nnetworks;
};

struct dm_conf_pool {
    char *name;
    char *balance;  /* policy name, default "roundrobin"; checked against the registry */
    unsigned draws; /* for "random", default 2 */
    struct dm_conf_server *servers;
    size_t nservers;
    struct dm_conf_health health;
    struct dm_conf_passive passive;
    struct dm_conf_hash hash;
    struct dm_conf_age age;
    /* affinity: connection binds a client connection to the server of its
     * first request; request balances each request. Default: connection for
     * balance age, request for the others. */
    bool affinity_connection;
    /* Requests waiting for a server under its max_conns (all workers) at
     * most; one more is answered 503 at once. Default 0 = no bound but
     * timeouts.queue. */
    unsigned max_queue;
    /* queue_order: how each worker serves its waiting requests. arrival
     * (default): in arrival order. size: by arrival plus their response's
     * expected size from the catalog (dm_queue_class_offset_us). page: the
     * oldest page first, by its start plus page_bound (a connection's
     * request within page_gap of its last response belongs to the same
     * page), and those of pages past page_bound after every other. */
    enum dm_queue_order queue_order;
    uint64_t page_gap_ms;   /* default 250 */
    uint64_t page_bound_ms; /* default 2000 */
    struct dm_conf_power power;
    struct dm_conf_session session; /* read whatever the policy; used by balance: session */
    struct dm_conf_tls_client *tls; /* TLS to the servers (conf/tls.h); NULL: plain */
};

/* The object catalog (AGE): pages and their embedded objects. */
struct dm_conf_catalog {
    uint64_t memory;               /* cap in bytes; default 16 MiB */
    uint64_t scan_limit;           /* bytes of each HTML page scanned; default 256 KiB */
    bool learn;                    /* learn pages and sizes from traffic; default true */
    uint64_t default_object_bytes; /* size assumed for an object not seen yet; default 10240 */
    char *docroot;                 /* preload: scan this directory's .html files; NULL = none */
    char *manifest;                /* preload: read this manifest file; NULL = none */
    char *host;                    /* host the preloaded pages belong to; NULL = any host */
};

/* Host is NULL (any), exact ("www.example.com") or a suffix ("*.example.com"). */
struct dm_conf_route {
    char *host;
    char *path_prefix; /* NULL or "/" = any */
    size_t pool;       /* index into dm_conf.pools */
};

/* The longest duration a config may give (1000 h), in milliseconds. */
#define DM_CONF_DURATION_MAX_MS (1000ull * 3600 * 1000)

struct dm_conf_timeouts {
    uint64_t connect_ms;          /* default 5000 */
    uint64_t client_header_ms;    /* default 10000: whole request head */
    uint64_t client_keepalive_ms; /* default 60000: idle between requests */
    uint64_t client_body_ms;      /* default 10000: window of the request body's minimum rate */
    uint64_t server_response_ms;  /* default 60000: server silent while a response is awaited */
    uint64_t client_send_ms; /* default 60000: a client taking no byte of what is queued for it */
    uint64_t request_ms;     /* default 0 = off: bound on one whole exchange */
    uint64_t queue_ms;       /* default: connect_ms: waiting for a server under its max_conns */
    uint64_t shutdown_ms;    /* default 10000: SIGTERM drain bound */
    uint64_t tunnel_ms;      /* default 3600000: a tunnel with no byte either way; 0 = off */
};

/* limits.max_conns when the config leaves it out: as many as the open-file limit allows, up to
 * this. */
#define DM_CONF_DEFAULT_MAX_CONNS 10000

struct dm_conf_limits {
    size_t header_bytes;           /* default 16384: request or response head */
    unsigned header_count;         /* default 100 */
    uint64_t body_bytes;           /* default 0 = unlimited: request body */
    uint64_t body_min_rate;        /* default 500: request body bytes/s, averaged per client_body */
    unsigned max_conns;            /* default DM_CONF_DEFAULT_MAX_CONNS per worker */
    unsigned max_conns_per_client; /* default 0 = none: per client address, whole process */
    unsigned rate;                 /* default 0 = none: requests/s per client address */
    unsigned burst;                /* default rate: the bucket's size when rate > 0 */
};

struct dm_conf {
    char *file;                     /* path it was read from, or NULL for the quick start */
    struct dm_conf_addr *listeners; /* port 0 allowed (here and in admin): a free port */
    size_t nlisteners;
    struct dm_conf_tls **listener_tls; /* per listener: its tls: block, NULL for plain HTTP */
    unsigned workers;                  /* 0 = auto (one per CPU), the default */
    struct dm_conf_addr admin;         /* admin.text NULL when there is no admin listener */
    struct dm_conf_pool *pools;
    size_t npools;
    struct dm_conf_route *routes;
    size_t nroutes;
    size_t default_pool; /* index; the first pool when not given */
    struct dm_conf_timeouts timeouts;
    struct dm_conf_limits limits;
    struct dm_conf_catalog catalog;
    char *access_log;                              /* path, "-" = stdout, NULL = off */
    char *access_log_format;                       /* "default", "json" or "combined" */
    char *error_log;                               /* path, NULL = stderr */
    struct dm_conf_at access_log_at, error_log_at; /* their paths in the file (dimmer -t) */
    unsigned log_level; /* the error log's: 0 error, 1 warn, 2 info (default), 3 debug */
    /* user: and group: to run as once everything is bound (a process started
     * as root); NULL user: stay as started. Resolved when loaded. */
    char *user;
    char *group; /* NULL: the user's own group */
    unsigned uid, gid;
    /* power: the agents' metrics listener (UDP), their key, the admin token. */
    struct dm_conf_addr metrics; /* metrics.text NULL when none */
    uint8_t *metrics_key;        /* the key file's bytes, a final newline dropped */
    size_t metrics_key_len;
    uint64_t report_max_age_ms; /* default 5000: a report's timestamp may be this far off */
    char *admin_token;          /* the admin token file, final newlines dropped; NULL: none */
    bool admin_token_reads;     /* GETs of the admin's data need the token too */
    /* "file:line:column: warning: ..." of a config that loads (a certificate
     * out of its dates, say): the caller says them, as nginx -t does. */
    char **warnings;
    size_t nwarnings;
};

/*
 * Error sink: messages "file:line:column: text" in file order (messages with
 * no position, such as "path: cannot open: ..." or "--backend: ...", in the
 * order found). Zero it before first use; loads append to it.
 */
struct dm_conf_errors {
    char **msg;
    size_t n;
};

/*
 * Loads and validates the YAML file at path. Returns the config, or NULL with
 * at least one message appended to err (which the caller frees with
 * dm_conf_errors_fini; err may be NULL to drop them, and when memory runs out
 * even the message may be missing). Checks addresses, durations, sizes,
 * unknown keys (with the nearest known key suggested), duplicate keys and
 * names, and unknown pools. Resolves host names (getaddrinfo), so it may
 * block; any thread may call it.
 */
struct dm_conf *dm_conf_load(const char *path, struct dm_conf_errors *err);

/*
 * Same as dm_conf_load over the len bytes at yaml (no terminator needed);
 * name stands for the file in messages and in c->file.
 */
struct dm_conf *dm_conf_load_string(const char *yaml, size_t len, const char *name,
                                    struct dm_conf_errors *err);

/*
 * The quick start: one listener, one pool "default" of the comma-separated
 * backends (named s1, s2, ...; spaces around each are ignored), defaults for
 * everything else and c->file NULL. Errors read "--listen: ..." or
 * "--backend: ..."; NULL then, as for dm_conf_load.
 */
struct dm_conf *dm_conf_from_args(const char *listen, const char *backends,
                                  struct dm_conf_errors *err);

/* Frees a config; NULL is a no-op. */
void dm_conf_destroy(struct dm_conf *c);

/* Frees the messages; the sink is then empty and reusable. */
void dm_conf_errors_fini(struct dm_conf_errors *err);

/*
 * Parses "127.0.0.1:80", "[::1]:80", "localhost:80" (resolved numerically or via
 * getaddrinfo, first result), "*:80" / ":80" (any IPv4 address); the port is
 * 1..65535. On success out->text is a malloc'd copy of text that the caller
 * frees. Returns 0, -EINVAL (out zeroed) or -ENOMEM.
 */
int dm_conf_parse_addr(const char *text, struct dm_conf_addr *out);

/*
 * "250ms", "5s", "2m", "1h" (lower case), a bare number is milliseconds. 0 or
 * -EINVAL (also on overflow).
 */
int dm_conf_parse_duration_ms(const char *text, uint64_t *out);

/* "512", "16k", "1m", "2g" (binary units, case-insensitive). 0 or -EINVAL (also on overflow). */
int dm_conf_parse_size(const char *text, uint64_t *out);

/*
 * "10.1.0.0/16", "192.0.2.7" (/32), "2001:db8::/32", "::1" (/128), numeric
 * only. 0, or -EINVAL with *why (NULL allowed) set to a short static reason:
 * not an address, bits out of range, or address bits set past the prefix.
 */
int dm_conf_parse_prefix(const char *text, struct dm_conf_prefix *out, const char **why);

/*
 * Whether address sa (AF_INET or AF_INET6; an IPv4-mapped IPv6 address
 * counts as its IPv4 address) is inside prefix p. Any thread.
 */
bool dm_conf_prefix_match(const struct dm_conf_prefix *p, const struct sockaddr *sa);

#endif
