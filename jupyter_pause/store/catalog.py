"""How checkpoints are found, listed, told apart (intact or damaged) and committed (their keys come from ``layout``)."""

from __future__ import annotations

import calendar
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..errors import CheckpointDamaged, CheckpointNotFound
from .encryption import DecryptionError
from .integrity import Damage, check, read_manifest
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
from .signing import Keys
from .storage import Entry, Store


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
    #: Intact checkpoints of other lineages, set aside by ``following`` (id: why): "latest"
    #: passes over them, asking by id still finds them.
    elsewhere: dict[str, str] = field(default_factory=dict)
    aside: list[Manifest] = field(default_factory=list, repr=False)
    #: Damaged only to this reader: intact manifests of a newer format (a newer release wrote them).
    newer: set[str] = field(default_factory=set)

    def following(self, paused_from: str | None) -> Listing:
        """This listing with "latest" kept to the lineage of checkpoint ``paused_from`` (the one the
        session was paused from), the other lineages' checkpoints set aside and named.

        For a store without signing: there a checkpoint that starts another lineage in the
        session may have been written by anyone with the store's credentials, and it never
        becomes "latest" for the server's resume. Unchanged when ``paused_from`` is not an intact
        checkpoint here (nothing tells which lineage is the session's).
        """
        lineage = next((m.lineage for m in self.checkpoints if m.id == paused_from), None)
        if lineage is None:
            return self
        aside = [m for m in self.checkpoints if m.lineage != lineage]
        why = (
            "not resumed as latest: it starts lineage {lineage} (written on {node}), not {paused}, the one this "
            "session was paused from, and with signing off nothing proves who wrote it; resume it by id if it is yours"
        )
        return replace(
            self,
            checkpoints=[m for m in self.checkpoints if m.lineage == lineage],
            elsewhere={m.id: why.format(lineage=m.lineage, node=m.node, paused=lineage) for m in aside},
            aside=aside,
        )

    def newer_elsewhere(self, than: Manifest) -> dict[str, str]:
        """Checkpoints of other lineages (see ``following``) newer than ``than``, newest first."""
        return {m.id: self.elsewhere[m.id] for m in self.aside if m.created > than.created}

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
            return Choice(newest, self.newer_damaged(newest), self.newer_elsewhere(newest))
        ids = [m.id for m in self.checkpoints + self.aside] + list(self.damaged) + list(self.unreadable)
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
        for manifest in self.checkpoints + self.aside:
            if manifest.id == found:
                return Choice(manifest, {})
        why = self.damaged.get(found) or f"its manifest cannot be read from the store: {self.unreadable[found]}"
        raise CheckpointDamaged(f"checkpoint {found} of session {self.session!r} is damaged: {why}; {self._intact()}")

    def passing_over(self, known: dict[str, str]) -> Listing:
        """This listing with the checkpoints in ``known`` (id: why; blob damage a reader found
        before) moved from the intact ones to the damaged ones."""
        found = [m for m in self.checkpoints if m.id in known]
        if not found:
            return self
        taken = {**self.taken, **{m.id: m.created for m in found}}
        damaged = {**self.damaged, **{m.id: known[m.id] for m in found}}
        newest_first = sorted(damaged, key=lambda i: (taken[i], i), reverse=True)
        return replace(
            self,
            checkpoints=[m for m in self.checkpoints if m.id not in known],
            damaged={i: damaged[i] for i in newest_first},
            taken=taken,
        )

    def refusal(self, store: Store, manifest: Manifest, why: str) -> CheckpointDamaged:
        """The error for checkpoint ``manifest``, asked for by id, whose blobs are damaged
        (``why``, as ``describe`` says it): the damage, the newest checkpoint here whose blobs
        verify (read, newest first, until one does), and how to bring back what verifies instead."""
        intact = next((m for m in self.checkpoints if m.id != manifest.id and not check(store, m)), None)
        other = (
            f"the newest intact checkpoint is {intact.id} (resume it by id, or resume 'latest')"
            if intact is not None
            else "no other checkpoint of this session is intact"
        )
        return CheckpointDamaged(
            f"checkpoint {manifest.id} of session {self.session!r} is damaged: {why}; "
            f"{other}; or bring back what verifies of it with allow_partial (%resume --allow-partial)"
        )

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


#: Why a resume passed over the checkpoint its session was paused from: it is not in the store.
GONE = "gone: the checkpoint this session was paused from is no longer in the store"


def passed_over_note(passed_over: dict[str, str], used: str) -> str:
    """One line naming the checkpoints a resume of "latest" passed over (damaged ones, other
    lineages' set aside by ``Listing.following``, and first, loudly, the one the session was
    paused from when it is gone), or "" when it passed over none."""
    gone = [
        f"the checkpoint this session was paused from, {i}, is gone; resumed {used}, older"
        for i, why in passed_over.items()
        if why == GONE
    ]
    named = "; ".join(
        f"checkpoint {i} {'was passed over' if why.startswith('not resumed') else 'is damaged'}: {why}"
        for i, why in passed_over.items()
        if why != GONE
    )
    return "; ".join(gone + ([f"{named}; using {used}, the newest intact checkpoint, instead"] if named else []))


@dataclass(frozen=True)
class Decision:
    """What a reader that listed and verified a session's manifests chose, for the one that
    restores to act on without listing the store again: the checkpoints to try, newest first
    (one, when asked for by id), and the others passed over (id: why), with when each was taken.

    The restorer reads each candidate's manifest by id (verifying it again: it may have
    changed since) and its blobs, and restores the first whose blobs verify. ``manifests``:
    candidates' manifests as the reader read them (``Manifest.as_read``), which the restorer
    verifies with its own key instead of reading them again.
    """

    candidates: tuple[str, ...]
    passed_over: dict[str, str] = field(default_factory=dict)
    taken: dict[str, float] = field(default_factory=dict)
    manifests: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def of(cls, listing: Listing, choice: Choice, by_id: bool) -> Decision:
        """The decision a listing (already kept to a lineage where it should be) gives for ``choice``."""
        if by_id:
            return cls((choice.manifest.id,))
        aside = {m.id: m.created for m in listing.aside}
        return cls(
            tuple(m.id for m in listing.checkpoints),
            {**listing.damaged, **listing.elsewhere},
            {**listing.taken, **aside},
        )

    def missing(self, listing: Listing, paused_from: str | None) -> Decision:
        """This decision, with checkpoint ``paused_from`` (the one the session was paused from, as
        its signed status says) passed over as ``GONE`` when ``listing`` holds it no more."""
        held = {m.id for m in listing.checkpoints + listing.aside} | set(listing.damaged) | set(listing.unreadable)
        if not paused_from or paused_from in held:
            return self
        return replace(
            self,
            passed_over={paused_from: GONE, **self.passed_over},
            taken={**self.taken, paused_from: _id_time(paused_from)},
        )

    def newer(self, than: Manifest | None) -> dict[str, str]:
        """The checkpoints passed over that are newer than ``than`` (all of them for None), newest first."""
        newer = {i: why for i, why in self.passed_over.items() if than is None or self.taken.get(i, 0.0) > than.created}
        return dict(sorted(newer.items(), key=lambda kv: (self.taken.get(kv[0], 0.0), kv[0]), reverse=True))


@dataclass
class Choice:
    """The checkpoint a reader goes to, and the newer ones it passed over (id: why): damaged ones,
    and other lineages' (``elsewhere``, see ``Listing.following``)."""

    manifest: Manifest
    passed_over: dict[str, str]
    elsewhere: dict[str, str] = field(default_factory=dict)

    @property
    def note(self) -> str:
        """One line saying which checkpoints were passed over, or "" when none were."""
        return passed_over_note({**self.passed_over, **self.elsewhere}, self.manifest.id)


class Catalog:
    """Finds sessions and checkpoints in a store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def sessions(self) -> list[str]:
        """Names of every session that has anything in the store."""
        names = {session_of(key) for key in self.store.list(SESSIONS)}
        return sorted(n for n in names if n is not None)

    def listing(self, session: str, key: Keys = None, listed: Mapping[str, Entry] | None = None) -> Listing:
        """Every committed checkpoint of ``session`` (newest first) plus damaged, unreadable and
        pending ones; with a signing ``key``, a manifest it did not sign is damaged too.

        ``listed``: the session's manifests and notes as the caller listed them already (a cleanup
        lists each once: ``survey``); by default both are listed here, the notes after the
        manifests are read."""
        keys = self.store.list(manifest_prefix(session)) if listed is None else listed
        ids = {key: checkpoint_id for key in keys if (checkpoint_id := manifest_id(key)) is not None}
        found = Listing(session=session, where=self.store.display_url)
        damaged: dict[str, Damage] = {}
        for path, data in self.store.read_many(list(ids)).items():
            checkpoint_id = ids[path]
            if isinstance(data, DecryptionError):
                damaged[checkpoint_id] = Damage(data.why)
                continue
            if isinstance(data, BaseException):
                found.unreadable[checkpoint_id] = str(data)
                continue
            manifest = read_manifest(data, checkpoint_id, key, session)
            if isinstance(manifest, Damage):
                damaged[checkpoint_id] = manifest
            else:
                found.checkpoints.append(manifest)
        found.checkpoints.sort(key=lambda m: (m.created, m.id), reverse=True)
        committed = {m.id for m in found.checkpoints}
        notes = self.store.list(pending_prefix(session)) if listed is None else listed
        for path, entry in notes.items():
            checkpoint_id = pending_id(path)
            if checkpoint_id is not None and checkpoint_id not in committed:
                found.pending[checkpoint_id] = entry.mtime
        for checkpoint_id, damage in damaged.items():
            found.taken[checkpoint_id] = damage.created or _id_time(checkpoint_id)
            if damage.newer:
                found.newer.add(checkpoint_id)
        for checkpoint_id in sorted(damaged, key=lambda i: (found.taken[i], i), reverse=True):
            why = damaged[checkpoint_id].why
            if checkpoint_id in found.pending and why.startswith("torn write"):
                why += "; its writer stopped while committing it"
            found.damaged[checkpoint_id] = why
        return found

    def manifest(self, session: str, checkpoint_id: str, key: Keys = None) -> Manifest | Damage:
        """Checkpoint ``checkpoint_id``'s manifest, verified (a ``Damage`` when it does not),
        read by its key alone: no listing."""
        try:
            data = self.store.read(manifest_key(session, checkpoint_id))
        except DecryptionError as e:
            return Damage(e.why)
        return read_manifest(data, checkpoint_id, key, session)

    def checkpoints(self, session: str, key: Keys = None) -> list[Manifest]:
        """Intact committed checkpoints of ``session``, newest first."""
        return self.listing(session, key).checkpoints

    def choose(self, session: str, ref: str, key: Keys = None, paused_from: str | None = None) -> Choice:
        """The checkpoint named by ``ref`` (see ``Listing.resolve``) and the ones passed over.

        Without a signing ``key``, "latest" stays in the lineage of ``paused_from`` (see
        ``Listing.following``); with one, every checkpoint listed was signed by it.
        """
        listing = self.listing(session, key)
        return (listing if key else listing.following(paused_from)).resolve(ref)

    def resolve(self, session: str, ref: str, key: Keys = None) -> Manifest:
        """The checkpoint named by ``ref``: ``latest`` (the newest intact one), a full id or a
        unique prefix of one; a damaged one raises ``CheckpointDamaged`` saying why."""
        return self.choose(session, ref, key).manifest

    def write_pending(self, session: str, checkpoint_id: str, created: float, blobs: list[str]) -> None:
        """Note a checkpoint being written, so cleanup leaves its fresh blobs alone."""
        note = {"id": checkpoint_id, "created": created, "blobs": blobs}
        self.store.write(pending_key(session, checkpoint_id), json.dumps(note).encode())

    def commit(self, manifest: Manifest, signing_key: Keys = None) -> None:
        """Write the manifest (the checkpoint now exists), then drop its pending note."""
        self.store.write(manifest_key(manifest.session, manifest.id), manifest.to_bytes(signing_key))
        self.store.delete([pending_key(manifest.session, manifest.id)])


def _id_time(checkpoint_id: str) -> float:
    """The end of the second a checkpoint id names (ids are ``YYYYMMDD-HHMMSS-xxxxxx``, UTC)."""
    return calendar.timegm(time.strptime(checkpoint_id[:15], "%Y%m%d-%H%M%S")) + 1.0
