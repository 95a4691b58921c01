/*
 * What a GPU backend decides about devices, in plain C: the ordinal it
 * starts on, and whether a tensor's memory is one its kernels may use.
 * The device API's answers come in as plain values (a flag per device, a
 * place per address), so tests/test_device.c drives every rule and message
 * without a GPU; the cuda backend asks CUDA and hands the answers over.
 */
#ifndef RSSM_DEVICE_H
#define RSSM_DEVICE_H

#include "rssm.h"

#include <stdbool.h>
#include <stdint.h>

/* The ordinal a backend starts on (rssm.h, rssm_backend_create_on_device):
 * `requested` when it is >= 0, else the environment variable `env_name`
 * when its value `env_value` is set and not empty (a default for the
 * command-line tools), else the first of the `count` devices with
 * capable[i]. `need` says what capable means, for the messages ("of a
 * compute capability this build has code for (...)": cuda/targets.h). An
 * ordinal beyond the devices, or an environment value that is not one, is
 * RSSM_ERR_INVALID_ARGUMENT; a device that is not capable, or none at all,
 * RSSM_ERR_UNAVAILABLE. `requested`
 * is >= -1 (rssm_backend_create_on_device refuses the rest). */
rssm_status rssm_device_choose(const char *who, int requested, const char *env_name, const char *env_value, int count,
                               const bool *capable, const char *need, int *device, rssm_error *err);

/* Where an address lives, as the device API says. */
typedef enum rssm_memory {
    RSSM_MEMORY_UNKNOWN = 0, /* the device API could not say */
    RSSM_MEMORY_HOST,        /* host memory the device API does not know (malloc, a mapped file) */
    RSSM_MEMORY_PINNED,      /* host memory the device API allocated or registered */
    RSSM_MEMORY_DEVICE,      /* memory of one device */
    RSSM_MEMORY_MANAGED,     /* managed memory, which every device may use */
} rssm_memory;

typedef struct rssm_place {
    rssm_memory memory;
    int device; /* RSSM_MEMORY_DEVICE: its ordinal */
} rssm_place;

/* RSSM_OK when a kernel on device `device` may use memory at `place`: that
 * device's own, or managed memory. Otherwise RSSM_ERR_INVALID_ARGUMENT
 * naming the tensor `name` and both places ("q is memory of CUDA device 1,
 * but this layer works on device 0"). Host memory, pinned or not, is
 * refused: the kernels would read it across the bus, if at all. */
rssm_status rssm_place_check(const char *who, const char *name, rssm_place place, int device, rssm_error *err);

/* RSSM_OK when the host may read and write memory at `place`: anything
 * but device memory (a place the device API cannot say is taken for the
 * host's). Device memory is RSSM_ERR_INVALID_ARGUMENT naming `name`, the
 * device it is on and `device`, the backend's: the pool and batch calls
 * take host arrays and copy them themselves (rssm.h). */
rssm_status rssm_host_check(const char *who, const char *name, rssm_place place, int device, rssm_error *err);

/* Addresses already checked, so that a launch asks the device API only
 * about addresses it has not seen: an open-addressed set of up to
 * RSSM_SEEN_MAX of them, emptied when full (the addresses of an engine's
 * model, a few per layer, fit many times over). Zeroed memory is an empty
 * set. */
#define RSSM_SEEN_SLOTS 1024u
#define RSSM_SEEN_MAX (RSSM_SEEN_SLOTS / 4u * 3u)
typedef struct rssm_seen {
    uintptr_t slot[RSSM_SEEN_SLOTS]; /* 0: empty (NULL is never checked) */
    uint32_t count;
} rssm_seen;

bool rssm_seen_has(const rssm_seen *s, const void *address);
void rssm_seen_add(rssm_seen *s, const void *address);

typedef struct rssm_named_address {
    const char *name;
    const void *address; /* NULL: an optional tensor left out, not checked */
} rssm_named_address;

/* The device API's answer for one address (cudaPointerGetAttributes in the
 * cuda backend, a table in the tests). */
typedef rssm_place (*rssm_place_query)(const void *address, void *user);

/* rssm_place_check of every address of `t` not in `seen`, asking `query`
 * once for each; those that pass join `seen`. The first that does not
 * stops the check with its error. */
rssm_status rssm_device_check_addresses(rssm_seen *seen, int device, const char *who, const rssm_named_address *t,
                                        size_t n, rssm_place_query query, void *user, rssm_error *err);

/* rssm_host_check of every address of `t`, asking `query` each time: the
 * calls that take host memory wait for the device anyway, so nothing is
 * remembered. */
rssm_status rssm_device_check_host(int device, const char *who, const rssm_named_address *t, size_t n,
                                   rssm_place_query query, void *user, rssm_error *err);

#endif /* RSSM_DEVICE_H */
