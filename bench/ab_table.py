#!/usr/bin/env python3
"""`rssm bench --out` JSON files of several builds side by side (bench/run.sh's
stages ab, vulkan_ab and portable): per gate, state dtype, batch and
positions, µs per step per layer of the packed step, the replay cycle and
its empty-ring, full-ring and flush steps, each the median over the files
given under one name (rounds of the same build), and the last name's over
the first's.

    bench/ab_table.py NAME=FILE.json [NAME=FILE.json ...]
"""

import json
import statistics
import sys

METRICS = ("packed", "replay", "empty", "full", "flush")


def main() -> int:
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        sys.exit(__doc__)
    names = []
    table = {}  # (gate, state, batch, positions, metric) -> name -> [us per layer]
    for arg in sys.argv[1:]:
        name, path = arg.split("=", 1)
        if name not in names:
            names.append(name)
        with open(path) as f:
            rows = json.load(f)["rows"]
        for r in rows:
            if r["status"] != "ok":
                continue
            for m in METRICS:
                if r.get(f"{m}_us") is not None:
                    key = (r["gate"], r["state_dtype"], r["batch"], r["positions"], m)
                    table.setdefault(key, {}).setdefault(name, []).append(r[f"{m}_us"] / r["layers"])
    print("us per step per layer (rssm bench; the median where a name has several files); last column: last / first")
    print(f"{'gate':5} {'state':5} {'batch':>5} {'positions':9} {'step':>7} " + " ".join(f"{n:>10}" for n in names)
          + "    ratio")
    order = lambda k: (k[0], k[1], k[2], k[3], METRICS.index(k[4]))  # noqa: E731
    for key in sorted(table, key=order):
        vals = [statistics.median(table[key][n]) if n in table[key] else float("nan") for n in names]
        ratio = vals[-1] / vals[0] if vals[0] else float("nan")
        print(f"{key[0]:5} {key[1]:5} {key[2]:5} {key[3]:9} {key[4]:>7} " + " ".join(f"{v:10.2f}" for v in vals)
              + f"  {ratio:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
