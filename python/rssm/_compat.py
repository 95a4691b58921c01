"""What the engines' signature-compatible entry points (rssm.sglang,
rssm.vllm) share: their out [B, 1, HV, V] as rssm's [B, HV, V], and a packed
decode on rssm's replay kernels."""

from __future__ import annotations

from ._arrays import is_torch_tensor
from .replayssm import fused_recurrent_gated_delta_rule_replayssm


def rows_out(out, B: int, HV: int, V: int):
    """An engine's out [B, 1, HV, V] as the [B, HV, V] rssm takes: a view, so
    rssm writes the engine's tensor (torch's .view refuses where a view cannot
    be had; a NumPy array must be contiguous for the same reason)."""
    if tuple(out.shape) != (B, 1, HV, V):
        raise ValueError(f"out must have shape {(B, 1, HV, V)} (got {tuple(out.shape)})")
    if is_torch_tensor(out):
        return out.view(B, HV, V)
    if not out.flags["C_CONTIGUOUS"]:
        raise ValueError("out must be contiguous")
    return out.reshape(B, HV, V)


# A packed decode is the replay decode with a ring of one entry: every row
# flushes every step and reads no ring entry (docs/design.md §2, L = 1), so
# the rings below are never read or written; they exist because the layer
# description has them. One set per pool shape, device and dtype.
_one_entry_rings: dict = {}


def packed_decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
                  use_qk_l2norm_in_kernel, gate_kind, gate_mode="raw", gate_lower_bound=0.0, padding="out_of_range"):
    """The engines' packed decode (initial_state updated every step, out [B,
    1, HV, V]), as rssm's replay decode at L = 1. Returns (out, initial_state)
    as theirs do."""
    B = mixed_qkv.shape[0]
    slots, HV, V, K = initial_state.shape
    H = (mixed_qkv.shape[1] - HV * V) // (2 * K)
    g_shape = (slots, HV, 1, K) if gate_kind == "kda" else (slots, HV, 1)
    shapes = ((slots, HV, 1, V), (slots, H, 1, K), g_shape)
    if is_torch_tensor(initial_state):
        import torch
        dev = initial_state.device

        def zeros(shape, dtype):
            return torch.zeros(shape, device=dev, dtype=dtype)
        ring_dtype, f32, i32 = mixed_qkv.dtype, torch.float32, torch.int32
    else:
        import numpy
        dev = "host"
        zeros = numpy.zeros
        ring_dtype = mixed_qkv.dtype if mixed_qkv.dtype in (numpy.float32, numpy.float16) else numpy.float32
        f32, i32 = numpy.float32, numpy.int32
    key = (dev, str(ring_dtype), shapes, gate_kind)
    rings = _one_entry_rings.get(key)
    if rings is None:
        rings = (zeros(shapes[0], ring_dtype), zeros(shapes[1], ring_dtype), zeros(shapes[2], f32))
        _one_entry_rings[key] = rings
    write_pos = zeros((B,), i32)  # 0 == L - 1: every row flushes
    fused_recurrent_gated_delta_rule_replayssm(
        mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, *rings, rows_out(out, B, HV, V),
        ssm_state_indices, write_pos, None, gate_kind=gate_kind, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        gate_mode=gate_mode, gate_lower_bound=gate_lower_bound, padding=padding)
    return out, initial_state
