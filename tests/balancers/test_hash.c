/* Tests for balancers/hash.c: dm_hash_bytes and consistent hashing with bounded loads. */
#include "dm_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balancers/balancer.h"
#include "balancers/fixture.h"
#include "balancers/hash.h"
#include "balancers/registry.h"
#include "balancers/rng.h"
#include "balancers/servers.h"

/*
 * n servers named after their number plus `first`, so that two tables can
 * hold the same servers at different indexes; weights 1 unless given.
 */
static struct dm_fixture *
hash_fixture_create_from(const unsigned *weights, size_t n, size_t first, double balance)
{
    struct dm_fixture *f = dm_fixture_create(n);
    f->names = calloc(n > 0 ? n : 1, sizeof(*f->names));
    assert_non_null(f->names);
    for (size_t i = 0; i < n; i++) {
        unsigned id = (unsigned)(i + first) % 65536;
        snprintf(f->names[i], sizeof(f->names[i]), "10.0.%u.%u:80", id / 256, id % 256);
        f->sv->s[i].name = f->names[i];
    }
    dm_fixture_set_weights(f, weights);
    struct dm_bal_conf cf = { .hash_balance = balance };
    dm_fixture_set_balancer(f, &dm_bal_hash, &cf);
    return f;
}

static struct dm_fixture *
hash_fixture_create(const unsigned *weights, size_t n, double balance)
{
    return hash_fixture_create_from(weights, n, 0, balance);
}

static int
pick_key(struct dm_fixture *f, uint64_t key)
{
    f->pick.key = key;
    return dm_balancer_pick(f->bal, &f->pick);
}

static uint64_t
key_of(uint64_t k)
{
    return dm_hash_bytes(&k, sizeof(k));
}

/* dm_hash_bytes ------------------------------------------------------------ */

/* The same bytes hash the same at any address, read from an exactly-sized copy. */
static void
test_hash_bytes_ignores_alignment(void **state)
{
    (void)state;
    struct dm_rng rng;
    dm_rng_init(&rng, 1);
    unsigned char src[80];
    for (size_t i = 0; i < sizeof(src); i++) {
        src[i] = (unsigned char)dm_rng_next(&rng);
    }
    for (size_t len = 0; len <= 72; len++) {
        uint64_t want = dm_hash_bytes(src, len);
        for (size_t off = 0; off < 8; off++) {
            unsigned char *copy = malloc(off + len + 1);
            assert_non_null(copy);
            memcpy(copy + off, src, len);
            /* ASan sees a read past off + len in the heap block when off + len is its end. */
            unsigned char *exact = malloc(len > 0 ? len : 1);
            assert_non_null(exact);
            memcpy(exact, src, len);
            assert_true(dm_hash_bytes(copy + off, len) == want);
            assert_true(dm_hash_bytes(exact, len) == want);
            free(exact);
            free(copy);
        }
    }
    assert_true(dm_hash_bytes(NULL, 0) == dm_hash_bytes("", 0));
}

static void
test_hash_bytes_tells_lengths_and_bytes_apart(void **state)
{
    (void)state;
    enum { N = 40 };
    unsigned char zeros[N] = { 0 };
    uint64_t seen[N + 1 + N * 8];
    size_t nseen = 0;
    for (size_t len = 0; len <= N; len++) {
        seen[nseen++] = dm_hash_bytes(zeros, len);
    }
    /* Every one-bit input of N bytes. */
    for (size_t bit = 0; bit < N * 8; bit++) {
        unsigned char b[N] = { 0 };
        b[bit / 8] = (unsigned char)(1u << (bit % 8));
        seen[nseen++] = dm_hash_bytes(b, N);
    }
    for (size_t i = 0; i < nseen; i++) {
        for (size_t j = 0; j < i; j++) {
            assert_true(seen[i] != seen[j]);
        }
    }
}

/*
 * Flipping any one input bit flips each output bit with probability close to
 * 1/2 (strict avalanche), for short keys such as an IPv4 address and longer
 * ones such as a cookie.
 */
static void
test_hash_bytes_avalanches(void **state)
{
    (void)state;
    static const size_t lens[] = { 4, 8, 16, 37 };
    struct dm_rng rng;
    dm_rng_init(&rng, 2);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        size_t len = lens[l];
        unsigned flips[64] = { 0 };
        unsigned trials = 0;
        for (int k = 0; k < 400; k++) {
            unsigned char b[40];
            for (size_t i = 0; i < len; i++) {
                b[i] = (unsigned char)dm_rng_next(&rng);
            }
            uint64_t h = dm_hash_bytes(b, len);
            for (size_t bit = 0; bit < len * 8; bit++) {
                b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
                uint64_t d = h ^ dm_hash_bytes(b, len);
                b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
                for (int o = 0; o < 64; o++) {
                    flips[o] += (unsigned)(d >> o & 1);
                }
                trials++;
            }
        }
        for (int o = 0; o < 64; o++) {
            double p = (double)flips[o] / trials;
            assert_true(p > 0.47 && p < 0.53);
        }
    }
}

/* Sequential keys (counters, neighbouring addresses) fill the top-bit buckets evenly. */
static void
test_hash_bytes_spreads_sequential_keys(void **state)
{
    (void)state;
    enum { KEYS = 1 << 20, BUCKETS = 1024 };
    unsigned *count = calloc(BUCKETS, sizeof(*count));
    assert_non_null(count);
    for (uint32_t k = 0; k < KEYS; k++) {
        unsigned char b[4] = { 10, (unsigned char)(k >> 16), (unsigned char)(k >> 8),
                               (unsigned char)k };
        count[dm_hash_bytes(b, sizeof(b)) >> 54]++;
    }
    /* 1024 per bucket, standard deviation 32: 15% is over 4.5 of them. */
    for (size_t i = 0; i < BUCKETS; i++) {
        assert_true(count[i] > 1024 * 0.85 && count[i] < 1024 * 1.15);
    }
    free(count);
}

/* The policy --------------------------------------------------------------- */

static void
test_create_sets_ops_and_table(void **state)
{
    (void)state;
    struct dm_fixture *f = hash_fixture_create(NULL, 3, 0);
    assert_ptr_equal(f->bal->ops, &dm_bal_hash);
    assert_ptr_equal(f->bal->sv, f->sv);
    assert_ptr_equal(dm_balancer_find("hash"), &dm_bal_hash);
    dm_fixture_destroy(f);
}

static void
test_unusable_and_tried_servers_are_never_picked(void **state)
{
    (void)state;
    enum { N = 8 };
    struct dm_fixture *f = hash_fixture_create(NULL, N, 0);
    static const struct dm_fixture_out out = {
        .down = 0, .passive = 1, .asleep = 2, .booting = 3, .draining = 4, .tried = 5
    };
    dm_fixture_take_out(f, &out);
    unsigned count[N] = { 0 };
    for (int k = 0; k < 20000; k++) {
        int i = pick_key(f, key_of((uint64_t)k));
        assert_true(i == 6 || i == 7);
        count[i]++;
        /* Under load too: the bound sends keys on, never to an ineligible server. */
        if (k % 2 == 0) {
            dm_counter_add(&f->sv->s[i].conns, 1);
        }
    }
    assert_true(count[6] > 5000 && count[7] > 5000);
    f->pick.now_us++;
    bool seen = false;
    for (int k = 0; k < 1000 && !seen; k++) {
        seen = pick_key(f, key_of((uint64_t)k)) == 1;
    }
    assert_true(seen);
    dm_fixture_destroy(f);
}

static void
test_no_usable_server_gives_no_server(void **state)
{
    (void)state;
    struct dm_fixture *f = hash_fixture_create(NULL, 3, 0);
    atomic_store(&f->sv->s[0].host->down, true);
    atomic_store(&f->sv->s[1].host->power, DM_POWER_ASLEEP);
    f->pick.tried = f->tried;
    f->tried[0] = 1u << 2;
    for (int k = 0; k < 100; k++) {
        assert_int_equal(pick_key(f, key_of((uint64_t)k)), DM_NO_SERVER);
    }
    f->tried[0] = 0;
    assert_int_equal(pick_key(f, 12345), 2);
    dm_fixture_destroy(f);

    f = hash_fixture_create(NULL, 0, 0);
    assert_int_equal(pick_key(f, 12345), DM_NO_SERVER);
    dm_fixture_destroy(f);
}

/* Keys at both ends of the ring, and every bucket boundary, land on a server. */
static void
test_keys_at_ring_ends_wrap(void **state)
{
    (void)state;
    static const size_t sizes[] = { 1, 2, 3, 64, 1000 };
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        struct dm_fixture *f = hash_fixture_create(NULL, sizes[s], 0);
        assert_in_range(pick_key(f, 0), 0, sizes[s] - 1);
        assert_in_range(pick_key(f, UINT64_MAX), 0, sizes[s] - 1);
        /* The key past every point belongs to the first point, as key 0 does. */
        assert_int_equal(pick_key(f, UINT64_MAX), pick_key(f, 0));
        for (unsigned bit = 0; bit < 64; bit++) {
            uint64_t k = (uint64_t)1 << bit;
            assert_in_range(pick_key(f, k), 0, sizes[s] - 1);
            assert_in_range(pick_key(f, k - 1), 0, sizes[s] - 1);
            assert_in_range(pick_key(f, UINT64_MAX - k), 0, sizes[s] - 1);
        }
        dm_fixture_destroy(f);
    }
}

/* While loads are low and level, a key always goes to the same server. */
static void
test_same_key_same_server_while_loads_are_low(void **state)
{
    (void)state;
    enum { N = 10, KEYS = 5000 };
    struct dm_fixture *f = hash_fixture_create(NULL, N, 0);
    int *home = calloc(KEYS, sizeof(*home));
    assert_non_null(home);
    for (uint64_t k = 0; k < KEYS; k++) {
        home[k] = pick_key(f, key_of(k));
        assert_in_range(home[k], 0, N - 1);
    }
    /* No load, any number of times, and every server at the same load. */
    for (uint64_t load = 0; load <= 20; load += 10) {
        for (size_t i = 0; i < N; i++) {
            atomic_store(&f->sv->s[i].conns, load);
        }
        for (int round = 0; round < 3; round++) {
            for (uint64_t k = 0; k < KEYS; k++) {
                assert_int_equal(pick_key(f, key_of(k)), home[k]);
            }
        }
    }
    free(home);
    dm_fixture_destroy(f);
}

/* Keys spread over the servers by weight (100 points per unit: within about 10%). */
static void
test_keys_spread_by_weight(void **state)
{
    (void)state;
    enum { N = 6, KEYS = 200000 };
    static const unsigned w[N] = { 1, 1, 2, 2, 4, 6 };
    struct dm_fixture *f = hash_fixture_create(w, N, 0);
    unsigned count[N] = { 0 };
    for (uint64_t k = 0; k < KEYS; k++) {
        count[pick_key(f, key_of(k))]++;
    }
    for (size_t i = 0; i < N; i++) {
        double want = (double)KEYS * w[i] / 16.0;
        print_message("server %zu weight %u: %.3f of its share\n", i, w[i], count[i] / want);
        assert_true(count[i] > want * 0.75 && count[i] < want * 1.25);
    }
    dm_fixture_destroy(f);
}

/*
 * Adding a server to N moves about 1/(N+1) of the keys, all of them to the
 * new server; removing it again moves them back and nothing else.
 */
static void
test_adding_a_server_moves_one_share_of_keys(void **state)
{
    (void)state;
    enum { KEYS = 100000 };
    static const size_t sizes[] = { 4, 10, 50 };
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        struct dm_fixture *small = hash_fixture_create(NULL, n, 0);
        struct dm_fixture *big = hash_fixture_create(NULL, n + 1, 0);
        unsigned moved = 0;
        for (uint64_t k = 0; k < KEYS; k++) {
            int a = pick_key(small, key_of(k));
            int b = pick_key(big, key_of(k));
            if (a != b) {
                /* The new server is the last one of the bigger table. */
                assert_int_equal(b, (int)n);
                moved++;
            }
        }
        double want = (double)KEYS / (double)(n + 1);
        print_message("%zu -> %zu servers: %u keys of %d moved, %.0f expected\n", n, n + 1, moved,
                      KEYS, want);
        assert_true(moved > want * 0.7 && moved < want * 1.3);
        dm_fixture_destroy(small);
        dm_fixture_destroy(big);
    }
}

/*
 * Removing one of N servers moves only its keys, spread over the others,
 * whether it leaves the table (a reload without it, the others at new
 * indexes) or only goes down.
 */
static void
test_removing_a_server_moves_only_its_keys(void **state)
{
    (void)state;
    enum { N = 10, GONE = 4, KEYS = 100000 };
    struct dm_fixture *all = hash_fixture_create(NULL, N, 0);
    /* Servers 0..3 and 5..9 of `all`, at indexes 0..8: two tables glued by name. */
    struct dm_fixture *rest = hash_fixture_create(NULL, N - 1, 0);
    for (size_t i = GONE; i < N - 1; i++) {
        snprintf(rest->names[i], sizeof(rest->names[i]), "%s", all->names[i + 1]);
    }
    dm_fixture_set_balancer(rest, &dm_bal_hash, NULL);

    unsigned owned = 0;
    unsigned went_to[N] = { 0 };
    for (uint64_t k = 0; k < KEYS; k++) {
        int before = pick_key(all, key_of(k));
        int after = pick_key(rest, key_of(k));
        int after_in_all = after >= GONE ? after + 1 : after;
        if (before == GONE) {
            owned++;
            went_to[after_in_all]++;
        } else {
            assert_int_equal(after_in_all, before);
        }
    }
    assert_true(owned > KEYS / N * 0.7 && owned < KEYS / N * 1.3);
    /* Its keys spread: no single server takes more than half of them. */
    for (size_t i = 0; i < N; i++) {
        assert_true(went_to[i] < owned / 2);
    }

    /* Down in place: the same moves exactly. */
    atomic_store(&all->sv->s[GONE].host->down, true);
    for (uint64_t k = 0; k < KEYS; k++) {
        int after = pick_key(rest, key_of(k));
        int after_in_all = after >= GONE ? after + 1 : after;
        assert_int_equal(pick_key(all, key_of(k)), after_in_all);
    }
    dm_fixture_destroy(all);
    dm_fixture_destroy(rest);
}

/* Keys drawn from a Zipf(1) law over `keys` distinct keys: a few are very hot. */
struct zipf {
    double *cum;
    size_t n;
};

static struct zipf
zipf_create(size_t n)
{
    struct zipf z = { calloc(n, sizeof(double)), n };
    assert_non_null(z.cum);
    double total = 0;
    for (size_t k = 0; k < n; k++) {
        total += 1.0 / (double)(k + 1);
        z.cum[k] = total;
    }
    for (size_t k = 0; k < n; k++) {
        z.cum[k] /= total;
    }
    return z;
}

static uint64_t
zipf_key(const struct zipf *z, struct dm_rng *rng)
{
    double u = (double)(dm_rng_next(rng) >> 11) / 9007199254740992.0;
    size_t k = 0;
    while (k + 1 < z->n && z->cum[k] < u) {
        k++;
    }
    return key_of(k);
}

static uint64_t
max_conns(const struct dm_servers *sv)
{
    uint64_t m = 0;
    for (size_t i = 0; i < sv->n; i++) {
        uint64_t c = dm_counter_get(&sv->s[i].conns);
        m = c > m ? c : m;
    }
    return m;
}

/*
 * MTZ's guarantee: as requests arrive (none ending), no server ever holds
 * more than ceil(c * average) of them, even when a few keys carry most of the
 * traffic; c = 1 gives perfect balance. Without the bound (c huge) the hot
 * key's server takes a fifth of everything.
 */
static void
test_bounded_load_holds_under_skewed_keys(void **state)
{
    (void)state;
    enum { N = 10, PICKS = 20000 };
    static const double cs[] = { 1.0, 1.1, 1.25, 2.0, 0 /* default, 1.25 */ };
    struct zipf z = zipf_create(200);
    for (size_t c = 0; c < sizeof(cs) / sizeof(cs[0]); c++) {
        double bal = cs[c] != 0 ? cs[c] : 1.25;
        struct dm_fixture *f = hash_fixture_create(NULL, N, cs[c]);
        for (uint64_t total = 1; total <= PICKS; total++) {
            int i = pick_key(f, zipf_key(&z, &f->rng));
            assert_in_range(i, 0, N - 1);
            dm_counter_add(&f->sv->s[i].conns, 1);
            /* The bound compares in double precision, as the policy does. */
            uint64_t bound = (uint64_t)ceil(bal * (double)total / N);
            assert_true(max_conns(f->sv) <= bound);
        }
        dm_fixture_destroy(f);
    }
    struct dm_fixture *f = hash_fixture_create(NULL, N, 1e9);
    for (int k = 0; k < PICKS; k++) {
        dm_counter_add(&f->sv->s[pick_key(f, zipf_key(&z, &f->rng))].conns, 1);
    }
    assert_true(max_conns(f->sv) > PICKS / 5);
    dm_fixture_destroy(f);
    free(z.cum);
}

/*
 * With requests also ending at random, every placement respects the bound it
 * saw, conns + 1 <= ceil(c * (T + 1) / n); and the most loaded server stays
 * within ceil(c * average) + 1 at all times in this run (ends can lower the
 * average below what a server was allowed when it took its requests).
 */
static void
test_bounded_load_holds_with_random_ends(void **state)
{
    (void)state;
    enum { N = 12, LIVE = 240, STEPS = 100000 };
    struct zipf z = zipf_create(100);
    struct dm_fixture *f = hash_fixture_create(NULL, N, 0);
    int *open = calloc(LIVE + 1, sizeof(*open));
    size_t nopen = 0;
    uint64_t worst_over = 0;
    for (int step = 0; step < STEPS; step++) {
        uint64_t total = nopen;
        int i = pick_key(f, zipf_key(&z, &f->rng));
        assert_in_range(i, 0, N - 1);
        uint64_t placed = dm_counter_get(&f->sv->s[i].conns) + 1;
        assert_true(placed <= (uint64_t)ceil(1.25 * (double)(total + 1) / N));
        dm_counter_add(&f->sv->s[i].conns, 1);
        open[nopen++] = i;
        if (nopen > LIVE) {
            size_t k = (size_t)dm_rng_below(&f->rng, nopen);
            dm_counter_sub(&f->sv->s[open[k]].conns, 1);
            open[k] = open[--nopen];
        }
        uint64_t bound = (uint64_t)ceil(1.25 * (double)nopen / N);
        uint64_t m = max_conns(f->sv);
        worst_over = m > bound && m - bound > worst_over ? m - bound : worst_over;
    }
    print_message("most over ceil(c * average) at any time: %llu\n",
                  (unsigned long long)worst_over);
    assert_true(worst_over <= 1);
    free(open);
    dm_fixture_destroy(f);
    free(z.cum);
}

/* hash_balance sets c; 0 means 1.25; the bound scales with the server's weight. */
static void
test_balance_factor_and_weights_set_the_bound(void **state)
{
    (void)state;
    enum { N = 4 };
    static const double cs[] = { 0, 1.25, 2.0 };
    for (size_t c = 0; c < sizeof(cs) / sizeof(cs[0]); c++) {
        struct dm_fixture *f = hash_fixture_create(NULL, N, cs[c]);
        uint64_t key = key_of(7);
        int home = pick_key(f, key);
        for (size_t i = 0; i < N; i++) {
            atomic_store(&f->sv->s[i].conns, 3);
        }
        /* T = 14: c = 1.25 allows conns < 1.25 * 15 / 4 = 4.69, c = 2 allows < 7.5. */
        atomic_store(&f->sv->s[home].conns, 5);
        int i = pick_key(f, key);
        if (cs[c] == 2.0) {
            assert_int_equal(i, home);
        } else {
            assert_int_not_equal(i, home);
        }
        dm_fixture_destroy(f);
    }

    /* Weights 1 and 3: at T = 7, the heavy one may hold up to 1.25 * 8 * 3 / 4 = 7.5. */
    static const unsigned w[2] = { 1, 3 };
    struct dm_fixture *f = hash_fixture_create(w, 2, 0);
    atomic_store(&f->sv->s[0].conns, 0);
    atomic_store(&f->sv->s[1].conns, 7);
    unsigned heavy = 0;
    for (uint64_t k = 0; k < 1000; k++) {
        heavy += pick_key(f, key_of(k)) == 1;
    }
    assert_true(heavy > 600);
    dm_fixture_destroy(f);
}

/*
 * When the servers under their bound have all been tried, the pick falls
 * back to the least loaded eligible server rather than failing.
 */
static void
test_tried_light_servers_fall_back_to_least_loaded(void **state)
{
    (void)state;
    enum { N = 4 };
    struct dm_fixture *f = hash_fixture_create(NULL, N, 0);
    /* T = 63: the bound is conns < 1.25 * 64 / 4 = 20, which none of 1..3 meets. */
    static const uint64_t conns[N] = { 0, 21, 20, 22 };
    for (size_t i = 0; i < N; i++) {
        atomic_store(&f->sv->s[i].conns, conns[i]);
    }
    f->pick.tried = f->tried;
    f->tried[0] = 1u << 0;
    for (uint64_t k = 0; k < 200; k++) {
        assert_int_equal(pick_key(f, key_of(k)), 2);
    }
    dm_fixture_destroy(f);
}

/* A big pool with one server awake: every key finds it, past a long walk. */
static void
test_mostly_asleep_pool(void **state)
{
    (void)state;
    enum { N = 1024 };
    struct dm_fixture *f = hash_fixture_create(NULL, N, 0);
    for (size_t i = 0; i < N; i++) {
        atomic_store(&f->sv->s[i].host->power, i == 777 ? DM_POWER_AWAKE : DM_POWER_ASLEEP);
    }
    for (uint64_t k = 0; k < 500; k++) {
        assert_int_equal(pick_key(f, key_of(k)), 777);
        dm_counter_add(&f->sv->s[777].conns, 1);
    }
    f->pick.tried = f->tried;
    f->tried[777 / 8] = (uint8_t)(1u << (777 % 8));
    assert_int_equal(pick_key(f, 1), DM_NO_SERVER);
    dm_fixture_destroy(f);
}

/* Four threads share the balancer and the table, as the workers do. */
static void
test_concurrent_picks_add_up(void **state)
{
    (void)state;
    enum { N = 64 };
    struct dm_fixture *f = hash_fixture_create(NULL, N, 0);
    dm_fixture_run_pickers(f, 3, 50000, 1000); /* server 3 down, keys of 0..999 */
    dm_fixture_destroy(f);
}

/* SipHash-2-4's published test vectors (key 00..0f, message 00..len-1), and the key's effect. */
static void
test_hash_keyed_is_siphash(void **state)
{
    (void)state;
    const struct dm_hash_secret k = { 0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL };
    unsigned char msg[64];
    for (int i = 0; i < 64; i++) {
        msg[i] = (unsigned char)i;
    }
    assert_true(dm_hash_keyed(&k, NULL, 0) == 0x726fdb47dd0e0e31ULL);
    assert_true(dm_hash_keyed(&k, msg, 8) == 0x93f5f5799a932462ULL);
    assert_true(dm_hash_keyed(&k, msg, 15) == 0xa129ca6149be45e5ULL);
    assert_true(dm_hash_keyed(&k, msg, 63) == 0x958a324ceb064572ULL);
    /* Another key, another value, for every length. */
    const struct dm_hash_secret other = { k.k0 ^ 1, k.k1 };
    for (size_t len = 0; len <= 64; len++) {
        assert_true(dm_hash_keyed(&k, msg, len) != dm_hash_keyed(&other, msg, len));
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_bytes_ignores_alignment),
        cmocka_unit_test(test_hash_bytes_tells_lengths_and_bytes_apart),
        cmocka_unit_test(test_hash_bytes_avalanches),
        cmocka_unit_test(test_hash_keyed_is_siphash),
        cmocka_unit_test(test_hash_bytes_spreads_sequential_keys),
        cmocka_unit_test(test_create_sets_ops_and_table),
        cmocka_unit_test(test_unusable_and_tried_servers_are_never_picked),
        cmocka_unit_test(test_no_usable_server_gives_no_server),
        cmocka_unit_test(test_keys_at_ring_ends_wrap),
        cmocka_unit_test(test_same_key_same_server_while_loads_are_low),
        cmocka_unit_test(test_keys_spread_by_weight),
        cmocka_unit_test(test_adding_a_server_moves_one_share_of_keys),
        cmocka_unit_test(test_removing_a_server_moves_only_its_keys),
        cmocka_unit_test(test_bounded_load_holds_under_skewed_keys),
        cmocka_unit_test(test_bounded_load_holds_with_random_ends),
        cmocka_unit_test(test_balance_factor_and_weights_set_the_bound),
        cmocka_unit_test(test_tried_light_servers_fall_back_to_least_loaded),
        cmocka_unit_test(test_mostly_asleep_pool),
        cmocka_unit_test(test_concurrent_picks_add_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
