"""What a checkpoint records for the restore test while the live values are at hand: each saved
variable's record and value digest, the rehearsal of the small ones, the library fingerprints,
and the model checks.

The model checks run in a thread of their own (a forward pass releases the GIL). A module that
changed since its last check has its forward pass started as the capture begins (``start``), on
its eval-mode twin (``proof.twin``): the live modules keep their modes, so the pass runs while
the capture pickles and digests them. Which changed storages the check records is known only
once the capture has fingerprinted them, so ``take`` finishes the checks after that. A module
no twin can stand in for is switched to eval mode for its pass: its check starts only once
everything that reads the modules has read them (the pickle, the digests, the rehearsal, which
pickles the small ones again, and the fingerprints), so the capture's remaining work (the
process settings, the local modules) and the writing overlap it.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from ..process.selection import type_name
from ..proof import libvalues, modelcheck
from ..proof.rehearsal import Rehearsal, rehearse
from ..serialize.digests import Known, value_digest
from ..serialize.pickler import DumpResult
from ..store import signing, workers
from ..store.manifest import ArrayRecord, BlobRef, VariableRecord
from ..vocabulary import Trigger

#: Triggers of a checkpoint with little time left to take it: no rehearsal (``proof.rehearsal``).
HURRIED = frozenset({Trigger.SIGTERM, Trigger.SPOT})

#: The process's thread the model checks run in, one check after the other (``store.workers``).
CHECKS = "jupyter-pause-check"

#: Variables whose pickled form is larger than this get no value digest (their blobs' checksums
#: still cover them); digesting a huge object graph in Python would cost more than saving it.
DIGEST_MAX_SEGMENT_BYTES = 4 << 20


@dataclass
class Evidence:
    """The variables' records, their pickled segments by blob key, the rehearsal, the library
    fingerprints, and the model checks under way (module name -> recorded check, or why none)."""

    variables: list[VariableRecord]
    segments: dict[str, bytes]
    rehearsal: Rehearsal
    fingerprints: dict[str, dict[str, Any]]
    models: Future[dict[str, Any]]


#: Module name -> its forward pass under way on its twin, None where it has none (``start``).
Started = dict[str, Future[modelcheck.ModelCheck | str | None]]


def start(values: dict[str, Any]) -> Started:
    """Start the forward pass of each module among ``values`` that likely changed since its last
    check (``modelcheck.likely_changed``) on its eval-mode twin, where one can stand in for it
    (made on the checks' thread too: a pass found None ran nothing). Call it once the process's
    random streams are captured (a pass forks them) and before the pickling it is to overlap."""
    started: Started = {}
    for name, value in values.items():
        if modelcheck.is_module(value) and modelcheck.likely_changed(value) and _has_parameters(value):
            started[name] = workers.shared(CHECKS, 1).submit(modelcheck.forward_on_twin, value)
    return started


def take(
    values: dict[str, Any],
    dump: DumpResult,
    arrays: dict[str, ArrayRecord],
    known: Known,
    device_known: modelcheck.Known,
    algorithm: str,
    trigger: str,
    started: Started,
) -> Evidence:
    """Digest and rehearse the saved variables of ``dump`` (``known``: the digests already taken
    of their storages, every one of them), take their library fingerprints, then finish the
    model checks of the modules among them (``started``: their passes under way)."""
    variables, segments = [], {}
    for name, segment in dump.segments.items():
        key = signing.digest(segment.data, algorithm)
        segments[key] = segment.data
        value = values[name]
        variables.append(
            VariableRecord(
                name=name,
                type=type_name(value),
                kind=_kind(value),
                blob=BlobRef(key=key, size=len(segment.data)),
                arrays=segment.arrays,
                pickler=segment.pickler,
                digest=_digest(value, known) if len(segment.data) <= DIGEST_MAX_SEGMENT_BYTES else None,
            )
        )
    digests = {v.name: v.digest for v in variables}
    rehearsal = Rehearsal()
    if trigger not in HURRIED:
        rehearsal = rehearse(values, dump.segments, digests, _array_bytes(dump, arrays))
    fingerprints = libvalues.record(values, digests)  # for library upgrades
    modules = {v.name: values[v.name] for v in variables if v.kind == "module" and _has_parameters(values[v.name])}
    checks_known = {**device_known, **{where: digest.hex() for where, digest in known.items()}}
    models = workers.shared(CHECKS, 1).submit(_model_checks, modules, checks_known, started)
    return Evidence(variables, segments, rehearsal, fingerprints, models)


def unproven(models: dict[str, Any]) -> list[str]:
    """A note per module the restore test will not be able to prove, with why (for the summary)."""
    return [
        f"the restore test cannot prove model {name}: {recorded['none']}"
        for name, recorded in models.items()
        if "none" in recorded
    ]


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


def _has_parameters(module: Any) -> bool:
    return any(True for _ in module.parameters())


def _model_checks(modules: dict[str, Any], known: modelcheck.Known, started: Started) -> dict[str, Any]:
    """Per module, its recorded forward pass (or why there is none): a module none of whose
    storages changed since its last check is not run again (``modelcheck.record``), and its
    storages are not read again to tell (``known``). Run on the checks' own thread, after the
    passes ``started`` there: those are done."""
    models: dict[str, Any] = {}
    for name, module in modules.items():
        ran = started[name].result() if name in started else None
        check = modelcheck.record(module, known, ran)
        models[name] = check.to_record() if isinstance(check, modelcheck.ModelCheck) else {"none": check}
    return models


def _digest(value: Any, known: Known) -> str | None:
    """The value's digest, or None where reading it meets a dead weak proxy (a stream handler's
    ipykernel stream holds one): the variable is saved all the same, only not digested."""
    try:
        return value_digest(value, known=known)
    except ReferenceError:
        return None


def _array_bytes(dump: DumpResult, arrays: dict[str, ArrayRecord]) -> dict[str, int]:
    """Bytes of the arrays and tensor storages each saved variable holds out of band."""
    return {
        name: sum(arrays[k].nbytes for k in segment.arrays if k in arrays) for name, segment in dump.segments.items()
    }
