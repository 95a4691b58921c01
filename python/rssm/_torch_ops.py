"""torch custom ops over the decode step and the cursor advance, so that
torch.compile sees them as opaque ops that mutate their arguments (it does
not trace into ctypes) and a CUDA graph captures their launches:

  rssm::replayssm_decode   mutates initial_state, d_cache, k_cache, g_cache,
                           out (and overflow when given)
  rssm::replayssm_advance  mutates cursor

Each has a fake (meta) implementation that does nothing: the ops return
nothing and change no shape, so shape propagation needs no more. Imported
only where torch is (rssm imports this module when torch is already
imported, or on the first call with a torch tensor); torch >= 2.4 for
torch.library.custom_op, below which the entry points call rssm directly,
which works eagerly but not under torch.compile.
"""

from __future__ import annotations

import sys
from typing import Optional

import torch

from . import _arrays
from . import layer as _layer
from . import replayssm as _replayssm

_HAVE_CUSTOM_OP = hasattr(torch, "library") and hasattr(torch.library, "custom_op")


def available() -> bool:
    return _HAVE_CUSTOM_OP


if _HAVE_CUSTOM_OP:
    @torch.library.custom_op("rssm::replayssm_decode",
                             mutates_args=("initial_state", "d_cache", "k_cache", "g_cache", "out", "overflow"))
    def replayssm_decode(mixed_qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, A_log: Optional[torch.Tensor],
                         dt_bias: Optional[torch.Tensor], initial_state: torch.Tensor, d_cache: torch.Tensor,
                         k_cache: torch.Tensor, g_cache: torch.Tensor, out: torch.Tensor,
                         ssm_state_indices: torch.Tensor, write_pos: torch.Tensor,
                         force_flush: Optional[torch.Tensor], overflow: Optional[torch.Tensor], scale: float,
                         gate_kind: str, gate_mode: str, gate_lower_bound: float, use_qk_l2norm: bool,
                         ring_len: int, max_rows: int, backend: str) -> None:
        # Runs on torch's current stream: the capture stream inside
        # torch.cuda.graph, so the graph holds the launch.
        _replayssm.decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache, out,
                          ssm_state_indices, write_pos, force_flush, gate_kind=gate_kind, gate_mode=gate_mode,
                          gate_lower_bound=gate_lower_bound, use_qk_l2norm=use_qk_l2norm, ring_len=ring_len or None,
                          max_rows=max_rows or None, overflow=overflow, backend=backend or None)

    @replayssm_decode.register_fake
    def _replayssm_decode_fake(mixed_qkv, a, b, A_log, dt_bias, initial_state, d_cache, k_cache, g_cache, out,
                               ssm_state_indices, write_pos, force_flush, overflow, scale, gate_kind, gate_mode,
                               gate_lower_bound, use_qk_l2norm, ring_len, max_rows, backend) -> None:
        return None

    @torch.library.custom_op("rssm::replayssm_advance", mutates_args=("cursor",))
    def replayssm_advance(cursor: torch.Tensor, slot_index: torch.Tensor, write_pos: torch.Tensor,
                          force: Optional[torch.Tensor], ring_len: int, backend: str) -> None:
        _layer.advance(cursor, slot_index, write_pos, force, ring_len=ring_len, backend_name=backend or None)

    @replayssm_advance.register_fake
    def _replayssm_advance_fake(cursor, slot_index, write_pos, force, ring_len, backend) -> None:
        return None


_arrays.torch_module = torch
_arrays.torch_ops = sys.modules[__name__] if _HAVE_CUSTOM_OP else None
_arrays.torch_tried = True


def decode(*args) -> None:
    torch.ops.rssm.replayssm_decode(*args)


def advance(*args) -> None:
    torch.ops.rssm.replayssm_advance(*args)
