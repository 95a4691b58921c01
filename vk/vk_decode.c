/* The decode and window pipelines of a batch's kernel parameters: which
 * module, how much shared memory, how many workgroups per value head, its
 * specialization (through the device's shared pipelines, vk_shared.c), and
 * their dispatch into a command buffer. */
#include "vk_internal.h"
#include "error.h"
#include "dtype.h"

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

bool vk_runs_packed(const rssm_kernel_params *p) { return p->ring_cap == 0; }

bool vk_uses_tiles(const vk_ctx *ctx, const rssm_kernel_params *p)
{
    return !vk_runs_packed(p) && ctx->kernels != VK_KERNELS_PORTABLE;
}

void vk_model_params(const rssm_model *m, rssm_kernel_params *p)
{
    rssm_slot_layout layout;
    rssm_slot_layout_init(&layout, m);
    rssm_kernel_params_init(p, m, &layout, 1);
}

/* The extents a pipeline's arrays are sized for (decode.comp's HEAD_K,
 * HEAD_V and RING_LEN specialization constants). */
typedef struct vk_extents {
    size_t k, v, ring;
} vk_extents;

/* One decode pipeline's shared memory, as decode.comp declares it for
 * arrays of extents `e` (FLUSH_ONLY arrays are one element in the pipeline
 * of the rows that do not flush). */
static size_t decode_bytes(const vk_ctx *ctx, const rssm_kernel_params *p, bool flush_rows, vk_extents e)
{
    const size_t K = e.k, V = e.v, L = e.ring;
    const size_t S = RSSM_VK_SUBGROUPS;
    size_t bytes = 6 * K * 4 + 3 * V * 4 + S * 16; /* s_q4 s_k4 s_g4 s_ag4 s_wq4 s_wk4, s_v s_d s_o, s_red */
    if (vk_runs_packed(p))
        return bytes;
    const bool coopmat_flush = flush_rows && ctx->kernels == VK_KERNELS_COOPMAT && vk_uses_tiles(ctx, p);
    bytes += L * 8;                          /* s_c */
    bytes += coopmat_flush ? L * K * 4 : 16; /* s_kr4: KK_j for the tile staging */
    if (!vk_uses_tiles(ctx, p) || !flush_rows)
        return bytes;
    const size_t tm = ctx->tile_m, tn = ctx->tile_n, tk = ctx->tile_k;
    const size_t pv = round_up(V, tm), pj = round_up(L, tk), pk = round_up(K, tn);
    if (ctx->kernels == VK_KERNELS_COOPMAT) /* fp16 staging, accumulator scratch */
        return bytes + pv * pj * 2 + pj * pk * 2 + S * tm * tn * 4;
    return bytes + pv * pj * 4 + pj * pk * 4 + S * (tm * tk + tk * tn) * 4;
}

/* The most tokens a window of a model whose ring has extent `ring` holds. */
static uint32_t window_tokens(size_t ring)
{
    return ring - 1 < RSSM_MAX_DRAFT ? (uint32_t)(ring - 1) : RSSM_MAX_DRAFT;
}

/* shaders/window.glsl's shared memory, as it declares it for extents `e`
 * and a token capacity of `tcap` (0: the most; its arrays are sized by K,
 * the ring and the tokens alone). */
static size_t window_bytes(const rssm_kernel_params *p, vk_extents e, uint32_t tcap)
{
    const size_t most = window_tokens(e.ring), T = tcap && tcap < most ? tcap : most, KQ = e.k / 4;
    const bool kda = p->gate_kind == RSSM_CODE_GATE_KDA;
    return 16 * T * KQ * 3 + 16 * (kda ? T * KQ : 1) + 8 * T * e.ring + 16 * T + 8 * T + 16 * T * RSSM_VK_SUBGROUPS;
}

/* The shared memory of a model's decode pipelines (window: its window's)
 * with arrays of extents `e`: the larger of the two a replay step has. */
static size_t shared_bytes(const vk_ctx *ctx, const rssm_kernel_params *p, bool window, vk_extents e)
{
    if (window)
        return window_bytes(p, e, 0);
    const size_t flush = decode_bytes(ctx, p, true, e), readout = decode_bytes(ctx, p, false, e);
    return flush > readout ? flush : readout;
}

/* The extents of a model's decode pipelines (window: its window's): its
 * own, or on a device that runs the `_rt` modules (a CPU device) the first
 * of RSSM_VK_ROOMS whose arrays fit the device's shared memory, each
 * extent that room's where the model's is within it, so that every model
 * within the rooms shares the pipelines. A model past every room (or too
 * large for them) has its own. */
static vk_extents extents(const vk_ctx *ctx, const rssm_kernel_params *p, bool window)
{
    const vk_extents own = {p->head_k, p->head_v, vk_runs_packed(p) ? 1 : p->ring_len};
    if (!ctx->runtime_shape)
        return own;
    static const uint32_t rooms[][3] = {RSSM_VK_ROOMS};
    for (size_t i = 0; i < sizeof rooms / sizeof rooms[0]; i++) {
        const vk_extents e = {
            own.k <= rooms[i][0] ? rooms[i][0] : own.k,
            own.v <= rooms[i][1] ? rooms[i][1] : own.v,
            own.ring == 1 || own.ring > rooms[i][2] ? own.ring : rooms[i][2],
        };
        if (shared_bytes(ctx, p, window, e) <= ctx->props.limits.maxComputeSharedMemorySize)
            return e;
    }
    return own;
}

size_t vk_shared_bytes(const vk_ctx *ctx, const rssm_kernel_params *p)
{
    return shared_bytes(ctx, p, false, extents(ctx, p, false));
}

/* Workgroups per value head (decode.comp's ROW_SPLIT): enough that a step
 * of max_rows rows has about VK_TARGET_WORKGROUPS of them, each at least
 * one pass of rows. The `_cm` flush's tiles span the whole head. A CPU
 * device (lavapipe) has no memory latency to hide this way: one, so that
 * its pipelines do not multiply with the batch sizes (each is a compile;
 * the tests cover the split through RSSM_VK_ROW_SPLIT). */
#define VK_TARGET_WORKGROUPS 2048u
#define VK_ONE_DISPATCH_WORKGROUPS 256u

uint32_t vk_row_split(const vk_ctx *ctx, const rssm_kernel_params *p, uint32_t max_rows, uint32_t rows,
                      uint32_t row_block)
{
    if (rows == RSSM_VK_ROWS_FLUSH && vk_uses_tiles(ctx, p))
        return 1;
    const uint32_t pass = RSSM_VK_SUBGROUPS * row_block, want = ctx->tune_row_split;
    if (!want && vk_cpu_device(ctx))
        return 1;
    const uint64_t groups = (uint64_t)p->num_v_heads * max_rows;
    uint32_t split = 1;
    while (p->head_v % (2 * split * pass) == 0 &&
           (want ? 2 * split <= want : groups * split < VK_TARGET_WORKGROUPS))
        split *= 2;
    return split;
}

/* The module of a decode pipeline of `rows` (RSSM_VK_ROWS_*). A bf16 state
 * on a GPU takes the `_s16` modules wherever no row's update needs its
 * block in fp32 registers: the packed step and the read-only rows. */
static const vk_spirv *module_for(const vk_ctx *ctx, const rssm_kernel_params *p, uint32_t rows)
{
    const bool rt = ctx->runtime_shape;
    const bool s16 = !rt && p->state_dtype == RSSM_CODE_DTYPE_BF16;
    if (vk_runs_packed(p))
        return rt ? &vk_spirv_decode_packed_rt : s16 ? &vk_spirv_decode_packed_s16 : &vk_spirv_decode_packed;
    if (s16 && rows == RSSM_VK_ROWS_READ_ONLY)
        return &vk_spirv_decode_replay_s16;
    if (!vk_uses_tiles(ctx, p))
        return rt ? &vk_spirv_decode_replay_rt : &vk_spirv_decode_replay;
    switch (ctx->kernels) {
    case VK_KERNELS_COOPMAT: return &vk_spirv_decode_replay_cm;
    case VK_KERNELS_COOPMAT_EMULATED: return rt ? &vk_spirv_decode_replay_cm_emu_rt : &vk_spirv_decode_replay_cm_emu;
    default: return rt ? &vk_spirv_decode_replay_rt : &vk_spirv_decode_replay;
    }
}

static uint32_t module_row_block(const vk_spirv *m)
{
    return m == &vk_spirv_decode_packed_s16 || m == &vk_spirv_decode_replay_s16 ? RSSM_VK_ROW_BLOCK_S16
                                                                                 : RSSM_VK_ROW_BLOCK;
}

void vk_shape_init(vk_shape *shape, const rssm_kernel_params *p, const rssm_layer_io *io, uint32_t slots_per_buffer,
                   uint32_t layer_words)
{
    const size_t ssz = rssm_dtype_size((rssm_dtype)p->state_dtype), rsz = rssm_dtype_size((rssm_dtype)p->ring_dtype);
    const bool packed = vk_runs_packed(p);
    *shape = (vk_shape){
        /* The packed module has no ring: 1 entry, and one ring dtype, so
         * packed models that differ only in their (unused) ring share a
         * pipeline. */
        .ring_len = packed ? 1u : p->ring_len,
        .ring_dt = packed ? RSSM_CODE_DTYPE_F32 : p->ring_dtype,
        .io_dt = p->io_dtype,
        .num_qk_heads = p->num_qk_heads,
        .num_v_heads = p->num_v_heads,
        .head_k = p->head_k,
        .head_v = p->head_v,
        .slots_per_buffer = slots_per_buffer,
        .layer_words = layer_words,
        .ck_slot = (uint32_t)(io->ckpt_slot / ssz),
        .ck_head = (uint32_t)(io->ckpt_head / ssz),
        .rd_slot = (uint32_t)(io->ring_d_slot / rsz),
        .rd_head = (uint32_t)(io->ring_d_head / rsz),
        .rk_slot = (uint32_t)(io->ring_k_slot / rsz),
        .rk_head = (uint32_t)(io->ring_k_head / rsz),
        .rg_slot = (uint32_t)(io->ring_g_slot / sizeof(float)),
        .rg_head = (uint32_t)(io->ring_g_head / sizeof(float)),
    };
}

void vk_push_init(vk_push *pc, const rssm_kernel_params *p, const rssm_layer_io *io)
{
    const size_t iosz = rssm_dtype_size((rssm_dtype)p->io_dtype);
    const size_t gsz = p->flags & RSSM_FLAG_GATE_BF16 ? 2 : 4;
    *pc = (vk_push){
        .rows = 1,
        .slots = io->slots,
        .row_stride = 1,
        .base_force = RSSM_VK_NONE,
        .base_io = RSSM_VK_NONE,
        .base_over = RSSM_VK_NONE,
        .q_row = (uint32_t)(io->q_row / iosz),
        .k_row = (uint32_t)(io->k_row / iosz),
        .v_row = (uint32_t)(io->v_row / iosz),
        .gate_row = (uint32_t)(io->gate_row / gsz),
        .beta_row = (uint32_t)(io->beta_row / gsz),
        .out_row = (uint32_t)(io->out_row / iosz),
        .mode_flags = p->gate_mode | p->flags << 8,
        .q_scale = p->q_scale,
        .gate_lower_bound = p->gate_lower_bound,
    };
}

void vk_decode_push(vk_ctx *ctx, VkCommandBuffer cb, const vk_decode *d, const vk_push *pc)
{
    ctx->vk.vkCmdPushConstants(cb, d->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof *pc, pc);
    if (ctx->runtime_shape)
        ctx->vk.vkCmdPushConstants(cb, d->layout, VK_SHADER_STAGE_COMPUTE_BIT, sizeof *pc, sizeof d->shape,
                                   &d->shape);
}

/* The decode pipeline of the rows that flush, of those that do not (replay
 * with L > 1 only) or of all of them (`rows`); a model that runs the packed
 * module has the one, RSSM_VK_ROWS_FLUSH. An `_rt` module (a CPU device)
 * reads `shape` from the push constants instead and its specialization
 * leaves it out (extents() sizes its arrays), so that models of one gate
 * and state dtype share its pipelines. `spv`: module_for's module for
 * `rows`, or the window's. */
static rssm_status pipeline_create(vk_ctx *ctx, const vk_shape *shape, const rssm_kernel_params *p,
                                   VkPipelineLayout layout, uint32_t rows, uint32_t row_split, const vk_spirv *spv,
                                   uint32_t window_t, VkPipeline *out, rssm_error *err)
{
    const bool flush_rows = rows != RSSM_VK_ROWS_READ_ONLY;
    const bool packed = vk_runs_packed(p), cpu = vk_cpu_device(ctx);
    if (spv->size == 0)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: %s was not built into this rssm", spv->name);
    /* A runtime_shape device runs only `_rt` modules (module_for,
     * window_module). */
    const bool rt = ctx->runtime_shape, window = spv == &vk_spirv_window || spv == &vk_spirv_window_rt;
    const vk_shape none = {0}, *sp = rt ? &none : shape;
    vk_extents e = extents(ctx, p, window);
    if (rt && window) /* its arrays take no V: one value for every model */
        e.v = 0;
    uint32_t values[RSSM_VK_SPEC_COUNT] = {
        [RSSM_VK_SPEC_GATE_KIND] = p->gate_kind,
        [RSSM_VK_SPEC_HEAD_K] = (uint32_t)e.k,
        [RSSM_VK_SPEC_HEAD_V] = (uint32_t)e.v,
        [RSSM_VK_SPEC_RING_LEN] = (uint32_t)e.ring,
        [RSSM_VK_SPEC_SG_SIZE] = ctx->subgroup_size,
        [RSSM_VK_SPEC_STATE_DT] = p->state_dtype,
        [RSSM_VK_SPEC_RING_DT] = sp->ring_dt,
        [RSSM_VK_SPEC_IO_DT] = sp->io_dt,
        [RSSM_VK_SPEC_TILE_M] = ctx->tile_m,
        [RSSM_VK_SPEC_TILE_N] = ctx->tile_n,
        [RSSM_VK_SPEC_TILE_K] = ctx->tile_k,
        [RSSM_VK_SPEC_WG_SIZE] = ctx->subgroup_size * RSSM_VK_SUBGROUPS,
        [RSSM_VK_SPEC_FLUSH_ROWS] = packed ? RSSM_VK_ROWS_FLUSH : rows,
        [RSSM_VK_SPEC_SLOTS_PER_BUFFER] = sp->slots_per_buffer,
        [RSSM_VK_SPEC_ROW_SPLIT] = row_split,
        /* A second block of rows in registers where the pipeline has few
         * others: not in a replay flush, whose rows and KK_j take them; not
         * on a CPU device, where it only adds to the compile. */
        [RSSM_VK_SPEC_PREFETCH] = ctx->tune_prefetch >= 0 ? (uint32_t)ctx->tune_prefetch
                                                          : (uint32_t)((!flush_rows || packed) && !cpu),
        [RSSM_VK_SPEC_UNROLL_RING] = !cpu,
        [RSSM_VK_SPEC_NUM_QK_HEADS] = sp->num_qk_heads,
        [RSSM_VK_SPEC_NUM_V_HEADS] = sp->num_v_heads,
        [RSSM_VK_SPEC_LAYER_WORDS] = sp->layer_words,
        [RSSM_VK_SPEC_CK_SLOT] = sp->ck_slot,
        [RSSM_VK_SPEC_CK_HEAD] = sp->ck_head,
        /* The packed module has no ring: its strides are not specialised. */
        [RSSM_VK_SPEC_RD_SLOT] = packed ? 0 : sp->rd_slot,
        [RSSM_VK_SPEC_RD_HEAD] = packed ? 0 : sp->rd_head,
        [RSSM_VK_SPEC_RK_SLOT] = packed ? 0 : sp->rk_slot,
        [RSSM_VK_SPEC_RK_HEAD] = packed ? 0 : sp->rk_head,
        [RSSM_VK_SPEC_RG_SLOT] = packed ? 0 : sp->rg_slot,
        [RSSM_VK_SPEC_RG_HEAD] = packed ? 0 : sp->rg_head,
        [RSSM_VK_SPEC_WINDOW_T] = window_t,
    };
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo req = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = ctx->subgroup_size,
    };
    return vk_shared_pipeline(ctx, spv, values, ctx->subgroup_size_control ? &req : NULL,
                              ctx->subgroup_size_control ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT
                                                         : 0,
                              layout, out, err);
}

rssm_status vk_decode_create(vk_ctx *ctx, const vk_shape *shape, const rssm_kernel_params *p, VkPipelineLayout layout,
                             vk_decode *d, rssm_error *err)
{
    *d = (vk_decode){.layout = layout, .shape = *shape, .heads = p->num_v_heads};
    const bool packed = vk_runs_packed(p);
    /* One dispatch of every row where a GPU step has a few hundred
     * workgroups at most (a batch of one or two), with a portable flush,
     * which splits as the read-only rows do. Two pipelines keep the
     * read-only rows' registers and shared memory down, and that pays from
     * a thousand workgroups on (H200: one dispatch 4-6% faster at 256
     * workgroups, even at 1024, 5% slower at 2048;
     * bench/results/h200/notes.md, History: Vulkan). */
    const uint32_t all_split = vk_row_split(ctx, p, p->max_rows, RSSM_VK_ROWS_ALL, RSSM_VK_ROW_BLOCK);
    const uint64_t groups = (uint64_t)p->num_v_heads * p->max_rows * all_split;
    const bool one = !packed && !vk_uses_tiles(ctx, p) &&
                     (ctx->tune_one_dispatch >= 0 ? ctx->tune_one_dispatch != 0
                                                  : !vk_cpu_device(ctx) && groups <= VK_ONE_DISPATCH_WORKGROUPS);
    const uint32_t rows = one ? RSSM_VK_ROWS_ALL : RSSM_VK_ROWS_FLUSH;
    const vk_spirv *module = module_for(ctx, p, rows);
    d->split = vk_row_split(ctx, p, p->max_rows, rows, module_row_block(module));
    rssm_status st = pipeline_create(ctx, shape, p, layout, rows, d->split, module, 0, &d->flush, err);
    if (st == RSSM_OK && !packed && !one) {
        module = module_for(ctx, p, RSSM_VK_ROWS_READ_ONLY);
        d->split_readout = vk_row_split(ctx, p, p->max_rows, RSSM_VK_ROWS_READ_ONLY, module_row_block(module));
        st = pipeline_create(ctx, shape, p, layout, RSSM_VK_ROWS_READ_ONLY, d->split_readout, module, 0,
                             &d->readout, err);
    }
    return st;
}

void vk_decode_destroy(vk_ctx *ctx, vk_decode *d)
{
    (void)ctx; /* the pipelines are the device's (vk_shared.c) */
    d->flush = d->readout = VK_NULL_HANDLE;
}

void vk_decode_dispatch(vk_ctx *ctx, VkCommandBuffer cb, const vk_decode *d, uint32_t rows, uint32_t first,
                        uint32_t count, bool flush_only, bool flush_first)
{
    /* Nothing orders the two dispatches (their rows are different slots),
     * so a GPU runs them side by side. Where some rows flush, theirs goes
     * first: their workgroups, each a longer chain than a read-only one's,
     * then run beside the read-only rows rather than after them (H200,
     * staggered positions: replay 22-27% shorter at batch 16, 18-29% at
     * 64, 4-11% at 256). Where none does, it goes last: its workgroups only
     * read the header and return, which costs least in the read-only
     * dispatch's tail (first, uniform positions' replay was 2-7% longer;
     * bench/results/h200/notes.md, History: Vulkan runs 34-35). */
    const VkPipeline pipes[2] = {d->flush, flush_only ? VK_NULL_HANDLE : d->readout};
    const uint32_t splits[2] = {d->split, d->split_readout};
    if (ctx->tune_flush_first >= 0)
        flush_first = ctx->tune_flush_first != 0;
    const int order = flush_first ? 0 : 1;
    for (int k = 0; k < 2; k++) {
        const int i = order ^ k;
        if (!pipes[i])
            continue;
        ctx->vk.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipes[i]);
        ctx->vk.vkCmdDispatchBase(cb, 0, 0, first, d->heads * splits[i], rows, count);
    }
}

/* The window's module: a CPU device's takes its extents at run time, as
 * the decode's do. */
static const vk_spirv *window_module(const vk_ctx *ctx)
{
    return ctx->runtime_shape ? &vk_spirv_window_rt : &vk_spirv_window;
}

/* A window's tokens per dispatch on this device (the pipeline's WINDOW_T).
 * A GPU keeps fewer workgroups resident the more shared memory each
 * declares (docs/design.md §8), and the window's arrays grow with its
 * tokens: on an H200 a window of 4 tokens took 4.4x less time in arrays for
 * 4 (7 KiB) than for 15 (26 KiB), and one of 8 in arrays for 8 (14 KiB)
 * 2-3x a window of 4; parts of 2 or 8 were slower than parts of 4
 * (bench/results/h200/notes.md, History: Vulkan runs 28-29). So a GPU runs 4 tokens
 * per dispatch. A device that runs the `_rt` modules (a CPU device) has no
 * residency to lose: the whole window in one (RSSM_VK_RUNTIME_SHAPE=0 gives
 * it the GPU's parts, as the tests do). */
static uint32_t window_part(const vk_ctx *ctx, const rssm_kernel_params *p)
{
    const uint32_t most = window_tokens(extents(ctx, p, true).ring);
    uint32_t tokens = ctx->runtime_shape ? most : 4;
    if (ctx->tune_window_tokens)
        tokens = ctx->tune_window_tokens;
    return tokens < most ? tokens : most;
}

size_t vk_window_shared_bytes(const vk_ctx *ctx, const rssm_kernel_params *p)
{
    return window_bytes(p, extents(ctx, p, true), window_part(ctx, p));
}

const char *vk_window_refusal(const vk_ctx *ctx, const rssm_kernel_params *p)
{
    if (p->ring_cap == 0)
        return "the model has no ring to hold draft tokens";
    if (vk_window_shared_bytes(ctx, p) > ctx->props.limits.maxComputeSharedMemorySize)
        return "the window kernel's shared memory for this head_k and ring exceeds the device's";
    return NULL;
}

rssm_status vk_window_create(vk_ctx *ctx, const vk_shape *shape, const rssm_kernel_params *p, VkPipelineLayout layout,
                             vk_window_pipe *out, rssm_error *err)
{
    *out = (vk_window_pipe){.pipeline = VK_NULL_HANDLE};
    const char *why = vk_window_refusal(ctx, p);
    if (why)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "vulkan: no window kernel: %s", why);
    /* split as the read-only rows' pipeline: a window flushes nothing */
    out->split = vk_row_split(ctx, p, p->max_rows, RSSM_VK_ROWS_READ_ONLY, RSSM_VK_ROW_BLOCK);
    out->tokens = window_part(ctx, p);
    return pipeline_create(ctx, shape, p, layout, RSSM_VK_ROWS_READ_ONLY, out->split, window_module(ctx),
                           out->tokens, &out->pipeline, err);
}

void vk_window_dispatch(vk_ctx *ctx, VkCommandBuffer cb, const vk_window_pipe *w, const vk_decode *d, vk_push pc,
                        uint32_t rows, uint32_t t_max, uint32_t layers)
{
    ctx->vk.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, w->pipeline);
    for (uint32_t first = 0; first < t_max; first += w->tokens) {
        if (first > 0) /* a part's walk reads the earlier parts' ring entries */
            vk_cmd_barrier_compute(ctx, cb);
        pc.rows_word = t_max | first << 16; /* shaders/window.glsl */
        vk_decode_push(ctx, cb, d, &pc);
        ctx->vk.vkCmdDispatch(cb, d->heads * w->split, rows, layers);
    }
}
