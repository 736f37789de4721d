"""Running code in a kernel the server manages (server/kernelrun.py): a new kernel's first answer."""

from __future__ import annotations

import asyncio
import os
import signal
from queue import Empty
from typing import Any

import pytest
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.session import Session

from jupyter_pause.server import kernelrun


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


@pytest.mark.integration  # starts a kernel (the tests below talk to a stand-in client)
@pytest.mark.usefixtures("jupyter_dirs")
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


@pytest.mark.integration  # starts a kernel
@pytest.mark.usefixtures("jupyter_dirs")
def test_a_kernel_that_dies_before_it_answers_is_said_so():
    async def run(manager: AsyncKernelManager, client: Any) -> str:
        os.kill(manager.provisioner.process.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError) as info:
            await kernelrun.answered(client, timeout=60)
        return str(info.value)

    assert asyncio.run(_with_new_kernel(run)) == "the kernel died before it answered"


@pytest.mark.integration  # starts a kernel
@pytest.mark.usefixtures("jupyter_dirs")
def test_the_servers_own_clients_start_no_heartbeat_and_still_know_a_dead_kernel():
    """jupyter-client's heartbeat thread, stopped before it had begun, spins making sockets until
    zmq refuses one ("Too many open files"), holding ``stop_channels`` (and the server's event
    loop) meanwhile: the server's own clients do without it, and ask the kernel's manager whether
    the kernel lives."""

    async def run(manager: AsyncKernelManager, client: Any) -> list[Any]:
        await kernelrun.answered(client, timeout=60)
        clients = [kernelrun.own_client(manager) for _ in range(20)]
        for started in clients:
            kernelrun.stop(started)  # at once, as a failed call does
        mine = kernelrun.own_client(manager)
        try:
            await kernelrun.answered(mine, timeout=60)
            alive = await mine.is_alive()
            os.kill(manager.provisioner.process.pid, signal.SIGKILL)
            await asyncio.to_thread(manager.provisioner.process.wait)  # gone, and reaped
            # a heartbeat thread never started has no thread id (``stop_channels`` makes the channel)
            return [[getattr(c._hb_channel, "ident", None) for c in [*clients, mine]], alive, await mine.is_alive()]
        finally:
            kernelrun.stop(mine)

    hearts, alive, after = asyncio.run(_with_new_kernel(run))
    assert hearts == [None] * 21 and alive is True and after is False


class _Channel:
    """A client channel holding the messages a kernel sent, read one at a time."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self.messages = list(messages)

    async def get_msg(self, timeout: float) -> dict[str, Any]:
        if not self.messages:
            raise Empty
        return self.messages.pop(0)


class _Client:
    """A client of a kernel that answers its first kernel_info request with ``protocol``."""

    def __init__(self, protocol: str | None) -> None:
        content = {} if protocol is None else {"protocol_version": protocol}
        self.shell_channel = _Channel({"msg_type": "kernel_info_reply", "content": content})
        self.iopub_channel = _Channel({"msg_type": "status", "content": {"execution_state": "busy"}})
        self.session = Session()
        self.asked = 0

    def kernel_info(self) -> None:
        self.asked += 1

    async def is_alive(self) -> bool:
        return True


@pytest.mark.parametrize(("protocol", "adapted"), [("4.1", 4), ("5.4", 0), (None, 0), ("five", 0)])
def test_the_client_speaks_the_protocol_version_the_kernel_answers_with(protocol, adapted):
    client = _Client(protocol)
    asyncio.run(kernelrun.answered(client, timeout=5))
    assert client.asked == 1
    assert client.session.adapt_version == adapted  # 0: jupyter-client's own version, nothing adapted
