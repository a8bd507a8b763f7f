/*
 * proxy/sbuf.h: the growing buffer and the JSON escape of names that may
 * hold any byte (quotes, control bytes, UTF-8), cut short only where a JSON
 * parser still reads valid text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/sbuf.h"

static void
test_escapes(void **state)
{
    (void)state;
    char buf[64];
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "a\"b\\c\n\x01z"),
                        "a\\\"b\\\\c\\u000a\\u0001z");
    assert_string_equal(dm_json_esc(buf, sizeof(buf), NULL), "");
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "caf\xc3\xa9"), "caf\xc3\xa9");
    assert_string_equal(dm_json_esc_n(buf, sizeof(buf), "abcdef", 3), "abc");
    /* Bytes that are not well-formed UTF-8 (an actuator's reply may hold
     * any) are U+FFFD, one each: a stray byte, an overlong form, a
     * surrogate, past U+10FFFF, a sequence the length cuts short. */
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "500 \xff\xfe!"), "500 \\ufffd\\ufffd!");
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "\xc0\xaf"), "\\ufffd\\ufffd");
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "\xf4\x90\x80\x80"),
                        "\\ufffd\\ufffd\\ufffd\\ufffd");
    assert_string_equal(dm_json_esc_n(buf, sizeof(buf), "\xe2\x82\xac", 2), "\\ufffd\\ufffd");
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "\xe2\x82z"), "\\ufffd\\ufffdz");
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "\xed\x9f\xbf\xf4\x8f\xbf\xbf"),
                        "\xed\x9f\xbf\xf4\x8f\xbf\xbf");
}

static void
test_cut_never_splits_an_escape_or_a_character(void **state)
{
    (void)state;
    char buf[16]; /* 9 bytes of output, then the 7-byte guard stops it */
    /* A whole character at the cut stays. */
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "aaaaaaa\xc3\xa9zzzz"), "aaaaaaa\xc3\xa9");
    assert_string_equal(dm_json_esc(buf, sizeof(buf),
                                    "aaaaaa\xe2\x82\xac"
                                    "zzzz"),
                        "aaaaaa\xe2\x82\xac");
    /* A character is written whole, or not at all. */
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "aaaaaaaa\xe2\x82\xacz"),
                        "aaaaaaaa\xe2\x82\xac");
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "aaaaaaaaa\xe2\x82\xac"), "aaaaaaaaa");
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "aaaaaa\xf0\x9f\x98\x80"),
                        "aaaaaa\xf0\x9f\x98\x80");
    /* Escapes are written whole or not at all. */
    const char *out = dm_json_esc(buf, sizeof(buf), "\x01\x01\x01\x01");
    assert_int_equal(strlen(out) % 6, 0);
    /* Nothing cut: nothing dropped. */
    assert_string_equal(dm_json_esc(buf, sizeof(buf), "ab\xc3\xa9"), "ab\xc3\xa9");
}

static void
test_sbuf_grows(void **state)
{
    (void)state;
    struct dm_sbuf b = { 0 };
    for (int i = 0; i < 1000; i++) {
        dm_sb_printf(&b, "%04d", i);
    }
    assert_int_equal(b.len, 4000);
    assert_memory_equal(b.p + 3996, "0999", 4);
    free(b.p);
}

static void
test_sbuf_put_and_numbers(void **state)
{
    (void)state;
    struct dm_sbuf b = { 0 };
    dm_sb_put(&b, "", 0);
    assert_int_equal(b.len, 0);
    /* Growth from empty and past every capacity, interleaved with printf. */
    for (int i = 0; i < 1000; i++) {
        dm_sb_put(&b, "ab", 2);
        dm_sb_u64(&b, (unsigned long long)i);
        dm_sb_printf(&b, "%c", ';');
    }
    assert_int_equal(b.len, 1000 * 3 + 10 + 90 * 2 + 900 * 3);
    assert_string_equal(b.p + b.len - 12, "ab998;ab999;");
    assert_memory_equal(b.p, "ab0;ab1;", 8);
    b.len = 0;
    dm_sb_u64(&b, 0);
    dm_sb_puts(&b, " ");
    dm_sb_u64(&b, 18446744073709551615ull);
    assert_string_equal(b.p, "0 18446744073709551615");
    free(b.p);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_cut_never_splits_an_escape_or_a_character),
        cmocka_unit_test(test_sbuf_grows),
        cmocka_unit_test(test_sbuf_put_and_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
