/* Common includes for cmocka tests: cmocka needs these before <cmocka.h>. */
#ifndef DM_TESTS_DM_TEST_H
#define DM_TESTS_DM_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#endif
