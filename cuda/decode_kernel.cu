/*
 * The decode step on the GPU: one kernel, templated on the state and ring
 * storage types, that runs both the packed decode (no ring: every step is a
 * flush with n = 0) and the ReplaySSM decode with the factored readout
 * (docs/design.md §1), followed step by step.
 * Replay models with rings of up to 16 entries, and packed models at small
 * batches, are planned onto the stream kernels of stream_kernel.cu instead;
 * this one runs the rest (the packed decode once the batch fills the GPU,
 * longer rings), and any plan switched to it (the benchmark compares both).
 *
 * Work split. A work item is 16*W value rows (W <= 4 warps) of one (batch
 * row, value head). Persistent CTAs walk the items round-robin and keep
 * `stages` items' loads in flight: while item i is computed, the checkpoint
 * tiles, ring entries and inputs of items i+1 .. i+S-1 are on their way into
 * shared memory by cp.async (16-byte copies where alignment allows). The
 * plan favours resident CTAs over stages (4 CTAs of 4 warps per SM, then as
 * many stages as the shared memory leaves): on the H200 that measured
 * better than deeper pipelines in fewer CTAs, because the per-item
 * arithmetic and barriers, not the loads, are what must be overlapped
 * (bench/results/h200/notes.md). A first version with one-shot CTAs (one
 * item each) reached only ~48% of copy bandwidth on the packed decode.
 *
 * Within an item each warp owns a 16-row tile of the checkpoint C (16 x K,
 * K <= 128) in the layout of an m16n8 MMA accumulator: lane (g = lane/4,
 * t = lane%4) holds rows g and g+8, and in each group of 4*CPT channels the
 * CPT consecutive channels [t*CPT, t*CPT+CPT): one 16-byte vector per row
 * and group. The flush's tensor-core product then lands on exactly the
 * values the thread holds (the MMA's column index is a permutation of the
 * channels, applied to its B operand), and C' is stored straight from the
 * registers: a flush reads C once and writes it once, as a packed step does.
 *
 * An item, after its data has landed:
 *   A. q and k normalised and k.q (each warp for itself, no barrier); per
 *      channel the gate, and the ring walked newest to oldest (fp32):
 *      gamma_j, Gamma, kg_j = k_j * gamma_j * alpha, once per item, not per
 *      row; k and g appended to the ring if this is not a flush;
 *   B. the 2n coefficients c_j(q), c_j(k) (dot products over K), only when
 *      the ring is not empty;
 *   C. per row: Sbar x = C (alpha Gamma x) + sum_j d_j c_j(x), d, o; then
 *      either append d to the ring, or C' = C alpha Gamma + d k^T +
 *      sum_j d_j kg_j^T: the ring part on tensor cores for 16-bit rings
 *      (d_j is exact in the ring dtype; kg as hi + lo keeps ~fp32 accuracy)
 *      or by FFMA for fp32 rings.
 * Rows at different ring positions are just different items: a flush item
 * costs one extra store stream, and the round-robin walk spreads them.
 */
#include "rssm_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernel_common.cuh"

namespace {

using namespace rssm_kc;

/* ------------------------------------------------------ shared memory */

/* Byte offsets in dynamic shared memory, computed on the host from the
 * parameters and the plan. `stages` item buffers, then the work arrays. */
struct Smem {
    /* within one stage (an item's data as loaded) */
    uint32_t sC;     /* checkpoint tile vectors, [vector][thread] */
    uint32_t sK;     /* ring k_j, j < n: [n][K] ring dtype */
    uint32_t sD;     /* ring d_j: [n][V] ring dtype */
    uint32_t sG;     /* ring g_j: [n][K] (KDA) or [n] fp32 */
    uint32_t sQ, sKi, sV;  /* q, k [K], v [V] io dtype */
    uint32_t sGate;  /* [K] (KDA) or [1] fp32 */
    uint32_t sBeta;  /* [1] fp32 */
    uint32_t sMeta;  /* slot, n, flush, io row */
    uint32_t stage_bytes;
    uint32_t stages;
    /* work arrays, one set */
    uint32_t kF;     /* [cap][K] fp32: kg_j = k_j gamma_j alpha */
    uint32_t qv;     /* [K] q, normalised and scaled */
    uint32_t kv;     /* [K] k, normalised */
    uint32_t aG;     /* [K] alpha Gamma */
    uint32_t qw;     /* [K] alpha Gamma q */
    uint32_t kw;     /* [K] alpha Gamma k */
    uint32_t cq;     /* [cap] c_j(q) */
    uint32_t ck;     /* [cap] c_j(k) */
    uint32_t misc;   /* beta, k.q */
    uint32_t total;
    uint32_t Jpad;   /* ring entries rounded up to the MMA's k = 16 */
};

uint32_t take(uint32_t *at, size_t bytes)
{
    uint32_t o = *at;
    *at += (uint32_t)((bytes + 15u) & ~(size_t)15u);
    return o;
}

/* Bytes of one thread's share of a checkpoint tile: 16 rows x 128 channels
 * over 32 lanes, in the state dtype (the register array of the kernel). */
uint32_t tile_bytes_per_thread(const rssm_kernel_params *p)
{
    return p->state_dtype == RSSM_CODE_DTYPE_F32 ? 256u : 128u;
}

Smem smem_layout(const rssm_kernel_params *p, uint32_t warps, uint32_t stages)
{
    Smem s;
    const uint32_t K = p->head_k, V = p->head_v, cap = p->ring_cap;
    const bool r16 = p->ring_dtype != RSSM_CODE_DTYPE_F32;
    const size_t rsz = r16 ? 2 : 4, io = p->io_dtype == RSSM_CODE_DTYPE_F32 ? 4 : 2;
    const size_t Kg = p->gate_kind == RSSM_CODE_GATE_KDA ? K : 1u;
    uint32_t at = 0;
    s.sC = take(&at, (size_t)32u * warps * tile_bytes_per_thread(p));
    s.sK = take(&at, (size_t)cap * K * rsz);
    s.sD = take(&at, (size_t)cap * V * rsz);
    s.sG = take(&at, (size_t)cap * Kg * 4);
    s.sQ = take(&at, (size_t)K * io);
    s.sKi = take(&at, (size_t)K * io);
    s.sV = take(&at, (size_t)V * io);
    s.sGate = take(&at, Kg * 4);
    s.sBeta = take(&at, 4);
    s.sMeta = take(&at, 16);
    s.stage_bytes = at;
    s.stages = stages;
    at = s.stage_bytes * stages;
    s.Jpad = (cap + 15u) / 16u * 16u;
    s.kF = take(&at, (size_t)cap * K * 4);
    s.qv = take(&at, (size_t)K * 4);
    s.kv = take(&at, (size_t)K * 4);
    s.aG = take(&at, (size_t)K * 4);
    s.qw = take(&at, (size_t)K * 4);
    s.kw = take(&at, (size_t)K * 4);
    s.cq = take(&at, (size_t)cap * 4);
    s.ck = take(&at, (size_t)cap * 4);
    s.misc = take(&at, 16 * 4);
    s.total = at;
    return s;
}

struct KArgs {
    rssm_kernel_params p;
    rssm_cuda_buffers b;
    Smem sm;
    uint32_t chunks;
};

/* ---------------------------------------------------------- the kernel */

template <int ST, int CPT, int RT, bool FIX>
__global__ void __launch_bounds__(128, 4) decode_kernel(const KArgs a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    using SV = StateVec<ST, CPT>;
    using SRaw = typename Raw<ST>::T;
    using RRaw = typename Raw<RT>::T;
    constexpr int NG = (int)RSSM_CUDA_MAX_HEAD_K / (4 * CPT); /* channel groups, at most */
    constexpr int VB = (int)sizeof(typename SV::T);           /* bytes per state vector */
    constexpr bool R16 = RT != kF32;

    pdl_step_start();
    const rssm_kernel_params &p = a.p;
    /* FIX: K = V = 128 known at compile time (the model shapes of docs/design.md §5),
     * which folds the bounds checks and most of the address arithmetic. */
    const uint32_t K = FIX ? 128u : p.head_k, V = FIX ? 128u : p.head_v;
    const uint32_t H = p.num_qk_heads, HV = p.num_v_heads;
    const uint32_t group = HV / H, chunks = a.chunks;
    const bool kda = p.gate_kind == RSSM_CODE_GATE_KDA;
    const uint32_t Kg = kda ? K : 1u;
    const Dtype iot = io_dtype(p);
    const bool gate_bf16 = (p.flags & RSSM_FLAG_GATE_BF16) != 0u;
    const size_t io = bytes_of(iot), rsz = R16 ? 2 : 4;
    const uint32_t ng = (K + 4u * CPT - 1u) / (4u * CPT);

    const int tid = threadIdx.x, nthr = blockDim.x, W = nthr >> 5; /* W <= 4 */
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const Smem &L = a.sm;
    const uint32_t S = L.stages;

    const rssm_layer_io &IO = a.b.io;
    const uint32_t per_row = HV * chunks;
    const uint32_t T = launch_rows(p, IO) * per_row;

    float *kF = reinterpret_cast<float *>(smem + L.kF);
    float *qv = reinterpret_cast<float *>(smem + L.qv);
    float *kv = reinterpret_cast<float *>(smem + L.kv);
    float *aG = reinterpret_cast<float *>(smem + L.aG);
    float *qw = reinterpret_cast<float *>(smem + L.qw);
    float *kw = reinterpret_cast<float *>(smem + L.kw);
    float *cq = reinterpret_cast<float *>(smem + L.cq);
    float *ck = reinterpret_cast<float *>(smem + L.ck);
    float *misc = reinterpret_cast<float *>(smem + L.misc);

    /* Starts the loads of item t into stage s; `hr` is its header row. */
    auto issue = [&](uint32_t t, uint32_t s, uint4 hr) {
        const uint32_t rem = t % per_row, hv = rem / chunks, chunk = rem % chunks;
        const uint32_t h = hv / group;
        const RowStep row = row_decode(p, IO, hr);
        const uint32_t slot = row.slot, n = row.n;
        uint8_t *st = smem + (size_t)s * L.stage_bytes;
        if (tid == 0) {
            uint32_t *meta = reinterpret_cast<uint32_t *>(st + L.sMeta);
            meta[0] = slot;
            meta[1] = n;
            meta[2] = row_meta_flag(row);
            meta[3] = row.io;
        }
        const SRaw *C = reinterpret_cast<const SRaw *>(at_slot(IO.ckpt, IO.ckpt_slot, IO.ckpt_head, slot, hv));
        const uint32_t tile_row = chunk * (uint32_t)W * 16u + 16u * (uint32_t)warp;
#pragma unroll
        for (int G = 0; G < NG; ++G) {
            const uint32_t c0 = (uint32_t)G * 4u * CPT + (uint32_t)t4 * CPT;
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const uint32_t v = tile_row + (uint32_t)g + 8u * hf;
                if ((uint32_t)G < ng && c0 < K && v < V) {
                    uint8_t *dst = st + L.sC + ((size_t)(G * 2 + hf) * nthr + tid) * VB;
                    const SRaw *src = C + (size_t)v * K + c0;
                    if (VB == 16)
                        cp_async16(dst, src);
                    else
                        cp_async8(dst, src);
                }
            }
        }
        if (n > 0) {
            copy_async(st + L.sK, at_slot(IO.ring_k, IO.ring_k_slot, IO.ring_k_head, slot, h), n * K * (uint32_t)rsz,
                       tid, nthr);
            copy_async(st + L.sD, at_slot(IO.ring_d, IO.ring_d_slot, IO.ring_d_head, slot, hv), n * V * (uint32_t)rsz,
                       tid, nthr);
            copy_async(st + L.sG, at_slot(IO.ring_g, IO.ring_g_slot, IO.ring_g_head, slot, hv), n * Kg * 4u, tid, nthr);
        }
        const size_t io_row = row.io;
        copy_async(st + L.sQ, IO.q + io_row * IO.q_row + (size_t)h * K * io, K * (uint32_t)io, tid, nthr);
        copy_async(st + L.sKi, IO.k + io_row * IO.k_row + (size_t)h * K * io, K * (uint32_t)io, tid, nthr);
        copy_async(st + L.sV, IO.v + io_row * IO.v_row + (size_t)hv * V * io, V * (uint32_t)io, tid, nthr);
        /* fp32 gates are staged with the rest; bf16 ones (2 bytes each, too
         * small for an asynchronous copy) are read where they are used */
        if (!gate_bf16) {
            copy_async(st + L.sGate, IO.gate + io_row * IO.gate_row + (size_t)hv * Kg * 4u, Kg * 4u, tid, nthr);
            if (tid == nthr - 1)
                cp_async4(st + L.sBeta, IO.beta + io_row * IO.beta_row + (size_t)hv * 4u);
        }
    };

    /* Computes item t from stage s. */
    auto compute = [&](uint32_t t, uint32_t s) {
        const uint32_t r = t / per_row, rem = t % per_row, hv = rem / chunks, chunk = rem % chunks;
        const uint32_t h = hv / group;
        const uint8_t *st = smem + (size_t)s * L.stage_bytes;
        const uint32_t *meta = reinterpret_cast<const uint32_t *>(st + L.sMeta);
        const uint32_t slot = meta[0], n = meta[1];
        const bool flush = meta[2] == kMetaFlush, pad = meta[2] == kMetaPad;
        SRaw *C = reinterpret_cast<SRaw *>(at_slot(IO.ckpt, IO.ckpt_slot, IO.ckpt_head, slot, hv));
        RRaw *ring_d = reinterpret_cast<RRaw *>(at_slot(IO.ring_d, IO.ring_d_slot, IO.ring_d_head, slot, hv));
        RRaw *ring_k = reinterpret_cast<RRaw *>(at_slot(IO.ring_k, IO.ring_k_slot, IO.ring_k_head, slot, h));
        float *ring_g = reinterpret_cast<float *>(at_slot(IO.ring_g, IO.ring_g_slot, IO.ring_g_head, slot, hv));
        const RRaw *sD = reinterpret_cast<const RRaw *>(st + L.sD);
        const RRaw *sK = reinterpret_cast<const RRaw *>(st + L.sK);
        const float *sG = reinterpret_cast<const float *>(st + L.sG);
        const size_t io_row = meta[3];
        void *out_row = IO.out + io_row * IO.out_row;
        const uint32_t tile_row = chunk * (uint32_t)W * 16u + 16u * (uint32_t)warp;
        const bool has_tile = tile_row < V;

        /* A. Per channel, one pass: every warp normalises q and k itself (4
         * channels per lane, so no barrier is needed for the norms or k.q);
         * the thread that owns channel c (lane + 32 i, i % W == warp) then
         * computes its gate and walks the ring newest to oldest in fp32:
         * gamma_j, Gamma, kg_j = k_j gamma_j alpha, alpha Gamma x. */
        {
            const bool raw = p.gate_mode != RSSM_CODE_MODE_PRECOMPUTED;
            const float A = raw ? expf(__ldg(IO.A_log + hv)) : 0.0f;
            const float *sGate = reinterpret_cast<const float *>(st + L.sGate);
            float qx[4], kx[4], sq = 0.0f, sk = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t c = (uint32_t)lane + 32u * i;
                qx[i] = c < K ? load_io(st + L.sQ, c, iot) : 0.0f;
                kx[i] = c < K ? load_io(st + L.sKi, c, iot) : 0.0f;
                sq += qx[i] * qx[i];
                sk += kx[i] * kx[i];
            }
            float qn = p.q_scale, kn = 1.0f;
            if (p.flags & RSSM_FLAG_QK_L2NORM) {
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    sq += __shfl_xor_sync(0xffffffffu, sq, o);
                    sk += __shfl_xor_sync(0xffffffffu, sk, o);
                }
                qn = p.q_scale / sqrtf(sq + RSSM_L2NORM_EPS);
                kn = 1.0f / sqrtf(sk + RSSM_L2NORM_EPS);
            }
            float kq = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                qx[i] *= qn;
                kx[i] *= kn;
                kq += qx[i] * kx[i];
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                kq += __shfl_xor_sync(0xffffffffu, kq, o);
            const bool append_k = !flush && !pad && chunk == 0 && hv % group == 0;
            const bool append_g = !flush && !pad && chunk == 0;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t c = (uint32_t)lane + 32u * i;
                if (c >= K || i % W != warp)
                    continue;
                const uint32_t cg = kda ? c : 0u;
                float gv = gate_bf16 ? load_io(IO.gate + io_row * IO.gate_row, (size_t)hv * Kg + cg, kGateBF16)
                                     : sGate[cg];
                if (raw) {
                    const float dt = __ldg(IO.dt_bias + (size_t)hv * Kg + cg);
                    gv = raw_gate(p, gv, dt, A);
                }
                const float alpha = expf(gv);
                if (append_g && (kda || c == 0))
                    ring_g[(size_t)n * Kg + cg] = gv;
                if (append_k)
                    ring_k[(size_t)n * K + c] = to_ring<RT>(kx[i], IO.overflow, r);
                float sacc = 0.0f;
                for (int j = (int)n - 1; j >= 0; --j) {
                    kF[(size_t)j * K + c] = to_f<RT>(sK[(size_t)j * K + c]) * (expf(sacc) * alpha);
                    sacc += sG[kda ? (size_t)j * K + c : (size_t)j];
                }
                const float ag = alpha * expf(sacc);
                qv[c] = qx[i];
                kv[c] = kx[i];
                aG[c] = ag;
                qw[c] = ag * qx[i];
                kw[c] = ag * kx[i];
            }
            if (tid == 0) {
                const float b = gate_bf16 ? load_io(IO.beta + io_row * IO.beta_row, hv, kGateBF16)
                                          : *reinterpret_cast<const float *>(st + L.sBeta);
                misc[0] = raw ? sigmoid(b) : b;
                misc[1] = kq;
            }
        }
        __syncthreads();

        /* B. c_j(q), c_j(k): one warp per entry, lanes over K. */
        if (n > 0) {
            for (uint32_t j = warp; j < n; j += W) {
                float dq = 0.0f, dk = 0.0f;
                const uint32_t c = 4u * lane;
                if (c < K) {
                    const float4 kf = *reinterpret_cast<const float4 *>(kF + (size_t)j * K + c);
                    const float4 q4 = *reinterpret_cast<const float4 *>(qv + c);
                    const float4 k4 = *reinterpret_cast<const float4 *>(kv + c);
                    dq = kf.x * q4.x + kf.y * q4.y + kf.z * q4.z + kf.w * q4.w;
                    dk = kf.x * k4.x + kf.y * k4.y + kf.z * k4.z + kf.w * k4.w;
                }
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    dq += __shfl_xor_sync(0xffffffffu, dq, o);
                    dk += __shfl_xor_sync(0xffffffffu, dk, o);
                }
                if (lane == 0) {
                    cq[j] = dq;
                    ck[j] = dk;
                }
            }
            __syncthreads();
        }
        if (!has_tile)
            return;

        /* C. The rows of this warp's tile. */
        float cf[NG][2][CPT];
#pragma unroll
        for (int G = 0; G < NG; ++G) {
            const uint32_t c0 = (uint32_t)G * 4u * CPT + (uint32_t)t4 * CPT;
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const uint32_t v = tile_row + (uint32_t)g + 8u * hf;
                typename SV::T x{};
                if ((uint32_t)G < ng && c0 < K && v < V)
                    x = *reinterpret_cast<const typename SV::T *>(st + L.sC + ((size_t)(G * 2 + hf) * nthr + tid) * VB);
                SV::unpack(x, cf[G][hf]);
            }
        }
        const uint32_t v0 = tile_row + (uint32_t)g, v1 = v0 + 8u;
        float pq[2] = {0.0f, 0.0f}, pk[2] = {0.0f, 0.0f};
#pragma unroll
        for (int G = 0; G < NG; ++G) {
            const uint32_t c0 = (uint32_t)G * 4u * CPT + (uint32_t)t4 * CPT;
            if ((uint32_t)G < ng && c0 < K) {
#pragma unroll
                for (int e = 0; e < CPT; e += 4) {
                    const float4 q4 = *reinterpret_cast<const float4 *>(qw + c0 + e);
                    const float4 k4 = *reinterpret_cast<const float4 *>(kw + c0 + e);
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf) {
                        const float *x = cf[G][hf] + e;
                        pq[hf] += x[0] * q4.x + x[1] * q4.y + x[2] * q4.z + x[3] * q4.w;
                        pk[hf] += x[0] * k4.x + x[1] * k4.y + x[2] * k4.z + x[3] * k4.w;
                    }
                }
            }
        }
        for (uint32_t j = t4; j < n; j += 4) {
            const float d0 = v0 < V ? to_f<RT>(sD[(size_t)j * V + v0]) : 0.0f;
            const float d1 = v1 < V ? to_f<RT>(sD[(size_t)j * V + v1]) : 0.0f;
            pq[0] += d0 * cq[j];
            pk[0] += d0 * ck[j];
            pq[1] += d1 * cq[j];
            pk[1] += d1 * ck[j];
        }
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                pq[hf] += __shfl_xor_sync(0xffffffffu, pq[hf], o);
                pk[hf] += __shfl_xor_sync(0xffffffffu, pk[hf], o);
            }
        }
        const float beta = misc[0], kq = misc[1];
        float d[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const uint32_t v = v0 + 8u * hf;
            const float vin = v < V ? load_io(st + L.sV, v, iot) : 0.0f;
            d[hf] = beta * (vin - pk[hf]);
            if (t4 == 0 && v < V) {
                store_io(out_row, (size_t)hv * V + v, iot, pad ? 0.0f : pq[hf] + d[hf] * kq);
                if (!flush && !pad)
                    ring_d[(size_t)n * V + v] = to_ring<RT>(d[hf], IO.overflow, r);
            }
        }
        if (!flush)
            return;

        /* The checkpoint: C alpha Gamma + d k^T (FFMA), + the ring (MMA/FFMA). */
#pragma unroll
        for (int G = 0; G < NG; ++G) {
            const uint32_t c0 = (uint32_t)G * 4u * CPT + (uint32_t)t4 * CPT;
            if ((uint32_t)G < ng && c0 < K) {
#pragma unroll
                for (int e = 0; e < CPT; e += 4) {
                    const float4 ag = *reinterpret_cast<const float4 *>(aG + c0 + e);
                    const float4 k4 = *reinterpret_cast<const float4 *>(kv + c0 + e);
                    const float agv[4] = {ag.x, ag.y, ag.z, ag.w}, kk[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                        for (int i = 0; i < 4; ++i)
                            cf[G][hf][e + i] = cf[G][hf][e + i] * agv[i] + d[hf] * kk[i];
                }
            }
        }
        if (n > 0) {
            if (R16) {
                const uint16_t *d16 = reinterpret_cast<const uint16_t *>(sD);
                auto dval = [&](uint32_t j, uint32_t v) -> uint32_t {
                    return (j < n && v < V) ? (uint32_t)d16[(size_t)j * V + v] : 0u;
                };
                /* kg_j[c] split into hi + lo in the ring dtype, packed in pairs
                 * of consecutive j, zero for j >= n. */
                auto bpair = [&](uint32_t j, uint32_t c, uint32_t &hi2, uint32_t &lo2) {
                    split_pair<RT>(j < n ? kF[(size_t)j * K + c] : 0.0f,
                                   j + 1u < n ? kF[(size_t)(j + 1u) * K + c] : 0.0f, hi2, lo2);
                };
                for (uint32_t ks = 0; ks < L.Jpad; ks += 16) {
                    const uint32_t j0 = ks + 2u * t4;
                    const uint32_t a0 = dval(j0, v0) | dval(j0 + 1u, v0) << 16;
                    const uint32_t a1 = dval(j0, v1) | dval(j0 + 1u, v1) << 16;
                    const uint32_t a2 = dval(j0 + 8u, v0) | dval(j0 + 9u, v0) << 16;
                    const uint32_t a3 = dval(j0 + 8u, v1) | dval(j0 + 9u, v1) << 16;
#pragma unroll
                    for (int G = 0; G < NG; ++G) {
                        if ((uint32_t)G >= ng)
                            continue;
#pragma unroll
                        for (int tt = 0; tt < CPT / 2; ++tt) {
                            /* MMA column g of this n8 tile is channel cB. */
                            const uint32_t cB = (uint32_t)G * 4u * CPT + (uint32_t)CPT * (g >> 1) +
                                                2u * tt + (uint32_t)(g & 1);
                            uint32_t bh0 = 0, bh1 = 0, bl0 = 0, bl1 = 0;
                            if (cB < K) {
                                bpair(j0, cB, bh0, bl0);
                                bpair(j0 + 8u, cB, bh1, bl1);
                            }
                            float &x0 = cf[G][0][2 * tt], &x1 = cf[G][0][2 * tt + 1];
                            float &x2 = cf[G][1][2 * tt], &x3 = cf[G][1][2 * tt + 1];
                            mma16816(x0, x1, x2, x3, a0, a1, a2, a3, bh0, bh1, RT == kBF16);
                            mma16816(x0, x1, x2, x3, a0, a1, a2, a3, bl0, bl1, RT == kBF16);
                        }
                    }
                }
            } else {
                for (uint32_t j = 0; j < n; ++j) {
                    const float d0 = v0 < V ? to_f<RT>(sD[(size_t)j * V + v0]) : 0.0f;
                    const float d1 = v1 < V ? to_f<RT>(sD[(size_t)j * V + v1]) : 0.0f;
#pragma unroll
                    for (int G = 0; G < NG; ++G) {
                        const uint32_t c0 = (uint32_t)G * 4u * CPT + (uint32_t)t4 * CPT;
                        if ((uint32_t)G < ng && c0 < K) {
#pragma unroll
                            for (int e = 0; e < CPT; e += 4) {
                                const float4 kg = *reinterpret_cast<const float4 *>(kF + (size_t)j * K + c0 + e);
                                const float kk[4] = {kg.x, kg.y, kg.z, kg.w};
#pragma unroll
                                for (int i = 0; i < 4; ++i) {
                                    cf[G][0][e + i] += d0 * kk[i];
                                    cf[G][1][e + i] += d1 * kk[i];
                                }
                            }
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int G = 0; G < NG; ++G) {
            const uint32_t c0 = (uint32_t)G * 4u * CPT + (uint32_t)t4 * CPT;
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const uint32_t v = v0 + 8u * hf;
                if ((uint32_t)G < ng && c0 < K && v < V)
                    __stcs(reinterpret_cast<typename SV::T *>(C + (size_t)v * K + c0), SV::pack(cf[G][hf]));
            }
        }
    };

    /* The pipeline: S-1 items ahead, the header row of the next one
     * prefetched into a register so issuing never waits on it. */
    const uint32_t b = blockIdx.x, Gs = gridDim.x;
    for (uint32_t k = 0; k + 1u < S; ++k) {
        const uint32_t t = b + k * Gs;
        if (t < T)
            issue(t, k, row_words(IO, t / per_row));
        cp_commit();
    }
    uint4 nh = make_uint4(0, 0, 0, 0);
    if (b + (S - 1u) * Gs < T)
        nh = row_words(IO, (b + (S - 1u) * Gs) / per_row);
    for (uint32_t k = 0;; ++k) {
        const uint32_t t = b + k * Gs;
        if (t >= T)
            break;
        __syncthreads(); /* the stage and work arrays of item k-1 are free */
        const uint32_t tn = b + (k + S - 1u) * Gs;
        if (tn < T)
            issue(tn, (k + S - 1u) % S, nh);
        cp_commit();
        const uint32_t t2 = b + (k + S) * Gs;
        if (t2 < T)
            nh = row_words(IO, t2 / per_row);
        cp_wait(S - 1u);
        __syncthreads();
        compute(t, k % S);
    }
    cp_wait(0);
}

/* ------------------------------------------------------------- variants */

using KernelFn = void (*)(const KArgs);

/* [K = V = 128][state variant][ring dtype]: state variants are fp32 (4
 * channels = 16 B per vector), bf16 with K % 8 == 0 (8 channels = 16 B),
 * bf16 otherwise (4 channels = 8 B). */
const KernelFn kKernels[2][3][3] = {
    {{decode_kernel<kF32, 4, kF32, false>, decode_kernel<kF32, 4, kF16, false>, decode_kernel<kF32, 4, kBF16, false>},
     {decode_kernel<kBF16, 8, kF32, false>, decode_kernel<kBF16, 8, kF16, false>, decode_kernel<kBF16, 8, kBF16, false>},
     {decode_kernel<kBF16, 4, kF32, false>, decode_kernel<kBF16, 4, kF16, false>, decode_kernel<kBF16, 4, kBF16, false>}},
    {{decode_kernel<kF32, 4, kF32, true>, decode_kernel<kF32, 4, kF16, true>, decode_kernel<kF32, 4, kBF16, true>},
     {decode_kernel<kBF16, 8, kF32, true>, decode_kernel<kBF16, 8, kF16, true>, decode_kernel<kBF16, 8, kBF16, true>},
     {decode_kernel<kBF16, 4, kF32, true>, decode_kernel<kBF16, 4, kF16, true>, decode_kernel<kBF16, 4, kBF16, true>}},
};

KernelFn kernel_of(uint32_t variant)
{
    return kKernels[variant / 9u][(variant / 3u) % 3u][variant % 3u];
}

uint32_t state_variant(const rssm_kernel_params *p)
{
    if (p->state_dtype == RSSM_CODE_DTYPE_F32)
        return 0;
    return p->head_k % 8u == 0 ? 1u : 2u;
}

/* Shared memory a CTA may take when `ctas` of them share an SM (the driver
 * reserves 1 KiB per CTA). */
size_t smem_budget(size_t smem_per_sm, uint32_t ctas)
{
    const size_t per = smem_per_sm / ctas;
    return per > 1024 ? per - 1024 : 0;
}

} /* namespace */

extern "C" const char *rssm_cuda_unsupported(const rssm_kernel_params *p, size_t smem_limit)
{
    if (p->head_k > RSSM_CUDA_MAX_HEAD_K)
        return "head_k > 128: the CUDA kernels keep a 16 x head_k checkpoint tile per warp in registers";
    if (p->max_rows > 65535u * 64u)
        return "too many batch rows for one launch";
    if (smem_layout(p, 1, 1).total > smem_limit)
        return "the ring of this model does not fit in shared memory (ring_len or head sizes too large)";
    return NULL;
}

extern "C" void rssm_cuda_plan_init(rssm_cuda_plan *plan, const rssm_kernel_params *p, int sm_count,
                                    size_t smem_per_sm, uint32_t allow, uint32_t warps, uint32_t stages)
{
    const uint32_t tiles = (p->head_v + 15u) / 16u;
    const uint64_t heads = (uint64_t)p->max_rows * p->num_v_heads;
    const uint64_t sms = (uint64_t)(sm_count > 0 ? sm_count : 1);
    /* 64-row items (4 warps): the kernel's arithmetic and barriers per item
     * are hidden by running several CTAs per SM, which matters more than
     * deep per-CTA pipelines (measured on the H200). Smaller items while the
     * batch leaves SMs idle. */
    uint32_t w = warps ? (warps > 4u ? 4u : warps) : 4u;
    if (!warps) {
        while (w > 1 && (w / 2u) >= tiles)
            w /= 2u;
        while (w > 1 && heads * ((tiles + w - 1u) / w) < 2u * sms)
            w /= 2u;
    }
    const Smem one = smem_layout(p, w, 1);
    const size_t work = one.total - one.stage_bytes;
    /* The most CTAs per SM (registers allow 4) that keep at least one stage,
     * then as many stages as fit, at most 4. */
    uint32_t ctas = 4, s = stages;
    for (; ctas > 1; --ctas)
        if (smem_budget(smem_per_sm, ctas) >= work + (size_t)(s ? s : 1u) * one.stage_bytes)
            break;
    if (!s) {
        const size_t budget = smem_budget(smem_per_sm, ctas);
        s = budget > work ? (uint32_t)((budget - work) / one.stage_bytes) : 1u;
        s = s < 1u ? 1u : (s > 4u ? 4u : s);
    }
    plan->warps = w;
    plan->chunks = (tiles + w - 1u) / w;
    plan->stages = s;
    plan->ctas_per_sm = ctas;
    plan->smem_bytes = smem_layout(p, w, s).total;
    const uint32_t fix = p->head_k == 128u && p->head_v == 128u ? 1u : 0u;
    plan->variant = fix * 9u + state_variant(p) * 3u + p->ring_dtype;
    plan->sm_count = (int)sms;
    plan->allow = allow;
    plan->bulk_stages = 0;
    plan->bulk_tc = 0;
    plan->window_fused_tokens = 0;
    const uint64_t items = heads * plan->chunks;
    const uint64_t grid = sms * ctas;
    plan->grid = (uint32_t)(items < grid ? items : grid);
    /* The stream kernels for replay with rings they take, and for packed
     * decode only while the batch leaves the GPU latency-bound (at most 2
     * (row, head) pairs per SM): once it fills the GPU, the packed stream
     * kernel measured slower than this one on the H200 (61-71% against
     * 73-80% of copy bandwidth, fp32, batch >= 64), faster at batch 1
     * (5.4 against 5.8 us; bench/results/h200/notes.md). The fields above
     * stay valid, so the plan can be switched either way. */
    plan->kernel = RSSM_CUDA_KERNEL_PIPELINE;
    plan->rows_per_lane = 0;
    if (rssm_cuda_stream_supported(p) && (p->ring_cap != 0 || heads <= 2u * sms))
        rssm_cuda_stream_plan(plan, p);
    /* The bulk kernel runs one CTA per SM over (row, value head) units:
     * once there is a unit for every SM, where the device's code has it. */
    if ((allow & RSSM_CUDA_ALLOW_BULK) != 0u && rssm_cuda_bulk_supported(p) && heads >= sms)
        plan->kernel = RSSM_CUDA_KERNEL_BULK;
}

extern "C" cudaError_t rssm_cuda_plan_prepare(rssm_cuda_plan *plan, const rssm_kernel_params *p)
{
    if (plan->kernel == RSSM_CUDA_KERNEL_STREAM)
        return rssm_cuda_stream_prepare(plan, p);
    if (plan->kernel == RSSM_CUDA_KERNEL_BULK)
        return rssm_cuda_bulk_prepare(plan, p);
    const KernelFn fn = kernel_of(plan->variant);
    cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void *>(fn),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)plan->smem_bytes);
    if (e != cudaSuccess)
        return e;
    int occ = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, (int)(32u * plan->warps), plan->smem_bytes);
    if (e != cudaSuccess)
        return e;
    if (occ < 1)
        return cudaErrorInvalidConfiguration;
    const uint64_t items = (uint64_t)p->max_rows * p->num_v_heads * plan->chunks;
    const uint64_t grid = (uint64_t)plan->sm_count * (uint32_t)occ;
    plan->ctas_per_sm = (uint32_t)occ;
    plan->grid = (uint32_t)(items < grid ? items : grid);
    return cudaSuccess;
}

extern "C" cudaError_t rssm_cuda_pipeline_attributes(cudaFuncAttributes *a)
{
    return cudaFuncGetAttributes(a, reinterpret_cast<const void *>(kernel_of(0)));
}

extern "C" cudaError_t rssm_cuda_launch_layer(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                              const rssm_cuda_plan *plan, cudaStream_t stream)
{
    if (plan->kernel == RSSM_CUDA_KERNEL_STREAM)
        return rssm_cuda_stream_launch(p, b, plan, stream);
    if (plan->kernel == RSSM_CUDA_KERNEL_BULK)
        return rssm_cuda_bulk_launch(p, b, plan, stream);
    KArgs args;
    args.p = *p;
    args.b = *b;
    args.sm = smem_layout(p, plan->warps, plan->stages);
    args.chunks = plan->chunks;
    const KernelFn fn = kernel_of(plan->variant);
    return launch_dependent(fn, dim3(plan->grid), dim3(32u * plan->warps), stream, args, plan_pdl(plan),
                            plan->smem_bytes);
}
