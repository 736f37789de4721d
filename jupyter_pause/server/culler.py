"""jupyter-server's own kernel culler pauses a notebook's kernel instead of killing it.

``MappingKernelManager``'s culler (``cull_idle_timeout``, ``cull_interval``, ``cull_connected``,
``cull_busy``, and a kernelspec's own ``cull_idle_timeout``) decides, every ``cull_interval``
seconds, which kernels it takes, and shuts each one down. That decision stays the culler's: its
``cull_kernel_if_idle`` is wrapped only to mark the shutdown it asks for (a context variable, so
no other shutdown of the same kernel is mistaken for it), and that shutdown becomes the Pause
button's path (``PauseManager.pause``, trigger ``idle``, reason ``CULLER``): checkpoint, then shut
down, so Resume brings the session back, and the ledger and the metrics count a pause.

- A warning comes first (``PauseServer.culler_warn_before``): the culler's first check that takes
  a kernel gives a warning (shown as the Hub's warning before an idle release is, in the server's
  status) and pauses nothing; the first check once its time is up pauses. Keep working (``DELETE``
  on the warning) starts the kernel's idle time again; a cell run in it ends the warning too.
- A checkpoint that fails leaves the kernel running: the session's status says why, and so does
  the server's log; the culler tries again after the next idle period.
- A dead kernel, and one that runs no notebook (a console's, one started through the kernels
  API), have nothing to resume: the culler shuts them down as before, and the log says so.
- ``PauseServer.pause_culled_kernels = False`` installs nothing: the culler kills as it always did.
"""

from __future__ import annotations

import contextvars
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from tornado import web

from ..vocabulary import SessionState, Trigger

log = logging.getLogger(__name__)

#: Why a session the culler took was paused: its status says it.
CULLER = "idle: the server's kernel culler"

#: Seconds a culler's check may come before the end of the warning and still pause: its checks
#: come every ``cull_interval`` seconds, each a little earlier or later in its round than the last.
TICK_SLACK = 2.0

#: The kernel whose shutdown the culler is asking for, in the culler's own task (None elsewhere).
_CULLING: contextvars.ContextVar[str | None] = contextvars.ContextVar("jupyter_pause_culling", default=None)


@dataclass(frozen=True)
class Pending:
    """A culler's pause announced for one notebook's kernel: the notebook, when, and from when."""

    path: str
    warned_at: float
    pause_at: float


class CullerPauses:
    """Turns the culler's shutdown of an idle notebook's kernel into a pause, after a warning."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        #: Warnings given, by kernel id.
        self.pending: dict[str, Pending] = {}

    @property
    def kernels(self) -> Any:
        return self.manager.kernels

    def install(self) -> bool:
        """Wrap the culler's decision and the shutdown it asks for; False when nothing was wrapped
        (switched off, or a kernel manager without jupyter-server's culler)."""
        kernels = self.kernels
        if not self.manager.settings.pause_culled_kernels or not hasattr(kernels, "cull_kernel_if_idle"):
            return False
        cull, shutdown = kernels.cull_kernel_if_idle, kernels.shutdown_kernel

        async def cull_kernel_if_idle(kernel_id: str) -> Any:
            token = _CULLING.set(kernel_id)
            try:
                return await cull(kernel_id)
            finally:
                _CULLING.reset(token)

        async def shutdown_kernel(kernel_id: str, *args: Any, **kwargs: Any) -> Any:
            if _CULLING.get() == kernel_id and not kwargs.get("restart"):
                _CULLING.set(None)  # whatever this starts (the pause and its shutdown) is no cull
                if await self.instead(kernel_id):
                    return None
            return await shutdown(kernel_id, *args, **kwargs)

        kernels.cull_kernel_if_idle, kernels.shutdown_kernel = cull_kernel_if_idle, shutdown_kernel
        return True

    async def instead(self, kernel_id: str) -> bool:
        """What to do where the culler would shut ``kernel_id`` down: warn, pause or keep it (True),
        or let the culler shut it down (False: a dead kernel, or one that runs no notebook)."""
        kernel = self.kernels.get_kernel(kernel_id)
        if getattr(kernel, "execution_state", None) == "dead":
            log.warning("jupyter-pause: kernel %s is dead: nothing to checkpoint, the culler shuts it down", kernel_id)
            return False
        running = await self.manager.notebooks_running()
        path = next((m["path"] for m in running if m["kernel"]["id"] == kernel_id), None)
        if path is None:
            log.warning(
                "jupyter-pause: kernel %s runs no notebook (a console's, or one started through the kernels API): "
                "there is no session to resume it in, so the server's kernel culler shuts it down as before",
                kernel_id,
            )
            return False
        session = self.manager.session_name(path)
        if session in self.manager.pausing or not self._due(kernel_id, path, _since(kernel)):
            return True
        try:
            await self.manager.pause(path, trigger=Trigger.IDLE, why=CULLER)
        except web.HTTPError as e:
            log.warning(
                "jupyter-pause: the server's kernel culler would shut down the kernel of %s; it was not paused (%s), "
                "so it keeps running",
                path,
                e.log_message,
            )
            return True
        self.pending.pop(kernel_id, None)
        log.warning(
            "jupyter-pause: the server's kernel culler takes the kernel of %s: pausing it instead (a checkpoint, "
            "then the kernel shut down; Resume brings the session back)",
            path,
        )
        task = self.manager.pausing.get(session)
        if task is not None:
            task.add_done_callback(lambda _: self._ended(session, path))
        return True

    def _due(self, kernel_id: str, path: str, since: float) -> bool:
        """Whether the culler's pause of ``kernel_id`` may come now: no warning is asked for, or the
        one given since the kernel's last activity has run its time. Else give one, and wait."""
        warn = self.manager.settings.culler_warn_before
        if warn <= 0:
            return True
        now = time.time()
        given = self.pending.get(kernel_id)
        if given is None or given.warned_at < since:
            self.pending[kernel_id] = Pending(path, now, now + warn)
            log.warning(
                "jupyter-pause: the server's kernel culler finds the kernel of %s idle: it is paused in %g s "
                "unless it is used (or Keep working is chosen)",
                path,
                warn,
            )
            return False
        return now + TICK_SLACK >= given.pause_at

    def _ended(self, session: str, path: str) -> None:
        """The culler's pause of ``path`` ended: say how in the log (a failure keeps the kernel)."""
        status = self.manager.board.local.get(session)
        if status is None:
            return
        if status.state == SessionState.FAILED:
            log.warning("jupyter-pause: the pause of %s the kernel culler asked for failed: %s", path, status.detail)
        else:
            log.info("jupyter-pause: %s %s: %s", path, status.state, status.detail)

    # -- the warning -------------------------------------------------------------------------

    def current(self) -> dict[str, Pending]:
        """The warnings still pending: a kernel gone, used since its warning, or that the culler
        would now pass over (busy, or connected to, where it leaves those alone) has none."""
        kernels = self.kernels
        connections = getattr(kernels, "_kernel_connections", {})
        for kernel_id, given in list(self.pending.items()):
            kernel = _kernel(kernels, kernel_id)
            passed_over = kernel is None or _since(kernel) > given.warned_at
            passed_over = passed_over or (not kernels.cull_busy and getattr(kernel, "execution_state", "") == "busy")
            if passed_over or (not kernels.cull_connected and connections.get(kernel_id, 0)):
                del self.pending[kernel_id]
        return self.pending

    def warning(self, now: float | None = None) -> dict[str, Any] | None:
        """The pending warnings as one, in the shape of the pause service's warning
        (``ReleaseWarning.public``) with the ``notebooks`` it is about; None when there is none."""
        pending = sorted(self.current().values(), key=lambda p: p.pause_at)
        if not pending:
            return None
        now = time.time() if now is None else now
        names = " and ".join(p.path for p in pending)
        return {
            "reason": f"{CULLER} pauses {names}",
            "warned_at": min(p.warned_at for p in pending),
            "release_at": pending[0].pause_at,
            "idle_for": None,
            "seconds_left": max(0.0, pending[0].pause_at - now),
            "notebooks": [p.path for p in pending],
        }

    def keep_working(self) -> dict[str, Any] | None:
        """Keep working: end the pending warnings and start their kernels' idle time again (the
        culler counts from there); the warning that ended, or None."""
        ended = self.warning()
        now = datetime.now(timezone.utc)
        for kernel_id in list(self.pending):
            kernel = _kernel(self.kernels, kernel_id)
            if kernel is not None:
                kernel.last_activity = now
        self.pending.clear()
        return ended


def _kernel(kernels: Any, kernel_id: str) -> Any:
    """The kernel manager of ``kernel_id``, or None once it is gone."""
    try:
        return kernels.get_kernel(kernel_id)
    except KeyError:
        return None


def _since(kernel: Any) -> float:
    """When the kernel was last active, as the culler counts it (seconds since the epoch; 0: never said)."""
    last = getattr(kernel, "last_activity", None)
    return last.timestamp() if isinstance(last, datetime) else 0.0


def plan(settings: Any, kernels: Any) -> tuple[int, str]:
    """What happens to an idle kernel on this server, as the start-up log says it: the level
    (a warning where an idle kernel's state would be lost) and the text."""
    timeout, interval = getattr(kernels, "cull_idle_timeout", 0), getattr(kernels, "cull_interval", 0)
    idle, warn = settings.idle_pause_after, settings.culler_warn_before
    if timeout > 0:
        spared = [w for w, on in (("busy", kernels.cull_busy), ("connected", kernels.cull_connected)) if not on]
        which = f"never a {' or '.join(spared)} one" if spared else "busy and connected ones too"
        culler = f"jupyter-server's kernel culler takes kernels idle for more than {timeout:g} s ({which}; "
        culler += f"checked every {interval:g} s)"
    else:
        culler = "jupyter-server's kernel culler is off (c.MappingKernelManager.cull_idle_timeout = 0)"
    pauser = "idle_pause_after is off"
    if idle > 0:
        pauser = (
            f"idle_pause_after pauses kernels idle for {idle:g} s (checked every {settings.idle_check_interval:g} s)"
        )
    if idle > 0 and (timeout <= 0 or idle < timeout):
        fate = f"an idle notebook's kernel is paused after {idle:g} s by idle_pause_after; Resume brings it back"
    elif timeout > 0 and settings.pause_culled_kernels:
        warned = f", after {warn:g} s of warning" if warn > 0 else ""
        fate = (
            f"an idle notebook's kernel the culler takes is paused instead of shut down{warned}; Resume brings it "
            "back, and one whose checkpoint fails keeps running"
        )
    elif timeout > 0:
        fate = (
            f"an idle kernel is shut down by the culler after {timeout:g} s and its state is lost "
            "(c.PauseServer.pause_culled_kernels = False; True pauses it instead)"
        )
        return logging.WARNING, f"jupyter-pause: {culler}; {pauser}: {fate}"
    else:
        fate = "an idle kernel keeps running, and holds its GPU, until it is paused or shut down"
    return logging.INFO, f"jupyter-pause: {culler}; {pauser}: {fate}"
