/* The trace directory format of docs/trace-format.md: model.json plus one
 * .npy file per array, read with every shape checked against the model. */
#include "trace.h"

#include "dtype.h"
#include "error.h"
#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ model.json */

/* The model as one flat JSON object, with the snapshot interval. */
static int write_model_json(const char *path, const rh_trace *t)
{
    const rssm_model *m = &t->model;
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    fprintf(f,
            "{\n"
            "  \"layers\": %u,\n  \"num_qk_heads\": %u,\n  \"num_v_heads\": %u,\n"
            "  \"head_k\": %u,\n  \"head_v\": %u,\n"
            "  \"gate_kind\": \"%s\",\n  \"gate_mode\": \"%s\",\n  \"gate_lower_bound\": %.9g,\n"
            "  \"replay\": %d,\n  \"ring_len\": %u,\n"
            "  \"state_dtype\": \"%s\",\n  \"ring_dtype\": \"%s\",\n  \"io_dtype\": \"%s\",\n"
            "  \"qk_l2norm\": %d,\n  \"q_scale\": %.9g,\n"
            "  \"snapshot_interval\": %u\n"
            "}\n",
            m->layers, m->num_qk_heads, m->num_v_heads, m->head_k, m->head_v,
            rssm_gate_kind_name(m->gate_kind), rssm_gate_mode_name(m->gate_mode),
            (double)m->gate_lower_bound, m->replay, m->ring_len, rssm_dtype_name(m->state_dtype),
            rssm_dtype_name(m->ring_dtype), rssm_dtype_name(m->io_dtype), m->qk_l2norm,
            (double)m->q_scale, t->snapshot_interval);
    return fclose(f) == 0;
}

static int parse_dtype(const char *s, rssm_dtype *out)
{
    static const rssm_dtype all[] = {RSSM_DTYPE_F32, RSSM_DTYPE_F16, RSSM_DTYPE_BF16};
    for (size_t i = 0; i < 3; i++)
        if (strcmp(s, rssm_dtype_name(all[i])) == 0) {
            *out = all[i];
            return 1;
        }
    return 0;
}

/* Applies one "key": value pair; value is a string (is_str) or a number. */
static rssm_status model_field(rh_trace *t, const char *key, const char *val, int is_str,
                               const char *path, rssm_error *err)
{
    rssm_model *m = &t->model;
    char *end = NULL;
    double num = is_str ? 0.0 : strtod(val, &end);
    if (!is_str && (end == val || *end != '\0'))
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: \"%s\": '%s' is not a number", path, key, val);
    struct { const char *name; uint32_t *dst; } u32[] = {
        {"layers", &m->layers}, {"num_qk_heads", &m->num_qk_heads}, {"num_v_heads", &m->num_v_heads},
        {"head_k", &m->head_k}, {"head_v", &m->head_v}, {"ring_len", &m->ring_len},
        {"snapshot_interval", &t->snapshot_interval},
    };
    for (size_t i = 0; i < sizeof u32 / sizeof u32[0]; i++) {
        if (strcmp(key, u32[i].name) == 0) {
            if (is_str || num < 0 || num > 4294967295.0 || num != floor(num))
                return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: \"%s\" must be a non-negative integer",
                                      path, key);
            *u32[i].dst = (uint32_t)num;
            return RSSM_OK;
        }
    }
    struct { const char *name; int *dst; } flags[] = {{"replay", &m->replay}, {"qk_l2norm", &m->qk_l2norm}};
    for (size_t i = 0; i < 2; i++) {
        if (strcmp(key, flags[i].name) == 0) {
            if (is_str && (strcmp(val, "true") == 0 || strcmp(val, "false") == 0))
                num = val[0] == 't';
            else if (is_str || (num != 0 && num != 1))
                return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: \"%s\" must be 0 or 1", path, key);
            *flags[i].dst = (int)num;
            return RSSM_OK;
        }
    }
    if (strcmp(key, "gate_lower_bound") == 0 || strcmp(key, "q_scale") == 0) {
        if (is_str)
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: \"%s\" must be a number", path, key);
        *(key[0] == 'g' ? &m->gate_lower_bound : &m->q_scale) = (float)num;
        return RSSM_OK;
    }
    if (strcmp(key, "gate_kind") == 0 && is_str) {
        if (strcmp(val, "gdn") == 0)
            m->gate_kind = RSSM_GATE_GDN;
        else if (strcmp(val, "kda") == 0)
            m->gate_kind = RSSM_GATE_KDA;
        else
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: gate_kind '%s' (want gdn or kda)", path, val);
        return RSSM_OK;
    }
    if (strcmp(key, "gate_mode") == 0 && is_str) {
        if (strcmp(val, "precomputed") == 0)
            m->gate_mode = RSSM_GATE_PRECOMPUTED;
        else if (strcmp(val, "raw") == 0)
            m->gate_mode = RSSM_GATE_RAW;
        else if (strcmp(val, "raw-safe") == 0)
            m->gate_mode = RSSM_GATE_RAW_SAFE;
        else
            return rssm_set_error(err, RSSM_ERR_FORMAT,
                                  "%s: gate_mode '%s' (want precomputed, raw or raw-safe)", path, val);
        return RSSM_OK;
    }
    rssm_dtype *dt = strcmp(key, "state_dtype") == 0 ? &m->state_dtype
                     : strcmp(key, "ring_dtype") == 0 ? &m->ring_dtype
                     : strcmp(key, "io_dtype") == 0   ? &m->io_dtype
                                                      : NULL;
    if (dt) {
        if (!is_str || !parse_dtype(val, dt))
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: \"%s\" must be \"fp32\", \"fp16\" or \"bf16\"",
                                  path, key);
        return RSSM_OK;
    }
    return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: unknown key \"%s\"", path, key);
}

/* A flat JSON object whose values are strings, numbers, true or false. */
static rssm_status read_model_json(const char *path, rh_trace *t, rssm_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return rssm_set_error(err, RSSM_ERR_IO, "%s: %s", path, strerror(errno));
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int too_long = !feof(f);
    fclose(f);
    if (too_long)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: longer than %zu bytes", path, sizeof buf - 1);
    buf[n] = '\0';

    /* Defaults are the preset's, so a file may name only what differs. */
    rssm_model_preset(&t->model, "qwen3.5-gdn", NULL);
    t->snapshot_interval = 0;
    const char *p = buf;
#define SKIP() while (*p && isspace((unsigned char)*p)) p++
    SKIP();
    if (*p++ != '{')
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: not a JSON object", path);
    for (;;) {
        SKIP();
        if (*p == '}')
            break;
        char key[64], val[64];
        size_t k = 0;
        if (*p++ != '"')
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: expected a quoted key", path);
        while (*p && *p != '"' && k + 1 < sizeof key)
            key[k++] = *p++;
        key[k] = '\0';
        if (*p++ != '"')
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: malformed key", path);
        SKIP();
        if (*p++ != ':')
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: expected ':' after \"%s\"", path, key);
        SKIP();
        int is_str = *p == '"';
        size_t v = 0;
        if (is_str) {
            p++;
            while (*p && *p != '"' && v + 1 < sizeof val)
                val[v++] = *p++;
            if (*p++ != '"')
                return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: malformed value of \"%s\"", path, key);
        } else {
            while (*p && !isspace((unsigned char)*p) && *p != ',' && *p != '}' && v + 1 < sizeof val)
                val[v++] = *p++;
            /* true / false arrive unquoted: hand them over as words. */
        }
        val[v] = '\0';
        int word = !is_str && (strcmp(val, "true") == 0 || strcmp(val, "false") == 0);
        rssm_status st = model_field(t, key, val, is_str || word, path, err);
        if (st != RSSM_OK)
            return st;
        SKIP();
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p != '}')
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: expected ',' or '}' after \"%s\"", path, key);
    }
#undef SKIP
    rssm_error verr;
    if (rssm_model_validate(&t->model, &verr) != RSSM_OK)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: invalid model: %s", path, verr.message);
    return RSSM_OK;
}

/* ------------------------------------------------------------ .npy files */

static void join_path(char *out, size_t size, const char *dir, const char *file)
{
    snprintf(out, size, "%s/%s", dir, file);
}

/* Reads DIR/file, checks its shape, converts it to fp32 (floats) or the
 * integer type of `dst_int`. `optional`: a missing file leaves *dst NULL. */
static rssm_status load_array(const char *dir, const char *file, uint32_t ndim, const uint64_t *shape,
                              int want_int, size_t int_size, void **dst, int optional, rssm_error *err)
{
    char path[4096];
    join_path(path, sizeof path, dir, file);
    *dst = NULL;
    rh_npy a;
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        if (optional && errno == ENOENT)
            return RSSM_OK;
        return rssm_set_error(err, RSSM_ERR_IO, "%s: %s", path, strerror(errno));
    }
    fclose(probe);
    rssm_status st = rh_npy_read(path, &a, err);
    if (st != RSSM_OK)
        return st;
    int same = a.ndim == ndim;
    for (uint32_t i = 0; same && i < ndim; i++)
        same = a.shape[i] == shape[i];
    if (!same) {
        char have[200], want[200];
        rh_npy_shape_str(a.ndim, a.shape, have, sizeof have);
        rh_npy_shape_str(ndim, shape, want, sizeof want);
        rh_npy_free(&a);
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: shape %s, expected %s", path, have, want);
    }
    int is_float = a.dtype == RH_NPY_F4 || a.dtype == RH_NPY_F2;
    if (is_float == want_int) {
        /* named before the free, which zeroes the struct (dtype 0 is <f4) */
        const char *found = rh_npy_dtype_descr(a.dtype);
        rh_npy_free(&a);
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: dtype %s, expected %s", path, found,
                              want_int ? "an integer type (<i4, <i8, <u4)" : "<f4 or <f2");
    }
    void *out = malloc(a.count * (want_int ? int_size : sizeof(float)) + 1);
    if (!out) {
        rh_npy_free(&a);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    }
    for (size_t i = 0; i < a.count; i++) {
        if (!want_int) {
            float x = a.dtype == RH_NPY_F4 ? ((const float *)a.data)[i]
                                           : rssm_f16_to_f32(((const uint16_t *)a.data)[i]);
            ((float *)out)[i] = x;
            continue;
        }
        int64_t x = a.dtype == RH_NPY_I4   ? ((const int32_t *)a.data)[i]
                    : a.dtype == RH_NPY_U4 ? (int64_t)((const uint32_t *)a.data)[i]
                                           : ((const int64_t *)a.data)[i];
        if (int_size == 4) {
            if (x < INT32_MIN || x > INT32_MAX) {
                free(out);
                rh_npy_free(&a);
                return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: value %lld at %zu does not fit int32", path,
                                      (long long)x, i);
            }
            ((int32_t *)out)[i] = (int32_t)x;
        } else {
            ((int64_t *)out)[i] = x;
        }
    }
    rh_npy_free(&a);
    *dst = out;
    return RSSM_OK;
}

/* An array [T][layers][B][w] whose idle rows are zeroed: names the file,
 * step, layer and row of the first non-finite value. */
static int all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

static rssm_status check_rows_finite(const rh_trace *t, const char *dir, const char *file, float *x, size_t w,
                                     rssm_error *err)
{
    const uint32_t layers = t->model.layers;
    for (uint32_t s = 0; s < t->steps; s++) {
        const uint32_t rows = rh_trace_rows(t, s);
        for (uint32_t l = 0; l < layers; l++)
            for (uint32_t r = 0; r < t->batch; r++) {
                const float *row = x + (((size_t)s * layers + l) * t->batch + r) * w;
                if (r < rows && !all_finite(row, w))
                    return rssm_set_error(err, RSSM_ERR_FORMAT,
                                          "%s/%s: step %u layer %u row %u holds NaN or infinity", dir, file, s, l, r);
            }
    }
    return RSSM_OK;
}

/* drafts.npy and accepted.npy, both or neither: the engine steps of a
 * speculative-decode trace (docs/trace-format.md). Each engine step is all
 * ordinary decodes (every active row's drafts 0) or all windows (every
 * active row's 1..RSSM_MAX_DRAFT, accepted 0..drafts, the same rows at each
 * of its tokens' steps); the steps' widths add up to the trace's. Idle
 * rows' entries are ignored (zeroed). */
static rssm_status load_windows(const char *dir, rh_trace *t, rssm_error *err)
{
    char path[4096];
    join_path(path, sizeof path, dir, "drafts.npy");
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return errno == ENOENT ? RSSM_OK : rssm_set_error(err, RSSM_ERR_IO, "%s: %s", path, strerror(errno));
    fclose(probe);
    rh_npy d;
    rssm_status st = rh_npy_read(path, &d, err);
    if (st != RSSM_OK)
        return st;
    const uint64_t E = d.ndim == 2 ? d.shape[0] : 0;
    const int shape_ok = d.ndim == 2 && E > 0 && E <= t->steps && d.shape[1] == t->batch;
    rh_npy_free(&d);
    if (!shape_ok)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: must be [engine steps][batch %u], at most %u engine steps",
                              path, t->batch, t->steps);
    const uint64_t es[2] = {E, t->batch};
    if ((st = load_array(dir, "drafts.npy", 2, es, 1, 4, (void **)&t->drafts, 0, err)) != RSSM_OK ||
        (st = load_array(dir, "accepted.npy", 2, es, 1, 4, (void **)&t->accepted, 0, err)) != RSSM_OK)
        return st;
    t->windows = (uint32_t)E;
    const uint32_t B = t->batch;
    uint32_t s0 = 0;
    for (uint32_t e = 0; e < t->windows; s0 += rh_trace_window_width(t, e), e++) {
        if (s0 >= t->steps)
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: engine step %u starts after the trace's %u steps", path,
                                  e, t->steps);
        const uint32_t rows = rh_trace_rows(t, s0);
        int32_t *dr = t->drafts + (size_t)e * B, *ac = t->accepted + (size_t)e * B;
        for (uint32_t r = rows; r < B; r++)
            dr[r] = ac[r] = 0;
        const int window = dr[0] != 0;
        for (uint32_t r = 0; r < rows; r++) {
            if (dr[r] < 0 || dr[r] > (int32_t)RSSM_MAX_DRAFT || (dr[r] != 0) != window)
                return rssm_set_error(err, RSSM_ERR_FORMAT,
                                      "%s: engine step %u row %u: %d draft tokens (every row 0, or every row in 1..%u)",
                                      path, e, r, dr[r], RSSM_MAX_DRAFT);
            if (window && (ac[r] < 0 || ac[r] > dr[r]))
                return rssm_set_error(err, RSSM_ERR_FORMAT, "%s/accepted.npy: engine step %u row %u: %d of %d accepted",
                                      dir, e, r, ac[r], dr[r]);
        }
        for (uint32_t x = 1; window && x < rh_trace_window_width(t, e); x++)
            if (s0 + x >= t->steps || rh_trace_rows(t, s0 + x) != rows ||
                memcmp(t->slot_ids + (size_t)(s0 + x) * B, t->slot_ids + (size_t)s0 * B, rows * sizeof(int32_t)) != 0)
                return rssm_set_error(err, RSSM_ERR_FORMAT,
                                      "%s/slots.npy: step %u, token %u of the window of engine step %u, has other rows "
                                      "than its first step",
                                      dir, s0 + x, x, e);
    }
    if (s0 != t->steps)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: the engine steps take %u steps, the trace has %u", path, s0,
                              t->steps);
    return RSSM_OK;
}

rssm_status rh_trace_load(const char *dir, rh_trace *t, rssm_error *err)
{
    if (!dir || !t)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "trace: NULL argument");
    memset(t, 0, sizeof *t);
    char path[4096];
    join_path(path, sizeof path, dir, "model.json");
    rssm_status st = read_model_json(path, t, err);
    if (st != RSSM_OK)
        return st;
    const rssm_model *m = &t->model;

    /* The step count, batch and slot count come from slots.npy and
     * initial_state.npy; every other shape is then fixed by the model. */
    join_path(path, sizeof path, dir, "slots.npy");
    rh_npy ids;
    if ((st = rh_npy_read(path, &ids, err)) != RSSM_OK)
        return st;
    if (ids.ndim != 2 || ids.shape[0] == 0 || ids.shape[1] == 0 || ids.shape[0] > UINT32_MAX ||
        ids.shape[1] > UINT32_MAX) {
        rh_npy_free(&ids);
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: must be a non-empty [steps][batch] array", path);
    }
    t->steps = (uint32_t)ids.shape[0];
    t->batch = (uint32_t)ids.shape[1];
    rh_npy_free(&ids);
    join_path(path, sizeof path, dir, "initial_state.npy");
    rh_npy st0;
    if ((st = rh_npy_read(path, &st0, err)) != RSSM_OK)
        return st;
    uint64_t sshape[5] = {0, m->layers, m->num_v_heads, m->head_v, m->head_k};
    sshape[0] = st0.ndim == 5 ? st0.shape[0] : 0;
    rh_npy_free(&st0);
    if (sshape[0] == 0 || sshape[0] > UINT32_MAX)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: must be [slots][layers][HV][V][K] with slots > 0",
                              path);
    t->slots = (uint32_t)sshape[0];

    const uint64_t T = t->steps, L = m->layers, B = t->batch, H = m->num_qk_heads, HV = m->num_v_heads,
                   K = m->head_k, V = m->head_v;
    const uint64_t qs[5] = {T, L, B, H, K}, vs[5] = {T, L, B, HV, V}, gs[5] = {T, L, B, HV, K};
    const uint64_t ts[2] = {T, B}, ws[3] = {L, HV, K};
    const int kda = m->gate_kind == RSSM_GATE_KDA;
    void **dst[] = {(void **)&t->q, (void **)&t->k, (void **)&t->v, (void **)&t->gate, (void **)&t->beta};
    const char *names[] = {"q.npy", "k.npy", "v.npy", "gate.npy", "beta.npy"};
    const uint64_t *shapes[] = {qs, qs, vs, gs, vs};
    const uint32_t ndims[] = {5, 5, 5, kda ? 5u : 4u, 4};
    for (size_t i = 0; i < 5; i++)
        if ((st = load_array(dir, names[i], ndims[i], shapes[i], 0, 0, dst[i], 0, err)) != RSSM_OK)
            goto fail;
    if ((st = load_array(dir, "slots.npy", 2, ts, 1, 4, (void **)&t->slot_ids, 0, err)) != RSSM_OK ||
        (st = load_array(dir, "seq_len_after.npy", 2, ts, 1, 8, (void **)&t->seq_len_after, 0, err)) != RSSM_OK ||
        (st = load_array(dir, "initial_state.npy", 5, sshape, 0, 0, (void **)&t->init_state, 0, err)) != RSSM_OK ||
        (st = load_array(dir, "expected_out.npy", 5, vs, 0, 0, (void **)&t->expected, 1, err)) != RSSM_OK)
        goto fail;
    if (m->gate_mode != RSSM_GATE_PRECOMPUTED) {
        if ((st = load_array(dir, "A_log.npy", 2, ws, 0, 0, (void **)&t->A_log, 0, err)) != RSSM_OK ||
            (st = load_array(dir, "dt_bias.npy", kda ? 3u : 2u, ws, 0, 0, (void **)&t->dt_bias, 0, err)) != RSSM_OK)
            goto fail;
    }

    /* Values: ids valid, every active row's inputs finite (idle rows'
     * inputs are ignored: zeroed here), q/k/v exact in the io dtype
     * (rounded here). */
    size_t nqk = T * rh_trace_qk_per_step(t), nv = T * rh_trace_v_per_step(t);
    for (uint32_t s = 0; s < t->steps; s++)
        if (rh_trace_rows(t, s) == 0) {
            st = rssm_set_error(err, RSSM_ERR_FORMAT, "%s/slots.npy: step %u has no active row (every slot -1)",
                                dir, s);
            goto fail;
        }
    rh_trace_zero_idle(t);
    {
        float *arrays[] = {t->q, t->k, t->v, t->gate, t->beta};
        const size_t widths[] = {H * K, H * K, HV * V, HV * (kda ? K : 1), HV};
        for (size_t i = 0; i < 5; i++)
            if ((st = check_rows_finite(t, dir, names[i], arrays[i], widths[i], err)) != RSSM_OK)
                goto fail;
        const size_t per_slot = rh_trace_state_per_slot(t);
        for (uint32_t sl = 0; sl < t->slots; sl++)
            if (!all_finite(t->init_state + sl * per_slot, per_slot)) {
                st = rssm_set_error(err, RSSM_ERR_FORMAT, "%s/initial_state.npy: slot %u holds NaN or infinity",
                                    dir, sl);
                goto fail;
            }
    }
    for (size_t i = 0; i < nqk; i++) {
        t->q[i] = rssm_round_to(m->io_dtype, t->q[i]);
        t->k[i] = rssm_round_to(m->io_dtype, t->k[i]);
    }
    for (size_t i = 0; i < nv; i++)
        t->v[i] = rssm_round_to(m->io_dtype, t->v[i]);
    for (uint32_t s = 0; s < t->steps; s++) {
        const int32_t *row = t->slot_ids + (size_t)s * t->batch;
        const int64_t *len = t->seq_len_after + (size_t)s * t->batch;
        uint32_t rows = rh_trace_rows(t, s);
        for (uint32_t r = 0; r < t->batch; r++) {
            if (r >= rows) {
                if (row[r] != -1) {
                    st = rssm_set_error(err, RSSM_ERR_FORMAT,
                                        "%s/slots.npy: step %u row %u: an active row after an idle (-1) one",
                                        dir, s, r);
                    goto fail;
                }
                continue;
            }
            if ((uint32_t)row[r] >= t->slots) {
                st = rssm_set_error(err, RSSM_ERR_FORMAT, "%s/slots.npy: step %u row %u: slot %d >= %u slots",
                                    dir, s, r, row[r], t->slots);
                goto fail;
            }
            for (uint32_t o = 0; o < r; o++)
                if (row[o] == row[r]) {
                    st = rssm_set_error(err, RSSM_ERR_FORMAT, "%s/slots.npy: step %u: slot %d appears twice",
                                        dir, s, row[r]);
                    goto fail;
                }
            if (len[r] < 1) {
                st = rssm_set_error(err, RSSM_ERR_FORMAT, "%s/seq_len_after.npy: step %u row %u: %lld < 1",
                                    dir, s, r, (long long)len[r]);
                goto fail;
            }
        }
    }
    if ((st = load_windows(dir, t, err)) != RSSM_OK)
        goto fail;
    /* Idle rows of the expected outputs were zeroed with the inputs:
     * whatever an engine left there compares as the oracle's zeros. */
    if (t->expected) {
        if (!all_finite(t->expected, T * rh_trace_v_per_step(t))) {
            st = rssm_set_error(err, RSSM_ERR_FORMAT, "%s/expected_out.npy: holds NaN or infinity in an active row",
                                dir);
            goto fail;
        }
    }
    return rssm_clear_error(err);
fail:
    rh_trace_free(t);
    return st;
}

rssm_status rh_trace_save(const rh_trace *t, const char *dir, const float *expected, rssm_error *err)
{
    if (!t || !dir)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "trace: NULL argument");
    const rssm_model *m = &t->model;
    char path[4096];
    join_path(path, sizeof path, dir, "model.json");
    if (!write_model_json(path, t))
        return rssm_set_error(err, RSSM_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    const uint64_t T = t->steps, L = m->layers, B = t->batch, H = m->num_qk_heads, HV = m->num_v_heads,
                   K = m->head_k, V = m->head_v;
    const uint64_t qs[5] = {T, L, B, H, K}, vs[5] = {T, L, B, HV, V}, gs[5] = {T, L, B, HV, K};
    const uint64_t ts[2] = {T, B}, ws[3] = {L, HV, K}, ss[5] = {t->slots, L, HV, V, K}, es[2] = {t->windows, B};
    const int kda = m->gate_kind == RSSM_GATE_KDA;
    struct { const char *file; rh_npy_dtype dt; uint32_t ndim; const uint64_t *shape; const void *data; } f[] = {
        {"q.npy", RH_NPY_F4, 5, qs, t->q},
        {"k.npy", RH_NPY_F4, 5, qs, t->k},
        {"v.npy", RH_NPY_F4, 5, vs, t->v},
        {"gate.npy", RH_NPY_F4, kda ? 5u : 4u, gs, t->gate},
        {"beta.npy", RH_NPY_F4, 4, vs, t->beta},
        {"slots.npy", RH_NPY_I4, 2, ts, t->slot_ids},
        {"seq_len_after.npy", RH_NPY_I8, 2, ts, t->seq_len_after},
        {"initial_state.npy", RH_NPY_F4, 5, ss, t->init_state},
        {"A_log.npy", RH_NPY_F4, 2, ws, t->A_log},
        {"dt_bias.npy", RH_NPY_F4, kda ? 3u : 2u, ws, t->dt_bias},
        {"expected_out.npy", RH_NPY_F4, 5, vs, expected},
        {"drafts.npy", RH_NPY_I4, 2, es, t->drafts},
        {"accepted.npy", RH_NPY_I4, 2, es, t->accepted},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!f[i].data)
            continue;
        join_path(path, sizeof path, dir, f[i].file);
        rssm_status st = rh_npy_write(path, f[i].dt, f[i].ndim, f[i].shape, f[i].data, err);
        if (st != RSSM_OK)
            return st;
    }
    return rssm_clear_error(err);
}
