/* The Vulkan backend's pipeline cache on disk (vk/vk_cache.c): a batch
 * writes it, the next backend loads it and still decodes, a file made for
 * another device (or damaged) is replaced, an unusable directory only costs
 * the cache, and "off" keeps it in memory. Skipped without a Vulkan device. */
#include "test_support.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BACKEND "vulkan:portable"

static char g_dir[256];

/* The one cache file in g_dir, or 0 when there is none. */
static int cache_file(char *path, size_t size)
{
    DIR *d = opendir(g_dir);
    if (!d)
        return 0;
    int found = 0;
    for (struct dirent *ent; (ent = readdir(d)) != NULL;) {
        const size_t n = strlen(ent->d_name);
        if (strncmp(ent->d_name, "vulkan-", 7) == 0 && n > 4 && strcmp(ent->d_name + n - 4, ".bin") == 0) {
            assert_false(found); /* one device, one file */
            snprintf(path, size, "%s/%s", g_dir, ent->d_name);
            found = 1;
        }
    }
    closedir(d);
    return found;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* headerSize >= 32 and headerVersion 1 (VkPipelineCacheHeaderVersionOne),
 * little-endian. */
static int valid_header(const char *path)
{
    unsigned char h[8];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    const size_t n = fread(h, 1, sizeof h, f);
    fclose(f);
    return n == sizeof h && h[0] >= 32 && h[1] == 0 && h[4] == 1 && h[5] == 0 && h[6] == 0 && h[7] == 0;
}

/* What rssm_backend_describe says about the cache, or fails the test. */
static void describe_cache(rssm_backend *b, char *line, size_t size)
{
    char buf[4096];
    rssm_error err;
    TS_OK(rssm_backend_describe(b, buf, sizeof buf, &err), &err);
    const char *at = strstr(buf, "pipeline cache: ");
    assert_non_null(at);
    const char *end = strchr(at, '\n');
    snprintf(line, size, "%.*s", (int)(end ? end - at : (long)strlen(at)), at);
}

/* A backend, a batch (which creates the decode pipeline) and one step. */
static void decode_once(char *cache_line, size_t size)
{
    const rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, 4);
    ts_env e;
    ts_env_open_own(&e, BACKEND, &m, 1, RSSM_FLUSH_ALIGNED, 0);
    if (cache_line)
        describe_cache(e.backend, cache_line, size);
    rssm_error err;
    TS_OK(rssm_batch_create(e.pool, 1, &e.batch, &err), &err);
    rh_rng r;
    rh_rng_seed(&r, 7, 0);
    ts_env_alloc_random(&e, 1, &r);
    ts_inputs in;
    ts_inputs_alloc(&in, &m, 1);
    ts_inputs_random(&in, &r);
    void *out = malloc(ts_out_elems(&m, 1) * sizeof(float)); /* the widest io dtype */
    const uint32_t slots[1] = {0};
    const uint64_t seq[1] = {1};
    ts_step(&e, 1, slots, seq, 0, &in, out);
    free(out);
    ts_inputs_free(&in);
    ts_env_close(&e);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s/rssm-vk-cache-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir))
        return -1;
    return setenv("RSSM_VK_PIPELINE_CACHE", g_dir, 1);
}

static int teardown(void **state)
{
    (void)state;
    char path[512];
    while (cache_file(path, sizeof path))
        remove(path);
    rmdir(g_dir);
    return 0;
}

static void test_written_then_loaded(void **state)
{
    (void)state;
    char path[512], line[1024];
    assert_false(cache_file(path, sizeof path));
    decode_once(line, sizeof line);
    assert_non_null(strstr(line, "none yet"));
    assert_true(cache_file(path, sizeof path));
    const long size = file_size(path);
    assert_true(size >= 32); /* lavapipe keeps no pipelines in it: the header alone */
    assert_true(valid_header(path));

    /* The next process (here: backend) starts from the file. */
    decode_once(line, sizeof line);
    assert_non_null(strstr(line, "loaded"));
    assert_non_null(strstr(line, path));
    assert_int_equal(file_size(path), size);
}

static void test_foreign_file_replaced(void **state)
{
    (void)state;
    char path[512], line[1024];
    decode_once(NULL, 0);
    assert_true(cache_file(path, sizeof path));
    /* Same name, another device's (or a damaged) header. */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char junk[96];
    memset(junk, 0x5a, sizeof junk);
    assert_int_equal(fwrite(junk, 1, sizeof junk, f), sizeof junk);
    fclose(f);
    decode_once(line, sizeof line);
    assert_non_null(strstr(line, "another device"));
    assert_true(valid_header(path));
}

static void test_unusable_directory(void **state)
{
    (void)state;
    char file[512], line[1024];
    /* A directory path through a plain file cannot be created. */
    snprintf(file, sizeof file, "%s/plain-file", g_dir);
    FILE *f = fopen(file, "wb");
    assert_non_null(f);
    fclose(f);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/sub", file);
    setenv("RSSM_VK_PIPELINE_CACHE", bad, 1);
    decode_once(NULL, 0); /* still decodes */
    const rssm_model m = ts_small_model(RSSM_GATE_KDA, 1, 2);
    ts_env e;
    ts_env_open_own(&e, BACKEND, &m, 1, RSSM_FLUSH_ALIGNED, 1); /* a batch: a pipeline, a failed write */
    describe_cache(e.backend, line, sizeof line);
    ts_env_close(&e);
    setenv("RSSM_VK_PIPELINE_CACHE", g_dir, 1);
    remove(file);
    assert_non_null(strstr(line, "cannot create the directory"));
}

static void test_off(void **state)
{
    (void)state;
    char path[512], line[1024];
    setenv("RSSM_VK_PIPELINE_CACHE", "off", 1);
    decode_once(line, sizeof line);
    setenv("RSSM_VK_PIPELINE_CACHE", g_dir, 1);
    assert_non_null(strstr(line, "in memory only"));
    assert_false(cache_file(path, sizeof path));
}

int main(void)
{
    rssm_backend *b = NULL;
    rssm_error err;
    if (rssm_backend_create(BACKEND, &b, &err) != RSSM_OK) {
        if (rh_backend_required(BACKEND)) {
            printf("%s is required here (RSSM_REQUIRE_BACKENDS) but cannot start: %s\n", BACKEND, err.message);
            return 1;
        }
        printf("skipped: no Vulkan device (%s)\n", err.message);
        return TS_SKIP_EXIT;
    }
    rssm_backend_destroy(&b);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_written_then_loaded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_file_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unusable_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_off, setup, teardown),
    };
    return TS_RUN(tests);
}
