"""The protocol between the Jupyter server and a kernel: what they say to each other, and how it travels.

- ``messages``: every request (server to kernel: ``PauseRequest``, ``ResumeRequest``,
  ``HoldRequest``, and ``SafePointRequest``, the pause request left for a busy loop) and every
  reply (``PauseReply``, ``ResumeReply``, ``HoldReply``, ``ErrorReply``) as frozen dataclasses;
  the version ``PROTOCOL``; ``RemoteError``.
- ``wire``: a request as JSON inside one fixed line of Python (``call_source``), decoded in the
  kernel with its version and field types checked (``decode_request``); a reply as one line
  marked with ``PREFIX`` (``reply_line``), found among the kernel's other output (``parse_reply``).
- ``channel``: the way into a kernel busy in a ``steps`` loop (marker, request and reply files in
  the Jupyter runtime folder, and SIGUSR1).
- ``nodestate``: what the server tells its kernels about its node (its preemption watchers, and
  whether a pause fits the notice), a record in the runtime folder that the status widget shows.
- ``runtime``: the files both keep in the Jupyter runtime folder, written whole, kept while their
  process runs.

The kernel's side (decode a request, run it through ``session`` and ``loops``, print the reply) is
``jupyter_pause.kernel.remote``, which the line ``call_source`` builds imports in the kernel.

Why execute, and not a message type of its own. The server could send a named message, as
jupyter-resource-usage does with ``usage_request`` on the control channel. But ipykernel builds
its handler tables from its own fixed list of message types when the kernel starts, and answers
an unknown type with a logged warning and no reply; ``usage_request`` works because ipykernel
itself implements it (since 6.9). A message of jupyter-pause's own would need a handler
patched into the running kernel, or a comm target registered there, both done by code that
jupyter_pause ran in that kernel beforehand. An ``execute_request`` needs nothing beforehand:
any kernel whose environment has jupyter-pause installed can be asked, including one started
before the extension loaded or in which jupyter_pause was never imported; the reply comes back
as a prefixed line in its printed output, because that is all execute returns. The cost: the
call goes into the kernel's execution queue (it waits for a running cell, and the kernel shows
busy while it runs, though it stores no history and binds no name), and its reply must be picked
out of whatever else the kernel prints. A control-channel message would be answered while a cell runs;
but a checkpoint taken from another thread while the user's code mutates the namespace would
not be consistent, and a kernel busy in a synchronous cell reads no shell message at all. Hence
``channel``: a busy ``steps`` loop is asked by file and signal, and answers at its next safe
point, between two steps.

Imports: the standard library, ``jupyter_core``, ``jupyter_pause.errors`` (and
``jupyter_pause.vocabulary``); never ``kernel/``, ``session/`` or anything that loads IPython or
torch: the server and the command line import this package.
"""

from __future__ import annotations

from .messages import (
    PROTOCOL,
    ErrorReply,
    HoldReply,
    HoldRequest,
    PauseReply,
    PauseRequest,
    RemoteError,
    Reply,
    Request,
    ResumeReply,
    ResumeRequest,
    SafePointRequest,
)
from .wire import PREFIX, call_source, decode_reply, decode_request, encode_request, parse_reply, reply_line

__all__ = [
    "PREFIX",
    "PROTOCOL",
    "ErrorReply",
    "HoldReply",
    "HoldRequest",
    "PauseReply",
    "PauseRequest",
    "RemoteError",
    "Reply",
    "Request",
    "ResumeReply",
    "ResumeRequest",
    "SafePointRequest",
    "call_source",
    "decode_reply",
    "decode_request",
    "encode_request",
    "parse_reply",
    "reply_line",
]
