/* The state size of `rssm bench` on the cpu backend (bench_size.h). */
#include "bench_size.h"

#include <math.h>

#define MIB 1048576.0

double rh_bench_timed_steps(size_t configs, uint32_t cycles, const uint32_t *ring_len, size_t nring,
                            const int *positions, size_t npos)
{
    uint32_t max_L = 1;
    double replay = 0.0;
    for (size_t i = 0; i < nring; i++) {
        max_L = ring_len[i] > max_L ? ring_len[i] : max_L;
        for (size_t p = 0; p < npos; p++)
            replay += (double)ring_len[i] * (positions[p] == 0 && ring_len[i] >= 2 ? 4.0 : 1.0);
    }
    return (double)configs * (1.0 + cycles) * (max_L + 1.0 + replay);
}

double rh_bench_estimate_s(uint32_t mib, double copy_bps, double steps)
{
    if (!(copy_bps > 0.0) || !(steps > 0.0))
        return 0.0;
    return steps * RH_BENCH_CPU_STEP_COPIES * 2.0 * (double)mib * MIB / copy_bps;
}

rh_state_size rh_bench_state_size(size_t llc_bytes, size_t mem_bytes, double copy_bps, double steps,
                                  double budget_s)
{
    rh_state_size s = {0};
    const double llc_mib = ceil((double)llc_bytes / MIB);
    s.llc_mib = llc_mib > 65536.0 ? 65536u : (uint32_t)llc_mib;
    /* 4x the cache, in the range --state-mib accepts (1..65536). */
    const double wanted = 4.0 * llc_mib > RH_BENCH_MIN_STATE_MIB ? 4.0 * llc_mib : RH_BENCH_MIN_STATE_MIB;
    s.wanted_mib = wanted > 65536.0 ? 65536u : (uint32_t)wanted;
    s.mib = s.wanted_mib;
    s.bound = RH_STATE_WANTED;
    if (budget_s > 0.0 && copy_bps > 0.0 && steps > 0.0) {
        const double fits = floor(budget_s * copy_bps / (steps * RH_BENCH_CPU_STEP_COPIES * 2.0 * MIB));
        if (fits < s.mib) {
            s.mib = fits > RH_BENCH_MIN_STATE_MIB ? (uint32_t)fits : RH_BENCH_MIN_STATE_MIB;
            s.bound = s.mib < s.wanted_mib ? RH_STATE_BUDGET : RH_STATE_WANTED;
        }
    }
    /* The pool holds the state and the copy measurement two buffers of it:
     * a quarter of the memory leaves room for the rest of the machine. */
    const double mem_mib = floor((double)mem_bytes / MIB / 4.0);
    if (mem_bytes > 0 && mem_mib < s.mib) {
        s.mib = mem_mib >= 1.0 ? (uint32_t)mem_mib : 1u;
        s.bound = RH_STATE_MEMORY;
    }
    s.within_llc = s.llc_mib > 0 && s.mib <= s.llc_mib;
    if (budget_s > 0.0)
        s.estimated_s = rh_bench_estimate_s(s.mib, copy_bps, steps);
    return s;
}
