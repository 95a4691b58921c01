/* The CUDA plan's choice of kernel (cuda/rssm_cuda.h, rssm_cuda_plan_init)
 * among those the device's code allows (RSSM_CUDA_ALLOW_*,
 * cuda/targets.h): host code alone, so it runs without a GPU where
 * the CUDA backend is built. A device whose code lacks the sm_90 parts gets
 * the stream or pipeline kernel wherever the bulk kernel would have run,
 * and the plan keeps what it may use for its launches. */
#include "test_support.h"

#include "backend.h"
#include "rssm_cuda.h"

#include <stdlib.h>

static rssm_kernel_params params_of(rssm_gate_kind gate, rssm_dtype state, rssm_dtype ring, uint32_t head_v,
                                     int replay, uint32_t batch)
{
    rssm_model m = ts_small_model(gate, 1, 16);
    /* a head shape the bulk kernel takes */
    m.num_qk_heads = 16;
    m.num_v_heads = 32;
    m.head_k = 128;
    m.head_v = head_v;
    m.state_dtype = state;
    m.ring_dtype = ring;
    m.replay = replay;
    m.ring_len = replay ? 16u : 0u;
    rssm_slot_layout lay;
    rssm_slot_layout_init(&lay, &m);
    rssm_kernel_params p;
    rssm_kernel_params_init(&p, &m, &lay, batch);
    return p;
}

static rssm_kernel_params params(int replay, uint32_t batch)
{
    return params_of(RSSM_GATE_GDN, RSSM_DTYPE_F32, RSSM_DTYPE_F16, 128, replay, batch);
}

static rssm_cuda_plan plan(const rssm_kernel_params *p, uint32_t allow)
{
    rssm_cuda_plan pl;
    rssm_cuda_plan_init(&pl, p, 132, 228u * 1024u, allow, 0, 0);
    assert_int_equal(pl.allow, allow);
    return pl;
}

static void test_plan_allow(void **state)
{
    (void)state;
    const uint32_t all = RSSM_CUDA_ALLOW_BULK | RSSM_CUDA_ALLOW_PDL;
    for (int replay = 0; replay <= 1; replay++) {
        const rssm_kernel_params big = params(replay, 256);
        assert_true(rssm_cuda_bulk_supported(&big));
        /* Every SM has a unit: the bulk kernel where the code has it. */
        assert_int_equal(plan(&big, all).kernel, RSSM_CUDA_KERNEL_BULK);
        assert_int_equal(plan(&big, RSSM_CUDA_ALLOW_BULK).kernel, RSSM_CUDA_KERNEL_BULK);
        /* Otherwise the replay step streams and the packed one pipelines,
         * as for shapes the bulk kernel does not take. */
        const uint32_t other = replay ? RSSM_CUDA_KERNEL_STREAM : RSSM_CUDA_KERNEL_PIPELINE;
        assert_int_equal(plan(&big, 0).kernel, other);
        assert_int_equal(plan(&big, RSSM_CUDA_ALLOW_PDL).kernel, other);
        /* A small batch never took the bulk kernel. */
        const rssm_kernel_params one = params(replay, 1);
        assert_int_equal(plan(&one, all).kernel, RSSM_CUDA_KERNEL_STREAM);
        assert_int_equal(plan(&one, 0).kernel, RSSM_CUDA_KERNEL_STREAM);
    }
}

static uint32_t replay_mode(rssm_gate_kind gate, rssm_dtype state, rssm_dtype ring)
{
    const rssm_kernel_params p = params_of(gate, state, ring, 128, 1, 256);
    return rssm_cuda_bulk_mode(&p);
}

/* The tensor-core rule (docs/design.md §8, "The tensor-core data path"):
 * the flush and the readout for a bf16 state with a 16-bit ring,
 * the FFMA kernels otherwise; RSSM_CUDA_TENSOR_CORES forces a mode where
 * the shape's ring fits its buffer. */
static void test_bulk_mode(void **state)
{
    (void)state;
    unsetenv("RSSM_CUDA_TENSOR_CORES");
    const rssm_dtype F32 = RSSM_DTYPE_F32, F16 = RSSM_DTYPE_F16, BF16 = RSSM_DTYPE_BF16;
    const rssm_kernel_params gdn = params_of(RSSM_GATE_GDN, BF16, BF16, 128, 1, 256);
    assert_int_equal(rssm_cuda_bulk_mode(&gdn), 2);
    assert_int_equal(replay_mode(RSSM_GATE_GDN, BF16, F16), 2);
    assert_int_equal(replay_mode(RSSM_GATE_KDA, BF16, BF16), 2);
    assert_int_equal(replay_mode(RSSM_GATE_KDA, BF16, F32), 0);
    assert_int_equal(replay_mode(RSSM_GATE_GDN, F32, BF16), 0);
    assert_int_equal(replay_mode(RSSM_GATE_GDN, BF16, F32), 0);
    const rssm_kernel_params packed = params_of(RSSM_GATE_GDN, BF16, BF16, 128, 0, 256);
    assert_int_equal(rssm_cuda_bulk_mode(&packed), 0);

    setenv("RSSM_CUDA_TENSOR_CORES", "flush", 1);
    assert_int_equal(rssm_cuda_bulk_mode(&gdn), 1);
    setenv("RSSM_CUDA_TENSOR_CORES", "0", 1);
    assert_int_equal(rssm_cuda_bulk_mode(&gdn), 0);
    setenv("RSSM_CUDA_TENSOR_CORES", "1", 1);
    assert_int_equal(rssm_cuda_bulk_mode(&packed), 2);
    /* the mode says what the dtypes let it put on the tensor cores: an
     * fp32 state's readout stays FFMA, an fp32 ring takes none */
    assert_int_equal(replay_mode(RSSM_GATE_GDN, F32, BF16), 1);
    assert_int_equal(replay_mode(RSSM_GATE_GDN, BF16, F32), 0);
    /* V = 256: a 16-entry bf16 ring's d is 8 KiB, which only the FFMA
     * kernels' buffer holds */
    const rssm_kernel_params wide = params_of(RSSM_GATE_GDN, BF16, BF16, 256, 1, 256);
    assert_true(rssm_cuda_bulk_supported(&wide));
    assert_int_equal(rssm_cuda_bulk_mode(&wide), 0);
    unsetenv("RSSM_CUDA_TENSOR_CORES");
    assert_int_equal(rssm_cuda_bulk_mode(&wide), 0);
}

/* Stages: 4, but all 8 for a bf16 packed step on at most 80 SMs;
 * RSSM_CUDA_BULK_STAGES asks for others, up to what the kernel holds. */
static void test_bulk_stages(void **state)
{
    (void)state;
    unsetenv("RSSM_CUDA_BULK_STAGES");
    const rssm_dtype F32 = RSSM_DTYPE_F32, BF16 = RSSM_DTYPE_BF16;
    const rssm_kernel_params bf16 = params_of(RSSM_GATE_GDN, BF16, BF16, 128, 0, 256);
    const rssm_kernel_params fp32 = params_of(RSSM_GATE_GDN, F32, BF16, 128, 0, 256);
    const rssm_kernel_params ring = params_of(RSSM_GATE_GDN, BF16, BF16, 128, 1, 256);
    assert_int_equal(rssm_cuda_bulk_stages(&bf16, 0, 132), 4);
    assert_int_equal(rssm_cuda_bulk_stages(&bf16, 0, 78), 8);
    assert_int_equal(rssm_cuda_bulk_stages(&fp32, 0, 78), 4);
    assert_int_equal(rssm_cuda_bulk_stages(&ring, 2, 78), 4);
    setenv("RSSM_CUDA_BULK_STAGES", "64", 1);
    assert_int_equal(rssm_cuda_bulk_stages(&bf16, 0, 132), 8);
    assert_int_equal(rssm_cuda_bulk_stages(&ring, 2, 132), 5);
    setenv("RSSM_CUDA_BULK_STAGES", "2", 1);
    assert_int_equal(rssm_cuda_bulk_stages(&bf16, 0, 78), 2);
    /* what is not a count leaves the rule, as for every RSSM_CUDA_* number */
    setenv("RSSM_CUDA_BULK_STAGES", "2x", 1);
    assert_int_equal(rssm_cuda_bulk_stages(&bf16, 0, 78), 8);
    setenv("RSSM_CUDA_BULK_STAGES", "-3", 1);
    assert_int_equal(rssm_cuda_bulk_stages(&bf16, 0, 132), 4);
    setenv("RSSM_CUDA_BULK_STAGES", "0", 1);
    assert_int_equal(rssm_cuda_bulk_stages(&bf16, 0, 78), 8);
    unsetenv("RSSM_CUDA_BULK_STAGES");
}

/* The one-launch verify window (docs/design.md §9): windows of up to 4
 * tokens and 8 rows x tokens once prepared (none before);
 * RSSM_CUDA_WINDOW_FUSED sets the budget, not the 4 tokens. */
static void test_window_fused(void **state)
{
    (void)state;
    unsetenv("RSSM_CUDA_WINDOW_FUSED");
    const rssm_kernel_params one = params(1, 1);
    rssm_cuda_plan pl = plan(&one, RSSM_CUDA_ALLOW_PDL);
    assert_false(rssm_cuda_window_fused(&pl, 1, 2));
    pl.window_fused_tokens = rssm_cuda_window_fused_budget();
    assert_int_equal(pl.window_fused_tokens, 8);
    assert_true(rssm_cuda_window_fused(&pl, 1, 2));
    assert_true(rssm_cuda_window_fused(&pl, 1, 4));
    assert_true(rssm_cuda_window_fused(&pl, 2, 4));
    assert_true(rssm_cuda_window_fused(&pl, 4, 2));
    assert_false(rssm_cuda_window_fused(&pl, 1, 8));
    assert_false(rssm_cuda_window_fused(&pl, 4, 4));
    assert_false(rssm_cuda_window_fused(&pl, 3, 3));
    setenv("RSSM_CUDA_WINDOW_FUSED", "16", 1);
    pl.window_fused_tokens = rssm_cuda_window_fused_budget();
    assert_true(rssm_cuda_window_fused(&pl, 4, 4));
    assert_false(rssm_cuda_window_fused(&pl, 2, 8));
    setenv("RSSM_CUDA_WINDOW_FUSED", "0", 1);
    pl.window_fused_tokens = rssm_cuda_window_fused_budget();
    assert_false(rssm_cuda_window_fused(&pl, 1, 2));
    setenv("RSSM_CUDA_WINDOW_FUSED", "many", 1);
    assert_int_equal(rssm_cuda_window_fused_budget(), 8);
    setenv("RSSM_CUDA_WINDOW_FUSED", "4 ", 1);
    assert_int_equal(rssm_cuda_window_fused_budget(), 8);
    setenv("RSSM_CUDA_WINDOW_FUSED", "99999999999999999999", 1);
    assert_int_equal(rssm_cuda_window_fused_budget(), 0xffff);
    unsetenv("RSSM_CUDA_WINDOW_FUSED");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_allow),
        cmocka_unit_test(test_bulk_mode),
        cmocka_unit_test(test_bulk_stages),
        cmocka_unit_test(test_window_fused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
