/*
 * Reading a pattern file into memory, then the pure parser (pattern.c).
 */
#include "bench/load/pattern_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/load/pattern.h"

static int
file_error(const char *path, int e, char *err, size_t errlen)
{
    if (errlen > 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(e));
    }
    return -e;
}

int
dm_load_pattern_load(struct dm_load_pattern *p, const char *path, char *err, size_t errlen)
{
    const size_t max = DM_LOAD_PATTERN_FILE_MAX;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return file_error(path, errno, err, errlen);
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc;
    for (;;) {
        if (len == cap) {
            /* Room for one byte past the cap tells a file of exactly max bytes from a longer one.
             */
            size_t ncap = cap ? cap * 2 : 4096;
            ncap = ncap < max + 1 ? ncap : max + 1;
            char *nb = realloc(buf, ncap);
            if (nb == NULL) {
                if (errlen > 0) {
                    snprintf(err, errlen, "%s: out of memory", path);
                }
                rc = -ENOMEM;
                goto free_buf;
            }
            buf = nb;
            cap = ncap;
        }
        size_t want = cap - len;
        errno = 0;
        size_t got = fread(buf + len, 1, want, f);
        len += got;
        if (len > max) {
            if (errlen > 0) {
                snprintf(err, errlen, "%s: larger than %zu MiB", path, max >> 20);
            }
            rc = -EFBIG;
            goto free_buf;
        }
        if (got < want) {
            if (ferror(f)) {
                rc = file_error(path, errno ? errno : EIO, err, errlen);
                goto free_buf;
            }
            break;
        }
    }
    rc = dm_load_pattern_parse(p, buf, len, path, err, errlen);
free_buf:
    free(buf);
    fclose(f);
    return rc;
}
