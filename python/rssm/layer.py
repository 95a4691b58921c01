"""Backends and layer objects: rssm_backend and rssm_layer of include/rssm.h
("one layer, on the caller's memory"), with the checks that turn a wrong
array into a Python error naming it, before any address reaches C.

A Layer is created once for a LayerDesc (shape, gates, ring, dtypes,
strides) and then runs any number of steps on arrays of that description.
`layer_for` keeps one per (backend, device, description), so code that
calls the per-step entry points pays for the C object once; the device of
a CUDA call is its arrays' (one_device).
"""

from __future__ import annotations

import atexit
import ctypes
import operator
import sys
import threading
import dataclasses
from dataclasses import dataclass
from math import prod
from typing import Any

from . import _lib, _prepared
from ._arrays import ArrayInfo, array_info, contiguous_tail, convert

_STRIDE_FIELDS = (
    "state_slot_stride", "state_head_stride",
    "ring_d_slot_stride", "ring_d_head_stride",
    "ring_k_slot_stride", "ring_k_head_stride",
    "ring_g_slot_stride", "ring_g_head_stride",
    "q_row_stride", "k_row_stride", "v_row_stride", "out_row_stride",
    "gate_row_stride", "beta_row_stride",
)


# The numbers of rssm_layer_desc and their C types' ranges (include/rssm.h).
_FLT_MAX = 3.4028234663852886e38
_C_RANGES = {
    **{f: (0, 2**32 - 1, "uint32") for f in ("num_qk_heads", "num_v_heads", "head_k", "head_v", "slots", "max_rows",
                                             "ring_len")},
    **{f: (-2**63, 2**63 - 1, "int64") for f in _STRIDE_FIELDS},
    **{f: (-_FLT_MAX, _FLT_MAX, "float") for f in ("gate_lower_bound", "q_scale")},
}


def _need_c_number(name: str, v, lo, hi, what: str) -> None:
    """Refuses `v` for a C field of type `what` unless it is a number of that
    kind (an integer for the integer types, anything with __float__ for
    floats) inside lo..hi, infinities and NaN passing for floats (rssm's validation says what it makes of
    them). The flags (replay, qk_l2norm) go to C as 0 or 1 (to_c)."""
    if what == "float":
        if not hasattr(type(v), "__float__"):  # a str converts, but is no number (ctypes refused it unnamed)
            raise TypeError(f"{name} = {v!r}: expected a number")
        x = float(v)
        if x != x or x in (float("inf"), float("-inf")) or lo <= x <= hi:
            return
        raise ValueError(f"{name} = {v!r} does not fit a C float (|x| <= {_FLT_MAX:.7g})")
    try:
        x = operator.index(v)
    except TypeError:
        raise TypeError(f"{name} = {v!r}: expected an integer") from None
    if not lo <= x <= hi:
        raise ValueError(f"{name} = {x}: must be in {lo}..{hi} (rssm_layer_desc's {what})")


def c_number(name: str, v, field: str):
    """An argument `name` that becomes LayerDesc.`field`, as that field's C
    type takes it (a float, or an int: an integral float too, as int()
    took it), or the error of _need_c_number naming the argument."""
    lo, hi, what = _C_RANGES[field]
    if type(v) is int and lo <= v <= hi:
        return v if what != "float" else float(v)
    if what != "float" and isinstance(v, float) and v.is_integer():
        v = int(v)
    _need_c_number(name, v, lo, hi, what)
    return float(v) if what == "float" else operator.index(v)


# ---------------------------------------------------------------- backend

def _need_device(device) -> None:
    if device is not None and (type(device) is not int or device < 0):
        raise ValueError(f"device = {device!r}: expected a CUDA device ordinal (an int >= 0), or None for the "
                         "backend's default")


class Backend:
    """An rssm_backend ("cpu", "cuda", "cuda:bulk", ...) on a device: a CUDA
    ordinal (rssm_backend_create_on_device; the cpu backend takes 0, the
    host), or None for the backend's default (rssm_backend_create: for
    cuda, $RSSM_CUDA_DEVICE or the first GPU the library has code for). Use backend(name,
    device), which keeps one per (name, device) for the process.
    `device_index` is the CUDA ordinal it works on (None: not a cuda one)."""

    def __init__(self, name: str, device: int | None = None):
        _need_device(device)
        L = _lib.lib()
        err = _lib.RssmError()
        h = ctypes.c_void_p()
        if device is None:
            _lib.check(f"rssm_backend_create({name!r})", L.rssm_backend_create(name.encode(), ctypes.byref(h), err),
                       err)
        else:
            _lib.check(f"rssm_backend_create_on_device({name!r}, {device})",
                       L.rssm_backend_create_on_device(name.encode(), device, ctypes.byref(h), err), err)
        self._h = h
        self.requested = name
        self.requested_device = device
        self.name = L.rssm_backend_name(h).decode()
        self.device = L.rssm_backend_device(h).decode()
        self.kernels = L.rssm_backend_kernels(h).decode()
        ordinal = L.rssm_backend_device_ordinal(h)
        self.device_index = ordinal if ordinal >= 0 else None

    @property
    def memory(self) -> str | None:
        """Where the arrays of a launch must live: "cpu" (host memory) or
        "cuda" (device memory); None where the package does not know."""
        if self.name.startswith("cpu"):
            return "cpu"
        if self.name.startswith("cuda"):
            return "cuda"
        return None

    def limit_sms(self, sms: int) -> None:
        """Plans what is created on this backend afterwards (layer objects
        included, so call it before the first decode call that uses this
        backend) for at most `sms` multiprocessors, 0 for all
        (rssm_backend_limit_sms: an H20-shaped run on an H200, docs/bench.md).
        rssm.Error on a backend without such a plan (cpu, vulkan)."""
        if not isinstance(sms, int) or isinstance(sms, bool) or not 0 <= sms <= 0xFFFFFFFF:
            raise ValueError(f"limit_sms: sms = {sms!r}: expected an int in 0..2**32-1")
        err = _lib.RssmError()
        _lib.check("rssm_backend_limit_sms", _lib.lib().rssm_backend_limit_sms(self._h, sms, err), err)

    def close(self) -> None:
        # Layers keep their own reference to the C backend, so this is safe
        # in any order (rssm.h: handles may be destroyed in any order).
        if self._h:
            _lib.lib().rssm_backend_destroy(ctypes.byref(self._h))

    def __repr__(self) -> str:
        where = "" if self.device_index is None else f", device {self.device_index}"
        return f"rssm.Backend({self.name!r} on {self.device!r}{where})"


_lock = threading.Lock()
_backends: dict[tuple, Backend] = {}
_layers: dict[tuple, "Layer"] = {}


def backend(name: str | Backend = "cpu", device: int | None = None) -> Backend:
    """The process's Backend for `name` on `device` (a CUDA ordinal, None
    for the backend's default), created on first use. A Backend passed as
    `name` is returned as it is."""
    if isinstance(name, Backend):
        return name
    with _lock:
        b = _backends.get((name, device))
        if b is None:
            b = _backends[(name, device)] = Backend(name, device)
        return b


def clear_cache() -> None:
    """Destroys the cached layers and backends, the Backend objects that
    backend() handed out included; the next call makes new ones. Layers made
    with Layer(...) stay usable: each holds its C backend itself."""
    with _lock:
        _prepared.clear()  # its calls and plans name the layers destroyed below
        layers, backends = list(_layers.values()), list(_backends.values())
        _layers.clear()
        _backends.clear()
    for layer in layers:
        layer.close()
    for b in backends:
        b.close()


atexit.register(clear_cache)


# ------------------------------------------------------------ description

@dataclass(frozen=True)
class LayerDesc:
    """rssm_layer_desc, with names for the enums. Frozen and hashable: it is
    the key of the layer cache.

    Dtypes are "fp32", "fp16", "bf16"; gate_kind "gdn" or "kda"; gate_mode
    "precomputed" (gate = g <= 0, beta given), "raw" (gate = a, beta = b:
    g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)) or
    "raw_safe" (g = gate_lower_bound * sigmoid(exp(A_log) * (a + dt_bias))).
    Strides are in elements; 0 takes the contiguous value (rssm.h), where
    the ring's contiguous value assumes ring_len - 1 entries per head."""
    num_qk_heads: int
    num_v_heads: int
    head_k: int
    head_v: int
    slots: int
    max_rows: int
    ring_len: int = 16
    gate_kind: str = "gdn"
    gate_mode: str = "precomputed"
    gate_lower_bound: float = 0.0
    replay: bool = True
    state_dtype: str = "fp32"
    ring_dtype: str = "fp16"
    io_dtype: str = "fp32"
    qk_l2norm: bool = True
    q_scale: float = 0.0   # 0: 1/sqrt(head_k)
    state_slot_stride: int = 0
    state_head_stride: int = 0
    ring_d_slot_stride: int = 0
    ring_d_head_stride: int = 0
    ring_k_slot_stride: int = 0
    ring_k_head_stride: int = 0
    ring_g_slot_stride: int = 0
    ring_g_head_stride: int = 0
    q_row_stride: int = 0
    k_row_stride: int = 0
    v_row_stride: int = 0
    out_row_stride: int = 0
    gate_row_stride: int = 0
    beta_row_stride: int = 0
    gate_dtype: str = "fp32"   # of gate and beta: fp32 or bf16 (A_log, dt_bias are fp32)
    # which slot indices pad a row: "out_of_range" (< 0 or >= slots: SGLang's
    # -1) or "nonpositive" (<= 0 too: vLLM's null block 0)
    padding: str = "out_of_range"

    def __post_init__(self):
        for name, table in (("gate_kind", _lib.GATE_KINDS), ("gate_mode", _lib.GATE_MODES),
                            ("state_dtype", _lib.DTYPES), ("ring_dtype", _lib.DTYPES), ("io_dtype", _lib.DTYPES),
                            ("gate_dtype", _lib.DTYPES), ("padding", _lib.PADDINGS)):
            if getattr(self, name) not in table:
                raise ValueError(f"LayerDesc.{name} = {getattr(self, name)!r}: expected one of {sorted(table)}")
        # ctypes stores an int modulo 2**bits and a float past float32's
        # range as infinity: the C description would differ from this one
        # (a ring_len of 2 - 2**32 would run as a ring of 2).
        for name, (lo, hi, what) in _C_RANGES.items():
            v = getattr(self, name)
            if type(v) is not int or not lo <= v <= hi:
                _need_c_number(f"LayerDesc.{name}", v, lo, hi, what)

    @property
    def gate_width(self) -> int:
        """Log-decays per value head: 1 (GDN) or head_k (KDA)."""
        return self.head_k if self.gate_kind == "kda" else 1

    def contiguous(self, stride_field: str) -> int:
        """The value a stride of 0 stands for."""
        H, HV, K, V, G = self.num_qk_heads, self.num_v_heads, self.head_k, self.head_v, self.gate_width
        R = max(self.ring_len - 1, 0)
        return {
            "state_slot_stride": HV * V * K, "state_head_stride": V * K,
            "ring_d_slot_stride": HV * R * V, "ring_d_head_stride": R * V,
            "ring_k_slot_stride": H * R * K, "ring_k_head_stride": R * K,
            "ring_g_slot_stride": HV * R * G, "ring_g_head_stride": R * G,
            "q_row_stride": H * K, "k_row_stride": H * K, "v_row_stride": HV * V, "out_row_stride": HV * V,
            "gate_row_stride": HV * G, "beta_row_stride": HV,
        }[stride_field]

    def stride(self, stride_field: str) -> int:
        return getattr(self, stride_field) or self.contiguous(stride_field)

    def to_c(self) -> _lib.RssmLayerDesc:
        m = _lib.RssmModel(
            layers=1, num_qk_heads=self.num_qk_heads, num_v_heads=self.num_v_heads,
            head_k=self.head_k, head_v=self.head_v,
            gate_kind=_lib.GATE_KINDS[self.gate_kind], gate_mode=_lib.GATE_MODES[self.gate_mode],
            gate_lower_bound=self.gate_lower_bound, replay=int(bool(self.replay)), ring_len=self.ring_len,
            state_dtype=_lib.DTYPES[self.state_dtype], ring_dtype=_lib.DTYPES[self.ring_dtype],
            io_dtype=_lib.DTYPES[self.io_dtype], qk_l2norm=int(bool(self.qk_l2norm)), q_scale=self.q_scale)
        return _lib.RssmLayerDesc(model=m, max_rows=self.max_rows, slots=self.slots,
                                  gate_dtype=_lib.DTYPES[self.gate_dtype], padding=_lib.PADDINGS[self.padding],
                                  **{f: getattr(self, f) for f in _STRIDE_FIELDS})

    def replace(self, **changes) -> "LayerDesc":
        return dataclasses.replace(self, **changes)


def can_implement(desc: LayerDesc, backend_name: str | Backend = "cpu", device: int | None = None) -> None:
    """Raises rssm.Error with the reason when the backend cannot run layers
    of this description (rssm_layer_can_implement); returns None when it can."""
    b = backend(backend_name, device)
    err = _lib.RssmError()
    c = desc.to_c()
    _lib.check("rssm_layer_can_implement", _lib.lib().rssm_layer_can_implement(b._h, ctypes.byref(c), err), err)


# ---------------------------------------------------------------- checks
# Each returns the strides the C description holds for that array, and
# raises ValueError (shape, layout) or TypeError (dtype) naming the array.

def _need_dtype(a: ArrayInfo, dtypes) -> None:
    if a.dtype not in dtypes:
        want = " or ".join(dtypes)
        raise TypeError(f"{a.name} is {a.dtype}, expected {want}")


def _need_aligned(a: ArrayInfo) -> None:
    if a.ptr % a.itemsize:
        raise ValueError(f"{a.name}: its address {a.ptr:#x} is not a multiple of its element size")


def _outer_stride(a: ArrayInfo, dim: int) -> int:
    """The stride of an outer dim, 0 for a dim of size 1 (never stepped
    over, so any value will do). Broadcast (0) and negative strides of a
    longer dim are refused: the C side steps by the description's stride."""
    if a.shape[dim] <= 1:
        return 0
    s = a.strides[dim]
    if s <= 0:
        raise ValueError(f"{a.describe()}: dim {dim} has stride {s}; rssm takes positive strides only "
                         "(no broadcast or reversed arrays)")
    return s


def _row_stride(a: ArrayInfo, rows: int, inner: tuple) -> int:
    """An array [rows, *inner] or [rows, prod(inner)] whose row is contiguous:
    its row stride (0 when it has at most one row: any stride will do)."""
    flat = (rows, prod(inner))
    if a.shape != (rows, *inner) and a.shape != flat:
        shapes = f"{list((rows, *inner))}" + (f" or {list(flat)}" if len(inner) > 1 else "")
        raise ValueError(f"{a.name} has shape {list(a.shape)}, expected {shapes}")
    if not contiguous_tail(a, 1):
        raise ValueError(f"{a.describe()}: each row must be contiguous")
    _need_aligned(a)
    return _outer_stride(a, 0)


def _slot_strides(a: ArrayInfo, slots: int, heads: int, inner: tuple, min_entries: int | None = None) -> tuple:
    """An array [slots, heads, *inner] whose per-head block is contiguous:
    its (slot, head) strides, 0 for a dim of size 1. With min_entries,
    inner[0] is a ring's entry count and may be anything >= min_entries."""
    shape_ok = len(a.shape) == 2 + len(inner) and a.shape[:2] == (slots, heads)
    if shape_ok and min_entries is not None:
        shape_ok = a.shape[2] >= min_entries and a.shape[3:] == inner[1:]
    elif shape_ok:
        shape_ok = a.shape[2:] == inner
    if not shape_ok:
        dims = [slots, heads] + (["R", *inner[1:]] if min_entries is not None else list(inner))
        extra = f" with R >= {min_entries}" if min_entries is not None else ""
        want = "[" + ", ".join(str(n) for n in dims) + "]"
        raise ValueError(f"{a.name} has shape {list(a.shape)}, expected {want}{extra}")
    if not contiguous_tail(a, 2):
        raise ValueError(f"{a.describe()}: each head's block must be contiguous")
    _need_aligned(a)
    return _outer_stride(a, 0), _outer_stride(a, 1)


def _vector(a: ArrayInfo, n: int) -> None:
    if a.shape != (n,) or (n > 1 and a.strides[0] != 1):
        raise ValueError(f"{a.describe()}: expected a contiguous array of {n}")
    _need_aligned(a)


def _gate_param(a: ArrayInfo, shapes: tuple) -> None:
    if a.shape not in shapes or not contiguous_tail(a, 0):
        raise ValueError(f"{a.describe()}: expected a contiguous array of shape "
                         + " or ".join(str(list(s)) for s in shapes))
    _need_aligned(a)


def _as(a: ArrayInfo, dtype: str, what: str) -> ArrayInfo:
    return a if a.dtype == dtype else convert(a, dtype, what)


def _need_writable(a: ArrayInfo | None) -> None:
    """An array rssm writes must not be marked read-only by its producer."""
    if a is not None and a.readonly:
        raise ValueError(f"{a.name} is read-only (its producer marks it so), but rssm writes it")


def _int32(a: ArrayInfo, what: str) -> ArrayInfo:
    if a.dtype == "int32":
        return a
    if a.dtype not in ("int64", "bool", "uint8", "int8", "int16", "uint32"):
        raise TypeError(f"{a.name} is {a.dtype}, expected int32")
    return convert(a, "int32", what)


def _stream(stream: Any, arrays, memory: str | None):
    """The stream a launch goes on: the one given (an int, or a torch / CuPy
    stream object), else, for CUDA arrays, torch's current stream of a torch
    tensor's device, else the "stream" of a __cuda_array_interface__, else
    the legacy default stream (None)."""
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
            if hasattr(stream, attr):
                return int(getattr(stream, attr)) or None
        return int(stream) or None
    if memory != "cuda":
        return None
    for a in arrays:
        if a is not None and a.kind == "torch" and a.device == "cuda":
            import torch
            return torch.cuda.current_stream(a.device_index).cuda_stream or None
    for a in arrays:
        if a is not None and a.stream is not None:
            return int(a.stream)
    return None


def _keep_on_stream(converted, stream) -> None:
    """A tensor converted here lives on torch's current stream of its
    device; when the launch goes on another stream, tell torch's allocator,
    so that the memory is not reused before the launch has read it."""
    import torch
    index = converted[0].device_index
    current = torch.cuda.current_stream(index).cuda_stream or None
    if stream == current:
        return
    s = torch.cuda.default_stream(index) if stream is None else torch.cuda.ExternalStream(stream, device=index)
    for a in converted:
        a.obj.record_stream(s)


def _keep_converted(converted, stream) -> None:
    if stream is not None and converted and converted[0].kind == "torch" and converted[0].device == "cuda":
        _keep_on_stream(converted, stream)


def _check_where(backend_name: str, memory: str | None, arrays, device: int | None = None) -> None:
    """Every array in the memory the backend takes ("cpu", "cuda"; None:
    the package cannot tell) and, for CUDA arrays that say their device,
    on the backend's `device` (None: not known here; librssm checks each
    address itself, rssm.h)."""
    if memory is None:
        return
    for a in arrays:
        if a is None:
            continue
        if a.device != memory:
            raise ValueError(f"{a.name} is in {a.device} memory, but backend {backend_name!r} takes {memory} arrays")
        if device is not None and a.device_index is not None and a.device_index != device:
            raise ValueError(f"{a.name} is on CUDA device {a.device_index}, but backend {backend_name!r} works on "
                             f"device {device}")


def device_for(backend_name: str | Backend, arrays) -> int | None:
    """The device to ask for a call's backend: the arrays' own (one_device)
    for a cuda backend named, None (the default) for others."""
    device = one_device(arrays)
    return device if isinstance(backend_name, str) and backend_name.startswith("cuda") else None


def one_device(arrays) -> int | None:
    """The CUDA device of the arrays of one call (the first that says its
    own; None if none does): the device whose backend runs the call.
    ValueError naming two of them on different devices."""
    first = None
    for a in arrays:
        if a is None or a.device_index is None:
            continue
        if first is None:
            first = a
        elif a.device_index != first.device_index:
            raise ValueError(f"{first.name} is on CUDA device {first.device_index} but {a.name} on device "
                             f"{a.device_index}: the arrays of one call must be on one device")
    return None if first is None else first.device_index


def _check_stride(desc: LayerDesc, a: ArrayInfo, stride_field: str, got: int) -> None:
    # 0 from the checks means "any will do" (a dim of size 1).
    if got and got != desc.stride(stride_field):
        raise ValueError(f"{a.describe()}: its {stride_field.replace('_', ' ')} is {got} elements, but the "
                         f"layer's description has {desc.stride(stride_field)}")


@dataclass
class PreparedRun:
    """The arrays of one launch, checked against a description: what
    Layer.launch hands to rssm_layer_run. `converted` are the copies made
    (gates to fp32, per-row arrays to int32), kept alive by this object."""
    desc: LayerDesc
    rows: int
    arrays: dict
    converted: list


def _check_pool(d: LayerDesc, a: dict) -> None:
    """The state and ring arrays of `a` (ArrayInfos by Layer.run's names)
    against the description: shapes, dtypes and the strides it names."""
    H, HV, K, V = d.num_qk_heads, d.num_v_heads, d.head_k, d.head_v
    _need_dtype(a["state"], (d.state_dtype,))
    s_slot, s_head = _slot_strides(a["state"], d.slots, HV, (V, K))
    _check_stride(d, a["state"], "state_slot_stride", s_slot)
    _check_stride(d, a["state"], "state_head_stride", s_head)
    rings = (("ring_d", HV, (0, V), d.ring_dtype), ("ring_k", H, (0, K), d.ring_dtype),
             ("ring_g", HV, (0, K) if d.gate_kind == "kda" else (0,), "fp32"))
    for n, heads, inner, dtype in rings:
        if a[n] is None:
            if d.replay:
                raise ValueError(f"{n} is needed with replay on")
            continue
        _need_dtype(a[n], (dtype,))
        slot_s, head_s = _slot_strides(a[n], d.slots, heads, inner, min_entries=d.ring_len - 1)
        _check_stride(d, a[n], f"{n}_slot_stride", slot_s)
        _check_stride(d, a[n], f"{n}_head_stride", head_s)


def _per_row(a: dict, names, rows: int) -> list:
    """The per-row int32 arrays of `a` named `names` (the first two needed,
    the others optional), converted to int32 in place in `a` where they
    are not; returns the converted copies."""
    converted = []
    for i, n in enumerate(names):
        if a[n] is None:
            if i < 2:
                raise ValueError(f"{n} is needed")
            continue
        if a[n].dtype != "int32":
            a[n] = _int32(a[n], "rssm's per-row dtype")
            converted.append(a[n])
        _vector(a[n], rows)
    return converted


def prepare_run(desc: LayerDesc, backend_name: str, memory: str | None, window_rows: int | None = None,
                device: int | None = None, **inputs) -> PreparedRun:
    """Reads and checks the arrays of Layer.run (which documents them)
    against `desc`, converting the gates and per-row arrays where needed;
    CUDA arrays must be on `device` (the backend's, when known).
    With window_rows (Layer.verify), the per-row arrays have that many rows
    and the step arrays a whole number of times as many (token-major)."""
    d = desc
    H, HV, K, V = d.num_qk_heads, d.num_v_heads, d.head_k, d.head_v
    names = ("q", "k", "v", "gate", "beta", "out", "state", "ring_d", "ring_k", "ring_g", "slot_index",
             "write_pos", "force", "A_log", "dt_bias", "overflow")
    a = {n: (None if inputs.get(n) is None else array_info(inputs[n], n)) for n in names}
    _check_where(backend_name, memory, a.values(), device)
    for n in ("out", "state", "ring_d", "ring_k", "ring_g", "overflow"):
        _need_writable(a[n])

    rows = a["q"].shape[0] if a["q"].shape else 0
    if rows > d.max_rows:
        raise ValueError(f"{rows} rows, but the layer's description allows at most {d.max_rows} (max_rows)")

    for n, inner, field in (("q", (H, K), "q_row_stride"), ("k", (H, K), "k_row_stride"),
                            ("v", (HV, V), "v_row_stride"), ("out", (HV, V), "out_row_stride")):
        _need_dtype(a[n], (d.io_dtype,))
        _check_stride(d, a[n], field, _row_stride(a[n], rows, inner))

    # gate and beta come in the description's gate dtype, A_log and dt_bias
    # in fp32: anything else is converted (a copy).
    converted = []
    gate_names = ("gate", "beta") + (("A_log", "dt_bias") if d.gate_mode != "precomputed" else ())
    for n in gate_names:
        if a[n] is None:
            raise ValueError(f"gate mode {d.gate_mode!r} needs {n}")
        want = d.gate_dtype if n in ("gate", "beta") else "fp32"
        if a[n].dtype != want:
            a[n] = _as(a[n], want, f"the layer's {'gate' if want != 'fp32' else 'gate weight'} dtype")
            converted.append(a[n])
    _check_stride(d, a["gate"], "gate_row_stride",
                  _row_stride(a["gate"], rows, (HV, K) if d.gate_kind == "kda" else (HV,)))
    _check_stride(d, a["beta"], "beta_row_stride", _row_stride(a["beta"], rows, (HV,)))
    if d.gate_mode != "precomputed":
        _gate_param(a["A_log"], ((HV,),))
        _gate_param(a["dt_bias"], ((HV, K), (HV * K,)) if d.gate_kind == "kda" else ((HV,),))

    _check_pool(d, a)
    per_row = rows
    if window_rows is not None:
        if window_rows == 0 or rows % window_rows:
            raise ValueError(f"{rows} step-array rows are not a whole number of windows of {window_rows} rows")
        per_row = window_rows
    converted += _per_row(a, ("slot_index", "write_pos", "force"), per_row)
    if a["overflow"] is not None:
        _need_dtype(a["overflow"], ("uint32", "int32"))
        _vector(a["overflow"], per_row)
    return PreparedRun(d, rows, a, converted)


# ------------------------------------------------------------------ layer

class Layer:
    """An rssm_layer: one layer's decode step on the caller's arrays.

    Create one per description (every layer of a model may share one), then
    call run() per layer per step and advance() after the step's last layer.
    On CUDA, launches of one Layer must be ordered (one stream, or one
    graph): make one per stream that runs concurrently. `device` (a CUDA
    ordinal) puts it on that GPU (rssm_backend_create_on_device), whose
    arrays alone it then takes; None: the backend's default device."""

    def __init__(self, desc: LayerDesc, backend_name: str | Backend = "cpu", device: int | None = None):
        self.desc = desc
        self.backend = backend(backend_name, device)
        # A layer object keeps per-call host scratch (the cpu backend's row
        # checks), so its calls take turns; ctypes releases the GIL during
        # them, and the cache hands one Layer to every thread.
        self._calls = threading.Lock()
        self._c = _lib.lib()
        self._h = ctypes.c_void_p()
        err = _lib.RssmError()
        c = desc.to_c()
        _lib.check("rssm_layer_create",
                   _lib.lib().rssm_layer_create(self.backend._h, ctypes.byref(c), ctypes.byref(self._h), err), err)

    def close(self) -> None:
        if getattr(self, "_h", None):
            with self._calls:
                _lib.lib().rssm_layer_destroy(ctypes.byref(self._h))

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __repr__(self) -> str:
        return f"rssm.Layer({self.desc}, backend={self.backend.name!r})"

    def run(self, *, q, k, v, gate, beta, out, state, ring_d=None, ring_k=None, ring_g=None,
            slot_index, write_pos, force=None, A_log=None, dt_bias=None, overflow=None, stream=None):
        """One layer of one decode step over rows = q.shape[0] rows.

        q, k [rows, H, K] (or [rows, H*K]), v and out [rows, HV, V] (or
        [rows, HV*V]) in the io dtype; gate [rows, HV] (GDN) or [rows, HV, K]
        (KDA) and beta [rows, HV], converted to the description's gate_dtype
        if they are not in it (A_log and dt_bias likewise to fp32); state
        [slots, HV, V, K]; ring_d [slots, HV, R, V], ring_k [slots, H, R, K],
        ring_g [slots, HV, R] or [slots, HV, R, K] (fp32), R >= ring_len - 1;
        slot_index, write_pos, force [rows] int32 (converted if not; a
        negative slot_index is a padding row, whose out is zeroed);
        A_log [HV] and dt_bias [HV] or [HV, K] (or [HV*K]) in the raw gate modes;
        overflow, an optional [rows] int32/uint32 array the kernel sets for a
        row whose 16-bit ring entry overflowed (rssm.h: run that row again
        with force set before advancing). Strides are the arrays' own and
        must be those the layer was created for. Returns out."""
        run = prepare_run(self.desc, self.backend.name, self.backend.memory, device=self.backend.device_index, q=q,
                          k=k, v=v, gate=gate, beta=beta, out=out, state=state, ring_d=ring_d, ring_k=ring_k,
                          ring_g=ring_g, slot_index=slot_index, write_pos=write_pos, force=force, A_log=A_log,
                          dt_bias=dt_bias, overflow=overflow)
        self.launch(run, stream)
        return out

    def launch(self, run: "PreparedRun", stream=None) -> None:
        """rssm_layer_run on arrays prepare_run checked against this layer's description."""
        assert run.desc == self.desc
        st = _stream(stream, run.arrays.values(), self.backend.memory)
        _keep_converted(run.converted, st)
        t = _lib.RssmLayerTensors(**{n: (info.ptr if info is not None else None) for n, info in run.arrays.items()})
        self.launch_tensors(run.rows, t, st, _lib.tensor_names(run.arrays))

    def launch_tensors(self, rows: int, tensors: _lib.RssmLayerTensors, stream, names: dict | None = None) -> None:
        """rssm_layer_run on a filled rssm_layer_tensors, checked already;
        an error names the tensors by `names` (_lib.check)."""
        err = _lib.RssmError()
        with self._calls:
            status = self._c.rssm_layer_run(self._h, rows, ctypes.byref(tensors), stream, err)
        _lib.check("rssm_layer_run", status, err, names)

    def verify(self, *, drafts, q, k, v, gate, beta, out, state, ring_d, ring_k, ring_g, slot_index, write_pos,
               A_log=None, dt_bias=None, overflow=None, stream=None):
        """rssm_layer_verify: speculative-decode verify of this layer
        (docs/design.md §9). Row r (rows = slot_index.shape[0]) runs
        drafts[r] draft tokens from its slot's state, token t at ring
        position write_pos[r] + t (write_pos[r] + drafts[r] <= ring_len - 1);
        q, k, v, gate, beta and out are token-major, T * rows rows with token
        t of row r at row t * rows + r (T = q.shape[0] // rows, the largest
        drafts[r]); drafts [rows] int32 or uint32, where slot_index is. Each
        token's output is what that many steps would give; the tokens'
        entries are left in the ring as tentative ones and the state is not
        written: accepting k tokens of row r is setting its slot's cursor to
        write_pos[r] + k. overflow [rows], optional, gets each row's first
        token whose 16-bit ring entry overflowed (0xffffffff: none). Other
        arrays as in run(). Returns out."""
        n = array_info(slot_index, "slot_index")
        rows = n.shape[0] if n.shape else 0
        run = prepare_run(self.desc, self.backend.name, self.backend.memory, window_rows=rows,
                          device=self.backend.device_index, q=q, k=k, v=v, gate=gate, beta=beta, out=out, state=state,
                          ring_d=ring_d, ring_k=ring_k, ring_g=ring_g, slot_index=slot_index, write_pos=write_pos,
                          force=None, A_log=A_log, dt_bias=dt_bias, overflow=overflow)
        d = array_info(drafts, "drafts")
        _check_where(self.backend.name, self.backend.memory, [d], self.backend.device_index)
        if d.dtype not in ("int32", "uint32"):
            raise ValueError(f"{d.describe()}: expected int32 or uint32 token counts")
        _vector(d, rows)
        st = _stream(stream, [*run.arrays.values(), d], self.backend.memory)
        _keep_converted(run.converted, st)
        t = _lib.RssmLayerTensors(**{n: (info.ptr if info is not None else None) for n, info in run.arrays.items()})
        err = _lib.RssmError()
        with self._calls:
            status = self._c.rssm_layer_verify(self._h, rows, run.rows // rows, d.ptr, ctypes.byref(t), st, err)
        _lib.check("rssm_layer_verify", status, err, _lib.tensor_names({**run.arrays, "drafts": d}))
        return out

    def _rows(self, raw: dict, names, extra=()) -> tuple:
        """The per-row arrays `names` of `raw` (slot_index and write_pos
        first), read, checked and converted to int32 where they are not, and
        the arrays `extra` (ArrayInfos) beside them: returns (ArrayInfos by
        name, rows, converted copies), having checked where they all live
        and that rows <= max_rows."""
        a = {n: (None if raw[n] is None else array_info(raw[n], n)) for n in names}
        _check_where(self.backend.name, self.backend.memory, [*a.values(), *extra], self.backend.device_index)
        first = a[names[0]]
        rows = first.shape[0] if first is not None and first.shape else 0
        converted = _per_row(a, names, rows)
        if rows > self.desc.max_rows:
            raise ValueError(f"{rows} rows, but this layer was created for at most {self.desc.max_rows}")
        return a, rows, converted

    def advance(self, slot_index, write_pos, cursor, force=None, stream=None, _took=None):
        """rssm_layer_advance: after a step's last layer, for every row that
        is not padding, cursor[slot_index[r]] = 0 if the row flushed (write_pos
        == ring_len - 1 or force[r] set) else write_pos[r] + 1. cursor is int32
        per slot ([>= slots]); slot_index, write_pos, force [rows]. Returns cursor.
        (`_took`, a list: gets the rows and the C call's pointers, for
        rssm.layer.planned_advance.)"""
        c = array_info(cursor, "cursor")
        a, rows, converted = self._rows(dict(slot_index=slot_index, write_pos=write_pos, force=force),
                                        ("slot_index", "write_pos", "force"), (c,))
        _need_dtype(c, ("int32",))
        _need_writable(c)
        if len(c.shape) != 1 or c.shape[0] < self.desc.slots or (c.shape[0] > 1 and c.strides[0] != 1):
            raise ValueError(f"{c.describe()}: expected a contiguous int32 array of at least {self.desc.slots} "
                             "(one cursor per slot)")
        st = _stream(stream, [*a.values(), c], self.backend.memory)
        _keep_converted(converted, st)
        err = _lib.RssmError()
        f = a["force"].ptr if a["force"] is not None else None
        with self._calls:
            status = self._c.rssm_layer_advance(self._h, rows, a["slot_index"].ptr, a["write_pos"].ptr, f, c.ptr,
                                                st, err)
        _lib.check("rssm_layer_advance", status, err)
        if _took is not None:
            _took += [rows, (a["slot_index"].ptr, a["write_pos"].ptr, f, c.ptr)]
        return cursor

    def materialise(self, *, state, ring_d, ring_k, ring_g, slot_index, write_pos, stream=None, _took=None):
        """rssm_layer_materialise: for every row that is not padding, folds
        the first write_pos[r] ring entries of slot slot_index[r] into its
        checkpoint, so that state[slot] alone is the slot's true state. The
        rings are read, not cleared: set those slots' cursors to 0 after
        (rssm.advance with force set does, or the engine itself). Arrays as
        in run(); returns state. (`_took`, a list: gets the rows and the C
        call's rssm_layer_tensors, for rssm.replayssm.planned_materialise.)"""
        pool = {n: array_info(x, n) for n, x in
                (("state", state), ("ring_d", ring_d), ("ring_k", ring_k), ("ring_g", ring_g))}
        a, rows, converted = self._rows(dict(slot_index=slot_index, write_pos=write_pos),
                                        ("slot_index", "write_pos"), pool.values())
        _need_writable(pool["state"])
        _check_pool(self.desc, pool)
        st = _stream(stream, [*pool.values(), *a.values()], self.backend.memory)
        _keep_converted(converted, st)
        t = _lib.RssmLayerTensors(**{n: info.ptr for n, info in (*pool.items(), *a.items())})
        err = _lib.RssmError()
        with self._calls:
            status = self._c.rssm_layer_materialise(self._h, rows, ctypes.byref(t), st, err)
        _lib.check("rssm_layer_materialise", status, err, _lib.tensor_names({**pool, **a}))
        if _took is not None:
            _took += [rows, tuple(getattr(t, n) for n, _ in t._fields_)]
        return state


def _capturing(device: int | None) -> bool:
    """Whether torch captures a CUDA graph on its current stream of `device`
    (None: of its current device)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return False
    if device is None:
        return torch.cuda.is_current_stream_capturing()
    with torch.cuda.device(device):
        return torch.cuda.is_current_stream_capturing()


def layer_for(desc: LayerDesc, backend_name: str | Backend, device: int | None = None,
              stream: int | None = None) -> Layer:
    """The cached Layer for this description on this backend and device (a
    CUDA ordinal: the call's arrays', one_device; None: the default), and
    stream.

    The Python path asks for one per description (stream None), not per
    stream: rssm.h asks that one layer's launches be ordered, which an
    engine's one decode stream and the CUDA graphs it captures and replays
    there are. (Keyed by stream, a capture, which torch runs on a side
    stream, would need a new layer object, and creating one allocates,
    which a capture forbids.) Code that runs layers on concurrent streams
    makes its own Layer per stream.

    The compiled torch extension asks for one per stream (an int: the
    stream's handle, 0 for the legacy default stream and on the cpu
    backend), as rssm.h asks of concurrent streams. A capture on a stream
    that has none then takes the layer another stream of the extension
    made for this description (the warm-up's), whose launches the graph's
    replays must be ordered with, as torch.cuda.graph's are on the stream
    that replays it."""
    b = backend(backend_name, device)
    key = (b.requested, b.requested_device, desc, stream)
    with _lock:
        layer = _layers.get(key)
    if layer is None:
        if b.memory == "cuda" and _capturing(b.device_index):
            if stream is not None:
                with _lock:
                    layer = next((l for k, l in _layers.items() if k[:3] == key[:3] and k[3] is not None), None)
                if layer is not None:
                    return layer
            raise RuntimeError(
                "rssm: this call would create its layer object (device memory) during CUDA graph capture; run "
                f"the step once before capturing, with the same shapes and batch size class ({desc.max_rows} rows)")
        layer = Layer(desc, b)
        with _lock:
            layer = _layers.setdefault(key, layer)
    return layer


_POOL_FIELDS = ("num_qk_heads", "num_v_heads", "head_k", "head_v", "slots", "ring_len", "gate_kind", "replay",
                "state_dtype", "ring_dtype", "padding")


def pool_layer(desc: LayerDesc, backend_name: str | Backend, rows: int, device: int | None = None) -> Layer:
    """For what reads only the state pool and the rings (the fold of
    Layer.materialise): a cached layer on the backend and device with room
    for `rows` rows whose pool is described as in `desc` (the one the step's
    layers ran on, so that nothing is created during a capture), else the
    layer for `desc`."""
    b = backend(backend_name, device)
    with _lock:
        layers = list(_layers.values())
    for l in layers:
        if (l.backend is b and l.desc.max_rows >= rows
                and all(getattr(l.desc, f) == getattr(desc, f) for f in _POOL_FIELDS)
                and all(l.desc.stride(f) == desc.stride(f) for f in _STRIDE_FIELDS[:8])):
            return l
    return layer_for(desc, backend_name, device)


def cached_layers() -> list[Layer]:
    with _lock:
        return list(_layers.values())


def advance(cursor, slot_index, write_pos, force=None, *, ring_len: int, backend_name: str | Backend | None = None,
            stream=None, padding: str = "out_of_range", _took=None):
    """Advances the per-slot cursors after a step's last layer (Layer.advance)
    with a cached layer of this ring length over len(cursor) slots on this
    backend: the cursor rule reads nothing else of a layer, so any layer
    that ran a step of these slots will do, if it has the caller's padding
    convention (which rows the rule skips). The backend defaults to "cuda"
    for a CUDA cursor and "cpu" otherwise; a cuda backend is the one on the
    arrays' device. Returns cursor."""
    c = array_info(cursor, "cursor")
    s = array_info(slot_index, "slot_index")
    name = backend_name if backend_name is not None else ("cuda" if c.device == "cuda" else "cpu")
    b = backend(name, device_for(name, (c, s)))
    slots = c.shape[0] if len(c.shape) == 1 else -1
    rows = s.shape[0] if len(s.shape) == 1 else 0
    with _lock:
        layers = list(_layers.values())
    fits = [l for l in layers
            if l.backend is b and l.desc.ring_len == ring_len and l.desc.slots == slots and l.desc.max_rows >= rows
            and l.desc.padding == padding]
    if not fits:
        raise ValueError(f"advance: no layer with ring_len {ring_len} over {slots} slots, padding {padding!r} and "
                         f"room for {rows} rows "
                         f"has run on backend {b.name!r}; run the step's layers first, or call Layer.advance "
                         "on a Layer of your own")
    layer = min(fits, key=lambda l: l.desc.max_rows)
    layer.advance(slot_index, write_pos, cursor, force=force, stream=stream, _took=_took)
    if _took is not None:
        _took.insert(0, layer)
    return cursor


def planned_advance(cursor, slot_index, write_pos, force, ring_len, backend_name, padding) -> list:
    """The compiled torch extension's first call of an advance's
    description on a stream (rssm.torch_ext, through the op
    rssm::_replayssm_advance_plan): advance() on the Python path, and the
    plan the extension keeps, as ints: the layer's handle, the rows and
    (argument, offset, itemsize) per pointer of rssm_layer_advance
    (slot_index, write_pos, force, cursor; argument -1: NULL). Empty where
    an argument was converted: such calls take this path each time."""
    took = []
    advance(cursor, slot_index, write_pos, force, ring_len=ring_len, backend_name=backend_name or None,
            padding=padding, _took=took)
    return _prepared.direct_plan((cursor, slot_index, write_pos, force), (1, 2, 3, 0), took)
