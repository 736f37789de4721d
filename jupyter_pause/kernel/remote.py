"""The contract between the Jupyter server and a kernel: the calls the server makes, and their replies.

Server side, ``call_source`` builds the one line of Python sent to the kernel: a fixed call of
``call`` with a JSON request as its only argument, so no value (a session name, a path) is ever
pasted into source as code. Kernel side, ``call`` decodes the request and runs an entry point
(``pause``, ``resume``), which does the work through the engine and prints exactly one reply line,
marked with ``PREFIX``. Server side again, ``parse_reply`` finds that line among whatever else the
kernel printed and returns the typed reply, or raises ``RemoteError`` saying what came instead.

The server imports this module: it imports neither IPython nor torch (the engine is imported
inside the kernel-side functions).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar, TypeVar, get_origin, get_type_hints

from ..errors import PauseError

#: Version of the request and reply format; a kernel that speaks another one refuses the call.
PROTOCOL = 1

#: Starts every reply line; nothing a notebook prints by accident starts this way.
PREFIX = f"[jupyter-pause reply v{PROTOCOL}] "

R = TypeVar("R", bound="Reply")


class RemoteError(PauseError):
    """The kernel answered a call with an error, or with no reply at all."""

    def __init__(self, message: str, error: str = "") -> None:
        super().__init__(message)
        self.error = error


# -- replies ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """Base of the replies: one JSON object on one line, ``{"reply": kind, ...fields}``."""

    kind: ClassVar[str] = ""

    def to_json(self) -> str:
        """The reply as one line of ASCII JSON (newlines in values are escaped)."""
        return json.dumps({"reply": self.kind, **asdict(self)}, ensure_ascii=True)

    def to_line(self) -> str:
        """The line the kernel prints: ``PREFIX`` then the JSON."""
        return PREFIX + self.to_json()

    @classmethod
    def from_json(cls: type[R], text: str) -> R:
        """Decode a reply; ``RemoteError`` if it is malformed or not of this class."""
        try:
            data = json.loads(text)
        except ValueError as e:
            raise RemoteError(f"the kernel's reply is not valid JSON ({e}): {text[:200]!r}") from e
        if not isinstance(data, dict):
            raise RemoteError(f"the kernel's reply is not a JSON object: {text[:200]!r}")
        kind = data.get("reply")
        target = REPLIES.get(kind) if isinstance(kind, str) else None
        if target is None or not issubclass(target, cls):
            raise RemoteError(f"the kernel sent a {kind!r} reply where a {cls.kind or 'known'} one was due")
        return _from_dict(target, data)  # type: ignore[return-value]


@dataclass(frozen=True)
class PauseReply(Reply):
    """What ``pause`` did: the checkpoint it committed, and what it could not save."""

    kind: ClassVar[str] = "pause"

    checkpoint: str
    summary: str = ""
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ResumeReply(Reply):
    """What ``resume`` did: the checkpoint it restored, the restore test's verdict, and the run report."""

    kind: ClassVar[str] = "resume"

    checkpoint: str
    verdict: str
    detail: str = ""
    summary: str = ""
    report: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ErrorReply(Reply):
    """An entry point failed: the exception's type and message, as the kernel saw them."""

    kind: ClassVar[str] = "error"

    entry: str
    error: str
    message: str


REPLIES: dict[str, type[Reply]] = {r.kind: r for r in (PauseReply, ResumeReply, ErrorReply)}


def _from_dict(cls: type[Reply], data: dict[str, Any]) -> Reply:
    """Build ``cls`` from decoded JSON, checking each field's type; unknown keys are ignored."""
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise RemoteError(f"the kernel's {cls.kind} reply lacks {f.name!r}")
            continue
        expected = get_origin(hints[f.name]) or hints[f.name]
        if not isinstance(data[f.name], expected):
            raise RemoteError(f"the kernel's {cls.kind} reply has {f.name}={data[f.name]!r}, not a {expected.__name__}")
        values[f.name] = data[f.name]
    return cls(**values)


# -- kernel side -----------------------------------------------------------------------------


def _pause(session: str, trigger: str = "button") -> PauseReply:
    from ..session.checkpoint import checkpoint

    result = checkpoint(session=session, trigger=trigger)
    return PauseReply(result.manifest.id, result.summary(), [r.name for r in result.skipped])


def _resume(
    checkpoint: str, session: str, map_location: str = "auto", moments: dict[str, float] | None = None
) -> ResumeReply:
    from ..session.cycle import resume_and_verify

    cycle = resume_and_verify(checkpoint, session=session, map_location=map_location, moments=dict(moments or {}))
    verdict = cycle.verdict
    return ResumeReply(
        cycle.result.manifest.id,
        verdict.kind,
        verdict.details[-1] if verdict.details else "",
        f"{cycle.result.summary()}\n{verdict.summary()}",
        cycle.report.to_dict(),
    )


#: What each entry point does, as a function returning its reply; ``call`` and ``call_source`` use it.
ENTRIES: dict[str, Callable[..., Reply]] = {"pause": _pause, "resume": _resume}


def reply_to(entry: str, args: dict[str, Any]) -> Reply:
    """Kernel side: run entry point ``entry`` with ``args``; its reply, or an ``ErrorReply`` for a failure."""
    try:
        return ENTRIES[entry](**args)
    except Exception as e:  # every failure goes back to the server, by type and message
        return ErrorReply(entry, type(e).__name__, str(e))


def _answer(entry: str, args: dict[str, Any]) -> None:
    """Run ``entry`` and print its one reply line."""
    print(reply_to(entry, args).to_line(), flush=True)


def pause(session: str, trigger: str = "button") -> None:
    """Kernel side: checkpoint the user's namespace into ``session``; print a ``PauseReply``."""
    _answer("pause", {"session": session, "trigger": trigger})


def resume(checkpoint: str, session: str, map_location: str = "auto", moments: dict[str, float] | None = None) -> None:
    """Kernel side: restore ``checkpoint`` of ``session`` and run the restore test; print a ``ResumeReply``."""
    args = {"checkpoint": checkpoint, "session": session, "map_location": map_location, "moments": moments}
    _answer("resume", args)


def _decode(request: str) -> tuple[str, dict[str, Any]]:
    """The entry point and arguments of a request; ``PauseError`` if this kernel cannot run it."""
    try:
        decoded = json.loads(request)
    except ValueError as e:
        raise PauseError(f"the request is not valid JSON ({e})") from e
    if not isinstance(decoded, dict) or decoded.get("protocol") != PROTOCOL:
        got = decoded.get("protocol") if isinstance(decoded, dict) else None
        raise PauseError(
            f"the server speaks protocol {got!r} and this kernel's jupyter-pause speaks {PROTOCOL}: "
            "install the same jupyter-pause version in the kernel's environment as in the server's"
        )
    entry, args = decoded.get("entry"), decoded.get("args")
    if entry not in ENTRIES or not isinstance(args, dict):
        raise PauseError(
            f"this kernel's jupyter-pause has no entry point {entry!r} (it has {', '.join(ENTRIES)}): "
            "install the same jupyter-pause version in the kernel's environment as in the server's"
        )
    return entry, args


def call(request: str) -> None:
    """Kernel side: run the request that ``call_source`` built; print its one reply line."""
    try:
        entry, args = _decode(request)
    except PauseError as e:
        print(ErrorReply("?", type(e).__name__, str(e)).to_line(), flush=True)
        return
    _answer(entry, args)


# -- server side -----------------------------------------------------------------------------


def call_source(entry: str, **args: Any) -> str:
    """The line of Python that runs ``entry(**args)`` in a kernel, its arguments carried as JSON data.

    The line binds no name in the user's namespace and evaluates to ``None`` (nothing displayed).
    """
    work = ENTRIES.get(entry)
    if work is None:
        raise PauseError(f"no kernel entry point {entry!r}; there are {', '.join(ENTRIES)}")
    try:
        inspect.signature(work).bind(**args)
        request = json.dumps({"protocol": PROTOCOL, "entry": entry, "args": args}, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise PauseError(f"cannot call {entry} in the kernel with {sorted(args)}: {e}") from e
    # The request is JSON text turned into a string literal by repr: data, whatever it holds.
    return f"__import__({__name__!r}, fromlist=['call']).call({request!r})"


def parse_reply(output: str, expected: type[R]) -> R:
    """The ``expected`` reply found in what the kernel printed; ``RemoteError`` if it failed or sent none."""
    found = None
    for line in reversed(output.splitlines()):
        at = line.find(PREFIX)
        if at >= 0:
            found = line[at + len(PREFIX) :]
            break
    if found is None:
        raise RemoteError(f"the kernel sent no {expected.kind} reply; it printed {_excerpt(output)}")
    reply = Reply.from_json(found)
    if isinstance(reply, ErrorReply):
        raise RemoteError(f"{reply.error}: {reply.message}", reply.error)
    if not isinstance(reply, expected):
        raise RemoteError(f"the kernel sent a {reply.kind} reply where a {expected.kind} one was due")
    return reply


def _excerpt(output: str, limit: int = 600) -> str:
    """What the kernel printed, shortened to its end, for an error message."""
    text = output.strip()
    if not text:
        return "nothing"
    return repr(text if len(text) <= limit else "..." + text[-limit:])
