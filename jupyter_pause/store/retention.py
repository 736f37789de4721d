"""Retention and cleanup: keep the last N checkpoints per lineage, drop what nothing references."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from .. import units
from .catalog import Catalog
from .layout import blob_digest, blob_prefix, manifest_key, manifest_prefix, pending_key
from .manifest import Manifest

#: Unreferenced data younger than this may belong to a checkpoint being written: left alone.
DEFAULT_GRACE_SECONDS = 3600.0


@dataclass
class GcReport:
    """What a cleanup removed (or would remove, on a dry run)."""

    session: str
    kept: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    blobs_removed: int = 0
    bytes_freed: int = 0
    dry_run: bool = False

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        return (
            f"session {self.session!r}: kept {len(self.kept)} checkpoint(s), {verb} "
            f"{len(self.removed)} checkpoint(s), {len(self.abandoned)} abandoned partial write(s), "
            f"{self.blobs_removed} blob(s) ({units.size(self.bytes_freed)})"
        )


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
) -> GcReport:
    """Apply retention to ``session`` and delete blobs no remaining checkpoint references.

    Manifests go first, blobs after, so an interrupted cleanup never leaves a listed checkpoint
    with missing data. Pending writes and unreferenced blobs younger than ``grace`` are kept.
    """
    if keep is not None and keep < 1:
        raise ValueError("--keep must be at least 1 (to remove a whole session, delete its folder)")
    now = time.time() if now is None else now
    store = catalog.store
    listing = catalog.listing(session)
    report = GcReport(session, dry_run=dry_run)
    lineages: dict[str, list[Manifest]] = {}
    for manifest in listing.checkpoints:
        lineages.setdefault(manifest.lineage, []).append(manifest)
    dropped = {m.id for group in lineages.values() for m in _expired(group, keep, older_than, now)}
    kept = [m for m in listing.checkpoints if m.id not in dropped]
    report.kept = [m.id for m in kept]
    report.removed = sorted(dropped)

    referenced = {key for m in kept for key in m.blobs}
    stale: list[str] = []
    unsure = False  # a checkpoint being written whose note cannot be read: its blobs are unknown
    for checkpoint_id, mtime in listing.pending.items():
        if mtime is not None and now - mtime > grace:
            stale.append(pending_key(session, checkpoint_id))
            report.abandoned.append(checkpoint_id)
            continue
        try:
            note = json.loads(bytes(store.read(pending_key(session, checkpoint_id))))
            referenced.update(note.get("blobs", []))
        except FileNotFoundError:
            continue  # committed or abandoned meanwhile
        except ValueError:  # being rewritten this very moment: delete no blob this time
            unsure = True
    manifests = store.list(manifest_prefix(session))
    torn = []
    for checkpoint_id in {**listing.unreadable, **listing.damaged}:
        entry = manifests.get(manifest_key(session, checkpoint_id))
        if entry is not None and entry.mtime is not None and now - entry.mtime > grace:
            torn.append(entry.key)
            report.abandoned.append(checkpoint_id)

    orphans = []
    for key, entry in store.list(blob_prefix(session)).items():
        digest = blob_digest(key)
        young = entry.mtime is not None and now - entry.mtime <= grace
        if digest is not None and digest not in referenced and not young and not unsure:
            orphans.append(key)
            report.bytes_freed += entry.size
    report.blobs_removed = len(orphans)
    if not dry_run:
        store.delete([manifest_key(session, i) for i in report.removed])
        store.delete(stale + torn)
        store.delete(orphans)
    return report
