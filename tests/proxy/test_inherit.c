/*
 * Tests for proxy/inherit.c: the DIMMER_INHERIT list a dimmer hands to the
 * process that replaces it (SIGUSR2), written and read back, and refused
 * whole when anything in it is wrong.
 */
#include "dm_test.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf/tls.h"
#include "proxy/inherit.h"

static void
test_written_then_read_back(void **state)
{
    (void)state;
    char *s = NULL;
    char key[128];
    assert_int_equal(dm_inherit_append(&s, "ready", 3, NULL), 0);
    assert_int_equal(dm_inherit_append(&s, "listen", 4, "127.0.0.1:8080"), 0);
    assert_int_equal(dm_inherit_append(&s, "listen", 5, "127.0.0.1:8080"), 0);
    assert_int_equal(dm_inherit_append(&s, "listen", 6, "[::1]:80"), 0);
    /* A second listener written the same: its own key, blank and all escaped. */
    dm_inherit_listen_key(key, sizeof(key), "*:0 %x", 1);
    assert_string_equal(key, "*:0 %x\n1");
    assert_int_equal(dm_inherit_append(&s, "listen", 7, key), 0);
    assert_int_equal(dm_inherit_append(&s, "admin", 8, "127.0.0.1:9901"), 0);
    assert_int_equal(dm_inherit_append(&s, "metrics", 9, "0.0.0.0:9902"), 0);
    assert_int_equal(dm_inherit_append(&s, "tickets", 10, NULL), 0);
    assert_string_equal(s, "ready=3 listen=4:127.0.0.1:8080 listen=5:127.0.0.1:8080 "
                           "listen=6:[::1]:80 listen=7:*:0%20%25x%0A1 admin=8:127.0.0.1:9901 "
                           "metrics=9:0.0.0.0:9902 tickets=10");
    struct dm_inherit in;
    char err[128] = "";
    assert_int_equal(dm_inherit_parse(s, &in, err, sizeof(err)), 0);
    assert_int_equal(in.ready_fd, 3);
    assert_int_equal(in.tickets_fd, 10);
    assert_int_equal(in.n, 6);
    int fds[4];
    /* Each listener takes its own, once. */
    assert_int_equal(dm_inherit_take(&in, DM_INHERIT_LISTEN, "127.0.0.1:8080", fds, 4), 2);
    assert_int_equal(fds[0], 4);
    assert_int_equal(fds[1], 5);
    assert_int_equal(dm_inherit_take(&in, DM_INHERIT_LISTEN, "127.0.0.1:8080", fds, 4), 0);
    assert_int_equal(dm_inherit_take(&in, DM_INHERIT_LISTEN, key, fds, 4), 1);
    assert_int_equal(fds[0], 7);
    assert_int_equal(dm_inherit_take(&in, DM_INHERIT_LISTEN, "*:0 %x", fds, 4), 0);
    /* The kind counts: the admin's address is no listener's. */
    assert_int_equal(dm_inherit_take(&in, DM_INHERIT_LISTEN, "127.0.0.1:9901", fds, 4), 0);
    assert_int_equal(dm_inherit_take(&in, DM_INHERIT_ADMIN, "127.0.0.1:9901", fds, 4), 1);
    assert_int_equal(fds[0], 8);
    assert_int_equal(dm_inherit_take(&in, DM_INHERIT_METRICS, "0.0.0.0:9902", fds, 1), 1);
    assert_int_equal(fds[0], 9);
    /* At most max. */
    assert_int_equal(in.v[2].taken, false);
    assert_int_equal(dm_inherit_take(&in, DM_INHERIT_LISTEN, "[::1]:80", fds, 0), 0);
    assert_int_equal(in.v[2].taken, false);
    /* None taken twice; the rest (fd 6 here, which is no socket of ours:
     * closed, harmless) is closed and everything freed. */
    int fd6 = dup(0);
    assert_true(fd6 >= 0);
    if (fd6 != 6) {
        assert_int_equal(dup2(fd6, 6), 6);
        close(fd6);
    }
    dm_inherit_close_rest(&in);
    assert_int_equal(in.n, 0);
    assert_int_equal(close(6), -1); /* closed by close_rest */
    free(s);
}

static void
test_bad_lists_are_refused_whole(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "listen=4",                  /* no address */
        "listen=:127.0.0.1:80",      /* no descriptor */
        "listen=2:127.0.0.1:80",     /* stdio is not a socket handed over */
        "listen=65536:127.0.0.1:80", /* no such descriptor */
        "listen=4x:127.0.0.1:80",    /* not digits */
        "listen=-4:127.0.0.1:80",    /* not digits */
        "listen=4:",                 /* an empty address */
        "listen=4:a b",              /* a blank not escaped ends the word: "b" */
        "listen=4:a%2",              /* a cut escape */
        "listen=4:a%zz",             /* not hex */
        "listen=4:a%00",             /* no NUL */
        "listen=4:a/b",              /* a byte that is always escaped */
        "ready=3 ready=4",           /* ready once */
        "ready=3 listen=3:a",        /* one descriptor, two uses */
        "listen=4:a admin=4:b",      /* one descriptor, two uses */
        "listens=4:a",               /* an unknown word */
        "listen",                    /* no value */
        "ready=3 listen=4:a bogus",  /* the last word bad */
        "ready=",                    /* no descriptor */
        "tickets=5 tickets=6",       /* tickets once */
        "ready=5 tickets=5",         /* one descriptor, two uses */
        "tickets=5 listen=5:a",      /* one descriptor, two uses */
        "listen=5:a tickets=5",      /* one descriptor, two uses */
        "tickets=5:a",               /* a pipe has no address */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct dm_inherit in;
        char err[128] = "";
        if (dm_inherit_parse(bad[i], &in, err, sizeof(err)) != -1) {
            fail_msg("accepted: %s", bad[i]);
        }
        assert_true(err[0] != 0);
        assert_int_equal(in.n, 0);
        assert_null(in.v);
        assert_int_equal(in.ready_fd, -1);
        assert_int_equal(in.tickets_fd, -1);
    }
    /* Empty and blank: nothing handed over, and that is fine. */
    struct dm_inherit in;
    char err[128];
    assert_int_equal(dm_inherit_parse("", &in, err, sizeof(err)), 0);
    assert_int_equal(in.n, 0);
    assert_int_equal(dm_inherit_parse("  ", &in, err, sizeof(err)), 0);
    assert_int_equal(dm_inherit_take(NULL, DM_INHERIT_LISTEN, "a", NULL, 1), 0);
    dm_inherit_close_rest(NULL);
}

static void
test_descriptors_are_checked_for_what_they_are_named(void **state)
{
    (void)state;
    int tcp = socket(AF_INET, SOCK_STREAM, 0);
    int udp = socket(AF_INET, SOCK_DGRAM, 0);
    int idle = socket(AF_INET, SOCK_STREAM, 0); /* not listening */
    int p[2];
    assert_true(tcp >= 3 && udp >= 3 && idle >= 3);
    assert_int_equal(pipe(p), 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    assert_int_equal(bind(tcp, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(tcp, 8), 0);
    assert_int_equal(bind(udp, (struct sockaddr *)&a, sizeof(a)), 0);
    char text[256], err[200];
    struct dm_inherit in;
    snprintf(text, sizeof(text), "ready=%d listen=%d:a metrics=%d:b", p[1], tcp, udp);
    assert_int_equal(dm_inherit_parse(text, &in, err, sizeof(err)), 0);
    assert_int_equal(dm_inherit_check(&in, err, sizeof(err)), 0);
    dm_inherit_close_rest(&in); /* closes tcp and udp: none taken */
    tcp = socket(AF_INET, SOCK_STREAM, 0);
    udp = socket(AF_INET, SOCK_DGRAM, 0);
    assert_int_equal(bind(tcp, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(tcp, 8), 0);
    /* Each named for what it is not. */
    const char *forms[] = { "listen=%d:a", "admin=%d:a", "metrics=%d:a" };
    int not_listen[] = { udp, idle, p[0] };
    for (size_t i = 0; i < 3; i++) {
        snprintf(text, sizeof(text), forms[i % 2], not_listen[i]);
        assert_int_equal(dm_inherit_parse(text, &in, err, sizeof(err)), 0);
        assert_int_equal(dm_inherit_check(&in, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "not a listening TCP socket"));
        in.n = 0; /* not closed: still used below */
        free(in.v[0].text);
        free(in.v);
    }
    snprintf(text, sizeof(text), forms[2], tcp);
    assert_int_equal(dm_inherit_parse(text, &in, err, sizeof(err)), 0);
    assert_int_equal(dm_inherit_check(&in, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not an open UDP socket"));
    dm_inherit_close_rest(&in);
    snprintf(text, sizeof(text), "ready=%d", tcp); /* a closed descriptor now */
    assert_int_equal(dm_inherit_parse(text, &in, err, sizeof(err)), 0);
    assert_int_equal(dm_inherit_check(&in, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not an open pipe"));
    /* The keys come in a pipe, never a socket (nor a file). */
    snprintf(text, sizeof(text), "tickets=%d", udp);
    assert_int_equal(dm_inherit_parse(text, &in, err, sizeof(err)), 0);
    assert_int_equal(dm_inherit_check(&in, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "tickets="));
    snprintf(text, sizeof(text), "tickets=%d", p[0]);
    assert_int_equal(dm_inherit_parse(text, &in, err, sizeof(err)), 0);
    assert_int_equal(dm_inherit_check(&in, err, sizeof(err)), 0);
    close(udp);
    close(idle);
    close(p[0]);
    close(p[1]);
}

static void
test_what_the_old_process_knew_of_its_hosts(void **state)
{
    (void)state;
    char *s = NULL;
    assert_int_equal(dm_inherit_append(&s, "from", 4242, NULL), 0);
    assert_int_equal(dm_inherit_append_host(&s, "10.0.0.1:80", 1), 0);
    assert_int_equal(dm_inherit_append_host(&s, "[fe80::1%eth0]:80", 0), 0);
    assert_int_equal(dm_inherit_append_power(&s, "10.0.0.1:80", 2, true, 1.5), 0);
    assert_string_equal(s, "from=4242 host=10.0.0.1:80,down=1 host=[fe80::1%25eth0]:80,down=0 "
                           "power=10.0.0.1:80,state=2,held=1,wh=1.500000");
    struct dm_inherit in;
    char err[128] = "";
    assert_int_equal(dm_inherit_parse(s, &in, err, sizeof(err)), 0);
    assert_int_equal(in.from, 4242);
    assert_int_equal(in.n, 0);
    assert_int_equal(in.nhosts, 2);
    const struct dm_inherited_host *h = dm_inherit_host(&in, "10.0.0.1:80");
    assert_non_null(h);
    assert_int_equal(h->down, 1);
    assert_int_equal(h->pm_state, 2);
    assert_true(h->held);
    assert_true(h->wh > 1.4999 && h->wh < 1.5001);
    h = dm_inherit_host(&in, "[fe80::1%eth0]:80");
    assert_non_null(h);
    assert_int_equal(h->down, 0);
    assert_int_equal(h->pm_state, -1); /* not power-managed */
    assert_null(dm_inherit_host(&in, "10.0.0.2:80"));
    assert_null(dm_inherit_host(NULL, "10.0.0.1:80"));
    dm_inherit_close_rest(&in);
    dm_inherit_free(&in);
    assert_int_equal(in.nhosts, 0);
    free(s);
    static const char *const bad[] = {
        "from=1", /* init: never ours */
        "from=x",
        "from=12 from=13",                     /* once */
        "host=10.0.0.1:80",                    /* no fields */
        "host=10.0.0.1:80,down=2",             /* 0 or 1 */
        "host=10.0.0.1:80,down=0,down=1",      /* each once */
        "host=10.0.0.1:80,state=1",            /* a power field */
        "host=,down=0",                        /* no address */
        "power=a,state=1,held=0",              /* no energy */
        "power=a,state=1,held=0,wh=-1",        /* negative */
        "power=a,state=1,held=0,wh=nan",       /* not a number */
        "power=a,state=1,held=0,wh=1x",        /* trailing */
        "power=a,state=64,held=0,wh=1",        /* no such state */
        "power=a,state=1,held=0,wh=1,",        /* an empty field */
        "power=a,state=1,held=0,wh=1,extra=1", /* an unknown one */
        "hosts=a,down=0",                      /* an unknown word */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (dm_inherit_parse(bad[i], &in, err, sizeof(err)) != -1) {
            fail_msg("accepted: %s", bad[i]);
        }
        assert_int_equal(in.nhosts, 0);
        assert_null(in.hosts);
        assert_int_equal(in.from, 0);
    }
}

/* Two ticket keys as dm_tls_tickets_save writes them; the second aged age_ms. */
static size_t
ticket_bytes(unsigned char *b, unsigned char fill, uint64_t age_ms)
{
    memcpy(b, "DMTK\1\2", 6);
    for (size_t k = 0; k < 2; k++) {
        unsigned char *p = b + 6 + k * 88;
        memset(p, fill + (int)k, 80);
        uint64_t age = k == 0 ? 0 : age_ms;
        for (int i = 0; i < 8; i++) {
            p[80 + i] = (unsigned char)(age >> (56 - 8 * i));
        }
    }
    return 6 + 2 * 88;
}

static void
test_ticket_keys_go_over_whole_or_not_at_all(void **state)
{
    (void)state;
    unsigned char in[DM_TLS_TICKETS_MAX], out[DM_TLS_TICKETS_MAX];
    /* None made yet (no handshake in this process): nothing to hand over. */
    assert_int_equal(dm_tls_tickets_save(out, sizeof(out)), 0);
    size_t len = ticket_bytes(in, 0x41, 1800000);
    assert_int_equal(dm_tls_tickets_load(in, len), 2);
    assert_int_equal(dm_tls_tickets_save(out, 10), 0); /* too short a buffer */
    assert_int_equal(dm_tls_tickets_save(out, sizeof(out)), len);
    /* The same keys, and the ages go on from where they were (a few ms later). */
    assert_memory_equal(out, in, 6 + 80);
    assert_memory_equal(out + 94, in + 94, 80);
    uint64_t age = 0;
    for (int i = 0; i < 8; i++) {
        age = age << 8 | out[174 + i];
    }
    assert_true(age >= 1800000 && age < 1800000 + 60000);
    /* Anything else is refused whole, and the keys stay as they were. */
    unsigned char bad[DM_TLS_TICKETS_MAX];
    for (int k = 0; k < 6; k++) {
        size_t blen = ticket_bytes(bad, 0x61, 0);
        if (k == 0) {
            bad[0] = 'X'; /* not the magic */
        } else if (k == 1) {
            bad[4] = 2; /* another version */
        } else if (k == 2) {
            bad[5] = 0; /* no key */
        } else if (k == 3) {
            bad[5] = 4; /* more than three */
        } else if (k == 4) {
            blen--; /* cut short */
        } else {
            blen = 3; /* not even a head */
        }
        assert_int_equal(dm_tls_tickets_load(bad, blen), -1);
        assert_int_equal(dm_tls_tickets_save(out, sizeof(out)), len);
        assert_memory_equal(out + 6, in + 6, 80);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_written_then_read_back),
        cmocka_unit_test(test_bad_lists_are_refused_whole),
        cmocka_unit_test(test_descriptors_are_checked_for_what_they_are_named),
        cmocka_unit_test(test_what_the_old_process_knew_of_its_hosts),
        cmocka_unit_test(test_ticket_keys_go_over_whole_or_not_at_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
