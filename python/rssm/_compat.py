"""What the engines' signature-compatible entry points (rssm.sglang,
rssm.vllm) share: their out [B, 1, HV, V] as rssm's [B, HV, V], and a packed
decode on rssm's replay kernels."""

from __future__ import annotations

from ._arrays import ArrayInfo, array_info, is_torch_tensor
from .layer import c_number
from .replayssm import _dims, fused_recurrent_gated_delta_rule_replayssm


def decode_shapes(mixed_qkv, initial_state) -> tuple:
    """(B, width of mixed_qkv, slots, HV, V, K, mixed_qkv's dtype), read as the entry reads its
    arrays and checked for rank and extent before any is used: a wrong
    argument is a ValueError or TypeError naming it and the shape expected."""
    qkv, state = array_info(mixed_qkv, "mixed_qkv"), array_info(initial_state, "initial_state")
    _dims(qkv, 2, "[B, 2*H*K + HV*V]")
    _dims(state, 4, "[slots, HV, V, K]")
    if 0 in state.shape[1:]:
        raise ValueError(f"initial_state has shape {list(state.shape)}, expected [slots, HV, V, K] with HV, V and "
                         "K at least 1")
    return (*qkv.shape, *state.shape, qkv.dtype)


def rows_out(out, B: int, HV: int, V: int):
    """An engine's out [B, 1, HV, V] as the [B, HV, V] rssm takes: a view
    (its dimension of 1 selected away), so rssm writes the engine's tensor
    in place whatever its strides."""
    a = array_info(out, "out")
    if a.shape != (B, 1, HV, V):
        raise ValueError(f"out has shape {list(a.shape)}, expected [B, 1, HV, V] = {[B, 1, HV, V]}")
    if hasattr(out, "__getitem__"):  # torch, NumPy, CuPy: a view of their own kind
        return out[:, 0]
    return a._replace(shape=(B, HV, V), strides=(a.strides[0], *a.strides[2:]))


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
    B, width, slots, HV, V, K, io_dtype = decode_shapes(mixed_qkv, initial_state)
    H, rest = divmod(width - HV * V, 2 * K)
    if H < 1 or rest:
        raise ValueError(f"mixed_qkv has {width} columns, expected 2*H*K + HV*V for some H >= 1 (HV={HV}, V={V}, "
                         f"K={K} from initial_state)")
    gate_lower_bound = c_number("lower_bound", gate_lower_bound, "gate_lower_bound")
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
        ring_dtype = numpy.float16 if io_dtype == "fp16" else numpy.float32
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
