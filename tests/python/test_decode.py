"""The per-layer entry point (vLLM's names) on the CPU backend, against the
float64 reference of rssm_reference.py: a multi-step decode loop with
write_pos cycling through the ring, forced flushes and padding rows, the
state the checkpoint and ring encode, strided inputs and the layer cache."""

import numpy as np
import pytest

import rssm
from rssm import layer as rssm_layer
from rssm_reference import prepare_qk, raw_gates, ring_state, step

RING_DTYPES = {"fp32": np.float32, "fp16": np.float16}
# Output tolerance relative to the largest |o|: an fp32 ring is exact up to
# fp32 rounding and summation order; a 16-bit ring rounds d and k once.
TOL = {"fp32": 1e-4, "fp16": 4e-3}


class Engine:
    """An engine's tensors for one layer (state pool, rings, gate weights)
    and, beside them, the float64 reference state of every slot."""

    def __init__(self, rng, *, gate_kind="gdn", H=2, HV=4, K=16, V=8, slots=6, L=4, ring_dtype="fp32",
                 ring_entries=None, state=None, rings=None):
        self.rng, self.kda = rng, gate_kind == "kda"
        self.gate_kind, self.H, self.HV, self.K, self.V, self.slots, self.L = gate_kind, H, HV, K, V, slots, L
        self.ring_dtype = ring_dtype
        R = ring_entries or L                   # an engine allocates L entries per head
        rd = RING_DTYPES[ring_dtype]
        if state is None:
            state = np.empty((slots, HV, V, K), np.float32)
        state[...] = rng.uniform(-0.05, 0.05, state.shape)
        self.state = state
        self.ref = state.astype(np.float64)     # the true state of every slot
        if rings is None:
            gshape = (slots, HV, R, K) if self.kda else (slots, HV, R)
            rings = (np.empty((slots, HV, R, V), rd), np.empty((slots, H, R, K), rd), np.empty(gshape, np.float32))
        self.d_cache, self.k_cache, self.g_cache = rings
        self.R = self.d_cache.shape[2]
        # Unused ring memory may hold NaN (design.md §1): a kernel that read
        # an entry at or past write_pos would show it in its output.
        for r in rings:
            r[...] = np.nan
        self.cursor = np.zeros(slots, np.int32)  # committed ring entries per slot
        self.A_log = rng.uniform(-1.0, 0.5, HV).astype(np.float32)
        self.dt_bias = rng.uniform(-0.5, 0.5, (HV * K,) if self.kda else (HV,)).astype(np.float32)

    def inputs(self, B, mixed_qkv=None):
        H, HV, K, V = self.H, self.HV, self.K, self.V
        if mixed_qkv is None:
            mixed_qkv = np.empty((B, 2 * H * K + HV * V), np.float32)
        mixed_qkv[...] = self.rng.uniform(-1.0, 1.0, mixed_qkv.shape)
        a = self.rng.uniform(-3.0, 3.0, (B, HV * K) if self.kda else (B, HV)).astype(np.float32)
        b = self.rng.uniform(-3.0, 3.0, (B, HV)).astype(np.float32)
        return mixed_qkv, a, b

    def reference(self, mixed_qkv, a, b, idx, scale=None, *, l2=True, lower_bound=None, first_slot=0):
        """The step in float64 on self.ref; returns the expected out [B, HV, V].
        A row whose slot is below first_slot (1: vLLM's null block 0) or past
        the pool is padding; l2 and lower_bound as the kernels' options."""
        H, HV, K, V = self.H, self.HV, self.K, self.V
        B = mixed_qkv.shape[0]
        q = mixed_qkv[:, :H * K].reshape(B, H, K)
        k = mixed_qkv[:, H * K:2 * H * K].reshape(B, H, K)
        v = np.asarray(mixed_qkv[:, 2 * H * K:], np.float64).reshape(B, HV, V)
        q, k = prepare_qk(q, k, l2, scale)
        g, beta = raw_gates(a, b, self.A_log, self.dt_bias, self.kda, K, lower_bound)
        out = np.zeros((B, HV, V))
        for r in range(B):
            if first_slot <= idx[r] < self.slots:
                out[r] = step(self.ref[idx[r]], q[r], k[r], v[r], g[r], beta[r])
        return out

    def run(self, mixed_qkv, a, b, idx, force, out=None, **kw):
        B = mixed_qkv.shape[0]
        pad = (idx < 0) | (idx >= self.slots)
        write_pos = np.where(pad, 0, self.cursor[np.clip(idx, 0, self.slots - 1)]).astype(np.int32)
        if out is None:
            out = np.full((B, self.HV, self.V), 7.0, np.float32)  # padding rows must come back zeroed
        expect = self.reference(mixed_qkv, a, b, idx, kw.get("scale"))
        if self.R != self.L:                    # else ring_len defaults to d_cache's entries
            kw["ring_len"] = self.L
        got = rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed_qkv, a, b, self.A_log, self.dt_bias, kw.pop("scale", None), self.state, self.d_cache,
            self.k_cache, self.g_cache, out, idx, write_pos, force, gate_kind=self.gate_kind, **kw)
        assert got is out
        # The cursors, advanced by rssm_layer_advance and by the rule itself.
        flushes = (write_pos == self.L - 1) | (np.asarray(force if force is not None else 0) != 0)
        expect_cursor = self.cursor.copy()
        for r in range(B):
            if not pad[r]:
                expect_cursor[idx[r]] = 0 if flushes[r] else write_pos[r] + 1
        rssm.advance(self.cursor, idx, write_pos, force, ring_len=self.L)
        np.testing.assert_array_equal(self.cursor, expect_cursor)
        return np.asarray(out).reshape(B, self.HV, self.V), expect, flushes

    def check_out(self, got, expect):
        tol = TOL[self.ring_dtype]
        np.testing.assert_allclose(got, expect, rtol=tol, atol=tol * max(1.0, np.abs(expect).max()))

    def check_encoded_state(self, slots=None):
        """What each slot's checkpoint plus ring encode is the reference state."""
        tol = TOL[self.ring_dtype]
        for s in range(self.slots) if slots is None else slots:
            n = int(self.cursor[s])
            S = ring_state(self.state[s], self.d_cache[s], self.k_cache[s], self.g_cache[s], n)
            np.testing.assert_allclose(S, self.ref[s], rtol=tol, atol=tol * max(1.0, np.abs(self.ref[s]).max()),
                                       err_msg=f"slot {s} with {n} ring entries")


@pytest.mark.parametrize("ring_dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("gate_kind", ["gdn", "kda"])
def test_decode_loop(gate_kind, ring_dtype):
    rng = np.random.default_rng(1 if gate_kind == "gdn" else 2)
    e = Engine(rng, gate_kind=gate_kind, ring_dtype=ring_dtype)
    B, steps = 4, 3 * e.L + 2
    flushed = 0
    for t in range(steps):
        # Three live slots in random rows, one padding row (-1, or one past
        # the last slot, which rssm.h also counts as padding).
        live = rng.choice(e.slots, B - 1, replace=False)
        idx = np.insert(live, rng.integers(B), -1 if t % 2 else e.slots).astype(np.int32)
        force = (rng.random(B) < 0.2).astype(np.int32)
        mixed_qkv, a, b = e.inputs(B)
        got, expect, flushes = e.run(mixed_qkv, a, b, idx, force)
        e.check_out(got, expect)
        pad = (idx < 0) | (idx >= e.slots)
        assert np.all(got[pad] == 0.0), "padding rows' outputs are zeroed"
        e.check_encoded_state()
        flushed += int(np.sum(flushes & ~pad))
    assert flushed > 0 and np.any(e.cursor > 0), "the loop both flushed and left entries in rings"

    # A flush on every slot: the checkpoints are then the true states.
    idx = np.arange(e.slots, dtype=np.int32)
    mixed_qkv, a, b = e.inputs(e.slots)
    got, expect, _ = e.run(mixed_qkv, a, b, idx, np.ones(e.slots, np.bool_))
    e.check_out(got, expect)
    assert np.all(e.cursor == 0)
    tol = TOL[ring_dtype]
    np.testing.assert_allclose(e.state, e.ref, rtol=tol, atol=tol * np.abs(e.ref).max())


def test_write_pos_cycles_through_the_ring():
    """One slot, no forced flush: write_pos runs 0..L-1, the step at L-1
    flushes (design.md §2), and the checkpoint changes only then."""
    rng = np.random.default_rng(3)
    e = Engine(rng, L=5, slots=2)
    idx = np.array([1], np.int32)
    seen = []
    for t in range(2 * e.L):
        before = e.state[1].copy()
        seen.append(int(e.cursor[1]))
        mixed_qkv, a, b = e.inputs(1)
        got, expect, flushes = e.run(mixed_qkv, a, b, idx, None)
        e.check_out(got, expect)
        assert bool(flushes[0]) == (seen[-1] == e.L - 1)
        assert np.array_equal(e.state[1], before) != bool(flushes[0]), "the checkpoint is written on flushes only"
        e.check_encoded_state([1])
    assert seen == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert np.all(np.isnan(e.d_cache[0])), "slot 0 was never touched"


def test_strided_inputs():
    """No array in its plain contiguous form: mixed_qkv a column window of a
    wider buffer, a gate a slice of a larger projection, out flat and
    strided, the state and rings every other slot of larger pools."""
    rng = np.random.default_rng(4)
    H, HV, K, V, slots, L = 1, 2, 8, 12, 3, 3
    big_state = np.zeros((2 * slots, HV, V, K), np.float32)
    big_d = np.zeros((2 * slots, HV, L + 2, V), np.float32)      # R = L + 2 > L - 1
    big_k = np.zeros((2 * slots, H, L + 2, K), np.float32)
    big_g = np.zeros((slots, 2, HV, L + 2), np.float32)          # the layer in the middle of a [slot, layer] pool
    e = Engine(rng, H=H, HV=HV, K=K, V=V, slots=slots, L=L, state=big_state[1::2],
               rings=(big_d[::2], big_k[::2], big_g[:, 1]))
    width = 2 * H * K + HV * V
    B = 3
    for t in range(2 * L):
        buf = np.zeros((B, width + 12), np.float32)
        mixed_qkv, _, b = e.inputs(B, buf[:, 4:4 + width])
        proj = rng.uniform(-3, 3, (B, 3 * HV)).astype(np.float32)
        a = proj[:, HV:2 * HV]                                      # row stride 3*HV
        out_buf = np.full((B, 2 * HV * V), 5.0, np.float32)
        out = out_buf[:, :HV * V]
        idx = rng.permutation(slots).astype(np.int32)
        got, expect, _ = e.run(mixed_qkv, a, b, idx, (rng.random(B) < 0.3).astype(np.int32), out=out)
        e.check_out(got, expect)
        assert np.all(out_buf[:, HV * V:] == 5.0), "nothing is written past out's columns"
        e.check_encoded_state()
    assert np.all(big_state[0::2] == 0) and np.all(big_d[1::2] == 0) and np.all(big_g[:, 0] == 0), \
        "the other slots of the pools are untouched"


def test_padding_only_and_empty_batches():
    rng = np.random.default_rng(5)
    e = Engine(rng)
    before = (e.state.copy(), e.cursor.copy())
    mixed_qkv, a, b = e.inputs(2)
    got, expect, _ = e.run(mixed_qkv, a, b, np.array([-1, -7], np.int32), None)
    assert np.all(got == 0)
    assert np.array_equal(e.state, before[0]) and np.array_equal(e.cursor, before[1])
    mixed_qkv, a, b = e.inputs(0)
    out = np.zeros((0, e.HV, e.V), np.float32)
    rssm.fused_recurrent_gated_delta_rule_replayssm(
        mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, e.d_cache, e.k_cache, e.g_cache, out,
        np.zeros(0, np.int32), np.zeros(0, np.int32))


def test_explicit_scale_and_converted_dtypes():
    """An explicit q scale; a and b in fp16 and the indices in int64 are
    converted (the one copy), giving what fp32 / int32 would."""
    rng = np.random.default_rng(6)
    e = Engine(rng)
    for t in range(3):
        mixed_qkv, a, b = e.inputs(3)
        a16, b16 = a.astype(np.float16), b.astype(np.float16)
        idx = np.array([0, 2, 4], np.int64)
        # The reference sees the values the conversion gives.
        expect = e.reference(mixed_qkv, a16.astype(np.float32), b16.astype(np.float32), idx, 0.3)
        write_pos = e.cursor[idx].astype(np.int64)
        out = np.zeros((3, e.HV, e.V), np.float32)
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed_qkv, a16, b16, e.A_log, e.dt_bias, 0.3, e.state, e.d_cache, e.k_cache, e.g_cache, out,
            idx, write_pos)
        rssm.advance(e.cursor, idx, write_pos, ring_len=e.L)
        e.check_out(out, expect)
        e.check_encoded_state()


def test_fp16_activations():
    """fp16 mixed_qkv and out (NumPy float16; vLLM tests its GDN kernels
    with fp16 activations), a and b in fp16 too (converted to fp32, the C
    API's gate dtype): the reference sees the fp16 values, and each output
    is rounded once to fp16, off by at most 2**-11 of itself
    (tools/harness/cases.c) beyond the fp32 path's error. The out dtype
    follows mixed_qkv's."""
    rng = np.random.default_rng(9)
    e = Engine(rng)
    H, HV, K, V, B = e.H, e.HV, e.K, e.V, 4
    flushed = 0
    for t in range(2 * e.L + 1):
        idx = np.insert(rng.choice(e.slots, B - 1, replace=False), rng.integers(B), -1).astype(np.int32)
        mixed_qkv, a, b = e.inputs(B, np.empty((B, 2 * H * K + HV * V), np.float16))
        a16, b16 = a.astype(np.float16), b.astype(np.float16)
        out = np.full((B, HV, V), 7.0, np.float16)
        got, expect, flushes = e.run(mixed_qkv, a16, b16, idx, None, out=out)
        assert got.dtype == np.float16
        pad = idx < 0
        assert np.all(got[pad] == 0.0), "padding rows' outputs are zeroed"
        tol = TOL["fp32"] + 2.0**-11
        np.testing.assert_allclose(got.astype(np.float64), expect, rtol=tol, atol=tol * max(1.0, np.abs(expect).max()))
        e.check_encoded_state()
        flushed += int(np.sum(flushes & ~pad))
    assert flushed > 0
    mixed_qkv, a, b = e.inputs(B, np.empty((B, 2 * H * K + HV * V), np.float16))
    with pytest.raises(TypeError, match="out is fp32, expected fp16"):
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, e.d_cache, e.k_cache, e.g_cache,
            np.zeros((B, HV, V), np.float32), np.arange(B, dtype=np.int32), np.zeros(B, np.int32))


def test_layer_cache():
    rng = np.random.default_rng(7)
    e = Engine(rng)
    for B in (3, 4, 3):
        mixed_qkv, a, b = e.inputs(B)
        e.run(mixed_qkv, a, b, rng.choice(e.slots, B, replace=False).astype(np.int32), None)
    # B = 3 and 4 share max_rows 4: one layer object for the three calls.
    assert len(rssm_layer.cached_layers()) == 1
    mixed_qkv, a, b = e.inputs(5)
    e.run(mixed_qkv, a, b, np.arange(5, dtype=np.int32), None)
    layers = rssm_layer.cached_layers()
    assert sorted(l.desc.max_rows for l in layers) == [4, 8]
    assert all(l.backend.name == "cpu" for l in layers)


def test_overflowing_fp16_ring_entry_is_flagged_and_rerun():
    """|d| = |beta (v - S k)| past fp16's range: the row is flagged in
    `overflow`, its output is right, and running it again with force set
    (rssm.h's recipe) leaves the exact state in the checkpoint."""
    rng = np.random.default_rng(8)
    e = Engine(rng, ring_dtype="fp16", slots=2)
    idx = np.array([1, 0], np.int32)
    mixed_qkv, a, b = e.inputs(2)
    mixed_qkv[0, 2 * e.H * e.K:] *= 2e5            # row 0's v: d far past 65520
    b[:] = 3.0                                      # beta = sigmoid(3), not small
    write_pos = np.zeros(2, np.int32)
    out = np.empty((2, e.HV, e.V), np.float32)
    overflow = np.full(2, 7, np.int32)
    expect = e.reference(mixed_qkv, a, b, idx)
    args = (mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, e.d_cache, e.k_cache, e.g_cache, out, idx, write_pos)
    rssm.fused_recurrent_gated_delta_rule_replayssm(*args, overflow=overflow)
    assert overflow.tolist() == [1, 0]
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-4 * np.abs(expect).max())
    # Row 0 again, unchanged but forced: a flush folds the step into the checkpoint in fp32.
    state_before = e.state[0].copy()
    rssm.fused_recurrent_gated_delta_rule_replayssm(
        mixed_qkv[:1], a[:1], b[:1], e.A_log, e.dt_bias, None, e.state, e.d_cache, e.k_cache, e.g_cache, out[:1],
        idx[:1], write_pos[:1], np.ones(1, np.int32))
    np.testing.assert_allclose(out[0], expect[0], rtol=1e-4, atol=1e-4 * np.abs(expect[0]).max())
    np.testing.assert_allclose(e.state[1], e.ref[1], rtol=1e-4, atol=1e-4 * np.abs(e.ref[1]).max())
    assert np.array_equal(e.state[0], state_before), "slot 0 (row 1) did not flush"


def test_threads_share_the_cached_layer():
    """Engines of one shape in four threads: one cached layer object, whose
    calls take turns (its host scratch is shared), and every result right."""
    import threading

    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            e = Engine(rng)
            for t in range(2 * e.L):
                idx = rng.choice(e.slots, 4, replace=False).astype(np.int32)
                mixed_qkv, a, b = e.inputs(4)
                got, expect, _ = e.run(mixed_qkv, a, b, idx, None)
                e.check_out(got, expect)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(100 + i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(rssm_layer.cached_layers()) == 1


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_only_arrays(versioned):
    """Every array an object with nothing but __dlpack__ (classic or
    versioned capsules): read in place, the same results."""
    from test_arrays import DLPackOnly

    def w(x):
        return DLPackOnly(x, versioned)

    rng = np.random.default_rng(9)
    e = Engine(rng, gate_kind="kda")
    for t in range(2 * e.L):
        idx = rng.choice(e.slots, 3, replace=False).astype(np.int32)
        force = (rng.random(3) < 0.3).astype(np.int32)
        mixed_qkv, a, b = e.inputs(3)
        expect = e.reference(mixed_qkv, a, b, idx)
        write_pos = e.cursor[idx].copy()
        out = np.empty((3, e.HV, e.V), np.float32)
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            w(mixed_qkv), w(a), w(b), w(e.A_log), w(e.dt_bias), None, w(e.state), w(e.d_cache), w(e.k_cache),
            w(e.g_cache), w(out), w(idx), w(write_pos), w(force), gate_kind="kda")
        rssm.advance(w(e.cursor), w(idx), w(write_pos), w(force), ring_len=e.L)
        e.check_out(out, expect)
        e.check_encoded_state()
