"""Running code in a kernel the server manages (server/kernelrun.py): a new kernel's first answer."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest
from jupyter_client.manager import AsyncKernelManager

from jupyter_pause.server import kernelrun

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("jupyter_dirs")]


async def _with_new_kernel(then: Any) -> Any:
    """``then(manager, client)`` with a python3 kernel just started and a client of it, both
    gone afterwards."""
    manager = AsyncKernelManager(kernel_name="python3")
    await manager.start_kernel()
    client = manager.client()
    client.start_channels()
    try:
        return await then(manager, client)
    finally:
        client.stop_channels()
        if await manager.is_alive():
            await manager.shutdown_kernel(now=True)


def test_once_a_new_kernel_has_answered_the_output_of_the_next_code_reaches_the_client():
    async def run(manager: AsyncKernelManager, client: Any) -> tuple[str, str]:
        await kernelrun.answered(client, timeout=60)  # asked from the moment the process starts
        out: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])

        reply = await client.execute_interactive("print('after', 6 * 7)", timeout=60, output_hook=hook)
        return reply["content"]["status"], "".join(out)

    assert asyncio.run(_with_new_kernel(run)) == ("ok", "after 42\n")  # nothing lost to a channel joining late


def test_a_kernel_that_dies_before_it_answers_is_said_so():
    async def run(manager: AsyncKernelManager, client: Any) -> str:
        os.kill(manager.provisioner.process.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError) as info:
            await kernelrun.answered(client, timeout=60)
        return str(info.value)

    assert asyncio.run(_with_new_kernel(run)) == "the kernel died before it answered"
