"""Taking a checkpoint: capture the live state, write its data, then commit the manifest last.

``capture`` reads the kernel, ``packing`` plans the array blobs, ``store.writer`` writes them; this
module runs those steps in order (in the foreground, or in a thread for ``checkpoint_async``) and
writes the manifest once every blob is in the store. Both take one ``CheckpointOptions`` (the
documented keywords build it: see ``options``) and hand it to ``capture`` whole."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import units
from ..config import PauseConfig
from ..errors import SerializationError
from ..proof import probe
from ..replay.rebuild import skipped_line
from ..serialize import devicehash, writewatch
from ..serialize.packing import HASH_THREADS
from ..store import pool as blob_pool
from ..store import seals
from ..store.catalog import Catalog
from ..store.manifest import FORMAT, POOL_FORMAT, Manifest, SkippedRecord
from ..store.writer import BlobWriter
from ..vocabulary import Trigger
from . import activity, background, hooks, kernel_events, lineage, staging, travel
from .background import BackgroundCheckpoint
from .capture import Prepared, capture, describe, describe_surroundings, take_keys
from .context import Context, make_context
from .options import CheckpointOptions, with_overrides

__all__ = ["BackgroundCheckpoint", "CheckpointResult", "checkpoint", "checkpoint_async"]


@dataclass
class CheckpointResult:
    """What a checkpoint wrote, for the summary a person reads."""

    manifest: Manifest
    store_url: str
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def skipped(self) -> list[SkippedRecord]:
        return self.manifest.skipped

    def summary(self) -> str:
        """A few lines: id, variables, bytes new vs reused, time, store, what was skipped."""
        m, s = self.manifest, self.manifest.stats
        lines = [
            f"checkpoint {m.id} of session {m.session!r} -> {self.store_url}",
            f"  saved {len(m.variables)} variable(s) in {units.duration(self.seconds)}: "
            f"{units.size(s['bytes_total'])} ({units.size(s['bytes_written'])} new, "
            f"{units.size(s['bytes_reused'])} reused)",
        ]
        if s.get("bytes_kept_on_device"):
            lines.append(
                f"  {units.size(s['bytes_kept_on_device'])} unchanged on its device since the last "
                "checkpoint: not copied"
            )
        if s.get("bytes_referenced"):
            lines.append(f"  {units.size(s['bytes_referenced'])} as loaded from model files: referenced, not copied")
        if s.get("bytes_unread"):
            lines.append(
                f"  {units.size(s['bytes_unread'])} not written since the last checkpoint or resume: known unchanged "
                "without reading it"
            )
        lines += [f"  {note}" for note in self.notes]
        if m.inexact:
            lines.append(f"  named {len(m.inexact)} (saved all the same):")
            types = {v.name: v.type for v in m.variables}
            lines += [f"    {name} ({types.get(name, '?')}): {why}" for name, why in m.inexact.items()]
        if m.elsewhere:
            lines.append(f"  will not come back on another node, or not provably ({len(m.elsewhere)}):")
            lines += [f"    {line}" for line in m.elsewhere]
        if m.skipped:
            lines.append(f"  skipped {len(m.skipped)}:")
            recipes = {r.name: r for r in m.recipes}
            lines += [f"    {skipped_line(r, recipes.get(r.name))}" for r in m.skipped]
        return "\n".join(lines)


def checkpoint(
    names: Iterable[str] | None = None,
    *,
    options: CheckpointOptions | None = None,
    namespace: dict[str, Any] | None = None,
    config: PauseConfig | None = None,
    **overrides: Any,
) -> CheckpointResult:
    """Save the notebook, selected variables, torch state and RNG state to the store.

    Parameters
    ----------
    names
        Variables to save; ``None`` saves the default selection (see ``selection.select``).
        Given, it replaces ``options.names``.
    options
        What to save, where and why (``CheckpointOptions``); default: its defaults.
    namespace
        The variables to save from; default: the interactive namespace.
    config
        Where unset options come from; default: ``PauseConfig()`` (environment, config files).
    **overrides
        Any field of ``CheckpointOptions`` as a keyword, replacing that of ``options``:
        ``store``, ``session``, ``exclude``, ``strict``, ``tag``, ``trigger``.

    Returns
    -------
    CheckpointResult
        The committed manifest and a printable summary.
    """
    request = _asked(names, options, overrides, "checkpoint")
    with background.one_at_a_time, _collector_paused():
        background.wait_for_background()
        with activity.step("checkpointing", "selecting and serialising variables") as step:
            ctx = make_context(store=request.store, session=request.session, config=config, namespace=namespace)
            said = _run_hooks(request, ctx)
            prepared = capture(request, ctx, defer_hashing=True)
            prepared.notes += said
            # The array data goes to the store, hashed on the way, while the rest is described;
            # leaving the block waits for every blob (an error abandons the writing instead).
            with _writer(prepared, step, reused_data_stays=True) as writer:
                writer.reference(prepared.uploads, prepared.algorithm)
                writer.send(prepared.payloads)
                take_keys(prepared, writer.hash_and_send(prepared.unhashed, prepared.algorithm))
                describe(prepared)
                writer.send(prepared.small)
            return _commit(prepared, step, writer)


def checkpoint_async(
    names: Iterable[str] | None = None,
    *,
    options: CheckpointOptions | None = None,
    namespace: dict[str, Any] | None = None,
    config: PauseConfig | None = None,
    **overrides: Any,
) -> BackgroundCheckpoint:
    """Like ``checkpoint``, but return once the state is copied; writing goes on in a thread.

    The caller is blocked while variables are selected, pickled, hashed and the array data the
    store does not hold yet copied to host memory (so later changes cannot leak into the
    checkpoint). The notebook and the environment are read, and the blobs written, in the
    thread. The manifest is committed only after every blob is written; a kill before
    that leaves the previous checkpoint the newest. Another checkpoint started meanwhile waits
    for this one. It takes the arguments of ``checkpoint``.
    """
    request = _asked(names, options, overrides, "checkpoint_async")
    with background.one_at_a_time:
        background.wait_for_background()
        with activity.step("checkpointing", "copying state to host memory") as step, _collector_paused():
            ctx = make_context(store=request.store, session=request.session, config=config, namespace=namespace)
            said = _run_hooks(request, ctx)
            prepared = capture(request, ctx, defer_hashing=False)
            prepared.notes += said
            with _writer(prepared, step).abandoned_on_error() as writer:
                writer.reference(prepared.uploads, prepared.algorithm)
                _copy_what_is_new(prepared, writer)
                writer.send(prepared.payloads)
                describe(prepared, surroundings=False)
        return BackgroundCheckpoint(prepared, lambda p, step: _finish_and_commit(p, step, writer))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while the kernel waits for a checkpoint, as it was
    before afterwards. A checkpoint allocates many short-lived objects, which would set off
    collections; a full one walks every object of the kernel (a loaded model's modules, a
    library's caches: half a second and more), though it frees nothing the checkpoint made.
    Reference counting still frees what a checkpoint drops; cycles wait for the next collection."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _run_hooks(request: CheckpointOptions, ctx: Context) -> list[str]:
    """Call the ``@before_checkpoint`` hooks (within the time limit under SIGTERM and inside loops,
    printing what went wrong where no summary is shown); notes for the summary."""
    limit = hooks.limit_for(request.trigger, ctx.config.hook_time_limit)
    return hooks.run(hooks.BEFORE_CHECKPOINT, ctx.namespace, limit, say=request.trigger != Trigger.MANUAL)


def _asked(
    names: Iterable[str] | None, options: CheckpointOptions | None, overrides: dict[str, Any], where: str
) -> CheckpointOptions:
    """The options of one call: ``options`` (else the defaults), ``names`` and the keywords replacing fields."""
    if names is not None:
        overrides["names"] = names
    return with_overrides(CheckpointOptions, options, overrides, where)


def _copy_what_is_new(p: Prepared, writer: BlobWriter) -> None:
    """For a background write: copy the array data the store lacks out of live memory, so
    later changes cannot reach the checkpoint. Blobs the store holds already are not copied
    (they will not be written). The copies go into one buffer kept from the last background
    checkpoint (``staging``), in parallel threads (NumPy's copy releases the GIL), so the
    kernel waits for only the changed bytes, at memory speed."""
    private = {id(f.data) for f in p.dump.collector.found.values() if f.private}
    writer.look_up(p.payloads)  # the store is asked about every blob at once
    live = [
        key
        for key, data in p.payloads.items()
        if isinstance(data, memoryview) and id(data) not in private and not writer.has(key, len(data))
    ]
    needed = sum(len(p.payloads[k]) for k in live)
    try:
        buffer = staging.take(needed)
    except MemoryError:
        raise SerializationError(
            f"nothing saved: a background checkpoint needs {units.size(needed)} of free host memory to copy "
            "the changed data into; take a synchronous checkpoint (%checkpoint without --async "
            "writes from live memory), or free memory and try again"
        ) from None
    places, offset = {}, 0
    for key in live:
        places[key] = buffer[offset : offset + len(p.payloads[key])]
        offset += len(p.payloads[key])

    def copy(key: str) -> None:
        np.copyto(places[key], np.frombuffer(p.payloads[key], dtype=np.uint8))

    with ThreadPoolExecutor(HASH_THREADS) as pool:
        list(pool.map(copy, live))
    p.payloads.update((key, memoryview(target)) for key, target in places.items())
    p.dump.collector.found.clear()  # nothing may read live memory from here on


def _writer(p: Prepared, step: activity.Activity, reused_data_stays: bool = False) -> BlobWriter:
    step.begin("checkpointing", f"writing to {p.ctx.store.display_url}")
    return BlobWriter(
        catalog=Catalog(p.ctx.store),
        session=p.ctx.session,
        checkpoint_id=p.id,
        created=p.requested,
        progress=step.progress,
        reused_data_stays=reused_data_stays,
    )


def _finish_and_commit(p: Prepared, step: activity.Activity, writer: BlobWriter) -> CheckpointResult:
    """The background thread's part: read the notebook and the environment, write the small
    blobs, wait for every blob, then commit."""
    with writer:
        describe_surroundings(p)
        writer.send(p.small)
    return _commit(p, step, writer)


def _commit(p: Prepared, step: activity.Activity, writer: BlobWriter) -> CheckpointResult:
    """Write the manifest of a checkpoint whose every blob ``writer`` has written: the commit."""
    ctx = p.ctx
    written = writer.written
    catalog = writer.catalog
    blobs = {**{k: len(d) for k, d in p.payloads.items()}, **{k: len(d) for k, d in p.small.items()}}
    manifest = Manifest(
        id=p.id,
        session=ctx.session,
        lineage=p.position.lineage,
        parent=p.position.parent,
        created=p.requested,
        trigger=p.trigger,
        node=ctx.config.node,
        tag=p.tag,
        notebook=p.notebook,
        variables=p.variables,
        imports=p.imports,
        skipped=p.skipped,
        arrays=p.arrays,
        blobs=blobs,
        rng=p.rng,
        checks=p.checks,
        loops=p.loops,
        loop_state=p.loop_state,
        loop_notes=p.loop_notes,
        probe=probe.fingerprint(p.probe_value),
        environment=p.environment,
        process=p.process,
        hash=p.algorithm,
        mid_cell=p.mid_cell,
        settings=p.kept.settings if p.kept else {},
        local_modules=p.kept.local_modules.records if p.kept else [],
        fingerprints=p.device.record(p.arrays) if p.device else {},
        recipes=p.recipes,
        history=p.history,
        inexact=p.rehearsal.inexact,
        elsewhere=p.elsewhere,
        user=seals.this_user(),
        pool=True,
        names=catalog.store.names.key_id,
        session_blobs=writer.session_blobs,
        references=p.references,
        model_files=p.model_files,
        data_files=p.data_files,
        format=FORMAT if p.references else POOL_FORMAT,
    )
    slow = manifest.slow_imports()
    manifest.import_files = {k: v for k, v in (p.kept.import_files if p.kept else {}).items() if k in slow}
    notes = list(p.notes)
    if p.position.new:
        others = {m.lineage for m in catalog.checkpoints(ctx.session)}
        if others:
            notes.append(
                f"session {ctx.session!r} already holds {len(others)} other lineage(s); this "
                f"checkpoint starts lineage {p.position.lineage} and keeps them"
            )
    total = sum(blobs.values())
    manifest.stats = {
        "bytes_total": total,
        "bytes_referenced": sum(manifest.referenced_size(d) for d in manifest.references),  # in model files
        "bytes_written": written,
        "bytes_reused": total - written,
        "bytes_unread": p.unread,  # known unchanged from page flags or write tracking, without hashing them
        "bytes_copied": p.copied,  # brought from devices to host memory
        "bytes_kept_on_device": p.device.kept_bytes if p.device else 0,  # unchanged by fingerprint: not copied
    }
    manifest.timings = {"requested": p.requested, "serialised": p.serialised, "committed": time.time()}
    catalog.commit(manifest, ctx.config.keyring)
    devicehash.remember(ctx.store, manifest)
    writewatch.settle(p.watched, {k: p.arrays[k].blob for k in p.watched.pending})
    blob_pool.remember(ctx.store, manifest)
    kernel_events.committed(ctx.store, manifest, ctx.config.keyring)
    probe.remember(manifest.id, p.probe_value)
    lineage.advance(ctx.store.url, ctx.session, manifest.lineage, manifest.id)
    said = p.unproven + ([travel.short(p.elsewhere)] if p.elsewhere else [])
    step.finish(manifest.id, manifest.created, detail="; ".join(said))  # the widget names them too
    return CheckpointResult(
        manifest=manifest, store_url=ctx.store.display_url, seconds=time.perf_counter() - p.started, notes=notes
    )
