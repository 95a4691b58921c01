#!/usr/bin/env python3
"""The benchmark of record: rssm's per-layer entry called from torch inside a
captured CUDA graph, as an engine calls it, for every shape of the H200 table.

Per (gate, state dtype, batch): the layers an engine would run, each on its
own tensors in vLLM's layouts (a [slots, HV, V, K] state, rings of L entries,
q/k/v packed in mixed_qkv, bf16 activations and raw gates a and b, softplus,
sigmoid and the q/k L2 norm in the kernel), enough of them that one step
touches at least --state-mib of state (so >= 256 MiB of other state passes
between two visits to a slot), rows on a random permutation of the slots and
a fresh random input set for every step of the cycle. Timed, each as one
torch CUDA graph replayed back to back (untimed until the clocks are up, then
--reps times, median):

  packed     L steps of the packed decode (replay off: rssm.Layer.run)
  uniform    one ring cycle of L steps, every row at ring position s in step s
             (the flush at L - 1), through rssm.fused_recurrent_gated_delta_rule_replayssm
  staggered  one cycle with row r at position (s + r) mod L (the steady state
             of rssm's staggered flushes: about B / L flushes per step)
  empty, full, flush   L steps at one position (0, L - 2, L - 1)
  inplace    one pass per layer that reads and writes back its state tensor
             (torch's bitwise_not_ on the words: no packed decode can beat it)
  copy       the device-to-device copy bandwidth (bytes read + written)

All in us per step per layer. With --cli, `rssm bench` of the same build
times the same shapes in the same run (its own harness: rssm's pool, the
recorded step programs; its in-place bound is rssm's own pass, the fastest of
four launch shapes), and both go into the JSON with a "harness" key
("torch-graph", "cli"); the table flags a shape where the two differ by more
than 2%. --sm-limit N plans rssm's kernels and the CLI's in-place bound for N
multiprocessors (rssm_backend_limit_sms), for an H20-shaped run on an H200
under CUDA MPS (docs/bench.md). From the repository root on the GPU machine:

    PYTHONPATH=python RSSM_LIBRARY=BUILD/librssm.so \\
        python3 bench/decode_graph.py --cli BUILD/rssm --out DIR

(bench/run.sh's stage `time` runs it so.) Writes DIR/decode_graph.json
(DIR/decode_graph-TAG.json with --tag) and prints the table last.
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
from benchlib import L, SHAPES, WARMUP_S, Timer, cli_rows, copy_gbs, repo_commit, uniform

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
KINDS = ("packed", "uniform", "staggered", "empty", "full", "flush", "inplace")


class LayerTensors:
    """One layer's engine tensors: B slots of state and rings, and `sets`
    input sets (one per step of a cycle)."""

    def __init__(self, gate, state_dtype, ring_dtype, B, sets, gen):
        H, HV, K, V = SHAPES[gate]
        G = K if gate == "kda" else 1
        self.gate = gate
        self.state = uniform((B, HV, V, K), -0.05, 0.05, DTYPES[state_dtype], gen)
        self.d_cache = uniform((B, HV, L, V), -0.1, 0.1, DTYPES[ring_dtype], gen)
        self.k_cache = uniform((B, H, L, K), -0.1, 0.1, DTYPES[ring_dtype], gen)
        self.g_cache = uniform((B, HV, L, K) if gate == "kda" else (B, HV, L), -0.5, -0.01, torch.float32, gen)
        self.A_log = uniform((HV,), -1.0, 0.5, torch.float32, gen)
        self.dt_bias = uniform((HV * G,), -1.0, 1.0, torch.float32, gen)
        self.mixed_qkv = [uniform((B, 2 * H * K + HV * V), -1.0, 1.0, torch.bfloat16, gen) for _ in range(sets)]
        self.a = [uniform((B, HV * G), -3.0, 3.0, torch.bfloat16, gen) for _ in range(sets)]
        self.b = [uniform((B, HV), -3.0, 3.0, torch.bfloat16, gen) for _ in range(sets)]
        self.out = torch.empty((B, HV, V), dtype=torch.bfloat16, device="cuda")

    def replay(self, s, idx, write_pos, force, backend):
        """Step s of a cycle through the engine entry (vLLM's argument names)."""
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            self.mixed_qkv[s % len(self.mixed_qkv)], self.a[s % len(self.a)], self.b[s % len(self.b)], self.A_log,
            self.dt_bias, None, self.state, self.d_cache, self.k_cache, self.g_cache, self.out, idx, write_pos,
            force_flush=force, gate_kind=self.gate, gate_mode="raw", use_qk_l2norm_in_kernel=True, backend=backend,
            ring_len=L, max_rows=idx.shape[0])

    def packed(self, layer, s, idx, zero):
        """Step s of the packed decode: the same tensors, replay off."""
        H, HV, K, V = SHAPES[self.gate]
        x = self.mixed_qkv[s % len(self.mixed_qkv)]
        layer.run(q=x[:, :H * K], k=x[:, H * K:2 * H * K], v=x[:, 2 * H * K:], gate=self.a[s % len(self.a)],
                  beta=self.b[s % len(self.b)], out=self.out, state=self.state, slot_index=idx, write_pos=zero,
                  A_log=self.A_log, dt_bias=self.dt_bias)


def packed_layer(gate, state_dtype, B, backend):
    """The layer object of the packed decode on LayerTensors' layouts."""
    H, HV, K, V = SHAPES[gate]
    return rssm.Layer(rssm.LayerDesc(
        num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=B, max_rows=B, ring_len=L, gate_kind=gate,
        gate_mode="raw", replay=False, state_dtype=state_dtype, io_dtype="bf16", gate_dtype="bf16",
        qk_l2norm=True, q_row_stride=2 * H * K + HV * V, k_row_stride=2 * H * K + HV * V,
        v_row_stride=2 * H * K + HV * V), backend)


def layers_for(gate, state_dtype, B, state_mib):
    """How many layers (tensor sets) one step runs so that it touches at least
    state_mib MiB of state."""
    H, HV, K, V = SHAPES[gate]
    per_layer = B * HV * V * K * (4 if state_dtype == "fp32" else 2)
    return max(1, math.ceil(state_mib * (1 << 20) / per_layer))


def common_args(ap, batches, warmup):
    """The options this harness and bench/verify_graph.py share."""
    lst = lambda s: [x for x in s.split(",") if x]
    ap.add_argument("--gates", type=lst, default=["gdn", "kda"])
    ap.add_argument("--states", type=lst, default=["fp32", "bf16"])
    ap.add_argument("--batches", type=lambda s: [int(x) for x in lst(s)], default=batches)
    ap.add_argument("--backend", default="cuda", help="rssm backend name (default cuda: the plan's kernels)")
    ap.add_argument("--ring-dtype", default="bf16", choices=("bf16", "fp16", "fp32"),
                    help="ring dtype (default bf16, vLLM's and SGLang's)")
    ap.add_argument("--state-mib", type=int, default=256, help="state touched per step, MiB (default 256)")
    ap.add_argument("--reps", type=int, default=10, help="timed replays per graph (median; default 10)")
    ap.add_argument("--warmup", type=float, default=warmup,
                    help=f"untimed replays of each graph after the first, seconds (default {warmup})")
    ap.add_argument("--tag", default="", help="suffix of the output files")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    return lst


def time_shape(gate, state_dtype, B, args, timer, gen):
    """Every kind of args.kinds for one shape; us per step per layer."""
    layers = layers_for(gate, state_dtype, B, args.state_mib)
    ts = [LayerTensors(gate, state_dtype, args.ring_dtype, B, 1 if args.inputs == "same" else L, gen)
          for _ in range(layers)]
    idx = (torch.randperm(B, device="cuda", generator=gen) if args.slots == "random"
           else torch.arange(B, device="cuda")).to(torch.int32)
    zero = torch.zeros(B, dtype=torch.int32, device="cuda")
    rows = torch.arange(B, dtype=torch.int32, device="cuda")
    pos = {
        "uniform": [torch.full((B,), s, dtype=torch.int32, device="cuda") for s in range(L)],
        "staggered": [((rows + s) % L).to(torch.int32) for s in range(L)],
        "empty": [zero] * L,
        "full": [torch.full((B,), L - 2, dtype=torch.int32, device="cuda")] * L,
        "flush": [torch.full((B,), L - 1, dtype=torch.int32, device="cuda")] * L,
    }
    # the layer objects are made outside the capture: one eager step each
    # (at --eager-pos, for a profiler that takes the first launches)
    eager = torch.full((B,), args.eager_pos, dtype=torch.int32, device="cuda")
    for t in ts:
        t.replay(0, idx, eager, zero, args.backend)
    packed = packed_layer(gate, state_dtype, B, args.backend) if "packed" in args.kinds else None
    if packed is not None:
        for t in ts:
            t.packed(packed, 0, idx, zero)
    torch.cuda.synchronize()

    out = {"layers": layers}
    for kind in args.kinds:
        if kind == "packed":
            body = lambda: [t.packed(packed, s, idx, zero) for s in range(L) for t in ts]
            steps = L
        elif kind == "inplace":
            words = [t.state.view(torch.int32) for t in ts]
            body = lambda: [w.bitwise_not_() for w in words]
            steps = 1
        else:
            p = pos[kind]
            body = lambda: [t.replay(s, idx, p[s], zero, args.backend) for s in range(L) for t in ts]
            steps = L
        us, fastest = timer(body)
        out[f"{kind}_us"] = us / steps / layers
        out[f"{kind}_min_us"] = fastest / steps / layers
    del ts, packed
    torch.cuda.empty_cache()
    return out


def cli_run(args, gate, state_dtype):
    """rssm bench's rows for one gate and state dtype over every batch, per layer."""
    prefix = os.path.join(args.out, f"cli-{gate}-{state_dtype}{'-' + args.tag if args.tag else ''}")
    cmd = [args.cli, "bench", "--backend", args.backend, "--gate", gate, "--state", state_dtype, "--batch",
           ",".join(map(str, args.batches)), "--ring-len", str(L), "--ring-dtype", args.ring_dtype, "--io", "bf16",
           "--gate-mode", "raw", "--positions", "uniform,staggered", "--cycles", "5", "--state-mib",
           str(args.state_mib), "--out", prefix]
    if args.sm_limit:
        cmd += ["--sm-limit", str(args.sm_limit)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(prefix + ".txt", "w") as f:
        f.write(r.stdout)
    if r.returncode != 0 or not os.path.exists(prefix + ".json"):
        print(f"rssm bench failed (rc {r.returncode}): {r.stdout[-400:]}", file=sys.stderr)
        return []
    with open(prefix + ".json") as f:
        return cli_rows(json.load(f))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    lst = common_args(ap, [1, 4, 8, 16, 64, 128, 256, 512], WARMUP_S)
    ap.add_argument("--kinds", type=lst, default=list(KINDS), help=f"what to time (default all: {','.join(KINDS)})")
    ap.add_argument("--slots", choices=("random", "ordered"), default="random",
                    help="rows on a random permutation of the slots (default) or in order")
    ap.add_argument("--inputs", choices=("fresh", "same"), default="fresh",
                    help="a new input set for every step of a cycle (default), or one for all")
    ap.add_argument("--eager-pos", type=int, default=0,
                    help="ring position of the eager step before capture (for a profiler's first launches)")
    ap.add_argument("--sm-limit", type=int, default=0, help="plan for N multiprocessors (rssm_backend_limit_sms)")
    ap.add_argument("--cli", help="the rssm CLI of the same build: also time the shapes with rssm bench")
    args = ap.parse_args()
    for k in args.kinds:
        if k not in KINDS:
            ap.error(f"--kinds: unknown kind {k!r}")
    if not 0 <= args.eager_pos < L:
        ap.error(f"--eager-pos must be in 0..{L - 1}")
    os.makedirs(args.out, exist_ok=True)
    if args.sm_limit:
        rssm.backend(args.backend).limit_sms(args.sm_limit)
    props = torch.cuda.get_device_properties(0)
    info = {"device": torch.cuda.get_device_name(), "sms": props.multi_processor_count, "torch": torch.__version__,
            "commit": repo_commit(), "command": " ".join(["bench/decode_graph.py"] + sys.argv[1:]),
            "rssm": rssm.__version__, "backend": args.backend, "ring_dtype": args.ring_dtype,
            "state_mib": args.state_mib, "reps": args.reps, "warmup_s": args.warmup, "slots": args.slots,
            "inputs": args.inputs, "sm_limit": args.sm_limit,
            "mps_thread_percentage": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
            "stream_prologue": os.environ.get("RSSM_CUDA_STREAM_PROLOGUE")}
    print(" ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    timer = Timer(args.reps, args.warmup)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    info["copy_gbs"] = copy_gbs(timer)
    rows = []
    name = os.path.join(args.out, f"decode_graph{'-' + args.tag if args.tag else ''}.json")

    def save():  # after every shape, so a run stopped part way keeps what it measured
        with open(name, "w") as f:
            json.dump({"info": info, "rows": rows}, f, indent=1)

    for gate in args.gates:
        for state_dtype in args.states:
            for B in args.batches:
                t0 = time.perf_counter()
                m = time_shape(gate, state_dtype, B, args, timer, gen)
                for positions in ("uniform", "staggered"):
                    if positions not in args.kinds and not (positions == "uniform" and "empty" in args.kinds):
                        continue
                    row = {"harness": "torch-graph", "gate": gate, "state": state_dtype, "batch": B,
                           "positions": positions, "layers": m["layers"], "packed_us": m.get("packed_us"),
                           "replay_us": m.get(f"{positions}_us"), "inplace_us": m.get("inplace_us"),
                           "copy_gbs": info["copy_gbs"]}
                    for k in ("empty", "full", "flush"):
                        row[f"{k}_us"] = m.get(f"{k}_us") if positions == "uniform" else None
                    row["min_us"] = {k: v for k, v in m.items() if k.endswith("_min_us")}
                    rows.append(row)
                print(f"{gate} {state_dtype} B={B}: {m['layers']} layers, "
                      + " ".join(f"{k[:-3]} {v:.2f}" for k, v in m.items() if k.endswith("_us") and "min" not in k)
                      + f" ({time.perf_counter() - t0:.1f} s)", flush=True)
                save()
            if args.cli:
                rows += cli_run(args, gate, state_dtype)
                save()

    cli_copy = max((r["copy_gbs"] for r in rows if r["harness"] == "cli"), default=None)
    print(f"\nus per step per layer (torch graph; [cli] where rssm bench differs by more than 2%); copy "
          f"{info['copy_gbs']:.0f} GB/s (torch's copy_){f', {cli_copy:.0f} GB/s (rssm bench)' if cli_copy else ''}")
    print(f"{'gate':4} {'state':5} {'B':>4} {'pos':9} {'packed':>8} {'replay':>8} {'empty':>7} {'full':>7} "
          f"{'flush':>7} {'inplace':>8} {'%inpl':>6}  cli differs")
    cli = {(r["gate"], r["state"], r["batch"], r["positions"]): r for r in rows if r["harness"] == "cli"}
    fmt = lambda v, w: f"{v:{w}.2f}" if v is not None else f"{'-':>{w}}"
    for r in (r for r in rows if r["harness"] == "torch-graph"):
        c = cli.get((r["gate"], r["state"], r["batch"], r["positions"]))
        bounds = [x for x in (r["inplace_us"], c["inplace_us"] if c else None) if x]
        inpl = min(bounds) if bounds else None  # the stronger of torch's pass and rssm's
        pct = f"{100 * inpl / r['packed_us']:6.1f}" if inpl and r["packed_us"] else f"{'-':>6}"
        diffs = []
        for k in ("packed_us", "replay_us", "empty_us", "full_us", "flush_us"):
            if c and r.get(k) and c.get(k) and abs(r[k] / c[k] - 1) > 0.02:
                diffs.append(f"{k[:-3]} {c[k]:.2f} ({r[k] / c[k]:.3f}x)")
        print(f"{r['gate']:4} {r['state']:5} {r['batch']:4} {r['positions']:9} {fmt(r['packed_us'], 8)} "
              f"{fmt(r['replay_us'], 8)} {fmt(r['empty_us'], 7)} {fmt(r['full_us'], 7)} {fmt(r['flush_us'], 7)} "
              f"{fmt(inpl, 8)} {pct}  {'; '.join(diffs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
