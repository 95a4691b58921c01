/* The CUDA plan's choice of kernel (cuda/rssm_cuda.h, rssm_cuda_plan_init)
 * among those the device's code allows (RSSM_CUDA_ALLOW_*,
 * cuda/targets.h): host code alone, so it runs without a GPU where
 * the CUDA backend is built. A device whose code lacks the sm_90 parts gets
 * the stream or pipeline kernel wherever the bulk kernel would have run,
 * and the plan keeps what it may use for its launches. */
#include "test_support.h"

#include "backend.h"
#include "rssm_cuda.h"

static rssm_kernel_params params(int replay, uint32_t batch)
{
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 1, 16);
    /* a head shape the bulk kernel takes */
    m.num_qk_heads = 16;
    m.num_v_heads = 32;
    m.head_k = 128;
    m.head_v = 128;
    m.replay = replay;
    m.ring_len = replay ? 16u : 0u;
    rssm_slot_layout lay;
    rssm_slot_layout_init(&lay, &m);
    rssm_kernel_params p;
    rssm_kernel_params_init(&p, &m, &lay, batch);
    return p;
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_allow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
