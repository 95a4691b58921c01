/*
 * The decode step on host memory (see cpu_kernels.h for the contract and
 * docs/design.md §1 for the math).
 *
 * Shape of one call, for one (row, layer, value head), n = write_pos:
 *   1. load q, k, v; normalise, scale; compute the gate (g, alpha, beta);
 *   2. walk the ring newest to oldest once: decays gamma_j and Gamma, the
 *      weighted keys W_j = k_j * gamma_j * alpha (the same vectors serve the
 *      readout coefficients and the flush; GDN forms them only on a flush,
 *      its readout scales k_j . x by the scalar decay instead), and the 2n
 *      coefficients c_j(q) = W_j . q, c_j(k) = W_j . k;
 *   3. the ring part of S̄q and S̄k for every value row: one n-term sum per
 *      row, computed for all rows at once;
 *   4. one pass over the checkpoint rows, four at a time: both dot products
 *      C[v] . (aG*q) and C[v] . (aG*k) share each load of C[v]; on a flush d
 *      and o of the block, then the new rows C'[v] = C[v]*aG + sum_j d_j[v] W_j + d[v] k
 *      are written right away, while the block is still in L1, so C is read
 *      from memory once and written once;
 *   5. no flush: d and o for all rows, as vectors, and the append of
 *      (d, k, g) to the ring.
 * Packed decode is this with n = 0 and every step a flush: the same code,
 * hence bit-identical to replay with L = 1 within one build and variant.
 *
 * Why it is shaped so (measured on a 2-core Zen 4 VM, 64 KiB fp32 heads):
 * reading a head costs nearly as much as reading and writing it, so replay
 * only wins if its readout streams C at memory speed and the rest stays
 * small. Compute is not hidden behind the stream: work done between the
 * loads of C (the per-head setup, the ring terms, scalar tails) adds to the
 * step almost one for one. Hence FMA, q and k held in registers for the
 * whole pass (AVX-512), no per-row scalar work on readout-only steps, and
 * the flush's rank-(n+1) update register-blocked so it runs near the FMA
 * peak, which is what bounds it.
 *
 * Elementwise loops over K or V are plain loops over contiguous
 * restrict-qualified arrays, which the compiler vectorises. Reductions keep
 * independent partial sums added in a fixed order, written with explicit
 * vectors (see "sums and blocks"). Results are deterministic for a given
 * build and variant (the thread count does not change them), but variants
 * differ in the last bits: FMA contraction and the shape of the sums depend
 * on the vector width. Every variant meets the oracle tolerances.
 *
 * The file has two parts: the shared scalar code and the dispatch
 * (RSSM_CPU_KERNELS_BODY undefined), and the body, which depends on the
 * vector width and which the first part includes once per instruction-set
 * variant (see "variants").
 */
#ifndef RSSM_CPU_KERNELS_BODY

/* Two code generation settings this file depends on, pinned here so that a
 * change of build flags cannot undo them:
 * - FMA contraction on: -std=c11 turns it off, and without it every
 *   multiply-add of the dot products and the flush is two instructions,
 *   which made the flush (the bound of the replay cycle) a third slower.
 *   Where the target has no FMA (the SSE2 baseline) nothing changes. Packed
 *   and L = 1 replay run the same code, so they still agree bit for bit;
 *   different variants do not (see above);
 * - no trapping math: the branch-free conversions and fast_expf are selects
 *   between values computed unconditionally, and under the default
 *   -ftrapping-math GCC will not if-convert a select whose arms hold
 *   floating-point operations, so no loop calling them would vectorise.
 *   Nothing here reads the floating-point flags; no result changes. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast", "no-trapping-math")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT ON
#endif

#include "cpu_kernels.h"
#include "dtype.h"

#include <math.h>
#include <string.h>
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(RSSM_CPU_PLAIN_C)
#include <immintrin.h> /* F16C conversions; usable under a target pragma */
#endif

/* Each scratch array starts on a 64-byte boundary. */
#define RSSM_SCRATCH_ALIGN_FLOATS 16u

/* ------------------------------------------------------------ conversions */

/* Same results as dtype.h, written as selects instead of branches. */
static inline float f16_to_f32(uint16_t h)
{
    const uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    const uint32_t u = ((uint32_t)h & 0x7fffu) << 13; /* exponent and mantissa in place */
    const uint32_t exp = u & 0x0f800000u;
    const uint32_t normal = u + 0x38000000u;           /* rebias 15 -> 127 */
    const uint32_t infnan = u + 0x70000000u;           /* exponent 31 -> 255 */
    /* zero and subnormals: (1.man * 2^-14) - 2^-14 is exact */
    const uint32_t sub = rssm_f32_bits(rssm_bits_f32(u + 0x38800000u) - rssm_bits_f32(0x38800000u));
    uint32_t r = exp == 0 ? sub : normal;
    r = exp == 0x0f800000u ? infnan : r;
    return rssm_bits_f32(r | sign);
}

static inline uint16_t f32_to_f16(float f)
{
    const uint32_t u = rssm_f32_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    /* below 2^-14: adding 0.5 (whose ulp is 2^-24, the smallest fp16
     * subnormal) rounds to nearest even in hardware */
    const uint32_t sub = rssm_f32_bits(rssm_bits_f32(a) + 0.5f) - 0x3f000000u;
    /* normal: rebias 127 -> 15 and round the 13 dropped bits to nearest even */
    const uint32_t norm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    uint32_t r = a < 0x38800000u ? sub : norm;
    r = a >= 0x477ff000u ? 0x7c00u : r;
    r = a > 0x7f800000u ? 0x7e00u : r;
    return (uint16_t)(sign | r);
}

static inline float bf16_to_f32(uint16_t h) { return rssm_bits_f32((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f)
{
    const uint32_t u = rssm_f32_bits(f);
    const uint32_t nan = (u >> 16) | 0x0040u;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

float rssm_cpu_f16_to_f32(uint16_t h) { return f16_to_f32(h); }
uint16_t rssm_cpu_f32_to_f16(float f) { return f32_to_f16(f); }
uint16_t rssm_cpu_f32_to_bf16(float f) { return f32_to_bf16(f); }

static size_t dtype_bytes(uint32_t t) { return t == RSSM_CODE_DTYPE_F32 ? 4 : 2; }

/* --------------------------------------------------------------- math */

/* Cephes' expf: x = k ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2),
 * a degree-7 polynomial for e^r, and 2^k built in the exponent bits. No
 * branches, so loops over it vectorise; no libm call, so every decay is
 * computed the same way on every platform. */
static inline float fast_expf(float x)
{
    /* NaN takes the integer path as 0 (converting NaN to an integer is
     * undefined behaviour) and comes back as itself from the final select. */
    float xc = x == x ? x : 0.0f;
    xc = xc < -87.0f ? -87.0f : xc;
    xc = xc > 88.0f ? 88.0f : xc;
    /* round to nearest: adding 1.5 * 2^23 pushes the fraction out */
    const float kf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e = p * (r * r) + r + 1.0f;
    /* kf is an integer in [-126, 127], so 2^kf is a normal float */
    const float scale = rssm_bits_f32((uint32_t)((int32_t)kf + 127) << 23);
    const float y = e * scale;
    return x != x ? x : y;
}

float rssm_cpu_expf(float x) { return fast_expf(x); }

static float softplus(float x)
{
    return x > RSSM_SOFTPLUS_THRESHOLD ? x : log1pf(expf(x));
}

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ------------------------------------------------------ sums and blocks
 *
 * Every dot product over K keeps RSSM_LANES = 8 lanes of partial sums (lane
 * l adds the products of the elements i = l mod 8; several independent sets
 * of them where the vector width allows, see RSSM_SETS) and adds the lanes
 * in one fixed tree: t_l = s_l + s_(l+4), then (t_0 + t_2) + (t_1 + t_3). */
#define RSSM_LANES 8u
/* Checkpoint rows per block of the row pass; V is a multiple of 4. */
#define RSSM_ROW_BLOCK 4u

/* s[0..8) -> the tree. `tail` (n % 8 == 4: the last four products, else
 * NULL) is added to lanes 0..3 first, as their last terms. */
static inline float tree_sum(const float *s, const float *tail)
{
    float t[4];
    for (uint32_t l = 0; l < 4; l++)
        t[l] = (tail ? s[l] + tail[l] : s[l]) + s[l + 4];
    return (t[0] + t[2]) + (t[1] + t[3]);
}

/* ------------------------------------------------------------ scratch */

static size_t round_up(size_t n) { return (n + RSSM_SCRATCH_ALIGN_FLOATS - 1) / RSSM_SCRATCH_ALIGN_FLOATS * RSSM_SCRATCH_ALIGN_FLOATS; }

/* Where each array of one call's scratch lives. */
typedef struct scratch_map {
    float *q, *k, *xq, *xk, *aG, *alpha, *g, *v, *d, *o, *rq, *rk;
    float *s;          /* KDA: running sum of the ring's log-decays */
    float *row, *rout; /* a block of bf16 checkpoint rows, old and new, as fp32 */
    float *W;      /* [cap][K] weighted ring keys */
    float *D;      /* [cap][V] ring d as fp32 (16-bit rings only) */
    float *cq, *ck; /* [cap] c_j(q), c_j(k) */
    float *wg;      /* [cap] GDN: the decay gamma_j * alpha of each entry */
} scratch_map;

static size_t scratch_layout(const rssm_kernel_params *p, float *base, scratch_map *m)
{
    const size_t K = p->head_k, V = p->head_v, cap = p->ring_cap;
    size_t at = 0;
#define TAKE(field, count)                         \
    do {                                           \
        if (m)                                     \
            m->field = base + at;                  \
        at += round_up(count);                     \
    } while (0)
    TAKE(q, K); TAKE(k, K); TAKE(xq, K); TAKE(xk, K); TAKE(aG, K); TAKE(alpha, K);
    TAKE(g, K); TAKE(s, K);
    TAKE(row, RSSM_ROW_BLOCK * K); TAKE(rout, RSSM_ROW_BLOCK * K);
    TAKE(v, V); TAKE(d, V); TAKE(o, V); TAKE(rq, V); TAKE(rk, V);
    TAKE(W, cap * K); TAKE(D, cap * V);
    TAKE(cq, cap); TAKE(ck, cap); TAKE(wg, cap);
#undef TAKE
    return at;
}

size_t rssm_cpu_scratch_floats(const rssm_kernel_params *p) { return scratch_layout(p, NULL, NULL); }

/* The checkpoint is one sequential stream per head (and across the heads of
 * a work item), which the hardware prefetcher follows best alone: software
 * prefetching its rows, ahead or at the start of a head, made steps slower.
 * The ring's small scattered reads are what it cannot predict; requesting
 * them up front gains a few percent. */
static inline void prefetch_bytes(const void *p, size_t bytes)
{
#if defined(__GNUC__)
    for (size_t at = 0; at < bytes; at += 64)
        __builtin_prefetch((const char *)p + at, 0, 3);
#else
    (void)p;
    (void)bytes;
#endif
}

/* 1 if a finite value of x[0..n) is one that ring dtype t rounds to
 * infinity (docs/design.md §2: such a row is re-run as a flush). NaN and
 * infinities were not finite to begin with and are carried as they are. */
static inline int ring_overflows(uint32_t t, const float *x, uint32_t n)
{
    const float limit = t == RSSM_CODE_DTYPE_F16 ? RSSM_F16_OVERFLOW
                        : t == RSSM_CODE_DTYPE_BF16 ? RSSM_BF16_OVERFLOW : INFINITY;
    int over = 0;
    for (uint32_t i = 0; i < n; i++)
        over |= fabsf(x[i]) >= limit && !isinf(x[i]);
    return over;
}

/* ============================================================ variants
 *
 * The body is compiled for the instruction set of the build flags (the
 * "baseline": SSE2 on a plain x86-64 build) and, with GCC on x86-64 when the
 * flags do not already include AVX2, twice more: for AVX2 + FMA + F16C and
 * for AVX-512 on top of that, picked at run time by what the CPU has.
 * Eight-wide vectors, FMA and the half-precision conversion instructions
 * make the ring and the flush about twice as fast; AVX-512's 32 registers
 * hold q and k through the checkpoint pass (a replay step about 20% faster
 * than AVX2 on Zen 4). A portable binary should not give that up. */
#define RSSM_CPU_KERNELS_BODY
#define RSSM_KSUFFIX base
#include "cpu_kernels.c"
#undef RSSM_KSUFFIX

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__) && \
    !defined(RSSM_CPU_PLAIN_C)
#define RSSM_CPU_AVX2_VARIANT 1
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define RSSM_KSUFFIX avx2
#include "cpu_kernels.c"
#undef RSSM_KSUFFIX
#pragma GCC pop_options
/* The same with AVX-512 registers available: the 32 registers hold q and k
 * (K = 128) for the whole checkpoint pass (see dot2_block_k128). */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma,f16c")
#define RSSM_KSUFFIX avx512
#include "cpu_kernels.c"
#undef RSSM_KSUFFIX
#pragma GCC pop_options
#else
#define RSSM_CPU_AVX2_VARIANT 0
#endif

/* Best first; the baseline last, and always runnable. */
static const rssm_cpu_variant variants[] = {
#if RSSM_CPU_AVX2_VARIANT
    {"avx512", step_head_avx512, variant_isa_avx512},
    {"avx2", step_head_avx2, variant_isa_avx2},
#endif
    {"baseline", step_head_base, variant_isa_base},
};

static int cpu_runs(const rssm_cpu_variant *v)
{
#if RSSM_CPU_AVX2_VARIANT
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                     __builtin_cpu_supports("f16c");
    if (v->step == step_head_avx512)
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    if (v->step == step_head_avx2)
        return avx2;
#endif
    (void)v;
    return 1;
}

const rssm_cpu_variant *rssm_cpu_variant_pick(const char *name)
{
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        const rssm_cpu_variant *v = &variants[i];
        if ((!name || strcmp(name, v->name) == 0) && cpu_runs(v))
            return v;
    }
    return NULL;
}

const char *rssm_cpu_variant_names(void)
{
#if RSSM_CPU_AVX2_VARIANT
    return "avx512, avx2, baseline";
#else
    return "baseline";
#endif
}

void rssm_cpu_step_head(const rssm_kernel_params *p, uint8_t *pool_base, const rssm_cpu_step_io *io,
                        const rssm_row_header *row, uint32_t row_index, uint32_t layer, uint32_t hv,
                        float *scratch)
{
    rssm_cpu_variant_pick(NULL)->step(p, pool_base, io, row, row_index, layer, hv, scratch);
}

#else /* RSSM_CPU_KERNELS_BODY: one variant of the body */

/* ================================================================ body
 *
 * Everything below depends on the vector width: it is compiled once per
 * variant, each time with its own names (RSSM_KFN) and, for the AVX2
 * variant, under `#pragma GCC target`. The aliases keep the code readable. */
#define RSSM_KCAT2(a, b) a##_##b
#define RSSM_KCAT(a, b) RSSM_KCAT2(a, b)
#define RSSM_KFN(name) RSSM_KCAT(name, RSSM_KSUFFIX)
#define vf RSSM_KFN(vf)
#define v4 RSSM_KFN(v4)
#define vload RSSM_KFN(vload)
#define vstore RSSM_KFN(vstore)
#define vzero RSSM_KFN(vzero)
#define load_f32 RSSM_KFN(load_f32)
#define store_f32 RSSM_KFN(store_f32)
#define partial_dot RSSM_KFN(partial_dot)
#define merge_sets RSSM_KFN(merge_sets)
#define dot RSSM_KFN(dot)
#define first_level RSSM_KFN(first_level)
#define last_levels RSSM_KFN(last_levels)
#define dot2_block RSSM_KFN(dot2_block)
#define flush_cols RSSM_KFN(flush_cols)
#define ring_sums RSSM_KFN(ring_sums)
#define flush_rows RSSM_KFN(flush_rows)
#define l2_normalise RSSM_KFN(l2_normalise)
#define step_head RSSM_KFN(step_head)
#define variant_isa RSSM_KFN(variant_isa)

/* GCC and Clang get the partial sums through vector types of the target's
 * width (RSSM_VF floats): their loop vectoriser handles "partial sums" loops
 * badly (it re-vectorises the outer loop with shuffles, 4-5x slower than
 * plain SSE), so the vectors are spelled out. Elsewhere vf is a float and the
 * same loops run lane by lane. RSSM_CPU_PLAIN_C forces the plain loops, so a
 * test build can check that they still agree bit for bit. */
#if defined(__GNUC__) && !defined(RSSM_CPU_PLAIN_C)
#define RSSM_VECTOR_EXT 1
#if defined(__AVX__)
#define RSSM_VF 8u
#else
#define RSSM_VF 4u
#endif
typedef float vf __attribute__((vector_size(RSSM_VF * sizeof(float))));
typedef float v4 __attribute__((vector_size(4 * sizeof(float))));
#else
#define RSSM_VECTOR_EXT 0
#define RSSM_VF 1u
typedef float vf;
#endif
#define RSSM_NV (RSSM_LANES / RSSM_VF) /* vectors per set of partial sums */

#if RSSM_VECTOR_EXT && defined(__F16C__)
#define RSSM_F16C 1
#else
#define RSSM_F16C 0
#endif

static inline vf vload(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* Zero accumulators are assigned one by one: a memset of an accumulator
 * array becomes `rep stos` once the array grows past a few vectors, whose
 * start-up cost per dot product was more than the dot product itself. */
static inline vf vzero(void)
{
    vf z;
    memset(&z, 0, sizeof z);
    return z;
}

/* n elements of dtype `t` (a RSSM_CODE_DTYPE_*) at src, as fp32. */
static void load_f32(float *restrict dst, const void *restrict src, uint32_t t, uint32_t n)
{
    if (t == RSSM_CODE_DTYPE_F16) {
        const uint16_t *restrict s = src;
        uint32_t i = 0;
#if RSSM_F16C
        /* the conversion instruction: exact, as f16_to_f32 (NaN payloads aside) */
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(s + i))));
#endif
        for (; i < n; i++)
            dst[i] = f16_to_f32(s[i]);
    } else if (t == RSSM_CODE_DTYPE_BF16) {
        const uint16_t *restrict s = src;
        for (uint32_t i = 0; i < n; i++)
            dst[i] = bf16_to_f32(s[i]);
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

/* n fp32 values stored as dtype `t`, rounding to nearest even. */
static void store_f32(void *restrict dst, const float *restrict src, uint32_t t, uint32_t n)
{
    if (t == RSSM_CODE_DTYPE_F16) {
        uint16_t *restrict d = dst;
        uint32_t i = 0;
#if RSSM_F16C
        /* the conversion instruction, round to nearest even: the same bits
         * as f32_to_f16 except for NaN payloads (a NaN stays a NaN) */
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(void *)(d + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
        for (; i < n; i++)
            d[i] = f32_to_f16(src[i]);
    } else if (t == RSSM_CODE_DTYPE_BF16) {
        uint16_t *restrict d = dst;
        for (uint32_t i = 0; i < n; i++)
            d[i] = f32_to_bf16(src[i]);
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

/* Independent sets of partial sums per dot product: one set (a single
 * vector with AVX2) is a chain of dependent adds whose latency, not the
 * loads, bounds the loop; four sets (two with 4-wide vectors, whose sets are
 * already two vectors) keep both FMA pipes busy. Set t takes the blocks of
 * RSSM_LANES elements t, t + SETS, ...; the sets are added in a fixed order. */
#define RSSM_SETS (RSSM_VF >= 8u ? 4u : 2u)

static inline void merge_sets(vf s[RSSM_SETS][RSSM_NV], vf out[RSSM_NV])
{
    for (uint32_t u = 0; u < RSSM_NV; u++) {
#if RSSM_SETS == 4
        out[u] = (s[0][u] + s[2][u]) + (s[1][u] + s[3][u]);
#else
        out[u] = s[0][u] + s[1][u];
#endif
    }
}

/* The partial sums of a . b over the first n & ~7 elements. */
static inline void partial_dot(const float *restrict a, const float *restrict b, uint32_t n,
                               vf acc[RSSM_NV])
{
    vf s[RSSM_SETS][RSSM_NV];
    for (uint32_t t = 0; t < RSSM_SETS; t++)
        for (uint32_t u = 0; u < RSSM_NV; u++)
            s[t][u] = vzero();
    uint32_t i = 0;
    for (; i + RSSM_SETS * RSSM_LANES <= n; i += RSSM_SETS * RSSM_LANES)
        for (uint32_t t = 0; t < RSSM_SETS; t++)
            for (uint32_t u = 0; u < RSSM_NV; u++)
                s[t][u] += vload(a + i + t * RSSM_LANES + u * RSSM_VF) *
                           vload(b + i + t * RSSM_LANES + u * RSSM_VF);
    for (; i + RSSM_LANES <= n; i += RSSM_LANES)
        for (uint32_t u = 0; u < RSSM_NV; u++)
            s[0][u] += vload(a + i + u * RSSM_VF) * vload(b + i + u * RSSM_VF);
    merge_sets(s, acc);
}

static inline float dot(const float *restrict a, const float *restrict b, uint32_t n)
{
    vf acc[RSSM_NV];
    partial_dot(a, b, n, acc);
    float s[RSSM_LANES], tail[4];
    memcpy(s, acc, sizeof s);
    const uint32_t i = n & ~(RSSM_LANES - 1); /* n is a multiple of 4 */
    if (i < n)
        for (uint32_t l = 0; l < 4; l++)
            tail[l] = a[i + l] * b[i + l];
    return tree_sum(s, i < n ? tail : NULL);
}

#if RSSM_VECTOR_EXT
/* First tree level of one set of partial sums: lanes l and l + 4, with the
 * tail products, if any, added to lanes 0..3 first (as in tree_sum). */
static inline v4 first_level(const vf acc[RSSM_NV], const v4 *tail)
{
#if RSSM_VF == 8
    const v4 lo = __builtin_shufflevector(acc[0], acc[0], 0, 1, 2, 3);
    const v4 hi = __builtin_shufflevector(acc[0], acc[0], 4, 5, 6, 7);
#else
    const v4 lo = acc[0], hi = acc[1];
#endif
    return (tail ? lo + *tail : lo) + hi;
}

/* The rest of the tree for four rows at once: transpose t_r so lane r of
 * column c_l holds t_r[l], then (c_0 + c_2) + (c_1 + c_3). */
static inline v4 last_levels(v4 t0, v4 t1, v4 t2, v4 t3)
{
    const v4 a = __builtin_shufflevector(t0, t1, 0, 4, 1, 5);
    const v4 b = __builtin_shufflevector(t0, t1, 2, 6, 3, 7);
    const v4 c = __builtin_shufflevector(t2, t3, 0, 4, 1, 5);
    const v4 e = __builtin_shufflevector(t2, t3, 2, 6, 3, 7);
    const v4 c0 = __builtin_shufflevector(a, c, 0, 1, 4, 5);
    const v4 c1 = __builtin_shufflevector(a, c, 2, 3, 6, 7);
    const v4 c2 = __builtin_shufflevector(b, e, 0, 1, 4, 5);
    const v4 c3 = __builtin_shufflevector(b, e, 2, 3, 6, 7);
    return (c0 + c2) + (c1 + c3);
}
#endif

#if RSSM_VECTOR_EXT && defined(__AVX512F__)
/* dot2_block for K = 128 with AVX-512: x and y live in 16 of the 32
 * registers, so the only loads are the checkpoint's, and the pass is bound by
 * the FMAs (two per 16 floats of C) instead of by three loads per 8 floats.
 * Rows are still read one after the other (see dot2_block). */
typedef float v16 __attribute__((vector_size(64)));
#define dot2_block_k128 RSSM_KFN(dot2_block_k128)
static inline void dot2_block_k128(const float *restrict rows, const float *restrict x,
                                   const float *restrict y, float *sx, float *sy)
{
    v16 xr[8], yr[8];
    for (uint32_t i = 0; i < 8; i++) {
        memcpy(&xr[i], x + 16 * i, sizeof xr[i]);
        memcpy(&yr[i], y + 16 * i, sizeof yr[i]);
    }
    v4 tx[RSSM_ROW_BLOCK], ty[RSSM_ROW_BLOCK];
    for (uint32_t r = 0; r < RSSM_ROW_BLOCK; r++) {
        const float *restrict row = rows + (size_t)r * 128;
        v16 a[2] = {{0}}, b[2] = {{0}};
        for (uint32_t i = 0; i < 8; i++) {
            v16 c;
            memcpy(&c, row + 16 * i, sizeof c);
            a[i & 1] += c * xr[i];
            b[i & 1] += c * yr[i];
        }
        const v16 sa = a[0] + a[1], sb = b[0] + b[1];
        const vf ha = __builtin_shufflevector(sa, sa, 0, 1, 2, 3, 4, 5, 6, 7) +
                      __builtin_shufflevector(sa, sa, 8, 9, 10, 11, 12, 13, 14, 15);
        const vf hb = __builtin_shufflevector(sb, sb, 0, 1, 2, 3, 4, 5, 6, 7) +
                      __builtin_shufflevector(sb, sb, 8, 9, 10, 11, 12, 13, 14, 15);
        tx[r] = first_level(&ha, NULL);
        ty[r] = first_level(&hb, NULL);
    }
    const v4 rx = last_levels(tx[0], tx[1], tx[2], tx[3]);
    const v4 ry = last_levels(ty[0], ty[1], ty[2], ty[3]);
    memcpy(sx, &rx, sizeof rx);
    memcpy(sy, &ry, sizeof ry);
}
#endif

/* sx[r] = row_r . x and sy[r] = row_r . y for the RSSM_ROW_BLOCK rows of
 * `rows` (K apart). Each row is read start to end before the next: reading
 * the rows interleaved (to share the loads of x and y) defeated the hardware
 * prefetcher and made every step from memory twice as slow. The trees of the
 * four rows are then finished together, as vectors. */
static inline void dot2_block(const float *restrict rows, uint32_t K, const float *restrict x,
                              const float *restrict y, float *sx, float *sy)
{
#if RSSM_VECTOR_EXT && defined(__AVX512F__)
    if (K == 128) {
        dot2_block_k128(rows, x, y, sx, sy);
        return;
    }
#endif
    const uint32_t body = K & ~(RSSM_LANES - 1), has_tail = body < K; /* K % 8 is 0 or 4 */
#if RSSM_VECTOR_EXT
    v4 tx[RSSM_ROW_BLOCK], ty[RSSM_ROW_BLOCK];
    v4 tail_x = {0}, tail_y = {0};
    if (has_tail) {
        memcpy(&tail_x, x + body, sizeof tail_x);
        memcpy(&tail_y, y + body, sizeof tail_y);
    }
#endif
    for (uint32_t r = 0; r < RSSM_ROW_BLOCK; r++) {
        const float *restrict row = rows + (size_t)r * K;
        vf setx[RSSM_SETS][RSSM_NV], sety[RSSM_SETS][RSSM_NV], ax[RSSM_NV], ay[RSSM_NV];
        for (uint32_t t = 0; t < RSSM_SETS; t++) {
            for (uint32_t u = 0; u < RSSM_NV; u++) {
                setx[t][u] = vzero();
                sety[t][u] = vzero();
            }
        }
        uint32_t i = 0;
        for (; i + RSSM_SETS * RSSM_LANES <= body; i += RSSM_SETS * RSSM_LANES) {
            for (uint32_t t = 0; t < RSSM_SETS; t++) {
                for (uint32_t u = 0; u < RSSM_NV; u++) {
                    const uint32_t at = i + t * RSSM_LANES + u * RSSM_VF;
                    const vf rv = vload(row + at);
                    setx[t][u] += rv * vload(x + at);
                    sety[t][u] += rv * vload(y + at);
                }
            }
        }
        for (; i < body; i += RSSM_LANES) {
            for (uint32_t u = 0; u < RSSM_NV; u++) {
                const vf rv = vload(row + i + u * RSSM_VF);
                setx[0][u] += rv * vload(x + i + u * RSSM_VF);
                sety[0][u] += rv * vload(y + i + u * RSSM_VF);
            }
        }
        merge_sets(setx, ax);
        merge_sets(sety, ay);
#if RSSM_VECTOR_EXT
        v4 rt = {0}, px = {0}, py = {0};
        if (has_tail) {
            memcpy(&rt, row + body, sizeof rt);
            px = rt * tail_x;
            py = rt * tail_y;
        }
        tx[r] = first_level(ax, has_tail ? &px : NULL);
        ty[r] = first_level(ay, has_tail ? &py : NULL);
#else
        float s[RSSM_LANES], tail[4];
        memcpy(s, ax, sizeof s);
        for (uint32_t l = 0; has_tail && l < 4; l++)
            tail[l] = row[body + l] * x[body + l];
        sx[r] = tree_sum(s, has_tail ? tail : NULL);
        memcpy(s, ay, sizeof s);
        for (uint32_t l = 0; has_tail && l < 4; l++)
            tail[l] = row[body + l] * y[body + l];
        sy[r] = tree_sum(s, has_tail ? tail : NULL);
#endif
    }
#if RSSM_VECTOR_EXT
    const v4 rx = last_levels(tx[0], tx[1], tx[2], tx[3]);
    const v4 ry = last_levels(ty[0], ty[1], ty[2], ty[3]);
    memcpy(sx, &rx, sizeof rx);
    memcpy(sy, &ry, sizeof ry);
#endif
}

/* The ring's part of S̄q and S̄k for every value row:
 *   rq[v] = sum_j d_j[v] c_j(q),  rk[v] = sum_j d_j[v] c_j(k)  (j ascending)
 * a block of columns held in registers across the n entries (rather than
 * reading and writing rq, rk once per entry). */
#define RSSM_RING_NV 4u /* vectors per block, for each of rq and rk */
static void ring_sums(float *restrict rq, float *restrict rk, const float *restrict D, uint32_t V,
                      uint32_t n, const float *restrict cq, const float *restrict ck)
{
    uint32_t v = 0;
    for (; v + RSSM_RING_NV * RSSM_VF <= V; v += RSSM_RING_NV * RSSM_VF) {
        vf aq[RSSM_RING_NV], ak[RSSM_RING_NV];
        for (uint32_t u = 0; u < RSSM_RING_NV; u++)
            aq[u] = ak[u] = vzero();
        for (uint32_t j = 0; j < n; j++) {
            const float cqj = cq[j], ckj = ck[j];
            for (uint32_t u = 0; u < RSSM_RING_NV; u++) {
                const vf dv = vload(D + (size_t)j * V + v + u * RSSM_VF);
                aq[u] += dv * cqj;
                ak[u] += dv * ckj;
            }
        }
        for (uint32_t u = 0; u < RSSM_RING_NV; u++) {
            vstore(rq + v + u * RSSM_VF, aq[u]);
            vstore(rk + v + u * RSSM_VF, ak[u]);
        }
    }
    for (; v < V; v++) {
        float aq = 0.0f, ak = 0.0f;
        for (uint32_t j = 0; j < n; j++) {
            aq += D[(size_t)j * V + v] * cq[j];
            ak += D[(size_t)j * V + v] * ck[j];
        }
        rq[v] = aq;
        rk[v] = ak;
    }
}

/* The flush's block: RSSM_FLUSH_ROWS rows x RSSM_FLUSH_COLS columns of
 * accumulators held in registers while the n ring terms are added; each W_j
 * load serves all the rows, each d_j[v] broadcast all the columns: 2x16 or
 * 4x16 in 8 SSE or AVX registers, leaving the loop bound by the FMAs. (With
 * AVX-512, flush_cols16 below; 4x32 in 16 eight-wide registers was a third
 * slower than 4x16.) */
#define RSSM_FLUSH_ROWS (RSSM_VF >= 8u ? 4u : 2u)
#define RSSM_FLUSH_COLS 16u

/* Columns [c, c + nv * RSSM_VF) of RSSM_FLUSH_ROWS rows of the new
 * checkpoint; nv is a constant at each call site, so acc is registers. */
static inline void flush_cols(float *out, const float *crow, const float *restrict aG,
                              const float *restrict W, const float *restrict dcol, uint32_t dstride,
                              uint32_t n, uint32_t K, const float *restrict dv,
                              const float *restrict k, uint32_t c, uint32_t nv)
{
    enum { RB = RSSM_FLUSH_ROWS };
    vf acc[RB][RSSM_FLUSH_COLS / RSSM_VF];
    for (uint32_t r = 0; r < RB; r++)
        for (uint32_t u = 0; u < nv; u++)
            acc[r][u] = vload(crow + (size_t)r * K + c + u * RSSM_VF) * vload(aG + c + u * RSSM_VF);
    for (uint32_t j = 0; j < n; j++) {
        const float *restrict w = W + (size_t)j * K + c;
        const float *restrict dj = dcol + (size_t)j * dstride;
        vf wv[RSSM_FLUSH_COLS / RSSM_VF];
        for (uint32_t u = 0; u < nv; u++)
            wv[u] = vload(w + u * RSSM_VF);
        for (uint32_t r = 0; r < RB; r++)
            for (uint32_t u = 0; u < nv; u++)
                acc[r][u] += wv[u] * dj[r];
    }
    for (uint32_t r = 0; r < RB; r++)
        for (uint32_t u = 0; u < nv; u++)
            vstore(out + (size_t)r * K + c + u * RSSM_VF, acc[r][u] + vload(k + c + u * RSSM_VF) * dv[r]);
}

/* RSSM_FLUSH_ROWS rows of the new checkpoint (fp32, rows K apart):
 *   out_r = crow_r*aG + sum_j dcol[j*dstride + r] W_j + dv[r]*k
 * in blocks of RSSM_FLUSH_COLS columns, then one vector, then single
 * columns (K is a multiple of 4), every column with the same operations in
 * the same order. out may be crow (an fp32 checkpoint is updated in place):
 * each block is read whole before any of it is written, so out and crow are
 * not restrict. */
#if RSSM_VECTOR_EXT && defined(__AVX512F__)
/* flush_cols with 16-wide vectors, RSSM_FLUSH_ROWS rows x 32 columns: the
 * same arithmetic, half the instructions; measured faster on Zen 4 even
 * though its FMA units are 256 bits wide. */
#define flush_cols16 RSSM_KFN(flush_cols16)
static inline void flush_cols16(float *out, const float *crow, const float *restrict aG,
                                const float *restrict W, const float *restrict dcol,
                                uint32_t dstride, uint32_t n, uint32_t K,
                                const float *restrict dv, const float *restrict k, uint32_t c)
{
    enum { RB = RSSM_FLUSH_ROWS };
    v16 acc[RB][2], t;
    for (uint32_t u = 0; u < 2; u++) {
        v16 g;
        memcpy(&g, aG + c + 16 * u, sizeof g);
        for (uint32_t r = 0; r < RB; r++) {
            memcpy(&t, crow + (size_t)r * K + c + 16 * u, sizeof t);
            acc[r][u] = t * g;
        }
    }
    for (uint32_t j = 0; j < n; j++) {
        const float *restrict w = W + (size_t)j * K + c;
        const float *restrict dj = dcol + (size_t)j * dstride;
        v16 w0, w1;
        memcpy(&w0, w, sizeof w0);
        memcpy(&w1, w + 16, sizeof w1);
        for (uint32_t r = 0; r < RB; r++) {
            acc[r][0] += w0 * dj[r];
            acc[r][1] += w1 * dj[r];
        }
    }
    for (uint32_t u = 0; u < 2; u++) {
        v16 kv;
        memcpy(&kv, k + c + 16 * u, sizeof kv);
        for (uint32_t r = 0; r < RB; r++) {
            t = acc[r][u] + kv * dv[r];
            memcpy(out + (size_t)r * K + c + 16 * u, &t, sizeof t);
        }
    }
}
#endif

static void flush_rows(float *out, const float *crow, const float *restrict aG,
                       const float *restrict W, const float *restrict dcol, uint32_t dstride,
                       uint32_t n, uint32_t K, const float *restrict dv, const float *restrict k)
{
    uint32_t c = 0;
#if RSSM_VECTOR_EXT && defined(__AVX512F__)
    for (; c + 32 <= K; c += 32)
        flush_cols16(out, crow, aG, W, dcol, dstride, n, K, dv, k, c);
#endif
    for (; c + RSSM_FLUSH_COLS <= K; c += RSSM_FLUSH_COLS)
        flush_cols(out, crow, aG, W, dcol, dstride, n, K, dv, k, c, RSSM_FLUSH_COLS / RSSM_VF);
    for (; c + RSSM_VF <= K; c += RSSM_VF)
        flush_cols(out, crow, aG, W, dcol, dstride, n, K, dv, k, c, 1);
    for (; c < K; c++) {
        for (uint32_t r = 0; r < RSSM_FLUSH_ROWS; r++) {
            float acc = crow[(size_t)r * K + c] * aG[c];
            for (uint32_t j = 0; j < n; j++)
                acc += W[(size_t)j * K + c] * dcol[(size_t)j * dstride + r];
            out[(size_t)r * K + c] = acc + k[c] * dv[r];
        }
    }
}

/* x <- x / sqrt(sum x^2 + eps) */
static void l2_normalise(float *restrict x, uint32_t n)
{
    const float norm = sqrtf(dot(x, x, n) + RSSM_L2NORM_EPS);
    for (uint32_t i = 0; i < n; i++)
        x[i] = x[i] / norm;
}

static void step_head(const rssm_kernel_params *p, uint8_t *pool_base, const rssm_cpu_step_io *io,
                      const rssm_row_header *row, uint32_t row_index, uint32_t layer, uint32_t hv,
                      float *scratch)
{
    const uint32_t H = p->num_qk_heads, HV = p->num_v_heads, K = p->head_k, V = p->head_v;
    const uint32_t group = HV / H, h = hv / group;
    const uint32_t cap = p->ring_cap;
    const int kda = p->gate_kind == RSSM_CODE_GATE_KDA;
    const uint32_t gw = kda ? K : 1; /* gate values per head */
    const int replay = (p->flags & RSSM_FLAG_REPLAY) != 0;
    const uint32_t n = replay ? row->write_pos : 0;
    const int flush = !replay || n + 1 == p->ring_len || row->force != 0;
    const size_t io_size = dtype_bytes(p->io_dtype);
    const size_t ring_size = dtype_bytes(p->ring_dtype);
    const size_t br = (size_t)layer * p->max_rows + row->io; /* [layer][row] of the step arrays */

    scratch_map s;
    scratch_layout(p, scratch, &s);

    uint8_t *lb = pool_base + (size_t)row->slot * p->slot_bytes + (size_t)layer * p->layer_bytes;
    uint8_t *ckpt = lb + (size_t)hv * V * K * dtype_bytes(p->state_dtype);
    uint8_t *ring_d = lb + p->ring_d_offset + (size_t)hv * cap * V * ring_size;
    uint8_t *ring_k = lb + p->ring_k_offset + (size_t)h * cap * K * ring_size;
    float *ring_g = (float *)(void *)(lb + p->ring_g_offset) + (size_t)hv * cap * gw;

    /* Request this head's committed ring entries now, used after the input
     * and gate math, and those of the next value head (usually the caller's
     * next item), which then have this whole step to arrive. */
    prefetch_bytes(ring_d, (size_t)n * V * ring_size);
    prefetch_bytes(ring_k, (size_t)n * K * ring_size);
    prefetch_bytes(ring_g, (size_t)n * gw * sizeof(float));
    if (hv + 1 < HV) {
        prefetch_bytes(ring_d + (size_t)cap * V * ring_size, (size_t)n * V * ring_size);
        if ((hv + 1) % group == 0)
            prefetch_bytes(ring_k + (size_t)cap * K * ring_size, (size_t)n * K * ring_size);
        prefetch_bytes(ring_g + (size_t)cap * gw, (size_t)n * gw * sizeof(float));
    }

    /* 1. inputs */
    float *restrict q = s.q, *restrict k = s.k;
    load_f32(q, (const uint8_t *)io->q + (br * H + h) * K * io_size, p->io_dtype, K);
    load_f32(k, (const uint8_t *)io->k + (br * H + h) * K * io_size, p->io_dtype, K);
    load_f32(s.v, (const uint8_t *)io->v + (br * HV + hv) * V * io_size, p->io_dtype, V);
    if (p->flags & RSSM_FLAG_QK_L2NORM) {
        l2_normalise(q, K);
        l2_normalise(k, K);
    }
    for (uint32_t c = 0; c < K; c++)
        q[c] = q[c] * p->q_scale;

    /* gate: g (gw values), alpha = exp(g), beta */
    const float *gate_in = io->gate + (br * HV + hv) * gw;
    float beta = io->beta[br * HV + hv];
    float *restrict g = s.g, *restrict alpha = s.alpha;
    if (p->gate_mode == RSSM_CODE_MODE_PRECOMPUTED) {
        memcpy(g, gate_in, gw * sizeof(float));
    } else {
        const float A = expf(io->A_log[(size_t)layer * HV + hv]);
        const float *dtb = io->dt_bias + ((size_t)layer * HV + hv) * gw;
        for (uint32_t c = 0; c < gw; c++) {
            const float x = gate_in[c] + dtb[c];
            g[c] = p->gate_mode == RSSM_CODE_MODE_RAW ? -A * softplus(x)
                                                      : p->gate_lower_bound * sigmoid(A * x);
        }
        beta = sigmoid(beta);
    }
    for (uint32_t c = 0; c < gw; c++)
        alpha[c] = fast_expf(g[c]);

    /* 2. decays and weighted ring keys, newest entry first. W_j also needs
     * k_j as fp32: convert it straight into W_j, then scale in place. */
    float *restrict aG = s.aG, *restrict W = s.W;
    for (uint32_t j = 0; j < n; j++)
        load_f32(W + (size_t)j * K, ring_k + (size_t)j * K * ring_size, p->ring_dtype, K);
    if (kda) {
        float *restrict sum = s.s;
        for (uint32_t c = 0; c < K; c++)
            sum[c] = 0.0f;
        for (uint32_t j = n; j-- > 0;) {
            float *restrict w = W + (size_t)j * K;
            const float *restrict gj = ring_g + (size_t)j * K;
            for (uint32_t c = 0; c < K; c++) {
                w[c] = (w[c] * fast_expf(sum[c])) * alpha[c];
                sum[c] += gj[c];
            }
        }
        for (uint32_t c = 0; c < K; c++)
            aG[c] = alpha[c] * fast_expf(sum[c]);
    } else {
        /* GDN: W_j = k_j * wg_j with a scalar wg_j. Only the flush needs W_j
         * itself; the readout scales the dot products instead (below), which
         * saves a pass over the ring's keys on every other step. */
        float sum = 0.0f;
        for (uint32_t j = n; j-- > 0;) {
            const float wj = fast_expf(sum) * alpha[0];
            s.wg[j] = wj;
            float *restrict w = W + (size_t)j * K;
            for (uint32_t c = 0; flush && c < K; c++)
                w[c] = w[c] * wj;
            sum += ring_g[j];
        }
        const float ag = alpha[0] * fast_expf(sum);
        for (uint32_t c = 0; c < K; c++)
            aG[c] = ag;
    }
    for (uint32_t c = 0; c < K; c++) {
        s.xq[c] = aG[c] * q[c];
        s.xk[c] = aG[c] * k[c];
    }
    /* c_j(q) = W_j . q and c_j(k) = W_j . k, four entries at a time (GDN
     * without a flush: k_j . q and k_j . k, scaled by wg_j after) */
    uint32_t j4 = 0;
    for (; j4 + RSSM_ROW_BLOCK <= n; j4 += RSSM_ROW_BLOCK)
        dot2_block(W + (size_t)j4 * K, K, q, k, s.cq + j4, s.ck + j4);
    for (; j4 < n; j4++) {
        s.cq[j4] = dot(W + (size_t)j4 * K, q, K);
        s.ck[j4] = dot(W + (size_t)j4 * K, k, K);
    }
    if (!kda && !flush) {
        for (uint32_t j = 0; j < n; j++) {
            s.cq[j] = s.cq[j] * s.wg[j];
            s.ck[j] = s.ck[j] * s.wg[j];
        }
    }
    const float kq = dot(k, q, K);

    /* 3. ring part of S̄q, S̄k for every row: rq = sum_j c_j(q) d_j */
    const float *D;
    if (p->ring_dtype == RSSM_CODE_DTYPE_F32) {
        D = (const float *)(const void *)ring_d;
    } else {
        for (uint32_t j = 0; j < n; j++)
            load_f32(s.D + (size_t)j * V, ring_d + (size_t)j * V * ring_size, p->ring_dtype, V);
        D = s.D;
    }
    float *restrict rq = s.rq, *restrict rk = s.rk;
    ring_sums(rq, rk, D, V, n, s.cq, s.ck);

    /* 4. one pass over the checkpoint rows, RSSM_ROW_BLOCK at a time */
    const int bf16_state = p->state_dtype == RSSM_CODE_DTYPE_BF16;
    float *restrict d = s.d, *restrict o = s.o;
    const float *restrict vin = s.v;
    const size_t row_bytes = (size_t)K * dtype_bytes(p->state_dtype);
    for (uint32_t v0 = 0; v0 < V; v0 += RSSM_ROW_BLOCK) {
        const float *crow; /* RSSM_ROW_BLOCK rows, K apart */
        if (bf16_state) {
            load_f32(s.row, ckpt + v0 * row_bytes, RSSM_CODE_DTYPE_BF16, RSSM_ROW_BLOCK * K);
            crow = s.row;
        } else {
            crow = (const float *)(const void *)ckpt + (size_t)v0 * K;
        }
        if (!flush) {
            /* only the sums now (o holds C·x̄q, d holds C·x̄k): d and o for
             * all rows at once below, as vectors, rather than four scalars
             * waiting on each block's sums */
            dot2_block(crow, K, s.xq, s.xk, o + v0, d + v0);
            continue;
        }
        float sq[RSSM_ROW_BLOCK], sk[RSSM_ROW_BLOCK];
        dot2_block(crow, K, s.xq, s.xk, sq, sk);
        for (uint32_t r = 0; r < RSSM_ROW_BLOCK; r++) {
            const uint32_t v = v0 + r;
            const float sqv = sq[r] + rq[v];
            const float skv = sk[r] + rk[v];
            const float dv = beta * (vin[v] - skv);
            d[v] = dv;
            o[v] = sqv + dv * kq;
        }
        float *dst = bf16_state ? s.rout : (float *)(void *)ckpt + (size_t)v0 * K; /* fp32: in place */
        for (uint32_t r = 0; r < RSSM_ROW_BLOCK; r += RSSM_FLUSH_ROWS)
            flush_rows(dst + (size_t)r * K, crow + (size_t)r * K, aG, W, D + v0 + r, V, n, K,
                       d + v0 + r, k);
        if (bf16_state)
            store_f32(ckpt + v0 * row_bytes, s.rout, RSSM_CODE_DTYPE_BF16, RSSM_ROW_BLOCK * K);
    }

    /* 5. append to the ring */
    if (!flush) {
        for (uint32_t v = 0; v < V; v++) {
            const float dv = beta * (vin[v] - (d[v] + rk[v]));
            d[v] = dv;
            o[v] = (o[v] + rq[v]) + dv * kq;
        }
        store_f32(ring_d + (size_t)n * V * ring_size, d, p->ring_dtype, V);
        if (hv % group == 0)
            store_f32(ring_k + (size_t)n * K * ring_size, k, p->ring_dtype, K);
        memcpy(ring_g + (size_t)n * gw, g, gw * sizeof(float));
        if (io->overflow &&
            (ring_overflows(p->ring_dtype, d, V) || (hv % group == 0 && ring_overflows(p->ring_dtype, k, K))))
            atomic_store_explicit(&io->overflow[row_index], 1u, memory_order_relaxed);
    }
    store_f32((uint8_t *)io->out + (br * HV + hv) * V * io_size, o, p->io_dtype, V);
}


/* The name the describe string shows for this variant. */
static const char *variant_isa(void)
{
#if !RSSM_VECTOR_EXT
    return "plain C";
#elif defined(__AVX512F__)
    return RSSM_F16C ? "avx512+f16c" : "avx512";
#elif defined(__AVX2__)
    return RSSM_F16C ? "avx2+f16c" : "avx2";
#elif defined(__AVX__)
    return RSSM_F16C ? "avx+f16c" : "avx";
#elif defined(__SSE2__)
    return "sse2";
#elif defined(__ARM_NEON)
    return "neon";
#else
    return "generic vectors";
#endif
}

#undef RSSM_VECTOR_EXT
#undef RSSM_VF
#undef RSSM_NV
#undef RSSM_F16C
#undef RSSM_FLUSH_ROWS
#undef RSSM_FLUSH_COLS
#undef vf
#undef v4
#undef vload
#undef vstore
#undef vzero
#undef load_f32
#undef store_f32
#undef partial_dot
#undef merge_sets
#undef RSSM_SETS
#undef dot
#undef first_level
#undef last_levels
#undef dot2_block
#undef dot2_block_k128
#undef flush_cols
#undef flush_cols16
#undef ring_sums
#undef RSSM_RING_NV
#undef flush_rows
#undef l2_normalise
#undef step_head
#undef variant_isa
#undef RSSM_KFN
#undef RSSM_KCAT
#undef RSSM_KCAT2

#endif /* RSSM_CPU_KERNELS_BODY */
