/* The device time of rssm_batch_run steps (one submission per step, every
 * layer in one dispatch) against rssm_batch_time_steps's program of the
 * same steps (one command buffer, layer by layer), on one backend: where a
 * speculative-decode window runs one step per token (a GPU's Vulkan
 * windows, docs/design.md §9), its tokens cost what rssm_batch_run costs.
 *
 *   batch_run_probe BACKEND ROWS [LAYERS [bench|raw|bf16]]
 *
 * qwen3.5-gdn, fp32 state, L = 16: the preset's precomputed gates and fp32
 * activations, or with `bench` rssm bench's defaults, raw gates (A_log and
 * dt_bias set) and bf16 activations; `raw` and `bf16` one of the two.
 *
 * Prints, per step of a ring cycle (all rows at one position, the last step
 * a flush), the median device µs of rssm_batch_run over 8 cycles and the
 * program's µs per step (its median run over the steps), then the ratio;
 * then the device µs of rssm_batch_verify windows of 4 and 8 tokens from
 * ring position 0 (median of 16 after half a second of them), none
 * accepted, against a program of the steps they stand for.
 * Built on Debian against a librssm and carried (Vulkan run 25: bench/results/h200/notes.md, History). */
#include <rssm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CYCLES 8

static float rnd(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }
static void fill(float *x, size_t n, float lo, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + scale * (rnd() + 0.5f);
}

/* x's n floats as n bf16 words (truncated) over the first half of x. */
static void to_bf16(float *x, size_t n)
{
    uint16_t *h = (uint16_t *)(void *)x;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h[i] = (uint16_t)(u >> 16);
    }
}

/* Random step inputs of `rows` rows (q, k, v as bf16 words in place with
 * bf16_io), each array n_* floats per row. */
static rssm_step_inputs random_inputs(size_t rows, size_t n_qk, size_t n_v, size_t n_g, int bf16_io)
{
    float *q = malloc(rows * n_qk * 4), *k = malloc(rows * n_qk * 4), *v = malloc(rows * n_v * 4);
    float *g = malloc(rows * n_g * 4), *beta = malloc(rows * n_g * 4);
    fill(q, rows * n_qk, -1.0f, 2.0f);
    fill(k, rows * n_qk, -1.0f, 2.0f);
    fill(v, rows * n_v, -1.0f, 2.0f);
    fill(g, rows * n_g, -0.5f, 0.5f);
    fill(beta, rows * n_g, 0.1f, 0.8f);
    if (bf16_io) { /* the first half of each array */
        to_bf16(q, rows * n_qk);
        to_bf16(k, rows * n_qk);
        to_bf16(v, rows * n_v);
    }
    return (rssm_step_inputs){.q = q, .k = k, .v = v, .gate = g, .beta = beta};
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of x[0..n), n even (x is sorted). */
static double median(double *x, size_t n)
{
    qsort(x, n, sizeof x[0], cmp);
    return 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static int fail(const char *what, const rssm_error *err)
{
    fprintf(stderr, "%s: %s\n", what, err->message);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: batch_run_probe BACKEND ROWS [LAYERS [bench|raw|bf16]]\n");
        return 2;
    }
    const uint32_t rows = (uint32_t)strtoul(argv[2], NULL, 10);
    rssm_error err;
    rssm_model m;
    if (rssm_model_preset(&m, "qwen3.5-gdn", &err) != RSSM_OK)
        return fail("preset", &err);
    m.layers = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 8;
    m.ring_len = 16;
    const char *mode = argc > 4 ? argv[4] : "";
    const int raw = !strcmp(mode, "bench") || !strcmp(mode, "raw");
    const int bf16_io = !strcmp(mode, "bench") || !strcmp(mode, "bf16");
    if (raw)
        m.gate_mode = RSSM_GATE_RAW;
    if (bf16_io)
        m.io_dtype = RSSM_DTYPE_BF16;
    const uint32_t L = m.ring_len;
    rssm_backend *be;
    rssm_pool *pool;
    rssm_batch *batch;
    if (rssm_backend_create(argv[1], &be, &err) != RSSM_OK)
        return fail("backend", &err);
    if (rssm_pool_create(be, &m, rows, RSSM_FLUSH_ALIGNED, &pool, &err) != RSSM_OK ||
        rssm_batch_create(pool, rows, &batch, &err) != RSSM_OK)
        return fail("pool/batch", &err);
    const size_t state_n = (size_t)m.layers * m.num_v_heads * m.head_v * m.head_k;
    float *state = malloc(state_n * sizeof *state);
    uint32_t *slots = malloc(rows * sizeof *slots);
    uint64_t *len = malloc(rows * sizeof *len);
    for (uint32_t r = 0; r < rows; r++) {
        fill(state, state_n, -0.05f, 0.1f);
        if (rssm_pool_alloc(pool, &slots[r], &err) != RSSM_OK ||
            rssm_pool_write_state(pool, slots[r], state, &err) != RSSM_OK)
            return fail("slot", &err);
        len[r] = 1000 * L; /* every row at ring position 0 */
    }
    /* per row of every layer */
    const size_t qk_n = (size_t)m.num_qk_heads * m.head_k, v_n = (size_t)m.num_v_heads * m.head_v;
    const size_t g_n = m.num_v_heads, layer_rows = (size_t)m.layers * rows;
    const rssm_step_inputs in = random_inputs(layer_rows, qk_n, v_n, g_n, bf16_io);
    if (raw) {
        float *a_log = malloc(m.num_v_heads * 4), *dt_bias = malloc(m.num_v_heads * 4);
        fill(a_log, m.num_v_heads, -1.0f, 1.5f);
        fill(dt_bias, m.num_v_heads, -0.5f, 1.0f);
        for (uint32_t l = 0; l < m.layers; l++)
            if (rssm_batch_set_gate_params(batch, l, a_log, dt_bias, &err) != RSSM_OK)
                return fail("gate params", &err);
    }
    if (rssm_batch_upload(batch, rows, &in, &err) != RSSM_OK)
        return fail("upload", &err);

    /* rssm_batch_run, cycle after cycle (a warm-up cycle first). */
    double per[CYCLES][16], sum = 0.0;
    for (uint32_t c = 0; c <= CYCLES; c++)
        for (uint32_t s = 0; s < L; s++) {
            for (uint32_t r = 0; r < rows; r++)
                len[r]++;
            double sec;
            if (rssm_batch_run(batch, rows, slots, len, 0, &err) != RSSM_OK ||
                rssm_batch_last_run_seconds(batch, &sec, &err) != RSSM_OK)
                return fail("run", &err);
            if (c > 0)
                per[c - 1][s] = sec;
        }
    printf("%s, %u rows, %u layers, L %u: rssm_batch_run us per step (median of %d cycles), by ring position\n",
           rssm_backend_name(be), rows, m.layers, L, CYCLES);
    for (uint32_t s = 0; s < L; s++) {
        double col[CYCLES];
        for (int c = 0; c < CYCLES; c++)
            col[c] = per[c][s];
        const double med = median(col, CYCLES);
        sum += med;
        printf("  %2u %9.1f\n", s, med * 1e6);
    }

    /* The same cycle as one program. */
    rssm_row_plan *plans = malloc((size_t)L * rows * sizeof *plans);
    for (uint32_t s = 0; s < L; s++)
        for (uint32_t r = 0; r < rows; r++)
            plans[s * rows + r] = (rssm_row_plan){.slot = slots[r], .write_pos = s, .force = 0, .is_flush = s == L - 1};
    rssm_timing t;
    if (rssm_batch_time_steps(batch, rows, L, plans, 5, &t, &err) != RSSM_OK)
        return fail("time_steps", &err);
    const double run_us = sum / L * 1e6, prog_us = t.median_seconds / L * 1e6;
    printf("per step over the cycle: rssm_batch_run %.1f us, program %.1f us, ratio %.2f\n", run_us, prog_us,
           run_us / prog_us);

    /* Windows of T tokens from ring position 0, none accepted (the slots
     * stay at 0), as rssm bench --verify times them, after half a second
     * of windows (a GPU idle between the host's submissions lowers its
     * clocks: bench/results/h200/notes.md, History: Vulkan run 25); beside them the
     * program of the T steps they stand for (positions 0..T-1). */
    enum { T_MAX = 8, WINDOWS = 16 };
    const rssm_step_inputs win = random_inputs(T_MAX * layer_rows, qk_n, v_n, g_n, bf16_io);
    float *tout = malloc(T_MAX * layer_rows * v_n * 4);
    uint32_t *drafts = malloc(rows * sizeof *drafts), *none = calloc(rows, sizeof *none);
    for (uint32_t T = 4; T <= T_MAX; T *= 2) {
        for (uint32_t s = 0; s < T; s++)
            for (uint32_t r = 0; r < rows; r++)
                plans[s * rows + r] = (rssm_row_plan){.slot = slots[r], .write_pos = s};
        if (rssm_batch_upload(batch, rows, &in, &err) != RSSM_OK ||
            rssm_batch_time_steps(batch, rows, T, plans, 20, &t, &err) != RSSM_OK)
            return fail("time_steps", &err);
        const double steps_us = t.median_seconds * 1e6;
        for (uint32_t r = 0; r < rows; r++)
            drafts[r] = T;
        double w[WINDOWS], busy = 0.0;
        for (int i = 0; i < WINDOWS; i++) {
            double sec;
            if (rssm_batch_verify(batch, rows, slots, drafts, &win, tout, &err) != RSSM_OK ||
                rssm_batch_last_run_seconds(batch, &sec, &err) != RSSM_OK ||
                rssm_pool_accept(pool, rows, slots, none, len, 0, &err) != RSSM_OK)
                return fail("verify", &err);
            busy += sec;
            w[i] = sec;
            if (busy < 0.5) /* warming up: again from the first */
                i = -1;
        }
        const double win_us = median(w, WINDOWS) * 1e6;
        printf("window of %u tokens at position 0: %.1f us (min %.1f), its %u steps as a program %.1f us: %.2f x\n",
               T, win_us, w[0] * 1e6, T, steps_us, win_us / steps_us);
    }
    rssm_batch_destroy(&batch);
    rssm_pool_destroy(&pool);
    rssm_backend_destroy(&be);
    return 0;
}
