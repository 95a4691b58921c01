/*
 * The CPU backend: "device" memory is host memory, uploads and downloads are
 * copies, and a step runs the kernel of cpu_kernels.h (the best variant this
 * CPU runs, or the one RSSM_CPU_VARIANT names) for every (layer, row, value
 * head) on a thread pool. It is the reference the GPU backends are checked
 * against and the default where there is no GPU.
 */
/* clock_gettime, sysconf (POSIX) and madvise (BSD/Linux): not C11 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif

#include "backend.h"
#include "cpu_kernels.h"
#include "dtype.h"
#include "error.h"
#include "thread_pool.h"
#include "timing.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Host allocations are aligned to a cache line; sizes are rounded up to it,
 * as aligned_alloc requires. */
#define CPU_ALIGN 64u
#define CPU_MAX_THREADS 1024u

typedef struct cpu_ctx {
    rssm_thread_pool *threads;
    unsigned thread_count;
    int threads_from_env;
    const rssm_cpu_variant *variant; /* the compiled step this context runs */
    int variant_from_env;
    char device[128];
} cpu_ctx;

typedef struct cpu_pool {
    uint8_t *base;
    uint32_t slots;
    size_t slot_bytes;
} cpu_pool;

typedef struct cpu_batch {
    cpu_ctx *ctx;
    cpu_pool *pool;
    rssm_kernel_params params;
    rssm_io_sizes row_sizes;      /* bytes of one row of each array, one layer */
    void *q, *k, *v, *out;        /* [layers][max_rows][...] */
    float *gate, *beta;
    float *A_log, *dt_bias;       /* [layers][HV], [layers][HV] or [layers][HV][K] */
    rssm_layer_io *layer_io;      /* [layers]: what the kernel reads and writes */
    rssm_row_header *header;      /* [max_rows], the rows of the current run */
    size_t *order;                /* [layers * max_rows]: (layer, row) pairs, flushing rows first */
    atomic_uint *overflow;        /* [max_rows], set by the kernels (cpu_kernels.h) */
    uint32_t rows;                /* rows of the current run */
    float *scratch;               /* one block per worker */
    size_t scratch_floats;        /* per worker, a multiple of CPU_ALIGN / 4 */
    double last_seconds;
} cpu_batch;

static void *alloc_aligned(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes > SIZE_MAX - CPU_ALIGN)
        return NULL;
    return aligned_alloc(CPU_ALIGN, (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN);
}

/* The pool is streamed through once per step. With 4 KiB pages every 4 KiB
 * of a checkpoint starts with a TLB miss and a restart of the hardware
 * prefetcher (it stops at page boundaries); 2 MiB pages remove both. So
 * large pools are aligned to 2 MiB and, where the kernel has transparent
 * huge pages on request, asked to use them (about 10% faster steps here).
 * Only a hint: without it the pool works the same. */
#define CPU_HUGE_PAGE ((size_t)2 << 20)

static void *alloc_pool(size_t bytes)
{
    if (bytes < CPU_HUGE_PAGE)
        return alloc_aligned(bytes);
    if (bytes > SIZE_MAX - CPU_HUGE_PAGE)
        return NULL;
    const size_t rounded = (bytes + CPU_HUGE_PAGE - 1) / CPU_HUGE_PAGE * CPU_HUGE_PAGE;
    void *p = aligned_alloc(CPU_HUGE_PAGE, rounded);
#if defined(MADV_HUGEPAGE)
    if (p)
        (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}

/* ---------------------------------------------------------------- context */

/* RSSM_CPU_THREADS if set, else the online cores. */
static rssm_status thread_count(unsigned *count, int *from_env, rssm_error *err)
{
    const char *env = getenv("RSSM_CPU_THREADS");
    *from_env = env && *env;
    if (*from_env) {
        char *end = NULL;
        errno = 0;
        unsigned long n = strtoul(env, &end, 10);
        /* Digits only: strtoul would also take leading blanks and a sign. */
        if (errno != 0 || *end != '\0' || env[0] < '0' || env[0] > '9' || n == 0 || n > CPU_MAX_THREADS)
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "RSSM_CPU_THREADS='%s': must be an integer in 1..%u", env,
                                  CPU_MAX_THREADS);
        *count = (unsigned)n;
        return RSSM_OK;
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    *count = online < 1 ? 1u : (online > (long)CPU_MAX_THREADS ? CPU_MAX_THREADS : (unsigned)online);
    return RSSM_OK;
}

/* The "model name" line of /proc/cpuinfo where there is one. */
static void read_cpu_name(char *buf, size_t size)
{
    snprintf(buf, size, "host CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        const char *colon = strchr(line, ':');
        if (!colon)
            break;
        colon++;
        while (*colon == ' ' || *colon == '\t')
            colon++;
        size_t len = strcspn(colon, "\n");
        if (len > 0)
            snprintf(buf, size, "%.*s", (int)len, colon);
        break;
    }
    fclose(f);
}

static rssm_status cpu_create(const char *variant, int device, void **out, rssm_error *err)
{
    if (variant && strcmp(variant, "cpu") != 0)
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE, "cpu backend has no variant '%s'", variant);
    /* The host is the cpu backend's one device (rssm_backend_create_on_device). */
    if (device > 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "cpu: device %d: the cpu backend runs on the host, device 0 (or -1)", device);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cpu backend: out of host memory");
    /* RSSM_CPU_VARIANT names a kernel variant (tests use "baseline" to run
     * the portable code on a machine that has more); unset, the best. */
    const char *want = getenv("RSSM_CPU_VARIANT");
    c->variant_from_env = want && *want;
    c->variant = rssm_cpu_variant_pick(c->variant_from_env ? want : NULL);
    if (!c->variant) {
        free(c);
        return rssm_set_error(err, RSSM_ERR_UNAVAILABLE,
                              "RSSM_CPU_VARIANT='%s': not built in or not supported by this CPU "
                              "(built in: %s)", want, rssm_cpu_variant_names());
    }
    rssm_status st = thread_count(&c->thread_count, &c->threads_from_env, err);
    if (st == RSSM_OK)
        st = rssm_thread_pool_create(c->thread_count, &c->threads, err);
    if (st != RSSM_OK) {
        free(c);
        return st;
    }
    read_cpu_name(c->device, sizeof c->device);
    *out = c;
    return rssm_clear_error(err);
}

static void cpu_destroy(void *ctx)
{
    cpu_ctx *c = ctx;
    if (!c)
        return;
    rssm_thread_pool_destroy(&c->threads);
    free(c);
}

static const char *cpu_device(void *ctx) { return ((cpu_ctx *)ctx)->device; }

static void cpu_describe(void *ctx, char *buf, size_t size)
{
    cpu_ctx *c = ctx;
    snprintf(buf, size,
             "threads: %u (%s)\n"
             "kernels: %s (variant '%s', %s; built in: %s), fp32 arithmetic, FMA where the "
             "variant has it\n",
             c->thread_count,
             c->threads_from_env ? "from RSSM_CPU_THREADS" : "online cores; set RSSM_CPU_THREADS to change",
             c->variant->isa(), c->variant->name,
             c->variant_from_env ? "from RSSM_CPU_VARIANT" : "the best this CPU runs",
             rssm_cpu_variant_names());
}

static rssm_status cpu_supports(void *ctx, const rssm_model *m, rssm_error *err)
{
    (void)ctx;
    /* Every valid model: the kernels take every shape, dtype, gate and L. */
    return rssm_model_validate(m, err);
}

/* ------------------------------------------------------------------- pool */

static rssm_status cpu_pool_create(void *ctx, const rssm_slot_layout *layout, uint32_t slots, void **out,
                                   rssm_error *err)
{
    (void)ctx;
    if (slots == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "cpu pool: slots must be >= 1");
    if (layout->slot_bytes != 0 && slots > SIZE_MAX / layout->slot_bytes)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY,
                              "cpu pool: %u slots of %zu bytes overflow the address space", slots,
                              layout->slot_bytes);
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cpu pool: out of host memory");
    const size_t bytes = (size_t)slots * layout->slot_bytes;
    p->base = alloc_pool(bytes);
    if (!p->base) {
        free(p);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY,
                              "cpu pool: could not allocate %zu bytes for %u slots of %zu bytes",
                              bytes, slots, layout->slot_bytes);
    }
    p->slots = slots;
    p->slot_bytes = layout->slot_bytes;
    *out = p;
    return rssm_clear_error(err);
}

static void cpu_pool_destroy(void *ctx, void *pool)
{
    (void)ctx;
    cpu_pool *p = pool;
    if (!p)
        return;
    free(p->base);
    free(p);
}

/* Slot `slot`'s bytes in the pool, or NULL (and *err says why). */
static uint8_t *slot_bytes_at(const cpu_pool *p, uint32_t slot, rssm_error *err)
{
    if (slot >= p->slots) {
        rssm_set_error(err, RSSM_ERR_BAD_SLOT, "slot %u is out of range (pool has %u)", slot, p->slots);
        return NULL;
    }
    return p->base + (size_t)slot * p->slot_bytes;
}

static rssm_status cpu_slot_read(void *ctx, void *pool, uint32_t slot, void *bytes, rssm_error *err)
{
    (void)ctx;
    const cpu_pool *p = pool;
    const uint8_t *at = slot_bytes_at(p, slot, err);
    if (!at)
        return RSSM_ERR_BAD_SLOT;
    memcpy(bytes, at, p->slot_bytes);
    return rssm_clear_error(err);
}

static rssm_status cpu_slot_write(void *ctx, void *pool, uint32_t slot, const void *bytes,
                                  rssm_error *err)
{
    (void)ctx;
    const cpu_pool *p = pool;
    uint8_t *at = slot_bytes_at(p, slot, err);
    if (!at)
        return RSSM_ERR_BAD_SLOT;
    memcpy(at, bytes, p->slot_bytes);
    return rssm_clear_error(err);
}

/* ------------------------------------------------------------------ batch */

static void cpu_batch_destroy(void *ctx, void *batch)
{
    (void)ctx;
    cpu_batch *b = batch;
    if (!b)
        return;
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->out);
    free(b->gate);
    free(b->beta);
    free(b->A_log);
    free(b->dt_bias);
    free(b->layer_io);
    free(b->header);
    free(b->order);
    free((void *)b->overflow);
    free(b->scratch);
    free(b);
}

static rssm_status cpu_batch_create(void *ctx, void *pool, const rssm_kernel_params *params,
                                    void **out, rssm_error *err)
{
    cpu_ctx *c = ctx;
    if (params->max_rows == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "cpu batch: max_rows must be >= 1");
    cpu_batch *b = calloc(1, sizeof *b);
    if (!b)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cpu batch: out of host memory");
    b->ctx = c;
    b->pool = pool;
    b->params = *params;

    const rssm_kernel_params *p = params;
    const size_t gw = p->gate_kind == RSSM_CODE_GATE_KDA ? p->head_k : 1;
    const size_t HV = p->num_v_heads;
    rssm_io_sizes_init(&b->row_sizes, p, 1);
    const size_t lr = (size_t)p->layers * p->max_rows; /* [layers][max_rows] */

    /* Sizes are bounded by validation (K, V <= 256, HV <= 1024, layers <=
     * 4096) times max_rows (32 bits): no overflow on a 64-bit host. */
    b->q = alloc_aligned(lr * b->row_sizes.q);
    b->k = alloc_aligned(lr * b->row_sizes.k);
    b->v = alloc_aligned(lr * b->row_sizes.v);
    b->out = alloc_aligned(lr * b->row_sizes.out);
    b->gate = alloc_aligned(lr * b->row_sizes.gate);
    b->beta = alloc_aligned(lr * b->row_sizes.beta);
    /* zero gate weights until set: defined values, never garbage */
    b->A_log = calloc(p->layers * HV, sizeof(float));
    b->dt_bias = calloc(p->layers * HV * gw, sizeof(float));
    b->layer_io = calloc(p->layers, sizeof *b->layer_io);
    b->header = calloc(p->max_rows, sizeof *b->header);
    b->order = calloc(lr, sizeof *b->order);
    b->overflow = calloc(p->max_rows, sizeof *b->overflow);
    b->scratch_floats = (rssm_cpu_scratch_floats(p) + CPU_ALIGN / 4 - 1) / (CPU_ALIGN / 4) * (CPU_ALIGN / 4);
    b->scratch = alloc_aligned(c->thread_count * b->scratch_floats * sizeof(float));
    if (!b->q || !b->k || !b->v || !b->out || !b->gate || !b->beta || !b->A_log || !b->dt_bias ||
        !b->layer_io || !b->header || !b->order || !b->overflow || !b->scratch) {
        cpu_batch_destroy(ctx, b);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY,
                              "cpu batch: could not allocate buffers for %u rows x %u layers",
                              p->max_rows, p->layers);
    }
    const rssm_batch_arrays arrays = {.q = b->q, .k = b->k, .v = b->v, .gate = b->gate, .beta = b->beta,
                                      .out = b->out, .A_log = b->A_log, .dt_bias = b->dt_bias};
    for (uint32_t l = 0; l < p->layers; l++)
        rssm_layer_io_of_batch(&b->layer_io[l], p, b->pool->base, b->pool->slots, &arrays, NULL, NULL, l);
    *out = b;
    return rssm_clear_error(err);
}

static rssm_status cpu_batch_set_gate_params(void *ctx, void *batch, uint32_t layer,
                                             const float *A_log, const float *dt_bias,
                                             rssm_error *err)
{
    (void)ctx;
    cpu_batch *b = batch;
    const rssm_kernel_params *p = &b->params;
    if (layer >= p->layers)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "layer %u is out of range (model has %u)",
                              layer, p->layers);
    if (!A_log || !dt_bias)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "A_log and dt_bias must not be NULL");
    const size_t HV = p->num_v_heads;
    const size_t gw = p->gate_kind == RSSM_CODE_GATE_KDA ? p->head_k : 1;
    memcpy(b->A_log + layer * HV, A_log, HV * sizeof(float));
    memcpy(b->dt_bias + layer * HV * gw, dt_bias, HV * gw * sizeof(float));
    return rssm_clear_error(err);
}

/* Host [layers][rows][row_bytes] into device [layers][max_rows][row_bytes]. */
static void copy_in(void *dst, const void *src, size_t row_bytes, uint32_t layers, uint32_t rows,
                    uint32_t max_rows)
{
    for (uint32_t l = 0; l < layers; l++)
        memcpy((uint8_t *)dst + (size_t)l * max_rows * row_bytes,
               (const uint8_t *)src + (size_t)l * rows * row_bytes, rows * row_bytes);
}

static rssm_status cpu_batch_upload(void *ctx, void *batch, uint32_t rows, const rssm_step_inputs *in,
                                    rssm_error *err)
{
    (void)ctx;
    cpu_batch *b = batch;
    const rssm_kernel_params *p = &b->params;
    if (rows > p->max_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%u rows exceed the batch's %u", rows,
                              p->max_rows);
    if (!in || !in->q || !in->k || !in->v || !in->gate || !in->beta)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                              "step inputs q, k, v, gate and beta must not be NULL");
    const rssm_io_sizes *s = &b->row_sizes;
    copy_in(b->q, in->q, s->q, p->layers, rows, p->max_rows);
    copy_in(b->k, in->k, s->k, p->layers, rows, p->max_rows);
    copy_in(b->v, in->v, s->v, p->layers, rows, p->max_rows);
    copy_in(b->gate, in->gate, s->gate, p->layers, rows, p->max_rows);
    copy_in(b->beta, in->beta, s->beta, p->layers, rows, p->max_rows);
    return rssm_clear_error(err);
}

/* One run of the kernel over (layer, row, value head) items, for a batch
 * (every layer) and for one layer on the caller's memory alike. */
typedef struct run_args {
    const rssm_kernel_params *p;
    const rssm_cpu_variant *variant;
    const rssm_layer_io *io;          /* [layers] */
    const rssm_row_header *rows;      /* [nrows], the same for every layer */
    uint32_t nrows;
    const size_t *order;              /* (layer, row) pairs as layer * nrows + row */
    atomic_uint *overflow;            /* [nrows], or NULL */
    float *scratch;                   /* one block per worker */
    size_t scratch_floats;
    uint32_t chunk;  /* value heads per work item */
    uint32_t parts;  /* work items per (layer, row): ceil(HV / chunk) */
} run_args;

/* Item i is `chunk` consecutive value heads of the (layer, row) pair
 * order[i / parts]: consecutive heads are consecutive checkpoints in
 * memory, so one worker streams through a chunk and the kernel's prefetch
 * runs ahead into the next head. */
static void run_item(void *ctx, size_t item, unsigned worker)
{
    const run_args *a = ctx;
    const uint32_t HV = a->p->num_v_heads;
    const size_t lr = a->order[item / a->parts];
    const uint32_t row = (uint32_t)(lr % a->nrows), layer = (uint32_t)(lr / a->nrows);
    const uint32_t first = (uint32_t)(item % a->parts) * a->chunk;
    const uint32_t end = first + a->chunk < HV ? first + a->chunk : HV;
    float *scratch = a->scratch + (size_t)worker * a->scratch_floats;
    for (uint32_t hv = first; hv < end; hv++)
        a->variant->step(a->p, &a->io[layer], &a->rows[row], row, hv, a->overflow, scratch);
}

/* Fills order[] with the (layer, row) pairs of `layers` layers of the
 * rows whose skip[row] is 0 (skip NULL: every row), flushing rows first,
 * and returns how many. A flushing row costs several times a readout-only
 * row (the rank-(n+1) update is compute bound). Items are handed out in
 * order, so the flushing rows go first and the cheap ones fill in behind
 * them: with staggered flushes (one or two rows of a batch flush at each
 * step) a flushing row handed out last would leave the other threads idle. */
static size_t order_rows(size_t *order, const rssm_kernel_params *p, const rssm_row_header *hdr, uint32_t rows,
                         uint32_t layers, const uint8_t *skip)
{
    const size_t lrs = (size_t)layers * rows;
    size_t at = 0;
    for (int want_flush = 1; want_flush >= 0; want_flush--)
        for (size_t lr = 0; lr < lrs; lr++) {
            const rssm_row_header *h = &hdr[lr % rows];
            const int flushes = RSSM_ROW_FLUSHES(h->write_pos, p->ring_cap, h->force);
            if (flushes == want_flush && !(skip && skip[lr % rows]))
                order[at++] = lr;
        }
    return at;
}

/* Runs the `pairs` (layer, row) pairs of a->order on the thread pool;
 * returns the seconds it took. */
static double run_pairs(cpu_ctx *c, run_args *a, size_t pairs)
{
    const rssm_kernel_params *p = a->p;
    /* About 8 items per thread balances uneven heads (ring positions); at
     * most one (layer, row) worth of heads per item. */
    const size_t heads = pairs * p->num_v_heads;
    size_t chunk = heads / ((size_t)c->thread_count * 8);
    a->chunk = (uint32_t)(chunk < 1 ? 1 : (chunk > p->num_v_heads ? p->num_v_heads : chunk));
    a->parts = (p->num_v_heads + a->chunk - 1) / a->chunk;
    const double t0 = rssm_now_seconds();
    rssm_thread_pool_for(c->threads, pairs * a->parts, run_item, a);
    return rssm_now_seconds() - t0;
}

static rssm_status cpu_batch_run(void *ctx, void *batch, uint32_t rows, const rssm_row_header *hdr,
                                 uint32_t *overflow, rssm_error *err)
{
    cpu_ctx *c = ctx;
    cpu_batch *b = batch;
    const rssm_kernel_params *p = &b->params;
    /* The header is one common code validated (backend.h): the kernel
     * indexes the pool with it as it is. */
    memcpy(b->header, hdr, rows * sizeof *hdr);
    b->rows = rows;
    for (uint32_t r = 0; overflow && r < rows; r++)
        atomic_store_explicit(&b->overflow[r], 0u, memory_order_relaxed);
    run_args a = {
        .p = p, .variant = c->variant, .io = b->layer_io, .rows = b->header, .nrows = rows, .order = b->order,
        .overflow = overflow ? b->overflow : NULL, .scratch = b->scratch, .scratch_floats = b->scratch_floats,
    };
    const size_t pairs = order_rows(b->order, p, hdr, rows, p->layers, NULL);
    b->last_seconds = run_pairs(c, &a, pairs);
    for (uint32_t r = 0; overflow && r < rows; r++)
        overflow[r] = atomic_load_explicit(&b->overflow[r], memory_order_relaxed);
    return rssm_clear_error(err);
}

/* A speculative-decode window over (layer, row, value head) items: each
 * item runs its heads' windows (rssm_cpu_window_fn), the checkpoint read
 * once for all of a row's tokens. */
typedef struct window_args {
    const rssm_kernel_params *p;
    const rssm_cpu_variant *variant;
    const rssm_layer_io *io;          /* [layers][t_max]: token t of layer l at l * t_max + t */
    const rssm_row_header *rows;      /* [nrows] */
    const uint32_t *drafts;           /* [nrows] */
    uint32_t nrows, t_max, layers;
    atomic_uint *first_overflow;      /* [nrows] */
    float *scratch;
    size_t scratch_floats;
} window_args;

static void window_item(void *ctx, size_t item, unsigned worker)
{
    const window_args *a = ctx;
    const uint32_t HV = a->p->num_v_heads;
    const size_t lr = item / HV;
    const uint32_t hv = (uint32_t)(item % HV), row = (uint32_t)(lr % a->nrows), layer = (uint32_t)(lr / a->nrows);
    if (a->drafts[row] == 0) /* a padding row of rssm_layer_verify */
        return;
    a->variant->window(a->p, &a->io[(size_t)layer * a->t_max], &a->rows[row], a->drafts[row], row, hv,
                       a->first_overflow, a->scratch + (size_t)worker * a->scratch_floats);
}

static rssm_status cpu_batch_verify(void *ctx, void *batch, uint32_t rows, const rssm_row_header *hdr,
                                    const uint32_t *drafts, uint32_t t_max, const rssm_step_inputs *in, void *out,
                                    uint32_t *first_overflow, rssm_error *err)
{
    cpu_ctx *c = ctx;
    cpu_batch *b = batch;
    const rssm_kernel_params *p = &b->params;
    const size_t layers = p->layers;
    rssm_layer_io *io = malloc(layers * t_max * sizeof *io);
    if (!io)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "verify: out of host memory");
    /* The batch's addressing of each layer, with token t's rows of the
     * caller's token-major arrays as the step arrays (row r at r) */
    const rssm_io_sizes *z = &b->row_sizes;
    for (size_t l = 0; l < layers; l++)
        for (size_t t = 0; t < t_max; t++) {
            rssm_layer_io *x = &io[l * t_max + t];
            const size_t block = t * layers + l; /* [t][l] block of `rows` rows */
            *x = b->layer_io[l];
            x->q = (const uint8_t *)in->q + block * rows * z->q;
            x->k = (const uint8_t *)in->k + block * rows * z->k;
            x->v = (const uint8_t *)in->v + block * rows * z->v;
            x->gate = (const uint8_t *)in->gate + block * rows * z->gate;
            x->beta = (const uint8_t *)in->beta + block * rows * z->beta;
            x->out = (uint8_t *)out + block * rows * z->out;
        }
    for (uint32_t r = 0; r < rows; r++)
        atomic_store_explicit(&b->overflow[r], UINT32_MAX, memory_order_relaxed);
    window_args a = {
        .p = p, .variant = c->variant, .io = io, .rows = hdr, .drafts = drafts, .nrows = rows, .t_max = t_max,
        .layers = p->layers, .first_overflow = b->overflow, .scratch = b->scratch,
        .scratch_floats = b->scratch_floats,
    };
    const double t0 = rssm_now_seconds();
    rssm_thread_pool_for(c->threads, layers * rows * p->num_v_heads, window_item, &a);
    b->last_seconds = rssm_now_seconds() - t0;
    for (uint32_t r = 0; r < rows; r++)
        first_overflow[r] = atomic_load_explicit(&b->overflow[r], memory_order_relaxed);
    free(io);
    return rssm_clear_error(err);
}

static rssm_status cpu_batch_download(void *ctx, void *batch, uint32_t rows, void *out,
                                      rssm_error *err)
{
    (void)ctx;
    cpu_batch *b = batch;
    const rssm_kernel_params *p = &b->params;
    if (rows > p->max_rows)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%u rows exceed the batch's %u", rows,
                              p->max_rows);
    const size_t row_bytes = b->row_sizes.out;
    for (uint32_t l = 0; l < p->layers; l++)
        memcpy((uint8_t *)out + (size_t)l * rows * row_bytes,
               (const uint8_t *)b->out + (size_t)l * p->max_rows * row_bytes, rows * row_bytes);
    return rssm_clear_error(err);
}

static double cpu_batch_last_run_seconds(void *ctx, void *batch)
{
    (void)ctx;
    return ((const cpu_batch *)batch)->last_seconds;
}

/* ---------------------------------------------------------- copy bandwidth */

typedef struct copy_job {
    unsigned char *dst;
    const unsigned char *src;
    size_t bytes, chunk;
} copy_job;

static void copy_chunk(void *ctx, size_t item, unsigned worker)
{
    (void)worker;
    const copy_job *j = ctx;
    const size_t at = item * j->chunk;
    if (at < j->bytes)
        memcpy(j->dst + at, j->src + at, j->chunk < j->bytes - at ? j->chunk : j->bytes - at);
}

/* memcpy over every thread the kernels use: one thread alone reaches only
 * part of the memory bandwidth, and the kernels are judged against all of
 * it. The first copy faults the pages in and is not timed. */
static rssm_status cpu_copy_bandwidth(void *ctx, size_t bytes, double *bps, rssm_error *err)
{
    cpu_ctx *c = ctx;
    unsigned char *src = alloc_pool(bytes), *dst = alloc_pool(bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "copy bandwidth: cannot allocate 2 x %zu bytes", bytes);
    }
    for (size_t i = 0; i < bytes; i++)
        src[i] = (unsigned char)(i * 131u + 7u);
    const unsigned threads = rssm_thread_pool_threads(c->threads);
    copy_job job = {dst, src, bytes, (bytes + threads - 1) / threads};
    rssm_thread_pool_for(c->threads, threads, copy_chunk, &job);
    enum { REPEATS = 7 };
    double t[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        const double t0 = rssm_now_seconds();
        rssm_thread_pool_for(c->threads, threads, copy_chunk, &job);
        t[r] = rssm_now_seconds() - t0;
    }
    *bps = 2.0 * (double)bytes / rssm_median(t, REPEATS);
    free(src);
    free(dst);
    return rssm_clear_error(err);
}

/* ------------------------------------------------------ benchmark entries */

/* The CPU has nothing to record: the program is its steps run in turn, and
 * its time the sum of theirs. */
static rssm_status cpu_batch_time_steps(void *ctx, void *batch, uint32_t rows, uint32_t steps,
                                        const rssm_row_header *hdr, uint32_t reps, rssm_timing *timing,
                                        rssm_error *err)
{
    cpu_batch *b = batch;
    double *t = malloc(reps * sizeof *t);
    if (!t)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cpu: out of host memory");
    rssm_status st = RSSM_OK;
    for (uint32_t r = 0; r <= reps && st == RSSM_OK; r++) {
        double sum = 0.0;
        for (uint32_t s = 0; s < steps && st == RSSM_OK; s++) {
            st = cpu_batch_run(ctx, batch, rows, hdr + (size_t)s * rows, NULL, err);
            sum += b->last_seconds;
        }
        if (r > 0) /* the first run is the untimed one */
            t[r - 1] = sum;
    }
    if (st == RSSM_OK)
        *timing = rssm_timing_of(t, reps, 1 + reps);
    free(t);
    return st;
}

typedef struct inplace_job {
    uint64_t *words;
    size_t count, chunk;
    uint64_t flip; /* 0 but for the tests, and not known at compile time: the writes stay */
} inplace_job;

static void inplace_chunk(void *ctx, size_t item, unsigned worker)
{
    (void)worker;
    const inplace_job *j = ctx;
    const size_t at = item * j->chunk, end = at + j->chunk < j->count ? at + j->chunk : j->count;
    for (size_t i = at; i < end; i++)
        j->words[i] ^= j->flip;
}

static rssm_status cpu_pool_inplace_seconds(void *ctx, void *pool, size_t bytes, uint32_t reps,
                                            uint32_t flip, double *seconds, rssm_error *err)
{
    cpu_ctx *c = ctx;
    cpu_pool *p = pool;
    double *t = malloc(reps * sizeof *t);
    if (!t)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cpu: out of host memory");
    const unsigned threads = rssm_thread_pool_threads(c->threads);
    inplace_job job = {(uint64_t *)(void *)p->base, bytes / sizeof(uint64_t), 0, (uint64_t)flip << 32 | flip};
    job.chunk = (job.count + threads - 1) / threads;
    for (uint32_t r = 0; r <= reps; r++) {
        const double t0 = rssm_now_seconds();
        rssm_thread_pool_for(c->threads, threads, inplace_chunk, &job);
        if (r > 0)
            t[r - 1] = rssm_now_seconds() - t0;
    }
    *seconds = rssm_median(t, reps);
    free(t);
    return rssm_clear_error(err);
}

/* ------------------------------------------ one layer, on the caller's memory */

typedef struct cpu_layer {
    rssm_kernel_params params;
    uint32_t slots;
    rssm_row_header *rows;   /* [max_rows], decoded */
    uint8_t *pad;            /* [max_rows]: 1 for a padding row */
    size_t *order;           /* [max_rows] */
    atomic_uint *overflow;   /* [max_rows] */
    /* [slots]: slot s is in the rows being checked when seen[s] == mark,
     * which each check advances (as the pool's step checks do) */
    uint32_t *seen;
    uint32_t mark;
    float *scratch;          /* one block per worker */
    size_t scratch_floats;
    rssm_kernel_params fold; /* rssm_layer_materialise's launch (backend.h) */
    void *fold_buf;
    uint32_t *tokens;        /* [max_rows]: a window's tokens per row, 0 for padding */
} cpu_layer;

static void cpu_layer_destroy(void *ctx, void *layer)
{
    (void)ctx;
    cpu_layer *l = layer;
    if (!l)
        return;
    free(l->rows);
    free(l->pad);
    free(l->order);
    free((void *)l->overflow);
    free(l->seen);
    free(l->scratch);
    free(l->fold_buf);
    free(l->tokens);
    free(l);
}

/* The kernel takes every stride common code accepts; alignment is the
 * pointers' (cpu_layer_run). */
static rssm_status cpu_layer_check(void *ctx, const rssm_kernel_params *p, const rssm_layer_io *shape,
                                   rssm_error *err)
{
    (void)ctx;
    (void)p;
    (void)shape;
    return rssm_clear_error(err);
}

static rssm_status cpu_layer_create(void *ctx, const rssm_kernel_params *p, const rssm_layer_io *shape,
                                    void **out, rssm_error *err)
{
    cpu_ctx *c = ctx;
    cpu_layer *l = calloc(1, sizeof *l);
    if (!l)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cpu layer: out of host memory");
    l->params = *p;
    l->slots = shape->slots;
    l->rows = calloc(p->max_rows, sizeof *l->rows);
    l->pad = calloc(p->max_rows, 1);
    l->order = calloc(p->max_rows, sizeof *l->order);
    l->overflow = calloc(p->max_rows, sizeof *l->overflow);
    l->seen = calloc(shape->slots, sizeof *l->seen);
    l->tokens = calloc(p->max_rows, sizeof *l->tokens);
    l->scratch_floats = (rssm_cpu_scratch_floats(p) + CPU_ALIGN / 4 - 1) / (CPU_ALIGN / 4) * (CPU_ALIGN / 4);
    l->scratch = alloc_aligned(c->thread_count * l->scratch_floats * sizeof(float));
    rssm_fold_params(&l->fold, p);
    l->fold_buf = alloc_aligned(rssm_fold_bytes(&l->fold));
    if (l->fold_buf)
        rssm_fold_image(l->fold_buf, &l->fold);
    if (!l->rows || !l->pad || !l->order || !l->overflow || !l->seen || !l->scratch || !l->fold_buf || !l->tokens) {
        cpu_layer_destroy(ctx, l);
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "cpu layer: out of host memory for %u rows, %u slots",
                              p->max_rows, shape->slots);
    }
    *out = l;
    return rssm_clear_error(err);
}

/* Whether pointer x is a multiple of `align` bytes (NULL passes). */
static int aligned_to(const void *x, size_t align) { return ((uintptr_t)x % align) == 0; }

/* Decodes and checks the rows of `io` (host memory): a slot named twice
 * would make two threads write one slot, and a write_pos outside the ring
 * would index outside it, so both are refused before anything runs. */
static rssm_status decode_rows(cpu_layer *l, const rssm_layer_io *io, rssm_error *err)
{
    const rssm_kernel_params *p = &l->params;
    if (++l->mark == 0) {
        memset(l->seen, 0, io->slots * sizeof *l->seen);
        l->mark = 1;
    }
    for (uint32_t r = 0; r < io->rows; r++) {
        const int32_t slot = (int32_t)io->row_slot[r];
        const int32_t wp = (int32_t)io->row_write_pos[r];
        l->pad[r] = RSSM_ROW_PADS((uint32_t)slot, io->slots, p->flags);
        if (l->pad[r])
            continue;
        if (wp < 0 || (uint32_t)wp > p->ring_cap)
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "cpu layer: row %u: write_pos = %d is outside the ring (0..%u)", r, wp,
                                  p->ring_cap);
        if (l->seen[slot] == l->mark)
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "cpu layer: row %u: slot %d is named by an earlier row too", r, slot);
        l->seen[slot] = l->mark;
        l->rows[r] = (rssm_row_header){.slot = (uint32_t)slot, .write_pos = (uint32_t)wp,
                                       .force = io->row_force && io->row_force[r] != 0u, .io = r};
    }
    return RSSM_OK;
}

/* One launch of the layer with kernel parameters p (the layer's, or its
 * fold's) on io. */
/* Every pointer of io aligned to its element: the kernels read them as
 * typed arrays. */
static rssm_status check_alignment(const rssm_kernel_params *p, const rssm_layer_io *io, rssm_error *err)
{
    const size_t ssz = rssm_dtype_size((rssm_dtype)p->state_dtype);
    const size_t rsz = rssm_dtype_size((rssm_dtype)p->ring_dtype);
    const size_t iosz = rssm_dtype_size((rssm_dtype)p->io_dtype);
    const size_t gsz = p->flags & RSSM_FLAG_GATE_BF16 ? 2 : 4;
    const struct {
        const void *ptr;
        size_t align;
        const char *name;
    } al[] = {
        {io->ckpt, ssz, "state"}, {io->ring_d, rsz, "ring_d"}, {io->ring_k, rsz, "ring_k"},
        {io->ring_g, 4, "ring_g"}, {io->q, iosz, "q"}, {io->k, iosz, "k"}, {io->v, iosz, "v"},
        {io->out, iosz, "out"}, {io->gate, gsz, "gate"}, {io->beta, gsz, "beta"}, {io->A_log, 4, "A_log"},
        {io->dt_bias, 4, "dt_bias"}, {io->row_slot, 4, "slot_index"}, {io->row_write_pos, 4, "write_pos"},
        {io->row_force, 4, "force"}, {io->overflow, 4, "overflow"},
    };
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++)
        if (!aligned_to(al[i].ptr, al[i].align))
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "cpu layer: %s is not aligned to its element (%zu bytes)", al[i].name,
                                  al[i].align);
    return RSSM_OK;
}

static rssm_status layer_run_with(cpu_ctx *c, cpu_layer *l, const rssm_kernel_params *p, const rssm_layer_io *io,
                                  rssm_error *err)
{
    const size_t iosz = rssm_dtype_size((rssm_dtype)p->io_dtype);
    rssm_status st = check_alignment(p, io, err);
    if (st == RSSM_OK)
        st = decode_rows(l, io, err);
    if (st != RSSM_OK)
        return st;
    const size_t out_bytes = (size_t)p->num_v_heads * p->head_v * iosz;
    for (uint32_t r = 0; r < io->rows; r++) {
        if (l->pad[r])
            memset(io->out + r * io->out_row, 0, out_bytes);
        atomic_store_explicit(&l->overflow[r], 0u, memory_order_relaxed);
    }
    run_args a = {
        .p = p, .variant = c->variant, .io = io, .rows = l->rows, .nrows = io->rows, .order = l->order,
        .overflow = io->overflow ? l->overflow : NULL, .scratch = l->scratch, .scratch_floats = l->scratch_floats,
    };
    const size_t pairs = order_rows(l->order, p, l->rows, io->rows, 1, l->pad);
    (void)run_pairs(c, &a, pairs);
    for (uint32_t r = 0; io->overflow && r < io->rows; r++)
        io->overflow[r] = atomic_load_explicit(&l->overflow[r], memory_order_relaxed);
    return rssm_clear_error(err);
}

static rssm_status cpu_layer_run(void *ctx, void *layer, const rssm_layer_io *io, void *stream, rssm_error *err)
{
    (void)stream;
    cpu_layer *l = layer;
    return layer_run_with(ctx, l, &l->params, io, err);
}

static rssm_status cpu_layer_materialise(void *ctx, void *layer, const rssm_layer_io *io, void *stream,
                                         rssm_error *err)
{
    (void)stream;
    cpu_layer *l = layer;
    rssm_layer_io fold = *io;
    rssm_fold_io(&fold, &l->fold, l->fold_buf);
    return layer_run_with(ctx, l, &l->fold, &fold, err);
}

/* rssm_layer_verify: the window of cpu_batch_verify on the caller's
 * tensors, token t's step arrays at row t * rows + r. */
static rssm_status cpu_layer_verify(void *ctx, void *layer, const rssm_layer_io *io, uint32_t t_max,
                                   const uint32_t *drafts, void *stream, rssm_error *err)
{
    (void)stream;
    cpu_ctx *c = ctx;
    cpu_layer *l = layer;
    const rssm_kernel_params *p = &l->params;
    rssm_status st = check_alignment(p, io, err);
    if (st == RSSM_OK)
        st = decode_rows(l, io, err);
    if (st != RSSM_OK)
        return st;
    const uint32_t rows = io->rows;
    for (uint32_t r = 0; r < rows; r++) {
        l->tokens[r] = l->pad[r] ? 0u : drafts[r];
        if (!l->pad[r] && (drafts[r] == 0 || drafts[r] > t_max || l->rows[r].write_pos + drafts[r] > p->ring_cap))
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "cpu layer verify: row %u: %u draft tokens at write_pos %u: must be 1..%u and end "
                                  "inside the ring (%u entries)",
                                  r, drafts[r], l->rows[r].write_pos, t_max, p->ring_cap);
        atomic_store_explicit(&l->overflow[r], UINT32_MAX, memory_order_relaxed);
    }
    rssm_layer_io tok[RSSM_MAX_DRAFT];
    const size_t out_bytes = (size_t)p->num_v_heads * p->head_v * rssm_dtype_size((rssm_dtype)p->io_dtype);
    for (uint32_t t = 0; t < t_max; t++) {
        const size_t first = (size_t)t * rows; /* token t's rows */
        tok[t] = *io;
        tok[t].q += first * io->q_row;
        tok[t].k += first * io->k_row;
        tok[t].v += first * io->v_row;
        tok[t].gate += first * io->gate_row;
        tok[t].beta += first * io->beta_row;
        tok[t].out += first * io->out_row;
        for (uint32_t r = 0; r < rows; r++)
            if (l->pad[r])
                memset(tok[t].out + r * io->out_row, 0, out_bytes);
    }
    window_args a = {
        .p = p, .variant = c->variant, .io = tok, .rows = l->rows, .drafts = l->tokens, .nrows = rows,
        .t_max = t_max, .layers = 1, .first_overflow = l->overflow, .scratch = l->scratch,
        .scratch_floats = l->scratch_floats,
    };
    rssm_thread_pool_for(c->threads, (size_t)rows * p->num_v_heads, window_item, &a);
    for (uint32_t r = 0; io->overflow && r < rows; r++)
        io->overflow[r] = atomic_load_explicit(&l->overflow[r], memory_order_relaxed);
    return rssm_clear_error(err);
}

static rssm_status cpu_layer_advance(void *ctx, void *layer, uint32_t rows, const int32_t *slot_index,
                                     const int32_t *write_pos, const int32_t *force, int32_t *cursor, void *stream,
                                     rssm_error *err)
{
    (void)ctx;
    (void)stream;
    cpu_layer *l = layer;
    const uint32_t cap = l->params.ring_cap;
    /* Checked before any cursor moves: a write_pos outside the ring, and a
     * slot named by two rows (which would leave its cursor to whichever row
     * came last), as decode_rows does for a step. */
    if (++l->mark == 0) {
        memset(l->seen, 0, l->slots * sizeof *l->seen);
        l->mark = 1;
    }
    for (uint32_t r = 0; r < rows; r++) {
        const int32_t slot = slot_index[r];
        if (RSSM_ROW_PADS((uint32_t)slot, l->slots, l->params.flags))
            continue;
        if (write_pos[r] < 0 || (uint32_t)write_pos[r] > cap)
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "cpu layer advance: row %u: write_pos = %d is outside the ring (0..%u)", r,
                                  write_pos[r], cap);
        if (l->seen[slot] == l->mark)
            return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                  "cpu layer advance: row %u: slot %d is named by an earlier row too", r, slot);
        l->seen[slot] = l->mark;
    }
    for (uint32_t r = 0; r < rows; r++) {
        if (RSSM_ROW_PADS((uint32_t)slot_index[r], l->slots, l->params.flags))
            continue;
        const uint32_t n = (uint32_t)write_pos[r];
        cursor[slot_index[r]] = RSSM_ROW_FLUSHES(n, cap, force ? (uint32_t)force[r] : 0u) ? 0 : (int32_t)n + 1;
    }
    return rssm_clear_error(err);
}

static const char *const cpu_variants[] = {"cpu", NULL};

const rssm_backend_ops rssm_cpu_backend_ops = {
    .name = "cpu",
    .variants = cpu_variants,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .device = cpu_device,
    .describe = cpu_describe,
    .supports = cpu_supports,
    .pool_create = cpu_pool_create,
    .pool_destroy = cpu_pool_destroy,
    .slot_read = cpu_slot_read,
    .slot_write = cpu_slot_write,
    .batch_create = cpu_batch_create,
    .batch_destroy = cpu_batch_destroy,
    .batch_set_gate_params = cpu_batch_set_gate_params,
    .batch_upload = cpu_batch_upload,
    .batch_run = cpu_batch_run,
    .batch_download = cpu_batch_download,
    .batch_last_run_seconds = cpu_batch_last_run_seconds,
    .batch_time_steps = cpu_batch_time_steps,
    .batch_verify = cpu_batch_verify,
    .copy_bandwidth = cpu_copy_bandwidth,
    .pool_inplace_seconds = cpu_pool_inplace_seconds,
    .layer_check = cpu_layer_check,
    .layer_create = cpu_layer_create,
    .layer_destroy = cpu_layer_destroy,
    .layer_run = cpu_layer_run,
    .layer_materialise = cpu_layer_materialise,
    .layer_advance = cpu_layer_advance,
    .layer_verify = cpu_layer_verify,
};
