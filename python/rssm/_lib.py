"""ctypes view of librssm.so: the library itself, the structs and enums of
include/rssm.h that the Python package uses, and the one error type.

The structs here must match include/rssm.h field for field; the test suite
compiles a small C program against the header and compares every offset
(tests/python/test_bindings.py), so a change of the header that is not made
here too fails there rather than corrupting memory.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from ctypes import (POINTER, Structure, c_char, c_char_p, c_float, c_int, c_int64, c_size_t,
                    c_uint32, c_void_p)
from pathlib import Path

# ----------------------------------------------------------------- enums
# Plain ints mirroring the C enums (their values are the ABI). The string
# names are what the Python API takes and shows.

RSSM_OK = 0
STATUS_NAMES = {  # only for messages when the library cannot be asked
    0: "ok", 1: "invalid argument", 2: "unsupported", 3: "unavailable", 4: "out of memory",
    5: "pool full", 6: "bad slot", 7: "format", 8: "io", 9: "device",
}
RSSM_ERR_INVALID_ARGUMENT = 1
RSSM_ERR_UNSUPPORTED = 2
RSSM_ERR_UNAVAILABLE = 3

GATE_KINDS = {"gdn": 0, "kda": 1}
GATE_MODES = {"precomputed": 0, "raw": 1, "raw_safe": 2}
PADDINGS = {"out_of_range": 0, "nonpositive": 1}  # rssm_padding
DTYPES = {"fp32": 0, "fp16": 1, "bf16": 2}

RSSM_MAX_RING_LEN = 64
RSSM_ERROR_MESSAGE_MAX = 256


# --------------------------------------------------------------- structs

class RssmModel(Structure):
    _fields_ = [
        ("layers", c_uint32),
        ("num_qk_heads", c_uint32),
        ("num_v_heads", c_uint32),
        ("head_k", c_uint32),
        ("head_v", c_uint32),
        ("gate_kind", c_int),        # rssm_gate_kind
        ("gate_mode", c_int),        # rssm_gate_mode
        ("gate_lower_bound", c_float),
        ("replay", c_int),
        ("ring_len", c_uint32),
        ("state_dtype", c_int),      # rssm_dtype
        ("ring_dtype", c_int),
        ("io_dtype", c_int),
        ("qk_l2norm", c_int),
        ("q_scale", c_float),
    ]


class RssmError(Structure):
    _fields_ = [("status", c_int), ("message", c_char * RSSM_ERROR_MESSAGE_MAX)]


class RssmLayerDesc(Structure):
    _fields_ = [
        ("model", RssmModel),
        ("max_rows", c_uint32),
        ("slots", c_uint32),
        ("state_slot_stride", c_int64), ("state_head_stride", c_int64),
        ("ring_d_slot_stride", c_int64), ("ring_d_head_stride", c_int64),
        ("ring_k_slot_stride", c_int64), ("ring_k_head_stride", c_int64),
        ("ring_g_slot_stride", c_int64), ("ring_g_head_stride", c_int64),
        ("q_row_stride", c_int64), ("k_row_stride", c_int64),
        ("v_row_stride", c_int64), ("out_row_stride", c_int64),
        ("gate_row_stride", c_int64), ("beta_row_stride", c_int64),
        ("gate_dtype", c_int),       # rssm_dtype of gate and beta: F32 or BF16
        ("padding", c_int),          # rssm_padding
    ]


class RssmLayerTensors(Structure):
    # Every pointer as c_void_p: the package hands over addresses it read
    # from array interfaces, never Python-owned buffers.
    _fields_ = [
        ("state", c_void_p),
        ("ring_d", c_void_p), ("ring_k", c_void_p), ("ring_g", c_void_p),
        ("q", c_void_p), ("k", c_void_p), ("v", c_void_p),
        ("gate", c_void_p), ("beta", c_void_p),
        ("A_log", c_void_p), ("dt_bias", c_void_p),
        ("out", c_void_p),
        ("slot_index", c_void_p),
        ("write_pos", c_void_p),
        ("force", c_void_p),
        ("overflow", c_void_p),
    ]


# ----------------------------------------------------------------- errors

class Error(RuntimeError):
    """A call into librssm failed.

    `status` is the rssm_status value, `status_name` rssm's own name for it
    ("invalid argument", ...), `message` the library's message (what was
    wrong), `function` the C function that said so."""

    def __init__(self, function: str, status: int, status_name: str, message: str):
        self.function = function
        self.status = status
        self.status_name = status_name
        self.message = message
        super().__init__(f"{function}: {status_name}: {message}")


# ---------------------------------------------------------------- library

_lib = None
_lib_path = None
_lib_lock = threading.Lock()

# name: (restype, argtypes). Only what the package calls.
_PROTOTYPES = {
    "rssm_version_string": (c_char_p, []),
    "rssm_status_str": (c_char_p, [c_int]),
    "rssm_dtype_name": (c_char_p, [c_int]),
    "rssm_model_validate": (c_int, [POINTER(RssmModel), POINTER(RssmError)]),
    "rssm_model_q_scale": (c_float, [POINTER(RssmModel)]),
    "rssm_backend_name_count": (c_size_t, []),
    "rssm_backend_name_at": (c_char_p, [c_size_t]),
    "rssm_backend_create": (c_int, [c_char_p, POINTER(c_void_p), POINTER(RssmError)]),
    "rssm_backend_create_on_device": (c_int, [c_char_p, c_int, POINTER(c_void_p), POINTER(RssmError)]),
    "rssm_backend_device_ordinal": (c_int, [c_void_p]),
    "rssm_backend_destroy": (None, [POINTER(c_void_p)]),
    "rssm_backend_name": (c_char_p, [c_void_p]),
    "rssm_backend_device": (c_char_p, [c_void_p]),
    "rssm_backend_kernels": (c_char_p, [c_void_p]),
    "rssm_backend_limit_sms": (c_int, [c_void_p, c_uint32, POINTER(RssmError)]),
    "rssm_layer_can_implement": (c_int, [c_void_p, POINTER(RssmLayerDesc), POINTER(RssmError)]),
    "rssm_layer_create": (c_int, [c_void_p, POINTER(RssmLayerDesc), POINTER(c_void_p), POINTER(RssmError)]),
    "rssm_layer_destroy": (None, [POINTER(c_void_p)]),
    "rssm_layer_run": (c_int, [c_void_p, c_uint32, POINTER(RssmLayerTensors), c_void_p, POINTER(RssmError)]),
    "rssm_layer_materialise": (c_int, [c_void_p, c_uint32, POINTER(RssmLayerTensors), c_void_p,
                                       POINTER(RssmError)]),
    "rssm_layer_advance": (c_int, [c_void_p, c_uint32, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                   POINTER(RssmError)]),
    "rssm_layer_verify": (c_int, [c_void_p, c_uint32, c_uint32, c_void_p, POINTER(RssmLayerTensors), c_void_p,
                                  POINTER(RssmError)]),
}


def library_path() -> Path:
    """The librssm.so this package loads: $RSSM_LIBRARY when set (a CUDA
    build on a GPU machine, say), else the one installed beside this file."""
    env = os.environ.get("RSSM_LIBRARY")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent / "librssm.so"


class _Missing:
    """Stands in for a function the loaded library does not export (a
    library built from older sources than this package), so that the rest
    of the package still works and the call that needs it says why."""

    def __init__(self, name: str, path: Path):
        self.name, self.path = name, path

    def __call__(self, *args):
        raise Error(self.name, RSSM_ERR_UNAVAILABLE, STATUS_NAMES[RSSM_ERR_UNAVAILABLE],
                    f"{self.path} does not export {self.name} (built from older sources than this package?)")


def lib():
    """The loaded library (loaded on first use), with every prototype set."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            path = library_path()
            if not path.exists():
                raise ImportError(
                    f"rssm: {path} does not exist; install the package with `pip install .` from the "
                    "repository root, or set RSSM_LIBRARY to a built librssm.so")
            handle = ctypes.CDLL(str(path))

            class _Lib:
                pass

            ns = _Lib()
            for name, (restype, argtypes) in _PROTOTYPES.items():
                try:
                    fn = getattr(handle, name)
                except AttributeError:
                    setattr(ns, name, _Missing(name, path))
                    continue
                fn.restype = restype
                fn.argtypes = argtypes
                setattr(ns, name, fn)
            ns.handle = handle
            _lib_path = path
            _lib = ns
    return _lib


def loaded_path() -> Path | None:
    return _lib_path


def status_name(status: int) -> str:
    s = lib().rssm_status_str(status)
    return s.decode() if s else STATUS_NAMES.get(status, f"status {status}")


def check(function: str, status: int, err: RssmError, names: dict | None = None) -> None:
    """Raises Error for a failed call, with rssm's status name and message.
    `names`: the caller's name for each tensor rssm's message may name by
    its field of rssm_layer_tensors ({"state": "initial_state", ...}), so
    that the message names the argument that was passed."""
    if status != RSSM_OK:
        msg = err.message.decode(errors="replace") or "(no message)"
        if names:
            msg = re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", lambda m: names[m.group(1)], msg)
        raise Error(function, status, status_name(status), msg)


def tensor_names(arrays: dict) -> dict | None:
    """For check(): the name of each array of `arrays` (ArrayInfos, or
    None, by their rssm_layer_tensors field) where it is not the field's."""
    return {field: a.name for field, a in arrays.items() if a is not None and a.name != field} or None


def version_string() -> str:
    return lib().rssm_version_string().decode()


def backend_names() -> list[str]:
    """The backend names built into the loaded library, in order of preference."""
    L = lib()
    return [L.rssm_backend_name_at(i).decode() for i in range(L.rssm_backend_name_count())]


