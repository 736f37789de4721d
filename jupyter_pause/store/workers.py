"""Worker threads every checkpoint of a process shares, and lanes that keep one writer's order.

A checkpoint's writer (``writer.BlobWriter``) hashes, notes and writes in threads. Executors of its
own would start those threads again at every checkpoint, and let them go at its end; instead
``shared`` gives one executor per name for the whole process, made on first use (made again in a
forked child, whose copy has no threads). A ``Lane`` runs one writer's tasks on a shared executor
one after the other, in the order they were submitted, as an executor of one thread would, while
another writer's lane runs beside it: whoever waits for a lane's futures waits for that writer's
work only, never for another checkpoint's.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

_executors: dict[str, ThreadPoolExecutor] = {}
_lock = threading.Lock()


def shared(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's executor called ``name`` (its threads are named so), of at most ``workers``
    threads, started as work comes and kept for the next checkpoint."""
    with _lock:
        found = _executors.get(name)
        if found is None:
            found = _executors[name] = ThreadPoolExecutor(workers, thread_name_prefix=name)
        return found


def _forget_in_child() -> None:
    """A forked child holds copies of the executors without their threads: it makes its own."""
    global _lock
    _lock = threading.Lock()
    _executors.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class Lane:
    """Tasks of one owner, run on a shared ``executor`` one at a time, in the order submitted.

    A task cancelled before it starts is passed over; the next one still waits for the one
    running. While it has tasks, a lane holds one thread of the executor; it gives the thread
    back when none is left.
    """

    def __init__(self, executor: ThreadPoolExecutor) -> None:
        self._executor = executor
        self._queue: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._busy = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` once every task submitted before it has ended; its future."""
        task: Future[Any] = Future()
        with self._lock:
            self._queue.append((task, fn, args))
            if self._busy:
                return task
            self._busy = True
        try:
            self._executor.submit(self._drain)
        except BaseException:  # the interpreter is shutting down: nothing runs this task
            with self._lock:
                self._queue.clear()
                self._busy = False
            raise
        return task

    def _drain(self) -> None:
        """Run the lane's tasks in order until none is left (in one thread of the executor)."""
        while True:
            with self._lock:
                if not self._queue:
                    self._busy = False
                    return
                task, fn, args = self._queue.popleft()
            if not task.set_running_or_notify_cancel():
                continue  # cancelled before it started
            try:
                result = fn(*args)
            except BaseException as e:  # as an executor's worker does: the future holds it
                task.set_exception(e)
            else:
                task.set_result(result)
