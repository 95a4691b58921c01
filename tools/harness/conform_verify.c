/* Speculative-decode traces (docs/design.md §9, docs/trace-format.md):
 * each engine step is, per row, a window of draft tokens that is verified
 * and then accepted in part (rssm_batch_verify, rssm_pool_accept), or one
 * ordinary decode (rssm_batch_step). The oracle gives each draft token the
 * output of that many decodes from the row's state and advances the state
 * by the accepted tokens alone; a token's outputs sit at its trace step,
 * zero past a row's window, so such a trace is compared exactly as any
 * other. The generated cases (rh_trace_spec.verify) alternate windows, in
 * which the rows differ in T, k and ring position, with ordinary steps. */
#include "conform_internal.h"

#include "dtype.h"
#include "error.h"
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t drafts_of(const rh_trace *t, uint32_t e, uint32_t r) { return t->drafts[(size_t)e * t->batch + r]; }

static int32_t accepted_of(const rh_trace *t, uint32_t e, uint32_t r)
{
    return t->accepted[(size_t)e * t->batch + r];
}

/* Row r of a step's buffers as a one-row step: [layers][1][...]. */
static void row_of(step_buf *one, const step_buf *all, const rssm_model *m, uint32_t rows, uint32_t r)
{
    const size_t io = rssm_dtype_size(m->io_dtype);
    const size_t qk = (size_t)m->num_qk_heads * m->head_k, v = (size_t)m->num_v_heads * m->head_v;
    const size_t g = (size_t)m->num_v_heads * (m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1), b = m->num_v_heads;
    for (uint32_t l = 0; l < m->layers; l++) {
        memcpy((uint8_t *)one->q + l * qk * io, (const uint8_t *)all->q + ((size_t)l * rows + r) * qk * io, qk * io);
        memcpy((uint8_t *)one->k + l * qk * io, (const uint8_t *)all->k + ((size_t)l * rows + r) * qk * io, qk * io);
        memcpy((uint8_t *)one->v + l * v * io, (const uint8_t *)all->v + ((size_t)l * rows + r) * v * io, v * io);
        memcpy(one->gate + l * g, all->gate + ((size_t)l * rows + r) * g, g * sizeof(float));
        memcpy(one->beta + l * b, all->beta + ((size_t)l * rows + r) * b, b * sizeof(float));
    }
}

/* Whether engine step e verifies windows (else every row decodes once). */
static int is_window(const rh_trace *t, uint32_t e) { return drafts_of(t, e, 0) > 0; }

rssm_status rh_verify_oracle(rh_prepared *p, rssm_error *err)
{
    const rh_trace *t = &p->trace;
    const rssm_model *m = &t->model;
    const uint32_t S = t->slots;
    const size_t per_out = rh_trace_v_per_step(t), per_state = rh_trace_state_per_slot(t);
    p->ref_out = calloc((size_t)t->steps * per_out, sizeof(double));
    p->ref_state = calloc((size_t)S * per_state, sizeof(double));
    double *out = malloc(per_out * sizeof(double));
    step_buf s, one;
    const int have_s = step_buf_alloc(&s, t), have_one = step_buf_alloc(&one, t);
    rssm_oracle *o = NULL;
    rssm_status st = RSSM_OK;
    if (!p->ref_out || !p->ref_state || !out || !have_s || !have_one) {
        st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "oracle: out of host memory");
        goto done;
    }
    /* slot i, and its spare S + i that a window's tokens run on */
    if ((st = rssm_oracle_create(m, 2 * S, &o, err)) != RSSM_OK)
        goto done;
    for (uint32_t i = 0; i < S && st == RSSM_OK; i++)
        st = rssm_oracle_set_state(o, i, t->init_state + i * per_state, err);
    if (st == RSSM_OK && m->gate_mode != RSSM_GATE_PRECOMPUTED) {
        const size_t gw = m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1;
        for (uint32_t l = 0; l < m->layers && st == RSSM_OK; l++)
            st = rssm_oracle_set_gate_params(o, l, t->A_log + (size_t)l * m->num_v_heads,
                                             t->dt_bias + (size_t)l * m->num_v_heads * gw, err);
    }
    for (uint32_t e = 0, s0 = 0; e < t->windows && st == RSSM_OK; s0 += rh_trace_window_width(t, e), e++) {
        if (!is_window(t, e)) {
            const uint32_t rows = step_buf_fill(&s, t, s0, NULL);
            if ((st = rssm_oracle_step(o, rows, s.slots, &s.in, out, err)) == RSSM_OK)
                rh_put_ref(p, s0, out, rows, UINT32_MAX);
            continue;
        }
        for (uint32_t r = 0; r < rh_trace_rows(t, s0) && st == RSSM_OK; r++) {
            const uint32_t slot = (uint32_t)t->slot_ids[(size_t)s0 * t->batch + r], spare = S + slot;
            const uint32_t T = (uint32_t)drafts_of(t, e, r), k = (uint32_t)accepted_of(t, e, r);
            st = rssm_oracle_copy(o, slot, spare, err);
            /* each draft token from the state the ones before it left ... */
            for (uint32_t x = 0; x < T && st == RSSM_OK; x++) {
                const uint32_t rows = step_buf_fill(&s, t, s0 + x, NULL);
                row_of(&one, &s, m, rows, r);
                if ((st = rssm_oracle_step(o, 1, &spare, &one.in, out, err)) == RSSM_OK)
                    rh_put_ref(p, s0 + x, out, 1, r);
            }
            /* ... and the slot's state advanced by the accepted ones */
            for (uint32_t x = 0; x < k && st == RSSM_OK; x++) {
                const uint32_t rows = step_buf_fill(&s, t, s0 + x, NULL);
                row_of(&one, &s, m, rows, r);
                st = rssm_oracle_step(o, 1, &slot, &one.in, out, err);
            }
        }
    }
    for (uint32_t i = 0; i < S && st == RSSM_OK; i++)
        st = rssm_oracle_get_state(o, i, p->ref_state + i * per_state, err);
done:
    rssm_oracle_destroy(&o);
    if (have_s)
        step_buf_free(&s);
    if (have_one)
        step_buf_free(&one);
    free(out);
    return st;
}

rssm_status rh_verify_run(const rh_prepared *p, const rssm_model *m, rssm_backend *b, float *outs, float *states,
                          rh_result *cov, rssm_error *err)
{
    const rh_trace *t = &p->trace;
    const uint32_t B = t->batch, W = RSSM_MAX_DRAFT;
    const size_t io = rssm_dtype_size(m->io_dtype), per_out = rh_trace_v_per_step(t);
    /* One step's bytes of each array for B rows (a window's rows use the
     * first part), and W of them token-major, as rssm_batch_verify takes
     * them. */
    const size_t qk = rh_trace_qk_per_step(t) * io, v = per_out * io;
    const size_t g = rh_trace_gate_per_step(t) * sizeof(float), be = rh_trace_beta_per_step(t) * sizeof(float);
    uint8_t *q = malloc(W * qk), *k = malloc(W * qk), *vv = malloc(W * v), *gate = malloc(W * g);
    uint8_t *beta = malloc(W * be), *out = malloc(W * v);
    uint32_t *slots = malloc(B * sizeof *slots), *drafts = malloc(B * sizeof *drafts);
    uint32_t *accepted = malloc(B * sizeof *accepted);
    uint64_t *after = malloc(B * sizeof *after);
    step_buf s;
    const int have_s = step_buf_alloc(&s, t);
    engine e = {0};
    rssm_status st = q && k && vv && gate && beta && out && slots && drafts && accepted && after && have_s
                         ? engine_open(&e, b, t, m, p->c.policy, 1, err)
                         : rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "out of host memory");
    uint32_t windows = 0, most = 0;
    for (uint32_t w = 0, s0 = 0; w < t->windows && st == RSSM_OK; s0 += rh_trace_window_width(t, w), w++) {
        if (!is_window(t, w)) { /* a step of ordinary decodes */
            const uint32_t rows = step_buf_fill(&s, t, s0, e.slot_of);
            if ((st = rssm_batch_step(e.batch, rows, s.slots, s.lens, t->snapshot_interval, &s.in, out, err)) !=
                RSSM_OK) {
                rssm_error e2 = *err;
                rssm_set_error(err, e2.status, "step %u: %s", s0, e2.message);
                break;
            }
            rh_put_out(outs, t, m->io_dtype, s0, out, rows);
            continue;
        }
        const uint32_t rows = rh_trace_rows(t, s0), tokens = rh_trace_window_width(t, w);
        for (uint32_t r = 0; r < rows && st == RSSM_OK; r++) {
            slots[r] = e.slot_of[t->slot_ids[(size_t)s0 * B + r]];
            drafts[r] = (uint32_t)drafts_of(t, w, r);
            accepted[r] = (uint32_t)accepted_of(t, w, r);
            /* the row's length before the window, then after its accepted tokens */
            after[r] = (uint64_t)t->seq_len_after[(size_t)s0 * B + r] - 1 + accepted[r];
            uint32_t n = 0;
            if ((st = rssm_pool_write_pos(e.pool, slots[r], &n, err)) != RSSM_OK)
                break;
            cov->folds += n > 0 && n + drafts[r] > m->ring_len - 1;
            const uint64_t i = t->snapshot_interval, before = after[r] - accepted[r];
            cov->boundaries += i && after[r] / i > before / i;
        }
        /* token x's arrays for the window's rows, token-major */
        const size_t tq = qk / B * rows, tv = v / B * rows, tg = g / B * rows, tb = be / B * rows;
        for (uint32_t x = 0; x < tokens && st == RSSM_OK; x++) {
            step_buf_fill(&s, t, s0 + x, e.slot_of);
            memcpy(q + x * tq, s.q, tq);
            memcpy(k + x * tq, s.k, tq);
            memcpy(vv + x * tv, s.v, tv);
            memcpy(gate + x * tg, s.gate, tg);
            memcpy(beta + x * tb, s.beta, tb);
        }
        const rssm_step_inputs in = {q, k, vv, (const float *)(const void *)gate, (const float *)(const void *)beta};
        /* Poison: whatever the backend does not write stays NaN. */
        for (size_t i = 0; st == RSSM_OK && i < tokens * tv / io; i++)
            rssm_store(out, m->io_dtype, i, NAN);
        if (st == RSSM_OK && (st = rssm_batch_verify(e.batch, rows, slots, drafts, &in, out, err)) != RSSM_OK) {
            rssm_error e2 = *err;
            rssm_set_error(err, e2.status, "window at step %u: %s", s0, e2.message);
            break;
        }
        size_t bad;
        if (st == RSSM_OK && !is_poison_free(out, m->io_dtype, tokens * tv / io, &bad)) {
            st = rssm_set_error(err, RSSM_ERR_DEVICE, "window at step %u: output %zu of its token %zu is NaN", s0,
                                bad % (tv / io), bad / (tv / io));
            break;
        }
        for (uint32_t x = 0; x < tokens && st == RSSM_OK; x++)
            rh_put_out(outs, t, m->io_dtype, s0 + x, out + x * tv, rows);
        if (st == RSSM_OK &&
            (st = rssm_pool_accept(e.pool, rows, slots, accepted, after, t->snapshot_interval, err)) != RSSM_OK) {
            rssm_error e2 = *err;
            rssm_set_error(err, e2.status, "accept of the window at step %u: %s", s0, e2.message);
            break;
        }
        windows++;
        most = tokens > most ? tokens : most;
    }
    const size_t per_state = rh_trace_state_per_slot(t);
    for (uint32_t i = 0; i < t->slots && st == RSSM_OK; i++)
        st = rssm_pool_read_state(e.pool, e.slot_of[i], states + i * per_state, err);
    if (st == RSSM_OK)
        snprintf(cov->note, sizeof cov->note,
                 "%u windows of up to %u draft tokens; %u folded first, %u snapshot boundaries among accepted", windows,
                 most, cov->folds, cov->boundaries);
    if (e.pool)
        engine_close(&e);
    if (have_s)
        step_buf_free(&s);
    free(q);
    free(k);
    free(vv);
    free(gate);
    free(beta);
    free(out);
    free(slots);
    free(drafts);
    free(accepted);
    free(after);
    return st;
}
