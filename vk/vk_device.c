/* Vulkan instance and device: loader, validation messenger, device choice,
 * features, and the context every other vk/ file works in. */
#include "vk_internal.h"
#include "error.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* volk keeps the loader's entry points in globals it writes while loading;
 * this lock makes creating contexts from several threads safe. Everything a
 * context uses afterwards lives in the context (instance fns, device table). */
static pthread_mutex_t volk_lock = PTHREAD_MUTEX_INITIALIZER;

rssm_status vk_fail(vk_ctx *ctx, VkResult r, const char *what, rssm_error *err)
{
    if (ctx && ctx->validation_failed)
        return vk_check_validation(ctx, err);
    rssm_status st = r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY
                         ? RSSM_ERR_OUT_OF_MEMORY
                         : RSSM_ERR_DEVICE;
    return rssm_set_error(err, st, "vulkan: %s failed (VkResult %d)", what, (int)r);
}

rssm_status vk_check_validation(vk_ctx *ctx, rssm_error *err)
{
    if (!ctx->validation_failed)
        return RSSM_OK;
    ctx->validation_failed = false;
    return rssm_set_error(err, RSSM_ERR_DEVICE, "validation: %s", ctx->validation_message);
}

/* Any warning or error from the layer is a failure (RSSM_VK_VALIDATION is a
 * test mode). The first one is kept for the next backend call to report;
 * during destroy no call is left to fail, so it is printed and we abort. */
static VKAPI_ATTR VkBool32 VKAPI_CALL on_validation_message(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user)
{
    (void)types;
    vk_ctx *ctx = user;
    if (severity < VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT)
        return VK_FALSE;
    const char *msg = data && data->pMessage ? data->pMessage : "(no message)";
    if (ctx->destroying) {
        fprintf(stderr, "rssm vulkan: validation message while destroying: %s\n", msg);
        if (!ctx->create_failed)
            abort();
        return VK_FALSE; /* the failed create already returns an error */
    }
    if (!ctx->validation_failed) {
        ctx->validation_failed = true;
        snprintf(ctx->validation_message, sizeof ctx->validation_message, "%s", msg);
    }
    return VK_FALSE;
}

static bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static bool has_layer(const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0)
        return false;
    VkLayerProperties *p = calloc(n, sizeof *p);
    bool found = false;
    if (p && vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = strcmp(p[i].layerName, name) == 0;
    free(p);
    return found;
}

static rssm_status create_instance(vk_ctx *ctx, rssm_error *err)
{
    VkResult r = volkInitialize();
    if (r != VK_SUCCESS)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE,
                              "vulkan: no Vulkan loader (libvulkan.so.1) could be loaded");
    if (volkGetInstanceVersion() < VK_API_VERSION_1_3)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: the loader offers Vulkan %u.%u; 1.3 is needed",
                              VK_API_VERSION_MAJOR(volkGetInstanceVersion()),
                              VK_API_VERSION_MINOR(volkGetInstanceVersion()));
    const char *layers[1] = {"VK_LAYER_KHRONOS_validation"};
    const char *exts[1] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
    if (ctx->validation && !has_layer(layers[0]))
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE,
                              "vulkan: RSSM_VK_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not installed "
                              "(Debian: vulkan-validationlayers)");
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "rssm",
        .pEngineName = "rssm",
        .apiVersion = VK_API_VERSION_1_3,
    };
    VkDebugUtilsMessengerCreateInfoEXT mci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_validation_message,
        .pUserData = ctx,
    };
    VkInstanceCreateInfo ici = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        /* Chained, so instance creation and destruction are covered too. */
        .pNext = ctx->validation ? &mci : NULL,
        .pApplicationInfo = &app,
        .enabledLayerCount = ctx->validation ? 1u : 0u,
        .ppEnabledLayerNames = layers,
        .enabledExtensionCount = ctx->validation ? 1u : 0u,
        .ppEnabledExtensionNames = exts,
    };
    r = vkCreateInstance(&ici, NULL, &ctx->instance);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: no Vulkan driver is installed");
    if (r != VK_SUCCESS)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: vkCreateInstance failed (VkResult %d)", (int)r);

#define LOAD(name) ctx->fi.name = (PFN_vk##name)vkGetInstanceProcAddr(ctx->instance, "vk" #name)
    LOAD(DestroyInstance);
    LOAD(EnumeratePhysicalDevices);
    LOAD(GetPhysicalDeviceProperties2);
    LOAD(GetPhysicalDeviceFeatures2);
    LOAD(GetPhysicalDeviceMemoryProperties);
    LOAD(GetPhysicalDeviceQueueFamilyProperties);
    LOAD(EnumerateDeviceExtensionProperties);
    LOAD(CreateDevice);
    LOAD(DestroyDevice);
    LOAD(CreateDebugUtilsMessengerEXT);
    LOAD(DestroyDebugUtilsMessengerEXT);
    LOAD(GetPhysicalDeviceCooperativeMatrixPropertiesKHR);
#undef LOAD
    if (ctx->validation) {
        if (!ctx->fi.CreateDebugUtilsMessengerEXT)
            return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: VK_EXT_debug_utils is missing");
        r = ctx->fi.CreateDebugUtilsMessengerEXT(ctx->instance, &mci, NULL, &ctx->messenger);
        if (r != VK_SUCCESS)
            return rssm_set_error(err, RSSM_ERR_UNAVAILABLE,
                                  "vulkan: creating the validation messenger failed (VkResult %d)", (int)r);
    }
    return RSSM_OK;
}

static bool has_extension(const VkExtensionProperties *e, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(e[i].extensionName, name) == 0)
            return true;
    return false;
}

static int type_rank(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
    }
}

static bool compute_queue(vk_ctx *ctx, VkPhysicalDevice pd, uint32_t *family, uint32_t *ts_bits)
{
    uint32_t n = 0;
    ctx->fi.GetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
    VkQueueFamilyProperties q[64];
    if (n > 64)
        n = 64;
    ctx->fi.GetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
    for (uint32_t i = 0; i < n; i++) {
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            *family = i;
            *ts_bits = q[i].timestampValidBits;
            return true;
        }
    }
    return false;
}

/* Discrete > integrated > virtual > CPU, or what RSSM_VK_DEVICE names (an
 * index into vkEnumeratePhysicalDevices or a substring of the name). */
static rssm_status choose_device(vk_ctx *ctx, rssm_error *err)
{
    uint32_t n = 0;
    VkResult r = ctx->fi.EnumeratePhysicalDevices(ctx->instance, &n, NULL);
    if (r != VK_SUCCESS || n == 0)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: no Vulkan device found");
    VkPhysicalDevice devs[16];
    if (n > 16)
        n = 16;
    r = ctx->fi.EnumeratePhysicalDevices(ctx->instance, &n, devs);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: enumerating devices failed (VkResult %d)", (int)r);

    const char *want = getenv("RSSM_VK_DEVICE");
    bool want_index = want && *want;
    for (const char *c = want; want_index && *c; c++)
        want_index = isdigit((unsigned char)*c) != 0;
    int best = -1, best_rank = 99;
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
        ctx->fi.GetPhysicalDeviceProperties2(devs[i], &p);
        uint32_t fam, bits;
        bool usable = p.properties.apiVersion >= VK_API_VERSION_1_3 && compute_queue(ctx, devs[i], &fam, &bits);
        if (want && *want) {
            bool named = want_index ? (uint32_t)atoi(want) == i : strstr(p.properties.deviceName, want) != NULL;
            if (!named)
                continue;
            if (!usable)
                return rssm_set_error(err, RSSM_ERR_UNAVAILABLE,
                                      "vulkan: RSSM_VK_DEVICE=%s names '%s', which lacks Vulkan 1.3 or a compute queue",
                                      want, p.properties.deviceName);
            best = (int)i;
            break;
        }
        int rank = type_rank(p.properties.deviceType);
        if (usable && rank < best_rank) {
            best = (int)i;
            best_rank = rank;
        }
    }
    if (best < 0)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE,
                              want && *want ? "vulkan: RSSM_VK_DEVICE=%s matches no device"
                                            : "vulkan: no device with Vulkan 1.3 and a compute queue%s",
                              want && *want ? want : "");
    ctx->phys = devs[best];
    return RSSM_OK;
}

/* Picks an fp16 x fp16 -> fp32 subgroup tile shape, 16x16x16 if offered. */
static void read_coopmat(vk_ctx *ctx, bool extension)
{
    ctx->device_coopmat = false;
    if (!extension || !ctx->fi.GetPhysicalDeviceCooperativeMatrixPropertiesKHR) {
        snprintf(ctx->coopmat_note, sizeof ctx->coopmat_note, "no VK_KHR_cooperative_matrix");
        return;
    }
    if (env_on("RSSM_VK_NO_COOPMAT")) {
        snprintf(ctx->coopmat_note, sizeof ctx->coopmat_note, "off (RSSM_VK_NO_COOPMAT)");
        return;
    }
    uint32_t n = 0;
    if (ctx->fi.GetPhysicalDeviceCooperativeMatrixPropertiesKHR(ctx->phys, &n, NULL) != VK_SUCCESS || n == 0) {
        snprintf(ctx->coopmat_note, sizeof ctx->coopmat_note, "VK_KHR_cooperative_matrix lists no shapes");
        return;
    }
    VkCooperativeMatrixPropertiesKHR p[64];
    if (n > 64)
        n = 64;
    for (uint32_t i = 0; i < n; i++)
        p[i] = (VkCooperativeMatrixPropertiesKHR){.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR};
    if (ctx->fi.GetPhysicalDeviceCooperativeMatrixPropertiesKHR(ctx->phys, &n, p) != VK_SUCCESS)
        n = 0;
    int pick = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (p[i].AType != VK_COMPONENT_TYPE_FLOAT16_KHR || p[i].BType != VK_COMPONENT_TYPE_FLOAT16_KHR ||
            p[i].CType != VK_COMPONENT_TYPE_FLOAT32_KHR || p[i].ResultType != VK_COMPONENT_TYPE_FLOAT32_KHR ||
            p[i].scope != VK_SCOPE_SUBGROUP_KHR)
            continue;
        /* The kernel's element-wise staging needs whole subgroups per tile. */
        if ((p[i].MSize * p[i].NSize) % ctx->subgroup_size != 0)
            continue;
        if (pick < 0 || (p[i].MSize == 16 && p[i].NSize == 16 && p[i].KSize == 16))
            pick = (int)i;
    }
    if (pick < 0) {
        snprintf(ctx->coopmat_note, sizeof ctx->coopmat_note, "no fp16 x fp16 -> fp32 subgroup shape among %u", n);
        return;
    }
    ctx->device_coopmat = true;
    ctx->tile_m = p[pick].MSize;
    ctx->tile_n = p[pick].NSize;
    ctx->tile_k = p[pick].KSize;
    snprintf(ctx->coopmat_note, sizeof ctx->coopmat_note, "fp16 x fp16 -> fp32, %ux%ux%u (of %u shapes)",
             ctx->tile_m, ctx->tile_n, ctx->tile_k, n);
}

static rssm_status create_device(vk_ctx *ctx, rssm_error *err)
{
    VkPhysicalDeviceSubgroupSizeControlProperties sizes = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
                                              .pNext = &sizes};
    VkPhysicalDeviceDriverProperties driver = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES,
                                               .pNext = &sub};
    VkPhysicalDeviceProperties2 props = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &driver};
    ctx->fi.GetPhysicalDeviceProperties2(ctx->phys, &props);
    ctx->props = props.properties;
    ctx->fi.GetPhysicalDeviceMemoryProperties(ctx->phys, &ctx->mem_props);

    const VkSubgroupFeatureFlags need_ops =
        VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
    if (!(sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) || (sub.supportedOperations & need_ops) != need_ops)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE,
                              "vulkan: %s lacks subgroup basic/arithmetic/shuffle operations in compute shaders",
                              ctx->props.deviceName);

    uint32_t next = 0;
    ctx->fi.EnumerateDeviceExtensionProperties(ctx->phys, NULL, &next, NULL);
    VkExtensionProperties *exts = calloc(next ? next : 1, sizeof *exts);
    if (!exts)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    ctx->fi.EnumerateDeviceExtensionProperties(ctx->phys, NULL, &next, exts);
    bool coopmat_ext = has_extension(exts, next, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
    bool stats_ext = has_extension(exts, next, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    bool push_ext = has_extension(exts, next, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    /* By name: the headers of Debian 12 predate the extension. */
    ctx->bfloat16_ext = has_extension(exts, next, "VK_KHR_shader_bfloat16");
    free(exts);

    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cm_f = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR stats_f = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pNext = coopmat_ext ? &cm_f : NULL};
    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
                                            .pNext = stats_ext ? (void *)&stats_f : (void *)(coopmat_ext ? &cm_f : NULL)};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &f13};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    ctx->fi.GetPhysicalDeviceFeatures2(ctx->phys, &f);

    /* Pin the subgroup size when the device lets us; otherwise trust the
     * reported size, which compute dispatches of full subgroups get. */
    ctx->subgroup_size = sub.subgroupSize;
    ctx->subgroup_size_control = f13.subgroupSizeControl && f13.computeFullSubgroups &&
                                 (sizes.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                                 sub.subgroupSize >= sizes.minSubgroupSize &&
                                 sub.subgroupSize <= sizes.maxSubgroupSize;
    if (ctx->subgroup_size == 0 || (ctx->subgroup_size & (ctx->subgroup_size - 1)) != 0 ||
        ctx->subgroup_size * RSSM_VK_SUBGROUPS > ctx->props.limits.maxComputeWorkGroupInvocations)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: subgroup size %u is not usable",
                              ctx->subgroup_size);

    ctx->float16_arith = f12.shaderFloat16;
    read_coopmat(ctx, coopmat_ext && cm_f.cooperativeMatrix && f12.shaderFloat16 && f12.vulkanMemoryModel);
#ifndef RSSM_VK_HAVE_CM_SPIRV
    if (ctx->device_coopmat) {
        ctx->device_coopmat = false;
        snprintf(ctx->coopmat_note, sizeof ctx->coopmat_note,
                 "the device has it, but this build has no cooperative-matrix SPIR-V");
    }
#endif

    /* A pool is an array of buffers indexed by each workgroup's slot (vk_abi.h). */
    if (!f.features.shaderStorageBufferArrayDynamicIndexing ||
        ctx->props.limits.maxPerStageDescriptorStorageBuffers < RSSM_VK_POOL_BUFFERS + BIND_COUNT - 1)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE,
                              "vulkan: %s cannot index an array of %u storage buffers in a shader",
                              ctx->props.deviceName, RSSM_VK_POOL_BUFFERS);
    if (!compute_queue(ctx, ctx->phys, &ctx->queue_family, &ctx->timestamp_bits))
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: no compute queue");
    if (!ctx->props.limits.timestampComputeAndGraphics)
        ctx->timestamp_bits = 0;

    bool use_cm = ctx->device_coopmat && ctx->kernels == VK_KERNELS_COOPMAT;
    /* The compiler's own statistics of each pipeline (registers, spills,
     * shared memory) on request: how docs/design.md §8 explains a kernel's
     * time; and on every device each pipeline created, with the time that
     * took (docs/testing.md). */
    ctx->pipeline_times = env_on("RSSM_VK_PIPELINE_STATS");
    ctx->pipeline_stats = ctx->pipeline_times && stats_ext && stats_f.pipelineExecutableInfo;
    /* Overrides for measuring the kernel choices (vk/README.md). */
    const char *split = getenv("RSSM_VK_ROW_SPLIT"), *prefetch = getenv("RSSM_VK_PREFETCH");
    const char *one = getenv("RSSM_VK_ONE_DISPATCH"), *window = getenv("RSSM_VK_WINDOW");
    const char *window_tokens = getenv("RSSM_VK_WINDOW_TOKENS"), *flush_first = getenv("RSSM_VK_FLUSH_FIRST");
    ctx->tune_row_split = split ? (uint32_t)strtoul(split, NULL, 10) : 0;
    ctx->tune_prefetch = prefetch && *prefetch ? strcmp(prefetch, "0") != 0 : -1;
    ctx->tune_one_dispatch = one && *one ? strcmp(one, "0") != 0 : -1;
    ctx->tune_window = window && *window ? strcmp(window, "0") != 0 : -1;
    ctx->tune_window_tokens = window_tokens ? (uint32_t)strtoul(window_tokens, NULL, 10) : 0;
    ctx->tune_flush_first = flush_first && *flush_first ? strcmp(flush_first, "0") != 0 : -1;
    /* On a CPU device every pipeline is an LLVM compile at its first
     * dispatch (lavapipe), most of a cold test run: the `_rt` modules take
     * the head's place and counts, the ring length and the ring and io
     * dtypes as push constants, so that models differing only in those
     * share pipelines there; a GPU keeps them constant (docs/design.md
     * §8). The `_cm` module has no such form. RSSM_VK_RUNTIME_SHAPE=0 runs
     * a GPU's modules (the tests do, for a few cases). */
    const char *rt = getenv("RSSM_VK_RUNTIME_SHAPE");
    ctx->runtime_shape = vk_cpu_device(ctx) && ctx->kernels != VK_KERNELS_COOPMAT && !(rt && !strcmp(rt, "0")) &&
                         ctx->props.limits.maxPushConstantsSize >= sizeof(vk_push) + sizeof(vk_shape);
    cm_f.pNext = NULL;
    stats_f.pNext = use_cm ? &cm_f : NULL;
    VkPhysicalDeviceVulkan13Features e13 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
        .pNext = ctx->pipeline_stats ? (void *)&stats_f : (void *)(use_cm ? &cm_f : NULL),
        .subgroupSizeControl = ctx->subgroup_size_control,
        .computeFullSubgroups = ctx->subgroup_size_control,
        /* LocalSizeId: the workgroup size is a specialization constant. */
        .maintenance4 = VK_TRUE,
    };
    cm_f.cooperativeMatrixRobustBufferAccess = VK_FALSE;
    VkPhysicalDeviceVulkan12Features e12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .pNext = &e13,
        .shaderFloat16 = use_cm,
        .vulkanMemoryModel = use_cm,
    };
    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
        .queueFamilyIndex = ctx->queue_family,
        .queueCount = 1,
        .pQueuePriorities = &prio,
    };
    /* The per-layer entry pushes its descriptors into the caller's command
     * buffer (vk_layer.c): without the extension only it is unavailable. */
    if (push_ext) {
        VkPhysicalDevicePushDescriptorPropertiesKHR pd = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PUSH_DESCRIPTOR_PROPERTIES_KHR};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &pd};
        ctx->fi.GetPhysicalDeviceProperties2(ctx->phys, &p2);
        ctx->push_descriptors = pd.maxPushDescriptors >= VK_DESCRIPTORS;
    }
    const char *dev_exts[3];
    uint32_t n_exts = 0;
    if (ctx->push_descriptors)
        dev_exts[n_exts++] = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
    if (use_cm)
        dev_exts[n_exts++] = VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME;
    if (ctx->pipeline_stats)
        dev_exts[n_exts++] = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
    const VkPhysicalDeviceFeatures core = {.shaderStorageBufferArrayDynamicIndexing = VK_TRUE};
    VkDeviceCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
        .pNext = &e12,
        .pEnabledFeatures = &core,
        .queueCreateInfoCount = 1,
        .pQueueCreateInfos = &qci,
        .enabledExtensionCount = n_exts,
        .ppEnabledExtensionNames = dev_exts,
    };
    VkResult r = ctx->fi.CreateDevice(ctx->phys, &dci, NULL, &ctx->device);
    if (r != VK_SUCCESS)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan: vkCreateDevice on %s failed (VkResult %d)",
                              ctx->props.deviceName, (int)r);
    pthread_mutex_lock(&volk_lock);
    volkLoadInstanceOnly(ctx->instance);
    volkLoadDeviceTable(&ctx->vk, ctx->device);
    pthread_mutex_unlock(&volk_lock);
    ctx->vk.vkGetDeviceQueue(ctx->device, ctx->queue_family, 0, &ctx->queue);

    snprintf(ctx->device_line, sizeof ctx->device_line, "%.120s (%.60s %.100s, Vulkan %u.%u.%u)", ctx->props.deviceName,
             driver.driverName, driver.driverInfo, VK_API_VERSION_MAJOR(ctx->props.apiVersion),
             VK_API_VERSION_MINOR(ctx->props.apiVersion), VK_API_VERSION_PATCH(ctx->props.apiVersion));
    return RSSM_OK;
}

static rssm_status create_queue_objects(vk_ctx *ctx, rssm_error *err)
{
    VkCommandPoolCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        .queueFamilyIndex = ctx->queue_family,
    };
    VkResult r = ctx->vk.vkCreateCommandPool(ctx->device, &pci, NULL, &ctx->command_pool);
    if (r != VK_SUCCESS)
        return vk_fail(ctx, r, "vkCreateCommandPool", err);
    VkCommandBufferAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = ctx->command_pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = 1,
    };
    if ((r = ctx->vk.vkAllocateCommandBuffers(ctx->device, &ai, &ctx->transfer_cmd)) != VK_SUCCESS)
        return vk_fail(ctx, r, "vkAllocateCommandBuffers", err);
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = ctx->vk.vkCreateFence(ctx->device, &fci, NULL, &ctx->transfer_fence)) != VK_SUCCESS)
        return vk_fail(ctx, r, "vkCreateFence", err);
    if ((r = vk_cache_create(ctx)) != VK_SUCCESS)
        return vk_fail(ctx, r, "vkCreatePipelineCache", err);
    return RSSM_OK;
}

rssm_status vk_ctx_create(const char *variant, vk_ctx **out, rssm_error *err)
{
    vk_kernels kernels;
    /* The bare "vulkan" runs the portable kernels on every device: on the
     * one GPU measured they are faster than the `_cm` ones on every step
     * kind, and exact for an fp32 ring (docs/design.md §8). */
    if (strcmp(variant, "vulkan:coopmat") == 0)
        kernels = VK_KERNELS_COOPMAT;
    else if (strcmp(variant, "vulkan") == 0 || strcmp(variant, "vulkan:portable") == 0)
        kernels = VK_KERNELS_PORTABLE;
    else if (strcmp(variant, "vulkan:coopmat-emulated") == 0)
        kernels = VK_KERNELS_COOPMAT_EMULATED;
    else
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "vulkan: unknown variant '%s'", variant);

    vk_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    ctx->kernels = kernels;
    pthread_mutex_init(&ctx->queue_lock, NULL);
    pthread_mutex_init(&ctx->shared_lock, NULL);
    ctx->validation = env_on("RSSM_VK_VALIDATION");
    /* The emulated tiles use the common 16x16x16 shape; read_coopmat
     * replaces it with a device shape for the real ones. */
    ctx->tile_m = ctx->tile_n = ctx->tile_k = 16;
    rssm_status st;
    pthread_mutex_lock(&volk_lock);
    st = create_instance(ctx, err);
    pthread_mutex_unlock(&volk_lock);
    if (st == RSSM_OK)
        st = choose_device(ctx, err);
    if (st == RSSM_OK)
        st = create_device(ctx, err);
    if (st == RSSM_OK && kernels == VK_KERNELS_COOPMAT && !ctx->device_coopmat)
        st = rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "vulkan:coopmat: %s: %s", ctx->props.deviceName,
                            ctx->coopmat_note);
    if (st == RSSM_OK)
        st = create_queue_objects(ctx, err);
    if (st == RSSM_OK)
        st = vk_check_validation(ctx, err);
    if (st != RSSM_OK) {
        /* A message that came with the failure (the loader's, say) is part
         * of this error, not a reason to stop the process on teardown. */
        if (ctx->validation_failed && err) {
            char why[RSSM_ERROR_MESSAGE_MAX];
            snprintf(why, sizeof why, "%s", err->message);
            rssm_set_error(err, st, "%s (validation: %s)", why, ctx->validation_message);
        }
        ctx->validation_failed = false;
        ctx->create_failed = true;
        vk_ctx_destroy(ctx);
        return st;
    }
    snprintf(ctx->variant, sizeof ctx->variant, "%s", variant);
    *out = ctx;
    return rssm_clear_error(err);
}

void vk_ctx_destroy(vk_ctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->validation_failed) {
        /* A message from a call that returned nothing (a destroy): no
         * later call is left to report it. */
        fprintf(stderr, "rssm vulkan: unreported validation message: %s\n", ctx->validation_message);
        abort();
    }
    ctx->destroying = true;
    if (ctx->device) {
        ctx->vk.vkDeviceWaitIdle(ctx->device);
        /* the device's shared pipelines and layouts (vk_shared.c made them) */
        for (size_t i = 0; i < ctx->shared_count; i++)
            ctx->vk.vkDestroyPipeline(ctx->device, ctx->shared[i].pipeline, NULL);
        for (int i = 0; i < 2; i++) {
            if (ctx->shared_layout[i])
                ctx->vk.vkDestroyPipelineLayout(ctx->device, ctx->shared_layout[i], NULL);
            if (ctx->shared_set_layout[i])
                ctx->vk.vkDestroyDescriptorSetLayout(ctx->device, ctx->shared_set_layout[i], NULL);
        }
        if (ctx->pipeline_cache)
            ctx->vk.vkDestroyPipelineCache(ctx->device, ctx->pipeline_cache, NULL);
        if (ctx->transfer_fence)
            ctx->vk.vkDestroyFence(ctx->device, ctx->transfer_fence, NULL);
        if (ctx->command_pool)
            ctx->vk.vkDestroyCommandPool(ctx->device, ctx->command_pool, NULL);
        ctx->fi.DestroyDevice(ctx->device, NULL);
    }
    if (ctx->messenger)
        ctx->fi.DestroyDebugUtilsMessengerEXT(ctx->instance, ctx->messenger, NULL);
    if (ctx->instance)
        ctx->fi.DestroyInstance(ctx->instance, NULL);
    free(ctx->shared);
    pthread_mutex_destroy(&ctx->queue_lock);
    pthread_mutex_destroy(&ctx->shared_lock);
    if (ctx->cache_lock_ready)
        pthread_mutex_destroy(&ctx->cache_lock);
    free(ctx);
}

static const char *kernels_name(const vk_ctx *ctx)
{
    switch (ctx->kernels) {
    case VK_KERNELS_PORTABLE: return "portable (subgroup arithmetic + shared memory)";
    case VK_KERNELS_COOPMAT: return "coopmat (flush on KHR cooperative matrices)";
    case VK_KERNELS_COOPMAT_EMULATED: return "coopmat-emulated (the _cm kernels on emulated tiles)";
    }
    return "?";
}

void vk_describe(vk_ctx *ctx, char *buf, size_t size)
{
    char note[sizeof ctx->cache_note];
    pthread_mutex_lock(&ctx->cache_lock);
    snprintf(note, sizeof note, "%s", ctx->cache_note);
    pthread_mutex_unlock(&ctx->cache_lock);
    snprintf(buf, size,
             "kernels: %s\n"
             "subgroup size: %u (%s)\n"
             "cooperative matrix: %s\n"
             "16-bit arithmetic: shaderFloat16 %s, VK_KHR_shader_bfloat16 %s (the kernels widen 16-bit data to fp32)\n"
             "shared memory: %u bytes per workgroup\n"
             "timestamps: %s\n"
             "pipeline cache: %s\n"
             "validation: %s\n",
             kernels_name(ctx), ctx->subgroup_size,
             ctx->subgroup_size_control ? "required per pipeline" : "device default",
             ctx->coopmat_note, ctx->float16_arith ? "yes" : "no", ctx->bfloat16_ext ? "offered" : "not offered",
             ctx->props.limits.maxComputeSharedMemorySize,
             ctx->timestamp_bits ? "yes" : "no (wall clock)", note,
             ctx->validation ? "VK_LAYER_KHRONOS_validation (RSSM_VK_VALIDATION=1: any message fails)" : "off");
}
