/*
 * What the persistent bulk-copy kernels share (bulk_kernel.cu, the decode
 * step; window_bulk_kernel.cu, the speculative-decode window): the stage
 * geometry, mbarriers and bulk copies, the unit schedule, and the producer
 * that streams checkpoint tiles into shared memory. Why each is as it is:
 * bulk_kernel.cu's header and
 * bench/results/h200/notes.md.
 */
#ifndef RSSM_BULK_COMMON_CUH
#define RSSM_BULK_COMMON_CUH

#include "rssm_cuda.h"

#include "kernel_common.cuh"

namespace rssm_bulk {

using namespace rssm_kc;

constexpr int kMaxK = (int)RSSM_CUDA_MAX_HEAD_K;
constexpr int kJ = (int)RSSM_CUDA_STREAM_MAX_RING;
constexpr int kConsumers = 8;
/* Four 16 KiB stages (64 KiB in flight per SM) cover the memory latency;
 * more only lengthen the queues that the coefficient warps' small loads
 * wait in, and leave less shared memory for coefficient buffers. */
constexpr int kStages = 4;
/* One stage: a checkpoint tile, one bulk copy. */
constexpr int kTileBytes = 16384;
constexpr int kStageBytes = kTileBytes;
/* The most bytes of a unit's ring d [n][V] and of its v [V] (one token's)
 * that its bulk copies move (rssm_cuda_bulk_supported). */
constexpr int kCoDBytes = 8192, kCoVBytes = 1024;

/* What the producer tells the consumers about a stage; flush is a
 * row_meta_flag. */
struct StageMeta {
    uint32_t slot, n, flush, unit;
};

/* The unit queue: the producer publishes the CTA's units kLead ahead of
 * the one it loads, through kUq slots (see Schedule). The lead is small: a
 * CTA commits to the units it has published, so the imbalance between SMs
 * at the end of a launch grows with it. */
constexpr int kLead = 4;
constexpr int kUq = 32;
constexpr uint32_t kNoUnit = 0xffffffffu;

/* ------------------------------------------- mbarriers and bulk copies */

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(uint64_t *b, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(b)) : "memory");
}

__device__ __forceinline__ void bar_expect_tx(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.expect_tx.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void bar_arrive_tx(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(b)), "r"(bytes)
                 : "memory");
}

/* Waits until the phase of parity `parity` has completed. */
__device__ __forceinline__ void bar_wait(uint64_t *b, uint32_t parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}\n" ::"r"(smem_addr(b)),
                 "r"(parity)
                 : "memory");
}

/* `bytes` (a multiple of 16, both addresses 16-byte aligned) global ->
 * shared, completing as transaction bytes on `bar`. Everything a stage loads
 * is read once per visit of its slot, and hundreds of MiB of other slots
 * pass between visits: evict it first from L2. */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar, uint64_t policy)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1], %2, [%3], %4;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
                 : "memory");
}

/* A CTA's barriers, by one thread before the roles start: per stage, full
 * (the producer's one arrival plus the copy's bytes) and empty (every
 * consumer lane that read it releases it itself, which compute-sanitizer's
 * racecheck can follow); per coefficient buffer, full (every lane of the
 * writing warp, plus the bulk copies' bytes) and empty (every consumer
 * lane); per unit-queue slot, the producer's publish. */
__device__ __forceinline__ void init_barriers(uint64_t *full, uint64_t *empty, uint32_t stage_readers, uint64_t *cfull,
                                              uint64_t *cempty, int bufs, uint64_t *ufull, int stages = kStages)
{
    for (int s = 0; s < stages; ++s) {
        bar_init(&full[s], 1);
        bar_init(&empty[s], stage_readers);
    }
    for (int b = 0; b < bufs; ++b) {
        bar_init(&cfull[b], 32);
        bar_init(&cempty[b], 32u * kConsumers);
    }
    for (int q = 0; q < kUq; ++q)
        bar_init(&ufull[q], 1);
    /* the bulk copies (async proxy) must see the initialised barriers */
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ uint64_t evict_first_policy()
{
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

/* The geometry of a stage for state dtype ST: RC value rows (16 KiB at
 * K = 128), RW of them per warp of the consumer group that takes it.
 * fp32 state: the consumer warps split into two groups that take alternate
 * stages, so one stage's latency (shared-memory loads, the row sums'
 * shuffles, the stores) overlaps the other's; 8 rows per warp. bf16 state
 * (twice the rows per stage): one group, 8 rows per warp; two groups would
 * give a warp 16 rows, slower for its registers (bench/results/h200/notes.md). */
template <int ST> struct Geometry {
    static constexpr int SB = ST == kF32 ? 4 : 2;
    static constexpr int RC = kTileBytes / (kMaxK * SB);
    static constexpr int GROUPS = ST == kF32 ? 2 : 1;
    static constexpr int GROUP_WARPS = kConsumers / GROUPS;
    static constexpr int RW = RC / GROUP_WARPS;
    static_assert(RC * SB * kMaxK == kTileBytes && RW * GROUP_WARPS == RC, "stage geometry");
    static_assert(kStages % GROUPS == 0, "a stage always belongs to the same consumer group");
};

/* The CTA's work: a sequence of units (batch row, value head), unit i of
 * the sequence published in uq[i % kUq] and completing phase i / kUq of
 * ufull[i % kUq]. The first kLead are static (blockIdx.x + i gridDim.x),
 * the rest are taken from a counter shared by the grid as the CTA's
 * consumers free their stages, so SMs that the memory system serves faster
 * take more units and all finish together (a fixed split leaves the
 * fastest SMs idle for a good part of a step). The
 * sequence ends with coef_warps kNoUnit entries, one for each coefficient
 * warp; the counter grows monotonically within a launch, so once one unit
 * is past the end every later one is too. The last CTA to stop taking
 * units resets the counters for the next launch on the stream. */
struct Schedule {
    uint32_t *uq;
    uint64_t *ufull;
    uint32_t *work; /* [0] units taken beyond the static ones, [1] CTAs done taking */
    uint32_t units, published, ended, coef_warps;
    uint32_t ticket; /* the next counter value, taken one publish ahead */

    /* The counter's round trip is taken ahead: the ticket for the next
     * dynamic unit is requested when the previous one is used, so the
     * producer thread waits for it only if a whole unit's loads took less
     * time. Tickets are taken in order by this thread alone, so the one
     * left over when the CTA stops is past the end too: no unit is lost. */
    __device__ __forceinline__ void start()
    {
        if (blockIdx.x + (uint32_t)kLead * gridDim.x - gridDim.x < units)
            ticket = atomicAdd(&work[0], 1u);
        else
            ticket = kNoUnit;
    }

    __device__ __forceinline__ void publish_one()
    {
        uint32_t u = kNoUnit;
        if (!ended) {
            if (published < (uint32_t)kLead) {
                u = blockIdx.x + published * gridDim.x;
            } else {
                u = ticket == kNoUnit ? kNoUnit : (uint32_t)kLead * gridDim.x + ticket;
                if (u < units)
                    ticket = atomicAdd(&work[0], 1u);
            }
            if (u >= units) {
                u = kNoUnit;
                __threadfence();
                if (atomicAdd(&work[1], 1u) == gridDim.x - 1u) {
                    atomicExch(&work[0], 0u);
                    atomicExch(&work[1], 0u);
                }
            }
        }
        ended += u == kNoUnit ? 1u : 0u;
        uq[published % kUq] = u;
        bar_arrive(&ufull[published % kUq]);
        ++published;
    }
    /* publishes through unit `upto` of the sequence, or to its end */
    __device__ __forceinline__ void publish_to(uint32_t upto)
    {
        while (published <= upto && ended < coef_warps)
            publish_one();
    }
};

/* Streams the CTA's units through `ns` stages (at most the kernel's
 * barriers: a plan may use fewer than its shared memory holds). */
template <int ST, bool RING, typename Args>
__device__ __forceinline__ void produce(const Args &a, uint8_t *stages, StageMeta *meta, uint64_t *full,
                                        uint64_t *empty, Schedule &sch, uint32_t ns)
{
    using Gm = Geometry<ST>;
    const rssm_kernel_params &p = a.p;
    const uint32_t K = p.head_k, V = p.head_v, HV = p.num_v_heads;
    const uint32_t chunks = V / Gm::RC;
    const uint32_t tile_bytes = (uint32_t)Gm::RC * K * Gm::SB;
    const uint64_t policy = evict_first_policy();
    sch.start();
    sch.publish_to(kLead);
    /* The row header of the next unit is read while this one's loads are
     * issued, so its round trip is not on this thread's path between two
     * units' copies. */
    uint32_t u = sch.uq[0];
    RowStep st{};
    if (u != kNoUnit)
        st = row_step(p, a.b.io, u / HV);
    uint32_t it = 0;
    for (uint32_t ui = 0; u != kNoUnit; ++ui) {
        sch.publish_to(ui + kLead);
        const uint32_t u_next = sch.uq[(ui + 1) % kUq];
        RowStep st_next{};
        if (u_next != kNoUnit)
            st_next = row_step(p, a.b.io, u_next / HV);
        const uint32_t hv = u % HV;
        const uint8_t *C = at_slot(a.b.io.ckpt, a.b.io.ckpt_slot, a.b.io.ckpt_head, st.slot, hv);
        for (uint32_t c = 0; c < chunks; ++c, ++it) {
            const uint32_t s = it % ns;
            if (it >= ns)
                bar_wait(&empty[s], ((it / ns) & 1u) ^ 1u);
            meta[s] = StageMeta{st.slot, RING ? st.n : 0u, row_meta_flag(st), u};
            bar_arrive_tx(&full[s], tile_bytes);
            bulk_load(stages + (size_t)s * kStageBytes, C + (size_t)c * tile_bytes, tile_bytes, &full[s], policy);
        }
        u = u_next;
        st = st_next;
    }
    /* the end markers of every coefficient warp, however many there are
     * beyond kLead */
    sch.publish_to(0xfffffffeu);
}


/* Element e (a compile-time index after unrolling) of 32-bit words w of
 * ring dtype RT, as a float; no address is taken, so w stays in registers. */
template <int RT> __device__ __forceinline__ float ring_word_elem(const uint32_t *w, int e)
{
    if constexpr (RT == kF32)
        return __uint_as_float(w[e]);
    else
        return to_f<RT>((uint16_t)(w[e / 2] >> (16 * (e % 2))));
}

/* R values of the ring dtype at p (R * size a multiple of 8 bytes, p
 * aligned to it) as floats, in as few shared-memory loads as possible. */
template <int RT, int R> __device__ __forceinline__ void load_ring_rows(const typename Raw<RT>::T *p, float *out)
{
    constexpr int PER_WORD = RT == kF32 ? 1 : 2, WORDS = R / PER_WORD;
    uint32_t w[WORDS];
    if constexpr (WORDS == 2) {
        const uint2 v = *reinterpret_cast<const uint2 *>(p);
        w[0] = v.x;
        w[1] = v.y;
    } else {
        static_assert(WORDS % 4 == 0, "8 or 16-byte multiples");
#pragma unroll
        for (int q = 0; q < WORDS / 4; ++q) {
            const uint4 v = reinterpret_cast<const uint4 *>(p)[q];
            w[4 * q] = v.x;
            w[4 * q + 1] = v.y;
            w[4 * q + 2] = v.z;
            w[4 * q + 3] = v.w;
        }
    }
#pragma unroll
    for (int i = 0; i < R; ++i)
        out[i] = ring_word_elem<RT>(w, i);
}

} /* namespace rssm_bulk */

#endif /* RSSM_BULK_COMMON_CUH */
