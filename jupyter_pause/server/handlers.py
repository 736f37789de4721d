"""REST handlers: ``/jupyter-pause/api/{pause,resume,status,release,release/warning,sessions,pull}``."""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from ..vocabulary import Trigger
from .http import http_error
from .orchestrator import PauseManager

AUTH_RESOURCE = "jupyter_pause"


class _Base(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def pause(self) -> PauseManager:
        return self.settings["jupyter_pause"]

    def body(self) -> dict[str, Any]:
        data = self.get_json_body()  # 400 on malformed JSON
        if not isinstance(data, dict):
            raise http_error(400, "the request body must be a JSON object")
        return data

    def reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data))


class PauseHandler(_Base):
    """POST ``{"path"}``: checkpoint the notebook's kernel, then shut it down."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body()
        status = await self.pause.pause(body.get("path"), trigger=Trigger.BUTTON)
        self.reply(status.public(), 202)


class ResumeHandler(_Base):
    """POST ``{"path", "checkpoint", "map_location", "force", "allow_partial", "kernel_name"}``: wait
    for resources, start the session's kernelspec (or the one ``kernel_name`` picks), restore, verify."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body()
        force, partial = body.get("force", False), body.get("allow_partial", False)
        if not isinstance(force, bool) or not isinstance(partial, bool):
            raise http_error(400, '"force" and "allow_partial" must be true or false')
        status = await self.pause.resume(
            body.get("path"),
            body.get("checkpoint", "latest"),
            body.get("map_location"),
            force,
            partial,
            body.get("kernel_name"),
        )
        self.reply(status.public(), 202)


class StatusHandler(_Base):
    """GET ``?path=``: the session's state, detail, checkpoint, verdict, time of the last change.
    GET without a path: this server's status, with the progress of its newest release."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        path = self.get_query_argument("path", None)
        if path is None:
            self.reply(await self.pause.overview())
            return
        status = await self.pause.status(path)
        self.reply(status.public())


class ReleaseHandler(_Base):
    """POST ``{"trigger"?}``: pause every session, then have the Hub stop this server."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body() if self.request.body else {}
        release = self.pause.releaser.start(body.get("trigger", Trigger.BUTTON))
        self.reply(release.public(), 202)


class ReleaseWarningHandler(_Base):
    """The pause service's warning before it releases this server (see ``warning``).

    GET: the pending warning, or null. POST ``{"reason", "release_at", "idle_for"?}`` (the
    service): warn. DELETE: keep working: the warning ends and the request counts as activity; the
    kernel culler's warning ends too, and its kernels' idle time starts again.
    """

    #: Reading the warning is not using the server (the front end polls it).
    _track_activity = False

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.reply(self.pause.warnings.public())

    @web.authenticated
    @authorized
    async def post(self) -> None:
        warning = self.pause.warnings.give(self.body())
        self.reply(warning.public(), 201)

    @web.authenticated
    @authorized
    async def delete(self) -> None:
        ended = self.pause.warnings.cancel()
        culler = getattr(self.pause, "culler", None)
        kept = culler.keep_working() if culler is not None else None
        self.reply({"cancelled": ended.public() if ended is not None else kept})


class SessionsHandler(_Base):
    """GET: every session in the store, paused ones from other nodes too."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.reply(
            {
                "sessions": await self.pause.sessions(),
                "node": self.pause.config.node,
                "resume_on_open": self.pause.settings.resume_on_open,
            }
        )


class PullHandler(_Base):
    """POST ``{"session", "path"?, "overwrite"?}``: copy a paused session's notebook here."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body()
        overwrite = body.get("overwrite", False)
        if not isinstance(overwrite, bool):
            raise http_error(400, '"overwrite" must be true or false')
        self.reply(await self.pause.pull(body.get("session"), body.get("path"), overwrite))


def routes(base_url: str) -> list[tuple[str, type[APIHandler]]]:
    """URL patterns of the extension under the server's base URL."""
    api = url_path_join(base_url, "jupyter-pause", "api")
    return [
        (url_path_join(api, "pause"), PauseHandler),
        (url_path_join(api, "resume"), ResumeHandler),
        (url_path_join(api, "status"), StatusHandler),
        (url_path_join(api, "release"), ReleaseHandler),
        (url_path_join(api, "release", "warning"), ReleaseWarningHandler),
        (url_path_join(api, "sessions"), SessionsHandler),
        (url_path_join(api, "pull"), PullHandler),
    ]
