/*
 * The CUDA backend's benchmark entries (docs/design.md §7): a program of
 * steps recorded once as one CUDA graph and timed by events, the in-place
 * pass over a pool, and the copy bandwidth, each after the untimed runs
 * that bring the clocks up.
 */
#include "cuda_internal.h"

extern "C" {
#include "timing.h"
}

#include <stdlib.h>
#include <string.h>

namespace rssm_cuda_backend {

/* The median and fastest device seconds of `reps` event-timed runs of
 * `launch` on the context's stream, after the untimed ones of
 * rssm_warming_up. */
template <typename Launch>
static rssm_status time_runs(CudaCtx *c, uint32_t reps, bool warm, rssm_timing *timing, rssm_error *err,
                      const char *what, Launch launch)
{
    double *t = static_cast<double *>(malloc(reps * sizeof *t));
    if (!t)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cuda: out of host memory");
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaError_t e = cudaEventCreate(&e0);
    if (e == cudaSuccess)
        e = cudaEventCreate(&e1);
    /* Untimed until the clocks have ramped up, then the timed runs back to back. */
    const double started = rssm_now_seconds();
    uint32_t untimed = 0;
    for (; e == cudaSuccess && rssm_warming_up(warm, untimed, started); untimed++) {
        e = launch();
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(c->stream);
    }
    for (uint32_t r = 1; r <= reps && e == cudaSuccess; ++r) {
        e = cudaEventRecord(e0, c->stream);
        if (e == cudaSuccess)
            e = launch();
        if (e == cudaSuccess)
            e = cudaEventRecord(e1, c->stream);
        if (e == cudaSuccess)
            e = cudaEventSynchronize(e1);
        float ms = 0.0f;
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&ms, e0, e1);
        t[r - 1] = (double)ms * 1e-3;
    }
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (e == cudaSuccess)
        *timing = rssm_timing_of(t, reps, untimed + reps);
    free(t);
    return e == cudaSuccess ? RSSM_OK : cuda_fail(err, e, what);
}

/* The program is one CUDA graph of every layer of every step, each step
 * reading its own copy of the header (docs/design.md §7: what is timed is a
 * whole ring cycle as the engine would replay it, launch gaps included). */
rssm_status cuda_batch_time_steps(void *ctx, void *batch, uint32_t rows, uint32_t steps,
                                  const rssm_row_header *hdr, uint32_t reps, rssm_timing *timing, rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    CudaBatch *b = static_cast<CudaBatch *>(batch);
    const rssm_kernel_params &p = b->params;
    const size_t stride = (b->header_bytes + 255) / 256 * 256; /* keeps each copy 16-byte aligned */
    unsigned char *host = static_cast<unsigned char *>(calloc(steps, stride));
    if (!host)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cuda: out of host memory");
    for (uint32_t s = 0; s < steps; ++s) {
        uint32_t *words = reinterpret_cast<uint32_t *>(host + s * stride);
        words[RSSM_HEADER_ROWS] = rows;
        memcpy(words + RSSM_HEADER_WORDS, hdr + (size_t)s * rows, rows * sizeof(rssm_row_header));
    }
    unsigned char *dev = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaMalloc(reinterpret_cast<void **>(&dev), steps * stride);
    if (e == cudaSuccess)
        e = cudaMemcpy(dev, host, steps * stride, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        for (uint32_t s = 0; s < steps && e == cudaSuccess; ++s) {
            const uint32_t *header = reinterpret_cast<const uint32_t *>(dev + s * stride);
            for (uint32_t l = 0; l < p.layers && e == cudaSuccess; ++l) {
                const rssm_cuda_buffers buf = cuda_batch_buffers(b, l, header);
                e = rssm_cuda_launch_layer(&p, &buf, &b->plan, c->stream);
            }
        }
        const cudaError_t end = cudaStreamEndCapture(c->stream, &graph);
        if (e == cudaSuccess)
            e = end;
    }
    if (e == cudaSuccess)
        e = cudaGraphInstantiate(&exec, graph, 0);
    if (e == cudaSuccess)
        e = cudaGraphUpload(exec, c->stream);
    free(host);
    rssm_status st = e == cudaSuccess ? RSSM_OK : cuda_fail(err, e, "recording the timed program");
    if (st == RSSM_OK)
        st = time_runs(c, reps, true, timing, err, "running the timed program",
                            [&] { return cudaGraphLaunch(exec, c->stream); });
    if (exec)
        cudaGraphExecDestroy(exec);
    if (graph)
        cudaGraphDestroy(graph);
    cudaStreamSynchronize(c->stream);
    cudaFree(dev);
    return st == RSSM_OK ? rssm_clear_error(err) : st;
}

/* The fastest launch shape's median in-place pass over the pool. */
rssm_status cuda_pool_inplace_seconds(void *ctx, void *pool, size_t bytes, uint32_t reps, uint32_t flip,
                                      double *seconds, rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    CudaPool *p = static_cast<CudaPool *>(pool);
    double best = 0.0;
    for (uint32_t shape = 0; shape < RSSM_CUDA_INPLACE_SHAPES; ++shape) {
        rssm_timing t = {0.0, 0.0, 0};
        /* A flip is the tests' mode: exactly 1 + reps passes. */
        const rssm_status st = time_runs(c, reps, flip == 0, &t, err, "the in-place pass", [&] {
            return rssm_cuda_inplace_pass(p->mem, bytes, shape, cuda_plan_sms(c), flip, c->stream);
        });
        if (st != RSSM_OK)
            return st;
        best = shape == 0 || t.median_seconds < best ? t.median_seconds : best;
    }
    *seconds = best;
    return rssm_clear_error(err);
}

/* Median of timed device-to-device copies, counting bytes read + written. */
rssm_status cuda_copy_bandwidth(void *ctx, size_t bytes, double *bps, rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    void *src = NULL, *dst = NULL;
    cudaError_t e = cudaMalloc(&src, bytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&dst, bytes);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(src, 0x5a, bytes, c->stream);
    rssm_status st = e == cudaSuccess ? RSSM_OK : cuda_fail(err, e, "copy bandwidth");
    rssm_timing t = {0.0, 0.0, 0};
    if (st == RSSM_OK)
        st = time_runs(c, 9, true, &t, err, "copy bandwidth",
                       [&] { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream); });
    cudaFree(src);
    cudaFree(dst);
    if (st != RSSM_OK)
        return st;
    *bps = 2.0 * (double)bytes / t.median_seconds;
    return rssm_clear_error(err);
}

} /* namespace rssm_cuda_backend */
