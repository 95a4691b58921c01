/* Conversions between fp32 and the 16-bit storage types, rounding to nearest
 * even as GPU conversion instructions do, so every backend stores the same
 * bits for the same value. */
#ifndef RSSM_DTYPE_H
#define RSSM_DTYPE_H

#include "rssm.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t rssm_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float rssm_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float rssm_bf16_to_f32(uint16_t h) { return rssm_bits_f32((uint32_t)h << 16); }

static inline uint16_t rssm_f32_to_bf16(float f)
{
    uint32_t u = rssm_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN, quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float rssm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) /* inf or NaN */
        return rssm_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return rssm_bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return rssm_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t rssm_f32_to_f16(float f)
{
    uint32_t u = rssm_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) { /* below the smallest normal 2^-14: subnormal */
        if (absu < 0x33000000u) /* below half the smallest subnormal: zero */
            return (uint16_t)sign;
        uint32_t exp = absu >> 23;
        uint32_t man = (absu & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp; /* 14..24 + ... */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u) - 0x38000000u; /* rebias 127 -> 15 */
    return (uint16_t)(sign | (r >> 13));
}

static inline size_t rssm_dtype_size(rssm_dtype t) { return t == RSSM_DTYPE_F32 ? 4 : 2; }

/* Element i of an array of dtype t, as fp32. Through memcpy, so `base`
 * may have any alignment (slot bytes being imported can sit at any offset
 * of a caller's buffer); compilers turn it into a plain load. */
static inline float rssm_load(const void *base, rssm_dtype t, size_t i)
{
    if (t == RSSM_DTYPE_F16 || t == RSSM_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, (const unsigned char *)base + 2 * i, sizeof h);
        return t == RSSM_DTYPE_F16 ? rssm_f16_to_f32(h) : rssm_bf16_to_f32(h);
    }
    float f;
    memcpy(&f, (const unsigned char *)base + 4 * i, sizeof f);
    return f;
}

/* Stores fp32 v as element i of an array of dtype t, rounding to nearest
 * even; any alignment, as rssm_load. */
static inline void rssm_store(void *base, rssm_dtype t, size_t i, float v)
{
    if (t == RSSM_DTYPE_F16 || t == RSSM_DTYPE_BF16) {
        const uint16_t h = t == RSSM_DTYPE_F16 ? rssm_f32_to_f16(v) : rssm_f32_to_bf16(v);
        memcpy((unsigned char *)base + 2 * i, &h, sizeof h);
        return;
    }
    memcpy((unsigned char *)base + 4 * i, &v, sizeof v);
}

/* The value fp32 v takes after a round trip through dtype t. */
static inline float rssm_round_to(rssm_dtype t, float v)
{
    switch (t) {
    case RSSM_DTYPE_F16: return rssm_f16_to_f32(rssm_f32_to_f16(v));
    case RSSM_DTYPE_BF16: return rssm_bf16_to_f32(rssm_f32_to_bf16(v));
    default: return v;
    }
}

#endif
