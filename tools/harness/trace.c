/* Traces in memory: sizes, and generation from a seed. Reading and writing
 * them as .npy directories is in trace_io.c. */
#include "trace.h"

#include "dtype.h"
#include "error.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ sizes */

static size_t gate_width(const rssm_model *m)
{
    return m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1;
}

size_t rh_trace_qk_per_step(const rh_trace *t)
{
    return (size_t)t->model.layers * t->batch * t->model.num_qk_heads * t->model.head_k;
}

size_t rh_trace_v_per_step(const rh_trace *t)
{
    return (size_t)t->model.layers * t->batch * t->model.num_v_heads * t->model.head_v;
}

size_t rh_trace_gate_per_step(const rh_trace *t)
{
    return (size_t)t->model.layers * t->batch * t->model.num_v_heads * gate_width(&t->model);
}

size_t rh_trace_beta_per_step(const rh_trace *t)
{
    return (size_t)t->model.layers * t->batch * t->model.num_v_heads;
}

size_t rh_trace_state_per_slot(const rh_trace *t)
{
    return (size_t)t->model.layers * t->model.num_v_heads * t->model.head_v * t->model.head_k;
}

size_t rh_trace_dt_bias_count(const rh_trace *t)
{
    return (size_t)t->model.layers * t->model.num_v_heads * gate_width(&t->model);
}

uint32_t rh_trace_rows(const rh_trace *t, uint32_t step)
{
    const int32_t *ids = t->slot_ids + (size_t)step * t->batch;
    uint32_t r = 0;
    while (r < t->batch && ids[r] >= 0)
        r++;
    return r;
}

/* Zeroes rows [rows, B) of one [T][layers][B][w] array. */
static void zero_idle(const rh_trace *t, float *x, size_t w)
{
    for (uint32_t s = 0; s < t->steps; s++)
        for (uint32_t l = 0; l < t->model.layers; l++) {
            const uint32_t rows = rh_trace_rows(t, s);
            memset(x + (((size_t)s * t->model.layers + l) * t->batch + rows) * w, 0,
                   (t->batch - rows) * w * sizeof *x);
        }
}

void rh_trace_zero_idle(rh_trace *t)
{
    const rssm_model *m = &t->model;
    const size_t qk = (size_t)m->num_qk_heads * m->head_k, v = (size_t)m->num_v_heads * m->head_v;
    zero_idle(t, t->q, qk);
    zero_idle(t, t->k, qk);
    zero_idle(t, t->v, v);
    zero_idle(t, t->gate, (size_t)m->num_v_heads * (m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1));
    zero_idle(t, t->beta, m->num_v_heads);
    if (t->expected)
        zero_idle(t, t->expected, v);
}

void rh_trace_free(rh_trace *t)
{
    if (!t)
        return;
    free(t->q);
    free(t->k);
    free(t->v);
    free(t->gate);
    free(t->beta);
    free(t->A_log);
    free(t->dt_bias);
    free(t->slot_ids);
    free(t->seq_len_after);
    free(t->init_state);
    free(t->expected);
    memset(t, 0, sizeof *t);
}

static int raw_gates(const rssm_model *m) { return m->gate_mode != RSSM_GATE_PRECOMPUTED; }

/* Allocates every array of a trace whose model and sizes are set. */
static rssm_status trace_alloc(rh_trace *t, rssm_error *err)
{
    size_t T = t->steps;
    t->q = malloc(T * rh_trace_qk_per_step(t) * sizeof(float));
    t->k = malloc(T * rh_trace_qk_per_step(t) * sizeof(float));
    t->v = malloc(T * rh_trace_v_per_step(t) * sizeof(float));
    t->gate = malloc(T * rh_trace_gate_per_step(t) * sizeof(float));
    t->beta = malloc(T * rh_trace_beta_per_step(t) * sizeof(float));
    t->slot_ids = malloc(T * t->batch * sizeof(int32_t));
    t->seq_len_after = malloc(T * t->batch * sizeof(int64_t));
    t->init_state = malloc(t->slots * rh_trace_state_per_slot(t) * sizeof(float));
    int ok = t->q && t->k && t->v && t->gate && t->beta && t->slot_ids && t->seq_len_after &&
             t->init_state;
    if (ok && raw_gates(&t->model)) {
        t->A_log = malloc((size_t)t->model.layers * t->model.num_v_heads * sizeof(float));
        t->dt_bias = malloc(rh_trace_dt_bias_count(t) * sizeof(float));
        ok = t->A_log && t->dt_bias;
    }
    if (!ok) {
        rh_trace_free(t);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "trace: out of host memory");
    }
    return RSSM_OK;
}

/* ------------------------------------------------------------ generation */

/* Fills n q/k vectors of width K; normalises them when the kernel will not. */
static void gen_qk(rh_rng *r, float *x, size_t n, size_t K, const rssm_model *m)
{
    for (size_t i = 0; i < n; i++) {
        float *row = x + i * K;
        double ss = 0.0;
        for (size_t c = 0; c < K; c++) {
            double u = rh_rng_uniform(r, -1.0, 1.0);
            if (u == 0.0)
                u = 0.5; /* never zero */
            row[c] = (float)u;
            ss += u * u;
        }
        if (!m->qk_l2norm)
            for (size_t c = 0; c < K; c++)
                row[c] = (float)(row[c] / sqrt(ss));
        for (size_t c = 0; c < K; c++)
            row[c] = rssm_round_to(m->io_dtype, row[c]);
    }
}

rssm_status rh_trace_generate(const rh_trace_spec *s, rh_trace *t, rssm_error *err)
{
    if (!s || !t)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "trace: NULL argument");
    memset(t, 0, sizeof *t);
    rssm_status st = rssm_model_validate(&s->model, err);
    if (st != RSSM_OK)
        return st;
    if (s->steps == 0 || s->batch == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "trace: steps and batch must be > 0");
    if (s->copy_step && s->batch < 2)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "trace: a copy needs at least 2 rows");
    t->model = s->model;
    t->steps = s->steps;
    t->batch = s->batch;
    t->slots = s->batch;
    t->snapshot_interval = s->snapshot_interval;
    if ((st = trace_alloc(t, err)) != RSSM_OK)
        return st;

    const rssm_model *m = &t->model;
    const size_t K = m->head_k, V = m->head_v, HV = m->num_v_heads, GW = gate_width(m);
    rh_rng r;
    rh_rng_seed(&r, s->seed, s->stream);

    for (size_t i = 0; i < t->slots * rh_trace_state_per_slot(t); i++)
        t->init_state[i] = (float)(0.1 * rh_rng_normal(&r));

    if (raw_gates(m)) {
        for (size_t i = 0; i < (size_t)m->layers * HV; i++)
            t->A_log[i] = (float)rh_rng_uniform(&r, -4.0, 0.0);
        for (size_t i = 0; i < rh_trace_dt_bias_count(t); i++)
            t->dt_bias[i] = (float)(0.5 * rh_rng_normal(&r));
    }

    /* Rows join in order, so the active rows of a step are a prefix. */
    uint32_t *join = calloc(t->batch, sizeof *join);
    int64_t *prefill = calloc(t->batch, sizeof *prefill);
    if (!join || !prefill) {
        free(join);
        free(prefill);
        rh_trace_free(t);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "trace: out of host memory");
    }
    for (uint32_t row = 0; row < t->batch; row++) {
        join[row] = s->admit_every * row;
        prefill[row] = (int64_t)rh_rng_range(&r, 1, 300);
    }
    if (s->copy_step) {
        uint32_t last = t->batch - 1;
        join[last] = s->copy_step > join[last] ? s->copy_step : join[last];
        /* The copy continues row 0's sequence: same length at the copy. */
        prefill[last] = prefill[0] + (int64_t)(join[last] - join[0]);
    }

    for (uint32_t step = 0; step < t->steps; step++) {
        for (uint32_t row = 0; row < t->batch; row++) {
            size_t i = (size_t)step * t->batch + row;
            int active = step >= join[row];
            t->slot_ids[i] = active ? (int32_t)row : -1;
            t->seq_len_after[i] = active ? prefill[row] + (int64_t)(step - join[row]) + 1 : 0;
        }
        size_t nqk = rh_trace_qk_per_step(t), nv = rh_trace_v_per_step(t);
        gen_qk(&r, t->q + step * nqk, nqk / K, K, m);
        gen_qk(&r, t->k + step * nqk, nqk / K, K, m);
        float *v = t->v + step * nv;
        const size_t v_row = (size_t)m->num_v_heads * m->head_v;
        for (size_t i = 0; i < nv; i++) {
            double u = rh_rng_uniform(&r, -1.0, 1.0);
            if (s->v_scale != 0.0f && step >= s->v_scale_from && (i / v_row) % t->batch == s->v_scale_row)
                u *= s->v_scale;
            v[i] = rssm_round_to(m->io_dtype, (float)(u == 0.0 ? 0.25 : u));
        }
        size_t ng = rh_trace_gate_per_step(t), nb = rh_trace_beta_per_step(t);
        float *g = t->gate + step * ng, *b = t->beta + step * nb;
        for (size_t i = 0; i < ng; i++)
            g[i] = raw_gates(m) ? (float)rh_rng_normal(&r)
                                : (float)-exp(rh_rng_uniform(&r, log(1e-3), 0.0));
        for (size_t i = 0; i < nb; i++)
            b[i] = raw_gates(m) ? (float)rh_rng_normal(&r) : (float)rh_rng_uniform(&r, 0.05, 0.95);
    }
    (void)V;
    (void)GW;
    free(join);
    free(prefill);
    rh_trace_zero_idle(t);
    return rssm_clear_error(err);
}
