"""The server extension when things go wrong, with a real Jupyter server and real kernels.

Waiting for a GPU that is not there, a store that cannot be written, a kernel killed in the
middle of its checkpoint, a cell that will not finish, and the pauses nobody clicked: the idle
policy (the cloud preemption watcher has tests/server/test_preemption_notices.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_pause.notebook import session_from_path
from jupyter_pause.server import cellwait, lease
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.manifest import Manifest
from jupyter_pause.store.storage import Store
from tests.support.server_helpers import (
    call,
    kernel_ids,
    kernel_of,
    open_kernel,
    pause,
    paused_on_fake_gpu,
    resume,
    run,
    status,
    wait_state,
    write_notebook,
)
from tests.support.server_helpers import (
    server_config as config_of_server,
)

pytestmark = pytest.mark.integration

NODE = "node-a"


# -- configuration: a test class may override ``pause_server`` and ``server_config`` ---------


@pytest.fixture
def server_config() -> dict[str, Any]:
    """Extra sections of the server's config (classes below override this)."""
    return {}


@pytest.fixture
def jp_server_config(store: Path, pause_server: dict[str, Any], server_config: dict[str, Any]) -> dict[str, Any]:
    return {**config_of_server(str(store), node=NODE, **pause_server), **server_config}


# -- helpers -----------------------------------------------------------------------------------


def newest(store: Path, session: str) -> Manifest | None:
    checkpoints = Catalog(Store(str(store))).checkpoints(session)
    return checkpoints[0] if checkpoints else None


def require(condition: Any, why: str) -> None:
    """A precondition of a test; unlike ``assert`` it is never mistaken for an expected failure."""
    if not condition:
        pytest.fail(f"precondition failed: {why}")


async def start_cell(managed: Any, client: Any, code: str) -> None:
    """Start a long cell without waiting for it; return once the server counts the kernel busy.

    The server learns a kernel's state from IOPub on its own socket, so right after an earlier
    cell its state may still be that cell's "busy": wait for this cell's own start, then settle.
    """
    msg_id = client.execute(code)
    deadline = time.monotonic() + 30
    while True:
        msg = await client.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
            break
        require(time.monotonic() < deadline, "the cell never started")
    await asyncio.sleep(0.3)
    require(managed.execution_state == "busy", f"the server sees the kernel {managed.execution_state}")


async def http_error(coro: Any) -> tuple[int, str]:
    """The status code and message of a refused request."""
    with pytest.raises(HTTPClientError) as info:
        await coro
    return info.value.code, json.loads(info.value.response.body)["message"]


# -- 1. waiting for resources ------------------------------------------------------------------

GPU_CHECK = "print(weights.device.type, weights.sum().item(), note)"


class TestWaitingForResources:
    @pytest.fixture
    def pause_server(self) -> dict[str, Any]:
        return {"cuda_devices": 0, "resource_wait_timeout": 1.5, "resource_poll_interval": 0.2}

    async def test_waits_then_fails_then_resumes_into_host_memory(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager
    ):
        path, checkpoint = await paused_on_fake_gpu(jp_fetch, jp_serverapp, jp_root_dir, store, "gpu/train.ipynb")
        session = session_from_path(path)

        started = time.monotonic()
        failed = await resume(jp_fetch, path, timeout=30)
        waited = time.monotonic() - started
        assert failed["state"] == "failed", failed
        waiting = [detail for state, detail in failed["seen"] if state == "waiting"]
        assert "needs 1 CUDA device (cuda:0), none visible" in waiting, failed["seen"]
        assert "gave up after" in failed["detail"] and 'map_location "cpu"' in failed["detail"], failed
        assert "needs 1 CUDA device (cuda:0), none visible" in failed["detail"]
        assert waited >= 1.5
        # No kernel was started for a checkpoint this node cannot hold.
        assert await kernel_of(jp_fetch, path) is None
        await manager.wait()
        assert lease.current(Store(str(store)), session) is None, "the lease was not released"

        ready = await resume(jp_fetch, path, map_location="cpu")
        assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
        assert ready["checkpoint"] == checkpoint
        kernel = await kernel_of(jp_fetch, path)
        assert kernel is not None
        assert (await run(jp_serverapp, kernel, GPU_CHECK)).split() == ["cpu", "15.0", "kept"]
        await manager.wait()
        assert lease.current(Store(str(store)), session) is None


class TestCpuFallback:
    @pytest.fixture
    def pause_server(self) -> dict[str, Any]:
        return {"cuda_devices": 0, "allow_cpu_fallback": True, "resource_wait_timeout": 30}

    async def test_plain_resume_goes_to_host_memory(self, jp_fetch, jp_serverapp, jp_root_dir, store, manager):
        path, checkpoint = await paused_on_fake_gpu(jp_fetch, jp_serverapp, jp_root_dir, store, "fallback.ipynb")
        ready = await resume(jp_fetch, path)
        assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
        assert ready["checkpoint"] == checkpoint
        assert not any("CUDA" in detail for _, detail in ready["seen"]), ready["seen"]
        kernel = await kernel_of(jp_fetch, path)
        assert (await run(jp_serverapp, kernel, GPU_CHECK)).split() == ["cpu", "15.0", "kept"]
        await manager.wait()


# -- 2. the store cannot be written while pausing ----------------------------------------------


@pytest.mark.parametrize("broken", ["store", "store/sessions"], ids=["store-root", "sessions-folder"])
async def test_pause_into_an_unwritable_store_fails_and_keeps_the_kernel(
    jp_fetch, jp_serverapp, jp_root_dir, store, manager, tmp_path, broken
):
    path = write_notebook(jp_root_dir, "unwritable.ipynb", "x = 1")
    session = session_from_path(path)
    kernel = await open_kernel(jp_fetch, path)
    await run(jp_serverapp, kernel, "import torch\nstate = torch.ones(1000)\nanswer = 42")
    # A regular file where the folder should be: no write under it can succeed, even as root.
    blocker = tmp_path / broken
    if blocker.is_dir():
        shutil.rmtree(blocker)  # the ledger's record of the kernel's start is in it
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder")

    failed = await pause(jp_fetch, path)
    assert failed["state"] == "failed", failed
    detail = failed["detail"]
    assert detail.startswith("pause failed: ") and "StoreError" in detail, detail
    assert "check that the store is reachable and writable" in detail, detail
    assert "the kernel keeps running" in detail, detail
    assert kernel in await kernel_ids(jp_fetch)
    assert await kernel_of(jp_fetch, path) == kernel
    assert (await run(jp_serverapp, kernel, "print(answer, state.sum().item())")).split() == ["42", "1000.0"]

    blocker.unlink()
    done = await pause(jp_fetch, path)
    assert done["state"] == "paused", done
    assert kernel not in await kernel_ids(jp_fetch)
    manifest = newest(store, session)
    assert manifest is not None and manifest.id == done["checkpoint"]
    assert {"answer", "state"} <= {v.name for v in manifest.variables}


# -- 3. the kernel dies in the middle of its checkpoint ---------------------------------------

BIG_STATE = "import torch\nbig = [torch.randn(25_000_000) for _ in range(4)]  # 400 MB\nsmall = 'second'"


async def paused_once_then_resumed(fetch: Any, serverapp: Any, root: Path, name: str) -> tuple[str, str, str]:
    """A notebook paused once (checkpoint C1: ``small = 'first'``) and resumed; (path, C1, kernel)."""
    path = write_notebook(root, name, "x = 1")
    kernel = await open_kernel(fetch, path)
    await run(serverapp, kernel, "small = 'first'")
    first = await pause(fetch, path)
    require(first["state"] == "paused", f"first pause: {first}")
    ready = await resume(fetch, path)
    require(ready["state"] == "ready" and ready["verdict"] == "restored", f"first resume: {ready}")
    return path, first["checkpoint"], await kernel_of(fetch, path)


async def pause_until_writing(fetch: Any, manager: Any, store: Path, path: str) -> None:
    """Start pausing ``path``; return once the checkpoint in the kernel writes its data."""
    session = session_from_path(path)
    pending = store / "sessions" / session / "pending"
    await call(fetch, "pause", path=path)
    deadline = time.monotonic() + 60
    while not (pending.is_dir() and any(pending.iterdir())):
        current = manager.board.local[session]
        require(current.state == "checkpointing", f"the pause ended early: {current}")
        require(time.monotonic() < deadline, "the checkpoint never started writing")
        await asyncio.sleep(0.01)
    require(manager.board.local[session].detail == "checkpointing the kernel", "not checkpointing")


class TestKernelDiesWhileCheckpointing:
    @pytest.fixture
    def server_config(self) -> dict[str, Any]:
        # Jupyter's restarter polls every 3 s by default and may restart the kernel before the
        # pause notices it died (see the xfail below); here it stays out of the way.
        return {"KernelRestarter": {"time_to_dead": 120}}

    async def test_failed_pause_keeps_the_previous_checkpoint(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager
    ):
        path, c1, kernel = await paused_once_then_resumed(jp_fetch, jp_serverapp, jp_root_dir, "dies.ipynb")
        session = session_from_path(path)
        await run(jp_serverapp, kernel, BIG_STATE)
        pid = jp_serverapp.kernel_manager.get_kernel(kernel).provisioner.process.pid
        await pause_until_writing(jp_fetch, manager, store, path)
        os.kill(pid, signal.SIGKILL)

        failed = await wait_state(jp_fetch, path, ("paused", "failed"), timeout=60)
        assert failed["state"] == "failed", failed
        assert "kernel died" in failed["detail"], failed
        assert f"checkpoint {c1} stays the newest" in failed["detail"], failed
        assert newest(store, session).id == c1

        # The dead kernel's session is closed as a user would; then the session resumes from C1.
        for model in json.loads((await jp_fetch("api", "sessions")).body):
            if model["path"] == path:
                await jp_fetch("api", "sessions", model["id"], method="DELETE")
        back = await resume(jp_fetch, path)
        assert back["state"] == "ready" and back["verdict"] == "restored", back
        assert back["checkpoint"] == c1
        kernel = await kernel_of(jp_fetch, path)
        assert (await run(jp_serverapp, kernel, "print(small, 'big' in globals())")).split() == ["first", "False"]
        await manager.wait()

    async def test_failure_detail_does_not_say_a_dead_kernel_keeps_running(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager
    ):
        path = write_notebook(jp_root_dir, "dead.ipynb", "x = 1")
        kernel = await open_kernel(jp_fetch, path)
        await run(jp_serverapp, kernel, BIG_STATE)
        pid = jp_serverapp.kernel_manager.get_kernel(kernel).provisioner.process.pid
        await pause_until_writing(jp_fetch, manager, store, path)
        os.kill(pid, signal.SIGKILL)
        failed = await wait_state(jp_fetch, path, ("paused", "failed"), timeout=60)
        await manager.wait()
        require(failed["state"] == "failed" and "kernel died" in failed["detail"], f"{failed}")
        assert "keeps running" not in failed["detail"], failed


class TestKernelRestartedWhileCheckpointing:
    @pytest.fixture
    def server_config(self) -> dict[str, Any]:
        return {"KernelRestarter": {"time_to_dead": 120}}  # the test runs the restarter's poll itself

    @pytest.fixture
    def pause_server(self) -> dict[str, Any]:
        return {"checkpoint_timeout": 6}

    async def test_auto_restarted_kernel_is_reported_dead_at_once(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager
    ):
        path = write_notebook(jp_root_dir, "restarted.ipynb", "x = 1")
        kernel = await open_kernel(jp_fetch, path)
        await run(jp_serverapp, kernel, BIG_STATE)
        managed = jp_serverapp.kernel_manager.get_kernel(kernel)
        checks: list[bool] = []
        real_is_alive = managed.is_alive

        async def watched_is_alive() -> bool:
            alive = await real_is_alive()
            checks.append(alive)
            return alive

        managed.is_alive = watched_is_alive  # only watches the pause's own liveness checks
        pid = managed.provisioner.process.pid
        try:
            await pause_until_writing(jp_fetch, manager, store, path)
            os.kill(pid, signal.SIGSTOP)  # frozen mid-write: the checkpoint cannot end before the kill
            seen = len(checks)
            deadline = time.monotonic() + 30
            while len(checks) == seen:  # right after one of the pause's checks ...
                require(time.monotonic() < deadline, "the pause stopped checking whether its kernel is alive")
                await asyncio.sleep(0.005)
            os.kill(pid, signal.SIGKILL)
            while managed.provisioner.process.poll() is None:
                require(time.monotonic() < deadline, f"kernel {pid} outlived SIGKILL")
                await asyncio.sleep(0.001)
            # ... the kernel dies and Jupyter's restarter notices first, as it does when its
            # 3 s poll happens to come before the pause's next check.
            await managed._restarter.poll()
            require(managed.provisioner.process.pid != pid, "the restarter did not restart the kernel")
            failed = await wait_state(jp_fetch, path, ("paused", "failed"), timeout=3)
            assert failed["state"] == "failed" and "kernel died" in failed["detail"], failed
        finally:
            await manager.wait()
        assert newest(store, session_from_path(path)) is None


class TestKernelDiesWhileThePauseWaitsForItsCell:
    @pytest.fixture
    def server_config(self) -> dict[str, Any]:
        # Jupyter restarts a dead kernel on the same ports once it has run stably; a quick poll and
        # a short "stable" time stand for the 3 s poll and a kernel that has run for a while.
        return {"KernelRestarter": {"time_to_dead": 0.2, "stable_start_time": 1}}

    @pytest.fixture
    def pause_server(self) -> dict[str, Any]:
        return {"busy_timeout": 5}

    async def test_restarted_empty_kernel_is_not_paused_as_the_newest_checkpoint(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager
    ):
        path, c1, kernel = await paused_once_then_resumed(jp_fetch, jp_serverapp, jp_root_dir, "oom.ipynb")
        session = session_from_path(path)
        managed = jp_serverapp.kernel_manager.get_kernel(kernel)
        await run(jp_serverapp, kernel, "small = 'second'")
        while managed._restarter._initial_startup:  # the kernel counts as stably started
            await asyncio.sleep(0.05)
        client = managed.client()
        client.start_channels()
        try:
            await start_cell(managed, client, "import time\ntime.sleep(30)")
            await call(jp_fetch, "pause", path=path)
            await asyncio.sleep(0.5)
            current = manager.board.local[session]
            require(current.detail == cellwait.NO_SAFE_POINT, f"{current}")
            killed_at = time.time()
            os.kill(managed.provisioner.process.pid, signal.SIGKILL)  # the cell dies (the OOM killer)
            done = await wait_state(jp_fetch, path, ("paused", "failed"), timeout=30)
        finally:
            client.stop_channels()
            await manager.wait()
        # Jupyter's restarter brings the killed kernel back; a server stopped while that restart
        # is under way fails in jupyter_client's cleanup, so wait until the restart has settled.
        restarter = managed._restarter
        deadline = time.monotonic() + 60
        while restarter._last_dead < killed_at or restarter._restarting or not managed.ready.done():
            require(time.monotonic() < deadline, "the killed kernel was not restarted within 60 s")
            await asyncio.sleep(0.1)
        latest = newest(store, session)
        assert latest.id == c1, f"new newest checkpoint {latest.id} holds {[v.name for v in latest.variables]}"
        assert done["state"] == "failed" and "died" in done["detail"], done


# -- 4. a cell that does not finish ------------------------------------------------------------


class TestBusyKernel:
    @pytest.fixture
    def pause_server(self) -> dict[str, Any]:
        return {"busy_timeout": 1}

    async def test_pause_of_a_busy_kernel_fails_and_leaves_it_running(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager
    ):
        path = write_notebook(jp_root_dir, "busy.ipynb", "x = 1")
        session = session_from_path(path)
        kernel = await open_kernel(jp_fetch, path)
        await run(jp_serverapp, kernel, "answer = 42")
        managed = jp_serverapp.kernel_manager.get_kernel(kernel)
        client = managed.client()
        client.start_channels()
        try:
            await start_cell(managed, client, "import time\ntime.sleep(30)")

            failed = await pause(jp_fetch, path, timeout=20)
            assert failed["state"] == "failed", failed
            assert ("checkpointing", cellwait.NO_SAFE_POINT) in failed["seen"]
            detail = failed["detail"]
            assert "busy for more than 1 s" in detail and "the kernel keeps running" in detail, detail
            assert kernel in await kernel_ids(jp_fetch)
            assert await kernel_of(jp_fetch, path) == kernel
            assert newest(store, session) is None
        finally:
            await jp_fetch("api", "kernels", kernel, "interrupt", method="POST", body="")
            client.stop_channels()
        assert (await run(jp_serverapp, kernel, "print(answer)", timeout=30)).strip() == "42"


# -- 5. the idle policy ------------------------------------------------------------------------


class TestIdlePolicy:
    @pytest.fixture
    def pause_server(self) -> dict[str, Any]:
        return {"idle_pause_after": 1, "idle_check_interval": 0.5}

    async def test_idle_kernel_is_paused_busy_one_only_once_idle(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager
    ):
        idle_path = write_notebook(jp_root_dir, "idle.ipynb", "x = 1")
        busy_path = write_notebook(jp_root_dir, "sleepy.ipynb", "x = 1")
        idle = await open_kernel(jp_fetch, idle_path)
        await run(jp_serverapp, idle, "kept = 'idle state'")
        busy = await open_kernel(jp_fetch, busy_path)
        client = jp_serverapp.kernel_manager.get_kernel(busy).client()
        client.start_channels()
        try:
            client.execute("import time\ntime.sleep(6)\nkept = 'woke up'")
            done = await wait_state(jp_fetch, idle_path, ("paused", "failed"), timeout=30)
            assert done["state"] == "paused", done
            # Still sleeping (6 s): the policy leaves a running cell alone.
            assert (await status(jp_fetch, busy_path))["state"] == "ready"
            assert await kernel_of(jp_fetch, busy_path) == busy
        finally:
            client.stop_channels()
        assert idle not in await kernel_ids(jp_fetch)
        manifest = newest(store, session_from_path(idle_path))
        assert manifest.id == done["checkpoint"] and manifest.trigger == "idle"

        later = await wait_state(jp_fetch, busy_path, ("paused", "failed"), timeout=30)
        assert later["state"] == "paused", later
        assert busy not in await kernel_ids(jp_fetch)
        assert newest(store, session_from_path(busy_path)).trigger == "idle"
        await manager.wait()


# -- 6. the status, sessions, resume and pull endpoints ----------------------------------------


async def test_sessions_status_resume_and_pull_answers(jp_fetch, jp_serverapp, jp_root_dir, store, manager):
    path = write_notebook(jp_root_dir, "listed/report.ipynb", "x = 1")
    session = session_from_path(path)
    kernel = await open_kernel(jp_fetch, path)
    await run(jp_serverapp, kernel, "import torch\nt = torch.zeros(256)")
    before = time.time()
    done = await pause(jp_fetch, path)
    assert done["state"] == "paused", done

    listing = json.loads((await jp_fetch("jupyter-pause", "api", "sessions")).body)
    assert listing["node"] == NODE
    (row,) = [r for r in listing["sessions"] if r["session"] == session]
    assert row["state"] == "paused" and row["node"] == NODE and row["path"] == path
    assert row["checkpoint"] == done["checkpoint"]
    assert before - 5 <= row["created"] <= time.time()
    assert row["bytes"] >= 256 * 4

    code, message = await http_error(jp_fetch("jupyter-pause", "api", "status", params={"path": ""}))
    assert code == 400 and "?path=" in message, message

    busy_path = write_notebook(jp_root_dir, "running.ipynb", "x = 1")
    running = await open_kernel(jp_fetch, busy_path)
    code, message = await http_error(call(jp_fetch, "resume", path=busy_path))
    assert code == 409 and f"already has a running kernel ({running})" in message, message

    never = write_notebook(jp_root_dir, "never.ipynb", "x = 1")
    code, message = await http_error(call(jp_fetch, "resume", path=never))
    assert code == 404 and "no checkpoint of session 'never'" in message, message
    assert (await status(jp_fetch, never))["state"] == "ready"

    code, message = await http_error(call(jp_fetch, "pull"))
    assert code == 400 and message == 'give the session to pull as "session"', message
    code, message = await http_error(call(jp_fetch, "pull", session="nobody-here"))
    assert code == 404 and "no checkpoint of session 'nobody-here'" in message, message
    await manager.wait()
