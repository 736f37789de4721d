"""Pause and resume of notebook sessions on a Jupyter server, with their states.

Pause: checkpoint inside the kernel (at the next safe point of a running ``steps`` loop, which
stops the cell there; else once the running cell ends), then shut the kernel down so its GPU
goes back. Resume: take the session's lease, wait for the resources the checkpoint needs,
start a kernel for the notebook, restore, run the restore test, release the lease.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from .. import ledger
from ..config import PauseConfig
from ..errors import CheckpointDamaged, CheckpointNotFound
from ..notebook import session_from_path
from ..protocol import PauseReply, ResumeReply, SafePointRequest, call_source, parse_reply
from ..store.catalog import Catalog, Listing, passed_over_note
from ..vocabulary import BUSY_STATES, SessionState, Trigger
from . import cellwait, kernelrun, kernelspecs, lease, metrics, prefetch, pulling, resources, standby, views
from .choice import Asked, Choice, blob_damage, noted
from .collaboration import SharedDocuments
from .http import checked_path, http_error, maybe_await
from .hub import Hub
from .release import Releaser
from .session_events import Recorder
from .settings import PauseServer
from .status import Status, StatusBoard, because
from .warning import Warnings

#: Seconds a pause waits for a cell stopped at a safe point to end before shutting its kernel down.
STOP_WAIT = 30.0


class PauseManager:
    """What the REST handlers, the idle policy and the preemption watcher ask to be done."""

    def __init__(self, serverapp: Any, settings: PauseServer, config: PauseConfig) -> None:
        self.serverapp = serverapp
        self.settings = settings
        self.config = config
        self.store = config.open_store()
        self.catalog = Catalog(self.store)
        self.choice = Choice(self.store, self.catalog, config.keyring)
        self.board = StatusBoard(self.store, config.node, config.keyring)
        self.holder = f"server pid {os.getpid()}"
        self.tasks: set[asyncio.Task[Any]] = set()
        #: The pause under way of each session being paused here.
        self.pausing: dict[str, asyncio.Task[Any]] = {}
        self.releaser = Releaser(self, Hub.from_environ())
        self.shared = SharedDocuments(serverapp)  # jupyter-collaboration's documents, where it runs
        self.recorder = Recorder(self)
        #: The pause service's warning before an idle release (see ``warning``).
        self.warnings = Warnings(self.user_activity)
        metrics.watch(self)
        #: The ledger as the sessions panel reads it (each record read once).
        self.ledger = ledger.Cache(self.store)

    # -- lookups ---------------------------------------------------------------------------

    def user_activity(self) -> tuple[float | None, str]:
        """When this server was last used (a cell started, a request changed something), and how;
        (None, "") when it never was."""
        seen = [
            (self.recorder.last_cell, "a cell ran"),
            (self.warnings.last_request, self.warnings.last_request_was or "Keep working"),
        ]
        known = [(t, what) for t, what in seen if t is not None]
        return max(known) if known else (None, "")

    @property
    def contents(self) -> Any:
        return self.serverapp.contents_manager

    @property
    def sessions_manager(self) -> Any:
        return self.serverapp.session_manager

    @property
    def kernels(self) -> Any:
        return self.serverapp.kernel_manager

    @staticmethod
    def session_name(path: str) -> str:
        """The session a notebook path is paused under: the same name its kernel derives."""
        return session_from_path(path)

    async def notebook(self, path: Any) -> str:
        """Check ``path`` names a notebook inside the server root; return it normalised."""
        path = checked_path(path, 'give the notebook\'s path, relative to the server root, as "path"')
        model = await maybe_await(self.contents.get(path, content=False))
        if model.get("type") != "notebook":
            raise http_error(400, f"{path} is a {model.get('type')}, not a notebook")
        return path

    async def kernel_session(self, path: str) -> dict[str, Any] | None:
        """The server session (with its kernel) open on ``path``, if any."""
        for model in await self.notebooks_running():
            if model["path"] == path:
                return model
        return None

    def _busy(self, session: str) -> Status | None:
        status = self.board.local.get(session)
        return status if status is not None and status.state in BUSY_STATES else None

    async def change_state(
        self, session: str, state: str, detail: str = "", *, wait: bool = True, **fields: Any
    ) -> Status:
        """Change a session's state: at once in this server's view (so the check-then-set of a
        request stays atomic), then in the store, off the event loop. Without ``wait``, the
        work goes on while it is written (a resume's progress: a local store's write is synced,
        and on a disk busy reading the checkpoint that took 0.1-0.4 s of a click's start)."""
        status = self.board.record(session, state, detail, **fields)
        writing = asyncio.to_thread(self.board.persist, session)
        if wait:
            await writing
        else:
            self.spawn(writing)
        return status

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run ``coro`` in the background; ``wait`` waits for it."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    # -- pause -----------------------------------------------------------------------------

    async def pause(
        self, path: str, trigger: str = Trigger.BUTTON, release: str | None = None, why: str = ""
    ) -> Status:
        """Start pausing the notebook at ``path``; returns its ``checkpointing`` status.

        ``release``: the id of the release this pause is part of (recorded on the session);
        ``why``: what asked for it, in words, leading its first and last details."""
        path = await self.notebook(path)
        session = self.session_name(path)
        model = await self.kernel_session(path)
        if model is None:
            raise http_error(409, f"{path} has no running kernel: there is nothing to pause")
        busy = self._busy(session)
        if busy is not None:
            raise http_error(409, f"{path} is already {busy.state}: {busy.detail}")
        status = await self.change_state(
            session,
            SessionState.CHECKPOINTING,
            because(why, "waiting for the running cell to finish"),
            path=path,
            verdict=None,
            release=release,
            kernel=model["kernel"].get("name") or None,
        )
        task = self.spawn(self._pause(path, session, model, trigger, why))
        self.pausing[session] = task
        task.add_done_callback(lambda _: self.pausing.pop(session, None) if self.pausing.get(session) is task else None)
        return status

    async def _pause(self, path: str, session: str, model: dict[str, Any], trigger: str, why: str = "") -> None:
        kernel_id = model["kernel"]["id"]
        moments: dict[str, float] = {"pause_requested": time.time()}
        self.recorder.pause_requested(session, kernel_id, trigger, moments["pause_requested"])
        try:
            process = kernelrun.process_of(self.kernels, kernel_id)
            reply, note = await self._checkpoint(path, session, kernel_id, process, trigger, moments["pause_requested"])
        except Exception as e:  # whatever stops a pause ends it as "failed", with the reason
            self.recorder.pause_failed(kernel_id)
            metrics.checkpointed(trigger, ok=False)
            previous = await asyncio.to_thread(self._newest, session)
            tail = f"; checkpoint {previous} stays the newest" if previous else ""
            kernel = "" if isinstance(e, kernelrun.KernelDied) else "; the kernel keeps running"
            await self.change_state(session, SessionState.FAILED, because(why, f"pause failed: {e}{tail}{kernel}"))
            return
        checkpoint = reply.checkpoint
        moments["checkpoint_committed"] = time.time()
        metrics.checkpointed(trigger, True, moments["checkpoint_committed"] - moments["pause_requested"], reply.bytes)
        await maybe_await(self.sessions_manager.delete_session(model["id"]))
        moments["kernel_stopped"] = time.time()
        await self.change_state(
            session,
            SessionState.PAUSED,
            because(why, f"kernel shut down; checkpoint {checkpoint}{reply.elsewhere_note()}{note}"),
            checkpoint=checkpoint,
            moments=moments,
        )

    async def _checkpoint(
        self, path: str, session: str, kernel_id: str, process: tuple[int, Any], trigger: str, requested: float
    ) -> tuple[PauseReply, str]:
        """Checkpoint the kernel: at its loop's next safe point while a cell runs one (the cell
        stops there), else once the cell ends; the kernel's reply (the checkpoint, its size), and
        why the notebook's shared document could not be saved first ("" when it was, or is none)."""
        timeout = self.settings.busy_timeout
        if trigger == Trigger.SPOT:
            timeout = min(timeout, self.settings.preemption_grace)
        elif trigger == Trigger.SIGTERM:
            timeout = min(timeout, self.settings.shutdown_budget)

        async def tell(detail: str) -> None:
            await self.change_state(session, SessionState.CHECKPOINTING, detail)

        request = SafePointRequest(session, trigger, requested=requested)
        unsaved = await self.shared.save(path)  # the last edit before the click, in the file the kernel reads
        line = await cellwait.wait_for_cell(
            self.kernels, kernel_id, timeout, process, request, tell, self.settings.checkpoint_timeout
        )
        if line is not None:
            reply = parse_reply(line, PauseReply)
            checkpoint = reply.checkpoint
            await self.change_state(
                session, SessionState.CHECKPOINTING, f"checkpoint {checkpoint} taken at a safe point; stopping"
            )
            try:  # the cell stops at once (CellPaused); shut down after it, or anyway
                await cellwait.wait_ended(self.kernels, kernel_id, STOP_WAIT, process)
            except kernelrun.KernelCodeError:
                pass
            return reply, unsaved
        await self.change_state(session, SessionState.CHECKPOINTING, "checkpointing the kernel")
        unsaved = await self.shared.save(path)  # and what came while the cell ran (its outputs)
        source = call_source(request)  # travels as the plain pause request
        output = await kernelrun.execute(self.kernels, kernel_id, source, self.settings.checkpoint_timeout, process)
        return parse_reply(output, PauseReply), unsaved

    def _newest(self, session: str) -> str | None:
        checkpoints = self.catalog.checkpoints(session)
        return checkpoints[0].id if checkpoints else None

    # -- resume ----------------------------------------------------------------------------

    async def resume(
        self,
        path: str,
        checkpoint: str = "latest",
        map_location: str | None = None,
        force: bool = False,
        allow_partial: bool = False,
        kernel_name: str | None = None,
    ) -> Status:
        """Start resuming ``path``: take the lease now (409 if held), do the rest in the background.

        A session running on another node (resumed there, or being paused or resumed there) is
        refused unless ``force``: for when that node is gone for good. The kernel started is the
        kernelspec the session ran on, unless ``kernel_name`` picks one (``kernelspecs``).
        """
        path = await self.notebook(await pulling.pulled_if_missing(self, path))
        session = self.session_name(path)
        if map_location not in (None, "auto", "cpu"):
            raise http_error(400, f'"map_location" must be "auto" or "cpu", not {map_location!r}')
        if not isinstance(checkpoint, str) or not checkpoint:
            raise http_error(400, '"checkpoint" must be "latest" or a checkpoint id')
        running = await self.kernel_session(path)
        if running is not None:
            raise http_error(409, f"{path} already has a running kernel ({running['kernel']['id']}); pause it first")
        busy = self._busy(session)
        if busy is not None:
            raise http_error(409, f"{path} is already {busy.state} here: {busy.detail}")
        elsewhere = await asyncio.to_thread(self.board.read, session, True)
        if not force and elsewhere is not None and elsewhere.node != self.config.node:
            if elsewhere.state in BUSY_STATES or (elsewhere.state == SessionState.READY and elsewhere.verdict):
                since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(elsewhere.updated))
                raise http_error(
                    409,
                    f"{path} is {elsewhere.state} on {elsewhere.node} (since {since}); pause it there "
                    'first, or pass "force": true if that node is gone',
                )
        paused_from = elsewhere.checkpoint if elsewhere is not None else None
        kernel = await kernelspecs.wanted(self, path, elsewhere, kernel_name)
        try:
            manifest, decision = await asyncio.to_thread(
                self.choice.decide, session, checkpoint, elsewhere, allow_partial
            )
        except CheckpointDamaged as e:
            raise http_error(409, str(e)) from e
        except CheckpointNotFound as e:
            raise http_error(404, str(e)) from e
        note = passed_over_note(decision.newer(manifest), manifest.id)
        try:
            held = await lease.acquire(
                self.store,
                session,
                self.holder,
                self.config.node,
                "resumed",
                self.settings.lease_seconds,
                self.settings.lease_settle,
                self.config.keyring,
            )
        except lease.LeaseHeld as e:
            raise http_error(409, str(e)) from e
        finally:
            self.board.ignore(session, "lease", lease.IGNORED.pop(session, None))
        location = map_location or ("cpu" if self.settings.allow_cpu_fallback else "auto")
        status = await self.change_state(
            session,
            SessionState.WAITING,
            noted("checking resources", note),
            path=path,
            checkpoint=manifest.id,
            verdict=None,
            release=None,
            kernel=kernel.recorded,
        )
        asked = Asked(checkpoint, paused_from or "", allow_partial, decision, kernel)
        self.spawn(self._resume(path, session, manifest, location, held, note, asked))
        return status

    def resume_listing(self, session: str, status: Status | None) -> Listing:
        """The session's checkpoints as its resume of "latest" sees them (see ``choice``)."""
        return self.choice.listing(session, status)

    async def _resume(
        self,
        path: str,
        session: str,
        manifest: Any,
        location: str,
        held: lease.Lease,
        note: str = "",
        asked: Asked | None = None,
    ) -> None:
        """Restore in the background; ``note`` (checkpoints passed over) stays in each detail, and
        at the end says what the kernel passed over."""
        outcome: ResumeReply | None = None
        failure = ""
        try:
            outcome = await self._restore(path, session, manifest, location, note, asked or Asked(manifest.id))
        except Exception as e:  # whatever stops a resume ends it as "failed", with the reason
            failure = f"resume failed: {e}"
        finally:
            await asyncio.to_thread(lease.release, self.store, session, held, self.config.keyring)
        # The lease is free before anyone can read the outcome and try again.
        metrics.resumed(outcome.verdict if outcome is not None else None)
        if outcome is None:
            await self.change_state(session, SessionState.FAILED, noted(failure, note))
        else:
            passed_over = outcome.report.get("damaged") or {}
            found: dict[str, str] = {}
            if isinstance(passed_over, dict) and passed_over:
                passed_over = {str(k): str(v) for k, v in passed_over.items()}
                note = passed_over_note(passed_over, outcome.checkpoint)
                found = blob_damage(passed_over, asked)
            previous = await asyncio.to_thread(self.board.get, session)
            known = dict(previous.damaged) if previous is not None else {}
            if self.config.keyring is None and os.environ.get("JUPYTERHUB_USER"):
                note = "; ".join(filter(None, [note, str(outcome.report.get("signature") or "")]))
            await self.change_state(
                session,
                SessionState.READY,
                noted(f"{outcome.verdict}: {outcome.detail}", note),
                checkpoint=outcome.checkpoint,  # the one restored, as the kernel reports it
                verdict=outcome.verdict,
                damaged={**known, **found},
            )

    async def _restore(
        self, path: str, session: str, manifest: Any, location: str, note: str, asked: Asked
    ) -> ResumeReply:
        previous = await asyncio.to_thread(self.board.get, session)
        moments: dict[str, float | None] = dict(getattr(previous, "moments", None) or {})
        moments["resume_requested"] = time.time()
        kernel = await kernelspecs.present(self, asked.kernel, manifest.id)
        fetching = prefetch.begin(self.store, manifest)  # the wait and the kernel's start are spent fetching
        warming = standby.Warming(self, path, kernel, manifest, fetching.copies)  # and a wait, in its imports
        try:

            async def waiting(lack: str) -> None:
                warming.begin()
                fetching.read_ahead()  # a wait has time for it
                said, progress = fetching.after(lack), fetching.progress()
                await self.change_state(session, SessionState.WAITING, said, wait=False, prefetched=progress)

            await resources.wait(manifest, self.settings, location, waiting)
            moments["resources_available"] = time.time()
            metrics.waited(moments["resources_available"] - moments["resume_requested"])
            await self.change_state(
                session, SessionState.RESTORING, f"starting a {kernel} kernel", wait=False, kernel=kernel
            )
            kernel_id = await warming.kernel()
            start_within, run_within = self.settings.kernel_start_timeout, self.settings.checkpoint_timeout
            client = warming.client() or await kernelrun.first_client(self.kernels, kernel_id, start_within)
            moments["kernel_ready"] = time.time()
            fetching.read_ahead()  # not before: a new kernel's start reads the disk too

            async def restoring() -> None:  # the kernel reads what is here, and claims the rest
                said = noted(f"restoring checkpoint {manifest.id}", fetching.after(note))
                progress = fetching.progress()
                await self.change_state(session, SessionState.RESTORING, said, wait=False, prefetched=progress)

            async def begun() -> None:  # the notebook takes the kernel: a cell run in it now runs after the restore
                await warming.bind()
                await restoring()

            # The kernel chooses ("latest" or an id) by %resume's rule, passing over one whose blobs are damaged.
            request = asked.request(session, location, _known(moments), self.settings.rebuild, manifest)
            async with prefetch.showing(fetching, restoring):  # the restore owns the client, and stops it
                output = await kernelrun.execute(
                    self.kernels, kernel_id, call_source(request), run_within, client=client, begun=begun
                )
            reply = parse_reply(output, ResumeReply)
            await self.recorder.resumed(reply.report)  # the kernel left its report and ledger events to us
            return reply
        finally:
            await asyncio.to_thread(fetching.discard)
            await warming.close()

    # -- reading ---------------------------------------------------------------------------

    async def status(self, path: str) -> Status:
        """The state of the session of ``path`` (``ready`` when nothing was ever done to it)."""
        path = checked_path(path, "give the notebook's path as ?path= (or no path, for the server's status)")
        session = self.session_name(path)
        status = await asyncio.to_thread(self.board.get, session)
        return status or Status(session, SessionState.READY, "not paused", path=path, node=self.config.node)

    async def notebooks_running(self) -> list[dict[str, Any]]:
        """The server sessions of notebooks with a kernel here now (models of the sessions API)."""
        return [
            m
            for m in await maybe_await(self.sessions_manager.list_sessions())
            if m.get("type") in (None, "notebook") and m.get("kernel") and m.get("path")
        ]

    async def overview(self) -> dict[str, Any]:
        """This server's status, with its newest release (see ``views.overview``)."""
        return await views.overview(self)

    async def sessions(self) -> list[dict[str, Any]]:
        """Every session in the store (from any node) with its state and newest checkpoint."""
        return await asyncio.to_thread(views.session_rows, self)

    async def pull(self, session: Any, path: Any = None, overwrite: bool = False) -> dict[str, Any]:
        """Copy a session's notebook (from its newest checkpoint) into this server's root."""
        return await pulling.pull(self, session, path, overwrite)

    async def wait(self) -> None:
        """Wait for the pauses and resumes in flight (tests and shutdown)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


def _known(moments: dict[str, float | None]) -> dict[str, float]:
    keep = ("kernel_stopped", "resume_requested", "resources_available", "kernel_ready")
    return {k: v for k, v in moments.items() if k in keep and v is not None}
