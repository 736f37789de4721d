"""Which ledger records to believe: sealing a record with the user's key (for its user and day),
checking it with the reader's keys, and counting a copy of a record once.

Anyone with the store's credentials can write records, so a ledger can be forged. Where this
process has a signing key (``sign_with``: the server and its kernels use their configured key),
every record carries ``sig``; ``trust`` tells a reader holding the keys which records are
verified, unsigned, or carry a signature that does not match, and ``checked`` which to count.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Callable
from typing import Any

from ..store import seals, signing
from . import rollup
from .events import ID, SIGNATURE, Event
from .spans import json_default

#: The keys for an event's record, given the event (see ``sign_with``).
Signer = Callable[["Event"], signing.Keys]


_signer: Signer | None = None


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
    return seals.canonical(record, SIGNATURE, default=json_default)


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
    return verdict_and_key(event, keys)[0]


def verdict_and_key(event: Event, keys: signing.Keys) -> tuple[str, str | None]:
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
