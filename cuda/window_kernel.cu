/*
 * The speculative-decode window on the GPU (docs/design.md §9): the T draft
 * tokens of a row run from one read of its checkpoint, where one launch per
 * token (what common/verify.c does for a backend without a window) reads
 * the state T times.
 *
 * The math is §9's: token t (0-based) sees m = n + t ring entries, the
 * window's earlier tokens among them, and
 *
 *     Sbar_t x = C (alpha_t Gamma_t x) + sum_{j < m} d_j c_j^t(x),
 *
 * where only the ring part needs the d of the tokens before it. Two
 * kernels per layer, the second a programmatic dependent of the first
 * (at the small batches one, below):
 *
 *  - the coefficient kernel, one CTA per (row, value head) for KDA and per
 *    (row, q/k head) for GDN, a warp per token, lane = 4 key channels:
 *    every token's normalised inputs, its gates, its tentative ring entry
 *    (into the ring and shared memory), then its walk over the entries
 *    before it (one reduce-scatter for all 2m sums), into a record per token
 *    and value head: checkpoint weights alpha Gamma q and alpha Gamma k, 2m
 *    ring coefficients, beta and k.q. A token's record needs only inputs, so the
 *    tokens run side by side, each warp's chain of shuffles and loads
 *    beside the others' (a thread per channel, four warps per token, was
 *    bound by its instructions);
 *  - the readout (where the plan runs the bulk kernel, the persistent one of
 *    window_bulk_kernel.cu instead), kWarps warps of one (row, value head) per CTA,
 *    lanes holding a tile as the stream kernels do: each warp loads its 16
 *    rows of the checkpoint into registers before it waits for the records,
 *    then forms the checkpoint part of every token's two sums at once, as
 *    one product of the tile with the window's 2T weight columns on the
 *    tensor cores (warp_tile.cuh's products(): the tile's registers are the
 *    A fragments; fp32 operands split into two TF32 parts, "3xTF32", so the
 *    products keep fp32's accuracy), and runs the tokens in order for the
 *    ring part over the committed entries and the window's earlier ones
 *    (their d kept in shared memory as the ring holds them), d, o and the
 *    append of d. The tile is never written back: a window has no flush;
 *  - at the small batches (rssm_cuda_window_fused), one kernel:
 *    the readout, each CTA making its value head's records itself (the
 *    coefficient kernel's work on its 4 warps) after its tile loads went
 *    out, into shared memory; the chain of a launch, a wait and a round
 *    trip through L2 between the two kernels is most of a window's time
 *    there.
 *
 * On the H200 (bench/results/h200/notes.md, verify) a window of 4 costs
 * 1.47-1.73x one replay step at batch 16 to 256 and 0.38-0.42x its four
 * steps at batch 256; profiled at batch 256, the persistent readout streams
 * at about 64% of DRAM bandwidth and the coefficient kernel takes a fifth
 * (GDN) to a third (KDA) of the window's time.
 *
 * The decay walk multiplies the entries' exp(g_j), taken once per window,
 * where a step takes exp of each partial sum: the products differ from the
 * step's exps by a few ulp, inside the fp32 tolerance of §6, so a window on
 * this kernel is its tokens' steps to within that tolerance, not bit for bit
 * (a window of one token runs as a step: the backend hands it back to
 * common code); so are the tensor cores' sums, which add in another order.
 *
 * A ring entry that its 16-bit dtype cannot hold is reported per row as the
 * first token that made one (atomicMin over the row's word): common code
 * runs the row again from that token, one launch per token, as §9 says.
 */
#include "rssm_cuda.h"

#include "rssm.h"

#include <cuda_runtime.h>

#include <stdlib.h>

#include "kernel_common.cuh"
#include "warp_tile.cuh"
#include "window_common.cuh"

namespace {

using namespace rssm_kc;

constexpr int kMaxK = (int)RSSM_CUDA_MAX_HEAD_K;
constexpr int kJ = (int)RSSM_CUDA_STREAM_MAX_RING;
constexpr int kT = (int)RSSM_MAX_DRAFT;
constexpr int kCoefWarps = 8;  /* coefficient CTA: a warp per token, up to 8 at once */
constexpr int kWarps = 4;      /* readout CTA */
constexpr int kRPL = 2;        /* value rows per lane */
constexpr int kRowsPerCta = kWarps * 8 * kRPL;
/* A window in one launch (window_fused) takes at most this many tokens, a
 * warp's each: with more, its 4 warps would walk the tokens' coefficients in
 * turn before the readout, where the pair's coefficient kernel has a warp
 * per token (and a GDN q/k head's value heads at once); measured, batch 1,
 * 8 tokens: 16.3 us against the pair's 12.7 (bench/results/h100/notes.md,
 * verify windows). */
constexpr uint32_t kFusedMaxT = 4u;
static_assert(kFusedMaxT <= (uint32_t)kWarps, "a warp per token of a one-launch window");
static_assert(kT <= kJ && 2 * kJ == 32, "a window fits the ring; 2 kJ sums fill a warp's reduce-scatter");

/* A coefficient CTA's entries: every ring entry its tokens walk (the
 * committed ones and the window's, j < n + T <= kJ), k as the ring holds it
 * and exp(g) as floats: per channel for KDA (ae), per value head of the
 * CTA for GDN (gd, a head's decays side by side for the lanes' scan). */
struct CSmem {
    float ke[kJ][kMaxK];
    union {
        float ae[kJ][kMaxK];
        float gd[kMaxK][kJ];
    };
};

/* Token t's walk over its m <= JW entries, newest first, for the lane's 4
 * channels c0..: the warp's sums of kg_j . q and kg_j . k, reduce-scattered;
 * returns the lane's record slot (c_l(q) for l < kJ, then c_{l - kJ}(k)),
 * zero where j >= m. KDA's decay is per channel, so the walk scales as it
 * goes: kg_j = k_j gamma_j alpha, ag ends as alpha Gamma. GDN's is one per
 * value head, so the sums are the bare k_j . q and k_j . k, the same for
 * every value head of the q/k head, and gdn_scale weights them per head. */
template <int JW>
__device__ __forceinline__ float token_walk(const CSmem &S, bool kda, bool mine, uint32_t m, uint32_t c0,
                                            const float (&q)[4], const float (&k)[4], float (&ag)[4], uint32_t lane)
{
    float v[2 * JW];
#pragma unroll
    for (int j = JW - 1; j >= 0; --j) {
        float dq = 0.0f, dk = 0.0f;
        if ((uint32_t)j < m && mine) {
            const float4 kv = *reinterpret_cast<const float4 *>(&S.ke[j][c0]);
            const float kk[4] = {kv.x, kv.y, kv.z, kv.w};
            if (kda) {
                const float4 av = *reinterpret_cast<const float4 *>(&S.ae[j][c0]);
                const float aa[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float kg = kk[i] * ag[i];
                    ag[i] *= aa[i];
                    dq += kg * q[i];
                    dk += kg * k[i];
                }
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    dq += kk[i] * q[i];
                    dk += kk[i] * k[i];
                }
            }
        }
        v[j] = dq;
        v[JW + j] = dk;
    }
    /* sum i (c_i(q), then c_{i - JW}(k)) lands in lanes i LPS ..; lane l
     * takes record slot l's */
    constexpr uint32_t LPS = 32u / (2u * JW);
    const float sum = warp_sum_rows<2 * JW>(v, lane);
    const uint32_t j = lane < (uint32_t)kJ ? lane : lane - kJ;
    const float mine_sum = __shfl_sync(0xffffffffu, sum, (((lane < (uint32_t)kJ ? 0u : (uint32_t)JW) + j) * LPS) & 31u);
    return j < m && j < (uint32_t)JW ? mine_sum : 0.0f;
}

/* A GDN token's weights for value head gi of the CTA, from the bare sums:
 * c_j = sum_j alpha prod_{j < i < m} gamma_i, and the factor alpha Gamma of
 * its checkpoint weights (returned), where alpha = gd[gi][m] is the token's
 * own decay. Each half-warp holds j = lane % kJ: a suffix-product scan over
 * it gives every lane its product at once, where a walk took one
 * multiplication per entry in order (the products round in another order,
 * within the few ulp the header allows). */
__device__ __forceinline__ float gdn_scale(const CSmem &S, uint32_t gi, uint32_t m, float &sum, uint32_t lane)
{
    const uint32_t j = lane % (uint32_t)kJ;
    float x = j < m ? S.gd[gi][j] : 1.0f;
#pragma unroll
    for (uint32_t o = 1; o < (uint32_t)kJ; o <<= 1) {
        const float y = __shfl_down_sync(0xffffffffu, x, o, kJ);
        if (j + o < (uint32_t)kJ)
            x *= y;
    }
    const float alpha = S.gd[gi][m];
    const float after = __shfl_down_sync(0xffffffffu, x, 1, kJ); /* prod over j < i < m */
    sum *= alpha * (j + 1u < (uint32_t)kJ ? after : 1.0f);
    return alpha * __shfl_sync(0xffffffffu, x, 0, kJ);
}

/* ------------------------------------------------ the coefficients */

/* The records of value heads hv0 .. hv0 + G - 1 of row r (one q/k head's
 * for GDN, one value head for KDA) for a window of at most TMAX tokens,
 * computed by the CTA's warps (NW at most: the coefficient kernel may have
 * fewer), a warp per token (tokens t, t + warps, ... on warp t), lane = 4
 * key channels: each token's inputs, normalised, its gates and its
 * tentative ring entry (into the ring where `append`, and into shared
 * memory), then, once every entry is there, each token's walk and sums into
 * record(gi, t). A token's record needs only inputs, so the tokens run side
 * by side: the warps' chains of shuffles and loads overlap one another and
 * other CTAs'. */
template <int RT, int NW, int TMAX, typename Record>
__device__ __forceinline__ void window_coefficients(const WArgs &a, CSmem &S, uint32_t r, const RowWindow &win,
                                                    uint32_t hv0, uint32_t G, bool append, Record record)
{
    using RRaw = typename Raw<RT>::T;
    using KVec = typename VecOf<4 * sizeof(RRaw)>::T; /* a lane's 4 channels of a ring k */
    const rssm_kernel_params &p = a.p;
    const rssm_layer_io &L = a.b.io;
    const uint32_t K = p.head_k, H = p.num_qk_heads, HV = p.num_v_heads;
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u, c0 = 4u * lane, warps = blockDim.x >> 5;
    const bool kda = p.gate_kind == RSSM_CODE_GATE_KDA;
    const uint32_t h = hv0 / (HV / H);
    const uint32_t n = win.n, T = win.T;
    /* the first value head of a q/k head appends its k */
    const bool mine = c0 < K, owner = append && hv0 % (HV / H) == 0;
    RRaw *ring_k = reinterpret_cast<RRaw *>(at_slot(L.ring_k, L.ring_k_slot, L.ring_k_head, win.slot, h));
    const auto ring_g = [&](uint32_t gi) {
        return reinterpret_cast<float *>(at_slot(L.ring_g, L.ring_g_slot, L.ring_g_head, win.slot, hv0 + gi));
    };

    /* The committed entries, warp w taking j = w, w + warps, ... */
    for (uint32_t j = warp; j < n; j += warps) {
        if (mine) {
            const KVec kv = *reinterpret_cast<const KVec *>(ring_k + (size_t)j * K + c0);
            const RRaw *kk = reinterpret_cast<const RRaw *>(&kv);
            *reinterpret_cast<float4 *>(&S.ke[j][c0]) =
                make_float4(to_f<RT>(kk[0]), to_f<RT>(kk[1]), to_f<RT>(kk[2]), to_f<RT>(kk[3]));
            if (kda) {
                const float4 g = *reinterpret_cast<const float4 *>(ring_g(0) + (size_t)j * K + c0);
                *reinterpret_cast<float4 *>(&S.ae[j][c0]) = make_float4(expf(g.x), expf(g.y), expf(g.z), expf(g.w));
            }
        }
        if (!kda)
            for (uint32_t gi = lane; gi < G; gi += 32u)
                S.gd[gi][j] = expf(ring_g(gi)[j]);
    }

    /* Each token's inputs and entry; q, k and its own decay kept for its
     * walk. GDN: the value heads' gates and betas a lane each. */
    constexpr int kTW = (TMAX + NW - 1) / NW; /* tokens per warp, at most (T <= TMAX) */
    float q[kTW][4], k[kTW][4], al[kTW][4], kq[kTW];
#pragma unroll
    for (int w = 0; w < kTW; ++w) {
        const uint32_t t = warp + (uint32_t)w * warps;
        if (t >= T)
            break;
        const uint32_t io = t * a.rows + r, m = n + t;
        if (!kda)
            for (uint32_t gi = lane; gi < G; gi += 32u) {
                const HeadGate hg = head_gate(a, io, hv0 + gi);
                if (append)
                    ring_g(gi)[m] = hg.g;
                S.gd[gi][m] = expf(hg.g);
                record(gi, t)[kRMisc] = hg.beta;
            }
        float g[4];
        const RowIn in = channel_inputs<4, 1>(a, io, hv0, c0, 1u, q[w], k[w], g, al[w], nullptr);
        kq[w] = in.kq;
        KVec ev;
        RRaw *e = reinterpret_cast<RRaw *>(&ev);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            e[i] = window_entry<RT>(k[w][i], L.overflow, r, t);
            if (kda && mine && append)
                ring_g(0)[(size_t)m * K + c0 + i] = g[i];
        }
        if (mine && owner)
            *reinterpret_cast<KVec *>(ring_k + (size_t)m * K + c0) = ev;
        if (mine) {
            *reinterpret_cast<float4 *>(&S.ke[m][c0]) =
                make_float4(to_f<RT>(e[0]), to_f<RT>(e[1]), to_f<RT>(e[2]), to_f<RT>(e[3]));
            if (kda)
                *reinterpret_cast<float4 *>(&S.ae[m][c0]) = make_float4(al[w][0], al[w][1], al[w][2], al[w][3]);
        }
        if (kda && lane == 0)
            record(0, t)[kRMisc] = in.beta;
    }
    __syncthreads();

    /* Each token's walk: its ring coefficients and checkpoint weights. */
#pragma unroll
    for (int w = 0; w < kTW; ++w) {
        const uint32_t t = warp + (uint32_t)w * warps;
        if (t >= T)
            break;
        const uint32_t m = n + t;
        float ag[4] = {al[w][0], al[w][1], al[w][2], al[w][3]};
        float sum;
        if (m <= 4u)
            sum = token_walk<4>(S, kda, mine, m, c0, q[w], k[w], ag, lane);
        else if (m <= 8u)
            sum = token_walk<8>(S, kda, mine, m, c0, q[w], k[w], ag, lane);
        else
            sum = token_walk<kJ>(S, kda, mine, m, c0, q[w], k[w], ag, lane);
        for (uint32_t gi = 0; gi < G; ++gi) {
            float c = sum;
            if (!kda)
                ag[0] = ag[1] = ag[2] = ag[3] = gdn_scale(S, gi, m, c, lane);
            float *rt = record(gi, t);
            rt[kRCoef + lane] = c;
            if (lane == 0)
                rt[kRMisc + 1] = kq[w];
            if (mine) {
                *reinterpret_cast<float4 *>(rt + kRQW + c0) =
                    make_float4(ag[0] * q[w][0], ag[1] * q[w][1], ag[2] * q[w][2], ag[3] * q[w][3]);
                *reinterpret_cast<float4 *>(rt + kRKW + c0) =
                    make_float4(ag[0] * k[w][0], ag[1] * k[w][1], ag[2] * k[w][2], ag[3] * k[w][3]);
            }
        }
    }
}

/* One CTA per (row, value head) for KDA and per (row, q/k head) for GDN,
 * whose value heads of a q/k head differ only in their scalar decays (the
 * walk's sums are taken once for all of them); its records into the
 * scratch, for the readout launched after it. */
template <int RT> __global__ void __launch_bounds__(32 * kCoefWarps, 3) window_coef(const WArgs a)
{
    __shared__ __align__(16) CSmem S;

    /* after the launch before (the readout's loads before its own pdl_wait
     * rely on it), the readout may start: it has its tiles to load meanwhile */
    pdl_step_start();
    const uint32_t H = a.p.num_qk_heads, HV = a.p.num_v_heads;
    const bool kda = a.p.gate_kind == RSSM_CODE_GATE_KDA;
    const uint32_t heads = kda ? HV : H, G = kda ? 1u : HV / H; /* value heads of the CTA: hv0 .. hv0 + G - 1 */
    const uint32_t r = blockIdx.x / heads, hv0 = kda ? blockIdx.x % heads : blockIdx.x % heads * G;
    const RowWindow win = row_window(a, r);
    window_coefficients<RT, kCoefWarps, kT>(a, S, r, win, hv0, G, true, [&](uint32_t gi, uint32_t t) {
        return a.b.scratch + ((size_t)(r * HV + hv0 + gi) * a.t_max + t) * kRStride;
    });
}

/* ---------------------------------------------------- the readout kernels */

constexpr int kNT = kT / 4;  /* n-tiles of the products: tokens 4u..4u+3, each a q and a k column */
constexpr int kRC = 2 * kJ;  /* a token's ring coefficients, then beta and k.q */
constexpr uint32_t kBStride = WarpTile<kF32, 4, kRPL>::kBStride; /* the same for every tile */
constexpr int kWeights = 8 * kNT * (int)kBStride; /* the weight columns, split (float4 each) */

/* The readout's shared memory beside the weight columns. */
struct ReadoutSmem {
    float rc[kT][kRC + 4];
    float dsm[kWarps][kJ][8 * kRPL]; /* every entry's d, as the ring holds it */
    float vsm[kWarps][kT][8 * kRPL];
};

/* The one-launch window's (window_fused): the coefficients' entries where
 * the weight columns go once the records are made, and the records. 61 KiB:
 * dynamic shared memory, which every target the build has (sm_80 and newer)
 * opts in to. */
struct FusedSmem {
    union {
        float4 ws[kWeights];
        CSmem walk;
    } u;
    ReadoutSmem r;
    float rec[kT][kRStride];
};

/* kWarps warps of one (row, value head) per CTA, 8 * kRPL value rows per
 * warp; the tile loads go out before the records are waited for (FUSED:
 * before the CTA makes them itself). The checkpoint part of every token's
 * two sums is one product of the tile with the window's 2T weight columns
 * on the tensor cores, before the token loop; the loop is left the ring
 * part, which needs the d of the tokens before it. */
template <int ST, int CPT, int RT, bool FUSED>
__device__ __forceinline__ void readout(const WArgs &a, float4 *ws, ReadoutSmem &R, CSmem *walk, float *recs)
{
    using SRaw = typename Raw<ST>::T;
    using RRaw = typename Raw<RT>::T;
    using Tile = WarpTile<ST, CPT, kRPL>;
    constexpr int JL = kJ / 4;  /* committed entries per lane and row, at most */
    constexpr int TL = kT / 4;  /* tokens whose v a lane loads, per row */
    constexpr int NT = kNT;
    static_assert(Tile::kBStride == kBStride, "one weight layout for every tile");
    float(&rc)[kT][kRC + 4] = R.rc;
    float(&dsm)[kWarps][kJ][8 * kRPL] = R.dsm;
    float(&vsm)[kWarps][kT][8 * kRPL] = R.vsm;

    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, V = p.head_v, HV = p.num_v_heads;
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u, g = lane >> 2, t4 = lane & 3u;
    const rssm_layer_io &L = a.b.io;
    const uint32_t unit = blockIdx.x / a.ctas, part = blockIdx.x % a.ctas;
    const uint32_t r = unit / HV, hv = unit % HV;
    const RowWindow win = row_window(a, r);
    const uint32_t n = win.n, T = win.T, ntiles = (T + 3u) / 4u;
    const Dtype iot = io_dtype(p);
    const uint32_t v_base = (part * kWarps + warp) * 8u * kRPL + g;
    const size_t v_at = (size_t)hv * V;
    if (win.pad) { /* a padding row's outputs are zeros, as a step's */
        for (uint32_t t = 0; t < a.t_max; ++t)
#pragma unroll
            for (int i = 0; i < kRPL; ++i)
                if (t4 == (uint32_t)(i & 3) && v_base + 8u * i < V)
                    store_io(L.out + (size_t)(t * a.rows + r) * L.out_row, v_at + v_base + 8u * i, iot, 0.0f);
        return;
    }

    /* 1. Every load that needs no record: the tile, the committed d, the
     * tokens' v. */
    const SRaw *C = reinterpret_cast<const SRaw *>(at_slot(L.ckpt, L.ckpt_slot, L.ckpt_head, win.slot, hv));
    Tile tile;
    tile.load(C, v_base, t4, K, V, T > 0);
    RRaw *ring_d = reinterpret_cast<RRaw *>(at_slot(L.ring_d, L.ring_d_slot, L.ring_d_head, win.slot, hv));
    RRaw dj[kRPL][JL];
    uint32_t vin[kRPL][TL];
#pragma unroll
    for (int i = 0; i < kRPL; ++i) {
        const uint32_t v = v_base + 8u * i;
#pragma unroll
        for (int jj = 0; jj < JL; ++jj) {
            const uint32_t j = t4 + 4u * jj;
            dj[i][jj] = j < n && v < V ? ring_d[(size_t)j * V + v] : RRaw{};
        }
#pragma unroll
        for (int tt = 0; tt < TL; ++tt) {
            const uint32_t t = t4 + 4u * tt;
            vin[i][tt] = load_io_bits(L.v + (size_t)(t * a.rows + r) * L.v_row, v_at + v, iot, t < T && v < V);
        }
    }

    /* 2. The unit's records: made here (FUSED; the first part CTA of a
     * value head appends the window's k and gates to the ring), or waited
     * for from the coefficient kernel. The weights are split into TF32
     * parts as the product takes them (columns past 2T and channels past K
     * zero), the rest kept as they are. */
    const float *rec;
    if constexpr (FUSED) {
        window_coefficients<RT, kWarps, kFusedMaxT>(a, *walk, r, win, hv, 1u, part == 0,
                                                    [&](uint32_t, uint32_t t) { return recs + (size_t)t * kRStride; });
        __syncthreads(); /* the records made; the entries' arrays, under ws, free */
        rec = recs;
    } else {
        pdl_wait();
        rec = a.b.scratch + (size_t)unit * a.t_max * kRStride;
    }
    constexpr uint32_t kPairs = kMaxK / 2;
    for (uint32_t e = threadIdx.x; e < 8u * ntiles * kPairs; e += 32u * kWarps) {
        const uint32_t col = e / kPairs, pr = e % kPairs, t = col >> 1;
        float2 w = make_float2(0.0f, 0.0f);
        if (t < T && 2u * pr < K)
            w = *reinterpret_cast<const float2 *>(rec + (size_t)t * kRStride + ((col & 1u) ? kRKW : kRQW) + 2u * pr);
        uint32_t h0, l0, h1, l1;
        split_tf32(w.x, h0, l0);
        split_tf32(w.y, h1, l1);
        ws[col * Tile::kBStride + Tile::b_pair(pr)] =
            make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0), __uint_as_float(l1));
    }
    for (uint32_t e = threadIdx.x; e < T * (kRC + 4); e += 32u * kWarps) {
        const uint32_t t = e / (kRC + 4), i = e % (kRC + 4);
        rc[t][i] = rec[(size_t)t * kRStride + kRCoef + i];
    }
#pragma unroll
    for (int i = 0; i < kRPL; ++i) {
#pragma unroll
        for (int jj = 0; jj < JL; ++jj) {
            const uint32_t j = t4 + 4u * jj;
            if (j < n)
                dsm[warp][j][g + 8 * i] = to_f<RT>(dj[i][jj]);
        }
#pragma unroll
        for (int tt = 0; tt < TL; ++tt) {
            const uint32_t t = t4 + 4u * tt;
            if (t < T)
                vsm[warp][t][g + 8 * i] = io_value(vin[i][tt], iot);
        }
    }
    __syncthreads();

    /* 3. Every token's checkpoint sums at once: lane (g, t4) of n-tile u
     * holds token 4u + t4's (q, k) sums of rows g and g + 8. */
    float acc[NT][4] = {};
    tile.template products<NT>(ws, ntiles, g, t4, K, acc);

    /* 4. The tokens in order: the ring part over the lane's share of the
     * committed entries and the window's earlier ones, summed over the
     * row's 4 lanes, then the checkpoint sums from the lane that holds them. */
#pragma unroll
    for (int u = 0; u < NT; ++u) {
        for (uint32_t tt = 0; tt < 4u; ++tt) {
            const uint32_t t = 4u * u + tt;
            if (t >= T)
                break;
            const float *w = rc[t];
            const uint32_t m = n + t;
            float pq[kRPL], pk[kRPL];
#pragma unroll
            for (int i = 0; i < kRPL; ++i)
                pq[i] = pk[i] = 0.0f;
            for (uint32_t j = t4; j < m; j += 4u) {
                const float cq = w[j], ck = w[kJ + j];
#pragma unroll
                for (int i = 0; i < kRPL; ++i) {
                    const float dv = dsm[warp][j][g + 8 * i];
                    pq[i] += dv * cq;
                    pk[i] += dv * ck;
                }
            }
            Tile::row_sums(pq, pk);
            const uint32_t src = (lane & ~3u) | tt;
#pragma unroll
            for (int i = 0; i < kRPL; ++i) {
                pq[i] += __shfl_sync(0xffffffffu, acc[u][2 * i], src);
                pk[i] += __shfl_sync(0xffffffffu, acc[u][2 * i + 1], src);
            }
            const float beta = w[kRC], kq = w[kRC + 1];
            void *out_row = L.out + (size_t)(t * a.rows + r) * L.out_row;
#pragma unroll
            for (int i = 0; i < kRPL; ++i) {
                const uint32_t v = v_base + 8u * i;
                const float d = beta * (vsm[warp][t][g + 8 * i] - pk[i]);
                if (t4 == (uint32_t)(i & 3) && v < V) {
                    store_io(out_row, v_at + v, iot, pq[i] + d * kq);
                    const RRaw dr = window_entry<RT>(d, L.overflow, r, t);
                    ring_d[(size_t)m * V + v] = dr;
                    dsm[warp][m][g + 8 * i] = to_f<RT>(dr);
                }
            }
            __syncwarp();
        }
    }
}

template <int ST, int CPT, int RT> __global__ void __launch_bounds__(32 * kWarps, 4) window_readout(const WArgs a)
{
    __shared__ __align__(16) float4 ws[kWeights];
    __shared__ __align__(16) ReadoutSmem R;
    readout<ST, CPT, RT, false>(a, ws, R, nullptr, nullptr);
}

/* The window in one launch, for the small batches (rssm_cuda_window_fused
 * decides, so a window has at most kFusedMaxT tokens here): each readout CTA
 * makes its value head's records itself, after its tile loads went out,
 * where the pair's readout waits for a coefficient kernel that ran before
 * it. A head's records are made once per part CTA (and a
 * GDN q/k head's walk once per value head): arithmetic the small batch
 * leaves the SMs room for, against a launch and a round trip through L2. */
template <int ST, int CPT, int RT> __global__ void __launch_bounds__(32 * kWarps, 1) window_fused(const WArgs a)
{
    extern __shared__ __align__(16) unsigned char fused_smem[];
    FusedSmem &F = *reinterpret_cast<FusedSmem *>(fused_smem);
    pdl_step_start();
    readout<ST, CPT, RT, true>(a, F.u.ws, F.r, &F.u.walk, &F.rec[0][0]);
}

/* ------------------------------------------------------------ variants */

using WindowFn = void (*)(const WArgs);

/* [ring dtype][state: fp32, bf16 with K % 8 == 0, other bf16] */
#define RSSM_WINDOW_STATES(RT) {window_readout<kF32, 4, RT>, window_readout<kBF16, 8, RT>, window_readout<kBF16, 4, RT>}
const WindowFn kReadout[3][3] = {RSSM_WINDOW_STATES(kF32), RSSM_WINDOW_STATES(kF16), RSSM_WINDOW_STATES(kBF16)};
#undef RSSM_WINDOW_STATES
#define RSSM_WINDOW_STATES(RT) {window_fused<kF32, 4, RT>, window_fused<kBF16, 8, RT>, window_fused<kBF16, 4, RT>}
const WindowFn kFused[3][3] = {RSSM_WINDOW_STATES(kF32), RSSM_WINDOW_STATES(kF16), RSSM_WINDOW_STATES(kBF16)};
#undef RSSM_WINDOW_STATES
const WindowFn kCoef[3] = {window_coef<kF32>, window_coef<kF16>, window_coef<kBF16>};

uint32_t state_variant(const rssm_kernel_params *p)
{
    return p->state_dtype == RSSM_CODE_DTYPE_F32 ? 0u : p->head_k % 8u == 0 ? 1u : 2u;
}
WindowFn readout_fn(const rssm_kernel_params *p) { return kReadout[p->ring_dtype][state_variant(p)]; }
WindowFn fused_fn(const rssm_kernel_params *p) { return kFused[p->ring_dtype][state_variant(p)]; }

} /* namespace */

/* The rows x tokens a window runs in one launch, at most: 8 (a row of 2-4
 * tokens, 2 rows of up to 4, 4 of 2: where it measured faster than the
 * pair, bench/results/h100/notes.md, verify windows). RSSM_CUDA_WINDOW_FUSED=N
 * sets it for measuring (0: never). */
extern "C" uint32_t rssm_cuda_window_fused_budget(void)
{
    uint32_t v = 8u;
    rssm_cuda_env_count("RSSM_CUDA_WINDOW_FUSED", 0xffffu, &v);
    return v;
}

extern "C" int rssm_cuda_window_fused(const rssm_cuda_plan *plan, uint32_t rows, uint32_t t_max)
{
    return t_max <= kFusedMaxT && (uint64_t)rows * t_max <= plan->window_fused_tokens;
}

extern "C" int rssm_cuda_window_supported(const rssm_kernel_params *p)
{
    /* GDN's coefficient CTA keeps the decays of its q/k head's value heads */
    return p->ring_cap != 0 && p->num_v_heads / p->num_qk_heads <= (uint32_t)kMaxK && rssm_cuda_stream_supported(p);
}

extern "C" size_t rssm_cuda_window_scratch_bytes(const rssm_kernel_params *p, uint32_t rows, uint32_t t_max)
{
    return (size_t)rows * p->num_v_heads * t_max * kRStride * sizeof(float);
}

extern "C" cudaError_t rssm_cuda_window_prepare(const rssm_kernel_params *p, rssm_cuda_plan *plan)
{
    if (!rssm_cuda_window_supported(p))
        return cudaErrorInvalidValue;
    plan->window_fused_tokens = rssm_cuda_window_fused_budget();
    if (plan->window_fused_tokens) {
        const cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void *>(fused_fn(p)),
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(FusedSmem));
        if (e != cudaSuccess)
            return e;
    }
    /* the persistent readout runs only beside the bulk kernel */
    if (plan->kernel != RSSM_CUDA_KERNEL_BULK || !rssm_cuda_window_bulk_supported(p, 1u))
        return cudaSuccess;
    return rssm_cuda_window_bulk_prepare(p);
}

extern "C" cudaError_t rssm_cuda_window_attributes(cudaFuncAttributes *a)
{
    return cudaFuncGetAttributes(a, reinterpret_cast<const void *>(kCoef[0]));
}

extern "C" cudaError_t rssm_cuda_window_launch(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                               const rssm_cuda_plan *plan, const uint32_t *drafts, uint32_t rows,
                                               uint32_t t_max, cudaStream_t stream)
{
    if (!rssm_cuda_window_supported(p) || rows == 0 || t_max == 0 || t_max > (uint32_t)kT || !b->scratch)
        return cudaErrorInvalidValue;
    const WArgs a = window_args(p, b, drafts, rows, t_max, (p->head_v + kRowsPerCta - 1u) / kRowsPerCta);
    const uint32_t units = rows * p->num_v_heads;
    if (rssm_cuda_window_fused(plan, rows, t_max))
        return launch_dependent(fused_fn(p), dim3(units * a.ctas), dim3(32u * kWarps), stream, a, plan_pdl(plan),
                                sizeof(FusedSmem));
    const uint32_t coef_ctas = rows * (p->gate_kind == RSSM_CODE_GATE_KDA ? p->num_v_heads : p->num_qk_heads);
    const uint32_t coef_warps = t_max < (uint32_t)kCoefWarps ? t_max : (uint32_t)kCoefWarps;
    cudaError_t e = launch_dependent(kCoef[p->ring_dtype], dim3(coef_ctas), dim3(32u * coef_warps), stream, a,
                                     plan_pdl(plan));
    if (e != cudaSuccess)
        return e;
    /* A programmatic dependent of the coefficient kernel where the code
     * has pdl_wait (RSSM_CUDA_ALLOW_PDL): it loads its tiles while that
     * runs and waits for the records there. Where the decode step streams
     * on the bulk kernel (the batch gives every SM a unit), so does the
     * readout. */
    if (plan->kernel == RSSM_CUDA_KERNEL_BULK && rssm_cuda_window_bulk_supported(p, t_max))
        return rssm_cuda_window_bulk_launch(p, b, drafts, rows, t_max, plan->sm_count, stream);
    return launch_dependent(readout_fn(p), dim3(units * a.ctas), dim3(32u * kWarps), stream, a, plan_pdl(plan));
}
