/*
 * Layout facts shared by the C library, the CUDA kernels and the GLSL
 * shaders. Everything a kernel needs to find its data is here, in one place,
 * so the three sides cannot drift apart.
 *
 * This file is included from C11, CUDA C and GLSL 4.50: it holds macros and,
 * for C/CUDA only, plain structs of 32-bit words with static asserts.
 */
#ifndef RSSM_LAYOUT_H
#define RSSM_LAYOUT_H

/* ---------------------------------------------------------- slot memory
 *
 * A pool is `slots` equal blocks of `slot_bytes`; a slot is `layers` equal
 * blocks of `layer_bytes`. Within a layer block, each array starts at the
 * given byte offset (a multiple of RSSM_ARRAY_ALIGN):
 *
 *   checkpoint C   [HV][V][K]           state dtype      at 0
 *   ring_d         [HV][L-1][V]         ring dtype       at ring_d_offset
 *   ring_k         [H][L-1][K]          ring dtype       at ring_k_offset
 *   ring_g         [HV][L-1]    (GDN)   fp32             at ring_g_offset
 *                  [HV][L-1][K] (KDA)
 *
 * The ring holds L-1 entries, not L: a step that finds L-1 entries flushes
 * instead of appending. With replay off, or L = 1, the ring arrays are empty
 * and their offsets equal layer_bytes' unpadded end. k is stored once per
 * q/k head, written by the first value head of its group (hv % (HV/H) == 0).
 * Only entries below write_pos are ever read: unused ring memory may hold
 * anything, NaN included.
 *
 * Step inputs and outputs on the device are [layers][max_rows][...] so that
 * a program recorded for a capacity never changes its offsets:
 *   q, k [layers][max_rows][H][K] io dtype     v, out [layers][max_rows][HV][V] io dtype
 *   gate [layers][max_rows][HV] or [..][HV][K] fp32    beta [layers][max_rows][HV] fp32
 * Gate weights (RAW modes): A_log [layers][HV], dt_bias [layers][HV] or
 * [layers][HV][K], fp32.
 */
#define RSSM_ARRAY_ALIGN 256u

/* Numeric codes as in rssm.h, for kernels that cannot include it. */
#define RSSM_CODE_GATE_GDN 0u
#define RSSM_CODE_GATE_KDA 1u
#define RSSM_CODE_MODE_PRECOMPUTED 0u
#define RSSM_CODE_MODE_RAW 1u
#define RSSM_CODE_MODE_RAW_SAFE 2u
#define RSSM_CODE_DTYPE_F32 0u
#define RSSM_CODE_DTYPE_F16 1u
#define RSSM_CODE_DTYPE_BF16 2u

#define RSSM_FLAG_QK_L2NORM 1u
#define RSSM_FLAG_REPLAY 2u
/* gate and beta inputs in bf16 rather than fp32 (the per-layer entry's
 * rssm_layer_desc.gate_dtype; rssm_batch's step arrays are fp32) */
#define RSSM_FLAG_GATE_BF16 4u
/* slot 0 pads a row too (rssm_layer_desc.padding, RSSM_PADDING_NONPOSITIVE:
 * vLLM's null block) */
#define RSSM_FLAG_PAD_ZERO 8u

/* Whether a row whose slot index is `slot` (an int32 read as unsigned, so
 * a negative one is large) is padding: outside the tensors' `slots`, or 0
 * under RSSM_FLAG_PAD_ZERO. A padding row's output is zeroed and no slot is
 * touched. */
#define RSSM_ROW_PADS(slot, slots, flags) \
    ((slot) >= (slots) || ((slot) == 0u && ((flags) & RSSM_FLAG_PAD_ZERO) != 0u))

/* Added under the root of sum(x^2) when q and k are L2-normalised. */
#define RSSM_L2NORM_EPS 1e-6f
/* softplus(x) is taken as x above this. */
#define RSSM_SOFTPLUS_THRESHOLD 20.0f

/* ------------------------------------------------------- the step header
 *
 * One device buffer per batch, refreshed in place by the host before every
 * run of the recorded program: a word with the row count, three reserved
 * words, then RSSM_ROW_WORDS 32-bit words per row. Rows at or beyond
 * `rows` are idle. The kernel decides whether the row flushes
 * (RSSM_ROW_FLUSHES).
 * A row reads its inputs from and writes its outputs to row `io` of the
 * step arrays (the header row's own index unless a step re-runs some of
 * its rows: docs/design.md §2).
 */
#define RSSM_HEADER_ROWS 0u
#define RSSM_HEADER_WORDS 4u
#define RSSM_ROW_WORDS 4u
#define RSSM_ROW_SLOT 0u
#define RSSM_ROW_WRITE_POS 1u
#define RSSM_ROW_FORCE 2u
#define RSSM_ROW_IO 3u

/* The flush rule (docs/design.md §2), the one spelling of it that the
 * scheduler, every kernel and the shaders use: a row whose ring holds `n`
 * entries (write_pos, which the host keeps and the kernels clamp to at most
 * ring_cap = L - 1) writes its checkpoint this step when the ring is full
 * or the host forces it. Without a ring (ring_cap 0: packed decode, or
 * L = 1) every step does. */
#define RSSM_ROW_FLUSHES(n, ring_cap, force) ((n) == (ring_cap) || (force) != 0u)

/* The smallest magnitudes that fp16 and bf16 round (to nearest even) to
 * infinity. A finite ring entry at or above its ring dtype's would be
 * stored as inf: the kernels flag the row instead (docs/design.md §2). */
#define RSSM_F16_OVERFLOW 65520.0f
#define RSSM_BF16_OVERFLOW 3.3961883e38f
#define RSSM_HEADER_BYTES(max_rows) (4u * (RSSM_HEADER_WORDS + RSSM_ROW_WORDS * (max_rows)))

/* ----------------------------------------------------- kernel parameters
 *
 * Constant for the life of a batch or a layer object: kernel arguments on
 * CUDA, the CPU kernel's parameters; the Vulkan host turns them into its
 * shaders' specialization and push constants (vk/vk_decode.c). Nothing in
 * here changes between steps (that lives in the step header). An X-macro,
 * so the C and CUDA sides declare the same 32-bit words in the same order.
 */
#define RSSM_KERNEL_PARAMS_FIELDS(U, F)                                          \
    U(num_qk_heads) U(num_v_heads) U(head_k) U(head_v)                           \
    U(ring_len) U(ring_cap) U(gate_kind) U(gate_mode)                            \
    U(flags) U(state_dtype) U(ring_dtype) U(io_dtype)                            \
    U(layers) U(max_rows) U(layer_bytes) U(slot_bytes)                           \
    U(ring_d_offset) U(ring_k_offset) U(ring_g_offset) U(reserved0)              \
    F(q_scale) F(gate_lower_bound) U(reserved1) U(reserved2)

#define RSSM_KERNEL_PARAMS_WORDS 24u

#if defined(GL_core_profile) || defined(GL_compatibility_profile) || defined(GL_es_profile)
/* GLSL: a block declared from an X-macro of U(name) and F(name) words
 * (shaders/vk_abi.h's push constants) spells them with these. */
#define RSSM_GLSL_U(name) uint name;
#define RSSM_GLSL_F(name) float name;
#else
#include <stddef.h>
#include <stdint.h>

#define RSSM_C_U(name) uint32_t name;
#define RSSM_C_F(name) float name;
typedef struct rssm_kernel_params {
    RSSM_KERNEL_PARAMS_FIELDS(RSSM_C_U, RSSM_C_F)
} rssm_kernel_params;
#undef RSSM_C_U
#undef RSSM_C_F

#ifdef __cplusplus
static_assert(sizeof(rssm_kernel_params) == 4 * RSSM_KERNEL_PARAMS_WORDS, "params are 32-bit words");
#else
_Static_assert(sizeof(rssm_kernel_params) == 4 * RSSM_KERNEL_PARAMS_WORDS, "params are 32-bit words");
#endif

typedef struct rssm_row_header {
    uint32_t slot;
    uint32_t write_pos;
    uint32_t force;
    uint32_t io;
} rssm_row_header;

#ifdef __cplusplus
static_assert(sizeof(rssm_row_header) == 4 * RSSM_ROW_WORDS, "row header layout");
#else
_Static_assert(sizeof(rssm_row_header) == 4 * RSSM_ROW_WORDS, "row header layout");
#endif

/* --------------------------------------------- one layer's addresses
 *
 * What a kernel launch of one layer reads and writes, wherever the caller
 * keeps it: rssm's own pool (the slot memory above, as the batch sets it
 * up) or an engine's tensors (rssm_layer_run). Every kernel finds its data
 * through this struct alone. Strides are in bytes; within one head (or one
 * row) the arrays are contiguous in the shapes above, and a head's ring
 * holds ring_cap or more entries.
 *
 * The rows: row r's slot, write_pos and force are the 32-bit words at
 * r * row_stride in row_slot, row_write_pos and row_force (NULL: no row is
 * forced); its step-array row is row_io[r * row_stride], or r when row_io
 * is NULL. A row_stride of RSSM_ROW_WORDS means the rows of a step header
 * (row_slot at a row's first word, 16-byte aligned), which the GPU kernels
 * read as one 16-byte load per row. A slot outside 0..slots-1 (as int32: a negative index) marks a
 * padding row: the kernels zero its output and touch no slot. The row
 * count is *rows_dev when rows_dev is not NULL (the step header's, which
 * the host refreshes between replays of a recorded program), else rows.
 * The GPU kernels read the rows from device memory; the CPU backend
 * decodes them on the host and passes them to its kernel one by one. */
typedef struct rssm_layer_io {
    uint8_t *ckpt, *ring_d, *ring_k, *ring_g;          /* slot 0, head 0 */
    size_t ckpt_slot, ckpt_head;
    size_t ring_d_slot, ring_d_head;
    size_t ring_k_slot, ring_k_head;
    size_t ring_g_slot, ring_g_head;
    const uint8_t *q, *k, *v, *gate, *beta;            /* row 0 */
    uint8_t *out;
    size_t q_row, k_row, v_row, gate_row, beta_row, out_row;
    const float *A_log, *dt_bias;                      /* [HV], [HV] or [HV][K] */
    const uint32_t *row_slot, *row_write_pos, *row_force, *row_io;
    const uint32_t *rows_dev;
    uint32_t row_stride, rows, slots;
    uint32_t *overflow;                                /* [rows], or NULL */
} rssm_layer_io;

#endif /* not GLSL */

#endif /* RSSM_LAYOUT_H */
