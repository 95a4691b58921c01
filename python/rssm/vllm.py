"""vLLM's GDN decode entry point, signature for signature, on rssm's
kernels (docs/engines.md, "vLLM"):

    fused_recurrent_gated_delta_rule_packed_decode(...)   packed decode, GDN

vLLM reserves slot 0 of its state pool as the null block: a row whose slot
index is 0 or below is padding (its output zeroed, no slot touched), rssm's
padding="nonpositive". For ReplaySSM, call
rssm.fused_recurrent_gated_delta_rule_replayssm (vLLM's argument names plus
the rings) with padding="nonpositive", and rssm.advance with the same.
"""

from __future__ import annotations

from ._compat import packed_decode

__all__ = ["fused_recurrent_gated_delta_rule_packed_decode"]


def fused_recurrent_gated_delta_rule_packed_decode(
        mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
        use_qk_l2norm_in_kernel=False):
    """vLLM's packed GDN decode (fla/ops/fused_recurrent.py): mixed_qkv [B,
    2*H*K + HV*V], a and b [B, HV], A_log and dt_bias [HV], initial_state
    [slots, HV, V, K] updated in place, out [B, 1, HV, V]; returns (out,
    initial_state)."""
    return packed_decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
                         use_qk_l2norm_in_kernel, "gdn", padding="nonpositive")
