#!/usr/bin/env python3
"""The table of bench/h200/layer_ab.sh: for each CLI (NAME=CLI, in the
order given) the median over rounds of `rssm bench`'s µs per layer, per
gate and batch: the replay cycle's average step and its empty-ring,
full-ring and flush steps.

    bench/h200/layer_ab.py OUT_DIR NAME=CLI [NAME=CLI ...]
"""

import glob
import json
import os
import statistics
import sys


def main() -> int:
    out_dir, names = sys.argv[1], [a.split("=", 1)[0] for a in sys.argv[2:]]
    # (gate, batch, metric) -> name -> [us per layer, one per round]
    table = {}
    for name in names:
        for path in sorted(glob.glob(os.path.join(out_dir, f"ab-{name}-r*.json"))):
            with open(path) as f:
                rows = json.load(f)["rows"]
            for r in rows:
                if r["status"] != "ok":
                    continue
                for metric in ("replay_us", "empty_us", "full_us", "flush_us", "packed_us"):
                    key = (r["gate"], r["batch"], metric[:-3])
                    table.setdefault(key, {}).setdefault(name, []).append(r[metric] / r["layers"])
    print("us per layer (rssm bench, median over rounds); last column: last / first")
    print(f"{'gate':5} {'batch':>5} {'step':>7} " + " ".join(f"{n:>9}" for n in names) + "    ratio")
    for key in sorted(table, key=lambda k: (k[0], k[1], ("replay", "empty", "full", "flush", "packed").index(k[2]))):
        vals = [statistics.median(table[key][n]) if n in table[key] else float("nan") for n in names]
        ratio = vals[-1] / vals[0] if vals and vals[0] else float("nan")
        print(f"{key[0]:5} {key[1]:5} {key[2]:>7} " + " ".join(f"{v:9.2f}" for v in vals) + f"  {ratio:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
