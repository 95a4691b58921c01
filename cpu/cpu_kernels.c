/*
 * The decode step on host memory (see cpu_kernels.h for the contract and
 * docs/design.md §1 for the math).
 *
 * Shape of one call, for one (row, layer, value head), n = write_pos:
 *   1. load q, k, v; normalise, scale; compute the gate (g, alpha, beta);
 *   2. walk the ring newest to oldest once: decays gamma_j and Gamma, the
 *      weighted keys W_j = k_j * gamma_j * alpha (the same vectors serve the
 *      readout coefficients and the flush; GDN forms them only on a flush,
 *      its readout scales k_j . x by the scalar decay instead), and the 2n
 *      coefficients c_j(q) = W_j . q, c_j(k) = W_j . k;
 *   3. the ring part of S̄q and S̄k for every value row: one n-term sum per
 *      row, computed for all rows at once;
 *   4. one pass over the checkpoint rows, four at a time: both dot products
 *      C[v] . (aG*q) and C[v] . (aG*k) share each load of C[v]; on a flush d
 *      and o of the block, then the new rows C'[v] = C[v]*aG + sum_j d_j[v] W_j + d[v] k
 *      are written right away, while the block is still in L1, so C is read
 *      from memory once and written once;
 *   5. no flush: d and o for all rows, as vectors, and the append of
 *      (d, k, g) to the ring.
 * Packed decode is this with n = 0 and every step a flush: the same code,
 * hence bit-identical to replay with L = 1 within one build and variant.
 *
 * Why it is shaped so (measured on a 2-core Zen 4 VM, 64 KiB fp32 heads):
 * reading a head costs nearly as much as reading and writing it, so replay
 * only wins if its readout streams C at memory speed and the rest stays
 * small. Compute is not hidden behind the stream: work done between the
 * loads of C (the per-head setup, the ring terms, scalar tails) adds to the
 * step almost one for one. Hence FMA, q and k held in registers for the
 * whole pass (AVX-512), no per-row scalar work on readout-only steps, and
 * the flush's rank-(n+1) update register-blocked so it runs near the FMA
 * peak, which is what bounds it.
 *
 * Elementwise loops over K or V are plain loops over contiguous
 * restrict-qualified arrays, which the compiler vectorises. Reductions keep
 * independent partial sums added in a fixed order, written with explicit
 * vectors (see "sums and blocks"). Results are deterministic for a given
 * build and variant (the thread count does not change them), but variants
 * differ in the last bits: FMA contraction and the shape of the sums depend
 * on the vector width. Every variant meets the oracle tolerances.
 *
 * Where it lives: cpu_kernel_shared.h (the scalar helpers and settings every
 * variant shares), cpu_kernel_body.h (the code above, which depends on the
 * vector width), one cpu_kernels_<isa>.c per instruction set that compiles
 * the body, and this file: the exported helpers and the choice of variant.
 */
#include "cpu_kernel_shared.h"

float rssm_cpu_f16_to_f32(uint16_t h) { return f16_to_f32(h); }
uint16_t rssm_cpu_f32_to_f16(float f) { return f32_to_f16(f); }
uint16_t rssm_cpu_f32_to_bf16(float f) { return f32_to_bf16(f); }
float rssm_cpu_expf(float x) { return fast_expf(x); }
size_t rssm_cpu_scratch_floats(const rssm_kernel_params *p) { return scratch_layout(p, NULL, NULL); }

/* Best first; the baseline last, and always runnable. */
static const rssm_cpu_variant variants[] = {
#if RSSM_CPU_AVX2_VARIANT
    {"avx512", rssm_cpu_step_head_avx512, rssm_cpu_window_head_avx512, rssm_cpu_variant_isa_avx512},
    {"avx2", rssm_cpu_step_head_avx2, rssm_cpu_window_head_avx2, rssm_cpu_variant_isa_avx2},
#endif
    {"baseline", rssm_cpu_step_head_base, rssm_cpu_window_head_base, rssm_cpu_variant_isa_base},
};

static int cpu_runs(const rssm_cpu_variant *v)
{
#if RSSM_CPU_AVX2_VARIANT
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                     __builtin_cpu_supports("f16c");
    if (v->step == rssm_cpu_step_head_avx512)
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    if (v->step == rssm_cpu_step_head_avx2)
        return avx2;
#endif
    (void)v;
    return 1;
}

const rssm_cpu_variant *rssm_cpu_variant_pick(const char *name)
{
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        const rssm_cpu_variant *v = &variants[i];
        if ((!name || strcmp(name, v->name) == 0) && cpu_runs(v))
            return v;
    }
    return NULL;
}

const char *rssm_cpu_variant_names(void)
{
#if RSSM_CPU_AVX2_VARIANT
    return "avx512, avx2, baseline";
#else
    return "baseline";
#endif
}

void rssm_cpu_step_head(const rssm_kernel_params *p, const rssm_layer_io *io, const rssm_row_header *row,
                        uint32_t row_index, uint32_t hv, atomic_uint *overflow, float *scratch)
{
    rssm_cpu_variant_pick(NULL)->step(p, io, row, row_index, hv, overflow, scratch);
}
