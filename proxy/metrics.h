/*
 * GET /metrics: the Prometheus text exposition format (version 0.0.4) of
 * every listener, pool, server and host, the limits, the catalog and the
 * power manager, under the dimmer_ prefix (conf/README.md, Metrics, lists
 * them). The counters are kept per worker (struct dm_srv_stats, struct
 * dm_lst_stats) and summed here.
 */
#ifndef DM_PROXY_METRICS_H
#define DM_PROXY_METRICS_H

#include <stdint.h>

#include "proxy/sbuf.h"

struct dm_req;
struct dm_worker;
struct dm_hosts;
struct dm_catalog;
struct dm_powermgr;

/* A request ends (answered, or cut short) at now_us (uv_hrtime() / 1000): its
 * server's counters. Its worker's thread. */
void dm_metrics_request_done(struct dm_req *req, uint64_t now_us);

/* What GET /metrics reads; any of the pointers may be NULL (not running). */
struct dm_metrics_view {
    struct dm_worker *workers;
    unsigned nworkers;
    struct dm_hosts *hosts;
    struct dm_catalog *catalog;
    struct dm_powermgr *power;
    double start_unix_s; /* when the process started */
    uint64_t bodies;     /* bodies built by the process, this one included */
};

/* Appends the whole exposition to b. Control thread. */
void dm_metrics_text(struct dm_sbuf *b, const struct dm_metrics_view *v);

/* A label value, escaped as the format asks ("\\", "\"", "\n"), in quotes. */
void dm_metrics_label(struct dm_sbuf *b, const char *s);

/* "# HELP name help\n# TYPE name type\n". */
void dm_metrics_family(struct dm_sbuf *b, const char *name, const char *type, const char *help);

#endif
