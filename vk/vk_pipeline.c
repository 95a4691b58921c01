/* Choosing a decode module for a model and specialising it into a compute
 * pipeline (through the context's pipeline cache). */
#include "vk_internal.h"
#include "error.h"

#include <stdio.h>

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

bool vk_uses_tiles(const vk_ctx *ctx, const rssm_model *m)
{
    return m->replay && ctx->kernels != VK_KERNELS_PORTABLE;
}

/* The portable flush pipeline's d_j staging (s_dring), in bytes. */
static size_t dring_bytes(const rssm_model *m) { return (size_t)(m->ring_len - 1) * m->head_v * 4; }

/* s_dring where it fits: the portable replay kernel, within the device's
 * shared memory with everything else. */
static uint32_t stage_d(const vk_ctx *ctx, const rssm_model *m)
{
    return m->replay && !vk_uses_tiles(ctx, m) && m->ring_len > 1 &&
           vk_shared_bytes(ctx, m) + dring_bytes(m) <= ctx->props.limits.maxComputeSharedMemorySize;
}

size_t vk_shared_bytes(const vk_ctx *ctx, const rssm_model *m)
{
    const size_t K = m->head_k, V = m->head_v, L = m->replay ? m->ring_len : 1;
    const size_t S = RSSM_VK_SUBGROUPS;
    size_t bytes = 6 * K * 4 + 2 * V * 4 + S * 16; /* s_q4 s_k4 s_g4 s_ag4 s_wq4 s_wk4, s_d s_o, s_red */
    if (!m->replay)
        return bytes;
    bytes += L * 8; /* s_c */
    if (!vk_uses_tiles(ctx, m))
        return bytes + L * K * 4; /* s_kk4 */
    const size_t tm = ctx->tile_m, tn = ctx->tile_n, tk = ctx->tile_k;
    const size_t pv = round_up(V, tm), pj = round_up(L, tk), pk = round_up(K, tn);
    if (ctx->kernels == VK_KERNELS_COOPMAT) /* fp16 staging, fp32 s_kk, accumulator scratch */
        return bytes + pv * pj * 2 + pj * pk * 2 + L * K * 4 + S * tm * tn * 4;
    return bytes + pv * pj * 4 + pj * pk * 4 + S * (tm * tk + tk * tn) * 4;
}

static const vk_spirv *module_for(const vk_ctx *ctx, const rssm_model *m)
{
    if (!m->replay)
        return &vk_spirv_decode_packed;
    if (!vk_uses_tiles(ctx, m))
        return &vk_spirv_decode_replay;
    switch (ctx->kernels) {
    case VK_KERNELS_COOPMAT: return &vk_spirv_decode_replay_cm;
    case VK_KERNELS_COOPMAT_EMULATED: return &vk_spirv_decode_replay_cm_emu;
    default: return &vk_spirv_decode_replay;
    }
}


rssm_status vk_layouts_create(vk_ctx *ctx, uint32_t bindings, uint32_t first_count, uint32_t push_bytes,
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
        fprintf(stderr, "rssm vulkan pipeline %s", spv->name);
        const uint32_t *sv = spec ? spec->pData : NULL;
        for (uint32_t i = 0; sv && i < spec->dataSize / 4; i++)
            fprintf(stderr, "%s%u", i ? "," : " spec=", sv[i]);
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
    r = ctx->vk.vkCreateComputePipelines(ctx->device, ctx->pipeline_cache, 1, &pci, NULL, out);
    ctx->vk.vkDestroyShaderModule(ctx->device, module, NULL);
    if (r != VK_SUCCESS) {
        *out = VK_NULL_HANDLE;
        return vk_fail(ctx, r, "vkCreateComputePipelines", err);
    }
    if (ctx->pipeline_stats)
        print_stats(ctx, spv, spec, *out);
    vk_cache_store(ctx);
    return RSSM_OK;
}

rssm_status vk_pipeline_create(vk_ctx *ctx, const vk_pool *pool, VkPipelineLayout layout, bool flush_rows,
                               VkPipeline *out, rssm_error *err)
{
    const rssm_model *m = &pool->model;
    const vk_spirv *spv = module_for(ctx, m);
    if (spv->size == 0)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: %s was not built into this rssm", spv->name);
    uint32_t values[RSSM_VK_SPEC_COUNT] = {
        [RSSM_VK_SPEC_GATE_KIND] = (uint32_t)m->gate_kind,
        [RSSM_VK_SPEC_HEAD_K] = m->head_k,
        [RSSM_VK_SPEC_HEAD_V] = m->head_v,
        [RSSM_VK_SPEC_RING_LEN] = m->replay ? m->ring_len : 1u,
        [RSSM_VK_SPEC_SG_SIZE] = ctx->subgroup_size,
        [RSSM_VK_SPEC_STATE_DT] = (uint32_t)m->state_dtype,
        /* The packed module has no ring: one value, so packed models that
         * differ only in their (unused) ring dtype share a pipeline. */
        [RSSM_VK_SPEC_RING_DT] = m->replay ? (uint32_t)m->ring_dtype : (uint32_t)RSSM_DTYPE_F32,
        [RSSM_VK_SPEC_IO_DT] = (uint32_t)m->io_dtype,
        [RSSM_VK_SPEC_TILE_M] = ctx->tile_m,
        [RSSM_VK_SPEC_TILE_N] = ctx->tile_n,
        [RSSM_VK_SPEC_TILE_K] = ctx->tile_k,
        [RSSM_VK_SPEC_WG_SIZE] = ctx->subgroup_size * RSSM_VK_SUBGROUPS,
        [RSSM_VK_SPEC_FLUSH_ROWS] = flush_rows || !m->replay,
        [RSSM_VK_SPEC_STAGE_D] = stage_d(ctx, m),
        [RSSM_VK_SPEC_SLOTS_PER_BUFFER] = pool->slots_per_buffer,
    };
    VkSpecializationMapEntry entries[RSSM_VK_SPEC_COUNT];
    for (uint32_t i = 0; i < RSSM_VK_SPEC_COUNT; i++)
        entries[i] = (VkSpecializationMapEntry){.constantID = i, .offset = 4 * i, .size = 4};
    VkSpecializationInfo spec = {
        .mapEntryCount = RSSM_VK_SPEC_COUNT,
        .pMapEntries = entries,
        .dataSize = sizeof values,
        .pData = values,
    };
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo req = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = ctx->subgroup_size,
    };
    return vk_compute_pipeline(ctx, spv, &spec, ctx->subgroup_size_control ? &req : NULL,
                               ctx->subgroup_size_control ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT
                                                          : 0,
                               layout, out, err);
}
