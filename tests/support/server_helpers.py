"""Helpers for server tests: notebooks in the root, kernels through the REST API, polling states."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.session import Session

from jupyter_pause.notebook import session_from_path
from jupyter_pause.server import kernelrun
from jupyter_pause.store.layout import manifest_key
from jupyter_pause.store.manifest import Manifest
from jupyter_pause.store.storage import Store
from tests.support.kernels import KERNEL_PORT_CONFIG


def write_notebook(root: Path, path: str, *sources: str, kernelspec: dict[str, str] | None = None) -> str:
    """Create a notebook file under the server root (its ``metadata.kernelspec`` when given, as
    JupyterLab writes it); returns its API path."""
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    if kernelspec is not None:
        nb.metadata["kernelspec"] = kernelspec
    nbformat.write(nb, str(target))
    return path


async def open_kernel(fetch: Any, path: str, kernel: str = "python3") -> str:
    """Start a kernel session (of kernelspec ``kernel``) for ``path`` as JupyterLab would; returns the kernel id."""
    response = await fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps({"path": path, "name": Path(path).name, "type": "notebook", "kernel": {"name": kernel}}),
    )
    return json.loads(response.body)["kernel"]["id"]


async def run(serverapp: Any, kernel_id: str, code: str, timeout: float = 120) -> str:
    """Run code in a server-managed kernel as the extension's resume does: once the kernel
    answers (one that died at its start is started again on new ports); its output."""
    client = await kernelrun.connect(serverapp.kernel_manager, kernel_id, 60)
    return await kernelrun.execute(serverapp.kernel_manager, kernel_id, code, timeout, client=client)


async def user_cell(serverapp: Any, kernel_id: str, code: str) -> None:
    """Run ``code`` as a notebook's own client would (its own session id, not the server's: the
    ledger counts its cells, and leaves the server's own calls out), once the kernel answers."""
    await kernelrun.answering(serverapp.kernel_manager, kernel_id, 60)
    kernel = serverapp.kernel_manager.get_kernel(kernel_id)
    client = kernel.client(session=Session(key=kernel.session.key, signature_scheme=kernel.session.signature_scheme))
    client.start_channels(hb=False)  # its manager says whether it lives
    try:
        await client.wait_for_ready(timeout=60)
        reply = await client.execute_interactive(code, timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()


async def call(fetch: Any, verb: str, **body: Any) -> dict[str, Any]:
    response = await fetch("jupyter-pause", "api", verb, method="POST", body=json.dumps(body))
    return json.loads(response.body)


async def status(fetch: Any, path: str) -> dict[str, Any]:
    response = await fetch("jupyter-pause", "api", "status", params={"path": path})
    return json.loads(response.body)


async def poll_state(
    read: Callable[[], Awaitable[dict[str, Any]]], states: tuple[str, ...], timeout: float, what: str
) -> dict[str, Any]:
    """Poll ``read`` (a status answer) until the state is one of ``states``; the answer, with the
    (state, detail) pairs it went through as ``seen``."""
    seen: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = await read()
        if not seen or seen[-1] != (current["state"], current["detail"]):
            seen.append((current["state"], current["detail"]))
        if current["state"] in states:
            current["seen"] = seen
            return current
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} never reached {states}; went through {seen}")


async def wait_state(fetch: Any, path: str, states: tuple[str, ...], timeout: float = 120) -> dict[str, Any]:
    """Poll the status endpoint until the state is one of ``states``."""
    return await poll_state(lambda: status(fetch, path), states, timeout, path)


def server_config(store: str, *, node: str = "node-a", **pause_server: Any) -> dict[str, Any]:
    """A test server's config: the extension on, this store and node, quick lease and resource polls
    (``pause_server``: more ``c.PauseServer`` settings, or others in their place)."""
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_pause": True}},
        "PauseConfig": {"store": store, "node": node},
        "PauseServer": {"lease_settle": 0.2, "resource_poll_interval": 0.2, **pause_server},
        **KERNEL_PORT_CONFIG,
    }


async def kernel_ids(fetch: Any) -> list[str]:
    return [k["id"] for k in json.loads((await fetch("api", "kernels")).body)]


async def kernel_of(fetch: Any, path: str) -> str | None:
    """The kernel the server runs for ``path``, if any."""
    for model in json.loads((await fetch("api", "sessions")).body):
        if model["path"] == path and model.get("kernel"):
            return model["kernel"]["id"]
    return None


async def pause(fetch: Any, path: str, timeout: float = 60) -> dict[str, Any]:
    """Pause ``path`` through the REST API and wait for it to end (paused or failed)."""
    started = await call(fetch, "pause", path=path)
    assert started["state"] == "checkpointing", started
    return await wait_state(fetch, path, ("paused", "failed"), timeout=timeout)


async def resume(fetch: Any, path: str, timeout: float = 60, **body: Any) -> dict[str, Any]:
    """Resume ``path`` through the REST API and wait for it to end (ready or failed)."""
    await call(fetch, "resume", path=path, **body)
    return await wait_state(fetch, path, ("ready", "failed"), timeout=timeout)


def pretend_on_gpu(store: Path, session: str, checkpoint: str) -> None:
    """Rewrite a checkpoint's manifest as if its tensors had lived on ``cuda:0`` (no GPU here)."""
    backend = Store(str(store))
    key = manifest_key(session, checkpoint)
    manifest = Manifest.from_bytes(backend.read(key))
    assert manifest.arrays, "the checkpoint should hold at least one tensor"
    for record in manifest.arrays.values():
        record.device = "cuda:0"
    backend.write(key, manifest.to_bytes())


GPU_STATE = "import torch\nweights = torch.arange(6.0)\nnote = 'kept'"


async def paused_on_fake_gpu(fetch: Any, serverapp: Any, root: Path, store: Path, name: str) -> tuple[str, str]:
    """A notebook paused with one tensor, its manifest then claiming ``cuda:0``; (path, checkpoint)."""
    path = write_notebook(root, name, "x = 1")
    kernel = await open_kernel(fetch, path)
    await run(serverapp, kernel, GPU_STATE)
    done = await pause(fetch, path)
    assert done["state"] == "paused", done
    pretend_on_gpu(store, session_from_path(path), done["checkpoint"])
    return path, done["checkpoint"]
