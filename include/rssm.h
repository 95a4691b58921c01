/*
 * rssm — the ReplaySSM decode step for gated linear-attention layers
 * (Gated DeltaNet and Kimi Delta Attention), on CPU, Vulkan and CUDA.
 *
 * The flow, and so the order of this header:
 *   1. rssm_model   — a plain struct describing the layers; validate it.
 *   2. rssm_backend — created by name ("cpu", "vulkan", "cuda", "auto"),
 *                     on a device (rssm_backend_create_on_device).
 *   3. rssm_pool    — state memory for N sequence slots of one model.
 *   4. rssm_batch   — input/output buffers for up to B rows, all layers,
 *                     and the program recorded once for that capacity.
 *   5. rssm_batch_step — one call per forward step, all layers.
 *
 * Every fallible function returns an rssm_status and, when `err` is not NULL,
 * fills it with the same status and a message saying what was wrong. The
 * library never prints and never exits. Objects are freed with
 * rssm_X_destroy(&p), which also sets p to NULL. There is no global mutable
 * state: distinct objects may be used from distinct threads, and one pool
 * (with its batches) may be used from several threads, whose calls on it
 * take turns. Handles may be destroyed in any order (see rssm_pool_create).
 *
 * Non-finite and out-of-range inputs: the step functions do not scan their
 * inputs (that would cost a pass over them every step). A NaN or infinite
 * q, k, v, gate or beta, a g > 0, or a beta outside [0, 1] in one batch row
 * is carried through to that row's outputs and that slot's state only: no
 * other row's outputs, no other slot, and no undefined behaviour, on every
 * backend. rssm_pool_import, which takes bytes from elsewhere, does check
 * content and refuses a non-finite state or ring entry or a positive
 * log-decay with RSSM_ERR_FORMAT; rssm_pool_write_state refuses a
 * non-finite state with RSSM_ERR_INVALID_ARGUMENT. Finite values that a
 * 16-bit ring cannot hold (|d| = |beta (v - S k)| or |k| from 65520 up with
 * an fp16 ring) are never stored as inf: that row's step is re-run as a
 * flush, which is exact (rssm_batch_run), so such inputs cost a second
 * launch for the step and nothing else. */
#ifndef RSSM_H
#define RSSM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------- version */

/* The one place the version is written; CMake reads it from here. */
#define RSSM_VERSION_MAJOR 0
#define RSSM_VERSION_MINOR 2
#define RSSM_VERSION_PATCH 0

/* The version of the library linked in, "MAJOR.MINOR.PATCH" (which may
 * differ from the header's macros when linking against another build). */
const char *rssm_version_string(void);

/* ------------------------------------------------------------------ status */

typedef enum rssm_status {
    RSSM_OK = 0,
    RSSM_ERR_INVALID_ARGUMENT,   /* NULL pointer, zero size, value out of range */
    RSSM_ERR_UNSUPPORTED,        /* valid, but this backend cannot run it */
    RSSM_ERR_UNAVAILABLE,        /* backend not built in, or no device found */
    RSSM_ERR_OUT_OF_MEMORY,      /* host or device allocation failed */
    RSSM_ERR_POOL_FULL,          /* no free slot; the pool is unchanged */
    RSSM_ERR_BAD_SLOT,           /* slot out of range, or not allocated */
    RSSM_ERR_FORMAT,             /* malformed or mismatched bytes / file */
    RSSM_ERR_IO,                 /* a file could not be read or written */
    RSSM_ERR_DEVICE,             /* the device API reported a failure */
} rssm_status;

#define RSSM_ERROR_MESSAGE_MAX 256

typedef struct rssm_error {
    rssm_status status;
    char message[RSSM_ERROR_MESSAGE_MAX];
} rssm_error;

/* A short constant name for a status ("invalid argument"); never NULL. */
const char *rssm_status_str(rssm_status status);

/* ------------------------------------------------------------------- model */

typedef enum rssm_gate_kind {
    RSSM_GATE_GDN = 0,   /* Gated DeltaNet: one log-decay per value head  */
    RSSM_GATE_KDA = 1,   /* Kimi Delta Attention: one log-decay per key channel */
} rssm_gate_kind;

typedef enum rssm_gate_mode {
    /* The caller passes g (log-decay, <= 0) and beta directly. */
    RSSM_GATE_PRECOMPUTED = 0,
    /* The caller passes raw projections a and b; the kernel computes
     * g = -exp(A_log) * softplus(a + dt_bias)   (softplus(x) = x above 20)
     * beta = sigmoid(b), kept in fp32. */
    RSSM_GATE_RAW = 1,
    /* Raw, with the bounded "safe gate" of Kimi-Linear:
     * g = gate_lower_bound * sigmoid(exp(A_log) * (a + dt_bias)). */
    RSSM_GATE_RAW_SAFE = 2,
} rssm_gate_mode;

typedef enum rssm_dtype {
    RSSM_DTYPE_F32 = 0,
    RSSM_DTYPE_F16 = 1,
    RSSM_DTYPE_BF16 = 2,
} rssm_dtype;

#define RSSM_MAX_RING_LEN 64u

typedef struct rssm_model {
    uint32_t layers;          /* linear-attention layers advanced by one step */
    uint32_t num_qk_heads;    /* H */
    uint32_t num_v_heads;     /* HV; a multiple of H */
    uint32_t head_k;          /* K: key width, a multiple of 4 in 4..256 */
    uint32_t head_v;          /* V: value width, a multiple of 4 in 4..256 */
    rssm_gate_kind gate_kind;
    rssm_gate_mode gate_mode;
    float gate_lower_bound;   /* RSSM_GATE_RAW_SAFE only; < 0 */
    int replay;               /* 0: packed decode, no ring memory at all */
    uint32_t ring_len;        /* L in 1..64; ignored when replay == 0 */
    rssm_dtype state_dtype;   /* F32 or BF16 */
    rssm_dtype ring_dtype;    /* F32, F16 or BF16 */
    rssm_dtype io_dtype;      /* q, k, v and the output: F32, F16 or BF16 */
    int qk_l2norm;            /* q, k <- x / sqrt(sum x^2 + 1e-6) in the kernel */
    float q_scale;            /* applied after the norm; 0 means 1/sqrt(K) */
} rssm_model;

/* Fills `m` with a named preset: "qwen3.5-gdn" (GDN, H=16, HV=32, K=V=128,
 * 36 layers) or "kimi-linear-kda" (KDA, H=HV=32, K=V=128, 20 layers). Both
 * with replay on, L=16, fp32 state, the default ring dtype (fp16), fp32 io,
 * precomputed gates, q/k L2 norm on, q_scale 0. */
rssm_status rssm_model_preset(rssm_model *m, const char *name, rssm_error *err);

/* Checks every field; the message names the first bad one. */
rssm_status rssm_model_validate(const rssm_model *m, rssm_error *err);

/* Bytes one sequence slot costs on any backend: checkpoint plus ring for
 * every layer, as a host engine must budget it. */
rssm_status rssm_model_slot_bytes(const rssm_model *m, size_t *bytes, rssm_error *err);

/* The effective q scale (q_scale, or 1/sqrt(K) when it is 0); 0 for NULL. */
float rssm_model_q_scale(const rssm_model *m);

const char *rssm_dtype_name(rssm_dtype t);
const char *rssm_gate_kind_name(rssm_gate_kind g);
const char *rssm_gate_mode_name(rssm_gate_mode g);

/* ----------------------------------------------------------------- backend */

typedef struct rssm_backend rssm_backend;

/* Names that rssm_backend_create accepts and that were built in, in order of
 * preference, variants included ("cpu", "vulkan", "vulkan:portable", ...).
 * A name being listed does not mean its device is present. */
size_t rssm_backend_name_count(void);
const char *rssm_backend_name_at(size_t index);

/* `name` is "cpu", "vulkan", "cuda", "auto" (the first that starts, GPUs
 * first), or "backend:variant", on the backend's default device:
 * rssm_backend_create_on_device(name, -1, ...). RSSM_ERR_UNAVAILABLE when
 * the backend was not built in or finds no usable device;
 * RSSM_ERR_INVALID_ARGUMENT for a name rssm does not know. Environment:
 * RSSM_CPU_THREADS=N sets the CPU backend's threads (default: online cores;
 * a value that is not a number in 1..1024 is RSSM_ERR_INVALID_ARGUMENT);
 * RSSM_CUDA_DEVICE=N is the CUDA backend's default device (else the first
 * whose compute capability the build has code for: 9.0 and newer by
 * default, 8.0 and newer in the wheel), for the command-line tools and
 * one-GPU programs; RSSM_VK_DEVICE, RSSM_VK_NO_COOPMAT and
 * RSSM_VK_VALIDATION steer the Vulkan backend (vk/README.md). */
rssm_status rssm_backend_create(const char *name, rssm_backend **out, rssm_error *err);

/* rssm_backend_create on device `device`, whatever the environment says:
 * what an engine calls, each tensor-parallel rank with its own GPU (a
 * process that sees every GPU would otherwise put every rank on the same
 * default one). `device` is a CUDA device ordinal as the CUDA runtime
 * numbers them in this process (cudaSetDevice's, torch's
 * tensor.device.index), or -1 for the default of rssm_backend_create.
 * The cuda backend and its variants take any ordinal of a device whose
 * compute capability the build has code for (another is
 * RSSM_ERR_UNAVAILABLE, one beyond the devices RSSM_ERR_INVALID_ARGUMENT);
 * RSSM_CUDA_DEVICE is not
 * read then. The cpu backend takes -1 or 0 (the host); vulkan takes -1
 * only (Vulkan numbers its devices its own way: RSSM_VK_DEVICE). Any other
 * value, and any below -1, is RSSM_ERR_INVALID_ARGUMENT. "auto" tries each
 * backend in turn on `device`, passing over those that refuse it as those
 * that cannot start. Everything created on the backend (pools, batches,
 * layer objects) belongs to that device, and every call on them makes it
 * current for the call and the caller's current again before returning. */
rssm_status rssm_backend_create_on_device(const char *name, int device, rssm_backend **out, rssm_error *err);
void rssm_backend_destroy(rssm_backend **b);

/* The CUDA device ordinal the backend works on (the one chosen, for a
 * default); -1 for a backend that is not a cuda one, and for NULL. */
int rssm_backend_device_ordinal(const rssm_backend *b);

/* The full name ("vulkan:portable") and a one-line device description. */
const char *rssm_backend_name(const rssm_backend *b);
const char *rssm_backend_device(const rssm_backend *b);

/* The variant whose kernels this backend runs on its device: its own name,
 * unless the name resolved to another variant there ("vulkan" on a device
 * without cooperative matrices runs "vulkan:portable"). Two backends on one
 * device with the same string run the same code; the conformance tools
 * check such a pair once. */
const char *rssm_backend_kernels(const rssm_backend *b);

/* A few lines on the device and its features, for `rssm info`. */
rssm_status rssm_backend_describe(const rssm_backend *b, char *buf, size_t size, rssm_error *err);

/* RSSM_OK when this backend can run the model; RSSM_ERR_UNSUPPORTED with
 * the reason otherwise (RSSM_ERR_INVALID_ARGUMENT if the model is invalid). */
rssm_status rssm_backend_supports(const rssm_backend *b, const rssm_model *m, rssm_error *err);

/* Measures the device's memory-copy bandwidth over buffers of `bytes`
 * (bytes read plus bytes written per second, median of several copies), so
 * a benchmark can report kernels against it in the same run. */
rssm_status rssm_backend_copy_bandwidth(rssm_backend *b, size_t bytes, double *bytes_per_second,
                                        rssm_error *err);

/* Caps the multiprocessors that the kernels of the pools, batches and layer
 * objects created on `b` afterwards are planned for at `sms` (0 lifts the
 * cap; a cap above the device's count is the device's count): persistent
 * grids get at most that many multiprocessors' worth of CTAs, the plan
 * chooses its kernels for a device of that size, and the in-place bound
 * (rssm_pool_inplace_seconds) runs on as many. With the device itself
 * confined to as many multiprocessors (CUDA MPS's active thread
 * percentage), this times a smaller part of the same family (docs/bench.md:
 * an H20-shaped run on an H200). RSSM_ERR_UNSUPPORTED on a backend without
 * such a plan (cpu, vulkan). */
rssm_status rssm_backend_limit_sms(rssm_backend *b, uint32_t sms, rssm_error *err);

/* The dtype to which this backend rounds the operands of the flush's
 * rank-(n+1) matrix product for model `m`, beyond the storage dtypes the
 * model names: RSSM_DTYPE_F32 when the product is exact up to fp32
 * rounding, RSSM_DTYPE_F16 for fp16 matrix units (Vulkan cooperative
 * matrices). Accuracy checks loosen their tolerance by it (docs/design.md §6). */
rssm_status rssm_backend_matrix_dtype(const rssm_backend *b, const rssm_model *m, rssm_dtype *dtype,
                                      rssm_error *err);

/* -------------------------------------------------------------------- pool */

typedef struct rssm_pool rssm_pool;

typedef enum rssm_flush_policy {
    /* Every slot flushes when its ring is full (write_pos == L-1) or when
     * forced by the snapshot interval. A batch admitted together flushes
     * together. */
    RSSM_FLUSH_ALIGNED = 0,
    /* As ALIGNED, but a newly allocated (or copied, or imported) slot's first
     * cycle is shortened to L - (slot % L) steps by one early flush, so the
     * slots of a batch reach their flushes on different steps and every step
     * carries about rows/L flushes instead of all of them every L-th step.
     * It costs at most one extra flush per slot lifetime. */
    RSSM_FLUSH_STAGGERED = 1,
} rssm_flush_policy;

/* Device memory for `slots` sequence slots of `model` on backend `b`.
 * The pool keeps a reference to `b`, and a batch one to its pool: handles
 * may be destroyed in any order, and a backend's device (or a pool's
 * memory) is released when the last pool (or batch) using it is gone.
 * The pool and batch calls take every array in host memory and copy to
 * and from the device themselves; on the cuda backend an array in device
 * memory is RSSM_ERR_INVALID_ARGUMENT naming it and its device, before
 * anything changes (CUDA is asked about each array at each call: these
 * calls wait for the device anyway). */
rssm_status rssm_pool_create(rssm_backend *b, const rssm_model *model, uint32_t slots,
                             rssm_flush_policy policy, rssm_pool **out, rssm_error *err);
void rssm_pool_destroy(rssm_pool **p);

const rssm_model *rssm_pool_model(const rssm_pool *p);
uint32_t rssm_pool_capacity(const rssm_pool *p);
uint32_t rssm_pool_free_count(const rssm_pool *p);

/* Takes the lowest free slot; its ring is empty and its state is zero until
 * written (rssm_pool_write_state, which is what prefill does).
 * RSSM_ERR_POOL_FULL when none is free. */
rssm_status rssm_pool_alloc(rssm_pool *p, uint32_t *slot, rssm_error *err);

/* RSSM_ERR_BAD_SLOT for an out-of-range or already free slot. */
rssm_status rssm_pool_free(rssm_pool *p, uint32_t slot, rssm_error *err);

/* Copy-on-write of a cached prefix: folds src's ring into its checkpoint if
 * it is not empty, then copies the checkpoint to dst; dst starts with an
 * empty ring. Both must be allocated (RSSM_ERR_BAD_SLOT) and distinct
 * (RSSM_ERR_INVALID_ARGUMENT). */
rssm_status rssm_pool_copy(rssm_pool *p, uint32_t src, uint32_t dst, rssm_error *err);

/* Folds the ring into the checkpoint; write_pos becomes 0. */
rssm_status rssm_pool_materialise(rssm_pool *p, uint32_t slot, rssm_error *err);

/* The slot's committed ring entries (0 <= write_pos < L). */
rssm_status rssm_pool_write_pos(const rssm_pool *p, uint32_t slot, uint32_t *write_pos,
                                rssm_error *err);

/* The true current state, checkpoint and ring combined, as fp32
 * [layers][HV][V][K], without changing the slot. */
rssm_status rssm_pool_read_state(rssm_pool *p, uint32_t slot, float *state, rssm_error *err);

/* Sets the state from fp32 [layers][HV][V][K] (rounded to the state dtype)
 * and empties the ring: what a prefill leaves behind. A NaN or infinite
 * element is RSSM_ERR_INVALID_ARGUMENT naming it, and the slot is
 * unchanged. */
rssm_status rssm_pool_write_state(rssm_pool *p, uint32_t slot, const float *state,
                                  rssm_error *err);

/* A slot as self-describing bytes (model shape, dtypes, write_pos,
 * checkpoint and committed ring), for prefill/decode disaggregation and
 * for moving a sequence between backends. */
size_t rssm_pool_export_size(const rssm_pool *p);
rssm_status rssm_pool_export(rssm_pool *p, uint32_t slot, void *bytes, size_t size,
                             rssm_error *err);
/* Into an allocated slot; RSSM_ERR_FORMAT if the bytes are truncated,
 * corrupt, or of another model shape, dtype or ring length. The slot is
 * unchanged on any error. */
rssm_status rssm_pool_import(rssm_pool *p, uint32_t slot, const void *bytes, size_t size,
                             rssm_error *err);

/* ---------------------------------------------------------------- schedule */

/* What the scheduler decided for one batch row of one forward step. The
 * device receives slot, write_pos and force, and decides the flush itself
 * (write_pos == L-1 || force); is_flush is the host's copy of the same. */
typedef struct rssm_row_plan {
    uint32_t slot;
    uint32_t write_pos;
    uint32_t force;
    uint32_t is_flush;
} rssm_row_plan;

/* Plans one forward step without changing the pool. `seq_len_after[i]`
 * counts the token being decoded, so it is >= 1; force = interval > 0 &&
 * seq_len_after % interval == 0 (or the staggered policy's early flush).
 * Rows must name distinct allocated slots (RSSM_ERR_BAD_SLOT,
 * RSSM_ERR_INVALID_ARGUMENT for a repeat). */
rssm_status rssm_pool_plan(const rssm_pool *p, uint32_t rows, const uint32_t *slots,
                           const uint64_t *seq_len_after, uint32_t snapshot_interval,
                           rssm_row_plan *plan, rssm_error *err);

/* Advances write_pos of each planned row: 0 after a flush, else +1. The
 * plan must be what rssm_pool_plan returned for the pool as it is now;
 * anything else (a repeated slot, a stale write_pos, an is_flush that does
 * not follow from write_pos and force) is RSSM_ERR_INVALID_ARGUMENT and
 * changes nothing. */
rssm_status rssm_pool_commit(rssm_pool *p, uint32_t rows, const rssm_row_plan *plan,
                             rssm_error *err);

/* ------------------------------------------------------------------- batch */

typedef struct rssm_batch rssm_batch;

/* One forward step's inputs for `rows` rows, every layer, in host memory.
 * Shapes are [layers][rows][...]; q, k, v in the model's io dtype. */
typedef struct rssm_step_inputs {
    const void *q;      /* [layers][rows][H][K] */
    const void *k;      /* [layers][rows][H][K] */
    const void *v;      /* [layers][rows][HV][V] */
    /* PRECOMPUTED: g (log-decay <= 0). RAW modes: the raw projection a.
     * [layers][rows][HV] for GDN, [layers][rows][HV][K] for KDA; fp32. */
    const float *gate;
    /* PRECOMPUTED: beta. RAW modes: b, with beta = sigmoid(b).
     * [layers][rows][HV]; fp32. */
    const float *beta;
} rssm_step_inputs;

/* Buffers for up to `max_rows` rows of all layers of the pool's model. */
rssm_status rssm_batch_create(rssm_pool *p, uint32_t max_rows, rssm_batch **out,
                              rssm_error *err);
void rssm_batch_destroy(rssm_batch **b);

/* Per-layer gate weights, needed in the RAW modes: A_log [HV] and dt_bias
 * [HV] (GDN) or [HV][K] (KDA), fp32. Kept until replaced. */
rssm_status rssm_batch_set_gate_params(rssm_batch *b, uint32_t layer, const float *A_log,
                                       const float *dt_bias, rssm_error *err);

/* One forward step, all layers: plans the rows, refreshes the step header in
 * device memory, runs the recorded program, advances write_pos and writes
 * the outputs [layers][rows][HV][V] (io dtype) to `out`. */
rssm_status rssm_batch_step(rssm_batch *b, uint32_t rows, const uint32_t *slots,
                            const uint64_t *seq_len_after, uint32_t snapshot_interval,
                            const rssm_step_inputs *in, void *out, rssm_error *err);

/* The same step in three parts, so a benchmark can time rssm_batch_run
 * alone: upload leaves the inputs in device memory (they may be run many
 * times), run plans, executes and commits, download reads the outputs of the
 * last run. A run whose rows' ring entries overflowed the ring dtype runs
 * those rows once more as a flush before it commits (docs/design.md §2);
 * rssm_batch_last_run_seconds counts both launches. */
rssm_status rssm_batch_upload(rssm_batch *b, uint32_t rows, const rssm_step_inputs *in,
                              rssm_error *err);
rssm_status rssm_batch_run(rssm_batch *b, uint32_t rows, const uint32_t *slots,
                           const uint64_t *seq_len_after, uint32_t snapshot_interval,
                           rssm_error *err);
rssm_status rssm_batch_download(rssm_batch *b, uint32_t rows, void *out, rssm_error *err);

/* Seconds the device spent in the last rssm_batch_run or rssm_batch_verify
 * (timestamp queries, events, or the wall clock for the CPU). */
rssm_status rssm_batch_last_run_seconds(const rssm_batch *b, double *seconds,
                                        rssm_error *err);

/* --------------------------------------------- speculative decode: verify
 *
 * A verify step runs, per row, T draft tokens from the slot's current state
 * and returns o_1 .. o_T, where o_t is what t single-token decodes from
 * that state would output (the same kernels compute them, at ring
 * positions n .. n + T - 1: T = 1 gives the bits of an unforced step). It
 * writes no checkpoint: the tokens' ring entries are tentative, past the
 * slot's write_pos n, and the slot is mid-verify until rssm_pool_accept
 * commits the first k of them and discards the rest. A ring without room
 * for the window (n + T > L - 1) is folded into its checkpoint first,
 * which leaves the true state as it was. docs/design.md §9 has the rules
 * and what a snapshot boundary inside the accepted tokens does. */

/* The longest window a verify takes; a model's own limit is L - 1. */
#define RSSM_MAX_DRAFT 16u

/* `drafts[r]` tokens for row r, 1 .. min(RSSM_MAX_DRAFT, L - 1), on distinct
 * allocated slots that are not mid-verify, with replay on (a packed model
 * has no ring to hold tentative tokens: RSSM_ERR_UNSUPPORTED). The inputs
 * are token-major, each token a step's arrays ([layers][rows][...], as
 * rssm_step_inputs): token t's at t times one step's size, for
 * t < T_max = max(drafts); a row's arrays past its own T are not read.
 * `out` is [T_max][layers][rows][HV][V] in the io dtype, zero past a row's
 * T. Needs rows <= the batch's max_rows, and the gate weights of RAW gate
 * modes (rssm_batch_set_gate_params). Afterwards the batch holds no
 * uploaded inputs or outputs of its own: the next rssm_batch_run needs an
 * rssm_batch_upload first, and rssm_batch_download a run. */
rssm_status rssm_batch_verify(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint32_t *drafts,
                              const rssm_step_inputs *in, void *out, rssm_error *err);

/* Ends the verify of each row's slot: its first accepted[r] draft tokens
 * (0 .. T) are committed, the rest discarded. seq_len_after[r] counts the
 * accepted tokens (the sequence's length after the last of them). When a
 * snapshot boundary (seq_len % snapshot_interval == 0, interval > 0) falls
 * on an accepted token, the checkpoint becomes the state right after the
 * last such token and the accepted tokens after it stay in the ring, so a
 * prefix cache that snapshots there sees exactly that state. Every row is
 * checked before any slot changes. */
rssm_status rssm_pool_accept(rssm_pool *p, uint32_t rows, const uint32_t *slots, const uint32_t *accepted,
                             const uint64_t *seq_len_after, uint32_t snapshot_interval, rssm_error *err);

/* ------------------------------------------ one layer, on the caller's memory
 *
 * What an inference engine calls: one layer of one decode step on tensors
 * the engine owns (its state pool, its rings, its step activations), on
 * its stream, with nothing allocated, synchronised or read back on the host
 * during the call, so a CUDA graph the engine captures holds it. A layer
 * object is created once per layer shape (every layer of a model may share
 * one) and holds what the launches need: the kernel choice, its launch
 * shape and a few bytes of device scratch. rssm_batch_step is built on the
 * same launches, with rssm's own pool as the tensors (docs/engines.md).
 * The calls below take pointers (cpu: host memory; cuda: device memory);
 * the vulkan backend takes buffers instead, recorded into the caller's
 * command buffer: rssm_layer_record and the section after this one.
 *
 * Shapes, as the engines of docs/engines.md lay them out (R >= L - 1 ring
 * entries per head; an engine's [.., L, ..] ring has room to spare):
 *   state   [slots][HV][V][K]   state dtype
 *   ring_d  [slots][HV][R][V]   ring dtype
 *   ring_k  [slots][H][R][K]    ring dtype
 *   ring_g  [slots][HV][R] (GDN) or [slots][HV][R][K] (KDA), fp32
 *   q, k    [rows][H][K], v and out [rows][HV][V]   io dtype
 *   gate    [rows][HV] (GDN) or [rows][HV][K] (KDA), beta [rows][HV]   gate dtype
 *   A_log   [HV], dt_bias [HV] or [HV][K]   fp32 (RAW gate modes only)
 * Each tensor's last dimension(s) named above for one head (or one row)
 * are contiguous; the slot, head and row strides are the caller's, in
 * elements, so slices and packed rows (q, k and v as parts of one
 * `mixed_qkv` row) need no copy. A stride of 0 takes the contiguous value.
 *
 * Per row r of a launch: slot_index[r] names the slot (a negative index, or
 * one >= slots, marks a padding row: its output is zeroed and no slot is
 * read or written; with RSSM_PADDING_NONPOSITIVE index 0 too); write_pos[r] is the slot's committed ring entries
 * (0..L-1); force[r] != 0 makes the row flush. The row flushes when
 * write_pos[r] == L - 1 or force[r] is set; its cursor then goes to 0, else
 * to write_pos + 1 (rssm_layer_advance). Rows must name distinct slots.
 *
 * Memory a call writes: a step writes the state (its flushing rows), the
 * rings, out and overflow; a fold (rssm_layer_materialise) the state; a
 * window (rssm_layer_verify) the rings, out and overflow; the advance the
 * cursor. No tensor a call writes may share a byte with another tensor of
 * the call, out over an input it no longer needs (v, or the mixed_qkv row)
 * included: no backend promises to read an input before it writes an
 * output, and a row re-run after an overflow needs its inputs as they were.
 * Every entry refuses such a call with RSSM_ERR_INVALID_ARGUMENT naming
 * both tensors, before anything runs, on every backend (common code, a few
 * comparisons per call). A tensor's memory is, from its pointer and the
 * description's strides: the state and each ring over every slot (not only
 * the rows': a slot outside the batch is still the pool's), L - 1 entries
 * of each ring head; q, k, v, gate, beta and out over the call's rows (a
 * window's rows * t_max); A_log and dt_bias; slot_index, write_pos, force,
 * overflow and drafts over `rows`; the cursor over `slots`. Tensors only
 * read may share memory (q, k and v are parts of one row), and a state
 * and rings that interleave without sharing a byte (an engine's page per
 * slot holding both) are taken. On vulkan the check compares offsets in
 * one VkBuffer; two buffers bound to the same device memory are not seen. */

typedef struct rssm_layer rssm_layer;

/* Which slot indices mark a padding row: the engines' conventions. */
typedef enum rssm_padding {
    RSSM_PADDING_OUT_OF_RANGE = 0, /* < 0 or >= slots (SGLang pads with -1) */
    RSSM_PADDING_NONPOSITIVE = 1   /* <= 0 or >= slots (vLLM: slot 0 is a null block) */
} rssm_padding;

typedef struct rssm_layer_desc {
    /* The layer's shape, gates, ring and dtypes; `layers` is not used (one
     * layer object runs any layer of the model). */
    rssm_model model;
    uint32_t max_rows;              /* rows a launch may have, >= 1 */
    uint32_t slots;                 /* slots the state and ring tensors hold */
    int64_t state_slot_stride, state_head_stride;   /* elements; 0: HV V K, V K */
    int64_t ring_d_slot_stride, ring_d_head_stride; /* 0: HV (L-1) V, (L-1) V */
    int64_t ring_k_slot_stride, ring_k_head_stride; /* 0: H (L-1) K, (L-1) K */
    int64_t ring_g_slot_stride, ring_g_head_stride; /* 0: HV (L-1) G, (L-1) G; G = 1 or K */
    int64_t q_row_stride, k_row_stride, v_row_stride, out_row_stride; /* 0: H K, H K, HV V, HV V */
    int64_t gate_row_stride, beta_row_stride;       /* 0: HV G, HV */
    /* gate and beta: F32 (the default, 0) or BF16, the activation dtype
     * engines project a and b in (with fp16 activations, the io dtype F16,
     * the caller passes them as F32) */
    rssm_dtype gate_dtype;
    rssm_padding padding; /* RSSM_PADDING_OUT_OF_RANGE (0) by default */
} rssm_layer_desc;

/* Device pointers (host pointers on the cpu backend) of one launch. The
 * ring tensors may be NULL with replay off. */
typedef struct rssm_layer_tensors {
    void *state;
    void *ring_d, *ring_k;
    float *ring_g;
    const void *q, *k, *v;
    const void *gate, *beta;        /* gate dtype */
    const float *A_log, *dt_bias;   /* RAW gate modes; else may be NULL */
    void *out;
    const int32_t *slot_index;      /* [rows] */
    const int32_t *write_pos;       /* [rows] */
    const int32_t *force;           /* [rows], or NULL: no row forced */
    /* [rows], or NULL. With a 16-bit ring, set to 1 for a row whose ring
     * entry its ring dtype cannot hold (docs/design.md §2) and to 0 for the
     * others. The flagged row's output is right, but its appended entry is
     * not: run the step again for it, unchanged but with force set, before
     * advancing its cursor (rssm_batch_run does this itself). */
    uint32_t *overflow;
} rssm_layer_tensors;

/* RSSM_OK when backend `b` can run layers of this description;
 * RSSM_ERR_UNSUPPORTED or RSSM_ERR_INVALID_ARGUMENT with the reason
 * otherwise (a stride pattern the kernels cannot take is named: the GPU
 * kernels need the strides of the arrays a head moves as vectors in
 * multiples of 16 bytes). Allocates nothing. */
rssm_status rssm_layer_can_implement(const rssm_backend *b, const rssm_layer_desc *desc, rssm_error *err);

/* A layer object for `desc` on backend `b` (which it keeps a reference
 * to). On the cuda backend it belongs to the backend's device
 * (rssm_backend_create_on_device) and its launches share a few bytes of
 * device scratch: launches of one layer object must be ordered (one
 * stream, or one graph); create one per stream that runs concurrently.
 * Calls on one layer object must not overlap in time (the cpu backend's
 * row checks and the cuda backend's record of checked addresses are the
 * object's own); distinct layer objects may be used from distinct threads. */
rssm_status rssm_layer_create(rssm_backend *b, const rssm_layer_desc *desc, rssm_layer **out, rssm_error *err);
void rssm_layer_destroy(rssm_layer **layer);

/* One layer of one decode step over `rows` rows (0..max_rows), enqueued on
 * `stream` (cuda: a cudaStream_t of the layer's device, NULL for the legacy
 * default stream; the backend's device is made current for the call and
 * the caller's restored). Checks the arguments on the host (NULL pointers,
 * rows, alignment, overlap as above, where each tensor lives) and nothing
 * that is in device memory: the kernels skip rows whose slot index is out
 * of range and clamp write_pos into the ring.
 * On cuda every tensor must be device memory of the layer's device, or
 * managed memory: one in host memory (pinned or not) or on another device
 * is RSSM_ERR_INVALID_ARGUMENT, naming the tensor and both places, before
 * anything is launched. CUDA is asked where an address lives
 * (cudaPointerGetAttributes) the first time the layer object meets it; the
 * object remembers the addresses that passed (several hundred: an engine's
 * model a few times over; past that it forgets them all and asks again),
 * so a call whose addresses it has met costs a lookup per tensor and no
 * call into CUDA. Memory freed and allocated again at a remembered address
 * on another device is not noticed.
 * The cpu backend runs the layer before returning, on host pointers, and
 * refuses (RSSM_ERR_INVALID_ARGUMENT) a write_pos out of range or a slot
 * named twice. RSSM_ERR_UNSUPPORTED on a backend that takes buffers
 * (vulkan: rssm_layer_record). */
rssm_status rssm_layer_run(rssm_layer *layer, uint32_t rows, const rssm_layer_tensors *t, void *stream,
                           rssm_error *err);

/* Folds the committed ring entries of each row's slot into its checkpoint,
 * on `stream`, as rssm_pool_materialise does for rssm's own pool: the
 * first write_pos[r] entries of slot slot_index[r] (padding rows skipped),
 * so that state[slot] alone is the slot's true state. Only t->state and
 * the rings are used (the step arrays and force may be NULL); the rings
 * are read, not cleared: set the slots' cursors to 0 afterwards. What an
 * engine does before it snapshots a slot or copies it to another
 * (copy-on-write of a cached prefix: materialise the source, copy its
 * state rows to the destination's, start the destination's cursor at 0),
 * without a round trip through the host. Rows must name distinct slots.
 * Tensors are checked as rssm_layer_run checks them. */
rssm_status rssm_layer_materialise(rssm_layer *layer, uint32_t rows, const rssm_layer_tensors *t, void *stream,
                                   rssm_error *err);

/* Advances the cursors after a step's last layer, on the device, for an
 * engine that keeps them there: for every row that is not padding,
 * cursor[slot_index[r]] = flushes ? 0 : write_pos[r] + 1, with the flush
 * rule above. `cursor` is per slot ([slots]); it may be `write_pos` itself
 * only when that is per slot too (an engine's per-row write_pos buffer is
 * refreshed from its per-slot cursor before the next step), and may share
 * no other byte with the rows' arrays. Rows must name
 * distinct slots: the cpu backend refuses a slot named twice, and a
 * write_pos outside the ring, before any cursor moves
 * (RSSM_ERR_INVALID_ARGUMENT); a GPU backend reads the rows in device
 * memory and does not check them. The arrays are checked for their device
 * as rssm_layer_run checks tensors. */
rssm_status rssm_layer_advance(rssm_layer *layer, uint32_t rows, const int32_t *slot_index,
                               const int32_t *write_pos, const int32_t *force, int32_t *cursor, void *stream,
                               rssm_error *err);

/* Speculative-decode verify of one layer (docs/design.md §9) on the
 * caller's tensors, on `stream`: row r runs drafts[r] draft tokens
 * (1..t_max; t_max at most min(RSSM_MAX_DRAFT, L - 1)) from its slot's
 * state, token t at ring position write_pos[r] + t, all inside the ring:
 * write_pos[r] + drafts[r] <= L - 1 (materialise the slot and start it at 0
 * otherwise). The step arrays are token-major: token t of row r is row
 * t * rows + r of q, k, v, gate, beta and out, so a call reads rows * t_max
 * rows, at most the layer's max_rows. Each token's output is what that many
 * single-token steps would give, to the backend's tolerance; the tokens'
 * ring entries are written at write_pos[r] + t as tentative entries, and the
 * checkpoint is not written. Accepting k of row r's tokens is setting its
 * slot's cursor to write_pos[r] + k: the entries past it are discarded by
 * being past it (a snapshot boundary among the accepted tokens:
 * docs/engines.md). force must be NULL. overflow, when not NULL, gets per
 * row the first token whose ring entry its 16-bit ring dtype could not hold,
 * or UINT32_MAX: that token's and the later ones' outputs and entries are
 * not to be used (accept fewer, or run the row on from that token with
 * rssm_layer_run, force set for it). Outputs of a padding row's tokens are
 * zeroed; those of tokens past a row's drafts[r] are left as they were.
 * drafts lives where slot_index does (host memory on cpu, device memory on
 * cuda, checked as rssm_layer_run checks tensors). RSSM_ERR_UNSUPPORTED on
 * a backend without a per-layer window (the engine then runs T calls of
 * rssm_layer_run, docs/engines.md). */
rssm_status rssm_layer_verify(rssm_layer *layer, uint32_t rows, uint32_t t_max, const uint32_t *drafts,
                              const rssm_layer_tensors *t, void *stream, rssm_error *err);

/* ------------------------------ one layer, in the caller's Vulkan buffers
 *
 * The same layer on the vulkan backend, recorded into a command buffer of
 * the caller's, on buffers the caller owns. Vulkan has no device pointers
 * to pass, so each tensor is named by a VkBuffer of the backend's device
 * (rssm_backend_vulkan_handles) and the byte offset of its first element;
 * everything else (shapes, strides, rows, padding, the flush rule) is as
 * for rssm_layer_tensors, with a handle of 0 where a pointer would be NULL.
 * Each tensor's buffer needs VK_BUFFER_USAGE_STORAGE_BUFFER_BIT (overflow's
 * also TRANSFER_DST: it is cleared before the dispatch), its offset the
 * alignment rssm_layer_can_implement names (16 bytes for the arrays a head
 * moves as vectors, 4 for the rest), and it must hold the tensor's extent
 * within the device's maxStorageBufferRange.
 *
 * A recording holds pipelines, dispatches and the descriptors pushed into
 * the command buffer; nothing is allocated, submitted or waited for. It
 * begins with a barrier that makes the command buffer's earlier compute and
 * transfer writes visible to it and ends with one that makes its writes
 * visible to later compute, transfer and host reads, so calls recorded in
 * order run in order, as launches on one CUDA stream do. The caller
 * submits the command buffer (on the queue rssm_backend_vulkan_handles
 * names, or any queue of its family), and keeps the layer object alive
 * until the work is done. The rssm_pool and rssm_batch calls of the same
 * backend submit to that queue themselves: they must not run while the
 * caller submits to it (Vulkan's external synchronisation of a queue). */

typedef struct rssm_buffer {
    uint64_t handle; /* a VkBuffer (a non-dispatchable handle, 64 bits everywhere) */
    uint64_t offset; /* bytes from the buffer's start to the tensor's first element */
} rssm_buffer;

typedef struct rssm_layer_buffers {
    rssm_buffer state, ring_d, ring_k, ring_g;
    rssm_buffer q, k, v, gate, beta, A_log, dt_bias, out;
    rssm_buffer slot_index, write_pos, force, overflow;
} rssm_layer_buffers;

/* The Vulkan objects of a vulkan backend, for a caller that creates its
 * buffers and command buffers on the same device. Dispatchable handles as
 * pointers: VkInstance, VkPhysicalDevice, VkDevice, VkQueue. */
typedef struct rssm_vulkan_handles {
    void *instance, *physical_device, *device, *queue;
    uint32_t queue_family_index; /* of `queue`; command pools for rssm's recordings use it */
    uint32_t api_version;        /* the version the device was created for (VK_MAKE_API_VERSION) */
} rssm_vulkan_handles;

/* RSSM_ERR_UNSUPPORTED on a backend that is not a vulkan one. */
rssm_status rssm_backend_vulkan_handles(const rssm_backend *b, rssm_vulkan_handles *h, rssm_error *err);

/* rssm_layer_run, recorded into `command_buffer` (a VkCommandBuffer in the
 * recording state, of the backend's device); the kernels clamp and skip
 * as rssm_layer_run says. RSSM_ERR_UNSUPPORTED on a backend that takes
 * pointers (cpu, cuda: rssm_layer_run). */
rssm_status rssm_layer_record(rssm_layer *layer, uint32_t rows, const rssm_layer_buffers *t, void *command_buffer,
                              rssm_error *err);

/* rssm_layer_materialise, recorded: only the state, the rings, slot_index
 * and write_pos are used. */
rssm_status rssm_layer_record_materialise(rssm_layer *layer, uint32_t rows, const rssm_layer_buffers *t,
                                          void *command_buffer, rssm_error *err);

/* rssm_layer_advance, recorded (force's handle may be 0). */
rssm_status rssm_layer_record_advance(rssm_layer *layer, uint32_t rows, rssm_buffer slot_index, rssm_buffer write_pos,
                                      rssm_buffer force, rssm_buffer cursor, void *command_buffer, rssm_error *err);

/* rssm_layer_verify, recorded (docs/design.md §9): the window of
 * `drafts` (a buffer of [rows] uint32, each 1..t_max) over the step arrays'
 * rows * t_max token-major rows, its tokens' ring entries tentative past
 * write_pos, the checkpoint not written, and overflow (when its handle is
 * not 0) filled in the command buffer and then lowered to each row's first
 * overflowing token (UINT32_MAX: none), all as rssm_layer_verify says;
 * force's handle must be 0. Buffers, barriers and alignment as for
 * rssm_layer_record. RSSM_ERR_UNSUPPORTED on a backend that takes pointers
 * (cpu, cuda: rssm_layer_verify), and on a vulkan device whose shared
 * memory cannot hold the window of this layer's head_k and ring (the
 * engine then records T calls of rssm_layer_record). */
rssm_status rssm_layer_record_verify(rssm_layer *layer, uint32_t rows, uint32_t t_max, rssm_buffer drafts,
                                     const rssm_layer_buffers *t, void *command_buffer, rssm_error *err);

/* ------------------------------------------------------------- benchmarks */

/* What a benchmark entry measured over its timed runs, in seconds of
 * device time per run. */
typedef struct rssm_timing {
    double median_seconds;
    double min_seconds;
    uint32_t runs;  /* runs in all: the untimed ones, then the timed ones */
} rssm_timing;

/* Times a program of `steps` steps of `rows` rows, recorded once as one
 * device program (one CUDA graph of one launch per layer, one Vulkan
 * command buffer of one dispatch per layer, each layer waiting for the one
 * before it as in a model; the CPU runs the steps in a loop): it runs
 * untimed until the device is warm (at least once; on a GPU for a fraction
 * of a second, docs/bench.md), then `reps` times back to back,
 * and *timing holds the median and the fastest device time of one run of
 * the whole program.
 * Step s runs the rows plans[s * rows .. s * rows + rows - 1] on the inputs
 * of the last rssm_batch_upload; each plan is checked as rssm_pool_commit
 * checks one, except that its write_pos need not be the slot's own. The
 * pool's write positions do not move: this measures, it does not decode,
 * so a benchmark may repeat one ring position, and the slots' contents
 * afterwards are unspecified. Afterwards rssm_batch_download reads the
 * outputs of the program's last step. steps in 1..4096, reps in 1..1000. */
rssm_status rssm_batch_time_steps(rssm_batch *b, uint32_t rows, uint32_t steps,
                                  const rssm_row_plan *plans, uint32_t reps,
                                  rssm_timing *timing, rssm_error *err);

/* The in-place bound of a step that touches the whole pool: the median
 * device time of `reps` passes (after one untimed) that each read every
 * byte of the pool's memory and write it back unchanged, with the
 * parallelism the kernels get. RSSM_ERR_UNSUPPORTED where a backend has no
 * such pass. reps in 1..1000. */
rssm_status rssm_pool_inplace_seconds(rssm_pool *p, uint32_t reps, double *seconds,
                                      rssm_error *err);

#ifdef __cplusplus
}
#endif

#endif /* RSSM_H */
