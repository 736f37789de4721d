"""Roll-ups of the GPU-hours ledger: one object per settled UTC day, read instead of its events.

A day is settled ``ledger.SETTLED`` seconds after it ends: no more events arrive for it. Its
roll-up is the day's events summarised for the report, not copied: the ``activity`` records a
busy kernel writes every few minutes (most of a ledger) are merged, each run of them between two
other events of the same kernel into one record holding all their spans; every other event (a
start, a stop, a pause, a resume's moments, a checkpoint's size, a death) is kept as it is.
``hours`` builds exactly the same timelines from it as from the raw events, at the cost of one
read per day instead of one per event.

The first reader of a settled day without a roll-up writes it (``create``: of two readers at
once, the second finds it done); the raw events stay, for ``jupyter pause gc
--ledger-older-than``. A roll-up is versioned and checksummed like a manifest: a damaged one, or
one of another version, is ignored, rebuilt from the raw events and replaced, and the reader
says so. Signatures are per event and merged records have none, so a reader that checks the
events' signatures reads the raw events (``ledger.Cache(rollups=False)``).
"""

from __future__ import annotations

import calendar
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..vocabulary import LedgerEvent
from .layout import LEDGER
from .manifest import canonical_body, checksum

#: What a roll-up says it is, and the version of its format.
FORMAT = "jupyter-pause-ledger-rollup"
VERSION = 1
#: Where the roll-ups live: beside the day folders, never inside one.
ROLLUPS = f"{LEDGER}rollups/"

#: The fields that say whose an activity record is: records equal in all of them are one kernel's.
_OWNER = ("event", "session", "user", "node", "server", "gpu_model", "gpus")


def key(day: str) -> str:
    """The roll-up of UTC day ``day`` (``YYYYMMDD``)."""
    return f"{ROLLUPS}{day}.json"


def day_of(prefix: str) -> str:
    """``YYYYMMDD`` of a day folder's prefix (``ledger/20261201/``)."""
    return prefix[len(LEDGER) :].strip("/")


def summarise(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The day's records (dicts, oldest first) with each run of one kernel's ``activity`` records
    merged: at the first one's time, with every span, until another event of that kernel."""
    out: list[dict[str, Any]] = []
    open_runs: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        owner = tuple(record.get(f) for f in _OWNER[1:])
        if record.get("event") != LedgerEvent.ACTIVITY or _extras(record):
            # its session (or server) did something else: its next activity starts a new run
            whose = _whose(record)
            open_runs = {o: run for o, run in open_runs.items() if _whose(run) != whose}
            out.append(_unsigned(record))
            continue
        run = open_runs.get(owner)
        if run is None:
            run = _unsigned(record)
            run["spans"] = [list(s) for s in record.get("spans") or []]
            open_runs[owner] = run
            out.append(run)
        else:
            run["spans"].extend(list(s) for s in record.get("spans") or [])
    return out


def _whose(record: dict[str, Any]) -> tuple[Any, ...]:
    """The timeline a record belongs to: its session's, else its user's server's."""
    if record.get("session"):
        return ("session", record["session"])
    return ("server", record.get("user"), record.get("server"))


def _unsigned(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "sig"}


def _extras(record: dict[str, Any]) -> bool:
    """Whether an activity record carries more than its owner, time and spans (then it is kept whole)."""
    plain = {"v", "at", "spans", "sig", "trigger", "checkpoint", "bytes", "bytes_total", *_OWNER}
    return any(k not in plain for k in record) or any(
        record.get(k) is not None for k in ("trigger", "checkpoint", "bytes", "bytes_total")
    )


def encode(day: str, records: list[dict[str, Any]], raw: int, malformed: int) -> bytes:
    """A roll-up's bytes: its body (the summarised records, how many raw records and malformed
    ones it stands for) and the checksum of the body."""
    body = {
        "format": FORMAT,
        "version": VERSION,
        "day": day,
        "raw": raw,
        "malformed": malformed,
        "written": time.time(),
        "records": records,
    }
    canonical = canonical_body(body)
    return b'{"rollup":' + canonical + b',"checksum":"' + checksum(canonical).encode() + b'"}\n'


@dataclass(frozen=True)
class Rollup:
    day: str
    records: list[dict[str, Any]]
    raw: int
    malformed: int


def decode(data: Any, day: str) -> Rollup | str:
    """The roll-up in ``data``, or why it cannot be used (damaged, another version, another day)."""
    try:
        outer = json.loads(bytes(data))
        body, written = outer["rollup"], outer["checksum"]
    except (ValueError, KeyError, TypeError) as e:
        return f"it is incomplete or not a roll-up ({e})"
    if checksum(canonical_body(body)) != written:
        return "it was changed after it was written (checksum mismatch)"
    if body.get("format") != FORMAT or body.get("version") != VERSION:
        return f"it is {body.get('format')} version {body.get('version')}, not {FORMAT} version {VERSION}"
    if body.get("day") != day or not isinstance(body.get("records"), list):
        return f"it holds day {body.get('day')!r}, not {day}"
    return Rollup(day, body["records"], int(body.get("raw") or 0), int(body.get("malformed") or 0))


@dataclass(frozen=True)
class Pruned:
    """What ``prune_raw`` did (or would do) with one day's raw records: removed them, or kept them and why."""

    day: str
    records: int
    bytes: int
    kept: str = ""


def prune_raw(store: Any, older_than: float, now: float | None = None, dry_run: bool = False) -> list[Pruned]:
    """Remove the raw records of the days that ended over ``older_than`` seconds ago and whose
    roll-up is whole and accounts for every one of them; a roll-up is never removed. A day
    without a usable roll-up, or with records its roll-up does not count, is kept and named."""
    from .layout import ledger_of

    now = time.time() if now is None else now
    days: dict[str, dict[str, Any]] = {}
    for path, entry in store.list(LEDGER).items():
        if ledger_of(path):
            days.setdefault(day_of(path.rsplit("/", 1)[0] + "/"), {})[path] = entry
    done = []
    for day, entries in sorted(days.items()):
        ended = calendar.timegm(time.strptime(day, "%Y%m%d")) + 86400
        if now - ended <= older_than:
            continue
        size = sum(getattr(e, "size", 0) or 0 for e in entries.values())
        try:
            found = decode(store.read(key(day)), day)
        except FileNotFoundError:
            found = "it has no roll-up yet (a report over that day writes it)"
        if isinstance(found, str):
            done.append(Pruned(day, len(entries), size, kept=f"kept: {found}"))
            continue
        if found.raw != len(entries):
            kept = f"kept: its roll-up counts {found.raw} records, the folder holds {len(entries)}"
            done.append(Pruned(day, len(entries), size, kept=kept))
            continue
        if not dry_run:
            store.delete(list(entries))
        done.append(Pruned(day, len(entries), size))
    return done
