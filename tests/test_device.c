/* Devices (common/device.h, rssm_backend_create_on_device): which ordinal a
 * backend starts on, which tensors a layer on a device refuses and with
 * what message, that each address is asked about once, and that the pool
 * and batch calls refuse device memory. The device API's answers are made
 * up here (the cpu backend with a made-up `place`, backend.h), so every
 * rule and its wiring run without a GPU; the cuda backend's own answers
 * are checked on a GPU by bench/check_devices.py. */
#include "test_support.h"

#include "objects.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEED "of compute capability 9.0 or newer"

static void expect_message(const rssm_error *err, const char *const *parts)
{
    for (; *parts; parts++)
        if (!strstr(err->message, *parts))
            fail_msg("message '%s' lacks '%s'", err->message, *parts);
}

/* ---------------------------------------------------- which ordinal */

static void test_choose(void **state)
{
    (void)state;
    rssm_error err;
    const bool capable[] = {false, true, true, false};
    int dev = -7;
    /* No device asked for, no environment: the first capable one. */
    TS_OK(rssm_device_choose("cuda", -1, "RSSM_CUDA_DEVICE", NULL, 4, capable, NEED, &dev, &err), &err);
    assert_int_equal(dev, 1);
    TS_OK(rssm_device_choose("cuda", -1, "RSSM_CUDA_DEVICE", "", 4, capable, NEED, &dev, &err), &err);
    assert_int_equal(dev, 1);
    /* The environment's default. */
    TS_OK(rssm_device_choose("cuda", -1, "RSSM_CUDA_DEVICE", "2", 4, capable, NEED, &dev, &err), &err);
    assert_int_equal(dev, 2);
    /* A device asked for wins over the environment, whatever it says. */
    const char *envs[] = {NULL, "1", "3", "junk"};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        dev = -7;
        TS_OK(rssm_device_choose("cuda", 2, "RSSM_CUDA_DEVICE", envs[i], 4, capable, NEED, &dev, &err), &err);
        assert_int_equal(dev, 2);
    }
    /* Beyond the devices: invalid, saying how many there are. */
    dev = -7;
    TS_EXPECT(rssm_device_choose("cuda", 4, "RSSM_CUDA_DEVICE", NULL, 4, capable, NEED, &dev, &err),
              RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"cuda: device 4", "4 device(s)", "0..3", NULL});
    assert_int_equal(dev, -7);
    /* Present but not able to run the kernels: unavailable. */
    TS_EXPECT(rssm_device_choose("cuda", 3, "RSSM_CUDA_DEVICE", "1", 4, capable, NEED, &dev, &err),
              RSSM_ERR_UNAVAILABLE, &err);
    expect_message(&err, (const char *const[]){"device 3 is not " NEED, NULL});
    TS_EXPECT(rssm_device_choose("cuda", -1, "RSSM_CUDA_DEVICE", "0", 4, capable, NEED, &dev, &err),
              RSSM_ERR_UNAVAILABLE, &err);
    expect_message(&err, (const char *const[]){"RSSM_CUDA_DEVICE=0 is not " NEED, NULL});
    /* An environment value that is not an ordinal of this process. */
    const char *bad[] = {"4", "-1", "1x", "x", " 1", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        TS_EXPECT(rssm_device_choose("cuda", -1, "RSSM_CUDA_DEVICE", bad[i], 4, capable, NEED, &dev, &err),
                  RSSM_ERR_INVALID_ARGUMENT, &err);
        expect_message(&err, (const char *const[]){"RSSM_CUDA_DEVICE=", bad[i], "0..3", NULL});
    }
    /* None capable. */
    const bool none[] = {false, false};
    TS_EXPECT(rssm_device_choose("cuda", -1, "RSSM_CUDA_DEVICE", NULL, 2, none, NEED, &dev, &err),
              RSSM_ERR_UNAVAILABLE, &err);
    expect_message(&err, (const char *const[]){"2 device(s), none " NEED, NULL});
}

/* ------------------------------------------------ where a tensor is */

static void test_place_check(void **state)
{
    (void)state;
    rssm_error err;
    TS_OK(rssm_place_check("cuda", "q", (rssm_place){RSSM_MEMORY_DEVICE, 1}, 1, &err), &err);
    TS_OK(rssm_place_check("cuda", "q", (rssm_place){RSSM_MEMORY_MANAGED, -1}, 1, &err), &err);
    TS_EXPECT(rssm_place_check("cuda", "ring_d", (rssm_place){RSSM_MEMORY_DEVICE, 1}, 0, &err),
              RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"cuda: ring_d is memory of CUDA device 1",
                                               "this layer works on device 0", NULL});
    TS_EXPECT(rssm_place_check("cuda", "out", (rssm_place){RSSM_MEMORY_HOST, -1}, 2, &err),
              RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"out is host memory", "device memory of CUDA device 2", NULL});
    TS_EXPECT(rssm_place_check("cuda", "state", (rssm_place){RSSM_MEMORY_PINNED, -1}, 0, &err),
              RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"state is pinned host memory", "CUDA device 0", NULL});
    TS_EXPECT(rssm_place_check("cuda", "force", (rssm_place){RSSM_MEMORY_UNKNOWN, -1}, 0, &err),
              RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"cannot say where force is", NULL});
    /* The pool and batch calls take host memory: device memory is refused. */
    const rssm_memory host_ok[] = {RSSM_MEMORY_HOST, RSSM_MEMORY_PINNED, RSSM_MEMORY_MANAGED, RSSM_MEMORY_UNKNOWN};
    for (size_t i = 0; i < sizeof host_ok / sizeof host_ok[0]; i++)
        TS_OK(rssm_host_check("upload", "in->q", (rssm_place){host_ok[i], -1}, 0, &err), &err);
    TS_EXPECT(rssm_host_check("upload", "in->q", (rssm_place){RSSM_MEMORY_DEVICE, 1}, 0, &err),
              RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"upload: in->q is memory of CUDA device 1", "takes host memory",
                                               "pool on device 0", NULL});
}

/* A made-up device API: the address is an index into `places`, and each
 * query is counted. */
typedef struct mock_api {
    rssm_place places[8];
    int queries[8];
} mock_api;

static char arena[8][64];
#define AT(i) ((const void *)arena[i])

static rssm_place mock_query(const void *address, void *user)
{
    mock_api *api = user;
    const size_t i = (size_t)((const char *)address - arena[0]) / sizeof arena[0];
    assert_true(i < 8);
    api->queries[i]++;
    return api->places[i];
}

static void test_check_addresses(void **state)
{
    (void)state;
    rssm_error err;
    static rssm_seen seen; /* zeroed: empty */
    mock_api api = {.places = {{RSSM_MEMORY_DEVICE, 0}, {RSSM_MEMORY_DEVICE, 0}, {RSSM_MEMORY_MANAGED, -1},
                               {RSSM_MEMORY_DEVICE, 1}, {RSSM_MEMORY_HOST, -1}, {RSSM_MEMORY_DEVICE, 0}}};
    const rssm_named_address good[] = {{"state", AT(0)}, {"q", AT(1)}, {"k", AT(1)}, {"out", AT(2)},
                                       {"force", NULL}};
    TS_OK(rssm_device_check_addresses(&seen, 0, "cuda", good, 5, mock_query, &api, &err), &err);
    /* each distinct address asked about once, NULL never */
    assert_int_equal(api.queries[0], 1);
    assert_int_equal(api.queries[1], 1);
    assert_int_equal(api.queries[2], 1);
    /* The same addresses again: no query at all. */
    for (int rep = 0; rep < 3; rep++)
        TS_OK(rssm_device_check_addresses(&seen, 0, "cuda", good, 5, mock_query, &api, &err), &err);
    assert_int_equal(api.queries[0] + api.queries[1] + api.queries[2], 3);

    /* A tensor on another device among them: refused by name, whatever its
     * place in the list, and asked about again next time (it never passed). */
    const rssm_named_address mixed[] = {{"state", AT(0)}, {"v", AT(3)}, {"out", AT(5)}};
    for (int rep = 1; rep <= 2; rep++) {
        TS_EXPECT(rssm_device_check_addresses(&seen, 0, "cuda:bulk", mixed, 3, mock_query, &api, &err),
                  RSSM_ERR_INVALID_ARGUMENT, &err);
        expect_message(&err, (const char *const[]){"cuda:bulk: v is memory of CUDA device 1", "device 0", NULL});
        assert_int_equal(api.queries[3], rep);
        assert_int_equal(api.queries[5], 0); /* the check stops at the first refusal */
    }
    /* The same memory is right for a layer on device 1 (a set of its own). */
    static rssm_seen seen1;
    const rssm_named_address on1[] = {{"v", AT(3)}};
    TS_OK(rssm_device_check_addresses(&seen1, 1, "cuda", on1, 1, mock_query, &api, &err), &err);
    /* Host memory. */
    const rssm_named_address host[] = {{"slot_index", AT(4)}};
    TS_EXPECT(rssm_device_check_addresses(&seen, 0, "cuda", host, 1, mock_query, &api, &err),
              RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"slot_index is host memory", NULL});
}

/* ------------------------------------------- the set of checked addresses */

static void test_seen(void **state)
{
    (void)state;
    static rssm_seen s;
    memset(&s, 0, sizeof s);
    assert_false(rssm_seen_has(&s, (const void *)0x1000));
    rssm_seen_add(&s, NULL); /* never kept */
    assert_int_equal(s.count, 0);
    /* Addresses that differ in their low bits only, or by the stride of the
     * table, all kept apart. */
    for (uintptr_t a = 0x7f0000001000u; a < 0x7f0000001000u + 64; a += 4)
        rssm_seen_add(&s, (const void *)a);
    for (uintptr_t a = 0x7f0000100000u; a < 0x7f0000100000u + 64 * 16384; a += 16384)
        rssm_seen_add(&s, (const void *)a);
    assert_int_equal(s.count, 16 + 64);
    for (uintptr_t a = 0x7f0000001000u; a < 0x7f0000001000u + 64; a += 4)
        assert_true(rssm_seen_has(&s, (const void *)a));
    assert_false(rssm_seen_has(&s, (const void *)(uintptr_t)0x7f0000001002u));
    rssm_seen_add(&s, (const void *)(uintptr_t)0x7f0000001000u); /* once only */
    assert_int_equal(s.count, 16 + 64);
    /* Full: it starts over, and the address that did not fit is kept. */
    for (uintptr_t i = 0; s.count < RSSM_SEEN_MAX; i++)
        rssm_seen_add(&s, (const void *)(0x10000000u + 256u * i));
    assert_true(rssm_seen_has(&s, (const void *)(uintptr_t)0x7f0000001000u));
    rssm_seen_add(&s, (const void *)(uintptr_t)0x5000u);
    assert_int_equal(s.count, 1);
    assert_true(rssm_seen_has(&s, (const void *)(uintptr_t)0x5000u));
    assert_false(rssm_seen_has(&s, (const void *)(uintptr_t)0x7f0000001000u));
}

/* ------------------------------------- the public API: each backend's rule */

static void test_create_on_device(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *b = (rssm_backend *)&err; /* never left stale */
    /* cpu: the host, -1 or 0. */
    for (int dev = -1; dev <= 0; dev++) {
        TS_OK(rssm_backend_create_on_device("cpu", dev, &b, &err), &err);
        assert_string_equal(rssm_backend_name(b), "cpu");
        assert_int_equal(rssm_backend_device_ordinal(b), -1);
        rssm_backend_destroy(&b);
    }
    b = (rssm_backend *)&err;
    TS_EXPECT(rssm_backend_create_on_device("cpu", 1, &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"cpu: device 1", "host", NULL});
    assert_null(b);
    TS_EXPECT(rssm_backend_create_on_device("cpu", -2, &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"device -2", NULL});
    TS_EXPECT(rssm_backend_create_on_device("nosuch", 0, &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_backend_create_on_device(NULL, 0, &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_backend_create_on_device("cpu", 0, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_int_equal(rssm_backend_device_ordinal(NULL), -1);
    /* vulkan: -1 only (RSSM_VK_DEVICE picks), refused before any device starts. */
    if (ts_backend_built_in("vulkan")) {
        TS_EXPECT(rssm_backend_create_on_device("vulkan", 0, &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
        expect_message(&err, (const char *const[]){"vulkan: device 0", "RSSM_VK_DEVICE", NULL});
        assert_null(b);
    }
    /* cuda: the ordinal asked for, on a machine with a GPU; unavailable or
     * out of range otherwise, never another device. */
    if (ts_backend_built_in("cuda")) {
        const rssm_status st = rssm_backend_create_on_device("cuda", 0, &b, &err);
        if (st == RSSM_OK) {
            assert_int_equal(rssm_backend_device_ordinal(b), 0);
            rssm_backend_destroy(&b);
        } else {
            assert_true(st == RSSM_ERR_UNAVAILABLE);
            assert_null(b);
        }
        TS_EXPECT(rssm_backend_create_on_device("cuda", 1 << 20, &b, &err),
                  st == RSSM_OK ? RSSM_ERR_INVALID_ARGUMENT : RSSM_ERR_UNAVAILABLE, &err);
    }
    /* auto on device 0: a backend that takes device 0 (cuda's 0, or the host). */
    TS_OK(rssm_backend_create_on_device("auto", 0, &b, &err), &err);
    const int ordinal = rssm_backend_device_ordinal(b);
    assert_true(ordinal == 0 || (ordinal == -1 && strcmp(rssm_backend_name(b), "cpu") == 0));
    rssm_backend_destroy(&b);
    /* auto on a device nobody has: none starts, and it says on which device. */
    TS_EXPECT(rssm_backend_create_on_device("auto", 1 << 20, &b, &err), RSSM_ERR_UNAVAILABLE, &err);
    expect_message(&err, (const char *const[]){"device 1048576", NULL});
    assert_null(b);
}

/* ------------------ the wiring: common code asking a backend's `place` */

/* The cpu backend, with a made-up device 0 and a made-up answer to where
 * an address is: `fallback` everywhere but at `odd`, which is `odd_place`. */
static struct {
    rssm_place fallback, odd_place;
    const void *odd;
    int queries;
} mock;

static rssm_place mock_place(void *ctx, const void *address)
{
    (void)ctx;
    mock.queries++;
    return address == mock.odd ? mock.odd_place : mock.fallback;
}

static int mock_ordinal(void *ctx)
{
    (void)ctx;
    return 0;
}

static rssm_backend_ops placed_ops;

static rssm_backend *placed_backend(void)
{
    const rssm_backend_ops *cpu = NULL;
    for (const rssm_backend_ops *const *ops = rssm_backend_registry; *ops; ops++)
        if (strcmp((*ops)->name, "cpu") == 0)
            cpu = *ops;
    assert_non_null(cpu);
    placed_ops = *cpu;
    placed_ops.place = mock_place;
    placed_ops.device_ordinal = mock_ordinal;
    rssm_backend *b = calloc(1, sizeof *b);
    assert_non_null(b);
    rssm_error err;
    TS_OK(cpu->create("cpu", -1, &b->ctx, &err), &err);
    b->ops = &placed_ops;
    atomic_init(&b->refs, 1u);
    snprintf(b->name, sizeof b->name, "cpu (placed)");
    return b;
}

static void place_all(rssm_memory memory, int device)
{
    mock.fallback = (rssm_place){memory, device};
    mock.odd = NULL;
    mock.queries = 0;
}

static void place_one(const void *address, rssm_memory memory, int device)
{
    mock.odd = address;
    mock.odd_place = (rssm_place){memory, device};
}

/* One small layer's tensors (ts_small_model: H 2, HV 4, K 16, V 8, L 4),
 * two slots, two rows, zero: runnable on the cpu backend. */
#define SLOTS 2
#define ROWS 2
static _Alignas(64) float state[SLOTS * 4 * 8 * 16], ring_d[SLOTS * 4 * 3 * 8], ring_k[SLOTS * 2 * 3 * 16],
    ring_g[SLOTS * 4 * 3], q[ROWS * 2 * 16], k[ROWS * 2 * 16], v[ROWS * 4 * 8], out[ROWS * 4 * 8],
    gate[ROWS * 4], beta[ROWS * 4], spare[ROWS * 4 * 8], spare2[SLOTS * 4 * 8 * 16];
static _Alignas(64) int32_t slot_index[ROWS] = {0, 1}, write_pos[ROWS], cursor[SLOTS];
static _Alignas(64) uint32_t drafts[ROWS] = {1, 1};

static void test_layer_on_a_device(void **state_)
{
    (void)state_;
    rssm_error err;
    rssm_backend *b = placed_backend();
    assert_int_equal(rssm_backend_device_ordinal(b), 0);
    rssm_layer_desc d = {.model = ts_small_model(RSSM_GATE_GDN, 1, 4), .max_rows = ROWS, .slots = SLOTS};
    rssm_layer *l = NULL;
    TS_OK(rssm_layer_create(b, &d, &l, &err), &err);
    rssm_layer_tensors t = {.state = state, .ring_d = ring_d, .ring_k = ring_k, .ring_g = ring_g, .q = q, .k = k,
                            .v = v, .gate = gate, .beta = beta, .out = out, .slot_index = slot_index,
                            .write_pos = write_pos};
    /* Everything on the layer's device: each distinct address asked about
     * once (q's and k's, state's ... : 12), then never again. */
    place_all(RSSM_MEMORY_DEVICE, 0);
    TS_OK(rssm_layer_run(l, ROWS, &t, NULL, &err), &err);
    assert_int_equal(mock.queries, 12);
    for (int rep = 0; rep < 3; rep++)
        TS_OK(rssm_layer_run(l, ROWS, &t, NULL, &err), &err);
    assert_int_equal(mock.queries, 12);

    /* A tensor on another device, or in host memory: refused by name, with
     * nothing run (out keeps its poison). */
    ts_poison(out, sizeof out);
    rssm_layer_tensors bad = t;
    bad.v = spare;
    place_one(spare, RSSM_MEMORY_DEVICE, 1);
    TS_EXPECT(rssm_layer_run(l, ROWS, &bad, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"layer run: v is memory of CUDA device 1",
                                               "this layer works on device 0", NULL});
    assert_int_equal(ts_count_nonfinite(out, RSSM_DTYPE_F32, sizeof out / sizeof out[0]), sizeof out / sizeof out[0]);
    bad = t;
    bad.state = spare2;
    place_one(spare2, RSSM_MEMORY_HOST, -1);
    TS_EXPECT(rssm_layer_run(l, ROWS, &bad, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"layer run: state is host memory", NULL});
    /* A refused address is asked about again: it never joined the seen. */
    const int before = mock.queries;
    TS_EXPECT(rssm_layer_run(l, ROWS, &bad, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_int_equal(mock.queries, before + 1);
    /* Managed memory is every device's. */
    place_one(spare2, RSSM_MEMORY_MANAGED, -1);
    TS_OK(rssm_layer_run(l, ROWS, &bad, NULL, &err), &err);

    /* A materialise reads only the state, the rings and the rows: a host
     * q it does not read is no reason to refuse it. */
    bad = t;
    bad.q = spare;
    place_one(spare, RSSM_MEMORY_HOST, -1);
    TS_OK(rssm_layer_materialise(l, ROWS, &bad, NULL, &err), &err);
    /* The cursor advance and the window's drafts are checked too. */
    place_one(cursor, RSSM_MEMORY_PINNED, -1);
    TS_EXPECT(rssm_layer_advance(l, ROWS, slot_index, write_pos, NULL, cursor, NULL, &err),
              RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"layer advance: cursor is pinned host memory", NULL});
    place_one(drafts, RSSM_MEMORY_DEVICE, 2);
    TS_EXPECT(rssm_layer_verify(l, 1, 1, drafts, &t, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"layer verify: drafts is memory of CUDA device 2", NULL});
    rssm_layer_destroy(&l);
    rssm_backend_destroy(&b);
}

static void test_pool_takes_host_memory(void **state_)
{
    (void)state_;
    rssm_error err;
    rssm_backend *b = placed_backend();
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 1, 4);
    rssm_pool *p = NULL;
    rssm_batch *batch = NULL;
    TS_OK(rssm_pool_create(b, &m, SLOTS, RSSM_FLUSH_ALIGNED, &p, &err), &err);
    TS_OK(rssm_batch_create(p, ROWS, &batch, &err), &err);
    uint32_t slots[ROWS];
    for (uint32_t r = 0; r < ROWS; r++)
        TS_OK(rssm_pool_alloc(p, &slots[r], &err), &err);
    const uint64_t seq[ROWS] = {1, 1};
    const rssm_step_inputs in = {.q = q, .k = k, .v = v, .gate = gate, .beta = beta};
    place_all(RSSM_MEMORY_HOST, -1);
    TS_OK(rssm_pool_write_state(p, slots[0], state, &err), &err);
    TS_OK(rssm_batch_step(batch, ROWS, slots, seq, 0, &in, out, &err), &err);
    assert_true(mock.queries > 0);
    /* Device memory where a host array belongs: refused by name, the pool
     * unchanged. */
    uint32_t pos = 9;
    place_one(state, RSSM_MEMORY_DEVICE, 0);
    TS_EXPECT(rssm_pool_write_state(p, slots[1], state, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"write_state: state is memory of CUDA device 0",
                                               "takes host memory", NULL});
    place_one(v, RSSM_MEMORY_DEVICE, 1);
    TS_EXPECT(rssm_batch_step(batch, ROWS, slots, seq, 0, &in, out, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"upload: in->v is memory of CUDA device 1", NULL});
    TS_OK(rssm_pool_write_pos(p, slots[0], &pos, &err), &err);
    assert_int_equal(pos, 1); /* the one step that ran */
    place_one(slots, RSSM_MEMORY_DEVICE, 0);
    TS_EXPECT(rssm_batch_run(batch, ROWS, slots, seq, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    expect_message(&err, (const char *const[]){"plan: slots is memory of CUDA device 0", NULL});
    rssm_batch_destroy(&batch);
    rssm_pool_destroy(&p);
    rssm_backend_destroy(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_place_check),
        cmocka_unit_test(test_check_addresses),
        cmocka_unit_test(test_seen),
        cmocka_unit_test(test_create_on_device),
        cmocka_unit_test(test_layer_on_a_device),
        cmocka_unit_test(test_pool_takes_host_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
