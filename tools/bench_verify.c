/* Speculative-decode verify windows in `rssm bench --verify` (docs/bench.md,
 * "Verify"): whole verify cycles timed as a decoder runs them, against the
 * step table's replay and packed rows of the same run; their table, CSV
 * and JSON rows. */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"

#include "dtype.h"
#include "error.h"
#include "timing.h"

#include <stdlib.h>
#include <string.h>

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
    x.replay_us = bench_us_per_step(&v->base->replay);
    x.packed_us = bench_us_per_step(&v->base->packed);
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
    bench_fmt(wn, sizeof wn, "%.0f", v->v.windows ? (double)v->v.windows : NAN);
    bench_fmt(ru, sizeof ru, "%.1f", x.replay_us);
    bench_fmt(vu, sizeof vu, "%.1f", x.verify_us);
    bench_fmt(vs, sizeof vs, "%.2fx", x.over_replay);
    bench_fmt(vt, sizeof vt, "%.2fx", x.over_t_replay);
    bench_fmt(au, sizeof au, "%.2f", x.accept_us);
    bench_fmt(ap, sizeof ap, "%.2f%%", x.accept_pct_of_step);
    bench_fmt(fu, sizeof fu, "%.1f", x.fold_us);
    bench_fmt(tu, sizeof tu, "%.1f", x.us_per_token);
    bench_fmt(tr, sizeof tr, "%.2fx", x.tokens_over_replay);
    bench_fmt(tp, sizeof tp, "%.2fx", x.tokens_over_packed);
    bench_fmt(sd, sizeof sd, "%.3f", v->v.seconds / v->v.min_seconds);
    printf("%-4s %-5s %3u %5u %2u %3u%% %2u %3s | %10s | %10s %6s %6s | %9s %6s | %10s | %10s %7s %7s | %6s | %s%s%s\n",
           v->base->gate, v->base->state, v->base->L, v->base->batch, v->T, v->accept_pct, v->k, wn, ru, vu,
           vs, vt, au, ap, fu, tu, tr, tp, sd, v->status, v->note[0] ? ": " : "", v->note);
    fflush(stdout);
}

size_t bench_verify_table(rssm_backend *b, const bench_opts *o, const result_row *rows, size_t nrows, int warm,
                          verify_row *vrows, int *failed)
{
    printf("\nverify: T draft tokens per row, k = acc%% of T of them accepted; per cycle, win windows at ring\n"
           "positions 0, k, 2k, ... (uniform) while they fit; medians of %u timed cycle(s). verify us =\n"
           "device us of one window (all layers); /step, /T = verify us over one replay step, over T of\n"
           "them (replay us, as above); accept us = rssm_pool_accept, wall clock; %%step = accept us /\n"
           "replay us; fold us = the device fold of the full ring a cycle starts with (its first window's\n"
           "excess over the others), per window, within verify us; us/token = (verify us + accept us) / k,\n"
           "per row; xreplay,\n"
           "xpacked = replay us, packed us over us/token (token throughput against single-token decode)\n\n",
           o->cycles);
    print_verify_header();
    size_t nv = 0;
    rssm_error err;
    for (size_t i = 0; i < nrows; i++) {
        const result_row *r = &rows[i];
        if (!r->verify_base)
            continue;
        for (size_t ti = 0; ti < o->ndrafts; ti++) {
            const uint32_t T = o->drafts[ti];
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
                    bench_check_config(b, &r->model, r->batch, RSSM_FLUSH_ALIGNED, T, o->seed, note, sizeof note);
                if (v != RH_PASS)
                    status = v == RH_SKIP ? "unsupported" : "incorrect";
            }
            for (size_t ai = 0; ai < o->naccept; ai++) {
                verify_row *vr = &vrows[nv++];
                vr->base = r;
                vr->T = T;
                vr->accept_pct = o->accept_pct[ai];
                vr->k = (T * vr->accept_pct + 50) / 100;
                vr->status = status;
                snprintf(vr->note, sizeof vr->note, "%s", note);
                verify_timing_clear(&vr->v);
                if (strcmp(status, "ok") == 0 &&
                    time_verify(b, &r->model, r->batch, T, vr->k, o->cycles, warm, o->seed, &vr->v, &err) != RSSM_OK) {
                    vr->status = "error";
                    snprintf(vr->note, sizeof vr->note, "verify: %s", err.message);
                }
                if (strcmp(vr->status, "incorrect") == 0 || strcmp(vr->status, "error") == 0)
                    *failed = 1;
                print_verify_row(vr);
            }
        }
    }
    return nv;
}

int bench_verify_csv(const char *prefix, const verify_row *rows, size_t n, const char *backend, const bench_opts *o)
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

void bench_verify_json(FILE *f, const verify_row *rows, size_t n)
{
    fprintf(f, " \"verify\": [\n");
    for (size_t i = 0; i < n; i++) {
        const verify_row *v = &rows[i];
        const result_row *r = v->base;
        const verify_figures x = verify_figures_of(v);
        fprintf(f, "  {");
        bench_json_str(f, "gate", r->gate, 1);
        bench_json_str(f, "state_dtype", r->state, 1);
        fprintf(f, "\"ring_len\": %u, \"batch\": %u, \"layers\": %u, ", r->L, r->batch, r->layers);
        bench_json_str(f, "replay_positions", r->positions, 1);
        fprintf(f, "\"draft_tokens\": %u, \"accept_pct\": %u, \"accepted\": %u, ", v->T, v->accept_pct, v->k);
        bench_json_num(f, "windows", v->v.windows ? (double)v->v.windows : NAN, 1);
        bench_json_str(f, "status", v->status, 1);
        bench_json_str(f, "note", v->note, 1);
        bench_json_num(f, "replay_us", x.replay_us, 1);
        bench_json_num(f, "packed_us", x.packed_us, 1);
        bench_json_num(f, "verify_us", x.verify_us, 1);
        bench_json_num(f, "verify_min_us", x.verify_min_us, 1);
        bench_json_num(f, "verify_over_replay", x.over_replay, 1);
        bench_json_num(f, "verify_over_t_replay", x.over_t_replay, 1);
        bench_json_num(f, "accept_us", x.accept_us, 1);
        bench_json_num(f, "accept_pct_of_step", x.accept_pct_of_step, 1);
        bench_json_num(f, "fold_us", x.fold_us, 1);
        bench_json_num(f, "us_per_token", x.us_per_token, 1);
        bench_json_num(f, "tokens_over_replay", x.tokens_over_replay, 1);
        bench_json_num(f, "tokens_over_packed", x.tokens_over_packed, 0);
        fprintf(f, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, " ]\n");
}
