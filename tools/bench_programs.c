/* The programs `rssm bench` times (docs/bench.md, "Method"): random
 * inputs, the state size that beats the last-level cache, a pool and batch
 * on random slots, whole ring cycles recorded once and timed, the in-place
 * pass, and the short conformance check each configuration gets first. */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"

#include "rng.h"
#include "traffic.h"

#include "dtype.h"
#include "error.h"
#include "rssm_layout.h"
#include "timing.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ inputs */

static void inputs_free(host_inputs *h)
{
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->gate);
    free(h->beta);
}

static void fill_io(void *dst, rssm_dtype dt, size_t n, rh_rng *r)
{
    for (size_t i = 0; i < n; i++) {
        float x = (float)rh_rng_uniform(r, -1.0, 1.0);
        if (x == 0.0f)
            x = 0.5f;
        rssm_store(dst, dt, i, x);
    }
}

static int inputs_make(host_inputs *h, const rssm_model *m, uint32_t rows, uint64_t seed)
{
    const size_t io = m->io_dtype == RSSM_DTYPE_F32 ? 4 : 2, L = m->layers;
    const size_t nqk = L * rows * m->num_qk_heads * m->head_k, nv = L * rows * m->num_v_heads * m->head_v;
    const size_t ng = L * rows * m->num_v_heads * (m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1);
    const size_t nb = L * rows * m->num_v_heads;
    memset(h, 0, sizeof *h);
    h->q = malloc(nqk * io);
    h->k = malloc(nqk * io);
    h->v = malloc(nv * io);
    h->gate = malloc(ng * sizeof(float));
    h->beta = malloc(nb * sizeof(float));
    if (!h->q || !h->k || !h->v || !h->gate || !h->beta) {
        inputs_free(h);
        return 0;
    }
    rh_rng r;
    rh_rng_seed(&r, seed, 0x1b7);
    fill_io(h->q, m->io_dtype, nqk, &r);
    fill_io(h->k, m->io_dtype, nqk, &r);
    fill_io(h->v, m->io_dtype, nv, &r);
    /* Precomputed: g in [log-decay of 1e-3, 0) and beta in (0, 1). Raw: the
     * projections a and b, spread as bench/check_layer.py spreads an
     * engine's (the kernels' softplus and sigmoid see both of their ranges). */
    const int raw = m->gate_mode != RSSM_GATE_PRECOMPUTED;
    for (size_t i = 0; i < ng; i++)
        h->gate[i] = raw ? (float)rh_rng_uniform(&r, -3.0, 3.0) : (float)-exp(rh_rng_uniform(&r, log(1e-3), 0.0));
    for (size_t i = 0; i < nb; i++)
        h->beta[i] = (float)rh_rng_uniform(&r, raw ? -3.0 : 0.05, raw ? 3.0 : 0.95);
    h->in = (rssm_step_inputs){h->q, h->k, h->v, h->gate, h->beta};
    return 1;
}

/* ------------------------------------------------------------ timing */

void bench_timing_clear(timing *t)
{
    memset(t, 0, sizeof *t);
    t->inplace_seconds = NAN;
    for (int i = 0; i < 3; i++)
        t->pos_seconds[i] = NAN;
}

/* The last-level cache one core of this machine uses, in bytes: the largest
 * data or unified cache sysfs lists for cpu0 (sysconf may report a whole
 * socket's, whose slices one core does not share), else sysconf's level 3,
 * else 0. */
static size_t llc_bytes(void)
{
    size_t best = 0;
    for (int i = 0; i < 16; i++) {
        char path[80], type[32] = "", size[32] = "";
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        const int got_type = fscanf(f, "%31s", type) == 1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!got_type || strcmp(type, "Instruction") == 0 || !(f = fopen(path, "r")))
            continue;
        char *end = NULL;
        const int got_size = fscanf(f, "%31s", size) == 1;
        fclose(f);
        unsigned long long n = got_size ? strtoull(size, &end, 10) : 0;
        if (end && (*end == 'K' || *end == 'k'))
            n <<= 10;
        else if (end && (*end == 'M' || *end == 'm'))
            n <<= 20;
        if (n > best)
            best = (size_t)n;
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (best == 0) {
        const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
        best = l3 > 0 ? (size_t)l3 : 0;
    }
#endif
    return best;
}

/* The machine's memory in bytes, 0 unknown. */
static size_t phys_bytes(void)
{
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        return (size_t)pages * (size_t)page;
#endif
    return 0;
}

static rssm_status copy_bandwidth(rssm_backend *b, uint32_t mib, double *bps, rssm_error *err)
{
    return rssm_backend_copy_bandwidth(b, (size_t)mib << 20, bps, err);
}

rssm_status bench_pick_state_mib(rssm_backend *b, bench_opts *o, int quick, int cpu, int llvmpipe,
                                  rh_state_size *size, double *copy_bps, rssm_error *err)
{
    rssm_status st;
    *copy_bps = NAN;
    if (cpu) {
        const size_t llc = o->llc_mib ? (size_t)o->llc_mib << 20 : llc_bytes();
        *size = rh_bench_state_size(llc, phys_bytes(), NAN, 0.0, 0.0);
        if (o->state_mib) { /* given: only whether it exceeds the cache */
            size->mib = o->state_mib;
            size->bound = RH_STATE_WANTED;
            size->within_llc = size->llc_mib > 0 && o->state_mib <= size->llc_mib;
        } else if (quick) {
            const uint32_t probe = size->mib < 1024u ? size->mib : 1024u;
            if ((st = copy_bandwidth(b, probe, copy_bps, err)) != RSSM_OK)
                return st;
            const double steps = rh_bench_timed_steps(o->ngate * o->nstate * o->nbatch, o->cycles, o->ring_len,
                                                      o->nring, o->positions, o->npos);
            *size = rh_bench_state_size(llc, phys_bytes(), *copy_bps, steps, RH_BENCH_QUICK_BUDGET_S);
            if (size->mib != probe && (st = copy_bandwidth(b, size->mib, copy_bps, err)) != RSSM_OK)
                return st;
        }
        o->state_mib = size->mib;
    } else if (!o->state_mib) {
        o->state_mib = llvmpipe ? (quick ? 32 : 64) : 256;
    }
    return isnan(*copy_bps) ? copy_bandwidth(b, o->state_mib, copy_bps, err) : RSSM_OK;
}

void bench_print_state_size(const rh_state_size *s)
{
    if (s->llc_mib)
        printf("last-level cache %u MiB as reported; ", s->llc_mib);
    else
        printf("no last-level cache reported; ");
    switch (s->bound) {
    case RH_STATE_BUDGET:
        printf("state %u MiB per step, not the %u MiB wanted (4x the cache): the quick run's budget of "
               "about %.0f s at this copy bandwidth\n", s->mib, s->wanted_mib, RH_BENCH_QUICK_BUDGET_S);
        break;
    case RH_STATE_MEMORY:
        printf("state %u MiB per step, not the %u MiB wanted (4x the cache): a quarter of this machine's "
               "memory\n", s->mib, s->wanted_mib);
        break;
    default:
        printf("state %u MiB per step\n", s->mib);
    }
    if (s->within_llc)
        printf("NOTE: the state does not exceed the last-level cache (%u of %u MiB): it may be served from the "
               "cache, and the figures below may be above what memory allows\n", s->mib, s->llc_mib);
}

/* Raw gate modes: every layer's A_log and dt_bias, random in the ranges
 * bench/check_layer.py gives an engine's (the batch starts them at 0). */
static rssm_status gate_params_set(rssm_batch *batch, const rssm_model *m, uint64_t seed, rssm_error *err)
{
    if (m->gate_mode == RSSM_GATE_PRECOMPUTED)
        return RSSM_OK;
    const size_t HV = m->num_v_heads, nd = HV * (m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1);
    float *A_log = malloc(HV * sizeof *A_log), *dt_bias = malloc(nd * sizeof *dt_bias);
    rssm_status st = RSSM_OK;
    if (!A_log || !dt_bias)
        st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "bench: out of host memory");
    rh_rng r;
    rh_rng_seed(&r, seed, 0x6a7e);
    for (uint32_t l = 0; st == RSSM_OK && l < m->layers; l++) {
        for (size_t i = 0; i < HV; i++)
            A_log[i] = (float)rh_rng_uniform(&r, -1.0, 0.5);
        for (size_t i = 0; i < nd; i++)
            dt_bias[i] = (float)rh_rng_uniform(&r, -1.0, 1.0);
        st = rssm_batch_set_gate_params(batch, l, A_log, dt_bias, err);
    }
    free(A_log);
    free(dt_bias);
    return st;
}

/* Plans one step of every row at ring position n (a benchmark's repeated
 * position; n = L-1 is the flush). */
static void plans_at(rssm_row_plan *plan, const uint32_t *slots, uint32_t rows, uint32_t n, uint32_t L)
{
    for (uint32_t i = 0; i < rows; i++)
        plan[i] = (rssm_row_plan){
            .slot = slots[i], .write_pos = n, .force = 0, .is_flush = RSSM_ROW_FLUSHES(n, L - 1, 0u)};
}

void bench_pool_close(bench_pool *bp)
{
    rssm_batch_destroy(&bp->batch);
    rssm_pool_destroy(&bp->pool);
    inputs_free(&bp->in);
    free(bp->slots);
    free(bp->state);
    memset(bp, 0, sizeof *bp);
}

rssm_status bench_pool_open(bench_pool *bp, rssm_backend *b, const rssm_model *m, uint32_t rows,
                                   uint32_t tokens, rssm_flush_policy policy, uint64_t seed, rssm_error *err)
{
    memset(bp, 0, sizeof *bp);
    const size_t state_n = (size_t)m->layers * m->num_v_heads * m->head_v * m->head_k;
    bp->state = malloc(state_n * sizeof *bp->state);
    bp->slots = malloc(rows * sizeof *bp->slots);
    rssm_status st = RSSM_OK;
    if (!bp->state || !bp->slots || !inputs_make(&bp->in, m, rows * tokens, seed)) {
        st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "bench: out of host memory");
        goto done;
    }
    rh_rng r;
    rh_rng_seed(&r, seed, 0x57a7e);
    for (size_t i = 0; i < state_n; i++)
        bp->state[i] = (float)(0.1 * rh_rng_uniform(&r, -1.0, 1.0));
    if ((st = rssm_pool_create(b, m, rows, policy, &bp->pool, err)) != RSSM_OK)
        goto done;
    for (uint32_t i = 0; i < rows; i++)
        if ((st = rssm_pool_alloc(bp->pool, &bp->slots[i], err)) != RSSM_OK ||
            (st = rssm_pool_write_state(bp->pool, bp->slots[i], bp->state, err)) != RSSM_OK)
            goto done;
    /* The rows on a random permutation of the slots, as an engine's batch
     * lands on whatever slots its sequences hold: with the rows in slot
     * order a packed step measured up to 3% faster on the H200 than the
     * same kernel in the engine's harness (bench/results/h200/notes.md, CUDA). */
    for (uint32_t i = rows; i > 1; i--) {
        const uint32_t j = (uint32_t)rh_rng_range(&r, 0, i - 1), t = bp->slots[i - 1];
        bp->slots[i - 1] = bp->slots[j];
        bp->slots[j] = t;
    }
    if ((st = rssm_batch_create(bp->pool, rows, &bp->batch, err)) != RSSM_OK ||
        (st = rssm_batch_upload(bp->batch, rows, &bp->in.in, err)) != RSSM_OK ||
        (st = gate_params_set(bp->batch, m, seed, err)) != RSSM_OK)
        goto done;
done:
    if (st != RSSM_OK)
        bench_pool_close(bp);
    return st;
}

rssm_status bench_time_model(rssm_backend *b, const rssm_model *m, uint32_t rows, rssm_flush_policy policy,
                              uint32_t cycle_steps, int positions, uint32_t reps, uint64_t seed, timing *t,
                              rssm_error *err)
{
    bench_timing_clear(t);
    t->layers = m->layers;
    const uint32_t L = m->replay ? m->ring_len : 1;
    bench_pool bp;
    rssm_status st = bench_pool_open(&bp, b, m, rows, 1, policy, seed, err);
    if (st != RSSM_OK)
        return st;
    const uint32_t *slots = bp.slots;
    uint64_t *lens = malloc(rows * sizeof *lens);
    rssm_row_plan *plan = malloc((size_t)(cycle_steps > L ? cycle_steps : L) * rows * sizeof *plan);
    if (!lens || !plan) {
        st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "bench: out of host memory");
        goto done;
    }
    for (uint32_t i = 0; i < rows; i++)
        lens[i] = 1000 + i;
    for (uint32_t s = 0; s < L + cycle_steps; s++) {
        rssm_row_plan *p = plan + (size_t)(s < L ? 0 : s - L) * rows;
        for (uint32_t i = 0; i < rows; i++)
            lens[i]++;
        if ((st = rssm_pool_plan(bp.pool, rows, slots, lens, 0, p, err)) != RSSM_OK ||
            (st = rssm_pool_commit(bp.pool, rows, p, err)) != RSSM_OK)
            goto done;
    }
    for (size_t i = 0; i < (size_t)cycle_steps * rows; i++)
        t->bytes += rh_traffic_row_bytes(m, plan[i].write_pos, (int)plan[i].is_flush);
    rssm_timing cycle;
    if ((st = rssm_batch_time_steps(bp.batch, rows, cycle_steps, plan, reps, &cycle, err)) != RSSM_OK)
        goto done;
    t->seconds = cycle.median_seconds;
    t->min_seconds = cycle.min_seconds;
    t->steps = cycle_steps;
    if (positions && L >= 2) {
        const uint32_t at[3] = {0, L - 2, L - 1}; /* empty ring, full ring, flush */
        for (int k = 0; k < 3; k++) {
            for (uint32_t s = 0; s < L; s++)
                plans_at(plan + (size_t)s * rows, slots, rows, at[k], L);
            rssm_timing pos;
            if ((st = rssm_batch_time_steps(bp.batch, rows, L, plan, reps, &pos, err)) != RSSM_OK)
                goto done;
            t->pos_seconds[k] = pos.median_seconds / L;
        }
    }
    if (!m->replay) {
        double sec;
        rssm_error ierr;
        if (rssm_pool_inplace_seconds(bp.pool, reps, &sec, &ierr) == RSSM_OK)
            t->inplace_seconds = sec;
        else if (ierr.status != RSSM_ERR_UNSUPPORTED)
            st = rssm_set_error(err, ierr.status, "%s", ierr.message);
    }
done:
    bench_pool_close(&bp);
    free(lens);
    free(plan);
    return st;
}

rh_verdict bench_check_config(rssm_backend *b, const rssm_model *m, uint32_t rows, rssm_flush_policy policy,
                               uint32_t window, uint64_t seed, char *note, size_t size)
{
    rh_case c;
    memset(&c, 0, sizeof c);
    char suffix[16] = "";
    if (window)
        snprintf(suffix, sizeof suffix, "/T%u", window);
    snprintf(c.name, sizeof c.name, "bench-check/%s/%s/L%u/%s%s", rssm_gate_kind_name(m->gate_kind),
             rssm_dtype_name(m->state_dtype), m->replay ? m->ring_len : 0, policy ? "staggered" : "uniform",
             suffix);
    c.model = *m;
    c.model.layers = 1;
    c.batch = rows < 4 ? rows : 4;
    uint32_t L = m->replay ? m->ring_len : 1;
    c.steps = 2 * L + 2 < 6 ? 6 : 2 * L + 2;
    if (window) {
        c.verify = window;
        c.steps = 8 * (window + 1);
    }
    c.policy = policy;
    c.tol = rh_tolerance(&c.model);
    rh_prepared p;
    rssm_error err;
    if (rh_prepare_case(&c, seed, &p, &err) != RSSM_OK) {
        snprintf(note, size, "oracle: %s", err.message);
        return RH_FAIL;
    }
    rh_result r;
    rh_verdict v = rh_run_case(&p, b, NULL, &r, NULL);
    rh_prepared_free(&p);
    if (v == RH_FAIL)
        snprintf(note, size, "%s out err %.2e state err %.2e tol %.0e %s",
                 window ? "verify" : m->replay ? "replay" : "packed", r.out_err, r.state_err, r.tol, r.note);
    else if (v == RH_SKIP)
        snprintf(note, size, "%s", r.note);
    return v;
}

uint32_t bench_pick_layers(const rssm_model *m, uint32_t rows, double target)
{
    double per = (double)rows * m->num_v_heads * m->head_v * m->head_k *
                 (m->state_dtype == RSSM_DTYPE_F32 ? 4.0 : 2.0);
    double l = ceil(target / per);
    return l < 1 ? 1 : l > 4096 ? 4096 : (uint32_t)l;
}
