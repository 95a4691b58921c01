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
 * Memory is addressed through rssm_layer_io (rssm_layout.h): rssm's pool
 * or a caller's tensors; everything constant comes from rssm_kernel_params,
 * everything per step from the row.
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

/* Floats of scratch one concurrent caller of rssm_cpu_step_head needs; each
 * thread passes its own block, 64-byte aligned. */
size_t rssm_cpu_scratch_floats(const rssm_kernel_params *p);

/* Advances row `row_index` of a launch (decoded: `row`, whose inputs and
 * outputs are row row->io of the step arrays) of the layer `io` addresses,
 * value head `hv`. Preconditions, checked by the caller: row->slot is a
 * slot of io (not padding), row->write_pos <= p->ring_cap (0 without
 * replay). `overflow`, when not NULL, is the launch's [rows] flags
 * (rssm_layer_io.overflow; atomic here, as the heads of one row run on
 * several threads). Calls for distinct (row, hv) of one launch may run
 * concurrently: they write disjoint memory and read no ring entry another
 * call writes. */
typedef void rssm_cpu_step_fn(const rssm_kernel_params *p, const rssm_layer_io *io, const rssm_row_header *row,
                              uint32_t row_index, uint32_t hv, atomic_uint *overflow, float *scratch);

/* A speculative-decode window of `tokens` draft tokens (docs/design.md §9)
 * for value head `hv` of row `row_index`: token t as the step of
 * rssm_cpu_step_fn at write_pos row->write_pos + t (never a flush: the
 * caller keeps write_pos + tokens <= ring_cap), with its inputs and
 * outputs where io[t] says, and the same results bit for bit, but the
 * checkpoint read once for all of them: each token's checkpoint sums are
 * formed in one pass (its decays need only the gates, which are inputs),
 * and the ring part, which needs the entries of the tokens before it, runs
 * token by token. first_overflow[row_index] is lowered to the first token
 * whose ring entry its dtype cannot hold; the window stops there (the
 * tokens after it would read that entry). */
typedef void rssm_cpu_window_fn(const rssm_kernel_params *p, const rssm_layer_io *io, const rssm_row_header *row,
                                uint32_t tokens, uint32_t row_index, uint32_t hv, atomic_uint *first_overflow,
                                float *scratch);

/* The step with the best variant this CPU runs (see below). */
rssm_cpu_step_fn rssm_cpu_step_head;

/* The step is compiled for the build's target flags ("baseline") and, on
 * x86-64 builds whose flags lack AVX2, also for AVX2 + FMA + F16C ("avx2")
 * and for AVX-512F/VL on top of it ("avx512"), used when the CPU has them.
 * Wider ones are faster; all meet the same tolerances. */
typedef struct rssm_cpu_variant {
    const char *name;                /* "avx512", "avx2", "baseline" */
    rssm_cpu_step_fn *step;
    rssm_cpu_window_fn *window;
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
