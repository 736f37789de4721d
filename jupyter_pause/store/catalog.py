"""Where things live in a store, and how checkpoints are found, listed and told apart.

Layout under the store's root::

    sessions/<session>/checkpoints/<id>.json   manifest: the checkpoint exists once this exists
    sessions/<session>/pending/<id>.json       write-ahead note of a checkpoint being written
    sessions/<session>/blobs/<xx>/<digest>     content-addressed data, shared by checkpoints
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass, field

from ..errors import CheckpointNotFound, IntegrityError, PauseError
from .manifest import Manifest
from .storage import Store

SESSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
ID_PATTERN = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")


def check_session(name: str) -> str:
    """Return ``name`` if it is a valid session name, else raise with what is allowed."""
    if not isinstance(name, str) or not SESSION_PATTERN.match(name):
        shown = repr(name) if len(str(name)) <= 60 else repr(str(name)[:60]) + "..."
        raise PauseError(
            f"invalid session name {shown}: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def new_checkpoint_id(now: float | None = None) -> str:
    """A new id that sorts by creation time: ``YYYYMMDD-HHMMSS-xxxxxx`` (UTC)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(3)}"


def session_prefix(session: str) -> str:
    return f"sessions/{check_session(session)}"


def manifest_key(session: str, checkpoint_id: str) -> str:
    return f"{session_prefix(session)}/checkpoints/{checkpoint_id}.json"


def pending_key(session: str, checkpoint_id: str) -> str:
    return f"{session_prefix(session)}/pending/{checkpoint_id}.json"


def blob_key(session: str, digest: str) -> str:
    return f"{session_prefix(session)}/blobs/{digest[:2]}/{digest}"


def blob_prefix(session: str) -> str:
    return f"{session_prefix(session)}/blobs/"


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
        names = {key.split("/")[1] for key in self.store.list("sessions/") if key.count("/") >= 2}
        return sorted(n for n in names if SESSION_PATTERN.match(n))

    def listing(self, session: str) -> Listing:
        """Every committed checkpoint of ``session`` (newest first) plus unreadable and pending ones."""
        prefix = f"{session_prefix(session)}/"
        entries = self.store.list(f"{prefix}checkpoints/")
        found = Listing()
        keys = [k for k in entries if k.endswith(".json")]
        for key, data in self.store.read_many(keys).items():
            checkpoint_id = key.rsplit("/", 1)[1][: -len(".json")]
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
        for key, entry in self.store.list(f"{prefix}pending/").items():
            checkpoint_id = key.rsplit("/", 1)[1][: -len(".json")]
            if checkpoint_id not in committed:
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
