/* rssm_batch_verify's window on the Vulkan backend (backend.h
 * batch_verify, docs/design.md §9): every token of every row of every
 * layer in one dispatch of shaders/window.glsl over the batch's pool,
 * which reads each checkpoint once per window where common code's
 * fallback runs one step per token. The window has buffers of its own,
 * made on the first window and grown to the largest: its step arrays
 * ([layers][rows * t_max][...], token t of row r at row t * rows + r,
 * rows * t_max may exceed the batch's max_rows), and per row its drafts and
 * first overflowing token. */
#include "vk_internal.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct vk_window {
    vk_window_pipe pipe;
    uint32_t cap_rows;          /* step-array rows per layer the buffers hold */
    rssm_kernel_params sized;   /* the batch's parameters with max_rows = cap_rows */
    vk_io_layout io;            /* of io_dev and io_host */
    vk_buffer io_dev, io_host;
    vk_buffer rows;             /* host-visible: [max_rows] drafts; at first_at, [max_rows] first overflows */
    VkDeviceSize first_at;      /* bytes, a multiple of the device's binding alignment */
    VkDescriptorPool descriptor_pool;
    VkDescriptorSet set;
};

void vk_window_destroy(vk_ctx *ctx, vk_window *w)
{
    if (!w)
        return;
    /* w->pipe's pipeline is the device's (vk_shared.c) */
    if (w->descriptor_pool)
        ctx->vk.vkDestroyDescriptorPool(ctx->device, w->descriptor_pool, NULL);
    vk_buffer_destroy(ctx, &w->io_dev);
    vk_buffer_destroy(ctx, &w->io_host);
    vk_buffer_destroy(ctx, &w->rows);
    free(w);
}

/* Points the window's set at the pool, the batch's header and gate
 * weights, and its own buffers. */
static void write_set(vk_ctx *ctx, const vk_batch *b, vk_window *w)
{
    const vk_pool *p = b->pool;
    const vk_io_layout *io = &w->io;
    const VkDeviceSize L = b->params.layers, R = b->params.max_rows;
    VkDescriptorBufferInfo pool_info[RSSM_VK_POOL_BUFFERS];
    for (uint32_t i = 0; i < RSSM_VK_POOL_BUFFERS; i++)
        pool_info[i] = (VkDescriptorBufferInfo){p->bufs[i < p->buffers ? i : p->buffers - 1].buffer, 0, VK_WHOLE_SIZE};
    const VkDescriptorBufferInfo hdr = {b->header.buffer, 0, VK_WHOLE_SIZE};
    const VkDescriptorBufferInfo info[BIND_COUNT] = {
        [BIND_ROW_SLOT] = hdr,
        [BIND_ROW_POS] = hdr,
        [BIND_ROW_FORCE] = {w->rows.buffer, 0, R * 4}, /* a window's force binding: drafts */
        [BIND_ROW_IO] = hdr,
        [BIND_Q] = {w->io_dev.buffer, io->q, L * io->q_bytes},
        [BIND_K] = {w->io_dev.buffer, io->k, L * io->q_bytes},
        [BIND_V] = {w->io_dev.buffer, io->v, L * io->v_bytes},
        [BIND_GATE] = {w->io_dev.buffer, io->gate, L * io->gate_bytes},
        [BIND_BETA] = {w->io_dev.buffer, io->beta, L * io->beta_bytes},
        [BIND_A_LOG] = {b->io_dev.buffer, b->io.a_log, L * b->io.a_log_bytes},
        [BIND_DT_BIAS] = {b->io_dev.buffer, b->io.dt_bias, L * b->io.dt_bias_bytes},
        [BIND_OUT] = {w->io_dev.buffer, io->out, L * io->v_bytes},
        [BIND_OVERFLOW] = {w->rows.buffer, w->first_at, R * 4},
    };
    VkWriteDescriptorSet ws[BIND_COUNT];
    for (uint32_t i = 0; i < BIND_COUNT; i++)
        ws[i] = (VkWriteDescriptorSet){
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstSet = w->set,
            .dstBinding = i,
            .descriptorCount = i == BIND_POOL ? RSSM_VK_POOL_BUFFERS : 1,
            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .pBufferInfo = i == BIND_POOL ? pool_info : &info[i],
        };
    ctx->vk.vkUpdateDescriptorSets(ctx->device, BIND_COUNT, ws, 0, NULL);
}

/* The window's pipeline on the batch's layout (made once), and buffers for
 * `need` step-array rows per layer. */
static rssm_status reserve(vk_ctx *ctx, vk_batch *b, uint32_t need, rssm_error *err)
{
    rssm_status st = RSSM_OK;
    vk_window *w = b->window;
    if (!w) {
        if (!(w = b->window = calloc(1, sizeof *w)))
            return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
        rssm_layer_io io = {.slots = b->pool->slots};
        rssm_layer_io_pool_strides(&io, &b->params);
        vk_shape shape;
        vk_shape_init(&shape, &b->params, &io, b->pool->slots_per_buffer, b->params.layer_bytes / 4);
        if ((st = vk_window_create(ctx, &shape, &b->params, b->decode.layout, &w->pipe, err)) == RSSM_OK &&
            (st = vk_batch_sets_create(ctx, b, 1, &w->descriptor_pool, &w->set, err)) == RSSM_OK)
        {
            const VkDeviceSize a = ctx->props.limits.minStorageBufferOffsetAlignment, bytes = b->params.max_rows * 4ull;
            w->first_at = (bytes + a - 1) / a * a;
            st = vk_buffer_create(ctx, w->first_at + bytes, VK_MEMORY_HOST, &w->rows, err);
        }
        if (st != RSSM_OK)
            return st;
    }
    if (need <= w->cap_rows)
        return RSSM_OK;
    vk_buffer_destroy(ctx, &w->io_dev);
    vk_buffer_destroy(ctx, &w->io_host);
    w->cap_rows = 0;
    w->sized = b->params;
    w->sized.max_rows = need;
    const VkPhysicalDeviceLimits *lim = &ctx->props.limits;
    vk_io_layout_init(&w->io, &w->sized,
                      lim->minStorageBufferOffsetAlignment > 16 ? lim->minStorageBufferOffsetAlignment : 16);
    if ((st = vk_buffer_create(ctx, w->io.total, VK_MEMORY_DEVICE, &w->io_dev, err)) != RSSM_OK ||
        (st = vk_buffer_create(ctx, w->io.total, VK_MEMORY_HOST, &w->io_host, err)) != RSSM_OK)
        return st;
    w->cap_rows = need;
    write_set(ctx, b, w);
    return RSSM_OK;
}

rssm_status vk_batch_verify(void *vctx, void *vbatch, uint32_t rows, const rssm_row_header *hdr,
                            const uint32_t *drafts, uint32_t t_max, const rssm_step_inputs *in, void *out,
                            uint32_t *first_overflow, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    vk_batch *b = vbatch;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    /* Handed back before anything changed: common code runs it one step
     * per token. On a GPU too, as measured (bench/results/h200/notes.md,
     * History: Vulkan runs 26-29): in parts of 4 tokens the kernel's window took
     * 0.74-0.75x its steps' program on an H200 at 16 rows, against
     * 0.80-0.81x for one step per token, but 1.37-1.97x at 256 rows,
     * against 1.15-1.34x: no better overall, so rssm's own pool takes it on
     * CPU devices only (RSSM_VK_WINDOW=1 takes it anywhere). */
    const bool kernel = ctx->tune_window >= 0 ? ctx->tune_window != 0 : vk_cpu_device(ctx);
    const char *why = !kernel ? (ctx->tune_window == 0 ? "RSSM_VK_WINDOW=0"
                                                       : "on a GPU the window kernel measured slower than its steps")
                              : vk_window_refusal(ctx, &b->params);
    if (why)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "vulkan: this window runs one step per token: %s", why);
    if ((st = reserve(ctx, b, rows * t_max, err)) != RSSM_OK)
        return st;
    vk_window *w = b->window;
    const vk_io_layout *io = &w->io;
    const uint32_t layers = b->params.layers, R = w->cap_rows;
    /* the header as a step's (the step program is not running: every run
     * waits for its fence), the drafts, and no overflowing token yet */
    uint32_t *words = b->header.map;
    words[RSSM_HEADER_ROWS] = rows;
    memcpy(words + RSSM_HEADER_WORDS, hdr, (size_t)rows * sizeof *hdr);
    uint32_t *meta = w->rows.map;
    memcpy(meta, drafts, (size_t)rows * 4);
    uint32_t *first = (uint32_t *)(void *)((uint8_t *)w->rows.map + w->first_at);
    memset(first, 0xff, (size_t)rows * 4);
    /* Host [t][layers][rows][...] into [layers][token-major rows][...]. */
    const struct {
        const void *src;
        VkDeviceSize dst, layer_bytes;
    } arrays[5] = {
        {in->q, io->q, io->q_bytes},          {in->k, io->k, io->q_bytes},
        {in->v, io->v, io->v_bytes},          {in->gate, io->gate, io->gate_bytes},
        {in->beta, io->beta, io->beta_bytes},
    };
    VkBufferCopy regions[6];
    uint8_t *host = w->io_host.map;
    const size_t used = (size_t)rows * t_max;
    for (int a = 0; a < 5; a++) {
        const size_t row = arrays[a].layer_bytes / R, tok = rows * row;
        for (uint32_t l = 0; l < layers; l++)
            for (uint32_t t = 0; t < t_max; t++)
                memcpy(host + arrays[a].dst + l * arrays[a].layer_bytes + t * tok,
                       (const uint8_t *)arrays[a].src + ((size_t)t * layers + l) * tok, tok);
        regions[a] = (VkBufferCopy){arrays[a].dst, arrays[a].dst, (layers - 1) * arrays[a].layer_bytes + used * row};
    }
    const size_t row_out = io->v_bytes / R, tok_out = rows * row_out;
    regions[5] = (VkBufferCopy){io->out, io->out, (layers - 1) * io->v_bytes + used * row_out};

    vk_push pc = b->push;
    pc.rows = rows;
    pc.layer_rows = R;
    pc.base_force = 0;             /* drafts */
    if ((st = vk_transfer_begin(ctx, err)) != RSSM_OK)
        return st;
    VkCommandBuffer cb = ctx->transfer_cmd;
    ctx->vk.vkCmdCopyBuffer(cb, w->io_host.buffer, w->io_dev.buffer, 5, regions);
    vk_cmd_barrier_before_compute(ctx, cb);
    /* The window's device time starts when the inputs' copy has ended
     * (TOP_OF_PIPE would count most of it, as the steps' timings, whose
     * inputs go up in a submission of their own, do not). */
    if (b->queries) {
        ctx->vk.vkCmdResetQueryPool(cb, b->queries, 0, 2);
        ctx->vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, b->queries, 0);
    }
    ctx->vk.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, b->decode.layout, 0, 1, &w->set, 0, NULL);
    /* the push constants carry the shape too, for `window_rt` */
    vk_window_dispatch(ctx, cb, &w->pipe, &b->decode, pc, rows, t_max, layers);
    vk_cmd_barrier_after_compute(ctx, cb);
    if (b->queries)
        ctx->vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b->queries, 1);
    ctx->vk.vkCmdCopyBuffer(cb, w->io_dev.buffer, w->io_host.buffer, 1, &regions[5]);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if ((st = vk_transfer_submit_wait(ctx, err)) != RSSM_OK)
        return st;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    b->last_run_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (b->queries) {
        uint64_t ts[2];
        const VkResult r = ctx->vk.vkGetQueryPoolResults(ctx->device, b->queries, 0, 2, sizeof ts, ts, sizeof ts[0],
                                                         VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
        if (r != VK_SUCCESS)
            return vk_fail(ctx, r, "vkGetQueryPoolResults", err);
        const uint64_t mask = ctx->timestamp_bits >= 64 ? ~0ull : (1ull << ctx->timestamp_bits) - 1;
        b->last_run_seconds = (double)((ts[1] - ts[0]) & mask) * ctx->props.limits.timestampPeriod * 1e-9;
    }
    for (uint32_t l = 0; l < layers; l++)
        for (uint32_t t = 0; t < t_max; t++)
            memcpy((uint8_t *)out + ((size_t)t * layers + l) * tok_out,
                   (const uint8_t *)w->io_host.map + io->out + l * io->v_bytes + t * tok_out, tok_out);
    memcpy(first_overflow, first, (size_t)rows * 4);
    return vk_check_validation(ctx, err);
}
