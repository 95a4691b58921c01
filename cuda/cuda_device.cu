/*
 * The CUDA backend's device: which device a backend takes (the device the
 * caller names, else RSSM_CUDA_DEVICE, else the first the build has code
 * for: common/device.h), what the code CUDA loaded there may run
 * (cuda/targets.h), which kernel may run which model, the multiprocessors
 * plans are made for, and where an address lives (the checks of a
 * caller's memory).
 */
#include "cuda_internal.h"
#include "rssm_cuda_build.h" /* RSSM_CUDA_TARGETS */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace rssm_cuda_backend {

/* The multiprocessors a plan is made for: the device's, or fewer under
 * rssm_backend_limit_sms. */
int cuda_plan_sms(const CudaCtx *c)
{
    const int all = c->prop.multiProcessorCount;
    return c->sm_limit > 0 && c->sm_limit < all ? c->sm_limit : all;
}

rssm_status cuda_fail(rssm_error *err, cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls start clean */
    const rssm_status st = e == cudaErrorMemoryAllocation ? RSSM_ERR_OUT_OF_MEMORY : RSSM_ERR_DEVICE;
    return rssm_set_error(err, st, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* One variant per kernel family, besides the plan's choice ("cuda"): a
 * variant runs its kernel on every batch or refuses the model; nothing
 * falls back to another kernel. */
const char *const cuda_variants[] = {"cuda", "cuda:bulk", "cuda:stream", "cuda:pipeline", NULL};

static int variant_kernel(const char *variant)
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

/* What the plans of this context may use: what the device's code has.
 * RSSM_CUDA_PDL=0 launches every kernel as an ordinary launch, for
 * measuring what programmatic dependent launch gives (docs/h200.md). */
uint32_t cuda_plan_allow(const CudaCtx *c)
{
    const char *env = getenv("RSSM_CUDA_PDL");
    const bool pdl = c->kernels.pdl && !(env && strcmp(env, "0") == 0);
    return (c->kernels.bulk ? RSSM_CUDA_ALLOW_BULK : 0u) | (pdl ? RSSM_CUDA_ALLOW_PDL : 0u);
}

/* Why the context's kernel (c->kernel: RSSM_CUDA_KERNEL_*, or -1 for the
 * plan's choice) cannot run `p`, or NULL: the one place that decides which
 * kernel may run what, for cuda_supports and batch_build alike. The
 * pipeline kernel and the plan's choice run whatever rssm_cuda_unsupported
 * accepts (the plan picks among the kernels the device's code has); the
 * bulk kernel needs its sm_90 code on the device (cuda/targets.h). */
const char *cuda_kernel_refusal(const CudaCtx *c, const rssm_kernel_params *p)
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
static rssm_status refuse_devices(rssm_status st, const int *cc, int count, rssm_error *err)
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
static void device_code(rssm_cuda_code code[RSSM_CUDA_PARTS], cudaError_t *first_error)
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
             c->kernels.code, c->kernels.bulk ? "yes" : "no, they need sm_90 code",
             !c->kernels.pdl ? "no" : (cuda_plan_allow(c) & RSSM_CUDA_ALLOW_PDL) ? "yes" : "off (RSSM_CUDA_PDL=0)",
             c->kernel < 0 ? "cuda (the plan's choice of kernel per batch)" : c->variant, cuda_plan_sms(c),
             cuda_plan_sms(c) < p.multiProcessorCount ? " (rssm_backend_limit_sms)" : "");
}

rssm_status cuda_supports(void *ctx, const rssm_model *m, rssm_error *err)
{
    const CudaCtx *c = static_cast<const CudaCtx *>(ctx);
    rssm_slot_layout lay;
    rssm_slot_layout_init(&lay, m);
    rssm_kernel_params p;
    rssm_kernel_params_init(&p, m, &lay, 1);
    const char *why = cuda_kernel_refusal(c, &p);
    if (why)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "%s: %s (K = %u, V = %u, L = %u)", c->variant, why,
                              m->head_k, m->head_v, m->replay ? m->ring_len : 1u);
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

} /* namespace rssm_cuda_backend */
