"""Releasing a server: pause every notebook session at once, then have the Hub stop the server.

On JupyterHub the GPU belongs to the user's server, not to a kernel: shutting kernels down frees
GPU memory, but the pod keeps its GPU until the server stops. A release pauses every session with
a kernel (in parallel, each exactly as ``pause`` does: through a running loop's next safe point,
else after the running cell), records which sessions it paused under ``releases/<id>.json`` and on
each session's status, and only when every pause succeeded asks the Hub to stop this server. A
failed pause stops nothing: the server keeps running and the release names the session and why.

The same pausing runs when the server gets SIGTERM (``shutdown``), within a time budget, with the
server exiting afterwards instead of asking the Hub.

A release moves through ``pausing`` -> ``stopping`` -> ``stopped``, or ends ``paused`` (every
session paused, the server not stopped: ``server_stop`` says why) or ``failed``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from tornado import web

from ..errors import StoreError
from ..store.layout import new_checkpoint_id, release_key
from ..vocabulary import RELEASE_ACTIVE_STATES, RELEASE_TRIGGERS, ReleaseState, SessionState, Trigger
from . import metrics
from .http import http_error
from .hub import Hub

log = logging.getLogger(__name__)


@dataclass
class Release:
    """One release of this server, as the status endpoint and the store show it."""

    id: str
    trigger: str
    node: str
    user: str | None = None
    state: str = ReleaseState.PAUSING
    server_stop: str | None = None
    detail: str = "pausing every session"
    started: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    sessions: list[dict[str, Any]] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        return asdict(self)

    def move(self, state: str, detail: str, server_stop: str | None = None) -> None:
        self.state, self.detail, self.updated = state, detail, time.time()
        if server_stop is not None:
            self.server_stop = server_stop


class Releaser:
    """Starts releases, runs them, and keeps the newest one for the status endpoint."""

    def __init__(self, manager: Any, hub: Hub | None) -> None:
        self.manager = manager
        self.hub = hub
        self.current: Release | None = None

    def start(self, trigger: Any = Trigger.BUTTON) -> Release:
        """Start releasing this server; the release as it starts (409 while one is under way).

        ``trigger``: who asks, one of ``vocabulary.RELEASE_TRIGGERS`` (SIGTERM's comes from ``shutdown``)."""
        if trigger not in RELEASE_TRIGGERS:
            raise http_error(400, f'"trigger" must be one of {", ".join(RELEASE_TRIGGERS)}, not {trigger!r}')
        if self.current is not None and self.current.state in RELEASE_ACTIVE_STATES:
            raise http_error(409, f"a release is already {self.current.state}: {self.current.detail}")
        release = self._new(trigger)
        self.manager.warnings.consume(trigger)
        self.manager.spawn(self.run(release))
        return release

    def _new(self, trigger: str) -> Release:
        release = Release(
            new_checkpoint_id(), trigger, self.manager.config.node, user=self.hub.user if self.hub else None
        )
        self.current = release
        return release

    async def run(self, release: Release, budget: float | None = None, exiting: bool = False) -> Release:
        """Pause every session, then stop the server through the Hub (unless ``exiting``: the
        server is on its way out already). ``budget``: seconds the pauses may take in all."""
        try:
            await self._pause_all(release, budget)
            failed = [s for s in release.sessions if s["state"] != SessionState.PAUSED]
            if failed:
                names = "; ".join(f"{s['path']}: {s['detail']}" for s in failed)
                release.move(
                    ReleaseState.FAILED,
                    f"{len(failed)} of {len(release.sessions)} sessions not paused ({names}); "
                    "the server keeps running: fix that session and release again",
                )
            elif exiting:
                release.move(ReleaseState.STOPPED, f"{_paused(release)}; the server is exiting", server_stop="signal")
            elif self.hub is None:
                release.move(
                    ReleaseState.PAUSED,
                    f"{_paused(release)}; this server does not run under JupyterHub, so there is no Hub to "
                    "stop it (its kernels are stopped, so their GPU memory is free)",
                    server_stop="no-hub",
                )
            else:
                release.move(ReleaseState.STOPPING, f"{_paused(release)}; asking the Hub to stop {self.hub.described}")
                # The Hub may stop this process before it answers: the store says "stopping" first.
                await self._persist(release)
                await self.manager.recorder.server_stopping(Trigger.RELEASE)  # the Hub may stop us before it answers
                outcome = await self.hub.stop_server()
                state = ReleaseState.STOPPED if outcome.outcome == "stopped" else ReleaseState.PAUSED
                if state != ReleaseState.STOPPED:
                    await self.manager.recorder.server_not_stopped()
                release.move(state, f"{_paused(release)}; {outcome.detail}", server_stop=outcome.outcome)
        except Exception as e:  # a release that cannot finish says so, and stops nothing
            log.exception("jupyter-pause: release %s failed", release.id)
            release.move(ReleaseState.FAILED, f"the release failed: {e}; the server keeps running")
        await self._persist(release)
        metrics.released(release.state)
        log.info("jupyter-pause: release %s %s: %s", release.id, release.state, release.detail)
        return release

    async def _pause_all(self, release: Release, budget: float | None) -> None:
        models = await self.manager.notebooks_running()
        release.sessions = [
            {
                "path": m["path"],
                "session": self.manager.session_name(m["path"]),
                "state": SessionState.CHECKPOINTING,
                "detail": "",
                "checkpoint": None,
            }
            for m in models
        ]
        release.move(ReleaseState.PAUSING, f"pausing {len(models)} session{'s' if len(models) != 1 else ''}")
        await self._persist(release)
        trigger = Trigger.SIGTERM if release.trigger == Trigger.SIGTERM else Trigger.RELEASE
        jobs = [self._pause_one(row, trigger, release.id) for row in release.sessions]
        if not jobs:
            return
        if budget is None:
            await asyncio.gather(*jobs)
            return
        done, pending = await asyncio.wait([asyncio.ensure_future(j) for j in jobs], timeout=budget)
        for job in pending:
            job.cancel()
        for row in release.sessions:
            if row["state"] == SessionState.CHECKPOINTING:
                row["state"] = SessionState.FAILED
                row["detail"] = f"not paused within the {budget:g} s budget"

    async def _pause_one(self, row: dict[str, Any], trigger: str, release_id: str) -> None:
        """Pause one session and fill its row with how that went."""
        try:
            await self.manager.pause(row["path"], trigger=trigger, release=release_id)
        except web.HTTPError as e:
            if self.manager.pausing.get(row["session"]) is None:  # not a pause already under way
                row.update(state=SessionState.FAILED, detail=str(e.log_message))
                return
        task = self.manager.pausing.get(row["session"])
        if task is not None:
            await asyncio.shield(task)
        status = self.manager.board.local.get(row["session"])
        if status is None:
            row.update(state=SessionState.FAILED, detail="no state was recorded for the pause")
            return
        row.update(
            state=SessionState.PAUSED if status.state == SessionState.PAUSED else SessionState.FAILED,
            detail=status.detail,
            checkpoint=status.checkpoint,
        )

    async def _persist(self, release: Release) -> None:
        data = json.dumps(release.public()).encode()
        try:
            await asyncio.to_thread(self.manager.store.write, release_key(release.id), data)
        except StoreError as e:
            log.warning("jupyter-pause: release %s not recorded in the store: %s", release.id, e)

    async def stopped_by_hub(self) -> bool:
        """Whether this server is stopping because its release asked the Hub to (the signal that
        follows is the Hub's doing); the release is then recorded as stopped."""
        release = self.current
        if release is None or release.state != ReleaseState.STOPPING:
            return False
        described = self.hub.described if self.hub else "this server"
        release.move(
            ReleaseState.STOPPED, f"{_paused(release)}; the Hub is stopping {described}", server_stop="stopped"
        )
        await self._persist(release)
        return True

    def release_on_signal(self) -> Release:
        """A release for a SIGTERM: it runs even while another is under way (the server exits)."""
        return self._new(Trigger.SIGTERM)


def _paused(release: Release) -> str:
    n = len(release.sessions)
    return "nothing to pause" if n == 0 else f"paused {n} session{'s' if n != 1 else ''}"
