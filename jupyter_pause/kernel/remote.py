"""The kernel's side of the server's calls: run a request through the session, print one reply line.

The server runs the line ``jupyter_pause.protocol.call_source`` builds, which imports this module
and hands ``call`` the request's JSON text. ``call`` decodes it (``protocol.decode_request``
checks the version and every field), runs the entry point of its type (``pause``, ``resume``, and
``hold``, which reads a checkpoint ahead of its restore while the resume waits) and prints exactly
one reply line (``protocol.reply_line``); a failure of any kind becomes an ``ErrorReply``, so the
server always learns what happened.

The session is imported inside the entry points: importing this module loads neither IPython nor torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import PauseError
from ..protocol import (
    ErrorReply,
    HoldReply,
    HoldRequest,
    PauseReply,
    PauseRequest,
    Reply,
    Request,
    ResumeReply,
    ResumeRequest,
    decode_request,
    reply_line,
)


def _pause(request: PauseRequest) -> PauseReply:
    from ..session.checkpoint import checkpoint
    from ..session.options import CheckpointOptions

    return PauseReply.of(checkpoint(options=CheckpointOptions(session=request.session, trigger=request.trigger)))


def _resume(request: ResumeRequest) -> ResumeReply:
    from ..session import preimport

    preimport.begin(request.imports, request.import_files)  # beside everything below, which imports and reads first
    from ..session.cycle import resume_and_verify
    from ..session.options import ResumeOptions
    from ..store.catalog import Decision
    from . import recorder

    moments: dict[str, float | None] = dict(request.moments)
    handed = {checkpoint_id: text.encode() for checkpoint_id, text in request.manifests.items()}
    decision = (
        Decision(tuple(request.candidates), dict(request.passed_over), dict(request.taken), handed)
        if request.candidates
        else None
    )
    options = ResumeOptions(
        request.checkpoint,
        session=request.session,
        map_location=request.map_location,
        paused_from=request.paused_from or None,
        allow_partial=request.allow_partial,
        decision=decision,
        rebuild=request.rebuild,
    )
    recorder.install()  # this kernel goes on recording its cells, for the next checkpoint's recipes
    by_kernel = not request.report_by_server
    cycle = resume_and_verify(options=options, moments=moments, write_report=by_kernel, record=by_kernel)
    return ResumeReply.of(cycle)


def _hold(request: HoldRequest) -> HoldReply:
    from ..session.holding import hold

    held = hold(request.session, request.checkpoint, request.manifest)
    return HoldReply(held.checkpoint, held.blobs, held.bytes, held.bad, held.skipped)


#: The entry point of each request type; a subclass of a request runs its base's entry point.
ENTRIES: dict[type[Request], Callable[[Any], Reply]] = {
    PauseRequest: _pause,
    ResumeRequest: _resume,
    HoldRequest: _hold,
}


def reply_to(request: Request) -> Reply:
    """Run the entry point of ``request``; its reply, or an ``ErrorReply`` for a failure."""
    try:
        work = next((ENTRIES[kind] for kind in type(request).__mro__ if kind in ENTRIES), None)
        if work is None:
            raise PauseError(f"no kernel entry point runs a {type(request).__name__}")
        return work(request)
    except Exception as e:  # every failure goes back to the server, by type and message
        return ErrorReply.of(request.entry or "?", e)


def _answer(request: Request) -> None:
    """Run ``request`` and print its one reply line."""
    print(reply_line(reply_to(request)), flush=True)


def pause(session: str, trigger: str = "button") -> None:
    """Checkpoint the user's namespace into ``session``; print a ``PauseReply`` line."""
    _answer(PauseRequest(session, trigger))


def resume(checkpoint: str, session: str, map_location: str = "auto", moments: dict[str, float] | None = None) -> None:
    """Restore ``checkpoint`` of ``session`` and run the restore test; print a ``ResumeReply`` line."""
    _answer(ResumeRequest(checkpoint, session, map_location, dict(moments or {})))


def call(request: str) -> None:
    """Run the request whose JSON text the server's line passes; print its one reply line."""
    try:
        decoded = decode_request(request)
    except PauseError as e:
        print(reply_line(ErrorReply.of("?", e)), flush=True)
        return
    _answer(decoded)
