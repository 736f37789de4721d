"""Checkpoints written by a background thread, and the rule that checkpoints never interleave."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from . import activity

#: Checkpoints of this process never interleave: each one waits for the one before to commit.
#: Re-entrant, so a SIGTERM arriving during a checkpoint can still take its own.
one_at_a_time = threading.RLock()
_current: BackgroundCheckpoint | None = None


def held_here() -> bool:
    """Whether this thread is taking a checkpoint now (inside ``one_at_a_time``)."""
    return one_at_a_time._is_owned()  # type: ignore[attr-defined]


def wait_for_background() -> None:
    """Wait until the checkpoint being written in the background (if any) has committed or failed."""
    if _current is not None:
        _current._done.wait()


class BackgroundCheckpoint:
    """A checkpoint being written by a background thread."""

    def __init__(self, prepared: Any, commit: Callable[[Any, activity.Activity], Any]) -> None:
        global _current
        self.prepared = prepared
        self.blocked = time.perf_counter() - prepared.started
        self.result: Any = None
        self.error: BaseException | None = None
        self._commit = commit
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jupyter-pause-checkpoint", daemon=True)
        _current = self
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self._commit(self.prepared, activity.current)
        except BaseException as e:  # kept for the notebook: reported by wait() and the magic
            self.error = e
            activity.current.fail(str(e) or type(e).__name__)
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        """Whether the checkpoint has committed or failed."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        """Wait for the commit; the ``CheckpointResult``, or the error the background write met."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"checkpoint still being written after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result
