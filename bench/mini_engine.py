#!/usr/bin/env python3
"""A miniature decode engine: one decode step of a stack of Gated DeltaNet
layers (Qwen3-Next shapes, random weights, bf16 activations: RMSNorm,
in_proj_qkvz/ba, the conv1d update, the GDN step, gated RMSNorm, out_proj,
residual; --mlp-inter adds a dense MLP), timed as an engine sees it (TPOT) in
CUDA graphs with each GDN step variant, with the GDN step's share of it:

  triton         vLLM's fused_sigmoid_gating_delta_rule_update
  triton-packed  vLLM's fused_recurrent_gated_delta_rule_packed_decode
  rssm           rssm.fused_recurrent_gated_delta_rule_replayssm (+ the cursor
                 refresh before the first layer, rssm.advance after the last)

One graph holds a ring cycle (L steps); step = median replay / L; GDN share =
step - base (the same stack without the GDN step). Every variant's GDN step is
first checked against rssm's. bench/mini_engine.md has the details; on
the GPU, from the repository root:

    PYTHONPATH=python RSSM_LIBRARY=BUILD/librssm.so python3 bench/mini_engine.py --out DIR/mini_engine.json

--dry-run: on the CPU at a tiny size, rssm's cpu backend against a pure-torch
recurrence standing in for Triton, every body run once eagerly, no timing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import namedtuple

import torch
import torch.nn.functional as F

import rssm
from benchlib import Timer, copy_gbs, uniform, vllm_fla

# Qwen/Qwen3-Next-80B-A3B-Instruct config.json (and Qwen3.5-35B-A3B's): hidden_size, linear_num_key_heads,
# linear_num_value_heads, linear_{key,value}_head_dim, linear_conv_kernel_dim; shared_expert_intermediate_size
# 512. The 80B has 36 GDN layers, the 35B 30: the default --layers 32 lies between.
FULL = dict(hidden=2048, H=16, HV=32, K=128, V=128, conv=4)
TINY = dict(hidden=64, H=4, HV=8, K=16, V=16, conv=4)  # --dry-run: HV*2 bytes stays 16-byte aligned
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TRITON = ("triton", "triton-packed")
EPS = 1e-6
vf = {}  # vLLM's Triton entry points, imported at run time from .peers


class Dims(namedtuple("Dims", "hidden H HV K V conv")):
    conv_dim = property(lambda d: 2 * d.H * d.K + d.HV * d.V)  # mixed_qkv's width: q | k | v


class Weights:
    """One layer's parameters; std 1/sqrt(fan_in) keeps the residual stream O(1)."""

    def __init__(self, d: Dims, mlp_inter, gen, dev):
        bf = torch.bfloat16
        lin = lambda o, i: uniform((o, i), -math.sqrt(3 / i), math.sqrt(3 / i), bf, gen, dev)
        self.norm = uniform((d.hidden,), 0.5, 1.5, bf, gen, dev)
        self.qkvz = lin(d.conv_dim + d.HV * d.V, d.hidden)  # in_proj_qkvz: q | k | v | z
        self.ba = lin(2 * d.HV, d.hidden)  # in_proj_ba: b | a
        self.conv = uniform((d.conv_dim, d.conv), -0.5, 0.5, bf, gen, dev)
        self.A_log = uniform((d.HV,), -1.0, 0.5, torch.float32, gen, dev)
        self.dt_bias = uniform((d.HV,), -1.0, 1.0, torch.float32, gen, dev)
        self.gnorm = uniform((d.V,), 0.5, 1.5, bf, gen, dev)
        self.out = lin(d.hidden, d.HV * d.V)
        self.mlp = None
        if mlp_inter:  # post-attention norm, gate_up, down: a shared expert as a dense MLP
            self.mlp = (uniform((d.hidden,), 0.5, 1.5, bf, gen, dev), lin(2 * mlp_inter, d.hidden),
                        lin(d.hidden, mlp_inter))


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


def gated_rms_norm(o, z, w):
    """vLLM's RMSNormGated (norm before gate, per value head): norm(o) * w * silu(z)."""
    of = o.float()
    y = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
    return (y * F.silu(z.float())).to(o.dtype)


def conv_update(conv_state, x, w, idx):
    """The causal conv1d decode step on [pool, conv_dim, k - 1] states: shift in
    this step's column, dot with the k taps, SiLU (vLLM's causal_conv1d_update)."""
    win = torch.cat([conv_state.index_select(0, idx), x.unsqueeze(-1)], dim=-1)
    conv_state.index_copy_(0, idx, win[:, :, 1:])
    return F.silu((win.float() * w.float()).sum(-1)).to(x.dtype)


def reference_decode(d: Dims, mixed, a, b, A_log, dt_bias, state, idx, out):
    """The gated delta rule in torch (--dry-run's stand-in for Triton): the
    Triton kernels' formulas, fp32 math, the state written back in place."""
    B = mixed.shape[0]
    x = mixed.float()
    q = x[:, :d.H * d.K].view(B, d.H, d.K)
    k = x[:, d.H * d.K:2 * d.H * d.K].view(B, d.H, d.K)
    v = x[:, 2 * d.H * d.K:].view(B, d.HV, d.V)
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * d.K ** -0.5
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q, k = (t.repeat_interleave(d.HV // d.H, dim=1) for t in (q, k))  # value head h reads q/k head h // (HV/H)
    g = -A_log.exp() * F.softplus(a.float() + dt_bias, threshold=20.0)
    beta = torch.sigmoid(b.float())
    h = state.index_select(0, idx).float() * g.exp()[..., None, None]
    u = (v - torch.einsum("bhvk,bhk->bhv", h, k)) * beta[..., None]
    h = h + u[..., None] * k[:, :, None, :]
    state.index_copy_(0, idx, h.to(state.dtype))
    out.copy_(torch.einsum("bhvk,bhk->bhv", h, q).view_as(out))
    return out


class Engine:
    """B rows on random slots of a pool of `slots` + 1 entries (entry 0 is
    vLLM's null block, which its kernels skip): per layer a conv state and a
    state pool, rings when rssm runs; the static buffers a graph reads."""

    def __init__(self, d: Dims, weights, B, slots, args, dev, seed, rings):
        self.d, self.w, self.B, self.L, self.dev = d, weights, B, args.ring_len, dev
        self.backend = "cpu" if dev == "cpu" else args.backend
        gen = torch.Generator(device="cpu").manual_seed(seed)
        self.idx = (torch.randperm(slots, generator=gen)[:B] + 1).to(torch.int32).to(dev)
        self.idx_long = self.idx.long()
        n, L, sd, rd = slots + 1, self.L, DTYPES[args.state], DTYPES[args.ring_dtype]
        self.conv = [torch.empty((n, d.conv_dim, d.conv - 1), dtype=torch.bfloat16, device=dev) for _ in weights]
        self.state = [torch.empty((n, d.HV, d.V, d.K), dtype=sd, device=dev) for _ in weights]
        self.rings = [(torch.empty((n, d.HV, L, d.V), dtype=rd, device=dev),
                       torch.empty((n, d.H, L, d.K), dtype=rd, device=dev),
                       torch.empty((n, d.HV, L), dtype=torch.float32, device=dev)) for _ in weights] if rings else None
        self.cursor = torch.zeros(n, dtype=torch.int32, device=dev)
        self.write_pos = torch.zeros(B, dtype=torch.int32, device=dev)
        self.x_in = torch.zeros((B, d.hidden), dtype=torch.bfloat16, device=dev)
        self.x_out = torch.zeros_like(self.x_in)
        self.out = torch.zeros((B, 1, d.HV, d.V), dtype=torch.bfloat16, device=dev)  # packed decode's shape
        self.cu = torch.arange(B + 1, dtype=torch.int32, device=dev)

    def reset(self, seed, positions):
        """Conv states, state pools, rings and cursors from `seed`; positions:
        every row at ring entry 0 (uniform) or at a random one in 0..L-2
        (staggered: its slot's ring then holds that many committed entries)."""
        gen = torch.Generator(device=self.dev).manual_seed(seed)
        for c, s in zip(self.conv, self.state):
            c.copy_(uniform(c.shape, -1.0, 1.0, c.dtype, gen, self.dev))
            s.copy_(uniform(s.shape, -0.5, 0.5, s.dtype, gen, self.dev))
        for dr, kr, gr in self.rings or ():  # finite entries, decays <= 0, as a decode writes them
            dr.copy_(uniform(dr.shape, -0.1, 0.1, dr.dtype, gen, self.dev))
            kr.copy_(uniform(kr.shape, -0.3, 0.3, kr.dtype, gen, self.dev))
            gr.copy_(uniform(gr.shape, -0.5, -0.01, gr.dtype, gen, self.dev))
        self.cursor.zero_()
        if positions == "staggered":
            pos = torch.randint(0, self.L - 1, (self.B,), generator=gen, device=self.dev, dtype=torch.int32)
            self.cursor.index_copy_(0, self.idx_long, pos)

    def gdn(self, variant, l, mixed, a, b):
        """One layer's GDN decode step; returns o [B, HV, V]."""
        d, w, B = self.d, self.w[l], self.B
        out = self.out.view(B, d.HV, d.V)
        if variant == "rssm":
            dr, kr, gr = self.rings[l]
            return rssm.fused_recurrent_gated_delta_rule_replayssm(
                mixed, a, b, w.A_log, w.dt_bias, None, self.state[l], dr, kr, gr, out, self.idx, self.write_pos,
                gate_kind="gdn", use_qk_l2norm_in_kernel=True, backend=self.backend, ring_len=self.L, max_rows=B)
        if variant == "reference":
            return reference_decode(d, mixed, a, b, w.A_log, w.dt_bias, self.state[l], self.idx_long, out)
        if variant == "triton-packed":
            vf["packed"](mixed_qkv=mixed, a=a, b=b, A_log=w.A_log, dt_bias=w.dt_bias, scale=d.K ** -0.5,
                         initial_state=self.state[l], out=self.out, ssm_state_indices=self.idx,
                         use_qk_l2norm_in_kernel=True)
            return out
        # triton: varlen decode of B one-token sequences, q/k/v as [1, B, heads, dim]
        # views of mixed_qkv (the wrapper's .contiguous() makes the copies it needs)
        hk = d.H * d.K
        q, k, v = (mixed[:, :hk].view(1, B, d.H, d.K), mixed[:, hk:2 * hk].view(1, B, d.H, d.K),
                   mixed[:, 2 * hk:].view(1, B, d.HV, d.V))
        o, _ = vf["sigmoid"](A_log=w.A_log, a=a, b=b, dt_bias=w.dt_bias, q=q, k=k, v=v,
                             initial_state=self.state[l], inplace_final_state=True, cu_seqlens=self.cu,
                             ssm_state_indices=self.idx, use_qk_l2norm_in_kernel=True)
        return o.view(B, d.HV, d.V)

    def layer(self, gdn, l, h):
        d, w, B = self.d, self.w[l], self.B
        x = rms_norm(h, w.norm)
        qkvz = F.linear(x, w.qkvz)
        ba = F.linear(x, w.ba)
        b, a = ba[:, :d.HV], ba[:, d.HV:]
        mixed = conv_update(self.conv[l], qkvz[:, :d.conv_dim], w.conv, self.idx_long)
        z = qkvz[:, d.conv_dim:].view(B, d.HV, d.V)
        o = self.out.view(B, d.HV, d.V) if gdn is None else gdn(l, mixed, a, b)
        h = h + F.linear(gated_rms_norm(o, z, w.gnorm).view(B, d.HV * d.V), w.out)
        if w.mlp is not None:
            norm, gate_up, down = w.mlp
            g, u = F.linear(rms_norm(h, norm), gate_up).chunk(2, dim=-1)
            h = h + F.linear(F.silu(g) * u, down)
        return h

    def step(self, variant, gdn=None):
        """One decode step of the whole stack from x_in to x_out; variant
        "base" leaves the GDN step out (and rssm's cursor work with it);
        gdn(l, mixed, a, b) replaces the variant's GDN step (the check's)."""
        if gdn is None and variant != "base":
            gdn = lambda l, mixed, a, b: self.gdn(variant, l, mixed, a, b)
        if variant == "rssm":  # the rows' write_pos, read from the per-slot cursor once a step
            torch.index_select(self.cursor, 0, self.idx_long, out=self.write_pos)
        h = self.x_in
        for l in range(len(self.w)):
            h = self.layer(gdn, l, h)
        self.x_out.copy_(h)
        if variant == "rssm":
            rssm.advance(self.cursor, self.idx, self.write_pos, ring_len=self.L, backend=self.backend)

    def true_states(self):
        """Each layer's state pool as a copy, with rssm's committed ring
        entries folded in (rssm.materialise on the copy: the rings and
        cursors stay as they are)."""
        states = [s.clone() for s in self.state]
        if self.rings is not None:
            wp = self.cursor.index_select(0, self.idx_long)
            for s, (dr, kr, gr) in zip(states, self.rings):
                rssm.materialise(s, dr, kr, gr, self.idx, wp, ring_len=self.L, max_rows=self.B,
                                 backend=self.backend)
        return states


def rel_l2(x, ref):
    x, ref = x.double().cpu(), ref.double().cpu()
    return math.inf if not torch.isfinite(x).all() else float((x - ref).norm() / max(float(ref.norm()), 1e-30))


def check(d, weights, args, dev, variants, B=4, slots=6, seed=77):
    """Every variant's GDN step against rssm's, layer by layer on the same
    inputs: one stack runs with rssm (its outputs feed the next layer) and
    each layer's mixed_qkv, a and b also go to the other variants' own state
    pools, which start from rssm's true states. L + 4 steps (every row
    through a flush), staggered positions; on the GPU as one captured graph
    per step, as timed. (Comparing whole stacks instead would measure how 32
    layers amplify bf16 rounding, not the kernels.) Returns {variant: errors}."""
    others = [v for v in variants if v != "rssm"]
    ref = Engine(d, weights, B, slots, args, dev, seed, rings=True)
    engines = {v: Engine(d, weights, B, slots, args, dev, seed, rings=False) for v in others}
    outs = {v: [torch.zeros_like(ref.out) for _ in weights] for v in ["rssm"] + others}

    def gdn(l, mixed, a, b):  # every variant on this layer's inputs; rssm's output goes on
        for v, e in engines.items():
            outs[v][l].copy_(e.gdn(v, l, mixed, a, b).view_as(ref.out))
        o = ref.gdn("rssm", l, mixed, a, b)
        outs["rssm"][l].copy_(o.view_as(ref.out))
        return o

    ref.step("rssm", gdn)  # compiles (Triton) and plans (rssm) outside any capture
    ref.reset(seed, "staggered")
    start = ref.true_states()
    for e in engines.values():
        for s, s0 in zip(e.state, start):
            s.copy_(s0)
    run = lambda: ref.step("rssm", gdn)
    if dev == "cuda":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ref.step("rssm", gdn)
        run = graph.replay
    gen = torch.Generator(device=dev).manual_seed(seed + 1)
    steps = args.ring_len + 4
    res = {v: {"steps": steps, "batch": B, "layers": len(weights), "out_err": 0.0} for v in others}
    for _ in range(steps):
        ref.x_in.copy_(uniform(ref.x_in.shape, -1.0, 1.0, torch.bfloat16, gen, dev))
        run()
        for v in others:  # the worst layer of the worst step
            err = max(rel_l2(o, r) for o, r in zip(outs[v], outs["rssm"]))
            res[v]["out_err"] = max(res[v]["out_err"], err)
    true = ref.true_states()
    for v, e in engines.items():
        res[v]["state_err"] = max(rel_l2(s.index_select(0, ref.idx_long), t.index_select(0, ref.idx_long))
                                  for s, t in zip(e.state, true))
    return res


def dry_timer(body):
    body()
    return float("nan"), float("nan")


def time_batch(d, weights, B, args, dev, timer, variants):
    """Every variant's step at batch B, and the base; us per step."""
    n_l, L, sb = len(weights), args.ring_len, DTYPES[args.state].itemsize
    slots = max(B, math.ceil(args.pool_mib * (1 << 20) / (n_l * d.HV * d.V * d.K * sb)))  # far past the L2
    mib = lambda per_slot: n_l * (slots + 1) * per_slot / (1 << 20)
    facts = {"batch": B, "slots": slots, "state_mib": mib(d.HV * d.V * d.K * sb), "conv_mib": mib(d.conv_dim * 6),
             "rings_mib": mib((d.HV * d.V + d.H * d.K) * L * DTYPES[args.ring_dtype].itemsize + d.HV * L * 4)}
    print(f"B={B}: rows on {B} of {slots} slots (+ null block 0); state {facts['state_mib']:.0f} MiB = {n_l} layers"
          f" x {slots + 1} x {d.HV}x{d.V}x{d.K} x {sb} B; rings {facts['rings_mib']:.0f} MiB; conv "
          f"{facts['conv_mib']:.1f} MiB", flush=True)
    e = Engine(d, weights, B, slots, args, dev, seed=1000 + B, rings="rssm" in variants)
    e.reset(1000 + B, "uniform")
    gen = torch.Generator(device=dev).manual_seed(B)
    e.x_in.copy_(uniform(e.x_in.shape, -1.0, 1.0, torch.bfloat16, gen, dev))
    rows = []
    for variant in ["base"] + variants:
        for positions in (args.positions if variant == "rssm" else ["-"]):
            e.step(variant)  # Triton compiles and rssm plans outside the capture
            e.reset(1000 + B, "uniform" if positions == "-" else positions)  # the Triton kernels have no cursor
            med, fastest = timer(lambda: [e.step(variant) for _ in range(L)])  # a whole ring cycle
            rows.append({**facts, "variant": variant, "positions": positions, "step_us": med / L,
                         "fastest_step_us": fastest / L})
            print(f"  {variant:13} {positions:9} {rows[-1]['step_us']:9.1f} us/step", flush=True)
    base = rows.pop(0)["step_us"]
    for r in rows:
        r["base_us"], r["gdn_us"] = base, r["step_us"] - base
    for r in (r for r in rows if r["variant"] == "rssm"):
        for t in (t for t in rows if t["variant"] != "rssm"):
            r[f"vs_{t['variant']}_step"] = r["step_us"] / t["step_us"]
            r[f"vs_{t['variant']}_gdn"] = r["gdn_us"] / t["gdn_us"] if t["gdn_us"] else None
    return rows


def import_triton():
    """vLLM's kernels from the git-ignored .peers/vllm_fla (tools/peer-sources)."""
    mods = vllm_fla("fused_recurrent", "fused_sigmoid_gating")
    vf.update(sigmoid=mods["fused_sigmoid_gating"].fused_sigmoid_gating_delta_rule_update,
              packed=mods["fused_recurrent"].fused_recurrent_gated_delta_rule_packed_decode)


def print_table(rows, layers, info):
    fmt = lambda v, w, p=1: f"{v:{w}.{p}f}" if isinstance(v, float) and math.isfinite(v) else f"{'-':>{w}}"
    others = [v for v in info["variants"] if v != "rssm"]
    print(f"\nus per decode step of {layers} GDN layers (median of {info['reps']} graph replays of an L = "
          f"{info['ring_len']} cycle / L); GDN = step - base (the stack without the GDN step); {info['device']}")
    print(f"{'B':>4} {'variant':13} {'positions':9} {'step us':>9} {'GDN us':>8} {'GDN %':>6} "
          + "".join(f" {'rssm/' + v + ' step':>{max(len(v) + 10, 12)}} {'GDN':>6}" for v in others))
    for r in rows:
        pct = 100 * r["gdn_us"] / r["step_us"] if r["step_us"] else float("nan")
        ratios = "".join(f" {fmt(r.get(f'vs_{v}_step'), max(len(v) + 10, 12), 3)} {fmt(r.get(f'vs_{v}_gdn'), 6, 3)}"
                         for v in others)
        print(f"{r['batch']:4} {r['variant']:13} {r['positions']:9} {fmt(r['step_us'], 9)} {fmt(r['gdn_us'], 8)} "
              f"{fmt(pct, 6)}{ratios}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    lst = lambda s: [x for x in s.split(",") if x]
    ap.add_argument("--batches", type=lambda s: [int(x) for x in lst(s)], help="default 1,16,64,256 (dry run 1,3)")
    ap.add_argument("--variants", type=lst, help="default triton,triton-packed,rssm (dry run reference,rssm)")
    ap.add_argument("--positions", type=lst, default=["uniform", "staggered"],
                    help="rssm's ring positions: uniform (all rows at 0, flushing together) and/or staggered")
    ap.add_argument("--layers", type=int, help="GDN layers in the stack (default 32; dry run 3)")
    ap.add_argument("--mlp-inter", type=int, default=0, help="dense SwiGLU MLP per layer of this width (512: "
                    "Qwen3-Next's shared expert; default 0: none)")
    ap.add_argument("--state", choices=("fp32", "bf16"), default="fp32", help="state pool dtype (default fp32)")
    ap.add_argument("--ring-dtype", choices=("bf16", "fp16", "fp32"), default="bf16", help="d/k rings (default bf16)")
    ap.add_argument("--ring-len", type=int, help="rssm's ring length L (default 16; dry run 4)")
    ap.add_argument("--pool-mib", type=float, help="state pools of all layers together at least this, MiB "
                    "(default 256, far past the 60 MB L2; dry run 1)")
    ap.add_argument("--backend", default="cuda", help="rssm's backend on the GPU (default cuda)")
    ap.add_argument("--reps", type=int, default=20, help="timed replays per graph (median; default 20)")
    ap.add_argument("--warmup", type=float, default=0.3, help="untimed replays per graph after the first, s")
    ap.add_argument("--tol", type=float, help="largest relative L2 error of the check (default 2e-2; bf16 "
                    "state 5e-2: the Triton kernels round it to bf16 every step, rssm at a flush)")
    ap.add_argument("--out", help="write the rows and the run's facts to this JSON file")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, no Triton, no timing")
    args = ap.parse_args()
    dry = args.dry_run
    dev = "cpu" if dry else "cuda"
    if not dry and not torch.cuda.is_available():
        ap.error("no CUDA device (--dry-run runs on the CPU)")
    d = Dims(**(TINY if dry else FULL))
    layers = args.layers or (3 if dry else 32)
    batches = args.batches or ([1, 3] if dry else [1, 16, 64, 256])
    variants = args.variants or (["reference", "rssm"] if dry else ["triton", "triton-packed", "rssm"])
    if [v for v in variants if v not in TRITON + ("rssm", "reference")] or "rssm" not in variants:
        ap.error(f"--variants {','.join(variants)}: rssm and any of {', '.join(TRITON)}, reference")
    args.ring_len = args.ring_len or (4 if dry else 16)  # dry run: a flush within a few steps
    args.pool_mib = args.pool_mib if args.pool_mib is not None else (1 if dry else 256)
    args.tol = args.tol or (5e-2 if args.state == "bf16" else 2e-2)
    if not dry and any(v in TRITON for v in variants):
        import_triton()

    info = {"device": torch.cuda.get_device_name() if not dry else "cpu (dry run)", "torch": torch.__version__,
            "triton": __import__("triton").__version__ if vf else None, "rssm": rssm.__version__,
            "rssm_library": str(rssm.library_path()), "shape": d._asdict(), "layers": layers,
            "shape_source": "Qwen/Qwen3-Next-80B-A3B-Instruct config.json", "mlp_inter": args.mlp_inter,
            "state": args.state, "ring_dtype": args.ring_dtype, "ring_len": args.ring_len, "reps": args.reps,
            "backend": "cpu" if dry else args.backend, "variants": variants,
            "timing": "one graph = a ring cycle of L steps; step = median replay / L; GDN = step - base"}
    gen = torch.Generator(device=dev).manual_seed(4321)
    weights = [Weights(d, args.mlp_inter, gen, dev) for _ in range(layers)]
    info["weights_mib"] = sum(t.numel() * t.element_size() for w in weights for x in vars(w).values()
                              for t in (x if isinstance(x, tuple) else (x,)) if torch.is_tensor(t)) / (1 << 20)
    print(" ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    rows = []

    def save():  # after the check and every batch, so a run stopped part way keeps what it measured
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"info": info, "rows": rows}, f, indent=1)

    # correctness first: nothing is timed after a mismatch
    info["checks"] = check(d, weights, args, dev, variants)
    for v, c in info["checks"].items():
        c["ok"] = c["out_err"] <= args.tol and c["state_err"] <= args.tol
        print(f"check {v} vs rssm, B={c['batch']}, {c['steps']} steps of {c['layers']} layers on the same inputs: "
              f"GDN outputs rel L2 {c['out_err']:.2e} (worst layer and step), final true states "
              f"{c['state_err']:.2e} (worst layer); tol {args.tol:g}: {'ok' if c['ok'] else 'MISMATCH'}", flush=True)
    save()
    if not all(c["ok"] for c in info["checks"].values()):
        print("mismatch: not timed", file=sys.stderr)
        return 1

    timer = dry_timer if dry else Timer(args.reps, args.warmup)
    info["copy_gbs"] = None if dry else copy_gbs(timer)
    for B in batches:
        rows += time_batch(d, weights, B, args, dev, timer, variants)
        save()
        if not dry:
            torch.cuda.empty_cache()  # the batch's pools are gone: room for the next
    print_table(rows, layers, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
