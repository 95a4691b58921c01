/*
 * The speculative-decode window's readout as one persistent kernel per
 * layer (docs/design.md §9), in the bulk kernel's shape (bulk_kernel.cu):
 * the checkpoint streams through shared memory in bulk copies while loader
 * warps prepare the next units and consumer warps turn the current ones
 * into outputs on the tensor cores, so a unit's arithmetic hides under the
 * loads of the ones after it. It follows window_kernel.cu's coefficient
 * kernel as a programmatic dependent, in place of that file's readout,
 * where the plan streams the decode step on the bulk kernel.
 *
 * Why: window_kernel.cu's readout holds each checkpoint tile in registers,
 * four CTAs per SM, each loading its tiles, then waiting for its records,
 * then computing: bound by latency on the H200. Computing the coefficients
 * inside this kernel instead (a few coefficient warps per SM, as the decode
 * step's bulk kernel does) was bound by those warps: a token's walk and
 * reductions are a long chain of dependent shuffles and shared-memory
 * loads, 2-5 us per unit on one warp (bench/results/h200/notes.md),
 * so they stay a kernel of their own with a warp per token's work in
 * flight everywhere.
 *
 * Roles, per CTA (one per SM):
 *
 *  - the producer (bulk_common.cuh's produce) streams each unit's (batch
 *    row, value head) checkpoint in 16 KiB tiles through kWStages stages;
 *  - kLoadWarps loader warps each take a unit: its tokens' records into a
 *    unit buffer, the weights split into TF32 parts in the B layout of
 *    warp_tile.cuh's products(); its ring d [n][V] and every token's v by
 *    bulk copies;
 *  - the consumer warps take each stage, 16 rows per warp: the rows' tile
 *    from shared memory in the m16n8k8 A layout, every token's checkpoint
 *    sums as one tensor-core product with the unit's 2T weight columns
 *    (3xTF32 for fp32 state, as window_kernel.cu), the committed entries'
 *    part as a second one (their d as 16 more channels, c_j as the
 *    weights), then the tokens in order: the owner lanes of token s form d,
 *    the outputs and the ring append and hand the rounded d to the lanes of
 *    the same rows for their later tokens.
 *
 * Numerics are window_kernel.cu's (the same records; the tensor cores add
 * in their own order), so a window is its steps to the fp32 tolerance of
 * §6, not bit for bit.
 *
 * Windows of up to 8 tokens (a tile of 4 or 8); longer ones, and shapes the
 * bulk copies do not take, run on window_kernel.cu's readout.
 */
#include "rssm_cuda.h"

#include <cuda_runtime.h>

#include "bulk_common.cuh"
#include "warp_tile.cuh"
#include "window_common.cuh"

/* Code for a target before sm_90 leaves the kernel's body out (a trap:
 * RSSM_CUDA_SM90), and with it every use of the device-side constants and
 * helpers below: nvcc's "declared but never referenced" does not apply. */
#if !RSSM_CUDA_SM90
#pragma nv_diag_suppress 177
#endif

namespace {

using namespace rssm_bulk;

constexpr int kLoadWarps = 2;
constexpr int kThreads = 32 * (kConsumers + kLoadWarps + 1);
constexpr int kProducerWarp = kConsumers + kLoadWarps;
/* Eight stages in flight: a consumer group holds its stage through the
 * products and the tokens' chain, so fewer would leave too few loading to
 * keep the memory busy (bench/results/h200/notes.md). */
constexpr int kWStages = 8;
static_assert(kLead + kLoadWarps <= kUq - kWStages, "a queue slot is reused only after its unit is consumed");
static_assert(2 * kJ == 32, "a token's 2 kJ ring coefficients fill one reduce-scatter");

/* A unit's buffer for windows of up to TP tokens, in floats: the tokens'
 * checkpoint weights as the B operand of WarpTile::products (column 2t
 * alpha Gamma q_t, 2t + 1 alpha Gamma k_t, split into TF32 parts),
 * ring coefficients c_j(q) and c_j(k) (j < n + t),
 * beta and k.q, the unit and T; then, in bytes, the ring's d [n][V] and
 * each token's v [V] by bulk copies. Fewer buffers for 8 tokens: they are
 * what shared memory has left. */
template <int TP> struct Buf {
    using Tile = WarpTile<kF32, 4, 2>; /* its B layout, the same for every tile type */
    static constexpr int WS = 0, CQ = WS + 2 * TP * (int)Tile::kBStride * 4, CK = CQ + TP * kJ;
    static constexpr int MISC = CK + TP * kJ, HDR = MISC + 2 * TP, FLOATS = HDR + 4;
    static constexpr int D = FLOATS * 4, VIN = D + kCoDBytes, BYTES = VIN + TP * kCoVBytes;
    static constexpr int BUFS = TP == 4 ? 4 : 2;
    static_assert(FLOATS % 4 == 0 && BYTES % 16 == 0, "16-byte aligned parts");
    static_assert(BUFS >= kLoadWarps, "parity waits need a buffer per loader warp");
    static constexpr size_t kStagesAt = 0, kBufsAt = (size_t)kWStages * kStageBytes;
    static constexpr size_t kMetaAt = kBufsAt + (size_t)BUFS * BYTES;
    static constexpr size_t kBarsAt = kMetaAt + (size_t)kWStages * sizeof(StageMeta);
    static constexpr size_t kQueueAt = kBarsAt + (size_t)(2 * kWStages + 2 * BUFS + kUq) * sizeof(uint64_t);
    static constexpr size_t kSmem = kQueueAt + (size_t)kUq * sizeof(uint32_t);
    static_assert(kSmem <= 227u * 1024u, "fits an SM's shared memory");
};

/* The consumers' share of a stage: 16 rows per warp (an m16 fragment), so
 * RC / 16 warps per stage and the consumer warps in groups of that many,
 * the groups taking stages in turn. */
template <int ST> struct WGeom {
    static constexpr int RC = Geometry<ST>::RC, WARPS = RC / 16, GROUPS = kConsumers / WARPS;
    static constexpr int CPT = ST == kF32 ? 4 : 8; /* a lane's channels per 16-byte load */
    using Tile = WarpTile<ST, CPT, 2>;
    static_assert(WARPS * 16 == RC && GROUPS * WARPS == kConsumers && kWStages % GROUPS == 0, "stage split");
};

/* ------------------------------------------------------ the loader warps */

/* Unit u's buffer `co`: its tokens' records (window_kernel.cu's coefficient
 * kernel wrote them; the caller has waited for it) with the weights split
 * into products()'s B layout, and the unit's ring d and every token's v by
 * bulk copies completing on `bar`. Lane l converts channel pairs 2 l and 2 l
 * + 1 of each weight column; every record load is issued before any is
 * used. */
template <int RT, int TP>
__device__ __forceinline__ void window_load(const WArgs &a, uint32_t u, float *co, uint64_t *bar)
{
    using RRaw = typename Raw<RT>::T;
    using B = Buf<TP>;
    const rssm_kernel_params &p = a.p;
    const rssm_layer_io &L = a.b.io;
    const uint32_t K = p.head_k, V = p.head_v, HV = p.num_v_heads;
    const uint32_t lane = threadIdx.x & 31u, c0 = 4u * lane;
    const uint32_t r = u / HV, hv = u % HV;
    const RowWindow win = row_window(a, r);
    const uint32_t n = win.n, T = win.T;
    const uint32_t v_bytes = V * bytes_of(io_dtype(p));
    uint8_t *bytes = reinterpret_cast<uint8_t *>(co);
    if (lane == 0) {
        const uint32_t d_bytes = n * V * (uint32_t)sizeof(RRaw);
        const uint64_t policy = evict_first_policy();
        bar_expect_tx(bar, d_bytes + T * v_bytes);
        if (d_bytes)
            bulk_load(bytes + B::D, at_slot(L.ring_d, L.ring_d_slot, L.ring_d_head, win.slot, hv), d_bytes, bar,
                      policy);
        for (uint32_t t = 0; t < T; ++t)
            bulk_load(bytes + B::VIN + t * kCoVBytes, L.v + ((size_t)t * a.rows + r) * L.v_row + (size_t)hv * v_bytes,
                      v_bytes, bar, policy);
    }
    const float *rec = a.b.scratch + (size_t)u * a.t_max * kRStride;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 wq[TP], wk[TP];
    float cj[TP], misc = 0.0f;
#pragma unroll
    for (int t = 0; t < TP; ++t) {
        const bool in = (uint32_t)t < T;
        const float *rt = rec + (size_t)t * kRStride;
        wq[t] = in && c0 < K ? __ldg(reinterpret_cast<const float4 *>(rt + kRQW + c0)) : zero;
        wk[t] = in && c0 < K ? __ldg(reinterpret_cast<const float4 *>(rt + kRKW + c0)) : zero;
        cj[t] = in ? __ldg(rt + kRCoef + lane) : 0.0f;
    }
    if (lane < 2u * T) /* beta and k.q of token lane / 2 */
        misc = __ldg(rec + (size_t)(lane / 2u) * kRStride + kRMisc + lane % 2u);
    float4 *ws = reinterpret_cast<float4 *>(co + B::WS);
    static_assert(2 * kJ == 32, "a token's 2 kJ ring coefficients, one per lane");
#pragma unroll
    for (int t = 0; t < TP; ++t) {
        if ((uint32_t)t >= T)
            break;
#pragma unroll
        for (int x = 0; x < 2; ++x) {
            const float4 w = x ? wk[t] : wq[t];
            const float v[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                uint32_t h0, l0, h1, l1;
                split_tf32(v[2 * h], h0, l0);
                split_tf32(v[2 * h + 1], h1, l1);
                ws[(2u * t + x) * B::Tile::kBStride + B::Tile::b_pair(2u * lane + h)] =
                    make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0), __uint_as_float(l1));
            }
        }
        co[(lane < (uint32_t)kJ ? B::CQ + lane : B::CK + lane - kJ) + t * kJ] = cj[t];
    }
    if (lane < 2u * T)
        co[B::MISC + lane] = misc;
    if (lane == 0) {
        co[B::HDR] = __uint_as_float(u);
        co[B::HDR + 1] = __uint_as_float(T);
    }
}

/* ----------------------------------------------------- the consumer warps */

/* acc[u] += the committed ring part of the warp's rows: entries j < n as
 * 16 more channels of the product, A = their d (rows g, g + 8 of the
 * stage's warp rows, as the ring holds them), B = c_j of column 8u + g (an
 * even column q, an odd one k). A 16-bit d is exact in TF32, an fp32 one is
 * split like the state; c_j always is. Entries past n are zero on both
 * sides (the buffer holds a previous unit's there). */
template <int RT, int NT>
__device__ __forceinline__ void ring_products(const typename Raw<RT>::T *d, const float *co_cq, const float *co_ck,
                                              uint32_t n, uint32_t V, uint32_t g, uint32_t t4, uint32_t ntiles,
                                              float (&acc)[NT][4])
{
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
        if ((uint32_t)(8 * ks) >= n)
            break;
        const uint32_t j0 = 8u * ks + t4, j1 = j0 + 4u;
        float a[4];
        a[0] = j0 < n ? to_f<RT>(d[(size_t)j0 * V + g]) : 0.0f;
        a[1] = j0 < n ? to_f<RT>(d[(size_t)j0 * V + g + 8u]) : 0.0f;
        a[2] = j1 < n ? to_f<RT>(d[(size_t)j1 * V + g]) : 0.0f;
        a[3] = j1 < n ? to_f<RT>(d[(size_t)j1 * V + g + 8u]) : 0.0f;
        uint32_t ah[4], al[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if constexpr (RT == kF32)
                split_tf32(a[e], ah[e], al[e]);
            else
                ah[e] = __float_as_uint(a[e]);
        }
#pragma unroll
        for (int u = 0; u < NT; ++u) {
            if ((uint32_t)u >= ntiles)
                break;
            const float *c = ((g & 1u) ? co_ck : co_cq) + (4u * u + g / 2u) * kJ;
            uint32_t bh0, bl0, bh1, bl1;
            split_tf32(j0 < n ? c[j0] : 0.0f, bh0, bl0);
            split_tf32(j1 < n ? c[j1] : 0.0f, bh1, bl1);
            mma1688_tf32(acc[u], ah, bh0, bh1);
            mma1688_tf32(acc[u], ah, bl0, bl1);
            if constexpr (RT == kF32)
                mma1688_tf32(acc[u], al, bh0, bh1);
        }
    }
}

/* One stage of RC rows: consumer warp w of its group owns rows 16 w .. 16 w
 * + 15, lane (g, t4) of it (g = lane / 4) rows g and g + 8 in the m16n8
 * layout. The checkpoint and committed-ring parts of every token's two sums
 * are tensor-core products (products(), ring_products()), after which lane
 * (g, t4) holds token 4u + t4's q and k sums of its two rows in acc[u]; then
 * the tokens in order: the owner lanes of token s form d, the outputs and
 * the ring append, and hand the rounded d (as the ring holds it) to the
 * lanes of the same rows for their later tokens' window part. */
template <int ST, int RT, int TP>
__device__ __forceinline__ void consume_window(const WArgs &a, const uint8_t *stage, const StageMeta &m,
                                               uint32_t chunk, uint32_t wi, const float *co)
{
    using Wg = WGeom<ST>;
    using RRaw = typename Raw<RT>::T;
    using B = Buf<TP>;
    constexpr int NT = TP / 4; /* n-tiles: tokens 4u .. 4u + 3, a q and a k column each */
    const rssm_kernel_params &p = a.p;
    const rssm_layer_io &L = a.b.io;
    const uint32_t K = p.head_k, V = p.head_v, HV = p.num_v_heads;
    const uint32_t lane = threadIdx.x & 31u, g = lane >> 2, t4 = lane & 3u;
    const uint32_t w0 = 16u * wi, v0 = chunk * Wg::RC + w0, r = m.unit / HV, hv = m.unit % HV, n = m.n;
    const Dtype iot = io_dtype(p);
    const uint32_t T = __float_as_uint(co[B::HDR + 1]), ntiles = (T + 3u) / 4u;
    const size_t o_at = (size_t)hv * V + v0 + g;
    if (m.flush == kMetaPad) { /* a padding row's outputs are zeros, as a step's */
        for (uint32_t s = t4; s < a.t_max; s += 4u) {
            uint8_t *o = L.out + ((size_t)s * a.rows + r) * L.out_row;
            store_io(o, o_at, iot, 0.0f);
            store_io(o, o_at + 8u, iot, 0.0f);
        }
        return;
    }
    const uint8_t *bytes = reinterpret_cast<const uint8_t *>(co);

    typename Wg::Tile tile;
    tile.load_shared(reinterpret_cast<const typename Raw<ST>::T *>(stage), w0 + g, t4, K);
    float acc[NT][4] = {};
    tile.template products<NT>(reinterpret_cast<const float4 *>(co + B::WS), ntiles, g, t4, K, acc);
    if (n > 0u)
        ring_products<RT, NT>(reinterpret_cast<const RRaw *>(bytes + B::D) + v0, co + B::CQ, co + B::CK, n, V, g, t4,
                              ntiles, acc);

    RRaw *ring_d = reinterpret_cast<RRaw *>(at_slot(L.ring_d, L.ring_d_slot, L.ring_d_head, m.slot, hv));
    const uint8_t *vin = bytes + B::VIN;
#pragma unroll
    for (int u = 0; u < NT; ++u) {
#pragma unroll
        for (int tt = 0; tt < 4; ++tt) {
            const uint32_t s = 4u * u + tt;
            if (s >= T)
                break;
            float dr[2] = {0.0f, 0.0f};
            if (t4 == (uint32_t)tt) {
                const uint8_t *vrow = vin + s * kCoVBytes;
                uint8_t *o = L.out + ((size_t)s * a.rows + r) * L.out_row;
                const float beta = co[B::MISC + 2 * s], kq = co[B::MISC + 2 * s + 1];
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const uint32_t v = v0 + g + 8u * i;
                    const float v_in = load_io(vrow, v, iot);
                    const float d = beta * (v_in - acc[u][2 * i + 1]);
                    store_io(o, o_at + 8u * i, iot, acc[u][2 * i] + d * kq);
                    const RRaw e = window_entry<RT>(d, L.overflow, r, s);
                    ring_d[(size_t)(n + s) * V + v] = e;
                    dr[i] = to_f<RT>(e);
                }
            }
            const uint32_t src = (lane & ~3u) | (uint32_t)tt;
            dr[0] = __shfl_sync(0xffffffffu, dr[0], src);
            dr[1] = __shfl_sync(0xffffffffu, dr[1], src);
#pragma unroll
            for (int w = u; w < NT; ++w) {
                const uint32_t t = 4u * w + t4;
                if (t > s && t < T) {
                    const float cq = co[B::CQ + t * kJ + n + s], ck = co[B::CK + t * kJ + n + s];
                    acc[w][0] += dr[0] * cq;
                    acc[w][1] += dr[0] * ck;
                    acc[w][2] += dr[1] * cq;
                    acc[w][3] += dr[1] * ck;
                }
            }
        }
    }
}

/* ----------------------------------------------------------- the kernel */

template <int ST, int RT, int TP> __global__ void __launch_bounds__(kThreads, 1) window_bulk(const WArgs a)
{
#if !RSSM_CUDA_SM90
    /* As the decode step's bulk kernel: never launched from code for a
     * target before sm_90 (rssm_cuda_window_bulk_attributes). */
    (void)a;
    __trap();
#else
    using B = Buf<TP>;
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t *stages = smem + B::kStagesAt;
    uint8_t *bufs = smem + B::kBufsAt;
    StageMeta *meta = reinterpret_cast<StageMeta *>(smem + B::kMetaAt);
    uint64_t *full = reinterpret_cast<uint64_t *>(smem + B::kBarsAt);
    uint64_t *empty = full + kWStages, *cfull = empty + kWStages, *cempty = cfull + B::BUFS;
    uint64_t *ufull = cempty + B::BUFS;
    uint32_t *uq = reinterpret_cast<uint32_t *>(smem + B::kQueueAt);

    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    if (threadIdx.x == 0)
        init_barriers(full, empty, 32u * WGeom<ST>::WARPS, cfull, cempty, B::BUFS, ufull, kWStages);
    __syncthreads();

    if (warp == (uint32_t)kProducerWarp) {
        if (lane == 0) {
            Schedule sch{uq, ufull, a.b.work, a.rows * a.p.num_v_heads, 0u, 0u, (uint32_t)kLoadWarps, kNoUnit};
            produce<ST, true>(a, stages, meta, full, empty, sch, (uint32_t)kWStages);
        }
        return;
    }
    if (warp >= (uint32_t)kConsumers) {
        pdl_wait(); /* the records of the coefficient kernel before this one */
        for (uint32_t ui = warp - kConsumers;; ui += kLoadWarps) {
            const uint32_t b = ui % B::BUFS;
            if (ui >= (uint32_t)B::BUFS)
                bar_wait(&cempty[b], ((ui / B::BUFS) & 1u) ^ 1u);
            bar_wait(&ufull[ui % kUq], (ui / kUq) & 1u);
            const uint32_t u = uq[ui % kUq];
            float *co = reinterpret_cast<float *>(bufs + (size_t)b * B::BYTES);
            if (u == kNoUnit) {
                if (lane == 0)
                    co[B::HDR] = __uint_as_float(kNoUnit);
                bar_arrive(&cfull[b]);
                break;
            }
            window_load<RT, TP>(a, u, co, &cfull[b]);
            bar_arrive(&cfull[b]);
        }
        return;
    }
    using Wg = WGeom<ST>;
    const uint32_t chunks = a.p.head_v / Wg::RC, group = warp / Wg::WARPS, wi = warp % Wg::WARPS;
    uint32_t it = 0;
    for (uint32_t ui = 0;; ++ui) {
        const uint32_t b = ui % B::BUFS;
        bar_wait(&cfull[b], (ui / B::BUFS) & 1u);
        const float *co = reinterpret_cast<const float *>(bufs + (size_t)b * B::BYTES);
        if (__float_as_uint(co[B::HDR]) == kNoUnit)
            break;
        for (uint32_t c = 0; c < chunks; ++c, ++it) {
            if (it % Wg::GROUPS != group)
                continue;
            const uint32_t s = it % kWStages;
            bar_wait(&full[s], (it / kWStages) & 1u);
            consume_window<ST, RT, TP>(a, stages + (size_t)s * kStageBytes, meta[s], c, wi, co);
            bar_arrive(&empty[s]);
        }
        bar_arrive(&cempty[b]);
    }
#endif
}

using WindowFn = void (*)(const WArgs);

/* [tile: 4, 8 tokens][state: fp32, bf16][ring dtype] */
#define RSSM_WB_RINGS(ST, TP) {window_bulk<ST, kF32, TP>, window_bulk<ST, kF16, TP>, window_bulk<ST, kBF16, TP>}
const WindowFn kWindowBulk[2][2][3] = {
    {RSSM_WB_RINGS(kF32, 4), RSSM_WB_RINGS(kBF16, 4)},
    {RSSM_WB_RINGS(kF32, 8), RSSM_WB_RINGS(kBF16, 8)},
};
#undef RSSM_WB_RINGS
const size_t kWindowBulkSmem[2] = {Buf<4>::kSmem, Buf<8>::kSmem};

WindowFn window_bulk_fn(const rssm_kernel_params *p, uint32_t tile)
{
    return kWindowBulk[tile][p->state_dtype == RSSM_CODE_DTYPE_F32 ? 0 : 1][p->ring_dtype];
}

} /* namespace */

extern "C" int rssm_cuda_window_bulk_supported(const rssm_kernel_params *p, uint32_t t_max)
{
    return p->ring_cap != 0 && t_max >= 1u && t_max <= 8u && rssm_cuda_bulk_supported(p);
}

extern "C" cudaError_t rssm_cuda_window_bulk_prepare(const rssm_kernel_params *p)
{
    if (!rssm_cuda_window_bulk_supported(p, 1u))
        return cudaErrorInvalidValue;
    for (uint32_t tile = 0; tile < 2u; ++tile) {
        const cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void *>(window_bulk_fn(p, tile)),
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)kWindowBulkSmem[tile]);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t rssm_cuda_window_bulk_launch(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                                    const uint32_t *drafts, uint32_t rows, uint32_t t_max,
                                                    int sm_count, cudaStream_t stream)
{
    if (!rssm_cuda_window_bulk_supported(p, t_max) || rows == 0 || !b->work || !b->scratch)
        return cudaErrorInvalidValue;
    const WArgs a = window_args(p, b, drafts, rows, t_max, 1u);
    const uint32_t units = rows * p->num_v_heads, sms = sm_count > 0 ? (uint32_t)sm_count : 1u;
    const uint32_t tile = t_max <= 4u ? 0u : 1u;
    /* Always a programmatic dependent: this kernel is launched only where
     * its code is for sm_90 or newer, and so waits at pdl_wait. */
    return launch_dependent(window_bulk_fn(p, tile), dim3(units < sms ? units : sms), dim3(kThreads), stream, a,
                            true, kWindowBulkSmem[tile]);
}

extern "C" size_t rssm_cuda_window_bulk_smem_bytes(void)
{
    return kWindowBulkSmem[0] > kWindowBulkSmem[1] ? kWindowBulkSmem[0] : kWindowBulkSmem[1];
}

extern "C" cudaError_t rssm_cuda_window_bulk_attributes(cudaFuncAttributes *a)
{
    return cudaFuncGetAttributes(a, reinterpret_cast<const void *>(kWindowBulk[0][0][0]));
}
