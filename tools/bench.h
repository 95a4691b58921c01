/* What the files of `rssm bench` share (docs/bench.md): its options, what
 * a timed configuration measured, a row of each table, the small
 * conversions and writers every table uses, and each file's entry points.
 * Lowest first: bench_programs.c (the timed programs and their checks),
 * bench_verify.c (the speculative-decode windows: timed, their table and
 * files), cmd_bench.c (the options, the sweep, the step table and the
 * files); a file calls only those before it. */
#ifndef RSSM_BENCH_H
#define RSSM_BENCH_H

#include "bench_size.h"
#include "conform.h"

#include "rssm.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_MAX_LIST 16

typedef struct bench_opts {
    uint32_t batch[BENCH_MAX_LIST], ring_len[BENCH_MAX_LIST];
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
    uint32_t drafts[BENCH_MAX_LIST], accept_pct[BENCH_MAX_LIST]; /* --verify, --accept */
    size_t ndrafts, naccept;                                     /* ndrafts 0: no verify rows */
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

/* Random, non-zero step inputs for `rows` rows in host memory. */
typedef struct host_inputs {
    void *q, *k, *v;
    float *gate, *beta;
    rssm_step_inputs in;
} host_inputs;

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

/* ---- conversions and writers every table uses: µs from a timing, a
 * figure for the table, a JSON field */

static inline double bench_us_per_step(const timing *t) { return t->steps ? 1e6 * t->seconds / t->steps : NAN; }
static inline double bench_gbs(const timing *t) { return t->seconds > 0 ? t->bytes / t->seconds / 1e9 : NAN; }
static inline double bench_inplace_us(const timing *t) { return 1e6 * t->inplace_seconds; }
static inline double bench_min_us_per_step(const timing *t)
{
    return t->steps ? 1e6 * t->min_seconds / t->steps : NAN;
}
static inline double bench_pos_us(const timing *t, int i) { return 1e6 * t->pos_seconds[i]; }

/* x with format f, or "-" where it was not measured (NaN). */
static inline void bench_fmt(char *buf, size_t n, const char *f, double x)
{
    if (isnan(x))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, f, x);
}

static inline void bench_json_num(FILE *f, const char *key, double x, int comma)
{
    if (isnan(x) || isinf(x))
        fprintf(f, "\"%s\": null%s", key, comma ? ", " : "");
    else
        fprintf(f, "\"%s\": %.6g%s", key, x, comma ? ", " : "");
}

static inline void bench_json_str(FILE *f, const char *key, const char *s, int comma)
{
    fprintf(f, "\"%s\": \"", key);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
    }
    fprintf(f, "\"%s", comma ? ", " : "");
}

/* ---- bench_programs.c: the timed programs */

/* Every figure of *t not measured (NaN). */
void bench_timing_clear(timing *t);
/* --state-mib when not given, and the copy bandwidth over buffers of that
 * size: on the cpu backend by the cache (bench_size.h), which `size`
 * describes, in --quick within its time budget (the copy bandwidth over
 * the size wanted, up to 1 GiB, past any core's cache, as a probe; then
 * the size the budget allows at it, measured again there if smaller); on
 * a GPU 256 MiB; llvmpipe 64, in --quick 32. */
rssm_status bench_pick_state_mib(rssm_backend *b, bench_opts *o, int quick, int cpu, int llvmpipe,
                                  rh_state_size *size, double *copy_bps, rssm_error *err);
/* The cpu backend's state size, and why: the table's reader must know when
 * the state could not exceed the cache, as its figures may then be the
 * cache's. */
void bench_print_state_size(const rh_state_size *s);
/* Opens *bp (above) for `rows` rows and `tokens` steps of inputs;
 * bench_pool_close frees what it holds. */
rssm_status bench_pool_open(bench_pool *bp, rssm_backend *b, const rssm_model *m, uint32_t rows, uint32_t tokens,
                            rssm_flush_policy policy, uint64_t seed, rssm_error *err);
void bench_pool_close(bench_pool *bp);
/* Times, on a fresh pool of `rows` random slots, a program of `cycle_steps`
 * consecutive steps (whole ring cycles, planned by the pool's scheduler
 * after one cycle that brings a staggered pool to its steady state), and
 * for `positions` the three programs of L steps at one ring position each.
 * A packed model also gets the in-place pass over its pool, which is
 * exactly the state a packed step reads and writes. Each program is
 * recorded once and run 1 + reps times (rssm_batch_time_steps). */
rssm_status bench_time_model(rssm_backend *b, const rssm_model *m, uint32_t rows, rssm_flush_policy policy,
                              uint32_t cycle_steps, int positions, uint32_t reps, uint64_t seed, timing *t,
                              rssm_error *err);
/* One short conformance check of the configuration (one layer, up to four
 * rows, two ring cycles and a bit) against the oracle. With `window` > 0,
 * of its speculative-decode verify instead: eight rounds of a window of up
 * to that many draft tokens and one step (tools/harness/conform_verify.c),
 * as the conformance cases have, so every accept count comes round. */
rh_verdict bench_check_config(rssm_backend *b, const rssm_model *m, uint32_t rows, rssm_flush_policy policy,
                               uint32_t window, uint64_t seed, char *note, size_t size);
/* Layers so that rows x layers x checkpoint bytes >= target. */
uint32_t bench_pick_layers(const rssm_model *m, uint32_t rows, double target);

/* ---- bench_verify.c: the speculative-decode windows (docs/bench.md, "Verify") */

/* The verify table: for every row of rows[0..nrows) that is its shape's
 * verify base (ok or not), each window of o->drafts at each accept rate
 * of o->accept_pct, checked against the oracle, timed against that row's
 * replay and packed steps (on a GPU, `warm`, after its clocks have ramped
 * up) and printed, under the table's header, into vrows (room for
 * o->ndrafts x o->naccept rows per base row). Returns how many it wrote;
 * *failed is set when one is incorrect or an error. */
size_t bench_verify_table(rssm_backend *b, const bench_opts *o, const result_row *rows, size_t nrows, int warm,
                          verify_row *vrows, int *failed);
/* PREFIX-verify.csv: the verify rows, apart from PREFIX.csv, whose columns
 * its readers know. 0 (with a message) when it cannot be written. */
int bench_verify_csv(const char *prefix, const verify_row *rows, size_t n, const char *backend, const bench_opts *o);
/* The "verify" array of PREFIX.json: a key of its own, so the readers of
 * "rows" see what they saw before. */
void bench_verify_json(FILE *f, const verify_row *rows, size_t n);

#endif
