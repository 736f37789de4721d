"""Releasing one idle server: ask it for its kernels, warn it (``warn_before``), ask it to release
(pause every session, then stop itself through the Hub), follow the release to its end, and say
what happened.

With a warning, the release is two steps apart: the first check that finds the server idle
warns it (``release_at`` is ``warn_before`` later) and releases nothing; a later check asks the
server for its warning (``after_warning``) and releases only when it is still pending and due.
The server ends a warning itself when it is used, or when its user chooses Keep working. A
server whose jupyter_pause takes no warnings (an older version: 404) is released at once, and
the outcome says so.

A server is only ever stopped by its own release, or by the service after a release that paused
every session (``stop_paused``). A server without the extension, or whose release fails, keeps
running.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any

from .. import units
from ..vocabulary import RELEASE_ACTIVE_STATES, ReleaseState, SessionState
from . import policy
from .hubapi import Answer, HubClient, ServerClient
from .policy import Decision, ServerView

#: Outcomes (``Outcome.reason``) besides the policy's reasons to keep a server.
RELEASED = "released"
PAUSED_NOT_STOPPED = "paused-not-stopped"
NO_EXTENSION = "no-extension"
RELEASE_FAILED = "release-failed"
RELEASE_TIMEOUT = "release-timeout"
UNREACHABLE = "unreachable"
DRY_RUN = "dry-run"
#: Not released yet: warned, and released at the warning's ``release_at`` unless it is used.
WARNED = policy.WARNED

#: The hint for a missing scope.
SCOPE_HINT = (
    "add delete:servers!server to c.Spawner.server_token_scopes so a server can stop itself, "
    "or run jupyter-pause-hub with --stop-paused"
)


@dataclass
class Outcome:
    """What the service did with one server, as its JSON page shows it."""

    reason: str
    detail: str
    release: dict[str, Any] | None = None
    at: float = field(default_factory=time.time)
    #: The warning the server holds (``WARNED``), as it answered.
    warning: dict[str, Any] | None = None

    @property
    def released(self) -> bool:
        return self.reason == RELEASED


@dataclass(frozen=True)
class Settings:
    """How a release is followed: ``timeout`` for the whole release, polled ``every`` seconds;
    ``warn_before`` seconds of warning before it (0: none; never more than the server's timeout)."""

    stop_paused: bool = False
    dry_run: bool = False
    timeout: float = 600.0
    every: float = 0.2
    warn_before: float = 0.0


async def handle(
    server: ServerView, decision: Decision, hub: HubClient, servers: ServerClient, settings: Settings
) -> tuple[Decision, Outcome | None]:
    """Check the kernels of a ``check-kernels`` server and release it if none is busy; the final
    decision, and the outcome of the release (None when there was none)."""
    listed = await servers.kernels(server)
    if not listed.ok or not isinstance(listed.body, list):
        detail = f"{server.label}'s server did not list its kernels ({listed.reason()}); left running"
        return decision, Outcome(UNREACHABLE, detail)
    final = policy.after_kernels(decision, listed.body)
    if final.action != "release":
        return final, None
    if settings.dry_run:
        return final, Outcome(DRY_RUN, f"would release {server.label}'s server: {final.detail}")
    if settings.warn_before > 0:
        return final, await warn(server, final, hub, servers, settings)
    return final, await release(server, hub, servers, settings)


async def warn(
    server: ServerView, decision: Decision, hub: HubClient, servers: ServerClient, settings: Settings
) -> Outcome:
    """Warn ``server`` that it will be released in ``warn_before`` seconds (at most its timeout);
    a server whose jupyter_pause takes no warnings is released now, and the outcome says so."""
    seconds = min(settings.warn_before, decision.timeout)
    idle_for = decision.idle_for
    reason = (
        f"idle for {units.duration(idle_for)}"
        if decision.reason == policy.IDLE and idle_for is not None
        else decision.detail
    )
    answer = await servers.warn(server, reason, time.time() + seconds, idle_for)
    if answer.ok and isinstance(answer.body, dict):
        at = _clock(answer.body.get("release_at"))
        detail = f"{server.label}: warned ({reason}); released at {at} unless used before"
        return Outcome(WARNED, detail, warning=answer.body)
    if answer.code in (404, 405):
        outcome = await release(server, hub, servers, settings)
        if outcome.reason != NO_EXTENSION:
            outcome.detail += f" (released without a warning: its jupyter_pause takes none, {answer.reason()})"
        return outcome
    return Outcome(UNREACHABLE, f"{server.label}'s server could not be warned ({answer.reason()}); left running")


async def after_warning(
    server: ServerView, warned: dict[str, Any], hub: HubClient, servers: ServerClient, settings: Settings
) -> tuple[Decision, Outcome | None, bool]:
    """A later check of a warned server: keep it while its warning is pending and not due, keep
    it when the warning ended (it was used), release it when the warning is due. The decision,
    the outcome of the release (None without one), and whether the warning still holds."""
    timeout = float(warned.get("timeout") or 0.0)
    answer = await servers.warning(server)
    given = _clock(warned.get("warned_at"))
    if (answer.ok and answer.body is None) or answer.code == 404:
        detail = f"its warning of {given} ended on the server: it was used, or its user chose Keep working"
        return Decision("keep", policy.WARNING_ENDED, detail, timeout), None, False
    if not answer.ok or not isinstance(answer.body, dict):
        detail = f"warned at {given}; its warning could not be read ({answer.reason()}); asking again at the next check"
        return Decision("keep", WARNED, detail, timeout), None, True
    pending = answer.body
    release_at = pending.get("release_at")
    if isinstance(release_at, int | float) and time.time() < release_at:
        detail = f"warned at {given}; released at {_clock(release_at)} unless used before"
        return Decision("keep", WARNED, detail, timeout), None, True
    due = Decision(
        "check-kernels", str(warned.get("reason_kind") or policy.IDLE), f"warned at {given}, not used since", timeout
    )
    final, outcome = await handle(server, due, hub, servers, replace(settings, warn_before=0.0))
    return final, outcome, False


def _clock(moment: Any) -> str:
    """A time of day in UTC, as a page and a log show it."""
    if not isinstance(moment, int | float):
        return "an unknown time"
    return time.strftime("%H:%M:%S UTC", time.gmtime(moment))


async def release(server: ServerView, hub: HubClient, servers: ServerClient, settings: Settings) -> Outcome:
    """Release ``server`` and follow the release until it leaves pausing/stopping."""
    asked = await servers.release(server)
    if asked.code == 404:
        detail = (
            f"{server.label}'s server has no jupyter_pause extension (404 on jupyter-pause/api/release); left running"
        )
        return Outcome(NO_EXTENSION, detail)
    if not asked.ok and asked.code != 409:  # 409: a release is already under way; follow that one
        return Outcome(RELEASE_FAILED, f"{server.label}'s server refused the release ({asked.reason()}); left running")
    last: dict[str, Any] | None = asked.body if asked.ok and isinstance(asked.body, dict) else None
    deadline = time.monotonic() + settings.timeout
    while last is None or last.get("state") in RELEASE_ACTIVE_STATES:
        if time.monotonic() > deadline:
            state = last.get("state") if last else "unknown"
            detail = f"{server.label}'s release was still {state} after {settings.timeout:.0f} s; left as it is"
            return Outcome(RELEASE_TIMEOUT, detail, last)
        await asyncio.sleep(settings.every)
        current = _release_of(await servers.status(server))
        if current is not None:
            last = current
        elif await _gone(hub, server):
            return _went_away(server, last)
    return await _settle(server, last, hub, settings)


def _went_away(server: ServerView, last: dict[str, Any] | None) -> Outcome:
    """The server stopped before the release was seen to end. A release asks the Hub to stop the
    server only once every session is paused, and the proxy drops the server's route as soon as
    the Hub starts stopping it, so the last state seen is often still "pausing"."""
    state = last.get("state") if last else "starting"
    where = f"releases/{last['id']}.json in the store" if last and last.get("id") else "the store"
    detail = f"{server.label}: the server stopped during its release (last seen {state}); its record is {where}"
    return Outcome(RELEASED, detail, last)


def _release_of(answer: Answer) -> dict[str, Any] | None:
    if answer.ok and isinstance(answer.body, dict) and isinstance(answer.body.get("release"), dict):
        return answer.body["release"]
    return None


async def _gone(hub: HubClient, server: ServerView) -> bool:
    model = await hub.server(server.user, server.server_name)
    return model is None or model.get("pending") == "stop"


async def _settle(server: ServerView, last: dict[str, Any], hub: HubClient, settings: Settings) -> Outcome:
    """The outcome of a release that ended in ``last``."""
    state, said = last.get("state"), last.get("detail") or ""
    if state == ReleaseState.STOPPED:
        return Outcome(RELEASED, f"{server.label}: every session paused; the server stopped itself", last)
    if state == ReleaseState.PAUSED:
        missing_scope = last.get("server_stop") == "missing-scope"
        if settings.stop_paused:
            stopped = await hub.stop(server.user, server.server_name)
            if stopped.ok:
                detail = f"{server.label}: every session paused; the service stopped the server ({said})"
                return Outcome(RELEASED, detail, last)
            detail = f"{server.label}: every session paused, but the Hub refused to stop it ({stopped.reason()})"
            return Outcome(PAUSED_NOT_STOPPED, detail, last)
        hint = SCOPE_HINT if missing_scope else "run jupyter-pause-hub with --stop-paused to stop it from the service"
        detail = (
            f"{server.label}: every session paused, but the server still runs ({said.rstrip('.')}). To stop it: {hint}"
        )
        return Outcome(PAUSED_NOT_STOPPED, detail, last)
    failed = [
        f"{s.get('path')}: {s.get('detail')}" for s in last.get("sessions", []) if s.get("state") == SessionState.FAILED
    ]
    detail = f"{server.label}'s release failed ({said}{'; ' if failed else ''}{'; '.join(failed)}); left running"
    return Outcome(RELEASE_FAILED, detail, last)
