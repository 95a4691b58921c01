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
    free(t->drafts);
    free(t->accepted);
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

uint32_t rh_trace_window_width(const rh_trace *t, uint32_t e)
{
    uint32_t w = 1;
    for (uint32_t b = 0; b < t->batch; b++) {
        const int32_t d = t->drafts[(size_t)e * t->batch + b];
        w = d > 0 && (uint32_t)d > w ? (uint32_t)d : w;
    }
    return w;
}

/* The engine steps of a generated speculative-decode trace (rh_trace_spec
 * .verify = W): round w is a window of W steps (engine step 2w) and a step
 * of ordinary decodes (2w + 1). Sequence lengths follow the accepted tokens:
 * a window's tokens count on from the row's length before it. */
static rssm_status gen_windows(rh_trace *t, uint32_t W, rssm_error *err)
{
    const uint32_t B = t->batch, rounds = t->steps / (W + 1);
    if (rounds == 0 || t->steps != rounds * (W + 1))
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "trace: %u steps are not whole rounds of a %u-token window and a step", t->steps, W);
    t->windows = 2 * rounds;
    t->drafts = calloc((size_t)t->windows * B, sizeof *t->drafts);
    t->accepted = calloc((size_t)t->windows * B, sizeof *t->accepted);
    if (!t->drafts || !t->accepted)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "trace: out of host memory");
    const uint32_t pattern[4] = {1, W < 2 ? W : 2, W / 2 ? W / 2 : 1, W};
    for (uint32_t w = 0; w < rounds; w++)
        for (uint32_t r = 0; r < B; r++) {
            /* with fewer than four rows, the last one takes the whole window */
            const uint32_t T = B < 4 && r == B - 1 ? W : pattern[(w + r) % 4];
            t->drafts[(size_t)2 * w * B + r] = (int32_t)T;
            t->accepted[(size_t)2 * w * B + r] = (int32_t)((r + 3 * w) % (T + 1));
            t->accepted[(size_t)(2 * w + 1) * B + r] = 1;
        }
    for (uint32_t r = 0; r < B; r++) {
        int64_t len = t->seq_len_after[r] - 1;
        for (uint32_t e = 0, s = 0; e < t->windows; s += rh_trace_window_width(t, e), e++) {
            for (uint32_t x = 0; x < rh_trace_window_width(t, e); x++)
                t->seq_len_after[(size_t)(s + x) * B + r] = len + x + 1;
            const int32_t d = t->drafts[(size_t)e * B + r];
            len += d == 0 ? 1 : t->accepted[(size_t)e * B + r];
        }
    }
    return RSSM_OK;
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
    if (s->verify && (s->admit_every || s->copy_step || s->verify > RSSM_MAX_DRAFT))
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "trace: a speculative-decode trace has every row from step 0, no copy, and windows of at "
                              "most %u tokens", RSSM_MAX_DRAFT);
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
    if (s->verify && (st = gen_windows(t, s->verify, err)) != RSSM_OK) {
        rh_trace_free(t);
        return st;
    }
    return rssm_clear_error(err);
}
