/*
 * Tests for proxy/health.c: the checker runs on a real loop against a small
 * HTTP backend on 127.0.0.1 whose answer the test chooses (200, 503, silence,
 * garbage, a status line in two pieces). Every wait is bounded by a guard
 * timer, and teardown stops the checker, closes every handle and checks that
 * uv_loop_close() returns 0.
 */
#include "dm_test.h"

#include "proxy/health.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "balancers/servers.h"
#include "conf/conf.h"

/* A bound on every wait; the checks below take well under a second. */
#define WAIT_MS 5000

enum backend_mode {
    BACKEND_200,     /* "200 OK" and part of a body, then silence: the checker must not wait */
    BACKEND_503,     /* "503 Service Unavailable" */
    BACKEND_SILENT,  /* reads the request and never answers */
    BACKEND_GARBAGE, /* a line that is not HTTP */
    BACKEND_SPLIT,   /* "200 OK" with the status line in two writes 5 ms apart */
};

struct backend;

struct client {
    struct backend *b;
    struct client *next;
    struct client **prev;
    uv_tcp_t tcp;
    uv_timer_t timer; /* the second half of a split answer */
    uv_write_t write[2];
    char buf[1024];
    size_t len;
    int open; /* handles not yet closed */
    bool answered;
    bool closing;
};

struct backend {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int port;
    enum backend_mode mode;
    char expect[256]; /* the exact request the checker should send */
    struct client *clients;
    unsigned nopen;     /* connections open now */
    unsigned max_open;  /* most connections open at once */
    unsigned accepted;  /* connections accepted */
    unsigned requests;  /* whole requests read */
    unsigned n200;      /* 200 answers sent (BACKEND_200 and BACKEND_SPLIT) */
    unsigned n503;      /* 503 answers sent */
    unsigned eof;       /* connections the checker closed */
    bool bad_request;   /* a request was not exactly `expect` */
    bool listener_open; /* listener not yet closed */
};

struct fixture {
    uv_loop_t loop;
    struct backend b;
    struct dm_conf_server cs[2];
    struct dm_conf_pool pool;
    struct dm_conf conf;
    struct dm_servers *sv;
    struct dm_health *h;
    uv_timer_t guard;
    uv_check_t check;
    bool (*until)(struct fixture *f);
    bool timed_out;
    unsigned done_calls;
    bool started; /* dm_health_start succeeded */
    /* What the predicates saw. */
    bool was_down;  /* server 0 was down at some point */
    bool was_down1; /* server 1 was down at some point */
    unsigned n503_at_down;
    unsigned n200_at_up;
    uint64_t down_ms; /* uv_now() when server 0 was first seen down */
};

static const char resp_200[] = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\npartial body";
static const char resp_503[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
static const char resp_garbage[] = "hello there\r\n\r\n";
static const char resp_split1[] = "HTTP/1.1 2";
static const char resp_split2[] = "00 OK\r\nContent-Length: 0\r\n\r\n";

/* ---- The backend. ---- */

static void
client_handle_close_cb(uv_handle_t *handle)
{
    struct client *cl = handle->data;
    if (--cl->open == 0) {
        free(cl);
    }
}

static void
client_close(struct client *cl)
{
    if (cl->closing) {
        return;
    }
    cl->closing = true;
    *cl->prev = cl->next;
    if (cl->next != NULL) {
        cl->next->prev = cl->prev;
    }
    cl->b->nopen--;
    uv_close((uv_handle_t *)&cl->tcp, client_handle_close_cb);
    uv_close((uv_handle_t *)&cl->timer, client_handle_close_cb);
}

static void
client_write_cb(uv_write_t *req, int status)
{
    (void)req;
    (void)status; /* the checker may close first; nothing to do either way */
}

static void
client_send(struct client *cl, int i, const char *p, size_t len)
{
    uv_buf_t buf = uv_buf_init((char *)p, (unsigned)len);
    if (uv_write(&cl->write[i], (uv_stream_t *)&cl->tcp, &buf, 1, client_write_cb) < 0) {
        client_close(cl);
    }
}

static void
client_split_cb(uv_timer_t *t)
{
    struct client *cl = t->data;
    client_send(cl, 1, resp_split2, sizeof(resp_split2) - 1);
}

static void
client_answer(struct client *cl)
{
    struct backend *b = cl->b;
    cl->answered = true;
    b->requests++;
    if (cl->len != strlen(b->expect) || memcmp(cl->buf, b->expect, cl->len) != 0) {
        b->bad_request = true;
    }
    switch (b->mode) {
    case BACKEND_200:
        b->n200++;
        client_send(cl, 0, resp_200, sizeof(resp_200) - 1);
        break;
    case BACKEND_503:
        b->n503++;
        client_send(cl, 0, resp_503, sizeof(resp_503) - 1);
        break;
    case BACKEND_SILENT:
        break;
    case BACKEND_GARBAGE:
        client_send(cl, 0, resp_garbage, sizeof(resp_garbage) - 1);
        break;
    case BACKEND_SPLIT:
        b->n200++;
        client_send(cl, 0, resp_split1, sizeof(resp_split1) - 1);
        uv_timer_start(&cl->timer, client_split_cb, 5, 0);
        break;
    }
}

static void
client_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct client *cl = handle->data;
    (void)suggested;
    if (cl->len == sizeof(cl->buf)) {
        cl->len = 0; /* only a broken checker sends this much; bad_request is already set */
    }
    *buf = uv_buf_init(cl->buf + cl->len, (unsigned)(sizeof(cl->buf) - cl->len));
}

static void
client_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct client *cl = stream->data;
    (void)buf;
    if (nread < 0) {
        if (nread == UV_EOF) {
            cl->b->eof++;
        }
        client_close(cl);
        return;
    }
    if (cl->answered) {
        cl->b->bad_request = true; /* nothing may follow the request */
        return;
    }
    cl->len += (size_t)nread;
    if (cl->len >= 4 && memcmp(cl->buf + cl->len - 4, "\r\n\r\n", 4) == 0) {
        client_answer(cl);
    } else if (cl->len == sizeof(cl->buf)) {
        cl->b->bad_request = true;
    }
}

static void
backend_connection_cb(uv_stream_t *server, int status)
{
    struct backend *b = server->data;
    if (status < 0) {
        return;
    }
    struct client *cl = calloc(1, sizeof(*cl));
    if (cl == NULL) {
        return;
    }
    cl->b = b;
    uv_tcp_init(b->loop, &cl->tcp);
    uv_timer_init(b->loop, &cl->timer);
    cl->tcp.data = cl;
    cl->timer.data = cl;
    cl->open = 2;
    cl->next = b->clients;
    cl->prev = &b->clients;
    if (b->clients != NULL) {
        b->clients->prev = &cl->next;
    }
    b->clients = cl;
    b->accepted++;
    if (++b->nopen > b->max_open) {
        b->max_open = b->nopen;
    }
    if (uv_accept(server, (uv_stream_t *)&cl->tcp) < 0 ||
        uv_read_start((uv_stream_t *)&cl->tcp, client_alloc_cb, client_read_cb) < 0) {
        client_close(cl);
    }
}

static int
tcp_port(uv_tcp_t *tcp)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    if (uv_tcp_getsockname(tcp, (struct sockaddr *)&ss, &len) < 0) {
        return -1;
    }
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void
backend_listener_close_cb(uv_handle_t *handle)
{
    struct backend *b = handle->data;
    b->listener_open = false;
}

static int
backend_start(struct backend *b, uv_loop_t *loop)
{
    struct sockaddr_in sin;
    memset(b, 0, sizeof(*b));
    b->loop = loop;
    uv_ip4_addr("127.0.0.1", 0, &sin);
    uv_tcp_init(loop, &b->listener);
    b->listener.data = b;
    b->listener_open = true;
    int rc = uv_tcp_bind(&b->listener, (const struct sockaddr *)&sin, 0);
    if (rc == 0) {
        rc = uv_listen((uv_stream_t *)&b->listener, 16, backend_connection_cb);
    }
    b->port = tcp_port(&b->listener);
    snprintf(b->expect, sizeof(b->expect),
             "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n"
             "User-Agent: dimmer-health\r\n\r\n",
             b->port);
    return rc < 0 ? rc : (b->port > 0 ? 0 : -1);
}

static void
backend_close(struct backend *b)
{
    while (b->clients != NULL) {
        client_close(b->clients);
    }
    if (b->listener_open && !uv_is_closing((uv_handle_t *)&b->listener)) {
        uv_close((uv_handle_t *)&b->listener, backend_listener_close_cb);
    }
}

/* ---- The fixture. ---- */

static void
fixture_guard_cb(uv_timer_t *t)
{
    struct fixture *f = t->data;
    f->timed_out = true;
    uv_stop(&f->loop);
}

static void
fixture_check_cb(uv_check_t *c)
{
    struct fixture *f = c->data;
    if (f->until != NULL && f->until(f)) {
        uv_stop(&f->loop);
    }
}

/* Runs the loop until until(f) holds; false when WAIT_MS passed first. */
static bool
run_until(struct fixture *f, bool (*until)(struct fixture *f))
{
    f->until = until;
    f->timed_out = false;
    if (until(f)) {
        return true;
    }
    uv_timer_start(&f->guard, fixture_guard_cb, WAIT_MS, 0);
    uv_check_start(&f->check, fixture_check_cb);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_check_stop(&f->check);
    uv_timer_stop(&f->guard);
    f->until = NULL;
    return !f->timed_out && until(f);
}

static void
fixture_server_at(struct fixture *f, size_t i, int port)
{
    struct sockaddr_in sin;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%d", port);
    free(f->cs[i].addr.text);
    f->cs[i].addr.text = strdup(text);
    uv_ip4_addr("127.0.0.1", port, &sin);
    memset(&f->cs[i].addr.sa, 0, sizeof(f->cs[i].addr.sa));
    memcpy(&f->cs[i].addr.sa, &sin, sizeof(sin));
    f->cs[i].addr.salen = sizeof(sin);
}

static int
setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (f == NULL || uv_loop_init(&f->loop) != 0) {
        free(f);
        return -1;
    }
    *state = f;
    uv_timer_init(&f->loop, &f->guard);
    uv_check_init(&f->loop, &f->check);
    f->guard.data = f;
    f->check.data = f;
    if (backend_start(&f->b, &f->loop) != 0) {
        return -1;
    }
    f->cs[0].name = "b1";
    f->cs[1].name = "b2";
    fixture_server_at(f, 0, f->b.port);
    fixture_server_at(f, 1, f->b.port);
    f->pool.name = "web";
    f->pool.servers = f->cs;
    f->pool.nservers = 1;
    f->pool.health = (struct dm_conf_health){
        .enabled = true,
        .path = "/healthz",
        .interval_ms = 20,
        .timeout_ms = 100,
        .rise = 2,
        .fall = 2,
    };
    f->conf.pools = &f->pool;
    f->conf.npools = 1;
    return 0;
}

static void
fixture_start(struct fixture *f)
{
    f->sv = dm_servers_create(f->pool.nservers);
    assert_non_null(f->sv);
    f->h = dm_health_start(&f->loop, &f->conf, &f->sv);
    assert_non_null(f->h);
    f->started = true;
}

static void
fixture_done_cb(void *arg)
{
    struct fixture *f = arg;
    f->done_calls++;
    /* done() runs in the closing phase, after this iteration's check handles. */
    if (f->until != NULL) {
        uv_stop(&f->loop);
    }
}

static void
fixture_walk_close_cb(uv_handle_t *handle, void *arg)
{
    (void)arg;
    if (!uv_is_closing(handle)) {
        uv_close(handle, NULL);
    }
}

static int
teardown(void **state)
{
    struct fixture *f = *state;
    bool started = f->started;
    if (f->h != NULL) {
        dm_health_stop(f->h, fixture_done_cb, f);
        f->h = NULL;
    }
    backend_close(&f->b);
    uv_close((uv_handle_t *)&f->check, NULL);
    /* The guard is unref'd: it fires only if something else keeps the loop alive. */
    f->timed_out = false;
    uv_timer_start(&f->guard, fixture_guard_cb, WAIT_MS, 0);
    uv_unref((uv_handle_t *)&f->guard);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    bool hung = f->timed_out;
    if (hung) {
        /* Leave no handle behind so the loop can still be closed and the test fails cleanly. */
        uv_walk(&f->loop, fixture_walk_close_cb, NULL);
    } else {
        uv_close((uv_handle_t *)&f->guard, NULL);
    }
    uv_run(&f->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&f->loop);
    unsigned done_calls = f->done_calls;
    dm_servers_destroy(f->sv);
    free(f->cs[0].addr.text);
    free(f->cs[1].addr.text);
    free(f);
    assert_false(hung);
    assert_int_equal(rc, 0);
    if (started) {
        assert_int_equal(done_calls, 1);
    }
    return 0;
}

static bool
is_down(struct fixture *f, size_t i)
{
    return atomic_load(&f->sv->s[i].host->down);
}

/* ---- Predicates: each also records what it saw. ---- */

static bool
until_ten_200(struct fixture *f)
{
    f->was_down = f->was_down || is_down(f, 0);
    return f->b.n200 >= 10 && f->b.eof >= 9;
}

static bool
until_down(struct fixture *f)
{
    if (is_down(f, 0) && !f->was_down) {
        f->was_down = true;
        f->n503_at_down = f->b.n503;
        f->down_ms = uv_now(&f->loop);
    }
    return f->was_down;
}

static bool
until_up(struct fixture *f)
{
    if (!is_down(f, 0)) {
        f->n200_at_up = f->b.n200;
        return true;
    }
    return false;
}

static bool
until_three_200(struct fixture *f)
{
    f->was_down = f->was_down || is_down(f, 0);
    return f->b.n200 >= 3;
}

static bool
until_second_down_and_four_200(struct fixture *f)
{
    f->was_down = f->was_down || is_down(f, 0);
    f->was_down1 = f->was_down1 || is_down(f, 1);
    return f->was_down1 && f->b.n200 >= 4;
}

static bool
until_accepted(struct fixture *f)
{
    return f->b.accepted >= 1 && f->b.requests >= 1;
}

static bool
until_done(struct fixture *f)
{
    return f->done_calls > 0;
}

/* ---- Tests. ---- */

static void
test_healthy_server_stays_up_and_checks_do_not_overlap(void **state)
{
    struct fixture *f = *state;
    f->b.mode = BACKEND_200;
    fixture_start(f);
    assert_true(run_until(f, until_ten_200));
    assert_false(f->was_down);
    assert_false(f->b.bad_request);
    /* One connection at a time, each closed by the checker without reading the body. */
    assert_int_equal(f->b.max_open, 1);
    assert_int_equal(f->b.accepted, f->b.requests);
}

static void
test_503_marks_down_after_fall_failures_not_before(void **state)
{
    struct fixture *f = *state;
    f->pool.health.fall = 3;
    f->b.mode = BACKEND_200;
    fixture_start(f);
    assert_true(run_until(f, until_three_200));
    assert_false(f->was_down);
    f->b.mode = BACKEND_503;
    assert_true(run_until(f, until_down));
    /* The next check starts an interval later, so exactly `fall` 503s were answered. */
    assert_int_equal(f->n503_at_down, 3);
    assert_false(f->b.bad_request);
}

static void
test_down_server_comes_back_up_after_rise_successes(void **state)
{
    struct fixture *f = *state;
    f->pool.health.rise = 3;
    f->pool.health.fall = 2;
    f->b.mode = BACKEND_503;
    fixture_start(f);
    assert_true(run_until(f, until_down));
    assert_int_equal(f->n503_at_down, 2);
    f->b.mode = BACKEND_200;
    assert_true(run_until(f, until_up));
    assert_int_equal(f->n200_at_up, 3);
    assert_false(f->b.bad_request);
}

static void
test_refused_connection_marks_down(void **state)
{
    struct fixture *f = *state;
    /* A port that was just free: bind one, then close it. */
    uv_tcp_t probe;
    struct sockaddr_in sin;
    uv_ip4_addr("127.0.0.1", 0, &sin);
    uv_tcp_init(&f->loop, &probe);
    assert_int_equal(uv_tcp_bind(&probe, (const struct sockaddr *)&sin, 0), 0);
    int port = tcp_port(&probe);
    assert_true(port > 0);
    uv_close((uv_handle_t *)&probe, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    fixture_server_at(f, 0, port);
    fixture_start(f);
    assert_true(run_until(f, until_down));
    assert_int_equal(f->b.accepted, 0);
}

static void
test_only_the_failing_server_goes_down(void **state)
{
    struct fixture *f = *state;
    f->pool.nservers = 2;
    /* The listener's own port stays healthy; server 1 gets a port nobody listens on. */
    uv_tcp_t probe;
    struct sockaddr_in sin;
    uv_ip4_addr("127.0.0.1", 0, &sin);
    uv_tcp_init(&f->loop, &probe);
    assert_int_equal(uv_tcp_bind(&probe, (const struct sockaddr *)&sin, 0), 0);
    int port = tcp_port(&probe);
    uv_close((uv_handle_t *)&probe, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    fixture_server_at(f, 1, port);
    f->b.mode = BACKEND_200;
    fixture_start(f);
    assert_true(run_until(f, until_second_down_and_four_200));
    assert_false(f->was_down);
}

static void
test_silent_server_marks_down_by_timeout(void **state)
{
    struct fixture *f = *state;
    f->b.mode = BACKEND_SILENT;
    uv_update_time(&f->loop);
    uint64_t t0 = uv_now(&f->loop);
    fixture_start(f);
    assert_true(run_until(f, until_down));
    /* Each of the `fall` checks waited its whole timeout. */
    assert_true(f->down_ms - t0 >= 2 * f->pool.health.timeout_ms);
    assert_true(f->b.requests >= 2);
    assert_false(f->b.bad_request);
}

static void
test_garbage_answer_marks_down(void **state)
{
    struct fixture *f = *state;
    f->b.mode = BACKEND_GARBAGE;
    fixture_start(f);
    assert_true(run_until(f, until_down));
    assert_true(f->b.requests >= 2);
}

static void
test_status_line_in_two_pieces_is_a_success(void **state)
{
    struct fixture *f = *state;
    f->b.mode = BACKEND_SPLIT;
    fixture_start(f);
    assert_true(run_until(f, until_three_200));
    assert_false(f->was_down);
}

static void
test_stop_with_check_in_flight_closes_everything(void **state)
{
    struct fixture *f = *state;
    f->b.mode = BACKEND_SILENT;
    fixture_start(f);
    assert_true(run_until(f, until_accepted));
    dm_health_stop(f->h, fixture_done_cb, f);
    f->h = NULL;
    assert_int_equal(f->done_calls, 0); /* from the loop, not from inside stop */
    assert_true(run_until(f, until_done));
    assert_int_equal(f->done_calls, 1);
    /* Teardown checks that uv_loop_close() then succeeds. */
}

static void
test_stop_without_checks_calls_done_from_the_loop(void **state)
{
    struct fixture *f = *state;
    f->pool.health.enabled = false;
    fixture_start(f);
    dm_health_stop(f->h, fixture_done_cb, f);
    f->h = NULL;
    assert_int_equal(f->done_calls, 0);
    assert_true(run_until(f, until_done));
    assert_int_equal(f->b.accepted, 0);
}

static void
test_stop_null_is_a_no_op(void **state)
{
    (void)state;
    dm_health_stop(NULL, fixture_done_cb, NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_healthy_server_stays_up_and_checks_do_not_overlap,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_503_marks_down_after_fall_failures_not_before, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_down_server_comes_back_up_after_rise_successes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_refused_connection_marks_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_only_the_failing_server_goes_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_server_marks_down_by_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_answer_marks_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_line_in_two_pieces_is_a_success, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stop_with_check_in_flight_closes_everything, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stop_without_checks_calls_done_from_the_loop, setup,
                                        teardown),
        cmocka_unit_test(test_stop_null_is_a_no_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
