/* One layer on the caller's buffers (rssm_layer_record): the decode
 * pipelines a batch runs, specialised for the caller's strides (vk_shape),
 * recorded into the caller's command buffer. The descriptors are pushed
 * into that command buffer (VK_KHR_push_descriptor) and the per-call
 * offsets and row count go in push constants, so a call allocates
 * nothing, and a command buffer may hold any number of calls of one
 * layer object on different buffers. */
#include "vk_internal.h"
#include "error.h"
#include "dtype.h"

#include <stdlib.h>
#include <string.h>

typedef struct vk_layer {
    rssm_kernel_params params; /* max_rows the layer's */
    rssm_layer_io shape;       /* the caller's strides in bytes, pointers NULL */
    VkDescriptorSetLayout set_layout;
    vk_decode decode;
    vk_push push; /* a step's constants: row strides, gates */
    /* The fold of rssm_layer_materialise (backend.h): the flush pipeline on
     * zero step inputs and a force of 1 per row, from `fold`, with
     * fold_push's strides and offsets into it. */
    vk_buffer fold;
    vk_push fold_push;
    /* The cursor advance (shaders/advance.comp). */
    VkDescriptorSetLayout advance_set_layout;
    VkPipelineLayout advance_layout;
    VkPipeline advance;
    /* The speculative-decode window (rssm_layer_record_verify), on the
     * decode pipeline layout; its pipeline VK_NULL_HANDLE where the model
     * has no ring or the device too little shared memory for it
     * (`window_why`). */
    vk_window_pipe window;
    const char *window_why;
} vk_layer;

/* shaders/advance.comp's push constants. */
typedef struct advance_push {
    uint32_t rows, slots, flags, ring_cap, base_slot, base_wpos, base_force, base_cursor;
} advance_push;

/* Bytes a tensor spans from its first element: `n` blocks `stride` apart
 * and the last block's `inner` bytes. */
static VkDeviceSize span(VkDeviceSize n, size_t stride, size_t inner)
{
    return n == 0 ? 0 : (n - 1) * stride + inner;
}

/* Each tensor's extent in bytes for `rows` rows, in rssm_layer_buffers'
 * order (BUF_*), and the alignment its offset needs (the vectors a head
 * moves, rssm_layer_misaligned_stride; 4 bytes for words). */
enum { BUF_STATE, BUF_RING_D, BUF_RING_K, BUF_RING_G, BUF_Q, BUF_K, BUF_V, BUF_GATE, BUF_BETA, BUF_A_LOG,
       BUF_DT_BIAS, BUF_OUT, BUF_SLOT, BUF_WPOS, BUF_FORCE, BUF_OVERFLOW, BUF_COUNT };
static const char *const buf_names[BUF_COUNT] = {
    "state", "ring_d", "ring_k", "ring_g", "q", "k", "v", "gate", "beta", "A_log", "dt_bias", "out",
    "slot_index", "write_pos", "force", "overflow",
};

static void extents(const rssm_kernel_params *p, const rssm_layer_io *s, uint32_t rows, VkDeviceSize ext[BUF_COUNT],
                    uint32_t align[BUF_COUNT])
{
    const size_t H = p->num_qk_heads, HV = p->num_v_heads, K = p->head_k, V = p->head_v, cap = p->ring_cap;
    const bool kda = p->gate_kind == RSSM_CODE_GATE_KDA;
    const size_t G = kda ? K : 1;
    const size_t ssz = rssm_dtype_size((rssm_dtype)p->state_dtype), rsz = rssm_dtype_size((rssm_dtype)p->ring_dtype);
    const size_t iosz = rssm_dtype_size((rssm_dtype)p->io_dtype);
    const size_t gsz = p->flags & RSSM_FLAG_GATE_BF16 ? 2 : 4;
    const VkDeviceSize slots = s->slots;
    ext[BUF_STATE] = span(slots, s->ckpt_slot, span(HV, s->ckpt_head, V * K * ssz));
    ext[BUF_RING_D] = span(slots, s->ring_d_slot, span(HV, s->ring_d_head, cap * V * rsz));
    ext[BUF_RING_K] = span(slots, s->ring_k_slot, span(H, s->ring_k_head, cap * K * rsz));
    ext[BUF_RING_G] = span(slots, s->ring_g_slot, span(HV, s->ring_g_head, cap * G * 4));
    ext[BUF_Q] = span(rows, s->q_row, H * K * iosz);
    ext[BUF_K] = span(rows, s->k_row, H * K * iosz);
    ext[BUF_V] = span(rows, s->v_row, HV * V * iosz);
    ext[BUF_GATE] = span(rows, s->gate_row, HV * G * gsz);
    ext[BUF_BETA] = span(rows, s->beta_row, HV * gsz);
    ext[BUF_A_LOG] = HV * 4;
    ext[BUF_DT_BIAS] = HV * G * 4;
    ext[BUF_OUT] = span(rows, s->out_row, HV * V * iosz);
    ext[BUF_SLOT] = ext[BUF_WPOS] = ext[BUF_FORCE] = ext[BUF_OVERFLOW] = (VkDeviceSize)rows * 4;
    for (int i = 0; i < BUF_COUNT; i++)
        align[i] = 4;
    align[BUF_STATE] = align[BUF_RING_D] = align[BUF_RING_K] = align[BUF_Q] = align[BUF_K] = align[BUF_V] =
        align[BUF_OUT] = 16;
    align[BUF_RING_G] = kda ? 16 : 4;
}

rssm_status vk_layer_check(void *vctx, const rssm_kernel_params *p, const rssm_layer_io *shape, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    if (!ctx->push_descriptors)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              "vulkan: %s lacks VK_KHR_push_descriptor with %u descriptors, which the per-layer "
                              "entry records its buffers with",
                              ctx->props.deviceName, VK_DESCRIPTORS);
    const char *why = rssm_layer_misaligned_stride(p, shape);
    if (why)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              "vulkan: the %s is not a multiple of 16 bytes (4 for a GDN ring's gates): the "
                              "kernels move a head's rows as 16-byte vectors",
                              why);
    const VkPhysicalDeviceLimits *lim = &ctx->props.limits;
    if (p->max_rows > lim->maxComputeWorkGroupCount[1])
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "vulkan: max_rows %u exceeds the device's %u", p->max_rows,
                              lim->maxComputeWorkGroupCount[1]);
    /* Each tensor is one descriptor: its extent, plus what an offset that
     * is not a multiple of the device's binding alignment adds in front,
     * must fit one binding. */
    const VkDeviceSize slack = lim->minStorageBufferOffsetAlignment;
    VkDeviceSize ext[BUF_COUNT];
    uint32_t align[BUF_COUNT];
    extents(p, shape, p->max_rows, ext, align);
    for (int i = 0; i < BUF_COUNT; i++)
        if (ext[i] + slack > lim->maxStorageBufferRange)
            return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                                  "vulkan: %s spans %llu bytes; %s binds at most %u in one storage buffer "
                                  "(maxStorageBufferRange)",
                                  buf_names[i], (unsigned long long)ext[i], ctx->props.deviceName,
                                  lim->maxStorageBufferRange);
    return rssm_clear_error(err);
}

void vk_layer_destroy(void *vctx, void *vlayer)
{
    vk_ctx *ctx = vctx;
    vk_layer *l = vlayer;
    if (!l)
        return;
    /* the decode and window pipelines and their layouts are the device's
     * (vk_shared.c) */
    vk_decode_destroy(ctx, &l->decode);
    if (l->advance)
        ctx->vk.vkDestroyPipeline(ctx->device, l->advance, NULL);
    if (l->advance_layout)
        ctx->vk.vkDestroyPipelineLayout(ctx->device, l->advance_layout, NULL);
    if (l->advance_set_layout)
        ctx->vk.vkDestroyDescriptorSetLayout(ctx->device, l->advance_set_layout, NULL);
    vk_buffer_destroy(ctx, &l->fold);
    free(l);
}

/* The fold's inputs in a buffer of the layer's own, and the push
 * constants that point the flush pipeline at them. */
static rssm_status fold_create(vk_ctx *ctx, vk_layer *l, rssm_error *err)
{
    rssm_kernel_params fold;
    rssm_fold_params(&fold, &l->params);
    const size_t bytes = rssm_fold_bytes(&fold);
    uint8_t *image = malloc(bytes);
    if (!image)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    rssm_fold_image(image, &fold);
    rssm_layer_io io = l->shape;
    rssm_fold_io(&io, &fold, image);
    vk_push_init(&l->fold_push, &fold, &io);
    /* offsets into the fold buffer, every part RSSM_ARRAY_ALIGN-aligned */
#define WORDS(ptr) (uint32_t)(((const uint8_t *)(ptr) - image) / 4)
    l->fold_push.base_q = WORDS(io.q);
    l->fold_push.base_k = WORDS(io.k);
    l->fold_push.base_v = WORDS(io.v);
    l->fold_push.base_gate = WORDS(io.gate);
    l->fold_push.base_beta = WORDS(io.beta);
    l->fold_push.base_out = WORDS(io.out);
    l->fold_push.base_force = WORDS(io.row_force);
#undef WORDS
    vk_buffer staging = {0};
    rssm_status st = vk_buffer_create(ctx, bytes, VK_MEMORY_DEVICE, &l->fold, err);
    if (st == RSSM_OK)
        st = vk_buffer_create(ctx, bytes, VK_MEMORY_HOST, &staging, err);
    if (st == RSSM_OK) {
        memcpy(staging.map, image, bytes);
        if ((st = vk_transfer_begin(ctx, err)) == RSSM_OK) {
            const VkBufferCopy all = {0, 0, bytes};
            ctx->vk.vkCmdCopyBuffer(ctx->transfer_cmd, staging.buffer, l->fold.buffer, 1, &all);
            st = vk_transfer_submit_wait(ctx, err);
        }
    }
    vk_buffer_destroy(ctx, &staging);
    free(image);
    return st;
}

static rssm_status advance_create(vk_ctx *ctx, vk_layer *l, rssm_error *err)
{
    rssm_status st = vk_layouts_create(ctx, 4, 1, sizeof(advance_push), true, &l->advance_set_layout,
                                       &l->advance_layout, err);
    if (st != RSSM_OK)
        return st;
    return vk_compute_pipeline(ctx, &vk_spirv_advance, NULL, NULL, 0, l->advance_layout, &l->advance, err);
}

rssm_status vk_layer_create(void *vctx, const rssm_kernel_params *p, const rssm_layer_io *shape, void **out,
                            rssm_error *err)
{
    vk_ctx *ctx = vctx;
    vk_layer *l = calloc(1, sizeof *l);
    if (!l)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    l->params = *p;
    l->shape = *shape;
    vk_push_init(&l->push, p, shape);
    vk_shape vs;
    vk_shape_init(&vs, p, shape, 0, 0);
    rssm_status st = vk_shared_layouts(ctx, true, &l->set_layout, &l->decode.layout, err);
    if (st == RSSM_OK)
        st = vk_decode_create(ctx, &vs, p, l->decode.layout, &l->decode, err);
    if (st == RSSM_OK)
        st = fold_create(ctx, l, err);
    if (st == RSSM_OK)
        st = advance_create(ctx, l, err);
    if (st == RSSM_OK && !(l->window_why = vk_window_refusal(ctx, p)))
        st = vk_window_create(ctx, &vs, p, l->decode.layout, &l->window, err);
    if (st == RSSM_OK)
        st = vk_check_validation(ctx, err);
    if (st != RSSM_OK) {
        vk_layer_destroy(ctx, l);
        return st;
    }
    *out = l;
    return rssm_clear_error(err);
}

/* A descriptor for `b`: bound from its offset rounded down to the device's
 * binding alignment, over `extent` bytes past the offset; *word is the
 * offset's remainder in 32-bit words, for the push constants. */
static VkDescriptorBufferInfo bind(const vk_ctx *ctx, const rssm_buffer *b, VkDeviceSize extent, uint32_t *word)
{
    const VkDeviceSize a = ctx->props.limits.minStorageBufferOffsetAlignment;
    const VkDeviceSize at = b->offset / a * a;
    *word = (uint32_t)((b->offset - at) / 4);
    return (VkDescriptorBufferInfo){(VkBuffer)(uintptr_t)b->handle, at, (b->offset - at) + (extent + 3) / 4 * 4};
}

/* A barrier over everything the command buffer's compute shaders and
 * transfers wrote before it, for the compute shaders, transfers and host
 * reads after it: the ordering of launches on one CUDA stream. */
static void barrier(vk_ctx *ctx, VkCommandBuffer cb)
{
    const VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                         VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT,
    };
    const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    ctx->vk.vkCmdPipelineBarrier(cb, stages, stages | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* What a recording of the decode pipeline layout binds: the tensors of
 * `given` (BUF_* order; handle 0: absent) pushed as descriptors and their
 * offsets into *pc; a step's (or the fold's), or with `drafts` a window's,
 * whose step arrays span rows * t_max rows and whose force binding holds
 * drafts. Then the barriers, the overflow words' fill (to `fill`), and
 * everything but the dispatch. */
static rssm_status record_bind(vk_ctx *ctx, vk_layer *l, VkCommandBuffer cb, uint32_t rows, uint32_t t_max,
                               const rssm_buffer given[BUF_COUNT], bool materialise, bool drafts, uint32_t fill,
                               vk_push *pc, const char *who, rssm_error *err);

static rssm_status record_verify(vk_ctx *ctx, vk_layer *l, uint32_t rows, uint32_t t_max, const rssm_buffer *drafts,
                                 const rssm_layer_buffers *t, VkCommandBuffer cb, rssm_error *err);

rssm_status vk_layer_record(void *vctx, void *vlayer, uint32_t rows, const rssm_layer_buffers *t, bool materialise,
                            const rssm_record_window *window, void *cmd, rssm_error *err)
{
    if (window)
        return record_verify(vctx, vlayer, rows, window->t_max, &window->drafts, t, (VkCommandBuffer)cmd, err);
    vk_ctx *ctx = vctx;
    vk_layer *l = vlayer;
    VkCommandBuffer cb = (VkCommandBuffer)cmd;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    const char *who = materialise ? "vulkan: layer record materialise" : "vulkan: layer record";
    /* The fold runs on the layer's own step inputs and force. */
    const rssm_buffer fold = {(uint64_t)(uintptr_t)l->fold.buffer, 0};
    const rssm_buffer none = {0, 0};
    const bool ring = l->params.ring_cap > 0, raw = l->params.gate_mode != RSSM_CODE_MODE_PRECOMPUTED;
    const rssm_buffer given[BUF_COUNT] = {
        t->state,
        ring ? t->ring_d : none,
        ring ? t->ring_k : none,
        ring ? t->ring_g : none,
        materialise ? fold : t->q,
        materialise ? fold : t->k,
        materialise ? fold : t->v,
        materialise ? fold : t->gate,
        materialise ? fold : t->beta,
        raw && !materialise ? t->A_log : none,
        raw && !materialise ? t->dt_bias : none,
        materialise ? fold : t->out,
        t->slot_index,
        t->write_pos,
        materialise ? fold : t->force,
        materialise ? none : t->overflow,
    };
    vk_push pc = materialise ? l->fold_push : l->push;
    pc.rows = rows;
    if ((st = record_bind(ctx, l, cb, rows, 1, given, materialise, false, 0, &pc, who, err)) != RSSM_OK)
        return st;
    /* The rows' positions are the engine's, on the device: the order of a
     * step with flushing rows, which is every step at staggered positions. */
    vk_decode_dispatch(ctx, cb, &l->decode, rows, 0, 1, materialise, true);
    barrier(ctx, cb);
    return vk_check_validation(ctx, err);
}

/* rssm_layer_record_verify: the window kernel (shaders/window.glsl) on the
 * decode pipelines' bindings. */
static rssm_status record_verify(vk_ctx *ctx, vk_layer *l, uint32_t rows, uint32_t t_max, const rssm_buffer *drafts,
                                 const rssm_layer_buffers *t, VkCommandBuffer cb, rssm_error *err)
{
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    static const char who[] = "vulkan: layer record verify";
    if (!l->window.pipeline)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "%s: no window kernel for this layer: %s", who,
                              l->window_why ? l->window_why : "its pipeline was not made");
    const rssm_buffer none = {0, 0};
    const bool raw = l->params.gate_mode != RSSM_CODE_MODE_PRECOMPUTED;
    /* a window has no force: its binding carries drafts (shaders/window.glsl) */
    const rssm_buffer given[BUF_COUNT] = {
        t->state, t->ring_d, t->ring_k, t->ring_g, t->q, t->k, t->v, t->gate, t->beta,
        raw ? t->A_log : none, raw ? t->dt_bias : none, t->out, t->slot_index, t->write_pos, *drafts, t->overflow,
    };
    vk_push pc = l->push;
    pc.rows = rows; /* rows_word: vk_window_dispatch's, per part */
    /* UINT32_MAX: no overflowing token yet (the kernel takes the minimum) */
    if ((st = record_bind(ctx, l, cb, rows, t_max, given, false, true, 0xffffffffu, &pc, who, err)) != RSSM_OK)
        return st;
    vk_window_dispatch(ctx, cb, &l->window, &l->decode, pc, rows, t_max, 1);
    barrier(ctx, cb);
    return vk_check_validation(ctx, err);
}

static rssm_status record_bind(vk_ctx *ctx, vk_layer *l, VkCommandBuffer cb, uint32_t rows, uint32_t t_max,
                               const rssm_buffer given[BUF_COUNT], bool materialise, bool drafts, uint32_t fill,
                               vk_push *pc, const char *who, rssm_error *err)
{
    const rssm_buffer fold = {(uint64_t)(uintptr_t)l->fold.buffer, 0};
    VkDeviceSize ext[BUF_COUNT];
    uint32_t align[BUF_COUNT];
    extents(&l->params, &l->shape, rows * t_max, ext, align);
    ext[BUF_SLOT] = ext[BUF_WPOS] = ext[BUF_FORCE] = ext[BUF_OVERFLOW] = (VkDeviceSize)rows * 4;
    uint32_t *const base[BUF_COUNT] = {
        &pc->base_c,    &pc->base_rd,   &pc->base_rk,    &pc->base_rg,   &pc->base_q,    &pc->base_k,
        &pc->base_v,    &pc->base_gate, &pc->base_beta,  &pc->base_alog, &pc->base_dtb,  &pc->base_out,
        &pc->base_slot, &pc->base_wpos, &pc->base_force, &pc->base_over,
    };
    /* The layer's own buffer stands in for a tensor that is absent (a
     * bound descriptor must name a buffer); the kernels do not read it. */
    const VkDescriptorBufferInfo stand_in = {l->fold.buffer, 0, VK_WHOLE_SIZE};
    VkDescriptorBufferInfo info[BUF_COUNT];
    for (int i = 0; i < BUF_COUNT; i++) {
        const rssm_buffer *b = &given[i];
        const bool own = b->handle == fold.handle && materialise;
        if (!b->handle) {
            info[i] = stand_in;
            if (i == BUF_FORCE || i == BUF_OVERFLOW)
                *base[i] = RSSM_VK_NONE;
            continue;
        }
        if (b->offset % align[i] != 0)
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: %s's offset %llu is not a multiple of %u bytes",
                                  who, drafts && i == BUF_FORCE ? "drafts" : buf_names[i],
                                  (unsigned long long)b->offset, align[i]);
        if (own) { /* the fold's offsets are in fold_push already */
            info[i] = stand_in;
            continue;
        }
        info[i] = bind(ctx, b, ext[i], base[i]);
    }
    /* binding 0: the state and the rings in elements 0 to 3 (SLOTS_PER_BUFFER 0) */
    VkDescriptorBufferInfo pool_info[RSSM_VK_POOL_BUFFERS];
    for (uint32_t i = 0; i < RSSM_VK_POOL_BUFFERS; i++)
        pool_info[i] = info[i < 4 && given[i].handle ? i : BUF_STATE];
    const struct {
        uint32_t binding, buf;
    } map[] = {
        {BIND_ROW_SLOT, BUF_SLOT}, {BIND_ROW_POS, BUF_WPOS},   {BIND_ROW_FORCE, BUF_FORCE},
        {BIND_ROW_IO, BUF_SLOT},   {BIND_Q, BUF_Q},           {BIND_K, BUF_K},
        {BIND_V, BUF_V},           {BIND_GATE, BUF_GATE},     {BIND_BETA, BUF_BETA},
        {BIND_A_LOG, BUF_A_LOG},   {BIND_DT_BIAS, BUF_DT_BIAS}, {BIND_OUT, BUF_OUT},
        {BIND_OVERFLOW, BUF_OVERFLOW},
    };
    VkWriteDescriptorSet w[BIND_COUNT];
    w[0] = (VkWriteDescriptorSet){
        .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
        .dstBinding = BIND_POOL,
        .descriptorCount = RSSM_VK_POOL_BUFFERS,
        .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
        .pBufferInfo = pool_info,
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        w[1 + i] = (VkWriteDescriptorSet){
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstBinding = map[i].binding,
            .descriptorCount = 1,
            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .pBufferInfo = &info[map[i].buf],
        };
    _Static_assert(1 + 13 == BIND_COUNT, "every binding written");

    barrier(ctx, cb);
    /* The words are only ever lowered (a window) or set (a step) by the
     * kernels: filled first, after whatever read them before. */
    if (pc->base_over != RSSM_VK_NONE) {
        ctx->vk.vkCmdFillBuffer(cb, (VkBuffer)(uintptr_t)given[BUF_OVERFLOW].handle, given[BUF_OVERFLOW].offset,
                                (VkDeviceSize)rows * 4, fill);
        barrier(ctx, cb);
    }
    ctx->vk.vkCmdPushDescriptorSetKHR(cb, VK_PIPELINE_BIND_POINT_COMPUTE, l->decode.layout, 0, BIND_COUNT, w);
    vk_decode_push(ctx, cb, &l->decode, pc);
    return RSSM_OK;
}

rssm_status vk_layer_record_advance(void *vctx, void *vlayer, uint32_t rows, const rssm_buffer *slot_index,
                                    const rssm_buffer *write_pos, const rssm_buffer *force, const rssm_buffer *cursor,
                                    void *cmd, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    vk_layer *l = vlayer;
    VkCommandBuffer cb = (VkCommandBuffer)cmd;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    const rssm_buffer *given[4] = {slot_index, write_pos, force->handle ? force : slot_index, cursor};
    static const char *const names[4] = {"slot_index", "write_pos", "force", "cursor"};
    const VkDeviceSize ext[4] = {(VkDeviceSize)rows * 4, (VkDeviceSize)rows * 4, (VkDeviceSize)rows * 4,
                                 (VkDeviceSize)l->shape.slots * 4};
    advance_push pc = {.rows = rows, .slots = l->shape.slots, .flags = l->params.flags, .ring_cap = l->params.ring_cap};
    uint32_t *const base[4] = {&pc.base_slot, &pc.base_wpos, &pc.base_force, &pc.base_cursor};
    VkDescriptorBufferInfo info[4];
    VkWriteDescriptorSet w[4];
    for (int i = 0; i < 4; i++) {
        if (given[i]->offset % 4 != 0)
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "vulkan: layer record advance: %s's offset %llu is not a multiple of 4 bytes",
                                  names[i], (unsigned long long)given[i]->offset);
        info[i] = bind(ctx, given[i], ext[i], base[i]);
        w[i] = (VkWriteDescriptorSet){
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstBinding = (uint32_t)i,
            .descriptorCount = 1,
            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .pBufferInfo = &info[i],
        };
    }
    if (!force->handle)
        pc.base_force = RSSM_VK_NONE;
    barrier(ctx, cb);
    ctx->vk.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, l->advance);
    ctx->vk.vkCmdPushDescriptorSetKHR(cb, VK_PIPELINE_BIND_POINT_COMPUTE, l->advance_layout, 0, 4, w);
    ctx->vk.vkCmdPushConstants(cb, l->advance_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, &pc);
    ctx->vk.vkCmdDispatch(cb, (rows + 63) / 64, 1, 1);
    barrier(ctx, cb);
    return vk_check_validation(ctx, err);
}

rssm_status vk_vulkan_handles(void *vctx, rssm_vulkan_handles *h, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    *h = (rssm_vulkan_handles){
        .instance = ctx->instance,
        .physical_device = ctx->phys,
        .device = ctx->device,
        .queue = ctx->queue,
        .queue_family_index = ctx->queue_family,
        .api_version = VK_API_VERSION_1_3,
    };
    return rssm_clear_error(err);
}
