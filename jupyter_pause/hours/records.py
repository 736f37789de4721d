"""Ledger records as the report reads them: checked, typed, and the malformed ones counted.

The ledger (``jupyter_pause.store.ledger``) hands over ``Event`` objects or plain dicts; either
becomes a ``Record``. A record the report cannot use (no ``event`` or ``at``, a wrong type, spans
that are not pairs of numbers) is skipped and counted, never an error. A kernel's event with no
session (a console's kernel, not a notebook's) is well formed but has no row: ``timeline`` passes
it over. So is a record whose event is none of ``vocabulary.LedgerEvent``: it is kept, to no effect.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from ..store import ledger


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
    #: Why a kernel restarted (``kernel_restarted``): ``user``, or ``died`` (Jupyter brought it back).
    reason: str | None = None


def parse(raw: Any) -> Record | None:
    """The record in ``raw`` (a dict or an ``Event``), or None if it is malformed (the ledger's
    own check: ``Event.from_dict``)."""
    if isinstance(raw, ledger.Event):
        raw = raw.to_dict()
    try:
        event = ledger.Event.from_dict(raw)
    except ValueError:
        return None
    same = {f.name: getattr(event, f.name) for f in fields(Record) if f.name not in ("gpus", "spans", "reason")}
    reason = event.extra.get("reason")
    return Record(
        **same,
        gpus=raw.get("gpus"),  # None: not recorded (the event's own default is 0)
        spans=tuple((a, b) for a, b in event.spans or ()),
        reason=reason if isinstance(reason, str) else None,
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
