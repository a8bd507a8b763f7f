/*
 * libFuzzer driver: dm_conf_load_string over the input, then destroy. A
 * config comes back with no message, NULL with at least one.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "conf/conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dm_conf_errors err = { 0 };
    struct dm_conf *c = dm_conf_load_string((const char *)data, size, "fuzz.yaml", &err);
    if ((c == NULL) != (err.n > 0)) {
        abort();
    }
    dm_conf_destroy(c);
    dm_conf_errors_fini(&err);
    return 0;
}
