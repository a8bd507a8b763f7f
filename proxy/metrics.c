/*
 * GET /metrics (metrics.h): per-request counters on the workers, the text
 * exposition on the control thread.
 */
#include "proxy/metrics.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/hosts.h"
#include "parsers/catalog.h"
#include "proxy/conn.h"
#include "proxy/internal.h"
#include "proxy/power.h"
#include "proxy/worker.h"

/* Upper bounds of the request duration buckets, in microseconds (Prometheus's defaults). */
static const uint64_t dur_le_us[DM_DUR_BUCKETS - 1] = {
    5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
};
static const char *const dur_le_text[DM_DUR_BUCKETS] = {
    "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf",
};
static const char *const code_names[6] = { "1xx", "2xx", "3xx", "4xx", "5xx", "none" };

void
dm_metrics_request_done(struct dm_req *req, uint64_t now_us)
{
    struct dm_client *c = req->c;
    dm_stat_add(&c->w->lstats[c->listener].requests, 1);
    if (!req->routed) {
        /* Answered before any pool was chosen: the listener's. */
        unsigned lc = req->status >= 100 && req->status <= 599 ? req->status / 100 - 1 : 5;
        dm_stat_add(&c->w->lstats[c->listener].local[lc], 1);
        return;
    }
    struct dm_rpool *p = &c->rt->pools[req->pool];
    size_t n = p->sv->n;
    size_t slot = req->server >= 0 && (size_t)req->server < n ? (size_t)req->server : n;
    struct dm_srv_stats *st = &p->stats[(size_t)c->w->id * (n + 1) + slot];
    unsigned cls =
        !req->cut && req->status >= 100 && req->status <= 599 ? req->status / 100 - 1 : 5;
    dm_stat_add(&st->responses[cls], 1);
    dm_stat_add(&st->bytes_in, req->head_len + req->body_raw);
    dm_stat_add(&st->bytes_out, req->resp_bytes);
    if (req->attempts > 1) {
        dm_stat_add(&st->retries, req->attempts - 1);
    }
    uint64_t us = now_us > req->start_us ? now_us - req->start_us : 0;
    size_t b = 0;
    while (b < DM_DUR_BUCKETS - 1 && us > dur_le_us[b]) {
        b++;
    }
    dm_stat_add(&st->dur[b], 1);
    dm_stat_add(&st->dur_sum_us, us);
}

void
dm_metrics_label(struct dm_sbuf *b, const char *s)
{
    dm_sb_put(b, "\"", 1);
    while (s != NULL && *s) {
        size_t run = strcspn(s, "\\\"\n");
        dm_sb_put(b, s, run);
        s += run;
        if (*s) {
            dm_sb_put(b, *s == '\n' ? "\\n" : *s == '"' ? "\\\"" : "\\\\", 2);
            s++;
        }
    }
    dm_sb_put(b, "\"", 1);
}

void
dm_metrics_family(struct dm_sbuf *b, const char *name, const char *type, const char *help)
{
    dm_sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One server's (or the no-server slot's) counters summed over the workers. */
struct srv_sum {
    uint64_t responses[6], bytes_in, bytes_out, retries, dur[DM_DUR_BUCKETS], dur_sum_us, idle;
    uint64_t tls[3];
};

static void
sum_slot(const struct dm_runtime *rt, const struct dm_rpool *p, size_t slot, struct srv_sum *out)
{
    memset(out, 0, sizeof(*out));
    size_t n = p->sv->n;
    for (unsigned w = 0; w < (rt->nworkers > 0 ? rt->nworkers : 1); w++) {
        const struct dm_srv_stats *st = &p->stats[(size_t)w * (n + 1) + slot];
        for (int k = 0; k < 6; k++) {
            out->responses[k] += dm_counter_get(&st->responses[k]);
        }
        out->bytes_in += dm_counter_get(&st->bytes_in);
        out->bytes_out += dm_counter_get(&st->bytes_out);
        out->retries += dm_counter_get(&st->retries);
        for (int k = 0; k < 3; k++) {
            out->tls[k] += dm_counter_get(&st->tls[k]);
        }
        for (int k = 0; k < DM_DUR_BUCKETS; k++) {
            out->dur[k] += dm_counter_get(&st->dur[k]);
        }
        out->dur_sum_us += dm_counter_get(&st->dur_sum_us);
        out->idle += dm_counter_get(&st->idle);
    }
}

/* The end of a sample: the last label (named by label, as ",code=\""), and v. */
static void
metrics_value(struct dm_sbuf *b, const char *label, const char *value, unsigned long long v)
{
    dm_sb_puts(b, label);
    dm_sb_puts(b, value);
    dm_sb_puts(b, "\"} ");
    dm_sb_u64(b, v);
    dm_sb_puts(b, "\n");
}

static void
server_labels(struct dm_sbuf *b, const struct dm_rpool *p, size_t j)
{
    dm_sb_put(b, "{pool=", 6);
    dm_metrics_label(b, p->cf->name);
    dm_sb_put(b, ",server=", 8);
    dm_metrics_label(b, p->sv->s[j].name);
}

static void
pool_labels(struct dm_sbuf *b, const struct dm_rpool *p)
{
    dm_sb_puts(b, "{pool=");
    dm_metrics_label(b, p->cf->name);
}

/* The per-server families: a counter or gauge read off the server, its host or its sums. */
enum srv_metric {
    SM_REQUESTS,
    SM_PICKS,
    SM_FAILURES,
    SM_RETRIES,
    SM_BYTES_IN,
    SM_BYTES_OUT,
    SM_CONNS,
    SM_IDLE,
    SM_INFLIGHT,
    SM_WORK,
    SM_POTENTIAL,
    SM_WEIGHT,
    SM_CAPACITY,
    SM_MAX_CONNS,
    SM_TLS_FULL,
    SM_TLS_RESUMED,
    SM_TLS_FAILED,
    SM_N
};

static const struct {
    const char *name, *type, *help;
} srv_metrics[SM_N] = {
    [SM_REQUESTS] = { "dimmer_server_requests_total", "counter",
                      "Requests of the pool whose response from the server completed." },
    [SM_PICKS] = { "dimmer_server_picks_total", "counter",
                   "Times the pool's balancer chose the server (retries included)." },
    [SM_FAILURES] = { "dimmer_server_failures_total", "counter",
                      "Requests the server failed through the pool: connect failures, resets, "
                      "timeouts "
                      "and response heads refused." },
    [SM_RETRIES] = { "dimmer_server_retries_total", "counter",
                     "Attempts after the first of the requests the server answered." },
    [SM_BYTES_IN] = { "dimmer_server_bytes_in_total", "counter",
                      "Request bytes (head and body) from the clients of the server's requests." },
    [SM_BYTES_OUT] = { "dimmer_server_bytes_out_total", "counter",
                       "Response bytes (head and body) to the clients of the server's requests." },
    [SM_CONNS] = { "dimmer_server_connections", "gauge",
                   "Server connections in use (or being made) for the pool's requests." },
    [SM_IDLE] = { "dimmer_server_idle_connections", "gauge",
                  "Keep-alive connections to the server idle in the pool's connection pools." },
    [SM_INFLIGHT] = { "dimmer_server_inflight_requests", "gauge",
                      "Requests of the pool in flight on the server." },
    [SM_WORK] = { "dimmer_server_inflight_work_bytes", "gauge",
                  "Expected bytes still to come of the requests in flight (in-flight work)." },
    [SM_POTENTIAL] = { "dimmer_server_potential_load", "gauge",
                       "Aged potential load of the connections bound to the server (AGE)." },
    [SM_WEIGHT] = { "dimmer_server_weight", "gauge", "The server's weight in the pool." },
    [SM_CAPACITY] = { "dimmer_server_capacity", "gauge",
                      "Requests the server serves at once at full speed (capacity)." },
    [SM_MAX_CONNS] = { "dimmer_server_max_conns", "gauge",
                       "Requests the server may have in flight at once (0: no limit)." },
    [SM_TLS_FULL] = { "dimmer_server_tls_full_handshakes_total", "counter",
                      "TLS handshakes with the server (a TLS pool) that made a new session." },
    [SM_TLS_RESUMED] = { "dimmer_server_tls_resumed_handshakes_total", "counter",
                         "TLS handshakes with the server that resumed a pooled connection's "
                         "session." },
    [SM_TLS_FAILED] = { "dimmer_server_tls_failed_handshakes_total", "counter",
                        "TLS handshakes with the server that failed (its certificate refused, "
                        "...)." },
};

static uint64_t
srv_value(enum srv_metric m, const struct dm_rpool *p, size_t j, const struct srv_sum *sum)
{
    const struct dm_server *s = &p->sv->s[j];
    switch (m) {
    case SM_REQUESTS:
        return dm_counter_get(&s->requests);
    case SM_PICKS:
        return dm_counter_get(&s->picks);
    case SM_FAILURES:
        return dm_counter_get(&s->failures);
    case SM_RETRIES:
        return sum->retries;
    case SM_BYTES_IN:
        return sum->bytes_in;
    case SM_BYTES_OUT:
        return sum->bytes_out;
    case SM_CONNS:
        return dm_counter_get(&s->conns);
    case SM_IDLE:
        return sum->idle;
    case SM_INFLIGHT:
        return dm_counter_get(&s->inflight);
    case SM_WORK: {
        int64_t v = atomic_load_explicit(&s->inflight_work, memory_order_relaxed);
        return v > 0 ? (uint64_t)v : 0;
    }
    case SM_POTENTIAL: {
        int64_t v = atomic_load_explicit(&s->potential, memory_order_relaxed);
        return v > 0 ? (uint64_t)v : 0;
    }
    case SM_WEIGHT:
        return s->weight;
    case SM_CAPACITY:
        return s->capacity;
    case SM_MAX_CONNS:
        return p->cf->servers[j].max_conns;
    case SM_TLS_FULL:
        return sum->tls[DM_TLS_FULL];
    case SM_TLS_RESUMED:
        return sum->tls[DM_TLS_RESUMED];
    case SM_TLS_FAILED:
        return sum->tls[DM_TLS_FAILED];
    default:
        return 0;
    }
}

static const char *
power_state_name(int p)
{
    static const char *const names[] = {
        [DM_POWER_AWAKE] = "awake",     [DM_POWER_ASLEEP] = "asleep",
        [DM_POWER_BOOTING] = "booting", [DM_POWER_DRAINING] = "draining",
        [DM_POWER_FAILED] = "failed",   [DM_POWER_MAINT] = "maint",
    };
    return p >= 0 && (size_t)p < sizeof(names) / sizeof(names[0]) && names[p] ? names[p] : "?";
}

static void
servers_text(struct dm_sbuf *b, const struct dm_runtime *rt, struct srv_sum **sums)
{
    for (int m = 0; m < SM_N; m++) {
        dm_metrics_family(b, srv_metrics[m].name, srv_metrics[m].type, srv_metrics[m].help);
        for (size_t i = 0; i < rt->npools; i++) {
            const struct dm_rpool *p = &rt->pools[i];
            for (size_t j = 0; j < p->sv->n; j++) {
                dm_sb_puts(b, srv_metrics[m].name);
                server_labels(b, p, j);
                dm_sb_puts(b, "} ");
                dm_sb_u64(b, srv_value((enum srv_metric)m, p, j, &sums[i][j]));
                dm_sb_puts(b, "\n");
            }
        }
    }
    dm_metrics_family(b, "dimmer_server_responses_total", "counter",
                      "Responses to the server's requests by status class (none: cut short).");
    for (size_t i = 0; i < rt->npools; i++) {
        const struct dm_rpool *p = &rt->pools[i];
        for (size_t j = 0; j < p->sv->n; j++) {
            for (int k = 0; k < 6; k++) {
                dm_sb_puts(b, "dimmer_server_responses_total");
                server_labels(b, p, j);
                metrics_value(b, ",code=\"", code_names[k], sums[i][j].responses[k]);
            }
        }
    }
    uint64_t now = dm_mono_us();
    dm_metrics_family(b, "dimmer_server_status", "gauge",
                      "1 for the server's health state: up, failing (passive checks: out for "
                      "fail_timeout) or down (active health checks).");
    static const char *const health[] = { "up", "failing", "down" };
    for (size_t i = 0; i < rt->npools; i++) {
        const struct dm_rpool *p = &rt->pools[i];
        for (size_t j = 0; j < p->sv->n; j++) {
            const struct dm_host *h = p->sv->s[j].host;
            int state = atomic_load(&h->down) ? 2 : atomic_load(&h->down_until_us) > now ? 1 : 0;
            for (int k = 0; k < 3; k++) {
                dm_sb_puts(b, "dimmer_server_status");
                server_labels(b, p, j);
                metrics_value(b, ",state=\"", health[k], k == state);
            }
        }
    }
    dm_metrics_family(b, "dimmer_server_power_state", "gauge",
                      "1 for the server's power state: awake, asleep, booting, draining, failed "
                      "or maint.");
    for (size_t i = 0; i < rt->npools; i++) {
        const struct dm_rpool *p = &rt->pools[i];
        for (size_t j = 0; j < p->sv->n; j++) {
            int state = atomic_load(&p->sv->s[j].host->power);
            for (int k = DM_POWER_AWAKE; k <= DM_POWER_MAINT; k++) {
                dm_sb_puts(b, "dimmer_server_power_state");
                server_labels(b, p, j);
                metrics_value(b, ",state=\"", power_state_name(k), k == state);
            }
        }
    }
    dm_metrics_family(b, "dimmer_server_request_duration_seconds", "histogram",
                      "Time from a request's first byte to the end of its response.");
    for (size_t i = 0; i < rt->npools; i++) {
        const struct dm_rpool *p = &rt->pools[i];
        for (size_t j = 0; j < p->sv->n; j++) {
            const struct srv_sum *s = &sums[i][j];
            uint64_t cum = 0;
            for (int k = 0; k < DM_DUR_BUCKETS; k++) {
                cum += s->dur[k];
                dm_sb_puts(b, "dimmer_server_request_duration_seconds_bucket");
                server_labels(b, p, j);
                metrics_value(b, ",le=\"", dur_le_text[k], cum);
            }
            dm_sb_puts(b, "dimmer_server_request_duration_seconds_sum");
            server_labels(b, p, j);
            dm_sb_printf(b, "} %.6f\n", (double)s->dur_sum_us / 1e6);
            dm_sb_puts(b, "dimmer_server_request_duration_seconds_count");
            server_labels(b, p, j);
            dm_sb_puts(b, "} ");
            dm_sb_u64(b, cum);
            dm_sb_puts(b, "\n");
        }
    }
}

static void
pools_text(struct dm_sbuf *b, const struct dm_runtime *rt, struct srv_sum *local)
{
    dm_metrics_family(b, "dimmer_pool_local_responses_total", "counter",
                      "Responses of the pool's requests that no server answered (dimmer's "
                      "own: 503, 504, 502) by status class; none: cut short.");
    for (size_t i = 0; i < rt->npools; i++) {
        for (int k = 0; k < 6; k++) {
            dm_sb_puts(b, "dimmer_pool_local_responses_total");
            pool_labels(b, &rt->pools[i]);
            dm_sb_printf(b, ",code=\"%s\"} %llu\n", code_names[k],
                         (unsigned long long)local[i].responses[k]);
        }
    }
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        { "dimmer_pool_queue_requests", "gauge",
          "Requests waiting now for a server under its max_conns." },
        { "dimmer_pool_queue_peak_requests", "gauge", "Most requests that waited at once." },
        { "dimmer_pool_queue_timeouts_total", "counter",
          "Requests answered 503 at the end of timeouts.queue." },
        { "dimmer_pool_queue_full_total", "counter",
          "Requests answered 503 at once: the queue at max_queue." },
        { "dimmer_pool_held_requests", "gauge",
          "Requests held while no server of the power-managed pool is awake." },
    };
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        dm_metrics_family(b, fam[f].name, fam[f].type, fam[f].help);
        for (size_t i = 0; i < rt->npools; i++) {
            const struct dm_rpool *p = &rt->pools[i];
            const atomic_uint_fast64_t *v[] = { &p->queued, &p->queue_peak, &p->queue_timeouts,
                                                &p->queue_full, &p->held };
            dm_sb_printf(b, "%s", fam[f].name);
            pool_labels(b, p);
            dm_sb_printf(b, "} %llu\n", (unsigned long long)dm_counter_get(v[f]));
        }
    }
}

/* The bound address of listener l (its socket's: a port 0 shows the port bound). */
static void
listener_text(const struct dm_metrics_view *v, size_t l, char *text, size_t cap)
{
    struct sockaddr_storage sa;
    int len = sizeof(sa);
    snprintf(text, cap, "?");
    if (uv_tcp_getsockname(&v->workers[0].listeners[l], (struct sockaddr *)&sa, &len) == 0) {
        dm_addr_text((const struct sockaddr *)&sa, text, cap);
    }
}

/*
 * A counter family of one series per listener and per value of label: the
 * n counters at byte offset off of each worker's struct dm_lst_stats, summed.
 */
static void
listener_split(struct dm_sbuf *b, const struct dm_metrics_view *v, const char *name,
               const char *help, size_t off, const char *label, const char *const *values, int n)
{
    size_t nl = v->workers != NULL && v->nworkers > 0 ? v->workers[0].nlisteners : 0;
    dm_metrics_family(b, name, "counter", help);
    for (size_t l = 0; l < nl && l < 256; l++) {
        char text[DM_ADDR_TEXT];
        listener_text(v, l, text, sizeof(text));
        for (int k = 0; k < n; k++) {
            uint64_t sum = 0;
            for (unsigned w = 0; w < v->nworkers; w++) {
                const char *st = (const char *)&v->workers[w].lstats[l];
                sum += dm_counter_get((const atomic_uint_fast64_t *)(st + off) + k);
            }
            dm_sb_printf(b, "%s{listener=", name);
            dm_metrics_label(b, text);
            dm_sb_printf(b, ",%s=\"%s\"} %llu\n", label, values[k], (unsigned long long)sum);
        }
    }
}

static void
listeners_text(struct dm_sbuf *b, const struct dm_metrics_view *v)
{
    size_t nl = v->workers != NULL && v->nworkers > 0 ? v->workers[0].nlisteners : 0;
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        { "dimmer_listener_connections_total", "counter", "Client connections accepted." },
        { "dimmer_listener_connections", "gauge", "Client connections open now." },
        { "dimmer_listener_requests_total", "counter",
          "Requests answered (by a server or by dimmer) or cut short." },
    };
    static const char *const tls_results[3] = { "full", "resumed", "failed" };
    listener_split(b, v, "dimmer_listener_tls_handshakes_total",
                   "TLS handshakes of the listener's clients (a TLS listener): full, resumed "
                   "(a session ticket), failed.",
                   offsetof(struct dm_lst_stats, tls), "result", tls_results, 3);
    listener_split(b, v, "dimmer_listener_local_responses_total",
                   "Requests answered by the listener before any pool was chosen (a bad "
                   "head's 400, 408, 413, 414, 431; limits.rate's 429), by status class.",
                   offsetof(struct dm_lst_stats, local), "code", code_names, 6);
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        dm_metrics_family(b, fam[f].name, fam[f].type, fam[f].help);
        for (size_t l = 0; l < nl && l < 256; l++) {
            char text[DM_ADDR_TEXT];
            listener_text(v, l, text, sizeof(text));
            uint64_t sum = 0;
            for (unsigned w = 0; w < v->nworkers; w++) {
                const struct dm_lst_stats *st = &v->workers[w].lstats[l];
                sum += dm_counter_get(f == 0 ? &st->accepted : f == 1 ? &st->open : &st->requests);
            }
            dm_sb_printf(b, "%s{listener=", fam[f].name);
            dm_metrics_label(b, text);
            dm_sb_printf(b, "} %llu\n", (unsigned long long)sum);
        }
    }
}

static void
hosts_text(struct dm_sbuf *b, const struct dm_hosts *hs)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        { "dimmer_host_server_connections", "gauge",
          "TCP connections open to the host (idle or in use), every pool and generation." },
        { "dimmer_host_inflight_requests", "gauge", "Requests of any pool in flight on the host." },
        { "dimmer_host_requests_started_total", "counter",
          "Requests sent to the host, one per attempt." },
        { "dimmer_host_bound_clients", "gauge",
          "Client connections bound to the host by connection affinity." },
    };
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        dm_metrics_family(b, fam[f].name, fam[f].type, fam[f].help);
        for (size_t i = 0; hs != NULL && i < hs->n; i++) {
            const struct dm_host *h = hs->h[i];
            const atomic_uint_fast64_t *c[] = { &h->connections, &h->inflight, &h->started,
                                                &h->bound };
            /* The address as written and as resolved: a name whose address
             * changed across reloads is two hosts, two series. */
            char addr[DM_ADDR_TEXT];
            dm_addr_text((const struct sockaddr *)&h->addr, addr, sizeof(addr));
            dm_sb_printf(b, "%s{host=", fam[f].name);
            dm_metrics_label(b, h->text != NULL ? h->text : "");
            dm_sb_puts(b, ",address=");
            dm_metrics_label(b, addr);
            dm_sb_printf(b, "} %llu\n", (unsigned long long)dm_counter_get(c[f]));
        }
    }
}

static void
process_text(struct dm_sbuf *b, const struct dm_metrics_view *v, const struct dm_runtime *rt)
{
    dm_metrics_family(b, "dimmer_build_info", "gauge", "1, labelled with the version.");
    dm_sb_printf(b, "dimmer_build_info{version=\"%s\"} 1\n", DM_VERSION);
    dm_metrics_family(b, "dimmer_start_time_seconds", "gauge",
                      "When the process started, in seconds since the Unix epoch.");
    dm_sb_printf(b, "dimmer_start_time_seconds %.3f\n", v->start_unix_s);
    dm_metrics_family(b, "dimmer_config_generation", "gauge",
                      "The running configuration's generation (1 at start, one more a reload).");
    dm_sb_printf(b, "dimmer_config_generation %llu\n",
                 (unsigned long long)(rt != NULL ? rt->generation : 0));
    dm_metrics_family(b, "dimmer_metrics_bodies_total", "counter",
                      "Bodies of /metrics built, this one included (the scrapes read in one "
                      "turn of the control loop share one).");
    dm_sb_printf(b, "dimmer_metrics_bodies_total %llu\n", (unsigned long long)v->bodies);
    dm_metrics_family(b, "dimmer_workers", "gauge", "Worker threads.");
    dm_sb_printf(b, "dimmer_workers %u\n", v->nworkers);
    struct dm_limits_counts l;
    dm_workers_limits(v->workers, v->nworkers, &l);
    dm_metrics_family(b, "dimmer_accept_pauses_total", "counter",
                      "Times a worker at limits.max_conns stopped accepting.");
    dm_sb_printf(b, "dimmer_accept_pauses_total %llu\n", (unsigned long long)l.accept_pauses);
    dm_metrics_family(b, "dimmer_accept_paused_workers", "gauge",
                      "Workers not accepting now (at limits.max_conns).");
    dm_sb_printf(b, "dimmer_accept_paused_workers %llu\n", (unsigned long long)l.paused_workers);
    dm_metrics_family(b, "dimmer_refused_connections_total", "counter",
                      "Client connections closed at once by a limit.");
    dm_sb_printf(b, "dimmer_refused_connections_total{limit=\"max_conns_per_client\"} %llu\n",
                 (unsigned long long)l.per_client);
    dm_metrics_family(b, "dimmer_refused_requests_total", "counter",
                      "Requests refused by a limit (rate: answered 429).");
    dm_sb_printf(b, "dimmer_refused_requests_total{limit=\"rate\"} %llu\n",
                 (unsigned long long)l.rate);
}

static void
catalog_text(struct dm_sbuf *b, struct dm_catalog *cat)
{
    if (cat == NULL) {
        return;
    }
    struct dm_catalog_stats cs;
    dm_catalog_stats(cat, &cs);
    const struct {
        const char *name, *type, *help;
        uint64_t v;
    } fam[] = {
        { "dimmer_catalog_pages", "gauge", "Pages with an object list in the catalog.", cs.pages },
        { "dimmer_catalog_objects", "gauge", "Objects with a learned size.", cs.objects },
        { "dimmer_catalog_bytes", "gauge", "Memory the catalog uses.", cs.bytes },
        { "dimmer_catalog_max_bytes", "gauge", "The catalog's memory cap.", cs.cap },
        { "dimmer_catalog_hits_total", "counter", "Lookups that found their page.", cs.hits },
        { "dimmer_catalog_misses_total", "counter", "Lookups that did not.", cs.misses },
        { "dimmer_catalog_evictions_total", "counter", "Entries dropped to stay under the cap.",
          cs.evictions },
    };
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        dm_metrics_family(b, fam[f].name, fam[f].type, fam[f].help);
        dm_sb_printf(b, "%s %llu\n", fam[f].name, (unsigned long long)fam[f].v);
    }
}

void
dm_metrics_text(struct dm_sbuf *b, const struct dm_metrics_view *v)
{
    struct dm_runtime *rt = dm_runtime_current();
    process_text(b, v, rt);
    listeners_text(b, v);
    if (rt != NULL) {
        struct srv_sum **sums = calloc(rt->npools, sizeof(*sums));
        struct srv_sum *local = calloc(rt->npools, sizeof(*local));
        bool ok = sums != NULL && local != NULL;
        for (size_t i = 0; ok && i < rt->npools; i++) {
            const struct dm_rpool *p = &rt->pools[i];
            sums[i] = calloc(p->sv->n > 0 ? p->sv->n : 1, sizeof(**sums));
            ok = sums[i] != NULL;
            for (size_t j = 0; ok && j < p->sv->n; j++) {
                sum_slot(rt, p, j, &sums[i][j]);
            }
            if (ok) {
                sum_slot(rt, p, p->sv->n, &local[i]);
            }
        }
        if (ok) {
            servers_text(b, rt, sums);
            pools_text(b, rt, local);
        }
        for (size_t i = 0; sums != NULL && i < rt->npools; i++) {
            free(sums[i]);
        }
        free(sums);
        free(local);
    }
    hosts_text(b, v->hosts);
    catalog_text(b, v->catalog);
    dm_power_metrics_text(v->power, b);
    dm_runtime_unref(rt);
}
