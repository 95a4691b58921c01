#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rh_rng_seed(rh_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull);
    r->state = splitmix64(&x);
}

uint64_t rh_rng_next(rh_rng *r) { return splitmix64(&r->state); }

double rh_rng_uniform(rh_rng *r, double lo, double hi)
{
    double u = (double)(rh_rng_next(r) >> 11) * 0x1.0p-53; /* [0, 1) */
    return lo + (hi - lo) * u;
}

double rh_rng_normal(rh_rng *r)
{
    /* u1 in (0, 1] keeps log() finite. */
    double u1 = ((double)(rh_rng_next(r) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (double)(rh_rng_next(r) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t rh_rng_range(rh_rng *r, uint64_t lo, uint64_t hi)
{
    if (hi <= lo)
        return lo;
    uint64_t span = hi - lo + 1;
    return span == 0 ? rh_rng_next(r) : lo + rh_rng_next(r) % span;
}

uint64_t rh_hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}
