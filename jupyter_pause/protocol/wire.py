"""How the messages travel: a request as JSON inside one fixed line of Python, a reply as one prefixed line.

Server side, ``call_source`` turns a request into the line the server runs in the kernel: a call
of ``call`` in ``KERNEL_MODULE`` with the request's JSON text as its only argument, a string
literal, so no value (a session name, a path) is ever pasted into source as code. Kernel side,
``decode_request`` checks the version and every field and gives the typed request back. The
kernel prints its reply as ``reply_line``; server side, ``parse_reply`` finds that line among
whatever else the kernel printed and returns the typed reply, or raises ``RemoteError`` saying
what came instead.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from dataclasses import MISSING, asdict, fields
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from ..errors import PauseError
from .messages import PROTOCOL, REPLIES, REQUESTS, ErrorReply, RemoteError, Reply, Request

#: The kernel-side module whose ``call`` runs a request (imported in the kernel, never by the server).
KERNEL_MODULE = "jupyter_pause.kernel.remote"

#: Starts every reply line; nothing a notebook prints by accident starts this way.
PREFIX = f"[jupyter-pause reply v{PROTOCOL}] "

#: What a kernel that cannot read a request should do about it.
ALIGN = "install the same jupyter-pause version in the kernel's environment as in the server's"

R = TypeVar("R", bound=Reply)
M = TypeVar("M", bound="Request | Reply")


# -- typed fields ----------------------------------------------------------------------------


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a decoded JSON ``value`` is of type ``hint`` (str, int, float, list[...], dict[str, ...], Any)."""
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin is list:
        (item,) = get_args(hint) or (Any,)
        return isinstance(value, list) and all(_conforms(v, item) for v in value)
    if origin is dict:
        _, item = get_args(hint) or (str, Any)
        return isinstance(value, dict) and all(isinstance(k, str) and _conforms(v, item) for k, v in value.items())
    if isinstance(value, bool):
        return hint is bool
    if hint is float:
        return isinstance(value, int | float)  # a writer may put 2 for 2.0
    return isinstance(hint, type) and isinstance(value, hint)


def _type_name(hint: Any) -> str:
    if isinstance(hint, type) and not isinstance(hint, types.GenericAlias):
        return hint.__name__
    return str(hint).replace("typing.", "")


def typed(cls: type[M], data: Mapping[str, Any], *, extra: bool) -> M:
    """Build message ``cls`` from decoded JSON, checking each field's type; ``ValueError`` saying
    which field is missing or wrong. Keys that are not fields are ignored when ``extra``, else refused."""
    hints = get_type_hints(cls)
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown and not extra:
        raise ValueError(f"has {', '.join(unknown)}, which this version does not know")
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ValueError(f"lacks {f.name!r}")
            continue
        if not _conforms(data[f.name], hints[f.name]):
            raise ValueError(f"has {f.name}={data[f.name]!r}, not a {_type_name(hints[f.name])}")
        values[f.name] = data[f.name]
    return cls(**values)


# -- requests --------------------------------------------------------------------------------


def encode_request(request: Request) -> str:
    """The request as JSON text: its version, entry point and fields (those of the entry's own
    request class: a ``SafePointRequest`` travels as the ``PauseRequest`` it is)."""
    kind = REQUESTS.get(request.entry)
    if kind is None or not isinstance(request, kind):
        raise PauseError(f"{type(request).__name__} is not a request a kernel can run; send one of {_entries()}")
    args = {f.name: getattr(request, f.name) for f in fields(kind)}
    try:
        typed(kind, args, extra=False)
        return json.dumps(
            {"protocol": PROTOCOL, "entry": request.entry, "args": args}, ensure_ascii=True, allow_nan=False
        )
    except (TypeError, ValueError) as e:
        raise PauseError(
            f"cannot send the {request.entry} request {args!r} to a kernel ({e}): "
            "give each field a value of its declared type, numbers finite"
        ) from e


def decode_request(text: str) -> Request:
    """Kernel side: the request ``encode_request`` wrote; ``PauseError`` if this kernel cannot run it."""
    try:
        decoded = json.loads(text)
    except ValueError as e:
        raise PauseError(f"the request is not valid JSON ({e}): {ALIGN}") from e
    got = decoded.get("protocol") if isinstance(decoded, dict) else None
    if got != PROTOCOL:
        raise PauseError(
            f"the server speaks protocol {got!r} and this kernel's jupyter-pause speaks {PROTOCOL}: {ALIGN}"
        )
    entry, args = decoded.get("entry"), decoded.get("args")
    kind = REQUESTS.get(entry) if isinstance(entry, str) else None
    if kind is None:
        raise PauseError(f"this kernel's jupyter-pause has no entry point {entry!r} (it has {_entries()}): {ALIGN}")
    if not isinstance(args, dict):
        raise PauseError(f"the server's {entry} request has args={args!r}, not an object: {ALIGN}")
    try:
        return typed(kind, args, extra=False)
    except ValueError as e:
        raise PauseError(f"the server's {entry} request {e}: {ALIGN}") from e


def call_source(request: Request) -> str:
    """The line of Python that runs ``request`` in a kernel, the request carried as JSON data.

    The line binds no name in the user's namespace and evaluates to ``None`` (nothing displayed).
    """
    text = encode_request(request)
    # The request is JSON text turned into a string literal by repr: data, whatever it holds.
    return f"__import__({KERNEL_MODULE!r}, fromlist=['call']).call({text!r})"


def _entries() -> str:
    return ", ".join(REQUESTS)


# -- replies ---------------------------------------------------------------------------------


def reply_json(reply: Reply) -> str:
    """The reply as one line of ASCII JSON, ``{"reply": kind, ...fields}`` (newlines in values are escaped)."""
    return json.dumps({"reply": reply.kind, **asdict(reply)}, ensure_ascii=True)


def reply_line(reply: Reply) -> str:
    """The line the kernel prints: ``PREFIX`` then the JSON."""
    return PREFIX + reply_json(reply)


def decode_reply(text: str, expected: type[R] = Reply) -> R:  # type: ignore[assignment]
    """The reply in JSON ``text``; ``RemoteError`` if it is malformed or not an ``expected`` one.
    Fields a newer kernel added are ignored."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise RemoteError(f"the kernel's reply is not valid JSON ({e}): {text[:200]!r}") from e
    if not isinstance(data, dict):
        raise RemoteError(f"the kernel's reply is not a JSON object: {text[:200]!r}")
    kind = data.get("reply")
    target = REPLIES.get(kind) if isinstance(kind, str) else None
    if target is None or not issubclass(target, expected):
        raise RemoteError(f"the kernel sent a {kind!r} reply where a {expected.kind or 'known'} one was due")
    try:
        return typed(target, {k: v for k, v in data.items() if k != "reply"}, extra=True)  # type: ignore[return-value]
    except ValueError as e:
        raise RemoteError(f"the kernel's {target.kind} reply {e}") from e


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
    reply = decode_reply(found)
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
