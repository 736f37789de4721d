"""The records of a work journal: the name of an item's object, the bytes of a done record, and
the summary of a journal version.

A done record is a format line, one JSON header line (key, run, node, time, size, sha256) and the
pickled result; a record whose result does not match its header is damaged, never half-read.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import IntegrityError, PauseError, SerializationError

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


def encode_done(key: Key, run: str, node: str, result: Any) -> bytes:
    """The bytes of a done record: format line, JSON header line, pickled result."""
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
    return MAGIC + json.dumps(header).encode() + b"\n" + payload


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
