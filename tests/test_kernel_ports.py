"""The test servers' kernels, and a test's own, survive a port taken between the pick and the bind
(side by side, every local process draws from one ephemeral port range): the start fails, and the
restart that follows binds new ports (``KERNEL_PORT_ARGS`` and ``Kernel`` in tests/support/kernels.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any

import pytest
from jupyter_client import connect

from tests.support.kernels import Kernel
from tests.support.server_helpers import user_cell

pytestmark = pytest.mark.integration


def _first_port_taken(taken: list[socket.socket]) -> Any:
    """``write_connection_file`` as jupyter-client has it, except that another process (a socket
    appended to ``taken``) listens on the first kernel's shell port before that kernel binds it."""
    pick = connect.write_connection_file

    def pick_then_take(*args: Any, **kwargs: Any) -> Any:
        written = pick(*args, **kwargs)
        if not taken:
            holder = socket.socket()
            holder.bind((written[1]["ip"], written[1]["shell_port"]))
            holder.listen()
            taken.append(holder)
        return written

    return pick_then_take


async def test_a_kernel_whose_port_another_process_took_before_it_bound_starts_on_new_ports(
    jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[socket.socket] = []
    monkeypatch.setattr(connect, "write_connection_file", _first_port_taken(taken))
    try:
        kernel_id = await jp_serverapp.kernel_manager.start_kernel(kernel_name="python3")
        kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
        held = taken[0].getsockname()[1]
        deadline = time.monotonic() + 60
        while kernel.shell_port in (held, 0):
            assert time.monotonic() < deadline, f"the kernel kept port {held}: {kernel.execution_state}"
            await asyncio.sleep(0.1)
        await user_cell(jp_serverapp, kernel_id, "answer = 6 * 7")
    finally:
        for holder in taken:
            holder.close()


def test_a_tests_own_kernel_whose_port_another_process_took_starts_again_on_new_ports(
    tmp_path, jupyter_dirs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[socket.socket] = []
    monkeypatch.setattr(connect, "write_connection_file", _first_port_taken(taken))
    kernel = None
    try:
        kernel = Kernel(tmp_path, {**os.environ, **jupyter_dirs})
        assert taken and kernel.manager.shell_port != taken[0].getsockname()[1]
        assert kernel.run("print(6 * 7)").ok().stdout == "42\n"
    finally:
        if kernel is not None:
            kernel.close()
        for holder in taken:
            holder.close()
