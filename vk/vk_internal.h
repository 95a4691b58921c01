/* The Vulkan backend's own objects, shared by the files of vk/. Nothing
 * outside vk/ includes this: common code sees only the ops table. The
 * declarations below go by file, lowest first: a file calls only the files
 * above its own section (vk/README.md, "Files"; tools/layers checks it). */
#ifndef RSSM_VK_INTERNAL_H
#define RSSM_VK_INTERNAL_H

#include "vk_compat.h"
#include "backend.h"
#include "vk_abi.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The decode shaders' bindings (shaders/decode.comp): BIND_POOL is an
 * array of RSSM_VK_POOL_BUFFERS, the others one buffer each; a batch binds
 * its step header to all four row bindings. 29 descriptors: within the 32
 * a push-descriptor set may hold on every device that offers them. */
enum { BIND_POOL, BIND_ROW_SLOT, BIND_ROW_POS, BIND_ROW_FORCE, BIND_ROW_IO, BIND_Q, BIND_K, BIND_V, BIND_GATE,
       BIND_BETA, BIND_A_LOG, BIND_DT_BIAS, BIND_OUT, BIND_OVERFLOW, BIND_COUNT };
#define VK_DESCRIPTORS (RSSM_VK_POOL_BUFFERS + BIND_COUNT - 1)

/* The decode shaders' push constants (vk_abi.h). */
#define VK_PUSH_U(name) uint32_t name;
#define VK_PUSH_F(name) float name;
typedef struct vk_push {
    RSSM_VK_PUSH_FIELDS(VK_PUSH_U, VK_PUSH_F)
} vk_push;
#undef VK_PUSH_U
#undef VK_PUSH_F
_Static_assert(sizeof(vk_push) == 4 * RSSM_VK_PUSH_WORDS, "push constants are 32-bit words");
_Static_assert(sizeof(vk_push) <= 128, "push constants within every device's limit");


/* Longest pipeline-cache file path (vk_cache.c). */
#define VK_CACHE_PATH_MAX 512

/* Which decode kernels a backend instance runs. */
typedef enum vk_kernels {
    VK_KERNELS_PORTABLE = 0,       /* subgroup arithmetic + shared memory */
    VK_KERNELS_COOPMAT = 1,        /* `_cm` flush on KHR cooperative matrices */
    VK_KERNELS_COOPMAT_EMULATED = 2, /* `_cm` flush on emulated tiles */
} vk_kernels;

/* The few instance-level entry points we call, per instance. */
typedef struct vk_instance_fns {
    PFN_vkDestroyInstance DestroyInstance;
    PFN_vkEnumeratePhysicalDevices EnumeratePhysicalDevices;
    PFN_vkGetPhysicalDeviceProperties2 GetPhysicalDeviceProperties2;
    PFN_vkGetPhysicalDeviceFeatures2 GetPhysicalDeviceFeatures2;
    PFN_vkGetPhysicalDeviceMemoryProperties GetPhysicalDeviceMemoryProperties;
    PFN_vkGetPhysicalDeviceQueueFamilyProperties GetPhysicalDeviceQueueFamilyProperties;
    PFN_vkEnumerateDeviceExtensionProperties EnumerateDeviceExtensionProperties;
    PFN_vkCreateDevice CreateDevice;
    PFN_vkDestroyDevice DestroyDevice;
    PFN_vkCreateDebugUtilsMessengerEXT CreateDebugUtilsMessengerEXT;
    PFN_vkDestroyDebugUtilsMessengerEXT DestroyDebugUtilsMessengerEXT;
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR GetPhysicalDeviceCooperativeMatrixPropertiesKHR;
} vk_instance_fns;

typedef struct vk_buffer {
    VkBuffer buffer;
    VkDeviceMemory memory;
    VkDeviceSize size;
    void *map;           /* host-visible buffers: persistently mapped */
} vk_buffer;

typedef struct vk_ctx {
    vk_kernels kernels;
    char variant[32];

    VkInstance instance;
    vk_instance_fns fi;
    VkDebugUtilsMessengerEXT messenger;
    bool validation;           /* RSSM_VK_VALIDATION=1: the test mode */
    bool destroying;
    bool create_failed;              /* vk_ctx_create is undoing a failed create */
    bool validation_failed;    /* a message arrived; the next call fails */
    bool pipeline_times;       /* RSSM_VK_PIPELINE_STATS=1: each pipeline created, and how long that took */
    bool pipeline_stats;       /* ... and the driver's statistics, where the device can */
    /* The decode pipelines take vk_shape as push constants (the `_rt`
     * modules; vk_device.c says when). */
    bool runtime_shape;
    /* Measurement overrides of six kernel choices (vk/README.md):
     * RSSM_VK_ROW_SPLIT=N (workgroups per value head, at most N; 0: the
     * rule in vk_decode.c), RSSM_VK_PREFETCH=0|1,
     * RSSM_VK_ONE_DISPATCH=0|1, RSSM_VK_FLUSH_FIRST=0|1 and
     * RSSM_VK_WINDOW=0|1 (-1: the rule), and
     * RSSM_VK_WINDOW_TOKENS=N (a window's tokens per dispatch; 0: the
     * rule in vk_decode.c). */
    uint32_t tune_row_split, tune_window_tokens;
    int tune_prefetch, tune_one_dispatch, tune_window, tune_flush_first;
    char validation_message[200];

    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem_props;
    VkDevice device;
    struct VolkDeviceTable vk;
    uint32_t queue_family;
    VkQueue queue;
    uint32_t timestamp_bits;   /* 0: no timestamps on this queue */

    uint32_t subgroup_size;    /* the size every pipeline runs with */
    bool subgroup_size_control;
    bool push_descriptors;     /* VK_KHR_push_descriptor: the per-layer entry records with it */
    bool device_coopmat;       /* the device offers fp16 x fp16 -> fp32 tiles */
    uint32_t tile_m, tile_n, tile_k;   /* tile shape the `_cm` kernels use */
    char coopmat_note[160];    /* why coopmat is off, or its shapes */
    bool float16_arith;        /* shaderFloat16, which `rssm info` reports (the kernels do not use it) */
    bool bfloat16_ext;         /* VK_KHR_shader_bfloat16 offered, likewise */

    /* The queue and transfer_cmd are shared by every pool and batch of this
     * backend, which rssm.h lets callers use from different threads. */
    pthread_mutex_t queue_lock;
    VkCommandPool command_pool;     /* used under queue_lock */
    VkCommandBuffer transfer_cmd;   /* one-shot copies, always waited on */
    VkFence transfer_fence;
    VkPipelineCache pipeline_cache;
    /* its file (vk_cache.c): "" when the disk cache is off */
    char cache_path[VK_CACHE_PATH_MAX];
    char cache_note[VK_CACHE_PATH_MAX + 128];  /* what happened to it, for describe */
    size_t cache_bytes;                        /* what the file holds */
    pthread_mutex_t cache_lock;                /* path, note, bytes, the file */
    bool cache_lock_ready;

    /* Pipelines and layouts shared by every batch and layer object of the
     * device (vk_shared.c), under shared_lock. */
    pthread_mutex_t shared_lock;
    VkDescriptorSetLayout shared_set_layout[2]; /* batches; layer objects (pushed descriptors) */
    VkPipelineLayout shared_layout[2];
    struct vk_shared_entry *shared;
    size_t shared_count, shared_cap;

    char device_line[320];
} vk_ctx;
typedef struct vk_shared_entry vk_shared_entry;

typedef struct vk_pool {
    rssm_slot_layout layout;
    uint32_t slots;
    /* Device-local: buffer i holds slots i * slots_per_buffer onwards, as
     * many as one descriptor binds (vk_abi.h). */
    vk_buffer bufs[RSSM_VK_POOL_BUFFERS];
    uint32_t buffers, slots_per_buffer;
    vk_buffer staging;    /* host-visible, one slot */
} vk_pool;

/* What a decode pipeline is specialised for besides the model, or on a
 * CPU device (vk_ctx.runtime_shape) is pushed after vk_push: where a head
 * is in the state and rings (decode.comp's SLOTS_PER_BUFFER, 0 for one
 * layer on the caller's tensors, LAYER_WORDS and X_SLOT, X_HEAD constants,
 * in elements), the head counts, the ring length and the ring and io
 * dtypes (vk_abi.h). */
#define VK_SHAPE_U(name) uint32_t name;
typedef struct vk_shape {
    RSSM_VK_SHAPE_FIELDS(VK_SHAPE_U)
} vk_shape;
#undef VK_SHAPE_U
_Static_assert(sizeof(vk_shape) == 4 * RSSM_VK_SHAPE_WORDS, "shape words are 32-bit");

/* A decode step's pipelines: the rows that flush (packed: every row) and,
 * for replay with L > 1, the rows that do not, with their workgroups per
 * value head, on one pipeline layout; or, where vk_decode.c's rule runs a
 * replay step as one dispatch, one pipeline of every row in `flush` and no
 * `readout`. */
typedef struct vk_decode {
    VkPipelineLayout layout;
    vk_shape shape; /* what vk_decode_push pushes after vk_push, on a runtime_shape device */
    VkPipeline flush, readout;
    uint32_t split, split_readout;
    uint32_t heads; /* HV */
} vk_decode;

/* Byte offsets of the step arrays inside a batch's io buffer. */
typedef struct vk_io_layout {
    VkDeviceSize q, k, v, gate, beta, a_log, dt_bias, out, total;
    VkDeviceSize q_bytes, v_bytes, gate_bytes, beta_bytes, a_log_bytes, dt_bias_bytes;
} vk_io_layout;

/* rssm_batch_verify's window: its pipeline and buffers (vk_window.c). */
typedef struct vk_window vk_window;

typedef struct vk_batch {
    vk_pool *pool;
    rssm_kernel_params params;
    vk_io_layout io;
    vk_buffer io_dev;         /* device-local inputs and outputs */
    vk_buffer io_host;        /* host-visible staging, same layout */
    vk_buffer header;         /* host-visible step header, refreshed in place */
    vk_buffer overflow;       /* host-visible [max_rows] ring-overflow flags (docs/design.md §2) */
    VkDescriptorSetLayout set_layout;
    vk_decode decode;
    vk_push push;             /* constant for the batch's life */
    VkDescriptorPool descriptor_pool;
    VkDescriptorSet set;
    VkQueryPool queries;
    /* Recorded once, resubmitted every step: [1] with the flush rows'
     * dispatch first, for a step where some row flushes, [0] with it last
     * (vk_decode_dispatch); a decode of one dispatch has [0] only. */
    VkCommandBuffer step_cmd[2];
    VkFence step_fence;
    double last_run_seconds;
    vk_window *window;        /* NULL until the first window */
} vk_batch;

/* ---- vk_shaders.c: the SPIR-V words built from shaders/decode.comp and
 * shaders/inplace.comp */
typedef struct vk_spirv {
    const char *name;
    const uint32_t *words;
    size_t size;   /* bytes */
} vk_spirv;
extern const vk_spirv vk_spirv_decode_packed;
extern const vk_spirv vk_spirv_decode_replay;
extern const vk_spirv vk_spirv_decode_replay_cm_emu;
extern const vk_spirv vk_spirv_decode_replay_cm; /* size 0 when not built */
/* A bf16 state's packed step and read-only rows on a GPU: blocks of
 * RSSM_VK_ROW_BLOCK_S16 rows */
extern const vk_spirv vk_spirv_decode_packed_s16;
extern const vk_spirv vk_spirv_decode_replay_s16;
/* The first three as a CPU device runs them (vk_ctx.runtime_shape) */
extern const vk_spirv vk_spirv_decode_packed_rt;
extern const vk_spirv vk_spirv_decode_replay_rt;
extern const vk_spirv vk_spirv_decode_replay_cm_emu_rt;
extern const vk_spirv vk_spirv_window;           /* decode.comp with RSSM_WINDOW: shaders/window.glsl */
extern const vk_spirv vk_spirv_window_rt;        /* ... as a CPU device runs it */
extern const vk_spirv vk_spirv_inplace;          /* shaders/inplace.comp */
extern const vk_spirv vk_spirv_advance;          /* shaders/advance.comp */

/* ---- vk_cache.c: the pipeline cache, kept on disk between processes */
/* Creates ctx->pipeline_cache from the device's cache file, if any: what
 * vkCreatePipelineCache returned (a file that cannot be read costs compile
 * time only). */
VkResult vk_cache_create(vk_ctx *ctx);
/* Writes the cache back when it has grown; failures go to ctx->cache_note. */
void vk_cache_store(vk_ctx *ctx);

/* ---- vk_device.c: the instance, the device, and its failures as rssm errors */
rssm_status vk_ctx_create(const char *variant, vk_ctx **out, rssm_error *err);
void vk_ctx_destroy(vk_ctx *ctx);
void vk_describe(vk_ctx *ctx, char *buf, size_t size);
/* RSSM_ERR_DEVICE "validation: ..." when the layer reported something since
 * the last call (and forgets it); RSSM_OK otherwise. */
rssm_status vk_check_validation(vk_ctx *ctx, rssm_error *err);
/* A failed Vulkan call as an rssm error naming the call. */
rssm_status vk_fail(vk_ctx *ctx, VkResult r, const char *what, rssm_error *err);

/* A CPU device (lavapipe): no memory latency to hide and no clocks to ramp
 * up, where every specialization is a slow compile. */
static inline bool vk_cpu_device(const vk_ctx *ctx) { return ctx->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU; }

/* ---- vk_memory.c: buffers, and one-shot transfers on the device's queue */
/* DEVICE: device-local; HOST: host-visible and coherent, host-cached where
 * offered (staging, results the host reads); HEADER: host-visible and
 * coherent, device-local where the device can map such memory, for the
 * little the host writes and every workgroup reads at its start (the step
 * header): read from system memory, each workgroup's first loads cross the
 * bus. */
typedef enum vk_memory_kind { VK_MEMORY_DEVICE, VK_MEMORY_HOST, VK_MEMORY_HEADER } vk_memory_kind;
rssm_status vk_buffer_create(vk_ctx *ctx, VkDeviceSize size, vk_memory_kind kind,
                             vk_buffer *out, rssm_error *err);
void vk_buffer_destroy(vk_ctx *ctx, vk_buffer *b);
/* Records into ctx->transfer_cmd: begin (takes queue_lock; a barrier after
 * all earlier device work) ... submit_wait (barrier to host and shader
 * reads, submit, wait; releases queue_lock). After a successful begin the
 * caller always calls submit_wait. */
rssm_status vk_transfer_begin(vk_ctx *ctx, rssm_error *err);
rssm_status vk_transfer_submit_wait(vk_ctx *ctx, rssm_error *err);

/* ---- vk_command.c: command buffers and the barriers every recording shares */
/* With queue_lock held (the command pool is shared): a primary command
 * buffer from the context's pool into *cb (VK_NULL_HANDLE on failure),
 * begun for repeated submission, `queries`' two timestamps reset first
 * when it is not VK_NULL_HANDLE. */
rssm_status vk_cmd_begin(vk_ctx *ctx, VkQueryPool queries, VkCommandBuffer *cb, rssm_error *err);
/* Earlier shader and transfer writes before the compute shaders that follow. */
void vk_cmd_barrier_before_compute(vk_ctx *ctx, VkCommandBuffer cb);
/* The shaders' writes to later transfers and the host. */
void vk_cmd_barrier_after_compute(vk_ctx *ctx, VkCommandBuffer cb);
/* One dispatch's shader writes before the next dispatch's reads and writes
 * (layer after layer, step after step, a window's part after part). */
void vk_cmd_barrier_compute(vk_ctx *ctx, VkCommandBuffer cb);
/* ---- vk_pipeline.c: a compute pipeline through the pipeline cache, and its layouts */
/* What every compute pipeline here is laid out as: `bindings` storage
 * buffer bindings (0 .. bindings-1) in one set, binding 0 an array of
 * `first_count` (the pool's buffers) and the others single, one
 * push-constant range of `push_bytes`; with `push` a push-descriptor set
 * (VK_KHR_push_descriptor), which nothing is allocated for. Both handles are
 * VK_NULL_HANDLE where their creation failed. */
#define VK_MAX_BINDINGS 16u
rssm_status vk_layouts_create(vk_ctx *ctx, uint32_t bindings, uint32_t first_count, uint32_t push_bytes, bool push,
                              VkDescriptorSetLayout *set_layout, VkPipelineLayout *layout, rssm_error *err);
/* A compute pipeline of `spv` through the context's pipeline cache (stored
 * afterwards); `stage_next` and `stage_flags` extend its shader stage.
 * *out is VK_NULL_HANDLE on failure. */
rssm_status vk_compute_pipeline(vk_ctx *ctx, const vk_spirv *spv, const VkSpecializationInfo *spec,
                                const void *stage_next, VkPipelineShaderStageCreateFlags stage_flags,
                                VkPipelineLayout layout, VkPipeline *out, rssm_error *err);

/* ---- vk_shared.c: what every batch and layer object of a device shares,
 * made at the first request and kept until vk_ctx_destroy. Callers never
 * destroy what these return. */
/* One pipeline: what it was made from, and the pipeline. */
struct vk_shared_entry {
    const vk_spirv *spv;
    VkPipelineLayout layout;
    uint32_t spec[RSSM_VK_SPEC_COUNT];
    VkPipeline pipeline;
};
/* The push-constant bytes of a decode pipeline layout: vk_push, and on a
 * runtime_shape device vk_shape after it. */
static inline uint32_t vk_decode_push_bytes(const vk_ctx *ctx)
{
    return (uint32_t)(sizeof(vk_push) + (ctx->runtime_shape ? sizeof(vk_shape) : 0));
}
/* The decode pipeline layout of batches, or with `push` of layer objects
 * (their descriptors pushed), and its descriptor set layout. */
rssm_status vk_shared_layouts(vk_ctx *ctx, bool push, VkDescriptorSetLayout *set_layout, VkPipelineLayout *layout,
                              rssm_error *err);
/* The pipeline of `spv` with the RSSM_VK_SPEC_COUNT specialization
 * constants `spec` on `layout` (one of vk_shared_layouts'), as
 * vk_compute_pipeline makes it; the same handle for the same request. */
rssm_status vk_shared_pipeline(vk_ctx *ctx, const vk_spirv *spv, const uint32_t *spec, const void *stage_next,
                               VkPipelineShaderStageCreateFlags stage_flags, VkPipelineLayout layout, VkPipeline *out,
                               rssm_error *err);

/* ---- vk_decode.c: the decode and window pipelines of a model, and their dispatch */
/* Everything below takes a model as its kernel parameters (common/backend.h),
 * the one description of it a batch has. */
/* Shared memory the decode kernel needs for these parameters with the
 * context's kernels, in bytes; the same arithmetic as the shader's
 * declarations. The larger of a model's two pipelines. */
size_t vk_shared_bytes(const vk_ctx *ctx, const rssm_kernel_params *p);
/* Whether the model runs the packed module: packed models, and replay with
 * L = 1, whose every step is a rank-1 flush, i.e. the packed update (so it
 * is bit-identical to packed by construction, as on CUDA). */
bool vk_runs_packed(const rssm_kernel_params *p);
/* Whether the model's replay kernel is a `_cm` one (the flush on tiles). */
bool vk_uses_tiles(const vk_ctx *ctx, const rssm_kernel_params *p);
/* The shape of rssm_layer_io's strides (bytes) as decode.comp takes them. */
void vk_shape_init(vk_shape *shape, const rssm_kernel_params *p, const rssm_layer_io *io, uint32_t slots_per_buffer,
                   uint32_t layer_words);
/* The push constants that follow from the kernel parameters and the step
 * arrays' row strides of `io`; every base word 0, no optional tensor, one
 * row, slots from io. */
void vk_push_init(vk_push *pc, const rssm_kernel_params *p, const rssm_layer_io *io);
/* The decode pipelines of `p` on `layout` (one of vk_shared_layouts') for
 * a step of up to max_rows rows (p->max_rows), the device's shared ones
 * (vk_shared.c); *d's handles are VK_NULL_HANDLE where their creation
 * failed. vk_decode_destroy only lets go of them. */
rssm_status vk_decode_create(vk_ctx *ctx, const vk_shape *shape, const rssm_kernel_params *p, VkPipelineLayout layout,
                             vk_decode *d, rssm_error *err);
void vk_decode_destroy(vk_ctx *ctx, vk_decode *d);
/* The push of *pc (and, on a runtime_shape device, d's shape after it)
 * into cb. */
void vk_decode_push(vk_ctx *ctx, VkCommandBuffer cb, const vk_decode *d, const vk_push *pc);
/* Dispatches a step of `rows` workgroup rows over layers first ..
 * first + count - 1: the flushing rows' pipeline and the read-only rows'
 * (each pipeline's other rows return at once; the two touch disjoint slots
 * and outputs, so no barrier), the flushing rows' first if flush_first
 * (a step where some row flushes, or one that cannot know), or only the
 * flush pipeline. The descriptors and push constants are bound already. */
void vk_decode_dispatch(vk_ctx *ctx, VkCommandBuffer cb, const vk_decode *d, uint32_t rows, uint32_t first,
                        uint32_t count, bool flush_only, bool flush_first);
/* The speculative-decode window (shaders/window.glsl, docs/design.md §9):
 * its shared memory for the tokens a dispatch of `p` takes; why it
 * cannot run `p` on this device, or NULL; its pipeline on a decode
 * pipeline layout (RSSM_ERR_UNSUPPORTED with the refusal), which takes up
 * to `tokens` tokens per dispatch (its WINDOW_T); vk_window_dispatch
 * records a window of t_max tokens, descriptors bound and `pc` the step's
 * push constants, as dispatches of that many tokens each, one after the
 * other, over `layers` layers from the first. */
typedef struct vk_window_pipe {
    VkPipeline pipeline;
    uint32_t tokens;
    uint32_t split; /* workgroups per value head */
} vk_window_pipe;
size_t vk_window_shared_bytes(const vk_ctx *ctx, const rssm_kernel_params *p);
const char *vk_window_refusal(const vk_ctx *ctx, const rssm_kernel_params *p);
rssm_status vk_window_create(vk_ctx *ctx, const vk_shape *shape, const rssm_kernel_params *p, VkPipelineLayout layout,
                             vk_window_pipe *out, rssm_error *err);
void vk_window_dispatch(vk_ctx *ctx, VkCommandBuffer cb, const vk_window_pipe *w, const vk_decode *d, vk_push pc,
                        uint32_t rows, uint32_t t_max, uint32_t layers);
/* How many workgroups share a value head in a pipeline of `rows`
 * (RSSM_VK_ROWS_*) whose subgroups take `row_block` rows at a time, for a
 * batch of max_rows rows: its ROW_SPLIT (shaders/decode.comp). */
uint32_t vk_row_split(const vk_ctx *ctx, const rssm_kernel_params *p, uint32_t max_rows, uint32_t rows,
                      uint32_t row_block);
/* The kernel parameters of a valid model (for a batch of one row), for the
 * questions asked of a model before it has a batch. */
void vk_model_params(const rssm_model *m, rssm_kernel_params *p);
/* ---- vk_batch.c: a batch, its recorded step, and the step's transfers */
rssm_status vk_batch_create(void *ctx, void *pool, const rssm_kernel_params *params,
                            void **batch, rssm_error *err);
void vk_batch_destroy(void *ctx, void *batch);
rssm_status vk_batch_set_gate_params(void *ctx, void *batch, uint32_t layer, const float *A_log,
                                     const float *dt_bias, rssm_error *err);
rssm_status vk_batch_upload(void *ctx, void *batch, uint32_t rows, const rssm_step_inputs *in,
                            rssm_error *err);
rssm_status vk_batch_run(void *ctx, void *batch, uint32_t rows, const rssm_row_header *hdr,
                         uint32_t *overflow, rssm_error *err);
rssm_status vk_batch_download(void *ctx, void *batch, uint32_t rows, void *out, rssm_error *err);
double vk_batch_last_run_seconds(void *ctx, void *batch);
/* What vk_bench.c records a step with, so that its programs run a step
 * exactly as the batch's own command buffer does. */
/* Binds the batch's `set`, pushes its constants, dispatches one step: every
 * layer in one dispatch, or (layer_by_layer) one dispatch per layer, each
 * after the one before it, as a model runs them; flush_first as
 * vk_decode_dispatch's. */
void vk_batch_cmd_step(vk_ctx *ctx, const vk_batch *b, VkCommandBuffer cb, VkDescriptorSet set, bool layer_by_layer,
                       bool flush_first);
/* Whether any of a step's `rows` header rows flushes (RSSM_ROW_FLUSHES):
 * the order of its two dispatches. */
bool vk_step_flushes(const vk_batch *b, uint32_t rows, const rssm_row_header *hdr);
/* A descriptor pool (*pool; VK_NULL_HANDLE when its creation fails) with
 * `count` sets of the batch's set layout, allocated into sets[0..count-1]. */
rssm_status vk_batch_sets_create(vk_ctx *ctx, const vk_batch *b, uint32_t count, VkDescriptorPool *pool,
                                 VkDescriptorSet *sets, rssm_error *err);
/* Points `set` at the batch's buffers, its header binding at
 * [header_offset, header_offset + header_range) of `header`. */
void vk_batch_sets_write(vk_ctx *ctx, const vk_batch *b, VkDescriptorSet set, VkBuffer header,
                         VkDeviceSize header_offset, VkDeviceSize header_range);

/* The step arrays' places in a batch's io buffers for p->max_rows rows. */
void vk_io_layout_init(vk_io_layout *io, const rssm_kernel_params *p, VkDeviceSize align);

/* ---- vk_window.c: rssm_batch_verify's window in one dispatch */
rssm_status vk_batch_verify(void *ctx, void *batch, uint32_t rows, const rssm_row_header *hdr, const uint32_t *drafts,
                            uint32_t t_max, const rssm_step_inputs *in, void *out, uint32_t *first_overflow,
                            rssm_error *err);
/* A batch's window (vk_batch.window), after the batch's work is done: the
 * ops table's batch_destroy calls it (vk_backend.c). */
void vk_window_destroy(vk_ctx *ctx, vk_window *w);

/* ---- vk_layer.c: one layer on the caller's buffers (rssm_layer_record) */
rssm_status vk_layer_check(void *ctx, const rssm_kernel_params *p, const rssm_layer_io *shape, rssm_error *err);
rssm_status vk_layer_create(void *ctx, const rssm_kernel_params *p, const rssm_layer_io *shape, void **layer,
                            rssm_error *err);
void vk_layer_destroy(void *ctx, void *layer);
rssm_status vk_layer_record(void *ctx, void *layer, uint32_t rows, const rssm_layer_buffers *t, bool materialise,
                            const rssm_record_window *window, void *cmd, rssm_error *err);
rssm_status vk_layer_record_advance(void *ctx, void *layer, uint32_t rows, const rssm_buffer *slot_index,
                                    const rssm_buffer *write_pos, const rssm_buffer *force, const rssm_buffer *cursor,
                                    void *cmd, rssm_error *err);
rssm_status vk_vulkan_handles(void *ctx, rssm_vulkan_handles *h, rssm_error *err);

/* ---- vk_bench.c: the benchmark entries (docs/design.md §7) */
rssm_status vk_copy_bandwidth(void *vctx, size_t bytes, double *bytes_per_second, rssm_error *err);
rssm_status vk_batch_time_steps(void *ctx, void *batch, uint32_t rows, uint32_t steps,
                                const rssm_row_header *hdr, uint32_t reps, rssm_timing *timing, rssm_error *err);
rssm_status vk_pool_inplace_seconds(void *ctx, void *pool, size_t bytes, uint32_t reps, uint32_t flip,
                                    double *seconds, rssm_error *err);

#endif
