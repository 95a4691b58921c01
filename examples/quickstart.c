/* The README's example, as a program: a model, a backend, a pool, a batch,
 * a prefill state and a few decode steps. README.md holds this file's text
 * from the include line on, and the test suite checks that it does. */
#include <rssm.h>

#include <stdio.h>
#include <stdlib.h>

/* Random, never zero; g <= 0 and beta in (0, 1) as the header asks. */
static float rnd(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }
static void fill(float *x, size_t n, float lo, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + scale * (rnd() + 0.5f);
}

int main(void)
{
    rssm_error err;
    rssm_model m;
    rssm_model_preset(&m, "qwen3.5-gdn", &err); /* or fill the struct yourself */
    m.layers = 2;      /* a slice of the model keeps this example small */
    m.ring_len = 16;   /* L */

    size_t per_slot;
    rssm_model_slot_bytes(&m, &per_slot, &err); /* checkpoint + ring, all layers */
    printf("one slot: %.1f MiB\n", (double)per_slot / (1 << 20));

    rssm_backend *be;
    if (rssm_backend_create("auto", &be, &err) != RSSM_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    printf("backend %s on %s\n", rssm_backend_name(be), rssm_backend_device(be));
    rssm_pool *pool;
    rssm_batch *batch;
    if (rssm_pool_create(be, &m, 8, RSSM_FLUSH_STAGGERED, &pool, &err) != RSSM_OK ||
        rssm_batch_create(pool, 4, &batch, &err) != RSSM_OK) { /* records the step program once */
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }

    /* Two sequences; prefill leaves each one's state [layers][HV][V][K]. */
    const uint32_t rows = 2;
    size_t state_n = (size_t)m.layers * m.num_v_heads * m.head_v * m.head_k;
    float *prefill_state = malloc(state_n * sizeof *prefill_state);
    uint32_t slots[2];
    uint64_t seq_len_after[2] = {100, 37}; /* prompt lengths */
    for (uint32_t r = 0; r < rows; r++) {
        fill(prefill_state, state_n, -0.05f, 0.1f);
        rssm_pool_alloc(pool, &slots[r], &err);
        rssm_pool_write_state(pool, slots[r], prefill_state, &err);
    }

    /* Every forward step, all layers at once (fp32 io, the preset's). */
    size_t qk_n = (size_t)m.layers * rows * m.num_qk_heads * m.head_k;
    size_t v_n = (size_t)m.layers * rows * m.num_v_heads * m.head_v;
    size_t g_n = (size_t)m.layers * rows * m.num_v_heads;
    float *q = malloc(qk_n * 4), *k = malloc(qk_n * 4), *v = malloc(v_n * 4);
    float *g = malloc(g_n * 4), *beta = malloc(g_n * 4), *out = malloc(v_n * 4);
    rssm_status st = RSSM_OK;
    for (int step = 0; step < 40 && st == RSSM_OK; step++) {
        fill(q, qk_n, -1.0f, 2.0f);
        fill(k, qk_n, -1.0f, 2.0f);
        fill(v, v_n, -1.0f, 2.0f);
        fill(g, g_n, -0.5f, 0.5f);    /* log-decay in [-0.5, 0] */
        fill(beta, g_n, 0.1f, 0.8f);
        for (uint32_t r = 0; r < rows; r++)
            seq_len_after[r]++;       /* counts the token being decoded */
        rssm_step_inputs in = {.q = q, .k = k, .v = v, .gate = g, .beta = beta};
        st = rssm_batch_step(batch, rows, slots, seq_len_after, 0, &in, out, &err);
    }
    if (st != RSSM_OK)
        fprintf(stderr, "step: %s\n", err.message);
    else
        printf("40 steps: out[0] = %.6f\n", out[0]);

    free(prefill_state);
    free(q), free(k), free(v), free(g), free(beta), free(out);
    rssm_batch_destroy(&batch);
    rssm_pool_destroy(&pool);
    rssm_backend_destroy(&be);
    return st == RSSM_OK ? 0 : 1;
}
