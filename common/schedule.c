/* The flush scheduler (docs/design.md §2). write_pos is per slot and advances once
 * per forward step for all layers together; it is never derived from the
 * sequence length, which includes the prefill. */
#include "objects.h"
#include "error.h"

#include <string.h>

/* Starts a check of one step's rows: a new mark (objects.h), so no slot is
 * marked yet. */
uint32_t rssm_pool_marks_begin(rssm_pool *p)
{
    if (++p->mark == 0) { /* wrapped: old marks could match again */
        memset(p->slot_mark, 0, (size_t)p->capacity * sizeof *p->slot_mark);
        p->mark = 1;
    }
    return p->mark;
}

rssm_status rssm_pool_check_row_slot(rssm_pool *p, uint32_t mark, uint32_t slot, int accepting, const char *who,
                                     rssm_error *err)
{
    rssm_status st = accepting ? rssm_pool_check_allocated(p, slot, err) : rssm_pool_check_slot(p, slot, err);
    if (st != RSSM_OK)
        return st;
    if (accepting && p->verify[slot].drafts == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: slot %u is not mid-verify", who, slot);
    if (p->slot_mark[slot] == mark)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: slot %u appears twice in the batch", who, slot);
    p->slot_mark[slot] = mark;
    return RSSM_OK;
}

static rssm_status pool_plan_unlocked(rssm_pool *p, uint32_t rows, const uint32_t *slots,
                           const uint64_t *seq_len_after, uint32_t snapshot_interval, rssm_row_plan *plan,
                           rssm_error *err)
{
    if (!p || !slots || !seq_len_after || !plan)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "plan: pool, slots, seq_len_after and plan must not be NULL");
    if (rows == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "plan: rows must be > 0");
    const rssm_named_address host[] = {{"slots", slots}, {"seq_len_after", seq_len_after}, {"plan", plan}};
    rssm_status st = rssm_backend_check_host_memory(p->backend, "plan", host, sizeof host / sizeof host[0], err);
    if (st != RSSM_OK)
        return st;
    const uint32_t L = rssm_effective_ring_len(&p->model), mark = rssm_pool_marks_begin(p);
    for (uint32_t r = 0; r < rows && st == RSSM_OK; r++) {
        const uint32_t s = slots[r];
        if ((st = rssm_pool_check_row_slot(p, mark, s, 0, "plan", err)) != RSSM_OK)
            break;
        if (seq_len_after[r] == 0) {
            st = rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                "plan: row %u has seq_len_after 0; it counts the token being decoded", r);
            break;
        }
        const uint32_t n = p->write_pos[s];
        const int snapshot = snapshot_interval > 0 && seq_len_after[r] % snapshot_interval == 0;
        /* A staggered slot's first cycle ends early; the device only sees
         * it as one more forced flush. */
        const int short_cycle = p->cycle_len[s] < L && n + 1 >= p->cycle_len[s];
        plan[r].slot = s;
        plan[r].write_pos = n;
        plan[r].force = (uint32_t)(snapshot || short_cycle);
        plan[r].is_flush = (uint32_t)RSSM_ROW_FLUSHES(n, L - 1, plan[r].force);
    }
    return st == RSSM_OK ? rssm_clear_error(err) : st;
}

rssm_status rssm_plan_check(rssm_pool *p, uint32_t rows, const rssm_row_plan *plan, int committing,
                            const char *who, rssm_error *err)
{
    const uint32_t L = rssm_effective_ring_len(&p->model), mark = rssm_pool_marks_begin(p);
    rssm_status st = RSSM_OK;
    for (uint32_t r = 0; r < rows && st == RSSM_OK; r++) {
        const rssm_row_plan *row = &plan[r];
        if ((st = rssm_pool_check_row_slot(p, mark, row->slot, 0, who, err)) != RSSM_OK)
            break;
        if (committing && row->write_pos != p->write_pos[row->slot])
            st = rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                "%s: row %u was planned at write_pos %u but slot %u is at %u", who, r,
                                row->write_pos, row->slot, p->write_pos[row->slot]);
        else if (row->write_pos >= L)
            st = rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: row %u has write_pos %u; the ring holds %u steps",
                                who, r, row->write_pos, L);
        else if (row->is_flush != (uint32_t)RSSM_ROW_FLUSHES(row->write_pos, L - 1, row->force))
            st = rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                "%s: row %u has is_flush %u, but write_pos %u and force %u say %u", who, r,
                                row->is_flush, row->write_pos, row->force,
                                (uint32_t)RSSM_ROW_FLUSHES(row->write_pos, L - 1, row->force));
    }
    return st;
}

/* Each row's write_pos after its step: 0 after a flush, else one more. */
static void advance(rssm_pool *p, uint32_t rows, const rssm_row_plan *plan)
{
    const uint32_t L = rssm_effective_ring_len(&p->model);
    for (uint32_t r = 0; r < rows; r++) {
        const uint32_t s = plan[r].slot;
        if (plan[r].is_flush) {
            p->write_pos[s] = 0;
            p->cycle_len[s] = L;
        } else {
            p->write_pos[s]++;
        }
    }
}

static rssm_status pool_commit_unlocked(rssm_pool *p, uint32_t rows, const rssm_row_plan *plan, rssm_error *err)
{
    if (!p || !plan)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "commit: pool and plan must not be NULL");
    if (rows == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "commit: rows must be > 0");
    /* Check every row before changing anything, so a bad plan leaves the
     * pool as it was. */
    const rssm_named_address host[] = {{"plan", plan}};
    rssm_status st = rssm_backend_check_host_memory(p->backend, "commit", host, 1, err);
    if (st != RSSM_OK || (st = rssm_plan_check(p, rows, plan, 1, "commit", err)) != RSSM_OK)
        return st;
    advance(p, rows, plan);
    return rssm_clear_error(err);
}

/* A plan rssm_pool_plan made, committed after the device ran it: the rows
 * were checked when planned, so only what can have changed since is (each
 * slot still at the planned write_pos, which another batch on the same
 * slots would have moved). */
static rssm_status pool_commit_planned_unlocked(rssm_pool *p, uint32_t rows, const rssm_row_plan *plan,
                                                rssm_error *err)
{
    for (uint32_t r = 0; r < rows; r++)
        if (plan[r].write_pos != p->write_pos[plan[r].slot])
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "commit: slot %u moved from write_pos %u to %u while its step ran", plan[r].slot,
                                  plan[r].write_pos, p->write_pos[plan[r].slot]);
    advance(p, rows, plan);
    return rssm_clear_error(err);
}

/* The public entry points: each holds the pool lock (objects.h). */

rssm_status rssm_pool_plan(const rssm_pool *p, uint32_t rows, const uint32_t *slots,
                           const uint64_t *seq_len_after, uint32_t snapshot_interval, rssm_row_plan *plan,
                           rssm_error *err)
{
    /* Const for the caller: planning changes no committed state, only the
     * checks' scratch (objects.h), under the lock. */
    RSSM_POOL_LOCKED((rssm_pool *)p, pool_plan_unlocked((rssm_pool *)p, rows, slots, seq_len_after, snapshot_interval,
                                                        plan, err));
}

rssm_status rssm_pool_commit(rssm_pool *p, uint32_t rows, const rssm_row_plan *plan, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_commit_unlocked(p, rows, plan, err));
}

rssm_status rssm_pool_commit_planned(rssm_pool *p, uint32_t rows, const rssm_row_plan *plan, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_commit_planned_unlocked(p, rows, plan, err));
}
