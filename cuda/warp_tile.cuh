/*
 * A warp's tile of the checkpoint in registers, as the stream kernels
 * (stream_kernel.cu) and the window readout (window_kernel.cu) hold it:
 * lane (g = lane / 4, t4 = lane % 4) holds value rows v_base + 8 i (i < RPL,
 * v_base = the warp's first row + g) and, in each group G of 4 * CPT key
 * channels, the CPT starting at G * 4 * CPT + t4 * CPT: one 16-byte (bf16
 * with K % 8 != 0: 8-byte) vector per row and group. A row's dot products
 * are then the lane's share plus two shuffles over its 4 lanes, and the
 * same registers are the A operand layout of an m16n8 MMA.
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
#pragma unroll
        for (int i = 0; i < RPL; ++i) {
            const uint32_t v = v_base + 8u * i;
#pragma unroll
            for (int G = 0; G < NG; ++G) {
                const uint32_t c0 = (uint32_t)G * 4u * CPT + t4 * CPT;
                x[i][G] = want && c0 < K && v < V ? __ldcs(reinterpret_cast<const SVec *>(C + (size_t)v * K + c0))
                                                  : SVec{};
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
