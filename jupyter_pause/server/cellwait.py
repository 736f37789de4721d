"""Before a pause checkpoints a kernel: waiting for the cell it is running, or asking that cell's
``steps`` loop to checkpoint at its next safe point.

Whether a cell runs is not read from the kernel's ``execution_state``. The server learns it from the
kernel's "busy" on IOPub, a moment after the cell started: a Pause clicked (or a preemption notice
come) in that moment would read the kernel idle and go the usual way, its request queued behind the
cell, with neither the safe point nor the busy timeout. The wait asks the kernel instead (``Probe``):
a kernel answers its shell requests in the order they came, so a question sent now is answered once
every cell sent before the pause has ended. Until then a cell runs ahead of the pause.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..protocol import SafePointRequest, channel
from .kernelrun import KernelCodeError, check_process, own_client, stop

#: What the status says while a pause waits for a cell that has no safe point.
NO_SAFE_POINT = "waiting for the running cell: it has no safe point (wrap its loop in jupyter_pause.steps)"

#: Seconds between two looks at the kernel while a pause waits for its cell.
POLL = 0.2


class Probe:
    """A ``kernel_info_request`` in the kernel's queue: answered once the cells ahead of it ended.

    Nothing runs for it in the kernel and nothing is left behind: a probe closed unanswered (the
    pause gave up) is answered later to a client that is gone."""

    def __init__(self, kernel: Any) -> None:
        self.client = own_client(kernel)
        self.msg_id = self.client.kernel_info()
        self.done = False

    async def answered(self, within: float) -> bool:
        """Whether the kernel has answered, waiting up to ``within`` seconds for it."""
        deadline = time.monotonic() + within
        while not self.done:
            try:
                msg = await self.client.shell_channel.get_msg(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False
            self.done = msg["parent_header"].get("msg_id") == self.msg_id
        return True

    def close(self) -> None:
        stop(self.client)


async def wait_for_cell(
    kernel_manager: Any,
    kernel_id: str,
    timeout: float,
    process: tuple[int, Any],
    request: SafePointRequest,
    tell: Callable[[str], Awaitable[object]],
    answer_within: float | None = None,
    probe: Probe | None = None,
) -> str | None:
    """Wait until no cell runs ahead of the pause; or, while a cell runs a ``steps`` loop, ask it
    (``channel``) to checkpoint at its next safe point and stop the cell.

    Returns the kernel's reply line when it answered from a safe point, None once the cells ahead
    have ended (the pause then checkpoints the usual way). ``tell`` hears what the wait is waiting
    for. Raises after ``timeout`` seconds, having withdrawn the request (or, when the kernel had
    already taken it up, after waiting ``answer_within`` seconds more for its answer). ``probe``:
    the question whose answer says the cells ended (``Probe`` of the kernel by default).
    """
    kernel = kernel_manager.get_kernel(kernel_id)
    probe = probe or Probe(kernel)
    try:
        popen = getattr(getattr(kernel, "provisioner", None), "process", None)  # local kernels only
        connection_file = getattr(kernel, "connection_file", "") or ""
        deadline = time.monotonic() + timeout
        sent = claimed = False
        said = None
        first = True
        while True:
            kernel = await check_process(kernel_manager, kernel_id, process, "while the pause waited for its cell")
            if sent and (line := channel.take_reply(popen.pid)) is not None:
                return line
            if await probe.answered(0.0):
                # The cell ended. A request the kernel took up was answered before that; one it did
                # not is withdrawn, and the pause goes the usual way.
                if sent and (claimed or not channel.withdraw_request(popen.pid)):
                    return channel.take_reply(popen.pid)
                return None
            marker = channel.read_marker(popen.pid, connection_file) if popen is not None else None
            if marker is not None and not sent:
                channel.send_request(popen, request)
                sent = True
            if sent and channel.claimed(popen.pid):
                detail = "checkpointing at a safe point"
            elif marker is not None:
                detail = f"waiting for the next safe point ({marker.description})"
            else:
                detail = NO_SAFE_POINT
            # An idle kernel answers the probe within its first wait: nothing is said of a cell unless
            # one is known to run (the kernel's "busy" heard, a loop's marker) or the probe waited.
            if detail != said and not (first and marker is None and getattr(kernel, "execution_state", "") != "busy"):
                said = detail
                await tell(detail)
            first = False
            if time.monotonic() > deadline:
                if sent and not claimed and not channel.withdraw_request(popen.pid):
                    claimed, deadline = True, time.monotonic() + (answer_within or timeout)
                    continue
                raise KernelCodeError(
                    f"the kernel has been busy for more than {timeout:g} s (a cell is still running"
                    + (", and its loop reached no safe point" if sent else "")
                    + "); the pause was not done: try again when the cell ends"
                )
            await probe.answered(POLL)
    finally:
        probe.close()


async def ended(
    kernel_manager: Any, kernel_id: str, process: tuple[int, Any], doing: str, every: float, give_up: Callable[[], bool]
) -> bool:
    """Wait until the cells sent to the kernel before now have ended (True), looking every
    ``every`` seconds; False as soon as ``give_up()`` says so first. ``KernelDied`` (saying it
    died ``doing``) if the kernel dies meanwhile."""
    probe = Probe(await check_process(kernel_manager, kernel_id, process, doing))
    try:
        while not await probe.answered(every):
            await check_process(kernel_manager, kernel_id, process, doing)
            if give_up():
                return False
        return True
    finally:
        probe.close()


async def wait_ended(kernel_manager: Any, kernel_id: str, timeout: float, process: tuple[int, Any]) -> None:
    """Wait until the cells sent to the kernel before now have ended (a cell stopped at its safe
    point, say); ``KernelCodeError`` after ``timeout`` seconds, ``KernelDied`` if it died."""
    deadline = time.monotonic() + timeout
    if not await ended(
        kernel_manager, kernel_id, process, "while its cell stopped", POLL, lambda: time.monotonic() > deadline
    ):
        raise KernelCodeError(f"the kernel's cell had not ended {timeout:g} s after its checkpoint")
