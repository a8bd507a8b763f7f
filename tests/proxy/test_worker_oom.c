/*
 * Out-of-memory tests of dm_workers_start() (proxy/worker.c): the n-th
 * allocation fails for n = 1, 2, ... until the start succeeds. Each failure
 * must come back as UV_ENOMEM with nothing left allocated and no descriptor
 * left open (loops, listeners).
 */
#include "dm_test.h"

#include "dm_oom.h"

#include <dirent.h>
#include <unistd.h>
#include <uv.h>

#include "conf/conf.h"
#include "proxy/internal.h"
#include "proxy/log.h"
#include "proxy/worker.h"

/* Open file descriptors of this process. */
static int
open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d) != NULL) {
        n++;
    }
    closedir(d);
    return n;
}

static void
test_workers_start_survives_every_failed_allocation(void **state)
{
    struct dm_conf_errors err = { 0 };
    const char *why = NULL;
    (void)state;

    dm_log_set_level(DM_LOG_ERROR);
    /* The first loop of a process opens libuv's own signal lock pipe, for
     * good: open it before counting descriptors. */
    uv_loop_t first;
    assert_int_equal(uv_loop_init(&first), 0);
    assert_int_equal(uv_loop_close(&first), 0);
    struct dm_conf *conf = dm_conf_from_args("127.0.0.1:0", "127.0.0.1:9", &err);
    assert_non_null(conf);
    struct dm_runtime *rt = dm_runtime_create(conf, 2, NULL, NULL, NULL, &why);
    assert_non_null(rt);
    int log_fd = dup(2); /* an access log, so that its buffers are allocated too */
    assert_true(log_fd >= 0);

    struct dm_worker *ws = NULL;
    unsigned long n;
    for (n = 1; n < 100 && ws == NULL; n++) {
        struct sockaddr_storage bound[1];
        int r = 0;
        long live = oom_live;
        int fds = open_fds();
        oom_arm(n);
        ws = dm_workers_start(2, rt, log_fd, 0, bound, &r);
        oom_disarm();
        if (ws == NULL) {
            assert_true(oom_failed);
            assert_int_equal(r, UV_ENOMEM);
            assert_int_equal(oom_live, live);  /* everything allocated is freed */
            assert_int_equal(open_fds(), fds); /* loops and listeners are closed */
        }
    }
    assert_non_null(ws);
    assert_true(n > 2); /* it did fail before it succeeded */
    dm_workers_stop(ws, 2, 0);
    close(log_fd);
    dm_runtime_unref(rt);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workers_start_survives_every_failed_allocation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
