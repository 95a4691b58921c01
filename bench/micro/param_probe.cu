/*
 * What a kernel's argument block costs a latency-bound launch on the GPU:
 * pairs of small kernels, the second a programmatic dependent of the first
 * (as the stream kernels' prologue and stream kernel, cuda/stream_kernel.cu),
 * recorded into one CUDA graph and timed per pair, with argument blocks of
 * the size the kernels had before the per-layer entry (208 bytes) and after
 * (392 bytes), the pointers the kernels read either packed into one or two
 * 64-byte lines of the block or spread over one line each, read either in
 * a dependent chain or all at once. What it measured and why:
 * bench/results/h200/notes.md, History (the per-layer entry).
 *
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a bench/micro/param_probe.cu -o param_probe
 *   ./param_probe
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));      \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

constexpr int kFields = 6;
template <int BYTES> struct Args {
    unsigned long long w[BYTES / 8];
};

/* word indices of the pointers: packed into bytes 96..143, or one per line */
__device__ __host__ constexpr int field_word(bool spread, int i)
{
    return spread ? (i == 0 ? 13 : 8 * (i + 1) + (i == 5 ? 0 : 2)) : 12 + i;
}

template <int BYTES, bool SPREAD, bool DEP> __device__ __forceinline__ unsigned chain(const Args<BYTES> &a)
{
    unsigned x = 0;
    if (DEP) {
#pragma unroll
        for (int i = 0; i < kFields; ++i)
            x = reinterpret_cast<const unsigned *>(a.w[field_word(SPREAD, i)])[x + threadIdx.x];
    } else {
        x = reinterpret_cast<const unsigned *>(a.w[field_word(SPREAD, 0)])[threadIdx.x];
        unsigned s = 0;
#pragma unroll
        for (int i = 1; i < kFields; ++i)
            s += reinterpret_cast<const unsigned *>(a.w[field_word(SPREAD, i)])[x + threadIdx.x];
        x += s;
    }
    return x;
}

template <int BYTES, bool SPREAD, bool DEP> __global__ void first(const Args<BYTES> a, unsigned *out)
{
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    out[blockIdx.x * blockDim.x + threadIdx.x] = chain<BYTES, SPREAD, DEP>(a);
}

template <int BYTES, bool SPREAD, bool DEP> __global__ void second(const Args<BYTES> a, unsigned *out)
{
    const unsigned x = chain<BYTES, SPREAD, DEP>(a);
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    out[blockIdx.x * blockDim.x + threadIdx.x] += x;
}

template <int BYTES, bool SPREAD, bool DEP> double pair_us(unsigned *zeros, unsigned *out, cudaStream_t s)
{
    Args<BYTES> a{};
    for (int i = 0; i < kFields; ++i)
        a.w[field_word(SPREAD, i)] = reinterpret_cast<unsigned long long>(zeros);
    constexpr int kPairs = 256, kGrid = 32, kBlock = 128;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kPairs; ++i) {
        first<BYTES, SPREAD, DEP><<<kGrid, kBlock, 0, s>>>(a, out);
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(kGrid);
        cfg.blockDim = dim3(kBlock);
        cfg.stream = s;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        CK(cudaLaunchKernelEx(&cfg, second<BYTES, SPREAD, DEP>, a, out));
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 20; ++i) /* clocks up */
        CK(cudaGraphLaunch(ge, s));
    double t[31];
    for (int r = 0; r < 31; ++r) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[r] = ms * 1e3 / kPairs;
    }
    std::sort(t, t + 31);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return t[15];
}

int main()
{
    unsigned *zeros, *out;
    CK(cudaMalloc(&zeros, 1 << 20));
    CK(cudaMemset(zeros, 0, 1 << 20));
    CK(cudaMalloc(&out, 1 << 20));
    CK(cudaMemset(out, 0, 1 << 20));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    printf("param_probe: us per (kernel, PDL dependent) pair in a graph of 256, median of 31\n");
    printf("%-10s %-8s %-6s %8s\n", "arg bytes", "fields", "loads", "us/pair");
    for (int rep = 0; rep < 2; ++rep) {
        printf("%-10d %-8s %-6s %8.3f\n", 208, "packed", "chain", pair_us<208, false, true>(zeros, out, s));
        printf("%-10d %-8s %-6s %8.3f\n", 392, "packed", "chain", pair_us<392, false, true>(zeros, out, s));
        printf("%-10d %-8s %-6s %8.3f\n", 392, "spread", "chain", pair_us<392, true, true>(zeros, out, s));
        printf("%-10d %-8s %-6s %8.3f\n", 208, "packed", "indep", pair_us<208, false, false>(zeros, out, s));
        printf("%-10d %-8s %-6s %8.3f\n", 392, "packed", "indep", pair_us<392, false, false>(zeros, out, s));
        printf("%-10d %-8s %-6s %8.3f\n", 392, "spread", "indep", pair_us<392, true, false>(zeros, out, s));
        printf("%-10d %-8s %-6s %8.3f\n", 4096, "packed", "chain", pair_us<4096, false, true>(zeros, out, s));
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
