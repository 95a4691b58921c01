/*
 * What every instruction-set variant of the CPU kernels shares: the code
 * generation settings, the scalar helpers (dtype conversions, the exp the
 * decays use, the scratch layout) and the names of the variants' entry
 * points. Included first by cpu_kernels.c (the dispatch) and by each
 * variant's source, cpu_kernels_<isa>.c, which compiles cpu_kernel_body.h
 * for its instruction set. Private to cpu/.
 */
#ifndef RSSM_CPU_KERNEL_SHARED_H
#define RSSM_CPU_KERNEL_SHARED_H

/* Two code generation settings the kernels depend on, pinned here (every
 * kernel source includes this first) so that a change of build flags cannot
 * undo them:
 * - FMA contraction on: -std=c11 turns it off, and without it every
 *   multiply-add of the dot products and the flush is two instructions,
 *   which made the flush (the bound of the replay cycle) a third slower.
 *   Where the target has no FMA (the SSE2 baseline) nothing changes. Packed
 *   and L = 1 replay run the same code, so they still agree bit for bit;
 *   different variants do not (cpu_kernels.c);
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

/* fp32 bits u to bf16, for a scalar or a vector of uint32 (the body's
 * in-register conversions use the same three expressions): round the 16
 * dropped bits to nearest even; a NaN keeps its sign and top payload bits
 * and is made quiet. */
#define RSSM_BF16_ROUNDED(u) (((u) + 0x7fffu + (((u) >> 16) & 1u)) >> 16)
#define RSSM_BF16_QUIET_NAN(u) (((u) >> 16) | 0x0040u)
#define RSSM_F32_IS_NAN(u) (((u) & 0x7fffffffu) > 0x7f800000u)

static inline uint16_t f32_to_bf16(float f)
{
    const uint32_t u = rssm_f32_bits(f);
    return (uint16_t)(RSSM_F32_IS_NAN(u) ? RSSM_BF16_QUIET_NAN(u) : RSSM_BF16_ROUNDED(u));
}


static inline size_t dtype_bytes(uint32_t t) { return t == RSSM_CODE_DTYPE_F32 ? 4 : 2; }

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


static inline float softplus(float x)
{
    return x > RSSM_SOFTPLUS_THRESHOLD ? x : log1pf(expf(x));
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

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

static inline size_t round_up(size_t n) { return (n + RSSM_SCRATCH_ALIGN_FLOATS - 1) / RSSM_SCRATCH_ALIGN_FLOATS * RSSM_SCRATCH_ALIGN_FLOATS; }

/* Where each array of one call's scratch lives. */
typedef struct scratch_map {
    float *q, *k, *xq, *xk, *aG, *alpha, *g, *v, *d, *o, *rq, *rk;
    float *s;          /* KDA: running sum of the ring's log-decays */
    float *row, *rout; /* a block of bf16 checkpoint rows, old and new, as fp32 */
    float *W;      /* [cap][K] weighted ring keys */
    float *D;      /* [cap][V] ring d as fp32 (16-bit rings only) */
    float *cq, *ck; /* [cap] c_j(q), c_j(k) */
    float *wg;      /* [cap] GDN: the decay gamma_j * alpha of each entry */
    /* A speculative-decode window (rssm_cpu_window_fn): each token's
     * checkpoint weights aG q and aG k, [RSSM_MAX_DRAFT][K], and its
     * checkpoint sums C (aG q), C (aG k), [RSSM_MAX_DRAFT][2][V]. */
    float *wxq, *wxk, *wsum;
    float *wk; /* [RSSM_MAX_DRAFT][K]: each token's k as its ring entry holds it */
} scratch_map;

static inline size_t scratch_layout(const rssm_kernel_params *p, float *base, scratch_map *m)
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
    TAKE(wxq, RSSM_MAX_DRAFT * K); TAKE(wxk, RSSM_MAX_DRAFT * K); TAKE(wsum, RSSM_MAX_DRAFT * 2 * V);
    TAKE(wk, RSSM_MAX_DRAFT * K);
#undef TAKE
    return at;
}


/* Requests the lines of [p, p + bytes). The ring's small scattered reads
 * are what the hardware prefetcher cannot predict; requesting them up front
 * gains a few percent. */
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

/* The checkpoint is one sequential stream per head (and across the heads of
 * a work item), and what the hardware prefetcher keeps in flight does not
 * cover the memory latency once a pass does arithmetic between its loads:
 * on the development VM two threads summing 512-byte rows against two
 * vectors read 1920 MiB in 78-87 ms alone and in 56-62 ms requesting each
 * row 512 B to 2 KiB ahead (4 KiB and more: 68-77 ms; bench/micro/
 * stream_probe.c). So each block of a pass requests the block this many
 * bytes on (into the next head at the end of one); requests far ahead, or
 * a head's start requested up front, made steps slower. */
#define RSSM_CPU_PREFETCH_AHEAD 1024u

static inline void prefetch_ahead(const void *block, size_t bytes)
{
    prefetch_bytes((const char *)block + RSSM_CPU_PREFETCH_AHEAD, bytes);
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
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__) && \
    !defined(RSSM_CPU_PLAIN_C)
#define RSSM_CPU_AVX2_VARIANT 1
#else
#define RSSM_CPU_AVX2_VARIANT 0
#endif

/* Each variant's step (rssm_cpu_step_fn) and the instruction set it was
 * compiled for, named by its suffix. */
#define RSSM_CPU_VARIANT_DECLARE(isa)                                              \
    rssm_cpu_step_fn rssm_cpu_step_head_##isa;                                     \
    rssm_cpu_window_fn rssm_cpu_window_head_##isa;                                 \
    const char *rssm_cpu_variant_isa_##isa(void);
RSSM_CPU_VARIANT_DECLARE(base)
#if RSSM_CPU_AVX2_VARIANT
RSSM_CPU_VARIANT_DECLARE(avx2)
RSSM_CPU_VARIANT_DECLARE(avx512)
#endif

#endif /* RSSM_CPU_KERNEL_SHARED_H */
