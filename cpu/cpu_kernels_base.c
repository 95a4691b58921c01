/* The CPU kernels for the instruction set of the build flags (the baseline
 * variant, always built and always runnable; cpu_kernel_shared.h). */
#include "cpu_kernel_shared.h"

#define RSSM_KSUFFIX base
#include "cpu_kernel_body.h"
