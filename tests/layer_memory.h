/* The memory a per-layer test runs on, and its calls, the same on every
 * backend: host memory, and rssm_layer_run / _materialise / _advance on a
 * backend that takes pointers (cpu, cuda's host-mapped memory aside); on
 * vulkan, host-visible buffers of the backend's device, with each call
 * recorded by rssm_layer_record* into a command buffer, submitted and
 * waited for. A test writes and reads the arrays through the host
 * pointers lm_alloc returns either way; a pointer passed to lm_run names
 * the buffer it lies in and its offset there. */
#ifndef RSSM_TEST_LAYER_MEMORY_H
#define RSSM_TEST_LAYER_MEMORY_H

#include "rssm.h"

#include <stddef.h>

typedef struct lm_arena lm_arena;

/* For backend `b` (kept by the caller until lm_close). */
lm_arena *lm_open(rssm_backend *b);
void lm_close(lm_arena *a);
/* Whether the calls are recorded into command buffers (vulkan). */
int lm_records(const lm_arena *a);
/* `bytes` of zeroed memory, freed by lm_close. */
void *lm_alloc(lm_arena *a, size_t bytes);

rssm_status lm_run(lm_arena *a, rssm_layer *l, uint32_t rows, const rssm_layer_tensors *t, rssm_error *err);
rssm_status lm_materialise(lm_arena *a, rssm_layer *l, uint32_t rows, const rssm_layer_tensors *t,
                           rssm_error *err);
rssm_status lm_advance(lm_arena *a, rssm_layer *l, uint32_t rows, const int32_t *slot_index,
                       const int32_t *write_pos, const int32_t *force, int32_t *cursor, rssm_error *err);
/* rssm_layer_verify, or rssm_layer_record_verify with `drafts` in one of
 * the arena's buffers. */
rssm_status lm_verify(lm_arena *a, rssm_layer *l, uint32_t rows, uint32_t t_max, const uint32_t *drafts,
                      const rssm_layer_tensors *t, rssm_error *err);

#endif
