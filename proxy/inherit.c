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

int
dm_inherit_parse(const char *value, struct dm_inherit *in, char *err, size_t errlen)
{
    memset(in, 0, sizeof(*in));
    in->ready_fd = -1;
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
        bool ready = wlen == 5 && strncmp(p, "ready", 5) == 0;
        if (eq == NULL || (kind < 0 && !ready)) {
            snprintf(err, errlen, "%.*s: not a word of " DM_INHERIT_ENV, (int)(n > 40 ? 40 : n), p);
            goto fail;
        }
        const char *colon = memchr(v, ':', vlen);
        int fd = parse_fd(v, ready ? vlen : (colon != NULL ? (size_t)(colon - v) : vlen));
        if (fd < 0 || (ready && in->ready_fd >= 0) || (!ready && colon == NULL)) {
            snprintf(err, errlen, "%.*s: not %s", (int)(n > 40 ? 40 : n), p,
                     ready ? "ready=FD, once" : "WORD=FD:ADDRESS");
            goto fail;
        }
        for (size_t i = 0; i < in->n; i++) {
            if (in->v[i].fd == fd) {
                snprintf(err, errlen, "descriptor %d named twice", fd);
                goto fail;
            }
        }
        if (ready) {
            in->ready_fd = fd;
            p += n;
            continue;
        }
        if (fd == in->ready_fd) {
            snprintf(err, errlen, "descriptor %d named twice", fd);
            goto fail;
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
    memset(in, 0, sizeof(*in));
    in->ready_fd = -1;
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

int
dm_inherit_append(char **s, const char *word, int fd, const char *text)
{
    size_t old = *s != NULL ? strlen(*s) : 0;
    size_t tlen = text != NULL ? strlen(text) : 0;
    size_t cap = old + strlen(word) + 16 + 3 * tlen + 2;
    char *g = realloc(*s, cap);
    if (g == NULL) {
        return -1;
    }
    *s = g;
    size_t n = old;
    n += (size_t)snprintf(g + n, cap - n, "%s%s=%d", old > 0 ? " " : "", word, fd);
    if (text != NULL) {
        g[n++] = ':';
        for (size_t i = 0; i < tlen; i++) {
            unsigned char b = (unsigned char)text[i];
            if (text_byte_plain(b)) {
                g[n++] = (char)b;
            } else {
                n += (size_t)snprintf(g + n, cap - n, "%%%02X", b);
            }
        }
        g[n] = 0;
    }
    return 0;
}
