"""One resume as a whole: restore, run the restore test, write the run report."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..config import PauseConfig
from ..store import report as reports
from ..store.report import RunReport
from . import activity, ledger, probe
from .context import make_context
from .restore import ResumeResult, resume_in
from .verdict import Verdict, verify_manifest


@dataclass
class Cycle:
    """The outcome of ``resume_and_verify``."""

    result: ResumeResult
    verdict: Verdict
    report: RunReport
    report_key: str | None


def resume_and_verify(
    checkpoint: str = "latest",
    *,
    store: str | None = None,
    session: str | None = None,
    only: Iterable[str] | None = None,
    map_location: str = "auto",
    namespace: dict[str, Any] | None = None,
    config: PauseConfig | None = None,
    moments: dict[str, float | None] | None = None,
    write_report: bool = True,
    overwrite: bool = False,
) -> Cycle:
    """Resume, prove it, and leave a run report in the store.

    ``moments`` carries what the caller knows of the cycle before this process got involved
    (``kernel_stopped``, ``resume_requested``, ``resources_available``, ``kernel_ready``).
    ``overwrite`` replaces local modules of the notebook that differ from the checkpoint's.
    """
    known = dict(moments or {})
    known.setdefault("resume_requested", time.time())
    ctx = make_context(store=store, session=session, config=config, namespace=namespace)
    result = resume_in(ctx, checkpoint, only, map_location, overwrite)
    known["state_restored"] = time.time()
    # The resume digested what it restored a moment ago; nothing ran since, so reuse those.
    verdict = verify_manifest(ctx, result.manifest, taken=probe.as_restored(result.manifest.id))
    known["verified"] = time.time()
    activity.current.finish(result.manifest.id, result.manifest.created, verdict=verdict.kind, detail=verdict.kind)
    m = result.manifest
    run = RunReport(
        session=m.session,
        checkpoint=m.id,
        lineage=m.lineage,
        verdict=verdict.kind,
        checkpoint_node=m.node,
        resume_node=ctx.config.node,
        trigger=m.trigger,
        bytes=m.stats.get("bytes_total", 0),
        restored=result.restored,
        skipped=result.skipped,
        damaged=result.damaged,
        environment=result.environment,
        details=verdict.details,
        moments={
            "checkpoint_requested": m.timings.get("requested"),
            "checkpoint_committed": m.timings.get("committed"),
            **{k: known.get(k) for k in reports.MOMENTS if k in known},
        },
    )
    run.moments = {k: run.moments.get(k) for k in reports.MOMENTS}
    key = reports.write(ctx.store, run) if write_report else None
    ledger.resumed(ctx.store, run, ctx.config.node)
    return Cycle(result, verdict, run, key)
