#include "test_support.h"
#include "conform.h"

#include "dtype.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ts_check_status(rssm_status got, rssm_status want, const rssm_error *err,
                     const char *expr, const char *file, int line)
{
    if (got != want)
        fail_msg("%s:%d: %s returned %d (%s), expected %d (%s); message: \"%s\"", file, line, expr,
                 (int)got, rssm_status_str(got), (int)want, rssm_status_str(want),
                 err ? err->message : "(no err)");
    if (err && err->status != got)
        fail_msg("%s:%d: %s returned %s but err->status is %s", file, line, expr,
                 rssm_status_str(got), rssm_status_str(err->status));
    if (err && want != RSSM_OK && err->message[0] == '\0')
        fail_msg("%s:%d: %s failed with %s and an empty message", file, line, expr,
                 rssm_status_str(got));
}

/* ------------------------------------------------------ random inputs */

float ts_rng_float(rh_rng *r, float lo, float hi)
{
    const float min_abs = 1e-3f * (hi - lo);
    for (;;) {
        double u = (double)(rh_rng_next(r) >> 11) * 0x1.0p-53;
        float x = (float)(lo + (hi - lo) * u);
        if (x >= hi)
            x = lo;
        if (!(lo < 0.0f && hi > 0.0f) || fabsf(x) >= min_abs)
            return x;
    }
}

void ts_fill(float *x, size_t n, float lo, float hi, rh_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = ts_rng_float(r, lo, hi);
}

/* ------------------------------------------------ poison and compare */

void ts_poison(void *p, size_t bytes) { memset(p, 0xff, bytes); }

float ts_load(const void *p, rssm_dtype t, size_t i) { return rssm_load(p, t, i); }

size_t ts_count_nonfinite(const void *p, rssm_dtype t, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !isfinite(rssm_load(p, t, i));
    return bad;
}

/* The same measure `rssm conform` applies, so the unit tests and the
 * conformance table cannot disagree on what an error is. */
double ts_rel_l2(const float *x, const double *ref, size_t n) { return rh_rel_l2_f(x, ref, n); }

double ts_rel_l2_f(const float *x, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(ref[i]))
            return INFINITY;
        double d = (double)x[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den == 0)
        return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

double ts_rel_l2_io(const void *x, rssm_dtype t, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        float xi = rssm_load(x, t, i);
        if (!isfinite(xi))
            return INFINITY;
        double d = (double)xi - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0)
        return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

/* ------------------------------------------------------------ models */

rssm_model ts_small_model(rssm_gate_kind kind, uint32_t layers, uint32_t L)
{
    rssm_model m = {
        .layers = layers,
        .num_qk_heads = 2,
        .num_v_heads = 4,
        .head_k = 16,
        .head_v = 8,
        .gate_kind = kind,
        .gate_mode = RSSM_GATE_PRECOMPUTED,
        .gate_lower_bound = -5.0f,
        .replay = 1,
        .ring_len = L,
        .state_dtype = RSSM_DTYPE_F32,
        .ring_dtype = RSSM_DTYPE_F32,
        .io_dtype = RSSM_DTYPE_F32,
        .qk_l2norm = 1,
        .q_scale = 0.0f,
    };
    return m;
}

size_t ts_state_elems(const rssm_model *m)
{
    return (size_t)m->layers * m->num_v_heads * m->head_v * m->head_k;
}

size_t ts_out_elems(const rssm_model *m, uint32_t rows)
{
    return (size_t)m->layers * rows * m->num_v_heads * m->head_v;
}

size_t ts_gate_width(const rssm_model *m) { return m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1; }

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        fail_msg("out of host memory (%zu x %zu bytes)", n, size);
    return p;
}

float *ts_random_state(const rssm_model *m, rh_rng *r)
{
    size_t n = ts_state_elems(m);
    float *s = xcalloc(n, sizeof *s);
    ts_fill(s, n, -0.5f, 0.5f, r);
    return s;
}

/* ------------------------------------------------------ step inputs */

void ts_inputs_alloc(ts_inputs *t, const rssm_model *m, uint32_t rows)
{
    memset(t, 0, sizeof *t);
    t->model = *m;
    t->rows = rows;
    t->nq = (size_t)m->layers * rows * m->num_qk_heads * m->head_k;
    t->nv = (size_t)m->layers * rows * m->num_v_heads * m->head_v;
    t->ngate = (size_t)m->layers * rows * m->num_v_heads * ts_gate_width(m);
    t->nbeta = (size_t)m->layers * rows * m->num_v_heads;
    const size_t io = rssm_dtype_size(m->io_dtype);
    t->q = xcalloc(t->nq, io);
    t->k = xcalloc(t->nq, io);
    t->v = xcalloc(t->nv, io);
    t->qf = xcalloc(t->nq, sizeof(float));
    t->kf = xcalloc(t->nq, sizeof(float));
    t->vf = xcalloc(t->nv, sizeof(float));
    t->gate = xcalloc(t->ngate, sizeof(float));
    t->beta = xcalloc(t->nbeta, sizeof(float));
    t->in = (rssm_step_inputs){ .q = t->q, .k = t->k, .v = t->v, .gate = t->gate, .beta = t->beta };
}

void ts_inputs_free(ts_inputs *t)
{
    free(t->q);
    free(t->k);
    free(t->v);
    free(t->qf);
    free(t->kf);
    free(t->vf);
    free(t->gate);
    free(t->beta);
    memset(t, 0, sizeof *t);
}

/* Random values in [lo, hi), stored in dtype t at `dst`, and the stored
 * value (after rounding) in `f`. */
static void fill_io(void *dst, float *f, size_t n, rssm_dtype t, float lo, float hi, rh_rng *r)
{
    for (size_t i = 0; i < n; i++) {
        float x = ts_rng_float(r, lo, hi);
        rssm_store(dst, t, i, x);
        f[i] = rssm_load(dst, t, i);
    }
}

void ts_inputs_random(ts_inputs *t, rh_rng *r)
{
    const rssm_dtype io = t->model.io_dtype;
    fill_io(t->q, t->qf, t->nq, io, -1.0f, 1.0f, r);
    fill_io(t->k, t->kf, t->nq, io, -1.0f, 1.0f, r);
    fill_io(t->v, t->vf, t->nv, io, -1.0f, 1.0f, r);
    if (t->model.gate_mode == RSSM_GATE_PRECOMPUTED) {
        ts_fill(t->gate, t->ngate, -0.4f, -0.01f, r);
        ts_fill(t->beta, t->nbeta, 0.05f, 0.95f, r);
    } else {
        ts_fill(t->gate, t->ngate, -3.0f, 3.0f, r);
        ts_fill(t->beta, t->nbeta, -3.0f, 3.0f, r);
    }
}

void ts_random_gate_params(const rssm_model *m, rh_rng *r, float **A_log, float **dt_bias)
{
    size_t na = (size_t)m->layers * m->num_v_heads;
    size_t nd = na * ts_gate_width(m);
    *A_log = xcalloc(na, sizeof(float));
    *dt_bias = xcalloc(nd, sizeof(float));
    ts_fill(*A_log, na, -1.0f, 0.5f, r);
    ts_fill(*dt_bias, nd, -1.0f, 1.0f, r);
}

/* ------------------------------------------------------------ fixture */

void ts_filter_tests(void)
{
    const char *pattern = getenv("RSSM_TEST_FILTER");
    if (pattern && *pattern)
        cmocka_set_test_filter(pattern);
}

const char *ts_backend(void)
{
    const char *name = getenv("RSSM_TEST_BACKEND");
    return name && *name ? name : "cpu";
}

int ts_backend_usable(void)
{
    rssm_error err;
    rssm_backend *b = NULL;
    const rssm_status st = rssm_backend_create(ts_backend(), &b, &err);
    rssm_backend_destroy(&b);
    if (st == RSSM_OK)
        return 1;
    if (st == RSSM_ERR_UNAVAILABLE && !rh_backend_required(ts_backend())) {
        printf("skipped: backend %s: %s\n", ts_backend(), err.message);
        return 0;
    }
    fprintf(stderr, "backend %s: %s\n", ts_backend(), err.message);
    exit(1);
}

/* The program's backends by name (ts_env_open): test code's own state, in
 * one thread (the threads of test_lifetime use a pool opened before them). */
enum { TS_SHARED_MAX = 8 };
static struct ts_shared {
    char name[64];
    rssm_backend *backend;
} ts_shared[TS_SHARED_MAX];
static size_t ts_shared_count;

int ts_release_backends(void **state)
{
    (void)state;
    for (size_t i = 0; i < ts_shared_count; i++)
        rssm_backend_destroy(&ts_shared[i].backend);
    ts_shared_count = 0;
    return 0;
}

static bool ts_is_shared(const rssm_backend *b)
{
    for (size_t i = 0; i < ts_shared_count; i++)
        if (ts_shared[i].backend == b)
            return true;
    return false;
}

rssm_backend *ts_backend_shared(const char *name)
{
    for (size_t i = 0; i < ts_shared_count; i++)
        if (strcmp(ts_shared[i].name, name) == 0)
            return ts_shared[i].backend;
    if (ts_shared_count == TS_SHARED_MAX || strlen(name) >= sizeof ts_shared[0].name)
        fail_msg("ts_backend_shared: more backends, or a longer name, than the tests' table holds: %s", name);
    rssm_error err;
    rssm_backend *b = NULL;
    TS_OK(rssm_backend_create(name, &b, &err), &err);
    struct ts_shared *s = &ts_shared[ts_shared_count++];
    strcpy(s->name, name);
    s->backend = b;
    return b;
}

static void ts_env_open_on(ts_env *e, rssm_backend *b, const rssm_model *m, uint32_t slots,
                           rssm_flush_policy policy, uint32_t max_rows)
{
    rssm_error err;
    memset(e, 0, sizeof *e);
    e->model = *m;
    e->backend = b;
    TS_OK(rssm_pool_create(e->backend, m, slots, policy, &e->pool, &err), &err);
    if (max_rows)
        TS_OK(rssm_batch_create(e->pool, max_rows, &e->batch, &err), &err);
}

void ts_env_open(ts_env *e, const char *backend, const rssm_model *m, uint32_t slots,
                 rssm_flush_policy policy, uint32_t max_rows)
{
    ts_env_open_on(e, ts_backend_shared(backend), m, slots, policy, max_rows);
}

void ts_env_open_own(ts_env *e, const char *backend, const rssm_model *m, uint32_t slots,
                     rssm_flush_policy policy, uint32_t max_rows)
{
    rssm_error err;
    rssm_backend *b = NULL;
    TS_OK(rssm_backend_create(backend, &b, &err), &err);
    ts_env_open_on(e, b, m, slots, policy, max_rows);
}

void ts_env_close(ts_env *e)
{
    rssm_batch_destroy(&e->batch);
    rssm_pool_destroy(&e->pool);
    if (ts_is_shared(e->backend))
        e->backend = NULL;
    else
        rssm_backend_destroy(&e->backend);
}

void ts_env_write_random(ts_env *e, uint32_t n, rh_rng *r)
{
    rssm_error err;
    for (uint32_t slot = 0; slot < n; slot++) {
        float *s = ts_random_state(&e->model, r);
        TS_OK(rssm_pool_write_state(e->pool, slot, s, &err), &err);
        free(s);
    }
}

void ts_env_alloc_random(ts_env *e, uint32_t n, rh_rng *r)
{
    rssm_error err;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t slot = UINT32_MAX;
        TS_OK(rssm_pool_alloc(e->pool, &slot, &err), &err);
        assert_int_equal(slot, i);
    }
    ts_env_write_random(e, n, r);
}

void ts_step(ts_env *e, uint32_t rows, const uint32_t *slots, const uint64_t *seq_len_after,
             uint32_t snapshot_interval, const ts_inputs *in, void *out)
{
    rssm_error err;
    const size_t n = ts_out_elems(&e->model, rows);
    ts_poison(out, n * rssm_dtype_size(e->model.io_dtype));
    TS_OK(rssm_batch_step(e->batch, rows, slots, seq_len_after, snapshot_interval, &in->in, out, &err),
          &err);
    size_t bad = ts_count_nonfinite(out, e->model.io_dtype, n);
    if (bad)
        fail_msg("%zu of %zu outputs not written (or not finite)", bad, n);
}

void ts_snapshot_take(ts_pool_snapshot *s, rssm_pool *p)
{
    const rssm_model *m = rssm_pool_model(p);
    const size_t n = ts_state_elems(m);
    s->slots = rssm_pool_capacity(p);
    s->free_count = rssm_pool_free_count(p);
    s->allocated = xcalloc(s->slots, 1);
    s->write_pos = xcalloc(s->slots, sizeof(uint32_t));
    s->state = xcalloc((size_t)s->slots * n, sizeof(float));
    for (uint32_t i = 0; i < s->slots; i++) {
        rssm_error err;
        rssm_status st = rssm_pool_write_pos(p, i, &s->write_pos[i], &err);
        if (st == RSSM_ERR_BAD_SLOT)
            continue;
        TS_OK(st, &err);
        s->allocated[i] = 1;
        TS_OK(rssm_pool_read_state(p, i, s->state + (size_t)i * n, &err), &err);
    }
}

void ts_snapshot_expect_equal(const ts_pool_snapshot *s, rssm_pool *p)
{
    const size_t n = ts_state_elems(rssm_pool_model(p));
    float *now = xcalloc(n, sizeof(float));
    assert_int_equal(rssm_pool_free_count(p), s->free_count);
    for (uint32_t i = 0; i < s->slots; i++) {
        rssm_error err;
        uint32_t wp = UINT32_MAX;
        rssm_status st = rssm_pool_write_pos(p, i, &wp, &err);
        if (!s->allocated[i]) {
            if (st != RSSM_ERR_BAD_SLOT)
                fail_msg("slot %u was free and is now %s", i, rssm_status_str(st));
            continue;
        }
        TS_OK(st, &err);
        if (wp != s->write_pos[i])
            fail_msg("slot %u: write_pos changed from %u to %u", i, s->write_pos[i], wp);
        ts_poison(now, n * sizeof(float));
        TS_OK(rssm_pool_read_state(p, i, now, &err), &err);
        if (memcmp(now, s->state + (size_t)i * n, n * sizeof(float)) != 0)
            fail_msg("slot %u: state changed", i);
    }
    free(now);
}

void ts_snapshot_free(ts_pool_snapshot *s)
{
    free(s->allocated);
    free(s->write_pos);
    free(s->state);
    memset(s, 0, sizeof *s);
}

int ts_each_backend(void (*check)(const char *name, void *arg), void *arg)
{
    enum { MAX_CHECKED = 16 };
    rssm_backend *checked[MAX_CHECKED];
    size_t nchecked = 0;
    int ran = 0;
    for (size_t i = 0; i < rssm_backend_name_count(); i++) {
        const char *name = rssm_backend_name_at(i);
        rssm_backend *b = NULL;
        rssm_error err;
        if (rssm_backend_create(name, &b, &err) != RSSM_OK) {
            if (rh_backend_required(name))
                fail_msg("backend %s is required here (RSSM_REQUIRE_BACKENDS): %s", name, err.message);
            print_message("[  SKIP    ] %s: %s\n", name, err.message);
            continue;
        }
        int dup = 0;
        for (size_t j = 0; j < nchecked; j++)
            dup |= rh_same_kernels(checked[j], b);
        if (dup || nchecked == MAX_CHECKED) {
            rssm_backend_destroy(&b);
            continue;
        }
        checked[nchecked++] = b;
        check(name, arg);
        print_message("[  OK      ] %s\n", name);
        ran++;
    }
    for (size_t j = 0; j < nchecked; j++)
        rssm_backend_destroy(&checked[j]);
    return ran;
}

void ts_window_make(ts_window *w, const rssm_model *m, uint32_t rows, uint32_t tokens, rh_rng *rng)
{
    w->tokens = tokens;
    const size_t io = rssm_dtype_size(m->io_dtype);
    for (uint32_t t = 0; t < tokens; t++) {
        ts_inputs_alloc(&w->tok[t], m, rows);
        ts_inputs_random(&w->tok[t], rng);
    }
    const ts_inputs *a = &w->tok[0];
    w->q = malloc(tokens * a->nq * io);
    w->k = malloc(tokens * a->nq * io);
    w->v = malloc(tokens * a->nv * io);
    w->gate = malloc(tokens * a->ngate * sizeof(float));
    w->beta = malloc(tokens * a->nbeta * sizeof(float));
    assert_true(w->q && w->k && w->v && w->gate && w->beta);
    for (uint32_t t = 0; t < tokens; t++) {
        memcpy(w->q + t * a->nq * io, w->tok[t].q, a->nq * io);
        memcpy(w->k + t * a->nq * io, w->tok[t].k, a->nq * io);
        memcpy(w->v + t * a->nv * io, w->tok[t].v, a->nv * io);
        memcpy(w->gate + t * a->ngate, w->tok[t].gate, a->ngate * sizeof(float));
        memcpy(w->beta + t * a->nbeta, w->tok[t].beta, a->nbeta * sizeof(float));
    }
    w->in = (rssm_step_inputs){.q = w->q, .k = w->k, .v = w->v, .gate = w->gate, .beta = w->beta};
}

void ts_window_free(ts_window *w)
{
    for (uint32_t t = 0; t < w->tokens; t++)
        ts_inputs_free(&w->tok[t]);
    free(w->q);
    free(w->k);
    free(w->v);
    free(w->gate);
    free(w->beta);
}

int ts_backend_built_in(const char *name)
{
    for (size_t i = 0; i < rssm_backend_name_count(); i++)
        if (strcmp(rssm_backend_name_at(i), name) == 0)
            return 1;
    return 0;
}
