/*
 * The error log: one line per event, "2026-11-30T04:11:24Z dimmer[worker]: level: text",
 * written with a single write(2) so lines from several threads never interleave.
 * dm_log_open() chooses the file (NULL or "-" = stderr); any thread may log.
 */
#ifndef DM_PROXY_LOG_H
#define DM_PROXY_LOG_H

enum dm_log_level {
    DM_LOG_ERROR,
    DM_LOG_WARN,
    DM_LOG_INFO,
    DM_LOG_DEBUG,
};

/* Opens (appends to) path for the error log; returns 0 or -errno. Control thread. */
int dm_log_open(const char *path);

/*
 * Opens the error log's file again under its path, as logrotate asks
 * (SIGUSR1): the new file takes the old one's descriptor. 0 or -errno (the
 * old file is kept). Nothing to do for stderr. Control thread.
 */
int dm_log_reopen(void);

/* Makes fd, open for appending, the file at path now (created if need be); 0 or -errno. */
int dm_reopen_fd(int fd, const char *path);

/* Messages above this level are dropped (default DM_LOG_INFO). */
void dm_log_set_level(enum dm_log_level level);

void dm_log(enum dm_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define dm_log_error(...) dm_log(DM_LOG_ERROR, __VA_ARGS__)
#define dm_log_warn(...)  dm_log(DM_LOG_WARN, __VA_ARGS__)
#define dm_log_info(...)  dm_log(DM_LOG_INFO, __VA_ARGS__)
#define dm_log_debug(...) dm_log(DM_LOG_DEBUG, __VA_ARGS__)

#endif
