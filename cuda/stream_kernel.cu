/*
 * The stream kernels: the decode step as a pure stream of checkpoint tiles
 * through registers, for the packed decode and for the ReplaySSM decode with
 * short rings (ring_cap <= 16, i.e. L <= 17). Since the bulk kernel
 * (bulk_kernel.cu) they run the small batches (fewer (row, value head)
 * units than SMs, where one-shot warps spread a step over every SM) and the
 * head shapes the bulk kernel does not take.
 *
 * Why: the pipeline kernel (decode_kernel.cu) stages every item through
 * shared memory and CTA barriers and computes the ring coefficients (one exp
 * per entry and channel, 2n dot products) inside each item, on the critical
 * path of the stream; on the H200 that held the packed decode at 76-80% of
 * copy bandwidth and made a full-ring step ~1.45x an empty one
 * (bench/results/h200_notes.md). Here:
 *
 *  - each warp owns 8 * RPL value rows of one (batch row, value head), loads
 *    its whole tile into registers with independent 16-byte loads (all in
 *    flight at once), computes and, on a flush, writes the tile back: no
 *    staging of the state, no barrier beyond __syncwarp, one item per warp;
 *    latency is hidden by many resident warps, not by a software pipeline;
 *  - with a ring, the per-(row, head) coefficients are computed once, before
 *    the stream, by a small prologue kernel (one CTA per (row, value head),
 *    thread = channel): gamma_j, Gamma, alpha Gamma x, c_j(q), c_j(k) and, on
 *    a flush, kg_j = k_j gamma_j alpha, into a global scratch buffer. The
 *    stream kernel is launched as a programmatic dependent of the prologue:
 *    it issues its checkpoint and ring loads first and waits for the
 *    prologue's results only then, so the prologue hides behind the loads.
 *    A non-flush step is then C (alpha Gamma x) plus n-term sums over d_j;
 *    a flush adds the rank-(n+1) update by FFMA (fp32 throughout, exact
 *    enough for every ring dtype) as the tile streams out.
 *
 * Lane layout: a warp's tile as warp_tile.cuh holds it (as in the pipeline
 * kernel, so a row's dot products need two shuffles). Ring entries j of a
 * row are split over its 4 lanes (j = t4 mod 4).
 *
 * Packed models (replay off, or L = 1) can use the stream kernel without
 * ring and without prologue: each warp computes the per-channel vectors
 * itself (a few hundred instructions against 4-8 KiB of state). The plan
 * picks it only at small batches: it is the faster packed kernel while the
 * step is latency-bound (batch 1: 5.4 against 5.8 us), the slower one once
 * the batch fills the GPU (61-71% against 73-80% of copy bandwidth, fp32,
 * batch >= 64).
 * L = 1 replay is planned exactly like packed, so it stays bit-identical.
 *
 * Measured on the H200 (bench/results/h200_notes.md): against the pipeline
 * kernel, the replay cycle is 2-20% faster at batch >= 64 and the full-ring
 * step costs 1.11-1.29x an empty one (was 1.38-1.68x); the flush step is
 * still ~1.6x a packed step (bf16 state: 1.8-1.9x), and the one-shot warps
 * stream a read-only step at ~2.9 TB/s: those two are what limits it now.
 */
#include "rssm_cuda.h"

#include <cuda_runtime.h>

#include "kernel_common.cuh"
#include "warp_tile.cuh"

namespace {

using namespace rssm_kc;

constexpr int kWarps = (int)RSSM_CUDA_STREAM_WARPS;
constexpr int kMaxK = (int)RSSM_CUDA_MAX_HEAD_K;
constexpr int kJ = (int)RSSM_CUDA_STREAM_MAX_RING; /* ring entries, at most */

/* The scratch record of one (batch row, value head), in floats: the vectors
 * over K (padded to kMaxK), the ring coefficients over j (padded to kJ),
 * beta and k.q, then kg_j [kJ][kMaxK] (written on a flush only). */
constexpr int kScQW = 0, kScKW = kMaxK, kScAG = 2 * kMaxK, kScKV = 3 * kMaxK;
constexpr int kScCQ = 4 * kMaxK, kScCK = kScCQ + kJ, kScMisc = kScCK + kJ;
constexpr int kScKG = kScMisc + 16, kScStride = kScKG + kJ * kMaxK;
static_assert(kScStride % 4 == 0 && kScKG % 4 == 0, "16-byte aligned vectors");

struct SArgs {
    rssm_kernel_params p;
    rssm_cuda_buffers b;
    uint32_t chunks; /* items (warps) per (batch row, value head) */
};


/* ------------------------------------------------- the stream kernel */

/* ST: state dtype; CPT: channels per state vector; RT: ring dtype (unused
 * when !RING); RPL: rows per lane; RING: the model has a ring (and the
 * prologue has filled the scratch record of every row).
 * Occupancy: 4 CTAs (16 warps) per SM with 64 registers of state per lane
 * (RPL = 2 fp32, RPL = 4 bf16 packed), 6-8 CTAs with one row per lane packed; the
 * register caps are the largest that compile without spills. */
template <int ST, int CPT, int RT, int RPL, bool RING>
__global__ void __launch_bounds__(32 * kWarps, RPL > 1 || RING ? 4 : ST == kF32 ? 6 : 8) stream_kernel(const SArgs a)
{
    using SV = StateVec<ST, CPT>;
    using SVec = typename SV::T;
    using SRaw = typename Raw<ST>::T;
    using RRaw = typename Raw<RT>::T;
    constexpr int NG = kMaxK / (4 * CPT); /* channel groups, at most */
    constexpr int JL = RING ? kJ / 4 : 1;  /* ring entries per lane and row */
    /* per warp: alpha Gamma q, alpha Gamma k, alpha Gamma, k; c_j(q), c_j(k);
     * on a flush d_j of the warp's rows */
    __shared__ __align__(16) float vec[kWarps][4][kMaxK];
    __shared__ float cqk[kWarps][2][RING ? kJ : 1];
    __shared__ float dsm[kWarps][RING ? kJ : 1][8 * RPL];
    /* on a flush the row's kg_j, copied in while the dot products run: the
     * update then reads shared memory instead of a chain of L2 round trips
     * (2.3-2.8x a packed step when it read the scratch record directly) */
    __shared__ __align__(16) float kgw[RING ? kWarps : 1][RING ? kJ : 1][RING ? kMaxK : 4];

    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, V = p.head_v, HV = p.num_v_heads;
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u, g = lane >> 2, t4 = lane & 3u;
    const rssm_layer_io &L = a.b.io;
    const uint32_t item = blockIdx.x * (uint32_t)kWarps + warp;
    const uint32_t per_row = HV * a.chunks;
    const uint32_t r = item / per_row, rem = item % per_row, hv = rem / a.chunks, chunk = rem % a.chunks;
    /* Both header loads are issued before either is used: the row's load
     * must not wait for the row count. */
    const uint32_t rows = launch_rows(p, L);
    uint4 hr = make_uint4(0, 0, 0, 0);
    if (row_loadable(p, L, r))
        hr = row_words(L, r);
    if (r >= rows)
        return;
    const RowStep row = row_decode(p, L, hr);
    const uint32_t slot = row.slot, n = RING ? row.n : 0u, io = row.io;
    const bool flush = !RING || row.flush;
    const bool io_bf16 = p.io_dtype == RSSM_CODE_DTYPE_BF16;
    void *out_row = L.out + io * L.out_row;
    const uint32_t v_base = chunk * 8u * (uint32_t)RPL + g;
    if (row.pad) {
#pragma unroll
        for (int i = 0; i < RPL; ++i)
            if (t4 == (uint32_t)(i & 3) && v_base + 8u * i < V)
                store_io(out_row, (size_t)hv * V + v_base + 8u * i, io_bf16, 0.0f);
        return;
    }

    /* 1. The tile's loads, and the row's ring entries, all issued before
     * anything waits on them. */
    SRaw *C = reinterpret_cast<SRaw *>(at_slot(L.ckpt, L.ckpt_slot, L.ckpt_head, slot, hv));
    WarpTile<ST, CPT, RPL> tile;
    tile.load(C, v_base, t4, K, V, true);
    RRaw *ring_d = reinterpret_cast<RRaw *>(at_slot(L.ring_d, L.ring_d_slot, L.ring_d_head, slot, hv));
    RRaw dj[RPL][JL];
#pragma unroll
    for (int i = 0; i < RPL; ++i)
#pragma unroll
        for (int jj = 0; jj < JL; ++jj) {
            const uint32_t j = t4 + 4u * jj, v = v_base + 8u * i;
            dj[i][jj] = RING && j < n && v < V ? ring_d[(size_t)j * V + v] : RRaw{};
        }
    const void *v_row = L.v + io * L.v_row;
    const size_t v_at = (size_t)hv * V;
    uint32_t vin[RPL]; /* converted where used, so the load does not wait here (load_io_bits) */
#pragma unroll
    for (int i = 0; i < RPL; ++i) {
        const uint32_t v = v_base + 8u * i;
        vin[i] = load_io_bits(v_row, v_at + v, io_bf16, v < V);
    }

    /* 2. The per-channel vectors: from the prologue's record, or computed
     * here (packed). */
    float kq, beta;
    const float *sc = a.b.scratch + (size_t)(r * HV + hv) * kScStride;
    if constexpr (RING) {
        pdl_wait(); /* the prologue's records are complete and visible */
        if (flush) {
            for (uint32_t j = 0; j < n; ++j)
                if (4u * lane < K)
                    cp_async16(&kgw[warp][j % kJ][4 * lane], sc + kScKG + j * kMaxK + 4 * lane);
            cp_commit();
        }
        if (4u * lane < K) {
#pragma unroll
            for (int w = 0; w < 4; ++w)
                *reinterpret_cast<float4 *>(&vec[warp][w][4 * lane]) =
                    *reinterpret_cast<const float4 *>(sc + w * kMaxK + 4 * lane);
        }
        if (lane < (uint32_t)kJ) {
            cqk[warp][0][lane % kJ] = sc[kScCQ + lane % kJ];
            cqk[warp][1][lane % kJ] = sc[kScCK + lane % kJ];
        }
        beta = sc[kScMisc];
        kq = sc[kScMisc + 1];
    } else {
        float qx[4], kx[4], gx[4], al[4];
        const RowIn in = channel_inputs<4, 1>(a, io, hv, lane, 32u, qx, kx, gx, al, nullptr);
        kq = in.kq;
        beta = in.beta;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t c = lane + 32u * i;
            if (c < K) {
                vec[warp][0][c] = al[i] * qx[i];
                vec[warp][1][c] = al[i] * kx[i];
                vec[warp][2][c] = al[i];
                vec[warp][3][c] = kx[i];
            }
        }
    }
    __syncwarp();

    /* 3. Sbar q, Sbar k per row: the lane's channels and ring entries, then
     * the 4 lanes of the row. */
    float pq[RPL], pk[RPL];
#pragma unroll
    for (int i = 0; i < RPL; ++i)
        pq[i] = pk[i] = 0.0f;
    tile.dots(vec[warp][0], vec[warp][1], t4, K, pq, pk);
    if constexpr (RING) {
#pragma unroll
        for (int jj = 0; jj < JL; ++jj) {
            const uint32_t j = t4 + 4u * jj;
            if (j >= n)
                break;
            const float cq = cqk[warp][0][j % kJ], ck = cqk[warp][1][j % kJ];
#pragma unroll
            for (int i = 0; i < RPL; ++i) {
                const float dv = to_f<RT>(dj[i][jj]);
                pq[i] += dv * cq;
                pk[i] += dv * ck;
            }
        }
    }
#pragma unroll
    for (int o = 1; o < 4; o <<= 1)
#pragma unroll
        for (int i = 0; i < RPL; ++i) {
            pq[i] += __shfl_xor_sync(0xffffffffu, pq[i], o);
            pk[i] += __shfl_xor_sync(0xffffffffu, pk[i], o);
        }

    /* 4. d and o per row; each of a row's 4 lanes writes a different row, so
     * the stores spread over the lanes. Not a flush: append d, done. */
    float d[RPL];
#pragma unroll
    for (int i = 0; i < RPL; ++i) {
        const uint32_t v = v_base + 8u * i;
        d[i] = beta * (io_value(vin[i], io_bf16) - pk[i]);
        if (t4 == (uint32_t)(i & 3) && v < V) {
            store_io(out_row, v_at + v, io_bf16, pq[i] + d[i] * kq);
            if (RING && !flush)
                ring_d[(size_t)n * V + v] = to_ring<RT>(d[i], L.overflow, r);
        }
    }
    if (!flush)
        return;
    if constexpr (RING) {
#pragma unroll
        for (int i = 0; i < RPL; ++i)
#pragma unroll
            for (int jj = 0; jj < JL; ++jj) {
                const uint32_t j = t4 + 4u * jj;
                if (j < n)
                    dsm[warp][j % kJ][g + 8 * i] = to_f<RT>(dj[i][jj]);
            }
        cp_wait(0);
        __syncwarp();
    }

    /* 5. C' = C alpha Gamma + d k^T + sum_j d_j kg_j^T, rounded to the state
     * dtype, streamed out. */
#pragma unroll
    for (int G = 0; G < NG; ++G) {
        const uint32_t c0 = (uint32_t)G * 4u * CPT + t4 * CPT;
        if (c0 >= K)
            continue;
        float f[RPL][CPT];
#pragma unroll
        for (int e = 0; e < CPT; e += 4) {
            const float4 a4 = *reinterpret_cast<const float4 *>(&vec[warp][2][c0 + e]);
            const float4 k4 = *reinterpret_cast<const float4 *>(&vec[warp][3][c0 + e]);
            const float ag[4] = {a4.x, a4.y, a4.z, a4.w}, kk[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
            for (int i = 0; i < RPL; ++i) {
                float u[CPT];
                SV::unpack(tile.x[i][G], u);
#pragma unroll
                for (int m = 0; m < 4; ++m)
                    f[i][e + m] = u[e + m] * ag[m] + d[i] * kk[m];
            }
        }
        if constexpr (RING) {
            /* unrolled by 4, not fully: full unrolling spills at RPL = 1 */
#pragma unroll 4
            for (uint32_t j = 0; j < n; ++j) {
                float dv[RPL];
#pragma unroll
                for (int i = 0; i < RPL; ++i)
                    dv[i] = dsm[warp][j % kJ][g + 8 * i];
#pragma unroll
                for (int e = 0; e < CPT; e += 4) {
                    const float4 k4 = *reinterpret_cast<const float4 *>(&kgw[warp][j % kJ][c0 + e]);
#pragma unroll
                    for (int i = 0; i < RPL; ++i) {
                        f[i][e] += dv[i] * k4.x;
                        f[i][e + 1] += dv[i] * k4.y;
                        f[i][e + 2] += dv[i] * k4.z;
                        f[i][e + 3] += dv[i] * k4.w;
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < RPL; ++i) {
            const uint32_t v = v_base + 8u * i;
            if (v < V)
                __stcs(reinterpret_cast<SVec *>(C + (size_t)v * K + c0), SV::pack(f[i]));
        }
    }
}

/* ------------------------------------------------------ the prologue */

/* One CTA of kMaxK threads per (batch row, value head), thread = channel:
 * the row's scratch record (see kScQW ...), and the append of k and g to the
 * ring when the step is not a flush. The ring walk is unrolled over kJ
 * entries so that all of the row's ring loads are in flight at once. */
template <int RT>
__global__ void __launch_bounds__(kMaxK) prologue_kernel(const SArgs a)
{
    using RRaw = typename Raw<RT>::T;
    __shared__ float red[3 * (kMaxK / 32)];
    __shared__ __align__(16) float kgs[kJ][kMaxK];
    __shared__ __align__(16) float qs[kMaxK], ks[kMaxK];

    /* The stream kernel may start now: it has its own loads to issue. */
    pdl_launch_dependents();
    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, H = p.num_qk_heads, HV = p.num_v_heads;
    const uint32_t r = blockIdx.x / HV, hv = blockIdx.x % HV, h = hv / (HV / H);
    const rssm_layer_io &L = a.b.io;
    /* the row's load issued with the row count's, as in the stream kernel */
    const uint32_t rows = launch_rows(p, L);
    uint4 hr = make_uint4(0, 0, 0, 0);
    if (row_loadable(p, L, r))
        hr = row_words(L, r);
    if (r >= rows)
        return; /* the whole CTA */
    const RowStep row = row_decode(p, L, hr);
    if (row.pad)
        return; /* the stream kernel zeroes its output */
    const uint32_t slot = row.slot, n = row.n, io = row.io;
    const bool flush = row.flush;
    const bool kda = p.gate_kind == RSSM_CODE_GATE_KDA;
    const uint32_t Kg = kda ? K : 1u, c = threadIdx.x;
    RRaw *ring_k = reinterpret_cast<RRaw *>(at_slot(L.ring_k, L.ring_k_slot, L.ring_k_head, slot, h));
    float *ring_g = reinterpret_cast<float *>(at_slot(L.ring_g, L.ring_g_slot, L.ring_g_head, slot, hv));

    RRaw kj[kJ];
    float gj[kJ];
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
        const bool in = (uint32_t)j < n && c < K;
        kj[j] = in ? ring_k[(size_t)j * K + c] : RRaw{};
        gj[j] = in ? ring_g[(size_t)j * Kg + (kda ? c : 0u)] : 0.0f;
    }
    float q, k, gv, alpha;
    const RowIn in = channel_inputs<1, kMaxK / 32>(a, io, hv, c, 0u, &q, &k, &gv, &alpha, red);

    /* gamma_j = exp(sum of g_i, i > j), newest to oldest, in fp32. */
    float *sc = a.b.scratch + (size_t)(r * HV + hv) * kScStride;
    float s = 0.0f;
#pragma unroll
    for (int j = kJ - 1; j >= 0; --j) {
        if ((uint32_t)j >= n)
            continue;
        const float kg = to_f<RT>(kj[j]) * (expf(s) * alpha);
        s += gj[j];
        kgs[j][c] = kg;
        if (flush)
            sc[kScKG + j * kMaxK + c] = kg;
    }
    const float ag = alpha * expf(s);
    if (c < K) {
        sc[kScQW + c] = ag * q;
        sc[kScKW + c] = ag * k;
        sc[kScAG + c] = ag;
        sc[kScKV + c] = k;
        if (!flush) {
            if (hv % (HV / H) == 0)
                ring_k[(size_t)n * K + c] = to_ring<RT>(k, L.overflow, r);
            if (kda || c == 0)
                ring_g[(size_t)n * Kg + (kda ? c : 0u)] = gv;
        }
    }
    qs[c] = c < K ? q : 0.0f;
    ks[c] = c < K ? k : 0.0f;
    if (c == 0) {
        sc[kScMisc] = in.beta;
        sc[kScMisc + 1] = in.kq;
    }
    __syncthreads();

    /* c_j(q), c_j(k): one warp per entry, lanes over K. */
    const uint32_t warp = c >> 5, lane = c & 31u;
    for (uint32_t j = warp; j < n; j += kMaxK / 32) {
        float dq = 0.0f, dk = 0.0f;
        const uint32_t c4 = 4u * lane;
        if (c4 < K) {
            const float4 kg = *reinterpret_cast<const float4 *>(&kgs[j][c4]);
            const float4 q4 = *reinterpret_cast<const float4 *>(&qs[c4]);
            const float4 k4 = *reinterpret_cast<const float4 *>(&ks[c4]);
            dq = kg.x * q4.x + kg.y * q4.y + kg.z * q4.z + kg.w * q4.w;
            dk = kg.x * k4.x + kg.y * k4.y + kg.z * k4.z + kg.w * k4.w;
        }
        dq = warp_sum(dq);
        dk = warp_sum(dk);
        if (lane == 0) {
            sc[kScCQ + j] = dq;
            sc[kScCK + j] = dk;
        }
    }
}

/* ------------------------------------------------------------ variants */

using StreamFn = void (*)(const SArgs);

/* State variants: fp32 (4 channels = 16 B), bf16 with K % 8 == 0 (8
 * channels = 16 B), bf16 otherwise (4 channels = 8 B). Rows per lane 1, 2,
 * 4; every variant keeps at most 64 registers of state per lane, so fp32
 * stops at 2, and so does the ring variant (the flush's accumulators spill
 * at 4 rows of bf16). */
#define RSSM_STREAM_RPL(ST, CPT, RT, RING)                                                      \
    {stream_kernel<ST, CPT, RT, 1, RING>, stream_kernel<ST, CPT, RT, 2, RING>,                  \
     ST == kF32 || RING ? nullptr : stream_kernel<ST, CPT, RT, ST == kF32 || RING ? 2 : 4, RING>}
#define RSSM_STREAM_STATES(RT, RING)                                                            \
    {RSSM_STREAM_RPL(kF32, 4, RT, RING), RSSM_STREAM_RPL(kBF16, 8, RT, RING),                   \
     RSSM_STREAM_RPL(kBF16, 4, RT, RING)}

/* [ring dtype, or 3 for no ring][state variant][rows per lane 1, 2, 4] */
const StreamFn kStream[4][3][3] = {
    RSSM_STREAM_STATES(kF32, true),
    RSSM_STREAM_STATES(kF16, true),
    RSSM_STREAM_STATES(kBF16, true),
    RSSM_STREAM_STATES(kF32, false),
};
#undef RSSM_STREAM_RPL
#undef RSSM_STREAM_STATES

const StreamFn kPrologue[3] = {prologue_kernel<kF32>, prologue_kernel<kF16>, prologue_kernel<kBF16>};

uint32_t state_variant(const rssm_kernel_params *p)
{
    if (p->state_dtype == RSSM_CODE_DTYPE_F32)
        return 0;
    return p->head_k % 8u == 0 ? 1u : 2u;
}

uint32_t max_rpl(const rssm_kernel_params *p)
{
    return p->state_dtype == RSSM_CODE_DTYPE_F32 || p->ring_cap != 0 ? 2u : 4u;
}

uint32_t rpl_index(uint32_t rpl) { return rpl == 4u ? 2u : rpl == 2u ? 1u : 0u; }

uint32_t stream_chunks(const rssm_kernel_params *p, uint32_t rpl)
{
    return (p->head_v + 8u * rpl - 1u) / (8u * rpl);
}

uint32_t stream_grid(const rssm_kernel_params *p, uint32_t rpl)
{
    const uint64_t warps = (uint64_t)p->max_rows * p->num_v_heads * stream_chunks(p, rpl);
    return (uint32_t)((warps + RSSM_CUDA_STREAM_WARPS - 1u) / RSSM_CUDA_STREAM_WARPS);
}

} /* namespace */

extern "C" int rssm_cuda_stream_supported(const rssm_kernel_params *p)
{
    return p->head_k <= RSSM_CUDA_MAX_HEAD_K && p->ring_cap <= RSSM_CUDA_STREAM_MAX_RING;
}

extern "C" size_t rssm_cuda_scratch_bytes(const rssm_kernel_params *p, const rssm_cuda_plan *plan)
{
    if (plan->kernel != RSSM_CUDA_KERNEL_STREAM || p->ring_cap == 0)
        return 0;
    return (size_t)p->max_rows * p->num_v_heads * kScStride * sizeof(float);
}

extern "C" void rssm_cuda_stream_plan(rssm_cuda_plan *plan, const rssm_kernel_params *p)
{
    /* The most rows per lane (fewest per-channel computations per byte) that
     * still gives every SM 4 CTAs' worth of warps; batch 1 gets one row per
     * lane, the most warps for a latency-bound step. */
    const uint64_t sms = (uint64_t)(plan->sm_count > 0 ? plan->sm_count : 1);
    const uint64_t want = 4u * RSSM_CUDA_STREAM_WARPS * sms;
    uint32_t rpl = max_rpl(p);
    while (rpl > 1u && (uint64_t)p->max_rows * p->num_v_heads * stream_chunks(p, rpl) < want)
        rpl /= 2u;
    plan->kernel = RSSM_CUDA_KERNEL_STREAM;
    plan->rows_per_lane = rpl;
    plan->grid = stream_grid(p, rpl);
}

extern "C" cudaError_t rssm_cuda_stream_prepare(rssm_cuda_plan *plan, const rssm_kernel_params *p)
{
    if (!rssm_cuda_stream_supported(p))
        return cudaErrorInvalidValue;
    if (plan->rows_per_lane == 0)
        rssm_cuda_stream_plan(plan, p);
    if (plan->rows_per_lane > max_rpl(p))
        plan->rows_per_lane = max_rpl(p);
    plan->kernel = RSSM_CUDA_KERNEL_STREAM;
    plan->grid = stream_grid(p, plan->rows_per_lane);
    return cudaSuccess;
}

extern "C" cudaError_t rssm_cuda_stream_launch(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                               const rssm_cuda_plan *plan, cudaStream_t stream)
{
    const bool ring = p->ring_cap != 0;
    const StreamFn fn = kStream[ring ? p->ring_dtype : 3u][state_variant(p)][rpl_index(plan->rows_per_lane)];
    if (!fn || plan->grid == 0 || (ring && !b->scratch))
        return cudaErrorInvalidConfiguration;
    SArgs a;
    a.p = *p;
    a.b = *b;
    a.chunks = stream_chunks(p, plan->rows_per_lane);
    const dim3 block(32u * RSSM_CUDA_STREAM_WARPS);
    if (!ring) {
        fn<<<plan->grid, block, 0, stream>>>(a);
        return cudaGetLastError();
    }
    /* The prologue waits for everything before it (the previous layer's
     * stream kernel reads the same scratch); the stream kernel depends on
     * the prologue programmatically (it may start once every prologue CTA
     * has started, and waits for its completion at pdl_wait). */
    kPrologue[p->ring_dtype]<<<p->max_rows * p->num_v_heads, RSSM_CUDA_MAX_HEAD_K, 0, stream>>>(a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    return launch_dependent(fn, dim3(plan->grid), block, stream, a);
}
