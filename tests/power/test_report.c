/*
 * Agent reports (power/report.h): a signed report round-trips; a forged,
 * wrongly keyed, replayed, stale or malformed one is refused with its reason.
 * A key file gives its bytes without the final newline.
 */
#include "dm_test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "power/report.h"

static const uint8_t KEY[] = "a shared secret of the config";
#define KEYLEN (sizeof(KEY) - 1)

static struct dm_report
sample(void)
{
    struct dm_report r = { .seq = 42, .ts_ms = 1796130000123ULL, .est_w = 61.5, .tcp = 17 };
    strcpy(r.name, "web-1.rack_2");
    return r;
}

static void
test_round_trip(void **st)
{
    (void)st;
    struct dm_report r = sample(), got;
    char buf[DM_REPORT_MAX];
    size_t n = dm_report_encode(&r, KEY, KEYLEN, buf, sizeof(buf));
    assert_true(n > 0 && n <= DM_REPORT_MAX);
    assert_int_equal(dm_report_decode(buf, n, KEY, KEYLEN, &got), DM_REPORT_OK);
    assert_string_equal(got.name, r.name);
    assert_int_equal(got.seq, 42);
    assert_int_equal(got.ts_ms, r.ts_ms);
    assert_true(got.est_w == 61.5);
    assert_false(got.has_measured);
    assert_int_equal(got.tcp, 17);
    r.has_measured = true;
    r.measured_w = 58.25;
    n = dm_report_encode(&r, KEY, KEYLEN, buf, sizeof(buf));
    assert_int_equal(dm_report_decode(buf, n, KEY, KEYLEN, &got), DM_REPORT_OK);
    assert_true(got.has_measured && got.measured_w == 58.25);
    /* Too small a buffer, or a report the format cannot carry: nothing. */
    assert_int_equal(dm_report_encode(&r, KEY, KEYLEN, buf, 20), 0);
    strcpy(r.name, "web 1");
    assert_int_equal(dm_report_encode(&r, KEY, KEYLEN, buf, sizeof(buf)), 0);
}

static void
test_forged_and_wrong_key(void **st)
{
    (void)st;
    struct dm_report r = sample(), got;
    char buf[DM_REPORT_MAX];
    size_t n = dm_report_encode(&r, KEY, KEYLEN, buf, sizeof(buf));
    char *w = strstr(buf, "est_w=61.5");
    assert_non_null(w);
    w[6] = '9'; /* est_w=91.5: a server claiming more power than it draws */
    assert_int_equal(dm_report_decode(buf, n, KEY, KEYLEN, &got), DM_REPORT_BAD_HMAC);
    w[6] = '6';
    assert_int_equal(dm_report_decode(buf, n, KEY, KEYLEN, &got), DM_REPORT_OK);
    assert_int_equal(dm_report_decode(buf, n, (const uint8_t *)"other", 5, &got),
                     DM_REPORT_BAD_HMAC);
    /* No key (a config without one): nothing is trusted, and nothing signed
     * under the empty key (which HMAC allows) passes. */
    assert_int_equal(dm_report_decode(buf, n, NULL, 0, &got), DM_REPORT_BAD_HMAC);
    assert_int_equal(dm_report_decode(buf, n, (const uint8_t *)"", 0, &got), DM_REPORT_BAD_HMAC);
    assert_int_equal(dm_report_encode(&r, (const uint8_t *)"", 0, buf, sizeof(buf)), 0);
    n = dm_report_encode(&r, KEY, KEYLEN, buf, sizeof(buf));
    buf[n - 1] = buf[n - 1] == '0' ? '1' : '0'; /* one hex digit of the HMAC */
    assert_int_equal(dm_report_decode(buf, n, KEY, KEYLEN, &got), DM_REPORT_BAD_HMAC);
}

static void
test_replay_and_stale(void **st)
{
    (void)st;
    struct dm_report r = sample();
    struct dm_report_last last = { 0, 0 };
    uint64_t ts = r.ts_ms, now = ts + 300;
    assert_int_equal(dm_report_accept(&r, &last, now, 5000), DM_REPORT_OK);
    assert_int_equal(last.seq, 42);
    assert_int_equal(last.ts_ms, ts);
    assert_int_equal(dm_report_accept(&r, &last, now, 5000), DM_REPORT_REPLAY);
    r.seq = 41;
    assert_int_equal(dm_report_accept(&r, &last, now, 5000), DM_REPORT_REPLAY);
    r.seq = 43;
    r.ts_ms = ts - 1; /* older, whatever its seq */
    assert_int_equal(dm_report_accept(&r, &last, now, 5000), DM_REPORT_REPLAY);
    r.ts_ms = ts;
    assert_int_equal(dm_report_accept(&r, &last, r.ts_ms + 5001, 5000), DM_REPORT_STALE);
    assert_int_equal(dm_report_accept(&r, &last, r.ts_ms - 5001, 5000), DM_REPORT_STALE);
    assert_int_equal(last.seq, 42); /* refused reports change nothing */
    assert_int_equal(dm_report_accept(&r, &last, r.ts_ms + 5000, 5000), DM_REPORT_OK);
    /* One signed and numbered far ahead (from now, by someone with the key):
     * the running agent's next report, later in time, is taken all the same
     * (it was a replay until the agent restarted). */
    r.seq = 1000ull * (ts + 100) + 999;
    r.ts_ms = ts + 100;
    assert_int_equal(dm_report_accept(&r, &last, now, 5000), DM_REPORT_OK);
    r.seq = 44;
    r.ts_ms = ts + 200;
    assert_int_equal(dm_report_accept(&r, &last, now, 5000), DM_REPORT_OK);
    /* ...and the far one sent again is a replay. */
    r.seq = 1000ull * (ts + 100) + 999;
    r.ts_ms = ts + 100;
    assert_int_equal(dm_report_accept(&r, &last, now, 5000), DM_REPORT_REPLAY);
    assert_string_equal(dm_report_verdict_name(DM_REPORT_REPLAY), "replay");
}

/* body followed by a well-formed HMAC tail (another report's). */
static size_t
signed_body(const char *body, char *buf, size_t cap)
{
    struct dm_report r = sample();
    char good[DM_REPORT_MAX];
    size_t n = dm_report_encode(&r, KEY, KEYLEN, good, sizeof(good));
    /* The tail (" hmac=" and 64 hex digits) of a good report, after body: the
     * format is checked before the HMAC, so a bad body is MALFORMED, and a
     * good body gets BAD_HMAC, never OK. */
    size_t blen = strlen(body);
    size_t tail = 6 + 64;
    assert_true(blen + tail <= cap);
    memcpy(buf, body, blen);
    memcpy(buf + blen, good + n - tail, tail);
    return blen + tail;
}

static void
test_malformed(void **st)
{
    (void)st;
    const char *bodies[] = {
        "",
        "dimmer-agent/2 name=a seq=1 ts=1 est_w=1 measured_w=- tcp=1",
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=1 measured_w=-",
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=1 measured_w=- tcp=1 extra=2",
        "dimmer-agent/1 name=a  seq=1 ts=1 est_w=1 measured_w=- tcp=1",
        "dimmer-agent/1 seq=1 name=a ts=1 est_w=1 measured_w=- tcp=1",
        "dimmer-agent/1 name=a/b seq=1 ts=1 est_w=1 measured_w=- tcp=1",
        "dimmer-agent/1 name= seq=1 ts=1 est_w=1 measured_w=- tcp=1",
        "dimmer-agent/1 name=a seq=-1 ts=1 est_w=1 measured_w=- tcp=1",
        "dimmer-agent/1 name=a seq=99999999999999999999 ts=1 est_w=1 measured_w=- tcp=1",
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=nan measured_w=- tcp=1",
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=1e3 measured_w=- tcp=1",
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=.5 measured_w=- tcp=1",
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=5. measured_w=- tcp=1",
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=100001 measured_w=- tcp=1",
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=1 measured_w=x tcp=1",
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=1 measured_w=- tcp=1 ",
        /* More connections than any machine holds (one such report would
         * teach tcp_max: auto a figure that lasts hours). */
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=1 measured_w=- tcp=10000001",
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=1 measured_w=- tcp=18446744073709551615",
        /* A sequence number above its timestamp in microseconds: one such
         * report signed with the key would leave every later one a replay. */
        "dimmer-agent/1 name=a seq=2000 ts=1 est_w=1 measured_w=- tcp=1",
        ("dimmer-agent/1 name=a seq=18446744073709551615 ts=1796130000123 est_w=1 measured_w=- "
         "tcp=1"),
        ("dimmer-agent/1 name=a seq=18446744073709551615 ts=18446744073709550 est_w=1 "
         "measured_w=- tcp=1"),
    };
    struct dm_report got;
    char buf[2 * DM_REPORT_MAX];
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        size_t n = signed_body(bodies[i], buf, sizeof(buf));
        assert_int_equal(dm_report_decode(buf, n, KEY, KEYLEN, &got), DM_REPORT_MALFORMED);
    }
    /* A well-formed body with another's HMAC is BAD_HMAC, not MALFORMED:
     * at the bounds too (seq / 1000 at ts, tcp DM_REPORT_TCP_MAX). */
    const char *good[] = {
        "dimmer-agent/1 name=a seq=1 ts=1 est_w=1 measured_w=- tcp=1",
        "dimmer-agent/1 name=a seq=1999 ts=1 est_w=1 measured_w=- tcp=10000000",
        ("dimmer-agent/1 name=a seq=18446744073709551615 ts=18446744073709551 est_w=1 "
         "measured_w=- tcp=0"),
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        n = signed_body(good[i], buf, sizeof(buf));
        assert_int_equal(dm_report_decode(buf, n, KEY, KEYLEN, &got), DM_REPORT_BAD_HMAC);
    }
    /* Uppercase HMAC digits, a truncated datagram, an oversized one. */
    struct dm_report r = sample();
    n = dm_report_encode(&r, KEY, KEYLEN, buf, sizeof(buf));
    char up[DM_REPORT_MAX];
    memcpy(up, buf, n);
    for (size_t i = n - 64; i < n; i++) {
        if (up[i] >= 'a' && up[i] <= 'f') {
            up[i] = (char)(up[i] - 32);
        }
    }
    assert_int_equal(dm_report_decode(up, n, KEY, KEYLEN, &got), DM_REPORT_MALFORMED);
    assert_int_equal(dm_report_decode(buf, n - 1, KEY, KEYLEN, &got), DM_REPORT_MALFORMED);
    memset(buf, 'a', sizeof(buf));
    assert_int_equal(dm_report_decode(buf, DM_REPORT_MAX + 1, KEY, KEYLEN, &got),
                     DM_REPORT_MALFORMED);
}

/* Writes len bytes of data into a new temp file; its path goes into path. */
static void
key_file(char path[32], const void *data, size_t len)
{
    strcpy(path, "/tmp/dm-report-key-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static void
test_key_file(void **st)
{
    (void)st;
    char path[32];
    uint8_t key[DM_REPORT_KEY_MAX];
    size_t len = 0;
    key_file(path, "secret\r\n", 8);
    assert_int_equal(dm_report_key_read(path, key, &len), 0);
    assert_int_equal(len, 6);
    assert_memory_equal(key, "secret", 6);
    unlink(path);
    key_file(path, "\n", 1);
    assert_int_equal(dm_report_key_read(path, key, &len), -EINVAL);
    unlink(path);
    /* The largest key, with a newline after it, fits; one byte more does not. */
    char big[DM_REPORT_KEY_MAX + 2];
    memset(big, 'k', sizeof(big));
    big[DM_REPORT_KEY_MAX] = '\n';
    key_file(path, big, DM_REPORT_KEY_MAX + 1);
    assert_int_equal(dm_report_key_read(path, key, &len), 0);
    assert_int_equal(len, DM_REPORT_KEY_MAX);
    unlink(path);
    big[DM_REPORT_KEY_MAX] = 'k';
    key_file(path, big, sizeof(big));
    assert_int_equal(dm_report_key_read(path, key, &len), -EFBIG);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(dm_report_key_read(path, key, &len), -ENOENT);
    /* A FIFO is refused at once (reading it would wait for a writer), a directory too. */
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(dm_report_key_read(path, key, &len), -ENODEV);
    assert_string_equal(dm_report_key_error(-ENODEV), "not a regular file");
    assert_int_equal(unlink(path), 0);
    assert_int_equal(dm_report_key_read("/", key, &len), -EISDIR);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_forged_and_wrong_key),
        cmocka_unit_test(test_replay_and_stale), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_key_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
