"""SIGTERM to a real server with two kernels: both sessions are paused before it exits, and both
resume on the next server (as a pod evicted from one node and started on another)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys

import nbformat
import pytest

from jupyter_pause.notebook import session_from_path
from jupyter_pause.server.status import StatusBoard
from jupyter_pause.store.layout import release_key
from jupyter_pause.store.storage import Store
from tests.support.server_process import running_server

pytestmark = pytest.mark.integration

NOTEBOOKS = ("train/one.ipynb", "eval/two.ipynb")
STATE = "import torch\ntorch.manual_seed({seed})\nweights = torch.randn(64)\nlabel = {label!r}\n"
PROBE = "import json\nprint(json.dumps([weights.sum().item(), label]))"


def write(root, path: str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(), str(target))


async def exited(process, timeout: float) -> int:
    """Wait for ``process`` to exit (its return code), polling its state."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while process.poll() is None:
        if loop.time() > deadline:
            raise AssertionError(f"the server did not exit within {timeout} s of SIGTERM")
        await asyncio.sleep(0.1)
    return process.returncode


async def test_sigterm_pauses_every_session_then_the_server_exits_and_both_resume(tmp_path):
    store = str(tmp_path / "store")
    root = tmp_path / "disk"
    before = {}
    with running_server(tmp_path / "first", store, "node-a", "--PauseServer.shutdown_budget=90", root=root) as first:
        for seed, path in enumerate(NOTEBOOKS):
            write(root, path)
            kernel = await first.open_kernel(path)
            await first.run(kernel, STATE.format(seed=seed, label=path))
            before[path] = json.loads((await first.run(kernel, PROBE)).strip())
        first.process.send_signal(signal.SIGTERM)
        assert await exited(first.process, 120) == 0, first.log_tail()
        log = first.log.read_text(errors="replace")
    assert "SIGTERM: pausing every session" in log

    board = StatusBoard(Store(store), "reader")
    statuses = {path: board.read(session_from_path(path)) for path in NOTEBOOKS}
    assert all(s is not None and s.state == "paused" for s in statuses.values()), statuses
    (release_id,) = {s.release for s in statuses.values()}
    record = json.loads(bytes(Store(store).read(release_key(release_id))))
    assert record["trigger"] == "sigterm" and record["state"] == "stopped" and record["server_stop"] == "signal"
    assert sorted(s["path"] for s in record["sessions"]) == sorted(NOTEBOOKS)

    with running_server(tmp_path / "second", store, "node-b", root=root) as second:
        for path in NOTEBOOKS:
            code, answer = await second.call("resume", path=path)
            assert code == 202, answer
        for path in NOTEBOOKS:
            resumed = await second.wait_state(path, ("ready", "failed"))
            assert resumed["verdict"] == "restored", resumed
            (kernel,) = await second.kernels_of(path)
            assert json.loads((await second.run(kernel, PROBE)).strip()) == before[path]


async def test_sigterm_with_nothing_to_pause_stops_at_once_and_records_it(tmp_path):
    store = str(tmp_path / "store")
    with running_server(tmp_path / "idle", store, "node-a") as server:
        server.process.send_signal(signal.SIGTERM)
        assert await exited(server.process, 60) == 0, server.log_tail()
        log = server.log.read_text(errors="replace")
    assert "Traceback" not in log and "failed" not in log, log
    (key,) = Store(store).list("releases/")
    record = json.loads(bytes(Store(store).read(key)))
    assert (record["state"], record["sessions"], record["detail"]) == (
        "stopped",
        [],
        "nothing to pause; the server is exiting",
    )


HELD_OPEN = """
import logging, sys, threading
from jupyter_pause.server.shutdown import exit_when_stopped
logging.basicConfig(stream=sys.stdout, level=logging.INFO)
never = threading.Event()
threading.Thread(target=never.wait, name="never ends").start()  # no daemon: holds the exit
threading.Thread(target=lambda: None, name="ends").start()
exit_when_stopped(grace=0.5)
print("main done", flush=True)
"""


def test_a_stopped_server_exits_without_a_thread_that_never_ends():
    done = subprocess.run([sys.executable, "-c", HELD_OPEN], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "main done" in done.stdout
    assert "exiting without 1 thread(s) that never end: never ends" in done.stdout, done.stdout
