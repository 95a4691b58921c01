/* The Vulkan backend's ops table, the top of vk/ (vk/README.md, "Files"):
 * device, pool and slot transfers here; batches in vk_batch.c, their
 * windows in vk_window.c, layers in vk_layer.c, the benchmark entries in
 * vk_bench.c. */
#include "vk_internal.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>

static rssm_status vk_create(const char *variant, int device, void **ctx, rssm_error *err)
{
    /* Vulkan numbers its devices its own way, not as CUDA does
     * (rssm_backend_create_on_device): RSSM_VK_DEVICE picks one. */
    if (device >= 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "%s: device %d: the vulkan backend takes -1 (RSSM_VK_DEVICE picks its device, "
                              "vk/README.md)", variant, device);
    return vk_ctx_create(variant, (vk_ctx **)ctx, err);
}

static void vk_destroy(void *ctx) { vk_ctx_destroy(ctx); }

/* A batch, then the window its verifies made (vk_window.c, above the
 * batch): vk_batch_destroy waits for the queue, after which nothing of the
 * window is in use. */
static void vk_batch_destroy_op(void *ctx, void *batch)
{
    vk_window *w = batch ? ((vk_batch *)batch)->window : NULL;
    vk_batch_destroy(ctx, batch);
    vk_window_destroy(ctx, w);
}

static const char *vk_device(void *ctx) { return ((vk_ctx *)ctx)->device_line; }

static void vk_describe_op(void *ctx, char *buf, size_t size) { vk_describe(ctx, buf, size); }

static rssm_status vk_supports(void *vctx, const rssm_model *m, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    if ((st = rssm_model_validate(m, err)) != RSSM_OK)
        return st;
    const VkPhysicalDeviceLimits *lim = &ctx->props.limits;
    rssm_kernel_params params;
    vk_model_params(m, &params);
    size_t shared = vk_shared_bytes(ctx, &params);
    if (shared > lim->maxComputeSharedMemorySize)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              "vulkan: K=%u, V=%u, L=%u needs %zu bytes of shared memory per workgroup; "
                              "%s offers %u (use a shorter ring or smaller heads)",
                              m->head_k, m->head_v, m->replay ? m->ring_len : 1u, shared, ctx->props.deviceName,
                              lim->maxComputeSharedMemorySize);
    if (m->num_v_heads > lim->maxComputeWorkGroupCount[0] || m->layers > lim->maxComputeWorkGroupCount[2])
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              "vulkan: HV=%u heads x %u layers exceed the device's dispatch limits (%u, %u)",
                              m->num_v_heads, m->layers, lim->maxComputeWorkGroupCount[0],
                              lim->maxComputeWorkGroupCount[2]);
    if (vk_uses_tiles(ctx, &params)) {
        /* Tiles are distributed over whole subgroups. */
        uint32_t s = ctx->subgroup_size;
        if ((ctx->tile_m * ctx->tile_n) % s || (ctx->tile_m * ctx->tile_k) % s || (ctx->tile_k * ctx->tile_n) % s)
            return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                                  "vulkan: %ux%ux%u tiles do not split over subgroups of %u", ctx->tile_m,
                                  ctx->tile_n, ctx->tile_k, s);
    }
    return rssm_clear_error(err);
}

static rssm_status vk_pool_create(void *vctx, const rssm_slot_layout *layout, uint32_t slots, void **out,
                                  rssm_error *err)
{
    vk_ctx *ctx = vctx;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    /* Whole slots per buffer, as many as one descriptor binds (vk_abi.h; a
     * 32-bit range, so the kernels' 32-bit word indices always reach). */
    const uint64_t range = ctx->props.limits.maxStorageBufferRange;
    const uint64_t per = range / layout->slot_bytes;
    if (per == 0)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              "vulkan: a slot is %llu bytes; %s binds at most %llu bytes per buffer",
                              (unsigned long long)layout->slot_bytes, ctx->props.deviceName,
                              (unsigned long long)range);
    const uint32_t spb = per < slots ? (uint32_t)per : slots;
    const uint32_t buffers = (slots + spb - 1) / spb;
    if (buffers > RSSM_VK_POOL_BUFFERS)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              "vulkan: a pool of %u slots of %llu bytes needs %u buffers of at most %llu bytes "
                              "(%s); the kernels take %u",
                              slots, (unsigned long long)layout->slot_bytes, buffers, (unsigned long long)range,
                              ctx->props.deviceName, RSSM_VK_POOL_BUFFERS);
    vk_pool *p = calloc(1, sizeof *p);
    if (!p)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    p->layout = *layout;
    p->slots = slots;
    p->slots_per_buffer = spb;
    for (uint32_t i = 0; i < buffers && st == RSSM_OK; i++) {
        const uint32_t n = i + 1 < buffers ? spb : slots - i * spb;
        if ((st = vk_buffer_create(ctx, (VkDeviceSize)n * layout->slot_bytes, VK_MEMORY_DEVICE, &p->bufs[i], err)) ==
            RSSM_OK)
            p->buffers = i + 1;
    }
    if (st == RSSM_OK)
        st = vk_buffer_create(ctx, layout->slot_bytes, VK_MEMORY_HOST, &p->staging, err);
    if (st != RSSM_OK) {
        for (uint32_t i = 0; i < p->buffers; i++)
            vk_buffer_destroy(ctx, &p->bufs[i]);
        free(p);
        return st;
    }
    *out = p;
    return rssm_clear_error(err);
}

static void vk_pool_destroy(void *vctx, void *vpool)
{
    vk_ctx *ctx = vctx;
    vk_pool *p = vpool;
    if (!p)
        return;
    pthread_mutex_lock(&ctx->queue_lock);
    ctx->vk.vkQueueWaitIdle(ctx->queue);
    pthread_mutex_unlock(&ctx->queue_lock);
    vk_buffer_destroy(ctx, &p->staging);
    for (uint32_t i = 0; i < p->buffers; i++)
        vk_buffer_destroy(ctx, &p->bufs[i]);
    free(p);
}

static rssm_status slot_copy(vk_ctx *ctx, vk_pool *p, uint32_t slot, bool to_host, rssm_error *err)
{
    rssm_status st = vk_transfer_begin(ctx, err);
    if (st != RSSM_OK)
        return st;
    const VkBuffer buf = p->bufs[slot / p->slots_per_buffer].buffer;
    const VkDeviceSize off = (VkDeviceSize)(slot % p->slots_per_buffer) * p->layout.slot_bytes;
    if (to_host) {
        VkBufferCopy region = {off, 0, p->layout.slot_bytes};
        ctx->vk.vkCmdCopyBuffer(ctx->transfer_cmd, buf, p->staging.buffer, 1, &region);
    } else {
        VkBufferCopy region = {0, off, p->layout.slot_bytes};
        ctx->vk.vkCmdCopyBuffer(ctx->transfer_cmd, p->staging.buffer, buf, 1, &region);
    }
    return vk_transfer_submit_wait(ctx, err);
}

static rssm_status vk_slot_read(void *vctx, void *vpool, uint32_t slot, void *bytes, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    vk_pool *p = vpool;
    rssm_status st = vk_check_validation(ctx, err);
    if (st == RSSM_OK)
        st = slot_copy(ctx, p, slot, true, err);
    if (st == RSSM_OK)
        memcpy(bytes, p->staging.map, p->layout.slot_bytes);
    return st;
}

static rssm_status vk_slot_write(void *vctx, void *vpool, uint32_t slot, const void *bytes, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    vk_pool *p = vpool;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    memcpy(p->staging.map, bytes, p->layout.slot_bytes);
    return slot_copy(ctx, p, slot, false, err);
}

/* The `_cm` kernels round the flush's tile operands to fp16; they matter
 * only when a flush can find ring entries (replay with L > 1). */
static rssm_dtype vk_matrix_dtype(void *vctx, const rssm_model *m)
{
    rssm_kernel_params params;
    vk_model_params(m, &params);
    return vk_uses_tiles(vctx, &params) ? RSSM_DTYPE_F16 : RSSM_DTYPE_F32;
}

static const char *vk_kernels_variant(void *vctx)
{
    switch (((const vk_ctx *)vctx)->kernels) {
    case VK_KERNELS_COOPMAT: return "vulkan:coopmat";
    case VK_KERNELS_COOPMAT_EMULATED: return "vulkan:coopmat-emulated";
    default: return "vulkan:portable";
    }
}

static const char *const vk_variants[] = {
    "vulkan",                  /* the portable kernels (docs/design.md §8) */
    "vulkan:portable",
    "vulkan:coopmat",          /* unavailable without device cooperative matrices */
    "vulkan:coopmat-emulated", /* the _cm kernels over emulated tiles, any device */
    NULL,
};

const rssm_backend_ops rssm_vulkan_backend_ops = {
    .name = "vulkan",
    .variants = vk_variants,
    .create = vk_create,
    .destroy = vk_destroy,
    .device = vk_device,
    .describe = vk_describe_op,
    .supports = vk_supports,
    .pool_create = vk_pool_create,
    .pool_destroy = vk_pool_destroy,
    .slot_read = vk_slot_read,
    .slot_write = vk_slot_write,
    .batch_create = vk_batch_create,
    .batch_destroy = vk_batch_destroy_op,
    .batch_set_gate_params = vk_batch_set_gate_params,
    .batch_upload = vk_batch_upload,
    .batch_run = vk_batch_run,
    .batch_download = vk_batch_download,
    .batch_last_run_seconds = vk_batch_last_run_seconds,
    .batch_time_steps = vk_batch_time_steps,
    .batch_verify = vk_batch_verify,
    .copy_bandwidth = vk_copy_bandwidth,
    .pool_inplace_seconds = vk_pool_inplace_seconds,
    .matrix_dtype = vk_matrix_dtype,
    .layer_check = vk_layer_check,
    .layer_create = vk_layer_create,
    .layer_destroy = vk_layer_destroy,
    .layer_record = vk_layer_record,
    .layer_record_advance = vk_layer_record_advance,
    .vulkan_handles = vk_vulkan_handles,
    .kernels = vk_kernels_variant,
};
