/* Traces on disk: the .npy reader and writer (round trip for every dtype,
 * and every kind of malformed file rejected with RSSM_ERR_FORMAT), and
 * dump -> load -> replay giving the same inputs, oracle and outputs. */
#define _POSIX_C_SOURCE 200809L

#include "conform.h"
#include "npy.h"
#include "rng.h"
#include "trace.h"

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
#include <sys/stat.h>
#include <unistd.h>

/* A fresh directory under the build tree's working directory. */
static void make_temp_dir(char *out, size_t size, const char *tag)
{
    snprintf(out, size, "test_trace_%s_%ld", tag, (long)getpid());
    mkdir(out, 0777);
}

static void remove_dir(const char *dir)
{
    static const char *files[] = {"model.json", "q.npy", "k.npy", "v.npy", "gate.npy", "beta.npy",
                                  "A_log.npy", "dt_bias.npy", "slots.npy", "seq_len_after.npy",
                                  "initial_state.npy", "expected_out.npy", "a.npy"};
    char path[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
    rmdir(dir);
}

/* ------------------------------------------------------------ round trip */

static void round_trip(rh_npy_dtype dt, uint32_t ndim, const uint64_t *shape)
{
    char dir[256], path[512];
    make_temp_dir(dir, sizeof dir, "npy");
    snprintf(path, sizeof path, "%s/a.npy", dir);
    size_t count = 1, es = rh_npy_dtype_size(dt);
    for (uint32_t i = 0; i < ndim; i++)
        count *= (size_t)shape[i];
    unsigned char *data = malloc(count * es + 1);
    assert_non_null(data);
    for (size_t i = 0; i < count * es; i++)
        data[i] = (unsigned char)(i * 37 + 11); /* every byte distinct-ish, never all zero */
    rssm_error err;
    assert_int_equal(rh_npy_write(path, dt, ndim, shape, data, &err), RSSM_OK);
    rh_npy a;
    assert_int_equal(rh_npy_read(path, &a, &err), RSSM_OK);
    assert_int_equal(a.dtype, dt);
    assert_int_equal(a.ndim, ndim);
    for (uint32_t i = 0; i < ndim; i++)
        assert_int_equal(a.shape[i], shape[i]);
    assert_int_equal(a.count, count);
    assert_memory_equal(a.data, data, count * es);
    /* The header is what numpy writes: 64-byte aligned data, '\n' last. */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char head[10];
    assert_int_equal(fread(head, 1, 10, f), 10);
    fclose(f);
    size_t hlen = (size_t)head[8] | (size_t)head[9] << 8;
    assert_int_equal((10 + hlen) % 64, 0);
    rh_npy_free(&a);
    free(data);
    remove_dir(dir);
}

static void test_npy_round_trip(void **state)
{
    (void)state;
    const uint64_t s3[3] = {2, 3, 5}, s1[1] = {7}, s5[5] = {1, 2, 1, 3, 4}, s0[2] = {4, 0};
    const rh_npy_dtype all[] = {RH_NPY_F4, RH_NPY_F2, RH_NPY_I4, RH_NPY_I8, RH_NPY_U4};
    for (size_t i = 0; i < 5; i++) {
        round_trip(all[i], 3, s3);
        round_trip(all[i], 1, s1);
        round_trip(all[i], 5, s5);
        round_trip(all[i], 0, NULL); /* a scalar */
        round_trip(all[i], 2, s0);   /* empty */
    }
}

/* ------------------------------------------------------------ malformed */

/* A .npy image: version byte, header text (padded to 64 as numpy does, or
 * used verbatim when raw), and `data_bytes` bytes of data. */
static size_t build(unsigned char *buf, size_t cap, int major, const char *header, int pad, size_t data_bytes)
{
    size_t pre = major == 1 ? 10 : 12, n = strlen(header);
    size_t hlen = pad ? ((pre + n + 1 + 63) / 64 * 64 - pre) : n;
    assert_true(pre + hlen + data_bytes <= cap);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    if (major != 1) {
        buf[10] = (unsigned char)(hlen >> 16);
        buf[11] = (unsigned char)(hlen >> 24);
    }
    memcpy(buf + pre, header, n);
    if (pad) {
        memset(buf + pre + n, ' ', hlen - n - 1);
        buf[pre + hlen - 1] = '\n';
    }
    memset(buf + pre + hlen, 0x3c, data_bytes);
    return pre + hlen + data_bytes;
}

static void expect_format(const unsigned char *buf, size_t size, const char *why)
{
    rh_npy a;
    rssm_error err;
    rssm_status st = rh_npy_parse(buf, size, "bad.npy", &a, &err);
    if (st != RSSM_ERR_FORMAT)
        fail_msg("%s: got status %d (%s), want RSSM_ERR_FORMAT", why, (int)st, err.message);
    assert_int_equal(err.status, RSSM_ERR_FORMAT);
    assert_true(strlen(err.message) > 0);
    assert_null(a.data);
}

static void test_npy_malformed(void **state)
{
    (void)state;
    static unsigned char buf[4096];
    const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    size_t n;
    rh_npy a;
    rssm_error err;

    /* The well-formed file parses, in v1 and v2, so the cases below fail for their reason. */
    n = build(buf, sizeof buf, 1, good, 1, 24);
    assert_int_equal(rh_npy_parse(buf, n, "ok.npy", &a, &err), RSSM_OK);
    rh_npy_free(&a);
    n = build(buf, sizeof buf, 2, good, 1, 24);
    assert_int_equal(rh_npy_parse(buf, n, "ok.npy", &a, &err), RSSM_OK);
    rh_npy_free(&a);

    /* bad magic */
    n = build(buf, sizeof buf, 1, good, 1, 24);
    buf[1] = 'X';
    expect_format(buf, n, "bad magic");
    expect_format(buf, 0, "empty file");
    expect_format((const unsigned char *)"\x93NUM", 4, "short magic");
    /* unknown version */
    n = build(buf, sizeof buf, 1, good, 1, 24);
    buf[6] = 9;
    expect_format(buf, n, "version 9");
    /* header length past the end of the file */
    n = build(buf, sizeof buf, 1, good, 1, 24);
    buf[9] = 0x40;
    expect_format(buf, n, "header length beyond the file");
    expect_format(buf, 11, "truncated in the header");
    /* bad headers */
    const char *bad_headers[] = {
        "not a dict",
        "{'descr': '<f4', 'fortran_order': False}",                      /* no shape */
        "{'descr': '<f4', 'shape': (2, 3)}",                             /* no fortran_order */
        "{'fortran_order': False, 'shape': (2, 3)}",                     /* no descr */
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }",  /* negative */
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }",    /* no comma */
        "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }",   /* a list */
        "{'descr': '<f4', 'fortran_order': maybe, 'shape': (2, 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}",
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", /* structured */
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
    };
    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++) {
        n = build(buf, sizeof buf, 1, bad_headers[i], 1, 24);
        expect_format(buf, n, bad_headers[i]);
    }
    /* wrong dtypes */
    const char *bad_types[] = {"'>f4'", "'<f8'", "'|u1'", "'<c8'", "'|b1'", "'<U4'", "'f4'", "'<i2'"};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        char h[160];
        snprintf(h, sizeof h, "{'descr': %s, 'fortran_order': False, 'shape': (2, 3), }", bad_types[i]);
        n = build(buf, sizeof buf, 1, h, 1, 48);
        expect_format(buf, n, bad_types[i]);
    }
    /* Fortran order */
    n = build(buf, sizeof buf, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 1, 24);
    expect_format(buf, n, "fortran order");
    /* short and long data */
    n = build(buf, sizeof buf, 1, good, 1, 23);
    expect_format(buf, n, "short data");
    n = build(buf, sizeof buf, 1, good, 1, 25);
    expect_format(buf, n, "trailing data");
    /* huge shapes: the byte count overflows, or is far beyond the file */
    n = build(buf, sizeof buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 1, 24);
    expect_format(buf, n, "overflowing shape");
    n = build(buf, sizeof buf, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1000000000000,), }", 1, 24);
    expect_format(buf, n, "huge shape");

    /* Through a file: a truncated one, and one that does not exist. */
    char dir[256], path[512];
    make_temp_dir(dir, sizeof dir, "bad");
    snprintf(path, sizeof path, "%s/a.npy", dir);
    n = build(buf, sizeof buf, 1, good, 1, 24);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n - 5, f), n - 5);
    fclose(f);
    assert_int_equal(rh_npy_read(path, &a, &err), RSSM_ERR_FORMAT);
    assert_non_null(strstr(err.message, "a.npy"));
    remove(path);
    assert_int_equal(rh_npy_read(path, &a, &err), RSSM_ERR_IO);
    /* a directory where the file should be: named as such, not a huge size */
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(rh_npy_read(path, &a, &err), RSSM_ERR_IO);
    assert_non_null(strstr(err.message, "not a regular file"));
    rmdir(path);
    remove_dir(dir);
}

/* Random corruption of a valid file (flipped bytes in the header, random
 * truncation): every outcome is OK or RSSM_ERR_FORMAT, never a crash or an
 * out-of-bounds read (the sanitizer build runs this too). */
static void test_npy_corrupted_never_crashes(void **state)
{
    (void)state;
    static unsigned char good[512], buf[512];
    size_t n = build(good, sizeof good, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3, 4), }", 1, 96);
    rh_rng r;
    rh_rng_seed(&r, 5, 0);
    size_t ok = 0, format = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, good, n);
        size_t len = n;
        int flips = (int)rh_rng_range(&r, 0, 4);
        for (int f = 0; f < flips; f++) /* mostly the header: that is what gets parsed */
            buf[rh_rng_range(&r, 0, 74)] = (unsigned char)rh_rng_next(&r);
        if (rh_rng_range(&r, 0, 3) == 0)
            len = (size_t)rh_rng_range(&r, 0, n);
        /* Parse from an exact-size heap copy, so reading past `len` is caught. */
        unsigned char *exact = malloc(len ? len : 1);
        assert_non_null(exact);
        memcpy(exact, buf, len);
        rh_npy a;
        rssm_error err;
        rssm_status st = rh_npy_parse(exact, len, "fuzz.npy", &a, &err);
        free(exact);
        if (st == RSSM_OK) {
            assert_non_null(a.data);
            ok++;
        } else {
            assert_int_equal(st, RSSM_ERR_FORMAT);
            assert_null(a.data);
            format++;
        }
        rh_npy_free(&a);
    }
    assert_true(ok > 0 && format > 0); /* both outcomes were exercised */
}

/* ------------------------------------------------------------ traces */

static rh_case small_case(rssm_gate_kind g, rssm_gate_mode mode)
{
    rh_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "trace-%d-%d", (int)g, (int)mode);
    rssm_model_preset(&c.model, g == RSSM_GATE_KDA ? "kimi-linear-kda" : "qwen3.5-gdn", NULL);
    c.model.layers = 2;
    c.model.num_qk_heads = 2;
    c.model.num_v_heads = g == RSSM_GATE_KDA ? 2 : 4;
    c.model.head_k = 16;
    c.model.head_v = 8;
    c.model.ring_len = 4;
    c.model.gate_mode = mode;
    c.model.io_dtype = RSSM_DTYPE_BF16;
    c.batch = 3;
    c.steps = 11;
    c.snapshot_interval = 5;
    c.admit_every = 2; /* idle rows (-1) in the first steps */
    c.tol = rh_tolerance(&c.model);
    return c;
}

static void same_trace(const rh_trace *a, const rh_trace *b)
{
    assert_memory_equal(&a->model, &b->model, sizeof a->model);
    assert_int_equal(a->steps, b->steps);
    assert_int_equal(a->batch, b->batch);
    assert_int_equal(a->slots, b->slots);
    assert_int_equal(a->snapshot_interval, b->snapshot_interval);
    size_t T = a->steps;
    assert_memory_equal(a->q, b->q, T * rh_trace_qk_per_step(a) * 4);
    assert_memory_equal(a->k, b->k, T * rh_trace_qk_per_step(a) * 4);
    assert_memory_equal(a->v, b->v, T * rh_trace_v_per_step(a) * 4);
    assert_memory_equal(a->gate, b->gate, T * rh_trace_gate_per_step(a) * 4);
    assert_memory_equal(a->beta, b->beta, T * rh_trace_beta_per_step(a) * 4);
    assert_memory_equal(a->slot_ids, b->slot_ids, T * a->batch * 4);
    assert_memory_equal(a->seq_len_after, b->seq_len_after, T * a->batch * 8);
    assert_memory_equal(a->init_state, b->init_state, a->slots * rh_trace_state_per_slot(a) * 4);
    assert_true((a->A_log == NULL) == (b->A_log == NULL));
    if (a->A_log) {
        assert_memory_equal(a->A_log, b->A_log, (size_t)a->model.layers * a->model.num_v_heads * 4);
        assert_memory_equal(a->dt_bias, b->dt_bias, rh_trace_dt_bias_count(a) * 4);
    }
}

static void dump_load_replay(rssm_gate_kind g, rssm_gate_mode mode)
{
    rh_case c = small_case(g, mode);
    rh_prepared p, q;
    rssm_error err;
    assert_int_equal(rh_prepare_case(&c, 7, &p, &err), RSSM_OK);
    assert_int_equal(rh_trace_rows(&p.trace, 0), 1); /* admitted apart: idle rows exist */

    char dir[256];
    make_temp_dir(dir, sizeof dir, "dump");
    size_t n_out = (size_t)p.trace.steps * rh_trace_v_per_step(&p.trace);
    float *expected = malloc(n_out * sizeof(float));
    assert_non_null(expected);
    for (size_t i = 0; i < n_out; i++)
        expected[i] = (float)p.ref_out[i];
    assert_int_equal(rh_trace_save(&p.trace, dir, expected, &err), RSSM_OK);

    rh_trace t;
    if (rh_trace_load(dir, &t, &err) != RSSM_OK)
        fail_msg("load: %s", err.message);
    same_trace(&p.trace, &t);
    assert_non_null(t.expected);
    assert_memory_equal(t.expected, expected, n_out * sizeof(float));
    assert_int_equal(rh_prepare_trace(&t, "loaded", &q, &err), RSSM_OK);
    /* The same inputs give the same oracle, bit for bit. */
    assert_memory_equal(q.ref_out, p.ref_out, n_out * sizeof(double));

    rssm_backend *cpu = NULL;
    assert_int_equal(rssm_backend_create("cpu", &cpu, &err), RSSM_OK);
    float *o1 = malloc(n_out * sizeof(float)), *o2 = malloc(n_out * sizeof(float));
    assert_non_null(o1);
    assert_non_null(o2);
    rh_result r1, r2;
    assert_int_equal(rh_run_case(&p, cpu, NULL, &r1, o1), RH_PASS);
    assert_int_equal(rh_run_case(&q, cpu, NULL, &r2, o2), RH_PASS);
    assert_memory_equal(o1, o2, n_out * sizeof(float));

    rssm_backend_destroy(&cpu);
    free(o1);
    free(o2);
    free(expected);
    rh_prepared_free(&p);
    rh_prepared_free(&q);
    remove_dir(dir);
}

static void test_dump_load_replay(void **state)
{
    (void)state;
    dump_load_replay(RSSM_GATE_GDN, RSSM_GATE_PRECOMPUTED);
    dump_load_replay(RSSM_GATE_KDA, RSSM_GATE_RAW);
}

/* Overwrites one file of a saved trace with an array of another shape. */
static void test_trace_rejects_mismatch(void **state)
{
    (void)state;
    rh_case c = small_case(RSSM_GATE_GDN, RSSM_GATE_PRECOMPUTED);
    rh_trace_spec spec = {.model = c.model, .steps = c.steps, .batch = c.batch, .seed = 3, .stream = 1};
    rh_trace t, u;
    rssm_error err;
    assert_int_equal(rh_trace_generate(&spec, &t, &err), RSSM_OK);
    char dir[256], path[512];
    make_temp_dir(dir, sizeof dir, "mismatch");
    assert_int_equal(rh_trace_save(&t, dir, NULL, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_OK);
    rh_trace_free(&u);

    /* q with one head too few */
    snprintf(path, sizeof path, "%s/q.npy", dir);
    uint64_t qs[5] = {c.steps, c.model.layers, c.batch, c.model.num_qk_heads - 1, c.model.head_k};
    assert_int_equal(rh_npy_write(path, RH_NPY_F4, 5, qs, t.q, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    assert_non_null(strstr(err.message, "q.npy"));
    qs[3]++;
    /* q as integers (int32 and float32 are the same size): the message says which dtype it found */
    assert_int_equal(rh_npy_write(path, RH_NPY_I4, 5, qs, t.q, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    assert_non_null(strstr(err.message, "q.npy: dtype <i4, expected <f4 or <f2"));
    assert_int_equal(rh_npy_write(path, RH_NPY_F4, 5, qs, t.q, &err), RSSM_OK);

    /* slots as floats */
    snprintf(path, sizeof path, "%s/slots.npy", dir);
    uint64_t ss[2] = {c.steps, c.batch};
    float *fslots = calloc((size_t)c.steps * c.batch, sizeof(float));
    assert_non_null(fslots);
    assert_int_equal(rh_npy_write(path, RH_NPY_F4, 2, ss, fslots, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    assert_non_null(strstr(err.message, "slots.npy: dtype <f4, expected an integer type"));
    free(fslots);
    /* a slot id out of range */
    t.slot_ids[0] = (int32_t)t.slots;
    assert_int_equal(rh_npy_write(path, RH_NPY_I4, 2, ss, t.slot_ids, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    t.slot_ids[0] = 0;
    assert_int_equal(rh_npy_write(path, RH_NPY_I4, 2, ss, t.slot_ids, &err), RSSM_OK);

    /* a bad model.json */
    snprintf(path, sizeof path, "%s/model.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"layers\": 2, \"head_k\": \"big\"}", f);
    fclose(f);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"layers\": 2, \"num_v_heads\": 3, \"num_qk_heads\": 2}", f);
    fclose(f);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    /* a missing file */
    remove(path);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_IO);

    rh_trace_free(&t);
    remove_dir(dir);
}

/* Values: a NaN names its file and row; an idle row's NaN is ignored, as
 * the format says; a step with no active row is refused. */
static void test_trace_values(void **state)
{
    (void)state;
    rh_case c = small_case(RSSM_GATE_KDA, RSSM_GATE_PRECOMPUTED);
    rh_trace_spec spec = {.model = c.model, .steps = c.steps, .batch = c.batch, .seed = 5, .stream = 2};
    rh_trace t, u;
    rssm_error err;
    assert_int_equal(rh_trace_generate(&spec, &t, &err), RSSM_OK);
    char dir[256], path[512];
    make_temp_dir(dir, sizeof dir, "values");
    const uint64_t T = c.steps, B = c.batch;
    const uint64_t ss[2] = {T, B};
    const size_t qrow = (size_t)c.model.num_qk_heads * c.model.head_k;
    assert_true(B >= 2);

    /* NaN in an active row of q: the message names q.npy and the row. */
    t.q[qrow * 1 + 3] = NAN; /* step 0, layer 0, row 1 */
    assert_int_equal(rh_trace_save(&t, dir, NULL, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    assert_non_null(strstr(err.message, "q.npy"));
    assert_non_null(strstr(err.message, "row 1"));

    /* The same NaN in a row made idle at that step: ignored. */
    int32_t *ids = malloc(T * B * sizeof *ids);
    assert_non_null(ids);
    memcpy(ids, t.slot_ids, T * B * sizeof *ids);
    for (uint64_t r = 1; r < B; r++)
        ids[r] = -1;
    snprintf(path, sizeof path, "%s/slots.npy", dir);
    assert_int_equal(rh_npy_write(path, RH_NPY_I4, 2, ss, ids, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_OK);
    rh_trace_free(&u);

    /* A step with every row idle. */
    ids[0] = -1;
    assert_int_equal(rh_npy_write(path, RH_NPY_I4, 2, ss, ids, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    assert_non_null(strstr(err.message, "no active row"));

    /* NaN in the initial state names initial_state.npy. */
    t.q[qrow * 1 + 3] = 0.5f;
    t.init_state[7] = INFINITY;
    assert_int_equal(rh_trace_save(&t, dir, NULL, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    assert_non_null(strstr(err.message, "initial_state.npy"));
    free(ids);
    rh_trace_free(&t);
    remove_dir(dir);
}

/* A speculative-decode trace (drafts.npy, accepted.npy): saved, loaded and
 * replayed as generated, and the engine-step rules of docs/trace-format.md
 * refused with the file named. */
static void test_verify_trace(void **state)
{
    (void)state;
    rh_case c = small_case(RSSM_GATE_GDN, RSSM_GATE_PRECOMPUTED);
    c.admit_every = 0;
    c.verify = 3; /* L - 1 of the small case */
    c.steps = 6 * (c.verify + 1);
    c.snapshot_interval = 5;
    rh_prepared p, q;
    rssm_error err;
    assert_int_equal(rh_prepare_case(&c, 11, &p, &err), RSSM_OK);
    assert_int_equal(p.trace.windows, 12);
    char dir[256], path[512];
    make_temp_dir(dir, sizeof dir, "verify");
    assert_int_equal(rh_trace_save(&p.trace, dir, NULL, &err), RSSM_OK);
    rh_trace t;
    if (rh_trace_load(dir, &t, &err) != RSSM_OK)
        fail_msg("load: %s", err.message);
    same_trace(&p.trace, &t);
    const uint64_t E = t.windows, B = t.batch, es[2] = {E, B};
    assert_memory_equal(t.drafts, p.trace.drafts, E * B * sizeof(int32_t));
    assert_memory_equal(t.accepted, p.trace.accepted, E * B * sizeof(int32_t));
    assert_int_equal(rh_prepare_trace(&t, "loaded", &q, &err), RSSM_OK);
    const size_t n_out = (size_t)p.trace.steps * rh_trace_v_per_step(&p.trace);
    assert_memory_equal(q.ref_out, p.ref_out, n_out * sizeof(double));
    rssm_backend *cpu = NULL;
    assert_int_equal(rssm_backend_create("cpu", &cpu, &err), RSSM_OK);
    rh_result r;
    if (rh_run_case(&q, cpu, NULL, &r, NULL) != RH_PASS)
        fail_msg("the loaded speculative-decode trace: %s", r.note);
    rssm_backend_destroy(&cpu);

    int32_t *d = malloc(E * B * sizeof *d), *a = malloc(E * B * sizeof *a);
    assert_true(d && a);
    rh_trace u;
    /* more accepted than drafted */
    memcpy(d, p.trace.drafts, E * B * sizeof *d);
    memcpy(a, p.trace.accepted, E * B * sizeof *a);
    a[0] = d[0] + 1;
    snprintf(path, sizeof path, "%s/accepted.npy", dir);
    assert_int_equal(rh_npy_write(path, RH_NPY_I4, 2, es, a, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    assert_non_null(strstr(err.message, "accepted.npy"));
    a[0] = 0;
    assert_int_equal(rh_npy_write(path, RH_NPY_I4, 2, es, a, &err), RSSM_OK);
    /* a window step with an ordinary row in it */
    snprintf(path, sizeof path, "%s/drafts.npy", dir);
    d[1] = 0;
    assert_int_equal(rh_npy_write(path, RH_NPY_I4, 2, es, d, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    assert_non_null(strstr(err.message, "drafts.npy"));
    /* engine steps that do not add up to the trace's steps */
    memcpy(d, p.trace.drafts, E * B * sizeof *d);
    for (uint64_t r = 0; r < B; r++)
        d[r] = 1; /* the first window one token wide: the rest starts early */
    assert_int_equal(rh_npy_write(path, RH_NPY_I4, 2, es, d, &err), RSSM_OK);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_FORMAT);
    /* drafts.npy without accepted.npy */
    snprintf(path, sizeof path, "%s/accepted.npy", dir);
    assert_int_equal(remove(path), 0);
    assert_int_equal(rh_trace_load(dir, &u, &err), RSSM_ERR_IO);
    free(d);
    free(a);
    rh_prepared_free(&p);
    rh_prepared_free(&q);
    remove_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npy_round_trip),
        cmocka_unit_test(test_npy_malformed),
        cmocka_unit_test(test_npy_corrupted_never_crashes),
        cmocka_unit_test(test_dump_load_replay),
        cmocka_unit_test(test_trace_rejects_mismatch),
        cmocka_unit_test(test_trace_values),
        cmocka_unit_test(test_verify_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
