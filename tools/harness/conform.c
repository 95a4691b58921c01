/* Conformance: preparing a case (its trace and the oracle) and running it
 * on a backend. The case list is in cases.c. */
#define _POSIX_C_SOURCE 200809L

#include "conform.h"
#include "conform_internal.h"

#include "dtype.h"
#include "error.h"
#include "oracle.h"
#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *rh_verdict_name(rh_verdict v)
{
    switch (v) {
    case RH_PASS: return "PASS";
    case RH_FAIL: return "FAIL";
    case RH_SKIP: return "SKIP";
    }
    return "?";
}

int rh_case_matches(const char *name, char *const *filters, size_t n)
{
    if (n == 0)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (strstr(name, filters[i]))
            return 1;
    return 0;
}

int rh_same_kernels(const rssm_backend *a, const rssm_backend *b)
{
    return a && b && strcmp(rssm_backend_kernels(a), rssm_backend_kernels(b)) == 0 &&
           strcmp(rssm_backend_device(a), rssm_backend_device(b)) == 0;
}

int rh_backend_required(const char *name)
{
    const char *list = getenv("RSSM_REQUIRE_BACKENDS");
    const size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

double rh_rel_l2_f(const float *x, const double *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            return INFINITY;
        double d = (double)x[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0.0)
        return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ the oracle */

static rssm_status run_oracle(rh_prepared *p, rssm_error *err)
{
    if (p->trace.drafts)
        return rh_verify_oracle(p, err);
    const rh_trace *t = &p->trace;
    const rssm_model *m = &t->model;
    const size_t per_out = rh_trace_v_per_step(t), per_state = rh_trace_state_per_slot(t);
    p->ref_out = calloc((size_t)t->steps * per_out, sizeof(double));
    p->ref_state = calloc((size_t)t->slots * per_state, sizeof(double));
    double *out = malloc(per_out * sizeof(double));
    step_buf s;
    int have_buf = step_buf_alloc(&s, t);
    rssm_oracle *o = NULL;
    rssm_status st = RSSM_OK;
    if (!p->ref_out || !p->ref_state || !out || !have_buf) {
        st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "oracle: out of host memory");
        goto done;
    }
    if ((st = rssm_oracle_create(m, t->slots, &o, err)) != RSSM_OK)
        goto done;
    for (uint32_t i = 0; i < t->slots; i++)
        if ((st = rssm_oracle_set_state(o, i, t->init_state + i * per_state, err)) != RSSM_OK)
            goto done;
    if (m->gate_mode != RSSM_GATE_PRECOMPUTED) {
        size_t gw = m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1;
        for (uint32_t l = 0; l < m->layers; l++)
            if ((st = rssm_oracle_set_gate_params(o, l, t->A_log + (size_t)l * m->num_v_heads,
                                                  t->dt_bias + (size_t)l * m->num_v_heads * gw, err)) !=
                RSSM_OK)
                goto done;
    }
    for (uint32_t step = 0; step < t->steps; step++) {
        if (p->c.event == RH_EVENT_COPY && step == p->c.event_step &&
            (st = rssm_oracle_copy(o, 0, t->batch - 1, err)) != RSSM_OK)
            goto done;
        uint32_t rows = step_buf_fill(&s, t, step, NULL);
        if ((st = rssm_oracle_step(o, rows, s.slots, &s.in, out, err)) != RSSM_OK)
            goto done;
        rh_put_ref(p, step, out, rows, UINT32_MAX);
    }
    for (uint32_t i = 0; i < t->slots; i++)
        if ((st = rssm_oracle_get_state(o, i, p->ref_state + i * per_state, err)) != RSSM_OK)
            goto done;
done:
    rssm_oracle_destroy(&o);
    if (have_buf)
        step_buf_free(&s);
    free(out);
    return st;
}

void rh_prepared_free(rh_prepared *p)
{
    if (!p)
        return;
    rh_trace_free(&p->trace);
    free(p->ref_out);
    free(p->ref_state);
    memset(p, 0, sizeof *p);
}

rssm_status rh_prepare_case(const rh_case *c, uint64_t seed, rh_prepared *p, rssm_error *err)
{
    memset(p, 0, sizeof *p);
    p->c = *c;
    rh_trace_spec spec = {
        .model = c->model,
        .steps = c->steps,
        .batch = c->batch,
        .snapshot_interval = c->snapshot_interval,
        .seed = seed,
        /* The case's name picks its stream, so cases do not share inputs and
         * adding a case changes no other. */
        .stream = rh_hash_str(c->name),
        .admit_every = c->admit_every,
        .copy_step = c->event == RH_EVENT_COPY ? c->event_step : 0,
        .v_scale = c->v_scale,
        .v_scale_row = c->v_scale_row,
        .v_scale_from = c->v_scale_from,
        .verify = c->verify,
    };
    rssm_status st = rh_trace_generate(&spec, &p->trace, err);
    if (st == RSSM_OK)
        st = run_oracle(p, err);
    if (st != RSSM_OK)
        rh_prepared_free(p);
    return st;
}

rssm_status rh_prepare_trace(rh_trace *trace, const char *name, rh_prepared *p, rssm_error *err)
{
    memset(p, 0, sizeof *p);
    p->trace = *trace;
    memset(trace, 0, sizeof *trace);
    snprintf(p->c.name, sizeof p->c.name, "%s", name);
    p->c.model = p->trace.model;
    p->c.batch = p->trace.batch;
    p->c.steps = p->trace.steps;
    p->c.snapshot_interval = p->trace.snapshot_interval;
    p->c.tol = rh_tolerance(&p->trace.model);
    rssm_status st = run_oracle(p, err);
    if (st != RSSM_OK)
        rh_prepared_free(p);
    return st;
}

/* ------------------------------------------------------------ backend run */

/* Moves every slot from `from` to `to` through export/import bytes. */
static rssm_status migrate(engine *from, engine *to, uint32_t slots, rssm_error *err)
{
    size_t size = rssm_pool_export_size(from->pool);
    if (size != rssm_pool_export_size(to->pool))
        return rssm_set_error(err, RSSM_ERR_FORMAT, "export sizes differ between the two pools (%zu vs %zu)",
                              size, rssm_pool_export_size(to->pool));
    void *bytes = malloc(size);
    if (!bytes)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "out of host memory");
    rssm_status st = RSSM_OK;
    for (uint32_t i = 0; i < slots && st == RSSM_OK; i++) {
        st = rssm_pool_export(from->pool, from->slot_of[i], bytes, size, err);
        if (st == RSSM_OK)
            st = rssm_pool_import(to->pool, to->slot_of[i], bytes, size, err);
    }
    free(bytes);
    return st;
}

/* Replays the trace with `m` on b; outputs [T][layers][B][HV][V] and final
 * states [S][...] as fp32. A failed library call is returned with its
 * message; unwritten (NaN-poisoned) outputs are reported in r->note as a
 * failure (returns RSSM_ERR_DEVICE with the message). */
static rssm_status run_backend(const rh_prepared *p, const rssm_model *m, rssm_backend *b,
                               rssm_backend *other, float *outs, float *states, rh_result *cov,
                               rssm_error *err)
{
    const rh_trace *t = &p->trace;
    const rh_case *c = &p->c;
    if (t->drafts)
        return rh_verify_run(p, m, b, outs, states, cov, err);
    const size_t per_out = rh_trace_v_per_step(t), w = (size_t)m->num_v_heads * m->head_v;
    const size_t io = rssm_dtype_size(m->io_dtype);
    engine main_e, alt_e = {0};
    engine *cur = &main_e;
    step_buf s;
    if (!step_buf_alloc(&s, t))
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "out of host memory");
    void *out = malloc(per_out * io);
    rssm_row_plan *plan = malloc(t->batch * sizeof *plan);
    rssm_status st = out && plan ? engine_open(&main_e, b, t, m, c->policy, 1, err)
                         : rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "out of host memory");
    if (st != RSSM_OK) {
        step_buf_free(&s);
        free(out);
        free(plan);
        return st;
    }
    for (uint32_t step = 0; step < t->steps && st == RSSM_OK; step++) {
        if (step == c->event_step && c->event != RH_EVENT_NONE &&
            (st = rssm_pool_write_pos(cur->pool, cur->slot_of[0], &cov->event_pos, err)) != RSSM_OK)
            break;
        if (step == c->event_step && c->event == RH_EVENT_COPY) {
            st = rssm_pool_copy(cur->pool, cur->slot_of[0], cur->slot_of[t->batch - 1], err);
        } else if (step == c->event_step && c->event == RH_EVENT_MATERIALISE) {
            for (uint32_t i = 0; i < t->slots && st == RSSM_OK; i += 2)
                st = rssm_pool_materialise(cur->pool, cur->slot_of[i], err);
        } else if (step == c->event_step && c->event == RH_EVENT_MIGRATE) {
            st = engine_open(&alt_e, other, t, m, c->policy, 0, err);
            if (st == RSSM_OK && (st = migrate(&main_e, &alt_e, t->slots, err)) == RSSM_OK)
                cur = &alt_e;
        } else if (step == c->event_end && c->event == RH_EVENT_MIGRATE) {
            if ((st = migrate(&alt_e, &main_e, t->slots, err)) == RSSM_OK)
                cur = &main_e;
        }
        if (st != RSSM_OK) {
            rssm_error e2 = *err;
            rssm_set_error(err, e2.status, "before step %u: %s", step, e2.message);
            break;
        }
        uint32_t rows = step_buf_fill(&s, t, step, cur->slot_of);
        /* What the scheduler will do (planning changes nothing). */
        if ((st = rssm_pool_plan(cur->pool, rows, s.slots, s.lens, t->snapshot_interval, plan, err)) != RSSM_OK)
            break;
        for (uint32_t r = 0; r < rows; r++) {
            cov->flushes += plan[r].is_flush;
            cov->forced += plan[r].is_flush && plan[r].force && m->replay && plan[r].write_pos + 1 < m->ring_len;
        }
        for (uint32_t r = 1; r < rows; r++)
            if (plan[r].write_pos != plan[0].write_pos) {
                cov->mixed_steps++;
                break;
            }
        /* Poison: whatever the backend does not write stays NaN. */
        for (size_t i = 0; i < (size_t)m->layers * rows * w; i++)
            rssm_store(out, m->io_dtype, i, NAN);
        st = rssm_batch_step(cur->batch, rows, s.slots, s.lens, t->snapshot_interval, &s.in, out, err);
        if (st != RSSM_OK) {
            rssm_error e2 = *err;
            rssm_set_error(err, e2.status, "step %u: %s", step, e2.message);
            break;
        }
        size_t bad;
        if (!is_poison_free(out, m->io_dtype, (size_t)m->layers * rows * w, &bad)) {
            size_t l = bad / (rows * w), r = bad / w % rows, hv = bad % w / m->head_v;
            st = rssm_set_error(err, RSSM_ERR_DEVICE,
                                "step %u: output [layer %zu][row %zu][head %zu][%zu] is NaN (not written, or "
                                "computed as NaN)", step, l, r, hv, bad % m->head_v);
            break;
        }
        rh_put_out(outs, t, m->io_dtype, step, out, rows);
    }
    if (st == RSSM_OK && cur != &main_e)
        st = rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "the trace ended before the slots moved back");
    const size_t per_state = rh_trace_state_per_slot(t);
    for (uint32_t i = 0; i < t->slots && st == RSSM_OK; i++)
        st = rssm_pool_read_state(main_e.pool, main_e.slot_of[i], states + i * per_state, err);
    engine_close(&alt_e);
    engine_close(&main_e);
    step_buf_free(&s);
    free(out);
    free(plan);
    return st;
}

rh_verdict rh_run_case(const rh_prepared *p, rssm_backend *b, rssm_backend *other, rh_result *r,
                       float *outputs)
{
    const rh_trace *t = &p->trace;
    const rh_case *c = &p->c;
    memset(r, 0, sizeof *r);
    r->out_err = r->state_err = NAN;
    r->tol = rh_backend_tolerance(b, &t->model, c->tol);
    rssm_error err;
    if (rssm_backend_supports(b, &t->model, &err) != RSSM_OK) {
        snprintf(r->note, sizeof r->note, "unsupported: %s", err.message);
        return r->verdict = RH_SKIP;
    }
    if (c->event == RH_EVENT_MIGRATE && !other) {
        snprintf(r->note, sizeof r->note, "no second backend to move the slots to");
        return r->verdict = RH_SKIP;
    }
    if (c->event == RH_EVENT_MIGRATE && rssm_backend_supports(other, &t->model, &err) != RSSM_OK) {
        snprintf(r->note, sizeof r->note, "%s cannot hold this model: %s", rssm_backend_name(other),
                 err.message);
        return r->verdict = RH_SKIP;
    }
    const size_t n_out = (size_t)t->steps * rh_trace_v_per_step(t);
    const size_t n_state = (size_t)t->slots * rh_trace_state_per_slot(t);
    float *outs = calloc(n_out, sizeof(float)), *states = calloc(n_state, sizeof(float));
    float *outs2 = NULL, *states2 = NULL;
    if (!outs || !states) {
        snprintf(r->note, sizeof r->note, "out of host memory");
        r->verdict = RH_FAIL;
        goto done;
    }
    double t0 = now_seconds();
    rssm_status st = run_backend(p, &t->model, b, other, outs, states, r, &err);
    r->seconds = now_seconds() - t0;
    if (st != RSSM_OK) {
        snprintf(r->note, sizeof r->note, "%s: %s", rssm_status_str(st), err.message);
        r->verdict = RH_FAIL;
        goto done;
    }
    r->out_err = rh_rel_l2_f(outs, p->ref_out, n_out);
    r->state_err = rh_rel_l2_f(states, p->ref_state, n_state);
    r->verdict = r->out_err <= r->tol && r->state_err <= r->tol ? RH_PASS : RH_FAIL;
    if (r->verdict == RH_FAIL)
        snprintf(r->note, sizeof r->note, "error above tolerance");
    /* A case that did not exercise what it is named for fails: its setup is wrong. */
    const char *missing = (c->expect & RH_EXPECT_MIXED) && r->mixed_steps == 0 ? "rows at different ring positions"
                          : (c->expect & RH_EXPECT_FORCED) && r->forced == 0 ? "a forced mid-ring flush"
                          : (c->expect & RH_EXPECT_MIDRING_EVENT) && r->event_pos == 0 ? "a non-empty ring at the event"
                          : (c->expect & RH_EXPECT_FOLD) && r->folds == 0 ? "a verify window that folded its ring"
                          : (c->expect & RH_EXPECT_BOUNDARY) && r->boundaries == 0
                              ? "a snapshot boundary among accepted draft tokens"
                              : NULL;
    if (missing) {
        snprintf(r->note, sizeof r->note, "case setup: the run never had %s (too few --steps?)", missing);
        r->verdict = RH_FAIL;
    } else if (r->verdict == RH_PASS && c->expect && !c->verify) {
        snprintf(r->note, sizeof r->note, "mixed positions on %u steps, %u flushes (%u forced)%s", r->mixed_steps,
                 r->flushes, r->forced, c->event ? ", event mid-ring" : "");
    }

    if (c->check == RH_CHECK_NO_GROWTH && r->verdict == RH_PASS) {
        const size_t per = rh_trace_v_per_step(t), w = (t->steps / 8 ? t->steps / 8 : 1) * per;
        double first = rh_rel_l2_f(outs, p->ref_out, w);
        double last = rh_rel_l2_f(outs + n_out - w, p->ref_out + n_out - w, w);
        snprintf(r->note, sizeof r->note, "error of the first / last eighth of the steps: %.2e / %.2e", first, last);
        if (!(last <= 4.0 * first + 1e-9)) {
            r->verdict = RH_FAIL;
            snprintf(r->note, sizeof r->note, "error grows: first eighth %.2e, last eighth %.2e", first, last);
        }
    }
    if (c->check == RH_CHECK_L1_BITWISE) {
        /* The same trace through the packed decode must give the same bits. */
        rssm_model packed = t->model;
        packed.replay = 0;
        outs2 = calloc(n_out, sizeof(float));
        states2 = calloc(n_state, sizeof(float));
        if (!outs2 || !states2) {
            snprintf(r->note, sizeof r->note, "out of host memory");
            r->verdict = RH_FAIL;
            goto done;
        }
        if (rssm_backend_supports(b, &packed, &err) != RSSM_OK) {
            snprintf(r->note, sizeof r->note, "packed decode unsupported: %s", err.message);
            r->verdict = RH_FAIL; /* a backend that runs L=1 replay must run packed */
            goto done;
        }
        rh_result cov2 = *r;
        if ((st = run_backend(p, &packed, b, other, outs2, states2, &cov2, &err)) != RSSM_OK) {
            snprintf(r->note, sizeof r->note, "packed run: %s: %s", rssm_status_str(st), err.message);
            r->verdict = RH_FAIL;
            goto done;
        }
        int same_out = memcmp(outs, outs2, n_out * sizeof(float)) == 0;
        int same_state = memcmp(states, states2, n_state * sizeof(float)) == 0;
        if (!same_out || !same_state) {
            size_t diff = 0;
            const float *a = same_out ? states : outs, *bb = same_out ? states2 : outs2;
            size_t n = same_out ? n_state : n_out;
            for (size_t i = 0; i < n; i++)
                diff += memcmp(&a[i], &bb[i], sizeof(float)) != 0;
            snprintf(r->note, sizeof r->note, "L=1 replay differs from packed in %zu of %zu %s values", diff,
                     n, same_out ? "state" : "output");
            r->verdict = RH_FAIL;
        } else if (r->verdict == RH_PASS) {
            snprintf(r->note, sizeof r->note, "bit-identical to packed");
        }
    }
done:
    if (outputs && outs)
        memcpy(outputs, outs, n_out * sizeof(float));
    free(outs);
    free(states);
    free(outs2);
    free(states2);
    return r->verdict;
}
