"""The per-layer entry point with vLLM's argument names: one decode step of
one Gated DeltaNet / KDA layer on the engine's own tensors, with no copies
but the gates' conversion when they come in a dtype the C API does not
take (docs/python.md)."""

from __future__ import annotations

from . import _lib
from ._arrays import ArrayInfo, array_info, contiguous_tail, torch_ops_for
from .layer import LayerDesc, _as, _int32, _outer_stride, _stream, layer_for, prepare_run


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _dims(a: ArrayInfo, ndim, what: str) -> None:
    if len(a.shape) not in ((ndim,) if isinstance(ndim, int) else ndim):
        raise ValueError(f"{a.name} has shape {list(a.shape)}, expected {what}")


def fused_recurrent_gated_delta_rule_replayssm(
        mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache, out,
        ssm_state_indices, write_pos, force_flush=None, gate_kind="gdn", use_qk_l2norm_in_kernel=True,
        backend=None, *, ring_len=None, gate_mode="raw", gate_lower_bound=0.0, max_rows=None, overflow=None,
        stream=None):
    """One decode step of one layer for B rows, in place on the engine's tensors.

    mixed_qkv          [B, 2*H*K + HV*V], io dtype (fp32 or bf16): q at column
                       0, k at H*K, v at 2*H*K of each row (read in place, at
                       the tensor's row stride).
    a, b               the raw gate projections: a [B, HV] (GDN) or [B, HV*K] /
                       [B, HV, K] (KDA), b [B, HV]; g = -exp(A_log) *
                       softplus(a + dt_bias), beta = sigmoid(b) in the kernel
                       (gate_mode "raw"; "raw_safe" with gate_lower_bound,
                       "precomputed" takes a = g and b = beta). Read in place
                       when both are fp32 or both bf16, else both converted
                       to fp32 (the one copy).
    A_log, dt_bias     [HV] and [HV] (GDN) or [HV*K] / [HV, K] (KDA), fp32
                       (converted if not).
    scale              q's scale after the L2 norm; None or 0: 1/sqrt(K).
    initial_state      [slots, HV, V, K], the checkpoints (fp32 or bf16);
                       written only by rows that flush.
    d_cache, k_cache   the rings: [slots, HV, R, V] and [slots, H, R, K] (one
                       dtype: fp32, fp16 or bf16), g_cache [slots, HV, R] (GDN)
                       or [slots, HV, R, K] (KDA), fp32. ring_len L defaults to
                       R, d_cache's entries (an engine allocates L; the ring
                       uses L - 1); R >= L - 1 otherwise.
    out                [B, HV, V] or [B, HV*V], io dtype; padding rows zeroed.
    ssm_state_indices  [B] int32 slot of each row; negative: padding row.
    write_pos          [B] int32 committed ring entries of the row's slot (0..L-1).
    force_flush        [B] int32 or bool (converted), or None: no row forced.
                       A row flushes when write_pos == L - 1 or it is forced;
                       advance the cursors after the step's last layer
                       (rssm.advance).
    backend            "cpu", "cuda", "cuda:bulk", ...: default "cuda" for CUDA
                       tensors, "cpu" for host arrays.
    max_rows           the layer object's row capacity: default the next power
                       of two >= B, so a few objects serve every batch size.
    overflow           optional [B] int32 output, set for a row whose 16-bit
                       ring entry overflowed (re-run it with force set).
    stream             CUDA stream; default torch's current stream for torch
                       tensors, the __cuda_array_interface__ stream otherwise.

    H, K, HV and V come from the shapes of initial_state and k_cache.
    torch tensors go through the custom op rssm::replayssm_decode
    (torch.compile and CUDA graph capture). Returns out."""
    ops = torch_ops_for(mixed_qkv)
    if ops is not None:
        if stream is not None:
            raise ValueError("stream: torch tensors run on torch's current stream (use `with torch.cuda.stream(s):`)")
        ops.decode(mixed_qkv, a, b, A_log, dt_bias, initial_state, d_cache, k_cache, g_cache, out,
                   ssm_state_indices, write_pos, force_flush, overflow, 0.0 if scale is None else float(scale),
                   gate_kind, gate_mode, float(gate_lower_bound), bool(use_qk_l2norm_in_kernel),
                   int(ring_len or 0), int(max_rows or 0), backend or "")
        return out
    decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache, out,
           ssm_state_indices, write_pos, force_flush, gate_kind=gate_kind, gate_mode=gate_mode,
           gate_lower_bound=gate_lower_bound, use_qk_l2norm=use_qk_l2norm_in_kernel, ring_len=ring_len,
           max_rows=max_rows, overflow=overflow, backend=backend, stream=stream)
    return out


def decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache, out,
           ssm_state_indices, write_pos, force_flush=None, *, gate_kind="gdn", gate_mode="raw",
           gate_lower_bound=0.0, use_qk_l2norm=True, ring_len=None, max_rows=None, overflow=None, backend=None,
           stream=None):
    """fused_recurrent_gated_delta_rule_replayssm without the torch custom op:
    reads the shapes, builds the layer description, runs the cached layer."""
    if gate_kind not in _lib.GATE_KINDS:
        raise ValueError(f"gate_kind {gate_kind!r}: expected 'gdn' or 'kda'")
    if gate_mode not in _lib.GATE_MODES:
        raise ValueError(f"gate_mode {gate_mode!r}: expected one of {sorted(_lib.GATE_MODES)}")
    raw = gate_mode != "precomputed"
    qkv = array_info(mixed_qkv, "mixed_qkv")
    state = array_info(initial_state, "initial_state")
    ring_d = array_info(d_cache, "d_cache")
    ring_k = array_info(k_cache, "k_cache")
    ring_g = array_info(g_cache, "g_cache")
    _dims(state, 4, "[slots, HV, V, K]")
    _dims(ring_d, 4, "[slots, HV, R, V]")
    _dims(ring_k, 4, "[slots, H, R, K]")
    _dims(ring_g, 4 if gate_kind == "kda" else 3, "[slots, HV, R, K] (KDA)" if gate_kind == "kda"
          else "[slots, HV, R] (GDN)")
    slots, HV, V, K = state.shape
    H = ring_k.shape[1]
    _dims(qkv, 2, "[B, 2*H*K + HV*V]")
    B, width = qkv.shape
    if width != 2 * H * K + HV * V:
        raise ValueError(f"mixed_qkv has {width} columns, expected 2*H*K + HV*V = {2 * H * K + HV * V} "
                         f"(H={H} from k_cache, HV={HV}, V={V}, K={K} from initial_state)")
    if not contiguous_tail(qkv, 1):
        raise ValueError(f"{qkv.describe()}: each row must be contiguous")
    q, k, v = (qkv.columns("q (mixed_qkv)", 0, H * K), qkv.columns("k (mixed_qkv)", H * K, H * K),
               qkv.columns("v (mixed_qkv)", 2 * H * K, HV * V))
    L = int(ring_len) if ring_len else ring_d.shape[2]

    # The copies, made before the strides are read, since the description
    # holds the strides of what C reads: a and b in place when both are fp32
    # or both bf16 (the C API's gate dtypes), else both converted to fp32;
    # A_log and dt_bias to fp32; the per-row arrays to int32.
    gate, beta = array_info(a, "a"), array_info(b, "b")
    gate_dtype = gate.dtype if gate.dtype == beta.dtype and gate.dtype in ("fp32", "bf16") else "fp32"
    gate = _as(a, gate, gate_dtype, "the C API's gate dtype")
    beta = _as(b, beta, gate_dtype, "the C API's gate dtype")
    A_log_i = dt_bias_i = None
    if raw:
        if A_log is None or dt_bias is None:
            raise ValueError(f"gate_mode {gate_mode!r} needs A_log and dt_bias")
        A_log_i = _as(A_log, array_info(A_log, "A_log"), "fp32", "the C API's gate weight dtype")
        dt_bias_i = _as(dt_bias, array_info(dt_bias, "dt_bias"), "fp32", "the C API's gate weight dtype")
    idx = _int32(ssm_state_indices, array_info(ssm_state_indices, "ssm_state_indices"), "rssm's per-row dtype")
    wpos = _int32(write_pos, array_info(write_pos, "write_pos"), "rssm's per-row dtype")
    force = None if force_flush is None else _int32(force_flush, array_info(force_flush, "force_flush"),
                                                    "rssm's per-row dtype")
    out_i = array_info(out, "out")

    def row_stride(x: ArrayInfo) -> int:
        return _outer_stride(x, 0) if x.shape else 0

    def slot_head(x: ArrayInfo) -> tuple:
        return (_outer_stride(x, 0), _outer_stride(x, 1)) if len(x.shape) >= 2 else (0, 0)

    if state.dtype not in ("fp32", "bf16"):
        raise TypeError(f"initial_state is {state.dtype}, expected fp32 or bf16")
    for x in (ring_d, ring_k):
        if x.dtype not in ("fp32", "fp16", "bf16"):
            raise TypeError(f"{x.name} is {x.dtype}, expected fp32, fp16 or bf16")
    if ring_k.dtype != ring_d.dtype:
        raise TypeError(f"k_cache is {ring_k.dtype} but d_cache is {ring_d.dtype}: the rings share one dtype")
    if qkv.dtype not in ("fp32", "bf16"):
        raise TypeError(f"mixed_qkv is {qkv.dtype}, expected fp32 or bf16")

    backend_name = backend or ("cuda" if qkv.device == "cuda" else "cpu")
    memory = "cuda" if backend_name.startswith("cuda") else "cpu" if backend_name.startswith("cpu") else None
    st = _stream(stream, [qkv, state, out_i], memory)
    s_slot, s_head = slot_head(state)
    d_slot, d_head = slot_head(ring_d)
    k_slot, k_head = slot_head(ring_k)
    g_slot, g_head = slot_head(ring_g)
    desc = LayerDesc(
        num_qk_heads=H, num_v_heads=HV, head_k=K, head_v=V, slots=slots,
        max_rows=int(max_rows) if max_rows else _next_pow2(max(B, 1)),
        ring_len=L, gate_kind=gate_kind, gate_mode=gate_mode, gate_lower_bound=float(gate_lower_bound),
        replay=True, state_dtype=state.dtype, ring_dtype=ring_d.dtype, io_dtype=qkv.dtype,
        qk_l2norm=bool(use_qk_l2norm), q_scale=float(scale or 0.0),
        state_slot_stride=s_slot, state_head_stride=s_head,
        ring_d_slot_stride=d_slot, ring_d_head_stride=d_head,
        ring_k_slot_stride=k_slot, ring_k_head_stride=k_head,
        ring_g_slot_stride=g_slot, ring_g_head_stride=g_head,
        q_row_stride=row_stride(q), k_row_stride=row_stride(k), v_row_stride=row_stride(v),
        out_row_stride=row_stride(out_i), gate_row_stride=row_stride(gate), beta_row_stride=row_stride(beta),
        gate_dtype=gate_dtype)
    # Check every array against the description before a layer object is
    # made for it, so a wrong call leaves nothing behind in the cache.
    run = prepare_run(desc, backend_name, memory, q=q, k=k, v=v, gate=gate, beta=beta, out=out_i, state=state,
                      ring_d=ring_d, ring_k=ring_k, ring_g=ring_g, slot_index=idx, write_pos=wpos, force=force,
                      A_log=A_log_i, dt_bias=dt_bias_i, overflow=overflow)
    layer_for(desc, backend_name).launch(run, st)
    return out
