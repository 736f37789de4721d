"""Pulling a paused session's notebook from the store into this server's root (another node), on
request or where a resume finds it missing."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from tornado import web

from ..errors import CheckpointDamaged, CheckpointNotFound, PauseError
from ..store.integrity import fetch
from .http import MAX_PATH, checked_path, http_error, maybe_await


async def pulled_if_missing(manager: Any, path: Any) -> str:
    """``path``, checked; a notebook missing here (a fresh pod without a persistent volume) is
    first pulled from its session's newest checkpoint."""
    checked = checked_path(path, 'give the notebook\'s path, relative to the server root, as "path"')
    if not await maybe_await(manager.contents.file_exists(checked)):
        try:
            await pull(manager, manager.session_name(checked), checked)
        except web.HTTPError as e:
            if e.status_code != 404:
                raise
            missing = f"{checked} is not on this server, and no checkpoint holds it: {e.log_message}"
            raise http_error(404, missing) from None
    return checked


async def pull(manager: Any, session: Any, path: Any = None, overwrite: bool = False) -> dict[str, Any]:
    """Copy a session's notebook (from its newest checkpoint) into this server's root."""
    if not isinstance(session, str) or not session:
        raise http_error(400, 'give the session to pull as "session"')
    if path is not None and (not isinstance(path, str) or len(path) > MAX_PATH):
        raise http_error(400, f'"path" must be a notebook path of at most {MAX_PATH} characters')
    try:  # with a signing key, only a checkpoint it signed (the same rule as a resume)
        manifest = await asyncio.to_thread(manager.catalog.resolve, session, "latest", manager.config.keyring)
    except CheckpointDamaged as e:
        raise http_error(409, str(e)) from e
    except (CheckpointNotFound, PauseError) as e:
        raise http_error(404, str(e)) from e
    if manifest.session != session:  # the listing refuses such a checkpoint; never write another session's notebook
        raise http_error(409, f"checkpoint {manifest.id} is of session {manifest.session!r}, not {session!r}")
    if not manifest.notebook:
        raise http_error(409, f"checkpoint {manifest.id} of {session!r} holds no notebook to pull")
    good, bad = await asyncio.to_thread(fetch, manager.store, manifest, [manifest.notebook["blob"]])
    if bad:
        raise http_error(409, f"the notebook in checkpoint {manifest.id} is damaged: {bad}")
    data = bytes(good[manifest.notebook["blob"]])
    target = (path if isinstance(path, str) and path.strip() else manifest.notebook["path"]).strip("/")
    if manager.session_name(target) != session:
        raise http_error(
            400,
            f"{target} would be session {manager.session_name(target)!r}, not {session!r}: "
            "keep the path the notebook had",
        )
    if await maybe_await(manager.contents.file_exists(target)):
        existing = await maybe_await(manager.contents.get(target, content=True, type="file", format="text"))
        if existing["content"].encode() == data:
            return {"path": target, "session": session, "checkpoint": manifest.id, "written": False}
        if not overwrite:
            raise http_error(409, f'{target} exists here with different content; pass "overwrite": true to replace it')
    await _ensure_folder(manager.contents, os.path.dirname(target))
    content = json.loads(data)
    await manager.shared.write(target, content)  # where collaborators have it open, their views show it at once
    return {"path": target, "session": session, "checkpoint": manifest.id, "written": True}


async def _ensure_folder(contents: Any, folder: str) -> None:
    parts = [p for p in folder.split("/") if p]
    for i in range(1, len(parts) + 1):
        current = "/".join(parts[:i])
        if not await maybe_await(contents.dir_exists(current)):
            await maybe_await(contents.save({"type": "directory"}, current))
