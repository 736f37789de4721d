"""What one cleanup reads of a store: each listing and each manifest once, in an order that keeps
a checkpoint being written safe.

A cleanup collects each session (``retention.collect``), then sweeps the pool every session
shares (``poolsweep.sweep_pool``). Both need the same things: the sessions' notes of checkpoints
being written, their manifests read with the store's keys, the blobs there are. ``Survey.take``
reads them once, in this order, and hands them to both:

1. the pool (its blobs, and the indexes of model files) is listed: what is written after that
   is not looked at;
2. everything under ``sessions/`` is listed at once (the sessions, their notes, their own
   folders' blobs), and the notes of checkpoints being written (those within the grace period)
   are read;
3. then, the first time a session is asked about (``judged``), its manifests are listed and read.

A checkpoint that commits meanwhile is seen in its note (read before the manifests are listed)
or in its manifest (listed after the notes were read). The pool's sweep reads the notes once
more just before deleting, for a checkpoint begun meanwhile (``read_notes``): the one thing read
twice, on purpose.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import IntegrityError, StoreError
from .catalog import Catalog
from .cleanup import DEFAULT_GRACE_SECONDS, past
from .judging import Judged, judge
from .layout import SESSIONS, file_index_prefix, pending_id, pool_prefix, session_of
from .storage import Entry, Store

#: What a note gave: the digests it names, or why it could not be read (a string).
Noted = list[str] | str


def read_notes(store: Store, notes: Mapping[str, Entry], now: float, grace: float) -> dict[str, Noted]:
    """Read the notes among ``notes`` written within ``grace`` of ``now`` (older ones are of
    abandoned writes): the digests each names, or why it could not be read (caught mid-rewrite,
    or sealed with a key not held here). A note gone meanwhile (committed or abandoned) is left out."""
    young = [key for key, entry in notes.items() if pending_id(key) and not past(entry.mtime, now, grace)]
    found: dict[str, Noted] = {}
    for key, data in store.read_many(young, small=True).items():
        if isinstance(data, FileNotFoundError):
            continue  # committed or abandoned meanwhile
        try:
            if isinstance(data, BaseException):
                raise data
            note = json.loads(bytes(data))
            digests = note.get("blobs", []) if isinstance(note, dict) else None
            if not isinstance(digests, list):
                raise ValueError("not a note of a checkpoint being written (no list of blobs)")
        except (ValueError, StoreError, IntegrityError) as e:  # IntegrityError: a seal that does not open here
            found[key] = f"the note of a checkpoint being written, {key}, could not be read ({e})"
            continue
        found[key] = [digest for digest in digests if isinstance(digest, str)]
    return found


def notes_now(store: Store) -> dict[str, Entry]:
    """Every note of a checkpoint being written, in every session, listed now (one listing)."""
    return {key: entry for key, entry in store.list(SESSIONS).items() if pending_id(key)}


@dataclass
class Survey:
    """One cleanup's reading of the store (see the module's docstring for its order).

    Attributes
    ----------
    pool
        The pool's blobs and model-file indexes, listed first; None when the cleanup sweeps no pool.
    sessions
        Every session with anything in the store.
    entries
        Every key under each session (its manifests, notes, own blobs), listed at once.
    notes
        The notes of checkpoints being written, read: key -> the digests it names, or why it
        could not be read.
    """

    catalog: Catalog
    now: float
    grace: float
    pool: dict[str, Entry] | None
    sessions: list[str]
    entries: dict[str, dict[str, Entry]]
    notes: dict[str, Noted]
    _judged: dict[str, Judged] = field(default_factory=dict, repr=False)

    @classmethod
    def take(
        cls, catalog: Catalog, now: float | None = None, grace: float = DEFAULT_GRACE_SECONDS, pool: bool = True
    ) -> Survey:
        """List the pool (unless not ``pool``), then every session's keys, and read the notes."""
        store = catalog.store
        now = time.time() if now is None else now
        listed = None
        if pool:  # the indexes of model files first: one goes before its file (it says the file is whole)
            blobs = store.list(pool_prefix())
            listed = {**store.list(file_index_prefix()), **blobs}
        entries: dict[str, dict[str, Entry]] = {}
        for key, entry in store.list(SESSIONS).items():
            session = session_of(key)
            if session is not None:
                entries.setdefault(session, {})[key] = entry
        notes = {key: entry for keys in entries.values() for key, entry in keys.items() if pending_id(key)}
        return cls(catalog, now, grace, listed, sorted(entries), entries, read_notes(store, notes, now, grace))

    def under(self, session: str, prefix: str) -> dict[str, Entry]:
        """The keys of ``session`` under ``prefix`` (one of its folders), as listed."""
        return {key: entry for key, entry in self.entries.get(session, {}).items() if key.startswith(prefix)}

    def judged(self, session: str) -> Judged:
        """``session``'s manifests, listed and read with the store's keys the first time it is
        asked about (``judging.judge``), with its notes as listed here."""
        if session not in self._judged:
            notes = {key: e for key, e in self.entries.get(session, {}).items() if pending_id(key)}
            self._judged[session] = judge(self.catalog, session, notes)
        return self._judged[session]
