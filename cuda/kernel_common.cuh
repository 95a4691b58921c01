/*
 * Storage helpers shared by the decode kernels (decode_kernel.cu,
 * packed_kernel.cu): the state, ring and io dtypes to and from fp32, 16- or
 * 8-byte vectors of checkpoint values, and the gate functions. Device code
 * only, all inline (each .cu is compiled whole, without device linking).
 */
#ifndef RSSM_KERNEL_COMMON_CUH
#define RSSM_KERNEL_COMMON_CUH

#include "rssm_layout.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace rssm_kc {

/* ------------------------------------------------------------ storage */

constexpr int kF32 = RSSM_CODE_DTYPE_F32;
constexpr int kF16 = RSSM_CODE_DTYPE_F16;
constexpr int kBF16 = RSSM_CODE_DTYPE_BF16;

template <int DT> struct Raw { using T = uint16_t; };
template <> struct Raw<kF32> { using T = float; };

template <int BYTES> struct VecOf;
template <> struct VecOf<16> { using T = uint4; };
template <> struct VecOf<8> { using T = uint2; };

__device__ __forceinline__ float bf16_to_f(uint32_t h) { return __uint_as_float(h << 16); }
__device__ __forceinline__ float f16_to_f(uint32_t h)
{
    return __half2float(__ushort_as_half((unsigned short)h));
}
__device__ __forceinline__ uint16_t f_to_bf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ uint16_t f_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }

template <int DT> __device__ __forceinline__ float to_f(typename Raw<DT>::T x);
template <> __device__ __forceinline__ float to_f<kF32>(float x) { return x; }
template <> __device__ __forceinline__ float to_f<kF16>(uint16_t x) { return f16_to_f(x); }
template <> __device__ __forceinline__ float to_f<kBF16>(uint16_t x) { return bf16_to_f(x); }

template <int DT> __device__ __forceinline__ typename Raw<DT>::T from_f(float x);
template <> __device__ __forceinline__ float from_f<kF32>(float x) { return x; }
template <> __device__ __forceinline__ uint16_t from_f<kF16>(float x) { return f_to_f16(x); }
template <> __device__ __forceinline__ uint16_t from_f<kBF16>(float x) { return f_to_bf16(x); }

/* A 16- or 8-byte vector of CPT checkpoint values, to and from fp32. */
template <int ST, int CPT> struct StateVec {
    using T = typename VecOf<CPT * (ST == kF32 ? 4 : 2)>::T;
    static __device__ __forceinline__ void unpack(const T &x, float *f)
    {
        const uint32_t *w = reinterpret_cast<const uint32_t *>(&x);
#pragma unroll
        for (int i = 0; i < CPT; ++i) {
            if (ST == kF32)
                f[i] = __uint_as_float(w[i]);
            else
                f[i] = bf16_to_f((w[i / 2] >> (16 * (i % 2))) & 0xffffu);
        }
    }
    static __device__ __forceinline__ T pack(const float *f)
    {
        T x;
        uint32_t *w = reinterpret_cast<uint32_t *>(&x);
#pragma unroll
        for (int i = 0; i < CPT; ++i) {
            if (ST == kF32)
                w[i] = __float_as_uint(f[i]);
            else if (i % 2 == 0)
                w[i / 2] = f_to_bf16(f[i]);
            else
                w[i / 2] |= (uint32_t)f_to_bf16(f[i]) << 16;
        }
        return x;
    }
};

__device__ __forceinline__ float load_io(const void *p, size_t i, bool bf16)
{
    return bf16 ? bf16_to_f(static_cast<const uint16_t *>(p)[i]) : static_cast<const float *>(p)[i];
}

__device__ __forceinline__ void store_io(void *p, size_t i, bool bf16, float x)
{
    if (bf16)
        static_cast<uint16_t *>(p)[i] = f_to_bf16(x);
    else
        static_cast<float *>(p)[i] = x;
}

__device__ __forceinline__ float softplus(float x)
{
    return x > RSSM_SOFTPLUS_THRESHOLD ? x : log1pf(expf(x));
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

} /* namespace rssm_kc */

#endif /* RSSM_KERNEL_COMMON_CUH */
