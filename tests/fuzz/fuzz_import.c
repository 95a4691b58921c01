/* libFuzzer: slot import (common/pool_io.c) on arbitrary bytes. When the
 * first byte is odd the rest gets a correct checksum first, so the fuzzer
 * reaches the structure and content checks behind it. Every input must get
 * a status and leave the pool usable; a slot that imports must read back as
 * a finite state. FUZZ_WRITE_SEED=PATH writes one valid export there (how
 * the committed corpus was made). */
#define _POSIX_C_SOURCE 200809L

#include "checksum.h" /* the export checksum (common/), to reseal */
#include "fuzz_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HEADER = 80, CHECKSUM_AT = 72 };

static rssm_backend *backend;
static rssm_pool *pool;
static uint32_t slot;
static size_t export_size;
static float *state;
static size_t state_n;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    rssm_model m = fuzz_model();
    m.ring_dtype = RSSM_DTYPE_F16;
    rssm_error err;
    if (rssm_backend_create("cpu", &backend, &err) != RSSM_OK ||
        rssm_pool_create(backend, &m, 1, RSSM_FLUSH_ALIGNED, &pool, &err) != RSSM_OK ||
        rssm_pool_alloc(pool, &slot, &err) != RSSM_OK)
        abort();
    export_size = rssm_pool_export_size(pool);
    state_n = (size_t)m.layers * m.num_v_heads * m.head_v * m.head_k;
    state = malloc(state_n * sizeof *state);
    const char *seed = getenv("FUZZ_WRITE_SEED");
    if (seed) {
        for (size_t i = 0; i < state_n; i++)
            state[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        rssm_pool_write_state(pool, slot, state, &err);
        unsigned char *b = malloc(export_size);
        FILE *f = fopen(seed, "wb");
        if (!b || !f || rssm_pool_export(pool, slot, b, export_size, &err) != RSSM_OK ||
            fwrite(b, 1, export_size, f) != export_size)
            abort();
        fclose(f);
        free(b);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const int reseal = data[0] & 1;
    unsigned char *b = malloc(size - 1 ? size - 1 : 1);
    if (!b)
        return 0;
    memcpy(b, data + 1, size - 1);
    if (reseal && size - 1 >= HEADER) {
        unsigned char h[HEADER];
        memcpy(h, b, HEADER);
        memset(h + CHECKSUM_AT, 0, 8);
        const uint64_t sum = rssm_xxh3_64(b + HEADER, size - 1 - HEADER, rssm_xxh3_64(h, HEADER, 0));
        memcpy(b + CHECKSUM_AT, &sum, 8);
    }
    rssm_error err;
    if (rssm_pool_import(pool, slot, b, size - 1, &err) == RSSM_OK) {
        if (rssm_pool_read_state(pool, slot, state, &err) != RSSM_OK)
            abort();
        for (size_t i = 0; i < state_n; i++)
            if (!isfinite(state[i]))
                abort(); /* imported content that is not a runnable state */
    }
    free(b);
    return 0;
}
