/*
 * The CUDA backend: the ops table of common/backend.h over the CUDA
 * runtime, the top of the backend's host side (cuda/cuda_internal.h: the
 * device in cuda_device.cu, pools and batches in cuda_batch.cu, one layer
 * on the caller's memory in cuda_layer.cu, the timed programs in
 * cuda_bench.cu).
 */
#include "cuda_internal.h"

using namespace rssm_cuda_backend;

extern "C" const rssm_backend_ops rssm_cuda_backend_ops = {
    "cuda",
    cuda_variants,
    cuda_create,
    cuda_destroy,
    cuda_device,
    cuda_device_ordinal,
    cuda_place,
    cuda_describe,
    cuda_supports,
    cuda_pool_create,
    cuda_pool_destroy,
    cuda_slot_read,
    cuda_slot_write,
    cuda_batch_create,
    cuda_batch_destroy,
    cuda_batch_set_gate_params,
    cuda_batch_upload,
    cuda_batch_run,
    cuda_batch_download,
    cuda_batch_last_run_seconds,
    cuda_batch_time_steps,
    cuda_batch_verify,
    cuda_copy_bandwidth,
    cuda_pool_inplace_seconds,
    cuda_limit_sms,
    /* matrix_dtype: the flush accumulates in fp32 from the storage dtypes,
     * rounding nothing beyond them: fp32, the default. */
    nullptr,
    cuda_layer_check,
    cuda_layer_create,
    cuda_layer_destroy,
    cuda_layer_run,
    cuda_layer_materialise,
    cuda_layer_advance,
    cuda_layer_verify,
    nullptr, /* layer_record: device pointers, not buffers (rssm_layer_run) */
    nullptr,
    nullptr, /* vulkan_handles */
    nullptr, /* kernels: every variant name runs its own kernels */
};
