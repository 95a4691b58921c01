#!/usr/bin/env python3
"""What torch_ext_check.sh runs in one process, with or without the compiled
torch extension (rssm.torch_ext; RSSM_TORCH_EXT=off for the Python path):

  --graph   one step of a qwen3.5-shaped GDN layer pair (decode of two
            layers, then the cursor advance) captured in a CUDA graph,
            replayed with new inputs copied in, against the same steps run
            eagerly on a twin pool: equal bit for bit. Twice: warmed up on
            the capture stream (vLLM's and SGLang's way) and on another
            stream (torch's documented way, where the capture takes the
            warm-up stream's layer object).
  --time    host time per eager call: each call timed alone with
            time.perf_counter_ns, rounds of --calls calls with a
            synchronisation between rounds (fewer calls than the launch
            queue holds, so that no call waits for the GPU): the entry,
            the decode op called directly, and rssm.advance (its C call
            is another launch of the same cost); prints
            "path<TAB>median<TAB>p90<TAB>decode's C call median" rows for
            torch_ext_check.sh's table.

    PYTHONPATH=python RSSM_LIBRARY=.devbin/librssm.so.0 python3 bench/check_torch_ext.py --graph --time
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python"))

os.environ.setdefault("RSSM_CPU_THREADS", "1")

import rssm  # noqa: E402
from bench_host_overhead import ORDER, c_call, make_arrays  # noqa: E402

H, HV, K, V, L, SLOTS, B = 16, 32, 128, 128, 16, 64, 8


def pool(seed: int, dev) -> list:
    g = torch.Generator(device="cpu").manual_seed(seed)
    layers = []
    for _ in range(2):
        layers.append(dict(
            state=(torch.rand(SLOTS, HV, V, K, generator=g) * 0.1 - 0.05).to(dev),
            d=torch.zeros(SLOTS, HV, L, V, dtype=torch.float16, device=dev),
            k=torch.zeros(SLOTS, H, L, K, dtype=torch.float16, device=dev),
            g=torch.zeros(SLOTS, HV, L, device=dev),
            A_log=(torch.rand(HV, generator=g) * 1.5 - 1.0).to(dev), dt_bias=torch.zeros(HV, device=dev)))
    return layers


def step(layers, cursor, mixed, a, b, idx, force, outs) -> None:
    write_pos = cursor[idx.long()]
    for p, m, o in zip(layers, mixed, outs):
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            m, a, b, p["A_log"], p["dt_bias"], None, p["state"], p["d"], p["k"], p["g"], o, idx, write_pos, force)
    rssm.advance(cursor, idx, write_pos, force, ring_len=L)


def graph_check(warm_on_capture_stream: bool) -> str:
    dev = torch.device("cuda")
    rssm.clear_cache()
    lg, le = pool(1, dev), pool(1, dev)
    cg, ce = (torch.zeros(SLOTS, dtype=torch.int32, device=dev) for _ in range(2))
    width = 2 * H * K + HV * V
    st = dict(mixed=[torch.zeros(B, width, device=dev) for _ in lg], a=torch.zeros(B, HV, device=dev),
              b=torch.zeros(B, HV, device=dev), idx=torch.arange(B, dtype=torch.int32, device=dev),
              force=torch.zeros(B, dtype=torch.int32, device=dev),
              out=[torch.zeros(B, HV, V, device=dev) for _ in lg])
    capture = torch.cuda.Stream()
    warm = capture if warm_on_capture_stream else torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):  # on copies: the twin pools stay equal
        step([{n: x.clone() for n, x in p.items()} for p in lg], cg.clone(), st["mixed"], st["a"], st["b"], st["idx"],
             st["force"], st["out"])
    torch.cuda.current_stream().wait_stream(warm)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture):
        step(lg, cg, st["mixed"], st["a"], st["b"], st["idx"], st["force"], st["out"])
    gen = torch.Generator(device="cpu").manual_seed(2)
    rng = np.random.default_rng(3)
    for it in range(3 * L):
        mixed = [(torch.rand(B, width, generator=gen) * 2 - 1).to(dev) for _ in lg]
        a, b = ((torch.rand(B, HV, generator=gen) * 6 - 3).to(dev) for _ in range(2))
        idx = torch.from_numpy(rng.choice(SLOTS, B, replace=False).astype(np.int32)).to(dev)
        force = torch.from_numpy((rng.random(B) < 0.1).astype(np.int32)).to(dev)
        for s, x in zip(st["mixed"], mixed):
            s.copy_(x)
        for n, x in (("a", a), ("b", b), ("idx", idx), ("force", force)):
            st[n].copy_(x)
        graph.replay()
        outs = [torch.empty(B, HV, V, device=dev) for _ in le]
        step(le, ce, mixed, a, b, idx, force, outs)
        torch.cuda.synchronize()
        for og, oe in zip(st["out"], outs):
            if not torch.equal(og, oe):
                return f"FAIL: replay {it} differs from the eager step (max |diff| {(og - oe).abs().max().item()})"
        if not torch.equal(cg, ce):
            return f"FAIL: replay {it}: cursors differ"
    for pg, pe in zip(lg, le):
        for n in ("state", "d", "k", "g"):
            if not torch.equal(pg[n], pe[n]):
                return f"FAIL: {n} differs after the replays"
    return f"PASS ({3 * L} replays, 2 layers + advance, B={B}, bit for bit)"


def per_call(fn, calls: int, rounds: int, sync) -> tuple:
    fn()
    sync()
    times = []
    clock = time.perf_counter_ns
    gc.disable()
    try:
        for _ in range(rounds):
            for _ in range(calls):
                t0 = clock()
                fn()
                times.append(clock() - t0)
            sync()
    finally:
        gc.enable()
    times.sort()
    return statistics.median(times) / 1e3, times[int(0.9 * len(times))] / 1e3


def timing(calls: int, rounds: int) -> None:
    dev = "cuda"
    t = make_arrays("torch", dev, 4)
    args = [t[n] for n in ORDER]
    entry_fn = rssm.fused_recurrent_gated_delta_rule_replayssm
    op = torch.ops.rssm.replayssm_decode.default
    op_args = (t["mixed_qkv"], t["a"], t["b"], t["A_log"], t["dt_bias"], t["initial_state"], t["d_cache"],
               t["k_cache"], t["g_cache"], t["out"], t["ssm_state_indices"], t["write_pos"], None, None, 0.0, "gdn",
               "raw", 0.0, True, 0, 0, "cuda", "out_of_range")

    def entry():
        entry_fn(*args, backend="cuda")

    cursor = torch.zeros(t["initial_state"].shape[0], dtype=torch.int32, device=dev)

    def advance():  # after the entry's layer exists; the same cursor each call
        rssm.advance(cursor, t["ssm_state_indices"], t["write_pos"], ring_len=t["d_cache"].shape[2], backend="cuda")

    sync = torch.cuda.synchronize
    base, _ = per_call(c_call(entry), calls, rounds, sync)
    for name, fn in (("entry", entry), ("torch op", lambda: op(*op_args)), ("advance", advance)):
        med, p90 = per_call(fn, calls, rounds, sync)
        print(f"{name}\t{med:.2f}\t{p90:.2f}\t{base:.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", action="store_true")
    p.add_argument("--time", action="store_true")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=10)
    opts = p.parse_args(argv)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}; extension: {rssm.torch_extension_status()}",
          flush=True)
    ok = True
    if opts.graph:
        for same in (True, False):
            r = graph_check(same)
            ok &= r.startswith("PASS")
            print(f"# graph, warmed up on {'the capture' if same else 'another'} stream: {r}", flush=True)
    if opts.time:
        timing(opts.calls, opts.rounds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
