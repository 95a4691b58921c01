/* The benchmark entries (include/rssm.h): a program timed by
 * rssm_batch_time_steps runs exactly its steps, as many times as it says
 * (its untimed warm-up runs, then reps), and leaves the pool's write positions
 * alone; a bad plan is refused before anything runs; the in-place pass
 * leaves the pool's bytes as they were, and (with a flip) touches every
 * word of them; a cap of multiprocessors changes no result. On every
 * backend that starts here. */
#include "test_support.h"

#include "objects.h" /* the backend entry itself, for the flipped pass */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 3, L = 4, REPS = 2 };

static const uint32_t kSlots[ROWS] = {0, 1, 2};

/* `call` fails with `want`, and its message names `needle`. */
#define EXPECT_REFUSED(call, want, errp, needle)                                                   \
    do {                                                                                           \
        TS_EXPECT(call, want, errp);                                                               \
        if (!strstr((errp)->message, (needle)))                                                    \
            fail_msg("%s: message '%s' does not say '%s'", #call, (errp)->message, (needle));      \
    } while (0)

/* Two pools from one random start, one batch each, the same inputs. */
typedef struct twin {
    ts_env a, b;
    ts_inputs in;
} twin;

static void twin_open(twin *t, const char *backend, const rssm_model *m, rssm_flush_policy policy)
{
    rssm_error err;
    ts_env_open(&t->a, backend, m, ROWS, policy, ROWS);
    ts_env_open(&t->b, backend, m, ROWS, policy, ROWS);
    rh_rng r;
    rh_rng_seed(&r, 0xbe7c, 0);
    ts_env_alloc_random(&t->a, ROWS, &r);
    rh_rng_seed(&r, 0xbe7c, 0);
    ts_env_alloc_random(&t->b, ROWS, &r);
    ts_inputs_alloc(&t->in, m, ROWS);
    ts_inputs_random(&t->in, &r);
    TS_OK(rssm_batch_upload(t->a.batch, ROWS, &t->in.in, &err), &err);
    TS_OK(rssm_batch_upload(t->b.batch, ROWS, &t->in.in, &err), &err);
}

static void twin_close(twin *t)
{
    ts_inputs_free(&t->in);
    ts_env_close(&t->a);
    ts_env_close(&t->b);
}

/* The plans of `cycles` whole ring cycles from the pool's positions, as
 * rssm_batch_run would make them; the pool's bookkeeping is advanced
 * through them (plan, then commit) and so ends where it began. */
static rssm_row_plan *cycle_plans(rssm_pool *p, uint64_t *seq, uint32_t steps)
{
    rssm_error err;
    rssm_row_plan *plans = malloc((size_t)steps * ROWS * sizeof *plans);
    assert_non_null(plans);
    for (uint32_t s = 0; s < steps; s++) {
        for (int i = 0; i < ROWS; i++)
            seq[i]++;
        TS_OK(rssm_pool_plan(p, ROWS, kSlots, seq, 0, plans + (size_t)s * ROWS, &err), &err);
        TS_OK(rssm_pool_commit(p, ROWS, plans + (size_t)s * ROWS, &err), &err);
    }
    return plans;
}

static void expect_same_state(const char *backend, ts_env *x, ts_env *y, double tol)
{
    rssm_error err;
    const size_t ns = ts_state_elems(&x->model);
    float *sx = malloc(ns * sizeof *sx), *sy = malloc(ns * sizeof *sy);
    assert_non_null(sx);
    assert_non_null(sy);
    for (uint32_t s = 0; s < ROWS; s++) {
        uint32_t px, py;
        TS_OK(rssm_pool_write_pos(x->pool, s, &px, &err), &err);
        TS_OK(rssm_pool_write_pos(y->pool, s, &py, &err), &err);
        assert_int_equal(px, py);
        TS_OK(rssm_pool_read_state(x->pool, s, sx, &err), &err);
        TS_OK(rssm_pool_read_state(y->pool, s, sy, &err), &err);
        const double e = ts_rel_l2_f(sx, sy, ns);
        if (!(e <= tol))
            fail_msg("%s: slot %u: the states differ (rel. l2 %.3g)", backend, s, e);
    }
    free(sx);
    free(sy);
}

/* Whole cycles timed on pool a = the same steps run on b as often as the
 * timing says the program ran. */
static void check_program_is_its_steps(const char *backend, rssm_gate_kind kind, rssm_flush_policy policy)
{
    rssm_model m = ts_small_model(kind, 2, L);
    twin t;
    twin_open(&t, backend, &m, policy);
    rssm_error err;
    uint64_t seq_a[ROWS] = {20, 21, 22}, seq_b[ROWS] = {20, 21, 22};
    /* A staggered pool's first cycle is short; one cycle of bookkeeping
     * (on both pools) brings it to the steady ones a benchmark times. */
    for (uint32_t s = 0; s < L; s++) {
        for (int i = 0; i < ROWS; i++)
            seq_a[i]++, seq_b[i]++;
        TS_OK(rssm_batch_run(t.a.batch, ROWS, kSlots, seq_a, 0, &err), &err);
        TS_OK(rssm_batch_run(t.b.batch, ROWS, kSlots, seq_b, 0, &err), &err);
    }
    rssm_row_plan *plans = cycle_plans(t.a.pool, seq_a, L);
    rssm_timing tm = {-1.0, -1.0, 0};
    TS_OK(rssm_batch_time_steps(t.a.batch, ROWS, L, plans, REPS, &tm, &err), &err);
    if (!(tm.min_seconds > 0.0 && tm.min_seconds <= tm.median_seconds && isfinite(tm.median_seconds)))
        fail_msg("%s: time_steps reported %g s (fastest %g s)", backend, tm.median_seconds, tm.min_seconds);
    if (tm.runs < 1 + REPS)
        fail_msg("%s: time_steps says it ran %u times; at least one untimed run and %d timed", backend, tm.runs,
                 REPS);
    for (uint32_t s = 0; s < tm.runs * L; s++) {
        for (int i = 0; i < ROWS; i++)
            seq_b[i]++;
        TS_OK(rssm_batch_run(t.b.batch, ROWS, kSlots, seq_b, 0, &err), &err);
    }
    expect_same_state(backend, &t.a, &t.b, 1e-6);
    /* The outputs are the last step's. */
    const size_t nout = ts_out_elems(&m, ROWS);
    float *oa = malloc(nout * sizeof *oa), *ob = malloc(nout * sizeof *ob);
    assert_non_null(oa);
    assert_non_null(ob);
    TS_OK(rssm_batch_download(t.a.batch, ROWS, oa, &err), &err);
    TS_OK(rssm_batch_download(t.b.batch, ROWS, ob, &err), &err);
    const double e = ts_rel_l2_f(oa, ob, nout);
    if (!(e <= 1e-6))
        fail_msg("%s: the timed program's last outputs differ from the stepped ones (rel. l2 %.3g)", backend, e);
    free(oa);
    free(ob);
    free(plans);
    twin_close(&t);
}

/* Bad programs are refused with a message, and nothing moves. */
static void check_refusals(const char *backend)
{
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, L);
    ts_env e;
    ts_env_open(&e, backend, &m, ROWS + 1, RSSM_FLUSH_ALIGNED, ROWS);
    rh_rng r;
    rh_rng_seed(&r, 7, 0);
    ts_env_alloc_random(&e, ROWS, &r);
    ts_inputs in;
    ts_inputs_alloc(&in, &m, ROWS);
    ts_inputs_random(&in, &r);
    rssm_error err;
    rssm_row_plan good[ROWS], bad[ROWS];
    for (uint32_t i = 0; i < ROWS; i++)
        good[i] = (rssm_row_plan){.slot = i, .write_pos = 1, .force = 0, .is_flush = 0};
    rssm_timing tm;
    /* Nothing uploaded yet. */
    EXPECT_REFUSED(rssm_batch_time_steps(e.batch, ROWS, 1, good, 1, &tm, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "uploaded");
    TS_OK(rssm_batch_upload(e.batch, ROWS, &in.in, &err), &err);
    ts_pool_snapshot snap;
    ts_snapshot_take(&snap, e.pool);
    EXPECT_REFUSED(rssm_batch_time_steps(NULL, ROWS, 1, good, 1, &tm, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "NULL");
    EXPECT_REFUSED(rssm_batch_time_steps(e.batch, ROWS, 0, good, 1, &tm, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "steps");
    EXPECT_REFUSED(rssm_batch_time_steps(e.batch, ROWS, 1, good, 0, &tm, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "reps");
    EXPECT_REFUSED(rssm_batch_time_steps(e.batch, ROWS - 1, 1, good, 1, &tm, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "uploaded");
    memcpy(bad, good, sizeof bad);
    bad[1].write_pos = L;
    EXPECT_REFUSED(rssm_batch_time_steps(e.batch, ROWS, 1, bad, 1, &tm, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "write_pos");
    memcpy(bad, good, sizeof bad);
    bad[2].is_flush = 1;
    EXPECT_REFUSED(rssm_batch_time_steps(e.batch, ROWS, 1, bad, 1, &tm, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "is_flush");
    memcpy(bad, good, sizeof bad);
    bad[2].slot = 0;
    EXPECT_REFUSED(rssm_batch_time_steps(e.batch, ROWS, 1, bad, 1, &tm, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "twice");
    memcpy(bad, good, sizeof bad);
    bad[0].slot = ROWS; /* in range, not allocated */
    TS_EXPECT(rssm_batch_time_steps(e.batch, ROWS, 1, bad, 1, &tm, &err), RSSM_ERR_BAD_SLOT, &err);
    ts_snapshot_expect_equal(&snap, e.pool);
    /* Downloading before any run is refused; a refused program is no run. */
    float *out = malloc(ts_out_elems(&m, ROWS) * sizeof *out);
    assert_non_null(out);
    EXPECT_REFUSED(rssm_batch_download(e.batch, ROWS, out, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "nothing");
    /* A program that repeats one position runs, and moves no write_pos. */
    rssm_row_plan rep[2 * ROWS];
    memcpy(rep, good, sizeof good);
    memcpy(rep + ROWS, good, sizeof good);
    TS_OK(rssm_batch_time_steps(e.batch, ROWS, 2, rep, 1, &tm, &err), &err);
    TS_OK(rssm_batch_download(e.batch, ROWS, out, &err), &err);
    for (uint32_t s = 0; s < ROWS; s++) {
        uint32_t wp;
        TS_OK(rssm_pool_write_pos(e.pool, s, &wp, &err), &err);
        assert_int_equal(wp, 0);
    }
    free(out);
    ts_snapshot_free(&snap);
    ts_inputs_free(&in);
    ts_env_close(&e);
}

/* The in-place pass reads and writes the pool and changes no byte. */
static void check_inplace(const char *backend)
{
    rssm_model m = ts_small_model(RSSM_GATE_KDA, 2, L);
    ts_env e;
    ts_env_open(&e, backend, &m, ROWS, RSSM_FLUSH_ALIGNED, 0);
    rh_rng r;
    rh_rng_seed(&r, 11, 0);
    ts_env_alloc_random(&e, ROWS, &r);
    ts_pool_snapshot snap;
    ts_snapshot_take(&snap, e.pool);
    rssm_error err;
    double sec = -1.0;
    EXPECT_REFUSED(rssm_pool_inplace_seconds(e.pool, 0, &sec, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "reps");
    EXPECT_REFUSED(rssm_pool_inplace_seconds(NULL, 1, &sec, &err), RSSM_ERR_INVALID_ARGUMENT, &err, "NULL");
    TS_OK(rssm_pool_inplace_seconds(e.pool, 3, &sec, &err), &err);
    if (!(sec > 0.0 && isfinite(sec)))
        fail_msg("%s: the in-place pass reported %g s", backend, sec);
    ts_snapshot_expect_equal(&snap, e.pool);
    ts_snapshot_free(&snap);

    /* Through the backend entry with a non-zero flip and an odd number of
     * passes (1 untimed + 2), every 32-bit word of every slot must come back
     * flipped: a pass that skipped any part of the pool would show here. */
    rssm_pool *p = e.pool;
    const rssm_backend_ops *ops = p->backend->ops;
    const size_t slot_bytes = p->layout.slot_bytes, words = slot_bytes / 4;
    uint32_t *before = malloc((size_t)p->capacity * slot_bytes), *after = malloc((size_t)p->capacity * slot_bytes);
    assert_non_null(before);
    assert_non_null(after);
    for (uint32_t s = 0; s < p->capacity; s++)
        TS_OK(ops->slot_read(p->backend->ctx, p->dev, s, before + s * words, &err), &err);
    const uint32_t flip = 0x80402010u;
    TS_OK(ops->pool_inplace_seconds(p->backend->ctx, p->dev, (size_t)p->capacity * slot_bytes, 2, flip, &sec, &err),
          &err);
    for (uint32_t s = 0; s < p->capacity; s++)
        TS_OK(ops->slot_read(p->backend->ctx, p->dev, s, after + s * words, &err), &err);
    for (size_t w = 0; w < (size_t)p->capacity * words; w++)
        if (after[w] != (before[w] ^ flip))
            fail_msg("%s: the in-place pass left word %zu of %zu as it was", backend, w,
                     (size_t)p->capacity * words);
    free(before);
    free(after);
    ts_env_close(&e);
}

/* A cap of multiprocessors (rssm_backend_limit_sms) changes how a step is
 * planned, not what it computes: a pool and batch made under a cap of one
 * multiprocessor (a persistent grid of one CTA that takes every unit) give
 * the uncapped ones' outputs and states, step by step over two ring cycles
 * of staggered rows, within the fp32 tolerance (the two may run different
 * kernels), and the capped in-place pass leaves the bytes as they were. A
 * backend without the cap says so, and there is nothing more to check. */
static void check_sm_limit(const char *backend)
{
    rssm_error err;
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, L);
    m.head_k = 64; /* a head shape the persistent (bulk) kernel takes */
    m.head_v = 32;
    ts_env a, b;
    ts_env_open(&a, backend, &m, ROWS, RSSM_FLUSH_STAGGERED, ROWS);
    memset(&b, 0, sizeof b);
    b.model = m;
    TS_OK(rssm_backend_create(backend, &b.backend, &err), &err);
    const rssm_status st = rssm_backend_limit_sms(b.backend, 1, &err);
    if (st == RSSM_ERR_UNSUPPORTED) {
        ts_env_close(&a);
        ts_env_close(&b);
        return;
    }
    TS_OK(st, &err);
    TS_OK(rssm_pool_create(b.backend, &m, ROWS, RSSM_FLUSH_STAGGERED, &b.pool, &err), &err);
    TS_OK(rssm_batch_create(b.pool, ROWS, &b.batch, &err), &err);
    rh_rng r;
    rh_rng_seed(&r, 0x5a11, 0);
    ts_env_alloc_random(&a, ROWS, &r);
    rh_rng_seed(&r, 0x5a11, 0);
    ts_env_alloc_random(&b, ROWS, &r);
    ts_inputs in;
    ts_inputs_alloc(&in, &m, ROWS);
    const size_t nout = ts_out_elems(&m, ROWS);
    float *oa = malloc(nout * sizeof *oa), *ob = malloc(nout * sizeof *ob);
    assert_non_null(oa);
    assert_non_null(ob);
    uint64_t seq[ROWS] = {40, 41, 42};
    for (uint32_t s = 0; s < 2 * L; s++) {
        ts_inputs_random(&in, &r);
        for (int i = 0; i < ROWS; i++)
            seq[i]++;
        TS_OK(rssm_batch_step(a.batch, ROWS, kSlots, seq, 0, &in.in, oa, &err), &err);
        TS_OK(rssm_batch_step(b.batch, ROWS, kSlots, seq, 0, &in.in, ob, &err), &err);
        const double e = ts_rel_l2_f(ob, oa, nout);
        if (!(e <= 1e-5))
            fail_msg("%s: step %u under a cap of one multiprocessor differs from the uncapped step (rel. l2 %.3g)",
                     backend, s, e);
    }
    ts_pool_snapshot snap;
    ts_snapshot_take(&snap, b.pool);
    double sec = -1.0;
    TS_OK(rssm_pool_inplace_seconds(b.pool, 2, &sec, &err), &err);
    ts_snapshot_expect_equal(&snap, b.pool);
    ts_snapshot_free(&snap);
    expect_same_state(backend, &b, &a, 1e-5);
    free(oa);
    free(ob);
    ts_inputs_free(&in);
    ts_env_close(&a);
    ts_env_close(&b);
}

static void check_backend(const char *backend, void *arg)
{
    (void)arg;
    check_sm_limit(backend);
    check_program_is_its_steps(backend, RSSM_GATE_GDN, RSSM_FLUSH_ALIGNED);
    check_program_is_its_steps(backend, RSSM_GATE_KDA, RSSM_FLUSH_STAGGERED);
    check_refusals(backend);
    check_inplace(backend);
}

static void test_every_backend(void **state)
{
    (void)state;
    assert_true(ts_each_backend(check_backend, NULL) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_backend)};
    return TS_RUN(tests);
}
