/* What the Vulkan host (vk/) and the shaders agree on that is Vulkan's own;
 * included by both (a #define is valid C and GLSL). The layouts every
 * backend shares are in common/rssm_layout.h. */
#ifndef RSSM_VK_ABI_H
#define RSSM_VK_ABI_H

/* A pool is at most this many storage buffers, each holding whole slots and
 * no more than the device binds in one descriptor (maxStorageBufferRange,
 * 128 MiB on lavapipe, 4 GiB on NVIDIA): binding 0 of the decode shaders is
 * an array of this many, and a workgroup indexes it with its slot's buffer.
 * A layer on the caller's buffers (SLOTS_PER_BUFFER 0) binds its state,
 * ring_d, ring_k and ring_g tensors as elements 0 to 3 instead. */
#define RSSM_VK_POOL_BUFFERS 16

/* Subgroups per decode workgroup. */
#define RSSM_VK_SUBGROUPS 4

/* State rows a subgroup of the decode shaders reads at once: a workgroup
 * takes RSSM_VK_SUBGROUPS * RSSM_VK_ROW_BLOCK rows per pass, and a value
 * head split over several workgroups is split in multiples of that. */
#define RSSM_VK_ROW_BLOCK 4 /* decode.comp reads a block's rows as one vec4 */
/* The same in the `_s16` modules (a bf16 state on a GPU): twice the rows,
 * as many bytes (decode.comp's RSSM_STATE16). */
#define RSSM_VK_ROW_BLOCK_S16 8

/* The decode shaders' specialization-constant ids (what each means is in
 * shaders/decode.comp); vk/vk_decode.c sets every one. */
#define RSSM_VK_SPEC_GATE_KIND 0
#define RSSM_VK_SPEC_HEAD_K 1
#define RSSM_VK_SPEC_HEAD_V 2
#define RSSM_VK_SPEC_RING_LEN 3
#define RSSM_VK_SPEC_SG_SIZE 4
#define RSSM_VK_SPEC_STATE_DT 5
#define RSSM_VK_SPEC_RING_DT 6
#define RSSM_VK_SPEC_IO_DT 7
#define RSSM_VK_SPEC_TILE_M 8
#define RSSM_VK_SPEC_TILE_N 9
#define RSSM_VK_SPEC_TILE_K 10
#define RSSM_VK_SPEC_WG_SIZE 11
#define RSSM_VK_SPEC_FLUSH_ROWS 12
/* Its values: which rows of a replay step a decode pipeline runs. */
#define RSSM_VK_ROWS_READ_ONLY 0u /* those that do not flush */
#define RSSM_VK_ROWS_FLUSH 1u     /* those that flush (packed: every row) */
#define RSSM_VK_ROWS_ALL 2u       /* both, in one dispatch */
#define RSSM_VK_SPEC_SLOTS_PER_BUFFER 13
#define RSSM_VK_SPEC_ROW_SPLIT 14
#define RSSM_VK_SPEC_PREFETCH 15
#define RSSM_VK_SPEC_UNROLL_RING 16
#define RSSM_VK_SPEC_NUM_QK_HEADS 17
#define RSSM_VK_SPEC_NUM_V_HEADS 18
#define RSSM_VK_SPEC_LAYER_WORDS 19
/* A head's place in the state and ring tensors, in elements of each one's
 * dtype: slot and head strides (rssm_layer_io's, over the element size). */
#define RSSM_VK_SPEC_CK_SLOT 20
#define RSSM_VK_SPEC_CK_HEAD 21
#define RSSM_VK_SPEC_RD_SLOT 22
#define RSSM_VK_SPEC_RD_HEAD 23
#define RSSM_VK_SPEC_RK_SLOT 24
#define RSSM_VK_SPEC_RK_HEAD 25
#define RSSM_VK_SPEC_RG_SLOT 26
#define RSSM_VK_SPEC_RG_HEAD 27
// A window pipeline's token capacity (shaders/window.glsl's WINDOW_T): its
// shared arrays hold that many tokens, so that a window of a few tokens does
// not pay a GPU's residency for the ring's worth (vk/vk_decode.c).
#define RSSM_VK_SPEC_WINDOW_T 28
#define RSSM_VK_SPEC_COUNT 29

/* The decode shaders' push constants: what one dispatch of one layer (or
 * of every layer of a batch) reads where, and the model's run-time
 * choices. Offsets ("base_") count 32-bit words from the start of each
 * binding; row strides count elements of the tensor's dtype. The
 * per-dispatch half of rssm_layer_io (common/rssm_layout.h); its
 * per-layer half, the state and ring strides, are specialization
 * constants. 31 words: within the 128 bytes every device offers.
 *   rows        the row count, or RSSM_VK_NONE: the word rows_word of
 *               the slot binding holds it (a batch's step header)
 *   slots       a row whose slot is at or above this is padding
 *   layer_rows  rows of the step arrays per layer of a dispatch over
 *               layers (a batch: max_rows; one layer: 0)
 *   row_stride  words from one row's slot (write_pos, force, io) to the next
 *   base_force, base_io, base_over: RSSM_VK_NONE where absent (no row
 *               forced; a row's step-array row is its own; no flags)
 *   mode_flags  gate_mode | flags << 8 (RSSM_CODE_MODE_*, RSSM_FLAG_*) */
#define RSSM_VK_PUSH_FIELDS(U, F)                                                  \
    U(rows) U(rows_word) U(slots) U(layer_rows) U(row_stride)                      \
    U(base_c) U(base_rd) U(base_rk) U(base_rg)                                     \
    U(base_q) U(base_k) U(base_v) U(base_gate) U(base_beta) U(base_out)            \
    U(base_alog) U(base_dtb)                                                       \
    U(base_slot) U(base_wpos) U(base_force) U(base_io) U(base_over)                \
    U(q_row) U(k_row) U(v_row) U(gate_row) U(beta_row) U(out_row)                  \
    U(mode_flags) F(q_scale) F(gate_lower_bound)
#define RSSM_VK_PUSH_WORDS 31
#define RSSM_VK_NONE 0xffffffffu

/* Where a head sits in the state and the rings, and model facts that
 * size and read them: specialization constants of the decode modules a GPU
 * runs; push constants after RSSM_VK_PUSH_FIELDS in the `_rt` modules a
 * CPU device runs (-DRSSM_RUNTIME_SHAPE=1, vk/README.md), so that models
 * that differ only in these share one pipeline there. Strides as
 * RSSM_VK_SPEC_CK_SLOT.. above; the others as decode.comp's constants of
 * the same name (ring_len 1 for the packed module; the dtypes
 * RSSM_CODE_DTYPE_*). */
#define RSSM_VK_SHAPE_FIELDS(U)                                                    \
    U(slots_per_buffer) U(layer_words)                                             \
    U(ck_slot) U(ck_head) U(rd_slot) U(rd_head) U(rk_slot) U(rk_head)             \
    U(rg_slot) U(rg_head) U(num_qk_heads) U(num_v_heads)                          \
    U(head_k) U(head_v) U(ring_len) U(ring_dt) U(io_dt)
#define RSSM_VK_SHAPE_WORDS 17
/* The `_rt` modules' array extents (their HEAD_K, HEAD_V and RING_LEN
 * specialization constants): {K, V, L} rooms in order of preference; a
 * model takes the first whose arrays fit the device's shared memory, each
 * extent the room's where the model's is within it, else its own
 * (vk/vk_decode.c), so that the models within a room share a pipeline.
 * On lavapipe (32 KiB) the portable kernels and the window take the first,
 * the emulated tiles the last. */
#define RSSM_VK_ROOMS {128, 256, 32}, {128, 256, 16}, {128, 128, 32}, {128, 128, 16}

#endif
