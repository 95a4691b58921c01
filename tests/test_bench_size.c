/* The state size of `rssm bench` on the cpu backend (tools/harness/
 * bench_size.h) on made-up machines: four times the reported cache where
 * that fits; in a quick run no more than its budget allows, which still
 * exceeds the cache of the machine that took 335 s before (a 480 MiB
 * cache, about 45 GB/s of copy bandwidth on two cores: docs/bench.md),
 * and says so where it cannot; the floor, and a quarter of the memory. */
#include "test_support.h"

#include "bench_size.h"

#define MIB ((size_t)1 << 20)

/* A quick run's timed steps: 2 gates x 2 batches, each program run 1 + 3
 * times, 16 packed steps and the in-place pass, a uniform cycle with its
 * three position programs and a staggered cycle of 16. */
static const double kQuickSteps = 2 * 2 * 4 * (16 + 1 + 16 * 4 + 16);

static void test_quick_steps(void **state)
{
    (void)state;
    const uint32_t L[] = {16};
    const int positions[] = {0, 1};
    assert_true(rh_bench_timed_steps(4, 3, L, 1, positions, 2) == kQuickSteps);
    /* a full run: 2 gates x 2 states x 3 batches, L 8 and 16 */
    const uint32_t full[] = {8, 16};
    assert_true(rh_bench_timed_steps(12, 3, full, 2, positions, 2) == 12 * 4 * (16 + 1 + 8 * 5 + 16 * 5));
    /* staggered alone has no position programs; L = 1 neither */
    const uint32_t one[] = {1};
    assert_true(rh_bench_timed_steps(1, 1, L, 1, positions + 1, 1) == 2 * (16 + 1 + 16));
    assert_true(rh_bench_timed_steps(1, 1, one, 1, positions, 1) == 2 * (1 + 1 + 1));
}

static void test_small_cache_is_four_times(void **state)
{
    (void)state;
    const rh_state_size s = rh_bench_state_size(32 * MIB, 24 * 1024 * MIB, 45e9, kQuickSteps, RH_BENCH_QUICK_BUDGET_S);
    assert_int_equal(s.mib, 128);
    assert_int_equal(s.wanted_mib, 128);
    assert_int_equal(s.llc_mib, 32);
    assert_int_equal(s.bound, RH_STATE_WANTED);
    assert_false(s.within_llc);
    assert_true(s.estimated_s > 0 && s.estimated_s < RH_BENCH_QUICK_BUDGET_S);
}

/* The machine of docs/bench.md: 1920 MiB wanted, which took 335 s; the
 * budget allows less, but more than the cache. */
static void test_large_cache_bounded_by_the_budget(void **state)
{
    (void)state;
    const rh_state_size s = rh_bench_state_size(480 * MIB, 24 * 1024 * MIB, 45e9, kQuickSteps, RH_BENCH_QUICK_BUDGET_S);
    assert_int_equal(s.wanted_mib, 1920);
    assert_int_equal(s.bound, RH_STATE_BUDGET);
    assert_true(s.mib < 1920 && s.mib > 480);
    assert_false(s.within_llc);
    /* the largest size within the budget */
    assert_true(s.estimated_s <= RH_BENCH_QUICK_BUDGET_S);
    assert_true(rh_bench_estimate_s(s.mib + 1, 45e9, kQuickSteps) > RH_BENCH_QUICK_BUDGET_S);
    assert_true(s.estimated_s == rh_bench_estimate_s(s.mib, 45e9, kQuickSteps));
}

/* A cache the budget cannot exceed: the size says so. */
static void test_cache_beyond_the_budget_is_flagged(void **state)
{
    (void)state;
    const rh_state_size s = rh_bench_state_size(4096 * MIB, 24 * 1024 * MIB, 45e9, kQuickSteps, RH_BENCH_QUICK_BUDGET_S);
    assert_int_equal(s.bound, RH_STATE_BUDGET);
    assert_true(s.mib < 4096);
    assert_true(s.within_llc);
    assert_true(s.estimated_s <= RH_BENCH_QUICK_BUDGET_S);
}

/* A slow machine keeps the floor, past its budget. */
static void test_floor(void **state)
{
    (void)state;
    const rh_state_size s = rh_bench_state_size(480 * MIB, 0, 1e9, kQuickSteps, RH_BENCH_QUICK_BUDGET_S);
    assert_int_equal(s.mib, RH_BENCH_MIN_STATE_MIB);
    assert_int_equal(s.bound, RH_STATE_BUDGET);
    assert_true(s.within_llc);
    assert_true(s.estimated_s > RH_BENCH_QUICK_BUDGET_S);
    const rh_state_size none = rh_bench_state_size(0, 0, 45e9, kQuickSteps, RH_BENCH_QUICK_BUDGET_S);
    assert_int_equal(none.mib, RH_BENCH_MIN_STATE_MIB);
    assert_int_equal(none.llc_mib, 0);
    assert_false(none.within_llc); /* no cache reported: nothing to exceed */
}

/* Without a budget (a full run) the size is the cache's, but for memory. */
static void test_no_budget_and_memory(void **state)
{
    (void)state;
    rh_state_size s = rh_bench_state_size(480 * MIB, 24 * 1024 * MIB, 45e9, kQuickSteps, 0.0);
    assert_int_equal(s.mib, 1920);
    assert_int_equal(s.bound, RH_STATE_WANTED);
    assert_true(s.estimated_s == 0.0);
    s = rh_bench_state_size(480 * MIB, 4096 * MIB, 0.0, 0.0, 0.0);
    assert_int_equal(s.mib, 1024);
    assert_int_equal(s.bound, RH_STATE_MEMORY);
    /* more cache than --state-mib takes: its limit */
    s = rh_bench_state_size(65536 * MIB, 0, 0.0, 0.0, 0.0);
    assert_int_equal(s.mib, 65536);
    assert_true(s.within_llc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quick_steps),
        cmocka_unit_test(test_small_cache_is_four_times),
        cmocka_unit_test(test_large_cache_bounded_by_the_budget),
        cmocka_unit_test(test_cache_beyond_the_budget_is_flagged),
        cmocka_unit_test(test_floor),
        cmocka_unit_test(test_no_budget_and_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
