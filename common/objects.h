/* The public handles of rssm.h: what each owns on the host side. Backends
 * never see these; they receive only their own opaque pointers. */
#ifndef RSSM_OBJECTS_H
#define RSSM_OBJECTS_H

#include "backend.h"

#include <pthread.h>
#include <stdatomic.h>

/* Lifetimes: each handle counts its users, the caller's handle being one;
 * a pool holds a reference to its backend and a batch one to its pool, so
 * the caller may destroy them in any order and the device objects go when
 * their last user does. The counts are atomic because distinct objects
 * (two pools of one backend, say) may be created and destroyed on distinct
 * threads. */
struct rssm_backend {
    const rssm_backend_ops *ops;
    void *ctx;
    char name[64];
    atomic_uint refs;
};

/* A slot between rssm_batch_verify and rssm_pool_accept (docs/design.md
 * §9): its draft tokens' ring entries are tentative, past write_pos. */
typedef struct rssm_verify_state {
    uint32_t drafts;    /* T; 0: the slot is not mid-verify */
    uint32_t base;      /* write_pos when the window ran (after any fold) */
    /* Tokens whose ring entry its dtype could not hold, in order: each ran
     * again as a flush, so the checkpoint holds the window up to the last
     * of them and the tokens after it start the ring afresh.
     * before_cut[i] is the slot's bytes from just before cut i's flush: an
     * accept that stops short of that token restores them. */
    uint32_t cuts;
    uint32_t cut_at[RSSM_MAX_DRAFT];
    uint8_t *before_cut[RSSM_MAX_DRAFT];
} rssm_verify_state;

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
    rssm_verify_state *verify; /* [capacity] */
    /* [capacity] the step checks' scratch (schedule.c): slot s is in the
     * rows being checked when slot_mark[s] == mark, which each check
     * advances, so a check allocates nothing and clears nothing. */
    uint32_t *slot_mark;
    uint32_t mark;
    void *dev;
    atomic_uint refs;
    pthread_mutex_t lock;   /* recursive: held by every public call on the
                               pool or one of its batches */
};

struct rssm_batch {
    rssm_pool *pool;
    uint32_t max_rows;
    rssm_kernel_params params;
    rssm_row_plan *plan;          /* [max_rows] */
    rssm_row_header *header;      /* [max_rows] */
    uint32_t *overflow;           /* [max_rows], from the backend's run */
    rssm_row_plan *rerun_plan;    /* [max_rows]: rows re-run as a flush */
    rssm_row_header *rerun_header;/* [max_rows] */
    double last_seconds;          /* device seconds of the last step, re-run included */
    uint8_t *gate_params_set;     /* [layers] */
    uint32_t uploaded_rows;       /* 0: nothing uploaded yet */
    uint32_t run_rows;            /* rows of the last successful run (0 after a verify) */
    int timed;                    /* last_seconds holds a run's or a verify's device time */
    void *dev;
};

struct rssm_layer {
    rssm_backend *backend;
    rssm_layer_desc desc;
    rssm_kernel_params params;  /* one layer; max_rows the layer's */
    rssm_layer_io shape;        /* the strides; pointers NULL */
    /* The addresses found on the backend's device so far, each asked about
     * once (device.h); NULL on a backend without `place` (backend.h). */
    rssm_seen *seen;
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

/* Takes and drops a reference (see the lifetimes above); the last drop
 * destroys the object. */
void rssm_backend_retain(rssm_backend *b);
void rssm_backend_release(rssm_backend *b);
void rssm_pool_retain(struct rssm_pool *p);
void rssm_pool_release(struct rssm_pool *p);

/* The caller's memory against what backend `b` takes (backend.h, place),
 * each error naming the argument and `who` the call: memory of the
 * backend's device (or managed memory) for the per-layer entry, asking
 * only about addresses not in `seen`; host memory for the pool and batch
 * calls. RSSM_OK on a backend without `place`. */
rssm_status rssm_backend_check_device_memory(const rssm_backend *b, rssm_seen *seen, const char *who,
                                             const rssm_named_address *t, size_t n, rssm_error *err);
rssm_status rssm_backend_check_host_memory(const rssm_backend *b, const char *who, const rssm_named_address *t,
                                           size_t n, rssm_error *err);

/* Threads: every public call on a pool, or on a batch of it, runs under
 * the pool's lock, so distinct threads may use one pool (distinct slots or
 * not) and its batches; they take turns, and distinct pools never wait on
 * each other. The lock is recursive, as public calls use one another
 * (copy materialises its source). NULL is let through, for the call's own
 * argument check to report. Calls that take a const pool cast the const
 * away for the lock alone: locking is not a change to the pool. */
static inline void rssm_pool_lock(struct rssm_pool *p)
{
    if (p)
        pthread_mutex_lock(&p->lock);
}
static inline void rssm_pool_unlock(struct rssm_pool *p)
{
    if (p)
        pthread_mutex_unlock(&p->lock);
}
#define RSSM_POOL_LOCKED(pool, call)                                                                \
    do {                                                                                            \
        struct rssm_pool *lock_ = (pool);                                                           \
        rssm_pool_lock(lock_);                                                                      \
        rssm_status st_ = (call);                                                                   \
        rssm_pool_unlock(lock_);                                                                    \
        return st_;                                                                                 \
    } while (0)

/* Shared argument checks; each sets err and returns its status. A slot
 * must be allocated; check_slot also refuses one that is mid-verify, for
 * every operation but accept, free and the write_pos query. */
rssm_status rssm_pool_check_allocated(const rssm_pool *p, uint32_t slot, rssm_error *err);
rssm_status rssm_pool_check_slot(const rssm_pool *p, uint32_t slot, rssm_error *err);
/* The backend's copy of a slot's whole block into or from `bytes`
 * (layout.slot_bytes; p->scratch for the pool's own host-side work). */
rssm_status rssm_pool_slot_read(rssm_pool *p, uint32_t slot, uint8_t *bytes, rssm_error *err);
rssm_status rssm_pool_slot_write(rssm_pool *p, uint32_t slot, const uint8_t *bytes, rssm_error *err);
/* Ends a slot's verify: frees what it held. */
void rssm_pool_verify_clear(rssm_pool *p, uint32_t slot);
/* Starts a check of one call's rows: slot s is among those checked so
 * far when p->slot_mark[s] equals the returned mark (schedule.c). */
uint32_t rssm_pool_marks_begin(rssm_pool *p);
/* One row of such a check: its slot allocated, not named twice (two rows
 * on one slot would both read its ring and race on its next entry), and
 * not mid-verify, or (accepting: rssm_pool_accept's rows) mid-verify. */
rssm_status rssm_pool_check_row_slot(rssm_pool *p, uint32_t mark, uint32_t slot, int accepting, const char *who,
                                     rssm_error *err);
/* A step's plan the device can run: distinct allocated slots, write_pos
 * inside the ring, is_flush as write_pos and force say, and (committing)
 * each write_pos the slot's own. `who` starts the message. */
rssm_status rssm_plan_check(rssm_pool *p, uint32_t rows, const rssm_row_plan *plan, int committing,
                            const char *who, rssm_error *err);
/* A batch of a RAW gate model has every layer's A_log and dt_bias
 * (rssm_batch_set_gate_params) before anything runs on it (batch.c). */
rssm_status rssm_batch_check_gate_params(const rssm_batch *b, const char *who, rssm_error *err);
/* rssm_pool_commit of rows of a plan rssm_pool_plan made (batch.c): the
 * rows' checks were the plan's; this one only sees that no slot moved
 * since. A step's rows are validated once. */
rssm_status rssm_pool_commit_planned(rssm_pool *p, uint32_t rows, const rssm_row_plan *plan, rssm_error *err);

/* Host-side slot work on one slot's raw bytes (common/slot_state.c). */
/* Fills state [layers][HV][V][K] with the true state: checkpoint plus the
 * first write_pos ring entries. */
void rssm_slot_fold(const rssm_model *m, const rssm_slot_layout *lay, const uint8_t *slot_bytes,
                    uint32_t write_pos, float *state);
/* Writes the checkpoint of every layer from state, rounding to the state
 * dtype; the ring bytes are zeroed. */
void rssm_slot_store(const rssm_model *m, const rssm_slot_layout *lay, uint8_t *slot_bytes,
                     const float *state);
/* 1 if the slot's bytes hold a state rssm can run from: a finite checkpoint
 * and, for the first write_pos ring entries, finite d and k and finite
 * log-decays <= 0. Otherwise 0, with what and where in `why`. */
int rssm_slot_validate(const rssm_model *m, const rssm_slot_layout *lay, const uint8_t *slot_bytes,
                       uint32_t write_pos, char *why, size_t why_size);
/* Folds the first `folded` ring entries into the checkpoint (the state
 * after them, rounded to the state dtype) and moves the `kept` entries
 * after them to the front of the ring: the slot then holds the same true
 * state with write_pos `kept` (docs/design.md §9). `state` is scratch for
 * [layers][HV][V][K] floats. */
void rssm_slot_fold_prefix(const rssm_model *m, const rssm_slot_layout *lay, uint8_t *slot_bytes, uint32_t folded,
                           uint32_t kept, float *state);
/* Zeroes the ring entries at and beyond write_pos, so exported bytes do not
 * depend on what uncommitted memory held. */
void rssm_slot_clear_uncommitted(const rssm_model *m, const rssm_slot_layout *lay,
                                 uint8_t *slot_bytes, uint32_t write_pos);

#endif
