/* Shared by the H200 conformance and timing drivers: a seeded generator,
 * CUDA error checks that abort the driver (this is a program, not the
 * library), and model construction. */
#ifndef RSSM_BENCH_COMMON_H
#define RSSM_BENCH_COMMON_H

#include "rssm_cuda.h"

extern "C" {
#include "backend.h"
#include "dtype.h"
}

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define BCHECK(call)                                                                             \
    do {                                                                                         \
        const cudaError_t bc_e = (call);                                                         \
        if (bc_e != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                        \
                    cudaGetErrorString(bc_e));                                                   \
            exit(2);                                                                             \
        }                                                                                        \
    } while (0)

/* splitmix64: a seed names the same data everywhere. */
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) {}
    uint64_t next()
    {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform(double lo, double hi) { return lo + (hi - lo) * (double)(next() >> 11) * 0x1.0p-53; }
    uint32_t range(uint32_t n) { return (uint32_t)(next() % n); }
};

static inline rssm_model bench_model(rssm_gate_kind kind, uint32_t H, uint32_t HV, uint32_t K, uint32_t V,
                                     uint32_t layers, int replay, uint32_t L, rssm_dtype state,
                                     rssm_dtype ring, rssm_dtype io, rssm_gate_mode mode)
{
    rssm_model m;
    m.layers = layers;
    m.num_qk_heads = H;
    m.num_v_heads = HV;
    m.head_k = K;
    m.head_v = V;
    m.gate_kind = kind;
    m.gate_mode = mode;
    m.gate_lower_bound = -5.0f;
    m.replay = replay;
    m.ring_len = L;
    m.state_dtype = state;
    m.ring_dtype = ring;
    m.io_dtype = io;
    m.qk_l2norm = 1;
    m.q_scale = 0.0f;
    return m;
}

/* Conformance (h200_conform.cu) of one variant of the CUDA backend
 * ("cuda", "cuda:bulk", ...): returns the number of failed cases. */
int run_conformance(bool quick, uint64_t seed, const char *variant);

#endif
