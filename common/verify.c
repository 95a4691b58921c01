/* Speculative-decode verify and accept on the whole-step API
 * (docs/design.md §9), the same for every backend: a window of T draft
 * tokens runs as T steps of the decode kernels at ring positions n .. n +
 * T - 1, none of them a flush, so the tokens append tentative entries past
 * write_pos and no checkpoint is written; the accept moves write_pos over
 * the accepted ones and, for a snapshot boundary among them, folds the
 * ring up to it. */
#include "objects.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of one token's block of each step array, and of its outputs. */
typedef struct token_bytes {
    size_t q, k, v, gate, beta, out;
} token_bytes;

static token_bytes token_bytes_of(const rssm_batch *b, uint32_t rows)
{
    rssm_io_sizes s;
    rssm_io_sizes_init(&s, &b->params, rows);
    const size_t L = b->params.layers;
    return (token_bytes){L * s.q, L * s.k, L * s.v, L * s.gate, L * s.beta, L * s.out};
}

/* The ring position of window token x of a slot, counted from where the
 * ring starts after the last of its first `cuts` cuts (or from the
 * window's base when there are none). */
static uint32_t token_pos(const rssm_verify_state *v, uint32_t cuts, uint32_t x)
{
    return cuts == 0 ? v->base + x : x - v->cut_at[cuts - 1] - 1;
}

static rssm_status check_verify(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint32_t *drafts,
                                const rssm_step_inputs *in, const void *out, uint32_t *t_max, rssm_error *err)
{
    if (!b || !slots || !drafts || !in || !in->q || !in->k || !in->v || !in->gate || !in->beta || !out)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "verify: batch, slots, drafts, out and every input array must be given");
    rssm_pool *p = b->pool;
    const rssm_named_address host[] = {{"slots", slots},   {"drafts", drafts},     {"in->q", in->q},
                                       {"in->k", in->k},   {"in->v", in->v},       {"in->gate", in->gate},
                                       {"in->beta", in->beta}, {"out", out}};
    rssm_status st = rssm_backend_check_host_memory(p->backend, "verify", host, sizeof host / sizeof host[0], err);
    if (st != RSSM_OK)
        return st;
    const uint32_t cap = p->layout.ring_cap;
    if (cap == 0)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              "verify: the model has no ring (replay off, or L = 1) to hold draft tokens");
    if (rows == 0 || rows > b->max_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "verify: rows = %u: must be in 1..%u", rows,
                              b->max_rows);
    st = rssm_batch_check_gate_params(b, "verify", err);
    if (st != RSSM_OK)
        return st;
    const uint32_t most = cap < RSSM_MAX_DRAFT ? cap : RSSM_MAX_DRAFT, mark = rssm_pool_marks_begin(p);
    *t_max = 0;
    for (uint32_t r = 0; r < rows; r++) {
        if ((st = rssm_pool_check_row_slot(p, mark, slots[r], 0, "verify", err)) != RSSM_OK)
            return st;
        if (drafts[r] == 0 || drafts[r] > most)
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "verify: row %u has %u draft tokens: must be in 1..%u (L - 1, at most "
                                  "RSSM_MAX_DRAFT)",
                                  r, drafts[r], most);
        if (drafts[r] > *t_max)
            *t_max = drafts[r];
    }
    return RSSM_OK;
}

/* Runs window token t of the rows that have one (and, with `only`, whose
 * only[r] is set). A row whose entry its ring dtype cannot hold runs again
 * as a flush, after its bytes are kept for an accept that stops before it
 * (docs/design.md §2, §9). */
static rssm_status run_token(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint32_t *drafts,
                             const uint8_t *only, uint32_t t, rssm_error *err)
{
    rssm_pool *p = b->pool;
    rssm_backend *be = p->backend;
    uint32_t active = 0;
    for (uint32_t r = 0; r < rows; r++) {
        const rssm_verify_state *v = &p->verify[slots[r]];
        if (drafts[r] > t && (!only || only[r]))
            b->header[active++] =
                (rssm_row_header){.slot = slots[r], .write_pos = token_pos(v, v->cuts, t), .force = 0, .io = r};
    }
    rssm_status st = be->ops->batch_run(be->ctx, b->dev, active, b->header, b->overflow, err);
    if (st != RSSM_OK)
        return st;
    b->last_seconds += be->ops->batch_last_run_seconds(be->ctx, b->dev);
    uint32_t again = 0;
    for (uint32_t i = 0; i < active; i++) {
        if (!b->overflow[i])
            continue;
        const uint32_t s = b->header[i].slot;
        rssm_verify_state *v = &p->verify[s];
        uint8_t *bytes = malloc(p->layout.slot_bytes);
        if (!bytes)
            return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "verify: out of host memory");
        if ((st = rssm_pool_slot_read(p, s, bytes, err)) != RSSM_OK) {
            free(bytes);
            return st;
        }
        v->before_cut[v->cuts] = bytes;
        v->cut_at[v->cuts++] = t;
        b->rerun_header[again] = b->header[i];
        b->rerun_header[again++].force = 1;
    }
    if (again == 0)
        return RSSM_OK;
    if ((st = be->ops->batch_run(be->ctx, b->dev, again, b->rerun_header, b->overflow, err)) != RSSM_OK)
        return st;
    b->last_seconds += be->ops->batch_last_run_seconds(be->ctx, b->dev);
    for (uint32_t i = 0; i < again; i++)
        if (b->overflow[i]) /* a flush appends nothing: this would be a kernel bug */
            return rssm_set_error(err, RSSM_ERR_DEVICE, "verify: slot %u overflowed its ring in a flush",
                                  b->rerun_header[i].slot);
    return RSSM_OK;
}

/* Puts a failed window's slots back as they were before it: the
 * checkpoint from before any cut (the tentative entries past write_pos
 * are never read). */
static void undo(rssm_pool *p, uint32_t rows, const uint32_t *slots)
{
    for (uint32_t r = 0; r < rows; r++) {
        rssm_verify_state *v = &p->verify[slots[r]];
        if (v->cuts > 0)
            rssm_pool_slot_write(p, slots[r], v->before_cut[0], NULL);
        rssm_pool_verify_clear(p, slots[r]);
    }
}

/* Token t's block of the token-major step arrays. */
static rssm_step_inputs token_inputs(const rssm_step_inputs *in, const token_bytes *tb, uint32_t t)
{
    return (rssm_step_inputs){
        .q = (const uint8_t *)in->q + t * tb->q,
        .k = (const uint8_t *)in->k + t * tb->k,
        .v = (const uint8_t *)in->v + t * tb->v,
        .gate = (const float *)(const void *)((const uint8_t *)in->gate + t * tb->gate),
        .beta = (const float *)(const void *)((const uint8_t *)in->beta + t * tb->beta),
    };
}

/* Tokens first .. t_max - 1 of a window as one launch each: of every row,
 * or (start) of the rows from their start[r] on, the others' outputs left
 * as they are. */
static rssm_status tokens_from(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint32_t *drafts,
                               const uint32_t *start, uint32_t first, uint32_t t_max, const rssm_step_inputs *in,
                               void *out, rssm_error *err)
{
    rssm_backend *be = b->pool->backend;
    const token_bytes tb = token_bytes_of(b, rows);
    const size_t row_out = tb.out / b->params.layers / rows;
    uint8_t *only = start ? malloc(rows) : NULL, *all = start ? malloc(tb.out) : NULL;
    rssm_status st = !start || (only && all) ? RSSM_OK
                                             : rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "verify: out of host memory");
    for (uint32_t t = first; t < t_max && st == RSSM_OK; t++) {
        const rssm_step_inputs token = token_inputs(in, &tb, t);
        uint8_t *o = (uint8_t *)out + t * tb.out;
        for (uint32_t r = 0; start && r < rows; r++)
            only[r] = t >= start[r] && t < drafts[r];
        if ((st = be->ops->batch_upload(be->ctx, b->dev, rows, &token, err)) != RSSM_OK ||
            (st = run_token(b, rows, slots, drafts, only, t, err)) != RSSM_OK ||
            (st = be->ops->batch_download(be->ctx, b->dev, rows, start ? all : o, err)) != RSSM_OK)
            break;
        for (uint32_t l = 0; start && l < b->params.layers; l++)
            for (uint32_t r = 0; r < rows; r++)
                if (only[r])
                    memcpy(o + ((size_t)l * rows + r) * row_out, all + ((size_t)l * rows + r) * row_out, row_out);
    }
    free(only);
    free(all);
    return st;
}

/* The backend's window (batch_verify): every row's tokens in one go. A row
 * whose entry overflowed its ring dtype left its later tokens undone; they
 * run one launch each, from that token on, which cuts the window there. */
static rssm_status window_at_once(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint32_t *drafts,
                                  uint32_t t_max, const rssm_step_inputs *in, void *out, rssm_error *err)
{
    rssm_pool *p = b->pool;
    rssm_backend *be = p->backend;
    for (uint32_t r = 0; r < rows; r++)
        b->header[r] = (rssm_row_header){.slot = slots[r], .write_pos = p->verify[slots[r]].base, .force = 0, .io = r};
    uint32_t *start = malloc(rows * sizeof *start);
    if (!start)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "verify: out of host memory");
    rssm_status st = be->ops->batch_verify(be->ctx, b->dev, rows, b->header, drafts, t_max, in, out, start, err);
    if (st == RSSM_OK) {
        b->last_seconds += be->ops->batch_last_run_seconds(be->ctx, b->dev);
        uint32_t first = UINT32_MAX;
        for (uint32_t r = 0; r < rows; r++)
            first = start[r] < first ? start[r] : first;
        if (first < t_max)
            st = tokens_from(b, rows, slots, drafts, start, first, t_max, in, out, err);
    }
    free(start);
    return st;
}

/* Folds the rings of the rows without room for their window, on the
 * device where the gates allow it: each such row runs a forced flush of a
 * token that changes nothing (q, k, v, g and beta 0: its decay is exactly
 * 1 and its delta 0, as rssm_layer_materialise's fold), which leaves
 * exactly the fold in the checkpoint, at the cost of one flush. With raw
 * gates a zero input is not g = 0: those rows fold on the host
 * (rssm_pool_materialise). */
static rssm_status fold_full_rings(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint32_t *drafts,
                                   rssm_error *err)
{
    rssm_pool *p = b->pool;
    rssm_backend *be = p->backend;
    const uint32_t cap = p->layout.ring_cap;
    uint32_t folds = 0;
    for (uint32_t r = 0; r < rows; r++)
        if (p->write_pos[slots[r]] + drafts[r] > cap)
            b->rerun_plan[folds++] = (rssm_row_plan){
                .slot = slots[r], .write_pos = p->write_pos[slots[r]], .force = 1, .is_flush = 1};
    if (folds == 0)
        return RSSM_OK;
    rssm_status st = RSSM_OK;
    if (p->model.gate_mode != RSSM_GATE_PRECOMPUTED) {
        for (uint32_t i = 0; i < folds && st == RSSM_OK; i++)
            st = rssm_pool_materialise(p, b->rerun_plan[i].slot, err);
        return st;
    }
    /* one zero block serves every step array: the largest (k is q's size,
     * beta no larger than the gate's) */
    rssm_io_sizes z;
    rssm_io_sizes_init(&z, &b->params, folds);
    size_t most = z.q > z.v ? z.q : z.v;
    most = z.gate > most ? z.gate : most;
    uint8_t *zeros = calloc(b->params.layers * most, 1);
    if (!zeros)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "verify: out of host memory");
    const rssm_step_inputs nothing = {zeros, zeros, zeros, (const float *)(const void *)zeros,
                                      (const float *)(const void *)zeros};
    for (uint32_t i = 0; i < folds; i++)
        b->rerun_header[i] = (rssm_row_header){
            .slot = b->rerun_plan[i].slot, .write_pos = b->rerun_plan[i].write_pos, .force = 1, .io = i};
    if ((st = be->ops->batch_upload(be->ctx, b->dev, folds, &nothing, err)) == RSSM_OK &&
        (st = be->ops->batch_run(be->ctx, b->dev, folds, b->rerun_header, NULL, err)) == RSSM_OK) {
        b->last_seconds += be->ops->batch_last_run_seconds(be->ctx, b->dev);
        st = rssm_pool_commit_planned(p, folds, b->rerun_plan, err);
    }
    free(zeros);
    return st;
}

static rssm_status verify_unlocked(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint32_t *drafts,
                                   const rssm_step_inputs *in, void *out, rssm_error *err)
{
    uint32_t t_max = 0;
    rssm_status st = check_verify(b, rows, slots, drafts, in, out, &t_max, err);
    if (st != RSSM_OK)
        return st;
    rssm_pool *p = b->pool;
    /* A verify leaves the batch's uploaded inputs and outputs its own (a
     * backend's window may not pass through them at all): the next run
     * needs an upload, a download a run (rssm.h). */
    b->uploaded_rows = b->run_rows = 0;
    b->last_seconds = 0.0;
    /* A ring without room for the window is folded first: the true state
     * stays, and the window starts an empty ring. */
    if ((st = fold_full_rings(b, rows, slots, drafts, err)) != RSSM_OK)
        return st;
    for (uint32_t r = 0; r < rows; r++) {
        rssm_verify_state *v = &p->verify[slots[r]]; /* cleared: no cuts yet */
        v->drafts = drafts[r];
        v->base = p->write_pos[slots[r]];
    }
    st = p->backend->ops->batch_verify ? window_at_once(b, rows, slots, drafts, t_max, in, out, err)
                                       : RSSM_ERR_UNSUPPORTED;
    if (st == RSSM_ERR_UNSUPPORTED) /* no window of the backend's own for these rows */
        st = tokens_from(b, rows, slots, drafts, NULL, 0, t_max, in, out, err);
    if (st != RSSM_OK) {
        undo(p, rows, slots);
        return st;
    }
    /* past a row's window its outputs are zero, whatever the launches left */
    const token_bytes tb = token_bytes_of(b, rows);
    const size_t row_out = tb.out / b->params.layers / rows;
    for (uint32_t t = 0; t < t_max; t++)
        for (uint32_t l = 0; l < b->params.layers; l++)
            for (uint32_t r = 0; r < rows; r++)
                if (drafts[r] <= t)
                    memset((uint8_t *)out + t * tb.out + ((size_t)l * rows + r) * row_out, 0, row_out);
    b->timed = 1;
    return rssm_clear_error(err);
}

/* What accepting k tokens of slot s's window does: which of its cuts are
 * accepted, the ring entries the image after them holds, and how many of
 * those a snapshot boundary among the accepted tokens folds. */
typedef struct accept_plan {
    uint32_t cuts;   /* accepted cuts: the image is the one before cut `cuts`, or the slot's own */
    uint32_t held;   /* valid ring entries in that image */
    uint32_t folded; /* of them, folded into the checkpoint */
} accept_plan;

static rssm_status plan_accept(const rssm_pool *p, uint32_t s, uint32_t k, uint64_t seq_len_after,
                               uint32_t interval, accept_plan *a, rssm_error *err)
{
    const rssm_verify_state *v = &p->verify[s];
    if (k > v->drafts)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "accept: slot %u: %u accepted of %u draft tokens", s,
                              k, v->drafts);
    if (seq_len_after < k)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "accept: slot %u: seq_len_after %llu counts fewer than its %u accepted tokens", s,
                              (unsigned long long)seq_len_after, k);
    a->cuts = 0;
    while (a->cuts < v->cuts && v->cut_at[a->cuts] < k)
        a->cuts++;
    a->held = token_pos(v, a->cuts, k);
    a->folded = 0;
    /* The last accepted token on a boundary: j tokens in, the state after
     * them is the checkpoint a snapshot there must see. */
    const uint64_t before = seq_len_after - k;
    const uint64_t last = interval ? seq_len_after - seq_len_after % interval : 0;
    if (interval == 0 || last <= before)
        return RSSM_OK;
    const uint32_t j = (uint32_t)(last - before);
    if (a->cuts > 0 && j <= v->cut_at[a->cuts - 1])
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED,
                              "accept: slot %u: the snapshot boundary after draft token %u precedes token %u, whose "
                              "ring entry its dtype could not hold; accept at most %u tokens here",
                              s, j, v->cut_at[a->cuts - 1] + 1, v->cut_at[a->cuts - 1]);
    a->folded = token_pos(v, a->cuts, j);
    return RSSM_OK;
}

static rssm_status accept_unlocked(rssm_pool *p, uint32_t rows, const uint32_t *slots, const uint32_t *accepted,
                                   const uint64_t *seq_len_after, uint32_t interval, rssm_error *err)
{
    if (!p || !slots || !accepted || !seq_len_after)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "accept: pool, slots, accepted and seq_len_after must not be NULL");
    if (rows == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "accept: rows must be > 0");
    const rssm_named_address host[] = {{"slots", slots}, {"accepted", accepted}, {"seq_len_after", seq_len_after}};
    rssm_status checked = rssm_backend_check_host_memory(p->backend, "accept", host, sizeof host / sizeof host[0], err);
    if (checked != RSSM_OK)
        return checked;
    const uint32_t mark = rssm_pool_marks_begin(p);
    int folds = 0;
    for (uint32_t r = 0; r < rows; r++) {
        const uint32_t s = slots[r];
        rssm_status st = rssm_pool_check_row_slot(p, mark, s, 1, "accept", err);
        if (st != RSSM_OK)
            return st;
        accept_plan a = {0, 0, 0};
        if ((st = plan_accept(p, s, accepted[r], seq_len_after[r], interval, &a, err)) != RSSM_OK)
            return st;
        folds |= a.folded > 0;
    }
    const rssm_model *m = &p->model;
    float *state = NULL;
    if (folds && !(state = malloc((size_t)m->layers * m->num_v_heads * m->head_v * m->head_k * sizeof *state)))
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "accept: out of host memory");
    rssm_status st = RSSM_OK;
    for (uint32_t r = 0; r < rows && st == RSSM_OK; r++) {
        const uint32_t s = slots[r];
        const rssm_verify_state *v = &p->verify[s];
        accept_plan a = {0, 0, 0}; /* checked above: it succeeds */
        plan_accept(p, s, accepted[r], seq_len_after[r], interval, &a, NULL);
        const uint8_t *image = a.cuts < v->cuts ? v->before_cut[a.cuts] : NULL;
        if (a.folded > 0) {
            if (image)
                memcpy(p->scratch, image, p->layout.slot_bytes);
            else
                st = rssm_pool_slot_read(p, s, p->scratch, err);
            if (st == RSSM_OK) {
                rssm_slot_fold_prefix(m, &p->layout, p->scratch, a.folded, a.held - a.folded, state);
                st = rssm_pool_slot_write(p, s, p->scratch, err);
            }
            /* a fold ends a ring cycle as a flush does */
            p->cycle_len[s] = rssm_effective_ring_len(m);
        } else if (image) {
            st = rssm_pool_slot_write(p, s, image, err);
        }
        if (st != RSSM_OK)
            break;
        p->write_pos[s] = a.held - a.folded;
        rssm_pool_verify_clear(p, s);
    }
    free(state);
    return st == RSSM_OK ? rssm_clear_error(err) : st;
}

rssm_status rssm_batch_verify(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint32_t *drafts,
                              const rssm_step_inputs *in, void *out, rssm_error *err)
{
    RSSM_POOL_LOCKED(b ? b->pool : NULL, verify_unlocked(b, rows, slots, drafts, in, out, err));
}

rssm_status rssm_pool_accept(rssm_pool *p, uint32_t rows, const uint32_t *slots, const uint32_t *accepted,
                             const uint64_t *seq_len_after, uint32_t snapshot_interval, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, accept_unlocked(p, rows, slots, accepted, seq_len_after, snapshot_interval, err));
}
