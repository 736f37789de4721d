"""The restore test: is this kernel really holding a checkpoint's state, and how much of it?

Four verdicts:

- ``restored``: another process than the one that checkpointed, holding the probe value, every
  variable matching its recorded digest, and every recorded model check reproducing (bit-identical,
  or on another processor, GPU or library within the tolerance of the precision it computes in);
- ``partial``: the probe is back but some state is missing or differs (named, with why);
- ``fresh``: the kernel holds none of the checkpoint's state, whatever files it has open;
- ``live``: the very process that took the checkpoint: nothing was released.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import IntegrityError
from ..serialize import moved
from ..serialize.digests import comparable, format_of, value_digest
from ..store.integrity import fetch
from ..store.manifest import Manifest
from ..store.storage import Store
from . import fingerprint, hardware, libvalues, modelcheck, observed, outputs, probe

KINDS = ("restored", "partial", "fresh", "live")

#: A variable present but not compared: no digest was taken (too large), or the checkpoint
#: recorded one in a format this version does not compute (a newer release's).
TOO_LARGE = "present, too large to compare"
UNKNOWN_FORMAT = "present, its digest is of a format this version does not know: not compared"

#: A variable whose digest differs, with no reason known for it.
DIFFERS = "differs from the checkpoint"

#: A variable that differs as the checkpoint said it would (``proof.rehearsal``), with its reason.
NAMED_AT_CHECKPOINT = "differs from the checkpoint, as named when it was taken"

#: Said of random streams that something drew from during the resume, after it restored them.
STREAMS_MOVED = (
    "random streams drawn from during the resume, after it restored them (what the session draws next "
    "differs from an uninterrupted run; run the cell that seeds them again, or resume again)"
)

#: Said of a checkpoint captured inside a running cell, outside any safe point.
MID_CELL = (
    "the state was captured mid-cell (SIGTERM while a cell ran, outside any safe point): what that "
    "cell was changing may be halfway updated; run the cell again from its start"
)


@dataclass
class Verdict:
    """The outcome of a restore test, with what it is based on."""

    kind: str
    checkpoint: str
    session: str
    details: list[str] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    changed: dict[str, str] = field(default_factory=dict)
    probe: bool = False
    #: Variables the resume rebuilt by replay ("") or could not (why): never digest-verified, as
    #: they were never saved (see ``replay.rebuild``).
    rebuilt: dict[str, str] = field(default_factory=dict)
    #: Random streams (``python``, ``numpy``, ``torch``, ``cuda``) the resume left elsewhere than
    #: the checkpoint saved them: what the session draws next differs from an uninterrupted run.
    streams_moved: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The verdict word, then the evidence a person checks it against."""
        lines = [f"verdict: {self.kind} (checkpoint {self.checkpoint} of session {self.session!r})"]
        lines += [f"  {d}" for d in self.details]
        for name, status in self.variables.items():
            if status != "matches":
                lines.append(f"  {name}: {status}")
        for name, status in self.models.items():
            lines.append(f"  model check {name}: {status}")
        for name, what in self.changed.items():
            lines.append(f"  {name}: {what} (not a restore problem)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


class Target(Protocol):
    """What a restore test looks at: a session of a store, and the namespace that should hold it."""

    store: Store
    session: str
    namespace: dict[str, Any]


def _same_process(manifest: Manifest) -> bool:
    saved, now = manifest.process, fingerprint.process_identity()
    return all(saved.get(k) == now[k] for k in ("pid", "start", "host", "token"))


def _variable_status(
    manifest: Manifest, namespace: dict[str, Any], taken: dict[str, str | None] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """Per variable: ``matches`` or what is wrong; and what the user changed since the resume.

    ``taken`` holds digests of the namespace taken a moment ago (by the resume itself), used
    instead of digesting the same values again.
    """
    restored = probe.as_restored(manifest.id)
    failures = probe.restore_failures(manifest.id)
    status: dict[str, str] = {}
    changed: dict[str, str] = {}
    for record in manifest.variables:
        name = record.name
        if name not in namespace:
            if name in restored:
                changed[name] = "deleted since the resume"
            else:
                status[name] = f"missing ({failures[name]})" if name in failures else "missing"
                if name in manifest.inexact:
                    status[name] += f", as named when it was taken: {manifest.inexact[name]}"
            continue
        if record.digest is None:
            status[name] = "matches" if name in restored else TOO_LARGE
            continue
        if not comparable(record.digest):
            status[name] = UNKNOWN_FORMAT
            continue
        ready = taken.get(name, "") if taken is not None else ""
        if ready is None or (ready and format_of(ready) == format_of(record.digest)):
            now = ready
        else:  # in the format the checkpoint recorded: like is compared with like
            now = value_digest(namespace[name], like=record.digest)
        if now == record.digest:
            status[name] = "matches"
        elif name in restored and restored[name] == record.digest:
            changed[name] = "changed since the resume"
        elif name in manifest.inexact:  # no surprise: the checkpoint named it
            status[name] = f"{NAMED_AT_CHECKPOINT}: {manifest.inexact[name]}"
        else:
            status[name] = DIFFERS
    return status, changed


def _library_upgrades(
    manifest: Manifest, status: dict[str, str], changed: dict[str, str], checks: dict[str, Any], namespace: Any
) -> tuple[list[str], int]:
    """Variables whose digest differs after a library they depend on changed version, compared by
    the value fingerprints the checkpoint recorded (``libvalues``): those that agree match, and one
    line per library names them; the others say what differs, unless the user changed them since
    the resume. ``status`` and ``changed`` are updated in place; returns those lines and how many
    agreed."""
    restored = probe.as_restored(manifest.id)
    rechecked: dict[str, libvalues.Recheck] = {}
    for name, recorded in checks.get("values", {}).items():
        check = libvalues.recheck(recorded, namespace[name]) if status.get(name) == DIFFERS else None
        if check is None:
            continue
        then = restored.get(name)
        if not check.agrees and then is not None and value_digest(namespace[name], like=then) != then:
            del status[name]
            changed[name] = "changed since the resume"
            continue
        rechecked[name] = check
        status[name] = "matches" if check.agrees else check.status()
    return libvalues.agreed_lines(rechecked), sum(c.agrees for c in rechecked.values())


def _model_status(
    manifest: Manifest, checks: dict[str, Any], namespace: dict[str, Any], changed: dict[str, str]
) -> tuple[dict[str, str], str]:
    """Per model, how its check went; and one line: where this resume runs relative to the
    checkpoint, and how the models' outputs compare overall ("" when no check ran)."""
    results: dict[str, str] = {}
    ran: list[outputs.Comparison] = []
    then = manifest.environment.get("hardware")
    for name, recorded in checks.get("models", {}).items():
        if "none" in recorded:
            results[name] = f"not possible: {recorded['none']}"
            continue
        if name in changed or name not in namespace:
            continue
        check = modelcheck.ModelCheck(**recorded)
        result = modelcheck.reproduce(namespace[name], check, (then or {}).get("precision"))
        results[name] = ("reproduces: " if result.ok else "FAILED: ") + result.how
        ran.append(result)
    if not ran:
        return results, ""
    where = hardware.where(then, hardware.describe())
    failed = sum(not r.ok for r in ran)
    if failed:
        return results, f"resumed {where}: {failed} of {len(ran)} model check(s) FAILED (below)"
    if all(r.exact for r in ran):
        return results, f"resumed {where}: model outputs bit-identical"
    held = "/".join(dict.fromkeys(t.label for r in ran for t in r.tolerances))
    worst = max(r.worst for r in ran)
    return results, f"resumed {where}: model outputs agree within {held} tolerance (largest difference {worst:.2g})"


def _rebuilt_counts(
    matched: int, rebuilt: dict[str, str], namespace: dict[str, Any], checks: dict[str, tuple[str, str]]
) -> str:
    """``; 9 restored, 3 rebuilt by replay ...`` for a resume that rebuilt variables ("" when none),
    with how many of those were checked against the state they had (``proof.observed``)."""
    if not rebuilt:
        return ""
    done = [n for n, why in rebuilt.items() if not why and n in namespace]
    lost = [n for n in rebuilt if n not in done]
    outcomes = Counter(checks[n][0] if n in checks else observed.NOT_CHECKABLE for n in done)
    how = "".join(f"; {count} {outcome}" for outcome, count in sorted(outcomes.items()))
    text = f"; {matched} restored, {len(done)} rebuilt by replay (not digest-verified: they were never saved{how})"
    return text + (f"; not rebuilt: {', '.join(lost)}" if lost else "")


def _read_checks(store: Store, manifest: Manifest) -> dict[str, Any]:
    """The checkpoint's checks blob, read from the store and verified."""
    assert manifest.checks is not None
    good, bad = fetch(store, manifest, [manifest.checks.key])
    if bad:
        raise IntegrityError(f"checkpoint {manifest.id}: its checks blob is {bad[manifest.checks.key]}")
    return moved.loads(bytes(good[manifest.checks.key]))


def verify_manifest(ctx: Target, manifest: Manifest, taken: dict[str, str | None] | None = None) -> Verdict:
    """The restore test of ``ctx.namespace`` against a known checkpoint; ``taken``: digests of the
    namespace just taken."""
    verdict = Verdict(kind="fresh", checkpoint=manifest.id, session=ctx.session)
    if _same_process(manifest):
        verdict.kind = "live"
        verdict.details.append(
            f"this is the kernel process that took the checkpoint (pid {manifest.process.get('pid')}); "
            "nothing was released: pause it to give its resources back"
        )
        return verdict
    held = probe.held(manifest.id)
    verdict.probe = held is not None and probe.fingerprint(held) == manifest.probe
    if not verdict.probe:
        present = [v.name for v in manifest.variables if v.name in ctx.namespace]
        verdict.details.append(
            "the probe value of the paused kernel is not in this kernel: it holds none of the "
            "checkpoint's state"
            + (f" (its {len(present)} variable(s) of the same names were made here)" if present else "")
        )
        verdict.details.append(f"run %resume {manifest.id} (or jupyter_pause.resume()) to bring the session back")
        return verdict
    checks: dict[str, Any] = {}
    if manifest.checks is not None:  # as the restore loaded it, else read (a later restore test)
        loaded = probe.checks(manifest.checks.key)
        checks = _read_checks(ctx.store, manifest) if loaded is None else loaded
    verdict.variables, verdict.changed = _variable_status(manifest, ctx.namespace, taken)
    upgrades, by_value = _library_upgrades(manifest, verdict.variables, verdict.changed, checks, ctx.namespace)
    verdict.models, hardware_line = _model_status(manifest, checks, ctx.namespace, verdict.changed)
    wrong = {n: s for n, s in verdict.variables.items() if s not in ("matches", TOO_LARGE, UNKNOWN_FORMAT)}
    failed_models = [n for n, s in verdict.models.items() if s.startswith("FAILED")]
    matched = sum(s == "matches" for s in verdict.variables.values())
    verdict.rebuilt = {n: why for n, why in probe.rebuilt(manifest.id).items() if n not in verdict.variables}
    rebuilt_checks = probe.rebuilt_checks(manifest.id)
    differs = {
        n: what for n, (outcome, what) in rebuilt_checks.items() if outcome == observed.DIFFERS and n in verdict.rebuilt
    }
    verdict.details.append(
        f"probe value of the paused kernel is back; {matched - by_value} of {len(manifest.variables)} variable(s) "
        "match their digests"
        + (f", {by_value} by value fingerprint after a library upgrade" if by_value else "")
        + _rebuilt_counts(matched, verdict.rebuilt, ctx.namespace, rebuilt_checks)
    )
    verdict.details += upgrades  # "loaded from scikit-learn 1.7.2 into 1.9.1: clf; outputs agree"
    verdict.details += [f"{n}: {observed.DIFFERS}: {what}" for n, what in differs.items()]  # not the state it had
    if hardware_line:
        verdict.details.append(hardware_line)
    verdict.details += manifest.loop_notes  # what running the cell again does with its loops
    verdict.streams_moved = probe.rng_moved(manifest.id)
    if verdict.streams_moved:
        verdict.details.append(f"{STREAMS_MOVED}: {', '.join(verdict.streams_moved)}")
    if wrong or failed_models or differs or verdict.streams_moved:
        verdict.kind = "partial"
        named = [f"{n} (named at checkpoint)" if n in manifest.inexact else n for n in wrong]
        named += [f"{n} ({observed.DIFFERS})" for n in differs]
        named += [f"random stream {n}" for n in verdict.streams_moved]
        verdict.details.append("not back: " + ", ".join(named + [f"model check of {n}" for n in failed_models]))
    else:
        verdict.kind = "restored"
    if manifest.mid_cell:
        verdict.details.append(MID_CELL)
    return verdict
