/* rssm bench: replay against packed decode, timed over whole ring cycles,
 * and (--verify) speculative-decode verify windows against both. The
 * method (and the traffic model behind GB/s) is in docs/bench.md. */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include "bench_size.h"
#include "conform.h"
#include "rng.h"
#include "traffic.h"

#include "dtype.h"
#include "error.h"
#include "rssm.h"
#include "rssm_layout.h"
#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIST 16

static void help(void)
{
    printf("usage: rssm bench [options]\n"
           "\n"
           "Times the replay decode against the packed decode on one backend. Every\n"
           "configuration is first checked against the float64 oracle (a short trace with\n"
           "a flush); one that fails is reported as 'incorrect' and not timed. A timing is\n"
           "one whole ring cycle (L consecutive steps, the flush included; L steps of the\n"
           "packed decode) recorded once as one device program (a CUDA graph, one Vulkan\n"
           "command buffer; one launch per layer, each after the one before it), run\n"
           "untimed until a GPU is warm (0.6 s) and then --cycles times: the median, per\n"
           "step; 'spread' is the median over the fastest run. For uniform positions, the empty-ring, full-ring (n = L-2) and flush\n"
           "steps are timed the same way, as programs of L steps at that position. Enough\n"
           "layers are used that the state touched per step exceeds --state-mib, so it is\n"
           "not cache-resident. Measured in the same run: the copy bandwidth, and the\n"
           "in-place bound of each packed step (one pass that reads and writes back its\n"
           "whole state pool). GB/s counts the bytes of the traffic model in docs/bench.md.\n"
           "\n"
           "options:\n"
           "  --backend NAME     backend to time (default auto)\n"
           "  --batch LIST       rows per step (default 1,16,64)\n"
           "  --ring-len LIST    ring lengths L (default 8,16)\n"
           "  --gate LIST        gdn, kda (default both)\n"
           "  --state LIST       state dtypes fp32, bf16 (default both)\n"
           "  --ring-dtype T     fp32, fp16 or bf16 (default fp16)\n"
           "  --io T             q/k/v/output dtype, fp32, fp16 or bf16 (default bf16)\n"
           "  --gate-mode M      raw, raw-safe or precomputed (default raw): the raw\n"
           "                     projections a and b from which the kernels compute the\n"
           "                     gate and beta (with A_log and dt_bias), as an engine\n"
           "                     passes them, or the step's g and beta computed beforehand\n"
           "  --positions LIST   uniform, staggered (default both): rows all at one ring\n"
           "                     position, or spread by the RSSM_FLUSH_STAGGERED policy\n"
           "  --cycles N         timed runs of each program; the median is reported (default 3)\n"
           "  --state-mib N      minimum state touched per step, MiB (default: cpu 4x the\n"
           "                     last-level cache, at least 64, in --quick no more than its\n"
           "                     time budget allows; a GPU 256; llvmpipe 64)\n"
           "  --llc-mib N        the cpu's last-level cache to size the state for, MiB,\n"
           "                     instead of what the machine reports (a VM may report its\n"
           "                     host's)\n"
           "  --seed N           seed of the random inputs (default 1)\n"
           "  --sm-limit N       plan the kernels and the in-place bound for N multiprocessors\n"
           "                     (rssm_backend_limit_sms; GPU backends that have it), e.g. 78\n"
           "                     for an H20-shaped run on an H200 under CUDA MPS (docs/bench.md)\n"
           "  --verify T-LIST    also time speculative-decode verify windows of T draft\n"
           "                     tokens per row (2..16, each at most L - 1), e.g. 2,4,8;\n"
           "                     off unless given (--quick included)\n"
           "  --accept PCT-LIST  with --verify: draft tokens accepted per window, percent\n"
           "                     of T rounded to the nearest token (0..100, default 100,50)\n"
           "  --quick            a short run: batch 1,16; L 16; fp32 state; 3 cycles; on\n"
           "                     the cpu no more state than its steps move in about 90 s\n"
           "                     at the copy bandwidth measured first (llvmpipe: 1 cycle,\n"
           "                     32 MiB)\n"
           "  --out PREFIX       also write PREFIX.csv and PREFIX.json (and, with --verify,\n"
           "                     PREFIX-verify.csv)\n"
           "\n"
           "With --verify, a second table follows: for each shape and L of the first (its\n"
           "uniform row), each T and each accept rate, cycles of verify windows as a\n"
           "speculative decoder runs them (rssm_batch_verify of T tokens, rssm_pool_accept\n"
           "of k; windows at ring positions 0, k, 2k, ... while they fit), checked against\n"
           "the oracle first. It reports the device us of a window, over one replay step\n"
           "and over T of them (the first table's replay us); the accept's wall-clock us,\n"
           "over a replay step; the fold of the full ring each cycle starts with, per\n"
           "window; us per accepted token, (window + accept) / k, and token throughput\n"
           "against the\n"
           "replay and packed decodes. docs/bench.md has the method.\n");
}

typedef struct bench_opts {
    uint32_t batch[MAX_LIST], ring_len[MAX_LIST];
    size_t nbatch, nring;
    rssm_gate_kind gate[2];
    size_t ngate;
    rssm_dtype state[2];
    size_t nstate;
    rssm_dtype ring_dtype, io_dtype;
    rssm_gate_mode gate_mode;
    int positions[2]; /* 0 uniform, 1 staggered */
    size_t npos;
    uint32_t cycles;
    uint32_t state_mib; /* 0: per backend */
    uint32_t llc_mib;   /* --llc-mib; 0: what the machine reports */
    uint64_t seed;
    uint32_t sm_limit;  /* 0: the device's */
    uint32_t drafts[MAX_LIST], accept_pct[MAX_LIST]; /* --verify, --accept */
    size_t ndrafts, naccept;                         /* ndrafts 0: no verify rows */
} bench_opts;

/* What one timed configuration measured. */
typedef struct timing {
    double seconds, bytes;  /* one run of the program of `steps` steps: median */
    double min_seconds;     /* its fastest run */
    uint32_t steps, layers;
    double pos_seconds[3];  /* per step: empty ring, full ring (n = L-2), flush;
                               NAN unless measured (uniform replay only) */
    double inplace_seconds; /* the in-place pass over the state (packed only), or NAN */
} timing;

typedef struct result_row {
    const char *gate, *state, *positions;
    uint32_t L, batch, layers;
    const char *status; /* "ok", "incorrect", "unsupported", "error" */
    char note[512];
    timing packed, replay;
    rssm_model model;   /* the replay model timed */
    int verify_base;    /* the row whose shape and L the verify rows time */
} result_row;

/* What one verify configuration measured, per window (all rows, all
 * layers): medians over the timed cycles (the fold: the one of the last),
 * divided by the windows of a cycle. */
typedef struct verify_timing {
    uint32_t windows;      /* per cycle: at ring positions 0, k, 2k, ... while the window fits */
    double seconds;        /* device time of the window's launches */
    double min_seconds;    /* the same, of the fastest cycle */
    double accept_seconds; /* rssm_pool_accept of every row: host work, the wall clock */
    double fold_seconds;   /* the device fold a cycle starts with: its first window's excess, per window */
} verify_timing;

typedef struct verify_row {
    const result_row *base; /* its shape's replay and packed timings, from the same run */
    uint32_t T, accept_pct, k;
    const char *status; /* "ok", "incorrect", "unsupported", "error", "skipped" (the base row is not ok) */
    char note[512];
    verify_timing v;
} verify_row;

/* ------------------------------------------------------------ options */

static int parse_dtype(const char *cmd, const char *opt, const char *s, rssm_dtype *out)
{
    if (strcmp(s, "fp32") == 0)
        *out = RSSM_DTYPE_F32;
    else if (strcmp(s, "fp16") == 0)
        *out = RSSM_DTYPE_F16;
    else if (strcmp(s, "bf16") == 0)
        *out = RSSM_DTYPE_BF16;
    else {
        fprintf(stderr, "rssm %s: %s: unknown dtype '%s' (fp32, fp16, bf16)\n", cmd, opt, s);
        return 0;
    }
    return 1;
}

static int parse_gate_mode(const char *cmd, const char *s, rssm_gate_mode *out)
{
    static const rssm_gate_mode modes[] = {RSSM_GATE_PRECOMPUTED, RSSM_GATE_RAW, RSSM_GATE_RAW_SAFE};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(s, rssm_gate_mode_name(modes[i])) == 0) {
            *out = modes[i];
            return 1;
        }
    fprintf(stderr, "rssm %s: --gate-mode: unknown mode '%s' (precomputed, raw, raw-safe)\n", cmd, s);
    return 0;
}

/* ------------------------------------------------------------ inputs */

/* Random, non-zero step inputs for `rows` rows in host memory. */
typedef struct host_inputs {
    void *q, *k, *v;
    float *gate, *beta;
    rssm_step_inputs in;
} host_inputs;

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
     * projections a and b, spread as bench/h200/layer_check.py spreads an
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

static void timing_clear(timing *t)
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

/* --state-mib when not given, and the copy bandwidth over buffers of that
 * size: on the cpu backend by the cache (bench_size.h), which `size`
 * describes, in --quick within its time budget (the copy bandwidth over
 * the size wanted, up to 1 GiB, past any core's cache, as a probe; then
 * the size the budget allows at it, measured again there if smaller); on
 * a GPU 256 MiB; llvmpipe 64, in --quick 32. */
static rssm_status pick_state_mib(rssm_backend *b, bench_opts *o, int quick, int cpu, int llvmpipe,
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

/* The cpu backend's state size, and why: the table's reader must know when
 * the state could not exceed the cache, as its figures may then be the
 * cache's. */
static void print_state_size(const rh_state_size *s)
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
 * bench/h200/layer_check.py gives an engine's (the batch starts them at 0). */
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
        plan[i] = (rssm_row_plan){.slot = slots[i], .write_pos = n, .force = 0, .is_flush = RSSM_ROW_FLUSHES(n, L - 1, 0u)};
}

/* A fresh pool of `rows` slots, each the random `state` with an empty ring,
 * and a batch of `rows` rows with random, non-zero inputs for `tokens`
 * steps, the first step's uploaded. inputs_make's arrays are flat and
 * random, so those of rows x tokens rows serve as `tokens` steps of `rows`
 * rows, one after the other: a verify window's token-major inputs. */
typedef struct bench_pool {
    rssm_pool *pool;
    rssm_batch *batch;
    uint32_t *slots;
    float *state; /* [layers][HV][V][K], every slot's to start with */
    host_inputs in;
} bench_pool;

static void bench_pool_close(bench_pool *bp)
{
    rssm_batch_destroy(&bp->batch);
    rssm_pool_destroy(&bp->pool);
    inputs_free(&bp->in);
    free(bp->slots);
    free(bp->state);
    memset(bp, 0, sizeof *bp);
}

static rssm_status bench_pool_open(bench_pool *bp, rssm_backend *b, const rssm_model *m, uint32_t rows,
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
     * same kernel in the engine's harness (bench/results/h200_cuda/notes.md). */
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

/* Times, on a fresh pool of `rows` random slots, a program of `cycle_steps`
 * consecutive steps (whole ring cycles, planned by the pool's scheduler
 * after one cycle that brings a staggered pool to its steady state), and
 * for `positions` the three programs of L steps at one ring position each.
 * A packed model also gets the in-place pass over its pool, which is
 * exactly the state a packed step reads and writes. Each program is
 * recorded once and run 1 + reps times (rssm_batch_time_steps). */
static rssm_status time_model(rssm_backend *b, const rssm_model *m, uint32_t rows, rssm_flush_policy policy,
                              uint32_t cycle_steps, int positions, uint32_t reps, uint64_t seed, timing *t,
                              rssm_error *err)
{
    timing_clear(t);
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

static void verify_timing_clear(verify_timing *vt)
{
    *vt = (verify_timing){.windows = 0, .seconds = NAN, .min_seconds = NAN, .accept_seconds = NAN,
                          .fold_seconds = NAN};
}

/* Windows of a verify cycle (docs/bench.md): at ring positions 0, k, 2k,
 * ... while n + T <= L - 1, the room a window has before the flush
 * position; accepting nothing never moves the window, one is a cycle. */
static uint32_t verify_windows(uint32_t L, uint32_t T, uint32_t k) { return k ? (L - 1 - T) / k + 1 : 1; }

/* Times, on a fresh pool of `rows` random slots at uniform ring positions,
 * whole verify cycles as a speculative decoder runs them: each window
 * verifies T draft tokens per row (rssm_batch_verify) and accepts k of
 * them (rssm_pool_accept, no snapshot boundary). After the cycle's last
 * window the ring has no room for another, so the next cycle's first
 * verify folds it into the checkpoint first, on the device (a flush,
 * docs/design.md §9): a cycle's device time includes that fold, as a
 * decoder's does, and `fold_seconds` is the first window's excess over the
 * cycle's others, per window. Cycles run untimed first (once; on a GPU,
 * `warm`, until its clocks have ramped up, as rssm_batch_time_steps does;
 * at least one, so every timed cycle starts with a full ring), then `reps`
 * times. A window's device time is rssm_batch_last_run_seconds after it;
 * the accept is host work, timed by the wall clock. */
static rssm_status time_verify(rssm_backend *b, const rssm_model *m, uint32_t rows, uint32_t T, uint32_t k,
                               uint32_t reps, int warm, uint64_t seed, verify_timing *vt, rssm_error *err)
{
    verify_timing_clear(vt);
    const uint32_t windows = verify_windows(m->ring_len, T, k);
    bench_pool bp;
    rssm_status st = bench_pool_open(&bp, b, m, rows, T, RSSM_FLUSH_ALIGNED, seed, err);
    if (st != RSSM_OK)
        return st;
    const size_t out_bytes =
        (size_t)T * m->layers * rows * m->num_v_heads * m->head_v * rssm_dtype_size(m->io_dtype);
    uint32_t *drafts = malloc(rows * sizeof *drafts), *accepted = malloc(rows * sizeof *accepted);
    uint64_t *lens = malloc(rows * sizeof *lens);
    void *out = malloc(out_bytes);
    double *cycles = malloc(2 * (size_t)reps * sizeof *cycles); /* device, accept seconds */
    if (!drafts || !accepted || !lens || !out || !cycles) {
        st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "bench: out of host memory");
        goto done;
    }
    double *device = cycles, *accept = cycles + reps, fold = 0.0;
    for (uint32_t r = 0; r < rows; r++) {
        drafts[r] = T;
        accepted[r] = k;
        lens[r] = 1000 + r;
    }
    const double started = rssm_now_seconds();
    for (uint32_t untimed = 0, timed = 0; timed < reps;) {
        const int warming = rssm_warming_up(warm, untimed, started), last = !warming && timed + 1 == reps;
        double dev = 0.0, acc = 0.0, first = 0.0;
        for (uint32_t w = 0; w < windows; w++) {
            double sec;
            if ((st = rssm_batch_verify(bp.batch, rows, bp.slots, drafts, &bp.in.in, out, err)) != RSSM_OK ||
                (st = rssm_batch_last_run_seconds(bp.batch, &sec, err)) != RSSM_OK)
                goto done;
            dev += sec;
            if (w == 0)
                first = sec;
            for (uint32_t r = 0; r < rows; r++)
                lens[r] += k;
            const double t0 = rssm_now_seconds();
            st = rssm_pool_accept(bp.pool, rows, bp.slots, accepted, lens, 0, err);
            acc += rssm_now_seconds() - t0;
            if (st != RSSM_OK)
                goto done;
        }
        if (last && k > 0 && windows > 1)
            fold = first - (dev - first) / (windows - 1);
        if (warming) {
            untimed++;
        } else {
            device[timed] = dev;
            accept[timed++] = acc;
        }
    }
    const rssm_timing dt = rssm_timing_of(device, reps, reps);
    vt->windows = windows;
    vt->seconds = dt.median_seconds / windows;
    vt->min_seconds = dt.min_seconds / windows;
    vt->accept_seconds = rssm_median(accept, reps) / windows;
    /* one window a cycle: every window folds, and none is there to compare */
    vt->fold_seconds = windows > 1 ? fold / windows : NAN;
done:
    bench_pool_close(&bp);
    free(drafts);
    free(accepted);
    free(lens);
    free(out);
    free(cycles);
    return st;
}

/* One short conformance check of the configuration (one layer, up to four
 * rows, two ring cycles and a bit) against the oracle. With `window` > 0,
 * of its speculative-decode verify instead: eight rounds of a window of up
 * to that many draft tokens and one step (tools/harness/conform_verify.c),
 * as the conformance cases have, so every accept count comes round. */
static rh_verdict check_config(rssm_backend *b, const rssm_model *m, uint32_t rows, rssm_flush_policy policy,
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

/* Layers so that rows x layers x checkpoint bytes >= target. */
static uint32_t pick_layers(const rssm_model *m, uint32_t rows, double target)
{
    double per = (double)rows * m->num_v_heads * m->head_v * m->head_k *
                 (m->state_dtype == RSSM_DTYPE_F32 ? 4.0 : 2.0);
    double l = ceil(target / per);
    return l < 1 ? 1 : l > 4096 ? 4096 : (uint32_t)l;
}

static double us_per_step(const timing *t) { return t->steps ? 1e6 * t->seconds / t->steps : NAN; }
static double gbs(const timing *t) { return t->seconds > 0 ? t->bytes / t->seconds / 1e9 : NAN; }
static double inplace_us(const timing *t) { return 1e6 * t->inplace_seconds; }
static double min_us_per_step(const timing *t) { return t->steps ? 1e6 * t->min_seconds / t->steps : NAN; }
/* How far the median run is above the fastest, the worse of the two kernels. */
static double spread(const result_row *r)
{
    const double p = r->packed.seconds / r->packed.min_seconds, q = r->replay.seconds / r->replay.min_seconds;
    return p > q ? p : q;
}
static double pos_us(const timing *t, int i) { return 1e6 * t->pos_seconds[i]; }

static void print_table_header(void)
{
    printf("%-4s %-5s %3s %5s %-9s %6s | %10s %8s %6s %10s %6s | %10s %8s %6s | %7s | %6s %6s %6s | %9s %9s | %6s "
           "| %s\n",
           "gate", "state", "L", "batch", "positions", "layers", "packed us", "GB/s", "%copy", "inplace us",
           "%inpl", "replay us", "GB/s", "%copy", "speedup", "empty", "full", "flush", "packed/l", "replay/l",
           "spread", "status");
}

/* A ratio to a physical bound (the copy bandwidth, the in-place pass)
 * above 100% is not a bandwidth: the state was served from a cache, or the
 * timing is off. Such a row is flagged, in the table ("!") and in the
 * files (above_bound), never printed as if it were a figure. */
static int above_bound(const result_row *r, double copy_bps)
{
    const double pus = us_per_step(&r->packed), ius = inplace_us(&r->packed);
    return gbs(&r->packed) * 1e9 > copy_bps || gbs(&r->replay) * 1e9 > copy_bps || ius > pus;
}

static void fmt(char *buf, size_t n, const char *f, double x)
{
    if (isnan(x))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, f, x);
}

/* x percent, "!" after it above 100 (above_bound). */
static void fmt_pct(char *buf, size_t n, double x) { fmt(buf, n, x > 100.0 ? "%.0f%%!" : "%.0f%%", x); }

static void print_table_row(const result_row *r, double copy_bps)
{
    char pu[16], pg[16], pp[16], iu[16], ip[16], ru[16], rg[16], rp[16], sp[16], e[16], f[16], fl[16], sd[16];
    char pl[16], rl[16];
    double pus = us_per_step(&r->packed), rus = us_per_step(&r->replay), ius = inplace_us(&r->packed);
    fmt(pu, sizeof pu, "%.1f", pus);
    fmt(pg, sizeof pg, "%.2f", gbs(&r->packed));
    fmt_pct(pp, sizeof pp, 100.0 * gbs(&r->packed) * 1e9 / copy_bps);
    fmt(iu, sizeof iu, "%.1f", ius);
    fmt_pct(ip, sizeof ip, 100.0 * ius / pus);
    fmt(ru, sizeof ru, "%.1f", rus);
    fmt(rg, sizeof rg, "%.2f", gbs(&r->replay));
    fmt_pct(rp, sizeof rp, 100.0 * gbs(&r->replay) * 1e9 / copy_bps);
    fmt(pl, sizeof pl, "%.2f", pus / r->layers);
    fmt(rl, sizeof rl, "%.2f", rus / r->layers);
    fmt(sp, sizeof sp, "%.2fx", pus / rus);
    /* Per-position costs as packed/position: > 1 means faster than packed. */
    fmt(e, sizeof e, "%.2fx", pus / pos_us(&r->replay, 0));
    fmt(f, sizeof f, "%.2fx", pus / pos_us(&r->replay, 1));
    fmt(fl, sizeof fl, "%.2fx", pus / pos_us(&r->replay, 2));
    fmt(sd, sizeof sd, "%.3f", spread(r));
    printf("%-4s %-5s %3u %5u %-9s %6u | %10s %8s %6s %10s %6s | %10s %8s %6s | %7s | %6s %6s %6s | %9s %9s | %6s "
           "| %s%s%s\n",
           r->gate, r->state, r->L, r->batch, r->positions, r->layers, pu, pg, pp, iu, ip, ru, rg, rp, sp, e, f,
           fl, pl, rl, sd, r->status, r->note[0] ? ": " : "", r->note);
    fflush(stdout);
}

/* A verify row's figures (docs/bench.md, "Verify"), worked out once for
 * the table, the CSV and the JSON: per window, all rows; per accepted
 * token, per row as a step's us are. */
typedef struct verify_figures {
    double replay_us, packed_us;          /* the base row's step */
    double verify_us, verify_min_us;      /* one window */
    double over_replay, over_t_replay;    /* a window over one step, over T steps */
    double accept_us, accept_pct_of_step;
    double fold_us;                       /* NaN when nothing is accepted */
    double us_per_token;                  /* (window + accept) / k */
    double tokens_over_replay, tokens_over_packed;
} verify_figures;

static verify_figures verify_figures_of(const verify_row *v)
{
    verify_figures x;
    x.replay_us = us_per_step(&v->base->replay);
    x.packed_us = us_per_step(&v->base->packed);
    x.verify_us = 1e6 * v->v.seconds;
    x.verify_min_us = 1e6 * v->v.min_seconds;
    x.over_replay = x.verify_us / x.replay_us;
    x.over_t_replay = x.verify_us / (v->T * x.replay_us);
    x.accept_us = 1e6 * v->v.accept_seconds;
    x.accept_pct_of_step = 100.0 * x.accept_us / x.replay_us;
    x.fold_us = v->k ? 1e6 * v->v.fold_seconds : NAN;
    x.us_per_token = v->k ? (x.verify_us + x.accept_us) / v->k : NAN;
    x.tokens_over_replay = x.replay_us / x.us_per_token;
    x.tokens_over_packed = x.packed_us / x.us_per_token;
    return x;
}

static void print_verify_header(void)
{
    printf("%-4s %-5s %3s %5s %2s %4s %2s %3s | %10s | %10s %6s %6s | %9s %6s | %10s | %10s %7s %7s | %6s | %s\n",
           "gate", "state", "L", "batch", "T", "acc%", "k", "win", "replay us", "verify us", "/step", "/T",
           "accept us", "%step", "fold us", "us/token", "xreplay", "xpacked", "spread", "status");
}

static void print_verify_row(const verify_row *v)
{
    char wn[16], ru[16], vu[16], vs[16], vt[16], au[16], ap[16], fu[16], tu[16], tr[16], tp[16], sd[16];
    const verify_figures x = verify_figures_of(v);
    fmt(wn, sizeof wn, "%.0f", v->v.windows ? (double)v->v.windows : NAN);
    fmt(ru, sizeof ru, "%.1f", x.replay_us);
    fmt(vu, sizeof vu, "%.1f", x.verify_us);
    fmt(vs, sizeof vs, "%.2fx", x.over_replay);
    fmt(vt, sizeof vt, "%.2fx", x.over_t_replay);
    fmt(au, sizeof au, "%.2f", x.accept_us);
    fmt(ap, sizeof ap, "%.2f%%", x.accept_pct_of_step);
    fmt(fu, sizeof fu, "%.1f", x.fold_us);
    fmt(tu, sizeof tu, "%.1f", x.us_per_token);
    fmt(tr, sizeof tr, "%.2fx", x.tokens_over_replay);
    fmt(tp, sizeof tp, "%.2fx", x.tokens_over_packed);
    fmt(sd, sizeof sd, "%.3f", v->v.seconds / v->v.min_seconds);
    printf("%-4s %-5s %3u %5u %2u %3u%% %2u %3s | %10s | %10s %6s %6s | %9s %6s | %10s | %10s %7s %7s | %6s | %s%s%s\n",
           v->base->gate, v->base->state, v->base->L, v->base->batch, v->T, v->accept_pct, v->k, wn, ru, vu,
           vs, vt, au, ap, fu, tu, tr, tp, sd, v->status, v->note[0] ? ": " : "", v->note);
    fflush(stdout);
}

static void json_num(FILE *f, const char *key, double x, int comma)
{
    if (isnan(x) || isinf(x))
        fprintf(f, "\"%s\": null%s", key, comma ? ", " : "");
    else
        fprintf(f, "\"%s\": %.6g%s", key, x, comma ? ", " : "");
}

static void json_str(FILE *f, const char *key, const char *s, int comma)
{
    fprintf(f, "\"%s\": \"", key);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
    }
    fprintf(f, "\"%s", comma ? ", " : "");
}

/* PREFIX-verify.csv: the verify rows, apart from PREFIX.csv, whose columns
 * its readers know. */
static int write_verify_csv(const char *prefix, const verify_row *rows, size_t n, const char *backend,
                            const bench_opts *o)
{
    char path[4096];
    snprintf(path, sizeof path, "%s-verify.csv", prefix);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 0;
    }
    fprintf(f, "backend,gate,state_dtype,ring_dtype,io_dtype,ring_len,batch,layers,replay_positions,draft_tokens,"
               "accept_pct,accepted,windows,status,replay_us,packed_us,verify_us,verify_min_us,verify_over_replay,"
               "verify_over_t_replay,accept_us,accept_pct_of_step,fold_us,us_per_token,tokens_over_replay,"
               "tokens_over_packed,note\n");
    for (size_t i = 0; i < n; i++) {
        const verify_row *v = &rows[i];
        const result_row *r = v->base;
        const verify_figures x = verify_figures_of(v);
        fprintf(f, "%s,%s,%s,%s,%s,%u,%u,%u,%s,%u,%u,%u,%u,%s,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,"
                   "%.4g,\"%s\"\n",
                backend, r->gate, r->state, rssm_dtype_name(o->ring_dtype), rssm_dtype_name(o->io_dtype), r->L,
                r->batch, r->layers, r->positions, v->T, v->accept_pct, v->k, v->v.windows, v->status, x.replay_us,
                x.packed_us, x.verify_us, x.verify_min_us, x.over_replay, x.over_t_replay, x.accept_us,
                x.accept_pct_of_step, x.fold_us, x.us_per_token, x.tokens_over_replay, x.tokens_over_packed, v->note);
    }
    return fclose(f) == 0;
}

/* The "verify" array of PREFIX.json: a key of its own, so the readers of
 * "rows" see what they saw before. */
static void json_verify_rows(FILE *f, const verify_row *rows, size_t n)
{
    fprintf(f, " \"verify\": [\n");
    for (size_t i = 0; i < n; i++) {
        const verify_row *v = &rows[i];
        const result_row *r = v->base;
        const verify_figures x = verify_figures_of(v);
        fprintf(f, "  {");
        json_str(f, "gate", r->gate, 1);
        json_str(f, "state_dtype", r->state, 1);
        fprintf(f, "\"ring_len\": %u, \"batch\": %u, \"layers\": %u, ", r->L, r->batch, r->layers);
        json_str(f, "replay_positions", r->positions, 1);
        fprintf(f, "\"draft_tokens\": %u, \"accept_pct\": %u, \"accepted\": %u, ", v->T, v->accept_pct, v->k);
        json_num(f, "windows", v->v.windows ? (double)v->v.windows : NAN, 1);
        json_str(f, "status", v->status, 1);
        json_str(f, "note", v->note, 1);
        json_num(f, "replay_us", x.replay_us, 1);
        json_num(f, "packed_us", x.packed_us, 1);
        json_num(f, "verify_us", x.verify_us, 1);
        json_num(f, "verify_min_us", x.verify_min_us, 1);
        json_num(f, "verify_over_replay", x.over_replay, 1);
        json_num(f, "verify_over_t_replay", x.over_t_replay, 1);
        json_num(f, "accept_us", x.accept_us, 1);
        json_num(f, "accept_pct_of_step", x.accept_pct_of_step, 1);
        json_num(f, "fold_us", x.fold_us, 1);
        json_num(f, "us_per_token", x.us_per_token, 1);
        json_num(f, "tokens_over_replay", x.tokens_over_replay, 1);
        json_num(f, "tokens_over_packed", x.tokens_over_packed, 0);
        fprintf(f, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, " ]\n");
}

static int write_outputs(const char *prefix, const result_row *rows, size_t n, const verify_row *vrows, size_t nv,
                         const char *backend, const char *device, const bench_opts *o, double copy_bps,
                         const rh_state_size *size, double elapsed_s)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.csv", prefix);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 0;
    }
    fprintf(f, "backend,gate,state_dtype,ring_dtype,io_dtype,ring_len,batch,positions,layers,status,"
               "packed_us,packed_gbs,packed_pct_copy,inplace_us,replay_us,replay_gbs,replay_pct_copy,speedup,"
               "empty_us,full_us,flush_us,copy_gbs,packed_min_us,replay_min_us,note,packed_layer_us,"
               "replay_layer_us,above_bound\n");
    for (size_t i = 0; i < n; i++) {
        const result_row *r = &rows[i];
        double pus = us_per_step(&r->packed), rus = us_per_step(&r->replay);
        fprintf(f, "%s,%s,%s,%s,%s,%u,%u,%s,%u,%s,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,"
                   "\"%s\",%.4g,%.4g,%d\n",
                backend, r->gate, r->state, rssm_dtype_name(o->ring_dtype), rssm_dtype_name(o->io_dtype), r->L,
                r->batch, r->positions, r->layers, r->status, pus, gbs(&r->packed),
                100.0 * gbs(&r->packed) * 1e9 / copy_bps, inplace_us(&r->packed), rus, gbs(&r->replay),
                100.0 * gbs(&r->replay) * 1e9 / copy_bps, pus / rus, pos_us(&r->replay, 0), pos_us(&r->replay, 1),
                pos_us(&r->replay, 2), copy_bps / 1e9, min_us_per_step(&r->packed), min_us_per_step(&r->replay),
                r->note, pus / r->layers, rus / r->layers, above_bound(r, copy_bps));
    }
    int ok = fclose(f) == 0;
    snprintf(path, sizeof path, "%s.json", prefix);
    if (!(f = fopen(path, "w"))) {
        perror(path);
        return 0;
    }
    fprintf(f, "{");
    json_str(f, "backend", backend, 1);
    json_str(f, "device", device, 1);
    json_num(f, "copy_gbs", copy_bps / 1e9, 1);
    json_str(f, "ring_dtype", rssm_dtype_name(o->ring_dtype), 1);
    json_str(f, "io_dtype", rssm_dtype_name(o->io_dtype), 1);
    json_str(f, "gate_mode", rssm_gate_mode_name(o->gate_mode), 1);
    fprintf(f, "\"cycles\": %u, \"state_mib\": %u, \"seed\": %llu, \"sm_limit\": %u,\n ", o->cycles, o->state_mib,
            (unsigned long long)o->seed, o->sm_limit);
    /* The cpu backend's state size and why (bench_size.h); null elsewhere. */
    static const char *const bounds[] = {"", "time budget", "memory"};
    json_num(f, "llc_mib", size ? (double)size->llc_mib : NAN, 1);
    json_num(f, "state_wanted_mib", size ? (double)size->wanted_mib : NAN, 1);
    json_str(f, "state_bound", size ? bounds[size->bound] : "", 1);
    fprintf(f, "\"state_within_llc\": %s, ", size && size->within_llc ? "true" : "false");
    json_num(f, "estimated_s", size && size->estimated_s > 0 ? size->estimated_s : NAN, 1);
    json_num(f, "elapsed_s", elapsed_s, 0);
    fprintf(f, ",\n \"rows\": [\n");
    for (size_t i = 0; i < n; i++) {
        const result_row *r = &rows[i];
        double pus = us_per_step(&r->packed), rus = us_per_step(&r->replay);
        fprintf(f, "  {");
        json_str(f, "gate", r->gate, 1);
        json_str(f, "state_dtype", r->state, 1);
        fprintf(f, "\"ring_len\": %u, \"batch\": %u, \"layers\": %u, ", r->L, r->batch, r->layers);
        json_str(f, "positions", r->positions, 1);
        json_str(f, "status", r->status, 1);
        json_str(f, "note", r->note, 1);
        json_num(f, "packed_us", pus, 1);
        json_num(f, "packed_gbs", gbs(&r->packed), 1);
        json_num(f, "inplace_us", inplace_us(&r->packed), 1);
        json_num(f, "packed_min_us", min_us_per_step(&r->packed), 1);
        json_num(f, "replay_us", rus, 1);
        json_num(f, "replay_min_us", min_us_per_step(&r->replay), 1);
        json_num(f, "replay_gbs", gbs(&r->replay), 1);
        json_num(f, "speedup", pus / rus, 1);
        json_num(f, "empty_us", pos_us(&r->replay, 0), 1);
        json_num(f, "full_us", pos_us(&r->replay, 1), 1);
        json_num(f, "flush_us", pos_us(&r->replay, 2), 1);
        json_num(f, "packed_layer_us", pus / r->layers, 1);
        json_num(f, "replay_layer_us", rus / r->layers, 1);
        fprintf(f, "\"above_bound\": %s", above_bound(r, copy_bps) ? "true" : "false");
        fprintf(f, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, " ],\n");
    json_verify_rows(f, vrows, nv);
    fprintf(f, "}\n");
    ok = (fclose(f) == 0) && ok;
    if (nv > 0)
        ok = write_verify_csv(prefix, vrows, nv, backend, o) && ok;
    if (ok)
        printf("\nwrote %s.csv%s%s%s and %s.json\n", prefix, nv ? ", " : "", nv ? prefix : "",
               nv ? "-verify.csv" : "", prefix);
    return ok;
}

int cmd_bench(int argc, char **argv)
{
    const char *cmd = "bench";
    static const char *const gate_words[] = {"gdn", "kda"};
    static const char *const state_words[] = {"fp32", "bf16"};
    static const char *const pos_words[] = {"uniform", "staggered"};
    bench_opts o = {
        .batch = {1, 16, 64}, .nbatch = 3,
        .ring_len = {8, 16}, .nring = 2,
        .gate = {RSSM_GATE_GDN, RSSM_GATE_KDA}, .ngate = 2,
        .state = {RSSM_DTYPE_F32, RSSM_DTYPE_BF16}, .nstate = 2,
        .ring_dtype = RSSM_DTYPE_F16, .io_dtype = RSSM_DTYPE_BF16, .gate_mode = RSSM_GATE_RAW,
        .positions = {0, 1}, .npos = 2,
        .cycles = 3, .state_mib = 0, .seed = 1,
        .accept_pct = {100, 50}, .naccept = 2,
    };
    const char *backend = "auto", *out = NULL;
    int quick = 0, set_batch = 0, set_ring = 0, set_state = 0, set_cycles = 0, set_accept = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int k, idx[4];
        size_t n;
        if (cli_flag(argv[i], "--help") || cli_flag(argv[i], "-h")) {
            help();
            return 0;
        } else if (cli_flag(argv[i], "--quick")) {
            quick = 1;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--backend", &v)) != 0) {
            if (k < 0)
                return CLI_USAGE;
            backend = v;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--out", &v)) != 0) {
            if (k < 0)
                return CLI_USAGE;
            out = v;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--batch", &v)) != 0) {
            if (k < 0 || !cli_u32_list(cmd, "--batch", v, o.batch, MAX_LIST, &o.nbatch))
                return CLI_USAGE;
            for (size_t j = 0; j < o.nbatch; j++)
                if (o.batch[j] == 0 || o.batch[j] > 65536) {
                    fprintf(stderr, "rssm bench: --batch: %u is not in 1..65536\n", o.batch[j]);
                    return CLI_USAGE;
                }
            set_batch = 1;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--ring-len", &v)) != 0) {
            if (k < 0 || !cli_u32_list(cmd, "--ring-len", v, o.ring_len, MAX_LIST, &o.nring))
                return CLI_USAGE;
            for (size_t j = 0; j < o.nring; j++)
                if (o.ring_len[j] == 0 || o.ring_len[j] > RSSM_MAX_RING_LEN) {
                    fprintf(stderr, "rssm bench: --ring-len: %u is not in 1..%u\n", o.ring_len[j],
                            RSSM_MAX_RING_LEN);
                    return CLI_USAGE;
                }
            set_ring = 1;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--gate", &v)) != 0) {
            if (k < 0 || !cli_word_list(cmd, "--gate", v, gate_words, 2, idx, &n))
                return CLI_USAGE;
            o.ngate = n;
            for (size_t j = 0; j < n; j++)
                o.gate[j] = idx[j] ? RSSM_GATE_KDA : RSSM_GATE_GDN;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--state", &v)) != 0) {
            if (k < 0 || !cli_word_list(cmd, "--state", v, state_words, 2, idx, &n))
                return CLI_USAGE;
            o.nstate = n;
            for (size_t j = 0; j < n; j++)
                o.state[j] = idx[j] ? RSSM_DTYPE_BF16 : RSSM_DTYPE_F32;
            set_state = 1;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--positions", &v)) != 0) {
            if (k < 0 || !cli_word_list(cmd, "--positions", v, pos_words, 2, idx, &n))
                return CLI_USAGE;
            o.npos = n;
            for (size_t j = 0; j < n; j++)
                o.positions[j] = idx[j];
        } else if ((k = cli_value(cmd, argc, argv, &i, "--ring-dtype", &v)) != 0) {
            if (k < 0 || !parse_dtype(cmd, "--ring-dtype", v, &o.ring_dtype))
                return CLI_USAGE;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--io", &v)) != 0) {
            if (k < 0 || !parse_dtype(cmd, "--io", v, &o.io_dtype))
                return CLI_USAGE;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--gate-mode", &v)) != 0) {
            if (k < 0 || !parse_gate_mode(cmd, v, &o.gate_mode))
                return CLI_USAGE;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--cycles", &v)) != 0) {
            if (k < 0 || !cli_u32(cmd, "--cycles", v, &o.cycles))
                return CLI_USAGE;
            if (o.cycles == 0 || o.cycles > 1000) {
                fprintf(stderr, "rssm bench: --cycles must be in 1..1000\n");
                return CLI_USAGE;
            }
            set_cycles = 1;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--state-mib", &v)) != 0) {
            if (k < 0 || !cli_u32(cmd, "--state-mib", v, &o.state_mib))
                return CLI_USAGE;
            if (o.state_mib == 0 || o.state_mib > 65536) {
                fprintf(stderr, "rssm bench: --state-mib must be in 1..65536\n");
                return CLI_USAGE;
            }
        } else if ((k = cli_value(cmd, argc, argv, &i, "--llc-mib", &v)) != 0) {
            if (k < 0 || !cli_u32(cmd, "--llc-mib", v, &o.llc_mib))
                return CLI_USAGE;
            if (o.llc_mib == 0 || o.llc_mib > 65536) {
                fprintf(stderr, "rssm bench: --llc-mib must be in 1..65536\n");
                return CLI_USAGE;
            }
        } else if ((k = cli_value(cmd, argc, argv, &i, "--seed", &v)) != 0) {
            if (k < 0 || !cli_u64(cmd, "--seed", v, &o.seed))
                return CLI_USAGE;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--sm-limit", &v)) != 0) {
            if (k < 0 || !cli_u32(cmd, "--sm-limit", v, &o.sm_limit))
                return CLI_USAGE;
            if (o.sm_limit == 0 || o.sm_limit > 65536) {
                fprintf(stderr, "rssm bench: --sm-limit must be in 1..65536\n");
                return CLI_USAGE;
            }
        } else if ((k = cli_value(cmd, argc, argv, &i, "--verify", &v)) != 0) {
            if (k < 0 || !cli_u32_list(cmd, "--verify", v, o.drafts, MAX_LIST, &o.ndrafts))
                return CLI_USAGE;
            /* A window of one token is bit for bit a step (docs/design.md
             * §9), which the first table times already. */
            for (size_t j = 0; j < o.ndrafts; j++)
                if (o.drafts[j] < 2 || o.drafts[j] > RSSM_MAX_DRAFT) {
                    fprintf(stderr, "rssm bench: --verify: %u draft tokens is not in 2..%u\n", o.drafts[j],
                            RSSM_MAX_DRAFT);
                    return CLI_USAGE;
                }
        } else if ((k = cli_value(cmd, argc, argv, &i, "--accept", &v)) != 0) {
            if (k < 0 || !cli_u32_list(cmd, "--accept", v, o.accept_pct, MAX_LIST, &o.naccept))
                return CLI_USAGE;
            for (size_t j = 0; j < o.naccept; j++)
                if (o.accept_pct[j] > 100) {
                    fprintf(stderr, "rssm bench: --accept: %u%% is not in 0..100\n", o.accept_pct[j]);
                    return CLI_USAGE;
                }
            set_accept = 1;
        } else {
            return cli_unknown(cmd, argv[i]);
        }
    }
    if (set_accept && o.ndrafts == 0) {
        fprintf(stderr, "rssm bench: --accept needs --verify\n");
        return CLI_USAGE;
    }
    if (quick) { /* explicit options still win */
        if (!set_batch) {
            o.batch[0] = 1, o.batch[1] = 16;
            o.nbatch = 2;
        }
        if (!set_ring) {
            o.ring_len[0] = 16;
            o.nring = 1;
        }
        if (!set_state)
            o.nstate = 1;
    }

    rssm_backend *b = NULL;
    rssm_error err;
    rssm_status st = rssm_backend_create(backend, &b, &err);
    if (st != RSSM_OK) {
        fprintf(stderr, "rssm bench: cannot start backend '%s': %s\n", backend, err.message);
        return st == RSSM_ERR_INVALID_ARGUMENT ? CLI_USAGE : 1;
    }
    const char *bname = rssm_backend_name(b);
    if (o.sm_limit && (st = rssm_backend_limit_sms(b, o.sm_limit, &err)) != RSSM_OK) {
        fprintf(stderr, "rssm bench: --sm-limit: %s\n", err.message);
        rssm_backend_destroy(&b);
        return st == RSSM_ERR_UNSUPPORTED ? CLI_USAGE : 1;
    }
    /* The default state size must beat the last-level cache: for the cpu
     * backend four times the one this machine reports, at least 64 MiB,
     * and in --quick no more than its steps move within a time budget
     * (bench_size.h: a machine that reports a 480 MiB cache had the quick
     * run take 335 s at 1920 MiB, most of tools/run's ten minutes;
     * docs/bench.md); on a GPU 256 MiB (an H200's L2 alone is 60 MB),
     * with three timed cycles. Mesa's llvmpipe Vulkan driver runs on the
     * CPU as a functional stand-in for a GPU, not as something to measure
     * (docs/bench.md): 64 MiB, and in --quick 32 MiB and one cycle, as its
     * runs are slow and its buffers bind at most 128 MiB (one slot of a
     * deeper model would not fit). */
    const int cpu = strncmp(bname, "cpu", 3) == 0;
    const int llvmpipe = strstr(rssm_backend_device(b), "llvmpipe") != NULL;
    if (quick && !set_cycles)
        o.cycles = llvmpipe ? 1 : 3;
    if (o.llc_mib && !cpu) {
        fprintf(stderr, "rssm bench: --llc-mib sizes the cpu backend's state; %s sizes its own\n", bname);
        rssm_backend_destroy(&b);
        return CLI_USAGE;
    }
    const double t_start = rssm_now_seconds();
    rh_state_size size = {0};
    double copy_bps = NAN;
    if ((st = pick_state_mib(b, &o, quick, cpu, llvmpipe, &size, &copy_bps, &err)) != RSSM_OK) {
        fprintf(stderr, "rssm bench: copy bandwidth: %s\n", err.message);
        rssm_backend_destroy(&b);
        return 1;
    }
    const double target = (double)o.state_mib * 1048576.0;
    printf("backend %s (%s)\ncopy bandwidth %.2f GB/s over %u MiB buffers (read + write)\n", bname,
           rssm_backend_device(b), copy_bps / 1e9, o.state_mib);
    if (cpu)
        print_state_size(&size);
    if (o.sm_limit)
        printf("kernels and in-place bound planned for at most %u multiprocessors (--sm-limit)\n", o.sm_limit);
    printf("ring %s, io %s, gates %s, median of %u timed run(s) per program, >= %u MiB of state per step\n"
           "us are per step (all layers); packed/l, replay/l = us per step per layer; inplace = one\n"
           "read + write of the packed state pool, %%inpl = inplace / packed; speedup = packed us /\n"
           "replay us (amortised over whole cycles); empty / full / flush = packed us / replay us of the\n"
           "step with an empty ring, a full ring (n = L-2), and the flush; a percentage above 100 (!) is\n"
           "above its physical bound: the state was served from a cache, or the timing is off\n\n",
           rssm_dtype_name(o.ring_dtype), rssm_dtype_name(o.io_dtype), rssm_gate_mode_name(o.gate_mode), o.cycles,
           o.state_mib);
    print_table_header();

    size_t cap = o.ngate * o.nstate * o.nbatch * o.nring * o.npos;
    result_row *rows = calloc(cap ? cap : 1, sizeof *rows);
    size_t nrows = 0;
    int failed = 0;
    uint32_t max_L = 1;
    for (size_t i = 0; i < o.nring; i++)
        max_L = o.ring_len[i] > max_L ? o.ring_len[i] : max_L;
    /* The verify rows measure against the uniform row of their shape and
     * L, as their windows are at uniform positions; else the first row. */
    size_t verify_pi = 0;
    for (size_t pi = o.npos; pi-- > 0;)
        if (o.positions[pi] == 0)
            verify_pi = pi;
    for (size_t gi = 0; gi < o.ngate && rows; gi++) {
        for (size_t si = 0; si < o.nstate; si++) {
            for (size_t bi = 0; bi < o.nbatch; bi++) {
                const uint32_t B = o.batch[bi];
                rssm_model base;
                rssm_model_preset(&base, o.gate[gi] == RSSM_GATE_KDA ? "kimi-linear-kda" : "qwen3.5-gdn", NULL);
                base.state_dtype = o.state[si];
                base.ring_dtype = o.ring_dtype;
                base.io_dtype = o.io_dtype;
                base.gate_mode = o.gate_mode;
                base.layers = pick_layers(&base, B, target);
                /* The packed baseline, shared by every L and position mode. */
                rssm_model packed = base;
                packed.replay = 0;
                timing pt;
                timing_clear(&pt);
                const char *pstatus = "ok";
                char pnote[512] = "";
                rh_verdict v = check_config(b, &packed, B, RSSM_FLUSH_ALIGNED, 0, o.seed, pnote, sizeof pnote);
                if (v != RH_PASS) {
                    pstatus = v == RH_SKIP ? "unsupported" : "incorrect";
                } else if (time_model(b, &packed, B, RSSM_FLUSH_ALIGNED, max_L, 0, o.cycles, o.seed, &pt, &err) !=
                           RSSM_OK) {
                    pstatus = "error";
                    snprintf(pnote, sizeof pnote, "packed: %s", err.message);
                }
                for (size_t li = 0; li < o.nring; li++) {
                    for (size_t pi = 0; pi < o.npos; pi++) {
                        result_row *r = &rows[nrows++];
                        rssm_model m = base;
                        m.ring_len = o.ring_len[li];
                        rssm_flush_policy pol = o.positions[pi] ? RSSM_FLUSH_STAGGERED : RSSM_FLUSH_ALIGNED;
                        r->gate = gate_words[o.gate[gi] == RSSM_GATE_KDA];
                        r->state = state_words[o.state[si] == RSSM_DTYPE_BF16];
                        r->positions = pos_words[o.positions[pi]];
                        r->L = m.ring_len;
                        r->batch = B;
                        r->layers = m.layers;
                        r->packed = pt;
                        r->model = m;
                        r->verify_base = pi == verify_pi;
                        timing_clear(&r->replay);
                        r->status = pstatus;
                        snprintf(r->note, sizeof r->note, "%s", pnote);
                        if (strcmp(pstatus, "ok") == 0) {
                            v = check_config(b, &m, B, pol, 0, o.seed, r->note, sizeof r->note);
                            if (v != RH_PASS) {
                                r->status = v == RH_SKIP ? "unsupported" : "incorrect";
                            } else if (time_model(b, &m, B, pol, m.ring_len, o.positions[pi] == 0, o.cycles,
                                                  o.seed, &r->replay, &err) != RSSM_OK) {
                                r->status = "error";
                                snprintf(r->note, sizeof r->note, "replay: %s", err.message);
                            }
                        }
                        if (strcmp(r->status, "ok") != 0 && strcmp(r->status, "unsupported") != 0)
                            failed = 1;
                        print_table_row(r, copy_bps);
                    }
                }
            }
        }
    }
    /* The verify table (docs/bench.md, "Verify"): each row times the shape
     * and L of a row above against that row's replay and packed timings. */
    const size_t vcap = o.ngate * o.nstate * o.nbatch * o.nring * o.ndrafts * o.naccept;
    verify_row *vrows = vcap && rows ? calloc(vcap, sizeof *vrows) : NULL;
    size_t nv = 0;
    if (vcap && rows && vrows) {
        printf("\nverify: T draft tokens per row, k = acc%% of T of them accepted; per cycle, win windows at ring\n"
               "positions 0, k, 2k, ... (uniform) while they fit; medians of %u timed cycle(s). verify us =\n"
               "device us of one window (all layers); /step, /T = verify us over one replay step, over T of\n"
               "them (replay us, as above); accept us = rssm_pool_accept, wall clock; %%step = accept us /\n"
               "replay us; fold us = the device fold of the full ring a cycle starts with (its first window's\n"
               "excess over the others), per window, within verify us; us/token = (verify us + accept us) / k,\n"
               "per row; xreplay,\n"
               "xpacked = replay us, packed us over us/token (token throughput against single-token decode)\n\n",
               o.cycles);
        print_verify_header();
    }
    const int warm = !cpu && !llvmpipe; /* a GPU, whose clocks ramp up */
    for (size_t i = 0; vrows && i < nrows; i++) {
        const result_row *r = &rows[i];
        if (!r->verify_base)
            continue;
        for (size_t ti = 0; ti < o.ndrafts; ti++) {
            const uint32_t T = o.drafts[ti];
            const char *status = "ok";
            char note[512] = "";
            if (strcmp(r->status, "ok") != 0) {
                status = "skipped";
                snprintf(note, sizeof note, "the replay row is %s", r->status);
            } else if (T > r->L - 1) {
                status = "unsupported";
                snprintf(note, sizeof note, "T = %u needs L >= %u: a window's tokens stay below the flush", T,
                         T + 1);
            } else {
                const rh_verdict v =
                    check_config(b, &r->model, r->batch, RSSM_FLUSH_ALIGNED, T, o.seed, note, sizeof note);
                if (v != RH_PASS)
                    status = v == RH_SKIP ? "unsupported" : "incorrect";
            }
            for (size_t ai = 0; ai < o.naccept; ai++) {
                verify_row *vr = &vrows[nv++];
                vr->base = r;
                vr->T = T;
                vr->accept_pct = o.accept_pct[ai];
                vr->k = (T * vr->accept_pct + 50) / 100;
                vr->status = status;
                snprintf(vr->note, sizeof vr->note, "%s", note);
                verify_timing_clear(&vr->v);
                if (strcmp(status, "ok") == 0 &&
                    time_verify(b, &r->model, r->batch, T, vr->k, o.cycles, warm, o.seed, &vr->v, &err) != RSSM_OK) {
                    vr->status = "error";
                    snprintf(vr->note, sizeof vr->note, "verify: %s", err.message);
                }
                if (strcmp(vr->status, "incorrect") == 0 || strcmp(vr->status, "error") == 0)
                    failed = 1;
                print_verify_row(vr);
            }
        }
    }
    const double elapsed = rssm_now_seconds() - t_start;
    if (cpu && size.estimated_s > 0)
        printf("\nthe run took %.0f s; its state was sized for about %.0f s of timed steps\n", elapsed,
               size.estimated_s);
    int ok = 1;
    if (out && rows && (vrows || !vcap))
        ok = write_outputs(out, rows, nrows, vrows, nv, bname, rssm_backend_device(b), &o, copy_bps,
                           cpu ? &size : NULL, elapsed);
    const int oom = !rows || (vcap && !vrows);
    if (oom)
        fprintf(stderr, "rssm bench: out of memory\n");
    free(vrows);
    free(rows);
    rssm_backend_destroy(&b);
    return failed || !ok || oom ? 1 : 0;
}
