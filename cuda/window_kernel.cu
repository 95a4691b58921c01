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
 * kernels per layer, the second a programmatic dependent of the first:
 *
 *  - the coefficient kernel, one CTA per (row, value head), thread = key
 *    channel, half of the tokens on each 128 threads: every token's q, k and
 *    gates in by one round of cp.async, then its normalised inputs, its
 *    checkpoint weights alpha Gamma q and alpha Gamma k, and its 2m ring
 *    coefficients (the decay walk for the thread's channel and one
 *    reduce-scatter per warp for all 2m sums), into a record per token; the
 *    tokens' k and g go to the ring as tentative entries. A token's record
 *    needs only inputs, so the tokens run side by side.
 *  - the readout kernel, kWarps warps of one (row, value head) per CTA,
 *    lanes holding a tile as the stream kernels do: each warp loads its 16
 *    rows of the checkpoint into registers before it waits for the records,
 *    then forms the checkpoint part of every token's two sums at once, as
 *    one product of the tile with the window's 2T weight columns on the
 *    tensor cores (warp_tile.cuh's products(): the tile's registers are the
 *    A fragments; fp32 operands split into two TF32 parts, "3xTF32", so the
 *    products keep fp32's accuracy), and runs the tokens in order for the
 *    ring part over the committed entries and the window's earlier ones
 *    (their d kept in shared memory as the ring holds them), d, o and the
 *    append of d. The tile is never written back: a window has no flush.
 *
 * On the H200 a window reads the state once (a window of 4 tokens costs
 * 0.62-0.73x its 4 steps at batch 256, one of 8 0.47-0.54x) but is far
 * from the state stream alone (bench/results/h200_verify/notes.md, with the
 * designs tried): the coefficient kernel is bound by its instructions (a
 * decay walk per channel and token, one reduce-scatter per warp and
 * token), and the readout by latency: four CTAs per SM, each loading its
 * tiles, then waiting for its records, then computing, with too few warps
 * eligible in between. What would close the gap is the bulk kernel's shape
 * (a persistent producer keeping the next units' tiles in flight while
 * coefficient warps and consumers work on the current one).
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

#include "kernel_common.cuh"
#include "warp_tile.cuh"

namespace {

using namespace rssm_kc;

constexpr int kMaxK = (int)RSSM_CUDA_MAX_HEAD_K;
constexpr int kJ = (int)RSSM_CUDA_STREAM_MAX_RING;
constexpr int kT = (int)RSSM_MAX_DRAFT;
constexpr int kCoefThreads = 256;                 /* coefficient CTA */
constexpr int kCoefGroups = kCoefThreads / kMaxK; /* its token groups: thread = channel */
constexpr int kGW = kMaxK / 32;                   /* warps per group */
constexpr int kWarps = 4;                         /* readout CTA */
constexpr int kRPL = 2;                           /* value rows per lane */
constexpr int kRowsPerCta = kWarps * 8 * kRPL;
static_assert(kT <= kJ && 2 * kJ == 32, "a window fits the ring; 2 kJ sums fill a warp's reduce-scatter");
static_assert(kCoefThreads % kMaxK == 0, "whole token groups");

struct WArgs {
    rssm_kernel_params p;
    /* io: the window's token-major step arrays (token t of row r at step-array
     * row t * rows + r), the pool, the step header of the rows (write_pos the
     * window's base); overflow: per row, the first token whose ring entry
     * overflowed (UINT32_MAX: none); scratch: the records, [rows * HV][t_max]. */
    rssm_cuda_buffers b;
    const uint32_t *drafts; /* [rows] */
    uint32_t rows, t_max;
    uint32_t ctas; /* readout CTAs per (row, value head) */
};

/* A token's record, in floats: its checkpoint weights alpha Gamma q and
 * alpha Gamma k, its ring coefficients c_j(q) at j and c_j(k) at kJ + j,
 * beta and k.q. */
constexpr int kRQW = 0, kRKW = kMaxK, kRCoef = 2 * kMaxK, kRMisc = kRCoef + 2 * kJ;
constexpr int kRStride = kRMisc + 4;
static_assert(kRStride % 4 == 0, "16-byte aligned records");

/* The row's window: its slot, its base n and its token count, clamped so
 * that n + T stays inside the ring (the host arranged it; the kernels index
 * by it). */
struct RowWindow {
    uint32_t slot, n, T;
    bool pad; /* a slot outside the tensors: no tokens, zero outputs */
};

__device__ __forceinline__ RowWindow row_window(const WArgs &a, uint32_t r)
{
    const RowStep s = row_step(a.p, a.b.io, r);
    return RowWindow{s.slot, s.n, s.pad ? 0u : min(min(a.drafts[r], a.t_max), a.p.ring_cap - s.n), s.pad};
}

/* Dynamic shared memory of a coefficient CTA. */
struct CSmem {
    uint32_t rq[kT][kMaxK], rk[kT][kMaxK], rg[kT][kMaxK]; /* raw q, k, KDA gate rows (io dtype) */
    float ke[kJ][kMaxK], ae[kJ][kMaxK];                   /* every entry's k (as stored) and exp(g) */
    float part[kT][kGW][2 * kJ];                          /* the warps' shares of the coefficients */
    float red[kT][kGW][3];                                /* the warps' shares of |q|^2, |k|^2, k.q */
    float nrm[kT][2];                                     /* q and k norm factors */
    float gate[kT], beta[kT];                             /* raw GDN gate and beta */
};

/* x as ring dtype RT holds it; a finite x that RT cannot hold makes token t
 * the row's first overflowing one, unless an earlier token already is. */
template <int RT>
__device__ __forceinline__ typename Raw<RT>::T window_entry(float x, uint32_t *first, uint32_t r, uint32_t t)
{
    if constexpr (RT != kF32) {
        const float limit = RT == kF16 ? RSSM_F16_OVERFLOW : RSSM_BF16_OVERFLOW;
        if (fabsf(x) >= limit && !isinf(x))
            atomicMin(first + r, t);
    }
    return from_f<RT>(x);
}

/* Element c of a row copied raw from a step array of fp32 or bf16. */
__device__ __forceinline__ float raw_elem(const uint32_t *row, uint32_t c, bool bf16)
{
    return bf16 ? bf16_to_f(reinterpret_cast<const uint16_t *>(row)[c]) : __uint_as_float(row[c]);
}

/* Sums v[i] over the warp's lanes for all N = 2 JW i at once and leaves sum
 * i in lane i (and in the lanes i + N, i + 2N, ...): N - 1 shuffles and one
 * per doubling of N up to 32, where N warp sums take 5 N. Stage W keeps the
 * half of v[0, 2W) that the lane's bit W selects and adds the partner's
 * other half; the stages are templates so that every index is a constant
 * and v stays in registers. */
template <int W, int N> __device__ __forceinline__ void scatter_stage(float (&v)[N], uint32_t lane)
{
    const bool up = (lane & (uint32_t)W) != 0u;
#pragma unroll
    for (int i = 0; i < W; ++i) {
        const float send = up ? v[i] : v[i + W];
        const float keep = up ? v[i + W] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, W);
    }
    if constexpr (W > 1)
        scatter_stage<W / 2>(v, lane);
}

template <int JW> __device__ __forceinline__ float reduce_scatter(float (&v)[2 * JW], uint32_t lane)
{
    scatter_stage<JW>(v, lane);
    float x = v[0];
#pragma unroll
    for (int o = 2 * JW; o < 32; o <<= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* Token coefficients for a thread's channel c over the token's m <= JW
 * entries, newest first: kg_j = k_j gamma_j alpha, what is left in `ag`
 * being alpha Gamma; returns, in lane i < 2 JW, the warp's sum of kg_j q
 * (i = j) or kg_j k (i = JW + j). A token with a short ring walks and
 * reduces only as many entries as it has (JW = 4, 8 or kJ). */
template <int JW>
__device__ __forceinline__ float token_coefs(const CSmem &S, uint32_t c, bool in, uint32_t m, float q, float k,
                                             float &ag, uint32_t lane)
{
    float v[2 * JW];
#pragma unroll
    for (int j = JW - 1; j >= 0; --j) {
        float kg = 0.0f;
        if (in && (uint32_t)j < m) {
            kg = S.ke[j][c] * ag;
            ag *= S.ae[j][c];
        }
        v[j] = kg * q;
        v[JW + j] = kg * k;
    }
    return reduce_scatter<JW>(v, lane);
}

/* ------------------------------------------------ the coefficient kernel */

/* One CTA of kCoefThreads per (row, value head): the records of its tokens,
 * and their k and g appended to the ring. */
template <int RT> __global__ void __launch_bounds__(kCoefThreads) window_coef(const WArgs a)
{
    using RRaw = typename Raw<RT>::T;
    constexpr int EL = kJ * kMaxK / kCoefThreads; /* committed k, g a thread loads */
    extern __shared__ __align__(16) unsigned char smem[];
    CSmem &S = *reinterpret_cast<CSmem *>(smem);

    /* the readout kernel may start: it has its tiles to load meanwhile */
    pdl_launch_dependents();
    const rssm_kernel_params &p = a.p;
    const rssm_layer_io &L = a.b.io;
    const uint32_t K = p.head_k, H = p.num_qk_heads, HV = p.num_v_heads;
    const uint32_t tid = threadIdx.x, lane = tid & 31u;
    const uint32_t grp = tid / kMaxK, c = tid % kMaxK, wg = (tid / 32u) % kGW;
    const uint32_t unit = blockIdx.x, r = unit / HV, hv = unit % HV, h = hv / (HV / H);
    const RowWindow win = row_window(a, r);
    const uint32_t n = win.n, T = win.T;
    const bool io_bf16 = p.io_dtype == RSSM_CODE_DTYPE_BF16;
    const bool gate_bf16 = (p.flags & RSSM_FLAG_GATE_BF16) != 0u;
    const bool kda = p.gate_kind == RSSM_CODE_GATE_KDA;
    const bool raw = p.gate_mode != RSSM_CODE_MODE_PRECOMPUTED;
    const uint32_t Kg = kda ? K : 1u;
    RRaw *ring_k = reinterpret_cast<RRaw *>(at_slot(L.ring_k, L.ring_k_slot, L.ring_k_head, win.slot, h));
    float *ring_g = reinterpret_cast<float *>(at_slot(L.ring_g, L.ring_g_slot, L.ring_g_head, win.slot, hv));
    float *rec = a.b.scratch + (size_t)unit * a.t_max * kRStride;

    /* 0. Every load at once: the tokens' rows by cp.async, their scalars,
     * the committed entries (k as stored, exp(g)). */
    /* 8-byte pieces: K % 4 == 0 makes every row and row offset of the
     * window's arrays a multiple of 8 bytes; one flat loop over all of
     * them, where a copy_async per row cost each thread more address
     * arithmetic than copies */
    const uint32_t esz = io_bf16 ? 2u : 4u, gsz = gate_bf16 ? 2u : 4u;
    const uint32_t qp = K * esz / 8u, gp = kda ? K * gsz / 8u : 0u, per_token = 2u * qp + gp;
    for (uint32_t e = tid; e < T * per_token; e += kCoefThreads) {
        const uint32_t t = e / per_token, i = e % per_token;
        const size_t io = (size_t)t * a.rows + r;
        if (i < qp)
            cp_async8(&S.rq[t][2u * i], L.q + io * L.q_row + (size_t)h * K * esz + 8u * i);
        else if (i < 2u * qp)
            cp_async8(&S.rk[t][2u * (i - qp)], L.k + io * L.k_row + (size_t)h * K * esz + 8u * (i - qp));
        else
            cp_async8(&S.rg[t][2u * (i - 2u * qp)], L.gate + io * L.gate_row + (size_t)hv * K * gsz + 8u * (i - 2u * qp));
    }
    cp_commit();
    if (tid < T) {
        const size_t io = (size_t)tid * a.rows + r;
        S.gate[tid] = kda ? 0.0f : load_io(L.gate + io * L.gate_row, hv, gate_bf16);
        S.beta[tid] = load_io(L.beta + io * L.beta_row, hv, gate_bf16);
    }
    RRaw kr[EL];
    float gr[EL];
#pragma unroll
    for (int e = 0; e < EL; ++e) {
        const uint32_t j = grp + (uint32_t)(kCoefGroups * e);
        const bool in = j < n && c < K;
        kr[e] = in ? ring_k[(size_t)j * K + c] : RRaw{};
        gr[e] = in ? ring_g[(size_t)j * Kg + (kda ? c : 0u)] : 0.0f;
    }
    const float A = raw ? expf(__ldg(L.A_log + hv)) : 0.0f;
    const float dt = raw && c < K ? __ldg(L.dt_bias + (size_t)hv * Kg + (kda ? c : 0u)) : 0.0f;
#pragma unroll
    for (int e = 0; e < EL; ++e) {
        const uint32_t j = grp + (uint32_t)(kCoefGroups * e);
        if (j < n) {
            S.ke[j][c] = to_f<RT>(kr[e]);
            S.ae[j][c] = expf(gr[e]);
        }
    }
    cp_wait(0);
    __syncthreads();

    /* A. The tokens' inputs: the sums over K, then what they normalise;
     * each token's k and g appended to the ring. */
    for (uint32_t t = grp; t < T; t += kCoefGroups) {
        const float q = c < K ? raw_elem(S.rq[t], c, io_bf16) : 0.0f;
        const float k = c < K ? raw_elem(S.rk[t], c, io_bf16) : 0.0f;
        const float sq = warp_sum(q * q), sk = warp_sum(k * k), sqk = warp_sum(q * k);
        if (lane == 0) {
            S.red[t][wg][0] = sq;
            S.red[t][wg][1] = sk;
            S.red[t][wg][2] = sqk;
        }
    }
    __syncthreads();
    const bool owner = hv % (HV / H) == 0; /* appends the q/k head's k */
    for (uint32_t t = grp; t < T; t += kCoefGroups) {
        float sq = 0.0f, sk = 0.0f, sqk = 0.0f;
#pragma unroll
        for (int w = 0; w < kGW; ++w) {
            sq += S.red[t][w][0];
            sk += S.red[t][w][1];
            sqk += S.red[t][w][2];
        }
        const QKNorm nrm = qk_norm(p, sq, sk);
        const uint32_t m = n + t;
        if (c < K) {
            const float x = kda ? raw_elem(S.rg[t], c, gate_bf16) : S.gate[t];
            const float gv = raw ? raw_gate(p, x, dt, A) : x;
            const RRaw ke = window_entry<RT>(raw_elem(S.rk[t], c, io_bf16) * nrm.kn, L.overflow, r, t);
            S.ke[m][c] = to_f<RT>(ke);
            S.ae[m][c] = expf(gv);
            if (owner)
                ring_k[(size_t)m * K + c] = ke;
            if (kda || c == 0)
                ring_g[(size_t)m * Kg + (kda ? c : 0u)] = gv;
        }
        if (c == 0) {
            S.nrm[t][0] = nrm.qn;
            S.nrm[t][1] = nrm.kn;
            rec[(size_t)t * kRStride + kRMisc] = raw ? sigmoid(S.beta[t]) : S.beta[t];
            rec[(size_t)t * kRStride + kRMisc + 1] = sqk * (nrm.qn * nrm.kn);
        }
    }
    __syncthreads();

    /* B. Per token: kg_j = k_j gamma_j alpha, newest entry first, what is
     * left being alpha Gamma (the weights); the products of kg_j with q and
     * k, summed over K by one reduce-scatter per warp (token_coefs) and the
     * group's warps after it. */
    for (uint32_t t = grp; t < T; t += kCoefGroups) {
        const uint32_t m = n + t;
        const bool in = c < K;
        const float q = in ? raw_elem(S.rq[t], c, io_bf16) * S.nrm[t][0] : 0.0f;
        const float k = in ? raw_elem(S.rk[t], c, io_bf16) * S.nrm[t][1] : 0.0f;
        float ag = in ? S.ae[m][c] : 0.0f;
        const uint32_t jw = m <= 4u ? 4u : m <= 8u ? 8u : (uint32_t)kJ; /* the same for the group's warps */
        const float part = jw == 4u   ? token_coefs<4>(S, c, in, m, q, k, ag, lane)
                           : jw == 8u ? token_coefs<8>(S, c, in, m, q, k, ag, lane)
                                      : token_coefs<kJ>(S, c, in, m, q, k, ag, lane);
        float *rt = rec + (size_t)t * kRStride;
        rt[kRQW + c] = ag * q;
        rt[kRKW + c] = ag * k;
        if (lane < 2u * jw)
            S.part[t][wg][lane < jw ? lane : kJ + lane - jw] = part;
    }
    __syncthreads();
    for (uint32_t e = tid; e < T * 2u * kJ; e += kCoefThreads) {
        const uint32_t t = e / (2u * kJ), i = e % (2u * kJ);
        float s = 0.0f;
        if (i % kJ < n + t) /* the others were not walked: zeros, never read */
#pragma unroll
            for (int w = 0; w < kGW; ++w)
                s += S.part[t][w][i];
        rec[(size_t)t * kRStride + kRCoef + i] = s;
    }
}

/* ---------------------------------------------------- the readout kernel */

/* kWarps warps of one (row, value head) per CTA, 8 * kRPL value rows per
 * warp; the tile loads go out before the records are waited for. The
 * checkpoint part of every token's two sums is one product of the tile with
 * the window's 2T weight columns on the tensor cores, before the token
 * loop; the loop is left the ring part, which needs the d of the tokens
 * before it. */
template <int ST, int CPT, int RT> __global__ void __launch_bounds__(32 * kWarps, 4) window_readout(const WArgs a)
{
    using SRaw = typename Raw<ST>::T;
    using RRaw = typename Raw<RT>::T;
    using Tile = WarpTile<ST, CPT, kRPL>;
    constexpr int JL = kJ / 4;  /* committed entries per lane and row, at most */
    constexpr int TL = kT / 4;  /* tokens whose v a lane loads, per row */
    constexpr int NT = kT / 4;  /* n-tiles: tokens 4u..4u+3, each a q and a k column */
    constexpr int kRC = 2 * kJ; /* a token's ring coefficients, then beta and k.q */
    __shared__ __align__(16) float4 ws[8 * NT * Tile::kBStride]; /* the weight columns, split */
    __shared__ __align__(16) float rc[kT][kRC + 4];
    __shared__ float dsm[kWarps][kJ][8 * kRPL]; /* every entry's d, as the ring holds it */
    __shared__ float vsm[kWarps][kT][8 * kRPL];

    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, V = p.head_v, HV = p.num_v_heads;
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u, g = lane >> 2, t4 = lane & 3u;
    const rssm_layer_io &L = a.b.io;
    const uint32_t unit = blockIdx.x / a.ctas, part = blockIdx.x % a.ctas;
    const uint32_t r = unit / HV, hv = unit % HV;
    const RowWindow win = row_window(a, r);
    const uint32_t n = win.n, T = win.T, ntiles = (T + 3u) / 4u;
    const bool io_bf16 = p.io_dtype == RSSM_CODE_DTYPE_BF16;
    const uint32_t v_base = (part * kWarps + warp) * 8u * kRPL + g;
    const size_t v_at = (size_t)hv * V;
    if (win.pad) { /* a padding row's outputs are zeros, as a step's */
        for (uint32_t t = 0; t < a.t_max; ++t)
#pragma unroll
            for (int i = 0; i < kRPL; ++i)
                if (t4 == (uint32_t)(i & 3) && v_base + 8u * i < V)
                    store_io(L.out + (size_t)(t * a.rows + r) * L.out_row, v_at + v_base + 8u * i, io_bf16, 0.0f);
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
            vin[i][tt] = load_io_bits(L.v + (size_t)(t * a.rows + r) * L.v_row, v_at + v, io_bf16, t < T && v < V);
        }
    }

    /* 2. The unit's records, once the coefficient kernel has written them:
     * the weights split into TF32 parts as the product takes them (columns
     * past 2T and channels past K zero), the rest as they are. */
    pdl_wait();
    const float *rec = a.b.scratch + (size_t)unit * a.t_max * kRStride;
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
                vsm[warp][t][g + 8 * i] = io_value(vin[i][tt], io_bf16);
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
                    store_io(out_row, v_at + v, io_bf16, pq[i] + d * kq);
                    const RRaw dr = window_entry<RT>(d, L.overflow, r, t);
                    ring_d[(size_t)m * V + v] = dr;
                    dsm[warp][m][g + 8 * i] = to_f<RT>(dr);
                }
            }
            __syncwarp();
        }
    }
}

/* ------------------------------------------------------------ variants */

using WindowFn = void (*)(const WArgs);

/* [ring dtype][state: fp32, bf16 with K % 8 == 0, other bf16] */
#define RSSM_WINDOW_STATES(RT) {window_readout<kF32, 4, RT>, window_readout<kBF16, 8, RT>, window_readout<kBF16, 4, RT>}
const WindowFn kReadout[3][3] = {RSSM_WINDOW_STATES(kF32), RSSM_WINDOW_STATES(kF16), RSSM_WINDOW_STATES(kBF16)};
#undef RSSM_WINDOW_STATES
const WindowFn kCoef[3] = {window_coef<kF32>, window_coef<kF16>, window_coef<kBF16>};

WindowFn readout_fn(const rssm_kernel_params *p)
{
    const uint32_t state = p->state_dtype == RSSM_CODE_DTYPE_F32 ? 0u : p->head_k % 8u == 0 ? 1u : 2u;
    return kReadout[p->ring_dtype][state];
}

} /* namespace */

extern "C" int rssm_cuda_window_supported(const rssm_kernel_params *p)
{
    return p->ring_cap != 0 && rssm_cuda_stream_supported(p);
}

extern "C" size_t rssm_cuda_window_scratch_bytes(const rssm_kernel_params *p, uint32_t rows, uint32_t t_max)
{
    return (size_t)rows * p->num_v_heads * t_max * kRStride * sizeof(float);
}

extern "C" cudaError_t rssm_cuda_window_prepare(const rssm_kernel_params *p)
{
    if (!rssm_cuda_window_supported(p))
        return cudaErrorInvalidValue;
    return cudaFuncSetAttribute(kCoef[p->ring_dtype], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(CSmem));
}

extern "C" cudaError_t rssm_cuda_window_launch(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                               const uint32_t *drafts, uint32_t rows, uint32_t t_max,
                                               cudaStream_t stream)
{
    if (!rssm_cuda_window_supported(p) || rows == 0 || t_max == 0 || t_max > (uint32_t)kT || !b->scratch)
        return cudaErrorInvalidValue;
    WArgs a;
    a.p = *p;
    a.b = *b;
    a.drafts = drafts;
    a.rows = rows;
    a.t_max = t_max;
    a.ctas = (p->head_v + kRowsPerCta - 1u) / kRowsPerCta;
    const uint32_t units = rows * p->num_v_heads;
    kCoef[p->ring_dtype]<<<units, kCoefThreads, sizeof(CSmem), stream>>>(a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    /* A programmatic dependent of the coefficient kernel: it loads its tiles
     * while that runs and waits for the records at pdl_wait. */
    return launch_dependent(readout_fn(p), dim3(units * a.ctas), dim3(32u * kWarps), stream, a);
}
