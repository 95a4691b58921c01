/* The small KDA model the fuzz harnesses work on: every code path of a real
 * one (KDA gates, a ring), a few hundred bytes per slot. */
#ifndef RSSM_FUZZ_MODEL_H
#define RSSM_FUZZ_MODEL_H

#include "rssm.h"

static inline rssm_model fuzz_model(void)
{
    rssm_model m;
    rssm_model_preset(&m, "kimi-linear-kda", NULL);
    m.layers = 1;
    m.num_qk_heads = m.num_v_heads = 2;
    m.head_k = m.head_v = 8;
    m.ring_len = 4;
    return m;
}

#endif
