"""Small helpers of the REST layer: errors that reach the client as written, sync-or-async calls."""

from __future__ import annotations

import asyncio
from typing import Any

from tornado import web

#: Longest notebook path accepted from a request (longer ones are refused before any lookup).
MAX_PATH = 4096


class _Error(web.HTTPError):
    """An HTTP error whose message reaches the client as written.

    (tornado's ``log_message`` doubles every ``%`` of a message given without format arguments,
    and jupyter-server's JSON errors send that text: "run %%checkpoint".)
    """

    @property
    def log_message(self) -> str | None:  # type: ignore[override]
        return self._log_message


def http_error(code: int, message: str) -> web.HTTPError:
    """The error the REST API answers with: ``code`` and ``message``, verbatim."""
    return _Error(code, message)


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (contents and session managers may be sync or async)."""
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


def checked_path(path: Any, missing: str) -> str:
    """A notebook path as a client sent it, without its slashes; HTTP 400 with ``missing`` if absent."""
    if not isinstance(path, str) or not path.strip():
        raise http_error(400, missing)
    if len(path) > MAX_PATH:
        raise http_error(400, f"the path is {len(path)} characters long; no notebook path is longer than {MAX_PATH}")
    return path.strip("/")
