/* The model description: presets, validation, and what a slot costs. */
#include "backend.h"
#include "error.h"
#include "dtype.h"

#include <math.h>
#include <string.h>

const char *rssm_dtype_name(rssm_dtype t)
{
    switch (t) {
    case RSSM_DTYPE_F32: return "fp32";
    case RSSM_DTYPE_F16: return "fp16";
    case RSSM_DTYPE_BF16: return "bf16";
    }
    return "unknown";
}

const char *rssm_gate_kind_name(rssm_gate_kind g)
{
    switch (g) {
    case RSSM_GATE_GDN: return "gdn";
    case RSSM_GATE_KDA: return "kda";
    }
    return "unknown";
}

const char *rssm_gate_mode_name(rssm_gate_mode g)
{
    switch (g) {
    case RSSM_GATE_PRECOMPUTED: return "precomputed";
    case RSSM_GATE_RAW: return "raw";
    case RSSM_GATE_RAW_SAFE: return "raw-safe";
    }
    return "unknown";
}

rssm_status rssm_model_preset(rssm_model *m, const char *name, rssm_error *err)
{
    if (!m || !name)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "model and preset name must not be NULL");
    rssm_model base = {
        .head_k = 128,
        .head_v = 128,
        .gate_mode = RSSM_GATE_PRECOMPUTED,
        .gate_lower_bound = -5.0f,
        .replay = 1,
        .ring_len = 16,
        .state_dtype = RSSM_DTYPE_F32,
        .ring_dtype = RSSM_DTYPE_F16,
        .io_dtype = RSSM_DTYPE_F32,
        .qk_l2norm = 1,
        .q_scale = 0.0f,
    };
    if (strcmp(name, "qwen3.5-gdn") == 0) {
        base.layers = 36;
        base.num_qk_heads = 16;
        base.num_v_heads = 32;
        base.gate_kind = RSSM_GATE_GDN;
    } else if (strcmp(name, "kimi-linear-kda") == 0) {
        base.layers = 20;
        base.num_qk_heads = 32;
        base.num_v_heads = 32;
        base.gate_kind = RSSM_GATE_KDA;
    } else {
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "unknown preset '%s' (known: qwen3.5-gdn, kimi-linear-kda)", name);
    }
    *m = base;
    return rssm_clear_error(err);
}

static int dtype_known(rssm_dtype t)
{
    return t == RSSM_DTYPE_F32 || t == RSSM_DTYPE_F16 || t == RSSM_DTYPE_BF16;
}

rssm_status rssm_model_validate(const rssm_model *m, rssm_error *err)
{
    const rssm_status bad = RSSM_ERR_INVALID_ARGUMENT;
    if (!m)
        return rssm_set_error(err, bad, "model must not be NULL");
    if (m->layers == 0 || m->layers > 4096)
        return rssm_set_error(err, bad, "layers = %u: must be in 1..4096", m->layers);
    if (m->num_qk_heads == 0 || m->num_qk_heads > 1024)
        return rssm_set_error(err, bad, "num_qk_heads (H) = %u: must be in 1..1024", m->num_qk_heads);
    if (m->num_v_heads == 0 || m->num_v_heads > 1024)
        return rssm_set_error(err, bad, "num_v_heads (HV) = %u: must be in 1..1024", m->num_v_heads);
    if (m->num_v_heads % m->num_qk_heads != 0)
        return rssm_set_error(err, bad, "num_v_heads (HV) = %u is not a multiple of num_qk_heads (H) = %u",
                              m->num_v_heads, m->num_qk_heads);
    if (m->head_k < 4 || m->head_k > 256 || m->head_k % 4 != 0)
        return rssm_set_error(err, bad, "head_k (K) = %u: must be a multiple of 4 in 4..256", m->head_k);
    if (m->head_v < 4 || m->head_v > 256 || m->head_v % 4 != 0)
        return rssm_set_error(err, bad, "head_v (V) = %u: must be a multiple of 4 in 4..256", m->head_v);
    if (m->gate_kind != RSSM_GATE_GDN && m->gate_kind != RSSM_GATE_KDA)
        return rssm_set_error(err, bad, "gate_kind = %d: must be RSSM_GATE_GDN or RSSM_GATE_KDA", (int)m->gate_kind);
    if (m->gate_mode != RSSM_GATE_PRECOMPUTED && m->gate_mode != RSSM_GATE_RAW &&
        m->gate_mode != RSSM_GATE_RAW_SAFE)
        return rssm_set_error(err, bad, "gate_mode = %d: unknown", (int)m->gate_mode);
    if (m->gate_mode == RSSM_GATE_RAW_SAFE && !(m->gate_lower_bound < 0.0f && isfinite(m->gate_lower_bound)))
        return rssm_set_error(err, bad, "gate_lower_bound = %g: the safe gate needs a finite bound < 0",
                              (double)m->gate_lower_bound);
    if (m->replay != 0 && m->replay != 1)
        return rssm_set_error(err, bad, "replay = %d: must be 0 or 1", m->replay);
    if (m->replay && (m->ring_len < 1 || m->ring_len > RSSM_MAX_RING_LEN))
        return rssm_set_error(err, bad, "ring_len (L) = %u: must be in 1..%u", m->ring_len, RSSM_MAX_RING_LEN);
    if (m->state_dtype != RSSM_DTYPE_F32 && m->state_dtype != RSSM_DTYPE_BF16)
        return rssm_set_error(err, bad, "state_dtype = %d: must be fp32 or bf16", (int)m->state_dtype);
    if (!dtype_known(m->ring_dtype))
        return rssm_set_error(err, bad, "ring_dtype = %d: must be fp32, fp16 or bf16", (int)m->ring_dtype);
    if (!dtype_known(m->io_dtype))
        return rssm_set_error(err, bad, "io_dtype = %d: must be fp32, fp16 or bf16", (int)m->io_dtype);
    if (m->qk_l2norm != 0 && m->qk_l2norm != 1)
        return rssm_set_error(err, bad, "qk_l2norm = %d: must be 0 or 1", m->qk_l2norm);
    if (!(m->q_scale >= 0.0f && isfinite(m->q_scale)))
        return rssm_set_error(err, bad, "q_scale = %g: must be finite and >= 0 (0 means 1/sqrt(K))",
                              (double)m->q_scale);
    /* Kernels address a slot with 32-bit byte offsets. */
    rssm_slot_layout lay;
    rssm_slot_layout_init(&lay, m);
    if (lay.slot_bytes > UINT32_MAX)
        return rssm_set_error(err, bad, "one slot would take %zu bytes; at most 4 GiB is supported",
                              lay.slot_bytes);
    return rssm_clear_error(err);
}

float rssm_model_q_scale(const rssm_model *m)
{
    if (!m)
        return 0.0f;
    return m->q_scale > 0.0f ? m->q_scale : 1.0f / sqrtf((float)m->head_k);
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

void rssm_slot_layout_init(rssm_slot_layout *lay, const rssm_model *m)
{
    const size_t H = m->num_qk_heads, HV = m->num_v_heads, K = m->head_k, V = m->head_v;
    const size_t cap = m->replay ? m->ring_len - 1 : 0;
    const size_t ring = rssm_dtype_size(m->ring_dtype);
    memset(lay, 0, sizeof *lay);
    lay->ring_cap = (uint32_t)cap;
    lay->ckpt_bytes = HV * V * K * rssm_dtype_size(m->state_dtype);
    lay->ring_d_bytes = HV * cap * V * ring;
    lay->ring_k_bytes = H * cap * K * ring;
    lay->ring_g_bytes = HV * cap * (m->gate_kind == RSSM_GATE_KDA ? K : 1) * sizeof(float);
    size_t at = align_up(lay->ckpt_bytes, RSSM_ARRAY_ALIGN);
    lay->ring_d_offset = at;
    at = align_up(at + lay->ring_d_bytes, RSSM_ARRAY_ALIGN);
    lay->ring_k_offset = at;
    at = align_up(at + lay->ring_k_bytes, RSSM_ARRAY_ALIGN);
    lay->ring_g_offset = at;
    lay->layer_bytes = align_up(at + lay->ring_g_bytes, RSSM_ARRAY_ALIGN);
    lay->slot_bytes = lay->layer_bytes * m->layers;
}

rssm_status rssm_model_slot_bytes(const rssm_model *m, size_t *bytes, rssm_error *err)
{
    if (!bytes)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "bytes must not be NULL");
    rssm_status st = rssm_model_validate(m, err);
    if (st != RSSM_OK)
        return st;
    rssm_slot_layout lay;
    rssm_slot_layout_init(&lay, m);
    *bytes = lay.slot_bytes;
    return RSSM_OK;
}

void rssm_kernel_params_init(rssm_kernel_params *p, const rssm_model *m, const rssm_slot_layout *lay,
                             uint32_t max_rows)
{
    memset(p, 0, sizeof *p);
    p->num_qk_heads = m->num_qk_heads;
    p->num_v_heads = m->num_v_heads;
    p->head_k = m->head_k;
    p->head_v = m->head_v;
    p->ring_len = m->replay ? m->ring_len : 1;
    p->ring_cap = lay->ring_cap;
    p->gate_kind = (uint32_t)m->gate_kind;
    p->gate_mode = (uint32_t)m->gate_mode;
    p->flags = (m->qk_l2norm ? RSSM_FLAG_QK_L2NORM : 0u) | (m->replay ? RSSM_FLAG_REPLAY : 0u);
    p->state_dtype = (uint32_t)m->state_dtype;
    p->ring_dtype = (uint32_t)m->ring_dtype;
    p->io_dtype = (uint32_t)m->io_dtype;
    p->layers = m->layers;
    p->max_rows = max_rows;
    p->layer_bytes = (uint32_t)lay->layer_bytes;
    p->slot_bytes = (uint32_t)lay->slot_bytes;
    p->ring_d_offset = (uint32_t)lay->ring_d_offset;
    p->ring_k_offset = (uint32_t)lay->ring_k_offset;
    p->ring_g_offset = (uint32_t)lay->ring_g_offset;
    p->q_scale = rssm_model_q_scale(m);
    p->gate_lower_bound = m->gate_lower_bound;
}

void rssm_io_sizes_init(rssm_io_sizes *s, const rssm_kernel_params *p, uint32_t rows)
{
    const size_t io = rssm_dtype_size((rssm_dtype)p->io_dtype);
    const size_t H = p->num_qk_heads, HV = p->num_v_heads, K = p->head_k, V = p->head_v;
    s->q = s->k = rows * H * K * io;
    s->v = s->out = rows * HV * V * io;
    s->gate = rows * HV * (p->gate_kind == RSSM_CODE_GATE_KDA ? K : 1) * sizeof(float);
    s->beta = rows * HV * sizeof(float);
}

void rssm_layer_io_pool_strides(rssm_layer_io *io, const rssm_kernel_params *p)
{
    const size_t K = p->head_k, V = p->head_v;
    const size_t rsz = rssm_dtype_size((rssm_dtype)p->ring_dtype);
    const size_t gw = p->gate_kind == RSSM_CODE_GATE_KDA ? K : 1;
    rssm_io_sizes row;
    rssm_io_sizes_init(&row, p, 1);
    io->ckpt_slot = io->ring_d_slot = io->ring_k_slot = io->ring_g_slot = p->slot_bytes;
    io->ckpt_head = V * K * rssm_dtype_size((rssm_dtype)p->state_dtype);
    io->ring_d_head = p->ring_cap * V * rsz;
    io->ring_k_head = p->ring_cap * K * rsz;
    io->ring_g_head = p->ring_cap * gw * sizeof(float);
    io->q_row = row.q;
    io->k_row = row.k;
    io->v_row = row.v;
    io->gate_row = row.gate;
    io->beta_row = row.beta;
    io->out_row = row.out;
}

void rssm_layer_io_of_batch(rssm_layer_io *io, const rssm_kernel_params *p, uint8_t *pool, uint32_t slots,
                            const rssm_batch_arrays *a, const uint32_t *header, uint32_t *overflow,
                            uint32_t layer)
{
    const size_t HV = p->num_v_heads;
    const size_t gw = p->gate_kind == RSSM_CODE_GATE_KDA ? p->head_k : 1;
    const size_t first = (size_t)layer * p->max_rows; /* the layer's first row */
    uint8_t *lb = pool + (size_t)layer * p->layer_bytes;
    memset(io, 0, sizeof *io);
    rssm_layer_io_pool_strides(io, p);
    io->ckpt = lb;
    io->ring_d = lb + p->ring_d_offset;
    io->ring_k = lb + p->ring_k_offset;
    io->ring_g = lb + p->ring_g_offset;
    io->q = (const uint8_t *)a->q + first * io->q_row;
    io->k = (const uint8_t *)a->k + first * io->k_row;
    io->v = (const uint8_t *)a->v + first * io->v_row;
    io->gate = (const uint8_t *)a->gate + first * io->gate_row;
    io->beta = (const uint8_t *)a->beta + first * io->beta_row;
    io->out = (uint8_t *)a->out + first * io->out_row;
    io->A_log = a->A_log + (size_t)layer * HV;
    io->dt_bias = a->dt_bias + (size_t)layer * HV * gw;
    if (header) {
        const uint32_t *rows = header + RSSM_HEADER_WORDS;
        io->rows_dev = header + RSSM_HEADER_ROWS;
        io->row_slot = rows + RSSM_ROW_SLOT;
        io->row_write_pos = rows + RSSM_ROW_WRITE_POS;
        io->row_force = rows + RSSM_ROW_FORCE;
        io->row_io = rows + RSSM_ROW_IO;
        io->row_stride = RSSM_ROW_WORDS;
    }
    io->slots = slots;
    io->overflow = overflow;
}

void rssm_fold_params(rssm_kernel_params *fold, const rssm_kernel_params *p)
{
    *fold = *p;
    fold->gate_mode = RSSM_CODE_MODE_PRECOMPUTED;
    fold->flags &= ~(RSSM_FLAG_GATE_BF16 | RSSM_FLAG_QK_L2NORM);
}

/* The buffer's parts, each a multiple of RSSM_ARRAY_ALIGN: q, k, v, gate,
 * beta (zeros), out, force. */
typedef struct fold_parts {
    rssm_io_sizes row;
    size_t q, k, v, gate, beta, out, force, total;
} fold_parts;

static size_t fold_align(size_t n) { return (n + RSSM_ARRAY_ALIGN - 1) / RSSM_ARRAY_ALIGN * RSSM_ARRAY_ALIGN; }

static fold_parts fold_layout(const rssm_kernel_params *fold)
{
    fold_parts f;
    rssm_io_sizes_init(&f.row, fold, 1);
    const size_t rows = fold->max_rows;
    f.q = 0;
    f.k = f.q + fold_align(rows * f.row.q);
    f.v = f.k + fold_align(rows * f.row.k);
    f.gate = f.v + fold_align(rows * f.row.v);
    f.beta = f.gate + fold_align(rows * f.row.gate);
    f.out = f.beta + fold_align(rows * f.row.beta);
    f.force = f.out + fold_align(rows * f.row.out);
    f.total = f.force + fold_align(rows * sizeof(uint32_t));
    return f;
}

size_t rssm_fold_bytes(const rssm_kernel_params *fold) { return fold_layout(fold).total; }

void rssm_fold_image(void *host, const rssm_kernel_params *fold)
{
    const fold_parts f = fold_layout(fold);
    memset(host, 0, f.total);
    uint32_t *force = (uint32_t *)(void *)((uint8_t *)host + f.force);
    for (uint32_t r = 0; r < fold->max_rows; r++)
        force[r] = 1u;
}

void rssm_fold_io(rssm_layer_io *io, const rssm_kernel_params *fold, void *buffer)
{
    const fold_parts f = fold_layout(fold);
    uint8_t *b = buffer;
    io->q = b + f.q;
    io->k = b + f.k;
    io->v = b + f.v;
    io->gate = b + f.gate;
    io->beta = b + f.beta;
    io->out = b + f.out;
    io->q_row = f.row.q;
    io->k_row = f.row.k;
    io->v_row = f.row.v;
    io->gate_row = f.row.gate;
    io->beta_row = f.row.beta;
    io->out_row = f.row.out;
    io->A_log = io->dt_bias = NULL;
    io->row_force = (const uint32_t *)(const void *)(b + f.force);
    io->overflow = NULL;
}
