"""Devices: a CUDA call runs on its arrays' device (rssm.h,
rssm_backend_create_on_device), with one backend and one layer object per
(device, description); arrays of one call on two devices are refused,
naming them. Made-up CUDA arrays (__cuda_array_interface__ and a
torch-like .device.index) and a stand-in for the C backend and layer
objects run all of it without a GPU; bench/check_devices.py runs it
on one."""

import ctypes
import threading

import numpy as np
import pytest

import rssm
from rssm import _arrays
from rssm import layer as rssm_layer

H, HV, K, V, SLOTS, L, B = 2, 4, 16, 8, 6, 4, 3


class Device:
    """torch.device's two fields."""

    def __init__(self, index):
        self.type, self.index = "cuda", index


class CudaArray:
    """A made-up CUDA array: an address (never read: the C calls are stood
    in for), a shape and a dtype through __cuda_array_interface__, and the
    device it says it is on, as a torch tensor says it (.device.index)."""

    _next = 0x7F0000000000

    def __init__(self, shape, device, typestr="<f4"):
        nbytes = int(np.prod(shape)) * int(typestr[2:])
        self.address = CudaArray._next
        CudaArray._next += (nbytes + 4095) // 4096 * 4096 + 4096
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (self.address, False),
                                         "strides": None, "version": 3}
        self.device = Device(device)


def decode_arrays(device, **on):
    """The arrays of one decode call, every one on `device` but those named
    in `on` (name=device)."""
    where = lambda n: on.get(n, device)  # noqa: E731
    f, i = "<f4", "<i4"
    shapes = dict(mixed_qkv=((B, 2 * H * K + HV * V), f), a=((B, HV), f), b=((B, HV), f), A_log=((HV,), f),
                  dt_bias=((HV,), f), initial_state=((SLOTS, HV, V, K), f), d_cache=((SLOTS, HV, L, V), f),
                  k_cache=((SLOTS, H, L, K), f), g_cache=((SLOTS, HV, L), f), out=((B, HV, V), f),
                  ssm_state_indices=((B,), i), write_pos=((B,), i))
    return {n: CudaArray(s, where(n), t) for n, (s, t) in shapes.items()}


def decode(arrays, **kw):
    a = arrays
    rssm.fused_recurrent_gated_delta_rule_replayssm(
        a["mixed_qkv"], a["a"], a["b"], a["A_log"], a["dt_bias"], None, a["initial_state"], a["d_cache"],
        a["k_cache"], a["g_cache"], a["out"], a["ssm_state_indices"], a["write_pos"], **kw)


class FakeBackend(rssm_layer.Backend):
    """A cuda backend that starts nothing: it records the device it was asked
    for and says it works there (device None: the default, device 0)."""

    def __init__(self, name, device=None):
        self.requested, self.requested_device = name, device
        self.name, self.kernels = name, name
        self.device_index = 0 if device is None else device
        self.device = f"made-up GPU {self.device_index}"
        self._h = ctypes.c_void_p()


class FakeC:
    """The C functions a layer object calls, recording their calls."""

    def __init__(self, layer, log):
        self.layer, self.log = layer, log

    def rssm_layer_run(self, h, rows, tensors, stream, err):
        self.log.append(("run", self.layer, tensors._obj.q, tensors._obj.state))
        return 0

    def rssm_layer_advance(self, h, rows, slot_index, write_pos, force, cursor, stream, err):
        self.log.append(("advance", self.layer, cursor))
        return 0


@pytest.fixture
def fake_c(monkeypatch):
    """rssm.layer's Backend and Layer stood in for: no C object is made,
    and each launch is logged with the layer object it went to."""
    log = []

    class FakeLayer(rssm_layer.Layer):
        def __init__(self, desc, backend_name="cpu", device=None):
            self.desc = desc
            self.backend = (rssm_layer.backend(backend_name) if device is None
                            else rssm_layer.backend(backend_name, device))
            self._calls = threading.Lock()
            self._h = ctypes.c_void_p(0x1000)
            self._c = FakeC(self, log)

        def close(self):
            pass

    monkeypatch.setattr(rssm_layer, "Backend", FakeBackend)
    monkeypatch.setattr(rssm_layer, "Layer", FakeLayer)
    return log


def test_arrays_on_two_devices_are_refused(fake_c):
    for name in ("d_cache", "out", "write_pos"):
        arrays = decode_arrays(0, **{name: 1})
        with pytest.raises(ValueError, match=rf"mixed_qkv is on CUDA device 0 but {name} on device 1: the arrays "
                                             "of one call must be on one device"):
            decode(arrays)
    arrays = decode_arrays(1, mixed_qkv=0)
    with pytest.raises(ValueError, match="mixed_qkv is on CUDA device 0 but a on device 1"):
        decode(arrays, backend="cuda:bulk")
    # refused before anything was made or launched
    assert rssm_layer.cached_layers() == [] and fake_c == []
    assert rssm_layer._backends == {}


def test_each_device_gets_its_own_layer(fake_c):
    on0, on1 = decode_arrays(0), decode_arrays(1)
    decode(on0)
    decode(on1)
    decode(decode_arrays(0))         # new arrays on device 0: its layer again
    decode(on1)                      # the same arrays again (a prepared call)
    layers = rssm_layer.cached_layers()
    assert len(layers) == 2
    by_device = {l.backend.device_index: l for l in layers}
    assert sorted(by_device) == [0, 1]
    assert by_device[0].desc == by_device[1].desc          # one description, two devices
    assert {(b.requested, b.requested_device) for b in rssm_layer._backends.values()} == {("cuda", 0), ("cuda", 1)}
    went = [(kind, layer.backend.device_index, q) for kind, layer, q, _ in fake_c]
    assert went[0] == ("run", 0, on0["mixed_qkv"].address)
    assert went[1] == ("run", 1, on1["mixed_qkv"].address)
    assert went[2][:2] == ("run", 0)
    assert went[3] == ("run", 1, on1["mixed_qkv"].address)
    # the cursors of device 1's slots advance on device 1's layer
    cursor = CudaArray((SLOTS,), 1, "<i4")
    rssm.advance(cursor, on1["ssm_state_indices"], on1["write_pos"], ring_len=L)
    assert fake_c[-1] == ("advance", by_device[1], cursor.address)
    with pytest.raises(ValueError, match="cursor is on CUDA device 1 but slot_index on device 0"):
        rssm.advance(cursor, on0["ssm_state_indices"], on0["write_pos"], ring_len=L)


def test_a_layer_refuses_arrays_of_another_device(fake_c):
    desc = rssm.LayerDesc(num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=SLOTS, max_rows=B, ring_len=L,
                          gate_mode="precomputed", ring_dtype="fp32")
    layer = rssm_layer.Layer(desc, "cuda", device=1)
    assert layer.backend.device_index == 1
    R = L - 1

    def arrays(device, **on):
        shapes = dict(q=(B, H, K), k=(B, H, K), v=(B, HV, V), gate=(B, HV), beta=(B, HV), out=(B, HV, V),
                      state=(SLOTS, HV, V, K), ring_d=(SLOTS, HV, R, V), ring_k=(SLOTS, H, R, K), ring_g=(SLOTS, HV, R))
        a = {n: CudaArray(s, on.get(n, device)) for n, s in shapes.items()}
        a.update(slot_index=CudaArray((B,), on.get("slot_index", device), "<i4"),
                 write_pos=CudaArray((B,), on.get("write_pos", device), "<i4"))
        return a

    layer.run(**arrays(1))
    with pytest.raises(ValueError, match="ring_k is on CUDA device 0, but backend 'cuda' works on device 1"):
        layer.run(**arrays(1, ring_k=0))
    with pytest.raises(ValueError, match="slot_index is on CUDA device 2, but backend 'cuda' works on device 1"):
        layer.advance(CudaArray((B,), 2, "<i4"), CudaArray((B,), 1, "<i4"), CudaArray((SLOTS,), 1, "<i4"))
    assert [kind for kind, *_ in fake_c] == ["run"]


def test_where_an_array_says_it_is():
    """__cuda_array_interface__ does not say which device; a torch-like
    .device.index or CuPy's .device.id does, and is read."""
    x = CudaArray((4,), 3)
    assert _arrays.array_info(x, "x").device_index == 3

    class CupyDevice:
        id = 2

    x.device = CupyDevice()
    assert _arrays.array_info(x, "x").device_index == 2
    del x.device
    assert _arrays.array_info(x, "x").device_index is None
    assert _arrays.array_info(np.zeros(4, np.float32), "x").device_index is None


def test_backend_on_a_device():
    """The real library: the cpu backend runs on the host, device 0 or the
    default; another ordinal is refused by rssm; one backend per (name,
    device)."""
    b = rssm.backend("cpu", 0)
    assert b.name == "cpu" and b.device_index is None and b.requested_device == 0
    assert rssm.backend("cpu", 0) is b and rssm.backend("cpu") is not b
    with pytest.raises(rssm.Error, match="cpu: device 1") as e:
        rssm.backend("cpu", 1)
    assert e.value.status_name == "invalid argument"
    for bad in (-1, 1.0, True, "0"):
        with pytest.raises(ValueError, match="device = "):
            rssm.backend("cpu", bad)
    if "cuda" in rssm.backend_names():
        try:
            cuda = rssm.backend("cuda", 0)
        except rssm.Error as err:   # no GPU here
            assert err.status_name == "unavailable"
        else:
            assert cuda.device_index == 0
