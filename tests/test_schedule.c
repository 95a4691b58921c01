/* The flush scheduler (docs/design.md §2): plan / commit, write_pos, forced
 * flushes, errors that commit nothing, and the STAGGERED policy. */
#include "test_support.h"

#include <stdlib.h>
#include <string.h>

enum { SEED = 0x5c4ed };

static uint32_t write_pos_of(rssm_pool *p, uint32_t slot)
{
    rssm_error err;
    uint32_t wp = UINT32_MAX;
    TS_OK(rssm_pool_write_pos(p, slot, &wp, &err), &err);
    return wp;
}

/* Plans and commits one step, checking on the way that planning changed
 * nothing, that each row's plan is self-consistent, and that commit moved
 * write_pos exactly as the plan says. */
static void plan_commit(rssm_pool *p, uint32_t rows, const uint32_t *slots, const uint64_t *seq,
                        uint32_t interval, rssm_row_plan *plan)
{
    rssm_error err;
    const uint32_t L = rssm_pool_model(p)->replay ? rssm_pool_model(p)->ring_len : 1;
    uint32_t before[64];
    assert_true(rows <= 64);
    for (uint32_t r = 0; r < rows; r++)
        before[r] = write_pos_of(p, slots[r]);
    memset(plan, 0xab, rows * sizeof *plan);
    TS_OK(rssm_pool_plan(p, rows, slots, seq, interval, plan, &err), &err);
    for (uint32_t r = 0; r < rows; r++) {
        assert_int_equal(write_pos_of(p, slots[r]), before[r]); /* plan is read-only */
        assert_int_equal(plan[r].slot, slots[r]);
        assert_int_equal(plan[r].write_pos, before[r]);
        assert_true(plan[r].write_pos < L);
        assert_true(plan[r].force <= 1 && plan[r].is_flush <= 1);
        /* The device decides the flush from write_pos and force alone. */
        assert_int_equal(plan[r].is_flush, plan[r].write_pos == L - 1 || plan[r].force);
        /* A snapshot step always forces. */
        if (interval > 0 && seq[r] % interval == 0)
            assert_int_equal(plan[r].force, 1);
    }
    TS_OK(rssm_pool_commit(p, rows, plan, &err), &err);
    for (uint32_t r = 0; r < rows; r++)
        assert_int_equal(write_pos_of(p, slots[r]), plan[r].is_flush ? 0 : before[r] + 1);
}

static void open_pool(ts_env *e, rssm_model m, uint32_t slots, rssm_flush_policy policy)
{
    ts_env_open(e, ts_backend(), &m, slots, policy, 0);
    rssm_error err;
    for (uint32_t i = 0; i < slots; i++) {
        uint32_t s;
        TS_OK(rssm_pool_alloc(e->pool, &s, &err), &err);
        assert_int_equal(s, i);
    }
}

/* Without snapshots a slot walks 0, 1, ..., L-1 and flushes at L-1; L = 1
 * flushes every step; write_pos advances once per step whatever the number
 * of layers. */
static void test_ring_cycle(void **state)
{
    (void)state;
    const uint32_t Ls[] = { 1, 2, 8, 16, 64 };
    for (size_t i = 0; i < sizeof Ls / sizeof Ls[0]; i++) {
        const uint32_t L = Ls[i];
        ts_env e;
        open_pool(&e, ts_small_model(RSSM_GATE_GDN, 4, L), 2, RSSM_FLUSH_ALIGNED);
        uint32_t slot = 1;
        uint64_t seq = 500; /* a multiple of many things: must not matter with interval 0 */
        rssm_row_plan plan;
        for (uint32_t t = 0; t < 4 * L + 3; t++) {
            plan_commit(e.pool, 1, &slot, &seq, 0, &plan);
            assert_int_equal(plan.write_pos, t % L);
            assert_int_equal(plan.force, 0);
            assert_int_equal(plan.is_flush, t % L == L - 1);
            seq += 100;
        }
        assert_int_equal(write_pos_of(e.pool, 0), 0); /* the other slot never moved */
        ts_env_close(&e);
    }
}

/* force = interval > 0 && seq_len_after % interval == 0, against a model of
 * the rule, over several snapshot intervals. */
static void test_forced_flushes(void **state)
{
    (void)state;
    const uint32_t L = 8;
    const uint32_t intervals[] = { 0, 1, 3, 5, 8, 13 };
    for (size_t i = 0; i < sizeof intervals / sizeof intervals[0]; i++) {
        const uint32_t interval = intervals[i];
        ts_env e;
        open_pool(&e, ts_small_model(RSSM_GATE_KDA, 2, L), 1, RSSM_FLUSH_ALIGNED);
        uint32_t slot = 0, wp = 0;
        uint64_t seq = 17; /* 16 prefill tokens, then decode */
        uint32_t forced_mid_ring = 0;
        rssm_row_plan plan;
        for (int t = 0; t < 60; t++, seq++) {
            plan_commit(e.pool, 1, &slot, &seq, interval, &plan);
            const uint32_t force = interval > 0 && seq % interval == 0;
            assert_int_equal(plan.write_pos, wp);
            assert_int_equal(plan.force, force);
            assert_int_equal(plan.is_flush, wp == L - 1 || force);
            forced_mid_ring += force && wp < L - 1;
            wp = plan.is_flush ? 0 : wp + 1;
        }
        if (interval > 0 && interval != L)
            assert_true(forced_mid_ring > 0); /* the case is really covered */
        if (interval == 1)
            assert_int_equal(wp, 0);
        ts_env_close(&e);
    }
}

/* Replay off: the packed decode writes the state every step. */
static void test_replay_off_always_flushes(void **state)
{
    (void)state;
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, 8);
    m.replay = 0;
    ts_env e;
    open_pool(&e, m, 1, RSSM_FLUSH_STAGGERED);
    uint32_t slot = 0;
    uint64_t seq = 3;
    rssm_row_plan plan;
    for (int t = 0; t < 20; t++, seq++) {
        plan_commit(e.pool, 1, &slot, &seq, 0, &plan);
        assert_int_equal(plan.write_pos, 0);
        assert_int_equal(plan.is_flush, 1);
    }
    ts_env_close(&e);
}

/* Rows at different ring positions, in any order: each slot advances on its
 * own, once per step, and slots not in the batch do not move. */
static void test_rows_independent(void **state)
{
    (void)state;
    const uint32_t L = 4;
    ts_env e;
    open_pool(&e, ts_small_model(RSSM_GATE_GDN, 3, L), 5, RSSM_FLUSH_ALIGNED);
    rssm_row_plan plan[5];
    uint32_t one = 2;
    uint64_t seq1 = 9;
    plan_commit(e.pool, 1, &one, &seq1, 0, plan); /* slot 2 at 1 */
    one = 4;
    for (int i = 0; i < 2; i++) {
        plan_commit(e.pool, 1, &one, &seq1, 0, plan); /* slot 4 at 2 */
        seq1++;
    }
    const uint32_t slots[3] = { 4, 0, 2 };
    uint64_t seqs[3] = { 30, 31, 32 };
    uint32_t expect[5] = { 0, 0, 1, 0, 2 };
    for (int t = 0; t < 9; t++) {
        plan_commit(e.pool, 3, slots, seqs, 0, plan);
        for (int r = 0; r < 3; r++) {
            assert_int_equal(plan[r].write_pos, expect[slots[r]]);
            expect[slots[r]] = expect[slots[r]] == L - 1 ? 0 : expect[slots[r]] + 1;
            seqs[r]++;
        }
        for (uint32_t s = 0; s < 5; s++)
            assert_int_equal(write_pos_of(e.pool, s), expect[s]);
    }
    ts_env_close(&e);
}

static void expect_write_pos(rssm_pool *p, const uint32_t *want, uint32_t n)
{
    for (uint32_t s = 0; s < n; s++)
        if (want[s] != UINT32_MAX && write_pos_of(p, s) != want[s])
            fail_msg("slot %u: write_pos %u, expected %u (something was committed)", s, write_pos_of(p, s),
                     want[s]);
}

/* A pool of 6 slots, 0..4 allocated (5 freed), slot 1 at write_pos L-1 =
 * 3 so that its next step flushes; `plan` holds a good plan for slots
 * 0..3 at seq_len_after 10..13. */
static const uint32_t start_pos[6] = { 0, 3, 0, 0, 0, UINT32_MAX };
static const uint32_t good_slots[4] = { 0, 1, 2, 3 };

static void open_errors_pool(ts_env *e, rssm_row_plan *plan)
{
    rssm_error err;
    open_pool(e, ts_small_model(RSSM_GATE_KDA, 2, 4), 6, RSSM_FLUSH_ALIGNED);
    TS_OK(rssm_pool_free(e->pool, 5, &err), &err);
    uint32_t one = 1;
    uint64_t s1 = 5;
    for (int i = 0; i < 3; i++, s1++)
        plan_commit(e->pool, 1, &one, &s1, 0, plan);
    expect_write_pos(e->pool, start_pos, 6);
    const uint64_t seq[4] = { 10, 11, 12, 13 };
    TS_OK(rssm_pool_plan(e->pool, 4, good_slots, seq, 0, plan, &err), &err);
    assert_int_equal(plan[1].is_flush, 1);
    assert_int_equal(plan[0].is_flush, 0);
}

/* Bad plans fail with the documented status and change nothing. */
static void test_plan_errors(void **state)
{
    (void)state;
    rssm_error err;
    ts_env e;
    rssm_row_plan plan[4];
    open_errors_pool(&e, plan);
    const uint64_t seq[4] = { 10, 11, 12, 13 };
    const uint32_t dup[4] = { 0, 1, 2, 1 };
    const uint32_t freed[4] = { 0, 1, 5, 2 };
    const uint32_t outside[4] = { 0, 1, 6, 2 };
    const uint32_t huge[4] = { UINT32_MAX, 1, 2, 3 };
    const uint32_t *good = good_slots;
    TS_EXPECT(rssm_pool_plan(e.pool, 4, dup, seq, 0, plan, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_plan(e.pool, 4, freed, seq, 0, plan, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_pool_plan(e.pool, 4, outside, seq, 0, plan, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_pool_plan(e.pool, 4, huge, seq, 0, plan, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_pool_plan(NULL, 4, good, seq, 0, plan, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_plan(e.pool, 4, NULL, seq, 0, plan, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_plan(e.pool, 4, good, NULL, 0, plan, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_plan(e.pool, 4, good, seq, 0, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_plan(e.pool, 0, good, seq, 0, plan, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    /* seq_len_after counts the token being decoded: never 0. */
    const uint64_t zero_seq[4] = { 10, 0, 12, 13 };
    TS_EXPECT(rssm_pool_plan(e.pool, 4, good, zero_seq, 0, plan, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_write_pos(e.pool, start_pos, 6);
    ts_env_close(&e);
}

static void test_commit_null_and_zero_rows(void **state)
{
    (void)state;
    rssm_error err;
    ts_env e;
    rssm_row_plan plan[4];
    open_errors_pool(&e, plan);
    TS_EXPECT(rssm_pool_commit(NULL, 4, plan, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_commit(e.pool, 4, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_write_pos(e.pool, start_pos, 6);
    /* Zero rows is a zero size, as rssm_pool_plan treats it. */
    TS_EXPECT(rssm_pool_commit(e.pool, 0, plan, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    ts_env_close(&e);
}

/* A bad slot in the last row: the rows before it are not committed. */
static void test_commit_bad_slot(void **state)
{
    (void)state;
    rssm_error err;
    ts_env e;
    rssm_row_plan plan[4], bad[4];
    open_errors_pool(&e, plan);
    memcpy(bad, plan, sizeof bad);
    bad[3].slot = 5;
    TS_EXPECT(rssm_pool_commit(e.pool, 4, bad, &err), RSSM_ERR_BAD_SLOT, &err);
    memcpy(bad, plan, sizeof bad);
    bad[3].slot = 77;
    TS_EXPECT(rssm_pool_commit(e.pool, 4, bad, &err), RSSM_ERR_BAD_SLOT, &err);
    expect_write_pos(e.pool, start_pos, 6);
    ts_env_close(&e);
}

/* The same slot twice in one plan would advance it twice. */
static void test_commit_duplicate_slot(void **state)
{
    (void)state;
    rssm_error err;
    ts_env e;
    rssm_row_plan plan[4], bad[4];
    open_errors_pool(&e, plan);
    memcpy(bad, plan, sizeof bad);
    bad[3] = bad[2];
    TS_EXPECT(rssm_pool_commit(e.pool, 4, bad, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_write_pos(e.pool, start_pos, 6);
    ts_env_close(&e);
}

/* The device decides is_flush = write_pos == L-1 || force; a plan whose
 * is_flush says otherwise would make the host's cursor disagree with what
 * the kernel did (and at L-1 without a flush, reach L). */
static void test_commit_inconsistent_flush(void **state)
{
    (void)state;
    rssm_error err;
    ts_env e;
    rssm_row_plan plan[4], bad[4];
    open_errors_pool(&e, plan);
    memcpy(bad, plan, sizeof bad);
    bad[1].is_flush = 0;
    TS_EXPECT(rssm_pool_commit(e.pool, 4, bad, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_write_pos(e.pool, start_pos, 6);
    memcpy(bad, plan, sizeof bad);
    bad[0].is_flush = 1;
    TS_EXPECT(rssm_pool_commit(e.pool, 4, bad, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_write_pos(e.pool, start_pos, 6);
    ts_env_close(&e);
}

/* A plan is valid once: committing it again is stale. */
static void test_commit_stale_plan(void **state)
{
    (void)state;
    rssm_error err;
    ts_env e;
    rssm_row_plan plan[4];
    open_errors_pool(&e, plan);
    TS_OK(rssm_pool_commit(e.pool, 4, plan, &err), &err);
    const uint32_t after[6] = { 1, 0, 1, 1, 0, UINT32_MAX };
    expect_write_pos(e.pool, after, 6);
    TS_EXPECT(rssm_pool_commit(e.pool, 4, plan, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_write_pos(e.pool, after, 6);
    ts_env_close(&e);
}

/* Step (1-based) at which each slot first flushes, and per-step flush counts,
 * for `rows` slots allocated together and stepped together. */
static void run_batch(ts_env *e, uint32_t rows, uint32_t steps, uint32_t *first_flush,
                      uint32_t *flushes_per_step, uint32_t *flushes_per_slot)
{
    uint32_t slots[64];
    uint64_t seq[64];
    rssm_row_plan plan[64];
    for (uint32_t r = 0; r < rows; r++) {
        slots[r] = r;
        seq[r] = 1000 + 37 * r;
        first_flush[r] = 0;
        flushes_per_slot[r] = 0;
    }
    for (uint32_t t = 1; t <= steps; t++) {
        plan_commit(e->pool, rows, slots, seq, 0, plan);
        flushes_per_step[t - 1] = 0;
        for (uint32_t r = 0; r < rows; r++) {
            if (plan[r].is_flush) {
                flushes_per_step[t - 1]++;
                flushes_per_slot[r]++;
                if (!first_flush[r])
                    first_flush[r] = t;
            }
            seq[r]++;
        }
    }
}

/*
 * What RSSM_FLUSH_STAGGERED guarantees (rssm.h): a newly allocated, copied
 * or imported slot's first ring cycle is L - (slot % L) steps long (one
 * early flush), later cycles L steps. So a batch of slots allocated
 * together has its flushes spread evenly: with rows a multiple of L, every
 * step carries exactly rows / L flushes, from the first cycle on, instead of
 * all rows every L-th step (ALIGNED). It costs at most one extra flush per
 * slot lifetime.
 */
static void test_staggered_policy(void **state)
{
    (void)state;
    const uint32_t Ls[] = { 1, 4, 8 };
    for (size_t i = 0; i < sizeof Ls / sizeof Ls[0]; i++) {
        const uint32_t L = Ls[i], rows = L == 1 ? 5 : 2 * L, steps = 4 * L + 3;
        uint32_t first[64], per_step[64], per_slot[64];

        ts_env e;
        open_pool(&e, ts_small_model(RSSM_GATE_GDN, 2, L), rows, RSSM_FLUSH_STAGGERED);
        run_batch(&e, rows, steps, first, per_step, per_slot);
        for (uint32_t s = 0; s < rows; s++) {
            if (first[s] != L - s % L)
                fail_msg("L=%u staggered: slot %u first flushes at step %u, expected %u", L, s, first[s],
                         L - s % L);
            /* Aligned would flush floor(steps / L) times. */
            assert_true(per_slot[s] <= steps / L + 1);
            assert_true(per_slot[s] >= steps / L);
        }
        for (uint32_t t = 0; t < steps; t++)
            if (per_step[t] != rows / L)
                fail_msg("L=%u staggered: step %u has %u flushes, expected %u", L, t + 1, per_step[t], rows / L);
        ts_env_close(&e);

        /* ALIGNED: the whole batch flushes on every L-th step. */
        open_pool(&e, ts_small_model(RSSM_GATE_GDN, 2, L), rows, RSSM_FLUSH_ALIGNED);
        run_batch(&e, rows, steps, first, per_step, per_slot);
        for (uint32_t t = 0; t < steps; t++)
            assert_int_equal(per_step[t], (t + 1) % L == 0 ? rows : 0);
        ts_env_close(&e);
    }
}

/* Steps (1-based) until `slot` first flushes when stepped alone. */
static uint32_t steps_to_flush(rssm_pool *p, uint32_t slot)
{
    uint64_t seq = 77;
    rssm_row_plan plan;
    for (uint32_t t = 1; t <= RSSM_MAX_RING_LEN + 1; t++, seq++) {
        plan_commit(p, 1, &slot, &seq, 0, &plan);
        if (plan.is_flush)
            return t;
    }
    fail_msg("slot %u never flushed", slot);
    return 0;
}

/* The staggered first cycle also applies to a slot that was re-allocated,
 * copied into, or imported into. */
static void test_staggered_copy_import_realloc(void **state)
{
    (void)state;
    rssm_error err;
    const uint32_t L = 8;
    ts_env e;
    open_pool(&e, ts_small_model(RSSM_GATE_KDA, 1, L), 12, RSSM_FLUSH_STAGGERED);
    /* Past the first cycle: ordinary L-step cycles. */
    assert_int_equal(steps_to_flush(e.pool, 3), L - 3);
    assert_int_equal(steps_to_flush(e.pool, 3), L);
    assert_int_equal(steps_to_flush(e.pool, 11), L - 3);
    assert_int_equal(steps_to_flush(e.pool, 11), L);

    /* Copy 3 -> 6: the destination starts a fresh, shortened cycle. */
    TS_OK(rssm_pool_copy(e.pool, 3, 6, &err), &err);
    assert_int_equal(steps_to_flush(e.pool, 6), L - 6);

    /* Free and re-allocate 5. */
    TS_OK(rssm_pool_free(e.pool, 5, &err), &err);
    uint32_t s;
    TS_OK(rssm_pool_alloc(e.pool, &s, &err), &err);
    assert_int_equal(s, 5);
    assert_int_equal(steps_to_flush(e.pool, 5), L - 5);

    /* Import bytes with an empty ring into 10 (10 % 8 = 2). */
    const size_t xs = rssm_pool_export_size(e.pool);
    uint8_t *bytes = malloc(xs);
    TS_OK(rssm_pool_export(e.pool, 3, bytes, xs, &err), &err);
    TS_OK(rssm_pool_import(e.pool, 10, bytes, xs, &err), &err);
    assert_int_equal(write_pos_of(e.pool, 10), 0);
    uint32_t got = steps_to_flush(e.pool, 10);
    if (got != L - 2)
        fail_msg("imported slot 10: first flush after %u steps, rssm.h promises L - (slot %% L) = %u", got, L - 2);
    free(bytes);
    ts_env_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_cycle),
        cmocka_unit_test(test_forced_flushes),
        cmocka_unit_test(test_replay_off_always_flushes),
        cmocka_unit_test(test_rows_independent),
        cmocka_unit_test(test_plan_errors),
        cmocka_unit_test(test_commit_null_and_zero_rows),
        cmocka_unit_test(test_commit_bad_slot),
        cmocka_unit_test(test_commit_duplicate_slot),
        cmocka_unit_test(test_commit_inconsistent_flush),
        cmocka_unit_test(test_commit_stale_plan),
        cmocka_unit_test(test_staggered_policy),
        cmocka_unit_test(test_staggered_copy_import_realloc),
    };
    (void)SEED;
    return TS_RUN_ON_BACKEND(tests);
}
