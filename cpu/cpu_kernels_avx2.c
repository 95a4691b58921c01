/* The CPU kernels for AVX2 + FMA + F16C, on x86-64 builds whose flags lack
 * them (cpu_kernel_shared.h). */
#include "cpu_kernel_shared.h"

#if RSSM_CPU_AVX2_VARIANT
#pragma GCC target("avx2,fma,f16c")
#define RSSM_KSUFFIX avx2
#include "cpu_kernel_body.h"
#else
/* ISO C wants a translation unit to declare something. */
typedef int rssm_cpu_avx2_not_built;
#endif
