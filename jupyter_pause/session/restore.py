"""Resuming: pick the newest checkpoint that verifies, check it, then restore it into the namespace."""

from __future__ import annotations

import importlib
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from .. import units
from ..config import PauseConfig
from ..errors import CheckpointDamaged, RestoreError, SelectionError
from ..process import rng, settings
from ..process.selection import shadowing, type_name
from ..proof import fingerprint, libvalues, probe
from ..replay import rebuild
from ..serialize import modulepaths, moved
from ..serialize.arrays import ArrayLoader, target_device
from ..serialize.digests import value_digest
from ..serialize.pickler import load_variables
from ..serialize.pinned import Uploads
from ..store import readahead, references, signing
from ..store.catalog import Catalog, Decision, Listing
from ..store.integrity import describe, read_manifest
from ..store.manifest import Manifest
from ..store.signing import Keys
from . import activity, collector, datafiles, holding, hooks, lineage, preimport, running
from .context import Context, make_context
from .options import ResumeOptions, with_overrides


@dataclass
class ResumeResult:
    """What a resume brought back, what it could not, and from where."""

    manifest: Manifest
    store_url: str
    restored: list[str]
    seconds: float
    imported: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)
    environment: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rebuilt: rebuild.Report = field(default_factory=rebuild.Report)

    @property
    def complete(self) -> bool:
        """True when every saved variable came back."""
        return not self.skipped

    def summary(self) -> str:
        """A few lines: which checkpoint (node, time), what came back, what did not, and why."""
        m = self.manifest
        taken = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(m.created))
        lines = [
            (r if r.startswith(f"checkpoint {i} ") else f"checkpoint {i} is damaged: {r}")
            + "; "
            + ("restoring what verifies" if i == m.id else f"resuming from {m.id} instead")
            for i, r in self.damaged.items()
        ]
        lines.append(
            f"resumed checkpoint {m.id} of session {m.session!r} (taken on {m.node} at {taken}) "
            f"from {self.store_url} in {units.duration(self.seconds)}"
        )
        lines.append(f"  restored {len(self.restored)} variable(s): {', '.join(self.restored) or '-'}")
        if self.imported:
            lines.append(f"  imported again: {', '.join(self.imported)}")
        for name, reason in self.skipped.items():
            lines.append(f"  not restored: {name}: {reason}")
        lines += [f"  {line}" for line in self.rebuilt.lines()]
        for record in m.skipped:
            if record.name not in self.rebuilt.done:
                lines.append(f"  not in checkpoint: {record.name} ({record.type}): {record.reason}")
        if self.environment:
            lines.append("  environment differs from the checkpoint's:")
            lines += [f"    {d}" for d in self.environment]
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)


@dataclass(kw_only=True)
class Blobs:
    """A checkpoint's blobs as read: those that verified (bytes, or tensors already placed), and
    why each other one did not."""

    good: dict[str, Any]
    bad: dict[str, str]


@dataclass(kw_only=True)
class Chosen:
    """The checkpoint a resume restores, its blobs, and the newer checkpoints passed over (why)."""

    manifest: Manifest
    blobs: Blobs
    passed_over: dict[str, str]


def _reimport(imports: dict[str, str], namespace: dict[str, Any], failed: dict[str, str]) -> list[str]:
    """Import the modules the session had imported, under the same names."""
    done = []
    for name, module in imports.items():
        try:
            namespace[name] = modulepaths.find(module)
        except Exception as e:  # a module missing on this node: reported, the rest goes on
            failed[name] = f"import {module} failed here: {type(e).__name__}: {e}"
            continue
        done.append(name)
    return done


def _same_class(saved: str, value: Any) -> bool:
    """Whether the class named ``saved`` (``module.Qualname``) is still ``value``'s class, under
    another name: a library that moved it (pandas 3 names ``pandas.core.frame.DataFrame``'s
    module ``pandas``) changed no type."""
    module, _, qualname = saved.rpartition(".")
    while module:
        try:
            found: Any = importlib.import_module(module)
        except Exception:  # not a module: part of the qualified name, or gone
            module, _, head = module.rpartition(".")
            qualname = f"{head}.{qualname}"
            continue
        for part in qualname.split("."):
            found = getattr(found, part, None)
        return found is type(value)
    return False


def _changed_types(manifest: Manifest, values: dict[str, Any], restored: list[str]) -> list[str]:
    """A note for each restored variable whose type is not the one it was saved with: never a
    silent change (a reduction that rebuilds something else is named here)."""
    was = {v.name: v.type for v in manifest.variables}
    return [
        f"changed type: {name} came back as {type_name(values[name])}, it was {was[name]}"
        for name in restored
        if was.get(name) and type_name(values[name]) != was[name] and not _same_class(was[name], values[name])
    ]


def _placements(manifest: Manifest, map_location: str) -> dict[str, str]:
    """Blobs holding only tensors bound for one device other than the CPU, and that device.

    Each is moved there as soon as it is read and verified, and its host copy let go, so host
    memory holds only the blobs in flight rather than a second copy of the whole GPU state.
    A device this process cannot use gets no placement: the resume then names the problem.
    """
    wanted: dict[str, set[str]] = {}
    for record in manifest.arrays.values():
        gpu = record.kind == "torch" and record.device != "cpu" and map_location != "cpu"
        wanted.setdefault(record.blob, set()).add(record.device if gpu else "cpu")
    places = {blob: devices.pop() for blob, devices in wanted.items() if len(devices) == 1 and "cpu" not in devices}
    usable = set()
    for device in set(places.values()):
        try:
            usable.add(target_device(device, map_location))  # imports torch, on this thread
        except RestoreError:
            continue
    return {blob: device for blob, device in places.items() if device in usable}


def _start_torch(catalog: Catalog, manifest: Manifest, keys: list[str]) -> None:
    """Import torch for a checkpoint that holds tensors, where this kernel has not yet; in a new
    kernel it is the slowest import there is (about a CPU-second).

    From a local folder it is imported first, with the disk asked to read the blobs' files
    meanwhile: the reads are CPU work too (page faults, hashing), and racing them on two cores
    made both slower (1.5x). From a remote store it is imported on a thread of its own beside the
    reads (``preimport``), which wait on the network with the GIL released (``store.backends.direct``):
    a 1 GB resume from S3 on two cores went from 1.56x a raw read to 1.33-1.42x.
    """
    slow = [name for name in manifest.slow_imports() if name not in sys.modules]
    first = bool(slow) and catalog.store.local
    if first:  # the disk reads while torch is imported (imported already, the reads begin at once)
        readahead.advise(
            readahead.blob_paths(catalog.store, manifest, keys), sum(manifest.blobs.get(k, 0) for k in keys)
        )
    preimport.begin(slow, manifest.import_files)
    if first:
        preimport.wait()


def _fetch(catalog: Catalog, manifest: Manifest, map_location: str) -> Blobs:
    """Read and verify what restoring ``manifest`` needs, reporting progress.

    Blobs bound for a GPU are read into pinned memory where this process can pin, and moved
    there as they arrive, each copy queued without waiting (``_placements``,
    ``serialize.pinned``); every copy is done when this returns. Torch, when the checkpoint needs
    it and it is not imported yet, is imported before the reads or beside them
    (``_start_torch``); either way, as every import begun ahead, it is there when this returns.
    """
    keys = manifest.needed()
    total = sum(manifest.blobs.get(k, 0) or manifest.referenced_size(k) for k in keys)
    activity.current.begin("restoring", f"reading checkpoint {manifest.id}", total=total)
    places = _placements(manifest, map_location)
    uploads = Uploads(places) if places else None
    _start_torch(catalog, manifest, keys)
    try:
        good, bad = holding.fetch(  # taking first what was read ahead during a wait
            catalog.store,
            manifest,
            keys,
            progress=activity.current.progress,
            then=None if uploads is None else uploads.place,
            into=None if uploads is None else uploads.into,
        )
    finally:
        if uploads is not None:
            uploads.finish()
        preimport.wait()
    return Blobs(good=good, bad=bad)


def _arm_loops(manifest: Manifest, blobs: dict[str, Any], everything: bool) -> list[str]:
    """Arm the checkpoint's loop positions: the same cell, run again, continues there."""
    if not everything or not manifest.loops:
        running.arm([], None)
        return []
    ref = manifest.loop_state
    if ref is not None and ref.key not in blobs:
        running.arm([], None)
        return ["loop positions NOT restored: their blob is missing or damaged; loops start from their first item"]
    return running.arm(manifest.loops, blobs[ref.key] if ref is not None else None)


def _choose(catalog: Catalog, session: str, options: ResumeOptions, key: Keys, map_location: str) -> Chosen:
    """The checkpoint to restore, its blobs, and the newer ones passed over: damaged manifests
    (checksum, signature, torn write), other lineages' (``Listing.following``) and checkpoints
    whose blobs do not verify, each with why.

    One rule, wherever the resume comes from: "latest" is the newest checkpoint whose manifest
    and blobs verify. The store is listed and its manifests verified once: here for ``%resume``,
    by the server for its resume, which passes its ``Decision`` along (``options.decision``);
    here the candidates' blobs are then read and verified, newest first, until one is whole.
    A checkpoint asked for by id whose manifest or blobs are damaged, or every checkpoint
    damaged, raises ``CheckpointDamaged`` saying why and which checkpoint is intact, unless
    ``allow_partial`` (then what verifies is brought back, and the rest named); "no checkpoint"
    only when the session has none at all.
    """
    by_id = options.checkpoint not in ("latest", "")
    listing: Listing | None = None
    decision = options.decision
    listed: dict[str, Manifest] = {}
    if decision is None:
        listing = _listing(catalog, session, key, options.paused_from)
        choice = listing.resolve(options.checkpoint)  # no checkpoint, an unknown id, damaged manifests
        decision = Decision.of(listing, choice, by_id)
        listed = {m.id: m for m in listing.checkpoints + listing.aside}
    damaged: dict[str, str] = {}
    for checkpoint_id in decision.candidates:
        manifest = listed.get(checkpoint_id) or _read_manifest(catalog, session, checkpoint_id, key, decision)
        if isinstance(manifest, str):  # changed or gone since the server listed it
            if by_id:
                raise CheckpointDamaged(f"checkpoint {checkpoint_id} of session {session!r} is damaged: {manifest}")
            damaged[checkpoint_id] = manifest
            continue
        blobs = _fetch(catalog, manifest, map_location)
        if not blobs.bad or (by_id and options.allow_partial):
            passed_over = {**decision.newer(manifest), **damaged}
            return Chosen(manifest=manifest, blobs=blobs, passed_over=dict(sorted(passed_over.items(), reverse=True)))
        if by_id:  # the error path alone lists the store, to name the newest intact checkpoint
            listing = listing or _listing(catalog, session, key, options.paused_from)
            raise listing.refusal(catalog.store, manifest, describe(manifest, blobs.bad))
        damaged[checkpoint_id] = describe(manifest, blobs.bad)
    readable = (listed.get(i) or _read_manifest(catalog, session, i, key, decision) for i in decision.candidates)
    newest = next((m for m in readable if isinstance(m, Manifest)), None)
    if not options.allow_partial or newest is None:
        whys = "; ".join(f"{i}: {why}" for i, why in damaged.items())
        raise CheckpointDamaged(
            f"every checkpoint of session {session!r} is damaged ({whys}); bring back what verifies of the "
            "newest with allow_partial (%resume --allow-partial), or take a new checkpoint"
        )
    # Nothing verifies: bring back what can be from the newest, and say so. (Read again rather
    # than held from the first pass, so a damaged newest never doubles memory while searching.)
    passed_over = {k: v for k, v in {**decision.newer(newest), **damaged}.items() if k != newest.id}
    return Chosen(manifest=newest, blobs=_fetch(catalog, newest, map_location), passed_over=passed_over)


def _listing(catalog: Catalog, session: str, key: Keys, paused_from: str | None) -> Listing:
    """The session's checkpoints as a resume sees them: without signing, "latest" keeps to the paused lineage."""
    listing = catalog.listing(session, key)
    return listing if key else listing.following(paused_from)


def _read_manifest(
    catalog: Catalog, session: str, checkpoint_id: str, key: Keys, decision: Decision | None = None
) -> Manifest | str:
    """A candidate's manifest, read by id and verified; why not, when it is damaged or gone.
    One the decision hands on (``Decision.manifests``: the server read it) is verified here as
    the store's would be, and read from the store only when it does not verify."""
    handed = decision.manifests.get(checkpoint_id) if decision is not None else None
    if handed is not None:
        manifest = read_manifest(handed, checkpoint_id, key, session)
        if isinstance(manifest, Manifest):
            return manifest
    try:
        manifest = catalog.manifest(session, checkpoint_id, key)
    except FileNotFoundError:
        return "its manifest is no longer in the store"
    return manifest if isinstance(manifest, Manifest) else manifest.why


def resume(
    checkpoint: str | None = None,
    *,
    options: ResumeOptions | None = None,
    namespace: dict[str, Any] | None = None,
    config: PauseConfig | None = None,
    **overrides: Any,
) -> ResumeResult:
    """Restore a checkpoint's variables, torch state and RNG state into the namespace.

    Parameters
    ----------
    checkpoint
        ``latest`` (the newest checkpoint that verifies), an id, or a unique prefix of one.
        Given, it replaces ``options.checkpoint``.
    options
        What to restore, from where, and how (``ResumeOptions``); default: its defaults.
    namespace
        Where the variables go; default: the interactive namespace.
    config
        Where unset options come from; default: ``PauseConfig()`` (environment, config files).
    **overrides
        Any field of ``ResumeOptions`` as a keyword, replacing that of ``options``:
        ``store``, ``session``, ``only``, ``map_location``, ``overwrite``.

    Returns
    -------
    ResumeResult
        What was restored, skipped or found damaged, and a printable summary.
    """
    request = call_options(checkpoint, options, overrides, "resume")
    ctx = make_context(store=request.store, session=request.session, config=config, namespace=namespace)
    return resume_in(ctx, request)


def call_options(
    checkpoint: str | None, options: ResumeOptions | None, overrides: dict[str, Any], where: str
) -> ResumeOptions:
    """The options of one call: ``options`` (else the defaults), ``checkpoint`` and the keywords replacing fields."""
    if checkpoint is not None:
        overrides["checkpoint"] = checkpoint
    return with_overrides(ResumeOptions, options, overrides, where)


def resume_in(ctx: Context, options: ResumeOptions) -> ResumeResult:
    """``resume`` against an already resolved store, session and namespace."""
    with activity.step("restoring", "finding the checkpoint"):
        result = _resume(ctx, options)
    activity.current.finish(result.manifest.id, result.manifest.created, detail="restored")
    return result


def _resume(ctx: Context, options: ResumeOptions) -> ResumeResult:
    """``resume_in``'s work, with Python's garbage collector held off but around the user's own
    code it runs (``collector``)."""
    with collector.paused():
        return _resume_paused(ctx, options)


def _put_back_rng(manifest: Manifest, blobs: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """The checkpoint's RNG state put back, where it holds one: the state, and notes saying so."""
    if manifest.rng is None:
        return None, []
    if manifest.rng.key not in blobs:
        return None, ["RNG state NOT restored: its blob is missing or damaged"]
    state = rng.from_bytes(blobs[manifest.rng.key])
    return state, [*rng.restore(state), f"RNG state restored: {', '.join(state)}"]


def _resume_paused(ctx: Context, options: ResumeOptions) -> ResumeResult:
    only, map_location = options.only, options.map_location
    started = time.perf_counter()
    catalog = Catalog(ctx.store)
    key = ctx.config.keyring
    chosen = _choose(catalog, ctx.session, options, key, map_location)
    manifest, blobs = chosen.manifest, chosen.blobs.good
    saved = [v.name for v in manifest.variables]
    wanted = list(dict.fromkeys(only)) if only is not None else saved
    unknown = [n for n in wanted if n not in saved]
    if unknown:
        raise SelectionError(
            f"checkpoint {manifest.id} holds no variable named {', '.join(unknown)}; "
            f"it holds: {', '.join(saved) or 'none'}"
        )
    for device in sorted(manifest.devices()):
        target_device(device, map_location)  # raises before the namespace is touched
    # Local modules, working directory, sys.path and settings first: unpickling may import them.
    kept = settings.restore(catalog.store, manifest, ctx.notebook, full=only is None, overwrite=options.overwrite)

    loader = ArrayLoader(manifest.arrays, blobs, map_location=map_location, hash_name=manifest.hash)
    segments = [(v.name, v.pickler, blobs.get(v.blob.key)) for v in manifest.variables]
    with warnings.catch_warnings(record=True) as caught:  # a library loading another version's objects warns
        warnings.simplefilter("always")
        with datafiles.staging(catalog.store, manifest, ctx.config):  # files values read by path
            values, failed = load_variables(segments, loader, ctx.namespace)
    damaged = dict(chosen.passed_over)
    if chosen.blobs.bad:  # what verifies is restored; the rest is named
        damaged[manifest.id] = describe(manifest, chosen.blobs.bad)
    restored = [n for n in wanted if n in values]
    for name in restored:
        ctx.namespace[name] = values[name]
    notes = [signing.describe(manifest.signature, key), *kept, *_changed_types(manifest, values, restored)]
    notes += references.passed_over(catalog.store, manifest)  # model file copies that did not verify
    notes += shadowing(restored, ctx.hidden, "restored")
    notes += libvalues.warned(caught)
    imported: list[str] = []
    if only is None:
        imported = _reimport(manifest.imports, ctx.namespace, failed)
    saved_rng, rng_notes = _put_back_rng(manifest, blobs) if only is None else (None, [])
    notes += rng_notes
    rebuilt = rebuild.Report()
    if only is None:  # after the restore, before the digests the restore test compares
        replaying = options.rebuild and ctx.config.rebuild
        with collector.running_user_code(when=replaying and bool(manifest.recipes)):
            rebuilt, replay_notes = rebuild.on_resume(manifest, blobs, ctx.namespace, replaying)
        notes += replay_notes
    notes += _arm_loops(manifest, blobs, only is None)
    if manifest.checks is not None and manifest.checks.key in blobs:
        probe.remember_checks(manifest.id, manifest.checks.key, moved.loads(bytes(blobs[manifest.checks.key])))
    digests = {
        v.name: value_digest(values[v.name], known=loader.known, like=v.digest) if v.digest else None
        for v in manifest.variables
        if v.name in restored
    }
    probe.record_restore(manifest.id, digests, failed)
    lineage.advance(ctx.store.url, ctx.session, manifest.lineage, manifest.id)
    current = fingerprint.environment(ctx.config.node)
    if only is None:  # the outside world, once everything is back (``hooks``)
        notes += hooks.run(hooks.AFTER_RESUME, ctx.namespace)  # with the collector on (``collector``)
    if saved_rng is not None:  # the restore test says which stream no longer goes on as saved
        probe.record_rng_moved(manifest.id, rng.streams_moved(saved_rng))
    return ResumeResult(
        manifest=manifest,
        store_url=ctx.store.display_url,
        restored=restored,
        imported=imported,
        seconds=time.perf_counter() - started,
        skipped={n: r for n, r in failed.items() if n in wanted or n in manifest.imports},
        damaged=damaged,
        environment=fingerprint.differences(manifest.environment, current),
        notes=notes,
        rebuilt=rebuilt,
    )
