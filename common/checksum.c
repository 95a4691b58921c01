/* XXH3-64 (xxHash 0.8.x, by Yann Collet; BSD-2-Clause), written again in
 * plain scalar C11 for the export checksum (docs/design.md §3), so the
 * library needs no xxhash.h. The export format (version 2) is defined by
 * xxHash's results, so this is not an XXH3-like hash but XXH3 itself:
 * tests/test_checksum.c compares it with libxxhash over every length up to
 * 2 KiB and large buffers, with several seeds, and checks known answers.
 * Same structure and names as xxhash.h's scalar path, so the two read side
 * by side. */
#include "checksum.h"

#include <string.h>

#define PRIME32_1 0x9E3779B1u
#define PRIME32_2 0x85EBCA77u
#define PRIME32_3 0xC2B2AE3Du
#define PRIME64_1 0x9E3779B185EBCA87u
#define PRIME64_2 0xC2B2AE3D27D4EB4Fu
#define PRIME64_3 0x165667B19E3779F9u
#define PRIME64_4 0x85EBCA77C2B2AE63u
#define PRIME64_5 0x27D4EB2F165667C5u
#define PRIME_MX1 0x165667919E3779F9u
#define PRIME_MX2 0x9FB21C651E98DF25u

enum {
    SECRET_SIZE = 192,       /* the default secret's */
    SECRET_SIZE_MIN = 136,
    MIDSIZE_MAX = 240,       /* longer inputs take the striped (long) path */
    MIDSIZE_STARTOFFSET = 3,
    MIDSIZE_LASTOFFSET = 17,
    STRIPE_LEN = 64,
    SECRET_CONSUME_RATE = 8, /* secret bytes each stripe moves on */
    ACC_NB = STRIPE_LEN / 8,
    SECRET_LASTACC_START = 7,
    SECRET_MERGEACCS_START = 11,
};

/* xxHash's kSecret: every seeded long hash derives its secret from it. */
static const uint8_t k_secret[SECRET_SIZE] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

/* Reads through memcpy (any alignment, no aliasing questions), in host
 * order, which is little-endian on every machine rssm targets (the export
 * header assumes it too, common/pool_io.c). */
static uint32_t read32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t read64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void write64(uint8_t *p, uint64_t v) { memcpy(p, &v, sizeof v); }

static uint32_t swap32(uint32_t x)
{
    return ((x << 24) & 0xff000000u) | ((x << 8) & 0x00ff0000u) | ((x >> 8) & 0x0000ff00u) |
           ((x >> 24) & 0x000000ffu);
}

static uint64_t swap64(uint64_t x) { return ((uint64_t)swap32((uint32_t)x) << 32) | swap32((uint32_t)(x >> 32)); }

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* The 128-bit product of a and b, its halves xor-ed, from four 32x32
 * products: no __int128, and only the short and mid-size paths and the
 * final merge use it, never the long path's inner loop. */
static uint64_t mul128_fold64(uint64_t a, uint64_t b)
{
    const uint64_t lo_lo = (a & 0xffffffffu) * (b & 0xffffffffu);
    const uint64_t hi_lo = (a >> 32) * (b & 0xffffffffu);
    const uint64_t lo_hi = (a & 0xffffffffu) * (b >> 32);
    const uint64_t hi_hi = (a >> 32) * (b >> 32);
    const uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
    const uint64_t upper = (hi_lo >> 32) + (cross >> 32) + hi_hi;
    const uint64_t lower = (cross << 32) | (lo_lo & 0xffffffffu);
    return lower ^ upper;
}

static uint64_t xxh64_avalanche(uint64_t h)
{
    h ^= h >> 33;
    h *= PRIME64_2;
    h ^= h >> 29;
    h *= PRIME64_3;
    h ^= h >> 32;
    return h;
}

static uint64_t avalanche(uint64_t h)
{
    h ^= h >> 37;
    h *= PRIME_MX1;
    h ^= h >> 32;
    return h;
}

static uint64_t rrmxmx(uint64_t h, uint64_t len)
{
    h ^= rotl64(h, 49) ^ rotl64(h, 24);
    h *= PRIME_MX2;
    h ^= (h >> 35) + len;
    h *= PRIME_MX2;
    h ^= h >> 28;
    return h;
}

static uint64_t len_0to16(const uint8_t *in, size_t len, const uint8_t *secret, uint64_t seed)
{
    if (len > 8) {
        const uint64_t bitflip1 = (read64(secret + 24) ^ read64(secret + 32)) + seed;
        const uint64_t bitflip2 = (read64(secret + 40) ^ read64(secret + 48)) - seed;
        const uint64_t lo = read64(in) ^ bitflip1;
        const uint64_t hi = read64(in + len - 8) ^ bitflip2;
        return avalanche(len + swap64(lo) + hi + mul128_fold64(lo, hi));
    }
    if (len >= 4) {
        seed ^= (uint64_t)swap32((uint32_t)seed) << 32;
        const uint32_t in1 = read32(in);
        const uint32_t in2 = read32(in + len - 4);
        const uint64_t bitflip = (read64(secret + 8) ^ read64(secret + 16)) - seed;
        const uint64_t in64 = in2 + ((uint64_t)in1 << 32);
        return rrmxmx(in64 ^ bitflip, len);
    }
    if (len > 0) {
        const uint32_t combined = ((uint32_t)in[0] << 16) | ((uint32_t)in[len >> 1] << 24) |
                                  (uint32_t)in[len - 1] | ((uint32_t)len << 8);
        const uint64_t bitflip = (read32(secret) ^ read32(secret + 4)) + seed;
        return xxh64_avalanche((uint64_t)combined ^ bitflip);
    }
    return xxh64_avalanche(seed ^ read64(secret + 56) ^ read64(secret + 64));
}

static uint64_t mix16(const uint8_t *in, const uint8_t *secret, uint64_t seed)
{
    return mul128_fold64(read64(in) ^ (read64(secret) + seed), read64(in + 8) ^ (read64(secret + 8) - seed));
}

static uint64_t len_17to128(const uint8_t *in, size_t len, const uint8_t *secret, uint64_t seed)
{
    uint64_t acc = len * PRIME64_1;
    if (len > 32) {
        if (len > 64) {
            if (len > 96) {
                acc += mix16(in + 48, secret + 96, seed);
                acc += mix16(in + len - 64, secret + 112, seed);
            }
            acc += mix16(in + 32, secret + 64, seed);
            acc += mix16(in + len - 48, secret + 80, seed);
        }
        acc += mix16(in + 16, secret + 32, seed);
        acc += mix16(in + len - 32, secret + 48, seed);
    }
    acc += mix16(in, secret, seed);
    acc += mix16(in + len - 16, secret + 16, seed);
    return avalanche(acc);
}

static uint64_t len_129to240(const uint8_t *in, size_t len, const uint8_t *secret, uint64_t seed)
{
    uint64_t acc = len * PRIME64_1;
    const size_t rounds = len / 16;
    for (size_t i = 0; i < 8; i++)
        acc += mix16(in + 16 * i, secret + 16 * i, seed);
    acc = avalanche(acc);
    for (size_t i = 8; i < rounds; i++)
        acc += mix16(in + 16 * i, secret + 16 * (i - 8) + MIDSIZE_STARTOFFSET, seed);
    acc += mix16(in + len - 16, secret + SECRET_SIZE_MIN - MIDSIZE_LASTOFFSET, seed);
    return avalanche(acc);
}

/* One 64-byte stripe into the eight lanes: no branches, 32x32 products
 * only, so the compiler keeps the lanes in registers (or vectorises). */
static void accumulate_512(uint64_t acc[ACC_NB], const uint8_t *in, const uint8_t *secret)
{
    for (int i = 0; i < ACC_NB; i++) {
        const uint64_t data = read64(in + 8 * i);
        const uint64_t key = data ^ read64(secret + 8 * i);
        acc[i ^ 1] += data;
        acc[i] += (key & 0xffffffffu) * (key >> 32);
    }
}

static void accumulate(uint64_t acc[ACC_NB], const uint8_t *in, const uint8_t *secret, size_t stripes)
{
    for (size_t n = 0; n < stripes; n++)
        accumulate_512(acc, in + n * STRIPE_LEN, secret + n * SECRET_CONSUME_RATE);
}

static void scramble(uint64_t acc[ACC_NB], const uint8_t *secret)
{
    for (int i = 0; i < ACC_NB; i++) {
        uint64_t a = acc[i];
        a ^= a >> 47;
        a ^= read64(secret + 8 * i);
        a *= PRIME32_1;
        acc[i] = a;
    }
}

/* Inputs over 240 bytes: blocks of 16 stripes, the lanes scrambled after
 * each block, then the last (possibly overlapping) stripe. A seed enters
 * only through the secret, derived from kSecret as xxHash's
 * XXH3_initCustomSecret does. */
static uint64_t hash_long(const uint8_t *in, size_t len, uint64_t seed)
{
    uint8_t secret[SECRET_SIZE];
    for (size_t i = 0; i < SECRET_SIZE / 16; i++) {
        write64(secret + 16 * i, read64(k_secret + 16 * i) + seed);
        write64(secret + 16 * i + 8, read64(k_secret + 16 * i + 8) - seed);
    }
    uint64_t acc[ACC_NB] = {PRIME32_3, PRIME64_1, PRIME64_2, PRIME64_3, PRIME64_4, PRIME32_2, PRIME64_5, PRIME32_1};
    const size_t stripes_per_block = (SECRET_SIZE - STRIPE_LEN) / SECRET_CONSUME_RATE;
    const size_t block_len = STRIPE_LEN * stripes_per_block;
    const size_t blocks = (len - 1) / block_len;
    for (size_t n = 0; n < blocks; n++) {
        accumulate(acc, in + n * block_len, secret, stripes_per_block);
        scramble(acc, secret + SECRET_SIZE - STRIPE_LEN);
    }
    const size_t stripes = ((len - 1) - block_len * blocks) / STRIPE_LEN;
    accumulate(acc, in + blocks * block_len, secret, stripes);
    accumulate_512(acc, in + len - STRIPE_LEN, secret + SECRET_SIZE - STRIPE_LEN - SECRET_LASTACC_START);

    uint64_t result = len * PRIME64_1;
    const uint8_t *merge = secret + SECRET_MERGEACCS_START;
    for (int i = 0; i < 4; i++)
        result += mul128_fold64(acc[2 * i] ^ read64(merge + 16 * i), acc[2 * i + 1] ^ read64(merge + 16 * i + 8));
    return avalanche(result);
}

uint64_t rssm_xxh3_64(const void *data, size_t n, uint64_t seed)
{
    const uint8_t *in = data;
    if (n <= 16)
        return len_0to16(in, n, k_secret, seed);
    if (n <= 128)
        return len_17to128(in, n, k_secret, seed);
    if (n <= MIDSIZE_MAX)
        return len_129to240(in, n, k_secret, seed);
    return hash_long(in, n, seed);
}
