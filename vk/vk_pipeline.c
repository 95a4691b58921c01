/* A compute pipeline of a SPIR-V module through the device's pipeline
 * cache (vk_cache.c, stored after each), with what RSSM_VK_PIPELINE_STATS
 * prints of it, and the descriptor set and pipeline layouts every compute
 * pipeline here is made on. */
#include "vk_internal.h"
#include "error.h"
#include "timing.h"

#include <stdio.h>

rssm_status vk_layouts_create(vk_ctx *ctx, uint32_t bindings, uint32_t first_count, uint32_t push_bytes, bool push,
                              VkDescriptorSetLayout *set_layout, VkPipelineLayout *layout, rssm_error *err)
{
    *set_layout = VK_NULL_HANDLE;
    *layout = VK_NULL_HANDLE;
    VkDescriptorSetLayoutBinding binds[VK_MAX_BINDINGS];
    if (bindings > VK_MAX_BINDINGS)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "vulkan: %u bindings, at most %u", bindings,
                              VK_MAX_BINDINGS);
    for (uint32_t i = 0; i < bindings; i++)
        binds[i] = (VkDescriptorSetLayoutBinding){
            .binding = i,
            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .descriptorCount = i == 0 ? first_count : 1,
            .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
        };
    VkDescriptorSetLayoutCreateInfo lci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .flags = push ? VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR : 0,
        .bindingCount = bindings,
        .pBindings = binds,
    };
    VkResult r = ctx->vk.vkCreateDescriptorSetLayout(ctx->device, &lci, NULL, set_layout);
    if (r != VK_SUCCESS) {
        *set_layout = VK_NULL_HANDLE;
        return vk_fail(ctx, r, "vkCreateDescriptorSetLayout", err);
    }
    VkPushConstantRange pc = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = push_bytes};
    VkPipelineLayoutCreateInfo plci = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
        .setLayoutCount = 1,
        .pSetLayouts = set_layout,
        .pushConstantRangeCount = 1,
        .pPushConstantRanges = &pc,
    };
    if ((r = ctx->vk.vkCreatePipelineLayout(ctx->device, &plci, NULL, layout)) != VK_SUCCESS) {
        *layout = VK_NULL_HANDLE;
        return vk_fail(ctx, r, "vkCreatePipelineLayout", err);
    }
    return RSSM_OK;
}

/* "rssm vulkan pipeline <module> spec=<values>" on stderr, what
 * RSSM_VK_PIPELINE_STATS prints a pipeline's lines with. */
static void print_pipeline(const vk_spirv *spv, const VkSpecializationInfo *spec)
{
    fprintf(stderr, "rssm vulkan pipeline %s", spv->name);
    const uint32_t *sv = spec ? spec->pData : NULL;
    for (uint32_t i = 0; sv && i < spec->dataSize / 4; i++)
        fprintf(stderr, "%s%u", i ? "," : " spec=", sv[i]);
}

/* One line per executable of a pipeline on stderr: the driver compiler's
 * statistics (registers, spills, shared memory...), as it names them. */
static void print_stats(vk_ctx *ctx, const vk_spirv *spv, const VkSpecializationInfo *spec, VkPipeline pipeline)
{
    VkPipelineInfoKHR pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = pipeline};
    VkPipelineExecutablePropertiesKHR exe[4];
    uint32_t n = 4;
    for (uint32_t i = 0; i < n; i++)
        exe[i] = (VkPipelineExecutablePropertiesKHR){.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR};
    if (ctx->vk.vkGetPipelineExecutablePropertiesKHR(ctx->device, &pi, &n, exe) < 0)
        return;
    for (uint32_t e = 0; e < n; e++) {
        print_pipeline(spv, spec);
        fprintf(stderr, " [%s]:", exe[e].name);
        VkPipelineExecutableInfoKHR ei = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                                          .pipeline = pipeline, .executableIndex = e};
        VkPipelineExecutableStatisticKHR st[32];
        uint32_t m = 32;
        for (uint32_t i = 0; i < m; i++)
            st[i] = (VkPipelineExecutableStatisticKHR){.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR};
        if (ctx->vk.vkGetPipelineExecutableStatisticsKHR(ctx->device, &ei, &m, st) < 0)
            m = 0;
        for (uint32_t i = 0; i < m; i++) {
            fprintf(stderr, " %s=", st[i].name);
            switch (st[i].format) {
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: fprintf(stderr, "%u", st[i].value.b32); break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: fprintf(stderr, "%lld", (long long)st[i].value.i64); break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: fprintf(stderr, "%llu", (unsigned long long)st[i].value.u64); break;
            default: fprintf(stderr, "%g", st[i].value.f64); break;
            }
        }
        fprintf(stderr, "\n");
    }
}

rssm_status vk_compute_pipeline(vk_ctx *ctx, const vk_spirv *spv, const VkSpecializationInfo *spec,
                                const void *stage_next, VkPipelineShaderStageCreateFlags stage_flags,
                                VkPipelineLayout layout, VkPipeline *out, rssm_error *err)
{
    *out = VK_NULL_HANDLE;
    VkShaderModuleCreateInfo mci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
        .codeSize = spv->size,
        .pCode = spv->words,
    };
    VkShaderModule module;
    VkResult r = ctx->vk.vkCreateShaderModule(ctx->device, &mci, NULL, &module);
    if (r != VK_SUCCESS)
        return vk_fail(ctx, r, "vkCreateShaderModule", err);
    VkComputePipelineCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {
            .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
            .pNext = stage_next,
            .flags = stage_flags,
            .stage = VK_SHADER_STAGE_COMPUTE_BIT,
            .module = module,
            .pName = "main",
            .pSpecializationInfo = spec,
        },
        /* DISPATCH_BASE: a benchmark dispatches one layer at a time (vk_batch.c). */
        .flags = VK_PIPELINE_CREATE_DISPATCH_BASE_BIT |
                 (ctx->pipeline_stats ? VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR : 0),
        .layout = layout,
    };
    const double t0 = ctx->pipeline_times ? rssm_now_seconds() : 0.0;
    r = ctx->vk.vkCreateComputePipelines(ctx->device, ctx->pipeline_cache, 1, &pci, NULL, out);
    ctx->vk.vkDestroyShaderModule(ctx->device, module, NULL);
    if (r != VK_SUCCESS) {
        *out = VK_NULL_HANDLE;
        return vk_fail(ctx, r, "vkCreateComputePipelines", err);
    }
    if (ctx->pipeline_times) {
        print_pipeline(spv, spec);
        fprintf(stderr, ": %.3f s\n", rssm_now_seconds() - t0);
    }
    if (ctx->pipeline_stats)
        print_stats(ctx, spv, spec, *out);
    vk_cache_store(ctx);
    return RSSM_OK;
}
