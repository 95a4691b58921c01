/* The conformance program: every case of tools/harness/conform.c on every
 * backend name built in, each (case, backend) pair its own cmocka test.
 * A backend that cannot be created, or a case it does not support, is a
 * cmocka skip with the reason printed, never a pass; a case over its
 * tolerance, with a NaN or unwritten output, or a failed call, fails.
 *
 * Tests run case-major, so the oracle of a case is computed once and
 * checked against every backend in turn. The cases are those of
 * `rssm conform --quick` (one layer, a quarter of the heads). Arguments
 * that are not options select the cases whose name contains one of them
 * (ctest runs the GDN and the KDA cases as two tests, in parallel: their
 * pipelines never coincide); --harness adds the tests that make sure the
 * harness itself can fail.
 *
 * A backend name that runs the same kernels as an earlier one on the same
 * device (rssm_backend_kernels: "vulkan" without cooperative matrices) is
 * checked once, under the earlier name, as `rssm conform` does: the
 * compile time of a software driver is most of this program's time. */
#include "conform.h"

#include "rssm.h"

#include <setjmp.h> /* cmocka.h needs these first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED 1

typedef struct backend_entry {
    const char *name;
    int tried;
    rssm_backend *b;
    char why[RSSM_ERROR_MESSAGE_MAX];
} backend_entry;

static rh_case *g_cases;
/* Which of g_cases this run checks. */
static char **g_filters;
static size_t g_nfilters;
static size_t g_ncases;
static backend_entry *g_backends;
static size_t g_nbackends;
/* Where MIGRATE cases move slots: the CPU for any other backend; for the
 * CPU, the first other backend that starts (else a second CPU instance). */
static rssm_backend *g_cpu_other, *g_noncpu_other;
static rh_prepared g_prepared;
static size_t g_prepared_case = (size_t)-1;

typedef struct pair {
    size_t c, b;
} pair;

static backend_entry *backend_get(size_t i)
{
    backend_entry *e = &g_backends[i];
    if (!e->tried) {
        rssm_error err;
        e->tried = 1;
        if (rssm_backend_create(e->name, &e->b, &err) != RSSM_OK) {
            e->b = NULL;
            snprintf(e->why, sizeof e->why, "%s", err.message);
        }
    }
    return e;
}

static const rh_prepared *prepared_get(size_t c)
{
    if (g_prepared_case != c) {
        rh_prepared_free(&g_prepared);
        g_prepared_case = (size_t)-1;
        rssm_error err;
        if (rh_prepare_case(&g_cases[c], SEED, &g_prepared, &err) != RSSM_OK)
            fail_msg("%s: oracle: %s", g_cases[c].name, err.message);
        g_prepared_case = c;
    }
    return &g_prepared;
}

static void test_case_on_backend(void **state)
{
    const pair *p = *state;
    backend_entry *e = backend_get(p->b);
    if (!e->b && rh_backend_required(e->name))
        fail_msg("%s: backend %s is required here (RSSM_REQUIRE_BACKENDS) but cannot be created: %s",
                 g_cases[p->c].name, e->name, e->why);
    if (!e->b) {
        print_message("[  SKIP    ] %s: backend %s cannot be created: %s\n", g_cases[p->c].name, e->name, e->why);
        skip();
        return;
    }
    const rh_prepared *pr = prepared_get(p->c);
    rh_result r;
    int is_cpu = strcmp(e->name, "cpu") == 0 || strncmp(e->name, "cpu:", 4) == 0;
    rh_run_case(pr, e->b, is_cpu && g_noncpu_other ? g_noncpu_other : g_cpu_other, &r, NULL);
    print_message("[  %-6s  ] %-34s %-16s out %.2e state %.2e tol %.0e %s\n", rh_verdict_name(r.verdict),
                  pr->c.name, e->name, r.out_err, r.state_err, r.tol, r.note);
    if (r.verdict == RH_SKIP) {
        skip();
        return;
    }
    if (r.verdict != RH_PASS)
        fail_msg("%s on %s: out err %.3e, state err %.3e, tol %.0e: %s", pr->c.name, e->name, r.out_err,
                 r.state_err, r.tol, r.note);
}

/* The harness must be able to fail: a reference off by 1e-4 relative (ten
 * times the fp32 tolerance) and a NaN are both caught. */
static void test_harness_catches_wrong_reference(void **state)
{
    (void)state;
    rh_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "negative-control");
    rssm_model_preset(&c.model, "qwen3.5-gdn", NULL);
    c.model.layers = 1;
    c.model.num_qk_heads = 2;
    c.model.num_v_heads = 4;
    c.model.head_k = c.model.head_v = 32;
    c.model.ring_len = 4;
    c.model.ring_dtype = RSSM_DTYPE_F32;
    c.batch = 2;
    c.steps = 10;
    c.tol = rh_tolerance(&c.model);
    assert_true(c.tol == 1e-5);
    rh_prepared p;
    rssm_error err;
    assert_int_equal(rh_prepare_case(&c, SEED, &p, &err), RSSM_OK);
    rssm_backend *cpu = NULL;
    assert_int_equal(rssm_backend_create("cpu", &cpu, &err), RSSM_OK);
    rh_result r;
    assert_int_equal(rh_run_case(&p, cpu, NULL, &r, NULL), RH_PASS);

    size_t n_out = (size_t)p.trace.steps * rh_trace_v_per_step(&p.trace);
    for (size_t i = 0; i < n_out; i++)
        p.ref_out[i] *= 1.0 + 1e-4;
    assert_int_equal(rh_run_case(&p, cpu, NULL, &r, NULL), RH_FAIL);
    assert_true(r.out_err > 5e-5);
    for (size_t i = 0; i < n_out; i++)
        p.ref_out[i] /= 1.0 + 1e-4;
    size_t n_state = (size_t)p.trace.slots * rh_trace_state_per_slot(&p.trace);
    p.ref_state[n_state / 2] += 1.0;
    assert_int_equal(rh_run_case(&p, cpu, NULL, &r, NULL), RH_FAIL);
    assert_true(r.state_err > 1e-5);

    /* A migrate case without a second backend is a skip, not a pass. */
    p.ref_state[n_state / 2] -= 1.0;
    p.c.event = RH_EVENT_MIGRATE;
    assert_int_equal(rh_run_case(&p, cpu, NULL, &r, NULL), RH_SKIP);

    rssm_backend_destroy(&cpu);
    rh_prepared_free(&p);
}

static void test_nan_never_passes(void **state)
{
    (void)state;
    float x[3] = {1.0f, NAN, 2.0f};
    double ref[3] = {1.0, 1.0, 2.0};
    assert_true(isinf(rh_rel_l2_f(x, ref, 3)));
    x[1] = INFINITY;
    assert_true(isinf(rh_rel_l2_f(x, ref, 3)));
    x[1] = 1.0f;
    assert_true(rh_rel_l2_f(x, ref, 3) == 0.0);
    double zero[1] = {0.0};
    float one[1] = {1.0f};
    assert_false(rh_rel_l2_f(one, zero, 1) <= 1e-2); /* an all-zero reference cannot hide errors */
}

/* The earlier backend whose kernels `i` runs on the same device, or -1. */
static long alias_of(size_t i)
{
    backend_entry *e = backend_get(i);
    if (!e->b)
        return -1;
    for (size_t j = 0; j < i; j++) {
        backend_entry *o = backend_get(j);
        if (rh_same_kernels(o->b, e->b))
            return (long)j;
    }
    return -1;
}

/* Every case name is unique, so --case and ctest output name one case. */
static void test_case_names_unique(void **state)
{
    (void)state;
    for (size_t i = 0; i < g_ncases; i++)
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(g_cases[i].name, g_cases[j].name);
}

int main(int argc, char **argv)
{
    rssm_error err;
    int harness = 0;
    g_filters = calloc((size_t)argc, sizeof *g_filters);
    if (!g_filters)
        return 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--harness") == 0)
            harness = 1;
        else
            g_filters[g_nfilters++] = argv[i];
    }
    /* The cases of `rssm conform --quick`: every case, on one layer and a
     * quarter of the presets' heads (K = V = 128 kept), so the whole program
     * stays within a few minutes on lavapipe's two cores. */
    rh_case_options opt = {.layers = 1, .head_div = 4};
    if (rh_cases_default(&opt, &g_cases, &g_ncases, &err) != RSSM_OK) {
        fprintf(stderr, "cases: %s\n", err.message);
        return 1;
    }
    g_nbackends = rssm_backend_name_count();
    g_backends = calloc(g_nbackends, sizeof *g_backends);
    size_t ntests = 3 + g_ncases * g_nbackends;
    struct CMUnitTest *tests = calloc(ntests, sizeof *tests);
    pair *pairs = calloc(g_ncases * g_nbackends + 1, sizeof *pairs);
    char (*names)[128] = calloc(ntests, sizeof *names);
    if (!g_backends || !tests || !pairs || !names) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < g_nbackends; i++)
        g_backends[i].name = rssm_backend_name_at(i);
    if (rssm_backend_create("cpu", &g_cpu_other, &err) != RSSM_OK)
        g_cpu_other = NULL; /* the MIGRATE cases then skip */
    for (size_t i = 0; i < g_nbackends && !g_noncpu_other; i++)
        if (strncmp(g_backends[i].name, "cpu", 3) != 0 &&
            rssm_backend_create(g_backends[i].name, &g_noncpu_other, NULL) != RSSM_OK)
            g_noncpu_other = NULL;

    size_t t = 0;
    if (harness) {
        tests[t++] = (struct CMUnitTest){"nan_never_passes", test_nan_never_passes, NULL, NULL, NULL};
        tests[t++] = (struct CMUnitTest){"harness_catches_wrong_reference",
                                         test_harness_catches_wrong_reference, NULL, NULL, NULL};
        tests[t++] = (struct CMUnitTest){"case_names_unique", test_case_names_unique, NULL, NULL, NULL};
    }
    long *alias = calloc(g_nbackends + 1, sizeof *alias);
    if (!alias) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t b = 0; b < g_nbackends; b++) {
        alias[b] = alias_of(b);
        if (alias[b] >= 0)
            printf("%s runs the kernels of %s on this device: checked there\n", g_backends[b].name,
                   g_backends[alias[b]].name);
    }
    for (size_t c = 0; c < g_ncases; c++) {
        if (!rh_case_matches(g_cases[c].name, g_filters, g_nfilters))
            continue;
        for (size_t b = 0; b < g_nbackends; b++) {
            if (alias[b] >= 0)
                continue;
            pair *p = &pairs[c * g_nbackends + b];
            p->c = c;
            p->b = b;
            snprintf(names[t], sizeof names[t], "%s@%s", g_cases[c].name, g_backends[b].name);
            tests[t] = (struct CMUnitTest){names[t], test_case_on_backend, NULL, NULL, p};
            t++;
        }
    }
    int failed = _cmocka_run_group_tests("conformance", tests, t, NULL, NULL);

    rh_prepared_free(&g_prepared);
    for (size_t i = 0; i < g_nbackends; i++)
        rssm_backend_destroy(&g_backends[i].b);
    rssm_backend_destroy(&g_cpu_other);
    rssm_backend_destroy(&g_noncpu_other);
    free(g_backends);
    free(g_cases);
    free(g_filters);
    free(alias);
    free(tests);
    free(pairs);
    free(names);
    return failed;
}
