"""One resume as a whole (restore, run the restore test, write the run report), and the restore
test run on demand against the checkpoint this kernel continues (``verify``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..config import PauseConfig
from ..proof import probe
from ..proof.verdict import Verdict, verify_manifest
from ..store import report as reports
from ..store import signing
from ..store.catalog import Catalog
from ..store.manifest import Manifest
from ..store.report import RunReport
from ..store.signing import Keys
from . import activity, collector, kernel_events, lineage
from .context import make_context
from .options import ResumeOptions
from .restore import ResumeResult, call_options, resume_in


@dataclass
class Cycle:
    """The outcome of ``resume_and_verify``."""

    result: ResumeResult
    verdict: Verdict
    report: RunReport
    report_key: str | None


def resume_and_verify(
    checkpoint: str | None = None,
    *,
    options: ResumeOptions | None = None,
    namespace: dict[str, Any] | None = None,
    config: PauseConfig | None = None,
    moments: dict[str, float | None] | None = None,
    write_report: bool = True,
    record: bool = True,
    **overrides: Any,
) -> Cycle:
    """Resume, prove it, and leave a run report in the store.

    Parameters
    ----------
    checkpoint, options, namespace, config, **overrides
        What to restore and where, as for ``restore.resume``: ``options`` (a ``ResumeOptions``),
        its fields also as keywords (``store``, ``session``, ``only``, ``map_location``, ``overwrite``).
    moments
        What the caller knows of the cycle before this process got involved (``kernel_stopped``,
        ``resume_requested``, ``resources_available``, ``kernel_ready``), for the run report.
    write_report
        Leave the run report in the store.
    record
        Write the resume's moments to the GPU-hours ledger. A server's resume leaves both to
        the server, which writes them from the kernel's reply.

    Returns
    -------
    Cycle
        What the resume restored, the restore test's verdict, and the run report.
    """
    request = call_options(checkpoint, options, overrides, "resume_and_verify")
    known = dict(moments or {})
    known.setdefault("resume_requested", time.time())
    ctx = make_context(store=request.store, session=request.session, config=config, namespace=namespace)
    with collector.paused():  # through the restore test too: it adds nothing for the collector to find
        result = resume_in(ctx, request)
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
        signature=signing.describe(m.signature, ctx.config.keyring),
        loops=list(m.loop_notes),
        moments={
            "checkpoint_requested": m.timings.get("requested"),
            "checkpoint_committed": m.timings.get("committed"),
            **{k: known.get(k) for k in reports.MOMENTS if k in known},
        },
    )
    run.moments = {k: run.moments.get(k) for k in reports.MOMENTS}
    key = reports.write(ctx.store, run) if write_report else None
    if record:
        kernel_events.resumed(ctx.store, run, ctx.config.node, ctx.config.keyring)
    return Cycle(result, verdict, run, key)


def _target(catalog: Catalog, store_url: str, session: str, checkpoint: str | None, key: Keys) -> Manifest:
    """The checkpoint to test against; with a signing ``key``, only one it signed."""
    if checkpoint not in (None, "", "latest"):
        return catalog.resolve(session, checkpoint, key)  # type: ignore[arg-type]
    position = lineage.position(store_url, session)
    if not position.new and position.parent:
        return catalog.resolve(session, position.parent, key)
    return catalog.resolve(session, "latest", key)


def verify(
    checkpoint: str | None = None,
    *,
    store: str | None = None,
    session: str | None = None,
    namespace: dict[str, Any] | None = None,
    config: PauseConfig | None = None,
) -> Verdict:
    """Tell whether this kernel holds a checkpoint's state.

    Parameters
    ----------
    checkpoint
        The checkpoint to test against; default: the one this process took or resumed last,
        else the session's newest.
    store, session
        Override the configured store URL and session name.

    Returns
    -------
    Verdict
        ``kind`` is one of ``restored``, ``partial``, ``fresh`` or ``live``.
    """
    ctx = make_context(store=store, session=session, config=config, namespace=namespace)
    key = ctx.config.keyring
    return verify_manifest(ctx, _target(Catalog(ctx.store), ctx.store.url, ctx.session, checkpoint, key))
