/*
 * dimmer-agent's control listener: what dimmer's http actuator posts to
 * (POST /sleep, POST /wake), served on a TCP address of the agent's own and
 * acted on by running the operator's commands with /bin/sh -c.
 *
 *   POST /sleep  runs the sleep command and answers 202 at once: a machine
 *                that suspends cannot answer after.
 *   POST /wake   runs the wake command and answers when it ends: 200 on
 *                exit status 0, 502 otherwise (a service started again, say).
 *   GET /status  the commands run so far and the one running, as JSON.
 *
 * One command at a time (409 while one runs), killed past its timeout; a
 * bearer token when one is configured (compared in constant time); one
 * request a connection, a whole head within DM_CONTROL_HEAD_MAX bytes and
 * DM_CONTROL_READ_MS, at most DM_CONTROL_CONNS connections at once (a new
 * one past them closes, of the peer address with the most connections still
 * reading their heads, the oldest one).
 */
#ifndef DM_AGENT_CONTROL_H
#define DM_AGENT_CONTROL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#define DM_CONTROL_HEAD_MAX  4096
#define DM_CONTROL_READ_MS   5000
#define DM_CONTROL_CONNS     16
#define DM_CONTROL_TOKEN_MAX 256

struct dm_control_conf {
    struct sockaddr_storage addr;
    const char *sleep_command, *wake_command; /* NULL: 501 */
    char token[DM_CONTROL_TOKEN_MAX];         /* "": none asked */
    size_t token_len;
    uint64_t command_timeout_ms;
};

struct dm_control;

/*
 * Listens on conf->addr (conf is copied); the bound address goes to *bound.
 * NULL with *err set (a libuv error) when it cannot.
 */
struct dm_control *dm_control_start(uv_loop_t *loop, const struct dm_control_conf *conf,
                                    struct sockaddr_storage *bound, int *err);

/* Closes the listener and its connections; a running command is left to end. */
void dm_control_stop(struct dm_control *c);

#endif
