"""A new kernel that lost one of its ports to another process before it could bind it.

Jupyter picks a kernel's five ports, writes them into its connection file and starts the kernel,
which binds them. In between another local process can take one (every process on a node draws
from the same ephemeral range; two kernels of one server started a moment apart can draw the same
port). A kernel that fails to bind its shell, stdin or control port exits, and Jupyter's
restarter starts it again on new ports. One that fails to bind its IOPub port does not exit
(ipykernel 7: its process waits on a thread it had started), so it is never restarted and never
answers: a notebook's kernel stays "starting", and a resume waiting for it waits until its
timeout, then fails.

``install`` watches every kernel the server starts (``Watch``) until it holds all of its ports:
every ``LOOK_EVERY`` seconds ``look`` asks the system which process holds each one, unless the
server has heard the kernel on its output already (``heard``: most kernels, by the first look). Where one
that is neither the kernel's nor one it started holds a port (a kernelspec may launch the kernel
through a wrapper: ``conda run``, a shell script) and the kernel is still running, it is started
again on new ports, as the restarter does for a kernel that exited. Once the kernel holds its new
ports, whichever restart gave them, the server's watches of its output follow it there
(``follow``: jupyter-server moves its own only after a restart it was asked for). Only for a
kernel on this machine: a remote provisioner's ports are another host's; and not where the system
will not say which process holds a port (another user's, to a server that may not look into it).

Either restart asks for new ports, and where jupyter-client caches a kernel's ports
(``cache_ports``, its default over TCP) it kept the old ones: it forgets only ports it drew as it
wrote the connection file, and cached ones are drawn before. The kernel then started on the very
port another process held, again, until the restarter gave it up (five tries). ``install`` has
every kernel of the server forget them (``forget``) on such a restart.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from typing import Any

import psutil
from jupyter_client.localinterfaces import is_local_ip

from .http import maybe_await

log = logging.getLogger(__name__)

#: Why a kernel whose watch could not start it again does not answer, by kernel manager.
_TROUBLE: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

#: The connection's ports, by their name in a connection file.
PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
#: Socket states that hold a port against a bind: listening, or bound and not yet listening.
HOLDING = (psutil.CONN_LISTEN, psutil.CONN_NONE, psutil.CONN_CLOSE)
#: Seconds between looks at a new kernel's ports: most kernels hold them all at the first.
LOOK_EVERY = 2.0
#: Seconds a kernel started again on new ports has to answer the request that makes it say its state.
ANSWER_WITHIN = 30.0


def look(kernel: Any) -> tuple[int | None, bool]:
    """What the system says of ``kernel``'s ports: the one another process holds (or None), and
    whether there is nothing more to look for: the kernel holds every one, or which process holds
    a port cannot be told (no process, no local TCP transport, a system that does not say)."""
    pid = getattr(getattr(kernel, "provisioner", None), "pid", None)
    if pid is None or getattr(kernel, "transport", "tcp") != "tcp" or not is_local_ip(getattr(kernel, "ip", "")):
        return None, True
    ports = {getattr(kernel, name, 0) for name in PORTS} - {0, None}
    try:
        process = psutil.Process(pid)
        own = {pid, *(child.pid for child in process.children(recursive=True))}
        # a listener, or a connection out of that port (an outgoing connection's local port is
        # drawn from the same range); not one whose process is gone (TIME_WAIT: a bind reuses it)
        held = [
            c
            for c in psutil.net_connections(kind="tcp")
            if c.laddr and c.laddr.port in ports and (c.status in HOLDING or c.pid is not None)
        ]
    except psutil.NoSuchProcess:  # it exited: Jupyter's restarter starts it again, or gives it up
        return None, False
    except (psutil.Error, OSError):
        return None, True
    if any(c.pid is None for c in held):  # a process this one may not look into (another user's)
        return None, True
    other = next((c.laddr.port for c in held if c.pid not in own), None)
    return other, other is None and ports <= {c.laddr.port for c in held}


def heard(kernel: Any, watched: list[int]) -> bool:
    """Whether the server's watch of ``kernel``'s output, still on the ports it started with
    (``watched``), has heard the kernel say it is idle or busy: it then holds its IOPub port, and
    one that could not bind another port exits. So most kernels are never looked at (``look``
    lists every socket of the system: 10-110 ms of a server's CPU, beside a resume's reads)."""
    return list(kernel.ports) == watched and getattr(kernel, "execution_state", None) in ("idle", "busy")


def install(kernels: Any, timeout: float) -> None:
    """Watch every kernel ``kernels`` (jupyter-server's kernel manager) starts for ``timeout``
    seconds at most, and have it draw new ports when it is started again on new ports."""
    start = kernels.start_kernel

    async def start_kernel(*args: Any, **kwargs: Any) -> str:
        running = kwargs.get("kernel_id") in kernels  # a session taking a kernel that runs: no start
        kernel_id = await start(*args, **kwargs)
        kernel = kernels.get_kernel(kernel_id)
        if getattr(kernel, "cache_ports", False) and getattr(kernel, "transport", "tcp") == "tcp":
            kernel.cleanup_random_ports = functools.partial(forget, kernel)  # what a restart calls
        if not running:
            Watch(kernels, kernel_id, time.monotonic() + timeout).later()
        return kernel_id

    kernels.start_kernel = start_kernel


class Watch:
    """The looks at one new kernel's ports, every ``LOOK_EVERY`` seconds until it holds them all
    or ``deadline`` (``time.monotonic()``); each is scheduled on the event loop (not a task that
    waits), so that a server stopping between two looks leaves nothing pending."""

    #: The looks under way (a task is kept only as long as something refers to it).
    running: set[asyncio.Task[None]] = set()

    def __init__(self, kernels: Any, kernel_id: str, deadline: float) -> None:
        self.kernels, self.kernel_id, self.deadline = kernels, kernel_id, deadline
        #: The ports the server's watch of the kernel's output is connected to.
        self.watched = list(kernels.get_kernel(kernel_id).ports)

    def later(self) -> None:
        asyncio.get_running_loop().call_later(LOOK_EVERY, self._begin)

    def _begin(self) -> None:
        task = asyncio.ensure_future(self.once())
        self.running.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the kernel runs on, unwatched
            log.warning("jupyter-pause: kernel %s: its ports not looked at: %s", self.kernel_id, task.exception())

    async def once(self) -> None:
        """One look: where another process holds a port and the kernel still runs (one that
        exited is the restarter's), start it again on new ports; then look again, unless done or
        that start failed (said to whoever waits for the kernel, and not tried again).
        Done, a kernel started again (by either) on new ports has the server's watches of its
        output follow it there: jupyter-server moves its own only after a restart it was asked
        for, so a kernel its restarter started again stayed "starting" (a pause then waited for
        a cell it thought running), its cells missing from the ledger."""
        if self.kernel_id not in self.kernels:
            return
        kernel = self.kernels.get_kernel(self.kernel_id)
        if heard(kernel, self.watched):
            return
        port, settled = await asyncio.to_thread(look, kernel)
        if settled:
            if list(kernel.ports) != self.watched and hasattr(self.kernels, "start_watching_activity"):
                await follow(self.kernels, kernel, self.kernel_id)
            return
        if port is not None and await maybe_await(kernel.is_alive()):
            if not await _start_again(kernel, self.kernel_id, port):
                return  # said once (``trouble``); trying again would only race a shutdown of it
        if time.monotonic() < self.deadline:
            self.later()


async def follow(kernels: Any, kernel: Any, kernel_id: str) -> None:
    """Move the server's watch of ``kernel``'s output to its new ports (jupyter-server's; the
    ledger's follows it: ``session_events``), then have the kernel say its state there: a kernel
    information request, which it answers busy, then idle (a cell that ran before the move was
    heard by no watch, and its state would stay "starting")."""
    kernels.stop_watching_activity(kernel_id)
    kernels.start_watching_activity(kernel_id)
    client = kernel.client()
    client.start_channels(hb=False)  # its manager says whether it lives (``kernelrun.HEARTBEAT``)
    try:
        await client.wait_for_ready(timeout=ANSWER_WITHIN)
    except RuntimeError as e:  # it died again: Jupyter's restarter has it
        log.info("jupyter-pause: kernel %s did not answer on its new ports: %s", kernel_id, e)
    finally:
        client.stop_channels()


async def _start_again(kernel: Any, kernel_id: str, port: int) -> bool:
    """Start ``kernel`` again on new ports; False where that failed (the reason is kept for
    whoever waits for the kernel: ``trouble``)."""
    log.warning(
        "jupyter-pause: kernel %s could not bind port %d (another process holds it): starting it again on new ports",
        kernel_id,
        port,
    )
    try:
        await maybe_await(kernel.restart_kernel(now=True, newports=True))
    except Exception as e:  # whoever waits for the kernel says it never answered, and why (``trouble``)
        log.warning("jupyter-pause: kernel %s could not be started again: %s", kernel_id, e)
        _TROUBLE[kernel] = (
            f"its port {port} was held by another process, and starting it again on new ports failed: {e}"
        )
        return False
    return True


def trouble(kernel: Any) -> str:
    """Why ``kernel`` does not answer, where its watch knows ("" where it does not)."""
    return _TROUBLE.get(kernel, "")


def forget(kernel: Any) -> None:
    """Make the next start of ``kernel`` (a jupyter-client kernel manager) draw new ports and
    write a new connection file."""
    for name in PORTS:
        setattr(kernel, name, 0)
    kernel.cleanup_connection_file()
