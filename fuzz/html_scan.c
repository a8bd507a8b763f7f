/*
 * libFuzzer driver: dm_html_scan_feed over the input in chunks whose size
 * comes from its first byte, then over the whole input in one call.
 * Invariants: every reported path starts with '/', and both feeds report the
 * same objects (count and a hash of host, path and kind).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parsers/html_scan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
    unsigned n;
    uint64_t hash;
};

static uint64_t
fnv(uint64_t h, const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        h = (h ^ (unsigned char)p[i]) * 0x100000001b3u;
    }
    return h;
}

static void
on_object(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
          enum dm_html_kind kind)
{
    struct seen *s = arg;
    if (path_len == 0 || path[0] != '/' || path_len > DM_URL_MAX) {
        abort();
    }
    if (dm_html_kind_name(kind) == NULL) {
        abort();
    }
    s->n++;
    s->hash = fnv(s->hash, host, host_len);
    s->hash = fnv(s->hash, "\0", 1);
    s->hash = fnv(s->hash, path, path_len);
    s->hash = fnv(s->hash, (const char *)&kind, sizeof kind);
}

static struct seen
scan(const char *buf, size_t len, size_t chunk)
{
    struct dm_html_scan sc;
    struct seen s = { 0, 0xcbf29ce484222325u };
    dm_html_scan_init(&sc, "Example.COM:80", "/dir/page.html?q=1", 0);
    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        dm_html_scan_feed(&sc, buf + off, n, on_object, &s);
    }
    if (!dm_html_scan_finish(&sc) || sc.objects != s.n) {
        abort();
    }
    return s;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    size_t chunk = (size_t)data[0] + 1;
    size_t len = size - 1;
    char *buf = malloc(len > 0 ? len : 1); /* exactly sized: ASan sees over-reads */
    if (buf == NULL) {
        return 0;
    }
    memcpy(buf, data + 1, len);
    struct seen a = scan(buf, len, chunk);
    struct seen b = scan(buf, len, len > 0 ? len : 1);
    if (a.n != b.n || a.hash != b.hash) {
        abort();
    }
    free(buf);
    return 0;
}
