/* Backends by name: the registry, create/destroy, what absent devices do,
 * supports(), and the status strings. */
#include "test_support.h"

#include <stdio.h>
#include <string.h>

static void test_names(void **state)
{
    (void)state;
    size_t n = rssm_backend_name_count();
    assert_true(n >= 1);
    assert_true(ts_backend_built_in("cpu"));
    for (size_t i = 0; i < n; i++) {
        const char *a = rssm_backend_name_at(i);
        assert_non_null(a);
        assert_true(a[0] != '\0');
        assert_true(strcmp(a, "auto") != 0); /* auto is not a backend */
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(a, rssm_backend_name_at(j));
    }
    /* Past the end: no backend (and no crash). */
    assert_null(rssm_backend_name_at(n));
    assert_null(rssm_backend_name_at((size_t)-1));
}

static void test_create_cpu(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *b = NULL;
    TS_OK(rssm_backend_create("cpu", &b, &err), &err);
    assert_non_null(b);
    assert_string_equal(rssm_backend_name(b), "cpu");
    const char *dev = rssm_backend_device(b);
    assert_non_null(dev);
    assert_true(dev[0] != '\0');

    char buf[1024];
    ts_poison(buf, sizeof buf);
    TS_OK(rssm_backend_describe(b, buf, sizeof buf, &err), &err);
    assert_non_null(memchr(buf, '\0', sizeof buf));
    assert_true(buf[0] != '\0');
    /* A tiny buffer is truncated, still terminated, and not overrun. */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    rssm_status st = rssm_backend_describe(b, tiny, 4, &err);
    assert_true(st == RSSM_OK || st == RSSM_ERR_INVALID_ARGUMENT);
    if (st == RSSM_OK)
        assert_non_null(memchr(tiny, '\0', 4));
    assert_int_equal(tiny[4], 'x');
    TS_EXPECT(rssm_backend_describe(b, NULL, sizeof buf, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_backend_describe(b, buf, 0, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_backend_describe(NULL, buf, sizeof buf, &err), RSSM_ERR_INVALID_ARGUMENT, &err);

    /* The CPU runs every valid model. */
    const rssm_gate_kind kinds[] = { RSSM_GATE_GDN, RSSM_GATE_KDA };
    for (int g = 0; g < 2; g++) {
        rssm_model m = ts_small_model(kinds[g], 2, 8);
        TS_OK(rssm_backend_supports(b, &m, &err), &err);
        m.state_dtype = RSSM_DTYPE_BF16;
        m.ring_dtype = RSSM_DTYPE_BF16;
        m.io_dtype = RSSM_DTYPE_BF16;
        m.gate_mode = RSSM_GATE_RAW_SAFE;
        TS_OK(rssm_backend_supports(b, &m, &err), &err);
        m.replay = 0;
        TS_OK(rssm_backend_supports(b, &m, &err), &err);
        m.num_v_heads = 3; /* HV % H != 0: invalid, not unsupported */
        TS_EXPECT(rssm_backend_supports(b, &m, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    }
    TS_EXPECT(rssm_backend_supports(b, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    rssm_model ok = ts_small_model(RSSM_GATE_GDN, 1, 4);
    TS_EXPECT(rssm_backend_supports(NULL, &ok, &err), RSSM_ERR_INVALID_ARGUMENT, &err);

    /* The host copy bandwidth: positive and finite. */
    double bw = -1;
    TS_OK(rssm_backend_copy_bandwidth(b, 1u << 20, &bw, &err), &err);
    assert_true(bw > 0 && bw < 1e15);
    TS_EXPECT(rssm_backend_copy_bandwidth(b, 0, &bw, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_backend_copy_bandwidth(b, 1u << 20, NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    TS_EXPECT(rssm_backend_copy_bandwidth(NULL, 1u << 20, &bw, &err), RSSM_ERR_INVALID_ARGUMENT, &err);

    /* A cap of multiprocessors is a GPU backend's: the cpu says so. */
    TS_EXPECT(rssm_backend_limit_sms(b, 78, &err), RSSM_ERR_UNSUPPORTED, &err);
    assert_non_null(strstr(err.message, "no multiprocessors"));
    TS_EXPECT(rssm_backend_limit_sms(NULL, 78, &err), RSSM_ERR_INVALID_ARGUMENT, &err);

    rssm_backend_destroy(&b);
    assert_null(b);
    rssm_backend_destroy(&b); /* already NULL */
    rssm_backend_destroy(NULL);
}

static void test_create_bad_names(void **state)
{
    (void)state;
    rssm_error err;
    const char *bad[] = { "", "nosuch", "CPU", "cpu ", "cpu:nosuch", "auto:x", ":", "vulkan:nosuch" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rssm_backend *b = NULL;
        memset(&err, 0, sizeof err);
        rssm_status st = rssm_backend_create(bad[i], &b, &err);
        if (st != RSSM_ERR_INVALID_ARGUMENT && st != RSSM_ERR_UNAVAILABLE)
            fail_msg("backend '%s': %s, expected invalid argument or unavailable", bad[i],
                     rssm_status_str(st));
        assert_int_equal(err.status, st);
        assert_true(err.message[0] != '\0');
        assert_null(b);
    }
    rssm_backend *b = NULL;
    TS_EXPECT(rssm_backend_create(NULL, &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    assert_null(b);
    TS_EXPECT(rssm_backend_create("cpu", NULL, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
    /* err may be NULL. */
    assert_int_not_equal(rssm_backend_create("nosuch", &b, NULL), RSSM_OK);
    assert_null(b);
}

static void test_auto(void **state)
{
    (void)state;
    rssm_error err;
    rssm_backend *b = NULL;
    TS_OK(rssm_backend_create("auto", &b, &err), &err);
    assert_non_null(b);
    /* auto picks a real, listed backend (variant names included). */
    const char *name = rssm_backend_name(b);
    assert_non_null(name);
    if (!ts_backend_built_in(name))
        fail_msg("auto chose '%s', which rssm_backend_name_at does not list", name);
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 1, 4);
    rssm_status st = rssm_backend_supports(b, &m, &err);
    assert_true(st == RSSM_OK || st == RSSM_ERR_UNSUPPORTED);
    rssm_backend_destroy(&b);
    assert_null(b);
}

/* Every listed backend either starts or says it is unavailable; the
 * GPU backends built without a device here must not crash. The bare names
 * of GPU backends that may not be built in must also answer UNAVAILABLE. */
static void test_every_backend_starts_or_is_unavailable(void **state)
{
    (void)state;
    const char *extra[] = { "cuda", "vulkan" };
    size_t n = rssm_backend_name_count();
    for (size_t i = 0; i < n + 2; i++) {
        const char *name = i < n ? rssm_backend_name_at(i) : extra[i - n];
        rssm_error err;
        memset(&err, 0, sizeof err);
        rssm_backend *b = NULL;
        rssm_status st = rssm_backend_create(name, &b, &err);
        if (st == RSSM_ERR_UNAVAILABLE) {
            assert_null(b);
            assert_true(err.message[0] != '\0');
            if (rh_backend_required(name))
                fail_msg("backend %s is required here (RSSM_REQUIRE_BACKENDS) but unavailable: %s", name,
                         err.message);
            print_message("[  INFO    ] backend %s: unavailable (%s)\n", name, err.message);
            continue;
        }
        if (st != RSSM_OK)
            fail_msg("backend %s: %s (%s), expected ok or unavailable", name, rssm_status_str(st),
                     err.message);
        assert_non_null(b);
        const char *full = rssm_backend_name(b);
        /* The full name starts with the requested one ("vulkan" -> "vulkan:portable"). */
        if (strncmp(full, name, strlen(name)) != 0)
            fail_msg("backend %s reports the name %s", name, full);
        assert_non_null(rssm_backend_device(b));
        rssm_model m = ts_small_model(RSSM_GATE_KDA, 1, 8);
        st = rssm_backend_supports(b, &m, &err);
        assert_true(st == RSSM_OK || st == RSSM_ERR_UNSUPPORTED);
        /* The copy ceiling over more bytes than one Vulkan descriptor binds
         * (lavapipe: 128 MiB), as `rssm bench --state-mib 160` asks. */
        double bw = -1;
        TS_OK(rssm_backend_copy_bandwidth(b, (size_t)160 << 20, &bw, &err), &err);
        assert_true(bw > 0 && bw < 1e15);
        print_message("[  INFO    ] backend %s: %s\n", full, rssm_backend_device(b));
        if (strncmp(full, "vulkan", 6) == 0) {
            /* What a device offers for 16-bit arithmetic, said either way. */
            char buf[4096];
            TS_OK(rssm_backend_describe(b, buf, sizeof buf, &err), &err);
            const char *at = strstr(buf, "16-bit arithmetic: shaderFloat16 ");
            if (!at || !(strstr(at, "VK_KHR_shader_bfloat16 offered") || strstr(at, "VK_KHR_shader_bfloat16 not offered")))
                fail_msg("backend %s: no 16-bit arithmetic line in its description:\n%s", full, buf);
            at += strlen("16-bit arithmetic: shaderFloat16 ");
            assert_true(strncmp(at, "yes,", 4) == 0 || strncmp(at, "no,", 3) == 0);
        }
        rssm_backend_destroy(&b);
        assert_null(b);
    }
}

static void test_status_strings(void **state)
{
    (void)state;
    const rssm_status all[] = {
        RSSM_OK, RSSM_ERR_INVALID_ARGUMENT, RSSM_ERR_UNSUPPORTED, RSSM_ERR_UNAVAILABLE,
        RSSM_ERR_OUT_OF_MEMORY, RSSM_ERR_POOL_FULL, RSSM_ERR_BAD_SLOT, RSSM_ERR_FORMAT,
        RSSM_ERR_IO, RSSM_ERR_DEVICE,
    };
    const size_t n = sizeof all / sizeof all[0];
    const char *unknown = rssm_status_str((rssm_status)1000);
    assert_non_null(unknown);
    assert_non_null(rssm_status_str((rssm_status)-1));
    for (size_t i = 0; i < n; i++) {
        const char *s = rssm_status_str(all[i]);
        assert_non_null(s);
        assert_true(s[0] != '\0');
        assert_string_not_equal(s, unknown);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(s, rssm_status_str(all[j]));
    }
    assert_string_equal(rssm_status_str(RSSM_ERR_INVALID_ARGUMENT), "invalid argument");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_create_cpu),
        cmocka_unit_test(test_create_bad_names),
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_every_backend_starts_or_is_unavailable),
        cmocka_unit_test(test_status_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
