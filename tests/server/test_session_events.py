"""The ledger a real Jupyter server and its real kernels write through a pause/resume cycle, and
what the sessions panel reads back of it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from jupyter_client.session import Session

from jupyter_pause import ledger
from jupyter_pause.server.session_events import CLOCK_TOLERANCE, Recorder, sent_at
from jupyter_pause.store.storage import Store
from tests.support.server_helpers import call, open_kernel, server_config, user_cell, wait_state, write_notebook
from tests.support.server_process import running_server


@pytest.fixture
def pause_server():
    return {"cuda_devices": 2}


@pytest.mark.integration
async def test_a_pause_resume_cycle_is_in_the_ledger_in_order(jp_fetch, jp_serverapp, jp_root_dir, store):
    path = write_notebook(jp_root_dir, "work/train.ipynb", "x = 1")
    opened = time.time()
    kernel = await open_kernel(jp_fetch, path)
    await user_cell(jp_serverapp, kernel, "import time\nbig = bytes(3_000_000)\ntime.sleep(0.6)")
    await call(jp_fetch, "pause", path=path)
    paused = await wait_state(jp_fetch, path, ("paused", "failed"))
    assert paused["state"] == "paused", paused

    # the panel: paused since the kernel stopped, with the 2 GPUs this server offers released since
    rows = json.loads((await jp_fetch("jupyter-pause", "api", "sessions")).body)["sessions"]
    (row,) = [r for r in rows if r["session"] == "work--train"]
    assert opened < row["paused_since"] <= time.time()
    assert row["gpu_hours_released"] == pytest.approx((time.time() - row["paused_since"]) / 3600 * 2, abs=1e-3)

    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready", ready
    manager = jp_serverapp.web_app.settings["jupyter_pause"]
    await manager.wait()

    events, malformed = ledger.read(Store(str(store)))
    assert malformed == 0
    mine = [e for e in events if e.session == "work--train"]
    assert [e.event for e in mine] == [
        "kernel_started",
        "pause_requested",
        "checkpoint_committed",
        "activity",
        "kernel_stopped",
        "resume_requested",
        "resources_available",
        "kernel_started",
        "kernel_ready",
        "next_cell_run",
    ], [(e.event, e.at, e.trigger, e.spans) for e in mine]
    by = {e.event: e for e in mine}
    for event in mine:
        assert event.node == "node-a" and event.user == ledger.current_user(), event
    # the server knows the GPUs it offers; these kernels see none (no GPU on this machine)
    assert by["kernel_started"].gpus == 2 and by["kernel_stopped"].gpus == 2
    assert by["pause_requested"].trigger == "button" and by["kernel_stopped"].trigger == "button"
    committed = by["checkpoint_committed"]
    assert committed.trigger == "button" and committed.checkpoint == paused["checkpoint"]
    assert committed.bytes_total >= 3_000_000 and 0 < committed.bytes <= committed.bytes_total
    assert by["kernel_ready"].bytes == committed.bytes_total
    spans = by["activity"].spans  # the user's cell; the server's checkpoint and restore are not work
    assert spans is not None and len(spans) == 1, spans
    (span,) = spans
    assert 0.6 <= span[1] - span[0] < 5
    assert by["next_cell_run"].extra["verdict"] == "restored"
    assert by["kernel_stopped"].at >= by["checkpoint_committed"].at
    assert paused["moments"]["kernel_stopped"] == pytest.approx(by["kernel_stopped"].at, abs=1.0)


@pytest.mark.integration
async def test_a_kernel_shut_down_by_hand_is_stopped_in_the_ledger(jp_fetch, jp_serverapp, jp_root_dir, store):
    path = write_notebook(jp_root_dir, "plain.ipynb", "x = 1")
    kernel = await open_kernel(jp_fetch, path)
    await jp_fetch("api", "kernels", kernel, method="DELETE")
    await jp_serverapp.web_app.settings["jupyter_pause"].wait()
    events, _ = ledger.read(Store(str(store)))
    assert [(e.event, e.session, e.trigger) for e in events if e.session == "plain"] == [
        ("kernel_started", "plain", None),
        ("kernel_stopped", "plain", None),
    ]


@pytest.mark.integration
async def test_sigterm_pauses_and_the_server_stop_is_in_the_ledger(tmp_path):
    store = str(tmp_path / "store")
    root = tmp_path / "disk"
    write_notebook(root, "job.ipynb", "x = 1")
    with running_server(tmp_path / "srv", store, "node-a", "--PauseServer.shutdown_budget=60", root=root) as server:
        kernel = await server.open_kernel("job.ipynb")
        await server.run(kernel, "x = 2")
        server.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 120
        while server.process.poll() is None:
            assert time.monotonic() < deadline, server.log_tail()
            await asyncio.sleep(0.1)
    events, malformed = ledger.read(Store(store))
    assert malformed == 0
    assert [(e.event, e.session, e.trigger) for e in events if e.node == "node-a"] == [
        ("kernel_started", "job", None),
        ("pause_requested", "job", "sigterm"),
        ("checkpoint_committed", "job", "sigterm"),
        ("activity", "job", None),
        ("kernel_stopped", "job", "sigterm"),
        ("server_stopped", None, "sigterm"),
    ]


@pytest.mark.integration
class TestRestarts:
    @pytest.fixture
    def jp_server_config(self, store):
        config = server_config(str(store), cuda_devices=2)
        # Jupyter restarts a dead kernel once it has run stably; a quick poll and a short "stable"
        # time stand for its 3 s poll and a kernel that has run for a while.
        config["KernelRestarter"] = {"time_to_dead": 0.2, "stable_start_time": 1}
        return config

    async def test_restarts_keep_the_kernel_and_a_kernel_that_died_ends_its_cell(
        self, jp_fetch, jp_serverapp, jp_root_dir, store
    ):
        path = write_notebook(jp_root_dir, "oom.ipynb", "x = 1")
        kernel = await open_kernel(jp_fetch, path)
        manager = jp_serverapp.web_app.settings["jupyter_pause"]
        managed = jp_serverapp.kernel_manager.get_kernel(kernel)
        while managed._restarter._initial_startup:  # the kernel counts as stably started
            await asyncio.sleep(0.05)
        client = managed.client(session=Session(key=managed.session.key))
        client.start_channels()
        try:
            client.execute("import time\ntime.sleep(600)")
            await _until(lambda: kernel in manager.recorder.busy, "the server never saw the cell start")
            pid = managed.provisioner.process.pid
            os.kill(pid, signal.SIGKILL)  # the cell dies with its kernel (the OOM killer, say)
            await _until(lambda: _events(store, "kernel_restarted"), "no kernel_restarted after the kernel died")
            await _until(lambda: _pid(managed) not in (None, pid), "the kernel was not restarted")
            await managed.ready  # the restart has finished: a user's restart now is not one inside it
        finally:
            client.stop_channels()
        await jp_fetch("api", "kernels", kernel, "restart", method="POST", body="{}")
        await jp_fetch("api", "kernels", kernel, method="DELETE")
        await manager.wait()
        events = [e for e in ledger.read(Store(str(store)))[0] if e.session == "oom"]
        assert [(e.event, e.extra.get("reason")) for e in events] == [
            ("kernel_started", None),
            ("activity", None),
            ("kernel_restarted", "died"),
            ("kernel_restarted", "user"),
            ("kernel_stopped", None),
        ]
        activity, died = events[1], events[2]
        ((start, end),) = activity.spans  # the cell ran until the kernel died, not until its stop
        assert start < end == died.at < events[3].at


async def _until(check: Any, why: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, why
        await asyncio.sleep(0.05)


def _events(store: Any, name: str) -> list[ledger.Event]:
    return [e for e in ledger.read(Store(str(store)))[0] if e.event == name]


class _Manager:
    """What the recorder needs of a pause manager, writing to a folder."""

    def __init__(self, store: str) -> None:
        self.store = Store(store)
        self.config = SimpleNamespace(node="node-x")
        self.settings = SimpleNamespace(cuda_devices=1)
        self.tasks: list[Any] = []

    def spawn(self, coro: Any) -> None:
        self.tasks.append(coro)


def test_a_long_cell_is_cut_at_each_flush_and_its_spans_are_written_at_the_stop(tmp_path) -> None:
    manager = _Manager(str(tmp_path))
    recorder = Recorder(manager)
    recorder.sessions["k"] = "nb"
    recorder.cell("k", "busy", 100.0)
    recorder.cell("k", "idle", 110.0)
    recorder.cell("k", "busy", 200.0)  # still running at the flush
    event = recorder._activity("k", 300.0)
    assert event is not None and event.spans == [[100.0, 110.0], [200.0, 300.0]] and event.at == 300.0
    recorder.cell("k", "idle", 350.0)
    recorder.cell("k", "idle", 360.0)  # an idle without a busy (the kernel's start) is no span
    assert recorder._activity("k", 400.0).spans == [[300.0, 350.0]]
    assert recorder._activity("k", 500.0) is None  # nothing ran: no record
    recorder.cell("k", "busy", 600.0)
    activity, stopped = recorder.ended("k", "idle")
    assert activity.spans[0][0] == 600.0 and stopped.event == "kernel_stopped" and stopped.trigger == "idle"
    assert (stopped.session, stopped.node, stopped.gpus) == ("nb", "node-x", 1)
    assert recorder.ended("k", None) == []  # once


def test_a_cells_span_is_timed_by_the_kernels_message_dates_when_they_are_this_machines_clock() -> None:
    received = 1_800_000_000.0
    sent = datetime.fromtimestamp(received - 2.5, timezone.utc)  # waited 2.5 s for a busy server
    assert sent_at({"date": sent}, received) == received - 2.5
    assert sent_at({}, received) == received  # no date
    assert sent_at({"date": sent.replace(tzinfo=None)}, received) == received  # whose clock? not said
    skewed = datetime.fromtimestamp(received - CLOCK_TOLERANCE - 1, timezone.utc)
    assert sent_at({"date": skewed}, received) == received  # another machine's clock


def test_an_idle_sent_before_a_flush_cut_its_cell_ends_no_span_before_it_starts(tmp_path) -> None:
    recorder = Recorder(_Manager(str(tmp_path)))
    recorder.sessions["k"] = "nb"
    recorder.cell("k", "busy", 100.0)
    assert recorder._activity("k", 200.0).spans == [[100.0, 200.0]]
    recorder.cell("k", "idle", 199.5)  # sent before the flush, read after it
    assert recorder._activity("k", 300.0).spans == [[200.0, 200.0]]


def _pid(managed) -> int | None:
    """The kernel process's pid; None while a restart has none running."""
    process = managed.provisioner.process if managed.provisioner is not None else None
    return process.pid if process is not None else None
