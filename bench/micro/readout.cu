/*
 * The read-only readout of the decode step in four forms, over a state
 * pool larger than L2, beside a pass that only reads the pool (the read
 * bound): which data path the bulk kernel's 16-bit-state readout should
 * take (docs/design.md §8, "The tensor-core data path";
 * its results: bench/results/h200/notes.md).
 *
 * One unit is a (row, value head): S (V x K = 128 x 128, bf16 or fp32), a
 * full ring of 15 entries d_j (bf16, [16][V], entry 15 zero) and the
 * unit's coefficients; the outputs are S q~ + sum_j d_j c_j(q) and the same
 * for k (the kernel's Sbar q and Sbar k). Every form is a persistent kernel
 * of the bulk kernel's shape: one producer thread streams 16 KiB stages
 * (4 in flight), a side warp bulk-copies each unit's coefficients and ring
 * into one of 4 unit buffers, 8 consumer warps read the stages.
 *
 *   ffma   the bulk kernel's FFMA consumer: a lane owns 4 channels of 8 rows,
 *          the rows' sums one reduce-scatter; stage copied linearly
 *   mma    mma.sync (bf16 m16n8k16; fp32 as hi + lo TF32, m16n8k8), A loaded
 *          by 16-byte loads from the linearly copied stage (2-way bank
 *          conflicts), B the unit's fragments: what bulk_kernel.cu runs
 *   ldsm   the same products, A by ldmatrix from a stage the TMA tensor copy
 *          wrote with the 128-byte swizzle (conflict-free)
 *   wgmma  wgmma m64n8 (bf16 k16; fp32 as 1xTF32 k8, which rounds the state:
 *          a bandwidth reference, not an exact path) reading the swizzled
 *          stage from shared memory, a warpgroup per 64 rows
 *   read   a pass that reads the pool once (16-byte loads, 4 in flight)
 *
 * The ring's part is one mma.sync per 16 rows in the tensor-core forms
 * (ldmatrix.trans of d, as bulk_mma.cuh), a lane per entry in ffma.
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/micro/readout.cu -o readout
 *   ./readout [--batches 64,256] [--pool-mib 256] [--reps 20]
 *
 * Prints one row per (state dtype, batch, form): us per launch, the state's
 * GB/s, % of the read pass's GB/s in the same run, registers, and the
 * error against a float64 reference of sampled units.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#define CK(x)                                                                                                  \
    do {                                                                                                       \
        cudaError_t e_ = (x);                                                                                  \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                 \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

constexpr int K = 128, V = 128, HV = 32, J = 16, NRING = 15;
constexpr int kStageBytes = 16384, kStages = 4, kBufs = 4, kConsumers = 8;
constexpr int kThreads = 32 * (kConsumers + 2); /* consumers, side warp, producer warp */
enum Form { FFMA, MMA, LDSM, WGMMA, NFORMS };
const char *kFormName[NFORMS] = {"ffma", "mma", "ldsm", "wgmma"};

/* A unit's side record, bytes: the coefficients in each form's shape. */
constexpr int kBT = 0;                 /* B^T [8][K], 128B-swizzled, 1024-aligned (wgmma) */
constexpr int kFRQ = kBT + 4096;       /* the state's B fragments for A as 16-byte loads give it (mma) */
constexpr int kFRQN = kFRQ + 4096;     /* ... for A in channel order, as ldmatrix gives it (ldsm) */
constexpr int kQK = kFRQN + 4096;      /* fp32 q~ [K], k~ [K] (ffma) */
constexpr int kCJ = kQK + 2 * K * 4;   /* fp32 c_j(q) [16], c_j(k) [16] (ffma) */
constexpr int kFRC = kCJ + 2 * J * 4;  /* the ring's B fragment, bf16 (tensor forms) */
constexpr int kD = kFRC + 32 * 2 * 4;  /* ring d [16][V] bf16 */
constexpr int kRec = (kD + J * V * 2 + 1023) / 1024 * 1024;
static_assert(kD % 16 == 0 && kRec % 1024 == 0, "aligned parts and records");

struct Args {
    const uint8_t *state;  /* [units][V][K] of this launch's layer */
    const uint8_t *side;   /* [units][kRec] */
    float *out;            /* [units][2][V] */
    uint32_t units;
};

/* ------------------------------------------------------------ device */

__device__ __forceinline__ uint32_t saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mb_init(uint64_t *b, uint32_t n)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mb_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(saddr(b)) : "memory");
}
__device__ __forceinline__ void mb_arrive_tx(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mb_wait(uint64_t *b, uint32_t parity)
{
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}" ::"r"(
                     saddr(b)),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void bulk(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     saddr(dst)),
                 "l"(src), "r"(bytes), "r"(saddr(bar))
                 : "memory");
}
__device__ __forceinline__ void tma2d(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];" ::"r"(saddr(dst)),
                 "l"(map), "r"(c0), "r"(c1), "r"(saddr(bar))
                 : "memory");
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t tf32(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r & 0xffffe000u;
}
__device__ __forceinline__ void ldsm_x4(uint32_t at, uint32_t (&r)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at)
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t at, uint32_t (&r)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at)
                 : "memory");
}

/* The 128-byte swizzle of the TMA tensor copy: 16-byte chunk c of row r
 * (128-byte rows) lives at chunk c ^ (r % 8). */
__device__ __forceinline__ uint32_t sw128(uint32_t row, uint32_t chunk) { return row * 128u + ((chunk ^ (row & 7u)) << 4); }

/* wgmma shared-memory descriptor, K-major, 128-byte swizzle, 8-row groups 1024 bytes apart. */
__device__ __forceinline__ uint64_t gmma_desc(uint32_t smem)
{
    return (uint64_t)((smem & 0x3ffffu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
template <int ST> __device__ __forceinline__ void wgmma_k(float (&d)[4], uint64_t da, uint64_t db)
{
    if constexpr (ST == 2)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "l"(da), "l"(db));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0,%1,%2,%3}, %4, %5, p, 1, 1;\n}"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "l"(da), "l"(db));
}

/* Geometry of a (state dtype, form): rows per stage, rows per consumer
 * warp, stages per consumer group's item (fp32 wgmma: a 64-row block is two
 * stages of 64 channels). */
template <int ST, int F> struct Geo {
    static constexpr int SB = ST == 2 ? 2 : 4;
    static constexpr bool BLOCK64 = F == WGMMA && ST == 4;  /* stages of 64 rows x 64 channels */
    static constexpr int ROWS = BLOCK64 ? 64 : kStageBytes / (K * SB);
    static constexpr int WROWS = F == FFMA ? 8 : 16;
    static constexpr int WARPS = F == WGMMA ? 4 : ROWS / WROWS;
    static constexpr int GROUPS = kConsumers / WARPS;
    static constexpr int SPI = BLOCK64 ? 2 : 1;
    static constexpr int STAGES_PER_UNIT = V * K * SB / kStageBytes;
    static constexpr bool TENSOR = F == LDSM || F == WGMMA;
};

/* The ring's part as bulk_mma.cuh computes it: rows v0 + g (+ 8), all 15
 * entries, one mma.sync with the unit's fragment. */
__device__ __forceinline__ void ring_mma(const uint8_t *buf, uint32_t v0, uint32_t lane, float (&acc)[4])
{
    const uint32_t mat = lane >> 3, row = lane & 7u, j = row + 8u * (mat >> 1), v = v0 + 8u * (mat & 1u);
    uint32_t a[4];
    ldsm_x4_t(saddr(buf + kD) + 2u * (j * V + v), a);
    const uint2 b = reinterpret_cast<const uint2 *>(buf + kFRC)[lane];
    mma_bf16(acc, a, b.x, b.y);
}

/* Rows g and g + 8's sums over the quad (columns q hi, k hi, q lo, k lo),
 * stored by lanes t4 = 0 and 1. */
__device__ __forceinline__ void store_quad(float (&acc)[4], float *out, uint32_t v0, uint32_t lane)
{
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 1);
        acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 2);
    }
    const uint32_t g = lane >> 2, t4 = lane & 3u;
    if (t4 < 2u) {
        const uint32_t v = v0 + g + 8u * t4;
        out[v] = t4 ? acc[2] : acc[0];
        out[V + v] = t4 ? acc[3] : acc[1];
    }
}

template <int ST, int F>
__device__ __forceinline__ void consume(const uint8_t *stage, uint32_t chunk, uint32_t wi, const uint8_t *buf,
                                        float *out)
{
    using Gm = Geo<ST, F>;
    const uint32_t lane = threadIdx.x & 31u, g = lane >> 2, t4 = lane & 3u;
    if constexpr (F == FFMA) {
        /* lane: channels 4 lane .. + 3 of the warp's 8 rows */
        const uint32_t row0 = wi * 8u, v0 = chunk * Gm::ROWS + row0, c0 = 4u * lane;
        const float4 q = reinterpret_cast<const float4 *>(buf + kQK)[lane];
        const float4 k = reinterpret_cast<const float4 *>(buf + kQK + K * 4)[lane];
        float pq[8], pk[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            float x[4];
            if constexpr (ST == 4) {
                const float4 s = *reinterpret_cast<const float4 *>(stage + ((row0 + i) * K + c0) * 4u);
                x[0] = s.x, x[1] = s.y, x[2] = s.z, x[3] = s.w;
            } else {
                const uint2 s = *reinterpret_cast<const uint2 *>(stage + ((row0 + i) * K + c0) * 2u);
                x[0] = __uint_as_float(s.x << 16), x[1] = __uint_as_float(s.x & 0xffff0000u);
                x[2] = __uint_as_float(s.y << 16), x[3] = __uint_as_float(s.y & 0xffff0000u);
            }
            pq[i] = x[0] * q.x + x[1] * q.y + x[2] * q.z + x[3] * q.w;
            pk[i] = x[0] * k.x + x[1] * k.y + x[2] * k.z + x[3] * k.w;
        }
        if (lane < (uint32_t)NRING) {
            const float cq = reinterpret_cast<const float *>(buf + kCJ)[lane];
            const float ck = reinterpret_cast<const float *>(buf + kCJ)[J + lane];
            const uint4 dv = *reinterpret_cast<const uint4 *>(buf + kD + (lane * V + v0) * 2u);
            const uint32_t w[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float d = __uint_as_float((w[i / 2] >> (16 * (i % 2))) << 16);
                pq[i] += d * cq;
                pk[i] += d * ck;
            }
        }
        /* reduce-scatter: lane l ends with row l / 4's sums */
#pragma unroll
        for (int o = 16, w = 8; w > 1; o >>= 1, w >>= 1) {
            const bool up = (lane & (uint32_t)o) != 0u;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if (i >= w / 2)
                    break;
                const float lq = pq[i], hq = pq[i + w / 2], lk = pk[i], hk = pk[i + w / 2];
                pq[i] = (up ? hq : lq) + __shfl_xor_sync(0xffffffffu, up ? lq : hq, o);
                pk[i] = (up ? hk : lk) + __shfl_xor_sync(0xffffffffu, up ? lk : hk, o);
            }
        }
        float sq = pq[0], sk = pk[0];
        sq += __shfl_xor_sync(0xffffffffu, sq, 2), sk += __shfl_xor_sync(0xffffffffu, sk, 2);
        sq += __shfl_xor_sync(0xffffffffu, sq, 1), sk += __shfl_xor_sync(0xffffffffu, sk, 1);
        if ((lane & 3u) == 0u) {
            out[v0 + lane / 4u] = sq;
            out[V + v0 + lane / 4u] = sk;
        }
    } else if constexpr (F == WGMMA) {
        /* one warpgroup: 64 rows; fp32: this stage is 64 channels of them */
        const uint32_t rows0 = Gm::BLOCK64 ? (chunk / 2u) * 64u : chunk * Gm::ROWS;
        const uint32_t half = Gm::BLOCK64 ? chunk % 2u : 0u;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const uint32_t a0 = saddr(stage), b0 = saddr(buf + kBT);
        wg_fence();
        if constexpr (ST == 2) {
#pragma unroll
            for (uint32_t kk = 0; kk < 8u; ++kk) /* 16 channels each: 4 per 128-byte row, 2 boxes */
                wgmma_k<ST>(acc, gmma_desc(a0 + (kk / 4u) * 8192u + (kk % 4u) * 32u),
                            gmma_desc(b0 + (kk / 4u) * 1024u + (kk % 4u) * 32u));
        } else {
#pragma unroll
            for (uint32_t kk = 0; kk < 8u; ++kk) /* 8 channels each, of this stage's 64 */
                wgmma_k<ST>(acc, gmma_desc(a0 + (kk / 4u) * 8192u + (kk % 4u) * 32u),
                            gmma_desc(b0 + (2u * half + kk / 4u) * 1024u + (kk % 4u) * 32u));
        }
        wg_commit();
        wg_wait();
        const uint32_t v0 = rows0 + 16u * wi;
        if (half == 0u)
            ring_mma(buf, v0, lane, acc);
        if (Gm::BLOCK64) {
            /* the block's two stages add into the output: the first stores */
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 1);
                acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 2);
            }
            if (t4 < 2u) {
                const uint32_t v = v0 + g + 8u * t4;
                if (half) {
                    out[v] += t4 ? acc[2] : acc[0];
                    out[V + v] += t4 ? acc[3] : acc[1];
                } else {
                    out[v] = t4 ? acc[2] : acc[0];
                    out[V + v] = t4 ? acc[3] : acc[1];
                }
            }
        } else {
            store_quad(acc, out, v0, lane);
        }
    } else {
        /* mma / ldsm: warp wi's 16 rows */
        const uint32_t r0 = 16u * wi, v0 = chunk * Gm::ROWS + r0;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const uint2 *frq = reinterpret_cast<const uint2 *>(buf + (F == MMA ? kFRQ : kFRQN));
        if constexpr (ST == 2) {
#pragma unroll
            for (uint32_t G = 0; G < 4u; ++G) {
                uint32_t a[2][4];
                if constexpr (F == MMA) {
                    const uint4 x0 = *reinterpret_cast<const uint4 *>(stage + ((r0 + g) * K + 32u * G + 8u * t4) * 2u);
                    const uint4 x1 = *reinterpret_cast<const uint4 *>(stage + ((r0 + g + 8u) * K + 32u * G + 8u * t4) * 2u);
                    a[0][0] = x0.x, a[0][1] = x1.x, a[0][2] = x0.y, a[0][3] = x1.y;
                    a[1][0] = x0.z, a[1][1] = x1.z, a[1][2] = x0.w, a[1][3] = x1.w;
                } else {
                    /* channels 32 G + 16 h .. + 15: ldmatrix matrices (rows 0-7 / 8-15) x (k 0-7 / 8-15) */
#pragma unroll
                    for (uint32_t h = 0; h < 2u; ++h) {
                        const uint32_t c = 32u * G + 16u * h + 8u * (lane >> 4), row = r0 + (lane & 15u);
                        ldsm_x4(saddr(stage) + (c / 64u) * 8192u + sw128(row, (c % 64u) / 8u), a[h]);
                    }
                }
                const uint2 b0 = frq[(2u * G) * 32u + lane], b1 = frq[(2u * G + 1u) * 32u + lane];
                mma_bf16(acc, a[0], b0.x, b0.y);
                mma_bf16(acc, a[1], b1.x, b1.y);
            }
        } else {
            /* fp32: k-steps of 8 channels, A as hi + lo TF32, B columns q hi, k hi, q lo, k lo.
             * mma: lane (g, t4) loads channels 16 G + 4 t4 .. + 3 of rows g and g + 8 as one
             * 16-byte vector each; k-step (G, h) takes its elements 2h (logical k t4) and 2h + 1
             * (t4 + 4). ldsm: k-step s is channels 8 s .. + 7 in order. */
            float4 xv[2] = {};
#pragma unroll
            for (uint32_t s = 0; s < 16u; ++s) {
                float x[4];
                if constexpr (F == MMA) {
                    if (s % 2u == 0u) {
                        xv[0] = *reinterpret_cast<const float4 *>(stage + ((r0 + g) * K + 8u * s + 4u * t4) * 4u);
                        xv[1] = *reinterpret_cast<const float4 *>(stage + ((r0 + g + 8u) * K + 8u * s + 4u * t4) * 4u);
                    }
                    const bool h = s % 2u;
                    x[0] = h ? xv[0].z : xv[0].x, x[1] = h ? xv[1].z : xv[1].x;
                    x[2] = h ? xv[0].w : xv[0].y, x[3] = h ? xv[1].w : xv[1].y;
                } else {
                    uint32_t r[4];
                    const uint32_t c = 8u * s + 4u * (lane >> 4), row = r0 + (lane & 15u);
                    ldsm_x4(saddr(stage) + (c / 32u) * 4096u + sw128(row, (c % 32u) / 4u), r);
                    x[0] = __uint_as_float(r[0]), x[1] = __uint_as_float(r[1]);
                    x[2] = __uint_as_float(r[2]), x[3] = __uint_as_float(r[3]);
                }
                uint32_t hi[4], lo[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    hi[e] = tf32(x[e]);
                    lo[e] = tf32(x[e] - __uint_as_float(hi[e]));
                }
                const uint2 b = frq[s * 32u + lane];
                mma_tf32(acc, hi, b.x, b.y);
                mma_tf32(acc, lo, b.x, b.y);
            }
        }
        ring_mma(buf, v0, lane, acc);
        store_quad(acc, out, v0, lane);
    }
}

template <int ST, int F> __global__ void __launch_bounds__(kThreads, 1) readout(const Args a, const __grid_constant__ CUtensorMap map)
{
    using Gm = Geo<ST, F>;
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t *stages = smem;                                   /* 1024-aligned for the swizzle */
    uint8_t *bufs = smem + kStages * kStageBytes;
    uint64_t *full = reinterpret_cast<uint64_t *>(bufs + kBufs * kRec);
    uint64_t *empty = full + kStages, *bfull = empty + kStages, *bempty = bfull + kBufs;
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mb_init(&full[s], 1);
            mb_init(&empty[s], 32u * Gm::WARPS);
        }
        for (int b = 0; b < kBufs; ++b) {
            mb_init(&bfull[b], 1);
            mb_init(&bempty[b], 32u * kConsumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const uint32_t per_unit = Gm::STAGES_PER_UNIT;
    if (warp == kConsumers + 1) { /* producer */
        if (lane == 0) {
            uint32_t it = 0;
            for (uint32_t u = blockIdx.x; u < a.units; u += gridDim.x) {
                const uint8_t *S = a.state + (size_t)u * V * K * Gm::SB;
                for (uint32_t c = 0; c < per_unit; ++c, ++it) {
                    const uint32_t s = it % kStages;
                    if (it >= (uint32_t)kStages)
                        mb_wait(&empty[s], ((it / kStages) & 1u) ^ 1u);
                    uint8_t *dst = stages + s * kStageBytes;
                    mb_arrive_tx(&full[s], kStageBytes);
                    if constexpr (!Gm::TENSOR) {
                        bulk(dst, S + (size_t)c * kStageBytes, kStageBytes, &full[s]);
                    } else if constexpr (ST == 2) { /* 64 rows, two boxes of 64 channels */
                        tma2d(dst, &map, 0, (int)(u * V + c * 64u), &full[s]);
                        tma2d(dst + 8192, &map, 64, (int)(u * V + c * 64u), &full[s]);
                    } else if constexpr (Gm::BLOCK64) { /* 64 rows x 64 channels: boxes of 32 channels */
                        tma2d(dst, &map, (int)(64u * (c % 2u)), (int)(u * V + (c / 2u) * 64u), &full[s]);
                        tma2d(dst + 8192, &map, (int)(64u * (c % 2u) + 32u), (int)(u * V + (c / 2u) * 64u), &full[s]);
                    } else { /* 32 rows, four boxes of 32 channels */
#pragma unroll
                        for (int b = 0; b < 4; ++b)
                            tma2d(dst + 4096 * b, &map, 32 * b, (int)(u * V + c * 32u), &full[s]);
                    }
                }
            }
        }
        return;
    }
    if (warp == kConsumers) { /* side warp: each unit's record */
        if (lane == 0) {
            uint32_t i = 0;
            for (uint32_t u = blockIdx.x; u < a.units; u += gridDim.x, ++i) {
                const uint32_t b = i % kBufs;
                if (i >= (uint32_t)kBufs)
                    mb_wait(&bempty[b], ((i / kBufs) & 1u) ^ 1u);
                const uint8_t *rec = a.side + (size_t)u * kRec;
                uint8_t *dst = bufs + b * kRec;
                const uint32_t dbytes = J * V * 2;
                if constexpr (F == FFMA) {
                    mb_arrive_tx(&bfull[b], (kFRC - kQK) + dbytes);
                    bulk(dst + kQK, rec + kQK, kFRC - kQK, &bfull[b]);
                    bulk(dst + kD, rec + kD, dbytes, &bfull[b]);
                } else {
                    const uint32_t bbytes = ST == 2 ? 2048u : 4096u;
                    const uint32_t boff = F == WGMMA ? kBT : F == MMA ? kFRQ : kFRQN;
                    mb_arrive_tx(&bfull[b], (kD - kFRC) + dbytes + bbytes);
                    bulk(dst + kFRC, rec + kFRC, kD - kFRC + dbytes, &bfull[b]);
                    bulk(dst + boff, rec + boff, bbytes, &bfull[b]);
                }
            }
        }
        return;
    }
    const uint32_t group = warp / Gm::WARPS, wi = warp % Gm::WARPS;
    uint32_t it = 0, i = 0;
    for (uint32_t u = blockIdx.x; u < a.units; u += gridDim.x, ++i) {
        const uint32_t b = i % kBufs;
        mb_wait(&bfull[b], (i / kBufs) & 1u);
        const uint8_t *buf = bufs + b * kRec;
        float *out = a.out + (size_t)u * 2 * V;
        for (uint32_t c = 0; c < per_unit; ++c, ++it) {
            if ((it / Gm::SPI) % Gm::GROUPS != group)
                continue;
            const uint32_t s = it % kStages;
            mb_wait(&full[s], (it / kStages) & 1u);
            consume<ST, F>(stages + s * kStageBytes, c, wi, buf, out);
            if constexpr (Gm::BLOCK64)
                __syncwarp();
            mb_arrive(&empty[s]);
        }
        mb_arrive(&bempty[b]);
    }
}

/* The read bound: every 16 bytes of the pool once, 4 loads in flight. */
__global__ void read_pass(const uint4 *p, size_t n, uint32_t *sink)
{
    uint32_t x = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w)
                         : "l"(p + i + k * stride));
#pragma unroll
        for (int k = 0; k < 4; ++k)
            x ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    for (; i < n; i += stride)
        x ^= p[i].x ^ p[i].w;
    if (x == 0x9e3779b9u)
        sink[0] = x;
}

/* ------------------------------------------------------------------ host */

static uint16_t bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float f_of_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void split_bf16(float x, uint16_t &hi, uint16_t &lo)
{
    hi = bf16_of(x);
    lo = bf16_of(x - f_of_bf16(hi));
}
static uint32_t tf32_of(float x) /* round to nearest, ties away, as cvt.rna */
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u + 0x1000u) & 0xffffe000u;
}
static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

struct Unit {
    float q[K], k[K], cq[J], ck[J];
    uint16_t d[J][V];
};

/* A unit's side record in every form's shape. */
static void make_record(const Unit &x, int st, uint8_t *rec)
{
    memset(rec, 0, kRec);
    memcpy(rec + kQK, x.q, 4 * K);
    memcpy(rec + kQK + 4 * K, x.k, 4 * K);
    memcpy(rec + kCJ, x.cq, 4 * J);
    memcpy(rec + kCJ + 4 * J, x.ck, 4 * J);
    memcpy(rec + kD, x.d, 2 * J * V);
    /* ring fragment: B[j][n], columns q hi, k hi, q lo, k lo */
    uint16_t *frc = reinterpret_cast<uint16_t *>(rec + kFRC);
    for (int j = 0; j < J; ++j)
        for (int col = 0; col < 2; ++col) {
            uint16_t hi, lo;
            split_bf16(col ? x.ck[j] : x.cq[j], hi, lo);
            for (int part = 0; part < 2; ++part) {
                const int n = 2 * part + col, lane = 4 * n + (j % 8) / 2;
                frc[(lane * 2 + j / 8) * 2 + j % 2] = part ? lo : hi;
            }
        }
    /* B fragments: column n (q hi, k hi, q lo, k lo) of lane (n, t); word w, half e of k-step s
     * holds the channel the A layout puts there (permuted: mma's 16-byte loads; natural: ldmatrix) */
    auto put = [&](int off, int s, int n, int t, int w, int e, int c) {
        const float v = n % 2 ? x.k[c] : x.q[c];
        if (st == 2) {
            uint16_t hi, lo;
            split_bf16(v, hi, lo);
            reinterpret_cast<uint16_t *>(rec + off)[((s * 32 + 4 * n + t) * 2 + w) * 2 + e] = n < 2 ? hi : lo;
        } else {
            const uint32_t hi = tf32_of(v), lo = tf32_of(v - f_of(hi));
            reinterpret_cast<uint32_t *>(rec + off)[(s * 32 + 4 * n + t) * 2 + w] = n < 2 ? hi : lo;
        }
    };
    for (int n = 0; n < 4; ++n)
        for (int t = 0; t < 4; ++t) {
            if (st == 2) {
                for (int s = 0; s < 8; ++s)
                    for (int w = 0; w < 2; ++w)
                        for (int e = 0; e < 2; ++e) {
                            const int G = s / 2, h = s % 2;
                            put(kFRQ, s, n, t, w, e, 32 * G + 8 * t + 4 * h + 2 * w + e);
                            put(kFRQN, s, n, t, w, e, 16 * s + 8 * w + 2 * t + e);
                        }
            } else {
                for (int s = 0; s < 16; ++s)
                    for (int w = 0; w < 2; ++w) {
                        put(kFRQ, s, n, t, w, 0, 16 * (s / 2) + 4 * t + 2 * (s % 2) + w);
                        put(kFRQN, s, n, t, w, 0, 8 * s + t + 4 * w);
                    }
            }
        }
    /* B^T [8][K] for wgmma, boxes of 128-byte rows, swizzled */
    for (int n = 0; n < 4; ++n)
        for (int c = 0; c < K; ++c) {
            const float v = n % 2 ? x.k[c] : x.q[c];
            if (st == 2) {
                uint16_t hi, lo;
                split_bf16(v, hi, lo);
                const int box = c / 64, cc = c % 64, chunk = cc / 8;
                const int at = box * 1024 + n * 128 + ((chunk ^ n) << 4) + (cc % 8) * 2;
                memcpy(rec + kBT + at, n < 2 ? &hi : &lo, 2);
            } else {
                const uint32_t hi = tf32_of(v), lo = tf32_of(v - f_of(hi));
                const uint32_t w = n < 2 ? hi : lo;
                const int box = c / 32, cc = c % 32, chunk = cc / 4;
                const int at = box * 1024 + n * 128 + ((chunk ^ n) << 4) + (cc % 4) * 4;
                memcpy(rec + kBT + at, &w, 4);
            }
        }
}

typedef CUresult (*EncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static CUtensorMap tensor_map(const void *base, int st, uint64_t rows, int box_rows)
{
    static EncodeTiled encode = nullptr;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void **>(&encode), 12000,
                                            cudaEnableDefault, &q));
        if (!encode) {
            fprintf(stderr, "no cuTensorMapEncodeTiled\n");
            exit(1);
        }
    }
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)K, rows};
    const cuuint64_t strides[1] = {(cuuint64_t)K * (st == 2 ? 2 : 4)};
    const cuuint32_t box[2] = {(cuuint32_t)(st == 2 ? 64 : 32), (cuuint32_t)box_rows};
    const cuuint32_t estr[2] = {1, 1};
    const CUresult r = encode(&m, st == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2,
                              const_cast<void *>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", (int)r);
        exit(1);
    }
    return m;
}

template <int ST, int F> struct Kern {
    static void *fn() { return reinterpret_cast<void *>(readout<ST, F>); }
};
static void *kernel_of(int st, int f)
{
    void *t2[NFORMS] = {Kern<2, FFMA>::fn(), Kern<2, MMA>::fn(), Kern<2, LDSM>::fn(), Kern<2, WGMMA>::fn()};
    void *t4[NFORMS] = {Kern<4, FFMA>::fn(), Kern<4, MMA>::fn(), Kern<4, LDSM>::fn(), Kern<4, WGMMA>::fn()};
    return st == 2 ? t2[f] : t4[f];
}
static int box_rows_of(int st, int f) { return st == 2 ? 64 : (f == WGMMA ? 64 : 32); }

int main(int argc, char **argv)
{
    std::vector<int> batches = {64, 256};
    size_t pool_mib = 256;
    int reps = 20;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            batches.clear();
            for (char *t = strtok(argv[++i], ","); t; t = strtok(nullptr, ","))
                batches.push_back(atoi(t));
        } else if (!strcmp(argv[i], "--pool-mib") && i + 1 < argc) {
            pool_mib = (size_t)atol(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--batches 64,256] [--pool-mib 256] [--reps 20]\n", argv[0]);
            return 2;
        }
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const size_t smem = (size_t)kStages * kStageBytes + (size_t)kBufs * kRec + (2 * kStages + 2 * kBufs) * 8;
    printf("readout microbenchmark: %s, %d SMs, L2 %d MiB, %zu B shared per CTA\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, smem);
    uint32_t *sink;
    CK(cudaMalloc(&sink, 4));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    srand(7);
    auto rnd = [] { return (float)rand() / (float)RAND_MAX - 0.5f; };
    printf("%-5s %5s %-6s %10s %9s %8s %5s %10s\n", "state", "batch", "form", "us/launch", "GB/s", "%read", "regs",
           "rel.err");
    for (int st : {2, 4}) {
        for (int B : batches) {
            const uint32_t units = (uint32_t)B * HV;
            const size_t ubytes = (size_t)V * K * st, lbytes = units * ubytes;
            const uint32_t layers = (uint32_t)std::max<size_t>(2, (pool_mib << 20) / lbytes + 1);
            const size_t sbytes = lbytes * layers;
            uint8_t *state, *side;
            float *out;
            CK(cudaMalloc(&state, sbytes));
            CK(cudaMalloc(&side, (size_t)units * kRec));
            CK(cudaMalloc(&out, (size_t)units * 2 * V * 4));
            /* random state (bf16 or fp32 values in [-0.5, 0.5)) and records */
            std::vector<uint8_t> hs(lbytes);
            for (size_t i = 0; i < lbytes / st; ++i) {
                const float x = rnd();
                if (st == 2) {
                    const uint16_t h = bf16_of(x);
                    memcpy(&hs[i * 2], &h, 2);
                } else {
                    memcpy(&hs[i * 4], &x, 4);
                }
            }
            for (uint32_t l = 0; l < layers; ++l)
                CK(cudaMemcpy(state + l * lbytes, hs.data(), lbytes, cudaMemcpyHostToDevice));
            std::vector<Unit> ux(units);
            std::vector<uint8_t> recs((size_t)units * kRec);
            for (uint32_t u = 0; u < units; ++u) {
                Unit &x = ux[u];
                for (int c = 0; c < K; ++c)
                    x.q[c] = rnd() * 0.2f, x.k[c] = rnd() * 0.2f;
                for (int j = 0; j < J; ++j) {
                    x.cq[j] = j < NRING ? rnd() : 0.0f;
                    x.ck[j] = j < NRING ? rnd() : 0.0f;
                    for (int v = 0; v < V; ++v)
                        x.d[j][v] = j < NRING ? bf16_of(rnd()) : 0;
                }
                make_record(x, st, &recs[(size_t)u * kRec]);
            }
            CK(cudaMemcpy(side, recs.data(), recs.size(), cudaMemcpyHostToDevice));

            /* the read bound over the same bytes */
            const int rgrid = prop.multiProcessorCount * 4;
            read_pass<<<rgrid, 512>>>(reinterpret_cast<const uint4 *>(state), sbytes / 16, sink);
            CK(cudaDeviceSynchronize());
            CK(cudaEventRecord(e0));
            for (int r = 0; r < reps; ++r)
                read_pass<<<rgrid, 512>>>(reinterpret_cast<const uint4 *>(state), sbytes / 16, sink);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            const double read_gbs = (double)sbytes * reps / (ms * 1e-3) / 1e9;
            printf("%-5s %5d %-6s %10.2f %9.0f %7.1f%% %5s %10s\n", st == 2 ? "bf16" : "fp32", B, "read",
                   ms * 1e3 / reps * lbytes / sbytes, read_gbs, 100.0, "-", "-");

            for (int f = 0; f < NFORMS; ++f) {
                void *fn = kernel_of(st, f);
                CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                cudaFuncAttributes fa;
                CK(cudaFuncGetAttributes(&fa, fn));
                std::vector<CUtensorMap> maps(layers);
                for (uint32_t l = 0; l < layers; ++l)
                    maps[l] = tensor_map(state + l * lbytes, st, (uint64_t)units * V, box_rows_of(st, f));
                const int grid = (int)std::min<uint32_t>(units, (uint32_t)prop.multiProcessorCount);
                auto launch = [&](uint32_t l) {
                    Args a{state + l * lbytes, side, out, units};
                    void *params[2] = {&a, &maps[l]};
                    CK(cudaLaunchKernel(fn, dim3(grid), dim3(kThreads), params, smem, 0));
                };
                CK(cudaMemset(out, 0xff, (size_t)units * 2 * V * 4));
                launch(0);
                CK(cudaDeviceSynchronize());
                /* float64 reference of sampled units (layer 0) */
                std::vector<float> ho((size_t)units * 2 * V);
                CK(cudaMemcpy(ho.data(), out, ho.size() * 4, cudaMemcpyDeviceToHost));
                double num = 0.0, den = 0.0;
                for (uint32_t u = 0; u < units; u += 97) {
                    const Unit &x = ux[u];
                    for (int v = 0; v < V; ++v) {
                        double rq = 0.0, rk = 0.0;
                        for (int c = 0; c < K; ++c) {
                            float s;
                            const size_t at = ((size_t)u * V * K + (size_t)v * K + c);
                            if (st == 2) {
                                uint16_t h;
                                memcpy(&h, &hs[at * 2], 2);
                                s = f_of_bf16(h);
                            } else {
                                memcpy(&s, &hs[at * 4], 4);
                            }
                            rq += (double)s * x.q[c];
                            rk += (double)s * x.k[c];
                        }
                        for (int j = 0; j < NRING; ++j) {
                            rq += (double)f_of_bf16(x.d[j][v]) * x.cq[j];
                            rk += (double)f_of_bf16(x.d[j][v]) * x.ck[j];
                        }
                        const double oq = ho[(size_t)u * 2 * V + v], ok = ho[(size_t)u * 2 * V + V + v];
                        num += (oq - rq) * (oq - rq) + (ok - rk) * (ok - rk);
                        den += rq * rq + rk * rk;
                    }
                }
                const double err = sqrt(num / den);
                for (uint32_t l = 0; l < layers; ++l)
                    launch(l);
                CK(cudaDeviceSynchronize());
                std::vector<float> times;
                for (int t = 0; t < 5; ++t) {
                    CK(cudaEventRecord(e0));
                    for (int r = 0; r < reps; ++r)
                        for (uint32_t l = 0; l < layers; ++l)
                            launch(l);
                    CK(cudaEventRecord(e1));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&ms, e0, e1));
                    times.push_back(ms * 1e3f / (reps * layers));
                }
                std::sort(times.begin(), times.end());
                const double us = times[2], gbs = (double)lbytes / (us * 1e-6) / 1e9;
                printf("%-5s %5d %-6s %10.2f %9.0f %7.1f%% %5d %10.2e%s\n", st == 2 ? "bf16" : "fp32", B,
                       kFormName[f], us, gbs, 100.0 * gbs / read_gbs, fa.numRegs, err,
                       !(err < 1e-5) ? (f == WGMMA && st == 4 ? "  (1xTF32)" : "  INCORRECT") : "");
            }
            CK(cudaFree(state));
            CK(cudaFree(side));
            CK(cudaFree(out));
        }
    }
    return 0;
}
