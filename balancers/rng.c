#include "balancers/rng.h"

static uint64_t
splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void
dm_rng_init(struct dm_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        r->_s[i] = splitmix64(&seed);
    }
}

static inline uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t
dm_rng_next(struct dm_rng *r)
{
    /* xoshiro256** (Blackman and Vigna). */
    uint64_t *s = r->_s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t
dm_rng_below(struct dm_rng *r, uint64_t n)
{
    /* Lemire's multiply-shift with rejection: unbiased. */
    uint64_t x = dm_rng_next(r);
    __uint128_t m = (__uint128_t)x * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = -n % n;
        while (low < threshold) {
            x = dm_rng_next(r);
            m = (__uint128_t)x * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}
