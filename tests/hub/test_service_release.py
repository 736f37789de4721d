"""Releasing one server and the check loop, against fake Hub and server answers: what is left
running and why, and that a server is only stopped after a release paused all of it."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

from jupyter_pause.hub import policy, release
from jupyter_pause.hub.hubapi import Answer
from jupyter_pause.hub.policy import Policy, ServerView
from jupyter_pause.hub.release import Settings
from jupyter_pause.hub.report import Report
from jupyter_pause.hub.service import PauseService

QUICK = Settings(timeout=5, every=0.001)


def record(state: str, **more: Any) -> dict[str, Any]:
    return {"id": "r1", "state": state, "detail": f"release {state}", "server_stop": None, "sessions": [], **more}


class FakeServers:
    """A user's server: its kernels, its answer to the release, then its status answers in turn."""

    def __init__(self, kernels: Answer, asked: Answer, *statuses: Answer) -> None:
        self.kernels_answer, self.asked, self.statuses = kernels, asked, list(statuses)
        self.released = 0

    async def kernels(self, server: ServerView) -> Answer:
        return self.kernels_answer

    async def release(self, server: ServerView, trigger: str = "service") -> Answer:
        self.released += 1
        return self.asked

    async def status(self, server: ServerView) -> Answer:
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]


class FakeHub:
    def __init__(self, model: dict[str, Any] | None = None, servers: list[ServerView] | None = None) -> None:
        self.model = model if model is not None else {"ready": True, "pending": None}
        self.listed = servers or []
        self.stopped: list[str] = []

    async def server(self, user: str, server_name: str) -> dict[str, Any] | None:
        return self.model

    async def stop(self, user: str, server_name: str) -> Answer:
        self.stopped.append(user)
        return Answer(204, None)

    async def servers(self) -> list[ServerView]:
        return self.listed


IDLE_KERNELS = Answer(200, [{"id": "k1", "execution_state": "idle"}])
NOW = datetime.now(timezone.utc)
VIEW = ServerView("ann", "", "/user/ann/", True, None, NOW - timedelta(hours=2), NOW - timedelta(hours=1))


def run(servers: FakeServers, hub: FakeHub, settings: Settings = QUICK) -> tuple[policy.Decision, Any]:
    decision = policy.first_look(Policy(idle_timeout=60), VIEW, NOW)
    return asyncio.run(release.handle(VIEW, decision, hub, servers, settings))  # type: ignore[arg-type]


def test_a_busy_kernel_means_no_release_is_asked_for():
    servers = FakeServers(Answer(200, [{"id": "k1", "execution_state": "busy"}]), Answer(202, record("pausing")))
    final, outcome = run(servers, FakeHub())
    assert (final.reason, outcome, servers.released) == (policy.BUSY, None, 0)


def test_a_server_that_cannot_list_its_kernels_or_has_no_extension_is_left_running():
    hub = FakeHub()
    _, outcome = run(FakeServers(Answer(599, "connection refused"), Answer(202, record("pausing"))), hub)
    assert outcome.reason == release.UNREACHABLE and "connection refused" in outcome.detail
    _, outcome = run(FakeServers(IDLE_KERNELS, Answer(404, {"message": "Not Found"})), hub)
    assert outcome.reason == release.NO_EXTENSION
    assert hub.stopped == []


def test_a_failed_release_is_reported_with_the_session_that_failed_and_nothing_is_stopped():
    failed = record("failed", sessions=[{"path": "a.ipynb", "state": "failed", "detail": "store unwritable"}])
    servers = FakeServers(IDLE_KERNELS, Answer(202, record("pausing")), Answer(200, {"release": failed}))
    hub = FakeHub()
    _, outcome = run(servers, hub, Settings(stop_paused=True, timeout=5, every=0.001))
    assert outcome.reason == release.RELEASE_FAILED
    assert "a.ipynb: store unwritable" in outcome.detail
    assert hub.stopped == []


def test_paused_but_not_stopped_names_the_setting_and_stop_paused_stops_it():
    paused = record("paused", server_stop="missing-scope")
    servers = FakeServers(IDLE_KERNELS, Answer(202, record("pausing")), Answer(200, {"release": paused}))
    hub = FakeHub()
    _, outcome = run(servers, hub)
    assert outcome.reason == release.PAUSED_NOT_STOPPED
    assert "c.Spawner.server_token_scopes" in outcome.detail and hub.stopped == []
    _, outcome = run(servers, hub, Settings(stop_paused=True, timeout=5, every=0.001))
    assert (outcome.reason, hub.stopped) == (release.RELEASED, ["ann"])


def test_a_server_that_goes_away_during_its_release_counts_as_released_and_a_stuck_one_does_not():
    servers = FakeServers(IDLE_KERNELS, Answer(202, record("pausing")), Answer(503, "no route"))
    _, outcome = run(servers, FakeHub(model={"ready": False, "pending": "stop"}))
    assert outcome.reason == release.RELEASED and "releases/r1.json" in outcome.detail
    stuck = FakeServers(IDLE_KERNELS, Answer(202, record("pausing")), Answer(200, {"release": record("pausing")}))
    _, outcome = run(stuck, FakeHub(), Settings(timeout=0.05, every=0.001))
    assert outcome.reason == release.RELEASE_TIMEOUT


def test_a_server_left_paused_is_not_asked_again_until_it_is_used_again():
    paused = record("paused", server_stop="missing-scope")
    servers = FakeServers(IDLE_KERNELS, Answer(202, record("pausing")), Answer(200, {"release": paused}))
    hub = FakeHub(servers=[VIEW])  # idle for an hour

    async def checks() -> None:
        service = PauseService(Policy(idle_timeout=60), QUICK, hub, servers, Report({}), 2)  # type: ignore[arg-type]

        async def check() -> None:
            await service.check()
            await asyncio.gather(*service.running.values())

        await check()
        await check()
        assert servers.released == 1
        assert service.report.skipped["ann"]["reason"] == release.PAUSED_NOT_STOPPED
        # as if the release had been a day ago: the hour-old activity came after it
        service.settled[("ann", "")][1].at -= 86400
        await check()
        assert servers.released == 2

    asyncio.run(checks())
