/* The float64 oracle (see oracle.h). Deliberately the plainest code that
 * states the math: no ring, no vectorisation tricks, every quantity in
 * double. */
#include "oracle.h"
#include "dtype.h"
#include "error.h"
#include "rssm_layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct rssm_oracle {
    rssm_model model;
    uint32_t slots;
    size_t state_len;    /* doubles per slot: layers * HV * V * K */
    double *state;       /* [slots][layers][HV][V][K] */
    double *A_log;       /* [layers][HV] */
    double *dt_bias;     /* [layers][HV * gate width] */
    double *scratch;     /* q, k, g, Sq, Sk: 3K + 2V */
};

static size_t gate_width(const rssm_model *m) { return m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1; }

/* The two loops over a head's V x K state below run K multiply-adds per row,
 * V rows per head per step: with the sanitizers' checks on every access
 * (ASan's shadow, UBSan's pointer overflow and alignment) they were a third
 * of the sanitizer build's conformance time (docs/testing.md), so these two
 * go unchecked. Their bounds are the caller's (a head's rows within the
 * slot's state, the slot checked by check_slot, and the scratch vectors);
 * every other access of the oracle stays checked. */
#if defined(__GNUC__) || defined(__clang__)
#define ORACLE_HOT_LOOP __attribute__((no_sanitize("address", "undefined")))
#else
#define ORACLE_HOT_LOOP
#endif

/* S diag(alpha) in place, row by row, then (S q)[v] and (S k)[v]. */
static ORACLE_HOT_LOOP void decay_and_read(double *S, size_t V, size_t K, const double *alpha, size_t gw,
                                           const double *q, const double *k, double *sq, double *sk)
{
    for (size_t v = 0; v < V; v++) {
        double *row = S + v * K;
        double aq = 0.0, ak = 0.0;
        for (size_t c = 0; c < K; c++) {
            row[c] *= alpha[gw == 1 ? 0 : c];
            aq += row[c] * q[c];
            ak += row[c] * k[c];
        }
        sq[v] = aq;
        sk[v] = ak;
    }
}

/* row += d k */
static ORACLE_HOT_LOOP void add_scaled(double *row, double d, const double *k, size_t K)
{
    for (size_t c = 0; c < K; c++)
        row[c] += d * k[c];
}

rssm_status rssm_oracle_create(const rssm_model *model, uint32_t slots, rssm_oracle **out,
                               rssm_error *err)
{
    if (!out)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "oracle: out must not be NULL");
    *out = NULL;
    rssm_status st = rssm_model_validate(model, err);
    if (st != RSSM_OK)
        return st;
    if (slots == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "oracle: slots must be >= 1");
    const rssm_model *m = model;
    const size_t len = (size_t)m->layers * m->num_v_heads * m->head_v * m->head_k;
    if (len > SIZE_MAX / sizeof(double) / slots)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "oracle: %u slots overflow the address space",
                              slots);
    rssm_oracle *o = calloc(1, sizeof *o);
    if (!o)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "oracle: out of host memory");
    o->model = *m;
    o->slots = slots;
    o->state_len = len;
    o->state = calloc(len * slots, sizeof(double));
    o->A_log = calloc((size_t)m->layers * m->num_v_heads, sizeof(double));
    o->dt_bias = calloc((size_t)m->layers * m->num_v_heads * gate_width(m), sizeof(double));
    o->scratch = calloc(3 * (size_t)m->head_k + 2 * (size_t)m->head_v, sizeof(double));
    if (!o->state || !o->A_log || !o->dt_bias || !o->scratch) {
        rssm_oracle_destroy(&o);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY,
                              "oracle: could not allocate %zu bytes of state for %u slots",
                              len * slots * sizeof(double), slots);
    }
    *out = o;
    return rssm_clear_error(err);
}

void rssm_oracle_destroy(rssm_oracle **o)
{
    if (!o || !*o)
        return;
    free((*o)->state);
    free((*o)->A_log);
    free((*o)->dt_bias);
    free((*o)->scratch);
    free(*o);
    *o = NULL;
}

const rssm_model *rssm_oracle_model(const rssm_oracle *o) { return &o->model; }

static rssm_status check_slot(const rssm_oracle *o, uint32_t slot, rssm_error *err)
{
    if (slot >= o->slots)
        return rssm_set_error(err, RSSM_ERR_BAD_SLOT, "oracle: slot %u is out of range (has %u)", slot,
                              o->slots);
    return RSSM_OK;
}

rssm_status rssm_oracle_set_state(rssm_oracle *o, uint32_t slot, const float *state, rssm_error *err)
{
    if (!o || !state)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "oracle: NULL argument");
    rssm_status st = check_slot(o, slot, err);
    if (st != RSSM_OK)
        return st;
    double *dst = o->state + slot * o->state_len;
    for (size_t i = 0; i < o->state_len; i++)
        dst[i] = state[i];
    return rssm_clear_error(err);
}

rssm_status rssm_oracle_get_state(const rssm_oracle *o, uint32_t slot, double *state, rssm_error *err)
{
    if (!o || !state)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "oracle: NULL argument");
    rssm_status st = check_slot(o, slot, err);
    if (st != RSSM_OK)
        return st;
    memcpy(state, o->state + slot * o->state_len, o->state_len * sizeof(double));
    return rssm_clear_error(err);
}

rssm_status rssm_oracle_copy(rssm_oracle *o, uint32_t src, uint32_t dst, rssm_error *err)
{
    if (!o)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "oracle: NULL argument");
    rssm_status st = check_slot(o, src, err);
    if (st == RSSM_OK)
        st = check_slot(o, dst, err);
    if (st != RSSM_OK)
        return st;
    if (src == dst)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "oracle: copy of slot %u onto itself", src);
    memcpy(o->state + dst * o->state_len, o->state + src * o->state_len, o->state_len * sizeof(double));
    return rssm_clear_error(err);
}

rssm_status rssm_oracle_set_gate_params(rssm_oracle *o, uint32_t layer, const float *A_log,
                                        const float *dt_bias, rssm_error *err)
{
    if (!o || !A_log || !dt_bias)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "oracle: NULL argument");
    const rssm_model *m = &o->model;
    if (layer >= m->layers)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "oracle: layer %u is out of range (has %u)",
                              layer, m->layers);
    const size_t HV = m->num_v_heads, gw = gate_width(m);
    for (size_t i = 0; i < HV; i++)
        o->A_log[layer * HV + i] = A_log[i];
    for (size_t i = 0; i < HV * gw; i++)
        o->dt_bias[layer * HV * gw + i] = dt_bias[i];
    return rssm_clear_error(err);
}

static double softplus(double x) { return x > (double)RSSM_SOFTPLUS_THRESHOLD ? x : log1p(exp(x)); }
static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* n io-dtype values at element offset `at` as doubles (exact). */
static void load(double *dst, const void *src, rssm_dtype t, size_t at, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = rssm_load(src, t, at + i);
}

static void l2_normalise(double *x, size_t n)
{
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double norm = sqrt(ss + (double)RSSM_L2NORM_EPS);
    for (size_t i = 0; i < n; i++)
        x[i] /= norm;
}

rssm_status rssm_oracle_step(rssm_oracle *o, uint32_t rows, const uint32_t *slots,
                             const rssm_step_inputs *in, double *out, rssm_error *err)
{
    if (!o || !slots || !in || !out || !in->q || !in->k || !in->v || !in->gate || !in->beta)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "oracle: NULL argument");
    for (uint32_t r = 0; r < rows; r++) {
        rssm_status st = check_slot(o, slots[r], err);
        if (st != RSSM_OK)
            return st;
        for (uint32_t r2 = 0; r2 < r; r2++)
            if (slots[r2] == slots[r])
                return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                      "oracle: rows %u and %u both name slot %u", r2, r, slots[r]);
    }
    const rssm_model *m = &o->model;
    const size_t H = m->num_qk_heads, HV = m->num_v_heads, K = m->head_k, V = m->head_v;
    const size_t gw = gate_width(m), group = HV / H;
    const double scale = m->q_scale > 0.0f ? (double)m->q_scale : 1.0 / sqrt((double)K);
    double *q = o->scratch, *k = q + K, *alpha = k + K, *sq = alpha + K, *sk = sq + V;

    for (size_t l = 0; l < m->layers; l++) {
        for (size_t r = 0; r < rows; r++) {
            const size_t lr = l * rows + r; /* [layers][rows] */
            for (size_t hv = 0; hv < HV; hv++) {
                const size_t h = hv / group;
                load(q, in->q, m->io_dtype, (lr * H + h) * K, K);
                load(k, in->k, m->io_dtype, (lr * H + h) * K, K);
                if (m->qk_l2norm) {
                    l2_normalise(q, K);
                    l2_normalise(k, K);
                }
                for (size_t c = 0; c < K; c++)
                    q[c] *= scale;

                const float *gate = in->gate + (lr * HV + hv) * gw;
                double beta = in->beta[lr * HV + hv];
                for (size_t c = 0; c < gw; c++) {
                    double g = gate[c];
                    if (m->gate_mode != RSSM_GATE_PRECOMPUTED) {
                        const double A = exp(o->A_log[l * HV + hv]);
                        const double x = g + o->dt_bias[(l * HV + hv) * gw + c];
                        g = m->gate_mode == RSSM_GATE_RAW ? -A * softplus(x)
                                                          : (double)m->gate_lower_bound * sigmoid(A * x);
                    }
                    alpha[c] = exp(g);
                }
                if (m->gate_mode != RSSM_GATE_PRECOMPUTED)
                    beta = sigmoid(beta);

                double *S = o->state + slots[r] * o->state_len + (l * HV + hv) * V * K;
                double kq = 0.0;
                for (size_t c = 0; c < K; c++)
                    kq += k[c] * q[c];
                /* S̄ = S diag(α), in place; then S̄q, S̄k */
                decay_and_read(S, V, K, alpha, gw, q, k, sq, sk);
                double *o_out = out + (lr * HV + hv) * V;
                for (size_t v = 0; v < V; v++) {
                    const double d = beta * (rssm_load(in->v, m->io_dtype, (lr * HV + hv) * V + v) - sk[v]);
                    add_scaled(S + v * K, d, k, K);
                    o_out[v] = sq[v] + d * kq;
                }
            }
        }
    }
    return rssm_clear_error(err);
}
