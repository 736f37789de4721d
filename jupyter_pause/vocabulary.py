"""The words jupyter-pause writes and reads, each defined once: session and release states,
checkpoint triggers, ledger events.

Every layer (server, kernel, store, hours report, Hub service) imports them from here; the front
end reads the same words from ``labextension/src/vocabulary.json``, which
``python -m jupyter_pause.vocabulary --write`` generates from this module (a test fails when the
two disagree). The enums are ``StrEnum``: each member equals its plain string, so what goes to
disk, into manifests, into the ledger and over HTTP is the string itself. Test a plain string
against the tuples (``SESSION_STATES``...): ``"ready" in SessionState`` raises on Python 3.11.

Standard library only: this module imports nothing from the package.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
from pathlib import Path
from typing import Any


class SessionState(enum.StrEnum):
    """A session's state as the server keeps it (status endpoint, store) and the front end shows it."""

    READY = "ready"
    CHECKPOINTING = "checkpointing"
    PAUSED = "paused"
    WAITING = "waiting"
    RESTORING = "restoring"
    FAILED = "failed"


#: Every session state.
SESSION_STATES = tuple(SessionState)

#: Session states in which a server is pausing or resuming the session: another pause or resume
#: is refused then, and the front end polls fast.
BUSY_STATES = (SessionState.CHECKPOINTING, SessionState.WAITING, SessionState.RESTORING)

#: The session states a kernel reports about itself (``session.activity``, its status widget): a
#: kernel never sees its session paused or waiting for resources, since it does not run then.
KERNEL_STATES = (SessionState.READY, SessionState.CHECKPOINTING, SessionState.RESTORING, SessionState.FAILED)

#: Kernel states of a long step whose progress is counted in bytes (a save or a restore).
STEP_STATES = (SessionState.CHECKPOINTING, SessionState.RESTORING)


class ReleaseState(enum.StrEnum):
    """A release's state ("Pause all and stop server"): ``pausing`` -> ``stopping`` -> ``stopped``,
    or it ends ``paused`` (the server not stopped) or ``failed``."""

    PAUSING = "pausing"
    STOPPING = "stopping"
    STOPPED = "stopped"
    PAUSED = "paused"
    FAILED = "failed"


#: Release states in which the release is still under way (another is refused; the front end polls fast).
RELEASE_ACTIVE_STATES = (ReleaseState.PAUSING, ReleaseState.STOPPING)


class Trigger(enum.StrEnum):
    """What asked for a checkpoint, a pause, a release or a stop (manifests, ledger, REST bodies)."""

    #: ``%checkpoint`` or ``jupyter_pause.checkpoint()`` in the notebook.
    MANUAL = "manual"
    #: The Pause button, or the "Pause all and stop server" button.
    BUTTON = "button"
    #: A ``steps`` loop's or ``%autocheckpoint``'s checkpoint every N items or seconds.
    PERIODIC = "periodic"
    #: The process (kernel or server) got SIGTERM: a pod eviction, a preemption's warning.
    SIGTERM = "sigterm"
    #: The server's preemption watcher saw a spot instance's notice.
    SPOT = "spot"
    #: The server's idle watcher paused a session idle for too long; or a client released an idle server.
    IDLE = "idle"
    #: A release paused the session, or stopped (or failed to stop) the server.
    RELEASE = "release"
    #: The Hub service asked a server for a release.
    SERVICE = "service"
    #: ``jupyter pause drill``'s checkpoint of a test cycle.
    DRILL = "drill"
    #: The preemption watcher saw an early warning (AWS's rebalance recommendation): a checkpoint
    #: of every session, no pause, so the pause at the notice has little left to write.
    REBALANCE = "rebalance"


#: Triggers a checkpoint (its manifest) may carry. Not ``service``: the Hub service asks for a
#: release, and the release's pauses checkpoint with ``release``.
CHECKPOINT_TRIGGERS = tuple(t for t in Trigger if t is not Trigger.SERVICE)

#: Triggers of a release asked for over the REST API (a SIGTERM's release comes from the server itself).
RELEASE_TRIGGERS = (Trigger.BUTTON, Trigger.SERVICE, Trigger.IDLE)

#: Triggers that make a ``kernel_stopped`` in the ledger a pause (its GPUs released until the
#: session's next start), as the ledger contract has them. Not ``drill``: a drill's stop is a
#: test of the cycle, and no writer records it with a trigger; not ``rebalance``: it stops no kernel.
PAUSE_TRIGGERS = tuple(t for t in Trigger if t not in (Trigger.DRILL, Trigger.REBALANCE))


class Cloud(enum.StrEnum):
    """A cloud whose preemption notices the server's watcher reads (``PauseServer.preemption_notices``)."""

    AWS = "aws"
    GCE = "gce"
    AZURE = "azure"


class WatcherState(enum.StrEnum):
    """What the server's preemption watcher of a cloud knows now (its status, the status indicator)."""

    #: ``preemption_notices = "auto"``: no metadata service has answered yet.
    SEARCHING = "searching"
    #: It reads its notice, and there is none.
    WATCHING = "watching"
    #: It cannot read its notice (refused, timed out, an answer it does not understand): a notice
    #: would go unseen. Its ``error`` says why.
    BLIND = "blind"
    #: A notice came: every session was paused.
    NOTICED = "noticed"


class LedgerEvent(enum.StrEnum):
    """The GPU-hours ledger's event names, in the order a pause/resume cycle meets them."""

    SERVER_STARTED = "server_started"
    KERNEL_STARTED = "kernel_started"
    ACTIVITY = "activity"
    KERNEL_RESTARTED = "kernel_restarted"
    PAUSE_REQUESTED = "pause_requested"
    CHECKPOINT_COMMITTED = "checkpoint_committed"
    KERNEL_STOPPED = "kernel_stopped"
    SERVER_STOPPED = "server_stopped"
    RESUME_REQUESTED = "resume_requested"
    RESOURCES_AVAILABLE = "resources_available"
    KERNEL_READY = "kernel_ready"
    NEXT_CELL_RUN = "next_cell_run"


#: Events about a single-user server (the Hub service's, or a server's own release and SIGTERM).
SERVER_EVENTS = (LedgerEvent.SERVER_STARTED, LedgerEvent.SERVER_STOPPED)

#: Events about one session's kernel.
KERNEL_EVENTS = tuple(e for e in LedgerEvent if e not in SERVER_EVENTS)

#: Vocabularies written to the front end's copy: enums as ``{"NAME": "value"}``, groups as lists.
EXPORTED: dict[str, Any] = {
    "SessionState": SessionState,
    "BUSY_STATES": BUSY_STATES,
    "KERNEL_STATES": KERNEL_STATES,
    "STEP_STATES": STEP_STATES,
    "ReleaseState": ReleaseState,
    "RELEASE_ACTIVE_STATES": RELEASE_ACTIVE_STATES,
    "Trigger": Trigger,
    "CHECKPOINT_TRIGGERS": CHECKPOINT_TRIGGERS,
    "RELEASE_TRIGGERS": RELEASE_TRIGGERS,
    "PAUSE_TRIGGERS": PAUSE_TRIGGERS,
    "LedgerEvent": LedgerEvent,
    "Cloud": Cloud,
    "WatcherState": WatcherState,
    "SERVER_EVENTS": SERVER_EVENTS,
    "KERNEL_EVENTS": KERNEL_EVENTS,
}

#: Where the front end's copy lives in a source checkout, from the repository's root.
FRONT_END_COPY = Path("labextension", "src", "vocabulary.json")

_GENERATED = (
    "Generated from jupyter_pause/vocabulary.py by `python -m jupyter_pause.vocabulary --write`: edit that, not this."
)


def as_json() -> str:
    """The front end's copy of every vocabulary, as the text of ``vocabulary.json``."""
    data: dict[str, Any] = {"$comment": _GENERATED}
    for name, words in EXPORTED.items():
        if isinstance(words, type) and issubclass(words, enum.Enum):
            data[name] = {member.name: member.value for member in words}
        else:
            data[name] = [str(word) for word in words]
    return json.dumps(data, indent=2) + "\n"


def front_end_copy() -> Path:
    """The path of the front end's copy in the source checkout this module belongs to."""
    return Path(__file__).resolve().parent.parent / FRONT_END_COPY


def main(argv: list[str] | None = None) -> int:
    """Print the front end's copy of the vocabularies, or (``--write``) write it into the checkout."""
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_pause.vocabulary", description="The front end's copy of jupyter-pause's vocabularies."
    )
    parser.add_argument("--write", action="store_true", help=f"write it to {FRONT_END_COPY} instead of printing it")
    args = parser.parse_args(argv)
    text = as_json()
    if not args.write:
        sys.stdout.write(text)
        return 0
    path = front_end_copy()
    if not path.parent.is_dir():
        print(f"no {path.parent}: run this from a source checkout of jupyter-pause (pip install -e .)", file=sys.stderr)
        return 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}; rebuild the front end (cd labextension && npm run build:lib) to use it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
