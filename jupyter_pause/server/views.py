"""What the status and sessions endpoints show: this server as a whole, and every stored session."""

from __future__ import annotations

import asyncio
from typing import Any

from . import lease


async def overview(manager: Any) -> dict[str, Any]:
    """This server's status: its node, store and lease protocol, its Hub, the notebooks with a
    kernel here now, and the newest release."""
    running = [
        {
            "path": m["path"],
            "session": manager.session_name(m["path"]),
            "kernel_state": m["kernel"].get("execution_state"),
        }
        for m in await manager.notebooks_running()
    ]
    hub = manager.releaser.hub
    current = manager.releaser.current
    return {
        "node": manager.config.node,
        "store": manager.store.display_url,
        "lease": await asyncio.to_thread(lease.protocol, manager.store),
        "hub": hub.public() if hub else None,
        "resume_on_open": manager.settings.resume_on_open,
        "sessions": running,
        "release": current.public() if current else None,
    }


def session_rows(manager: Any) -> list[dict[str, Any]]:
    """Every session in the store (from any node) with its state and newest checkpoint."""
    rows = []
    for session in manager.catalog.sessions():
        checkpoints = manager.catalog.checkpoints(session)
        status = manager.board.get(session)
        newest = checkpoints[0] if checkpoints else None
        rows.append(
            {
                "session": session,
                "state": status.state if status else ("paused" if newest else "ready"),
                "detail": status.detail if status else "",
                "path": (status.path if status and status.path else None)
                or ((newest.notebook or {}).get("path") if newest else None),
                "node": newest.node if newest else (status.node if status else None),
                "checkpoint": newest.id if newest else None,
                "created": newest.created if newest else None,
                "bytes": newest.stats.get("bytes_total", 0) if newest else 0,
                "updated": status.updated if status else None,
                # paused by a release: its server was stopped after (come back on any node)
                "release": status.release if status and status.state == "paused" else None,
            }
        )
    return rows
