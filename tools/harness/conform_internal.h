/* What conform.c and conform_verify.c share, not part of the harness's
 * interface (conform.h): the engine both drive (conform_engine.c: a step's
 * input buffers from a trace, a pool with a batch of a case's model on one
 * backend, the outputs into a trace's shapes), and the speculative-decode
 * run that conform.c calls (conform_verify.c), which calls nothing of
 * conform.c. */
#ifndef RH_CONFORM_INTERNAL_H
#define RH_CONFORM_INTERNAL_H

#include "conform.h"

/* ---- conform_engine.c */

/* One step's inputs for `rows` rows, in the layout and dtypes the library
 * takes: [layers][rows][...], q/k/v in the io dtype. */
typedef struct step_buf {
    void *q, *k, *v;
    float *gate, *beta;
    uint32_t *slots;
    uint64_t *lens;
    rssm_step_inputs in;
} step_buf;

/* 0 when out of memory (nothing left allocated). */
int step_buf_alloc(step_buf *s, const rh_trace *t);
void step_buf_free(step_buf *s);
/* Fills the buffers for step `step`; returns the active row count. The
 * trace's slot ids are mapped through slot_of (NULL: identity). */
uint32_t step_buf_fill(step_buf *s, const rh_trace *t, uint32_t step, const uint32_t *slot_of);

/* A pool and a batch of the case's model on one backend, with the trace's
 * slots allocated (and, with write_init, their initial states written):
 * trace slot i is pool slot slot_of[i]. */
typedef struct engine {
    rssm_pool *pool;
    rssm_batch *batch;
    uint32_t *slot_of;
} engine;

rssm_status engine_open(engine *e, rssm_backend *b, const rh_trace *t, const rssm_model *m,
                        rssm_flush_policy policy, int write_init, rssm_error *err);
void engine_close(engine *e);

/* One step's outputs, [layers][rows][HV][V], into step `step` of a
 * trace's [T][layers][B][HV][V]: the oracle's doubles into ref_out at row
 * `at` (one row) or from row 0 (at = UINT32_MAX); a backend's, in dtype
 * io, as fp32 into outs, the step's other rows zero. */
void rh_put_ref(rh_prepared *p, uint32_t step, const double *out, uint32_t rows, uint32_t at);
void rh_put_out(float *outs, const rh_trace *t, rssm_dtype io, uint32_t step, const void *out, uint32_t rows);

/* 1 if none of n values of dtype dt is NaN or infinite; else 0 and the
 * first such index in *first_bad. */
int is_poison_free(const void *out, rssm_dtype dt, size_t n, size_t *first_bad);

/* ---- conform_verify.c */

/* A speculative-decode trace (rh_trace.drafts): the
 * oracle's outputs and final states for its engine steps, and its run on
 * a backend, in the shapes of any trace's (outputs [T][layers][B][HV][V],
 * zero for a row past its window's draft tokens). */
rssm_status rh_verify_oracle(rh_prepared *p, rssm_error *err);
rssm_status rh_verify_run(const rh_prepared *p, const rssm_model *m, rssm_backend *b, float *outs, float *states,
                          rh_result *cov, rssm_error *err);

#endif
