/* rssm_layer: one layer on the caller's memory, in an engine's layouts
 * (a state pool with padded slots, rings of L entries, q, k and v packed in
 * one row, padded output rows), gives exactly the outputs and states of
 * rssm_batch_step on the same backend; padding rows touch nothing; the
 * cursor advance follows the flush rule; bad descriptions and arguments are
 * refused with a message. Host pointers on the cpu backend; on vulkan the
 * same tensors in buffers of the device, each call recorded into a command
 * buffer (tests/layer_memory.h). The cuda path is checked on a GPU by
 * bench/check_layer.py. */
#include "dtype.h"
#include "layer_memory.h"
#include "test_support.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { SEED = 0x1a7e5, SLOTS = 5, ROWS = 3, L = 4, STEPS = 11, SNAPSHOT = 7 };
/* Step-array rows the engine holds: a verify window of up to L - 1 tokens
 * of ROWS rows and a padding row, token-major. */
enum { STEP_ROWS = (ROWS + 1) * (L - 1) };

/* Padding of the engine's tensors, in elements: every stride differs from
 * the contiguous one, so a kernel that ignores one is caught. */
enum { SLOT_PAD = 24, ROW_PAD = 8 };

typedef struct engine {
    lm_arena *mem;             /* every array below */
    rssm_model m;
    size_t G;                  /* gate values per head: 1 or K */
    int64_t state_slot, ring_d_slot, ring_k_slot, ring_g_slot;
    int64_t qkv_row, out_row;  /* q, k, v packed: [q | k | v] per row */
    float *state, *ring_d, *ring_k, *ring_g;
    float *qkv, *gate, *beta, *out;
    int32_t *slot_index, *write_pos, *force; /* [ROWS + 1] */
    uint32_t *overflow;        /* [ROWS + 1] */
    int32_t *cursor;           /* [SLOTS], advanced by rssm_layer_advance */
    const float *A_log, *dt_bias;
    rssm_layer_desc desc;
} engine;

static void engine_open(engine *e, rssm_backend *b, const rssm_model *m)
{
    memset(e, 0, sizeof *e);
    e->mem = lm_open(b);
    e->m = *m;
    const size_t H = m->num_qk_heads, HV = m->num_v_heads, K = m->head_k, V = m->head_v;
    e->G = m->gate_kind == RSSM_GATE_KDA ? K : 1;
    /* rings of L entries per head, as the engines allocate them (rssm uses L - 1) */
    e->state_slot = (int64_t)(HV * V * K + SLOT_PAD);
    e->ring_d_slot = (int64_t)(HV * L * V + SLOT_PAD);
    e->ring_k_slot = (int64_t)(H * L * K + SLOT_PAD);
    e->ring_g_slot = (int64_t)(HV * L * e->G + SLOT_PAD);
    e->qkv_row = (int64_t)(2 * H * K + HV * V + ROW_PAD);
    e->out_row = (int64_t)(HV * V + ROW_PAD);
    e->state = lm_alloc(e->mem, (size_t)e->state_slot * SLOTS * sizeof(float));
    e->ring_d = lm_alloc(e->mem, (size_t)e->ring_d_slot * SLOTS * sizeof(float));
    e->ring_k = lm_alloc(e->mem, (size_t)e->ring_k_slot * SLOTS * sizeof(float));
    e->ring_g = lm_alloc(e->mem, (size_t)e->ring_g_slot * SLOTS * sizeof(float));
    e->qkv = lm_alloc(e->mem, (size_t)e->qkv_row * STEP_ROWS * sizeof(float));
    e->gate = lm_alloc(e->mem, STEP_ROWS * HV * e->G * sizeof(float));
    e->beta = lm_alloc(e->mem, STEP_ROWS * HV * sizeof(float));
    e->out = lm_alloc(e->mem, (size_t)e->out_row * STEP_ROWS * sizeof(float));
    e->slot_index = lm_alloc(e->mem, (ROWS + 1) * sizeof(int32_t));
    e->write_pos = lm_alloc(e->mem, (ROWS + 1) * sizeof(int32_t));
    e->force = lm_alloc(e->mem, (ROWS + 1) * sizeof(int32_t));
    e->cursor = lm_alloc(e->mem, SLOTS * sizeof(int32_t));
    e->overflow = lm_alloc(e->mem, (ROWS + 1) * sizeof(uint32_t));
    rssm_layer_desc *d = &e->desc;
    d->model = *m;
    d->max_rows = ROWS + 1;
    d->slots = SLOTS;
    d->state_slot_stride = e->state_slot;
    d->ring_d_slot_stride = e->ring_d_slot;
    d->ring_d_head_stride = (int64_t)(L * V);
    d->ring_k_slot_stride = e->ring_k_slot;
    d->ring_k_head_stride = (int64_t)(L * K);
    d->ring_g_slot_stride = e->ring_g_slot;
    d->ring_g_head_stride = (int64_t)(L * e->G);
    d->q_row_stride = d->k_row_stride = d->v_row_stride = e->qkv_row;
    d->out_row_stride = e->out_row;
}

static void engine_close(engine *e)
{
    lm_close(e->mem);
}

static rssm_layer_tensors engine_tensors(engine *e)
{
    const size_t H = e->m.num_qk_heads, K = e->m.head_k, io = rssm_dtype_size(e->m.io_dtype);
    const uint8_t *qkv = (const uint8_t *)e->qkv; /* rows of io-dtype elements */
    rssm_layer_tensors t = {
        .state = e->state, .ring_d = e->ring_d, .ring_k = e->ring_k, .ring_g = e->ring_g,
        .q = qkv, .k = qkv + H * K * io, .v = qkv + 2 * H * K * io,
        .gate = e->gate, .beta = e->beta, .A_log = e->A_log, .dt_bias = e->dt_bias, .out = e->out,
        .slot_index = e->slot_index, .write_pos = e->write_pos, .force = e->force,
    };
    return t;
}

/* Slot s's state in the engine's tensor, [HV][V][K]. */
static const float *engine_state(const engine *e, uint32_t slot) { return e->state + (size_t)slot * e->state_slot; }

/* The pool's states into the engine's state tensor (s: scratch of one
 * slot's state), every cursor at 0. */
static void load_states(engine *e, ts_env *env, float *s)
{
    rssm_error err;
    const size_t n = ts_state_elems(&e->m);
    for (uint32_t slot = 0; slot < SLOTS; slot++) {
        TS_OK(rssm_pool_read_state(env->pool, slot, s, &err), &err);
        memcpy(e->state + (size_t)slot * e->state_slot, s, n * sizeof(float));
        e->cursor[slot] = 0;
    }
}

/* Every step: ROWS rows over slots 3, 0, 2 (with seq_len from 5, so the
 * snapshot interval forces a flush part way round a ring), through
 * rssm_batch_step on a one-layer pool and through rssm_layer_run on the
 * engine's tensors, from the same states and inputs; the outputs must be
 * the same bits (one backend, one kernel). A fourth, padding row rides
 * along in the layer launch only. */
/* The step's gates and beta into the engine's tensors, in its gate dtype;
 * for bf16 the batch's fp32 copies are rounded to the same values first,
 * so both sides see the same inputs. */
static void set_gates(engine *e, ts_inputs *in, uint32_t first)
{
    const size_t ng = ROWS * e->m.num_v_heads * e->G, nb = ROWS * e->m.num_v_heads;
    const size_t g0 = first * e->m.num_v_heads * e->G, b0 = first * e->m.num_v_heads;
    if (e->desc.gate_dtype == RSSM_DTYPE_F32) {
        memcpy(e->gate + g0, in->gate, ng * sizeof(float));
        memcpy(e->beta + b0, in->beta, nb * sizeof(float));
        return;
    }
    uint16_t *g = (uint16_t *)(void *)e->gate + g0, *b = (uint16_t *)(void *)e->beta + b0;
    for (size_t i = 0; i < ng; i++) {
        g[i] = rssm_f32_to_bf16(in->gate[i]);
        in->gate[i] = rssm_bf16_to_f32(g[i]);
    }
    for (size_t i = 0; i < nb; i++) {
        b[i] = rssm_f32_to_bf16(in->beta[i]);
        in->beta[i] = rssm_bf16_to_f32(b[i]);
    }
}

/* The step's inputs into the engine's packed rows ([q | k | v] per row)
 * and gate tensors. */
static void set_rows(engine *e, ts_inputs *in, uint32_t first);
static void set_step(engine *e, ts_inputs *in) { set_rows(e, in, 0); }

/* The same, into the engine's rows first .. first + ROWS - 1. */
static void set_rows(engine *e, ts_inputs *in, uint32_t first)
{
    const size_t H = e->m.num_qk_heads, HV = e->m.num_v_heads, K = e->m.head_k, V = e->m.head_v;
    for (uint32_t r = 0; r < ROWS; r++) {
        float *row = e->qkv + (size_t)(first + r) * e->qkv_row;
        memcpy(row, in->qf + r * H * K, H * K * sizeof(float));
        memcpy(row + H * K, in->kf + r * H * K, H * K * sizeof(float));
        memcpy(row + 2 * H * K, in->vf + r * HV * V, HV * V * sizeof(float));
    }
    set_gates(e, in, first);
}

/* rssm_layer_materialise of the engine's rows (and a padding row): each
 * row's checkpoint becomes its slot's true state, which the pool computes
 * on the host from its own copy (another order of the same sums, hence a
 * tolerance); the other slots and every ring are left as they were. */
static void check_materialise(ts_env *env, engine *e, rssm_layer *layer, const uint32_t *slots)
{
    rssm_error err;
    const size_t n = ts_state_elems(&e->m);
    const size_t ring_bytes = (size_t)e->ring_d_slot * SLOTS * sizeof(float);
    float *before = malloc((size_t)e->state_slot * SLOTS * sizeof(float));
    float *ring_before = malloc(ring_bytes);
    float *s = malloc(n * sizeof(float));
    assert_true(before && ring_before && s);
    memcpy(before, e->state, (size_t)e->state_slot * SLOTS * sizeof(float));
    memcpy(ring_before, e->ring_d, ring_bytes);
    int nonempty = 0;
    for (uint32_t r = 0; r < ROWS; r++) {
        e->slot_index[r] = (int32_t)slots[r];
        e->write_pos[r] = e->cursor[slots[r]];
        nonempty += e->write_pos[r] > 0;
    }
    assert_true(nonempty > 0); /* something to fold */
    e->slot_index[ROWS] = -1;
    e->write_pos[ROWS] = 1;
    rssm_layer_tensors t = {.state = e->state, .ring_d = e->ring_d, .ring_k = e->ring_k, .ring_g = e->ring_g,
                            .slot_index = e->slot_index, .write_pos = e->write_pos};
    TS_OK(lm_materialise(e->mem, layer, ROWS + 1, &t, &err), &err);
    for (uint32_t slot = 0; slot < SLOTS; slot++) {
        const float *got = engine_state(e, slot);
        int stepped = 0;
        for (uint32_t r = 0; r < ROWS; r++)
            stepped |= slots[r] == slot;
        if (!stepped) {
            assert_memory_equal(got, before + (size_t)slot * e->state_slot, n * sizeof(float));
            continue;
        }
        TS_OK(rssm_pool_read_state(env->pool, slot, s, &err), &err);
        /* looser where the backend's flush rounds its matrix operands
         * (vulkan:coopmat: fp16 tiles, docs/design.md §6) */
        const double rel = ts_rel_l2_f(got, s, n), tol = rh_backend_tolerance(env->backend, &e->m, 1e-6);
        if (!(rel <= tol))
            fail_msg("slot %u: materialised checkpoint off the pool's true state by %g (tolerance %g)", slot, rel,
                     tol);
    }
    assert_memory_equal(ring_before, e->ring_d, ring_bytes);
    TS_EXPECT(lm_materialise(e->mem, layer, ROWS, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    t.ring_g = NULL;
    TS_EXPECT(lm_materialise(e->mem, layer, ROWS, &t, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    free(before);
    free(ring_before);
    free(s);
}

static void check_against_batch(rssm_gate_kind kind, rssm_dtype ring_dtype, rssm_gate_mode mode, rssm_dtype gate_dtype)
{
    rh_rng rng;
    rh_rng_seed(&rng, SEED + (uint64_t)kind * 3 + ring_dtype * 5 + mode * 7 + gate_dtype, 0);
    rssm_error err;
    rssm_model m = ts_small_model(kind, 1, L);
    m.ring_dtype = ring_dtype;
    m.gate_mode = mode;
    ts_env env;
    ts_env_open(&env, ts_backend(), &m, SLOTS, RSSM_FLUSH_ALIGNED, ROWS);
    ts_env_alloc_random(&env, SLOTS, &rng);
    engine e;
    engine_open(&e, env.backend, &m);
    e.desc.gate_dtype = gate_dtype;
    float *A_log = NULL, *dt_bias = NULL;
    if (mode != RSSM_GATE_PRECOMPUTED) {
        ts_random_gate_params(&m, &rng, &A_log, &dt_bias);
        TS_OK(rssm_batch_set_gate_params(env.batch, 0, A_log, dt_bias, &err), &err);
        /* the engine's copies, where its backend reads them */
        const size_t HV = m.num_v_heads;
        float *a = lm_alloc(e.mem, HV * sizeof(float)), *bias = lm_alloc(e.mem, HV * e.G * sizeof(float));
        memcpy(a, A_log, HV * sizeof(float));
        memcpy(bias, dt_bias, HV * e.G * sizeof(float));
        e.A_log = a;
        e.dt_bias = bias;
    }
    const size_t n = ts_state_elems(&m);
    float *s = malloc(n * sizeof(float));
    assert_non_null(s);
    load_states(&e, &env, s);
    rssm_layer *layer = NULL;
    TS_OK(rssm_layer_can_implement(env.backend, &e.desc, &err), &err);
    TS_OK(rssm_layer_create(env.backend, &e.desc, &layer, &err), &err);

    const uint32_t slots[ROWS] = {3, 0, 2};
    uint64_t seq[ROWS] = {5, 9, 12};
    ts_inputs in;
    ts_inputs_alloc(&in, &m, ROWS);
    const size_t HV = m.num_v_heads, V = m.head_v;
    float *out = malloc(ts_out_elems(&m, ROWS) * sizeof(float));
    assert_non_null(out);
    int flushes = 0, forced = 0;
    for (int step = 0; step < STEPS; step++) {
        ts_inputs_random(&in, &rng);
        set_step(&e, &in);
        for (uint32_t r = 0; r < ROWS; r++) {
            e.slot_index[r] = (int32_t)slots[r];
            e.write_pos[r] = e.cursor[slots[r]];
            e.force[r] = seq[r] % SNAPSHOT == 0;
            flushes += e.write_pos[r] == L - 1 || e.force[r];
            forced += e.force[r] && e.write_pos[r] != L - 1;
        }
        /* the padding row: garbage inputs, a negative slot */
        ts_poison(e.qkv + (size_t)ROWS * e.qkv_row, (size_t)e.qkv_row * sizeof(float));
        e.slot_index[ROWS] = -1;
        e.write_pos[ROWS] = 1;
        e.force[ROWS] = 0;
        ts_poison(e.out, (size_t)e.out_row * (ROWS + 1) * sizeof(float));
        for (uint32_t r = 0; r <= ROWS; r++)
            e.overflow[r] = 7; /* every flag is written: 0 here, no entry is out of range */

        ts_step(&env, ROWS, slots, seq, SNAPSHOT, &in, out);
        rssm_layer_tensors t = engine_tensors(&e);
        t.overflow = e.overflow;
        TS_OK(lm_run(e.mem, layer, ROWS + 1, &t, &err), &err);
        for (uint32_t r = 0; r <= ROWS; r++)
            assert_int_equal(e.overflow[r], 0);
        TS_OK(lm_advance(e.mem, layer, ROWS + 1, e.slot_index, e.write_pos, e.force, e.cursor, &err), &err);

        for (uint32_t r = 0; r < ROWS; r++) {
            const float *got = e.out + (size_t)r * e.out_row, *want = out + (size_t)r * HV * V;
            if (memcmp(got, want, HV * V * sizeof(float)) != 0)
                fail_msg("step %d row %u: the layer's output differs from rssm_batch_step's (%g vs %g first)",
                         step, r, got[0], want[0]);
            uint32_t wp = 0;
            TS_OK(rssm_pool_write_pos(env.pool, slots[r], &wp, &err), &err);
            assert_int_equal(e.cursor[slots[r]], (int32_t)wp);
            seq[r]++;
        }
        for (size_t i = 0; i < HV * V; i++)
            assert_true(e.out[(size_t)ROWS * e.out_row + i] == 0.0f);
        /* the output rows' padding is the caller's: never written */
        for (uint32_t r = 0; r <= ROWS; r++)
            assert_int_equal(ts_count_nonfinite(e.out + (size_t)r * e.out_row + HV * V, RSSM_DTYPE_F32, ROW_PAD),
                             ROW_PAD);
    }
    assert_true(flushes >= ROWS && forced >= 1); /* both kinds of flush were exercised */
    if (ring_dtype == RSSM_DTYPE_F32) {
        check_materialise(&env, &e, layer, slots);
        /* both sides folded: the pool's checkpoints take the same values */
        for (uint32_t r = 0; r < ROWS; r++) {
            TS_OK(rssm_pool_materialise(env.pool, slots[r], &err), &err);
            e.cursor[slots[r]] = 0;
        }
        for (uint32_t slot = 0; slot < SLOTS; slot++) {
            TS_OK(rssm_pool_read_state(env.pool, slot, s, &err), &err);
            memcpy(e.state + (size_t)slot * e.state_slot, s, n * sizeof(float));
        }
    }

    /* A forced flush of every row on both sides: each checkpoint is then the
     * slot's true state, and the engine's must equal the pool's. */
    for (uint32_t r = 0; r < ROWS; r++) {
        e.write_pos[r] = e.cursor[slots[r]];
        e.force[r] = 1;
        seq[r] = SNAPSHOT * 10;
    }
    ts_inputs_random(&in, &rng);
    set_step(&e, &in);
    ts_step(&env, ROWS, slots, seq, SNAPSHOT, &in, out);
    rssm_layer_tensors t = engine_tensors(&e);
    TS_OK(lm_run(e.mem, layer, ROWS, &t, &err), &err);
    for (uint32_t slot = 0; slot < SLOTS; slot++) {
        TS_OK(rssm_pool_read_state(env.pool, slot, s, &err), &err);
        if (memcmp(engine_state(&e, slot), s, n * sizeof(float)) != 0)
            fail_msg("slot %u: the engine's state differs from the pool's after a flush", slot);
    }
    free(out);
    free(s);
    free(A_log);
    free(dt_bias);
    ts_inputs_free(&in);
    rssm_layer_destroy(&layer);
    assert_null(layer);
    engine_close(&e);
    ts_env_close(&env);
}

static void gdn_matches_batch(void **state)
{
    (void)state;
    check_against_batch(RSSM_GATE_GDN, RSSM_DTYPE_F32, RSSM_GATE_PRECOMPUTED, RSSM_DTYPE_F32);
    check_against_batch(RSSM_GATE_GDN, RSSM_DTYPE_F16, RSSM_GATE_RAW, RSSM_DTYPE_BF16);
}

static void kda_matches_batch(void **state)
{
    (void)state;
    check_against_batch(RSSM_GATE_KDA, RSSM_DTYPE_F32, RSSM_GATE_RAW_SAFE, RSSM_DTYPE_F32);
    check_against_batch(RSSM_GATE_KDA, RSSM_DTYPE_BF16, RSSM_GATE_PRECOMPUTED, RSSM_DTYPE_BF16);
}

/* fp16 io, the activations vLLM tests its GDN kernels with, against fp32
 * io on the same backend and the same tensors otherwise: an fp16 q, k or v
 * is an fp32 value exactly, so a layer reading the fp16 elements must
 * compute what one reading their fp32 copies computes and store each
 * output as that output rounded to fp16 (common/dtype.h, which every
 * backend's rounding matches): bit for bit, the states, rings and cursors
 * too, over steps that append, fill the ring and flush (forced, too), with
 * a padding row whose outputs are zeroed and padded output rows whose
 * padding is never written. The oracle check of fp16 io is the
 * conformance cases' (*-fp16-io, tools/harness/cases.c). */
static void fp16_io_is_fp32_io_rounded(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *b = ts_backend_shared(ts_backend());
    static const rssm_gate_kind kinds[2] = {RSSM_GATE_GDN, RSSM_GATE_KDA};
    for (int gk = 0; gk < 2; gk++) {
        rh_rng rng;
        rh_rng_seed(&rng, SEED + 77 + (uint64_t)gk, 0);
        rssm_model m = ts_small_model(kinds[gk], 1, L);
        m.ring_dtype = RSSM_DTYPE_F16;
        const size_t HV = m.num_v_heads, V = m.head_v;
        engine e32, e16;
        engine_open(&e32, b, &m);
        m.io_dtype = RSSM_DTYPE_F16;
        engine_open(&e16, b, &m); /* its float arrays hold twice the fp16 elements needed */
        const size_t state_bytes = (size_t)e32.state_slot * SLOTS * sizeof(float);
        const size_t ring_d_bytes = (size_t)e32.ring_d_slot * SLOTS * sizeof(float);
        const size_t ring_k_bytes = (size_t)e32.ring_k_slot * SLOTS * sizeof(float);
        const size_t ring_g_bytes = (size_t)e32.ring_g_slot * SLOTS * sizeof(float);
        ts_fill(e32.state, state_bytes / sizeof(float), -0.5f, 0.5f, &rng);
        memcpy(e16.state, e32.state, state_bytes);
        for (uint32_t s = 0; s < SLOTS; s++)
            e32.cursor[s] = e16.cursor[s] = 0;
        rssm_layer *l32 = NULL, *l16 = NULL;
        TS_OK(rssm_layer_create(b, &e32.desc, &l32, &err), &err);
        TS_OK(rssm_layer_create(b, &e16.desc, &l16, &err), &err);
        const int32_t slots[ROWS] = {3, 0, 2};
        uint64_t seq[ROWS] = {5, 9, 12};
        uint16_t *qkv16 = (uint16_t *)(void *)e16.qkv, *out16 = (uint16_t *)(void *)e16.out;
        int flushes = 0;
        for (int step = 0; step < STEPS; step++) {
            for (uint32_t r = 0; r < ROWS; r++)
                for (size_t i = 0; i < (size_t)e32.qkv_row - ROW_PAD; i++) {
                    const size_t at = r * (size_t)e32.qkv_row + i;
                    qkv16[at] = rssm_f32_to_f16(ts_rng_float(&rng, -1.0f, 1.0f));
                    e32.qkv[at] = rssm_f16_to_f32(qkv16[at]);
                }
            ts_poison(e32.qkv + (size_t)ROWS * e32.qkv_row, (size_t)e32.qkv_row * sizeof(float));
            ts_poison(qkv16 + (size_t)ROWS * e16.qkv_row, (size_t)e16.qkv_row * sizeof(uint16_t));
            ts_fill(e32.gate, ROWS * HV * e32.G, -0.4f, -0.01f, &rng);
            ts_fill(e32.beta, ROWS * HV, 0.05f, 0.95f, &rng);
            memcpy(e16.gate, e32.gate, ROWS * HV * e32.G * sizeof(float));
            memcpy(e16.beta, e32.beta, ROWS * HV * sizeof(float));
            for (uint32_t r = 0; r <= ROWS; r++) {
                const bool pad = r == ROWS;
                e32.slot_index[r] = e16.slot_index[r] = pad ? -1 : slots[r];
                e32.write_pos[r] = e16.write_pos[r] = pad ? 1 : e32.cursor[slots[r]];
                e32.force[r] = e16.force[r] = !pad && seq[r]++ % SNAPSHOT == 0;
                flushes += !pad && (e32.write_pos[r] == L - 1 || e32.force[r]);
            }
            ts_poison(e32.out, (size_t)e32.out_row * (ROWS + 1) * sizeof(float));
            ts_poison(out16, (size_t)e16.out_row * (ROWS + 1) * sizeof(uint16_t));
            const rssm_layer_tensors t32 = engine_tensors(&e32), t16 = engine_tensors(&e16);
            TS_OK(lm_run(e32.mem, l32, ROWS + 1, &t32, &err), &err);
            TS_OK(lm_run(e16.mem, l16, ROWS + 1, &t16, &err), &err);
            TS_OK(lm_advance(e32.mem, l32, ROWS + 1, e32.slot_index, e32.write_pos, e32.force, e32.cursor, &err),
                  &err);
            TS_OK(lm_advance(e16.mem, l16, ROWS + 1, e16.slot_index, e16.write_pos, e16.force, e16.cursor, &err),
                  &err);
            for (uint32_t r = 0; r <= ROWS; r++) {
                const float *o32 = e32.out + (size_t)r * e32.out_row;
                const uint16_t *o16 = out16 + (size_t)r * e16.out_row;
                for (size_t i = 0; i < HV * V; i++) {
                    const uint16_t want = r == ROWS ? 0 : rssm_f32_to_f16(o32[i]);
                    if (o16[i] != want)
                        fail_msg("%s step %d row %u output %zu: fp16 io gave 0x%04x, fp32 io %.9g (0x%04x in fp16)",
                                 gk ? "KDA" : "GDN", step, r, i, o16[i], (double)o32[i], want);
                }
                assert_int_equal(ts_count_nonfinite(o16 + HV * V, RSSM_DTYPE_F16, ROW_PAD), ROW_PAD);
            }
            assert_memory_equal(e16.state, e32.state, state_bytes);
            assert_memory_equal(e16.ring_d, e32.ring_d, ring_d_bytes);
            assert_memory_equal(e16.ring_k, e32.ring_k, ring_k_bytes);
            assert_memory_equal(e16.ring_g, e32.ring_g, ring_g_bytes);
            assert_memory_equal(e16.cursor, e32.cursor, SLOTS * sizeof(int32_t));
        }
        assert_true(flushes >= ROWS); /* the checkpoints were written, through the io path's d */
        rssm_layer_destroy(&l32);
        rssm_layer_destroy(&l16);
        engine_close(&e32);
        engine_close(&e16);
    }
}

/* Descriptions the library must refuse, each with its own message. */
/* rssm_layer_verify on the engine's tensors (token-major rows, a padding
 * row riding along) gives the outputs of rssm_batch_verify on the same
 * backend, rows of different window sizes in one call, and leaves the
 * tokens as tentative ring entries: accepting k of them is the cursor
 * alone, after which a step on both sides gives the same outputs again,
 * for every k from 0 to T. Bit for bit where the two run the same window
 * (cpu); to the tolerance on cuda. A backend without a per-layer window
 * says so. */
static void verify_matches_batch(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 99, 0);
    rssm_error err;
    const rssm_model m = ts_small_model(RSSM_GATE_KDA, 1, L);
    ts_env env;
    ts_env_open(&env, ts_backend(), &m, SLOTS, RSSM_FLUSH_ALIGNED, ROWS);
    ts_env_alloc_random(&env, SLOTS, &rng);
    engine e;
    engine_open(&e, env.backend, &m);
    e.desc.max_rows = STEP_ROWS;
    const size_t n = ts_state_elems(&m);
    float *s = malloc(n * sizeof(float));
    assert_non_null(s);
    load_states(&e, &env, s);
    rssm_layer *layer = NULL;
    TS_OK(rssm_layer_create(env.backend, &e.desc, &layer, &err), &err);
    const int exact = strncmp(rssm_backend_name(env.backend), "cuda", 4) != 0;
    const double tol = rh_backend_tolerance(env.backend, &m, rh_tolerance(&m));
    const uint32_t slots[ROWS] = {3, 0, 2};
    uint32_t *drafts = lm_alloc(e.mem, (ROWS + 1) * sizeof(uint32_t));
    const size_t HV = m.num_v_heads, V = m.head_v, T = L - 1;
    float *out = malloc(ts_out_elems(&m, ROWS) * T * sizeof(float));
    assert_non_null(out);
    uint64_t seq[ROWS] = {20, 30, 40};
    ts_inputs in;
    ts_inputs_alloc(&in, &m, ROWS);
    for (uint32_t round = 0; round <= T; round++) {
        /* windows of T, T - 1 and 1 tokens from ring position 0; accept
         * round, round - 1 .. tokens (clamped to each window) */
        uint32_t k[ROWS];
        for (uint32_t r = 0; r < ROWS; r++) {
            drafts[r] = r == 2 ? 1u : (uint32_t)T - r;
            k[r] = round < drafts[r] ? round : drafts[r];
            e.slot_index[r] = (int32_t)slots[r];
            e.write_pos[r] = e.cursor[slots[r]];
            assert_int_equal(e.write_pos[r], 0);
        }
        e.slot_index[ROWS] = -1; /* padding */
        e.write_pos[ROWS] = 0;
        drafts[ROWS] = 1;
        ts_window w;
        ts_window_make(&w, &m, ROWS, (uint32_t)T, &rng);
        TS_OK(rssm_batch_verify(env.batch, ROWS, slots, drafts, &w.in, out, &err), &err);
        /* the engine's rows: token t of row r at t * (ROWS + 1) + r */
        for (uint32_t t = 0; t < T; t++)
            set_rows(&e, &w.tok[t], t * (ROWS + 1));
        ts_poison(e.out, (size_t)e.out_row * STEP_ROWS * sizeof(float));
        rssm_layer_tensors tv = engine_tensors(&e);
        tv.force = NULL;
        tv.overflow = e.overflow;
        const rssm_status st = lm_verify(e.mem, layer, ROWS + 1, (uint32_t)T, drafts, &tv, &err);
        if (st == RSSM_ERR_UNSUPPORTED && !lm_records(e.mem)) { /* a backend without a per-layer window */
            ts_window_free(&w);
            break;
        }
        TS_OK(st, &err);
        for (uint32_t r = 0; r < ROWS; r++) {
            assert_int_equal(e.overflow[r], UINT32_MAX);
            for (uint32_t t = 0; t < drafts[r]; t++) {
                const float *got = e.out + (size_t)(t * (ROWS + 1) + r) * e.out_row;
                const float *want = out + ((size_t)t * ROWS + r) * HV * V;
                if (exact && memcmp(got, want, HV * V * sizeof(float)) != 0)
                    fail_msg("round %u row %u token %u: the layer's window differs from rssm_batch_verify's", round,
                             r, t);
                if (!exact && !(ts_rel_l2_f(got, want, HV * V) <= tol))
                    fail_msg("round %u row %u token %u: off rssm_batch_verify's by %g", round, r, t,
                             ts_rel_l2_f(got, want, HV * V));
            }
        }
        for (uint32_t t = 0; t < T; t++) /* the padding row's outputs are zeros */
            for (size_t i = 0; i < HV * V; i++)
                assert_true(e.out[(size_t)(t * (ROWS + 1) + ROWS) * e.out_row + i] == 0.0f);
        /* accept k: the pool's accept, the engine's cursor */
        uint64_t after[ROWS];
        for (uint32_t r = 0; r < ROWS; r++) {
            after[r] = seq[r] += k[r];
            e.cursor[slots[r]] = e.write_pos[r] + (int32_t)k[r];
        }
        TS_OK(rssm_pool_accept(env.pool, ROWS, slots, k, after, 0, &err), &err);
        ts_window_free(&w);

        /* a step on both sides, from the accepted entries */
        ts_inputs_random(&in, &rng);
        set_step(&e, &in);
        for (uint32_t r = 0; r < ROWS; r++) {
            e.write_pos[r] = e.cursor[slots[r]];
            e.force[r] = 0;
            seq[r]++;
        }
        ts_step(&env, ROWS, slots, seq, 0, &in, out);
        rssm_layer_tensors t = engine_tensors(&e);
        TS_OK(lm_run(e.mem, layer, ROWS, &t, &err), &err);
        TS_OK(lm_advance(e.mem, layer, ROWS, e.slot_index, e.write_pos, e.force, e.cursor, &err), &err);
        for (uint32_t r = 0; r < ROWS; r++) {
            const float *got = e.out + (size_t)r * e.out_row, *want = out + (size_t)r * HV * V;
            if (exact && memcmp(got, want, HV * V * sizeof(float)) != 0)
                fail_msg("round %u row %u: the step after the accept differs from the pool's", round, r);
            if (!exact && !(ts_rel_l2_f(got, want, HV * V) <= tol))
                fail_msg("round %u row %u: the step after the accept is off the pool's", round, r);
        }
        /* both sides fold, so the next window starts at 0 again */
        for (uint32_t r = 0; r < ROWS; r++)
            TS_OK(rssm_pool_materialise(env.pool, slots[r], &err), &err);
        rssm_layer_tensors tm = engine_tensors(&e);
        TS_OK(lm_materialise(e.mem, layer, ROWS, &tm, &err), &err);
        for (uint32_t r = 0; r < ROWS; r++)
            e.cursor[slots[r]] = 0;
        load_states(&e, &env, s); /* the same checkpoints on both sides */
    }
    /* what a call may not be given */
    rssm_layer_tensors tv = engine_tensors(&e);
    tv.force = NULL;
    if (env.backend && lm_verify(e.mem, layer, 1, 1, drafts, &tv, &err) != RSSM_ERR_UNSUPPORTED) {
        TS_EXPECT(lm_verify(e.mem, layer, ROWS, 0, drafts, &tv, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
        TS_EXPECT(lm_verify(e.mem, layer, ROWS, L, drafts, &tv, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
        TS_EXPECT(lm_verify(e.mem, layer, ROWS + 2, (uint32_t)T, drafts, &tv, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
        TS_EXPECT(lm_verify(e.mem, layer, ROWS, 1, NULL, &tv, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
        tv.force = e.force;
        TS_EXPECT(lm_verify(e.mem, layer, ROWS, 1, drafts, &tv, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
        /* each entry says which entry of the other kind the backend takes */
        tv.force = NULL;
        TS_EXPECT(lm_records(e.mem) ? rssm_layer_verify(layer, ROWS, 1, drafts, &tv, NULL, &err)
                                    : rssm_layer_record_verify(layer, ROWS, 1, (rssm_buffer){1, 0}, NULL,
                                                               (void *)(uintptr_t)1, &err),
                  lm_records(e.mem) ? RSSM_ERR_UNSUPPORTED : RSSM_ERR_INVALID_ARGUMENT, &err);
        if (lm_records(e.mem))
            assert_non_null(strstr(err.message, "rssm_layer_record_verify"));
    } else if (lm_records(e.mem)) {
        fail_msg("the vulkan backend has no recorded window");
    }
    free(out);
    free(s);
    ts_inputs_free(&in);
    rssm_layer_destroy(&layer);
    engine_close(&e);
    ts_env_close(&env);
}

/* rssm_layer_record_verify on the vulkan backend against the cpu
 * backend's rssm_layer_verify on the same tensors (docs/design.md §9):
 * GDN and KDA, fp32 and bf16 state, an fp16 ring, windows of 2, 4 and 8
 * tokens from different ring positions, rows of different drafts, a padding
 * row, and a token whose ring entry fp16 cannot hold, reported by both as
 * the row's first overflowing token. Outputs to the vulkan tolerance, the
 * padding row's zeroed, those past a row's drafts untouched, the checkpoint
 * unwritten, the tentative entries of the rows that did not overflow close
 * to the cpu's. Other backends: skipped. */
enum { XL = 9, XCAP = XL - 1, XROWS = 4, XSLOTS = 4 };

typedef struct xarrays {
    lm_arena *mem;
    void *state, *ring_d, *ring_k;
    float *ring_g, *q, *k, *v, *gate, *beta, *out;
    int32_t *slot_index, *write_pos;
    uint32_t *overflow, *drafts;
} xarrays;

typedef struct xsizes {
    size_t state, ring_d, ring_k, ring_g, qk, v, gate, beta;
} xsizes;

static xsizes xsizes_of(const rssm_model *m, uint32_t T)
{
    const size_t H = m->num_qk_heads, HV = m->num_v_heads, K = m->head_k, V = m->head_v;
    const size_t G = m->gate_kind == RSSM_GATE_KDA ? K : 1, R = (size_t)XROWS * T;
    return (xsizes){XSLOTS * HV * V * K, XSLOTS * HV * XCAP * V, XSLOTS * H * XCAP * K, XSLOTS * HV * XCAP * G,
                    R * H * K, R * HV * V, R * HV * G, R * HV};
}

static void xarrays_open(xarrays *a, rssm_backend *b, const rssm_model *m, const xsizes *z)
{
    a->mem = lm_open(b);
    const size_t ss = rssm_dtype_size(m->state_dtype), rs = rssm_dtype_size(m->ring_dtype);
    a->state = lm_alloc(a->mem, z->state * ss);
    a->ring_d = lm_alloc(a->mem, z->ring_d * rs);
    a->ring_k = lm_alloc(a->mem, z->ring_k * rs);
    a->ring_g = lm_alloc(a->mem, z->ring_g * 4);
    a->q = lm_alloc(a->mem, z->qk * 4);
    a->k = lm_alloc(a->mem, z->qk * 4);
    a->v = lm_alloc(a->mem, z->v * 4);
    a->gate = lm_alloc(a->mem, z->gate * 4);
    a->beta = lm_alloc(a->mem, z->beta * 4);
    a->out = lm_alloc(a->mem, z->v * 4);
    a->slot_index = lm_alloc(a->mem, XROWS * 4);
    a->write_pos = lm_alloc(a->mem, XROWS * 4);
    a->overflow = lm_alloc(a->mem, XROWS * 4);
    a->drafts = lm_alloc(a->mem, XROWS * 4);
}

static rssm_layer_tensors xtensors(const xarrays *a)
{
    return (rssm_layer_tensors){.state = a->state, .ring_d = a->ring_d, .ring_k = a->ring_k, .ring_g = a->ring_g,
                                .q = a->q, .k = a->k, .v = a->v, .gate = a->gate, .beta = a->beta, .out = a->out,
                                .slot_index = a->slot_index, .write_pos = a->write_pos, .overflow = a->overflow};
}

static void xcopy(xarrays *to, const xarrays *from, const rssm_model *m, const xsizes *z)
{
    const size_t ss = rssm_dtype_size(m->state_dtype), rs = rssm_dtype_size(m->ring_dtype);
    memcpy(to->state, from->state, z->state * ss);
    memcpy(to->ring_d, from->ring_d, z->ring_d * rs);
    memcpy(to->ring_k, from->ring_k, z->ring_k * rs);
    memcpy(to->ring_g, from->ring_g, z->ring_g * 4);
    memcpy(to->q, from->q, z->qk * 4);
    memcpy(to->k, from->k, z->qk * 4);
    memcpy(to->v, from->v, z->v * 4);
    memcpy(to->gate, from->gate, z->gate * 4);
    memcpy(to->beta, from->beta, z->beta * 4);
    memcpy(to->out, from->out, z->v * 4);
    memcpy(to->slot_index, from->slot_index, XROWS * 4);
    memcpy(to->write_pos, from->write_pos, XROWS * 4);
    memcpy(to->drafts, from->drafts, XROWS * 4);
}

static void record_verify_matches_cpu(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *vk = ts_backend_shared(ts_backend());
    if (strncmp(rssm_backend_name(vk), "vulkan", 6) != 0)
        skip();
    rssm_backend *cpu = ts_backend_shared("cpu");
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 123, 0);
    static const rssm_gate_kind kinds[2] = {RSSM_GATE_GDN, RSSM_GATE_KDA};
    static const rssm_dtype states[2] = {RSSM_DTYPE_F32, RSSM_DTYPE_BF16};
    static const uint32_t windows[3] = {2, 4, 8};
    for (int gk = 0; gk < 2; gk++)
        for (int sd = 0; sd < 2; sd++)
            for (int wi = 0; wi < 3; wi++) {
                const uint32_t T = windows[wi];
                rssm_model m = ts_small_model(kinds[gk], 1, XL);
                m.state_dtype = states[sd];
                m.ring_dtype = RSSM_DTYPE_F16;
                const xsizes z = xsizes_of(&m, T);
                rssm_layer_desc d = {.model = m, .max_rows = XROWS * T, .slots = XSLOTS};
                rssm_layer *lv = NULL, *lc = NULL;
                TS_OK(rssm_layer_create(vk, &d, &lv, &err), &err);
                TS_OK(rssm_layer_create(cpu, &d, &lc, &err), &err);
                xarrays a, c;
                xarrays_open(&a, vk, &m, &z);
                xarrays_open(&c, cpu, &m, &z);
                for (size_t i = 0; i < z.state; i++)
                    rssm_store(c.state, m.state_dtype, i, (float)rh_rng_uniform(&rng, -1, 1));
                for (size_t i = 0; i < z.ring_d; i++)
                    rssm_store(c.ring_d, m.ring_dtype, i, (float)rh_rng_uniform(&rng, -1, 1));
                for (size_t i = 0; i < z.ring_k; i++)
                    rssm_store(c.ring_k, m.ring_dtype, i, (float)rh_rng_uniform(&rng, -0.5, 0.5));
                for (size_t i = 0; i < z.ring_g; i++)
                    c.ring_g[i] = (float)rh_rng_uniform(&rng, -0.4, -0.01);
                for (size_t i = 0; i < z.qk; i++) {
                    c.q[i] = (float)rh_rng_uniform(&rng, -1, 1);
                    c.k[i] = (float)rh_rng_uniform(&rng, -1, 1);
                }
                for (size_t i = 0; i < z.v; i++)
                    c.v[i] = (float)rh_rng_uniform(&rng, -1, 1);
                for (size_t i = 0; i < z.gate; i++)
                    c.gate[i] = (float)rh_rng_uniform(&rng, -0.4, -0.01);
                for (size_t i = 0; i < z.beta; i++)
                    c.beta[i] = (float)rh_rng_uniform(&rng, 0.1, 0.9);
                ts_poison(c.out, z.v * 4);
                /* rows: the whole window from 0; one token fewer from the
                 * end of the ring; one token from 3; padding */
                const int32_t slot[XROWS] = {2, 0, 3, -1};
                const uint32_t drafts[XROWS] = {T, T - 1, 1, 1};
                const int32_t wpos[XROWS] = {0, (int32_t)(XCAP - (T - 1)), 3, 0};
                memcpy(c.slot_index, slot, sizeof slot);
                memcpy(c.write_pos, wpos, sizeof wpos);
                memcpy(c.drafts, drafts, sizeof drafts);
                /* token HOT of row 0: v far beyond fp16 */
                const uint32_t HOT = T / 2;
                const size_t HV = m.num_v_heads, V = m.head_v, row_v = HV * V;
                for (size_t i = 0; i < row_v; i++)
                    c.v[((size_t)HOT * XROWS + 0) * row_v + i] *= 1e6f;
                xcopy(&a, &c, &m, &z);
                rssm_layer_tensors tc = xtensors(&c), ta = xtensors(&a);
                TS_OK(lm_verify(c.mem, lc, XROWS, T, c.drafts, &tc, &err), &err);
                TS_OK(lm_verify(a.mem, lv, XROWS, T, a.drafts, &ta, &err), &err);
                const double tol = rh_backend_tolerance(vk, &m, rh_tolerance(&m));
                for (uint32_t r = 0; r < XROWS; r++) {
                    const uint32_t want = r == 0 ? HOT : UINT32_MAX;
                    if (r < 3 && (c.overflow[r] != want || a.overflow[r] != want))
                        fail_msg("T %u row %u: first overflowing token %u (cpu %u), expected %u", T, r, a.overflow[r],
                                 c.overflow[r], want);
                    for (uint32_t t = 0; t < T; t++) {
                        const size_t at = ((size_t)t * XROWS + r) * row_v;
                        if (r == 3) { /* padding: zeros */
                            for (size_t i = 0; i < row_v; i++)
                                assert_true(a.out[at + i] == 0.0f);
                        } else if (t >= drafts[r]) { /* untouched */
                            assert_memory_equal(a.out + at, c.out + at, row_v * 4);
                        } else if (t < (r == 0 ? HOT : T)) {
                            const double e = ts_rel_l2_f(a.out + at, c.out + at, row_v);
                            if (!(e <= tol))
                                fail_msg("%s, %s state, T %u: row %u token %u off the cpu's by %g (tolerance %g)",
                                         gk ? "KDA" : "GDN", sd ? "bf16" : "fp32", T, r, t, e, tol);
                        }
                    }
                }
                /* no checkpoint written; the tentative entries of rows 1 and 2 */
                assert_memory_equal(a.state, c.state, z.state * rssm_dtype_size(m.state_dtype));
                for (uint32_t r = 1; r < 3; r++) {
                    const size_t n = (size_t)XCAP * V;
                    float ga[XCAP * 64], gc[XCAP * 64];
                    assert_true(n <= sizeof ga / sizeof ga[0]);
                    for (size_t hv = 0; hv < HV; hv++) {
                        const size_t base = ((size_t)slot[r] * HV + hv) * n;
                        for (size_t i = 0; i < n; i++) {
                            ga[i] = rssm_load(a.ring_d, m.ring_dtype, base + i);
                            gc[i] = rssm_load(c.ring_d, m.ring_dtype, base + i);
                        }
                        if (!(ts_rel_l2_f(ga, gc, n) <= tol))
                            fail_msg("T %u row %u: ring d entries off the cpu's", T, r);
                    }
                    const size_t G = m.gate_kind == RSSM_GATE_KDA ? m.head_k : 1;
                    assert_memory_equal(a.ring_g + (size_t)slot[r] * HV * XCAP * G,
                                        c.ring_g + (size_t)slot[r] * HV * XCAP * G, HV * XCAP * G * 4);
                }
                lm_close(a.mem);
                lm_close(c.mem);
                rssm_layer_destroy(&lv);
                rssm_layer_destroy(&lc);
            }
}

static void bad_descriptions(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *b = ts_backend_shared(ts_backend());
    const rssm_model m = ts_small_model(RSSM_GATE_GDN, 1, L);
    const size_t HV = m.num_v_heads, K = m.head_k, V = m.head_v;
    rssm_layer_desc d = {.model = m, .max_rows = 4, .slots = SLOTS};
    TS_OK(rssm_layer_can_implement(b, &d, &err), &err);

    rssm_layer_desc x = d;
    x.max_rows = 0;
    TS_EXPECT(rssm_layer_can_implement(b, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    x = d;
    x.slots = 0;
    TS_EXPECT(rssm_layer_can_implement(b, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    x = d;
    x.model.head_k = 6; /* not a multiple of 4 */
    TS_EXPECT(rssm_layer_can_implement(b, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    x = d;
    x.state_head_stride = -1;
    TS_EXPECT(rssm_layer_can_implement(b, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_non_null(strstr(err.message, "state_head_stride"));
    x = d;
    x.state_head_stride = (int64_t)(V * K - 4); /* heads overlap */
    TS_EXPECT(rssm_layer_can_implement(b, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_non_null(strstr(err.message, "overlap"));
    x = d;
    x.state_slot_stride = (int64_t)(V * K); /* slots overlap heads */
    TS_EXPECT(rssm_layer_can_implement(b, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    x = d;
    x.ring_d_head_stride = (int64_t)((L - 2) * V); /* shorter than the ring */
    TS_EXPECT(rssm_layer_can_implement(b, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_non_null(strstr(err.message, "ring_d"));
    x = d;
    x.gate_dtype = RSSM_DTYPE_F16;
    TS_EXPECT(rssm_layer_can_implement(b, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_non_null(strstr(err.message, "gate_dtype"));
    x = d;
    x.out_row_stride = (int64_t)(HV * V - 1);
    TS_EXPECT(rssm_layer_can_implement(b, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_non_null(strstr(err.message, "out_row_stride"));
    /* head-major slots ([HV][slots][V][K]) are a layout like any other */
    x = d;
    x.state_head_stride = (int64_t)(SLOTS * V * K);
    x.state_slot_stride = (int64_t)(V * K);
    TS_OK(rssm_layer_can_implement(b, &x, &err), &err);
    TS_EXPECT(rssm_layer_can_implement(NULL, &d, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_layer_can_implement(b, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    rssm_layer *l = (rssm_layer *)&x; /* must be reset to NULL on failure */
    x = d;
    x.slots = 0;
    TS_EXPECT(rssm_layer_create(b, &x, &l, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_null(l);
}

/* Runs that must be refused before anything is touched. */
static void bad_runs(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *b = NULL;
    TS_OK(rssm_backend_create(ts_backend(), &b, &err), &err);
    const rssm_model m = ts_small_model(RSSM_GATE_KDA, 1, L);
    engine e;
    engine_open(&e, b, &m);
    rssm_layer *l = NULL;
    TS_OK(rssm_layer_create(b, &e.desc, &l, &err), &err);
    /* the layer keeps the backend alive (the Vulkan buffers of the test's
     * own need its device until engine_close) */
    if (!lm_records(e.mem))
        rssm_backend_destroy(&b);
    rssm_layer_tensors t = engine_tensors(&e);
    for (uint32_t r = 0; r < ROWS; r++) {
        e.slot_index[r] = (int32_t)r;
        e.write_pos[r] = 0;
        e.force[r] = 0;
    }
    const size_t state_bytes = (size_t)e.state_slot * SLOTS * sizeof(float);
    float *before = malloc(state_bytes);
    assert_non_null(before);
    memcpy(before, e.state, state_bytes);

    TS_EXPECT(lm_run(e.mem, l, ROWS + 2, &t, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(lm_run(e.mem, l, ROWS, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    rssm_layer_tensors x = t;
    x.ring_k = NULL;
    TS_EXPECT(lm_run(e.mem, l, ROWS, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_non_null(strstr(err.message, "ring_k"));
    x = t;
    x.out = (char *)e.out + 2; /* not aligned to its element */
    TS_EXPECT(lm_run(e.mem, l, ROWS, &x, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_non_null(strstr(err.message, "out"));
    /* The other entry of the backend's: pointers where it takes buffers,
     * or the other way round. */
    rssm_layer_buffers none;
    memset(&none, 0, sizeof none);
    if (lm_records(e.mem))
        TS_EXPECT(rssm_layer_run(l, ROWS, &t, NULL, &err), RSSM_ERR_UNSUPPORTED, &err);
    else
        TS_EXPECT(rssm_layer_record(l, ROWS, &none, &none, &err), RSSM_ERR_UNSUPPORTED, &err);
    if (!lm_records(e.mem)) { /* only the host sees the rows before it runs them */
        e.write_pos[1] = L; /* beyond the ring */
        TS_EXPECT(lm_run(e.mem, l, ROWS, &t, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
        assert_non_null(strstr(err.message, "write_pos"));
        TS_EXPECT(lm_advance(e.mem, l, ROWS, e.slot_index, e.write_pos, e.force, e.cursor, &err),
                  RSSM_ERR_INVALID_ARGUMENT, &err);
        e.write_pos[1] = 0;
        e.slot_index[2] = 0; /* slot 0 twice */
        TS_EXPECT(lm_run(e.mem, l, ROWS, &t, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
        assert_non_null(strstr(err.message, "slot 0"));
        /* the advance refuses it too, before any cursor moves */
        int32_t *cursor_before = malloc(SLOTS * sizeof *cursor_before);
        assert_non_null(cursor_before);
        memcpy(cursor_before, e.cursor, SLOTS * sizeof *cursor_before);
        TS_EXPECT(lm_advance(e.mem, l, ROWS, e.slot_index, e.write_pos, e.force, e.cursor, &err),
                  RSSM_ERR_INVALID_ARGUMENT, &err);
        assert_non_null(strstr(err.message, "slot 0"));
        assert_memory_equal(cursor_before, e.cursor, SLOTS * sizeof *cursor_before);
        free(cursor_before);
    }
    assert_memory_equal(before, e.state, state_bytes);
    TS_OK(lm_run(e.mem, l, 0, &t, &err), &err); /* zero rows: nothing to do */
    TS_EXPECT(lm_advance(e.mem, l, ROWS, NULL, e.write_pos, e.force, e.cursor, &err), RSSM_ERR_INVALID_ARGUMENT,
              &err);
    TS_EXPECT(rssm_layer_advance(NULL, ROWS, e.slot_index, e.write_pos, e.force, e.cursor, NULL, &err),
              RSSM_ERR_INVALID_ARGUMENT, &err);
    free(before);
    rssm_layer_destroy(&l);
    rssm_layer_destroy(&l); /* twice: a no-op */
    rssm_layer_destroy(NULL);
    engine_close(&e);
    rssm_backend_destroy(&b);
}

/* The padding conventions: with RSSM_PADDING_NONPOSITIVE a row naming slot
 * 0 (vLLM's null block) is padding as -1 and >= slots are: output zeroed,
 * slot 0's state and rings untouched, its cursor not advanced; with the
 * default, slot 0 is a slot like the others. Anything else is refused. */
static void padding_conventions(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *b = ts_backend_shared(ts_backend());
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 1, L);
    m.gate_mode = RSSM_GATE_PRECOMPUTED;
    const size_t HV = m.num_v_heads, V = m.head_v;
    for (int conv = RSSM_PADDING_OUT_OF_RANGE; conv <= RSSM_PADDING_NONPOSITIVE; conv++) {
        rh_rng rng;
        rh_rng_seed(&rng, SEED + 11, 0);
        engine e;
        engine_open(&e, b, &m);
        e.desc.padding = (rssm_padding)conv;
        ts_fill(e.state, (size_t)e.state_slot * SLOTS, -0.5f, 0.5f, &rng);
        ts_fill(e.ring_d, (size_t)e.ring_d_slot * SLOTS, -0.5f, 0.5f, &rng);
        ts_fill(e.ring_k, (size_t)e.ring_k_slot * SLOTS, -0.5f, 0.5f, &rng);
        ts_fill(e.ring_g, (size_t)e.ring_g_slot * SLOTS, -0.5f, -0.01f, &rng);
        ts_fill(e.qkv, (size_t)e.qkv_row * STEP_ROWS, -1.0f, 1.0f, &rng);
        ts_fill(e.gate, STEP_ROWS * HV * e.G, -1.0f, -0.01f, &rng);
        ts_fill(e.beta, STEP_ROWS * HV, 0.1f, 0.9f, &rng);
        ts_fill(e.out, (size_t)e.out_row * STEP_ROWS, 5.0f, 6.0f, &rng);
        memcpy(e.slot_index, (int32_t[ROWS + 1]){0, 2, -1, 4}, (ROWS + 1) * sizeof(int32_t));
        memcpy(e.write_pos, (int32_t[ROWS + 1]){1, 2, 0, 0}, (ROWS + 1) * sizeof(int32_t));
        memset(e.force, 0, (ROWS + 1) * sizeof(int32_t));
        for (int i = 0; i < SLOTS; i++)
            e.cursor[i] = 9;
        const size_t slot0_bytes = (size_t)e.ring_d_slot * sizeof(float);
        float *ring_d0 = malloc(slot0_bytes), *state0 = malloc((size_t)e.state_slot * sizeof(float));
        assert_non_null(ring_d0);
        assert_non_null(state0);
        memcpy(ring_d0, e.ring_d, slot0_bytes);
        memcpy(state0, e.state, (size_t)e.state_slot * sizeof(float));

        rssm_layer *l = NULL;
        TS_OK(rssm_layer_create(b, &e.desc, &l, &err), &err);
        const rssm_layer_tensors t = engine_tensors(&e);
        TS_OK(lm_run(e.mem, l, ROWS + 1, &t, &err), &err);
        TS_OK(lm_advance(e.mem, l, ROWS + 1, e.slot_index, e.write_pos, NULL, e.cursor, &err), &err);
        const bool zero_pads = conv == RSSM_PADDING_NONPOSITIVE;
        for (uint32_t r = 0; r < ROWS + 1; r++) {
            const float *o = e.out + (size_t)r * e.out_row;
            const bool pad = r == 2 || (r == 0 && zero_pads);
            for (size_t i = 0; i < HV * V; i++)
                assert_true(pad ? o[i] == 0.0f : o[i] != 0.0f && o[i] < 5.0f);
        }
        /* slot 0: row 0 appends its entry at write_pos 1 unless it pads */
        assert_int_equal(memcmp(ring_d0, e.ring_d, slot0_bytes) == 0, zero_pads);
        assert_memory_equal(state0, e.state, (size_t)e.state_slot * sizeof(float)); /* no flush */
        assert_int_equal(e.cursor[0], zero_pads ? 9 : 2);
        assert_int_equal(e.cursor[2], 3);
        assert_int_equal(e.cursor[4], 1);
        rssm_layer_destroy(&l);
        free(ring_d0);
        free(state0);
        engine_close(&e);
    }
    rssm_layer_desc d = {.model = m, .max_rows = 1, .slots = SLOTS, .padding = (rssm_padding)2};
    rssm_layer *l = NULL;
    assert_int_equal(rssm_layer_create(b, &d, &l, &err), RSSM_ERR_INVALID_ARGUMENT);
    assert_null(l);
    assert_non_null(strstr(err.message, "padding"));
}

/* The advance: flush rows (full ring, or forced) go to 0, the others one
 * on, padding rows and rows beyond `rows` leave their slots alone. */
static void advance_rule(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *b = ts_backend_shared(ts_backend());
    const rssm_model m = ts_small_model(RSSM_GATE_GDN, 1, L);
    rssm_layer_desc d = {.model = m, .max_rows = 5, .slots = SLOTS};
    rssm_layer *l = NULL;
    TS_OK(rssm_layer_create(b, &d, &l, &err), &err);
    lm_arena *mem = lm_open(b);
    int32_t *slot_index = lm_alloc(mem, 5 * sizeof(int32_t)), *write_pos = lm_alloc(mem, 5 * sizeof(int32_t));
    int32_t *force = lm_alloc(mem, 5 * sizeof(int32_t)), *zero = lm_alloc(mem, 5 * sizeof(int32_t));
    int32_t *cursor = lm_alloc(mem, SLOTS * sizeof(int32_t));
    memcpy(slot_index, (int32_t[5]){4, 1, -3, 0, 2}, 5 * sizeof(int32_t));
    memcpy(write_pos, (int32_t[5]){L - 1, 1, 2, 2, 0}, 5 * sizeof(int32_t));
    memcpy(force, (int32_t[5]){0, 0, 1, 1, 0}, 5 * sizeof(int32_t));
    for (int i = 0; i < SLOTS; i++)
        cursor[i] = 7;
    TS_OK(lm_advance(mem, l, 4, slot_index, write_pos, force, cursor, &err), &err);
    const int32_t want[SLOTS] = {0, 2, 7, 7, 0};
    assert_memory_equal(cursor, want, sizeof want);
    TS_OK(lm_advance(mem, l, 4, slot_index, write_pos, NULL, cursor, &err), &err);
    const int32_t want_unforced[SLOTS] = {3, 2, 7, 7, 0};
    assert_memory_equal(cursor, want_unforced, sizeof want_unforced);
    rssm_layer_destroy(&l);

    /* packed decode: every step flushes */
    rssm_model packed = m;
    packed.replay = 0;
    d.model = packed;
    TS_OK(rssm_layer_create(b, &d, &l, &err), &err);
    TS_OK(lm_advance(mem, l, 5, slot_index, zero, NULL, cursor, &err), &err);
    const int32_t want_packed[SLOTS] = {0, 0, 0, 7, 0};
    assert_memory_equal(cursor, want_packed, sizeof want_packed);
    rssm_layer_destroy(&l);
    lm_close(mem);
}

/* The whole pool's bytes (state and rings), to see that a refused call
 * changed none of them. */
static size_t pool_bytes(const engine *e, uint8_t *to)
{
    const struct {
        const float *at;
        int64_t slot;
    } part[] = {{e->state, e->state_slot}, {e->ring_d, e->ring_d_slot}, {e->ring_k, e->ring_k_slot},
                {e->ring_g, e->ring_g_slot}};
    size_t n = 0;
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        const size_t bytes = (size_t)part[i].slot * SLOTS * sizeof(float);
        if (to)
            memcpy(to + n, part[i].at, bytes);
        n += bytes;
    }
    return n;
}

/* Whether a call was refused as overlapping, naming both tensors. */
static void expect_overlap(rssm_status st, const rssm_error *err, const char *a, const char *b)
{
    assert_int_equal(st, RSSM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err->message, "overlap"));
    assert_non_null(strstr(err->message, a));
    assert_non_null(strstr(err->message, b));
}

/* A tensor a call writes that shares memory with another tensor of the
 * call is refused before anything runs, naming both, by every entry (run,
 * materialise, verify, advance; recorded on vulkan): out inside the
 * checkpoint of a slot outside the batch, k's ring on d's, out over v
 * (rssm.h: no backend may write out over an input), overflow inside out, a
 * read array inside a written one, the cursor over the rows. The cursor
 * may be write_pos itself, and a pool whose state and rings share each
 * slot's page (an engine's paged pool) is taken, decoding to the same bits
 * as the same pool in tensors of their own. */
static void aliased_tensors(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *b = ts_backend_shared(ts_backend());
    const rssm_model m = ts_small_model(RSSM_GATE_GDN, 1, L);
    const size_t H = m.num_qk_heads, HV = m.num_v_heads, K = m.head_k, V = m.head_v;
    engine e;
    engine_open(&e, b, &m);
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 23, 0);
    ts_fill(e.state, (size_t)e.state_slot * SLOTS, -0.5f, 0.5f, &rng);
    ts_fill(e.ring_d, (size_t)e.ring_d_slot * SLOTS, -0.5f, 0.5f, &rng);
    ts_fill(e.ring_k, (size_t)e.ring_k_slot * SLOTS, -0.5f, 0.5f, &rng);
    ts_fill(e.ring_g, (size_t)e.ring_g_slot * SLOTS, -0.5f, -0.01f, &rng);
    ts_fill(e.qkv, (size_t)e.qkv_row * STEP_ROWS, -1.0f, 1.0f, &rng);
    ts_fill(e.gate, STEP_ROWS * HV, -1.0f, -0.01f, &rng);
    ts_fill(e.beta, STEP_ROWS * HV, 0.1f, 0.9f, &rng);
    memcpy(e.slot_index, (int32_t[ROWS]){0, 1, 2}, ROWS * sizeof(int32_t));
    memcpy(e.write_pos, (int32_t[ROWS]){1, 2, 0}, ROWS * sizeof(int32_t));
    rssm_layer *l = NULL;
    TS_OK(rssm_layer_create(b, &e.desc, &l, &err), &err);
    const rssm_layer_tensors t = engine_tensors(&e);
    const size_t pool_n = pool_bytes(&e, NULL);
    uint8_t *before = malloc(pool_n), *after = malloc(pool_n);
    assert_non_null(before);
    assert_non_null(after);
    pool_bytes(&e, before);

    rssm_layer_tensors x = t;
    x.out = e.state + (size_t)(SLOTS - 1) * e.state_slot; /* a slot no row names */
    expect_overlap(lm_run(e.mem, l, ROWS, &x, &err), &err, "state", "out");
    x = t;
    x.ring_k = e.ring_d;
    expect_overlap(lm_run(e.mem, l, ROWS, &x, &err), &err, "ring_d", "ring_k");
    x = t;
    x.out = (void *)(uintptr_t)x.v;
    expect_overlap(lm_run(e.mem, l, ROWS, &x, &err), &err, "v", "out");
    x = t;
    x.overflow = (uint32_t *)(void *)e.out;
    expect_overlap(lm_run(e.mem, l, ROWS, &x, &err), &err, "out", "overflow");
    x = t;
    x.force = (const int32_t *)(const void *)(e.ring_g + 3);
    expect_overlap(lm_run(e.mem, l, ROWS, &x, &err), &err, "ring_g", "force");
    x = t;
    x.ring_d = e.state;
    expect_overlap(lm_materialise(e.mem, l, ROWS, &x, &err), &err, "state", "ring_d");
    x = t;
    x.force = NULL;
    expect_overlap(lm_verify(e.mem, l, ROWS, 1, (const uint32_t *)(const void *)e.out, &x, &err), &err, "out",
                   "drafts");
    pool_bytes(&e, after);
    assert_memory_equal(before, after, pool_n);
    int32_t *cursor = lm_alloc(e.mem, SLOTS * sizeof(int32_t));
    expect_overlap(lm_advance(e.mem, l, ROWS, e.slot_index, e.write_pos, NULL, e.slot_index, &err), &err,
                   "slot_index", "cursor");
    /* a per-slot write_pos advanced in place: row r (slot r, 0 entries) to 1 */
    TS_OK(lm_advance(e.mem, l, ROWS, e.slot_index, cursor, NULL, cursor, &err), &err);
    const int32_t want[SLOTS] = {1, 1, 1, 0, 0};
    assert_memory_equal(cursor, want, sizeof want);

    /* The same pool, paged: each slot's state and rings side by side in a
     * page, each part 16-byte aligned as the GPU kernels need. */
    const size_t part[4] = {HV * V * K, HV * L * V, H * L * K, HV * L}; /* floats of each per slot */
    size_t at[4], page = 0;
    for (int i = 0; i < 4; i++) {
        at[i] = page;
        page += (part[i] * sizeof(float) + 15) / 16 * 16;
    }
    uint8_t *pages = lm_alloc(e.mem, page * SLOTS);
    const float *const from[4] = {e.state, e.ring_d, e.ring_k, e.ring_g};
    const int64_t from_slot[4] = {e.state_slot, e.ring_d_slot, e.ring_k_slot, e.ring_g_slot};
    for (size_t s = 0; s < SLOTS; s++)
        for (int i = 0; i < 4; i++)
            memcpy(pages + s * page + at[i], from[i] + s * (size_t)from_slot[i], part[i] * sizeof(float));
    rssm_layer_desc d = e.desc;
    d.state_slot_stride = d.ring_d_slot_stride = d.ring_k_slot_stride = d.ring_g_slot_stride =
        (int64_t)(page / sizeof(float));
    rssm_layer *paged = NULL;
    TS_OK(rssm_layer_create(b, &d, &paged, &err), &err);
    rssm_layer_tensors p = t;
    p.state = pages + at[0];
    p.ring_d = pages + at[1];
    p.ring_k = pages + at[2];
    p.ring_g = (float *)(void *)(pages + at[3]);
    const size_t out_n = (size_t)e.out_row * ROWS;
    float *out_apart = malloc(out_n * sizeof(float));
    assert_non_null(out_apart);
    TS_OK(lm_run(e.mem, l, ROWS, &t, &err), &err);
    memcpy(out_apart, e.out, out_n * sizeof(float));
    TS_OK(lm_run(e.mem, paged, ROWS, &p, &err), &err);
    assert_memory_equal(out_apart, e.out, out_n * sizeof(float));
    for (size_t s = 0; s < SLOTS; s++) /* the entries the step appended, the same bits */
        for (int i = 1; i < 4; i++)
            assert_memory_equal(pages + s * page + at[i], from[i] + s * (size_t)from_slot[i], part[i] * sizeof(float));
    free(out_apart);
    free(before);
    free(after);
    rssm_layer_destroy(&paged);
    rssm_layer_destroy(&l);
    engine_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gdn_matches_batch),
        cmocka_unit_test(kda_matches_batch),
        cmocka_unit_test(fp16_io_is_fp32_io_rounded),
        cmocka_unit_test(verify_matches_batch),
        cmocka_unit_test(record_verify_matches_cpu),
        cmocka_unit_test(bad_descriptions),
        cmocka_unit_test(bad_runs),
        cmocka_unit_test(advance_rule),
        cmocka_unit_test(padding_conventions),
        cmocka_unit_test(aliased_tensors),
    };
    return TS_RUN_ON_BACKEND(tests);
}
