"""Writing and reading the ledger in a store: one small object per event under ``ledger/<day>/``,
read back oldest first, with settled days read from their roll-ups.

Append-only: every event is its own object, never a rewrite of a shared file, so any number of
servers, kernels and Hub services write at once and lose nothing. Writing never fails a pause or
a resume: a store error is logged with the count of events lost so far. Reading skips, and
counts, records that are not events.
"""

from __future__ import annotations

import calendar
import json
import logging
import threading
import time
from typing import Any

from ..errors import StoreError
from ..store.layout import LEDGER, ledger_key, ledger_of, ledger_prefix
from ..store.storage import Store
from . import rollup
from .checking import UNSIGNED, VERIFIED, KeysFor, encode, seal, verdict_and_key
from .events import RANK, SIGNATURE, Event

log = logging.getLogger("jupyter_pause.ledger")

_lost = 0


_lost_lock = threading.Lock()


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
    return event.at, RANK.get(event.event, len(RANK)), key


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
        verdict, key = verdict_and_key(event, keys(event.user)) if keys is not None else (UNSIGNED, None)
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
        merged.sort(key=lambda e: (e.at, RANK.get(e.event, len(RANK))))
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
        verdict, key = verdict_and_key(event, self.keys(event.user)) if self.keys is not None else (UNSIGNED, None)
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
