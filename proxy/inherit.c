#include "proxy/inherit.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

struct dm_inherit *dm_inherited;

static const char *const kind_words[] = { "listen", "admin", "metrics" };

static bool
text_byte_plain(unsigned char b)
{
    return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') ||
           strchr(".:*[]_-", b) != NULL;
}

/* The descriptor of "FD" or "FD:", digits only, 3 to 65535; -1 if not one. */
static int
parse_fd(const char *p, size_t n)
{
    if (n == 0 || n > 5) {
        return -1;
    }
    int fd = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return -1;
        }
        fd = fd * 10 + (p[i] - '0');
    }
    return fd >= 3 && fd <= 65535 ? fd : -1;
}

/* Decodes TEXT (n bytes) into a new string; NULL when malformed or empty. */
static char *
decode_text(const char *p, size_t n)
{
    char *s = n > 0 ? malloc(n + 1) : NULL;
    size_t k = 0;
    for (size_t i = 0; s != NULL && i < n; i++) {
        unsigned char b = (unsigned char)p[i];
        char hex[3] = { 0 };
        if (b == '%' && i + 2 < n && isxdigit((unsigned char)p[i + 1]) &&
            isxdigit((unsigned char)p[i + 2])) {
            memcpy(hex, p + i + 1, 2);
        }
        long v = hex[0] != 0 ? strtol(hex, NULL, 16) : 0;
        if (v != 0) {
            s[k++] = (char)v;
            i += 2;
        } else if (b != '%' && text_byte_plain(b)) {
            s[k++] = (char)b;
        } else {
            free(s);
            return NULL;
        }
    }
    if (s != NULL) {
        s[k] = 0;
    }
    return s;
}

/* Digits only, up to max; -1 if not. */
static long
parse_count(const char *p, size_t n, long max)
{
    long v = 0;
    if (n == 0 || n > 12) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return -1;
        }
        v = v * 10 + (p[i] - '0');
    }
    return v <= max ? v : -1;
}

/* The entry of addr, made (unsaid) if new; NULL when out of memory. */
static struct dm_inherited_host *
host_entry(struct dm_inherit *in, char *addr)
{
    for (size_t i = 0; i < in->nhosts; i++) {
        if (strcmp(in->hosts[i].addr, addr) == 0) {
            free(addr);
            return &in->hosts[i];
        }
    }
    struct dm_inherited_host *grown = realloc(in->hosts, (in->nhosts + 1) * sizeof(*grown));
    if (grown == NULL) {
        free(addr);
        return NULL;
    }
    in->hosts = grown;
    grown[in->nhosts] = (struct dm_inherited_host){ .addr = addr, .down = -1, .pm_state = -1 };
    return &grown[in->nhosts++];
}

/*
 * "from=PID", "host=ADDR,down=D" or "power=ADDR,state=S,held=H,wh=X" (word
 * of wlen bytes, value v of vlen): 0 when taken, -1 when malformed, -2 out
 * of memory, -3 when it is none of these words.
 */
static int
parse_state_word(struct dm_inherit *in, const char *word, size_t wlen, const char *v, size_t vlen)
{
    if (wlen == 4 && strncmp(word, "from", 4) == 0) {
        long pid = parse_count(v, vlen, 0x7fffffff);
        if (pid <= 1 || in->from != 0) {
            return -1;
        }
        in->from = pid;
        return 0;
    }
    bool host = wlen == 4 && strncmp(word, "host", 4) == 0;
    bool power = wlen == 5 && strncmp(word, "power", 5) == 0;
    if (!host && !power) {
        return -3;
    }
    const char *comma = memchr(v, ',', vlen);
    if (comma == NULL) {
        return -1;
    }
    char *addr = decode_text(v, (size_t)(comma - v));
    if (addr == NULL) {
        return -1;
    }
    /* The fields, each once, all of them. */
    long down = -1, state = -1, held = -1;
    double wh = -1;
    bool bad = false;
    const char *end = v + vlen;
    for (const char *f = comma + 1; f <= end;) {
        const char *fe = memchr(f, ',', (size_t)(end - f));
        fe = fe != NULL ? fe : end;
        const char *eq = memchr(f, '=', (size_t)(fe - f));
        size_t klen = eq != NULL ? (size_t)(eq - f) : 0;
        const char *val = eq != NULL ? eq + 1 : fe;
        size_t n = (size_t)(fe - val);
        long *slot = host && klen == 4 && strncmp(f, "down", 4) == 0     ? &down
                     : power && klen == 5 && strncmp(f, "state", 5) == 0 ? &state
                     : power && klen == 4 && strncmp(f, "held", 4) == 0  ? &held
                                                                         : NULL;
        if (slot != NULL && *slot == -1) {
            *slot = parse_count(val, n, slot == &state ? 63 : 1);
            bad = *slot < 0;
        } else if (power && klen == 2 && strncmp(f, "wh", 2) == 0 && wh < 0 && n > 0 && n < 32) {
            char num[32];
            memcpy(num, val, n);
            num[n] = 0;
            char *stop;
            wh = strtod(num, &stop);
            bad = *stop != 0 || !(wh >= 0 && wh < 1e15);
        } else {
            bad = true;
        }
        if (bad) {
            break;
        }
        f = fe + 1;
    }
    if (bad || (host ? down < 0 : (state < 0 || held < 0 || wh < 0))) {
        free(addr);
        return -1;
    }
    struct dm_inherited_host *h = host_entry(in, addr);
    if (h == NULL) {
        return -2;
    }
    if (host) {
        h->down = (int)down;
    } else {
        h->pm_state = (int)state;
        h->held = held == 1;
        h->wh = wh;
    }
    return 0;
}

int
dm_inherit_parse(const char *value, struct dm_inherit *in, char *err, size_t errlen)
{
    memset(in, 0, sizeof(*in));
    in->ready_fd = in->tickets_fd = -1;
    const char *p = value;
    while (*p != 0) {
        if (*p == ' ') {
            p++;
            continue;
        }
        size_t n = strcspn(p, " ");
        const char *eq = memchr(p, '=', n);
        size_t wlen = eq != NULL ? (size_t)(eq - p) : n;
        const char *v = eq != NULL ? eq + 1 : p + n;
        size_t vlen = (size_t)(p + n - v);
        int kind = -1;
        for (int k = 0; k < 3; k++) {
            if (strlen(kind_words[k]) == wlen && strncmp(p, kind_words[k], wlen) == 0) {
                kind = k;
            }
        }
        /* The words that name a pipe only, once each. */
        int *pipe_fd = wlen == 5 && strncmp(p, "ready", 5) == 0     ? &in->ready_fd
                       : wlen == 7 && strncmp(p, "tickets", 7) == 0 ? &in->tickets_fd
                                                                    : NULL;
        bool pipe_word = pipe_fd != NULL;
        if (eq != NULL && kind < 0 && !pipe_word) {
            int r = parse_state_word(in, p, wlen, v, vlen);
            if (r == 0) {
                p += n;
                continue;
            }
            if (r == -2) {
                snprintf(err, errlen, "out of memory");
                goto fail;
            }
            if (r == -1) {
                snprintf(err, errlen, "%.*s: not %.*s=%s", (int)(n > 60 ? 60 : n), p, (int)wlen, p,
                         wlen == 4 && strncmp(p, "from", 4) == 0 ? "PID, once"
                         : wlen == 4                             ? "ADDRESS,down=0|1"
                                                                 : "ADDRESS,state=N,held=0|1,wh=X");
                goto fail;
            }
        }
        if (eq == NULL || (kind < 0 && !pipe_word)) {
            snprintf(err, errlen, "%.*s: not a word of " DM_INHERIT_ENV, (int)(n > 40 ? 40 : n), p);
            goto fail;
        }
        const char *colon = memchr(v, ':', vlen);
        int fd = parse_fd(v, pipe_word ? vlen : (colon != NULL ? (size_t)(colon - v) : vlen));
        if (fd < 0 || (pipe_word && *pipe_fd >= 0) || (!pipe_word && colon == NULL)) {
            snprintf(err, errlen, "%.*s: not %s", (int)(n > 40 ? 40 : n), p,
                     pipe_word ? "WORD=FD, once" : "WORD=FD:ADDRESS");
            goto fail;
        }
        for (size_t i = 0; i < in->n; i++) {
            if (in->v[i].fd == fd) {
                snprintf(err, errlen, "descriptor %d named twice", fd);
                goto fail;
            }
        }
        if (fd == in->ready_fd || fd == in->tickets_fd) {
            snprintf(err, errlen, "descriptor %d named twice", fd);
            goto fail;
        }
        if (pipe_word) {
            *pipe_fd = fd;
            p += n;
            continue;
        }
        char *text = decode_text(colon + 1, (size_t)(p + n - colon - 1));
        struct dm_inherited *grown =
            text != NULL ? realloc(in->v, (in->n + 1) * sizeof(*in->v)) : NULL;
        if (grown == NULL) {
            free(text);
            snprintf(err, errlen, "%.*s: %s", (int)(n > 40 ? 40 : n), p,
                     text == NULL ? "a bad address" : "out of memory");
            goto fail;
        }
        in->v = grown;
        in->v[in->n++] =
            (struct dm_inherited){ .kind = (enum dm_inherit_kind)kind, .fd = fd, .text = text };
        p += n;
    }
    return 0;

fail:
    for (size_t i = 0; i < in->n; i++) {
        free(in->v[i].text);
    }
    free(in->v);
    dm_inherit_free(in);
    memset(in, 0, sizeof(*in));
    in->ready_fd = in->tickets_fd = -1;
    return -1;
}

int
dm_inherit_check(struct dm_inherit *in, char *err, size_t errlen)
{
    struct stat st;
    if (in->ready_fd >= 0 &&
        (fstat(in->ready_fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))) {
        snprintf(err, errlen, "ready=%d: not an open pipe", in->ready_fd);
        return -1;
    }
    if (in->tickets_fd >= 0 && (fstat(in->tickets_fd, &st) != 0 || !S_ISFIFO(st.st_mode))) {
        snprintf(err, errlen, "tickets=%d: not an open pipe", in->tickets_fd);
        return -1;
    }
    for (size_t i = 0; i < in->n; i++) {
        const struct dm_inherited *h = &in->v[i];
        int type = 0, listening = 0;
        socklen_t len = sizeof(type);
        bool ok = fstat(h->fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
                  getsockopt(h->fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0;
        len = sizeof(listening);
        if (ok && h->kind == DM_INHERIT_METRICS) {
            ok = type == SOCK_DGRAM;
        } else if (ok) {
            ok = type == SOCK_STREAM &&
                 getsockopt(h->fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 &&
                 listening != 0;
        }
        if (!ok) {
            snprintf(err, errlen, "%s=%d (%s): not %s", kind_words[h->kind], h->fd, h->text,
                     h->kind == DM_INHERIT_METRICS ? "an open UDP socket"
                                                   : "a listening TCP socket");
            return -1;
        }
    }
    for (size_t i = 0; i < in->n; i++) {
        (void)fcntl(in->v[i].fd, F_SETFD, FD_CLOEXEC);
    }
    if (in->ready_fd >= 0) {
        (void)fcntl(in->ready_fd, F_SETFD, FD_CLOEXEC);
    }
    if (in->tickets_fd >= 0) {
        (void)fcntl(in->tickets_fd, F_SETFD, FD_CLOEXEC);
    }
    return 0;
}

size_t
dm_inherit_take(struct dm_inherit *in, enum dm_inherit_kind kind, const char *text, int *fds,
                size_t max)
{
    size_t k = 0;
    for (size_t i = 0; in != NULL && i < in->n && k < max; i++) {
        struct dm_inherited *h = &in->v[i];
        if (!h->taken && h->kind == kind && strcmp(h->text, text) == 0) {
            h->taken = true;
            fds[k++] = h->fd;
        }
    }
    return k;
}

const char *
dm_inherit_listen_key(char *buf, size_t cap, const char *text, size_t before)
{
    if (before == 0) {
        snprintf(buf, cap, "%s", text);
    } else {
        snprintf(buf, cap, "%s\n%zu", text, before);
    }
    return buf;
}

void
dm_inherit_close_rest(struct dm_inherit *in)
{
    if (in == NULL) {
        return;
    }
    for (size_t i = 0; i < in->n; i++) {
        if (!in->v[i].taken) {
            close(in->v[i].fd);
        }
        free(in->v[i].text);
    }
    free(in->v);
    in->v = NULL;
    in->n = 0;
}

/* Appends "WORD=HEAD", TEXT escaped (when not NULL), then TAIL to *s. 0 or -1. */
static int
append_word(char **s, const char *word, const char *head, const char *text, const char *tail)
{
    size_t old = *s != NULL ? strlen(*s) : 0;
    size_t tlen = text != NULL ? strlen(text) : 0;
    size_t cap = old + strlen(word) + strlen(head) + 3 * tlen + strlen(tail) + 4;
    char *g = realloc(*s, cap);
    if (g == NULL) {
        return -1;
    }
    *s = g;
    size_t n = old;
    n += (size_t)snprintf(g + n, cap - n, "%s%s=%s", old > 0 ? " " : "", word, head);
    for (size_t i = 0; i < tlen; i++) {
        unsigned char b = (unsigned char)text[i];
        if (text_byte_plain(b)) {
            g[n++] = (char)b;
        } else {
            n += (size_t)snprintf(g + n, cap - n, "%%%02X", b);
        }
    }
    snprintf(g + n, cap - n, "%s", tail);
    return 0;
}

int
dm_inherit_append(char **s, const char *word, int fd, const char *text)
{
    char head[16];
    snprintf(head, sizeof(head), text != NULL ? "%d:" : "%d", fd);
    return append_word(s, word, head, text, "");
}

const struct dm_inherited_host *
dm_inherit_host(const struct dm_inherit *in, const char *addr)
{
    for (size_t i = 0; in != NULL && i < in->nhosts; i++) {
        if (strcmp(in->hosts[i].addr, addr) == 0) {
            return &in->hosts[i];
        }
    }
    return NULL;
}

void
dm_inherit_free(struct dm_inherit *in)
{
    if (in == NULL) {
        return;
    }
    for (size_t i = 0; i < in->nhosts; i++) {
        free(in->hosts[i].addr);
    }
    free(in->hosts);
    in->hosts = NULL;
    in->nhosts = 0;
}

int
dm_inherit_append_host(char **s, const char *addr, int down)
{
    char tail[16];
    snprintf(tail, sizeof(tail), ",down=%d", down != 0);
    return append_word(s, "host", "", addr, tail);
}

int
dm_inherit_append_power(char **s, const char *addr, int state, bool held, double wh)
{
    char tail[96];
    snprintf(tail, sizeof(tail), ",state=%d,held=%d,wh=%.6f", state, held, wh >= 0 ? wh : 0);
    return append_word(s, "power", "", addr, tail);
}
