"""Wrong calls fail with an error that names what is wrong: shapes, dtypes
and layouts in Python before any address reaches C, the rest from rssm
itself (rssm.Error with its status name and message)."""

import numpy as np
import pytest

import rssm
from rssm import layer as rssm_layer

H, HV, K, V, SLOTS, L = 2, 4, 8, 4, 4, 3


def call(**over):
    """A valid GDN call with fp32 everything, with some arguments replaced."""
    return rssm.fused_recurrent_gated_delta_rule_replayssm(**call_args(**over))


def call_args(**over):
    """The arguments of call()."""
    rng = np.random.default_rng(0)
    B = 2
    args = dict(
        mixed_qkv=rng.uniform(-1, 1, (B, 2 * H * K + HV * V)).astype(np.float32),
        a=rng.uniform(-1, 1, (B, HV)).astype(np.float32), b=rng.uniform(-1, 1, (B, HV)).astype(np.float32),
        A_log=np.zeros(HV, np.float32), dt_bias=np.zeros(HV, np.float32), scale=None,
        initial_state=np.zeros((SLOTS, HV, V, K), np.float32),
        d_cache=np.zeros((SLOTS, HV, L, V), np.float32), k_cache=np.zeros((SLOTS, H, L, K), np.float32),
        g_cache=np.zeros((SLOTS, HV, L), np.float32), out=np.zeros((B, HV, V), np.float32),
        ssm_state_indices=np.array([0, 1], np.int32), write_pos=np.array([0, 0], np.int32))
    args.update(over)
    return args


def test_valid_call_runs():
    call()


@pytest.mark.parametrize("over, exc, match", [
    (dict(mixed_qkv=np.zeros((2, 2 * H * K + HV * V + 4), np.float32)), ValueError,
     r"mixed_qkv has 52 columns, expected 2\*H\*K \+ HV\*V = 48 \(H=2 from k_cache, HV=4, V=4, K=8"),
    (dict(mixed_qkv=np.zeros((2, 48), np.float64)), TypeError, r"mixed_qkv is fp64, expected fp32, fp16 or bf16"),
    (dict(mixed_qkv=np.zeros((48, 2), np.float32).T), ValueError, r"mixed_qkv .*each row must be contiguous"),
    (dict(mixed_qkv=[[0.0] * 48] * 2), TypeError, r"mixed_qkv: expected an array"),
    (dict(out=np.zeros((2, HV, V + 4), np.float32)), ValueError, r"out has shape \[2, 4, 8\], expected \[2, 4, 4\] or \[2, 16\]"),
    (dict(out=np.zeros((2, HV, V), np.float16)), TypeError, r"out is fp16, expected fp32"),
    (dict(initial_state=np.zeros((SLOTS, HV, K, V), np.float32).transpose(0, 1, 3, 2)), ValueError,
     r"initial_state .*each head's block must be contiguous"),
    (dict(initial_state=np.zeros((SLOTS, HV, V), np.float32)), ValueError, r"initial_state has shape \[4, 4, 4\], expected \[slots, HV, V, K\]"),
    (dict(k_cache=np.zeros((SLOTS, H, L, K), np.float16)), TypeError, r"k_cache is fp16 but d_cache is fp32"),
    (dict(g_cache=np.zeros((SLOTS, HV, L), np.float16)), TypeError, r"g_cache is fp16, expected fp32"),
    (dict(d_cache=np.zeros((SLOTS - 1, HV, L, V), np.float32)), ValueError, r"d_cache has shape \[3, 4, 3, 4\], expected \[4, 4, R, 4\] with R >= 2"),
    (dict(d_cache=np.zeros((SLOTS, HV, 1, V), np.float32), ring_len=3), ValueError, r"with R >= 2"),
    (dict(a=np.zeros((2, HV + 1), np.float32)), ValueError, r"a has shape \[2, 5\], expected \[2, 4\]"),
    (dict(A_log=np.zeros(HV + 1, np.float32)), ValueError, r"A_log .*expected a contiguous array of shape \[4\]"),
    (dict(A_log=None), ValueError, r"gate_mode 'raw' needs A_log and dt_bias"),
    (dict(ssm_state_indices=np.zeros(2, np.float32)), TypeError, r"ssm_state_indices is fp32, expected int32"),
    (dict(write_pos=np.zeros(3, np.int32)), ValueError, r"write_pos .*expected a contiguous array of 2"),
    (dict(gate_kind="mamba"), ValueError, r"gate_kind 'mamba'"),
    (dict(g_cache=np.zeros((SLOTS, HV, L, K), np.float32)), ValueError, r"g_cache has shape .*\[slots, HV, R\] \(GDN\)"),
    (dict(mixed_qkv=np.broadcast_to(np.zeros(48, np.float32), (2, 48))), ValueError, r"stride 0"),
])
def test_python_side_checks(over, exc, match):
    with pytest.raises(exc, match=match):
        call(**over)
    assert rssm_layer.cached_layers() == [], "a refused call leaves no layer object behind"


def test_errors_from_rssm_carry_status_and_message():
    # The CPU backend refuses a write_pos outside the ring and a slot named twice (rssm.h).
    with pytest.raises(rssm.Error) as e:
        call(write_pos=np.array([0, L], np.int32))
    assert e.value.status_name == "invalid argument" and e.value.function == "rssm_layer_run"
    assert e.value.message and e.value.message in str(e.value)
    with pytest.raises(rssm.Error) as e:
        call(ssm_state_indices=np.array([1, 1], np.int32))
    assert e.value.status_name == "invalid argument" and e.value.message


def test_invalid_model_is_reported_by_rssm():
    # K = 6 is not a multiple of 4: rssm's model validation names the field.
    desc = rssm.LayerDesc(num_qk_heads=1, num_v_heads=1, head_k=6, head_v=4, slots=1, max_rows=1)
    with pytest.raises(rssm.Error, match="head_k") as e:
        rssm.Layer(desc, "cpu")
    assert e.value.status_name == "invalid argument"
    with pytest.raises(rssm.Error, match="head_k"):
        rssm.can_implement(desc, "cpu")


def test_unknown_backend():
    with pytest.raises(rssm.Error) as e:
        rssm.backend("no-such-backend")
    assert e.value.status_name == "invalid argument" and "no-such-backend" in str(e.value)


def test_desc_enum_names():
    with pytest.raises(ValueError, match=r"LayerDesc.ring_dtype = 'fp8'"):
        rssm.LayerDesc(num_qk_heads=1, num_v_heads=1, head_k=4, head_v=4, slots=1, max_rows=1, ring_dtype="fp8")


def test_advance_needs_a_layer_that_ran():
    with pytest.raises(ValueError, match="advance: no layer with ring_len 3 over 4 slots"):
        rssm.advance(np.zeros(SLOTS, np.int32), np.array([0], np.int32), np.array([0], np.int32), ring_len=3)


def test_rows_over_max_rows():
    with pytest.raises(ValueError, match=r"3 rows, but the layer's description allows at most 2"):
        call(mixed_qkv=np.zeros((3, 48), np.float32), a=np.zeros((3, HV), np.float32),
             b=np.zeros((3, HV), np.float32), out=np.zeros((3, HV, V), np.float32),
             ssm_state_indices=np.array([0, 1, 2], np.int32), write_pos=np.zeros(3, np.int32), max_rows=2)


def test_limit_sms_on_a_backend_without_multiprocessors():
    """A cap of multiprocessors is the GPU backends' (rssm_backend_limit_sms):
    the cpu backend says so, and a cap that is not a count is refused in
    Python before it reaches C."""
    b = rssm_layer.Backend("cpu")
    try:
        with pytest.raises(rssm.Error, match="no multiprocessors to cap") as e:
            b.limit_sms(78)
        assert e.value.status_name == "unsupported"
        for bad in (-1, 2**32, 1.5, True, "78"):
            with pytest.raises(ValueError, match="limit_sms"):
                b.limit_sms(bad)
    finally:
        b.close()


@pytest.mark.parametrize("name", ["ssm_state_indices", "write_pos"])
def test_per_row_values_outside_int32_are_refused(name):
    """int64 per-row arrays are narrowed to int32 only when every value fits:
    2**32 + 1 would wrap to slot (or position) 1, where an index past the
    slots is padding."""
    bad = np.array([0, 2**32 + 1], np.int64)
    with pytest.raises(ValueError, match=rf"{name} holds 4294967297, outside int32"):
        call(**{name: bad})
    call(**{name: np.array([0, 1], np.int64)})  # values that fit convert as before


@pytest.mark.parametrize("name", ["out", "initial_state", "d_cache", "k_cache", "g_cache"])
def test_read_only_arrays_are_not_written(name):
    """An array rssm writes that its producer marks read-only is refused
    before anything runs, also by a call prepared while it was writable."""
    args = call_args()
    x = args[name]
    rssm.fused_recurrent_gated_delta_rule_replayssm(**args)  # writable: runs, and is prepared for these objects
    before = x.copy()
    x.flags.writeable = False
    with pytest.raises(ValueError, match=rf"{name} is read-only"):
        rssm.fused_recurrent_gated_delta_rule_replayssm(**args)
    np.testing.assert_array_equal(x, before)
    ro = np.frombuffer(before.tobytes(), before.dtype).reshape(before.shape)  # read-only by construction
    with pytest.raises(ValueError, match=rf"{name} is read-only"):
        call(**{name: ro})


def test_read_only_cursor_is_not_advanced():
    call()  # a layer with ring_len 3 over 4 slots ran
    cursor = np.zeros(SLOTS, np.int32)
    cursor.flags.writeable = False
    with pytest.raises(ValueError, match="cursor is read-only"):
        rssm.advance(cursor, np.array([0, 1], np.int32), np.array([0, 0], np.int32), ring_len=L)


def test_precomputed_gates_ignore_gate_weights():
    """With precomputed gates A_log and dt_bias are not read: passing them
    changes nothing (it raised AttributeError)."""
    rng = np.random.default_rng(2)
    g = rng.uniform(-1.0, -0.1, (2, HV)).astype(np.float32)
    beta = rng.uniform(0.1, 0.9, (2, HV)).astype(np.float32)
    outs = []
    for weights in ({}, dict(A_log=np.ones(HV, np.float32), dt_bias=np.ones(HV, np.float32))):
        out = np.zeros((2, HV, V), np.float32)
        kwargs = dict(a=g, b=beta, out=out, gate_mode="precomputed")
        kwargs.update(weights if weights else dict(A_log=None, dt_bias=None))
        call(**kwargs)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_missing_state_is_named():
    with pytest.raises(ValueError, match="initial_state is needed"):
        call(initial_state=None)


def test_outputs_that_share_memory_are_refused():
    """A tensor the call writes that shares memory with another of its
    tensors is refused by rssm before anything runs (rssm.h, docs/engines.md),
    naming both by the entry's argument names: out as a view of the
    checkpoint of a slot outside the batch (slot 3 is left as it was), out
    over v in mixed_qkv, overflow inside out, a ring inside the checkpoints
    of the fold."""
    args = call_args()
    state = args["initial_state"]
    state[3] = 1.0
    out = state[3].reshape(-1)[:2 * HV * V].reshape(2, HV, V)
    with pytest.raises(rssm.Error, match=r"layer run: initial_state and out overlap") as e:
        call(initial_state=state, out=out)
    assert e.value.status_name == "invalid argument"
    assert np.all(state[3] == 1.0)
    qkv = args["mixed_qkv"]
    with pytest.raises(rssm.Error, match=r"v \(mixed_qkv\) and out overlap"):
        call(mixed_qkv=qkv, out=qkv[:, 2 * H * K:])
    out = np.zeros((2, HV, V), np.float32)
    with pytest.raises(rssm.Error, match=r"out and overflow overlap"):
        call(out=out, overflow=out.reshape(-1).view(np.int32)[:2])
    n_state, n_ring = SLOTS * HV * V * K, SLOTS * HV * L * V
    flat = np.zeros(n_state + n_ring, np.float32)
    ring_d = flat[n_state - (L - 1) * V:][:n_ring].reshape(SLOTS, HV, L, V)  # head 0 of slot 0 on the last state head
    with pytest.raises(rssm.Error, match=r"layer materialise: initial_state and d_cache overlap"):
        rssm.materialise(flat[:n_state].reshape(SLOTS, HV, V, K), ring_d, args["k_cache"], args["g_cache"],
                         np.array([0], np.int32), np.array([1], np.int32))


def test_one_array_as_both_rings_is_refused():
    """With H = HV and K = V, d_cache and k_cache have one shape: the same
    array passed as both would have k entries written over d entries."""
    h, k = 2, 8
    rng = np.random.default_rng(5)
    ring = np.zeros((SLOTS, h, L, k), np.float32)
    with pytest.raises(rssm.Error, match=r"d_cache and k_cache overlap"):
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            rng.uniform(-1, 1, (2, 3 * h * k)).astype(np.float32), np.zeros((2, h), np.float32),
            np.zeros((2, h), np.float32), np.zeros(h, np.float32), np.zeros(h, np.float32), None,
            np.zeros((SLOTS, h, k, k), np.float32), ring, ring, np.zeros((SLOTS, h, L), np.float32),
            np.zeros((2, h, k), np.float32), np.array([0, 1], np.int32), np.array([1, 1], np.int32))


def test_a_paged_pool_is_taken():
    """State and rings side by side in one page per slot (the layout of a
    paged allocator) share no byte: taken, and decoded to the same bits as
    the same pool in arrays of their own."""
    args = call_args()
    rng = np.random.default_rng(9)
    parts = {n: args[n] for n in ("initial_state", "d_cache", "k_cache", "g_cache")}
    for x in parts.values():
        x[...] = rng.uniform(-0.5, 0.5, x.shape)
    parts["g_cache"] -= 0.6
    sizes = [x[0].size for x in parts.values()]
    page = sum(sizes) + 4  # floats; a few between pages too
    flat = np.zeros(page * SLOTS, np.float32)
    paged, at = {}, 0
    for (n, x), size in zip(parts.items(), sizes):
        view = np.lib.stride_tricks.as_strided(flat[at:], x.shape, (page * 4, *x.strides[1:]))
        view[...] = x
        paged[n], at = view, at + size
    write_pos = np.array([1, 0], np.int32)
    out_apart, out_paged = np.zeros((2, HV, V), np.float32), np.zeros((2, HV, V), np.float32)
    call(**parts, out=out_apart, write_pos=write_pos)
    call(**paged, out=out_paged, write_pos=write_pos)
    np.testing.assert_array_equal(out_paged, out_apart)
    for n in parts:
        np.testing.assert_array_equal(paged[n], parts[n])


@pytest.mark.parametrize("field, value, message", [
    ("slots", 2**32 + 8, r"LayerDesc.slots = 4294967304: must be in 0..4294967295 \(rssm_layer_desc's uint32\)"),
    ("ring_len", 2**32 + 2, r"LayerDesc.ring_len = 4294967298: must be in 0..4294967295"),
    ("head_k", -4, r"LayerDesc.head_k = -4: must be in 0..4294967295"),
    ("max_rows", 1.5, r"LayerDesc.max_rows = 1.5: expected an integer"),
    ("state_slot_stride", 2**64, r"LayerDesc.state_slot_stride = 18446744073709551616: must be in "
                                 r"-9223372036854775808..9223372036854775807 \(rssm_layer_desc's int64\)"),
    ("q_scale", 1e39, r"LayerDesc.q_scale = 1e\+39 does not fit a C float"),
    ("gate_lower_bound", "-5", r"LayerDesc.gate_lower_bound = '-5': expected a number"),
])
def test_desc_numbers_that_would_wrap_are_refused(field, value, message):
    """ctypes stores an int modulo 2**bits and a float past float32 as
    infinity: a LayerDesc whose C description would differ is refused,
    naming the field and its range."""
    base = dict(num_qk_heads=1, num_v_heads=1, head_k=4, head_v=4, slots=8, max_rows=1)
    with pytest.raises((ValueError, TypeError), match=message):
        rssm.LayerDesc(**{**base, field: value})
    # the flags are C ints: any truth value is 0 or 1 there, never a wrapped 0
    c = rssm.LayerDesc(**base, replay=2**32, qk_l2norm=2**32).to_c()
    assert (c.model.replay, c.model.qk_l2norm, c.slots) == (1, 1, 8)


@pytest.mark.parametrize("over, exc, match", [
    (dict(ring_len=-(2**32) + 2), ValueError, r"ring_len = -4294967294: must be in 0..4294967295"),
    (dict(max_rows=2**32 + 1), ValueError, r"max_rows = 4294967297: must be in 0..4294967295"),
    (dict(scale="x"), TypeError, r"scale = 'x': expected a number"),
    (dict(gate_lower_bound=[1]), TypeError, r"gate_lower_bound = \[1\]: expected a number"),
    (dict(ring_len="3"), TypeError, r"ring_len = '3': expected an integer"),
    (dict(mixed_qkv=np.zeros((2, 48), object)), TypeError,
     r"mixed_qkv: element type '\|O' is not one rssm takes \(an array of numbers, not of Python objects\)"),
])
def test_entry_numbers_and_element_types_are_named(over, exc, match):
    """The entry's numbers are checked against the C fields they become (a
    ring_len of 2 - 2**32 ran as a ring of 2), and an array of Python
    objects is named."""
    with pytest.raises(exc, match=match):
        call(**over)
    assert rssm_layer.cached_layers() == []


def test_integral_float_counts_are_taken_as_before():
    call(ring_len=3.0, max_rows=4.0)
