/* The decode pipeline layouts and the decode and window pipelines of a
 * device, made once and shared by every batch and layer object that needs
 * the same one, for as long as the backend lives (vk_ctx_destroy destroys
 * them with the device). Creating a pipeline is 0.1-0.6 s of host work on
 * a CPU device (lavapipe's NIR passes, the validation layer's checks)
 * however warm the driver's shader cache, and the tests make thousands of
 * batches of a few dozen models (docs/testing.md); an engine's layer
 * objects of one model are as many requests for the same two or three
 * pipelines. */
#include "error.h"
#include "vk_internal.h"

#include <stdlib.h>
#include <string.h>

rssm_status vk_shared_layouts(vk_ctx *ctx, bool push, VkDescriptorSetLayout *set_layout, VkPipelineLayout *layout,
                              rssm_error *err)
{
    rssm_status st = RSSM_OK;
    pthread_mutex_lock(&ctx->shared_lock);
    const int i = push ? 1 : 0;
    if (!ctx->shared_layout[i])
        st = vk_layouts_create(ctx, BIND_COUNT, RSSM_VK_POOL_BUFFERS, vk_decode_push_bytes(ctx), push,
                               &ctx->shared_set_layout[i], &ctx->shared_layout[i], err);
    *set_layout = ctx->shared_set_layout[i];
    *layout = ctx->shared_layout[i];
    pthread_mutex_unlock(&ctx->shared_lock);
    return st;
}

rssm_status vk_shared_pipeline(vk_ctx *ctx, const vk_spirv *spv, const uint32_t *spec, const void *stage_next,
                               VkPipelineShaderStageCreateFlags stage_flags, VkPipelineLayout layout, VkPipeline *out,
                               rssm_error *err)
{
    *out = VK_NULL_HANDLE;
    rssm_status st = RSSM_OK;
    pthread_mutex_lock(&ctx->shared_lock);
    for (size_t i = 0; i < ctx->shared_count; i++) {
        const vk_shared_entry *e = &ctx->shared[i];
        if (e->spv == spv && e->layout == layout && memcmp(e->spec, spec, sizeof e->spec) == 0) {
            *out = e->pipeline;
            goto done;
        }
    }
    if (ctx->shared_count == ctx->shared_cap) {
        const size_t cap = ctx->shared_cap ? 2 * ctx->shared_cap : 16;
        vk_shared_entry *grown = realloc(ctx->shared, cap * sizeof *grown);
        if (!grown) {
            st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
            goto done;
        }
        ctx->shared = grown;
        ctx->shared_cap = cap;
    }
    VkSpecializationMapEntry entries[RSSM_VK_SPEC_COUNT];
    for (uint32_t i = 0; i < RSSM_VK_SPEC_COUNT; i++)
        entries[i] = (VkSpecializationMapEntry){.constantID = i, .offset = 4 * i, .size = 4};
    const VkSpecializationInfo info = {
        .mapEntryCount = RSSM_VK_SPEC_COUNT,
        .pMapEntries = entries,
        .dataSize = RSSM_VK_SPEC_COUNT * sizeof(uint32_t),
        .pData = spec,
    };
    if ((st = vk_compute_pipeline(ctx, spv, &info, stage_next, stage_flags, layout, out, err)) != RSSM_OK)
        goto done;
    vk_shared_entry *e = &ctx->shared[ctx->shared_count++];
    e->spv = spv;
    e->layout = layout;
    memcpy(e->spec, spec, sizeof e->spec);
    e->pipeline = *out;
done:
    pthread_mutex_unlock(&ctx->shared_lock);
    return st;
}
