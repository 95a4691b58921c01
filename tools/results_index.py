#!/usr/bin/env python3
"""Writes the one results page of a tools/run: DIR/index.md, from the files
the run left in DIR (info.txt, conform.txt, bench-*.json): which backends
started, what conformance said, and per shape which backend was fastest,
packed and replay, in µs per step per layer, with the rows whose ratio to a
physical bound is above 100% flagged rather than counted.

usage: results_index.py DIR
"""
import glob
import json
import os
import re
import sys


def conform_summary(path):
    """(the tally line, the failing rows) of rssm conform's output."""
    if not os.path.exists(path):
        return "conformance did not run", []
    lines = open(path, errors="replace").read().splitlines()
    tally = next((ln for ln in reversed(lines) if re.match(r"\d+ passed, \d+ failed", ln)), "no tally (stopped?)")
    return tally, [ln for ln in lines if " FAIL " in ln]


def state_line(run):
    """The state a run touched per step and, on the cpu backend, why that
    size (rssm bench: four times the last-level cache, bounded in --quick by
    a time budget) and whether it could exceed the cache at all."""
    line = f"{run['state_mib']} MiB of state per step"
    if run.get("state_bound"):
        line += f" (not the {run['state_wanted_mib']} MiB wanted, 4x the cache: bounded by {run['state_bound']})"
    if run.get("state_within_llc"):
        line += (f"; **the state does not exceed the {run['llc_mib']} MiB last-level cache reported, so these "
                 "figures may be the cache's, not memory's**")
    return line


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    d = argv[1]
    runs = []
    for p in sorted(glob.glob(os.path.join(d, "bench-*.json"))):
        with open(p) as f:
            runs.append(json.load(f))
    tally, fails = conform_summary(os.path.join(d, "conform.txt"))
    out = [f"# rssm results: {os.path.basename(os.path.normpath(d))}", ""]
    if os.path.exists(os.path.join(d, "info.txt")):
        avail = [m.group(1) for ln in open(os.path.join(d, "info.txt"))
                 if (m := re.match(r"(\S+): available", ln))]
        out += [f"Backends that started: {', '.join(avail) or 'none'} (`info.txt`).", ""]
    out += ["## Conformance against the float64 oracle (`conform.txt`)", "", tally, ""]
    out += [f"    {ln}" for ln in fails[:20]] + ([""] if fails else [])

    out += ["## Speed (`bench-*.txt`, `bench.png`): µs per step per layer, uniform ring positions", ""]
    if not runs:
        out += ["No benchmark ran.", ""]
    else:
        out += [f"- {r['backend']} on {r['device']}: copy bandwidth {r['copy_gbs']:.1f} GB/s; {state_line(r)}"
                for r in runs] + [""]
        shapes = {}
        flagged = []
        for run in runs:
            for r in run["rows"]:
                if r["status"] != "ok" or r["positions"] != "uniform":
                    continue
                key = (r["gate"], r["state_dtype"], r["ring_len"], r["batch"])
                for kind in ("packed", "replay"):
                    us = r[f"{kind}_layer_us"]
                    shapes.setdefault(key, {}).setdefault(kind, []).append((us, run["backend"], r.get("above_bound")))
                if r.get("above_bound"):
                    flagged.append(f"{run['backend']} {r['gate']} {r['state_dtype']} L={r['ring_len']} B={r['batch']}")
        out += ["| gate | state | L | batch | fastest packed | µs/layer | fastest replay | µs/layer | others (replay) |",
                "|---|---|---|---|---|---|---|---|---|"]
        for (gate, state, L, batch), kinds in sorted(shapes.items()):
            cells = []
            for kind in ("packed", "replay"):
                us, name, flag = min(kinds[kind])
                cells += [name + (" (!)" if flag else ""), f"{us:.2f}"]
            others = ", ".join(f"{n} {u:.2f}" for u, n, _ in sorted(kinds["replay"])[1:]) or "-"
            out.append(f"| {gate} | {state} | {L} | {batch} | {' | '.join(cells)} | {others} |")
        out.append("")
        if flagged:
            out += ["(!) Above a physical bound (a ratio to the copy bandwidth or the in-place pass over 100%): the "
                    "state was served from a cache, or the timing is off; these are not bandwidth figures: "
                    + "; ".join(flagged) + ".", ""]
    path = os.path.join(d, "index.md")
    with open(path, "w") as f:
        f.write("\n".join(out))
    print("wrote " + path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
