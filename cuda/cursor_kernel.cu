/*
 * The cursor advance after a step (rssm_layer_advance), for engines that
 * keep their per-slot write positions on the device: one thread per row,
 * the flush rule of rssm_layout.h, so the engine's cursors move exactly as
 * the kernels decided.
 */
#include "rssm_cuda.h"

namespace {

__global__ void advance_kernel(uint32_t rows, uint32_t slots, uint32_t flags, uint32_t ring_cap,
                               const int32_t *slot_index, const int32_t *write_pos, const int32_t *force,
                               int32_t *cursor)
{
    const uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const uint32_t slot = (uint32_t)slot_index[r];
    if (RSSM_ROW_PADS(slot, slots, flags))
        return;
    /* the clamp of the decode kernels (kernel_common.cuh) */
    const uint32_t n = min((uint32_t)max(write_pos[r], 0), ring_cap);
    const uint32_t f = force ? (uint32_t)force[r] : 0u;
    cursor[slot] = RSSM_ROW_FLUSHES(n, ring_cap, f) ? 0 : (int32_t)n + 1;
}

} /* namespace */

extern "C" cudaError_t rssm_cuda_advance(const rssm_kernel_params *p, uint32_t rows, uint32_t slots,
                                         const int32_t *slot_index, const int32_t *write_pos, const int32_t *force,
                                         int32_t *cursor, cudaStream_t stream)
{
    const uint32_t threads = 256;
    advance_kernel<<<(rows + threads - 1) / threads, threads, 0, stream>>>(rows, slots, p->flags, p->ring_cap,
                                                                          slot_index, write_pos, force, cursor);
    return cudaGetLastError();
}
