#!/usr/bin/env python3
"""rssm_layer_verify on a GPU as an engine calls it (Layer.verify on torch
CUDA tensors, rings of L entries), checked against the cpu backend's window
on the same inputs (outputs, and the ring entries it leaves), then timed
against T calls of Layer.run (the steps it stands for) with CUDA events.
From the repository root on the GPU machine, with a CUDA build:

    PYTHONPATH=python RSSM_LIBRARY=$BUILD/librssm.so python3 bench/check_layer_verify.py

Shapes: Qwen3.5 GDN and Kimi-Linear KDA layers (docs/design.md §5), L = 16,
fp16 ring, batch 64 (--rows: 4 or fewer take the one-launch window of the
small batches), windows of 2, 4 and 8 from random ring positions (the
committed entries random too), the windows of 4 without an overflow array
(no report asked: no reset before the kernel); each of the configurations
below: fp32 state with precomputed gates and fp32 activations, bf16 state
with raw gates (A_log, dt_bias) and bf16 activations. Exit status 1 if a check failed; a
table last.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

import rssm
from benchlib import L, SHAPES

SLOTS = 80


# (state dtype, gate mode, activation dtype)
CONFIGS = (("fp32", "precomputed", "fp32"), ("bf16", "raw", "bf16"))
TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


def desc_for(kind: str, rows: int, state: str, mode: str, io: str) -> rssm.LayerDesc:
    H, HV, K, V = SHAPES[kind]
    G = K if kind == "kda" else 1
    return rssm.LayerDesc(num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=SLOTS, max_rows=rows,
                          ring_len=L, gate_kind=kind, gate_mode=mode, ring_dtype="fp16", state_dtype=state,
                          io_dtype=io, gate_dtype=io,
                          ring_d_slot_stride=HV * L * V, ring_d_head_stride=L * V,
                          ring_k_slot_stride=H * L * K, ring_k_head_stride=L * K,
                          ring_g_slot_stride=HV * L * G, ring_g_head_stride=L * G)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64, help="rows of a window (default 64, at most 80)")
    ROWS = ap.parse_args().rows
    if not 1 <= ROWS <= SLOTS:
        ap.error(f"--rows must be in 1..{SLOTS}")
    failed = 0
    table = []
    for (state, mode, io), kind in [(c, k) for c in CONFIGS for k in SHAPES]:
        H, HV, K, V = SHAPES[kind]
        G = K if kind == "kda" else 1
        rng = np.random.default_rng(7)
        for T in (2, 4, 8):
            d = desc_for(kind, ROWS * T, state, mode, io)
            gpu, cpu = rssm.Layer(d, "cuda"), rssm.Layer(d, "cpu")
            # the state as its dtype holds it; the cpu backend takes it as torch's
            st = torch.empty((SLOTS, HV, V, K), dtype=TORCH_DTYPE[state]).uniform_(-0.1, 0.1)
            pool = dict(ring_d=rng.uniform(-0.5, 0.5, (SLOTS, HV, L, V)).astype(np.float16),
                        ring_k=rng.uniform(-0.2, 0.2, (SLOTS, H, L, K)).astype(np.float16),
                        ring_g=-rng.uniform(0.01, 0.5, (SLOTS, HV, L, G) if G > 1 else (SLOTS, HV, L))
                        .astype(np.float32))
            gate = (rng.uniform(-2, 2, (T * ROWS, HV, G) if G > 1 else (T * ROWS, HV)) if mode == "raw"
                    else -rng.uniform(0.01, 0.5, (T * ROWS, HV, G) if G > 1 else (T * ROWS, HV)))
            step = dict(q=rng.uniform(-1, 1, (T * ROWS, H, K)), k=rng.uniform(-1, 1, (T * ROWS, H, K)),
                        v=rng.uniform(-1, 1, (T * ROWS, HV, V)), gate=gate,
                        beta=rng.uniform(-2, 2, (T * ROWS, HV)) if mode == "raw"
                        else rng.uniform(0.1, 0.9, (T * ROWS, HV)))
            step = {n: torch.from_numpy(a.astype(np.float32)).to(TORCH_DTYPE[io]) for n, a in step.items()}
            weights = (dict(A_log=torch.from_numpy(rng.uniform(-1, 1, HV).astype(np.float32)),
                            dt_bias=torch.from_numpy(rng.uniform(-1, 1, HV * G).astype(np.float32)))
                       if mode == "raw" else {})
            idx = rng.choice(SLOTS, ROWS, replace=False).astype(np.int32)
            pos = rng.integers(0, L - T, ROWS).astype(np.int32)  # write_pos + T <= L - 1
            rows = dict(slot_index=torch.from_numpy(idx), write_pos=torch.from_numpy(pos),
                        drafts=torch.from_numpy(np.full(ROWS, T, np.int32)))
            # the cpu window on host copies
            c_pool = {n: torch.from_numpy(a.copy()) for n, a in pool.items()}
            c_state = st.clone()
            c_out = torch.zeros((T * ROWS, HV, V), dtype=TORCH_DTYPE[io])
            cpu.verify(out=c_out, state=c_state, **step, **weights, **c_pool, **rows)
            # the GPU window on CUDA tensors
            dev = {n: torch.from_numpy(a).cuda() for n, a in pool.items()}
            dev.update({n: a.cuda() for n, a in {**step, **weights, **rows}.items()})
            dev["state"] = st.cuda()
            g_out = torch.zeros((T * ROWS, HV, V), dtype=TORCH_DTYPE[io], device="cuda")
            overflow = torch.zeros(ROWS, dtype=torch.int32, device="cuda") if T != 4 else None
            args = dict(out=g_out, overflow=overflow, **dev)
            gpu.verify(**args)
            torch.cuda.synchronize()
            e_out = rel(g_out.float().cpu().numpy(), c_out.float().numpy())
            # the window's own entries: positions write_pos .. write_pos + T - 1 of each row's slot
            def entries(a):
                a = a.cpu().numpy() if torch.is_tensor(a) else a
                return np.stack([a[i, :, p:p + T] for i, p in zip(idx, pos)])
            e_ring = max(rel(entries(dev["ring_d"]), entries(c_pool["ring_d"])),
                         rel(entries(dev["ring_k"]), entries(c_pool["ring_k"])))
            state_kept = torch.equal(dev["state"].cpu(), st)
            tol = 2e-5 if io == "fp32" else 1e-2
            ok = e_out <= tol and e_ring <= 2e-3 and state_kept and (overflow is None or bool((overflow == -1).all()))
            failed += not ok
            # timing: the window against T steps (Layer.run, one row block per token)
            runs = [dict(q=dev["q"][t * ROWS:(t + 1) * ROWS], k=dev["k"][t * ROWS:(t + 1) * ROWS],
                         v=dev["v"][t * ROWS:(t + 1) * ROWS], gate=dev["gate"][t * ROWS:(t + 1) * ROWS],
                         beta=dev["beta"][t * ROWS:(t + 1) * ROWS], out=g_out[t * ROWS:(t + 1) * ROWS],
                         slot_index=dev["slot_index"], state=dev["state"], ring_d=dev["ring_d"],
                         ring_k=dev["ring_k"], ring_g=dev["ring_g"],
                         write_pos=torch.full((ROWS,), t, dtype=torch.int32, device="cuda"),
                         **{n: dev[n] for n in weights}) for t in range(T)]

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
            table.append((f"{kind} {state} {mode[:3]} {io}", T, e_out, e_ring, state_kept, w_us, s_us, ok))
            gpu.close()
            cpu.close()
    print("gate state gates io   T  out err vs cpu  ring err  state kept  window us  T steps us  window/steps  status")
    for kind, T, e_out, e_ring, kept, w, s, ok in table:
        print(f"{kind:20s} {T:2d}  {e_out:13.2e}  {e_ring:8.1e}  {str(kept):10s}  {w:9.1f}  {s:10.1f}  "
              f"{w / s:12.2f}  {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
