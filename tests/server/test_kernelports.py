"""Which port of a new kernel another process holds, and whether it holds them all (``server.kernelports``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest

from jupyter_pause.server import kernelports
from tests.support.kernels import OneKernel
from tests.support.ports import free_port

#: A process that listens on a port of its own and says which, then waits to be stopped.
HOLDER = (
    "import socket, sys\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True); sys.stdin.read()\n"
)
#: A kernelspec's wrapper: it starts the process that listens (the kernel) and passes its port on.
WRAPPER = (
    "import subprocess, sys\n"
    "PIPE = subprocess.PIPE\n"
    f"child = subprocess.Popen([sys.executable, '-c', {HOLDER!r}], stdin=PIPE, stdout=PIPE, text=True)\n"
    "print(child.stdout.readline().strip(), flush=True); sys.stdin.read(); child.kill()\n"
)

Started = Callable[[str], tuple[int, int]]


@pytest.fixture
def started() -> Iterator[Started]:
    """Start a script that prints a port: its pid and that port; every one is stopped afterwards."""
    processes: list[subprocess.Popen] = []

    def start(script: str) -> tuple[int, int]:
        process = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        processes.append(process)
        return process.pid, int(process.stdout.readline())

    yield start
    for process in processes:
        process.stdin.close()  # a wrapper stops its child when its input ends
        process.wait(timeout=30)


def _kernel(pid: int | None, **ports: int) -> SimpleNamespace:
    """What ``look`` reads of a jupyter-client kernel manager: its process and its ports."""
    fields = {name: 0 for name in kernelports.PORTS} | ports
    return SimpleNamespace(provisioner=SimpleNamespace(pid=pid), transport="tcp", ip="127.0.0.1", **fields)


#: A process with a connection out of a port of its own and no listener on it, and says which port.
CONNECTED = (
    "import socket, sys\n"
    "server = socket.socket(); server.bind(('127.0.0.1', 0)); server.listen()\n"
    "out = socket.create_connection(server.getsockname()); accepted, _ = server.accept(); server.close()\n"
    "print(out.getsockname()[1], flush=True); sys.stdin.read()\n"
)


def test_a_port_another_process_connects_out_of_is_named(started):
    """An outgoing connection's local port comes from the range kernels' ports are drawn from: a
    kernel cannot bind it either (its IOPub port was once taken so)."""
    kernel, own = started(HOLDER)
    _, elsewhere = started(CONNECTED)
    assert kernelports.look(_kernel(kernel, shell_port=own, iopub_port=elsewhere)) == (elsewhere, False)


def test_a_port_another_process_listens_on_is_named(started):
    kernel, own = started(HOLDER)
    _, elsewhere = started(HOLDER)
    assert kernelports.look(_kernel(kernel, shell_port=own, iopub_port=elsewhere)) == (elsewhere, False)


def test_a_kernel_holding_its_own_ports_or_not_yet_bound_has_none_taken(started):
    kernel, own = started(HOLDER)
    not_yet_bound = free_port()  # nobody holds it: a kernel still starting has not bound it yet
    assert kernelports.look(_kernel(kernel, shell_port=own, iopub_port=not_yet_bound)) == (None, False)
    assert kernelports.look(_kernel(kernel, shell_port=own)) == (None, True)  # all bound: no more to look for


def test_a_port_held_by_a_process_the_kernel_started_is_the_kernels_own(started):
    """The wrapper is the process Jupyter knows; the kernel, its child, holds the ports."""
    wrapper, childs = started(WRAPPER)
    _, elsewhere = started(HOLDER)
    assert kernelports.look(_kernel(wrapper, shell_port=childs)) == (None, True)
    assert kernelports.look(_kernel(wrapper, shell_port=childs, iopub_port=elsewhere)) == (elsewhere, False)


def test_without_a_process_over_ipc_or_on_another_host_nothing_can_be_told(started):
    kernel, own = started(HOLDER)
    _, elsewhere = started(HOLDER)
    assert kernelports.look(_kernel(None, iopub_port=elsewhere)) == (None, True)
    over_ipc = _kernel(kernel, shell_port=own, iopub_port=elsewhere)
    over_ipc.transport = "ipc"
    assert kernelports.look(over_ipc) == (None, True)
    remote = _kernel(kernel, shell_port=own, iopub_port=elsewhere)
    remote.ip = "10.0.0.7"  # a remote provisioner's kernel: its ports are that host's
    assert kernelports.look(remote) == (None, True)


def test_a_port_whose_holder_this_process_may_not_look_into_ends_the_watch(started, monkeypatch):
    """A kernel run as another user (a kernelspec's ``sudo -u``): the system lists its sockets
    without their process, to a process not allowed to look into it. That tells nothing: the
    kernel is not started again for it. (Tests run as root here, who may look into any process:
    the sockets are listed as such a process sees them.)"""
    kernel, own = started(HOLDER)
    listed = kernelports.psutil.net_connections
    monkeypatch.setattr(
        kernelports.psutil, "net_connections", lambda **kw: [c._replace(pid=None) for c in listed(**kw)]
    )
    assert kernelports.look(_kernel(kernel, shell_port=own)) == (None, True)


@pytest.mark.parametrize(
    ("state", "moved", "looked"),
    [("idle", False, False), ("busy", False, False), ("starting", False, True), ("idle", True, True)],
)
def test_only_a_kernel_the_server_has_not_heard_on_the_ports_it_started_with_is_looked_at(
    monkeypatch, state, moved, looked
):
    kernel = _kernel(None, shell_port=1, iopub_port=2, stdin_port=3, control_port=4, hb_port=5)
    kernel.ports = [1, 2, 3, 4, 5]
    watch = kernelports.Watch(OneKernel(kernel), "k", time.monotonic() + 60)
    kernel.execution_state = state
    if moved:  # started again on other ports: the server's watch of its output is still on the first ones
        kernel.ports = [6, 7, 8, 9, 10]
    calls: list[object] = []
    monkeypatch.setattr(kernelports, "look", lambda k: calls.append(k) or (None, True))
    monkeypatch.setattr(kernelports, "follow", lambda *args: asyncio.sleep(0))
    asyncio.run(watch.once())
    assert calls == ([kernel] if looked else [])
