/* Whether two tensors of one call share memory. Each tensor's bytes are a
 * lattice of equal blocks (a state head, a ring head, a row); the test is
 * exact, and for the layouts engines use (tensors in allocations of their
 * own, or a pool whose state and rings share each slot's page) it is a few
 * comparisons, so the per-layer entry makes it on every call (layer.c,
 * rssm.h: what a call may write). */
#ifndef RSSM_OVERLAP_H
#define RSSM_OVERLAP_H

#include "rssm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Blocks of `block` bytes at base + i * stride[0] + j * stride[1]
 * (i < count[0], j < count[1]; a count of 1 for a dimension the tensor
 * does not have), in one address space: `space` 0 for pointers, a Vulkan
 * buffer's handle for offsets into that buffer. */
typedef struct rssm_extent {
    uint64_t space, base, block;
    uint64_t stride[2], count[2];
} rssm_extent;

/* One tensor of a call: its name for messages, its bytes, and whether the
 * call writes it. */
typedef struct rssm_named_extent {
    const char *name;
    rssm_extent bytes;
    bool written;
} rssm_named_extent;

/* RSSM_ERR_INVALID_ARGUMENT naming the first two of the `n` tensors (at
 * most RSSM_OVERLAP_MAX_TENSORS; a call has 17 at most) of which one is
 * written and which share a byte (or are interleaved too finely to tell in
 * a few thousand comparisons), with `who` the call. */
#define RSSM_OVERLAP_MAX_TENSORS 32
rssm_status rssm_check_overlaps(const rssm_named_extent *t, size_t n, const char *who, rssm_error *err);

#endif
