/*
 * A warp's tile of the checkpoint in registers, as the stream kernels
 * (stream_kernel.cu) and the window readout (window_kernel.cu) hold it:
 * lane (g = lane / 4, t4 = lane % 4) holds value rows v_base + 8 i (i < RPL,
 * v_base = the warp's first row + g) and, in each group G of 4 * CPT key
 * channels, the CPT starting at G * 4 * CPT + t4 * CPT: one 16-byte (bf16
 * with K % 8 != 0: 8-byte) vector per row and group. A row's dot products
 * are then the lane's share plus two shuffles over its 4 lanes, and the
 * same registers are the A operand layout of an m16n8 MMA (products()).
 */
#ifndef RSSM_WARP_TILE_CUH
#define RSSM_WARP_TILE_CUH

#include "kernel_common.cuh"

namespace rssm_kc {

template <int ST, int CPT, int RPL> struct WarpTile {
    using SV = StateVec<ST, CPT>;
    using SVec = typename SV::T;
    using SRaw = typename Raw<ST>::T;
    static constexpr int NG = (int)RSSM_CUDA_MAX_HEAD_K / (4 * CPT); /* channel groups, at most */

    SVec x[RPL][NG];

    /* Every load issued, none waited for (streaming: the tile is read once);
     * rows past V, channels past K and a tile not wanted (!want) read as 0. */
    __device__ __forceinline__ void load(const SRaw *C, uint32_t v_base, uint32_t t4, uint32_t K, uint32_t V,
                                         bool want)
    {
        load_rows<false>(C, v_base, t4, K, V, want);
    }

    /* The same rows from a shared-memory tile of rows of K values (row
     * stride K), as a stage of the persistent window holds them. */
    __device__ __forceinline__ void load_shared(const SRaw *S, uint32_t v_base, uint32_t t4, uint32_t K)
    {
        load_rows<true>(S, v_base, t4, K, 0xffffffffu, true);
    }

    template <bool SHARED>
    __device__ __forceinline__ void load_rows(const SRaw *C, uint32_t v_base, uint32_t t4, uint32_t K, uint32_t V,
                                              bool want)
    {
#pragma unroll
        for (int i = 0; i < RPL; ++i) {
            const uint32_t v = v_base + 8u * i;
#pragma unroll
            for (int G = 0; G < NG; ++G) {
                const uint32_t c0 = (uint32_t)G * 4u * CPT + t4 * CPT;
                const SVec *at = reinterpret_cast<const SVec *>(C + (size_t)v * K + c0);
                x[i][G] = want && c0 < K && v < V ? (SHARED ? *at : __ldcs(at)) : SVec{};
            }
        }
    }

    /* Sums each row's pq and pk over its 4 lanes, in every one of them. */
    static __device__ __forceinline__ void row_sums(float (&pq)[RPL], float (&pk)[RPL])
    {
#pragma unroll
        for (int o = 1; o < 4; o <<= 1)
#pragma unroll
            for (int i = 0; i < RPL; ++i) {
                pq[i] += __shfl_xor_sync(0xffffffffu, pq[i], o);
                pk[i] += __shfl_xor_sync(0xffffffffu, pk[i], o);
            }
    }

    /* The B operand layout of products(): column n's channel pair p
     * (channels 2p and 2p + 1) as one float4 {hi, hi, lo, lo} at
     * n * kBStride + b_pair(p). A quarter warp reads 2 columns at pairs
     * p0 + {0, 1, 2, 3} * CPT / 2: the swizzle (bit 3 of p into bit 1, a
     * permutation of each 16 pairs) makes those 4 distinct modulo 8 for
     * CPT 4 and 8 alike, and the odd stride puts the two columns on
     * the other 4, so its 8 float4 fill all 32 banks once. */
    static constexpr uint32_t kBStride = RSSM_CUDA_MAX_HEAD_K / 2 + 1;
    static __device__ __forceinline__ uint32_t b_pair(uint32_t p) { return p ^ ((p >> 2) & 2u); }

    /* acc[u] += the tile's 16 rows times columns 8u..8u+7 of B (u <
     * ntiles, warp-uniform), on the tensor cores, in the m16n8 accumulator
     * layout: lane (g, t4) gets rows g and g + 8, columns 2 t4 and 2 t4 + 1.
     * The tile's registers are the A fragments as they are: k-step (G, h)
     * takes channel c0 + 2h of each lane as A's column t4 and c0 + 2h + 1
     * as its column t4 + 4 (c0 = the lane's first channel of group G), and
     * B's rows follow the same channels. fp32 tiles are split into two TF32
     * parts (3 products, about fp32's accuracy); a bf16 value is exact in
     * TF32 (2). Channels past K must be zero in B. */
    template <int NT>
    __device__ __forceinline__ void products(const float4 *B, uint32_t ntiles, uint32_t g, uint32_t t4, uint32_t K,
                                             float (&acc)[NT][4]) const
    {
        static_assert(RPL == 2, "an m16 fragment is rows g and g + 8");
        /* the small products in accumulators of their own: three dependent
         * chains per tile instead of one three times as long */
        float lo[NT][4] = {}, lo2[NT][4] = {};
#pragma unroll
        for (int G = 0; G < NG; ++G) {
            if ((uint32_t)G * 4u * CPT >= K)
                break;
            float f0[CPT], f1[CPT];
            SV::unpack(x[0][G], f0);
            SV::unpack(x[1][G], f1);
#pragma unroll
            for (int h = 0; h < CPT / 2; ++h) {
                uint32_t ah[4], al[4];
                if constexpr (ST == kF32) {
                    split_tf32(f0[2 * h], ah[0], al[0]);
                    split_tf32(f1[2 * h], ah[1], al[1]);
                    split_tf32(f0[2 * h + 1], ah[2], al[2]);
                    split_tf32(f1[2 * h + 1], ah[3], al[3]);
                } else {
                    ah[0] = __float_as_uint(f0[2 * h]);
                    ah[1] = __float_as_uint(f1[2 * h]);
                    ah[2] = __float_as_uint(f0[2 * h + 1]);
                    ah[3] = __float_as_uint(f1[2 * h + 1]);
                }
                const uint32_t pair = b_pair(((uint32_t)G * 4u * CPT + t4 * CPT) / 2u + (uint32_t)h);
#pragma unroll
                for (int u = 0; u < NT; ++u) {
                    if ((uint32_t)u >= ntiles)
                        break;
                    const float4 b = B[(8u * u + g) * kBStride + pair];
                    const uint32_t bh0 = __float_as_uint(b.x), bh1 = __float_as_uint(b.y);
                    mma1688_tf32(acc[u], ah, bh0, bh1);
                    mma1688_tf32(lo[u], ah, __float_as_uint(b.z), __float_as_uint(b.w));
                    if constexpr (ST == kF32)
                        mma1688_tf32(lo2[u], al, bh0, bh1);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < NT; ++u)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[u][e] += lo[u][e] + lo2[u][e];
    }

    /* The lane's share of C qv and C kv for each of its rows, added to pq
     * and pk; qv and kv are fp32 vectors over K in shared memory, 16-byte
     * aligned. */
    __device__ __forceinline__ void dots(const float *qv, const float *kv, uint32_t t4, uint32_t K, float (&pq)[RPL],
                                         float (&pk)[RPL]) const
    {
#pragma unroll
        for (int G = 0; G < NG; ++G) {
            const uint32_t c0 = (uint32_t)G * 4u * CPT + t4 * CPT;
            if (c0 >= K)
                continue;
#pragma unroll
            for (int e = 0; e < CPT; e += 4) {
                const float4 q4 = *reinterpret_cast<const float4 *>(qv + c0 + e);
                const float4 k4 = *reinterpret_cast<const float4 *>(kv + c0 + e);
#pragma unroll
                for (int i = 0; i < RPL; ++i) {
                    float f[CPT];
                    SV::unpack(x[i][G], f);
                    pq[i] += f[e] * q4.x + f[e + 1] * q4.y + f[e + 2] * q4.z + f[e + 3] * q4.w;
                    pk[i] += f[e] * k4.x + f[e + 1] * k4.y + f[e + 2] * k4.z + f[e + 3] * k4.w;
                }
            }
        }
    }
};

} /* namespace rssm_kc */

#endif /* RSSM_WARP_TILE_CUH */
