"""torch tensors: the custom ops rssm::replayssm_decode / replayssm_materialise
/ replayssm_advance (opcheck, torch.compile, what torch's modes and profiler
see), eager calls that go to C directly, bf16, and where a GPU and a CUDA
build are there (RSSM_LIBRARY), the cuda backend and CUDA graph capture.
Skipped without torch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rssm  # noqa: E402
from rssm_reference import prepare_qk, raw_gates, step  # noqa: E402
from test_decode import Engine  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and any(n.startswith("cuda") for n in rssm.backend_names())
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="needs a GPU and librssm.so built with CUDA (RSSM_LIBRARY)")


def as_torch(e: Engine):
    """The engine's NumPy arrays as torch tensors on the same memory."""
    t = torch.from_numpy
    return dict(A_log=t(e.A_log), dt_bias=t(e.dt_bias), initial_state=t(e.state), d_cache=t(e.d_cache),
                k_cache=t(e.k_cache), g_cache=t(e.g_cache))


def decode_args(e, tensors, mixed_qkv, a, b, idx, write_pos, force, out):
    return (mixed_qkv, a, b, tensors["A_log"], tensors["dt_bias"], None, tensors["initial_state"],
            tensors["d_cache"], tensors["k_cache"], tensors["g_cache"], out, idx, write_pos, force)


def kept_calls() -> int:
    """Calls kept for the same tensors: rssm._prepared's on the Python path,
    the compiled extension's plans where it is loaded (rssm.torch_ext)."""
    from rssm import _prepared, _torch_ops
    if _torch_ops.compiled:
        from rssm import torch_ext
        return torch_ext.counts()["decode"]
    return len(_prepared.calls)


def test_ops_registered():
    assert rssm.register_torch_ops()
    for name in ("replayssm_decode", "replayssm_materialise", "replayssm_advance"):
        assert hasattr(torch.ops.rssm, name), name


@pytest.mark.parametrize("gate_kind", ["gdn", "kda"])
def test_cpu_tensors(gate_kind):
    rng = np.random.default_rng(20)
    e = Engine(rng, gate_kind=gate_kind)
    t = as_torch(e)
    cursor = torch.from_numpy(e.cursor)
    for it in range(2 * e.L + 1):
        B = 3
        idx = rng.choice(e.slots, B, replace=False).astype(np.int32)
        mixed_qkv, a, b = e.inputs(B)
        expect = e.reference(mixed_qkv, a, b, idx)
        write_pos = torch.from_numpy(e.cursor[idx].copy())
        force = torch.from_numpy(rng.random(B) < 0.2)  # bool: converted to int32
        out = torch.empty(B, e.HV, e.V)
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            *decode_args(e, t, torch.from_numpy(mixed_qkv), torch.from_numpy(a), torch.from_numpy(b),
                         torch.from_numpy(idx), write_pos, force, out), gate_kind=gate_kind)
        rssm.advance(cursor, torch.from_numpy(idx), write_pos, force, ring_len=e.L)
        e.check_out(out.numpy(), expect)
        e.check_encoded_state()


def test_opcheck():
    """torch's own check of the op's schema, fake implementation and
    declared mutations. No row flushes, so repeated runs agree."""
    rng = np.random.default_rng(21)
    e = Engine(rng)
    t = as_torch(e)
    for r in e.d_cache, e.k_cache, e.g_cache:
        r[...] = 0.0  # opcheck compares whole tensors: no NaN
    mixed_qkv, a, b = e.inputs(2)
    idx = torch.tensor([1, 3], dtype=torch.int32)
    write_pos = torch.tensor([0, 1], dtype=torch.int32)
    args = (torch.from_numpy(mixed_qkv), torch.from_numpy(a), torch.from_numpy(b), t["A_log"], t["dt_bias"],
            t["initial_state"], t["d_cache"], t["k_cache"], t["g_cache"], torch.empty(2, e.HV, e.V), idx, write_pos,
            None, None, 0.0, "gdn", "raw", 0.0, True, 0, 0, "", "out_of_range")
    torch.library.opcheck(torch.ops.rssm.replayssm_decode.default, args)


def test_opcheck_materialise():
    rng = np.random.default_rng(28)
    e = Engine(rng)
    t = as_torch(e)
    for r in e.d_cache, e.k_cache, e.g_cache:
        r[...] = rng.uniform(-0.5, 0.5, r.shape)
    args = (t["initial_state"], t["d_cache"], t["k_cache"], t["g_cache"], torch.tensor([2, -1, 0], dtype=torch.int32),
            torch.tensor([3, 0, 1], dtype=torch.int32), "gdn", 0, 0, "", "nonpositive")  # row 2 (slot 0) pads
    torch.library.opcheck(torch.ops.rssm.replayssm_materialise.default, args)


def test_materialise_through_the_op():
    """The op on CPU tensors gives what the NumPy path gives, bit for bit."""
    rng = np.random.default_rng(29)
    e = Engine(rng, gate_kind="kda")
    for r in e.d_cache, e.k_cache, e.g_cache:
        r[...] = rng.uniform(-0.5, 0.5, r.shape)
    e.g_cache[...] = -np.abs(e.g_cache)
    state = e.state.copy()
    rows, write_pos = np.array([3, 1], np.int32), np.array([2, 3], np.int32)
    rssm.materialise(state, e.d_cache, e.k_cache, e.g_cache, rows, write_pos, gate_kind="kda")
    t = as_torch(e)
    got = rssm.materialise(t["initial_state"], t["d_cache"], t["k_cache"], t["g_cache"], torch.from_numpy(rows),
                           torch.from_numpy(write_pos).long(), gate_kind="kda")
    assert got is t["initial_state"]
    np.testing.assert_array_equal(e.state, state)


def static_step(e, t, B, rng):
    """An engine step on static CPU tensors (new values copied in), through
    the entry; checked against the reference."""
    mixed_qkv, a, b = e.inputs(B)
    expect = e.reference(mixed_qkv, a, b, t["idx"].numpy())
    for n, x in (("mixed", mixed_qkv), ("a", a), ("b", b)):
        t[n].copy_(torch.from_numpy(x))
    t["write_pos"].copy_(torch.from_numpy(e.cursor)[t["idx"].long()])
    rssm.fused_recurrent_gated_delta_rule_replayssm(
        t["mixed"], t["a"], t["b"], t["A_log"], t["dt_bias"], None, t["initial_state"], t["d_cache"], t["k_cache"],
        t["g_cache"], t["out"], t["idx"], t["write_pos"])
    rssm.advance(torch.from_numpy(e.cursor), t["idx"], t["write_pos"], ring_len=e.L)
    e.check_out(t["out"].numpy().reshape(expect.shape), expect)


def test_repeated_eager_calls_and_changed_tensors():
    """The same tensors every step go to C from a prepared call after the
    first; set_() and resize_() under the same tensor objects are seen: the
    call is made (and checked) afresh."""
    rssm.clear_cache()
    rng = np.random.default_rng(30)
    e = Engine(rng)
    B = 3
    t = as_torch(e)
    t.update(mixed=torch.zeros(B, 2 * e.H * e.K + e.HV * e.V), a=torch.zeros(B, e.HV), b=torch.zeros(B, e.HV),
             out=torch.zeros(B, e.HV, e.V), idx=torch.tensor([4, 0, 2], dtype=torch.int32),
             write_pos=torch.zeros(B, dtype=torch.int32))
    for _ in range(2 * e.L):
        static_step(e, t, B, rng)
    assert kept_calls() == 1
    t["out"].set_(torch.zeros(B, e.HV, e.V))        # new memory under the same object
    static_step(e, t, B, rng)
    t["out"].resize_(B, e.HV * e.V)                 # a shape out may also have
    static_step(e, t, B, rng)
    t["out"].set_(torch.zeros(B, e.HV * e.V + 1))
    with pytest.raises(ValueError, match=r"out has shape \[3, 33\]"):
        static_step(e, t, B, rng)


def test_torch_sees_calls_under_its_modes_and_profiler():
    """A dispatch mode and the profiler see the op on every call, repeated
    ones too: rssm skips the op only where nothing in torch would see it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    rng = np.random.default_rng(31)
    e = Engine(rng)
    B = 2
    t = as_torch(e)
    t.update(mixed=torch.zeros(B, 2 * e.H * e.K + e.HV * e.V), a=torch.zeros(B, e.HV), b=torch.zeros(B, e.HV),
             out=torch.zeros(B, e.HV, e.V), idx=torch.tensor([1, 3], dtype=torch.int32),
             write_pos=torch.zeros(B, dtype=torch.int32))
    static_step(e, t, B, rng)
    static_step(e, t, B, rng)                       # prepared now
    with Seen() as seen:
        static_step(e, t, B, rng)
    assert "rssm.replayssm_decode.default" in seen.ops
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        static_step(e, t, B, rng)
    assert any(ev.name == "rssm::replayssm_decode" for ev in prof.events())


def test_torch_compile_fullgraph():
    rng = np.random.default_rng(22)
    e1, e2 = Engine(np.random.default_rng(5)), Engine(np.random.default_rng(5))
    t1, t2 = as_torch(e1), as_torch(e2)

    def one_step(t, cursor, mixed_qkv, a, b, idx, force, out):
        write_pos = cursor[idx.long()]
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed_qkv, a, b, t["A_log"], t["dt_bias"], None, t["initial_state"], t["d_cache"], t["k_cache"],
            t["g_cache"], out, idx, write_pos, force)
        rssm.advance(cursor, idx, write_pos, force, ring_len=4)
        return out * 2.0  # something for the graph to do with the result

    compiled = torch.compile(one_step, backend="aot_eager", fullgraph=True)
    c1, c2 = torch.from_numpy(e1.cursor), torch.from_numpy(e2.cursor)
    for it in range(6):
        mixed_qkv, a, b = (torch.from_numpy(x) for x in e1.inputs(3))
        idx = torch.from_numpy(rng.choice(e1.slots, 3, replace=False).astype(np.int32))
        force = torch.from_numpy((rng.random(3) < 0.3).astype(np.int32))
        o1 = one_step(t1, c1, mixed_qkv, a, b, idx, force, torch.empty(3, 4, 8))
        o2 = compiled(t2, c2, mixed_qkv, a, b, idx, force, torch.empty(3, 4, 8))
        torch.testing.assert_close(o1, o2, rtol=0, atol=0)
        assert torch.equal(c1, c2)
    np.testing.assert_array_equal(e1.state, e2.state)


def io16_step_check(device, backend, io=torch.bfloat16):
    """16-bit io, fp16 ring: the op against the float64 reference of the
    same 16-bit values. bf16 io with a bf16 state and bf16 a and b; fp16 io
    (vLLM's fp16 activations) with an fp32 state and fp16 a and b, which
    rssm converts to fp32 (the C API's gate dtypes: fp32, bf16), held to the
    fp16 ring's tolerance plus an fp16 output's rounding (2**-11)."""
    rng = np.random.default_rng(23)
    H, HV, K, V, slots, L, B = 2, 4, 32, 32, 4, 4, 3  # a shape every CUDA kernel family takes
    dev = torch.device(device)
    tol = 2e-2 if io == torch.bfloat16 else 4e-3 + 2.0**-11
    state = torch.from_numpy(rng.uniform(-0.05, 0.05, (slots, HV, V, K)).astype(np.float32))
    state = state.to(torch.bfloat16 if io == torch.bfloat16 else torch.float32)
    ref = state.double().numpy()
    state = state.to(dev)
    d_cache = torch.zeros(slots, HV, L, V, dtype=torch.float16, device=dev)
    k_cache = torch.zeros(slots, H, L, K, dtype=torch.float16, device=dev)
    g_cache = torch.zeros(slots, HV, L, device=dev)
    A_log = torch.from_numpy(rng.uniform(-1, 0.5, HV).astype(np.float32))
    dt_bias = torch.from_numpy(rng.uniform(-0.5, 0.5, HV).astype(np.float32))
    cursor = torch.zeros(slots, dtype=torch.int32, device=dev)
    for it in range(2 * L):
        mixed = torch.from_numpy(rng.uniform(-1, 1, (B, 2 * H * K + HV * V)).astype(np.float32)).to(io)
        a = torch.from_numpy(rng.uniform(-3, 3, (B, HV)).astype(np.float32)).to(io)  # gates in the io dtype
        b = torch.from_numpy(rng.uniform(-3, 3, (B, HV)).astype(np.float32)).to(io)
        idx = torch.from_numpy(rng.choice(slots, B, replace=False).astype(np.int32))
        out = torch.empty(B, HV, V, dtype=io, device=dev)
        write_pos = cursor.cpu()[idx.long()].to(dev)
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed.to(dev), a.to(dev), b.to(dev), A_log.to(dev), dt_bias.to(dev), None, state, d_cache, k_cache,
            g_cache, out, idx.to(dev), write_pos, None, backend=backend)
        rssm.advance(cursor, idx.to(dev), write_pos, ring_len=L, backend=backend)
        m = mixed.double().numpy()
        q, k = prepare_qk(m[:, :H * K].reshape(B, H, K), m[:, H * K:2 * H * K].reshape(B, H, K))
        g, beta = raw_gates(a.float().numpy(), b.float().numpy(), A_log.numpy(), dt_bias.numpy(), False)
        for r in range(B):
            o = step(ref[int(idx[r])], q[r], k[r], m[r, 2 * H * K:].reshape(HV, V), g[r], beta[r])
            np.testing.assert_allclose(out[r].double().cpu().numpy(), o, rtol=tol, atol=tol * np.abs(o).max())


def test_bf16_cpu():
    io16_step_check("cpu", None)


@needs_cuda
def test_bf16_cuda():
    io16_step_check("cuda", None)


def test_fp16_cpu():
    io16_step_check("cpu", None, torch.float16)


@needs_cuda
@pytest.mark.parametrize("backend", [n for n in rssm.backend_names() if n.startswith("cuda")] if HAVE_CUDA else [])
def test_fp16_cuda(backend):
    io16_step_check("cuda", backend, torch.float16)


CUDA_BACKENDS = [n for n in rssm.backend_names() if n.startswith("cuda")] if HAVE_CUDA else []


@needs_cuda
@pytest.mark.parametrize("B", [5, 40])
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
@pytest.mark.parametrize("gate_kind", ["gdn", "kda"])
def test_cuda_matches_reference(gate_kind, backend, B):
    """Every CUDA kernel family, a small and a larger batch (40 rows of 8
    value heads: more (row, head) units than SMs), on strided tensors: the
    state and rings every other slot of a larger pool, mixed_qkv a window of
    a wider buffer (16-byte aligned, as the CUDA kernels need)."""
    rng = np.random.default_rng(24)
    slots = 48
    dev = torch.device("cuda")
    H, HV, K, V, L = 4, 8, 64, 32, 6
    e = Engine(rng, gate_kind=gate_kind, H=H, HV=HV, K=K, V=V, slots=slots, L=L)
    for r in e.d_cache, e.k_cache, e.g_cache:
        r[...] = 0.0
    big = lambda x: torch.zeros((2 * x.shape[0],) + x.shape[1:], dtype=x.dtype, device=dev)  # noqa: E731
    t = {n: x.to(dev) for n, x in as_torch(e).items()}
    for n in ("initial_state", "d_cache", "k_cache", "g_cache"):
        pool = big(t[n])
        pool[1::2] = t[n]
        t[n] = pool[1::2]
    cursor = torch.zeros(slots, dtype=torch.int32, device=dev)
    width = 2 * H * K + HV * V
    for it in range(3 * L):
        idx = rng.choice(slots, B, replace=False).astype(np.int32)
        idx[2] = -1
        buf = torch.zeros(B, width + 8, device=dev)
        mixed_qkv, a, b = e.inputs(B)
        buf[:, 4:4 + width] = torch.from_numpy(mixed_qkv).to(dev)
        expect = e.reference(mixed_qkv, a, b, idx)
        write_pos = cursor[torch.from_numpy(np.maximum(idx, 0)).long().to(dev)]
        force = torch.from_numpy((rng.random(B) < 0.2).astype(np.int32)).to(dev)
        out = torch.full((B, HV, V), 7.0, device=dev)
        idx_d = torch.from_numpy(idx).to(dev)
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            *decode_args(e, t, buf[:, 4:4 + width], torch.from_numpy(a).to(dev), torch.from_numpy(b).to(dev),
                         idx_d, write_pos, force, out), gate_kind=gate_kind, backend=backend)
        rssm.advance(cursor, idx_d, write_pos, force, ring_len=L, backend=backend)
        e.check_out(out.cpu().numpy(), expect)
    # every slot flushed: the checkpoints are the true states
    state_before = t["initial_state"].clone()
    for first in range(0, slots, B):
        rows = np.arange(first, min(first + B, slots), dtype=np.int32)
        idx_d = torch.from_numpy(rows).to(dev)
        mixed_qkv, a, b = e.inputs(len(rows))
        expect = e.reference(mixed_qkv, a, b, rows)
        out = torch.empty(len(rows), HV, V, device=dev)
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            *decode_args(e, t, torch.from_numpy(mixed_qkv).to(dev), torch.from_numpy(a).to(dev),
                         torch.from_numpy(b).to(dev), idx_d, cursor[idx_d.long()],
                         torch.ones(len(rows), device=dev, dtype=torch.int32), out),
            gate_kind=gate_kind, backend=backend)
        e.check_out(out.cpu().numpy(), expect)
    assert not torch.equal(state_before, t["initial_state"])
    np.testing.assert_allclose(t["initial_state"].cpu().numpy(), e.ref, rtol=1e-4, atol=1e-4 * np.abs(e.ref).max())


def twin_engines(seed, dev):
    """Two engines from the same seed, rings empty, and their tensors on
    `dev`: one for a captured graph, one for the eager steps it must match."""
    eg, ee = Engine(np.random.default_rng(seed), slots=4, L=4), Engine(np.random.default_rng(seed), slots=4, L=4)
    for e in eg, ee:
        for r in e.d_cache, e.k_cache, e.g_cache:
            r[...] = 0.0
    return eg, ee, {n: x.to(dev) for n, x in as_torch(eg).items()}, {n: x.to(dev) for n, x in as_torch(ee).items()}


@needs_cuda
def test_cuda_graph_capture_and_replay():
    """One step captured in a CUDA graph (decode + advance), replayed with new
    inputs copied into the static tensors, against the same steps run eagerly."""
    rng = np.random.default_rng(25)
    dev = torch.device("cuda")
    eg, ee, tg, te = twin_engines(9, dev)
    B = 3
    static = dict(mixed=torch.zeros(B, 2 * 2 * 16 + 4 * 8, device=dev), a=torch.zeros(B, 4, device=dev),
                  b=torch.zeros(B, 4, device=dev), idx=torch.zeros(B, dtype=torch.int32, device=dev),
                  force=torch.zeros(B, dtype=torch.int32, device=dev), out=torch.zeros(B, 4, 8, device=dev))
    cursor_g = torch.zeros(4, dtype=torch.int32, device=dev)
    cursor_e = cursor_g.clone()

    def step_fn(t, cursor, mixed, a, b, idx, force, out):
        write_pos = cursor[idx.long()]
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed, a, b, t["A_log"], t["dt_bias"], None, t["initial_state"], t["d_cache"], t["k_cache"],
            t["g_cache"], out, idx, write_pos, force)
        rssm.advance(cursor, idx, write_pos, force, ring_len=4)

    # Warm up on a side stream (creates the layer objects), as torch asks before capture.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        scratch = {n: x.clone() for n, x in tg.items()}
        step_fn(scratch, cursor_g.clone(), static["mixed"], static["a"], static["b"], static["idx"],
                static["force"], static["out"])
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step_fn(tg, cursor_g, static["mixed"], static["a"], static["b"], static["idx"], static["force"],
                static["out"])
    for it in range(10):
        mixed, a, b = (torch.from_numpy(x).to(dev) for x in eg.inputs(B))
        idx = torch.from_numpy(rng.choice(4, B, replace=False).astype(np.int32)).to(dev)
        force = torch.from_numpy((rng.random(B) < 0.3).astype(np.int32)).to(dev)
        for n, x in (("mixed", mixed), ("a", a), ("b", b), ("idx", idx), ("force", force)):
            static[n].copy_(x)
        graph.replay()
        out_e = torch.empty(B, 4, 8, device=dev)
        step_fn(te, cursor_e, mixed, a, b, idx, force, out_e)
        torch.cuda.synchronize()
        torch.testing.assert_close(static["out"], out_e, rtol=0, atol=0)
        assert torch.equal(cursor_g, cursor_e)
    torch.testing.assert_close(tg["initial_state"], te["initial_state"], rtol=0, atol=0)


@needs_cuda
def test_capture_of_a_prepared_call():
    """Every tensor static, so the call is prepared before the capture and
    goes to C directly inside it: on the capture stream, so the graph holds
    the launch; replays match eager steps bit for bit. (Warm-up calls append
    ring entry 0 and flush nothing: the replays start from the same state.)"""
    rssm.clear_cache()
    dev = torch.device("cuda")
    eg, ee, tg, te = twin_engines(12, dev)
    B = 3
    static = dict(mixed=torch.zeros(B, 2 * 2 * 16 + 4 * 8, device=dev), a=torch.zeros(B, 4, device=dev),
                  b=torch.zeros(B, 4, device=dev), idx=torch.tensor([2, 0, 3], dtype=torch.int32, device=dev),
                  write_pos=torch.zeros(B, dtype=torch.int32, device=dev), out=torch.zeros(B, 4, 8, device=dev))

    def layer(t, mixed, a, b, idx, write_pos, out):
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed, a, b, t["A_log"], t["dt_bias"], None, t["initial_state"], t["d_cache"], t["k_cache"],
            t["g_cache"], out, idx, write_pos)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # the second call is the prepared one
            layer(tg, static["mixed"], static["a"], static["b"], static["idx"], static["write_pos"], static["out"])
    torch.cuda.current_stream().wait_stream(s)
    assert kept_calls() == 1
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer(tg, static["mixed"], static["a"], static["b"], static["idx"], static["write_pos"], static["out"])
    cursor = np.zeros(4, np.int32)
    for it in range(6):
        mixed, a, b = (torch.from_numpy(x).to(dev) for x in eg.inputs(B))
        write_pos = torch.from_numpy(cursor[[2, 0, 3]]).to(dev)
        for n, x in (("mixed", mixed), ("a", a), ("b", b), ("write_pos", write_pos)):
            static[n].copy_(x)
        graph.replay()
        out_e = torch.empty(B, 4, 8, device=dev)
        layer(te, mixed, a, b, static["idx"].clone(), write_pos, out_e)
        torch.cuda.synchronize()
        torch.testing.assert_close(static["out"], out_e, rtol=0, atol=0)
        cursor[[2, 0, 3]] = np.where(cursor[[2, 0, 3]] == 3, 0, cursor[[2, 0, 3]] + 1)
    torch.testing.assert_close(tg["initial_state"], te["initial_state"], rtol=0, atol=0)


@needs_cuda
@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")
def test_capture_without_warm_up_is_refused():
    """A description's first call creates its layer object (device memory),
    which a capture forbids: rssm says so instead of breaking the capture."""
    rng = np.random.default_rng(26)
    e = Engine(rng, slots=4)
    dev = torch.device("cuda")
    t = {n: x.to(dev) for n, x in as_torch(e).items()}
    mixed_qkv, a, b = (torch.from_numpy(x).to(dev) for x in e.inputs(2))
    idx = torch.tensor([0, 1], dtype=torch.int32, device=dev)
    write_pos = torch.zeros(2, dtype=torch.int32, device=dev)
    out = torch.empty(2, e.HV, e.V, device=dev)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="during CUDA graph capture"):
        with torch.cuda.graph(graph):
            rssm.fused_recurrent_gated_delta_rule_replayssm(
                *decode_args(e, t, mixed_qkv, a, b, idx, write_pos, None, out))


def test_ops_registered_when_torch_comes_after_rssm():
    """rssm imported before torch: the first call with a torch tensor registers the ops."""
    import subprocess
    import sys
    code = "\n".join([
        "import sys; sys.path.insert(0, %r)" % str(__import__("pathlib").Path(__file__).parent),
        "import numpy as np, rssm",
        "assert 'torch' not in sys.modules",
        "import torch",
        "from test_decode import Engine",
        "e = Engine(np.random.default_rng(0))",
        "m, a, b = (torch.from_numpy(x) for x in e.inputs(1))",
        "t = lambda x: torch.from_numpy(x)",
        "rssm.fused_recurrent_gated_delta_rule_replayssm(m, a, b, t(e.A_log), t(e.dt_bias), None, t(e.state),"
        " t(e.d_cache), t(e.k_cache), t(e.g_cache), torch.empty(1, e.HV, e.V), torch.tensor([0], dtype=torch.int32),"
        " torch.tensor([0], dtype=torch.int32))",
        "assert hasattr(torch.ops.rssm, 'replayssm_decode')",
    ])
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_cuda
def test_torch_compile_inductor_cuda():
    """torch.compile with inductor, fullgraph, on CUDA tensors: the same as eager, bit for bit."""
    dev = torch.device("cuda")
    e1, e2 = Engine(np.random.default_rng(6)), Engine(np.random.default_rng(6))
    for e in e1, e2:
        for r in e.d_cache, e.k_cache, e.g_cache:
            r[...] = 0.0
    t1 = {n: x.to(dev) for n, x in as_torch(e1).items()}
    t2 = {n: x.to(dev) for n, x in as_torch(e2).items()}
    c1 = torch.zeros(e1.slots, dtype=torch.int32, device=dev)
    c2 = c1.clone()

    def one_step(t, cursor, mixed_qkv, a, b, idx, force, out):
        write_pos = cursor[idx.long()]
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed_qkv, a, b, t["A_log"], t["dt_bias"], None, t["initial_state"], t["d_cache"], t["k_cache"],
            t["g_cache"], out, idx, write_pos, force)
        rssm.advance(cursor, idx, write_pos, force, ring_len=4)
        return torch.nn.functional.silu(out)

    compiled = torch.compile(one_step, fullgraph=True)
    rng = np.random.default_rng(27)
    for it in range(8):
        mixed_qkv, a, b = (torch.from_numpy(x).to(dev) for x in e1.inputs(3))
        idx = torch.from_numpy(rng.choice(e1.slots, 3, replace=False).astype(np.int32)).to(dev)
        force = torch.from_numpy((rng.random(3) < 0.3).astype(np.int32)).to(dev)
        o1 = one_step(t1, c1, mixed_qkv, a, b, idx, force, torch.empty(3, 4, 8, device=dev))
        o2 = compiled(t2, c2, mixed_qkv, a, b, idx, force, torch.empty(3, 4, 8, device=dev))
        torch.testing.assert_close(o1, o2)
        assert torch.equal(c1, c2)
    torch.testing.assert_close(t1["initial_state"], t2["initial_state"], rtol=0, atol=0)
