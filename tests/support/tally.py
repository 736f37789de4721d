"""Counters for the fault-injection suite, printed at the end of the run (see conftest.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pytest


@dataclass
class Tally:
    """What the fault tests did: faults injected, resumes tried and succeeded, data lost."""

    faults: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    resumes_attempted: int = 0
    resumes_succeeded: int = 0
    committed_checked: int = 0
    #: Committed checkpoints that failed verification, and their bytes: must stay 0.
    committed_lost: int = 0
    bytes_lost: int = 0
    skipped: list[str] = field(default_factory=list)

    def fault(self, kind: str, n: int = 1) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + n

    def outcome(self, kind: str, n: int = 1) -> None:
        self.outcomes[kind] = self.outcomes.get(kind, 0) + n

    def resumed(self, ok: bool) -> None:
        self.resumes_attempted += 1
        self.resumes_succeeded += bool(ok)

    def lost(self, count: int, nbytes: int) -> None:
        self.committed_lost += count
        self.bytes_lost += nbytes

    def ran(self) -> bool:
        """Whether any fault test counted anything in this process."""
        return bool(self.faults or self.skipped or self.resumes_attempted)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def add(self, other: dict[str, Any]) -> None:
        """Add another process's counts (a test worker's ``to_dict``) to these."""
        for kind, n in other["faults"].items():
            self.fault(kind, n)
        for kind, n in other["outcomes"].items():
            self.outcome(kind, n)
        self.resumes_attempted += other["resumes_attempted"]
        self.resumes_succeeded += other["resumes_succeeded"]
        self.committed_checked += other["committed_checked"]
        self.lost(other["committed_lost"], other["bytes_lost"])
        self.skipped += other["skipped"]

    def lines(self) -> list[str]:
        total = sum(self.faults.values())
        out = [
            f"faults injected: {total}"
            + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) + ")" if total else ""),
            f"resumes attempted: {self.resumes_attempted}",
            f"resumes succeeded: {self.resumes_succeeded}",
            f"committed checkpoints verified after faults: {self.committed_checked}",
            f"bytes lost: {self.bytes_lost} (committed checkpoints failing verify: {self.committed_lost})",
        ]
        if self.outcomes:
            out.append("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())))
        out += [f"not run: {reason}" for reason in self.skipped]
        return out


#: The one tally of this pytest process (the fixture hands it out; tests/conftest.py gathers the
#: test workers' and prints it).
TALLY = Tally()


@pytest.fixture(scope="session")
def tally() -> Tally:
    """The session's fault counters."""
    return TALLY
