"""Hooks for what lives outside the kernel: ``@before_checkpoint`` and ``@after_resume``.

::

    @jp.before_checkpoint
    def flush_tensorboard():
        writer.flush()

A hook is a function of the notebook marked by a decorator (an attribute on the function, so it
is saved with the checkpoint like any notebook function, and a resume in a new kernel brings it
back marked). The hooks are the marked functions of the namespace, in the namespace's order
(the order they were first defined; running the cell again replaces a hook in its place; ``del``
removes it). They are called without arguments:

- ``before_checkpoint`` hooks before every checkpoint (manual, button, periodic, in-loop,
  SIGTERM), before anything is read; a hook that takes a checkpoint itself runs no hooks again;
- ``after_resume`` hooks at the end of a resume, once the variables are restored and rebuilt.

A hook that raises is named with its error and the checkpoint or resume goes on. Under SIGTERM,
at periodic checkpoints and at a pause inside a ``steps`` loop, the hooks of one checkpoint run
within a time limit all together (``PauseConfig.hook_time_limit``): on the main thread a hook
still running at the limit is stopped by an exception raised in it (``HookTimeLimit``, a
``BaseException``, so ``except Exception`` in the hook does not swallow it); on another thread it
is left running and no longer waited for. Either way it is named, the hooks left are named as not
run, and the checkpoint goes on.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..errors import PauseError
from ..vocabulary import Trigger
from . import collector

__all__ = ["HookTimeLimit", "after_resume", "before_checkpoint", "found", "run"]

#: The attribute that marks a hook: the kinds of hook a function is (saved with the function).
MARK = "__jupyter_pause_hooks__"

BEFORE_CHECKPOINT = "before_checkpoint"
AFTER_RESUME = "after_resume"

#: Checkpoints whose hooks run within the time limit (and those taken in ``in_loop``).
LIMITED_TRIGGERS = (Trigger.SIGTERM, Trigger.PERIODIC)

F = TypeVar("F", bound=Callable[..., Any])


class HookTimeLimit(BaseException):
    """Raised inside a hook that is still running when its checkpoint's time limit is spent."""


def before_checkpoint(func: F) -> F:
    """Mark ``func`` to be called before every checkpoint (manual, button, periodic, in-loop, SIGTERM).

    ::

        @jp.before_checkpoint
        def close_writer():
            writer.flush()

    It is called without arguments, before anything is saved. Under SIGTERM and inside loops it
    runs within ``PauseConfig.hook_time_limit``. A hook that raises or runs too long is named in
    the checkpoint's summary; the checkpoint is taken all the same.
    """
    return _mark(func, BEFORE_CHECKPOINT)


def after_resume(func: F) -> F:
    """Mark ``func`` to be called at the end of every resume, once the variables are back.

    ::

        @jp.after_resume
        def reconnect():
            global db
            db = sqlite3.connect("results.db")

    It is saved with the checkpoint, so a resume in a new kernel calls it. A hook that raises is
    named in the resume's summary; the resume is complete all the same.
    """
    return _mark(func, AFTER_RESUME)


def _mark(func: F, kind: str) -> F:
    if type(func) is not types.FunctionType:
        raise PauseError(
            f"@jupyter_pause.{kind} marks a function defined with def, not a {type(func).__name__}: put it on the "
            f"line above `def ...():`"
        )
    kinds = tuple(getattr(func, MARK, ()))
    if kind not in kinds:
        setattr(func, MARK, (*kinds, kind))
    return func


def found(namespace: dict[str, Any], kind: str) -> list[tuple[str, Callable[[], Any]]]:
    """The hooks of ``kind`` in ``namespace``, in its order: (name, function)."""
    hooks = []
    for name, value in list(namespace.items()):
        if type(value) is types.FunctionType and kind in getattr(value, MARK, ()):
            hooks.append((name, value))
    return hooks


_state = threading.local()


@contextlib.contextmanager
def in_loop() -> Iterator[None]:
    """Checkpoints taken inside this block are in a loop: their hooks run within the time limit."""
    before = getattr(_state, "in_loop", False)
    _state.in_loop = True
    try:
        yield
    finally:
        _state.in_loop = before


def limit_for(trigger: str, limit: float) -> float | None:
    """The time limit of the hooks of a checkpoint with ``trigger`` (None: none)."""
    return limit if trigger in LIMITED_TRIGGERS or getattr(_state, "in_loop", False) else None


def run(kind: str, namespace: dict[str, Any], limit: float | None = None, say: bool = False) -> list[str]:
    """Call the hooks of ``kind`` in ``namespace``, within ``limit`` seconds all together (None: no
    limit); a note for each one that failed, was too slow or was not run (printed when ``say``)."""
    if getattr(_state, "running", False):
        return []  # a hook that checkpoints or resumes does not run the hooks again
    hooks = found(namespace, kind)
    notes: list[str] = []
    deadline = None if limit is None else time.monotonic() + limit
    _state.running = True
    try:  # inside a resume, with the collector on again for them (``collector``)
        with collector.running_user_code(when=bool(hooks)):
            for name, func in hooks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    notes.append(f"{kind} hook {name!r} was not run: the hooks' time limit ({limit:g} s) was spent")
                    continue
                problem = _call(func) if left is None else _call_within(func, left, limit)  # type: ignore[arg-type]
                if problem:
                    notes.append(f"{kind} hook {name!r} {problem}")
    finally:
        _state.running = False
    if say:
        for note in notes:
            print(f"jupyter-pause: {note}", file=sys.stderr, flush=True)
    return notes


def _failed(error: BaseException) -> str:
    return f"failed: {type(error).__name__}: {error}; the rest went on"


def _call(func: Callable[[], Any]) -> str:
    try:
        func()
    except Exception as e:  # named in the summary; the checkpoint or resume goes on
        return _failed(e)
    return ""


def _call_within(func: Callable[[], Any], seconds: float, limit: float) -> str:
    """Call ``func``, stopping it (main thread) or leaving it (other threads) after ``seconds``, what
    is left of the hooks' ``limit``."""
    if threading.current_thread() is not threading.main_thread():
        return _in_thread(func, seconds, limit)

    def time_up(signum: int, frame: Any) -> None:
        raise HookTimeLimit(f"still running at the hooks' time limit ({limit:g} s)")

    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, time_up)
    theirs = (0.0, 0.0)
    try:
        try:
            theirs = signal.setitimer(signal.ITIMER_REAL, seconds)
            func()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except HookTimeLimit:
        return f"was stopped at the hooks' time limit ({limit:g} s); the checkpoint went on without it"
    except Exception as e:  # named in the summary; the checkpoint goes on
        return _failed(e)
    finally:
        signal.signal(signal.SIGALRM, previous)
        if theirs[0] > 0:  # a timer of the user's, re-armed for what was left of it
            signal.setitimer(signal.ITIMER_REAL, max(theirs[0] - (time.monotonic() - started), 0.001), theirs[1])
    return ""


def _in_thread(func: Callable[[], Any], seconds: float, limit: float) -> str:
    """Off the main thread no signal can stop a hook: run it in a thread of its own, wait ``seconds``."""
    error: list[BaseException] = []

    def call() -> None:
        try:
            func()
        except BaseException as e:  # reported by the waiting thread
            error.append(e)

    worker = threading.Thread(target=call, name="jupyter-pause-hook", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        return (
            f"was still running at the hooks' time limit ({limit:g} s), left running in the background; the "
            "checkpoint went on without it"
        )
    return _failed(error[0]) if error else ""
