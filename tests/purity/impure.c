/*
 * Not part of dimmer: a policy that breaks every rule, so the suite can check
 * that tests/purity.cmake catches it (test purity_check_catches_impurity).
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

uint64_t dm_test_impure_pick(void);

uint64_t
dm_test_impure_pick(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_nsec + (uint64_t)rand();
}
