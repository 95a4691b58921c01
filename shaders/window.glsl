// The speculative-decode window (docs/design.md §9): every draft token of
// every row of one layer (or of every layer of a batch, gl_WorkGroupID.z)
// in one dispatch, the checkpoint read once per window where one step per
// token reads it T times. Included by decode.comp with RSSM_WINDOW 1 (the
// `window` module): the bindings, specialization constants, loads and gate
// arithmetic are the decode shader's.
//
// Token t (0-based) of a row at ring position n sees m = n + t entries, the
// window's earlier tokens among them (docs/design.md §9):
//
//     Sbar_t x = C (alpha_t Gamma_t x) + sum_{j < m} d_j c_j^t(x)
//
// Everything but d_j needs only inputs, so the phases are:
//   A  every token's sums over K (|q|^2, |k|^2, k.q), gates, beta; then its
//      normalised k, appended to the ring with its g as a tentative entry
//      (the q/k head's k by the first value head of the group, as a step)
//   B  per token, one subgroup each: the walk over its m entries, newest
//      first, for the ring coefficients c_j^t and the checkpoint weights
//      alpha_t Gamma_t q_t and alpha_t Gamma_t k_t; a window entry's k and
//      g come from this workgroup's own phase A, never from the ring,
//      which another value head of the q/k head may still be writing
//   C  per block of ROW_BLOCK state rows, read once into registers, the
//      tokens in order: the 2 dot products with the token's weights, the
//      ring part (a window entry's d kept in registers as the ring holds
//      it), d, o, and the append of d at n + t. A row needs only its own
//      earlier d, so a subgroup runs its rows' tokens without barriers.
// Each token does exactly a step's arithmetic in a step's order (the same
// sums over the same lanes, exp of the partial log-decay sums, `precise`),
// so on a device with the same subgroup size its outputs and entries are
// bit for bit those of its single-token step; the checkpoint is never
// written (no token of a window flushes).
//
// Per row (the dispatch's rows: pc.rows; the step arrays' token t of row r
// at row t * rows + r of the layer's block of layer_rows rows):
// T = min(drafts[r], t_max, RING_CAP - n). Binding 3 (a step's force: a
// window has none) holds drafts; pc.rows_word carries t_max (low 16 bits)
// and the first token of this dispatch (high 16 bits): a window longer than
// the pipeline's token capacity T_CAP is dispatched in parts of T_CAP tokens
// (vk/vk_decode.c), each after the one before, and a part's tokens see
// the earlier parts' entries in the ring as committed ones (they are there,
// as the steps would have put them), with n moved past them. A padding row
// zeroes the outputs of the part's tokens; tokens past T are left alone.
// Overflow: per row the first token whose 16-bit ring entry (k or d) its
// dtype cannot hold, by atomicMin over words the host filled with
// UINT32_MAX; the entries are written regardless.

// Window tokens per workgroup, at most: RSSM_MAX_DRAFT, the pipeline's
// token capacity WINDOW_T (the host dispatches a longer window in parts of
// that many: on a GPU the shared arrays below set how many workgroups stay
// resident, docs/design.md §9), and a window fits the ring (T_CAP;
// T_ROOM for the arrays: the same but in an `_rt` module, the `window_rt`
// of a CPU device, where the ring length is a push constant and RING_ROOM
// sizes them, as KQ_ROOM does the channels).
layout(constant_id = RSSM_VK_SPEC_WINDOW_T) const uint WINDOW_T = 16u;
const uint T_LIMIT = WINDOW_T < 16u ? WINDOW_T : 16u;
#if RSSM_RUNTIME_SHAPE
const uint T_ROOM = RING_ROOM - 1u < T_LIMIT ? RING_ROOM - 1u : T_LIMIT;
#define T_CAP min(RING_CAP, T_LIMIT)
#else
const uint T_CAP = RING_CAP < T_LIMIT ? RING_CAP : T_LIMIT;
const uint T_ROOM = T_CAP;
#endif
const uint KDA_ONLY = GATE_KIND == RSSM_CODE_GATE_KDA ? 1u : 0u;
shared vec4 s_wkey[T_ROOM * KQ_ROOM];                          // k_t as the ring holds it
shared vec4 s_wg[1u + (T_ROOM * KQ_ROOM - 1u) * KDA_ONLY];     // KDA: g_t per channel
shared vec4 s_wq[T_ROOM * KQ_ROOM];                            // alpha_t Gamma_t q_t
shared vec4 s_wk[T_ROOM * KQ_ROOM];                            // alpha_t Gamma_t k_t
shared vec2 s_wc[T_ROOM * RING_SLOTS];                         // (c_j^t(q), c_j^t(k))
shared vec4 s_wn[T_ROOM];                                      // q scale, k norm, k.q, beta
shared float s_wgh[T_ROOM];                                    // GDN: g_t
shared float s_wbeta[T_ROOM];
shared vec4 s_wred[T_ROOM * SG_COUNT];                         // the subgroups' sums

// x as ring dtype `dt` holds it.
vec4 ring_round4(uint dt, vec4 x)
{
    if (dt == RSSM_CODE_DTYPE_F32)
        return x;
    return vec4(rssm_from16(dt, rssm_to16(dt, x.x)), rssm_from16(dt, rssm_to16(dt, x.y)),
                rssm_from16(dt, rssm_to16(dt, x.z)), rssm_from16(dt, rssm_to16(dt, x.w)));
}

void main()
{
    const uint hv = gl_WorkGroupID.x / ROW_SPLIT, part = gl_WorkGroupID.x % ROW_SPLIT;
    const uint row = gl_WorkGroupID.y, layer = gl_WorkGroupID.z;
    const uint tid = gl_LocalInvocationIndex, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    const uint rows = pc.rows, t_max = pc.rows_word & 0xffffu, t_first = pc.rows_word >> 16;
    if (row >= rows)
        return;
    const uint rw = row * pc.row_stride;
    const uint slot = row_slot.w[pc.base_slot + rw], write_pos = row_pos.w[pc.base_wpos + rw];
    const uint drafts = row_force.w[pc.base_force + row];
    const uint io_row = pc.base_io != RSSM_VK_NONE ? row_io.w[pc.base_io + rw] : row;
    const uint HV = NUM_V_HEADS, H = NUM_QK_HEADS, K = HEAD_K, V = HEAD_V;
    const uint v_begin = part * (V / ROW_SPLIT), v_end = v_begin + V / ROW_SPLIT;
    const uint ltok = pc.layer_rows != 0u ? pc.layer_rows : rows * t_max; // step-array rows per layer
    // The step-array row of token t; min(): a corrupt row must not index
    // past the arrays.
    // (t: this part's token, t_first + t the window's)
#define TOKEN_ROW(t) (layer * pc.layer_rows + min((t_first + (t)) * rows + io_row, ltok - 1u))
    if (RSSM_ROW_PADS(slot, pc.slots, pc.mode_flags >> 8u)) { // padding: every token's outputs zero, no slot touched
        for (uint t = 0u; t_first + t < t_max && t < T_CAP; t++)
            for (uint p = v_begin + tid * 2u; p < v_end; p += WG_SIZE * 2u)
                out_store2(pc.base_out, TOKEN_ROW(t) * pc.out_row + hv * V + p, vec2(0.0));
        return;
    }
    const uint n0 = min(write_pos, RING_CAP);
    const uint T_all = min(min(drafts, t_max), RING_CAP - n0);
    if (t_first >= T_all)
        return;
    const uint n = n0 + t_first, T = min(T_all - t_first, T_CAP);
    const uint h = hv / (HV / H);
    const bool kda = GATE_KIND == RSSM_CODE_GATE_KDA;
    const uint mode = pc.mode_flags & 0xffu, flags = pc.mode_flags >> 8u;
    const uint gate_dt = (flags & RSSM_FLAG_GATE_BF16) != 0u ? RSSM_CODE_DTYPE_BF16 : RSSM_CODE_DTYPE_F32;
    const bool own = SLOTS_PER_BUFFER == 0u;
    const uint sbuf = own ? 0u : min(slot / SLOTS_PER_BUFFER, RSSM_VK_POOL_BUFFERS - 1u);
    const uint sib = own ? slot : slot % SLOTS_PER_BUFFER;
    g_c = sbuf;
    g_rd = own ? 1u : sbuf;
    g_rk = own ? 2u : sbuf;
    g_rg = own ? 3u : sbuf;
    const uint lw = layer * LAYER_WORDS;
    const uint c_base = pc.base_c + lw, c_elem = sib * CK_SLOT + hv * CK_HEAD;
    const uint rd_base = pc.base_rd + lw, rd_elem = sib * RD_SLOT + hv * RD_HEAD;
    const uint rk_base = pc.base_rk + lw, rk_elem = sib * RK_SLOT + h * RK_HEAD;
    const uint rg_base = pc.base_rg + lw, rg_elem = sib * RG_SLOT + hv * RG_HEAD;
    const uint ah = layer * HV + hv;
    const bool over_on = pc.base_over != RSSM_VK_NONE;

    // ---- A. the tokens' sums, gates and beta ---------------------------------
    // The sums as a step's workgroup_sum forms them (each subgroup's, then
    // the subgroups' in order), all tokens before one barrier.
    for (uint t = 0u; t < T; t++) {
        const uint lr = TOKEN_ROW(t);
        vec4 part_sums = vec4(0.0);
        for (uint cq = tid; cq < KQ; cq += WG_SIZE) {
            const vec4 q4 = qin_load4(IO_DT, pc.base_q, lr * pc.q_row + h * K + 4u * cq);
            const vec4 k4 = kin_load4(IO_DT, pc.base_k, lr * pc.k_row + h * K + 4u * cq);
            part_sums += vec4(dot4(q4, q4), dot4(k4, k4), dot4(q4, k4), 0.0);
            if (kda) {
                const uint c = 4u * cq, gi = lr * pc.gate_row + hv * K + c, bias = ah * K + c;
                const vec4 g = vec4(gate_g(mode, gatein_load(gate_dt, pc.base_gate, gi), ah, bias),
                                    gate_g(mode, gatein_load(gate_dt, pc.base_gate, gi + 1u), ah, bias + 1u),
                                    gate_g(mode, gatein_load(gate_dt, pc.base_gate, gi + 2u), ah, bias + 2u),
                                    gate_g(mode, gatein_load(gate_dt, pc.base_gate, gi + 3u), ah, bias + 3u));
                s_wg[t * KQ + cq] = g;
                if (part == 0u)
                    ring_g4.w[(rg_base + rg_elem + (n + t) * K + c) >> 2] = floatBitsToUint(g);
            }
        }
        const vec4 s = subgroupAdd(part_sums);
        if (subgroupElect())
            s_wred[t * SG_COUNT + sg] = s;
        if (tid == 0u) {
            float beta = betain_load(gate_dt, pc.base_beta, lr * pc.beta_row + hv);
            if (mode != RSSM_CODE_MODE_PRECOMPUTED)
                beta = sigmoid(beta);
            s_wbeta[t] = beta;
            if (!kda) {
                const float g = gate_g(mode, gatein_load(gate_dt, pc.base_gate, lr * pc.gate_row + hv), ah, ah);
                s_wgh[t] = g;
                if (part == 0u)
                    ring_g.w[rg_base + rg_elem + n + t] = floatBitsToUint(g);
            }
        }
    }
    barrier();
    const bool l2 = (flags & RSSM_FLAG_QK_L2NORM) != 0u;
    for (uint t = 0u; t < T; t++) {
        vec4 sums = vec4(0.0);
        for (uint i = 0u; i < SG_COUNT; i++)
            sums += s_wred[t * SG_COUNT + i];
        const float rq = l2 ? 1.0 / sqrt(sums.x + RSSM_L2NORM_EPS) : 1.0;
        const float rk = l2 ? 1.0 / sqrt(sums.y + RSSM_L2NORM_EPS) : 1.0;
        const float qs = rq * pc.q_scale;
        precise const float kq = sums.z * qs * rk;
        if (tid == 0u)
            s_wn[t] = vec4(qs, rk, kq, s_wbeta[t]);
        const uint lr = TOKEN_ROW(t);
        bool over = false;
        for (uint cq = tid; cq < KQ; cq += WG_SIZE) {
            const vec4 kn = kin_load4(IO_DT, pc.base_k, lr * pc.k_row + h * K + 4u * cq) * rk;
            s_wkey[t * KQ + cq] = ring_round4(RING_DT, kn);
            over = over || ring_overflows(RING_DT, kn);
            if (part == 0u && hv % (HV / H) == 0u)
                rk_store4(RING_DT, rk_base, rk_elem + (n + t) * K + 4u * cq, kn);
        }
        if (over && over_on)
            atomicMin(overflow.w[pc.base_over + row], t_first + t);
    }
    barrier();

    // ---- B. ring coefficients and checkpoint weights, a subgroup per token ----
    for (uint t = sg; t < T; t += SG_COUNT) {
        const uint m = n + t, lr = TOKEN_ROW(t);
        const vec4 nrm = s_wn[t];
        vec4 alpha_r[ROW_QUADS], s_r[ROW_QUADS], qn_r[ROW_QUADS], kn_r[ROW_QUADS];
        [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
            const uint cq = lane + i * SG_SIZE, cqc = min(cq, KQ - 1u);
            alpha_r[i] = exp(kda ? s_wg[t * KQ + cqc] : vec4(s_wgh[t]));
            s_r[i] = vec4(0.0);
            qn_r[i] = vec4(0.0);
            kn_r[i] = vec4(0.0);
            if (cq < KQ) {
                qn_r[i] = qin_load4(IO_DT, pc.base_q, lr * pc.q_row + h * K + 4u * cq) * nrm.x;
                kn_r[i] = kin_load4(IO_DT, pc.base_k, lr * pc.k_row + h * K + 4u * cq) * nrm.y;
            }
        }
        // Newest entry first, as a step's walk: KK_j = k_j gamma_j alpha,
        // gamma_j = exp(sum of g_i over j < i < m) in fp32.
        for (uint j = m; j-- > 0u;) {
            const bool ringed = j < n; // committed; else window token j - n
            const float g_one = kda ? 0.0 : (ringed ? uintBitsToFloat(ring_g.w[rg_base + rg_elem + j]) : s_wgh[j - n]);
            vec2 cj = vec2(0.0);
            [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
                const uint cq = lane + i * SG_SIZE;
                if (cq < KQ) {
                    const vec4 kj = ringed ? rk_load4(RING_DT, rk_base, rk_elem + j * K + 4u * cq)
                                           : s_wkey[(j - n) * KQ + cq];
                    precise const vec4 s = s_r[i];
                    const vec4 kk = kj * (decay4(s) * alpha_r[i]);
                    cj += vec2(dot4(kk, qn_r[i]), dot4(kk, kn_r[i]));
                    const vec4 gj = !kda ? vec4(g_one)
                                  : ringed ? uintBitsToFloat(ring_g4.w[(rg_base + rg_elem + j * K + 4u * cq) >> 2])
                                           : s_wg[(j - n) * KQ + cq];
                    s_r[i] = s + gj;
                }
            }
            const vec2 c = subgroupAdd(cj);
            if (subgroupElect())
                s_wc[t * RING_SLOTS + j] = c;
        }
        [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
            const uint cq = lane + i * SG_SIZE;
            if (cq < KQ) {
                const vec4 ag = m > 0u ? alpha_r[i] * exp(s_r[i]) : alpha_r[i];
                s_wq[t * KQ + cq] = ag * qn_r[i];
                s_wk[t * KQ + cq] = ag * kn_r[i];
            }
        }
    }
    barrier();

    // ---- C. the readout, ROW_BLOCK consecutive rows per subgroup ----------------
    // Consecutive, so that a 16-bit output or ring word (a pair of rows) is
    // written whole by the one subgroup that holds both.
    for (uint v0 = v_begin + sg * ROW_BLOCK; v0 < v_end; v0 += ROWS_PER_PASS) {
        vec4 cur[ROW_BLOCK * ROW_QUADS];
        float dl[RING_LANES_ROOM * ROW_BLOCK]; // d_j[v] of entry j = lane + jb * SG_SIZE
        [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r++) {
            const uint v = v0 + r;
            [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
                const uint cq = lane + i * SG_SIZE;
                cur[r * ROW_QUADS + i] = vec4(0.0);
                if (v < v_end && cq < KQ)
                    cur[r * ROW_QUADS + i] = state_load4(c_base, c_elem + v * K + 4u * cq);
            }
            [[unroll]] for (uint jb = 0u; jb < RING_LANES; jb++) {
                const uint j = lane + jb * SG_SIZE;
                dl[jb * ROW_BLOCK + r] = v < v_end && j < n ? RING_D(j, v) : 0.0;
            }
        }
        for (uint t = 0u; t < T; t++) {
            const uint m = n + t, lr = TOKEN_ROW(t);
            precise float pq[ROW_BLOCK], pk[ROW_BLOCK];
            [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r++) {
                const uint v = v0 + r;
                pq[r] = 0.0;
                pk[r] = 0.0;
                [[unroll]] for (uint i = 0u; i < ROW_QUADS; i++) {
                    const uint cq = lane + i * SG_SIZE;
                    if (v < v_end && cq < KQ) {
                        const vec4 cv = cur[r * ROW_QUADS + i];
                        const vec4 wq = s_wq[t * KQ + cq], wk = s_wk[t * KQ + cq];
                        pq[r] += cv.x * wq.x;
                        pq[r] += cv.y * wq.y;
                        pq[r] += cv.z * wq.z;
                        pq[r] += cv.w * wq.w;
                        pk[r] += cv.x * wk.x;
                        pk[r] += cv.y * wk.y;
                        pk[r] += cv.z * wk.z;
                        pk[r] += cv.w * wk.w;
                    }
                }
                [[unroll]] for (uint jb = 0u; jb < RING_LANES; jb++) {
                    const uint j = lane + jb * SG_SIZE;
                    if (v < v_end && j < m) {
                        const float dj = dl[jb * ROW_BLOCK + r];
                        const vec2 c = s_wc[t * RING_SLOTS + j];
                        pq[r] += dj * c.x;
                        pk[r] += dj * c.y;
                    }
                }
            }
            precise vec4 sq = vec4(pq[0], pq[1], pq[2], pq[3]);
            precise vec4 sk = vec4(pk[0], pk[1], pk[2], pk[3]);
            subgroup_sum_rows(sq, sk); // as a step's readout (shaders/decode.comp)
            const vec4 nrm = s_wn[t];
            const float beta = nrm.w, kq = nrm.z;
            float d[ROW_BLOCK], o[ROW_BLOCK];
            bool over = false;
            [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r++) {
                const uint v = v0 + r;
                d[r] = 0.0;
                o[r] = 0.0;
                if (v < v_end) {
                    const float vv = vin_load(IO_DT, pc.base_v, lr * pc.v_row + hv * V + v);
                    precise const float dv = beta * (vv - sk[r]);
                    precise const float ov = sq[r] + dv * kq;
                    d[r] = dv;
                    o[r] = ov;
                }
            }
            const vec4 dr = ring_round4(RING_DT, vec4(d[0], d[1], d[2], d[3]));
            over = ring_overflows(RING_DT, vec4(d[0], d[1], d[2], d[3]));
            [[unroll]] for (uint jb = 0u; jb < RING_LANES; jb++)
                [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r++)
                    if (lane + jb * SG_SIZE == m)
                        dl[jb * ROW_BLOCK + r] = dr[r];
            if (subgroupElect()) {
                [[unroll]] for (uint r = 0u; r < ROW_BLOCK; r += 2u) {
                    const uint v = v0 + r;
                    if (v < v_end) {
                        out_store2(pc.base_out, lr * pc.out_row + hv * V + v, vec2(o[r], o[r + 1u]));
                        rd_store2(RING_DT, rd_base, rd_elem + m * V + v, vec2(d[r], d[r + 1u]));
                    }
                }
                if (over && over_on)
                    atomicMin(overflow.w[pc.base_over + row], t_first + t);
            }
        }
    }
#undef TOKEN_ROW
}
