"""The part of a checkpoint that must see the live kernel: select, pickle, bring arrays to
host and plan their blobs (``capture``), then name and digest every variable and record the
model checks (``describe``). What it produces, ``Prepared``, is all that writing needs."""

from __future__ import annotations

import contextlib
import pickle
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..errors import SerializationError
from ..notebook import read_notebook, relative_path
from ..process import rng, settings
from ..process.localmodules import folder_words, notebook_folder
from ..process.selection import select, shadowing, type_name
from ..proof import fingerprint, libvalues, modelcheck, probe
from ..proof.rehearsal import Rehearsal, rehearse
from ..replay import history
from ..replay.reach import OUTSIDE, reach
from ..replay.rebuild import plan as plan_recipes
from ..serialize import devicehash, writewatch
from ..serialize.digests import Known, remember, value_digest
from ..serialize.pickler import DumpResult
from ..store import signing, workers
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
from ..vocabulary import Trigger
from . import arrayplan, datafiles, lineage, modelfiles, running, travel
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


#: Triggers of a checkpoint with little time left to take it: no rehearsal (``proof.rehearsal``).
HURRIED = frozenset({Trigger.SIGTERM, Trigger.SPOT})

#: The process's thread the model checks run in, one check after the other (``store.workers``).
CHECKS = "jupyter-pause-check"

#: Variables whose pickled form is larger than this get no value digest (their blobs' checksums
#: still cover them); digesting a huge object graph in Python would cost more than saving it.
DIGEST_MAX_SEGMENT_BYTES = 4 << 20


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
    #: The model checks, once started (``start_model_checks``), and what they need.
    models: Future[dict[str, Any]] | None = None
    modules: dict[str, Any]
    device_known: modelcheck.Known
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


def _kind(value: Any) -> str:
    """What a variable is, named by protocol rather than by class: module, optimizer, stateful..."""
    if issubclass(type(value), type):  # not isinstance: a dead weak proxy raises on that
        return "class"
    try:
        if modelcheck.is_module(value):
            return "module"
        kind = type(value)  # methods by the class: a dask Delayed makes up any attribute asked of it
        if callable(getattr(kind, "state_dict", None)) and callable(getattr(kind, "load_state_dict", None)):
            if hasattr(value, "param_groups"):
                return "optimizer"
            if hasattr(value, "optimizer") and hasattr(value, "last_epoch"):
                return "scheduler"
            if callable(getattr(kind, "get_scale", None)):
                return "scaler"
            return "stateful"
        if type(value).__module__ == "torch" and hasattr(value, "untyped_storage"):
            return "tensor"
    except Exception:  # an object that raises on attribute access is still saved; just unnamed
        return "object"
    return "object"


def _model_checks(modules: dict[str, Any], known: modelcheck.Known) -> dict[str, Any]:
    """Per module, its recorded forward pass (or why there is none)."""
    models: dict[str, Any] = {}
    for name, module in modules.items():
        check = modelcheck.record(module, known)
        models[name] = check.to_record() if isinstance(check, modelcheck.ModelCheck) else {"none": check}
    return models


def _modules(values: dict[str, Any], saved: Iterable[str]) -> dict[str, Any]:
    """The saved variables that are modules with parameters: each gets a model check."""
    return {n: values[n] for n in saved if _kind(values[n]) == "module" and any(True for _ in values[n].parameters())}


def start_model_checks(p: Prepared) -> Future[dict[str, Any]]:
    """Record the model checks in a thread (a forward pass releases the GIL), once the digest
    of every array is known: a module whose storages all hold what they held at its last check
    is not run again (``modelcheck.record``), and its storages are not read again to tell.

    Started only once everything is pickled (a check puts modules in eval mode for a moment,
    which a pickle taken meanwhile would keep), and waited for before anything else reads the
    modules (``describe``)."""
    if p.models is None:
        known = {**p.device_known, **{where: digest.hex() for where, digest in p.known.items()}}
        p.models = workers.shared(CHECKS, 1).submit(_model_checks, p.modules, known)
    return p.models


def unproven(models: dict[str, Any]) -> list[str]:
    """A note per module the restore test will not be able to prove, with why (for the summary)."""
    return [
        f"the restore test cannot prove model {name}: {recorded['none']}"
        for name, recorded in models.items()
        if "none" in recorded
    ]


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
    dump, data = datafiles.dump(chosen.values, ctx.config, algorithm)  # with the files values read by path
    failed = [SkippedRecord(name=n, type=type_name(chosen.values[n]), reason=r) for n, r in dump.failed.items()]
    uninspectable = [r for r in chosen.skipped if r.reason.startswith("cannot be inspected")]
    if request.strict:
        _refuse_unsaveable(failed + uninspectable)
    seen, device_known, files, plan = arrayplan.plan(ctx, position, dump, offered, algorithm, defer_hashing, maps)
    rng_ref = _payload(plan.payloads, rng_state, algorithm)
    loop_ref = None if positions.state is None else _payload(plan.payloads, positions.state, algorithm)
    kept = settings.keep(ctx.notebook, algorithm, chosen.values)
    plan.payloads.update({**kept.local_modules.payloads, **datafiles.payloads(data)})
    history_ref = _payload(plan.payloads, history.current.to_bytes(), algorithm)
    recipes = _recipes(chosen, dump, failed)
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
        modules=_modules(chosen.values, dump.segments),
        device_known=device_known,
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
    if not plan.unhashed:  # every digest is known: the checks run while the data is copied and sent
        start_model_checks(prepared)
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


def _digest(value: Any, known: Known) -> str | None:
    """The value's digest, or None where reading it meets a dead weak proxy (a stream handler's
    ipykernel stream holds one): the variable is saved all the same, only not digested."""
    try:
        return value_digest(value, known=known)
    except ReferenceError:
        return None


def describe(p: Prepared, surroundings: bool = True) -> None:
    """Name and digest every variable, rehearse the restore of the small ones (``proof.rehearsal``),
    record the model checks, read the notebook.

    Still needs the live state (digests and model checks read it), but not the store: a
    synchronous checkpoint runs this while the array data is being written. Without
    ``surroundings``, the notebook and the environment (which read no live state, and take a
    tenth of a second or more) are left to ``describe_surroundings``: a background checkpoint
    reads them in its thread.
    """
    models = start_model_checks(p).result()  # first: the checks flip modules to eval mode for a moment
    p.unproven = unproven(models)
    p.notes += p.unproven
    for name, segment in p.dump.segments.items():
        key = signing.digest(segment.data, p.algorithm)
        p.small[key] = segment.data
        value = p.values[name]
        check = _digest(value, p.known) if len(segment.data) <= DIGEST_MAX_SEGMENT_BYTES else None
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
    if p.trigger not in HURRIED:
        p.rehearsal = rehearse(p.values, p.dump.segments, {v.name: v.digest for v in p.variables}, _array_bytes(p))
    p.probe_value = probe.new_probe()
    fingerprints = libvalues.record(p.values, {v.name: v.digest for v in p.variables})  # for library upgrades
    checks = pickle.dumps({"probe": p.probe_value, "models": models, "values": fingerprints}, protocol=4)
    p.checks = BlobRef(key=signing.digest(checks, p.algorithm), size=len(checks))
    p.small[p.checks.key] = checks
    p.values = {}  # the live objects are not needed past this point
    if surroundings:
        describe_surroundings(p)


def _array_bytes(p: Prepared) -> dict[str, int]:
    """Bytes of the arrays and tensor storages each saved variable holds out of band."""
    return {
        name: sum(p.arrays[k].nbytes for k in segment.arrays if k in p.arrays)
        for name, segment in p.dump.segments.items()
    }


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
