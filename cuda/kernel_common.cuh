/*
 * Helpers shared by the decode kernels (decode_kernel.cu, stream_kernel.cu,
 * bulk_kernel.cu, window_kernel.cu): the state, ring and io dtypes to and from fp32, 16- or
 * 8-byte vectors of checkpoint values, the gate functions, and a step's
 * per-channel inputs of one (row, value head). Device code only, all inline
 * (each .cu is compiled whole, without device linking).
 */
#ifndef RSSM_KERNEL_COMMON_CUH
#define RSSM_KERNEL_COMMON_CUH

#include "rssm_cuda.h"
#include "rssm_layout.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
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

/* x as TF32 (round to nearest, ties away: cvt.rna), in the fp32 bit
 * pattern the tensor cores read (the low 13 bits zero). */
__device__ __forceinline__ uint32_t to_tf32(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r & 0xffffe000u;
}

/* x = hi + lo in TF32 to about 22 of fp32's 24 bits: a product of two split
 * operands summed as hi hi + hi lo + lo hi ("3xTF32") keeps fp32's accuracy
 * where one TF32 product keeps 11 bits (docs/design.md §9). */
__device__ __forceinline__ void split_tf32(float x, uint32_t &hi, uint32_t &lo)
{
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
}

/* D += A B on the tensor cores, m16n8k8, TF32 operands, fp32 accumulators. */
__device__ __forceinline__ void mma1688_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* ------------------------------------------------------------ cp.async */

/* Asynchronous copies global -> shared (sm_80+), for the kernels that stage
 * what they load (decode_kernel.cu, stream_kernel.cu, window_kernel.cu). */

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async8(void *dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/* Waits until at most `pending` committed groups are still in flight. */
__device__ __forceinline__ void cp_wait(uint32_t pending)
{
    switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::: "memory"); break;
    }
}

/* `bytes` (a multiple of 4) from global to shared memory, spread over the
 * CTA, in the widest copies the alignment of both ends allows. */
__device__ __forceinline__ void copy_async(void *dst, const void *src, uint32_t bytes, int tid, int nthr)
{
    const uintptr_t al = reinterpret_cast<uintptr_t>(src) | smem_u32(dst) | bytes;
    uint8_t *d = static_cast<uint8_t *>(dst);
    const uint8_t *s = static_cast<const uint8_t *>(src);
    if ((al & 15u) == 0) {
        for (uint32_t i = tid; i < bytes / 16u; i += nthr)
            cp_async16(d + 16u * i, s + 16u * i);
    } else if ((al & 7u) == 0) {
        for (uint32_t i = tid; i < bytes / 8u; i += nthr)
            cp_async8(d + 8u * i, s + 8u * i);
    } else {
        for (uint32_t i = tid; i < bytes / 4u; i += nthr)
            cp_async4(d + 4u * i, s + 4u * i);
    }
}

/* Whether this pass of nvcc builds code for sm_90 or newer, where the
 * kernels may use what Hopper brought: bulk copies and mbarrier transaction
 * counts (bulk_common.cuh), programmatic dependent launch (below). Code for
 * an older target (RSSM_CUDA_ARCHS, cuda/CMakeLists.txt) leaves those parts
 * out: the bulk kernels' bodies become a trap, never launched, since the
 * backend asks CUDA which code each device loaded (cuda/targets.h)
 * and refuses them there. The host pass (no __CUDA_ARCH__) compiles no
 * kernel body and sees them whole. */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define RSSM_CUDA_SM90 1
#else
#define RSSM_CUDA_SM90 0
#endif

/* Programmatic dependent launch (sm_90): a kernel whose results the next
 * launch needs lets it start early (pdl_launch_dependents), and the next one
 * waits where it needs them (pdl_wait), so its own loads go out meanwhile.
 * Both are no-ops for a kernel launched without the attribute, and in code
 * for an older target, where the host launches without it (launch_dependent). */
__device__ __forceinline__ void pdl_launch_dependents()
{
#if RSSM_CUDA_SM90
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait()
{
#if RSSM_CUDA_SM90
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* The start of a decode step's kernel launched as a programmatic dependent
 * of the launch before it (launch_dependent): it waits for that launch to
 * finish before it reads anything (the engine's inputs, rows and state may
 * be what that launch wrote), then lets the next launch start, so the next
 * layer's or step's CTAs are scheduled while this one runs and wait at their
 * own pdl_step_start: the launch latency of consecutive launches overlaps
 * the kernels instead of adding to each (docs/design.md §8, "Programmatic
 * dependent launch"). Triggering after the wait, not before, keeps at most
 * one launch waiting behind a running one. */
__device__ __forceinline__ void pdl_step_start()
{
    pdl_wait();
    pdl_launch_dependents();
}

/* Launches fn(a) on `stream` (capturable), with `smem` bytes of dynamic
 * shared memory: a programmatic dependent of the launch before it when
 * `pdl`, which only code that waits at pdl_wait may be (the device's code
 * for fn is sm_90 or newer); otherwise an ordinary launch, which starts
 * once the one before it has finished. */
template <typename Args>
inline cudaError_t launch_dependent(void (*fn)(Args), dim3 grid, dim3 block, cudaStream_t stream, const Args &a,
                                    bool pdl, size_t smem = 0)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = pdl ? attr : nullptr;
    cfg.numAttrs = pdl ? 1u : 0u;
    return cudaLaunchKernelEx(&cfg, fn, a);
}

/* Whether a plan's kernels are launched as programmatic dependents: where
 * the device's code waits at pdl_wait (RSSM_CUDA_ALLOW_PDL). */
inline bool plan_pdl(const rssm_cuda_plan *plan) { return (plan->allow & RSSM_CUDA_ALLOW_PDL) != 0u; }

/* A launch's row (rssm_layer_io) as the kernels use it, decoded in one
 * place: its slot, its ring's entries n (at most ring_cap: a corrupt
 * write_pos must not send a kernel outside the ring), the row of the step
 * arrays it reads and writes (kept inside the batch), whether it flushes
 * (RSSM_ROW_FLUSHES), and whether it is padding (a slot outside the
 * tensors). A padding row is decoded as slot 0 with an empty ring and no
 * flush, so every load a kernel issues for it stays inside the tensors; the
 * kernels store none of its results but its zeroed output (what they
 * read for it, possibly while another row writes slot 0, is discarded). */
struct RowStep {
    uint32_t slot, n, io;
    bool flush, pad;
};

/* How a kernel that hands a row from one role to another (through shared
 * memory) says what the row does: flush, padding, or neither. */
constexpr uint32_t kMetaFlush = 1u, kMetaPad = 2u;
__device__ __forceinline__ uint32_t row_meta_flag(const RowStep &s)
{
    return s.pad ? kMetaPad : s.flush ? kMetaFlush : 0u;
}

/* Row r's words in the RSSM_ROW_* order of the step header: the header's
 * row in one 16-byte load (a row stride of RSSM_ROW_WORDS is the header's,
 * rssm_layout.h), a caller's rows from its arrays. */
__device__ __forceinline__ uint4 row_words(const rssm_layer_io &io, uint32_t r)
{
    static_assert(RSSM_ROW_WORDS == 4u && RSSM_HEADER_WORDS % 4u == 0u, "a header row is one uint4");
    const size_t at = (size_t)r * io.row_stride;
    if (io.row_stride == RSSM_ROW_WORDS)
        return *reinterpret_cast<const uint4 *>(io.row_slot + at);
    return make_uint4(io.row_slot[at], io.row_write_pos[at], io.row_force ? io.row_force[at] : 0u,
                      io.row_io ? io.row_io[at] : r);
}

__device__ __forceinline__ RowStep row_decode(const rssm_kernel_params &p, const rssm_layer_io &io, const uint4 &hr)
{
    static_assert(RSSM_ROW_SLOT == 0u && RSSM_ROW_WRITE_POS == 1u && RSSM_ROW_FORCE == 2u && RSSM_ROW_IO == 3u,
                  "row_words returns the header's order");
    RowStep s;
    s.pad = RSSM_ROW_PADS(hr.x, io.slots, p.flags);
    s.slot = s.pad ? 0u : hr.x;
    s.n = s.pad ? 0u : min(hr.y, p.ring_cap);
    s.io = min(hr.w, p.max_rows - 1u);
    s.flush = !s.pad && RSSM_ROW_FLUSHES(s.n, p.ring_cap, hr.z);
    return s;
}

__device__ __forceinline__ RowStep row_step(const rssm_kernel_params &p, const rssm_layer_io &io, uint32_t r)
{
    return row_decode(p, io, row_words(io, r));
}

/* The launch's row count. */
__device__ __forceinline__ uint32_t launch_rows(const rssm_kernel_params &p, const rssm_layer_io &io)
{
    return min(io.rows_dev ? *io.rows_dev : io.rows, p.max_rows);
}

/* Whether row r's words may be loaded before the row count is known: a
 * step header has max_rows rows, a caller's arrays only the launch's. */
__device__ __forceinline__ bool row_loadable(const rssm_kernel_params &p, const rssm_layer_io &io, uint32_t r)
{
    return r < (io.rows_dev ? p.max_rows : min(io.rows, p.max_rows));
}

/* Where (slot, head) of a state tensor starts. */
__device__ __forceinline__ uint8_t *at_slot(uint8_t *base, size_t slot_stride, size_t head_stride, uint32_t slot,
                                            uint32_t head)
{
    return base + (size_t)slot * slot_stride + (size_t)head * head_stride;
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

/* The dtype of an array that a kernel learns only at run time, as a
 * RSSM_CODE_DTYPE_* code: q, k, v and the output (the io dtype: fp32, fp16
 * or bf16), gate and beta (fp32 or bf16, RSSM_FLAG_GATE_BF16). It is one
 * value for the whole launch, so every branch on it is uniform (no warp
 * diverges) and costs a predicated instruction or two, where a template
 * parameter would multiply the kernels' instances (they are templates of
 * the state and ring dtypes already). A type of its own, so that a bool
 * (what these helpers took while bf16 was the only 16-bit io dtype) cannot
 * be passed for it. Every load and store of such an array goes through the
 * helpers below, the one place that knows how each dtype is held. */
struct Dtype {
    uint32_t code;
};

__device__ __forceinline__ Dtype io_dtype(const rssm_kernel_params &p) { return Dtype{p.io_dtype}; }
__device__ __forceinline__ Dtype gate_dtype(const rssm_kernel_params &p)
{
    return Dtype{(p.flags & RSSM_FLAG_GATE_BF16) != 0u ? (uint32_t)kBF16 : (uint32_t)kF32};
}
constexpr Dtype kGateBF16 = {(uint32_t)kBF16};

__device__ __forceinline__ uint32_t bytes_of(Dtype t) { return t.code == (uint32_t)kF32 ? 4u : 2u; }

/* Element i of an array of dtype t, when `in` (else 0), as its bits (a
 * 16-bit element in the low half), by two predicated loads into one
 * register; io_value converts it only after every load of a group is
 * issued. load_io's conversion, inside the branch, made each load wait for
 * its data before the next was issued: in channel_inputs q, k, the gate
 * and beta were four global round trips in a row on the prologue's
 * critical path (bench/results/h200/notes.md,
 * History: the per-layer entry). */
__device__ __forceinline__ uint32_t load_io_bits(const void *p, size_t i, Dtype t, bool in)
{
    const bool wide = t.code == (uint32_t)kF32;
    uint32_t b = 0u;
    if (in && wide)
        b = static_cast<const uint32_t *>(p)[i];
    if (in && !wide)
        b = static_cast<const uint16_t *>(p)[i];
    return b;
}

/* Both conversions are formed and one selected, so that no branch splits
 * the code around a load or store of these arrays: branches on the dtype
 * made the bf16-state bulk kernels 4-5% slower at batch 256 than the
 * predicated bf16/fp32 code they replaced (bench/results/h200/notes.md,
 * History: an engine developer's checks). */
__device__ __forceinline__ float io_value(uint32_t bits, Dtype t)
{
    const float b16 = bf16_to_f(bits), h16 = f16_to_f(bits & 0xffffu);
    const float n16 = t.code == (uint32_t)kBF16 ? b16 : h16;
    return t.code == (uint32_t)kF32 ? __uint_as_float(bits) : n16;
}

__device__ __forceinline__ float load_io(const void *p, size_t i, Dtype t)
{
    return io_value(load_io_bits(p, i, t, true), t);
}

/* x stored as element i of an array of dtype t, rounded to nearest even. */
__device__ __forceinline__ void store_io(void *p, size_t i, Dtype t, float x)
{
    const uint16_t b16 = f_to_bf16(x), h16 = f_to_f16(x);
    const uint16_t n16 = t.code == (uint32_t)kBF16 ? b16 : h16;
    if (t.code == (uint32_t)kF32)
        static_cast<float *>(p)[i] = x;
    if (t.code != (uint32_t)kF32)
        static_cast<uint16_t *>(p)[i] = n16;
}

__device__ __forceinline__ float softplus(float x)
{
    return x > RSSM_SOFTPLUS_THRESHOLD ? x : log1pf(expf(x));
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The log-decay g of a raw gate input x (rssm.h's gate modes), its weights
 * A = exp(A_log) and dt_bias dt. */
__device__ __forceinline__ float raw_gate(const rssm_kernel_params &p, float x, float dt, float A)
{
    return p.gate_mode == RSSM_CODE_MODE_RAW ? -A * softplus(x + dt) : p.gate_lower_bound * sigmoid(A * (x + dt));
}

/* The factors that normalise q (and scale it) and k, from their sums of
 * squares. */
struct QKNorm {
    float qn, kn;
};
__device__ __forceinline__ QKNorm qk_norm(const rssm_kernel_params &p, float sq, float sk)
{
    QKNorm n = {p.q_scale, 1.0f};
    if (p.flags & RSSM_FLAG_QK_L2NORM) {
        n.qn = p.q_scale / sqrtf(sq + RSSM_L2NORM_EPS);
        n.kn = 1.0f / sqrtf(sk + RSSM_L2NORM_EPS);
    }
    return n;
}

/* ------------------------------------------------- step inputs */

__device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* The per-channel inputs of (step-array row io, value head hv) (Args: any
 * struct with p and b.io) for the NC channels
 * c = first + stride * i this thread owns: q (normalised and scaled), k
 * (normalised), the gate g and alpha = exp(g); returns k.q and beta. Sums
 * are over the warp (W = 1) or the CTA of W warps, through red[3 * W]
 * (shared; every thread of the CTA must call then). */
/* Sums R per-row values over the warp's 32 lanes and returns, in each
 * lane, the total of row lane / (32 / R). A reduce-scatter: each exchange
 * halves the values a lane carries, so it takes R - 1 + log2(32 / R)
 * shuffles instead of the 5 R of R butterflies; shuffle throughput is what
 * the stage's sums cost. */
template <int R> __device__ __forceinline__ float warp_sum_rows(float (&v)[R], uint32_t lane);

/* One exchange of warp_sum_rows: the first W of v, W / 2 left, at lane
 * distance O; a template per level so that every index is a constant
 * (a loop over the levels was left rolled at R = 32: local memory). */
template <int W, int O, int R> __device__ __forceinline__ void rows_exchange(float (&v)[R], uint32_t lane)
{
    if constexpr (W > 1) {
        const bool upper = (lane & (uint32_t)O) != 0u;
#pragma unroll
        for (int k = 0; k < W / 2; ++k) {
            /* both halves read first, then chosen: a select between two
             * array elements would index the array at run time (local memory) */
            const float lo = v[k], hi = v[k + W / 2];
            const float send = upper ? lo : hi;
            v[k] = (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, send, O);
        }
        rows_exchange<W / 2, O / 2, R>(v, lane);
    }
}

template <int R> __device__ __forceinline__ float warp_sum_rows(float (&v)[R], uint32_t lane)
{
    static_assert(R >= 1 && R <= 32 && (R & (R - 1)) == 0, "R a power of two");
    rows_exchange<R, 16, R>(v, lane);
    float x = v[0];
#pragma unroll
    for (int o = 16 / R; o > 0; o /= 2)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

struct RowIn {
    float kq, beta;
};

template <int NC, int W, bool OVERLAP = true, typename Args>
__device__ __forceinline__ RowIn channel_inputs(const Args &a, uint32_t io, uint32_t hv, uint32_t first,
                                                uint32_t stride, float *q, float *k, float *g, float *alpha,
                                                float *red)
{
    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, H = p.num_qk_heads, HV = p.num_v_heads;
    const uint32_t h = hv / (HV / H);
    const rssm_layer_io &L = a.b.io;
    const Dtype iot = io_dtype(p), gt = gate_dtype(p);
    const bool kda = p.gate_kind == RSSM_CODE_GATE_KDA;
    const bool raw = p.gate_mode != RSSM_CODE_MODE_PRECOMPUTED;
    const uint32_t Kg = kda ? K : 1u;
    const void *qrow = L.q + io * L.q_row + (size_t)h * K * bytes_of(iot);
    const void *krow = L.k + io * L.k_row + (size_t)h * K * bytes_of(iot);
    const void *gate = L.gate + io * L.gate_row;
    const float *dt_bias = L.dt_bias + (size_t)hv * Kg;
    /* OVERLAP: every global load of the step's inputs first, the gate
     * weights of a raw gate mode too, so that their latencies overlap: one
     * round trip before the sums, where q, k, gate and beta each waited for
     * the one before (load_io_bits) and A_log and dt_bias were a further
     * one after the sums. Without it each value is loaded where it is first
     * used (the bulk kernel's GDN coefficients: see its call). */
    uint32_t qr[NC], kr[NC], gr[NC], br = 0u;
    float dt[NC], A_log = 0.0f;
    if constexpr (OVERLAP) {
#pragma unroll
        for (int i = 0; i < NC; ++i) {
            const uint32_t c = first + stride * i;
            qr[i] = load_io_bits(qrow, c, iot, c < K);
            kr[i] = load_io_bits(krow, c, iot, c < K);
            gr[i] = load_io_bits(gate, (size_t)hv * Kg + (kda ? c : 0u), gt, c < K);
            dt[i] = raw && c < K ? __ldg(dt_bias + (kda ? c : 0u)) : 0.0f;
        }
        br = load_io_bits(L.beta + io * L.beta_row, hv, gt, true);
        A_log = raw ? __ldg(L.A_log + hv) : 0.0f;
    }
    float b_in = 0.0f;
    if constexpr (!OVERLAP)
        b_in = load_io(L.beta + io * L.beta_row, hv, gt);
    float sq = 0.0f, sk = 0.0f, sqk = 0.0f;
#pragma unroll
    for (int i = 0; i < NC; ++i) {
        if constexpr (OVERLAP) {
            q[i] = io_value(qr[i], iot);
            k[i] = io_value(kr[i], iot);
            g[i] = io_value(gr[i], gt);
        } else {
            const uint32_t c = first + stride * i;
            q[i] = c < K ? load_io(qrow, c, iot) : 0.0f;
            k[i] = c < K ? load_io(krow, c, iot) : 0.0f;
            g[i] = c < K ? load_io(gate, (size_t)hv * Kg + (kda ? c : 0u), gt) : 0.0f;
        }
        sq += q[i] * q[i];
        sk += k[i] * k[i];
        sqk += q[i] * k[i];
    }
    if constexpr (OVERLAP)
        b_in = io_value(br, gt);
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
    const QKNorm nrm = qk_norm(p, sq, sk);
    const float qn = nrm.qn, kn = nrm.kn;
    const float A = raw ? expf(OVERLAP ? A_log : __ldg(L.A_log + hv)) : 0.0f;
#pragma unroll
    for (int i = 0; i < NC; ++i) {
        const uint32_t c = first + stride * i;
        if (raw && c < K) {
            const float dti = OVERLAP ? dt[i] : __ldg(dt_bias + (kda ? c : 0u));
            g[i] = raw_gate(p, g[i], dti, A);
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

/* The scalar gate of a GDN value head hv for step-array row io: its
 * log-decay g and beta, as channel_inputs gives them, for a thread that
 * takes another head's (the window's coefficient kernel serves every value
 * head of a q/k head). */
struct HeadGate {
    float g, beta;
};
template <typename Args> __device__ __forceinline__ HeadGate head_gate(const Args &a, uint32_t io, uint32_t hv)
{
    const rssm_kernel_params &p = a.p;
    const rssm_layer_io &L = a.b.io;
    const bool raw = p.gate_mode != RSSM_CODE_MODE_PRECOMPUTED;
    const Dtype gt = gate_dtype(p);
    const float x = load_io(L.gate + io * L.gate_row, hv, gt);
    const float b = load_io(L.beta + io * L.beta_row, hv, gt);
    HeadGate o;
    o.g = raw ? raw_gate(p, x, __ldg(L.dt_bias + hv), expf(__ldg(L.A_log + hv))) : x;
    o.beta = raw ? sigmoid(b) : b;
    return o;
}

} /* namespace rssm_kc */

#endif /* RSSM_KERNEL_COMMON_CUH */
