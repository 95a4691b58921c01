/* The conformance case list and the tolerances cases are held to.
 *
 * Every case is named <gate>/<replay|packed>/<what>, for GDN (qwen3.5-gdn
 * heads) and KDA (kimi-linear-kda heads), and covers one item of docs/design.md §6:
 *   fp32-L16, fp16-ring, bf16-ring, bf16-state   dtypes, 3.5 ring cycles
 *   fp16-ring-forced, bf16-state-fp16-ring       16-bit rings, rows at every position, forced flushes
 *   L1, L2, L8 (and L16 above)                    ring lengths
 *   forced-flush                                  snapshot interval 7 < L: flushes mid-ring
 *   staggered, admitted-apart                     rows at different ring positions
 *   raw-gate, raw-safe-gate                       gates computed in the kernel
 *   no-qk-norm, bf16-io                           q/k norm off; bf16 q, k, v, out (fp16 ring)
 *   fp16-io (replay and packed)                   fp16 q, k, v, out (fp16 ring)
 *   copy-on-write, materialise, export-import     pool operations mid-ring
 *   L1-equals-packed(-bf16, -fp16)                L = 1 replay == packed, bit for bit (-fp16: io)
 *   long-4096                                     4096 steps, error does not grow
 *   fp16-ring-overflow                            ring entries beyond fp16's range
 *   verify-T8, verify-T7-L8, verify-T4-fp16-ring  speculative-decode windows (docs/design.md §9),
 *   verify-T4-fp16-io                             the last with fp16 io
 *   verify-T3-B2                                  windows of up to 3 on 2 rows
 *   shape-...                                     odd head sizes (K = 36, V = 20; K = 64, V = 48),
 *                                                 L = 17 / 18, V = 256, 48 rows
 *   packed/...                                    the packed decode itself
 * Cases with a narrower dtype than fp32 say so in their name; all others use
 * fp32 state, ring and io, so the tight 1e-5 tolerance applies. */
#include "conform.h"

#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double rh_tolerance(const rssm_model *m)
{
    int ring = m->replay && m->ring_len > 1;
    if (m->state_dtype == RSSM_DTYPE_BF16 || m->io_dtype == RSSM_DTYPE_BF16 ||
        (ring && m->ring_dtype == RSSM_DTYPE_BF16))
        return 1e-2;
    /* fp16 keeps 11 significant bits to bf16's 8 (IEEE 754 binary16;
     * docs/design.md §1): a value rounded once to it is off by at most
     * 2^-11 = 4.9e-4 of itself, where bf16's 2^-8 = 3.9e-3 is what 1e-2
     * allows for. fp16 io rounds each output once and nothing else, since
     * the inputs are rounded to the io dtype before the oracle sees them
     * (trace.c): its error is at most 4.9e-4 plus the fp32 path's, a
     * quarter of the 2e-3 that docs/design.md §6 gives an fp16 ring, whose
     * entries' rounding also carries into the later steps that read them. */
    if ((ring && m->ring_dtype == RSSM_DTYPE_F16) || m->io_dtype == RSSM_DTYPE_F16)
        return 2e-3;
    return 1e-5;
}

double rh_backend_tolerance(const rssm_backend *b, const rssm_model *m, double tol)
{
    rssm_dtype matrix = RSSM_DTYPE_F32;
    if (rssm_backend_matrix_dtype(b, m, &matrix, NULL) != RSSM_OK)
        return tol;
    const double unit = matrix == RSSM_DTYPE_BF16 ? 1e-2 : matrix == RSSM_DTYPE_F16 ? 2e-3 : 0.0;
    return tol > unit ? tol : unit;
}

#define MAX_CASES 96 /* with room over those rh_cases_default adds */

/* The template every case starts from: the preset's shape with few layers,
 * fp32 everywhere (so the tightest tolerance applies unless a case is about
 * a narrower dtype), 3.5 ring cycles. */
static rh_case base_case(const char *preset, int replay, uint32_t ring_len, const rh_case_options *o)
{
    rh_case c;
    memset(&c, 0, sizeof c);
    rssm_model_preset(&c.model, preset, NULL);
    c.model.layers = o->layers ? o->layers : 2;
    if (o->head_div > 1) {
        c.model.num_qk_heads = c.model.num_qk_heads / o->head_div ? c.model.num_qk_heads / o->head_div : 1;
        c.model.num_v_heads = c.model.num_v_heads / o->head_div ? c.model.num_v_heads / o->head_div : 1;
    }
    c.model.replay = replay;
    c.model.ring_len = ring_len;
    c.model.ring_dtype = RSSM_DTYPE_F32;
    c.batch = o->batch ? o->batch : 4;
    c.policy = RSSM_FLUSH_ALIGNED;
    return c;
}

/* Heads and head sizes of a shape case (kept under --quick, which only
 * thins the presets' heads). */
static void set_shape(rh_case *c, uint32_t H, uint32_t HV, uint32_t K, uint32_t V)
{
    c->model.num_qk_heads = H;
    c->model.num_v_heads = HV;
    c->model.head_k = K;
    c->model.head_v = V;
}

/* Step count, event positions and tolerance, once the model is final. */
static void finish_case(rh_case *c, const rh_case_options *o)
{
    uint32_t L = c->model.replay ? c->model.ring_len : 1;
    uint32_t steps = c->model.replay ? 3 * L + L / 2 : 16;
    if (steps < 12)
        steps = 12;
    c->steps = o->steps ? o->steps : steps;
    if (c->verify) /* rounds of a window and a step: at least four */
        c->steps = o->steps > 4 * (c->verify + 1) ? o->steps : 8 * (c->verify + 1);
    if (c->event != RH_EVENT_NONE) {
        /* Mid-ring of the second cycle, then (MIGRATE) back mid-ring of the third. */
        c->event_step = L + L / 2 - 1;
        c->event_end = 2 * L + 5;
        if (c->event_step < 1)
            c->event_step = 1;
        if (c->event_step >= c->steps)
            c->event_step = c->steps / 2;
        if (c->event_end <= c->event_step || c->event_end >= c->steps)
            c->event_end = c->event_step + (c->steps - c->event_step) / 2;
    }
    c->tol = rh_tolerance(&c->model);
}

rssm_status rh_cases_default(const rh_case_options *opt, rh_case **cases, size_t *count, rssm_error *err)
{
    rh_case_options o = opt ? *opt : (rh_case_options){0};
    rh_case *v = calloc(MAX_CASES, sizeof *v);
    if (!v)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cases: out of host memory");
    size_t n = 0;
    static const struct { const char *gate, *preset; } gates[] = {
        {"gdn", "qwen3.5-gdn"}, {"kda", "kimi-linear-kda"}};
#define ADD(suffix, mode) (snprintf(c.name, sizeof c.name, "%s/%s/%s", gates[g].gate, mode, suffix), \
                           finish_case(&c, &o), v[n++] = c)
    for (size_t g = 0; g < 2; g++) {
        const char *p = gates[g].preset;
        rh_case c;
        /* Ring and state dtypes at L = 16. */
        c = base_case(p, 1, 16, &o);
        ADD("fp32-L16", "replay");
        c = base_case(p, 1, 16, &o);
        c.model.ring_dtype = RSSM_DTYPE_F16;
        ADD("fp16-ring", "replay");
        c = base_case(p, 1, 16, &o);
        c.model.ring_dtype = RSSM_DTYPE_BF16;
        ADD("bf16-ring", "replay");
        c = base_case(p, 1, 16, &o);
        c.model.state_dtype = RSSM_DTYPE_BF16;
        c.model.ring_dtype = RSSM_DTYPE_BF16;
        ADD("bf16-state", "replay");
        /* 16-bit rings at every ring position in one step, flushes forced
         * mid-ring: the tensor-core readout and flush of the CUDA bulk
         * kernel (docs/design.md §8) at every entry count, with the ring
         * dtype `rssm bench` and the engines' harness time. */
        c = base_case(p, 1, 16, &o);
        c.model.ring_dtype = RSSM_DTYPE_F16;
        c.policy = RSSM_FLUSH_STAGGERED;
        c.snapshot_interval = 7;
        c.expect = RH_EXPECT_FORCED | RH_EXPECT_MIXED;
        ADD("fp16-ring-forced", "replay");
        c = base_case(p, 1, 16, &o);
        c.model.state_dtype = RSSM_DTYPE_BF16;
        c.model.ring_dtype = RSSM_DTYPE_F16;
        c.policy = RSSM_FLUSH_STAGGERED;
        c.snapshot_interval = 7;
        c.expect = RH_EXPECT_FORCED | RH_EXPECT_MIXED;
        ADD("bf16-state-fp16-ring", "replay");
        /* Ring lengths. */
        static const uint32_t lens[] = {1, 2, 8};
        for (size_t i = 0; i < 3; i++) {
            char s[16];
            snprintf(s, sizeof s, "L%u", lens[i]);
            c = base_case(p, 1, lens[i], &o);
            ADD(s, "replay");
        }
        /* Rows at different ring positions. */
        c = base_case(p, 1, 16, &o);
        c.snapshot_interval = 7; /* forced flushes mid-ring, on different steps per row */
        c.expect = RH_EXPECT_FORCED | RH_EXPECT_MIXED;
        ADD("forced-flush", "replay");
        c = base_case(p, 1, 16, &o);
        c.policy = RSSM_FLUSH_STAGGERED;
        c.expect = RH_EXPECT_MIXED;
        ADD("staggered", "replay");
        c = base_case(p, 1, 16, &o);
        c.admit_every = 5;
        c.expect = RH_EXPECT_MIXED;
        ADD("admitted-apart", "replay");
        /* Gate modes, norm, io. */
        c = base_case(p, 1, 16, &o);
        c.model.gate_mode = RSSM_GATE_RAW;
        ADD("raw-gate", "replay");
        c = base_case(p, 1, 16, &o);
        c.model.gate_mode = RSSM_GATE_RAW_SAFE;
        ADD("raw-safe-gate", "replay");
        c = base_case(p, 1, 16, &o);
        c.model.qk_l2norm = 0;
        ADD("no-qk-norm", "replay");
        /* bf16 io with the default fp16 ring: the configuration `rssm bench`
         * times, so a benchmark after `rssm conform` finds its pipelines
         * compiled (on a software driver that is most of its time). */
        c = base_case(p, 1, 16, &o);
        c.model.io_dtype = RSSM_DTYPE_BF16;
        c.model.ring_dtype = RSSM_DTYPE_F16;
        ADD("bf16-io", "replay");
        /* fp16 io (the activations vLLM tests its GDN kernels with), the
         * same model in the other 16-bit format: on a CPU device the io
         * dtype is a push constant of the `_rt` modules (vk/README.md), so
         * it runs the pipelines bf16-io compiled. */
        c.model.io_dtype = RSSM_DTYPE_F16;
        ADD("fp16-io", "replay");
        /* Pool operations mid-ring. */
        c = base_case(p, 1, 16, &o);
        c.event = RH_EVENT_COPY;
        c.expect = RH_EXPECT_MIDRING_EVENT;
        ADD("copy-on-write", "replay");
        c = base_case(p, 1, 16, &o);
        c.event = RH_EVENT_MATERIALISE;
        c.snapshot_interval = 11;
        c.expect = RH_EXPECT_MIDRING_EVENT | RH_EXPECT_MIXED;
        ADD("materialise", "replay");
        c = base_case(p, 1, 16, &o);
        c.event = RH_EVENT_MIGRATE;
        c.expect = RH_EXPECT_MIDRING_EVENT;
        ADD("export-import", "replay");
        /* L = 1 replay against packed, bit for bit. */
        c = base_case(p, 1, 1, &o);
        c.check = RH_CHECK_L1_BITWISE;
        ADD("L1-equals-packed", "replay");
        c = base_case(p, 1, 1, &o);
        c.model.state_dtype = RSSM_DTYPE_BF16;
        c.model.io_dtype = RSSM_DTYPE_BF16;
        c.check = RH_CHECK_L1_BITWISE;
        ADD("L1-equals-packed-bf16", "replay");
        /* fp16 io (a state has no fp16): both round the same fp32 outputs */
        c = base_case(p, 1, 1, &o);
        c.model.io_dtype = RSSM_DTYPE_F16;
        c.check = RH_CHECK_L1_BITWISE;
        ADD("L1-equals-packed-fp16", "replay");
        /* A long decode on a small shape (4096 steps: 256 ring cycles), whose
         * error must not grow. fp16 ring: the default, and the one that rounds. */
        c = base_case(p, 1, 16, &o);
        c.model.layers = 1;
        c.model.num_qk_heads = 2;
        c.model.num_v_heads = g ? 2 : 4;
        c.model.head_k = c.model.head_v = 32;
        c.model.ring_dtype = RSSM_DTYPE_F16;
        c.batch = 2;
        c.snapshot_interval = 100;
        c.check = RH_CHECK_NO_GROWTH;
        ADD("long-4096", "replay");
        if (!o.steps)
            v[n - 1].steps = 4096;
        /* A value row whose ring entries an fp16 ring cannot hold (|d| far
         * above 65504) from the second cycle on: those steps must be exact
         * (the row re-runs as a flush) while the other rows append as usual. */
        c = base_case(p, 1, 16, &o);
        c.model.ring_dtype = RSSM_DTYPE_F16;
        c.v_scale = 4e5f;
        c.v_scale_row = 1;
        c.v_scale_from = 20;
        ADD("fp16-ring-overflow", "replay");
        /* Speculative-decode verify (docs/design.md §9): windows of up to 8
         * draft tokens with snapshot boundaries among the accepted ones (and
         * forced flushes in the steps between); windows of up to L - 1 on an
         * L = 8 ring, which they often have to fold first; an fp16 ring. */
        c = base_case(p, 1, 16, &o);
        c.verify = 8;
        c.snapshot_interval = 7;
        c.expect = RH_EXPECT_BOUNDARY;
        ADD("verify-T8", "replay");
        c = base_case(p, 1, 8, &o);
        c.verify = 7;
        c.expect = RH_EXPECT_FOLD;
        ADD("verify-T7-L8", "replay");
        c = base_case(p, 1, 16, &o);
        c.verify = 4;
        c.model.ring_dtype = RSSM_DTYPE_F16;
        ADD("verify-T4-fp16-ring", "replay");
        c.model.io_dtype = RSSM_DTYPE_F16; /* the windows' own loads and stores */
        ADD("verify-T4-fp16-io", "replay");
        /* Windows of up to 3 tokens on 2 rows: what the cuda backend runs
         * in one launch (rssm_cuda_window_fused), with an fp16 ring. */
        c = base_case(p, 1, 16, &o);
        c.batch = o.batch ? o.batch : 2;
        c.verify = 3;
        c.model.ring_dtype = RSSM_DTYPE_F16;
        ADD("verify-T3-B2", "replay");
        /* Shapes at the edges of the device kernels' tilings: partial
         * channel groups and row tiles (K = 36, V = 20, H != HV), a narrow
         * KDA head, the longest ring a stream kernel takes (L = 17) and one
         * past it, a wide value head, and enough rows that every persistent
         * CTA walks several items. Small, so they cost little anywhere. */
        c = base_case(p, 1, 8, &o);
        set_shape(&c, 3, 6, 36, 20);
        c.model.ring_dtype = RSSM_DTYPE_F16;
        c.model.gate_mode = RSSM_GATE_RAW;
        ADD("shape-odd-fp16-ring", "replay");
        c.model.state_dtype = RSSM_DTYPE_BF16;
        c.model.ring_dtype = RSSM_DTYPE_BF16;
        ADD("shape-odd-bf16-state", "replay");
        c = base_case(p, 1, 16, &o);
        set_shape(&c, 2, 2, 64, 48);
        c.model.state_dtype = RSSM_DTYPE_BF16;
        c.model.ring_dtype = RSSM_DTYPE_F16;
        c.model.io_dtype = RSSM_DTYPE_BF16;
        c.model.gate_mode = RSSM_GATE_RAW_SAFE;
        ADD("shape-K64-V48-bf16", "replay");
        c = base_case(p, 1, g ? 17 : 18, &o);
        set_shape(&c, g ? 2 : 1, 4, 128, 128);
        c.model.ring_dtype = RSSM_DTYPE_BF16;
        c.model.gate_mode = RSSM_GATE_RAW;
        ADD(g ? "shape-L17-bf16-ring" : "shape-L18-bf16-ring", "replay");
        c = base_case(p, 1, 16, &o);
        set_shape(&c, 1, 2, 128, 256);
        ADD("shape-V256", "replay");
        c = base_case(p, 1, 16, &o);
        set_shape(&c, g ? 32 : 16, 32, 128, 128);
        c.model.layers = 1;
        c.model.ring_dtype = RSSM_DTYPE_F16;
        c.batch = 48;
        ADD("shape-48-rows-fp16-ring", "replay");
        if (!o.steps)
            v[n - 1].steps = 34;
        c = base_case(p, 0, 16, &o);
        set_shape(&c, 3, 6, 36, 20);
        c.model.state_dtype = RSSM_DTYPE_BF16;
        ADD("shape-odd-bf16-state", "packed");
        /* The packed decode itself. */
        c = base_case(p, 0, 16, &o);
        ADD("fp32", "packed");
        c = base_case(p, 0, 16, &o);
        c.model.state_dtype = RSSM_DTYPE_BF16;
        ADD("bf16-state", "packed");
        c = base_case(p, 0, 16, &o);
        c.model.gate_mode = RSSM_GATE_RAW;
        ADD("raw-gate", "packed");
        c = base_case(p, 0, 16, &o);
        c.model.io_dtype = RSSM_DTYPE_BF16;
        c.model.qk_l2norm = 0;
        ADD("bf16-io-no-qk-norm", "packed");
        c = base_case(p, 0, 16, &o);
        c.model.io_dtype = RSSM_DTYPE_F16;
        ADD("fp16-io", "packed");
    }
#undef ADD
    *cases = v;
    *count = n;
    return rssm_clear_error(err);
}
