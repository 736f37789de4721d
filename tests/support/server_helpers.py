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

from jupyter_pause.server import kernelrun
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
    await kernelrun.answering(serverapp.kernel_manager, kernel_id, 60)
    return await kernelrun.execute(serverapp.kernel_manager, kernel_id, code, timeout)


async def user_cell(serverapp: Any, kernel_id: str, code: str) -> None:
    """Run ``code`` as a notebook's own client would (its own session id, not the server's: the
    ledger counts its cells, and leaves the server's own calls out), once the kernel answers."""
    await kernelrun.answering(serverapp.kernel_manager, kernel_id, 60)
    kernel = serverapp.kernel_manager.get_kernel(kernel_id)
    client = kernel.client(session=Session(key=kernel.session.key, signature_scheme=kernel.session.signature_scheme))
    client.start_channels()
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
