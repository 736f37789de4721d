"""Taking a checkpoint: select, serialise, write data, then commit the manifest last."""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Iterable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .. import units
from ..config import PauseConfig
from ..errors import SelectionError, SerializationError
from ..store import mapping, signing
from ..store.catalog import Catalog
from ..store.layout import new_checkpoint_id
from ..store.manifest import (
    ArrayRecord,
    BlobRef,
    Manifest,
    SkippedRecord,
    VariableRecord,
)
from ..store.storage import ALIGNMENT
from ..store.writer import BlobWriter
from . import (
    activity,
    background,
    fingerprint,
    lineage,
    modelcheck,
    probe,
    rng,
    staging,
)
from .background import BackgroundCheckpoint
from .context import make_context
from .digests import Known, remember, value_digest
from .notebook import read_notebook, relative_path
from .pickler import DumpResult, dump_variables
from .selection import select, type_name

#: Arrays at least this large get a blob of their own; smaller ones share packed blobs.
OWN_BLOB_BYTES = 1 << 20
#: Size at which a pack of small arrays is closed.
PACK_BYTES = 16 << 20

#: Threads hashing array blobs at once.
HASH_THREADS = min(8, os.cpu_count() or 1)

#: Variables whose pickled form is larger than this get no value digest (their blobs' checksums
#: still cover them); digesting a huge object graph in Python would cost more than saving it.
DIGEST_MAX_SEGMENT_BYTES = 4 << 20

#: Longest tag accepted (it lives in the manifest, read by every listing).
MAX_TAG = 1000

TRIGGERS = ("manual", "button", "sigterm", "spot", "periodic", "idle", "drill")


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
        if s.get("bytes_unread"):
            lines.append(
                f"  {units.size(s['bytes_unread'])} untouched since the resume: known unchanged without reading it"
            )
        lines += [f"  {note}" for note in self.notes]
        if m.skipped:
            lines.append(f"  skipped {len(m.skipped)}:")
            lines += [f"    {r.name} ({r.type}): {r.reason}" for r in m.skipped]
        return "\n".join(lines)


@dataclass(kw_only=True)
class Request:
    """What ``checkpoint`` was asked to save, and how (its arguments, as given)."""

    names: Iterable[str] | None
    store: str | None
    session: str | None
    exclude: Iterable[str]
    strict: bool
    tag: str | None
    trigger: str
    namespace: dict[str, Any] | None
    config: PauseConfig | None


@dataclass(kw_only=True)
class ArrayPlan:
    """Where each collected array goes, and the blobs that hold them (see ``_plan_arrays``)."""

    arrays: dict[str, ArrayRecord]  # by array key; ``blob`` stays empty while unhashed
    payloads: dict[str, Any]  # blob key -> the bytes to write
    known: Known  # xxh3 digests of whole storages, reused by the value digests
    unread: int  # bytes known unchanged since a resume, without reading them
    unhashed: dict[str, Any]  # array key -> data left for the writer to hash as it writes it


@dataclass(kw_only=True)
class Prepared:
    """Everything a checkpoint needs once the kernel may go on: pickled, copied, described."""

    ctx: Any
    id: str
    started: float
    requested: float
    serialised: float
    trigger: str
    tag: str | None
    dump: DumpResult
    values: dict[str, Any]
    skipped: list[SkippedRecord]
    imports: dict[str, str]
    arrays: dict[str, ArrayRecord]
    payloads: dict[str, Any]
    known: Known
    rng: BlobRef
    algorithm: str
    position: lineage.Position
    models: Future[dict[str, Any]]
    unread: int
    unhashed: dict[str, Any]
    # filled in by ``_describe``
    variables: list[VariableRecord] = field(default_factory=list)
    small: dict[str, Any] = field(default_factory=dict)
    checks: BlobRef | None = None
    probe_value: str = ""
    notebook: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    process: dict[str, Any] = field(default_factory=dict)


def _kind(value: Any) -> str:
    """What a variable is, named by protocol rather than by class: module, optimizer, stateful..."""
    if isinstance(value, type):
        return "class"
    try:
        if modelcheck.is_module(value):
            return "module"
        if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
            if hasattr(value, "param_groups"):
                return "optimizer"
            if hasattr(value, "optimizer") and hasattr(value, "last_epoch"):
                return "scheduler"
            if callable(getattr(value, "get_scale", None)):
                return "scaler"
            return "stateful"
        if type(value).__module__ == "torch" and hasattr(value, "untyped_storage"):
            return "tensor"
    except Exception:  # an object that raises on attribute access is still saved; just unnamed
        return "object"
    return "object"


def _model_checks(modules: dict[str, Any]) -> dict[str, Any]:
    """Per module, its recorded forward pass (or why there is none)."""
    models: dict[str, Any] = {}
    for name, module in modules.items():
        check = modelcheck.record(module)
        models[name] = asdict(check) if isinstance(check, modelcheck.ModelCheck) else {"none": check}
    return models


def _start_model_checks(values: dict[str, Any], saved: Iterable[str]) -> Future[dict[str, Any]]:
    """Record the model checks in a thread, beside the hashing (a forward pass releases the
    GIL). Started only once everything is pickled: a check puts modules in eval mode for a
    moment, which a pickle taken meanwhile would keep."""
    modules = {
        n: values[n] for n in saved if _kind(values[n]) == "module" and any(True for _ in values[n].parameters())
    }
    pool = ThreadPoolExecutor(1, thread_name_prefix="jupyter-pause-check")
    try:
        return pool.submit(_model_checks, modules)
    finally:
        pool.shutdown(wait=False)


def _unwritten_blob(found: Any, algorithm: str) -> str | None:
    """The key of the blob ``found`` was mapped from by a resume, if not a byte of it changed."""
    if found.origin is None or found.origin[0] != "cpu" or found.private:
        return None
    return mapping.unchanged_blob(found.origin[1], found.origin[2], algorithm)


def _plan_arrays(dump: DumpResult, algorithm: str, defer: bool = False) -> ArrayPlan:
    """Give every collected array a blob: its own when large, a shared pack when small.

    Large arrays are hashed in parallel (both digest algorithms release the GIL), except those
    still exactly as a resume mapped them from their blob, and, with ``defer``, those left for
    the writer to hash as it writes them. For xxh3 checkpoints the plan also holds the digests
    of whole storages, which the value digests reuse instead of reading those bytes again.
    """
    records: dict[str, ArrayRecord] = {}
    payloads: dict[str, Any] = {}
    known: Known = {}
    pack: list[tuple[str, memoryview]] = []
    pack_size = 0
    large = [(k, f) for k, f in dump.collector.found.items() if len(f.data) >= OWN_BLOB_BYTES]
    # Cheap first: memory a resume mapped from a blob, and nothing wrote since, is that blob.
    keys = {k: unread for k, f in large if (unread := _unwritten_blob(f, algorithm)) is not None}
    unknown = [(k, f) for k, f in large if k not in keys]
    unread = sum(len(f.data) for k, f in large if k in keys)
    deferred = {k: f.data for k, f in unknown} if defer else {}
    if not defer:
        with ThreadPoolExecutor(HASH_THREADS) as pool:
            digests = pool.map(lambda kf: signing.digest(kf[1].data, algorithm), unknown)
            keys.update(zip((k for k, _ in unknown), digests, strict=True))

    def close_pack() -> None:
        nonlocal pack, pack_size
        if not pack:
            return
        data = bytearray(pack_size)
        for array_key, view in pack:
            offset = records[array_key].offset
            data[offset : offset + len(view)] = view
        key = signing.digest(data, algorithm)
        payloads[key] = data
        for array_key, _ in pack:
            records[array_key].blob = key
        pack, pack_size = [], 0

    for array_key, found in dump.collector.found.items():
        size = len(found.data)
        record = ArrayRecord(
            kind=found.kind,
            dtype=found.dtype,
            shape=found.shape,
            device=found.device,
            blob="",  # set once hashed, here or by the writer
            offset=0,
            nbytes=size,
            order=found.order,
        )
        records[array_key] = record
        if array_key in deferred:
            continue  # hashed while it is written: see ``_take_keys``
        if array_key in keys:
            record.blob = keys[array_key]
            payloads[record.blob] = found.data
            remember(known, found.origin, record.blob, algorithm)
            continue
        record.offset = -pack_size % ALIGNMENT + pack_size  # aligned as torch aligns its own
        pack.append((array_key, found.data))
        pack_size = record.offset + size
        if pack_size >= PACK_BYTES:
            close_pack()
    close_pack()
    return ArrayPlan(arrays=records, payloads=payloads, known=known, unread=unread, unhashed=deferred)


def checkpoint(
    names: Iterable[str] | None = None,
    *,
    store: str | None = None,
    session: str | None = None,
    exclude: Iterable[str] = (),
    strict: bool = False,
    tag: str | None = None,
    trigger: str = "manual",
    namespace: dict[str, Any] | None = None,
    config: PauseConfig | None = None,
) -> CheckpointResult:
    """Save the notebook, selected variables, torch state and RNG state to the store.

    Parameters
    ----------
    names
        Variables to save; ``None`` saves the default selection (see ``selection.select``).
    store, session
        Override the configured store URL and session name.
    exclude
        Glob patterns of variable names to leave out.
    strict
        Fail, writing nothing, if any selected variable cannot be saved.
    tag
        Free text stored with the checkpoint.
    trigger
        Why the checkpoint was taken: one of ``TRIGGERS``.

    Returns
    -------
    CheckpointResult
        The committed manifest and a printable summary.
    """
    request = Request(
        names=names,
        store=store,
        session=session,
        exclude=exclude,
        strict=strict,
        tag=tag,
        trigger=trigger,
        namespace=namespace,
        config=config,
    )
    with background.one_at_a_time:
        background.wait_for_background()
        with activity.step("checkpointing", "selecting and serialising variables") as step:
            prepared = _capture(request, defer_hashing=True)
            # The array data goes to the store, hashed on the way, while the rest is described;
            # leaving the block waits for every blob (an error abandons the writing instead).
            with _writer(prepared, step, reused_data_stays=True) as writer:
                writer.send(prepared.payloads)
                _take_keys(prepared, writer.hash_and_send(prepared.unhashed, prepared.algorithm))
                _describe(prepared)
                writer.send(prepared.small)
            return _commit(prepared, step, writer)


def checkpoint_async(
    names: Iterable[str] | None = None,
    *,
    store: str | None = None,
    session: str | None = None,
    exclude: Iterable[str] = (),
    strict: bool = False,
    tag: str | None = None,
    trigger: str = "manual",
    namespace: dict[str, Any] | None = None,
    config: PauseConfig | None = None,
) -> BackgroundCheckpoint:
    """Like ``checkpoint``, but return once the state is copied; writing goes on in a thread.

    The caller is blocked while variables are selected, pickled, hashed and the array data the
    store does not hold yet copied to host memory (so later changes cannot leak into the
    checkpoint). The manifest is committed only after every blob is written; a kill before
    that leaves the previous checkpoint the newest. Another checkpoint started meanwhile waits
    for this one.
    """
    request = Request(
        names=names,
        store=store,
        session=session,
        exclude=exclude,
        strict=strict,
        tag=tag,
        trigger=trigger,
        namespace=namespace,
        config=config,
    )
    with background.one_at_a_time:
        background.wait_for_background()
        with activity.step("checkpointing", "copying state to host memory") as step:
            prepared = _capture(request, defer_hashing=False)
            with _writer(prepared, step).abandoned_on_error() as writer:
                _copy_what_is_new(prepared, writer)
                writer.send(prepared.payloads)
                _describe(prepared)
        return BackgroundCheckpoint(prepared, lambda p, step: _finish_and_commit(p, step, writer))


def _capture(request: Request, *, defer_hashing: bool) -> Prepared:
    """The part that must see the live state: select, pickle, bring to host, hash the arrays
    (with ``defer_hashing``, the large ones are left to the writer: see ``_take_keys``)."""
    requested = time.time()
    started = time.perf_counter()
    ctx = make_context(store=request.store, session=request.session, config=request.config, namespace=request.namespace)
    if request.trigger not in TRIGGERS:
        raise ValueError(f"unknown trigger {request.trigger!r}; use one of {', '.join(TRIGGERS)}")
    if request.tag is not None and len(request.tag) > MAX_TAG:
        raise SelectionError(f"the tag is {len(request.tag)} characters long; keep it under {MAX_TAG}")
    ctx.store.check()
    chosen = select(ctx.namespace, request.names, request.exclude, ctx.hidden)
    rng_state = rng.to_bytes(rng.capture())
    dump = dump_variables(chosen.values)
    failed = [SkippedRecord(name=n, type=type_name(chosen.values[n]), reason=r) for n, r in dump.failed.items()]
    uninspectable = [r for r in chosen.skipped if r.reason.startswith("cannot be inspected")]
    if request.strict and (failed or uninspectable):
        listed = "; ".join(f"{r.name} ({r.type}): {r.reason}" for r in failed + uninspectable)
        raise SerializationError(
            f"nothing saved: {len(failed) + len(uninspectable)} variable(s) cannot be saved with "
            f"--strict: {listed}. Delete or exclude them (--exclude NAME), or drop --strict"
        )
    models = _start_model_checks(chosen.values, dump.segments)
    try:
        dump.collector.gather()
        algorithm = signing.hash_for(ctx.config.signing_key)
        plan = _plan_arrays(dump, algorithm, defer=defer_hashing)
    except BaseException:
        futures.wait([models])  # the modules are back in their own mode before this returns
        raise
    rng_ref = BlobRef(key=signing.digest(rng_state, algorithm), size=len(rng_state))
    plan.payloads[rng_ref.key] = rng_state
    return Prepared(
        ctx=ctx,
        id=new_checkpoint_id(requested),
        started=started,
        requested=requested,
        serialised=time.time(),
        trigger=request.trigger,
        tag=request.tag,
        dump=dump,
        values=chosen.values,
        skipped=chosen.skipped + failed,
        imports=chosen.imports,
        arrays=plan.arrays,
        payloads=plan.payloads,
        known=plan.known,
        rng=rng_ref,
        algorithm=algorithm,
        position=lineage.position(ctx.store.url, ctx.session),
        models=models,
        unread=plan.unread,
        unhashed=plan.unhashed,
    )


def _copy_what_is_new(p: Prepared, writer: BlobWriter) -> None:
    """For a background write: copy the array data the store lacks out of live memory, so
    later changes cannot reach the checkpoint. Blobs the store holds already are not copied
    (they will not be written). The copies go into one buffer kept from the last background
    checkpoint (``staging``), in parallel threads (NumPy's copy releases the GIL), so the
    kernel waits for only the changed bytes, at memory speed."""
    private = {id(f.data) for f in p.dump.collector.found.values() if f.private}
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


def _describe(p: Prepared) -> None:
    """Name and digest every variable, record the model checks, read the notebook.

    Still needs the live state (digests and model checks read it), but not the store: a
    synchronous checkpoint runs this while the array data is being written.
    """
    models = p.models.result()  # first: the checks flip modules to eval mode for a moment
    for name, segment in p.dump.segments.items():
        key = signing.digest(segment.data, p.algorithm)
        p.small[key] = segment.data
        value = p.values[name]
        check = value_digest(value, known=p.known) if len(segment.data) <= DIGEST_MAX_SEGMENT_BYTES else None
        p.variables.append(
            VariableRecord(
                name=name,
                type=type_name(value),
                kind=_kind(value),
                blob=BlobRef(key=key, size=len(segment.data)),
                arrays=segment.arrays,
                pickler=segment.pickler,
                digest=check,
            )
        )
    p.probe_value = probe.new_probe()
    checks = pickle.dumps({"probe": p.probe_value, "models": models}, protocol=4)
    p.checks = BlobRef(key=signing.digest(checks, p.algorithm), size=len(checks))
    p.small[p.checks.key] = checks
    notebook_bytes, note = read_notebook(p.ctx.notebook)
    p.notes.append(note)
    if notebook_bytes is not None and p.ctx.notebook:
        nb_key = signing.digest(notebook_bytes, p.algorithm)
        p.small[nb_key] = notebook_bytes
        p.notebook = {"path": relative_path(p.ctx.notebook), "blob": nb_key, "size": len(notebook_bytes)}
    p.environment = fingerprint.environment(p.ctx.config.node)
    p.process = fingerprint.process_identity()
    p.values = {}  # the live objects are not needed past this point


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


def _take_keys(p: Prepared, keys: dict[str, Future[str]]) -> None:
    """Record the keys of the arrays the writer hashes as it writes them (waiting for the
    hashes, not the writes)."""
    for array_key, key in keys.items():
        record, data = p.arrays[array_key], p.unhashed[array_key]
        record.blob = key.result()
        p.payloads[record.blob] = data
        remember(p.known, p.dump.collector.found[array_key].origin, record.blob, p.algorithm)
    p.unhashed = {}


def _finish_and_commit(p: Prepared, step: activity.Activity, writer: BlobWriter) -> CheckpointResult:
    """The background thread's part: write the small blobs, wait for every blob, then commit."""
    with writer:
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
        probe=probe.fingerprint(p.probe_value),
        environment=p.environment,
        process=p.process,
        hash=p.algorithm,
    )
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
        "bytes_written": written,
        "bytes_reused": total - written,
        "bytes_unread": p.unread,  # known unchanged from page flags, without hashing them
    }
    manifest.timings = {"requested": p.requested, "serialised": p.serialised, "committed": time.time()}
    catalog.commit(manifest, ctx.config.signing_key or None)
    probe.remember(manifest.id, p.probe_value)
    lineage.advance(ctx.store.url, ctx.session, manifest.lineage, manifest.id)
    step.finish(manifest.id, manifest.created)
    return CheckpointResult(
        manifest=manifest, store_url=ctx.store.display_url, seconds=time.perf_counter() - p.started, notes=notes
    )
