"""Pause and preemption at the safe points of a running ``steps`` loop (the kernel's side).

While a cell runs a ``steps`` loop, this module, registered with ``loops.on_safe_point``:

- keeps the kernel's marker (``channel``) up to date, at most once a second, so the server knows
  it may send a pause request, and handles that request's signal (the handler only sets a flag);
- at the next safe point after a request, checkpoints (trigger ``button`` or ``spot``), answers the
  server and stops the cell with ``CellPaused``;
- after a SIGTERM, checkpoints at the next safe point and lets the process end (``defer_sigterm``);
  if none comes within the grace budget, the SIGTERM handler checkpoints mid-cell instead.

It also knows whether a cell is running, so a checkpoint taken outside any safe point can be
marked ``mid_cell`` in its manifest (``capture.capturing_mid_cell``).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..protocol import ErrorReply, PauseReply, SafePointRequest, channel
from ..session import background, capture, hooks
from . import positions
from .points import SafePoint, on_safe_point


class CellPaused(BaseException):
    """The running cell was stopped at a safe point because its session was paused.

    Like ``KeyboardInterrupt``, it is an interruption rather than an error: it passes through
    ``except Exception`` in the user's loop, so no code after the loop runs on half-done work.
    """

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback: the message alone."""
        return [f"{type(self).__name__}: {self}"]


@dataclass
class _State:
    tried: bool = False  # whether installing the signal handler was tried
    installed: bool = False  # the signal handler is ours: the marker declares it
    connection_file: str = ""
    cell_running: bool = False
    point: SafePoint | None = None  # the last safe point of the running cell
    marker_at: float = 0.0
    requested: bool = False  # the pause signal came since the last safe point
    sigterm: Callable[[], object] | None = None  # takes the checkpoint and ends the process
    sigterm_deadline: float = 0.0
    paused: str = ""  # the checkpoint a pause stopped the cell with, until a cell runs again


_state = _State()
_registered = False
_events = False  # IPython tells this module when cells start and end


def install() -> None:
    """Act at the safe points of every ``steps`` loop of this process (idempotent)."""
    global _registered, _events
    if not _registered:
        _registered = True
        on_safe_point(_at_safe_point)
    shell = _shell()
    if shell is not None and not _events:
        _events = True
        shell.events.register("pre_run_cell", _cell_started)
        shell.events.register("post_run_cell", _cell_ended)


def _shell() -> Any:
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()


def in_loop() -> bool:
    """Whether the running cell has reached a safe point (its ``steps`` loop may reach another)."""
    return _state.point is not None


def cell_running() -> bool:
    """Whether a cell is running now (as far as IPython's events tell; False outside IPython)."""
    return _state.cell_running


def defer_sigterm(act: Callable[[], object], grace: float) -> bool:
    """After SIGTERM: if a ``steps`` loop runs (or a checkpoint is being taken), have ``act``
    (checkpoint, then end the process) run at the next safe point, or when the cell ends; True
    when deferred.

    False when there is no loop to wait for, or the budget of ``grace`` seconds is spent: the
    caller acts now. A second SIGTERM within the budget is absorbed. A timer sends SIGTERM again
    when the budget runs out, so the handler acts even if no safe point comes.
    """
    if _state.sigterm is not None:
        return time.monotonic() < _state.sigterm_deadline
    if (_state.point is None and not background.held_here()) or grace <= 0:
        return False  # (a checkpoint being taken on this thread is never interleaved with)
    _state.sigterm = act
    _state.sigterm_deadline = time.monotonic() + grace
    timer = threading.Timer(grace, os.kill, (os.getpid(), signal.SIGTERM))
    timer.daemon = True
    timer.start()
    return True


# -- SIGTERM ---------------------------------------------------------------------------------

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
    install()

    def finish(mid_cell: bool = False) -> None:
        if not _in_progress.acquire(blocking=False):
            return  # a second SIGTERM while saving: the first one finishes the job
        try:
            if _state.paused:  # no cell ran since the pause's checkpoint: it is the session's state
                _say(f"SIGTERM after a pause: nothing ran since checkpoint {_state.paused}, which stays the newest")
                return
            with capture.capturing_mid_cell(mid_cell):
                take()
            where = " mid-cell (no safe point came)" if mid_cell else ""
            _say(f"checkpoint on SIGTERM committed{where}")
        except Exception as e:  # the previous checkpoint stays the newest; say why, then go
            _say(f"checkpoint on SIGTERM failed: {e}; the previous checkpoint stays the newest")
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        if defer_sigterm(finish, grace):
            _say(f"SIGTERM: checkpointing at the next safe point (waiting at most {grace:g} s)")
            return
        finish(mid_cell=cell_running())

    signal.signal(signal.SIGTERM, on_sigterm)
    _sigterm_installed = True
    return True


# -- at a safe point -------------------------------------------------------------------------


def _at_safe_point(point: SafePoint) -> None:
    _state.point = point
    _state.cell_running = _events  # a safe point is inside a cell (installed during it, maybe)
    if not _state.tried:
        _install_handler()
    if _state.installed and (now := time.monotonic()) - _state.marker_at >= channel.MARKER_INTERVAL:
        _state.marker_at = now
        channel.write_marker(
            channel.Marker(os.getpid(), _state.connection_file, point.step, point.description, time.time())
        )
    if _state.sigterm is not None:
        _state.sigterm()
    if _state.requested:
        _state.requested = False
        request = channel.claim_request(os.getpid())
        if request is not None:
            _pause_here(request, point)


def _install_handler() -> None:
    """Handle the pause signal in a kernel, unless this is not the main thread or the signal
    already has a handler (the user's): then no marker is written and no request comes."""
    if threading.current_thread() is not threading.main_thread():
        return  # tried again at a safe point on the main thread
    _state.tried = True
    _state.connection_file = _connection_file()
    if not _state.connection_file:
        return  # not a kernel: no server sends requests here
    _install_sigterm()
    if signal.getsignal(channel.SIGNAL) not in (signal.SIG_DFL, None, _on_signal):
        return
    signal.signal(channel.SIGNAL, _on_signal)
    atexit.register(channel.remove_marker, os.getpid())
    channel.sweep()  # what killed kernels left in the runtime folder
    _state.installed = True


def _install_sigterm() -> None:
    """A kernel running a ``steps`` loop checkpoints on SIGTERM without ``%load_ext`` too, unless
    configured off (``checkpoint_on_sigterm``) or SIGTERM already has a handler of the user's."""
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return  # ours (installed by %load_ext) or the user's
    from ..config import PauseConfig
    from ..session.checkpoint import checkpoint

    config = PauseConfig(parent=_shell())
    if config.checkpoint_on_sigterm:
        install_sigterm_checkpoint(lambda: checkpoint(trigger="sigterm", config=config), grace=config.sigterm_grace)


def _on_signal(signum: int, frame: Any) -> None:
    _state.requested = True


def _connection_file() -> str:
    """The basename of this kernel's connection file ('' outside a kernel)."""
    try:
        from ipykernel.connect import get_connection_file

        return os.path.basename(get_connection_file())
    except Exception:  # not a kernel (a script, a test): no server can send a request here
        return ""


def _pause_here(request: SafePointRequest, point: SafePoint) -> None:
    """Checkpoint for the server's request, answer it, then stop the cell (or, if the checkpoint
    failed, answer that and let the loop go on).

    Once the checkpoint is committed the loops' positions are held (``positions.hold``: any
    checkpoint before the cell runs again carries them), their DataLoaders' worker processes are
    stopped (the kernel's shutdown then waits on none), and until a cell runs a SIGTERM takes no
    second checkpoint: this one is the session's state.
    """
    from ..session.checkpoint import checkpoint

    try:
        with hooks.in_loop():  # the hooks run within their time limit
            reply = PauseReply.of(checkpoint(session=request.session, trigger=request.trigger))
    except Exception as e:  # the server reports the failure; the loop goes on, nothing was stopped
        channel.write_reply(os.getpid(), ErrorReply.of(request.entry, e))
        return
    positions.hold(positions.capture())
    positions.release_workers()
    _state.paused = reply.checkpoint
    channel.write_reply(os.getpid(), reply)
    if _state.sigterm is not None:
        _state.sigterm()
    _leave_loop()
    raise CellPaused(
        f"paused at {point.description} (checkpoint {reply.checkpoint}); resume, then run this cell again to continue"
    )


def _leave_loop() -> None:
    _state.point = None
    _state.marker_at = 0.0
    if _state.installed:
        channel.remove_marker(os.getpid())


# -- cells -----------------------------------------------------------------------------------


def _cell_started(info: Any = None) -> None:
    _state.cell_running = True
    _state.paused = ""


def _cell_ended(result: Any = None) -> None:
    _state.cell_running = False
    _leave_loop()
    if _state.sigterm is not None:  # the cell ended before another safe point: act between cells
        _state.sigterm()
