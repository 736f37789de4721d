"""jupyter-server's own kernel culler, on a real server with real kernels: the kernel it takes is
paused (checkpoint, then shut down) and comes back on Resume; a failed checkpoint keeps the kernel;
``pause_culled_kernels = False`` keeps the culler's old kill; ``cull_busy`` and ``cull_connected``
keep their meaning; a warning comes first; the start-up log says what happens to an idle kernel.

The culler checks every second. Its timeout is an hour while a test gives its notebooks their state,
and is shortened (``culler_takes_idle``) once they hold it: the culler's checks then find them idle.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_pause import ledger
from jupyter_pause.notebook import session_from_path
from jupyter_pause.server.culler import CULLER, TICK_SLACK, plan
from jupyter_pause.server.settings import PauseServer
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.metadata import until
from tests.support.server_helpers import call, open_kernel, run, server_config, status, wait_state, write_notebook

pytestmark = pytest.mark.integration

#: The culler's timeout while a test sets its notebooks up: none of them is idle that long.
SETTING_UP = 3600
CULLED = 'jupyter_pause_checkpoints_total{outcome="ok",trigger="idle"}'


@pytest.fixture
def culler() -> dict[str, Any]:
    """``c.MappingKernelManager`` of the test: the culler on, checking every second."""
    return {"cull_idle_timeout": SETTING_UP, "cull_interval": 1}


@pytest.fixture
def pause_server() -> dict[str, Any]:
    return {"culler_warn_before": 0}


@pytest.fixture
def jp_server_config(store: Path, pause_server: dict[str, Any], culler: dict[str, Any]) -> dict[str, Any]:
    return {**server_config(str(store), **pause_server), "MappingKernelManager": culler}


def culler_takes_idle(serverapp: Any, seconds: int = 1) -> None:
    """The culler's timeout from now on (it reads it at each check)."""
    serverapp.kernel_manager.cull_idle_timeout = seconds


async def kernel_ids(fetch: Any) -> list[str]:
    return [k["id"] for k in json.loads((await fetch("api", "kernels")).body)]


async def metrics(fetch: Any) -> dict[str, float]:
    lines = (await fetch("metrics")).body.decode().splitlines()
    return {name: float(value) for name, value in (line.rsplit(" ", 1) for line in lines if line[:1] not in ("", "#"))}


async def server_warning(fetch: Any) -> dict[str, Any] | None:
    return json.loads((await fetch("jupyter-pause", "api", "status")).body)["warning"]


async def test_a_kernel_the_culler_takes_is_paused_and_resumes_with_its_state(
    jp_fetch, jp_serverapp, jp_root_dir, store, manager
):
    path = write_notebook(jp_root_dir, "culled runs/entraînement.ipynb", "x = 1")
    session = session_from_path(path)
    kernel = await open_kernel(jp_fetch, path)
    await run(jp_serverapp, kernel, "import numpy as np\nweights = np.arange(10.0)\nanswer = 42")
    before = await metrics(jp_fetch)

    culler_takes_idle(jp_serverapp)
    paused = await wait_state(jp_fetch, path, ("paused", "failed"), timeout=60)
    assert paused["state"] == "paused", paused
    assert paused["detail"].startswith(f"{CULLER}; kernel shut down; checkpoint {paused['checkpoint']}"), paused
    assert kernel not in await kernel_ids(jp_fetch)
    (newest, *_) = Catalog(Store(str(store))).checkpoints(session)
    assert newest.id == paused["checkpoint"] and newest.trigger == "idle"
    assert (await metrics(jp_fetch))[CULLED] - before.get(CULLED, 0) == 1
    await manager.wait()
    events = [e for e in ledger.read(Store(str(store)))[0] if e.session == session]
    stops = [e for e in events if e.event in ("pause_requested", "kernel_stopped")]
    assert [(e.event, e.trigger) for e in stops] == [("pause_requested", "idle"), ("kernel_stopped", "idle")]

    culler_takes_idle(jp_serverapp, SETTING_UP)  # the check of the values below is not raced by a second pause
    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"), timeout=120)
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    (resumed,) = [k for k in await kernel_ids(jp_fetch) if k != kernel]
    assert (await run(jp_serverapp, resumed, "print(answer, weights.sum())")).split() == ["42", "45.0"]


async def test_a_failed_checkpoint_keeps_the_kernel_and_says_why(
    jp_fetch, jp_serverapp, jp_root_dir, store, manager, tmp_path, caplog
):
    caplog.set_level(logging.WARNING, "jupyter_pause")
    path = write_notebook(jp_root_dir, "unwritable.ipynb", "x = 1")
    kernel = await open_kernel(jp_fetch, path)
    await run(jp_serverapp, kernel, "answer = 42")
    blocker = tmp_path / "store" / "sessions"  # a file where the folder should be: no write under it succeeds
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder")

    culler_takes_idle(jp_serverapp)
    failed = await wait_state(jp_fetch, path, ("paused", "failed"), timeout=60)
    culler_takes_idle(jp_serverapp, SETTING_UP)
    await manager.wait()  # a second try the culler made meanwhile fails as well
    assert failed["state"] == "failed", failed
    detail = failed["detail"]
    assert detail.startswith(f"{CULLER}; pause failed: ") and "the kernel keeps running" in detail, detail
    assert kernel in await kernel_ids(jp_fetch)
    assert (await run(jp_serverapp, kernel, "print(answer)")).strip() == "42"
    said = [r.getMessage() for r in caplog.records if "kernel culler asked for failed" in r.getMessage()]
    assert said and path in said[0] and "the kernel keeps running" in said[0], said


class TestSwitchedOff:
    @pytest.fixture
    def pause_server(self) -> dict[str, Any]:
        return {"pause_culled_kernels": False}

    async def test_the_culler_shuts_kernels_down_as_before(self, jp_fetch, jp_serverapp, jp_root_dir, store):
        path = write_notebook(jp_root_dir, "killed.ipynb", "x = 1")
        kernel = await open_kernel(jp_fetch, path)
        await run(jp_serverapp, kernel, "answer = 42")
        culler_takes_idle(jp_serverapp)
        await until(lambda: _gone(jp_fetch, kernel), 60, "the culler shut the kernel down")
        after = await status(jp_fetch, path)
        assert (after["state"], after["detail"]) == ("ready", "not paused"), after
        assert Catalog(Store(str(store))).checkpoints(session_from_path(path)) == []
        assert await server_warning(jp_fetch) is None


async def _gone(fetch: Any, kernel: str) -> bool:
    return kernel not in await kernel_ids(fetch)


async def test_busy_and_connected_kernels_are_left_alone_as_the_culler_leaves_them(
    jp_fetch, jp_ws_fetch, jp_serverapp, jp_root_dir, manager
):
    busy_path = write_notebook(jp_root_dir, "busy.ipynb", "x = 1")
    busy = await open_kernel(jp_fetch, busy_path)
    seen_path = write_notebook(jp_root_dir, "open in a tab.ipynb", "x = 1")
    seen = await open_kernel(jp_fetch, seen_path)
    idle_path = write_notebook(jp_root_dir, "idle.ipynb", "x = 1")
    idle = await open_kernel(jp_fetch, idle_path)
    await run(jp_serverapp, seen, "answer = 42")
    await run(jp_serverapp, busy, "answer = 42")  # it answers before a client of its own connects
    tab = await jp_ws_fetch("api", "kernels", seen, "channels")
    client = jp_serverapp.kernel_manager.get_kernel(busy).client()
    client.start_channels()
    try:
        client.execute("import time\ntime.sleep(60)")
        await until(lambda: _state_of(jp_fetch, busy, "busy"), 30, "the busy kernel running its cell")
        await run(jp_serverapp, idle, "answer = 42")  # the newest activity: the others are idle for longer

        culler_takes_idle(jp_serverapp)
        paused = await wait_state(jp_fetch, idle_path, ("paused", "failed"), timeout=60)
        assert paused["state"] == "paused", paused
        # the culler's checks that took the idle kernel found the others idle longer, and passed over them
        for path, kernel in ((busy_path, busy), (seen_path, seen)):
            assert (await status(jp_fetch, path))["state"] == "ready", path
            assert kernel in await kernel_ids(jp_fetch), path
        assert idle not in await kernel_ids(jp_fetch)
    finally:
        culler_takes_idle(jp_serverapp, SETTING_UP)
        tab.close()
        await jp_fetch("api", "kernels", busy, "interrupt", method="POST", body="")
        client.stop_channels()
    await manager.wait()


async def _state_of(fetch: Any, kernel: str, state: str) -> bool:
    return json.loads((await fetch("api", "kernels", kernel)).body)["execution_state"] == state


class TestCullBusyAndConnected:
    @pytest.fixture
    def culler(self) -> dict[str, Any]:
        return {"cull_idle_timeout": SETTING_UP, "cull_interval": 1, "cull_busy": True, "cull_connected": True}

    @pytest.fixture
    def pause_server(self) -> dict[str, Any]:
        return {"culler_warn_before": 0, "busy_timeout": 1}

    async def test_connected_kernels_are_paused_and_a_busy_one_keeps_its_cell(
        self, jp_fetch, jp_ws_fetch, jp_serverapp, jp_root_dir, manager
    ):
        seen_path = write_notebook(jp_root_dir, "open in a tab.ipynb", "x = 1")
        seen = await open_kernel(jp_fetch, seen_path)
        busy_path = write_notebook(jp_root_dir, "busy.ipynb", "x = 1")
        busy = await open_kernel(jp_fetch, busy_path)
        await run(jp_serverapp, seen, "answer = 42")
        await run(jp_serverapp, busy, "answer = 42")
        tab = await jp_ws_fetch("api", "kernels", seen, "channels")
        client = jp_serverapp.kernel_manager.get_kernel(busy).client()
        client.start_channels()
        try:
            client.execute("import time\ntime.sleep(60)")
            await until(lambda: _state_of(jp_fetch, busy, "busy"), 30, "the busy kernel running its cell")
            culler_takes_idle(jp_serverapp)
            paused = await wait_state(jp_fetch, seen_path, ("paused", "failed"), timeout=60)
            assert paused["state"] == "paused", paused
            # the culler takes a busy kernel too; the pause waits for its cell, then gives up and keeps it
            failed = await wait_state(jp_fetch, busy_path, ("paused", "failed"), timeout=60)
            culler_takes_idle(jp_serverapp, SETTING_UP)
            await manager.wait()  # a second try the culler made meanwhile gives up as well
            assert failed["state"] == "failed", failed
            assert failed["detail"].startswith(f"{CULLER}; pause failed: "), failed
            assert "busy for more than 1 s" in failed["detail"] and "the kernel keeps running" in failed["detail"]
            assert busy in await kernel_ids(jp_fetch)
        finally:
            culler_takes_idle(jp_serverapp, SETTING_UP)
            tab.close()
            await jp_fetch("api", "kernels", busy, "interrupt", method="POST", body="")
            client.stop_channels()
        assert (await run(jp_serverapp, busy, "print(answer)")).strip() == "42"
        await manager.wait()


class TestWarning:
    @pytest.fixture
    def pause_server(self) -> dict[str, Any]:
        return {"culler_warn_before": 5}

    async def test_a_warning_comes_first_and_keep_working_starts_the_idle_time_again(
        self, jp_fetch, jp_serverapp, jp_root_dir, manager
    ):
        path = write_notebook(jp_root_dir, "warned.ipynb", "x = 1")
        kernel = await open_kernel(jp_fetch, path)
        await run(jp_serverapp, kernel, "answer = 42")

        culler_takes_idle(jp_serverapp)
        warning = await until(lambda: server_warning(jp_fetch), 30, "the culler's warning")
        assert warning["reason"] == f"{CULLER} pauses {path}" and warning["notebooks"] == [path], warning
        assert 0 < warning["seconds_left"] <= 5
        assert (await status(jp_fetch, path))["state"] == "ready"
        kept_at = time.time()
        kept = json.loads((await jp_fetch("jupyter-pause", "api", "release", "warning", method="DELETE")).body)
        assert kept["cancelled"]["notebooks"] == [path], kept
        model = json.loads((await jp_fetch("api", "kernels", kernel)).body)
        assert _epoch(model["last_activity"]) >= kept_at - 1  # the culler's idle time starts again
        assert await server_warning(jp_fetch) is None or (await server_warning(jp_fetch))["warned_at"] > kept_at

        warning = await until(lambda: server_warning(jp_fetch), 30, "the culler's next warning")
        paused = await wait_state(jp_fetch, path, ("paused", "failed"), timeout=60)
        culler_takes_idle(jp_serverapp, SETTING_UP)
        assert paused["state"] == "paused", paused
        assert paused["moments"]["pause_requested"] >= warning["release_at"] - TICK_SLACK, (paused, warning)
        assert await server_warning(jp_fetch) is None
        await manager.wait()


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _kernels(timeout: int, **flags: bool) -> SimpleNamespace:
    return SimpleNamespace(
        **{"cull_idle_timeout": timeout, "cull_interval": 60, "cull_busy": False, "cull_connected": False, **flags}
    )


@pytest.mark.parametrize(
    ("kernels", "settings", "level", "said"),
    [
        (_kernels(0), {}, logging.INFO, "culler is off"),
        (_kernels(0), {}, logging.INFO, "an idle kernel keeps running"),
        (_kernels(600), {}, logging.INFO, "idle for more than 600 s (never a busy or connected one"),
        (_kernels(600), {}, logging.INFO, "paused instead of shut down, after 300 s of warning"),
        (_kernels(600, cull_busy=True), {}, logging.INFO, "(never a connected one; checked every 60 s)"),
        (_kernels(600), {"idle_pause_after": 300}, logging.INFO, "paused after 300 s by idle_pause_after"),
        (_kernels(600), {"pause_culled_kernels": False}, logging.WARNING, "after 600 s and its state is lost"),
        (_kernels(0), {"idle_pause_after": 60}, logging.INFO, "paused after 60 s by idle_pause_after"),
    ],
)
def test_the_start_up_log_says_what_happens_to_an_idle_kernel(kernels, settings, level, said):
    got_level, text = plan(PauseServer(**settings), kernels)
    assert got_level == level and said in text, text
