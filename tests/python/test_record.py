"""bench/record.py: the results of record it writes from a run's files (no
GPU needed: the files are made here in the formats the GPU scripts write)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD = os.path.join(ROOT, "bench", "record.py")


def graph_file(path, commit, rows):
    """A bench/decode_graph.py JSON with torch-graph rows (gate, state, batch, replay_us, packed_us)."""
    info = {"device": "Test GPU", "commit": commit, "command": f"decode_graph.py ({commit})", "backend": "cuda",
            "ring_dtype": "bf16", "sm_limit": 0}
    out = []
    for gate, state, B, replay, packed in rows:
        out.append({"harness": "torch-graph", "gate": gate, "state": state, "batch": B, "positions": "uniform",
                    "layers": 1, "packed_us": packed, "replay_us": replay, "empty_us": replay, "full_us": replay,
                    "flush_us": 2 * replay, "inplace_us": packed / 2, "copy_gbs": 1000.0})
    with open(path, "w") as f:
        json.dump({"info": info, "rows": out}, f)


def anchor_file(path):
    """The anchor harness's JSON: two peers of GDN fp32 at batch 1, one faster packed, one replay."""
    rows = [{"gate": "gdn", "state": "fp32", "B": 1, "peer": "vllm",
             "packed": {"vllm": {"us": 6.0}, "flashinfer": {"us": 4.5}},
             "replay": {"uniform": {"us": 5.5}, "staggered": {"us": 5.8}}}]
    with open(path, "w") as f:
        json.dump({"meta": {"device": "Test GPU", "sm_count": 7, "L": 16}, "copy": {"gbps": 1000.0}, "rows": rows}, f)


def test_later_rows_replace_earlier_and_anchor_makes_peers(tmp_path):
    a, b, anchor, d = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "h.json", tmp_path / "gpu"
    graph_file(a, "aaaa", [("gdn", "fp32", 1, 5.0, 4.8), ("kda", "fp32", 1, 7.0, 6.0)])
    graph_file(b, "bbbb", [("kda", "fp32", 1, 4.0, 6.5)])
    anchor_file(anchor)
    r = subprocess.run([sys.executable, RECORD, str(d), "--shape", "test", "--anchor", str(anchor), str(a), str(b)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    peers = json.load(open(d / "peers.json"))
    assert peers["best_us"]["gdn/fp32/uniform"]["1"] == 4.5
    assert peers["best_who"]["gdn/fp32/uniform"]["1"] == "flashinfer packed"
    assert peers["best_us"]["gdn/fp32/staggered"]["1"] == 5.8
    rows = json.load(open(d / "summary.json"))
    kda = [x for x in rows if x["gate"] == "kda"]
    assert len(kda) == 1 and kda[0]["replay_us"] == 4.0 and kda[0]["commit"] == "bbbb"
    assert [x["gate"] for x in rows] == ["gdn", "kda"]
    page = open(d / "results.md").read()
    # the B = 1 goal comes from the peers of this GPU, not from another's
    assert "| GDN fp32 B=1: the faster of packed and replay <= 4.50 (flashinfer packed) | 4.80 | **no** |" in page
