/*
 * The decode step on host memory: the CPU reference of every kernel, and the
 * kernel the CPU backend runs.
 *
 * One call advances one (batch row, layer, value head): it reads the row's
 * checkpoint and committed ring entries from the pool, computes the output,
 * and either appends (d, k, g) to the ring or writes the new checkpoint
 * (a flush). Packed decode (replay off) is the same code with an empty ring
 * and every step a flush, so replay with L = 1 is bit-identical to packed
 * (within one build and variant).
 *
 * All memory is in the canonical layouts of rssm_layout.h; everything constant
 * comes from rssm_kernel_params, everything per step from the row header.
 * Results are deterministic for a build and variant, whatever the thread
 * count; variants differ in the last bits (FMA where the target has it, sums
 * shaped by the vector width), each within the oracle tolerances.
 */
#ifndef RSSM_CPU_KERNELS_H
#define RSSM_CPU_KERNELS_H

#include "rssm_layout.h"

#include <stdatomic.h>

#include <stddef.h>
#include <stdint.h>

/* The batch's device-side step arrays, all layers, in the layout of
 * rssm_layout.h ([layers][max_rows][...]). A_log and dt_bias are read only
 * in the RAW gate modes. */
typedef struct rssm_cpu_step_io {
    const void *q;         /* [layers][max_rows][H][K] io dtype */
    const void *k;         /* [layers][max_rows][H][K] io dtype */
    const void *v;         /* [layers][max_rows][HV][V] io dtype */
    const float *gate;     /* [layers][max_rows][HV] or [..][HV][K] */
    const float *beta;     /* [layers][max_rows][HV] */
    const float *A_log;    /* [layers][HV] */
    const float *dt_bias;  /* [layers][HV] or [layers][HV][K] */
    void *out;             /* [layers][max_rows][HV][V] io dtype */
    atomic_uint *overflow; /* [rows of the header], or NULL: set to 1 for a row
                              whose ring append overflowed (docs/design.md §2) */
} rssm_cpu_step_io;

/* Floats of scratch one concurrent caller of rssm_cpu_step_head needs; each
 * thread passes its own block, 64-byte aligned. */
size_t rssm_cpu_scratch_floats(const rssm_kernel_params *p);

/* Advances header row `row_index` (header `row`, whose inputs and outputs are
 * row row->io of the step arrays) of layer `layer`, value head
 * `hv`. Preconditions, checked by the caller: row->slot is inside the pool,
 * row->write_pos <= p->ring_cap (0 without replay). Calls for distinct
 * (row, hv) of one step may run concurrently: they write disjoint memory and
 * read no ring entry another call writes. */
typedef void rssm_cpu_step_fn(const rssm_kernel_params *p, uint8_t *pool_base,
                              const rssm_cpu_step_io *io, const rssm_row_header *row,
                              uint32_t row_index, uint32_t layer, uint32_t hv, float *scratch);

/* The step with the best variant this CPU runs (see below). */
rssm_cpu_step_fn rssm_cpu_step_head;

/* The step is compiled for the build's target flags ("baseline") and, on
 * x86-64 builds whose flags lack AVX2, also for AVX2 + FMA + F16C ("avx2")
 * and for AVX-512F/VL on top of it ("avx512"), used when the CPU has them.
 * Wider ones are faster; all meet the same tolerances. */
typedef struct rssm_cpu_variant {
    const char *name;                /* "avx512", "avx2", "baseline" */
    rssm_cpu_step_fn *step;
    const char *(*isa)(void);        /* what it was compiled for: "sse2", "avx512+f16c", ... */
} rssm_cpu_variant;

/* The variant called `name`, or the best one when name is NULL; NULL when
 * there is no such variant or this CPU cannot run it. */
const rssm_cpu_variant *rssm_cpu_variant_pick(const char *name);

/* The names rssm_cpu_variant_pick knows, for messages: "avx512, avx2, baseline". */
const char *rssm_cpu_variant_names(void);

/* Bit-exact, branch-free (hence vectorisable) versions of the conversions of
 * dtype.h, exported so the tests can check them against dtype.h on every
 * input. */
float rssm_cpu_f16_to_f32(uint16_t h);
uint16_t rssm_cpu_f32_to_f16(float f);
uint16_t rssm_cpu_f32_to_bf16(float f);

/* exp(x) in fp32, about 1 ulp, vectorisable; every decay of the CPU kernels
 * goes through it. exp(0) is exactly 1; NaN propagates; x below -87 gives
 * exp(-87). */
float rssm_cpu_expf(float x);

#endif /* RSSM_CPU_KERNELS_H */
