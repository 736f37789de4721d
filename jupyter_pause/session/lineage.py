"""This process's place in a session's history: which lineage it continues, from which checkpoint.

A kernel that resumed checkpoint C, or took checkpoint C, continues C's lineage with C as parent.
A kernel that did neither starts a new lineage, even under a session name already in use, so it
never silently replaces another notebook's history.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass


@dataclass
class Position:
    """The lineage a new checkpoint belongs to, and its parent checkpoint (None for the first)."""

    lineage: str
    parent: str | None
    new: bool


_positions: dict[tuple[str, str], tuple[str, str]] = {}


def position(store_url: str, session: str) -> Position:
    """Where the next checkpoint of ``session`` in ``store_url`` goes."""
    known = _positions.get((store_url, session))
    if known is None:
        return Position(secrets.token_hex(4), None, True)
    lineage, parent = known
    return Position(lineage, parent, False)


def advance(store_url: str, session: str, lineage: str, checkpoint_id: str) -> None:
    """Record that this process now stands at ``checkpoint_id`` of ``lineage``."""
    _positions[(store_url, session)] = (lineage, checkpoint_id)


def forget() -> None:
    """Forget every position (a test helper, and what a new process starts with)."""
    _positions.clear()
