"""What a repeated call of the per-layer entry skips: two caches in front of
the full checks of rssm.replayssm.

  plans  keyed by the call's description without its addresses (each
         array's shape, strides, dtype, device and kind, and the scalar
         arguments): the checks passed, the layer object, where each field
         of rssm_layer_tensors comes from and which arrays are converted.
         A call with new array objects (an engine that slices its step
         tensors anew each step) reads its arrays, finds its plan and binds
         the addresses.
  calls  keyed by the arrays' id()s and the scalar arguments: a plan bound
         to those objects, with rssm_layer_tensors filled. A call with the
         same ids re-reads each array's facts (rssm._arrays.fact_reader:
         for torch its class, address, shape, strides, dtype and device;
         for NumPy all but the address) and calls C if none changed.

An id() names an object only while it lives. Where the facts hold the
address they say everything C reads, whichever object has the id now; a
NumPy array's leave the address out, so the call holds a weak reference to
it whose callback drops the call from `calls` when the array dies, before
its id can be reused: a call found in `calls` then holds the very NumPy
arrays it is asked with. Nothing here keeps an array alive (weak
references and ints only). Both caches are bounded: past their limit they
are emptied and refill as calls come. A call whose arrays need a
conversion (a copy per call) or cannot be read again cheaply (DLPack) is
planned but not kept in `calls`.
"""

from __future__ import annotations

import ctypes
import weakref
from operator import itemgetter

from . import _arrays, _lib

MAX_CALLS = 1024
MAX_PLANS = 256

calls: dict = {}
plans: dict = {}
# Called by clear(): the compiled torch extension (rssm.torch_ext) keeps
# plans of its own that name layer objects.
on_clear: list = []


def clear() -> None:
    calls.clear()
    plans.clear()
    for forget in on_clear:
        forget()


def remember(cache: dict, key, value, limit: int) -> None:
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value


class Field:
    """Where one pointer of rssm_layer_tensors comes from: argument `arg`
    of the call (after its conversion, if the plan has one) at byte
    `offset`, with the element size its address must be a multiple of and
    the name an error gives it."""
    __slots__ = ("arg", "offset", "itemsize", "label")

    def __init__(self, arg: int, offset: int, itemsize: int, label: str):
        self.arg, self.offset, self.itemsize, self.label = arg, offset, itemsize, label


def direct_plan(args: tuple, arg_of: tuple, took: list) -> list:
    """The compiled torch extension's plan of a call whose pointers are its
    tensors' own memory (rssm.torch_ext: materialise and advance), from what
    the Python path's call put in `took` (the layer, the rows, the pointers
    the C call took, in its order; arg_of: the index in `args` whose memory
    each pointer is, None for NULL), as ints: the layer's handle, the rows,
    then per pointer (index, 0, itemsize), or (-1, 0, 0) for NULL. Empty
    when a pointer is not its argument's address (a converted copy: such a
    call is made on the Python path each time, as `calls` keeps none of
    them)."""
    layer, rows, ptrs = took
    out = [layer._h.value, rows]
    for i, ptr in zip(arg_of, ptrs):
        if i is None or ptr is None:
            if ptr is not None:
                return []
            out += [-1, 0, 0]
            continue
        x = args[i]
        if x is None or ptr != x.data_ptr():
            return []
        out += [i, 0, x.element_size()]
    return out


class Plan:
    """A call description resolved once: the layer (rssm.layer.Layer), the
    rows, a Field (or None: NULL) per pointer of rssm_layer_tensors, the
    conversion of each argument (a dtype, or None), the memory the
    backend takes ("cpu", "cuda", or None where the package cannot tell)
    and the arguments' names for rssm's tensors in its messages
    (_lib.check)."""
    __slots__ = ("layer", "rows", "fields", "converts", "memory", "names")

    def __init__(self, layer, rows: int, fields: list, converts: tuple, memory, names: dict | None = None):
        self.layer, self.rows, self.fields, self.converts, self.memory = layer, rows, fields, converts, memory
        self.names = names

    def bind(self, infos: tuple) -> tuple:
        """rssm_layer_tensors for the arrays read as `infos`, with the
        conversions made, and the ArrayInfos of what C reads (the converted
        copies in place of their originals: the caller keeps them alive
        until the launch)."""
        infos = list(infos)
        for i, want in enumerate(self.converts):
            if want is not None:
                infos[i] = _arrays.convert(infos[i], want, "rssm's per-row or gate dtype")
        values = []
        for f in self.fields:
            if f is None:
                values.append(None)
                continue
            ptr = infos[f.arg].ptr + f.offset
            if ptr % f.itemsize:
                raise ValueError(f"{f.label}: its address {ptr:#x} is not a multiple of its element size")
            values.append(ptr)
        return _lib.RssmLayerTensors(*values), infos


def _facts(readers: list):
    """One function reading the facts of all the picked arrays: a map over
    one reader where every array is of one kind (the common case, and the
    cheapest), else one reader per array."""
    first = readers[0]
    if all(r is first for r in readers):
        many = getattr(first, "many", None)
        if many is not None:
            return many
        return lambda xs: tuple(map(first, xs))
    return lambda xs: tuple(r(x) for r, x in zip(readers, xs))


class Call:
    """A plan bound to particular array objects: rssm_layer_tensors filled,
    the facts of each array as they were, and the stream the launch goes
    on: None, or a function giving it (a constant, or torch's current
    stream read at each call, which a CUDA graph capture makes its own).
    The C function is looked up at each call, not kept: a test may stand
    another in its place."""
    __slots__ = ("layer", "rows", "tensors", "err", "err_ref", "pick", "facts", "expected", "stream", "refs",
                 "names")

    def __call__(self, arrays: tuple) -> bool:
        """Runs the call if the arrays still read as they did when it was
        prepared; False, having run nothing, if any does not."""
        try:
            if self.facts(self.pick(arrays)) != self.expected:
                return False
        except Exception:  # an array that no longer reads as one: the full path says why
            return False
        stream = self.stream
        if stream is not None:
            stream = stream()
        layer = self.layer
        with layer._calls:
            status = layer._c.rssm_layer_run(layer._h, self.rows, self.tensors, stream, self.err_ref)
            if status:
                _lib.check("rssm_layer_run", status, self.err, self.names)
        return True


def prepare(key, plan: Plan, arrays: tuple, infos: tuple, tensors, stream, torch_stream) -> None:
    """Keeps a Call for `key` (see the module's docstring for when not).
    `stream` is the launch stream of a call without torch CUDA tensors;
    `torch_stream`, when set, a function reading torch's current stream."""
    if key is None or any(c is not None for c in plan.converts):
        return
    positions = [i for i, x in enumerate(arrays) if x is not None]
    picked = [arrays[i] for i in positions]
    readers = [_arrays.fact_reader(arrays[i], infos[i]) for i in positions]
    if any(r is None for r, _ in readers):
        return
    call = Call()

    def drop(_ref, key=key):
        calls.pop(key, None)

    # Kept on the call, so that the callbacks fire while it is cached.
    call.refs = [weakref.ref(x, drop) for x, (_, by_identity) in zip(picked, readers) if by_identity]
    call.layer, call.rows, call.names = plan.layer, plan.rows, plan.names
    call.tensors = ctypes.byref(tensors)
    call.err = _lib.RssmError()
    call.err_ref = ctypes.byref(call.err)
    call.pick = itemgetter(*positions) if len(positions) > 1 else (lambda a, i=positions[0]: (a[i],))
    call.facts = _facts([r for r, _ in readers])
    call.expected = call.facts(call.pick(arrays))
    call.stream = torch_stream if torch_stream is not None else None if stream is None else lambda: stream
    remember(calls, key, call, MAX_CALLS)
