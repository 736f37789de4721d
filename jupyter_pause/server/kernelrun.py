"""Running a snippet in a kernel the Jupyter server manages, and waiting for it to be idle.

What the server runs is built by ``jupyter_pause.kernel.remote`` (``call_source``), and its reply
read back there (``parse_reply``); this module only carries source in and printed output out.

A kernel that dies may be restarted by Jupyter on the same id within seconds, empty. Every wait
here therefore holds on to the process it started with, and treats a different process as death:
a checkpoint of a freshly restarted kernel would save nothing and bury the good one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..errors import PauseError


class KernelCodeError(PauseError):
    """Code run in a kernel raised, or the kernel went away while running it."""


class KernelDied(KernelCodeError):
    """The kernel process ended (and may have been restarted empty)."""


def process_of(kernel_manager: Any, kernel_id: str) -> tuple[int, Any]:
    """Which process the kernel is now: (provisioner identity, pid)."""
    kernel = kernel_manager.get_kernel(kernel_id)
    provisioner = getattr(kernel, "provisioner", None)
    return id(provisioner), getattr(provisioner, "pid", None)


async def _check(kernel_manager: Any, kernel_id: str, process: tuple[int, Any], doing: str) -> Any:
    """The kernel, if it is still the same live process; else ``KernelDied``."""
    try:
        kernel = kernel_manager.get_kernel(kernel_id)
    except KeyError as e:
        raise KernelDied(f"the kernel died {doing}") from e
    state = getattr(kernel, "execution_state", "")
    if process_of(kernel_manager, kernel_id) != process or state in ("restarting", "dead") or not await _alive(kernel):
        raise KernelDied(f"the kernel died {doing}")
    return kernel


async def wait_idle(kernel_manager: Any, kernel_id: str, timeout: float, process: tuple[int, Any]) -> None:
    """Wait until the kernel has no running cell; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        kernel = await _check(kernel_manager, kernel_id, process, "while the pause waited for its cell")
        if getattr(kernel, "execution_state", "idle") == "idle":
            return
        if time.monotonic() > deadline:
            raise KernelCodeError(
                f"the kernel has been busy for more than {timeout:g} s (a cell is still running); "
                "the pause was not done: try again when the cell ends"
            )
        await asyncio.sleep(0.2)


async def execute(
    kernel_manager: Any, kernel_id: str, code: str, timeout: float, process: tuple[int, Any] | None = None
) -> str:
    """Run ``code`` in the kernel; its printed output, or ``KernelCodeError``."""
    process = process or process_of(kernel_manager, kernel_id)
    kernel = await _check(kernel_manager, kernel_id, process, "before the code could run")
    client = kernel.client()
    client.start_channels()
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    try:
        await client.wait_for_ready(timeout=60)
        run = asyncio.ensure_future(
            client.execute_interactive(code, timeout=timeout, output_hook=hook, store_history=False, allow_stdin=False)
        )
        while not run.done():
            await asyncio.wait([run], timeout=0.5)
            if not run.done():
                try:
                    await _check(kernel_manager, kernel_id, process, "while running it")
                except KernelDied:
                    run.cancel()
                    raise
        reply = run.result()
    except (TimeoutError, RuntimeError) as e:
        await _check(kernel_manager, kernel_id, process, "while running it")
        raise KernelCodeError(f"no answer within {timeout:g} s") from e
    finally:
        client.stop_channels()
    content = reply["content"]
    if content.get("status") != "ok":
        raise KernelCodeError(f"{content.get('ename')}: {content.get('evalue')}")
    return "".join(out)


async def _alive(kernel: Any) -> bool:
    result = kernel.is_alive()
    return bool(await result) if asyncio.iscoroutine(result) else bool(result)
