/* A batch: device buffers for up to max_rows rows of every layer, the step
 * header, and ONE command buffer recorded at creation that runs a whole step
 * (all layers, one dispatch). Every step resubmits it unchanged; what
 * changes between steps (row count, slots, write_pos, force) is in the
 * header buffer, which the host rewrites in place before each submit.
 * (vk_bench.c records many steps into one command buffer, for timing.) */
#include "vk_internal.h"
#include "error.h"
#include "dtype.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static VkDeviceSize align_up(VkDeviceSize x, VkDeviceSize a) { return (x + a - 1) / a * a; }

void vk_io_layout_init(vk_io_layout *io, const rssm_kernel_params *p, VkDeviceSize align)
{
    rssm_io_sizes s;
    rssm_io_sizes_init(&s, p, p->max_rows);
    const VkDeviceSize L = p->layers;
    io->q_bytes = s.q;
    io->v_bytes = s.v;
    io->gate_bytes = s.gate;
    io->beta_bytes = s.beta;
    io->a_log_bytes = (VkDeviceSize)p->num_v_heads * 4;
    io->dt_bias_bytes = io->a_log_bytes * (p->gate_kind == RSSM_CODE_GATE_KDA ? p->head_k : 1);
    VkDeviceSize at = 0;
#define PLACE(field, bytes) io->field = at, at = align_up(at + (bytes), align)
    PLACE(q, L * s.q);
    PLACE(k, L * s.k);
    PLACE(v, L * s.v);
    PLACE(gate, L * s.gate);
    PLACE(beta, L * s.beta);
    PLACE(a_log, L * io->a_log_bytes);
    PLACE(dt_bias, L * io->dt_bias_bytes);
    PLACE(out, L * s.out);
#undef PLACE
    io->total = at;
}

static rssm_status record_step_locked(vk_ctx *ctx, vk_batch *b, rssm_error *err);

static rssm_status record_step(vk_ctx *ctx, vk_batch *b, rssm_error *err)
{
    /* The command pool is shared: allocate and record under the lock. */
    pthread_mutex_lock(&ctx->queue_lock);
    rssm_status st = record_step_locked(ctx, b, err);
    pthread_mutex_unlock(&ctx->queue_lock);
    return st;
}

/* The pieces of a step's recording that vk_bench.c's timed programs share,
 * so that a step there is recorded exactly as here. */

void vk_batch_cmd_step(vk_ctx *ctx, const vk_batch *b, VkCommandBuffer cb, VkDescriptorSet set, bool layer_by_layer,
                       bool flush_first)
{
    /* Descriptor sets and push constants stay bound across pipelines of one layout. */
    ctx->vk.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, b->decode.layout, 0, 1, &set, 0, NULL);
    /* Constant for the batch's life: safe to bake into the recording. */
    vk_decode_push(ctx, cb, &b->decode, &b->push);
    const uint32_t rows = b->params.max_rows;
    if (!layer_by_layer) {
        vk_decode_dispatch(ctx, cb, &b->decode, rows, 0, b->params.layers, false, flush_first);
        return;
    }
    /* As in a model, where layer l + 1's inputs are layer l's outputs: each
     * layer waits for the one before it (docs/bench.md). */
    for (uint32_t l = 0; l < b->params.layers; l++) {
        if (l > 0)
            vk_cmd_barrier_compute(ctx, cb);
        vk_decode_dispatch(ctx, cb, &b->decode, rows, l, 1, false, flush_first);
    }
}

bool vk_step_flushes(const vk_batch *b, uint32_t rows, const rssm_row_header *hdr)
{
    const uint32_t cap = b->params.ring_cap;
    for (uint32_t r = 0; r < rows; r++)
        if (!RSSM_ROW_PADS(hdr[r].slot, b->push.slots, b->params.flags) &&
            RSSM_ROW_FLUSHES(hdr[r].write_pos < cap ? hdr[r].write_pos : cap, cap, hdr[r].force))
            return true;
    return false;
}

static rssm_status record_step_locked(vk_ctx *ctx, vk_batch *b, rssm_error *err)
{
    /* A second recording only where the order can differ: two pipelines. */
    const int orders = b->decode.readout ? 2 : 1;
    for (int o = 0; o < orders; o++) {
        rssm_status st = vk_cmd_begin(ctx, b->queries, &b->step_cmd[o], err);
        if (st != RSSM_OK)
            return st;
        VkCommandBuffer cb = b->step_cmd[o];
        vk_cmd_barrier_before_compute(ctx, cb);
        if (b->queries)
            ctx->vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, b->queries, 0);
        vk_batch_cmd_step(ctx, b, cb, b->set, false, o == 1);
        vk_cmd_barrier_after_compute(ctx, cb);
        if (b->queries)
            ctx->vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b->queries, 1);
        const VkResult r = ctx->vk.vkEndCommandBuffer(cb);
        if (r != VK_SUCCESS)
            return vk_fail(ctx, r, "vkEndCommandBuffer", err);
    }
    return RSSM_OK;
}

rssm_status vk_batch_sets_create(vk_ctx *ctx, const vk_batch *b, uint32_t count, VkDescriptorPool *pool,
                                 VkDescriptorSet *sets, rssm_error *err)
{
    *pool = VK_NULL_HANDLE;
    VkDescriptorSetLayout *layouts = malloc(count * sizeof *layouts);
    if (!layouts)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    for (uint32_t i = 0; i < count; i++)
        layouts[i] = b->set_layout;
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                               .descriptorCount = count * (BIND_COUNT - 1 + RSSM_VK_POOL_BUFFERS)};
    VkDescriptorPoolCreateInfo dpci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
        .maxSets = count,
        .poolSizeCount = 1,
        .pPoolSizes = &ps,
    };
    rssm_status st = RSSM_OK;
    VkResult r = ctx->vk.vkCreateDescriptorPool(ctx->device, &dpci, NULL, pool);
    if (r != VK_SUCCESS) {
        *pool = VK_NULL_HANDLE;
        st = vk_fail(ctx, r, "vkCreateDescriptorPool", err);
    } else {
        VkDescriptorSetAllocateInfo sai = {
            .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
            .descriptorPool = *pool,
            .descriptorSetCount = count,
            .pSetLayouts = layouts,
        };
        if ((r = ctx->vk.vkAllocateDescriptorSets(ctx->device, &sai, sets)) != VK_SUCCESS)
            st = vk_fail(ctx, r, "vkAllocateDescriptorSets", err);
    }
    free(layouts);
    return st;
}

/* The one list of what each binding sees: the batch's own set and a timed
 * program's per-step sets differ only in where the header is. */
void vk_batch_sets_write(vk_ctx *ctx, const vk_batch *b, VkDescriptorSet set, VkBuffer header,
                         VkDeviceSize header_offset, VkDeviceSize header_range)
{
    const vk_io_layout *io = &b->io;
    const VkDeviceSize L = b->params.layers;
    /* Every element of the pool's array is written; the ones past the
     * pool's buffers repeat its last (no workgroup indexes them). */
    const vk_pool *p = b->pool;
    VkDescriptorBufferInfo pool_info[RSSM_VK_POOL_BUFFERS];
    for (uint32_t i = 0; i < RSSM_VK_POOL_BUFFERS; i++)
        pool_info[i] = (VkDescriptorBufferInfo){p->bufs[i < p->buffers ? i : p->buffers - 1].buffer, 0, VK_WHOLE_SIZE};
    const VkDescriptorBufferInfo hdr = {header, header_offset, header_range};
    VkDescriptorBufferInfo info[BIND_COUNT] = {
        [BIND_POOL] = {VK_NULL_HANDLE, 0, 0}, /* pool_info */
        [BIND_ROW_SLOT] = hdr,
        [BIND_ROW_POS] = hdr,
        [BIND_ROW_FORCE] = hdr,
        [BIND_ROW_IO] = hdr,
        [BIND_Q] = {b->io_dev.buffer, io->q, L * io->q_bytes},
        [BIND_K] = {b->io_dev.buffer, io->k, L * io->q_bytes},
        [BIND_V] = {b->io_dev.buffer, io->v, L * io->v_bytes},
        [BIND_GATE] = {b->io_dev.buffer, io->gate, L * io->gate_bytes},
        [BIND_BETA] = {b->io_dev.buffer, io->beta, L * io->beta_bytes},
        [BIND_A_LOG] = {b->io_dev.buffer, io->a_log, L * io->a_log_bytes},
        [BIND_DT_BIAS] = {b->io_dev.buffer, io->dt_bias, L * io->dt_bias_bytes},
        [BIND_OUT] = {b->io_dev.buffer, io->out, L * io->v_bytes},
        [BIND_OVERFLOW] = {b->overflow.buffer, 0, VK_WHOLE_SIZE},
    };
    VkWriteDescriptorSet w[BIND_COUNT];
    for (uint32_t i = 0; i < BIND_COUNT; i++)
        w[i] = (VkWriteDescriptorSet){
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstSet = set,
            .dstBinding = i,
            .descriptorCount = i == BIND_POOL ? RSSM_VK_POOL_BUFFERS : 1,
            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .pBufferInfo = i == BIND_POOL ? pool_info : &info[i],
        };
    ctx->vk.vkUpdateDescriptorSets(ctx->device, BIND_COUNT, w, 0, NULL);
}

static rssm_status create_descriptors(vk_ctx *ctx, vk_batch *b, rssm_error *err)
{
    _Static_assert(BIND_COUNT <= VK_MAX_BINDINGS, "bindings");
    rssm_status st = vk_shared_layouts(ctx, false, &b->set_layout, &b->decode.layout, err);
    if (st != RSSM_OK)
        return st;
    st = vk_batch_sets_create(ctx, b, 1, &b->descriptor_pool, &b->set, err);
    if (st != RSSM_OK)
        return st;
    vk_batch_sets_write(ctx, b, b->set, b->header.buffer, 0, VK_WHOLE_SIZE);
    return RSSM_OK;
}

rssm_status vk_batch_create(void *vctx, void *vpool, const rssm_kernel_params *params, void **out,
                            rssm_error *err)
{
    vk_ctx *ctx = vctx;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    vk_pool *pool = vpool;
    const VkPhysicalDeviceLimits *lim = &ctx->props.limits;
    if (params->max_rows > lim->maxComputeWorkGroupCount[1])
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "vulkan: max_rows %u exceeds the device's %u",
                              params->max_rows, lim->maxComputeWorkGroupCount[1]);
    vk_batch *b = calloc(1, sizeof *b);
    if (!b)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    b->pool = pool;
    b->params = *params;
    VkDeviceSize align = lim->minStorageBufferOffsetAlignment > 16 ? lim->minStorageBufferOffsetAlignment : 16;
    vk_io_layout_init(&b->io, params, align);

    if ((st = vk_buffer_create(ctx, b->io.total, VK_MEMORY_DEVICE, &b->io_dev, err)) == RSSM_OK &&
        (st = vk_buffer_create(ctx, b->io.total, VK_MEMORY_HOST, &b->io_host, err)) == RSSM_OK &&
        (st = vk_buffer_create(ctx, RSSM_HEADER_BYTES(params->max_rows), VK_MEMORY_HEADER, &b->header, err)) ==
            RSSM_OK &&
        (st = vk_buffer_create(ctx, (VkDeviceSize)params->max_rows * 4u, VK_MEMORY_HOST, &b->overflow, err)) ==
            RSSM_OK &&
        (st = create_descriptors(ctx, b, err)) == RSSM_OK) {
        /* The pool's layout and the step arrays as rssm_layer_io strides:
         * the batch runs the per-layer kernels (docs/design.md §8). */
        rssm_layer_io io = {.slots = pool->slots};
        rssm_layer_io_pool_strides(&io, params);
        vk_shape shape;
        vk_shape_init(&shape, params, &io, pool->slots_per_buffer, params->layer_bytes / 4);
        vk_push_init(&b->push, params, &io);
        b->push.rows = RSSM_VK_NONE;
        b->push.rows_word = RSSM_HEADER_ROWS;
        b->push.layer_rows = params->max_rows;
        b->push.row_stride = RSSM_ROW_WORDS;
        b->push.base_rd = params->ring_d_offset / 4;
        b->push.base_rk = params->ring_k_offset / 4;
        b->push.base_rg = params->ring_g_offset / 4;
        b->push.base_slot = RSSM_HEADER_WORDS + RSSM_ROW_SLOT;
        b->push.base_wpos = RSSM_HEADER_WORDS + RSSM_ROW_WRITE_POS;
        b->push.base_force = RSSM_HEADER_WORDS + RSSM_ROW_FORCE;
        b->push.base_io = RSSM_HEADER_WORDS + RSSM_ROW_IO;
        b->push.base_over = 0;
        st = vk_decode_create(ctx, &shape, params, b->decode.layout, &b->decode, err);
    }
    if (st == RSSM_OK && ctx->timestamp_bits) {
        VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                     .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = 2};
        VkResult r = ctx->vk.vkCreateQueryPool(ctx->device, &qci, NULL, &b->queries);
        if (r != VK_SUCCESS)
            st = vk_fail(ctx, r, "vkCreateQueryPool", err);
    }
    if (st == RSSM_OK) {
        VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        VkResult r = ctx->vk.vkCreateFence(ctx->device, &fci, NULL, &b->step_fence);
        if (r != VK_SUCCESS)
            st = vk_fail(ctx, r, "vkCreateFence", err);
    }
    if (st == RSSM_OK)
        st = record_step(ctx, b, err);
    /* Defined contents: the gate weights are read (unused) before any are set. */
    if (st == RSSM_OK && (st = vk_transfer_begin(ctx, err)) == RSSM_OK) {
        ctx->vk.vkCmdFillBuffer(ctx->transfer_cmd, b->io_dev.buffer, 0, VK_WHOLE_SIZE, 0);
        st = vk_transfer_submit_wait(ctx, err);
    }
    if (st == RSSM_OK)
        st = vk_check_validation(ctx, err);
    if (st != RSSM_OK) {
        vk_batch_destroy(ctx, b);
        return st;
    }
    memset(b->header.map, 0, RSSM_HEADER_BYTES(params->max_rows));
    memset(b->overflow.map, 0, (size_t)params->max_rows * 4u);
    *out = b;
    return rssm_clear_error(err);
}

void vk_batch_destroy(void *vctx, void *vbatch)
{
    vk_ctx *ctx = vctx;
    vk_batch *b = vbatch;
    if (!b)
        return;
    pthread_mutex_lock(&ctx->queue_lock);
    ctx->vk.vkQueueWaitIdle(ctx->queue);
    for (int o = 0; o < 2; o++)
        if (b->step_cmd[o])
            ctx->vk.vkFreeCommandBuffers(ctx->device, ctx->command_pool, 1, &b->step_cmd[o]);
    pthread_mutex_unlock(&ctx->queue_lock);
    if (b->step_fence)
        ctx->vk.vkDestroyFence(ctx->device, b->step_fence, NULL);
    if (b->queries)
        ctx->vk.vkDestroyQueryPool(ctx->device, b->queries, NULL);
    vk_decode_destroy(ctx, &b->decode);
    if (b->descriptor_pool)
        ctx->vk.vkDestroyDescriptorPool(ctx->device, b->descriptor_pool, NULL);
    /* b->decode's pipelines and layouts are the device's (vk_shared.c);
     * its window, the ops table's batch_destroy's (vk_backend.c) */
    vk_buffer_destroy(ctx, &b->header);
    vk_buffer_destroy(ctx, &b->overflow);
    vk_buffer_destroy(ctx, &b->io_host);
    vk_buffer_destroy(ctx, &b->io_dev);
    free(b);
}

rssm_status vk_batch_set_gate_params(void *vctx, void *vbatch, uint32_t layer, const float *A_log,
                                     const float *dt_bias, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    vk_batch *b = vbatch;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    const vk_io_layout *io = &b->io;
    VkBufferCopy regions[2] = {
        {io->a_log + layer * io->a_log_bytes, io->a_log + layer * io->a_log_bytes, io->a_log_bytes},
        {io->dt_bias + layer * io->dt_bias_bytes, io->dt_bias + layer * io->dt_bias_bytes, io->dt_bias_bytes},
    };
    uint8_t *host = b->io_host.map;
    memcpy(host + regions[0].srcOffset, A_log, io->a_log_bytes);
    memcpy(host + regions[1].srcOffset, dt_bias, io->dt_bias_bytes);
    if ((st = vk_transfer_begin(ctx, err)) != RSSM_OK)
        return st;
    ctx->vk.vkCmdCopyBuffer(ctx->transfer_cmd, b->io_host.buffer, b->io_dev.buffer, 2, regions);
    return vk_transfer_submit_wait(ctx, err);
}

rssm_status vk_batch_upload(void *vctx, void *vbatch, uint32_t rows, const rssm_step_inputs *in,
                            rssm_error *err)
{
    vk_ctx *ctx = vctx;
    vk_batch *b = vbatch;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    if (rows == 0)
        return RSSM_OK;
    const vk_io_layout *io = &b->io;
    const uint32_t layers = b->params.layers, max_rows = b->params.max_rows;
    /* Per row sizes; host arrays are [layers][rows][...], device ones
     * [layers][max_rows][...]. */
    const VkDeviceSize row_q = io->q_bytes / max_rows, row_v = io->v_bytes / max_rows;
    const VkDeviceSize row_g = io->gate_bytes / max_rows, row_b = io->beta_bytes / max_rows;
    struct { const void *src; VkDeviceSize dst, per_row, layer_stride; } arrays[5] = {
        {in->q, io->q, row_q, io->q_bytes},
        {in->k, io->k, row_q, io->q_bytes},
        {in->v, io->v, row_v, io->v_bytes},
        {in->gate, io->gate, row_g, io->gate_bytes},
        {in->beta, io->beta, row_b, io->beta_bytes},
    };
    VkBufferCopy *regions = malloc(sizeof *regions * 5 * layers);
    if (!regions)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    uint8_t *host = b->io_host.map;
    uint32_t n = 0;
    for (int a = 0; a < 5; a++) {
        for (uint32_t l = 0; l < layers; l++) {
            VkDeviceSize off = arrays[a].dst + l * arrays[a].layer_stride, bytes = rows * arrays[a].per_row;
            memcpy(host + off, (const uint8_t *)arrays[a].src + l * bytes, bytes);
            regions[n++] = (VkBufferCopy){off, off, bytes};
        }
    }
    if ((st = vk_transfer_begin(ctx, err)) == RSSM_OK) {
        ctx->vk.vkCmdCopyBuffer(ctx->transfer_cmd, b->io_host.buffer, b->io_dev.buffer, n, regions);
        st = vk_transfer_submit_wait(ctx, err);
    }
    free(regions);
    return st;
}

rssm_status vk_batch_run(void *vctx, void *vbatch, uint32_t rows, const rssm_row_header *hdr, uint32_t *overflow,
                         rssm_error *err)
{
    vk_ctx *ctx = vctx;
    vk_batch *b = vbatch;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    /* The previous submission of a step_cmd has completed (every run waits on
     * its fence before returning), so the header is not in use: rewrite it
     * in place. The memory is host-coherent and vkQueueSubmit makes host
     * writes before it visible to the device. */
    uint32_t *words = b->header.map;
    words[RSSM_HEADER_ROWS] = rows;
    memcpy(words + RSSM_HEADER_WORDS, hdr, (size_t)rows * sizeof *hdr);
    uint32_t *flags = b->overflow.map; /* host-coherent, read after the fence */
    memset(flags, 0, (size_t)rows * sizeof *flags);
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &b->step_cmd[b->step_cmd[1] && vk_step_flushes(b, rows, hdr) ? 1 : 0],
    };
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_mutex_lock(&ctx->queue_lock);
    VkResult r = ctx->vk.vkQueueSubmit(ctx->queue, 1, &si, b->step_fence);
    pthread_mutex_unlock(&ctx->queue_lock);
    if (r != VK_SUCCESS)
        return vk_fail(ctx, r, "vkQueueSubmit (step)", err);
    r = ctx->vk.vkWaitForFences(ctx->device, 1, &b->step_fence, VK_TRUE, UINT64_MAX);
    VkResult r2 = ctx->vk.vkResetFences(ctx->device, 1, &b->step_fence);
    if (r != VK_SUCCESS)
        return vk_fail(ctx, r, "vkWaitForFences (step)", err);
    if (r2 != VK_SUCCESS)
        return vk_fail(ctx, r2, "vkResetFences", err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* Without timestamps, the wall clock of submit-to-fence. */
    b->last_run_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (b->queries) {
        uint64_t ts[2];
        r = ctx->vk.vkGetQueryPoolResults(ctx->device, b->queries, 0, 2, sizeof ts, ts, sizeof ts[0],
                                          VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
        if (r != VK_SUCCESS)
            return vk_fail(ctx, r, "vkGetQueryPoolResults", err);
        uint64_t mask = ctx->timestamp_bits >= 64 ? ~0ull : (1ull << ctx->timestamp_bits) - 1;
        b->last_run_seconds = (double)((ts[1] - ts[0]) & mask) * ctx->props.limits.timestampPeriod * 1e-9;
    }
    if (overflow)
        memcpy(overflow, flags, (size_t)rows * sizeof *flags);
    return vk_check_validation(ctx, err);
}

rssm_status vk_batch_download(void *vctx, void *vbatch, uint32_t rows, void *out, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    vk_batch *b = vbatch;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    if (rows == 0)
        return RSSM_OK;
    const vk_io_layout *io = &b->io;
    const uint32_t layers = b->params.layers;
    const VkDeviceSize bytes = rows * (io->v_bytes / b->params.max_rows);
    VkBufferCopy *regions = malloc(sizeof *regions * layers);
    if (!regions)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    for (uint32_t l = 0; l < layers; l++) {
        VkDeviceSize off = io->out + l * io->v_bytes;
        regions[l] = (VkBufferCopy){off, off, bytes};
    }
    if ((st = vk_transfer_begin(ctx, err)) == RSSM_OK) {
        ctx->vk.vkCmdCopyBuffer(ctx->transfer_cmd, b->io_dev.buffer, b->io_host.buffer, layers, regions);
        st = vk_transfer_submit_wait(ctx, err);
    }
    if (st == RSSM_OK)
        for (uint32_t l = 0; l < layers; l++)
            memcpy((uint8_t *)out + l * bytes, (const uint8_t *)b->io_host.map + regions[l].srcOffset, bytes);
    free(regions);
    return st;
}

double vk_batch_last_run_seconds(void *vctx, void *vbatch)
{
    (void)vctx;
    return ((const vk_batch *)vbatch)->last_run_seconds;
}
