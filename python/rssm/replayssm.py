"""The per-layer entry points with vLLM's argument names: one decode step of
one Gated DeltaNet / KDA layer on the engine's own tensors, with no copies
but the gates' conversion when they come in a dtype the C API does not
take, and the fold of a slot's ring into its checkpoint (docs/python.md).

A call is checked in full once per description; after that it goes
through rssm._prepared, which says what a repeated call still checks."""

from __future__ import annotations

from . import _arrays, _lib, _prepared
from ._arrays import ArrayInfo, array_info, contiguous_tail, torch_ops_for
from .layer import (LayerDesc, _as, _int32, _keep_converted, _outer_stride, _stream, c_number, device_for, layer_for,
                    pool_layer, prepare_run)

# The arrays of a decode call, in the order the prepared calls key them.
_NAMES = ("mixed_qkv", "a", "b", "A_log", "dt_bias", "initial_state", "d_cache", "k_cache", "g_cache", "out",
          "ssm_state_indices", "write_pos", "force_flush", "overflow")
# rssm_layer_tensors' fields, in its order, and the argument (index into
# _NAMES) each is read from: q, k and v are windows of mixed_qkv.
_FIELDS = (("state", 5), ("ring_d", 6), ("ring_k", 7), ("ring_g", 8), ("q", 0), ("k", 0), ("v", 0), ("gate", 1),
           ("beta", 2), ("A_log", 3), ("dt_bias", 4), ("out", 9), ("slot_index", 10), ("write_pos", 11),
           ("force", 12), ("overflow", 13))


# The types of scalar arguments whose value is all there is to them: a call
# with another (a 0-d tensor as scale, which may change in place) is neither
# planned nor kept, one with a stream object not kept.
_VALUES = (int, float, bool, str)


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _op_scalars(scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len, max_rows, backend,
                padding) -> tuple:
    """The scalar arguments of rssm::replayssm_decode (after the arrays), as
    its schema takes them: those left out as 0.0, 0 or "", the numbers
    checked against the C fields they become (a ValueError or TypeError
    naming the argument, where torch would wrap or refuse them unnamed)."""
    return (_scale(scale), gate_kind, gate_mode, c_number("gate_lower_bound", gate_lower_bound, "gate_lower_bound"),
            bool(use_qk_l2norm), _count("ring_len", ring_len), _count("max_rows", max_rows), backend or "", padding)


def _scale(scale) -> float:
    return 0.0 if scale is None else c_number("scale", scale, "q_scale")


def _count(name: str, value) -> int:
    """ring_len or max_rows as given (0: the default, for None or 0)."""
    return c_number(name, value, name) if value else 0


def _check_padding(padding) -> None:
    if padding not in _lib.PADDINGS:
        raise ValueError(f"padding {padding!r}: expected one of {sorted(_lib.PADDINGS)} (the engine's convention for "
                         "a row without a sequence: an index out of range, or also 0 and below)")


def _dims(a: ArrayInfo, ndim, what: str) -> None:
    if len(a.shape) not in ((ndim,) if isinstance(ndim, int) else ndim):
        raise ValueError(f"{a.name} has shape {list(a.shape)}, expected {what}")


def _key(arrays, scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len, max_rows, backend, padding,
         stream):
    """A call's key in rssm._prepared: its arrays' ids and its scalar
    arguments, those left out as the torch op passes them (0.0, 0, ""), so
    that the entry and the op's implementation find one another's calls.
    Equal keys mean equal arguments: equal numbers convert equally."""
    return (*map(id, arrays), scale or 0.0, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len or 0,
            max_rows or 0, backend or "", padding, stream)


def _prepared_call(key):
    try:
        return _prepared.calls.get(key), key
    except TypeError:  # an argument that cannot be hashed: nothing is kept for such calls
        return None, None


def fused_recurrent_gated_delta_rule_replayssm(
        mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache, out,
        ssm_state_indices, write_pos, force_flush=None, gate_kind="gdn", use_qk_l2norm_in_kernel=True,
        backend=None, *, ring_len=None, gate_mode="raw", gate_lower_bound=0.0, max_rows=None, overflow=None,
        stream=None, padding="out_of_range"):
    """One decode step of one layer for B rows, in place on the engine's tensors.

    mixed_qkv          [B, 2*H*K + HV*V], io dtype (fp32, fp16 or bf16): q at
                       column 0, k at H*K, v at 2*H*K of each row (read in
                       place, at the tensor's row stride).
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
    ssm_state_indices  [B] int32 slot of each row; negative (or >= slots): a
                       padding row, whose output is zeroed and whose slot is
                       untouched; with padding="nonpositive" (vLLM's
                       convention, slot 0 reserved) every index <= 0 is one.
    write_pos          [B] int32 committed ring entries of the row's slot (0..L-1).
    force_flush        [B] int32 or bool (converted), or None: no row forced.
                       A row flushes when write_pos == L - 1 or it is forced;
                       advance the cursors after the step's last layer
                       (rssm.advance).
    backend            "cpu", "cuda", "cuda:bulk", ...: default "cuda" for CUDA
                       tensors, "cpu" for host arrays. A cuda backend runs on
                       the tensors' device (tensor.device.index), which
                       must be one for all of them.
    max_rows           the layer object's row capacity: default the next power
                       of two >= B, so a few objects serve every batch size.
    overflow           optional [B] int32 output, set for a row whose 16-bit
                       ring entry overflowed (re-run it with force set).
    stream             CUDA stream; default torch's current stream for torch
                       tensors, the __cuda_array_interface__ stream otherwise.

    H, K, HV and V come from the shapes of initial_state and k_cache.
    torch tensors go through the custom op rssm::replayssm_decode whenever
    torch would see the call (torch.compile, fake tensors and other modes,
    the profiler, tensor subclasses); otherwise an eager call goes to C
    directly, on torch's current stream (a CUDA graph capture's too).
    Returns out."""
    ops = torch_ops_for(mixed_qkv)
    if ops is not None and ops.compiled:  # the extension's kernel does the rest (rssm.torch_ext)
        if stream is not None:
            raise ValueError("stream: torch tensors run on torch's current stream (use `with torch.cuda.stream(s):`)")
        ops.decode(mixed_qkv, a, b, A_log, dt_bias, initial_state, d_cache, k_cache, g_cache, out,
                   ssm_state_indices, write_pos, force_flush, overflow,
                   *_op_scalars(scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm_in_kernel, ring_len,
                                max_rows, backend, padding))
        return out
    arrays = (mixed_qkv, a, b, A_log, dt_bias, initial_state, d_cache, k_cache, g_cache, out, ssm_state_indices,
              write_pos, force_flush, overflow)
    watching = _arrays.torch_watching()
    if not watching:
        # _key(...) written out: on a repeated call's path its function call would cost a twentieth
        key = (*map(id, arrays), scale or 0.0, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm_in_kernel,
               ring_len or 0, max_rows or 0, backend or "", padding, stream)
        try:
            call = _prepared.calls.get(key)
        except TypeError:  # an argument that cannot be hashed: nothing is kept for such calls
            call = key = None
        if call is not None and call(arrays):
            return out
    if ops is not None:
        if stream is not None:
            raise ValueError("stream: torch tensors run on torch's current stream (use `with torch.cuda.stream(s):`)")
        if watching or not ops.plain_tensors(arrays):
            ops.decode(mixed_qkv, a, b, A_log, dt_bias, initial_state, d_cache, k_cache, g_cache, out,
                       ssm_state_indices, write_pos, force_flush, overflow,
                       *_op_scalars(scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm_in_kernel, ring_len,
                                    max_rows, backend, padding))
            return out
    elif watching:  # arrays torch does not own, under a torch mode or profiler: nothing of torch's to skip
        return decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache, out,
                      ssm_state_indices, write_pos, force_flush, gate_kind=gate_kind, gate_mode=gate_mode,
                      gate_lower_bound=gate_lower_bound, use_qk_l2norm=use_qk_l2norm_in_kernel, ring_len=ring_len,
                      max_rows=max_rows, overflow=overflow, backend=backend, stream=stream, padding=padding)
    _decode(arrays, key, scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm_in_kernel, ring_len,
            max_rows, backend, padding, stream)
    return out


def decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache, out,
           ssm_state_indices, write_pos, force_flush=None, *, gate_kind="gdn", gate_mode="raw",
           gate_lower_bound=0.0, use_qk_l2norm=True, ring_len=None, max_rows=None, overflow=None, backend=None,
           stream=None, padding="out_of_range"):
    """fused_recurrent_gated_delta_rule_replayssm without the torch custom op
    (its implementation): a prepared call if there is one for these
    arguments, else the full path, which prepares one."""
    arrays = (mixed_qkv, a, b, A_log, dt_bias, initial_state, d_cache, k_cache, g_cache, out, ssm_state_indices,
              write_pos, force_flush, overflow)
    call, key = _prepared_call(_key(arrays, scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm,
                                    ring_len, max_rows, backend, padding, stream))
    if call is None or not call(arrays):
        _decode(arrays, key, scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len, max_rows,
                backend, padding, stream)
    return out


def _stream_handle(stream):
    """An explicit stream= as the integer a DLPack producer is told."""
    return None if stream is None else _stream(stream, (), "cuda")


def planned_decode(arrays, scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len, max_rows, backend,
                   padding, layer_stream) -> list:
    """The compiled extension's first call of a description on a stream
    (rssm.torch_ext, through the op rssm::_replayssm_decode_plan): the call
    on the Python path, on the layer object of `layer_stream` (the stream
    as an int, 0 for the legacy default and the cpu backend), and the plan
    the extension keeps, as ints: the layer's handle, the rows and (arg,
    offset, itemsize) per pointer of rssm_layer_tensors (arg -1: NULL).
    Empty where arguments are converted: such calls take this path each
    time, as rssm._prepared keeps none of them."""
    plan = _decode(arrays, None, scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len, max_rows,
                   backend, padding, None, layer_stream)
    if any(c is not None for c in plan.converts):
        return []
    fields = [(-1, 0, 0) if f is None else (f.arg, f.offset, f.itemsize) for f in plan.fields]
    return [plan.layer._h.value, plan.rows, *(n for f in fields for n in f)]


def _decode(arrays, key, scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len, max_rows, backend,
            padding, stream, layer_stream=None) -> _prepared.Plan:
    """Reads the arrays, finds (or makes) the plan for their description,
    binds their addresses and launches; then keeps the bound call for
    `key` (None: keep nothing) in rssm._prepared. `layer_stream`: the
    stream whose layer object the call takes (rssm.layer.layer_for)."""
    dl_stream = _stream_handle(stream)
    infos = tuple(None if x is None else array_info(x, n, dl_stream) for x, n in zip(arrays, _NAMES))
    plan_key = None
    if key is not None and all(v is None or type(v) in _VALUES for v in key[len(arrays):-1]):
        plan_key = (tuple(None if i is None else i.layout for i in infos), key[len(arrays):-1])
    if plan_key is None or not (stream is None or type(stream) is int):
        key = None
    plan = None if plan_key is None else _prepared.plans.get(plan_key)
    if plan is None:
        plan = _plan(infos, scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len,
                     max_rows, backend, padding, layer_stream)
        if plan_key is not None:
            _prepared.remember(_prepared.plans, plan_key, plan, _prepared.MAX_PLANS)
    tensors, read = plan.bind(infos)
    st = _stream(stream, read, plan.memory)
    _keep_converted([r for r, i in zip(read, infos) if r is not i], st)
    plan.layer.launch_tensors(plan.rows, tensors, st, plan.names)
    torch_stream = None  # the launch went on torch's current stream: a prepared call reads it anew each time
    if stream is None and plan.memory == "cuda" and _arrays.torch_ops is not None:
        dev = next((i for i in infos if i is not None and i.kind == "torch" and i.device == "cuda"), None)
        if dev is not None:
            torch_stream = _arrays.torch_ops.current_stream_reader(dev.device_index)
    _prepared.prepare(key, plan, arrays, infos, tensors, st, torch_stream)
    return plan


def _pool(state: ArrayInfo, ring_d: ArrayInfo, ring_k: ArrayInfo, ring_g: ArrayInfo, gate_kind: str,
          ring_len) -> dict:
    """The LayerDesc fields the state pool and the rings give: shape,
    dtypes, ring length and their strides (checked against the rest in
    rssm.layer)."""
    if gate_kind not in _lib.GATE_KINDS:
        raise ValueError(f"gate_kind {gate_kind!r}: expected 'gdn' or 'kda'")
    _dims(state, 4, "[slots, HV, V, K]")
    _dims(ring_d, 4, "[slots, HV, R, V]")
    _dims(ring_k, 4, "[slots, H, R, K]")
    _dims(ring_g, 4 if gate_kind == "kda" else 3, "[slots, HV, R, K] (KDA)" if gate_kind == "kda"
          else "[slots, HV, R] (GDN)")
    if state.dtype not in ("fp32", "bf16"):
        raise TypeError(f"{state.name} is {state.dtype}, expected fp32 or bf16")
    for x in (ring_d, ring_k):
        if x.dtype not in ("fp32", "fp16", "bf16"):
            raise TypeError(f"{x.name} is {x.dtype}, expected fp32, fp16 or bf16")
    if ring_k.dtype != ring_d.dtype:
        raise TypeError(f"{ring_k.name} is {ring_k.dtype} but {ring_d.name} is {ring_d.dtype}: the rings share "
                        "one dtype")

    def slot_head(x: ArrayInfo) -> tuple:
        return (_outer_stride(x, 0), _outer_stride(x, 1)) if len(x.shape) >= 2 else (0, 0)

    slots, HV, V, K = state.shape
    s_slot, s_head = slot_head(state)
    d_slot, d_head = slot_head(ring_d)
    k_slot, k_head = slot_head(ring_k)
    g_slot, g_head = slot_head(ring_g)
    return dict(num_qk_heads=ring_k.shape[1], num_v_heads=HV, head_k=K, head_v=V, slots=slots,
                ring_len=_count("ring_len", ring_len) or ring_d.shape[2], gate_kind=gate_kind, replay=True,
                state_dtype=state.dtype, ring_dtype=ring_d.dtype,
                state_slot_stride=s_slot, state_head_stride=s_head,
                ring_d_slot_stride=d_slot, ring_d_head_stride=d_head,
                ring_k_slot_stride=k_slot, ring_k_head_stride=k_head,
                ring_g_slot_stride=g_slot, ring_g_head_stride=g_head)


def _backend_memory(backend, device: str) -> tuple:
    name = backend or ("cuda" if device == "cuda" else "cpu")
    return name, "cuda" if name.startswith("cuda") else "cpu" if name.startswith("cpu") else None


def _plan(infos, scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len, max_rows, backend, padding,
          layer_stream=None):
    """Every check of a call, on its arrays as read (`infos`), and the
    layer object for its description (and `layer_stream`), as an
    rssm._prepared.Plan: what later calls with the same description skip."""
    if gate_mode not in _lib.GATE_MODES:
        raise ValueError(f"gate_mode {gate_mode!r}: expected one of {sorted(_lib.GATE_MODES)}")
    _check_padding(padding)
    raw = gate_mode != "precomputed"
    for name, x in zip(_NAMES, infos):
        if x is None and name not in ("A_log", "dt_bias", "force_flush", "overflow"):
            raise ValueError(f"{name} is needed (got None)")
    backend_name, memory = _backend_memory(backend, infos[0].device)
    device = device_for(backend_name, infos)  # before any conversion: a copy goes where its tensor is
    (qkv, gate, beta, A_log_i, dt_bias_i, state, ring_d, ring_k, ring_g, out_i, idx, wpos, force,
     overflow) = infos
    pool = _pool(state, ring_d, ring_k, ring_g, gate_kind, ring_len)
    H, HV, K, V = pool["num_qk_heads"], pool["num_v_heads"], pool["head_k"], pool["head_v"]
    _dims(qkv, 2, "[B, 2*H*K + HV*V]")
    B, width = qkv.shape
    if width != 2 * H * K + HV * V:
        raise ValueError(f"mixed_qkv has {width} columns, expected 2*H*K + HV*V = {2 * H * K + HV * V} "
                         f"(H={H} from k_cache, HV={HV}, V={V}, K={K} from initial_state)")
    if not contiguous_tail(qkv, 1):
        raise ValueError(f"{qkv.describe()}: each row must be contiguous")
    if qkv.dtype not in ("fp32", "fp16", "bf16"):
        raise TypeError(f"mixed_qkv is {qkv.dtype}, expected fp32, fp16 or bf16")
    q, k, v = (qkv.columns("q (mixed_qkv)", 0, H * K), qkv.columns("k (mixed_qkv)", H * K, H * K),
               qkv.columns("v (mixed_qkv)", 2 * H * K, HV * V))

    # The copies, made before the strides are read, since the description
    # holds the strides of what C reads: a and b in place when both are fp32
    # or both bf16 (the C API's gate dtypes), else both converted to fp32;
    # A_log and dt_bias to fp32; the per-row arrays to int32.
    gate_dtype = gate.dtype if gate.dtype == beta.dtype and gate.dtype in ("fp32", "bf16") else "fp32"
    gate = _as(gate, gate_dtype, "the C API's gate dtype")
    beta = _as(beta, gate_dtype, "the C API's gate dtype")
    if raw:
        if A_log_i is None or dt_bias_i is None:
            raise ValueError(f"gate_mode {gate_mode!r} needs A_log and dt_bias")
        A_log_i = _as(A_log_i, "fp32", "the C API's gate weight dtype")
        dt_bias_i = _as(dt_bias_i, "fp32", "the C API's gate weight dtype")
    else:
        A_log_i = dt_bias_i = None
    idx = _int32(idx, "rssm's per-row dtype")
    wpos = _int32(wpos, "rssm's per-row dtype")
    force = None if force is None else _int32(force, "rssm's per-row dtype")

    def row_stride(x: ArrayInfo) -> int:
        return _outer_stride(x, 0) if x.shape else 0

    lower_bound = c_number("gate_lower_bound", gate_lower_bound, "gate_lower_bound")
    desc = LayerDesc(
        **pool, max_rows=_count("max_rows", max_rows) or _next_pow2(max(B, 1)), gate_mode=gate_mode,
        gate_lower_bound=lower_bound, io_dtype=qkv.dtype, qk_l2norm=bool(use_qk_l2norm),
        q_scale=_scale(scale), q_row_stride=row_stride(q), k_row_stride=row_stride(k),
        v_row_stride=row_stride(v), out_row_stride=row_stride(out_i), gate_row_stride=row_stride(gate),
        beta_row_stride=row_stride(beta), gate_dtype=gate_dtype, padding=padding)
    # Check every array against the description before a layer object is
    # made for it, so a wrong call leaves nothing behind in the cache.
    run = prepare_run(desc, backend_name, memory, device=device, q=q, k=k, v=v, gate=gate, beta=beta, out=out_i,
                      state=state, ring_d=ring_d, ring_k=ring_k, ring_g=ring_g, slot_index=idx, write_pos=wpos,
                      force=force, A_log=A_log_i, dt_bias=dt_bias_i, overflow=overflow)
    layer = layer_for(desc, backend_name, device, layer_stream)
    read = (qkv, gate, beta, A_log_i, dt_bias_i, state, ring_d, ring_k, ring_g, out_i, idx, wpos, force, overflow)
    fields = []
    for name, arg in _FIELDS:
        x = run.arrays[name]
        fields.append(None if x is None else _prepared.Field(arg, x.ptr - read[arg].ptr, x.itemsize, x.name))
    # None where the argument is read as given, or not read at all (A_log
    # and dt_bias with precomputed gates)
    converts = tuple(None if r is i or r is None else r.dtype for r, i in zip(read, infos))
    return _prepared.Plan(layer, run.rows, fields, converts, memory, _lib.tensor_names(run.arrays))


def materialise(initial_state, d_cache, k_cache, g_cache, ssm_state_indices, write_pos, *, gate_kind="gdn",
                ring_len=None, max_rows=None, backend=None, stream=None, padding="out_of_range"):
    """Folds each row's committed ring entries into its slot's checkpoint,
    on the device, so that initial_state[slot] alone is the slot's true
    state: what an engine does before its prefix cache snapshots a slot or
    copies it to another (rssm_layer_materialise). Padding rows (a negative
    slot) are skipped; the rings are read, not cleared, so set the folded
    slots' cursors to 0 afterwards (rssm.advance with force_flush set does;
    every layer of the step first). Rows must name distinct slots.

    Arguments as in fused_recurrent_gated_delta_rule_replayssm: the state
    pool and rings of one layer, ssm_state_indices and write_pos [B] (the
    slots' cursors), gate_kind, ring_len (default d_cache's entries),
    max_rows, backend, stream, padding. torch tensors go through the custom op
    rssm::replayssm_materialise. Returns initial_state."""
    ops = torch_ops_for(initial_state)
    if ops is not None:
        if stream is not None:
            raise ValueError("stream: torch tensors run on torch's current stream (use `with torch.cuda.stream(s):`)")
        ops.materialise(initial_state, d_cache, k_cache, g_cache, ssm_state_indices, write_pos, gate_kind,
                        _count("ring_len", ring_len), _count("max_rows", max_rows), backend or "", padding)
        return initial_state
    return materialise_direct(initial_state, d_cache, k_cache, g_cache, ssm_state_indices, write_pos,
                              gate_kind=gate_kind, ring_len=ring_len, max_rows=max_rows, backend=backend,
                              stream=stream, padding=padding)


def materialise_direct(initial_state, d_cache, k_cache, g_cache, ssm_state_indices, write_pos, *, gate_kind="gdn",
                       ring_len=None, max_rows=None, backend=None, stream=None, padding="out_of_range", _took=None):
    """materialise without the torch custom op (its implementation), with a
    cached layer of the pool's description (its step arrays' part left at
    the defaults: the fold supplies its own)."""
    dl_stream = _stream_handle(stream)
    pool = {n: array_info(x, n, dl_stream) for n, x in (("initial_state", initial_state), ("d_cache", d_cache),
                                                          ("k_cache", k_cache), ("g_cache", g_cache))}
    state, ring_d, ring_k, ring_g = pool.values()
    fields = _pool(state, ring_d, ring_k, ring_g, gate_kind, ring_len)
    idx = array_info(ssm_state_indices, "ssm_state_indices", dl_stream)
    wpos = array_info(write_pos, "write_pos", dl_stream)
    rows = idx.shape[0] if len(idx.shape) == 1 else 0
    backend_name, _ = _backend_memory(backend, state.device)
    device = device_for(backend_name, (*pool.values(), idx, wpos))
    _check_padding(padding)
    desc = LayerDesc(**fields, max_rows=_count("max_rows", max_rows) or _next_pow2(max(rows, 1)), padding=padding)
    layer = pool_layer(desc, backend_name, rows, device)
    layer.materialise(state=state, ring_d=ring_d, ring_k=ring_k, ring_g=ring_g, slot_index=idx, write_pos=wpos,
                      stream=stream, _took=_took)
    if _took is not None:
        _took.insert(0, layer)
    return initial_state


# The argument of planned_materialise (its index) whose memory each pointer
# of rssm_layer_tensors is, in the struct's order (None: NULL for the fold).
_MATERIALISE_ARGS = (0, 1, 2, 3, None, None, None, None, None, None, None, None, 4, 5, None, None)


def planned_materialise(initial_state, d_cache, k_cache, g_cache, ssm_state_indices, write_pos, gate_kind, ring_len,
                        max_rows, backend, padding) -> list:
    """The compiled torch extension's first call of a materialise's
    description on a stream (rssm.torch_ext, through the op
    rssm::_replayssm_materialise_plan): the call on the Python path, and
    the plan the extension keeps, as planned_decode's (the pointers of
    rssm_layer_tensors). Empty where an argument was converted."""
    args = (initial_state, d_cache, k_cache, g_cache, ssm_state_indices, write_pos)
    took = []
    materialise_direct(*args, gate_kind=gate_kind, ring_len=ring_len or None, max_rows=max_rows or None,
                       backend=backend or None, padding=padding, _took=took)
    return _prepared.direct_plan(args, _MATERIALISE_ARGS, took)
