/* Wake-on-LAN magic packets (power/wol.h): the bytes, and MAC parsing. */
#include "dm_test.h"

#include <string.h>

#include "power/wol.h"

static void
test_packet_bytes(void **st)
{
    (void)st;
    const uint8_t mac[6] = { 0x00, 0x1b, 0x21, 0xab, 0xcd, 0xef };
    uint8_t p[DM_WOL_PACKET];
    memset(p, 0, sizeof(p));
    assert_int_equal(dm_wol_packet(mac, p), 102);
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(p[i], 0xff);
    }
    for (size_t k = 0; k < 16; k++) {
        assert_memory_equal(p + 6 + 6 * k, mac, 6);
    }
}

static void
test_parse_mac(void **st)
{
    (void)st;
    uint8_t mac[6] = { 0 };
    const uint8_t want[6] = { 0xaa, 0xbb, 0x0c, 0xdd, 0xee, 0xf1 };
    assert_int_equal(dm_wol_parse_mac("aa:bb:0c:dd:ee:f1", mac), 0);
    assert_memory_equal(mac, want, 6);
    memset(mac, 0, 6);
    assert_int_equal(dm_wol_parse_mac("AA-BB-0C-DD-EE-F1", mac), 0);
    assert_memory_equal(mac, want, 6);
    const char *bad[] = { "",
                          "aa:bb:cc:dd:ee",
                          "aa:bb:cc:dd:ee:ff:00",
                          "aa:bb-cc:dd:ee:ff",
                          "aa:bb:cc:dd:ee:fg",
                          "a:bb:cc:dd:ee:ff",
                          "aabbccddeeff",
                          "aa:bb:cc:dd:ee:ff " };
    uint8_t keep[6] = { 1, 2, 3, 4, 5, 6 };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memcpy(mac, keep, 6);
        assert_int_equal(dm_wol_parse_mac(bad[i], mac), -1);
        assert_memory_equal(mac, keep, 6);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packet_bytes),
        cmocka_unit_test(test_parse_mac),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
