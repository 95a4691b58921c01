#!/usr/bin/env python3
"""The padding conventions on a GPU (rssm_layer_desc.padding, docs/engines.md):
a layer with padding="nonpositive" (vLLM's null slot 0) and one with the
default, each run, advanced and verified on `--backend` with torch tensors,
against the cpu backend on NumPy copies of the same inputs: every output,
ring entry, state and cursor must match to --tol, and under "nonpositive"
the rows naming slot 0 (and -1) must come out zero with slot 0 untouched.
From the repository root on the GPU machine, with a CUDA build:

    PYTHONPATH=python RSSM_LIBRARY=$BUILD/librssm.so python3 bench/check_padding.py

Exit status 1 if a check failed. (--backend cpu --device cpu runs the same
code on the CPU, to check the script itself.)
"""

import argparse
import sys

import numpy as np
import torch

import rssm

H, HV, K, V, SLOTS, L, ROWS, T = 2, 4, 64, 32, 6, 8, 4, 3


def case(padding, backend, device, tol):
    rng = np.random.default_rng(5)
    desc = rssm.LayerDesc(num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=SLOTS, max_rows=ROWS * T,
                          ring_len=L, gate_mode="precomputed", ring_dtype="fp32", padding=padding)
    R = L - 1
    host = dict(state=rng.uniform(-0.1, 0.1, (SLOTS, HV, V, K)), ring_d=rng.uniform(-0.1, 0.1, (SLOTS, HV, R, V)),
                ring_k=rng.uniform(-0.1, 0.1, (SLOTS, H, R, K)), ring_g=-rng.uniform(0.01, 0.3, (SLOTS, HV, R)))
    host = {n: a.astype(np.float32) for n, a in host.items()}
    idx = np.array([0, 3, -1, 5], np.int32)
    wp = np.array([2, 4, 0, 1], np.int32)
    steps = dict(q=rng.uniform(-1, 1, (ROWS * T, H, K)), k=rng.uniform(-1, 1, (ROWS * T, H, K)),
                 v=rng.uniform(-1, 1, (ROWS * T, HV, V)), gate=-rng.uniform(0.01, 0.5, (ROWS * T, HV)),
                 beta=rng.uniform(0.1, 0.9, (ROWS * T, HV)))
    steps = {n: a.astype(np.float32) for n, a in steps.items()}
    results = {}
    for side, (bk, dev) in (("ref", ("cpu", None)), ("dut", (backend, device))):
        layer = rssm.Layer(desc, bk)
        conv = (lambda a: a.copy()) if dev is None else (lambda a: torch.from_numpy(a.copy()).to(dev))
        t = {n: conv(a) for n, a in host.items()}
        s = {n: conv(a) for n, a in steps.items()}
        slot, pos = conv(idx), conv(wp)
        cursor = conv(np.full(SLOTS, 9, np.int32))
        out = conv(np.full((ROWS, HV, V), 7.0, np.float32))
        layer.run(out=out, slot_index=slot, write_pos=pos, **{n: a[:ROWS] for n, a in s.items()}, **t)
        layer.advance(slot, pos, cursor)
        wout = conv(np.full((ROWS * T, HV, V), 7.0, np.float32))
        drafts = conv(np.full(ROWS, T, np.int32))
        layer.verify(drafts=drafts, out=wout, slot_index=slot, write_pos=conv(np.minimum(wp + 1, R - T)), **s, **t)
        if dev is not None:
            torch.cuda.synchronize() if str(dev).startswith("cuda") else None
        get = (lambda a: a) if dev is None else (lambda a: a.cpu().numpy())
        results[side] = {"out": get(out), "window": get(wout), "cursor": get(cursor),
                         **{n: get(a) for n, a in t.items()}}
    ok = True
    ref, dut = results["ref"], results["dut"]
    for n in ref:
        err = float(np.max(np.abs(ref[n].astype(np.float64) - dut[n])))
        good = err <= tol
        ok &= good
        print(f"{padding:12s} {n:7s} max |{backend} - cpu| = {err:.2e}: {'ok' if good else 'FAIL'}")
    pads = padding == "nonpositive"
    zeros = [2] + ([0] if pads else [])
    got = all((dut["out"][r] == 0).all() for r in zeros) and (dut["out"][1] != 0).all()
    got &= all((dut["window"][t * ROWS + r] == 0).all() for r in zeros for t in range(T))
    untouched = all(np.array_equal(dut[n][0], host[n][0]) for n in host)
    got &= untouched == pads and (dut["cursor"][0] == 9) == pads
    print(f"{padding:12s} rows naming {'0 and -1' if pads else '-1'} pad, slot 0 "
          f"{'untouched' if untouched else 'used'}: {'ok' if got else 'FAIL'}")
    return ok and got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tol", type=float, default=2e-5)
    a = ap.parse_args()
    ok = all([case(p, a.backend, a.device, a.tol) for p in ("out_of_range", "nonpositive")])
    print("padding_check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
