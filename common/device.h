/*
 * What a GPU backend decides about devices, in plain C: the ordinal it
 * starts on. The device API's answers come in as plain values (a flag per
 * device), so tests/test_device.c drives every rule and message without a
 * GPU; the cuda backend asks CUDA and hands the answers over.
 */
#ifndef RSSM_DEVICE_H
#define RSSM_DEVICE_H

#include "rssm.h"

#include <stdbool.h>

/* The ordinal a backend starts on (rssm.h, rssm_backend_create_on_device):
 * `requested` when it is >= 0, else the environment variable `env_name`
 * when its value `env_value` is set and not empty (a default for the
 * command-line tools), else the first of the `count` devices with
 * capable[i]. `need` says what capable means, for the messages ("of compute
 * capability 9.0 or newer"). An ordinal beyond the devices, or an
 * environment value that is not one, is RSSM_ERR_INVALID_ARGUMENT; a device
 * that is not capable, or none at all, RSSM_ERR_UNAVAILABLE. `requested`
 * is >= -1 (rssm_backend_create_on_device refuses the rest). */
rssm_status rssm_device_choose(const char *who, int requested, const char *env_name, const char *env_value, int count,
                               const bool *capable, const char *need, int *device, rssm_error *err);

#endif /* RSSM_DEVICE_H */
