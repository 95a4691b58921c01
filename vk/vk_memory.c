/* Buffers, and the one-shot transfers that move bytes between host-visible
 * staging and device-local memory. */
#include "vk_internal.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>

static int find_memory_type(const vk_ctx *ctx, uint32_t type_bits, VkMemoryPropertyFlags need,
                            VkMemoryPropertyFlags prefer)
{
    int fallback = -1;
    for (uint32_t i = 0; i < ctx->mem_props.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = ctx->mem_props.memoryTypes[i].propertyFlags;
        if (!(type_bits & (1u << i)) || (f & need) != need)
            continue;
        if ((f & prefer) == prefer)
            return (int)i;
        if (fallback < 0)
            fallback = (int)i;
    }
    return fallback;
}

/* Device buffers are device-local storage buffers that transfers can fill
 * and read; host buffers are coherent and mapped for their lifetime, so
 * host writes need no flush and device writes (after a fence and a barrier
 * to the host) need no invalidate. */
rssm_status vk_buffer_create(vk_ctx *ctx, VkDeviceSize size, vk_memory_kind kind, vk_buffer *out,
                             rssm_error *err)
{
    memset(out, 0, sizeof *out);
    VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = size ? size : 4,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkResult r = ctx->vk.vkCreateBuffer(ctx->device, &bci, NULL, &out->buffer);
    if (r != VK_SUCCESS)
        return vk_fail(ctx, r, "vkCreateBuffer", err);
    VkMemoryRequirements req;
    ctx->vk.vkGetBufferMemoryRequirements(ctx->device, out->buffer, &req);
    const VkMemoryPropertyFlags mapped = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int type = kind == VK_MEMORY_DEVICE
                   ? find_memory_type(ctx, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0)
                   : find_memory_type(ctx, req.memoryTypeBits, mapped,
                                      kind == VK_MEMORY_HEADER ? VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
                                                               : VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (type < 0 && kind == VK_MEMORY_DEVICE)
        type = find_memory_type(ctx, req.memoryTypeBits, 0, 0);
    if (type < 0) {
        vk_buffer_destroy(ctx, out);
        return rssm_set_error(err, RSSM_ERR_DEVICE, "vulkan: no suitable memory type for a %s buffer",
                              kind == VK_MEMORY_DEVICE ? "device" : "host-visible");
    }
    VkMemoryAllocateInfo mai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .allocationSize = req.size,
        .memoryTypeIndex = (uint32_t)type,
    };
    r = ctx->vk.vkAllocateMemory(ctx->device, &mai, NULL, &out->memory);
    if (r != VK_SUCCESS) {
        vk_buffer_destroy(ctx, out);
        return r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                   ? rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of %s memory for %llu bytes",
                                    kind == VK_MEMORY_DEVICE ? "device" : "host-visible",
                                    (unsigned long long)size)
                   : vk_fail(ctx, r, "vkAllocateMemory", err);
    }
    if ((r = ctx->vk.vkBindBufferMemory(ctx->device, out->buffer, out->memory, 0)) != VK_SUCCESS) {
        vk_buffer_destroy(ctx, out);
        return vk_fail(ctx, r, "vkBindBufferMemory", err);
    }
    if (kind != VK_MEMORY_DEVICE &&
        (r = ctx->vk.vkMapMemory(ctx->device, out->memory, 0, VK_WHOLE_SIZE, 0, &out->map)) != VK_SUCCESS) {
        vk_buffer_destroy(ctx, out);
        return vk_fail(ctx, r, "vkMapMemory", err);
    }
    out->size = size;
    return RSSM_OK;
}

void vk_buffer_destroy(vk_ctx *ctx, vk_buffer *b)
{
    if (b->buffer)
        ctx->vk.vkDestroyBuffer(ctx->device, b->buffer, NULL);
    if (b->memory)
        ctx->vk.vkFreeMemory(ctx->device, b->memory, NULL); /* also unmaps */
    memset(b, 0, sizeof *b);
}

static void full_barrier(vk_ctx *ctx, VkCommandBuffer cb, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access)
{
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = dst_access,
    };
    ctx->vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                 dst_stage, 0, 1, &mb, 0, NULL, 0, NULL);
}

rssm_status vk_transfer_begin(vk_ctx *ctx, rssm_error *err)
{
    pthread_mutex_lock(&ctx->queue_lock);
    VkResult r = ctx->vk.vkResetCommandBuffer(ctx->transfer_cmd, 0);
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    if (r == VK_SUCCESS)
        r = ctx->vk.vkBeginCommandBuffer(ctx->transfer_cmd, &bi);
    if (r != VK_SUCCESS) {
        pthread_mutex_unlock(&ctx->queue_lock);
        return vk_fail(ctx, r, "vkBeginCommandBuffer", err);
    }
    /* Earlier steps' shader writes (the pool) before these copies. */
    full_barrier(ctx, ctx->transfer_cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                 VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    return RSSM_OK;
}

static rssm_status submit_wait_locked(vk_ctx *ctx, rssm_error *err)
{
    /* The copies' results to the host (staging reads) and to later shaders. */
    full_barrier(ctx, ctx->transfer_cmd, VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                 VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    VkResult r = ctx->vk.vkEndCommandBuffer(ctx->transfer_cmd);
    if (r != VK_SUCCESS)
        return vk_fail(ctx, r, "vkEndCommandBuffer", err);
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &ctx->transfer_cmd,
    };
    if ((r = ctx->vk.vkQueueSubmit(ctx->queue, 1, &si, ctx->transfer_fence)) != VK_SUCCESS)
        return vk_fail(ctx, r, "vkQueueSubmit (transfer)", err);
    r = ctx->vk.vkWaitForFences(ctx->device, 1, &ctx->transfer_fence, VK_TRUE, UINT64_MAX);
    VkResult r2 = ctx->vk.vkResetFences(ctx->device, 1, &ctx->transfer_fence);
    if (r != VK_SUCCESS)
        return vk_fail(ctx, r, "vkWaitForFences (transfer)", err);
    if (r2 != VK_SUCCESS)
        return vk_fail(ctx, r2, "vkResetFences", err);
    return RSSM_OK;
}

rssm_status vk_transfer_submit_wait(vk_ctx *ctx, rssm_error *err)
{
    rssm_status st = submit_wait_locked(ctx, err);
    pthread_mutex_unlock(&ctx->queue_lock);
    return st == RSSM_OK ? vk_check_validation(ctx, err) : st;
}

