/* The WebSocket echo of dimmer-backend (RFC 6455), behind GET /ws; loop thread only. */
#ifndef DM_BENCH_BACKEND_WS_H
#define DM_BENCH_BACKEND_WS_H

#include <stddef.h>

struct dm_backend_conn;

/*
 * Answers the upgrade request whose head is the hlen bytes at head: 101 with the
 * Sec-WebSocket-Accept of its key, after which the connection switches to DM_MODE_WS
 * when the request ends; 426 or 400 when it is no WebSocket handshake.
 */
void dm_backend_ws_upgrade(struct dm_backend_conn *c, const char *head, size_t hlen);

/*
 * Reads the frames buffered in c->in and echoes them unmasked: a ping gets a pong, a
 * pong is dropped, a close gets a close and the connection shuts down; a protocol
 * error closes with 1002.
 */
void dm_backend_ws_parse(struct dm_backend_conn *c);

#endif
