#!/usr/bin/env python3
"""Host time of one decode-layer call, in microseconds per call, the ways an
engine can make it:

  C call        rssm_layer_run through ctypes on a filled rssm_layer_tensors:
                the floor (on the cpu backend it includes the layer's work,
                on cuda the launch)
  entry         rssm.fused_recurrent_gated_delta_rule_replayssm with
                positional arguments, the same array objects every call (an
                engine's static buffers, or a CUDA graph's warm-up)
  entry, views  the same with new array objects on the same memory for the
                per-step arrays every call (an engine that slices its step
                buffers anew each step)
  torch op      torch.ops.rssm.replayssm_decode called directly, as a
                torch.compile graph calls it (torch tensors only)

"over C" is the path's time less the C call's: the host overhead. Each
figure is the median (and the fastest) of --repeats loops of --calls calls,
with no synchronisation inside a loop (on CUDA, fewer calls than the launch
queue holds, so that no call waits for the GPU). The layer is tiny, so that
on the cpu backend the C call is mostly call overhead, and the cpu backend
runs on one thread (RSSM_CPU_THREADS=1 unless set): its workers sleep
between calls, and waking them would cost each path by how long it lets
them sleep.

    python tests/python/bench_host_overhead.py                   # NumPy, cpu backend
    python tests/python/bench_host_overhead.py --arrays torch    # torch; CUDA when there is a GPU
    python tests/python/bench_host_overhead.py --profile         # cProfile of the repeated entry call

It uses the installed rssm package (or PYTHONPATH=python RSSM_LIBRARY=...).
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import gc
import os
import pstats
import statistics
import sys
import time

os.environ.setdefault("RSSM_CPU_THREADS", "1")

import numpy as np  # noqa: E402

import rssm  # noqa: E402
from rssm import _lib  # noqa: E402

H, HV, K, V, L, SLOTS = 1, 2, 16, 16, 4, 8
# The entry's positional arguments, in its order (scale is None).
ORDER = ("mixed_qkv", "a", "b", "A_log", "dt_bias", "scale", "initial_state", "d_cache", "k_cache", "g_cache", "out",
         "ssm_state_indices", "write_pos")
STEP = ("mixed_qkv", "a", "b", "out", "ssm_state_indices", "write_pos")


def make_arrays(xp: str, device: str, B: int, seed: int = 0) -> dict:
    """One layer's engine arrays and one step's inputs, as NumPy arrays or
    torch tensors on `device`; write_pos 0 everywhere, so that every call
    appends ring entry 0 and none flushes (each call is the same work)."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    a = dict(
        mixed_qkv=rng.uniform(-1, 1, (B, 2 * H * K + HV * V)).astype(f32),
        a=rng.uniform(-1, 1, (B, HV)).astype(f32), b=rng.uniform(-1, 1, (B, HV)).astype(f32),
        A_log=rng.uniform(-1, 0.5, HV).astype(f32), dt_bias=np.zeros(HV, f32), scale=None,
        initial_state=rng.uniform(-0.05, 0.05, (SLOTS, HV, V, K)).astype(f32),
        d_cache=np.zeros((SLOTS, HV, L, V), np.float16), k_cache=np.zeros((SLOTS, H, L, K), np.float16),
        g_cache=np.zeros((SLOTS, HV, L), f32), out=np.zeros((B, HV, V), f32),
        ssm_state_indices=np.arange(B, dtype=np.int32), write_pos=np.zeros(B, np.int32))
    if xp == "torch":
        import torch
        a = {n: (torch.from_numpy(x).to(device) if isinstance(x, np.ndarray) else x) for n, x in a.items()}
    return a


def per_call_us(fn, calls: int, repeats: int, sync) -> tuple:
    fn()
    sync()
    times = []
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            times.append((time.perf_counter_ns() - start) / calls / 1e3)
            sync()
    finally:
        gc.enable()
    return statistics.median(times), min(times)


def c_call(entry):
    """rssm_layer_run with the arguments the entry passes it (caught by
    standing in for the library's function during one call that prepares
    afresh), through ctypes, the tensors struct filled once: the entry with
    every check and lookup taken away."""
    lib = _lib.lib()
    real, seen = lib.rssm_layer_run, []

    def spy(*c_args):
        seen.append(c_args)
        return real(*c_args)

    lib.rssm_layer_run = spy
    try:
        rssm.clear_cache()
        entry()
    finally:
        lib.rssm_layer_run = real
    handle, rows, tensors, stream, _ = seen[-1]
    t = _lib.RssmLayerTensors.from_buffer_copy(tensors._obj)
    t_ref, err = ctypes.byref(t), ctypes.byref(_lib.RssmError())
    return lambda: real(handle, rows, t_ref, stream, err)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arrays", choices=("numpy", "torch"), default="numpy")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="torch tensors' device (default cuda where torch sees a GPU and rssm has the cuda backend)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--profile", action="store_true", help="cProfile 20000 repeated entry calls, print the top 15")
    opts = p.parse_args(argv)

    sync = lambda: None  # noqa: E731
    device = "cpu"
    if opts.arrays == "torch":
        import torch
        rssm.register_torch_ops()
        cuda_ok = torch.cuda.is_available() and "cuda" in rssm.backend_names()
        device = opts.device or ("cuda" if cuda_ok else "cpu")
        if device == "cuda":
            sync = torch.cuda.synchronize
    elif opts.device == "cuda":
        p.error("--device cuda needs --arrays torch")
    backend = "cuda" if device == "cuda" else "cpu"
    t = make_arrays(opts.arrays, device, opts.batch)
    args = [t[n] for n in ORDER]
    step = [i for i, n in enumerate(ORDER) if n in STEP]
    entry_fn = rssm.fused_recurrent_gated_delta_rule_replayssm

    def entry():
        entry_fn(*args, backend=backend)

    def entry_views():
        fresh = list(args)
        for i in step:
            fresh[i] = args[i][:]
        entry_fn(*fresh, backend=backend)

    if opts.profile:
        entry()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(20000):
            entry()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        return 0

    paths = [("C call (ctypes)", c_call(entry)), ("entry", entry), ("entry, views", entry_views)]
    if opts.arrays == "torch":
        import torch
        op = torch.ops.rssm.replayssm_decode.default
        op_args = (t["mixed_qkv"], t["a"], t["b"], t["A_log"], t["dt_bias"], t["initial_state"], t["d_cache"],
                   t["k_cache"], t["g_cache"], t["out"], t["ssm_state_indices"], t["write_pos"], None, None, 0.0,
                   "gdn", "raw", 0.0, True, 0, 0, backend, "out_of_range")
        paths.append(("torch op", lambda: op(*op_args)))

    versions = f"Python {sys.version.split()[0]}, numpy {np.__version__}"
    if "torch" in sys.modules:
        versions += f", torch {sys.modules['torch'].__version__}"
    print(f"rssm {rssm.__version__} ({rssm.library_path()}), {versions}")
    if opts.arrays == "torch":
        print(f"torch extension: {rssm.torch_extension_status()}")
    print(f"{opts.arrays} arrays on {device}, backend {backend} (RSSM_CPU_THREADS={os.environ['RSSM_CPU_THREADS']}): "
          f"H={H} HV={HV} K={K} V={V} L={L} slots={SLOTS} B={opts.batch}; median (min) of "
          f"{opts.repeats} x {opts.calls} calls")
    print(f"{'path':18} {'us/call':>8} {'(min)':>8} {'over C':>8}")
    base = None
    for name, fn in paths:
        med, best = per_call_us(fn, opts.calls, opts.repeats, sync)
        base = med if base is None else base
        print(f"{name:18} {med:8.2f} {best:8.2f} {med - base:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
