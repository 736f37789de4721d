"""This server's JupyterHub, when it runs under one: who it belongs to, and stopping it.

A single-user server spawned by a Hub gets its Hub's API URL, its own API token, its user and
its server name in the environment. On the Hub the GPU belongs to the server (its pod), not to a
kernel, so giving it back means asking the Hub to stop this server, with this server's own token.
That token carries only the scopes of ``c.Spawner.server_token_scopes``; by default stopping
itself is not among them.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass
from typing import Any

from tornado.httpclient import AsyncHTTPClient

#: The scope a server's token needs to stop the server itself.
STOP_SCOPE = "delete:servers!server"

#: What the Hub admin adds when it is missing (the first two are the Hub's defaults).
SCOPES_TO_SET = ["users:activity!user", "access:servers!server", STOP_SCOPE]

#: Seconds a call to the Hub may take.
TIMEOUT = 30.0


@dataclass(frozen=True)
class StopOutcome:
    """How asking the Hub to stop this server went: ``stopped``, ``missing-scope`` or ``hub-refused``."""

    outcome: str
    detail: str


@dataclass(frozen=True)
class Hub:
    """The Hub this server was spawned by."""

    api_url: str
    token: str
    user: str
    server_name: str = ""

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> Hub | None:
        """The Hub named by a spawned server's environment, or None outside a Hub."""
        env = os.environ if environ is None else environ
        names = ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_USER")
        api_url, token, user = (env.get(name, "") for name in names)
        if not (api_url and token and user):
            return None
        return cls(api_url.rstrip("/"), token, user, env.get("JUPYTERHUB_SERVER_NAME", ""))

    def public(self) -> dict[str, Any]:
        """What the status endpoint says about the Hub (never the token)."""
        return {"user": self.user, "server_name": self.server_name}

    @property
    def server_url(self) -> str:
        """The Hub API URL of this server: ``/users/{user}/server``, or ``/servers/{name}`` when named."""
        user = urllib.parse.quote(self.user, safe="")
        if self.server_name:
            return f"{self.api_url}/users/{user}/servers/{urllib.parse.quote(self.server_name, safe='')}"
        return f"{self.api_url}/users/{user}/server"

    @property
    def described(self) -> str:
        return f"{self.user}'s server {self.server_name!r}" if self.server_name else f"{self.user}'s server"

    async def stop_server(self) -> StopOutcome:
        """Ask the Hub to stop this server. The Hub answers once the server has stopped or is
        stopping (it may signal this very process meanwhile: callers record what they need first)."""
        response = await AsyncHTTPClient().fetch(
            self.server_url,
            method="DELETE",
            headers={"Authorization": f"token {self.token}"},
            request_timeout=TIMEOUT,
            raise_error=False,
        )
        if response.code in (202, 204):
            return StopOutcome("stopped", f"the Hub is stopping {self.described}")
        reason = _hub_message(response.body) or (str(response.error) if response.error else f"HTTP {response.code}")
        if response.code == 403:
            return StopOutcome(
                "missing-scope",
                f"the Hub refused to stop {self.described}: its token lacks the scope {STOP_SCOPE!r} ({reason}). "
                f"Ask the Hub admin to add it: c.Spawner.server_token_scopes = {SCOPES_TO_SET!r}",
            )
        return StopOutcome("hub-refused", f"the Hub did not stop {self.described}: {reason} (HTTP {response.code})")


def _hub_message(body: bytes | None) -> str:
    try:
        data = json.loads(body or b"")
    except ValueError:
        return (body or b"").decode(errors="replace")[:200]
    return str(data.get("message", "")) if isinstance(data, dict) else ""
