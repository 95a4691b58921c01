/* tests/layer_memory.h: host memory, or host-visible Vulkan buffers. */
#include "layer_memory.h"
#include "test_support.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef RSSM_HAVE_VULKAN
#include "volk.h"
#endif

enum { LM_MAX_BLOCKS = 64 };

typedef struct lm_block {
    void *host;
    size_t bytes;
#ifdef RSSM_HAVE_VULKAN
    VkBuffer buffer;
    VkDeviceMemory memory;
#endif
} lm_block;

struct lm_arena {
    lm_block blocks[LM_MAX_BLOCKS];
    size_t count;
    int records;
#ifdef RSSM_HAVE_VULKAN
    rssm_vulkan_handles vk;
    struct VolkDeviceTable t;
    VkPhysicalDeviceMemoryProperties mem;
    VkCommandPool pool;
    VkFence fence;
#endif
};

lm_arena *lm_open(rssm_backend *b)
{
    lm_arena *a = calloc(1, sizeof *a);
    assert_non_null(a);
#ifdef RSSM_HAVE_VULKAN
    rssm_error err;
    if (rssm_backend_vulkan_handles(b, &a->vk, &err) == RSSM_OK) {
        a->records = 1;
        assert_int_equal(volkInitialize(), VK_SUCCESS);
        volkLoadInstanceOnly((VkInstance)a->vk.instance);
        volkLoadDeviceTable(&a->t, (VkDevice)a->vk.device);
        vkGetPhysicalDeviceMemoryProperties((VkPhysicalDevice)a->vk.physical_device, &a->mem);
        const VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                             .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                             .queueFamilyIndex = a->vk.queue_family_index};
        assert_int_equal(a->t.vkCreateCommandPool((VkDevice)a->vk.device, &pci, NULL, &a->pool), VK_SUCCESS);
        const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        assert_int_equal(a->t.vkCreateFence((VkDevice)a->vk.device, &fci, NULL, &a->fence), VK_SUCCESS);
    }
#else
    (void)b;
#endif
    return a;
}

int lm_records(const lm_arena *a) { return a->records; }

void *lm_alloc(lm_arena *a, size_t bytes)
{
    assert_true(a->count < LM_MAX_BLOCKS);
    lm_block *blk = &a->blocks[a->count++];
    blk->bytes = bytes ? bytes : 4;
    if (!a->records) {
        blk->host = calloc(1, blk->bytes);
        assert_non_null(blk->host);
        return blk->host;
    }
#ifdef RSSM_HAVE_VULKAN
    VkDevice dev = (VkDevice)a->vk.device;
    const VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = blk->bytes,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
    };
    assert_int_equal(a->t.vkCreateBuffer(dev, &bci, NULL, &blk->buffer), VK_SUCCESS);
    VkMemoryRequirements req;
    a->t.vkGetBufferMemoryRequirements(dev, blk->buffer, &req);
    const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    uint32_t type = UINT32_MAX;
    for (uint32_t i = 0; i < a->mem.memoryTypeCount && type == UINT32_MAX; i++)
        if ((req.memoryTypeBits & (1u << i)) && (a->mem.memoryTypes[i].propertyFlags & want) == want)
            type = i;
    assert_true(type != UINT32_MAX);
    const VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                      .allocationSize = req.size,
                                      .memoryTypeIndex = type};
    assert_int_equal(a->t.vkAllocateMemory(dev, &mai, NULL, &blk->memory), VK_SUCCESS);
    assert_int_equal(a->t.vkBindBufferMemory(dev, blk->buffer, blk->memory, 0), VK_SUCCESS);
    assert_int_equal(a->t.vkMapMemory(dev, blk->memory, 0, VK_WHOLE_SIZE, 0, &blk->host), VK_SUCCESS);
    memset(blk->host, 0, blk->bytes);
#endif
    return blk->host;
}

void lm_close(lm_arena *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->count; i++) {
        lm_block *blk = &a->blocks[i];
        if (!a->records) {
            free(blk->host);
            continue;
        }
#ifdef RSSM_HAVE_VULKAN
        VkDevice dev = (VkDevice)a->vk.device;
        a->t.vkDestroyBuffer(dev, blk->buffer, NULL);
        a->t.vkFreeMemory(dev, blk->memory, NULL);
#endif
    }
#ifdef RSSM_HAVE_VULKAN
    if (a->records) {
        a->t.vkDestroyFence((VkDevice)a->vk.device, a->fence, NULL);
        a->t.vkDestroyCommandPool((VkDevice)a->vk.device, a->pool, NULL);
    }
#endif
    free(a);
}

#ifdef RSSM_HAVE_VULKAN
/* The buffer and offset a pointer into the arena names; a NULL pointer
 * names no buffer. A pointer outside the arena is the test's mistake. */
static rssm_buffer buffer_of(const lm_arena *a, const void *p)
{
    if (!p)
        return (rssm_buffer){0, 0};
    const uint8_t *q = p;
    for (size_t i = 0; i < a->count; i++) {
        const uint8_t *h = a->blocks[i].host;
        if (q >= h && q < h + a->blocks[i].bytes)
            return (rssm_buffer){(uint64_t)(uintptr_t)a->blocks[i].buffer, (uint64_t)(q - h)};
    }
    fail_msg("a pointer outside the test's buffers");
    return (rssm_buffer){0, 0};
}

static rssm_layer_buffers buffers_of(const lm_arena *a, const rssm_layer_tensors *t)
{
    return (rssm_layer_buffers){
        .state = buffer_of(a, t->state),     .ring_d = buffer_of(a, t->ring_d),
        .ring_k = buffer_of(a, t->ring_k),   .ring_g = buffer_of(a, t->ring_g),
        .q = buffer_of(a, t->q),             .k = buffer_of(a, t->k),
        .v = buffer_of(a, t->v),             .gate = buffer_of(a, t->gate),
        .beta = buffer_of(a, t->beta),       .A_log = buffer_of(a, t->A_log),
        .dt_bias = buffer_of(a, t->dt_bias), .out = buffer_of(a, t->out),
        .slot_index = buffer_of(a, t->slot_index), .write_pos = buffer_of(a, t->write_pos),
        .force = buffer_of(a, t->force),     .overflow = buffer_of(a, t->overflow),
    };
}

typedef enum { CALL_RUN, CALL_MATERIALISE, CALL_ADVANCE, CALL_VERIFY } call_kind;

typedef struct call {
    call_kind kind;
    rssm_layer *l;
    uint32_t rows, t_max;
    rssm_layer_buffers t;
    rssm_buffer drafts;
    rssm_buffer slot_index, write_pos, force, cursor;
} call;

/* Records the call into a new command buffer; on success submits it and
 * waits. A refused call leaves nothing submitted. */
static rssm_status record_submit(lm_arena *a, const call *c, rssm_error *err)
{
    VkDevice dev = (VkDevice)a->vk.device;
    VkCommandBuffer cb;
    const VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                            .commandPool = a->pool,
                                            .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                            .commandBufferCount = 1};
    assert_int_equal(a->t.vkAllocateCommandBuffers(dev, &ai, &cb), VK_SUCCESS);
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    assert_int_equal(a->t.vkBeginCommandBuffer(cb, &bi), VK_SUCCESS);
    rssm_status st;
    switch (c->kind) {
    case CALL_RUN: st = rssm_layer_record(c->l, c->rows, &c->t, cb, err); break;
    case CALL_MATERIALISE: st = rssm_layer_record_materialise(c->l, c->rows, &c->t, cb, err); break;
    case CALL_VERIFY: st = rssm_layer_record_verify(c->l, c->rows, c->t_max, c->drafts, &c->t, cb, err); break;
    default:
        st = rssm_layer_record_advance(c->l, c->rows, c->slot_index, c->write_pos, c->force, c->cursor, cb, err);
        break;
    }
    assert_int_equal(a->t.vkEndCommandBuffer(cb), VK_SUCCESS);
    if (st == RSSM_OK) {
        const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                                 .pCommandBuffers = &cb};
        assert_int_equal(a->t.vkQueueSubmit((VkQueue)a->vk.queue, 1, &si, a->fence), VK_SUCCESS);
        assert_int_equal(a->t.vkWaitForFences(dev, 1, &a->fence, VK_TRUE, UINT64_MAX), VK_SUCCESS);
        assert_int_equal(a->t.vkResetFences(dev, 1, &a->fence), VK_SUCCESS);
    }
    a->t.vkFreeCommandBuffers(dev, a->pool, 1, &cb);
    return st;
}
#endif

/* A run or a materialise: the same tensors, the backend's entry for them. */
static rssm_status layer_call(lm_arena *a, rssm_layer *l, uint32_t rows, const rssm_layer_tensors *t, bool fold,
                              rssm_error *err)
{
#ifdef RSSM_HAVE_VULKAN
    if (a->records) {
        if (!t) /* refused before the command buffer is touched */
            return fold ? rssm_layer_record_materialise(l, rows, NULL, (void *)(uintptr_t)1, err)
                        : rssm_layer_record(l, rows, NULL, (void *)(uintptr_t)1, err);
        const call c = {.kind = fold ? CALL_MATERIALISE : CALL_RUN, .l = l, .rows = rows, .t = buffers_of(a, t)};
        return record_submit(a, &c, err);
    }
#else
    (void)a;
#endif
    return fold ? rssm_layer_materialise(l, rows, t, NULL, err) : rssm_layer_run(l, rows, t, NULL, err);
}

rssm_status lm_run(lm_arena *a, rssm_layer *l, uint32_t rows, const rssm_layer_tensors *t, rssm_error *err)
{
    return layer_call(a, l, rows, t, false, err);
}

rssm_status lm_materialise(lm_arena *a, rssm_layer *l, uint32_t rows, const rssm_layer_tensors *t, rssm_error *err)
{
    return layer_call(a, l, rows, t, true, err);
}

rssm_status lm_advance(lm_arena *a, rssm_layer *l, uint32_t rows, const int32_t *slot_index, const int32_t *write_pos,
                       const int32_t *force, int32_t *cursor, rssm_error *err)
{
#ifdef RSSM_HAVE_VULKAN
    if (a->records) {
        const call c = {.kind = CALL_ADVANCE,
                        .l = l,
                        .rows = rows,
                        .slot_index = buffer_of(a, slot_index),
                        .write_pos = buffer_of(a, write_pos),
                        .force = buffer_of(a, force),
                        .cursor = buffer_of(a, cursor)};
        return record_submit(a, &c, err);
    }
#else
    (void)a;
#endif
    return rssm_layer_advance(l, rows, slot_index, write_pos, force, cursor, NULL, err);
}

rssm_status lm_verify(lm_arena *a, rssm_layer *l, uint32_t rows, uint32_t t_max, const uint32_t *drafts,
                      const rssm_layer_tensors *t, rssm_error *err)
{
#ifdef RSSM_HAVE_VULKAN
    if (a->records) {
        const call c = {.kind = CALL_VERIFY, .l = l, .rows = rows, .t_max = t_max, .t = buffers_of(a, t),
                        .drafts = buffer_of(a, drafts)};
        return record_submit(a, &c, err);
    }
#else
    (void)a;
#endif
    return rssm_layer_verify(l, rows, t_max, drafts, t, NULL, err);
}
