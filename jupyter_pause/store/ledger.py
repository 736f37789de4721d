"""The GPU-hours ledger: one small record per event (a kernel started, a pause, a resume, ...).

Append-only: every event is its own object under ``ledger/<day>/`` (see ``layout``), never a
rewrite of a shared file, so any number of servers, kernels and Hub services write at once and
lose nothing. Writing never fails a pause or a resume: a store error is logged with the count of
events lost so far. Reading skips, and counts, records that are not events.
"""

from __future__ import annotations

import getpass
import json
import logging
import math
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .layout import LEDGER, ledger_key, ledger_of, ledger_prefix
from .storage import Store

log = logging.getLogger("jupyter_pause.ledger")

#: Version of the record format.
VERSION = 1

#: The events, in the order a pause/resume cycle meets them (see the contract in the README).
EVENTS = (
    "server_started",
    "kernel_started",
    "activity",
    "pause_requested",
    "checkpoint_committed",
    "kernel_stopped",
    "server_stopped",
    "resume_requested",
    "resources_available",
    "kernel_ready",
    "next_cell_run",
)

#: What asked for a pause (or stopped a kernel or server).
TRIGGERS = ("button", "idle", "sigterm", "spot", "release", "service", "periodic", "manual")

_lost = 0
_lost_lock = threading.Lock()


@dataclass
class Event:
    """One ledger record; ``spans`` only on ``activity`` events (busy ``[start, end]`` pairs)."""

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
    spans: list[list[float]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The record as written: ``{"v": 1, ...}``; ``spans`` only when present, extras merged."""
        body = {k: v for k, v in asdict(self).items() if k != "extra"}
        if body["spans"] is None:
            del body["spans"]
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
        if spans is not None and not _spans_ok(spans):
            raise ValueError('"spans" is not a list of [start, end] times')
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
            spans=[[float(a), float(b)] for a, b in spans] if spans is not None else None,
            extra={k: v for k, v in data.items() if k not in known},
        )


def _spans_ok(spans: Any) -> bool:
    if not isinstance(spans, list):
        return False
    for span in spans:
        if not isinstance(span, list) or len(span) != 2:
            return False
        if any(isinstance(t, bool) or not isinstance(t, (int, float)) for t in span) or span[0] > span[1]:
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


def make(event: str, node: str | None = None, at: float | None = None, **fields: Any) -> Event:
    """An event happening now (or ``at``) here: the user and node filled in when not given."""
    fields.setdefault("user", current_user())
    return Event(event=event, at=time.time() if at is None else at, node=node or socket.gethostname(), **fields)


def lost() -> int:
    """Events this process could not write since it started."""
    return _lost


def write(store: Store | None, event: Event) -> str | None:
    """Append ``event`` to the ledger; its key, or None when it could not be written.

    Never raises: the ledger must not fail the pause or resume it records. A failure is logged
    with the number of events this process has lost so far. ``store`` None writes nothing.
    """
    global _lost
    if store is None:
        return None
    try:
        key = ledger_key(event.at)
        store.write(key, json.dumps(event.to_dict(), separators=(",", ":")).encode())
        return key
    except Exception as e:  # any failure of the store or of the record: counted and logged, never raised
        with _lost_lock:
            _lost += 1
            count = _lost
        log.warning("jupyter-pause ledger: %s event lost (%d lost so far): %s", event.event, count, e)
        return None


def _days(since: float, until: float) -> list[str]:
    """Prefixes of the UTC days from ``since`` to ``until``."""
    prefixes, day = [], since - since % 86400
    while day <= until:
        prefixes.append(ledger_prefix(day))
        day += 86400
    return prefixes


def read(store: Store, since: float | None = None, until: float | None = None) -> tuple[list[Event], int]:
    """Events from ``since`` to ``until`` (epoch seconds; None: no bound), oldest first, and how many
    records were skipped as malformed (not JSON, not an event, or unreadable).

    With ``since`` only the day folders it needs are listed.
    """
    if since is None:
        keys = [k for k in store.list(LEDGER) if ledger_of(k)]
    else:
        last = until if until is not None else time.time() + 86400
        keys = [k for p in _days(since, last) for k in store.list(p) if ledger_of(k)]
    events: list[tuple[float, str, Event]] = []
    malformed = 0
    for key, data in store.read_many(keys).items():
        try:
            if isinstance(data, BaseException):
                raise ValueError(str(data))
            event = Event.from_dict(json.loads(bytes(data)))
        except (ValueError, TypeError, UnicodeDecodeError) as e:
            malformed += 1
            log.debug("jupyter-pause ledger: %s skipped: %s", key, e)
            continue
        if (since is None or event.at >= since) and (until is None or event.at <= until):
            events.append((event.at, key, event))
    events.sort(key=lambda item: (item[0], item[1]))
    return [e for _, _, e in events], malformed
