"""Pause reaching into a running cell, with a real Jupyter server and real kernels: the REST pause
stops a ``steps`` loop at its next safe point and the re-run cell continues exactly; a busy cell
without safe points is waited for and the status says why; a preemption notice takes the same path."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_pause.notebook import session_from_path
from jupyter_pause.protocol import channel
from jupyter_pause.server import cellwait, kernelrun, watchers
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.server_helpers import (
    call,
    open_kernel,
    poll_state,
    run,
    status,
    wait_state,
    write_notebook,
)
from tests.support.training import LOADERS, LOSSES, SETUP, STEPS, TRAIN, setup_with

pytestmark = pytest.mark.integration


@pytest.fixture
def pause_server():
    return {"busy_timeout": 120.0}


async def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


async def detail_is(fetch: Any, path: str, detail: str) -> dict[str, Any]:
    """The status of ``path`` as a poll answer whose state says whether its detail is ``detail``."""
    current = await status(fetch, path)
    return {"state": "yes" if current["detail"] == detail else "no", "detail": current["state"]}


def marker(serverapp: Any, kernel_id: str) -> Path:
    """Where the kernel declares its loop: there once its loop reached a safe point."""
    return channel.marker_path(serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid)


async def seen_busy(serverapp: Any, kernel_id: str) -> None:
    """Wait until the server knows the kernel busy: it learns that from the kernel's "busy" on
    IOPub, which on a loaded machine can come after the cell has started, and a pause asked of a
    kernel the server still sees idle checkpoints the usual way, behind the cell."""
    managed = serverapp.kernel_manager.get_kernel(kernel_id)
    await wait_for(lambda: managed.execution_state == "busy", 60, "the server seeing the kernel busy")


async def heard_idle(serverapp: Any, kernel_id: str) -> None:
    """The server's view of a kernel as it is between a cell's start and the kernel's "busy" read
    from IOPub: idle. Set once the "busy" was read, so that nothing overwrites it before the cell
    ends; a pause must not take the kernel's word for it from this view."""
    await seen_busy(serverapp, kernel_id)
    serverapp.kernel_manager.get_kernel(kernel_id).execution_state = "idle"


async def training_started(
    fetch: Any, serverapp: Any, path: str, pace: float, setup: str = SETUP
) -> tuple[str, asyncio.Task]:
    """A kernel for ``path`` with the training cell running (its loop past a safe point)."""
    kernel = await open_kernel(fetch, path)
    await run(serverapp, kernel, f"{setup}\npace = {pace}")
    cell = asyncio.ensure_future(run(serverapp, kernel, TRAIN))
    await wait_for(marker(serverapp, kernel).exists, 60, "the loop's first safe point")
    await seen_busy(serverapp, kernel)
    return kernel, cell


async def uninterrupted(fetch: Any, serverapp: Any, root: Path, setup: str = SETUP) -> tuple[str, list[str]]:
    """The losses of the training run, never paused, in a kernel of its own (and that kernel)."""
    kernel = await open_kernel(fetch, write_notebook(root, f"reference-{len(setup)}.ipynb", "x = 1"))
    await run(serverapp, kernel, setup)
    await run(serverapp, kernel, TRAIN)
    losses = json.loads(await run(serverapp, kernel, LOSSES))
    assert len(losses) == STEPS
    return kernel, losses


async def test_rest_pause_stops_the_loop_at_a_safe_point_and_the_rerun_continues_exactly(
    jp_fetch, jp_serverapp, jp_root_dir, store
):
    reference, want = await uninterrupted(jp_fetch, jp_serverapp, jp_root_dir)

    path = write_notebook(jp_root_dir, "train.ipynb", SETUP, TRAIN)
    kernel, cell = await training_started(jp_fetch, jp_serverapp, path, pace=0.2)
    assert (await call(jp_fetch, "pause", path=path))["state"] == "checkpointing"
    done = await wait_state(jp_fetch, path, ("paused", "failed"))
    assert done["state"] == "paused", done
    assert any(d.startswith("waiting for the next safe point (step ") for s, d in done["seen"]), done["seen"]
    with pytest.raises(kernelrun.KernelCodeError, match=r"CellPaused: paused at step \d+ of epoch \d+ .*run this"):
        await cell
    (taken,) = Catalog(Store(str(store))).checkpoints(session_from_path(path))
    assert taken.id == done["checkpoint"] and taken.trigger == "button" and not taken.mid_cell
    assert 0 < taken.loops[-1]["done"] < STEPS
    assert kernel not in [k["id"] for k in json.loads((await jp_fetch("api", "kernels")).body)]
    assert not marker(jp_serverapp, reference).exists()

    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    (resumed,) = [s["kernel"]["id"] for s in sessions if s["path"] == path]
    await run(jp_serverapp, resumed, TRAIN)
    assert json.loads(await run(jp_serverapp, resumed, LOSSES)) == want


async def test_a_busy_cell_without_steps_is_waited_for_and_the_status_says_why(
    jp_fetch, jp_serverapp, jp_root_dir, store
):
    path = write_notebook(jp_root_dir, "busy.ipynb", "x = 1")
    kernel = await open_kernel(jp_fetch, path)
    go = jp_root_dir / "go"
    started = jp_root_dir / "started"
    cell = asyncio.ensure_future(
        run(
            jp_serverapp,
            kernel,
            f"import os, time\nopen({str(started)!r}, 'w').close()\n"
            f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\nx = 2",
        )
    )
    await wait_for(started.exists, 60, "the cell's start")
    await heard_idle(jp_serverapp, kernel)
    await call(jp_fetch, "pause", path=path)
    waiting = await poll_state(lambda: detail_is(jp_fetch, path, cellwait.NO_SAFE_POINT), ("yes",), 30, path)
    assert waiting["seen"][-1] == ("yes", "checkpointing")
    go.touch()
    await cell
    done = await wait_state(jp_fetch, path, ("paused", "failed"))
    assert done["state"] == "paused", done
    (taken,) = Catalog(Store(str(store))).checkpoints(session_from_path(path))
    assert taken.trigger == "button" and not taken.mid_cell and taken.id == done["checkpoint"]


async def test_a_preemption_notice_pauses_a_running_loop_at_its_safe_point(jp_fetch, jp_serverapp, jp_root_dir, store):
    path = write_notebook(jp_root_dir, "spot.ipynb", SETUP, TRAIN)
    kernel, cell = await training_started(jp_fetch, jp_serverapp, path, pace=0.2)
    await heard_idle(jp_serverapp, kernel)  # the notice comes before the server read the cell's "busy"
    manager = jp_serverapp.web_app.settings["jupyter_pause"]
    assert await watchers.pause_all(manager, "spot") == [path]
    done = await wait_state(jp_fetch, path, ("paused", "failed"))
    assert done["state"] == "paused", done
    with pytest.raises(kernelrun.KernelCodeError, match="CellPaused"):
        await cell
    (taken,) = Catalog(Store(str(store))).checkpoints(session_from_path(path))
    assert taken.trigger == "spot" and 0 < taken.loops[-1]["done"] < STEPS
    await manager.wait()


# -- a loader with worker processes ----------------------------------------------------------------


@pytest.mark.parametrize("loader", list(LOADERS))
async def test_the_toolbar_pause_mid_epoch_continues_exactly_and_takes_one_checkpoint(
    jp_fetch, jp_serverapp, jp_root_dir, store, loader
):
    _, want = await uninterrupted(jp_fetch, jp_serverapp, jp_root_dir, setup_with(loader))
    path = write_notebook(jp_root_dir, f"train-{loader}.ipynb", setup_with(loader), TRAIN)
    _, cell = await training_started(jp_fetch, jp_serverapp, path, 0.2, setup_with(loader))
    await call(jp_fetch, "pause", path=path)
    done = await wait_state(jp_fetch, path, ("paused", "failed"))
    assert done["state"] == "paused", done
    with pytest.raises(kernelrun.KernelCodeError, match="CellPaused"):
        await cell
    # the kernel is gone: a slow shutdown would have got SIGTERM, and a second checkpoint with it
    (taken,) = Catalog(Store(str(store))).checkpoints(session_from_path(path))
    assert taken.trigger == "button" and 0 < taken.loops[-1]["done"] < STEPS
    assert any("run the cell again" in note for note in taken.loop_notes), taken.loop_notes
    assert not taken.skipped, taken.skipped

    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["verdict"] == "restored", ready
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    (resumed,) = [s["kernel"]["id"] for s in sessions if s["path"] == path]
    await run(jp_serverapp, resumed, TRAIN)
    assert json.loads(await run(jp_serverapp, resumed, LOSSES)) == want
