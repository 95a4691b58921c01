"""rssm.sglang and rssm.vllm: the engines' decode entry points, signature
for signature, on the CPU backend against the float64 reference
(rssm_reference.py): out of their shape [B, 1, HV, V], their defaults (no L2
norm unless asked), their padding conventions (SGLang: a negative slot index;
vLLM: 0 and below), the caller advancing write_pos, and the packed decodes,
which must update the state every step; and the padding keyword of rssm's own
entry, fold and cursor advance."""

import inspect

import numpy as np
import pytest

import rssm
import rssm.sglang as sgl
import rssm.vllm as vllm
from test_decode import Engine


def _reference(e, mixed_qkv, a, b, idx, l2, scale, lower_bound=None, first_slot=0):
    """A step in float64 on e.ref with the engines' options; out [B, HV, V]."""
    return e.reference(mixed_qkv, a, b, idx, scale, l2=l2, lower_bound=lower_bound, first_slot=first_slot)


def _check(e, got, expect):
    tol = 1e-4
    np.testing.assert_allclose(got, expect, rtol=tol, atol=tol * max(1.0, np.abs(expect).max()))


def test_signatures_are_sglangs():
    """The names, order and defaults an SGLang call site passes."""
    p = inspect.signature(sgl.fused_recurrent_linear_replayssm_decode).parameters
    assert list(p)[:14] == ["mixed_qkv", "a", "b", "A_log", "dt_bias", "scale", "initial_state", "d_cache",
                            "k_cache", "g_cache", "out", "ssm_state_indices", "write_pos", "force_flush"]
    assert p["use_qk_l2norm_in_kernel"].default is False and p["is_kda"].default is False
    for f in (sgl.fused_recurrent_gated_delta_rule_packed_decode, sgl.fused_recurrent_kda_packed_decode):
        p = inspect.signature(f).parameters
        assert list(p)[:10] == ["mixed_qkv", "a", "b", "A_log", "dt_bias", "scale", "initial_state", "out",
                                "ssm_state_indices", "use_qk_l2norm_in_kernel"]
        assert p["use_qk_l2norm_in_kernel"].default is False


@pytest.mark.parametrize("is_kda", [False, True])
@pytest.mark.parametrize("l2", [False, True])
def test_replayssm_decode_loop(is_kda, l2):
    rng = np.random.default_rng(11 + is_kda)
    e = Engine(rng, gate_kind="kda" if is_kda else "gdn", L=4)
    B, scale = 4, 0.25
    write_pos = np.zeros(B, np.int32)
    idx = np.array([2, -1, 0, 5], np.int32)  # SGLang pads with -1
    for t in range(3 * e.L + 1):
        mixed_qkv, a, b = e.inputs(B)
        if not l2:  # without the norm the kernel sees q and k as given: keep the state bounded
            mixed_qkv[:, :2 * e.H * e.K] *= 0.2
        force = np.array([0, 0, int(t == 5), 0], np.int32)
        a_call = a.reshape(B, e.HV, e.K) if is_kda else a        # SGLang's KDA shapes
        dt_bias = e.dt_bias.reshape(e.HV, e.K) if is_kda else e.dt_bias
        out = np.full((B, 1, e.HV, e.V), 7.0, np.float32)
        expect = _reference(e, mixed_qkv, a, b, idx, l2, scale)
        got = sgl.fused_recurrent_linear_replayssm_decode(
            mixed_qkv, a_call, b, e.A_log, dt_bias, scale, e.state, e.d_cache, e.k_cache, e.g_cache, out, idx,
            write_pos, force, use_qk_l2norm_in_kernel=l2, is_kda=is_kda, nk=1)
        assert got[0] is out and got[1] is e.state
        _check(e, out[:, 0], expect)
        assert np.all(out[1] == 0.0), "a padding row's output is zeroed"
        flush = (write_pos == e.L - 1) | (force != 0)
        write_pos = np.where(flush, 0, write_pos + 1).astype(np.int32)  # the caller advances it
    # A forced flush of every row: the checkpoints are then the true states.
    live = idx >= 0
    mixed_qkv, a, b = e.inputs(B)
    mixed_qkv[:, :2 * e.H * e.K] *= 1.0 if l2 else 0.2
    out = np.empty((B, 1, e.HV, e.V), np.float32)
    _reference(e, mixed_qkv, a, b, idx, l2, scale)
    sgl.fused_recurrent_linear_replayssm_decode(
        mixed_qkv, a.reshape(B, e.HV, e.K) if is_kda else a, b, e.A_log,
        e.dt_bias.reshape(e.HV, e.K) if is_kda else e.dt_bias, scale, e.state, e.d_cache, e.k_cache, e.g_cache,
        out, idx, write_pos, np.ones(B, np.int32), use_qk_l2norm_in_kernel=l2, is_kda=is_kda)
    for s in idx[live]:
        np.testing.assert_allclose(e.state[s], e.ref[s], rtol=1e-4, atol=1e-4 * np.abs(e.ref[s]).max())


@pytest.mark.parametrize("kind", ["gdn", "kda", "kda-bounded"])
def test_packed_decode_updates_the_state_every_step(kind):
    rng = np.random.default_rng(21)
    e = Engine(rng, gate_kind="gdn" if kind == "gdn" else "kda", L=4)
    B, lower_bound = 3, (-5.0 if kind == "kda-bounded" else None)
    idx = np.array([4, -1, 1], np.int32)
    for _ in range(3):
        mixed_qkv, a, b = e.inputs(B)
        out = np.full((B, 1, e.HV, e.V), 7.0, np.float32)
        expect = _reference(e, mixed_qkv, a, b, idx, True, None, lower_bound)
        if kind == "gdn":
            sgl.fused_recurrent_gated_delta_rule_packed_decode(
                mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, out, idx, use_qk_l2norm_in_kernel=True)
        else:
            sgl.fused_recurrent_kda_packed_decode(
                mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, out, idx, use_qk_l2norm_in_kernel=True,
                lower_bound=lower_bound)
        _check(e, out[:, 0], expect)
        assert np.all(out[1] == 0.0)
        for s in (4, 1):  # a packed decode leaves every live slot's state current
            np.testing.assert_allclose(e.state[s], e.ref[s], rtol=1e-4, atol=1e-4 * np.abs(e.ref[s]).max())


def test_out_of_the_wrong_shape_is_refused():
    rng = np.random.default_rng(3)
    e = Engine(rng, L=4)
    mixed_qkv, a, b = e.inputs(2)
    with pytest.raises(ValueError, match=r"out has shape \[2, 4, 8\], expected \[B, 1, HV, V\] = \[2, 1, 4, 8\]"):
        sgl.fused_recurrent_linear_replayssm_decode(
            mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, e.d_cache, e.k_cache, e.g_cache,
            np.zeros((2, 4, 8), np.float32), np.array([0, 1], np.int32), np.zeros(2, np.int32))


def test_vllm_packed_decode_pads_slot_zero():
    """vLLM's packed decode: slot 0 is its null block, so rows of index 0 or
    below are padding; slot 0's state stays as it was."""
    p = inspect.signature(vllm.fused_recurrent_gated_delta_rule_packed_decode).parameters
    assert list(p) == ["mixed_qkv", "a", "b", "A_log", "dt_bias", "scale", "initial_state", "out",
                       "ssm_state_indices", "use_qk_l2norm_in_kernel"]
    rng = np.random.default_rng(31)
    e = Engine(rng, L=4)
    B = 4
    idx = np.array([0, 3, -2, 5], np.int32)
    slot0 = e.state[0].copy()
    for _ in range(2):
        mixed_qkv, a, b = e.inputs(B)
        out = np.full((B, 1, e.HV, e.V), 7.0, np.float32)
        expect = _reference(e, mixed_qkv, a, b, idx, True, None, first_slot=1)
        got = vllm.fused_recurrent_gated_delta_rule_packed_decode(
            mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, out, idx, use_qk_l2norm_in_kernel=True)
        assert got[0] is out and got[1] is e.state
        _check(e, out[:, 0], expect)
        assert np.all(out[0] == 0.0) and np.all(out[2] == 0.0)
    np.testing.assert_array_equal(e.state[0], slot0)


def test_padding_keyword_of_the_entry_fold_and_advance():
    """padding="nonpositive" on the replay entry, rssm.materialise and
    rssm.advance: a row of slot 0 runs nothing and moves no cursor; the
    default keeps slot 0 a slot; an unknown convention is refused."""
    rng = np.random.default_rng(41)
    e = Engine(rng, L=4)
    B = 3
    idx = np.array([0, 2, 4], np.int32)
    before = e.state.copy()
    for t in range(3):
        mixed_qkv, a, b = e.inputs(B)
        out = np.full((B, e.HV, e.V), 7.0, np.float32)
        write_pos = e.cursor[idx].astype(np.int32)
        expect = _reference(e, mixed_qkv, a, b, idx, True, None, first_slot=1)
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, e.d_cache, e.k_cache, e.g_cache, out, idx,
            write_pos, None, padding="nonpositive")
        _check(e, out, expect)
        assert np.all(out[0] == 0.0)
        rssm.advance(e.cursor, idx, write_pos, ring_len=e.L, padding="nonpositive")
        assert e.cursor[0] == 0 and e.cursor[2] == t + 1
    rssm.materialise(e.state, e.d_cache, e.k_cache, e.g_cache, idx, e.cursor[idx].astype(np.int32),
                     padding="nonpositive")
    np.testing.assert_array_equal(e.state[0], before[0])
    for s in (2, 4):
        np.testing.assert_allclose(e.state[s], e.ref[s], rtol=1e-4, atol=1e-4 * np.abs(e.ref[s]).max())
    # The default convention: slot 0 is a slot like any other.
    mixed_qkv, a, b = e.inputs(B)
    out = np.zeros((B, e.HV, e.V), np.float32)
    rssm.fused_recurrent_gated_delta_rule_replayssm(
        mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, e.d_cache, e.k_cache, e.g_cache, out, idx,
        np.zeros(B, np.int32), np.ones(B, np.int32))
    assert np.any(out[0] != 0.0) and np.any(e.state[0] != before[0])
    with pytest.raises(ValueError, match="padding 'zero'"):
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, e.d_cache, e.k_cache, e.g_cache, out, idx,
            np.zeros(B, np.int32), None, padding="zero")


def _wrapper_args(e, kind):
    """Arguments of a valid call of each wrapper, by name."""
    mixed_qkv, a, b = e.inputs(2)
    args = dict(mixed_qkv=mixed_qkv, a=a, b=b, A_log=e.A_log, dt_bias=e.dt_bias, scale=None, initial_state=e.state,
                out=np.zeros((2, 1, e.HV, e.V), np.float32), ssm_state_indices=np.array([0, 1], np.int32))
    if kind == "replayssm":
        args.update(d_cache=e.d_cache, k_cache=e.k_cache, g_cache=e.g_cache, write_pos=np.zeros(2, np.int32))
    if kind == "kda":
        args.update(lower_bound=-5.0)
    return args


_WRAPPERS = {"replayssm": sgl.fused_recurrent_linear_replayssm_decode,
             "packed": sgl.fused_recurrent_gated_delta_rule_packed_decode,
             "kda": sgl.fused_recurrent_kda_packed_decode,
             "vllm": vllm.fused_recurrent_gated_delta_rule_packed_decode}


@pytest.mark.parametrize("kind", list(_WRAPPERS))
@pytest.mark.parametrize("name, bad, exc, match", [
    ("initial_state", np.zeros((6, 4, 8, 0), np.float32), ValueError,
     r"initial_state has shape \[6, 4, 8, 0\], expected \[slots, HV, V, K\] with HV, V and K at least 1"),
    ("initial_state", np.zeros((6, 4, 8), np.float32), ValueError,
     r"initial_state has shape \[6, 4, 8\], expected \[slots, HV, V, K\]"),
    ("mixed_qkv", np.zeros(96, np.float32), ValueError,
     r"mixed_qkv has shape \[96\], expected \[B, 2\*H\*K \+ HV\*V\]"),
    ("mixed_qkv", [[0.0] * 96] * 2, TypeError, r"mixed_qkv: expected an array .*got list"),
    ("initial_state", [[0.0]], TypeError, r"initial_state: expected an array .*got list"),
    ("out", [[0.0]], TypeError, r"out: expected an array .*got list"),
    ("out", np.zeros((2, 4, 8), np.float32), ValueError, r"out has shape \[2, 4, 8\], expected \[B, 1, HV, V\]"),
    ("mixed_qkv", np.zeros((2, 96), object), TypeError, r"mixed_qkv: element type '\|O' is not one rssm takes"),
])
def test_wrappers_name_what_is_wrong(kind, name, bad, exc, match):
    """Each wrapper reads its arguments as the entry does and checks rank and
    extent before using them: a wrong one is a ValueError or TypeError
    naming it and the shape expected (it was ZeroDivisionError, IndexError,
    AttributeError, an unpacking error, or an error blaming out)."""
    e = Engine(np.random.default_rng(7), L=4)
    f = _WRAPPERS[kind]
    if kind == "kda":  # KDA's gate shapes
        e = Engine(np.random.default_rng(7), gate_kind="kda", L=4)
    with pytest.raises(exc, match=match):
        f(**{**_wrapper_args(e, kind), name: bad})


@pytest.mark.parametrize("kind", ["packed", "kda", "vllm"])
def test_packed_wrappers_name_a_narrow_mixed_qkv(kind):
    """H is what is left of mixed_qkv's width after HV*V: a width that leaves
    no whole head is named, not a negative ring shape."""
    e = Engine(np.random.default_rng(8), gate_kind="gdn" if kind != "kda" else "kda", L=4)
    for width in (8, e.HV * e.V, e.HV * e.V + 3):
        with pytest.raises(ValueError, match=rf"mixed_qkv has {width} columns, expected 2\*H\*K \+ HV\*V for some "
                                             rf"H >= 1 \(HV=4, V=8, K=16 from initial_state\)"):
            _WRAPPERS[kind](**{**_wrapper_args(e, kind), "mixed_qkv": np.zeros((2, width), np.float32)})


def test_kda_lower_bound_is_named():
    e = Engine(np.random.default_rng(9), gate_kind="kda", L=4)
    with pytest.raises(TypeError, match=r"lower_bound = 'x': expected a number"):
        sgl.fused_recurrent_kda_packed_decode(**{**_wrapper_args(e, "kda"), "lower_bound": "x"})


@pytest.mark.parametrize("kind", list(_WRAPPERS))
def test_wrappers_write_a_strided_out(kind):
    """out [B, 1, HV, V] whose rows are apart (a slice of a larger buffer) is
    written in place: the wrappers take a view of it, not a copy."""
    e = Engine(np.random.default_rng(10), gate_kind="kda" if kind == "kda" else "gdn", L=4)
    args = _wrapper_args(e, kind)
    big = np.full((2, 2, e.HV, e.V), 7.0, np.float32)
    out = big[:, :1]
    assert not out.flags["C_CONTIGUOUS"]
    got = _WRAPPERS[kind](**{**args, "out": out})
    assert got[0] is out
    assert np.all(big[:, 1] == 7.0) and not np.any(big[:, 0] == 7.0)
