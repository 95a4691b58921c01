"""rssm: the ReplaySSM decode step of Gated DeltaNet / Kimi Delta Attention
layers, from Python, on the caller's arrays (docs/python.md).

    fused_recurrent_gated_delta_rule_replayssm(...)  one layer, vLLM's names
    advance(cursor, ...)                             the cursors, after the last layer
    materialise(initial_state, ...)                  fold slots' rings into their checkpoints
    Layer(LayerDesc(...), "cpu").run(...)            the lower level: separate q, k, v,
                                                     precomputed or raw gates
    rssm.sglang, rssm.vllm                           the engines' own entry points,
                                                     signature for signature

Bindings are ctypes over librssm.so: the one in this package's folder, or
$RSSM_LIBRARY. Arrays are read in place through torch's tensor API,
__cuda_array_interface__, __array_interface__ or DLPack.
"""

from __future__ import annotations

import sys as _sys

from . import _arrays, _lib
from . import layer as _layer
from ._lib import Error, backend_names, library_path
from .layer import Backend, Layer, LayerDesc, backend, can_implement, clear_cache
from .replayssm import fused_recurrent_gated_delta_rule_replayssm, materialise

__version__ = _lib.version_string()

__all__ = [
    "Backend", "Error", "Layer", "LayerDesc", "__version__", "advance", "backend", "backend_names",
    "can_implement", "clear_cache", "fused_recurrent_gated_delta_rule_replayssm", "library_path", "materialise",
    "register_torch_ops", "torch_extension_status",
]


def advance(cursor, ssm_state_indices, write_pos, force_flush=None, *, ring_len: int, backend: str | None = None,
            stream=None, padding: str = "out_of_range"):
    """After a step's last layer: for every row that is not padding,
    cursor[ssm_state_indices[r]] = 0 if the row flushed (write_pos[r] ==
    ring_len - 1 or force_flush[r]) else write_pos[r] + 1, on the device,
    with a layer of ring_len over len(cursor) slots that this process has
    run with the same padding convention (rssm_layer_advance; padding as
    the decode's: "nonpositive" makes index 0 a padding row too). cursor:
    int32 [slots]. Returns cursor."""
    ops = _arrays.torch_ops_for(cursor)
    if ops is not None:
        if stream is not None:
            raise ValueError("stream: torch tensors run on torch's current stream (use `with torch.cuda.stream(s):`)")
        L = _layer.c_number("ring_len", ring_len, "ring_len")
        ops.advance(cursor, ssm_state_indices, write_pos, force_flush, L, backend or "", padding)
        return cursor
    return _layer.advance(cursor, ssm_state_indices, write_pos, force_flush, ring_len=ring_len,
                          backend_name=backend, stream=stream, padding=padding)


def register_torch_ops() -> bool:
    """Registers the torch custom ops rssm::replayssm_decode,
    rssm::replayssm_materialise and rssm::replayssm_advance (importing
    torch). Done on import when torch is already imported, else on the
    first call with a torch tensor; call it yourself before torch.compile
    if rssm was imported first. False when this torch has no
    torch.library.register_fake (torch < 2.4)."""
    from . import torch_ext
    return torch_ext.register()


def torch_extension_status() -> str:
    """Whether the torch op rssm::replayssm_decode runs the compiled
    extension's C++ kernels (rssm.torch_ext: "loaded: ...", built on first
    use where a C++ compiler is found) or its Python implementation, and why
    ("not built for torch ..., and no C++ compiler was found ...", "off
    ...", "build failed ..."). Registers the torch ops (importing torch,
    and building the extension the first time) if that was not done yet."""
    from . import torch_ext
    return torch_ext.describe()


_arrays.load_torch_ops = register_torch_ops
if "torch" in _sys.modules:
    register_torch_ops()
