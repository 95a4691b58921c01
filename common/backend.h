/*
 * The interface every backend implements: a table of function pointers and
 * an opaque context. The public objects in rssm.h (backend, pool, batch) are
 * thin wrappers that own the host-side bookkeeping (slot allocation,
 * write_pos, scheduling, export/import, materialise) and call through here.
 * Tests, the CLI and the benchmarks drive every backend through this one
 * table; nothing outside a backend's folder knows its device API.
 *
 * Contract shared by all entries:
 *   - they receive models that rssm_model_validate accepted and that the
 *     backend's `supports` accepted;
 *   - they report failures through rssm_set_error (common/error.h);
 *   - data crossing this interface is in host memory, in the canonical
 *     layout of common/rssm_layout.h, so pools of different backends
 *     exchange slots byte for byte.
 */
#ifndef RSSM_BACKEND_H
#define RSSM_BACKEND_H

#include "device.h"
#include "rssm.h"
#include "rssm_layout.h"

#include <stdbool.h>

/* Where a slot's arrays sit; computed once per model by rssm_slot_layout_init. */
typedef struct rssm_slot_layout {
    uint32_t ring_cap;        /* entries per ring: L-1, or 0 without replay */
    size_t ckpt_bytes;        /* per layer */
    size_t ring_d_offset, ring_d_bytes;
    size_t ring_k_offset, ring_k_bytes;
    size_t ring_g_offset, ring_g_bytes;
    size_t layer_bytes;       /* a multiple of RSSM_ARRAY_ALIGN */
    size_t slot_bytes;        /* layers * layer_bytes */
} rssm_slot_layout;

/* A window of rssm_layer_record_verify for layer_record: its longest
 * window and the buffer of the rows' drafts ([rows] uint32). */
typedef struct rssm_record_window {
    uint32_t t_max;
    rssm_buffer drafts;
} rssm_record_window;

typedef struct rssm_backend_ops {
    const char *name;                    /* "cpu", "vulkan", "cuda" */
    /* NULL-terminated list of variant names; [0] is used for the bare name.
     * A single-variant backend lists just its own name ("cpu"). */
    const char *const *variants;

    /* Starts the device: `device` as rssm_backend_create_on_device says
     * (>= -1; -1 the backend's default), each backend's rule for what it
     * takes written in rssm.h. RSSM_ERR_UNAVAILABLE when there is none. */
    rssm_status (*create)(const char *variant, int device, void **ctx, rssm_error *err);
    void (*destroy)(void *ctx);
    /* One line: the device name. */
    const char *(*device)(void *ctx);
    /* Optional (NULL: -1). The CUDA ordinal of the device the backend
     * works on (rssm_backend_device_ordinal). */
    int (*device_ordinal)(void *ctx);
    /* Optional (NULL: the backend's memory is the host's; nothing is
     * checked). Where `address` is, as the device API says: common code
     * checks the caller's memory with it (the per-layer entry takes the
     * backend's device memory, the pool and batch calls host memory;
     * common/device.h) and says which argument is wrong. */
    rssm_place (*place)(void *ctx, const void *address);
    /* A few lines of features for `rssm info`. */
    void (*describe)(void *ctx, char *buf, size_t size);
    rssm_status (*supports)(void *ctx, const rssm_model *m, rssm_error *err);

    /* Device memory for `slots` slots laid out as `layout`, contents
     * undefined (common code zeroes slots it allocates). What a batch
     * needs of the model comes with it, as its kernel parameters: a
     * backend keeps no copy of the model. */
    rssm_status (*pool_create)(void *ctx, const rssm_slot_layout *layout, uint32_t slots, void **pool,
                               rssm_error *err);
    void (*pool_destroy)(void *ctx, void *pool);
    /* The slot's whole block (layout->slot_bytes), host <-> device. */
    rssm_status (*slot_read)(void *ctx, void *pool, uint32_t slot, void *bytes, rssm_error *err);
    rssm_status (*slot_write)(void *ctx, void *pool, uint32_t slot, const void *bytes,
                              rssm_error *err);

    /* Buffers for max_rows rows of every layer, and the program that runs
     * one step over them, recorded once. `params` holds everything constant. */
    rssm_status (*batch_create)(void *ctx, void *pool, const rssm_kernel_params *params,
                                void **batch, rssm_error *err);
    void (*batch_destroy)(void *ctx, void *batch);
    /* A_log [HV] and dt_bias [HV] or [HV][K] of one layer. */
    rssm_status (*batch_set_gate_params)(void *ctx, void *batch, uint32_t layer,
                                         const float *A_log, const float *dt_bias,
                                         rssm_error *err);
    /* Host inputs [layers][rows][...] into device buffers [layers][max_rows][...]. */
    rssm_status (*batch_upload)(void *ctx, void *batch, uint32_t rows,
                                const rssm_step_inputs *in, rssm_error *err);
    /* Refreshes the step header with `rows` entries and runs the recorded
     * program; returns when the step is complete on the device. Common code
     * validated the header (common/schedule.c): rows <= max_rows, distinct
     * allocated slots, write_pos inside the ring, io < max_rows; a backend
     * does not check it again (the GPU kernels do clamp what they index
     * from the header, which lives in device memory). When
     * `overflow` is not NULL, overflow[r] is set to 1 for each header row r
     * that found a finite ring entry its ring dtype cannot hold (the entry
     * is left past write_pos, see docs/design.md §2) and to 0 otherwise. */
    rssm_status (*batch_run)(void *ctx, void *batch, uint32_t rows, const rssm_row_header *hdr,
                             uint32_t *overflow, rssm_error *err);
    /* Device outputs [layers][max_rows][HV][V] into host [layers][rows][HV][V]. */
    rssm_status (*batch_download)(void *ctx, void *batch, uint32_t rows, void *out,
                                  rssm_error *err);
    /* Device seconds of the last batch_run. */
    double (*batch_last_run_seconds)(void *ctx, void *batch);
    /* Records `steps` steps, step s running the `rows` headers
     * hdr[s * rows ..], as one program; warms up (rssm_warm_up), runs it
     * `reps` times, and returns the median and fastest device seconds of
     * one run. Leaves the last step's outputs in the output buffers
     * (rssm_batch_time_steps). */
    rssm_status (*batch_time_steps)(void *ctx, void *batch, uint32_t rows, uint32_t steps,
                                    const rssm_row_header *hdr, uint32_t reps, rssm_timing *timing,
                                    rssm_error *err);

    /* Optional (NULL: common code runs a speculative-decode window as one
     * batch_run per token, docs/design.md §9). The window of the rows of
     * hdr (slot, the base write_pos, no force, io = the row), row r taking
     * drafts[r] tokens (1..t_max; base + drafts <= ring_cap, as common
     * code arranged), from the token-major host inputs `in`
     * ([t_max][layers][rows][...], rssm_batch_verify's) into the
     * token-major host outputs `out`, each token exactly as batch_run
     * would have run it. first_overflow[r] is the first token of row r
     * whose ring entry its dtype could not hold (the row's later tokens
     * are then left undone), or UINT32_MAX. Device seconds in
     * batch_last_run_seconds. RSSM_ERR_UNSUPPORTED, before anything has
     * changed, hands the window back: common code runs it one batch_run
     * per token (the cuda backend does so for windows of one token, which
     * stay bit for bit a step, and for rings its kernel does not take). */
    rssm_status (*batch_verify)(void *ctx, void *batch, uint32_t rows, const rssm_row_header *hdr,
                                const uint32_t *drafts, uint32_t t_max, const rssm_step_inputs *in, void *out,
                                uint32_t *first_overflow, rssm_error *err);

    /* Optional (NULL: rssm_backend_copy_bandwidth says unsupported).
     * Device-to-device copy bandwidth over buffers of `bytes`, counting
     * bytes read plus bytes written, median of several timed copies, with
     * the parallelism the kernels get (all threads, all SMs). */
    rssm_status (*copy_bandwidth)(void *ctx, size_t bytes, double *bytes_per_second,
                                  rssm_error *err);

    /* Optional (NULL: rssm_pool_inplace_seconds says unsupported). Median
     * device seconds of `reps` passes (after one untimed) that each read the
     * first `bytes` of the pool's memory and write every 32-bit word back
     * xored with `flip`: 0 from rssm_pool_inplace_seconds, which leaves the
     * bytes as they were; the tests pass another value to see that each
     * pass touches every word. */
    rssm_status (*pool_inplace_seconds)(void *ctx, void *pool, size_t bytes, uint32_t reps,
                                        uint32_t flip, double *seconds, rssm_error *err);

    /* Optional (NULL: rssm_backend_limit_sms says unsupported). Caps the
     * multiprocessors that what is created afterwards is planned for (0:
     * no cap). */
    rssm_status (*limit_sms)(void *ctx, uint32_t sms, rssm_error *err);

    /* Optional (NULL: fp32). The dtype the flush's matrix product rounds
     * its operands to for this model, beyond the storage dtypes. */
    rssm_dtype (*matrix_dtype)(void *ctx, const rssm_model *m);

    /* Optional (all NULL: rssm_layer_* say this backend has no per-layer
     * entry; layer_run, layer_materialise and layer_advance NULL with the
     * others set: it takes buffer handles, layer_record below). One layer on the caller's memory (rssm_layer_run). Common
     * code has validated the description: `shape` holds its strides (its
     * pointers NULL) and p its kernel parameters (max_rows the layer's).
     * layer_check says why the kernels cannot take it; layer_create makes
     * what the launches need; layer_run checks what only it knows (pointer
     * alignment, on the cpu backend the rows) and launches or runs `io`
     * on `stream` (the backend's handle type, NULL for its default);
     * layer_advance moves the cursors (rssm_layer_advance), rows and
     * pointers checked. */
    rssm_status (*layer_check)(void *ctx, const rssm_kernel_params *p, const rssm_layer_io *shape,
                               rssm_error *err);
    rssm_status (*layer_create)(void *ctx, const rssm_kernel_params *p, const rssm_layer_io *shape, void **layer,
                                rssm_error *err);
    void (*layer_destroy)(void *ctx, void *layer);
    rssm_status (*layer_run)(void *ctx, void *layer, const rssm_layer_io *io, void *stream, rssm_error *err);
    /* The fold of rssm_layer_materialise: `io` has the state, the rings and
     * the rows (no force); the backend supplies zero step inputs from the
     * layer's own buffers and runs the rows as forced flushes of a token
     * that changes nothing (g = 0, so its decay is exactly 1; beta = 0, so
     * its delta is 0), which leaves exactly the fold in the checkpoint. */
    rssm_status (*layer_materialise)(void *ctx, void *layer, const rssm_layer_io *io, void *stream,
                                     rssm_error *err);
    rssm_status (*layer_advance)(void *ctx, void *layer, uint32_t rows, const int32_t *slot_index,
                                 const int32_t *write_pos, const int32_t *force, int32_t *cursor, void *stream,
                                 rssm_error *err);
    /* Optional (NULL: rssm_layer_verify says unsupported). The window of
     * rssm_layer_verify: `io` as for layer_run with io->rows the window's
     * rows, token t's step arrays at row t * rows + r, no force, and
     * io->overflow (when not NULL) to receive each row's first overflowing
     * token; common code has checked t_max, the rows and the pointers. */
    rssm_status (*layer_verify)(void *ctx, void *layer, const rssm_layer_io *io, uint32_t t_max,
                                const uint32_t *drafts, void *stream, rssm_error *err);

    /* Optional (all NULL: rssm_layer_record* and rssm_backend_vulkan_handles
     * say this backend takes pointers). The per-layer entry on tensors
     * named by buffer handles, recorded into the caller's command buffer
     * `cmd` (rssm_layer_record): layer_record runs a step, or with
     * `materialise` the fold of rssm_layer_materialise, or with `window`
     * the speculative-decode window of rssm_layer_record_verify (or says
     * RSSM_ERR_UNSUPPORTED, having recorded nothing); common code has
     * checked the rows and that every tensor the layer reads has a handle,
     * and for a window t_max, rows * t_max <= max_rows, no force and the
     * drafts' handle. A backend with no layer_run takes only these. */
    rssm_status (*layer_record)(void *ctx, void *layer, uint32_t rows, const rssm_layer_buffers *t, bool materialise,
                                const rssm_record_window *window, void *cmd, rssm_error *err);
    rssm_status (*layer_record_advance)(void *ctx, void *layer, uint32_t rows, const rssm_buffer *slot_index,
                                        const rssm_buffer *write_pos, const rssm_buffer *force,
                                        const rssm_buffer *cursor, void *cmd, rssm_error *err);
    rssm_status (*vulkan_handles)(void *ctx, rssm_vulkan_handles *h, rssm_error *err);

    /* Optional (NULL: the instance's own variant name). The variant whose
     * kernels this instance runs, for a variant that resolves to another
     * one on the device at hand ("vulkan" without cooperative matrices runs
     * the kernels of "vulkan:portable"). */
    const char *(*kernels)(void *ctx);
} rssm_backend_ops;

/* Every backend compiled in, in preference order; NULL-terminated. */
extern const rssm_backend_ops *const rssm_backend_registry[];

/* Computes the canonical layout; the model must be valid. */
void rssm_slot_layout_init(rssm_slot_layout *layout, const rssm_model *m);

/* Fills the constant kernel parameters for a batch of max_rows rows. */
void rssm_kernel_params_init(rssm_kernel_params *params, const rssm_model *m,
                             const rssm_slot_layout *layout, uint32_t max_rows);

/* Byte sizes of one layer's block of each step array for `rows` rows: what
 * every backend allocates and copies (rssm_step_inputs' shapes). */
typedef struct rssm_io_sizes {
    size_t q, k, v, gate, beta, out;
} rssm_io_sizes;
void rssm_io_sizes_init(rssm_io_sizes *sizes, const rssm_kernel_params *p, uint32_t rows);

/* A batch's step arrays as its backend keeps them: [layers][max_rows][...]
 * (rssm_layout.h), and the gate weights [layers][HV] and [layers][HV][G]. */
typedef struct rssm_batch_arrays {
    const void *q, *k, *v, *gate, *beta;
    void *out;
    const float *A_log, *dt_bias;
} rssm_batch_arrays;

/* The strides of rssm's own pool (the canonical slot layout `p`
 * describes) and of a batch's step arrays, in rssm_layer_io's bytes: what
 * rssm_layer_io_of_batch fills besides the addresses, for a backend that
 * addresses its buffers another way. */
void rssm_layer_io_pool_strides(rssm_layer_io *io, const rssm_kernel_params *p);

/* Layer `layer` of a batch over rssm's own pool (`slots` slots at `pool`,
 * the canonical slot layout `p` describes) as the one description every
 * kernel takes: the pool's layer blocks, the layer's block of the step
 * arrays, and the rows of the step header at `header` (the device's copy;
 * NULL for a backend that decodes the rows on the host). This is how
 * rssm_batch_run is built on the per-layer launches of rssm_layer_run. */
void rssm_layer_io_of_batch(rssm_layer_io *io, const rssm_kernel_params *p, uint8_t *pool, uint32_t slots,
                            const rssm_batch_arrays *a, const uint32_t *header, uint32_t *overflow,
                            uint32_t layer);

/* The GPU kernels move a head's rows (of the state, the rings' d and k, q,
 * k, v and out, and a KDA ring's gates) as 16-byte vectors, so those
 * strides must be multiples of 16 bytes; a GDN ring's one gate per entry
 * is read as a float (4). The name of the first stride of `io` that is
 * not, or NULL. */
const char *rssm_layer_misaligned_stride(const rssm_kernel_params *p, const rssm_layer_io *io);

/* The fold of rssm_layer_materialise as a decode launch (backend.h,
 * layer_materialise), written once for every backend: its kernel
 * parameters (p's, with precomputed fp32 gates and no q/k norm), and the
 * one buffer of fold->max_rows rows of inputs it runs on: zero q, k, v,
 * g and beta, an output nobody reads, and a force of 1 for every row.
 * rssm_fold_image fills a host copy of that buffer (rssm_fold_bytes long);
 * rssm_fold_io points io's step arrays and force into it. */
void rssm_fold_params(rssm_kernel_params *fold, const rssm_kernel_params *p);
size_t rssm_fold_bytes(const rssm_kernel_params *fold);
void rssm_fold_image(void *host, const rssm_kernel_params *fold);
void rssm_fold_io(rssm_layer_io *io, const rssm_kernel_params *fold, void *buffer);

#endif /* RSSM_BACKEND_H */
