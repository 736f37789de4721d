"""Running a snippet in a kernel the Jupyter server manages, and waiting for it to be idle."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from ..errors import PauseError


class KernelCodeError(PauseError):
    """Code run in a kernel raised, or the kernel went away while running it."""


async def wait_idle(kernel_manager: Any, kernel_id: str, timeout: float) -> None:
    """Wait until the kernel has no running cell; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        kernel = kernel_manager.get_kernel(kernel_id)
        if getattr(kernel, "execution_state", "idle") in ("idle", "starting"):
            return
        if time.monotonic() > deadline:
            raise KernelCodeError(
                f"the kernel has been busy for more than {timeout:.0f} s (a cell is still running); "
                "the pause was not done and the kernel keeps running: try again when the cell ends"
            )
        await asyncio.sleep(0.2)


async def execute(kernel_manager: Any, kernel_id: str, code: str, timeout: float) -> str:
    """Run ``code`` in the kernel; its printed output, or ``KernelCodeError``."""
    kernel = kernel_manager.get_kernel(kernel_id)
    client = kernel.client()
    client.start_channels()
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    try:
        await client.wait_for_ready(timeout=60)
        run = asyncio.ensure_future(client.execute_interactive(
            code, timeout=timeout, output_hook=hook, store_history=False, allow_stdin=False
        ))
        while not run.done():
            await asyncio.wait([run], timeout=0.5)
            if not run.done() and not await _alive(kernel):
                run.cancel()
                raise KernelCodeError("the kernel died while running it")
        reply = run.result()
    except (TimeoutError, RuntimeError) as e:
        why = "the kernel died" if not await _alive(kernel) else f"no answer within {timeout:.0f} s"
        raise KernelCodeError(why) from e
    finally:
        client.stop_channels()
    content = reply["content"]
    if content.get("status") != "ok":
        raise KernelCodeError(f"{content.get('ename')}: {content.get('evalue')}")
    return "".join(out)


async def _alive(kernel: Any) -> bool:
    result = kernel.is_alive()
    return bool(await result) if asyncio.iscoroutine(result) else bool(result)


def last_json(output: str) -> Any:
    """The JSON value printed on the last line of ``output``."""
    lines = output.strip().splitlines()
    if not lines:
        raise KernelCodeError("the kernel printed nothing back")
    return json.loads(lines[-1])
