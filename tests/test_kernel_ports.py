"""The test servers' kernels survive a port taken between the pick and the bind (side by side,
every local process draws from one ephemeral port range): the start fails, and the restart that
follows binds new ports (``KERNEL_PORT_ARGS`` in tests/support/kernels.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from jupyter_client import connect

from tests.support.server_helpers import user_cell

pytestmark = pytest.mark.integration


async def test_a_kernel_whose_port_another_process_took_before_it_bound_starts_on_new_ports(
    jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[socket.socket] = []
    pick = connect.write_connection_file

    def pick_then_take(*args: Any, **kwargs: Any) -> Any:
        written = pick(*args, **kwargs)
        if not taken:  # another process listens on the first kernel's shell port before it binds
            holder = socket.socket()
            holder.bind((written[1]["ip"], written[1]["shell_port"]))
            holder.listen()
            taken.append(holder)
        return written

    monkeypatch.setattr(connect, "write_connection_file", pick_then_take)
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
