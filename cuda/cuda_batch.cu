/*
 * Pools and batches of the CUDA backend (the whole-step API). A batch
 * records one CUDA graph of a whole step (every layer) once, after a
 * warm-up launch; every step afterwards only refreshes the step header in
 * device memory (a pinned host copy, one async memcpy) and replays the
 * graph. The kernels read slot, write_pos and force from that header and
 * decide the flush on the device, so no kernel argument is ever patched.
 * A speculative-decode window runs the window kernels layer by layer on
 * buffers of its own.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

namespace rssm_cuda_backend {

rssm_status cuda_pool_create(void *ctx, const rssm_slot_layout *layout, uint32_t slots, void **out,
                             rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaPool *pool = static_cast<CudaPool *>(calloc(1, sizeof *pool));
    if (!pool)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cuda: cannot allocate the pool record");
    pool->slot_bytes = layout->slot_bytes;
    pool->slots = slots;
    const cudaError_t e = cudaMalloc(reinterpret_cast<void **>(&pool->mem), layout->slot_bytes * slots);
    if (e != cudaSuccess) {
        free(pool);
        (void)cudaGetLastError();
        return rssm_set_error(err, e == cudaErrorMemoryAllocation ? RSSM_ERR_OUT_OF_MEMORY : RSSM_ERR_DEVICE,
                              "cuda: cannot allocate %u slots x %zu bytes of device memory: %s", slots,
                              layout->slot_bytes, cudaGetErrorString(e));
    }
    *out = pool;
    return rssm_clear_error(err);
}

void cuda_pool_destroy(void *ctx, void *pool)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaPool *p = static_cast<CudaPool *>(pool);
    if (!p)
        return;
    cudaFree(p->mem);
    free(p);
}

rssm_status cuda_slot_read(void *ctx, void *pool, uint32_t slot, void *bytes, rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    const CudaPool *p = static_cast<const CudaPool *>(pool);
    CK(cudaMemcpy(bytes, p->mem + (size_t)slot * p->slot_bytes, p->slot_bytes, cudaMemcpyDeviceToHost));
    return rssm_clear_error(err);
}

rssm_status cuda_slot_write(void *ctx, void *pool, uint32_t slot, const void *bytes, rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    const CudaPool *p = static_cast<const CudaPool *>(pool);
    CK(cudaMemcpy(p->mem + (size_t)slot * p->slot_bytes, bytes, p->slot_bytes, cudaMemcpyHostToDevice));
    return rssm_clear_error(err);
}

static void window_free(CudaBatch *b)
{
    cudaFree(b->wq);
    cudaFree(b->wk);
    cudaFree(b->wv);
    cudaFree(b->wgate);
    cudaFree(b->wbeta);
    cudaFree(b->wout);
    cudaFree(b->wscratch);
    cudaFree(b->wdrafts);
    cudaFree(b->wfirst);
    b->wscratch = nullptr;
    b->wq = b->wk = b->wv = b->wgate = b->wbeta = b->wout = nullptr;
    b->wdrafts = b->wfirst = nullptr;
    b->win_rows = 0;
}

static void batch_free(CudaBatch *b)
{
    if (b->exec)
        cudaGraphExecDestroy(b->exec);
    if (b->graph)
        cudaGraphDestroy(b->graph);
    if (b->start)
        cudaEventDestroy(b->start);
    if (b->stop)
        cudaEventDestroy(b->stop);
    cudaFreeHost(b->header_host);
    cudaFree(b->header_dev);
    cudaFree(b->q);
    cudaFree(b->k);
    cudaFree(b->v);
    cudaFree(b->out);
    cudaFree(b->gate);
    cudaFree(b->beta);
    cudaFree(b->A_log);
    cudaFree(b->dt_bias);
    cudaFree(b->work);
    cudaFree(b->overflow_dev);
    cudaFreeHost(b->overflow_host);
    window_free(b);
    free(b);
}

/* What layer l's launch works on, its rows those of the step header at
 * `header` (device memory): the batch's launches are those of
 * rssm_layer_run, on rssm's pool. */
rssm_cuda_buffers cuda_batch_buffers(const CudaBatch *b, uint32_t l, const uint32_t *header)
{
    const rssm_batch_arrays arrays = {b->q, b->k, b->v, b->gate, b->beta, b->out, b->A_log, b->dt_bias};
    rssm_cuda_buffers buf;
    memset(&buf, 0, sizeof buf);
    rssm_layer_io_of_batch(&buf.io, &b->params, b->pool->mem, b->pool->slots, &arrays, header, b->overflow_dev, l);
    buf.work = b->work;
    return buf;
}

/* Everything of batch_create that can fail, on a zeroed record; the caller
 * frees the record on failure. */
static rssm_status batch_build(CudaCtx *c, CudaBatch *b, rssm_error *err)
{
    const rssm_kernel_params &p = b->params;
    const size_t Kg = p.gate_kind == RSSM_CODE_GATE_KDA ? p.head_k : 1;
    const size_t rows = (size_t)p.layers * p.max_rows;
    rssm_io_sizes_init(&b->row, &p, 1);
    b->header_bytes = RSSM_HEADER_BYTES(p.max_rows);

    CK(cudaMalloc(&b->q, rows * b->row.q));
    CK(cudaMalloc(&b->k, rows * b->row.k));
    CK(cudaMalloc(&b->v, rows * b->row.v));
    CK(cudaMalloc(&b->out, rows * b->row.out));
    CK(cudaMalloc(reinterpret_cast<void **>(&b->gate), rows * b->row.gate));
    CK(cudaMalloc(reinterpret_cast<void **>(&b->beta), rows * b->row.beta));
    CK(cudaMalloc(reinterpret_cast<void **>(&b->A_log), (size_t)p.layers * p.num_v_heads * sizeof(float)));
    CK(cudaMalloc(reinterpret_cast<void **>(&b->dt_bias), (size_t)p.layers * p.num_v_heads * Kg * sizeof(float)));
    CK(cudaMalloc(reinterpret_cast<void **>(&b->header_dev), b->header_bytes));
    CK(cudaMalloc(reinterpret_cast<void **>(&b->work), RSSM_CUDA_WORK_BYTES));
    CK(cudaMemsetAsync(b->work, 0, RSSM_CUDA_WORK_BYTES, c->stream));
    CK(cudaMallocHost(reinterpret_cast<void **>(&b->header_host), b->header_bytes));
    CK(cudaMalloc(reinterpret_cast<void **>(&b->overflow_dev), (size_t)p.max_rows * sizeof(uint32_t)));
    CK(cudaMemsetAsync(b->overflow_dev, 0, (size_t)p.max_rows * sizeof(uint32_t), c->stream));
    CK(cudaMallocHost(reinterpret_cast<void **>(&b->overflow_host), (size_t)p.max_rows * sizeof(uint32_t)));
    /* Defined contents everywhere: inputs never uploaded read as zeros, and
     * the gate weights start at A_log = 0, dt_bias = 0 until set. */
    CK(cudaMemsetAsync(b->q, 0, rows * b->row.q, c->stream));
    CK(cudaMemsetAsync(b->k, 0, rows * b->row.k, c->stream));
    CK(cudaMemsetAsync(b->v, 0, rows * b->row.v, c->stream));
    CK(cudaMemsetAsync(b->out, 0, rows * b->row.out, c->stream));
    CK(cudaMemsetAsync(b->gate, 0, rows * b->row.gate, c->stream));
    CK(cudaMemsetAsync(b->beta, 0, rows * b->row.beta, c->stream));
    CK(cudaMemsetAsync(b->A_log, 0, (size_t)p.layers * p.num_v_heads * sizeof(float), c->stream));
    CK(cudaMemsetAsync(b->dt_bias, 0, (size_t)p.layers * p.num_v_heads * Kg * sizeof(float), c->stream));
    /* A header of zero rows: the warm-up launch touches no slot. */
    CK(cudaMemsetAsync(b->header_dev, 0, b->header_bytes, c->stream));
    memset(b->header_host, 0, b->header_bytes);
    CK(cudaEventCreate(&b->start));
    CK(cudaEventCreate(&b->stop));

    rssm_cuda_plan_init(&b->plan, &p, cuda_plan_sms(c), c->prop.sharedMemPerMultiprocessor, cuda_plan_allow(c), 0, 0);
    if (c->kernel >= 0) {
        const char *why = cuda_kernel_refusal(c, &p);
        if (why)
            return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "%s: %s", c->variant, why);
        b->plan.kernel = (uint32_t)c->kernel;
    }
    CK(rssm_cuda_plan_prepare(&b->plan, &p));
    if (rssm_cuda_window_supported(&p)) /* the window kernels' shared-memory limit, once */
        CK(rssm_cuda_window_prepare(&p, &b->plan));
    /* Warm-up outside capture: loads the module, checks the launch shape. */
    for (uint32_t l = 0; l < p.layers; ++l) {
        const rssm_cuda_buffers buf = cuda_batch_buffers(b, l, b->header_dev);
        CK(rssm_cuda_launch_layer(&p, &buf, &b->plan, c->stream));
    }
    CK(cudaStreamSynchronize(c->stream));

    CK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    cudaError_t e = cudaSuccess;
    for (uint32_t l = 0; l < p.layers && e == cudaSuccess; ++l) {
        const rssm_cuda_buffers buf = cuda_batch_buffers(b, l, b->header_dev);
        e = rssm_cuda_launch_layer(&p, &buf, &b->plan, c->stream);
    }
    const cudaError_t end = cudaStreamEndCapture(c->stream, &b->graph);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "recording the step graph");
    CK(end);
    CK(cudaGraphInstantiate(&b->exec, b->graph, 0));
    CK(cudaGraphUpload(b->exec, c->stream));
    CK(cudaStreamSynchronize(c->stream));
    return RSSM_OK;
}

rssm_status cuda_batch_create(void *ctx, void *pool, const rssm_kernel_params *params, void **out,
                              rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    const char *why = cuda_kernel_refusal(c, params);
    if (why)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "%s: %s", c->variant, why);
    CudaBatch *b = static_cast<CudaBatch *>(calloc(1, sizeof *b));
    if (!b)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cuda: cannot allocate the batch record");
    b->pool = static_cast<CudaPool *>(pool);
    b->params = *params;
    const rssm_status st = batch_build(c, b, err);
    if (st != RSSM_OK) {
        batch_free(b);
        return st;
    }
    *out = b;
    return rssm_clear_error(err);
}

void cuda_batch_destroy(void *ctx, void *batch)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    if (!batch)
        return;
    cudaStreamSynchronize(c->stream);
    batch_free(static_cast<CudaBatch *>(batch));
}

rssm_status cuda_batch_set_gate_params(void *ctx, void *batch, uint32_t layer, const float *A_log,
                                       const float *dt_bias, rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    CudaBatch *b = static_cast<CudaBatch *>(batch);
    const size_t HV = b->params.num_v_heads;
    const size_t Kg = b->params.gate_kind == RSSM_CODE_GATE_KDA ? b->params.head_k : 1;
    CK(cudaMemcpyAsync(b->A_log + layer * HV, A_log, HV * sizeof(float), cudaMemcpyHostToDevice, c->stream));
    CK(cudaMemcpyAsync(b->dt_bias + layer * HV * Kg, dt_bias, HV * Kg * sizeof(float),
                       cudaMemcpyHostToDevice, c->stream));
    CK(cudaStreamSynchronize(c->stream));
    return rssm_clear_error(err);
}

/* Host [layers][rows][row_bytes] into device [layers][max_rows][row_bytes]. */
static cudaError_t upload_rows(CudaCtx *c, const CudaBatch *b, void *dst, const void *src, size_t row_bytes,
                        uint32_t rows)
{
    return cudaMemcpy2DAsync(dst, row_bytes * b->params.max_rows, src, row_bytes * rows, row_bytes * rows,
                             b->params.layers, cudaMemcpyHostToDevice, c->stream);
}

rssm_status cuda_batch_upload(void *ctx, void *batch, uint32_t rows, const rssm_step_inputs *in,
                              rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    CudaBatch *b = static_cast<CudaBatch *>(batch);
    if (rows == 0)
        return rssm_clear_error(err);
    CK(upload_rows(c, b, b->q, in->q, b->row.q, rows));
    CK(upload_rows(c, b, b->k, in->k, b->row.k, rows));
    CK(upload_rows(c, b, b->v, in->v, b->row.v, rows));
    CK(upload_rows(c, b, b->gate, in->gate, b->row.gate, rows));
    CK(upload_rows(c, b, b->beta, in->beta, b->row.beta, rows));
    CK(cudaStreamSynchronize(c->stream));
    return rssm_clear_error(err);
}

/* The step header of `rows` rows, through the pinned copy, onto the
 * context's stream (batch_run's and the window's). */
static cudaError_t upload_header(CudaCtx *c, CudaBatch *b, uint32_t rows, const rssm_row_header *hdr)
{
    b->header_host[RSSM_HEADER_ROWS] = rows;
    memcpy(b->header_host + RSSM_HEADER_WORDS, hdr, rows * sizeof(rssm_row_header));
    return cudaMemcpyAsync(b->header_dev, b->header_host, 4u * (RSSM_HEADER_WORDS + RSSM_ROW_WORDS * (size_t)rows),
                           cudaMemcpyHostToDevice, c->stream);
}

rssm_status cuda_batch_run(void *ctx, void *batch, uint32_t rows, const rssm_row_header *hdr,
                           uint32_t *overflow, rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    CudaBatch *b = static_cast<CudaBatch *>(batch);
    const size_t flag_bytes = rows * sizeof(uint32_t);
    CK(upload_header(c, b, rows, hdr));
    CK(cudaMemsetAsync(b->overflow_dev, 0, flag_bytes, c->stream));
    CK(cudaEventRecord(b->start, c->stream));
    CK(cudaGraphLaunch(b->exec, c->stream));
    CK(cudaEventRecord(b->stop, c->stream));
    if (overflow)
        CK(cudaMemcpyAsync(b->overflow_host, b->overflow_dev, flag_bytes, cudaMemcpyDeviceToHost, c->stream));
    CK(cudaStreamSynchronize(c->stream));
    if (overflow)
        memcpy(overflow, b->overflow_host, flag_bytes);
    CK(cudaGetLastError());
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, b->start, b->stop));
    b->last_seconds = (double)ms * 1e-3;
    return rssm_clear_error(err);
}

rssm_status cuda_batch_download(void *ctx, void *batch, uint32_t rows, void *out, rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    CudaBatch *b = static_cast<CudaBatch *>(batch);
    if (rows == 0)
        return rssm_clear_error(err);
    CK(cudaMemcpy2DAsync(out, b->row.out * rows, b->out, b->row.out * b->params.max_rows, b->row.out * rows,
                         b->params.layers, cudaMemcpyDeviceToHost, c->stream));
    CK(cudaStreamSynchronize(c->stream));
    return rssm_clear_error(err);
}

double cuda_batch_last_run_seconds(void *ctx, void *batch)
{
    (void)ctx;
    return static_cast<const CudaBatch *>(batch)->last_seconds;
}

/* Window buffers for `rows` rows of `t_max` tokens, one layer, and their
 * records, kept when large enough. */
static rssm_status window_reserve(CudaBatch *b, uint32_t rows, uint32_t t_max, rssm_error *err)
{
    const uint32_t need = rows * t_max;
    if (need <= b->win_rows)
        return RSSM_OK;
    window_free(b);
    const rssm_kernel_params &p = b->params;
    const size_t max_rows = p.max_rows;
    CK(cudaMalloc(&b->wq, need * b->row.q));
    CK(cudaMalloc(&b->wk, need * b->row.k));
    CK(cudaMalloc(&b->wv, need * b->row.v));
    CK(cudaMalloc(&b->wgate, need * b->row.gate));
    CK(cudaMalloc(&b->wbeta, need * b->row.beta));
    CK(cudaMalloc(&b->wout, need * b->row.out));
    /* a record per token of each (row, value head): one per step-array row */
    CK(cudaMalloc(reinterpret_cast<void **>(&b->wscratch), rssm_cuda_window_scratch_bytes(&p, need, 1u)));
    CK(cudaMalloc(reinterpret_cast<void **>(&b->wdrafts), max_rows * sizeof(uint32_t)));
    CK(cudaMalloc(reinterpret_cast<void **>(&b->wfirst), max_rows * sizeof(uint32_t)));
    b->win_rows = need;
    return RSSM_OK;
}

/* Whether the window kernels run a window of `rows` rows and up to t_max
 * tokens, else its tokens run as steps: one token must be a step, bit for
 * bit (docs/design.md §9); beyond that, what the H200 measured (torch in
 * CUDA graphs, bench/results/h200/notes.md, History: verify): where the plan
 * runs the bulk kernel (batches that give every SM a row and head), a window
 * of 2 took 0.66-0.83x the time of its 2 steps; below that (batch 1), on the
 * two-kernel window, 1.13-1.22x, and a window of 4 0.57-0.60x its 4 steps.
 * The one-launch window of the small batches (rssm_cuda_window_fused) took
 * 0.94-0.95x its 2 steps at batch 1 (bench/results/h100/notes.md). */
static bool window_runs(const rssm_cuda_plan &plan, uint32_t rows, uint32_t t_max)
{
    if (t_max < 2u)
        return false;
    return plan.kernel == RSSM_CUDA_KERNEL_BULK || t_max >= 4u || rssm_cuda_window_fused(&plan, rows, t_max);
}

/* The window of every row at once (window_kernel.cu), layer by layer: the
 * layer's tokens up, the window's launches, its outputs down. Windows the
 * kernels do not take (window_runs, rings beyond the
 * stream kernels') are handed back to common code, which runs them one step
 * per token. */
rssm_status cuda_batch_verify(void *ctx, void *batch, uint32_t rows, const rssm_row_header *hdr,
                              const uint32_t *drafts, uint32_t t_max, const rssm_step_inputs *in, void *out,
                              uint32_t *first_overflow, rssm_error *err)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    CudaBatch *b = static_cast<CudaBatch *>(batch);
    const rssm_kernel_params &p = b->params;
    if (!window_runs(b->plan, rows, t_max) || !rssm_cuda_window_supported(&p))
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "cuda: this window runs one step per token");
    rssm_status st = window_reserve(b, rows, t_max, err);
    if (st != RSSM_OK)
        return st;
    CK(upload_header(c, b, rows, hdr));
    CK(cudaMemcpyAsync(b->wdrafts, drafts, rows * sizeof(uint32_t), cudaMemcpyHostToDevice, c->stream));
    CK(cudaMemsetAsync(b->wfirst, 0xff, rows * sizeof(uint32_t), c->stream));
    const size_t layers = p.layers;
    const size_t win = (size_t)rows; /* one token's rows */
    double seconds = 0.0;
    for (uint32_t l = 0; l < p.layers; ++l) {
        /* token t's rows of layer l: host block [t][l], device block t */
        const struct {
            void *dst;
            const void *src;
            size_t bytes;
        } up[] = {
            {b->wq, in->q, b->row.q},       {b->wk, in->k, b->row.k},
            {b->wv, in->v, b->row.v},       {b->wgate, in->gate, b->row.gate},
            {b->wbeta, in->beta, b->row.beta},
        };
        for (const auto &u : up)
            CK(cudaMemcpy2DAsync(u.dst, win * u.bytes, static_cast<const uint8_t *>(u.src) + l * win * u.bytes,
                                 layers * win * u.bytes, win * u.bytes, t_max, cudaMemcpyHostToDevice, c->stream));
        rssm_cuda_buffers buf = cuda_batch_buffers(b, l, b->header_dev);
        buf.io.q = static_cast<const uint8_t *>(b->wq);
        buf.io.k = static_cast<const uint8_t *>(b->wk);
        buf.io.v = static_cast<const uint8_t *>(b->wv);
        buf.io.gate = static_cast<const uint8_t *>(b->wgate);
        buf.io.beta = static_cast<const uint8_t *>(b->wbeta);
        buf.io.out = static_cast<uint8_t *>(b->wout);
        buf.io.overflow = b->wfirst;
        buf.scratch = b->wscratch;
        CK(cudaEventRecord(b->start, c->stream));
        CK(rssm_cuda_window_launch(&p, &buf, &b->plan, b->wdrafts, rows, t_max, c->stream));
        CK(cudaEventRecord(b->stop, c->stream));
        CK(cudaMemcpy2DAsync(static_cast<uint8_t *>(out) + l * win * b->row.out, layers * win * b->row.out, b->wout,
                             win * b->row.out, win * b->row.out, t_max, cudaMemcpyDeviceToHost, c->stream));
        CK(cudaStreamSynchronize(c->stream));
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, b->start, b->stop));
        seconds += (double)ms * 1e-3;
    }
    CK(cudaMemcpy(first_overflow, b->wfirst, rows * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    b->last_seconds = seconds;
    return rssm_clear_error(err);
}

} /* namespace rssm_cuda_backend */
