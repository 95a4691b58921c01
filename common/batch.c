/* rssm_batch: the per-capacity buffers and recorded program, and the step
 * that ties the scheduler to the backend. */
#include "objects.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>

rssm_status rssm_batch_create(rssm_pool *p, uint32_t max_rows, rssm_batch **out, rssm_error *err)
{
    if (out)
        *out = NULL; /* whatever is refused, the caller is never left a stale handle */
    if (!p || !out)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "batch: pool and out must not be NULL");
    if (max_rows == 0 || max_rows > 65536)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "batch: max_rows = %u: must be in 1..65536", max_rows);
    rssm_batch *b = calloc(1, sizeof *b);
    if (!b)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "batch: out of host memory");
    b->pool = p;
    rssm_pool_retain(p);
    b->max_rows = max_rows;
    b->plan = calloc(max_rows, sizeof *b->plan);
    b->header = calloc(max_rows, sizeof *b->header);
    b->overflow = calloc(max_rows, sizeof *b->overflow);
    b->rerun_plan = calloc(max_rows, sizeof *b->rerun_plan);
    b->rerun_header = calloc(max_rows, sizeof *b->rerun_header);
    b->gate_params_set = calloc(p->model.layers, 1);
    if (!b->plan || !b->header || !b->overflow || !b->rerun_plan || !b->rerun_header || !b->gate_params_set) {
        rssm_batch_destroy(&b);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "batch: out of host memory");
    }
    rssm_kernel_params_init(&b->params, &p->model, &p->layout, max_rows);
    rssm_backend *be = p->backend;
    rssm_status st = be->ops->batch_create(be->ctx, p->dev, &b->params, &b->dev, err);
    if (st != RSSM_OK) {
        b->dev = NULL;
        rssm_batch_destroy(&b);
        return st;
    }
    *out = b;
    return rssm_clear_error(err);
}

void rssm_batch_destroy(rssm_batch **bp)
{
    if (!bp || !*bp)
        return;
    rssm_batch *b = *bp;
    if (b->dev)
        b->pool->backend->ops->batch_destroy(b->pool->backend->ctx, b->dev);
    rssm_pool_release(b->pool);
    free(b->plan);
    free(b->header);
    free(b->overflow);
    free(b->rerun_plan);
    free(b->rerun_header);
    free(b->gate_params_set);
    free(b);
    *bp = NULL;
}

static rssm_status batch_set_gate_params_unlocked(rssm_batch *b, uint32_t layer, const float *A_log, const float *dt_bias,
                                       rssm_error *err)
{
    if (!b || !A_log || !dt_bias)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "gate params: batch, A_log and dt_bias must not be NULL");
    const rssm_model *m = &b->pool->model;
    if (layer >= m->layers)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "gate params: layer %u out of range (%u layers)", layer,
                              m->layers);
    rssm_backend *be = b->pool->backend;
    const rssm_named_address host[] = {{"A_log", A_log}, {"dt_bias", dt_bias}};
    rssm_status st = rssm_backend_check_host_memory(be, "gate params", host, sizeof host / sizeof host[0], err);
    if (st != RSSM_OK || (st = be->ops->batch_set_gate_params(be->ctx, b->dev, layer, A_log, dt_bias, err)) != RSSM_OK)
        return st;
    b->gate_params_set[layer] = 1;
    return rssm_clear_error(err);
}

static rssm_status batch_upload_unlocked(rssm_batch *b, uint32_t rows, const rssm_step_inputs *in, rssm_error *err)
{
    if (!b || !in || !in->q || !in->k || !in->v || !in->gate || !in->beta)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "upload: batch and every input array must be given");
    if (rows == 0 || rows > b->max_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "upload: rows = %u: must be in 1..%u", rows, b->max_rows);
    rssm_backend *be = b->pool->backend;
    const rssm_named_address host[] = {
        {"in->q", in->q}, {"in->k", in->k}, {"in->v", in->v}, {"in->gate", in->gate}, {"in->beta", in->beta}};
    rssm_status st = rssm_backend_check_host_memory(be, "upload", host, sizeof host / sizeof host[0], err);
    if (st != RSSM_OK)
        return st;
    b->uploaded_rows = 0;
    if ((st = be->ops->batch_upload(be->ctx, b->dev, rows, in, err)) != RSSM_OK)
        return st;
    b->uploaded_rows = rows;
    return rssm_clear_error(err);
}

/* What a batch needs before any step runs on it: `rows` uploaded rows
 * and, for gates computed on the device, every layer's gate weights. */
rssm_status rssm_batch_check_gate_params(const rssm_batch *b, const char *who, rssm_error *err)
{
    const rssm_model *m = &b->pool->model;
    if (m->gate_mode != RSSM_GATE_PRECOMPUTED)
        for (uint32_t l = 0; l < m->layers; l++)
            if (!b->gate_params_set[l])
                return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                      "%s: %s gates need A_log and dt_bias; layer %u has none "
                                      "(rssm_batch_set_gate_params)",
                                      who, rssm_gate_mode_name(m->gate_mode), l);
    return RSSM_OK;
}

static rssm_status check_runnable(const rssm_batch *b, uint32_t rows, const char *who, rssm_error *err)
{
    if (rows == 0 || rows > b->max_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: rows = %u: must be in 1..%u", who, rows,
                              b->max_rows);
    if (rows != b->uploaded_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: %u rows, but the uploaded inputs have %u", who,
                              rows, b->uploaded_rows);
    return rssm_batch_check_gate_params(b, who, err);
}

static rssm_status batch_run_unlocked(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint64_t *seq_len_after,
                           uint32_t snapshot_interval, rssm_error *err)
{
    if (!b)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "run: batch must not be NULL");
    rssm_status st = check_runnable(b, rows, "run", err);
    if (st != RSSM_OK)
        return st;
    st = rssm_pool_plan(b->pool, rows, slots, seq_len_after, snapshot_interval, b->plan, err);
    if (st != RSSM_OK)
        return st;
    for (uint32_t r = 0; r < rows; r++)
        b->header[r] = (rssm_row_header){
            .slot = b->plan[r].slot, .write_pos = b->plan[r].write_pos, .force = b->plan[r].force, .io = r};
    rssm_backend *be = b->pool->backend;
    if ((st = be->ops->batch_run(be->ctx, b->dev, rows, b->header, b->overflow, err)) != RSSM_OK)
        return st;
    b->last_seconds = be->ops->batch_last_run_seconds(be->ctx, b->dev);
    /* Rows whose ring append overflowed its dtype run again, alone and
     * forced to flush, which is exact (docs/design.md §2); the others are
     * committed from this run. The plans are compacted in place: the kept
     * rows to the front of b->plan, the re-run rows to b->rerun_plan. */
    uint32_t kept = 0, again = 0;
    for (uint32_t r = 0; r < rows; r++) {
        if (b->overflow[r]) {
            rssm_row_plan rp = b->plan[r];
            rp.force = 1;
            rp.is_flush = 1;
            b->rerun_plan[again] = rp;
            b->rerun_header[again++] =
                (rssm_row_header){.slot = rp.slot, .write_pos = rp.write_pos, .force = 1, .io = r};
        } else {
            b->plan[kept++] = b->plan[r];
        }
    }
    b->run_rows = rows;
    b->timed = 1;
    if (kept > 0 && (st = rssm_pool_commit_planned(b->pool, kept, b->plan, err)) != RSSM_OK)
        return st;
    if (again == 0)
        return st;
    if ((st = be->ops->batch_run(be->ctx, b->dev, again, b->rerun_header, b->overflow, err)) != RSSM_OK)
        return st;
    b->last_seconds += be->ops->batch_last_run_seconds(be->ctx, b->dev);
    for (uint32_t r = 0; r < again; r++)
        if (b->overflow[r]) /* a flush appends nothing: this would be a kernel bug */
            return rssm_set_error(err, RSSM_ERR_DEVICE, "run: slot %u overflowed its ring in a flush",
                                  b->rerun_header[r].slot);
    return rssm_pool_commit_planned(b->pool, again, b->rerun_plan, err);
}

static rssm_status batch_time_steps_unlocked(rssm_batch *b, uint32_t rows, uint32_t steps, const rssm_row_plan *plans,
                                             uint32_t reps, rssm_timing *timing, rssm_error *err)
{
    if (!b || !plans || !timing)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "time_steps: batch, plans and timing must not be NULL");
    if (steps == 0 || steps > 4096)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "time_steps: steps = %u: must be in 1..4096", steps);
    if (reps == 0 || reps > 1000)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "time_steps: reps = %u: must be in 1..1000", reps);
    const rssm_named_address host[] = {{"plans", plans}};
    rssm_status st = check_runnable(b, rows, "time_steps", err);
    if (st != RSSM_OK || (st = rssm_backend_check_host_memory(b->pool->backend, "time_steps", host, 1, err)) != RSSM_OK)
        return st;
    const size_t n = (size_t)steps * rows;
    rssm_row_header *hdr = malloc(n * sizeof *hdr);
    if (!hdr)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "time_steps: out of host memory");
    for (uint32_t s = 0; s < steps && st == RSSM_OK; s++)
        st = rssm_plan_check(b->pool, rows, plans + (size_t)s * rows, 0, "time_steps", err);
    for (size_t i = 0; i < n && st == RSSM_OK; i++)
        hdr[i] = (rssm_row_header){
            .slot = plans[i].slot, .write_pos = plans[i].write_pos, .force = plans[i].force, .io = (uint32_t)(i % rows)};
    rssm_backend *be = b->pool->backend;
    if (st == RSSM_OK)
        st = be->ops->batch_time_steps(be->ctx, b->dev, rows, steps, hdr, reps, timing, err);
    free(hdr);
    if (st != RSSM_OK)
        return st;
    b->run_rows = rows;
    b->timed = 1;
    return rssm_clear_error(err);
}

static rssm_status batch_download_unlocked(rssm_batch *b, uint32_t rows, void *out, rssm_error *err)
{
    if (!b || !out)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "download: batch and out must not be NULL");
    if (b->run_rows == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "download: nothing has run on this batch yet");
    if (rows == 0 || rows > b->run_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "download: rows = %u: the last run had %u", rows,
                              b->run_rows);
    rssm_backend *be = b->pool->backend;
    const rssm_named_address host[] = {{"out", out}};
    rssm_status st = rssm_backend_check_host_memory(be, "download", host, 1, err);
    if (st == RSSM_OK)
        st = be->ops->batch_download(be->ctx, b->dev, rows, out, err);
    return st == RSSM_OK ? rssm_clear_error(err) : st;
}

static rssm_status batch_step_unlocked(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint64_t *seq_len_after,
                            uint32_t snapshot_interval, const rssm_step_inputs *in, void *out, rssm_error *err)
{
    if (!out)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "step: out must not be NULL");
    rssm_status st;
    if ((st = rssm_batch_upload(b, rows, in, err)) != RSSM_OK ||
        (st = rssm_batch_run(b, rows, slots, seq_len_after, snapshot_interval, err)) != RSSM_OK)
        return st;
    return rssm_batch_download(b, rows, out, err);
}

rssm_status rssm_batch_last_run_seconds(const rssm_batch *b, double *seconds, rssm_error *err)
{
    if (!b || !seconds)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "last_run_seconds: batch and seconds must not be NULL");
    if (!b->timed)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "last_run_seconds: nothing has run on this batch yet");
    *seconds = b->last_seconds;
    return rssm_clear_error(err);
}

/* The public entry points: each holds the pool lock (objects.h). */

rssm_status rssm_batch_set_gate_params(rssm_batch *b, uint32_t layer, const float *A_log, const float *dt_bias,
                                       rssm_error *err)
{
    RSSM_POOL_LOCKED(b ? b->pool : NULL, batch_set_gate_params_unlocked(b, layer, A_log, dt_bias, err));
}

rssm_status rssm_batch_upload(rssm_batch *b, uint32_t rows, const rssm_step_inputs *in, rssm_error *err)
{
    RSSM_POOL_LOCKED(b ? b->pool : NULL, batch_upload_unlocked(b, rows, in, err));
}

rssm_status rssm_batch_run(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint64_t *seq_len_after,
                           uint32_t snapshot_interval, rssm_error *err)
{
    RSSM_POOL_LOCKED(b ? b->pool : NULL, batch_run_unlocked(b, rows, slots, seq_len_after, snapshot_interval, err));
}

rssm_status rssm_batch_time_steps(rssm_batch *b, uint32_t rows, uint32_t steps, const rssm_row_plan *plans,
                                  uint32_t reps, rssm_timing *timing, rssm_error *err)
{
    RSSM_POOL_LOCKED(b ? b->pool : NULL, batch_time_steps_unlocked(b, rows, steps, plans, reps, timing, err));
}

rssm_status rssm_batch_download(rssm_batch *b, uint32_t rows, void *out, rssm_error *err)
{
    RSSM_POOL_LOCKED(b ? b->pool : NULL, batch_download_unlocked(b, rows, out, err));
}

rssm_status rssm_batch_step(rssm_batch *b, uint32_t rows, const uint32_t *slots, const uint64_t *seq_len_after,
                            uint32_t snapshot_interval, const rssm_step_inputs *in, void *out, rssm_error *err)
{
    RSSM_POOL_LOCKED(b ? b->pool : NULL, batch_step_unlocked(b, rows, slots, seq_len_after, snapshot_interval, in, out, err));
}
