"""What a Jupyter server adds to the GPU-hours ledger (``jupyter_pause.ledger``).

The server sees every kernel it manages start and stop, whether or not the notebook loaded
``%load_ext jupyter_pause``: the kernel manager's ``start_kernel``, ``shutdown_kernel`` and
``shutdown_all`` are wrapped (as ``extension`` wraps ``get_kernel_env``) to write
``kernel_started`` and ``kernel_stopped``, with the notebook's session, the user, this node and
the GPUs the kernel can use (``gpus.visible``: the driver's list, never torch in the server).

Activity is exact and cheap from here: the kernel's own ``busy``/``idle`` status around each
``execute_request`` on its IOPub channel gives the span of every cell, whoever sent it (the code
the server itself runs to checkpoint or restore is left out), timed by the kernel's own message
dates (``sent_at``), not by when a busy server got to read them. A kernel started again on new
ports is followed there when the server moves its own watch of that channel
(``start_watching_activity``, also wrapped). Spans are written as one
``activity`` record per kernel every ``FLUSH_SECONDS`` (a cell still running is cut there, so a
week-long cell shows as work all week), and when the kernel stops.

A restart (the user's, or Jupyter's after the kernel died: an out-of-memory kill, say) keeps the
kernel and its GPUs: it writes ``kernel_restarted`` with the reason, and ends the cell that was
running then (it died with the process; no ``idle`` will ever close it).

The orchestrator adds ``pause_requested`` and the trigger of the ``kernel_stopped`` it causes,
and a resume's moments with its run report, from the resumed kernel's reply (``resumed``); a
release or SIGTERM adds ``server_stopped``. Nothing here can fail a pause: ledger writes never
raise, and they run off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import datetime
from typing import Any

from jupyter_client.session import Session
from tornado.ioloop import PeriodicCallback

from .. import gpus
from .. import ledger as records
from ..notebook import relative_path, session_from_path
from ..store import report as reports
from ..vocabulary import LedgerEvent, Trigger
from . import kernelrun

log = logging.getLogger(__name__)

#: Seconds between activity records of a busy kernel.
FLUSH_SECONDS = 300.0

#: A kernel's message date further than this from the server's clock is taken for another
#: machine's clock (a remote kernel), and the server's time of receipt is used instead.
CLOCK_TOLERANCE = 60.0


def sent_at(header: dict[str, Any], received: float) -> float:
    """When the kernel sent a message (its header's ``date``): a cell's span is the kernel's own,
    however long the message waited for the server. ``received`` when the header has no date or one
    too far from it to be this machine's clock."""
    date = header.get("date")
    if isinstance(date, datetime) and date.tzinfo is not None:
        sent = date.timestamp()
        if abs(received - sent) <= CLOCK_TOLERANCE:
            return sent
    return received


class Recorder:
    """Writes this server's ledger events; ``install`` hooks it into the kernel manager."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.server = records.server_label()
        #: Session of each kernel this server started (None: not a notebook's kernel).
        self.sessions: dict[str, str | None] = {}
        #: Since when each busy kernel has been running a cell.
        self.busy: dict[str, float] = {}
        #: Spans of cells not written yet, per kernel.
        self.spans: dict[str, list[list[float]]] = {}
        #: When the newest cell of any kernel here started (the user's, not the server's own code).
        self.last_cell: float | None = None
        #: What is stopping a kernel, set by whoever stops it (a pause: its trigger).
        self.stopping: dict[str, str] = {}
        #: Each kernel's watched IOPub stream, and the port it is connected to.
        self.streams: dict[str, tuple[Any, int]] = {}
        self.stopped = False
        self.flusher: PeriodicCallback | None = None
        self._gpus: tuple[str | None, int] | None = None

    # -- events --------------------------------------------------------------------------

    def gpus(self) -> tuple[str | None, int]:
        """Model and count of the GPUs this server's kernels can use (looked up once)."""
        if self._gpus is None:
            self._gpus = gpus.visible(self.manager.settings.cuda_devices)
        return self._gpus

    def event(self, name: str, session: str | None = None, at: float | None = None, **fields: Any) -> records.Event:
        """An event of this server, with its node, server name and GPUs."""
        model, count = self.gpus()
        fields.setdefault("gpu_model", model)
        fields.setdefault("gpus", count)
        return records.make(name, self.manager.config.node, at, session=session, server=self.server, **fields)

    def emit(self, event: records.Event) -> None:
        """Write ``event`` in the background (``manager.wait`` waits for it)."""
        self.manager.spawn(asyncio.to_thread(records.write, self.manager.store, event))

    async def write(self, *events: records.Event) -> None:
        """Write ``events`` now, off the event loop."""
        for event in events:
            await asyncio.to_thread(records.write, self.manager.store, event)

    # -- kernels -------------------------------------------------------------------------

    def install(self, serverapp: Any) -> None:
        """Wrap the kernel manager's start and shutdowns (and its watch of a kernel's output, which
        a restart on new ports starts again), and flush activity periodically."""
        kernels = serverapp.kernel_manager
        root = os.path.abspath(os.path.expanduser(serverapp.root_dir))
        start, shutdown, stop_all = kernels.start_kernel, kernels.shutdown_kernel, kernels.shutdown_all
        restart, watching = kernels.restart_kernel, getattr(kernels, "start_watching_activity", None)

        async def start_kernel(*args: Any, **kwargs: Any) -> str:
            known = kwargs.get("kernel_id") in self.sessions
            kernel_id = await start(*args, **kwargs)
            if not known and kernel_id not in self.sessions:
                path = (kwargs.get("env") or {}).get("JPY_SESSION_NAME")
                session = session_from_path(relative_path(path, root)) if path else None
                self.started(kernels, kernel_id, session)
            return kernel_id

        async def shutdown_kernel(kernel_id: str, *args: Any, **kwargs: Any) -> Any:
            out = await shutdown(kernel_id, *args, **kwargs)
            if not kwargs.get("restart"):
                await self.write(*self.ended(kernel_id, self.stopping.pop(kernel_id, None)))
            return out

        async def shutdown_all(*args: Any, **kwargs: Any) -> Any:
            out = stop_all(*args, **kwargs)
            out = await out if asyncio.iscoroutine(out) else out
            await self.server_stopping(None)
            return out

        async def restart_kernel(kernel_id: str, *args: Any, **kwargs: Any) -> Any:
            self.restarted(kernel_id, "user")
            return await restart(kernel_id, *args, **kwargs)

        def start_watching_activity(kernel_id: str) -> None:  # the server's own watch of a kernel's
            watching(kernel_id)  # output, at its start and once a restart moved it to new ports
            kernel = kernels.get_kernel(kernel_id)
            if kernel_id in self.streams and self.streams[kernel_id][1] != kernel.iopub_port:
                self.watch(kernel, kernel_id)  # and so is this one

        kernels.start_kernel, kernels.shutdown_kernel = start_kernel, shutdown_kernel
        kernels.shutdown_all, kernels.restart_kernel = shutdown_all, restart_kernel
        if watching is not None:
            kernels.start_watching_activity = start_watching_activity
        self.flusher = PeriodicCallback(self.flush, FLUSH_SECONDS * 1000)
        self.flusher.start()

    def started(self, kernels: Any, kernel_id: str, session: str | None) -> None:
        """Note a kernel that started: ``kernel_started``, and watch its cells."""
        self.sessions[kernel_id] = session
        self.emit(self.event(LedgerEvent.KERNEL_STARTED, session))
        try:
            self.watch(kernels.get_kernel(kernel_id), kernel_id)
            kernels.add_restart_callback(kernel_id, lambda: self.restarted(kernel_id, "died"), "restart")
        except Exception as e:  # activity is lost for this kernel; its start and stop are still recorded
            log.warning("jupyter-pause ledger: cannot watch kernel %s for activity: %s", kernel_id, e)

    def restarted(self, kernel_id: str, reason: str) -> None:
        """The kernel restarts (``user``: asked to; ``died``: Jupyter brings it back): the running
        cell ended now, then ``kernel_restarted``."""
        if kernel_id not in self.sessions:
            return
        now = time.time()
        if kernel_id in self.busy:
            self.spans.setdefault(kernel_id, []).append([self.busy.pop(kernel_id), now])
        activity = self._activity(kernel_id, now)
        if activity is not None:
            self.emit(activity)
        self.emit(self.event(LedgerEvent.KERNEL_RESTARTED, self.sessions[kernel_id], at=now, extra={"reason": reason}))

    def watch(self, kernel: Any, kernel_id: str) -> None:
        """Follow the kernel's IOPub status messages: busy/idle around each cell (the stream of
        its ports before, if any, is closed)."""
        self._unwatch(kernel_id)
        stream = kernel.connect_iopub()
        session = Session(config=kernel.session.config, key=kernel.session.key)

        def on_message(parts: list[bytes]) -> None:
            _, fed = session.feed_identities(parts)
            msg = session.deserialize(fed, content=False)
            parent = msg.get("parent_header") or {}
            if msg["header"]["msg_type"] != "status" or parent.get("msg_type") != "execute_request":
                return
            if parent.get("session") in kernelrun.OWN_SESSIONS:
                return  # the server's own checkpoint or restore: not the notebook's work
            state = session.deserialize(fed)["content"].get("execution_state")
            self.cell(kernel_id, state, sent_at(msg["header"], time.time()))

        stream.on_recv(on_message)
        self.streams[kernel_id] = (stream, kernel.iopub_port)

    def _unwatch(self, kernel_id: str) -> None:
        stream, _ = self.streams.pop(kernel_id, (None, 0))
        if stream is not None and not stream.closed():
            stream.close()

    def cell(self, kernel_id: str, state: str | None, now: float) -> None:
        """A kernel went ``busy`` or ``idle`` at ``now``."""
        if state == "busy":
            self.busy.setdefault(kernel_id, now)
            self.last_cell = now
        elif state == "idle" and kernel_id in self.busy:
            start = self.busy.pop(kernel_id)  # a flush may have cut it after the idle was sent
            self.spans.setdefault(kernel_id, []).append([start, max(start, now)])

    def _activity(self, kernel_id: str, now: float) -> records.Event | None:
        """The ``activity`` record of the kernel's spans so far (a running cell cut at ``now``)."""
        spans = self.spans.pop(kernel_id, [])
        if kernel_id in self.busy:
            spans.append([self.busy[kernel_id], now])
            self.busy[kernel_id] = now
        if not spans:
            return None
        return self.event(LedgerEvent.ACTIVITY, self.sessions.get(kernel_id), at=now, spans=spans)

    def flush(self) -> None:
        """Write every kernel's activity so far (every ``FLUSH_SECONDS``)."""
        now = time.time()
        for kernel_id in list(self.sessions):
            if (event := self._activity(kernel_id, now)) is not None:
                self.emit(event)

    def ended(self, kernel_id: str, trigger: str | None) -> list[records.Event]:
        """The last records of a kernel that stopped: its activity, then ``kernel_stopped``."""
        if kernel_id not in self.sessions:
            return []
        now = time.time()
        activity = self._activity(kernel_id, now)
        self.busy.pop(kernel_id, None)
        session = self.sessions.pop(kernel_id)
        self._unwatch(kernel_id)
        stopped = self.event(LedgerEvent.KERNEL_STOPPED, session, at=now, trigger=trigger)
        return [activity, stopped] if activity is not None else [stopped]

    # -- resumes, pauses and the server --------------------------------------------------

    async def resumed(self, report: dict[str, Any]) -> None:
        """A resume ended in a kernel that left what it leaves behind to this server
        (``ResumeRequest.report_by_server``): its run report (the reply's) beside the checkpoint,
        its moments as ledger events (``ledger.resume_events``), both written at once. A report
        that cannot be read or written is logged: the resume itself is done."""
        try:
            run = reports.RunReport.from_dict(report)
        except TypeError as e:  # a field missing or unknown: a kernel of another version
            log.warning("jupyter-pause: the kernel's run report is not one this server reads (%s); not written", e)
            return
        events = records.resume_events(run, self.event)
        store = self.manager.store
        written = await asyncio.gather(
            asyncio.to_thread(reports.write, store, run),
            asyncio.to_thread(records.write_many, store, events),
            return_exceptions=True,
        )
        if isinstance(written[0], Exception):
            log.warning("jupyter-pause: the run report of %s was not written: %s", run.session, written[0])

    def pause_requested(self, session: str, kernel_id: str, trigger: str, at: float) -> None:
        """A pause of ``session`` began: ``pause_requested``; its kernel's stop carries ``trigger``."""
        self.stopping[kernel_id] = trigger
        self.emit(self.event(LedgerEvent.PAUSE_REQUESTED, session, at=at, trigger=trigger))

    def pause_failed(self, kernel_id: str) -> None:
        """The pause did not stop the kernel after all."""
        self.stopping.pop(kernel_id, None)

    async def server_stopping(self, trigger: str | None) -> None:
        """The server stops: its kernels' last records, then ``server_stopped`` (written once)."""
        if self.stopped:
            return
        self.stopped = True
        if self.flusher is not None:
            self.flusher.stop()
        events = [e for kernel_id in list(self.sessions) for e in self.ended(kernel_id, trigger)]
        await self.write(*events, self.event(LedgerEvent.SERVER_STOPPED, trigger=trigger))

    async def server_not_stopped(self) -> None:
        """A release asked the Hub to stop this server, and the server kept running after all."""
        self.stopped = False
        if self.flusher is not None:
            self.flusher.start()
        await self.write(self.event(LedgerEvent.SERVER_STARTED, trigger=Trigger.RELEASE))
