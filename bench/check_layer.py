#!/usr/bin/env python3
"""The per-layer entry on a GPU as an engine calls it: rssm's torch op on CUDA
tensors in vLLM's layouts (a [slots, HV, V, K] state pool, rings of L entries,
q/k/v packed in mixed_qkv, bf16 a and b), a decode loop captured once into a
torch CUDA graph with the cursor refresh and advance, checked step by step
against the cpu backend on the same inputs; then the host overhead of one
layer call and the kernel time per layer, beside `rssm bench` for the same
shape. From the repository root on the GPU machine, with a CUDA build:

    PYTHONPATH=python RSSM_LIBRARY=$BUILD/librssm.so \\
        python3 bench/check_layer.py --cli $BUILD/rssm [--out DIR]

Prints a short table last and writes DIR/layer_check.json. Exit status 1 if a
check failed. Shapes: Qwen3.5 GDN and Kimi-Linear KDA layers (docs/design.md
§5), L = 16, fp32 state, batch 16 and 256; inputs random, never zero.
--gate-mode (default raw, as vLLM passes a and b) is the op's gate mode and
`rssm bench --gate-mode`'s, so both time the same gate work; --profile lists
the kernels one replay of each timed graph ran (torch.profiler), to see what
else than rssm's launches a graph holds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch

import rssm
from benchlib import L, SHAPES, WARMUP_S, captured_warm  # bench/, the script's own folder
STATE_MIB = 256  # state touched per step, far beyond the 60 MB L2 (rssm bench's default)
GATE_MODE = "raw"  # --gate-mode: the op's and rssm bench's
GATE_LOWER_BOUND = -5.0  # raw-safe's bound, as rssm's model presets


def gate_args():
    """The op's gate arguments for --gate-mode."""
    return {"gate_mode": GATE_MODE, "gate_lower_bound": GATE_LOWER_BOUND}


def rand(shape, lo, hi, dtype, device, gen):
    """Uniform in [lo, hi), never closer to 0 than 1e-3 * (hi - lo)."""
    x = torch.rand(shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo
    tiny = 1e-3 * (hi - lo)
    x = torch.where(x.abs() < tiny, torch.full_like(x, tiny), x)
    return x.to(device=device, dtype=dtype)


class Tensors:
    """One layer's engine tensors for `slots` slots and B rows on `device`."""

    def __init__(self, gate, B, slots, ring_dtype, io_dtype, device, gen):
        H, HV, K, V = SHAPES[gate]
        G = K if gate == "kda" else 1
        self.gate, self.B, self.slots = gate, B, slots
        self.state = rand((slots, HV, V, K), -0.05, 0.05, torch.float32, device, gen)
        self.d_cache = torch.zeros((slots, HV, L, V), dtype=ring_dtype, device=device)
        self.k_cache = torch.zeros((slots, H, L, K), dtype=ring_dtype, device=device)
        g_shape = (slots, HV, L, K) if gate == "kda" else (slots, HV, L)
        self.g_cache = torch.zeros(g_shape, dtype=torch.float32, device=device)
        self.A_log = rand((HV,), -1.0, 0.5, torch.float32, device, gen)
        self.dt_bias = rand((HV * G,), -1.0, 1.0, torch.float32, device, gen)
        self.mixed_qkv = torch.zeros((B, 2 * H * K + HV * V), dtype=io_dtype, device=device)
        self.a = torch.zeros((B, HV * G), dtype=io_dtype, device=device)
        self.b = torch.zeros((B, HV), dtype=io_dtype, device=device)
        self.out = torch.zeros((B, HV, V), dtype=io_dtype, device=device)
        self.idx = torch.zeros((B,), dtype=torch.int32, device=device)
        self.write_pos = torch.zeros((B,), dtype=torch.int32, device=device)
        self.force = torch.zeros((B,), dtype=torch.int32, device=device)
        self.cursor = torch.zeros((slots,), dtype=torch.int32, device=device)

    def copy_from(self, other: "Tensors") -> None:
        for name in ("state", "d_cache", "k_cache", "g_cache", "A_log", "dt_bias", "cursor"):
            getattr(self, name).copy_(getattr(other, name))

    def step_inputs(self, step, gen, idx, snapshot):
        """The step's inputs, written in place (the graph reads these buffers)."""
        io = self.mixed_qkv.dtype
        self.mixed_qkv.copy_(rand(self.mixed_qkv.shape, -1.0, 1.0, io, "cpu", gen))
        if GATE_MODE == "precomputed":  # g <= 0 and beta in (0, 1), as the C API asks
            self.a.copy_(rand(self.a.shape, -3.0, -0.01, io, "cpu", gen))
            self.b.copy_(rand(self.b.shape, 0.05, 0.95, io, "cpu", gen))
        else:  # raw projections a and b
            self.a.copy_(rand(self.a.shape, -3.0, 3.0, io, "cpu", gen))
            self.b.copy_(rand(self.b.shape, -3.0, 3.0, io, "cpu", gen))
        self.idx.copy_(idx)
        # a snapshot every `snapshot` steps of a row's sequence, part way round its ring
        seq = torch.arange(self.B, dtype=torch.int32) * 3 + step
        self.force.copy_((seq % snapshot == 0).to(torch.int32))

    def decode(self, backend):
        # the engine's per-row write_pos buffer, refreshed from its per-slot cursor
        # (a padding row's write_pos is not read: any slot's will do)
        torch.index_select(self.cursor, 0, self.idx.clamp(min=0).long(), out=self.write_pos)
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            self.mixed_qkv, self.a, self.b, self.A_log, self.dt_bias, None, self.state, self.d_cache,
            self.k_cache, self.g_cache, self.out, self.idx, self.write_pos, force_flush=self.force,
            gate_kind=self.gate, **gate_args(), use_qk_l2norm_in_kernel=True, backend=backend, max_rows=self.B)
        rssm.advance(self.cursor, self.idx, self.write_pos, self.force, ring_len=L, backend=backend)


def rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double().cpu(), ref.double().cpu()
    if not torch.isfinite(x).all():
        return math.inf
    return float((x - ref).norm() / max(float(ref.norm()), 1e-30))


def check(gate, B, ring_dtype, io_dtype, tol_out, tol_state, steps=2 * L + 3):
    """The CUDA op in a captured graph against the cpu backend, step by step."""
    gen = torch.Generator().manual_seed(1234 + B)
    slots = 2 * B + 3
    gpu = Tensors(gate, B, slots, ring_dtype, io_dtype, "cuda", gen)
    cpu = Tensors(gate, B, slots, ring_dtype, io_dtype, "cpu", gen)
    cpu.copy_from(gpu)
    # rows on scattered slots; the last row, when B > 1, is padding
    perm = torch.randperm(slots, generator=gen)[:B].to(torch.int32)
    if B > 1:
        perm[-1] = -1
    gpu.step_inputs(0, torch.Generator().manual_seed(7), perm, 5)
    gpu.decode("cuda")  # creates the layer object outside capture
    torch.cuda.synchronize()
    gpu.copy_from(cpu)  # back to the start: the warm-up step wrote its rings
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gpu.decode("cuda")
    worst_out, worst_state = 0.0, 0.0
    for step in range(steps):
        seed = 100 + step
        gpu.step_inputs(step, torch.Generator().manual_seed(seed), perm, 5)
        cpu.step_inputs(step, torch.Generator().manual_seed(seed), perm, 5)
        graph.replay()
        cpu.decode("cpu")
        torch.cuda.synchronize()
        worst_out = max(worst_out, rel_l2(gpu.out, cpu.out))
        if B > 1 and gpu.out[-1].abs().max().item() != 0.0:
            worst_out = math.inf  # the padding row's output must be zero
    torch.cuda.synchronize()
    assert torch.equal(gpu.cursor.cpu(), cpu.cursor), "cursors differ"
    worst_state = rel_l2(gpu.state, cpu.state)
    for name in ("d_cache", "k_cache", "g_cache"):
        worst_state = max(worst_state, rel_l2(getattr(gpu, name), getattr(cpu, name)))
    ok = worst_out <= tol_out and worst_state <= tol_state
    return {"gate": gate, "batch": B, "ring": str(ring_dtype).split(".")[-1], "io": str(io_dtype).split(".")[-1],
            "steps": steps, "out_err": worst_out, "state_err": worst_state, "tol_out": tol_out,
            "tol_state": tol_state, "ok": ok}


def host_overhead(t, gate, B, calls=200):
    """Host microseconds per layer call, eagerly, without waiting for the
    GPU: through the torch op, through rssm's Python entry without the op,
    and of the C call alone (rssm_layer_run through ctypes, its arguments
    as the entry prepared them). Fewer calls than the launch queue holds,
    so no call waits for the GPU to make room."""
    def op():
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            t.mixed_qkv, t.a, t.b, t.A_log, t.dt_bias, None, t.state, t.d_cache, t.k_cache, t.g_cache, t.out,
            t.idx, t.write_pos, force_flush=t.force, gate_kind=gate, **gate_args(), backend="cuda", max_rows=B)

    def entry():
        rssm.replayssm.decode(t.mixed_qkv, t.a, t.b, t.A_log, t.dt_bias, None, t.state, t.d_cache, t.k_cache,
                              t.g_cache, t.out, t.idx, t.write_pos, t.force, gate_kind=gate, **gate_args(),
                              backend="cuda", max_rows=B)

    lib = rssm._lib.lib()
    real = lib.rssm_layer_run
    seen = {}

    def spy(*args):
        seen["args"] = args
        return real(*args)

    lib.rssm_layer_run = spy
    try:
        entry()
    finally:
        lib.rssm_layer_run = real
    args = seen["args"]

    def c_call():
        real(*args)

    out = {}
    for name, fn in (("op", op), ("entry", entry), ("c", c_call)):
        fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        out[name] = (time.perf_counter() - start) / calls * 1e6
        torch.cuda.synchronize()
    return out




def kernel_profile(graph, replays=3):
    """The kernels `replays` replays of `graph` ran, by name: count per
    replay and mean device us (torch.profiler's CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        n, us = rows.get(e.name, (0, 0.0))
        rows[e.name] = (n + 1, us + e.time_range.elapsed_us())
    return sorted(((name, n / replays, us / n) for name, (n, us) in rows.items()), key=lambda r: -r[1] * r[2])


def timing(gate, B, reps=20, profile_kernels=False):
    """Host overhead of one eager layer call, and the kernel time per layer
    of a graph of L steps over enough layers that a step touches STATE_MIB,
    as an engine's step runs: the rows' write_pos refreshed once from the
    per-slot cursor, every layer, the cursor advance once."""
    H, HV, K, V = SHAPES[gate]
    gen = torch.Generator().manual_seed(99)
    per_layer = B * HV * V * K * 4
    layers = max(1, math.ceil(STATE_MIB * (1 << 20) / per_layer))
    ts = [Tensors(gate, B, B, torch.bfloat16, torch.bfloat16, "cuda", gen) for _ in range(layers)]
    for t in ts[1:]:  # one step's rows, shared by its layers
        t.idx, t.write_pos, t.force, t.cursor = ts[0].idx, ts[0].write_pos, ts[0].force, ts[0].cursor
    idx = torch.arange(B, dtype=torch.int32)
    for t in ts:
        t.step_inputs(0, gen, idx, 1 << 30)
    t0 = ts[0]
    t0.decode("cuda")
    torch.cuda.synchronize()
    host = host_overhead(t0, gate, B)
    t0.cursor.zero_()  # the calls above appended at one position, moving no cursor
    t0.force.zero_()  # uniform positions, as rssm bench's: the rows flush together at L - 1

    def step():
        torch.index_select(t0.cursor, 0, t0.idx.long(), out=t0.write_pos)
        for t in ts:
            rssm.fused_recurrent_gated_delta_rule_replayssm(
                t.mixed_qkv, t.a, t.b, t.A_log, t.dt_bias, None, t.state, t.d_cache, t.k_cache, t.g_cache,
                t.out, t.idx, t.write_pos, force_flush=t.force, gate_kind=gate, **gate_args(), backend="cuda",
                max_rows=B)
        rssm.advance(t0.cursor, t0.idx, t0.write_pos, t0.force, ring_len=L, backend="cuda")

    def graph_us(body):
        graph = captured_warm(body, WARMUP_S)
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            ev0.record()
            graph.replay()
            ev1.record()
            torch.cuda.synchronize()
            times.append(ev0.elapsed_time(ev1) * 1e3)
        times.sort()
        if profile_kernels:
            kernels[body.__name__] = kernel_profile(graph)
        return times[len(times) // 2] / L / layers

    kernels = {}

    # As rssm bench times it: a ring cycle of L steps of the layers alone,
    # step s's rows at ring position s (the flush at L - 1)
    positions = [torch.full((B,), s, dtype=torch.int32, device="cuda") for s in range(L)]
    no_force = torch.zeros((B,), dtype=torch.int32, device="cuda")

    def layers_only():
        for s in range(L):
            for t in ts:
                rssm.fused_recurrent_gated_delta_rule_replayssm(
                    t.mixed_qkv, t.a, t.b, t.A_log, t.dt_bias, None, t.state, t.d_cache, t.k_cache, t.g_cache,
                    t.out, t.idx, positions[s], force_flush=no_force, gate_kind=gate, **gate_args(),
                    backend="cuda", max_rows=B)

    def engine_steps():  # and as an engine's steps run, cursor refresh and advance included
        for _ in range(L):
            step()

    layer_us = graph_us(layers_only)
    step_us = graph_us(engine_steps)
    return {"gate": gate, "batch": B, "layers": layers, "host_us_op": host["op"], "host_us_entry": host["entry"],
            "host_us_c": host["c"], "graph_us_per_layer": layer_us, "engine_step_us_per_layer": step_us,
            "kernels": kernels}


def bench_reference(cli, gate, B):
    """rssm bench's replay us per layer for the same shape (bf16 io and ring,
    fp32 state, uniform positions), or None without a CLI."""
    if not cli:
        return None
    prefix = f"/tmp/rssm-layer-check-{gate}-{B}"
    cmd = [cli, "bench", "--backend", "cuda", "--batch", str(B), "--ring-len", str(L), "--gate", gate,
           "--state", "fp32", "--ring-dtype", "bf16", "--io", "bf16", "--gate-mode", GATE_MODE, "--positions",
           "uniform", "--cycles", "5", "--out", prefix]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(prefix + ".json") as f:
        row = json.load(f)["rows"][0]
    return row["replay_us"] / row["layers"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", help="the rssm CLI of the same build, for rssm bench's reference times")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="where layer_check.json goes")
    ap.add_argument("--quick", action="store_true", help="the checks at batch 16 alone (for compute-sanitizer)")
    ap.add_argument("--gate-mode", choices=("raw", "raw-safe", "precomputed"), default="raw",
                    help="the op's gate mode and rssm bench's (default raw: vLLM's a and b)")
    ap.add_argument("--no-checks", action="store_true", help="timing alone")
    ap.add_argument("--profile", action="store_true", help="list the kernels each timed graph ran")
    ap.add_argument("--batch", type=int, nargs="+", default=[16, 256], help="timed batches (default 16 256)")
    args = ap.parse_args()
    global GATE_MODE
    GATE_MODE = args.gate_mode
    print(f"rssm {rssm.__version__} from {rssm.library_path()}; torch {torch.__version__}; "
          f"{torch.cuda.get_device_name()}")
    checks = []
    for gate in () if args.no_checks else ("gdn", "kda"):
        for B in ((16,) if args.quick else (16, 256)):
            # exact: fp32 io and ring, against the cpu backend to fp32 rounding
            checks.append(check(gate, B, torch.float32, torch.float32, 1e-5, 1e-5))
            # as engines run it: bf16 io, a and b, ring (bf16 rounding of the outputs)
            checks.append(check(gate, B, torch.bfloat16, torch.bfloat16, 1e-2, 1e-2))
    times = []
    for gate in (() if args.quick else ("gdn", "kda")):
        for B in args.batch:
            t = timing(gate, B, profile_kernels=args.profile)
            t["bench_us_per_layer"] = bench_reference(args.cli, gate, B)
            times.append(t)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "layer_check.json"), "w") as f:
        json.dump({"checks": checks, "timing": times}, f, indent=1)

    print("\ncheck: the CUDA op in a captured graph against the cpu backend")
    print(f"{'gate':5} {'batch':>5} {'ring':>9} {'io':>9} {'out err':>9} {'state err':>9}  result")
    for c in checks:
        print(f"{c['gate']:5} {c['batch']:5} {c['ring']:>9} {c['io']:>9} {c['out_err']:9.2e} "
              f"{c['state_err']:9.2e}  {'PASS' if c['ok'] else 'FAIL'}")
    for t in times if args.profile else ():
        for graph, rows in t["kernels"].items():
            print(f"\nkernels of one replay of {t['gate']} batch {t['batch']}'s {graph} graph "
                  f"({t['layers']} layers x {L} steps): per replay, mean us")
            for name, n, us in rows[:8]:
                print(f"  {n:7.1f} x {us:8.2f}  {name[:100]}")
    print(f"\ntiming (bf16 io and ring, fp32 state, L = 16, uniform positions, {GATE_MODE} gates)")
    print("host us per call, eager: through the torch op / rssm's Python entry / the C call")
    print("graph us/layer: the layers alone, as rssm bench; engine: with the cursor refresh and advance")
    print(f"{'gate':5} {'batch':>5} {'layers':>6} {'host us: op / entry / C':>24} {'graph us/layer':>14} "
          f"{'bench us/layer':>14} {'ratio':>6} {'engine us/layer':>15}")
    for t in times:
        ref = t["bench_us_per_layer"]
        ratio = f"{t['graph_us_per_layer'] / ref:6.3f}" if ref else "     -"
        ref_s = f"{ref:14.2f}" if ref else f"{'-':>14}"
        host = f"{t['host_us_op']:.1f} / {t['host_us_entry']:.1f} / {t['host_us_c']:.1f}"
        print(f"{t['gate']:5} {t['batch']:5} {t['layers']:6} {host:>24} {t['graph_us_per_layer']:14.2f} {ref_s} {ratio} "
              f"{t['engine_step_us_per_layer']:15.2f}")
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
