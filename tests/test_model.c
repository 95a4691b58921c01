/* rssm_model: presets, validation of every field, and the bytes a slot costs. */
#include "test_support.h"

#include "rssm_layout.h"

#include <math.h>
#include <string.h>

static void test_presets(void **state)
{
    (void)state;
    rssm_error err;
    rssm_model m;

    memset(&m, 0x5a, sizeof m);
    TS_OK(rssm_model_preset(&m, "qwen3.5-gdn", &err), &err);
    assert_int_equal(m.layers, 36);
    assert_int_equal(m.num_qk_heads, 16);
    assert_int_equal(m.num_v_heads, 32);
    assert_int_equal(m.head_k, 128);
    assert_int_equal(m.head_v, 128);
    assert_int_equal(m.gate_kind, RSSM_GATE_GDN);
    assert_int_equal(m.gate_mode, RSSM_GATE_PRECOMPUTED);
    assert_int_equal(m.replay, 1);
    assert_int_equal(m.ring_len, 16);
    assert_int_equal(m.state_dtype, RSSM_DTYPE_F32);
    assert_int_equal(m.ring_dtype, RSSM_DTYPE_F16);
    assert_int_equal(m.io_dtype, RSSM_DTYPE_F32);
    assert_int_equal(m.qk_l2norm, 1);
    assert_true(m.q_scale == 0.0f);
    TS_OK(rssm_model_validate(&m, &err), &err);

    memset(&m, 0x5a, sizeof m);
    TS_OK(rssm_model_preset(&m, "kimi-linear-kda", &err), &err);
    assert_int_equal(m.layers, 20);
    assert_int_equal(m.num_qk_heads, 32);
    assert_int_equal(m.num_v_heads, 32);
    assert_int_equal(m.head_k, 128);
    assert_int_equal(m.head_v, 128);
    assert_int_equal(m.gate_kind, RSSM_GATE_KDA);
    assert_int_equal(m.gate_mode, RSSM_GATE_PRECOMPUTED);
    assert_int_equal(m.replay, 1);
    assert_int_equal(m.ring_len, 16);
    assert_int_equal(m.state_dtype, RSSM_DTYPE_F32);
    assert_int_equal(m.ring_dtype, RSSM_DTYPE_F16);
    assert_int_equal(m.io_dtype, RSSM_DTYPE_F32);
    assert_int_equal(m.qk_l2norm, 1);
    assert_true(m.q_scale == 0.0f);
    TS_OK(rssm_model_validate(&m, &err), &err);

    /* Unknown names and NULLs leave the model alone. */
    rssm_model before = m;
    TS_EXPECT(rssm_model_preset(&m, "qwen3.5", &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_model_preset(&m, "", &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_model_preset(&m, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_model_preset(NULL, "qwen3.5-gdn", &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_memory_equal(&m, &before, sizeof m);
    /* err may be NULL. */
    assert_int_equal(rssm_model_preset(&m, "nope", NULL), RSSM_ERR_INVALID_ARGUMENT);
}

/* One invalid variant of a valid base model. */
typedef struct bad_case {
    const char *what;
    void (*mutate)(rssm_model *m);
} bad_case;

#define BAD(name, body) static void bad_##name(rssm_model *m) { body; }
BAD(layers0, m->layers = 0)
BAD(h0, m->num_qk_heads = 0)
BAD(hv0, m->num_v_heads = 0)
BAD(k0, m->head_k = 0)
BAD(v0, m->head_v = 0)
BAD(k_not4, m->head_k = 18)
BAD(v_not4, m->head_v = 10)
BAD(k_big, m->head_k = 260)
BAD(v_big, m->head_v = 260)
BAD(hv_mod_h, (m->num_qk_heads = 3, m->num_v_heads = 4))
BAD(hv_lt_h, (m->num_qk_heads = 4, m->num_v_heads = 2))
BAD(l0, m->ring_len = 0)
BAD(l65, m->ring_len = 65)
BAD(l_huge, m->ring_len = 0x80000001u)
BAD(gate_kind, m->gate_kind = (rssm_gate_kind)2)
BAD(gate_kind_neg, m->gate_kind = (rssm_gate_kind)-1)
BAD(gate_mode, m->gate_mode = (rssm_gate_mode)3)
BAD(replay2, m->replay = 2)
BAD(qknorm2, m->qk_l2norm = 2)
BAD(state_unknown, m->state_dtype = (rssm_dtype)7)
BAD(ring_unknown, m->ring_dtype = (rssm_dtype)7)
BAD(io_unknown, m->io_dtype = (rssm_dtype)7)
BAD(state_f16, m->state_dtype = RSSM_DTYPE_F16)  /* state: fp32 or bf16 only */
BAD(io_past_bf16, m->io_dtype = (rssm_dtype)(RSSM_DTYPE_BF16 + 1)) /* io: fp32, fp16 or bf16 */
BAD(io_neg, m->io_dtype = (rssm_dtype)-1)
BAD(safe_bound0, (m->gate_mode = RSSM_GATE_RAW_SAFE, m->gate_lower_bound = 0.0f))
BAD(safe_bound_pos, (m->gate_mode = RSSM_GATE_RAW_SAFE, m->gate_lower_bound = 2.0f))
BAD(safe_bound_nan, (m->gate_mode = RSSM_GATE_RAW_SAFE, m->gate_lower_bound = NAN))
BAD(safe_bound_inf, (m->gate_mode = RSSM_GATE_RAW_SAFE, m->gate_lower_bound = -INFINITY))
BAD(q_scale_neg, m->q_scale = -0.5f)
BAD(q_scale_nan, m->q_scale = NAN)
BAD(q_scale_inf, m->q_scale = INFINITY)
#undef BAD

static const bad_case bad_cases[] = {
#define C(name) { #name, bad_##name }
    C(layers0), C(h0), C(hv0), C(k0), C(v0), C(k_not4), C(v_not4), C(k_big), C(v_big),
    C(hv_mod_h), C(hv_lt_h), C(l0), C(l65), C(l_huge), C(gate_kind), C(gate_kind_neg),
    C(gate_mode), C(replay2), C(qknorm2), C(state_unknown), C(ring_unknown), C(io_unknown),
    C(state_f16), C(io_past_bf16), C(io_neg), C(safe_bound0), C(safe_bound_pos), C(safe_bound_nan),
    C(safe_bound_inf), C(q_scale_neg), C(q_scale_nan), C(q_scale_inf),
#undef C
};

static void test_validate_rejects_each_bad_field(void **state)
{
    (void)state;
    rssm_error err;
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    for (size_t g = 0; g < 2; g++) {
        rssm_model base = ts_small_model(kinds[g], 2, 8);
        TS_OK(rssm_model_validate(&base, &err), &err);
        for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
            rssm_model m = base;
            bad_cases[i].mutate(&m);
            memset(&err, 0, sizeof err);
            rssm_status st = rssm_model_validate(&m, &err);
            if (st != RSSM_ERR_INVALID_ARGUMENT)
                fail_msg("model with bad %s: validate returned %s", bad_cases[i].what, rssm_status_str(st));
            assert_int_equal(err.status, RSSM_ERR_INVALID_ARGUMENT);
            if (err.message[0] == '\0')
                fail_msg("bad %s: empty message", bad_cases[i].what);
            /* slot_bytes validates too, and leaves *bytes alone. */
            size_t bytes = 12345;
            TS_EXPECT(rssm_model_slot_bytes(&m, &bytes, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
            assert_int_equal(bytes, 12345);
        }
    }
    TS_EXPECT(rssm_model_validate(NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_int_equal(rssm_model_validate(NULL, NULL), RSSM_ERR_INVALID_ARGUMENT);
}

static void test_validate_accepts_edges(void **state)
{
    (void)state;
    rssm_error err;
    rssm_model m = ts_small_model(RSSM_GATE_KDA, 1, 1);
    TS_OK(rssm_model_validate(&m, &err), &err);
    m.ring_len = RSSM_MAX_RING_LEN;
    TS_OK(rssm_model_validate(&m, &err), &err);
    /* ring_len is ignored without replay. */
    m.replay = 0;
    m.ring_len = 0;
    TS_OK(rssm_model_validate(&m, &err), &err);
    m.ring_len = 1000;
    TS_OK(rssm_model_validate(&m, &err), &err);

    m = ts_small_model(RSSM_GATE_GDN, 3, 16);
    m.head_k = 4;
    m.head_v = 256;
    m.num_qk_heads = 3;
    m.num_v_heads = 6;
    m.state_dtype = RSSM_DTYPE_BF16;
    m.ring_dtype = RSSM_DTYPE_BF16;
    m.io_dtype = RSSM_DTYPE_BF16;
    m.qk_l2norm = 0;
    m.q_scale = 0.25f;
    m.gate_mode = RSSM_GATE_RAW_SAFE;
    m.gate_lower_bound = -5.0f;
    TS_OK(rssm_model_validate(&m, &err), &err);
    m.gate_mode = RSSM_GATE_RAW;
    TS_OK(rssm_model_validate(&m, &err), &err);
    m.ring_dtype = RSSM_DTYPE_F16;
    TS_OK(rssm_model_validate(&m, &err), &err);
    /* fp16 activations, as vLLM's GDN tests pass them */
    m.io_dtype = RSSM_DTYPE_F16;
    TS_OK(rssm_model_validate(&m, &err), &err);
    /* err may be NULL on success too. */
    assert_int_equal(rssm_model_validate(&m, NULL), RSSM_OK);
}

static size_t align256(size_t x) { return (x + RSSM_ARRAY_ALIGN - 1) / RSSM_ARRAY_ALIGN * RSSM_ARRAY_ALIGN; }

/* The slot size from the layout the header documents: per layer the
 * checkpoint, then ring_d, ring_k and ring_g of L-1 entries each, every
 * array starting at a multiple of RSSM_ARRAY_ALIGN. */
static size_t expected_slot_bytes(const rssm_model *m)
{
    const size_t H = m->num_qk_heads, HV = m->num_v_heads, K = m->head_k, V = m->head_v;
    const size_t cap = m->replay ? m->ring_len - 1 : 0;
    const size_t s = m->state_dtype == RSSM_DTYPE_F32 ? 4 : 2;
    const size_t r = m->ring_dtype == RSSM_DTYPE_F32 ? 4 : 2;
    const size_t gw = m->gate_kind == RSSM_GATE_KDA ? K : 1;
    size_t layer = align256(HV * V * K * s) + align256(HV * cap * V * r) + align256(H * cap * K * r) +
                   align256(HV * cap * gw * 4);
    return layer * m->layers;
}

static void test_slot_bytes(void **state)
{
    (void)state;
    rssm_error err;
    size_t bytes;

    /* Preset by hand: Qwen3.5, fp32 C 32*128*128*4 = 2 MiB; fp16 ring of 15:
     * d 32*15*128*2, k 16*15*128*2, g 32*15*4 (1920 -> 2048). */
    rssm_model m;
    TS_OK(rssm_model_preset(&m, "qwen3.5-gdn", &err), &err);
    TS_OK(rssm_model_slot_bytes(&m, &bytes, &err), &err);
    assert_int_equal(bytes, 36u * (2097152u + 122880u + 61440u + 2048u));
    /* Kimi: KDA g is [HV][15][K] fp32. */
    TS_OK(rssm_model_preset(&m, "kimi-linear-kda", &err), &err);
    TS_OK(rssm_model_slot_bytes(&m, &bytes, &err), &err);
    assert_int_equal(bytes, 20u * (2097152u + 122880u + 122880u + 245760u));

    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    const rssm_dtype rings[] = { RSSM_DTYPE_F32, RSSM_DTYPE_F16, RSSM_DTYPE_BF16 };
    const uint32_t Ls[] = { 1, 2, 7, 16, 64 };
    for (size_t g = 0; g < 2; g++)
        for (size_t d = 0; d < 3; d++)
            for (size_t l = 0; l < sizeof Ls / sizeof Ls[0]; l++)
                for (int replay = 0; replay <= 1; replay++)
                    for (int st = 0; st < 2; st++) {
                        /* Odd-sized arrays so the alignment shows. */
                        rssm_model t = ts_small_model(kinds[g], 3, Ls[l]);
                        t.num_qk_heads = 1;
                        t.num_v_heads = 3;
                        t.head_k = 12;
                        t.head_v = 20;
                        t.replay = replay;
                        t.ring_dtype = rings[d];
                        t.state_dtype = st ? RSSM_DTYPE_BF16 : RSSM_DTYPE_F32;
                        bytes = 0;
                        TS_OK(rssm_model_slot_bytes(&t, &bytes, &err), &err);
                        if (bytes != expected_slot_bytes(&t))
                            fail_msg("%s L=%u replay=%d ring %s: slot_bytes %zu, expected %zu",
                                     rssm_gate_kind_name(t.gate_kind), t.ring_len, replay,
                                     rssm_dtype_name(t.ring_dtype), bytes, expected_slot_bytes(&t));
                        /* No ring at all with replay off or L = 1. */
                        if (!replay || Ls[l] == 1)
                            assert_int_equal(bytes, 3u * align256(3u * 20 * 12 * (st ? 2 : 4)));
                        else
                            assert_true(bytes > 3u * align256(3u * 20 * 12 * (st ? 2 : 4)));
                    }

    /* KDA's per-channel gates make its ring larger than GDN's. */
    rssm_model gdn = ts_small_model(RSSM_GATE_GDN, 1, 16), kda = ts_small_model(RSSM_GATE_KDA, 1, 16);
    size_t bg, bk;
    TS_OK(rssm_model_slot_bytes(&gdn, &bg, &err), &err);
    TS_OK(rssm_model_slot_bytes(&kda, &bk, &err), &err);
    assert_true(bk > bg);

    TS_EXPECT(rssm_model_slot_bytes(&gdn, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_model_slot_bytes(NULL, &bytes, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
}

static void test_q_scale_and_names(void **state)
{
    (void)state;
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 1, 4);
    m.head_k = 64;
    m.q_scale = 0.0f;
    assert_float_equal(rssm_model_q_scale(&m), 0.125f, 1e-7f);
    m.q_scale = 0.3f;
    assert_true(rssm_model_q_scale(&m) == 0.3f);
    assert_true(rssm_model_q_scale(NULL) == 0.0f);

    assert_string_equal(rssm_dtype_name(RSSM_DTYPE_F32), "fp32");
    assert_string_equal(rssm_dtype_name(RSSM_DTYPE_F16), "fp16");
    assert_string_equal(rssm_dtype_name(RSSM_DTYPE_BF16), "bf16");
    assert_non_null(rssm_dtype_name((rssm_dtype)42));
    assert_string_equal(rssm_gate_kind_name(RSSM_GATE_GDN), "gdn");
    assert_string_equal(rssm_gate_kind_name(RSSM_GATE_KDA), "kda");
    assert_non_null(rssm_gate_kind_name((rssm_gate_kind)42));
    assert_non_null(rssm_gate_mode_name(RSSM_GATE_PRECOMPUTED));
    assert_non_null(rssm_gate_mode_name(RSSM_GATE_RAW));
    assert_non_null(rssm_gate_mode_name(RSSM_GATE_RAW_SAFE));
    assert_non_null(rssm_gate_mode_name((rssm_gate_mode)42));
    assert_string_not_equal(rssm_gate_mode_name(RSSM_GATE_RAW), rssm_gate_mode_name(RSSM_GATE_RAW_SAFE));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_validate_rejects_each_bad_field),
        cmocka_unit_test(test_validate_accepts_edges),
        cmocka_unit_test(test_slot_bytes),
        cmocka_unit_test(test_q_scale_and_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
