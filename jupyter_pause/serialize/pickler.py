"""Pickling a namespace fast and faithfully: C pickle, one shared memo, arrays out of band.

Each variable becomes its own segment, but all segments are written by one pickler and read by one
unpickler, so an object shared by two variables (a model's parameters inside an optimizer) is one
object again after restore. Notebook-defined functions and classes go by value (``reducers``);
tensor storages and large arrays go out of band (``arrays``); standard-library kinds pickle gets
wrong (open files, iterators, loggers, weak references...) are saved as what they are (``kinds``).
A variable the C pickler cannot handle gets a second chance with dill, as a standalone segment.
"""

from __future__ import annotations

import functools
import io
import pickle
import pickletools
import struct
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import dill

from . import arrays, kinds, reducers, shared, weakrefs
from .arrays import ArrayCollector, ArrayLoader
from .losses import MISSING_DATA, Lost, cause, lost_ops, lost_with
from .moved import find_moved
from .segments import NullSink, SegmentReader, SegmentWriter

#: Protocol 3 writes each memo index explicitly (BINPUT n). Protocol 4+ numbers entries
#: implicitly by count, so one segment that fails to load would shift every later reference.
PROTOCOL = 3


#: Objects complete the moment they are memoised: safe to keep from a segment that failed later.
_COMPLETE_ON_PUT = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.ModuleType,
    str,
    bytes,
    int,
    float,
    tuple,
)


class _Reducing:
    """The reducer_override shared by the C and the dill picklers.

    ``_table`` maps exact types to their reducer: the array collector's, then each kind of
    ``kinds`` as it is first met (None: no special kind), so each type is looked up once per dump.
    """

    _table: dict[type, Callable[[Any], Any] | None]

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        try:
            handler = self._table[kind]
        except KeyError:
            handler = self._table[kind] = kinds.reducer_for(kind) or shared.reducer_for(kind)
        if handler is not None:
            return handler(obj)
        return reducers.reduce_by_value(obj)


class StatePickler(_Reducing, pickle.Pickler):
    """C pickler with out-of-band arrays and by-value notebook code."""

    def __init__(self, file: Any, collector: ArrayCollector) -> None:
        super().__init__(file, protocol=PROTOCOL)
        self._table = dict(collector.reducers())


class DillStatePickler(_Reducing, dill.Pickler):
    """dill's pickler for what C pickle cannot handle; same array and code handling."""

    def __init__(self, file: Any, collector: ArrayCollector) -> None:
        super().__init__(file, protocol=PROTOCOL, recurse=True)
        self._table = dict(collector.reducers())


class StrongProbe(StatePickler):
    """Pickles like ``StatePickler`` into nothing, leaving out what weak references point to: its
    memo then holds every object some variable saves through a strong reference."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) in weakrefs.REDUCERS:
            return weakrefs.placeholder(obj)
        return super().reducer_override(obj)


class Refused(Exception):
    """A global a loader's guard would not let it call (``load_variables(guard=...)``)."""


class _Resolving:
    """find_class that resolves jupyter-pause's placeholders to this restore's data, and passes
    every other global through ``_guard`` when one is set (it may refuse it, or replace it)."""

    _loader: ArrayLoader
    _namespace: dict[str, Any]
    _guard: Callable[[Any], Any] | None = None

    def find_class(self, module: str, name: str) -> Any:
        module = find_moved(module)
        if module == arrays.__name__ and name == "load_array":
            return self._loader.load
        if module == reducers.__name__ and name == "make_function":
            return functools.partial(reducers.make_function, namespace=self._namespace)
        found = super().find_class(module, name)  # type: ignore[misc]
        return found if self._guard is None else self._guard(found)


class StateUnpickler(_Resolving, pickle.Unpickler):
    """Reads segments written by ``StatePickler``, in order, with one shared memo."""

    def __init__(
        self, file: Any, loader: ArrayLoader, namespace: dict[str, Any], guard: Callable[[Any], Any] | None = None
    ) -> None:
        super().__init__(file)
        self._loader, self._namespace, self._guard = loader, namespace, guard


class DillStateUnpickler(_Resolving, dill.Unpickler):
    """Reads a standalone dill segment."""

    def __init__(
        self, file: Any, loader: ArrayLoader, namespace: dict[str, Any], guard: Callable[[Any], Any] | None = None
    ) -> None:
        super().__init__(file)
        self._loader, self._namespace, self._guard = loader, namespace, guard


@dataclass
class Segment:
    """One variable's pickled bytes, the arrays it introduced, and which pickler wrote it."""

    data: bytes
    arrays: list[str]
    pickler: str = "pickle"


@dataclass
class DumpResult:
    """Segments in load order, the arrays they refer to, and the variables that failed."""

    segments: dict[str, Segment] = field(default_factory=dict)
    collector: ArrayCollector = field(default_factory=ArrayCollector)
    failed: dict[str, str] = field(default_factory=dict)
    #: Variables holding a tensor with an autograd graph, and its function (``note_graph``).
    graphs: dict[str, str] = field(default_factory=dict)


def _reason(error: BaseException) -> str:
    text = str(error).strip() or "no message"
    return f"{type(error).__name__}: {text}"


def dump_variables(values: dict[str, Any]) -> DumpResult:
    """Pickle each variable into its own segment, sharing one memo across all of them.

    A variable that fails is dropped and the pass starts again without it, so no segment refers
    to memo entries of a half-written one; failed variables then get one try with dill. A
    variable holding a weak reference whose referent no saved variable holds strongly is dropped
    too (it would come back dead), and gets no second try.
    """
    result = DumpResult()
    final: dict[str, str] = {}
    while True:
        segments = _dump_pass(values, result, final)
        if segments is None:
            continue
        weak_only = _weak_only(values, segments, result.collector)
        if not weak_only:
            break
        final.update(weak_only)
    result.segments = segments
    for name in list(result.failed):
        segment = _dump_with_dill(values[name], result.collector)
        if isinstance(segment, Segment):
            result.segments[name] = segment
            del result.failed[name]
        elif segment != result.failed[name]:
            result.failed[name] = f"{result.failed[name]} (dill: {segment})"
    result.failed.update(final)
    used = {key for segment in result.segments.values() for key in segment.arrays}
    result.collector.found = {k: v for k, v in result.collector.found.items() if k in used}
    return result


def _dump_pass(values: dict[str, Any], result: DumpResult, final: dict[str, str]) -> dict[str, Segment] | None:
    """One pass over the variables not failed yet; None when one failed (then the pass is redone)."""
    writer = SegmentWriter()
    pickler = StatePickler(writer, result.collector)
    segments: dict[str, Segment] = {}
    weakrefs.check = weakrefs.WeakCheck()
    for name, value in values.items():
        if name in result.failed or name in final:
            continue
        result.collector.touched, result.collector.graph = [], None
        weakrefs.check.current = name
        try:
            pickler.dump(value)
        except Exception as e:  # any __reduce__ may raise anything; the variable is reported
            result.failed[name] = _reason(e)
            return None
        if result.collector.graph is not None:
            result.graphs[name] = result.collector.graph
        segments[name] = Segment(writer.take(), list(dict.fromkeys(result.collector.touched)))
    return segments


def _weak_only(values: dict[str, Any], segments: dict[str, Segment], collector: ArrayCollector) -> dict[str, str]:
    """Variables holding weak references to objects no saved variable holds strongly, and why."""
    check = weakrefs.check
    if not check.referents:
        return {}
    probe = StrongProbe(NullSink(), ArrayCollector())
    for name in segments:
        try:
            probe.dump(values[name])
        except Exception:  # the pass above pickled it; whatever the probe reached still counts
            continue
    return check.weak_only(set(probe.memo.copy()))


def _dump_with_dill(value: Any, collector: ArrayCollector) -> Segment | str:
    collector.touched = []
    buffer = io.BytesIO()
    try:
        DillStatePickler(buffer, collector).dump(value)
    except Exception as e:  # reported with the C pickler's reason
        return _reason(e)
    return Segment(buffer.getvalue(), list(dict.fromkeys(collector.touched)), pickler="dill")


def load_variables(
    segments: list[tuple[str, str, bytes | bytearray | None]],
    loader: ArrayLoader,
    namespace: dict[str, Any],
    guard: Callable[[Any], Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Unpickle ``(name, pickler, data)`` segments in order into a new dict.

    ``data`` is None for a segment whose blob is missing. Returns the values that loaded and,
    for the others, why not. ``guard(global)``: what to use for each global a segment names
    (raising ``Refused`` fails the segment, with that in its reason); None: every global as it is.
    """
    reader = SegmentReader()
    unpickler = StateUnpickler(reader, loader, namespace, guard)
    values: dict[str, Any] = {}
    failed: dict[str, str] = {}
    losses: list[Lost] = []  # what stands in for the objects of each failed segment
    streams: list[bytes | bytearray] = []  # the shared-memo segments loaded so far, in order
    for name, kind, data in segments:
        if data is None:
            failed[name] = "its data blob is missing or damaged"
            continue
        try:
            if kind == "dill":
                values[name] = DillStateUnpickler(io.BytesIO(data), loader, namespace, guard).load()
            else:
                reader.feed(data)
                values[name] = unpickler.load()
        except Exception as e:  # a damaged or dependent segment: reported by name, others go on
            failed[name] = _reason(e)
            if kind != "dill":
                met = cause(data, reader.tell(), unpickler.memo.copy())
                if met is not None:
                    failed[name] = lost_with(met, failed)
                unpickler = _after_failure(unpickler, data, streams, reader, loader, namespace, name, losses)
        if kind != "dill":
            streams.append(data)
    for name in list(values):
        found = loader.reached(values[name], namespace, tuple(losses))
        if found is not None:
            del values[name]
            failed[name] = lost_with(found, failed) if isinstance(found, Lost) else MISSING_DATA
    for name, reason in failed.items():
        if "Memo value not found" in reason:
            failed[name] = "it shares objects with a variable that could not be restored"
    return values, failed


def _after_failure(
    unpickler: StateUnpickler,
    data: bytes | bytearray,
    earlier: list[bytes | bytearray],
    reader: SegmentReader,
    loader: ArrayLoader,
    namespace: dict[str, Any],
    variable: str,
    losses: list[Lost],
) -> StateUnpickler:
    """A clean unpickler after a failed segment: same memo, the segment's unfinished objects lost.

    A failed load leaves the unpickler's stack dirty, and objects the segment memoised before it
    failed may be half-built (an empty list whose items never came). Those entries are replaced
    by a ``Lost`` naming ``variable`` (added to ``losses``) so later variables that refer to them
    are reported with it, never restored half-built. What the segment would have memoised after
    it failed is filled in too: a literal (a string such as an attribute name, shared with later
    variables through the memo) and a global by its value, anything else as lost.
    """
    memo = unpickler.memo.copy()
    try:
        size = 0
        for stream in earlier:
            size = _memo_assignments(stream, size)[1]
        assignments = _memo_assignments(data, size)[0]
    except Exception:  # a truncated stream: everything it memoised is suspect
        assignments = [(i, None) for i in memo]
    fills: dict[int, bytes | None] = {}
    for index, source in assignments:
        if isinstance(memo.get(index), _COMPLETE_ON_PUT):
            continue
        fills[index] = source if index not in memo else None
    fresh = StateUnpickler(reader, loader, namespace, unpickler._guard)
    # Copied from the other unpickler's memo proxy: assigning a dict loses every entry on CPython 3.11.
    fresh.memo = unpickler.memo
    lost = sorted(index for index, source in fills.items() if source is None)
    if lost:
        reader.feed(_puts(lost_ops(variable), lost))
        losses.append(fresh.load())
    for index, ops in sorted((i, ops) for i, ops in fills.items() if ops is not None):
        try:  # one at a time: a global that no longer resolves is lost alone
            reader.feed(_puts(ops, [index]))
            fresh.load()
        except Exception:
            reader.feed(_puts(lost_ops(variable), [index]))
            losses.append(fresh.load())
    return fresh


#: Opcodes that push a constant: what they push is the same whenever they run.
_CONSTANTS = {
    "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING",
    "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT",
    "LONG", "BINFLOAT", "FLOAT", "NONE", "NEWTRUE", "NEWFALSE", "GLOBAL",
}  # fmt: skip


def _memo_assignments(data: bytes | bytearray, first: int) -> tuple[list[tuple[int, bytes | None]], int]:
    """The memo indices a segment's stream assigns when loaded after a memo of ``first``
    entries, each with the opcode bytes that pushed its object when that is a constant (else
    None), and the memo's size after the stream.

    ``PUT`` opcodes name their index; protocol 4's ``MEMOIZE`` takes the memo's size at that
    moment. A failed segment stops before assigning some of them, so they must all be filled
    or every later ``MEMOIZE`` would land one place off and later variables would be rebuilt
    from the wrong objects. (Parsed only after a failure: the memo's own size cannot be read
    from the unpickler.)
    """
    raw = bytes(data)
    assigned: list[tuple[int, bytes | None]] = []
    size = first
    previous: tuple[str, int] = ("", 0)  # the opcode before: its name and where it starts
    for op, arg, pos in pickletools.genops(raw):
        if op.name == "MEMOIZE" or "PUT" in op.name:
            index = size if op.name == "MEMOIZE" else arg
            constant = raw[previous[1] : pos] if previous[0] in _CONSTANTS else None
            assigned.append((index, constant))
            size = max(size, index + 1)
        previous = (op.name, pos)
    return assigned, size


def _puts(push: bytes, indices: list[int]) -> bytes:
    """A pickle stream that runs ``push`` and puts what it pushed into each memo index (and
    loads it, leaving the stack clean)."""
    puts = b"".join(b"r" + struct.pack("<I", index) for index in indices)  # LONG_BINPUT
    return b"\x80\x03" + push + puts + b"."
