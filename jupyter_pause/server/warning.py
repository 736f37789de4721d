"""The warning before an idle release: the Hub's pause service says this server will be released
at ``release_at`` unless it is used, and the server holds that warning for its user to see.

A warning ends in one of three ways: the release comes (``consume``); the user keeps working
(``DELETE`` on the warning, the Keep working button: ``cancel``, which counts as activity); or
the server is used after the warning was given, which cancels it by itself (``current``). Used
means a cell ran, or a request changed something: any authenticated request other than GET and
HEAD (saving a file, starting a kernel, a terminal's input...). Polls do not count: an open
tab that only polls is not someone working. The service asks for the warning again before it
releases: a cancelled one is gone, and it releases nothing.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .http import http_error

log = logging.getLogger(__name__)

#: Longest reason accepted from the service (it is shown to the user as written).
MAX_REASON = 500
#: The paths (under the server's base URL) whose requests are never the user's activity: the
#: warning itself (the service gives it; Keep working is counted on its own), the status polls,
#: and JupyterLab saving its layout (it does so by itself, when a notification shows, say).
NOT_ACTIVITY = ("jupyter-pause/api/release/warning", "jupyter-pause/api/status", "lab/api/workspaces")


@dataclass(frozen=True)
class ReleaseWarning:
    """One pending warning: why the service would release this server, when it said so, and
    when it will release it (seconds since the epoch); ``idle_for`` the idle seconds it saw."""

    reason: str
    warned_at: float
    release_at: float
    idle_for: float | None = None

    def public(self, now: float | None = None) -> dict[str, Any]:
        """The warning as the API shows it, with ``seconds_left`` (the front end counts down from
        it, so a browser's clock that differs from the server's does not matter)."""
        now = time.time() if now is None else now
        return {**asdict(self), "seconds_left": max(0.0, self.release_at - now)}


class Warnings:
    """This server's pending warning, if any, and the last one that ended (and how)."""

    def __init__(self, activity: Callable[[], tuple[float | None, str]]) -> None:
        #: The time of the user's newest activity here (a cell, a request that changed something), and what it was.
        self.activity = activity
        self.pending: ReleaseWarning | None = None
        self.ended: dict[str, Any] | None = None
        #: When the newest request that changed something came, and what it was ("PUT /api/contents/a.ipynb").
        self.last_request: float | None = None
        self.last_request_was = ""

    def give(self, body: dict[str, Any], now: float | None = None) -> ReleaseWarning:
        """Record the service's warning (``{"reason", "release_at", "idle_for"?}``); 400 saying
        what is wrong with a bad one. A new warning replaces the pending one."""
        now = time.time() if now is None else now
        reason, release_at, idle_for = body.get("reason"), body.get("release_at"), body.get("idle_for")
        if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON:
            raise http_error(400, f'"reason" must be a non-empty string of at most {MAX_REASON} characters')
        if not _number(release_at) or release_at < now - 60:
            raise http_error(400, '"release_at" must be the time of the release, in seconds since the epoch, not past')
        if idle_for is not None and (not _number(idle_for) or idle_for < 0):
            raise http_error(400, '"idle_for" must be the seconds the server has been idle (0 or more), or absent')
        idle = None if idle_for is None else float(idle_for)
        self.pending = ReleaseWarning(reason.strip(), now, float(release_at), idle)
        self.ended = None
        return self.pending

    def current(self) -> ReleaseWarning | None:
        """The pending warning, unless the server was used since it was given (then it ends here)."""
        warning = self.pending
        if warning is not None:
            used, how = self.activity()
            if used is not None and used > warning.warned_at:
                self._end("used", f"the server was used after the warning: {how}")
        return self.pending

    def cancel(self) -> ReleaseWarning | None:
        """Keep working: end the pending warning (None when there was none) and count it as activity."""
        warning = self.pending
        self.last_request = time.time()
        if warning is not None:
            self.last_request_was = "Keep working"
            self._end("kept", "Keep working")
        return warning

    def consume(self, trigger: str) -> None:
        """A release started (``trigger``: who asked): the warning, if any, ends here."""
        if self.pending is not None:
            self._end("released", f"released ({trigger})")

    def public(self) -> dict[str, Any] | None:
        """The pending warning as the status model carries it, or None."""
        warning = self.current()
        return warning.public() if warning is not None else None

    def _end(self, how: str, detail: str) -> None:
        self.ended = {**asdict(self.pending), "ended": how, "detail": detail, "at": time.time()}
        self.pending = None
        log.info("jupyter-pause: the warning of a release ended: %s", detail)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def watch_requests(web_app: Any, warnings: Warnings, base_url: str) -> None:
    """Note the time of every authenticated request that changed something (not GET or HEAD,
    not the warning or status endpoints), by wrapping the application's request log."""
    settings = web_app.settings
    original = settings.get("log_function")
    exempt = tuple(base_url.rstrip("/") + "/" + p for p in NOT_ACTIVITY)

    def log_function(handler: Any) -> None:
        request = handler.request
        if (
            request.method not in ("GET", "HEAD", "OPTIONS")
            and handler.get_status() < 400
            and not request.path.startswith(exempt)
            and getattr(handler, "_jupyter_current_user", None)
        ):
            warnings.last_request = time.time()
            warnings.last_request_was = f"{request.method} {request.path}"
        if original is not None:
            original(handler)
        else:
            web_app.log_request(handler)

    settings["log_function"] = log_function
