// One decode step of a gated linear-attention layer (GDN or KDA), for one
// (value head, batch row, layer) per workgroup: the exact semantics of
// docs/design.md §1.
//
// Variants, by -D (one SPIR-V module each):
//   RSSM_REPLAY 0   packed decode: read S, S <- S*alpha + d k^T, every step
//   RSSM_REPLAY 1   ReplaySSM decode: factored readout from the checkpoint C
//                   and the ring; append to the ring, or on a flush write
//                   C' = C*diag(alpha*Gamma) + [D | d] [KK ; k] (rank n+1)
//   RSSM_TILES 0    portable: subgroup arithmetic; the flush is fused into
//                   the readout's row loop
//   RSSM_TILES 1,2  `_cm`: a flush with n >= 1 ring entries is a
//                   [V x (n+1)] x [(n+1) x K] product through tile.glsl
//                   (1: KHR cooperative matrix, 2: emulated tiles)
// With L = 1 the replay module does exactly the packed module's arithmetic in
// the same order (`precise` keeps the compiler from fusing differently), so
// the two agree bit for bit.
//
// Work split: the workgroup is SG_COUNT subgroups, on V / ROW_SPLIT rows of
// one value head. Per-channel work (gates, decays) is spread over all
// invocations; the ring coefficients over the subgroups, one entry each in
// turn (its lanes over the channel quads); the rows go to subgroups in
// blocks of ROW_BLOCK rows, whose invocations split a row's K channels in
// quads (16-byte loads) and its ring entries (one d_j[v] each), and reduce
// the block's rows together (subgroup_sum_rows). 16-bit arrays are written
// in whole words.
//
// What a GPU needs of it (docs/design.md §8, measured on an H200): every
// load of a block issued before any is used; arrays indexed only by
// constants after unrolling (else they live in local, off-chip memory); as
// little shared memory as possible, as a workgroup's shared memory limits
// how many are resident and a read-only step needs them all; no chain of
// dependent memory round trips (the ring is read into registers as it is
// walked, not staged).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#if RSSM_TILES == 1
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif

#include "rssm_layout.h"
#include "vk_abi.h"
#include "dtype.glsl"

#ifndef RSSM_REPLAY
#error "define RSSM_REPLAY (0: packed, 1: replay)"
#endif
#ifndef RSSM_TILES
#define RSSM_TILES 0
#endif
#ifndef RSSM_WINDOW
#define RSSM_WINDOW 0
#endif
#if RSSM_WINDOW && (RSSM_REPLAY != 1 || RSSM_TILES != 0)
#error "the window (shaders/window.glsl) is a portable replay kernel"
#endif
#if RSSM_TILES != 0 && RSSM_REPLAY == 0
#error "the _cm variants are replay kernels: the packed update is rank 1"
#endif
// 1: an `_rt` module, for CPU devices: the head's place, the head counts
// and sizes, the ring length and the ring and io dtypes are push constants
// (vk_abi.h's RSSM_VK_SHAPE_FIELDS) rather than specialization constants,
// and HEAD_K, HEAD_V and RING_LEN (K_ROOM, V_ROOM and RING_ROOM here) only
// size the arrays and bound the unrolled loops, so that models differing
// only in those share one pipeline (on lavapipe each pipeline is an LLVM
// compile; vk/README.md). The state dtype stays a constant: its run-time
// choice in the unrolled row loads and stores made lavapipe's compile 1.6x
// longer.
#ifndef RSSM_RUNTIME_SHAPE
#define RSSM_RUNTIME_SHAPE 0
#endif
#if RSSM_RUNTIME_SHAPE && RSSM_TILES == 1
#error "the _rt modules are the CPU device's kernels: portable, emulated tiles, packed or the window"
#endif
// 1: an `_s16` module, for a 16-bit (bf16) state on a GPU: a block is
// RSSM_VK_ROW_BLOCK_S16 rows held as their stored 16-bit words until used,
// so that a subgroup has as many bytes of state in flight per block, in as
// many registers, as an fp32 block of RSSM_VK_ROW_BLOCK rows, and a
// workgroup makes half the passes (docs/design.md §8). The packed step, and
// a replay step's read-only rows only (vk/vk_decode.c): the rows that
// flush update their block in fp32, which an fp32 copy of twice the rows
// would not leave the registers for.
#ifndef RSSM_STATE16
#define RSSM_STATE16 0
#endif
#if RSSM_STATE16 && (RSSM_WINDOW || RSSM_TILES != 0 || RSSM_RUNTIME_SHAPE)
#error "the _s16 modules are the GPU's portable packed and replay kernels"
#endif

// Specialization constants (ids in vk_abi.h); the host (vk/vk_decode.c)
// sets every one.
layout(constant_id = RSSM_VK_SPEC_GATE_KIND) const uint GATE_KIND = 0u;  // RSSM_CODE_GATE_*
#if RSSM_RUNTIME_SHAPE
// At least the head's size, for array extents (RSSM_VK_ROOMS).
layout(constant_id = RSSM_VK_SPEC_HEAD_K) const uint K_ROOM = 128u;
layout(constant_id = RSSM_VK_SPEC_HEAD_V) const uint V_ROOM = 128u;
#define HEAD_K pc.head_k
#define HEAD_V pc.head_v
#else
layout(constant_id = RSSM_VK_SPEC_HEAD_K) const uint HEAD_K = 128u;
layout(constant_id = RSSM_VK_SPEC_HEAD_V) const uint HEAD_V = 128u;
const uint K_ROOM = HEAD_K;
const uint V_ROOM = HEAD_V;
#endif
#if RSSM_RUNTIME_SHAPE
// At least the ring length, for array extents (RSSM_VK_ROOMS).
layout(constant_id = RSSM_VK_SPEC_RING_LEN) const uint RING_ROOM = 16u;
#define RING_LEN pc.ring_len
#define RING_DT pc.ring_dt
#define IO_DT pc.io_dt
#else
layout(constant_id = RSSM_VK_SPEC_RING_LEN) const uint RING_LEN = 16u;  // 1 for the packed module
#define RING_ROOM RING_LEN
#endif
layout(constant_id = RSSM_VK_SPEC_SG_SIZE) const uint SG_SIZE = 32u;   // the pipeline requires it
layout(constant_id = RSSM_VK_SPEC_STATE_DT) const uint STATE_DT = 0u;   // RSSM_CODE_DTYPE_*
#if !RSSM_RUNTIME_SHAPE
layout(constant_id = RSSM_VK_SPEC_RING_DT) const uint RING_DT = 1u;
layout(constant_id = RSSM_VK_SPEC_IO_DT) const uint IO_DT = 0u;
#endif
layout(constant_id = RSSM_VK_SPEC_TILE_M) const uint TILE_M = 16u;
layout(constant_id = RSSM_VK_SPEC_TILE_N) const uint TILE_N = 16u;
layout(constant_id = RSSM_VK_SPEC_TILE_K) const uint TILE_K = 16u;
layout(local_size_x_id = RSSM_VK_SPEC_WG_SIZE) in;  // SG_COUNT * SG_SIZE
// Replay: which rows of the step this pipeline runs (vk_abi.h's
// RSSM_VK_ROWS_*): those that do not flush, those that do (the other
// pipeline's workgroups return at once), or all of them (one dispatch a
// step, where a small batch would pay for two; portable kernels only). Only a flush needs KK_j and the tiles in shared
// memory, and a GPU keeps fewer workgroups resident the more shared memory
// each takes: the read-only steps run with a few KiB (docs/design.md §8).
// Packed: RSSM_VK_ROWS_FLUSH.
layout(constant_id = RSSM_VK_SPEC_FLUSH_ROWS) const uint FLUSH_ROWS = RSSM_VK_ROWS_FLUSH;
const bool HAS_FLUSH_ROWS = FLUSH_ROWS != RSSM_VK_ROWS_READ_ONLY;
// Slots per buffer of the pool (vk_abi.h): slot s is slot s % SLOTS_PER_BUFFER
// of buffer s / SLOTS_PER_BUFFER. 0: one layer on the caller's tensors,
// the state and the three rings each in its own element of binding 0.
// Words from one layer's block of a slot to the next's, for a dispatch
// over a batch's layers (gl_WorkGroupID.z); 0 for one layer.
// A head's first element in each state tensor: slot * X_SLOT + head * X_HEAD
// (rssm_layer_io's strides in elements; a slot counted within its buffer).
#if RSSM_RUNTIME_SHAPE
#define SLOTS_PER_BUFFER pc.slots_per_buffer
#define LAYER_WORDS pc.layer_words
#define CK_SLOT pc.ck_slot
#define CK_HEAD pc.ck_head
#define RD_SLOT pc.rd_slot
#define RD_HEAD pc.rd_head
#define RK_SLOT pc.rk_slot
#define RK_HEAD pc.rk_head
#define RG_SLOT pc.rg_slot
#define RG_HEAD pc.rg_head
#define NUM_QK_HEADS pc.num_qk_heads
#define NUM_V_HEADS pc.num_v_heads
#else
layout(constant_id = RSSM_VK_SPEC_SLOTS_PER_BUFFER) const uint SLOTS_PER_BUFFER = 1u;
layout(constant_id = RSSM_VK_SPEC_LAYER_WORDS) const uint LAYER_WORDS = 0u;
layout(constant_id = RSSM_VK_SPEC_CK_SLOT) const uint CK_SLOT = 0u;
layout(constant_id = RSSM_VK_SPEC_CK_HEAD) const uint CK_HEAD = 0u;
layout(constant_id = RSSM_VK_SPEC_RD_SLOT) const uint RD_SLOT = 0u;
layout(constant_id = RSSM_VK_SPEC_RD_HEAD) const uint RD_HEAD = 0u;
layout(constant_id = RSSM_VK_SPEC_RK_SLOT) const uint RK_SLOT = 0u;
layout(constant_id = RSSM_VK_SPEC_RK_HEAD) const uint RK_HEAD = 0u;
layout(constant_id = RSSM_VK_SPEC_RG_SLOT) const uint RG_SLOT = 0u;
layout(constant_id = RSSM_VK_SPEC_RG_HEAD) const uint RG_HEAD = 0u;
layout(constant_id = RSSM_VK_SPEC_NUM_QK_HEADS) const uint NUM_QK_HEADS = 1u;
layout(constant_id = RSSM_VK_SPEC_NUM_V_HEADS) const uint NUM_V_HEADS = 1u;
#endif
// Workgroups per value head, each with V / ROW_SPLIT consecutive rows (a
// multiple of SG_COUNT * ROW_BLOCK; the host decides, vk/vk_decode.c). A
// small batch has too few (row, head) pairs to keep a GPU's memory busy,
// and a workgroup's passes over its rows are a chain of memory round trips;
// each workgroup of a head repeats the per-channel and ring-coefficient work.
layout(constant_id = RSSM_VK_SPEC_ROW_SPLIT) const uint ROW_SPLIT = 1u;
// 1: a subgroup issues the loads of its next block of rows before it
// reduces the current one, so a block's memory latency overlaps the work
// on the one before; costs a second block of registers (vk/vk_decode.c).
layout(constant_id = RSSM_VK_SPEC_PREFETCH) const uint PREFETCH = 0u;
// 1 on a GPU: the walk over the ring entries in the coefficient pass is
// unrolled, so that its loads go out together and its per-entry registers
// have fixed names. 0 on a CPU device (lavapipe), where registers are memory
// anyway and the unrolled body multiplies the compile time.
layout(constant_id = RSSM_VK_SPEC_UNROLL_RING) const uint UNROLL_RING = 1u;

const uint SG_COUNT = RSSM_VK_SUBGROUPS;
const uint WG_SIZE = SG_COUNT * SG_SIZE;
#if RSSM_RUNTIME_SHAPE
#define RING_CAP (RING_LEN - 1u)
#else
const uint RING_CAP = RING_LEN - 1u;
#endif
// Channel quads one invocation holds of a state row.
const uint ROW_QUADS = (K_ROOM / 4u + SG_SIZE - 1u) / SG_SIZE;
// State rows a subgroup reads at once (the readout reduces them together).
// A literal: the NVIDIA compiler kept arrays sized by a specialization
// constant expression in local (off-chip) memory.
#if RSSM_STATE16
const uint ROW_BLOCK = RSSM_VK_ROW_BLOCK_S16;
#else
const uint ROW_BLOCK = RSSM_VK_ROW_BLOCK;
#endif
const uint ROWS_PER_PASS = SG_COUNT * ROW_BLOCK;

layout(push_constant) uniform Push {
    RSSM_VK_PUSH_FIELDS(RSSM_GLSL_U, RSSM_GLSL_F)
#if RSSM_RUNTIME_SHAPE
    RSSM_VK_SHAPE_FIELDS(RSSM_GLSL_U)
#endif
} pc;

// Bindings: vk/vk_internal.h's BIND_* list.
layout(std430, binding = 0) buffer Pool { uint w[]; } pool_buf[RSSM_VK_POOL_BUFFERS];
// The same buffers seen in 8- and 16-byte words, for whole channel quads
// (every head's rows start on a 16-byte boundary and K % 4 == 0).
layout(std430, binding = 0) buffer Pool2 { uvec2 w[]; } pool2_buf[RSSM_VK_POOL_BUFFERS];
layout(std430, binding = 0) buffer Pool4 { uvec4 w[]; } pool4_buf[RSSM_VK_POOL_BUFFERS];
// The elements of binding 0 that hold this workgroup's checkpoint and
// rings (set first thing in main; the same for the whole workgroup): one
// buffer, the slot's, in a pool; four for a layer on the caller's tensors.
uint g_c = 0u, g_rd = 0u, g_rk = 0u, g_rg = 0u;
#define ckpt pool_buf[g_c]
#define ckpt2 pool2_buf[g_c]
#define ckpt4 pool4_buf[g_c]
#define ring_d pool_buf[g_rd]
#define ring_k pool_buf[g_rk]
#define ring_g pool_buf[g_rg]
#define ring_g4 pool4_buf[g_rg]
// A row's slot, write_pos, force and step-array row (a batch: all four in
// its step header; a layer: the caller's int32 tensors).
layout(std430, binding = 1) readonly buffer RowSlot { uint w[]; } row_slot;
layout(std430, binding = 2) readonly buffer RowPos { uint w[]; } row_pos;
layout(std430, binding = 3) readonly buffer RowForce { uint w[]; } row_force;
layout(std430, binding = 4) readonly buffer RowIo { uint w[]; } row_io;
layout(std430, binding = 5) readonly buffer Q { uint w[]; } qbuf;
layout(std430, binding = 6) readonly buffer Kb { uint w[]; } kbuf;
layout(std430, binding = 7) readonly buffer Vb { uint w[]; } vbuf;
layout(std430, binding = 8) readonly buffer Gate { uint w[]; } gatebuf;   // fp32 or bf16
layout(std430, binding = 9) readonly buffer Beta { uint w[]; } betabuf;   // fp32 or bf16
layout(std430, binding = 10) readonly buffer ALog { float w[]; } a_log;
layout(std430, binding = 11) readonly buffer DtBias { float w[]; } dt_bias;
layout(std430, binding = 12) writeonly buffer Out { uint w[]; } outbuf;
// 1 for a row whose ring append overflowed the ring dtype (docs/design.md
// §2); only ever set to 1: the host zeroes the flags before the dispatch.
#if RSSM_WINDOW
// A window's: per row, its first token whose ring entry overflowed
// (atomicMin; the host fills the words with UINT32_MAX first).
layout(std430, binding = 13) buffer Overflow { uint w[]; } overflow;
#else
layout(std430, binding = 13) writeonly buffer Overflow { uint w[]; } overflow;
#endif

RSSM_DEFINE_LOADS(ckpt, ckpt)
RSSM_DEFINE_STORES(ckpt, ckpt)
RSSM_DEFINE_LOADS(rd, ring_d)
RSSM_DEFINE_STORES(rd, ring_d)
RSSM_DEFINE_LOADS(rk, ring_k)
RSSM_DEFINE_STORES(rk, ring_k)
RSSM_DEFINE_LOADS(qin, qbuf)
RSSM_DEFINE_LOADS(kin, kbuf)
RSSM_DEFINE_LOADS(vin, vbuf)
RSSM_DEFINE_LOADS(gatein, gatebuf)
RSSM_DEFINE_LOADS(betain, betabuf)

// Four channels of a state row (element i % 4 == 0 from word `base`, a
// multiple of 4) in one 16-byte (fp32) or 8-byte (bf16) access.
vec4 state_load4(uint base, uint i)
{
    if (STATE_DT == RSSM_CODE_DTYPE_F32)
        return uintBitsToFloat(ckpt4.w[(base + i) >> 2]);
    uvec2 w = ckpt2.w[(base + (i >> 1)) >> 1];
    return vec4(rssm_bf16_to_f32(w.x & 0xffffu), rssm_bf16_to_f32(w.x >> 16),
                rssm_bf16_to_f32(w.y & 0xffffu), rssm_bf16_to_f32(w.y >> 16));
}

// A block's rows as the registers hold them (STATE_WORDS, one per channel
// quad), loaded in one access each and widened to fp32 where used: an
// `_s16` module keeps the bf16 words, the others the fp32 values.
#if RSSM_STATE16
#define STATE_WORDS uvec2
STATE_WORDS state_words_load(uint base, uint i) { return ckpt2.w[(base + (i >> 1)) >> 1]; }
vec4 state_words_f32(STATE_WORDS w)
{
    return vec4(rssm_bf16_to_f32(w.x & 0xffffu), rssm_bf16_to_f32(w.x >> 16),
                rssm_bf16_to_f32(w.y & 0xffffu), rssm_bf16_to_f32(w.y >> 16));
}
#else
#define STATE_WORDS vec4
STATE_WORDS state_words_load(uint base, uint i) { return state_load4(base, i); }
vec4 state_words_f32(STATE_WORDS w) { return w; }
#endif

void state_store4(uint base, uint i, vec4 x)
{
    if (STATE_DT == RSSM_CODE_DTYPE_F32) {
        ckpt4.w[(base + i) >> 2] = floatBitsToUint(x);
    } else {
        ckpt2.w[(base + (i >> 1)) >> 1] = uvec2(rssm_f32_to_bf16(x.x) | (rssm_f32_to_bf16(x.y) << 16),
                                                rssm_f32_to_bf16(x.z) | (rssm_f32_to_bf16(x.w) << 16));
    }
}

// Written in pairs only (writeonly: no loads); i even, counted from word `base`.
void out_store2(uint base, uint i, vec2 x)
{
    if (IO_DT == RSSM_CODE_DTYPE_F32) {
        outbuf.w[base + i] = floatBitsToUint(x.x);
        outbuf.w[base + i + 1u] = floatBitsToUint(x.y);
    } else {
        outbuf.w[base + (i >> 1)] = rssm_to16(IO_DT, x.x) | (rssm_to16(IO_DT, x.y) << 16);
    }
}

// A dot product in a fixed order: the packed and replay modules must round
// identically (L = 1 is bit-identical to packed).
float dot4(vec4 a, vec4 b)
{
    precise float r = a.x * b.x;
    r += a.y * b.y;
    r += a.z * b.z;
    r += a.w * b.w;
    return r;
}

// Per-channel vectors, in channel quads: every access is one vec4.
// Channel quads of the head (KQ), and of the arrays that hold them.
const uint KQ_ROOM = K_ROOM / 4u;
#if RSSM_RUNTIME_SHAPE
#define KQ (HEAD_K / 4u)
#else
const uint KQ = KQ_ROOM;
#endif
#if !RSSM_WINDOW // the window's shared memory is its own (shaders/window.glsl)
shared vec4 s_q4[KQ_ROOM];   // normalised, scaled q
shared vec4 s_k4[KQ_ROOM];   // normalised k (unscaled: what the ring stores)
shared vec4 s_g4[KQ_ROOM];   // this step's log-decay (KDA)
shared vec4 s_ag4[KQ_ROOM];  // alpha * Gamma
shared vec4 s_wq4[KQ_ROOM];  // alpha * Gamma * q: the checkpoint's readout weights
shared vec4 s_wk4[KQ_ROOM];  // alpha * Gamma * k
shared float s_v[V_ROOM];   // v, loaded with q and k
shared float s_d[V_ROOM];   // d, full precision
shared float s_o[V_ROOM];
shared vec4 s_red[SG_COUNT];
#endif
// An array that only a pipeline with flush rows uses: one element elsewhere
// ((FLUSH_ROWS + 1) >> 1 is 0 for RSSM_VK_ROWS_READ_ONLY, 1 for the others).
#define FLUSH_ONLY(n) (1u + ((n) - 1u) * ((FLUSH_ROWS + 1u) >> 1u))

#if RSSM_REPLAY
#if !RSSM_WINDOW
shared vec2 s_c[RING_ROOM];  // (c_j(q), c_j(k)): shared by all V rows
// KK_j of a `_cm` flush, for its tile staging (entry j's quad q at
// j * KQ + q; kr4_put). The emulated-tile flush pipeline keeps it
// in the staging s_kx itself: it has no room for more within lavapipe's
// 32 KiB.
#if RSSM_TILES == 2
#define KR_IN_KX HAS_FLUSH_ROWS
shared vec4 s_kr4[1];
#else
#define KR_IN_KX false
shared vec4 s_kr4[RSSM_TILES == 1 ? FLUSH_ONLY(RING_ROOM * KQ_ROOM) : 1u];
#endif
#endif // !RSSM_WINDOW
// The portable flush keeps KK_j of its lane's channel quads in registers
// (kk_r): a lane holds the same quads of every row it updates.
#define KK_IN_REGS (RSSM_TILES == 0 && HAS_FLUSH_ROWS)
// Ring entries per subgroup in the coefficient pass, and ring entries a lane
// of a row's subgroup reads (entry lane + i * SG_SIZE); with their array
// extents, never 0 (L = 1; RING_LANES_ROOM: the window's, which has a
// ring). In an `_rt` module the counts are run-time loop bounds and the
// extents follow RING_ROOM.
#if RSSM_RUNTIME_SHAPE
const uint RING_SLOTS = RING_ROOM;
#define ENTRY_ITERS ((RING_CAP + SG_COUNT - 1u) / SG_COUNT)
const uint ENTRY_SLOTS = (RING_ROOM - 1u + SG_COUNT - 1u) / SG_COUNT + 1u;
#define RING_LANES ((RING_CAP + SG_SIZE - 1u) / SG_SIZE)
const uint RING_LANES_ROOM = (RING_ROOM - 1u + SG_SIZE - 1u) / SG_SIZE;
#else
const uint RING_SLOTS = RING_CAP + 1u;
const uint ENTRY_ITERS = (RING_CAP + SG_COUNT - 1u) / SG_COUNT;
const uint ENTRY_SLOTS = ENTRY_ITERS + 1u;
const uint RING_LANES = (RING_CAP + SG_SIZE - 1u) / SG_SIZE;
const uint RING_LANES_ROOM = RING_LANES;
#endif
// Ring entry j's d[v], read from the pool where it is used: the readout
// reads each value once (one lane per entry); a flush's row update takes
// it from that lane by shuffle (entries past the subgroup's size: read
// again).
#define RING_D(j, v) rd_load(RING_DT, rd_base, rd_elem + (j) * V + (v))
// The same for the four rows from v (v % 4 == 0: an even element, so a
// 16-bit ring's pairs are whole words).
#define RING_D4(j, v) rd_load4(RING_DT, rd_base, rd_elem + (j) * V + (v))
#endif

#if RSSM_TILES != 0
#include "tile.glsl"
// Padded extents of the flush product: rows V, inner n+1 (at most L), cols K.
// (The arrays' extents from the rooms; the strides and loops the head's.)
const uint PAD_J = (RING_ROOM + TILE_K - 1u) / TILE_K * TILE_K;
#if RSSM_RUNTIME_SHAPE
#define PAD_V ((HEAD_V + TILE_M - 1u) / TILE_M * TILE_M)
#define PAD_K ((HEAD_K + TILE_N - 1u) / TILE_N * TILE_N)
#else
const uint PAD_V = (HEAD_V + TILE_M - 1u) / TILE_M * TILE_M;
const uint PAD_K = (HEAD_K + TILE_N - 1u) / TILE_N * TILE_N;
#endif
const uint PAD_V_ROOM = (V_ROOM + TILE_M - 1u) / TILE_M * TILE_M;
const uint PAD_K_ROOM = (K_ROOM + TILE_N - 1u) / TILE_N * TILE_N;
shared TILE_AB_T s_dx[FLUSH_ONLY(PAD_V_ROOM * PAD_J)];  // [V][j]: d_0..d_{n-1}, zeros
shared TILE_AB_T s_kx[FLUSH_ONLY(PAD_J * PAD_K_ROOM)];  // [j][K]: KK_0..KK_{n-1}, zeros
#if RSSM_TILES == 1
const uint TILE_SCRATCH = TILE_M * TILE_N;
#else
// The emulation keeps KK in fp32 in s_kx itself and rounds on tile load.
const uint TILE_SCRATCH = TILE_M * TILE_K + TILE_K * TILE_N;  // >= TILE_M*TILE_N
#endif
shared float s_tile[FLUSH_ONLY(SG_COUNT * TILE_SCRATCH)];
#endif

#if RSSM_REPLAY && !RSSM_WINDOW
// KK_j[c] = k_j[c] gamma_j[c] alpha[c] (fp32) for a `_cm` flush's tiles.
void kr4_put(uint j, uint q, vec4 x)
{
#if RSSM_TILES == 2
    if (KR_IN_KX) {
        s_kx[j * PAD_K + 4u * q] = x.x;
        s_kx[j * PAD_K + 4u * q + 1u] = x.y;
        s_kx[j * PAD_K + 4u * q + 2u] = x.z;
        s_kx[j * PAD_K + 4u * q + 3u] = x.w;
        return;
    }
#endif
    s_kr4[j * KQ + q] = x;
}
#endif

#if !RSSM_WINDOW
// Sums a vec4 over the workgroup; every invocation gets the total. Also a
// full barrier for shared memory written before it.
vec4 workgroup_sum(vec4 x)
{
    x = subgroupAdd(x);
    if (subgroupElect())
        s_red[gl_SubgroupID] = x;
    barrier();
    vec4 t = vec4(0.0);
    for (uint i = 0u; i < SG_COUNT; i++)
        t += s_red[i];
    barrier();
    return t;
}
#endif

// The totals over the subgroup of a block's eight partial sums (ROW_BLOCK
// rows' checkpoint readouts of q and of k), in every invocation. A vec4
// subgroupAdd costs four shuffles per halving of the subgroup, 40 for the
// pair; here a reduce-scatter (each step a lane keeps half of its values
// and adds its partner's sums of them: 4, 2, then 1 shuffle, then the
// plain halvings of the one value left) and a broadcast of each total, 17
// for a subgroup of 32: a few percent of a step on an H200, most in bf16
// state (docs/design.md §8; they are a part of each workgroup's chain, not
// what bounds it). One fixed order for
// the packed, replay and window kernels alike, so L = 1 stays bit-identical
// to packed and a one-token window to a step.
void subgroup_sum_rows(inout vec4 a, inout vec4 b)
{
    if (SG_SIZE < 8u) { // a narrow subgroup: too few lanes to scatter eight sums over
        a = subgroupAdd(a);
        b = subgroupAdd(b);
        return;
    }
    const uint O1 = SG_SIZE / 2u, O2 = SG_SIZE / 4u, O3 = SG_SIZE / 8u;
    const uint lane = gl_SubgroupInvocationID;
    const bool h1 = (lane & O1) != 0u, h2 = (lane & O2) != 0u, h3 = (lane & O3) != 0u;
    precise vec4 x4 = h1 ? b : a;
    x4 += subgroupShuffleXor(h1 ? a : b, O1);
    precise vec2 x2 = h2 ? x4.zw : x4.xy;
    x2 += subgroupShuffleXor(h2 ? x4.xy : x4.zw, O2);
    precise float x = h3 ? x2.y : x2.x;
    x += subgroupShuffleXor(h3 ? x2.x : x2.y, O3);
    [[unroll]] for (uint o = O3 / 2u; o > 0u; o >>= 1u)
        x += subgroupShuffleXor(x, o);
    // The lane whose index has bits (O1, O2, O3) = (i >> 2, i >> 1, i) & 1
    // holds total i: a's four, then b's.
    a = vec4(subgroupShuffle(x, 0u), subgroupShuffle(x, O3), subgroupShuffle(x, O2), subgroupShuffle(x, O2 + O3));
    b = vec4(subgroupShuffle(x, O1), subgroupShuffle(x, O1 + O3), subgroupShuffle(x, O1 + O2),
             subgroupShuffle(x, O1 + O2 + O3));
}

float sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }

// log(1 + x) without losing x when it is tiny (GLSL has no log1p).
float log1p_(float x)
{
    float u = 1.0 + x;
    return u == 1.0 ? x : log(u) * (x / (u - 1.0));
}

// The log-decay from the gate input `a` (PRECOMPUTED: a is g); A_log and
// dt_bias at the given indices are read only by the RAW modes (a layer
// without them binds none).
float gate_g(uint mode, float a, uint alog_i, uint bias_i)
{
    if (mode == RSSM_CODE_MODE_PRECOMPUTED)
        return a;
    const float alog = a_log.w[pc.base_alog + alog_i];
    float x = a + dt_bias.w[pc.base_dtb + bias_i];
    if (mode == RSSM_CODE_MODE_RAW)
        return -exp(alog) * (x > RSSM_SOFTPLUS_THRESHOLD ? x : log1p_(exp(x)));
    return pc.gate_lower_bound * sigmoid(exp(alog) * x);
}

// Loads the block of ROW_BLOCK consecutive rows from V0 into CUR (zeros
// past this workgroup's rows, which end on a block boundary: V % 4 == 0)
// and, in the flush pipeline, RD = d_j[V0..] of the ring entry j = lane
// (zero where there is none), one load for the block's rows: every load of
// a block is issued before any of it is used, so they are all in flight at
// once.
#if RSSM_REPLAY
#define RSSM_LOAD_RING_D(RD, V0)                                                   \
    RD = vec4(0.0);                                                                \
    if (HAS_FLUSH_ROWS && (V0) < v_end && lane < n)                                \
        RD = RING_D4(lane, V0);
#else
#define RSSM_LOAD_RING_D(RD, V0) RD = vec4(0.0);
#endif
#define RSSM_LOAD_BLOCK(CUR, RD, V0)                                               \
    [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r++) {                                        \
        const uint v = (V0) + r;                                                   \
        [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {                                    \
            const uint cq = lane + i * SG_SIZE;                                    \
            CUR[r * ROW_QUADS + i] = STATE_WORDS(0);                               \
            if (v < v_end && cq < KQ)                                              \
                CUR[r * ROW_QUADS + i] = state_words_load(c_base, c_elem + v * K + 4u * cq); \
        }                                                                          \
    }                                                                              \
    RSSM_LOAD_RING_D(RD, V0)

// The readout of the block in CUR, RD: Sbar_q, Sbar_k, then d and o into
// s_d, s_o; leaves d[r] in scope. No loop in here may have a run-time trip
// count: the row and quad loops must unroll so pq, d and the block stay in
// registers (an indexed array is a memory round trip per element on a CPU
// device, where a subgroup is one SIMD register).
// The ring's share of the block's readout, sum_j d_j[v] c_j, one entry per
// lane, the block's rows of an entry in one load (read where they are used
// but in the flush pipeline, whose RD holds entry `lane`'s), joins each
// row's partial sums after its checkpoint part, before the one reduction.
#if RSSM_REPLAY
#define RSSM_READOUT_RING(RD)                                                      \
    [[unroll]] for (uint jb = 0u; jb < RING_LANES; jb++) {                                    \
        const uint j = lane + jb * SG_SIZE;                                        \
        [[unroll]] for (uint rq = 0u; rq < ROW_BLOCK / 4u; rq++) {                 \
            const uint vq = v0 + 4u * rq;                                          \
            if (vq < v_end && j < n) {                                             \
                const vec4 dj = HAS_FLUSH_ROWS && jb == 0u ? RD : RING_D4(j, vq);  \
                const vec2 cj = s_c[j];                                            \
                [[unroll]] for (uint r = 0u; r < 4u; r++) {                        \
                    pq[4u * rq + r] += dj[r] * cj.x;                               \
                    pk[4u * rq + r] += dj[r] * cj.y;                               \
                }                                                                  \
            }                                                                      \
        }                                                                          \
    }
#else
#define RSSM_READOUT_RING(RD)
#endif
#define RSSM_READOUT_BLOCK(CUR, RD)                                                \
    precise float pq[ROW_BLOCK], pk[ROW_BLOCK];                                    \
    [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r++) {                                        \
        const uint v = v0 + r;                                                     \
        pq[r] = 0.0;                                                               \
        pk[r] = 0.0;                                                               \
        [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {                                    \
            const uint cq = lane + i * SG_SIZE;                                    \
            if (v < v_end && cq < KQ) {                                            \
                const vec4 cv = state_words_f32(CUR[r * ROW_QUADS + i]);           \
                const vec4 wq = wq_r[i], wk = wk_r[i];                             \
                pq[r] += cv.x * wq.x;                                              \
                pq[r] += cv.y * wq.y;                                              \
                pq[r] += cv.z * wq.z;                                              \
                pq[r] += cv.w * wq.w;                                              \
                pk[r] += cv.x * wk.x;                                              \
                pk[r] += cv.y * wk.y;                                              \
                pk[r] += cv.z * wk.z;                                              \
                pk[r] += cv.w * wk.w;                                              \
            }                                                                      \
        }                                                                          \
    }                                                                              \
    RSSM_READOUT_RING(RD)                                                          \
    float d[ROW_BLOCK];                                                            \
    [[unroll]] for (uint rq = 0u; rq < ROW_BLOCK / 4u; rq++) {                     \
        precise vec4 sq = vec4(pq[4u * rq], pq[4u * rq + 1u], pq[4u * rq + 2u], pq[4u * rq + 3u]); \
        precise vec4 sk = vec4(pk[4u * rq], pk[4u * rq + 1u], pk[4u * rq + 2u], pk[4u * rq + 3u]); \
        subgroup_sum_rows(sq, sk);                                                 \
        [[unroll]] for (uint r4 = 0u; r4 < 4u; r4++) {                             \
            const uint r = 4u * rq + r4, v = v0 + r;                               \
            d[r] = 0.0;                                                            \
            if (v < v_end) {                                                       \
                precise const float dv = beta * (s_v[v] - sk[r4]);                 \
                precise const float o = sq[r4] + dv * kq;                          \
                d[r] = dv;                                                         \
                if (subgroupElect()) {                                             \
                    s_d[v] = dv;                                                   \
                    s_o[v] = o;                                                    \
                }                                                                  \
            }                                                                      \
        }                                                                          \
    }

// exp of a walk's log-decay sums: GDN's four channels hold one sum, so one
// exp serves them (the same bits as four).
vec4 decay4(vec4 s)
{
    return GATE_KIND == RSSM_CODE_GATE_KDA ? exp(s) : vec4(exp(s.x));
}

// One entry j of the coefficient pass's walk (below), newest first.
#define RSSM_WALK_ENTRY(j)                                                         \
    if (j < n) {                                                                   \
        const float g_one = kda ? 0.0 : uintBitsToFloat(ring_g.w[rg_base + rg_elem + j]); \
        [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {                         \
            const uint cq = lane + i * SG_SIZE;                                    \
            if (cq < KQ) {                                                         \
                precise const vec4 s = s_r[i];                                     \
                if (KK_IN_REGS && flush) {                                         \
                    const vec4 kk = rk_load4(RING_DT, rk_base, rk_elem + (j) * K + 4u * cq) * \
                                    (decay4(s) * alpha_r[i]);                      \
                    kk_r[(j) * ROW_QUADS + i] = kk;                                \
                    if (j % SG_COUNT == sg)                                        \
                        cj_r[j / SG_COUNT] += vec2(dot4(kk, s_q4[cq]), dot4(kk, s_k4[cq])); \
                } else if (j % SG_COUNT == sg) {                                   \
                    const vec4 kk = kj_r[(j / SG_COUNT) * ROW_QUADS + i] * (decay4(s) * alpha_r[i]); \
                    if (RSSM_TILES != 0 && HAS_FLUSH_ROWS)                         \
                        kr4_put(j, cq, kk);                                        \
                    cj_r[j / SG_COUNT] += vec2(dot4(kk, s_q4[cq]), dot4(kk, s_k4[cq])); \
                }                                                                  \
                s_r[i] = s + (kda ? uintBitsToFloat(ring_g4.w[(rg_base + rg_elem + (j) * K + 4u * cq) >> 2]) \
                                  : vec4(g_one));                                  \
            }                                                                      \
        }                                                                          \
    }

// Ring entry j's share of a flush's row update of the block in cur:
// C'[v] += d_j[v] KK_j, d_j[v] from the lane that loaded it for the readout.
#define RSSM_FLUSH_ENTRY(j)                                                        \
    {                                                                              \
        vec4 dj;                                                                   \
        if (j < SG_SIZE)                                                           \
            dj = subgroupShuffle(rd, j); /* zero past the rows */                  \
        else                                                                       \
            dj = v0 < v_end ? RING_D4(j, v0) : vec4(0.0);                          \
        [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {                         \
            const vec4 kk = kk_r[(j) * ROW_QUADS + i];                             \
            [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r++) {                     \
                precise vec4 acc = cur[r * ROW_QUADS + i];                         \
                acc += dj[r] * kk;                                                 \
                cur[r * ROW_QUADS + i] = acc;                                      \
            }                                                                      \
        }                                                                          \
    }

#if RSSM_WINDOW
#include "window.glsl"
#else
void main()
{
    const uint hv = gl_WorkGroupID.x / ROW_SPLIT, part = gl_WorkGroupID.x % ROW_SPLIT;
    const uint row = gl_WorkGroupID.y, layer = gl_WorkGroupID.z;
    const uint t = gl_LocalInvocationIndex, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    // The row's words are read with the row count, not after it (a step
    // header holds max_rows rows, one per workgroup row; a layer's dispatch
    // has as many workgroup rows as rows): one memory round trip less
    // before the state loads can go out.
    const uint rw = row * pc.row_stride;
    const uint rows = pc.rows != RSSM_VK_NONE ? pc.rows : row_slot.w[pc.rows_word];
    const uint slot = row_slot.w[pc.base_slot + rw], write_pos = row_pos.w[pc.base_wpos + rw];
    const uint force = pc.base_force != RSSM_VK_NONE ? row_force.w[pc.base_force + rw] : 0u;
    // min(): a corrupt header must not index past the step arrays.
    const uint io_row = pc.base_io != RSSM_VK_NONE ? min(row_io.w[pc.base_io + rw], pc.layer_rows - 1u) : row;
    if (row >= rows)
        return; // idle row: uniform for the whole workgroup
    const uint HV = NUM_V_HEADS, H = NUM_QK_HEADS, K = HEAD_K, V = HEAD_V;
    const uint v_begin = part * (V / ROW_SPLIT), v_end = v_begin + V / ROW_SPLIT; // this workgroup's rows
    const uint lr = layer * pc.layer_rows + io_row; // the row of the step arrays
    const uint o_elem = lr * pc.out_row + hv * V;
    // A padding row (slot out of range; a negative int32 index is a large
    // one): its output is zeroed, by one pipeline of a replay step, and no
    // slot is touched.
    if (RSSM_ROW_PADS(slot, pc.slots, pc.mode_flags >> 8u)) {
        if (RING_LEN == 1u || FLUSH_ROWS != RSSM_VK_ROWS_FLUSH)
            for (uint p = v_begin + t * 2u; p < v_end; p += WG_SIZE * 2u)
                out_store2(pc.base_out, o_elem + p, vec2(0.0));
        return;
    }
#if RSSM_REPLAY
    // min(): a corrupt header must not send the kernel outside the ring.
    const uint n = min(write_pos, RING_CAP);
    const bool flush = RSSM_ROW_FLUSHES(n, RING_CAP, force);
    if (FLUSH_ROWS != RSSM_VK_ROWS_ALL && flush != HAS_FLUSH_ROWS)
        return; // the other pipeline's row: uniform for the whole workgroup
#else
    const uint n = 0u;
    const bool flush = true;
#endif
    // The `_cm` kernels take the flush through tiles when the update has rank
    // > 1; a rank-1 flush (empty ring: L = 1, or forced right after a flush)
    // is the packed update, done row by row exactly as the packed kernel
    // does, so L = 1 stays bit-identical to packed in every variant. The
    // tiles cover all V rows: a tile module's flush pipeline has ROW_SPLIT 1.
    const bool tile_flush = RSSM_TILES != 0 && flush && n > 0u;
    const uint h = hv / (HV / H);
    const bool kda = GATE_KIND == RSSM_CODE_GATE_KDA;
    const uint mode = pc.mode_flags & 0xffu, flags = pc.mode_flags >> 8u;
    const uint gate_dt = (flags & RSSM_FLAG_GATE_BF16) != 0u ? RSSM_CODE_DTYPE_BF16 : RSSM_CODE_DTYPE_F32;

    // Where this head is: the element of binding 0 (a pool's buffer of the
    // slot, or the tensor's own), the word its layer starts at, and the
    // head's first element, all under 2^32 (the host keeps a binding within
    // maxStorageBufferRange). min(): a corrupt header must not index past
    // the array.
    const bool own = SLOTS_PER_BUFFER == 0u;
    const uint sbuf = own ? 0u : min(slot / SLOTS_PER_BUFFER, RSSM_VK_POOL_BUFFERS - 1u);
    const uint sib = own ? slot : slot % SLOTS_PER_BUFFER; // the slot within its buffer
    g_c = sbuf;
    g_rd = own ? 1u : sbuf;
    g_rk = own ? 2u : sbuf;
    g_rg = own ? 3u : sbuf;
    const uint lw = layer * LAYER_WORDS;
    const uint c_base = pc.base_c + lw, c_elem = sib * CK_SLOT + hv * CK_HEAD;     // C [V][K]
    const uint rd_base = pc.base_rd + lw, rd_elem = sib * RD_SLOT + hv * RD_HEAD;  // d [cap][V]
    const uint rk_base = pc.base_rk + lw, rk_elem = sib * RK_SLOT + h * RK_HEAD;   // k [cap][K]
    const uint rg_base = pc.base_rg + lw, rg_elem = sib * RG_SLOT + hv * RG_HEAD;  // g [cap] or [cap][K]
    const uint q_elem = lr * pc.q_row + h * K, k_elem = lr * pc.k_row + h * K;
    const uint v_elem = lr * pc.v_row + hv * V;
    const uint g_index = lr * pc.gate_row + (kda ? hv * K : hv);

    // ---- 0. what depends only on the header, loaded first ------------------
    // This subgroup's first block of state rows, and the ring staged in
    // shared memory: their memory latency then overlaps the per-channel
    // work instead of following it (a chain of round trips per workgroup is
    // what held the replay behind packed on a GPU, docs/design.md §8).
    STATE_WORDS cur[ROW_BLOCK * ROW_QUADS];
    vec4 rd;
    RSSM_LOAD_BLOCK(cur, rd, v_begin + sg * ROW_BLOCK)
#if RSSM_REPLAY
    // k_j of the entries this subgroup takes in the coefficient pass.
    vec4 kj_r[ENTRY_SLOTS * ROW_QUADS];
    [[unroll]] for (uint e = 0u; e < ENTRY_ITERS; e++)
        [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
            const uint j = sg + e * SG_COUNT, cq = lane + i * SG_SIZE;
            kj_r[e * ROW_QUADS + i] = vec4(0.0);
            if (j < n && cq < KQ)
                kj_r[e * ROW_QUADS + i] = rk_load4(RING_DT, rk_base, rk_elem + j * K + 4u * cq);
        }
#endif

    // ---- 1. q, k, gate, beta ------------------------------------------------
    vec4 part_sums = vec4(0.0);
    for (uint cq = t; cq < KQ; cq += WG_SIZE) {
        const vec4 q4 = qin_load4(IO_DT, pc.base_q, q_elem + 4u * cq);
        const vec4 k4 = kin_load4(IO_DT, pc.base_k, k_elem + 4u * cq);
        s_q4[cq] = q4;
        s_k4[cq] = k4;
        part_sums += vec4(dot4(q4, q4), dot4(k4, k4), dot4(q4, k4), 0.0);
    }
    // v with q and k, not row by row in the readout, where each block of
    // rows would wait for its own load.
    for (uint p = v_begin + t; p < v_end; p += WG_SIZE)
        s_v[p] = vin_load(IO_DT, pc.base_v, v_elem + p);
    const vec4 sums = workgroup_sum(part_sums); // also the barrier after the staging
    const bool l2 = (flags & RSSM_FLAG_QK_L2NORM) != 0u;
    const float rq = l2 ? 1.0 / sqrt(sums.x + RSSM_L2NORM_EPS) : 1.0;
    const float rk = l2 ? 1.0 / sqrt(sums.y + RSSM_L2NORM_EPS) : 1.0;
    const float qs = rq * pc.q_scale;
    precise const float kq = sums.z * qs * rk; // (k . q) of the normalised, scaled vectors

    float beta = betain_load(gate_dt, pc.base_beta, lr * pc.beta_row + hv);
    if (mode != RSSM_CODE_MODE_PRECOMPUTED)
        beta = sigmoid(beta);
    // GDN: one decay; every invocation computes it.
    const uint ah = layer * HV + hv; // A_log [layers][HV], dt_bias [layers][HV] or [layers][HV][K]
    const float g_head = kda ? 0.0 : gate_g(mode, gatein_load(gate_dt, pc.base_gate, g_index), ah, ah);

    // Per channel quad: normalise, this step's decay alpha, and with a ring
    // KK_j = k_j gamma_j alpha in place of k_j, gamma_j = exp(gsum_j),
    // gsum_j = sum of g_i over j < i < n, summed from the newest entry back
    // in fp32 (docs/design.md §1), and alpha Gamma, Gamma = exp(the whole
    // sum); then the checkpoint's readout weights alpha Gamma x.
    for (uint cq = t; cq < KQ; cq += WG_SIZE) {
        const uint c = 4u * cq;
        const vec4 qn = s_q4[cq] * qs, kn = s_k4[cq] * rk;
        s_q4[cq] = qn;
        s_k4[cq] = kn;
        vec4 g = vec4(g_head);
        if (kda) {
            const uint bias = ah * K + c;
            g = vec4(gate_g(mode, gatein_load(gate_dt, pc.base_gate, g_index + c), ah, bias),
                     gate_g(mode, gatein_load(gate_dt, pc.base_gate, g_index + c + 1u), ah, bias + 1u),
                     gate_g(mode, gatein_load(gate_dt, pc.base_gate, g_index + c + 2u), ah, bias + 2u),
                     gate_g(mode, gatein_load(gate_dt, pc.base_gate, g_index + c + 3u), ah, bias + 3u));
            s_g4[cq] = g;
        }
        // With an empty ring alpha Gamma is alpha (Gamma = 1); else it comes
        // with the ring coefficients.
        if (n == 0u) {
            const vec4 ag = exp(g);
            s_ag4[cq] = ag;
            s_wq4[cq] = ag * qn;
            s_wk4[cq] = ag * kn;
        }
    }
#if RSSM_REPLAY
    vec4 kk_r[RING_SLOTS * ROW_QUADS]; // KK_IN_REGS
    if (n > 0u) {
        barrier();
        // The ring coefficients: every subgroup walks the whole ring from the
        // newest entry back, its lanes over the channel quads, summing
        // gsum_j = sum of g_i over j < i < n in fp32 (docs/design.md §1) with
        // g_j loaded as it goes (the loads do not depend on each other). For
        // its own entries (j % SG_COUNT == its index) it forms
        // KK_j = k_j gamma_j alpha, gamma_j = exp(gsum_j), and reduces
        // c_j(x) = KK_j . x for x in {q, k}; a portable flush forms KK_j of
        // every entry, for its lane's quads, into kk_r (k_j read as it goes),
        // a `_cm` flush keeps its own in shared memory for the tiles.
        // Subgroup 0 ends with the whole sum: Gamma, for the checkpoint's
        // readout weights alpha Gamma x.
        vec4 alpha_r[ROW_QUADS], s_r[ROW_QUADS];
        vec2 cj_r[ENTRY_SLOTS];
        [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
            const uint cq = min(lane + i * SG_SIZE, KQ - 1u);
            alpha_r[i] = exp(kda ? s_g4[cq] : vec4(g_head));
            s_r[i] = vec4(0.0);
        }
        [[unroll]] for (uint e = 0u; e < ENTRY_ITERS; e++)
            cj_r[e] = vec2(0.0);
        if (UNROLL_RING != 0u) {
            [[unroll]] for (uint jj = 0u; jj < RING_CAP; jj++) {
                const uint j = RING_CAP - 1u - jj;
                RSSM_WALK_ENTRY(j)
            }
        } else {
            for (uint j = n; j-- > 0u;) {
                RSSM_WALK_ENTRY(j)
            }
        }
        [[unroll]] for (uint e = 0u; e < ENTRY_ITERS; e++) {
            const uint j = sg + e * SG_COUNT;
            if (j < n) {
                const vec2 cj = subgroupAdd(cj_r[e]);
                if (subgroupElect())
                    s_c[j] = cj;
            }
        }
        if (sg == 0u)
            [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
                const uint cq = lane + i * SG_SIZE;
                if (cq < KQ) {
                    const vec4 ag = alpha_r[i] * exp(s_r[i]);
                    s_ag4[cq] = ag;
                    s_wq4[cq] = ag * s_q4[cq];
                    s_wk4[cq] = ag * s_k4[cq];
                }
            }
    }
#endif
    barrier();

    // ---- 2. readout (and the row-wise flush), ROW_BLOCK rows at a time -------
    // A subgroup takes rows v0, v0 + SG_COUNT, ... of its block together, so
    // one reduction serves ROW_BLOCK rows. Each row's sums are formed in the
    // same order as one at a time would.
    // This invocation's channel quads of the per-channel vectors, in
    // registers for all its rows.
    vec4 wq_r[ROW_QUADS], wk_r[ROW_QUADS], ag_r[ROW_QUADS], k_r[ROW_QUADS];
    [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
        const uint cq = min(lane + i * SG_SIZE, KQ - 1u);
        wq_r[i] = s_wq4[cq];
        wk_r[i] = s_wk4[cq];
        ag_r[i] = s_ag4[cq];
        k_r[i] = s_k4[cq];
    }
    for (uint v0 = v_begin + sg * ROW_BLOCK; v0 < v_end; v0 += ROWS_PER_PASS) {
        STATE_WORDS nxt[ROW_BLOCK * ROW_QUADS];
        vec4 nrd;
        if (PREFETCH != 0u) {
            RSSM_LOAD_BLOCK(nxt, nrd, v0 + ROWS_PER_PASS)
        }
        if (flush && !tile_flush) {
            RSSM_READOUT_BLOCK(cur, rd)
#if RSSM_STATE16
            // Packed only (a replay `_s16` pipeline has no flush rows):
            // C'[v] = C[v]*alpha + d k, the same operations in the same order
            // as the fp32 registers' update below.
            [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r++) {
                const uint v = v0 + r;
                [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
                    const uint cq = lane + i * SG_SIZE;
                    if (v < v_end && cq < KQ) {
                        precise vec4 acc = state_words_f32(cur[r * ROW_QUADS + i]) * ag_r[i];
                        acc += d[r] * k_r[i];
                        state_store4(c_base, c_elem + v * K + 4u * cq, acc);
                    }
                }
            }
#else
            // C'[v] = C[v]*alpha*Gamma + sum_j d_j[v] KK_j + d k, in the
            // registers that hold the rows; each row is written once.
            [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r++)
                [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
                    precise const vec4 x = cur[r * ROW_QUADS + i] * ag_r[i];
                    cur[r * ROW_QUADS + i] = x;
                }
#if RSSM_REPLAY
            if (UNROLL_RING != 0u) {
                [[unroll]] for (uint j = 0u; j < RING_CAP; j++)
                    if (j < n)
                        RSSM_FLUSH_ENTRY(j)
            } else {
                for (uint j = 0u; j < n; j++)
                    RSSM_FLUSH_ENTRY(j)
            }
#endif
            [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r++) {
                const uint v = v0 + r;
                [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
                    const uint cq = lane + i * SG_SIZE;
                    if (v < v_end && cq < KQ) {
                        precise vec4 acc = cur[r * ROW_QUADS + i];
                        acc += d[r] * k_r[i];
                        state_store4(c_base, c_elem + v * K + 4u * cq, acc);
                    }
                }
            }
#endif
        } else {
            RSSM_READOUT_BLOCK(cur, rd)
        }
        if (PREFETCH != 0u) {
            [[unroll]] for (uint e = 0u; e < ROW_BLOCK * ROW_QUADS; e++)
                cur[e] = nxt[e];
            rd = nrd;
        } else {
            RSSM_LOAD_BLOCK(cur, rd, v0 + ROWS_PER_PASS)
        }
    }
    barrier();

#if RSSM_TILES != 0
    // ---- 2b. the flush as a matrix product, tile by tile --------------------
    // The tiles take the ring's n entries, whose d are already in the ring
    // dtype; this step's d k^T joins the accumulator in fp32, so a d that
    // the tile operand's dtype cannot hold (the re-run of a row whose append
    // overflowed, docs/design.md §2) is never rounded to it.
    if (tile_flush) {
        const uint jp = (n + TILE_K - 1u) / TILE_K * TILE_K; // inner extent used
        for (uint idx = t; idx < PAD_V * jp; idx += WG_SIZE) {
            const uint v = idx / jp, j = idx % jp;
            float x = 0.0;
            if (v < V && j < n)
                x = RING_D(j, v);
            s_dx[v * PAD_J + j] = TILE_AB_T(x);
        }
        for (uint idx = t; idx < jp * PAD_K; idx += WG_SIZE) {
            const uint j = idx / PAD_K, c = idx % PAD_K;
#if RSSM_TILES == 2
            if (j < n && c < K)
                continue; // KK_j is already in place (kr4_put)
#endif
            float x = 0.0;
            if (c < K && j < n)
                x = s_kr4[j * KQ + (c >> 2)][c & 3u];
            s_kx[j * PAD_K + c] = TILE_AB_T(x);
        }
        barrier();

        // Every subgroup runs the same number of rounds, a spare one on a
        // duplicate of the last tile without storing it: the subgroup
        // barriers then sit in workgroup-uniform control flow, which lavapipe
        // needs (it otherwise drops the rest of the shader).
        const uint tiles_k = PAD_K / TILE_N, tiles = (PAD_V / TILE_M) * tiles_k;
        const uint tile_scratch = sg * TILE_SCRATCH;
        for (uint round = 0u; round < tiles; round += SG_COUNT) {
            const bool storing = round + sg < tiles;
            const uint tile = min(round + sg, tiles - 1u);
            const uint v0 = (tile / tiles_k) * TILE_M, c0 = (tile % tiles_k) * TILE_N;
            // Accumulator starts as C * diag(alpha Gamma) + d k^T.
            for (uint e = lane; e < TILE_M * TILE_N; e += SG_SIZE) {
                const uint v = v0 + e / TILE_N, c = c0 + e % TILE_N;
                s_tile[tile_scratch + e] = (v < V && c < K)
                    ? ckpt_load(STATE_DT, c_base, c_elem + v * K + c) * s_ag4[c >> 2][c & 3u] + s_d[v] * s_k4[c >> 2][c & 3u]
                    : 0.0;
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            TILE_C_DECL(acc);
            tile_load_c(acc, s_tile, tile_scratch, TILE_N);
            for (uint j0 = 0u; j0 < jp; j0 += TILE_K) {
                TILE_A_DECL(a);
                TILE_B_DECL(b);
                tile_load_a(a, s_dx, v0 * PAD_J + j0, PAD_J);
                tile_load_b(b, s_kx, j0 * PAD_K + c0, PAD_K);
                tile_mul_add(acc, a, b);
            }
            subgroupBarrier();
            tile_store_c(acc, s_tile, tile_scratch, TILE_N);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane * 2u; e < TILE_M * TILE_N; e += SG_SIZE * 2u) {
                const uint v = v0 + e / TILE_N, c = c0 + e % TILE_N;
                if (storing && v < V && c < K)
                    ckpt_store2(STATE_DT, c_base, c_elem + v * K + c,
                                vec2(s_tile[tile_scratch + e], s_tile[tile_scratch + e + 1u]));
            }
            subgroupBarrier();
        }
    }
#endif

    // ---- 3. output, and the ring append -------------------------------------
    // Each workgroup its own rows; the head's k and g, once per head.
    for (uint p = v_begin + t * 2u; p < v_end; p += WG_SIZE * 2u)
        out_store2(pc.base_out, o_elem + p, vec2(s_o[p], s_o[p + 1u]));
#if RSSM_REPLAY
    if (!flush) {
        bool over = false;
        for (uint p = v_begin + t * 2u; p < v_end; p += WG_SIZE * 2u) {
            const vec2 dv = vec2(s_d[p], s_d[p + 1u]);
            rd_store2(RING_DT, rd_base, rd_elem + n * V + p, dv);
            over = over || ring_overflows(RING_DT, vec4(dv, 0.0, 0.0));
        }
        if (part == 0u && hv % (HV / H) == 0u)
            for (uint cq = t; cq < KQ; cq += WG_SIZE) {
                rk_store4(RING_DT, rk_base, rk_elem + n * K + 4u * cq, s_k4[cq]);
                over = over || ring_overflows(RING_DT, s_k4[cq]);
            }
        if (over && pc.base_over != RSSM_VK_NONE)
            overflow.w[pc.base_over + row] = 1u;
        if (part == 0u && kda) {
            for (uint cq = t; cq < KQ; cq += WG_SIZE)
                ring_g4.w[(rg_base + rg_elem + n * K + 4u * cq) >> 2] = floatBitsToUint(s_g4[cq]);
        } else if (part == 0u && t == 0u) {
            ring_g.w[rg_base + rg_elem + n] = floatBitsToUint(g_head);
        }
    }
#endif
}
#endif // RSSM_WINDOW
