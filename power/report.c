/* Agent reports (power/report.h). */
#include "power/report.h"

#include <errno.h>
#include <math.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/stat.h>

#define PREFIX    "dimmer-agent/1 "
#define HMAC_HEX  64
#define HMAC_TAIL " hmac="

const char *
dm_report_verdict_name(enum dm_report_verdict v)
{
    static const char *const names[DM_REPORT_VERDICTS] = { "ok",      "malformed", "bad_hmac",
                                                           "unknown", "replay",    "stale" };
    return (unsigned)v < DM_REPORT_VERDICTS ? names[v] : "?";
}

static bool
name_ok(const char *s, size_t n)
{
    if (n == 0 || n > DM_REPORT_NAME_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-')) {
            return false;
        }
    }
    return true;
}

static bool
watts_ok(double w)
{
    return isfinite(w) && w >= 0 && w <= DM_REPORT_WATTS_MAX;
}

/* Lowercase hex of HMAC-SHA256(key, data) into hex (HMAC_HEX + 1 bytes). */
static bool
sign(const uint8_t *key, size_t key_len, const char *data, size_t len, char *hex)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)data, len, md, &md_len) ==
            NULL ||
        md_len != HMAC_HEX / 2) {
        return false;
    }
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < md_len; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[HMAC_HEX] = 0;
    return true;
}

size_t
dm_report_encode(const struct dm_report *r, const uint8_t *key, size_t key_len, char *out,
                 size_t cap)
{
    if (key_len == 0 || !name_ok(r->name, strlen(r->name)) || !watts_ok(r->est_w) ||
        (r->has_measured && !watts_ok(r->measured_w))) {
        return 0;
    }
    char measured[32] = "-";
    if (r->has_measured) {
        snprintf(measured, sizeof(measured), "%.3f", r->measured_w);
    }
    char body[DM_REPORT_MAX];
    int n = snprintf(body, sizeof(body),
                     PREFIX "name=%s seq=%llu ts=%llu est_w=%.3f measured_w=%s tcp=%llu", r->name,
                     (unsigned long long)r->seq, (unsigned long long)r->ts_ms, r->est_w, measured,
                     (unsigned long long)r->tcp);
    if (n < 0 || (size_t)n >= sizeof(body)) {
        return 0;
    }
    char hex[HMAC_HEX + 1];
    size_t total = (size_t)n + strlen(HMAC_TAIL) + HMAC_HEX;
    if (total > DM_REPORT_MAX || total > cap || !sign(key, key_len, body, (size_t)n, hex)) {
        return 0;
    }
    memcpy(out, body, (size_t)n);
    memcpy(out + n, HMAC_TAIL, strlen(HMAC_TAIL));
    memcpy(out + n + strlen(HMAC_TAIL), hex, HMAC_HEX);
    return total;
}

/* Takes "key=" then the value up to the next space (or the end) from *p. */
static bool
field(const char **p, const char *end, const char *key, const char **v, size_t *vlen)
{
    size_t k = strlen(key);
    if ((size_t)(end - *p) < k + 1 || memcmp(*p, key, k) != 0 || (*p)[k] != '=') {
        return false;
    }
    const char *s = *p + k + 1;
    const char *e = memchr(s, ' ', (size_t)(end - s));
    if (e == NULL) {
        e = end;
    }
    *v = s;
    *vlen = (size_t)(e - s);
    if (e < end && e + 1 == end) {
        return false; /* a space with nothing after it */
    }
    *p = e < end ? e + 1 : e;
    return *vlen > 0;
}

static bool
u64(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 20) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return false;
        }
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* Decimal watts: digits, an optional point and digits; nothing else. */
static bool
watts(const char *s, size_t n, double *out)
{
    char buf[32];
    bool point = false;
    if (n == 0 || n >= sizeof(buf)) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '.' && !point && i > 0 && i + 1 < n) {
            point = true;
        } else if (s[i] < '0' || s[i] > '9') {
            return false;
        }
    }
    memcpy(buf, s, n);
    buf[n] = 0;
    *out = strtod(buf, NULL);
    return watts_ok(*out);
}

enum dm_report_verdict
dm_report_decode(const char *buf, size_t len, const uint8_t *key, size_t key_len,
                 struct dm_report *out)
{
    size_t tail = strlen(HMAC_TAIL) + HMAC_HEX;
    size_t plen = strlen(PREFIX);
    if (len > DM_REPORT_MAX || len < plen + tail || memcmp(buf, PREFIX, plen) != 0 ||
        memcmp(buf + len - tail, HMAC_TAIL, strlen(HMAC_TAIL)) != 0) {
        return DM_REPORT_MALFORMED;
    }
    const char *hmac = buf + len - HMAC_HEX;
    for (size_t i = 0; i < HMAC_HEX; i++) {
        char c = hmac[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return DM_REPORT_MALFORMED;
        }
    }
    const char *p = buf + plen;
    const char *end = buf + len - tail;
    const char *v;
    size_t n;
    memset(out, 0, sizeof(*out));
    if (!field(&p, end, "name", &v, &n) || !name_ok(v, n)) {
        return DM_REPORT_MALFORMED;
    }
    memcpy(out->name, v, n);
    out->name[n] = 0;
    if (!field(&p, end, "seq", &v, &n) || !u64(v, n, &out->seq) || !field(&p, end, "ts", &v, &n) ||
        !u64(v, n, &out->ts_ms) || !field(&p, end, "est_w", &v, &n) || !watts(v, n, &out->est_w) ||
        !field(&p, end, "measured_w", &v, &n)) {
        return DM_REPORT_MALFORMED;
    }
    if (n == 1 && v[0] == '-') {
        out->has_measured = false;
    } else if (watts(v, n, &out->measured_w)) {
        out->has_measured = true;
    } else {
        return DM_REPORT_MALFORMED;
    }
    if (!field(&p, end, "tcp", &v, &n) || !u64(v, n, &out->tcp) || p != end ||
        out->tcp > DM_REPORT_TCP_MAX) {
        return DM_REPORT_MALFORMED;
    }
    /* seq / 1000 <= ts (the top of power/report.h). */
    if (out->seq / 1000 > out->ts_ms) {
        return DM_REPORT_MALFORMED;
    }
    char want[HMAC_HEX + 1];
    if (key_len == 0 || !sign(key, key_len, buf, (size_t)(end - buf), want) ||
        CRYPTO_memcmp(want, hmac, HMAC_HEX) != 0) {
        return DM_REPORT_BAD_HMAC;
    }
    return DM_REPORT_OK;
}

enum dm_report_verdict
dm_report_accept(const struct dm_report *r, struct dm_report_last *last, uint64_t now_ms,
                 uint64_t max_age_ms)
{
    uint64_t d = r->ts_ms > now_ms ? r->ts_ms - now_ms : now_ms - r->ts_ms;
    if (d > max_age_ms) {
        return DM_REPORT_STALE;
    }
    if (r->ts_ms < last->ts_ms || (r->ts_ms == last->ts_ms && r->seq <= last->seq)) {
        return DM_REPORT_REPLAY;
    }
    *last = (struct dm_report_last){ r->ts_ms, r->seq };
    return DM_REPORT_OK;
}

int
dm_report_key_read(const char *path, uint8_t key[DM_REPORT_KEY_MAX], size_t *len)
{
    /* Never blocking: a FIFO would hold the program until a writer came. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }
    struct stat st;
    int err = fstat(fd, &st) != 0    ? -errno
              : S_ISDIR(st.st_mode)  ? -EISDIR
              : !S_ISREG(st.st_mode) ? -ENODEV /* a FIFO, a device: dm_report_key_error() */
                                     : 0;
    if (err < 0) {
        close(fd);
        return err;
    }
    /* One byte more than fits tells a key too long from one that fills the buffer. */
    uint8_t buf[DM_REPORT_KEY_MAX + 1];
    size_t n = 0;
    while (n < sizeof(buf)) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - n);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            err = -errno;
            close(fd);
            return err;
        }
        if (r == 0) {
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) {
        n--;
    }
    if (n == 0) {
        return -EINVAL;
    }
    if (n > DM_REPORT_KEY_MAX) {
        return -EFBIG;
    }
    memcpy(key, buf, n);
    *len = n;
    return 0;
}

const char *
dm_report_key_error(int err)
{
    return err == -ENODEV ? "not a regular file" : strerror(-err);
}
