/* The export checksum (common/checksum.c, docs/design.md §3): our own
 * XXH3-64 must be xxHash's bit for bit, or slots exported by earlier builds
 * (which used libxxhash) would no longer import. Two checks: known answers,
 * which run everywhere; and, where xxhash.h was found at configure time
 * (tests/CMakeLists.txt), every length up to 2 KiB and some large buffers
 * against xxHash itself, with several seeds. */
#include "test_support.h"

#include "checksum.h"

#ifdef RSSM_TEST_HAVE_XXHASH
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SEED = 0x3a3 };

/* xxHash's own test constants (cli/xsum_sanity_check.c). */
#define PRIME32 2654435761u
#define PRIME64 11400714785074694797u

/* xxHash's sanity buffer: byte i is the top byte of PRIME32 * PRIME64^i, so
 * the known answers below can be read against xxHash's published table. */
static uint8_t *sanity_buffer(size_t n)
{
    uint8_t *b = malloc(n ? n : 1);
    assert_non_null(b);
    uint64_t gen = PRIME32;
    for (size_t i = 0; i < n; i++) {
        b[i] = (uint8_t)(gen >> 56);
        gen *= PRIME64;
    }
    return b;
}

typedef struct known {
    size_t len;
    uint64_t seed;
    uint64_t hash;
} known;

/* XXH3_64bits_withSeed of the sanity buffer's first `len` bytes, computed
 * with libxxhash 0.8.1; those up to 2367 bytes are also xxHash's published
 * values. One or more per path: 0, 1-3, 4-8, 9-16, 17-128, 129-240, and the
 * long path (one block, a block boundary, a partial block after two, an
 * overlapping last stripe, a megabyte), each unseeded and seeded (a seed
 * changes the long path's secret). */
static const known k_known[] = {
    {0, 0, 0x2D06800538D394C2u},
    {0, PRIME64, 0xA8A6B918B2F0364Au},
    {1, 0, 0xC44BDFF4074EECDBu},
    {1, PRIME64, 0x032BE332DD766EF8u},
    {6, 0, 0x27B56A84CD2D7325u},
    {6, PRIME64, 0x84589C116AB59AB9u},
    {12, 0, 0xA713DAF0DFBB77E7u},
    {12, PRIME64, 0xE7303E1B2336DE0Eu},
    {24, 0, 0xA3FE70BF9D3510EBu},
    {24, PRIME64, 0x850E80FC35BDD690u},
    {48, 0, 0x397DA259ECBA1F11u},
    {48, PRIME64, 0xADC2CBAA44ACC616u},
    {80, 0, 0xBCDEFBBB2C47C90Au},
    {80, PRIME64, 0xC6DD0CB699532E73u},
    {195, 0, 0xCD94217EE362EC3Au},
    {195, PRIME64, 0xBA68003D370CB3D9u},
    {403, 0, 0xCDEB804D65C6DEA4u},
    {403, PRIME64, 0x6259F6ECFD6443FDu},
    {512, 0, 0x617E49599013CB6Bu},
    {512, PRIME64, 0x3CE457DE14C27708u},
    {2048, 0, 0xDD59E2C3A5F038E0u},
    {2048, PRIME64, 0x66F81670669ABABCu},
    {2099, 0, 0xC6B9D9B3FC9AC765u},
    {2099, PRIME64, 0x184F316843663974u},
    {2240, 0, 0x6E73A90539CF2948u},
    {2240, PRIME64, 0x757BA8487D1B5247u},
    {2367, 0, 0xCB37AEB9E5D361EDu},
    {2367, PRIME64, 0xD2DB3415B942B42Au},
    {(1u << 20) + 7, 0, 0x525A20EDFB0DE181u},
    {(1u << 20) + 7, PRIME64, 0x8ABF8D2A5DFBCEC0u},
};

/* Counts mismatches and keeps the first, so a failing test still frees its
 * buffers (no leak report on top of the failure in the sanitizer build). */
typedef struct tally {
    size_t bad;
    char first[160];
} tally;

static void expect_hash(tally *t, uint64_t got, uint64_t want, size_t len, uint64_t seed, const char *what)
{
    if (got == want)
        return;
    if (t->bad++ == 0)
        snprintf(t->first, sizeof t->first, "%s: length %zu, seed %#llx: got %#018llx, want %#018llx", what, len,
                 (unsigned long long)seed, (unsigned long long)got, (unsigned long long)want);
}

static void report(const tally *t)
{
    if (t->bad)
        fail_msg("%zu mismatches; the first: %s", t->bad, t->first);
}

static void test_known_answers(void **state)
{
    (void)state;
    tally t = {0};
    const size_t n = (1u << 20) + 7;
    uint8_t *b = sanity_buffer(n);
    uint8_t *moved = malloc(4096 + 1);
    assert_non_null(moved);
    for (size_t i = 0; i < sizeof k_known / sizeof k_known[0]; i++) {
        const known *k = &k_known[i];
        /* As xxHash's table hashes it: no pointer at all for length 0. */
        const void *data = k->len ? b : NULL;
        expect_hash(&t, rssm_xxh3_64(data, k->len, k->seed), k->hash, k->len, k->seed, "known answer");
        /* Any alignment: the same bytes one past where malloc aligns them. */
        if (k->len > 0 && k->len <= 4096) {
            memcpy(moved + 1, b, k->len);
            expect_hash(&t, rssm_xxh3_64(moved + 1, k->len, k->seed), k->hash, k->len, k->seed,
                        "known answer, unaligned");
        }
    }
    free(moved);
    free(b);
    report(&t);
}

static void test_matches_xxhash(void **state)
{
    (void)state;
#ifndef RSSM_TEST_HAVE_XXHASH
    print_message("[  SKIP    ] xxhash.h was not found at configure time: no cross-check with xxHash here "
                  "(the known answers still ran)\n");
    skip();
#else
    tally t = {0};
    rh_rng rng;
    rh_rng_seed(&rng, SEED, 0);
    /* One random buffer: 1 MiB and odd tails past it (partial blocks, an
     * overlapping last stripe), and the short lengths from offsets that
     * cycle through 0..7 (the reads go through memcpy at any alignment). */
    const size_t big = (1u << 20) + 1029;
    uint8_t *b = malloc(big);
    assert_non_null(b);
    for (size_t i = 0; i < big; i++)
        b[i] = (uint8_t)(rh_rng_next(&rng) >> 56);

    /* 0, 1, the sanity table's seed, a seed whose halves are both large,
     * and random ones: the seed enters every path differently (added,
     * subtracted, byte-swapped, and as the long path's secret). */
    uint64_t seeds[8] = {0, 1, PRIME64, 0xffffffffffffffffu, 0x8000000000000001u};
    for (size_t s = 5; s < 8; s++)
        seeds[s] = rh_rng_next(&rng);

    for (size_t s = 0; s < 8; s++) {
        for (size_t len = 0; len <= 2048; len++) {
            const uint8_t *p = b + (len * 7 + s) % 8; /* every alignment */
            expect_hash(&t, rssm_xxh3_64(p, len, seeds[s]), XXH3_64bits_withSeed(p, len, seeds[s]), len, seeds[s],
                        "against xxHash");
        }
        /* Seed 0 is XXH3_64bits, not only XXH3_64bits_withSeed(.., 0). */
        if (seeds[s] == 0)
            for (size_t len = 0; len <= 2048; len += 61)
                expect_hash(&t, rssm_xxh3_64(b, len, 0), XXH3_64bits(b, len), len, 0, "against XXH3_64bits");
    }

    const size_t tails[] = {0, 1, 63, 64, 65, 1023, 1024, 1029};
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        const size_t len = (1u << 20) + tails[i];
        const uint64_t seed = seeds[i % 8];
        expect_hash(&t, rssm_xxh3_64(b, len, seed), XXH3_64bits_withSeed(b, len, seed), len, seed, "against xxHash");
    }
    /* Random lengths up to 64 KiB from random offsets. */
    for (int i = 0; i < 64; i++) {
        const size_t len = (size_t)rh_rng_range(&rng, 2049, 65536);
        const size_t off = (size_t)rh_rng_range(&rng, 0, 4096);
        const uint64_t seed = rh_rng_next(&rng);
        expect_hash(&t, rssm_xxh3_64(b + off, len, seed), XXH3_64bits_withSeed(b + off, len, seed), len, seed,
                    "against xxHash");
    }
    free(b);
    report(&t);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_matches_xxhash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
