/* Verify cases (docs/design.md §9): the trace's steps taken as rounds of a
 * window of W draft tokens (steps s .. s + W - 1 of the round) and one
 * ordinary step (s + W). Row r of round w verifies drafts(w, r) of the
 * window's tokens and accepts accepted(w, r) of them, so the rows of one
 * window differ in T, in k (every k from 0 to T comes round) and, after
 * unequal accepts, in ring position. The oracle gives each draft token the
 * output of that many decodes from the row's state, and advances the state
 * by the accepted tokens alone; the outputs sit at the trace step of their
 * token, zero past a row's window, so a verify case is compared exactly as
 * a trace case is. */
#include "conform_internal.h"

#include "dtype.h"
#include "error.h"
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Draft and accepted tokens of row r in round w, for windows of W. */
static uint32_t drafts_of(uint32_t W, uint32_t w, uint32_t r)
{
    const uint32_t pattern[4] = {1, 2, W / 2 ? W / 2 : 1, W};
    return pattern[(w + r) % 4];
}

static uint32_t accepted_of(uint32_t W, uint32_t w, uint32_t r)
{
    return (r + 3 * w) % (drafts_of(W, w, r) + 1);
}

static uint32_t rounds_of(const rh_trace *t, uint32_t W) { return t->steps / (W + 1); }

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

/* [layers][rows][w] doubles into step `step`'s [layers][B][w] block of
 * ref_out, at row `at` (a one-row step) or every row (at = UINT32_MAX). */
static void put_ref(rh_prepared *p, uint32_t step, const double *out, uint32_t rows, uint32_t at)
{
    const rh_trace *t = &p->trace;
    const rssm_model *m = &t->model;
    const size_t w = (size_t)m->num_v_heads * m->head_v;
    double *dst = p->ref_out + step * rh_trace_v_per_step(t);
    for (uint32_t l = 0; l < m->layers; l++)
        memcpy(dst + ((size_t)l * t->batch + (at == UINT32_MAX ? 0 : at)) * w, out + (size_t)l * rows * w,
               rows * w * sizeof(double));
}

rssm_status rh_verify_oracle(rh_prepared *p, rssm_error *err)
{
    const rh_trace *t = &p->trace;
    const rssm_model *m = &t->model;
    const uint32_t W = p->c.verify, B = t->batch, S = t->slots;
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
    for (uint32_t w = 0; w < rounds_of(t, W) && st == RSSM_OK; w++) {
        const uint32_t s0 = w * (W + 1);
        for (uint32_t r = 0; r < B && st == RSSM_OK; r++) {
            const uint32_t slot = (uint32_t)t->slot_ids[(size_t)s0 * B + r], spare = S + slot;
            const uint32_t T = drafts_of(W, w, r), k = accepted_of(W, w, r);
            st = rssm_oracle_copy(o, slot, spare, err);
            /* each draft token from the state the ones before it left ... */
            for (uint32_t x = 0; x < T && st == RSSM_OK; x++) {
                const uint32_t rows = step_buf_fill(&s, t, s0 + x, NULL);
                row_of(&one, &s, m, rows, r);
                if ((st = rssm_oracle_step(o, 1, &spare, &one.in, out, err)) == RSSM_OK)
                    put_ref(p, s0 + x, out, 1, r);
            }
            /* ... and the slot's state advanced by the accepted ones */
            for (uint32_t x = 0; x < k && st == RSSM_OK; x++) {
                const uint32_t rows = step_buf_fill(&s, t, s0 + x, NULL);
                row_of(&one, &s, m, rows, r);
                st = rssm_oracle_step(o, 1, &slot, &one.in, out, err);
            }
        }
        if (st != RSSM_OK)
            break;
        const uint32_t rows = step_buf_fill(&s, t, s0 + W, NULL);
        if ((st = rssm_oracle_step(o, rows, s.slots, &s.in, out, err)) == RSSM_OK)
            put_ref(p, s0 + W, out, rows, UINT32_MAX);
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

/* The io-dtype outputs [layers][rows][w] of one token into step `step` of
 * outs, as fp32. */
static void put_out(float *outs, const rh_trace *t, uint32_t step, const void *out, uint32_t rows)
{
    const rssm_model *m = &t->model;
    const size_t w = (size_t)m->num_v_heads * m->head_v;
    float *dst = outs + step * rh_trace_v_per_step(t);
    memset(dst, 0, rh_trace_v_per_step(t) * sizeof(float));
    for (uint32_t l = 0; l < m->layers; l++)
        for (size_t i = 0; i < rows * w; i++)
            dst[(size_t)l * t->batch * w + i] = rssm_load(out, m->io_dtype, (size_t)l * rows * w + i);
}

rssm_status rh_verify_run(const rh_prepared *p, const rssm_model *m, rssm_backend *b, float *outs, float *states,
                          rh_result *cov, rssm_error *err)
{
    const rh_trace *t = &p->trace;
    const uint32_t W = p->c.verify, B = t->batch;
    const size_t io = rssm_dtype_size(m->io_dtype), per_out = rh_trace_v_per_step(t);
    /* One step's bytes of each array for B rows, and W of them token-major,
     * as rssm_batch_verify takes them. */
    const size_t qk = rh_trace_qk_per_step(t) * io, v = per_out * io;
    const size_t g = rh_trace_gate_per_step(t) * sizeof(float), be = rh_trace_beta_per_step(t) * sizeof(float);
    uint8_t *q = malloc(W * qk), *k = malloc(W * qk), *vv = malloc(W * v), *gate = malloc(W * g);
    uint8_t *beta = malloc(W * be), *out = malloc(W * v);
    uint32_t *slots = malloc(B * sizeof *slots), *drafts = malloc(B * sizeof *drafts);
    uint32_t *accepted = malloc(B * sizeof *accepted);
    uint64_t *len = malloc(B * sizeof *len), *after = malloc(B * sizeof *after);
    step_buf s;
    const int have_s = step_buf_alloc(&s, t);
    engine e = {0};
    rssm_status st = q && k && vv && gate && beta && out && slots && drafts && accepted && len && after && have_s
                         ? engine_open(&e, b, t, m, p->c.policy, 1, err)
                         : rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "out of host memory");
    uint32_t windows = 0, folded_first = 0, boundaries = 0;
    for (uint32_t r = 0; r < B && st == RSSM_OK; r++) /* the length before the first step */
        len[r] = (uint64_t)t->seq_len_after[r] - 1;
    for (uint32_t w = 0; w < rounds_of(t, W) && st == RSSM_OK; w++) {
        const uint32_t s0 = w * (W + 1);
        uint32_t tokens = 0;
        for (uint32_t r = 0; r < B; r++) {
            slots[r] = e.slot_of[t->slot_ids[(size_t)s0 * B + r]];
            drafts[r] = drafts_of(W, w, r);
            accepted[r] = accepted_of(W, w, r);
            after[r] = len[r] + accepted[r];
            tokens = drafts[r] > tokens ? drafts[r] : tokens;
            uint32_t n = 0;
            if ((st = rssm_pool_write_pos(e.pool, slots[r], &n, err)) != RSSM_OK)
                break;
            folded_first += n > 0 && n + drafts[r] > m->ring_len - 1;
            const uint64_t i = t->snapshot_interval;
            boundaries += i && accepted[r] && after[r] / i > len[r] / i;
        }
        for (uint32_t x = 0; x < tokens && st == RSSM_OK; x++) {
            step_buf_fill(&s, t, s0 + x, e.slot_of);
            memcpy(q + x * qk, s.q, qk);
            memcpy(k + x * qk, s.k, qk);
            memcpy(vv + x * v, s.v, v);
            memcpy(gate + x * g, s.gate, g);
            memcpy(beta + x * be, s.beta, be);
        }
        const rssm_step_inputs in = {q, k, vv, (const float *)(const void *)gate, (const float *)(const void *)beta};
        /* Poison: whatever the backend does not write stays NaN. */
        for (size_t i = 0; st == RSSM_OK && i < tokens * per_out; i++)
            rssm_store(out, m->io_dtype, i, NAN);
        if (st == RSSM_OK && (st = rssm_batch_verify(e.batch, B, slots, drafts, &in, out, err)) != RSSM_OK) {
            rssm_error e2 = *err;
            rssm_set_error(err, e2.status, "window %u: %s", w, e2.message);
            break;
        }
        size_t bad;
        if (st == RSSM_OK && !is_poison_free(out, m->io_dtype, tokens * per_out, &bad)) {
            st = rssm_set_error(err, RSSM_ERR_DEVICE, "window %u: output %zu of its token %zu is NaN", w,
                                bad % per_out, bad / per_out);
            break;
        }
        for (uint32_t x = 0; x < tokens && st == RSSM_OK; x++)
            put_out(outs, t, s0 + x, out + x * v, B);
        if (st == RSSM_OK &&
            (st = rssm_pool_accept(e.pool, B, slots, accepted, after, t->snapshot_interval, err)) != RSSM_OK) {
            rssm_error e2 = *err;
            rssm_set_error(err, e2.status, "accept after window %u: %s", w, e2.message);
            break;
        }
        windows++;
        /* the ordinary step of the round */
        const uint32_t rows = st == RSSM_OK ? step_buf_fill(&s, t, s0 + W, e.slot_of) : 0;
        for (uint32_t r = 0; r < rows; r++)
            s.lens[r] = len[r] = after[r] + 1;
        if (st == RSSM_OK &&
            (st = rssm_batch_step(e.batch, rows, s.slots, s.lens, t->snapshot_interval, &s.in, out, err)) != RSSM_OK) {
            rssm_error e2 = *err;
            rssm_set_error(err, e2.status, "step %u: %s", s0 + W, e2.message);
            break;
        }
        if (st == RSSM_OK)
            put_out(outs, t, s0 + W, out, rows);
    }
    const size_t per_state = rh_trace_state_per_slot(t);
    for (uint32_t i = 0; i < t->slots && st == RSSM_OK; i++)
        st = rssm_pool_read_state(e.pool, e.slot_of[i], states + i * per_state, err);
    cov->folds = folded_first;
    cov->boundaries = boundaries;
    if (st == RSSM_OK)
        snprintf(cov->note, sizeof cov->note,
                 "%u windows of 1..%u draft tokens, 0..T accepted; %u folded first, %u snapshot boundaries", windows,
                 W, folded_first, boundaries);
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
    free(len);
    free(after);
    return st;
}
