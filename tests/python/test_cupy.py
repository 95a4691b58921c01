"""CuPy arrays, read through __cuda_array_interface__ (its "stream" key
included), on the cuda backend. Skipped without CuPy, a GPU and a CUDA
build of librssm.so (RSSM_LIBRARY)."""

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

import rssm  # noqa: E402
from test_decode import Engine  # noqa: E402

try:
    HAVE_CUDA = cp.cuda.runtime.getDeviceCount() > 0 and "cuda" in rssm.backend_names()
except cp.cuda.runtime.CUDARuntimeError:
    HAVE_CUDA = False
pytestmark = pytest.mark.skipif(not HAVE_CUDA, reason="needs a GPU and librssm.so built with CUDA")


@pytest.mark.parametrize("gate_kind", ["gdn", "kda"])
def test_cupy_decode_loop_on_a_stream(gate_kind):
    rng = np.random.default_rng(30)
    e = Engine(rng, gate_kind=gate_kind, H=2, HV=4, K=32, V=16, slots=6, L=4)
    for r in e.d_cache, e.k_cache, e.g_cache:
        r[...] = 0.0
    g = {n: cp.asarray(getattr(e, n)) for n in ("A_log", "dt_bias", "state", "d_cache", "k_cache", "g_cache")}
    cursor = cp.zeros(e.slots, cp.int32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:  # CuPy's arrays then name this stream in their interface
        for it in range(3 * e.L):
            B = 3
            idx = rng.choice(e.slots, B, replace=False).astype(np.int32)
            mixed_qkv, a, b = e.inputs(B)
            expect = e.reference(mixed_qkv, a, b, idx)
            idx_d = cp.asarray(idx)
            write_pos = cursor[idx_d]
            force = cp.asarray((rng.random(B) < 0.25).astype(np.int32))
            out = cp.empty((B, e.HV, e.V), cp.float32)
            rssm.fused_recurrent_gated_delta_rule_replayssm(
                cp.asarray(mixed_qkv), cp.asarray(a), cp.asarray(b), g["A_log"], g["dt_bias"], None, g["state"],
                g["d_cache"], g["k_cache"], g["g_cache"], out, idx_d, write_pos, force, gate_kind=gate_kind)
            rssm.advance(cursor, idx_d, write_pos, force, ring_len=e.L)
            e.check_out(cp.asnumpy(out), expect)
    stream.synchronize()


def test_cupy_arrays_are_not_converted():
    """No conversion for __cuda_array_interface__ arrays: a bool force_flush is refused by name."""
    e = Engine(np.random.default_rng(31))
    mixed_qkv, a, b = (cp.asarray(x) for x in e.inputs(2))
    g = {n: cp.asarray(getattr(e, n)) for n in ("A_log", "dt_bias", "state", "d_cache", "k_cache", "g_cache")}
    with pytest.raises(TypeError, match=r"force_flush: .* cannot be converted by rssm \(pass int32\)"):
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed_qkv, a, b, g["A_log"], g["dt_bias"], None, g["state"], g["d_cache"], g["k_cache"], g["g_cache"],
            cp.empty((2, e.HV, e.V), cp.float32), cp.asarray([0, 1], cp.int32), cp.zeros(2, cp.int32),
            cp.zeros(2, cp.bool_))
