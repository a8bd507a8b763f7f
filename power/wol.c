/* Wake-on-LAN magic packets (power/wol.h). */
#include "power/wol.h"

#include <string.h>

size_t
dm_wol_packet(const uint8_t mac[6], uint8_t out[DM_WOL_PACKET])
{
    memset(out, 0xff, 6);
    for (size_t i = 0; i < 16; i++) {
        memcpy(out + 6 + 6 * i, mac, 6);
    }
    return DM_WOL_PACKET;
}

static int
hex(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

int
dm_wol_parse_mac(const char *text, uint8_t mac[6])
{
    uint8_t out[6];
    char sep = 0;
    for (size_t i = 0; i < 6; i++) {
        const char *p = text + 3 * i;
        int hi = hex(p[0]);
        int lo = hi < 0 ? -1 : hex(p[1]);
        if (lo < 0) {
            return -1;
        }
        out[i] = (uint8_t)(hi << 4 | lo);
        char next = p[2];
        if (i == 5) {
            if (next != 0) {
                return -1;
            }
        } else if (next != ':' && next != '-') {
            return -1;
        } else if (sep == 0) {
            sep = next;
        } else if (next != sep) {
            return -1;
        }
    }
    memcpy(mac, out, 6);
    return 0;
}
