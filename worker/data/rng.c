/* worker/data/rng.c - see rng.h. xoshiro256** (Blackman & Vigna, public domain
 * algorithm) with splitmix64 seeding. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rng_seed(rng_state *r, uint64_t seed, uint64_t a, uint64_t b)
{
    uint64_t x = seed;
    uint64_t h = splitmix64(&x);
    x = h ^ (a * 0xd1342543de82ef95ULL);
    h = splitmix64(&x);
    x = h ^ (b * 0x2545f4914f6cdd1dULL);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_u64(rng_state *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t rng_below(rng_state *r, uint64_t n)
{
    /* Rejection: drop the top sliver that would bias the modulo. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = rng_u64(r);
    } while (x >= limit);
    return x % n;
}

float rng_uniform(rng_state *r) { return (float)(rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float rng_normal(rng_state *r)
{
    double u1 = ((double)(rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0); /* (0,1] */
    double u2 = (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586477 * u2));
}
