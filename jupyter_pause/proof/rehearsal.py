"""A rehearsal of the restore at checkpoint time: will each small variable come back the same?

The restore test finds a variable that came back different only at resume, once the paused
kernel (and its GPU) are gone. Here, while the checkpoint is taken, each small variable is
pickled again on its own by the checkpoint's pickler, loaded straight back by the resume's
unpickler into a namespace of its own, and the copy's value digest compared with the live
value's. A variable whose copy differs, or does not load, is named then: it ``will not come back
exactly``, with why. It is saved all the same (what comes back may still be what the notebook
needs), and the restore test says it was named.

Not rehearsed, so nothing large is copied and nothing of the process is touched:

- a variable over ``MAX_BYTES`` (its pickled bytes and its arrays' together), or whose bytes are
  mostly arrays and tensor storages (raw bytes, which the checkpoint's checksums cover); past
  ``MAX_TOTAL_BYTES`` in all, the larger variables;
- a variable with no digest (too large to take one);
- a variable whose loading would call anything but a class or a known reconstructor (those of
  pickle's ``copyreg``, numpy, torch, pandas, pyarrow, scipy, dill and jupyter-pause itself, which
  only build objects): a ``__reduce__`` may name any function, and calling it here would act in
  the live kernel (open a connection, write a file, run a planted payload);
- a variable that reaches a kind whose restore acts on the process: loggers and handlers
  (registered again by name), open files and archives (opened again), weak references (rehearsed
  alone, their referent would be a copy no one holds), matplotlib figures (added to pyplot), dask
  expressions (interned by name: loading one rewrites the live expression's cached metadata),
  objects that keep their state in their class (``serialize.shared``: loading one fills the live class).

Each variable is rehearsed alone: what two variables share is kept by the real restore's one
memo, and is not what this checks.
"""

from __future__ import annotations

import builtins
import importlib
import io
import logging
import socket
import subprocess
import tarfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from typing import Any

from ..serialize import shared, weakrefs
from ..serialize.arrays import ArrayCollector, ArrayLoader
from ..serialize.digests import value_digest
from ..serialize.pickler import DillStatePickler, Refused, Segment, StatePickler, load_variables
from ..store.manifest import ArrayRecord

#: Largest variable rehearsed: its pickled bytes plus the bytes of the arrays it holds.
MAX_BYTES = 128 << 10

#: Most bytes rehearsed per checkpoint, smallest variables first. A rehearsal costs about what
#: the variable's digest costs, once more: about 0.4 ms per kB for a pickle of many small objects
#: (a list of dicts), far less for strings and small arrays; so a few tenths of a second at most.
MAX_TOTAL_BYTES = 512 << 10

#: What a rehearsed variable is named with at checkpoint (and the restore test repeats).
INEXACT = "will not come back exactly"

#: Kinds whose restore acts on this process (see the module's docstring), and their subclasses.
_TOUCHES_PROCESS = (io.IOBase, logging.Logger, logging.Handler, tarfile.TarFile, zipfile.ZipFile, *weakrefs.REDUCERS)
#: Classes whose making acts outside the object (``Popen(args)`` runs a program): never called by a rehearsal.
_ACTS_WHEN_MADE = (*_TOUCHES_PROCESS, subprocess.Popen, socket.socket, threading.Thread)
_TOUCHES_PROCESS_BY_NAME = frozenset({"matplotlib.figure.Figure", "dask._expr.SingletonExpr"})


@dataclass
class Rehearsal:
    """What the rehearsal found: the variables that will not come back exactly (and why), how
    many it rehearsed, and how long it took."""

    inexact: dict[str, str] = field(default_factory=dict)
    rehearsed: list[str] = field(default_factory=list)
    seconds: float = 0.0


#: Modules whose functions a rehearsal may call while loading: reconstructors that build objects.
_RECONSTRUCTORS = ("copyreg", "_codecs", "numpy", "torch", "dill", "jupyter_pause", "pandas", "pyarrow", "scipy")
#: Other functions a rehearsal may call: the import of a class's module (imported already: the
#: live value's class is in it). ``getattr`` goes through ``_looked_up``.
_CALLABLE = frozenset({importlib.import_module})


def _may_call(found: Any) -> bool:
    """Whether loading may call ``found`` here: a class (pickle makes its object), or a
    reconstructor from a module that only builds objects; no other function."""
    if isinstance(found, type):  # not one whose making acts: a process, a socket, an open file
        return not issubclass(found, _ACTS_WHEN_MADE)
    if found in _CALLABLE:
        return True
    if found in shared.ACTS_ON_PROCESS:  # it would load the copy's state into the live class
        return False
    module = getattr(found, "__module__", None) or ""
    return module.split(".", 1)[0] in _RECONSTRUCTORS


def _looked_up(obj: Any, name: str, *default: Any) -> Any:
    """``getattr`` for a rehearsal: pickle reaches a sentinel (``dataclasses.MISSING``) or a nested
    class through it, but also any function (``getattr(pathlib.Path, "write_text")``), which is refused."""
    found = getattr(obj, name, *default)
    if callable(found) and not _may_call(found):
        raise Refused(f"{getattr(obj, '__name__', type(obj).__name__)}.{name}")
    return found


def _guard(found: Any) -> Any:
    """What a rehearsal's load uses for a global its stream names (see ``load_variables``)."""
    if found is getattr:
        return _looked_up
    if not _may_call(found):
        raise Refused(f"{getattr(found, '__module__', '?')}.{getattr(found, '__qualname__', found)}")
    return found


class _NotRehearsed(Exception):
    """The variable reaches something a rehearsal must not restore in this process."""


def _touches_process(kind: type) -> bool:
    if issubclass(kind, _TOUCHES_PROCESS):
        return True
    return any(f"{c.__module__}.{c.__qualname__}" in _TOUCHES_PROCESS_BY_NAME for c in kind.__mro__)


class _Watching:
    """Pickles as the checkpoint does, refusing kinds a rehearsal must not restore here."""

    _touching: dict[type, bool]

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        touches = self._touching.get(kind)
        if touches is None:
            touches = self._touching[kind] = _touches_process(kind)
        if touches:
            raise _NotRehearsed(kind.__qualname__)
        return super().reducer_override(obj)  # type: ignore[misc]


class _Pickler(_Watching, StatePickler):
    def __init__(self, file: Any, collector: ArrayCollector) -> None:
        super().__init__(file, collector)
        self._touching = {}


class _DillPickler(_Watching, DillStatePickler):
    def __init__(self, file: Any, collector: ArrayCollector) -> None:
        super().__init__(file, collector)
        self._touching = {}


def worth_rehearsing(segment: Segment, array_bytes: int, max_bytes: int = MAX_BYTES) -> bool:
    """Small enough, and not mostly arrays: a rehearsal of it costs little and can tell something."""
    return len(segment.data) + array_bytes <= max_bytes and array_bytes <= len(segment.data)


def _loaded_copy(name: str, value: Any, pickler: str) -> tuple[Any, str | None]:
    """``value`` pickled alone and loaded back as a resume loads it: the copy, or why it did not load.

    Raises ``_NotRehearsed`` when it reaches a kind that must not be restored here, or when it
    cannot be pickled alone (the checkpoint saved it along with the others).
    """
    collector = ArrayCollector()
    buffer = io.BytesIO()
    try:
        (_DillPickler if pickler == "dill" else _Pickler)(buffer, collector).dump(value)
    except _NotRehearsed:
        raise
    except Exception as e:  # pickled with the others it worked: not a rehearsal's finding
        raise _NotRehearsed(str(e)) from e
    collector.gather()
    records = {
        key: ArrayRecord(f.kind, f.dtype, f.shape, f.device, key, 0, len(f.data), f.order)
        for key, f in collector.found.items()
    }
    # Copies: a copy made on the live bytes could write them back through a __setstate__.
    blobs = {key: bytearray(f.data) for key, f in collector.found.items()}
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    segments = [(name, pickler, buffer.getvalue())]
    loaded, failed = load_variables(segments, ArrayLoader(records, blobs, map_location="cpu"), namespace, _guard)
    if name in failed:
        if failed[name].startswith(f"{Refused.__name__}:"):
            raise _NotRehearsed(failed[name])
        return None, failed[name]
    return loaded[name], None


def _parts(value: Any) -> dict[str, Any] | None:
    """The named parts of ``value`` a reason can point to: a dict's items, an object's attributes."""
    if isinstance(value, dict):
        return {repr(k): v for k, v in value.items()}
    attributes = getattr(value, "__dict__", None)
    return {f".{k}": v for k, v in attributes.items()} if isinstance(attributes, dict) else None


def _what_differs(value: Any, copy: Any, like: str) -> str:
    """Which attributes (or items) of the copy differ from the live value's, for the reason."""
    mine, theirs = _parts(value), _parts(copy)
    if mine is None or theirs is None:
        return ""
    names = [
        k
        for k in sorted(set(mine) | set(theirs))
        if k not in mine or k not in theirs or value_digest(mine[k], like=like) != value_digest(theirs[k], like=like)
    ]
    if not names:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f" (in {shown})"


def rehearse_one(name: str, value: Any, pickler: str, digest: str) -> str | None:
    """Why ``value`` will not come back exactly, or None when its copy matches ``digest``.

    Raises ``_NotRehearsed`` when it cannot be rehearsed here (see ``_loaded_copy``).
    """
    copy, failure = _loaded_copy(name, value, pickler)
    if failure is not None:
        return f"{INEXACT}: loading it back fails ({failure}); a resume will not restore it"
    try:
        again = value_digest(copy, like=digest)
    except ReferenceError as e:  # the copy holds a dead proxy: the live value's digest did not
        raise _NotRehearsed(str(e)) from e
    if again is None or again == digest:
        return None
    return (
        f"{INEXACT}: loaded back as a resume loads it, it differs{_what_differs(value, copy, digest)}; "
        "its pickling does not rebuild all of its state: check it after resume, or build it again"
    )


def rehearse(
    values: dict[str, Any],
    segments: dict[str, Segment],
    digests: dict[str, str | None],
    array_bytes: dict[str, int],
    max_bytes: int = MAX_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> Rehearsal:
    """Rehearse the restore of every small saved variable that has a digest.

    Parameters
    ----------
    values
        The live variables, by name.
    segments
        Their segments as the checkpoint wrote them (size, and which pickler wrote each).
    digests
        Their value digests as the checkpoint recorded them.
    array_bytes
        Bytes of the arrays and tensor storages each variable holds out of band.
    max_bytes, max_total_bytes
        The largest variable rehearsed, and the most bytes rehearsed in all (smallest first).
    """
    started = time.perf_counter()
    result = Rehearsal()
    sizes = {name: len(s.data) + array_bytes.get(name, 0) for name, s in segments.items()}
    budget = max_total_bytes
    for name in sorted(segments, key=sizes.__getitem__):
        segment, digest = segments[name], digests.get(name)
        if digest is None or not worth_rehearsing(segment, array_bytes.get(name, 0), max_bytes):
            continue
        budget -= sizes[name]
        if budget < 0:
            break
        try:
            reason = rehearse_one(name, values[name], segment.pickler, digest)
        except _NotRehearsed:
            continue
        result.rehearsed.append(name)
        if reason is not None:
            result.inexact[name] = reason
    result.seconds = time.perf_counter() - started
    return result
