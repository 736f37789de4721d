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
import json
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import StoreError
from ..vocabulary import LedgerEvent
from . import rollup, signing
from .layout import LEDGER, ledger_key, ledger_of, ledger_prefix
from .spans import Spans, json_default
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
#: The field of a record that holds its unique id (records without one are older).
ID = "id"

#: The keys for an event's record, given the event (see ``sign_with``).
Signer = Callable[["Event"], signing.Keys]

_signer: Signer | None = None


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


def sign_with(keys: signing.Keys | Signer) -> None:
    """Sign every record this process writes from now on: with ``keys``, or with the keys a
    callable gives for each event (the Hub service: each user's own); None stops signing."""
    global _signer
    if callable(keys):
        _signer = keys
        return
    ring = signing.keyring(keys)
    _signer = None if ring is None else (lambda _event: ring)


def _place(record: dict[str, Any]) -> dict[str, str | None]:
    """Where a ledger record belongs, as its seal covers it: the user it counts for and its UTC day."""
    at = record.get("at")
    day = time.strftime("%Y%m%d", time.gmtime(at)) if isinstance(at, (int, float)) and math.isfinite(at) else None
    user = record.get("user")
    return {"user": user if isinstance(user, str) else None, "day": day}


def _canonical(record: dict[str, Any]) -> bytes:
    """The bytes a record's signature covers: the rest of it as sorted, compact JSON (packed spans
    as their string, as a roll-up holds them)."""
    body = {k: v for k, v in record.items() if k != SIGNATURE}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=json_default).encode()


def encode(event: Event) -> bytes:
    """The bytes of ``event``'s record, signed when this process signs (``sign_with``)."""
    event.extra.setdefault(ID, secrets.token_hex(8))  # written again, the same event keeps its id
    record = event.to_dict()
    record.pop(SIGNATURE, None)
    keys = _signer(event) if _signer is not None else None
    if keys:
        record[SIGNATURE] = signing.seal(_canonical(record), signing.LEDGER, _place(record), keys)
    return json.dumps(record, separators=(",", ":")).encode()


#: What ``trust`` says of a record.
VERIFIED, UNSIGNED, BAD_SIGNATURE = "verified", "unsigned", "bad signature"
VERDICTS = (VERIFIED, UNSIGNED, BAD_SIGNATURE)
#: Records a reader refuses besides: naming a user other than the one whose prefix holds them,
#: and a copy of a record already counted (the same ``id``).
FOREIGN, REPLAYED = "foreign", "replayed"


def unreplayed(events: list[Event]) -> tuple[list[Event], int]:
    """``events`` with each record counted once: a later one with the ``id`` of an earlier one
    (a copy under another name or day) is left out; and how many were."""
    seen: set[str] = set()
    kept: list[Event] = []
    for event in events:
        record_id = event.extra.get(ID)
        if isinstance(record_id, str):
            if record_id in seen:
                continue
            seen.add(record_id)
        kept.append(event)
    return kept, len(events) - len(kept)


def trust(event: Event, keys: signing.Keys) -> str:
    """Whether ``event``'s record was signed by one of ``keys``: ``VERIFIED``, ``UNSIGNED`` (no
    signature: anyone with the store's credentials could have written it) or ``BAD_SIGNATURE``
    (another key's, or changed after signing)."""
    return _verdict(event, keys)[0]


def _verdict(event: Event, keys: signing.Keys) -> tuple[str, str | None]:
    """``trust``'s verdict, and the key of ``keys`` that verified the record (None unless verified)."""
    signature = event.extra.get(SIGNATURE)
    if not isinstance(signature, dict):
        return UNSIGNED, None
    ring = signing.keyring(keys)
    key = ring.matching(signature.get("key_id")) if ring is not None else None
    if key is None:
        return BAD_SIGNATURE, None
    record = event.to_dict()
    if signing.problem(_canonical(record), signature, signing.LEDGER, _place(record), key) is None:
        return VERIFIED, key
    return BAD_SIGNATURE, None


def seal(record: dict[str, Any], key: str) -> dict[str, Any]:
    """``record`` (a merged roll-up record, or one narrowed from a verified one) as an event's
    record signed with ``key``: only ever called with the key that verified every record in it."""
    body = Event.from_dict(record).to_dict()
    body.pop(SIGNATURE, None)
    body[SIGNATURE] = signing.seal(_canonical(body), signing.LEDGER, _place(body), key)
    return body


#: The keys a user's records are checked with (``cli.hours.ledger_keys``): one keyring for
#: everyone (a user's own key), or each user's as a Hub derives them; None for a user without.
KeysFor = Callable[[str | None], signing.Keys]


def checked(
    events: list[Event],
    keys_for: KeysFor | None,
    signed_only: bool,
    owner: str | None = None,
) -> tuple[list[Event], dict[str, int] | None]:
    """The events to count, and how many records were verified, unsigned, or refused: for a bad
    signature, for naming a user other than ``owner`` (the user whose prefix the store is, when
    known), or as a replayed copy of a record already counted (``ID``); with
    ``signed_only`` unsigned ones are not counted either. A roll-up's merged record counts as the
    raw records it stands for (``stands_for``), so the counts are those of the raw events."""
    if keys_for is None:
        return unreplayed(events)[0], None
    counts = {verdict: 0 for verdict in (*VERDICTS, FOREIGN, REPLAYED)}
    kept = []
    for event in events:
        verdict = trust(event, keys_for(event.user))
        if verdict != BAD_SIGNATURE and owner is not None and event.user != owner:
            verdict = FOREIGN
        counts[verdict] += stands_for(event)
        if verdict == VERIFIED or (verdict == UNSIGNED and not signed_only):
            kept.append(event)
    kept, replayed = unreplayed(kept)
    counts[REPLAYED] = replayed
    return kept, counts


def stands_for(event: Event) -> int:
    """How many raw records ``event`` stands for: a roll-up's merged record counts its parts."""
    return rollup.stands_for({**event.extra, "spans": event.spans}) if rollup.PARTS in event.extra else 1


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


def read(
    store: Store, since: float | None = None, until: float | None = None, keys: KeysFor | None = None
) -> tuple[list[Event], int]:
    """Events from ``since`` to ``until`` (epoch seconds; None: no bound), oldest first, and how many
    records were skipped as malformed (not JSON, not an event, or unreadable).

    With ``since`` only the day folders it needs are listed, and settled days are read from their
    roll-ups; ``keys``: as for ``Cache``.
    """
    return Cache(store, keys=keys).read(since, until)


#: Seconds after a UTC day ends from which a ``Cache`` lists its folder no more (events are written
#: as they happen, give or take a resume's moments written at its end), and reads its roll-up.
SETTLED = 86400.0


def _day_end(prefix: str) -> float:
    return calendar.timegm(time.strptime(prefix[len(LEDGER) : -1], "%Y%m%d")) + 86400


def roll_up(raw: dict[str, Any], keys: KeysFor | None = None) -> tuple[list[dict[str, Any]], int]:
    """A day's roll-up records from its raw records (bytes, or the exception that reading one
    raised, by key), oldest first, merged where ``keys`` verify them (``rollup.summarise``), and
    how many were malformed or unreadable."""
    parsed = [(k, _parse(k, data)) for k, data in raw.items()]
    good = sorted(((k, e) for k, e in parsed if e is not None), key=_order)

    def verified(record: dict[str, Any]) -> str | None:
        event = Event.from_dict(record)
        verdict, key = _verdict(event, keys(event.user)) if keys is not None else (UNSIGNED, None)
        return key if verdict == VERIFIED else None

    return rollup.summarise((e.to_dict() for _, e in good), verified, seal), len(parsed) - len(good)


class Cache:
    """Reads the ledger again and again (a panel polling it): a record is read once, since no
    record ever changes; each ``read`` lists the recent day folders (a day over ``SETTLED`` ago
    is listed once) and reads only the new keys, all at once (``Store.read_many(small=True)``).

    With ``rollups`` (and a ``since``), a settled day is read from its roll-up (``rollup``), one
    object, written from the day's events by the first reader that needs it; the roll-ups of the
    window's days are read at once, and the raw events of the days without one too. ``notes``
    says which roll-ups were found damaged or outdated, and rebuilt.

    ``keys`` (``KeysFor``): the keys this reader checks records with. A roll-up it writes merges
    signed records only where one of these keys verifies them, and signs each merged record with
    that key; a merged record that the read's window cuts through is narrowed to the records a
    raw reader would keep, and signed again only if it verifies. A reader that checks signatures
    then finds the same verdicts, and counts (``stands_for``), in roll-ups as in raw events.
    """

    def __init__(self, store: Store, rollups: bool = True, keys: KeysFor | None = None) -> None:
        self.store = store
        self.rollups = rollups
        self.keys = keys
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
        settled: list[str] = []
        recent: list[str] = []
        for prefix in _days(since, until if until is not None else now + 86400):
            if _day_end(prefix) + SETTLED > now:
                recent += [k for k in self.store.list(prefix) if ledger_of(k)]
            else:
                settled.append(prefix)
        missing = [p for p in settled if p not in self.days]
        if missing:
            self.days.update(self._rolled(missing))
        rolled: list[Event] = []
        skipped = 0
        for prefix in settled:
            events, bad = self.days[prefix]
            rolled += events
            skipped += bad
        self.days = {p: v for p, v in self.days.items() if _day_end(p) >= since}
        raw, malformed = self._read_raw(recent, since, until)
        kept = [c for e in rolled if (c := self._within(e, since, until)) is not None]
        merged = kept + raw
        merged.sort(key=lambda e: (e.at, _RANK.get(e.event, len(_RANK))))
        return merged, malformed + skipped

    def _within(self, event: Event, since: float, until: float | None) -> Event | None:
        """``event`` if it is in ``since..until``; a merged record the window cuts through,
        narrowed to its records that are (``rollup.cut``), signed again if this reader verifies it."""
        found = event.extra.get(rollup.PARTS)
        if not found:
            return event if event.at >= since and (until is None or event.at <= until) else None
        last = found[-1][0] if isinstance(found[-1], list) and found[-1] else None
        if event.at >= since and isinstance(last, (int, float)) and (until is None or last <= until):
            return event  # the whole run is inside (its parts are in time order)
        record = event.to_dict()
        narrowed = rollup.cut(record, since, until)
        if narrowed is None or narrowed is record:
            return None if narrowed is None else event
        verdict, key = _verdict(event, self.keys(event.user)) if self.keys is not None else (UNSIGNED, None)
        if verdict == VERIFIED and key:
            return Event.from_dict(seal(narrowed, key))
        if SIGNATURE in record:  # not verified here: it keeps a signature that does not verify, never none
            narrowed[SIGNATURE] = record[SIGNATURE]
        return Event.from_dict(narrowed)

    def _rolled(self, prefixes: list[str]) -> dict[str, tuple[list[Event], int]]:
        """Settled days' events as their roll-ups hold them, all roll-ups read at once; those
        missing written first (the raw events of all of them read at once), those damaged or
        outdated rewritten (and ``notes`` says so)."""
        days = {p: rollup.day_of(p) for p in prefixes}
        found = self.store.read_many([rollup.key(d) for d in days.values()], small=True)
        out: dict[str, tuple[list[Event], int]] = {}
        why: dict[str, str] = {}
        for prefix, day in days.items():
            data = found.get(rollup.key(day))
            if isinstance(data, BaseException):
                if not isinstance(data, FileNotFoundError):
                    log.debug("jupyter-pause ledger: roll-up of %s unreadable: %s", day, data)
                continue
            got = rollup.decode(data, day)
            if isinstance(got, rollup.Rollup):
                events = [e for r in got.records if (e := _event(rollup.key(day), r)) is not None]
                out[prefix] = (events, got.malformed)
            else:
                why[prefix] = got
        todo = [p for p in prefixes if p not in out]
        if not todo:
            return out
        listed = {p: [k for k in self.store.list(p) if ledger_of(k)] for p in todo}
        raw = self.store.read_many([k for keys in listed.values() for k in keys], small=True)
        for prefix in todo:
            out[prefix] = self._roll_up(days[prefix], listed[prefix], raw, why.get(prefix, ""))
        return out

    def _roll_up(self, day: str, keys: list[str], raw: dict[str, Any], why: str) -> tuple[list[Event], int]:
        """Write ``day``'s roll-up from its raw records (``raw``, by key): created when there was
        none, replaced (and said) when it was ``why`` unusable; its events either way."""
        records, malformed = roll_up({k: raw[k] for k in keys}, self.keys)
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
        for key, data in self.store.read_many(new, small=True).items():
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
