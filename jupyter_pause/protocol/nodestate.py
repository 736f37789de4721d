"""What a server tells its kernels about its node: one small JSON record in the Jupyter runtime folder.

The kernel's status widget cannot ask the server anything, yet a user should see there what only
the server knows: a preemption watcher that cannot read its cloud's notice, and a pause that would
not finish within the notice. So the server writes that state (``NodeState``) to
``jupyter-pause-<server pid>-server.json`` in the runtime folder each time it changes, whole
(``runtime.write_json``), and removes it when it stops; every kernel it starts learns its pid from
``SERVER_PID`` and reads the same record (``read``). A record of a server that no longer runs (it
died without removing it), or one that is not a record, is no record: ``read`` gives None and
never raises.

Only the standard library and ``jupyter_core``: the server imports this module.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .runtime import PREFIX, folder, read_json, running, unlink, write_json
from .wire import typed

#: The environment variable that gives a kernel the pid of the server that started it.
SERVER_PID = "JUPYTER_PAUSE_SERVER_PID"


@dataclass(frozen=True)
class WatcherRecord:
    """One preemption watcher: its cloud ("" while ``"auto"`` searches), state and last error."""

    cloud: str
    state: str
    error: str = ""


@dataclass(frozen=True)
class FitRecord:
    """Whether the slowest running session's newest checkpoint fits in the notice, and the advice."""

    fits: bool
    advice: str


@dataclass(frozen=True)
class NodeState:
    """A server's node as its kernels see it: its preemption watchers and whether a pause fits."""

    pid: int
    watchers: tuple[WatcherRecord, ...] = ()
    fit: FitRecord | None = None

    def data(self) -> dict[str, Any]:
        """The record as JSON data."""
        return asdict(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> NodeState:
        """The record ``data`` holds; ``ValueError`` saying what is wrong when it holds none.
        Keys this version does not know are ignored (a newer server may say more)."""
        pid, watchers, fit = data.get("pid"), data.get("watchers", []), data.get("fit")
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise ValueError(f"has pid={pid!r}, not a process id")
        if not isinstance(watchers, list) or not all(isinstance(w, dict) for w in watchers):
            raise ValueError(f"has watchers={watchers!r}, not a list of watchers")
        if fit is not None and not isinstance(fit, dict):
            raise ValueError(f"has fit={fit!r}, not a fit")
        return cls(
            pid,
            tuple(typed(WatcherRecord, w, extra=True) for w in watchers),
            typed(FitRecord, fit, extra=True) if fit is not None else None,
        )


def record_path(pid: int, where: Path | None = None) -> Path:
    """Where the server of ``pid`` keeps its record (in ``where``, default the runtime folder)."""
    return (where or folder()) / f"{PREFIX}{pid}-server.json"


def write(state: NodeState, path: Path) -> None:
    """Replace the record at ``path`` with ``state``, whole: a reader sees the old one or this one."""
    write_json(path, state.data())


def remove(path: Path) -> None:
    """The server stops: no record (a removed one stays removed)."""
    unlink(path)


def server_pid() -> int | None:
    """The pid of the server that started this kernel (``SERVER_PID``); None when none did."""
    value = os.environ.get(SERVER_PID, "").strip()
    return int(value) if value.isdigit() else None


def read(pid: int | None = None, where: Path | None = None) -> NodeState | None:
    """The record of the server ``pid`` (default: this kernel's own, ``server_pid``); None when
    there is none, it is not a record, it is another server's, or its server no longer runs."""
    if pid is None:
        pid = server_pid()
        if pid is None:
            return None
    data = read_json(record_path(pid, where))
    if data is None:
        return None
    try:
        state = NodeState.from_data(data)
    except ValueError:
        return None
    return state if state.pid == pid and running(pid) else None
