/* Device choice (device.h): plain C over the answers a backend got from
 * its device API. */
#include "device.h"
#include "error.h"

#include <stdlib.h>

rssm_status rssm_device_choose(const char *who, int requested, const char *env_name, const char *env_value, int count,
                               const bool *capable, const char *need, int *device, rssm_error *err)
{
    if (requested >= 0) {
        if (requested >= count)
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: device %d: this process sees %d device(s), "
                                  "0..%d", who, requested, count, count - 1);
        if (!capable[requested])
            return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "%s: device %d is not %s", who, requested, need);
        *device = requested;
        return rssm_clear_error(err);
    }
    if (env_value && *env_value) {
        char *end = NULL;
        const long n = strtol(env_value, &end, 10);
        if (*end != '\0' || env_value[0] < '0' || env_value[0] > '9' || n >= count)
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: %s=%s: must be a device ordinal in 0..%d",
                                  who, env_name, env_value, count - 1);
        if (!capable[n])
            return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "%s: %s=%s is not %s", who, env_name, env_value, need);
        *device = (int)n;
        return rssm_clear_error(err);
    }
    for (int i = 0; i < count; i++) {
        if (capable[i]) {
            *device = i;
            return rssm_clear_error(err);
        }
    }
    return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "%s: %d device(s), none %s", who, count, need);
}
