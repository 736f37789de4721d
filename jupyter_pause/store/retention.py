"""Retention and cleanup: keep the last N checkpoints per lineage, drop what nothing references.

A session's cleanup (``collect``) removes its expired checkpoints, abandoned notes, torn manifests
and its own folder's unreferenced blobs; the store's pool, shared by every session, is swept
after (``poolsweep.sweep_pool``): a pool blob goes only when no checkpoint of any session, nor any
note of a checkpoint being written, names it, and it is older than the grace period. Both take
what they know of the store from one ``survey.Survey``: each listing, and each manifest, read once.

Manifests are read with the store's keys (``judging``): only verified checkpoints count toward
``--keep`` and ``--older-than``, and the newest verified checkpoint of each lineage, with all it
references, always stays. A manifest the keys here do not verify never counts and never decides
what goes: it is kept, and so is every blob, unless asked to remove it (``remove_unverified``).
Without a key, checkpoints that are signed are never pruned: nothing here could tell theirs
from a planted one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import units
from . import uploads
from .catalog import Catalog
from .cleanup import DEFAULT_GRACE_SECONDS, GcReport, Item, Kind, PoolReport, age, past
from .judging import Judged
from .layout import blob_digest, blob_prefix, manifest_key, pending_key, pending_prefix, session_prefix
from .manifest import Manifest
from .poolsweep import sweep_pool
from .storage import Store
from .survey import Survey

__all__ = ["DEFAULT_GRACE_SECONDS", "GcReport", "Item", "Kind", "PoolReport", "collect", "sweep_pool"]

#: Why retention prunes nothing of a session whose checkpoints are signed, read without a key.
NO_KEY = (
    "its checkpoints are signed, and no signing key is set here to tell them from a planted one: run gc "
    "with JUPYTER_PAUSE_SIGNING_KEY (on a Hub, the user's key) to apply --keep or --older-than"
)


def _expired(checkpoints: list[Manifest], keep: int | None, older_than: float | None, now: float) -> dict[str, str]:
    """Checkpoints of one lineage (newest first) that retention drops, and why (id: why)."""
    dropped = {}
    for index, manifest in enumerate(checkpoints):
        beyond_count = keep is not None and index >= keep
        too_old = older_than is not None and now - manifest.created > older_than
        lineage = f"lineage {manifest.lineage}"
        if keep is not None and older_than is not None:
            drop = beyond_count and too_old
            why = f"beyond the newest {keep} of {lineage}, and older than {units.duration(older_than)}"
        elif keep is not None:
            drop = beyond_count
            why = f"beyond the newest {keep} of {lineage}"
        else:
            drop = too_old and index > 0  # age alone never removes a lineage's newest checkpoint
            why = f"older than {units.duration(older_than or 0)}, and not the newest of {lineage}"
        if drop:
            dropped[manifest.id] = why
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
    remove_unverified: bool = False,
    survey: Survey | None = None,
) -> GcReport:
    """Remove ``session``'s garbage and, with ``keep`` / ``older_than``, apply retention; with
    ``pool``, then sweep the store's pool (``sweep_pool``), its removals counted in the report.

    Garbage is what no committed checkpoint needs, once older than ``grace``: blobs nothing
    references, notes of abandoned partial writes, torn manifests, and incomplete multipart
    uploads. Without ``keep`` and ``older_than`` no committed checkpoint is removed. Manifests
    are read with the store's keys: only verified checkpoints count, and one not verified here
    (unsigned, another key's, misplaced) is named in ``not_counted``, kept with every blob of the
    session, and removed only with ``remove_unverified``. A checkpoint of a newer manifest format
    (a newer release shares the store) is never garbage: it stays, and so does every blob of its
    session, since which ones it needs cannot be read here. Manifests go first, blobs after, so
    an interrupted cleanup never leaves a listed checkpoint with missing data. Anything younger
    than ``grace`` may belong to a checkpoint being written: it stays.

    ``survey``: what this cleanup read of the store already (a cleanup of several sessions reads
    each listing and each manifest once, ``survey.Survey``; its time and grace period then hold);
    by default it is read here.
    """
    if keep is not None and keep < 1:
        raise ValueError("--keep must be at least 1 (to remove a whole session, delete its folder)")
    store = catalog.store
    survey = survey or Survey.take(catalog, now, grace, pool=pool)
    judged = survey.judged(session)
    listing = judged.listing
    sweep = _Sweep(
        store,
        session,
        GcReport(session, dry_run=dry_run, uploads_unlisted=uploads.unlisted(store)),
        survey,
    )
    if (keep is not None or older_than is not None) and store.keys is None and judged.signed:
        sweep.report.retention_refused = NO_KEY
        keep = older_than = None
    kept = sweep.retain(judged, keep, older_than)
    referenced = {key for m in kept for key in m.blobs}
    stale, unsure = sweep.pending(judged, referenced)
    torn = sweep.torn(judged)
    doubtful = sweep.unverified(judged, remove_unverified)
    kept_unverified = len(doubtful) < len(judged.unverified)  # a manifest that may name any blob stays
    blocked = unsure or bool(listing.newer) or bool(listing.unreadable) or kept_unverified
    orphans = sweep.orphans(referenced, blocked)
    unfinished = sweep.unfinished()
    if not dry_run:
        store.delete([manifest_key(session, i) for i in sweep.report.removed] + doubtful)
        store.delete(stale + torn)
        store.delete(orphans)
        uploads.abort(store, unfinished)
    report = sweep.report
    if pool:
        swept = sweep_pool(catalog, dry_run=dry_run, removed=report.manifests_removed(), survey=survey)
        report.items += swept.items
        report.blobs_removed += swept.blobs_removed
        report.bytes_freed += swept.bytes_freed
    return report


@dataclass
class _Sweep:
    """One session's collection: what it finds in ``survey``, each step adding to ``report``."""

    store: Store
    session: str
    report: GcReport
    survey: Survey

    @property
    def now(self) -> float:
        return self.survey.now

    @property
    def grace(self) -> float:
        return self.survey.grace

    def age(self, mtime: float | None) -> float | None:
        return age(mtime, self.now)

    def old(self, mtime: float | None) -> bool:
        return past(mtime, self.now, self.grace)

    def add(self, kind: Kind, key: str, size: int, mtime: float | None, why: str) -> None:
        self.report.items.append(Item(str(kind), key, size, self.age(mtime), why))

    def retain(self, judged: Judged, keep: int | None, older_than: float | None) -> list[Manifest]:
        """The verified checkpoints kept; those retention drops are named in the report, each
        with why. Only verified checkpoints are counted: ``judged``'s others never are."""
        checkpoints = judged.listing.checkpoints
        lineages: dict[str, list[Manifest]] = {}
        for manifest in checkpoints:
            lineages.setdefault(manifest.lineage, []).append(manifest)
        dropped = {
            i: why for group in lineages.values() for i, why in _expired(group, keep, older_than, self.now).items()
        }
        kept = [m for m in checkpoints if m.id not in dropped]
        self.report.kept = [m.id for m in kept]
        self.report.removed = sorted(dropped)
        manifests = judged.manifests
        for checkpoint_id in self.report.removed:
            key = manifest_key(self.session, checkpoint_id)
            entry = manifests.get(key)
            size, mtime = (entry.size, entry.mtime) if entry else (0, None)
            self.add(Kind.CHECKPOINT, key, size, mtime, dropped[checkpoint_id])
        return kept

    def pending(self, judged: Judged, referenced: set[str]) -> tuple[list[str], bool]:
        """Notes of abandoned writes (stale), the blobs of those in flight (as the survey read
        their notes) added to ``referenced``, and whether a note could not be read (its blobs
        unknown: no blob is removed this time)."""
        notes = self.survey.under(self.session, pending_prefix(self.session))
        stale: list[str] = []
        unsure = False
        for checkpoint_id, mtime in judged.listing.pending.items():
            key = pending_key(self.session, checkpoint_id)
            if self.old(mtime):
                stale.append(key)
                self.report.abandoned.append(checkpoint_id)
                note = notes.get(key)
                why = f"a checkpoint never committed: its writing stopped over {units.duration(self.grace)} ago"
                self.add(Kind.PENDING, key, note.size if note else 0, mtime, why)
                continue
            noted = self.survey.notes.get(key)  # none: committed or abandoned before it was read
            if isinstance(noted, str):
                unsure = True  # being rewritten that very moment, or not opened here: delete no blob this time
            elif noted is not None:
                referenced.update(noted)
        return stale, unsure

    def torn(self, judged: Judged) -> list[str]:
        """Manifests torn (no manifest's bytes at all) long enough ago; never one of a newer
        format, one the store would not give, nor one that is a manifest the keys here do not verify."""
        self.report.newer = sorted(judged.listing.newer)
        manifests = judged.manifests
        torn = []
        for checkpoint_id, why in judged.torn.items():
            entry = manifests.get(manifest_key(self.session, checkpoint_id))
            if entry is not None and self.old(entry.mtime):
                torn.append(entry.key)
                self.report.abandoned.append(checkpoint_id)
                self.add(Kind.TORN, entry.key, entry.size, entry.mtime, why)
        return torn

    def unverified(self, judged: Judged, remove: bool) -> list[str]:
        """Name the manifests the keys here do not verify in the report (never counted); with
        ``remove``, the keys of those past the grace period, to remove."""
        self.report.not_counted = dict(judged.unverified)
        self.report.removed_unverified = remove and bool(judged.unverified)
        if not remove:
            return []
        manifests = judged.manifests
        gone = []
        for checkpoint_id, why in judged.unverified.items():
            entry = manifests.get(manifest_key(self.session, checkpoint_id))
            if entry is not None and self.old(entry.mtime):
                gone.append(entry.key)
                self.add(Kind.UNVERIFIED, entry.key, entry.size, entry.mtime, f"{why} (--remove-unverified)")
        return gone

    def orphans(self, referenced: set[str], unsure: bool) -> list[str]:
        """The session folder's blobs nothing references, old enough (none when ``unsure``)."""
        orphans = []
        for key, entry in self.survey.under(self.session, blob_prefix(self.session)).items():
            digest = blob_digest(key)
            young = entry.mtime is not None and not self.old(entry.mtime)  # of unknown age: old
            if digest is not None and digest not in referenced and not young and not unsure:
                orphans.append(key)
                self.report.bytes_freed += entry.size
                why = f"no verified checkpoint of session {self.session!r}, nor one being written, names it"
                self.add(Kind.BLOB, key, entry.size, entry.mtime, why)
        self.report.blobs_removed = len(orphans)
        return orphans

    def unfinished(self) -> list[uploads.Upload]:
        """Multipart uploads begun under the session and abandoned long enough ago."""
        found = [u for u in uploads.incomplete(self.store, session_prefix(self.session)) if self.old(u.initiated)]
        for upload in found:
            self.report.bytes_freed += upload.size
            self.add(Kind.UPLOAD, upload.key, upload.size, upload.initiated, "a multipart upload never completed")
        return found
