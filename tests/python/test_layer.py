"""The lower-level Layer: separate q, k, v arrays, precomputed gates (g and
beta given) or raw ones, no L2 norm, and Layer.advance, on the CPU backend
against the float64 reference."""

import numpy as np
import pytest

import rssm
from rssm_reference import prepare_qk, raw_gates, ring_state, step


def make(rng, desc):
    H, HV, K, V, S = desc.num_qk_heads, desc.num_v_heads, desc.head_k, desc.head_v, desc.slots
    R = desc.ring_len  # L entries, as an engine allocates them
    kda = desc.gate_kind == "kda"
    t = dict(
        state=rng.uniform(-0.1, 0.1, (S, HV, V, K)).astype(np.float32),
        ring_d=np.full((S, HV, R, V), np.nan, np.float32),
        ring_k=np.full((S, H, R, K), np.nan, np.float32),
        ring_g=np.full((S, HV, R, K) if kda else (S, HV, R), np.nan, np.float32))
    return t


@pytest.mark.parametrize("gate_kind", ["gdn", "kda"])
def test_precomputed_gates_three_arrays(gate_kind):
    rng = np.random.default_rng(10)
    kda = gate_kind == "kda"
    desc = rssm.LayerDesc(num_qk_heads=2, num_v_heads=2, head_k=8, head_v=4, slots=4, max_rows=3, ring_len=3,
                          gate_kind=gate_kind, gate_mode="precomputed", ring_dtype="fp32", qk_l2norm=False,
                          q_scale=0.5,
                          # the rings hold L = 3 entries per head, not L - 1
                          ring_d_slot_stride=2 * 3 * 4, ring_d_head_stride=3 * 4,
                          ring_k_slot_stride=2 * 3 * 8, ring_k_head_stride=3 * 8,
                          ring_g_slot_stride=2 * 3 * (8 if kda else 1), ring_g_head_stride=3 * (8 if kda else 1))
    layer = rssm.Layer(desc, "cpu")
    t = make(rng, desc)
    ref = t["state"].astype(np.float64)
    cursor = np.zeros(desc.slots, np.int32)
    H, HV, K, V = 2, 2, 8, 4
    for it in range(7):
        rows = 3
        idx = rng.choice(desc.slots, rows, replace=False).astype(np.int32)
        write_pos = cursor[idx].copy()
        q = rng.uniform(-1, 1, (rows, H, K)).astype(np.float32)
        k = rng.uniform(-1, 1, (rows, H, K)).astype(np.float32)
        v = rng.uniform(-1, 1, (rows, HV, V)).astype(np.float32)
        g = -rng.uniform(0.01, 0.5, (rows, HV, K) if kda else (rows, HV)).astype(np.float32)
        beta = rng.uniform(0.1, 0.9, (rows, HV)).astype(np.float32)
        out = np.empty((rows, HV, V), np.float32)
        layer.run(q=q, k=k, v=v, gate=g, beta=beta, out=out, slot_index=idx, write_pos=write_pos, **t)
        qq, kk = prepare_qk(q, k, l2=False, scale=0.5)
        for r in range(rows):
            expect = step(ref[idx[r]], qq[r], kk[r], v[r].astype(np.float64), g[r].astype(np.float64),
                          beta[r].astype(np.float64))
            np.testing.assert_allclose(out[r], expect, rtol=1e-4, atol=1e-5)
        layer.advance(idx, write_pos, cursor)
        assert all(cursor[idx] == np.where(write_pos == desc.ring_len - 1, 0, write_pos + 1))
        for s in range(desc.slots):
            S = ring_state(t["state"][s], t["ring_d"][s], t["ring_k"][s], t["ring_g"][s], int(cursor[s]))
            np.testing.assert_allclose(S, ref[s], rtol=1e-4, atol=1e-5)


def test_raw_safe_gates():
    """Kimi-Linear's bounded gate: g = lower_bound * sigmoid(exp(A_log) (a + dt_bias))."""
    rng = np.random.default_rng(11)
    H, HV, K, V = 1, 2, 4, 4
    desc = rssm.LayerDesc(num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=2, max_rows=2, ring_len=2,
                          gate_kind="kda", gate_mode="raw_safe", gate_lower_bound=-5.0, ring_dtype="fp32",
                          ring_d_head_stride=2 * V, ring_d_slot_stride=HV * 2 * V,
                          ring_k_head_stride=2 * K, ring_k_slot_stride=H * 2 * K,
                          ring_g_head_stride=2 * K, ring_g_slot_stride=HV * 2 * K)
    layer = rssm.Layer(desc)
    t = make(rng, desc)
    ref = t["state"].astype(np.float64)
    A_log = rng.uniform(-1, 0.5, HV).astype(np.float32)
    dt_bias = rng.uniform(-0.5, 0.5, (HV, K)).astype(np.float32)
    idx = np.array([1, 0], np.int32)
    cursor = np.zeros(2, np.int32)
    for it in range(3):
        q, k = (rng.uniform(-1, 1, (2, H * K)).astype(np.float32) for _ in range(2))
        v = rng.uniform(-1, 1, (2, HV * V)).astype(np.float32)
        a = rng.uniform(-3, 3, (2, HV, K)).astype(np.float32)
        b = rng.uniform(-3, 3, (2, HV)).astype(np.float32)
        out = np.empty((2, HV * V), np.float32)
        write_pos = cursor[idx].copy()
        layer.run(q=q, k=k, v=v, gate=a, beta=b, out=out, slot_index=idx, write_pos=write_pos, A_log=A_log,
                  dt_bias=dt_bias, **t)
        layer.advance(idx, write_pos, cursor)
        g, beta = raw_gates(a, b, A_log, dt_bias, True, K, lower_bound=-5.0)
        qq, kk = prepare_qk(q.reshape(2, H, K), k.reshape(2, H, K))
        for r in range(2):
            expect = step(ref[idx[r]], qq[r], kk[r], v[r].reshape(HV, V).astype(np.float64), g[r], beta[r])
            np.testing.assert_allclose(out[r].reshape(HV, V), expect, rtol=1e-4, atol=1e-5)


def test_stride_must_match_the_description():
    desc = rssm.LayerDesc(num_qk_heads=1, num_v_heads=1, head_k=4, head_v=4, slots=2, max_rows=2, ring_len=2,
                          ring_dtype="fp32")
    layer = rssm.Layer(desc)
    rng = np.random.default_rng(12)
    wide = np.zeros((2, 8), np.float32)
    args = dict(q=wide[:, :4], k=np.zeros((2, 4), np.float32), v=np.zeros((2, 4), np.float32),
                gate=np.zeros((2, 1), np.float32), beta=np.zeros((2, 1), np.float32),
                out=np.zeros((2, 4), np.float32), state=np.zeros((2, 1, 4, 4), np.float32),
                ring_d=np.zeros((2, 1, 1, 4), np.float32), ring_k=np.zeros((2, 1, 1, 4), np.float32),
                ring_g=np.zeros((2, 1, 1), np.float32), slot_index=np.array([0, 1], np.int32),
                write_pos=np.zeros(2, np.int32))
    with pytest.raises(ValueError, match=r"q \(shape \[2, 4\], fp32, strides \[8, 1\] elements\): its q row stride is 8 elements, but the layer.s description has 4"):
        layer.run(**args)
    args["q"] = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
    layer.run(**args)  # contiguous, as described


def test_backend_info_and_can_implement():
    b = rssm.backend("cpu")
    assert b.name == "cpu" and b.device and b.kernels
    assert rssm.backend("cpu") is b
    assert "cpu" in rssm.backend_names()
    desc = rssm.LayerDesc(num_qk_heads=2, num_v_heads=4, head_k=16, head_v=8, slots=4, max_rows=4)
    assert rssm.can_implement(desc, "cpu") is None


@pytest.mark.parametrize("gate_kind", ["gdn", "kda"])
def test_verify_is_its_steps(gate_kind):
    """Layer.verify: each draft token's output is what that many Layer.run
    steps give (bit for bit on the cpu backend, whose window sums as its
    steps do), rows of different window sizes in one call; accepting k
    tokens is the cursor alone, and the slot's true state is then the k
    steps'."""
    rng = np.random.default_rng(12)
    kda = gate_kind == "kda"
    H, HV, K, V, L, rows, T = 1, 2, 8, 4, 5, 2, 3
    desc = rssm.LayerDesc(num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=3, max_rows=rows * T,
                          ring_len=L, gate_kind=gate_kind, gate_mode="precomputed", ring_dtype="fp32",
                          ring_d_slot_stride=HV * L * V, ring_d_head_stride=L * V,
                          ring_k_slot_stride=H * L * K, ring_k_head_stride=L * K,
                          ring_g_slot_stride=HV * L * (K if kda else 1), ring_g_head_stride=L * (K if kda else 1))
    layer = rssm.Layer(desc, "cpu")
    win = make(rng, desc)
    steps = {n: a.copy() for n, a in win.items()}
    idx = np.array([2, 0], np.int32)
    write_pos = np.zeros(rows, np.int32)
    drafts = np.array([T, 2], np.int32)
    q, k = (rng.uniform(-1, 1, (T * rows, H, K)).astype(np.float32) for _ in range(2))
    v = rng.uniform(-1, 1, (T * rows, HV, V)).astype(np.float32)
    g = -rng.uniform(0.01, 0.5, (T * rows, HV, K) if kda else (T * rows, HV)).astype(np.float32)
    beta = rng.uniform(0.1, 0.9, (T * rows, HV)).astype(np.float32)
    out = np.full((T * rows, HV, V), np.nan, np.float32)
    overflow = np.zeros(rows, np.uint32)
    layer.verify(drafts=drafts, q=q, k=k, v=v, gate=g, beta=beta, out=out, slot_index=idx, write_pos=write_pos,
                 overflow=overflow, **win)
    assert (overflow == 0xffffffff).all()
    for t in range(T):
        s = slice(t * rows, (t + 1) * rows)
        o = np.empty((rows, HV, V), np.float32)
        live = t < drafts  # rows still in their window
        pos = np.where(live, t, 0).astype(np.int32)
        slot = np.where(live, idx, -1).astype(np.int32)
        layer.run(q=q[s], k=k[s], v=v[s], gate=g[s], beta=beta[s], out=o, slot_index=slot, write_pos=pos, **steps)
        np.testing.assert_array_equal(out[s][live], o[live])
    # accept 1 of row 0's tokens and both of row 1's: the cursors alone
    for r, kept in enumerate((1, 2)):
        expect = ring_state(steps["state"][idx[r]], steps["ring_d"][idx[r]], steps["ring_k"][idx[r]],
                            steps["ring_g"][idx[r]], kept)
        got = ring_state(win["state"][idx[r]], win["ring_d"][idx[r]], win["ring_k"][idx[r]],
                         win["ring_g"][idx[r]], kept)
        np.testing.assert_array_equal(got, expect)
    np.testing.assert_array_equal(win["state"], steps["state"])  # no checkpoint written
    with pytest.raises(ValueError):
        layer.verify(drafts=drafts, q=q[:5], k=k[:5], v=v[:5], gate=g[:5], beta=beta[:5], out=out[:5],
                     slot_index=idx, write_pos=write_pos, **win)


def test_nonpositive_padding():
    """vLLM's convention (padding="nonpositive"): a row naming slot 0 is padding,
    as -1 is: zero output, slot 0 and its cursor untouched; by default slot 0 runs."""
    rng = np.random.default_rng(12)
    H, HV, K, V = 1, 2, 8, 4
    for padding in ("out_of_range", "nonpositive"):
        desc = rssm.LayerDesc(num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=4, max_rows=3, ring_len=3,
                              gate_mode="precomputed", ring_dtype="fp32", padding=padding,
                              ring_d_slot_stride=HV * 3 * V, ring_d_head_stride=3 * V,
                              ring_k_slot_stride=H * 3 * K, ring_k_head_stride=3 * K,
                              ring_g_slot_stride=HV * 3, ring_g_head_stride=3)
        layer = rssm.Layer(desc, "cpu")
        t = make(rng, desc)
        before = {n: a.copy() for n, a in t.items()}
        idx = np.array([0, 2, -1], np.int32)
        write_pos = np.zeros(3, np.int32)
        cursor = np.full(desc.slots, 5, np.int32)
        out = np.full((3, HV, V), 7.0, np.float32)
        layer.run(q=rng.uniform(-1, 1, (3, H, K)).astype(np.float32), k=rng.uniform(-1, 1, (3, H, K)).astype(np.float32),
                  v=rng.uniform(-1, 1, (3, HV, V)).astype(np.float32),
                  gate=-rng.uniform(0.01, 0.5, (3, HV)).astype(np.float32),
                  beta=rng.uniform(0.1, 0.9, (3, HV)).astype(np.float32), out=out, slot_index=idx,
                  write_pos=write_pos, **t)
        layer.advance(idx, write_pos, cursor)
        pads = padding == "nonpositive"
        assert (out[2] == 0).all() and (out[1] != 0).all() and (out[1] != 7).all()
        assert (out[0] == 0).all() if pads else ((out[0] != 0).all() and (out[0] != 7).all())
        appended = t["ring_d"][0][:, 0]  # slot 0's entry 0 of each head: NaN until written
        assert np.isnan(appended).all() if pads else not np.isnan(appended).any()
        np.testing.assert_array_equal(t["state"][0], before["state"][0])
        assert cursor[0] == (5 if pads else 1) and cursor[2] == 1 and cursor[3] == 5
    with pytest.raises(ValueError, match="padding"):
        rssm.LayerDesc(num_qk_heads=1, num_v_heads=1, head_k=8, head_v=4, slots=2, max_rows=1, padding="-1")
