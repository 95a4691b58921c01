// One decode step of a gated linear-attention layer (GDN or KDA), for one
// (value head, batch row, layer) per workgroup: the exact semantics of
// DESIGN.md §1 and the team brief.
//
// Variants, by -D (one SPIR-V module each):
//   RSSM_REPLAY 0   packed decode: read S, S <- S*alpha + d k^T, every step
//   RSSM_REPLAY 1   ReplaySSM decode: factored readout from the checkpoint C
//                   and the ring; append to the ring, or on a flush write
//                   C' = C*diag(alpha*Gamma) + [D | d] [KK ; k] (rank n+1)
//   RSSM_TILES 0    portable: subgroup arithmetic and shared memory; the
//                   flush is fused into the readout's row loop
//   RSSM_TILES 1,2  `_cm`: the flush is a [V x (n+1)] x [(n+1) x K] product
//                   through tile.glsl (1: KHR cooperative matrix, 2: emulated)
// With L = 1 the replay module does exactly the packed module's arithmetic in
// the same order (`precise` keeps the compiler from fusing differently), so
// the two agree bit for bit.
//
// Work split: the workgroup is SG_COUNT subgroups. Per-channel work (gates,
// decays, ring coefficients) is spread over all invocations; the V state rows
// go round-robin to subgroups, whose invocations split a row's K channels in
// quads and reduce with subgroupAdd. 16-bit arrays are written in whole words.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#if RSSM_TILES == 1
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif

#include "rssm_layout.h"
#include "dtype.glsl"

#ifndef RSSM_REPLAY
#error "define RSSM_REPLAY (0: packed, 1: replay)"
#endif
#ifndef RSSM_TILES
#define RSSM_TILES 0
#endif
#if RSSM_TILES != 0 && RSSM_REPLAY == 0
#error "the _cm variants are replay kernels: the packed update is rank 1"
#endif

// Specialization constants; the host (vk/vk_pipeline.c) sets every one.
layout(constant_id = 0) const uint GATE_KIND = 0u;  // RSSM_CODE_GATE_*
layout(constant_id = 1) const uint HEAD_K = 128u;
layout(constant_id = 2) const uint HEAD_V = 128u;
layout(constant_id = 3) const uint RING_LEN = 16u;  // 1 for the packed module
layout(constant_id = 4) const uint SG_SIZE = 32u;   // the pipeline requires it
layout(constant_id = 5) const uint STATE_DT = 0u;   // RSSM_CODE_DTYPE_*
layout(constant_id = 6) const uint RING_DT = 1u;
layout(constant_id = 7) const uint IO_DT = 0u;
layout(constant_id = 8) const uint TILE_M = 16u;
layout(constant_id = 9) const uint TILE_N = 16u;
layout(constant_id = 10) const uint TILE_K = 16u;
layout(local_size_x_id = 11) in;                    // SG_COUNT * SG_SIZE

// Must match VK_SUBGROUPS_PER_WORKGROUP in vk/vk_internal.h.
const uint SG_COUNT = 4u;
const uint WG_SIZE = SG_COUNT * SG_SIZE;
const uint RING_CAP = RING_LEN - 1u;
// Channel quads one invocation holds of a state row.
const uint ROW_QUADS = (HEAD_K / 4u + SG_SIZE - 1u) / SG_SIZE;

layout(push_constant) uniform Params { RSSM_KERNEL_PARAMS_GLSL } params;

layout(std430, binding = 0) buffer Pool { uint w[]; } pool;
layout(std430, binding = 1) readonly buffer Header { uint w[]; } hdr;
layout(std430, binding = 2) readonly buffer Q { uint w[]; } qbuf;
layout(std430, binding = 3) readonly buffer Kb { uint w[]; } kbuf;
layout(std430, binding = 4) readonly buffer Vb { uint w[]; } vbuf;
layout(std430, binding = 5) readonly buffer Gate { float w[]; } gate;
layout(std430, binding = 6) readonly buffer Beta { float w[]; } beta_in;
layout(std430, binding = 7) readonly buffer ALog { float w[]; } a_log;
layout(std430, binding = 8) readonly buffer DtBias { float w[]; } dt_bias;
layout(std430, binding = 9) writeonly buffer Out { uint w[]; } outbuf;

RSSM_DEFINE_LOADS(pool, pool)
RSSM_DEFINE_STORES(pool, pool)
RSSM_DEFINE_LOADS(qin, qbuf)
RSSM_DEFINE_LOADS(kin, kbuf)
RSSM_DEFINE_LOADS(vin, vbuf)

// Written in pairs only (writeonly: no loads); i even, counted from word `base`.
void out_store2(uint base, uint i, vec2 x)
{
    if (IO_DT == RSSM_CODE_DTYPE_F32) {
        outbuf.w[base + i] = floatBitsToUint(x.x);
        outbuf.w[base + i + 1u] = floatBitsToUint(x.y);
    } else {
        outbuf.w[base + (i >> 1)] = rssm_to16(IO_DT, x.x) | (rssm_to16(IO_DT, x.y) << 16);
    }
}

shared float s_q[HEAD_K];   // normalised, scaled q
shared float s_k[HEAD_K];   // normalised k (unscaled: what the ring stores)
shared float s_g[HEAD_K];   // this step's log-decay (KDA; GDN uses s_g[0])
shared float s_ag[HEAD_K];  // alpha * Gamma
shared float s_d[HEAD_V];   // d, full precision
shared float s_o[HEAD_V];
shared vec4 s_red[SG_COUNT];

#if RSSM_REPLAY
shared float s_gam[RING_LEN];  // GDN: alpha * gamma_j
shared float s_cq[RING_LEN];   // c_j(q)
shared float s_ck[RING_LEN];   // c_j(k)
#endif

#if RSSM_TILES != 0
#include "tile.glsl"
// Padded extents of the flush product: rows V, inner n+1 (at most L), cols K.
const uint PAD_V = (HEAD_V + TILE_M - 1u) / TILE_M * TILE_M;
const uint PAD_J = (RING_LEN + TILE_K - 1u) / TILE_K * TILE_K;
const uint PAD_K = (HEAD_K + TILE_N - 1u) / TILE_N * TILE_N;
shared TILE_AB_T s_dx[PAD_V * PAD_J];  // [V][j]: d_0..d_{n-1}, d, zeros
shared TILE_AB_T s_kx[PAD_J * PAD_K];  // [j][K]: KK_0..KK_{n-1}, k, zeros
#if RSSM_TILES == 1
const uint KK_STRIDE = HEAD_K;
shared float s_kk[RING_LEN * HEAD_K];  // fp32 KK for the readout
const uint TILE_SCRATCH = TILE_M * TILE_N;
#else
// The emulation keeps KK in fp32 in s_kx itself and rounds on tile load.
#define s_kk s_kx
const uint KK_STRIDE = PAD_K;
const uint TILE_SCRATCH = TILE_M * TILE_K + TILE_K * TILE_N;  // >= TILE_M*TILE_N
#endif
shared float s_tile[SG_COUNT * TILE_SCRATCH];
#elif RSSM_REPLAY
const uint KK_STRIDE = HEAD_K;
shared float s_kk[RING_LEN * HEAD_K];  // KK_j[c] = k_j[c] gamma_j[c] alpha[c]
#endif

// Sums a vec4 over the workgroup; every invocation gets the total. Also a
// full barrier for shared memory written before it.
vec4 workgroup_sum(vec4 x)
{
    x = subgroupAdd(x);
    if (subgroupElect())
        s_red[gl_SubgroupID] = x;
    barrier();
    vec4 t = vec4(0.0);
    for (uint i = 0u; i < SG_COUNT; i++)
        t += s_red[i];
    barrier();
    return t;
}

float sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }

// log(1 + x) without losing x when it is tiny (GLSL has no log1p).
float log1p_(float x)
{
    float u = 1.0 + x;
    return u == 1.0 ? x : log(u) * (x / (u - 1.0));
}

// The log-decay from the gate input `a` (PRECOMPUTED: a is g).
float gate_g(float a, float alog, float bias)
{
    if (params.gate_mode == RSSM_CODE_MODE_PRECOMPUTED)
        return a;
    float x = a + bias;
    if (params.gate_mode == RSSM_CODE_MODE_RAW)
        return -exp(alog) * (x > RSSM_SOFTPLUS_THRESHOLD ? x : log1p_(exp(x)));
    return params.gate_lower_bound * sigmoid(exp(alog) * x);
}

void main()
{
    const uint hv = gl_WorkGroupID.x, row = gl_WorkGroupID.y, layer = gl_WorkGroupID.z;
    const uint t = gl_LocalInvocationIndex, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    if (row >= hdr.w[RSSM_HEADER_ROWS])
        return; // idle row: uniform for the whole workgroup
    const uint hrow = RSSM_HEADER_WORDS + row * RSSM_ROW_WORDS;
    const uint slot = hdr.w[hrow + RSSM_ROW_SLOT];
#if RSSM_REPLAY
    // min(): a corrupt header must not send the kernel outside the ring.
    const uint n = min(hdr.w[hrow + RSSM_ROW_WRITE_POS], RING_CAP);
    const bool flush = n == RING_CAP || hdr.w[hrow + RSSM_ROW_FORCE] != 0u;
#else
    const uint n = 0u;
    const bool flush = true;
#endif
    const uint HV = params.num_v_heads, H = params.num_qk_heads, K = HEAD_K, V = HEAD_V;
    const uint h = hv / (HV / H);
    const bool kda = GATE_KIND == RSSM_CODE_GATE_KDA;

    // Word offsets. slot * slot_bytes may pass 2^32; the word index may not.
    const uint lw = slot * (params.slot_bytes / 4u) + layer * (params.layer_bytes / 4u);
    const uint c_base = lw;                               // C [HV][V][K]
    const uint c_elem = hv * V * K;                       // this head's rows
    const uint rd_base = lw + params.ring_d_offset / 4u;  // [HV][cap][V]
    const uint rk_base = lw + params.ring_k_offset / 4u;  // [H][cap][K]
    const uint rg_base = lw + params.ring_g_offset / 4u;  // [HV][cap] or [HV][cap][K]
    const uint lr = layer * params.max_rows + row;
    const uint qk_elem = (lr * H + h) * K;
    const uint v_elem = (lr * HV + hv) * V;
    const uint g_index = kda ? (lr * HV + hv) * K : lr * HV + hv;

    // ---- 1. q, k, gate, beta ------------------------------------------------
    vec4 part = vec4(0.0);
    for (uint c = t; c < K; c += WG_SIZE) {
        float qc = qin_load(IO_DT, 0u, qk_elem + c), kc = kin_load(IO_DT, 0u, qk_elem + c);
        s_q[c] = qc;
        s_k[c] = kc;
        part += vec4(qc * qc, kc * kc, qc * kc, 0.0);
    }
    const vec4 sums = workgroup_sum(part);
    const bool l2 = (params.flags & RSSM_FLAG_QK_L2NORM) != 0u;
    const float rq = l2 ? 1.0 / sqrt(sums.x + RSSM_L2NORM_EPS) : 1.0;
    const float rk = l2 ? 1.0 / sqrt(sums.y + RSSM_L2NORM_EPS) : 1.0;
    const float qs = rq * params.q_scale;
    const float kq = sums.z * qs * rk; // (k . q) of the normalised, scaled vectors

    float beta = beta_in.w[lr * HV + hv];
    if (params.gate_mode != RSSM_CODE_MODE_PRECOMPUTED)
        beta = sigmoid(beta);
    // GDN: one decay; every invocation computes it.
    const float g_head = kda ? 0.0 : gate_g(gate.w[g_index], a_log.w[layer * HV + hv], dt_bias.w[layer * HV + hv]);

#if RSSM_REPLAY
    // GDN: s = sum of the ring's g from the newest entry back, in fp32; each
    // invocation walks it and keeps exp() of the entries it owns.
    float gdn_s = 0.0;
    if (!kda) {
        const float alpha = exp(g_head);
        for (uint jj = 0u; jj < n; jj++) {
            uint j = n - 1u - jj;
            if (j % WG_SIZE == t)
                s_gam[j] = alpha * exp(gdn_s);
            gdn_s += uintBitsToFloat(pool.w[rg_base + hv * RING_CAP + j]);
        }
        barrier();
    }
#endif

    // Per channel: normalise, decays, ring coefficients KK_j[c].
    for (uint c = t; c < K; c += WG_SIZE) {
        const float qn = s_q[c] * qs, kn = s_k[c] * rk;
        s_q[c] = qn;
        s_k[c] = kn;
        float g = g_head;
        if (kda) {
            g = gate_g(gate.w[g_index + c], a_log.w[layer * HV + hv],
                       dt_bias.w[(layer * HV + hv) * K + c]);
            s_g[c] = g;
        }
        const float alpha = exp(g);
        float Gamma = 1.0;
#if RSSM_REPLAY
        if (kda) {
            float s = 0.0;
            for (uint jj = 0u; jj < n; jj++) {
                uint j = n - 1u - jj;
                float kj = pool_load(RING_DT, rk_base, (h * RING_CAP + j) * K + c);
                s_kk[j * KK_STRIDE + c] = kj * (exp(s) * alpha);
                s += uintBitsToFloat(pool.w[rg_base + (hv * RING_CAP + j) * K + c]);
            }
            if (n > 0u)
                Gamma = exp(s);
        } else {
            for (uint j = 0u; j < n; j++)
                s_kk[j * KK_STRIDE + c] = pool_load(RING_DT, rk_base, (h * RING_CAP + j) * K + c) * s_gam[j];
            if (n > 0u)
                Gamma = exp(gdn_s);
        }
#endif
        s_ag[c] = alpha * Gamma;
    }
    if (!kda && t == 0u)
        s_g[0] = g_head;
    barrier();

#if RSSM_REPLAY
    // c_j(q), c_j(k): one subgroup per ring entry.
    for (uint j = sg; j < n; j += SG_COUNT) {
        float pq = 0.0, pk = 0.0;
        for (uint c = lane; c < K; c += SG_SIZE) {
            float kk = s_kk[j * KK_STRIDE + c];
            pq += kk * s_q[c];
            pk += kk * s_k[c];
        }
        pq = subgroupAdd(pq);
        pk = subgroupAdd(pk);
        if (subgroupElect()) {
            s_cq[j] = pq;
            s_ck[j] = pk;
        }
    }
    barrier();
#endif

    // ---- 2. readout, row by row (and the portable flush) ---------------------
    for (uint v = sg; v < V; v += SG_COUNT) {
        vec4 crow[ROW_QUADS];
        precise float pq = 0.0, pk = 0.0;
        for (uint i = 0u; i < ROW_QUADS; i++) {
            const uint c = (lane + i * SG_SIZE) * 4u;
            if (c < K) {
                const vec4 cv = pool_load4(STATE_DT, c_base, c_elem + v * K + c);
                const vec4 ag = vec4(s_ag[c], s_ag[c + 1u], s_ag[c + 2u], s_ag[c + 3u]);
                const vec4 wq = ag * vec4(s_q[c], s_q[c + 1u], s_q[c + 2u], s_q[c + 3u]);
                const vec4 wk = ag * vec4(s_k[c], s_k[c + 1u], s_k[c + 2u], s_k[c + 3u]);
                crow[i] = cv;
                pq += cv.x * wq.x;
                pq += cv.y * wq.y;
                pq += cv.z * wq.z;
                pq += cv.w * wq.w;
                pk += cv.x * wk.x;
                pk += cv.y * wk.y;
                pk += cv.z * wk.z;
                pk += cv.w * wk.w;
            }
        }
#if RSSM_REPLAY
        for (uint j = lane; j < n; j += SG_SIZE) {
            const float dj = pool_load(RING_DT, rd_base, (hv * RING_CAP + j) * V + v);
            pq += dj * s_cq[j];
            pk += dj * s_ck[j];
        }
#endif
        const float sq = subgroupAdd(pq), sk = subgroupAdd(pk);
        precise const float d = beta * (vin_load(IO_DT, 0u, v_elem + v) - sk);
        precise const float o = sq + d * kq;
        if (subgroupElect()) {
            s_d[v] = d;
            s_o[v] = o;
        }
#if RSSM_TILES == 0
        if (flush) {
            // C'[v] = C[v]*alpha*Gamma + sum_j d_j[v] KK_j + d k: this row
            // was just read into registers and is written once.
            for (uint i = 0u; i < ROW_QUADS; i++) {
                const uint c = (lane + i * SG_SIZE) * 4u;
                if (c < K) {
                    precise vec4 r = crow[i] * vec4(s_ag[c], s_ag[c + 1u], s_ag[c + 2u], s_ag[c + 3u]);
#if RSSM_REPLAY
                    for (uint j = 0u; j < n; j++) {
                        const float dj = pool_load(RING_DT, rd_base, (hv * RING_CAP + j) * V + v);
                        const uint kk = j * KK_STRIDE + c;
                        r += dj * vec4(s_kk[kk], s_kk[kk + 1u], s_kk[kk + 2u], s_kk[kk + 3u]);
                    }
#endif
                    r += d * vec4(s_k[c], s_k[c + 1u], s_k[c + 2u], s_k[c + 3u]);
                    pool_store4(STATE_DT, c_base, c_elem + v * K + c, r);
                }
            }
        }
#endif
    }
    barrier();

#if RSSM_TILES != 0
    // ---- 2b. the flush as a matrix product, tile by tile --------------------
    if (flush) {
        const uint jp = (n + 1u + TILE_K - 1u) / TILE_K * TILE_K; // inner extent used
        for (uint idx = t; idx < PAD_V * jp; idx += WG_SIZE) {
            const uint v = idx / jp, j = idx % jp;
            float x = 0.0;
            if (v < V)
                x = j < n ? pool_load(RING_DT, rd_base, (hv * RING_CAP + j) * V + v)
                          : (j == n ? s_d[v] : 0.0);
            s_dx[v * PAD_J + j] = TILE_AB_T(x);
        }
        for (uint idx = t; idx < jp * PAD_K; idx += WG_SIZE) {
            const uint j = idx / PAD_K, c = idx % PAD_K;
#if RSSM_TILES == 2
            if (j < n && c < K)
                continue; // s_kk is s_kx: KK_j is already in place
#endif
            float x = 0.0;
            if (c < K)
                x = j < n ? s_kk[j * KK_STRIDE + c] : (j == n ? s_k[c] : 0.0);
            s_kx[j * PAD_K + c] = TILE_AB_T(x);
        }
        barrier();

        // Every subgroup runs the same number of rounds, a spare one on a
        // duplicate of the last tile without storing it: the subgroup
        // barriers then sit in workgroup-uniform control flow, which lavapipe
        // needs (it otherwise drops the rest of the shader).
        const uint tiles_k = PAD_K / TILE_N, tiles = (PAD_V / TILE_M) * tiles_k;
        const uint tile_scratch = sg * TILE_SCRATCH;
        for (uint round = 0u; round < tiles; round += SG_COUNT) {
            const bool storing = round + sg < tiles;
            const uint tile = min(round + sg, tiles - 1u);
            const uint v0 = (tile / tiles_k) * TILE_M, c0 = (tile % tiles_k) * TILE_N;
            // Accumulator starts as C * diag(alpha Gamma).
            for (uint e = lane; e < TILE_M * TILE_N; e += SG_SIZE) {
                const uint v = v0 + e / TILE_N, c = c0 + e % TILE_N;
                s_tile[tile_scratch + e] =
                    (v < V && c < K) ? pool_load(STATE_DT, c_base, c_elem + v * K + c) * s_ag[c] : 0.0;
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            TILE_C_DECL(acc);
            tile_load_c(acc, s_tile, tile_scratch, TILE_N);
            for (uint j0 = 0u; j0 < jp; j0 += TILE_K) {
                TILE_A_DECL(a);
                TILE_B_DECL(b);
                tile_load_a(a, s_dx, v0 * PAD_J + j0, PAD_J);
                tile_load_b(b, s_kx, j0 * PAD_K + c0, PAD_K);
                tile_mul_add(acc, a, b);
            }
            subgroupBarrier();
            tile_store_c(acc, s_tile, tile_scratch, TILE_N);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane * 2u; e < TILE_M * TILE_N; e += SG_SIZE * 2u) {
                const uint v = v0 + e / TILE_N, c = c0 + e % TILE_N;
                if (storing && v < V && c < K)
                    pool_store2(STATE_DT, c_base, c_elem + v * K + c,
                                vec2(s_tile[tile_scratch + e], s_tile[tile_scratch + e + 1u]));
            }
            subgroupBarrier();
        }
    }
#endif

    // ---- 3. output, and the ring append -------------------------------------
    for (uint p = t * 2u; p < V; p += WG_SIZE * 2u)
        out_store2(0u, v_elem + p, vec2(s_o[p], s_o[p + 1u]));
#if RSSM_REPLAY
    if (!flush) {
        for (uint p = t * 2u; p < V; p += WG_SIZE * 2u)
            pool_store2(RING_DT, rd_base, (hv * RING_CAP + n) * V + p, vec2(s_d[p], s_d[p + 1u]));
        if (hv % (HV / H) == 0u)
            for (uint p = t * 2u; p < K; p += WG_SIZE * 2u)
                pool_store2(RING_DT, rk_base, (h * RING_CAP + n) * K + p, vec2(s_k[p], s_k[p + 1u]));
        if (kda) {
            for (uint c = t; c < K; c += WG_SIZE)
                pool.w[rg_base + (hv * RING_CAP + n) * K + c] = floatBitsToUint(s_g[c]);
        } else if (t == 0u) {
            pool.w[rg_base + hv * RING_CAP + n] = floatBitsToUint(g_head);
        }
    }
#endif
}
