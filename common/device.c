/* Device choice and tensor placement (device.h): plain C over the answers
 * a backend got from its device API. */
#include "device.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>

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

rssm_status rssm_place_check(const char *who, const char *name, rssm_place place, int device, rssm_error *err)
{
    switch (place.memory) {
    case RSSM_MEMORY_DEVICE:
        if (place.device == device)
            return rssm_clear_error(err);
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "%s: %s is memory of CUDA device %d, but this layer works on device %d (its backend's: "
                              "rssm_backend_create_on_device)", who, name, place.device, device);
    case RSSM_MEMORY_MANAGED:
        return rssm_clear_error(err);
    case RSSM_MEMORY_PINNED:
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "%s: %s is pinned host memory, but this layer works on device memory of CUDA device %d",
                              who, name, device);
    case RSSM_MEMORY_HOST:
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "%s: %s is host memory, but this layer works on device memory of CUDA device %d", who,
                              name, device);
    case RSSM_MEMORY_UNKNOWN:
        break;
    }
    return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                          "%s: the device API cannot say where %s is, and this layer works on device memory of CUDA "
                          "device %d", who, name, device);
}

rssm_status rssm_host_check(const char *who, const char *name, rssm_place place, int device, rssm_error *err)
{
    if (place.memory != RSSM_MEMORY_DEVICE)
        return rssm_clear_error(err);
    return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                          "%s: %s is memory of CUDA device %d, but this call takes host memory (it copies to and "
                          "from its pool on device %d itself)", who, name, place.device, device);
}

/* Fibonacci hashing of the address without its low bits, which allocators
 * keep zero. */
static uint32_t seen_home(uintptr_t a)
{
    return (uint32_t)(((uint64_t)(a >> 4) * UINT64_C(0x9E3779B97F4A7C15)) >> 54) & (RSSM_SEEN_SLOTS - 1u);
}

_Static_assert((RSSM_SEEN_SLOTS & (RSSM_SEEN_SLOTS - 1u)) == 0 && RSSM_SEEN_SLOTS <= (1u << 10),
               "seen_home takes the top 10 bits of the hash");

bool rssm_seen_has(const rssm_seen *s, const void *address)
{
    const uintptr_t a = (uintptr_t)address;
    for (uint32_t i = seen_home(a);; i = (i + 1u) & (RSSM_SEEN_SLOTS - 1u)) {
        if (s->slot[i] == a)
            return true;
        if (s->slot[i] == 0)
            return false; /* never all full: at most RSSM_SEEN_MAX are */
    }
}

void rssm_seen_add(rssm_seen *s, const void *address)
{
    const uintptr_t a = (uintptr_t)address;
    if (a == 0 || rssm_seen_has(s, address))
        return;
    if (s->count >= RSSM_SEEN_MAX) {
        memset(s->slot, 0, sizeof s->slot); /* start over: the addresses in use come back one check each */
        s->count = 0;
    }
    uint32_t i = seen_home(a);
    while (s->slot[i] != 0)
        i = (i + 1u) & (RSSM_SEEN_SLOTS - 1u);
    s->slot[i] = a;
    s->count++;
}

rssm_status rssm_device_check_addresses(rssm_seen *seen, int device, const char *who, const rssm_named_address *t,
                                        size_t n, rssm_place_query query, void *user, rssm_error *err)
{
    for (size_t i = 0; i < n; i++) {
        if (!t[i].address || rssm_seen_has(seen, t[i].address))
            continue;
        const rssm_status st = rssm_place_check(who, t[i].name, query(t[i].address, user), device, err);
        if (st != RSSM_OK)
            return st;
        rssm_seen_add(seen, t[i].address);
    }
    return RSSM_OK;
}

rssm_status rssm_device_check_host(int device, const char *who, const rssm_named_address *t, size_t n,
                                   rssm_place_query query, void *user, rssm_error *err)
{
    for (size_t i = 0; i < n; i++) {
        if (!t[i].address)
            continue;
        const rssm_status st = rssm_host_check(who, t[i].name, query(t[i].address, user), device, err);
        if (st != RSSM_OK)
            return st;
    }
    return RSSM_OK;
}
