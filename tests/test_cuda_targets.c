/* CUDA targets (cuda/targets.h): which of a build's targets a device
 * of each compute capability loads, what the device choice says a device
 * must be, and which kernels a device may launch given what CUDA says of
 * the code it loaded; CUDA's answers are made up here, so every rule and
 * message runs without a GPU. bench/run.sh's stage portable checks the
 * cuda backend's own answers on a GPU given a build of compute_80 PTX. */
#include "test_support.h"

#include "targets.h"

#include <string.h>

/* The default build, the wheel's and a portable one (cuda/CMakeLists.txt,
 * pyproject.toml). */
#define HOPPER "sm_90a compute_90"
#define WHEEL "sm_80;sm_89;sm_90a;sm_100;compute_80"
#define PORTABLE "compute_80"

static void expect_target(const char *list, int major, int minor, const char *name)
{
    const char *targets = list ? list : "(null)";
    rssm_cuda_target t;
    memset(&t, 0, sizeof t);
    const bool found = rssm_cuda_target_for(list, major, minor, &t);
    if (!name) {
        if (found)
            fail_msg("'%s' on %d.%d: expected none, got %s", targets, major, minor, t.name);
        return;
    }
    if (!found)
        fail_msg("'%s' on %d.%d: expected %s, got none", targets, major, minor, name);
    if (strcmp(t.name, name) != 0)
        fail_msg("'%s' on %d.%d: expected %s, got %s", targets, major, minor, name, t.name);
}

static void expect_text(const char *text, const char *const *parts)
{
    for (; *parts; parts++)
        if (!strstr(text, *parts))
            fail_msg("'%s' lacks '%s'", text, *parts);
}

/* ------------------------------------------------ which target loads */

static void test_target_for(void **state)
{
    (void)state;
    /* sm_90a runs on 9.0 alone; compute_90 PTX on 9.0 and everything later. */
    expect_target(HOPPER, 9, 0, "sm_90a");
    expect_target(HOPPER, 10, 0, "compute_90");
    expect_target(HOPPER, 12, 0, "compute_90");
    expect_target(HOPPER, 8, 0, NULL);
    expect_target(HOPPER, 8, 9, NULL);
    /* Machine code within its major, from its minor on, before PTX. */
    expect_target(WHEEL, 8, 0, "sm_80");
    expect_target(WHEEL, 8, 6, "sm_80");
    expect_target(WHEEL, 8, 9, "sm_89");
    expect_target(WHEEL, 9, 0, "sm_90a");
    expect_target(WHEEL, 10, 0, "sm_100");
    expect_target(WHEEL, 10, 3, "sm_100");
    expect_target(WHEEL, 11, 0, "compute_80");
    expect_target(WHEEL, 12, 0, "compute_80");
    expect_target(WHEEL, 7, 5, NULL);
    /* PTX alone: what a Hopper GPU compiles when given nothing else. */
    expect_target(PORTABLE, 9, 0, "compute_80");
    expect_target(PORTABLE, 8, 6, "compute_80");
    expect_target(PORTABLE, 7, 5, NULL);
    /* The newest of each kind that runs. */
    expect_target("compute_80 compute_90", 9, 0, "compute_90");
    expect_target("compute_80 compute_90", 8, 9, "compute_80");
    expect_target("sm_80 sm_86", 8, 9, "sm_86");
    /* Architecture-specific and family code. */
    expect_target("compute_90a", 9, 0, "compute_90a");
    expect_target("compute_90a", 10, 0, NULL);
    expect_target("sm_100f", 10, 3, "sm_100f");
    expect_target("compute_100f", 10, 3, "compute_100f");
    expect_target("compute_100f", 12, 0, NULL);
    /* Names that are neither are passed over. */
    expect_target("sm_ compute_ sm_9x sm_90b 90 sm90 compute_x", 9, 0, NULL);
    expect_target("", 9, 0, NULL);
    expect_target(NULL, 9, 0, NULL);
    expect_target(" ;sm_90a;; ", 9, 0, "sm_90a");
}

static void test_need(void **state)
{
    (void)state;
    char buf[256];
    rssm_cuda_targets_need(HOPPER, buf, sizeof buf);
    assert_string_equal(buf, "of a compute capability this build has code for (sm_90a: 9.0 only; compute_90 PTX: "
                             "9.0 and newer)");
    rssm_cuda_targets_need(WHEEL, buf, sizeof buf);
    expect_text(buf, (const char *const[]){"sm_80: 8.0 and newer 8.x", "sm_89: 8.9 and newer 8.x", "sm_90a: 9.0 only",
                                           "sm_100: 10.0 and newer 10.x", "compute_80 PTX: 8.0 and newer)", NULL});
    rssm_cuda_targets_need("", buf, sizeof buf);
    assert_string_equal(buf, "of a compute capability this build has code for (none)");
    /* Cut short, never past the buffer. */
    char small[24];
    memset(small, 'x', sizeof small);
    rssm_cuda_targets_need(WHEEL, small, sizeof small);
    assert_int_equal(strlen(small), sizeof small - 1);
}

/* ------------------------------------------------ which kernels run */

/* One device and what CUDA says it loaded: every part at `ptx`, `binary`,
 * but part `odd` (RSSM_CUDA_PARTS: none) at odd_ptx. */
struct decide_case {
    const char *what, *targets;
    int major, minor, ptx, binary, odd, odd_ptx;
    bool runs, bulk, pdl;
    const char *code; /* NULL: not checked */
    const char *why[4]; /* in why_not, up to a NULL */
};

static const struct decide_case kDecide[] = {
    {"the default build on an H200: everything, as before", HOPPER, 9, 0, 90, 90, RSSM_CUDA_PARTS, 0, true, true,
     true, "sm_90a machine code", {NULL}},
    /* the device is Hopper, its code is not */
    {"compute_80 PTX compiled on an H200: the portable kernels, no programmatic launch", PORTABLE, 9, 0, 80, 90,
     RSSM_CUDA_PARTS, 0, true, false, false, "compute_80 PTX (JIT)",
     {"the bulk kernel needs sm_90 code", "(compute capability 9.0) runs this build's compute_80 PTX (JIT)",
      "the build's targets: compute_80"}},
    {"the wheel on an A100", WHEEL, 8, 0, 80, 80, RSSM_CUDA_PARTS, 0, true, false, false, "sm_80 machine code",
     {"compute capability 8.0", "sm_80, sm_89, sm_90a, sm_100, compute_80", NULL}},
    {"the wheel on an L40", WHEEL, 8, 9, 89, 89, RSSM_CUDA_PARTS, 0, true, false, false, "sm_89 machine code",
     {NULL}},
    {"the wheel on a B200", WHEEL, 10, 0, 100, 100, RSSM_CUDA_PARTS, 0, true, true, true, "sm_100 machine code",
     {NULL}},
    {"the wheel on a GPU newer than its machine code: the PTX", WHEEL, 12, 0, 80, 120, RSSM_CUDA_PARTS, 0, true,
     false, false, "compute_80 PTX (JIT)", {NULL}},
    {"the default build's PTX on a later GPU has the sm_90 parts", HOPPER, 10, 0, 90, 100, RSSM_CUDA_PARTS, 0, true,
     true, true, "compute_90 PTX (JIT)", {NULL}},
    {"no code for the device: nothing runs", HOPPER, 8, 0, 0, 0, RSSM_CUDA_PARTS, 0, false, false, false, NULL,
     {"compute capability 8.0", "sm_90a, compute_90", NULL}},
    {"each part answers for itself: the window readout", HOPPER, 9, 0, 90, 90, RSSM_CUDA_PART_WINDOW_BULK, 80, true,
     false, true, NULL, {NULL}},
    {"each part answers for itself: the bulk kernel", HOPPER, 9, 0, 90, 90, RSSM_CUDA_PART_BULK, 0, true, false, true,
     NULL, {NULL}},
    {"each part answers for itself: the window's launch", HOPPER, 9, 0, 90, 90, RSSM_CUDA_PART_WINDOW, 80, true, true,
     false, NULL, {NULL}},
    {"CUDA's answer over the targets' prediction of sm_90a", HOPPER, 9, 0, 80, 90, RSSM_CUDA_PARTS, 0, true, false,
     false, "compute_80 code (sm_90 machine code)", {NULL}},
};

/* An H200's opt-in shared memory per block, and about what the bulk
 * kernels ask for. */
static const size_t kHopperSmem = 227 * 1024, kBulkSmem = 217 * 1024;

static void test_decide(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof kDecide / sizeof kDecide[0]; i++) {
        const struct decide_case *d = &kDecide[i];
        rssm_cuda_code c[RSSM_CUDA_PARTS];
        for (int j = 0; j < RSSM_CUDA_PARTS; j++) {
            c[j].ptx_version = j == d->odd ? d->odd_ptx : d->ptx;
            c[j].binary_version = d->binary;
        }
        rssm_cuda_kernels k;
        rssm_cuda_kernels_decide(d->targets, d->major, d->minor, kHopperSmem, kBulkSmem, c, &k);
        if (k.runs != d->runs || k.bulk != d->bulk || k.pdl != d->pdl)
            fail_msg("%s: runs %d bulk %d pdl %d, expected %d %d %d", d->what, k.runs, k.bulk, k.pdl, d->runs, d->bulk,
                     d->pdl);
        if (d->code && strcmp(k.code, d->code) != 0)
            fail_msg("%s: code '%s', expected '%s'", d->what, k.code, d->code);
        /* a reason exactly where something is refused */
        if ((k.why_not[0] != '\0') != (!d->runs || !d->bulk))
            fail_msg("%s: why_not '%s'", d->what, k.why_not);
        expect_text(k.why_not, d->why);
    }
}

/* The code is not all: a consumer Blackwell GPU (sm_120, 99 KiB per block)
 * given the default build's compute_90 PTX has the sm_90 parts but not the
 * bulk kernels' shared memory; it runs the others. */
static void test_decide_shared_memory(void **state)
{
    (void)state;
    rssm_cuda_code c[RSSM_CUDA_PARTS];
    for (int j = 0; j < RSSM_CUDA_PARTS; j++)
        c[j] = (rssm_cuda_code){.ptx_version = 90, .binary_version = 120};
    rssm_cuda_kernels k;
    rssm_cuda_kernels_decide(HOPPER, 12, 0, 99 * 1024, kBulkSmem, c, &k);
    assert_true(k.runs);
    assert_false(k.bulk);
    assert_true(k.pdl);
    assert_string_equal(k.code, "compute_90 PTX (JIT)");
    const char *why[] = {"needs 217 KiB of shared memory per block", "(compute capability 12.0) gives at most 99 KiB",
                         NULL};
    expect_text(k.why_not, why);
    /* exactly enough is enough */
    rssm_cuda_kernels_decide(HOPPER, 12, 0, kBulkSmem, kBulkSmem, c, &k);
    assert_true(k.bulk);
    assert_string_equal(k.why_not, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_target_for),
        cmocka_unit_test(test_need),
        cmocka_unit_test(test_decide),
        cmocka_unit_test(test_decide_shared_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
