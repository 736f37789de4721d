"""What an object that cannot be saved shows of its state, read at checkpoint time and again once a
resume rebuilt it by replay: the proof that the rebuild reached the same state, or that it did not.

Only what can be read cheaply and without acting: a hash object's ``hexdigest()`` of a copy, a
``tqdm`` bar's count, the position of a generator or a built-in iterator (the values of its
frame's plain locals, the index of each iterator under it), a file's name, mode and position, a
socket's peer, an SQLite connection's database files, a writer's log folder, the ``repr`` of an
``itertools.count`` or ``repeat`` (which shows their state). Nothing is called that could advance,
consume, flush or write. An object of any other kind is *not checkable*: it may be rebuilt right,
and nothing here can tell.

``check`` says ``checked``, ``not checkable`` or ``differs`` (with what was seen then and now).
"""

from __future__ import annotations

import io
import socket
import types
from typing import Any

#: The outcomes of ``check``, as the resume summary and the restore test say them.
CHECKED, NOT_CHECKABLE, DIFFERS = "rebuilt and checked", "rebuilt, not checkable", "rebuilt, differs"

#: How deep an iterator's state is followed (``map`` over ``zip`` over a list iterator ...).
MAX_DEPTH = 4

#: ``repr`` shows the state of these (``count(5)``), not an address.
_STATEFUL_REPR = frozenset({("itertools", "count"), ("itertools", "repeat")})


def observe(value: Any) -> str:
    """What ``value`` shows of its state, as text ("" when nothing can be read without acting)."""
    try:
        return _observe(value)
    except Exception:  # an object in an odd state (a closed connection): not checkable, never a failed checkpoint
        return ""


def _observe(value: Any) -> str:
    kind = type(value)
    module, name = getattr(kind, "__module__", "") or "", kind.__name__
    if callable(getattr(value, "hexdigest", None)) and callable(getattr(value, "copy", None)):
        return _digest(value)
    if module.split(".")[0] == "tqdm" and hasattr(value, "n"):
        return f"tqdm at {value.n} of {value.total}"
    if (module, name) in _STATEFUL_REPR:
        return repr(value)
    if isinstance(value, io.IOBase):
        return _file(value)
    if isinstance(value, socket.socket):
        return f"socket to {value.getpeername()!r}"
    if module.split(".")[0] in ("sqlite3", "_sqlite3") and name == "Connection":
        return _sqlite(value)
    if callable(getattr(kind, "get_logdir", None)):  # a TensorBoard SummaryWriter
        return f"writer to {value.get_logdir()}"
    if isinstance(value, types.GeneratorType) or module == "builtins":
        state = _position(value, 0)
        return f"{name} at {state}" if state else ""
    return ""


def _digest(value: Any) -> str:
    copy = value.copy()  # the digest of a copy: the object itself is not finished
    try:
        return f"hexdigest {copy.hexdigest()}"
    except TypeError:  # a SHAKE hash: its digest needs a length
        return f"hexdigest {copy.hexdigest(32)}"


def _file(value: io.IOBase) -> str:
    where = getattr(value, "name", None)
    if value.closed:
        return f"file {where!r} closed"
    return f"file {where!r} mode {getattr(value, 'mode', '?')} at {value.tell()}"


def _sqlite(value: Any) -> str:
    rows = value.execute("PRAGMA database_list").fetchall()  # reads the schema list: no transaction
    if any(not row[2] for row in rows):  # an in-memory database: its tables are its state, not read here
        return ""
    return "sqlite " + ", ".join(f"{row[1]}={row[2]}" for row in rows)


def _position(value: Any, depth: int) -> str:
    """A generator's or built-in iterator's position, as far as it can be read ("" when it cannot)."""
    if depth > MAX_DEPTH:
        return ""
    if isinstance(value, (bool, int, float, str, bytes, type(None))):
        return repr(value) if len(repr(value)) <= 80 else ""
    if isinstance(value, types.GeneratorType):
        frame = value.gi_frame
        if frame is None:
            return "end"
        if frame.f_lasti < 0:
            return "start"
        parts = [f"{k}={s}" for k, v in sorted(frame.f_locals.items()) if (s := _position(v, depth + 1))]
        # The offset, not the line: a replayed statement's lines are numbered from its own start.
        return f"offset {frame.f_lasti}" + (f" ({', '.join(parts)})" if parts else "")
    if type(value).__module__ != "builtins" or not callable(getattr(value, "__next__", None)):
        return ""
    reduced = value.__reduce__()  # built-in iterators say where they are without moving
    if not isinstance(reduced, tuple) or len(reduced) < 2:
        return ""
    args = reduced[1] if isinstance(reduced[1], tuple) else ()
    inner = [_position(a, depth + 1) for a in args if callable(getattr(a, "__next__", None))]
    index = reduced[2] if len(reduced) > 2 and isinstance(reduced[2], int) else None
    shown = ([f"index {index}"] if index is not None else []) + [s for s in inner if s]
    return f"{type(value).__name__}[{'; '.join(shown)}]" if shown else ""


def check(recorded: str, value: Any) -> tuple[str, str]:
    """Compare what ``value`` shows now with what was ``recorded`` at checkpoint time: the outcome
    (``CHECKED``, ``NOT_CHECKABLE`` or ``DIFFERS``) and, when it differs, what was seen then and now."""
    if not recorded:
        return NOT_CHECKABLE, ""
    now = observe(value)
    if now == recorded:
        return CHECKED, ""
    return DIFFERS, f"was {recorded}, now {now or 'unreadable'}"
