/* Host-side work on a slot's raw bytes: the true state (checkpoint folded
 * with the committed ring), and writing a checkpoint. Used by read_state,
 * write_state, materialise, copy and export for every backend, so those
 * follow one definition of the ring whatever device holds the slot. */
#include "objects.h"
#include "dtype.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* S = C·diag(Γ) + Σ_j d_j (k_j ⊙ γ_j)ᵀ for one layer, summing log-decays
 * from the newest entry backwards as the kernels do. */
static void fold_layer(const rssm_model *m, const rssm_slot_layout *lay, const uint8_t *block,
                       uint32_t n, float *state)
{
    const uint32_t H = m->num_qk_heads, HV = m->num_v_heads, K = m->head_k, V = m->head_v;
    const uint32_t group = HV / H, cap = lay->ring_cap;
    const int kda = m->gate_kind == RSSM_GATE_KDA;
    const uint32_t gw = kda ? K : 1; /* gate values per ring entry */
    const void *ckpt = block;
    const void *ring_d = block + lay->ring_d_offset;
    const void *ring_k = block + lay->ring_k_offset;
    const float *ring_g = (const float *)(block + lay->ring_g_offset);

    float gamma[RSSM_MAX_RING_LEN][256]; /* decay applied after entry j, per channel */
    float total[256];                    /* Γ */
    for (uint32_t hv = 0; hv < HV; hv++) {
        const uint32_t h = hv / group;
        float sum[256];
        for (uint32_t c = 0; c < gw; c++)
            sum[c] = 0.0f;
        for (uint32_t j = n; j-- > 0;) {
            const float *g = ring_g + ((size_t)hv * cap + j) * gw;
            for (uint32_t c = 0; c < gw; c++) {
                gamma[j][c] = expf(sum[c]);
                sum[c] += g[c];
            }
        }
        for (uint32_t c = 0; c < gw; c++)
            total[c] = expf(sum[c]);
        float *S = state + (size_t)hv * V * K;
        for (uint32_t v = 0; v < V; v++) {
            for (uint32_t c = 0; c < K; c++) {
                float acc = rssm_load(ckpt, m->state_dtype, ((size_t)hv * V + v) * K + c) * total[kda ? c : 0];
                for (uint32_t j = 0; j < n; j++) {
                    float d = rssm_load(ring_d, m->ring_dtype, ((size_t)hv * cap + j) * V + v);
                    float k = rssm_load(ring_k, m->ring_dtype, ((size_t)h * cap + j) * K + c);
                    acc += d * k * gamma[j][kda ? c : 0];
                }
                S[(size_t)v * K + c] = acc;
            }
        }
    }
}

void rssm_slot_fold(const rssm_model *m, const rssm_slot_layout *lay, const uint8_t *slot_bytes,
                    uint32_t write_pos, float *state)
{
    const size_t per_layer = (size_t)m->num_v_heads * m->head_v * m->head_k;
    for (uint32_t l = 0; l < m->layers; l++)
        fold_layer(m, lay, slot_bytes + l * lay->layer_bytes, write_pos, state + l * per_layer);
}

void rssm_slot_store(const rssm_model *m, const rssm_slot_layout *lay, uint8_t *slot_bytes,
                     const float *state)
{
    const size_t per_layer = (size_t)m->num_v_heads * m->head_v * m->head_k;
    memset(slot_bytes, 0, lay->slot_bytes);
    for (uint32_t l = 0; l < m->layers; l++) {
        uint8_t *block = slot_bytes + l * lay->layer_bytes;
        const float *S = state + l * per_layer;
        for (size_t i = 0; i < per_layer; i++)
            rssm_store(block, m->state_dtype, i, S[i]);
    }
}

void rssm_slot_fold_prefix(const rssm_model *m, const rssm_slot_layout *lay, uint8_t *slot_bytes, uint32_t folded,
                           uint32_t kept, float *state)
{
    const uint32_t cap = lay->ring_cap;
    const size_t per_layer = (size_t)m->num_v_heads * m->head_v * m->head_k;
    const size_t ring = rssm_dtype_size(m->ring_dtype);
    const size_t gw = m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1;
    for (uint32_t l = 0; l < m->layers; l++) {
        uint8_t *block = slot_bytes + l * lay->layer_bytes;
        float *S = state + l * per_layer;
        fold_layer(m, lay, block, folded, S);
        for (size_t i = 0; i < per_layer; i++)
            rssm_store(block, m->state_dtype, i, S[i]);
        if (kept == 0 || folded == 0)
            continue;
        /* entries folded .. folded + kept - 1 become 0 .. kept - 1, per head */
        const struct {
            size_t offset, heads, entry_bytes;
        } arrays[3] = {
            {lay->ring_d_offset, m->num_v_heads, m->head_v * ring},
            {lay->ring_k_offset, m->num_qk_heads, m->head_k * ring},
            {lay->ring_g_offset, m->num_v_heads, gw * sizeof(float)},
        };
        for (int a = 0; a < 3; a++)
            for (size_t h = 0; h < arrays[a].heads; h++) {
                uint8_t *head = block + arrays[a].offset + h * cap * arrays[a].entry_bytes;
                memmove(head, head + (size_t)folded * arrays[a].entry_bytes, (size_t)kept * arrays[a].entry_bytes);
            }
    }
}

void rssm_slot_clear_uncommitted(const rssm_model *m, const rssm_slot_layout *lay,
                                 uint8_t *slot_bytes, uint32_t write_pos)
{
    const uint32_t cap = lay->ring_cap;
    if (write_pos >= cap)
        return;
    const size_t ring = rssm_dtype_size(m->ring_dtype);
    const size_t gw = m->gate_kind == RSSM_GATE_KDA ? m->head_k : 1;
    const uint32_t unused = cap - write_pos;
    for (uint32_t l = 0; l < m->layers; l++) {
        uint8_t *block = slot_bytes + l * lay->layer_bytes;
        for (uint32_t hv = 0; hv < m->num_v_heads; hv++) {
            memset(block + lay->ring_d_offset + ((size_t)hv * cap + write_pos) * m->head_v * ring, 0,
                   (size_t)unused * m->head_v * ring);
            memset(block + lay->ring_g_offset + ((size_t)hv * cap + write_pos) * gw * sizeof(float), 0,
                   (size_t)unused * gw * sizeof(float));
        }
        for (uint32_t h = 0; h < m->num_qk_heads; h++)
            memset(block + lay->ring_k_offset + ((size_t)h * cap + write_pos) * m->head_k * ring, 0,
                   (size_t)unused * m->head_k * ring);
    }
}

/* First index of a non-finite value among n values of dtype t, or n. */
static size_t first_nonfinite(const void *base, rssm_dtype t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(rssm_load(base, t, i)))
            return i;
    return n;
}

int rssm_slot_validate(const rssm_model *m, const rssm_slot_layout *lay, const uint8_t *slot_bytes,
                       uint32_t write_pos, char *why, size_t why_size)
{
    const uint32_t cap = lay->ring_cap, HV = m->num_v_heads, H = m->num_qk_heads;
    const size_t K = m->head_k, V = m->head_v, gw = m->gate_kind == RSSM_GATE_KDA ? K : 1;
    for (uint32_t l = 0; l < m->layers; l++) {
        const uint8_t *block = slot_bytes + l * lay->layer_bytes;
        size_t i = first_nonfinite(block, m->state_dtype, (size_t)HV * V * K);
        if (i < (size_t)HV * V * K) {
            snprintf(why, why_size, "layer %u: checkpoint of value head %zu holds NaN or infinity", l, i / (V * K));
            return 0;
        }
        for (uint32_t hv = 0; hv < HV; hv++)
            for (uint32_t j = 0; j < write_pos; j++) {
                const uint8_t *g = block + lay->ring_g_offset + ((size_t)hv * cap + j) * gw * sizeof(float);
                for (size_t c = 0; c < gw; c++) {
                    const float gc = rssm_load(g, RSSM_DTYPE_F32, c); /* the bytes may be unaligned */
                    if (!(gc <= 0.0f) || isinf(gc)) { /* NaN fails the first test */
                        snprintf(why, why_size, "layer %u head %u ring entry %u: log-decay %g is not finite and <= 0",
                                 l, hv, j, (double)gc);
                        return 0;
                    }
                }
                const size_t d0 = ((size_t)hv * cap + j) * V;
                if (first_nonfinite(block + lay->ring_d_offset + d0 * rssm_dtype_size(m->ring_dtype), m->ring_dtype,
                                    V) < V) {
                    snprintf(why, why_size, "layer %u head %u ring entry %u: d holds NaN or infinity", l, hv, j);
                    return 0;
                }
            }
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t j = 0; j < write_pos; j++) {
                const size_t k0 = ((size_t)h * cap + j) * K;
                if (first_nonfinite(block + lay->ring_k_offset + k0 * rssm_dtype_size(m->ring_dtype), m->ring_dtype,
                                    K) < K) {
                    snprintf(why, why_size, "layer %u q/k head %u ring entry %u: k holds NaN or infinity", l, h, j);
                    return 0;
                }
            }
    }
    return 1;
}
