/*
 * libFuzzer driver: request heads through dm_http_parse, dm_http_check_request
 * and dm_http_write_request. Invariants: every span lies inside its head, and
 * a written head ends with CRLFCRLF.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz/http_head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_request(struct dm_http_parser *p, const char *head, size_t head_len,
              const struct dm_http_msg *msg, unsigned flags)
{
    struct dm_http_info info;
    const char *reason = NULL;
    int status =
        dm_http_check_request(head, head_len, msg, dm_http_parser_version(p), &info, &reason);
    if (status != 0) {
        if (status < 400 || status > 599 || reason == NULL) {
            abort();
        }
        return;
    }
    if (!fuzz_span_in(info.host, head, head_len)) {
        abort();
    }
    if (!fuzz_span_in(info.path, head, head_len) &&
        !(info.path.len == 1 && info.path.p[0] == '/')) {
        abort();
    }
    const struct dm_http_forward fw = {
        .client_addr = "192.0.2.1",
        .proto = "http",
        .via = "1.1 dimmer",
        .default_host = (flags & 2) ? "example.com" : NULL,
    };
    size_t cap = head_len + 512;
    char *out = malloc(cap);
    if (out == NULL) {
        return;
    }
    size_t n = dm_http_write_request(out, cap, msg, &info, &fw);
    if (n > cap || (n > 0 && !fuzz_ends_crlfcrlf(out, n))) {
        abort();
    }
    free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_http(data, size, true, check_request);
    return 0;
}
