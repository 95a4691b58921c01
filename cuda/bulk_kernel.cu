/*
 * The bulk kernel: the decode step as one persistent, warp-specialised
 * kernel per layer, the checkpoint streamed through shared memory by bulk
 * asynchronous copies (TMA, cp.async.bulk), for batches that give every SM
 * a (batch row, value head).
 *
 * Why: the stream kernels (stream_kernel.cu) keep a tile in registers per
 * one-shot warp; each warp's loads are in flight only between its header
 * load and its compute, so a read-only step streamed at ~2.9 TB/s, a flush
 * held its tile while it ran its FFMA update (1.6x a packed step), and the
 * ring coefficients needed a second launch (the prologue). Here each CTA
 * (one per SM) splits the work by role:
 *
 *  - a producer thread takes the CTA's units (see Schedule), reads each
 *    row's header one unit ahead and issues one bulk copy per item (a 16
 *    KiB checkpoint tile) into a ring of kStages shared-memory stages, gated
 *    by mbarriers, one instruction per tile;
 *  - kCoefWarps coefficient warps compute, once per unit (batch row, value
 *    head) and ahead of the consumers, what the prologue kernel computed:
 *    gamma_j, alpha Gamma q / k, c_j(q), c_j(k) (all 2n sums in one
 *    reduce-scatter), beta, k.q and kg_j, into one of kCoefBufs shared
 *    buffers; they bulk-copy the unit's ring d [n][V] and v [V] in behind
 *    them (one copy each per unit: n small copies per stage cost the copy
 *    engine more than their bytes) and append k and g to the ring;
 *  - kConsumers consumer warps turn each stage into the step's outputs, the
 *    ring's new d, and on a flush the new checkpoint, stored straight from
 *    registers while the next stages load. A lane owns 4 channels of R rows,
 *    so whatever it reads from the coefficient buffer serves R rows, and the
 *    rows' sums are one reduce-scatter (warp_sum_rows).
 *
 * Units are handed out dynamically (a grid-wide counter behind a few static
 * ones), each as V / RC consecutive items of RC value rows, so a unit's
 * coefficients are computed once, SMs that the memory system serves faster
 * take more units, and consecutive units, e.g. one row's flushing heads,
 * land on different SMs. Every thread that reads a buffer arrives on the
 * barrier that releases it (no single-lane release after __syncwarp),
 * which compute-sanitizer's racecheck can follow.
 *
 * Numerics are those of the stream kernels (fp32 throughout, the same sums
 * in the same roles), and packed decode (no ring) runs the same code with
 * n = 0 and every step a flush; L = 1 replay is planned like packed, so it
 * stays bit-identical to it. What each choice measured on the H200 is in
 * bench/results/h200/notes.md.
 */
#include "rssm_cuda.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "bulk_common.cuh"
#include "bulk_mma.cuh"

/* Code for a target before sm_90 leaves the kernel's body out (a trap:
 * RSSM_CUDA_SM90), and with it every use of the device-side constants and
 * helpers below: nvcc's "declared but never referenced" does not apply. */
#if !RSSM_CUDA_SM90
#pragma nv_diag_suppress 177
#endif

namespace {

using namespace rssm_bulk;

/* Coefficient warps per CTA. What bounds their rate is how many units'
 * coefficients may be in flight (kCoefBufs; each takes a few microseconds
 * of memory latency), not the warps; more than 12 warps a CTA would cap
 * every thread at 128 registers, which the bf16 consumers feel. */
constexpr int kCoefWarps = 3;
constexpr int kThreads = 32 * (kConsumers + kCoefWarps + 1);
constexpr int kProducerWarp = kConsumers + kCoefWarps;
/* At least kCoefWarps: a coefficient warp then never waits on a buffer
 * phase more than one ahead of the consumers (mbarrier parity waits).
 * Eight: a unit's coefficients can start only when the unit kCoefBufs
 * before it is consumed, so the buffers bound the coefficient rate to
 * kCoefBufs units per (latency of one unit's coefficients + its stream). */
constexpr int kCoefBufs = 8;
static_assert(kCoefBufs >= kCoefWarps, "parity waits need kCoefBufs >= kCoefWarps");

/* One coefficient buffer: the floats below, then the unit's ring d entries
 * [n][V] and its v [V], each moved by one bulk copy per unit (small copies
 * per stage cost the copy engine more than their bytes). Its parts depend
 * on the kernel (Co): a ring's coefficients and kg_j only with a ring; kg_j
 * as fp32 [kJ][K] for the FFMA flush (fp32 ring) or in its place the flush's
 * tensor-core fragments (16-bit ring, bulk_mma.cuh), whose ring d then
 * needs half the bytes; the readout's fragments (and the ring's) where a
 * 16-bit state is read on the tensor cores. */
constexpr int kCoAQ = 0, kCoAK = kMaxK, kCoAG = 2 * kMaxK, kCoKV = 3 * kMaxK;
constexpr int kCoCQ = 4 * kMaxK, kCoCK = kCoCQ + kJ, kCoMisc = kCoCK + kJ, kCoKG = kCoMisc + 4;
static_assert(kCoKG % 4 == 0, "16-byte aligned kg rows");

/* The shared memory of one CTA, stages last counted: as many 16 KiB stages
 * as fit beside the coefficient buffers (at most kMaxStages), of which a
 * plan uses BArgs::ns (rssm_cuda_bulk_prepare). */
constexpr size_t kSmemLimit = 227u * 1024u;
constexpr int kMaxStages = 8;
static_assert(kLead + kCoefWarps <= kUq - kMaxStages, "a queue slot is reused only after its unit is consumed");

/* TC: which parts of the step the kernel runs on the tensor cores
 * (docs/design.md §8, "The tensor-core data path"): none (kTcOff), the
 * flush's ring sum (kTcFlush), or that and the readout (kTcAll), each
 * where the dtypes allow; the plan's choice is bulk_mode's. */
constexpr int kTcOff = 0, kTcFlush = 1, kTcAll = 2;
/* the flush's ring sum on the tensor cores: the ring's entries are 16-bit */
constexpr bool tc_flush(int tc, int rt, bool ring) { return tc >= kTcFlush && ring && rt != kF32; }
/* the readout on the tensor cores: a 16-bit state, whose ring (if any) is
 * 16-bit too (an fp32 ring is not an exact MMA operand) */
constexpr bool tc_readout(int tc, int st, int rt, bool ring)
{
    return tc == kTcAll && st != kF32 && (!ring || rt != kF32);
}
/* The mode a kernel is instantiated for: the least with the same parts on
 * the tensor cores, so that a mode that changes nothing for some dtypes
 * (an fp32 ring, an fp32 state's readout) shares the kernel of the mode
 * below instead of compiling a copy of it. */
constexpr int tc_of(int tc, int st, int rt, bool ring)
{
    return tc_readout(tc, st, rt, ring) ? kTcAll : tc_flush(tc, rt, ring) ? kTcFlush : kTcOff;
}

template <int ST, int RT, bool RING, int TC> struct Co {
    static constexpr bool TCF = tc_flush(TC, RT, RING);
    static constexpr bool TCR = tc_readout(TC, ST, RT, RING);
    static constexpr int KG = kCoKG;
    static constexpr int FRQ = KG + (RING ? kJ * kMaxK : 0);
    static constexpr int FRC = FRQ + (TCR ? kFrQWords : 0);
    static constexpr int FLOATS = FRC + (TCR && RING ? kFrCWords : 0);
    static constexpr int DBYTES = RING ? (TCF ? kCoDBytes / 2 : kCoDBytes) : 0;
    static constexpr int BYTES = FLOATS * 4 + DBYTES + kCoVBytes;
    static_assert(FLOATS % 4 == 0 && BYTES % 16 == 0, "16-byte aligned parts and buffers");

    static constexpr size_t kCoef = (size_t)kCoefBufs * BYTES;
    static constexpr size_t kFixed = (size_t)(2 * kMaxStages + 2 * kCoefBufs + kUq) * sizeof(uint64_t) +
                                     (size_t)kMaxStages * sizeof(StageMeta) + (size_t)kUq * sizeof(uint32_t);
    static constexpr int STAGES_FIT = (int)((kSmemLimit - kCoef - kFixed) / kStageBytes);
    static constexpr int STAGES = STAGES_FIT < kMaxStages ? STAGES_FIT : kMaxStages;
    static_assert(STAGES >= kStages, "at least the default stages fit");
    static constexpr size_t kStagesAt = 0, kCoefAt = (size_t)STAGES * kStageBytes;
    static constexpr size_t kMetaAt = kCoefAt + kCoef;
    static constexpr size_t kBarsAt = kMetaAt + (size_t)STAGES * sizeof(StageMeta);
    static constexpr size_t kQueueAt = kBarsAt + (size_t)(2 * STAGES + 2 * kCoefBufs + kUq) * sizeof(uint64_t);
    static constexpr size_t SMEM = kQueueAt + (size_t)kUq * sizeof(uint32_t);
    static_assert(SMEM <= kSmemLimit, "fits an SM's shared memory");
};

/* Who consumes a stage: 8 rows per warp for the FFMA consumers (Geometry),
 * 16 (an m16 fragment) for the tensor-core readout, the consumer warps in
 * groups that take stages in turn. */
template <int ST, bool TCR> struct Cg {
    static constexpr int RC = Geometry<ST>::RC;
    static constexpr int ROWS = TCR ? 16 : Geometry<ST>::RW;
    static constexpr int WARPS = RC / ROWS, GROUPS = kConsumers / WARPS;
    static_assert(WARPS * ROWS == RC && GROUPS * WARPS == kConsumers, "stage split");
};

struct BArgs {
    rssm_kernel_params p;
    rssm_cuda_buffers b;
    uint32_t ns; /* stages in use, at most the kernel's Co::STAGES */
};

__device__ __forceinline__ uint32_t active_units(const rssm_kernel_params &p, const rssm_layer_io &io)
{
    return launch_rows(p, io) * p.num_v_heads;
}

/* ---------------------------------------------------------- the roles */

/* One (batch row, value head): the coefficients into `co`, and the unit's
 * ring d and v copied in behind it, completing on `bar`; lane owns channels
 * 4 lane .. 4 lane + 3. OVERLAP: the inputs' loads issued together
 * (channel_inputs), see bulk_overlap. */
template <int ST, int RT, bool RING, int TC, bool KDA, bool OVERLAP>
__device__ __forceinline__ void coefficients(const BArgs &a, uint32_t u, float *co, uint64_t *bar)
{
    using RRaw = typename Raw<RT>::T;
    using C = Co<ST, RT, RING, TC>;
    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, H = p.num_qk_heads, HV = p.num_v_heads;
    const uint32_t lane = threadIdx.x & 31u, c0 = 4u * lane;
    const uint32_t r = u / HV, hv = u % HV, h = hv / (HV / H);
    const rssm_layer_io &L = a.b.io;
    const RowStep st = row_step(p, L, r);
    const uint32_t n = RING ? st.n : 0u;
    constexpr bool kda = KDA;
    const uint32_t Kg = kda ? K : 1u;
    const bool mine = c0 < K;
    RRaw *ring_k = reinterpret_cast<RRaw *>(at_slot(L.ring_k, L.ring_k_slot, L.ring_k_head, st.slot, h));
    float *ring_g = reinterpret_cast<float *>(at_slot(L.ring_g, L.ring_g_slot, L.ring_g_head, st.slot, hv));
    if (lane == 0) {
        const uint32_t d_bytes = n * p.head_v * (uint32_t)sizeof(RRaw), v_bytes = p.head_v * bytes_of(io_dtype(p));
        const uint64_t policy = evict_first_policy();
        uint8_t *dst = reinterpret_cast<uint8_t *>(co + C::FLOATS);
        bar_expect_tx(bar, d_bytes + v_bytes);
        if (d_bytes)
            bulk_load(dst, at_slot(L.ring_d, L.ring_d_slot, L.ring_d_head, st.slot, hv), d_bytes, bar, policy);
        bulk_load(dst + C::DBYTES, L.v + st.io * L.v_row + (size_t)hv * v_bytes, v_bytes, bar, policy);
    }

    /* All of the ring's loads first, so they are in flight together: one
     * vector of the lane's 4 channels per entry. */
    using KVec = typename VecOf<4 * sizeof(RRaw)>::T;
    constexpr int JN = RING ? kJ : 1;
    KVec kj[JN];
    float4 gj[JN];
#pragma unroll
    for (int j = 0; j < JN; ++j) {
        const bool in = RING && (uint32_t)j < n && mine;
        kj[j] = in ? *reinterpret_cast<const KVec *>(ring_k + (size_t)j * K + c0) : KVec{};
        if (!in)
            gj[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        else if (kda)
            gj[j] = *reinterpret_cast<const float4 *>(ring_g + (size_t)j * K + c0);
        else
            gj[j] = make_float4(ring_g[j], ring_g[j], ring_g[j], ring_g[j]);
    }
    float q[4], k[4], g[4], alpha[4];
    const RowIn in = channel_inputs<4, 1, OVERLAP>(a, st.io, hv, c0, 1u, q, k, g, alpha, nullptr);

    /* gamma_j = exp(sum of g_i, i > j), newest to oldest, in fp32; kg_j and
     * the lane's parts of c_j(q) (at j) and c_j(k) (at kJ + j) on the way,
     * then all 2 kJ sums in one reduce-scatter (2 kJ - 1 shuffles, where
     * two warp sums per entry took 10 n, on the coefficient warps' critical
     * path in a full-ring step). */
    static_assert(2 * kJ == 32, "one c_j per lane");
    float cs[2 * kJ];
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    /* A flushing unit's kg_j for the tensor cores: entry pairs (2m, 2m + 1)
     * are written when the walk reaches 2m, entries past n as zeros. */
    float kg_next[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = JN - 1; j >= 0; --j) {
        float dq = 0.0f, dk = 0.0f;
        float kg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (RING && (uint32_t)j < n) {
            const RRaw *kr = reinterpret_cast<const RRaw *>(&kj[j]);
            const float gs[4] = {gj[j].x, gj[j].y, gj[j].z, gj[j].w};
            const float e0 = expf(s[0]);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                /* GDN: one decay per head, so one exp per entry */
                kg[i] = to_f<RT>(kr[i]) * ((KDA ? expf(s[i]) : e0) * alpha[i]);
                s[i] += gs[i];
                dq += kg[i] * q[i];
                dk += kg[i] * k[i];
            }
            if (!C::TCF && mine)
                *reinterpret_cast<float4 *>(co + kCoKG + j * kMaxK + c0) = make_float4(kg[0], kg[1], kg[2], kg[3]);
        }
        if constexpr (C::TCF) {
            if (j % 2 == 0 && st.flush && mine)
                write_flush_pair<RT>(reinterpret_cast<uint32_t *>(co + C::KG), lane, (uint32_t)j / 2u, kg, kg_next);
#pragma unroll
            for (int i = 0; i < 4; ++i)
                kg_next[i] = kg[i];
        }
        cs[j] = dq;
        cs[kJ + j] = dk;
    }
#pragma unroll
    for (int j = JN; j < kJ; ++j)
        cs[j] = cs[kJ + j] = 0.0f;
    static_assert(kCoCK == kCoCQ + kJ, "c_j(q) and c_j(k) contiguous");
    if (RING && n > 0u) {
        const float c = warp_sum_rows<2 * kJ>(cs, lane);
        co[kCoCQ + lane] = c;
        if constexpr (C::TCR && RING)
            write_ring_fragment<RT>(reinterpret_cast<uint32_t *>(co + C::FRC), lane, c);
    }
    float ag[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        ag[i] = alpha[i] * expf(s[i]);
    if (mine) {
        const float xq[4] = {ag[0] * q[0], ag[1] * q[1], ag[2] * q[2], ag[3] * q[3]};
        const float xk[4] = {ag[0] * k[0], ag[1] * k[1], ag[2] * k[2], ag[3] * k[3]};
        if constexpr (C::TCR) {
            write_readout_fragments(reinterpret_cast<uint32_t *>(co + C::FRQ), lane, xq, xk);
        } else {
            *reinterpret_cast<float4 *>(co + kCoAQ + c0) = make_float4(xq[0], xq[1], xq[2], xq[3]);
            *reinterpret_cast<float4 *>(co + kCoAK + c0) = make_float4(xk[0], xk[1], xk[2], xk[3]);
        }
        *reinterpret_cast<float4 *>(co + kCoAG + c0) = make_float4(ag[0], ag[1], ag[2], ag[3]);
        *reinterpret_cast<float4 *>(co + kCoKV + c0) = make_float4(k[0], k[1], k[2], k[3]);
        if (RING && !st.flush && !st.pad) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if (hv % (HV / H) == 0)
                    ring_k[(size_t)n * K + c0 + i] = to_ring<RT>(k[i], L.overflow, r);
                if (kda || c0 + i == 0)
                    ring_g[(size_t)n * Kg + (kda ? c0 + i : 0u)] = g[i];
            }
        }
    }
    if (lane == 0) {
        co[kCoMisc] = in.beta;
        co[kCoMisc + 1] = in.kq;
        co[kCoMisc + 2] = __uint_as_float(u);
        co[kCoMisc + 3] = __uint_as_float(st.io);
    }
}

/* One stage: the outputs of its RC rows, the ring append or the new
 * checkpoint. Consumer warp w owns the stage's rows w R .. w R + R - 1, lane
 * l the channels 4 l .. 4 l + 3 of each: every value a lane reads from the
 * coefficient buffer (a channel's vectors, kg_j on a flush) serves R rows,
 * which keeps the flush's shared-memory traffic below its FMA work. */
template <int ST, int RT, bool RING, int TC>
__device__ __forceinline__ void consume(const BArgs &a, const uint8_t *stage, const StageMeta &m, uint32_t chunk,
                                        const float *co)
{
    using Gm = Geometry<ST>;
    using SV = StateVec<ST, 4>;
    using SVec = typename SV::T;
    using RRaw = typename Raw<RT>::T;
    using C = Co<ST, RT, RING, TC>;
    constexpr int R = Gm::RW;
    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, V = p.head_v, HV = p.num_v_heads;
    const uint32_t warp = (threadIdx.x >> 5) % Gm::GROUP_WARPS, lane = threadIdx.x & 31u, c0 = 4u * lane;
    const uint32_t row0 = warp * R, v0 = chunk * Gm::RC + row0;
    const uint32_t r = m.unit / HV, hv = m.unit % HV, n = m.n;
    const bool flush = m.flush == kMetaFlush, pad = m.flush == kMetaPad, mine = c0 < K;
    const rssm_layer_io &L = a.b.io;
    const Dtype iot = io_dtype(p);
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    float x[R][4];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const SVec xv = mine ? *reinterpret_cast<const SVec *>(stage + ((size_t)(row0 + i) * K + c0) * Gm::SB) : SVec{};
        SV::unpack(xv, x[i]);
    }
    /* the unit's ring d [n][V] and v [V], from the coefficient buffer */
    const RRaw *dsm = reinterpret_cast<const RRaw *>(co + C::FLOATS) + v0;
    const uint8_t *vin = reinterpret_cast<const uint8_t *>(co + C::FLOATS) + C::DBYTES;

    /* Sbar q and Sbar k per row: the lane's channels, plus (lane j < n) ring
     * entry j's term, then summed over the warp. */
    float pq[R], pk[R];
    {
        const float4 q4 = mine ? *reinterpret_cast<const float4 *>(co + kCoAQ + c0) : zero4;
        const float4 k4 = mine ? *reinterpret_cast<const float4 *>(co + kCoAK + c0) : zero4;
#pragma unroll
        for (int i = 0; i < R; ++i) {
            pq[i] = x[i][0] * q4.x + x[i][1] * q4.y + x[i][2] * q4.z + x[i][3] * q4.w;
            pk[i] = x[i][0] * k4.x + x[i][1] * k4.y + x[i][2] * k4.z + x[i][3] * k4.w;
        }
    }
    if constexpr (RING) {
        static_assert(kJ <= 32, "one ring entry per lane");
        if (lane < n) {
            float dv[R];
            load_ring_rows<RT, R>(dsm + (size_t)lane * V, dv);
            const float cq = co[kCoCQ + lane], ck = co[kCoCK + lane];
#pragma unroll
            for (int i = 0; i < R; ++i) {
                pq[i] += dv[i] * cq;
                pk[i] += dv[i] * ck;
            }
        }
    }
    /* Lane l ends with the sums of row l / LPR of the warp's rows. */
    constexpr uint32_t LPR = 32u / R;
    const uint32_t my_row = lane / LPR;
    const float sq = warp_sum_rows<R>(pq, lane), sk = warp_sum_rows<R>(pk, lane);
    const float v_in = load_io(vin, v0 + my_row, iot);
    const float d_mine = co[kCoMisc] * (v_in - sk);
    if (lane % LPR == 0u) {
        void *out_row = L.out + (size_t)__float_as_uint(co[kCoMisc + 3]) * L.out_row;
        store_io(out_row, (size_t)hv * V + v0 + my_row, iot, pad ? 0.0f : sq + d_mine * co[kCoMisc + 1]);
        if (RING && !flush && !pad) {
            RRaw *ring_d = reinterpret_cast<RRaw *>(at_slot(L.ring_d, L.ring_d_slot, L.ring_d_head, m.slot, hv));
            ring_d[(size_t)n * V + v0 + my_row] = to_ring<RT>(d_mine, L.overflow, r);
        }
    }
    if (!flush)
        return;
    if constexpr (C::TCF) {
        /* the ring's sum on the tensor cores (bulk_mma.cuh): lane (g, t4)
         * takes row g of the warp's R = 8, whose d it holds (LPR = 4) */
        static_assert(R == 8 && LPR == 4u, "an m16 fragment's rows g are the warp's rows");
        uint32_t ring[4] = {0u, 0u, 0u, 0u};
        if (n > 0u)
            ring_operand<false>(co + C::FLOATS, V, v0, n, lane, ring);
        uint8_t *Cr = at_slot(L.ckpt, L.ckpt_slot, L.ckpt_head, m.slot, hv) + (size_t)v0 * K * Gm::SB;
        const auto from_stage = [&](int, uint32_t, uint32_t row, uint32_t ch, float(&c)[8]) {
            state8_load<ST>(stage + ((size_t)(row0 + row) * K + ch) * Gm::SB, c);
        };
        flush_rows<ST, RT, RING, false>(from_stage, Cr, K, ring, n, co + kCoAG, co + kCoKV,
                                        reinterpret_cast<const uint32_t *>(co + C::KG), {d_mine, 0.0f});
    } else {
        float d[R];
#pragma unroll
        for (int i = 0; i < R; ++i)
            d[i] = __shfl_sync(0xffffffffu, d_mine, (uint32_t)i * LPR);
        if (!mine)
            return;

        /* C' = C alpha Gamma + d k^T + sum_j d_j kg_j^T, rounded to the state
         * dtype, stored straight from registers. */
        {
            const float4 a4 = *reinterpret_cast<const float4 *>(co + kCoAG + c0);
            const float4 k4 = *reinterpret_cast<const float4 *>(co + kCoKV + c0);
#pragma unroll
            for (int i = 0; i < R; ++i) {
                x[i][0] = x[i][0] * a4.x + d[i] * k4.x;
                x[i][1] = x[i][1] * a4.y + d[i] * k4.y;
                x[i][2] = x[i][2] * a4.z + d[i] * k4.z;
                x[i][3] = x[i][3] * a4.w + d[i] * k4.w;
            }
        }
        if constexpr (RING) {
#pragma unroll 2
            for (uint32_t j = 0; j < n; ++j) {
                const float4 kg = *reinterpret_cast<const float4 *>(co + kCoKG + j * kMaxK + c0);
                float dv[R];
                load_ring_rows<RT, R>(dsm + (size_t)j * V, dv);
#pragma unroll
                for (int i = 0; i < R; ++i) {
                    x[i][0] += dv[i] * kg.x;
                    x[i][1] += dv[i] * kg.y;
                    x[i][2] += dv[i] * kg.z;
                    x[i][3] += dv[i] * kg.w;
                }
            }
        }
        uint8_t *Cw = at_slot(L.ckpt, L.ckpt_slot, L.ckpt_head, m.slot, hv) + (size_t)v0 * K * Gm::SB;
#pragma unroll
        for (int i = 0; i < R; ++i)
            __stcs(reinterpret_cast<SVec *>(Cw + ((size_t)i * K + c0) * Gm::SB), SV::pack(x[i]));
    }
}

/* One stage of a 16-bit state on the tensor cores (bulk_mma.cuh): warp wi
 * of its group takes the stage's rows 16 wi .. 16 wi + 15, lane (g, t4) rows
 * g and g + 8. Each row's S q~ and S k~ (and the ring's part) come out of
 * one m16n8k16 accumulator as four columns (hi and lo of each), summed over
 * the quad; then d, the output and the ring append (lane t4 = i for row g
 * + 8 i), and on a flush the new checkpoint from the stage. */
template <int ST, int RT, bool RING, int TC>
__device__ __forceinline__ void consume_tc(const BArgs &a, const uint8_t *stage, const StageMeta &m, uint32_t chunk,
                                           uint32_t wi, const float *co)
{
    using RRaw = typename Raw<RT>::T;
    using C = Co<ST, RT, RING, TC>;
    static_assert(C::TCR && ST == kBF16, "a bf16 state read on the tensor cores");
    constexpr uint32_t RC = (uint32_t)Geometry<ST>::RC;
    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, V = p.head_v, HV = p.num_v_heads;
    const uint32_t lane = threadIdx.x & 31u, g = lane >> 2, t4 = lane & 3u;
    const uint32_t w0 = 16u * wi, v0 = chunk * RC + w0;
    const uint32_t r = m.unit / HV, hv = m.unit % HV, n = m.n;
    const bool flush = m.flush == kMetaFlush, pad = m.flush == kMetaPad;
    const rssm_layer_io &L = a.b.io;
    const Dtype iot = io_dtype(p);
    const uint16_t *S = reinterpret_cast<const uint16_t *>(stage);

    /* rows g and g + 8, channels 32 G + 8 t4 .. + 7: the A operand as loaded */
    uint4 x[2][kMaxK / 32];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (uint32_t G = 0; G < (uint32_t)kMaxK / 32u; ++G)
            x[i][G] = 32u * G < K ? *reinterpret_cast<const uint4 *>(S + (size_t)(w0 + g + 8u * i) * K + 32u * G + 8u * t4)
                                 : make_uint4(0u, 0u, 0u, 0u);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint2 *frq = reinterpret_cast<const uint2 *>(co + C::FRQ);
#pragma unroll
    for (uint32_t G = 0; G < (uint32_t)kMaxK / 32u; ++G) {
        if (32u * G >= K)
            break;
        const uint2 b0 = frq[(2u * G) * 32u + lane], b1 = frq[(2u * G + 1u) * 32u + lane];
        const uint32_t a0[4] = {x[0][G].x, x[1][G].x, x[0][G].y, x[1][G].y};
        const uint32_t a1[4] = {x[0][G].z, x[1][G].z, x[0][G].w, x[1][G].w};
        mma16<kBF16>(acc, a0, b0.x, b0.y);
        mma16<kBF16>(acc, a1, b1.x, b1.y);
    }
    uint32_t ring[4] = {0u, 0u, 0u, 0u};
    if constexpr (RING) {
        if (n > 0u) {
            ring_operand<true>(co + C::FLOATS, V, v0, n, lane, ring);
            const uint2 b = reinterpret_cast<const uint2 *>(co + C::FRC)[lane];
            mma16<RT>(acc, ring, b.x, b.y);
        }
    }
    /* columns 2 t4, 2 t4 + 1: q and k, hi at t4 = 0 and lo at t4 = 1 */
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 1);
        acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 2);
    }
    const uint8_t *vin = reinterpret_cast<const uint8_t *>(co + C::FLOATS) + C::DBYTES;
    const float beta = co[kCoMisc], kq = co[kCoMisc + 1];
    float d[2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
        d[i] = beta * (load_io(vin, v0 + g + 8u * i, iot) - acc[2 * i + 1]);
    if (t4 < 2u) {
        const uint32_t v = v0 + g + 8u * t4;
        const float dm = t4 ? d[1] : d[0], sq = t4 ? acc[2] : acc[0];
        void *out_row = L.out + (size_t)__float_as_uint(co[kCoMisc + 3]) * L.out_row;
        store_io(out_row, (size_t)hv * V + v, iot, pad ? 0.0f : sq + dm * kq);
        if (RING && !flush && !pad) {
            RRaw *ring_d = reinterpret_cast<RRaw *>(at_slot(L.ring_d, L.ring_d_slot, L.ring_d_head, m.slot, hv));
            ring_d[(size_t)n * V + v] = to_ring<RT>(dm, L.overflow, r);
        }
    }
    if (!flush)
        return;
    uint8_t *Cr = at_slot(L.ckpt, L.ckpt_slot, L.ckpt_head, m.slot, hv) + (size_t)v0 * K * sizeof(uint16_t);
    const auto from_readout = [&](int i, uint32_t G, uint32_t, uint32_t, float(&c)[8]) {
        StateVec<ST, 8>::unpack(x[i][G], c);
    };
    flush_rows<ST, RT, RING, true>(from_readout, Cr, K, ring, n, co + kCoAG, co + kCoKV,
                                   reinterpret_cast<const uint32_t *>(co + C::KG), d);
}

/* ----------------------------------------------------------- the kernel */

template <int ST, int RT, bool RING, int TC, bool KDA, bool OVERLAP>
__global__ void __launch_bounds__(kThreads, 1) bulk_kernel(const BArgs a)
{
#if !RSSM_CUDA_SM90
    /* Code for a target before sm_90 has no bulk copies: never launched
     * there (rssm_cuda_bulk_attributes), and a trap should it ever be. */
    (void)a;
    __trap();
#else
    using C = Co<ST, RT, RING, TC>;
    using Gc = Cg<ST, C::TCR>;
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t *stages = smem + C::kStagesAt;
    uint8_t *coef = smem + C::kCoefAt;
    StageMeta *meta = reinterpret_cast<StageMeta *>(smem + C::kMetaAt);
    uint64_t *full = reinterpret_cast<uint64_t *>(smem + C::kBarsAt);
    uint64_t *empty = full + C::STAGES, *cfull = empty + C::STAGES, *cempty = cfull + kCoefBufs;
    uint64_t *ufull = cempty + kCoefBufs;
    uint32_t *uq = reinterpret_cast<uint32_t *>(smem + C::kQueueAt);

    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const uint32_t ns = min(max(a.ns, 1u), (uint32_t)C::STAGES);
    if (threadIdx.x == 0)
        init_barriers(full, empty, 32u * Gc::WARPS, cfull, cempty, kCoefBufs, ufull, C::STAGES);
    __syncthreads();
    pdl_step_start(); /* the unit counter and every input: the launch before may write them */

    constexpr int kCoef = kCoefWarps;
    if (warp == (uint32_t)kProducerWarp) {
        if (lane == 0) {
            Schedule sch{uq, ufull, a.b.work, active_units(a.p, a.b.io), 0u, 0u, (uint32_t)kCoef, kNoUnit};
            produce<ST, RING>(a, stages, meta, full, empty, sch, ns);
        }
        return;
    }
    if (warp >= (uint32_t)kConsumers) {
        /* coefficient warp cw takes units cw, cw + kCoef, ... of the
         * sequence, through buffers ui % kCoefBufs */
        for (uint32_t ui = warp - kConsumers;; ui += kCoef) {
            const uint32_t b = ui % kCoefBufs;
            if (ui >= (uint32_t)kCoefBufs)
                bar_wait(&cempty[b], ((ui / kCoefBufs) & 1u) ^ 1u);
            bar_wait(&ufull[ui % kUq], (ui / kUq) & 1u);
            const uint32_t u = uq[ui % kUq];
            float *co = reinterpret_cast<float *>(coef + (size_t)b * C::BYTES);
            if (u == kNoUnit) {
                if (lane == 0)
                    co[kCoMisc + 2] = __uint_as_float(kNoUnit);
                bar_arrive(&cfull[b]);
                break;
            }
            coefficients<ST, RT, RING, TC, KDA, OVERLAP>(a, u, co, &cfull[b]);
            bar_arrive(&cfull[b]);
        }
        return;
    }
    /* Stage s of phase ph takes chunk it; the groups take chunks in turn,
     * so with an odd ns a stage serves the groups alternately (each phase
     * is one group's whole read, which its empty barrier counts). */
    const uint32_t chunks = a.p.head_v / (uint32_t)Gc::RC, group = warp / (uint32_t)Gc::WARPS;
    const uint32_t wi = warp % (uint32_t)Gc::WARPS;
    uint32_t it = 0, s = 0, ph = 0;
    for (uint32_t ui = 0;; ++ui) {
        const uint32_t b = ui % kCoefBufs;
        bar_wait(&cfull[b], (ui / kCoefBufs) & 1u);
        const float *co = reinterpret_cast<const float *>(coef + (size_t)b * C::BYTES);
        if (__float_as_uint(co[kCoMisc + 2]) == kNoUnit)
            break;
        for (uint32_t c = 0; c < chunks; ++c, ++it) {
            const uint32_t cs = s, cph = ph;
            if (++s == ns) {
                s = 0;
                ph ^= 1u;
            }
            if (it % (uint32_t)Gc::GROUPS != group)
                continue;
            bar_wait(&full[cs], cph);
            const uint8_t *stage = stages + (size_t)cs * kStageBytes;
            if constexpr (C::TCR)
                consume_tc<ST, RT, RING, TC>(a, stage, meta[cs], c, wi, co);
            else
                consume<ST, RT, RING, TC>(a, stage, meta[cs], c, co);
            bar_arrive(&empty[cs]);
        }
        bar_arrive(&cempty[b]);
    }
#endif
}

using BulkFn = void (*)(const BArgs);

/* Whether the coefficient warps issue all of a unit's input loads before
 * they use any (channel_inputs' OVERLAP), or each where it is used. KDA
 * always: its coefficients (an exp per channel and entry) hold up the
 * consumers, and overlapping gained 6-9% (bench/results/h200/notes.md).
 * GDN where the consumers wait for coefficients, measured on the H200 in
 * the per-layer harness (bench/results/h200/notes.md): with bf16
 * state, whose units are half the bytes (replay 13.65 against 15.23 us at
 * batch 16, 118.7 against 123.4 at 256), and with a few units per SM (fp32
 * at batch 16: 14.65 against 17.17 us); not at fp32's large batches, where
 * the kernel compiled with it streams 1.7% slower (153.4 against 150.8 us
 * at batch 256). */
bool bulk_overlap(const rssm_kernel_params *p, int sm_count)
{
    const uint64_t units = (uint64_t)p->max_rows * p->num_v_heads;
    return p->gate_kind == RSSM_CODE_GATE_KDA || p->state_dtype != RSSM_CODE_DTYPE_F32 ||
           units <= 8u * (uint64_t)(sm_count > 0 ? sm_count : 1);
}

/* [mode][ring dtype, or 3 for no ring][state fp32, bf16][GDN, GDN overlapping, KDA] */
#define RSSM_BULK_GATES(ST, RT, RING, TC)                                                       \
    {bulk_kernel<ST, RT, RING, tc_of(TC, ST, RT, RING), false, false>,                          \
     bulk_kernel<ST, RT, RING, tc_of(TC, ST, RT, RING), false, true>,                           \
     bulk_kernel<ST, RT, RING, tc_of(TC, ST, RT, RING), true, true>}
#define RSSM_BULK_RINGS(TC)                                                                     \
    {{RSSM_BULK_GATES(kF32, kF32, true, TC), RSSM_BULK_GATES(kBF16, kF32, true, TC)},           \
     {RSSM_BULK_GATES(kF32, kF16, true, TC), RSSM_BULK_GATES(kBF16, kF16, true, TC)},           \
     {RSSM_BULK_GATES(kF32, kBF16, true, TC), RSSM_BULK_GATES(kBF16, kBF16, true, TC)},         \
     {RSSM_BULK_GATES(kF32, kF32, false, TC), RSSM_BULK_GATES(kBF16, kF32, false, TC)}}
const BulkFn kBulk[3][4][2][3] = {RSSM_BULK_RINGS(kTcOff), RSSM_BULK_RINGS(kTcFlush), RSSM_BULK_RINGS(kTcAll)};
#undef RSSM_BULK_RINGS
#undef RSSM_BULK_GATES

/* Each kernel's shared memory and the most stages it holds, in kBulk's
 * order. */
struct BulkShape {
    size_t smem;
    uint32_t stages, d_bytes;
};
template <int ST, int RT, bool RING, int TC> constexpr BulkShape shape_of()
{
    using C = Co<ST, RT, RING, tc_of(TC, ST, RT, RING)>;
    return BulkShape{C::SMEM, (uint32_t)C::STAGES, (uint32_t)C::DBYTES};
}
#define RSSM_BULK_SHAPES(TC)                                                                    \
    {{shape_of<kF32, kF32, true, TC>(), shape_of<kBF16, kF32, true, TC>()},                     \
     {shape_of<kF32, kF16, true, TC>(), shape_of<kBF16, kF16, true, TC>()},                     \
     {shape_of<kF32, kBF16, true, TC>(), shape_of<kBF16, kBF16, true, TC>()},                   \
     {shape_of<kF32, kF32, false, TC>(), shape_of<kBF16, kF32, false, TC>()}}
constexpr BulkShape kBulkShape[3][4][2] = {RSSM_BULK_SHAPES(kTcOff), RSSM_BULK_SHAPES(kTcFlush),
                                           RSSM_BULK_SHAPES(kTcAll)};
#undef RSSM_BULK_SHAPES

const BulkShape &bulk_shape(const rssm_kernel_params *p, int mode)
{
    return kBulkShape[mode][p->ring_cap ? p->ring_dtype : 3u][p->state_dtype == RSSM_CODE_DTYPE_F32 ? 0 : 1];
}

/* Whether a unit's ring d fits the coefficient buffer of mode's kernel
 * (half the bytes where the flush is on the tensor cores, Co). */
bool bulk_ring_fits(const rssm_kernel_params *p, int mode)
{
    const uint32_t rsize = p->ring_dtype == RSSM_CODE_DTYPE_F32 ? 4u : 2u;
    return p->ring_cap * p->head_v * rsize <= bulk_shape(p, mode).d_bytes;
}

/* Which parts of the step a plan runs on the tensor cores: the flush and
 * the readout for a bf16 state with a 16-bit ring (GDN and KDA), the FFMA
 * kernels otherwise. Measured with rssm bench on an H100, on all 132 SMs
 * and on 78 (bench/results/h100/notes.md, "The tensor-core data path" and
 * "The flush from the readout's registers"): with the flush taking C from
 * the readout's registers, a bf16 flush step takes 10-19% less than on
 * FFMA (27-35% at 78 SMs) and GDN's replay cycle 3-8% less; KDA's cycle
 * 1.2-2.2% less at batch 256 and at 78 SMs, 1.6% more at batch 64 on all
 * SMs, where its readout steps, up to 2.4% longer (its coefficient warps,
 * which also write the MMA fragments, bind them), weigh more than its
 * flush. A 16-bit packed readout stays FFMA (2% longer on the tensor
 * cores on all SMs, level at 78), as does every fp32-state step
 * (1-4% longer: the FFMA consumers hold 8 rows a warp, so their ring sum's
 * m16 tiles are half filled). RSSM_CUDA_TENSOR_CORES=0, =flush or =1
 * forces a mode for measuring (docs/h200.md); a mode whose ring buffer the
 * shape does not fit falls back to the FFMA kernels, which take every
 * shape rssm_cuda_bulk_supported accepts. */
int bulk_mode(const rssm_kernel_params *p)
{
    int mode = p->state_dtype == RSSM_CODE_DTYPE_BF16 && p->ring_cap != 0 ? kTcAll : kTcOff;
    const char *env = getenv("RSSM_CUDA_TENSOR_CORES");
    if (env && strcmp(env, "0") == 0)
        mode = kTcOff;
    else if (env && strcmp(env, "flush") == 0)
        mode = kTcFlush;
    else if (env && strcmp(env, "1") == 0)
        mode = kTcAll;
    /* what the dtypes let the mode put on the tensor cores (an fp32 ring
     * none, an fp32 state not its readout), so plan->bulk_tc says it */
    mode = tc_of(mode, (int)p->state_dtype, (int)p->ring_dtype, p->ring_cap != 0);
    return bulk_ring_fits(p, mode) ? mode : kTcOff;
}

BulkFn bulk_fn(const rssm_kernel_params *p, const rssm_cuda_plan *plan)
{
    const int gate = p->gate_kind == RSSM_CODE_GATE_KDA ? 2 : bulk_overlap(p, plan->sm_count) ? 1 : 0;
    return kBulk[plan->bulk_tc][p->ring_cap ? p->ring_dtype : 3u][p->state_dtype == RSSM_CODE_DTYPE_F32 ? 0 : 1]
                [gate];
}

uint32_t rows_per_item(const rssm_kernel_params *p)
{
    return p->state_dtype == RSSM_CODE_DTYPE_F32 ? (uint32_t)Geometry<kF32>::RC : (uint32_t)Geometry<kBF16>::RC;
}

/* The stages a plan streams through: kStages, where more only lengthened
 * the queues the coefficient warps' loads wait in on the full H200; on a
 * part of at most 80 SMs (an H20) a bf16 packed step takes as many as its
 * kernel holds (8), since a part that must move about twice the bytes per
 * SM needs more of them in flight (docs/design.md §8): at 78 SMs of an
 * H100 that step took 3.5-4% less with 8 stages than with 4, while fp32
 * packed took 1-2% more and the replay steps were unchanged
 * (bench/results/h100/notes.md). RSSM_CUDA_BULK_STAGES=N asks for N
 * (docs/h200.md). */
uint32_t bulk_stages(const rssm_kernel_params *p, int mode, int sm_count)
{
    const uint32_t most = bulk_shape(p, mode).stages;
    uint32_t ns = (uint32_t)kStages;
    if (p->ring_cap == 0 && p->state_dtype == RSSM_CODE_DTYPE_BF16 && sm_count > 0 && sm_count <= 80)
        ns = most;
    uint32_t v = 0;
    if (rssm_cuda_env_count("RSSM_CUDA_BULK_STAGES", most, &v) && v >= 1)
        ns = v;
    return ns < most ? ns : most;
}

} /* namespace */

extern "C" int rssm_cuda_bulk_supported(const rssm_kernel_params *p)
{
    /* Bulk copies move multiples of 16 bytes between 16-byte aligned
     * addresses; a stage holds whole rows of K <= 128 channels; a unit's
     * ring d fits the FFMA kernels' buffer (bulk_mode falls back to them). */
    const uint32_t rsize = p->ring_dtype == RSSM_CODE_DTYPE_F32 ? 4u : 2u;
    const uint32_t iosize = p->io_dtype == RSSM_CODE_DTYPE_F32 ? 4u : 2u;
    const uint32_t rc = rows_per_item(p);
    return p->head_k <= RSSM_CUDA_MAX_HEAD_K && p->head_k % 32u == 0 && p->head_v % rc == 0 &&
           p->ring_cap <= RSSM_CUDA_STREAM_MAX_RING && p->slot_bytes % 16u == 0 && p->layer_bytes % 16u == 0 &&
           p->ring_d_offset % 16u == 0 && (p->head_v * rsize) % 16u == 0 && (p->head_v * iosize) % 16u == 0 &&
           p->state_dtype != RSSM_CODE_DTYPE_F16 && bulk_ring_fits(p, kTcOff) &&
           p->head_v * iosize <= (uint32_t)kCoVBytes;
}

extern "C" uint32_t rssm_cuda_bulk_mode(const rssm_kernel_params *p) { return (uint32_t)bulk_mode(p); }

extern "C" uint32_t rssm_cuda_bulk_stages(const rssm_kernel_params *p, uint32_t mode, int sm_count)
{
    return bulk_stages(p, mode <= (uint32_t)kTcAll ? (int)mode : kTcOff, sm_count);
}

extern "C" cudaError_t rssm_cuda_bulk_prepare(rssm_cuda_plan *plan, const rssm_kernel_params *p)
{
    if (!rssm_cuda_bulk_supported(p))
        return cudaErrorInvalidValue;
    plan->bulk_tc = rssm_cuda_bulk_mode(p);
    const BulkFn fn = bulk_fn(p, plan);
    const size_t smem = bulk_shape(p, plan->bulk_tc).smem;
    cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void *>(fn),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    int occ = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, kThreads, smem);
    if (e != cudaSuccess)
        return e;
    if (occ < 1)
        return cudaErrorInvalidConfiguration;
    const uint64_t units = (uint64_t)p->max_rows * p->num_v_heads;
    const uint64_t grid = (uint64_t)(plan->sm_count > 0 ? plan->sm_count : 1) * (uint32_t)occ;
    /* The pipeline kernel's fields (warps, stages, smem_bytes) stay as they
     * are, so the plan can still be switched back. */
    plan->kernel = RSSM_CUDA_KERNEL_BULK;
    plan->ctas_per_sm = (uint32_t)occ;
    plan->grid = (uint32_t)(units < grid ? units : grid);
    plan->bulk_stages = rssm_cuda_bulk_stages(p, plan->bulk_tc, plan->sm_count);
    return cudaSuccess;
}

extern "C" size_t rssm_cuda_bulk_smem_bytes(void)
{
    size_t most = 0;
    for (const auto &tc : kBulkShape)
        for (const auto &ring : tc)
            for (const BulkShape &s : ring)
                most = s.smem > most ? s.smem : most;
    return most;
}

extern "C" cudaError_t rssm_cuda_bulk_attributes(cudaFuncAttributes *a)
{
    return cudaFuncGetAttributes(a, reinterpret_cast<const void *>(kBulk[0][0][0][0]));
}

extern "C" cudaError_t rssm_cuda_bulk_launch(const rssm_kernel_params *p, const rssm_cuda_buffers *b,
                                             const rssm_cuda_plan *plan, cudaStream_t stream)
{
    if (plan->grid == 0)
        return cudaErrorInvalidConfiguration;
    if (!b->work)
        return cudaErrorInvalidValue;
    BArgs a;
    a.p = *p;
    a.b = *b;
    a.ns = plan->bulk_stages ? plan->bulk_stages : (uint32_t)kStages;
    return launch_dependent(bulk_fn(p, plan), dim3(plan->grid), dim3(kThreads), stream, a, plan_pdl(plan),
                            bulk_shape(p, plan->bulk_tc).smem);
}
