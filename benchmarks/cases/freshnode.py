"""Case 8's node: a Jupyter server on a node that never ran the notebook, and what a user does there.

The server is ``tests/support/server_process.py``'s (``python -m jupyter_server`` with the
extension, its own Jupyter folders), started with HOME, the cache folders and the temp folder
(``cli.othernode.FOLDER_VARIABLES``) pointing at empty folders of its own, which its kernels
inherit; ``forget`` empties them (and the IPython folder) before every run, so each kernel starts
as on a new node. ``drop_page_cache`` (where allowed) makes the reads cold too.

Its resources check is made to wait: the server's ``jupyter_server_config.py`` wraps
``jupyter_pause.server.resources.missing`` so that it names a lack while the node's gate file
exists, as it names a busy GPU, and notes when it first finds the gate open (a wait is timed from
then, not from the file's removal: the server's resource poll interval is left out). Whatever the
server does while a resume waits (fetch, or nothing) is what it does for a real lack.

Each run returns seconds measured here, from the moment the user acts (a click, a kernel start)
until their next cell has run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.asynchronous import AsyncKernelClient

from jupyter_pause.cli.othernode import FOLDER_VARIABLES
from jupyter_pause.server import kernelrun
from tests.support.server_process import ServerProcess, running_server

#: The notebook resumed by clicking Resume; its session is ``new-node``.
NOTEBOOK = "new-node.ipynb"
#: Seconds between status polls while a resume runs (each reads the store once).
POLL = 0.1
#: What the gated resources check says while the gate is closed.
GATE_LACK = "the benchmark's stand-in for a busy GPU"

GATE_CONFIG = '''\
"""The benchmark's new node: the resources check names a lack while the gate file exists, and
notes when it first found the gate open."""
import os
import time

from jupyter_pause.server import resources

_check = resources.missing


def _gated(manifest, configured, map_location):
    if os.path.exists({gate!r}):
        return {lack!r}
    if not os.path.exists({opened!r}):
        with open({opened!r}, "w") as f:
            f.write(repr(time.time()))
    return _check(manifest, configured, map_location)


resources.missing = _gated
'''


class FreshNode:
    """A server as a node that never ran the notebook, with a gate on its resources check."""

    def __init__(self, server: ServerProcess, folders: list[Path], gate: Path) -> None:
        self.server = server
        self.folders = folders
        self.gate = gate
        self.opened = gate.with_name("gate-opened")  # when the resources check found the gate open

    def forget(self) -> None:
        """Empty HOME, the caches, the temp and IPython folders: what a new node has."""
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)

    def close_gate(self) -> None:
        """From now on the resources check names a lack."""
        self.opened.unlink(missing_ok=True)
        self.gate.touch()

    def open_gate(self) -> None:
        """From now on the resources check finds what it needs."""
        self.gate.unlink(missing_ok=True)

    # -- what a user does ------------------------------------------------------------------------

    def kernel_cells(self, path: str, cells: list[str]) -> dict[str, Any]:
        """Start a kernel for ``path`` (as opening a notebook does) and run ``cells``: seconds until
        it answered, each cell's seconds and output, and the seconds from the start to the last."""
        return asyncio.run(self._kernel_cells(path, cells))

    async def _kernel_cells(self, path: str, cells: list[str]) -> dict[str, Any]:
        started = time.perf_counter()
        kernel = await self.server.open_kernel(path)
        client = await _lab_client(self.server, kernel)
        out: dict[str, Any] = {"ready": time.perf_counter() - started, "cells": [], "outputs": []}
        try:
            for cell in cells:
                t0 = time.perf_counter()
                out["outputs"].append(await _execute(client, cell))
                out["cells"].append(time.perf_counter() - t0)
        finally:
            client.stop_channels()
        out["total"] = time.perf_counter() - started
        await self._stop_kernels()
        return out

    def click_resume(self, wait: float = 0.0) -> dict[str, Any]:
        """Click Resume on ``NOTEBOOK`` and run a next cell as JupyterLab lets a user: the notebook
        connects to the resume's kernel once its session names one, and the cell, run at once,
        waits in the kernel until the restore is done (seconds to its end). With ``wait``, the
        resources check names a lack for ``wait`` seconds first; ``after_wait`` is then the seconds
        from the server's first check that found nothing lacking to the next cell's end.
        ``prefetched``: the most bytes the status said the server had fetched onto the node ahead
        of the kernel (0 where it fetches nothing ahead)."""
        return asyncio.run(self._click_resume(wait))

    async def _click_resume(self, wait: float) -> dict[str, Any]:
        if wait:
            self.close_gate()
        started = time.perf_counter()
        watch = _Watch(started)
        code, answer = await self.server.call("resume", path=NOTEBOOK)
        if code not in (200, 202):
            raise RuntimeError(f"resume of {NOTEBOOK} answered {code}: {answer}\n{self.server.log_tail()}")
        if wait:
            await watch.until(self.server, lambda: time.perf_counter() - started >= wait)
            if "waiting" not in watch.states:
                raise RuntimeError(f"the resume never waited for resources: {watch.seen}")
            self.open_gate()
        # As JupyterLab does: the notebook connects to the resume's kernel once its session names
        # one, and the next cell, run at once, waits in the kernel until the restore is done.
        kernels: list[str] = []

        async def kernel_is_there() -> bool:
            nonlocal kernels
            if watch.last.get("state") in ("ready", "failed"):
                return True
            kernels = await self.server.kernels_of(NOTEBOOK) if watch.last.get("state") == "restoring" else []
            return bool(kernels)

        await watch.until(self.server, kernel_is_there)
        kernels = kernels or await self.server.kernels_of(NOTEBOOK)
        client = await _lab_client(self.server, kernels[0])
        try:
            await _execute(client, "1 + 1")
        finally:
            client.stop_channels()
        done, now = time.perf_counter(), time.time()
        await watch.until(self.server, lambda: watch.last.get("state") in ("ready", "failed"))
        if watch.last.get("verdict") != "restored":
            raise RuntimeError(f"the resume did not restore: {watch.seen}\n{self.server.log_tail()}")
        await self._stop_kernels()
        opened = float(self.opened.read_text()) if wait else now - (done - started)
        return {
            "total": done - started,
            "after_wait": now - opened,
            "prefetched": watch.prefetched,
            "seen": watch.seen,
        }

    async def _stop_kernels(self) -> None:
        """Shut every kernel session down, and wait until no kernel is left."""
        code, sessions = await self.server.request("GET", "api/sessions")
        for session in sessions if code == 200 else []:
            await self.server.request("DELETE", f"api/sessions/{session['id']}")
        deadline = time.monotonic() + 60
        while await self.server.kernel_ids():
            if time.monotonic() > deadline:
                raise RuntimeError(f"kernels still running 60 s after their shutdown\n{self.server.log_tail()}")
            await asyncio.sleep(POLL)


class _Watch:
    """The states a resume goes through, as its status polls show them: each with its detail and
    the seconds from the click to the poll that first showed it."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.seen: list[tuple[str, str, float]] = []
        self.last: dict[str, Any] = {}
        self.prefetched = 0

    @property
    def states(self) -> set[str]:
        return {state for state, _, _ in self.seen}

    async def until(
        self, server: ServerProcess, done: Callable[[], bool | Awaitable[bool]], timeout: float = 1800
    ) -> None:
        """Poll the status of ``NOTEBOOK`` until ``done()``."""
        deadline = time.monotonic() + timeout
        while not await _now(done()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the resume went through {self.seen} and stopped\n{server.log_tail()}")
            self.last = await server.status(NOTEBOOK)
            said = (self.last["state"], self.last["detail"])
            if not self.seen or self.seen[-1][:2] != said:
                self.seen.append((*said, time.perf_counter() - self.started))
            self.prefetched = max(self.prefetched, int((self.last.get("prefetched") or {}).get("bytes", 0)))
            if not await _now(done()):
                await asyncio.sleep(POLL)


async def _now(answer: bool | Awaitable[bool]) -> bool:
    return await answer if inspect.isawaitable(answer) else bool(answer)


async def _lab_client(server: ServerProcess, kernel_id: str, timeout: float = 1800) -> AsyncKernelClient:
    """A client of one of the server's kernels, ready as JupyterLab's connection to a kernel is:
    once the kernel answered its first request (``kernelrun.answered``; a kernel busy restoring
    answers after that), without jupyter-client's fifth of a second of waiting for the output
    channel to go quiet, which every contender would otherwise pay once more."""
    client = AsyncKernelClient()
    client.load_connection_file(str(server.runtime / f"kernel-{kernel_id}.json"))
    client.start_channels()
    try:
        await kernelrun.answered(client, timeout)
    except BaseException:
        client.stop_channels()
        raise
    return client


async def _execute(client: Any, code: str) -> str:
    """Run ``code``; what it printed. Raises with the error where it fails."""
    printed: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])

    reply = await client.execute_interactive(code, timeout=1800, output_hook=hook, store_history=False)
    content = reply["content"]
    if content["status"] != "ok":
        raise RuntimeError(f"cell failed: {content.get('ename')}: {content.get('evalue')}\n{''.join(printed)}")
    return "".join(printed)


def write_notebook(root: Path) -> None:
    """``NOTEBOOK`` in the server root, on the python3 kernelspec, as JupyterLab saves it."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("model, opt")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    root.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(root / NOTEBOOK))


@contextmanager
def fresh_node(base: Path, store: str, options: dict[str, Any]) -> Iterator[FreshNode]:
    """A server on ``store`` (``options``: its storage options) as a new node, folders under ``base``."""
    node = base / "node"
    env = {variable: str(node / variable.lower()) for variable in FOLDER_VARIABLES if variable != "HOME"}
    env["JUPYTER_PAUSE_STORAGE_OPTIONS"] = json.dumps(options)
    env["JUPYTER_PAUSE_NODE"] = "new-node"  # the kernels' node is the server's
    gate = base / "gate"
    config = base / "config"
    config.mkdir(parents=True, exist_ok=True)
    gated = GATE_CONFIG.format(gate=str(gate), lack=GATE_LACK, opened=str(gate.with_name("gate-opened")))
    (config / "jupyter_server_config.py").write_text(gated)
    write_notebook(base / "root")
    folders = [base / "home", base / "ipython", *(Path(p) for k, p in env.items() if k in FOLDER_VARIABLES)]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    with running_server(base, store, "new-node", "--PauseServer.resource_wait_timeout=3600", env=env) as server:
        yield FreshNode(server, folders, gate)
