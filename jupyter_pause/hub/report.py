"""What the service has seen and done, as its JSON page shows it: the servers of the last check
with the decision on each, the releases, and the servers it left running with the reason."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict
from datetime import datetime
from typing import Any

from .policy import Decision, ServerView
from .release import WARNED, Outcome


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


class Report:
    """The service's record; ``options`` are shown as they are (the settings in force)."""

    def __init__(self, options: dict[str, Any], keep: int = 200) -> None:
        self.options = options
        self.checks = 0
        self.last_check: float | None = None
        self.last_error: str | None = None
        self.servers: dict[str, dict[str, Any]] = {}
        self.released: deque[dict[str, Any]] = deque(maxlen=keep)
        self.skipped: dict[str, dict[str, Any]] = {}
        #: Pending warnings of a release, by server: reason, warned_at, release_at.
        self.warnings: dict[str, dict[str, Any]] = {}
        #: What the service counts for Prometheus (``hub.metrics``), when it serves them.
        self.metrics: Any = None

    def listed(self, servers: list[ServerView]) -> None:
        """The Hub listed these running servers: rows of the others go."""
        labels = {s.label for s in servers}
        self.servers = {label: row for label, row in self.servers.items() if label in labels}

    def record(self, server: ServerView, decision: Decision, outcome: Outcome | None) -> None:
        """One server's decision, and the outcome of its release when one was tried."""
        row = {
            "user": server.user,
            "server_name": server.server_name,
            "profile": server.profile,
            "timeout": decision.timeout,
            "started": _iso(server.started),
            "last_activity": _iso(server.last_activity),
            "action": decision.action,
            "reason": outcome.reason if outcome else decision.reason,
            "detail": outcome.detail if outcome else decision.detail,
        }
        self.servers[server.label] = row
        if self.metrics is not None:
            self.metrics.decided(decision, outcome)
        event = {"user": server.user, "server_name": server.server_name, "profile": server.profile}
        if outcome is not None and outcome.reason == WARNED:
            warning = outcome.warning or {}
            keep = ("reason", "warned_at", "release_at", "idle_for")
            self.warnings[server.label] = {**event, **{k: warning.get(k) for k in keep}}
            return
        if outcome is not None and outcome.released:
            self.released.append({**event, **asdict(outcome)})
            self.skipped.pop(server.label, None)
        elif outcome is not None or decision.reason == "busy":
            kept = (
                asdict(outcome)
                if outcome
                else {"reason": decision.reason, "detail": decision.detail, "at": time.time()}
            )
            self.skipped[server.label] = {**event, **kept}

    def unwarn(self, server: ServerView) -> None:
        """``server``'s warning ended (released, used, restarted): it is no longer pending."""
        self.warnings.pop(server.label, None)

    def checked(self, error: str | None = None) -> None:
        """A check ended (``error``: why it could not list the servers); releases it started may
        still run (their rows say ``releasing`` until they end)."""
        self.checks += 1
        self.last_check = time.time()
        self.last_error = error
        if self.metrics is not None:
            self.metrics.checked(self.last_check, error)

    def as_json(self) -> dict[str, Any]:
        """The page: ``last_check`` in epoch seconds, ``servers`` the Hub listed last, ``released``
        (oldest first), ``skipped`` (the latest reason per server left running), ``warnings``
        (servers warned of a release that has not come yet: reason, warned_at, release_at)."""
        return {
            "options": self.options,
            "checks": self.checks,
            "last_check": self.last_check,
            "last_error": self.last_error,
            "servers": list(self.servers.values()),
            "released": list(self.released),
            "skipped": list(self.skipped.values()),
            "warnings": list(self.warnings.values()),
        }
