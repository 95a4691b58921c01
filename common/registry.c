/* The backends compiled into this build, in the order "auto" tries them:
 * GPUs first, the CPU last because it is always there. */
#include "backend.h"

extern const rssm_backend_ops rssm_cpu_backend_ops;
#ifdef RSSM_HAVE_VULKAN
extern const rssm_backend_ops rssm_vulkan_backend_ops;
#endif
#ifdef RSSM_HAVE_CUDA
extern const rssm_backend_ops rssm_cuda_backend_ops;
#endif

const rssm_backend_ops *const rssm_backend_registry[] = {
#ifdef RSSM_HAVE_CUDA
    &rssm_cuda_backend_ops,
#endif
#ifdef RSSM_HAVE_VULKAN
    &rssm_vulkan_backend_ops,
#endif
    &rssm_cpu_backend_ops,
    NULL,
};
