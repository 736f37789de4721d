"""SIGTERM: pause every session within a budget, then let the server exit.

Kubernetes stops a pod (eviction, a spot node reclaimed, ``kubectl delete``) by sending SIGTERM
to the server and SIGKILL ``terminationGracePeriodSeconds`` later. jupyter-server's own handler
stops at once and its kernels die with their state. This one pauses every session first, as a
release does (``release.Releaser.run``), for at most ``c.PauseServer.shutdown_budget`` seconds,
and only then lets the server stop. A second signal while it pauses is noted and changes nothing:
the budget already bounds the wait.

Under JupyterHub a local spawner (``LocalProcessSpawner``, ``SudoSpawner``, ``SystemdSpawner``'s
default) stops a server with SIGINT: from the control panel, an admin, the Hub's idle culler or the
Hub's own shutdown. That signal is handled the same way, so a server the Hub stops keeps its
sessions as a pod deleted under KubeSpawner does. Only after a release, which paused everything
and asked the Hub for the stop, does the signal stop the server without pausing again. Without
this handler SIGINT would reach jupyter-server's "Shut down this server?" prompt where a terminal
made it install one, or raise KeyboardInterrupt and end the server with its kernels' state.

A server stopped by a signal exits, even where a library left a thread that is no daemon and never
ends: jupyter-collaboration's rooms leave AnyIO worker threads that only their never-finished root
task would stop, and the interpreter then waits for them until the spawner kills it (a Hub showed
such a server "pending stop" for a minute). ``exit_when_stopped`` gives them ``EXIT_GRACE`` seconds
after the server's main thread is done, then ends the process, naming them in the log.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from ..vocabulary import Trigger

log = logging.getLogger(__name__)

#: Seconds a stopped server's process waits for threads that are not daemons before it exits.
EXIT_GRACE = 5.0


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
            exit_when_stopped()
            serverapp.stop()

    def on_signal(signum: int) -> None:
        if draining:
            log.warning("jupyter-pause: %s again; still pausing sessions", signal.Signals(signum).name)
            return
        draining.append(signum)
        manager.spawn(drain(signum))

    signals = [signal.SIGTERM]
    if manager.releaser.hub is not None:
        signals.append(signal.SIGINT)  # a Hub's stop signal (see the module's text)
    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    return True


def exit_when_stopped(grace: float = EXIT_GRACE) -> threading.Thread:
    """Watch, from a daemon thread, for the main thread to finish (the server stopped and cleaned
    up); give the threads that would hold the process ``grace`` seconds, then end it without them."""
    main = threading.main_thread()

    def watch() -> None:
        main.join()  # returns once the interpreter is shutting down
        waiting = _holding()
        for thread in waiting:
            thread.join(grace / len(waiting))
        if left := _holding():
            names = ", ".join(sorted({t.name for t in left}))
            log.warning(
                "jupyter-pause: the server stopped; exiting without %d thread(s) that never end: %s", len(left), names
            )
            logging.shutdown()
            os._exit(0)

    watcher = threading.Thread(target=watch, name="jupyter-pause exit watch", daemon=True)
    watcher.start()
    return watcher


def _holding() -> list[threading.Thread]:
    """The live threads the interpreter waits for at exit (not daemons), but for the main one."""
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]
