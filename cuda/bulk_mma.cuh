/*
 * The bulk kernel's tensor-core data path (bulk_kernel.cu; docs/design.md
 * §8, "The tensor-core data path"): the operand fragments the coefficient
 * warps write once per unit, and what a consumer warp does with them.
 *
 * Every product is mma.sync m16n8k16 with fp32 accumulators. One operand is
 * always a value the pool already holds in 16 bits, so the tensor core
 * multiplies it exactly; the other is an fp32 coefficient split into two
 * 16-bit parts, hi + lo (split_pair), each its own column or its own
 * product, so nothing is rounded to 16 bits that the FFMA path keeps in
 * fp32 beyond what the second part leaves (2^-16 of a value for bf16,
 * 2^-22 for fp16). Never TF32: it would round the 16-bit operands' partner
 * to 11 bits.
 *
 *  - readout of a 16-bit state, S q~ and S k~ (q~ = alpha Gamma q): A = 16
 *    rows of the stage as loaded (lane (g, t4): rows g and g + 8, one
 *    16-byte vector per row and 32-channel group G), B = the unit's
 *    readout fragments (columns q~ hi, k~ hi, q~ lo, k~ lo, then four zero
 *    columns), so a row's two sums are four columns of one accumulator;
 *  - the ring's part of the same sums, sum_j d_j c_j: A = the ring's d of
 *    the 16 rows as ldmatrix.trans reads them from the unit's buffer
 *    (entries j >= n zeroed), B = c_j(q) and c_j(k) split, in the same
 *    four columns, into the same accumulator;
 *  - the flush's rank-n update sum_j d_j kg_j^T (both state dtypes): A =
 *    the same ring operand, B = kg_j split, one n8 tile per 8 channels,
 *    the channels of tile u permuted (flush_channel) so that lane (g, t4)
 *    ends with the 8 consecutive channels 32 G + 8 t4 .. + 7 of its rows:
 *    one 16-byte load and store of the checkpoint per row and group.
 *
 * A readout k-step (G, h) takes, in lane (g, t4), words 2h and 2h + 1 of
 * the row's 16-byte vector at channel 32 G + 8 t4: logical k 2 t4 + e is
 * channel 32 G + 8 t4 + 4 h + e, and k 2 t4 + 8 + e is channel 32 G + 8 t4
 * + 4 h + 2 + e. B follows the same channels, so the lane of B column n
 * and group t4 needs channels 32 G + 8 t4 + 4 h .. + 3: a coefficient lane
 * owns exactly such four channels (c0 = 4 lane).
 */
#ifndef RSSM_BULK_MMA_CUH
#define RSSM_BULK_MMA_CUH

#include "bulk_common.cuh"

namespace rssm_bulk {

/* 16-bit rows of 16 ring entries as the A operand of m16n8k16 (the entries
 * are its k): lane (g, t4) gets d_{2 t4}, d_{2 t4 + 1} of row g in a[0],
 * of row g + 8 in a[1], and entries 2 t4 + 8, + 9 in a[2], a[3]. The ring
 * holds d as [entry][V], so each 8x8 matrix is 8 entries' 16-byte runs of
 * 8 rows, read transposed. Entries j >= n are never read (a row address
 * past the last is the last's) and are zeroed here: the buffer holds
 * another unit's entries there, or nothing. ROWS16: rows g + 8 exist (else
 * a[1] = a[3] = 0). n >= 1. */
template <bool ROWS16>
__device__ __forceinline__ void ring_operand(const void *d, uint32_t V, uint32_t v0, uint32_t n, uint32_t lane,
                                             uint32_t (&a)[4])
{
    const uint32_t mat = ROWS16 ? lane >> 3 : ((lane >> 3) & 1u) << 1, row = lane & 7u;
    const uint32_t j = min(row + 8u * (mat >> 1), n - 1u), v = v0 + 8u * (mat & 1u);
    const uint32_t at = smem_addr(d) + 2u * (j * V + v);
    if constexpr (ROWS16) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                     : "r"(at)
                     : "memory");
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(a[0]), "=r"(a[2])
                     : "r"(at)
                     : "memory");
        a[1] = a[3] = 0u;
    }
    const uint32_t j0 = 2u * (lane & 3u);
    const uint32_t lo = (j0 < n ? 0x0000ffffu : 0u) | (j0 + 1u < n ? 0xffff0000u : 0u);
    const uint32_t hi = (j0 + 8u < n ? 0x0000ffffu : 0u) | (j0 + 9u < n ? 0xffff0000u : 0u);
    a[0] &= lo;
    a[1] &= lo;
    a[2] &= hi;
    a[3] &= hi;
}

/* D += A B with A and B of 16-bit dtype DT (fp16 or bf16). */
template <int DT>
__device__ __forceinline__ void mma16(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    mma16816(acc[0], acc[1], acc[2], acc[3], a[0], a[1], a[2], a[3], b0, b1, DT == kBF16);
}

/* ------------------------------------------------ the unit's fragments */

/* The readout's B fragments of a 16-bit state: [k-step 2 G + h][lane][2
 * words], 8 k-steps at K = 128. */
constexpr int kFrQWords = 8 * 32 * 2;
/* The ring's readout fragment: [lane][2 words], one k-step of 16 entries. */
constexpr int kFrCWords = 32 * 2;
/* The flush's B fragments: [part hi, lo][tile u][lane][2 words], 16 tiles
 * of 8 channels at K = 128: as many words as an fp32 kg [kJ][K]. */
constexpr int kFrKWords = 2 * 16 * 32 * 2;
static_assert(kFrKWords == kJ * kMaxK, "the flush fragments take kg's place");

/* Coefficient lane `lane` (channels 4 lane .. + 3) writes its channels of
 * alpha Gamma q and alpha Gamma k as the readout's B operand (columns 0-3
 * q~ hi, k~ hi, q~ lo, k~ lo; 4-7 zero): k-step 2 (lane / 8) + lane % 2,
 * fragment lane 4 n + (lane % 8) / 2 (the header's channel map). */
__device__ __forceinline__ void write_readout_fragments(uint32_t *frq, uint32_t lane, const float (&xq)[4],
                                                        const float (&xk)[4])
{
    uint32_t qh0, ql0, qh1, ql1, kh0, kl0, kh1, kl1;
    split_pair<kBF16>(xq[0], xq[1], qh0, ql0);
    split_pair<kBF16>(xq[2], xq[3], qh1, ql1);
    split_pair<kBF16>(xk[0], xk[1], kh0, kl0);
    split_pair<kBF16>(xk[2], xk[3], kh1, kl1);
    uint2 *f = reinterpret_cast<uint2 *>(frq) + (2u * (lane >> 3) + (lane & 1u)) * 32u + ((lane & 7u) >> 1);
    f[0] = make_uint2(qh0, qh1);
    f[4] = make_uint2(kh0, kh1);
    f[8] = make_uint2(ql0, ql1);
    f[12] = make_uint2(kl0, kl1);
#pragma unroll
    for (int n = 4; n < 8; ++n)
        f[4 * n] = make_uint2(0u, 0u);
}

/* After the coefficient warp's reduce-scatter, lane l holds c_l(q) (l <
 * kJ) or c_{l - kJ}(k): its hi and lo parts (ring dtype RT, the A
 * operand's) into columns 0-3 as the readout's, and lanes write the zero
 * columns 4-7. */
template <int RT> __device__ __forceinline__ void write_ring_fragment(uint32_t *frc, uint32_t lane, float c)
{
    static_assert(kJ == 16, "one k-step of entries");
    const uint32_t j = lane % (uint32_t)kJ, col = lane / (uint32_t)kJ;
    const uint16_t hi = from_f<RT>(c), lo = from_f<RT>(c - to_f<RT>(hi));
    uint16_t *h = reinterpret_cast<uint16_t *>(frc);
    const uint32_t at = ((j & 7u) >> 1) * 2u + (j >> 3), half = j & 1u;
    h[(4u * col * 2u + at) * 2u + half] = hi;
    h[(4u * (2u + col) * 2u + at) * 2u + half] = lo;
    frc[32u + lane] = 0u;
}

/* The channel of column n of flush tile u: lane (g, t4) accumulates
 * columns 2 t4 and 2 t4 + 1 of every tile, so tiles 4 G .. 4 G + 3 give it
 * channels 32 G + 8 t4 .. + 7 in order. */
__host__ __device__ constexpr uint32_t flush_channel(uint32_t u, uint32_t n)
{
    return 32u * (u / 4u) + 8u * (n / 2u) + 2u * (u % 4u) + n % 2u;
}

/* Coefficient lane `lane` writes entries 2m and 2m + 1 of its channels' kg
 * (kg0: entry 2m, kg1: 2m + 1) into the flush fragments: channel 4 lane +
 * i is column n = 2 ((lane % 8) / 2) + i % 2 of tile 4 (lane / 8) + 2
 * (lane % 2) + i / 2 (flush_channel's inverse), and entry pair m sits in
 * fragment lane 4 n + m % 4, word m / 4. */
template <int RT>
__device__ __forceinline__ void write_flush_pair(uint32_t *frk, uint32_t lane, uint32_t m, const float (&kg0)[4],
                                                 const float (&kg1)[4])
{
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint32_t u = 4u * (lane >> 3) + 2u * (lane & 1u) + (uint32_t)i / 2u;
        const uint32_t n = 2u * ((lane & 7u) >> 1) + (uint32_t)i % 2u;
        const uint32_t at = (u * 32u + 4u * n + (m & 3u)) * 2u + (m >> 2);
        uint32_t hi, lo;
        split_pair<RT>(kg0[i], kg1[i], hi, lo);
        frk[at] = hi;
        frk[at + 16u * 32u * 2u] = lo;
    }
}

/* ------------------------------------------------------- the consumers */

/* Eight consecutive checkpoint values of dtype ST: from shared memory, and
 * to global memory as a streaming store (read once per visit, as the
 * stage's copies). 16-byte aligned. */
template <int ST> __device__ __forceinline__ void state8_load(const uint8_t *p, float (&c)[8])
{
    if constexpr (ST == kF32) {
        const float4 x = reinterpret_cast<const float4 *>(p)[0], y = reinterpret_cast<const float4 *>(p)[1];
        c[0] = x.x, c[1] = x.y, c[2] = x.z, c[3] = x.w, c[4] = y.x, c[5] = y.y, c[6] = y.z, c[7] = y.w;
    } else {
        StateVec<ST, 8>::unpack(*reinterpret_cast<const uint4 *>(p), c);
    }
}

template <int ST> __device__ __forceinline__ void state8_store(uint8_t *p, const float (&c)[8])
{
    if constexpr (ST == kF32) {
        __stcs(reinterpret_cast<float4 *>(p), make_float4(c[0], c[1], c[2], c[3]));
        __stcs(reinterpret_cast<float4 *>(p) + 1, make_float4(c[4], c[5], c[6], c[7]));
    } else {
        __stcs(reinterpret_cast<uint4 *>(p), StateVec<ST, 8>::pack(c));
    }
}

/* C' = C diag(alpha Gamma) + d k^T + sum_j d_j kg_j^T for a warp's rows,
 * rounded to the state dtype ST and stored: lane (g, t4) takes row g (and
 * g + 8 where ROWS16) at channels 32 G + 8 t4 .. + 7, the ring's sum on
 * the tensor cores (`ring` its A operand, `n` entries, none without RING),
 * the rest in fp32 from C, which load_c(i, G, row, c0, c) gives for row
 * `row` = g + 8 i of the warp's and channels c0 = 32 G + 8 t4 .. + 7: from
 * the stage, or from the registers the tensor-core readout loaded it into
 * (its A operand is the same rows and channels), which spares the
 * shared-memory pipe a second pass over the stage.
 *   C_row0: the warp's first row in the head's checkpoint (global); ag, kv:
 *   alpha Gamma and k over K (shared); frk: the unit's flush fragments;
 *   d[i]: row g + 8 i's d. */
template <int ST, int RT, bool RING, bool ROWS16, class LoadC>
__device__ __forceinline__ void flush_rows(const LoadC &load_c, uint8_t *C_row0, uint32_t K,
                                           const uint32_t (&ring)[4], uint32_t n, const float *ag, const float *kv,
                                           const uint32_t *frk, const float (&d)[2])
{
    constexpr uint32_t SB = ST == kF32 ? 4u : 2u;
    const uint32_t lane = threadIdx.x & 31u, g = lane >> 2, t4 = lane & 3u;
    const uint2 *fk = reinterpret_cast<const uint2 *>(frk);
#pragma unroll
    for (uint32_t G = 0; G < (uint32_t)kMaxK / 32u; ++G) {
        if (32u * G >= K)
            break;
        float acc[4][4] = {};
        if constexpr (RING) {
            if (n > 0u) {
#pragma unroll
                for (uint32_t m = 0; m < 4u; ++m) {
                    const uint32_t u = 4u * G + m;
                    const uint2 bh = fk[u * 32u + lane], bl = fk[(16u + u) * 32u + lane];
                    mma16<RT>(acc[m], ring, bh.x, bh.y);
                    mma16<RT>(acc[m], ring, bl.x, bl.y);
                }
            }
        }
        const uint32_t c0 = 32u * G + 8u * t4;
        const float4 a0 = *reinterpret_cast<const float4 *>(ag + c0), a1 = *reinterpret_cast<const float4 *>(ag + c0 + 4);
        const float4 k0 = *reinterpret_cast<const float4 *>(kv + c0), k1 = *reinterpret_cast<const float4 *>(kv + c0 + 4);
        const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float kk[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
        for (int i = 0; i < (ROWS16 ? 2 : 1); ++i) {
            const uint32_t row = g + 8u * (uint32_t)i;
            float c[8];
            load_c(i, G, row, c0, c);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                c[e] = c[e] * av[e] + (d[i] * kk[e] + acc[e / 2][2 * i + e % 2]);
            state8_store<ST>(C_row0 + ((size_t)row * K + c0) * SB, c);
        }
    }
}

} /* namespace rssm_bulk */

#endif /* RSSM_BULK_MMA_CUH */
