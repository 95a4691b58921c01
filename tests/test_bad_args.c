/* Every function of include/rssm.h against bad arguments, one table: each
 * case runs on a fresh fixture (the CPU backend, a pool of four slots with
 * three allocated and written, a batch with inputs uploaded and one step
 * run), and must return its documented status with that status and a
 * message in the error, leave the pool exactly as it was (every slot's
 * allocation, write position and true state), and leave the batch usable
 * (a valid step runs after it). Run under ASan + UBSan by tools/test, so a
 * case that reads or writes out of bounds fails there too. */
#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SLOTS = 4, USED = 3, ROWS = 3, L = 4 };

typedef struct fx {
    rssm_model m;
    ts_env e;
    ts_inputs in;
    uint64_t seq[ROWS];
    float *state, *out;
    unsigned char *blob;
    size_t blob_size;
} fx;

static const uint32_t kSlots[ROWS] = {0, 1, 2};

static void fx_open(fx *f)
{
    memset(f, 0, sizeof *f);
    f->m = ts_small_model(RSSM_GATE_GDN, 2, L);
    ts_env_open(&f->e, "cpu", &f->m, SLOTS, RSSM_FLUSH_ALIGNED, ROWS);
    rh_rng r;
    rh_rng_seed(&r, 0xbad, 0);
    ts_env_alloc_random(&f->e, USED, &r);
    ts_inputs_alloc(&f->in, &f->m, ROWS);
    ts_inputs_random(&f->in, &r);
    f->state = ts_random_state(&f->m, &r);
    f->out = malloc(ts_out_elems(&f->m, ROWS) * sizeof(float));
    f->blob_size = rssm_pool_export_size(f->e.pool);
    f->blob = malloc(f->blob_size);
    assert_non_null(f->out);
    assert_non_null(f->blob);
    rssm_error err;
    for (int i = 0; i < ROWS; i++)
        f->seq[i] = 10 + (uint64_t)i;
    ts_step(&f->e, ROWS, kSlots, f->seq, 0, &f->in, f->out);
    TS_OK(rssm_pool_export(f->e.pool, 0, f->blob, f->blob_size, &err), &err);
    for (int i = 0; i < ROWS; i++)
        f->seq[i]++;
}

static void fx_close(fx *f)
{
    free(f->state);
    free(f->out);
    free(f->blob);
    ts_inputs_free(&f->in);
    ts_env_close(&f->e);
}

/* The plan rssm_batch_run would make for the next step. */
static void fx_plan(fx *f, rssm_row_plan *plan)
{
    rssm_error err;
    TS_OK(rssm_pool_plan(f->e.pool, ROWS, kSlots, f->seq, 0, plan, &err), &err);
}

typedef struct bad_case {
    const char *name;
    rssm_status want;
    rssm_status (*call)(fx *f, rssm_error *err);
} bad_case;

#define CASE(id, ...)                                                                              \
    static rssm_status id(fx *f, rssm_error *err)                                                  \
    {                                                                                              \
        (void)f;                                                                                   \
        __VA_ARGS__                                                                                \
    }
#define MODEL_CASE(id, ...)                                                                        \
    CASE(id, {                                                                                     \
        rssm_model m = f->m;                                                                       \
        __VA_ARGS__;                                                                               \
        return rssm_model_validate(&m, err);                                                       \
    })

/* ---- model */
CASE(preset_null_model, { return rssm_model_preset(NULL, "qwen3.5-gdn", err); })
CASE(preset_null_name, { rssm_model m; return rssm_model_preset(&m, NULL, err); })
CASE(preset_unknown, { rssm_model m; return rssm_model_preset(&m, "no-such-preset", err); })
CASE(validate_null, { return rssm_model_validate(NULL, err); })
MODEL_CASE(model_layers_0, m.layers = 0)
MODEL_CASE(model_layers_big, m.layers = 4097)
MODEL_CASE(model_h_0, m.num_qk_heads = 0)
MODEL_CASE(model_hv_0, m.num_v_heads = 0)
MODEL_CASE(model_hv_not_multiple, m.num_v_heads = 3)
MODEL_CASE(model_hv_big, (m.num_v_heads = 2048, m.num_qk_heads = 2048))
MODEL_CASE(model_k_0, m.head_k = 0)
MODEL_CASE(model_k_odd, m.head_k = 18)
MODEL_CASE(model_k_big, m.head_k = 260)
MODEL_CASE(model_v_0, m.head_v = 0)
MODEL_CASE(model_v_odd, m.head_v = 6)
MODEL_CASE(model_gate_kind, m.gate_kind = (rssm_gate_kind)7)
MODEL_CASE(model_gate_mode, m.gate_mode = (rssm_gate_mode)9)
MODEL_CASE(model_safe_bound_nan, (m.gate_mode = RSSM_GATE_RAW_SAFE, m.gate_lower_bound = NAN))
MODEL_CASE(model_safe_bound_pos, (m.gate_mode = RSSM_GATE_RAW_SAFE, m.gate_lower_bound = 1.0f))
MODEL_CASE(model_replay_2, m.replay = 2)
MODEL_CASE(model_ring_0, m.ring_len = 0)
MODEL_CASE(model_ring_big, m.ring_len = RSSM_MAX_RING_LEN + 1)
MODEL_CASE(model_state_f16, m.state_dtype = RSSM_DTYPE_F16)
MODEL_CASE(model_state_bad, m.state_dtype = (rssm_dtype)11)
MODEL_CASE(model_ring_bad, m.ring_dtype = (rssm_dtype)11)
MODEL_CASE(model_io_past_bf16, m.io_dtype = (rssm_dtype)(RSSM_DTYPE_BF16 + 1))
MODEL_CASE(model_io_bad, m.io_dtype = (rssm_dtype)11)
MODEL_CASE(model_l2norm_2, m.qk_l2norm = 2)
MODEL_CASE(model_q_scale_neg, m.q_scale = -1.0f)
MODEL_CASE(model_q_scale_nan, m.q_scale = NAN)
MODEL_CASE(model_q_scale_inf, m.q_scale = INFINITY)
MODEL_CASE(model_too_big, (m.layers = 4096, m.num_qk_heads = 1024, m.num_v_heads = 1024, m.head_k = 256,
                           m.head_v = 256))
CASE(slot_bytes_null_model, { size_t b; return rssm_model_slot_bytes(NULL, &b, err); })
CASE(slot_bytes_null_out, { return rssm_model_slot_bytes(&f->m, NULL, err); })
CASE(slot_bytes_bad_model, {
    rssm_model m = f->m;
    m.layers = 0;
    size_t b;
    return rssm_model_slot_bytes(&m, &b, err);
})

/* ---- backend */
CASE(backend_null_name, { rssm_backend *b; return rssm_backend_create(NULL, &b, err); })
CASE(backend_null_out, { return rssm_backend_create("cpu", NULL, err); })
CASE(backend_unknown, { rssm_backend *b; return rssm_backend_create("nosuch", &b, err); })
CASE(backend_unknown_variant, { rssm_backend *b; return rssm_backend_create("cpu:nosuch", &b, err); })
CASE(describe_null_backend, { char buf[64]; return rssm_backend_describe(NULL, buf, sizeof buf, err); })
CASE(describe_null_buf, { return rssm_backend_describe(f->e.backend, NULL, 64, err); })
CASE(describe_size_0, { char buf[4]; return rssm_backend_describe(f->e.backend, buf, 0, err); })
CASE(supports_null_backend, { return rssm_backend_supports(NULL, &f->m, err); })
CASE(supports_null_model, { return rssm_backend_supports(f->e.backend, NULL, err); })
CASE(supports_bad_model, {
    rssm_model m = f->m;
    m.head_k = 3;
    return rssm_backend_supports(f->e.backend, &m, err);
})
CASE(copy_bw_null_backend, { double x; return rssm_backend_copy_bandwidth(NULL, 4096, &x, err); })
CASE(copy_bw_null_out, { return rssm_backend_copy_bandwidth(f->e.backend, 4096, NULL, err); })
CASE(copy_bw_zero, { double x; return rssm_backend_copy_bandwidth(f->e.backend, 0, &x, err); })
CASE(matrix_null_backend, { rssm_dtype d; return rssm_backend_matrix_dtype(NULL, &f->m, &d, err); })
CASE(matrix_null_model, { rssm_dtype d; return rssm_backend_matrix_dtype(f->e.backend, NULL, &d, err); })
CASE(matrix_null_out, { return rssm_backend_matrix_dtype(f->e.backend, &f->m, NULL, err); })

/* ---- pool */
CASE(pool_null_backend, { rssm_pool *p; return rssm_pool_create(NULL, &f->m, 2, RSSM_FLUSH_ALIGNED, &p, err); })
CASE(pool_null_model, { rssm_pool *p; return rssm_pool_create(f->e.backend, NULL, 2, RSSM_FLUSH_ALIGNED, &p, err); })
CASE(pool_null_out, { return rssm_pool_create(f->e.backend, &f->m, 2, RSSM_FLUSH_ALIGNED, NULL, err); })
CASE(pool_zero_slots, { rssm_pool *p; return rssm_pool_create(f->e.backend, &f->m, 0, RSSM_FLUSH_ALIGNED, &p, err); })
CASE(pool_bad_policy, { rssm_pool *p; return rssm_pool_create(f->e.backend, &f->m, 2, (rssm_flush_policy)5, &p, err); })
CASE(pool_bad_model, {
    rssm_model m = f->m;
    m.ring_len = 0;
    rssm_pool *p;
    return rssm_pool_create(f->e.backend, &m, 2, RSSM_FLUSH_ALIGNED, &p, err);
})
CASE(alloc_null_pool, { uint32_t s; return rssm_pool_alloc(NULL, &s, err); })
CASE(alloc_null_out, { return rssm_pool_alloc(f->e.pool, NULL, err); })
CASE(free_null_pool, { return rssm_pool_free(NULL, 0, err); })
CASE(free_out_of_range, { return rssm_pool_free(f->e.pool, SLOTS, err); })
CASE(free_free_slot, { return rssm_pool_free(f->e.pool, USED, err); })
CASE(free_huge, { return rssm_pool_free(f->e.pool, UINT32_MAX, err); })
CASE(copy_null_pool, { return rssm_pool_copy(NULL, 0, 1, err); })
CASE(copy_src_range, { return rssm_pool_copy(f->e.pool, SLOTS, 1, err); })
CASE(copy_dst_range, { return rssm_pool_copy(f->e.pool, 0, SLOTS + 7, err); })
CASE(copy_src_free, { return rssm_pool_copy(f->e.pool, USED, 1, err); })
CASE(copy_dst_free, { return rssm_pool_copy(f->e.pool, 0, USED, err); })
CASE(copy_same, { return rssm_pool_copy(f->e.pool, 1, 1, err); })
CASE(materialise_null, { return rssm_pool_materialise(NULL, 0, err); })
CASE(materialise_range, { return rssm_pool_materialise(f->e.pool, SLOTS, err); })
CASE(materialise_free, { return rssm_pool_materialise(f->e.pool, USED, err); })
CASE(write_pos_null_pool, { uint32_t w; return rssm_pool_write_pos(NULL, 0, &w, err); })
CASE(write_pos_null_out, { return rssm_pool_write_pos(f->e.pool, 0, NULL, err); })
CASE(write_pos_range, { uint32_t w; return rssm_pool_write_pos(f->e.pool, SLOTS, &w, err); })
CASE(write_pos_free, { uint32_t w; return rssm_pool_write_pos(f->e.pool, USED, &w, err); })
CASE(read_state_null_pool, { return rssm_pool_read_state(NULL, 0, f->state, err); })
CASE(read_state_null_out, { return rssm_pool_read_state(f->e.pool, 0, NULL, err); })
CASE(read_state_range, { return rssm_pool_read_state(f->e.pool, SLOTS, f->state, err); })
CASE(read_state_free, { return rssm_pool_read_state(f->e.pool, USED, f->state, err); })
CASE(write_state_null_pool, { return rssm_pool_write_state(NULL, 0, f->state, err); })
CASE(write_state_null_state, { return rssm_pool_write_state(f->e.pool, 0, NULL, err); })
CASE(write_state_range, { return rssm_pool_write_state(f->e.pool, SLOTS, f->state, err); })
CASE(write_state_free, { return rssm_pool_write_state(f->e.pool, USED, f->state, err); })
CASE(write_state_nan, {
    f->state[5] = NAN;
    return rssm_pool_write_state(f->e.pool, 0, f->state, err);
})
CASE(write_state_inf, {
    f->state[0] = -INFINITY;
    return rssm_pool_write_state(f->e.pool, 1, f->state, err);
})
CASE(export_null_pool, { return rssm_pool_export(NULL, 0, f->blob, f->blob_size, err); })
CASE(export_null_bytes, { return rssm_pool_export(f->e.pool, 0, NULL, f->blob_size, err); })
CASE(export_short, { return rssm_pool_export(f->e.pool, 0, f->blob, f->blob_size - 1, err); })
CASE(export_range, { return rssm_pool_export(f->e.pool, SLOTS, f->blob, f->blob_size, err); })
CASE(export_free, { return rssm_pool_export(f->e.pool, USED, f->blob, f->blob_size, err); })
CASE(import_null_pool, { return rssm_pool_import(NULL, 1, f->blob, f->blob_size, err); })
CASE(import_null_bytes, { return rssm_pool_import(f->e.pool, 1, NULL, f->blob_size, err); })
CASE(import_empty, { return rssm_pool_import(f->e.pool, 1, f->blob, 0, err); })
CASE(import_truncated, { return rssm_pool_import(f->e.pool, 1, f->blob, f->blob_size - 1, err); })
CASE(import_too_long, {
    unsigned char *b = calloc(1, f->blob_size + 8);
    memcpy(b, f->blob, f->blob_size);
    rssm_status st = rssm_pool_import(f->e.pool, 1, b, f->blob_size + 8, err);
    free(b);
    return st;
})
CASE(import_flipped_byte, {
    f->blob[f->blob_size / 2] ^= 0x40;
    return rssm_pool_import(f->e.pool, 1, f->blob, f->blob_size, err);
})
CASE(import_flipped_header, {
    f->blob[3] ^= 0x01;
    return rssm_pool_import(f->e.pool, 1, f->blob, f->blob_size, err);
})
CASE(import_range, { return rssm_pool_import(f->e.pool, SLOTS, f->blob, f->blob_size, err); })
CASE(import_free, { return rssm_pool_import(f->e.pool, USED, f->blob, f->blob_size, err); })
CASE(import_other_model, {
    /* a blob of a KDA pool of the same sizes */
    rssm_model k = ts_small_model(RSSM_GATE_KDA, 2, L);
    ts_env e2;
    ts_env_open(&e2, "cpu", &k, 1, RSSM_FLUSH_ALIGNED, 0);
    rh_rng r;
    rh_rng_seed(&r, 3, 0);
    ts_env_alloc_random(&e2, 1, &r);
    size_t n = rssm_pool_export_size(e2.pool);
    unsigned char *b = malloc(n);
    rssm_error e;
    TS_OK(rssm_pool_export(e2.pool, 0, b, n, &e), &e);
    ts_env_close(&e2);
    rssm_status st = rssm_pool_import(f->e.pool, 1, b, n, err);
    free(b);
    return st;
})

/* ---- schedule */
CASE(plan_null_pool, { rssm_row_plan p[ROWS]; return rssm_pool_plan(NULL, ROWS, kSlots, f->seq, 0, p, err); })
CASE(plan_rows_0, { rssm_row_plan p[ROWS]; return rssm_pool_plan(f->e.pool, 0, kSlots, f->seq, 0, p, err); })
CASE(plan_null_slots, { rssm_row_plan p[ROWS]; return rssm_pool_plan(f->e.pool, ROWS, NULL, f->seq, 0, p, err); })
CASE(plan_null_seq, { rssm_row_plan p[ROWS]; return rssm_pool_plan(f->e.pool, ROWS, kSlots, NULL, 0, p, err); })
CASE(plan_null_out, { return rssm_pool_plan(f->e.pool, ROWS, kSlots, f->seq, 0, NULL, err); })
CASE(plan_slot_range, {
    const uint32_t s[ROWS] = {0, SLOTS, 2};
    rssm_row_plan p[ROWS];
    return rssm_pool_plan(f->e.pool, ROWS, s, f->seq, 0, p, err);
})
CASE(plan_slot_free, {
    const uint32_t s[ROWS] = {0, 1, USED};
    rssm_row_plan p[ROWS];
    return rssm_pool_plan(f->e.pool, ROWS, s, f->seq, 0, p, err);
})
CASE(plan_slot_repeat, {
    const uint32_t s[ROWS] = {0, 1, 0};
    rssm_row_plan p[ROWS];
    return rssm_pool_plan(f->e.pool, ROWS, s, f->seq, 0, p, err);
})
CASE(plan_seq_0, {
    f->seq[1] = 0;
    rssm_row_plan p[ROWS];
    return rssm_pool_plan(f->e.pool, ROWS, kSlots, f->seq, 0, p, err);
})
CASE(commit_null_pool, { rssm_row_plan p[ROWS]; fx_plan(f, p); return rssm_pool_commit(NULL, ROWS, p, err); })
CASE(commit_null_plan, { return rssm_pool_commit(f->e.pool, ROWS, NULL, err); })
CASE(commit_rows_0, { rssm_row_plan p[ROWS]; fx_plan(f, p); return rssm_pool_commit(f->e.pool, 0, p, err); })
CASE(commit_stale, {
    rssm_row_plan p[ROWS];
    fx_plan(f, p);
    p[2].write_pos++;
    return rssm_pool_commit(f->e.pool, ROWS, p, err);
})
CASE(commit_bad_flush, {
    rssm_row_plan p[ROWS];
    fx_plan(f, p);
    p[1].is_flush ^= 1u;
    return rssm_pool_commit(f->e.pool, ROWS, p, err);
})
CASE(commit_repeat, {
    rssm_row_plan p[ROWS];
    fx_plan(f, p);
    p[2] = p[0];
    return rssm_pool_commit(f->e.pool, ROWS, p, err);
})
CASE(commit_slot_range, {
    rssm_row_plan p[ROWS];
    fx_plan(f, p);
    p[0].slot = SLOTS;
    return rssm_pool_commit(f->e.pool, ROWS, p, err);
})
CASE(commit_slot_free, {
    rssm_row_plan p[ROWS];
    fx_plan(f, p);
    p[0].slot = USED;
    p[0].write_pos = 0;
    return rssm_pool_commit(f->e.pool, ROWS, p, err);
})

/* ---- rssm_layer_record_verify: its own checks come after the backend's
 * (tests/test_layer.c runs those on vulkan); here the cpu backend's refusal */
CASE(record_verify_null_layer, {
    rssm_layer_buffers t;
    memset(&t, 0, sizeof t);
    return rssm_layer_record_verify(NULL, 1, 1, (rssm_buffer){1, 0}, &t, (void *)(uintptr_t)1, err);
})
CASE(record_verify_pointers, {
    rssm_layer_desc d;
    memset(&d, 0, sizeof d);
    d.model = f->m;
    d.max_rows = 2;
    d.slots = 2;
    rssm_layer *l = NULL;
    rssm_status st = rssm_layer_create(f->e.backend, &d, &l, err);
    if (st != RSSM_OK)
        return st;
    rssm_layer_buffers t;
    memset(&t, 0, sizeof t);
    st = rssm_layer_record_verify(l, 1, 1, (rssm_buffer){1, 0}, &t, (void *)(uintptr_t)1, err);
    if (!strstr(err->message, "rssm_layer_verify"))
        st = RSSM_OK; /* the message must name the entry this backend takes */
    rssm_layer_destroy(&l);
    return st;
})

/* ---- batch */
CASE(batch_null_pool, { rssm_batch *b; return rssm_batch_create(NULL, 2, &b, err); })
CASE(batch_null_out, { return rssm_batch_create(f->e.pool, 2, NULL, err); })
CASE(batch_rows_0, { rssm_batch *b; return rssm_batch_create(f->e.pool, 0, &b, err); })
CASE(batch_rows_big, { rssm_batch *b; return rssm_batch_create(f->e.pool, 65537, &b, err); })
CASE(gate_params_null_batch, {
    const float a[4] = {0}, d[4] = {0};
    return rssm_batch_set_gate_params(NULL, 0, a, d, err);
})
CASE(gate_params_null_a, { const float d[4] = {0}; return rssm_batch_set_gate_params(f->e.batch, 0, NULL, d, err); })
CASE(gate_params_null_dt, { const float a[4] = {0}; return rssm_batch_set_gate_params(f->e.batch, 0, a, NULL, err); })
CASE(gate_params_layer, {
    const float a[4] = {0}, d[4] = {0};
    return rssm_batch_set_gate_params(f->e.batch, 2, a, d, err);
})
CASE(upload_null_batch, { return rssm_batch_upload(NULL, ROWS, &f->in.in, err); })
CASE(upload_null_in, { return rssm_batch_upload(f->e.batch, ROWS, NULL, err); })
CASE(upload_rows_0, { return rssm_batch_upload(f->e.batch, 0, &f->in.in, err); })
CASE(upload_rows_big, { return rssm_batch_upload(f->e.batch, ROWS + 1, &f->in.in, err); })
#define UPLOAD_NULL_FIELD(id, field)                                                               \
    CASE(id, {                                                                                     \
        rssm_step_inputs in = f->in.in;                                                            \
        in.field = NULL;                                                                           \
        return rssm_batch_upload(f->e.batch, ROWS, &in, err);                                      \
    })
UPLOAD_NULL_FIELD(upload_null_q, q)
UPLOAD_NULL_FIELD(upload_null_k, k)
UPLOAD_NULL_FIELD(upload_null_v, v)
UPLOAD_NULL_FIELD(upload_null_gate, gate)
UPLOAD_NULL_FIELD(upload_null_beta, beta)
CASE(run_null_batch, { return rssm_batch_run(NULL, ROWS, kSlots, f->seq, 0, err); })
CASE(run_rows_0, { return rssm_batch_run(f->e.batch, 0, kSlots, f->seq, 0, err); })
CASE(run_rows_big, { return rssm_batch_run(f->e.batch, ROWS + 1, kSlots, f->seq, 0, err); })
CASE(run_rows_not_uploaded, { return rssm_batch_run(f->e.batch, ROWS - 1, kSlots, f->seq, 0, err); })
CASE(run_null_slots, { return rssm_batch_run(f->e.batch, ROWS, NULL, f->seq, 0, err); })
CASE(run_null_seq, { return rssm_batch_run(f->e.batch, ROWS, kSlots, NULL, 0, err); })
CASE(run_slot_range, {
    const uint32_t s[ROWS] = {0, 1, SLOTS};
    return rssm_batch_run(f->e.batch, ROWS, s, f->seq, 0, err);
})
CASE(run_slot_free, {
    const uint32_t s[ROWS] = {USED, 1, 2};
    return rssm_batch_run(f->e.batch, ROWS, s, f->seq, 0, err);
})
CASE(run_slot_repeat, {
    const uint32_t s[ROWS] = {2, 1, 2};
    return rssm_batch_run(f->e.batch, ROWS, s, f->seq, 0, err);
})
CASE(run_seq_0, {
    f->seq[0] = 0;
    return rssm_batch_run(f->e.batch, ROWS, kSlots, f->seq, 0, err);
})
CASE(step_null_out, { return rssm_batch_step(f->e.batch, ROWS, kSlots, f->seq, 0, &f->in.in, NULL, err); })
CASE(step_null_in, { return rssm_batch_step(f->e.batch, ROWS, kSlots, f->seq, 0, NULL, f->out, err); })
CASE(step_null_batch, { return rssm_batch_step(NULL, ROWS, kSlots, f->seq, 0, &f->in.in, f->out, err); })
CASE(download_null_batch, { return rssm_batch_download(NULL, ROWS, f->out, err); })
CASE(download_null_out, { return rssm_batch_download(f->e.batch, ROWS, NULL, err); })
CASE(download_rows_0, { return rssm_batch_download(f->e.batch, 0, f->out, err); })
CASE(download_rows_big, { return rssm_batch_download(f->e.batch, ROWS + 1, f->out, err); })
CASE(download_before_run, {
    rssm_batch *b = NULL;
    rssm_error e;
    TS_OK(rssm_batch_create(f->e.pool, 2, &b, &e), &e);
    rssm_status st = rssm_batch_download(b, 1, f->out, err);
    rssm_batch_destroy(&b);
    return st;
})
CASE(seconds_null_batch, { double s; return rssm_batch_last_run_seconds(NULL, &s, err); })
CASE(seconds_null_out, { return rssm_batch_last_run_seconds(f->e.batch, NULL, err); })
CASE(time_null_plans, { rssm_timing s; return rssm_batch_time_steps(f->e.batch, ROWS, 1, NULL, 1, &s, err); })
CASE(time_null_out, {
    rssm_row_plan p[ROWS];
    fx_plan(f, p);
    return rssm_batch_time_steps(f->e.batch, ROWS, 1, p, 1, NULL, err);
})
CASE(time_steps_big, {
    rssm_row_plan p[ROWS];
    fx_plan(f, p);
    rssm_timing s;
    return rssm_batch_time_steps(f->e.batch, ROWS, 4097, p, 1, &s, err);
})
CASE(inplace_null_pool, { double s; return rssm_pool_inplace_seconds(NULL, 1, &s, err); })
CASE(inplace_null_out, { return rssm_pool_inplace_seconds(f->e.pool, 1, NULL, err); })
CASE(inplace_reps_big, { double s; return rssm_pool_inplace_seconds(f->e.pool, 1001, &s, err); })

#define E(id, want) {#id, want, id}
static const bad_case kCases[] = {
    E(preset_null_model, RSSM_ERR_INVALID_ARGUMENT), E(preset_null_name, RSSM_ERR_INVALID_ARGUMENT),
    E(preset_unknown, RSSM_ERR_INVALID_ARGUMENT), E(validate_null, RSSM_ERR_INVALID_ARGUMENT),
    E(model_layers_0, RSSM_ERR_INVALID_ARGUMENT), E(model_layers_big, RSSM_ERR_INVALID_ARGUMENT),
    E(model_h_0, RSSM_ERR_INVALID_ARGUMENT), E(model_hv_0, RSSM_ERR_INVALID_ARGUMENT),
    E(model_hv_not_multiple, RSSM_ERR_INVALID_ARGUMENT), E(model_hv_big, RSSM_ERR_INVALID_ARGUMENT),
    E(model_k_0, RSSM_ERR_INVALID_ARGUMENT), E(model_k_odd, RSSM_ERR_INVALID_ARGUMENT),
    E(model_k_big, RSSM_ERR_INVALID_ARGUMENT), E(model_v_0, RSSM_ERR_INVALID_ARGUMENT),
    E(model_v_odd, RSSM_ERR_INVALID_ARGUMENT), E(model_gate_kind, RSSM_ERR_INVALID_ARGUMENT),
    E(model_gate_mode, RSSM_ERR_INVALID_ARGUMENT), E(model_safe_bound_nan, RSSM_ERR_INVALID_ARGUMENT),
    E(model_safe_bound_pos, RSSM_ERR_INVALID_ARGUMENT), E(model_replay_2, RSSM_ERR_INVALID_ARGUMENT),
    E(model_ring_0, RSSM_ERR_INVALID_ARGUMENT), E(model_ring_big, RSSM_ERR_INVALID_ARGUMENT),
    E(model_state_f16, RSSM_ERR_INVALID_ARGUMENT), E(model_state_bad, RSSM_ERR_INVALID_ARGUMENT),
    E(model_ring_bad, RSSM_ERR_INVALID_ARGUMENT), E(model_io_past_bf16, RSSM_ERR_INVALID_ARGUMENT),
    E(model_io_bad, RSSM_ERR_INVALID_ARGUMENT), E(model_l2norm_2, RSSM_ERR_INVALID_ARGUMENT),
    E(model_q_scale_neg, RSSM_ERR_INVALID_ARGUMENT), E(model_q_scale_nan, RSSM_ERR_INVALID_ARGUMENT),
    E(model_q_scale_inf, RSSM_ERR_INVALID_ARGUMENT), E(model_too_big, RSSM_ERR_INVALID_ARGUMENT),
    E(slot_bytes_null_model, RSSM_ERR_INVALID_ARGUMENT), E(slot_bytes_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(slot_bytes_bad_model, RSSM_ERR_INVALID_ARGUMENT),
    E(backend_null_name, RSSM_ERR_INVALID_ARGUMENT), E(backend_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(backend_unknown, RSSM_ERR_INVALID_ARGUMENT), E(backend_unknown_variant, RSSM_ERR_INVALID_ARGUMENT),
    E(describe_null_backend, RSSM_ERR_INVALID_ARGUMENT), E(describe_null_buf, RSSM_ERR_INVALID_ARGUMENT),
    E(describe_size_0, RSSM_ERR_INVALID_ARGUMENT), E(supports_null_backend, RSSM_ERR_INVALID_ARGUMENT),
    E(supports_null_model, RSSM_ERR_INVALID_ARGUMENT), E(supports_bad_model, RSSM_ERR_INVALID_ARGUMENT),
    E(copy_bw_null_backend, RSSM_ERR_INVALID_ARGUMENT), E(copy_bw_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(copy_bw_zero, RSSM_ERR_INVALID_ARGUMENT), E(matrix_null_backend, RSSM_ERR_INVALID_ARGUMENT),
    E(matrix_null_model, RSSM_ERR_INVALID_ARGUMENT), E(matrix_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(pool_null_backend, RSSM_ERR_INVALID_ARGUMENT), E(pool_null_model, RSSM_ERR_INVALID_ARGUMENT),
    E(pool_null_out, RSSM_ERR_INVALID_ARGUMENT), E(pool_zero_slots, RSSM_ERR_INVALID_ARGUMENT),
    E(pool_bad_policy, RSSM_ERR_INVALID_ARGUMENT), E(pool_bad_model, RSSM_ERR_INVALID_ARGUMENT),
    E(alloc_null_pool, RSSM_ERR_INVALID_ARGUMENT), E(alloc_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(free_null_pool, RSSM_ERR_INVALID_ARGUMENT), E(free_out_of_range, RSSM_ERR_BAD_SLOT),
    E(free_free_slot, RSSM_ERR_BAD_SLOT), E(free_huge, RSSM_ERR_BAD_SLOT),
    E(copy_null_pool, RSSM_ERR_INVALID_ARGUMENT), E(copy_src_range, RSSM_ERR_BAD_SLOT),
    E(copy_dst_range, RSSM_ERR_BAD_SLOT), E(copy_src_free, RSSM_ERR_BAD_SLOT), E(copy_dst_free, RSSM_ERR_BAD_SLOT),
    E(copy_same, RSSM_ERR_INVALID_ARGUMENT), E(materialise_null, RSSM_ERR_INVALID_ARGUMENT),
    E(materialise_range, RSSM_ERR_BAD_SLOT), E(materialise_free, RSSM_ERR_BAD_SLOT),
    E(write_pos_null_pool, RSSM_ERR_INVALID_ARGUMENT), E(write_pos_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(write_pos_range, RSSM_ERR_BAD_SLOT), E(write_pos_free, RSSM_ERR_BAD_SLOT),
    E(read_state_null_pool, RSSM_ERR_INVALID_ARGUMENT), E(read_state_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(read_state_range, RSSM_ERR_BAD_SLOT), E(read_state_free, RSSM_ERR_BAD_SLOT),
    E(write_state_null_pool, RSSM_ERR_INVALID_ARGUMENT), E(write_state_null_state, RSSM_ERR_INVALID_ARGUMENT),
    E(write_state_range, RSSM_ERR_BAD_SLOT), E(write_state_free, RSSM_ERR_BAD_SLOT),
    E(write_state_nan, RSSM_ERR_INVALID_ARGUMENT), E(write_state_inf, RSSM_ERR_INVALID_ARGUMENT),
    E(export_null_pool, RSSM_ERR_INVALID_ARGUMENT), E(export_null_bytes, RSSM_ERR_INVALID_ARGUMENT),
    E(export_short, RSSM_ERR_INVALID_ARGUMENT), E(export_range, RSSM_ERR_BAD_SLOT),
    E(export_free, RSSM_ERR_BAD_SLOT), E(import_null_pool, RSSM_ERR_INVALID_ARGUMENT),
    E(import_null_bytes, RSSM_ERR_INVALID_ARGUMENT), E(import_empty, RSSM_ERR_FORMAT),
    E(import_truncated, RSSM_ERR_FORMAT), E(import_too_long, RSSM_ERR_FORMAT),
    E(import_flipped_byte, RSSM_ERR_FORMAT), E(import_flipped_header, RSSM_ERR_FORMAT),
    E(import_range, RSSM_ERR_BAD_SLOT), E(import_free, RSSM_ERR_BAD_SLOT), E(import_other_model, RSSM_ERR_FORMAT),
    E(plan_null_pool, RSSM_ERR_INVALID_ARGUMENT), E(plan_rows_0, RSSM_ERR_INVALID_ARGUMENT),
    E(plan_null_slots, RSSM_ERR_INVALID_ARGUMENT), E(plan_null_seq, RSSM_ERR_INVALID_ARGUMENT),
    E(plan_null_out, RSSM_ERR_INVALID_ARGUMENT), E(plan_slot_range, RSSM_ERR_BAD_SLOT),
    E(plan_slot_free, RSSM_ERR_BAD_SLOT), E(plan_slot_repeat, RSSM_ERR_INVALID_ARGUMENT),
    E(plan_seq_0, RSSM_ERR_INVALID_ARGUMENT), E(commit_null_pool, RSSM_ERR_INVALID_ARGUMENT),
    E(commit_null_plan, RSSM_ERR_INVALID_ARGUMENT), E(commit_rows_0, RSSM_ERR_INVALID_ARGUMENT),
    E(commit_stale, RSSM_ERR_INVALID_ARGUMENT), E(commit_bad_flush, RSSM_ERR_INVALID_ARGUMENT),
    E(commit_repeat, RSSM_ERR_INVALID_ARGUMENT), E(commit_slot_range, RSSM_ERR_BAD_SLOT),
    E(commit_slot_free, RSSM_ERR_BAD_SLOT),
    E(record_verify_null_layer, RSSM_ERR_INVALID_ARGUMENT), E(record_verify_pointers, RSSM_ERR_UNSUPPORTED),
    E(batch_null_pool, RSSM_ERR_INVALID_ARGUMENT), E(batch_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(batch_rows_0, RSSM_ERR_INVALID_ARGUMENT), E(batch_rows_big, RSSM_ERR_INVALID_ARGUMENT),
    E(gate_params_null_batch, RSSM_ERR_INVALID_ARGUMENT), E(gate_params_null_a, RSSM_ERR_INVALID_ARGUMENT),
    E(gate_params_null_dt, RSSM_ERR_INVALID_ARGUMENT), E(gate_params_layer, RSSM_ERR_INVALID_ARGUMENT),
    E(upload_null_batch, RSSM_ERR_INVALID_ARGUMENT), E(upload_null_in, RSSM_ERR_INVALID_ARGUMENT),
    E(upload_rows_0, RSSM_ERR_INVALID_ARGUMENT), E(upload_rows_big, RSSM_ERR_INVALID_ARGUMENT),
    E(upload_null_q, RSSM_ERR_INVALID_ARGUMENT), E(upload_null_k, RSSM_ERR_INVALID_ARGUMENT),
    E(upload_null_v, RSSM_ERR_INVALID_ARGUMENT), E(upload_null_gate, RSSM_ERR_INVALID_ARGUMENT),
    E(upload_null_beta, RSSM_ERR_INVALID_ARGUMENT), E(run_null_batch, RSSM_ERR_INVALID_ARGUMENT),
    E(run_rows_0, RSSM_ERR_INVALID_ARGUMENT), E(run_rows_big, RSSM_ERR_INVALID_ARGUMENT),
    E(run_rows_not_uploaded, RSSM_ERR_INVALID_ARGUMENT), E(run_null_slots, RSSM_ERR_INVALID_ARGUMENT),
    E(run_null_seq, RSSM_ERR_INVALID_ARGUMENT), E(run_slot_range, RSSM_ERR_BAD_SLOT),
    E(run_slot_free, RSSM_ERR_BAD_SLOT), E(run_slot_repeat, RSSM_ERR_INVALID_ARGUMENT),
    E(run_seq_0, RSSM_ERR_INVALID_ARGUMENT), E(step_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(step_null_in, RSSM_ERR_INVALID_ARGUMENT), E(step_null_batch, RSSM_ERR_INVALID_ARGUMENT),
    E(download_null_batch, RSSM_ERR_INVALID_ARGUMENT), E(download_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(download_rows_0, RSSM_ERR_INVALID_ARGUMENT), E(download_rows_big, RSSM_ERR_INVALID_ARGUMENT),
    E(download_before_run, RSSM_ERR_INVALID_ARGUMENT), E(seconds_null_batch, RSSM_ERR_INVALID_ARGUMENT),
    E(seconds_null_out, RSSM_ERR_INVALID_ARGUMENT), E(time_null_plans, RSSM_ERR_INVALID_ARGUMENT),
    E(time_null_out, RSSM_ERR_INVALID_ARGUMENT), E(time_steps_big, RSSM_ERR_INVALID_ARGUMENT),
    E(inplace_null_pool, RSSM_ERR_INVALID_ARGUMENT), E(inplace_null_out, RSSM_ERR_INVALID_ARGUMENT),
    E(inplace_reps_big, RSSM_ERR_INVALID_ARGUMENT),
};
#undef E

static void test_table(void **state)
{
    (void)state;
    const size_t n = sizeof kCases / sizeof kCases[0];
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        const bad_case *c = &kCases[i];
        fx f;
        fx_open(&f);
        ts_pool_snapshot snap;
        ts_snapshot_take(&snap, f.e.pool);
        rssm_error err;
        memset(&err, 0, sizeof err);
        const rssm_status got = c->call(&f, &err);
        if (got != c->want || err.status != got || err.message[0] == '\0') {
            print_message("[  FAILED  ] %s: returned %s (error says %s: '%s'), want %s\n", c->name,
                          rssm_status_str(got), rssm_status_str(err.status), err.message,
                          rssm_status_str(c->want));
            failed++;
        }
        /* Nothing moved, and the batch still steps (on the step's own
         * lengths, which a case may have spoilt). */
        ts_snapshot_expect_equal(&snap, f.e.pool);
        ts_snapshot_free(&snap);
        for (int r = 0; r < ROWS; r++)
            f.seq[r] = 11 + (uint64_t)r;
        ts_step(&f.e, ROWS, kSlots, f.seq, 0, &f.in, f.out);
        fx_close(&f);
    }
    print_message("[  INFO    ] %zu bad-argument cases, %zu wrong\n", n, failed);
    assert_int_equal(failed, 0);
}

/* The calls that return a value rather than a status: defined results on
 * NULL and out-of-range arguments, never a crash. */
static void test_non_status_calls(void **state)
{
    (void)state;
    assert_null(rssm_pool_model(NULL));
    assert_int_equal(rssm_pool_capacity(NULL), 0);
    assert_int_equal(rssm_pool_free_count(NULL), 0);
    assert_int_equal(rssm_pool_export_size(NULL), 0);
    assert_string_equal(rssm_backend_name(NULL), "(null)");
    assert_string_equal(rssm_backend_device(NULL), "(null)");
    assert_string_equal(rssm_backend_kernels(NULL), "(null)");
    assert_null(rssm_backend_name_at(rssm_backend_name_count()));
    assert_non_null(rssm_status_str((rssm_status)999));
    assert_non_null(rssm_dtype_name((rssm_dtype)99));
    assert_non_null(rssm_gate_kind_name((rssm_gate_kind)99));
    assert_non_null(rssm_gate_mode_name((rssm_gate_mode)99));
    assert_true(rssm_model_q_scale(NULL) == 0.0f);
    rssm_backend_destroy(NULL);
    rssm_pool_destroy(NULL);
    rssm_batch_destroy(NULL);
    rssm_backend *b = NULL;
    rssm_pool *p = NULL;
    rssm_batch *bt = NULL;
    rssm_backend_destroy(&b);
    rssm_pool_destroy(&p);
    rssm_batch_destroy(&bt);
}

/* A refused create leaves NULL in its out argument, whichever argument it
 * refuses, so a caller that destroys what it was given after a failure
 * never destroys a stale handle. */
static void test_refused_create_clears_out(void **state)
{
    (void)state;
    rssm_error err;
    void *const stale = (void *)&err; /* any non-NULL pointer */
    rssm_backend *b = stale;
    TS_EXPECT(rssm_backend_create(NULL, &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_null(b);
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 1, L);
    rssm_pool *p = stale;
    TS_EXPECT(rssm_pool_create(NULL, &m, 2, RSSM_FLUSH_ALIGNED, &p, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_null(p);
    rssm_batch *bt = stale;
    TS_EXPECT(rssm_batch_create(NULL, 2, &bt, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_null(bt);
    rssm_layer_desc d;
    memset(&d, 0, sizeof d);
    d.model = m;
    d.max_rows = 2;
    d.slots = 2;
    rssm_layer *l = stale;
    TS_EXPECT(rssm_layer_create(NULL, &d, &l, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_null(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_table), cmocka_unit_test(test_non_status_calls),
                                       cmocka_unit_test(test_refused_create_clears_out)};
    return TS_RUN(tests);
}
