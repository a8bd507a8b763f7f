/* /proc/stat, /proc/net/tcp and the power estimate (power/procfs.h). */
#include "power/procfs.h"

#include <string.h>

/* Skips blanks, then reads a decimal number; false when there is none. */
static bool
dec(const char **p, const char *end, uint64_t *out)
{
    while (*p < end && (**p == ' ' || **p == '\t')) {
        (*p)++;
    }
    if (*p >= end || **p < '0' || **p > '9') {
        return false;
    }
    uint64_t v = 0;
    while (*p < end && **p >= '0' && **p <= '9') {
        v = v * 10 + (uint64_t)(**p - '0');
        (*p)++;
    }
    *out = v;
    return true;
}

int
dm_procstat_parse(const char *text, size_t len, struct dm_cpu_times *out)
{
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol != NULL ? eol : end;
        if (le - p > 4 && memcmp(p, "cpu ", 4) == 0) {
            const char *q = p + 4;
            uint64_t v[8] = { 0 };
            size_t n = 0;
            while (n < 8 && dec(&q, le, &v[n])) {
                n++;
            }
            if (n < 4) {
                return -1;
            }
            *out = (struct dm_cpu_times){ v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7] };
            return 0;
        }
        p = le + 1;
    }
    return -1;
}

static uint64_t
delta(uint64_t a, uint64_t b)
{
    return b > a ? b - a : 0;
}

double
dm_power_estimate(const struct dm_power_model *m, const struct dm_cpu_times *a,
                  const struct dm_cpu_times *b)
{
    double sys = (double)(delta(a->user, b->user) + delta(a->nice, b->nice) +
                          delta(a->system, b->system) + delta(a->steal, b->steal));
    double io = (double)(delta(a->irq, b->irq) + delta(a->softirq, b->softirq));
    double wait = (double)delta(a->iowait, b->iowait);
    double total = sys + io + wait + (double)delta(a->idle, b->idle);
    if (total <= 0) {
        return m->idle_w;
    }
    return m->idle_w + sys / total * (m->sys_w - m->idle_w) + io / total * (m->io_w - m->idle_w) +
           wait / total * (m->wait_w - m->idle_w);
}

static int
hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
}

/* Reads hex digits up to a non-hex byte; false when there are none. */
static bool
hexnum(const char **p, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    const char *s = *p;
    while (*p < end && hexval(**p) >= 0 && *p - s < 16) {
        v = v << 4 | (uint64_t)hexval(**p);
        (*p)++;
    }
    *out = v;
    return *p > s;
}

/* Reads "HEX:HEX", an address (8 hex digits for IPv4, 32 for IPv6) and a
 * port; the port in *port. */
static bool
addr_port(const char **p, const char *end, uint64_t *port)
{
    const char *s = *p;
    while (*p < end && hexval(**p) >= 0) {
        (*p)++;
    }
    size_t n = (size_t)(*p - s);
    if ((n != 8 && n != 32) || *p >= end || **p != ':') {
        return false;
    }
    (*p)++;
    return hexnum(p, end, port) && *port <= 0xffff;
}

/* One line "  N: LOCAL:PORT REMOTE:PORT ST ...": the local port and the state. */
static bool
tcp_line(const char *p, const char *end, uint64_t *port, uint64_t *st)
{
    const char *q = memchr(p, ':', (size_t)(end - p));
    if (q == NULL) {
        return false;
    }
    q++;
    while (q < end && *q == ' ') {
        q++;
    }
    uint64_t remote;
    if (!addr_port(&q, end, port) || q >= end || *q++ != ' ' || !addr_port(&q, end, &remote) ||
        q >= end || *q++ != ' ') {
        return false;
    }
    return hexnum(&q, end, st);
}

uint64_t
dm_proctcp_count(const char *text, size_t len, const uint16_t *ports, size_t nports)
{
    uint64_t n = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol != NULL ? eol : end;
        uint64_t port, st;
        if (tcp_line(p, le, &port, &st) && st == 0x01) { /* TCP_ESTABLISHED */
            for (size_t i = 0; i < nports; i++) {
                if (ports[i] == port) {
                    n++;
                    break;
                }
            }
        }
        p = le + 1;
    }
    return n;
}

void
dm_proctcp_init(struct dm_proctcp_stream *s, const uint16_t *ports, size_t nports)
{
    s->ports = ports;
    s->nports = nports;
    s->count = 0;
    s->_len = 0;
    s->_skip = false;
}

/* Appends bytes of the current line, or gives it up when it is too long. */
static void
keep(struct dm_proctcp_stream *s, const char *p, size_t n)
{
    if (s->_skip || s->_len + n > sizeof(s->_line)) {
        s->_skip = true;
        s->_len = 0;
        return;
    }
    memcpy(s->_line + s->_len, p, n);
    s->_len += n;
}

void
dm_proctcp_feed(struct dm_proctcp_stream *s, const char *chunk, size_t len)
{
    const char *p = chunk, *end = chunk + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL) {
            keep(s, p, (size_t)(end - p));
            return;
        }
        if (s->_len == 0 && !s->_skip) {
            s->count += dm_proctcp_count(p, (size_t)(eol - p), s->ports, s->nports);
        } else {
            keep(s, p, (size_t)(eol - p));
            if (!s->_skip) {
                s->count += dm_proctcp_count(s->_line, s->_len, s->ports, s->nports);
            }
            s->_len = 0;
            s->_skip = false;
        }
        p = eol + 1;
    }
}

uint64_t
dm_proctcp_finish(struct dm_proctcp_stream *s)
{
    if (s->_len > 0 && !s->_skip) {
        s->count += dm_proctcp_count(s->_line, s->_len, s->ports, s->nports);
    }
    s->_len = 0;
    s->_skip = false;
    return s->count;
}
