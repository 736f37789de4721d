"""The preemption watcher: which clouds the settings ask for, polling them, acting on what they say.

A notice pauses every session (once). An early warning (AWS's rebalance recommendation)
checkpoints every session and lets it run on, once per recommendation. A reader that cannot read
its notice is never silent: it says so once at warning level, and the server's status names it
(cloud, state, last error) until it reads again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ...vocabulary import Cloud, Trigger, WatcherState
from .. import sweep
from .aws import Aws
from .azure import Azure
from .fit import Durations, slowest
from .gce import Gce
from .noderecord import Publisher, node_state
from .source import Blind, NoticeSource

log = logging.getLogger(__name__)

#: ``PauseServer.preemption_notices``: find the cloud whose metadata service answers.
AUTO = "auto"
#: The reader of each cloud.
READERS: dict[Cloud, type[NoticeSource]] = {Cloud.AWS: Aws, Cloud.GCE: Gce, Cloud.AZURE: Azure}
#: The setting that gives each cloud's notice address.
URL_SETTINGS: dict[Cloud, str] = {
    Cloud.AWS: "aws_spot_url",
    Cloud.GCE: "gce_preempted_url",
    Cloud.AZURE: "azure_scheduled_events_url",
}


def readers_for(settings: Any) -> tuple[list[NoticeSource], bool]:
    """The readers the settings ask for, and whether ``"auto"`` has yet to choose among them.

    ``preemption_notices`` names a cloud (its URL setting, else the cloud's own address), or
    ``"auto"`` (every cloud, likewise), or nothing: then each cloud whose URL setting is set."""
    notices, timeout = settings.preemption_notices, settings.preemption_timeout

    def reader(cloud: Cloud) -> NoticeSource:
        kind = READERS[cloud]
        return kind(getattr(settings, URL_SETTINGS[cloud]) or kind.default_url, timeout)

    if notices == AUTO:
        return [reader(cloud) for cloud in Cloud], True
    if notices:
        return [reader(Cloud(notices))], False
    return [reader(cloud) for cloud in Cloud if getattr(settings, URL_SETTINGS[cloud])], False


@dataclass
class Watch:
    """One reader and what it knows now."""

    source: NoticeSource
    state: str = WatcherState.WATCHING
    error: str = ""
    #: What went wrong with its early warning, while the notice itself was read.
    trouble: str = ""
    since: float = field(default_factory=time.time)
    polls: int = 0
    noticed: str | None = None
    early: list[str] = field(default_factory=list)

    def move(self, state: str, error: str = "") -> bool:
        """Take ``state`` (and ``error``); whether the state changed."""
        changed = state != self.state
        if changed:
            self.state, self.since = state, time.time()
        self.error = error
        return changed

    def public(self) -> dict[str, Any]:
        """What the status endpoint shows of this watcher."""
        source = self.source
        return {
            "cloud": source.cloud,
            "url": source.url,
            "state": self.state,
            "error": self.error,
            "trouble": self.trouble,
            "since": self.since,
            "polls": self.polls,
            "lead_time": source.lead_time,
            "noticed": self.noticed,
            "early_warnings": list(self.early),
        }


class PreemptionWatcher:
    """Polls the readers; on a notice pauses every session once, on an early warning checkpoints them;
    after each round tells the kernels what it knows (``publisher``; None: it tells no one)."""

    def __init__(
        self, manager: Any, readers: list[NoticeSource], searching: bool, publisher: Publisher | None = None
    ) -> None:
        self.manager = manager
        self.publisher = publisher
        self.candidates = readers if searching else []
        self.watches = [] if searching else [Watch(r) for r in readers]
        self.searching = searching
        #: While ``"auto"`` searches: what each cloud's probe got instead of an answer.
        self.search_error = ""
        self.noticed: str | None = None
        #: Set by a notice: checkpoints of an early warning still waiting for a cell stop waiting.
        self.stop = asyncio.Event()
        self.early_tasks: set[asyncio.Task[Any]] = set()
        self.durations = Durations(manager.catalog)
        self._polling = False
        self._search_said = False

    # -- polling ---------------------------------------------------------------------------

    async def poll(self) -> None:
        """One round: find the cloud (``"auto"``), then read each notice and act on it."""
        if self.noticed is not None or self._polling:
            return
        self._polling = True  # a round slower than the interval is not run twice at once
        try:
            if self.searching:
                await self._search()
            for watch in self.watches:
                await self._read(watch)
                if self.noticed is not None:
                    break
            await self._publish()
        finally:
            self._polling = False

    async def _search(self) -> None:
        misses = await asyncio.gather(*(r.probe() for r in self.candidates))
        found = [r for r, miss in zip(self.candidates, misses, strict=True) if not miss]
        if not found:
            self.search_error = "; ".join(f"{r.cloud}: {miss}" for r, miss in zip(self.candidates, misses, strict=True))
            if not self._search_said:
                self._search_said = True
                log.warning(
                    "jupyter-pause: preemption_notices = auto: no cloud metadata service answered (%s); "
                    "no notice is seen until one does (or set preemption_notices to aws, gce or azure)",
                    self.search_error,
                )
            return
        chosen = found[0]
        self.searching, self.search_error = False, ""
        self.watches = [Watch(chosen)]
        also = f" (so did {', '.join(r.cloud for r in found[1:])}: watching the first)" if found[1:] else ""
        log.info("jupyter-pause: preemption_notices = auto: %s answers at %s%s", chosen.cloud, chosen.url, also)

    async def _read(self, watch: Watch) -> None:
        watch.polls += 1
        try:
            reading = await watch.source.read()
        except Blind as e:
            self._blind(watch, str(e))
            return
        except Exception as e:  # whatever stops a read leaves the watcher blind, and says why
            self._blind(watch, f"{type(e).__name__}: {e}")
            return
        if watch.move(WatcherState.WATCHING) and watch.polls > 1:
            log.info("jupyter-pause: the %s preemption notice at %s reads again", watch.source.cloud, watch.source.url)
        if reading.trouble and reading.trouble != watch.trouble:
            log.warning("jupyter-pause: %s", reading.trouble)
        watch.trouble = reading.trouble
        if reading.early is not None and reading.early not in watch.early:
            self._early(watch, reading.early)
        if reading.notice is not None:
            await self._notice(watch, reading.notice)

    def _blind(self, watch: Watch, error: str) -> None:
        if watch.move(WatcherState.BLIND, error):
            log.warning(
                "jupyter-pause: the %s preemption watcher cannot read its notice, so a preemption would go unseen: %s",
                watch.source.cloud,
                error,
            )

    def _early(self, watch: Watch, early: str) -> None:
        watch.early.append(early)
        why = f"an {watch.source.cloud.upper()} rebalance recommendation ({early})"
        log.warning("jupyter-pause: %s: checkpointing every session, without pausing", why)
        task = self.manager.spawn(sweep.checkpoint_all(self.manager, Trigger.REBALANCE, why, self.stop))
        self.early_tasks.add(task)
        task.add_done_callback(self.early_tasks.discard)

    async def _notice(self, watch: Watch, notice: str) -> None:
        watch.move(WatcherState.NOTICED)
        watch.noticed = self.noticed = notice
        log.warning("jupyter-pause: %s; pausing every session", notice)
        self.stop.set()
        if self.early_tasks:  # a checkpoint under way finishes first: the pause then writes less
            await asyncio.wait(list(self.early_tasks), timeout=self.manager.settings.preemption_grace)
        await sweep.pause_all(self.manager, Trigger.SPOT)

    async def _publish(self) -> None:
        """Write the kernels' record (``noderecord``) if the watchers or the fit changed."""
        if self.publisher is None:
            return
        sessions = [self.manager.session_name(m["path"]) for m in await self.manager.notebooks_running()]
        status = await self.status(sessions)
        self.publisher.publish(node_state(status["watchers"], status["fit"]))

    # -- what the status shows ---------------------------------------------------------------

    def public(self) -> dict[str, Any]:
        """The watchers' cloud, state and last error (``"auto"`` still searching: one, with no cloud)."""
        watches = [w.public() for w in self.watches]
        if self.searching:
            watches = [{"cloud": None, "state": WatcherState.SEARCHING, "error": self.search_error}]
        return {"notices": self.manager.settings.preemption_notices or None, "watchers": watches}

    def fit(self, sessions: list[str]) -> dict[str, Any] | None:
        """Whether the slowest running session's newest checkpoint fits in the shortest lead time
        watched (None: no cloud found yet, or no running session has a checkpoint). Reads the
        store: a session's checkpoints are listed again only when this server changed its state
        since, or after ``fit.REFRESH`` seconds (``Durations``), not at every poll."""
        if not self.watches:
            return None
        shortest = min((w.source for w in self.watches), key=lambda s: s.lead_time)
        states = self.manager.board.local
        changed = {s: states[s].updated for s in sessions if s in states}
        found = slowest(self.durations, sessions, shortest.cloud, shortest.lead_time, changed)
        return found.public() if found is not None else None

    async def status(self, sessions: list[str]) -> dict[str, Any]:
        """``public`` with the ``fit`` of the running ``sessions``."""
        return {**self.public(), "fit": await asyncio.to_thread(self.fit, sessions)}


def watcher_for(manager: Any) -> PreemptionWatcher | None:
    """The watcher the settings ask for; None when they ask for none."""
    readers, searching = readers_for(manager.settings)
    if not readers:
        return None
    watcher = PreemptionWatcher(manager, readers, searching, Publisher())
    log.info(
        "jupyter-pause: preemption notices: %s",
        "auto, probing " + ", ".join(f"{r.cloud} at {r.url}" for r in readers)
        if searching
        else ", ".join(f"{r.cloud} at {r.url}" for r in readers),
    )
    return watcher
