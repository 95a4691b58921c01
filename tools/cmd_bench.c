/* rssm bench: replay against packed decode, timed over whole ring cycles,
 * and (--verify) speculative-decode verify windows against both. Here the
 * options, the sweep, the step table and the files; the timed programs in
 * bench_programs.c, the verify windows in bench_verify.c (bench.h). The
 * method (and the traffic model behind GB/s) is in docs/bench.md. */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"
#include "bench.h"

#include "dtype.h"
#include "rssm_layout.h"
#include "timing.h"

#include <stdlib.h>
#include <string.h>

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

/* How far the median run is above the fastest, the worse of the two kernels. */
static double spread(const result_row *r)
{
    const double p = r->packed.seconds / r->packed.min_seconds, q = r->replay.seconds / r->replay.min_seconds;
    return p > q ? p : q;
}
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
    const double pus = bench_us_per_step(&r->packed), ius = bench_inplace_us(&r->packed);
    return bench_gbs(&r->packed) * 1e9 > copy_bps || bench_gbs(&r->replay) * 1e9 > copy_bps || ius > pus;
}

/* x percent, "!" after it above 100 (above_bound). */
static void fmt_pct(char *buf, size_t n, double x) { bench_fmt(buf, n, x > 100.0 ? "%.0f%%!" : "%.0f%%", x); }

static void print_table_row(const result_row *r, double copy_bps)
{
    char pu[16], pg[16], pp[16], iu[16], ip[16], ru[16], rg[16], rp[16], sp[16], e[16], f[16], fl[16], sd[16];
    char pl[16], rl[16];
    double pus = bench_us_per_step(&r->packed), rus = bench_us_per_step(&r->replay), ius = bench_inplace_us(&r->packed);
    bench_fmt(pu, sizeof pu, "%.1f", pus);
    bench_fmt(pg, sizeof pg, "%.2f", bench_gbs(&r->packed));
    fmt_pct(pp, sizeof pp, 100.0 * bench_gbs(&r->packed) * 1e9 / copy_bps);
    bench_fmt(iu, sizeof iu, "%.1f", ius);
    fmt_pct(ip, sizeof ip, 100.0 * ius / pus);
    bench_fmt(ru, sizeof ru, "%.1f", rus);
    bench_fmt(rg, sizeof rg, "%.2f", bench_gbs(&r->replay));
    fmt_pct(rp, sizeof rp, 100.0 * bench_gbs(&r->replay) * 1e9 / copy_bps);
    bench_fmt(pl, sizeof pl, "%.2f", pus / r->layers);
    bench_fmt(rl, sizeof rl, "%.2f", rus / r->layers);
    bench_fmt(sp, sizeof sp, "%.2fx", pus / rus);
    /* Per-position costs as packed/position: > 1 means faster than packed. */
    bench_fmt(e, sizeof e, "%.2fx", pus / bench_pos_us(&r->replay, 0));
    bench_fmt(f, sizeof f, "%.2fx", pus / bench_pos_us(&r->replay, 1));
    bench_fmt(fl, sizeof fl, "%.2fx", pus / bench_pos_us(&r->replay, 2));
    bench_fmt(sd, sizeof sd, "%.3f", spread(r));
    printf("%-4s %-5s %3u %5u %-9s %6u | %10s %8s %6s %10s %6s | %10s %8s %6s | %7s | %6s %6s %6s | %9s %9s | %6s "
           "| %s%s%s\n",
           r->gate, r->state, r->L, r->batch, r->positions, r->layers, pu, pg, pp, iu, ip, ru, rg, rp, sp, e, f,
           fl, pl, rl, sd, r->status, r->note[0] ? ": " : "", r->note);
    fflush(stdout);
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
        double pus = bench_us_per_step(&r->packed), rus = bench_us_per_step(&r->replay);
        fprintf(f, "%s,%s,%s,%s,%s,%u,%u,%s,%u,%s,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,"
                   "\"%s\",%.4g,%.4g,%d\n",
                backend, r->gate, r->state, rssm_dtype_name(o->ring_dtype), rssm_dtype_name(o->io_dtype), r->L,
                r->batch, r->positions, r->layers, r->status, pus, bench_gbs(&r->packed),
                100.0 * bench_gbs(&r->packed) * 1e9 / copy_bps, bench_inplace_us(&r->packed), rus,
                bench_gbs(&r->replay), 100.0 * bench_gbs(&r->replay) * 1e9 / copy_bps, pus / rus,
                bench_pos_us(&r->replay, 0), bench_pos_us(&r->replay, 1), bench_pos_us(&r->replay, 2), copy_bps / 1e9,
                bench_min_us_per_step(&r->packed), bench_min_us_per_step(&r->replay), r->note, pus / r->layers,
                rus / r->layers, above_bound(r, copy_bps));
    }
    int ok = fclose(f) == 0;
    snprintf(path, sizeof path, "%s.json", prefix);
    if (!(f = fopen(path, "w"))) {
        perror(path);
        return 0;
    }
    fprintf(f, "{");
    bench_json_str(f, "backend", backend, 1);
    bench_json_str(f, "device", device, 1);
    bench_json_num(f, "copy_gbs", copy_bps / 1e9, 1);
    bench_json_str(f, "ring_dtype", rssm_dtype_name(o->ring_dtype), 1);
    bench_json_str(f, "io_dtype", rssm_dtype_name(o->io_dtype), 1);
    bench_json_str(f, "gate_mode", rssm_gate_mode_name(o->gate_mode), 1);
    fprintf(f, "\"cycles\": %u, \"state_mib\": %u, \"seed\": %llu, \"sm_limit\": %u,\n ", o->cycles, o->state_mib,
            (unsigned long long)o->seed, o->sm_limit);
    /* The cpu backend's state size and why (bench_size.h); null elsewhere. */
    static const char *const bounds[] = {"", "time budget", "memory"};
    bench_json_num(f, "llc_mib", size ? (double)size->llc_mib : NAN, 1);
    bench_json_num(f, "state_wanted_mib", size ? (double)size->wanted_mib : NAN, 1);
    bench_json_str(f, "state_bound", size ? bounds[size->bound] : "", 1);
    fprintf(f, "\"state_within_llc\": %s, ", size && size->within_llc ? "true" : "false");
    bench_json_num(f, "estimated_s", size && size->estimated_s > 0 ? size->estimated_s : NAN, 1);
    bench_json_num(f, "elapsed_s", elapsed_s, 0);
    fprintf(f, ",\n \"rows\": [\n");
    for (size_t i = 0; i < n; i++) {
        const result_row *r = &rows[i];
        double pus = bench_us_per_step(&r->packed), rus = bench_us_per_step(&r->replay);
        fprintf(f, "  {");
        bench_json_str(f, "gate", r->gate, 1);
        bench_json_str(f, "state_dtype", r->state, 1);
        fprintf(f, "\"ring_len\": %u, \"batch\": %u, \"layers\": %u, ", r->L, r->batch, r->layers);
        bench_json_str(f, "positions", r->positions, 1);
        bench_json_str(f, "status", r->status, 1);
        bench_json_str(f, "note", r->note, 1);
        bench_json_num(f, "packed_us", pus, 1);
        bench_json_num(f, "packed_gbs", bench_gbs(&r->packed), 1);
        bench_json_num(f, "inplace_us", bench_inplace_us(&r->packed), 1);
        bench_json_num(f, "packed_min_us", bench_min_us_per_step(&r->packed), 1);
        bench_json_num(f, "replay_us", rus, 1);
        bench_json_num(f, "replay_min_us", bench_min_us_per_step(&r->replay), 1);
        bench_json_num(f, "replay_gbs", bench_gbs(&r->replay), 1);
        bench_json_num(f, "speedup", pus / rus, 1);
        bench_json_num(f, "empty_us", bench_pos_us(&r->replay, 0), 1);
        bench_json_num(f, "full_us", bench_pos_us(&r->replay, 1), 1);
        bench_json_num(f, "flush_us", bench_pos_us(&r->replay, 2), 1);
        bench_json_num(f, "packed_layer_us", pus / r->layers, 1);
        bench_json_num(f, "replay_layer_us", rus / r->layers, 1);
        fprintf(f, "\"above_bound\": %s", above_bound(r, copy_bps) ? "true" : "false");
        fprintf(f, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, " ],\n");
    bench_verify_json(f, vrows, nv);
    fprintf(f, "}\n");
    ok = (fclose(f) == 0) && ok;
    if (nv > 0)
        ok = bench_verify_csv(prefix, vrows, nv, backend, o) && ok;
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
            if (k < 0 || !cli_u32_list(cmd, "--batch", v, o.batch, BENCH_MAX_LIST, &o.nbatch))
                return CLI_USAGE;
            for (size_t j = 0; j < o.nbatch; j++)
                if (o.batch[j] == 0 || o.batch[j] > 65536) {
                    fprintf(stderr, "rssm bench: --batch: %u is not in 1..65536\n", o.batch[j]);
                    return CLI_USAGE;
                }
            set_batch = 1;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--ring-len", &v)) != 0) {
            if (k < 0 || !cli_u32_list(cmd, "--ring-len", v, o.ring_len, BENCH_MAX_LIST, &o.nring))
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
            if (k < 0 || !cli_u32_list(cmd, "--verify", v, o.drafts, BENCH_MAX_LIST, &o.ndrafts))
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
            if (k < 0 || !cli_u32_list(cmd, "--accept", v, o.accept_pct, BENCH_MAX_LIST, &o.naccept))
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
    if ((st = bench_pick_state_mib(b, &o, quick, cpu, llvmpipe, &size, &copy_bps, &err)) != RSSM_OK) {
        fprintf(stderr, "rssm bench: copy bandwidth: %s\n", err.message);
        rssm_backend_destroy(&b);
        return 1;
    }
    const double target = (double)o.state_mib * 1048576.0;
    printf("backend %s (%s)\ncopy bandwidth %.2f GB/s over %u MiB buffers (read + write)\n", bname,
           rssm_backend_device(b), copy_bps / 1e9, o.state_mib);
    if (cpu)
        bench_print_state_size(&size);
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
                base.layers = bench_pick_layers(&base, B, target);
                /* The packed baseline, shared by every L and position mode. */
                rssm_model packed = base;
                packed.replay = 0;
                timing pt;
                bench_timing_clear(&pt);
                const char *pstatus = "ok";
                char pnote[512] = "";
                rh_verdict v = bench_check_config(b, &packed, B, RSSM_FLUSH_ALIGNED, 0, o.seed, pnote, sizeof pnote);
                if (v != RH_PASS) {
                    pstatus = v == RH_SKIP ? "unsupported" : "incorrect";
                } else if (bench_time_model(b, &packed, B, RSSM_FLUSH_ALIGNED, max_L, 0, o.cycles, o.seed, &pt, &err) !=
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
                        bench_timing_clear(&r->replay);
                        r->status = pstatus;
                        snprintf(r->note, sizeof r->note, "%s", pnote);
                        if (strcmp(pstatus, "ok") == 0) {
                            v = bench_check_config(b, &m, B, pol, 0, o.seed, r->note, sizeof r->note);
                            if (v != RH_PASS) {
                                r->status = v == RH_SKIP ? "unsupported" : "incorrect";
                            } else if (bench_time_model(b, &m, B, pol, m.ring_len, o.positions[pi] == 0, o.cycles,
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
    /* The verify table (docs/bench.md, "Verify"): each row times the shape
     * and L of a row above against that row's replay and packed timings. */
    const size_t vcap = o.ngate * o.nstate * o.nbatch * o.nring * o.ndrafts * o.naccept;
    verify_row *vrows = vcap && rows ? calloc(vcap, sizeof *vrows) : NULL;
    size_t nv = 0;
    if (vrows)
        nv = bench_verify_table(b, &o, rows, nrows, !cpu && !llvmpipe /* a GPU, whose clocks ramp up */, vrows,
                                &failed);
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
