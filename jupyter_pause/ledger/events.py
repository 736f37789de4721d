"""What a ledger record is: one event (a kernel started, a pause, a resume, ...), who it is about,
where it happened, and its unique id; read back with each field checked."""

from __future__ import annotations

import getpass
import math
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from ..vocabulary import LedgerEvent
from .spans import Spans

#: Version of the record format.
VERSION = 1


#: Set in the environment of kernels a jupyter-pause server starts: the server records their
#: lives and cells, so the kernel must not record them again.
SERVER_RECORDS = "JUPYTER_PAUSE_SERVER_LEDGER"


#: Rank of each event in a pause/resume cycle (``vocabulary.LedgerEvent``'s order, the README's contract).
RANK = {event: rank for rank, event in enumerate(LedgerEvent)}


#: The field of a record that holds its signature.
SIGNATURE = "sig"


#: The field of a record that holds its unique id (records without one are older).
ID = "id"


@dataclass
class Event:
    """One ledger record; ``spans`` only on ``activity`` events (busy ``[start, end]`` pairs: a
    roll-up's merged record holds them packed, ``spans.Spans``)."""

    event: str
    at: float
    session: str | None = None
    user: str | None = None
    node: str | None = None
    server: str | None = None
    gpu_model: str | None = None
    gpus: int = 0
    trigger: str | None = None
    checkpoint: str | None = None
    bytes: int | None = None
    bytes_total: int | None = None
    spans: list[list[float]] | Spans | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The record as written: ``{"v": 1, ...}``; ``spans`` only when present, extras merged.

        The spans are copied (a list of new pairs; packed ones, which cannot change, are not),
        the extras' values are not: ``asdict``'s deep copy was most of the time of a report built
        from roll-ups, whose merged records hold hundreds of spans each.
        """
        body = {name: getattr(self, name) for name in _FIELDS}
        if self.spans is None:
            del body["spans"]
        elif not isinstance(self.spans, Spans):
            body["spans"] = [[a, b] for a, b in self.spans]
        return {"v": VERSION, **self.extra, **body}

    @classmethod
    def from_dict(cls, data: Any) -> Event:
        """An event from a record; ``ValueError`` naming the field when it is not one."""
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        if not isinstance(data.get("event"), str):
            raise ValueError('no "event" name')
        at = data.get("at")
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
            raise ValueError('no "at" time')
        for name in ("session", "user", "node", "server", "gpu_model", "trigger", "checkpoint"):
            if data.get(name) is not None and not isinstance(data[name], str):
                raise ValueError(f'"{name}" is a {type(data[name]).__name__}, not a string')
        for name in ("gpus", "bytes", "bytes_total"):
            value = data.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f'"{name}" is {value!r}, not a count')
        spans = data.get("spans")
        if isinstance(spans, Spans):
            pass  # checked when it was made, and it cannot change
        elif spans is not None and not _spans_ok(spans):
            raise ValueError('"spans" is not a list of [start, end] times')
        else:
            spans = [[float(a), float(b)] for a, b in spans] if spans is not None else None
        known = {"v", "event", "at", "session", "user", "node", "server", "gpu_model", "gpus"}
        known |= {"trigger", "checkpoint", "bytes", "bytes_total", "spans"}
        return cls(
            event=data["event"],
            at=float(at),
            session=data.get("session"),
            user=data.get("user"),
            node=data.get("node"),
            server=data.get("server"),
            gpu_model=data.get("gpu_model"),
            gpus=data.get("gpus") or 0,
            trigger=data.get("trigger"),
            checkpoint=data.get("checkpoint"),
            bytes=data.get("bytes"),
            bytes_total=data.get("bytes_total"),
            spans=spans,
            extra={k: v for k, v in data.items() if k not in known},
        )


#: The fields of an event's record, in ``Event``'s order (``extra`` is merged in, not a field).
_FIELDS = tuple(f.name for f in fields(Event) if f.name != "extra")


def _spans_ok(spans: Any) -> bool:
    """Whether ``spans`` is a list of ``[start, end]`` finite times, start <= end (a raw record's;
    a roll-up's merged records hold theirs packed, checked when decoded)."""
    if not isinstance(spans, list):
        return False
    for span in spans:
        if not isinstance(span, list) or len(span) != 2:
            return False
        if any(isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) for t in span):
            return False
        if span[0] > span[1]:
            return False
    return True


def current_user() -> str | None:
    """Who the events are about: ``JUPYTERHUB_USER`` on a Hub, else the OS user (None if unknown)."""
    hub_user = os.environ.get("JUPYTERHUB_USER")
    if hub_user:
        return hub_user
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def server_label() -> str | None:
    """This single-user server as the Hub names it (``user`` or ``user/name``); None off a Hub."""
    user = os.environ.get("JUPYTERHUB_USER")
    if not user:
        return None
    name = os.environ.get("JUPYTERHUB_SERVER_NAME")
    return f"{user}/{name}" if name else user


def make(event: str, node: str | None = None, at: float | None = None, **fields: Any) -> Event:
    """An event happening now (or ``at``) here: the user and node filled in when not given, and
    a unique ``id`` (a copy of its record, under any name, counts once)."""
    fields.setdefault("user", current_user())
    made = Event(event=event, at=time.time() if at is None else at, node=node or socket.gethostname(), **fields)
    made.extra.setdefault(ID, secrets.token_hex(8))
    return made


#: Resume moments written as events, in order (the run report's names).
RESUME_MOMENTS = (LedgerEvent.RESUME_REQUESTED, LedgerEvent.RESOURCES_AVAILABLE, LedgerEvent.KERNEL_READY)


def resume_events(report: Any, event: Callable[..., Event]) -> list[Event]:
    """The events of a finished resume, from its run report (``store.report.RunReport``): each
    known moment of ``RESUME_MOMENTS`` (``kernel_ready`` with the bytes restored), then
    ``next_cell_run`` with the verdict once the restore test passed. ``event(name, session,
    at=..., **fields)`` makes each, with its writer's node, server and GPUs."""
    moments = report.moments or {}
    events = []
    for name in RESUME_MOMENTS:
        if moments.get(name) is not None:
            extra = {"bytes": report.bytes} if name == LedgerEvent.KERNEL_READY else {}
            events.append(event(name, report.session, at=moments[name], checkpoint=report.checkpoint, **extra))
    if moments.get("verified") is not None:
        done = event(LedgerEvent.NEXT_CELL_RUN, report.session, at=moments["verified"], checkpoint=report.checkpoint)
        done.extra["verdict"] = report.verdict
        events.append(done)
    return events
