#!/usr/bin/env python3
"""Checks what `rssm bench --out PREFIX` wrote and what tools/results_index.py
makes of it (ctest cli_bench_per_layer): per-layer figures in the JSON and
the CSV equal to the step's over its layers, an above_bound flag on every row
that agrees with the ratios, and an index.md that names the backend and the
per-layer figure of each shape.

usage: check_bench_results.py PREFIX RESULTS_INDEX_PY
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile


def close(a, b):
    return abs(a - b) <= 2e-3 * max(abs(a), abs(b))


def main(prefix, index_py):
    j = json.load(open(prefix + ".json"))
    rows = [r for r in j["rows"] if r["status"] == "ok"]
    assert rows, "no ok rows"
    for r in rows:
        for kind in ("packed", "replay"):
            assert close(r[f"{kind}_layer_us"] * r["layers"], r[f"{kind}_us"]), (kind, r)
        over = (r["packed_gbs"] > j["copy_gbs"] or r["replay_gbs"] > j["copy_gbs"]
                or r["inplace_us"] > r["packed_us"])
        assert r["above_bound"] == over, r
    for r in csv.DictReader(open(prefix + ".csv")):
        assert close(float(r["packed_layer_us"]) * int(r["layers"]), float(r["packed_us"])), r
        assert r["above_bound"] in ("0", "1"), r
    d = tempfile.mkdtemp()
    try:
        shutil.copy(prefix + ".json", os.path.join(d, "bench-x.json"))
        subprocess.run([sys.executable, index_py, d], check=True, stdout=subprocess.DEVNULL)
        page = open(os.path.join(d, "index.md")).read()
        for r in rows:
            if r["positions"] == "uniform":
                assert f"| {r['gate']} | {r['state_dtype']} | {r['ring_len']} | {r['batch']} | {j['backend']}" in page, page
                assert f"{r['replay_layer_us']:.2f}" in page, page
        assert "conformance did not run" in page
        assert f"{j['state_mib']} MiB of state per step" in page, page
        assert ("does not exceed the" in page) == j["state_within_llc"], page
    finally:
        shutil.rmtree(d)
    print("ok:", len(rows), "rows")


if __name__ == "__main__":
    main(*sys.argv[1:])
