"""What the benchmarks of bench/ share (docs/bench.md): the head shapes,
random inputs that are never near zero, the timing of a captured CUDA graph
after the clock has ramped up, the copy bandwidth of the same run, the
per-layer rows of an `rssm bench --out` JSON, and the imports of the
published kernels (the peers) from the git-ignored .peers/ that
tools/peer-sources fills. Needs torch only where it times, and never rssm,
so that a peer's benchmark runs on a machine without rssm's library."""

import importlib.util
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".peers"  # tools/peer-sources, tools/engine-tests (git-ignored)
WARMUP_S = 0.6  # rssm bench's (docs/bench.md): an idle H200 takes up to 0.4 s to reach its clock
L = 16  # the ring length every graph benchmark runs (the engines' L)
SHAPES = {  # H, HV, K, V: Qwen3.5's GDN and Kimi-Linear's KDA heads (docs/design.md §5)
    "gdn": (16, 32, 128, 128),
    "kda": (32, 32, 128, 128),
}


def uniform(shape, lo, hi, dtype, gen, device="cuda"):
    """Random in [lo, hi), never closer to 0 than 1e-3 (hi - lo)."""
    import torch

    x = torch.rand(shape, generator=gen, device=device, dtype=torch.float32) * (hi - lo) + lo
    tiny = 1e-3 * (hi - lo)
    x = torch.where(x.abs() < tiny, torch.full_like(x, tiny), x)
    return x.to(dtype)


class Timer:
    """Median and fastest device us of replays of a captured graph, after
    untimed replays for WARMUP_S (the first graph of the process) or
    `warmup` seconds (every later one: its capture left the GPU idle)."""

    def __init__(self, reps, warmup):
        self.reps = reps
        self.warmup = warmup
        self.warm = False

    def __call__(self, body):
        import torch

        graph = captured_warm(body, self.warmup if self.warm else WARMUP_S)
        self.warm = True
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps + 1)]
        ev[0].record()
        for i in range(self.reps):
            graph.replay()
            ev[i + 1].record()
        torch.cuda.synchronize()
        times = sorted(ev[i].elapsed_time(ev[i + 1]) * 1e3 for i in range(self.reps))
        del graph
        return times[len(times) // 2], times[0]


def captured_warm(body, seconds):
    """body() captured in a CUDA graph, replayed untimed for `seconds` so
    that the clocks have ramped up before it is timed, as rssm bench's
    timing loop does (docs/bench.md)."""
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    start = time.perf_counter()
    while True:
        graph.replay()
        torch.cuda.synchronize()
        if time.perf_counter() - start >= seconds:
            return graph


def copy_gbs(timer):
    """Device-to-device copy of 1 GiB, bytes read plus written per second."""
    import torch

    n = 1 << 28
    src = torch.empty(n, dtype=torch.float32, device="cuda").uniform_(-1, 1)
    dst = torch.empty_like(src)
    us, _ = timer(lambda: dst.copy_(src))
    del src, dst
    return 2 * 4 * n / (us * 1e-6) / 1e9


def cli_rows(j, **extra):
    """The timed rows of one `rssm bench --out` JSON (its "rows"), per step
    per layer, under the keys of a results row (bench/results/README.md),
    each with `extra` added."""
    rows = []
    for r in j["rows"]:
        if r["status"] != "ok":
            continue
        per = lambda k: r[k] / r["layers"] if r.get(k) is not None else None  # noqa: E731
        rows.append({"harness": "cli", "gate": r["gate"], "state": r["state_dtype"], "batch": r["batch"],
                     "positions": r["positions"], "layers": r["layers"], "packed_us": per("packed_us"),
                     "replay_us": per("replay_us"), "empty_us": per("empty_us"), "full_us": per("full_us"),
                     "flush_us": per("flush_us"), "inplace_us": per("inplace_us"), "copy_gbs": j["copy_gbs"],
                     "ring_len": r["ring_len"], "ring_dtype": j["ring_dtype"], "gate_mode": j.get("gate_mode"),
                     "sm_limit": j.get("sm_limit") or None, **extra})
    return rows


def vllm_fla(*names, interpret=False):
    """vLLM's Triton modules vllm_fla.NAME from .peers/vllm_fla
    (tools/peer-sources), as a dict by name. With `interpret` (triton's
    interpreter, TRITON_INTERPRET=1 set before), the aliases op.py makes of
    tl's builtins are pointed back at them, which the interpreter patches."""
    if PEERS.is_dir() and str(PEERS) not in sys.path:
        sys.path.insert(0, str(PEERS))
    mods = {n: importlib.import_module(f"vllm_fla.{n}") for n in names}
    if interpret:
        import triton.language as tl

        for m in mods.values():
            for name in ("exp", "exp2", "log", "log2"):
                if getattr(m, name, None) is getattr(tl, name):
                    setattr(m, name, lambda x, _n=name: getattr(tl, _n)(x))
    return mods


SGLANG_FILE = "sglang/kernels/ops/attention/linear/fused_recurrent_linear_replayssm.py"


def sglang_replayssm(wheel: str):
    """SGLang's ReplaySSM decode kernel, read from its wheel unchanged (the
    file imports only torch and triton)."""
    with zipfile.ZipFile(wheel) as z:
        src = z.read(SGLANG_FILE)
    path = Path(tempfile.mkdtemp()) / "sglang_replayssm.py"
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location("sglang_replayssm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.fused_recurrent_linear_replayssm_decode


def repo_commit() -> str:
    """The commit of the working tree the benchmark runs from, "+" after it
    when the tree has changes; "" outside a git checkout (a carried copy:
    bench/run.sh passes RSSM_COMMIT)."""
    if os.environ.get("RSSM_COMMIT"):
        return os.environ["RSSM_COMMIT"]
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return ""
