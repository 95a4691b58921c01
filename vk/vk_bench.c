/* The benchmark entries (docs/design.md §7): a program of many steps recorded
 * as one command buffer, and the in-place pass over a pool
 * (shaders/inplace.comp). Each is run once untimed and then `reps` times, and
 * reports the median of the timed runs: device timestamps around the work
 * when the queue has them, else the wall clock from submit to fence.
 *
 * Everything here is made per call and freed before returning: a benchmark
 * calls these a few times per configuration, and nothing is left on the
 * batch or the context to go stale. */
#include "vk_internal.h"
#include "error.h"
#include "timing.h"

#include <stdlib.h>
#include <string.h>

static VkDeviceSize align_up(VkDeviceSize x, VkDeviceSize a) { return (x + a - 1) / a * a; }

/* What one timed program owns. Zero-initialised, so bench_free can free
 * whatever was made before a failure. */
typedef struct bench {
    vk_buffer headers;                  /* time_steps: one header per step */
    VkDescriptorSetLayout set_layout;   /* inplace: its own layout ... */
    VkPipelineLayout pipeline_layout;
    VkPipeline pipeline;                /* ... and pipeline */
    VkDescriptorPool descriptor_pool;
    VkDescriptorSet *sets;              /* time_steps: one per step; pass: one per segment */
    VkQueryPool queries;                /* 2 timestamps; none without timestamps */
    VkFence fence;
    VkCommandBuffer cmd;
    bool in_flight;                     /* submitted, not yet seen complete */
    double *times;                      /* reps */
} bench;

static void bench_free(vk_ctx *ctx, bench *o)
{
    pthread_mutex_lock(&ctx->queue_lock);
    /* Only after a failed wait: the program may still be running. */
    if (o->in_flight)
        ctx->vk.vkQueueWaitIdle(ctx->queue);
    if (o->cmd) /* the command pool is shared: freed under the lock */
        ctx->vk.vkFreeCommandBuffers(ctx->device, ctx->command_pool, 1, &o->cmd);
    pthread_mutex_unlock(&ctx->queue_lock);
    if (o->fence)
        ctx->vk.vkDestroyFence(ctx->device, o->fence, NULL);
    if (o->queries)
        ctx->vk.vkDestroyQueryPool(ctx->device, o->queries, NULL);
    if (o->descriptor_pool) /* frees the sets */
        ctx->vk.vkDestroyDescriptorPool(ctx->device, o->descriptor_pool, NULL);
    if (o->pipeline)
        ctx->vk.vkDestroyPipeline(ctx->device, o->pipeline, NULL);
    if (o->pipeline_layout)
        ctx->vk.vkDestroyPipelineLayout(ctx->device, o->pipeline_layout, NULL);
    if (o->set_layout)
        ctx->vk.vkDestroyDescriptorSetLayout(ctx->device, o->set_layout, NULL);
    vk_buffer_destroy(ctx, &o->headers);
    free(o->sets);
    free(o->times);
    memset(o, 0, sizeof *o);
}

/* The fence, the query pool (when the queue has timestamps) and room for
 * the timed runs. */
static rssm_status bench_init(vk_ctx *ctx, bench *o, uint32_t reps, rssm_error *err)
{
    if (!(o->times = malloc(reps * sizeof *o->times)))
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkResult r = ctx->vk.vkCreateFence(ctx->device, &fci, NULL, &o->fence);
    if (r != VK_SUCCESS) {
        o->fence = VK_NULL_HANDLE;
        return vk_fail(ctx, r, "vkCreateFence", err);
    }
    if (ctx->timestamp_bits) {
        VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                     .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = 2};
        if ((r = ctx->vk.vkCreateQueryPool(ctx->device, &qci, NULL, &o->queries)) != VK_SUCCESS) {
            o->queries = VK_NULL_HANDLE;
            return vk_fail(ctx, r, "vkCreateQueryPool", err);
        }
    }
    return RSSM_OK;
}

/* Takes queue_lock (the command pool is shared), allocates and begins the
 * program's command buffer and resets its timestamps. On success the caller
 * records and calls bench_record_end, which releases the lock. */
static rssm_status bench_record_begin(vk_ctx *ctx, bench *o, rssm_error *err)
{
    pthread_mutex_lock(&ctx->queue_lock);
    rssm_status st = vk_cmd_begin(ctx, o->queries, &o->cmd, err);
    if (st != RSSM_OK)
        pthread_mutex_unlock(&ctx->queue_lock);
    return st;
}

static rssm_status bench_record_end(vk_ctx *ctx, bench *o, rssm_error *err)
{
    VkResult r = ctx->vk.vkEndCommandBuffer(o->cmd);
    pthread_mutex_unlock(&ctx->queue_lock);
    return r == VK_SUCCESS ? RSSM_OK : vk_fail(ctx, r, "vkEndCommandBuffer", err);
}

/* Timestamp 0 before the timed work (after the barrier that waits for
 * earlier work, as the batch's own step records it), 1 after it. */
static void bench_timestamp(vk_ctx *ctx, bench *o, uint32_t index)
{
    if (o->queries)
        ctx->vk.vkCmdWriteTimestamp(o->cmd, index ? VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
                                                  : VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT,
                                    o->queries, index);
}

/* One run of the program: submit, wait; *wall is its wall time. */
static rssm_status submit_wait(vk_ctx *ctx, bench *o, double *wall, rssm_error *err)
{
    const VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &o->cmd,
    };
    const double t0 = rssm_now_seconds();
    pthread_mutex_lock(&ctx->queue_lock);
    VkResult r = ctx->vk.vkQueueSubmit(ctx->queue, 1, &si, o->fence);
    pthread_mutex_unlock(&ctx->queue_lock);
    if (r != VK_SUCCESS)
        return vk_fail(ctx, r, "vkQueueSubmit (benchmark)", err);
    o->in_flight = true;
    r = ctx->vk.vkWaitForFences(ctx->device, 1, &o->fence, VK_TRUE, UINT64_MAX);
    if (r != VK_SUCCESS)
        return vk_fail(ctx, r, "vkWaitForFences (benchmark)", err);
    o->in_flight = false;
    *wall = rssm_now_seconds() - t0;
    if ((r = ctx->vk.vkResetFences(ctx->device, 1, &o->fence)) != VK_SUCCESS)
        return vk_fail(ctx, r, "vkResetFences", err);
    return RSSM_OK;
}

/* Untimed runs (first-use costs: page faults, caches, lazy driver work;
 * then, when `warm` and on a GPU, the clocks: rssm_warming_up), then `reps`
 * timed ones;
 * *timing is their median and minimum. */
static rssm_status bench_run(vk_ctx *ctx, bench *o, uint32_t reps, bool warm, const char *what,
                             rssm_timing *timing, rssm_error *err)
{
    const uint64_t mask = ctx->timestamp_bits >= 64 ? ~0ull : (1ull << ctx->timestamp_bits) - 1;
    const double started = rssm_now_seconds();
    uint32_t untimed = 0;
    double wall;
    rssm_status st;
    warm = warm && !vk_cpu_device(ctx); /* no clocks to ramp up */
    for (; rssm_warming_up(warm, untimed, started); untimed++)
        if ((st = submit_wait(ctx, o, &wall, err)) != RSSM_OK)
            return st;
    for (uint32_t i = 0; i < reps; i++) {
        if ((st = submit_wait(ctx, o, &wall, err)) != RSSM_OK)
            return st;
        o->times[i] = wall;
        if (o->queries) {
            uint64_t ts[2];
            const VkResult r = ctx->vk.vkGetQueryPoolResults(ctx->device, o->queries, 0, 2, sizeof ts, ts,
                                                             sizeof ts[0],
                                                             VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
            if (r != VK_SUCCESS)
                return vk_fail(ctx, r, "vkGetQueryPoolResults", err);
            o->times[i] = (double)((ts[1] - ts[0]) & mask) * ctx->props.limits.timestampPeriod * 1e-9;
        }
    }
    const rssm_timing t = rssm_timing_of(o->times, reps, untimed + reps);
    /* A benchmark divides by it. */
    if (!(t.min_seconds > 0.0))
        return rssm_set_error(err, RSSM_ERR_DEVICE, "vulkan: the %s took no measurable time", what);
    *timing = t;
    return RSSM_OK;
}

/* ------------------------------------------------------ batch_time_steps */

/* The steps of a program differ only in their header, so each step gets
 * its own copy of the header and a descriptor set that sees that copy; the
 * command buffer then holds every step, and one submit runs the program
 * with no host work between steps (docs/design.md §7). */
static rssm_status time_steps(vk_ctx *ctx, vk_batch *b, bench *o, uint32_t rows, uint32_t steps,
                              const rssm_row_header *hdr, uint32_t reps, rssm_timing *timing, rssm_error *err)
{
    const VkPhysicalDeviceLimits *lim = &ctx->props.limits;
    const VkDeviceSize header_bytes = RSSM_HEADER_BYTES(b->params.max_rows);
    const VkDeviceSize align = lim->minStorageBufferOffsetAlignment > 16 ? lim->minStorageBufferOffsetAlignment : 16;
    const VkDeviceSize stride = align_up(header_bytes, align);
    rssm_status st = bench_init(ctx, o, reps, err);
    if (st != RSSM_OK)
        return st;
    if ((st = vk_buffer_create(ctx, stride * steps, VK_MEMORY_HEADER, &o->headers, err)) != RSSM_OK)
        return st;
    /* Host-coherent and written before the first submit, which makes the
     * writes visible to the device. Unused words stay zero, as in the
     * batch's own header. */
    uint8_t *map = o->headers.map;
    memset(map, 0, (size_t)(stride * steps));
    for (uint32_t s = 0; s < steps; s++) {
        uint32_t *words = (uint32_t *)(void *)(map + s * stride);
        words[RSSM_HEADER_ROWS] = rows;
        memcpy(words + RSSM_HEADER_WORDS, hdr + (size_t)s * rows, (size_t)rows * sizeof *hdr);
    }
    if (!(o->sets = malloc(steps * sizeof *o->sets)))
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    if ((st = vk_batch_sets_create(ctx, b, steps, &o->descriptor_pool, o->sets, err)) != RSSM_OK)
        return st;
    for (uint32_t s = 0; s < steps; s++)
        vk_batch_sets_write(ctx, b, o->sets[s], o->headers.buffer, s * stride, header_bytes);

    if ((st = bench_record_begin(ctx, o, err)) != RSSM_OK)
        return st;
    VkCommandBuffer cb = o->cmd;
    vk_cmd_barrier_before_compute(ctx, cb);
    bench_timestamp(ctx, o, 0);
    /* Each step reads the state (and overwrites the outputs) of the one
     * before it. */
    for (uint32_t s = 0; s < steps; s++) {
        if (s > 0)
            vk_cmd_barrier_compute(ctx, cb);
        vk_batch_cmd_step(ctx, b, cb, o->sets[s], true, vk_step_flushes(b, rows, hdr + (size_t)s * rows));
    }
    vk_cmd_barrier_after_compute(ctx, cb);
    bench_timestamp(ctx, o, 1);
    if ((st = bench_record_end(ctx, o, err)) != RSSM_OK)
        return st;
    return bench_run(ctx, o, reps, true, "timed program", timing, err);
}

rssm_status vk_batch_time_steps(void *vctx, void *vbatch, uint32_t rows, uint32_t steps,
                                const rssm_row_header *hdr, uint32_t reps, rssm_timing *timing, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    bench o = {0};
    st = time_steps(ctx, vbatch, &o, rows, steps, hdr, reps, timing, err);
    bench_free(ctx, &o);
    if (st != RSSM_OK)
        return st;
    return vk_check_validation(ctx, err);
}

/* ------------------------------------- pool_inplace_seconds, copy_bandwidth */

typedef struct inplace_push {
    uint32_t count; /* uvec4 words */
    uint32_t flip;  /* 0 (but in the tests): the pass writes back what it read */
} inplace_push;

static rssm_status inplace_pipeline(vk_ctx *ctx, bench *o, uint32_t wg_size, rssm_error *err)
{
    rssm_status st = vk_layouts_create(ctx, 2, 1, sizeof(inplace_push), false, &o->set_layout, &o->pipeline_layout, err);
    if (st != RSSM_OK)
        return st;
    VkSpecializationMapEntry entry = {.constantID = 0, .offset = 0, .size = sizeof wg_size};
    VkSpecializationInfo spec = {.mapEntryCount = 1, .pMapEntries = &entry, .dataSize = sizeof wg_size,
                                 .pData = &wg_size};
    return vk_compute_pipeline(ctx, &vk_spirv_inplace, &spec, NULL, 0, o->pipeline_layout, &o->pipeline, err);
}

/* One buffer range a pass reads (src) and writes (dst), at the same offset
 * in both, no longer than one descriptor binds: the same buffer for the
 * in-place pass, two for a copy. */
typedef struct pass_segment {
    VkBuffer src, dst;
    VkDeviceSize offset;
    size_t bytes;
} pass_segment;

/* shaders/inplace.comp over each segment (at most RSSM_VK_POOL_BUFFERS), one
 * dispatch each, all in one timed program (segments touch different memory:
 * no barrier between). */
static rssm_status pass(vk_ctx *ctx, const pass_segment *seg, uint32_t segments, bench *o, uint32_t reps,
                        uint32_t flip, const char *what, rssm_timing *timing, rssm_error *err)
{
    const VkPhysicalDeviceLimits *lim = &ctx->props.limits;
    uint32_t wg = 256;
    if (wg > lim->maxComputeWorkGroupSize[0])
        wg = lim->maxComputeWorkGroupSize[0];
    if (wg > lim->maxComputeWorkGroupInvocations)
        wg = lim->maxComputeWorkGroupInvocations;
    rssm_status st = bench_init(ctx, o, reps, err);
    if (st == RSSM_OK)
        st = inplace_pipeline(ctx, o, wg, err);
    if (st != RSSM_OK)
        return st;
    if (!(o->sets = malloc(segments * sizeof *o->sets)))
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    VkDescriptorSetLayout layouts[RSSM_VK_POOL_BUFFERS];
    for (uint32_t i = 0; i < segments; i++)
        layouts[i] = o->set_layout;
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 2 * segments};
    VkDescriptorPoolCreateInfo dpci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
        .maxSets = segments,
        .poolSizeCount = 1,
        .pPoolSizes = &ps,
    };
    VkResult r = ctx->vk.vkCreateDescriptorPool(ctx->device, &dpci, NULL, &o->descriptor_pool);
    if (r != VK_SUCCESS) {
        o->descriptor_pool = VK_NULL_HANDLE;
        return vk_fail(ctx, r, "vkCreateDescriptorPool", err);
    }
    VkDescriptorSetAllocateInfo sai = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
        .descriptorPool = o->descriptor_pool,
        .descriptorSetCount = segments,
        .pSetLayouts = layouts,
    };
    if ((r = ctx->vk.vkAllocateDescriptorSets(ctx->device, &sai, o->sets)) != VK_SUCCESS)
        return vk_fail(ctx, r, "vkAllocateDescriptorSets", err);
    for (uint32_t i = 0; i < segments; i++) {
        VkDescriptorBufferInfo info[2] = {{seg[i].src, seg[i].offset, seg[i].bytes},
                                          {seg[i].dst, seg[i].offset, seg[i].bytes}};
        VkWriteDescriptorSet w = {
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstSet = o->sets[i],
            .dstBinding = 0,
            .descriptorCount = 2,
            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .pBufferInfo = info,
        };
        ctx->vk.vkUpdateDescriptorSets(ctx->device, 1, &w, 0, NULL);
    }

    if ((st = bench_record_begin(ctx, o, err)) != RSSM_OK)
        return st;
    VkCommandBuffer cb = o->cmd;
    vk_cmd_barrier_before_compute(ctx, cb);
    bench_timestamp(ctx, o, 0);
    ctx->vk.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, o->pipeline);
    for (uint32_t i = 0; i < segments; i++) {
        const uint32_t count = (uint32_t)(seg[i].bytes / 16);
        /* Vulkan does not say how many compute units there are: one
         * invocation per uvec4, up to the dispatch limit, and the shader's
         * grid-stride loop covers the rest. Either way far more workgroups
         * than units. */
        uint32_t groups = count / wg + (count % wg != 0);
        if (groups > lim->maxComputeWorkGroupCount[0])
            groups = lim->maxComputeWorkGroupCount[0];
        const inplace_push push = {.count = count, .flip = flip};
        ctx->vk.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, o->pipeline_layout, 0, 1, &o->sets[i],
                                        0, NULL);
        ctx->vk.vkCmdPushConstants(cb, o->pipeline_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof push, &push);
        ctx->vk.vkCmdDispatch(cb, groups, 1, 1);
    }
    vk_cmd_barrier_after_compute(ctx, cb);
    bench_timestamp(ctx, o, 1);
    if ((st = bench_record_end(ctx, o, err)) != RSSM_OK)
        return st;
    /* A flip is the tests' mode: exactly 1 + reps passes. */
    return bench_run(ctx, o, reps, flip == 0, what, timing, err);
}

rssm_status vk_pool_inplace_seconds(void *vctx, void *vpool, size_t bytes, uint32_t reps, uint32_t flip,
                                    double *seconds, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    vk_pool *p = vpool;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    size_t total = 0;
    for (uint32_t i = 0; i < p->buffers; i++)
        total += (size_t)p->bufs[i].size;
    /* The shader moves whole uvec4 and counts them in 32 bits per buffer. */
    if (bytes == 0 || bytes % 16 != 0 || bytes > total)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "vulkan: in-place pass over %zu bytes of a %zu-byte pool: must be a positive "
                              "multiple of 16 within the pool",
                              bytes, total);
    /* The first `bytes` of the pool, buffer by buffer. */
    pass_segment seg[RSSM_VK_POOL_BUFFERS];
    uint32_t n = 0;
    for (size_t left = bytes; left > 0 && n < p->buffers; n++) {
        const size_t here = left < (size_t)p->bufs[n].size ? left : (size_t)p->bufs[n].size;
        seg[n] = (pass_segment){p->bufs[n].buffer, p->bufs[n].buffer, 0, here - here % 16};
        left -= here;
    }
    bench o = {0};
    rssm_timing t = {0.0, 0.0, 0};
    st = pass(ctx, seg, n, &o, reps, flip, "in-place pass", &t, err);
    bench_free(ctx, &o);
    if (st != RSSM_OK)
        return st;
    *seconds = t.median_seconds;
    return vk_check_validation(ctx, err);
}

/* A compute shader copying `bytes` between two device buffers, the median
 * of 5 timed runs after the untimed ones: bytes read plus bytes written per
 * second. (vkCmdCopyBuffer is no ceiling: on an H200 it reached 0.85 of the
 * 4.2 TB/s a shader moves.) */
rssm_status vk_copy_bandwidth(void *vctx, size_t bytes, double *bytes_per_second, rssm_error *err)
{
    vk_ctx *ctx = vctx;
    rssm_status st = vk_check_validation(ctx, err);
    if (st != RSSM_OK)
        return st;
    /* One segment per descriptor's worth (maxStorageBufferRange, rounded to
     * the offset alignment), as many as the pass takes. */
    const VkPhysicalDeviceLimits *lim = &ctx->props.limits;
    const VkDeviceSize align = lim->minStorageBufferOffsetAlignment > 16 ? lim->minStorageBufferOffsetAlignment : 16;
    const uint64_t per = lim->maxStorageBufferRange / align * align;
    bytes -= bytes % 16;
    if (bytes == 0 || per == 0 || (bytes + per - 1) / per > RSSM_VK_POOL_BUFFERS)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "vulkan: a copy of %zu bytes: must be 16 bytes to %u x %llu bytes", bytes,
                              RSSM_VK_POOL_BUFFERS, (unsigned long long)per);
    vk_buffer a, b;
    if ((st = vk_buffer_create(ctx, bytes, VK_MEMORY_DEVICE, &a, err)) != RSSM_OK)
        return st;
    if ((st = vk_buffer_create(ctx, bytes, VK_MEMORY_DEVICE, &b, err)) != RSSM_OK) {
        vk_buffer_destroy(ctx, &a);
        return st;
    }
    /* Defined contents to read: ones. */
    if ((st = vk_transfer_begin(ctx, err)) == RSSM_OK) {
        ctx->vk.vkCmdFillBuffer(ctx->transfer_cmd, a.buffer, 0, VK_WHOLE_SIZE, 0x3f800000u);
        st = vk_transfer_submit_wait(ctx, err);
    }
    pass_segment seg[RSSM_VK_POOL_BUFFERS];
    uint32_t n = 0;
    for (VkDeviceSize off = 0; off < bytes; off += per, n++)
        seg[n] = (pass_segment){a.buffer, b.buffer, off, bytes - off < per ? bytes - off : per};
    rssm_timing t = {0.0, 0.0, 0};
    bench o = {0};
    if (st == RSSM_OK)
        st = pass(ctx, seg, n, &o, 5, 0, "copy", &t, err);
    bench_free(ctx, &o);
    vk_buffer_destroy(ctx, &a);
    vk_buffer_destroy(ctx, &b);
    if (st != RSSM_OK)
        return st;
    *bytes_per_second = 2.0 * (double)bytes / t.median_seconds;
    return vk_check_validation(ctx, err);
}
