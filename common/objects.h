/* The public handles of rssm.h: what each owns on the host side. Backends
 * never see these; they receive only their own opaque pointers. */
#ifndef RSSM_OBJECTS_H
#define RSSM_OBJECTS_H

#include "backend.h"

struct rssm_backend {
    const rssm_backend_ops *ops;
    void *ctx;
    char name[64];
};

struct rssm_pool {
    rssm_backend *backend;
    rssm_model model;
    rssm_slot_layout layout;
    rssm_flush_policy policy;
    uint32_t capacity;
    uint32_t free_count;
    uint8_t *allocated;     /* [capacity] 0/1 */
    uint32_t *write_pos;    /* [capacity] committed ring entries */
    uint32_t *cycle_len;    /* [capacity] steps in the current ring cycle (L, or
                               shorter for a staggered slot's first cycle) */
    uint8_t *scratch;       /* one slot's bytes, for host-side slot work */
    void *dev;
};

struct rssm_batch {
    rssm_pool *pool;
    uint32_t max_rows;
    rssm_kernel_params params;
    rssm_row_plan *plan;          /* [max_rows] */
    rssm_row_header *header;      /* [max_rows] */
    uint8_t *gate_params_set;     /* [layers] */
    uint32_t uploaded_rows;       /* 0: nothing uploaded yet */
    uint32_t run_rows;            /* rows of the last successful run */
    void *dev;
};

/* Ring length the scheduler works with: L, or 1 when replay is off (every
 * step then writes the state, as the packed decode does). */
static inline uint32_t rssm_effective_ring_len(const rssm_model *m)
{
    return m->replay ? m->ring_len : 1u;
}

/* Steps in the first ring cycle of a slot whose ring was just emptied
 * outside a step (alloc, copy, import, materialise): L, or L - slot % L
 * under the staggered policy. */
static inline uint32_t rssm_pool_first_cycle_len(const struct rssm_pool *p, uint32_t slot)
{
    const uint32_t L = rssm_effective_ring_len(&p->model);
    return p->policy == RSSM_FLUSH_STAGGERED ? L - slot % L : L;
}

/* Shared argument checks; each sets err and returns its status. */
rssm_status rssm_pool_check_slot(const rssm_pool *p, uint32_t slot, rssm_error *err);

/* Host-side slot work on one slot's raw bytes (common/slot_state.c). */
/* Fills state [layers][HV][V][K] with the true state: checkpoint plus the
 * first write_pos ring entries. */
void rssm_slot_fold(const rssm_model *m, const rssm_slot_layout *lay, const uint8_t *slot_bytes,
                    uint32_t write_pos, float *state);
/* Writes the checkpoint of every layer from state, rounding to the state
 * dtype; the ring bytes are zeroed. */
void rssm_slot_store(const rssm_model *m, const rssm_slot_layout *lay, uint8_t *slot_bytes,
                     const float *state);
/* Zeroes the ring entries at and beyond write_pos, so exported bytes do not
 * depend on what uncommitted memory held. */
void rssm_slot_clear_uncommitted(const rssm_model *m, const rssm_slot_layout *lay,
                                 uint8_t *slot_bytes, uint32_t write_pos);

#endif
