"""rssm.materialise (rssm_layer_materialise) on the CPU backend: after decode
steps that left entries in the rings, the fold makes each named slot's
checkpoint alone its true state (what checkpoint plus ring encoded, to
fp32 rounding), touches no other slot and no ring, and the decode loop
goes on from cursor 0 against the float64 reference."""

import numpy as np
import pytest

import rssm
from rssm import layer as rssm_layer
from rssm_reference import ring_state
from test_decode import Engine


def fill_rings(e: Engine, rng, steps: int):
    """Decode steps on every slot with no flush (steps < L), so that each
    slot's ring holds `steps` entries and its checkpoint is stale."""
    assert steps < e.L
    idx = np.arange(e.slots, dtype=np.int32)
    for _ in range(steps):
        mixed_qkv, a, b = e.inputs(e.slots)
        got, expect, flushes = e.run(mixed_qkv, a, b, idx, None)
        e.check_out(got, expect)
        assert not flushes.any()


def encoded(e: Engine, s: int) -> np.ndarray:
    return ring_state(e.state[s], e.d_cache[s], e.k_cache[s], e.g_cache[s], int(e.cursor[s]))


@pytest.mark.parametrize("ring_dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("gate_kind", ["gdn", "kda"])
def test_materialise_folds_the_ring(gate_kind, ring_dtype):
    rng = np.random.default_rng(60 if gate_kind == "gdn" else 61)
    e = Engine(rng, gate_kind=gate_kind, ring_dtype=ring_dtype, L=5)
    fill_rings(e, rng, 3)
    layers_before = len(rssm_layer.cached_layers())
    rows = np.array([4, -1, 1, 2], np.int32)      # a padding row among them
    write_pos = np.where(rows >= 0, e.cursor[np.maximum(rows, 0)], 0).astype(np.int32)
    live = rows[rows >= 0]
    want = {int(s): encoded(e, s) for s in live}
    state, rings = e.state.copy(), [r.copy() for r in (e.d_cache, e.k_cache, e.g_cache)]

    got = rssm.materialise(e.state, e.d_cache, e.k_cache, e.g_cache, rows, write_pos, gate_kind=gate_kind)
    assert got is e.state
    for s, S in want.items():
        np.testing.assert_allclose(e.state[s], S, rtol=1e-6, atol=1e-6 * np.abs(S).max(),
                                   err_msg=f"slot {s}: the checkpoint alone is the encoded state")
    others = np.setdiff1d(np.arange(e.slots), live)
    assert np.array_equal(e.state[others], state[others]), "other slots untouched"
    for r, before in zip((e.d_cache, e.k_cache, e.g_cache), rings):
        assert np.array_equal(r, before, equal_nan=True), "the rings are read, not written"
    assert len(rssm_layer.cached_layers()) == layers_before, "the fold ran on the decode's own layer object"

    # The engine starts the folded slots' cursors at 0 and decodes on.
    e.cursor[live] = 0
    e.check_encoded_state()
    for t in range(e.L + 1):
        idx = rng.choice(e.slots, 4, replace=False).astype(np.int32)
        mixed_qkv, a, b = e.inputs(4)
        got, expect, _ = e.run(mixed_qkv, a, b, idx, None)
        e.check_out(got, expect)
        e.check_encoded_state()


def test_materialise_strided_pool_and_empty_rows():
    """The state and rings as every other slot of larger pools, on a layer
    object of the fold's own (no decode ran on these slots); rows with
    write_pos 0 leave their checkpoint as it is."""
    rng = np.random.default_rng(62)
    H, HV, K, V, slots, L = 1, 2, 8, 4, 3, 4
    big_state = rng.uniform(-0.1, 0.1, (2 * slots, HV, V, K)).astype(np.float32)
    big_d = rng.uniform(-1, 1, (2 * slots, HV, L, V)).astype(np.float32)
    big_k = rng.uniform(-1, 1, (2 * slots, H, L, K)).astype(np.float32)
    big_g = -rng.uniform(0.01, 0.5, (2 * slots, HV, L)).astype(np.float32)
    state, d, k, g = big_state[1::2], big_d[1::2], big_k[1::2], big_g[1::2]
    before = big_state.copy()
    rows = np.array([2, 0, 1], np.int64)          # int64: converted
    write_pos = np.array([3, 0, 2], np.int32)
    want = {int(s): ring_state(state[s], d[s], k[s], g[s], int(n)) for s, n in zip(rows, write_pos)}
    rssm.materialise(state, d, k, g, rows, write_pos)
    for s, S in want.items():
        np.testing.assert_allclose(state[s], S, rtol=1e-6, atol=1e-6 * np.abs(S).max())
    assert np.array_equal(state[0], before[1]), "write_pos 0: nothing to fold"
    assert np.array_equal(big_state[0::2], before[0::2]), "the pool's other slots untouched"
    assert len(rssm_layer.cached_layers()) == 1


def test_materialise_errors():
    rng = np.random.default_rng(63)
    e = Engine(rng)
    rows = np.array([0, 1], np.int32)
    with pytest.raises(ValueError, match=r"write_pos .*expected a contiguous array of 2"):
        rssm.materialise(e.state, e.d_cache, e.k_cache, e.g_cache, rows, np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"g_cache has shape .*\[slots, HV, R\] \(GDN\)"):
        rssm.materialise(e.state, e.d_cache, e.k_cache, e.g_cache[..., None], rows, np.zeros(2, np.int32))
    with pytest.raises(TypeError, match="k_cache is fp16 but d_cache is fp32"):
        rssm.materialise(e.state, e.d_cache, e.k_cache.astype(np.float16), e.g_cache, rows, np.zeros(2, np.int32))
    with pytest.raises(rssm.Error, match="rssm_layer_materialise") as err:
        rssm.materialise(e.state, e.d_cache, e.k_cache, e.g_cache, rows, np.array([0, e.L], np.int32))
    assert err.value.status_name == "invalid argument"
