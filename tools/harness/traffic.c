#include "traffic.h"

static double dtype_bytes(rssm_dtype t) { return t == RSSM_DTYPE_F32 ? 4.0 : 2.0; }

double rh_traffic_row_bytes(const rssm_model *m, uint32_t write_pos, int is_flush)
{
    const double H = m->num_qk_heads, HV = m->num_v_heads, K = m->head_k, V = m->head_v;
    const double G = m->gate_kind == RSSM_GATE_KDA ? K : 1.0;
    const double io = dtype_bytes(m->io_dtype), ring = dtype_bytes(m->ring_dtype);
    const double state = HV * V * K * dtype_bytes(m->state_dtype);
    const double entry = HV * V * ring + H * K * ring + HV * G * 4.0;
    const double inputs = 2.0 * H * K * io + 2.0 * HV * V * io + HV * G * 4.0 + HV * 4.0;

    double bytes = state + inputs; /* C (or S) is read every step */
    if (m->replay)
        bytes += (double)write_pos * entry;
    if (is_flush || !m->replay)
        bytes += state;
    else
        bytes += entry;
    return bytes * m->layers;
}

double rh_traffic_cycle_row_bytes(const rssm_model *m)
{
    uint32_t L = m->replay ? m->ring_len : 1;
    double sum = 0.0;
    for (uint32_t n = 0; n < L; n++)
        sum += rh_traffic_row_bytes(m, n, n == L - 1);
    return sum / L;
}
