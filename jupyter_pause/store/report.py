"""Run reports: one pause/resume cycle, with its verdict and timings, kept beside the checkpoint."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .. import units
from ..errors import IntegrityError
from .layout import report_key, report_prefix
from .storage import Store

#: Moments of a cycle, in order; any may be unknown (None) to whoever writes the report.
MOMENTS = (
    "checkpoint_requested",
    "checkpoint_committed",
    "kernel_stopped",
    "resume_requested",
    "resources_available",
    "kernel_ready",
    "state_restored",
    "verified",
)

#: Derived durations: name -> (from, to); the first known "from" counts.
DURATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "checkpoint": (("checkpoint_requested",), "checkpoint_committed"),
    "paused": (("kernel_stopped", "checkpoint_committed"), "resume_requested"),
    "waiting_for_resources": (("resume_requested",), "resources_available"),
    "kernel_start": (("resources_available", "resume_requested"), "kernel_ready"),
    "restore": (("kernel_ready", "resume_requested"), "state_restored"),
    "verify": (("state_restored",), "verified"),
    "resume_to_next_cell": (("resume_requested",), "verified"),
}


@dataclass
class RunReport:
    """What a person or a program reads about one pause/resume cycle."""

    session: str
    checkpoint: str
    lineage: str
    verdict: str
    checkpoint_node: str
    resume_node: str
    trigger: str
    bytes: int
    restored: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)
    environment: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    moments: dict[str, float | None] = field(default_factory=dict)
    #: How the checkpoint was vouched for (``signing.describe``): signature checked, or unsigned and why that matters.
    signature: str = ""
    #: What a re-run of the checkpoint's cell does with its loops (the manifest's ``loop_notes``).
    loops: list[str] = field(default_factory=list)

    def durations(self) -> dict[str, float | None]:
        """Seconds between the moments that are known."""
        out: dict[str, float | None] = {}
        for name, (starts, end) in DURATIONS.items():
            start = next((self.moments[s] for s in starts if self.moments.get(s) is not None), None)
            stop = self.moments.get(end)
            out[name] = None if start is None or stop is None else round(stop - start, 3)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data, with the derived durations."""
        return {**asdict(self), "durations": self.durations()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunReport:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def text(self) -> str:
        """A readable rendering: verdict, where from and to, and the timings."""
        when = self.moments.get("resume_requested") or self.moments.get("verified") or 0
        lines = [
            f"{self.session}  checkpoint {self.checkpoint}  verdict {self.verdict}",
            f"  from {self.checkpoint_node} to {self.resume_node} on "
            f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(when))} ({self.trigger}), "
            f"{units.size(self.bytes)}, {len(self.restored)} restored, {len(self.skipped)} not",
        ]
        for name, seconds in self.durations().items():
            if seconds is not None:
                lines.append(f"  {name.replace('_', ' '):24} {units.duration(seconds)}")
        lines += [f"  not restored: {n}: {r}" for n, r in self.skipped.items()]
        lines += [f"  passed over: {i}: {why}" for i, why in self.damaged.items()]
        lines += [f"  environment: {d}" for d in self.environment]
        lines += [f"  loops: {note}" for note in self.loops]
        if self.signature:
            lines.append(f"  signature: {self.signature}")
        return "\n".join(lines)


def write(store: Store, report: RunReport) -> str:
    """Store the report beside its checkpoint; returns its key."""
    when = report.moments.get("verified") or time.time()
    key = report_key(report.session, report.checkpoint, when)
    store.write(key, json.dumps(report.to_dict(), indent=1).encode())
    return key


def load(store: Store, session: str) -> list[RunReport]:
    """Every report of ``session``, oldest first."""
    reports = []
    entries = store.list(report_prefix(session))
    for key, data in sorted(store.read_many(entries).items()):
        if isinstance(data, BaseException):
            raise IntegrityError(f"report {key} cannot be read: {data}")
        try:
            body = json.loads(bytes(data))
            if not isinstance(body, dict):
                raise TypeError(f"a JSON {type(body).__name__}, not an object")
            reports.append(RunReport.from_dict(body))
        except (ValueError, TypeError) as e:
            raise IntegrityError(f"report {key} is not a run report: {e}") from e
    return sorted(reports, key=lambda r: r.moments.get("verified") or r.moments.get("resume_requested") or 0)
