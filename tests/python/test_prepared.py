"""The prepared calls of rssm._prepared: a repeated call skips the checks,
and yet any change to what C would read (an address, a shape, strides, a
dtype, an argument) misses or is checked again; the cache keeps no array
alive, forgets a call whose arrays died (before their ids can be reused)
and stays bounded."""

import gc
import warnings
import weakref

import numpy as np
import pytest

import rssm
from rssm import _lib, _prepared
from rssm import layer as rssm_layer
from test_decode import Engine


def step_args(e: Engine, B: int):
    """One step's arguments for fused_recurrent_gated_delta_rule_replayssm
    (rows on slots 0..B-1, write_pos from the engine's cursors), and the
    output expected of them (the reference advances: run the step)."""
    idx = np.arange(B, dtype=np.int32)
    mixed_qkv, a, b = e.inputs(B)
    expect = e.reference(mixed_qkv, a, b, idx)
    write_pos = e.cursor[idx].astype(np.int32)
    out = np.full((B, e.HV, e.V), 7.0, np.float32)
    return [mixed_qkv, a, b, e.A_log, e.dt_bias, None, e.state, e.d_cache, e.k_cache, e.g_cache, out, idx,
            write_pos], expect


def run_step(e: Engine, args, expect, **kw):
    rssm.fused_recurrent_gated_delta_rule_replayssm(*args, gate_kind=e.gate_kind, **kw)
    rssm.advance(e.cursor, args[11], args[12], ring_len=e.L)
    e.check_out(args[10].reshape(expect.shape), expect)
    e.check_encoded_state()


class CountingRun:
    """Stands in for rssm_layer_run, counting the calls that reach C."""

    def __init__(self):
        self.lib = _lib.lib()
        self.real = self.lib.rssm_layer_run
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        return self.real(*args)

    def __enter__(self):
        self.lib.rssm_layer_run = self
        return self

    def __exit__(self, *exc):
        self.lib.rssm_layer_run = self.real


def test_repeated_call_is_prepared_and_right():
    rng = np.random.default_rng(40)
    e = Engine(rng)
    args, expect = step_args(e, 3)
    run_step(e, args, expect)
    assert len(_prepared.calls) == 1 and len(_prepared.plans) == 1
    with CountingRun() as c:
        for _ in range(2 * e.L):
            # New values in the same arrays, as an engine's static buffers get them.
            mixed_qkv, a, b = e.inputs(3)
            args[0][...], args[1][...], args[2][...] = mixed_qkv, a, b
            args[12][...] = e.cursor[args[11]]
            expect = e.reference(mixed_qkv, a, b, args[11])
            run_step(e, args, expect)
    assert c.calls == 2 * e.L
    assert len(_prepared.calls) == 1 and len(_prepared.plans) == 1


def test_new_array_objects_reuse_the_plan():
    rng = np.random.default_rng(41)
    e = Engine(rng)
    for _ in range(2 * e.L):
        args, expect = step_args(e, 3)
        run_step(e, args, expect)
    assert len(_prepared.plans) == 1 and len(rssm_layer.cached_layers()) == 1


def test_changes_under_the_same_objects_are_seen():
    """In-place changes of an array's dtype, shape or strides: the call is
    checked again (an error where the change makes it wrong, the right
    result where it does not)."""
    rng = np.random.default_rng(42)
    e = Engine(rng)
    args, expect = step_args(e, 2)
    run_step(e, args, expect)
    out = args[10]
    out.dtype = np.int32                        # same bytes, another dtype
    with pytest.raises(TypeError, match="out is int32, expected fp32"):
        rssm.fused_recurrent_gated_delta_rule_replayssm(*args)
    out.dtype = np.float32
    out.shape = (2, e.HV * e.V)                 # the other shape out may have
    args[12][...] = e.cursor[args[11]]
    run_step(e, args, expect=e.reference(args[0], args[1], args[2], args[11]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # NumPy >= 2.4 deprecates setting strides
        args[0].strides = (0, args[0].strides[1])             # every row reads row 0
    with pytest.raises(ValueError, match="stride 0"):
        rssm.fused_recurrent_gated_delta_rule_replayssm(*args)


def test_other_arguments_are_part_of_the_key():
    rng = np.random.default_rng(43)
    e = Engine(rng)
    args, expect = step_args(e, 2)
    run_step(e, args, expect)
    args[12][...] = e.cursor[args[11]]
    expect = e.reference(args[0], args[1], args[2], args[11], scale=0.25)
    args[5] = 0.25
    run_step(e, args, expect)
    assert len(_prepared.calls) == 2
    with pytest.raises(ValueError, match="gate_kind 'mamba'"):
        rssm.fused_recurrent_gated_delta_rule_replayssm(*args, gate_kind="mamba")
    # A scale that can change in place (a 0-d array) is read on every call.
    args[5] = np.array(0.25)
    for scale in (0.25, 0.5):
        args[5][()] = scale
        args[12][...] = e.cursor[args[11]]
        run_step(e, args, e.reference(args[0], args[1], args[2], args[11], scale=scale))


def test_dead_arrays_drop_their_call_and_are_not_kept():
    """A call holds its arrays weakly and leaves the cache when one dies:
    before the id can name another object. A new array that gets a dead
    one's id is read afresh (its own memory, its own result)."""
    rng = np.random.default_rng(44)
    e = Engine(rng)
    dead, reused = set(), 0
    for _ in range(20):
        args, expect = step_args(e, 3)
        step_arrays = [x for i, x in enumerate(args) if i in (0, 1, 2, 10, 11, 12)]
        reused += any(id(x) in dead for x in step_arrays)
        run_step(e, args, expect)
        assert len(_prepared.calls) == 1
        refs = [weakref.ref(x) for x in step_arrays]
        dead = {id(x) for x in step_arrays}
        del args, step_arrays
        gc.collect()
        assert all(r() is None for r in refs), "the cache keeps no array alive"
        assert len(_prepared.calls) == 0, "the call of a dead array is gone"
    # CPython hands a freed object's memory to the next object of its size:
    # the loop met reused ids, and each call was right.
    assert reused > 0


def test_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(_prepared, "MAX_CALLS", 8)
    rng = np.random.default_rng(45)
    e = Engine(rng)
    kept = []
    for _ in range(20):
        args, expect = step_args(e, 2)
        run_step(e, args, expect)
        kept.append(args)   # all alive: only the bound empties the cache
        assert len(_prepared.calls) <= 8


def test_conversions_are_planned_but_not_kept():
    """fp16 gates and int64 indices are copied on every call: the plan is
    reused, no call is kept (its copies would be stale)."""
    rng = np.random.default_rng(46)
    e = Engine(rng)
    args, expect = step_args(e, 3)
    run_step(e, args, expect)
    args[11] = args[11].astype(np.int64)
    for _ in range(2 * e.L):
        mixed_qkv, a, b = e.inputs(3)
        args[0][...] = mixed_qkv
        args[1], args[2] = a.astype(np.float16), b.astype(np.float16)
        args[12][...] = e.cursor[args[11]]
        run_step(e, args, e.reference(mixed_qkv, args[1], args[2], args[11]))
    # Two descriptions (int32 and int64 indices); no call kept: the first
    # one's a and b died, and the converted ones are never kept.
    assert len(_prepared.plans) == 2 and len(_prepared.calls) == 0


def test_misaligned_address_on_a_planned_description():
    """The plan holds the checks of a description; an address is checked
    on every call (here one byte off, on the same shapes and strides)."""
    rng = np.random.default_rng(47)
    e = Engine(rng)
    args, expect = step_args(e, 2)
    run_step(e, args, expect)
    raw = np.zeros(args[10].nbytes + 4, np.uint8)
    args[10] = raw[1:1 + args[10].nbytes].view(np.float32).reshape(args[10].shape)
    assert args[10].ctypes.data % 4
    with pytest.raises(ValueError, match="out: its address 0x[0-9a-f]+ is not a multiple of its element size"):
        rssm.fused_recurrent_gated_delta_rule_replayssm(*args)


def test_clear_cache_forgets_prepared_calls():
    rng = np.random.default_rng(48)
    e = Engine(rng)
    args, expect = step_args(e, 2)
    run_step(e, args, expect)
    rssm.clear_cache()
    assert not _prepared.calls and not _prepared.plans and not rssm_layer.cached_layers()
    args[12][...] = e.cursor[args[11]]
    run_step(e, args, e.reference(args[0], args[1], args[2], args[11]))
