/* Non-finite and out-of-range inputs (the policy in include/rssm.h): a NaN
 * or infinite q, k, v, gate or beta in one batch row reaches that row's
 * outputs and its slot's state only. Every other row's outputs and every
 * other slot's state are bit for bit what a run without the bad value gives,
 * on every backend that starts here, and nothing is undefined behaviour
 * (the sanitizer build checks float-to-integer conversions too). */
#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 3, STEPS = 7 };

typedef enum field { F_GATE, F_BETA, F_Q, F_V, F_COUNT } field;
static const char *const field_names[] = {"gate", "beta", "q", "v"};

/* Runs STEPS steps of rows 0..ROWS-1 on slots 0..ROWS-1 from fixed random
 * states; at step 3 row 0's `f` gets `bad` (when `poison`). Returns outputs
 * [STEPS][layers][ROWS][HV][V] and final states [ROWS][state_elems]. Every
 * run writes the slots' states afresh, which also empties their rings
 * (rssm_pool_write_state), so one environment serves every run: opening a
 * Vulkan device with the validation layer on took most of this test's time. */
static void run(ts_env *e, int poison, field f, float bad, float *outs, float *states)
{
    const rssm_model *m = &e->model;
    rh_rng r;
    rh_rng_seed(&r, 0x5eed, 0);
    ts_env_write_random(e, ROWS, &r);
    ts_inputs in;
    ts_inputs_alloc(&in, m, ROWS);
    const uint32_t slots[ROWS] = {0, 1, 2};
    uint64_t seq[ROWS] = {10, 11, 12};
    const size_t nout = ts_out_elems(m, ROWS);
    rssm_error err;
    for (int step = 0; step < STEPS; step++) {
        ts_inputs_random(&in, &r);
        if (poison && step == 3) {
            /* Row 0 of layer 0: the first element of that row's block. */
            switch (f) {
            case F_GATE: in.gate[0] = bad; break;
            case F_BETA: in.beta[0] = bad; break;
            case F_Q: ((float *)in.q)[0] = bad; break;
            case F_V: ((float *)in.v)[0] = bad; break;
            default: break;
            }
        }
        for (int i = 0; i < ROWS; i++)
            seq[i]++;
        float *out = outs + (size_t)step * nout;
        TS_OK(rssm_batch_step(e->batch, ROWS, slots, seq, 0, &in.in, out, &err), &err);
    }
    const size_t ns = ts_state_elems(m);
    for (uint32_t s = 0; s < ROWS; s++)
        TS_OK(rssm_pool_read_state(e->pool, s, states + s * ns, &err), &err);
    ts_inputs_free(&in);
}

static void check_backend(const char *backend, rssm_gate_kind kind)
{
    rssm_model m = ts_small_model(kind, 2, 4);
    const size_t nout = ts_out_elems(&m, ROWS), ns = ts_state_elems(&m);
    const size_t row_w = (size_t)m.num_v_heads * m.head_v;
    float *ref_out = malloc(STEPS * nout * sizeof(float)), *ref_st = malloc(ROWS * ns * sizeof(float));
    float *out = malloc(STEPS * nout * sizeof(float)), *st = malloc(ROWS * ns * sizeof(float));
    assert_non_null(ref_out);
    assert_non_null(out);
    ts_env e;
    ts_env_open(&e, backend, &m, ROWS, RSSM_FLUSH_ALIGNED, ROWS);
    rh_rng r;
    rh_rng_seed(&r, 0x5eed, 0);
    ts_env_alloc_random(&e, ROWS, &r); /* run() writes the states again */
    run(&e, 0, F_GATE, 0.0f, ref_out, ref_st);
    static const float bads[] = {NAN, INFINITY, -INFINITY};
    for (int f = 0; f < F_COUNT; f++) {
        for (size_t b = 0; b < sizeof bads / sizeof bads[0]; b++) {
            run(&e, 1, (field)f, bads[b], out, st);
            for (int step = 0; step < STEPS; step++)
                for (uint32_t l = 0; l < m.layers; l++)
                    for (uint32_t row = 0; row < ROWS; row++) {
                        /* Row 0 before the bad step, and every other row always. */
                        if (row == 0 && step >= 3)
                            continue;
                        const size_t at = (size_t)step * nout + ((size_t)l * ROWS + row) * row_w;
                        if (memcmp(out + at, ref_out + at, row_w * sizeof(float)) != 0)
                            fail_msg("%s %s: %s = %g in row 0 changed row %u's output (layer %u, step %d)",
                                     backend, kind ? "KDA" : "GDN", field_names[f], (double)bads[b], row, l,
                                     step);
                    }
            for (uint32_t s = 1; s < ROWS; s++)
                if (memcmp(st + s * ns, ref_st + s * ns, ns * sizeof(float)) != 0)
                    fail_msg("%s %s: %s = %g in row 0 changed slot %u's state", backend, kind ? "KDA" : "GDN",
                             field_names[f], (double)bads[b], s);
        }
    }
    ts_env_close(&e);
    free(ref_out);
    free(ref_st);
    free(out);
    free(st);
}

static void check_both_gates(const char *backend, void *arg)
{
    (void)arg;
    check_backend(backend, RSSM_GATE_GDN);
    check_backend(backend, RSSM_GATE_KDA);
}

static void test_every_backend(void **state)
{
    (void)state;
    assert_true(ts_each_backend(check_both_gates, NULL) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_backend)};
    return TS_RUN(tests);
}
