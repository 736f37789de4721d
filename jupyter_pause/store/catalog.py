"""How checkpoints are found, listed, told apart (intact or damaged) and committed (their keys come from ``layout``)."""

from __future__ import annotations

import calendar
import json
import time
from dataclasses import dataclass, field

from ..errors import CheckpointDamaged, CheckpointNotFound
from .integrity import Damage, read_manifest
from .layout import (
    SESSIONS,
    manifest_id,
    manifest_key,
    manifest_prefix,
    pending_id,
    pending_key,
    pending_prefix,
    session_of,
)
from .manifest import Manifest
from .storage import Store


@dataclass
class Listing:
    """A session's checkpoints, newest first; the damaged ones (id: why), the manifests the store
    could not read, and checkpoints being written.

    A damaged manifest (checksum mismatch, bad signature, torn write, not JSON, unknown format)
    stays listed here, by id, so no reader mistakes it for "no checkpoint".
    """

    checkpoints: list[Manifest] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    pending: dict[str, float | None] = field(default_factory=dict)
    session: str = ""
    where: str = ""
    #: When each damaged checkpoint was taken, from its manifest where that can still be read,
    #: else the end of the second its id names.
    taken: dict[str, float] = field(default_factory=dict)

    def newer_damaged(self, than: Manifest | None) -> dict[str, str]:
        """Damaged checkpoints newer than ``than`` (all of them for None), newest first."""
        return {i: why for i, why in self.damaged.items() if than is None or self.taken.get(i, 0.0) > than.created}

    def resolve(self, ref: str) -> Choice:
        """The checkpoint named by ``ref`` (``latest``: the newest intact one), and the newer
        damaged ones passed over.

        Raises
        ------
        CheckpointNotFound
            The session has no checkpoint at all, or none matches ``ref``.
        CheckpointDamaged
            The one asked for is damaged, or every one is; the message says why.
        """
        if ref in ("latest", "", None):
            if not self.checkpoints:
                self._none_intact()
            newest = self.checkpoints[0]
            return Choice(newest, self.newer_damaged(newest))
        ids = [m.id for m in self.checkpoints] + list(self.damaged) + list(self.unreadable)
        matches = [i for i in ids if i == ref] or list(dict.fromkeys(i for i in ids if i.startswith(ref)))
        if len(matches) > 1:
            raise CheckpointNotFound(
                f"{ref!r} matches {len(matches)} checkpoints of session {self.session!r}; give more of the id"
            )
        if not matches:
            if not ids:
                self._none_intact()
            newest = ", ".join(sorted(ids, reverse=True)[:3])
            raise CheckpointNotFound(
                f"no checkpoint {ref!r} in session {self.session!r} (newest: {newest}); "
                f"see them all with `jupyter pause list --session {self.session}`"
            )
        (found,) = matches
        for manifest in self.checkpoints:
            if manifest.id == found:
                return Choice(manifest, {})
        why = self.damaged.get(found) or f"its manifest cannot be read from the store: {self.unreadable[found]}"
        raise CheckpointDamaged(f"checkpoint {found} of session {self.session!r} is damaged: {why}; {self._intact()}")

    def _intact(self) -> str:
        if self.checkpoints:
            return f"the newest intact checkpoint is {self.checkpoints[0].id} (resume it by id, or resume 'latest')"
        return "no checkpoint of this session is intact: take a new one with %checkpoint"

    def _none_intact(self) -> None:
        broken = {**self.damaged, **self.unreadable}
        if not broken:
            raise CheckpointNotFound(
                f"no checkpoint of session {self.session!r} in store {self.where}; "
                "run %checkpoint first, or see the sessions there with `jupyter pause list`"
            )
        whys = "; ".join(f"{i} is damaged: {why}" for i, why in broken.items())
        raise CheckpointDamaged(
            f"every checkpoint of session {self.session!r} in store {self.where} is damaged ({len(broken)}): "
            f"{whys}; nothing to resume: take a new checkpoint with %checkpoint "
            f"(`jupyter pause verify --session {self.session}` lists them)"
        )


@dataclass
class Choice:
    """The checkpoint a reader goes to, and the newer damaged ones it passed over (id: why)."""

    manifest: Manifest
    passed_over: dict[str, str]

    @property
    def note(self) -> str:
        """One line saying which damaged checkpoints were passed over, or "" when none were."""
        if not self.passed_over:
            return ""
        damaged = "; ".join(f"checkpoint {i} is damaged: {why}" for i, why in self.passed_over.items())
        return f"{damaged}; using {self.manifest.id}, the newest intact checkpoint, instead"


class Catalog:
    """Finds sessions and checkpoints in a store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def sessions(self) -> list[str]:
        """Names of every session that has anything in the store."""
        names = {session_of(key) for key in self.store.list(SESSIONS)}
        return sorted(n for n in names if n is not None)

    def listing(self, session: str, key: str | None = None) -> Listing:
        """Every committed checkpoint of ``session`` (newest first) plus damaged, unreadable and
        pending ones; with a signing ``key``, a manifest it did not sign is damaged too."""
        keys = self.store.list(manifest_prefix(session))
        ids = {key: checkpoint_id for key in keys if (checkpoint_id := manifest_id(key)) is not None}
        found = Listing(session=session, where=self.store.display_url)
        damaged: dict[str, Damage] = {}
        for path, data in self.store.read_many(list(ids)).items():
            checkpoint_id = ids[path]
            if isinstance(data, BaseException):
                found.unreadable[checkpoint_id] = str(data)
                continue
            manifest = read_manifest(data, checkpoint_id, key)
            if isinstance(manifest, Damage):
                damaged[checkpoint_id] = manifest
            else:
                found.checkpoints.append(manifest)
        found.checkpoints.sort(key=lambda m: (m.created, m.id), reverse=True)
        committed = {m.id for m in found.checkpoints}
        for path, entry in self.store.list(pending_prefix(session)).items():
            checkpoint_id = pending_id(path)
            if checkpoint_id is not None and checkpoint_id not in committed:
                found.pending[checkpoint_id] = entry.mtime
        for checkpoint_id, damage in damaged.items():
            found.taken[checkpoint_id] = damage.created or _id_time(checkpoint_id)
        for checkpoint_id in sorted(damaged, key=lambda i: (found.taken[i], i), reverse=True):
            why = damaged[checkpoint_id].why
            if checkpoint_id in found.pending and why.startswith("torn write"):
                why += "; its writer stopped while committing it"
            found.damaged[checkpoint_id] = why
        return found

    def checkpoints(self, session: str, key: str | None = None) -> list[Manifest]:
        """Intact committed checkpoints of ``session``, newest first."""
        return self.listing(session, key).checkpoints

    def choose(self, session: str, ref: str, key: str | None = None) -> Choice:
        """The checkpoint named by ``ref`` (see ``Listing.resolve``) and the damaged ones passed over."""
        return self.listing(session, key).resolve(ref)

    def resolve(self, session: str, ref: str, key: str | None = None) -> Manifest:
        """The checkpoint named by ``ref``: ``latest`` (the newest intact one), a full id or a
        unique prefix of one; a damaged one raises ``CheckpointDamaged`` saying why."""
        return self.choose(session, ref, key).manifest

    def write_pending(self, session: str, checkpoint_id: str, created: float, blobs: list[str]) -> None:
        """Note a checkpoint being written, so cleanup leaves its fresh blobs alone."""
        note = {"id": checkpoint_id, "created": created, "blobs": blobs}
        self.store.write(pending_key(session, checkpoint_id), json.dumps(note).encode())

    def commit(self, manifest: Manifest, signing_key: str | None = None) -> None:
        """Write the manifest (the checkpoint now exists), then drop its pending note."""
        self.store.write(manifest_key(manifest.session, manifest.id), manifest.to_bytes(signing_key))
        self.store.delete([pending_key(manifest.session, manifest.id)])


def _id_time(checkpoint_id: str) -> float:
    """The end of the second a checkpoint id names (ids are ``YYYYMMDD-HHMMSS-xxxxxx``, UTC)."""
    return calendar.timegm(time.strptime(checkpoint_id[:15], "%Y%m%d-%H%M%S")) + 1.0
