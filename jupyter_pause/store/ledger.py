"""The GPU-hours ledger: one small record per event (a kernel started, a pause, a resume, ...).

Append-only: every event is its own object under ``ledger/<day>/`` (see ``layout``), never a
rewrite of a shared file, so any number of servers, kernels and Hub services write at once and
lose nothing. Writing never fails a pause or a resume: a store error is logged with the count of
events lost so far. Reading skips, and counts, records that are not events.

Anyone with the store's credentials can write records, so a ledger can be forged. Where this
process has a signing key (``sign_with``: the server and its kernels use their configured key),
every record carries ``sig``, an HMAC over the rest of it; ``trust`` tells a reader holding the
keys which records are verified, unsigned, or carry a signature that does not match.
"""

from __future__ import annotations

import calendar
import getpass
import hmac
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import StoreError
from ..vocabulary import LedgerEvent
from . import rollup, signing
from .layout import LEDGER, ledger_key, ledger_of, ledger_prefix
from .storage import Store

log = logging.getLogger("jupyter_pause.ledger")

#: Version of the record format.
VERSION = 1

#: Set in the environment of kernels a jupyter-pause server starts: the server records their
#: lives and cells, so the kernel must not record them again.
SERVER_RECORDS = "JUPYTER_PAUSE_SERVER_LEDGER"

#: Rank of each event in a pause/resume cycle (``vocabulary.LedgerEvent``'s order, the README's contract).
_RANK = {event: rank for rank, event in enumerate(LedgerEvent)}

_lost = 0
_lost_lock = threading.Lock()

#: The field of a record that holds its signature.
SIGNATURE = "sig"

#: The keys for an event's record, given the event (see ``sign_with``).
Signer = Callable[["Event"], signing.Keys]

_signer: Signer | None = None


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
    """An event happening now (or ``at``) here: the user and node filled in when not given."""
    fields.setdefault("user", current_user())
    return Event(event=event, at=time.time() if at is None else at, node=node or socket.gethostname(), **fields)


def sign_with(keys: signing.Keys | Signer) -> None:
    """Sign every record this process writes from now on: with ``keys``, or with the keys a
    callable gives for each event (the Hub service: each user's own); None stops signing."""
    global _signer
    if callable(keys):
        _signer = keys
        return
    ring = signing.keyring(keys)
    _signer = None if ring is None else (lambda _event: ring)


def _canonical(record: dict[str, Any]) -> bytes:
    body = {k: v for k, v in record.items() if k != SIGNATURE}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode(event: Event) -> bytes:
    """The bytes of ``event``'s record, signed when this process signs (``sign_with``)."""
    record = event.to_dict()
    record.pop(SIGNATURE, None)
    keys = _signer(event) if _signer is not None else None
    if keys:
        record[SIGNATURE] = signing.sign(_canonical(record), keys)
    return json.dumps(record, separators=(",", ":")).encode()


#: What ``trust`` says of a record.
VERIFIED, UNSIGNED, BAD_SIGNATURE = "verified", "unsigned", "bad signature"


def trust(event: Event, keys: signing.Keys) -> str:
    """Whether ``event``'s record was signed by one of ``keys``: ``VERIFIED``, ``UNSIGNED`` (no
    signature: anyone with the store's credentials could have written it) or ``BAD_SIGNATURE``
    (another key's, or changed after signing)."""
    signature = event.extra.get(SIGNATURE)
    if not isinstance(signature, dict):
        return UNSIGNED
    ring = signing.keyring(keys)
    key = ring.matching(signature.get("key_id")) if ring is not None else None
    if key is None:
        return BAD_SIGNATURE
    expected = signing.sign(_canonical(event.to_dict()), key)["value"]
    return VERIFIED if hmac.compare_digest(expected, str(signature.get("value", ""))) else BAD_SIGNATURE


def lost() -> int:
    """Events this process could not write since it started."""
    return _lost


def write(store: Store | None, event: Event, tag: str | None = None) -> str | None:
    """Append ``event`` to the ledger; its key, or None when it could not be written.

    Never raises: the ledger must not fail the pause or resume it records. A failure is logged
    with the number of events this process has lost so far. ``store`` None writes nothing.
    ``tag`` (8 hex digits) makes the key a function of the event, so writing the same event
    twice keeps one record; by default it is random.
    """
    global _lost
    if store is None:
        return None
    try:
        key = ledger_key(event.at, tag)
        store.write(key, encode(event))
        return key
    except Exception as e:  # any failure of the store or of the record: counted and logged, never raised
        with _lost_lock:
            _lost += 1
            count = _lost
        log.warning("jupyter-pause ledger: %s event lost (%d lost so far): %s", event.event, count, e)
        return None


def write_many(store: Store | None, events: list[Event]) -> list[str]:
    """Append several events at once (in parallel); the keys written. Never raises, as ``write``."""
    global _lost
    if store is None or not events:
        return []
    items: dict[str, bytes | bytearray | memoryview] = {}
    try:
        for event in events:
            items[ledger_key(event.at)] = encode(event)
        store.write_many(items)
        return list(items)
    except Exception as e:  # as in write: counted and logged, never raised
        with _lost_lock:
            _lost += len(events)
            count = _lost
        names = ", ".join(e.event for e in events)
        log.warning("jupyter-pause ledger: %s events lost (%d lost so far): %s", names, count, e)
        return []


def _days(since: float, until: float) -> list[str]:
    """Prefixes of the UTC days from ``since`` to ``until``."""
    prefixes, day = [], since - since % 86400
    while day <= until:
        prefixes.append(ledger_prefix(day))
        day += 86400
    return prefixes


def _keys(store: Store, since: float | None, until: float | None) -> list[str]:
    """Keys of the ledger's events; with ``since``, only from the day folders it needs."""
    if since is None:
        return [k for k in store.list(LEDGER) if ledger_of(k)]
    last = until if until is not None else time.time() + 86400
    return [k for p in _days(since, last) for k in store.list(p) if ledger_of(k)]


def _parse(key: str, data: Any) -> Event | None:
    """The event in a record's bytes, or None (logged) when it is malformed or unreadable."""
    try:
        if isinstance(data, BaseException):
            raise ValueError(str(data))
        return Event.from_dict(json.loads(bytes(data)))
    except (ValueError, TypeError, UnicodeDecodeError) as e:
        log.debug("jupyter-pause ledger: %s skipped: %s", key, e)
        return None


def _event(key: str, record: Any) -> Event | None:
    """The event of a record already parsed from JSON (a roll-up's), or None (logged) when it is not one."""
    try:
        return Event.from_dict(record)
    except (ValueError, TypeError) as e:
        log.debug("jupyter-pause ledger: a record of %s skipped: %s", key, e)
        return None


def _order(item: tuple[str, Event]) -> tuple[float, int, str]:
    """Oldest first; events at the same instant in cycle order (a kernel's last activity before its stop)."""
    key, event = item
    return event.at, _RANK.get(event.event, len(_RANK)), key


def read(store: Store, since: float | None = None, until: float | None = None) -> tuple[list[Event], int]:
    """Events from ``since`` to ``until`` (epoch seconds; None: no bound), oldest first, and how many
    records were skipped as malformed (not JSON, not an event, or unreadable).

    With ``since`` only the day folders it needs are listed.
    """
    return Cache(store).read(since, until)


#: Seconds after a UTC day ends from which a ``Cache`` lists its folder no more (events are written
#: as they happen, give or take a resume's moments written at its end), and reads its roll-up.
SETTLED = 86400.0


def _day_end(prefix: str) -> float:
    return calendar.timegm(time.strptime(prefix[len(LEDGER) : -1], "%Y%m%d")) + 86400


class Cache:
    """Reads the ledger again and again (a panel polling it): a record is read once, since no
    record ever changes; each ``read`` lists the recent day folders (a day over ``SETTLED`` ago
    is listed once) and reads only the new keys.

    With ``rollups`` (and a ``since``), a settled day is read from its roll-up (``rollup``), one
    object, written from the day's events by the first reader that needs it; ``notes`` says
    which roll-ups were found damaged or outdated, and rebuilt. A reader that checks the events'
    signatures passes ``rollups=False``: a roll-up's merged records carry none.
    """

    def __init__(self, store: Store, rollups: bool = True) -> None:
        self.store = store
        self.rollups = rollups
        self.seen: dict[str, Event | None] = {}
        self.listed: dict[str, list[str]] = {}
        self.days: dict[str, tuple[list[Event], int]] = {}
        self.notes: list[str] = []
        self.lock = threading.Lock()

    def _keys(self, since: float | None, until: float | None) -> list[str]:
        if since is None:
            return _keys(self.store, None, until)
        keys, now = [], time.time()
        last = until if until is not None else now + 86400
        for prefix in _days(since, last):
            if prefix not in self.listed:
                found = [k for k in self.store.list(prefix) if ledger_of(k)]
                if _day_end(prefix) + SETTLED > now:
                    keys += found
                    continue
                self.listed[prefix] = found
            keys += self.listed[prefix]
        return keys

    def read(self, since: float | None = None, until: float | None = None) -> tuple[list[Event], int]:
        """As the module's ``read``; records older than ``since``'s day are forgotten."""
        with self.lock:
            return self._read(since, until)

    def _read(self, since: float | None, until: float | None) -> tuple[list[Event], int]:
        if since is None or not self.rollups:
            return self._read_raw(self._keys(since, until), since, until)
        now = time.time()
        rolled: list[Event] = []
        skipped = 0
        recent: list[str] = []
        for prefix in _days(since, until if until is not None else now + 86400):
            if _day_end(prefix) + SETTLED > now:
                recent += [k for k in self.store.list(prefix) if ledger_of(k)]
                continue
            if prefix not in self.days:
                self.days[prefix] = self._day(prefix)
            events, bad = self.days[prefix]
            rolled += events
            skipped += bad
        self.days = {p: v for p, v in self.days.items() if _day_end(p) >= since}
        raw, malformed = self._read_raw(recent, since, until)
        kept = [e for e in rolled if e.at >= since and (until is None or e.at <= until)]
        merged = kept + raw
        merged.sort(key=lambda e: (e.at, _RANK.get(e.event, len(_RANK))))
        return merged, malformed + skipped

    def _day(self, prefix: str) -> tuple[list[Event], int]:
        """A settled day's events as its roll-up holds them; the roll-up written first when it
        is missing, rewritten when it is damaged or outdated (and ``notes`` says so)."""
        day = rollup.day_of(prefix)
        try:
            found: Any = self.store.read(rollup.key(day))
        except FileNotFoundError:
            found = None
        except StoreError as e:
            log.debug("jupyter-pause ledger: roll-up of %s unreadable: %s", day, e)
            found = None
        why = ""
        if found is not None:
            got = rollup.decode(found, day)
            if isinstance(got, rollup.Rollup):
                events = [e for r in got.records if (e := _event(rollup.key(day), r)) is not None]
                return events, got.malformed
            why = got
        keys = [k for k in self.store.list(prefix) if ledger_of(k)]
        raw = self.store.read_many(keys)
        parsed = [(k, _parse(k, raw[k])) for k in keys]
        good = sorted(((k, e) for k, e in parsed if e is not None), key=_order)
        malformed = len(parsed) - len(good)
        records = rollup.summarise(e.to_dict() for _, e in good)
        data = rollup.encode(day, records, len(keys), malformed)
        try:
            if why:
                self.store.write(rollup.key(day), data)
                self.notes.append(f"the roll-up of {day} was not used ({why}); rebuilt from its {len(keys)} events")
            else:
                self.store.create(rollup.key(day), data)  # a reader at the same time may have written it first
        except StoreError as e:  # a read-only reader still reports, from the raw events
            log.debug("jupyter-pause ledger: roll-up of %s not written: %s", day, e)
        return [Event.from_dict(r) for r in records], malformed

    def _read_raw(self, keys: list[str], since: float | None, until: float | None) -> tuple[list[Event], int]:
        new = [k for k in keys if k not in self.seen]
        unread = 0
        for key, data in self.store.read_many(new).items():
            if isinstance(data, BaseException):  # not cached: the next read tries it again
                unread += 1
                log.debug("jupyter-pause ledger: %s unreadable: %s", key, data)
            else:
                self.seen[key] = _parse(key, data)
        self.seen = {k: self.seen[k] for k in keys if k in self.seen}
        found = [(k, e) for k, e in self.seen.items() if e is not None]
        malformed = len(self.seen) - len(found) + unread
        kept = [(k, e) for k, e in found if (since is None or e.at >= since) and (until is None or e.at <= until)]
        return [e for _, e in sorted(kept, key=_order)], malformed
