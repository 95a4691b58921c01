/*
 * What the files of the CUDA backend's host side share (the ops table of
 * common/backend.h over the CUDA runtime, cuda_backend.cu): the context, a
 * pool and a batch, the device guard and the error path every entry takes,
 * and each file's entries. Lowest first: cuda_device.cu (the device, its
 * checks and the plan's limits), cuda_batch.cu (pools and batches: the step
 * graph, the uploads, the windows), cuda_layer.cu (one layer on the
 * caller's memory), cuda_bench.cu (the timed programs), cuda_backend.cu
 * (the table); a file calls only those before it.
 *
 * Host code only: C linkage for what C calls, no exceptions, no C++
 * runtime objects, so the static library links into C programs with the
 * CUDA runtime alone.
 */
#ifndef RSSM_CUDA_INTERNAL_H
#define RSSM_CUDA_INTERNAL_H

#include "rssm_cuda.h"

extern "C" {
#include "backend.h"
#include "error.h"
#include "targets.h"
}

#include <cuda_runtime.h>

namespace rssm_cuda_backend {

/* A backend: its device, stream and variant. */
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

/* A pool: its slots in one device allocation. */
struct CudaPool {
    unsigned char *mem;
    size_t slot_bytes;
    uint32_t slots;
};

/* A batch: its plan, step arrays, step header, and the graph of a step. */
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
 * its own). Every entry of the ops table (cuda_backend.cu) that calls CUDA holds one. */
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

/* A failed CUDA call as an rssm error naming the call; clears a
 * non-sticky error so that later calls start clean. */
rssm_status cuda_fail(rssm_error *err, cudaError_t e, const char *what);

#define CK(call)                                                                                   \
    do {                                                                                           \
        const cudaError_t ck_e = (call);                                                           \
        if (ck_e != cudaSuccess)                                                                   \
            return cuda_fail(err, ck_e, #call);                                                    \
    } while (0)

/* ---- cuda_device.cu: the device, what its code may run, the plan's limits */

/* One variant per kernel family, besides the plan's choice ("cuda"), NULL
 * at the end. */
extern const char *const cuda_variants[];

int cuda_plan_sms(const CudaCtx *c);
uint32_t cuda_plan_allow(const CudaCtx *c);
const char *cuda_kernel_refusal(const CudaCtx *c, const rssm_kernel_params *p);
rssm_status cuda_create(const char *variant, int device, void **out, rssm_error *err);
void cuda_destroy(void *ctx);
const char *cuda_device(void *ctx);
int cuda_device_ordinal(void *ctx);
rssm_place cuda_place(void *ctx, const void *address);
void cuda_describe(void *ctx, char *buf, size_t size);
rssm_status cuda_supports(void *ctx, const rssm_model *m, rssm_error *err);
rssm_status cuda_limit_sms(void *ctx, uint32_t sms, rssm_error *err);

/* ---- cuda_batch.cu: pools and batches (the whole-step API) */

rssm_status cuda_pool_create(void *ctx, const rssm_slot_layout *layout, uint32_t slots, void **out,
                             rssm_error *err);
void cuda_pool_destroy(void *ctx, void *pool);
rssm_status cuda_slot_read(void *ctx, void *pool, uint32_t slot, void *bytes, rssm_error *err);
rssm_status cuda_slot_write(void *ctx, void *pool, uint32_t slot, const void *bytes, rssm_error *err);
rssm_cuda_buffers cuda_batch_buffers(const CudaBatch *b, uint32_t l, const uint32_t *header);
rssm_status cuda_batch_create(void *ctx, void *pool, const rssm_kernel_params *params, void **out,
                              rssm_error *err);
void cuda_batch_destroy(void *ctx, void *batch);
rssm_status cuda_batch_set_gate_params(void *ctx, void *batch, uint32_t layer, const float *A_log,
                                       const float *dt_bias, rssm_error *err);
rssm_status cuda_batch_upload(void *ctx, void *batch, uint32_t rows, const rssm_step_inputs *in,
                              rssm_error *err);
rssm_status cuda_batch_run(void *ctx, void *batch, uint32_t rows, const rssm_row_header *hdr,
                           uint32_t *overflow, rssm_error *err);
rssm_status cuda_batch_download(void *ctx, void *batch, uint32_t rows, void *out, rssm_error *err);
double cuda_batch_last_run_seconds(void *ctx, void *batch);
rssm_status cuda_batch_verify(void *ctx, void *batch, uint32_t rows, const rssm_row_header *hdr,
                              const uint32_t *drafts, uint32_t t_max, const rssm_step_inputs *in, void *out,
                              uint32_t *first_overflow, rssm_error *err);

/* ---- cuda_layer.cu: one layer on the caller's memory (rssm_layer_run) */

rssm_status cuda_layer_check(void *ctx, const rssm_kernel_params *p, const rssm_layer_io *shape, rssm_error *err);
void cuda_layer_destroy(void *ctx, void *layer);
rssm_status cuda_layer_create(void *ctx, const rssm_kernel_params *p, const rssm_layer_io *shape, void **out,
                              rssm_error *err);
rssm_status cuda_layer_run(void *ctx, void *layer, const rssm_layer_io *io, void *stream, rssm_error *err);
rssm_status cuda_layer_materialise(void *ctx, void *layer, const rssm_layer_io *io, void *stream, rssm_error *err);
rssm_status cuda_layer_verify(void *ctx, void *layer, const rssm_layer_io *io, uint32_t t_max, const uint32_t *drafts,
                              void *stream, rssm_error *err);
rssm_status cuda_layer_advance(void *ctx, void *layer, uint32_t rows, const int32_t *slot_index,
                               const int32_t *write_pos, const int32_t *force, int32_t *cursor, void *stream,
                               rssm_error *err);

/* ---- cuda_bench.cu: the timed programs (docs/design.md §7) */

rssm_status cuda_batch_time_steps(void *ctx, void *batch, uint32_t rows, uint32_t steps,
                                  const rssm_row_header *hdr, uint32_t reps, rssm_timing *timing, rssm_error *err);
rssm_status cuda_pool_inplace_seconds(void *ctx, void *pool, size_t bytes, uint32_t reps, uint32_t flip,
                                      double *seconds, rssm_error *err);
rssm_status cuda_copy_bandwidth(void *ctx, size_t bytes, double *bps, rssm_error *err);

} /* namespace rssm_cuda_backend */

#endif
