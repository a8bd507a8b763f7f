/*
 * What dimmer-agent reads on a backend, as text the caller has read (pure:
 * no I/O here): the CPU time split of /proc/stat, the connections of
 * /proc/net/tcp and tcp6, and the seed's power estimate from the CPU time
 * shares (the seed paper: "the power at full use of SYS, I/O and WAIT, each
 * weighted by its current use").
 */
#ifndef DM_POWER_PROCFS_H
#define DM_POWER_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The first "cpu " line of /proc/stat, in clock ticks, summed over CPUs. */
struct dm_cpu_times {
    uint64_t user, nice, system, idle, iowait, irq, softirq, steal;
};

/* Parses /proc/stat text (len bytes); 0, or -1 when it has no "cpu " line of numbers. */
int dm_procstat_parse(const char *text, size_t len, struct dm_cpu_times *out);

/*
 * The power model: idle_w with the CPU idle; sys_w, io_w and wait_w the power
 * at full use of each share: SYS = user + nice + system + steal, I/O = irq +
 * softirq, WAIT = iowait. The estimate between two samples is
 *   idle_w + s_sys (sys_w - idle_w) + s_io (io_w - idle_w) + s_wait (wait_w - idle_w)
 * with each s the share of the ticks that passed; idle_w when none passed.
 */
struct dm_power_model {
    double idle_w, sys_w, io_w, wait_w;
};

double dm_power_estimate(const struct dm_power_model *m, const struct dm_cpu_times *a,
                         const struct dm_cpu_times *b);

/*
 * Counts the ESTABLISHED sockets of /proc/net/tcp or tcp6 text whose local
 * port is one of ports[0..nports) (the served ports). Lines that do not
 * parse are skipped.
 */
uint64_t dm_proctcp_count(const char *text, size_t len, const uint16_t *ports, size_t nports);

/*
 * The same count over a file read in chunks of any size, so that a table of
 * any length is counted whole (a busy server's /proc/net/tcp runs to many
 * megabytes): feed each chunk as it is read, then finish. A line is kept
 * across chunks up to DM_PROCTCP_LINE_MAX bytes; a longer one (no such line
 * in /proc/net/tcp) is skipped. Caller-owned; zero it (or init) to start.
 */
#define DM_PROCTCP_LINE_MAX 512

struct dm_proctcp_stream {
    const uint16_t *ports;
    size_t nports;
    uint64_t count;
    size_t _len;
    bool _skip; /* inside a line too long to keep */
    char _line[DM_PROCTCP_LINE_MAX];
};

void dm_proctcp_init(struct dm_proctcp_stream *s, const uint16_t *ports, size_t nports);
void dm_proctcp_feed(struct dm_proctcp_stream *s, const char *chunk, size_t len);
/* Counts the last line if it had no newline; returns the count. */
uint64_t dm_proctcp_finish(struct dm_proctcp_stream *s);

#endif
