"""The seam between a checkpoint and the loops running inside the session's cells.

``session`` does not know loops: ``loops`` is the layer above it. When ``loops`` is imported it
plugs its positions in here (``plug``); a checkpoint asks them where the running loops are
(``capture``) and a restore hands them the checkpoint's records (``arm``).

No loop can run before ``loops`` is imported, so until then a checkpoint records none. What a
restore arms in the meantime is held here, as the checkpoint wrote it: a checkpoint taken before
the loops are plugged in keeps it, and the loops take it when they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Positions:
    """The running loops as a checkpoint records them."""

    records: list[dict[str, Any]] = field(default_factory=list)
    state: bytes | None = None  # the loops' own state, pickled (``None``: none to keep)
    notes: list[str] = field(default_factory=list)


class Loops(Protocol):
    """What the loop layer offers a checkpoint and a restore."""

    def capture(self) -> Positions: ...

    def arm(self, records: list[dict[str, Any]], state: bytes | bytearray | None) -> list[str]: ...


_plugged: Loops | None = None

#: Records a restore armed before the loops were plugged in: ``(records, state)``.
_held: tuple[list[dict[str, Any]], bytes | None] | None = None


def plug(loops: Loops) -> None:
    """Let ``loops`` answer for the running loops from now on; it takes what a restore armed."""
    global _plugged, _held
    _plugged = loops
    if _held is not None:
        records, state = _held
        _held = None
        loops.arm(records, state)


def capture() -> Positions:
    """Where the running loops are, for a checkpoint taken now."""
    if _plugged is not None:
        return _plugged.capture()
    if _held is None or not _held[0]:
        return Positions()
    records, state = _held
    waiting = [r["description"] for r in records if not r.get("finished")]
    notes = [f"loops held at {waiting[-1]}: run that cell again to continue there"] if waiting else []
    return Positions([dict(r) for r in records], state, notes)


def arm(records: list[dict[str, Any]], state: bytes | bytearray | None) -> list[str]:
    """Make the next pass of each checkpointed loop continue where it was; returns notes."""
    global _held
    if _plugged is not None:
        return _plugged.arm(records, state)
    _held = (list(records), None if state is None else bytes(state)) if records else None
    return armed_notes(records)


def armed_notes(records: list[dict[str, Any]]) -> list[str]:
    """What a restore says of the loop positions it armed."""
    waiting = [r for r in records if not r.get("finished")]
    return [f"loops were at {waiting[-1]['description']}: run that cell again to continue there"] if waiting else []
