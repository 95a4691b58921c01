#!/usr/bin/env python3
"""rssm_layer_verify on a GPU as an engine calls it (Layer.verify on torch
CUDA tensors, rings of L entries), checked against the cpu backend's window
on the same inputs (outputs, and the ring entries it leaves), then timed
against T calls of Layer.run (the steps it stands for) with CUDA events.
From the repository root on the GPU machine, with a CUDA build:

    PYTHONPATH=python RSSM_LIBRARY=$BUILD/librssm.so python3 bench/h200/layer_verify_check.py

Shapes: Qwen3.5 GDN and Kimi-Linear KDA layers (docs/design.md §5), L = 16,
fp32 state, fp16 ring, precomputed gates, batch 64, windows of 2, 4 and 8
from ring position 0. Exit status 1 if a check failed; a table last.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import rssm

L, ROWS, SLOTS = 16, 64, 80
SHAPES = {"gdn": (16, 32, 128, 128), "kda": (32, 32, 128, 128)}  # H, HV, K, V


def desc_for(kind: str, rows: int) -> rssm.LayerDesc:
    H, HV, K, V = SHAPES[kind]
    G = K if kind == "kda" else 1
    return rssm.LayerDesc(num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=SLOTS, max_rows=rows,
                          ring_len=L, gate_kind=kind, gate_mode="precomputed", ring_dtype="fp16",
                          ring_d_slot_stride=HV * L * V, ring_d_head_stride=L * V,
                          ring_k_slot_stride=H * L * K, ring_k_head_stride=L * K,
                          ring_g_slot_stride=HV * L * G, ring_g_head_stride=L * G)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main() -> int:
    failed = 0
    table = []
    for kind in SHAPES:
        H, HV, K, V = SHAPES[kind]
        G = K if kind == "kda" else 1
        rng = np.random.default_rng(7)
        for T in (2, 4, 8):
            d = desc_for(kind, ROWS * T)
            gpu, cpu = rssm.Layer(d, "cuda"), rssm.Layer(d, "cpu")
            pool = dict(state=rng.uniform(-0.1, 0.1, (SLOTS, HV, V, K)).astype(np.float32),
                        ring_d=np.zeros((SLOTS, HV, L, V), np.float16),
                        ring_k=np.zeros((SLOTS, H, L, K), np.float16),
                        ring_g=np.zeros((SLOTS, HV, L, G) if G > 1 else (SLOTS, HV, L), np.float32))
            step = dict(q=rng.uniform(-1, 1, (T * ROWS, H, K)), k=rng.uniform(-1, 1, (T * ROWS, H, K)),
                        v=rng.uniform(-1, 1, (T * ROWS, HV, V)),
                        gate=-rng.uniform(0.01, 0.5, (T * ROWS, HV, G) if G > 1 else (T * ROWS, HV)),
                        beta=rng.uniform(0.1, 0.9, (T * ROWS, HV)))
            step = {n: a.astype(np.float32) for n, a in step.items()}
            idx = rng.choice(SLOTS, ROWS, replace=False).astype(np.int32)
            rows = dict(slot_index=idx, write_pos=np.zeros(ROWS, np.int32),
                        drafts=np.full(ROWS, T, np.int32))
            # the cpu window on numpy copies
            c_pool = {n: a.copy() for n, a in pool.items()}
            c_out = np.zeros((T * ROWS, HV, V), np.float32)
            cpu.verify(out=c_out, **step, **c_pool, **rows)
            # the GPU window on torch tensors
            dev = {n: torch.from_numpy(a).cuda() for n, a in {**pool, **step, **rows}.items()}
            g_out = torch.zeros((T * ROWS, HV, V), dtype=torch.float32, device="cuda")
            overflow = torch.zeros(ROWS, dtype=torch.int32, device="cuda")
            args = dict(out=g_out, overflow=overflow, **dev)
            gpu.verify(**args)
            torch.cuda.synchronize()
            e_out = rel(g_out.cpu().numpy(), c_out)
            e_ring = max(rel(dev["ring_d"].cpu().numpy()[idx][:, :, :T], c_pool["ring_d"][idx][:, :, :T]),
                         rel(dev["ring_k"].cpu().numpy()[idx][:, :, :T], c_pool["ring_k"][idx][:, :, :T]))
            state_kept = torch.equal(dev["state"].cpu(), torch.from_numpy(pool["state"]))
            ok = e_out <= 2e-5 and e_ring <= 2e-3 and state_kept and bool((overflow == -1).all())
            failed += not ok
            # timing: the window against T steps (Layer.run, one row block per token)
            runs = [dict(q=dev["q"][t * ROWS:(t + 1) * ROWS], k=dev["k"][t * ROWS:(t + 1) * ROWS],
                         v=dev["v"][t * ROWS:(t + 1) * ROWS], gate=dev["gate"][t * ROWS:(t + 1) * ROWS],
                         beta=dev["beta"][t * ROWS:(t + 1) * ROWS], out=g_out[t * ROWS:(t + 1) * ROWS],
                         slot_index=dev["slot_index"], state=dev["state"], ring_d=dev["ring_d"],
                         ring_k=dev["ring_k"], ring_g=dev["ring_g"],
                         write_pos=torch.full((ROWS,), t, dtype=torch.int32, device="cuda")) for t in range(T)]

            def time_it(fn, reps=50):
                for _ in range(5):
                    fn()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                ts = []
                for _ in range(reps):
                    a.record()
                    fn()
                    b.record()
                    b.synchronize()
                    ts.append(a.elapsed_time(b) * 1e3)
                return float(np.median(ts))

            w_us = time_it(lambda: gpu.verify(**args))
            s_us = time_it(lambda: [gpu.run(**r) for r in runs])
            table.append((kind, T, e_out, e_ring, state_kept, w_us, s_us, ok))
            gpu.close()
            cpu.close()
    print("gate  T  out err vs cpu  ring err  state kept  window us  T steps us  window/steps  status")
    for kind, T, e_out, e_ring, kept, w, s, ok in table:
        print(f"{kind:4s} {T:2d}  {e_out:13.2e}  {e_ring:8.1e}  {str(kept):10s}  {w:9.1f}  {s:10.1f}  "
              f"{w / s:12.2f}  {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
