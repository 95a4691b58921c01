#!/usr/bin/env python3
"""The Vulkan targets on a GPU (docs/h200.md, "The Vulkan targets"): the
JSON of `rssm bench --out` for each Vulkan variant and for CUDA, from one
run of bench/run.sh (stages `time` and `vulkan`), against them.

usage: vulkan_report.py CUDA.json PORTABLE.json COOPMAT.json OUT_DIR
PORTABLE.json is `rssm bench` of the portable kernels (`vulkan`, the default,
or `vulkan:portable`), COOPMAT.json of the cooperative-matrix ones
(`vulkan:coopmat`). Writes OUT_DIR/vulkan.md (the targets, then every row,
per step per layer) and prints the targets; the rows of record are
bench/record.py's (summary.json).
"""
import json
import os
import sys


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




def load(path):
    with open(path) as f:
        data = json.load(f)
    rows, _ = normalise(data)
    return data, {(r["kind"], r["state"], r["batch"], r["positions"]): r for r in rows}


def targets(cuda, variants):
    """(name, measured, met) for each Vulkan target (docs/h200.md, "The Vulkan targets")."""
    out = []
    default = variants.get("vulkan:portable")
    if default:
        for lo, hi, states, goal in ((128, 10 ** 9, ("fp32",), 1.5), (16, 16, ("fp32",), 1.2),
                                     (128, 10 ** 9, ("bf16",), 1.3)):
            rs = [r for k, r in default.items() if k[1] in states and lo <= k[2] <= hi]
            if rs:
                w = min(rs, key=lambda r: r["replay_over_packed"])
                out.append((f"vulkan replay/packed >= {goal} ({'/'.join(states)}, B {lo}"
                            f"{'+' if hi > 10 ** 8 else ''})",
                            f"worst {w['replay_over_packed']:.2f}x ({w['kind']} {w['state']} B={w['batch']} "
                            f"{w['positions']})", w["replay_over_packed"] >= goal))
        pairs = [(r, cuda[k]) for k, r in default.items() if k in cuda and k[2] >= 16]
        if pairs:
            w = max(pairs, key=lambda p: p[0]["us_per_step"] / p[1]["us_per_step"])
            out.append(("vulkan replay <= 1.25x CUDA replay (B >= 16)",
                        f"worst {w[0]['us_per_step'] / w[1]['us_per_step']:.2f}x ({w[0]['kind']} {w[0]['state']} "
                        f"B={w[0]['batch']} {w[0]['positions']}: {w[0]['us_per_step']:.2f} vs "
                        f"{w[1]['us_per_step']:.2f} us)", w[0]["us_per_step"] <= 1.25 * w[1]["us_per_step"]))
        rs = [r for k, r in default.items() if k[2] >= 128 and r["inplace_us"]]
        if rs:
            w = min(rs, key=lambda r: r["inplace_us"] / r["packed_us"])
            p = 100 * w["inplace_us"] / w["packed_us"]
            out.append(("vulkan packed >= 90% of the in-place bound (B >= 128)",
                        f"worst {p:.1f}% ({w['kind']} {w['state']} B={w['batch']})", p >= 90))
        rs = [r for r in default.values() if r["flush_us"]]
        if rs:
            w = max(rs, key=lambda r: r["flush_us"] / r["packed_us"])
            out.append(("vulkan flush step <= 1.3x packed",
                        f"worst {w['flush_us'] / w['packed_us']:.2f}x ({w['kind']} {w['state']} B={w['batch']}: "
                        f"{w['flush_us']:.2f} vs {w['packed_us']:.2f} us)", w["flush_us"] <= 1.3 * w["packed_us"]))
    # `vulkan` runs the portable kernels on every device (vk/README.md), so
    # the cooperative-matrix ones are chosen nowhere; how they compare is
    # reported all the same.
    cm, pt = variants.get("vulkan:coopmat"), variants.get("vulkan:portable")
    if cm and pt:
        for step in ("empty_ring_us", "full_ring_us", "flush_us"):
            pairs = [(cm[k], pt[k]) for k in cm if k in pt and cm[k][step] and pt[k][step]]
            if pairs:
                w = max(pairs, key=lambda p: p[0][step] / p[1][step])
                out.append((f"vulkan:coopmat <= vulkan:portable where chosen, {step[:-3].replace('_', ' ')} step",
                            f"chosen nowhere; worst {w[0][step] / w[1][step]:.2f}x ({w[0]['kind']} {w[0]['state']} "
                            f"B={w[0]['batch']})", None))
    return out


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    cuda_path, out_dir = sys.argv[1], sys.argv[4]
    cuda_data, cuda = load(cuda_path)
    variants, devices = {}, set()
    for name, p in (("vulkan:portable", sys.argv[2]), ("vulkan:coopmat", sys.argv[3])):
        data, rows = load(p)
        variants[name] = rows
        devices.add(data["device"])
    os.makedirs(out_dir, exist_ok=True)
    lines = [f"# rssm Vulkan decode on {', '.join(sorted(devices))}", "",
             "From `rssm bench` (docs/bench.md) per variant, each file from one run; microseconds per step per layer, one dispatch per layer, each "
             "after the one before it; copy ceiling and in-place bound measured by compute shaders in the "
             f"variant's run (copy {cuda_data['copy_gbs']:.0f} GB/s by CUDA in its run).", "", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
    for name, value, ok in targets(cuda, variants):
        lines.append(f"| {name} | {value} | {'n/a' if ok is None else 'yes' if ok else '**no**'} |")
    lines += ["", "## All rows", "",
              "| backend | kind | state | batch | positions | packed us | replay us | ratio | in-place us "
              "| empty us | full us | flush us | CUDA packed us | CUDA replay us |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, rows in variants.items():
        for k, r in sorted(rows.items()):
            c = cuda.get(k, {})
            lines.append(f"| {name} | {r['kind']} | {r['state']} | {r['batch']} | {r['positions']} "
                         f"| {r['packed_us']:.2f} | {r['us_per_step']:.2f} | {r['replay_over_packed']:.2f} "
                         f"| {fmt(r['inplace_us'])} | {fmt(r['empty_ring_us'])} | {fmt(r['full_ring_us'])} "
                         f"| {fmt(r['flush_us'])} | {fmt(c.get('packed_us'))} | {fmt(c.get('us_per_step'))} |")
    with open(os.path.join(out_dir, "vulkan.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:lines.index("## All rows")]))


if __name__ == "__main__":
    main()
