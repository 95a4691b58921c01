/*
 * H200 benchmark of the CUDA decode kernels, and the entry point
 * of the conformance run.
 *
 *   rssm_h200_bench conform [--quick] [--seed N] [--backend cuda|cuda:bulk|cuda:stream|cuda:pipeline]
 *   rssm_h200_bench bench --json FILE [--quick] [--fast] [--batches B1,..]
 *   rssm_h200_bench tune | profile [bf16]
 *
 * Method (docs/design.md §7): every timing replays a CUDA graph of whole steps, all
 * layers, through rssm_cuda_launch_layer (the launches the library records).
 * A replay measurement is one whole L-step ring cycle, flush included, with
 * L distinct step headers prepared in device memory in advance; the packed
 * baseline is L steps of the packed decode. Enough layers are stepped that
 * at least 256 MiB of other state is touched between two visits of a slot
 * (the L2 is 60 MB), inputs and state are random and non-zero, and the
 * device-to-device copy bandwidth is measured in the same run. The time of
 * a graph is the median of several event-timed replays after a warm-up.
 *
 * Reported per configuration: microseconds per step and layer, GB/s over the
 * bytes the step must move (counted below), % of copy bandwidth, the
 * replay/packed speed ratio, and per-position costs for uniform positions:
 * an empty-ring step (n = 0), a full-ring step (n = L-2) and a flush step
 * (n = L-1), each as its own graph of repeated steps.
 */
#include "bench_common.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <math.h>
#include <string.h>
#include <vector>

namespace {

/* Launch-shape overrides for tuning runs (0: the library's choice). */
uint32_t g_warps = 0, g_stages = 0;

__global__ void fill_random(uint8_t *p, size_t n, int kind, uint64_t seed, float lo, float hi)
{
    /* kind 0: fp32, 1: fp16, 2: bf16 */
    const size_t elem = kind == 0 ? 4 : 2;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n / elem; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull + seed;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const float u = lo + (hi - lo) * (float)(z >> 40) * (1.0f / 16777216.0f);
        if (kind == 0)
            reinterpret_cast<float *>(p)[i] = u;
        else if (kind == 1)
            reinterpret_cast<__half *>(p)[i] = __float2half_rn(u);
        else
            reinterpret_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(u);
    }
}

void randomize(void *p, size_t bytes, rssm_dtype t, uint64_t seed, float lo, float hi)
{
    if (bytes == 0)
        return;
    fill_random<<<1024, 256>>>(static_cast<uint8_t *>(p), bytes, (int)t, seed, lo, hi);
    BCHECK(cudaGetLastError());
}

/* Random content for every array of a slot pool; the ring gets valid
 * values everywhere because every position is read at some point. */
__global__ void fill_pool_kernel(uint8_t *pool, size_t slots_layers, size_t layer_bytes, size_t ckpt_elems,
                                 int sdt, size_t d_off, size_t d_elems, size_t k_off, size_t k_elems, int rdt,
                                 size_t g_off, size_t g_elems, uint64_t seed)
{
    const size_t per = ckpt_elems + d_elems + k_elems + g_elems;
    const size_t total = slots_layers * per;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t blk = i / per, e = i % per;
        uint8_t *lb = pool + blk * layer_bytes;
        uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull + seed;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const float u = (float)(z >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
        int dt;
        size_t idx;
        uint8_t *base;
        float x;
        if (e < ckpt_elems) {
            base = lb; idx = e; dt = sdt; x = u - 0.5f;
        } else if (e < ckpt_elems + d_elems) {
            base = lb + d_off; idx = e - ckpt_elems; dt = rdt; x = u - 0.5f;
        } else if (e < ckpt_elems + d_elems + k_elems) {
            base = lb + k_off; idx = e - ckpt_elems - d_elems; dt = rdt; x = 0.6f * u - 0.3f;
        } else {
            base = lb + g_off; idx = e - ckpt_elems - d_elems - k_elems; dt = 0; x = -0.01f - 0.5f * u;
        }
        if (dt == 0)
            reinterpret_cast<float *>(base)[idx] = x;
        else if (dt == 1)
            reinterpret_cast<__half *>(base)[idx] = __float2half_rn(x);
        else
            reinterpret_cast<__nv_bfloat16 *>(base)[idx] = __float2bfloat16_rn(x);
    }
}

struct Setup {
    rssm_model m;
    rssm_slot_layout lay;
    rssm_kernel_params p;
    rssm_cuda_plan plan;
    rssm_cuda_buffers buf;
    uint32_t B;
    std::vector<void *> allocs;
};

void *dalloc(Setup &s, size_t bytes)
{
    void *p = NULL;
    BCHECK(cudaMalloc(&p, bytes > 0 ? bytes : 16));
    s.allocs.push_back(p);
    return p;
}

void setup_free(Setup &s)
{
    for (void *p : s.allocs)
        cudaFree(p);
    s.allocs.clear();
}

uint32_t layers_for(const rssm_model &m0, uint32_t B)
{
    rssm_model m = m0;
    m.layers = 1;
    rssm_slot_layout lay;
    rssm_slot_layout_init(&lay, &m);
    const double per_layer = (double)B * lay.layer_bytes;
    const uint32_t need = (uint32_t)ceil(256.0 * 1024 * 1024 / per_layer) + 1u;
    return std::max(2u, need);
}

void setup_init(Setup &s, const rssm_model &m, uint32_t B, int sm_count, uint64_t seed)
{
    s.m = m;
    s.B = B;
    rssm_error err;
    if (rssm_model_validate(&m, &err) != RSSM_OK) {
        fprintf(stderr, "bad model: %s\n", err.message);
        exit(2);
    }
    rssm_slot_layout_init(&s.lay, &m);
    rssm_kernel_params_init(&s.p, &m, &s.lay, B);
    cudaDeviceProp prop;
    BCHECK(cudaGetDeviceProperties(&prop, 0));
    const char *why = rssm_cuda_unsupported(&s.p, prop.sharedMemPerBlockOptin);
    if (why) {
        fprintf(stderr, "unsupported: %s\n", why);
        exit(2);
    }
    rssm_cuda_plan_init(&s.plan, &s.p, sm_count, prop.sharedMemPerMultiprocessor, g_warps, g_stages);
    BCHECK(rssm_cuda_plan_prepare(&s.plan, &s.p));
    s.buf = rssm_cuda_buffers{};
    const size_t scratch = rssm_cuda_scratch_bytes(&s.p, &s.plan);
    s.buf.scratch = scratch ? static_cast<float *>(dalloc(s, scratch)) : NULL;
    s.buf.work = static_cast<uint32_t *>(dalloc(s, RSSM_CUDA_WORK_BYTES));
    BCHECK(cudaMemset(s.buf.work, 0, RSSM_CUDA_WORK_BYTES));
    const size_t L = m.layers, H = m.num_qk_heads, HV = m.num_v_heads, K = m.head_k, V = m.head_v;
    const size_t Kg = m.gate_kind == RSSM_GATE_KDA ? K : 1, io = rssm_dtype_size(m.io_dtype);
    uint8_t *pool = static_cast<uint8_t *>(dalloc(s, s.lay.slot_bytes * B));
    const size_t rsz = rssm_dtype_size(m.ring_dtype);
    fill_pool_kernel<<<2048, 256>>>(pool, (size_t)B * L, s.lay.layer_bytes, HV * V * K, (int)m.state_dtype,
                                    s.lay.ring_d_offset, s.lay.ring_d_bytes / rsz, s.lay.ring_k_offset,
                                    s.lay.ring_k_bytes / rsz, (int)m.ring_dtype, s.lay.ring_g_offset,
                                    s.lay.ring_g_bytes / 4, seed);
    BCHECK(cudaGetLastError());
    s.buf.pool = pool;
    void *q = dalloc(s, L * B * H * K * io), *k = dalloc(s, L * B * H * K * io);
    void *v = dalloc(s, L * B * HV * V * io), *out = dalloc(s, L * B * HV * V * io);
    float *gate = static_cast<float *>(dalloc(s, L * B * HV * Kg * 4));
    float *beta = static_cast<float *>(dalloc(s, L * B * HV * 4));
    float *A_log = static_cast<float *>(dalloc(s, L * HV * 4));
    float *dt_bias = static_cast<float *>(dalloc(s, L * HV * Kg * 4));
    randomize(q, L * B * H * K * io, m.io_dtype, seed + 1, -1, 1);
    randomize(k, L * B * H * K * io, m.io_dtype, seed + 2, -1, 1);
    randomize(v, L * B * HV * V * io, m.io_dtype, seed + 3, -1, 1);
    randomize(gate, L * B * HV * Kg * 4, RSSM_DTYPE_F32, seed + 4, -0.5f, -0.01f);
    randomize(beta, L * B * HV * 4, RSSM_DTYPE_F32, seed + 5, 0.1f, 0.9f);
    randomize(A_log, L * HV * 4, RSSM_DTYPE_F32, seed + 6, -1, 1);
    randomize(dt_bias, L * HV * Kg * 4, RSSM_DTYPE_F32, seed + 7, -1, 1);
    s.buf.q = q;
    s.buf.k = k;
    s.buf.v = v;
    s.buf.out = out;
    s.buf.gate = gate;
    s.buf.beta = beta;
    s.buf.A_log = A_log;
    s.buf.dt_bias = dt_bias;
    BCHECK(cudaDeviceSynchronize());
}

/* Switches the setup to `kernel`; false when it does not apply to this
 * model. */
bool use_kernel(Setup &s, uint32_t kernel)
{
    if (kernel == RSSM_CUDA_KERNEL_STREAM && !rssm_cuda_stream_supported(&s.p))
        return false;
    if (kernel == RSSM_CUDA_KERNEL_BULK && !rssm_cuda_bulk_supported(&s.p))
        return false;
    s.plan.kernel = kernel;
    BCHECK(rssm_cuda_plan_prepare(&s.plan, &s.p));
    const size_t scratch = rssm_cuda_scratch_bytes(&s.p, &s.plan);
    if (scratch && !s.buf.scratch)
        s.buf.scratch = static_cast<float *>(dalloc(s, scratch));
    return true;
}

/* The library's choice before the bulk kernel (the previous results): the
 * stream kernels for replay, for packed only while at most 2 (row, head)
 * pairs per SM, the pipeline kernel otherwise. */
uint32_t previous_kernel(const Setup &s)
{
    const uint64_t heads = (uint64_t)s.p.max_rows * s.p.num_v_heads;
    if (rssm_cuda_stream_supported(&s.p) && (s.p.ring_cap != 0 || heads <= 2u * (uint64_t)s.plan.sm_count))
        return RSSM_CUDA_KERNEL_STREAM;
    return RSSM_CUDA_KERNEL_PIPELINE;
}

const char *kernel_name(uint32_t k)
{
    return k == RSSM_CUDA_KERNEL_BULK ? "bulk" : k == RSSM_CUDA_KERNEL_STREAM ? "stream" : "pipeline";
}

/* Device step headers, one per step of a sequence: rows B, and for each row
 * its slot, write position and force flag. */
uint32_t *make_headers(Setup &s, const std::vector<std::vector<uint32_t>> &pos)
{
    const size_t words = RSSM_HEADER_WORDS + RSSM_ROW_WORDS * (size_t)s.B;
    std::vector<uint32_t> h(words * pos.size(), 0);
    for (size_t st = 0; st < pos.size(); ++st) {
        uint32_t *w = h.data() + st * words;
        w[RSSM_HEADER_ROWS] = s.B;
        for (uint32_t r = 0; r < s.B; ++r) {
            w[RSSM_HEADER_WORDS + RSSM_ROW_WORDS * r + RSSM_ROW_SLOT] = r;
            w[RSSM_HEADER_WORDS + RSSM_ROW_WORDS * r + RSSM_ROW_WRITE_POS] = pos[st][r];
            w[RSSM_HEADER_WORDS + RSSM_ROW_WORDS * r + RSSM_ROW_FORCE] = 0;
        }
    }
    uint32_t *d = static_cast<uint32_t *>(dalloc(s, h.size() * 4));
    /* A pageable copy may return before its DMA lands, and the timed graphs
     * run on a non-blocking stream: wait for it. */
    BCHECK(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    BCHECK(cudaDeviceSynchronize());
    return d;
}

/* Median seconds of one replay of a graph of `steps` steps (all layers),
 * step i reading header i. */
double time_steps(Setup &s, const uint32_t *headers, size_t steps, cudaStream_t stream, int reps)
{
    const size_t words = RSSM_HEADER_WORDS + RSSM_ROW_WORDS * (size_t)s.B;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    BCHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (size_t st = 0; st < steps; ++st) {
        rssm_cuda_buffers b = s.buf;
        b.header = headers + st * words;
        for (uint32_t l = 0; l < s.m.layers; ++l)
            BCHECK(rssm_cuda_launch_layer(&s.p, &b, &s.plan, l, stream));
    }
    BCHECK(cudaStreamEndCapture(stream, &graph));
    BCHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    BCHECK(cudaEventCreate(&e0));
    BCHECK(cudaEventCreate(&e1));
    BCHECK(cudaGraphLaunch(exec, stream)); /* warm-up */
    BCHECK(cudaStreamSynchronize(stream));
    std::vector<float> t(reps);
    for (int i = 0; i < reps; ++i) {
        BCHECK(cudaEventRecord(e0, stream));
        BCHECK(cudaGraphLaunch(exec, stream));
        BCHECK(cudaEventRecord(e1, stream));
        BCHECK(cudaEventSynchronize(e1));
        BCHECK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    /* Cross-check with the host clock over back-to-back replays (a graph
     * runs for milliseconds, so launch overhead is noise here): a tuning run
     * once reported a few event intervals of ~1.6 us for multi-millisecond
     * graphs; such a reading is replaced by the wall-clock mean. */
    const auto w0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i)
        BCHECK(cudaGraphLaunch(exec, stream));
    BCHECK(cudaStreamSynchronize(stream));
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() / reps;
    BCHECK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    if ((double)t[reps / 2] * 1e-3 < 0.8 * wall) {
        fprintf(stderr, "note: event time %.1f us < wall-clock %.1f us per replay; using the wall clock\n",
                (double)t[reps / 2] * 1e3, wall * 1e6);
        for (float &x : t)
            x = (float)(wall * 1e3);
    }
    BCHECK(cudaEventDestroy(e0));
    BCHECK(cudaEventDestroy(e1));
    BCHECK(cudaGraphExecDestroy(exec));
    BCHECK(cudaGraphDestroy(graph));
    /* The headers must come out of the run as they went in. */
    std::vector<uint32_t> back(words * steps);
    BCHECK(cudaMemcpy(back.data(), headers, back.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t st = 0; st < steps; ++st)
        if (back[st * words] != s.B)
            fprintf(stderr, "HEADER CLOBBERED: step %zu rows %u (expected %u)\n", st, back[st * words], s.B);
    return (double)t[reps / 2] * 1e-3;
}

/* Bytes one layer of one step must move for one row at ring position n. */
double step_bytes(const rssm_model &m, uint32_t n, bool flush)
{
    const double H = m.num_qk_heads, HV = m.num_v_heads, K = m.head_k, V = m.head_v;
    const double Kg = m.gate_kind == RSSM_GATE_KDA ? K : 1;
    const double ss = (double)rssm_dtype_size(m.state_dtype), rs = (double)rssm_dtype_size(m.ring_dtype);
    const double io = (double)rssm_dtype_size(m.io_dtype);
    const double ckpt = HV * V * K * ss;
    const double entry = HV * V * rs + H * K * rs + HV * Kg * 4; /* d, k (once per q/k head), g */
    const double inout = 2 * H * K * io + 2 * HV * V * io + HV * Kg * 4 + HV * 4;
    return ckpt + n * entry + (flush ? ckpt : entry) + inout;
}

/* One configuration, measured with the library's kernels and, for
 * comparison in the same run, with the previous choice (old_*: the stream
 * kernels for replay, the pipeline kernel for packed above batch 8; see
 * previous_kernel). */
struct Row {
    const char *kind;
    rssm_dtype state, ring;
    uint32_t L, B, layers;
    int staggered;
    double us, gbps, pct, packed_us, packed_gbps, packed_pct, ratio;
    double empty_us, full_us, flush_us;
    double old_us, old_packed_us, old_packed_pct, old_ratio, old_empty_us, old_full_us, old_flush_us;
    double stream_packed_us, stream_packed_pct; /* the packed stream kernel at every batch */
    double inplace_us;                          /* the in-place bound of the packed step */
    rssm_cuda_plan plan, packed_plan;
};

/* The cycle times (uniform, staggered) and per-position costs of one
 * replay setup with its current kernel, seconds per step per layer. */
struct ReplayTimes {
    double cycle[2], bytes[2], empty, full, flush;
};

ReplayTimes time_replay(Setup &s, uint32_t L, uint32_t B, cudaStream_t stream, int reps)
{
    ReplayTimes rt;
    const rssm_model &m = s.m;
    for (int stag = 0; stag < 2; ++stag) {
        std::vector<std::vector<uint32_t>> pos(L, std::vector<uint32_t>(B));
        double bytes = 0;
        for (uint32_t st = 0; st < L; ++st)
            for (uint32_t r = 0; r < B; ++r) {
                pos[st][r] = stag ? (st + r) % L : st;
                bytes += step_bytes(m, pos[st][r], pos[st][r] == L - 1);
            }
        rt.bytes[stag] = bytes / L;
        const uint32_t *hd = make_headers(s, pos);
        rt.cycle[stag] = time_steps(s, hd, L, stream, reps) / L / m.layers;
    }
    /* per-position costs: repeated steps at one position */
    const uint32_t at[3] = {0, L - 2, L - 1};
    double *dst[3] = {&rt.empty, &rt.full, &rt.flush};
    for (int i = 0; i < 3; ++i) {
        std::vector<std::vector<uint32_t>> one(4, std::vector<uint32_t>(B, at[i]));
        const uint32_t *oh = make_headers(s, one);
        *dst[i] = time_steps(s, oh, 4, stream, reps) / 4 / m.layers;
    }
    return rt;
}

const char *dname(rssm_dtype t) { return rssm_dtype_name(t); }

/* Median milliseconds of 9 runs of `op` on `stream`, after one warm-up. */
template <typename Op> double median_ms(cudaStream_t stream, Op op)
{
    cudaEvent_t e0, e1;
    BCHECK(cudaEventCreate(&e0));
    BCHECK(cudaEventCreate(&e1));
    std::vector<float> t(9);
    op();
    for (float &x : t) {
        BCHECK(cudaEventRecord(e0, stream));
        op();
        BCHECK(cudaEventRecord(e1, stream));
        BCHECK(cudaEventSynchronize(e1));
        BCHECK(cudaEventElapsedTime(&x, e0, e1));
    }
    std::sort(t.begin(), t.end());
    BCHECK(cudaEventDestroy(e0));
    BCHECK(cudaEventDestroy(e1));
    return (double)t[4];
}

/* Device-to-device copy of 2 GiB, bytes read + written per second. */
double copy_bandwidth(cudaStream_t stream)
{
    const size_t bytes = (size_t)2 << 30;
    void *a, *b;
    BCHECK(cudaMalloc(&a, bytes));
    BCHECK(cudaMalloc(&b, bytes));
    BCHECK(cudaMemsetAsync(a, 1, bytes, stream));
    const double ms = median_ms(stream, [&] { BCHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); });
    BCHECK(cudaFree(a));
    BCHECK(cudaFree(b));
    return 2.0 * (double)bytes / (ms * 1e-3);
}

/* --batches: a subset of the sweep's batch sizes, for quick checks */
std::vector<uint32_t> g_batches;
/* --fast: the library's kernels only (no previous-choice or stream-kernel
 * comparison rows), for iterating on one kernel */
bool g_fast = false;

/* The physical bound of a packed step: every 16 bytes of a buffer read and
 * written back once (xor with a run-time zero, so nothing is elided). Each
 * block takes contiguous tiles of D x blockDim vectors, D loads in flight
 * per thread, so DRAM pages are walked in order; CS: streaming cache hints. */
template <int D, bool CS> __global__ void inplace_kernel(uint4 *buf, size_t n, uint32_t flip)
{
    const size_t tile = D * (size_t)blockDim.x;
    for (size_t t = (size_t)blockIdx.x * tile; t < n; t += (size_t)gridDim.x * tile) {
        uint4 v[D];
#pragma unroll
        for (int u = 0; u < D; ++u) {
            const size_t i = t + (size_t)u * blockDim.x + threadIdx.x;
            if (i < n)
                v[u] = CS ? __ldcs(buf + i) : buf[i];
        }
#pragma unroll
        for (int u = 0; u < D; ++u) {
            const size_t i = t + (size_t)u * blockDim.x + threadIdx.x;
            v[u].x ^= flip;
            if (i < n) {
                if (CS)
                    __stcs(buf + i, v[u]);
                else
                    buf[i] = v[u];
            }
        }
    }
}

/* Seconds of one in-place pass over `bytes` at `p`: the fastest of a few
 * shapes of the pass (each the median of 9), so the bound is not flattered
 * by a weak reference kernel. */
double inplace_seconds(void *p, size_t bytes, cudaStream_t stream, int sm_count)
{
    uint4 *b = static_cast<uint4 *>(p);
    const size_t n = bytes / 16;
    const uint32_t sms = (uint32_t)sm_count;
    double best = 1e30;
    auto take = [&](double ms) { best = ms < best ? ms : best; };
    take(median_ms(stream, [&] {
        inplace_kernel<4, true><<<8 * sms, 256, 0, stream>>>(b, n, 0u);
        BCHECK(cudaGetLastError());
    }));
    take(median_ms(stream, [&] {
        inplace_kernel<4, false><<<8 * sms, 256, 0, stream>>>(b, n, 0u);
        BCHECK(cudaGetLastError());
    }));
    take(median_ms(stream, [&] {
        inplace_kernel<8, false><<<16 * sms, 128, 0, stream>>>(b, n, 0u);
        BCHECK(cudaGetLastError());
    }));
    take(median_ms(stream, [&] {
        inplace_kernel<2, true><<<4 * sms, 1024, 0, stream>>>(b, n, 0u);
        BCHECK(cudaGetLastError());
    }));
    return best * 1e-3;
}

/* A read-only reference: every thread sums 16-byte loads of a 2 GiB buffer
 * (8 in flight) and writes one word, so the bytes read are the buffer. */
__global__ void read_kernel(const uint4 *src, size_t n, uint32_t *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    uint32_t acc = 0;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 7 * stride < n; i += 8 * stride) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u)
            v[u] = __ldcs(src + i + u * stride);
#pragma unroll
        for (int u = 0; u < 8; ++u)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride)
        acc ^= src[i].x;
    sink[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

double read_bandwidth(cudaStream_t stream, int sm_count)
{
    const size_t bytes = (size_t)2 << 30, n = bytes / 16;
    const uint32_t blocks = 4u * (uint32_t)sm_count, threads = 512;
    void *a, *sink;
    BCHECK(cudaMalloc(&a, bytes));
    BCHECK(cudaMalloc(&sink, (size_t)blocks * threads * 4));
    BCHECK(cudaMemsetAsync(a, 1, bytes, stream));
    const double ms = median_ms(stream, [&] {
        read_kernel<<<blocks, threads, 0, stream>>>(static_cast<const uint4 *>(a), n, static_cast<uint32_t *>(sink));
        BCHECK(cudaGetLastError());
    });
    BCHECK(cudaFree(a));
    BCHECK(cudaFree(sink));
    return (double)bytes / (ms * 1e-3);
}

int run_bench(const char *json_path, bool quick)
{
    BCHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    BCHECK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t stream;
    BCHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const double copy_bw = copy_bandwidth(stream);
    const double read_bw = read_bandwidth(stream, prop.multiProcessorCount);
    printf("device %s, %d SMs, L2 %.0f MB; copy bandwidth %.0f GB/s (read + write); read-only %.0f GB/s\n",
           prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6, copy_bw / 1e9, read_bw / 1e9);

    const std::vector<uint32_t> batches = g_batches.empty() ? std::vector<uint32_t>{1, 16, 64, 128, 256, 512} : g_batches;
    struct Family { rssm_gate_kind kind; rssm_dtype state, ring; std::vector<uint32_t> Ls; };
    std::vector<Family> fams = {
        {RSSM_GATE_GDN, RSSM_DTYPE_F32, RSSM_DTYPE_F16, {8, 16}},
        {RSSM_GATE_GDN, RSSM_DTYPE_BF16, RSSM_DTYPE_F16, {8, 16}},
        {RSSM_GATE_KDA, RSSM_DTYPE_F32, RSSM_DTYPE_F16, {8, 16}},
        {RSSM_GATE_KDA, RSSM_DTYPE_BF16, RSSM_DTYPE_F16, {8, 16}},
        {RSSM_GATE_GDN, RSSM_DTYPE_F32, RSSM_DTYPE_F32, {16}},
        {RSSM_GATE_GDN, RSSM_DTYPE_F32, RSSM_DTYPE_BF16, {16}},
    };
    if (quick) { /* the families and L the targets name */
        fams.resize(4);
        for (Family &f : fams)
            f.Ls = {16};
    }
    std::vector<Row> rows;
    const int reps = quick ? 5 : 9;
    uint64_t seed = 1234;
    for (const Family &f : fams) {
        const bool kda = f.kind == RSSM_GATE_KDA;
        const uint32_t H = kda ? 32 : 16, HV = 32;
        for (uint32_t B : batches) {
            /* the packed baseline, per (family, batch) */
            rssm_model pm = bench_model(f.kind, H, HV, 128, 128, 1, 0, 1, f.state, f.ring, RSSM_DTYPE_BF16,
                                        RSSM_GATE_PRECOMPUTED);
            pm.layers = layers_for(pm, B);
            Setup ps;
            setup_init(ps, pm, B, prop.multiProcessorCount, seed++);
            const uint32_t psteps = 8;
            std::vector<std::vector<uint32_t>> zero(psteps, std::vector<uint32_t>(B, 0));
            const uint32_t *ph = make_headers(ps, zero);
            const double pt = time_steps(ps, ph, psteps, stream, reps) / psteps / pm.layers;
            const rssm_cuda_plan pplan = ps.plan;
            double pt_old = 0, pt_stream = 0;
            if (!g_fast) {
                use_kernel(ps, previous_kernel(ps));
                pt_old = time_steps(ps, ph, psteps, stream, reps) / psteps / pm.layers;
                use_kernel(ps, RSSM_CUDA_KERNEL_STREAM);
                pt_stream = time_steps(ps, ph, psteps, stream, reps) / psteps / pm.layers;
            }
            /* the packed pool holds checkpoints only: one pass over it, per layer */
            const double ipt = inplace_seconds(ps.buf.pool, ps.lay.slot_bytes * B, stream, prop.multiProcessorCount) /
                               pm.layers;
            const double pbytes = B * step_bytes(pm, 0, true);
            setup_free(ps);
            for (uint32_t L : f.Ls) {
                rssm_model m = bench_model(f.kind, H, HV, 128, 128, 1, 1, L, f.state, f.ring, RSSM_DTYPE_BF16,
                                           RSSM_GATE_PRECOMPUTED);
                m.layers = layers_for(m, B);
                Setup s;
                setup_init(s, m, B, prop.multiProcessorCount, seed++);
                const rssm_cuda_plan plan = s.plan;
                const ReplayTimes nt = time_replay(s, L, B, stream, reps);
                ReplayTimes ot = {};
                if (!g_fast) {
                    use_kernel(s, previous_kernel(s));
                    ot = time_replay(s, L, B, stream, reps);
                }
                for (int stag = 0; stag < 2; ++stag) {
                    const double t = nt.cycle[stag], bytes = nt.bytes[stag];
                    Row row;
                    row.kind = kda ? "kda" : "gdn";
                    row.state = f.state;
                    row.ring = f.ring;
                    row.L = L;
                    row.B = B;
                    row.layers = m.layers;
                    row.staggered = stag;
                    row.us = t * 1e6;
                    row.gbps = bytes / t / 1e9;
                    row.pct = 100.0 * bytes / t / copy_bw;
                    row.packed_us = pt * 1e6;
                    row.packed_gbps = pbytes / pt / 1e9;
                    row.packed_pct = 100.0 * pbytes / pt / copy_bw;
                    row.ratio = pt / t;
                    row.empty_us = nt.empty * 1e6;
                    row.full_us = nt.full * 1e6;
                    row.flush_us = nt.flush * 1e6;
                    row.old_us = ot.cycle[stag] * 1e6;
                    row.old_packed_us = pt_old * 1e6;
                    row.old_packed_pct = pt_old > 0 ? 100.0 * pbytes / pt_old / copy_bw : 0.0;
                    row.old_ratio = pt_old > 0 ? pt_old / ot.cycle[stag] : 0.0;
                    row.old_empty_us = ot.empty * 1e6;
                    row.old_full_us = ot.full * 1e6;
                    row.old_flush_us = ot.flush * 1e6;
                    row.stream_packed_us = pt_stream * 1e6;
                    row.stream_packed_pct = pt_stream > 0 ? 100.0 * pbytes / pt_stream / copy_bw : 0.0;
                    row.inplace_us = ipt * 1e6;
                    row.plan = plan;
                    row.packed_plan = pplan;
                    rows.push_back(row);
                    printf("%s state=%s ring=%s L=%2u B=%3u %-9s layers=%3u: replay %8.2f us (%6.0f GB/s %5.1f%%) "
                           "packed %8.2f us (%5.1f%%; %s; in-place %.2f) ratio %.3f | empty %.2f full %.2f flush %.2f us | %s RPL%u | "
                           "previous: replay %.2f packed %.2f (%5.1f%%) ratio %.3f empty %.2f full %.2f flush %.2f | "
                           "packed stream %.2f (%5.1f%%)\n",
                           row.kind, dname(f.state), dname(f.ring), L, B, stag ? "staggered" : "uniform",
                           m.layers, row.us, row.gbps, row.pct, row.packed_us, row.packed_pct,
                           kernel_name(pplan.kernel), row.inplace_us, row.ratio,
                           row.empty_us, row.full_us, row.flush_us, kernel_name(plan.kernel), plan.rows_per_lane,
                           row.old_us, row.old_packed_us, row.old_packed_pct, row.old_ratio, row.old_empty_us,
                           row.old_full_us, row.old_flush_us, row.stream_packed_us, row.stream_packed_pct);
                    fflush(stdout);
                }
                setup_free(s);
            }
        }
    }
    FILE *f = fopen(json_path, "w");
    if (!f) {
        perror(json_path);
        return 2;
    }
    fprintf(f, "{\n  \"device\": \"%s\",\n  \"sm_count\": %d,\n  \"copy_bandwidth_gbps\": %.1f,\n"
               "  \"read_bandwidth_gbps\": %.1f,\n", prop.name, prop.multiProcessorCount, copy_bw / 1e9, read_bw / 1e9);
    fprintf(f, "  \"method\": \"CUDA graph of whole steps (all layers); replay = one L-step cycle with L device "
               "headers; >= 256 MiB of other state between visits of a slot; median of %d replays; us are per "
               "step per layer; K=V=128, bf16 io, precomputed gates; us_per_step, packed_us: the library's choice of kernel, "
               "old_* = the same setups on the previous choice (stream kernels for replay, pipeline kernel for packed "
               "above batch 8), stream_packed_* = the packed "
               "setup on the stream kernel\",\n", reps);
    fprintf(f, "  \"rows\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
        const Row &r = rows[i];
        fprintf(f,
                "    {\"kind\": \"%s\", \"state\": \"%s\", \"ring\": \"%s\", \"L\": %u, \"batch\": %u, "
                "\"positions\": \"%s\", \"layers\": %u, \"us_per_step\": %.3f, \"gbps\": %.1f, "
                "\"pct_copy_bw\": %.1f, \"packed_us\": %.3f, \"packed_gbps\": %.1f, \"packed_pct_copy_bw\": %.1f, "
                "\"replay_over_packed\": %.4f, \"empty_ring_us\": %.3f, \"full_ring_us\": %.3f, "
                "\"flush_us\": %.3f, \"kernel\": \"%s\", \"rows_per_lane\": %u, \"packed_kernel\": \"%s\", "
                "\"packed_rows_per_lane\": %u, \"old_us_per_step\": %.3f, \"old_packed_us\": %.3f, "
                "\"old_packed_pct_copy_bw\": %.1f, \"old_replay_over_packed\": %.4f, \"old_empty_ring_us\": %.3f, "
                "\"old_full_ring_us\": %.3f, \"old_flush_us\": %.3f, \"stream_packed_us\": %.3f, "
                "\"stream_packed_pct_copy_bw\": %.1f, \"inplace_us\": %.3f, \"copy_gbps\": %.1f}%s\n",
                r.kind, dname(r.state), dname(r.ring), r.L, r.B, r.staggered ? "staggered" : "uniform", r.layers,
                r.us, r.gbps, r.pct, r.packed_us, r.packed_gbps, r.packed_pct, r.ratio, r.empty_us, r.full_us,
                r.flush_us, kernel_name(r.plan.kernel), r.plan.rows_per_lane, kernel_name(r.packed_plan.kernel),
                r.packed_plan.rows_per_lane, r.old_us, r.old_packed_us, r.old_packed_pct, r.old_ratio,
                r.old_empty_us, r.old_full_us, r.old_flush_us, r.stream_packed_us, r.stream_packed_pct,
                r.inplace_us, copy_bw / 1e9, i + 1 < rows.size() ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    BCHECK(cudaStreamDestroy(stream));
    return 0;
}

/* A few plain launches (no graph) for a profiler: packed, then replay at
 * ring positions 0, L-2 and L-1 (GDN, fp32 or bf16 state, fp16 ring, L =
 * 16, batch 256). Each launch runs on a different layer. */
int run_profile(rssm_dtype state)
{
    BCHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    BCHECK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t stream;
    BCHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const uint32_t B = 256, L = 16;
    for (int replay = 0; replay < 2; ++replay) {
        rssm_model m = bench_model(RSSM_GATE_GDN, 16, 32, 128, 128, 4, replay, replay ? L : 1, state,
                                   RSSM_DTYPE_F16, RSSM_DTYPE_BF16, RSSM_GATE_PRECOMPUTED);
        Setup s;
        setup_init(s, m, B, prop.multiProcessorCount, 99);
        const uint32_t at[3] = {0, L - 2, L - 1};
        for (int i = 0; i < (replay ? 3 : 1); ++i) {
            std::vector<std::vector<uint32_t>> one(1, std::vector<uint32_t>(B, replay ? at[i] : 0));
            rssm_cuda_buffers b = s.buf;
            b.header = make_headers(s, one);
            BCHECK(rssm_cuda_launch_layer(&s.p, &b, &s.plan, (uint32_t)i, stream));
            BCHECK(cudaStreamSynchronize(stream));
            printf("profile: %s n=%u W%u S%u grid %u smem %u\n", replay ? "replay" : "packed", replay ? at[i] : 0,
                   s.plan.warps, s.plan.stages, s.plan.grid, s.plan.smem_bytes);
        }
        setup_free(s);
    }
    return 0;
}

/* Launch-shape sweep of the pipeline kernel on the two large-batch cases
 * that matter most. */
int run_tune()
{
    BCHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    BCHECK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t stream;
    BCHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const double copy_bw = copy_bandwidth(stream);
    printf("tune: copy bandwidth %.0f GB/s\n", copy_bw / 1e9);
    const uint32_t combos[][2] = {{0, 0}, {4, 2}, {2, 1}};
    for (int kda = 0; kda < 2; ++kda)
        for (int st = 0; st < 2; ++st)
            for (const auto &c : combos) {
                g_warps = c[0];
                g_stages = c[1];
                const rssm_gate_kind kind = kda ? RSSM_GATE_KDA : RSSM_GATE_GDN;
                const rssm_dtype sd = st ? RSSM_DTYPE_BF16 : RSSM_DTYPE_F32;
                const uint32_t H = kda ? 32 : 16, B = 256, L = 16;
                double res[5] = {0, 0, 0, 0, 0};
                rssm_cuda_plan plans[2];
                for (int replay = 0; replay < 2; ++replay) {
                    rssm_model m = bench_model(kind, H, 32, 128, 128, 1, replay, replay ? L : 1, sd, RSSM_DTYPE_F16,
                                               RSSM_DTYPE_BF16, RSSM_GATE_PRECOMPUTED);
                    m.layers = layers_for(m, B);
                    rssm_slot_layout lay;
                    rssm_slot_layout_init(&lay, &m);
                    rssm_kernel_params kp;
                    rssm_kernel_params_init(&kp, &m, &lay, B);
                    rssm_cuda_plan_init(&plans[replay], &kp, prop.multiProcessorCount, prop.sharedMemPerMultiprocessor,
                                        g_warps, g_stages);
                    if (plans[replay].smem_bytes > prop.sharedMemPerBlockOptin)
                        goto skip;
                    Setup s;
                    setup_init(s, m, B, prop.multiProcessorCount, 77);
                    use_kernel(s, RSSM_CUDA_KERNEL_PIPELINE); /* the kernel these shapes tune */
                    plans[replay] = s.plan;
                    if (!replay) {
                        std::vector<std::vector<uint32_t>> z(8, std::vector<uint32_t>(B, 0));
                        res[0] = time_steps(s, make_headers(s, z), 8, stream, 5) / 8 / m.layers;
                    } else {
                        std::vector<std::vector<uint32_t>> cyc(L, std::vector<uint32_t>(B));
                        for (uint32_t i = 0; i < L; ++i)
                            for (uint32_t r = 0; r < B; ++r)
                                cyc[i][r] = i;
                        res[1] = time_steps(s, make_headers(s, cyc), L, stream, 5) / L / m.layers;
                        const uint32_t at[3] = {0, L - 2, L - 1};
                        for (int i = 0; i < 3; ++i) {
                            std::vector<std::vector<uint32_t>> one(4, std::vector<uint32_t>(B, at[i]));
                            res[2 + i] = time_steps(s, make_headers(s, one), 4, stream, 5) / 4 / m.layers;
                        }
                    }
                    setup_free(s);
                }
                {
                    const double pbytes = (double)B * 32 * 128 * 128 * (st ? 2 : 4) * 2;
                    printf("%s %s W=%u S=%u (packed plan W%u S%u grid %u; replay W%u S%u grid %u): packed %.1f us "
                           "(%.1f%% copy) | replay L=16 %.1f us ratio %.3f | empty %.1f full %.1f flush %.1f\n",
                           kda ? "kda" : "gdn", st ? "bf16" : "fp32", c[0], c[1], plans[0].warps, plans[0].stages,
                           plans[0].grid, plans[1].warps, plans[1].stages, plans[1].grid, res[0] * 1e6,
                           100.0 * pbytes / res[0] / copy_bw, res[1] * 1e6, res[0] / res[1], res[2] * 1e6,
                           res[3] * 1e6, res[4] * 1e6);
                    fflush(stdout);
                }
                continue;
            skip:
                printf("%s %s W=%u S=%u: does not fit in shared memory\n", kda ? "kda" : "gdn", st ? "bf16" : "fp32",
                       c[0], c[1]);
            }
    g_warps = g_stages = 0;
    return 0;
}

} /* namespace */

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s conform [--quick] [--seed N] [--backend VARIANT] | bench --json FILE [--quick] [--fast] [--batches B1,B2,..]\n", argv[0]);
        return 2;
    }
    bool quick = false;
    uint64_t seed = 20261129;
    const char *json = "bench.json", *variant = "cuda";
    for (int i = 2; i < argc; ++i) {
        if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            variant = argv[++i];
        else if (!strcmp(argv[i], "--fast"))
            g_fast = true;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc)
            for (char *tok = strtok(argv[++i], ","); tok; tok = strtok(NULL, ","))
                g_batches.push_back((uint32_t)strtoul(tok, NULL, 10));
    }
    if (!strcmp(argv[1], "conform"))
        return run_conformance(quick, seed, variant) ? 1 : 0;
    if (!strcmp(argv[1], "bench"))
        return run_bench(json, quick);
    if (!strcmp(argv[1], "tune"))
        return run_tune();
    if (!strcmp(argv[1], "profile"))
        return run_profile(argc > 2 && !strcmp(argv[2], "bf16") ? RSSM_DTYPE_BF16 : RSSM_DTYPE_F32);
    fprintf(stderr, "unknown mode '%s'\n", argv[1]);
    return 2;
}
