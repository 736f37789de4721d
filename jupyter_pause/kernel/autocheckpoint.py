"""Checkpoints nobody clicked for, every N minutes (``%checkpoint --every``).

They run between cells and at the safe points of running ``steps`` loops, so a preemption notice
that never comes costs at most N minutes. The checkpoint on SIGTERM is ``loops.safepoints``'s.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import PauseError
from ..loops import points


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

    def at_safe_point(self, point: points.SafePoint) -> None:
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
        points.on_safe_point(self.current.at_safe_point)
        return self.current

    def stop(self, shell: Any) -> bool:
        if self.current is None:
            return False
        shell.events.unregister("post_run_cell", self.current.after_cell)
        points.remove(self.current.at_safe_point)
        self.current = None
        return True
