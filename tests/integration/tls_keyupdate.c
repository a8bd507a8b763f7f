/*
 * A TLS 1.3 client that asks for key updates and reads nothing, for
 * test_tls.py: each KeyUpdate(update_requested) makes the server answer
 * with one of its own, which this client never takes.
 *
 *   tls_keyupdate PORT COUNT
 *
 * Sends at most COUNT of them; a send that the server does not take within
 * 3 seconds (SO_SNDTIMEO) ends it. Prints "sent N blocked" (it ended so) or
 * "sent N all", then holds the connection until its stdin closes; exit
 * status 0, or 1 when it could not connect or handshake.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int
main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: tls_keyupdate PORT COUNT\n");
        return 1;
    }
    int port = atoi(argv[1]);
    long count = atol(argv[2]);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    struct timeval tv = { .tv_sec = 3 };
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) != 0) {
        perror("socket");
        return 1;
    }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        perror("connect");
        return 1;
    }
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL *s = SSL_new(ctx);
    SSL_set_fd(s, fd);
    if (SSL_connect(s) != 1) {
        ERR_print_errors_fp(stderr);
        return 1;
    }
    /* Only now: the handshake waited for the server as long as it took. */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
        perror("setsockopt");
        return 1;
    }
    long sent = 0;
    int blocked = 0;
    while (sent < count) {
        if (SSL_key_update(s, SSL_KEY_UPDATE_REQUESTED) != 1 || SSL_do_handshake(s) != 1) {
            blocked = 1;
            break;
        }
        sent++;
    }
    printf("sent %ld %s\n", sent, blocked ? "blocked" : "all");
    fflush(stdout);
    /* Held open until the test closes it: dimmer ends it, or not. */
    char c;
    while (read(0, &c, 1) > 0) {
    }
    SSL_free(s);
    SSL_CTX_free(ctx);
    close(fd);
    return 0;
}
