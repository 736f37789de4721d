"""Ledger records as the report reads them: checked, typed, and the malformed ones counted.

The ledger (``jupyter_pause.store.ledger``) hands over ``Event`` objects or plain dicts; either
becomes a ``Record``. A record the report cannot use (no ``event`` or ``at``, a wrong type, spans
that are not pairs of numbers) is skipped and counted, never an error. A kernel's event with no
session (a console's kernel, not a notebook's) is well formed but has no row: ``timeline`` passes
it over.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

from ..store import ledger

#: Every event the ledger writes; a record with another event is kept but has no effect.
EVENTS = frozenset(ledger.EVENTS)


@dataclass(frozen=True)
class Record:
    """One ledger event, with the fields the report uses."""

    event: str
    at: float
    session: str | None = None
    user: str | None = None
    node: str | None = None
    server: str | None = None
    gpu_model: str | None = None
    gpus: int | None = None
    trigger: str | None = None
    checkpoint: str | None = None
    bytes: int | None = None
    bytes_total: int | None = None
    spans: tuple[tuple[float, float], ...] = field(default_factory=tuple)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _count(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def parse(raw: Any) -> Record | None:
    """The record in ``raw`` (a dict or an ``Event`` dataclass), or None if it is malformed."""
    if is_dataclass(raw) and not isinstance(raw, type):
        raw = asdict(raw)
    if not isinstance(raw, dict):
        return None
    event, at = raw.get("event"), raw.get("at")
    if not isinstance(event, str) or not _number(at):
        return None
    texts = ("session", "user", "node", "server", "gpu_model", "trigger", "checkpoint")
    if not all(_text(raw.get(name)) for name in texts):
        return None
    if not all(_count(raw.get(name)) for name in ("gpus", "bytes", "bytes_total")):
        return None
    spans = raw.get("spans") or ()
    if not isinstance(spans, list | tuple):
        return None
    pairs = []
    for span in spans:
        if not (isinstance(span, list | tuple) and len(span) == 2 and all(_number(x) for x in span)):
            return None
        if span[1] < span[0]:
            return None
        pairs.append((float(span[0]), float(span[1])))
    return Record(
        event=event,
        at=float(at),
        spans=tuple(pairs),
        **{name: raw.get(name) for name in (*texts, "gpus", "bytes", "bytes_total")},
    )


def parse_all(raws: Iterable[Any]) -> tuple[list[Record], int]:
    """The usable records in time order, and how many were malformed (skipped)."""
    records, malformed = [], 0
    for raw in raws:
        record = parse(raw)
        if record is None:
            malformed += 1
        else:
            records.append(record)
    records.sort(key=lambda r: r.at)
    return records, malformed
