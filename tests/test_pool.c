/* The slot pool (docs/design.md §3): alloc / free / copy / materialise, the true
 * state, export / import, and that every failure leaves the pool intact. */
#include "test_support.h"

#include "backend.h" /* rssm_slot_layout: where a payload keeps each array */
#include "checksum.h" /* the export checksum, to forge bytes whose checksum is right */
#include "dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SEED = 0x9001 };

/* Pool-level argument checks that need no slot contents. */
static void test_create_bad_args(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *b = NULL;
    TS_OK(rssm_backend_create(ts_backend(), &b, &err), &err);
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, 8);
    rssm_pool *p = NULL;
    TS_EXPECT(rssm_pool_create(NULL, &m, 4, RSSM_FLUSH_ALIGNED, &p, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_create(b, NULL, 4, RSSM_FLUSH_ALIGNED, &p, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_create(b, &m, 4, RSSM_FLUSH_ALIGNED, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_create(b, &m, 0, RSSM_FLUSH_ALIGNED, &p, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_create(b, &m, 4, (rssm_flush_policy)7, &p, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    rssm_model bad = m;
    bad.num_v_heads = 3;
    TS_EXPECT(rssm_pool_create(b, &bad, 4, RSSM_FLUSH_ALIGNED, &p, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    bad = m;
    bad.ring_len = 65;
    TS_EXPECT(rssm_pool_create(b, &bad, 4, RSSM_FLUSH_ALIGNED, &p, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_null(p);

    TS_OK(rssm_pool_create(b, &m, 5, RSSM_FLUSH_STAGGERED, &p, &err), &err);
    assert_int_equal(rssm_pool_capacity(p), 5);
    assert_int_equal(rssm_pool_free_count(p), 5);
    assert_memory_equal(rssm_pool_model(p), &m, sizeof m);
    size_t slot_bytes;
    TS_OK(rssm_model_slot_bytes(&m, &slot_bytes, &err), &err);
    assert_true(rssm_pool_export_size(p) >= slot_bytes);
    rssm_pool_destroy(&p);
    assert_null(p);
    rssm_pool_destroy(&p);
    rssm_pool_destroy(NULL);
    rssm_backend_destroy(&b);
}

static void expect_state(rssm_pool *p, uint32_t slot, const float *want)
{
    rssm_error err;
    const size_t n = ts_state_elems(rssm_pool_model(p));
    float *got = malloc(n * sizeof *got);
    ts_poison(got, n * sizeof *got);
    TS_OK(rssm_pool_read_state(p, slot, got, &err), &err);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("slot %u element %zu: read %.9g, expected %.9g", slot, i, (double)got[i], (double)want[i]);
    free(got);
}

static void test_alloc_until_full(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED, 0);
    rssm_error err;
    ts_env e;
    rssm_model m = ts_small_model(RSSM_GATE_KDA, 2, 4);
    ts_env_open(&e, ts_backend(), &m, 3, RSSM_FLUSH_ALIGNED, 0);
    const size_t n = ts_state_elems(&m);
    float *states[3];
    for (uint32_t i = 0; i < 3; i++) {
        uint32_t slot = 99;
        TS_OK(rssm_pool_alloc(e.pool, &slot, &err), &err);
        assert_int_equal(slot, i); /* the lowest free slot */
        assert_int_equal(rssm_pool_free_count(e.pool), 2 - i);
        states[i] = ts_random_state(&m, &rng);
        TS_OK(rssm_pool_write_state(e.pool, slot, states[i], &err), &err);
    }
    ts_pool_snapshot snap;
    ts_snapshot_take(&snap, e.pool);
    uint32_t slot = 77;
    TS_EXPECT(rssm_pool_alloc(e.pool, &slot, &err), RSSM_ERR_POOL_FULL, &err);
    TS_EXPECT(rssm_pool_alloc(e.pool, &slot, &err), RSSM_ERR_POOL_FULL, &err);
    assert_int_equal(slot, 77);
    assert_int_equal(rssm_pool_free_count(e.pool), 0);
    ts_snapshot_expect_equal(&snap, e.pool);
    for (uint32_t i = 0; i < 3; i++)
        expect_state(e.pool, i, states[i]);
    ts_snapshot_free(&snap);

    /* Freeing the middle slot makes it the one alloc hands out next, and a
     * reused slot starts with a zero state and an empty ring. */
    TS_OK(rssm_pool_free(e.pool, 1, &err), &err);
    assert_int_equal(rssm_pool_free_count(e.pool), 1);
    TS_OK(rssm_pool_alloc(e.pool, &slot, &err), &err);
    assert_int_equal(slot, 1);
    float *zero = calloc(n, sizeof *zero);
    expect_state(e.pool, 1, zero);
    uint32_t wp = 5;
    TS_OK(rssm_pool_write_pos(e.pool, 1, &wp, &err), &err);
    assert_int_equal(wp, 0);
    expect_state(e.pool, 0, states[0]);
    expect_state(e.pool, 2, states[2]);

    free(zero);
    for (int i = 0; i < 3; i++)
        free(states[i]);
    ts_env_close(&e);
}

static void test_free_bad_slot(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 1, 0);
    rssm_error err;
    ts_env e;
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, 4);
    ts_env_open(&e, ts_backend(), &m, 4, RSSM_FLUSH_ALIGNED, 0);
    ts_env_alloc_random(&e, 3, &rng);
    TS_OK(rssm_pool_free(e.pool, 1, &err), &err);

    ts_pool_snapshot snap;
    ts_snapshot_take(&snap, e.pool);
    TS_EXPECT(rssm_pool_free(e.pool, 1, &err), RSSM_ERR_BAD_SLOT, &err);  /* double free */
    TS_EXPECT(rssm_pool_free(e.pool, 3, &err), RSSM_ERR_BAD_SLOT, &err);  /* never allocated */
    TS_EXPECT(rssm_pool_free(e.pool, 4, &err), RSSM_ERR_BAD_SLOT, &err);  /* out of range */
    TS_EXPECT(rssm_pool_free(e.pool, UINT32_MAX, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_pool_free(NULL, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    ts_snapshot_expect_equal(&snap, e.pool);
    ts_snapshot_free(&snap);
    ts_env_close(&e);
}

/* Every slot function: NULL pointers are INVALID_ARGUMENT, slots that are
 * out of range or free are BAD_SLOT; the pool is unchanged. */
static void test_slot_functions_bad_args(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 2, 0);
    rssm_error err;
    ts_env e;
    rssm_model m = ts_small_model(RSSM_GATE_KDA, 2, 4);
    ts_env_open(&e, ts_backend(), &m, 4, RSSM_FLUSH_ALIGNED, 0);
    ts_env_alloc_random(&e, 3, &rng);
    TS_OK(rssm_pool_free(e.pool, 2, &err), &err); /* slot 2 free, 3 never used */
    float *buf = ts_random_state(&m, &rng);
    const size_t xs = rssm_pool_export_size(e.pool);
    uint8_t *bytes = malloc(xs);
    TS_OK(rssm_pool_export(e.pool, 0, bytes, xs, &err), &err);
    uint32_t wp;

    ts_pool_snapshot snap;
    ts_snapshot_take(&snap, e.pool);
    uint32_t slot;
    TS_EXPECT(rssm_pool_alloc(NULL, &slot, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_alloc(e.pool, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_write_pos(NULL, 0, &wp, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_write_pos(e.pool, 0, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_read_state(NULL, 0, buf, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_read_state(e.pool, 0, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_write_state(NULL, 0, buf, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_write_state(e.pool, 0, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_materialise(NULL, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_copy(NULL, 0, 1, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_export(NULL, 0, bytes, xs, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_export(e.pool, 0, NULL, xs, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_export(e.pool, 0, bytes, xs - 1, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_import(NULL, 0, bytes, xs, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_pool_import(e.pool, 0, NULL, xs, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_int_equal(rssm_pool_export_size(NULL), 0);
    assert_null(rssm_pool_model(NULL));
    assert_int_equal(rssm_pool_capacity(NULL), 0);

    const uint32_t bad_slots[] = { 2, 3, 4, 1000, UINT32_MAX };
    for (size_t i = 0; i < sizeof bad_slots / sizeof bad_slots[0]; i++) {
        const uint32_t s = bad_slots[i];
        TS_EXPECT(rssm_pool_write_pos(e.pool, s, &wp, &err), RSSM_ERR_BAD_SLOT, &err);
        TS_EXPECT(rssm_pool_read_state(e.pool, s, buf, &err), RSSM_ERR_BAD_SLOT, &err);
        TS_EXPECT(rssm_pool_write_state(e.pool, s, buf, &err), RSSM_ERR_BAD_SLOT, &err);
        TS_EXPECT(rssm_pool_materialise(e.pool, s, &err), RSSM_ERR_BAD_SLOT, &err);
        TS_EXPECT(rssm_pool_copy(e.pool, s, 0, &err), RSSM_ERR_BAD_SLOT, &err);
        TS_EXPECT(rssm_pool_copy(e.pool, 0, s, &err), RSSM_ERR_BAD_SLOT, &err);
        TS_EXPECT(rssm_pool_export(e.pool, s, bytes, xs, &err), RSSM_ERR_BAD_SLOT, &err);
        TS_EXPECT(rssm_pool_import(e.pool, s, bytes, xs, &err), RSSM_ERR_BAD_SLOT, &err);
    }
    /* Copying a slot onto itself is not a copy. */
    TS_EXPECT(rssm_pool_copy(e.pool, 1, 1, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    ts_snapshot_expect_equal(&snap, e.pool);

    ts_snapshot_free(&snap);
    free(bytes);
    free(buf);
    ts_env_close(&e);
}

static void test_state_round_trip(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 3, 0);
    rssm_error err;
    const rssm_dtype dts[] = { RSSM_DTYPE_F32, RSSM_DTYPE_BF16 };
    for (int d = 0; d < 2; d++) {
        rssm_model m = ts_small_model(d ? RSSM_GATE_KDA : RSSM_GATE_GDN, 3, 4);
        m.state_dtype = dts[d];
        ts_env e;
        ts_env_open(&e, ts_backend(), &m, 2, RSSM_FLUSH_ALIGNED, 0);
        ts_env_alloc_random(&e, 2, &rng);
        const size_t n = ts_state_elems(&m);
        float *s = ts_random_state(&m, &rng);
        TS_OK(rssm_pool_write_state(e.pool, 1, s, &err), &err);
        /* fp32: exact; bf16: each element rounded to nearest even. */
        float *want = malloc(n * sizeof *want);
        size_t changed = 0;
        for (size_t i = 0; i < n; i++) {
            want[i] = rssm_round_to(m.state_dtype, s[i]);
            changed += want[i] != s[i];
            assert_true(fabsf(want[i] - s[i]) <= fabsf(s[i]) * 0x1p-8f);
        }
        if (d == 0)
            assert_int_equal(changed, 0);
        else
            assert_true(changed > n / 2); /* the rounding is really there */
        expect_state(e.pool, 1, want);
        /* Reading twice changes nothing. */
        expect_state(e.pool, 1, want);
        uint32_t wp = 9;
        TS_OK(rssm_pool_write_pos(e.pool, 1, &wp, &err), &err);
        assert_int_equal(wp, 0);
        free(want);
        free(s);
        ts_env_close(&e);
    }
}

/* Runs `steps` single-row steps of `slot` with fresh random inputs. */
static void run_steps(ts_env *e, uint32_t slot, uint32_t steps, uint64_t *seq, rh_rng *rng)
{
    ts_inputs in;
    ts_inputs_alloc(&in, &e->model, 1);
    float *out = malloc(ts_out_elems(&e->model, 1) * sizeof(float));
    for (uint32_t i = 0; i < steps; i++) {
        ts_inputs_random(&in, rng);
        ++*seq;
        ts_step(e, 1, &slot, seq, 0, &in, out);
    }
    free(out);
    ts_inputs_free(&in);
}

static void test_materialise_mid_ring(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 4, 0);
    rssm_error err;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    for (int g = 0; g < 2; g++) {
        rssm_model m = ts_small_model(kinds[g], 2, 8);
        ts_env e;
        ts_env_open(&e, ts_backend(), &m, 2, RSSM_FLUSH_ALIGNED, 1);
        ts_env_alloc_random(&e, 2, &rng);
        uint64_t seq = 100;
        run_steps(&e, 1, 5, &seq, &rng);
        uint32_t wp;
        TS_OK(rssm_pool_write_pos(e.pool, 1, &wp, &err), &err);
        assert_int_equal(wp, 5);
        const size_t n = ts_state_elems(&m);
        float *before = malloc(n * sizeof *before), *after = malloc(n * sizeof *after);
        float *other = malloc(n * sizeof *other);
        TS_OK(rssm_pool_read_state(e.pool, 0, other, &err), &err);
        ts_poison(before, n * sizeof *before);
        TS_OK(rssm_pool_read_state(e.pool, 1, before, &err), &err);
        assert_int_equal(ts_count_nonfinite(before, RSSM_DTYPE_F32, n), 0);
        TS_OK(rssm_pool_write_pos(e.pool, 1, &wp, &err), &err);
        assert_int_equal(wp, 5); /* reading does not fold */

        TS_OK(rssm_pool_materialise(e.pool, 1, &err), &err);
        TS_OK(rssm_pool_write_pos(e.pool, 1, &wp, &err), &err);
        assert_int_equal(wp, 0);
        ts_poison(after, n * sizeof *after);
        TS_OK(rssm_pool_read_state(e.pool, 1, after, &err), &err);
        double rel = ts_rel_l2_f(after, before, n);
        if (!(rel <= 1e-6))
            fail_msg("%s: materialise moved the state by %.3g (relative)", rssm_gate_kind_name(m.gate_kind), rel);
        /* Materialising an empty ring is a no-op, bit for bit. */
        TS_OK(rssm_pool_materialise(e.pool, 1, &err), &err);
        expect_state(e.pool, 1, after);
        expect_state(e.pool, 0, other);
        free(before);
        free(after);
        free(other);
        ts_env_close(&e);
    }
}

/* Copy-on-write of a prefix whose ring is not empty: the destination gets
 * the source's true state and an empty ring, and both then decode alike. */
static void test_copy_on_write(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 5, 0);
    rssm_error err;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    for (int g = 0; g < 2; g++) {
        rssm_model m = ts_small_model(kinds[g], 2, 8);
        m.ring_dtype = RSSM_DTYPE_F16;
        ts_env e;
        ts_env_open(&e, ts_backend(), &m, 4, RSSM_FLUSH_ALIGNED, 2);
        ts_env_alloc_random(&e, 4, &rng);
        uint64_t seq = 40;
        run_steps(&e, 0, 3, &seq, &rng);
        const size_t n = ts_state_elems(&m);
        float *src_before = malloc(n * sizeof(float)), *src = malloc(n * sizeof(float));
        float *dst = malloc(n * sizeof(float)), *bystander = malloc(n * sizeof(float));
        TS_OK(rssm_pool_read_state(e.pool, 0, src_before, &err), &err);
        TS_OK(rssm_pool_read_state(e.pool, 3, bystander, &err), &err);

        TS_OK(rssm_pool_copy(e.pool, 0, 2, &err), &err);
        uint32_t wp;
        TS_OK(rssm_pool_write_pos(e.pool, 2, &wp, &err), &err);
        assert_int_equal(wp, 0);
        TS_OK(rssm_pool_write_pos(e.pool, 0, &wp, &err), &err);
        assert_int_equal(wp, 0); /* the source was materialised */
        TS_OK(rssm_pool_read_state(e.pool, 0, src, &err), &err);
        ts_poison(dst, n * sizeof(float));
        TS_OK(rssm_pool_read_state(e.pool, 2, dst, &err), &err);
        assert_memory_equal(dst, src, n * sizeof(float));
        assert_true(ts_rel_l2_f(src, src_before, n) <= 1e-6);
        expect_state(e.pool, 3, bystander);

        /* Same inputs on both rows: same outputs and states, bit for bit,
         * through a flush (5 + 3 > L). */
        ts_inputs in;
        ts_inputs_alloc(&in, &m, 2);
        float *out = malloc(ts_out_elems(&m, 2) * sizeof(float));
        const uint32_t slots[2] = { 0, 2 };
        const size_t per_row_q = (size_t)m.num_qk_heads * m.head_k, per_row_v = (size_t)m.num_v_heads * m.head_v;
        const size_t per_row_g = (size_t)m.num_v_heads * ts_gate_width(&m);
        for (int step = 0; step < 10; step++) {
            ts_inputs_random(&in, &rng);
            for (uint32_t l = 0; l < m.layers; l++) { /* row 1 <- row 0 */
                memcpy((float *)in.q + (2 * l + 1) * per_row_q, (float *)in.q + 2 * l * per_row_q, per_row_q * 4);
                memcpy((float *)in.k + (2 * l + 1) * per_row_q, (float *)in.k + 2 * l * per_row_q, per_row_q * 4);
                memcpy((float *)in.v + (2 * l + 1) * per_row_v, (float *)in.v + 2 * l * per_row_v, per_row_v * 4);
                memcpy(in.gate + (2 * l + 1) * per_row_g, in.gate + 2 * l * per_row_g, per_row_g * 4);
                memcpy(in.beta + (2 * l + 1) * m.num_v_heads, in.beta + 2 * l * m.num_v_heads, m.num_v_heads * 4);
            }
            seq++;
            const uint64_t seqs[2] = { seq, seq };
            ts_step(&e, 2, slots, seqs, 0, &in, out);
            for (uint32_t l = 0; l < m.layers; l++)
                assert_memory_equal(out + (2 * l) * per_row_v, out + (2 * l + 1) * per_row_v, per_row_v * 4);
        }
        TS_OK(rssm_pool_read_state(e.pool, 0, src, &err), &err);
        TS_OK(rssm_pool_read_state(e.pool, 2, dst, &err), &err);
        assert_memory_equal(dst, src, n * sizeof(float));
        expect_state(e.pool, 3, bystander);

        free(out);
        ts_inputs_free(&in);
        free(src_before);
        free(src);
        free(dst);
        free(bystander);
        ts_env_close(&e);
    }
}

/* Copy failures (bad dst) must not even materialise the source. */
static void test_copy_errors_keep_source_ring(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 6, 0);
    rssm_error err;
    rssm_model m = ts_small_model(RSSM_GATE_KDA, 1, 8);
    ts_env e;
    ts_env_open(&e, ts_backend(), &m, 3, RSSM_FLUSH_ALIGNED, 1);
    ts_env_alloc_random(&e, 2, &rng);
    uint64_t seq = 7;
    run_steps(&e, 0, 4, &seq, &rng);
    ts_pool_snapshot snap;
    ts_snapshot_take(&snap, e.pool);
    assert_int_equal(snap.write_pos[0], 4);
    TS_EXPECT(rssm_pool_copy(e.pool, 0, 2, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_pool_copy(e.pool, 0, 3, &err), RSSM_ERR_BAD_SLOT, &err);
    TS_EXPECT(rssm_pool_copy(e.pool, 0, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    ts_snapshot_expect_equal(&snap, e.pool);
    ts_snapshot_free(&snap);
    ts_env_close(&e);
}

/* Export mid-ring, import into another pool at another slot index, and
 * continue both: identical to the uninterrupted run, bit for bit. */
static void test_export_import_continue(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 7, 0);
    rssm_error err;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    const rssm_dtype rings[] = { RSSM_DTYPE_F32, RSSM_DTYPE_BF16 };
    for (int g = 0; g < 2; g++) {
        rssm_model m = ts_small_model(kinds[g], 2, 8);
        m.ring_dtype = rings[g];
        m.state_dtype = rings[g];
        ts_env a, b;
        ts_env_open(&a, ts_backend(), &m, 2, RSSM_FLUSH_ALIGNED, 1);
        ts_env_open(&b, ts_backend(), &m, 4, RSSM_FLUSH_ALIGNED, 1);
        ts_env_alloc_random(&a, 2, &rng);
        ts_env_alloc_random(&b, 4, &rng);
        uint64_t seq = 1000;
        run_steps(&a, 1, 13, &seq, &rng); /* one flush, then 5 entries */
        uint32_t wp;
        TS_OK(rssm_pool_write_pos(a.pool, 1, &wp, &err), &err);
        assert_int_equal(wp, 5);

        const size_t xs = rssm_pool_export_size(a.pool);
        assert_int_equal(xs, rssm_pool_export_size(b.pool));
        uint8_t *bytes = malloc(xs);
        ts_poison(bytes, xs);
        TS_OK(rssm_pool_export(a.pool, 1, bytes, xs, &err), &err);
        TS_OK(rssm_pool_import(b.pool, 3, bytes, xs, &err), &err);
        TS_OK(rssm_pool_write_pos(b.pool, 3, &wp, &err), &err);
        assert_int_equal(wp, 5);
        /* Exporting the imported slot gives the same bytes back. */
        uint8_t *again = malloc(xs);
        TS_OK(rssm_pool_export(b.pool, 3, again, xs, &err), &err);
        assert_memory_equal(again, bytes, xs);
        /* The bytes may sit at any offset of the caller's buffer: the same
         * slot from an odd address (UBSan fails a misaligned typed load). */
        uint8_t *odd = malloc(xs + 1);
        memcpy(odd + 1, bytes, xs);
        TS_OK(rssm_pool_import(b.pool, 2, odd + 1, xs, &err), &err);
        TS_OK(rssm_pool_export(b.pool, 2, again, xs, &err), &err);
        assert_memory_equal(again, bytes, xs);
        free(odd);

        const size_t n = ts_state_elems(&m);
        float *sa = malloc(n * sizeof(float)), *sb = malloc(n * sizeof(float));
        TS_OK(rssm_pool_read_state(a.pool, 1, sa, &err), &err);
        TS_OK(rssm_pool_read_state(b.pool, 3, sb, &err), &err);
        assert_memory_equal(sa, sb, n * sizeof(float));

        ts_inputs in;
        ts_inputs_alloc(&in, &m, 1);
        const size_t no = ts_out_elems(&m, 1);
        float *oa = malloc(no * sizeof(float)), *ob = malloc(no * sizeof(float));
        const uint32_t slot_a = 1, slot_b = 3;
        for (int step = 0; step < 12; step++) { /* crosses a flush */
            ts_inputs_random(&in, &rng);
            seq++;
            ts_step(&a, 1, &slot_a, &seq, 0, &in, oa);
            ts_step(&b, 1, &slot_b, &seq, 0, &in, ob);
            assert_memory_equal(oa, ob, no * sizeof(float));
        }
        TS_OK(rssm_pool_read_state(a.pool, 1, sa, &err), &err);
        TS_OK(rssm_pool_read_state(b.pool, 3, sb, &err), &err);
        assert_memory_equal(sa, sb, n * sizeof(float));
        uint32_t wa, wb;
        TS_OK(rssm_pool_write_pos(a.pool, 1, &wa, &err), &err);
        TS_OK(rssm_pool_write_pos(b.pool, 3, &wb, &err), &err);
        assert_int_equal(wa, wb);

        free(oa);
        free(ob);
        ts_inputs_free(&in);
        free(sa);
        free(sb);
        free(again);
        free(bytes);
        ts_env_close(&a);
        ts_env_close(&b);
    }
}

/* Bytes exported by a pool of model `other` into a pool of model `m`. */
static rssm_status import_foreign(const rssm_model *m, const rssm_model *other, rh_rng *rng, rssm_error *err)
{
    ts_env a, b;
    ts_env_open(&a, ts_backend(), other, 1, RSSM_FLUSH_ALIGNED, 0);
    ts_env_open(&b, ts_backend(), m, 1, RSSM_FLUSH_ALIGNED, 0);
    ts_env_alloc_random(&a, 1, rng);
    ts_env_alloc_random(&b, 1, rng);
    size_t xs = rssm_pool_export_size(a.pool);
    uint8_t *bytes = malloc(xs);
    TS_OK(rssm_pool_export(a.pool, 0, bytes, xs, err), err);
    ts_pool_snapshot snap;
    ts_snapshot_take(&snap, b.pool);
    rssm_status st = rssm_pool_import(b.pool, 0, bytes, xs, err);
    if (st != RSSM_OK)
        ts_snapshot_expect_equal(&snap, b.pool);
    ts_snapshot_free(&snap);
    free(bytes);
    ts_env_close(&a);
    ts_env_close(&b);
    return st;
}

/* Bytes with a correct checksum whose content no kernel may run from: a NaN
 * or infinite checkpoint value, a NaN d or k, a positive or NaN log-decay in
 * a committed ring entry. Import refuses each, naming what is wrong, and
 * leaves the slot as it was; the same damage to an uncommitted entry (which
 * nothing reads) is accepted. */
static void reseal(uint8_t *blob, size_t size)
{
    enum { HEADER = 80, CHECKSUM_AT = 72 };
    uint8_t header[HEADER];
    memcpy(header, blob, HEADER);
    memset(header + CHECKSUM_AT, 0, 8);
    const uint64_t sum = rssm_xxh3_64(blob + HEADER, size - HEADER, rssm_xxh3_64(header, HEADER, 0));
    memcpy(blob + CHECKSUM_AT, &sum, 8);
}

static void test_import_validates_content(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 9, 0);
    rssm_error err;
    for (int kda = 0; kda < 2; kda++) {
        rssm_model m = ts_small_model(kda ? RSSM_GATE_KDA : RSSM_GATE_GDN, 2, 8);
        ts_env e;
        ts_env_open(&e, ts_backend(), &m, 2, RSSM_FLUSH_ALIGNED, 1);
        ts_env_alloc_random(&e, 2, &rng);
        uint64_t seq = 3;
        run_steps(&e, 0, 3, &seq, &rng); /* slot 0: write_pos 3 */
        rssm_slot_layout lay;
        rssm_slot_layout_init(&lay, &m);
        const size_t xs = rssm_pool_export_size(e.pool), payload = xs - lay.slot_bytes;
        uint8_t *good = malloc(xs), *bad = malloc(xs);
        TS_OK(rssm_pool_export(e.pool, 0, good, xs, &err), &err);
        ts_pool_snapshot snap;
        ts_snapshot_take(&snap, e.pool);
        const size_t layer1 = payload + lay.layer_bytes, gw = kda ? m.head_k : 1;
        struct { size_t at; float value; int committed; const char *what; } cases[] = {
            {payload + 4 * 7, NAN, 1, "checkpoint"},
            {layer1 + 4 * 3, INFINITY, 1, "checkpoint"},
            {layer1 + lay.ring_g_offset + 4 * (1 * gw), 0.5f, 1, "log-decay"},  /* head 0, entry 1 */
            {payload + lay.ring_g_offset + 4 * (2 * gw), NAN, 1, "log-decay"},   /* head 0, entry 2 */
            {payload + lay.ring_d_offset + 4 * (1 * m.head_v), NAN, 1, "d holds"},
            {layer1 + lay.ring_k_offset + 4 * (2 * m.head_k + 1), -INFINITY, 1, "k holds"},
            {payload + lay.ring_g_offset + 4 * (5 * gw), 0.5f, 0, NULL},         /* entry 5: not committed */
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            memcpy(bad, good, xs);
            memcpy(bad + cases[i].at, &cases[i].value, 4);
            reseal(bad, xs);
            if (cases[i].committed) {
                TS_EXPECT(rssm_pool_import(e.pool, 1, bad, xs, &err), RSSM_ERR_FORMAT, &err);
                if (!strstr(err.message, cases[i].what))
                    fail_msg("case %zu: '%s' does not say '%s'", i, err.message, cases[i].what);
                ts_snapshot_expect_equal(&snap, e.pool);
            } else {
                TS_OK(rssm_pool_import(e.pool, 1, bad, xs, &err), &err);
            }
        }
        ts_snapshot_free(&snap);
        free(good);
        free(bad);
        ts_env_close(&e);
    }
}

static void test_import_rejects_bad_bytes(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 8, 0);
    rssm_error err;
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, 8);
    m.num_qk_heads = m.num_v_heads = 4;
    m.ring_dtype = RSSM_DTYPE_F16;
    ts_env e;
    ts_env_open(&e, ts_backend(), &m, 2, RSSM_FLUSH_ALIGNED, 1);
    ts_env_alloc_random(&e, 2, &rng);
    uint64_t seq = 3;
    run_steps(&e, 0, 3, &seq, &rng);
    run_steps(&e, 1, 5, &seq, &rng);
    const size_t xs = rssm_pool_export_size(e.pool);
    uint8_t *good = malloc(xs + 16), *bad = malloc(xs + 16);
    TS_OK(rssm_pool_export(e.pool, 0, good, xs, &err), &err);
    memset(good + xs, 0, 16);

    ts_pool_snapshot snap;
    ts_snapshot_take(&snap, e.pool);
    /* Truncated, or with bytes to spare. */
    const size_t sizes[] = { 0, 1, 8, 64, xs / 2, xs - 1, xs + 1, xs + 16 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        memcpy(bad, good, xs + 16);
        TS_EXPECT(rssm_pool_import(e.pool, 1, bad, sizes[i], &err), RSSM_ERR_FORMAT, &err);
        if (sizes[i] >= 80) /* past the header: says which way the size is off */
            assert_non_null(strstr(err.message, sizes[i] < xs ? "truncated?" : "trailing bytes?"));
    }
    /* A header whose payload_bytes (the u64 at byte 64 of the 80-byte
     * header, common/pool_io.c) describes another payload is named as
     * such, not as a size mismatch of equal numbers. */
    memcpy(bad, good, xs);
    bad[64] ^= 0x10;
    TS_EXPECT(rssm_pool_import(e.pool, 1, bad, xs, &err), RSSM_ERR_FORMAT, &err);
    assert_non_null(strstr(err.message, "payload_bytes"));
    /* Every byte of the magic. */
    for (size_t i = 0; i < 4; i++) {
        memcpy(bad, good, xs);
        bad[i] ^= 0x20;
        TS_EXPECT(rssm_pool_import(e.pool, 1, bad, xs, &err), RSSM_ERR_FORMAT, &err);
    }
    /* A flipped bit anywhere (header or payload) must be caught, or be
     * harmless: the slot then holds exactly what the good bytes give. A
     * flipped write_pos that still fits the ring is the dangerous case: it
     * would silently commit ring entries that were never written. */
    const size_t n = ts_state_elems(&m);
    float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    uint32_t want_wp;
    TS_OK(rssm_pool_read_state(e.pool, 0, want, &err), &err);
    TS_OK(rssm_pool_write_pos(e.pool, 0, &want_wp, &err), &err);
    uint8_t *orig1 = malloc(xs);
    TS_OK(rssm_pool_export(e.pool, 1, orig1, xs, &err), &err);
    for (size_t pos = 0; pos < xs; pos += (pos < 128 ? 1 : 997)) {
        memcpy(bad, good, xs);
        bad[pos] ^= 0x04;
        rssm_status st = rssm_pool_import(e.pool, 1, bad, xs, &err);
        if (st == RSSM_OK) {
            uint32_t wp;
            TS_OK(rssm_pool_write_pos(e.pool, 1, &wp, &err), &err);
            TS_OK(rssm_pool_read_state(e.pool, 1, got, &err), &err);
            if (wp != want_wp || memcmp(got, want, n * sizeof(float)) != 0)
                fail_msg("a flipped bit at byte %zu of %zu was accepted and changed the slot "
                         "(write_pos %u, expected %u)", pos, xs, wp, want_wp);
            TS_OK(rssm_pool_import(e.pool, 1, orig1, xs, &err), &err);
        } else if (st != RSSM_ERR_FORMAT) {
            fail_msg("byte %zu flipped: import returned %s", pos, rssm_status_str(st));
        }
    }
    free(orig1);
    free(want);
    free(got);
    ts_snapshot_expect_equal(&snap, e.pool);
    ts_snapshot_free(&snap);

    /* Another model's bytes. K and V swapped gives the same byte count
     * (H == HV, GDN), and fp16 vs bf16 ring too, so only the shape and
     * dtype fields can tell them apart. */
    rssm_model o = m;
    o.head_k = m.head_v;
    o.head_v = m.head_k;
    TS_EXPECT(import_foreign(&m, &o, &rng, &err), RSSM_ERR_FORMAT, &err);
    o = m;
    o.ring_dtype = RSSM_DTYPE_BF16;
    TS_EXPECT(import_foreign(&m, &o, &rng, &err), RSSM_ERR_FORMAT, &err);
    o = m;
    o.ring_len = 9;
    TS_EXPECT(import_foreign(&m, &o, &rng, &err), RSSM_ERR_FORMAT, &err);
    o = m;
    o.gate_kind = RSSM_GATE_KDA;
    TS_EXPECT(import_foreign(&m, &o, &rng, &err), RSSM_ERR_FORMAT, &err);
    o = m;
    o.state_dtype = RSSM_DTYPE_BF16;
    TS_EXPECT(import_foreign(&m, &o, &rng, &err), RSSM_ERR_FORMAT, &err);
    o = m;
    o.layers = 1;
    TS_EXPECT(import_foreign(&m, &o, &rng, &err), RSSM_ERR_FORMAT, &err);
    o = m;
    o.num_qk_heads = 2;
    TS_EXPECT(import_foreign(&m, &o, &rng, &err), RSSM_ERR_FORMAT, &err);
    o = m;
    o.replay = 0;
    TS_EXPECT(import_foreign(&m, &o, &rng, &err), RSSM_ERR_FORMAT, &err);
    /* What does not change a slot's bytes may differ. */
    o = m;
    o.io_dtype = RSSM_DTYPE_BF16;
    o.qk_l2norm = 0;
    o.q_scale = 0.5f;
    TS_OK(import_foreign(&m, &o, &rng, &err), &err);

    free(good);
    free(bad);
    ts_env_close(&e);
}

/* A STAGGERED pool's slots still decode exactly like an ALIGNED pool's:
 * the early flush is exact algebra, so the states agree to rounding. */
static void test_policies_agree(void **state)
{
    (void)state;
    rh_rng rng;
    rh_rng_seed(&rng, SEED + 9, 0);
    rssm_error err;
    rssm_model m = ts_small_model(RSSM_GATE_KDA, 1, 4);
    ts_env a, s;
    ts_env_open(&a, ts_backend(), &m, 4, RSSM_FLUSH_ALIGNED, 4);
    ts_env_open(&s, ts_backend(), &m, 4, RSSM_FLUSH_STAGGERED, 4);
    const size_t n = ts_state_elems(&m);
    for (uint32_t i = 0; i < 4; i++) {
        uint32_t x, y;
        TS_OK(rssm_pool_alloc(a.pool, &x, &err), &err);
        TS_OK(rssm_pool_alloc(s.pool, &y, &err), &err);
        float *st = ts_random_state(&m, &rng);
        TS_OK(rssm_pool_write_state(a.pool, x, st, &err), &err);
        TS_OK(rssm_pool_write_state(s.pool, y, st, &err), &err);
        free(st);
    }
    ts_inputs in;
    ts_inputs_alloc(&in, &m, 4);
    const size_t no = ts_out_elems(&m, 4);
    float *oa = malloc(no * 4), *os = malloc(no * 4);
    const uint32_t slots[4] = { 0, 1, 2, 3 };
    uint64_t seqs[4] = { 10, 20, 30, 40 };
    for (int step = 0; step < 9; step++) {
        ts_inputs_random(&in, &rng);
        for (int r = 0; r < 4; r++)
            seqs[r]++;
        ts_step(&a, 4, slots, seqs, 0, &in, oa);
        ts_step(&s, 4, slots, seqs, 0, &in, os);
        double rel = ts_rel_l2_f(os, oa, no);
        if (!(rel <= 1e-5))
            fail_msg("step %d: staggered vs aligned outputs differ by %.3g", step, rel);
    }
    float *xa = malloc(n * 4), *xs = malloc(n * 4);
    for (uint32_t i = 0; i < 4; i++) {
        TS_OK(rssm_pool_read_state(a.pool, i, xa, &err), &err);
        TS_OK(rssm_pool_read_state(s.pool, i, xs, &err), &err);
        assert_true(ts_rel_l2_f(xs, xa, n) <= 1e-5);
    }
    free(xa);
    free(xs);
    free(oa);
    free(os);
    ts_inputs_free(&in);
    ts_env_close(&a);
    ts_env_close(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_bad_args),
        cmocka_unit_test(test_alloc_until_full),
        cmocka_unit_test(test_free_bad_slot),
        cmocka_unit_test(test_slot_functions_bad_args),
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_materialise_mid_ring),
        cmocka_unit_test(test_copy_on_write),
        cmocka_unit_test(test_copy_errors_keep_source_ring),
        cmocka_unit_test(test_export_import_continue),
        cmocka_unit_test(test_import_rejects_bad_bytes),
        cmocka_unit_test(test_import_validates_content),
        cmocka_unit_test(test_policies_agree),
    };
    return TS_RUN_ON_BACKEND(tests);
}
