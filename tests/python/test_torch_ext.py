"""The compiled torch extension (rssm.torch_ext): the C++ kernels of
rssm::replayssm_decode, replayssm_materialise and replayssm_advance against
the Python path (ctypes) bit for bit, the errors they
raise (the Python path's), the plans they keep per stream and forget with
rssm.clear_cache(), and the fallback when the extension is absent or off.

rssm builds the extension the first time it registers its torch ops under
a torch it has no build for (a C++ compiler and torch's headers; this
module's first test runs that build in a process of its own, from an empty
cache, and an op through it, with no build command first); the tests that
need it skip, saying why, where it is not loaded (no compiler). Skipped
without torch."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rssm  # noqa: E402
from rssm import _ext_build  # noqa: E402
from rssm import layer as rssm_layer  # noqa: E402
from rssm import replayssm  # noqa: E402
from test_decode import Engine  # noqa: E402
from test_torch import as_torch, needs_cuda  # noqa: E402

def in_subprocess(code: str, env: dict, **kw) -> subprocess.Popen:
    full = dict(os.environ, **env, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, "-c", code], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


# An op through the extension in a process that has no build of it: the
# CPU kernel registered (not the Python implementation), its plan kept and
# taken by the second call.
# A child process's first lines: this folder's helpers, torch before rssm.
CHILD = [
    "import sys; sys.path.insert(0, %r)" % str(Path(__file__).parent),
    "import numpy as np, torch, rssm",
    "from test_torch_ext import one_call_args, Engine",
]
FIRST_USE = "\n".join(CHILD + [
    "from rssm import torch_ext",
    "assert torch._C._dispatch_has_kernel_for_dispatch_key('rssm::replayssm_decode', 'CPU')",
    "e = Engine(np.random.default_rng(0))",
    "for _ in range(2):",
    "    rssm.fused_recurrent_gated_delta_rule_replayssm(**one_call_args(e))",
    "assert torch_ext.counts()['hits'] == 1, torch_ext.counts()",
    "print(rssm.torch_extension_status())",
])


@pytest.mark.skipif(_ext_build.compiler() is None, reason="no C++ compiler ($CXX, else c++) to build the extension")
def test_first_use_builds_and_loads(tmp_path: Path):
    """The extension without a build command: the first process under this
    torch builds it (one line on stderr, nothing else) and runs the op
    through it; the next loads that build and says nothing. Two processes
    that start together on an empty cache build it once."""
    env = {"RSSM_TORCH_EXT": "auto", "RSSM_TORCH_EXT_DIR": str(tmp_path / "first")}
    out, err = in_subprocess(FIRST_USE, env).communicate(timeout=300)
    assert out.startswith("loaded: " + str(tmp_path / "first")), (out, err)
    assert len(err.splitlines()) == 1 and err.startswith("rssm: building the torch extension for torch "), err
    out, err = in_subprocess(FIRST_USE, env).communicate(timeout=300)
    assert out.startswith("loaded: ") and err == "", (out, err)
    env["RSSM_TORCH_EXT_DIR"] = str(tmp_path / "together")
    procs = [in_subprocess(FIRST_USE, env) for _ in range(2)]
    done = [p.communicate(timeout=300) for p in procs]
    assert all(o.startswith("loaded: ") for o, _ in done), done
    said = [ln for _, e in done for ln in e.splitlines()]
    assert sum(ln.startswith("rssm: building the torch extension") for ln in said) == 1, said
    assert all(len(e.splitlines()) <= 1 for _, e in done), done


STATUS = rssm.torch_extension_status()
LOADED = STATUS.startswith("loaded")
needs_ext = pytest.mark.skipif(not LOADED, reason=f"the torch extension: {STATUS}")


def counts():
    from rssm import torch_ext
    return torch_ext.counts()


def step_arrays(e, rng, B, idx, dev, strided):
    """A step's inputs as torch tensors on `dev`; with `strided`, mixed_qkv a
    column window of a wider buffer (q, k, v read at its row stride)."""
    mixed, a, b = e.inputs(B)
    if strided:
        wide = np.zeros((B, mixed.shape[1] + 8), np.float32)
        wide[:, 4:4 + mixed.shape[1]] = mixed
        m = torch.from_numpy(wide).to(dev)[:, 4:4 + mixed.shape[1]]
    else:
        m = torch.from_numpy(mixed).to(dev)
    pad = (idx < 0) | (idx >= e.slots)
    write_pos = np.where(pad, 0, e.cursor[np.clip(idx, 0, e.slots - 1)]).astype(np.int32)
    force = (rng.random(B) < 0.25).astype(np.int32)
    return dict(m=m, a=torch.from_numpy(a).to(dev), b=torch.from_numpy(b).to(dev),
                idx=torch.from_numpy(idx).to(dev), write_pos=torch.from_numpy(write_pos).to(dev),
                force=torch.from_numpy(force).to(dev)), write_pos, force


def twin_run(gate_kind, dev, backend, steps=14, B=4, strided=False):
    """The same steps on two engines: one through the op (the extension's
    kernel), one through rssm.replayssm.decode (ctypes, no op); returns
    both engines' tensors (the first's with the slots' cursors after the
    steps, "cursor") and the outputs of every step."""
    ea, eb = Engine(np.random.default_rng(3), gate_kind=gate_kind), Engine(np.random.default_rng(3), gate_kind=gate_kind)
    ta = {n: x.to(dev) for n, x in as_torch(ea).items()}
    tb = {n: x.to(dev) for n, x in as_torch(eb).items()}
    rng = np.random.default_rng(4)
    outs = []
    for it in range(steps):
        idx = rng.choice(ea.slots, B, replace=False).astype(np.int32)
        if it % 3 == 1:
            idx[0] = -1  # a padding row
        s, write_pos, force = step_arrays(ea, rng, B, idx, dev, strided)
        oa = torch.full((B, ea.HV, ea.V), 7.0, device=dev)
        ob = oa.clone()
        for t, o, run in ((ta, oa, rssm.fused_recurrent_gated_delta_rule_replayssm), (tb, ob, replayssm.decode)):
            run(s["m"], s["a"], s["b"], t["A_log"], t["dt_bias"], None, t["initial_state"], t["d_cache"],
                t["k_cache"], t["g_cache"], o, s["idx"], s["write_pos"], s["force"], gate_kind=gate_kind,
                backend=backend)
        outs.append((oa, ob))
        flush = (write_pos == ea.L - 1) | (force != 0)
        keep = idx >= 0
        ea.cursor[idx[keep]] = np.where(flush[keep], 0, write_pos[keep] + 1)
    ta["cursor"] = torch.from_numpy(ea.cursor.copy()).to(dev)
    return ta, tb, outs


@needs_ext
@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("gate_kind", ["gdn", "kda"])
def test_matches_the_python_path_bit_for_bit(gate_kind, strided):
    before = counts()
    ta, tb, outs = twin_run(gate_kind, "cpu", "cpu", strided=strided)
    for oa, ob in outs:
        assert torch.equal(oa, ob)
    for n in ("initial_state", "d_cache", "k_cache", "g_cache"):
        np.testing.assert_array_equal(ta[n].numpy(), tb[n].numpy(), err_msg=n)  # unused ring entries: NaN both
    after = counts()
    assert after["hits"] - before["hits"] >= len(outs) - 2, "the kernel took its cached plan"


@needs_ext
def test_kernels_registered():
    for op in ("replayssm_decode", "replayssm_materialise", "replayssm_advance"):
        for key in ("CPU", "Autograd") + (("CUDA",) if "CUDA" in STATUS else ()):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"rssm::{op}", key), (op, key)
        # no Python implementation under the kernels
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(f"rssm::{op}", "CompositeExplicitAutograd"), op


def fold_and_advance(gate_kind, dev, backend):
    """After decode steps on twin engines (twin_run), two rounds of a
    materialise and a cursor advance on each: through the ops (the
    extension's kernels; the second round from their plans) and on the
    Python path (rssm.replayssm.materialise_direct, rssm.layer.advance).
    Returns both engines' tensors and cursors, and the extension's hits."""
    ta, tb, _ = twin_run(gate_kind, dev, backend, steps=6)
    cursor = ta.pop("cursor")
    L = ta["d_cache"].shape[2]
    idx = torch.tensor([2, -1, 0, 5], dtype=torch.int32, device=dev)  # a padding row among them
    write_pos = torch.where(idx >= 0, cursor[idx.clamp(min=0).long()], 0).to(torch.int32)
    force = torch.tensor([1, 0, 0, 0], dtype=torch.int32, device=dev)
    ca, cb = cursor.clone(), cursor.clone()
    hits = counts()["hits"]
    for _ in range(2):
        for t, c, direct in ((ta, ca, False), (tb, cb, True)):
            pool = (t["initial_state"], t["d_cache"], t["k_cache"], t["g_cache"], idx, write_pos)
            if direct:
                replayssm.materialise_direct(*pool, gate_kind=gate_kind, backend=backend)
                rssm_layer.advance(c, idx, write_pos, force, ring_len=L, backend_name=backend)
            else:
                rssm.materialise(*pool, gate_kind=gate_kind, backend=backend)
                rssm.advance(c, idx, write_pos, force, ring_len=L, backend=backend)
    return ta, tb, ca, cb, counts()["hits"] - hits


@needs_ext
@pytest.mark.parametrize("gate_kind", ["gdn", "kda"])
def test_materialise_and_advance_match_the_python_path(gate_kind):
    ta, tb, ca, cb, hits = fold_and_advance(gate_kind, "cpu", "cpu")
    assert torch.equal(ta["initial_state"], tb["initial_state"])
    assert torch.equal(ca, cb)
    assert hits == 2, "the second round's fold and advance took their cached plans"


@needs_ext
def test_advance_errors_are_the_python_paths():
    """An advance rssm refuses (two rows naming one slot) after its layout
    has a plan: the C++ call fails, the Python path raises rssm.Error with
    rssm's message; a converted argument (bool force) keeps no plan."""
    twin_run("gdn", "cpu", "cpu", steps=1)  # a layer object that advance can take
    cursor = torch.zeros(6, dtype=torch.int32)
    wpos = torch.zeros(2, dtype=torch.int32)
    rssm.advance(cursor, torch.tensor([1, 3], dtype=torch.int32), wpos, ring_len=4)
    plans = counts()["plans"]
    twice = torch.tensor([3, 3], dtype=torch.int32)
    with pytest.raises(rssm.Error) as got:
        rssm.advance(cursor, twice, wpos, ring_len=4)
    with pytest.raises(rssm.Error) as want:
        rssm_layer.advance(cursor, twice, wpos, ring_len=4)
    assert (got.value.function, got.value.status_name, got.value.message) == \
        (want.value.function, want.value.status_name, want.value.message)
    for _ in range(2):
        rssm.advance(cursor, torch.tensor([1, 3], dtype=torch.int32), wpos, torch.tensor([True, False]), ring_len=4)
    assert counts()["plans"] == plans
    assert cursor[1] == 0 and cursor[3] == 1


def one_call_args(e, B=2, **over):
    t = as_torch(e)
    mixed, a, b = (torch.from_numpy(x) for x in e.inputs(B))
    args = dict(mixed_qkv=mixed, a=a, b=b, A_log=t["A_log"], dt_bias=t["dt_bias"], scale=None,
                initial_state=t["initial_state"], d_cache=t["d_cache"], k_cache=t["k_cache"], g_cache=t["g_cache"],
                out=torch.empty(B, e.HV, e.V), ssm_state_indices=torch.tensor([1, 3][:B], dtype=torch.int32),
                write_pos=torch.zeros(B, dtype=torch.int32))
    args.update(over)
    return args


@needs_ext
def test_errors_are_the_python_paths():
    """A wrong call raises what the Python path raises, naming the argument,
    on its first call and on one whose layout has a cached plan."""
    e = Engine(np.random.default_rng(40))
    entry = rssm.fused_recurrent_gated_delta_rule_replayssm
    with pytest.raises(ValueError, match=r"out has shape \[2, 33\]"):
        entry(**one_call_args(e, out=torch.empty(2, 33)))
    with pytest.raises(TypeError, match="initial_state is fp16"):
        entry(**one_call_args(e, initial_state=torch.zeros(e.slots, e.HV, e.V, e.K, dtype=torch.float16)))
    with pytest.raises(ValueError, match="gate_mode 'softplus'"):
        entry(**one_call_args(e), gate_mode="softplus")
    # A value rssm refuses on the cpu backend, after the plan is cached: the
    # C++ call fails, the Python path raises rssm.Error with rssm's message.
    entry(**one_call_args(e))
    kept = counts()["hits"]
    entry(**one_call_args(e))
    assert counts()["hits"] == kept + 1
    with pytest.raises(rssm.Error) as got:
        entry(**one_call_args(e, write_pos=torch.tensor([0, e.L], dtype=torch.int32)))
    with pytest.raises(rssm.Error) as want:
        replayssm.decode(**one_call_args(e, write_pos=torch.tensor([0, e.L], dtype=torch.int32)))
    assert (got.value.function, got.value.status_name, got.value.message) == \
        (want.value.function, want.value.status_name, want.value.message)
    assert "write_pos" in got.value.message


@needs_ext
def test_converted_arguments_take_the_python_path_each_time():
    """bool force_flush is converted per call (rssm._prepared keeps no such
    call): the extension keeps no plan for it, and the results still match."""
    e = Engine(np.random.default_rng(41))
    rssm.clear_cache()
    for _ in range(3):
        rssm.fused_recurrent_gated_delta_rule_replayssm(**one_call_args(e), force_flush=torch.tensor([True, False]))
    assert counts()["plans"] == 0


@needs_ext
def test_clear_cache_forgets_the_plans():
    e = Engine(np.random.default_rng(42))
    rssm.fused_recurrent_gated_delta_rule_replayssm(**one_call_args(e))
    assert counts()["plans"] >= 1
    rssm.clear_cache()
    assert counts()["plans"] == 0
    rssm.fused_recurrent_gated_delta_rule_replayssm(**one_call_args(e))  # a new layer object
    assert counts()["plans"] == 1


@needs_ext
def test_opcheck_on_the_kernel():
    e = Engine(np.random.default_rng(43))
    for r in e.d_cache, e.k_cache, e.g_cache:
        r[...] = 0.0
    a = one_call_args(e)
    args = (a["mixed_qkv"], a["a"], a["b"], a["A_log"], a["dt_bias"], a["initial_state"], a["d_cache"], a["k_cache"],
            a["g_cache"], a["out"], a["ssm_state_indices"], a["write_pos"], None, None, 0.0, "gdn", "raw", 0.0, True,
            0, 0, "", "out_of_range")
    torch.library.opcheck(torch.ops.rssm.replayssm_decode.default, args)


@needs_ext
def test_inputs_that_require_grad_run_below_autograd():
    # The Autograd kernel passes the call down (nothing to record: the op
    # writes in place and returns nothing): same outputs and state.
    outs = []
    for grad in (False, True):
        e = Engine(np.random.default_rng(44))
        a = one_call_args(e)
        a["mixed_qkv"].requires_grad_(grad)
        a["a"].requires_grad_(grad)
        rssm.fused_recurrent_gated_delta_rule_replayssm(**a)
        outs.append((a["out"].clone(), a["initial_state"].clone()))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def status_in_subprocess(env: dict) -> str:
    code = "import torch, rssm; print(rssm.torch_extension_status())"
    full = dict(os.environ, **env, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", code], env=full, check=True, capture_output=True,
                          text=True).stdout.strip()


NO_COMPILER = {"CXX": "/nonexistent/c++"}


def test_fallback_says_so(tmp_path: Path):
    """Off, or not built and no compiler to build it: the ops run their
    Python implementations, and the status says why and how to build."""
    assert status_in_subprocess({"RSSM_TORCH_EXT": "off"}).startswith("off (RSSM_TORCH_EXT=off)")
    s = status_in_subprocess({"RSSM_TORCH_EXT": "auto", "RSSM_TORCH_EXT_DIR": str(tmp_path), **NO_COMPILER})
    assert s.startswith("not built for torch") and "no C++ compiler" in s and "/nonexistent/c++" in s, s
    assert "python -m rssm.torch_ext build" in s
    assert not any(tmp_path.iterdir()), "nothing built"


def test_fallback_runs_the_python_implementation(tmp_path: Path):
    code = "\n".join(CHILD + [
        "assert not torch._C._dispatch_has_kernel_for_dispatch_key('rssm::replayssm_decode', 'CPU')",
        "e = Engine(np.random.default_rng(0))",
        "rssm.fused_recurrent_gated_delta_rule_replayssm(**one_call_args(e))",
        "a = one_call_args(e)",
        "torch.ops.rssm.replayssm_decode(a['mixed_qkv'], a['a'], a['b'], a['A_log'], a['dt_bias'],"
        " a['initial_state'], a['d_cache'], a['k_cache'], a['g_cache'], a['out'], a['ssm_state_indices'],"
        " a['write_pos'], None, None, 0.0, 'gdn', 'raw', 0.0, True, 0, 0, '', 'out_of_range')",
    ])
    env = dict(os.environ, RSSM_TORCH_EXT="auto", RSSM_TORCH_EXT_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path),
               **NO_COMPILER)
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


@needs_ext
@needs_cuda
@pytest.mark.parametrize("gate_kind", ["gdn", "kda"])
def test_cuda_matches_the_python_path_bit_for_bit(gate_kind):
    ta, tb, outs = twin_run(gate_kind, "cuda", "cuda", strided=True)
    torch.cuda.synchronize()
    for oa, ob in outs:
        assert torch.equal(oa, ob)
    for n in ("initial_state", "d_cache", "k_cache", "g_cache"):
        np.testing.assert_array_equal(ta[n].cpu().numpy(), tb[n].cpu().numpy(), err_msg=n)


@needs_ext
@needs_cuda
def test_cuda_materialise_and_advance_match_the_python_path():
    ta, tb, ca, cb, hits = fold_and_advance("kda", "cuda", "cuda")
    torch.cuda.synchronize()
    assert torch.equal(ta["initial_state"], tb["initial_state"])
    assert torch.equal(ca, cb)
    assert hits == 2


@needs_ext
@needs_cuda
def test_one_layer_object_per_stream():
    """rssm.h: launches of one layer object must be ordered; the kernel takes
    the layer object of torch's current stream, one per stream."""
    from rssm import layer as layer_mod

    rssm.clear_cache()
    e = Engine(np.random.default_rng(44))
    a = {n: (x.cuda() if isinstance(x, torch.Tensor) else x) for n, x in one_call_args(e).items()}
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    for s in (s1, s2, s1):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            rssm.fused_recurrent_gated_delta_rule_replayssm(**a)
        torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    streams = {k[3] for k in layer_mod._layers}
    assert streams == {s1.cuda_stream, s2.cuda_stream}
    assert counts()["plans"] == 2
