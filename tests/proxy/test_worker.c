/*
 * Tests for the listeners of proxy/worker.c: addresses as text, a listening
 * socket on port 0, and workers that share the one port the first of them got
 * (SO_REUSEPORT), checked on every worker's own socket. Nothing here waits
 * without a bound: sockets have receive timeouts.
 */
#include "dm_test.h"

#include "proxy/worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "conf/conf.h"
#include "proxy/internal.h"
#include "proxy/log.h"

static uint16_t
port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6) {
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    }
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

static uint16_t
fd_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
    return port_of(&ss);
}

static void
test_addr_text(void **state)
{
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(8080) };
    struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_port = htons(443) };
    struct sockaddr sa = { .sa_family = AF_UNIX };
    char buf[DM_ADDR_TEXT];
    (void)state;

    assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr), 1);
    assert_string_equal(dm_addr_text((struct sockaddr *)&sin, buf, sizeof(buf)), "127.0.0.1:8080");
    sin6.sin6_addr = in6addr_loopback;
    assert_string_equal(dm_addr_text((struct sockaddr *)&sin6, buf, sizeof(buf)), "[::1]:443");
    sin.sin_addr.s_addr = htonl(INADDR_ANY);
    sin.sin_port = 0;
    assert_string_equal(dm_addr_text((struct sockaddr *)&sin, buf, sizeof(buf)), "0.0.0.0:0");
    assert_string_equal(dm_addr_text(&sa, buf, sizeof(buf)), "?");
}

static void
test_listen_socket_reports_the_port_it_got(void **state)
{
    struct dm_conf_addr a;
    struct sockaddr_storage bound;
    (void)state;

    assert_int_equal(dm_conf_parse_addr("127.0.0.1:1", &a), 0);
    ((struct sockaddr_in *)&a.sa)->sin_port = 0;
    int fd = dm_listen_socket((struct sockaddr *)&a.sa, 16, &bound);
    assert_true(fd >= 0);
    assert_int_equal(bound.ss_family, AF_INET);
    assert_int_not_equal(port_of(&bound), 0);
    assert_int_equal(port_of(&bound), fd_port(fd));
    assert_int_equal(((struct sockaddr_in *)&bound)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));

    /* A second socket on that port is what SO_REUSEPORT allows: the other workers. */
    int fd2 = dm_listen_socket((struct sockaddr *)&bound, 16, NULL);
    assert_true(fd2 >= 0);
    assert_int_equal(fd_port(fd2), port_of(&bound));

    /* But the probe before an address's first socket finds something
     * listening there: a second dimmer would share the port silently, each
     * getting some of the connections. */
    assert_int_equal(dm_listen_probe((struct sockaddr *)&bound), -EADDRINUSE);
    close(fd2);
    close(fd);
    /* Once nothing listens there, the port is free again. */
    assert_int_equal(dm_listen_probe((struct sockaddr *)&bound), 0);
    struct sockaddr_storage again;
    fd = dm_listen_socket((struct sockaddr *)&bound, 16, &again);
    assert_true(fd >= 0);
    assert_int_equal(port_of(&again), port_of(&bound));
    close(fd);
    free(a.text);
}

/* Sends a request to port and reads the start of the answer. */
static void
expect_answer(uint16_t port, const char *want)
{
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
    struct timeval tv = { .tv_sec = 10 };
    const char req[] = "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    char buf[64] = { 0 };
    size_t got = 0;

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)(sizeof(req) - 1));
    while (got < strlen(want)) {
        ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        assert_true(n > 0);
        got += (size_t)n;
    }
    close(fd);
    assert_memory_equal(buf, want, strlen(want));
}

static void
test_workers_share_the_port_of_a_port_0_listener(void **state)
{
    struct dm_conf_errors err = { 0 };
    struct sockaddr_in sin = { .sin_family = AF_INET };
    socklen_t len = sizeof(sin);
    const char *why = NULL;
    struct sockaddr_storage bound[1];
    char backend[DM_ADDR_TEXT];
    int r = 0;
    (void)state;

    /* The server: a bound socket that does not listen refuses connections, so
     * every request gets a 502 from the proxy. */
    int refuse = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(refuse, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(refuse, (struct sockaddr *)&sin, &len), 0);
    dm_addr_text((struct sockaddr *)&sin, backend, sizeof(backend));
    struct dm_conf *conf = dm_conf_from_args("127.0.0.1:0", backend, &err);
    assert_non_null(conf);
    conf->pools[0].passive.max_fails = 0; /* 502 every time, never "down" and 503 */
    dm_log_set_level(DM_LOG_ERROR);
    struct dm_runtime *rt = dm_runtime_create(conf, 3, NULL, NULL, NULL, &why);
    assert_non_null(rt);
    dm_runtime_publish(rt);
    struct dm_worker *ws = dm_workers_start(3, rt, -1, 0, bound, &r);
    assert_non_null(ws);
    uint16_t port = port_of(&bound[0]);
    assert_int_not_equal(port, 0);
    for (unsigned i = 0; i < 3; i++) {
        uv_os_fd_t fd;
        assert_int_equal(ws[i].nlisteners, 1);
        assert_int_equal(uv_fileno((uv_handle_t *)&ws[i].listeners[0], &fd), 0);
        assert_int_equal(fd_port(fd), port);
    }
    for (int i = 0; i < 6; i++) {
        expect_answer(port, "HTTP/1.1 502 ");
    }
    dm_workers_stop(ws, 3, 1000);
    dm_runtime_publish(NULL);
    dm_runtime_unref(rt);
    close(refuse);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addr_text),
        cmocka_unit_test(test_listen_socket_reports_the_port_it_got),
        cmocka_unit_test(test_workers_share_the_port_of_a_port_0_listener),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
