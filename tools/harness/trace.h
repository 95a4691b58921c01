/* A trace: everything needed to replay a decode run step by step and check
 * it against the float64 oracle, either generated from a seed or read from a
 * directory of .npy files (docs/trace-format.md).
 *
 * Arrays are fp32 in host memory whatever the model's io dtype; q, k and v
 * hold values that are exact in the io dtype (the loader and the generator
 * round them), so the library and the oracle see the same numbers. */
#ifndef RH_TRACE_H
#define RH_TRACE_H

#include "rssm.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rh_trace {
    rssm_model model;
    uint32_t steps;             /* T */
    uint32_t batch;             /* B: row capacity of a step */
    uint32_t slots;             /* S: sequences, ids 0..S-1 */
    uint32_t snapshot_interval; /* forced flush when seq_len_after % it == 0 */
    float *q, *k;               /* [T][layers][B][H][K] */
    float *v;                   /* [T][layers][B][HV][V] */
    float *gate;                /* [T][layers][B][HV] (GDN) or [..][HV][K] (KDA) */
    float *beta;                /* [T][layers][B][HV] */
    float *A_log;               /* [layers][HV]; RAW modes only, else NULL */
    float *dt_bias;             /* [layers][HV] or [layers][HV][K]; RAW only */
    int32_t *slot_ids;          /* [T][B]; -1 marks an idle row, after the active ones */
    int64_t *seq_len_after;     /* [T][B] */
    float *init_state;          /* [S][layers][HV][V][K] */
    float *expected;            /* NULL, or [T][layers][B][HV][V] */
    /* A speculative-decode trace (docs/trace-format.md, docs/design.md §9),
     * or NULL both: [E][B], engine step e's draft tokens for row b (0: an
     * ordinary decode step of one token) and how many of them it accepts.
     * Engine step e takes the next rh_trace_window_width(t, e) steps. */
    int32_t *drafts, *accepted;
    uint32_t windows;           /* E */
} rh_trace;

/* Steps engine step e of a speculative-decode trace takes: its most draft
 * tokens, or 1 for a step of ordinary decodes. */
uint32_t rh_trace_window_width(const rh_trace *t, uint32_t e);

/* Element counts of one step's block of each array (all layers, B rows). */
size_t rh_trace_qk_per_step(const rh_trace *t);
size_t rh_trace_v_per_step(const rh_trace *t);   /* also the output */
size_t rh_trace_gate_per_step(const rh_trace *t);
size_t rh_trace_beta_per_step(const rh_trace *t);
size_t rh_trace_state_per_slot(const rh_trace *t);
size_t rh_trace_dt_bias_count(const rh_trace *t);

/* Active rows of step `step` (the rows before the first -1). */
uint32_t rh_trace_rows(const rh_trace *t, uint32_t step);

/* Zeroes the inputs (and expected outputs) of every idle row: the format
 * ignores them, so a trace's content never depends on what they held. */
void rh_trace_zero_idle(rh_trace *t);

/* How a trace is generated. */
typedef struct rh_trace_spec {
    rssm_model model;
    uint32_t steps, batch;
    uint32_t snapshot_interval;
    uint64_t seed, stream;
    /* 0: every row decodes from step 0. n > 0: row r joins at step r*n, so
     * rows sit at different ring positions. */
    uint32_t admit_every;
    /* > 0: the last row joins at this step as a copy of row 0 (the caller
     * copies the slot); its sequence length continues row 0's. */
    uint32_t copy_step;
    /* v_scale != 0: row v_scale_row's v is multiplied by it from step
     * v_scale_from on (values a 16-bit ring cannot hold: docs/design.md §2). */
    float v_scale;
    uint32_t v_scale_row, v_scale_from;
    /* > 0 (with admit_every and copy_step 0): a speculative-decode trace
     * of rounds of a window of up to this many draft tokens and a step of
     * ordinary decodes, steps / (verify + 1) rounds. Row r of round w
     * drafts 1, 2, verify / 2 or verify tokens in turn and accepts each
     * count from 0 to its drafts in turn (tools/harness/trace.c), so the
     * rows of a window differ in T and k. */
    uint32_t verify;
} rh_trace_spec;

/* Random, never zero: q, k, v ~ U(-1, 1) (L2-normalised here when the model
 * does not normalise in the kernel, as an engine would have); precomputed
 * g = -exp(U(log 1e-3, 0)) i.e. log-uniform in [-1, -0.001], beta ~ U(0.05,
 * 0.95); raw a, b ~ N(0, 1), A_log ~ U(-4, 0), dt_bias ~ N(0, 0.5); initial
 * states ~ N(0, 0.1); prefill lengths 1..300. */
rssm_status rh_trace_generate(const rh_trace_spec *spec, rh_trace *out, rssm_error *err);

/* Reads DIR/model.json and DIR/<array>.npy (docs/trace-format.md), checking
 * every shape against the model. RSSM_ERR_FORMAT on any mismatch. */
rssm_status rh_trace_load(const char *dir, rh_trace *out, rssm_error *err);

/* Writes the trace to `dir` (which must exist) in the same format;
 * `expected` (NULL: none) is written as expected_out.npy. */
rssm_status rh_trace_save(const rh_trace *t, const char *dir, const float *expected,
                          rssm_error *err);

void rh_trace_free(rh_trace *t);

#endif
