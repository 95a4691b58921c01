/* A pool larger than one storage-buffer binding (lavapipe binds 128 MiB;
 * the Vulkan backend splits a pool over several buffers, vk_abi.h) steps
 * exactly as the CPU backend does, with rows on slots in every buffer: the
 * same outputs and the same true states after a ring cycle and a flush. On
 * every backend that starts here, against the CPU. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SLOTS = 80, ROWS = 5, L = 4, STEPS = 6 };

/* 2 MiB of fp32 state per slot: 80 slots are 160 MiB and more. */
static rssm_model big_slot_model(void)
{
    rssm_model m = ts_small_model(RSSM_GATE_KDA, 8, L);
    m.num_qk_heads = 2;
    m.num_v_heads = 4;
    m.head_k = 128;
    m.head_v = 128;
    return m;
}

/* Rows on the first and last slots and on both sides of where lavapipe's
 * buffers split (58 slots of about 2.2 MiB each fit in 128 MiB). */
static const uint32_t kRows[ROWS] = {0, 40, 57, 58, 79};

typedef struct run {
    float *out;    /* STEPS steps of outputs */
    float *state;  /* ROWS final true states */
} run;

static void run_on(const char *backend, run *r)
{
    rssm_model m = big_slot_model();
    ts_env e;
    ts_env_open(&e, backend, &m, SLOTS, RSSM_FLUSH_ALIGNED, ROWS);
    rssm_error err;
    rh_rng rng;
    rh_rng_seed(&rng, 0xb16, 0);
    for (uint32_t i = 0; i < SLOTS; i++) {
        uint32_t slot;
        TS_OK(rssm_pool_alloc(e.pool, &slot, &err), &err);
    }
    for (uint32_t i = 0; i < ROWS; i++) {
        float *s = ts_random_state(&m, &rng);
        TS_OK(rssm_pool_write_state(e.pool, kRows[i], s, &err), &err);
        free(s);
    }
    ts_inputs in;
    ts_inputs_alloc(&in, &m, ROWS);
    const size_t nout = ts_out_elems(&m, ROWS), ns = ts_state_elems(&m);
    r->out = malloc(STEPS * nout * sizeof(float));
    r->state = malloc(ROWS * ns * sizeof(float));
    assert_non_null(r->out);
    assert_non_null(r->state);
    uint64_t seq[ROWS] = {100, 100, 100, 100, 100};
    for (int s = 0; s < STEPS; s++) {
        ts_inputs_random(&in, &rng);
        for (int i = 0; i < ROWS; i++)
            seq[i]++;
        ts_step(&e, ROWS, kRows, seq, 0, &in, r->out + (size_t)s * nout);
    }
    for (int i = 0; i < ROWS; i++)
        TS_OK(rssm_pool_read_state(e.pool, kRows[i], r->state + (size_t)i * ns, &err), &err);
    ts_inputs_free(&in);
    ts_env_close(&e);
}

static run g_cpu;

static void check(const char *backend, void *arg)
{
    (void)arg;
    if (strcmp(backend, "cpu") == 0)
        return;
    run r;
    run_on(backend, &r);
    rssm_model m = big_slot_model();
    /* fp32 everywhere: 1e-5, unless the backend's flush rounds to fp16 tiles. */
    rssm_backend *b = NULL;
    rssm_error err;
    TS_OK(rssm_backend_create(backend, &b, &err), &err);
    const double tol = rh_backend_tolerance(b, &m, 1e-5);
    rssm_backend_destroy(&b);
    const size_t nout = ts_out_elems(&m, ROWS), ns = ts_state_elems(&m);
    const double eo = ts_rel_l2_f(r.out, g_cpu.out, STEPS * nout);
    if (!(eo <= tol))
        fail_msg("%s: outputs differ from the CPU's (rel. l2 %.3g)", backend, eo);
    for (int i = 0; i < ROWS; i++) {
        const double es = ts_rel_l2_f(r.state + (size_t)i * ns, g_cpu.state + (size_t)i * ns, ns);
        if (!(es <= tol))
            fail_msg("%s: slot %u's state differs from the CPU's (rel. l2 %.3g)", backend, kRows[i], es);
    }
    printf("%s: a %u-slot pool of %.0f MiB steps as the CPU does\n", backend, SLOTS,
           SLOTS * (double)ns * 4.0 / (1 << 20));
    free(r.out);
    free(r.state);
}

static void test_big_pool(void **state)
{
    (void)state;
    run_on("cpu", &g_cpu);
    ts_each_backend(check, NULL);
    free(g_cpu.out);
    free(g_cpu.state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_big_pool)};
    return TS_RUN(tests);
}
