"""Pausing without a click: the idle policy and the cloud preemption watcher (both off by default)."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.ioloop import PeriodicCallback

from ..errors import PauseError
from ..vocabulary import Trigger

log = logging.getLogger(__name__)


async def pause_all(manager: Any, trigger: str, only_idle_for: float | None = None) -> list[str]:
    """Pause every notebook with a running kernel (idle ones only, when ``only_idle_for`` is set)."""
    paused = []
    now = datetime.datetime.now(datetime.timezone.utc)
    for model in await manager.notebooks_running():
        if only_idle_for is not None:
            kernel = manager.kernels.get_kernel(model["kernel"]["id"])
            last = getattr(kernel, "last_activity", None)
            state = getattr(kernel, "execution_state", "")
            if state != "idle" or last is None or (now - last).total_seconds() < only_idle_for:
                continue
        try:
            await manager.pause(model["path"], trigger=trigger)
            paused.append(model["path"])
        except (web.HTTPError, PauseError) as e:
            log.warning("jupyter-pause: could not pause %s (%s): %s", model["path"], trigger, e)
    return paused


class PreemptionWatcher:
    """Polls the AWS spot and GCE preemption notices; on a notice, pauses every session once."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.settings = manager.settings
        self.noticed: str | None = None

    async def notice(self) -> str | None:
        """The notice, if either endpoint gives one now."""
        client = AsyncHTTPClient()
        if self.settings.aws_spot_url:
            try:
                response = await client.fetch(self.settings.aws_spot_url, request_timeout=2.0)
                return f"AWS spot interruption notice: {response.body.decode(errors='replace')[:200]}"
            except HTTPClientError as e:
                if e.code != 404:
                    log.debug("jupyter-pause: spot notice poll: %s", e)
            except OSError as e:
                log.debug("jupyter-pause: spot notice poll: %s", e)
        if self.settings.gce_preempted_url:
            try:
                response = await client.fetch(
                    self.settings.gce_preempted_url, headers={"Metadata-Flavor": "Google"}, request_timeout=2.0
                )
                if response.body.strip().upper() == b"TRUE":
                    return "GCE preemption notice"
            except (HTTPClientError, OSError) as e:
                log.debug("jupyter-pause: preemption poll: %s", e)
        return None

    async def poll(self) -> None:
        if self.noticed is not None:
            return
        notice = await self.notice()
        if notice is None:
            return
        self.noticed = notice
        log.warning("jupyter-pause: %s; pausing every session", notice)
        await pause_all(self.manager, Trigger.SPOT)


def start_watchers(manager: Any) -> list[PeriodicCallback]:
    """Start the watchers the settings turn on; returns their callbacks."""
    settings = manager.settings
    started = []
    if settings.idle_pause_after > 0:
        idle = PeriodicCallback(
            lambda: pause_all(manager, Trigger.IDLE, only_idle_for=settings.idle_pause_after),
            settings.idle_check_interval * 1000,
        )
        idle.start()
        started.append(idle)
    if settings.aws_spot_url or settings.gce_preempted_url:
        watcher = PreemptionWatcher(manager)
        manager.preemption = watcher
        poll = PeriodicCallback(watcher.poll, settings.preemption_poll_interval * 1000)
        poll.start()
        started.append(poll)
    manager.watchers = started
    return started
