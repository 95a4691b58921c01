/* The export checksum (docs/design.md §3): XXH3-64, our own scalar C11
 * copy of xxHash's, so the library builds where xxhash.h is not installed.
 * Its results are xxHash 0.8.x's bit for bit (every length, every seed):
 * the export format depends on it, and tests/test_checksum.c holds it to
 * libxxhash. */
#ifndef RSSM_CHECKSUM_H
#define RSSM_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* XXH3_64bits_withSeed(data, n, seed); seed 0 is XXH3_64bits(data, n).
 * data may be NULL when n is 0. */
uint64_t rssm_xxh3_64(const void *data, size_t n, uint64_t seed);

#endif
