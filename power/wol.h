/*
 * Wake-on-LAN magic packets (the wol actuator sends them over UDP to a
 * configured broadcast address and port). Pure: no I/O here.
 */
#ifndef DM_POWER_WOL_H
#define DM_POWER_WOL_H

#include <stddef.h>
#include <stdint.h>

#define DM_WOL_PACKET 102 /* 6 bytes 0xFF, then the MAC 16 times */

/* Writes the magic packet for mac into out (DM_WOL_PACKET bytes); returns its length. */
size_t dm_wol_packet(const uint8_t mac[6], uint8_t out[DM_WOL_PACKET]);

/*
 * Parses "aa:bb:cc:dd:ee:ff" (or with '-', any case, two hex digits a byte)
 * into mac. Returns 0, or -1 (mac untouched) for anything else.
 */
int dm_wol_parse_mac(const char *text, uint8_t mac[6]);

#endif
