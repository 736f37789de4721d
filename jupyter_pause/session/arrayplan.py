"""Where each captured array's bytes go: the device fingerprints decide what stays on its device
(``devicehash``), the model files the kernel loaded what is referenced (``modelfiles``), and the
rest is planned into blobs (``serialize.packing``), skipping the hash of what nothing wrote to
since the last checkpoint (``serialize.writewatch``). The process's memory map is read once for
all of them (``store.mapping.process_maps``)."""

from __future__ import annotations

from typing import Any

from ..proof import modelcheck
from ..serialize import devicehash, writewatch
from ..serialize.packing import ArrayPlan, plan_arrays
from ..serialize.pickler import DumpResult
from ..store import mapping
from ..store.modelfiles import ModelFile
from . import lineage, modelfiles
from .context import Context


def offer(
    ctx: Context, values: dict[str, Any], algorithm: str
) -> tuple[mapping.ProcessMaps, modelfiles.Offered | None]:
    """The process's memory, read once for the checkpoint (the model files loaded, the memory whose
    writes are tracked), and the model files offered to the store (none with model files off)."""
    maps = mapping.process_maps()
    offered = modelfiles.offer(ctx.store, values.values(), algorithm, maps.files) if ctx.config.model_files else None
    return maps, offered


def _known_storages(collector: Any, seen: devicehash.Seen | None) -> modelcheck.Known:
    """The device fingerprints this capture took, by storage: a model check need not take them again."""
    known: modelcheck.Known = {}
    for key, fp in (seen.fingerprints if seen else {}).items():
        storage = collector.found[key].keepalive
        known[(str(storage.device), storage.data_ptr(), storage.nbytes())] = f"{seen.seed}:{fp}"
    return known


def plan(
    ctx: Context,
    position: lineage.Position,
    dump: DumpResult,
    offered: modelfiles.Offered | None,
    algorithm: str,
    defer_hashing: bool,
    maps: mapping.ProcessMaps,
) -> tuple[devicehash.Seen | None, modelcheck.Known, list[ModelFile], ArrayPlan]:
    """Bring to host what changed on its device since the parent checkpoint, then plan every
    array's blob (a model file's tensors as references): what the device fingerprints saw, the
    fingerprints by storage (for the model checks), the model files, and the plan (``maps``: the
    process's memory, as the checkpoint read it once)."""
    before = devicehash.previous(ctx.store, ctx.session, position.parent, ctx.config.keyring)
    seen = devicehash.skip_unchanged(dump.collector, ctx.store, ctx.session, before, algorithm)
    device_known = _known_storages(dump.collector, seen)
    dump.collector.gather()  # only what changed on its device since the last checkpoint
    files = offered.ready() if offered is not None else []
    indexed = {f.index.file for f in files if f.index.algorithm == algorithm}
    if devicehash.release(dump.collector, seen, before, indexed):
        dump.collector.gather()  # kept as references it can no longer make: copied after all
    known = before.references if before is not None else None
    matcher = modelfiles.matcher(files, algorithm, known, offered.mappings if offered is not None else None)
    tracked = writewatch.memory(maps) if ctx.config.track_writes else None  # where writes are tracked
    arrays = plan_arrays(dump, algorithm, defer=defer_hashing, files=matcher, watch=tracked)
    return seen, device_known, files, arrays
