/*
 * The manifest reader (parsers/manifest.h).
 */
#include "parsers/manifest.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "parsers/errbuf.h"
#include "parsers/html_scan.h"

/* A size in bytes: decimal digits, no overflow. */
static bool
parse_bytes(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == '\0') {
        return false;
    }
    for (; *s; s++) {
        if (*s < '0' || *s > '9') {
            return false;
        }
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

struct manifest {
    const struct dm_manifest_cb *cb;
    void *arg;
    const char *path;
    const char *host;
    size_t host_len;
    char *err;
    size_t errlen;
    unsigned line;
    bool in_page;
    size_t page_path_len;
    char page_path[DM_URL_MAX];
    char url[DM_URL_MAX];
};

__attribute__((format(printf, 2, 3))) static int
manifest_error(struct manifest *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dm_errbuf_vat(m->err, m->errlen, m->path, m->line, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static int
manifest_end_page(struct manifest *m)
{
    int rc = 0;
    if (m->in_page && m->cb->page_end != NULL) {
        rc = m->cb->page_end(m->arg);
    }
    m->in_page = false;
    return rc;
}

/* Resolves ref against base (the page, or "/") into m->url: host then path. */
static int
manifest_resolve(struct manifest *m, const char *base, size_t base_len, const char *ref,
                 size_t *host_len, size_t *path_len)
{
    int rc = dm_url_resolve(m->host, m->host_len, base, base_len, ref, strlen(ref), m->url,
                            sizeof m->url, host_len, path_len);
    if (rc == -ENOSPC) {
        return manifest_error(m, "URL too long: %.64s", ref);
    }
    if (rc < 0) {
        return manifest_error(m, "not an http(s) URL: \"%.64s\"", ref);
    }
    return 0;
}

static int
manifest_line(struct manifest *m, char *line)
{
    bool indented = line[0] == ' ' || line[0] == '\t';
    char *tok[4];
    size_t ntok = 0;
    for (char *p = line; *p;) {
        while (*p == ' ' || *p == '\t') {
            *p++ = '\0';
        }
        if (*p == '\0') {
            break;
        }
        if (ntok == 0 && *p == '#') {
            return 0;
        }
        if (ntok == sizeof tok / sizeof tok[0]) {
            return manifest_error(m, "too many fields: \"%.64s\"", p);
        }
        tok[ntok++] = p;
        while (*p && *p != ' ' && *p != '\t') {
            p++;
        }
    }
    if (ntok == 0) {
        return 0;
    }

    /* bytes stays 0 when an object line gives no size (and is then not used). */
    uint64_t bytes = 0;
    size_t hl, pl;
    const struct dm_manifest_cb *cb = m->cb;
    if (indented) {
        if (!m->in_page) {
            return manifest_error(m, "object line outside a page");
        }
        if (ntok > 2) {
            return manifest_error(m, "object line: expected \"URL [bytes]\", got extra \"%.64s\"",
                                  tok[2]);
        }
        if (ntok == 2 && !parse_bytes(tok[1], &bytes)) {
            return manifest_error(m, "size \"%.64s\" is not a number of bytes", tok[1]);
        }
        int rc = manifest_resolve(m, m->page_path, m->page_path_len, tok[0], &hl, &pl);
        if (rc == 0 && cb->object != NULL) {
            rc = cb->object(m->arg, m->url, hl, m->url + hl, pl, ntok == 2, bytes);
        }
        return rc;
    }

    int rc = manifest_end_page(m);
    if (rc < 0) {
        return rc;
    }
    if (strcmp(tok[0], "page") == 0) {
        if (ntok != 2) {
            return manifest_error(m, "expected \"page PATH\"");
        }
        if (tok[1][0] != '/' || tok[1][1] == '/') {
            return manifest_error(m, "page path \"%.64s\" must start with one /", tok[1]);
        }
        rc = manifest_resolve(m, "/", 1, tok[1], &hl, &pl);
        if (rc < 0) {
            return rc;
        }
        memcpy(m->page_path, m->url + hl, pl);
        m->page_path_len = pl;
        m->in_page = true;
        return cb->page != NULL ? cb->page(m->arg, m->url, hl, m->page_path, pl) : 0;
    }
    if (strcmp(tok[0], "size") == 0) {
        if (ntok != 3) {
            return manifest_error(m, "expected \"size URL bytes\"");
        }
        if (!parse_bytes(tok[2], &bytes)) {
            return manifest_error(m, "size \"%.64s\" is not a number of bytes", tok[2]);
        }
        rc = manifest_resolve(m, "/", 1, tok[1], &hl, &pl);
        if (rc == 0 && cb->size != NULL) {
            rc = cb->size(m->arg, m->url, hl, m->url + hl, pl, bytes);
        }
        return rc;
    }
    return manifest_error(m,
                          "unknown item \"%.64s\": expected page or size (object lines are "
                          "indented)",
                          tok[0]);
}

/*
 * One line of f into buf, without its LF, NUL-terminated: its length, or -1
 * at the end of the file, -2 for a line over max bytes, -3 for a NUL byte
 * (a file that is not text, /dev/zero say, ends at once either way instead
 * of filling memory).
 */
static ssize_t
read_line(FILE *f, char *buf, size_t max)
{
    size_t n = 0;
    int ch;
    while ((ch = getc_unlocked(f)) != EOF && ch != '\n') {
        if (ch == 0) {
            return -3;
        }
        if (n == max) {
            return -2;
        }
        buf[n++] = (char)ch;
    }
    if (ch == EOF && n == 0) {
        return -1;
    }
    buf[n] = 0;
    return (ssize_t)n;
}

int
dm_manifest_read(const char *path, const char *host, const struct dm_manifest_cb *cb, void *arg,
                 char *err, size_t errlen)
{
    dm_errbuf_set(err, errlen, "%s", "");
    struct manifest *m = calloc(1, sizeof *m);
    if (m == NULL) {
        dm_errbuf_set(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    m->cb = cb;
    m->arg = arg;
    m->path = path;
    m->host = host ? host : "";
    m->host_len = strlen(m->host);
    m->err = err;
    m->errlen = errlen;
    int rc = 0;
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        rc = -errno;
        dm_errbuf_set(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        free(m);
        return rc;
    }
    /* Room for the line, a CR that ends it (not counted) and the NUL. */
    char *line = malloc(DM_MANIFEST_LINE_MAX + 2);
    if (line == NULL) {
        dm_errbuf_set(err, errlen, "%s: out of memory", path);
        fclose(f);
        free(m);
        return -ENOMEM;
    }
    ssize_t len;
    while ((len = read_line(f, line, DM_MANIFEST_LINE_MAX + 1)) != -1) {
        m->line++;
        if (len == -3) {
            rc = manifest_error(m, "a NUL byte (not a text file?)");
            break;
        }
        while (len > 0 && line[len - 1] == '\r') {
            line[--len] = '\0';
        }
        if (len == -2 || len > DM_MANIFEST_LINE_MAX) {
            rc = manifest_error(m, "line over %d bytes", DM_MANIFEST_LINE_MAX);
            break;
        }
        rc = manifest_line(m, line);
        if (rc < 0) {
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        rc = -EIO;
        dm_errbuf_set(err, errlen, "%s: read error", path);
    }
    if (rc == 0) {
        rc = manifest_end_page(m);
    }
    free(line);
    fclose(f);
    free(m);
    return rc;
}
