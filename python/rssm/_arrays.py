"""Reading arrays without copying them: an address, a shape, strides in
elements, a dtype and a device, from any of

  * a torch.Tensor (read directly: torch's own __cuda_array_interface__
    refuses bfloat16, and a CPU tensor has no __array_interface__),
  * an object with __cuda_array_interface__ (CuPy, Numba, JAX, ...),
  * an object with __array_interface__ (NumPy; ml_dtypes' bfloat16 too),
  * an object with only __dlpack__ and __dlpack_device__ (the capsule is
    read in place and kept, unconsumed, for the call).

And, for the prepared calls of rssm._prepared, what of an array object can
change while the object stays the same (fact_reader).

Nothing here imports torch or numpy: a torch tensor is recognised by its
class's module, so the package works without either installed.
"""

from __future__ import annotations

import ctypes
import sys
import warnings
from ctypes import POINTER, Structure, c_char_p, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p
from functools import lru_cache
from math import prod
from operator import attrgetter
from typing import Any, NamedTuple

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


class ArrayInfo(NamedTuple):
    """What rssm needs of one array. `strides` are in elements; `obj` keeps
    the array (or a converted copy, or a DLPack capsule) alive while its
    address is in use. A named tuple rather than a dataclass: a call reads
    a dozen of them, and building one costs a quarter as much."""
    name: str
    ptr: int
    shape: tuple
    strides: tuple
    dtype: str
    device: str                 # "cpu" or "cuda"
    device_index: int | None = None  # the CUDA ordinal, where the array says (None: it does not, or "cpu")
    stream: int | None = None   # __cuda_array_interface__'s "stream", if given
    kind: str = "array"         # "torch", "cuda_array_interface", "array_interface", "dlpack"
    obj: Any = None
    readonly: bool = False      # its producer marks it read-only (NumPy's writeable=False, ...)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def layout(self) -> tuple:
        """Everything but the address and the stream: what a call's checks
        depend on (rssm._prepared keys its plans by it)."""
        return self.shape, self.strides, self.dtype, self.device, self.device_index, self.kind, self.readonly

    def columns(self, name: str, start: int, width: int) -> "ArrayInfo":
        """Columns start..start+width of a 2-D array, as another ArrayInfo on
        the same memory: how q, k and v are read out of one mixed_qkv row."""
        assert len(self.shape) == 2
        return self._replace(name=name, ptr=self.ptr + start * self.strides[1] * self.itemsize,
                             shape=(self.shape[0], width))

    def describe(self) -> str:
        return f"{self.name} (shape {list(self.shape)}, {self.dtype}, strides {list(self.strides)} elements)"


# Set by rssm._torch_ops once the custom ops are registered (or cannot be):
# the torch module, and that module itself. The entry points read them as
# plain globals, so that torch.compile, tracing an entry point, meets
# attribute reads and an isinstance rather than an import.
torch_module = None
torch_ops = None
torch_tried = False
# Set by the package (rssm/__init__.py): registers the torch ops on the
# first call with a torch tensor. A hook rather than an import: the torch
# ops are built on the modules below them, this one included (the
# package's layers: docs/python.md, "The package's modules").
load_torch_ops = None


def is_torch_tensor(x: Any) -> bool:
    torch = torch_module if torch_module is not None else sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def torch_ops_for(x: Any):
    """rssm._torch_ops when `x` is a torch tensor and the custom ops are
    registered (registering them on the first such call), else None."""
    if not torch_tried:
        if not is_torch_tensor(x) or load_torch_ops is None:
            return None
        load_torch_ops()  # registers the ops, sets the globals above
    if torch_ops is None or not isinstance(x, torch_module.Tensor):
        return None
    return torch_ops


def torch_watching() -> bool:
    """True when torch must see a call as its custom op rather than have it
    call rssm directly: while torch.compile traces (the first test, which
    dynamo folds to a constant, so it traces nothing else here), under a
    dispatch or function mode (fake tensors, functionalization, a mode
    that logs), while the profiler records. False when torch is not
    loaded."""
    return torch_ops is not None and torch_ops.watching()


_torch_dtypes: dict = {}   # torch dtype object -> name, filled as dtypes are met


def _from_torch(x, name: str) -> ArrayInfo:
    dtype = _torch_dtypes.get(x.dtype)
    if dtype is None:
        dtype = _TORCH_DTYPES.get(str(x.dtype))
        if dtype is None:
            raise TypeError(f"{name}: torch dtype {x.dtype} is not one rssm takes")
        _torch_dtypes[x.dtype] = dtype
    if x.is_cuda:
        device, index = "cuda", x.get_device()
    elif x.is_cpu:
        device, index = "cpu", None
    else:
        raise TypeError(f"{name}: a tensor on {x.device} (rssm takes CPU and CUDA tensors)")
    return ArrayInfo(name, x.data_ptr(), tuple(x.shape), tuple(x.stride()), dtype, device, index, None, "torch", x)


_numpy_dtypes = None  # numpy dtype object -> name, for the native-order dtypes rssm takes


def _from_numpy(x, name: str, np) -> ArrayInfo | None:
    """A plain ndarray read from its attributes (faster than parsing its
    __array_interface__); None for what only the interface path reads
    (ml_dtypes' bfloat16, byte-swapped data), or refuses."""
    global _numpy_dtypes
    if _numpy_dtypes is None:
        _numpy_dtypes = {np.dtype(t): n for t, n in (
            ("=f4", "fp32"), ("=f2", "fp16"), ("=f8", "fp64"), ("=i4", "int32"), ("=i8", "int64"),
            ("=u4", "uint32"), ("?", "bool"), ("u1", "uint8"), ("i1", "int8"), ("=i2", "int16"))}
    dtype = _numpy_dtypes.get(x.dtype)
    if dtype is None:
        return None
    shape = x.shape
    if 0 in shape:  # no element is addressed: its strides are whatever NumPy left, as contiguous as any
        strides = _contiguous_strides(shape)
    else:
        strides = _element_strides(x.strides, ITEMSIZE[dtype])
        if strides is None:
            return None
    return ArrayInfo(name, x.__array_interface__["data"][0], shape, strides, dtype, "cpu", None, None,
                     "array_interface", x, not x.flags.writeable)


def _dtype_from_interface(iface: dict, x: Any, name: str) -> str:
    typestr = iface["typestr"]
    if not (isinstance(typestr, str) and len(typestr) > 2 and typestr[2:].isdigit()):
        # NumPy's object arrays say "|O" (Python objects, no size): no memory rssm could read
        raise TypeError(f"{name}: element type {typestr!r} is not one rssm takes (an array of numbers, "
                        "not of Python objects)")
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


@lru_cache(maxsize=1024)
def _contiguous_strides(shape: tuple) -> tuple:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


@lru_cache(maxsize=1024)
def _element_strides(byte_strides: tuple, itemsize: int) -> tuple | None:
    """Byte strides in elements; None if one is not a whole number of them."""
    if any(s % itemsize for s in byte_strides):
        return None
    return tuple(s // itemsize for s in byte_strides)


def _strides_in_elements(byte_strides, shape, itemsize: int, name: str) -> tuple:
    if byte_strides is None:  # C-contiguous, as both interfaces define it
        return _contiguous_strides(shape)
    strides = _element_strides(tuple(byte_strides), itemsize)
    if strides is None:
        s = next(s for s in byte_strides if s % itemsize)
        raise ValueError(f"{name}: a stride of {s} bytes is not a whole number of {itemsize}-byte elements")
    return strides


def _device_index(x: Any) -> int | None:
    """The CUDA device an array object says it is on: a torch-like
    `.device.index`, or CuPy's `.device.id`; None where it does not say
    (__cuda_array_interface__ itself does not), and librssm then asks CUDA
    where the memory is (rssm.h, rssm_layer_run)."""
    dev = getattr(x, "device", None)
    for attr in ("index", "id"):
        i = getattr(dev, attr, None)
        if type(i) is int:
            return i
    return None


def _from_interface(iface: dict, x: Any, name: str, device: str, kind: str) -> ArrayInfo:
    shape = tuple(map(int, iface["shape"]))
    dtype = _dtype_from_interface(iface, x, name)
    data = iface.get("data")
    if not isinstance(data, tuple):
        raise TypeError(f"{name}: its {kind} data is not a (pointer, read-only) pair")
    ptr = int(data[0] or 0)
    strides = _strides_in_elements(iface.get("strides"), shape, ITEMSIZE[dtype], name)
    stream = iface.get("stream") if device == "cuda" else None
    index = _device_index(x) if device == "cuda" else None
    return ArrayInfo(name, ptr, shape, strides, dtype, device, index, stream, kind, x, bool(data[1]))


# ------------------------------------------------------------------ DLPack
# dlpack.h's structs, the classic (unversioned, capsule "dltensor") and the
# versioned (DLPack >= 1.0, capsule "dltensor_versioned") managed tensor.

class _DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", _DLDevice), ("ndim", c_int32), ("dtype", _DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class _DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class _DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class _DLManagedTensorVersioned(Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                ("flags", c_uint64), ("dl_tensor", _DLTensor)]


_DL_DEVICES = {1: "cpu", 3: "cpu", 2: "cuda", 13: "cuda"}  # CPU, CUDA host (pinned), CUDA, CUDA managed
_DL_DTYPES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8",
              (1, 32): "uint32", (2, 16): "fp16", (2, 32): "fp32", (2, 64): "fp64", (4, 16): "bf16",
              (6, 8): "bool"}
_DL_FLAG_READ_ONLY = 1 << 0
_DL_FLAG_IS_COPIED = 1 << 1

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = c_void_p, [ctypes.py_object, c_char_p]


def _export_dlpack(x: Any, device: str, stream: int | None):
    """x.__dlpack__(), asking for a versioned capsule where the producer
    takes max_version (the array API's way: retry without it on
    TypeError), and telling a CUDA producer the stream the call runs on
    (none given: the legacy default stream, rssm's default too)."""
    kw = {"stream": stream} if device == "cuda" and stream is not None else {}
    try:
        return x.__dlpack__(max_version=(1, 0), **kw)
    except TypeError:
        return x.__dlpack__(**kw)


def _from_dlpack(x: Any, name: str, stream: int | None) -> ArrayInfo:
    """The capsule is read, not consumed: it keeps its name, so its own
    destructor calls the producer's deleter once the ArrayInfo (which holds
    it) is gone, after the call."""
    dev_type, dev_id = x.__dlpack_device__()
    device = _DL_DEVICES.get(int(dev_type))
    if device is None:
        raise TypeError(f"{name}: a DLPack array on device type {int(dev_type)} (rssm takes CPU and CUDA memory)")
    capsule = _export_dlpack(x, device, stream)
    label = _capsule_name(capsule)
    readonly = False  # the classic capsule has no flags
    if label == b"dltensor_versioned":
        m = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, label))
        if m.version.major != 1:
            raise TypeError(f"{name}: DLPack {m.version.major}.{m.version.minor} is not a version rssm reads (1.x)")
        if m.flags & _DL_FLAG_IS_COPIED:
            raise TypeError(f"{name}: its __dlpack__ made a copy; rssm reads and writes arrays in place")
        readonly = bool(m.flags & _DL_FLAG_READ_ONLY)
        t = m.dl_tensor
    elif label == b"dltensor":
        t = _DLManagedTensor.from_address(_capsule_pointer(capsule, label)).dl_tensor
    else:
        raise TypeError(f"{name}: __dlpack__ returned a capsule named {label!r}, not an unused DLPack tensor")
    dtype = _DL_DTYPES.get((t.dtype.code, t.dtype.bits))
    if dtype is None or t.dtype.lanes != 1:
        raise TypeError(f"{name}: DLPack element type (code {t.dtype.code}, {t.dtype.bits} bits, "
                        f"{t.dtype.lanes} lanes) is not one rssm takes")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else _contiguous_strides(shape)
    ptr = (t.data or 0) + t.byte_offset
    return ArrayInfo(name, ptr, shape, strides, dtype, device, int(dev_id) if device == "cuda" else None, None,
                     "dlpack", (x, capsule), readonly)


def array_info(x: Any, name: str, stream: int | None = None) -> ArrayInfo:
    """Reads `x` without copying it (see the module's docstring). `stream`:
    the CUDA stream the call will run on, for a DLPack producer."""
    np = sys.modules.get("numpy")
    if np is not None and type(x) is np.ndarray:
        info = _from_numpy(x, name, np)
        if info is not None:
            return info
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
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return _from_dlpack(x, name, stream)
    raise TypeError(f"{name}: expected an array (a torch tensor, or an object with __cuda_array_interface__, "
                    f"__array_interface__ or __dlpack__, such as a CuPy or NumPy array), got {type(x).__name__}")


def contiguous_tail(a: ArrayInfo, first_dim: int) -> bool:
    """True when dims first_dim.. of `a` are laid out C-contiguously (a dim
    of size 1 may have any stride: it is never stepped over)."""
    step = 1
    for n, s in zip(reversed(a.shape[first_dim:]), reversed(a.strides[first_dim:])):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def _need_int32_range(a: ArrayInfo, lo: int, hi: int) -> None:
    if lo < -2**31 or hi > 2**31 - 1:
        bad = lo if lo < -2**31 else hi
        raise ValueError(f"{a.name} holds {bad}, outside int32, which rssm's per-row arrays are: a narrowing "
                         "would wrap it to another slot or position")


def convert(a: ArrayInfo, dtype: str, why: str) -> ArrayInfo:
    """A copy of the array `a` was read from (a.obj) in `dtype` (the one
    place the package copies): for the gates, which the C API takes in fp32
    (gate and beta in bf16 too), and the small per-row int32 arrays. torch:
    Tensor.to on the tensor's own device and stream; NumPy:
    numpy.ascontiguousarray. Other arrays must come in the right dtype."""
    x = a.obj
    narrowing = dtype == "int32" and a.dtype in ("int64", "uint32")
    if a.kind == "torch":
        import torch
        t = {"fp32": torch.float32, "bf16": torch.bfloat16, "int32": torch.int32}[dtype]
        if narrowing and not x.is_cuda:
            _need_int32_range(a, int(x.min()) if x.numel() else 0, int(x.max()) if x.numel() else 0)
        elif narrowing:
            # Device memory is not read back (that would wait for the GPU,
            # and a CUDA graph capture forbids it): a value outside int32
            # saturates instead of wrapping, so a slot index past the end
            # stays padding (rssm.h) and never names slot index mod 2**32.
            x = x.clamp(-2**31, 2**31 - 1)
        y = x.to(t).contiguous()
        return _from_torch(y, a.name)
    if a.kind == "array_interface" and a.device == "cpu" and dtype != "bf16":  # NumPy has no bf16
        import numpy as np
        if narrowing:
            arr = np.asarray(x)
            if arr.size:
                _need_int32_range(a, int(arr.min()), int(arr.max()))
        y = np.ascontiguousarray(x, dtype={"fp32": np.float32, "int32": np.int32}[dtype])
        return _from_interface(y.__array_interface__, y, a.name, "cpu", "array_interface")
    raise TypeError(f"{a.name}: {why} is {dtype}; this {a.dtype} {a.kind} array cannot be converted by rssm "
                    f"(pass {dtype})")


# ------------------------------------------------------- prepared calls
# A prepared call (rssm._prepared) keeps what it read of each array object
# (its facts) and, on each later call with the same objects (the same
# ids), reads them again through the reader below and compares. Mostly
# the facts include the address, so they say all C would read, whichever
# object now has the id. A NumPy array's address is the exception: it
# costs as much to read as all the rest, and it cannot change under the
# object, so its facts leave it out and the call holds a weak reference to
# the array instead, which drops the call from the cache when the array
# dies, before its id can be reused (by_identity below).

def _numpy_address_is_fixed(np) -> bool:
    """Whether an ndarray's data pointer is fixed for the object's life
    while a weak reference to it exists: resize() refuses such an array in
    every NumPy, and `ndarray.data` has no setter since NumPy 2 (asked of
    the NumPy at hand on a throwaway array, not of its version string)."""
    probe = np.zeros(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probe.data = np.zeros(1).data
    except AttributeError:
        return True
    return False


_numpy_fixed = None
# What can change under one ndarray object but its address: its shape,
# strides and dtype (each has a setter). Not its class: ndarray is an
# immutable type, whose instances' __class__ cannot be assigned.
NUMPY_FACTS = attrgetter("shape", "strides", "dtype", "flags.writeable")
ARRAY_INTERFACE = attrgetter("__array_interface__")
CUDA_ARRAY_INTERFACE = attrgetter("__cuda_array_interface__")


def fact_reader(x: Any, a: ArrayInfo) -> tuple:
    """(reader, by_identity): a function of the array object whose value
    differs whenever anything rssm read of `x` (address, shape, strides,
    dtype, device) would, and whether the reader leaves out the address
    (then the facts hold only for the object `x` itself). (None, False)
    for an array read anew on every call: a DLPack export, whose capsule is
    per call, or a torch tensor of a subclass (the op path sees those)."""
    global _numpy_fixed
    if a.kind == "torch":
        plain = torch_ops is not None and torch_ops.plain_tensor(x)
        return (torch_ops.tensor_facts if plain else None), False
    if a.kind == "array_interface":
        np = sys.modules.get("numpy")
        if np is not None and type(x) is np.ndarray:
            if _numpy_fixed is None:
                _numpy_fixed = _numpy_address_is_fixed(np)
            if _numpy_fixed:
                return NUMPY_FACTS, True
        return ARRAY_INTERFACE, False
    if a.kind == "cuda_array_interface":
        return CUDA_ARRAY_INTERFACE, False
    return None, False
