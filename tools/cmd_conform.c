/* rssm conform: every conformance case (or a trace from .npy files) on every
 * backend, against the float64 oracle. */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include "conform.h"
#include "trace.h"

#include "rssm.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_BACKENDS 16
#define MAX_FILTERS 16
/* --steps at most: 16 times the longest case (long-4096). A case's trace
 * and outputs are held in host memory whole, so a count past any machine's
 * memory is a usage error here rather than a failed allocation later. */
#define MAX_STEPS 65536u

static void help(void)
{
    printf("usage: rssm conform [options]\n"
           "\n"
           "Runs seeded decode traces through every backend and variant built in, replay and\n"
           "packed, and compares outputs (all steps) and the final true states against a\n"
           "float64 oracle by relative L2 error. Outputs are poisoned with NaN before every\n"
           "step; NaN never passes. A backend of the default list that cannot start here, or\n"
           "one that does not support a case, is reported as SKIP with the reason; a name\n"
           "that runs the same kernels as an earlier one on the same device (\"vulkan\"\n"
           "without cooperative matrices runs \"vulkan:portable\") is checked once, under\n"
           "the earlier name. Exit status: 0 if nothing failed, 1 if any case failed, 2 on a\n"
           "usage error (an unknown option, backend name or trace directory, a count out of\n"
           "range, or a --backend that cannot start here: not built in, or no device).\n"
           "\n"
           "options:\n"
           "  --backend NAME   run on NAME only (repeatable; default: every backend built in)\n"
           "  --case FILTER    run the cases whose name contains FILTER (repeatable)\n"
           "  --list           list the case names and exit\n"
           "  --seed N         seed of the generated traces (default 1)\n"
           "  --steps N        steps of every case, 4..65536 (default: about 3.5 ring cycles;\n"
           "                   4096 for the long-4096 cases)\n"
           "  --layers N       layers of the preset shapes (default 2)\n"
           "  --batch N        rows per step (default 4)\n"
           "  --quick          one layer and a quarter of the presets' heads (K = V = 128\n"
           "                   kept): the same cases, about 8x less work\n"
           "  --jobs N         check up to N backends at once (default: the CPUs online);\n"
           "                   each backend stays on one thread, rows print in order\n"
           "  --trace DIR      check the trace stored in DIR (docs/trace-format.md) instead\n"
           "                   of the generated cases; if DIR has expected_out.npy the oracle\n"
           "                   is checked against it too\n"
           "  --dump DIR       also write each selected case's trace and the oracle's outputs\n"
           "                   to DIR/<case name>/ in the same format\n");
}

/* A case's name as a directory name: '/' becomes '_'. */
static void dir_name(char *out, size_t size, const char *dir, const char *name)
{
    int n = snprintf(out, size, "%s/", dir);
    for (const char *p = name; *p && (size_t)n + 1 < size; p++)
        out[n++] = *p == '/' ? '_' : *p;
    out[n < (int)size ? n : (int)size - 1] = '\0';
}

static int make_dir(const char *path)
{
    if (mkdir(path, 0777) == 0 || errno == EEXIST)
        return 1;
    fprintf(stderr, "rssm conform: cannot create %s: %s\n", path, strerror(errno));
    return 0;
}

static void print_header(void)
{
    printf("%-34s %-24s %10s %10s %8s  %-6s %7s  %s\n", "case", "backend", "out err", "state err", "tol",
           "result", "time", "note");
}

static void print_row(const char *c, const char *backend, const rh_result *r)
{
    char oe[16] = "-", se[16] = "-", tol[16] = "-", tm[16] = "-";
    if (!isnan(r->out_err))
        snprintf(oe, sizeof oe, "%.2e", r->out_err);
    if (!isnan(r->state_err))
        snprintf(se, sizeof se, "%.2e", r->state_err);
    if (r->tol > 0)
        snprintf(tol, sizeof tol, "%.0e", r->tol);
    if (r->seconds > 0)
        snprintf(tm, sizeof tm, "%.2fs", r->seconds);
    printf("%-34s %-24s %10s %10s %8s  %-6s %7s  %s\n", c, backend, oe, se, tol, rh_verdict_name(r->verdict), tm,
           r->note);
    fflush(stdout);
}

typedef struct backend_slot {
    const char *name;
    rssm_backend *b;
    rssm_backend *other; /* where its MIGRATE cases move slots; its own instance */
    char why[RSSM_ERROR_MESSAGE_MAX + 32];
    rh_result result;    /* of the case in progress */
} backend_slot;

static int same_family(const char *a, const char *b)
{
    size_t na = strcspn(a, ":"), nb = strcspn(b, ":");
    return na == nb && strncmp(a, b, na) == 0;
}

/* The backend a MIGRATE case moves slots to: the CPU for a GPU backend; for
 * the CPU, the first other family that started, else a second CPU. Each
 * backend gets an instance of its own, so backends can run side by side. */
static rssm_backend *make_other(const backend_slot *bs, size_t n, size_t self)
{
    const char *me = bs[self].name, *name = "cpu";
    if (same_family(me, "cpu")) {
        for (size_t i = 0; i < n; i++)
            if (bs[i].b && !same_family(bs[i].name, "cpu")) {
                name = bs[i].name;
                break;
            }
    }
    rssm_backend *b = NULL;
    if (rssm_backend_create(name, &b, NULL) != RSSM_OK)
        b = NULL; /* the MIGRATE cases then report SKIP */
    return b;
}

typedef struct tally {
    int pass, fail, skip;
} tally;

static void count(tally *t, rh_verdict v)
{
    if (v == RH_PASS)
        t->pass++;
    else if (v == RH_FAIL)
        t->fail++;
    else
        t->skip++;
}

/* The generated cases on every started backend. Each backend has a thread
 * of its own and runs the cases in order, so a slow backend never holds a
 * fast one up (on a software driver, compiling is most of a case's time);
 * `jobs` tokens bound how many run a case (or prepare one) at a time. A
 * case's oracle is computed once, by the first backend to reach it, and
 * freed when the last is done with it; at most MAX_LIVE cases are held at
 * once. Rows print in case order, each case as soon as every backend has
 * run it. Each backend object stays on its thread (rssm.h: distinct objects
 * on distinct threads). */
#define MAX_LIVE 6

static int dump_case(const rh_prepared *p, const char *dir);

typedef enum case_state { CASE_NEW, CASE_PREPARING, CASE_READY, CASE_FAILED } case_state;

typedef struct suite_case {
    const rh_case *c;
    case_state state;
    rh_prepared p;
    char why[RSSM_ERROR_MESSAGE_MAX];
    size_t remaining;   /* backends that have not run it yet */
    rh_result *results; /* [nb] */
} suite_case;

typedef struct suite {
    suite_case *cases;
    size_t ncases, printed, live;
    size_t live_cap;    /* MAX_LIVE; unbounded once a backend runs on the caller's thread */
    backend_slot *bs;
    size_t nb;
    uint64_t seed;
    const char *dump_dir;
    int io_error;
    unsigned tokens;
    tally t;
    /* Progress (on stderr, every PROGRESS_S): rows print in case order once
     * every backend has run a case, so a slow backend (lavapipe compiling
     * its first pipelines) would otherwise leave the screen blank for
     * minutes. Per backend: cases done, and the one it is running. */
    size_t done[MAX_BACKENDS];
    const char *current[MAX_BACKENDS];
    int finished;
    pthread_mutex_t lock;
    pthread_cond_t changed;
} suite;

#define PROGRESS_S 20

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Prints what every backend is doing every PROGRESS_S seconds until the
 * suite is finished. */
static void *progress_worker(void *arg)
{
    suite *s = arg;
    const double t0 = now_s();
    pthread_mutex_lock(&s->lock);
    while (!s->finished) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += PROGRESS_S;
        while (!s->finished && pthread_cond_timedwait(&s->changed, &s->lock, &until) == 0) {
        }
        if (s->finished)
            break;
        char line[1024];
        int n = snprintf(line, sizeof line, "rssm conform: %.0f s:", now_s() - t0);
        for (size_t i = 0; i < s->nb && n > 0 && (size_t)n < sizeof line; i++)
            if (s->bs[i].b)
                n += snprintf(line + n, sizeof line - (size_t)n, "%s %s %zu/%zu%s%s%s", i ? ";" : "", s->bs[i].name,
                              s->done[i], s->ncases, s->current[i] ? " (running " : "",
                              s->current[i] ? s->current[i] : "", s->current[i] ? ")" : "");
        fprintf(stderr, "%s\n", line);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void take_token(suite *s)
{
    while (s->tokens == 0)
        pthread_cond_wait(&s->changed, &s->lock);
    s->tokens--;
}

static void give_token(suite *s)
{
    s->tokens++;
    pthread_cond_broadcast(&s->changed);
}

/* With the lock held: prints every finished case at the head of the list. */
static void print_ready(suite *s)
{
    while (s->printed < s->ncases && s->cases[s->printed].remaining == 0) {
        suite_case *sc = &s->cases[s->printed++];
        if (sc->state == CASE_FAILED) {
            rh_result r = {.verdict = RH_FAIL, .out_err = NAN, .state_err = NAN};
            snprintf(r.note, sizeof r.note, "oracle: %s", sc->why);
            print_row(sc->c->name, "oracle", &r);
            s->t.fail++;
            continue;
        }
        for (size_t i = 0; i < s->nb; i++)
            if (s->bs[i].b) {
                print_row(sc->c->name, s->bs[i].name, &sc->results[i]);
                count(&s->t, sc->results[i].verdict);
            }
    }
}

/* With the lock held: case c prepared (or failed), by this thread if it is
 * the first to need it. */
static void need_case(suite *s, size_t c)
{
    suite_case *sc = &s->cases[c];
    if (sc->state == CASE_NEW) {
        while (s->live >= s->live_cap && sc->state == CASE_NEW)
            pthread_cond_wait(&s->changed, &s->lock);
        if (sc->state == CASE_NEW) {
            sc->state = CASE_PREPARING;
            s->live++;
            take_token(s);
            pthread_mutex_unlock(&s->lock);
            rssm_error err;
            rssm_status st = rh_prepare_case(sc->c, s->seed, &sc->p, &err);
            int dumped = st != RSSM_OK || !s->dump_dir || dump_case(&sc->p, s->dump_dir);
            pthread_mutex_lock(&s->lock);
            give_token(s);
            if (!dumped)
                s->io_error = 1;
            if (st != RSSM_OK)
                snprintf(sc->why, sizeof sc->why, "%s", err.message);
            sc->state = st == RSSM_OK ? CASE_READY : CASE_FAILED;
            pthread_cond_broadcast(&s->changed);
        }
    }
    while (sc->state == CASE_PREPARING)
        pthread_cond_wait(&s->changed, &s->lock);
}

/* With the lock held: backend i is done with case c. */
static void done_case(suite *s, size_t c)
{
    suite_case *sc = &s->cases[c];
    if (--sc->remaining == 0) {
        if (sc->state == CASE_READY)
            rh_prepared_free(&sc->p);
        s->live--;
        print_ready(s);
        pthread_cond_broadcast(&s->changed);
    }
}

typedef struct suite_worker {
    suite *s;
    size_t backend;
} suite_worker;

static void *backend_worker(void *arg)
{
    suite_worker *w = arg;
    suite *s = w->s;
    backend_slot *b = &s->bs[w->backend];
    pthread_mutex_lock(&s->lock);
    for (size_t c = 0; c < s->ncases; c++) {
        need_case(s, c);
        suite_case *sc = &s->cases[c];
        if (sc->state == CASE_READY) {
            take_token(s);
            s->current[w->backend] = sc->c->name;
            pthread_mutex_unlock(&s->lock);
            rh_result r;
            rh_run_case(&sc->p, b->b, b->other, &r, NULL);
            pthread_mutex_lock(&s->lock);
            s->current[w->backend] = NULL;
            give_token(s);
            sc->results[w->backend] = r;
        }
        s->done[w->backend]++;
        done_case(s, c);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Runs the selected cases; returns 0 when a case could not even be set up. */
static int run_suite(suite *s)
{
    size_t started = 0;
    for (size_t i = 0; i < s->nb; i++)
        started += s->bs[i].b != NULL;
    for (size_t c = 0; c < s->ncases; c++) {
        s->cases[c].remaining = started ? started : 1;
        s->cases[c].results = calloc(s->nb ? s->nb : 1, sizeof(rh_result));
        if (!s->cases[c].results) {
            while (c-- > 0)
                free(s->cases[c].results);
            return 0;
        }
    }
    s->live_cap = MAX_LIVE;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    fprintf(stderr,
            "rssm conform: %zu case(s) on %zu backend(s); a case's rows print once every backend has run it, "
            "progress every %d s here\n",
            s->ncases, started, PROGRESS_S);
    pthread_t ticker;
    const int ticking = pthread_create(&ticker, NULL, progress_worker, s) == 0;
    suite_worker w[MAX_BACKENDS];
    pthread_t th[MAX_BACKENDS];
    int running[MAX_BACKENDS] = {0};
    size_t nw = 0;
    for (size_t i = 0; i < s->nb; i++) {
        if (!s->bs[i].b)
            continue;
        w[nw] = (suite_worker){.s = s, .backend = i};
        running[nw] = pthread_create(&th[nw], NULL, backend_worker, &w[nw]) == 0;
        nw++;
    }
    /* A backend that got no thread runs here, after the others have all
     * started; the threads may then run ahead of it without bound, since it
     * cannot catch up while they wait for it. */
    for (size_t i = 0; i < nw; i++) {
        if (running[i])
            continue;
        pthread_mutex_lock(&s->lock);
        s->live_cap = SIZE_MAX;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->lock);
        backend_worker(&w[i]);
    }
    if (started == 0) { /* nothing started: the oracles are still checked */
        pthread_mutex_lock(&s->lock);
        for (size_t c = 0; c < s->ncases; c++) {
            need_case(s, c);
            done_case(s, c);
        }
        pthread_mutex_unlock(&s->lock);
    }
    for (size_t i = 0; i < nw; i++)
        if (running[i])
            pthread_join(th[i], NULL);
    pthread_mutex_lock(&s->lock);
    s->finished = 1;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    if (ticking)
        pthread_join(ticker, NULL);
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->lock);
    for (size_t c = 0; c < s->ncases; c++)
        free(s->cases[c].results);
    return 1;
}

/* The trace: one prepared case on every started backend, side by side. */
static void run_trace(const rh_prepared *p, backend_slot *bs, size_t nb, tally *t)
{
    for (size_t i = 0; i < nb; i++) {
        if (!bs[i].b)
            continue; /* reported once, up front */
        rh_run_case(p, bs[i].b, bs[i].other, &bs[i].result, NULL);
        print_row(p->c.name, bs[i].name, &bs[i].result);
        count(t, bs[i].result.verdict);
    }
}

/* Writes the prepared case as a trace directory with the oracle's outputs. */
static int dump_case(const rh_prepared *p, const char *dir)
{
    char path[4096];
    if (p->c.event == RH_EVENT_COPY) {
        printf("(--dump: %s not written: a pool copy is not part of the trace format)\n", p->c.name);
        return 1;
    }
    dir_name(path, sizeof path, dir, p->c.name);
    if (!make_dir(path))
        return 0;
    size_t n = (size_t)p->trace.steps * rh_trace_v_per_step(&p->trace);
    float *expected = malloc(n * sizeof(float));
    if (!expected) {
        fprintf(stderr, "rssm conform: out of memory\n");
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        expected[i] = (float)p->ref_out[i];
    rssm_error err;
    rssm_status st = rh_trace_save(&p->trace, path, expected, &err);
    free(expected);
    if (st != RSSM_OK) {
        fprintf(stderr, "rssm conform: --dump: %s\n", err.message);
        return 0;
    }
    return 1;
}

int cmd_conform(int argc, char **argv)
{
    const char *cmd = "conform";
    const char *backends[MAX_BACKENDS];
    char *filters[MAX_FILTERS];
    size_t nb = 0, nf = 0;
    uint64_t seed = 1;
    rh_case_options opt = {0};
    const char *trace_dir = NULL, *dump_dir = NULL;
    int list = 0, quick = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t jobs = ncpu > 0 ? (uint32_t)ncpu : 1;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int k;
        if (cli_flag(argv[i], "--help") || cli_flag(argv[i], "-h")) {
            help();
            return 0;
        } else if (cli_flag(argv[i], "--list")) {
            list = 1;
        } else if (cli_flag(argv[i], "--quick")) {
            quick = 1;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--backend", &v)) != 0) {
            if (k < 0)
                return CLI_USAGE;
            if (nb == MAX_BACKENDS) {
                fprintf(stderr, "rssm conform: at most %d --backend options\n", MAX_BACKENDS);
                return CLI_USAGE;
            }
            backends[nb++] = v;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--case", &v)) != 0) {
            if (k < 0)
                return CLI_USAGE;
            if (nf == MAX_FILTERS) {
                fprintf(stderr, "rssm conform: at most %d --case options\n", MAX_FILTERS);
                return CLI_USAGE;
            }
            filters[nf++] = (char *)v;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--seed", &v)) != 0) {
            if (k < 0 || !cli_u64(cmd, "--seed", v, &seed))
                return CLI_USAGE;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--steps", &v)) != 0) {
            if (k < 0 || !cli_u32(cmd, "--steps", v, &opt.steps))
                return CLI_USAGE;
            /* 0 is the cases' own count inside, never a user's */
            if (opt.steps < 4 || opt.steps > MAX_STEPS) {
                fprintf(stderr, "rssm conform: --steps %u: must be in 4..%u\n", opt.steps, MAX_STEPS);
                return CLI_USAGE;
            }
        } else if ((k = cli_value(cmd, argc, argv, &i, "--layers", &v)) != 0) {
            if (k < 0 || !cli_u32(cmd, "--layers", v, &opt.layers))
                return CLI_USAGE;
            if (opt.layers == 0) {
                fprintf(stderr, "rssm conform: --layers must be > 0\n");
                return CLI_USAGE;
            }
        } else if ((k = cli_value(cmd, argc, argv, &i, "--batch", &v)) != 0) {
            if (k < 0 || !cli_u32(cmd, "--batch", v, &opt.batch))
                return CLI_USAGE;
            if (opt.batch < 2) {
                fprintf(stderr, "rssm conform: --batch must be >= 2 (the copy case needs two rows)\n");
                return CLI_USAGE;
            }
        } else if ((k = cli_value(cmd, argc, argv, &i, "--jobs", &v)) != 0) {
            if (k < 0 || !cli_u32(cmd, "--jobs", v, &jobs))
                return CLI_USAGE;
            if (jobs == 0) {
                fprintf(stderr, "rssm conform: --jobs must be > 0\n");
                return CLI_USAGE;
            }
        } else if ((k = cli_value(cmd, argc, argv, &i, "--trace", &v)) != 0) {
            if (k < 0)
                return CLI_USAGE;
            trace_dir = v;
        } else if ((k = cli_value(cmd, argc, argv, &i, "--dump", &v)) != 0) {
            if (k < 0)
                return CLI_USAGE;
            dump_dir = v;
        } else {
            return cli_unknown(cmd, argv[i]);
        }
    }
    if (quick) {
        opt.head_div = 4;
        if (!opt.layers)
            opt.layers = 1;
    }
    if (trace_dir && (dump_dir || nf)) {
        fprintf(stderr, "rssm conform: --trace cannot be combined with --dump or --case\n");
        return CLI_USAGE;
    }

    rh_case *cases = NULL;
    size_t ncases = 0;
    rssm_error err;
    if (rh_cases_default(&opt, &cases, &ncases, &err) != RSSM_OK) {
        fprintf(stderr, "rssm conform: %s\n", err.message);
        return 1;
    }
    size_t selected = 0;
    for (size_t i = 0; i < ncases; i++)
        selected += rh_case_matches(cases[i].name, filters, nf);
    if (list) {
        for (size_t i = 0; i < ncases; i++)
            if (rh_case_matches(cases[i].name, filters, nf))
                printf("%s\n", cases[i].name);
        free(cases);
        return 0;
    }
    if (!trace_dir && selected == 0) {
        fprintf(stderr, "rssm conform: no case matches the --case filters (see rssm conform --list)\n");
        free(cases);
        return CLI_USAGE;
    }
    if (dump_dir && !make_dir(dump_dir)) {
        free(cases);
        return 1;
    }

    /* A trace is read (and the oracle run) before anything is printed, so a
     * bad file gives one clear message rather than an empty table. */
    rh_prepared trace_case;
    memset(&trace_case, 0, sizeof trace_case);
    if (trace_dir) {
        struct stat sb;
        if (stat(trace_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "rssm conform: --trace %s: not a directory\n", trace_dir);
            free(cases);
            return CLI_USAGE;
        }
        rh_trace tr;
        if (rh_trace_load(trace_dir, &tr, &err) != RSSM_OK ||
            rh_prepare_trace(&tr, "trace", &trace_case, &err) != RSSM_OK) {
            fprintf(stderr, "rssm conform: --trace %s: %s\n", trace_dir, err.message);
            free(cases);
            return 1;
        }
    }

    /* Start every backend once, up front. A name rssm does not know is a
     * usage error, and so is one named by --backend that cannot start here
     * (not built in, no device): whoever names a backend wants it checked,
     * and a run of skips that exits 0 would read as a pass. Of the default
     * list, one that cannot start is one SKIP line. One that runs the very
     * kernels of an earlier one on the same device is checked once, under
     * the earlier name, and says so. */
    backend_slot bs[MAX_BACKENDS];
    const int named = nb > 0;
    if (nb == 0) {
        for (size_t i = 0; i < rssm_backend_name_count() && nb < MAX_BACKENDS; i++)
            backends[nb++] = rssm_backend_name_at(i);
    }
    for (size_t i = 0; i < nb; i++) {
        bs[i].name = backends[i];
        bs[i].b = NULL;
        bs[i].why[0] = '\0';
        rssm_status st = rssm_backend_create(backends[i], &bs[i].b, &err);
        if (st == RSSM_ERR_INVALID_ARGUMENT || (st != RSSM_OK && named)) {
            fprintf(stderr, "rssm conform: --backend %s: %s%s\n", backends[i],
                    st == RSSM_ERR_INVALID_ARGUMENT ? "" : "cannot start here: ", err.message);
            for (size_t j = 0; j < i; j++)
                rssm_backend_destroy(&bs[j].b);
            rh_prepared_free(&trace_case);
            free(cases);
            return CLI_USAGE;
        }
        if (st != RSSM_OK)
            snprintf(bs[i].why, sizeof bs[i].why, "cannot start: %s", err.message);
    }
    print_header();
    tally t = {0};
    for (size_t i = 0; i < nb; i++) {
        if (!bs[i].b) {
            rh_result r = {.verdict = RH_SKIP, .out_err = NAN, .state_err = NAN};
            snprintf(r.note, sizeof r.note, "%s", bs[i].why);
            char what[48];
            snprintf(what, sizeof what, trace_dir ? "(the trace)" : "(all %zu cases)", selected);
            print_row(what, backends[i], &r);
            t.skip += trace_dir ? 1 : (int)selected;
            continue;
        }
        for (size_t j = 0; j < i; j++) {
            if (rh_same_kernels(bs[i].b, bs[j].b)) {
                printf("%-34s %-24s  runs the kernels of %s on this device: checked there\n",
                       trace_dir ? "(the trace)" : "(all cases)", backends[i], backends[j]);
                rssm_backend_destroy(&bs[i].b);
                break;
            }
        }
    }
    for (size_t i = 0; i < nb; i++)
        bs[i].other = bs[i].b ? make_other(bs, nb, i) : NULL;
    int io_error = 0;

    if (trace_dir) {
        const rh_prepared *p = &trace_case;
        if (p->trace.expected) {
            /* The user's engine against the oracle, same tolerance. */
            size_t n = (size_t)p->trace.steps * rh_trace_v_per_step(&p->trace);
            rh_result r = {.state_err = NAN, .tol = p->c.tol};
            r.out_err = rh_rel_l2_f(p->trace.expected, p->ref_out, n);
            r.verdict = r.out_err <= r.tol ? RH_PASS : RH_FAIL;
            snprintf(r.note, sizeof r.note, "expected_out.npy against the oracle");
            print_row("trace", "expected", &r);
            count(&t, r.verdict);
        }
        run_trace(p, bs, nb, &t);
        rh_prepared_free(&trace_case);
    } else {
        suite su = {.bs = bs, .nb = nb, .seed = seed, .dump_dir = dump_dir, .tokens = jobs, .t = t};
        su.cases = calloc(selected ? selected : 1, sizeof *su.cases);
        for (size_t c = 0; su.cases && c < ncases; c++)
            if (rh_case_matches(cases[c].name, filters, nf))
                su.cases[su.ncases++].c = &cases[c];
        if (!su.cases || !run_suite(&su)) {
            fprintf(stderr, "rssm conform: out of memory\n");
            io_error = 1;
        }
        free(su.cases);
        t = su.t;
        io_error |= su.io_error;
    }
    printf("\n%d passed, %d failed, %d skipped (seed %llu)\n", t.pass, t.fail, t.skip,
           (unsigned long long)seed);
    for (size_t i = 0; i < nb; i++) {
        rssm_backend_destroy(&bs[i].b);
        rssm_backend_destroy(&bs[i].other);
    }
    free(cases);
    return t.fail || io_error ? 1 : 0;
}
