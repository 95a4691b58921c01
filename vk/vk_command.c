/* Command buffers from the device's command pool, and the barriers a
 * step, a timed program (vk_bench.c), a window (vk_window.c) and the
 * decode's dispatch between layers or a window's parts (vk_decode.c)
 * record: one definition, so that a step is recorded the same way
 * everywhere. */
#include "vk_internal.h"

rssm_status vk_cmd_begin(vk_ctx *ctx, VkQueryPool queries, VkCommandBuffer *cb, rssm_error *err)
{
    VkCommandBufferAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = ctx->command_pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = 1,
    };
    VkResult r = ctx->vk.vkAllocateCommandBuffers(ctx->device, &ai, cb);
    if (r != VK_SUCCESS) {
        *cb = VK_NULL_HANDLE;
        return vk_fail(ctx, r, "vkAllocateCommandBuffers", err);
    }
    /* No ONE_TIME_SUBMIT: every buffer here is submitted again and again. */
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if ((r = ctx->vk.vkBeginCommandBuffer(*cb, &bi)) != VK_SUCCESS)
        return vk_fail(ctx, r, "vkBeginCommandBuffer", err);
    if (queries)
        ctx->vk.vkCmdResetQueryPool(*cb, queries, 0, 2);
    return RSSM_OK;
}

void vk_cmd_barrier_before_compute(vk_ctx *ctx, VkCommandBuffer cb)
{
    /* Earlier uploads, slot writes and steps before this step's shaders.
     * (Host writes to the header are visible by the submit itself.) */
    VkMemoryBarrier before = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
    };
    ctx->vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                 VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &before, 0, NULL, 0, NULL);
}

void vk_cmd_barrier_after_compute(vk_ctx *ctx, VkCommandBuffer cb)
{
    /* The step's writes to later copies (download, slot_read) and the host. */
    VkMemoryBarrier after = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_HOST_READ_BIT,
    };
    ctx->vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                 VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &after, 0,
                                 NULL, 0, NULL);
}

void vk_cmd_barrier_compute(vk_ctx *ctx, VkCommandBuffer cb)
{
    const VkMemoryBarrier between = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
    };
    ctx->vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                                 &between, 0, NULL, 0, NULL);
}
