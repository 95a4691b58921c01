#!/usr/bin/env python3
"""A published speculative-decode verify for Gated DeltaNet, vLLM's Triton
spec decode, timed the way the engine calls it, to set beside rssm's own
window (bench/verify_graph.py, whose conventions this follows: captured
CUDA graphs replayed back to back, median of --reps, bf16 activations and raw
gates, random inputs never near zero, rows on a random permutation of the
slots, enough layers that one pass touches >= --state-mib of state, us per
layer, the copy bandwidth of the same run).

The kernels come from vLLM's sources that tools/peer-sources copies into the
git-ignored .peers/vllm_fla (vLLM 0.34.0: .peers/SOURCE.txt). Each is called
as vLLM's GDN layers call it for a batch of spec decodes only: the window is
B requests of T tokens (the last accepted token and T - 1 drafts), packed
varlen, request-major (token t of row r at row r * T + t, cu_seqlens =
0, T, 2T, ...), ssm_state_indices [B, T] int32 (token t's state goes to its
own slot: T state writes per row), num_accepted_tokens [B] int32 (the window
starts from the state in slot [r, num_accepted - 1]), a pool of B * T + 1
state slots [slots, HV, V, K] per layer with slot 0 vLLM's null block,
inplace_final_state=True, the q/k L2 norm in the kernel:

  recurrent  rearrange_mixed_qkv + fused_olmo_hybrid_gdn_gating (g, beta from
             the raw a, b) + fused_recurrent_gated_delta_rule, as
             OlmoHybridGatedDeltaNetAttention's spec path
             (vllm/model_executor/layers/mamba/gdn/olmo_gdn_linear_attn.py)
  sigmoid    rearrange_mixed_qkv + fused_sigmoid_gating_delta_rule_update (the
             gating inside the recurrent kernel), as the Qwen3-Next / Qwen3.5
             layer's Triton spec path (QwenGatedDeltaNetAttention._forward_core
             in qwen_gdn_linear_attn.py)
  mtp        fused_gdn_decode_post_conv_mtp_triton, the Triton port of the CUDA
             MTP decode that vLLM 0.34 runs by default on NVIDIA (its CUDA op is
             in vLLM's binary and not timed here); it reads mixed_qkv in place
             and ends with the layer's gated RMSNorm (silu gate), which the
             other two leave to a later kernel

rearrange_mixed_qkv is Qwen's (split, reshape, one torch.cat into contiguous
[1, B*T, heads, dim] q, k, v), eager as in vLLM's custom op. Per (kernel,
state dtype, B, T), in us per layer:

  window  all of the above for one window, from mixed_qkv, a and b onward
  kernel  the recurrent kernel alone on inputs made beforehand (recurrent:
          q, k, v, g, beta; sigmoid: q, k, v); none for mtp
  token   window / T: per accepted token at 100% acceptance (num_accepted = T)
  GB/s    state bytes of a window (B reads, B * T writes) / window

Before timing, each kernel and state dtype is checked once against a float64
torch reference of the gated delta rule on 4 rows (num_accepted T, T - 1,
...: every token's output and written state, slot 0 untouched); a kernel that
fails is not timed and the exit status is 1. From the repository root on the
GPU machine, with .peers carried:

    python3 bench/verify_peers.py --json OUT/verify_peers.json

--dry-run runs the same code on the CPU under triton's interpreter
(TRITON_INTERPRET=1) without graphs or timing, for small --batches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

import benchlib
from benchlib import Timer, copy_gbs, vllm_fla

H, HV, K, V = 16, 32, 128, 128  # the peers' GDN shape (shared/peers-h200.json)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
KERNELS = ("recurrent", "sigmoid", "mtp")
WINDOWS = 4  # fresh input sets, one window each, per captured graph
NORM_EPS = 1e-6
TOL = 2e-2  # max |err| / max |ref|; a wrong layout is off by O(1)
DEVICE = "cuda"
vf = {}  # vLLM's modules, imported in main (after TRITON_INTERPRET is set for --dry-run)


def uniform(shape, lo, hi, dtype, gen):
    """benchlib's, on DEVICE (the CPU in a --dry-run)."""
    return benchlib.uniform(shape, lo, hi, dtype, gen, DEVICE)


def dry_timer(body):
    """--dry-run: the body once, eagerly, no time (Timer's median and fastest)."""
    body()
    return float("nan"), float("nan")


def state_bytes(state_dtype):
    return HV * V * K * DTYPES[state_dtype].itemsize


def layers_for(state_dtype, B, state_mib):
    """Layers per pass so that one window of each reads >= state_mib MiB of
    state (decode_graph.py's count for B slots)."""
    return max(1, math.ceil(state_mib * (1 << 20) / (B * state_bytes(state_dtype))))


def rearrange_mixed_qkv(x):
    """vLLM's QwenGatedDeltaNetAttention.rearrange_mixed_qkv (tp 1): packed
    [n, q|k|v] to contiguous [1, n, heads, dim] q, k, v."""
    n = x.shape[0]
    q, k, v = torch.split(x, [H * K, H * K, HV * V], dim=-1)
    fused = torch.cat([q.reshape(-1), k.reshape(-1), v.reshape(-1)], dim=0)
    return (fused[:n * H * K].view(1, n, H, K), fused[n * H * K:2 * n * H * K].view(1, n, H, K),
            fused[2 * n * H * K:].view(1, n, HV, V))


class Window:
    """One layer's engine tensors for windows of T tokens of B rows: a state
    pool of B * T + 1 slots (slot 0 vLLM's null block) and the index tensors
    the metadata builder hands the layer."""

    def __init__(self, state_dtype, B, T, idx, gen, state_range=0.05):
        self.pool = uniform((B * T + 1, HV, V, K), -state_range, state_range, DTYPES[state_dtype], gen)
        self.idx = idx  # [B, T] int32, shared by the layers (vLLM's block table)


class Inputs:
    """One fresh input set of a window: mixed_qkv, raw a and b, the output
    gate z and the outputs, and what the kernel-only bodies start from."""

    def __init__(self, B, T, gen):
        n = B * T
        self.qkv = uniform((n, 2 * H * K + HV * V), -1.0, 1.0, torch.bfloat16, gen)
        self.a = uniform((n, HV), -3.0, 3.0, torch.bfloat16, gen)
        self.b = uniform((n, HV), -3.0, 3.0, torch.bfloat16, gen)
        self.z = uniform((n, HV, V), -3.0, 3.0, torch.bfloat16, gen)
        self.out = torch.empty((n, HV, V), dtype=torch.bfloat16, device=DEVICE)
        self.prepared = None

    def prepare(self, params):
        self.prepared = rearrange_mixed_qkv(self.qkv)
        self.g, self.beta = vf["gating"].fused_olmo_hybrid_gdn_gating(params.A_log, self.a, self.b, params.dt_bias)


class Params:
    """The layer's weights the kernels read, and the per-batch metadata."""

    def __init__(self, B, T, gen, acc=None):
        self.A_log = uniform((HV,), -1.0, 0.5, torch.float32, gen)
        self.dt_bias = uniform((HV,), -1.0, 1.0, torch.float32, gen)
        self.norm_weight = uniform((V,), 0.5, 1.5, torch.bfloat16, gen)
        self.cu = torch.arange(0, B * T + 1, T, dtype=torch.int32, device=DEVICE)
        self.acc = acc if acc is not None else torch.full((B,), T, dtype=torch.int32, device=DEVICE)


def run(kernel, w, x, p, prepared):
    """One window of one layer, as vLLM calls it; prepared: the kernel alone
    on x's prepared q, k, v (and g, beta)."""
    if kernel == "mtp":
        vf["mtp"].fused_gdn_decode_post_conv_mtp_triton(
            mixed_qkv=x.qkv, a=x.a, b=x.b, A_log=p.A_log, dt_bias=p.dt_bias, state_indices=w.idx, cu_seqlens=p.cu,
            num_accepted_tokens=p.acc, state=w.pool, output_gate=x.z, norm_weight=p.norm_weight, out=x.out,
            scale=K ** -0.5, norm_eps=NORM_EPS, output_gate_activation="silu")
        return x.out
    q, k, v = x.prepared if prepared else rearrange_mixed_qkv(x.qkv)
    if kernel == "recurrent":
        if prepared:
            g, beta = x.g, x.beta
        else:
            g, beta = vf["gating"].fused_olmo_hybrid_gdn_gating(p.A_log, x.a, x.b, p.dt_bias)
        o, _ = vf["recurrent"].fused_recurrent_gated_delta_rule(
            q=q, k=k, v=v, g=g, beta=beta, initial_state=w.pool, inplace_final_state=True, cu_seqlens=p.cu,
            ssm_state_indices=w.idx, num_accepted_tokens=p.acc, use_qk_l2norm_in_kernel=True)
    else:
        o, _ = vf["sigmoid"].fused_sigmoid_gating_delta_rule_update(
            A_log=p.A_log, a=x.a, b=x.b, dt_bias=p.dt_bias, q=q, k=k, v=v, initial_state=w.pool,
            inplace_final_state=True, cu_seqlens=p.cu, ssm_state_indices=w.idx, num_accepted_tokens=p.acc,
            use_qk_l2norm_in_kernel=True)
    return o


def reference(kernel, w0, x, p, B, T):
    """Float64 gated delta rule from the raw inputs: every token's output
    (mtp: after the gated RMSNorm) and the state after it, from the state in
    slot idx[r, num_accepted - 1] of the pool before the window (w0)."""
    d = torch.float64
    qkv = x.qkv.to(d)
    q = qkv[:, :H * K].view(-1, H, K)
    k = qkv[:, H * K:2 * H * K].view(-1, H, K)
    v = qkv[:, 2 * H * K:].view(-1, HV, V)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * K ** -0.5
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q.repeat_interleave(HV // H, dim=1)  # value head h reads q/k head h // (HV / H)
    k = k.repeat_interleave(HV // H, dim=1)
    g = -p.A_log.to(d).exp() * F.softplus(x.a.to(d) + p.dt_bias.to(d), threshold=20.0)
    beta = torch.sigmoid(x.b.to(d))
    o = torch.empty((B * T, HV, V), dtype=d, device=x.qkv.device)
    states = {}
    idx, acc = w0["idx"].tolist(), p.acc.tolist()
    for r in range(B):
        h = w0["pool"][idx[r][acc[r] - 1]].to(d)  # [HV, V, K]
        for t in range(T):
            i = r * T + t
            h = h * g[i].exp()[:, None, None]
            u = (v[i] - torch.einsum("hvk,hk->hv", h, k[i])) * beta[i][:, None]
            h = h + u[:, :, None] * k[i][:, None, :]
            o[i] = torch.einsum("hvk,hk->hv", h, q[i])
            states[idx[r][t]] = h
    if kernel == "mtp":
        ob = o.to(torch.bfloat16).to(d)  # the kernel rounds the output before its norm, as the unfused path
        z = x.z.to(d)
        rstd = torch.rsqrt((ob * ob).mean(-1, keepdim=True) + NORM_EPS)
        o = ob * rstd * p.norm_weight.to(d) * z * torch.sigmoid(z)
    return o, states


def check(kernel, state_dtype, T, gen):
    """The kernel's window against the float64 reference on a few rows at the
    real head shape: (output error, state error, slot 0 untouched), errors as
    max |err| / max |ref|."""
    B = 4
    acc = torch.tensor([T - r % T for r in range(B)], dtype=torch.int32, device=DEVICE)  # T, T - 1, ...
    p = Params(B, T, gen, acc)
    idx = (torch.randperm(B * T, device=DEVICE, generator=gen) + 1).to(torch.int32).view(B, T)
    w = Window(state_dtype, B, T, idx, gen, state_range=1.0)  # states that dominate the output
    x = Inputs(B, T, gen)
    w0 = {"pool": w.pool.clone(), "idx": idx.clone()}
    o = run(kernel, w, x, p, False).reshape(B * T, HV, V)
    ref, states = reference(kernel, w0, x, p, B, T)
    rel = lambda a, b: ((a.double() - b).abs().max() / b.abs().max()).item()
    out_err = rel(o, ref)
    slots = sorted(states)
    state_err = rel(w.pool[slots], torch.stack([states[s] for s in slots]))
    return out_err, state_err, bool(torch.equal(w.pool[0], w0["pool"][0]))


def time_shape(kernel, state_dtype, B, T, args, timer, gen):
    layers = layers_for(state_dtype, B, args.state_mib)
    idx = (torch.randperm(B * T, device=DEVICE, generator=gen) + 1).to(torch.int32).view(B, T)
    ws = [Window(state_dtype, B, T, idx, gen) for _ in range(layers)]
    p = Params(B, T, gen)
    xs = [Inputs(B, T, gen) for _ in range(WINDOWS)]
    for x in xs:
        x.prepare(p)
    res = {"layers": layers, "pool_slots": B * T + 1,
           "pool_gib": layers * (B * T + 1) * state_bytes(state_dtype) / (1 << 30)}
    for prepared in ([False, True] if kernel != "mtp" else [False]):
        body = lambda: [run(kernel, w, x, p, prepared) for x in xs for w in ws]
        body()  # triton compiles outside the capture
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        res["kernel_us" if prepared else "window_us"] = timer(body)[0] / (WINDOWS * layers)
    res.setdefault("kernel_us", None)
    res["token_us"] = res["window_us"] / T
    res["state_gbs"] = B * (1 + T) * state_bytes(state_dtype) / (res["window_us"] * 1e-6) / 1e9
    del ws, xs
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return res


def peer_source():
    """The commit line of .peers/SOURCE.txt beside the copies."""
    path = os.path.join(os.path.dirname(os.path.dirname(vf["recurrent"].__file__)), "SOURCE.txt")
    try:
        with open(path) as f:
            lines = [" ".join(l.split()) for l in f if l.startswith(("commit:", "source:"))]
        return "; ".join(lines)
    except OSError:
        return "unknown (no .peers/SOURCE.txt)"


def main() -> int:
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    lst = lambda s: [x for x in s.split(",") if x]
    ap.add_argument("--kernels", type=lst, default=list(KERNELS), help=f"default {','.join(KERNELS)}")
    ap.add_argument("--states", type=lst, default=["fp32", "bf16"], help="state pool dtypes (default fp32,bf16)")
    ap.add_argument("--batches", type=lambda s: [int(x) for x in lst(s)], default=[1, 16, 64, 256],
                    help="requests B (default 1,16,64,256)")
    ap.add_argument("--drafts", type=lambda s: [int(x) for x in lst(s)], default=[2, 4, 8],
                    help="window lengths T, tokens per request (default 2,4,8)")
    ap.add_argument("--state-mib", type=int, default=256, help="state read per pass, MiB (default 256)")
    ap.add_argument("--reps", type=int, default=10, help="timed replays per graph (median; default 10)")
    ap.add_argument("--warmup", type=float, default=0.3,
                    help="untimed replays of each graph after the first, seconds (default 0.3)")
    ap.add_argument("--json", help="write the rows and the run's facts here")
    ap.add_argument("--dry-run", action="store_true",
                    help="on the CPU under triton's interpreter: the check and one eager pass of each body, no timing")
    args = ap.parse_args()
    for k in args.kernels:
        if k not in KERNELS:
            ap.error(f"--kernels: unknown kernel {k!r}")
    for s in args.states:
        if s not in DTYPES:
            ap.error(f"--states: unknown dtype {s!r}")
    for T in args.drafts:
        if not 1 <= T <= 64:
            ap.error(f"--drafts: {T} is not in 1..64")
    if args.dry_run:
        DEVICE = "cpu"
        os.environ.setdefault("TRITON_INTERPRET", "1")
    elif not torch.cuda.is_available():
        ap.error("no CUDA device (--dry-run runs on the CPU)")

    mods = vllm_fla("fused_gdn_decode_post_conv_mtp", "fused_recurrent", "fused_sigmoid_gating", "gating",
                    interpret=args.dry_run)
    vf.update(recurrent=mods["fused_recurrent"], sigmoid=mods["fused_sigmoid_gating"],
              mtp=mods["fused_gdn_decode_post_conv_mtp"], gating=mods["gating"])

    info = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (dry run, triton interpreter)",
            "torch": torch.__version__, "triton": __import__("triton").__version__, "vllm": peer_source(),
            "shape": {"H": H, "HV": HV, "K": K, "V": V}, "state_mib": args.state_mib, "reps": args.reps,
            "windows_per_graph": WINDOWS, "state_dtypes_note": "vLLM's Triton kernels load the state as fp32 and "
            "store it in the pool's dtype, so fp32 and bf16 (and fp16) pools all run; vLLM's "
            "mamba_ssm_cache_dtype is auto (the model's), float32, float16 or bfloat16, and its fused CUDA MTP "
            "decode takes float32 and bfloat16 (FUSED_GDN_STATE_DTYPES)"}
    print(" ".join(f"{k}={v}" for k, v in info.items() if k != "state_dtypes_note"), flush=True)
    print(f"state dtypes: {info['state_dtypes_note']}", flush=True)
    timer = dry_timer if args.dry_run else Timer(args.reps, args.warmup)
    gen = torch.Generator(device=DEVICE).manual_seed(8765)
    info["copy_gbs"] = None if args.dry_run else copy_gbs(timer)

    rc = 0
    info["checks"] = []
    good = set()
    for kernel in args.kernels:
        for state_dtype in args.states:
            T = max(args.drafts)
            out_err, state_err, slot0 = check(kernel, state_dtype, T, gen)
            ok = out_err <= TOL and state_err <= TOL and slot0
            info["checks"].append({"kernel": kernel, "state": state_dtype, "batch": 4, "T": T, "out_err": out_err,
                                   "state_err": state_err, "null_slot_untouched": slot0, "ok": ok})
            print(f"check {kernel} {state_dtype} B=4 T={T} (num_accepted T, T-1, ...) against float64: output err "
                  f"{out_err:.2e}, state err {state_err:.2e} (max |err| / max |ref|), null slot "
                  f"{'untouched' if slot0 else 'WRITTEN'}: {'ok' if ok else 'FAIL, not timed'}", flush=True)
            if ok:
                good.add((kernel, state_dtype))
            else:
                rc = 1

    rows = []

    def save():  # after every shape, so a run stopped part way keeps what it measured
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"info": info, "rows": rows}, f, indent=1)

    for kernel in args.kernels:
        for state_dtype in args.states:
            if (kernel, state_dtype) not in good:
                continue
            for B in args.batches:
                for T in args.drafts:
                    t0 = time.perf_counter()
                    m = time_shape(kernel, state_dtype, B, T, args, timer, gen)
                    rows.append({"harness": "torch-graph", "peer": f"vllm-{kernel}", "gate": "gdn", "kernel": kernel,
                                 "state": state_dtype, "batch": B, "T": T, **m})
                    fmt = lambda v: f"{v:.2f}" if v is not None else "-"
                    print(f"{kernel} {state_dtype} B={B} T={T}: {m['layers']} layers x {m['pool_slots']} slots "
                          f"({m['pool_gib']:.2f} GiB), window {fmt(m['window_us'])} kernel {fmt(m['kernel_us'])} "
                          f"({time.perf_counter() - t0:.1f} s)", flush=True)
                    save()
    save()

    copy = info["copy_gbs"]
    print(f"\nvLLM spec-decode verify, us per layer per window (torch graph, copy "
          f"{f'{copy:.0f} GB/s' if copy else '-'}); token = window / T at 100% acceptance; GB/s = state "
          f"bytes (B reads + B*T writes) / window")
    print(f"{'gate':4} {'kernel':9} {'state':5} {'B':>4} {'T':>2} {'window':>9} {'kernel':>9} {'token':>8} "
          f"{'GB/s':>7} {'%copy':>6}")
    fmt = lambda v, w: f"{v:{w}.2f}" if v is not None and not math.isnan(v) else f"{'-':>{w}}"
    for r in rows:
        pct = 100 * r["state_gbs"] / copy if copy and not math.isnan(r["state_gbs"]) else None
        print(f"{r['gate']:4} {r['kernel']:9} {r['state']:5} {r['batch']:4} {r['T']:2} {fmt(r['window_us'], 9)} "
              f"{fmt(r['kernel_us'], 9)} {fmt(r['token_us'], 8)} {fmt(r['state_gbs'], 7)} {fmt(pct, 6)}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
