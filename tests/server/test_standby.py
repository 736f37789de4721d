"""A kernel made ready while a resume waits for resources (server/standby.py), with a real server
and real kernels: warmed beside the wait with torch imported and the checkpoint read ahead, named
by no session until the restore is under way, then the notebook's kernel; shut down where the
wait gives up. A cell run in the notebook's kernel as soon as its session names one runs after
the restore."""

from __future__ import annotations

import ast
import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.notebook import session_from_path
from jupyter_pause.protocol import ResumeRequest, decode_request
from jupyter_pause.server import kernelrun, resources, standby
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.server_helpers import (
    call,
    kernel_ids,
    kernel_of,
    paused_on_fake_gpu,
    resume,
    run,
    server_config,
    wait_state,
)

pytestmark = pytest.mark.integration

LACK = "needs 1 CUDA device (cuda:0), the test's gate is shut"


@pytest.fixture
def jp_server_config(store: Path) -> dict[str, Any]:
    return server_config(str(store), resource_wait_timeout=60)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The node's GPU, as the resources check sees it: lacking until the test opens the gate."""
    opened = threading.Event()
    monkeypatch.setattr(resources, "missing", lambda *args: None if opened.is_set() else LACK)
    return opened


def torch_loaded(serverapp: Any, kernel_id: str) -> bool:
    """Whether torch's library is loaded in the kernel's process (its memory map names it)."""
    _, pid = kernelrun.process_of(serverapp.kernel_manager, kernel_id)
    try:
        return pid is not None and "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # the process is gone
        return False


async def warmed(fetch: Any, serverapp: Any, timeout: float = 60) -> str:
    """The one kernel the server runs, once torch is loaded in it (polled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = await kernel_ids(fetch)
        if len(ids) == 1 and torch_loaded(serverapp, ids[0]):
            return ids[0]
        await asyncio.sleep(0.2)
    raise AssertionError(f"no kernel warmed with torch within {timeout} s: {await kernel_ids(fetch)}")


def test_the_warming_line_imports_torch_only_for_a_checkpoint_with_tensors():
    line = standby.import_source(["torch", "jupyter_pause.kernel.remote"])
    assert line == "__import__('torch') and __import__('jupyter_pause.kernel.remote') and None"
    scope: dict[str, Any] = {}
    assert eval(line, scope) is None and set(scope) == {"__builtins__"}  # binds no name


def test_a_kernel_warmed_for_a_remote_store_imports_the_library_it_talks_through(tmp_path):
    manifest = jp.checkpoint(session="s", namespace={"w": torch.ones(4)}, store=str(tmp_path / "store")).manifest
    local = standby.modules_for(manifest, Store(str(tmp_path / "store")))
    assert local == ["torch", *standby.RESUME_MODULES]
    remote = standby.modules_for(manifest, Store(f"memory://warm-{tmp_path.name}"))
    assert remote == [*local, "fsspec.implementations.memory"]
    # A checkpoint being copied onto the node is read there: no store client to import.
    assert standby.modules_for(manifest, Store(f"memory://warm-{tmp_path.name}"), copied=True) == local


async def test_a_waiting_resume_warms_its_kernel_and_the_notebook_takes_it_once_the_gpu_frees(
    jp_fetch, jp_serverapp, jp_root_dir, store, manager, gate
):
    path, checkpoint = await paused_on_fake_gpu(jp_fetch, jp_serverapp, jp_root_dir, store, "warm/train.ipynb")
    assert await kernel_ids(jp_fetch) == []
    await call(jp_fetch, "resume", path=path, map_location="cpu")  # no GPU here once the gate opens

    kernel = await warmed(jp_fetch, jp_serverapp)
    waiting = json.loads((await jp_fetch("jupyter-pause", "api", "status", params={"path": path})).body)
    assert waiting["state"] == "waiting" and LACK in waiting["detail"], waiting
    assert await kernel_of(jp_fetch, path) is None  # no session names it while the resume waits

    gate.set()
    ready = await wait_state(jp_fetch, path, ("ready", "failed"), timeout=60)
    assert ready["state"] == "ready" and ready["verdict"] == "restored" and ready["checkpoint"] == checkpoint, ready
    assert await kernel_of(jp_fetch, path) == kernel and await kernel_ids(jp_fetch) == [kernel]
    assert (await run(jp_serverapp, kernel, "print(weights.sum().item(), note)")).split() == ["15.0", "kept"]
    await manager.wait()


async def test_a_kernel_that_could_not_import_ahead_is_still_the_one_the_notebook_takes(
    jp_fetch, jp_serverapp, jp_root_dir, store, manager, gate, monkeypatch
):
    monkeypatch.setattr(standby, "modules_for", lambda manifest, store, copied: ["a_module_this_kernel_lacks"])
    path, checkpoint = await paused_on_fake_gpu(jp_fetch, jp_serverapp, jp_root_dir, store, "no-torch.ipynb")
    await call(jp_fetch, "resume", path=path, map_location="cpu")
    deadline = time.monotonic() + 60
    while len(started := await kernel_ids(jp_fetch)) != 1:
        assert time.monotonic() < deadline, "no kernel was started beside the wait"
        await asyncio.sleep(0.2)
    gate.set()
    ready = await wait_state(jp_fetch, path, ("ready", "failed"), timeout=60)
    assert ready["state"] == "ready" and ready["checkpoint"] == checkpoint, ready
    assert [await kernel_of(jp_fetch, path)] == started == await kernel_ids(jp_fetch)
    await manager.wait()


class TestGivingUp:
    @pytest.fixture
    def jp_server_config(self, store: Path) -> dict[str, Any]:
        return server_config(str(store), resource_wait_timeout=1.5)

    async def test_a_wait_that_gives_up_leaves_no_kernel_behind(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager, gate
    ):
        path, _ = await paused_on_fake_gpu(jp_fetch, jp_serverapp, jp_root_dir, store, "gives-up.ipynb")
        failed = await resume(jp_fetch, path, timeout=60, map_location="cpu")
        assert failed["state"] == "failed" and "gave up after" in failed["detail"], failed
        assert await kernel_ids(jp_fetch) == []
        await manager.wait()


async def test_a_resume_that_never_waits_starts_its_kernel_as_before(
    jp_fetch, jp_serverapp, jp_root_dir, store, manager, gate
):
    gate.set()
    path, checkpoint = await paused_on_fake_gpu(jp_fetch, jp_serverapp, jp_root_dir, store, "no-wait.ipynb")
    ready = await resume(jp_fetch, path, map_location="cpu")
    assert ready["state"] == "ready" and ready["checkpoint"] == checkpoint, ready
    assert not any(state == "waiting" and LACK in detail for state, detail in ready["seen"]), ready["seen"]
    assert await kernel_ids(jp_fetch) == [await kernel_of(jp_fetch, path)]
    await manager.wait()


async def test_a_resume_asks_its_kernel_to_begin_importing_torch_before_anything_else(
    jp_fetch, jp_serverapp, jp_root_dir, store, manager, gate, monkeypatch
):
    sent: list[str] = []
    execute = kernelrun.execute

    async def watched(kernels: Any, kernel_id: str, code: str, *args: Any, **kwargs: Any) -> str:
        sent.append(code)
        return await execute(kernels, kernel_id, code, *args, **kwargs)

    monkeypatch.setattr(kernelrun, "execute", watched)
    gate.set()
    path, checkpoint = await paused_on_fake_gpu(jp_fetch, jp_serverapp, jp_root_dir, store, "imports.ipynb")
    sent.clear()
    ready = await resume(jp_fetch, path, map_location="cpu")
    assert ready["state"] == "ready" and ready["checkpoint"] == checkpoint, ready
    (line,) = [code for code in sent if code.startswith("__import__('jupyter_pause.kernel.remote'")]
    request = decode_request(ast.literal_eval(ast.parse(line).body[0].value.args[0]))
    assert isinstance(request, ResumeRequest) and request.imports == ["torch"]
    await manager.wait()


async def test_the_restore_runs_through_the_client_that_warmed_the_kernel(
    jp_fetch, jp_serverapp, jp_root_dir, store, manager, gate, monkeypatch
):
    """A new client waits for its kernel's first answer (a fifth of a second and more): the one
    that warmed the kernel during the wait runs its restore."""
    connects: list[str] = []
    connect = kernelrun.connect

    async def counted(kernels: Any, kernel_id: str, *args: Any) -> Any:
        connects.append(kernel_id)
        return await connect(kernels, kernel_id, *args)

    monkeypatch.setattr(kernelrun, "connect", counted)
    path, checkpoint = await paused_on_fake_gpu(jp_fetch, jp_serverapp, jp_root_dir, store, "one-client.ipynb")
    connects.clear()
    await call(jp_fetch, "resume", path=path, map_location="cpu")
    kernel = await warmed(jp_fetch, jp_serverapp)
    gate.set()
    ready = await wait_state(jp_fetch, path, ("ready", "failed"), timeout=60)
    assert ready["state"] == "ready" and ready["verdict"] == "restored" and ready["checkpoint"] == checkpoint, ready
    assert connects == [kernel]  # the warming's; the restore connected no other client
    await manager.wait()


@pytest.mark.parametrize("waits", [False, True], ids=["cold", "after a wait"])
async def test_a_cell_run_as_soon_as_the_notebook_has_its_kernel_runs_after_the_restore(
    jp_fetch, jp_serverapp, jp_root_dir, store, manager, gate, waits
):
    """What JupyterLab does: connect to the notebook's kernel once its session names one, and run
    the cell the user ran meanwhile. The cell finds the restored state, never an empty kernel."""
    path, checkpoint = await paused_on_fake_gpu(jp_fetch, jp_serverapp, jp_root_dir, store, f"first-{waits}.ipynb")
    if not waits:
        gate.set()
    await call(jp_fetch, "resume", path=path, map_location="cpu")
    if waits:
        await warmed(jp_fetch, jp_serverapp)
        gate.set()
    deadline = time.monotonic() + 60
    while (kernel := await kernel_of(jp_fetch, path)) is None:
        assert time.monotonic() < deadline, "the notebook's session never named a kernel"
        await asyncio.sleep(0.01)
    client = await kernelrun.connect(jp_serverapp.kernel_manager, kernel, 60)
    printed = await kernelrun.execute(
        jp_serverapp.kernel_manager, kernel, "print(weights.sum().item(), note)", 60, client=client
    )
    assert printed.split() == ["15.0", "kept"]  # not a NameError: the restore ran first
    ready = await wait_state(jp_fetch, path, ("ready", "failed"), timeout=60)
    assert ready["state"] == "ready" and ready["verdict"] == "restored" and ready["checkpoint"] == checkpoint, ready
    await manager.wait()


async def test_the_warmed_kernel_reads_the_checkpoint_during_the_wait_and_its_restore_reads_no_blob_again(
    jp_fetch, jp_serverapp, jp_root_dir, store, manager, gate, monkeypatch
):
    """While the resume waits, the warmed kernel reads and verifies every blob the restore needs
    (a ``HoldRequest``); once the GPU frees, the restore takes them from the kernel's memory: the
    store's copies, removed in between, are not read."""
    holds: list[Any] = []
    hold = standby.Warming._hold

    async def watched(self: standby.Warming, *args: Any) -> None:
        await hold(self, *args)
        holds.append(self.held)

    monkeypatch.setattr(standby.Warming, "_hold", watched)
    path, checkpoint = await paused_on_fake_gpu(jp_fetch, jp_serverapp, jp_root_dir, store, "held/train.ipynb")
    manifest = Catalog(Store(str(store))).manifest(session_from_path(path), checkpoint)
    await call(jp_fetch, "resume", path=path, map_location="cpu")
    deadline = time.monotonic() + 60
    while not holds:
        assert time.monotonic() < deadline, "the warmed kernel never read the checkpoint ahead"
        await asyncio.sleep(0.05)
    (held,) = holds
    assert (held.checkpoint, held.blobs, held.bad) == (checkpoint, len(manifest.needed()), {}), held
    assert held.bytes == sum(manifest.blobs[k] for k in manifest.needed())
    waiting = json.loads((await jp_fetch("jupyter-pause", "api", "status", params={"path": path})).body)
    assert waiting["state"] == "waiting", waiting  # all of it read while the resume still waits
    for key in manifest.needed():
        (store / manifest.blob_key(key)).unlink()
    gate.set()
    ready = await wait_state(jp_fetch, path, ("ready", "failed"), timeout=60)
    assert ready["state"] == "ready" and ready["verdict"] == "restored" and ready["checkpoint"] == checkpoint, ready
    kernel = await kernel_of(jp_fetch, path)
    assert (await run(jp_serverapp, kernel, "print(weights.sum().item(), note)")).split() == ["15.0", "kept"]
    await manager.wait()
