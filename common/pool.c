/* The slot pool (docs/design.md §3): which slots are taken, each slot's ring cursor,
 * and the slot operations that work on raw bytes through the backend's
 * slot_read / slot_write, so they behave the same on every backend. */
#include "objects.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A slot whose ring was just emptied by something other than a step. */
static void reset_cursor(rssm_pool *p, uint32_t slot)
{
    p->write_pos[slot] = 0;
    p->cycle_len[slot] = rssm_pool_first_cycle_len(p, slot);
}

rssm_status rssm_pool_create(rssm_backend *b, const rssm_model *model, uint32_t slots,
                             rssm_flush_policy policy, rssm_pool **out, rssm_error *err)
{
    if (out)
        *out = NULL; /* whatever is refused, the caller is never left a stale handle */
    if (!b || !model || !out)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "pool: backend, model and out must not be NULL");
    if (slots == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "pool: slots must be > 0");
    if (policy != RSSM_FLUSH_ALIGNED && policy != RSSM_FLUSH_STAGGERED)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "pool: unknown flush policy %d", (int)policy);
    rssm_status st = rssm_backend_supports(b, model, err);
    if (st != RSSM_OK)
        return st;

    rssm_pool *p = calloc(1, sizeof *p);
    if (!p)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "pool: out of host memory");
    p->backend = b;
    rssm_backend_retain(b);
    atomic_init(&p->refs, 1u);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&p->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    p->model = *model;
    p->policy = policy;
    p->capacity = slots;
    p->free_count = slots;
    rssm_slot_layout_init(&p->layout, model);
    p->allocated = calloc(slots, 1);
    p->write_pos = calloc(slots, sizeof *p->write_pos);
    p->cycle_len = calloc(slots, sizeof *p->cycle_len);
    p->scratch = malloc(p->layout.slot_bytes);
    p->slot_mark = calloc(slots, sizeof *p->slot_mark);
    p->verify = calloc(slots, sizeof *p->verify);
    if (!p->allocated || !p->write_pos || !p->cycle_len || !p->scratch || !p->slot_mark || !p->verify) {
        rssm_pool_destroy(&p);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "pool: out of host memory for %u slots", slots);
    }
    st = b->ops->pool_create(b->ctx, &p->layout, slots, &p->dev, err);
    if (st != RSSM_OK) {
        p->dev = NULL;
        rssm_pool_destroy(&p);
        return st;
    }
    *out = p;
    return rssm_clear_error(err);
}

void rssm_pool_retain(rssm_pool *p) { atomic_fetch_add(&p->refs, 1u); }

void rssm_pool_release(rssm_pool *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1u) != 1u)
        return;
    if (p->dev)
        p->backend->ops->pool_destroy(p->backend->ctx, p->dev);
    rssm_backend_release(p->backend);
    pthread_mutex_destroy(&p->lock);
    free(p->allocated);
    free(p->write_pos);
    free(p->cycle_len);
    free(p->slot_mark);
    free(p->scratch);
    for (uint32_t s = 0; p->verify && s < p->capacity; s++)
        rssm_pool_verify_clear(p, s);
    free(p->verify);
    free(p);
}

void rssm_pool_destroy(rssm_pool **pp)
{
    if (!pp || !*pp)
        return;
    rssm_pool_release(*pp);
    *pp = NULL;
}

const rssm_model *rssm_pool_model(const rssm_pool *p) { return p ? &p->model : NULL; }
uint32_t rssm_pool_capacity(const rssm_pool *p) { return p ? p->capacity : 0; }
uint32_t rssm_pool_free_count(const rssm_pool *p) { return p ? p->free_count : 0; }

rssm_status rssm_pool_check_allocated(const rssm_pool *p, uint32_t slot, rssm_error *err)
{
    if (!p)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "pool must not be NULL");
    if (slot >= p->capacity)
        return rssm_set_error(err, RSSM_ERR_BAD_SLOT, "slot %u is out of range (pool of %u slots)", slot,
                              p->capacity);
    if (!p->allocated[slot])
        return rssm_set_error(err, RSSM_ERR_BAD_SLOT, "slot %u is not allocated", slot);
    return RSSM_OK;
}

rssm_status rssm_pool_check_slot(const rssm_pool *p, uint32_t slot, rssm_error *err)
{
    rssm_status st = rssm_pool_check_allocated(p, slot, err);
    if (st == RSSM_OK && p->verify[slot].drafts)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "slot %u is mid-verify (%u draft tokens): rssm_pool_accept first", slot,
                              p->verify[slot].drafts);
    return st;
}

void rssm_pool_verify_clear(rssm_pool *p, uint32_t slot)
{
    rssm_verify_state *v = &p->verify[slot];
    for (uint32_t i = 0; i < v->cuts; i++)
        free(v->before_cut[i]);
    /* the cuts' arrays mean nothing past `cuts`: clearing the counts alone
     * keeps an accept of a whole batch to one cache line per row */
    v->drafts = v->cuts = 0;
}

/* A backend sets *err only when it fails; these say OK in it when it does
 * not, as every call of the library does (a caller's uninitialised error
 * must not read as a failure). */
rssm_status rssm_pool_slot_read(rssm_pool *p, uint32_t slot, uint8_t *bytes, rssm_error *err)
{
    const rssm_status st = p->backend->ops->slot_read(p->backend->ctx, p->dev, slot, bytes, err);
    return st == RSSM_OK ? rssm_clear_error(err) : st;
}

rssm_status rssm_pool_slot_write(rssm_pool *p, uint32_t slot, const uint8_t *bytes, rssm_error *err)
{
    const rssm_status st = p->backend->ops->slot_write(p->backend->ctx, p->dev, slot, bytes, err);
    return st == RSSM_OK ? rssm_clear_error(err) : st;
}

static rssm_status pool_alloc_unlocked(rssm_pool *p, uint32_t *slot, rssm_error *err)
{
    if (!p || !slot)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "alloc: pool and slot must not be NULL");
    if (p->free_count == 0)
        return rssm_set_error(err, RSSM_ERR_POOL_FULL, "alloc: all %u slots are in use", p->capacity);
    uint32_t s = 0;
    while (p->allocated[s])
        s++;
    memset(p->scratch, 0, p->layout.slot_bytes);
    rssm_status st = rssm_pool_slot_write(p, s, p->scratch, err);
    if (st != RSSM_OK)
        return st;
    p->allocated[s] = 1;
    p->free_count--;
    reset_cursor(p, s);
    *slot = s;
    return rssm_clear_error(err);
}

static rssm_status pool_free_unlocked(rssm_pool *p, uint32_t slot, rssm_error *err)
{
    if (!p)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "free: pool must not be NULL");
    if (slot >= p->capacity)
        return rssm_set_error(err, RSSM_ERR_BAD_SLOT, "free: slot %u is out of range (pool of %u slots)", slot,
                              p->capacity);
    if (!p->allocated[slot])
        return rssm_set_error(err, RSSM_ERR_BAD_SLOT, "free: slot %u is not allocated (double free?)", slot);
    p->allocated[slot] = 0;
    p->write_pos[slot] = 0;
    rssm_pool_verify_clear(p, slot);
    p->free_count++;
    return rssm_clear_error(err);
}

static rssm_status pool_write_pos_unlocked(const rssm_pool *p, uint32_t slot, uint32_t *write_pos, rssm_error *err)
{
    if (!write_pos)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "write_pos must not be NULL");
    rssm_status st = rssm_pool_check_allocated(p, slot, err);
    if (st != RSSM_OK)
        return st;
    *write_pos = p->write_pos[slot];
    return rssm_clear_error(err);
}

/* Folds the ring of `slot` (whose bytes are in scratch) into a float state
 * and stores it back as a checkpoint; the caller writes scratch back. */
static rssm_status fold_scratch(rssm_pool *p, uint32_t slot, rssm_error *err)
{
    const size_t elems = (size_t)p->model.layers * p->model.num_v_heads * p->model.head_v * p->model.head_k;
    float *state = malloc(elems * sizeof *state);
    if (!state)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "materialise: out of host memory");
    rssm_slot_fold(&p->model, &p->layout, p->scratch, p->write_pos[slot], state);
    rssm_slot_store(&p->model, &p->layout, p->scratch, state);
    free(state);
    return RSSM_OK;
}

static rssm_status pool_materialise_unlocked(rssm_pool *p, uint32_t slot, rssm_error *err)
{
    rssm_status st = rssm_pool_check_slot(p, slot, err);
    if (st != RSSM_OK)
        return st;
    if (p->write_pos[slot] == 0)
        return rssm_clear_error(err);
    if ((st = rssm_pool_slot_read(p, slot, p->scratch, err)) != RSSM_OK ||
        (st = fold_scratch(p, slot, err)) != RSSM_OK ||
        (st = rssm_pool_slot_write(p, slot, p->scratch, err)) != RSSM_OK)
        return st;
    reset_cursor(p, slot);
    return rssm_clear_error(err);
}

static rssm_status pool_copy_unlocked(rssm_pool *p, uint32_t src, uint32_t dst, rssm_error *err)
{
    rssm_status st;
    if ((st = rssm_pool_check_slot(p, src, err)) != RSSM_OK || (st = rssm_pool_check_slot(p, dst, err)) != RSSM_OK)
        return st;
    if (src == dst)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "copy: source and destination are both slot %u", src);
    if ((st = rssm_pool_materialise(p, src, err)) != RSSM_OK ||
        (st = rssm_pool_slot_read(p, src, p->scratch, err)) != RSSM_OK ||
        (st = rssm_pool_slot_write(p, dst, p->scratch, err)) != RSSM_OK)
        return st;
    reset_cursor(p, dst);
    return rssm_clear_error(err);
}

static rssm_status pool_read_state_unlocked(rssm_pool *p, uint32_t slot, float *state, rssm_error *err)
{
    if (!state)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "read_state: state must not be NULL");
    rssm_status st = rssm_pool_check_slot(p, slot, err);
    const rssm_named_address host[] = {{"state", state}};
    if (st != RSSM_OK || (st = rssm_backend_check_host_memory(p->backend, "read_state", host, 1, err)) != RSSM_OK ||
        (st = rssm_pool_slot_read(p, slot, p->scratch, err)) != RSSM_OK)
        return st;
    rssm_slot_fold(&p->model, &p->layout, p->scratch, p->write_pos[slot], state);
    return rssm_clear_error(err);
}

static rssm_status pool_write_state_unlocked(rssm_pool *p, uint32_t slot, const float *state, rssm_error *err)
{
    if (!state)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "write_state: state must not be NULL");
    rssm_status st = rssm_pool_check_slot(p, slot, err);
    const rssm_named_address host[] = {{"state", state}};
    if (st != RSSM_OK || (st = rssm_backend_check_host_memory(p->backend, "write_state", host, 1, err)) != RSSM_OK)
        return st;
    /* As import refuses non-finite bytes: a state is set once per prefill,
     * so scanning it costs nothing next to what produced it. */
    const rssm_model *m = &p->model;
    const size_t per_head = (size_t)m->head_v * m->head_k, n = (size_t)m->layers * m->num_v_heads * per_head;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(state[i])) {
            const size_t h = i / per_head, r = i % per_head;
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "write_state: state[layer %zu][head %zu][%zu][%zu] = %g is not finite; "
                                  "the slot is unchanged",
                                  h / m->num_v_heads, h % m->num_v_heads, r / m->head_k, r % m->head_k,
                                  (double)state[i]);
        }
    rssm_slot_store(&p->model, &p->layout, p->scratch, state);
    if ((st = rssm_pool_slot_write(p, slot, p->scratch, err)) != RSSM_OK)
        return st;
    reset_cursor(p, slot);
    return rssm_clear_error(err);
}

/* The public entry points: each holds the pool lock (objects.h). */

static rssm_status pool_inplace_seconds_unlocked(rssm_pool *p, uint32_t reps, double *seconds, rssm_error *err)
{
    if (!p || !seconds)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "inplace: pool and seconds must not be NULL");
    if (reps == 0 || reps > 1000)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "inplace: reps = %u: must be in 1..1000", reps);
    const rssm_backend *be = p->backend;
    if (!be->ops->pool_inplace_seconds)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "inplace: the %s backend has no in-place pass", be->name);
    rssm_status st = be->ops->pool_inplace_seconds(be->ctx, p->dev, (size_t)p->capacity * p->layout.slot_bytes,
                                                   reps, 0u, seconds, err);
    return st == RSSM_OK ? rssm_clear_error(err) : st;
}

rssm_status rssm_pool_inplace_seconds(rssm_pool *p, uint32_t reps, double *seconds, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_inplace_seconds_unlocked(p, reps, seconds, err));
}

rssm_status rssm_pool_alloc(rssm_pool *p, uint32_t *slot, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_alloc_unlocked(p, slot, err));
}

rssm_status rssm_pool_free(rssm_pool *p, uint32_t slot, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_free_unlocked(p, slot, err));
}

rssm_status rssm_pool_write_pos(const rssm_pool *p, uint32_t slot, uint32_t *write_pos, rssm_error *err)
{
    RSSM_POOL_LOCKED((rssm_pool *)p, pool_write_pos_unlocked(p, slot, write_pos, err));
}

rssm_status rssm_pool_materialise(rssm_pool *p, uint32_t slot, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_materialise_unlocked(p, slot, err));
}

rssm_status rssm_pool_copy(rssm_pool *p, uint32_t src, uint32_t dst, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_copy_unlocked(p, src, dst, err));
}

rssm_status rssm_pool_read_state(rssm_pool *p, uint32_t slot, float *state, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_read_state_unlocked(p, slot, state, err));
}

rssm_status rssm_pool_write_state(rssm_pool *p, uint32_t slot, const float *state, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_write_state_unlocked(p, slot, state, err));
}
