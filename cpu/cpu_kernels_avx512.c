/* The CPU kernels with AVX-512F/VL on top of AVX2: its 32 registers hold q
 * and k (K = 128) for the whole checkpoint pass (dot2_block_k128). */
#include "cpu_kernel_shared.h"

#if RSSM_CPU_AVX2_VARIANT
#pragma GCC target("avx512f,avx512vl,avx2,fma,f16c")
#define RSSM_KSUFFIX avx512
#include "cpu_kernel_body.h"
#else
/* ISO C wants a translation unit to declare something. */
typedef int rssm_cpu_avx512_not_built;
#endif
