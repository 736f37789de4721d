"""Asynchronous clients of the Hub's REST API and of users' servers (reached through the proxy),
each call answered as an ``Answer`` (a connection error is code 599, as tornado reports it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ..errors import PauseError
from ..vocabulary import Trigger
from .policy import ServerView

#: Asks the Hub for pages ({"items", "_pagination"}) instead of a bare list.
PAGINATION = "application/jupyterhub-pagination+json"


class HubError(PauseError):
    """The Hub's API refused or failed a call the service cannot go on without."""


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: its code and its body (parsed JSON, the text otherwise)."""

    code: int
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.code < 300

    def reason(self) -> str:
        """The error a person reads: the JSON ``message`` when there is one."""
        if isinstance(self.body, dict) and self.body.get("message"):
            return f"{self.code}: {self.body['message']}"
        return f"{self.code}: {str(self.body)[:200]}"


async def fetch(
    url: str, token: str, method: str = "GET", body: Any = None, timeout: float = 30, **headers: str
) -> Answer:
    """One call with ``Authorization: token ...``; errors become answers, never exceptions."""
    data = None if body is None else json.dumps(body)
    if data is None and method in ("POST", "PUT", "PATCH"):
        data = ""  # tornado wants a body on these
    headers = {"Authorization": f"token {token}", **headers}
    request = HTTPRequest(
        url, method=method, body=data, headers=headers, request_timeout=timeout, follow_redirects=False
    )
    try:
        response = await AsyncHTTPClient().fetch(request)
    except HTTPClientError as e:
        if e.response is None:
            return Answer(e.code, str(e))
        response = e.response
    except OSError as e:
        return Answer(599, f"{url}: {e}")
    text = (response.body or b"").decode(errors="replace")
    try:
        return Answer(response.code, json.loads(text) if text else None)
    except json.JSONDecodeError:
        return Answer(response.code, text)


def parse_time(text: str | None) -> datetime | None:
    """A Hub timestamp (ISO 8601, ``Z`` for UTC) as an aware datetime; None stays None."""
    return datetime.fromisoformat(text) if text else None


class HubClient:
    """The Hub's REST API with the service's token (``api_url`` such as http://hub:8081/hub/api)."""

    def __init__(self, api_url: str, token: str, page_size: int = 200) -> None:
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.page_size = page_size

    def _url(self, path: str, **query: Any) -> str:
        return f"{self.api_url}/{path}" + (f"?{urlencode(query)}" if query else "")

    async def servers(self) -> list[ServerView]:
        """Every running server (``GET /users?state=active``, page by page)."""
        views: list[ServerView] = []
        offset = 0
        while True:
            url = self._url("users", state="active", offset=offset, limit=self.page_size)
            answer = await fetch(url, self.token, Accept=PAGINATION)
            if not answer.ok:
                raise HubError(
                    f"listing users at {url} failed ({answer.reason()}); the service's role needs list:users"
                )
            page = answer.body
            users = page["items"] if isinstance(page, dict) else page
            for user in users:
                views.extend(_views(user))
            following = page.get("_pagination", {}).get("next") if isinstance(page, dict) else None
            if not following:
                return views
            offset = following["offset"]

    async def server(self, user: str, server_name: str) -> dict[str, Any] | None:
        """The Hub's model of one running server; None once it is stopped."""
        answer = await fetch(self._url(f"users/{quote(user, safe='')}"), self.token)
        if answer.code == 404:
            return None
        if not answer.ok:
            raise HubError(f"reading user {user} failed ({answer.reason()})")
        return answer.body.get("servers", {}).get(server_name)

    async def stop(self, user: str, server_name: str) -> Answer:
        """Ask the Hub to stop a server (needs delete:servers); 202 or 204 when it accepts."""
        path = f"users/{quote(user, safe='')}/" + (
            f"servers/{quote(server_name, safe='')}" if server_name else "server"
        )
        return await fetch(self._url(path), self.token, "DELETE")


def _views(user: dict[str, Any]) -> list[ServerView]:
    if "servers" not in user:
        raise HubError(f"the Hub lists user {user.get('name')} without servers: the service's role needs read:servers")
    return [
        ServerView(
            user=user["name"],
            server_name=name,
            url=server["url"],
            ready=bool(server.get("ready")),
            pending=server.get("pending"),
            started=parse_time(server.get("started")),
            last_activity=parse_time(server.get("last_activity")),
            user_options=server.get("user_options") or {},
        )
        for name, server in user["servers"].items()
    ]


class ServerClient:
    """A user's server through the proxy (``proxy_url`` such as http://proxy-public), with the
    service's token: the single-user server accepts it when the service has access:servers."""

    def __init__(self, proxy_url: str, token: str) -> None:
        self.proxy_url = proxy_url.rstrip("/")
        self.token = token

    def _url(self, server: ServerView, path: str) -> str:
        return f"{self.proxy_url}{server.url.rstrip('/')}/{path}"

    async def kernels(self, server: ServerView) -> Answer:
        """``GET api/kernels``: each kernel's ``execution_state``."""
        return await fetch(self._url(server, "api/kernels"), self.token)

    async def release(self, server: ServerView, trigger: str = Trigger.SERVICE) -> Answer:
        """``POST jupyter-pause/api/release``: 202 with the Release, 409 when one is under way,
        404 where the server has no jupyter_pause extension."""
        return await fetch(self._url(server, "jupyter-pause/api/release"), self.token, "POST", {"trigger": trigger})

    async def warn(self, server: ServerView, reason: str, release_at: float, idle_for: float | None) -> Answer:
        """``POST jupyter-pause/api/release/warning``: 201 with the warning; 404 (or 405) where the
        server's jupyter_pause takes no warnings (an older version) or is not there at all."""
        body = {"reason": reason, "release_at": release_at, "idle_for": idle_for}
        return await fetch(self._url(server, "jupyter-pause/api/release/warning"), self.token, "POST", body)

    async def warning(self, server: ServerView) -> Answer:
        """``GET jupyter-pause/api/release/warning``: the pending warning, or null once it ended."""
        return await fetch(self._url(server, "jupyter-pause/api/release/warning"), self.token)

    async def status(self, server: ServerView) -> Answer:
        """``GET jupyter-pause/api/status``: the server's sessions and its current release."""
        return await fetch(self._url(server, "jupyter-pause/api/status"), self.token)
