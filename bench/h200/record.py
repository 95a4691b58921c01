#!/usr/bin/env python3
"""The H200 results of record from bench/h200/torch_graph.py's JSON files
(and `rssm bench --out` JSON files): bench/results/h200/summary.json (one
object per configuration and harness) and a results page with the targets,
against the published kernels' times measured on the same H200
(bench/results/h200_cuda/peers-h200.json).

    bench/h200/record.py OUT_DIR --h200 FILE... [--h20 FILE...]

Every figure is us per step per layer. A row's "harness" is "torch-graph"
(rssm's per-layer entry called from torch in a captured CUDA graph, as an
engine calls it: the figures the targets are judged by) or "cli" (`rssm
bench`, the library's own harness); "gpu" is "h200", or "h20-shaped" for
the run confined to 78 SMs by CUDA MPS with rssm's plans capped to match
(docs/bench.md). Writes OUT_DIR/h200/summary.json and
OUT_DIR/h200_cuda/results.md, and prints the targets.
"""

import json
import os
import sys

PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results", "h200_cuda", "peers-h200.json")


def cli_rows(j, gpu, info):
    """The rows of one `rssm bench --out` JSON, per layer."""
    rows = []
    for r in j["rows"]:
        if r["status"] != "ok":
            continue
        per = lambda k: r[k] / r["layers"] if r.get(k) is not None else None
        rows.append({"harness": "cli", "gate": r["gate"], "state": r["state_dtype"], "batch": r["batch"],
                     "positions": r["positions"], "layers": r["layers"], "packed_us": per("packed_us"),
                     "replay_us": per("replay_us"), "empty_us": per("empty_us"), "full_us": per("full_us"),
                     "flush_us": per("flush_us"), "inplace_us": per("inplace_us"), "copy_gbs": j["copy_gbs"],
                     "gpu": gpu, "sm_limit": j.get("sm_limit") or None, "ring_len": r["ring_len"],
                     "ring_dtype": j["ring_dtype"], "gate_mode": j["gate_mode"], "source": info})
    return rows


def load(path, gpu):
    """(run info, rows) of a torch_graph.py JSON (its torch-graph rows and
    the cli rows it holds) or of an `rssm bench` JSON."""
    with open(path) as f:
        j = json.load(f)
    src = os.path.basename(path)
    if "info" not in j:
        return None, cli_rows(j, gpu, src)
    info = j["info"]
    rows = []
    for r in j["rows"]:
        row = {k: r.get(k) for k in ("harness", "gate", "state", "batch", "positions", "layers", "packed_us",
                                     "replay_us", "empty_us", "full_us", "flush_us", "inplace_us", "copy_gbs")}
        row.update({"gpu": gpu, "sm_limit": info.get("sm_limit") or None, "ring_len": 16,
                    "ring_dtype": info["ring_dtype"], "gate_mode": "raw", "source": src})
        rows.append(row)
    return info, rows


def inplace_bound(rows, r):
    """The stronger of the two in-place passes of the same shape and run:
    torch's (over the engine's state tensors) and rssm's (over its pool)."""
    xs = [x["inplace_us"] for x in rows if x["gpu"] == r["gpu"] and x["inplace_us"]
          and (x["gate"], x["state"], x["batch"]) == (r["gate"], r["state"], r["batch"])]
    return min(xs) if xs else None


def targets(rows, peers):
    """(target, measured, met) from the torch-graph rows (the issue's list)."""
    best = peers["best_us"]
    tg = [r for r in rows if r["harness"] == "torch-graph" and r["gpu"] == "h200"]
    at = {(r["gate"], r["state"], r["positions"], r["batch"]): r for r in tg}
    out = []

    def vs(gate, state, pos, batches, factor, what, peer_key=None):
        for B in batches:
            r = at.get((gate, state, pos, B))
            p = best.get(peer_key or f"{gate}/{state}/{pos}", {}).get(str(B))
            if r is None or p is None or r["replay_us"] is None:
                continue
            goal = factor * p
            out.append((f"{gate.upper()} {state} {pos} B={B}: <= {factor:g} x {what} {p:.2f} = {goal:.2f}",
                        f"{r['replay_us']:.2f} ({r['replay_us'] / p:.3f}x)", r["replay_us"] <= goal))

    def absolute(gate, state, B, goal, what):
        r = at.get((gate, state, "uniform", B))
        if r is not None:
            got = min(x for x in (r["replay_us"], r["packed_us"]) if x)
            out.append((f"{gate.upper()} {state} B={B}: the faster of packed and replay <= {goal} ({what})",
                        f"{got:.2f}", got <= goal))

    absolute("gdn", "fp32", 1, 4.1, "FlashInfer packed")
    vs("gdn", "fp32", "uniform", (16, 64, 128, 256, 512), 0.90, "vLLM replay")
    vs("gdn", "fp32", "staggered", (16, 64, 128, 256, 512), 0.90, "vLLM replay")
    absolute("gdn", "bf16", 1, 3.3, "FlashInfer packed")
    vs("gdn", "bf16", "uniform", (16, 64, 128, 256, 512), 0.75, "vLLM replay")
    vs("kda", "fp32", "uniform", (16, 64, 128, 256, 512), 0.60, "SGLang best")
    vs("kda", "bf16", "uniform", (16, 64, 128, 256, 512), 0.65, "SGLang bf16 packed")
    absolute("kda", "bf16", 1, 4.24, "SGLang packed")
    worst = None
    for r in tg:
        b = inplace_bound(rows, r)
        if r["batch"] >= 128 and r["packed_us"] and b:
            pct = 100 * b / r["packed_us"]
            if worst is None or pct < worst[0]:
                worst = (pct, r)
    if worst:
        out.append(("packed >= 95% of the in-place bound at B >= 128",
                    f"worst {worst[0]:.1f}% ({worst[1]['gate']} {worst[1]['state']} B={worst[1]['batch']})",
                    worst[0] >= 95))
    uni = [r for r in tg if r["positions"] == "uniform" and r["flush_us"] and r["packed_us"]]
    if uni:
        w = max(uni, key=lambda r: r["flush_us"] / r["packed_us"])
        out.append(("flush step <= 1.05x packed", f"worst {w['flush_us'] / w['packed_us']:.3f}x "
                    f"({w['gate']} {w['state']} B={w['batch']})", w["flush_us"] / w["packed_us"] <= 1.05))
        w = max(uni, key=lambda r: r["full_us"] / r["empty_us"])
        out.append(("full ring <= 1.1x empty ring", f"worst {w['full_us'] / w['empty_us']:.3f}x "
                    f"({w['gate']} {w['state']} B={w['batch']})", w["full_us"] / w["empty_us"] <= 1.1))
    h20 = [r for r in rows if r["harness"] == "torch-graph" and r["gpu"] == "h20-shaped"]
    for r in h20:
        b = inplace_bound(rows, r)
        if r["positions"] == "uniform" and r["batch"] >= 64 and r["packed_us"] and b:
            out.append((f"78 SMs: {r['gate']} {r['state']} B={r['batch']} packed >= 90% of the capped in-place bound",
                        f"{100 * b / r['packed_us']:.1f}%", 100 * b / r["packed_us"] >= 90))
        if r["positions"] == "uniform" and r["batch"] >= 64 and r["replay_us"] and r["packed_us"]:
            q = r["replay_us"] / r["packed_us"]
            out.append((f"78 SMs: {r['gate']} {r['state']} B={r['batch']} replay <= 0.6x packed", f"{q:.3f}x", q <= 0.6))
    return out


def table(rows, gpu, harness):
    sel = [r for r in rows if r["gpu"] == gpu and r["harness"] == harness]
    if not sel:
        return []
    f = lambda v: "-" if v is None else f"{v:.2f}"
    lines = ["| gate | state | B | positions | packed | replay | empty | full | flush | in-place | packed % in-place "
             "| replay / packed |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sel:
        b = inplace_bound(rows, r)
        pct = f"{100 * b / r['packed_us']:.1f}" if b and r["packed_us"] else "-"
        q = f"{r['replay_us'] / r['packed_us']:.3f}" if r["replay_us"] and r["packed_us"] else "-"
        lines.append(f"| {r['gate']} | {r['state']} | {r['batch']} | {r['positions']} | {f(r['packed_us'])} "
                     f"| {f(r['replay_us'])} | {f(r['empty_us'])} | {f(r['full_us'])} | {f(r['flush_us'])} | {f(b)} "
                     f"| {pct} | {q} |")
    return lines


def main() -> int:
    out_dir, gpu, paths = sys.argv[1], None, []
    for a in sys.argv[2:]:
        if a in ("--h200", "--h20"):
            gpu = "h200" if a == "--h200" else "h20-shaped"
        elif gpu is None:
            sys.exit(f"record.py: {a}: name --h200 or --h20 before the files")
        else:
            paths.append((gpu, a))
    rows, infos = [], []
    for g, path in paths:
        info, r = load(path, g)
        if info:
            infos.append(info)
        rows += r
    # a torch-graph row's copy bandwidth: the driver's copy as rssm bench
    # measured it in the same run (docs/bench.md); torch's copy_ reads lower
    for r in rows:
        if r["harness"] == "torch-graph":
            cli = [x["copy_gbs"] for x in rows if x["harness"] == "cli" and x["gpu"] == r["gpu"]]
            r["copy_gbs"] = max(cli) if cli else r["copy_gbs"]
    with open(PEERS) as f:
        peers = json.load(f)
    os.makedirs(os.path.join(out_dir, "h200"), exist_ok=True)
    with open(os.path.join(out_dir, "h200", "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
    tgt = targets(rows, peers)
    lines = ["# rssm CUDA decode on the H200: the results of record", "",
             "Made by `bench/h200/record.py` from `bench/h200/torch_graph.py` (`bench/h200/run.sh`, stages "
             "`torch` and `h20`); µs per step per layer; L = 16, " + rows[0]["ring_dtype"] + " ring, bf16 "
             "activations, raw gates (softplus, sigmoid and the q/k L2 norm in the kernel). Peers: "
             "`peers-h200.json` (same H200, same method). Sources: "
             + ", ".join(sorted({f"`{r['source']}` ({r['gpu']})" for r in rows})) + ".",
             "", "## Targets (torch-graph harness)", "", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {n} | {v} | {'yes' if ok else '**no**'} |" for n, v, ok in tgt]
    for gpu, title in (("h200", "H200"), ("h20-shaped", "H20-shaped (78 SMs, MPS 59%, --sm-limit 78)")):
        for harness in ("torch-graph", "cli"):
            t = table(rows, gpu, harness)
            if t:
                lines += ["", f"## {title}, {harness}", ""] + t
    os.makedirs(os.path.join(out_dir, "h200_cuda"), exist_ok=True)
    with open(os.path.join(out_dir, "h200_cuda", "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    met = sum(ok for _, _, ok in tgt)
    print(f"targets met: {met} of {len(tgt)}")
    for n, v, ok in tgt:
        print(f"{'  ok' if ok else 'MISS'}  {n}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
