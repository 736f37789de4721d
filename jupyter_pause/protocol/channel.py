"""The channel a pause request takes into a busy kernel: three small files and one signal.

A busy kernel reads no shell message until its cell ends, so the server cannot ask it anything the
usual way. A kernel running a ``steps`` loop therefore declares, by a marker file in the Jupyter
runtime folder named by its pid, that it handles ``SIGNAL`` (the handler only sets a flag) and
where its loop is. The server, seeing the marker of the kernel it manages (same pid, same
connection file), writes a request file, then sends ``SIGNAL`` to that one process (never its
process group: DataLoader workers and other children did not install a handler, and the default
action of SIGUSR1 ends a process). At its next safe point the kernel claims the request (deletes
the file), checkpoints and writes a reply file with the protocol's reply line (``wire.reply_line``).

Whoever deletes the request file first owns it: the kernel (it will answer) or the server giving up
(the kernel will not act). No signal is ever sent to a kernel without a marker.

Only the standard library and ``jupyter_core`` here: the server imports this module.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .messages import Reply, SafePointRequest
from .runtime import PREFIX, folder, read_json, running, unlink, write_json
from .wire import reply_line, typed

#: The signal of a pause request; sent only to a kernel whose marker says it handles it.
SIGNAL = signal.SIGUSR1

#: Seconds between marker updates while a loop runs (the step it shows is at most this old).
MARKER_INTERVAL = 1.0


@dataclass(frozen=True)
class Marker:
    """A kernel's declaration: it handles ``SIGNAL``, and where its ``steps`` loop is."""

    pid: int
    connection_file: str
    step: int
    description: str
    updated: float


def marker_path(pid: int) -> Path:
    """Where the kernel of ``pid`` keeps its marker."""
    return folder() / f"{PREFIX}{pid}.json"


def request_path(pid: int) -> Path:
    """Where a pause request for the kernel of ``pid`` waits to be claimed."""
    return folder() / f"{PREFIX}{pid}-request.json"


def reply_path(pid: int) -> Path:
    """Where the kernel of ``pid`` answers a claimed request."""
    return folder() / f"{PREFIX}{pid}-reply.json"


# -- kernel side -----------------------------------------------------------------------------


def sweep() -> list[Path]:
    """Remove the markers, requests and replies of kernels that are gone (a SIGKILL leaves its
    files behind), and the node record of a server that is gone (``nodestate``); files of a
    running process are kept, whatever program it now is."""
    removed = []
    for path in folder().glob(f"{PREFIX}*.json"):
        pid = path.name.removeprefix(PREFIX).removesuffix(".json").split("-")[0]
        if pid.isdigit() and not running(int(pid)) and unlink(path):
            removed.append(path)
    return removed


def write_marker(marker: Marker) -> None:
    """Declare this kernel handles ``SIGNAL``, and where its loop is."""
    write_json(marker_path(marker.pid), asdict(marker))


def remove_marker(pid: int) -> None:
    """The loop has ended: no more requests for this kernel."""
    unlink(marker_path(pid))


def claim_request(pid: int) -> SafePointRequest | None:
    """The request waiting for this kernel, which no one else may now act on; None if there is
    none (the server gave up on it, or the signal came from someone else)."""
    data = read_json(request_path(pid))
    if data is None or not unlink(request_path(pid)):
        return None
    try:
        return typed(SafePointRequest, data, extra=True)
    except ValueError:
        return None


def write_reply(pid: int, reply: Reply) -> None:
    """Answer a claimed request: the reply, as the line the kernel would have printed."""
    write_json(reply_path(pid), {"reply": reply_line(reply), "written": time.time()})


# -- server side -----------------------------------------------------------------------------


def read_marker(pid: int, connection_file: str) -> Marker | None:
    """The marker of the kernel process ``pid`` started with ``connection_file``; None when that
    kernel has not declared it handles ``SIGNAL`` (no loop runs, or the marker is another
    process's that had the same pid)."""
    data = read_json(marker_path(pid))
    if data is None:
        return None
    try:
        marker = Marker(**data)
    except TypeError:
        return None
    if marker.pid != pid or not connection_file or marker.connection_file != os.path.basename(connection_file):
        return None
    return marker


def send_request(process: Any, request: SafePointRequest) -> None:
    """Write the request, then signal that one process (``process.send_signal``, not its group)."""
    unlink(reply_path(process.pid))
    write_json(request_path(process.pid), asdict(request))
    process.send_signal(SIGNAL)


def claimed(pid: int) -> bool:
    """Whether the kernel has taken up the request sent to it (it is checkpointing, or has)."""
    return not request_path(pid).exists()


def withdraw_request(pid: int) -> bool:
    """Take back a request not yet claimed; False when the kernel has claimed it (it will answer)."""
    return unlink(request_path(pid))


def take_reply(pid: int) -> str | None:
    """The reply line to a claimed request, once written (and then removed)."""
    data = read_json(reply_path(pid))
    if data is None:
        return None
    unlink(reply_path(pid))
    line = data.get("reply")
    return line if isinstance(line, str) else None
