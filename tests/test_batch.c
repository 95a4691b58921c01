/* rssm_batch: every entry point with bad input returns the documented
 * status and leaves the pool exactly as it was (cursors and states). */
#include "test_support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SEED = 0xba7c4, MAX_ROWS = 3 };

typedef struct fixture {
    ts_env e;
    ts_inputs in;      /* MAX_ROWS rows */
    float *out;        /* MAX_ROWS rows */
    ts_pool_snapshot snap;
    rh_rng rng;
} fixture;

/* A pool of 5 slots: 0..3 allocated with random states, slot 1 and 2 part
 * way round their rings, slot 4 free; a batch of MAX_ROWS rows. */
static void open_fixture(fixture *f, rssm_gate_kind kind, rssm_gate_mode mode)
{
    rh_rng_seed(&f->rng, SEED + kind * 7 + mode, 0);
    rssm_model m = ts_small_model(kind, 2, 4);
    m.gate_mode = mode;
    ts_env_open(&f->e, ts_backend(), &m, 5, RSSM_FLUSH_ALIGNED, MAX_ROWS);
    ts_env_alloc_random(&f->e, 4, &f->rng);
    ts_inputs_alloc(&f->in, &m, MAX_ROWS);
    f->out = malloc(ts_out_elems(&m, MAX_ROWS) * sizeof(float));
    rssm_error err;
    if (mode != RSSM_GATE_PRECOMPUTED) {
        float *A_log, *dt_bias;
        ts_random_gate_params(&m, &f->rng, &A_log, &dt_bias);
        for (uint32_t l = 0; l < m.layers; l++)
            TS_OK(rssm_batch_set_gate_params(f->e.batch, l, A_log + l * m.num_v_heads,
                                             dt_bias + l * m.num_v_heads * ts_gate_width(&m), &err),
                  &err);
        free(A_log);
        free(dt_bias);
    }
    const uint32_t slots[2] = { 1, 2 };
    uint64_t seq[2] = { 20, 30 };
    for (int i = 0; i < 2; i++) {
        ts_inputs_random(&f->in, &f->rng);
        ts_step(&f->e, i == 0 ? 2 : 1, slots, seq, 0, &f->in, f->out);
        seq[0]++;
        seq[1]++;
    }
    ts_inputs_random(&f->in, &f->rng);
    ts_snapshot_take(&f->snap, f->e.pool);
    assert_int_equal(f->snap.write_pos[1], 2);
    assert_int_equal(f->snap.write_pos[2], 1);
}

static void close_fixture(fixture *f)
{
    /* Whatever failed above, the pool is as it was. */
    ts_snapshot_expect_equal(&f->snap, f->e.pool);
    ts_snapshot_free(&f->snap);
    free(f->out);
    ts_inputs_free(&f->in);
    ts_env_close(&f->e);
}

static void test_create_bad_args(void **state)
{
    (void)state;
    rssm_error err;
    ts_env e;
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 1, 4);
    ts_env_open(&e, ts_backend(), &m, 2, RSSM_FLUSH_ALIGNED, 0);
    rssm_batch *b = NULL;
    TS_EXPECT(rssm_batch_create(NULL, 4, &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_create(e.pool, 0, &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_create(e.pool, 4, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_null(b);
    TS_OK(rssm_batch_create(e.pool, 4, &b, &err), &err);
    double secs = -1;
    /* Nothing has run yet. */
    TS_EXPECT(rssm_batch_last_run_seconds(b, &secs, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_last_run_seconds(b, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_last_run_seconds(NULL, &secs, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    float out[64];
    TS_EXPECT(rssm_batch_download(b, 1, out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    rssm_batch_destroy(&b);
    assert_null(b);
    rssm_batch_destroy(&b);
    rssm_batch_destroy(NULL);
    ts_env_close(&e);
}

/* rssm_batch_step with each argument broken in turn. */
static void step_bad_args(rssm_gate_kind kind, rssm_gate_mode mode)
{
    fixture f;
    open_fixture(&f, kind, mode);
    rssm_error err;
    rssm_batch *b = f.e.batch;
    const uint32_t slots[MAX_ROWS] = { 0, 1, 2 };
    const uint64_t seq[MAX_ROWS] = { 50, 60, 70 };
    const rssm_step_inputs *in = &f.in.in;

    TS_EXPECT(rssm_batch_step(NULL, 3, slots, seq, 0, in, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_step(b, 0, slots, seq, 0, in, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_step(b, MAX_ROWS + 1, slots, seq, 0, in, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_step(b, UINT32_MAX, slots, seq, 0, in, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_step(b, 3, NULL, seq, 0, in, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_step(b, 3, slots, NULL, 0, in, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_step(b, 3, slots, seq, 0, NULL, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_step(b, 3, slots, seq, 0, in, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    /* Each input array missing. */
    for (int which = 0; which < 5; which++) {
        rssm_step_inputs partial = *in;
        const void **field[5] = { &partial.q, &partial.k, &partial.v, (const void **)&partial.gate,
                                  (const void **)&partial.beta };
        *field[which] = NULL;
        TS_EXPECT(rssm_batch_step(b, 3, slots, seq, 0, &partial, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    }
    /* Slots: free, out of range, repeated. */
    const uint32_t freed[MAX_ROWS] = { 0, 4, 2 };
    const uint32_t outside[MAX_ROWS] = { 0, 1, 5 };
    const uint32_t huge[MAX_ROWS] = { UINT32_MAX, 1, 2 };
    const uint32_t dup[MAX_ROWS] = { 1, 2, 1 };
    TS_EXPECT(rssm_batch_step(b, 3, freed, seq, 0, in, f.out, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_batch_step(b, 3, outside, seq, 0, in, f.out, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_batch_step(b, 3, huge, seq, 0, in, f.out, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_batch_step(b, 3, dup, seq, 0, in, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    const uint64_t zero_seq[MAX_ROWS] = { 50, 0, 70 };
    TS_EXPECT(rssm_batch_step(b, 3, slots, zero_seq, 0, in, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);

    /* The three-part form. */
    TS_EXPECT(rssm_batch_upload(NULL, 3, in, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_upload(b, 0, in, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_upload(b, MAX_ROWS + 1, in, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_upload(b, 3, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_OK(rssm_batch_upload(b, 3, in, &err), &err);
    TS_EXPECT(rssm_batch_run(NULL, 3, slots, seq, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_run(b, 0, slots, seq, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_run(b, MAX_ROWS + 1, slots, seq, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_run(b, 3, NULL, seq, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_run(b, 3, slots, NULL, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_run(b, 3, freed, seq, 0, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_batch_run(b, 3, outside, seq, 0, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_batch_run(b, 3, dup, seq, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    /* More rows than were uploaded would run on stale inputs. */
    TS_OK(rssm_batch_upload(b, 2, in, &err), &err);
    TS_EXPECT(rssm_batch_run(b, 3, slots, seq, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_download(NULL, 1, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_download(b, 1, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_download(b, 0, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_download(b, MAX_ROWS + 1, f.out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    close_fixture(&f);
}

static void test_step_bad_args_gdn(void **state)
{
    (void)state;
    step_bad_args(RSSM_GATE_GDN, RSSM_GATE_PRECOMPUTED);
}

static void test_step_bad_args_kda_raw(void **state)
{
    (void)state;
    step_bad_args(RSSM_GATE_KDA, RSSM_GATE_RAW);
}

static void test_gate_params_bad_args(void **state)
{
    (void)state;
    fixture f;
    open_fixture(&f, RSSM_GATE_KDA, RSSM_GATE_RAW_SAFE);
    rssm_error err;
    const rssm_model *m = &f.e.model;
    float *A_log, *dt_bias;
    ts_random_gate_params(m, &f.rng, &A_log, &dt_bias);
    TS_EXPECT(rssm_batch_set_gate_params(NULL, 0, A_log, dt_bias, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_set_gate_params(f.e.batch, 0, NULL, dt_bias, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_set_gate_params(f.e.batch, 0, A_log, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_batch_set_gate_params(f.e.batch, m->layers, A_log, dt_bias, &err), RSSM_ERR_INVALID_ARGUMENT,
              &err);
    TS_EXPECT(rssm_batch_set_gate_params(f.e.batch, UINT32_MAX, A_log, dt_bias, &err),
              RSSM_ERR_INVALID_ARGUMENT, &err);
    free(A_log);
    free(dt_bias);
    close_fixture(&f);
}

/* RAW gates with no weights for some layer: refused, nothing runs. */
static void test_raw_gates_need_params(void **state)
{
    (void)state;
    rssm_error err;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 99, 0);
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, 4);
    m.gate_mode = RSSM_GATE_RAW;
    ts_env e;
    ts_env_open(&e, ts_backend(), &m, 2, RSSM_FLUSH_ALIGNED, 1);
    ts_env_alloc_random(&e, 2, &rng);
    float *A_log, *dt_bias;
    ts_random_gate_params(&m, &rng, &A_log, &dt_bias);
    TS_OK(rssm_batch_set_gate_params(e.batch, 1, A_log, dt_bias, &err), &err); /* layer 0 missing */
    ts_inputs in;
    ts_inputs_alloc(&in, &m, 1);
    ts_inputs_random(&in, &rng);
    float *out = malloc(ts_out_elems(&m, 1) * sizeof(float));
    ts_pool_snapshot snap;
    ts_snapshot_take(&snap, e.pool);
    const uint32_t slot = 1;
    const uint64_t seq = 9;
    TS_EXPECT(rssm_batch_step(e.batch, 1, &slot, &seq, 0, &in.in, out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    ts_snapshot_expect_equal(&snap, e.pool);
    TS_OK(rssm_batch_set_gate_params(e.batch, 0, A_log, dt_bias, &err), &err);
    ts_step(&e, 1, &slot, &seq, 0, &in, out);
    ts_snapshot_free(&snap);
    free(out);
    free(A_log);
    free(dt_bias);
    ts_inputs_free(&in);
    ts_env_close(&e);
}

/* The good path of each entry: outputs fully written (poisoned first),
 * cursors advanced, timing available; upload once, run twice. */
static void test_good_path(void **state)
{
    (void)state;
    rssm_error err;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 5, 0);
    rssm_model m = ts_small_model(RSSM_GATE_KDA, 3, 4);
    m.io_dtype = RSSM_DTYPE_BF16;
    ts_env e;
    ts_env_open(&e, ts_backend(), &m, 4, RSSM_FLUSH_ALIGNED, 4);
    ts_env_alloc_random(&e, 4, &rng);
    ts_inputs in;
    ts_inputs_alloc(&in, &m, 2);
    ts_inputs_random(&in, &rng);
    const size_t n = ts_out_elems(&m, 2);
    uint16_t *out = malloc(n * 2), *out2 = malloc(n * 2);
    const uint32_t slots[2] = { 3, 1 };
    uint64_t seq[2] = { 5, 6 };
    ts_step(&e, 2, slots, seq, 0, &in, out);

    TS_OK(rssm_batch_upload(e.batch, 2, &in.in, &err), &err);
    seq[0]++, seq[1]++;
    TS_OK(rssm_batch_run(e.batch, 2, slots, seq, 0, &err), &err);
    seq[0]++, seq[1]++;
    TS_OK(rssm_batch_run(e.batch, 2, slots, seq, 0, &err), &err);
    ts_poison(out2, n * 2);
    TS_OK(rssm_batch_download(e.batch, 2, out2, &err), &err);
    assert_int_equal(ts_count_nonfinite(out2, RSSM_DTYPE_BF16, n), 0);
    /* One row only: the first row's outputs. */
    ts_poison(out2, n * 2);
    TS_OK(rssm_batch_download(e.batch, 1, out2, &err), &err);
    assert_int_equal(ts_count_nonfinite(out2, RSSM_DTYPE_BF16, ts_out_elems(&m, 1)), 0);
    double secs = -1;
    TS_OK(rssm_batch_last_run_seconds(e.batch, &secs, &err), &err);
    assert_true(secs >= 0 && secs < 10);
    uint32_t wp;
    TS_OK(rssm_pool_write_pos(e.pool, 3, &wp, &err), &err);
    assert_int_equal(wp, 3);
    TS_OK(rssm_pool_write_pos(e.pool, 0, &wp, &err), &err);
    assert_int_equal(wp, 0);
    free(out);
    free(out2);
    ts_inputs_free(&in);
    ts_env_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_bad_args),
        cmocka_unit_test(test_step_bad_args_gdn),
        cmocka_unit_test(test_step_bad_args_kda_raw),
        cmocka_unit_test(test_gate_params_bad_args),
        cmocka_unit_test(test_raw_gates_need_params),
        cmocka_unit_test(test_good_path),
    };
    return TS_RUN_ON_BACKEND(tests);
}
