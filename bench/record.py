#!/usr/bin/env python3
"""The results of a GPU shape (bench/results/README.md): summary.json, one
row per configuration, harness and window, each with the GPU, the commit
and the command that measured it; and results.md, the targets against the
published kernels timed on the same GPU (peers.json beside it, where there
is one) and every row, per step per layer.

    bench/record.py DIR --shape SHAPE [--peers FILE] [--anchor HARNESS.json] [--commit C] [--command CMD] FILE...
    bench/record.py --pages DIR...

The first writes DIR/summary.json and DIR/results.md from the JSON files a
run left: bench/decode_graph.py's (its torch-graph rows and the `rssm
bench` rows it ran beside them), bench/verify_graph.py's (verify-graph rows)
or `rssm bench --out`'s (cli rows), and DIR/notes.md when there is none
(what was run; what limits each miss is for a person to write). A row of a
later file replaces one of an earlier file for the same configuration (a
shape measured again). --anchor writes DIR/peers.json first, from the anchor
harness's JSON (../shared/peers-harness: the published kernels in one
CUDA-graph harness, bench/run.sh's stage peers) of a run on this GPU. SHAPE names
the folder (h200, h200-78sm, h100, ...). --pages rewrites each DIR's
results.md from its summary.json (after a row was added by hand, or the
page changed). Prints the targets.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

from benchlib import cli_rows, repo_commit

KEYS = ("harness", "backend", "gate", "state", "batch", "positions", "ring_len", "ring_dtype", "gate_mode", "layers",
        "packed_us", "replay_us", "empty_us", "full_us", "flush_us", "inplace_us", "copy_gbs", "sm_limit")
VERIFY_KEYS = ("harness", "backend", "gate", "state", "batch", "T", "ring_len", "ring_dtype", "layers", "replay_us",
               "window_us", "fold_us", "token_us")


def load(path, prov):
    """The rows of one run's JSON, with the provenance `prov` (gpu, shape,
    date, commit, command) where the file does not say."""
    with open(path) as f:
        j = json.load(f)
    src = os.path.basename(path)
    if "info" not in j:  # rssm bench --out
        return [{"harness": r.pop("harness"), "backend": j["backend"], **r, **prov,
                 "gpu": prov.get("gpu") or j.get("device", ""), "source": src} for r in cli_rows(j)]
    info = j["info"]
    run = {**prov, "gpu": info.get("device", prov.get("gpu")), "commit": info.get("commit") or prov["commit"],
           "command": info.get("command") or prov["command"], "source": src}
    rows = []
    for r in j["rows"]:
        if "T" in r:  # bench/verify_graph.py
            row = {k: r.get(k) for k in VERIFY_KEYS}
            row.update(harness="verify-graph", backend=info.get("backend", "cuda"), ring_len=info.get("ring_len", 16),
                       ring_dtype=info["ring_dtype"])
        elif r.get("harness") == "cli":  # rssm bench, run by bench/decode_graph.py --cli
            row = {k: r.get(k) for k in KEYS}
            row["backend"] = info.get("backend", "cuda")
        else:
            row = {k: r.get(k) for k in KEYS}
            row.update(backend=info.get("backend", "cuda"), ring_len=16, ring_dtype=info["ring_dtype"],
                       gate_mode="raw", sm_limit=info.get("sm_limit") or None)
        rows.append({**row, **run})
    return rows


def config_key(r):
    """What one row measures: a later row of the same key replaces it."""
    return tuple(r.get(k) for k in ("harness", "backend", "gate", "state", "batch", "positions", "T", "ring_len",
                                    "ring_dtype", "gate_mode", "sm_limit"))


def peers_from_anchor(path):
    """peers.json (bench/results/README.md) from the anchor harness's JSON:
    per gate, state, positions and batch the fastest published kernel of
    any kind (packed or replay) it timed, and which."""
    with open(path) as f:
        j = json.load(f)
    best, who = {}, {}

    def put(r, positions, name, us):
        key = f"{r['gate']}/{r['state']}/{positions}"
        best.setdefault(key, {})[str(r["B"])] = round(us, 2)
        who.setdefault(key, {})[str(r["B"])] = name

    for r in j["rows"]:
        cands = {f"{k} packed": v["us"] for k, v in r.get("packed", {}).items()}
        for pos, v in r.get("replay", {}).items():
            if pos == "uniform":
                cands[f"{r['peer']} replay"] = v["us"]
            elif pos == "staggered":
                put(r, "staggered", f"{r['peer']} replay", v["us"])
        if cands:
            put(r, "uniform", *min(cands.items(), key=lambda kv: kv[1]))
    m = j.get("meta", {})
    return {"method": f"µs per step per layer on one {m.get('device', 'GPU')} ({m.get('sm_count', '?')} SMs), the anchor "
                      f"harness (../shared/peers-harness, bench/run.sh stage peers): CUDA graph of a whole L="
                      f"{m.get('L', 16)} cycle, random inputs; copy {j.get('copy', {}).get('gbps', 0):.0f} GB/s in the "
                      f"same run; torch {m.get('torch', '?')}, triton {m.get('triton', '?')}. 'best' is the fastest "
                      "published kernel of any kind (packed or replay) the run timed for that shape.",
            "sources": {"peers_dir": m.get("peers_dir"), "configs": m.get("configs")},
            "best_us": best, "best_who": who}


def inplace_bound(rows, r):
    """The stronger of the two in-place passes of the same shape and GPU:
    torch's (over the engine's state tensors) and rssm's (over its pool)."""
    xs = [x["inplace_us"] for x in rows if x.get("inplace_us") and x.get("backend", "cuda") == r.get("backend", "cuda")
          and (x["gate"], x["state"], x["batch"]) == (r["gate"], r["state"], r["batch"])]
    return min(xs) if xs else None


def targets(rows, peers):
    """(target, measured, met) from the torch-graph rows: against the
    published kernels of peers.json on the whole GPU (docs/bench.md); on a
    part capped to fewer multiprocessors (sm_limit), against its in-place
    bound and packed step."""
    out = []
    tg = [r for r in rows if r["harness"] == "torch-graph" and r.get("backend", "cuda") == "cuda"]
    at = {(r["gate"], r["state"], r["positions"], r["batch"]): r for r in tg}
    best = (peers or {}).get("best_us", {})

    def vs(gate, state, pos, batches, factor, what, peer_key=None):
        for B in batches:
            r = at.get((gate, state, pos, B))
            p = best.get(peer_key or f"{gate}/{state}/{pos}", {}).get(str(B))
            if r is None or p is None or r["replay_us"] is None:
                continue
            goal = factor * p
            out.append((f"{gate.upper()} {state} {pos} B={B}: <= {factor:g} x {what} {p:.2f} = {goal:.2f}",
                        f"{r['replay_us']:.2f} ({r['replay_us'] / p:.3f}x)", r["replay_us"] <= goal))

    def absolute(gate, state, B):
        """the faster of rssm's packed and replay steps at or below the
        fastest published kernel of that shape"""
        r = at.get((gate, state, "uniform", B))
        goal = best.get(f"{gate}/{state}/uniform", {}).get(str(B))
        if r is not None and goal is not None:
            who = (peers or {}).get("best_who", {}).get(f"{gate}/{state}/uniform", {}).get(str(B), "best published")
            got = min(x for x in (r["replay_us"], r["packed_us"]) if x)
            out.append((f"{gate.upper()} {state} B={B}: the faster of packed and replay <= {goal:.2f} ({who})",
                        f"{got:.2f}", got <= goal))

    capped = any(r.get("sm_limit") for r in tg)
    if best and not capped:
        for gate in ("gdn", "kda"):
            for state in ("fp32", "bf16"):
                absolute(gate, state, 1)
        vs("gdn", "fp32", "uniform", (16, 64, 128, 256, 512), 0.90, "vLLM replay")
        vs("gdn", "fp32", "staggered", (16, 64, 128, 256, 512), 0.90, "vLLM replay")
        vs("gdn", "bf16", "uniform", (16, 64, 128, 256, 512), 0.75, "vLLM replay")
        vs("kda", "fp32", "uniform", (16, 64, 128, 256, 512), 0.60, "SGLang best")
        vs("kda", "bf16", "uniform", (16, 64, 128, 256, 512), 0.65, "SGLang bf16 packed")
    if not capped:
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
    for r in tg if capped else ():
        b, n = inplace_bound(rows, r), r["sm_limit"]
        if r["positions"] == "uniform" and r["batch"] >= 64 and r["packed_us"] and b:
            out.append((f"{n} SMs: {r['gate']} {r['state']} B={r['batch']} packed >= 90% of the capped in-place bound",
                        f"{100 * b / r['packed_us']:.1f}%", 100 * b / r["packed_us"] >= 90))
        if r["positions"] == "uniform" and r["batch"] >= 64 and r["replay_us"] and r["packed_us"]:
            q = r["replay_us"] / r["packed_us"]
            out.append((f"{n} SMs: {r['gate']} {r['state']} B={r['batch']} replay <= 0.6x packed", f"{q:.3f}x",
                        q <= 0.6))
    return out


def table(rows, backend, harness):
    sel = [r for r in rows if r.get("backend", "cuda") == backend and r["harness"] == harness]
    if not sel:
        return []
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
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


def verify_table(rows, backend):
    sel = [r for r in rows if r.get("backend") == backend and r["harness"] == "verify-graph"]
    if not sel:
        return []
    lines = ["| gate | state | B | T | replay | window | fold | token | window / step | token / step |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sel:
        lines.append(f"| {r['gate']} | {r['state']} | {r['batch']} | {r['T']} | {r['replay_us']:.2f} "
                     f"| {r['window_us']:.2f} | {r['fold_us']:.2f} | {r['token_us']:.2f} "
                     f"| {r['window_us'] / r['replay_us']:.2f} | {r['token_us'] / r['replay_us']:.2f} |")
    return lines


HARNESSES = {
    "torch-graph": "rssm's per-layer entry from torch in captured CUDA graphs (bench/decode_graph.py): the figures "
                   "of record",
    "cli": "`rssm bench` (the library's own harness)",
    "verify-graph": "speculative-decode windows from torch in captured CUDA graphs (bench/verify_graph.py), µs per "
                    "layer; window / step and token / step against the replay step",
}


def page(dir_, rows, peers, peers_name):
    """results.md of one shape."""
    tgt = targets(rows, peers)
    gpus = sorted({r["gpu"] for r in rows if r.get("gpu")})
    runs = sorted({(r.get("date") or "", r.get("commit") or "", r.get("command") or "", r.get("source") or "")
                   for r in rows})
    modes = sorted({r["gate_mode"] for r in rows if r.get("gate_mode")})
    rings = sorted({r["ring_len"] for r in rows if r.get("ring_len")})
    lines = [f"# rssm on {os.path.basename(os.path.normpath(dir_))}: the results of record", "",
             f"Devices: {'; '.join(gpus) or '-'}.", "",
             "Made by `bench/record.py` from `summary.json` beside this page (every row with its harness, device, "
             f"commit and command); µs per step per layer, L = {', '.join(map(str, rings)) or 16}, "
             f"{' and '.join(modes) or 'raw'} gates. Peers: "
             + (f"`{peers_name}` (the published kernels on the same GPU, same method)." if peers else "none timed on "
                "this GPU.") + " What limits each miss, and how each run was made: `notes.md`.", "",
             "## Runs", "", "| date | commit | command | file |", "|---|---|---|---|"]
    lines += [f"| {d} | {c} | `{cmd}` | {s} |" for d, c, cmd, s in runs]
    if tgt:
        lines += ["", "## Targets (torch-graph harness)", "", "| target | measured | met |", "|---|---|---|"]
        lines += [f"| {n} | {v} | {'yes' if ok else '**no**'} |" for n, v, ok in tgt]
    for backend in sorted({r.get("backend", "cuda") for r in rows}, key=lambda b: (b != "cuda", b)):
        for harness, what in HARNESSES.items():
            t = verify_table(rows, backend) if harness == "verify-graph" else table(rows, backend, harness)
            if t:
                lines += ["", f"## {backend}, {harness}", "", what + ".", ""] + t
    return "\n".join(lines) + "\n", tgt


def write(dir_, rows, peers_path):
    peers = None
    if peers_path and os.path.exists(peers_path):
        with open(peers_path) as f:
            peers = json.load(f)
    with open(os.path.join(dir_, "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
    text, tgt = page(dir_, rows, peers, os.path.relpath(peers_path, dir_) if peers else None)
    with open(os.path.join(dir_, "results.md"), "w") as f:
        f.write(text)
    print(f"{dir_}: {len(rows)} rows; targets met: {sum(ok for _, _, ok in tgt)} of {len(tgt)}")
    for n, v, ok in tgt:
        print(f"{'  ok' if ok else 'MISS'}  {n}: {v}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", help="the shape's results folder")
    ap.add_argument("files", nargs="*", help="the run's JSON files")
    ap.add_argument("--shape", help="the folder's name: h200, h200-78sm, h100, ...")
    ap.add_argument("--peers", help="the published kernels' figures on this GPU (default DIR/peers.json)")
    ap.add_argument("--anchor", help="the anchor harness's JSON of a run on this GPU: writes DIR/peers.json from it")
    ap.add_argument("--gpu", default="", help="the GPU's name, where a file does not say")
    ap.add_argument("--commit", default=None, help="the commit measured (default: this checkout's)")
    ap.add_argument("--command", default=os.environ.get("RSSM_BENCH_COMMAND", ""), help="the command that ran")
    ap.add_argument("--pages", nargs="+", metavar="DIR", help="rewrite each DIR's results.md from its summary.json")
    args = ap.parse_intermixed_args()
    if args.pages:
        for d in args.pages:
            with open(os.path.join(d, "summary.json")) as f:
                rows = json.load(f)
            write(d, rows, args.peers or os.path.join(d, "peers.json"))
        return 0
    if not args.dir or not args.files or not args.shape:
        ap.error("give DIR, --shape and the run's files (or --pages DIR...)")
    prov = {"gpu": args.gpu, "shape": args.shape, "date": datetime.date.today().isoformat(),
            "commit": args.commit if args.commit is not None else repo_commit(), "command": args.command}
    latest = {}
    for p in args.files:
        for r in load(p, prov):
            latest[config_key(r)] = r  # dicts keep the first insertion's place
    rows = list(latest.values())
    # a torch-graph row's copy bandwidth: the driver's copy as rssm bench
    # measured it in the same run (docs/bench.md); torch's copy_ reads lower
    cli_copy = [r["copy_gbs"] for r in rows if r["harness"] == "cli" and r.get("copy_gbs")]
    for r in rows:
        if r["harness"] == "torch-graph" and cli_copy:
            r["copy_gbs"] = max(cli_copy)
    os.makedirs(args.dir, exist_ok=True)
    if args.anchor:
        with open(os.path.join(args.dir, "peers.json"), "w") as f:
            json.dump(peers_from_anchor(args.anchor), f, indent=1, ensure_ascii=False)
            f.write("\n")
    write(args.dir, rows, args.peers or os.path.join(args.dir, "peers.json"))
    notes = os.path.join(args.dir, "notes.md")
    if not os.path.exists(notes):
        with open(notes, "w") as f:
            f.write(f"# rssm on {rows[0].get('gpu') or args.shape} ({args.shape})\n\nMeasured {prov['date']} at commit "
                    f"{prov['commit'] or '(unknown)'} by\n\n    {args.command or '(the command)'}\n\n"
                    "What limits each miss: (to write).\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
