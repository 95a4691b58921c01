#!/usr/bin/env python3
"""Speculative-decode windows as an engine runs them: rssm's per-layer verify
(rssm.Layer.verify, docs/design.md §9) called from torch inside captured CUDA
graphs, beside the replay step of the same layers (bench/decode_graph.py's
tensors: vLLM's layouts, bf16 activations, raw gates, rows on a random
permutation of the slots, >= --state-mib of state per step).

Per (gate, state dtype, batch, T), all in us per layer:

  replay   one step of the uniform ring cycle (flushes included), the engine
           entry rssm.fused_recurrent_gated_delta_rule_replayssm
  window   one window of T draft tokens at ring position n, averaged over the
           positions a cycle at 100% acceptance visits (n = 0, T, 2T, ...
           while n + T <= L - 1); the fold is not in it
  fold     rssm.Layer.materialise of a ring of the last window's n + T entries
           (what the engine runs when the next window would not fit)
  token    (the cycle's windows + one fold) / its accepted tokens, at 100%

The window's inputs are token-major (token t of row r at row t * B + r), one
fresh set per window of the cycle. From the repository root on the GPU machine:

    PYTHONPATH=python RSSM_LIBRARY=BUILD/librssm.so \\
        python3 bench/verify_graph.py --out DIR

(bench/run.sh's stage `verify` runs it so.) Writes DIR/verify_graph.json
(DIR/verify_graph-TAG.json with --tag) and prints
the table last, with the ratios the targets are stated in.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

import rssm
from benchlib import L, SHAPES, Timer, copy_gbs, repo_commit, uniform
from decode_graph import DTYPES, LayerTensors, common_args, layers_for


def window_layer(gate, state_dtype, ring_dtype, B, T, backend):
    """The replay layer object of LayerTensors' layouts (B slots, rings of L
    entries as vLLM's caches hold them), for windows of T tokens (T * B
    step-array rows)."""
    H, HV, K, V = SHAPES[gate]
    G = K if gate == "kda" else 1
    stride = 2 * H * K + HV * V
    rings = dict(ring_d_slot_stride=HV * L * V, ring_d_head_stride=L * V, ring_k_slot_stride=H * L * K,
                 ring_k_head_stride=L * K, ring_g_slot_stride=HV * L * G, ring_g_head_stride=L * G)
    return rssm.Layer(rssm.LayerDesc(
        num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=B, max_rows=T * B, ring_len=L, gate_kind=gate,
        gate_mode="raw", replay=True, state_dtype=state_dtype, ring_dtype=ring_dtype, io_dtype="bf16",
        gate_dtype="bf16", qk_l2norm=True, q_row_stride=stride, k_row_stride=stride, v_row_stride=stride, **rings), backend)


def positions(T):
    """Window bases of a ring cycle at 100% acceptance."""
    return list(range(0, L - T, T))


def time_shape(gate, state_dtype, B, Ts, args, timer, gen):
    H, HV, K, V = SHAPES[gate]
    G = K if gate == "kda" else 1
    layers = layers_for(gate, state_dtype, B, args.state_mib)
    ts = [LayerTensors(gate, state_dtype, args.ring_dtype, B, L, gen) for _ in range(layers)]
    idx = torch.randperm(B, device="cuda", generator=gen).to(torch.int32)
    zero = torch.zeros(B, dtype=torch.int32, device="cuda")
    for t in ts:  # layer objects are made outside the capture
        t.replay(0, idx, zero, zero, args.backend)
    torch.cuda.synchronize()
    steps = [torch.full((B,), s, dtype=torch.int32, device="cuda") for s in range(L)]
    us, _ = timer(lambda: [t.replay(s, idx, steps[s], zero, args.backend) for s in range(L) for t in ts])
    res = {"layers": layers, "replay_us": us / L / layers, "windows": {}}

    for T in Ts:
        ns = positions(T)
        layer = window_layer(gate, state_dtype, args.ring_dtype, B, T, args.backend)
        qkv = [uniform((T * B, 2 * H * K + HV * V), -1.0, 1.0, torch.bfloat16, gen) for _ in ns]
        a = [uniform((T * B, HV * G), -3.0, 3.0, torch.bfloat16, gen) for _ in ns]
        b = [uniform((T * B, HV), -3.0, 3.0, torch.bfloat16, gen) for _ in ns]
        out = torch.empty((T * B, HV, V), dtype=torch.bfloat16, device="cuda")
        drafts = torch.full((B,), T, dtype=torch.int32, device="cuda")
        base = {n: torch.full((B,), n, dtype=torch.int32, device="cuda") for n in ns}
        full = torch.full((B,), ns[-1] + T, dtype=torch.int32, device="cuda")

        def window(i, n, t):
            x = qkv[i]
            layer.verify(drafts=drafts, q=x[:, :H * K], k=x[:, H * K:2 * H * K], v=x[:, 2 * H * K:], gate=a[i],
                         beta=b[i], out=out, state=t.state, ring_d=t.d_cache, ring_k=t.k_cache, ring_g=t.g_cache,
                         slot_index=idx, write_pos=base[n], A_log=t.A_log, dt_bias=t.dt_bias)

        def fold(t):
            layer.materialise(state=t.state, ring_d=t.d_cache, ring_k=t.k_cache, ring_g=t.g_cache, slot_index=idx,
                              write_pos=full)

        for t in ts:
            window(0, ns[0], t)
        torch.cuda.synchronize()
        w_us, _ = timer(lambda: [window(i, n, t) for i, n in enumerate(ns) for t in ts])
        f_us, _ = timer(lambda: [fold(t) for t in ts])
        w = w_us / len(ns) / layers
        f = f_us / layers
        res["windows"][T] = {"positions": ns, "window_us": w, "fold_us": f,
                             "token_us": (w * len(ns) + f) / (len(ns) * T)}
        del layer, qkv, a, b, out
    del ts
    torch.cuda.empty_cache()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    lst = common_args(ap, [1, 16, 64, 256], 0.3)
    ap.add_argument("--drafts", type=lambda s: [int(x) for x in lst(s)], default=[2, 4, 8],
                    help="window lengths T (default 2,4,8; at most L - 1)")
    args = ap.parse_args()
    for T in args.drafts:
        if not 1 <= T <= L - 1:
            ap.error(f"--drafts: {T} is not in 1..{L - 1}")
    for s in args.states:
        if s not in DTYPES:
            ap.error(f"--states: unknown dtype {s!r}")
    os.makedirs(args.out, exist_ok=True)
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rssm": rssm.__version__,
            "commit": repo_commit(), "command": " ".join(["bench/verify_graph.py"] + sys.argv[1:]),
            "backend": args.backend, "ring_dtype": args.ring_dtype, "state_mib": args.state_mib, "reps": args.reps,
            "ring_len": L}
    print(" ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    timer = Timer(args.reps, args.warmup)
    gen = torch.Generator(device="cuda").manual_seed(4321)
    info["copy_gbs"] = copy_gbs(timer)
    rows = []
    name = os.path.join(args.out, f"verify_graph{'-' + args.tag if args.tag else ''}.json")
    for gate in args.gates:
        for state_dtype in args.states:
            for B in args.batches:
                t0 = time.perf_counter()
                m = time_shape(gate, state_dtype, B, args.drafts, args, timer, gen)
                for T, w in m["windows"].items():
                    rows.append({"harness": "torch-graph", "gate": gate, "state": state_dtype, "batch": B, "T": T,
                                 "layers": m["layers"], "replay_us": m["replay_us"], **w})
                print(f"{gate} {state_dtype} B={B}: replay {m['replay_us']:.2f} "
                      + " ".join(f"T={T} {w['window_us']:.2f}" for T, w in m["windows"].items())
                      + f" ({time.perf_counter() - t0:.1f} s)", flush=True)
                with open(name, "w") as f:
                    json.dump({"info": info, "rows": rows}, f, indent=1)

    print(f"\nus per layer (torch graph, copy {info['copy_gbs']:.0f} GB/s); window/step target: T=4 <= 1.35x, "
          f"T=8 <= 1.8x; token/step at 100%: T=4 <= 0.35x, T=8 <= 0.25x")
    print(f"{'gate':4} {'state':5} {'B':>4} {'T':>2} {'replay':>8} {'window':>8} {'fold':>8} {'token':>8} "
          f"{'win/step':>8} {'tok/step':>8}")
    for r in rows:
        print(f"{r['gate']:4} {r['state']:5} {r['batch']:4} {r['T']:2} {r['replay_us']:8.2f} {r['window_us']:8.2f} "
              f"{r['fold_us']:8.2f} {r['token_us']:8.2f} {r['window_us'] / r['replay_us']:8.2f} "
              f"{r['token_us'] / r['replay_us']:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
