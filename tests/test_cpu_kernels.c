/*
 * The CPU kernels through the public API (backend "cpu"), checked against
 * the float64 oracle (tools/harness/oracle.h) as docs/design.md §6 asks: L = 1 replay is
 * the packed decode bit for bit; replay matches the oracle within the
 * tolerance of its storage dtypes over several ring cycles, with forced
 * flushes mid-ring, rows at different ring positions, NaN in uncommitted
 * ring memory, raw gates, and a long decode whose error does not grow.
 */
/* setenv, for RSSM_CPU_THREADS: POSIX, not C11 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "test_support.h"

#include "objects.h"
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SEED = 0xc0ffee };

/* -------------------------------------------------- white-box poisoning */

/* Fills every ring entry from `n` on with NaN, in the slot's memory itself
 * (through the backend's slot_read / slot_write). */
static void poison_ring_from(rssm_pool *p, uint32_t slot, uint32_t n)
{
    rssm_error err;
    const rssm_model *m = &p->model;
    const rssm_slot_layout *lay = &p->layout;
    const uint32_t cap = lay->ring_cap;
    if (cap == 0 || n >= cap)
        return;
    uint8_t *bytes = malloc(lay->slot_bytes);
    TS_OK(p->backend->ops->slot_read(p->backend->ctx, p->dev, slot, bytes, &err), &err);
    const size_t r = m->ring_dtype == RSSM_DTYPE_F32 ? 4 : 2;
    const size_t gw = ts_gate_width(m);
    for (uint32_t l = 0; l < m->layers; l++) {
        uint8_t *block = bytes + l * lay->layer_bytes;
        for (uint32_t hv = 0; hv < m->num_v_heads; hv++) {
            ts_poison(block + lay->ring_d_offset + ((size_t)hv * cap + n) * m->head_v * r,
                      (cap - n) * m->head_v * r);
            ts_poison(block + lay->ring_g_offset + ((size_t)hv * cap + n) * gw * 4, (cap - n) * gw * 4);
        }
        for (uint32_t h = 0; h < m->num_qk_heads; h++)
            ts_poison(block + lay->ring_k_offset + ((size_t)h * cap + n) * m->head_k * r,
                      (cap - n) * m->head_k * r);
    }
    TS_OK(p->backend->ops->slot_write(p->backend->ctx, p->dev, slot, bytes, &err), &err);
    free(bytes);
}

/* NaN in every uncommitted ring entry, so a kernel that touches one, even
 * to multiply it by zero, shows. */
static void poison_uncommitted_ring(rssm_pool *p, uint32_t slot)
{
    poison_ring_from(p, slot, p->write_pos[slot]);
}

/* ------------------------------------------------------ the test runner */

typedef struct kcase {
    const char *name;
    rssm_model m;
    uint32_t rows;
    uint32_t steps;
    uint32_t interval;        /* snapshot interval: forced flushes */
    rssm_flush_policy policy;
    int mixed;                /* before the batch runs, row r steps alone r times */
    int poison;               /* NaN into uncommitted ring entries before each step */
    double tol;
    uint64_t seed;
} kcase;

typedef struct kresult {
    double max_out_err;       /* worst per-step ||out - ref|| / ||ref|| */
    double state_err;         /* true state vs oracle, at the end, worst slot */
    double *step_err;         /* [steps] if not NULL */
    uint32_t flushes, forced_mid_ring, distinct_positions;
} kresult;

static void set_gate_params(ts_env *e, rssm_oracle *o, rh_rng *rng)
{
    rssm_error err;
    const rssm_model *m = &e->model;
    float *A_log, *dt_bias;
    ts_random_gate_params(m, rng, &A_log, &dt_bias);
    for (uint32_t l = 0; l < m->layers; l++) {
        const float *a = A_log + l * m->num_v_heads, *d = dt_bias + l * m->num_v_heads * ts_gate_width(m);
        TS_OK(rssm_batch_set_gate_params(e->batch, l, a, d, &err), &err);
        TS_OK(rssm_oracle_set_gate_params(o, l, a, d, &err), &err);
    }
    free(A_log);
    free(dt_bias);
}

/* One step on the backend and the oracle; returns the relative error. */
static double step_both(ts_env *e, rssm_oracle *o, uint32_t rows, const uint32_t *slots,
                        const uint64_t *seq, uint32_t interval, const ts_inputs *in, void *out,
                        double *ref, int poison)
{
    rssm_error err;
    if (poison)
        for (uint32_t r = 0; r < rows; r++)
            poison_uncommitted_ring(e->pool, slots[r]);
    ts_step(e, rows, slots, seq, interval, in, out);
    const size_t n = ts_out_elems(&e->model, rows);
    ts_poison(ref, n * sizeof *ref);
    TS_OK(rssm_oracle_step(o, rows, slots, &in->in, ref, &err), &err);
    return ts_rel_l2_io(out, e->model.io_dtype, ref, n);
}

static void run_case(const kcase *c, kresult *res)
{
    rssm_error err;
    rh_rng rng;
    rh_rng_seed(&rng, c->seed, 0);
    const rssm_model *m = &c->m;
    const uint32_t L = m->replay ? m->ring_len : 1, rows = c->rows;
    ts_env e;
    ts_env_open(&e, "cpu", m, rows, c->policy, rows);
    rssm_oracle *o = NULL;
    TS_OK(rssm_oracle_create(m, rows, &o, &err), &err);
    if (m->gate_mode != RSSM_GATE_PRECOMPUTED)
        set_gate_params(&e, o, &rng);

    /* Random states; the oracle starts from what the pool really holds
     * (after rounding to the state dtype). */
    const size_t ns = ts_state_elems(m);
    float *state = malloc(ns * sizeof *state);
    double *ref_state = malloc(ns * sizeof *ref_state);
    ts_env_alloc_random(&e, rows, &rng);
    for (uint32_t s = 0; s < rows; s++) {
        TS_OK(rssm_pool_read_state(e.pool, s, state, &err), &err);
        TS_OK(rssm_oracle_set_state(o, s, state, &err), &err);
    }

    ts_inputs in1, in;
    ts_inputs_alloc(&in1, m, 1);
    ts_inputs_alloc(&in, m, rows);
    const size_t no = ts_out_elems(m, rows);
    void *out = malloc(no * sizeof(float));
    double *ref = malloc(no * sizeof *ref);
    uint64_t *seq = malloc(rows * sizeof *seq);
    uint32_t *slots = malloc(rows * sizeof *slots);
    for (uint32_t r = 0; r < rows; r++) {
        slots[r] = rows - 1 - r; /* rows and slots in different orders */
        seq[r] = 100 + 17 * r;
    }
    if (res->step_err)
        memset(res->step_err, 0, c->steps * sizeof(double));
    res->max_out_err = 0;
    res->flushes = res->forced_mid_ring = res->distinct_positions = 0;

    if (c->mixed)
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t i = 0; i < r % L; i++) {
                ts_inputs_random(&in1, &rng);
                seq[r]++;
                double er = step_both(&e, o, 1, &slots[r], &seq[r], c->interval, &in1, out, ref, c->poison);
                if (!(er <= c->tol))
                    fail_msg("%s: single-row step of slot %u: error %.3g > %.3g", c->name, slots[r], er, c->tol);
            }

    uint32_t *wp = malloc(rows * sizeof *wp);
    for (uint32_t t = 0; t < c->steps; t++) {
        ts_inputs_random(&in, &rng);
        uint64_t seen = 0;
        for (uint32_t r = 0; r < rows; r++) {
            seq[r]++;
            TS_OK(rssm_pool_write_pos(e.pool, slots[r], &wp[r], &err), &err);
            seen |= 1ull << wp[r];
        }
        uint32_t distinct = (uint32_t)__builtin_popcountll(seen);
        if (distinct > res->distinct_positions)
            res->distinct_positions = distinct;
        double er = step_both(&e, o, rows, slots, seq, c->interval, &in, out, ref, c->poison);
        if (res->step_err)
            res->step_err[t] = er;
        if (!(er <= c->tol))
            fail_msg("%s: step %u: relative output error %.3g > %.3g", c->name, t, er, c->tol);
        if (er > res->max_out_err)
            res->max_out_err = er;
        for (uint32_t r = 0; r < rows; r++) {
            uint32_t now;
            TS_OK(rssm_pool_write_pos(e.pool, slots[r], &now, &err), &err);
            if (now == 0) {
                res->flushes++;
                res->forced_mid_ring += wp[r] < L - 1;
            } else {
                assert_int_equal(now, wp[r] + 1);
            }
        }
    }

    res->state_err = 0;
    for (uint32_t s = 0; s < rows; s++) {
        TS_OK(rssm_pool_read_state(e.pool, s, state, &err), &err);
        TS_OK(rssm_oracle_get_state(o, s, ref_state, &err), &err);
        double er = ts_rel_l2(state, ref_state, ns);
        if (er > res->state_err || isnan(er))
            res->state_err = er;
    }
    if (!(res->state_err <= c->tol))
        fail_msg("%s: final state error %.3g > %.3g", c->name, res->state_err, c->tol);

    free(wp);
    free(slots);
    free(seq);
    free(ref);
    free(out);
    ts_inputs_free(&in);
    ts_inputs_free(&in1);
    free(ref_state);
    free(state);
    rssm_oracle_destroy(&o);
    ts_env_close(&e);
}

static void report(const kcase *c, const kresult *r)
{
    print_message("[  INFO    ] %-34s out %.2e  state %.2e  (tol %.0e, %u flushes, %u forced mid-ring)\n",
                  c->name, r->max_out_err, r->state_err, c->tol, r->flushes, r->forced_mid_ring);
}

static kcase base_case(const char *name, rssm_gate_kind kind, uint32_t L, double tol)
{
    kcase c = {
        .name = name,
        .m = ts_small_model(kind, 2, L),
        .rows = 3,
        .steps = 4 * L + 3, /* at least four full ring cycles */
        .interval = 0,
        .policy = RSSM_FLUSH_ALIGNED,
        .mixed = 1,
        .poison = 1,
        .tol = tol,
        .seed = SEED + kind * 1000 + L,
    };
    if (c.steps < 12)
        c.steps = 12;
    return c;
}

/* ------------------------------------------------------------- tests */

/* L = 1: the ring is always empty and every step flushes, so the replay
 * kernel must produce the packed decode's bits exactly. */
static void test_l1_replay_is_packed_bit_for_bit(void **state)
{
    (void)state;
    rssm_error err;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    const rssm_gate_mode modes[] = { RSSM_GATE_PRECOMPUTED, RSSM_GATE_RAW, RSSM_GATE_RAW_SAFE };
    for (int g = 0; g < 2; g++)
        for (int md = 0; md < 3; md++)
            for (int dt = 0; dt < 2; dt++) {
                rh_rng rng;
                rh_rng_seed(&rng, SEED + 10 * g + md + 100 * dt, 0);
                rssm_model rm = ts_small_model(kinds[g], 2, 1);
                rm.gate_mode = modes[md];
                rm.state_dtype = dt ? RSSM_DTYPE_BF16 : RSSM_DTYPE_F32;
                rm.io_dtype = dt ? RSSM_DTYPE_BF16 : RSSM_DTYPE_F32;
                rssm_model pm = rm;
                pm.replay = 0;
                pm.ring_len = 16; /* ignored without replay */
                ts_env re, pe;
                ts_env_open(&re, "cpu", &rm, 3, RSSM_FLUSH_ALIGNED, 3);
                ts_env_open(&pe, "cpu", &pm, 3, RSSM_FLUSH_ALIGNED, 3);
                if (modes[md] != RSSM_GATE_PRECOMPUTED) {
                    float *A_log, *dt_bias;
                    ts_random_gate_params(&rm, &rng, &A_log, &dt_bias);
                    for (uint32_t l = 0; l < rm.layers; l++) {
                        const float *a = A_log + l * rm.num_v_heads;
                        const float *d = dt_bias + l * rm.num_v_heads * ts_gate_width(&rm);
                        TS_OK(rssm_batch_set_gate_params(re.batch, l, a, d, &err), &err);
                        TS_OK(rssm_batch_set_gate_params(pe.batch, l, a, d, &err), &err);
                    }
                    free(A_log);
                    free(dt_bias);
                }
                const size_t ns = ts_state_elems(&rm);
                for (uint32_t s = 0; s < 3; s++) {
                    uint32_t a, b;
                    TS_OK(rssm_pool_alloc(re.pool, &a, &err), &err);
                    TS_OK(rssm_pool_alloc(pe.pool, &b, &err), &err);
                    float *st = ts_random_state(&rm, &rng);
                    TS_OK(rssm_pool_write_state(re.pool, a, st, &err), &err);
                    TS_OK(rssm_pool_write_state(pe.pool, b, st, &err), &err);
                    free(st);
                }
                ts_inputs in;
                ts_inputs_alloc(&in, &rm, 3);
                const size_t no = ts_out_elems(&rm, 3) * (dt ? 2 : 4);
                void *ro = malloc(no), *po = malloc(no);
                const uint32_t slots[3] = { 2, 0, 1 };
                uint64_t seq[3] = { 7, 8, 9 };
                for (int t = 0; t < 12; t++) {
                    ts_inputs_random(&in, &rng);
                    for (int r = 0; r < 3; r++)
                        seq[r]++;
                    ts_step(&re, 3, slots, seq, t % 5 == 4 ? 2 : 0, &in, ro);
                    ts_step(&pe, 3, slots, seq, 0, &in, po);
                    if (memcmp(ro, po, no) != 0)
                        fail_msg("%s %s %s: step %d: L=1 replay output differs from packed",
                                 rssm_gate_kind_name(rm.gate_kind), rssm_gate_mode_name(rm.gate_mode),
                                 rssm_dtype_name(rm.state_dtype), t);
                }
                float *rs = malloc(ns * 4), *ps = malloc(ns * 4);
                for (uint32_t s = 0; s < 3; s++) {
                    TS_OK(rssm_pool_read_state(re.pool, s, rs, &err), &err);
                    TS_OK(rssm_pool_read_state(pe.pool, s, ps, &err), &err);
                    assert_memory_equal(rs, ps, ns * 4);
                }
                free(rs);
                free(ps);
                free(ro);
                free(po);
                ts_inputs_free(&in);
                ts_env_close(&re);
                ts_env_close(&pe);
            }
}

/* fp32 state and ring: <= 1e-5 against float64 over >= 4 ring cycles, for
 * L in {2, 8, 16}, rows at different ring positions, NaN in every
 * uncommitted ring entry. Also the packed decode itself. */
static void test_replay_fp32_vs_oracle(void **state)
{
    (void)state;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    const uint32_t Ls[] = { 2, 8, 16 };
    for (int g = 0; g < 2; g++) {
        for (size_t l = 0; l < 3; l++) {
            char name[64];
            snprintf(name, sizeof name, "%s fp32 L=%u", rssm_gate_kind_name(kinds[g]), Ls[l]);
            kcase c = base_case(name, kinds[g], Ls[l], 1e-5);
            kresult r = { 0 };
            run_case(&c, &r);
            report(&c, &r);
            assert_true(r.flushes >= 4 * c.rows);
            assert_true(r.distinct_positions >= (Ls[l] < 3 ? Ls[l] : 3)); /* rows really were mixed */
        }
        char name[64];
        snprintf(name, sizeof name, "%s packed", rssm_gate_kind_name(kinds[g]));
        kcase c = base_case(name, kinds[g], 8, 1e-5);
        c.m.replay = 0;
        kresult r = { 0 };
        run_case(&c, &r);
        report(&c, &r);
    }
}

/* Shapes at the edges: K = V = 128 (the real models'), K = 4 with V = 256,
 * H = 1 with HV = 4 (one k shared by four value heads). */
static void test_replay_shapes_vs_oracle(void **state)
{
    (void)state;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    for (int g = 0; g < 2; g++) {
        kcase c = base_case("K=V=128", kinds[g], 16, 1e-5);
        c.m.layers = 1;
        c.m.num_qk_heads = 1;
        c.m.num_v_heads = 2;
        c.m.head_k = c.m.head_v = 128;
        c.rows = 2;
        c.steps = 36;
        kresult r = { 0 };
        run_case(&c, &r);
        report(&c, &r);

        c = base_case("K=4 V=256 H=1 HV=4", kinds[g], 4, 1e-5);
        c.m.num_qk_heads = 1;
        c.m.num_v_heads = 4;
        c.m.head_k = 4;
        c.m.head_v = 256;
        run_case(&c, &r);
        report(&c, &r);
    }
}

/* 16-bit storage: fp16 ring <= 2e-3, bf16 ring <= 1e-2, bf16 state
 * <= 1e-2, bf16 io <= 1e-2, fp16 io <= 2e-3 (tools/harness/cases.c). */
static void test_reduced_precision_vs_oracle(void **state)
{
    (void)state;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    for (int g = 0; g < 2; g++) {
        kcase c = base_case("fp16 ring", kinds[g], 8, 2e-3);
        c.m.ring_dtype = RSSM_DTYPE_F16;
        kresult r = { 0 };
        run_case(&c, &r);
        report(&c, &r);
        /* The rounding is really there: fp16 is not accidentally fp32. */
        assert_true(r.max_out_err > 1e-6);

        c = base_case("bf16 ring", kinds[g], 8, 1e-2);
        c.m.ring_dtype = RSSM_DTYPE_BF16;
        run_case(&c, &r);
        report(&c, &r);

        c = base_case("bf16 state + bf16 ring + bf16 io", kinds[g], 16, 1e-2);
        c.m.state_dtype = RSSM_DTYPE_BF16;
        c.m.ring_dtype = RSSM_DTYPE_BF16;
        c.m.io_dtype = RSSM_DTYPE_BF16;
        run_case(&c, &r);
        report(&c, &r);

        c = base_case("bf16 state, fp16 ring, L=1", kinds[g], 1, 1e-2);
        c.m.state_dtype = RSSM_DTYPE_BF16;
        c.m.ring_dtype = RSSM_DTYPE_F16;
        run_case(&c, &r);
        report(&c, &r);

        /* fp16 io with an fp32 ring and state: the inputs the oracle takes
         * are the fp16 values, so the one rounding is each output's, by at
         * most 2^-11 of it; what fp32 arithmetic adds is far below 1e-5.
         * Above 1e-5: the outputs are rounded (not fp32); below 2^-11 plus
         * that: to fp16, not bf16 (2^-8), and the inputs read as fp16. */
        c = base_case("fp16 io", kinds[g], 8, 0.0);
        c.m.io_dtype = RSSM_DTYPE_F16;
        c.tol = rh_tolerance(&c.m);
        run_case(&c, &r);
        report(&c, &r);
        assert_true(r.max_out_err > 1e-5 && r.max_out_err <= 0x1p-11 + 1e-5);
    }
}

/* Snapshot intervals that force flushes at every ring position, and the
 * staggered policy (rows flush on different steps), still match. */
static void test_forced_flush_mid_ring(void **state)
{
    (void)state;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    for (int g = 0; g < 2; g++) {
        kcase c = base_case("forced flush (interval 5, L=8)", kinds[g], 8, 1e-5);
        c.interval = 5;
        c.rows = 4;
        c.steps = 40;
        kresult r = { 0 };
        run_case(&c, &r);
        report(&c, &r);
        assert_true(r.forced_mid_ring >= 8);

        c = base_case("staggered, 8 rows, L=4", kinds[g], 4, 1e-5);
        c.policy = RSSM_FLUSH_STAGGERED;
        c.rows = 8;
        c.mixed = 0;
        run_case(&c, &r);
        report(&c, &r);
        assert_true(r.forced_mid_ring > 0);
    }
}

/* q/k L2 norm off, with an explicit q scale. k is scaled down so that
 * beta * |k|^2 < 1 and the recurrence stays contractive. */
static void test_qk_norm_off(void **state)
{
    (void)state;
    rssm_error err;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    for (int g = 0; g < 2; g++) {
        rh_rng rng;
        rh_rng_seed(&rng, SEED + 77 + g, 0);
        rssm_model m = ts_small_model(kinds[g], 2, 8);
        m.qk_l2norm = 0;
        m.q_scale = 0.3f;
        ts_env e;
        ts_env_open(&e, "cpu", &m, 2, RSSM_FLUSH_ALIGNED, 2);
        rssm_oracle *o = NULL;
        TS_OK(rssm_oracle_create(&m, 2, &o, &err), &err);
        ts_env_alloc_random(&e, 2, &rng);
        const size_t ns = ts_state_elems(&m);
        float *st = malloc(ns * 4);
        double *ref_state = malloc(ns * 8);
        for (uint32_t s = 0; s < 2; s++) {
            TS_OK(rssm_pool_read_state(e.pool, s, st, &err), &err);
            TS_OK(rssm_oracle_set_state(o, s, st, &err), &err);
        }
        ts_inputs in;
        ts_inputs_alloc(&in, &m, 2);
        const size_t no = ts_out_elems(&m, 2);
        float *out = malloc(no * 4);
        double *ref = malloc(no * 8);
        const uint32_t slots[2] = { 0, 1 };
        uint64_t seq[2] = { 3, 4 };
        double worst = 0;
        for (int t = 0; t < 30; t++) {
            ts_inputs_random(&in, &rng);
            for (size_t i = 0; i < in.nq; i++)
                ((float *)in.k)[i] *= 0.3f;
            seq[0]++, seq[1]++;
            ts_step(&e, 2, slots, seq, 0, &in, out);
            TS_OK(rssm_oracle_step(o, 2, slots, &in.in, ref, &err), &err);
            double er = ts_rel_l2(out, ref, no);
            if (!(er <= 1e-5))
                fail_msg("%s, no q/k norm: step %d error %.3g", rssm_gate_kind_name(m.gate_kind), t, er);
            if (er > worst)
                worst = er;
        }
        for (uint32_t s = 0; s < 2; s++) {
            TS_OK(rssm_pool_read_state(e.pool, s, st, &err), &err);
            TS_OK(rssm_oracle_get_state(o, s, ref_state, &err), &err);
            assert_true(ts_rel_l2(st, ref_state, ns) <= 1e-5);
        }
        print_message("[  INFO    ] %s no q/k norm, q_scale 0.3: out %.2e\n", rssm_gate_kind_name(m.gate_kind),
                      worst);
        free(st);
        free(ref_state);
        free(out);
        free(ref);
        ts_inputs_free(&in);
        rssm_oracle_destroy(&o);
        ts_env_close(&e);
    }
}

static double softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }
static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* RAW gates computed in the kernel equal precomputed gates computed here
 * from the same a, b (within 1e-6 relative), and both match the oracle.
 * Some a + dt_bias land above 20, where softplus is linear. */
static void test_raw_gates(void **state)
{
    (void)state;
    rssm_error err;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    const rssm_gate_mode modes[] = { RSSM_GATE_RAW, RSSM_GATE_RAW_SAFE };
    for (int g = 0; g < 2; g++)
        for (int md = 0; md < 2; md++) {
            rh_rng rng;
            rh_rng_seed(&rng, SEED + 300 + 2 * g + md, 0);
            rssm_model raw = ts_small_model(kinds[g], 2, 4);
            raw.gate_mode = modes[md];
            raw.gate_lower_bound = -3.0f;
            rssm_model pre = raw;
            pre.gate_mode = RSSM_GATE_PRECOMPUTED;
            ts_env re, pe;
            ts_env_open(&re, "cpu", &raw, 2, RSSM_FLUSH_ALIGNED, 2);
            ts_env_open(&pe, "cpu", &pre, 2, RSSM_FLUSH_ALIGNED, 2);
            rssm_oracle *o = NULL;
            TS_OK(rssm_oracle_create(&raw, 2, &o, &err), &err);
            float *A_log, *dt_bias;
            ts_random_gate_params(&raw, &rng, &A_log, &dt_bias);
            const uint32_t HV = raw.num_v_heads, gw = (uint32_t)ts_gate_width(&raw);
            for (uint32_t l = 0; l < raw.layers; l++) {
                TS_OK(rssm_batch_set_gate_params(re.batch, l, A_log + l * HV, dt_bias + l * HV * gw, &err), &err);
                TS_OK(rssm_oracle_set_gate_params(o, l, A_log + l * HV, dt_bias + l * HV * gw, &err), &err);
            }
            float *st = ts_random_state(&raw, &rng);
            for (uint32_t s = 0; s < 2; s++) {
                uint32_t a, b;
                TS_OK(rssm_pool_alloc(re.pool, &a, &err), &err);
                TS_OK(rssm_pool_alloc(pe.pool, &b, &err), &err);
                TS_OK(rssm_pool_write_state(re.pool, a, st, &err), &err);
                TS_OK(rssm_pool_write_state(pe.pool, b, st, &err), &err);
                TS_OK(rssm_oracle_set_state(o, s, st, &err), &err);
            }
            ts_inputs rin, pin;
            ts_inputs_alloc(&rin, &raw, 2);
            ts_inputs_alloc(&pin, &pre, 2);
            const size_t no = ts_out_elems(&raw, 2);
            float *ro = malloc(no * 4), *po = malloc(no * 4);
            double *ref = malloc(no * 8);
            const uint32_t slots[2] = { 1, 0 };
            uint64_t seq[2] = { 11, 12 };
            double worst_pre = 0, worst_ref = 0;
            for (int t = 0; t < 14; t++) {
                ts_inputs_random(&rin, &rng);
                if (t % 3 == 0)
                    rin.gate[t % rin.ngate] = 23.0f; /* softplus' linear branch */
                memcpy(pin.q, rin.q, rin.nq * 4);
                memcpy(pin.k, rin.k, rin.nq * 4);
                memcpy(pin.v, rin.v, rin.nv * 4);
                for (uint32_t l = 0; l < raw.layers; l++)
                    for (uint32_t r = 0; r < 2; r++)
                        for (uint32_t hv = 0; hv < HV; hv++) {
                            const size_t bi = ((size_t)l * 2 + r) * HV + hv;
                            const double A = exp((double)A_log[l * HV + hv]);
                            for (uint32_t c = 0; c < gw; c++) {
                                const double x = (double)rin.gate[bi * gw + c] + dt_bias[(l * HV + hv) * gw + c];
                                const double gv = modes[md] == RSSM_GATE_RAW
                                                      ? -A * softplus(x)
                                                      : (double)raw.gate_lower_bound * sigmoid(A * x);
                                pin.gate[bi * gw + c] = (float)gv;
                            }
                            pin.beta[bi] = (float)sigmoid(rin.beta[bi]);
                        }
                seq[0]++, seq[1]++;
                ts_step(&re, 2, slots, seq, 0, &rin, ro);
                ts_step(&pe, 2, slots, seq, 0, &pin, po);
                TS_OK(rssm_oracle_step(o, 2, slots, &rin.in, ref, &err), &err);
                double e1 = ts_rel_l2_f(ro, po, no), e2 = ts_rel_l2(ro, ref, no);
                if (!(e1 <= 1e-6))
                    fail_msg("%s %s step %d: raw vs hand-computed gates differ by %.3g",
                             rssm_gate_kind_name(raw.gate_kind), rssm_gate_mode_name(raw.gate_mode), t, e1);
                if (!(e2 <= 1e-5))
                    fail_msg("%s %s step %d: raw gates vs oracle %.3g", rssm_gate_kind_name(raw.gate_kind),
                             rssm_gate_mode_name(raw.gate_mode), t, e2);
                worst_pre = e1 > worst_pre ? e1 : worst_pre;
                worst_ref = e2 > worst_ref ? e2 : worst_ref;
            }
            print_message("[  INFO    ] %s %-9s vs hand gates %.2e, vs oracle %.2e\n",
                          rssm_gate_kind_name(raw.gate_kind), rssm_gate_mode_name(raw.gate_mode), worst_pre,
                          worst_ref);
            free(ro);
            free(po);
            free(ref);
            free(st);
            free(A_log);
            free(dt_bias);
            ts_inputs_free(&rin);
            ts_inputs_free(&pin);
            rssm_oracle_destroy(&o);
            ts_env_close(&re);
            ts_env_close(&pe);
        }
}

/* 4096 steps (512 ring cycles) of a small model: the error over the last
 * 256 steps stays within 10x of the first 256 and below 1e-5. */
static void test_long_decode_error_does_not_grow(void **state)
{
    (void)state;
    enum { STEPS = 4096, WINDOW = 256 };
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    for (int g = 0; g < 2; g++) {
        kcase c = base_case("4096-step decode", kinds[g], 8, 1e-5);
        c.m.layers = 1;
        c.m.num_qk_heads = c.m.num_v_heads = 2;
        c.m.head_k = c.m.head_v = 16;
        c.rows = 2;
        c.steps = STEPS;
        c.interval = 1000; /* a few snapshot flushes on the way */
        c.poison = 0;
        kresult r = { 0 };
        r.step_err = calloc(STEPS, sizeof(double));
        run_case(&c, &r);
        double first = 0, last = 0, last_max = 0;
        for (int i = 0; i < WINDOW; i++) {
            first += r.step_err[i] / WINDOW;
            last += r.step_err[STEPS - WINDOW + i] / WINDOW;
            if (r.step_err[STEPS - WINDOW + i] > last_max)
                last_max = r.step_err[STEPS - WINDOW + i];
        }
        print_message("[  INFO    ] %s 4096 steps: mean error first 256 %.2e, last 256 %.2e (max %.2e), "
                      "state %.2e\n",
                      rssm_gate_kind_name(c.m.gate_kind), first, last, last_max, r.state_err);
        if (!(last < 10 * first && last_max < 1e-5))
            fail_msg("%s: error grew from %.3g (first 256 steps) to %.3g (last 256)",
                     rssm_gate_kind_name(c.m.gate_kind), first, last);
        free(r.step_err);
    }
}

/* The poisoning above really reaches the memory the ring is read from:
 * poisoning from entry 0 of a slot with committed entries makes its state
 * NaN, poisoning from write_pos leaves it alone. */
static void test_poison_reaches_the_ring(void **state)
{
    (void)state;
    rssm_error err;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 5, 0);
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    for (int g = 0; g < 2; g++) {
        rssm_model m = ts_small_model(kinds[g], 2, 8);
        m.ring_dtype = g ? RSSM_DTYPE_BF16 : RSSM_DTYPE_F32;
        ts_env e;
        ts_env_open(&e, "cpu", &m, 2, RSSM_FLUSH_ALIGNED, 1);
        ts_env_alloc_random(&e, 2, &rng);
        ts_inputs in;
        ts_inputs_alloc(&in, &m, 1);
        float *out = malloc(ts_out_elems(&m, 1) * 4);
        const uint32_t slot = 1;
        uint64_t seq = 50;
        for (int t = 0; t < 3; t++, seq++) {
            ts_inputs_random(&in, &rng);
            ts_step(&e, 1, &slot, &seq, 0, &in, out);
        }
        const size_t ns = ts_state_elems(&m);
        float *st = malloc(ns * 4);
        poison_uncommitted_ring(e.pool, slot);
        TS_OK(rssm_pool_read_state(e.pool, slot, st, &err), &err);
        assert_int_equal(ts_count_nonfinite(st, RSSM_DTYPE_F32, ns), 0);
        poison_ring_from(e.pool, slot, 2); /* the newest committed entry */
        TS_OK(rssm_pool_read_state(e.pool, slot, st, &err), &err);
        assert_true(ts_count_nonfinite(st, RSSM_DTYPE_F32, ns) > 0);
        free(st);
        free(out);
        ts_inputs_free(&in);
        ts_env_close(&e);
    }
}

/* The CPU backend splits a step over threads by (row, head); the bits must
 * not depend on how many threads there are. */
static void test_thread_count_does_not_change_bits(void **state)
{
    (void)state;
    rssm_error err;
    const char *counts[] = { "1", "3" };
    rssm_model m = ts_small_model(RSSM_GATE_KDA, 2, 4);
    m.ring_dtype = RSSM_DTYPE_F16;
    enum { ROWS = 5, STEPS = 10 };
    const size_t no = ts_out_elems(&m, ROWS), ns = ts_state_elems(&m);
    float *outs[2], *states[2];
    for (int i = 0; i < 2; i++) {
        rh_rng rng;
        rh_rng_seed(&rng, SEED + 6, 0);
        assert_int_equal(setenv("RSSM_CPU_THREADS", counts[i], 1), 0);
        ts_env e;
        ts_env_open_own(&e, "cpu", &m, ROWS, RSSM_FLUSH_STAGGERED, ROWS); /* reads RSSM_CPU_THREADS */
        ts_env_alloc_random(&e, ROWS, &rng);
        ts_inputs in;
        ts_inputs_alloc(&in, &m, ROWS);
        outs[i] = malloc(no * STEPS * 4);
        states[i] = malloc(ns * ROWS * 4);
        const uint32_t slots[ROWS] = { 4, 2, 0, 1, 3 };
        uint64_t seq[ROWS] = { 5, 6, 7, 8, 9 };
        for (int t = 0; t < STEPS; t++) {
            ts_inputs_random(&in, &rng);
            for (int r = 0; r < ROWS; r++)
                seq[r]++;
            ts_step(&e, ROWS, slots, seq, 0, &in, outs[i] + (size_t)t * no);
        }
        for (uint32_t s = 0; s < ROWS; s++)
            TS_OK(rssm_pool_read_state(e.pool, s, states[i] + s * ns, &err), &err);
        ts_inputs_free(&in);
        ts_env_close(&e);
    }
    /* A bad thread count is refused when the backend starts. */
    rssm_backend *b = NULL;
    assert_int_equal(setenv("RSSM_CPU_THREADS", "0", 1), 0);
    TS_EXPECT(rssm_backend_create("cpu", &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_int_equal(setenv("RSSM_CPU_THREADS", "two", 1), 0);
    TS_EXPECT(rssm_backend_create("cpu", &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_null(b);
    assert_int_equal(unsetenv("RSSM_CPU_THREADS"), 0);
    assert_memory_equal(outs[0], outs[1], no * STEPS * 4);
    assert_memory_equal(states[0], states[1], ns * ROWS * 4);
    for (int i = 0; i < 2; i++) {
        free(outs[i]);
        free(states[i]);
    }
}

/* 0 (and why, on stdout) when RSSM_CPU_VARIANT names a kernel variant this
 * build or CPU does not have: the variant's run of this file is skipped.
 * Any other failure to start is left to the tests, which then fail. */
static int variant_usable(void)
{
    const char *v = getenv("RSSM_CPU_VARIANT");
    if (!v || !*v)
        return 1;
    rssm_backend *b = NULL;
    rssm_error err;
    const rssm_status st = rssm_backend_create("cpu", &b, &err);
    rssm_backend_destroy(&b);
    if (st != RSSM_ERR_UNAVAILABLE)
        return 1;
    printf("skipped: %s\n", err.message);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_poison_reaches_the_ring),
        cmocka_unit_test(test_l1_replay_is_packed_bit_for_bit),
        cmocka_unit_test(test_replay_fp32_vs_oracle),
        cmocka_unit_test(test_replay_shapes_vs_oracle),
        cmocka_unit_test(test_reduced_precision_vs_oracle),
        cmocka_unit_test(test_forced_flush_mid_ring),
        cmocka_unit_test(test_qk_norm_off),
        cmocka_unit_test(test_raw_gates),
        cmocka_unit_test(test_long_decode_error_does_not_grow),
        cmocka_unit_test(test_thread_count_does_not_change_bits),
    };
    if (!variant_usable())
        return 77;
    return TS_RUN(tests);
}
