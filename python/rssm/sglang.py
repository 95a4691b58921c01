"""SGLang's linear-attention decode entry points, signature for signature,
on rssm's kernels: an SGLang developer swaps the import and nothing else
(docs/engines.md, "SGLang").

    fused_recurrent_linear_replayssm_decode(...)         ReplaySSM, GDN or KDA (is_kda)
    fused_recurrent_gated_delta_rule_packed_decode(...)  packed decode, GDN
    fused_recurrent_kda_packed_decode(...)               packed decode, KDA

They take SGLang's arguments, defaults and shapes (out is [B, 1, HV, V];
use_qk_l2norm_in_kernel defaults to False; a negative slot index is a padding
row, whose output is zeroed) and return what SGLang's do, (out,
initial_state). The Triton kernels' tuning arguments (block_v, num_warps,
num_stages, nk) are accepted and have no effect: rssm picks its kernels
itself. Ring semantics are SGLang's: with d_cache's L entries a row flushes
when write_pos == L - 1 or it is forced, and the caller advances write_pos.
"""

from __future__ import annotations

from ._compat import decode_shapes as _decode_shapes, packed_decode as _packed, rows_out as _rows_out
from .replayssm import fused_recurrent_gated_delta_rule_replayssm

__all__ = ["fused_recurrent_gated_delta_rule_packed_decode", "fused_recurrent_gdn_replayssm_decode",
           "fused_recurrent_kda_packed_decode", "fused_recurrent_linear_replayssm_decode"]


def fused_recurrent_linear_replayssm_decode(
        mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache, out,
        ssm_state_indices, write_pos, force_flush=None, use_qk_l2norm_in_kernel=False, is_kda=False,
        block_v=None, num_warps=1, num_stages=3, nk=2):
    """SGLang's ReplaySSM decode (fused_recurrent_linear_replayssm.py): one
    token per row, GDN (a [B, HV], dt_bias [HV], g_cache [slots, HV, L]) or
    KDA with is_kda (a [B, HV, K], dt_bias [HV, K], g_cache [slots, HV, L,
    K]); initial_state [slots, HV, V, K] fp32, written only by rows that
    flush; d_cache [slots, HV, L, V] and k_cache [slots, H, L, K] in one
    dtype; out [B, 1, HV, V]."""
    del block_v, num_warps, num_stages, nk  # Triton tuning: rssm chooses its own kernels
    B, _, _, HV, V, _, _ = _decode_shapes(mixed_qkv, initial_state)
    fused_recurrent_gated_delta_rule_replayssm(
        mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache,
        _rows_out(out, B, HV, V), ssm_state_indices, write_pos, force_flush,
        gate_kind="kda" if is_kda else "gdn", use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    return out, initial_state


# SGLang's GDN backend imports the same kernel under this name.
fused_recurrent_gdn_replayssm_decode = fused_recurrent_linear_replayssm_decode


def fused_recurrent_gated_delta_rule_packed_decode(
        mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
        use_qk_l2norm_in_kernel=False):
    """SGLang's (and vLLM's) packed GDN decode: initial_state [slots, HV, V,
    K] updated in place every step, out [B, 1, HV, V]."""
    return _packed(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
                   use_qk_l2norm_in_kernel, "gdn")


def fused_recurrent_kda_packed_decode(
        mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
        use_qk_l2norm_in_kernel=False, lower_bound=None):
    """SGLang's packed KDA decode: a [B, HV*K], dt_bias [HV*K]; lower_bound
    (Kimi-Linear's bounded gate) selects gate_mode "raw_safe"."""
    if lower_bound is None:
        return _packed(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
                       use_qk_l2norm_in_kernel, "kda")
    return _packed(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
                   use_qk_l2norm_in_kernel, "kda", gate_mode="raw_safe", gate_lower_bound=lower_bound)
