/* On a CPU Vulkan device (lavapipe) models of one gate and state dtype share
 * their decode and window pipelines whatever their head size (up to 128
 * channels and 256 rows), ring length (up to 32), ring and io dtypes and
 * gate mode (vk/README.md, the `_rt` modules): there each pipeline is an LLVM
 * compile, most of a cold test run (docs/testing.md). Layer objects of
 * several such models are created with RSSM_VK_PIPELINE_STATS on, which
 * prints a line per pipeline created (module and specialization), and the
 * distinct lines are counted. Creating a pipeline compiles nothing on
 * lavapipe (that comes at its first dispatch), so this takes seconds.
 * Skipped without a Vulkan CPU device. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BACKEND "vulkan:portable"
#define MAX_LINES 64

typedef struct seen {
    char line[MAX_LINES][512];
    size_t n;     /* distinct lines */
    size_t total; /* pipelines created */
} seen;

/* A one-layer GDN model (H = 2, HV = 4) of K x V heads with an L-entry
 * ring (the layer entry's strides, multiples of 16 bytes). */
static rssm_layer_desc desc_of(uint32_t K, uint32_t V, uint32_t L, rssm_dtype ring, rssm_dtype io,
                               rssm_gate_mode mode)
{
    rssm_layer_desc d = {0};
    d.model = ts_small_model(RSSM_GATE_GDN, 1, L);
    d.model.num_qk_heads = 2;
    d.model.num_v_heads = 4;
    d.model.head_k = K;
    d.model.head_v = V;
    d.model.ring_dtype = ring;
    d.model.io_dtype = io;
    d.model.gate_mode = mode;
    d.max_rows = 4;
    d.slots = 8;
    return d;
}

/* On a new backend (so that it has made no pipeline yet), creates a layer
 * object of each description with stderr in a file, and keeps the distinct
 * "rssm vulkan pipeline" lines, each without its creation time. */
static rssm_status capture(const rssm_layer_desc *descs, size_t n, seen *s, rssm_error *err)
{
    s->n = s->total = 0;
    rssm_backend *b = NULL;
    rssm_status st = rssm_backend_create(BACKEND, &b, err);
    if (st != RSSM_OK)
        return st;
    FILE *tmp = tmpfile();
    if (!tmp) {
        rssm_backend_destroy(&b);
        snprintf(err->message, sizeof err->message, "tmpfile failed");
        return err->status = RSSM_ERR_IO;
    }
    fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    dup2(fileno(tmp), STDERR_FILENO);
    rssm_layer *layers[8] = {NULL};
    for (size_t i = 0; i < n && i < 8 && st == RSSM_OK; i++)
        st = rssm_layer_create(b, &descs[i], &layers[i], err);
    for (size_t i = 0; i < 8; i++)
        rssm_layer_destroy(&layers[i]);
    rssm_backend_destroy(&b);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(tmp);
    char line[512];
    while (st == RSSM_OK && s->n < MAX_LINES && fgets(line, sizeof line, tmp)) {
        if (strncmp(line, "rssm vulkan pipeline ", 21) != 0)
            continue;
        s->total++;
        char *colon = strrchr(line, ':'); /* ": 0.123 s" */
        if (colon)
            *colon = '\0';
        size_t j = 0;
        while (j < s->n && strcmp(s->line[j], line) != 0)
            j++;
        if (j == s->n)
            snprintf(s->line[s->n++], sizeof s->line[0], "%s", line);
    }
    fclose(tmp);
    return st;
}

static void pipelines_of(const rssm_layer_desc *descs, size_t n, seen *s)
{
    assert_true(n <= 8);
    rssm_error err;
    TS_OK(capture(descs, n, s, &err), &err);
    for (size_t i = 0; i < s->n; i++)
        print_message("%s\n", s->line[i]);
}

/* Distinct pipelines of module `name` (the word after "pipeline "). */
static size_t count_module(const seen *s, const char *name)
{
    size_t c = 0;
    const size_t n = strlen(name);
    for (size_t i = 0; i < s->n; i++)
        if (strncmp(s->line[i] + 21, name, n) == 0 && s->line[i][21 + n] == ' ')
            c++;
    return c;
}

static void test_shapes_share_pipelines(void **state)
{
    (void)state;
    const rssm_layer_desc descs[] = {
        desc_of(128, 128, 16, RSSM_DTYPE_F32, RSSM_DTYPE_F32, RSSM_GATE_PRECOMPUTED),
        desc_of(36, 20, 9, RSSM_DTYPE_F16, RSSM_DTYPE_F32, RSSM_GATE_RAW),
        desc_of(64, 48, 16, RSSM_DTYPE_F16, RSSM_DTYPE_BF16, RSSM_GATE_RAW_SAFE),
        desc_of(32, 32, 12, RSSM_DTYPE_BF16, RSSM_DTYPE_F16, RSSM_GATE_PRECOMPUTED),
        desc_of(128, 256, 24, RSSM_DTYPE_F32, RSSM_DTYPE_F32, RSSM_GATE_PRECOMPUTED),
    };
    seen s;
    pipelines_of(descs, sizeof descs / sizeof descs[0], &s);
    /* the rows that flush and those that do not; one window */
    assert_int_equal(count_module(&s, "decode_replay_rt"), 2);
    assert_int_equal(count_module(&s, "window_rt"), 1);
    /* no specialised decode or window module on a CPU device */
    assert_int_equal(count_module(&s, "decode_replay"), 0);
    assert_int_equal(count_module(&s, "window"), 0);
}

/* Past the rooms a head has arrays of its own size: one more decode pair
 * (and no window: a window's arrays for 256 channels exceed lavapipe's
 * shared memory). */
static void test_wide_head_has_its_own(void **state)
{
    (void)state;
    const rssm_layer_desc descs[] = {
        desc_of(128, 128, 16, RSSM_DTYPE_F32, RSSM_DTYPE_F32, RSSM_GATE_PRECOMPUTED),
        desc_of(256, 128, 16, RSSM_DTYPE_F32, RSSM_DTYPE_F32, RSSM_GATE_PRECOMPUTED),
    };
    seen s;
    pipelines_of(descs, sizeof descs / sizeof descs[0], &s);
    assert_int_equal(count_module(&s, "decode_replay_rt"), 4);
}

/* Layer objects of one model, alive together, share the device's
 * pipelines: each is made once (vk/vk_shared.c). */
static void test_same_model_made_once(void **state)
{
    (void)state;
    const rssm_layer_desc d = desc_of(128, 128, 16, RSSM_DTYPE_F32, RSSM_DTYPE_F32, RSSM_GATE_PRECOMPUTED);
    const rssm_layer_desc descs[] = {d, d, d};
    seen s;
    pipelines_of(descs, 3, &s);
    assert_int_equal(count_module(&s, "decode_replay_rt"), 2);
    assert_int_equal(count_module(&s, "window_rt"), 1);
    /* nothing made twice but the cursor advance, each layer object's own */
    assert_int_equal(s.total, s.n + 2);
}

int main(void)
{
    setenv("RSSM_VK_PIPELINE_STATS", "1", 1); /* read when the backend is created */
    rssm_error err;
    /* A GPU runs the specialised modules: nothing to share there. */
    const rssm_layer_desc one = desc_of(128, 128, 16, RSSM_DTYPE_F32, RSSM_DTYPE_F32, RSSM_GATE_PRECOMPUTED);
    seen s;
    const rssm_status st = capture(&one, 1, &s, &err);
    if (st == RSSM_ERR_UNAVAILABLE && !rh_backend_required(BACKEND)) {
        fprintf(stderr, "skipped: %s\n", err.message);
        return TS_SKIP_EXIT;
    }
    if (st != RSSM_OK) {
        fprintf(stderr, "%s: %s\n", BACKEND, err.message);
        return 1;
    }
    if (count_module(&s, "decode_replay_rt") == 0) {
        fprintf(stderr, "skipped: %s does not run the _rt modules (not a CPU device)\n", BACKEND);
        return TS_SKIP_EXIT;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes_share_pipelines),
        cmocka_unit_test(test_wide_head_has_its_own),
        cmocka_unit_test(test_same_model_made_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
