"""What this kernel's jupyter-pause is doing now: a state, progress in bytes, the last outcome.

Checkpoint and resume report here; the status widget (``widget``) renders it. It is plain Python
with observers, so it is tested without any front end.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Callable

from .. import units
from ..vocabulary import KERNEL_STATES, STEP_STATES, SessionState

#: Seconds between progress reports to observers: a read of hundreds of blobs would otherwise
#: send the status widget a message per blob, each serialised and sent while the blobs arrive.
PROGRESS_INTERVAL = 0.1


@dataclass
class Activity:
    """The session's state as this kernel sees it."""

    state: str = SessionState.READY
    detail: str = ""
    done: int = 0
    total: int = 0
    checkpoint: str | None = None
    checkpoint_time: float | None = None
    verdict: str | None = None
    observers: list[Callable[[Activity], None]] = field(default_factory=list, repr=False)
    _reported: float = field(default=0.0, repr=False)

    def _changed(self) -> None:
        for observer in list(self.observers):
            observer(self)

    def begin(self, state: str, detail: str = "", total: int = 0) -> None:
        """Start a long step (checkpointing, restoring) of ``total`` bytes."""
        if state not in KERNEL_STATES:
            raise ValueError(f"unknown state {state!r}: a kernel reports one of {', '.join(KERNEL_STATES)}")
        self.state, self.detail, self.done, self.total = state, detail, 0, total
        self._reported = 0.0
        self._changed()

    def progress(self, done: int, total: int | None = None) -> None:
        """``done`` bytes of the current step are through (of ``total``, when it has grown).

        Observers hear of it at most every ``PROGRESS_INTERVAL`` seconds, and when all is through.
        """
        if total is not None:
            self.total = total
        self.done = min(done, self.total) if self.total else done
        now = time.monotonic()
        through = self.total > 0 and self.done >= self.total
        if through or now - self._reported >= PROGRESS_INTERVAL:
            self._reported = now
            self._changed()

    def finish(self, checkpoint: str, when: float, verdict: str | None = None, detail: str = "") -> None:
        """The step ended well: back to ``ready``, with the checkpoint (and verdict) it led to."""
        self.state, self.detail = SessionState.READY, detail
        self.done = self.total
        self.checkpoint, self.checkpoint_time = checkpoint, when
        if verdict is not None:
            self.verdict = verdict
        self._changed()

    def fail(self, reason: str) -> None:
        """The step failed; the reason is shown until the next step."""
        self.state, self.detail = SessionState.FAILED, reason
        self._changed()

    def text(self) -> str:
        """One line for a terminal or a front end without widgets."""
        parts = [self.state + (f": {self.detail}" if self.detail else "")]
        if self.state in STEP_STATES and self.total:
            parts.append(f"{units.size(self.done)} of {units.size(self.total)}")
        if self.checkpoint:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.checkpoint_time or 0))
            parts.append(f"last checkpoint {self.checkpoint} at {when}")
        if self.verdict:
            parts.append(f"last verdict {self.verdict}")
        return " | ".join(parts)


#: The activity of this process.
current = Activity()


@contextlib.contextmanager
def step(state: str, detail: str = "") -> Iterator[Activity]:
    """Run a long step under ``state``; an exception marks the activity failed and goes on."""
    current.begin(state, detail)
    try:
        yield current
    except BaseException as e:
        current.fail(str(e) or type(e).__name__)
        raise
