// Conversions between fp32 and the 16-bit storage types, in integer
// operations, bit for bit the same as common/dtype.h: the CPU, Vulkan and
// CUDA backends must store the same bits for the same value, and the GLSL
// built-ins (packHalf2x16) leave the rounding mode to the implementation.
#ifndef RSSM_DTYPE_GLSL
#define RSSM_DTYPE_GLSL

float rssm_bf16_to_f32(uint h) { return uintBitsToFloat(h << 16); }

uint rssm_f32_to_bf16(float f)
{
    uint u = floatBitsToUint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) // NaN stays NaN, quiet
        return ((u >> 16) | 0x0040u) & 0xffffu;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

float rssm_f16_to_f32(uint h)
{
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint man = h & 0x3ffu;
    if (e == 0x1fu)
        return uintBitsToFloat(sign | 0x7f800000u | (man << 13));
    if (e == 0u) {
        if (man == 0u)
            return uintBitsToFloat(sign);
        float v = float(man) * 5.9604644775390625e-8; // man * 2^-24, exact
        return sign != 0u ? -v : v;
    }
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (man << 13));
}

uint rssm_f32_to_f16(float f)
{
    uint u = floatBitsToUint(f);
    uint sign = (u >> 16) & 0x8000u;
    uint absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u)
        return sign | 0x7e00u;
    if (absu >= 0x477ff000u) // rounds to >= 65520: inf
        return sign | 0x7c00u;
    if (absu < 0x38800000u) { // below 2^-14: subnormal or zero
        if (absu < 0x33000000u)
            return sign;
        uint e = absu >> 23;
        uint man = (absu & 0x7fffffu) | 0x800000u;
        uint shift = 126u - e;
        uint half_ = man >> shift;
        uint rem = man & ((1u << shift) - 1u);
        uint mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half_ & 1u) != 0u))
            half_++;
        return sign | half_;
    }
    uint r = absu + 0xfffu + ((absu >> 13) & 1u) - 0x38000000u;
    return sign | (r >> 13);
}

// A 16-bit word of dtype `dt` (F16 or BF16) as fp32, and back.
float rssm_from16(uint dt, uint h)
{
    return dt == RSSM_CODE_DTYPE_BF16 ? rssm_bf16_to_f32(h) : rssm_f16_to_f32(h);
}

uint rssm_to16(uint dt, float f)
{
    return dt == RSSM_CODE_DTYPE_BF16 ? rssm_f32_to_bf16(f) : rssm_f32_to_f16(f);
}

// The value f takes after a round trip through fp16.
float rssm_round_f16(float f) { return rssm_f16_to_f32(rssm_f32_to_f16(f)); }

// True if a finite value of x is one that ring dtype `dt` rounds to
// infinity (docs/design.md §2: the row is then re-run as a flush). NaN and
// infinities were not finite to begin with.
bool ring_overflows(uint dt, vec4 x)
{
    if (dt == RSSM_CODE_DTYPE_F32)
        return false;
    const float limit = dt == RSSM_CODE_DTYPE_F16 ? RSSM_F16_OVERFLOW : RSSM_BF16_OVERFLOW;
    const bvec4 big = greaterThanEqual(abs(x), vec4(limit)), inf = isinf(x);
    return (big.x && !inf.x) || (big.y && !inf.y) || (big.z && !inf.z) || (big.w && !inf.w);
}

// Typed loads and stores on a buffer of 32-bit words `BUF.w[]` holding an array of
// dtype `dt`. Indices count elements from a word offset `base`. 16-bit
// arrays are only ever written in whole words (pairs of elements), so no two
// invocations share a word: the callers arrange pairs or quads per thread.
#define RSSM_DEFINE_LOADS(NAME, BUF)                                               \
    float NAME##_load(uint dt, uint base, uint i)                                   \
    {                                                                               \
        if (dt == RSSM_CODE_DTYPE_F32)                                              \
            return uintBitsToFloat(BUF.w[base + i]);                                \
        uint word = BUF.w[base + (i >> 1)];                                         \
        return rssm_from16(dt, (i & 1u) != 0u ? word >> 16 : word & 0xffffu);       \
    }                                                                               \
    vec2 NAME##_load2(uint dt, uint base, uint i) /* i % 2 == 0 */                  \
    {                                                                               \
        if (dt == RSSM_CODE_DTYPE_F32)                                              \
            return uintBitsToFloat(uvec2(BUF.w[base + i], BUF.w[base + i + 1u]));   \
        uint word = BUF.w[base + (i >> 1)];                                         \
        return vec2(rssm_from16(dt, word & 0xffffu), rssm_from16(dt, word >> 16));  \
    }                                                                               \
    vec4 NAME##_load4(uint dt, uint base, uint i) /* i % 4 == 0 */                  \
    {                                                                               \
        if (dt == RSSM_CODE_DTYPE_F32)                                              \
            return uintBitsToFloat(uvec4(BUF.w[base + i], BUF.w[base + i + 1u],     \
                                         BUF.w[base + i + 2u], BUF.w[base + i + 3u])); \
        uint a = BUF.w[base + (i >> 1)], b = BUF.w[base + (i >> 1) + 1u];           \
        return vec4(rssm_from16(dt, a & 0xffffu), rssm_from16(dt, a >> 16),         \
                    rssm_from16(dt, b & 0xffffu), rssm_from16(dt, b >> 16));        \
    }
#define RSSM_DEFINE_STORES(NAME, BUF)                                               \
    void NAME##_store2(uint dt, uint base, uint i, vec2 x) /* i % 2 == 0 */         \
    {                                                                               \
        if (dt == RSSM_CODE_DTYPE_F32) {                                            \
            BUF.w[base + i] = floatBitsToUint(x.x);                                 \
            BUF.w[base + i + 1u] = floatBitsToUint(x.y);                            \
        } else {                                                                    \
            BUF.w[base + (i >> 1)] = rssm_to16(dt, x.x) | (rssm_to16(dt, x.y) << 16); \
        }                                                                           \
    }                                                                               \
    void NAME##_store4(uint dt, uint base, uint i, vec4 x) /* i % 4 == 0 */         \
    {                                                                               \
        NAME##_store2(dt, base, i, x.xy);                                           \
        NAME##_store2(dt, base, i + 2u, x.zw);                                      \
    }

#endif
