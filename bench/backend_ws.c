/*
 * The WebSocket echo of dimmer-backend (RFC 6455): the handshake of GET /ws, then frames
 * read from the connection's input buffer and echoed back unmasked as they arrive, a
 * frame's payload possibly across several reads.
 */
#include "bench/backend_ws.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llhttp.h>
#include <openssl/evp.h>
#include <uv.h>

#include "bench/backend_conn.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

void
dm_backend_ws_upgrade(struct dm_backend_conn *c, const char *head, size_t hlen)
{
    struct dm_backend_span up, key;
    if (llhttp_get_method(&c->parser) != HTTP_GET || !llhttp_get_upgrade(&c->parser) ||
        !dm_backend_head_header(head, hlen, "Upgrade", &up) ||
        !dm_backend_span_caseeq(up, "websocket")) {
        dm_backend_respond_msg(c, 426, "websocket upgrade required\n", "Upgrade: websocket\r\n");
        return;
    }
    if (!dm_backend_head_header(head, hlen, "Sec-WebSocket-Key", &key) || key.len == 0 ||
        key.len > 64) {
        dm_backend_respond_msg(c, 400, "missing Sec-WebSocket-Key\n", NULL);
        return;
    }
    char buf[64 + sizeof WS_GUID];
    memcpy(buf, key.p, key.len);
    memcpy(buf + key.len, WS_GUID, sizeof WS_GUID - 1);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    if (!EVP_Digest(buf, key.len + sizeof WS_GUID - 1, md, &mdlen, EVP_sha1(), NULL)) {
        dm_backend_respond_msg(c, 500, "digest failed\n", NULL);
        return;
    }
    unsigned char accept[64];
    EVP_EncodeBlock(accept, md, (int)mdlen);
    /* The rate tier a session proxy chose (dimmer's session.tier_header by
     * default), echoed so that a test sees what the backend was told. */
    struct dm_backend_span tier = { 0 };
    bool has_tier = dm_backend_head_header(head, hlen, "X-Rate-Tier", &tier) && tier.len <= 32;
    char line[384];
    int n = snprintf(line, sizeof line,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\nX-Backend: %s\r\n"
                     "%s%.*s%s\r\n",
                     (const char *)accept, c->be->name, has_tier ? "X-Rate-Tier-Seen: " : "",
                     has_tier ? (int)tier.len : 0, has_tier ? tier.p : "", has_tier ? "\r\n" : "");
    c->r.ws_upgrade = true;
    dm_backend_send_copy(c, line, (size_t)n);
}

static void
ws_fail(struct dm_backend_conn *c, unsigned code)
{
    uint8_t frame[4] = { 0x88, 2, (uint8_t)(code >> 8), (uint8_t)code };
    if (dm_backend_send_copy(c, frame, sizeof frame) == 0) {
        dm_backend_begin_shutdown(c);
    }
}

/* Sends `hl` bytes of frame head (may be 0) and `n` payload bytes unmasked from `src`. */
static void
ws_emit(struct dm_backend_conn *c, const uint8_t *hdr, size_t hl, const uint8_t *src, size_t n)
{
    struct dm_backend_ws *ws = &c->ws;
    struct dm_backend_out *o = dm_backend_out_take(c);
    if (!o) {
        dm_backend_conn_close(c);
        return;
    }
    memcpy(o->inl, hdr, hl);
    o->inl_len = hl;
    uint8_t *dst;
    if (hl + n <= DM_OUT_INLINE) {
        dst = (uint8_t *)o->inl + hl;
        o->inl_len += n;
    } else {
        o->heap = malloc(n);
        if (!o->heap) {
            dm_backend_out_release(c->be, o);
            dm_backend_conn_close(c);
            return;
        }
        dst = (uint8_t *)o->heap;
    }
    for (size_t i = 0; i < n; i++) {
        dst[i] = src[i] ^ ws->mask[(ws->mask_off + i) & 3];
    }
    uv_buf_t b[2];
    unsigned nb = 0;
    if (o->inl_len) {
        b[nb++] = uv_buf_init(o->inl, (unsigned)o->inl_len);
    }
    if (o->heap) {
        b[nb++] = uv_buf_init(o->heap, (unsigned)n);
    }
    if (nb == 0) {
        dm_backend_out_release(c->be, o);
        return;
    }
    dm_backend_out_send(c, o, b, nb);
}

void
dm_backend_ws_parse(struct dm_backend_conn *c)
{
    struct dm_backend_ws *ws = &c->ws;
    while (c->mode == DM_MODE_WS && !c->closing && !c->shutting) {
        const uint8_t *p = (const uint8_t *)c->in + c->parse_off;
        size_t avail = c->in_len - c->parse_off;
        uint8_t out_hdr[10];
        size_t out_hl = 0;
        if (!ws->in_payload) {
            if (avail < 2) {
                return;
            }
            size_t hl = 2;
            uint64_t len = p[1] & 0x7f;
            hl += len == 126 ? 2 : len == 127 ? 8 : 0;
            bool masked = p[1] & 0x80;
            hl += masked ? 4 : 0;
            if (avail < hl) {
                return;
            }
            if (len == 126) {
                len = (uint64_t)p[2] << 8 | p[3];
            } else if (len == 127) {
                len = 0;
                for (int i = 0; i < 8; i++) {
                    len = len << 8 | p[2 + i];
                }
            }
            bool fin = p[0] & 0x80;
            uint8_t op = p[0] & 0x0f;
            bool control = op & 0x08;
            bool known = op <= 2 || (op >= 8 && op <= 10);
            /* Clients mask, use no extensions (no RSV bits) and keep control frames
             * short and whole (RFC 6455 5.1, 5.2, 5.5). */
            if (!masked || (p[0] & 0x70) || !known || (len >> 63) ||
                (control && (!fin || len > 125))) {
                ws_fail(c, 1002);
                return;
            }
            memcpy(ws->mask, p + hl - 4, 4);
            ws->mask_off = 0;
            ws->opcode = op;
            ws->remaining = len;
            ws->in_payload = true;
            ws->discard = op == 0x0a;
            c->parse_off += hl;
            avail -= hl;
            p += hl;
            if (!ws->discard) {
                uint8_t out_op = op == 0x09 ? 0x0a : op;
                out_hdr[0] = (uint8_t)((fin ? 0x80 : 0) | out_op);
                if (len < 126) {
                    out_hdr[1] = (uint8_t)len;
                    out_hl = 2;
                } else if (len <= 0xffff) {
                    out_hdr[1] = 126;
                    out_hdr[2] = (uint8_t)(len >> 8);
                    out_hdr[3] = (uint8_t)len;
                    out_hl = 4;
                } else {
                    out_hdr[1] = 127;
                    for (int i = 0; i < 8; i++) {
                        out_hdr[2 + i] = (uint8_t)(len >> (56 - 8 * i));
                    }
                    out_hl = 10;
                }
            }
        }
        size_t n = ws->remaining < avail ? (size_t)ws->remaining : avail;
        if (!ws->discard && (out_hl > 0 || n > 0)) {
            ws_emit(c, out_hdr, out_hl, p, n);
        }
        ws->mask_off = (unsigned)((ws->mask_off + n) & 3);
        ws->remaining -= n;
        c->parse_off += n;
        if (ws->remaining > 0) {
            return; /* need more input */
        }
        ws->in_payload = false;
        if (ws->opcode == 0x08) {
            dm_backend_begin_shutdown(c);
            return;
        }
    }
}
