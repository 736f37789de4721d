"""The records of a work journal: the name of an item's object, the bytes of a done record, and
the summary of a journal version.

A done record is a format line, one JSON header line (key, run, node, time, size, sha256; sealed
where a signing key is set) and the pickled result; a record whose result does not match its
header is damaged, never half-read, and one whose seal does not verify is never unpickled.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import IntegrityError, PauseError, SerializationError
from ..store import seals
from ..store.signing import Keys, Place

#: What a journal item is known by: a str or an int (such as a document id).
Key = str | int

#: First line of every done record: the format and its version.
MAGIC = b"jupyter-pause journal record 1\n"


def item_name(key: Key) -> str:
    """The object name of ``key``: 32 hex digits of a hash of its type and value."""
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise PauseError(f"journal key {key!r} is a {type(key).__name__}: use a str or an int (such as a document id)")
    text = f"{'s' if isinstance(key, str) else 'i'}:{key}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def encode_done(key: Key, run: str, node: str, result: Any, keys: Keys = None, place: Place | None = None) -> bytes:
    """The bytes of a done record: format line, JSON header line, pickled result; with ``keys``,
    the header is sealed as a journal record belonging at ``place`` (its sha256 covers the result)."""
    try:
        payload = pickle.dumps(result, protocol=5)
    except Exception as e:  # pickle raises many types (TypeError, PicklingError, AttributeError...)
        raise SerializationError(
            f"result of journal item {key!r} cannot be pickled ({type(e).__name__}: {e}); "
            "nothing was written: return plain data (str, numbers, lists, dicts, arrays)"
        ) from e
    header = {
        "key": key,
        "run": run,
        "node": node,
        "time": time.time(),
        "size": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    return MAGIC + seals.sealed_json(header, seals.JOURNAL, place or {}, keys) + b"\n" + payload


def refusal(header: dict[str, Any], item: str, place: Place, keys: Keys) -> str | None:
    """Why a done record (its ``header``, found as ``item`` at ``place``) must not be loaded, in a
    few words; None when it may. With ``keys``, only a record sealed by one of them for this
    journal item passes; a record whose key is not the item it was found as never does."""
    try:
        if item_name(header.get("key")) != item:  # type: ignore[arg-type]
            return f"it holds the result of another item ({header.get('key')!r})"
    except PauseError:
        return "its key is not a journal key"
    return seals.opened_json(header, seals.JOURNAL, place, keys)


def decode_done(data: bytes | memoryview, where: str) -> tuple[dict[str, Any], bytes]:
    """``(header, payload)`` of a done record; ``IntegrityError`` if it is not whole."""
    data = bytes(data)
    head, _, rest = data[len(MAGIC) :].partition(b"\n")
    try:
        if not data.startswith(MAGIC):
            raise ValueError("not a journal record")
        header = json.loads(head)
        if len(rest) != header["size"] or hashlib.sha256(rest).hexdigest() != header["sha256"]:
            raise ValueError(f"result is {len(rest)} bytes or changed, the record says {header['size']}")
    except (ValueError, KeyError, TypeError) as e:
        raise IntegrityError(f"journal record {where} is damaged: {e}; delete it to process the item again") from e
    return header, rest


@dataclass
class RunSummary:
    """One pass over the items: its start, node, the newest checkpoint then, and what it did."""

    run: str
    started: float
    node: str
    checkpoint: str | None
    offered: int | None
    accepted: int = 0
    failed: int = 0


@dataclass
class Summary:
    """Counts of a journal version: done, failed, pending after the last pass, re-done; and its runs."""

    journal: str
    version: str
    session: str
    done: int
    failed: int
    pending: int | None
    redone: int
    runs: list[RunSummary] = field(default_factory=list)

    def text(self) -> str:
        """The summary as a person reads it."""
        pending = "?" if self.pending is None else str(self.pending)
        lines = [
            f"journal {self.journal!r} version {self.version!r} (session {self.session!r}): "
            f"{self.done} done, {self.failed} failed, {pending} pending, {self.redone} re-done after a failure"
        ]
        for r in self.runs:
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.started))
            offered = "?" if r.offered is None else r.offered
            lines.append(
                f"  run {r.run}  {started} UTC on {r.node}  checkpoint {r.checkpoint or '-'}  "
                f"offered {offered}, accepted {r.accepted}, failed {r.failed}"
            )
        return "\n".join(lines)
