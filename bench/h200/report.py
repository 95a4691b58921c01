#!/usr/bin/env python3
"""Turns the H200 benchmark JSON into a markdown table and a PNG plot.

usage: report.py RESULTS.json OUT_DIR
Writes OUT_DIR/h200_results.md, OUT_DIR/h200/summary.json (one object per
configuration timed: backend, gate, state, batch, positions, ring_len,
packed_us, replay_us, inplace_us, copy_gbs, empty_us, full_us, flush_us; null
where not measured) and OUT_DIR/h200_results.png. The plot needs matplotlib;
without it the table and the summary are written.
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
    uni = [r for r in fam if r["positions"] == "uniform" and r["batch"] >= 64]
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


def summary(rows):
    """bench/results/h200/summary.json: one object per configuration timed."""
    out = []
    for r in rows:
        uni = r["positions"] == "uniform"
        out.append({
            "backend": "cuda", "gate": r["kind"], "state": r["state"], "batch": r["batch"],
            "positions": r["positions"], "ring_len": r["L"], "packed_us": r["packed_us"],
            "replay_us": r["us_per_step"], "inplace_us": r.get("inplace_us"),
            "copy_gbs": r.get("copy_gbps"),
            "empty_us": r["empty_ring_us"] if uni else None,
            "full_us": r["full_ring_us"] if uni else None,
            "flush_us": r["flush_us"] if uni else None,
        })
    return out


def compare(rows):
    """Old (the previous choice of kernels, old_* fields) against new (the
    library's choice) for the packed decode and for replay at L = 16, uniform
    positions: times, % of copy bandwidth, ratios, per-position costs."""
    if not rows or not rows[0].get("old_us_per_step"):
        return []
    out = [
        "Times in microseconds per step per layer, new / old: new = the library's choice (the bulk kernel "
        "once the batch gives every SM a (row, value head), i.e. batch >= 5 at HV = 32; the stream kernels "
        "below), old = the previous choice (stream kernels for replay; for packed, the stream kernel at "
        "batch 1 and the pipeline kernel above). `packed stream` = the packed stream kernel at every batch. "
        "Replay: L = 16, fp16 ring, uniform positions; `stag` = the staggered-position ratio.",
        "",
        "| kind | state | batch | packed us | packed % copy | packed stream us (% copy) | replay us | ratio "
        "| stag ratio | empty us | full us | flush us | full/empty | flush/packed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    stag = {(r["kind"], r["state"], r["ring"], r["L"], r["batch"]): r for r in rows
            if r["positions"] == "staggered"}
    for r in rows:
        if r["positions"] != "uniform" or r["L"] != 16 or r["ring"] != "fp16":
            continue
        sr = stag.get((r["kind"], r["state"], r["ring"], r["L"], r["batch"]))

        def pair(new, old, fmt="{:.1f}"):
            return f"{fmt.format(new)} / {fmt.format(old)}"
        out.append(
            f"| {r['kind']} | {r['state']} | {r['batch']} "
            f"| {pair(r['packed_us'], r['old_packed_us'])} "
            f"| {pair(r['packed_pct_copy_bw'], r['old_packed_pct_copy_bw'])} "
            f"| {r['stream_packed_us']:.1f} ({r['stream_packed_pct_copy_bw']:.1f}%) "
            f"| {pair(r['us_per_step'], r['old_us_per_step'])} "
            f"| {pair(r['replay_over_packed'], r['old_replay_over_packed'], '{:.2f}')} "
            f"| {pair(sr['replay_over_packed'], sr['old_replay_over_packed'], '{:.2f}') if sr else '-'} "
            f"| {pair(r['empty_ring_us'], r['old_empty_ring_us'])} "
            f"| {pair(r['full_ring_us'], r['old_full_ring_us'])} "
            f"| {pair(r['flush_us'], r['old_flush_us'])} "
            f"| {pair(r['full_ring_us'] / r['empty_ring_us'], r['old_full_ring_us'] / r['old_empty_ring_us'], '{:.2f}')} "
            f"| {pair(r['flush_us'] / r['packed_us'], r['old_flush_us'] / r['old_packed_us'], '{:.2f}')} |")
    return out


def main():
    src, out_dir = sys.argv[1], sys.argv[2]
    with open(src) as f:
        data = json.load(f)
    rows = data["rows"]
    lines = [
        f"# rssm CUDA decode on {data['device']}",
        "",
        f"Copy bandwidth (device-to-device, read + write) measured in the same run: "
        f"**{data['copy_bandwidth_gbps']:.0f} GB/s**"
        + (f"; read-only reference (a plain 16-byte-load kernel over 2 GiB): "
           f"**{data['read_bandwidth_gbps']:.0f} GB/s**" if "read_bandwidth_gbps" in data else "")
        + f". {data['method']}.",
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
        lines.append(
            f"| {r['kind']} | {r['state']} | {r['ring']} | {r['L']} | {r['batch']} | {r['positions']} "
            f"| {r['layers']} | {r['us_per_step']:.2f} | {r['gbps']:.0f} | {r['pct_copy_bw']:.1f} "
            f"| {r['packed_us']:.2f} | {r['packed_pct_copy_bw']:.1f} | {r.get('inplace_us', 0):.2f} "
            f"| {100.0 * r.get('inplace_us', 0) / r['packed_us']:.1f} | {r['replay_over_packed']:.3f} "
            f"| {r['empty_ring_us']:.2f} | {r['full_ring_us']:.2f} | {r['flush_us']:.2f} "
            f"| {r['full_ring_us'] / r['empty_ring_us']:.3f} | {r['flush_us'] / r['packed_us']:.3f} |")
    cmp = compare(rows)
    if cmp:
        lines += ["", "## The library's kernels vs the previous choice (same run, same setups)", ""] + cmp
    os.makedirs(os.path.join(out_dir, "h200"), exist_ok=True)
    with open(os.path.join(out_dir, "h200", "summary.json"), "w") as f:
        json.dump(summary(rows), f, indent=1)
        f.write("\n")
    md = os.path.join(out_dir, "h200_results.md")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:8 + len(targets(rows))]))
    print()
    print("\n".join(cmp))

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
    ax.set_title(f"packed decode bandwidth (copy = {data['copy_bandwidth_gbps']:.0f} GB/s)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "h200_results.png"), dpi=110)


if __name__ == "__main__":
    main()
