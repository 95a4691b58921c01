/*
 * The stream kernels: the decode step as a pure stream of checkpoint tiles
 * through registers, for the packed decode and for the ReplaySSM decode with
 * short rings (ring_cap <= 16, i.e. L <= 17). Since the bulk kernel
 * (bulk_kernel.cu) they run the small batches (fewer (row, value head)
 * units than SMs, where one-shot CTAs spread a step over every SM) and the
 * head shapes the bulk kernel does not take.
 *
 * Why: the pipeline kernel (decode_kernel.cu) stages every item through
 * shared memory and CTA barriers and computes the ring coefficients inside
 * each item, on the critical path of the stream (bench/results/h200/notes.md, History:
 * the earlier CUDA passes).
 * Here each warp owns 8 * RPL value rows of one (batch row, value head),
 * loads its whole tile into registers with independent 16-byte loads (all
 * in flight at once), computes and, on a flush, writes the tile back from
 * registers; latency is hidden by many resident warps, not by a software
 * pipeline. Lane layout: a warp's tile as warp_tile.cuh holds it, so a
 * row's dot products need two shuffles; ring entries j of a row are split
 * over its 4 lanes (j = t4 mod 4).
 *
 *  - The packed decode (replay off, or L = 1, which is planned like packed
 *    and so stays bit-identical to it): stream_kernel, each warp computing
 *    its (row, head)'s per-channel vectors itself (a few hundred
 *    instructions against 4-8 KiB of state). The plan picks it only at
 *    small batches: it is the faster packed kernel while the step is
 *    latency-bound, the slower one once the batch fills the GPU.
 *  - The replay decode: replay_kernel, one launch per layer. A CTA of 4
 *    warps takes 32 RPL rows of one (row, value head), issues its tile's,
 *    the ring's and the inputs' loads together, computes the head's
 *    coefficients itself (gamma_j, alpha Gamma x, c_j(q), c_j(k) and kg_j,
 *    thread = key channel, in shared memory), then each warp reads out its
 *    rows: C (alpha Gamma x) plus n-term sums over d_j, and on a flush the
 *    rank-(n+1) update by FFMA (fp32 throughout) as the tile streams out.
 *    A head split over several CTAs computes its coefficients in each.
 *    This replaced a coefficient prologue kernel launched before a stream
 *    kernel (a programmatic dependent of it, its records through L2): on
 *    the H200 at batch 1 the one launch took 4.1-4.7 us for an empty-ring
 *    step where the pair took 4.6-5.5, 8.3-9.7 for a flush against
 *    10.5-11.2 (bench/results/h200/notes.md, CUDA).
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

struct SArgs {
    rssm_kernel_params p;
    rssm_cuda_buffers b;
    uint32_t chunks; /* items (warps) per (batch row, value head) */
};

/* The flush of a warp's tile (rows v_base + 8 i): C' = C alpha Gamma + d k^T
 * + sum_{j < n} d_j kg_j^T, rounded to the state dtype and streamed out from
 * registers. agv and kv are alpha Gamma and k over K, kg the entries' kg_j
 * rows, dsm the rows' ring d_j ([j][8 RPL]); all in shared memory. */
template <int ST, int CPT, int RPL, bool RING, int KGC, int DJ>
__device__ __forceinline__ void flush_tile(const WarpTile<ST, CPT, RPL> &tile, const float *agv, const float *kv,
                                           const float (*kg)[KGC], const float (*dsm)[DJ], const float (&d)[RPL],
                                           uint32_t n, uint32_t g, uint32_t t4, uint32_t K, uint32_t V,
                                           uint32_t v_base, typename Raw<ST>::T *C)
{
    using SV = StateVec<ST, CPT>;
    using SVec = typename SV::T;
    constexpr int NG = kMaxK / (4 * CPT);
#pragma unroll
    for (int G = 0; G < NG; ++G) {
        const uint32_t c0 = (uint32_t)G * 4u * CPT + t4 * CPT;
        if (c0 >= K)
            continue;
        float f[RPL][CPT];
#pragma unroll
        for (int e = 0; e < CPT; e += 4) {
            const float4 a4 = *reinterpret_cast<const float4 *>(&agv[c0 + e]);
            const float4 k4 = *reinterpret_cast<const float4 *>(&kv[c0 + e]);
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
                    dv[i] = dsm[j % kJ][g + 8 * i];
#pragma unroll
                for (int e = 0; e < CPT; e += 4) {
                    const float4 k4 = *reinterpret_cast<const float4 *>(&kg[j % kJ][c0 + e]);
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

/* ------------------------------------------------- the stream kernel */

/* The packed decode. ST: state dtype; CPT: channels per state vector; RPL:
 * rows per lane. Occupancy: 4 CTAs (16 warps) per SM with 64 registers of
 * state per lane (RPL = 2 fp32, RPL = 4 bf16), 6-8 CTAs with one row per
 * lane; the register caps are the largest that compile without spills. */
template <int ST, int CPT, int RPL>
__global__ void __launch_bounds__(32 * kWarps, RPL > 1 ? 4 : ST == kF32 ? 6 : 8) stream_kernel(const SArgs a)
{
    using SRaw = typename Raw<ST>::T;
    /* per warp: alpha q, alpha k, alpha, k */
    __shared__ __align__(16) float vec[kWarps][4][kMaxK];

    pdl_step_start();
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
    const uint32_t slot = row.slot, io = row.io;
    const Dtype iot = io_dtype(p);
    void *out_row = L.out + io * L.out_row;
    const uint32_t v_base = chunk * 8u * (uint32_t)RPL + g;
    if (row.pad) {
#pragma unroll
        for (int i = 0; i < RPL; ++i)
            if (t4 == (uint32_t)(i & 3) && v_base + 8u * i < V)
                store_io(out_row, (size_t)hv * V + v_base + 8u * i, iot, 0.0f);
        return;
    }

    /* 1. The tile's loads, all issued before anything waits on them. */
    SRaw *C = reinterpret_cast<SRaw *>(at_slot(L.ckpt, L.ckpt_slot, L.ckpt_head, slot, hv));
    WarpTile<ST, CPT, RPL> tile;
    tile.load(C, v_base, t4, K, V, true);
    const void *v_row = L.v + io * L.v_row;
    const size_t v_at = (size_t)hv * V;
    uint32_t vin[RPL]; /* converted where used, so the load does not wait here (load_io_bits) */
#pragma unroll
    for (int i = 0; i < RPL; ++i) {
        const uint32_t v = v_base + 8u * i;
        vin[i] = load_io_bits(v_row, v_at + v, iot, v < V);
    }

    /* 2. The per-channel vectors. */
    float qx[4], kx[4], gx[4], al[4];
    const RowIn in = channel_inputs<4, 1>(a, io, hv, lane, 32u, qx, kx, gx, al, nullptr);
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
    __syncwarp();

    /* 3. Sbar q, Sbar k per row: the lane's channels, then the 4 lanes of
     * the row. */
    float pq[RPL], pk[RPL];
#pragma unroll
    for (int i = 0; i < RPL; ++i)
        pq[i] = pk[i] = 0.0f;
    tile.dots(vec[warp][0], vec[warp][1], t4, K, pq, pk);
    tile.row_sums(pq, pk);

    /* 4. d and o per row; each of a row's 4 lanes writes a different row, so
     * the stores spread over the lanes. */
    float d[RPL];
#pragma unroll
    for (int i = 0; i < RPL; ++i) {
        const uint32_t v = v_base + 8u * i;
        d[i] = in.beta * (io_value(vin[i], iot) - pk[i]);
        if (t4 == (uint32_t)(i & 3) && v < V)
            store_io(out_row, v_at + v, iot, pq[i] + d[i] * in.kq);
    }

    /* 5. The new state, streamed out. */
    flush_tile<ST, CPT, RPL, false>(tile, vec[warp][2], vec[warp][3], static_cast<const float(*)[4]>(nullptr),
                                    static_cast<const float(*)[8 * RPL]>(nullptr), d, 0u, g, t4, K, V, v_base, C);
}

/* ------------------------------------------------- the replay kernel */

/* The replay step (docs/design.md §1's factored readout): a CTA of kWarps
 * warps takes kWarps consecutive items (32 RPL value rows) of one (batch
 * row, value head), so one step is the header's round trip, one round of
 * loads and the arithmetic. See the top of this file. */
template <int ST, int CPT, int RT, int RPL>
__global__ void __launch_bounds__(32 * kWarps, 4) replay_kernel(const SArgs a)
{
    using SRaw = typename Raw<ST>::T;
    using RRaw = typename Raw<RT>::T;
    constexpr int JL = kJ / 4; /* ring entries per lane and row */
    static_assert(32 * kWarps == kMaxK, "one thread per key channel in the coefficient phase");
    /* The ring's k_j and g_j as stored ([n][K], [n][Kg]), one asynchronous
     * copy each; kg_j = k_j gamma_j alpha over every channel; alpha Gamma q,
     * alpha Gamma k, alpha Gamma, k; the normalised q and k for the c_j. */
    __shared__ __align__(16) RRaw kraw[kJ * kMaxK];
    __shared__ __align__(16) float graw[kJ * kMaxK];
    __shared__ __align__(16) float kgs[kJ][kMaxK];
    __shared__ __align__(16) float vec[4][kMaxK];
    __shared__ __align__(16) float qks[2][kMaxK];
    __shared__ float cqk[2][kJ];
    __shared__ float red[3 * kWarps];
    __shared__ float dsm[kWarps][kJ][8 * RPL];

    pdl_step_start();
    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, V = p.head_v, H = p.num_qk_heads, HV = p.num_v_heads;
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u, g = lane >> 2, t4 = lane & 3u;
    const rssm_layer_io &L = a.b.io;
    const uint32_t groups = (a.chunks + kWarps - 1u) / kWarps;
    const uint32_t unit = blockIdx.x / groups, cg = blockIdx.x % groups;
    const uint32_t r = unit / HV, hv = unit % HV, h = hv / (HV / H);
    const uint32_t chunk = cg * (uint32_t)kWarps + warp;
    const bool rows_here = chunk < a.chunks;
    const uint32_t rows = launch_rows(p, L);
    uint4 hr = make_uint4(0, 0, 0, 0);
    if (row_loadable(p, L, r))
        hr = row_words(L, r);
    if (r >= rows)
        return; /* the whole CTA */
    const RowStep row = row_decode(p, L, hr);
    const uint32_t slot = row.slot, n = row.n, io = row.io;
    const bool flush = row.flush;
    const Dtype iot = io_dtype(p);
    const bool kda = p.gate_kind == RSSM_CODE_GATE_KDA;
    const uint32_t Kg = kda ? K : 1u;
    void *out_row = L.out + io * L.out_row;
    const uint32_t v_base = chunk * 8u * (uint32_t)RPL + g;
    if (row.pad) {
#pragma unroll
        for (int i = 0; i < RPL; ++i)
            if (rows_here && t4 == (uint32_t)(i & 3) && v_base + 8u * i < V)
                store_io(out_row, (size_t)hv * V + v_base + 8u * i, iot, 0.0f);
        return;
    }

    /* 1. Every load of the step issued before anything waits: the tile,
     * the rows' ring d and v into registers, the ring's k and g into shared
     * memory, then the inputs (channel_inputs issues them all before its
     * sums). */
    SRaw *C = reinterpret_cast<SRaw *>(at_slot(L.ckpt, L.ckpt_slot, L.ckpt_head, slot, hv));
    WarpTile<ST, CPT, RPL> tile;
    tile.load(C, v_base, t4, K, V, rows_here);
    RRaw *ring_d = reinterpret_cast<RRaw *>(at_slot(L.ring_d, L.ring_d_slot, L.ring_d_head, slot, hv));
    RRaw *ring_k = reinterpret_cast<RRaw *>(at_slot(L.ring_k, L.ring_k_slot, L.ring_k_head, slot, h));
    float *ring_g = reinterpret_cast<float *>(at_slot(L.ring_g, L.ring_g_slot, L.ring_g_head, slot, hv));
    RRaw dj[RPL][JL];
#pragma unroll
    for (int i = 0; i < RPL; ++i)
#pragma unroll
        for (int jj = 0; jj < JL; ++jj) {
            const uint32_t j = t4 + 4u * jj, v = v_base + 8u * i;
            dj[i][jj] = rows_here && j < n && v < V ? ring_d[(size_t)j * V + v] : RRaw{};
        }
    const void *v_row = L.v + io * L.v_row;
    const size_t v_at = (size_t)hv * V;
    uint32_t vin[RPL];
#pragma unroll
    for (int i = 0; i < RPL; ++i) {
        const uint32_t v = v_base + 8u * i;
        vin[i] = load_io_bits(v_row, v_at + v, iot, rows_here && v < V);
    }
    if (n > 0) {
        copy_async(kraw, ring_k, n * K * (uint32_t)sizeof(RRaw), (int)tid, 32 * kWarps);
        copy_async(graw, ring_g, n * Kg * 4u, (int)tid, 32 * kWarps);
    }
    cp_commit();
    const uint32_t c = tid;
    float q, k, gv, alpha;
    const RowIn in = channel_inputs<1, kWarps>(a, io, hv, c, 0u, &q, &k, &gv, &alpha, red);

    /* 2. The coefficients: gamma_j = exp(sum of g_i, i > j), newest to
     * oldest in fp32; kg_j; alpha Gamma x; then c_j(q), c_j(k), one warp
     * per entry. The ring's copies are waited for
     * only after the inputs' sums: waiting first held the inputs' work
     * behind the tile's loads (0.5 us more per step at batch 1 on the H200,
     * bench/results/h200/notes.md, CUDA). */
    cp_wait(0);
    __syncthreads();
    const bool mine = c < K;
    {
        float s = 0.0f;
        for (uint32_t jn = n; jn > 0; --jn) {
            const uint32_t j = jn - 1u;
            const float kj = mine ? to_f<RT>(kraw[j * K + c]) : 0.0f;
            const float gj = mine ? graw[j * Kg + (kda ? c : 0u)] : 0.0f;
            kgs[j][c] = kj * (expf(s) * alpha);
            s += gj;
        }
        const float ag = alpha * expf(s);
        vec[0][c] = mine ? ag * q : 0.0f;
        vec[1][c] = mine ? ag * k : 0.0f;
        vec[2][c] = mine ? ag : 0.0f;
        vec[3][c] = mine ? k : 0.0f;
        qks[0][c] = mine ? q : 0.0f;
        qks[1][c] = mine ? k : 0.0f;
        /* the step's k and g appended once per unit, by its first CTA */
        if (mine && !flush && cg == 0) {
            if (hv % (HV / H) == 0)
                ring_k[(size_t)n * K + c] = to_ring<RT>(k, L.overflow, r);
            if (kda || c == 0)
                ring_g[(size_t)n * Kg + (kda ? c : 0u)] = gv;
        }
    }
    __syncthreads();
    for (uint32_t j = warp; j < n; j += kWarps) {
        float dq = 0.0f, dk = 0.0f;
        const uint32_t c4 = 4u * lane;
        if (c4 < K) {
            const float4 kg = *reinterpret_cast<const float4 *>(&kgs[j][c4]);
            const float4 q4 = *reinterpret_cast<const float4 *>(&qks[0][c4]);
            const float4 k4 = *reinterpret_cast<const float4 *>(&qks[1][c4]);
            dq = kg.x * q4.x + kg.y * q4.y + kg.z * q4.z + kg.w * q4.w;
            dk = kg.x * k4.x + kg.y * k4.y + kg.z * k4.z + kg.w * k4.w;
        }
        dq = warp_sum(dq);
        dk = warp_sum(dk);
        if (lane == 0) {
            cqk[0][j] = dq;
            cqk[1][j] = dk;
        }
    }
    __syncthreads();
    if (!rows_here)
        return;
    const float kq = in.kq, beta = in.beta;

    /* 3. Sbar q, Sbar k per row: the lane's channels and ring entries, then
     * the 4 lanes of the row; d and o, the append of d. */
    float pq[RPL], pk[RPL];
#pragma unroll
    for (int i = 0; i < RPL; ++i)
        pq[i] = pk[i] = 0.0f;
    tile.dots(vec[0], vec[1], t4, K, pq, pk);
#pragma unroll
    for (int jj = 0; jj < JL; ++jj) {
        const uint32_t j = t4 + 4u * jj;
        if (j >= n)
            break;
        const float cq = cqk[0][j % kJ], ck = cqk[1][j % kJ];
#pragma unroll
        for (int i = 0; i < RPL; ++i) {
            const float dv = to_f<RT>(dj[i][jj]);
            pq[i] += dv * cq;
            pk[i] += dv * ck;
        }
    }
    tile.row_sums(pq, pk);
    float d[RPL];
#pragma unroll
    for (int i = 0; i < RPL; ++i) {
        const uint32_t v = v_base + 8u * i;
        d[i] = beta * (io_value(vin[i], iot) - pk[i]);
        if (t4 == (uint32_t)(i & 3) && v < V) {
            store_io(out_row, v_at + v, iot, pq[i] + d[i] * kq);
            if (!flush)
                ring_d[(size_t)n * V + v] = to_ring<RT>(d[i], L.overflow, r);
        }
    }
    if (!flush)
        return;

    /* 4. The flush, the tile's kg_j already in shared memory. */
#pragma unroll
    for (int i = 0; i < RPL; ++i)
#pragma unroll
        for (int jj = 0; jj < JL; ++jj) {
            const uint32_t j = t4 + 4u * jj;
            if (j < n)
                dsm[warp][j % kJ][g + 8 * i] = to_f<RT>(dj[i][jj]);
        }
    __syncwarp();
    flush_tile<ST, CPT, RPL, true>(tile, vec[2], vec[3], kgs, dsm[warp], d, n, g, t4, K, V, v_base, C);
}

/* ------------------------------------------------------------ variants */

using StreamFn = void (*)(const SArgs);

/* State variants: fp32 (4 channels = 16 B), bf16 with K % 8 == 0 (8
 * channels = 16 B), bf16 otherwise (4 channels = 8 B). Rows per lane 1, 2,
 * 4; every variant keeps at most 64 registers of state per lane, so fp32
 * stops at 2, and so does replay (its flush's accumulators spill at 4 rows
 * of bf16). */
/* [state variant][rows per lane 1, 2, 4] */
const StreamFn kPacked[3][3] = {
    {stream_kernel<kF32, 4, 1>, stream_kernel<kF32, 4, 2>, nullptr},
    {stream_kernel<kBF16, 8, 1>, stream_kernel<kBF16, 8, 2>, stream_kernel<kBF16, 8, 4>},
    {stream_kernel<kBF16, 4, 1>, stream_kernel<kBF16, 4, 2>, stream_kernel<kBF16, 4, 4>},
};

/* [ring dtype][state variant][rows per lane 1, 2] */
#define RSSM_REPLAY_STATES(RT)                                                                  \
    {{replay_kernel<kF32, 4, RT, 1>, replay_kernel<kF32, 4, RT, 2>},                            \
     {replay_kernel<kBF16, 8, RT, 1>, replay_kernel<kBF16, 8, RT, 2>},                          \
     {replay_kernel<kBF16, 4, RT, 1>, replay_kernel<kBF16, 4, RT, 2>}}
const StreamFn kReplay[3][3][2] = {RSSM_REPLAY_STATES(kF32), RSSM_REPLAY_STATES(kF16), RSSM_REPLAY_STATES(kBF16)};
#undef RSSM_REPLAY_STATES

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

/* A replay CTA takes RSSM_CUDA_STREAM_WARPS items of one (row, value
 * head); a packed one any RSSM_CUDA_STREAM_WARPS in a row. */
uint32_t stream_grid(const rssm_kernel_params *p, uint32_t rpl)
{
    const uint64_t units = (uint64_t)p->max_rows * p->num_v_heads, chunks = stream_chunks(p, rpl);
    if (p->ring_cap != 0)
        return (uint32_t)(units * ((chunks + RSSM_CUDA_STREAM_WARPS - 1u) / RSSM_CUDA_STREAM_WARPS));
    return (uint32_t)((units * chunks + RSSM_CUDA_STREAM_WARPS - 1u) / RSSM_CUDA_STREAM_WARPS);
}

} /* namespace */

extern "C" int rssm_cuda_stream_supported(const rssm_kernel_params *p)
{
    return p->head_k <= RSSM_CUDA_MAX_HEAD_K && p->ring_cap <= RSSM_CUDA_STREAM_MAX_RING;
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
    const uint32_t sv = state_variant(p), ri = rpl_index(plan->rows_per_lane);
    const StreamFn fn = p->ring_cap == 0 ? kPacked[sv][ri] : ri < 2u ? kReplay[p->ring_dtype][sv][ri] : nullptr;
    if (!fn || plan->grid == 0)
        return cudaErrorInvalidConfiguration;
    SArgs a;
    a.p = *p;
    a.b = *b;
    a.chunks = stream_chunks(p, plan->rows_per_lane);
    return launch_dependent(fn, dim3(plan->grid), dim3(32u * RSSM_CUDA_STREAM_WARPS), stream, a, plan_pdl(plan));
}
