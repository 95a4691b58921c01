/*
 * Which code of a CUDA build a device runs, and so which kernels the cuda
 * backend may launch on it, in plain C (as device.h keeps the choice of
 * device): the build's targets (RSSM_CUDA_ARCHS, cuda/CMakeLists.txt), the
 * one of them CUDA loads on a device of a given compute capability, and the
 * kernels that device may then run, from what CUDA says of the kernels it
 * loaded (cudaFuncAttributes). The answers come in as plain values, so
 * tests/test_cuda_targets.c drives every rule and message without a GPU;
 * the cuda backend asks CUDA and hands the answers over.
 *
 * Why a device's capability alone does not say: the bulk kernels and the
 * window's programmatic dependent launch are built only where a target is
 * sm_90 or newer (docs/design.md, "CUDA targets"), and a Hopper GPU given a
 * build with compute_80 PTX alone compiles that PTX, without them.
 */
#ifndef RSSM_CUDA_TARGETS_H
#define RSSM_CUDA_TARGETS_H

#include <stdbool.h>
#include <stddef.h>

/* One target of a build: machine code ("sm_90a") or PTX ("compute_80"). */
typedef struct rssm_cuda_target {
    char name[16];
    int arch;    /* 10 * major + minor: 80, 90, 100 */
    bool ptx;    /* compute_XY: PTX, compiled by the driver when loaded */
    char suffix; /* 'a': that architecture only; 'f': its family (the same major); 0 */
} rssm_cuda_target;

/* The target of `targets` (names separated by spaces or semicolons, e.g.
 * "sm_90a compute_90") that CUDA loads on a device of compute capability
 * major.minor, in *t, or false when none runs there. Machine code sm_XY
 * runs on X.Y and later minors of X (sm_XYa on X.Y alone) and is taken
 * first, the newest that runs; otherwise PTX compute_XY, on X.Y and every
 * later capability (compute_XYa on X.Y alone, compute_XYf within X), the
 * newest that runs. A name that is neither is passed over. */
bool rssm_cuda_target_for(const char *targets, int major, int minor, rssm_cuda_target *t);

/* What a device must be to run `targets`, for rssm_device_choose's
 * messages: "of a compute capability this build has code for (sm_90a:
 * 9.0 only; compute_90 PTX: 9.0 and newer)". */
void rssm_cuda_targets_need(const char *targets, char *buf, size_t size);

/* The kernel files whose code the backend asks CUDA about, one kernel of
 * each (every .cu is built for the same targets, but each is its own
 * module: each is asked). */
typedef enum rssm_cuda_part {
    RSSM_CUDA_PART_PIPELINE,    /* decode_kernel.cu: built for every target; whether the device runs the build */
    RSSM_CUDA_PART_BULK,        /* bulk_kernel.cu: needs sm_90 */
    RSSM_CUDA_PART_WINDOW_BULK, /* window_bulk_kernel.cu: needs sm_90 */
    RSSM_CUDA_PART_WINDOW,      /* window_kernel.cu: programmatic dependent launch from sm_90 */
    RSSM_CUDA_PARTS
} rssm_cuda_part;

/* What CUDA says of one kernel on the device (cudaFuncGetAttributes):
 * ptxVersion, the virtual architecture its code was compiled for, and
 * binaryVersion, that of the machine code the device runs, each 10 * major
 * + minor. Both 0: CUDA has no code of it for the device. */
typedef struct rssm_cuda_code {
    int ptx_version;
    int binary_version;
} rssm_cuda_code;

/* The kernels a device may launch. */
typedef struct rssm_cuda_kernels {
    bool runs; /* the pipeline and stream kernels have code for the device */
    bool bulk; /* the bulk kernels (bulk_kernel.cu, window_bulk_kernel.cu) have their sm_90 parts */
    bool pdl;  /* the kernels wait for the launch before them (griddepcontrol: the decode step's
                  at their start, the window's readout for its coefficients), so each may be
                  launched as a programmatic dependent of it */
    char code[96];     /* what the device runs: "sm_90a machine code", "compute_80 PTX (JIT)" */
    char why_not[512]; /* !runs: why the device runs nothing; !bulk: why not the bulk kernels */
} rssm_cuda_kernels;

/* *k for a device of compute capability major.minor whose opt-in shared
 * memory per block is `smem_optin` bytes, given the build's `targets`,
 * CUDA's answer for each part and the shared memory the bulk kernels ask
 * for (`bulk_smem`). Only the code CUDA loaded counts (a ptx_version of 90
 * or more has the sm_90 parts); the targets name it in k->code and the
 * messages. The bulk kernels also need their shared memory: a consumer
 * GPU of a later architecture (sm_120: 99 KiB) given sm_90 PTX has the
 * code but not the room. */
void rssm_cuda_kernels_decide(const char *targets, int major, int minor, size_t smem_optin, size_t bulk_smem,
                              const rssm_cuda_code code[RSSM_CUDA_PARTS], rssm_cuda_kernels *k);

#endif /* RSSM_CUDA_TARGETS_H */
