"""The test servers' kernels, and a test's own, survive a port taken between the pick and the bind
(side by side, every local process draws from one ephemeral port range): the start fails, and the
restart that follows binds new ports (``KERNEL_PORT_ARGS`` and ``Kernel`` in tests/support/kernels.py),
which a client of a server's kernel follows (``ServerProcess.client``), and so do the extension's
resume and the tests' ``run`` and ``user_cell`` (``kernelrun.connect``). A kernel that keeps running
without the port is started again by the extension (``server.kernelports``)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import connect

from jupyter_pause import ledger
from jupyter_pause.server import kernelrun
from jupyter_pause.store.storage import Store
from tests.support import kernels, server_process
from tests.support.kernels import Kernel
from tests.support.server_helpers import (
    call,
    open_kernel,
    poll_state,
    run,
    server_config,
    user_cell,
    wait_state,
    write_notebook,
)
from tests.support.server_process import running_server

pytestmark = pytest.mark.integration


def _first_port_taken(taken: list[socket.socket], port: str = "shell_port") -> Any:
    """``write_connection_file`` as jupyter-client has it, except that another process (a socket
    appended to ``taken``) listens on the first kernel's ``port`` before that kernel binds it."""
    pick = connect.write_connection_file

    def pick_then_take(*args: Any, **kwargs: Any) -> Any:
        written = pick(*args, **kwargs)
        if not taken:
            holder = socket.socket()
            holder.bind((written[1]["ip"], written[1][port]))
            holder.listen()
            taken.append(holder)
        return written

    return pick_then_take


Take = Callable[..., list[socket.socket]]


@pytest.fixture
def take(monkeypatch: pytest.MonkeyPatch) -> Iterator[Take]:
    """``take(port)``: another process (a socket) listens on the next kernel's ``port`` (its shell
    port by default) before that kernel binds it; the sockets taken, closed after the test."""
    taken: list[socket.socket] = []

    def take(port: str = "shell_port") -> list[socket.socket]:
        monkeypatch.setattr(connect, "write_connection_file", _first_port_taken(taken, port))
        return taken

    yield take
    for holder in taken:
        holder.close()


async def _idle_to_the_server(kernel: Any) -> None:
    """Wait until the server's watch of ``kernel``'s output says it is idle ("starting" for good
    where the watch stayed on its old ports)."""

    async def watched() -> dict[str, Any]:
        return {"state": kernel.execution_state, "detail": ""}

    await poll_state(watched, ("idle",), 30, "the server's watch of the kernel")


@pytest.mark.parametrize("jp_server_config", [False, True], ids=["ports drawn", "ports cached"], indirect=True)
async def test_a_kernel_whose_port_another_process_took_before_it_bound_starts_on_new_ports(
    jp_serverapp: Any, take: Take
) -> None:
    """It exits, and Jupyter's restarter starts it again on new ports (new ones also where they are
    cached: ``kernelports.forget``); the server's watch of its output follows it there, which
    jupyter-server does only after a restart it was asked for (a pause then waited for a cell it
    thought running)."""
    taken = take()
    kernel_id = await jp_serverapp.kernel_manager.start_kernel(kernel_name="python3")
    assert await run(jp_serverapp, kernel_id, "print(6 * 7)") == "42\n"  # after the restart (fails without)
    await user_cell(jp_serverapp, kernel_id, "answer = 6 * 7")
    kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    assert kernel.shell_port != taken[0].getsockname()[1]
    await _idle_to_the_server(kernel)


@pytest.fixture
def jp_server_config(store: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A test server, its kernels' ports cached or not where a test says (``cache_ports``; off in
    every other test server, on by default in jupyter-client)."""
    config = server_config(str(store))
    config["KernelManager"] = {"cache_ports": getattr(request, "param", False)}
    return config


@pytest.mark.parametrize("jp_server_config", [False, True], ids=["ports drawn", "ports cached"], indirect=True)
async def test_a_kernel_that_lost_its_iopub_port_and_waits_instead_of_exiting_is_started_again(
    jp_fetch: Any, jp_serverapp: Any, jp_root_dir: Path, store: Path, take: Take
) -> None:
    """ipykernel 7 does not exit when its IOPub port is taken, so Jupyter's restarter never
    starts it again; the server does (``kernelports``), for a notebook's kernel too, with no one
    waiting on it, on new ports, also where jupyter-client caches them (its restart then kept
    the taken one), and the server's watch of the kernel's output, and the ledger's, follow it."""
    taken = take("iopub_port")
    kernel_id = await open_kernel(jp_fetch, write_notebook(jp_root_dir, "lost.ipynb"))  # as JupyterLab does
    kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)

    async def ports() -> dict[str, Any]:
        moved = kernel.iopub_port not in (0, taken[0].getsockname()[1])
        return {"state": "new ports" if moved else "the taken one", "detail": str(kernel.iopub_port)}

    await poll_state(ports, ("new ports",), 30, "the kernel's IOPub port")  # stays taken without
    assert await run(jp_serverapp, kernel_id, "print(6 * 7)") == "42\n"
    await _idle_to_the_server(kernel)
    await user_cell(jp_serverapp, kernel_id, "import time\ntime.sleep(0.5)")
    manager = jp_serverapp.web_app.settings["jupyter_pause"]
    manager.recorder.flush()
    await manager.wait()
    spans = [s for e in ledger.read(Store(str(store)))[0] if e.event == "activity" for s in e.spans or []]
    assert len(spans) == 1 and 0.5 <= spans[0][1] - spans[0][0] < 5, spans  # none where it kept the old port


async def test_a_kernel_that_could_not_be_started_again_says_why_to_whoever_waits_for_it(
    jp_serverapp: Any, take: Take, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume's wait for its kernel ends naming the taken port and the failed restart, not only
    "see the server's log"."""
    taken = take("iopub_port")
    tries: list[float] = []

    async def refused(*args: Any, **kwargs: Any) -> None:
        tries.append(time.monotonic())
        raise RuntimeError("this test refuses the restart")

    kernel_id = await jp_serverapp.kernel_manager.start_kernel(kernel_name="python3")
    monkeypatch.setattr(type(jp_serverapp.kernel_manager.get_kernel(kernel_id)), "restart_kernel", refused)
    with pytest.raises(kernelrun.KernelCodeError) as failed:
        await kernelrun.connect(jp_serverapp.kernel_manager, kernel_id, 6)
    port = taken[0].getsockname()[1]
    said = f"its port {port} was held by another process, and starting it again on new ports failed: this test"
    assert said in str(failed.value), failed.value
    # Tried once: a watch that kept trying would start it again beside the server's own shutdown of
    # it (this test's server stops with the refusal lifted), which jupyter-client cannot take.
    assert len(tries) == 1, tries


async def test_a_resume_whose_new_kernel_lost_its_port_restores_into_the_kernel_started_again(
    jp_fetch: Any, jp_serverapp: Any, jp_root_dir: Path, store: Path, take: Take
) -> None:
    """The extension's own kernels: a resume waits for its new kernel's first answer
    (``kernelrun.connect``), following a restart on new ports, before it restores."""
    path = write_notebook(jp_root_dir, "ports.ipynb", "answer = 6 * 7")
    await user_cell(jp_serverapp, await open_kernel(jp_fetch, path), "answer = 6 * 7")
    await call(jp_fetch, "pause", path=path)
    assert (paused := await wait_state(jp_fetch, path, ("paused", "failed")))["state"] == "paused", paused
    taken = take()
    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready  # failed without the wait
    assert taken, "the resume's kernel should have lost its first port"
    (resumed,) = [s["kernel"]["id"] for s in json.loads((await jp_fetch("api", "sessions")).body)]
    assert await run(jp_serverapp, resumed, "print(answer)") == "42\n"


@pytest.mark.parametrize("port", ["shell_port", "iopub_port"])
def test_a_tests_own_kernel_whose_port_another_process_took_starts_again_on_new_ports(
    tmp_path, jupyter_dirs: dict[str, str], take: Take, monkeypatch: pytest.MonkeyPatch, port: str
) -> None:
    """One that exits (its shell port) and one that waits instead (its IOPub port): both are
    started again as soon as that is seen, not after the wait for an answer ends (made longer
    than the test's own time limit here)."""
    taken = take(port)
    monkeypatch.setattr(kernels, "ANSWER_WITHIN", 3600.0)
    kernel = Kernel(tmp_path, {**os.environ, **jupyter_dirs})
    try:
        assert taken and getattr(kernel.manager, port) != taken[0].getsockname()[1]
        assert kernel.run("print(6 * 7)").ok().stdout == "42\n"
    finally:
        kernel.close()


async def test_a_client_of_a_servers_kernel_follows_its_connection_file_to_the_new_ports(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a restart on new ports looks like from outside: the connection file names ports nobody
    answers on, then the kernel's own again (rewritten by the server); the client gets there."""
    reads: list[str] = []
    load = server_process.AsyncKernelClient.load_connection_file

    def read(client: Any, fname: str) -> None:
        reads.append(Path(fname).read_text())
        load(client, fname)

    monkeypatch.setattr(server_process.AsyncKernelClient, "load_connection_file", read)
    with running_server(tmp_path / "a", str(tmp_path / "store"), "node-a") as server:
        kernel_id = await server.open_kernel("nb.ipynb")
        path = server.runtime / f"kernel-{kernel_id}.json"
        real = path.read_text()
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))  # bound, never listening: a port a dead kernel had
        stale = json.dumps({**json.loads(real), "shell_port": dead.getsockname()[1], "hb_port": dead.getsockname()[1]})
        path.write_text(stale)
        try:
            following = asyncio.ensure_future(server.client(kernel_id, timeout=60))
            deadline = time.monotonic() + 30
            while not reads:
                assert time.monotonic() < deadline, "the client never read the connection file"
                await asyncio.sleep(0.05)
            path.write_text(real)  # the server has written it again, with the new ports
            client = await following
            client.stop_channels()
            assert reads[0] == stale and reads[-1] == real
            assert "42" in await server.run(kernel_id, "print(6 * 7)")
        finally:
            dead.close()
