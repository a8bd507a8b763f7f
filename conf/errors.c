/*
 * The messages of a load: each error is kept with its position while the
 * walk goes on, so one run reports as many mistakes as it can; at the end
 * they are sorted into file order and handed to the caller's struct
 * dm_conf_errors. A message reads "file:line:column: what is wrong".
 */
#include "conf/conf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/internal.h"

struct dm_conf_msg {
    size_t line; /* 1-based; 0 for messages with no position, kept in order found */
    size_t col;
    char *text;
};

static char *
vformat(const char *fmt, va_list ap)
{
    va_list ap2;
    int n;
    char *s;

    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        return NULL;
    }
    s = malloc((size_t)n + 1);
    if (s != NULL) {
        vsnprintf(s, (size_t)n + 1, fmt, ap);
    }
    return s;
}

char *
dm_conf_format(const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

/* Takes text (may be NULL after a failed allocation, which only sets oom). */
static void
add_msg(struct dm_conf_loader *ld, size_t line, size_t col, char *text)
{
    struct dm_conf_msg *m;

    if (text == NULL) {
        ld->oom = true;
        return;
    }
    if (ld->nmsgs >= DM_CONF_MSGS_MAX) {
        /* Enough to act on; a mistake repeated a million times (an alias
         * of a bad server) would otherwise cost memory and time. */
        free(text);
        ld->dropped++;
        return;
    }
    m = realloc(ld->msgs, (ld->nmsgs + 1) * sizeof(*m));
    if (m == NULL) {
        free(text);
        ld->oom = true;
        return;
    }
    ld->msgs = m;
    ld->msgs[ld->nmsgs++] = (struct dm_conf_msg){ .line = line, .col = col, .text = text };
}

static void
vfail_mark(struct dm_conf_loader *ld, yaml_mark_t mark, const char *fmt, va_list ap)
{
    char *what = vformat(fmt, ap);

    if (what == NULL) {
        ld->oom = true;
        return;
    }
    add_msg(ld, mark.line + 1, mark.column + 1,
            dm_conf_format("%s:%zu:%zu: %s", ld->name, mark.line + 1, mark.column + 1, what));
    free(what);
}

void
dm_conf_fail_mark(struct dm_conf_loader *ld, yaml_mark_t mark, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfail_mark(ld, mark, fmt, ap);
    va_end(ap);
}

void
dm_conf_warn_at(struct dm_conf_loader *ld, const yaml_node_t *node, const char *fmt, ...)
{
    struct dm_conf *c = ld->c;
    if (c->nwarnings >= DM_CONF_MSGS_MAX) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    char *what = vformat(fmt, ap);
    va_end(ap);
    char *text = what != NULL
                     ? dm_conf_format("%s:%zu:%zu: warning: %s", ld->name,
                                      node->start_mark.line + 1, node->start_mark.column + 1, what)
                     : NULL;
    free(what);
    char **w = text != NULL ? realloc(c->warnings, (c->nwarnings + 1) * sizeof(*w)) : NULL;
    if (w == NULL) {
        free(text);
        ld->oom = true;
        return;
    }
    c->warnings = w;
    c->warnings[c->nwarnings++] = text;
}

void
dm_conf_fail_at(struct dm_conf_loader *ld, const yaml_node_t *node, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfail_mark(ld, node->start_mark, fmt, ap);
    va_end(ap);
}

void
dm_conf_fail_plain(struct dm_conf_loader *ld, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    add_msg(ld, 0, 0, vformat(fmt, ap));
    va_end(ap);
}

static int
err_push(struct dm_conf_errors *err, char *text)
{
    char **m = realloc(err->msg, (err->n + 1) * sizeof(*m));
    if (m == NULL) {
        free(text);
        return -ENOMEM;
    }
    err->msg = m;
    err->msg[err->n++] = text;
    return 0;
}

void
dm_conf_flush_msgs(struct dm_conf_loader *ld, struct dm_conf_errors *err)
{
    /* A stable insertion sort: the list is short, and equal positions keep the order found. */
    for (size_t i = 1; i < ld->nmsgs; i++) {
        struct dm_conf_msg m = ld->msgs[i];
        size_t j = i;
        while (j > 0 && (ld->msgs[j - 1].line > m.line ||
                         (ld->msgs[j - 1].line == m.line && ld->msgs[j - 1].col > m.col))) {
            ld->msgs[j] = ld->msgs[j - 1];
            j--;
        }
        ld->msgs[j] = m;
    }
    size_t dropped = ld->dropped;
    ld->dropped = 0;
    if (dropped > 0) {
        char *s = dm_conf_format("%s: and %zu more errors, not shown", ld->name, dropped + 1);
        if (s != NULL) {
            ld->nmsgs--; /* room for it: the last one found goes */
            free(ld->msgs[ld->nmsgs].text);
            add_msg(ld, 0, 0, s);
        }
    }
    if (ld->oom) {
        char *s = dm_conf_format("%s: out of memory", ld->name);
        if (s != NULL) {
            if (ld->nmsgs >= DM_CONF_MSGS_MAX) {
                ld->nmsgs--;
                free(ld->msgs[ld->nmsgs].text);
            }
            add_msg(ld, 0, 0, s);
        }
    }
    for (size_t i = 0; i < ld->nmsgs; i++) {
        if (err == NULL) {
            free(ld->msgs[i].text);
        } else {
            (void)err_push(err, ld->msgs[i].text);
        }
    }
    free(ld->msgs);
    ld->msgs = NULL;
    ld->nmsgs = 0;
}

void
dm_conf_errors_fini(struct dm_conf_errors *err)
{
    if (err == NULL) {
        return;
    }
    for (size_t i = 0; i < err->n; i++) {
        free(err->msg[i]);
    }
    free(err->msg);
    err->msg = NULL;
    err->n = 0;
}

const char *
dm_conf_quote(const char *s, size_t len, char *buf, size_t size)
{
    size_t o = 0;

    buf[o++] = '"';
    for (size_t i = 0; i < len && o + 8 < size; i++) {
        unsigned char ch = (unsigned char)s[i];
        /* Cut at the first lead byte past the limit, never inside a UTF-8 sequence. */
        if (i >= DM_CONF_SHOW_MAX && (ch & 0xc0) != 0x80) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (ch == '"' || ch == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", ch);
        } else {
            buf[o++] = (char)ch;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}
