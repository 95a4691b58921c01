#!/usr/bin/env python3
"""Plots `rssm bench --out` JSON files: µs per step per layer (a step's µs
over its layers) of the packed and the replay decode against batch, one panel
per (gate, state dtype), one colour per backend, solid = packed, dashed =
replay (uniform ring positions); a point whose ratio to a physical bound is
above 100% (above_bound: a cache served the state, or the timing is off) is
drawn hollow.

usage: plot_bench.py OUT.png BENCH.json [BENCH.json ...]
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def per_layer(row, kind):
    """µs per step per layer: the JSON's own figure, or (older files) the
    step's over its layers."""
    return row.get(f"{kind}_layer_us") or row[f"{kind}_us"] / row["layers"]


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out, paths = argv[1], argv[2:]
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    panels = sorted({(r["gate"], r["state_dtype"]) for run in runs for r in run["rows"]})
    if not panels:
        print("plot_bench: no rows in " + ", ".join(paths), file=sys.stderr)
        return 1
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), squeeze=False)
    for ax, (gate, state) in zip(axes[0], panels):
        for i, run in enumerate(runs):
            rows = [r for r in run["rows"] if r["gate"] == gate and r["state_dtype"] == state
                    and r["positions"] == "uniform" and r["status"] == "ok"]
            for L in sorted({r["ring_len"] for r in rows}):
                sel = sorted((r for r in rows if r["ring_len"] == L), key=lambda r: r["batch"])
                b = [r["batch"] for r in sel]
                colour = "C%d" % i
                label = "%s L=%d" % (run["backend"], L)
                for kind, style, marker in (("packed", "-", "o"), ("replay", "--", "s")):
                    y = [per_layer(r, kind) for r in sel]
                    ax.plot(b, y, style + marker, color=colour, label=f"{label} {kind}")
                    flagged = [(x, v) for x, v, r in zip(b, y, sel) if r.get("above_bound")]
                    if flagged:
                        ax.plot(*zip(*flagged), marker, color="white", markeredgecolor=colour, linestyle="none")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (rows)")
        ax.set_ylabel("µs per step per layer")
        ax.set_title("%s, %s state" % (gate.upper(), state))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("rssm bench, per layer: packed (solid) and replay (dashed), uniform ring positions; "
                 "hollow: above a physical bound", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote " + out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
