#!/usr/bin/env python3
"""Accuracy against a float64 recurrence on an engine-shaped decode: rssm's
per-layer entry and SGLang's ReplaySSM kernel on the same steps, side by
side (README, "What rssm gives an engine"; its results go to bench/results/<shape>/ once run).

An engine's decode, not a benchmark's: B rows on shuffled slots; rows join
at different steps, each with a fresh (prefill) state and an empty ring, so
each sits at its own ring position; a row's sequence ends now and then and
a new one takes another free slot; rows with no sequence and the batch's
last rows are padding (slot index -1, as both kernels take it); every row
is forced to flush on about one step in ten (a prefix-cache snapshot). The
heads are Qwen3.5's GDN (H 16, HV 32, K = V = 128) and Kimi-Linear's KDA
(H = HV = 32, K = V = 128), rssm's presets qwen3.5-gdn and kimi-linear-kda;
the gates raw (g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), the
q/k L2 norm in the kernel), as both engines call them.

Each contestant keeps its own state pool and rings (the ring in the state's
dtype, as SGLang's pool allocates it; --ring to choose), the host the
cursors (write_pos from the slot's cursor; after the step 0 where the row
flushed, else +1), and a float64 recurrence of the same inputs the truth:
the exact step S' = S diag(exp g) + beta (v - S diag(exp g) k) k^T,
o = S' q, from the same starting states (drawn as bf16 values, which every
state dtype holds exactly). The error of a step is
||o - o_ref|| / ||o_ref|| over its live rows, the output's RMS error
relative to its RMS; the script reports each contestant's worst and median
step, and exits 1 if rssm's fp32-state error passes --tol.

SGLang's kernel is read from its wheel (`pip download --no-deps
sglang==0.5.23`): the file sglang/kernels/ops/attention/linear/
fused_recurrent_linear_replayssm.py imports only torch and triton, so it is
loaded as it is, nothing changed. On the GPU, from the repository root,
with a CUDA build of librssm (docs/h200.md):

    PYTHONPATH=python RSSM_LIBRARY=.devbin/librssm.so.0 python3 bench/accuracy.py \\
        --sglang-wheel .whl/sglang-0.5.23-*.whl --out $OUT/accuracy.json

--dry-run: on the CPU, rssm's cpu backend alone against the reference (no
SGLang, no GPU), a few steps at a small batch: checks the harness.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

import rssm
from benchlib import sglang_replayssm

SHAPES = {  # rssm's presets qwen3.5-gdn and kimi-linear-kda (common/model.c)
    "gdn": dict(H=16, HV=32, K=128, V=128),
    "kda": dict(H=32, HV=32, K=128, V=128),
}
DT = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
class Schedule:
    """The engine's side, shared by every contestant: which sequence each
    row holds and on which slot, the slots' cursors, the step's inputs."""

    def __init__(self, gate, B, pad, L, steps, seed):
        self.gate, self.B, self.L, self.steps = gate, B, L, steps
        self.s = SHAPES[gate]
        self.slots = 2 * B + 1
        self.rng = np.random.default_rng(seed)
        self.g = torch.Generator().manual_seed(seed)
        self.free = list(self.rng.permutation(self.slots))  # shuffled slots
        self.row_slot = np.full(B, -1, np.int64)
        self.join = self.rng.integers(0, 2 * L, B)  # rows join at different steps
        self.join[B - pad:] = steps + 1  # the batch's padding rows never do
        self.cursor = np.zeros(self.slots, np.int64)
        H, HV, K, V = (self.s[x] for x in ("H", "HV", "K", "V"))
        G = HV * K if gate == "kda" else HV
        self.A_log = torch.log(torch.empty(HV).uniform_(1, 16, generator=self.g))
        dt = torch.exp(torch.empty(G).uniform_(math.log(1e-3), math.log(1e-1), generator=self.g))
        self.dt_bias = dt + torch.log(-torch.expm1(-dt))  # softplus^-1(dt), the Mamba init
        self.width = 2 * H * K + HV * V

    def fresh_state(self):
        """A prefill's state, as bf16 values (held exactly by fp32 and bf16)."""
        s = self.s
        return (0.1 * torch.randn(s["HV"], s["V"], s["K"], generator=self.g)).to(torch.bfloat16).double()

    def step(self, t):
        """Step t: the rows' slots (-1 padding), write_pos, forced flushes,
        inputs, and the slots that start a new sequence (with its state)."""
        new = []
        for r in range(self.B):
            ends = self.row_slot[r] >= 0 and self.rng.random() < 0.02
            if ends:  # the sequence ends; its slot goes back
                self.free.append(int(self.row_slot[r]))
                self.row_slot[r] = -1
            if self.row_slot[r] < 0 and (t == self.join[r] or (ends and t < self.steps - 2)):
                slot = self.free.pop(0)
                self.row_slot[r] = slot
                self.cursor[slot] = 0
                new.append((slot, self.fresh_state()))
        live = self.row_slot >= 0
        idx = torch.from_numpy(self.row_slot.astype(np.int32))
        wp = torch.from_numpy(np.where(live, self.cursor[np.clip(self.row_slot, 0, None)], 0).astype(np.int32))
        force = torch.from_numpy(((self.rng.random(self.B) < 0.1) & live).astype(np.int32))
        H, HV, K = self.s["H"], self.s["HV"], self.s["K"]
        mixed = torch.randn(self.B, self.width, generator=self.g)
        a = 0.5 * torch.randn(self.B, HV * K if self.gate == "kda" else HV, generator=self.g)
        b = torch.randn(self.B, HV, generator=self.g)
        return dict(idx=idx, wp=wp, force=force, mixed=mixed, a=a, b=b, live=torch.from_numpy(live)), new

    def advance(self, st):
        flush = (st["wp"].numpy() == self.L - 1) | (st["force"].numpy() != 0)
        for r in np.nonzero(st["live"].numpy())[0]:
            slot = self.row_slot[r]
            self.cursor[slot] = 0 if flush[r] else self.cursor[slot] + 1


class Reference:
    """The float64 recurrence, per slot."""

    def __init__(self, sch):
        s = sch.s
        self.sch = sch
        self.S = torch.zeros(sch.slots, s["HV"], s["V"], s["K"], dtype=torch.float64)

    def step(self, st):
        sch, s = self.sch, self.sch.s
        H, HV, K, V = s["H"], s["HV"], s["K"], s["V"]
        out = torch.zeros(sch.B, HV, V, dtype=torch.float64)
        rows = torch.nonzero(st["live"]).flatten()
        m = st["mixed"][rows].double()
        n = len(rows)
        q, k = m[:, :H * K].view(n, H, K), m[:, H * K:2 * H * K].view(n, H, K)
        v = m[:, 2 * H * K:].view(n, HV, V)
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * K ** -0.5
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        q, k = q.repeat_interleave(HV // H, 1), k.repeat_interleave(HV // H, 1)
        x = st["a"][rows].double()
        if sch.gate == "kda":
            x = x.view(n, HV, K) + sch.dt_bias.double().view(HV, K)
        else:
            x = x + sch.dt_bias.double()
        g = -torch.exp(sch.A_log.double()).view(1, HV, *([1] if sch.gate == "kda" else [])) * torch.nn.functional.softplus(x)
        beta = torch.sigmoid(st["b"][rows].double())
        slots = st["idx"][rows].long()
        S = self.S[slots] * (torch.exp(g)[:, :, None, :] if sch.gate == "kda" else torch.exp(g)[:, :, None, None])
        d = (v - torch.einsum("nhvk,nhk->nhv", S, k)) * beta[..., None]
        S = S + d[..., None] * k[:, :, None, :]
        self.S[slots] = S
        out[rows] = torch.einsum("nhvk,nhk->nhv", S, q)
        return out


class Contestant:
    """One kernel's state pool and rings, fed the schedule's steps."""

    def __init__(self, name, sch, state, ring, io, dev, call):
        s = sch.s
        self.name, self.sch, self.dev, self.call = name, sch, dev, call
        self.state, self.io = state, DT[io]
        L, G = sch.L, (s["K"],) if sch.gate == "kda" else ()
        rd = DT[state if ring == "state" else ring]
        self.S = torch.zeros(sch.slots, s["HV"], s["V"], s["K"], dtype=DT[state], device=dev)
        # Ring entries at or past write_pos are never read: NaN says so.
        self.d = torch.full((sch.slots, s["HV"], L, s["V"]), float("nan"), dtype=rd, device=dev)
        self.k = torch.full((sch.slots, s["H"], L, s["K"]), float("nan"), dtype=rd, device=dev)
        self.g = torch.full((sch.slots, s["HV"], L, *G), float("nan"), dtype=torch.float32, device=dev)
        self.A_log, self.dt_bias = sch.A_log.to(dev), sch.dt_bias.to(dev)
        self.errors = []

    def start(self, slot, state):
        self.S[slot] = state.to(self.S.dtype).to(self.dev)

    def step(self, st, ref_out):
        sch, s = self.sch, self.sch.s
        B = sch.B
        t = {k: v.to(self.dev) for k, v in st.items()}
        out = torch.full((B, 1, s["HV"], s["V"]), float("nan"), dtype=self.io, device=self.dev)
        self.call(self, t["mixed"].to(self.io), t["a"], t["b"], out, t["idx"], t["wp"], t["force"])
        live = st["live"]
        o = out.view(B, s["HV"], s["V"])[live.to(self.dev)].double().cpu()
        r = ref_out[live]
        self.errors.append(float((o - r).norm() / r.norm()))


def call_rssm(backend):
    def call(c, mixed, a, b, out, idx, wp, force):
        s = c.sch.s
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            mixed, a, b, c.A_log, c.dt_bias, None, c.S, c.d, c.k, c.g, out.view(c.sch.B, s["HV"], s["V"]), idx, wp,
            force, gate_kind=c.sch.gate, use_qk_l2norm_in_kernel=True, backend=backend, ring_len=c.sch.L)
    return call


def call_sglang(fn):
    def call(c, mixed, a, b, out, idx, wp, force):
        s, kda = c.sch.s, c.sch.gate == "kda"
        fn(mixed, a.view(c.sch.B, s["HV"], s["K"]) if kda else a, b, c.A_log,
           c.dt_bias.view(s["HV"], s["K"]) if kda else c.dt_bias, s["K"] ** -0.5, c.S, c.d, c.k, c.g, out, idx, wp,
           force_flush=force, use_qk_l2norm_in_kernel=True, is_kda=kda)
    return call


def run(gate, args, sglang, dev, backend):
    sch = Schedule(gate, args.batch, args.pad, args.ring_len, args.steps, args.seed)
    ref = Reference(sch)
    cs = []
    for state in args.states:
        cs.append(Contestant(f"rssm {state}", sch, state, args.ring, args.io, dev, call_rssm(backend)))
        if sglang:
            cs.append(Contestant(f"SGLang ReplaySSM {state}", sch, state, args.ring, args.io, dev, call_sglang(sglang)))
    for t in range(args.steps):
        st, new = sch.step(t)
        for slot, state in new:
            ref.S[slot] = state
            for c in cs:
                c.start(slot, state)
        if not bool(st["live"].any()):
            sch.advance(st)
            continue
        o_ref = ref.step(st)
        for c in cs:
            c.step(st, o_ref)
        sch.advance(st)
    if dev != "cpu":
        torch.cuda.synchronize()
    rows = []
    for c in cs:
        e = np.array(c.errors)
        rows.append(dict(gate=gate, contestant=c.name, state=c.state, ring=args.ring, io=args.io, batch=args.batch,
                         steps=len(e), worst=float(e.max()), median=float(np.median(e)), finite=bool(np.isfinite(e).all())))
        print(f"{gate}  {c.name:<24} worst {rows[-1]['worst']:.2e}  median {rows[-1]['median']:.2e}  ({len(e)} steps)",
              flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sglang-wheel", help="SGLang's wheel (pip download --no-deps sglang==0.5.23)")
    ap.add_argument("--gates", default="gdn,kda")
    ap.add_argument("--states", default="fp32,bf16")
    ap.add_argument("--ring", default="state", choices=("state", "fp32", "fp16", "bf16"),
                    help="the rings' dtype (default: the state's, as SGLang's pool allocates them)")
    ap.add_argument("--io", default="fp32", choices=("fp32", "bf16"), help="mixed_qkv and out")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--pad", type=int, default=4, help="rows at the batch's end that are always padding")
    ap.add_argument("--ring-len", type=int, default=16)
    ap.add_argument("--steps", type=int, default=96)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-4, help="rssm's fp32-state worst step must be below this")
    ap.add_argument("--out", help="write the rows as JSON")
    ap.add_argument("--dry-run", action="store_true", help="CPU, rssm's cpu backend alone, 8 rows, 24 steps")
    args = ap.parse_args(argv)
    args.states = args.states.split(",")
    if args.dry_run:
        args.batch, args.pad, args.steps = 8, 2, 24
        dev, backend, sglang = "cpu", "cpu", None
    else:
        if not args.sglang_wheel:
            ap.error("--sglang-wheel is needed (or --dry-run)")
        dev, backend, sglang = "cuda", "cuda", sglang_replayssm(args.sglang_wheel)
    torch.manual_seed(args.seed)
    info = dict(device=torch.cuda.get_device_name() if dev == "cuda" else "cpu", torch=torch.__version__,
                rssm=rssm.__version__, library=str(rssm.library_path()), sglang_wheel=args.sglang_wheel,
                ring_len=args.ring_len, steps=args.steps, batch=args.batch, pad=args.pad, seed=args.seed)
    print(json.dumps(info), flush=True)
    rows = [r for gate in args.gates.split(",") for r in run(gate, args, sglang, dev, backend)]
    if args.out:
        Path(args.out).write_text(json.dumps(dict(info=info, rows=rows), indent=1) + "\n")
    bad = [r for r in rows if r["contestant"] == "rssm fp32" and not (r["worst"] < args.tol)]
    for r in bad:
        print(f"FAIL: {r['gate']} rssm fp32 worst step {r['worst']:.2e} >= --tol {args.tol:.0e}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
