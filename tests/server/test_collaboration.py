"""jupyter_pause.server.collaboration with a real Jupyter server running jupyter-collaboration, real
kernels and Y websocket clients as JupyterLab's: Pause takes the notebook from the shared document
(an edit not yet saved included) and saves it, so the checkpoint, the file and every view agree; a
notebook pulled from a checkpoint shows in every open view; two notebooks keep their own edits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_pause.server import cellwait
from jupyter_pause.store.integrity import fetch
from tests.support.collaboration import (
    READ_ONLY,
    ReadOnlyFolder,
    collaboration_config,
    collaborator,
    reaches_server,
)
from tests.support.metadata import until
from tests.support.server_helpers import (
    call,
    open_kernel,
    run,
    server_config,
    status,
    wait_state,
    write_notebook,
)

pytestmark = pytest.mark.integration

#: A folder with spaces and letters outside ASCII, as users name them.
FOLDER = "Équipe partagée/notes de cours"


@pytest.fixture
def jp_server_config(store: Path, pause_server: dict[str, Any], jp_root_dir: Path, tmp_path: Path) -> dict[str, Any]:
    config = server_config(str(store), **pause_server)
    collaboration = collaboration_config(jp_root_dir, tmp_path)
    config["ServerApp"]["jpserver_extensions"].update(collaboration.pop("ServerApp")["jpserver_extensions"])
    return {**config, **collaboration}


@pytest.fixture
def join(jp_fetch: Any, jp_http_port: int, jp_base_url: str, jp_auth_header: dict[str, str]) -> Callable[[str], Any]:
    """Open a notebook in a new collaborator's view (``async with join(path) as view``)."""
    return lambda path: collaborator(jp_fetch, jp_http_port, jp_base_url, jp_auth_header, path)


def disk_sources(root: Path, path: str) -> list[str]:
    """The cells' sources of the notebook's file."""
    return [cell.source for cell in nbformat.read(str(root / path), as_version=4).cells]


def checkpoint_sources(manager: Any, path: str, checkpoint: str) -> list[str]:
    """The cells' sources of the notebook a checkpoint holds."""
    manifest = manager.catalog.resolve(manager.session_name(path), checkpoint, manager.config.keyring)
    blob = manifest.notebook["blob"]
    good, bad = fetch(manager.store, manifest, [blob])
    assert not bad, bad
    return [cell.source for cell in nbformat.reads(bytes(good[blob]).decode(), as_version=4).cells]


async def served_sources(fetch: Any, path: str) -> list[str]:
    """The cells' sources of the notebook as the server's contents API gives it."""
    model = json.loads((await fetch("api", "contents", path, params={"type": "notebook"})).body)
    return [cell["source"] for cell in model["content"]["cells"]]


async def kernel_with(fetch: Any, serverapp: Any, path: str, code: str) -> str:
    """A kernel for ``path`` that ran ``code``; its id."""
    kernel = await open_kernel(fetch, path)
    await run(serverapp, kernel, code)
    return kernel


async def value_after_resume(fetch: Any, serverapp: Any, path: str) -> str:
    """Resume ``path``; once restored, what ``x`` is in its new kernel."""
    await call(fetch, "resume", path=path)
    ready = await wait_state(fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    sessions = json.loads((await fetch("api", "sessions")).body)
    (kernel,) = [s["kernel"]["id"] for s in sessions if s["path"] == path]
    return (await run(serverapp, kernel, "print(x)")).strip()


async def paused(fetch: Any, path: str) -> dict[str, Any]:
    """Pause ``path``; its status once paused."""
    await call(fetch, "pause", path=path)
    done = await wait_state(fetch, path, ("paused", "failed"))
    assert done["state"] == "paused", done
    return done


async def test_pause_takes_the_edit_made_a_moment_before_it(jp_fetch, jp_serverapp, jp_root_dir, manager, join):
    path = write_notebook(jp_root_dir, f"{FOLDER}/shared.ipynb", "x = 1")
    await kernel_with(jp_fetch, jp_serverapp, path, "x = 1")
    edit = "x = 1  # typed a moment before Pause"
    async with join(path) as view:
        view.type(0, edit)
        await reaches_server(jp_serverapp, path, edit)
        assert disk_sources(jp_root_dir, path) == ["x = 1"]  # only the shared document has it yet

        status = await paused(jp_fetch, path)
        assert checkpoint_sources(manager, path, status["checkpoint"]) == [edit]
        assert disk_sources(jp_root_dir, path) == [edit]
        assert "shared document" not in status["detail"]

        assert await value_after_resume(jp_fetch, jp_serverapp, path) == "1"
        assert await served_sources(jp_fetch, path) == [edit]
        assert view.sources() == [edit]


async def test_a_pause_that_waits_for_a_running_cell_takes_the_edits_made_meanwhile(
    jp_fetch, jp_serverapp, jp_root_dir, manager, join
):
    path = write_notebook(jp_root_dir, "running.ipynb", "x = 1")
    kernel = await open_kernel(jp_fetch, path)
    started, go = jp_root_dir / "started", jp_root_dir / "go"
    wait_for_go = f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)"
    code = f"import os, time\nopen({str(started)!r}, 'w').close()\n{wait_for_go}\nx = 2"
    cell = asyncio.ensure_future(run(jp_serverapp, kernel, code))
    edit = "x = 2  # typed while the pause waited for the cell"
    async with join(path) as view:
        await until(lambda: _exists(started), 60, "the cell started")
        await call(jp_fetch, "pause", path=path)
        await until(lambda: _detail_is(jp_fetch, path, cellwait.NO_SAFE_POINT), 30, "the pause waiting for the cell")
        view.type(0, edit)
        await reaches_server(jp_serverapp, path, edit)
        go.touch()
        await cell
        done = await wait_state(jp_fetch, path, ("paused", "failed"))
        assert done["state"] == "paused", done
        assert checkpoint_sources(manager, path, done["checkpoint"]) == [edit]
        assert disk_sources(jp_root_dir, path) == [edit]
        assert await value_after_resume(jp_fetch, jp_serverapp, path) == "2"


async def _exists(path: Path) -> bool:
    return path.exists()


async def _detail_is(fetch: Any, path: str, detail: str) -> bool:
    return (await status(fetch, path))["detail"] == detail


async def test_two_notebooks_in_one_server_keep_their_own_edits(jp_fetch, jp_serverapp, jp_root_dir, manager, join):
    first = write_notebook(jp_root_dir, f"{FOLDER}/un.ipynb", "x = 1")
    second = write_notebook(jp_root_dir, "deux.ipynb", "x = 2")
    await kernel_with(jp_fetch, jp_serverapp, first, "x = 1")
    await kernel_with(jp_fetch, jp_serverapp, second, "x = 2")
    edits = {first: "x = 1  # edited in un", second: "x = 2  # edited in deux"}
    async with join(first) as one, join(second) as two:
        one.type(0, edits[first])
        two.type(0, edits[second])
        for path, edit in edits.items():
            await reaches_server(jp_serverapp, path, edit)

        for path in edits:
            await call(jp_fetch, "pause", path=path)
        for path, edit in edits.items():
            status = await wait_state(jp_fetch, path, ("paused", "failed"))
            assert status["state"] == "paused", status
            assert checkpoint_sources(manager, path, status["checkpoint"]) == [edit]
            assert disk_sources(jp_root_dir, path) == [edit]

        assert await value_after_resume(jp_fetch, jp_serverapp, first) == "1"
        assert await value_after_resume(jp_fetch, jp_serverapp, second) == "2"
        assert (one.sources(), two.sources()) == ([edits[first]], [edits[second]])


async def test_a_notebook_pulled_from_its_checkpoint_shows_in_every_open_view(
    jp_fetch, jp_serverapp, jp_root_dir, manager, join
):
    path = write_notebook(jp_root_dir, "pulled.ipynb", "x = 1")
    await kernel_with(jp_fetch, jp_serverapp, path, "x = 1")
    at_pause, later = "x = 1  # as paused", "x = 1  # changed and saved while paused"
    async with join(path) as alice, join(path) as bob:
        alice.type(0, at_pause)
        await bob.shows(lambda cells: cells == [at_pause], "alice's edit")
        await paused(jp_fetch, path)
        bob.type(0, later)
        await reaches_server(jp_serverapp, path, later)
        await bob.save()
        assert disk_sources(jp_root_dir, path) == [later]

        pulled = await call(jp_fetch, "pull", session=manager.session_name(path), overwrite=True)
        assert pulled["written"] and pulled["path"] == path, pulled
        for view in (alice, bob):
            await view.shows(lambda cells: cells == [at_pause], "the checkpoint's notebook")
        assert disk_sources(jp_root_dir, path) == [at_pause]

        assert await value_after_resume(jp_fetch, jp_serverapp, path) == "1"
        assert await served_sources(jp_fetch, path) == [at_pause]


class TestReadOnlyNotebook:
    """A notebook the server may not write: the pause goes on with the file as last saved, and says so."""

    @pytest.fixture
    def jp_server_config(self, jp_server_config: dict[str, Any]) -> dict[str, Any]:
        server = {**jp_server_config["ServerApp"], "contents_manager_class": ReadOnlyFolder}
        return {**jp_server_config, "ServerApp": server}

    async def test_a_pause_that_cannot_save_the_document_goes_on_and_says_why(
        self, jp_fetch, jp_serverapp, jp_root_dir, manager, join
    ):
        path = write_notebook(jp_root_dir, f"{READ_ONLY}/kept.ipynb", "x = 5")
        await kernel_with(jp_fetch, jp_serverapp, path, "x = 5")
        edit = "x = 5  # typed, but the file cannot take it"
        async with join(path) as view:
            view.type(0, edit)
            await reaches_server(jp_serverapp, path, edit)
            status = await paused(jp_fetch, path)
            assert "shared document could not be saved (the file is read-only)" in status["detail"], status
            assert checkpoint_sources(manager, path, status["checkpoint"]) == disk_sources(jp_root_dir, path)
            assert disk_sources(jp_root_dir, path) == ["x = 5"] and view.sources() == [edit]
            assert await value_after_resume(jp_fetch, jp_serverapp, path) == "5"


class TestWithoutCollaboration:
    """jupyter-collaboration installed but not enabled: no shared document, the file is the notebook."""

    @pytest.fixture
    def jp_server_config(self, store: Path, pause_server: dict[str, Any]) -> dict[str, Any]:
        config = server_config(str(store), **pause_server)
        config["ServerApp"]["jpserver_extensions"]["jupyter_server_ydoc"] = False
        return config

    async def test_pause_takes_the_notebook_as_saved(self, jp_fetch, jp_serverapp, jp_root_dir, manager):
        path = write_notebook(jp_root_dir, f"{FOLDER}/alone.ipynb", "x = 3")
        await kernel_with(jp_fetch, jp_serverapp, path, "x = 3")
        assert manager.shared.extension() is None
        status = await paused(jp_fetch, path)
        assert checkpoint_sources(manager, path, status["checkpoint"]) == ["x = 3"]
        assert await value_after_resume(jp_fetch, jp_serverapp, path) == "3"
