#!/usr/bin/env python3
"""Turns the JSON of `rssm bench --backend cuda --out PREFIX` into the H200
report: a markdown table with the targets, a summary and a PNG plot.

usage: report.py PREFIX.json OUT_DIR
Times become microseconds per step per layer (the unit of the published
figures in docs/design.md §7): `rssm bench` reports per step of all layers.
Writes OUT_DIR/h200_results.md and OUT_DIR/h200_results.png (the plot needs
matplotlib; without it the table is written). The results of record, both
harnesses, are bench/h200/record.py's (h200/summary.json).
"""
import json
import os
import sys


# The published kernels' best times on the same H200 (docs/design.md §7 and bench/results/h200_notes.md,
# uniform ring positions unless named), us per step per layer.
PEERS = {
    ("gdn", "fp32", "uniform"): {1: 4.10, 16: 14.75, 64: 46.12, 128: 84.48, 256: 161.05, 512: 315.26},
    ("gdn", "fp32", "staggered"): {16: 16.61, 64: 48.52, 128: 86.52, 256: 163.53, 512: 320.63},
    ("gdn", "bf16", "uniform"): {1: 3.28, 16: 11.06, 64: 34.88, 128: 64.78, 256: 122.91, 512: 241.43},
    ("kda", "fp32", "uniform"): {1: 6.53, 16: 23.89, 64: 75.59, 128: 141.31, 256: 271.61, 512: 532.07},
    ("kda", "bf16", "uniform"): {1: 4.32, 16: 14.67, 64: 41.20, 128: 76.08, 256: 146.59, 512: 289.06},
}
# target = factor x the published figure, per (kind, state, positions) and batch range
GOALS = [
    ("gdn", "fp32", "uniform", 1, 1, 1.0), ("gdn", "fp32", "uniform", 16, 512, 0.95),
    ("gdn", "fp32", "staggered", 16, 512, 0.95),
    ("gdn", "bf16", "uniform", 1, 1, 1.0), ("gdn", "bf16", "uniform", 16, 512, 0.75),
    ("kda", "fp32", "uniform", 16, 16, 0.8), ("kda", "fp32", "uniform", 64, 512, 0.6),
    ("kda", "bf16", "uniform", 1, 1, 1.0), ("kda", "bf16", "uniform", 16, 512, 0.65),
]


def best_us(r):
    """What a user of the library gets: the faster of packed and replay."""
    return min(r["packed_us"], r["us_per_step"])


def targets(rows):
    """The targets, each as (name, measured, met)."""
    out = []
    fam = [r for r in rows if r["L"] == 16 and r["ring"] == "fp16"]
    for kind, state, pos, lo, hi, f in GOALS:
        peers = PEERS[(kind, state, pos)]
        for r in fam:
            if (r["kind"], r["state"], r["positions"]) != (kind, state, pos) or not lo <= r["batch"] <= hi:
                continue
            if r["batch"] not in peers:
                continue
            goal = f * peers[r["batch"]]
            got = best_us(r)
            out.append((f"{kind.upper()} {state} {pos} B={r['batch']}: <= {f:g} x {peers[r['batch']]:.2f} "
                        f"= {goal:.2f} us", f"{got:.2f} us ({got / peers[r['batch']]:.3f}x)", got <= goal))
    seen = {}
    for r in rows:
        if r["batch"] >= 128 and r.get("inplace_us"):
            seen[(r["kind"], r["state"], r["batch"])] = 100.0 * r["inplace_us"] / r["packed_us"]
    if seen:
        worst = min(seen, key=seen.get)
        out.append(("packed >= 95% of the in-place bound at batch >= 128 (fp32 and bf16)",
                    f"worst {seen[worst]:.1f}% ({' '.join(map(str, worst))})", seen[worst] >= 95))
    uni = [r for r in fam if r["positions"] == "uniform" and r["batch"] >= 64 and r["flush_us"]]
    if uni:
        w = max(uni, key=lambda r: r["flush_us"] / r["packed_us"])
        out.append(("flush step <= 1.05x packed step (batch >= 64)",
                    f"worst {w['flush_us'] / w['packed_us']:.3f}x ({w['kind']} {w['state']} B={w['batch']})",
                    w["flush_us"] / w["packed_us"] <= 1.05))
        w = max(uni, key=lambda r: r["full_ring_us"] / r["empty_ring_us"])
        out.append(("full-ring step <= 1.1x empty-ring step (batch >= 64)",
                    f"worst {w['full_ring_us'] / w['empty_ring_us']:.3f}x ({w['kind']} {w['state']} B={w['batch']})",
                    w["full_ring_us"] / w["empty_ring_us"] <= 1.1))
    return out


def normalise(data):
    """The rows of `rssm bench`, per layer, under the names used here; rows
    that were not timed (status other than ok) are left out and returned
    apart."""
    rows, untimed = [], []
    copy = data["copy_gbs"]
    for r in data["rows"]:
        if r["status"] != "ok":
            untimed.append(r)
            continue
        n = r["layers"]

        def per_layer(key):
            v = r.get(key)
            return None if v is None else v / n
        rows.append({
            "kind": r["gate"], "state": r["state_dtype"], "ring": data["ring_dtype"], "L": r["ring_len"],
            "batch": r["batch"], "positions": r["positions"], "layers": n,
            "us_per_step": per_layer("replay_us"), "packed_us": per_layer("packed_us"),
            "inplace_us": per_layer("inplace_us"), "gbps": r["replay_gbs"],
            "pct_copy_bw": 100.0 * r["replay_gbs"] / copy, "packed_pct_copy_bw": 100.0 * r["packed_gbs"] / copy,
            "replay_over_packed": r["speedup"], "empty_ring_us": per_layer("empty_us"),
            "full_ring_us": per_layer("full_us"), "flush_us": per_layer("flush_us"), "copy_gbps": copy,
        })
    return rows, untimed


def fmt(x, spec="{:.2f}"):
    return "-" if x is None else spec.format(x)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def main():
    src, out_dir = sys.argv[1], sys.argv[2]
    with open(src) as f:
        data = json.load(f)
    rows, untimed = normalise(data)
    lines = [
        f"# rssm CUDA decode on {data['device']}",
        "",
        f"From `rssm bench --backend {data['backend']}` (docs/design.md §7): each timing is one recorded device "
        f"program (a CUDA graph) of a whole ring cycle, median of {data['cycles']} runs after one untimed, >= {data['state_mib']} MiB of "
        f"state per step, random inputs; ring {data['ring_dtype']}, io {data['io_dtype']}. Copy bandwidth "
        f"(device-to-device, read + write) measured in the same run: **{data['copy_gbs']:.0f} GB/s**; "
        f"`in-place` = one pass that reads and writes back the packed step's whole state pool, same run.",
        "",
        "## Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    for name, value, ok in targets(rows):
        lines.append(f"| {name} | {value} | {'yes' if ok else '**no**'} |")
    lines += [
        "",
        "## All rows",
        "",
        "Times are microseconds per step per layer. `ratio` = packed time / replay time (amortised over "
        "the L-step cycle, flush included). Per-position costs are for uniform positions: empty ring "
        "(n = 0), full ring (n = L-2), flush (n = L-1).",
        "",
        "| kind | state | ring | L | batch | positions | layers | replay us | GB/s | % copy | packed us "
        "| packed % copy | in-place us | packed % in-place | ratio | empty us | full us | flush us | full/empty "
        "| flush/packed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pct_inplace = ratio(r["inplace_us"], r["packed_us"])
        lines.append(
            f"| {r['kind']} | {r['state']} | {r['ring']} | {r['L']} | {r['batch']} | {r['positions']} "
            f"| {r['layers']} | {r['us_per_step']:.2f} | {r['gbps']:.0f} | {r['pct_copy_bw']:.1f} "
            f"| {r['packed_us']:.2f} | {r['packed_pct_copy_bw']:.1f} | {fmt(r['inplace_us'])} "
            f"| {fmt(None if pct_inplace is None else 100 * pct_inplace, '{:.1f}')} | {r['replay_over_packed']:.3f} "
            f"| {fmt(r['empty_ring_us'])} | {fmt(r['full_ring_us'])} | {fmt(r['flush_us'])} "
            f"| {fmt(ratio(r['full_ring_us'], r['empty_ring_us']), '{:.3f}')} "
            f"| {fmt(ratio(r['flush_us'], r['packed_us']), '{:.3f}')} |")
    for r in untimed:
        lines.append(f"\nnot timed: {r['gate']} {r['state_dtype']} L={r['ring_len']} B={r['batch']} "
                     f"{r['positions']}: {r['status']} ({r['note']})")
    md = os.path.join(out_dir, "h200_results.md")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:8 + len(targets(rows))]))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    ax = axes[0]
    series = {}
    for r in rows:
        key = f"{r['kind']} {r['state']}/{r['ring']} L={r['L']} {r['positions']}"
        series.setdefault(key, []).append((r["batch"], r["replay_over_packed"]))
    for key, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                linestyle="-" if "uniform" in key else "--", label=key)
    ax.axhline(1.72, color="k", linewidth=0.8, linestyle=":")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch")
    ax.set_ylabel("replay speed / packed speed")
    ax.set_title("ReplaySSM / packed decode (amortised over the ring cycle)")
    ax.legend(fontsize=6, ncol=2)
    ax = axes[1]
    packed = {}
    for r in rows:
        packed.setdefault(f"{r['kind']} {r['state']}", {})[r["batch"]] = r["packed_pct_copy_bw"]
    for key, d in sorted(packed.items()):
        b = sorted(d)
        ax.plot(b, [d[x] for x in b], marker="s", label=f"packed {key}")
    ax.axhline(95, color="k", linewidth=0.8, linestyle=":")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch")
    ax.set_ylabel("% of device copy bandwidth")
    ax.set_title(f"packed decode bandwidth (copy = {data['copy_gbs']:.0f} GB/s)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "h200_results.png"), dpi=110)


if __name__ == "__main__":
    main()
