"""SIGTERM: pause every session within a budget, then let the server exit.

Kubernetes stops a pod (eviction, a spot node reclaimed, ``kubectl delete``) by sending SIGTERM
to the server and SIGKILL ``terminationGracePeriodSeconds`` later. jupyter-server's own handler
stops at once and its kernels die with their state. This one pauses every session first, as a
release does (``release.Releaser.run``), for at most ``c.PauseServer.shutdown_budget`` seconds,
and only then lets the server stop. A second signal while it pauses is noted and changes nothing:
the budget already bounds the wait. Under JupyterHub a local spawner stops servers with SIGINT,
which the single-user server treats as SIGTERM; that signal is handled the same way.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from ..vocabulary import Trigger

log = logging.getLogger(__name__)


def install(manager: Any, serverapp: Any) -> bool:
    """Handle SIGTERM (and a non-interactive SIGINT) in ``serverapp``'s event loop; whether installed."""
    budget = manager.settings.shutdown_budget
    if budget <= 0:
        return False
    loop = serverapp.io_loop.asyncio_loop
    draining: list[int] = []

    async def drain(signum: int) -> None:
        name = signal.Signals(signum).name
        try:
            if await manager.releaser.stopped_by_hub():
                log.info("jupyter-pause: %s: the Hub is stopping this server after its release", name)
                return
            log.warning("jupyter-pause: %s: pausing every session (up to %g s) before the server stops", name, budget)
            release = manager.releaser.release_on_signal()
            await manager.releaser.run(release, budget=budget, exiting=True)
        finally:
            await manager.recorder.server_stopping(Trigger.SIGTERM)
            serverapp.stop()

    def on_signal(signum: int) -> None:
        if draining:
            log.warning("jupyter-pause: %s again; still pausing sessions", signal.Signals(signum).name)
            return
        draining.append(signum)
        manager.spawn(drain(signum))

    signals = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) == getattr(serverapp, "_signal_stop", None):
        signals.append(signal.SIGINT)  # set so by JupyterHub's single-user server
    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    return True
