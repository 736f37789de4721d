"""Checkpoints nobody clicked for: on SIGTERM (a preemption's warning) and every N minutes.

SIGTERM: the kernel checkpoints within the grace window and then ends as SIGTERM asked; inside a
``steps`` loop it first waits (a configurable budget) for the next safe point. The periodic
fallback runs between cells and at the safe points of running ``steps`` loops, so a notice that
never comes costs at most N minutes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..engine import loops, safepoints
from ..errors import PauseError

_sigterm_installed = False
_in_progress = threading.Lock()


def _say(text: str) -> None:
    print(f"jupyter-pause: {text}", file=sys.__stderr__, flush=True)


def install_sigterm_checkpoint(take: Callable[[], Any], grace: float = 0.0) -> bool:
    """On SIGTERM, call ``take()`` (a checkpoint), then end the process as SIGTERM would.

    While a ``jupyter_pause.steps`` loop runs, the checkpoint waits up to ``grace`` seconds for
    the loop's next safe point (or the cell's end); past that, or without a loop, it is taken at
    once, and marked mid-cell in its manifest when a cell is running. Returns False when it
    cannot be installed here (not the main thread).
    """
    global _sigterm_installed
    if _sigterm_installed:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    safepoints.install()

    def finish(mid_cell: bool = False) -> None:
        if not _in_progress.acquire(blocking=False):
            return  # a second SIGTERM while saving: the first one finishes the job
        try:
            with safepoints.capturing_mid_cell(mid_cell):
                take()
            where = " mid-cell (no safe point came)" if mid_cell else ""
            _say(f"checkpoint on SIGTERM committed{where}")
        except Exception as e:  # the previous checkpoint stays the newest; say why, then go
            _say(f"checkpoint on SIGTERM failed: {e}; the previous checkpoint stays the newest")
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        if safepoints.defer_sigterm(finish, grace):
            _say(f"SIGTERM: checkpointing at the next safe point (waiting at most {grace:g} s)")
            return
        finish(mid_cell=safepoints.cell_running())

    signal.signal(signal.SIGTERM, on_sigterm)
    _sigterm_installed = True
    return True


@dataclass
class Periodic:
    """A checkpoint every ``minutes``, taken once that much time has passed: after a cell
    finishes, or at a safe point of a running ``steps`` loop (quietly there: the status shows it)."""

    minutes: float
    take: Callable[[], Any]
    last: float = field(default_factory=time.monotonic)
    failures: int = 0

    def after_cell(self, result: Any = None) -> None:
        summary = self._take_if_due()
        if summary:
            print(f"periodic {summary.splitlines()[0]}")

    def at_safe_point(self, point: loops.SafePoint) -> None:
        self._take_if_due(f" at {point.description}")

    def _take_if_due(self, where: str = "") -> str | None:
        if time.monotonic() - self.last < self.minutes * 60:
            return None
        try:
            summary = self.take()
            self.failures = 0
            return summary
        except PauseError as e:
            self.failures += 1
            print(
                f"jupyter-pause: periodic checkpoint{where} failed ({e}); will try again in {self.minutes:g} min",
                file=sys.stderr,
            )
            return None
        finally:
            self.last = time.monotonic()


class PeriodicRegistry:
    """At most one periodic checkpoint per shell, replaced or stopped by ``%checkpoint --every``."""

    def __init__(self) -> None:
        self.current: Periodic | None = None

    def start(self, shell: Any, minutes: float, take: Callable[[], Any]) -> Periodic:
        self.stop(shell)
        self.current = Periodic(minutes, take)
        shell.events.register("post_run_cell", self.current.after_cell)
        loops.on_safe_point(self.current.at_safe_point)
        return self.current

    def stop(self, shell: Any) -> bool:
        if self.current is None:
            return False
        shell.events.unregister("post_run_cell", self.current.after_cell)
        loops.remove(self.current.at_safe_point)
        self.current = None
        return True
