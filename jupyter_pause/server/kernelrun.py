"""Running a snippet in a kernel the Jupyter server manages, and waiting for it to be idle.

What the server runs is built by ``jupyter_pause.protocol`` (``call_source``), and its reply read
back there (``parse_reply``); this module only carries source in and printed output out.

A kernel that dies may be restarted by Jupyter on the same id within seconds, empty. Every wait
here therefore holds on to the process it started with, and treats a different process as death:
a checkpoint of a freshly restarted kernel would save nothing and bury the good one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from queue import Empty
from typing import Any

from jupyter_client import protocol_version_info
from jupyter_client.session import Session

from ..errors import PauseError
from . import kernelports
from .http import maybe_await

log = logging.getLogger(__name__)

#: Client session ids of the code this server runs, or just ran, in kernels (the ledger leaves it out of activity).
OWN_SESSIONS: set[str] = set()
#: Seconds a new client waits for the kernel's output after its first answer, before asking again.
OUTPUT_CONNECTED = 0.2
#: How long a session stays the server's own after its call returned: the server's IOPub listener
#: may read the kernel's last status of that call after the call's own client did.
OWN_GRACE = 30.0
#: Whether the server's own clients start jupyter-client's heartbeat channel: no. Their manager
#: says whether the kernel lives, and a heartbeat thread stopped before it had begun spins,
#: making a socket after socket (each lingers a second), until zmq refuses one ("Too many open
#: files"): its ``stop_channels`` held the server's event loop 1.1-1.3 s in 36 of 200 clients
#: stopped right after they started.
HEARTBEAT = False


def _no_longer_own(session: str) -> None:
    asyncio.get_running_loop().call_later(OWN_GRACE, OWN_SESSIONS.discard, session)


def own_client(kernel: Any) -> Any:
    """A client of ``kernel`` for the server's own asking, its channels started, with a session of
    its own: a client's session id is its address on the kernel's shell socket, and clients
    sharing one (``kernel.client()`` gives each the kernel's) take each other's replies.

    Without the heartbeat channel (``HEARTBEAT``): the client asks the kernel's manager whether
    the kernel lives."""
    session = Session(key=kernel.session.key, signature_scheme=kernel.session.signature_scheme)
    client = kernel.client(session=session)
    client.start_channels(hb=HEARTBEAT)
    OWN_SESSIONS.add(session.session)  # the server's own asking, not the user's use
    return client


async def answered(client: Any, timeout: float) -> None:
    """Return once the kernel has answered ``client`` on its request channel and its output
    reaches the client too; ``RuntimeError`` where the kernel died first or ``timeout`` seconds
    passed. jupyter-client's ``wait_for_ready`` does this, then waits for the output channel to
    stay quiet for a fifth of a second, to drop what came before; ``execute`` reads only the
    replies and output of its own request, so that fifth of a second is not spent here."""
    deadline = time.monotonic() + timeout
    while True:
        client.kernel_info()
        try:
            reply = await maybe_await(client.shell_channel.get_msg(timeout=1))
        except Empty:
            reply = None
        if reply is not None and reply["msg_type"] == "kernel_info_reply":
            try:  # any output at all (the status of that request): the output channel is connected
                await maybe_await(client.iopub_channel.get_msg(timeout=OUTPUT_CONNECTED))
            except Empty:
                pass  # joined too late for that request's output: ask again
            else:
                _adapt(client, reply)
                return
        if not await maybe_await(client.is_alive()):
            raise RuntimeError("the kernel died before it answered")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the kernel did not answer in {timeout:g} s")


def _adapt(client: Any, reply: dict[str, Any]) -> None:
    """Speak the kernel's major protocol version where it is not jupyter-client's own, as
    jupyter-client does with the kernel_info reply it reads itself."""
    try:
        major = int(str(reply["content"]["protocol_version"]).split(".")[0])
    except (KeyError, TypeError, ValueError):  # a kernel that does not say: the current protocol
        return
    if major != protocol_version_info[0]:
        client.session.adapt_version = major


class KernelCodeError(PauseError):
    """Code run in a kernel raised, or the kernel went away while running it."""


class KernelDied(KernelCodeError):
    """The kernel process ended (and may have been restarted empty)."""


def process_of(kernel_manager: Any, kernel_id: str) -> tuple[int, Any]:
    """Which process the kernel is now: (provisioner identity, pid)."""
    return _process(kernel_manager.get_kernel(kernel_id))


def _process(kernel: Any) -> tuple[int, Any]:
    provisioner = getattr(kernel, "provisioner", None)
    return id(provisioner), getattr(provisioner, "pid", None)


async def check_process(kernel_manager: Any, kernel_id: str, process: tuple[int, Any], doing: str) -> Any:
    """The kernel, if it is still the same live process; else ``KernelDied`` (a kernel shut down
    meanwhile included: jupyter-server's manager then answers 404 where jupyter-client's raises
    ``KeyError``)."""
    if kernel_id not in kernel_manager:
        raise KernelDied(f"the kernel died {doing}")
    kernel = kernel_manager.get_kernel(kernel_id)
    state = getattr(kernel, "execution_state", "")
    if _process(kernel) != process or state in ("restarting", "dead") or not await _alive(kernel):
        raise KernelDied(f"the kernel died {doing}")
    return kernel


#: How long one wait for a new kernel's first answer lasts before the server looks again where the
#: kernel is: Jupyter's restarter may have started it again on other ports, where a client of the
#: old ones would wait in vain.
ANSWER_ATTEMPT = 2.0


def _ports(connection: Any) -> tuple[int, ...]:
    return tuple(getattr(connection, f"{name}_port") for name in ("shell", "iopub", "stdin", "control", "hb"))


async def answering(kernel_manager: Any, kernel_id: str, timeout: float) -> None:
    """Wait until a kernel just started answers (see ``connect``)."""
    stop(await connect(kernel_manager, kernel_id, timeout))


async def connect(kernel_manager: Any, kernel_id: str, timeout: float) -> Any:
    """A client of a kernel just started, once the kernel answers it (``answered``): connected,
    its output channel included, for ``execute`` to run code with at once (each new client waits
    for a first answer again); the caller hands it to ``execute`` or stops
    it (``stop``). One that died before its first answer (a port another process took between
    the pick and the bind) held nothing yet: Jupyter's restarter starts it again on new ports,
    and this waits for that one; so it does for one that lost a port and waits instead of
    exiting, which the server starts again (``kernelports``). ``KernelDied`` once Jupyter gave up
    on it, ``KernelCodeError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    client = None
    try:
        while True:
            try:
                kernel = kernel_manager.get_kernel(kernel_id)
            except KeyError as e:
                raise KernelDied(
                    "the new kernel died at its start, and Jupyter gave up restarting it; the checkpoint is "
                    "untouched: resume again, and see the server's log for why the kernel could not start"
                ) from e
            if client is None or _ports(client) != _ports(kernel):
                if client is not None:
                    stop(client)
                client = own_client(kernel)
            try:
                await answered(client, timeout=min(ANSWER_ATTEMPT, max(1.0, deadline - time.monotonic())))
            except RuntimeError:  # it died, or has not answered yet (on the ports it was given)
                pass
            else:
                ready, client = client, None
                return ready
            if time.monotonic() >= deadline:
                why = kernelports.trouble(kernel) or "see the server's log for why the kernel could not start"
                raise KernelCodeError(
                    f"the new kernel did not answer within {timeout:g} s; the checkpoint is untouched: resume "
                    f"again ({why})"
                )
            await asyncio.sleep(0.2)
    finally:
        if client is not None:
            stop(client)


async def first_client(kernel_manager: Any, kernel_id: str, timeout: float) -> Any:
    """``connect``'s client of a kernel just started; one that has not answered within ``timeout``
    seconds is shut down (nothing ran in it yet) before the error is raised, so a resume that
    gives up on its kernel leaves none behind, holding memory or a GPU."""
    try:
        return await connect(kernel_manager, kernel_id, timeout)
    except KernelCodeError:
        if kernel_id in kernel_manager:
            try:
                await maybe_await(kernel_manager.shutdown_kernel(kernel_id, now=True))
            except Exception as e:  # the resume still fails for why it failed; the kernel is named here
                log.warning("jupyter-pause: kernel %s did not answer and could not be shut down: %s", kernel_id, e)
        raise


def stop(client: Any) -> None:
    """Close a client of the server's own (``connect``, ``execute``)."""
    client.stop_channels()
    _no_longer_own(client.session.session)


def still_connected(kernel_manager: Any, kernel_id: str, client: Any) -> bool:
    """Whether ``client`` still reaches kernel ``kernel_id``'s ports: a kernel started again (on
    new ports) is not where a client of the old one connected."""
    try:
        kernel = kernel_manager.get_kernel(kernel_id)
    except KeyError:
        return False
    return _ports(client) == _ports(kernel)


async def execute(
    kernel_manager: Any,
    kernel_id: str,
    code: str,
    timeout: float,
    process: tuple[int, Any] | None = None,
    client: Any = None,
    keep: bool = False,
    begun: Callable[[], Awaitable[None]] | None = None,
) -> str:
    """Run ``code`` in the kernel; its printed output, or ``KernelCodeError``. ``client``: one
    ``connect`` gave, used here rather than a new one; it is stopped afterwards unless ``keep``
    (the caller then stops it). ``begun()`` is awaited once the request is on its way: whatever
    any client asks of the kernel after that runs after ``code``."""
    try:
        process = process or process_of(kernel_manager, kernel_id)
        kernel = await check_process(kernel_manager, kernel_id, process, "before the code could run")
    except BaseException:
        if client is not None and not keep:
            stop(client)
        raise
    connected = client is not None
    if client is None:
        client = own_client(kernel)
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    try:
        if not connected:
            await answered(client, timeout=60)
        run = asyncio.ensure_future(
            client.execute_interactive(code, timeout=timeout, output_hook=hook, store_history=False, allow_stdin=False)
        )
        if begun is not None:
            await asyncio.sleep(0)  # the task's first step sends the request, before it waits for anything
            try:
                await begun()
            except BaseException:
                run.cancel()
                raise
        while not run.done():
            await asyncio.wait([run], timeout=0.5)
            if not run.done():
                try:
                    await check_process(kernel_manager, kernel_id, process, "while running it")
                except KernelDied:
                    run.cancel()
                    raise
        reply = run.result()
    except (TimeoutError, RuntimeError) as e:
        await check_process(kernel_manager, kernel_id, process, "while running it")
        raise KernelCodeError(f"no answer within {timeout:g} s") from e
    finally:
        if not (connected and keep):
            stop(client)
    content = reply["content"]
    if content.get("status") != "ok":
        raise KernelCodeError(f"{content.get('ename')}: {content.get('evalue')}")
    return "".join(out)


async def _alive(kernel: Any) -> bool:
    result = kernel.is_alive()
    return bool(await result) if asyncio.iscoroutine(result) else bool(result)
