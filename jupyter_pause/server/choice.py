"""Which checkpoint a server's resume restores, decided once from one listing of the store.

A resume of "latest" takes the newest checkpoint whose manifest verifies and whose blobs no
resume found damaged; without signing keys it keeps to the lineage of the checkpoint the session
was paused from. One asked for by id has its blobs verified before the resume is accepted. The
kernel follows the decision (``Decision``) and says which candidates it passed over and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol import ResumeRequest
from ..store.catalog import Catalog, Decision, Listing
from ..store.integrity import check, describe
from ..store.manifest import Manifest
from ..store.signing import Keyring
from ..store.storage import Store
from .kernelspecs import Kernel
from .status import Status


@dataclass(frozen=True)
class Asked:
    """What a resume was asked for: ``latest`` or an id, the checkpoint the session was paused
    from, and the kernelspec to start (None: the server's ``kernel_name``)."""

    checkpoint: str
    paused_from: str = ""
    allow_partial: bool = False
    decision: Decision | None = None
    kernel: Kernel | None = None

    def request(
        self, session: str, location: str, moments: dict[str, float], rebuild: bool, manifest: Manifest
    ) -> ResumeRequest:
        """What the kernel is asked to do for this resume: the server's ``Decision`` with it, so
        the kernel reads what the server chose instead of listing the store again, with the
        chosen ``manifest`` as read here for the kernel to verify, and the slow imports it
        can begin at once. The server writes the run report and ledger events from the reply."""
        decision = self.decision
        handed = decision is not None and manifest.id in decision.candidates and manifest.canonical is not None
        return ResumeRequest(
            self.checkpoint,
            session,
            location,
            moments,
            paused_from=self.paused_from,
            allow_partial=self.allow_partial,
            candidates=list(decision.candidates) if decision else [],
            passed_over=dict(decision.passed_over) if decision else {},
            taken=dict(decision.taken) if decision else {},
            rebuild=rebuild,
            imports=manifest.slow_imports(),
            import_files=manifest.import_files,
            manifests={manifest.id: manifest.as_read().decode()} if handed else {},
            report_by_server=True,
        )


class Choice:
    """The resume decisions of one store, with the keys of this server."""

    def __init__(self, store: Store, catalog: Catalog, keyring: Keyring | None) -> None:
        self.store = store
        self.catalog = catalog
        self.keyring = keyring

    def followed(self, session: str, status: Status | None) -> Listing:
        """The session's checkpoints, one listing of the store; without signing, kept to the
        lineage of the checkpoint it was paused from (``Listing.following``)."""
        listing = self.catalog.listing(session, self.keyring)
        if self.keyring is None and status is not None:
            listing = listing.following(status.checkpoint)
        return listing

    def listing(self, session: str, status: Status | None) -> Listing:
        """The session's checkpoints as its resume of "latest" sees them, those a resume found
        damaged in their blobs (``status.damaged``) among the damaged ones. The sessions panel
        shows the same."""
        return self.followed(session, status).passing_over(status.damaged if status is not None else {})

    def decide(
        self, session: str, checkpoint: str, status: Status | None, allow_partial: bool
    ) -> tuple[Manifest, Decision]:
        """What a resume restores, for the kernel to follow.

        "latest" is the newest checkpoint whose manifest verifies and whose blobs no resume
        found damaged; the kernel reads and verifies its blobs, and goes on to the next
        candidate when they are not whole. One asked for by id has its blobs verified here
        before the resume is accepted, so damage is refused at once (``CheckpointDamaged``, HTTP
        409, naming the newest intact checkpoint) unless ``allow_partial``.
        """
        followed = self.followed(session, status)
        known = status.damaged if status is not None else {}
        if checkpoint in ("latest", ""):
            listing = followed.passing_over(known)
            choice = listing.resolve(checkpoint)
            paused_from = status.checkpoint if status is not None else None
            return choice.manifest, Decision.of(listing, choice, by_id=False).missing(listing, paused_from)
        choice = followed.resolve(checkpoint)
        manifest = choice.manifest
        if not allow_partial:
            why = known.get(manifest.id) or describe(manifest, check(self.store, manifest))
            if why:
                raise followed.passing_over(known).refusal(self.store, manifest, why)
        return manifest, Decision.of(followed, choice, by_id=True)


def blob_damage(passed_over: dict[str, str], asked: Asked) -> dict[str, str]:
    """Of the checkpoints a kernel passed over, those it found damaged in their blobs: the
    server's candidates (their manifests verified), not the ones it had passed over itself."""
    decision = asked.decision
    if decision is None:
        return {}
    return {i: why for i, why in passed_over.items() if i in decision.candidates and i not in decision.passed_over}


def noted(detail: str, note: str) -> str:
    """A status detail, followed by the damaged checkpoints a resume passed over (when any)."""
    return f"{detail} ({note})" if note else detail
