/* rssm_backend: finding a backend by name and forwarding to its ops. */
#include "objects.h"
#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Families rssm knows, built in or not, so a missing one is "unavailable"
 * rather than "unknown". */
static const char *const known_families[] = {"cpu", "vulkan", "cuda", NULL};

size_t rssm_backend_name_count(void)
{
    size_t n = 0;
    for (const rssm_backend_ops *const *ops = rssm_backend_registry; *ops; ops++)
        for (const char *const *v = (*ops)->variants; *v; v++)
            n++;
    return n;
}

const char *rssm_backend_name_at(size_t index)
{
    for (const rssm_backend_ops *const *ops = rssm_backend_registry; *ops; ops++)
        for (const char *const *v = (*ops)->variants; *v; v++)
            if (index-- == 0)
                return *v;
    return NULL;
}

static rssm_status start(const rssm_backend_ops *ops, const char *variant, int device, rssm_backend **out,
                         rssm_error *err)
{
    rssm_backend *b = calloc(1, sizeof *b);
    if (!b)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "backend: out of host memory");
    rssm_status st = ops->create(variant, device, &b->ctx, err);
    if (st != RSSM_OK) {
        free(b);
        return st;
    }
    b->ops = ops;
    atomic_init(&b->refs, 1u);
    snprintf(b->name, sizeof b->name, "%s", variant);
    *out = b;
    return rssm_clear_error(err);
}

rssm_status rssm_backend_create(const char *name, rssm_backend **out, rssm_error *err)
{
    return rssm_backend_create_on_device(name, -1, out, err);
}

rssm_status rssm_backend_create_on_device(const char *name, int device, rssm_backend **out, rssm_error *err)
{
    if (out)
        *out = NULL; /* whatever is refused, the caller is never left a stale handle */
    if (!name || !out)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "backend name and out must not be NULL");
    if (device < -1)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "backend '%s': device %d: a device ordinal (>= 0), or -1 for the backend's default",
                              name, device);
    if (strcmp(name, "auto") == 0) {
        /* a backend that refuses the device is passed over like one that cannot start */
        for (const rssm_backend_ops *const *ops = rssm_backend_registry; *ops; ops++)
            if (start(*ops, (*ops)->variants[0], device, out, NULL) == RSSM_OK)
                return rssm_clear_error(err);
        if (device >= 0)
            return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "auto: no backend could be started on device %d",
                                  device);
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "auto: no backend could be started");
    }
    for (const rssm_backend_ops *const *ops = rssm_backend_registry; *ops; ops++)
        for (const char *const *v = (*ops)->variants; *v; v++)
            if (strcmp(*v, name) == 0)
                return start(*ops, *v, device, out, err);
    size_t family_len = strcspn(name, ":");
    for (const char *const *f = known_families; *f; f++) {
        if (strlen(*f) == family_len && strncmp(*f, name, family_len) == 0) {
            for (const rssm_backend_ops *const *ops = rssm_backend_registry; *ops; ops++)
                if (strcmp((*ops)->name, *f) == 0)
                    return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                          "backend '%s': unknown variant of '%s'", name, *f);
            return rssm_set_error(err, RSSM_ERR_UNAVAILABLE,
                                  "backend '%s' was not built into this rssm (configure with it on)", name);
        }
    }
    return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                          "unknown backend '%s' (known: cpu, vulkan, cuda, auto)", name);
}

void rssm_backend_retain(rssm_backend *b) { atomic_fetch_add(&b->refs, 1u); }

static rssm_place backend_place(const void *address, void *user)
{
    const rssm_backend *b = user;
    return b->ops->place(b->ctx, address);
}

rssm_status rssm_backend_check_device_memory(const rssm_backend *b, rssm_seen *seen, const char *who,
                                             const rssm_named_address *t, size_t n, rssm_error *err)
{
    if (!b->ops->place)
        return RSSM_OK;
    return rssm_device_check_addresses(seen, rssm_backend_device_ordinal(b), who, t, n, backend_place, (void *)b,
                                       err);
}

rssm_status rssm_backend_check_host_memory(const rssm_backend *b, const char *who, const rssm_named_address *t,
                                           size_t n, rssm_error *err)
{
    if (!b->ops->place)
        return RSSM_OK;
    return rssm_device_check_host(rssm_backend_device_ordinal(b), who, t, n, backend_place, (void *)b, err);
}

void rssm_backend_release(rssm_backend *b)
{
    if (!b || atomic_fetch_sub(&b->refs, 1u) != 1u)
        return;
    b->ops->destroy(b->ctx);
    free(b);
}

void rssm_backend_destroy(rssm_backend **b)
{
    if (!b || !*b)
        return;
    rssm_backend_release(*b);
    *b = NULL;
}

const char *rssm_backend_name(const rssm_backend *b) { return b ? b->name : "(null)"; }

const char *rssm_backend_kernels(const rssm_backend *b)
{
    if (!b)
        return "(null)";
    const char *k = b->ops->kernels ? b->ops->kernels(b->ctx) : NULL;
    return k ? k : b->name;
}

const char *rssm_backend_device(const rssm_backend *b)
{
    return b ? b->ops->device(b->ctx) : "(null)";
}

int rssm_backend_device_ordinal(const rssm_backend *b)
{
    return b && b->ops->device_ordinal ? b->ops->device_ordinal(b->ctx) : -1;
}

rssm_status rssm_backend_describe(const rssm_backend *b, char *buf, size_t size, rssm_error *err)
{
    if (!b || !buf || size == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "describe: backend and a non-empty buffer are required");
    buf[0] = '\0';
    b->ops->describe(b->ctx, buf, size);
    return rssm_clear_error(err);
}

rssm_status rssm_backend_supports(const rssm_backend *b, const rssm_model *m, rssm_error *err)
{
    if (!b)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "backend must not be NULL");
    rssm_status st = rssm_model_validate(m, err);
    if (st != RSSM_OK)
        return st;
    return b->ops->supports(b->ctx, m, err);
}

rssm_status rssm_backend_matrix_dtype(const rssm_backend *b, const rssm_model *m, rssm_dtype *dtype,
                                      rssm_error *err)
{
    if (!dtype)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "matrix_dtype: dtype must not be NULL");
    rssm_status st = rssm_backend_supports(b, m, err);
    if (st != RSSM_OK)
        return st;
    *dtype = b->ops->matrix_dtype ? b->ops->matrix_dtype(b->ctx, m) : RSSM_DTYPE_F32;
    return rssm_clear_error(err);
}

rssm_status rssm_backend_copy_bandwidth(rssm_backend *b, size_t bytes, double *bytes_per_second,
                                        rssm_error *err)
{
    if (!b || !bytes_per_second || bytes < 4096)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "copy bandwidth: backend, result pointer and >= 4096 bytes are required");
    if (!b->ops->copy_bandwidth)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "%s cannot measure its copy bandwidth", b->name);
    return b->ops->copy_bandwidth(b->ctx, bytes, bytes_per_second, err);
}

rssm_status rssm_backend_limit_sms(rssm_backend *b, uint32_t sms, rssm_error *err)
{
    if (!b)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "limit sms: backend must not be NULL");
    if (!b->ops->limit_sms)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "%s has no multiprocessors to cap", b->name);
    return b->ops->limit_sms(b->ctx, sms, err);
}

rssm_status rssm_backend_vulkan_handles(const rssm_backend *b, rssm_vulkan_handles *h, rssm_error *err)
{
    if (!b || !h)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "vulkan handles: backend and h must not be NULL");
    if (!b->ops->vulkan_handles)
        return rssm_set_error(err, RSSM_ERR_UNSUPPORTED, "vulkan handles: %s is not a vulkan backend", b->name);
    return b->ops->vulkan_handles(b->ctx, h, err);
}
