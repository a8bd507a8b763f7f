/*
 * Agent reports (dimmer-agent -> the proxy's metrics listener, one UDP
 * datagram a second): what a backend says about its power and connections,
 * authenticated with HMAC-SHA256 under the key of the configuration. The
 * proxy trusts nothing it has not checked: a datagram is parsed strictly,
 * its HMAC verified in constant time, then its name, sequence number and
 * timestamp checked against what the proxy knows (dm_report_accept).
 *
 * The datagram is one line of text (no newline), at most DM_REPORT_MAX bytes:
 *
 *   dimmer-agent/1 name=web1 seq=42 ts=1796130000123 est_w=61.5 measured_w=- tcp=17 hmac=<64 hex>
 *
 * name: 1-63 of [A-Za-z0-9._-]; seq: decimal, grows by one each report,
 * seq / 1000 (whole) never above ts (an agent starts at its start time in
 * microseconds and reports at most once a millisecond: a restarted agent
 * goes on above the run before it, and one report signed with a huge number
 * cannot claim every later one); ts: Unix time in milliseconds, what orders
 * the reports (dm_report_accept); est_w: the estimate
 * from /proc/stat (W); measured_w: an energy counter's figure (W), "-" when
 * the machine has none; tcp: connections on the served ports, at most
 * DM_REPORT_TCP_MAX; hmac: lowercase hex of
 * HMAC-SHA256(key, every byte before " hmac="). Fields in that order, one
 * space between them.
 */
#ifndef DM_POWER_REPORT_H
#define DM_POWER_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DM_REPORT_MAX       512
#define DM_REPORT_NAME_MAX  63
#define DM_REPORT_WATTS_MAX 100000.0 /* a figure above this is malformed */
#define DM_REPORT_KEY_MAX   256      /* bytes of a shared key */
#define DM_REPORT_TCP_MAX   10000000 /* a connection count above this is malformed */

struct dm_report {
    char name[DM_REPORT_NAME_MAX + 1];
    uint64_t seq;
    uint64_t ts_ms;
    double est_w;
    double measured_w; /* valid when has_measured */
    bool has_measured;
    uint64_t tcp;
};

/* Why a report was dropped (or DM_REPORT_OK); /stats counts each. */
enum dm_report_verdict {
    DM_REPORT_OK = 0,
    DM_REPORT_MALFORMED,
    DM_REPORT_BAD_HMAC,
    DM_REPORT_UNKNOWN, /* no server of that name (the caller's check) */
    DM_REPORT_REPLAY,  /* a sequence number not above the last accepted */
    DM_REPORT_STALE,   /* a timestamp too far from the proxy's clock */
    DM_REPORT_VERDICTS,
};

const char *dm_report_verdict_name(enum dm_report_verdict v); /* "ok", "malformed", ... */

/*
 * Writes r as a signed datagram into out (cap bytes); returns its length,
 * or 0 when r does not fit the format (bad name, figure out of range), key
 * is empty or cap is too small. Any thread.
 */
size_t dm_report_encode(const struct dm_report *r, const uint8_t *key, size_t key_len, char *out,
                        size_t cap);

/*
 * Parses the datagram buf (len bytes, not NUL-terminated) into *out and
 * verifies its HMAC under key: DM_REPORT_OK, DM_REPORT_MALFORMED (out
 * undefined) or DM_REPORT_BAD_HMAC (out parsed but not to be trusted; also
 * every report when key_len is 0: no key, nothing trusted).
 * Stateless, any thread.
 */
enum dm_report_verdict dm_report_decode(const char *buf, size_t len, const uint8_t *key,
                                        size_t key_len, struct dm_report *out);

/* A server's last accepted report: all zero for none. */
struct dm_report_last {
    uint64_t ts_ms;
    uint64_t seq;
};

/*
 * The checks that need state, for a report that decoded OK from a known
 * server: it must be newer than *last, by its ts first and its seq between
 * two of one ts (a replay is not: it was accepted, or passed over, once),
 * and its ts within max_age_ms of now_ms either way. On DM_REPORT_OK,
 * *last becomes it. Ordered by time rather than by seq alone, so that one
 * report signed with the key and numbered from now shuts a running agent
 * out for at most max_age_ms (its ts is within that of now), not until the
 * agent restarts.
 */
enum dm_report_verdict dm_report_accept(const struct dm_report *r, struct dm_report_last *last,
                                        uint64_t now_ms, uint64_t max_age_ms);

/*
 * Reads the shared key of path into key (DM_REPORT_KEY_MAX bytes): the
 * file's bytes with final CRs and LFs dropped, so an editor's newline is not
 * part of it. Sets *len and returns 0, or -errno when the file cannot be
 * read (-ENODEV: not a regular file), -EINVAL when the key is empty, -EFBIG when it is longer than
 * DM_REPORT_KEY_MAX (cut, it would not be the key the proxy has). Any thread.
 */
int dm_report_key_read(const char *path, uint8_t key[DM_REPORT_KEY_MAX], size_t *len);

/* The reason for dm_report_key_read()'s error err (< 0, not -EINVAL), for a message:
 * the system's, or "not a regular file" (a FIFO or a device, refused without
 * blocking). */
const char *dm_report_key_error(int err);

#endif
