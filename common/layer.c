/* rssm_layer: one layer of a decode step on the caller's memory. Common
 * code turns the caller's description (element strides, 0 for contiguous)
 * into the byte strides of rssm_layer_io and checks what it can on the
 * host, once; the backend launches. */
#include "objects.h"
#include "dtype.h"
#include "error.h"
#include "overlap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The caller's stride, or the contiguous one for 0; negative refused. */
static rssm_status stride_or(int64_t given, size_t contiguous, size_t *out, const char *name, rssm_error *err)
{
    if (given < 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "layer: %s = %lld: strides must be >= 0", name,
                              (long long)given);
    if ((uint64_t)given > ((uint64_t)1 << 40))
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "layer: %s = %lld is beyond any tensor", name,
                              (long long)given);
    *out = given == 0 ? contiguous : (size_t)given;
    return RSSM_OK;
}

/* Whether blocks of `inner` elements at i * s1 + j * s2 (i < n1, j < n2)
 * are disjoint: the smaller stride (of a dimension longer than 1) must
 * clear a block, the larger one all of the smaller one's blocks. A kernel
 * that writes two overlapping blocks at once would race. */
static int disjoint(size_t inner, size_t s1, size_t n1, size_t s2, size_t n2)
{
    if (n1 <= 1) {
        s1 = s2;
        n1 = n2;
        n2 = 1;
    }
    if (n2 > 1 && s2 < s1) {
        const size_t ts = s1, tn = n1;
        s1 = s2;
        n1 = n2;
        s2 = ts;
        n2 = tn;
    }
    if (n1 > 1 && s1 < inner)
        return 0;
    return n2 <= 1 || s2 >= (n1 > 1 ? s1 * n1 : inner);
}

/* One state tensor [slots][heads][inner], its strides checked and turned
 * into bytes. */
static rssm_status state_strides(int64_t slot_given, int64_t head_given, size_t heads, size_t inner, size_t elem,
                                 uint32_t slots, const char *name, size_t *slot_bytes, size_t *head_bytes,
                                 rssm_error *err)
{
    char what[48];
    size_t s_slot = 0, s_head = 0;
    snprintf(what, sizeof what, "%s_head_stride", name);
    rssm_status st = stride_or(head_given, inner, &s_head, what, err);
    if (st != RSSM_OK)
        return st;
    snprintf(what, sizeof what, "%s_slot_stride", name);
    if ((st = stride_or(slot_given, heads * inner, &s_slot, what, err)) != RSSM_OK)
        return st;
    if (!disjoint(inner, s_head, heads, s_slot, slots))
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "layer: %s strides (slot %zu, head %zu elements) overlap a head's %zu elements "
                              "with another's",
                              name, s_slot, s_head, inner);
    *slot_bytes = s_slot * elem;
    *head_bytes = s_head * elem;
    return RSSM_OK;
}

/* Validates `d` and fills the kernel parameters and the strides of `shape`
 * (its pointers NULL). */
static rssm_status resolve(const rssm_layer_desc *d, rssm_kernel_params *p, rssm_layer_io *shape, rssm_error *err)
{
    if (!d)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "layer: the description must not be NULL");
    rssm_model m = d->model;
    m.layers = 1;
    rssm_status st = rssm_model_validate(&m, err);
    if (st != RSSM_OK)
        return st;
    if (d->max_rows == 0 || d->max_rows > 65536)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "layer: max_rows = %u: must be in 1..65536",
                              d->max_rows);
    if (d->slots == 0 || d->slots > INT32_MAX)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "layer: slots = %u: must be in 1..%d", d->slots,
                              INT32_MAX);
    rssm_slot_layout lay;
    rssm_slot_layout_init(&lay, &m);
    rssm_kernel_params_init(p, &m, &lay, d->max_rows);

    const size_t H = m.num_qk_heads, HV = m.num_v_heads, K = m.head_k, V = m.head_v, cap = p->ring_cap;
    const size_t G = m.gate_kind == RSSM_GATE_KDA ? K : 1;
    const size_t ssz = rssm_dtype_size(m.state_dtype), rsz = rssm_dtype_size(m.ring_dtype);
    const size_t iosz = rssm_dtype_size(m.io_dtype);
    if (d->gate_dtype != RSSM_DTYPE_F32 && d->gate_dtype != RSSM_DTYPE_BF16)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "layer: gate_dtype must be fp32 or bf16, not %s",
                              rssm_dtype_name(d->gate_dtype));
    const size_t gsz = rssm_dtype_size(d->gate_dtype);
    if (d->gate_dtype == RSSM_DTYPE_BF16)
        p->flags |= RSSM_FLAG_GATE_BF16;
    if (d->padding != RSSM_PADDING_OUT_OF_RANGE && d->padding != RSSM_PADDING_NONPOSITIVE)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "layer: padding = %d: must be RSSM_PADDING_OUT_OF_RANGE or RSSM_PADDING_NONPOSITIVE",
                              (int)d->padding);
    if (d->padding == RSSM_PADDING_NONPOSITIVE)
        p->flags |= RSSM_FLAG_PAD_ZERO;
    memset(shape, 0, sizeof *shape);
    shape->slots = d->slots;
    st = state_strides(d->state_slot_stride, d->state_head_stride, HV, V * K, ssz, d->slots, "state",
                       &shape->ckpt_slot, &shape->ckpt_head, err);
    if (st == RSSM_OK && cap > 0)
        st = state_strides(d->ring_d_slot_stride, d->ring_d_head_stride, HV, cap * V, rsz, d->slots, "ring_d",
                           &shape->ring_d_slot, &shape->ring_d_head, err);
    if (st == RSSM_OK && cap > 0)
        st = state_strides(d->ring_k_slot_stride, d->ring_k_head_stride, H, cap * K, rsz, d->slots, "ring_k",
                           &shape->ring_k_slot, &shape->ring_k_head, err);
    if (st == RSSM_OK && cap > 0)
        st = state_strides(d->ring_g_slot_stride, d->ring_g_head_stride, HV, cap * G, sizeof(float), d->slots,
                           "ring_g", &shape->ring_g_slot, &shape->ring_g_head, err);
    if (st != RSSM_OK)
        return st;

    /* Rows: inputs may share memory (q, k and v are parts of one row), the
     * output's rows must not. */
    const struct {
        int64_t given;
        size_t contiguous, elem;
        size_t *bytes;
        const char *name;
    } rows[] = {
        {d->q_row_stride, H * K, iosz, &shape->q_row, "q_row_stride"},
        {d->k_row_stride, H * K, iosz, &shape->k_row, "k_row_stride"},
        {d->v_row_stride, HV * V, iosz, &shape->v_row, "v_row_stride"},
        {d->out_row_stride, HV * V, iosz, &shape->out_row, "out_row_stride"},
        {d->gate_row_stride, HV * G, gsz, &shape->gate_row, "gate_row_stride"},
        {d->beta_row_stride, HV, gsz, &shape->beta_row, "beta_row_stride"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t s = 0;
        if ((st = stride_or(rows[i].given, rows[i].contiguous, &s, rows[i].name, err)) != RSSM_OK)
            return st;
        *rows[i].bytes = s * rows[i].elem;
    }
    if (d->max_rows > 1 && shape->out_row < HV * V * iosz)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "layer: out_row_stride = %zu elements: rows of out (%zu elements) would overlap",
                              shape->out_row / iosz, HV * V);
    return rssm_clear_error(err);
}

const char *rssm_layer_misaligned_stride(const rssm_kernel_params *p, const rssm_layer_io *io)
{
    const size_t g = p->gate_kind == RSSM_CODE_GATE_KDA ? 16u : 4u;
    const struct {
        size_t bytes, align;
        const char *name;
    } st[] = {
        {io->ckpt_slot, 16, "state slot stride"},   {io->ckpt_head, 16, "state head stride"},
        {io->ring_d_slot, 16, "ring_d slot stride"}, {io->ring_d_head, 16, "ring_d head stride"},
        {io->ring_k_slot, 16, "ring_k slot stride"}, {io->ring_k_head, 16, "ring_k head stride"},
        {io->ring_g_slot, g, "ring_g slot stride"},  {io->ring_g_head, g, "ring_g head stride"},
        {io->q_row, 16, "q row stride"},             {io->k_row, 16, "k row stride"},
        {io->v_row, 16, "v row stride"},             {io->out_row, 16, "out row stride"},
    };
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++)
        if (st[i].bytes % st[i].align != 0)
            return st[i].name;
    return NULL;
}

/* The backend's verdict on a resolved description. */
static rssm_status backend_check(const rssm_backend *b, const rssm_layer_desc *d, const rssm_kernel_params *p,
                                 const rssm_layer_io *shape, rssm_error *err)
{
    if (!b->ops->layer_check)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              "%s has no per-layer entry yet (rssm_layer_*); rssm_batch runs every backend",
                              b->name);
    rssm_model m = d->model;
    m.layers = 1;
    rssm_status st = b->ops->supports(b->ctx, &m, err);
    if (st != RSSM_OK)
        return st;
    return b->ops->layer_check(b->ctx, p, shape, err);
}

rssm_status rssm_layer_can_implement(const rssm_backend *b, const rssm_layer_desc *desc, rssm_error *err)
{
    if (!b)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "layer: backend must not be NULL");
    rssm_kernel_params p;
    rssm_layer_io shape;
    rssm_status st = resolve(desc, &p, &shape, err);
    if (st != RSSM_OK)
        return st;
    return backend_check(b, desc, &p, &shape, err);
}

rssm_status rssm_layer_create(rssm_backend *b, const rssm_layer_desc *desc, rssm_layer **out, rssm_error *err)
{
    if (out)
        *out = NULL; /* whatever is refused, the caller is never left a stale handle */
    if (!b || !out)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "layer: backend and out must not be NULL");
    rssm_layer *l = calloc(1, sizeof *l);
    if (l && b->ops->place && !(l->seen = calloc(1, sizeof *l->seen))) {
        free(l);
        l = NULL;
    }
    if (!l)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "layer: out of host memory");
    rssm_status st = resolve(desc, &l->params, &l->shape, err);
    if (st == RSSM_OK)
        st = backend_check(b, desc, &l->params, &l->shape, err);
    if (st == RSSM_OK)
        st = b->ops->layer_create(b->ctx, &l->params, &l->shape, &l->dev, err);
    if (st != RSSM_OK) {
        free(l->seen);
        free(l);
        return st;
    }
    l->desc = *desc;
    l->backend = b;
    rssm_backend_retain(b);
    *out = l;
    return rssm_clear_error(err);
}

void rssm_layer_destroy(rssm_layer **lp)
{
    if (!lp || !*lp)
        return;
    rssm_layer *l = *lp;
    l->backend->ops->layer_destroy(l->backend->ctx, l->dev);
    rssm_backend_release(l->backend);
    free(l->seen);
    free(l);
    *lp = NULL;
}

/* The layer's strides with the caller's pointers and `rows` rows. */
static rssm_layer_io tensors_io(const rssm_layer *l, uint32_t rows, const rssm_layer_tensors *t)
{
    rssm_layer_io io = l->shape;
    io.ckpt = t->state;
    io.ring_d = t->ring_d;
    io.ring_k = t->ring_k;
    io.ring_g = (uint8_t *)t->ring_g;
    io.q = t->q;
    io.k = t->k;
    io.v = t->v;
    io.gate = (const uint8_t *)t->gate;
    io.beta = (const uint8_t *)t->beta;
    io.out = t->out;
    io.A_log = t->A_log;
    io.dt_bias = t->dt_bias;
    /* int32 indices read as 32-bit words: a negative one is a large
     * unsigned one, outside the slots, so padding by either reading */
    io.row_slot = (const uint32_t *)(const void *)t->slot_index;
    io.row_write_pos = (const uint32_t *)(const void *)t->write_pos;
    io.row_force = (const uint32_t *)(const void *)t->force;
    io.row_io = NULL;
    io.row_stride = 1;
    io.rows = rows;
    io.rows_dev = NULL;
    io.overflow = t->overflow;
    return io;
}

/* The tensors a launch reads or writes, in the order of rssm_layer_tensors
 * and rssm_layer_buffers, by name: the T_COUNT it needs, then the optional
 * ones (force, overflow), then a window's drafts. */
enum { T_STATE, T_RING_D, T_RING_K, T_RING_G, T_Q, T_K, T_V, T_GATE, T_BETA, T_A_LOG, T_DT_BIAS, T_OUT,
       T_SLOT_INDEX, T_WRITE_POS, T_COUNT, T_FORCE = T_COUNT, T_OVERFLOW, T_ALL, T_DRAFTS = T_ALL, T_CALL };
static const char *const tensor_names[T_CALL] = {
    "state", "ring_d", "ring_k", "ring_g", "q", "k", "v", "gate", "beta", "A_log", "dt_bias", "out",
    "slot_index", "write_pos", "force", "overflow", "drafts",
};

/* What a call does with its tensors: one step (rssm_layer_run, _record),
 * the fold (_materialise: it writes the state and reads the rings and the
 * rows), or a window of draft tokens (_verify: it writes the rings, out and
 * overflow, and reads the state). */
typedef enum call_kind { CALL_STEP, CALL_FOLD, CALL_WINDOW } call_kind;

/* Whether a call reads or writes tensor i: the rings with replay on, the
 * gate weights with raw gates, the step arrays (force and overflow too)
 * unless it is a fold, drafts in a window. */
static bool tensor_used(const rssm_kernel_params *p, int i, call_kind kind)
{
    if (i == T_RING_D || i == T_RING_K || i == T_RING_G)
        return p->ring_cap > 0;
    if (i == T_A_LOG || i == T_DT_BIAS)
        return p->gate_mode != RSSM_CODE_MODE_PRECOMPUTED && kind != CALL_FOLD;
    if (i == T_DRAFTS)
        return kind == CALL_WINDOW;
    if ((i >= T_Q && i <= T_OUT) || i >= T_COUNT)
        return kind != CALL_FOLD;
    return true;
}

/* Whether a call writes tensor i (rssm.h: memory a call writes). */
static bool tensor_written(int i, call_kind kind)
{
    if (i == T_STATE)
        return kind != CALL_WINDOW;
    if (i == T_RING_D || i == T_RING_K || i == T_RING_G)
        return kind != CALL_FOLD;
    return i == T_OUT || i == T_OVERFLOW;
}

/* Where a call's tensors are: each one's address space and first byte (0
 * and a pointer, or a Vulkan buffer and an offset), and whether it was
 * given (a pointer that is not NULL, a handle that is not 0). */
typedef struct call_memory {
    uint64_t space[T_CALL], at[T_CALL];
    bool given[T_CALL];
} call_memory;

static call_memory pointer_memory(const rssm_layer_tensors *t, const void *drafts)
{
    const void *const ptr[T_CALL] = {t->state, t->ring_d,  t->ring_k, t->ring_g,     t->q,         t->k,
                                     t->v,     t->gate,    t->beta,   t->A_log,      t->dt_bias,   t->out,
                                     t->slot_index, t->write_pos, t->force, t->overflow, drafts};
    call_memory m;
    for (int i = 0; i < T_CALL; i++) {
        m.space[i] = 0;
        m.at[i] = (uint64_t)(uintptr_t)ptr[i];
        m.given[i] = ptr[i] != NULL;
    }
    return m;
}

static call_memory buffer_memory(const rssm_layer_buffers *t, const rssm_buffer *drafts)
{
    static const rssm_buffer none = {0, 0};
    const rssm_buffer *const buf[T_CALL] = {&t->state, &t->ring_d, &t->ring_k, &t->ring_g, &t->q,
                                            &t->k,     &t->v,      &t->gate,   &t->beta,   &t->A_log,
                                            &t->dt_bias, &t->out,  &t->slot_index, &t->write_pos, &t->force,
                                            &t->overflow, drafts ? drafts : &none};
    call_memory m;
    for (int i = 0; i < T_CALL; i++) {
        m.space[i] = buf[i]->handle;
        m.at[i] = buf[i]->offset;
        m.given[i] = buf[i]->handle != 0;
    }
    return m;
}

/* The bytes each tensor of a call covers, by the indices above, for `rows`
 * rows whose step arrays hold `step_rows` (rows times the tokens of a
 * window): the whole state pool and rings (every slot, not only the rows':
 * a tensor written into a slot outside the batch corrupts that slot just
 * the same), the used ring entries of each head, the step arrays' rows,
 * the per-row arrays. */
static void call_extents(const rssm_layer *l, uint32_t rows, uint32_t step_rows, const call_memory *m,
                         rssm_extent e[T_CALL])
{
    const rssm_kernel_params *p = &l->params;
    const rssm_layer_io *s = &l->shape;
    const uint64_t H = p->num_qk_heads, HV = p->num_v_heads, K = p->head_k, V = p->head_v, cap = p->ring_cap;
    const uint64_t G = p->gate_kind == RSSM_CODE_GATE_KDA ? K : 1, slots = s->slots;
    const uint64_t ssz = rssm_dtype_size((rssm_dtype)p->state_dtype), rsz = rssm_dtype_size((rssm_dtype)p->ring_dtype);
    const uint64_t iosz = rssm_dtype_size((rssm_dtype)p->io_dtype), gsz = p->flags & RSSM_FLAG_GATE_BF16 ? 2 : 4;
    for (int i = 0; i < T_CALL; i++) /* one block unless set below: the per-row arrays, A_log, dt_bias */
        e[i] = (rssm_extent){.space = m->space[i], .base = m->at[i], .block = 4ull * rows, .count = {1, 1}};
    /* {block, slot (or row) stride, count, head stride, count} */
    const struct {
        int i;
        uint64_t block, s0, n0, s1, n1;
    } d[] = {
        {T_STATE, V * K * ssz, s->ckpt_slot, slots, s->ckpt_head, HV},
        {T_RING_D, cap * V * rsz, s->ring_d_slot, slots, s->ring_d_head, HV},
        {T_RING_K, cap * K * rsz, s->ring_k_slot, slots, s->ring_k_head, H},
        {T_RING_G, cap * G * sizeof(float), s->ring_g_slot, slots, s->ring_g_head, HV},
        {T_Q, H * K * iosz, s->q_row, step_rows, 0, 1},
        {T_K, H * K * iosz, s->k_row, step_rows, 0, 1},
        {T_V, HV * V * iosz, s->v_row, step_rows, 0, 1},
        {T_GATE, HV * G * gsz, s->gate_row, step_rows, 0, 1},
        {T_BETA, HV * gsz, s->beta_row, step_rows, 0, 1},
        {T_OUT, HV * V * iosz, s->out_row, step_rows, 0, 1},
        {T_A_LOG, HV * sizeof(float), 0, 1, 0, 1},
        {T_DT_BIAS, HV * G * sizeof(float), 0, 1, 0, 1},
    };
    for (size_t k = 0; k < sizeof d / sizeof d[0]; k++) {
        rssm_extent *x = &e[d[k].i];
        x->block = d[k].block;
        x->stride[0] = d[k].s0;
        x->count[0] = d[k].n0;
        x->stride[1] = d[k].s1;
        x->count[1] = d[k].n1;
    }
}

/* That no tensor the call writes shares a byte with another of its
 * tensors (rssm.h, rssm_layer_run: no backend promises to read an input
 * before it writes an output, and a step re-run after an overflow needs
 * its inputs as they were). */
static rssm_status check_overlap(const rssm_layer *l, const call_memory *m, uint32_t rows, call_kind kind,
                                 uint32_t t_max, const char *who, rssm_error *err)
{
    rssm_extent e[T_CALL];
    call_extents(l, rows, kind == CALL_WINDOW ? rows * t_max : rows, m, e);
    rssm_named_extent used[T_CALL];
    size_t n = 0;
    for (int i = 0; i < T_CALL; i++)
        if (m->given[i] && tensor_used(&l->params, i, kind))
            used[n++] = (rssm_named_extent){tensor_names[i], e[i], tensor_written(i, kind)};
    return rssm_check_overlaps(used, n, who, err);
}

/* Checks a call's rows, that every tensor it needs is there and that what
 * it writes overlaps nothing else; *run is false for a call with nothing
 * to do. */
static rssm_status check_call(const rssm_layer *l, uint32_t rows, const call_memory *m, call_kind kind,
                              uint32_t t_max, const char *who, bool *run, rssm_error *err)
{
    const rssm_kernel_params *p = &l->params;
    *run = false;
    if (rows > p->max_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: %u rows exceed the layer's max_rows %u", who, rows,
                              p->max_rows);
    /* no ring: a materialise has nothing to fold, the checkpoint is the state */
    if (rows == 0 || (kind == CALL_FOLD && p->ring_cap == 0))
        return rssm_clear_error(err);
    for (int i = 0; i < T_COUNT; i++) {
        if (tensor_used(p, i, kind) && !m->given[i])
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: tensor %s must not be %s", who,
                                  tensor_names[i], l->backend->ops->layer_run ? "NULL" : "a 0 handle");
    }
    rssm_status st = check_overlap(l, m, rows, kind, t_max, who, err);
    if (st != RSSM_OK)
        return st;
    *run = true;
    return rssm_clear_error(err);
}

/* Every tensor a call uses on the layer's device (a backend with `place`,
 * backend.h: cuda), each distinct address asked about once per layer
 * object (rssm.h, rssm_layer_run). */
static rssm_status check_memory(const rssm_layer *l, const call_memory *m, call_kind kind, const char *who,
                                rssm_error *err)
{
    if (!l->seen)
        return RSSM_OK;
    rssm_named_address used[T_CALL];
    size_t n = 0;
    for (int i = 0; i < T_CALL; i++)
        if (tensor_used(&l->params, i, kind))
            used[n++] = (rssm_named_address){tensor_names[i], (const void *)(uintptr_t)m->at[i]};
    return rssm_backend_check_device_memory(l->backend, l->seen, who, used, n, err);
}

/* The backend's entry for pointers (run) or for buffer handles (record),
 * or why this backend has none. */
static rssm_status takes(const rssm_layer *l, bool buffers, const char *who, rssm_error *err)
{
    const rssm_backend_ops *ops = l->backend->ops;
    if (buffers ? ops->layer_record != NULL : ops->layer_run != NULL)
        return RSSM_OK;
    return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                          buffers ? "%s: %s takes device pointers, not buffers (rssm_layer_run)"
                                  : "%s: %s takes buffers, not pointers (rssm_layer_record)",
                          who, l->backend->name);
}

/* rssm_layer_run, rssm_layer_materialise and rssm_layer_verify (t_max
 * tokens of `drafts`): the same checks on pointers, and the launch's
 * addresses; *run is false for a call with nothing to do. */
static rssm_status pointers(const rssm_layer *l, uint32_t rows, const rssm_layer_tensors *t, call_kind kind,
                            uint32_t t_max, const uint32_t *drafts, const char *who, bool *run, rssm_layer_io *io,
                            rssm_error *err)
{
    *run = false;
    if (!l || !t)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: layer and tensors must not be NULL", who);
    rssm_status st = takes(l, false, who, err);
    const call_memory m = pointer_memory(t, drafts);
    if (st != RSSM_OK || (st = check_call(l, rows, &m, kind, t_max, who, run, err)) != RSSM_OK || !*run)
        return st;
    if ((st = check_memory(l, &m, kind, who, err)) != RSSM_OK) {
        *run = false;
        return st;
    }
    *io = tensors_io(l, rows, t);
    return RSSM_OK;
}

rssm_status rssm_layer_run(rssm_layer *l, uint32_t rows, const rssm_layer_tensors *t, void *stream,
                           rssm_error *err)
{
    bool run;
    rssm_layer_io io;
    rssm_status st = pointers(l, rows, t, CALL_STEP, 0, NULL, "layer run", &run, &io, err);
    if (st != RSSM_OK || !run)
        return st;
    rssm_backend *b = l->backend;
    return b->ops->layer_run(b->ctx, l->dev, &io, stream, err);
}

rssm_status rssm_layer_materialise(rssm_layer *l, uint32_t rows, const rssm_layer_tensors *t, void *stream,
                                   rssm_error *err)
{
    bool run;
    rssm_layer_io io;
    rssm_status st = pointers(l, rows, t, CALL_FOLD, 0, NULL, "layer materialise", &run, &io, err);
    if (st != RSSM_OK || !run)
        return st;
    /* the backend replaces the step arrays and force with the fold's own */
    rssm_backend *b = l->backend;
    return b->ops->layer_materialise(b->ctx, l->dev, &io, stream, err);
}

/* rssm_layer_record, rssm_layer_record_materialise and (with `window`)
 * rssm_layer_record_verify: the same checks on buffers, the backend's one
 * recording of a step, of the fold or of a window. */
static rssm_status record(rssm_layer *l, uint32_t rows, const rssm_layer_buffers *t, void *command_buffer,
                          bool materialise, const rssm_record_window *window, const char *who, rssm_error *err)
{
    if (!l || !t || !command_buffer)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: layer, buffers and command buffer must not be NULL",
                              who);
    rssm_status st = takes(l, true, who, err);
    const call_kind kind = materialise ? CALL_FOLD : window ? CALL_WINDOW : CALL_STEP;
    const call_memory m = buffer_memory(t, window ? &window->drafts : NULL);
    bool run = false;
    if (st != RSSM_OK || (st = check_call(l, rows, &m, kind, window ? window->t_max : 0, who, &run, err)) != RSSM_OK ||
        !run)
        return st;
    if (window && !window->drafts.handle)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: drafts must not be a 0 handle", who);
    rssm_backend *b = l->backend;
    return b->ops->layer_record(b->ctx, l->dev, rows, t, materialise, window, command_buffer, err);
}

/* What rssm_layer_verify and rssm_layer_record_verify check alike, after
 * the entry's own presence: t_max, the token-major rows, no force. */
static rssm_status check_window(const rssm_layer *l, uint32_t rows, uint32_t t_max, bool force, const char *who,
                                rssm_error *err)
{
    const rssm_kernel_params *p = &l->params;
    const uint32_t most = p->ring_cap < RSSM_MAX_DRAFT ? p->ring_cap : RSSM_MAX_DRAFT;
    if (t_max == 0 || t_max > most)
        return rssm_set_error(err, p->ring_cap ? RSSM_ERR_INVALID_ARGUMENT : RSSM_ERR_UNSUPPORTED,
                              "%s: t_max = %u: must be in 1..%u (RSSM_MAX_DRAFT and L - 1)", who, t_max, most);
    if (force)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: force must be %s (a window never flushes)", who,
                              l->backend->ops->layer_run ? "NULL" : "a 0 handle");
    if ((uint64_t)rows * t_max > p->max_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "%s: %u rows of %u tokens are %llu step-array rows, beyond the layer's max_rows %u",
                              who, rows, t_max, (unsigned long long)rows * t_max, p->max_rows);
    return RSSM_OK;
}

rssm_status rssm_layer_verify(rssm_layer *l, uint32_t rows, uint32_t t_max, const uint32_t *drafts,
                              const rssm_layer_tensors *t, void *stream, rssm_error *err)
{
    static const char who[] = "layer verify";
    if (!l || !t || !drafts)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: layer, drafts and tensors must not be NULL", who);
    rssm_backend *b = l->backend;
    if (!b->ops->layer_verify)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              b->ops->layer_record ? "%s: %s takes buffers, not pointers (rssm_layer_record_verify)"
                              : "%s: %s has no per-layer window (run the tokens with %s)",
                              who, b->name, b->ops->layer_run ? "rssm_layer_run" : "rssm_layer_record");
    rssm_status st = check_window(l, rows, t_max, t->force != NULL, who, err);
    if (st != RSSM_OK)
        return st;
    bool run;
    rssm_layer_io io;
    st = pointers(l, rows, t, CALL_WINDOW, t_max, drafts, who, &run, &io, err);
    if (st != RSSM_OK || !run)
        return st;
    return b->ops->layer_verify(b->ctx, l->dev, &io, t_max, drafts, stream, err);
}

rssm_status rssm_layer_record_verify(rssm_layer *l, uint32_t rows, uint32_t t_max, rssm_buffer drafts,
                                     const rssm_layer_buffers *t, void *command_buffer, rssm_error *err)
{
    static const char who[] = "layer record verify";
    if (!l || !t || !command_buffer)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: layer, buffers and command buffer must not be NULL",
                              who);
    rssm_backend *b = l->backend;
    if (!b->ops->layer_record)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              b->ops->layer_verify ? "%s: %s takes device pointers, not buffers (rssm_layer_verify)"
                              : "%s: %s has no per-layer window on buffers (record the tokens with %s)",
                              who, b->name, b->ops->layer_verify ? "" : "rssm_layer_record");
    rssm_status st = check_window(l, rows, t_max, t->force.handle != 0, who, err);
    if (st != RSSM_OK)
        return st;
    const rssm_record_window window = {t_max, drafts};
    return record(l, rows, t, command_buffer, false, &window, who, err);
}

/* The advance's arrays, slot_index, write_pos, force and cursor (given[i]:
 * not NULL, not a 0 handle): it writes the cursor ([slots]) and reads the
 * rows ([rows] each). The cursor may be write_pos itself (rssm.h); it may
 * share no other byte with them. */
static rssm_status check_advance_overlap(const rssm_layer *l, uint32_t rows, const uint64_t space[4],
                                         const uint64_t at[4], const bool given[4], const char *who, rssm_error *err)
{
    static const char *const names[4] = {"slot_index", "write_pos", "force", "cursor"}; /* the entries' order */
    rssm_named_extent e[4];
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        if (!given[i] || (i == 1 && space[1] == space[3] && at[1] == at[3]))
            continue;
        const uint64_t bytes = 4ull * (i == 3 ? l->shape.slots : rows);
        e[n++] = (rssm_named_extent){names[i], {.space = space[i], .base = at[i], .block = bytes, .count = {1, 1}},
                                     i == 3};
    }
    return rssm_check_overlaps(e, n, who, err);
}

rssm_status rssm_layer_advance(rssm_layer *l, uint32_t rows, const int32_t *slot_index, const int32_t *write_pos,
                               const int32_t *force, int32_t *cursor, void *stream, rssm_error *err)
{
    static const char who[] = "layer advance";
    if (!l)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: layer must not be NULL", who);
    if (rows > l->params.max_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: %u rows exceed the layer's max_rows %u", who, rows,
                              l->params.max_rows);
    if (rows == 0)
        return rssm_clear_error(err);
    if (!slot_index || !write_pos || !cursor)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: slot_index, write_pos and cursor must not be NULL",
                              who);
    rssm_status st = takes(l, false, who, err);
    if (st != RSSM_OK)
        return st;
    const rssm_named_address a[4] = {
        {"slot_index", slot_index}, {"write_pos", write_pos}, {"force", force}, {"cursor", cursor}};
    uint64_t space[4] = {0}, at[4];
    bool given[4];
    for (int i = 0; i < 4; i++) {
        at[i] = (uint64_t)(uintptr_t)a[i].address;
        given[i] = a[i].address != NULL;
    }
    if ((st = check_advance_overlap(l, rows, space, at, given, who, err)) != RSSM_OK)
        return st;
    rssm_backend *b = l->backend;
    if (l->seen && (st = rssm_backend_check_device_memory(b, l->seen, who, a, 4, err)) != RSSM_OK)
        return st;
    return b->ops->layer_advance(b->ctx, l->dev, rows, slot_index, write_pos, force, cursor, stream, err);
}

rssm_status rssm_layer_record(rssm_layer *l, uint32_t rows, const rssm_layer_buffers *t, void *command_buffer,
                              rssm_error *err)
{
    return record(l, rows, t, command_buffer, false, NULL, "layer record", err);
}

rssm_status rssm_layer_record_materialise(rssm_layer *l, uint32_t rows, const rssm_layer_buffers *t,
                                          void *command_buffer, rssm_error *err)
{
    return record(l, rows, t, command_buffer, true, NULL, "layer record materialise", err);
}

rssm_status rssm_layer_record_advance(rssm_layer *l, uint32_t rows, rssm_buffer slot_index, rssm_buffer write_pos,
                                      rssm_buffer force, rssm_buffer cursor, void *command_buffer, rssm_error *err)
{
    static const char who[] = "layer record advance";
    if (!l || !command_buffer)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: layer and command buffer must not be NULL", who);
    rssm_status st = takes(l, true, who, err);
    if (st != RSSM_OK)
        return st;
    if (rows > l->params.max_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: %u rows exceed the layer's max_rows %u", who, rows,
                              l->params.max_rows);
    if (rows == 0)
        return rssm_clear_error(err);
    if (!slot_index.handle || !write_pos.handle || !cursor.handle)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "%s: slot_index, write_pos and cursor must not be 0 handles", who);
    const rssm_buffer *const buf[4] = {&slot_index, &write_pos, &force, &cursor};
    uint64_t space[4], at[4];
    bool given[4];
    for (int i = 0; i < 4; i++) {
        space[i] = buf[i]->handle;
        at[i] = buf[i]->offset;
        given[i] = buf[i]->handle != 0;
    }
    if ((st = check_advance_overlap(l, rows, space, at, given, who, err)) != RSSM_OK)
        return st;
    rssm_backend *b = l->backend;
    return b->ops->layer_record_advance(b->ctx, l->dev, rows, &slot_index, &write_pos, &force, &cursor,
                                        command_buffer, err);
}
