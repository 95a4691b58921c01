/*
 * Helpers shared by the cmocka tests: a seeded generator of non-zero
 * inputs, NaN poisoning, error norms, small models, and a fixture that
 * opens a backend + pool + batch. Every helper fails the running test
 * (cmocka fail_msg) instead of returning an error.
 */
#ifndef RSSM_TEST_SUPPORT_H
#define RSSM_TEST_SUPPORT_H

#include "conform.h" /* rh_backend_required */
#include "rng.h"
#include "rssm.h"

#include <setjmp.h> /* cmocka.h needs these first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* ------------------------------------------------------------ checks */

/* The exit status of a test program that could not run at all (its backend
 * is not present): ctest reports it as skipped (SKIP_RETURN_CODE). */
#define TS_SKIP_EXIT 77

/* Fails the test, with the library's message, unless `call` returns
 * `want`. On an expected error it also checks that `err` carries the same
 * status and a non-empty message. */
#define TS_EXPECT(call, want, errp)                                                       \
    do {                                                                                  \
        rssm_status ts_st_ = (call);                                                      \
        ts_check_status(ts_st_, (want), (errp), #call, __FILE__, __LINE__);               \
    } while (0)
#define TS_OK(call, errp) TS_EXPECT(call, RSSM_OK, errp)

/* 1 if rssm_backend_name_at lists `name` (built in; its device may be absent). */
int ts_backend_built_in(const char *name);

void ts_check_status(rssm_status got, rssm_status want, const rssm_error *err,
                     const char *expr, const char *file, int line);

/* ------------------------------------------------------ random inputs */

/* The harness's seeded generator (tools/harness/rng.h), seeded with
 * rh_rng_seed(r, seed, 0): one generator for tests, traces and benchmarks. */
/* Uniform in [lo, hi), never closer to 0 than 1e-3 * (hi - lo) when the
 * interval straddles 0: tests never run on (near-)zero data. */
float ts_rng_float(rh_rng *r, float lo, float hi);
void ts_fill(float *x, size_t n, float lo, float hi, rh_rng *r);

/* ------------------------------------------------ poison and compare */

/* Sets every byte to 0xff: NaN in fp32, fp16 and bf16 alike. */
void ts_poison(void *p, size_t bytes);
/* Elements of an io-dtype array that are not finite (i.e. never written). */
size_t ts_count_nonfinite(const void *p, rssm_dtype t, size_t n);
/* Element i of an io/storage array as fp32. */
float ts_load(const void *p, rssm_dtype t, size_t i);
/* ||x - ref|| / ||ref||; +inf if x holds a NaN or inf (NaN never passes). */
double ts_rel_l2(const float *x, const double *ref, size_t n);
double ts_rel_l2_f(const float *x, const float *ref, size_t n);
/* The same for an array in dtype t against a double reference. */
double ts_rel_l2_io(const void *x, rssm_dtype t, const double *ref, size_t n);

/* ------------------------------------------------------------ models */

/* A small valid model: `layers` layers, H=2, HV=4, K=16, V=8, replay on
 * with ring length L, fp32 state, ring and io, precomputed gates, q/k L2
 * norm on, default q scale. Small enough for the sanitizer build. */
rssm_model ts_small_model(rssm_gate_kind kind, uint32_t layers, uint32_t L);

size_t ts_state_elems(const rssm_model *m);            /* layers*HV*V*K */
size_t ts_out_elems(const rssm_model *m, uint32_t rows); /* layers*rows*HV*V */
size_t ts_gate_width(const rssm_model *m);              /* 1 (GDN) or K (KDA) */

/* A random state [layers][HV][V][K] in [-0.5, 0.5), malloc'd. */
float *ts_random_state(const rssm_model *m, rh_rng *r);

/* ------------------------------------------------------ step inputs */

/* One forward step's inputs for `rows` rows. q, k, v are stored in the io
 * dtype (in.q ...) and, as the exact values the kernel sees, in fp32
 * (qf, kf, vf). Gates are fp32. */
typedef struct ts_inputs {
    rssm_model model;
    uint32_t rows;
    void *q, *k, *v;
    float *qf, *kf, *vf;
    float *gate, *beta;
    rssm_step_inputs in;
    size_t nq, nv, ngate, nbeta; /* element counts */
} ts_inputs;

void ts_inputs_alloc(ts_inputs *t, const rssm_model *m, uint32_t rows);
void ts_inputs_free(ts_inputs *t);
/* Random q, k, v in [-1, 1); PRECOMPUTED: g in [-0.4, -0.01] and beta in
 * [0.05, 0.95]; RAW modes: a and b in [-3, 3). */
void ts_inputs_random(ts_inputs *t, rh_rng *r);

/* A speculative-decode window's inputs: tok[t] for token t (random), and
 * the same values token-major in one block per array, as
 * rssm_batch_verify takes them. */
typedef struct ts_window {
    uint32_t tokens;
    ts_inputs tok[RSSM_MAX_DRAFT];
    uint8_t *q, *k, *v;
    float *gate, *beta;
    rssm_step_inputs in;
} ts_window;
void ts_window_make(ts_window *w, const rssm_model *m, uint32_t rows, uint32_t tokens, rh_rng *rng);
void ts_window_free(ts_window *w);

/* Random gate weights for RAW modes: A_log [layers][HV] in [-1, 0.5],
 * dt_bias [layers][HV] or [layers][HV][K] in [-1, 1]. malloc'd. */
void ts_random_gate_params(const rssm_model *m, rh_rng *r, float **A_log, float **dt_bias);

/* Calls check(name, arg) once per distinct kernel set among the backends
 * that start here (a name that runs the kernels of an earlier one is
 * checked there), failing for a required backend that does not start
 * (RSSM_REQUIRE_BACKENDS); returns how many it checked. */
int ts_each_backend(void (*check)(const char *name, void *arg), void *arg);

/* ------------------------------------------------------------ fixture */

typedef struct ts_env {
    rssm_model model;
    rssm_backend *backend;
    rssm_pool *pool;
    rssm_batch *batch;
} ts_env;

/* The backend the pool, batch and schedule tests run on: RSSM_TEST_BACKEND
 * (tests/CMakeLists.txt runs them once per backend built in), else "cpu". */
const char *ts_backend(void);
/* For main(), before the tests: 1 if ts_backend() starts on this machine;
 * 0 after printing why not, when the test should be skipped (exit code 77)
 * because RSSM_REQUIRE_BACKENDS does not name it. A required backend that
 * does not start fails the test. */
int ts_backend_usable(void);
#define TS_RUN_ON_BACKEND(tests) (ts_backend_usable() ? (ts_filter_tests(), TS_RUN(tests)) : 77)

/* Runs only the tests whose names match RSSM_TEST_FILTER (cmocka's
 * wildcards), where it is set: a second ctest entry of a file under other
 * settings that only some of its tests exercise. */
void ts_filter_tests(void);

/* A pool of `slots` slots and a batch of `max_rows` rows (0: no batch) on
 * the program's one backend of that name (ts_backend()), made at its first
 * use and destroyed by TS_RUN, as an engine keeps one backend: pipelines are
 * the backend's (vk/vk_shared.c), and creating them again for every case
 * was most of a Vulkan test's time with the validation layer on
 * (docs/testing.md). ts_env_open_own makes a backend for the environment
 * alone, for a case about a backend's own life or settings (its pipeline
 * cache, a variable it reads when it starts, a cap of multiprocessors).
 * ts_env_close destroys the backend only where the environment owns it. */
void ts_env_open(ts_env *e, const char *backend, const rssm_model *m, uint32_t slots,
                 rssm_flush_policy policy, uint32_t max_rows);
void ts_env_open_own(ts_env *e, const char *backend, const rssm_model *m, uint32_t slots,
                     rssm_flush_policy policy, uint32_t max_rows);
void ts_env_close(ts_env *e);
/* The program's one backend of that name, as ts_env_open uses it: never
 * destroyed by the caller. */
rssm_backend *ts_backend_shared(const char *name);
/* Destroys the program's backends: the group teardown of TS_RUN, while the
 * Vulkan loader and layers are whole (an exit handler of the program's ran
 * after the validation layer had destroyed its own objects, and crashed in
 * it). A program that opens environments must run its tests through TS_RUN
 * or TS_RUN_ON_BACKEND, or its backends are never destroyed. */
int ts_release_backends(void **state);
#define TS_RUN(tests) cmocka_run_group_tests(tests, NULL, ts_release_backends)

/* One rssm_batch_step; `out` (ts_out_elems(rows) in the io dtype) is
 * poisoned first and must come back fully written. */
void ts_step(ts_env *e, uint32_t rows, const uint32_t *slots, const uint64_t *seq_len_after,
             uint32_t snapshot_interval, const ts_inputs *in, void *out);

/* Allocates `n` slots, expecting 0, 1, ..., n-1, each with a random state. */
void ts_env_alloc_random(ts_env *e, uint32_t n, rh_rng *r);
/* Writes a random state into slots 0 .. n-1, already allocated, in the
 * order ts_env_alloc_random does (rssm_pool_write_state: their rings empty). */
void ts_env_write_random(ts_env *e, uint32_t n, rh_rng *r);

/* Snapshot of every allocated slot (write_pos and true state) of a pool,
 * to prove that a failed call changed nothing. */
typedef struct ts_pool_snapshot {
    uint32_t slots;
    uint8_t *allocated;
    uint32_t *write_pos;
    float *state; /* [slots][state_elems] */
    uint32_t free_count;
} ts_pool_snapshot;

void ts_snapshot_take(ts_pool_snapshot *s, rssm_pool *p);
/* Fails unless the pool still matches the snapshot bit for bit. */
void ts_snapshot_expect_equal(const ts_pool_snapshot *s, rssm_pool *p);
void ts_snapshot_free(ts_pool_snapshot *s);

#endif
