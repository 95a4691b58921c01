/*
 * What the two window kernels share (window_kernel.cu, window_bulk_kernel.cu;
 * docs/design.md §9): their arguments, a row's window as the step header and
 * the token counts give it, and the rounding of a tentative ring entry.
 */
#ifndef RSSM_WINDOW_COMMON_CUH
#define RSSM_WINDOW_COMMON_CUH

#include "rssm_cuda.h"

#include "rssm.h"

#include "kernel_common.cuh"

namespace rssm_kc {

struct WArgs {
    rssm_kernel_params p;
    /* io: the window's token-major step arrays (token t of row r at step-array
     * row t * rows + r), the pool, the step header of the rows (write_pos the
     * window's base); overflow: per row, the first token whose ring entry
     * overflowed (UINT32_MAX: none), or NULL for no report; scratch: the records, [rows * HV][t_max]. */
    rssm_cuda_buffers b;
    const uint32_t *drafts; /* [rows] */
    uint32_t rows, t_max;
    uint32_t ctas; /* window_kernel.cu: readout CTAs per (row, value head) */
};

inline WArgs window_args(const rssm_kernel_params *p, const rssm_cuda_buffers *b, const uint32_t *drafts,
                         uint32_t rows, uint32_t t_max, uint32_t ctas)
{
    WArgs a;
    a.p = *p;
    a.b = *b;
    a.drafts = drafts;
    a.rows = rows;
    a.t_max = t_max;
    a.ctas = ctas;
    return a;
}

/* A token's record, in floats: its checkpoint weights alpha Gamma q and
 * alpha Gamma k, its ring coefficients c_j(q) at j and c_j(k) at
 * RSSM_CUDA_STREAM_MAX_RING + j, beta and k.q: window_kernel.cu's
 * coefficient kernel writes them, both readouts read them. */
constexpr int kRQW = 0, kRKW = (int)RSSM_CUDA_MAX_HEAD_K, kRCoef = 2 * kRKW;
constexpr int kRMisc = kRCoef + 2 * (int)RSSM_CUDA_STREAM_MAX_RING;
constexpr int kRStride = kRMisc + 4;
static_assert(kRStride % 4 == 0, "16-byte aligned records");

/* The row's window: its slot, its base n and its token count, clamped so
 * that n + T stays inside the ring (the host arranged it; the kernels index
 * by it). */
struct RowWindow {
    uint32_t slot, n, T;
    bool pad; /* a slot outside the tensors: no tokens, zero outputs */
};

__device__ __forceinline__ RowWindow row_window(const WArgs &a, uint32_t r)
{
    const RowStep s = row_step(a.p, a.b.io, r);
    return RowWindow{s.slot, s.n, s.pad ? 0u : min(min(a.drafts[r], a.t_max), a.p.ring_cap - s.n), s.pad};
}

/* x as ring dtype RT holds it; a finite x that RT cannot hold makes token t
 * the row's first overflowing one, unless an earlier token already is
 * (`first` NULL: the caller takes no report). */
template <int RT>
__device__ __forceinline__ typename Raw<RT>::T window_entry(float x, uint32_t *first, uint32_t r, uint32_t t)
{
    if constexpr (RT != kF32) {
        const float limit = RT == kF16 ? RSSM_F16_OVERFLOW : RSSM_BF16_OVERFLOW;
        if (first && fabsf(x) >= limit && !isinf(x))
            atomicMin(first + r, t);
    }
    return from_f<RT>(x);
}

} /* namespace rssm_kc */

#endif /* RSSM_WINDOW_COMMON_CUH */
