/* A small seeded random generator for traces and benchmarks: splitmix64.
 * Deterministic across platforms, so a seed names the same trace everywhere
 * (a failing case can be rerun with `rssm conform --seed N --case NAME`). */
#ifndef RH_RNG_H
#define RH_RNG_H

#include <stdint.h>

typedef struct rh_rng {
    uint64_t state;
} rh_rng;

/* Seeds the generator; `stream` separates independent sequences drawn from
 * one user seed (one per case, one per tensor). */
void rh_rng_seed(rh_rng *r, uint64_t seed, uint64_t stream);

uint64_t rh_rng_next(rh_rng *r);

/* Uniform in [lo, hi). */
double rh_rng_uniform(rh_rng *r, double lo, double hi);

/* Standard normal (Box-Muller; one value per call, no cached spare, so the
 * sequence does not depend on call parity). */
double rh_rng_normal(rh_rng *r);

/* Uniform integer in [lo, hi]. */
uint64_t rh_rng_range(rh_rng *r, uint64_t lo, uint64_t hi);

/* A stable 64-bit hash of a string (FNV-1a), to derive a case's stream from
 * its name: adding a case does not change the others' traces. */
uint64_t rh_hash_str(const char *s);

#endif
