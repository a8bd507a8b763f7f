/*
 * The value parsers of the configuration: addresses, durations, sizes, and the
 * edit distance behind "did you mean" suggestions. No YAML here, so the quick
 * start flags and the YAML loader share them.
 */
#include "conf/conf.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "conf/internal.h"

/* Reads one or more decimal digits at *p into *out, advancing *p. 0, or -EINVAL. */
static int
parse_digits(const char **p, uint64_t *out)
{
    const char *s = *p;
    uint64_t n = 0;

    if (!isdigit((unsigned char)*s)) {
        return -EINVAL;
    }
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (n > (UINT64_MAX - d) / 10) {
            return -EINVAL;
        }
        n = n * 10 + d;
    }
    *p = s;
    *out = n;
    return 0;
}

int
dm_conf_parse_duration_ms(const char *text, uint64_t *out)
{
    const char *p = text;
    uint64_t n;
    uint64_t mult;

    if (text == NULL || parse_digits(&p, &n) != 0) {
        return -EINVAL;
    }
    /* Lower case only: "M" could be read as months. */
    if (*p == '\0' || strcmp(p, "ms") == 0) {
        mult = 1;
    } else if (strcmp(p, "s") == 0) {
        mult = 1000;
    } else if (strcmp(p, "m") == 0) {
        mult = 60 * 1000;
    } else if (strcmp(p, "h") == 0) {
        mult = 60 * 60 * 1000;
    } else {
        return -EINVAL;
    }
    if (n > UINT64_MAX / mult) {
        return -EINVAL;
    }
    *out = n * mult;
    return 0;
}

int
dm_conf_parse_size(const char *text, uint64_t *out)
{
    const char *p = text;
    uint64_t n;
    unsigned shift;

    if (text == NULL || parse_digits(&p, &n) != 0) {
        return -EINVAL;
    }
    switch (tolower((unsigned char)*p)) {
    case '\0':
        shift = 0;
        break;
    case 'k':
        shift = 10;
        break;
    case 'm':
        shift = 20;
        break;
    case 'g':
        shift = 30;
        break;
    default:
        return -EINVAL;
    }
    if (shift != 0 && p[1] != '\0') {
        return -EINVAL;
    }
    if (n > UINT64_MAX >> shift) {
        return -EINVAL;
    }
    *out = n << shift;
    return 0;
}

/* Port min..65535 (min is 0 or 1) as decimal digits only. */
static int
parse_port(const char *s, unsigned min, uint16_t *out, const char **why)
{
    uint64_t n;
    const char *p = s;

    if (*s == '\0') {
        *why = "missing port";
        return -EINVAL;
    }
    if (parse_digits(&p, &n) != 0 || *p != '\0' || n < min || n > 65535) {
        *why = min == 0 ? "port must be between 0 and 65535" : "port must be between 1 and 65535";
        return -EINVAL;
    }
    *out = (uint16_t)n;
    return 0;
}

/* Only characters a DNS name may hold, so junk never reaches the resolver. */
static bool
is_host_name(const char *s)
{
    if (*s == '\0' || *s == '.' || *s == '-') {
        return false;
    }
    for (; *s != '\0'; s++) {
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '.' && *s != '_') {
            return false;
        }
    }
    return true;
}

static bool
is_dotted_numbers(const char *s)
{
    for (; *s != '\0'; s++) {
        if (!isdigit((unsigned char)*s) && *s != '.') {
            return false;
        }
    }
    return true;
}

int
dm_conf_parse_addr_why(const char *text, bool listener, struct dm_conf_addr *out, const char **why)
{
    char host[256];
    const char *port_text;
    size_t host_len;
    bool bracketed = false;
    uint16_t port;

    memset(out, 0, sizeof(*out));
    *why = "expected host:port";
    if (text == NULL || *text == '\0') {
        return -EINVAL;
    }
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL) {
            *why = "missing \"]\"";
            return -EINVAL;
        }
        if (close[1] != ':') {
            *why = close[1] == '\0' ? "missing port" : "expected \":port\" after \"]\"";
            return -EINVAL;
        }
        bracketed = true;
        host_len = (size_t)(close - text - 1);
        if (host_len >= sizeof(host)) {
            *why = "host too long";
            return -EINVAL;
        }
        memcpy(host, text + 1, host_len);
        port_text = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (colon == NULL) {
            *why = "missing port";
            return -EINVAL;
        }
        host_len = (size_t)(colon - text);
        if (memchr(text, ':', host_len) != NULL) {
            *why = "an IPv6 address needs brackets, as in [::1]:80";
            return -EINVAL;
        }
        if (host_len >= sizeof(host)) {
            *why = "host too long";
            return -EINVAL;
        }
        memcpy(host, text, host_len);
        port_text = colon + 1;
    }
    host[host_len] = '\0';
    if (parse_port(port_text, listener ? 0 : 1, &port, why) != 0) {
        return -EINVAL;
    }

    if (bracketed) {
        /* getaddrinfo rather than inet_pton so that "[fe80::1%eth0]" keeps its scope. */
        struct addrinfo hints = { .ai_family = AF_INET6, .ai_flags = AI_NUMERICHOST };
        struct addrinfo *ai = NULL;
        if (host_len == 0 || getaddrinfo(host, NULL, &hints, &ai) != 0) {
            *why = "bad IPv6 address";
            return -EINVAL;
        }
        memcpy(&out->sa, ai->ai_addr, ai->ai_addrlen);
        out->salen = (socklen_t)ai->ai_addrlen;
        freeaddrinfo(ai);
        ((struct sockaddr_in6 *)&out->sa)->sin6_port = htons(port);
    } else if (host_len == 0 || strcmp(host, "*") == 0) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&out->sa;
        sin->sin_family = AF_INET;
        sin->sin_addr.s_addr = htonl(INADDR_ANY);
        sin->sin_port = htons(port);
        out->salen = sizeof(*sin);
    } else if (is_dotted_numbers(host)) {
        /* Never let "1.2.3" or "999.0.0.1" reach the resolver's legacy forms. */
        struct sockaddr_in *sin = (struct sockaddr_in *)&out->sa;
        if (inet_pton(AF_INET, host, &sin->sin_addr) != 1) {
            *why = "bad IPv4 address";
            return -EINVAL;
        }
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        out->salen = sizeof(*sin);
    } else {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
        struct addrinfo *ai = NULL;
        int rc;
        if (!is_host_name(host)) {
            *why = "bad host name";
            return -EINVAL;
        }
        rc = getaddrinfo(host, port_text, &hints, &ai);
        if (rc != 0) {
            *why = rc == EAI_MEMORY ? "out of memory" : gai_strerror(rc);
            return rc == EAI_MEMORY ? -ENOMEM : -EINVAL;
        }
        memcpy(&out->sa, ai->ai_addr, ai->ai_addrlen);
        out->salen = (socklen_t)ai->ai_addrlen;
        freeaddrinfo(ai);
    }

    out->text = strdup(text);
    if (out->text == NULL) {
        *why = "out of memory";
        return -ENOMEM;
    }
    return 0;
}

int
dm_conf_parse_addr(const char *text, struct dm_conf_addr *out)
{
    const char *why;
    return dm_conf_parse_addr_why(text, false, out, &why);
}

#define EDIT_MAX 64

size_t
dm_conf_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a);
    size_t lb = strlen(b);
    size_t rows[3][EDIT_MAX + 1];

    if (la > EDIT_MAX || lb > EDIT_MAX) {
        return (size_t)-1 / 2;
    }
    /*
     * Optimal string alignment distance (Levenshtein plus swaps of adjacent
     * characters, the commonest typo: "wbe" is one edit from "web"). Three
     * rolling rows of the table: two back, previous, current.
     */
    for (size_t j = 0; j <= lb; j++) {
        rows[0][j] = j;
    }
    for (size_t i = 1; i <= la; i++) {
        size_t *prev2 = rows[(i + 1) % 3], *prev = rows[(i + 2) % 3], *cur = rows[i % 3];
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            char ca = (char)tolower((unsigned char)a[i - 1]);
            char cb = (char)tolower((unsigned char)b[j - 1]);
            size_t best = prev[j - 1] + (ca != cb);
            if (prev[j] + 1 < best) {
                best = prev[j] + 1;
            }
            if (cur[j - 1] + 1 < best) {
                best = cur[j - 1] + 1;
            }
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < best) {
                best = prev2[j - 2] + 1;
            }
            cur[j] = best;
        }
    }
    return rows[la % 3][lb];
}

const char *
dm_conf_suggest(const char *word, const char *const *cands, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;

    size_t lw = strlen(word);
    for (size_t i = 0; i < n; i++) {
        size_t d, longer, lc;
        if (cands[i] == NULL) {
            continue;
        }
        lc = strlen(cands[i]);
        longer = lw > lc ? lw : lc;
        /* The distance is at least the difference of the lengths, and a
         * long name is no typo: neither is worth the quadratic distance. */
        if ((longer - (lw < lc ? lw : lc)) * 3 > longer || longer > DM_CONF_SUGGEST_MAX) {
            continue;
        }
        d = dm_conf_edit_distance(word, cands[i]);
        if (d * 3 <= longer && d < best_d) {
            best = cands[i];
            best_d = d;
        }
    }
    return best;
}

int
dm_conf_parse_prefix(const char *text, struct dm_conf_prefix *out, const char **why)
{
    const char *dummy;
    char host[INET6_ADDRSTRLEN + 1];
    const char *slash = strchr(text, '/');
    size_t hlen = slash != NULL ? (size_t)(slash - text) : strlen(text);
    struct dm_conf_prefix p = { 0 };

    why = why != NULL ? why : &dummy;
    *out = (struct dm_conf_prefix){ 0 };
    if (hlen == 0 || hlen >= sizeof(host)) {
        *why = "not an IPv4 or IPv6 address";
        return -EINVAL;
    }
    memcpy(host, text, hlen);
    host[hlen] = '\0';
    if (inet_pton(AF_INET, host, p.addr) == 1) {
        p.family = AF_INET;
    } else if (inet_pton(AF_INET6, host, p.addr) == 1) {
        p.family = AF_INET6;
    } else {
        *why = "not an IPv4 or IPv6 address";
        return -EINVAL;
    }
    unsigned max = p.family == AF_INET ? 32 : 128;
    p.bits = max;
    if (slash != NULL) {
        const char *s = slash + 1;
        uint64_t bits;
        if (parse_digits(&s, &bits) < 0 || *s != '\0' || bits > max) {
            *why = p.family == AF_INET ? "bits must be 0 to 32" : "bits must be 0 to 128";
            return -EINVAL;
        }
        p.bits = (unsigned)bits;
    }
    for (unsigned i = p.bits; i < max; i++) {
        if (p.addr[i / 8] & (0x80u >> (i % 8))) {
            *why = "address bits set past the prefix length";
            return -EINVAL;
        }
    }
    *out = p;
    return 0;
}

bool
dm_conf_prefix_match(const struct dm_conf_prefix *p, const struct sockaddr *sa)
{
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    const uint8_t *a;
    int family = sa->sa_family;

    if (family == AF_INET) {
        a = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
    } else if (family == AF_INET6) {
        a = (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (p->family == AF_INET && memcmp(a, mapped, sizeof(mapped)) == 0) {
            a += sizeof(mapped); /* ::ffff:192.0.2.7 is 192.0.2.7 */
            family = AF_INET;
        }
    } else {
        return false;
    }
    if (family != p->family) {
        return false;
    }
    unsigned full = p->bits / 8, rest = p->bits % 8;
    if (memcmp(a, p->addr, full) != 0) {
        return false;
    }
    return rest == 0 || ((a[full] ^ p->addr[full]) & (uint8_t)(0xff00u >> rest)) == 0;
}
