/*
 * Reading a load pattern from a file: the one part of the pattern code that
 * does I/O, so it lives apart from the pure dm_load library (in
 * dm_load_file; tests/purity.cmake refuses file I/O in dm_load).
 */
#ifndef DM_BENCH_LOAD_PATTERN_FILE_H
#define DM_BENCH_LOAD_PATTERN_FILE_H

#include <stddef.h>

struct dm_load_pattern;

#define DM_LOAD_PATTERN_FILE_MAX (16u << 20) /* bytes: a longer file is refused */

/*
 * Reads the CSV file at path and parses it as dm_load_pattern_parse() does
 * (bench/load/pattern.h), path naming it in messages. Returns 0, the
 * parser's -EINVAL or -ENOMEM with its message, -EFBIG with "PATH: larger
 * than 16 MiB" (DM_LOAD_PATTERN_FILE_MAX), or -errno with "PATH:
 * strerror(errno)" when the file cannot be opened or read. p is overwritten
 * on success only. Blocks on the file: call it before the run starts.
 */
int dm_load_pattern_load(struct dm_load_pattern *p, const char *path, char *err, size_t errlen);

#endif
