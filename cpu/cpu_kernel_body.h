/*
 * The body of the CPU kernels: everything that depends on the vector width.
 * Each cpu_kernels_<isa>.c compiles it once for its instruction set (a
 * `#pragma GCC target` before the include) with RSSM_KSUFFIX set to its
 * name; everything in here is static but the two entry points, which carry
 * that suffix (cpu_kernel_shared.h declares them). Include it after
 * cpu_kernel_shared.h, once per translation unit.
 */
#ifndef RSSM_KSUFFIX
#error "define RSSM_KSUFFIX (the variant's name) before including the body"
#endif
#define RSSM_KCAT2(a, b) a##_##b
#define RSSM_KCAT(a, b) RSSM_KCAT2(a, b)
#define RSSM_KFN(name) RSSM_KCAT(name, RSSM_KSUFFIX)

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

/* Where bf16 checkpoint rows are converted in registers as the passes load
 * (sum_pass_bf16) and store them (flush_pass_bf16), rather than a block at a
 * time into scratch and back. Measured on one Xeon: with AVX-512 both
 * passes about a quarter faster; with AVX2 the sums (the steps without a
 * flush) 12% faster but the flush, and with it the packed step, slower;
 * with SSE2 both slower. */
#if RSSM_VECTOR_EXT && defined(__AVX512F__)
#define RSSM_BF16_SUMS_IN_REGISTERS 1
#define RSSM_BF16_FLUSH_IN_REGISTERS 1
#elif RSSM_VECTOR_EXT && defined(__AVX2__)
#define RSSM_BF16_SUMS_IN_REGISTERS 1
#define RSSM_BF16_FLUSH_IN_REGISTERS 0
#else
#define RSSM_BF16_SUMS_IN_REGISTERS 0
#define RSSM_BF16_FLUSH_IN_REGISTERS 0
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

/* Element i of checkpoint rows at base as they are stored, fp32 or bf16
 * (the flag is a constant wherever these are inlined). The conversions are
 * exact and give dtype.h's bits, so results do not depend on where they
 * are done. */
#if defined(__GNUC__)
#define RSSM_INLINE static inline __attribute__((always_inline))
#else
#define RSSM_INLINE static inline
#endif
#if RSSM_VECTOR_EXT
typedef uint16_t vh __attribute__((vector_size(RSSM_VF * sizeof(uint16_t))));
typedef uint32_t vu __attribute__((vector_size(RSSM_VF * sizeof(uint32_t))));
#endif

RSSM_INLINE float state_at(const void *base, size_t i, int bf16)
{
    return bf16 ? bf16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

RSSM_INLINE vf vload_state(const void *base, size_t i, int bf16)
{
    if (!bf16)
        return vload((const float *)base + i);
#if RSSM_VECTOR_EXT
    vh h;
    memcpy(&h, (const uint16_t *)base + i, sizeof h);
    const vu u = __builtin_convertvector(h, vu) << 16;
    vf f;
    memcpy(&f, &u, sizeof f);
    return f;
#else
    return state_at(base, i, 1);
#endif
}

RSSM_INLINE void vstore_state(void *base, size_t i, vf v, int bf16)
{
    if (!bf16) {
        vstore((float *)base + i, v);
        return;
    }
#if RSSM_VECTOR_EXT
    vu u;
    memcpy(&u, &v, sizeof u);
    const vu nan = (vu)RSSM_F32_IS_NAN(u);
    const vh h = __builtin_convertvector((RSSM_BF16_QUIET_NAN(u) & nan) | (RSSM_BF16_ROUNDED(u) & ~nan), vh);
    memcpy((uint16_t *)base + i, &h, sizeof h);
#else
    ((uint16_t *)base)[i] = f32_to_bf16(v);
#endif
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
typedef uint32_t vu16 __attribute__((vector_size(64)));

/* vload_state and vstore_state, 16 wide, in AVX-512F instructions: GCC
 * builds the generic conversions out of 8-wide halves (an insert per load,
 * a pack and a permute per store), which cost more than the flush's FMAs. */
RSSM_INLINE v16 load16_state(const void *base, size_t i, int bf16)
{
    v16 f;
    if (!bf16) {
        memcpy(&f, (const float *)base + i, sizeof f);
        return f;
    }
    const __m512i u = _mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)base + i))), 16);
    memcpy(&f, &u, sizeof f);
    return f;
}

RSSM_INLINE void store16_state(void *base, size_t i, v16 v, int bf16)
{
    if (!bf16) {
        memcpy((float *)base + i, &v, sizeof v);
        return;
    }
    vu16 u;
    memcpy(&u, &v, sizeof u);
    const vu16 r = RSSM_BF16_ROUNDED(u), q = RSSM_BF16_QUIET_NAN(u), a = u & 0x7fffffffu;
    __m512i ri, qi, ai;
    memcpy(&ri, &r, sizeof ri);
    memcpy(&qi, &q, sizeof qi);
    memcpy(&ai, &a, sizeof ai);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(ai, _mm512_set1_epi32(0x7f800000));
    _mm256_storeu_si256((__m256i *)(void *)((uint16_t *)base + i),
                        _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(ri, nan, qi)));
}

static inline void dot2_block_k128(const void *restrict rows, int bf16, const float *restrict x,
                                 const float *restrict y, float *sx, float *sy)
{
    v16 xr[8], yr[8];
    for (uint32_t i = 0; i < 8; i++) {
        memcpy(&xr[i], x + 16 * i, sizeof xr[i]);
        memcpy(&yr[i], y + 16 * i, sizeof yr[i]);
    }
    v4 tx[RSSM_ROW_BLOCK], ty[RSSM_ROW_BLOCK];
    for (uint32_t r = 0; r < RSSM_ROW_BLOCK; r++) {
        v16 a[2] = {{0}}, b[2] = {{0}};
        for (uint32_t i = 0; i < 8; i++) {
            const v16 c = load16_state(rows, (size_t)r * 128 + 16 * i, bf16);
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
static inline void dot2_rows(const void *restrict rows, int bf16, uint32_t K, const float *restrict x,
                           const float *restrict y, float *sx, float *sy)
{
#if RSSM_VECTOR_EXT && defined(__AVX512F__)
    if (K == 128) {
        dot2_block_k128(rows, bf16, x, y, sx, sy);
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
        const size_t row = (size_t)r * K; /* the row's first element */
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
                    const vf rv = vload_state(rows, row + at, bf16);
                    setx[t][u] += rv * vload(x + at);
                    sety[t][u] += rv * vload(y + at);
                }
            }
        }
        for (; i < body; i += RSSM_LANES) {
            for (uint32_t u = 0; u < RSSM_NV; u++) {
                const vf rv = vload_state(rows, row + i + u * RSSM_VF, bf16);
                setx[0][u] += rv * vload(x + i + u * RSSM_VF);
                sety[0][u] += rv * vload(y + i + u * RSSM_VF);
            }
        }
        merge_sets(setx, ax);
        merge_sets(sety, ay);
#if RSSM_VECTOR_EXT
        v4 rt = {0}, px = {0}, py = {0};
        if (has_tail) {
            for (uint32_t l = 0; l < 4; l++)
                rt[l] = state_at(rows, row + body + l, bf16);
            px = rt * tail_x;
            py = rt * tail_y;
        }
        tx[r] = first_level(ax, has_tail ? &px : NULL);
        ty[r] = first_level(ay, has_tail ? &py : NULL);
#else
        float s[RSSM_LANES], tail[4];
        memcpy(s, ax, sizeof s);
        for (uint32_t l = 0; has_tail && l < 4; l++)
            tail[l] = state_at(rows, row + body + l, bf16) * x[body + l];
        sx[r] = tree_sum(s, has_tail ? tail : NULL);
        memcpy(s, ay, sizeof s);
        for (uint32_t l = 0; has_tail && l < 4; l++)
            tail[l] = state_at(rows, row + body + l, bf16) * y[body + l];
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

/* dot2_rows on fp32 rows: the ring's weighted keys, fp32 checkpoint rows or
 * a bf16 block converted into scratch */
static inline void dot2_block(const float *restrict rows, uint32_t K, const float *restrict x,
                              const float *restrict y, float *sx, float *sy)
{
    dot2_rows(rows, 0, K, x, y, sx, sy);
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
static inline void flush_cols(void *out, const void *crow, int bf16, const float *restrict aG,
                              const float *restrict W, const float *restrict dcol, uint32_t dstride,
                              uint32_t n, uint32_t K, const float *restrict dv,
                              const float *restrict k, uint32_t c, uint32_t nv)
{
    enum { RB = RSSM_FLUSH_ROWS };
    vf acc[RB][RSSM_FLUSH_COLS / RSSM_VF];
    for (uint32_t r = 0; r < RB; r++)
        for (uint32_t u = 0; u < nv; u++)
            acc[r][u] = vload_state(crow, (size_t)r * K + c + u * RSSM_VF, bf16) * vload(aG + c + u * RSSM_VF);
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
            vstore_state(out, (size_t)r * K + c + u * RSSM_VF, acc[r][u] + vload(k + c + u * RSSM_VF) * dv[r], bf16);
}

/* RSSM_FLUSH_ROWS rows of the new checkpoint (rows K apart, stored as the
 * state dtype):
 *   out_r = crow_r*aG + sum_j dcol[j*dstride + r] W_j + dv[r]*k
 * in blocks of RSSM_FLUSH_COLS columns, then one vector, then single
 * columns (K is a multiple of 4), every column with the same operations in
 * the same order. out may be crow (the checkpoint updated in place): each
 * block is read whole before any of it is written, so they are not
 * restrict. */
#if RSSM_VECTOR_EXT && defined(__AVX512F__)
/* flush_cols with 16-wide vectors, RSSM_FLUSH_ROWS rows x 32 columns: the
 * same arithmetic, half the instructions; measured faster on Zen 4 even
 * though its FMA units are 256 bits wide. */
static inline void flush_cols16(void *out, const void *crow, int bf16, const float *restrict aG,
                                const float *restrict W, const float *restrict dcol,
                                uint32_t dstride, uint32_t n, uint32_t K,
                                const float *restrict dv, const float *restrict k, uint32_t c)
{
    enum { RB = RSSM_FLUSH_ROWS };
    v16 acc[RB][2];
    for (uint32_t u = 0; u < 2; u++) {
        v16 g;
        memcpy(&g, aG + c + 16 * u, sizeof g);
        for (uint32_t r = 0; r < RB; r++)
            acc[r][u] = load16_state(crow, (size_t)r * K + c + 16 * u, bf16) * g;
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
        for (uint32_t r = 0; r < RB; r++)
            store16_state(out, (size_t)r * K + c + 16 * u, acc[r][u] + kv * dv[r], bf16);
    }
}
#endif

static inline void flush_rows_as(void *out, const void *crow, int bf16, const float *restrict aG,
                                 const float *restrict W, const float *restrict dcol, uint32_t dstride,
                                 uint32_t n, uint32_t K, const float *restrict dv, const float *restrict k)
{
    uint32_t c = 0;
#if RSSM_VECTOR_EXT && defined(__AVX512F__)
    for (; c + 32 <= K; c += 32)
        flush_cols16(out, crow, bf16, aG, W, dcol, dstride, n, K, dv, k, c);
#endif
    for (; c + RSSM_FLUSH_COLS <= K; c += RSSM_FLUSH_COLS)
        flush_cols(out, crow, bf16, aG, W, dcol, dstride, n, K, dv, k, c, RSSM_FLUSH_COLS / RSSM_VF);
    for (; c + RSSM_VF <= K; c += RSSM_VF)
        flush_cols(out, crow, bf16, aG, W, dcol, dstride, n, K, dv, k, c, 1);
    for (; c < K; c++) {
        for (uint32_t r = 0; r < RSSM_FLUSH_ROWS; r++) {
            float acc = state_at(crow, (size_t)r * K + c, bf16) * aG[c];
            for (uint32_t j = 0; j < n; j++)
                acc += W[(size_t)j * K + c] * dcol[(size_t)j * dstride + r];
            acc = acc + k[c] * dv[r];
            if (bf16)
                ((uint16_t *)out)[(size_t)r * K + c] = f32_to_bf16(acc);
            else
                ((float *)out)[(size_t)r * K + c] = acc;
        }
    }
}

/* A flush's d and o for the RSSM_ROW_BLOCK rows from v0, from their
 * checkpoint sums sq, sk (C·x̄q, C·x̄k), the ring's rq, rk and the input v. */
static inline void flush_block_d_o(uint32_t v0, const float *sq, const float *sk, const float *restrict rq,
                                   const float *restrict rk, const float *restrict vin, float beta, float kq,
                                   float *restrict d, float *restrict o)
{
    for (uint32_t r = 0; r < RSSM_ROW_BLOCK; r++) {
        const uint32_t v = v0 + r;
        const float sqv = sq[r] + rq[v];
        const float skv = sk[r] + rk[v];
        const float dv = beta * (vin[v] - skv);
        d[v] = dv;
        o[v] = sqv + dv * kq;
    }
}

/* flush_rows_as on fp32 rows */
static void flush_rows(float *out, const float *crow, const float *restrict aG, const float *restrict W,
                       const float *restrict dcol, uint32_t dstride, uint32_t n, uint32_t K,
                       const float *restrict dv, const float *restrict k)
{
    flush_rows_as(out, crow, 0, aG, W, dcol, dstride, n, K, dv, k);
}

/* The passes over a head's bf16 checkpoint (V rows of K) that convert in
 * registers (RSSM_BF16_SUMS_IN_REGISTERS, RSSM_BF16_FLUSH_IN_REGISTERS),
 * RSSM_ROW_BLOCK rows at a time. */

/* A step without a flush: o[v] = row_v . xq and d[v] = row_v . xk. */
static void sum_pass_bf16(const uint8_t *ckpt, uint32_t K, uint32_t V, const float *restrict xq,
                          const float *restrict xk, float *restrict o, float *restrict d)
{
    const size_t row_bytes = (size_t)K * 2;
    for (uint32_t v0 = 0; v0 < V; v0 += RSSM_ROW_BLOCK) {
        const uint8_t *crow = ckpt + v0 * row_bytes;
        prefetch_ahead(crow, RSSM_ROW_BLOCK * row_bytes);
        dot2_rows(crow, 1, K, xq, xk, o + v0, d + v0);
    }
}

/* A flush (and the packed step, n = 0), as step_head's block loop does it
 * for fp32: each block's sums with s->xq and s->xk, its d and o, then the
 * block rewritten in place with the n ring terms (D: ring d as fp32, V
 * apart). */
static void flush_pass_bf16(uint8_t *ckpt, uint32_t K, uint32_t V, uint32_t n, const scratch_map *s,
                            const float *restrict D, float beta, float kq)
{
    const size_t row_bytes = (size_t)K * 2;
    for (uint32_t v0 = 0; v0 < V; v0 += RSSM_ROW_BLOCK) {
        uint8_t *crow = ckpt + v0 * row_bytes;
        prefetch_ahead(crow, RSSM_ROW_BLOCK * row_bytes);
        float sq[RSSM_ROW_BLOCK], sk[RSSM_ROW_BLOCK];
        dot2_rows(crow, 1, K, s->xq, s->xk, sq, sk);
        flush_block_d_o(v0, sq, sk, s->rq, s->rk, s->v, beta, kq, s->d, s->o);
        for (uint32_t r = 0; r < RSSM_ROW_BLOCK; r += RSSM_FLUSH_ROWS)
            flush_rows_as(crow + r * row_bytes, crow + r * row_bytes, 1, s->aG, s->W, D + v0 + r, V, n, K,
                          s->d + v0 + r, s->k);
    }
}

/* x <- x / sqrt(sum x^2 + eps) */
static void l2_normalise(float *restrict x, uint32_t n)
{
    const float norm = sqrtf(dot(x, x, n) + RSSM_L2NORM_EPS);
    for (uint32_t i = 0; i < n; i++)
        x[i] = x[i] / norm;
}

/* A step's inputs for value head hv (q/k head h) of step-array row r_io:
 * q and k normalised (q scaled), v, the log-decay g (gw values), its
 * alpha = exp(g), and beta, as fp32. */
static void head_inputs(const rssm_kernel_params *p, const rssm_layer_io *io, size_t r_io, uint32_t h, uint32_t hv,
                        float *restrict q, float *restrict k, float *restrict v, float *restrict g,
                        float *restrict alpha, float *beta)
{
    const uint32_t K = p->head_k, V = p->head_v, gw = p->gate_kind == RSSM_CODE_GATE_KDA ? K : 1;
    const size_t io_size = dtype_bytes(p->io_dtype);
    load_f32(q, io->q + r_io * io->q_row + (size_t)h * K * io_size, p->io_dtype, K);
    load_f32(k, io->k + r_io * io->k_row + (size_t)h * K * io_size, p->io_dtype, K);
    load_f32(v, io->v + r_io * io->v_row + (size_t)hv * V * io_size, p->io_dtype, V);
    if (p->flags & RSSM_FLAG_QK_L2NORM) {
        l2_normalise(q, K);
        l2_normalise(k, K);
    }
    for (uint32_t c = 0; c < K; c++)
        q[c] = q[c] * p->q_scale;

    /* gate: g (gw values), alpha = exp(g), beta */
    const int gate_bf16 = (p->flags & RSSM_FLAG_GATE_BF16) != 0;
    const uint32_t gate_dtype = gate_bf16 ? RSSM_CODE_DTYPE_BF16 : RSSM_CODE_DTYPE_F32;
    const size_t gate_size = gate_bf16 ? 2 : 4;
    load_f32(g, io->gate + r_io * io->gate_row + (size_t)hv * gw * gate_size, gate_dtype, gw);
    load_f32(beta, io->beta + r_io * io->beta_row + (size_t)hv * gate_size, gate_dtype, 1);
    if (p->gate_mode != RSSM_CODE_MODE_PRECOMPUTED) {
        const float A = expf(io->A_log[hv]);
        const float *dtb = io->dt_bias + (size_t)hv * gw;
        for (uint32_t c = 0; c < gw; c++) {
            const float x = g[c] + dtb[c];
            g[c] = p->gate_mode == RSSM_CODE_MODE_RAW ? -A * softplus(x)
                                                      : p->gate_lower_bound * sigmoid(A * x);
        }
        *beta = sigmoid(*beta);
    }
    for (uint32_t c = 0; c < gw; c++)
        alpha[c] = fast_expf(g[c]);
}

/* What a token of a speculative-decode window brings to its step: the
 * checkpoint's part of S̄q and S̄k for every row, C (aG q) then C (aG k), as
 * the row pass would compute them (so the step does not read the
 * checkpoint), and the keys of the window's tokens before it (ring entries
 * base .. write_pos - 1) as their entries hold them: the other value heads
 * of the q/k head run their windows concurrently, and the first of them
 * appends those entries whenever it gets there. */
typedef struct step_window {
    const float *sums; /* [2][V] */
    const float *keys; /* [write_pos - base][K] */
    uint32_t base;
} step_window;

/* The step of one (row, value head), rssm_cpu_step_fn, or (w) of a
 * window's token. */
static void step_head(const rssm_kernel_params *p, const rssm_layer_io *io, const rssm_row_header *row,
                      uint32_t row_index, uint32_t hv, atomic_uint *overflow, float *scratch, const step_window *w)
{
    const float *sums = w ? w->sums : NULL;
    const uint32_t H = p->num_qk_heads, HV = p->num_v_heads, K = p->head_k, V = p->head_v;
    const uint32_t group = HV / H, h = hv / group;
    const uint32_t cap = p->ring_cap;
    const int kda = p->gate_kind == RSSM_CODE_GATE_KDA;
    const uint32_t gw = kda ? K : 1; /* gate values per head */
    const int replay = (p->flags & RSSM_FLAG_REPLAY) != 0;
    const uint32_t n = replay ? row->write_pos : 0;
    const int flush = RSSM_ROW_FLUSHES(n, cap, row->force);
    const size_t io_size = dtype_bytes(p->io_dtype);
    const size_t ring_size = dtype_bytes(p->ring_dtype);
    const size_t r_io = row->io; /* the row of the step arrays */

    scratch_map s;
    scratch_layout(p, scratch, &s);

    const size_t slot = row->slot;
    uint8_t *ckpt = io->ckpt + slot * io->ckpt_slot + hv * io->ckpt_head;
    uint8_t *ring_d = io->ring_d + slot * io->ring_d_slot + hv * io->ring_d_head;
    uint8_t *ring_k = io->ring_k + slot * io->ring_k_slot + h * io->ring_k_head;
    float *ring_g = (float *)(void *)(io->ring_g + slot * io->ring_g_slot + hv * io->ring_g_head);

    /* Request this head's committed ring entries now, used after the input
     * and gate math, and those of the next value head (usually the caller's
     * next item), which then have this whole step to arrive. */
    prefetch_bytes(ring_d, (size_t)n * V * ring_size);
    prefetch_bytes(ring_k, (size_t)n * K * ring_size);
    prefetch_bytes(ring_g, (size_t)n * gw * sizeof(float));
    if (hv + 1 < HV) {
        prefetch_bytes(ring_d + io->ring_d_head, (size_t)n * V * ring_size);
        if ((hv + 1) % group == 0)
            prefetch_bytes(ring_k + io->ring_k_head, (size_t)n * K * ring_size);
        prefetch_bytes((const uint8_t *)ring_g + io->ring_g_head, (size_t)n * gw * sizeof(float));
    }

    /* 1. inputs */
    float *restrict q = s.q, *restrict k = s.k, *restrict g = s.g, *restrict alpha = s.alpha;
    float beta;
    head_inputs(p, io, r_io, h, hv, q, k, s.v, g, alpha, &beta);

    /* 2. decays and weighted ring keys, newest entry first. W_j also needs
     * k_j as fp32: convert it straight into W_j, then scale in place. */
    float *restrict aG = s.aG, *restrict W = s.W;
    for (uint32_t j = 0; j < n; j++) {
        if (w && j >= w->base)
            memcpy(W + (size_t)j * K, w->keys + (size_t)(j - w->base) * K, K * sizeof(float));
        else
            load_f32(W + (size_t)j * K, ring_k + (size_t)j * K * ring_size, p->ring_dtype, K);
    }
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
    if (!flush && sums) {
        memcpy(o, sums, V * sizeof *o);
        memcpy(d, sums + V, V * sizeof *d);
    }
    /* bf16 rows converted as they are loaded and stored, where that is
     * cheap; otherwise (and always for fp32) the blocks below */
    const int in_registers =
        bf16_state && (flush ? RSSM_BF16_FLUSH_IN_REGISTERS : RSSM_BF16_SUMS_IN_REGISTERS);
    if (in_registers && flush)
        flush_pass_bf16(ckpt, K, V, n, &s, D, beta, kq);
    else if (in_registers && !sums)
        sum_pass_bf16(ckpt, K, V, s.xq, s.xk, o, d);
    for (uint32_t v0 = 0; v0 < V && !in_registers && !(!flush && sums); v0 += RSSM_ROW_BLOCK) {
        const float *crow; /* RSSM_ROW_BLOCK rows, K apart */
        prefetch_ahead(ckpt + v0 * row_bytes, RSSM_ROW_BLOCK * row_bytes);
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
        flush_block_d_o(v0, sq, sk, rq, rk, vin, beta, kq, d, o);
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
        if (overflow &&
            (ring_overflows(p->ring_dtype, d, V) || (hv % group == 0 && ring_overflows(p->ring_dtype, k, K))))
            atomic_store_explicit(&overflow[row_index], 1u, memory_order_relaxed);
    }
    store_f32(io->out + r_io * io->out_row + (size_t)hv * V * io_size, o, p->io_dtype, V);
}

void RSSM_KFN(rssm_cpu_step_head)(const rssm_kernel_params *p, const rssm_layer_io *io, const rssm_row_header *row,
                                  uint32_t row_index, uint32_t hv, atomic_uint *overflow, float *scratch)
{
    step_head(p, io, row, row_index, hv, overflow, scratch, NULL);
}

void RSSM_KFN(rssm_cpu_window_head)(const rssm_kernel_params *p, const rssm_layer_io *io, const rssm_row_header *row,
                                    uint32_t tokens, uint32_t row_index, uint32_t hv, atomic_uint *first_overflow,
                                    float *scratch)
{
    const uint32_t H = p->num_qk_heads, HV = p->num_v_heads, K = p->head_k, V = p->head_v;
    const uint32_t h = hv / (HV / H), n = row->write_pos;
    const int kda = p->gate_kind == RSSM_CODE_GATE_KDA;
    const uint32_t gw = kda ? K : 1;
    scratch_map s;
    scratch_layout(p, scratch, &s);
    float *ring_g = (float *)(void *)(io->ring_g + row->slot * io->ring_g_slot + hv * io->ring_g_head);

    /* 1. Each token's checkpoint weights aG q, aG k. Its decays need the
     * log-decays of the entries before it, the window's earlier tokens'
     * among them: those are inputs, so they go into the ring now (each
     * token's step writes the same values there again). Summed newest
     * first, as the step sums them. */
    for (uint32_t t = 0; t < tokens; t++) {
        float beta;
        head_inputs(p, &io[t], row->io, h, hv, s.q, s.k, s.v, s.g, s.alpha, &beta);
        const uint32_t m = n + t; /* entries before token t */
        float *restrict aG = s.aG;
        if (kda) {
            for (uint32_t c = 0; c < K; c++)
                s.s[c] = 0.0f;
            for (uint32_t j = m; j-- > 0;)
                for (uint32_t c = 0; c < K; c++)
                    s.s[c] += ring_g[(size_t)j * K + c];
            for (uint32_t c = 0; c < K; c++)
                aG[c] = s.alpha[c] * fast_expf(s.s[c]);
        } else {
            float sum = 0.0f;
            for (uint32_t j = m; j-- > 0;)
                sum += ring_g[j];
            const float ag = s.alpha[0] * fast_expf(sum);
            for (uint32_t c = 0; c < K; c++)
                aG[c] = ag;
        }
        for (uint32_t c = 0; c < K; c++) {
            s.wxq[(size_t)t * K + c] = aG[c] * s.q[c];
            s.wxk[(size_t)t * K + c] = aG[c] * s.k[c];
        }
        memcpy(ring_g + (size_t)m * gw, s.g, gw * sizeof(float));
        /* k as its ring entry will hold it: rounded to the ring dtype */
        store_f32(s.row, s.k, p->ring_dtype, K);
        load_f32(s.wk + (size_t)t * K, s.row, p->ring_dtype, K);
    }

    /* 2. One pass over the checkpoint for every token: each block of rows
     * is read from memory once and summed against each token's weights
     * while it is in cache, with the step's own dot products. */
    const uint8_t *ckpt = io->ckpt + row->slot * io->ckpt_slot + hv * io->ckpt_head;
    const int bf16_state = p->state_dtype == RSSM_CODE_DTYPE_BF16;
    const size_t row_bytes = (size_t)K * dtype_bytes(p->state_dtype);
    for (uint32_t v0 = 0; v0 < V; v0 += RSSM_ROW_BLOCK) {
        const float *crow;
        prefetch_ahead(ckpt + v0 * row_bytes, RSSM_ROW_BLOCK * row_bytes);
        if (bf16_state) {
            load_f32(s.row, ckpt + v0 * row_bytes, RSSM_CODE_DTYPE_BF16, RSSM_ROW_BLOCK * K);
            crow = s.row;
        } else {
            crow = (const float *)(const void *)ckpt + (size_t)v0 * K;
        }
        for (uint32_t t = 0; t < tokens; t++) {
            float *sums = s.wsum + (size_t)t * 2 * V;
            dot2_block(crow, K, s.wxq + (size_t)t * K, s.wxk + (size_t)t * K, sums + v0, sums + V + v0);
        }
    }

    /* 3. The tokens in order: each one's ring part reads the entries of the
     * ones before it, which their steps appended. */
    for (uint32_t t = 0; t < tokens; t++) {
        const rssm_row_header rt = {.slot = row->slot, .write_pos = n + t, .force = 0, .io = row->io};
        atomic_uint over = 0;
        const step_window w = {.sums = s.wsum + (size_t)t * 2 * V, .keys = s.wk, .base = n};
        step_head(p, &io[t], &rt, 0, hv, &over, scratch, &w);
        if (atomic_load_explicit(&over, memory_order_relaxed)) {
            uint32_t seen = atomic_load_explicit(&first_overflow[row_index], memory_order_relaxed);
            while (t < seen && !atomic_compare_exchange_weak_explicit(&first_overflow[row_index], &seen, t,
                                                                       memory_order_relaxed, memory_order_relaxed))
                ;
            return;
        }
    }
}


/* The name the describe string shows for this variant. */
const char *RSSM_KFN(rssm_cpu_variant_isa)(void)
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
