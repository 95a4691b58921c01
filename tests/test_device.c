/* Devices (common/device.h, rssm_backend_create_on_device): which ordinal a
 * backend starts on, and each backend's rule for the device it is asked
 * for. The device API's answers are made up here, so every rule runs
 * without a GPU; the cuda backend's own answers are checked on a GPU by
 * bench/h200/device_check.py. */
#include "test_support.h"

#include "device.h"

#include <stdio.h>
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

/* ------------------------------------- the public API: each backend's rule */

static int built_in(const char *name)
{
    for (size_t i = 0; i < rssm_backend_name_count(); i++)
        if (strcmp(rssm_backend_name_at(i), name) == 0)
            return 1;
    return 0;
}

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
    if (built_in("vulkan")) {
        TS_EXPECT(rssm_backend_create_on_device("vulkan", 0, &b, &err), RSSM_ERR_INVALID_ARGUMENT, &err);
        expect_message(&err, (const char *const[]){"vulkan: device 0", "RSSM_VK_DEVICE", NULL});
        assert_null(b);
    }
    /* cuda: the ordinal asked for, on a machine with a GPU; unavailable or
     * out of range otherwise, never another device. */
    if (built_in("cuda")) {
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_create_on_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
