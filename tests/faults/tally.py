"""Counters for the fault-injection suite, printed at the end of the run (see conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

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


#: The one tally of this pytest process (the fixture hands it out; conftest prints it).
TALLY = Tally()


@pytest.fixture(scope="session")
def tally() -> Tally:
    """The session's fault counters."""
    return TALLY
