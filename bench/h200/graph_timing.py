"""What the torch-graph benchmarks share (torch_graph.py, torch_verify.py,
peer_verify.py): random inputs that are never near zero, the timing of a
captured CUDA graph after the clock has ramped up, and the copy bandwidth
of the same run. Needs torch only, not rssm, so that a peer's benchmark can
use it on a machine without rssm's library."""

import time

import torch

WARMUP_S = 0.6  # rssm bench's (docs/bench.md): an idle H200 takes up to 0.4 s to reach its clock


def uniform(shape, lo, hi, dtype, gen, device="cuda"):
    """Random in [lo, hi), never closer to 0 than 1e-3 (hi - lo)."""
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
    n = 1 << 28
    src = torch.empty(n, dtype=torch.float32, device="cuda").uniform_(-1, 1)
    dst = torch.empty_like(src)
    us, _ = timer(lambda: dst.copy_(src))
    del src, dst
    return 2 * 4 * n / (us * 1e-6) / 1e9
