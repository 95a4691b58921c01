/* The CPU kernels' in-register bf16 conversions (cpu/cpu_kernel_body.h:
 * vload_state, vstore_state and their 16-wide forms, used by the AVX-512
 * passes over a bf16 checkpoint) against dtype.h's rules, bit for bit: every
 * bf16 value loaded, and fp32 values around every rounding case stored
 * (ties, the largest finite values, subnormals, infinities, signalling and
 * quiet NaNs of both signs) plus random ones. The kernels' tolerance tests
 * would not see a rounding rule off by one ulp.
 *
 * The body is compiled here once more, for AVX-512 as cpu_kernels_avx512.c
 * compiles it, under its own suffix; the checks run where the CPU has
 * AVX-512 and are skipped elsewhere. */
#include "cpu_kernel_shared.h"
#include "dtype.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if RSSM_CPU_AVX2_VARIANT || defined(__AVX512F__)
#define HAVE_BODY 1
#if RSSM_CPU_AVX2_VARIANT
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma,f16c")
#endif
#define RSSM_KSUFFIX convert_test
#include "cpu_kernel_body.h"

/* Mismatches of the kernels' conversions on n fp32 values (n a multiple of
 * 16), reported on stderr. */
static unsigned check_stores(const float *x, size_t n)
{
    unsigned bad = 0;
    uint16_t got16[16], got8[16];
    for (size_t i = 0; i < n; i += 16) {
        v16 w;
        memcpy(&w, x + i, sizeof w);
        store16_state(got16, 0, w, 1);
        for (uint32_t h = 0; h < 16; h += RSSM_VF)
            vstore_state(got8, h, vload(x + i + h), 1);
        for (uint32_t l = 0; l < 16; l++) {
            const uint16_t want = rssm_f32_to_bf16(x[i + l]);
            if (got16[l] != want || got8[l] != want) {
                if (bad++ < 10)
                    fprintf(stderr, "store %08x: want %04x, 16-wide %04x, %u-wide %04x\n",
                            rssm_f32_bits(x[i + l]), want, got16[l], RSSM_VF, got8[l]);
            }
        }
    }
    return bad;
}

/* Mismatches loading every bf16 value (as bits: NaN payloads included). */
static unsigned check_loads(void)
{
    unsigned bad = 0;
    uint16_t h[16];
    for (uint32_t base = 0; base < 65536u; base += 16) {
        for (uint32_t l = 0; l < 16; l++)
            h[l] = (uint16_t)(base + l);
        float got16[16], got8[16];
        const v16 w = load16_state(h, 0, 1);
        memcpy(got16, &w, sizeof got16);
        for (uint32_t c = 0; c < 16; c += RSSM_VF)
            vstore(got8 + c, vload_state(h, c, 1));
        for (uint32_t l = 0; l < 16; l++) {
            const uint32_t want = rssm_f32_bits(rssm_bf16_to_f32(h[l]));
            if (rssm_f32_bits(got16[l]) != want || rssm_f32_bits(got8[l]) != want ||
                rssm_f32_bits(state_at(h, l, 1)) != want) {
                if (bad++ < 10)
                    fprintf(stderr, "load %04x: want %08x, got %08x / %08x\n", h[l], want,
                            rssm_f32_bits(got16[l]), rssm_f32_bits(got8[l]));
            }
        }
    }
    return bad;
}

#if RSSM_CPU_AVX2_VARIANT
#pragma GCC pop_options
#endif
#else
#define HAVE_BODY 0
#endif

enum { RANDOM = 1 << 20 };

int main(void)
{
#if HAVE_BODY
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl")) {
        printf("skipped: this CPU has no AVX-512, so the kernels do not convert in registers\n");
        return 77;
    }
    /* Every fp32 value within 2 of each bf16 rounding boundary and tie
     * (low 16 bits 0x7ffe..0x8002 and 0xfffe..0x0002) for every high half,
     * then random bit patterns. */
    size_t n = 0;
    const size_t cap = (size_t)65536 * 10 + RANDOM;
    float *x = malloc(cap * sizeof *x);
    if (!x)
        return 1;
    static const uint16_t lows[10] = {0x7ffe, 0x7fff, 0x8000, 0x8001, 0x8002, 0xfffe, 0xffff, 0x0000, 0x0001, 0x0002};
    for (uint32_t hi = 0; hi < 65536u; hi++)
        for (uint32_t l = 0; l < 10; l++)
            x[n++] = rssm_bits_f32(hi << 16 | lows[l]);
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (uint32_t i = 0; i < RANDOM; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[n++] = rssm_bits_f32((uint32_t)(s >> 16));
    }
    const unsigned bad_stores = check_stores(x, n);
    free(x);
    const unsigned bad_loads = check_loads();
    printf("bf16 conversions: %zu stores, 65536 loads; %u and %u mismatches\n", n, bad_stores, bad_loads);
    return bad_stores || bad_loads ? 1 : 0;
#else
    printf("skipped: the kernels are not built with an AVX-512 variant here\n");
    return 77;
#endif
}
