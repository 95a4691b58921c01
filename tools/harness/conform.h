/* The conformance cases of docs/design.md §6 and the runner that checks one case on
 * one backend against the float64 oracle. Shared by `rssm conform` and
 * tests/test_conform.c, so the CLI and CI check exactly the same things.
 *
 * A case is a model, a seeded trace and at most one pool event (copy,
 * materialise, or a move to another backend and back). Preparing a case runs
 * the oracle once; running it on a backend replays the trace there, poisons
 * every output buffer with NaN first, and compares outputs over all steps
 * and the final true states (rssm_pool_read_state) by relative L2 error. */
#ifndef RH_CONFORM_H
#define RH_CONFORM_H

#include "trace.h"

#include "rssm.h"

#include <stddef.h>
#include <stdint.h>

typedef enum rh_event {
    RH_EVENT_NONE = 0,
    RH_EVENT_COPY,        /* rssm_pool_copy(row 0 -> last row) mid-ring; both continue */
    RH_EVENT_MATERIALISE, /* rssm_pool_materialise on the even slots mid-ring */
    RH_EVENT_MIGRATE,     /* export every slot, import into a pool of another
                             backend, continue there, and later move back */
} rh_event;

typedef enum rh_check {
    RH_CHECK_ORACLE = 0,  /* relative L2 error vs the oracle <= tol */
    RH_CHECK_L1_BITWISE,  /* as ORACLE, and replay with L=1 equals packed bit for bit */
    RH_CHECK_NO_GROWTH,   /* as ORACLE, and the error of the last eighth of the steps is
                             at most 4x that of the first eighth (a long decode) */
} rh_check;

typedef struct rh_case {
    char name[64];          /* "gdn/replay/fp16-ring": filterable by substring */
    rssm_model model;
    uint32_t batch, steps;
    uint32_t snapshot_interval;
    uint32_t admit_every;   /* rows join at different steps (see rh_trace_spec) */
    rssm_flush_policy policy;
    rh_event event;
    uint32_t event_step;    /* before this step */
    uint32_t event_end;     /* MIGRATE: moved back before this step */
    rh_check check;
    /* > 0: a verify case (docs/design.md §9): the steps are rounds of a
     * window of up to this many draft tokens and one ordinary step
     * (tools/harness/conform_verify.c). */
    uint32_t verify;
    /* != 0: row v_scale_row's v times this from step v_scale_from on. */
    float v_scale;
    uint32_t v_scale_row, v_scale_from;
    double tol;
    /* What the run must be seen to exercise (RH_EXPECT_*), so a case cannot
     * pass without testing what its name says. */
    unsigned expect;
} rh_case;

#define RH_EXPECT_MIXED 1u         /* one step with rows at different ring positions */
#define RH_EXPECT_FORCED 2u        /* a flush forced by the snapshot interval mid-ring */
#define RH_EXPECT_MIDRING_EVENT 4u /* the event finds slot 0's ring non-empty */
#define RH_EXPECT_FOLD 8u          /* a verify window that had to fold its ring first */
#define RH_EXPECT_BOUNDARY 16u     /* a snapshot boundary among a window's accepted tokens */

typedef struct rh_case_options {
    uint32_t layers;        /* 0: 2 */
    uint32_t batch;         /* 0: 4 */
    uint32_t steps;         /* 0: per case, about 3.5 ring cycles */
    /* > 1: divide the presets' head counts by this (K and V stay 128), for a
     * quick run on a slow device (tests on lavapipe use 4). */
    uint32_t head_div;
} rh_case_options;

/* The default case list (GDN and KDA presets with `layers` layers). The
 * array is malloc'ed; free() it. */
rssm_status rh_cases_default(const rh_case_options *opt, rh_case **cases, size_t *count,
                             rssm_error *err);

/* docs/design.md §6 tolerance for a model: 1e-5 with fp32 state, ring and io; 2e-3
 * with an fp16 ring; 1e-2 with bf16 anywhere. */
double rh_tolerance(const rssm_model *m);

/* The tolerance a backend is held to for a model: rh_tolerance, loosened
 * to 2e-3 (docs/design.md §6, "fp16 matrix units") or 1e-2 when the backend says
 * its flush rounds matrix operands to fp16 or bf16
 * (rssm_backend_matrix_dtype: the Vulkan coopmat variants). The L = 1
 * bit-identity with packed is still required of them. */
double rh_backend_tolerance(const rssm_backend *b, const rssm_model *m, double tol);

typedef enum rh_verdict { RH_PASS = 0, RH_FAIL, RH_SKIP } rh_verdict;
const char *rh_verdict_name(rh_verdict v);

typedef struct rh_result {
    rh_verdict verdict;
    double out_err;     /* relative L2 over every output of every step; NAN if not run */
    double state_err;   /* relative L2 over the final states of every slot */
    double tol;
    double seconds;     /* wall time of the backend run */
    /* What the run exercised, from the scheduler's plans. */
    uint32_t mixed_steps;   /* steps whose rows sat at different ring positions */
    uint32_t flushes;       /* row-steps that flushed */
    uint32_t forced;        /* of those, forced before the ring was full */
    uint32_t event_pos;     /* slot 0's write_pos when the event ran */
    uint32_t folds;         /* verify windows that folded their ring first */
    uint32_t boundaries;    /* snapshot boundaries among accepted draft tokens */
    char note[320];     /* the reason for FAIL / SKIP, or extra facts */
} rh_result;

/* A case with its trace and the oracle's answers, computed once and checked
 * against any number of backends. */
typedef struct rh_prepared {
    rh_case c;
    rh_trace trace;
    double *ref_out;    /* [T][layers][B][HV][V]; idle rows are 0 */
    double *ref_state;  /* [S][layers][HV][V][K] after the last step */
} rh_prepared;

/* Generates the trace of `c` from `seed` and runs the oracle. */
rssm_status rh_prepare_case(const rh_case *c, uint64_t seed, rh_prepared *out, rssm_error *err);
/* Takes ownership of a loaded trace (it is moved into out) and runs the
 * oracle; the case is named `name`, with the model's tolerance. */
rssm_status rh_prepare_trace(rh_trace *trace, const char *name, rh_prepared *out, rssm_error *err);
void rh_prepared_free(rh_prepared *p);

/* Runs the prepared case on `b`. `other` is the backend a MIGRATE case
 * moves its slots to and back from (NULL: that case is skipped). Never
 * returns PASS for a case it could not run: a model the backend does not
 * support, or a missing `other`, is SKIP with the reason. `outputs`, when
 * not NULL, receives the backend's outputs [T][layers][B][HV][V] as fp32. */
rh_verdict rh_run_case(const rh_prepared *p, rssm_backend *b, rssm_backend *other, rh_result *r,
                       float *outputs);

/* 1 if `name` contains one of the n filters (every name when n is 0): how
 * `rssm conform --case` and the conformance tests select cases. */
int rh_case_matches(const char *name, char *const *filters, size_t n);

/* 1 if a and b run the same kernels on the same device (one of them is a
 * variant name that resolves to the other there, rssm_backend_kernels):
 * the conformance tools check such a pair once. */
int rh_same_kernels(const rssm_backend *a, const rssm_backend *b);

/* 1 if RSSM_REQUIRE_BACKENDS (a comma-separated list of backend names, as
 * tools/test sets it for the backends a project machine provides) names
 * `name`: a test must then fail, not skip, when that backend cannot start. */
int rh_backend_required(const char *name);

/* Relative L2 error ||x - ref|| / ||ref|| over n elements; +inf if x holds
 * a NaN or infinity (so it never passes a tolerance). */
double rh_rel_l2_f(const float *x, const double *ref, size_t n);

#endif
