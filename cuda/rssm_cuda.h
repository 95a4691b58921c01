/*
 * The CUDA decode kernels as seen from the host: where a step's data lives,
 * how a launch is shaped, and one call that launches one layer of one step.
 *
 * The backend (cuda_batch.cu) records these launches into a CUDA graph
 * per batch, and for rssm_batch_time_steps (what `rssm bench` times) whole
 * ring cycles of them with a distinct step header per step. Both go through
 * rssm_cuda_launch_layer, so what is benchmarked is what the library runs.
 *
 * Host side is C linkage: the library `rssm` is a C library.
 */
#ifndef RSSM_CUDA_H
#define RSSM_CUDA_H

#include "rssm_layout.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest key width the kernels take: a warp holds a 16 x K tile of the
 * checkpoint in registers (64 fp32 values per thread at K = 128). */
#define RSSM_CUDA_MAX_HEAD_K 128u

/* What one layer's launch works on: its data (rssm_layer_io, device
 * pointers) and the launch's own scratch. Constant for the life of a
 * recorded graph. */
typedef struct rssm_cuda_buffers {
    rssm_layer_io io;
    float *scratch;             /* the speculative-decode window's per-token records:
                                   rssm_cuda_window_scratch_bytes (NULL for a step) */
    uint32_t *work;             /* the bulk kernel's work counters: RSSM_CUDA_WORK_BYTES,
                                   zeroed before the first launch; every launch leaves them
                                   zero. Launches that share them run one after another
                                   (one stream or graph). */
} rssm_cuda_buffers;

#define RSSM_CUDA_WORK_BYTES 64u

/* Which kernel a plan launches. The pipeline kernel (decode_kernel.cu) runs
 * every model; the stream kernels (stream_kernel.cu: a coefficient prologue,
 * then a pure stream of checkpoint tiles) run models whose ring has at most
 * RSSM_CUDA_STREAM_MAX_RING entries, packed ones included; the bulk kernel
 * (bulk_kernel.cu: one persistent warp-specialised kernel, tiles moved by
 * bulk copies) runs the same rings for the usual head shapes
 * (rssm_cuda_bulk_supported). plan_init picks the bulk kernel once the batch
 * gives every SM a (row, value head), the stream kernels below that, the
 * pipeline kernel for what neither takes. A plan may be switched before
 * rssm_cuda_plan_prepare (the benchmark does, to compare). */
#define RSSM_CUDA_KERNEL_PIPELINE 0u
#define RSSM_CUDA_KERNEL_STREAM 1u
#define RSSM_CUDA_KERNEL_BULK 2u

/* How one layer's launch is shaped; fixed per batch.
 * Pipeline kernel: a work item is a chunk of 16 * warps value rows of one
 * (batch row, value head); persistent CTAs walk the items with `stages`
 * items' loads in flight.
 * Stream kernel: a work item is 8 * rows_per_lane value rows of one (batch
 * row, value head), one item per warp, RSSM_CUDA_STREAM_WARPS warps per CTA.
 * Bulk kernel: one CTA per SM (grid and ctas_per_sm set by prepare), its
 * launch shape fixed in bulk_kernel.cu; the pipeline fields stay valid. */
typedef struct rssm_cuda_plan {
    uint32_t kernel;            /* RSSM_CUDA_KERNEL_* */
    uint32_t rows_per_lane;     /* stream kernel: 1, 2 or 4 */
    uint32_t warps;             /* warps per CTA; each warp owns 16 value rows */
    uint32_t chunks;            /* items per (batch row, value head) */
    uint32_t stages;            /* items in flight per CTA (shared-memory buffers) */
    uint32_t ctas_per_sm;       /* resident CTAs per SM the plan is sized for */
    uint32_t grid;              /* CTAs per launch of the chosen kernel (final after
                                   rssm_cuda_plan_prepare) */
    uint32_t smem_bytes;        /* dynamic shared memory per CTA */
    uint32_t variant;           /* which template instance (state, ring dtype) */
    uint32_t allow;             /* RSSM_CUDA_ALLOW_*: what the device's code lets it use */
    uint32_t bulk_stages;       /* bulk kernel: the shared-memory stages it streams through
                                   (set by prepare; 0 before) */
    uint32_t bulk_tc;           /* bulk kernel: the parts of the step on the tensor cores,
                                   0 none, 1 the flush, 2 the flush and the readout
                                   (set by prepare) */
    uint32_t window_fused_tokens; /* verify windows of at most this many rows x tokens
                                     run in one launch (rssm_cuda_window_fused; set by
                                     rssm_cuda_window_prepare, 0 before) */
    int sm_count;
} rssm_cuda_plan;

/* What the code a device loaded lets a plan use (cuda/targets.h
 * decides, from rssm_cuda_*_attributes below): the bulk kernels (the plan
 * picks them, and the window's persistent readout beside them), and
 * programmatic dependent launch of every kernel of a step (each waits for
 * the launch before it at its start; the window's readout where it needs
 * the coefficients). Both need code for sm_90 or newer (RSSM_CUDA_SM90,
 * kernel_common.cuh). */
#define RSSM_CUDA_ALLOW_BULK 1u
#define RSSM_CUDA_ALLOW_PDL 2u

/* What CUDA loaded on the current device of one kernel of each kernel file
 * (cudaFuncGetAttributes: ptxVersion, binaryVersion), in the order of
 * rssm_cuda_part: decode_kernel.cu, bulk_kernel.cu, window_bulk_kernel.cu,
 * window_kernel.cu. An error (cudaErrorNoKernelImageForDevice) when the
 * build has no code the device runs. */
cudaError_t rssm_cuda_pipeline_attributes(struct cudaFuncAttributes *a);
cudaError_t rssm_cuda_bulk_attributes(struct cudaFuncAttributes *a);
cudaError_t rssm_cuda_window_bulk_attributes(struct cudaFuncAttributes *a);
cudaError_t rssm_cuda_window_attributes(struct cudaFuncAttributes *a);
/* The shared memory per block the bulk kernels ask for (the decode's and
 * the larger of the window readout's), which a device's opt-in limit must
 * hold for them to run there (cuda/targets.h). */
size_t rssm_cuda_bulk_smem_bytes(void);
size_t rssm_cuda_window_bulk_smem_bytes(void);

/* Why the kernels cannot run `p`, or NULL when they can. `smem_limit` is the
 * device's opt-in shared memory per block. */
const char *rssm_cuda_unsupported(const rssm_kernel_params *p, size_t smem_limit);

/* Picks the kernel and launch shape for `p` on a device with `sm_count`
 * multiprocessors and `smem_per_sm` bytes of shared memory per SM, among
 * what `allow` (RSSM_CUDA_ALLOW_*) permits: items of
 * 64 rows, as many CTAs per SM as fit (up to 4), then as many stages as fit;
 * smaller items when the batch is too small to fill the GPU. `warps` and `stages` override the
 * choice when not 0 (for tuning). Call rssm_cuda_unsupported first. */
void rssm_cuda_plan_init(rssm_cuda_plan *plan, const rssm_kernel_params *p, int sm_count,
                         size_t smem_per_sm, uint32_t allow, uint32_t warps, uint32_t stages);

/* Raises the kernel's dynamic shared-memory limit as the plan needs and sets
 * plan->grid from the occupancy it achieves; once per plan, outside stream
 * capture. */
cudaError_t rssm_cuda_plan_prepare(rssm_cuda_plan *plan, const rssm_kernel_params *p);

/* Launches one layer of one decode step on `stream` (capturable). The rows,
 * slots, write positions and force flags are read on the device
 * (b->io); nothing of the step is baked into the launch. */
cudaError_t rssm_cuda_launch_layer(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                   const rssm_cuda_plan *plan, cudaStream_t stream);

/* The cursors after a step (rssm_layer_advance): for each of `rows` rows
 * whose slot is inside 0..slots-1, cursor[slot] = flushes ? 0 : write_pos + 1. */
cudaError_t rssm_cuda_advance(const rssm_kernel_params *p, uint32_t rows, uint32_t slots, const int32_t *slot_index,
                              const int32_t *write_pos, const int32_t *force, int32_t *cursor, cudaStream_t stream);

/* The stream kernel's share of the above (stream_kernel.cu), called by
 * them when plan->kernel is RSSM_CUDA_KERNEL_STREAM. It takes rings of up
 * to RSSM_CUDA_STREAM_MAX_RING entries (L <= 17); longer rings run on the
 * pipeline kernel. */
#define RSSM_CUDA_STREAM_WARPS 4u
#define RSSM_CUDA_STREAM_MAX_RING 16u
int rssm_cuda_stream_supported(const rssm_kernel_params *p);
void rssm_cuda_stream_plan(rssm_cuda_plan *plan, const rssm_kernel_params *p);
cudaError_t rssm_cuda_stream_prepare(rssm_cuda_plan *plan, const rssm_kernel_params *p);
cudaError_t rssm_cuda_stream_launch(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                    const rssm_cuda_plan *plan, cudaStream_t stream);

/* A measuring switch's count (docs/h200.md): 1, with *value the number
 * (at most `most`), where the environment variable `name` is a decimal
 * number and nothing else; 0 where it is unset or anything else, which
 * leaves the plan's rule in place. Every numeric RSSM_CUDA_* switch reads
 * through it, so that they agree on what they accept. */
static inline int rssm_cuda_env_count(const char *name, uint32_t most, uint32_t *value)
{
    const char *env = getenv(name);
    if (!env || *env < '0' || *env > '9')
        return 0;
    char *end = NULL;
    const unsigned long long v = strtoull(env, &end, 10);
    if (!end || *end != '\0')
        return 0;
    *value = v > most ? most : (uint32_t)v;
    return 1;
}

/* The bulk kernel's share (bulk_kernel.cu): K a multiple of 32 up to
 * RSSM_CUDA_MAX_HEAD_K, V a multiple of a stage's rows (32 fp32, 64 bf16
 * state), rings of up to RSSM_CUDA_STREAM_MAX_RING entries. */
int rssm_cuda_bulk_supported(const rssm_kernel_params *p);
/* The choices rssm_cuda_bulk_prepare makes, host code alone: the parts of
 * the step on the tensor cores (rssm_cuda_plan.bulk_tc's values;
 * RSSM_CUDA_TENSOR_CORES overrides) and the shared-memory stages for a
 * plan of sm_count multiprocessors in that mode (RSSM_CUDA_BULK_STAGES
 * overrides); docs/design.md §8, "The tensor-core data path". */
uint32_t rssm_cuda_bulk_mode(const rssm_kernel_params *p);
uint32_t rssm_cuda_bulk_stages(const rssm_kernel_params *p, uint32_t mode, int sm_count);
cudaError_t rssm_cuda_bulk_prepare(rssm_cuda_plan *plan, const rssm_kernel_params *p);
cudaError_t rssm_cuda_bulk_launch(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                  const rssm_cuda_plan *plan, cudaStream_t stream);

/* The speculative-decode window (docs/design.md §9): the draft tokens of
 * `rows` rows (token t of row r at step-array row t * rows + r of b->io, row
 * r's slot and base write_pos in its step header, drafts[r] tokens, device
 * memory) from one read of each checkpoint, the tokens' entries appended as
 * tentative ones. b->io.overflow[r] (set to UINT32_MAX before; NULL: no
 * report) gets the first token of row r whose entry its ring dtype could not
 * hold. Rings of up to RSSM_CUDA_STREAM_MAX_RING entries, as the stream
 * kernels; prepare with the plan the window launches with (its kernel
 * final), before launching, outside stream capture. One kernel where
 * rssm_cuda_window_fused says (window_kernel.cu's window_fused), else two:
 * where the plan runs the bulk kernel and the window has at most 8 tokens,
 * the persistent window_bulk_kernel.cu (b->work its counters); otherwise
 * window_kernel.cu's pair (b->scratch holding rssm_cuda_window_scratch_bytes
 * for `rows` rows of `t_max` tokens). */
int rssm_cuda_window_supported(const rssm_kernel_params *p);
size_t rssm_cuda_window_scratch_bytes(const rssm_kernel_params *p, uint32_t rows, uint32_t t_max);
cudaError_t rssm_cuda_window_prepare(const rssm_kernel_params *p, rssm_cuda_plan *plan);
/* Whether a window of `rows` rows and up to t_max tokens runs in one launch:
 * up to 4 tokens and plan->window_fused_tokens rows x tokens, the budget
 * rssm_cuda_window_fused_budget() gives prepare (RSSM_CUDA_WINDOW_FUSED
 * overrides). */
int rssm_cuda_window_fused(const rssm_cuda_plan *plan, uint32_t rows, uint32_t t_max);
uint32_t rssm_cuda_window_fused_budget(void);
cudaError_t rssm_cuda_window_launch(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                    const rssm_cuda_plan *plan, const uint32_t *drafts, uint32_t rows,
                                    uint32_t t_max, cudaStream_t stream);
/* The persistent readout's share (window_bulk_kernel.cu): the bulk kernel's
 * shapes (rssm_cuda_bulk_supported), windows of 1 to 8 tokens. Its launch
 * reads the records in b->scratch as a programmatic dependent of the
 * launch before it, so it is made only by rssm_cuda_window_launch, right
 * after the coefficient kernel. */
int rssm_cuda_window_bulk_supported(const rssm_kernel_params *p, uint32_t t_max);
cudaError_t rssm_cuda_window_bulk_prepare(const rssm_kernel_params *p);
cudaError_t rssm_cuda_window_bulk_launch(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                         const uint32_t *drafts, uint32_t rows, uint32_t t_max, int sm_count,
                                         cudaStream_t stream);
/* The in-place pass (inplace_kernel.cu): reads and writes back, every 32-bit
 * word xored with `flip` (0 leaves the bytes as they were), every 16 bytes of `bytes` at
 * `p`, in one of RSSM_CUDA_INPLACE_SHAPES launch shapes; the backend
 * reports the fastest, so the bound is not flattered by a weak reference
 * kernel. */
#define RSSM_CUDA_INPLACE_SHAPES 4u
cudaError_t rssm_cuda_inplace_pass(void *p, size_t bytes, uint32_t shape, int sm_count, uint32_t flip,
                                   cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* RSSM_CUDA_H */
