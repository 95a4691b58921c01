/*
 * Helpers shared by the decode kernels (decode_kernel.cu, stream_kernel.cu,
 * bulk_kernel.cu): the state, ring and io dtypes to and from fp32, 16- or
 * 8-byte vectors of checkpoint values, the gate functions, and a step's
 * per-channel inputs of one (row, value head). Device code only, all inline
 * (each .cu is compiled whole, without device linking).
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

/* x0 and x1 as hi + lo in the 16-bit dtype DT, packed x0 low, x1 high (the
 * order of consecutive k in an mma.sync operand register): hi rounds x, lo
 * rounds what hi left, so hi + lo carries about twice the dtype's mantissa
 * and a tensor-core product with an operand already in DT (a ring entry)
 * rounds nothing beyond the storage dtypes (docs/design.md §8). */
template <int DT> __device__ __forceinline__ void split_pair(float x0, float x1, uint32_t &hi, uint32_t &lo)
{
    const uint16_t h0 = from_f<DT>(x0), h1 = from_f<DT>(x1);
    const uint16_t l0 = from_f<DT>(x0 - to_f<DT>(h0)), l1 = from_f<DT>(x1 - to_f<DT>(h1));
    hi = (uint32_t)h0 | (uint32_t)h1 << 16;
    lo = (uint32_t)l0 | (uint32_t)l1 << 16;
}

/* D += A B on the tensor cores, m16n8k16, fp32 accumulators, f16 or bf16
 * operands (row-major A, column-major B: the PTX ISA's fragment layouts). */
__device__ __forceinline__ void mma16816(float &d0, float &d1, float &d2, float &d3, uint32_t a0,
                                         uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1, bool bf16)
{
    if (bf16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* A step-header row (rssm_layout.h) as the kernels use it, decoded in one
 * place: its slot, its ring's entries n (at most ring_cap: a corrupt header
 * must not send a kernel outside the ring), the row of the step arrays it
 * reads and writes (its io word, docs/design.md §2, kept inside the batch)
 * and whether it flushes (RSSM_ROW_FLUSHES). */
struct RowStep {
    uint32_t slot, n, io;
    bool flush;
};

/* Header row r's words, in one 16-byte load. */
__device__ __forceinline__ uint4 row_words(const uint32_t *header, uint32_t r)
{
    static_assert(RSSM_ROW_WORDS == 4u && RSSM_HEADER_WORDS % 4u == 0u, "a header row is one uint4");
    return *reinterpret_cast<const uint4 *>(header + RSSM_HEADER_WORDS + RSSM_ROW_WORDS * r);
}

__device__ __forceinline__ RowStep row_decode(const rssm_kernel_params &p, const uint4 &hr)
{
    const uint32_t w[4] = {hr.x, hr.y, hr.z, hr.w};
    RowStep s;
    s.slot = w[RSSM_ROW_SLOT];
    s.n = min(w[RSSM_ROW_WRITE_POS], p.ring_cap);
    s.io = min(w[RSSM_ROW_IO], p.max_rows - 1u);
    s.flush = RSSM_ROW_FLUSHES(s.n, p.ring_cap, w[RSSM_ROW_FORCE]);
    return s;
}

/* x rounded to the ring dtype RT for an append. A finite x that RT rounds
 * to infinity flags header row r (docs/design.md §2: the host re-runs the
 * row as a flush, so the entry is never read); plain stores of 1 from many
 * threads to one word need no atomics. */
template <int RT> __device__ __forceinline__ typename Raw<RT>::T to_ring(float x, uint32_t *overflow, uint32_t r)
{
    if constexpr (RT != kF32) {
        const float limit = RT == kF16 ? RSSM_F16_OVERFLOW : RSSM_BF16_OVERFLOW;
        if (fabsf(x) >= limit && !isinf(x) && overflow)
            overflow[r] = 1u;
    }
    return from_f<RT>(x);
}

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

/* ------------------------------------------------- step inputs */

__device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* The per-channel inputs of (step-array row io, value head hv) of layer a.layer (Args:
 * any struct with p, b and layer) for the NC channels
 * c = first + stride * i this thread owns: q (normalised and scaled), k
 * (normalised), the gate g and alpha = exp(g); returns k.q and beta. Sums
 * are over the warp (W = 1) or the CTA of W warps, through red[3 * W]
 * (shared; every thread of the CTA must call then). */
struct RowIn {
    float kq, beta;
};

template <int NC, int W, typename Args>
__device__ __forceinline__ RowIn channel_inputs(const Args &a, uint32_t io, uint32_t hv, uint32_t first,
                                                uint32_t stride, float *q, float *k, float *g, float *alpha,
                                                float *red)
{
    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, H = p.num_qk_heads, HV = p.num_v_heads;
    const uint32_t h = hv / (HV / H);
    const size_t io_row = (size_t)a.layer * p.max_rows + io;
    const bool io_bf16 = p.io_dtype == RSSM_CODE_DTYPE_BF16;
    const bool kda = p.gate_kind == RSSM_CODE_GATE_KDA;
    const bool raw = p.gate_mode != RSSM_CODE_MODE_PRECOMPUTED;
    const uint32_t Kg = kda ? K : 1u;
    const size_t qk_at = (io_row * H + h) * K;
    const float *gate = a.b.gate + (io_row * HV + hv) * Kg;
    const float b_in = a.b.beta[io_row * HV + hv];
    float sq = 0.0f, sk = 0.0f, sqk = 0.0f;
#pragma unroll
    for (int i = 0; i < NC; ++i) {
        const uint32_t c = first + stride * i;
        q[i] = c < K ? load_io(a.b.q, qk_at + c, io_bf16) : 0.0f;
        k[i] = c < K ? load_io(a.b.k, qk_at + c, io_bf16) : 0.0f;
        g[i] = c < K ? gate[kda ? c : 0u] : 0.0f;
        sq += q[i] * q[i];
        sk += k[i] * k[i];
        sqk += q[i] * k[i];
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    sqk = warp_sum(sqk);
    if (W > 1) {
        const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
        if (lane == 0) {
            red[3 * warp] = sq;
            red[3 * warp + 1] = sk;
            red[3 * warp + 2] = sqk;
        }
        __syncthreads();
        sq = sk = sqk = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) {
            sq += red[3 * w];
            sk += red[3 * w + 1];
            sqk += red[3 * w + 2];
        }
    }
    float qn = p.q_scale, kn = 1.0f;
    if (p.flags & RSSM_FLAG_QK_L2NORM) {
        qn = p.q_scale / sqrtf(sq + RSSM_L2NORM_EPS);
        kn = 1.0f / sqrtf(sk + RSSM_L2NORM_EPS);
    }
    const float A = raw ? expf(__ldg(a.b.A_log + (size_t)a.layer * HV + hv)) : 0.0f;
    const float *dt_bias = a.b.dt_bias + ((size_t)a.layer * HV + hv) * Kg;
#pragma unroll
    for (int i = 0; i < NC; ++i) {
        const uint32_t c = first + stride * i;
        if (raw && c < K) {
            const float dt = __ldg(dt_bias + (kda ? c : 0u));
            g[i] = p.gate_mode == RSSM_CODE_MODE_RAW ? -A * softplus(g[i] + dt)
                                                     : p.gate_lower_bound * sigmoid(A * (g[i] + dt));
        }
        alpha[i] = expf(g[i]);
        q[i] *= qn;
        k[i] *= kn;
    }
    RowIn o;
    o.kq = sqk * (qn * kn);
    o.beta = raw ? sigmoid(b_in) : b_in;
    return o;
}

} /* namespace rssm_kc */

#endif /* RSSM_KERNEL_COMMON_CUH */
