"""The node record this server's kernels read (``protocol.nodestate``): what the preemption watcher
knows, written when it changes, removed when the server stops."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ...protocol import nodestate
from ...protocol.nodestate import FitRecord, NodeState, WatcherRecord

log = logging.getLogger(__name__)


def node_state(watchers: list[dict[str, Any]], fit: dict[str, Any] | None) -> NodeState:
    """The record of this server from the watcher's status (``PreemptionWatcher.public`` and ``fit``)."""
    return NodeState(
        os.getpid(),
        tuple(WatcherRecord(w["cloud"] or "", w["state"], w["error"]) for w in watchers),
        FitRecord(fit["fits"], fit["advice"]) if fit is not None else None,
    )


class Publisher:
    """This server's record: rewritten only when what it says changes, never again once removed; a
    write that fails is said once."""

    def __init__(self, path: Path | None = None) -> None:
        #: Fixed when the server loads: the runtime folder its kernels inherit.
        self.path = path or nodestate.record_path(os.getpid())
        self.written: NodeState | None = None
        #: The server stops: a poll still under way writes nothing.
        self.removed = False
        self._failed_said = False

    def publish(self, state: NodeState) -> None:
        """Write ``state`` if it differs from the record last written."""
        if self.removed or state == self.written:
            return
        try:
            nodestate.write(state, self.path)
        except OSError as e:
            if not self._failed_said:
                self._failed_said = True
                log.warning(
                    "jupyter-pause: cannot write %s (%s): the kernels' status widgets will not show the "
                    "preemption watcher; the server's status still does",
                    self.path,
                    e,
                )
            return
        self.written = state

    def remove(self) -> None:
        """No record any more (the server stops); a removal that fails is logged, and stops nothing."""
        self.removed = True
        try:
            nodestate.remove(self.path)
        except OSError as e:
            log.warning(
                "jupyter-pause: cannot remove %s (%s); kernels ignore it once this server is gone", self.path, e
            )
        self.written = None
