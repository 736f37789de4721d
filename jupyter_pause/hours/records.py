"""Ledger records as the report reads them: checked, typed, and the malformed ones counted.

The ledger (``jupyter_pause.ledger``) hands over ``Event`` objects or plain dicts; either
becomes a ``Record``. A record the report cannot use (no ``event`` or ``at``, a wrong type, spans
that are not pairs of numbers) is skipped and counted, never an error. A kernel's event with no
session (a console's kernel, not a notebook's) is well formed but has no row: ``timeline`` passes
it over. So is a record whose event is none of ``vocabulary.LedgerEvent``: it is kept, to no effect.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from .. import ledger
from ..ledger.spans import Spans


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
    #: Busy ``(start, end)`` pairs; a roll-up's merged record keeps them packed (``Spans``), for
    #: the report's interval arithmetic to take whole.
    spans: tuple[tuple[float, float], ...] | Spans = field(default_factory=tuple)
    #: Why a kernel restarted (``kernel_restarted``): ``user``, or ``died`` (Jupyter brought it back).
    reason: str | None = None


def parse(raw: Any) -> Record | None:
    """The record in ``raw`` (a dict or an ``Event``), or None if it is malformed (the ledger's
    own check: ``Event.from_dict``; packed spans were checked when they were read, and are kept
    as they are)."""
    if isinstance(raw, ledger.Event):
        raw = raw.to_dict()
    try:
        event = ledger.Event.from_dict(raw)
    except ValueError:
        return None
    same = {name: getattr(event, name) for name in _SAME}
    reason = event.extra.get("reason")
    spans = event.spans
    return Record(
        **same,
        gpus=raw.get("gpus"),  # None: not recorded (the event's own default is 0)
        spans=spans if isinstance(spans, Spans) else tuple((a, b) for a, b in spans or ()),
        reason=reason if isinstance(reason, str) else None,
    )


#: The fields a ``Record`` takes from its event as they are.
_SAME = tuple(f.name for f in fields(Record) if f.name not in ("gpus", "spans", "reason"))


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
