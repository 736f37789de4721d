"""Seals: what a server, kernel or CLI reads from a store and acts on is signed by its writer,
with a key of its own for each kind of record, over the record and the place it belongs to.

The key of a kind is derived from the user's signing key by a labelled KDF (``HMAC(key, label)``,
``signing.derive``), so a signature of one kind (a ledger event) never passes as another (a
manifest, a journal record). The seal covers the record's bytes and its place (the user, the
session, the journal item, the day: a small mapping the reader rebuilds from where it found the
record), so a record copied to another place no longer verifies there. A reader checks a seal
with its own keyring: ``problem`` says, in a few words, why a record is refused, or None. Without
a key (a single-user laptop) nothing is sealed and everything is accepted, as before. The rule
itself (``signing.seal``, ``signing.problem``) lives in ``signing``; this module applies it to
JSON records.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from .signing import JOURNAL, KINDS, LEASE, LEDGER, MANIFEST, STATUS, Keys, Place, keyring, problem, seal

__all__ = ["JOURNAL", "KINDS", "LEASE", "LEDGER", "MANIFEST", "STATUS", "Place", "problem", "seal"]

#: The field of a JSON record that holds its seal.
FIELD = "seal"


def canonical(record: Mapping[str, Any], field: str = FIELD, default: Callable[[Any], Any] | None = None) -> bytes:
    """The bytes a JSON record's seal covers: the record without its seal (``field``), sorted and
    compact; ``default`` writes what JSON has no type for (as ``json.dumps`` takes it)."""
    body = {k: v for k, v in record.items() if k != field}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=default).encode()


def sealed_json(record: Mapping[str, Any], label: str, place: Place, keys: Keys) -> bytes:
    """``record`` as JSON bytes, sealed (field ``seal``) when ``keys`` has a key."""
    body = {k: v for k, v in record.items() if k != FIELD}
    if keyring(keys) is not None:
        body[FIELD] = seal(canonical(body), label, place, keys)
    return json.dumps(body).encode()


def opened_json(record: Mapping[str, Any], label: str, place: Place, keys: Keys) -> str | None:
    """Why a JSON record read from the store is refused (``problem``), None when it may be used."""
    return problem(canonical(record), record.get(FIELD), label, place, keys)


def this_user() -> str | None:
    """The JupyterHub user this process works for (whose records it writes and reads); None off a Hub."""
    return os.environ.get("JUPYTERHUB_USER") or None


def session_place(session: str) -> dict[str, str | None]:
    """Where a record of one of this user's sessions belongs (its status, its lease), as its seal
    covers it: the session and the Hub user."""
    return {"user": this_user(), "session": session}
