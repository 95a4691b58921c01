/*
 * Allocation failures, each in turn: the pool, batch and trace-loading paths
 * run once per allocation they make, with that one allocation failing. The
 * test is linked with `--wrap` for malloc, calloc and aligned_alloc
 * (tests/CMakeLists.txt), so every such call from the library and the
 * harness comes here first; the C library's own allocations do not.
 *
 * Each failing run must end in RSSM_ERR_OUT_OF_MEMORY with a message and
 * leave nothing behind (the sanitizer build checks for leaks); the run in
 * which no allocation fails must succeed, which also shows that every
 * allocation of the path was reached.
 */
#include "test_support.h"
#include "error.h"
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_aligned_alloc(size_t align, size_t n);

/* Calls counted since arm(); the one numbered `fail_at` returns NULL. The
 * test itself is single-threaded, and the CPU backend's worker threads
 * allocate nothing once running. */
static long fail_at = -1, calls, failed;

static int fail_now(void)
{
    if (fail_at < 0)
        return 0;
    if (calls++ != fail_at)
        return 0;
    failed = 1;
    return 1;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return fail_now() ? NULL : __real_calloc(n, size); }
void *__wrap_aligned_alloc(size_t align, size_t n) { return fail_now() ? NULL : __real_aligned_alloc(align, n); }

static void arm(long at)
{
    calls = 0;
    failed = 0;
    fail_at = at;
}

static void disarm(void) { fail_at = -1; }

/* Runs `path` with allocation 0, 1, 2, ... failing until a run fails
 * none; returns how many allocations the path makes. */
static long each_failure(rssm_status (*path)(void *arg, rssm_error *err), void *arg, const char *what)
{
    for (long at = 0;; at++) {
        rssm_error err = {0};
        arm(at);
        const rssm_status st = path(arg, &err);
        disarm();
        if (!failed) {
            if (st != RSSM_OK)
                fail_msg("%s: %s with no allocation failing: %s", what, rssm_status_str(st), err.message);
            print_message("%s: %ld allocations, each failed in turn\n", what, at);
            return at;
        }
        if (st != RSSM_ERR_OUT_OF_MEMORY)
            fail_msg("%s, allocation %ld failing: %s (%s), not out of memory", what, at, rssm_status_str(st),
                     err.message);
        if (err.message[0] == '\0')
            fail_msg("%s, allocation %ld failing: no message", what, at);
        if (at > 100000)
            fail_msg("%s: no end to its allocations", what);
    }
}

/* Every call of the pool path, each stopping at the first error. */
static rssm_status pool_path(void *arg, rssm_error *err)
{
    (void)arg;
    const rssm_model m = ts_small_model(RSSM_GATE_KDA, 2, 4);
    rssm_backend *b = NULL;
    rssm_pool *p = NULL;
    float *state = NULL;
    void *bytes = NULL;
    uint32_t s0, s1;
    size_t size = 0;
    rssm_status st = rssm_backend_create("cpu", &b, err);
    if (st == RSSM_OK)
        st = rssm_pool_create(b, &m, 4, RSSM_FLUSH_STAGGERED, &p, err);
    if (st == RSSM_OK)
        st = rssm_pool_alloc(p, &s0, err);
    if (st == RSSM_OK)
        st = rssm_pool_alloc(p, &s1, err);
    if (st == RSSM_OK && !(state = calloc(ts_state_elems(&m), sizeof *state)))
        st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "test: state");
    if (st == RSSM_OK)
        st = rssm_pool_write_state(p, s0, state, err);
    if (st == RSSM_OK)
        st = rssm_pool_copy(p, s0, s1, err);
    if (st == RSSM_OK)
        st = rssm_pool_materialise(p, s1, err);
    if (st == RSSM_OK)
        st = rssm_pool_read_state(p, s1, state, err);
    if (st == RSSM_OK && !(bytes = malloc(size = rssm_pool_export_size(p))))
        st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "test: export bytes");
    if (st == RSSM_OK)
        st = rssm_pool_export(p, s1, bytes, size, err);
    if (st == RSSM_OK)
        st = rssm_pool_import(p, s0, bytes, size, err);
    free(bytes);
    free(state);
    rssm_pool_destroy(&p);
    rssm_backend_destroy(&b);
    return st;
}

/* A batch made and stepped through a flush, its outputs read back. */
static rssm_status batch_path(void *arg, rssm_error *err)
{
    const ts_inputs *in = arg;
    const rssm_model *m = &in->model;
    const uint32_t rows = in->rows, slots[2] = {0, 1};
    rssm_backend *b = NULL;
    rssm_pool *p = NULL;
    rssm_batch *batch = NULL;
    void *out = NULL;
    uint32_t slot;
    rssm_status st = rssm_backend_create("cpu", &b, err);
    if (st == RSSM_OK)
        st = rssm_pool_create(b, m, 2, RSSM_FLUSH_ALIGNED, &p, err);
    for (uint32_t r = 0; r < rows && st == RSSM_OK; r++)
        st = rssm_pool_alloc(p, &slot, err);
    if (st == RSSM_OK)
        st = rssm_batch_create(p, rows, &batch, err);
    if (st == RSSM_OK && !(out = malloc(ts_out_elems(m, rows) * sizeof(float))))
        st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "test: outputs");
    for (uint64_t t = 1; t <= m->ring_len && st == RSSM_OK; t++) {
        const uint64_t seq[2] = {t, t};
        st = rssm_batch_step(batch, rows, slots, seq, 0, &in->in, out, err);
    }
    free(out);
    rssm_batch_destroy(&batch);
    rssm_pool_destroy(&p);
    rssm_backend_destroy(&b);
    return st;
}

static rssm_status trace_path(void *arg, rssm_error *err)
{
    rh_trace t;
    const rssm_status st = rh_trace_load(arg, &t, err);
    if (st == RSSM_OK)
        rh_trace_free(&t);
    return st;
}

static void test_pool_allocations(void **state)
{
    (void)state;
    assert_true(each_failure(pool_path, NULL, "pool") > 0);
}

static void test_batch_allocations(void **state)
{
    (void)state;
    rh_rng r;
    rh_rng_seed(&r, 0xa110c, 0);
    const rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, 3);
    ts_inputs in;
    ts_inputs_alloc(&in, &m, 2);
    ts_inputs_random(&in, &r);
    assert_true(each_failure(batch_path, &in, "batch") > 0);
    ts_inputs_free(&in);
}

static void test_trace_load_allocations(void **state)
{
    (void)state;
    char dir[] = "/tmp/rssm-alloc-fail-XXXXXX";
    assert_non_null(mkdtemp(dir));
    rssm_error err;
    const rh_trace_spec spec = {.model = ts_small_model(RSSM_GATE_KDA, 1, 4), .steps = 5, .batch = 2, .seed = 9,
                                .stream = 1};
    rh_trace t;
    TS_OK(rh_trace_generate(&spec, &t, &err), &err);
    TS_OK(rh_trace_save(&t, dir, NULL, &err), &err);
    rh_trace_free(&t);
    assert_true(each_failure(trace_path, dir, "trace load") > 0);
    char cmd[sizeof dir + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_allocations),
        cmocka_unit_test(test_batch_allocations),
        cmocka_unit_test(test_trace_load_allocations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
