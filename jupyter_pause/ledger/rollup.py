"""Roll-ups of the GPU-hours ledger: one object per settled UTC day, read instead of its events.

A day is settled ``ledger.SETTLED`` seconds after it ends: no more events arrive for it. Its
roll-up is the day's events summarised for the report, not copied: the ``activity`` records a
busy kernel writes every few minutes (most of a ledger) are merged, each run of them between two
other events of the same kernel into one record holding all their spans (packed, ``spans.Spans``:
one string of their float64 values, read and checked in one step) and, in ``parts``, each
record's time and number of spans (so a reader whose window opens or closes inside a run keeps
exactly the records a raw reader would: ``cut``); every other event (a start, a stop, a pause, a
resume's moments, a checkpoint's size, a death) is kept as it is. ``hours`` builds exactly the
same timelines from it as from the raw events, at the cost of one read per day instead of one
per event.

Signatures are never stripped. A record signed with a key the writer holds, and verified with
it, is merged only with records verified by that same key, and the merged record is signed with
it (``seal``); a signed record the writer cannot verify (no key of its user here, or a bad
signature) is kept whole, its signature as it was; unsigned records are merged into unsigned
records. So a reader that checks signatures finds in a roll-up the same verdicts as in the raw
events, whoever wrote it: a forged record stays unsigned, or keeps its bad signature.

The first reader of a settled day without a roll-up writes it (``create``: of two readers at
once, the second finds it done); the raw events stay, for ``jupyter pause gc
--ledger-older-than`` (``pruning``: only where the roll-up holds what they give). A roll-up is
versioned and checksummed like a manifest: a damaged one, or one of another version, is
ignored, rebuilt from the raw events and replaced, and the reader says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..store.layout import LEDGER
from ..store.manifest import canonical_body, checksum
from ..vocabulary import LedgerEvent
from .spans import Packed, Parts, Spans

#: What a roll-up says it is, and the version of its format.
FORMAT = "jupyter-pause-ledger-rollup"
VERSION = 3  # 2: signatures kept, merged records signed, parts; 3: merged records' spans and parts packed
#: Where the roll-ups live: beside the day folders, never inside one.
ROLLUPS = f"{LEDGER}rollups/"

#: The fields that say whose an activity record is: records equal in all of them are one kernel's.
_OWNER = ("event", "session", "user", "node", "server", "gpu_model", "gpus")
#: The field of a record that holds its signature (``ledger.SIGNATURE``), and the field of a merged
#: record that lists the records it stands for.
SIGNATURE = "sig"
PARTS = "parts"


def key(day: str) -> str:
    """The roll-up of UTC day ``day`` (``YYYYMMDD``)."""
    return f"{ROLLUPS}{day}.json"


def day_of(prefix: str) -> str:
    """``YYYYMMDD`` of a day folder's prefix (``ledger/20261201/``)."""
    return prefix[len(LEDGER) :].strip("/")


def summarise(
    records: Iterable[dict[str, Any]],
    verified: Callable[[dict[str, Any]], str | None] | None = None,
    seal: Callable[[dict[str, Any], str], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The day's records (dicts, oldest first) with each run of one kernel's ``activity`` records
    merged: at the first one's time, with every span, until another event of that kernel.

    ``verified(record)``: the key that verified a signed record's signature, or None (not
    verified here); ``seal(record, key)``: the record signed with ``key``. Signed records are
    merged only with records verified by the same key (and sealed with it); a signed record not
    verified is kept whole; without ``verified`` no signed record is merged.
    """
    out: list[dict[str, Any] | list[dict[str, Any]]] = []
    open_runs: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    keys: dict[int, str] = {}
    for record in records:
        signed = SIGNATURE in record
        key = verified(record) if signed and verified is not None else None
        if record.get("event") != LedgerEvent.ACTIVITY or _extras(record) or (signed and key is None):
            # its session (or server) did something else: its next activity starts a new run
            whose = _whose(record)
            open_runs = {o: run for o, run in open_runs.items() if _whose(run[0]) != whose}
            out.append(record)
            continue
        owner = (*(record.get(f) for f in _OWNER[1:]), key or "")
        run = open_runs.get(owner)
        if run is None:
            run = open_runs[owner] = [record]
            if key:
                keys[id(run)] = key
            out.append(run)
        else:
            run.append(record)
    done = []
    for item in out:
        if isinstance(item, dict):
            done.append(item)
        elif len(item) == 1:  # a run of one: the record as it was, its signature too
            done.append(item[0])
        else:
            merged = _merge(item)
            key = keys.get(id(item))
            done.append(seal(merged, key) if key and seal is not None else merged)
    return done


def _merge(run: list[dict[str, Any]]) -> dict[str, Any]:
    """One record for a run of a kernel's activity records: the first's, with every span, and
    each record's time and number of spans in ``parts`` (its ``id`` the first's: the run counts once)."""
    merged = {k: v for k, v in run[0].items() if k != SIGNATURE}
    merged["spans"] = Spans.of_pairs(s for r in run for s in r.get("spans") or [])
    merged[PARTS] = Parts.of_pairs([r["at"], len(r.get("spans") or [])] for r in run)
    return merged


def parts(record: dict[str, Any]) -> list[tuple[float, int]] | None:
    """The ``(time, spans)`` of each record a merged record stands for; None for any other
    record (or parts that do not add up to its spans)."""
    found = record.get(PARTS)
    spans = record.get("spans")
    if isinstance(found, Parts) and isinstance(spans, (list, Spans)):  # checked when it was made
        counts = found.counts()
        ok = len(found) and int(counts.sum()) == len(spans)
        return list(zip(found.array[:, 0].tolist(), counts.tolist(), strict=True)) if ok else None
    if not isinstance(found, list) or not isinstance(spans, (list, Spans)):
        return None
    out = []
    for part in found:
        if not (isinstance(part, list) and len(part) == 2):
            return None
        at, count = part
        if isinstance(at, bool) or not isinstance(at, (int, float)) or isinstance(count, bool):
            return None
        if not isinstance(count, int) or count < 0:
            return None
        out.append((float(at), count))
    return out if out and sum(c for _, c in out) == len(spans) else None


def cut(record: dict[str, Any], since: float | None, until: float | None) -> dict[str, Any] | None:
    """A merged record narrowed to the records it stands for whose time is in ``since..until``
    (None: none of them; the record itself, signature and all, when all of them are). A narrowed
    record carries no signature: a reader that verified the whole one seals it again."""
    found = parts(record)
    if found is None:
        at = record.get("at")
        inside = (since is None or at >= since) and (until is None or at <= until)
        return record if inside else None
    keep = [
        (i, p) for i, p in enumerate(found) if (since is None or p[0] >= since) and (until is None or p[0] <= until)
    ]
    if len(keep) == len(found):
        return record
    if not keep:
        return None
    offsets = [0]
    for _, count in found:
        offsets.append(offsets[-1] + count)
    first, last = keep[0][0], keep[-1][0]
    narrowed = {k: v for k, v in record.items() if k != SIGNATURE}
    narrowed["at"] = found[first][0]
    narrowed["spans"] = record["spans"][offsets[first] : offsets[last + 1]]
    narrowed[PARTS] = Parts.of_pairs(found[first : last + 1])
    return narrowed


def stands_for(record: dict[str, Any]) -> int:
    """How many raw records ``record`` stands for: a merged record's parts, else 1."""
    packed = record.get(PARTS)
    if isinstance(packed, Parts) and isinstance(record.get("spans"), (list, Spans)):
        return len(packed) if len(packed) and int(packed.counts().sum()) == len(record["spans"]) else 1
    found = parts(record)
    return len(found) if found is not None else 1


def _whose(record: dict[str, Any]) -> tuple[Any, ...]:
    """The timeline a record belongs to: its session's, else its user's server's."""
    if record.get("session"):
        return ("session", record["session"])
    return ("server", record.get("user"), record.get("server"))


def _extras(record: dict[str, Any]) -> bool:
    """Whether an activity record carries more than its owner, time and spans (then it is kept whole)."""
    plain = {"v", "id", "at", "spans", SIGNATURE, "trigger", "checkpoint", "bytes", "bytes_total", *_OWNER}
    return any(k not in plain for k in record) or any(
        record.get(k) is not None for k in ("trigger", "checkpoint", "bytes", "bytes_total")
    )


def encode(day: str, records: list[dict[str, Any]], raw: int, malformed: int) -> bytes:
    """A roll-up's bytes: its body (the summarised records, merged ones' spans packed; how many
    raw records and malformed ones it stands for) and the checksum of the body."""
    records = [_packed(r) if PARTS in r else r for r in records]
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
    return _HEAD + canonical + _MARK + checksum(canonical).encode() + _TAIL


def _packed(record: dict[str, Any]) -> dict[str, Any]:
    """A merged record as a roll-up holds it: its spans and parts as their packed strings."""
    return {k: v.encode() if isinstance(v, Packed) else v for k, v in record.items()}


def held(records: list[dict[str, Any]], malformed: int) -> bytes:
    """What a roll-up's records say (and how many malformed records it counted), as canonical
    bytes: two roll-ups hold the same when these are equal, whenever each was written."""
    packed = [_packed(r) if PARTS in r else r for r in records]
    return canonical_body({"records": packed, "malformed": malformed})


#: How ``encode`` frames a roll-up's body and checksum (``decode`` checks the body's bytes as framed).
_HEAD, _MARK, _TAIL = b'{"rollup":', b',"checksum":"', b'"}\n'


@dataclass(frozen=True)
class Rollup:
    day: str
    records: list[dict[str, Any]]
    raw: int
    malformed: int


def decode(data: Any, day: str) -> Rollup | str:
    """The roll-up in ``data``, or why it cannot be used (damaged, another version, another day).

    The checksum is checked over the body's bytes as ``encode`` framed them, without writing the
    body out again (a month of a busy Hub's roll-ups is tens of megabytes); a roll-up framed
    otherwise is checked over its body written out canonically.
    """
    data = bytes(data)
    body: Any = None
    mark = data.rfind(_MARK)
    if data.startswith(_HEAD) and data.endswith(_TAIL) and mark > 0:
        framed = data[len(_HEAD) : mark]
        if checksum(framed).encode() == data[mark + len(_MARK) : -len(_TAIL)]:
            try:
                body = json.loads(framed)
            except ValueError:
                body = None
    if not isinstance(body, dict):
        try:
            outer = json.loads(data)
            body, written = outer["rollup"], outer["checksum"]
        except (ValueError, KeyError, TypeError) as e:
            return f"it is incomplete or not a roll-up ({e})"
        if not isinstance(body, dict) or checksum(canonical_body(body)) != written:
            return "it was changed after it was written (checksum mismatch)"
    if body.get("format") != FORMAT or body.get("version") != VERSION:
        return f"it is {body.get('format')} version {body.get('version')}, not {FORMAT} version {VERSION}"
    if body.get("day") != day or not isinstance(body.get("records"), list):
        return f"it holds day {body.get('day')!r}, not {day}"
    for record in body["records"]:
        if isinstance(record, dict) and PARTS in record:
            try:
                if isinstance(record.get("spans"), str):
                    record["spans"] = Spans.decode(record["spans"])
                if isinstance(record[PARTS], str):
                    record[PARTS] = Parts.decode(record[PARTS])
            except ValueError as e:
                return f"a merged record cannot be read ({e})"
    return Rollup(day, body["records"], int(body.get("raw") or 0), int(body.get("malformed") or 0))
