"""What the status and sessions endpoints show: this server as a whole, and every stored session."""

from __future__ import annotations

import asyncio
from typing import Any

from ..store.catalog import Listing
from ..vocabulary import SessionState
from . import accounting, lease


async def overview(manager: Any) -> dict[str, Any]:
    """This server's status: its node, store and lease protocol, its Hub, the notebooks with a
    kernel here now, the newest release, the pending warning (the pause service's, else the kernel
    culler's; or None), and the preemption watcher's state (or None when it is off)."""
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
    watcher = getattr(manager, "preemption", None)
    culler = getattr(manager, "culler", None)
    return {
        "node": manager.config.node,
        "store": manager.store.display_url,
        "lease": await asyncio.to_thread(lease.protocol, manager.store),
        "hub": hub.public() if hub else None,
        "resume_on_open": manager.settings.resume_on_open,
        "sessions": running,
        "release": current.public() if current else None,
        # the pause service's warning before a release, else the kernel culler's before its pauses
        "warning": manager.warnings.public() or (culler.warning() if culler is not None else None),
        "warning_ended": manager.warnings.ended,
        # the preemption watchers (cloud, state, last error) and whether a pause fits the notice
        "preemption": await watcher.status([r["session"] for r in running]) if watcher is not None else None,
    }


def session_rows(manager: Any) -> list[dict[str, Any]]:
    """Every session in the store (from any node) with its state and newest intact checkpoint;
    damaged checkpoints are listed (``damaged``: checkpoint, why) and named in ``detail``; a paused
    session has ``paused_since`` and ``gpu_hours_released`` (``accounting.paused``)."""
    rows = []
    for session in manager.catalog.sessions():
        status = manager.board.get(session)
        listing = manager.resume_listing(session, status)  # what a resume of "latest" would use
        checkpoints = listing.checkpoints
        newest = checkpoints[0] if checkpoints else None
        rows.append(
            {
                "session": session,
                "state": status.state if status else (SessionState.PAUSED if newest else SessionState.READY),
                "detail": "; ".join(
                    filter(
                        None,
                        [status.detail if status else "", status.ignored if status else "", damage_detail(listing)],
                    )
                ),
                "path": (status.path if status and status.path else None)
                or ((newest.notebook or {}).get("path") if newest else None),
                "node": newest.node if newest else (status.node if status else None),
                "checkpoint": newest.id if newest else None,
                "created": newest.created if newest else None,
                "bytes": newest.stats.get("bytes_total", 0) if newest else 0,
                "updated": status.updated if status else None,
                # paused by a release: its server was stopped after (come back on any node)
                "release": status.release if status and status.state == SessionState.PAUSED else None,
                "damaged": [{"checkpoint": i, "why": why} for i, why in listing.damaged.items()],
                "paused_since": None,
                "gpu_hours_released": None,
            }
        )
    paused = {r["session"]: r["updated"] or r["created"] for r in rows if r["state"] == SessionState.PAUSED}
    released = accounting.paused(manager.ledger, paused) if paused else {}
    for row in rows:
        if row["session"] in released:
            row["paused_since"], row["gpu_hours_released"] = released[row["session"]]
    return rows


def damage_detail(listing: Listing) -> str:
    """What a reader of the session should know of its damaged checkpoints: those newer than the
    newest intact one (a resume skips them), or that every one is damaged; "" otherwise."""
    newest = listing.checkpoints[0] if listing.checkpoints else None
    newer = listing.newer_damaged(newest)
    if not newer:
        return ""
    named = "; ".join(f"checkpoint {i} is damaged: {why}" for i, why in newer.items())
    if newest is None:
        return f"every checkpoint is damaged: {named}"
    return f"{named}; a resume uses {newest.id}, the newest intact checkpoint"
