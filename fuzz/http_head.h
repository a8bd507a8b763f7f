/*
 * Shared by fuzz/http_request.c and fuzz/http_response.c: runs a dm_http_parser
 * over the input, fed in two reads split at a byte taken from the input, and
 * hands every complete head to a checker. abort() marks a broken invariant.
 */
#ifndef DM_FUZZ_HTTP_HEAD_H
#define DM_FUZZ_HTTP_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parsers/http.h"

#define FUZZ_FIELDS 32

typedef void (*fuzz_head_cb)(struct dm_http_parser *p, const char *head, size_t head_len,
                             const struct dm_http_msg *msg, unsigned flags);

static bool
fuzz_span_in(struct dm_span s, const char *lo, size_t len)
{
    if (s.len == 0) {
        return true;
    }
    return s.p >= lo && s.p <= lo + len && s.len <= (size_t)(lo + len - s.p);
}

static void
fuzz_check_msg(const struct dm_http_msg *msg, const char *head, size_t head_len)
{
    if (msg->nfields > msg->max_fields) {
        abort();
    }
    if (!fuzz_span_in(msg->method, head, head_len) || !fuzz_span_in(msg->target, head, head_len)) {
        abort();
    }
    for (unsigned i = 0; i < msg->nfields; i++) {
        if (!fuzz_span_in(msg->fields[i].name, head, head_len) ||
            !fuzz_span_in(msg->fields[i].value, head, head_len)) {
            abort();
        }
    }
}

static bool
fuzz_ends_crlfcrlf(const char *out, size_t len)
{
    return len >= 4 && memcmp(out + len - 4, "\r\n\r\n", 4) == 0;
}

/* data[0]: split point (scaled), data[1]: flags for the checker; the rest is the stream. */
static void
fuzz_http(const uint8_t *data, size_t size, bool is_request, fuzz_head_cb cb)
{
    if (size < 2) {
        return;
    }
    unsigned flags = data[1];
    size_t len = size - 2;
    size_t split = len * data[0] / 255;
    char *buf = malloc(len > 0 ? len : 1); /* exactly sized: ASan sees over-reads */
    if (buf == NULL) {
        return;
    }
    memcpy(buf, data + 2, len);

    struct dm_http_field fields[FUZZ_FIELDS];
    struct dm_http_msg msg = { .fields = fields, .max_fields = FUZZ_FIELDS };
    struct dm_http_parser p;
    dm_http_parser_init(&p, is_request);
    p.msg = &msg;
    if (!is_request) {
        dm_http_parser_expect_no_body(&p, flags & 1);
    }

    size_t pos = 0, head_start = 0, trailers = SIZE_MAX;
    for (unsigned steps = 0; pos < len && steps < 100000; steps++) {
        size_t lim = pos < split ? split : len;
        size_t consumed = SIZE_MAX;
        int ev = dm_http_parse(&p, buf + pos, lim - pos, &consumed);
        if (ev < 0) {
            break;
        }
        if (consumed > lim - pos || (ev == DM_HTTP_AGAIN && consumed != lim - pos)) {
            abort();
        }
        pos += consumed;
        if (ev == DM_HTTP_HEAD_DONE) {
            fuzz_check_msg(&msg, buf + head_start, pos - head_start);
            cb(&p, buf + head_start, pos - head_start, &msg, flags);
        } else if (ev == DM_HTTP_TRAILERS) {
            trailers = pos;
        } else if (ev == DM_HTTP_MSG_DONE) {
            if (trailers != SIZE_MAX) {
                /* The held trailer section, as the proxy checks it: a
                 * request's, or a response's (bounded by its field count). */
                const char *reason = NULL;
                int st = is_request
                             ? dm_http_check_trailers(buf + trailers, pos - trailers, &reason)
                             : dm_http_check_response_trailers(buf + trailers, pos - trailers,
                                                               FUZZ_FIELDS, &reason);
                if ((st == 0) != (reason == NULL)) {
                    abort();
                }
                trailers = SIZE_MAX;
            }
            dm_http_parser_next(&p);
            memset(&msg, 0, sizeof msg);
            msg.fields = fields;
            msg.max_fields = FUZZ_FIELDS;
            p.msg = &msg;
            head_start = pos;
        } else if (ev == DM_HTTP_UPGRADE) {
            break;
        }
    }
    (void)dm_http_parse_eof(&p);
    free(buf);
}

#endif
