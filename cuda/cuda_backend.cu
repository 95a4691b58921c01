/*
 * The CUDA backend: the ops table of common/backend.h over the CUDA runtime.
 *
 * A batch records one CUDA graph of a whole step (every layer) once, after a
 * warm-up launch; every step afterwards only refreshes the step header in
 * device memory (a pinned host copy, one async memcpy) and replays the
 * graph. The kernels read slot, write_pos and force from that header and
 * decide the flush on the device, so no kernel argument is ever patched.
 *
 * Host code only: C linkage, no exceptions, no C++ runtime objects, so the
 * static library links into C programs with the CUDA runtime alone.
 */
#include "rssm_cuda.h"
#include "rssm_cuda_build.h" /* RSSM_CUDA_TARGETS */

extern "C" {
#include "backend.h"
#include "targets.h"
#include "error.h"
#include "timing.h"
}

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

struct CudaCtx {
    int device;
    cudaDeviceProp prop;
    cudaStream_t stream;
    char name[128];
    char variant[32];
    int kernel; /* RSSM_CUDA_KERNEL_* the variant asks for; -1: the plan's choice */
    int sm_limit; /* rssm_backend_limit_sms: 0, or the multiprocessors plans are made for */
    rssm_cuda_kernels kernels; /* what the code CUDA loaded on the device may launch */
};

/* The multiprocessors a plan is made for: the device's, or fewer under
 * rssm_backend_limit_sms. */
int plan_sms(const CudaCtx *c)
{
    const int all = c->prop.multiProcessorCount;
    return c->sm_limit > 0 && c->sm_limit < all ? c->sm_limit : all;
}

struct CudaPool {
    unsigned char *mem;
    size_t slot_bytes;
    uint32_t slots;
};

struct CudaBatch {
    CudaPool *pool;
    rssm_kernel_params params;
    rssm_cuda_plan plan;
    uint32_t *header_dev;
    uint32_t *header_host;    /* pinned */
    size_t header_bytes;
    void *q, *k, *v, *out;
    float *gate, *beta, *A_log, *dt_bias;
    uint32_t *work;           /* the bulk kernel's work counters */
    uint32_t *overflow_dev;   /* [max_rows] rssm_layer_io.overflow */
    uint32_t *overflow_host;  /* [max_rows], pinned */
    rssm_io_sizes row;                       /* bytes per row of each array, one layer */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaEvent_t start, stop;
    double last_seconds;
    /* The speculative-decode window's own buffers (cuda_batch_verify), made
     * on the first window and grown to the largest: one layer's step arrays
     * for win_rows rows (a window's tokens times its rows), its tokens'
     * records, its rows' token counts and first overflowing tokens. */
    uint32_t win_rows;
    void *wq, *wk, *wv, *wgate, *wbeta, *wout;
    float *wscratch;
    uint32_t *wdrafts, *wfirst;
};

/* Makes the context's device current for the rest of a scope, and the
 * caller's current again after it: the backend works on its own device
 * (rssm_backend_create_on_device) whatever the calling thread selected, and
 * leaves the selection as it found it (an engine's thread, torch's, keeps
 * its own). Every entry of the table below that calls CUDA holds one. */
struct DeviceGuard {
    int prev = -1;
    bool switched = false;
    explicit DeviceGuard(int device)
    {
        if (cudaGetDevice(&prev) == cudaSuccess && prev != device)
            switched = cudaSetDevice(device) == cudaSuccess;
    }
    ~DeviceGuard()
    {
        if (switched)
            cudaSetDevice(prev);
    }
    DeviceGuard(const DeviceGuard &) = delete;
    DeviceGuard &operator=(const DeviceGuard &) = delete;
};

rssm_status cuda_fail(rssm_error *err, cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls start clean */
    const rssm_status st = e == cudaErrorMemoryAllocation ? RSSM_ERR_OUT_OF_MEMORY : RSSM_ERR_DEVICE;
    return rssm_set_error(err, st, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        const cudaError_t ck_e = (call);                                                           \
        if (ck_e != cudaSuccess)                                                                   \
            return cuda_fail(err, ck_e, #call);                                                    \
    } while (0)

/* One variant per kernel family, besides the plan's choice ("cuda"): a
 * variant runs its kernel on every batch or refuses the model; nothing
 * falls back to another kernel. */
const char *const kVariants[] = {"cuda", "cuda:bulk", "cuda:stream", "cuda:pipeline", NULL};

int variant_kernel(const char *variant)
{
    if (strcmp(variant, "cuda") == 0)
        return -1;
    if (strcmp(variant, "cuda:bulk") == 0)
        return (int)RSSM_CUDA_KERNEL_BULK;
    if (strcmp(variant, "cuda:stream") == 0)
        return (int)RSSM_CUDA_KERNEL_STREAM;
    if (strcmp(variant, "cuda:pipeline") == 0)
        return (int)RSSM_CUDA_KERNEL_PIPELINE;
    return -2;
}

/* What the plans of this context may use: what the device's code has. */
uint32_t plan_allow(const CudaCtx *c)
{
    return (c->kernels.bulk ? RSSM_CUDA_ALLOW_BULK : 0u) | (c->kernels.pdl ? RSSM_CUDA_ALLOW_PDL : 0u);
}

/* Why the context's kernel (c->kernel: RSSM_CUDA_KERNEL_*, or -1 for the
 * plan's choice) cannot run `p`, or NULL: the one place that decides which
 * kernel may run what, for cuda_supports and batch_build alike. The
 * pipeline kernel and the plan's choice run whatever rssm_cuda_unsupported
 * accepts (the plan picks among the kernels the device's code has); the
 * bulk kernel needs its sm_90 code on the device (cuda/targets.h). */
const char *kernel_refusal(const CudaCtx *c, const rssm_kernel_params *p)
{
    const int kernel = c->kernel;
    const char *why = rssm_cuda_unsupported(p, c->prop.sharedMemPerBlockOptin);
    if (why)
        return why;
    if (kernel == (int)RSSM_CUDA_KERNEL_BULK && !c->kernels.bulk)
        return c->kernels.why_not;
    if (kernel == (int)RSSM_CUDA_KERNEL_BULK && !rssm_cuda_bulk_supported(p))
        return "the bulk kernel takes K a multiple of 32 up to 128, V a multiple of a stage's rows (32 for "
               "fp32 state, 64 for bf16), fp32 or bf16 state, rings of at most 16 entries whose d entries "
               "fit 8 KiB (ring entries x V x ring bytes) and 16-byte aligned slot layouts";
    if (kernel == (int)RSSM_CUDA_KERNEL_STREAM && !rssm_cuda_stream_supported(p))
        return "the stream kernels take K up to 128 and rings of at most 16 entries";
    return NULL;
}

/* The device choice's refusal, with the capability of each device, since
 * the targets alone do not say which device fell short. */
rssm_status refuse_devices(rssm_status st, const int *cc, int count, rssm_error *err)
{
    if (st != RSSM_ERR_UNAVAILABLE || !err)
        return st;
    char list[256];
    size_t len = 0;
    list[0] = '\0';
    for (int i = 0; i < count && len < sizeof list; ++i) {
        const int w = snprintf(list + len, sizeof list - len, "%s%d: %d.%d", i ? ", " : "", i, cc[i] / 10, cc[i] % 10);
        len += w > 0 ? (size_t)w : 0u;
    }
    char msg[sizeof err->message];
    snprintf(msg, sizeof msg, "%s", err->message);
    return rssm_set_error(err, st, "%s; this process's devices by compute capability: %s", msg, list);
}

/* What CUDA loaded of each kernel file on the current device (the
 * rssm_cuda_part order), 0 where it has none; the first error in
 * *first_error. */
void device_code(rssm_cuda_code code[RSSM_CUDA_PARTS], cudaError_t *first_error)
{
    cudaError_t (*const query[RSSM_CUDA_PARTS])(cudaFuncAttributes *) = {
        rssm_cuda_pipeline_attributes, rssm_cuda_bulk_attributes, rssm_cuda_window_bulk_attributes,
        rssm_cuda_window_attributes};
    *first_error = cudaSuccess;
    for (int i = 0; i < RSSM_CUDA_PARTS; ++i) {
        cudaFuncAttributes a;
        memset(&a, 0, sizeof a);
        const cudaError_t e = query[i](&a);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            if (*first_error == cudaSuccess)
                *first_error = e;
        }
        code[i].ptx_version = e == cudaSuccess ? a.ptxVersion : 0;
        code[i].binary_version = e == cudaSuccess ? a.binaryVersion : 0;
    }
}

rssm_status cuda_create(const char *variant, int device, void **out, rssm_error *err)
{
    const int kernel = variant_kernel(variant);
    if (kernel < -1)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "cuda: unknown variant '%s'", variant);
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "cuda: no usable CUDA device (%s)",
                              e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    }
    /* The device asked for (a tensor-parallel rank's own GPU), else
     * RSSM_CUDA_DEVICE, else the first that qualifies: device.h's rule.
     * A device qualifies when the build has code it runs, by the targets
     * alone: asking CUDA about the code would start a context on every
     * device (an engine's rank would on every GPU). What the chosen one
     * loaded is asked below. */
    bool *capable = static_cast<bool *>(calloc((size_t)count, sizeof *capable));
    int *cc = static_cast<int *>(calloc((size_t)count, sizeof *cc));
    if (!capable || !cc) {
        free(capable);
        free(cc);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cuda: out of host memory");
    }
    for (int i = 0; i < count; ++i) {
        int major = 0, minor = 0;
        rssm_cuda_target t;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i) == cudaSuccess) {
            cc[i] = 10 * major + minor;
            capable[i] = rssm_cuda_target_for(RSSM_CUDA_TARGETS, major, minor, &t);
        }
    }
    (void)cudaGetLastError();
    char need[256];
    rssm_cuda_targets_need(RSSM_CUDA_TARGETS, need, sizeof need);
    int best = -1;
    rssm_status chosen =
        rssm_device_choose("cuda", device, "RSSM_CUDA_DEVICE", getenv("RSSM_CUDA_DEVICE"), count, capable, need, &best,
                           err);
    chosen = chosen == RSSM_OK ? chosen : refuse_devices(chosen, cc, count, err);
    free(capable);
    free(cc);
    if (chosen != RSSM_OK)
        return chosen;
    CudaCtx *c = static_cast<CudaCtx *>(calloc(1, sizeof *c));
    if (!c)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cuda: cannot allocate the context");
    c->device = best;
    c->kernel = kernel;
    snprintf(c->variant, sizeof c->variant, "%s", variant);
    const DeviceGuard guard(best);
    cudaError_t ce = cudaGetDeviceProperties(&c->prop, best);
    if (ce == cudaSuccess)
        ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        free(c);
        return cuda_fail(err, ce, "starting the device");
    }
    snprintf(c->name, sizeof c->name, "%.96s (sm_%d%d, %d SMs)", c->prop.name, c->prop.major,
             c->prop.minor, c->prop.multiProcessorCount);
    /* Which kernels may run here, from the code CUDA loaded (a Hopper GPU
     * given compute_80 PTX alone runs code without the sm_90 parts). */
    rssm_cuda_code code[RSSM_CUDA_PARTS];
    cudaError_t code_error = cudaSuccess;
    device_code(code, &code_error);
    const size_t decode_smem = rssm_cuda_bulk_smem_bytes(), window_smem = rssm_cuda_window_bulk_smem_bytes();
    const size_t bulk_smem = decode_smem > window_smem ? decode_smem : window_smem;
    rssm_cuda_kernels_decide(RSSM_CUDA_TARGETS, c->prop.major, c->prop.minor, c->prop.sharedMemPerBlockOptin,
                             bulk_smem, code, &c->kernels);
    if (!c->kernels.runs) {
        const rssm_status st = rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "cuda: device %d, %s: %s: %s", best,
                                              c->name, c->kernels.why_not, cudaGetErrorString(code_error));
        cudaStreamDestroy(c->stream);
        free(c);
        return st;
    }
    *out = c;
    return rssm_clear_error(err);
}

void cuda_destroy(void *ctx)
{
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    if (!c)
        return;
    const DeviceGuard guard(c->device);
    cudaStreamDestroy(c->stream);
    free(c);
}

const char *cuda_device(void *ctx) { return static_cast<CudaCtx *>(ctx)->name; }

int cuda_device_ordinal(void *ctx) { return static_cast<const CudaCtx *>(ctx)->device; }

/* Where CUDA says `address` is (cudaPointerGetAttributes: nothing is
 * enqueued, so a stream capture may be under way), for common code's checks
 * of the caller's memory. Asked with the backend's device current, like
 * every other call, so that a thread whose current device has no context
 * yet (device 0 on an engine rank's thread) is not given one. */
rssm_place cuda_place(void *ctx, const void *address)
{
    const DeviceGuard guard(static_cast<const CudaCtx *>(ctx)->device);
    cudaPointerAttributes a;
    rssm_place place = {RSSM_MEMORY_UNKNOWN, -1};
    if (cudaPointerGetAttributes(&a, address) != cudaSuccess) {
        (void)cudaGetLastError();
        return place;
    }
    switch (a.type) {
    case cudaMemoryTypeDevice:
        place.memory = RSSM_MEMORY_DEVICE;
        place.device = a.device;
        break;
    case cudaMemoryTypeManaged:
        place.memory = RSSM_MEMORY_MANAGED;
        break;
    case cudaMemoryTypeHost:
        place.memory = RSSM_MEMORY_PINNED;
        break;
    default: /* cudaMemoryTypeUnregistered: memory CUDA did not allocate or register */
        place.memory = RSSM_MEMORY_HOST;
        break;
    }
    return place;
}

void cuda_describe(void *ctx, char *buf, size_t size)
{
    const CudaCtx *c = static_cast<const CudaCtx *>(ctx);
    const cudaDeviceProp &p = c->prop;
    snprintf(buf, size,
             "device %d: %.96s, compute capability %d.%d, %d SMs\n"
             "memory %.1f GiB, %d-bit bus, L2 %.1f MiB, shared memory per block up to %zu KiB\n"
             "kernels: built for %s; this device runs %s (bulk kernels: %s; programmatic dependent launch: "
             "%s); one CUDA graph per step; variant %s; planned for %d SMs%s\n",
             c->device, p.name, p.major, p.minor, p.multiProcessorCount,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.memoryBusWidth,
             (double)p.l2CacheSize / (1024.0 * 1024.0), p.sharedMemPerBlockOptin / 1024, RSSM_CUDA_TARGETS,
             c->kernels.code, c->kernels.bulk ? "yes" : "no, they need sm_90 code", c->kernels.pdl ? "yes" : "no",
             c->kernel < 0 ? "cuda (the plan's choice of kernel per batch)" : c->variant, plan_sms(c),
             plan_sms(c) < p.multiProcessorCount ? " (rssm_backend_limit_sms)" : "");
}

rssm_status cuda_supports(void *ctx, const rssm_model *m, rssm_error *err)
{
    const CudaCtx *c = static_cast<const CudaCtx *>(ctx);
    rssm_slot_layout lay;
    rssm_slot_layout_init(&lay, m);
    rssm_kernel_params p;
    rssm_kernel_params_init(&p, m, &lay, 1);
    const char *why = kernel_refusal(c, &p);
    if (why)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "%s: %s (K = %u, V = %u, L = %u)", c->variant, why,
                              m->head_k, m->head_v, m->replay ? m->ring_len : 1u);
    return rssm_clear_error(err);
}

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

void window_free(CudaBatch *b)
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

void batch_free(CudaBatch *b)
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
rssm_cuda_buffers batch_buffers(const CudaBatch *b, uint32_t l, const uint32_t *header)
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
rssm_status batch_build(CudaCtx *c, CudaBatch *b, rssm_error *err)
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

    rssm_cuda_plan_init(&b->plan, &p, plan_sms(c), c->prop.sharedMemPerMultiprocessor, plan_allow(c), 0, 0);
    if (c->kernel >= 0) {
        const char *why = kernel_refusal(c, &p);
        if (why)
            return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "%s: %s", c->variant, why);
        b->plan.kernel = (uint32_t)c->kernel;
    }
    CK(rssm_cuda_plan_prepare(&b->plan, &p));
    if (rssm_cuda_window_supported(&p)) /* the window kernels' shared-memory limit, once */
        CK(rssm_cuda_window_prepare(&p, &b->plan));
    /* Warm-up outside capture: loads the module, checks the launch shape. */
    for (uint32_t l = 0; l < p.layers; ++l) {
        const rssm_cuda_buffers buf = batch_buffers(b, l, b->header_dev);
        CK(rssm_cuda_launch_layer(&p, &buf, &b->plan, c->stream));
    }
    CK(cudaStreamSynchronize(c->stream));

    CK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    cudaError_t e = cudaSuccess;
    for (uint32_t l = 0; l < p.layers && e == cudaSuccess; ++l) {
        const rssm_cuda_buffers buf = batch_buffers(b, l, b->header_dev);
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
    const char *why = kernel_refusal(c, params);
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
cudaError_t upload_rows(CudaCtx *c, const CudaBatch *b, void *dst, const void *src, size_t row_bytes,
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
cudaError_t upload_header(CudaCtx *c, CudaBatch *b, uint32_t rows, const rssm_row_header *hdr)
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
rssm_status window_reserve(CudaBatch *b, uint32_t rows, uint32_t t_max, rssm_error *err)
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

/* The fewest draft tokens the window kernels run: one token must be a step,
 * bit for bit (docs/design.md §9); beyond that, what the H200 measured
 * (torch in CUDA graphs, bench/results/h200_verify): where the plan runs the
 * bulk kernel (batches that give every SM a row and head), a window of 2
 * took 0.66-0.83x the time of its 2 steps; below that (batch 1), 1.13-1.22x,
 * and a window of 4 0.57-0.60x its 4 steps. */
uint32_t window_min_tokens(const rssm_cuda_plan &plan)
{
    return plan.kernel == RSSM_CUDA_KERNEL_BULK ? 2u : 4u;
}

/* The window of every row at once (window_kernel.cu), layer by layer: the
 * layer's tokens up, the window's launches, its outputs down. Windows the
 * kernels do not take (fewer than window_min_tokens, rings beyond the
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
    if (t_max < window_min_tokens(b->plan) || !rssm_cuda_window_supported(&p))
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
        rssm_cuda_buffers buf = batch_buffers(b, l, b->header_dev);
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

/* The median and fastest device seconds of `reps` event-timed runs of
 * `launch` on the context's stream, after the untimed ones of
 * rssm_warming_up. */
template <typename Launch>
rssm_status time_runs(CudaCtx *c, uint32_t reps, bool warm, rssm_timing *timing, rssm_error *err,
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
                const rssm_cuda_buffers buf = batch_buffers(b, l, header);
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
            return rssm_cuda_inplace_pass(p->mem, bytes, shape, plan_sms(c), flip, c->stream);
        });
        if (st != RSSM_OK)
            return st;
        best = shape == 0 || t.median_seconds < best ? t.median_seconds : best;
    }
    *seconds = best;
    return rssm_clear_error(err);
}

/* A cap above the device's count is the device's count (under CUDA MPS,
 * the count the client is confined to). */
rssm_status cuda_limit_sms(void *ctx, uint32_t sms, rssm_error *err)
{
    CudaCtx *c = static_cast<CudaCtx *>(ctx);
    c->sm_limit = sms > (uint32_t)c->prop.multiProcessorCount ? c->prop.multiProcessorCount : (int)sms;
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

/* ------------------------------------------ one layer, on the caller's memory */

struct CudaLayer {
    int device;
    uint32_t slots;
    rssm_kernel_params params;
    rssm_cuda_plan plan;
    uint32_t *work;
    rssm_kernel_params fold; /* rssm_layer_materialise's launch (backend.h) */
    void *fold_buf;
    /* rssm_layer_verify's window: the records of max_rows step-array rows,
     * and each row's first overflowing token when the caller takes none
     * (NULL: the model has no window kernel) */
    float *win_scratch;
    uint32_t *win_first;
};

/* The pointers of a launch, as rssm_layer_misaligned_stride asks of the
 * strides: the arrays a head moves as 16-byte vectors or bulk copies on
 * 16 bytes, the gates, beta and a GDN ring's one gate per entry on their
 * elements. */
const char *misaligned_pointer(const rssm_kernel_params *p, const rssm_layer_io *io)
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
    const char *why = kernel_refusal(c, p);
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
    cudaFree(l->win_first);
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
    rssm_cuda_plan_init(&l->plan, p, plan_sms(c), c->prop.sharedMemPerMultiprocessor, plan_allow(c), 0, 0);
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
            e = cudaMalloc(reinterpret_cast<void **>(&l->win_first), p->max_rows * sizeof(uint32_t));
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
rssm_status check_pointers(const CudaCtx *c, const rssm_kernel_params *p, const rssm_layer_io *io, rssm_error *err)
{
    const char *why = misaligned_pointer(p, io);
    if (why)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: %s is not 16-byte aligned (for the gates and "
                              "beta their element, for the gate weights and the row arrays 4 bytes)", c->variant, why);
    return RSSM_OK;
}

/* One launch of layer l with kernel parameters p (the layer's, or its
 * fold's) on io. */
rssm_status layer_launch(const CudaCtx *c, CudaLayer *l, const rssm_kernel_params *p, const rssm_layer_io *io,
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
    buf.io.overflow = io->overflow ? io->overflow : l->win_first;
    buf.scratch = l->win_scratch;
    buf.work = l->work;
    const DeviceGuard guard(l->device);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    cudaError_t e = cudaMemsetAsync(buf.io.overflow, 0xff, io->rows * sizeof(uint32_t), s);
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

} /* namespace */

extern "C" const rssm_backend_ops rssm_cuda_backend_ops = {
    "cuda",
    kVariants,
    cuda_create,
    cuda_destroy,
    cuda_device,
    cuda_device_ordinal,
    cuda_place,
    cuda_describe,
    cuda_supports,
    cuda_pool_create,
    cuda_pool_destroy,
    cuda_slot_read,
    cuda_slot_write,
    cuda_batch_create,
    cuda_batch_destroy,
    cuda_batch_set_gate_params,
    cuda_batch_upload,
    cuda_batch_run,
    cuda_batch_download,
    cuda_batch_last_run_seconds,
    cuda_batch_time_steps,
    cuda_batch_verify,
    cuda_copy_bandwidth,
    cuda_pool_inplace_seconds,
    cuda_limit_sms,
    /* matrix_dtype: the flush accumulates in fp32 from the storage dtypes,
     * rounding nothing beyond them: fp32, the default. */
    nullptr,
    cuda_layer_check,
    cuda_layer_create,
    cuda_layer_destroy,
    cuda_layer_run,
    cuda_layer_materialise,
    cuda_layer_advance,
    cuda_layer_verify,
    nullptr, /* layer_record: device pointers, not buffers (rssm_layer_run) */
    nullptr,
    nullptr, /* vulkan_handles */
    nullptr, /* kernels: every variant name runs its own kernels */
};
