"""Which servers to release: pure decisions over what the Hub and the server say (no I/O).

A server is released when its user is selected, it is ready, and either the Hub's last activity
is older than its idle timeout (the timeout of its profile when it has one) or, with a maximum
age, it started longer ago than that. Even then it is kept while one of its kernels is busy: a
running cell is never idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ..units import seconds

#: Reasons a server is kept (``Decision.reason``).
EXCLUDED = "excluded"
PENDING = "pending"
ACTIVE = "active"
BUSY = "busy"
#: Warned: it is released at the warning's ``release_at`` unless it is used before.
WARNED = "warned"
#: Its warning ended on the server (it was used, or its user chose Keep working).
WARNING_ENDED = "warning-ended"
#: Reasons a server is released.
IDLE = "idle"
MAX_AGE = "max-age"

#: Kernel execution states that mean a cell is running.
RUNNING_STATES = frozenset({"busy"})

Action = Literal["keep", "check-kernels", "release"]


@dataclass(frozen=True)
class Policy:
    """The service's options that decide: timeouts in seconds, the users it looks after."""

    idle_timeout: float = 3600.0
    max_age: float = 0.0
    profile_timeouts: Mapping[str, float] = field(default_factory=dict)
    users: frozenset[str] = frozenset()
    exclude_users: frozenset[str] = frozenset()

    def selects(self, user: str) -> bool:
        """Whether ``user``'s servers are this service's to release (``users`` empty: everybody's)."""
        return (not self.users or user in self.users) and user not in self.exclude_users

    def timeout_for(self, profile: str | None) -> float:
        """The idle timeout of a server started with ``profile`` (None: none)."""
        if profile is not None and profile in self.profile_timeouts:
            return self.profile_timeouts[profile]
        return self.idle_timeout


@dataclass(frozen=True)
class ServerView:
    """One server as the Hub's API shows it (``server_name`` "" is the default server)."""

    user: str
    server_name: str
    url: str
    ready: bool
    pending: str | None
    started: datetime | None
    last_activity: datetime | None
    user_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``user`` or ``user/name``, as a person writes a server."""
        return f"{self.user}/{self.server_name}" if self.server_name else self.user

    @property
    def profile(self) -> str | None:
        """The profile the server was started with: ``user_options["profile"]`` (as KubeSpawner's
        profile list writes it), None without one."""
        value = self.user_options.get("profile") if self.user_options else None
        return str(value) if value not in (None, "") else None


@dataclass(frozen=True)
class Decision:
    """What to do with one server and why: ``check-kernels`` means the Hub's view alone would
    release it, and only a busy kernel can still keep it."""

    action: Action
    reason: str
    detail: str
    timeout: float
    #: Seconds without activity the Hub showed (an ``idle`` decision's), None otherwise.
    idle_for: float | None = None


def first_look(policy: Policy, server: ServerView, now: datetime) -> Decision:
    """Decide from the Hub's view alone (the server is not asked)."""
    timeout = policy.timeout_for(server.profile)
    if not policy.selects(server.user):
        return Decision("keep", EXCLUDED, f"{server.user} is not among the users this service releases", timeout)
    if server.pending or not server.ready:
        state = f"{server.pending} pending" if server.pending else "not ready"
        return Decision("keep", PENDING, f"{server.label}'s server is {state}", timeout)
    age = (now - server.started).total_seconds() if server.started else None
    if policy.max_age and age is not None and age > policy.max_age:
        detail = f"started {age:.0f} s ago, over the maximum age of {policy.max_age:.0f} s"
        return Decision("check-kernels", MAX_AGE, detail, timeout)
    since = server.last_activity or server.started
    if since is None:
        return Decision("keep", ACTIVE, "the Hub has no activity or start time for it", timeout)
    idle_for = (now - since).total_seconds()
    if idle_for <= timeout:
        return Decision("keep", ACTIVE, f"last active {idle_for:.0f} s ago (timeout {timeout:.0f} s)", timeout)
    return Decision(
        "check-kernels", IDLE, f"no activity for {idle_for:.0f} s (timeout {timeout:.0f} s)", timeout, idle_for
    )


def busy_kernels(kernels: Iterable[Mapping[str, Any]]) -> list[str]:
    """Ids of the kernels running a cell, from a server's ``GET api/kernels`` answer."""
    return [str(k.get("id")) for k in kernels if k.get("execution_state") in RUNNING_STATES]


def after_kernels(decision: Decision, kernels: Iterable[Mapping[str, Any]]) -> Decision:
    """The final decision for a ``check-kernels`` one, once the server listed its kernels."""
    if decision.action != "check-kernels":
        return decision
    busy = busy_kernels(kernels)
    if busy:
        detail = f"{decision.detail}, but {len(busy)} kernel(s) run a cell ({', '.join(busy)})"
        return Decision("keep", BUSY, detail, decision.timeout)
    return Decision("release", decision.reason, decision.detail, decision.timeout, decision.idle_for)


def parse_profile_timeouts(values: Iterable[str]) -> dict[str, float]:
    """``["gpu=900", "cpu=2h"]`` as ``{"gpu": 900.0, "cpu": 7200.0}``; ``ValueError`` naming a
    malformed entry."""
    timeouts: dict[str, float] = {}
    for value in values:
        name, sep, written = value.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--profile-timeout {value!r}: write PROFILE=SECONDS, e.g. gpu=900 or gpu=15m")
        timeouts[name.strip()] = seconds(written)
    return timeouts


def parse_users(text: str | None) -> frozenset[str]:
    """A comma list of user names as a set (empty or None: the empty set)."""
    return frozenset(name.strip() for name in (text or "").split(",") if name.strip())
