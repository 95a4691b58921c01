/* The engine a conformance run drives, shared by conform.c (a trace's
 * steps) and conform_verify.c (its speculative-decode windows): a step's
 * input buffers from a trace, a pool and a batch of the case's model on one
 * backend, and the outputs into the trace's shapes (conform_internal.h). */
#include "conform_internal.h"

#include "dtype.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ step inputs */

void step_buf_free(step_buf *s)
{
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->gate);
    free(s->beta);
    free(s->slots);
    free(s->lens);
    memset(s, 0, sizeof *s);
}

int step_buf_alloc(step_buf *s, const rh_trace *t)
{
    size_t io = rssm_dtype_size(t->model.io_dtype);
    memset(s, 0, sizeof *s);
    s->q = malloc(rh_trace_qk_per_step(t) * io);
    s->k = malloc(rh_trace_qk_per_step(t) * io);
    s->v = malloc(rh_trace_v_per_step(t) * io);
    s->gate = malloc(rh_trace_gate_per_step(t) * sizeof(float));
    s->beta = malloc(rh_trace_beta_per_step(t) * sizeof(float));
    s->slots = malloc(t->batch * sizeof(uint32_t));
    s->lens = malloc(t->batch * sizeof(uint64_t));
    if (!s->q || !s->k || !s->v || !s->gate || !s->beta || !s->slots || !s->lens) {
        step_buf_free(s);
        return 0;
    }
    s->in = (rssm_step_inputs){s->q, s->k, s->v, s->gate, s->beta};
    return 1;
}

/* Copies rows [0, rows) of each layer of a [layers][B][w] block into a
 * [layers][rows][w] block of dtype `dt`. */
static void gather(void *dst, rssm_dtype dt, const float *src, uint32_t layers, uint32_t B,
                   uint32_t rows, size_t w)
{
    for (uint32_t l = 0; l < layers; l++)
        for (size_t i = 0; i < rows * w; i++)
            rssm_store(dst, dt, (size_t)l * rows * w + i, src[(size_t)l * B * w + i]);
}

uint32_t step_buf_fill(step_buf *s, const rh_trace *t, uint32_t step, const uint32_t *slot_of)
{
    const rssm_model *m = &t->model;
    const uint32_t rows = rh_trace_rows(t, step), L = m->layers, B = t->batch;
    const size_t qkw = (size_t)m->num_qk_heads * m->head_k, vw = (size_t)m->num_v_heads * m->head_v;
    const size_t gw = (size_t)m->num_v_heads * (m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1);
    gather(s->q, m->io_dtype, t->q + step * rh_trace_qk_per_step(t), L, B, rows, qkw);
    gather(s->k, m->io_dtype, t->k + step * rh_trace_qk_per_step(t), L, B, rows, qkw);
    gather(s->v, m->io_dtype, t->v + step * rh_trace_v_per_step(t), L, B, rows, vw);
    gather(s->gate, RSSM_DTYPE_F32, t->gate + step * rh_trace_gate_per_step(t), L, B, rows, gw);
    gather(s->beta, RSSM_DTYPE_F32, t->beta + step * rh_trace_beta_per_step(t), L, B, rows,
           m->num_v_heads);
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t id = (uint32_t)t->slot_ids[(size_t)step * B + r];
        s->slots[r] = slot_of ? slot_of[id] : id;
        s->lens[r] = (uint64_t)t->seq_len_after[(size_t)step * B + r];
    }
    return rows;
}

/* ------------------------------------------------------------ outputs */

void rh_put_ref(rh_prepared *p, uint32_t step, const double *out, uint32_t rows, uint32_t at)
{
    const rh_trace *t = &p->trace;
    const rssm_model *m = &t->model;
    const size_t w = (size_t)m->num_v_heads * m->head_v;
    double *dst = p->ref_out + step * rh_trace_v_per_step(t);
    for (uint32_t l = 0; l < m->layers; l++)
        memcpy(dst + ((size_t)l * t->batch + (at == UINT32_MAX ? 0 : at)) * w, out + (size_t)l * rows * w,
               rows * w * sizeof(double));
}

void rh_put_out(float *outs, const rh_trace *t, rssm_dtype io, uint32_t step, const void *out, uint32_t rows)
{
    const rssm_model *m = &t->model;
    const size_t w = (size_t)m->num_v_heads * m->head_v;
    float *dst = outs + step * rh_trace_v_per_step(t);
    memset(dst, 0, rh_trace_v_per_step(t) * sizeof(float));
    for (uint32_t l = 0; l < m->layers; l++)
        for (size_t i = 0; i < rows * w; i++)
            dst[(size_t)l * t->batch * w + i] = rssm_load(out, io, (size_t)l * rows * w + i);
}

int is_poison_free(const void *out, rssm_dtype dt, size_t n, size_t *first_bad)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(rssm_load(out, dt, i))) {
            *first_bad = i;
            return 0;
        }
    return 1;
}

/* ------------------------------------------------------------ pool and batch */

void engine_close(engine *e)
{
    rssm_batch_destroy(&e->batch);
    rssm_pool_destroy(&e->pool);
    free(e->slot_of);
    e->slot_of = NULL;
}

rssm_status engine_open(engine *e, rssm_backend *b, const rh_trace *t, const rssm_model *m,
                        rssm_flush_policy policy, int write_init, rssm_error *err)
{
    memset(e, 0, sizeof *e);
    rssm_status st = rssm_pool_create(b, m, t->slots, policy, &e->pool, err);
    if (st != RSSM_OK)
        return st;
    if (!(e->slot_of = malloc(t->slots * sizeof *e->slot_of))) {
        engine_close(e);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    const size_t per_state = rh_trace_state_per_slot(t);
    for (uint32_t i = 0; i < t->slots; i++) {
        if ((st = rssm_pool_alloc(e->pool, &e->slot_of[i], err)) != RSSM_OK ||
            (write_init &&
             (st = rssm_pool_write_state(e->pool, e->slot_of[i], t->init_state + i * per_state, err)) != RSSM_OK)) {
            engine_close(e);
            return st;
        }
    }
    if ((st = rssm_batch_create(e->pool, t->batch, &e->batch, err)) != RSSM_OK) {
        engine_close(e);
        return st;
    }
    if (m->gate_mode != RSSM_GATE_PRECOMPUTED) {
        size_t gw = m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1;
        for (uint32_t l = 0; l < m->layers; l++) {
            st = rssm_batch_set_gate_params(e->batch, l, t->A_log + (size_t)l * m->num_v_heads,
                                            t->dt_bias + (size_t)l * m->num_v_heads * gw, err);
            if (st != RSSM_OK) {
                engine_close(e);
                return st;
            }
        }
    }
    return RSSM_OK;
}
