"""A seeded week of ledger records: several users and sessions on GPUs under a 30-minute idle
policy, with the truth the records were made from (for tests and the README's screenshot).

``week(seed)`` returns a ``History``: ``records`` (plain dicts in the ledger's format, in time
order) and, per session, the intervals it really held its GPUs, was busy and was paused, the
moments its user arrived, and each measured resume wait.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

#: Monday 2026-11-16 00:00 UTC: the demo week starts here.
START = 1_794_787_200.0
DAY = 86400.0
#: The idle threshold the demo's "current policy" pauses after.
CURRENT_IDLE = 1800.0
#: Resume wait of the demo: WAIT_A + WAIT_B * bytes, plus noise.
WAIT_A, WAIT_B = 8.0, 6e-9


@dataclass
class Truth:
    """What really happened to one session, as the generator decided it."""

    gpus: int
    size: int
    held: list[tuple[float, float]] = field(default_factory=list)
    paused: list[tuple[float, float]] = field(default_factory=list)
    active: list[tuple[float, float]] = field(default_factory=list)
    arrivals: list[tuple[float, float]] = field(default_factory=list)  # (arrival, end of that span)
    waits: list[float] = field(default_factory=list)
    exists: tuple[float, float] = (0.0, 0.0)


@dataclass
class History:
    """The records and the truth behind them."""

    records: list[dict[str, Any]]
    truth: dict[str, Truth]
    start: float
    end: float


SESSIONS = (  # session, user, GPU model, GPUs, checkpoint size, works on weekends
    ("ana-train", "ana", "NVIDIA H100 80GB HBM3", 2, 9_000_000_000, False),
    ("ana-eval", "ana", "NVIDIA H100 80GB HBM3", 1, 1_500_000_000, False),
    ("ben-llm", "ben", "NVIDIA A100-SXM4-80GB", 4, 30_000_000_000, True),
    ("chen-vision", "chen", "NVIDIA A100-SXM4-80GB", 1, 600_000_000, False),
    ("dana-rl", "dana", "NVIDIA L40S", 1, 2_000_000_000, False),
)


class _Session:
    def __init__(self, rng: random.Random, name: str, user: str, model: str, gpus: int, size: int, server: str | None):
        self.rng, self.name, self.size = rng, name, size
        self.base = {"v": 1, "session": name, "user": user, "node": f"gpu-{sum(map(ord, user)) % 9 + 1:02d}"}
        self.base |= {"server": server, "gpu_model": model, "gpus": gpus}
        self.records: list[dict[str, Any]] = []
        self.truth = Truth(gpus, size)
        self.pending: list[list[float]] = []
        self.held_since: float | None = None
        self.last_end = 0.0

    def emit(self, event: str, at: float, **fields: Any) -> None:
        self.records.append({**self.base, "event": event, "at": at, **fields})

    def start(self, at: float) -> None:
        self.emit("kernel_started", at)
        self.held_since, self.last_end = at, at
        self.truth.exists = (at, at)

    def pause(self, at: float, trigger: str = "idle") -> None:
        self.emit("activity", at - 0.5, spans=self.pending)
        self.pending = []
        self.emit("pause_requested", at, trigger=trigger)
        self.emit("checkpoint_committed", at + 3, bytes=self.size // 10, bytes_total=self.size, checkpoint="c")
        self.emit("kernel_stopped", at + 4, trigger=trigger)
        self.truth.held.append((self.held_since, at + 4))
        self.paused_at = at + 4

    def resume(self, arrival: float) -> float:
        """The user asks for the session back at ``arrival``; when the first cell runs."""
        wait = WAIT_A + WAIT_B * self.size + self.rng.uniform(0, 4)
        self.emit("resume_requested", arrival)
        self.emit("resources_available", arrival + 1)
        self.emit("kernel_started", arrival + 2)
        self.emit("kernel_ready", arrival + wait - 1, bytes=self.size)
        self.emit("next_cell_run", arrival + wait)
        self.truth.paused.append((self.paused_at, arrival + 2))
        self.truth.waits.append(wait)
        self.held_since = arrival + 2
        return arrival + wait

    def work(self, arrival: float, duration: float) -> None:
        """The user arrives at ``arrival`` and runs a cell for ``duration``."""
        begin = arrival
        if self.held_since is None:
            begin = self.resume(arrival)
        elif arrival - self.last_end > CURRENT_IDLE:
            self.pause(self.last_end + CURRENT_IDLE)
            self.held_since = None
            begin = self.resume(arrival)
        end = begin + duration
        self.pending.append([begin, end])
        self.truth.active.append((begin, end))
        self.truth.arrivals.append((arrival, end))
        self.last_end = end

    def finish(self, at: float, end: float, stop: bool) -> None:
        """At ``at`` the user is done: the kernel stops for good (``stop``, if it is running) or is
        left as it is; the records end at ``end``."""
        if self.held_since is not None and at - self.last_end > CURRENT_IDLE:
            self.pause(self.last_end + CURRENT_IDLE)
            self.held_since = None
        if self.pending:
            self.emit("activity", self.last_end + 0.5, spans=self.pending)
        if self.held_since is None:  # paused: released until the records end (or a resume)
            self.truth.paused.append((self.paused_at, end))
            self.truth.exists = (self.truth.exists[0], end)
        elif stop:
            self.emit("kernel_stopped", at)
            self.truth.held.append((self.held_since, at))
            self.truth.exists = (self.truth.exists[0], at)
        else:
            self.truth.held.append((self.held_since, end))
            self.truth.exists = (self.truth.exists[0], end)


def _day(rng: random.Random, s: _Session, day: float) -> None:
    t = day + rng.uniform(8.5, 10.5) * 3600
    leave = day + rng.uniform(17, 19.5) * 3600
    lunch = day + rng.uniform(12, 13) * 3600
    while t < leave:
        s.work(t, rng.choice([rng.uniform(20, 300), rng.uniform(300, 1500), rng.uniform(1500, 5400)]))
        gap = rng.choice([rng.uniform(30, 600)] * 4 + [rng.uniform(600, 2400), rng.uniform(2400, 7200)])
        if s.last_end < lunch <= s.last_end + gap + 1:
            gap += rng.uniform(2700, 4500)
            lunch = float("inf")
        t = s.last_end + gap


def week(seed: int = 3, start: float = START, days: int = 7) -> History:
    """A week of records for five sessions of four users; ``seed`` decides everything else."""
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    truth: dict[str, Truth] = {}
    end = start + days * DAY
    for i, (name, user, model, gpus, size, weekends) in enumerate(SESSIONS):
        server = "dana/gpu" if user == "dana" else None  # the Hub's label: user/name
        s = _Session(random.Random(rng.random()), name, user, model, gpus, size, server)
        if server:
            records.append({**s.base, "session": None, "event": "server_started", "at": start + 7.5 * 3600})
        s.start(start + (8 + i * 0.25) * 3600)
        for d in range(days):
            if d % 7 < 5 or weekends:
                _day(s.rng, s, start + d * DAY)
        s.finish(s.last_end + 600 if i == 3 else end, end, stop=(i == 3))
        records += s.records
        truth[name] = s.truth
    records.sort(key=lambda r: r["at"])
    return History(records, truth, start, end)


def write(store: Any, history: History) -> None:
    """Put every record of ``history`` into ``store``'s ledger, as the ledger itself writes them."""
    from jupyter_pause import ledger

    for record in history.records:
        assert ledger.write(store, ledger.Event.from_dict(record)) is not None
