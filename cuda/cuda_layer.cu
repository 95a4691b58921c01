/*
 * One layer of the CUDA backend on the caller's memory (rssm_layer_run,
 * docs/engines.md): a plan made once, outside any capture, and per call
 * one launch on the caller's stream, with nothing allocated or waited for,
 * so that an engine's CUDA graph captures it.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

namespace rssm_cuda_backend {

struct CudaLayer {
    int device;
    uint32_t slots;
    rssm_kernel_params params;
    rssm_cuda_plan plan;
    uint32_t *work;
    rssm_kernel_params fold; /* rssm_layer_materialise's launch (backend.h) */
    void *fold_buf;
    /* rssm_layer_verify's window: the records of max_rows step-array rows
     * (NULL: the model has no window kernel) */
    float *win_scratch;
};

/* The pointers of a launch, as rssm_layer_misaligned_stride asks of the
 * strides: the arrays a head moves as 16-byte vectors or bulk copies on
 * 16 bytes, the gates, beta and a GDN ring's one gate per entry on their
 * elements. */
static const char *misaligned_pointer(const rssm_kernel_params *p, const rssm_layer_io *io)
{
    const bool kda = p->gate_kind == RSSM_CODE_GATE_KDA;
    const uintptr_t gsz = p->flags & RSSM_FLAG_GATE_BF16 ? 2u : 4u;
    const struct {
        const void *ptr;
        uintptr_t align;
        const char *name;
    } pt[] = {
        {io->ckpt, 16, "state"}, {io->ring_d, 16, "ring_d"}, {io->ring_k, 16, "ring_k"},
        {io->ring_g, kda ? 16u : 4u, "ring_g"}, {io->q, 16, "q"}, {io->k, 16, "k"}, {io->v, 16, "v"},
        {io->out, 16, "out"}, {io->gate, gsz, "gate"}, {io->beta, gsz, "beta"}, {io->A_log, 4, "A_log"},
        {io->dt_bias, 4, "dt_bias"}, {io->row_slot, 4, "slot_index"}, {io->row_write_pos, 4, "write_pos"},
        {io->row_force, 4, "force"}, {io->overflow, 4, "overflow"},
    };
    for (const auto &x : pt)
        if (reinterpret_cast<uintptr_t>(x.ptr) % x.align != 0)
            return x.name;
    return NULL;
}

rssm_status cuda_layer_check(void *ctx, const rssm_kernel_params *p, const rssm_layer_io *shape, rssm_error *err)
{
    const CudaCtx *c = static_cast<const CudaCtx *>(ctx);
    const char *why = cuda_kernel_refusal(c, p);
    if (why)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "%s: %s", c->variant, why);
    if ((why = rssm_layer_misaligned_stride(p, shape)) != NULL)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              "%s: the %s is not a multiple of 16 bytes (4 for a GDN ring's gates): the kernels "
                              "move a head's rows as 16-byte vectors",
                              c->variant, why);
    return rssm_clear_error(err);
}

void cuda_layer_destroy(void *ctx, void *layer)
{
    (void)ctx;
    CudaLayer *l = static_cast<CudaLayer *>(layer);
    if (!l)
        return;
    const DeviceGuard guard(l->device);
    cudaFree(l->work);
    cudaFree(l->fold_buf);
    cudaFree(l->win_scratch);
    free(l);
}

rssm_status cuda_layer_create(void *ctx, const rssm_kernel_params *p, const rssm_layer_io *shape, void **out,
                              rssm_error *err)
{
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    CudaLayer *l = static_cast<CudaLayer *>(calloc(1, sizeof *l));
    if (!l)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cuda: cannot allocate the layer record");
    l->device = c->device;
    l->slots = shape->slots;
    l->params = *p;
    rssm_cuda_plan_init(&l->plan, p, cuda_plan_sms(c), c->prop.sharedMemPerMultiprocessor, cuda_plan_allow(c), 0, 0);
    if (c->kernel >= 0)
        l->plan.kernel = (uint32_t)c->kernel;
    /* Everything a launch needs is made here, outside any capture: the
     * kernel's shared-memory limit, the zeroed work counters. */
    const DeviceGuard guard(c->device);
    cudaError_t e = rssm_cuda_plan_prepare(&l->plan, p);
    if (e == cudaSuccess)
        e = cudaMalloc(reinterpret_cast<void **>(&l->work), RSSM_CUDA_WORK_BYTES);
    if (e == cudaSuccess)
        e = cudaMemset(l->work, 0, RSSM_CUDA_WORK_BYTES);
    rssm_fold_params(&l->fold, p);
    const size_t fold_bytes = rssm_fold_bytes(&l->fold);
    void *image = e == cudaSuccess ? malloc(fold_bytes) : NULL;
    if (e == cudaSuccess && !image)
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = cudaMalloc(&l->fold_buf, fold_bytes);
    if (e == cudaSuccess) {
        rssm_fold_image(image, &l->fold);
        e = cudaMemcpy(l->fold_buf, image, fold_bytes, cudaMemcpyHostToDevice);
    }
    free(image);
    if (e == cudaSuccess && rssm_cuda_window_supported(p)) {
        e = cudaMalloc(reinterpret_cast<void **>(&l->win_scratch), rssm_cuda_window_scratch_bytes(p, p->max_rows, 1u));
        if (e == cudaSuccess)
            e = rssm_cuda_window_prepare(p, &l->plan);
    }
    if (e != cudaSuccess) {
        cuda_layer_destroy(ctx, l);
        return cuda_fail(err, e, "preparing the layer's kernel");
    }
    *out = l;
    return rssm_clear_error(err);
}

/* RSSM_ERR_INVALID_ARGUMENT naming a pointer of io the kernels cannot take. */
static rssm_status check_pointers(const CudaCtx *c, const rssm_kernel_params *p, const rssm_layer_io *io, rssm_error *err)
{
    const char *why = misaligned_pointer(p, io);
    if (why)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: %s is not 16-byte aligned (for the gates and "
                              "beta their element, for the gate weights and the row arrays 4 bytes)", c->variant, why);
    return RSSM_OK;
}

/* One launch of layer l with kernel parameters p (the layer's, or its
 * fold's) on io. */
static rssm_status layer_launch(const CudaCtx *c, CudaLayer *l, const rssm_kernel_params *p, const rssm_layer_io *io,
                         void *stream, rssm_error *err)
{
    rssm_status st = check_pointers(c, p, io, err);
    if (st != RSSM_OK)
        return st;
    rssm_cuda_buffers buf;
    memset(&buf, 0, sizeof buf);
    buf.io = *io;
    buf.work = l->work;
    const DeviceGuard guard(l->device);
    const cudaError_t e = rssm_cuda_launch_layer(p, &buf, &l->plan, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess)
        return cuda_fail(err, e, "launching the layer");
    return rssm_clear_error(err);
}

rssm_status cuda_layer_run(void *ctx, void *layer, const rssm_layer_io *io, void *stream, rssm_error *err)
{
    CudaLayer *l = static_cast<CudaLayer *>(layer);
    return layer_launch(static_cast<const CudaCtx *>(ctx), l, &l->params, io, stream, err);
}

rssm_status cuda_layer_materialise(void *ctx, void *layer, const rssm_layer_io *io, void *stream, rssm_error *err)
{
    CudaLayer *l = static_cast<CudaLayer *>(layer);
    rssm_layer_io fold = *io;
    rssm_fold_io(&fold, &l->fold, l->fold_buf);
    return layer_launch(static_cast<const CudaCtx *>(ctx), l, &l->fold, &fold, stream, err);
}

/* rssm_layer_verify: the window kernels on the caller's tensors (every
 * window size: there is no step fallback inside one call). */
rssm_status cuda_layer_verify(void *ctx, void *layer, const rssm_layer_io *io, uint32_t t_max, const uint32_t *drafts,
                              void *stream, rssm_error *err)
{
    const CudaCtx *c = static_cast<const CudaCtx *>(ctx);
    CudaLayer *l = static_cast<CudaLayer *>(layer);
    if (!l->win_scratch)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "%s: no window kernel for this model (rings of up to %u "
                              "entries, head_k up to %u)", c->variant, RSSM_CUDA_STREAM_MAX_RING, RSSM_CUDA_MAX_HEAD_K);
    rssm_status st = check_pointers(c, &l->params, io, err);
    if (st != RSSM_OK)
        return st;
    rssm_cuda_buffers buf;
    memset(&buf, 0, sizeof buf);
    buf.io = *io;
    buf.scratch = l->win_scratch;
    buf.work = l->work;
    const DeviceGuard guard(l->device);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    /* the overflow words start at UINT32_MAX only where the caller takes
     * them: without, the window is its kernels alone, a graph of one node
     * per layer at the small batches (programmatic dependents of one
     * another, which a memset between them would not be) */
    cudaError_t e = io->overflow ? cudaMemsetAsync(io->overflow, 0xff, io->rows * sizeof(uint32_t), s) : cudaSuccess;
    if (e == cudaSuccess)
        e = rssm_cuda_window_launch(&l->params, &buf, &l->plan, drafts, io->rows, t_max, s);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "launching the window");
    return rssm_clear_error(err);
}

rssm_status cuda_layer_advance(void *ctx, void *layer, uint32_t rows, const int32_t *slot_index,
                               const int32_t *write_pos, const int32_t *force, int32_t *cursor, void *stream,
                               rssm_error *err)
{
    (void)ctx;
    CudaLayer *l = static_cast<CudaLayer *>(layer);
    const DeviceGuard guard(l->device);
    const cudaError_t e = rssm_cuda_advance(&l->params, rows, l->slots, slot_index, write_pos, force, cursor,
                                            static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess)
        return cuda_fail(err, e, "launching the cursor advance");
    return rssm_clear_error(err);
}

} /* namespace rssm_cuda_backend */
