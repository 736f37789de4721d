"""What a cleanup removes, or would remove, and why: the items and reports of a session's
collection (``retention.collect``) and of the pool's sweep (``poolsweep.sweep_pool``).

Each item carries its reason as a field, worded once here where the command line prints it. A
report also names the manifests it did not count (``GcReport.not_counted``: unsigned, signed
with another key, misplaced, or sealed with a key not held here): they never count toward
``--keep`` or ``--older-than``, and never decide what of the user's goes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .. import units

#: Unreferenced data younger than this may belong to a checkpoint being written: left alone.
DEFAULT_GRACE_SECONDS = 3600.0


class Kind(str, enum.Enum):
    """What one removed item is."""

    CHECKPOINT = "checkpoint"  # a committed checkpoint's manifest, pruned by --keep / --older-than
    BLOB = "blob"  # data no remaining checkpoint references
    PENDING = "pending"  # the note of a checkpoint whose writing was abandoned
    TORN = "torn"  # a manifest that cannot be read (a commit cut off mid-write)
    UNVERIFIED = "unverified"  # a manifest the keys here do not verify, removed on request only
    UPLOAD = "upload"  # a write begun and never completed (a multipart upload, a local temporary file)

    def __str__(self) -> str:
        return self.value


@dataclass
class Item:
    """One thing a cleanup removed (or would remove): its kind, key, size in bytes, age in
    seconds (None where the store keeps no time), and why it goes."""

    kind: str
    key: str
    size: int
    age: float | None
    why: str = ""

    def line(self, dry_run: bool) -> str:
        """The item as ``jupyter pause gc`` prints it."""
        age = "age unknown" if self.age is None else f"{units.duration(self.age)} old"
        verb = "would remove" if dry_run else "removed"
        return f"  {verb} {self.kind} {self.key} ({units.size(self.size)}, {age})" + (
            f": {self.why}" if self.why else ""
        )


@dataclass
class GcReport:
    """What a cleanup of one session removed (or would remove, on a dry run), and what it did not count."""

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
    #: Manifests not verified with the keys here (id: why): never counted, never deciding what goes;
    #: kept, and with them every blob, unless removed on request (``removed_unverified``).
    not_counted: dict[str, str] = field(default_factory=dict)
    removed_unverified: bool = False
    #: Why ``--keep`` / ``--older-than`` removed nothing here (signed checkpoints and no key to
    #: verify them); None where retention applied.
    retention_refused: str | None = None

    def counts(self) -> dict[str, int]:
        """Items removed, by kind (every kind named, 0 where none)."""
        return counts(self.items)

    def manifests_removed(self) -> list[str]:
        """The keys of the manifests this cleanup removed (or would remove): pruned checkpoints,
        and manifests not verified here, removed on request."""
        return [item.key for item in self.items if item.kind in (Kind.CHECKPOINT, Kind.UNVERIFIED)]

    def summary(self) -> str:
        """One line: what was kept and removed (or would be)."""
        verb = "would remove" if self.dry_run else "removed"
        uploads = self.counts()[Kind.UPLOAD]
        line = (
            f"session {self.session!r}: kept {len(self.kept)} checkpoint(s), {verb} "
            f"{len(self.removed)} checkpoint(s), {len(self.abandoned)} abandoned partial write(s), "
            f"{self.blobs_removed} blob(s), {uploads} incomplete upload(s) ({units.size(self.bytes_freed)})"
        )
        if self.newer:
            line += (
                f"; kept {len(self.newer)} checkpoint(s) of a newer format ({', '.join(self.newer)}) and every "
                "blob: run gc with the jupyter-pause that wrote them to collect this session's blobs"
            )
        if self.not_counted and self.removed_unverified:
            line += f"; {verb} {len(self.not_counted)} manifest(s) not verified here (--remove-unverified)"
        elif self.not_counted:
            line += (
                f"; {len(self.not_counted)} manifest(s) not verified here, not counted: kept, and every blob with "
                "them (--remove-unverified removes them)"
            )
        if self.retention_refused:
            line += f"; no checkpoint pruned: {self.retention_refused}"
        return line

    def lines(self, dry_run: bool) -> list[str]:
        """The report as ``jupyter pause gc`` prints it: the summary, each manifest not counted
        and why, and (on a dry run) each item and why it would go."""
        out = [self.summary()]
        out += [f"  not counted: checkpoint {i}: {why}" for i, why in self.not_counted.items()]
        return out + ([item.line(True) for item in self.items] if dry_run else [])


@dataclass
class PoolReport:
    """What a sweep of the store's pool removed (or would remove, on a dry run)."""

    blobs_removed: int = 0
    bytes_freed: int = 0
    dry_run: bool = False
    items: list[Item] = field(default_factory=list)
    #: Why no blob could be removed this time (a checkpoint whose blobs cannot be read or
    #: verified here); None otherwise.
    kept_all: str | None = None

    def counts(self) -> dict[str, int]:
        """Items removed, by kind (every kind named, 0 where none)."""
        return counts(self.items)

    def summary(self) -> str:
        """One line: what the sweep removed (or would), or why it kept every blob."""
        verb = "would remove" if self.dry_run else "removed"
        line = (
            f"store pool: {verb} {self.blobs_removed} blob(s) no checkpoint of any session names, "
            f"{self.counts()[Kind.UPLOAD]} unfinished write(s) ({units.size(self.bytes_freed)})"
        )
        return line + (f"; kept every blob: {self.kept_all}" if self.kept_all else "")

    def lines(self, dry_run: bool) -> list[str]:
        """The report as ``jupyter pause gc`` prints it (on a dry run, each item and why)."""
        return [self.summary()] + ([item.line(True) for item in self.items] if dry_run else [])


def counts(items: list[Item]) -> dict[str, int]:
    """Items by kind (every kind named, 0 where none)."""
    return {str(kind): sum(item.kind == kind for item in items) for kind in Kind}


def past(mtime: float | None, now: float, grace: float) -> bool:
    """Whether something last written at ``mtime`` is past the grace period (one of unknown age is not)."""
    return mtime is not None and now - mtime > grace


def age(mtime: float | None, now: float) -> float | None:
    """Seconds since ``mtime`` (None where unknown)."""
    return None if mtime is None else max(0.0, now - mtime)
