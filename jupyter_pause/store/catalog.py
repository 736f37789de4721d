"""How checkpoints are found, listed, told apart and committed (their keys come from ``layout``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..errors import CheckpointNotFound, IntegrityError
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
    """A session's checkpoints, newest first, and the manifests that could not be read."""

    checkpoints: list[Manifest] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    pending: dict[str, float | None] = field(default_factory=dict)


class Catalog:
    """Finds sessions and checkpoints in a store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def sessions(self) -> list[str]:
        """Names of every session that has anything in the store."""
        names = {session_of(key) for key in self.store.list(SESSIONS)}
        return sorted(n for n in names if n is not None)

    def listing(self, session: str) -> Listing:
        """Every committed checkpoint of ``session`` (newest first) plus unreadable and pending ones."""
        keys = self.store.list(manifest_prefix(session))
        ids = {key: checkpoint_id for key in keys if (checkpoint_id := manifest_id(key)) is not None}
        found = Listing()
        for key, data in self.store.read_many(list(ids)).items():
            checkpoint_id = ids[key]
            if isinstance(data, BaseException):
                found.unreadable[checkpoint_id] = str(data)
                continue
            try:
                manifest = Manifest.from_bytes(data, where=f"manifest {checkpoint_id}")
            except IntegrityError as e:
                found.unreadable[checkpoint_id] = str(e)
                continue
            found.checkpoints.append(manifest)
        found.checkpoints.sort(key=lambda m: (m.created, m.id), reverse=True)
        committed = {m.id for m in found.checkpoints}
        for key, entry in self.store.list(pending_prefix(session)).items():
            checkpoint_id = pending_id(key)
            if checkpoint_id is not None and checkpoint_id not in committed:
                found.pending[checkpoint_id] = entry.mtime
        return found

    def checkpoints(self, session: str) -> list[Manifest]:
        """Committed checkpoints of ``session``, newest first."""
        return self.listing(session).checkpoints

    def resolve(self, session: str, ref: str) -> Manifest:
        """The checkpoint named by ``ref``: ``latest``, a full id or a unique prefix of one."""
        checkpoints = self.checkpoints(session)
        if not checkpoints:
            raise CheckpointNotFound(
                f"no checkpoint of session {session!r} in store {self.store.display_url}; "
                "run %checkpoint first, or see the sessions there with `jupyter pause list`"
            )
        if ref in ("latest", "", None):
            return checkpoints[0]
        matches = [m for m in checkpoints if m.id == ref] or [m for m in checkpoints if m.id.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            newest = ", ".join(m.id for m in checkpoints[:3])
            raise CheckpointNotFound(
                f"no checkpoint {ref!r} in session {session!r} (newest: {newest}); "
                "see them all with `jupyter pause list --session " + session + "`"
            )
        raise CheckpointNotFound(
            f"{ref!r} matches {len(matches)} checkpoints of session {session!r}; give more of the id"
        )

    def write_pending(self, session: str, checkpoint_id: str, created: float, blobs: list[str]) -> None:
        """Note a checkpoint being written, so cleanup leaves its fresh blobs alone."""
        note = {"id": checkpoint_id, "created": created, "blobs": blobs}
        self.store.write(pending_key(session, checkpoint_id), json.dumps(note).encode())

    def commit(self, manifest: Manifest, signing_key: str | None = None) -> None:
        """Write the manifest (the checkpoint now exists), then drop its pending note."""
        self.store.write(manifest_key(manifest.session, manifest.id), manifest.to_bytes(signing_key))
        self.store.delete([pending_key(manifest.session, manifest.id)])
