/*
 * The float64 oracle every backend is checked against (docs/design.md §6).
 *
 * It runs the packed recurrence of docs/design.md §1 entirely in double:
 *   S̄ = S·diag(α),  d = β(v − S̄k),  S ← S̄ + d kᵀ,  o = S̄q + d(kᵀq)
 * on the same inputs the backends see (io dtype values converted exactly),
 * with the L2 norms, the q scale and the gates also computed in double. It
 * has no ring: ReplaySSM's factored readout is exact algebra, so the oracle
 * of a replay model is the packed recurrence, whatever the flush schedule.
 *
 * Internal API for the conformance harness and the tests; state is held as
 * double [layers][HV][V][K] per slot, zero after create.
 */
#ifndef RSSM_ORACLE_H
#define RSSM_ORACLE_H

#include "rssm.h"

typedef struct rssm_oracle rssm_oracle;

/* `slots` independent states of `model` (validated here), all zero. */
rssm_status rssm_oracle_create(const rssm_model *model, uint32_t slots, rssm_oracle **out,
                               rssm_error *err);
void rssm_oracle_destroy(rssm_oracle **o);

const rssm_model *rssm_oracle_model(const rssm_oracle *o);

/* fp32 [layers][HV][V][K], taken exactly (what a prefill hands over). */
rssm_status rssm_oracle_set_state(rssm_oracle *o, uint32_t slot, const float *state,
                                  rssm_error *err);
/* double [layers][HV][V][K]. */
rssm_status rssm_oracle_get_state(const rssm_oracle *o, uint32_t slot, double *state,
                                  rssm_error *err);
/* dst's state becomes src's (copy-on-write of a prefix); src != dst. */
rssm_status rssm_oracle_copy(rssm_oracle *o, uint32_t src, uint32_t dst, rssm_error *err);

/* Gate weights of one layer for the RAW modes, as rssm_batch_set_gate_params:
 * A_log [HV], dt_bias [HV] (GDN) or [HV][K] (KDA). Zero until set. */
rssm_status rssm_oracle_set_gate_params(rssm_oracle *o, uint32_t layer, const float *A_log,
                                        const float *dt_bias, rssm_error *err);

/* One step of `rows` rows, all layers: row r advances slots[r] (distinct).
 * `in` as for rssm_batch_step ([layers][rows][...], io dtype); `out` is
 * double [layers][rows][HV][V]. */
rssm_status rssm_oracle_step(rssm_oracle *o, uint32_t rows, const uint32_t *slots,
                             const rssm_step_inputs *in, double *out, rssm_error *err);

#endif /* RSSM_ORACLE_H */
