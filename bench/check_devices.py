#!/usr/bin/env python3
"""The device of every call is the device of its tensors (rssm.h,
rssm_backend_create_on_device; docs/engines.md, docs/python.md), on a GPU
machine, with RSSM_CUDA_DEVICE unset and nothing else set up:

  * the decode entry, rssm.advance and rssm.materialise on torch CUDA
    tensors of each device (the first two) make a backend and a layer on
    that device, match the cpu backend on the same inputs, and leave torch's
    current device as they found it;
  * a CPU tensor (pageable or pinned) given to a cuda layer is refused, by
    the package (ValueError) and, handed to C directly, by librssm
    (rssm.Error naming the tensor and the device), with nothing launched
    and the device still working after;
  * with two GPUs or more, tensors of another device are refused the same
    two ways, and a call with tensors on two devices is refused by name;
  * the whole-step API (rssm_pool_write_state, through ctypes) refuses
    device memory where it takes host memory, and takes host memory;
  * RSSM_CUDA_DEVICE is a default for callers that name no device only:
    set to an ordinal that does not exist, the entry still runs on the
    tensors' device, while rssm.backend("cuda") refuses it;
  * INFO lines: host time of a C call (rssm_layer_run through ctypes) whose
    addresses the layer has met, and of one with a new address each call
    (one cudaPointerGetAttributes more).

From the repository root on the GPU machine, with a CUDA build:

    PYTHONPATH=python RSSM_LIBRARY=$BUILD/librssm.so python3 bench/check_devices.py

One PASS, FAIL or SKIP line per check; exit status 1 if any failed.
(--cpu runs the comparisons cpu against cpu, to check the script itself on
a machine without a GPU; the CUDA checks are then skipped.)
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import statistics
import sys
import time

import numpy as np
import torch

import rssm
from rssm import _lib
from rssm import layer as rssm_layer

H, HV, K, V, SLOTS, L, B = 2, 4, 64, 32, 6, 4, 3
WIDTH = 2 * H * K + HV * V
TOL = 1e-5  # fp32 state, ring and io: max |cuda - cpu| over max(1, max |cpu|)

failures = []


def report(ok: bool, what: str, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        failures.append(what)


def refused(what: str, call, error, pattern: str) -> None:
    """PASS when call() raises `error` with a message matching `pattern`."""
    try:
        call()
    except error as e:
        report(re.search(pattern, str(e)) is not None, what, str(e))
        return
    except Exception as e:  # noqa: BLE001 - the wrong kind of refusal is a failure, shown
        report(False, what, f"{type(e).__name__}: {e}")
        return
    report(False, what, "not refused")


def pool(device, rng):
    """One layer's state pool, rings (L entries per head, fp32) and gate
    weights, as torch tensors on `device`."""
    t = dict(initial_state=rng.uniform(-0.1, 0.1, (SLOTS, HV, V, K)), d_cache=np.zeros((SLOTS, HV, L, V)),
             k_cache=np.zeros((SLOTS, H, L, K)), g_cache=np.zeros((SLOTS, HV, L)),
             A_log=rng.uniform(-1.0, 0.5, HV), dt_bias=rng.uniform(-0.5, 0.5, HV))
    return {n: torch.from_numpy(a.astype(np.float32)).to(device) for n, a in t.items()}


def steps(seed):
    """Inputs of 2L + 1 steps: rows on random slots, some forced to flush."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2 * L + 1):
        out.append(dict(mixed=rng.uniform(-1, 1, (B, WIDTH)).astype(np.float32),
                        a=rng.uniform(-3, 3, (B, HV)).astype(np.float32),
                        b=rng.uniform(-3, 3, (B, HV)).astype(np.float32),
                        idx=rng.choice(SLOTS, B, replace=False).astype(np.int32),
                        force=(rng.random(B) < 0.25).astype(np.int32)))
    return out


def decode_loop(device, seed=7):
    """The decode entry, advance and materialise on `device`, no backend
    named: the outputs of every step, then the pool and cursors."""
    p = pool(device, np.random.default_rng(seed))
    cursor = torch.zeros(SLOTS, dtype=torch.int32, device=device)
    outs = []
    for s in steps(seed + 1):
        idx = torch.from_numpy(s["idx"]).to(device)
        write_pos = cursor[idx.long()]
        force = torch.from_numpy(s["force"]).to(device)
        out = torch.full((B, HV, V), 7.0, device=device)
        rssm.fused_recurrent_gated_delta_rule_replayssm(
            torch.from_numpy(s["mixed"]).to(device), torch.from_numpy(s["a"]).to(device),
            torch.from_numpy(s["b"]).to(device), p["A_log"], p["dt_bias"], None, p["initial_state"], p["d_cache"],
            p["k_cache"], p["g_cache"], out, idx, write_pos, force)
        rssm.advance(cursor, idx, write_pos, force, ring_len=L)
        outs.append(out)
    # fold every slot's ring into its checkpoint
    every = torch.arange(SLOTS, dtype=torch.int32, device=device)
    rssm.materialise(p["initial_state"], p["d_cache"], p["k_cache"], p["g_cache"], every, cursor.clone())
    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)
    got = {f"out[{i}]": o for i, o in enumerate(outs)}
    got.update(state=p["initial_state"], cursor=cursor)
    return {n: x.cpu().double().numpy() for n, x in got.items()}


def compare(what, dut, ref) -> None:
    worst, where = 0.0, ""
    for n in ref:
        err = float(np.max(np.abs(dut[n] - ref[n]))) / max(1.0, float(np.max(np.abs(ref[n]))))
        if err >= worst:
            worst, where = err, n
    report(worst <= TOL, what, f"max |dut - cpu| / max(1, |cpu|) = {worst:.2e} ({where}), tolerance {TOL:.0e}")


def layer_of_last_call():
    layers = rssm_layer.cached_layers()
    return layers[-1] if layers else None


def check_tensors_device(device: int, ref) -> None:
    """The decode entry on tensors of `device`: its backend and layer, its
    results, and torch's current device left alone."""
    rssm.clear_cache()
    before = torch.cuda.current_device()
    got = decode_loop(torch.device("cuda", device))
    after = torch.cuda.current_device()
    report(after == before, f"cuda:{device} current device unchanged by the calls",
           f"torch's current device {before} before, {after} after")
    devices = sorted({(l.backend.name, l.backend.requested_device, l.backend.device_index)
                      for l in rssm_layer.cached_layers()})
    report(devices == [("cuda", device, device)], f"cuda:{device} backend and layers on the tensors' device",
           f"(backend, asked, works on) of every cached layer: {devices}")
    compare(f"cuda:{device} decode, advance and materialise match the cpu backend", got, ref)


def small_layer(device):
    desc = rssm.LayerDesc(num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=SLOTS, max_rows=B,
                          ring_len=L, gate_mode="precomputed", ring_dtype="fp32")
    return rssm.Layer(desc, "cuda", device=device), desc


def layer_tensors(device):
    """A precomputed-gate step's tensors (contiguous, L - 1 ring entries)."""
    g = torch.Generator().manual_seed(3)
    r = lambda *shape: (torch.rand(*shape, generator=g) - 0.5).to(device)  # noqa: E731
    return dict(q=r(B, H, K), k=r(B, H, K), v=r(B, HV, V), gate=-r(B, HV).abs(), beta=r(B, HV).abs(),
                out=torch.zeros(B, HV, V, device=device), state=r(SLOTS, HV, V, K), ring_d=r(SLOTS, HV, L - 1, V),
                ring_k=r(SLOTS, H, L - 1, K), ring_g=-r(SLOTS, HV, L - 1).abs(),
                slot_index=torch.tensor([0, 2, 4], dtype=torch.int32, device=device),
                write_pos=torch.tensor([0, 1, 2], dtype=torch.int32, device=device))


def c_tensors(t) -> _lib.RssmLayerTensors:
    """rssm_layer_tensors of the tensors' addresses, past every check of the package."""
    return _lib.RssmLayerTensors(**{n: x.data_ptr() for n, x in t.items()})


def check_host_memory() -> None:
    layer, _ = small_layer(0)
    t = layer_tensors("cuda:0")
    layer.run(**t)
    torch.cuda.synchronize()
    state0 = t["state"].clone()
    host = t["state"].cpu()
    refused("a CPU tensor given to a cuda layer is refused by the package",
            lambda: layer.run(**{**t, "state": host}), ValueError,
            r"state is in cpu memory, but backend 'cuda' takes cuda arrays")
    for pinned in (False, True):
        kind = "pinned host" if pinned else "host"
        h = torch.zeros(SLOTS, HV, V, K, pin_memory=pinned)
        for name in ("state", "q", "slot_index"):
            tensors = c_tensors({**t, name: h})
            refused(f"a {kind} address as {name} is refused by librssm, nothing launched",
                    lambda: layer.launch_tensors(B, tensors, None), rssm.Error,
                    rf"{name} is {kind} memory, but this layer works on device memory of CUDA device 0")
    cursor = torch.zeros(SLOTS, dtype=torch.int32)
    tensors = (t["slot_index"].data_ptr(), t["write_pos"].data_ptr(), None, cursor.data_ptr())
    err = _lib.RssmError()
    st = layer._c.rssm_layer_advance(layer._h, B, *tensors, None, err)
    refused("a host cursor given to the cuda advance is refused by librssm",
            lambda: _lib.check("rssm_layer_advance", st, err), rssm.Error,
            r"cursor is host memory, but this layer works on device memory of CUDA device 0")
    torch.cuda.synchronize()
    report(torch.equal(t["state"], state0), "the refused calls left the state as it was")
    layer.run(**t)
    torch.cuda.synchronize()
    report(True, "the layer runs again after the refusals (no sticky CUDA error)")


def check_pool_takes_host_memory() -> None:
    """rssm_pool_write_state on a cuda pool: a host state is written, a
    device one refused by name (the pool and batch calls copy host arrays)."""
    c = _lib.lib().handle
    P, E = ctypes.POINTER, _lib.RssmError
    for name, res, args in (("rssm_backend_create_on_device", ctypes.c_int, [ctypes.c_char_p, ctypes.c_int,
                                                                               P(ctypes.c_void_p), P(E)]),
                            ("rssm_pool_create", ctypes.c_int, [ctypes.c_void_p, P(_lib.RssmModel), ctypes.c_uint32,
                                                                ctypes.c_int, P(ctypes.c_void_p), P(E)]),
                            ("rssm_pool_alloc", ctypes.c_int, [ctypes.c_void_p, P(ctypes.c_uint32), P(E)]),
                            ("rssm_pool_write_state", ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p,
                                                                     P(E)]),
                            ("rssm_pool_destroy", None, [P(ctypes.c_void_p)]),
                            ("rssm_backend_destroy", None, [P(ctypes.c_void_p)])):
        getattr(c, name).restype, getattr(c, name).argtypes = res, args
    err, b, pool, slot = E(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint32()
    m = _lib.RssmModel(layers=1, num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, replay=1, ring_len=L,
                       qk_l2norm=1)
    _lib.check("rssm_backend_create_on_device", c.rssm_backend_create_on_device(b"cuda", 0, ctypes.byref(b), err), err)
    try:
        _lib.check("rssm_pool_create", c.rssm_pool_create(b, ctypes.byref(m), 2, 0, ctypes.byref(pool), err), err)
        _lib.check("rssm_pool_alloc", c.rssm_pool_alloc(pool, ctypes.byref(slot), err), err)
        host = torch.full((HV, V, K), 0.01)
        dev = host.to("cuda:0")
        st = c.rssm_pool_write_state(pool, slot, host.data_ptr(), err)
        report(st == 0, "rssm_pool_write_state takes a host state on a cuda pool", err.message.decode())
        st = c.rssm_pool_write_state(pool, slot, dev.data_ptr(), err)
        refused("rssm_pool_write_state refuses a device state on a cuda pool, by name",
                lambda: _lib.check("rssm_pool_write_state", st, err), rssm.Error,
                r"write_state: state is memory of CUDA device 0, but this call takes host memory")
    finally:
        c.rssm_pool_destroy(ctypes.byref(pool))
        c.rssm_backend_destroy(ctypes.byref(b))


def check_other_device(count: int, ref) -> None:
    if count < 2:
        print("SKIP tensors of another device, and of two devices in one call: this machine has one GPU",
              flush=True)
        return
    check_tensors_device(1, ref)
    layer, _ = small_layer(0)
    t0, t1 = layer_tensors("cuda:0"), layer_tensors("cuda:1")
    refused("tensors of cuda:1 given to a layer on device 0 are refused by the package",
            lambda: layer.run(**{**t0, "ring_k": t1["ring_k"]}), ValueError,
            r"ring_k is on CUDA device 1, but backend 'cuda' works on device 0")
    tensors = c_tensors({**t0, "ring_k": t1["ring_k"]})
    refused("an address on cuda:1 given to a layer on device 0 is refused by librssm",
            lambda: layer.launch_tensors(B, tensors, None), rssm.Error,
            r"ring_k is memory of CUDA device 1, but this layer works on device 0")
    p0, p1 = pool("cuda:0", np.random.default_rng(1)), pool("cuda:1", np.random.default_rng(1))
    idx = torch.tensor([0, 1, 2], dtype=torch.int32, device="cuda:0")
    refused("a decode call with tensors on two devices is refused, naming them",
            lambda: rssm.fused_recurrent_gated_delta_rule_replayssm(
                torch.zeros(B, WIDTH, device="cuda:0"), torch.zeros(B, HV, device="cuda:0"),
                torch.zeros(B, HV, device="cuda:0"), p0["A_log"], p0["dt_bias"], None, p0["initial_state"],
                p1["d_cache"], p0["k_cache"], p0["g_cache"], torch.zeros(B, HV, V, device="cuda:0"), idx,
                torch.zeros(B, dtype=torch.int32, device="cuda:0")), ValueError,
            r"mixed_qkv is on CUDA device 0 but d_cache on device 1")


def check_env_is_a_default(count: int, ref) -> None:
    os.environ["RSSM_CUDA_DEVICE"] = str(count)  # no such device
    try:
        rssm.clear_cache()
        compare(f"RSSM_CUDA_DEVICE={count} (no such device): the entry runs on the tensors' device all the same",
                decode_loop(torch.device("cuda", 0)), ref)
        refused(f"RSSM_CUDA_DEVICE={count}: rssm.backend('cuda'), which names no device, refuses it",
                lambda: rssm.backend("cuda"), rssm.Error, rf"RSSM_CUDA_DEVICE={count}: must be a device ordinal")
        os.environ["RSSM_CUDA_DEVICE"] = str(count - 1)
        b = rssm.backend("cuda")
        report(b.device_index == count - 1, f"RSSM_CUDA_DEVICE={count - 1}: rssm.backend('cuda') on device "
                                            f"{b.device_index}")
    finally:
        del os.environ["RSSM_CUDA_DEVICE"]
        rssm.clear_cache()


def host_times() -> None:
    """µs per rssm_layer_run through ctypes on a filled struct: addresses the
    layer has met, then a new state address each call (inside one pool, so
    the launches stay in bounds)."""
    layer, _ = small_layer(0)
    t = layer_tensors("cuda:0")
    spare = 4096
    big = torch.zeros(SLOTS * HV * V * K + spare, device="cuda:0")
    t["state"] = big[:SLOTS * HV * V * K].view(SLOTS, HV, V, K)
    tensors = c_tensors(t)
    run, h, ref, err = layer._c.rssm_layer_run, layer._h, ctypes.byref(tensors), _lib.RssmError()

    def per_call(new_address: bool) -> float:
        times = []
        base = tensors.state
        for batch in range(10):
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for i in range(200):
                if new_address:
                    tensors.state = base + 16 * ((batch * 200 + i) % (spare // 4))
                if run(h, B, ref, None, err):
                    _lib.check("rssm_layer_run", 1, err)
            times.append((time.perf_counter_ns() - t0) / 200 / 1000)
        tensors.state = base
        return statistics.median(times)

    per_call(False)  # warm
    seen = per_call(False)
    new = per_call(True)
    torch.cuda.synchronize()
    print(f"INFO host time per rssm_layer_run (ctypes, B = {B}): {seen:.2f} us with addresses the layer has met, "
          f"{new:.2f} us with a new state address each call", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="check the script itself: cpu against cpu, no CUDA checks")
    a = ap.parse_args()
    if os.environ.pop("RSSM_CUDA_DEVICE", None) is not None:
        print("INFO RSSM_CUDA_DEVICE was set; unset for these checks", flush=True)
    print(f"INFO rssm {rssm.__version__} from {rssm.library_path()}, torch {torch.__version__}", flush=True)
    ref = decode_loop(torch.device("cpu"))
    if a.cpu:
        compare("cpu decode, advance and materialise match themselves", decode_loop(torch.device("cpu")), ref)
        print("SKIP the CUDA checks (--cpu)", flush=True)
    elif not torch.cuda.is_available() or "cuda" not in rssm.backend_names():
        report(False, "a GPU and a librssm.so built with CUDA", f"torch sees a GPU: {torch.cuda.is_available()}, "
                                                                 f"backends: {rssm.backend_names()}")
    else:
        count = torch.cuda.device_count()
        print(f"INFO {count} GPU(s), {torch.cuda.get_device_name(0)}", flush=True)
        checks = (("tensors of cuda:0", lambda: check_tensors_device(0, ref)), ("host memory", check_host_memory),
                  ("the pool's host memory", check_pool_takes_host_memory),
                  ("another device", lambda: check_other_device(count, ref)),
                  ("RSSM_CUDA_DEVICE", lambda: check_env_is_a_default(count, ref)), ("host time", host_times))
        for name, check in checks:
            try:
                check()
            except Exception as e:  # noqa: BLE001 - one check's crash is its failure; the others still run
                report(False, f"{name}: the check ran to its end", f"{type(e).__name__}: {e}")
    print("device_check:", "ok" if not failures else f"FAILED ({len(failures)})", flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
