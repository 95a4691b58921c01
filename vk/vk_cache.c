/* The pipeline cache on disk: decode pipelines compiled for this device by
 * an earlier process are loaded instead of compiled again (a driver's
 * shader compiler is most of the time rssm_batch_create takes).
 *
 * RSSM_VK_PIPELINE_CACHE: unset or empty -> $XDG_CACHE_HOME/rssm, else
 * $HOME/.cache/rssm; "off" or "0" -> in memory only; anything else -> that
 * directory. One file per device and driver build (the name carries the
 * vendor, device and pipelineCacheUUID), read once when the backend is
 * created and rewritten after a batch has created a pipeline. Writes go to a
 * temporary file renamed over the old one, so processes sharing the
 * directory never read half a file; a file whose header names another
 * device or driver is ignored, not trusted to the driver. A cache that cannot
 * be read or written costs compile time, never a failure: what happened is
 * in rssm_backend_describe. */
#include "vk_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Larger files are not ours (a decode pipeline is tens of KiB). */
#define CACHE_MAX_BYTES (64u << 20)

/* VkPipelineCacheHeaderVersionOne, field by field (the struct's packing is
 * the spec's, not the compiler's). */
#define HEADER_BYTES 32u

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool header_matches(const vk_ctx *ctx, const unsigned char *data, size_t size)
{
    return size >= HEADER_BYTES && le32(data) >= HEADER_BYTES &&
           le32(data + 4) == (uint32_t)VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
           le32(data + 8) == ctx->props.vendorID && le32(data + 12) == ctx->props.deviceID &&
           memcmp(data + 16, ctx->props.pipelineCacheUUID, VK_UUID_SIZE) == 0;
}

/* The cache directory, or "" when the disk cache is off. */
static void cache_dir(char *dir, size_t size)
{
    const char *env = getenv("RSSM_VK_PIPELINE_CACHE");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    dir[0] = '\0';
    if (env && (strcmp(env, "off") == 0 || strcmp(env, "0") == 0))
        return;
    if (env && *env)
        snprintf(dir, size, "%s", env);
    else if (xdg && *xdg)
        snprintf(dir, size, "%s/rssm", xdg);
    else if (home && *home)
        snprintf(dir, size, "%s/.cache/rssm", home);
}

/* mkdir -p */
static int make_dirs(const char *dir)
{
    char buf[VK_CACHE_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* The whole file, malloc'd, or NULL (missing, unreadable, too large). */
static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *data = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && (unsigned long)n <= CACHE_MAX_BYTES &&
        fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n)) != NULL &&
        fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    *size = data ? (size_t)n : 0;
    return data;
}

VkResult vk_cache_create(vk_ctx *ctx)
{
    pthread_mutex_init(&ctx->cache_lock, NULL);
    ctx->cache_lock_ready = true;
    char dir[VK_CACHE_PATH_MAX - 96]; /* room for the file name */
    cache_dir(dir, sizeof dir);
    ctx->cache_path[0] = '\0';
    unsigned char *data = NULL;
    size_t size = 0;
    if (dir[0]) {
        char uuid[2 * VK_UUID_SIZE + 1];
        for (unsigned i = 0; i < VK_UUID_SIZE; i++)
            snprintf(uuid + 2 * i, 3, "%02x", ctx->props.pipelineCacheUUID[i]);
        snprintf(ctx->cache_path, sizeof ctx->cache_path, "%s/vulkan-%04x-%04x-%s.bin", dir,
                 ctx->props.vendorID, ctx->props.deviceID, uuid);
        data = read_file(ctx->cache_path, &size);
        if (data && !header_matches(ctx, data, size)) {
            snprintf(ctx->cache_note, sizeof ctx->cache_note, "%s (found a file for another device or driver: "
                     "ignored, will be replaced)", ctx->cache_path);
            free(data);
            data = NULL;
            size = 0;
        } else if (data) {
            snprintf(ctx->cache_note, sizeof ctx->cache_note, "%s (loaded %zu bytes)", ctx->cache_path, size);
        } else {
            snprintf(ctx->cache_note, sizeof ctx->cache_note, "%s (none yet)", ctx->cache_path);
        }
    } else {
        snprintf(ctx->cache_note, sizeof ctx->cache_note, "in memory only (RSSM_VK_PIPELINE_CACHE=off)");
    }
    VkPipelineCacheCreateInfo cci = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
        .initialDataSize = size,
        .pInitialData = data,
    };
    VkResult r = ctx->vk.vkCreatePipelineCache(ctx->device, &cci, NULL, &ctx->pipeline_cache);
    free(data);
    if (r == VK_SUCCESS)
        ctx->cache_bytes = size;
    return r;
}

void vk_cache_store(vk_ctx *ctx)
{
    if (!ctx->cache_path[0])
        return;
    pthread_mutex_lock(&ctx->cache_lock);
    size_t size = 0;
    unsigned char *data = NULL;
    VkResult r = ctx->vk.vkGetPipelineCacheData(ctx->device, ctx->pipeline_cache, &size, NULL);
    /* A pipeline found in the loaded cache leaves its size unchanged: then
     * there is nothing new to write. */
    if (r == VK_SUCCESS && size > 0 && size != ctx->cache_bytes && (data = malloc(size)) != NULL)
        r = ctx->vk.vkGetPipelineCacheData(ctx->device, ctx->pipeline_cache, &size, data);
    if (!data || r != VK_SUCCESS) {
        free(data);
        pthread_mutex_unlock(&ctx->cache_lock);
        return;
    }
    char dir[VK_CACHE_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", ctx->cache_path);
    *strrchr(dir, '/') = '\0';
    char tmp[VK_CACHE_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", ctx->cache_path, (long)getpid());
    FILE *f = NULL;
    const char *failed = NULL;
    int why = 0;
    if (make_dirs(dir) != 0) {
        failed = "cannot create the directory";
        why = errno;
    } else if (!(f = fopen(tmp, "wb"))) {
        failed = "cannot create the file";
        why = errno;
    } else {
        const bool wrote = fwrite(data, 1, size, f) == size;
        why = errno;
        if (fclose(f) != 0 || !wrote) {
            failed = "write failed";
            why = why ? why : errno;
        } else if (rename(tmp, ctx->cache_path) != 0) {
            failed = "rename failed";
            why = errno;
        }
        if (failed)
            remove(tmp);
    }
    if (failed) {
        snprintf(ctx->cache_note, sizeof ctx->cache_note, "%s (%s: %s; pipelines are compiled anew)",
                 ctx->cache_path, failed, strerror(why));
    } else {
        ctx->cache_bytes = size;
        snprintf(ctx->cache_note, sizeof ctx->cache_note, "%s (%zu bytes written)", ctx->cache_path, size);
    }
    free(data);
    pthread_mutex_unlock(&ctx->cache_lock);
}
