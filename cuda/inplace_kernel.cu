/*
 * The in-place bound of docs/design.md §7: one pass that reads every 16
 * bytes of a buffer and writes them back unchanged (xor with a run-time
 * zero, so nothing is elided). A packed step cannot be faster than this
 * pass over its state; the benchmark reports both from the same run.
 */
#include "rssm_cuda.h"

#include <cuda_runtime.h>

namespace {

/* Each block takes contiguous tiles of D x blockDim vectors, D loads in
 * flight per thread, so DRAM pages are walked in order; CS: streaming
 * cache hints. */
template <int D, bool CS> __global__ void inplace_kernel(uint4 *buf, size_t n, uint32_t flip)
{
    const size_t tile = D * (size_t)blockDim.x;
    for (size_t t = (size_t)blockIdx.x * tile; t < n; t += (size_t)gridDim.x * tile) {
        uint4 v[D];
#pragma unroll
        for (int u = 0; u < D; ++u) {
            const size_t i = t + (size_t)u * blockDim.x + threadIdx.x;
            if (i < n)
                v[u] = CS ? __ldcs(buf + i) : buf[i];
        }
#pragma unroll
        for (int u = 0; u < D; ++u) {
            const size_t i = t + (size_t)u * blockDim.x + threadIdx.x;
            v[u].x ^= flip;
            v[u].y ^= flip;
            v[u].z ^= flip;
            v[u].w ^= flip;
            if (i < n) {
                if (CS)
                    __stcs(buf + i, v[u]);
                else
                    buf[i] = v[u];
            }
        }
    }
}

} /* namespace */

extern "C" cudaError_t rssm_cuda_inplace_pass(void *p, size_t bytes, uint32_t shape, int sm_count,
                                              uint32_t flip, cudaStream_t stream)
{
    uint4 *b = static_cast<uint4 *>(p);
    const size_t n = bytes / 16;
    const uint32_t sms = (uint32_t)sm_count;
    switch (shape) {
    case 0: inplace_kernel<4, true><<<8 * sms, 256, 0, stream>>>(b, n, flip); break;
    case 1: inplace_kernel<4, false><<<8 * sms, 256, 0, stream>>>(b, n, flip); break;
    case 2: inplace_kernel<8, false><<<16 * sms, 128, 0, stream>>>(b, n, flip); break;
    default: inplace_kernel<2, true><<<4 * sms, 1024, 0, stream>>>(b, n, flip); break;
    }
    return cudaGetLastError();
}
