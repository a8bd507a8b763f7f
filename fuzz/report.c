/*
 * libFuzzer driver: agent report datagrams through dm_report_decode
 * (power/report.h). Invariants: a report that decodes OK has a valid name
 * and finite watts in range, and encoding it again gives a datagram that
 * decodes OK to the same name, sequence, timestamp and connection count.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "power/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t KEY[] = "fuzz key";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dm_report r;
    enum dm_report_verdict v = dm_report_decode((const char *)data, size, KEY, sizeof(KEY) - 1, &r);
    if (v >= DM_REPORT_VERDICTS) {
        abort();
    }
    if (v != DM_REPORT_OK && v != DM_REPORT_BAD_HMAC) {
        return 0;
    }
    size_t n = strlen(r.name);
    if (n == 0 || n > DM_REPORT_NAME_MAX || !isfinite(r.est_w) || r.est_w < 0 ||
        r.est_w > DM_REPORT_WATTS_MAX) {
        abort();
    }
    char buf[DM_REPORT_MAX];
    size_t len = dm_report_encode(&r, KEY, sizeof(KEY) - 1, buf, sizeof(buf));
    if (len == 0) {
        return 0; /* longer once written with three decimals: allowed */
    }
    struct dm_report again;
    if (dm_report_decode(buf, len, KEY, sizeof(KEY) - 1, &again) != DM_REPORT_OK ||
        strcmp(again.name, r.name) != 0 || again.seq != r.seq || again.ts_ms != r.ts_ms ||
        again.tcp != r.tcp || again.has_measured != r.has_measured) {
        abort();
    }
    return 0;
}
