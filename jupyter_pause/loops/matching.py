"""Which checkpointed position a ``steps`` loop starting now takes, and what it says about it.

A loop takes the armed position of its identity (``identity``: its name, or its cell's ``steps``
calls). Nothing is matched silently while the checkpoint holds an unfinished loop:

- the cell was edited outside its ``steps`` calls: it continues, and says so once, with where
  (``the cell changed outside its loops since the checkpoint: continuing at epoch 1, step 32``);
- a named loop whose own call changed (another iterable, another depth): it continues, since its
  name matches, and says what changed;
- no position matches while unfinished ones wait: the loop starts from its first item and says
  which of the cell's loops changed and how (``identity.differences``), or, when the waiting
  loops cannot be compared, that they wait (``positions.unmatched``).

Each of these is said once for the positions a resume (or a pause) armed.
"""

from __future__ import annotations

import sys

from . import positions
from .identity import Call, Found, differences
from .positions import Armed

__all__ = ["take"]


def take(found: Found, identity: str, label: str, depth: int) -> Armed | None:
    """The armed position the loop ``identity`` (located as ``found``) continues from, or None."""
    armed = positions.take_armed(identity)
    if armed is None and identity == found.identity != found.legacy:
        armed = positions.take_armed(found.legacy)  # a checkpoint of an earlier version
    if armed is None:
        _starts_over(found, label)
        return None
    record = armed.record or {}
    calls = _calls_of(record)
    if calls is not None and found.index is not None and identity != found.identity:
        _named_changed(record, calls, found, label, depth)
    if "edited" not in armed.told and calls == found.calls and record.get("cell") not in (None, found.cell):
        _mark_told(record)
        print(f"jupyter-pause: the cell changed outside its loops since the checkpoint: continuing at {_at(armed)}")
    return armed


def _named_changed(record: dict, calls: tuple[Call, ...], found: Found, label: str, depth: int) -> None:
    """Say what changed in a named loop's own ``steps`` call; it continues all the same."""
    index = record.get("index")
    was = calls[index] if isinstance(index, int) and 0 <= index < len(calls) else None
    now = found.calls[found.index]  # type: ignore[index]
    changes = []
    if was is not None and was.iterable != now.iterable:
        changes.append(f"looped over `{was.iterable}` when checkpointed and over `{now.iterable}` now")
    if record.get("depth", depth) != depth:
        changes.append(f"ran inside {record['depth']} loop(s) when checkpointed and inside {depth} now")
    if changes:
        print(
            f"jupyter-pause: loop {label!r} {' and '.join(changes)}; its name matches, so it continues where the "
            "checkpoint left it",
            file=sys.stderr,
        )


def _starts_over(found: Found, label: str) -> None:
    """A loop that matches no armed position starts from its first item: while unfinished loops of
    the checkpoint wait, say which loop of the cell changed and how."""
    waiting = [a for a in positions.waiting() if not a.finished and "over" not in a.told]
    theirs = next((a for a in waiting if _calls_of(a.record or {}) is not None), None)
    if theirs is None or found.index is None:
        if waiting:
            positions.unmatched(label)
        return
    changed = differences(_calls_of(theirs.record), found.calls)  # type: ignore[arg-type]
    if not changed:
        positions.unmatched(label)
        return
    for armed in positions.waiting():
        armed.told.add("over")
    print(
        f"jupyter-pause: loop {label!r} starts from its first item: the checkpoint's unfinished loops (at "
        f"{_at(theirs)}) ran in a cell whose steps calls differ from this one's: {'; '.join(changed)}. A loop "
        "without a name starts over when its cell's steps calls change; to keep a loop's place across such an "
        "edit, give it a name (jp.steps(..., name='epochs'))",
        file=sys.stderr,
    )


def _calls_of(record: dict) -> tuple[Call, ...] | None:
    """The cell's calls a position was recorded with (None: a checkpoint of an earlier version)."""
    calls = record.get("calls")
    if not isinstance(calls, list):
        return None
    try:
        return tuple(Call.of(c) for c in calls)
    except (TypeError, ValueError):
        return None


def _mark_told(record: dict) -> None:
    """The positions armed from the cell of ``record`` are said no more about."""
    for armed in positions.waiting():
        if (armed.record or {}).get("cell") == record.get("cell"):
            armed.told.add("edited")


def _at(armed: Armed) -> str:
    """``epoch 1, step 32``: where the unfinished loops of ``armed``'s cell were, outermost first."""
    cell = (armed.record or {}).get("cell")
    same = [armed, *(a for a in positions.waiting() if a is not armed and (a.record or {}).get("cell") == cell)]
    loops = sorted((a for a in same if not a.finished), key=lambda a: (a.record or {}).get("depth", 0))
    return ", ".join(str((a.record or {}).get("at") or a.description) for a in loops) or armed.description
