"""Reading arrays through their interfaces (no C involved): pointers, shapes,
byte strides to element strides, dtypes, devices, the CUDA stream key, and
DLPack capsules (classic and versioned, read without being consumed)."""

import sys

import numpy as np
import pytest

from rssm._arrays import ArrayInfo, array_info, contiguous_tail
from rssm.layer import _stream


class FakeCuda:
    """An object with only __cuda_array_interface__, as CuPy or Numba give."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x7F0000001000, stream=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream


def test_numpy_pointer_shape_strides():
    x = np.zeros((4, 6, 8), np.float32)
    a = array_info(x, "x")
    assert a.ptr == x.ctypes.data and a.shape == (4, 6, 8) and a.strides == (48, 8, 1)
    assert a.dtype == "fp32" and a.device == "cpu" and a.kind == "array_interface"
    s = array_info(x[1:, ::2, :], "s")  # a view: offset pointer, byte strides turned into elements
    assert s.ptr == x.ctypes.data + 48 * 4 and s.strides == (48, 16, 1)
    assert contiguous_tail(s, 2) and not contiguous_tail(s, 1)


@pytest.mark.parametrize("dtype, name", [(np.float16, "fp16"), (np.int32, "int32"), (np.int64, "int64"),
                                         (np.bool_, "bool"), (np.uint32, "uint32"), (np.float64, "fp64")])
def test_numpy_dtypes(dtype, name):
    assert array_info(np.zeros(3, dtype), "x").dtype == name


def test_unknown_and_big_endian_dtypes():
    with pytest.raises(TypeError, match="element type '<c8'"):
        array_info(np.zeros(2, np.complex64), "x")
    with pytest.raises(TypeError, match="big-endian"):
        array_info(np.zeros(2, ">f4"), "x")


def test_cuda_array_interface():
    a = array_info(FakeCuda((3, 5), strides=None), "q")
    assert a.device == "cuda" and a.strides == (5, 1) and a.stream is None and a.ptr == 0x7F0000001000
    b = array_info(FakeCuda((3, 5), "<f2", strides=(20, 2), stream=0x1234), "q")
    assert b.dtype == "fp16" and b.strides == (10, 1) and b.stream == 0x1234
    with pytest.raises(ValueError, match="a stride of 3 bytes is not a whole number of 2-byte elements"):
        array_info(FakeCuda((3, 5), "<f2", strides=(3, 2)), "q")


def test_stream_choice():
    x = array_info(FakeCuda((2,), stream=0xABC), "x")
    y = array_info(FakeCuda((2,)), "y")
    assert _stream(None, [y, x], "cuda") == 0xABC      # the interface's stream
    assert _stream(None, [y], "cuda") is None          # else the legacy default stream
    assert _stream(0x55, [x], "cuda") == 0x55          # an explicit one wins

    class TorchLikeStream:
        cuda_stream = 0x77

    assert _stream(TorchLikeStream(), [x], "cuda") == 0x77
    assert _stream(None, [x], "cpu") is None           # host backends take no stream


def test_bf16_from_ml_dtypes_style_arrays():
    class Bf16:  # how an ml_dtypes bfloat16 array looks through __array_interface__
        class dtype:
            name = "bfloat16"
        __array_interface__ = {"shape": (2, 4), "typestr": "<V2", "data": (4096, False), "strides": None,
                               "version": 3}

    a = array_info(Bf16(), "state")
    assert a.dtype == "bf16" and a.itemsize == 2 and a.strides == (4, 1)


def test_columns_view():
    x = np.zeros((3, 10), np.float32)
    a = array_info(x, "mixed_qkv").columns("k", 4, 2)
    assert a.ptr == x.ctypes.data + 16 and a.shape == (3, 2) and a.strides == (10, 1)


def test_not_an_array():
    with pytest.raises(TypeError, match=r"x: expected an array .* got list"):
        array_info([1.0, 2.0], "x")
    assert isinstance(array_info(array_info(np.zeros(1), "y"), "z"), ArrayInfo)


class DLPackOnly:
    """An array with nothing but the DLPack protocol, over a NumPy array:
    classic (its __dlpack__ knows no max_version, so the capsule is the
    unversioned "dltensor") or versioned (it passes max_version on)."""

    def __init__(self, a, versioned=False):
        self.a, self.versioned = a, versioned

    def __dlpack__(self, stream=None, **kw):
        if kw and not self.versioned:
            raise TypeError(f"__dlpack__() got unexpected keyword arguments {sorted(kw)}")
        return self.a.__dlpack__(stream=stream, **kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_only_array(versioned):
    x = np.arange(4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8)
    view = x[1:, ::2, :]                      # an offset and a stride the capsule carries
    before = sys.getrefcount(x)
    a = array_info(DLPackOnly(view, versioned), "d")
    assert a.kind == "dlpack" and a.device == "cpu" and a.dtype == "fp32"
    assert a.ptr == view.ctypes.data and a.shape == (3, 3, 8) and a.strides == (48, 16, 1)
    capsule = a.obj[1]
    assert f'"dltensor{"_versioned" if versioned else ""}"' in repr(capsule), "read, not consumed (renamed)"
    del a, capsule
    assert sys.getrefcount(x) == before, "the capsule's own destructor released the export"


@pytest.mark.parametrize("dtype, name", [(np.float16, "fp16"), (np.int32, "int32"), (np.int64, "int64"),
                                         (np.bool_, "bool"), (np.uint8, "uint8")])
def test_dlpack_dtypes(dtype, name):
    a = array_info(DLPackOnly(np.zeros((2, 3), dtype)), "d")
    assert a.dtype == name and a.strides == (3, 1)


def test_dlpack_refusals():
    class OnVulkan(DLPackOnly):
        def __dlpack_device__(self):
            return (7, 0)

    with pytest.raises(TypeError, match="d: a DLPack array on device type 7"):
        array_info(OnVulkan(np.zeros(2, np.float32)), "d")

    class Used(DLPackOnly):
        def __dlpack__(self, stream=None):
            capsule = self.a.__dlpack__()
            np.from_dlpack(type("Once", (), {"__dlpack__": lambda s, **kw: capsule,
                                             "__dlpack_device__": lambda s: (1, 0)})())
            return capsule  # consumed by from_dlpack above: renamed "used_dltensor"

    with pytest.raises(TypeError, match="capsule named b'used_dltensor'"):
        array_info(Used(np.zeros(2, np.float32)), "d")
    with pytest.raises(TypeError, match="DLPack element type"):
        array_info(DLPackOnly(np.zeros(2, np.complex64)), "d")
