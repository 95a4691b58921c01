/*
 * Conformance of the CUDA backend against a float64 oracle, driven through
 * the backend's ops table (pool, graph-recorded batch, header refresh), so
 * what is checked is what the library runs.
 *
 * The oracle follows the kernel semantics of docs/design.md §1 step by step in
 * double precision on the same canonical slot bytes: it reads the checkpoint
 * and ring entries as stored and stores what it writes with the same
 * rounding (state dtype, ring dtype, fp32 g). Its results are compared by
 * relative L2 error with the docs/design.md §6 tolerances; NaN never passes. Unused
 * ring memory starts as NaN, so a kernel that reads past write_pos fails.
 *
 * Covered: GDN and KDA; L in {1, 2, 8, 16} and replay off; fp32/bf16 state x
 * fp32/fp16/bf16 ring; precomputed, raw and raw-safe gates; fp32 and bf16
 * io; rows at staggered ring positions with random forced flushes; odd
 * shapes (partial channel groups and row tiles, H != HV); q/k norm off;
 * L = 1 bit-identical to packed; a 4096-step decode whose error must not
 * grow.
 */
#include "bench_common.h"

#include <math.h>
#include <string.h>
#include <vector>

extern "C" const rssm_backend_ops rssm_cuda_backend_ops;

namespace {

struct Case {
    char name[96];
    rssm_model m;
    uint32_t rows, slots, steps;
    double force_prob;
};

struct Result {
    double max_err = 0.0;        /* worst per-step relative L2 error of the outputs */
    double state_err = 0.0;      /* relative L2 error of checkpoints + committed rings at the end */
    double early_err = 0.0;      /* worst over the first 256 steps (long decode) */
    double late_err = 0.0;       /* worst over the last 256 steps */
    bool nan = false;
    std::vector<uint8_t> outputs;   /* every step's output bytes, for bit-identity checks */
    std::vector<uint8_t> final_pool;
};

double tolerance(const rssm_model &m)
{
    if (m.state_dtype == RSSM_DTYPE_BF16 || m.io_dtype == RSSM_DTYPE_BF16 ||
        (m.replay && m.ring_len > 1 && m.ring_dtype == RSSM_DTYPE_BF16))
        return 1e-2;
    if (m.replay && m.ring_len > 1 && m.ring_dtype == RSSM_DTYPE_F16)
        return 2e-3;
    return 1e-5;
}

struct Inputs {
    std::vector<uint8_t> q, k, v;
    std::vector<float> gate, beta;
};

/* One (layer, row) of the oracle: every value head, in double. */
void oracle_row(const rssm_model &m, const rssm_slot_layout &lay, uint8_t *slot_mem, uint32_t layer,
                uint32_t r, uint32_t rows, uint32_t n, bool flush, const Inputs &in,
                const std::vector<float> &A_log, const std::vector<float> &dt_bias, double *out)
{
    const uint32_t H = m.num_qk_heads, HV = m.num_v_heads, K = m.head_k, V = m.head_v;
    const uint32_t group = HV / H, cap = lay.ring_cap;
    const bool kda = m.gate_kind == RSSM_GATE_KDA;
    const uint32_t Kg = kda ? K : 1;
    uint8_t *lb = slot_mem + (size_t)layer * lay.layer_bytes;
    uint8_t *Cb = lb, *Db = lb + lay.ring_d_offset, *Kb = lb + lay.ring_k_offset;
    float *Gb = reinterpret_cast<float *>(lb + lay.ring_g_offset);
    const double qscale = (double)rssm_model_q_scale(&m);
    std::vector<double> q(K), k(K), alpha(K), g(K), Gam(K), s(K), kg((size_t)cap * K), cq(cap), ck(cap);
    for (uint32_t hv = 0; hv < HV; ++hv) {
        const uint32_t h = hv / group;
        const size_t qi = (((size_t)layer * rows + r) * H + h) * K;
        double sq = 0, sk = 0;
        for (uint32_t c = 0; c < K; ++c) {
            q[c] = rssm_load(in.q.data(), m.io_dtype, qi + c);
            k[c] = rssm_load(in.k.data(), m.io_dtype, qi + c);
            sq += q[c] * q[c];
            sk += k[c] * k[c];
        }
        const double qn = m.qk_l2norm ? 1.0 / sqrt(sq + 1e-6) : 1.0;
        const double kn = m.qk_l2norm ? 1.0 / sqrt(sk + 1e-6) : 1.0;
        double kq = 0;
        for (uint32_t c = 0; c < K; ++c) {
            q[c] *= qn * qscale;
            k[c] *= kn;
            kq += k[c] * q[c];
        }
        const size_t gi = (((size_t)layer * rows + r) * HV + hv) * Kg;
        const double A = exp((double)A_log[(size_t)layer * HV + hv]);
        for (uint32_t c = 0; c < K; ++c) {
            const uint32_t cg = kda ? c : 0;
            const double x = in.gate[gi + cg];
            const double dt = dt_bias[((size_t)layer * HV + hv) * Kg + cg];
            double gv = x;
            if (m.gate_mode == RSSM_GATE_RAW) {
                const double y = x + dt;
                gv = -A * (y > 20.0 ? y : log1p(exp(y)));
            } else if (m.gate_mode == RSSM_GATE_RAW_SAFE) {
                gv = (double)m.gate_lower_bound / (1.0 + exp(-A * (x + dt)));
            }
            g[c] = gv;
            alpha[c] = exp(gv);
        }
        const double bin = in.beta[((size_t)layer * rows + r) * HV + hv];
        const double beta = m.gate_mode == RSSM_GATE_PRECOMPUTED ? bin : 1.0 / (1.0 + exp(-bin));
        /* the ring, newest to oldest */
        for (uint32_t c = 0; c < K; ++c)
            s[c] = 0;
        for (int j = (int)n - 1; j >= 0; --j) {
            for (uint32_t c = 0; c < K; ++c) {
                const double gam = exp(s[c]);
                const double kj = rssm_load(Kb, m.ring_dtype, ((size_t)h * cap + j) * K + c);
                kg[(size_t)j * K + c] = kj * gam * alpha[c];
                s[c] += Gb[((size_t)hv * cap + j) * Kg + (kda ? c : 0)];
            }
        }
        for (uint32_t c = 0; c < K; ++c)
            Gam[c] = exp(s[c]);
        for (uint32_t j = 0; j < n; ++j) {
            double a = 0, b = 0;
            for (uint32_t c = 0; c < K; ++c) {
                a += kg[(size_t)j * K + c] * q[c];
                b += kg[(size_t)j * K + c] * k[c];
            }
            cq[j] = a;
            ck[j] = b;
        }
        const size_t vi = (((size_t)layer * rows + r) * HV + hv) * V;
        for (uint32_t v = 0; v < V; ++v) {
            const size_t crow = ((size_t)hv * V + v) * K;
            double Sq = 0, Sk = 0;
            for (uint32_t c = 0; c < K; ++c) {
                const double cv = rssm_load(Cb, m.state_dtype, crow + c) * alpha[c] * Gam[c];
                Sq += cv * q[c];
                Sk += cv * k[c];
            }
            for (uint32_t j = 0; j < n; ++j) {
                const double dj = rssm_load(Db, m.ring_dtype, ((size_t)hv * cap + j) * V + v);
                Sq += dj * cq[j];
                Sk += dj * ck[j];
            }
            const double d = beta * ((double)rssm_load(in.v.data(), m.io_dtype, vi + v) - Sk);
            out[(size_t)hv * V + v] = Sq + d * kq;
            if (!flush) {
                rssm_store(Db, m.ring_dtype, ((size_t)hv * cap + n) * V + v, (float)d);
            } else {
                for (uint32_t c = 0; c < K; ++c) {
                    double x = rssm_load(Cb, m.state_dtype, crow + c) * alpha[c] * Gam[c] + d * k[c];
                    for (uint32_t j = 0; j < n; ++j)
                        x += rssm_load(Db, m.ring_dtype, ((size_t)hv * cap + j) * V + v) *
                             kg[(size_t)j * K + c];
                    rssm_store(Cb, m.state_dtype, crow + c, (float)x);
                }
            }
        }
        if (!flush) {
            if (hv % group == 0)
                for (uint32_t c = 0; c < K; ++c)
                    rssm_store(Kb, m.ring_dtype, ((size_t)h * cap + n) * K + c, (float)k[c]);
            for (uint32_t cg = 0; cg < Kg; ++cg)
                Gb[((size_t)hv * cap + n) * Kg + cg] = (float)g[cg];
        }
    }
}

void fill_slot(const rssm_model &m, const rssm_slot_layout &lay, uint8_t *slot, uint32_t wp, Rng &rng)
{
    memset(slot, 0xff, lay.slot_bytes); /* NaN everywhere not written below */
    const uint32_t H = m.num_qk_heads, HV = m.num_v_heads, K = m.head_k, V = m.head_v, cap = lay.ring_cap;
    const uint32_t Kg = m.gate_kind == RSSM_GATE_KDA ? K : 1;
    for (uint32_t l = 0; l < m.layers; ++l) {
        uint8_t *lb = slot + (size_t)l * lay.layer_bytes;
        for (size_t i = 0; i < (size_t)HV * V * K; ++i)
            rssm_store(lb, m.state_dtype, i, (float)rng.uniform(-0.5, 0.5));
        for (uint32_t hv = 0; hv < HV; ++hv)
            for (uint32_t j = 0; j < wp; ++j) {
                for (uint32_t v = 0; v < V; ++v)
                    rssm_store(lb + lay.ring_d_offset, m.ring_dtype, ((size_t)hv * cap + j) * V + v,
                               (float)rng.uniform(-0.5, 0.5));
                for (uint32_t c = 0; c < Kg; ++c)
                    reinterpret_cast<float *>(lb + lay.ring_g_offset)[((size_t)hv * cap + j) * Kg + c] =
                        (float)rng.uniform(-0.6, -0.01);
            }
        for (uint32_t h = 0; h < H; ++h)
            for (uint32_t j = 0; j < wp; ++j)
                for (uint32_t c = 0; c < K; ++c)
                    rssm_store(lb + lay.ring_k_offset, m.ring_dtype, ((size_t)h * cap + j) * K + c,
                               (float)rng.uniform(-0.3, 0.3));
    }
}

void make_inputs(const rssm_model &m, uint32_t rows, Inputs &in, Rng &rng)
{
    const size_t L = m.layers, H = m.num_qk_heads, HV = m.num_v_heads, K = m.head_k, V = m.head_v;
    const size_t Kg = m.gate_kind == RSSM_GATE_KDA ? K : 1, io = rssm_dtype_size(m.io_dtype);
    in.q.resize(L * rows * H * K * io);
    in.k.resize(in.q.size());
    in.v.resize(L * rows * HV * V * io);
    in.gate.resize(L * rows * HV * Kg);
    in.beta.resize(L * rows * HV);
    for (size_t i = 0; i < L * rows * H * K; ++i) {
        rssm_store(in.q.data(), m.io_dtype, i, (float)rng.uniform(-1, 1));
        rssm_store(in.k.data(), m.io_dtype, i, (float)rng.uniform(-1, 1));
    }
    for (size_t i = 0; i < L * rows * HV * V; ++i)
        rssm_store(in.v.data(), m.io_dtype, i, (float)rng.uniform(-1, 1));
    const bool pre = m.gate_mode == RSSM_GATE_PRECOMPUTED;
    for (float &x : in.gate)
        x = pre ? (float)rng.uniform(-0.6, -0.01) : (float)rng.uniform(-3, 3);
    for (float &x : in.beta)
        x = pre ? (float)rng.uniform(0.05, 0.95) : (float)rng.uniform(-3, 3);
}

#define RCHECK(call)                                                                             \
    do {                                                                                         \
        rssm_error rc_err;                                                                       \
        if ((call) != RSSM_OK) {                                                                 \
            fprintf(stderr, "%s: %s\n", #call, rc_err.message);                                  \
            exit(2);                                                                             \
        }                                                                                        \
    } while (0)
#define E &rc_err

Result run_case(const Case &cs, void *ctx, uint64_t seed, bool keep_bytes)
{
    const rssm_backend_ops &ops = rssm_cuda_backend_ops;
    const rssm_model &m = cs.m;
    Result res;
    RCHECK(rssm_model_validate(&m, E));
    RCHECK(ops.supports(ctx, &m, E));
    rssm_slot_layout lay;
    rssm_slot_layout_init(&lay, &m);
    rssm_kernel_params params;
    rssm_kernel_params_init(&params, &m, &lay, cs.rows);
    const uint32_t Leff = m.replay ? m.ring_len : 1;
    const uint32_t HV = m.num_v_heads, V = m.head_v, K = m.head_k;
    const size_t Kg = m.gate_kind == RSSM_GATE_KDA ? K : 1;
    Rng rng(seed);

    std::vector<uint8_t> host((size_t)cs.slots * lay.slot_bytes);
    std::vector<uint32_t> wp(cs.slots);
    for (uint32_t s = 0; s < cs.slots; ++s) {
        wp[s] = (s * 3u) % Leff; /* staggered ring positions */
        fill_slot(m, lay, host.data() + (size_t)s * lay.slot_bytes, wp[s], rng);
    }
    void *pool = NULL, *batch = NULL;
    RCHECK(ops.pool_create(ctx, &m, &lay, cs.slots, &pool, E));
    for (uint32_t s = 0; s < cs.slots; ++s)
        RCHECK(ops.slot_write(ctx, pool, s, host.data() + (size_t)s * lay.slot_bytes, E));
    RCHECK(ops.batch_create(ctx, pool, &params, &batch, E));
    std::vector<float> A_log((size_t)m.layers * HV), dt_bias((size_t)m.layers * HV * Kg);
    for (float &x : A_log)
        x = (float)rng.uniform(-1, 1);
    for (float &x : dt_bias)
        x = (float)rng.uniform(-1, 1);
    for (uint32_t l = 0; l < m.layers; ++l)
        RCHECK(ops.batch_set_gate_params(ctx, batch, l, A_log.data() + (size_t)l * HV,
                                         dt_bias.data() + (size_t)l * HV * Kg, E));

    const size_t out_elems = (size_t)m.layers * cs.rows * HV * V;
    const size_t io = rssm_dtype_size(m.io_dtype);
    std::vector<uint8_t> out(out_elems * io);
    std::vector<double> ref(out_elems);
    std::vector<rssm_row_header> hdr(cs.rows);
    Inputs in;
    for (uint32_t step = 0; step < cs.steps; ++step) {
        for (uint32_t r = 0; r < cs.rows; ++r) {
            const uint32_t slot = cs.slots - 1 - r;
            hdr[r].slot = slot;
            hdr[r].write_pos = wp[slot];
            hdr[r].force = rng.uniform(0, 1) < cs.force_prob ? 1u : 0u;
            hdr[r].reserved = 0;
        }
        make_inputs(m, cs.rows, in, rng);
        rssm_step_inputs si = {in.q.data(), in.k.data(), in.v.data(), in.gate.data(), in.beta.data()};
        RCHECK(ops.batch_upload(ctx, batch, cs.rows, &si, E));
        RCHECK(ops.batch_run(ctx, batch, cs.rows, hdr.data(), E));
        RCHECK(ops.batch_download(ctx, batch, cs.rows, out.data(), E));
        for (uint32_t l = 0; l < m.layers; ++l)
            for (uint32_t r = 0; r < cs.rows; ++r) {
                const uint32_t slot = hdr[r].slot;
                const bool flush = hdr[r].write_pos == Leff - 1 || hdr[r].force;
                oracle_row(m, lay, host.data() + (size_t)slot * lay.slot_bytes, l, r, cs.rows,
                           hdr[r].write_pos, flush, in, A_log, dt_bias,
                           ref.data() + ((size_t)l * cs.rows + r) * HV * V);
            }
        double num = 0, den = 0;
        for (size_t i = 0; i < out_elems; ++i) {
            const double o = rssm_load(out.data(), m.io_dtype, i);
            if (o != o)
                res.nan = true;
            num += (o - ref[i]) * (o - ref[i]);
            den += ref[i] * ref[i];
        }
        const double e = sqrt(num / (den > 0 ? den : 1));
        if (e != e)
            res.nan = true;
        res.max_err = e > res.max_err ? e : res.max_err;
        if (step < 256)
            res.early_err = e > res.early_err ? e : res.early_err;
        if (step + 256 >= cs.steps)
            res.late_err = e > res.late_err ? e : res.late_err;
        if (keep_bytes)
            res.outputs.insert(res.outputs.end(), out.begin(), out.end());
        for (uint32_t r = 0; r < cs.rows; ++r) {
            const uint32_t slot = hdr[r].slot;
            const bool flush = hdr[r].write_pos == Leff - 1 || hdr[r].force;
            wp[slot] = flush ? 0 : wp[slot] + 1;
        }
    }
    /* The stored state: checkpoints and the committed ring entries. */
    std::vector<uint8_t> dev(lay.slot_bytes);
    double num = 0, den = 0;
    for (uint32_t s = 0; s < cs.slots; ++s) {
        RCHECK(ops.slot_read(ctx, pool, s, dev.data(), E));
        if (keep_bytes)
            res.final_pool.insert(res.final_pool.end(), dev.begin(), dev.end());
        const uint8_t *hb = host.data() + (size_t)s * lay.slot_bytes;
        for (uint32_t l = 0; l < m.layers; ++l) {
            const uint8_t *a = dev.data() + (size_t)l * lay.layer_bytes, *b = hb + (size_t)l * lay.layer_bytes;
            for (size_t i = 0; i < (size_t)HV * V * K; ++i) {
                const double x = rssm_load(a, m.state_dtype, i), y = rssm_load(b, m.state_dtype, i);
                if (x != x)
                    res.nan = true;
                num += (x - y) * (x - y);
                den += y * y;
            }
            for (uint32_t hv = 0; hv < HV; ++hv)
                for (uint32_t j = 0; j < wp[s]; ++j)
                    for (uint32_t v = 0; v < V; ++v) {
                        const size_t i = ((size_t)hv * lay.ring_cap + j) * V + v;
                        const double x = rssm_load(a + lay.ring_d_offset, m.ring_dtype, i);
                        const double y = rssm_load(b + lay.ring_d_offset, m.ring_dtype, i);
                        if (x != x)
                            res.nan = true;
                        num += (x - y) * (x - y);
                        den += y * y;
                    }
        }
    }
    res.state_err = sqrt(num / (den > 0 ? den : 1));
    ops.batch_destroy(ctx, batch);
    ops.pool_destroy(ctx, pool);
    return res;
}

Case make_case(const char *name, const rssm_model &m, uint32_t rows, uint32_t slots, uint32_t steps,
               double force_prob)
{
    Case c;
    snprintf(c.name, sizeof c.name, "%s", name);
    c.m = m;
    c.rows = rows;
    c.slots = slots;
    c.steps = steps;
    c.force_prob = force_prob;
    return c;
}

const char *dn(rssm_dtype t) { return rssm_dtype_name(t); }

} /* namespace */

int run_conformance(bool quick, uint64_t seed, const char *variant)
{
    const rssm_backend_ops &ops = rssm_cuda_backend_ops;
    void *ctx = NULL;
    rssm_error err;
    if (ops.create(variant, &ctx, &err) != RSSM_OK) {
        printf("conformance: %s SKIPPED: %s\n", variant, err.message);
        return 0;
    }
    printf("conformance of %s on %s (seed %llu)\n", variant, ops.device(ctx), (unsigned long long)seed);
    std::vector<Case> cases;
    const rssm_dtype SR[6][2] = {{RSSM_DTYPE_F32, RSSM_DTYPE_F32},  {RSSM_DTYPE_F32, RSSM_DTYPE_F16},
                                 {RSSM_DTYPE_F32, RSSM_DTYPE_BF16}, {RSSM_DTYPE_BF16, RSSM_DTYPE_F32},
                                 {RSSM_DTYPE_BF16, RSSM_DTYPE_F16}, {RSSM_DTYPE_BF16, RSSM_DTYPE_BF16}};
    const rssm_gate_mode modes[3] = {RSSM_GATE_PRECOMPUTED, RSSM_GATE_RAW, RSSM_GATE_RAW_SAFE};
    const uint32_t Ls[4] = {1, 2, 8, 16};
    char name[96];
    int idx = 0;
    for (int kda = 0; kda < 2; ++kda) {
        const rssm_gate_kind kind = kda ? RSSM_GATE_KDA : RSSM_GATE_GDN;
        const uint32_t H = kda ? 4 : 2, HV = 4;
        for (uint32_t L : Ls)
            for (int sr = 0; sr < 6; ++sr, ++idx) {
                if (quick && !(L == 16 && (sr == 0 || sr == 1 || sr == 5)) && !(L == 1 && sr == 0))
                    continue;
                const rssm_gate_mode mode = modes[idx % 3];
                const rssm_dtype io = (idx / 3) % 2 ? RSSM_DTYPE_BF16 : RSSM_DTYPE_F32;
                rssm_model m = bench_model(kind, H, HV, 128, 128, 2, 1, L, SR[sr][0], SR[sr][1], io, mode);
                snprintf(name, sizeof name, "%s L=%u state=%s ring=%s io=%s %s", kda ? "kda" : "gdn", L,
                         dn(SR[sr][0]), dn(SR[sr][1]), dn(io), rssm_gate_mode_name(mode));
                cases.push_back(make_case(name, m, 5, 7, quick ? 20 : 2 * L + 9, 0.1));
            }
        for (int st = 0; st < 2; ++st) {
            const rssm_dtype sd = st ? RSSM_DTYPE_BF16 : RSSM_DTYPE_F32;
            if (quick && st)
                continue;
            rssm_model m = bench_model(kind, H, HV, 128, 128, 2, 0, 16, sd, RSSM_DTYPE_F16, RSSM_DTYPE_F32,
                                       RSSM_GATE_RAW);
            snprintf(name, sizeof name, "%s packed state=%s raw", kda ? "kda" : "gdn", dn(sd));
            cases.push_back(make_case(name, m, 5, 7, quick ? 6 : 12, 0.0));
        }
    }
    {   /* odd shapes: partial channel groups (K = 36) and row tiles (V = 20), H != HV */
        rssm_model m = bench_model(RSSM_GATE_GDN, 3, 6, 36, 20, 2, 1, 8, RSSM_DTYPE_F32, RSSM_DTYPE_F16,
                                   RSSM_DTYPE_F32, RSSM_GATE_RAW);
        cases.push_back(make_case("gdn odd K=36 V=20 H=3 HV=6 L=8 fp32/fp16", m, 3, 5, 20, 0.1));
        m.state_dtype = RSSM_DTYPE_BF16;
        m.ring_dtype = RSSM_DTYPE_BF16;
        cases.push_back(make_case("gdn odd K=36 V=20 H=3 HV=6 L=8 bf16/bf16", m, 3, 5, 20, 0.1));
        rssm_model k2 = bench_model(RSSM_GATE_KDA, 2, 2, 64, 48, 1, 1, 16, RSSM_DTYPE_BF16, RSSM_DTYPE_F16,
                                    RSSM_DTYPE_BF16, RSSM_GATE_RAW_SAFE);
        cases.push_back(make_case("kda K=64 V=48 L=16 bf16/fp16 raw-safe", k2, 4, 4, 40, 0.05));
        /* the same odd shapes packed (the stream kernel without a ring) */
        rssm_model po = bench_model(RSSM_GATE_GDN, 3, 6, 36, 20, 2, 0, 1, RSSM_DTYPE_F32, RSSM_DTYPE_F32,
                                    RSSM_DTYPE_BF16, RSSM_GATE_RAW);
        cases.push_back(make_case("gdn packed odd K=36 V=20 H=3 HV=6 fp32", po, 3, 5, 6, 0.0));
        po.state_dtype = RSSM_DTYPE_BF16;
        cases.push_back(make_case("gdn packed odd K=36 V=20 H=3 HV=6 bf16", po, 3, 5, 6, 0.0));
        rssm_model pk = bench_model(RSSM_GATE_KDA, 2, 2, 64, 48, 1, 0, 1, RSSM_DTYPE_BF16, RSSM_DTYPE_F16,
                                    RSSM_DTYPE_F32, RSSM_GATE_RAW_SAFE);
        cases.push_back(make_case("kda packed K=64 V=48 bf16 raw-safe", pk, 4, 4, 6, 0.0));
        /* the stream kernel's longest ring (16 entries), and one past it
         * (the pipeline kernel) */
        rssm_model l17 = bench_model(RSSM_GATE_KDA, 2, 4, 128, 128, 1, 1, 17, RSSM_DTYPE_F32, RSSM_DTYPE_BF16,
                                     RSSM_DTYPE_BF16, RSSM_GATE_RAW);
        cases.push_back(make_case("kda L=17 fp32/bf16 raw (longest stream ring)", l17, 4, 5, 40, 0.05));
        rssm_model l18 = l17;
        l18.ring_len = 18;
        l18.gate_kind = RSSM_GATE_GDN;
        l18.num_qk_heads = 1;
        cases.push_back(make_case("gdn L=18 fp32/bf16 raw (pipeline kernel)", l18, 4, 5, 40, 0.05));
        {   /* enough items that every persistent CTA walks several, with
             * stage reuse and header prefetch (the large-batch path) */
            rssm_model mi = bench_model(RSSM_GATE_KDA, 32, 32, 128, 128, 1, 1, 16, RSSM_DTYPE_F32, RSSM_DTYPE_F16,
                                        RSSM_DTYPE_BF16, RSSM_GATE_PRECOMPUTED);
            cases.push_back(make_case("kda multi-item rows=48 HV=32 L=16 fp32/fp16", mi, 48, 48, quick ? 18 : 34, 0.05));
            rssm_model mg = bench_model(RSSM_GATE_GDN, 16, 32, 128, 128, 2, 1, 8, RSSM_DTYPE_BF16, RSSM_DTYPE_BF16,
                                        RSSM_DTYPE_BF16, RSSM_GATE_RAW);
            if (!quick)
                cases.push_back(make_case("gdn multi-item rows=40 HV=32 L=8 bf16/bf16", mg, 40, 41, 20, 0.05));
        }
        if (!quick) {
            rssm_model w = bench_model(RSSM_GATE_GDN, 1, 2, 128, 256, 1, 1, 16, RSSM_DTYPE_F32, RSSM_DTYPE_F32,
                                       RSSM_DTYPE_F32, RSSM_GATE_PRECOMPUTED);
            cases.push_back(make_case("gdn K=128 V=256 L=16 fp32/fp32", w, 3, 3, 40, 0.05));
            w.replay = 0;
            w.ring_len = 1;
            cases.push_back(make_case("gdn packed K=128 V=256 fp32", w, 3, 3, 8, 0.0));
            rssm_model nn = bench_model(RSSM_GATE_KDA, 2, 4, 128, 128, 1, 1, 8, RSSM_DTYPE_F32, RSSM_DTYPE_F32,
                                        RSSM_DTYPE_F32, RSSM_GATE_PRECOMPUTED);
            nn.qk_l2norm = 0;
            nn.q_scale = 0.05f;
            cases.push_back(make_case("kda no-l2norm q_scale=0.05 L=8 fp32/fp32", nn, 3, 3, 24, 0.1));
            rssm_model lg = bench_model(RSSM_GATE_GDN, 1, 2, 128, 128, 1, 1, 16, RSSM_DTYPE_F32, RSSM_DTYPE_F16,
                                        RSSM_DTYPE_F32, RSSM_GATE_PRECOMPUTED);
            cases.push_back(make_case("gdn long decode 4096 steps L=16 fp32/fp16", lg, 2, 2, 4096, 0.01));
        }
    }

    int failed = 0, n = 0, skipped = 0;
    for (const Case &cs : cases) {
        /* a variant that cannot run a model refuses it: skipped, not run elsewhere */
        if (ops.supports(ctx, &cs.m, &err) == RSSM_ERR_UNSUPPORTED) {
            printf("%-4s %-58s %s\n", "skip", cs.name, err.message);
            ++skipped;
            continue;
        }
        const Result r = run_case(cs, ctx, seed + (uint64_t)n * 7919u, false);
        const double tol = tolerance(cs.m);
        bool ok = !r.nan && r.max_err <= tol && r.state_err <= tol;
        if (cs.steps >= 4096) /* the error of a long decode must not grow */
            ok = ok && r.late_err <= 10.0 * r.early_err + 1e-7;
        printf("%-4s %-58s out %.2e state %.2e tol %.0e%s", ok ? "ok" : "FAIL", cs.name, r.max_err, r.state_err,
               tol, r.nan ? " NaN" : "");
        if (cs.steps >= 4096)
            printf(" (first 256 steps %.2e, last 256 %.2e)", r.early_err, r.late_err);
        printf("\n");
        failed += !ok;
        ++n;
    }
    {   /* L = 1 replay runs the packed decode: bit for bit. */
        rssm_model a = bench_model(RSSM_GATE_KDA, 2, 4, 128, 128, 2, 1, 1, RSSM_DTYPE_BF16, RSSM_DTYPE_F16,
                                   RSSM_DTYPE_F32, RSSM_GATE_RAW);
        rssm_model b = a;
        b.replay = 0;
        const Result ra = run_case(make_case("l1", a, 4, 4, 10, 0.0), ctx, seed + 99, true);
        const Result rb = run_case(make_case("packed", b, 4, 4, 10, 0.0), ctx, seed + 99, true);
        const bool same = ra.outputs == rb.outputs && ra.final_pool == rb.final_pool;
        printf("%-4s %-58s\n", same ? "ok" : "FAIL", "L=1 replay bit-identical to packed (outputs, state)");
        failed += !same;
        ++n;
    }
    if (skipped)
        printf("conformance: %d of %d cases passed, %d skipped (%s cannot run them)\n", n - failed, n, skipped,
               variant);
    else
        printf("conformance: %d of %d cases passed\n", n - failed, n);
    ops.destroy(ctx);
    return failed;
}
