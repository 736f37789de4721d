"""Retention and cleanup: keep the last N checkpoints per lineage, drop what nothing references.

A session's cleanup (``collect``) removes its expired checkpoints, abandoned notes, torn manifests
and its own folder's unreferenced blobs; the store's pool, shared by every session, is swept
after (``sweep_pool``): a pool blob goes only when no checkpoint of any session, nor any note of
a checkpoint being written, names it, and it is older than the grace period.
"""

from __future__ import annotations

import enum
import json
import time
from dataclasses import dataclass, field

from .. import units
from ..errors import StoreError
from . import uploads
from .backends.local import PART_PREFIX
from .catalog import Catalog, Listing
from .layout import (
    blob_digest,
    blob_prefix,
    file_index_of,
    file_index_prefix,
    manifest_key,
    manifest_prefix,
    pending_id,
    pending_key,
    pending_prefix,
    pool_digest,
    pool_prefix,
    session_prefix,
)
from .manifest import Manifest
from .storage import Store

#: Unreferenced data younger than this may belong to a checkpoint being written: left alone.
DEFAULT_GRACE_SECONDS = 3600.0


class Kind(str, enum.Enum):
    """What one removed item is."""

    CHECKPOINT = "checkpoint"  # a committed checkpoint's manifest, pruned by --keep / --older-than
    BLOB = "blob"  # data no remaining checkpoint references
    PENDING = "pending"  # the note of a checkpoint whose writing was abandoned
    TORN = "torn"  # a manifest that cannot be read (a commit cut off mid-write)
    UPLOAD = "upload"  # a write begun and never completed (a multipart upload, a local temporary file)

    def __str__(self) -> str:
        return self.value


@dataclass
class Item:
    """One thing a cleanup removed (or would remove): its kind, key, size in bytes and age in
    seconds (None where the store keeps no time)."""

    kind: str
    key: str
    size: int
    age: float | None

    def line(self, dry_run: bool) -> str:
        age = "age unknown" if self.age is None else f"{units.duration(self.age)} old"
        return f"  {'would remove' if dry_run else 'removed'} {self.kind} {self.key} ({units.size(self.size)}, {age})"


@dataclass
class GcReport:
    """What a cleanup removed (or would remove, on a dry run)."""

    session: str
    kept: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    blobs_removed: int = 0
    #: Bytes of data freed: unreferenced blobs and the parts of incomplete uploads.
    bytes_freed: int = 0
    dry_run: bool = False
    items: list[Item] = field(default_factory=list)
    #: Why this store's incomplete uploads could not be looked for; None where they were.
    uploads_unlisted: str | None = None
    #: Checkpoints of a manifest format newer than this release reads: kept, and with them every
    #: blob of the session (which of them they need cannot be known here).
    newer: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Items removed, by kind (every kind named, 0 where none)."""
        return _counts(self.items)

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        counts = self.counts()
        line = (
            f"session {self.session!r}: kept {len(self.kept)} checkpoint(s), {verb} "
            f"{len(self.removed)} checkpoint(s), {len(self.abandoned)} abandoned partial write(s), "
            f"{self.blobs_removed} blob(s), {counts[Kind.UPLOAD]} incomplete upload(s) ({units.size(self.bytes_freed)})"
        )
        if self.newer:
            line += (
                f"; kept {len(self.newer)} checkpoint(s) of a newer format ({', '.join(self.newer)}) and every "
                "blob: run gc with the jupyter-pause that wrote them to collect this session's blobs"
            )
        return line


def _expired(checkpoints: list[Manifest], keep: int | None, older_than: float | None, now: float) -> list[Manifest]:
    """Checkpoints of one lineage (newest first) that retention drops."""
    dropped = []
    for index, manifest in enumerate(checkpoints):
        beyond_count = keep is not None and index >= keep
        too_old = older_than is not None and now - manifest.created > older_than
        if keep is not None and older_than is not None:
            drop = beyond_count and too_old
        elif keep is not None:
            drop = beyond_count
        else:
            drop = too_old and index > 0  # age alone never removes a lineage's newest checkpoint
        if drop:
            dropped.append(manifest)
    return dropped


def collect(
    catalog: Catalog,
    session: str,
    *,
    keep: int | None = None,
    older_than: float | None = None,
    grace: float = DEFAULT_GRACE_SECONDS,
    dry_run: bool = False,
    now: float | None = None,
    pool: bool = True,
) -> GcReport:
    """Remove ``session``'s garbage and, with ``keep`` / ``older_than``, apply retention; with
    ``pool``, then sweep the store's pool (``sweep_pool``), its removals counted in the report.

    Garbage is what no committed checkpoint needs, once older than ``grace``: blobs nothing
    references, notes of abandoned partial writes, torn manifests, and incomplete multipart
    uploads. Without ``keep`` and ``older_than`` no committed checkpoint is removed. A checkpoint
    of a newer manifest format (a newer release shares the store) is never garbage: it stays, and
    so does every blob of its session, since which ones it needs cannot be read here. Manifests go
    first, blobs after, so an interrupted cleanup never leaves a listed checkpoint with missing
    data. Anything younger than ``grace`` may belong to a checkpoint being written: it stays.
    """
    if keep is not None and keep < 1:
        raise ValueError("--keep must be at least 1 (to remove a whole session, delete its folder)")
    store = catalog.store
    listing = catalog.listing(session)
    sweep = _Sweep(
        store,
        session,
        GcReport(session, dry_run=dry_run, uploads_unlisted=uploads.unlisted(store)),
        time.time() if now is None else now,
        grace,
    )
    kept = sweep.retain(listing, keep, older_than)
    referenced = {key for m in kept for key in m.blobs}
    stale, unsure = sweep.pending(listing, referenced)
    torn = sweep.torn(listing)
    orphans = sweep.orphans(referenced, unsure or bool(listing.newer))
    unfinished = sweep.unfinished()
    if not dry_run:
        store.delete([manifest_key(session, i) for i in sweep.report.removed])
        store.delete(stale + torn)
        store.delete(orphans)
        uploads.abort(store, unfinished)
    report = sweep.report
    if pool:
        swept = sweep_pool(catalog, grace=grace, dry_run=dry_run, now=sweep.now)
        report.items += swept.items
        report.blobs_removed += swept.blobs_removed
        report.bytes_freed += swept.bytes_freed
    return report


@dataclass
class _Sweep:
    """One session's collection: what it finds, each step adding to ``report``."""

    store: Store
    session: str
    report: GcReport
    now: float
    grace: float

    def age(self, mtime: float | None) -> float | None:
        return _age(mtime, self.now)

    def old(self, mtime: float | None) -> bool:
        return _past(mtime, self.now, self.grace)

    def retain(self, listing: Listing, keep: int | None, older_than: float | None) -> list[Manifest]:
        """The committed checkpoints kept; those retention drops are named in the report."""
        lineages: dict[str, list[Manifest]] = {}
        for manifest in listing.checkpoints:
            lineages.setdefault(manifest.lineage, []).append(manifest)
        dropped = {m.id for group in lineages.values() for m in _expired(group, keep, older_than, self.now)}
        kept = [m for m in listing.checkpoints if m.id not in dropped]
        self.report.kept = [m.id for m in kept]
        self.report.removed = sorted(dropped)
        manifests = self.store.list(manifest_prefix(self.session))
        for checkpoint_id in self.report.removed:
            key = manifest_key(self.session, checkpoint_id)
            entry = manifests.get(key)
            size, mtime = (entry.size, entry.mtime) if entry else (0, None)
            self.report.items.append(Item(str(Kind.CHECKPOINT), key, size, self.age(mtime)))
        return kept

    def pending(self, listing: Listing, referenced: set[str]) -> tuple[list[str], bool]:
        """Notes of abandoned writes (stale), the blobs of those in flight added to ``referenced``,
        and whether a note could not be read (its blobs unknown: no blob is removed this time)."""
        notes = self.store.list(pending_prefix(self.session))
        stale: list[str] = []
        unsure = False
        for checkpoint_id, mtime in listing.pending.items():
            key = pending_key(self.session, checkpoint_id)
            if self.old(mtime):
                stale.append(key)
                self.report.abandoned.append(checkpoint_id)
                note = notes.get(key)
                self.report.items.append(Item(str(Kind.PENDING), key, note.size if note else 0, self.age(mtime)))
                continue
            try:
                note = json.loads(bytes(self.store.read(key)))
                referenced.update(note.get("blobs", []))
            except FileNotFoundError:
                continue  # committed or abandoned meanwhile
            except ValueError:  # being rewritten this very moment: delete no blob this time
                unsure = True
        return stale, unsure

    def torn(self, listing: Listing) -> list[str]:
        """Manifests torn or damaged long enough ago (never one of a newer format)."""
        self.report.newer = sorted(listing.newer)
        manifests = self.store.list(manifest_prefix(self.session))
        torn = []
        for checkpoint_id in {**listing.unreadable, **listing.damaged}:
            if checkpoint_id in listing.newer:
                continue
            entry = manifests.get(manifest_key(self.session, checkpoint_id))
            if entry is not None and self.old(entry.mtime):
                torn.append(entry.key)
                self.report.abandoned.append(checkpoint_id)
                self.report.items.append(Item(str(Kind.TORN), entry.key, entry.size, self.age(entry.mtime)))
        return torn

    def orphans(self, referenced: set[str], unsure: bool) -> list[str]:
        """The session folder's blobs nothing references, old enough (none when ``unsure``)."""
        orphans = []
        for key, entry in self.store.list(blob_prefix(self.session)).items():
            digest = blob_digest(key)
            young = entry.mtime is not None and not self.old(entry.mtime)  # of unknown age: old
            if digest is not None and digest not in referenced and not young and not unsure:
                orphans.append(key)
                self.report.bytes_freed += entry.size
                self.report.items.append(Item(str(Kind.BLOB), key, entry.size, self.age(entry.mtime)))
        self.report.blobs_removed = len(orphans)
        return orphans

    def unfinished(self) -> list[uploads.Upload]:
        """Multipart uploads begun under the session and abandoned long enough ago."""
        found = [u for u in uploads.incomplete(self.store, session_prefix(self.session)) if self.old(u.initiated)]
        for upload in found:
            self.report.bytes_freed += upload.size
            self.report.items.append(Item(str(Kind.UPLOAD), upload.key, upload.size, self.age(upload.initiated)))
        return found


@dataclass
class PoolReport:
    """What a sweep of the store's pool removed (or would remove, on a dry run)."""

    blobs_removed: int = 0
    bytes_freed: int = 0
    dry_run: bool = False
    items: list[Item] = field(default_factory=list)
    #: Why no blob could be removed this time (a checkpoint whose blobs cannot be read); None otherwise.
    kept_all: str | None = None

    def counts(self) -> dict[str, int]:
        """Items removed, by kind (every kind named, 0 where none)."""
        return _counts(self.items)

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        line = (
            f"store pool: {verb} {self.blobs_removed} blob(s) no checkpoint of any session names, "
            f"{self.counts()[Kind.UPLOAD]} unfinished write(s) ({units.size(self.bytes_freed)})"
        )
        return line + (f"; kept every blob: {self.kept_all}" if self.kept_all else "")


def sweep_pool(
    catalog: Catalog, *, grace: float = DEFAULT_GRACE_SECONDS, dry_run: bool = False, now: float | None = None
) -> PoolReport:
    """Remove the pool's blobs that no checkpoint of any session names, nor any note of a
    checkpoint being written, once older than ``grace``; and unfinished writes into the pool.

    The pool is listed first: a blob written after that is not looked at. Notes are read before
    the manifests and again just before deleting, so a checkpoint that commits meanwhile is seen
    in one or the other. A checkpoint this release cannot read (a newer format, a manifest the
    store would not give, a note caught mid-rewrite) may name any blob: then none is removed.
    """
    now = time.time() if now is None else now
    store = catalog.store
    report = PoolReport(dry_run=dry_run)
    blobs = store.list(pool_prefix())
    unfinished = [u for u in uploads.incomplete(store, pool_prefix()) if _past(u.initiated, now, grace)]
    sessions = catalog.sessions()
    referenced, unsure = _noted(catalog, sessions, now, grace)
    for session in sessions:
        listing = catalog.listing(session)
        referenced.update(key for m in listing.checkpoints for key in [*m.blobs, *m.model_files])
        unreadable = sorted(listing.newer) + sorted(listing.unreadable)
        if unreadable and not unsure:
            unsure = f"session {session!r} holds checkpoints this release cannot read ({', '.join(unreadable)})"
    # A blob of unknown age counts as old; a temporary file is a local write cut off before its
    # file was moved into place.
    # An index of a model file goes with its file (it says the file is whole in the pool), first.
    blobs = {**store.list(file_index_prefix()), **blobs}
    old = {key: e for key, e in blobs.items() if e.mtime is None or _past(e.mtime, now, grace)}
    parts = [key for key in old if key.rsplit("/", 1)[-1].startswith(PART_PREFIX) and key.endswith(".part")]
    orphans = [key for key in old if (digest := _digest(key)) is not None and digest not in referenced]
    if orphans and not unsure and not dry_run:
        again, unsure = _noted(catalog, catalog.sessions(), now, grace)  # a checkpoint begun meanwhile
        orphans = [key for key in orphans if _digest(key) not in again]
    if unsure:
        report.kept_all = unsure
        orphans = []
    for key in orphans + parts:
        report.bytes_freed += old[key].size
        kind = Kind.BLOB if key in orphans else Kind.UPLOAD
        report.items.append(Item(str(kind), key, old[key].size, _age(old[key].mtime, now)))
    report.blobs_removed = len(orphans)
    orphans += parts
    for upload in unfinished:
        report.bytes_freed += upload.size
        report.items.append(Item(str(Kind.UPLOAD), upload.key, upload.size, _age(upload.initiated, now)))
    if not dry_run:
        store.delete(orphans)
        uploads.abort(store, unfinished)
    return report


def _digest(key: str) -> str | None:
    """The blob (or model file, for its index) a key of the pool's sweep stands for; None for any other key."""
    return pool_digest(key) or file_index_of(key)


def _counts(items: list[Item]) -> dict[str, int]:
    """Items by kind (every kind named, 0 where none)."""
    return {str(kind): sum(item.kind == kind for item in items) for kind in Kind}


def _past(mtime: float | None, now: float, grace: float) -> bool:
    """Whether something last written at ``mtime`` is past the grace period (one of unknown age is not)."""
    return mtime is not None and now - mtime > grace


def _age(mtime: float | None, now: float) -> float | None:
    return None if mtime is None else max(0.0, now - mtime)


def _noted(catalog: Catalog, sessions: list[str], now: float, grace: float) -> tuple[set[str], str | None]:
    """The blobs named by the notes of checkpoints being written (those within the grace period),
    in every session; and why they cannot all be known (a note caught mid-rewrite), or None."""
    store = catalog.store
    named: set[str] = set()
    notes = {key: e for s in sessions for key, e in store.list(pending_prefix(s)).items() if pending_id(key)}
    young = [key for key, entry in notes.items() if not _past(entry.mtime, now, grace)]
    for key, data in store.read_many(young, small=True).items():
        if isinstance(data, FileNotFoundError):
            continue  # committed or abandoned meanwhile
        try:
            if isinstance(data, BaseException):
                raise data
            named.update(json.loads(bytes(data)).get("blobs", []))
        except (ValueError, StoreError) as e:
            return named, f"the note of a checkpoint being written, {key}, could not be read ({e})"
    return named, None
