"""Pausing without a click: the idle policy and the cloud preemption watcher (both off by default)."""

from __future__ import annotations

from typing import Any

from tornado.ioloop import PeriodicCallback

from ..vocabulary import Trigger
from .preemption import watcher_for
from .stopping import when_stopping
from .sweep import pause_all

__all__ = ["pause_all", "start_watchers"]


def start_watchers(manager: Any) -> list[PeriodicCallback]:
    """Start the watchers the settings turn on; returns their callbacks. ``manager.preemption`` is
    the preemption watcher (None when off)."""
    settings = manager.settings
    started = []
    if settings.idle_pause_after > 0:
        idle = PeriodicCallback(
            lambda: pause_all(manager, Trigger.IDLE, only_idle_for=settings.idle_pause_after),
            settings.idle_check_interval * 1000,
        )
        idle.start()
        started.append(idle)
    manager.preemption = watcher_for(manager)
    if manager.preemption is not None:
        if manager.preemption.publisher is not None:
            # a server that dies without stopping leaves a node record its kernels ignore
            when_stopping(manager.serverapp, manager.preemption.publisher.remove)
        poll = PeriodicCallback(manager.preemption.poll, settings.preemption_poll_interval * 1000)
        poll.start()
        started.append(poll)
    manager.watchers = started
    return started
