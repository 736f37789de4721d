"""Periodic checkpoints inside a ``steps(..., every=N)`` loop: the loop waits only while the
state is copied; the blobs are written and the manifest committed by a background thread.

At the safe point (the loop's thread, nothing of the loop running), ``checkpoint_async`` does
everything that must see the live state, and the loop goes on when it returns:

- selects and pickles the variables (small NumPy arrays, Python objects, the RNG state and the
  loop positions become bytes of their own here: the position recorded is the one at the copy);
- brings the device storages that changed to host (one batch into pinned memory, a private
  copy); those whose on-device fingerprint matches the previous checkpoint's stay where they
  are and keep their blob (``devicehash``);
- hashes the large host arrays and tensors (parallel xxh3, about 30 GB/s) to tell which ones
  the store holds already, and copies the others into the kept staging buffer (``staging``):
  NumPy arrays and CPU tensors the loop mutates in place on its next step are copied here, not
  read later;
- takes the value digests (they reuse those hashes) and records the model checks (a forward
  pass on the live modules).

What goes on while the loop runs reads only those copies, or nothing of the kernel: reading the
notebook as saved and the package versions, writing every blob the store lacks, the small
blobs, then the manifest last. Blobs the store holds already are not read again (a
blob deleted meanwhile fails the checkpoint rather than being rewritten from live memory).

The next periodic checkpoint waits for this one only if it has not committed yet (checkpoints
never interleave: ``background.one_at_a_time``); so does a pause or a preemption at a safe
point, which then takes its own complete, synchronous checkpoint. A background checkpoint that
fails is reported once, at the next safe point, the next periodic checkpoint or the end of the
cell, whichever comes first; the previous checkpoint stays the newest.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..errors import PauseError, SerializationError
from ..session import background

__all__ = ["Pending", "pending", "report", "take"]


@dataclass
class Pending:
    """An in-loop checkpoint being written in the background, and where its loop was."""

    job: background.BackgroundCheckpoint
    where: str


#: The last in-loop checkpoint whose outcome has not been looked at yet (None: nothing to say).
pending: Pending | None = None


def take(where: str, config: Any) -> None:
    """A periodic checkpoint at the safe point ``where`` (``"step 10 of epoch 2"``): copy now,
    write in the background. A failure to copy is reported here, and the loop goes on."""
    global pending
    from ..session.checkpoint import checkpoint, checkpoint_async

    report()  # the previous one's failure is said before this one starts
    try:
        try:
            job = checkpoint_async(trigger="periodic", config=config)
        except SerializationError as e:
            if not isinstance(e.__context__, MemoryError):
                raise
            print(
                f"jupyter-pause: too little free host memory to copy the state at {where}; this periodic "
                "checkpoint is written before the loop goes on",
                file=sys.stderr,
            )
            checkpoint(trigger="periodic", config=config)
            return
    except Exception as e:  # the training goes on; the previous checkpoint stays the newest
        _failed(where, e, "")
        return
    pending = Pending(job, where)
    _hook()


def report() -> None:
    """Say once that the last in-loop background checkpoint failed, if it has ended in failure
    (nothing while it is still being written, nothing when it committed)."""
    global pending
    last = pending
    if last is None or not last.job.done:
        return
    pending = None
    if last.job.error is not None:
        _failed(last.where, last.job.error, " in the background")


def _failed(where: str, error: BaseException, how: str) -> None:
    what = str(error) if isinstance(error, PauseError) else f"{type(error).__name__}: {error}"
    print(
        f"jupyter-pause: periodic checkpoint at {where} failed{how} ({what}); the previous checkpoint "
        "stays the newest and the loop goes on",
        file=sys.stderr,
    )


_hooked = False


def _hook() -> None:
    """Report at the end of each cell in IPython, and let a script's last in-loop checkpoint
    commit before the process exits (its writer is a daemon thread; at most ``EXIT_WAIT_S``)."""
    global _hooked
    if _hooked:
        return
    _hooked = True
    # Before the thread pools the writer uses refuse new work at exit (they stop at threading's
    # own exit hooks, which run before ``atexit``'s): the private hook is the one that comes first.
    threading._register_atexit(_at_exit)  # type: ignore[attr-defined]
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        shell.events.register("post_run_cell", lambda result=None: report())


#: Seconds a process that is exiting waits for its last in-loop checkpoint to commit.
EXIT_WAIT_S = 600.0


def _at_exit() -> None:
    last = pending
    if last is None:
        return
    deadline = time.monotonic() + EXIT_WAIT_S
    while not last.job.done and time.monotonic() < deadline:
        time.sleep(0.05)
    if not last.job.done:
        print(
            f"jupyter-pause: the periodic checkpoint at {last.where} was still being written after "
            f"{EXIT_WAIT_S:g} s when the process exited: not committed; the previous checkpoint stays the newest",
            file=sys.stderr,
        )
        return
    report()
