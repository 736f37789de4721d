"""The part of a checkpoint that must see the live kernel: select, pickle, bring arrays to
host and plan their blobs (``capture``), then name and digest every variable and record the
model checks (``describe``). What it produces, ``Prepared``, is all that writing needs."""

from __future__ import annotations

import contextlib
import pickle
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..errors import SerializationError
from ..notebook import read_notebook, relative_path
from ..process import rng, settings
from ..process.localmodules import folder_words, notebook_folder
from ..process.selection import select, shadowing, type_name
from ..proof import fingerprint, modelcheck, probe
from ..proof.rehearsal import Rehearsal
from ..replay import history
from ..replay.reach import OUTSIDE, reach
from ..replay.rebuild import plan as plan_recipes
from ..serialize import devicehash, writewatch
from ..serialize.digests import Known, remember
from ..serialize.pickler import DumpResult
from ..store import signing
from ..store.layout import new_checkpoint_id
from ..store.manifest import (
    ArrayRecord,
    BlobRef,
    DataFileRecord,
    FileRange,
    ModelFileRecord,
    RecipeRecord,
    SkippedRecord,
    VariableRecord,
)
from . import arrayplan, datafiles, evidence, lineage, modelfiles, running, travel
from .context import Context
from .options import CheckpointOptions

_mid_cell = False  # a checkpoint being captured now is outside any safe point of a running cell


@contextlib.contextmanager
def capturing_mid_cell(yes: bool = True) -> Iterator[None]:
    """Mark the checkpoints captured inside this block as taken mid-cell (see ``mid_cell``)."""
    global _mid_cell
    before, _mid_cell = _mid_cell, yes
    try:
        yield
    finally:
        _mid_cell = before


def mid_cell() -> bool:
    """Whether the checkpoint being captured now was taken inside a running cell, outside any safe
    point (so variables that cell was changing may be halfway updated)."""
    return _mid_cell


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
    #: The digests, rehearsal and model checks (``evidence.take``), once taken, and what the
    #: model checks need beside ``known``: the device fingerprints, the passes under way.
    evidence: evidence.Evidence | None = None
    device_known: modelcheck.Known
    passes: evidence.Started
    unread: int
    unhashed: dict[str, Any]
    watched: writewatch.Watched  # arrays protected before hashing, settled at the commit
    #: Array blobs that are ranges of model files (not written), the files, and their uploads.
    references: dict[str, list[FileRange]] = field(default_factory=dict)
    model_files: dict[str, ModelFileRecord] = field(default_factory=dict)
    #: Files values read by path, kept as blobs of the checkpoint (``datafiles``), by digest.
    data_files: dict[str, DataFileRecord] = field(default_factory=dict)
    uploads: dict[str, Future[None]] = field(default_factory=dict)
    loops: list[dict[str, Any]] = field(default_factory=list)
    loop_state: BlobRef | None = None
    loop_notes: list[str] = field(default_factory=list)  # where the loops are, for the manifest and its readers
    # filled in by ``describe``
    variables: list[VariableRecord] = field(default_factory=list)
    small: dict[str, Any] = field(default_factory=dict)
    checks: BlobRef | None = None
    probe_value: str = ""
    notebook: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    process: dict[str, Any] = field(default_factory=dict)
    mid_cell: bool = False
    kept: settings.Kept | None = None  # process settings and local modules
    device: devicehash.Seen | None = None  # fingerprints of device storages, and those kept unchanged
    copied: int = 0  # bytes brought from devices to host memory
    recipes: list[RecipeRecord] = field(default_factory=list)  # how what could not be saved is rebuilt
    history: BlobRef | None = None  # the cell history blob
    elsewhere: list[str] = field(default_factory=list)  # what will not come back on another node (``travel``)
    unproven: list[str] = field(default_factory=list)  # modules the restore test cannot prove, and why
    #: Saved variables a copy of which, loaded back at once, differs: named at checkpoint.
    rehearsal: Rehearsal = field(default_factory=Rehearsal)


def _refuse_unsaveable(unsaveable: list[SkippedRecord]) -> None:
    """``--strict``: nothing is saved when a variable cannot be, and the error names each."""
    if unsaveable:
        listed = "; ".join(f"{r.name} ({r.type}): {r.reason}" for r in unsaveable)
        raise SerializationError(
            f"nothing saved: {len(unsaveable)} variable(s) cannot be saved with "
            f"--strict: {listed}. Delete or exclude them (--exclude NAME), or drop --strict"
        )


def _payload(payloads: dict[str, Any], data: bytes, algorithm: str) -> BlobRef:
    """``data`` as one more blob of the checkpoint: its reference, the bytes added to ``payloads``."""
    ref = BlobRef(key=signing.digest(data, algorithm), size=len(data))
    payloads[ref.key] = data
    return ref


def _elsewhere(
    ctx: Context, values: dict[str, Any], kept: settings.Kept, unsaved: list[SkippedRecord], recipes: list[RecipeRecord]
) -> list[str]:
    """Each thing that will not come back, or not provably, on another node (``travel.lines``)."""
    folder, words = notebook_folder(ctx.notebook), folder_words(ctx.notebook)
    return travel.lines(kept.local_modules.lost, unsaved, recipes, values, kept.settings, folder, words)


def capture(request: CheckpointOptions, ctx: Context, *, defer_hashing: bool) -> Prepared:
    """The part that must see the live state of ``ctx``: select, pickle, bring to host, hash the
    arrays (with ``defer_hashing``, the large ones are left to the writer: see ``take_keys``)."""
    requested, started = time.time(), time.perf_counter()
    position = lineage.position(ctx.store.url, ctx.session)
    if position.parent is None:  # else this process took or resumed a checkpoint there: it was reached
        ctx.store.check()
    chosen = select(ctx.namespace, request.names, request.exclude, ctx.hidden)
    algorithm = signing.hash_for(ctx.config.keyring)
    maps, offered = arrayplan.offer(ctx, chosen.values, algorithm)
    rng_state = rng.to_bytes(rng.capture())
    positions = running.capture()
    modelcheck.watch_all(chosen.values)  # before pickling: the saved module is watched, as digested
    passes = evidence.start(chosen.values)  # the changed modules' forward passes, beside the pickling
    dump, data = datafiles.dump(chosen.values, ctx.config, algorithm)  # with the files values read by path
    failed = [SkippedRecord(name=n, type=type_name(chosen.values[n]), reason=r) for n, r in dump.failed.items()]
    uninspectable = [r for r in chosen.skipped if r.reason.startswith("cannot be inspected")]
    if request.strict:
        _refuse_unsaveable(failed + uninspectable)
    seen, device_known, files, plan = arrayplan.plan(ctx, position, dump, offered, algorithm, defer_hashing, maps)
    recipes = _recipes(chosen, dump, failed)
    taken = None
    if not plan.unhashed:  # every digest is known: the model checks run while the rest is captured and sent
        taken = evidence.take(
            chosen.values, dump, plan.arrays, plan.known, device_known, algorithm, request.trigger, passes
        )
    rng_ref = _payload(plan.payloads, rng_state, algorithm)
    loop_ref = None if positions.state is None else _payload(plan.payloads, positions.state, algorithm)
    kept = settings.keep(ctx.notebook, algorithm, chosen.values)
    plan.payloads.update({**kept.local_modules.payloads, **datafiles.payloads(data)})
    history_ref = _payload(plan.payloads, history.current.to_bytes(), algorithm)
    elsewhere = _elsewhere(ctx, chosen.values, kept, failed + uninspectable, recipes) + datafiles.lines(data)
    prepared = Prepared(
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
        unhashed=plan.unhashed,
        rng=rng_ref,
        algorithm=algorithm,
        position=position,
        evidence=taken,
        device_known=device_known,
        passes=passes,
        unread=plan.unread,
        watched=plan.watched,
        references=plan.references,
        model_files=modelfiles.records(files, plan.references),
        data_files=datafiles.records(data),
        uploads=modelfiles.uploads(files, plan.references),
        loops=positions.records,
        loop_state=loop_ref,
        loop_notes=positions.notes,
        notes=(offered.notes if offered else [])
        + positions.notes
        + kept.notes
        + _graph_notes(dump)
        + shadowing(dump.segments, ctx.hidden, "saved")
        + plan.watched.notes,
        mid_cell=mid_cell(),
        kept=kept,
        device=seen,
        copied=dump.collector.copied,
        recipes=recipes,
        history=history_ref,
        elsewhere=elsewhere,
    )
    return prepared


#: Why a variable that only dill could copy, and that reaches outside the process, is rebuilt instead.
COPY_WOULD_NOT_WORK = (
    "it reaches outside the process, and a copy of its memory (its threads, queues, open handles) would not work"
)


def _recipes(chosen: Any, dump: DumpResult, failed: list[SkippedRecord]) -> list[RecipeRecord]:
    """Recipes for what could not be saved (``failed``); and for what reaches outside the process
    and only dill could copy (a TensorBoard writer): that one is rebuilt instead, where it can be,
    and moves from the saved variables to ``failed``."""
    copies = {n for n, s in dump.segments.items() if s.pickler == "dill" and reach(chosen.values[n]) == OUTSIDE}
    unsaved = {r.name: chosen.values[r.name] for r in failed} | {n: chosen.values[n] for n in copies}
    recipes = plan_recipes(history.current, unsaved, set(dump.segments) - copies, chosen.imports)
    kept = []
    for recipe in recipes:
        if recipe.name not in copies:
            kept.append(recipe)
        elif not recipe.missing:  # rebuildable: not saved; else the copy is kept, as before
            del dump.segments[recipe.name]
            failed.append(SkippedRecord(name=recipe.name, type=recipe.type, reason=COPY_WOULD_NOT_WORK))
            kept.append(recipe)
    return kept


def _graph_notes(dump: DumpResult) -> list[str]:
    """Name the variables whose tensors were computed with autograd: they come back as leaves."""
    held = [f"{name} ({fn})" for name, fn in dump.graphs.items() if name in dump.segments]
    if not held:
        return []
    return [
        f"autograd graphs are not saved (as with torch.save): {', '.join(held)} come(s) back as leaf "
        "tensors; compute them again to backpropagate through them"
    ]


def describe(p: Prepared, surroundings: bool = True) -> None:
    """Name and digest every variable, rehearse the restore of the small ones (``proof.rehearsal``),
    record the model checks (``evidence``, unless the capture took it), read the notebook.

    Still needs the live state (digests and model checks read it), but not the store: a
    synchronous checkpoint runs this while the array data is being written. Without
    ``surroundings``, the notebook and the environment (which read no live state, and take a
    tenth of a second or more) are left to ``describe_surroundings``: a background checkpoint
    reads them in its thread.
    """
    if p.evidence is None:
        p.evidence = evidence.take(
            p.values, p.dump, p.arrays, p.known, p.device_known, p.algorithm, p.trigger, p.passes
        )
    taken = p.evidence
    p.variables, p.rehearsal = taken.variables, taken.rehearsal
    p.small.update(taken.segments)
    models = taken.models.result()  # the modules are in their own modes again once it is done
    p.unproven = evidence.unproven(models)
    p.notes += p.unproven
    p.probe_value = probe.new_probe()
    checks = pickle.dumps({"probe": p.probe_value, "models": models, "values": taken.fingerprints}, protocol=4)
    p.checks = BlobRef(key=signing.digest(checks, p.algorithm), size=len(checks))
    p.small[p.checks.key] = checks
    p.values = {}  # the live objects are not needed past this point
    if surroundings:
        describe_surroundings(p)


def describe_surroundings(p: Prepared) -> None:
    """Read the notebook as saved on disk, the package versions and the process identity."""
    notebook_bytes, note = read_notebook(p.ctx.notebook)
    p.notes.append(note)
    if notebook_bytes is not None and p.ctx.notebook:
        nb_key = signing.digest(notebook_bytes, p.algorithm)
        p.small[nb_key] = notebook_bytes
        p.notebook = {"path": relative_path(p.ctx.notebook), "blob": nb_key, "size": len(notebook_bytes)}
    p.environment = fingerprint.environment(p.ctx.config.node)
    p.process = fingerprint.process_identity()


def take_keys(p: Prepared, keys: dict[str, Future[str]]) -> None:
    """Record the keys of the arrays the writer hashes as it writes them (waiting for the
    hashes, not the writes)."""
    for array_key, key in keys.items():
        record, data = p.arrays[array_key], p.unhashed[array_key]
        record.blob = key.result()
        p.payloads[record.blob] = data
        remember(p.known, p.dump.collector.found[array_key].origin, record.blob, p.algorithm)
    p.unhashed = {}
