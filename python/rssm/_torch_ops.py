"""torch custom ops over the decode step, the fold and the cursor advance,
so that torch.compile sees them as opaque ops that mutate their arguments
(it does not trace into ctypes) and a CUDA graph captures their launches:

  rssm::replayssm_decode       mutates initial_state, d_cache, k_cache,
                               g_cache, out (and overflow when given)
  rssm::replayssm_materialise  mutates initial_state
  rssm::replayssm_advance      mutates cursor

Each has a fake (meta) implementation that does nothing: the ops return
nothing and change no shape, so shape propagation needs no more. They are
defined through torch.library.Library, as vLLM defines its own ops: a call
then goes from the dispatcher straight to the implementation, without the
Python layers torch.library.custom_op wraps around it. Imported only where
torch is, by rssm.torch_ext.register (which rssm calls when torch is
already imported, or on the first call with a torch tensor), which then
loads the extension and calls finish(); torch >= 2.4 for
torch.library.register_fake, below which the entry points call rssm
directly, which works eagerly but not under torch.compile.

With the compiled extension (rssm.torch_ext: C++ kernels of the three ops
for CPU and CUDA, built against this torch) loaded, the schemas and fakes
are still these, and Python implements rssm::_replayssm_decode_plan,
_replayssm_materialise_plan and _replayssm_advance_plan, the extension's
first call of each description. The schemas are written here once: the
extension adds boxed kernels to ops defined here, and works without them
only as the Python implementations do.

Also what rssm._arrays and rssm._prepared ask of torch: whether torch would
see a call (watching), what can change under one tensor object
(tensor_facts), torch's current stream.
"""

from __future__ import annotations

import sys
from operator import attrgetter

import torch

from . import _arrays
from . import layer as _layer
from . import replayssm as _replayssm

_HAVE_OPS = hasattr(torch, "library") and hasattr(torch.library, "register_fake")


def available() -> bool:
    return _HAVE_OPS


_SCHEMAS = {
    "replayssm_decode": (
        "(Tensor mixed_qkv, Tensor a, Tensor b, Tensor? A_log, Tensor? dt_bias, Tensor(a!) initial_state, "
        "Tensor(b!) d_cache, Tensor(c!) k_cache, Tensor(d!) g_cache, Tensor(e!) out, Tensor ssm_state_indices, "
        "Tensor write_pos, Tensor? force_flush, Tensor(f!)? overflow, float scale, str gate_kind, str gate_mode, "
        "float gate_lower_bound, bool use_qk_l2norm, int ring_len, int max_rows, str backend, str padding) -> ()"),
    "replayssm_materialise": (
        "(Tensor(a!) initial_state, Tensor d_cache, Tensor k_cache, Tensor g_cache, Tensor ssm_state_indices, "
        "Tensor write_pos, str gate_kind, int ring_len, int max_rows, str backend, str padding) -> ()"),
    "replayssm_advance": (
        "(Tensor(a!) cursor, Tensor slot_index, Tensor write_pos, Tensor? force, int ring_len, str backend, "
        "str padding) -> ()"),
}
# The extension's calls of the Python path (rssm.replayssm.planned_decode,
# planned_materialise, rssm.layer.planned_advance): an op's arguments and
# the stream the extension launches on, and the plan it keeps for that
# stream.
for _name in ("replayssm_decode", "replayssm_materialise", "replayssm_advance"):
    _SCHEMAS[f"_{_name}_plan"] = _SCHEMAS[_name].replace(") -> ()", ", int stream) -> int[]")


def _decode_impl(mixed_qkv, a, b, A_log, dt_bias, initial_state, d_cache, k_cache, g_cache, out, ssm_state_indices,
                 write_pos, force_flush, overflow, scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm,
                 ring_len, max_rows, backend, padding) -> None:
    # Runs on torch's current stream: the capture stream inside
    # torch.cuda.graph, so the graph holds the launch.
    _replayssm.decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache, out,
                      ssm_state_indices, write_pos, force_flush, gate_kind=gate_kind, gate_mode=gate_mode,
                      gate_lower_bound=gate_lower_bound, use_qk_l2norm=use_qk_l2norm, ring_len=ring_len,
                      max_rows=max_rows, overflow=overflow, backend=backend, padding=padding)


def _materialise_impl(initial_state, d_cache, k_cache, g_cache, ssm_state_indices, write_pos, gate_kind, ring_len,
                      max_rows, backend, padding) -> None:
    _replayssm.materialise_direct(initial_state, d_cache, k_cache, g_cache, ssm_state_indices, write_pos,
                                  gate_kind=gate_kind, ring_len=ring_len, max_rows=max_rows, backend=backend,
                                  padding=padding)


def _advance_impl(cursor, slot_index, write_pos, force, ring_len, backend, padding) -> None:
    _layer.advance(cursor, slot_index, write_pos, force, ring_len=ring_len, backend_name=backend or None,
                   padding=padding)


def _decode_plan_impl(mixed_qkv, a, b, A_log, dt_bias, initial_state, d_cache, k_cache, g_cache, out,
                      ssm_state_indices, write_pos, force_flush, overflow, scale, gate_kind, gate_mode,
                      gate_lower_bound, use_qk_l2norm, ring_len, max_rows, backend, padding, stream) -> list:
    return _replayssm.planned_decode(
        (mixed_qkv, a, b, A_log, dt_bias, initial_state, d_cache, k_cache, g_cache, out, ssm_state_indices, write_pos,
         force_flush, overflow), scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len, max_rows,
        backend, padding, stream)


def _materialise_plan_impl(initial_state, d_cache, k_cache, g_cache, ssm_state_indices, write_pos, gate_kind,
                           ring_len, max_rows, backend, padding, stream) -> list:
    # The fold takes the layer the Python path takes, whatever the stream:
    # it reads only the pool's description (rssm.layer.pool_layer).
    return _replayssm.planned_materialise(initial_state, d_cache, k_cache, g_cache, ssm_state_indices, write_pos,
                                          gate_kind, ring_len, max_rows, backend, padding)


def _advance_plan_impl(cursor, slot_index, write_pos, force, ring_len, backend, padding, stream) -> list:
    return _layer.planned_advance(cursor, slot_index, write_pos, force, ring_len, backend, padding)


def _fake(*args) -> None:
    return None


compiled = False  # the extension's kernels run replayssm_decode (rssm.torch_ext)

if _HAVE_OPS:
    _library = torch.library.Library("rssm", "FRAGMENT")
    for _name in ("replayssm_decode", "replayssm_materialise", "replayssm_advance"):
        _library.define(_name + _SCHEMAS[_name], tags=(torch.Tag.pt2_compliant_tag,))
        torch.library.register_fake(f"rssm::{_name}", _fake, lib=_library)
    for _name, _impl in (("_replayssm_decode_plan", _decode_plan_impl),
                         ("_replayssm_materialise_plan", _materialise_plan_impl),
                         ("_replayssm_advance_plan", _advance_plan_impl)):
        _library.define(_name + _SCHEMAS[_name])
        _library.impl(_name, _impl, "CompositeExplicitAutograd")


finished = False  # finish() has run


def finish(compiled_kernels: bool) -> None:
    """The last step of registering the ops, once the compiled extension
    (rssm.torch_ext) has added its kernels to them, or could not
    (`compiled_kernels` False: the Python implementations run them); then
    the entry points see the ops (rssm._arrays.torch_ops). Once."""
    global finished, compiled, _decode_op, _materialise_op, _advance_op
    if finished:
        return
    if _HAVE_OPS:
        compiled = compiled_kernels
        if not compiled:
            for name, impl in (("replayssm_decode", _decode_impl), ("replayssm_materialise", _materialise_impl),
                               ("replayssm_advance", _advance_impl)):
                _library.impl(name, impl, "CompositeExplicitAutograd")
        _decode_op = torch.ops.rssm.replayssm_decode.default
        _materialise_op = torch.ops.rssm.replayssm_materialise.default
        _advance_op = torch.ops.rssm.replayssm_advance.default
    finished = True
    _arrays.torch_module = torch
    _arrays.torch_ops = sys.modules[__name__] if _HAVE_OPS else None
    _arrays.torch_tried = True


def decode(*args) -> None:
    _decode_op(*args)


def materialise(*args) -> None:
    _materialise_op(*args)


def advance(*args) -> None:
    _advance_op(*args)


def _watching_reader():
    """rssm._arrays.torch_watching's test, from what this torch has: each
    piece a C call or a module flag, except is_compiling, which dynamo
    folds to True while it traces. A torch without one of them is taken to
    be watching always (every call through the op)."""
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)  # infra modes (fake, proxy) too
    function_mode = getattr(torch._C, "_is_torch_function_mode_enabled", None)
    profiling = getattr(getattr(torch._C, "_autograd", None), "_profiler_enabled", None)
    if None in (is_compiling, dispatch_modes, function_mode, profiling):
        return lambda: True

    def watching() -> bool:
        return is_compiling() or dispatch_modes() > 0 or function_mode() or profiling()
    return watching


watching = _watching_reader()

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def plain_tensor(x) -> bool:
    """A tensor of torch's own classes: its data_ptr() is its memory, and no
    __torch_function__ of a subclass is skipped by a direct call."""
    return type(x) in _PLAIN


def plain_tensors(arrays) -> bool:
    """No torch tensor among `arrays` is of a subclass (those go through the
    op, where the subclass sees the call)."""
    return not any(isinstance(x, torch.Tensor) and type(x) not in _PLAIN for x in arrays)


_meta = attrgetter("__class__", "shape", "dtype")
_data_ptr, _stride, _device = torch.Tensor.data_ptr, torch.Tensor.stride, torch.Tensor.get_device


def tensor_facts(x) -> tuple:
    """What can change under one tensor object (set_(), resize_(), .data =
    and __class__ = change some of it): class, shape, dtype, address,
    strides and device index (-1 on the CPU: with the address that pins the
    device, as no two devices' memory shares an address under CUDA's
    unified addressing; a tensor with no elements, whose address may be 0
    anywhere, is never read)."""
    return _meta(x), x.data_ptr(), x.stride(), x.get_device()


def _tensors_facts(xs) -> tuple:
    return tuple(map(_meta, xs)), tuple(map(_data_ptr, xs)), tuple(map(_stride, xs)), tuple(map(_device, xs))


tensor_facts.many = _tensors_facts  # rssm._prepared: the same facts of many tensors, as maps


def current_stream_reader(device_index):
    """A function giving torch's current stream on that device as rssm's
    stream argument (None for the legacy default stream), read at each
    call: inside torch.cuda.graph that is the capture stream."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    index = device_index if device_index is not None else torch.cuda.current_device()
    if raw is not None:
        return lambda: raw(index) or None
    return lambda: torch.cuda.current_stream(index).cuda_stream or None
