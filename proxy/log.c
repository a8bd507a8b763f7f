#include "proxy/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_fd = 2;
static atomic_int log_level = DM_LOG_INFO;
static char *log_path; /* the file dm_log_open() opened, NULL: stderr */

int
dm_reopen_fd(int fd, const char *path)
{
    int nfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (nfd < 0) {
        return -errno;
    }
    /* The descriptor keeps its number: a thread writing meanwhile writes to
     * the old file or the new one, never to a closed or reused descriptor. */
    int r = dup3(nfd, fd, O_CLOEXEC) < 0 ? -errno : 0;
    close(nfd);
    return r;
}

int
dm_log_open(const char *path)
{
    if (path == NULL || strcmp(path, "-") == 0) {
        atomic_store(&log_fd, 2);
        free(log_path);
        log_path = NULL;
        return 0;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        return -errno;
    }
    char *copy = strdup(path);
    if (copy == NULL) {
        close(fd);
        return -ENOMEM;
    }
    free(log_path);
    log_path = copy;
    int old = atomic_exchange(&log_fd, fd);
    if (old > 2) {
        close(old);
    }
    return 0;
}

int
dm_log_reopen(void)
{
    int fd = atomic_load(&log_fd);
    return log_path != NULL && fd > 2 ? dm_reopen_fd(fd, log_path) : 0;
}

void
dm_log_set_level(enum dm_log_level level)
{
    atomic_store(&log_level, (int)level);
}

void
dm_log(enum dm_log_level level, const char *fmt, ...)
{
    static const char *const names[] = { "error", "warn", "info", "debug" };
    if ((int)level > atomic_load_explicit(&log_level, memory_order_relaxed)) {
        return;
    }
    char line[1024];
    struct tm tm;
    time_t t = time(NULL);
    gmtime_r(&t, &tm);
    size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%SZ", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, " dimmer[%d]: %s: ", (int)getpid(),
                          names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    va_end(ap);
    if (m < 0) {
        m = 0;
    }
    size_t from = n;
    n += (size_t)m;
    if (n > sizeof(line) - 2) {
        n = sizeof(line) - 2;
    }
    /* One record, one line: a name or value with a control byte (a newline in
     * a pool's name) cannot start a line of its own (as the access log's "_"). */
    for (size_t i = from; i < n; i++) {
        unsigned char ch = (unsigned char)line[i];
        line[i] = ch < 0x20 || ch == 0x7f ? '_' : line[i];
    }
    line[n++] = '\n';
    int fd = atomic_load_explicit(&log_fd, memory_order_relaxed);
    while (write(fd, line, n) < 0 && errno == EINTR) {
    }
}
