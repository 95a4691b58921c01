"""Reading arrays without copying them: an address, a shape, strides in
elements, a dtype and a device, from any of

  * a torch.Tensor (read directly: torch's own __cuda_array_interface__
    refuses bfloat16, and a CPU tensor has no __array_interface__),
  * an object with __cuda_array_interface__ (CuPy, Numba, JAX, ...),
  * an object with __array_interface__ (NumPy; ml_dtypes' bfloat16 too).

Nothing here imports torch or numpy: a torch tensor is recognised by its
class's module, so the package works without either installed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from math import prod
from typing import Any

# Names of the element types the package understands, by (kind, bytes) of
# an array-interface typestr.
_TYPESTR = {
    ("f", 4): "fp32", ("f", 2): "fp16", ("f", 8): "fp64",
    ("i", 4): "int32", ("i", 8): "int64", ("u", 4): "uint32",
    ("b", 1): "bool", ("u", 1): "uint8", ("i", 1): "int8", ("i", 2): "int16",
}
_TORCH_DTYPES = {
    "torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float64": "fp64",
    "torch.int32": "int32", "torch.int64": "int64", "torch.uint32": "uint32", "torch.bool": "bool",
    "torch.uint8": "uint8", "torch.int8": "int8", "torch.int16": "int16",
}
ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8, "int32": 4, "int64": 8, "uint32": 4,
            "bool": 1, "uint8": 1, "int8": 1, "int16": 2}


@dataclass(frozen=True)
class ArrayInfo:
    """What rssm needs of one array. `strides` are in elements; `obj` keeps
    the array (or a converted copy) alive while its address is in use."""
    name: str
    ptr: int
    shape: tuple
    strides: tuple
    dtype: str
    device: str                 # "cpu" or "cuda"
    device_index: int | None = None
    stream: int | None = None   # __cuda_array_interface__'s "stream", if given
    kind: str = "array"         # "torch", "cuda_array_interface", "array_interface"
    obj: Any = field(default=None, repr=False, compare=False)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def size(self) -> int:
        return prod(self.shape)

    def columns(self, name: str, start: int, width: int) -> "ArrayInfo":
        """Columns start..start+width of a 2-D array, as another ArrayInfo on
        the same memory: how q, k and v are read out of one mixed_qkv row."""
        assert len(self.shape) == 2
        return ArrayInfo(name, self.ptr + start * self.strides[1] * self.itemsize, (self.shape[0], width),
                         self.strides, self.dtype, self.device, self.device_index, self.stream, self.kind,
                         self.obj)

    def describe(self) -> str:
        return f"{self.name} (shape {list(self.shape)}, {self.dtype}, strides {list(self.strides)} elements)"


# Set by rssm._torch_ops on import: the torch module, and that module itself
# once the custom ops are registered. The entry points read them as plain
# globals, so that torch.compile, tracing an entry point, meets attribute
# reads and an isinstance rather than an import.
torch_module = None
torch_ops = None
torch_tried = False


def is_torch_tensor(x: Any) -> bool:
    torch = torch_module if torch_module is not None else sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def torch_ops_for(x: Any):
    """rssm._torch_ops when `x` is a torch tensor and the custom ops are
    registered (registering them on the first such call), else None."""
    if not torch_tried:
        if not is_torch_tensor(x):
            return None
        from . import _torch_ops  # noqa: F401  (registers the ops, sets the globals above)
    if torch_ops is None or not isinstance(x, torch_module.Tensor):
        return None
    return torch_ops


def _from_torch(x, name: str) -> ArrayInfo:
    dtype = _TORCH_DTYPES.get(str(x.dtype))
    if dtype is None:
        raise TypeError(f"{name}: torch dtype {x.dtype} is not one rssm takes")
    dev = x.device
    if dev.type not in ("cpu", "cuda"):
        raise TypeError(f"{name}: a tensor on {dev} (rssm takes CPU and CUDA tensors)")
    return ArrayInfo(name, x.data_ptr(), tuple(x.shape), tuple(x.stride()), dtype, dev.type,
                     dev.index, None, "torch", x)


def _dtype_from_interface(iface: dict, x: Any, name: str) -> str:
    typestr = iface["typestr"]
    order, kind, size = typestr[0], typestr[1], int(typestr[2:])
    if order == ">" and size > 1:
        raise TypeError(f"{name}: big-endian data ({typestr}) is not supported")
    if kind == "V" and size == 2:
        # NumPy has no bfloat16; ml_dtypes' shows as 2-byte void, named by the dtype.
        if getattr(getattr(x, "dtype", None), "name", "") == "bfloat16":
            return "bf16"
    dtype = _TYPESTR.get((kind, size))
    if dtype is None:
        raise TypeError(f"{name}: element type {typestr!r} is not one rssm takes")
    return dtype


def _strides_in_elements(byte_strides, shape, itemsize: int, name: str) -> tuple:
    if byte_strides is None:  # C-contiguous, as both interfaces define it
        out, step = [], 1
        for n in reversed(shape):
            out.append(step)
            step *= n
        return tuple(reversed(out))
    strides = []
    for s in byte_strides:
        if s % itemsize:
            raise ValueError(f"{name}: a stride of {s} bytes is not a whole number of {itemsize}-byte elements")
        strides.append(s // itemsize)
    return tuple(strides)


def _from_interface(iface: dict, x: Any, name: str, device: str, kind: str) -> ArrayInfo:
    shape = tuple(int(n) for n in iface["shape"])
    dtype = _dtype_from_interface(iface, x, name)
    data = iface.get("data")
    if not isinstance(data, tuple):
        raise TypeError(f"{name}: its {kind} data is not a (pointer, read-only) pair")
    ptr = int(data[0] or 0)
    strides = _strides_in_elements(iface.get("strides"), shape, ITEMSIZE[dtype], name)
    stream = iface.get("stream") if device == "cuda" else None
    return ArrayInfo(name, ptr, shape, strides, dtype, device, None, stream, kind, x)


def array_info(x: Any, name: str) -> ArrayInfo:
    """Reads `x` without copying it (see the module's docstring)."""
    if isinstance(x, ArrayInfo):
        return x
    if is_torch_tensor(x):
        return _from_torch(x, name)
    iface = getattr(x, "__cuda_array_interface__", None)
    if iface is not None:
        return _from_interface(iface, x, name, "cuda", "cuda_array_interface")
    iface = getattr(x, "__array_interface__", None)
    if iface is not None:
        return _from_interface(iface, x, name, "cpu", "array_interface")
    raise TypeError(f"{name}: expected an array (a torch tensor, or an object with __cuda_array_interface__ "
                    f"or __array_interface__, such as a CuPy or NumPy array), got {type(x).__name__}")


def contiguous_tail(a: ArrayInfo, first_dim: int) -> bool:
    """True when dims first_dim.. of `a` are laid out C-contiguously (a dim
    of size 1 may have any stride: it is never stepped over)."""
    step = 1
    for n, s in zip(reversed(a.shape[first_dim:]), reversed(a.strides[first_dim:])):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def convert(x: Any, a: ArrayInfo, dtype: str, why: str) -> ArrayInfo:
    """A copy of `x` in `dtype` (the one place the package copies): for the
    gates, which the C API takes in fp32 (gate and beta in bf16 too), and
    the small per-row int32 arrays. torch: Tensor.to on the tensor's own
    device and stream; NumPy: numpy.ascontiguousarray. Other arrays must
    come in the right dtype."""
    if a.kind == "torch":
        import torch
        t = {"fp32": torch.float32, "bf16": torch.bfloat16, "int32": torch.int32}[dtype]
        y = x.to(t).contiguous()
        return _from_torch(y, a.name)
    if a.kind == "array_interface" and a.device == "cpu" and dtype != "bf16":  # NumPy has no bf16
        import numpy as np
        y = np.ascontiguousarray(x, dtype={"fp32": np.float32, "int32": np.int32}[dtype])
        return _from_interface(y.__array_interface__, y, a.name, "cpu", "array_interface")
    raise TypeError(f"{a.name}: {why} is {dtype}; this {a.dtype} {a.kind} array cannot be converted by rssm "
                    f"(pass {dtype})")
