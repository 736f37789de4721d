"""Which port of a new kernel another process holds (``server.kernelports``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from jupyter_pause.server import kernelports

#: A process that listens on a port of its own and says which, then waits to be stopped.
HOLDER = (
    "import socket, sys\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True); sys.stdin.read()\n"
)


def _kernel(pid: int | None, **ports: int) -> SimpleNamespace:
    """What ``taken`` reads of a jupyter-client kernel manager: its process and its ports."""
    fields = {name: 0 for name in kernelports.PORTS} | ports
    return SimpleNamespace(provisioner=SimpleNamespace(pid=pid), transport="tcp", **fields)


@pytest.fixture
def elsewhere():
    """A port another process listens on."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield int(holder.stdout.readline())
    finally:
        holder.kill()
        holder.wait()


def test_a_port_another_process_listens_on_is_named(elsewhere):
    mine = socket.create_server(("127.0.0.1", 0))  # this process stands for the kernel
    try:
        kernel = _kernel(os.getpid(), shell_port=mine.getsockname()[1], iopub_port=elsewhere)
        assert kernel.iopub_port == elsewhere and kernelports.taken(kernel) == elsewhere
    finally:
        mine.close()


def test_a_kernel_holding_its_own_ports_or_not_yet_bound_has_none_taken():
    mine = socket.create_server(("127.0.0.1", 0))
    unbound = socket.socket()
    unbound.bind(("127.0.0.1", 0))
    free = unbound.getsockname()[1]
    unbound.close()  # nobody holds it: a kernel still starting has not bound it yet
    try:
        assert kernelports.taken(_kernel(os.getpid(), shell_port=mine.getsockname()[1], iopub_port=free)) is None
    finally:
        mine.close()


def test_without_a_process_or_over_ipc_nothing_can_be_told(elsewhere):
    assert kernelports.taken(_kernel(None, iopub_port=elsewhere)) is None
    over_ipc = _kernel(os.getpid(), iopub_port=elsewhere)
    over_ipc.transport = "ipc"
    assert kernelports.taken(over_ipc) is None
