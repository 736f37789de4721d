"""Every message between the Jupyter server and a kernel, as frozen dataclasses, and the protocol version.

Requests go from the server to a kernel (``PauseRequest``, ``ResumeRequest``; ``SafePointRequest``
is the pause request left for a busy kernel's next safe point), replies come back
(``PauseReply``, ``ResumeReply``, or ``ErrorReply`` when the entry point failed). How they travel
is ``wire``'s business; this module only says what they hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import PauseError

#: Version of the request and reply format; a kernel that speaks another one refuses the call.
#: 2: a resume sends what was asked for ("latest" or an id) and ``paused_from``, for the kernel to choose.
#: 3: a resume sends the server's decision (``candidates``, ``passed_over``, ``taken``) for the kernel to follow.
#: 4: a resume names the slow imports (``imports``) the kernel begins beside the restore.
#: 5: a resume hands on the manifest the server read (``manifests``), and the server writes the
#:    run report and the resume's ledger events (``report_by_server``).
#: 6: a resume names the files of those imports (``import_files``) for the kernel to read ahead.
#: 7: ``hold``: the kernel of a resume that waits reads and verifies its checkpoint meanwhile.
PROTOCOL = 7


class RemoteError(PauseError):
    """The kernel answered a call with an error, or with no reply at all."""

    def __init__(self, message: str, error: str = "") -> None:
        super().__init__(message)
        self.error = error


# -- requests: server to kernel --------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """Base of the requests: which kernel entry point to run (``entry``), with the fields as its arguments."""

    entry: ClassVar[str] = ""


@dataclass(frozen=True)
class PauseRequest(Request):
    """Checkpoint the kernel's namespace into ``session``, recording what caused it (``trigger``)."""

    entry: ClassVar[str] = "pause"

    session: str
    trigger: str = "button"


@dataclass(frozen=True)
class SafePointRequest(PauseRequest):
    """A ``PauseRequest`` left for a busy kernel's next safe point (``channel``), made at ``requested``
    (seconds since the epoch). Sent the usual way, it travels as the plain ``PauseRequest``."""

    requested: float = field(kw_only=True)


@dataclass(frozen=True)
class ResumeRequest(Request):
    """Restore ``checkpoint`` of ``session`` into the kernel and run the restore test.

    ``checkpoint`` is what was asked for (``latest``, or an id), chosen by the kernel by the same
    rule as ``%resume``; ``paused_from`` is the checkpoint the session was paused from ("" when
    unknown); ``allow_partial`` brings back what verifies of a damaged one instead of refusing it.
    ``candidates``, ``passed_over`` and ``taken`` carry the server's ``Decision`` (the
    checkpoints to try, newest first, their manifests verified; those passed over, why, and when
    each was taken), so the kernel reads what the server chose instead of listing the store
    again; no ``candidates``: the kernel chooses itself. ``map_location`` is ``"auto"`` or
    ``"cpu"``; ``moments`` are the times (seconds since the epoch) of the steps before the
    kernel got the request, for the run report. ``rebuild`` False (``PauseServer.rebuild``) leaves
    out rebuilding by replay what the checkpoint could not save; a request without it rebuilds.
    ``imports``: modules the kernel starts importing on threads of its own before anything else
    (torch, where the checkpoint holds tensors), beside opening the store and reading the blobs;
    the restore waits for them before it unpickles (``session.preimport``); ``import_files``: the
    files of their modules (``Manifest.import_files``), which the kernel asks the disk for before
    it imports them. ``manifests``: the
    candidates' manifests as the server read them (id: ``Manifest.as_read``'s text), which the
    kernel verifies with its own key instead of reading them from the store. ``report_by_server``:
    the kernel leaves the run report and the resume's ledger events to the server, which writes
    them from the reply; with the blobs fetched onto the node, the kernel then opens no store
    client at all.
    """

    entry: ClassVar[str] = "resume"

    checkpoint: str
    session: str
    map_location: str = "auto"
    moments: dict[str, float] = field(default_factory=dict)
    paused_from: str = ""
    allow_partial: bool = False
    candidates: list[str] = field(default_factory=list)
    passed_over: dict[str, str] = field(default_factory=dict)
    taken: dict[str, float] = field(default_factory=dict)
    rebuild: bool = True
    imports: list[str] = field(default_factory=list)
    import_files: dict[str, list[str]] = field(default_factory=dict)
    manifests: dict[str, str] = field(default_factory=dict)
    report_by_server: bool = False


@dataclass(frozen=True)
class HoldRequest(Request):
    """Read and verify the blobs of ``checkpoint`` of ``session`` into the kernel ahead of its
    restore, and keep them for it: sent while the resume waits for resources. ``manifest``: its
    manifest as the server read it (``Manifest.as_read``'s text), which the kernel verifies with
    its own key; "": the kernel reads it from the store."""

    entry: ClassVar[str] = "hold"

    checkpoint: str
    session: str
    manifest: str = ""


#: The request of each entry point, by its name on the wire.
REQUESTS: dict[str, type[Request]] = {r.entry: r for r in (PauseRequest, ResumeRequest, HoldRequest)}


# -- replies: kernel to server ---------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """Base of the replies; ``kind`` names each on the wire."""

    kind: ClassVar[str] = ""


@dataclass(frozen=True)
class PauseReply(Reply):
    """What ``pause`` did: the checkpoint it committed, what it could not save, and its size."""

    kind: ClassVar[str] = "pause"

    checkpoint: str
    summary: str = ""
    skipped: list[str] = field(default_factory=list)
    bytes: int = 0
    #: What will not come back on another node, or not provably (``Manifest.elsewhere``).
    elsewhere: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, result: Any) -> PauseReply:
        """The reply for a committed checkpoint (a ``CheckpointResult``, or anything shaped like one)."""
        size = int((getattr(result.manifest, "stats", None) or {}).get("bytes_total", 0))
        elsewhere = list(getattr(result.manifest, "elsewhere", None) or [])
        return cls(result.manifest.id, result.summary(), [skip.name for skip in result.skipped], size, elsewhere)

    def elsewhere_note(self, shown: int = 3) -> str:
        """``; not on another node, or not provably: ...`` for the status line ("" when nothing)."""
        if not self.elsewhere:
            return ""
        more = len(self.elsewhere) - shown
        tail = f"; and {more} more (jupyter pause show {self.checkpoint})" if more > 0 else ""
        return "; not on another node, or not provably: " + "; ".join(self.elsewhere[:shown]) + tail


@dataclass(frozen=True)
class ResumeReply(Reply):
    """What ``resume`` did: the checkpoint it restored, the restore test's verdict, and the run report."""

    kind: ClassVar[str] = "resume"

    checkpoint: str
    verdict: str
    detail: str = ""
    summary: str = ""
    report: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, cycle: Any) -> ResumeReply:
        """The reply for a resume and its restore test (a ``Cycle``, or anything shaped like one)."""
        verdict = cycle.verdict
        return cls(
            cycle.result.manifest.id,
            verdict.kind,
            verdict.details[-1] if verdict.details else "",
            f"{cycle.result.summary()}\n{verdict.summary()}",
            cycle.report.to_dict(),
        )


@dataclass(frozen=True)
class HoldReply(Reply):
    """What ``hold`` read ahead: how many of the checkpoint's blobs the kernel holds, their
    bytes, and why each other one is not held (it is read again by the restore); ``skipped``:
    why nothing was read ahead ("" where it was)."""

    kind: ClassVar[str] = "hold"

    checkpoint: str
    blobs: int = 0
    bytes: int = 0
    bad: dict[str, str] = field(default_factory=dict)
    skipped: str = ""


@dataclass(frozen=True)
class ErrorReply(Reply):
    """An entry point failed: the exception's type and message, as the kernel saw them."""

    kind: ClassVar[str] = "error"

    entry: str
    error: str
    message: str

    @classmethod
    def of(cls, entry: str, error: BaseException) -> ErrorReply:
        """The reply for ``error``, raised while running entry point ``entry``."""
        return cls(entry, type(error).__name__, str(error))


#: Each reply, by its ``kind`` on the wire.
REPLIES: dict[str, type[Reply]] = {r.kind: r for r in (PauseReply, ResumeReply, HoldReply, ErrorReply)}
