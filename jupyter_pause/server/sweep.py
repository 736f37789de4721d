"""Acting on every session at once: pause each (the idle policy, a preemption notice), or checkpoint
each and let it run on (an early warning of a preemption)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from typing import Any

from tornado import web

from ..errors import PauseError
from ..protocol import PauseReply, PauseRequest, call_source, parse_reply
from ..vocabulary import BUSY_STATES, SessionState
from . import cellwait, kernelrun, metrics

log = logging.getLogger(__name__)

#: Seconds between looks at a busy kernel whose cell an early-warning checkpoint waits for.
IDLE_LOOK = 0.5


async def pause_all(manager: Any, trigger: str, only_idle_for: float | None = None) -> list[str]:
    """Pause every notebook with a running kernel (idle ones only, when ``only_idle_for`` is set)."""
    paused = []
    now = datetime.datetime.now(datetime.timezone.utc)
    for model in await manager.notebooks_running():
        if only_idle_for is not None:
            kernel = manager.kernels.get_kernel(model["kernel"]["id"])
            last = getattr(kernel, "last_activity", None)
            state = getattr(kernel, "execution_state", "")
            if state != "idle" or last is None or (now - last).total_seconds() < only_idle_for:
                continue
        try:
            await manager.pause(model["path"], trigger=trigger)
            paused.append(model["path"])
        except (web.HTTPError, PauseError) as e:
            log.warning("jupyter-pause: could not pause %s (%s): %s", model["path"], trigger, e)
    return paused


async def checkpoint_all(manager: Any, trigger: str, why: str, stop: asyncio.Event) -> dict[str, str]:
    """Checkpoint every notebook with a running kernel and leave it running; what became of each
    (its path: the checkpoint, or why none was taken).

    A running cell is waited for, never stopped; the wait ends when ``stop`` is set (the notice
    itself came: its pause checkpoints the session instead)."""
    models = await manager.notebooks_running()
    done = await asyncio.gather(*(_checkpoint(manager, m, trigger, why, stop) for m in models))
    return {m["path"]: outcome for m, outcome in zip(models, done, strict=True)}


async def _checkpoint(manager: Any, model: dict[str, Any], trigger: str, why: str, stop: asyncio.Event) -> str:
    path, kernel_id = model["path"], model["kernel"]["id"]
    session = manager.session_name(path)
    if kernel_id not in manager.kernels:
        return "not taken: its kernel is gone"
    process = kernelrun.process_of(manager.kernels, kernel_id)
    try:
        if not await cellwait.ended(manager.kernels, kernel_id, process, "while its cell ran", IDLE_LOOK, stop.is_set):
            return "not taken: the notice came while its cell ran"
    except kernelrun.KernelDied:
        return "not taken: its kernel is gone"
    current = manager.board.local.get(session)
    if current is not None and current.state in BUSY_STATES:
        return f"not taken: it is {current.state}"
    # The kernelspec too: a resume elsewhere, should this node be lost, starts the same one.
    fields = {"path": path, "kernel": model["kernel"].get("name") or None}
    await manager.change_state(
        session, SessionState.CHECKPOINTING, f"checkpoint on {why}; the kernel keeps running", **fields
    )
    started = time.time()
    unsaved = await manager.shared.save(path)  # the notebook as collaborators hold it, in the file the kernel reads
    try:
        output = await kernelrun.execute(
            manager.kernels,
            kernel_id,
            call_source(PauseRequest(session, trigger)),
            manager.settings.checkpoint_timeout,
            process,
        )
        reply = parse_reply(output, PauseReply)
    except PauseError as e:
        metrics.checkpointed(trigger, ok=False)
        log.warning("jupyter-pause: the checkpoint of %s on %s failed: %s", path, why, e)
        failed = f"the checkpoint on {why} failed: {e}; the kernel keeps running"
        await manager.change_state(session, SessionState.READY, failed)
        return f"failed: {e}"
    metrics.checkpointed(trigger, True, time.time() - started, reply.bytes)
    detail = f"checkpoint {reply.checkpoint} taken on {why}; the kernel keeps running{unsaved}"
    await manager.change_state(session, SessionState.READY, detail)
    return reply.checkpoint
