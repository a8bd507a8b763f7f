/*
 * libFuzzer driver: response heads through dm_http_parse (flags bit 0: the
 * request was HEAD), dm_http_check_response and dm_http_write_response (bit 1:
 * close, bit 2: HTTP/1.0 client). Invariants as for requests.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz/http_head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_response(struct dm_http_parser *p, const char *head, size_t head_len,
               const struct dm_http_msg *msg, unsigned flags)
{
    struct dm_http_info info;
    const char *reason = NULL;
    int status =
        dm_http_check_response(head, head_len, msg, dm_http_parser_version(p), &info, &reason);
    if (status != 0) {
        if (status < 400 || status > 599 || reason == NULL) {
            abort();
        }
        return;
    }
    size_t cap = head_len + 512;
    char *out = malloc(cap);
    if (out == NULL) {
        return;
    }
    size_t n = dm_http_write_response(out, cap, head, head_len, msg, &info, (flags & 4) ? 10 : 11,
                                      (flags & 2) != 0);
    if (n > cap || (n > 0 && !fuzz_ends_crlfcrlf(out, n))) {
        abort();
    }
    free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_http(data, size, false, check_response);
    return 0;
}
