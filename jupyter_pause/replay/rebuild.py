"""Rebuild by replay: what cannot be saved is made again on resume by running the recorded
statements that made it (``history``), never by guessing.

At a checkpoint (``plan``) each variable that could not be saved gets a recipe: the last statement
that bound it and, for an object that lives only in memory, every later statement that changed
it (for an iterator, every later statement that used it), with the names they read. Each of those
must be saved, imported, a builtin, or rebuilt itself; variables whose statements read one another
(an iterator over a generator) are rebuilt together, their statements interleaved as they ran.

How far each object's slice goes is its *reach*:

- ``memory``: hash objects, ``itertools`` objects, widgets: the whole slice is replayed, so a hash
  fed twice is fed twice;
- ``iterator``: generators and other iterators: every later statement that used one is replayed,
  so one advanced N times is advanced N times;
- ``outside``: objects that reach outside the process (DB-API connections and cursors, sockets,
  files, subprocesses, HTTP sessions, TensorBoard writers, tracker runs, and any object of a kind
  this module does not know): only the statement that opened it is replayed. A statement that acts
  through one (``cur.execute("INSERT ...")``, ``writer.add_scalar(...)``) is never repeated, so a
  row inserted once stays once.

At a resume (``replay``), after the restore and before the restore test, the recipes run in the
order their statements first ran. **Replay never changes a restored variable**: the statements run
in the namespace itself (so generators and functions they make see its globals), and afterwards
every name that was there is bound again to the very object it held, and every new name the
statements bound, other than the variables being rebuilt, is removed: their other assignments are
dropped. A statement that changes a restored variable in place (``model.train()``, ``data.append(x)``)
is not replayed at all, and the recipe says which. The random streams are put back after each
replay, and what the statements print is swallowed. What replay cannot see: a function the
statements call that changes restored objects through its own globals.

A recipe that fails is named with its error and the resume goes on. Code that ran outside the cell
history (``%run``, a module's own code, ``exec``) cannot be replayed: what it made is named.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import units
from ..process import rng
from ..process.selection import IPYTHON_NAMES, type_name
from ..proof import observed, probe
from ..store.manifest import Manifest, RecipeRecord, ReplayStep, SkippedRecord
from . import history
from .history import BUILTINS, History, Statement
from .reach import ITERATOR, OPENERS, OUTSIDE, destructive, reach


def _short(source: str) -> str:
    line = source.strip().splitlines()[0] if source.strip() else ""
    return line if len(line) <= 60 and "\n" not in source.strip() else line[:57] + "..."


def _where(statement: Statement) -> str:
    return f"cell {statement.cell} ({_short(statement.source) if not statement.redacted else 'source not kept'})"


def _acts_through(statement: Statement, name: str) -> bool:
    """Whether ``statement`` changes the outside object ``name`` other than by opening another from it."""
    if name not in statement.changes:
        return False
    return not any(f"{name}.{opener}(" in statement.source for opener in OPENERS) or name in statement.assigns


@dataclass
class _Slice:
    """A target's statements (indices into the history), and why it cannot be rebuilt ("" when it can)."""

    indices: list[int] = field(default_factory=list)
    missing: str = ""
    notes: list[str] = field(default_factory=list)


def _slice(statements: list[Statement], name: str, how: str, recording: bool) -> _Slice:
    bound = [i for i, s in enumerate(statements) if name in s.assigns]
    if not bound:
        if not recording:
            return _Slice(
                missing="cells are not recorded in this kernel: load the extension (%load_ext jupyter_pause) first"
            )
        return _Slice(
            missing="no recorded cell assigns it: made by %run, exec or a module's own code, it cannot be replayed"
        )
    first = bound[-1]
    found = _Slice([first])
    for i in range(first + 1, len(statements)):
        s = statements[i]
        if s.opaque:
            found.notes.append(f"{_where(s)} ran after it was made and may have changed it; that is not replayed")
        elif how != OUTSIDE and (name in s.changes or (how == ITERATOR and name in s.reads)):
            found.indices.append(i)
    return found


def _inputs(statements: list[Statement], indices: list[int], own: set[str]) -> set[str]:
    """Names the statements read that none of them bound before."""
    made, needed = set(own), set()
    for i in indices:
        needed |= set(statements[i].reads) - made
        made |= set(statements[i].assigns)
    return needed


def plan(history: History, unsaved: dict[str, Any], saved: Iterable[str], imports: Iterable[str]) -> list[RecipeRecord]:
    """A recipe for each variable of ``unsaved`` (name -> live value), given what the checkpoint saves.

    Parameters
    ----------
    history
        The statements this kernel ran.
    unsaved
        The variables that could not be saved, and their values (to tell their reach).
    saved, imports
        The names the checkpoint saves, and those it imports again.
    """
    statements, restored = history.statements, set(saved)
    available = restored | set(imports) | BUILTINS | IPYTHON_NAMES
    reaches = {name: reach(value) for name, value in unsaved.items()}
    outside = {n for n, r in reaches.items() if r == OUTSIDE}
    slices = {n: _slice(statements, n, reaches[n], history.recording) for n in unsaved}
    for name, value in unsaved.items():
        why = destructive(value) if reaches[name] == OUTSIDE else ""
        if why and not slices[name].missing:
            slices[name].missing = why
    needs: dict[str, set[str]] = {}
    for name, found in slices.items():
        if found.missing:
            continue
        for i in list(found.indices):
            s = statements[i]
            why = _left_out(s, name, restored, outside)
            if why and i == found.indices[0]:
                found.missing = f"the statement that made it, {_where(s)}, {why}"
                break
            if why:
                found.indices.remove(i)
                found.notes.append(f"{_where(s)} not replayed: it {why}")
        needs[name] = _inputs(statements, found.indices, {name})
    _propagate(slices, needs, available)
    groups = _groups({n: needs[n] & set(slices) for n in needs if not slices[n].missing})
    recipes = []
    for name, value in unsaved.items():
        found = slices[name]
        indices = sorted({i for member in groups.get(name, {name}) for i in slices[member].indices})
        if not found.missing:
            found.notes += _stale_inputs(statements, indices, restored)
        steps = [] if found.missing else [ReplayStep(i, statements[i].cell, statements[i].source) for i in indices]
        recipes.append(
            RecipeRecord(
                name=name,
                type=type_name(value),
                reach=reaches[name],
                steps=steps,
                reads=sorted(needs.get(name, set()) - {name} - BUILTINS - IPYTHON_NAMES),
                missing=found.missing,
                notes=found.notes,
                observed="" if found.missing else observed.observe(value),
            )
        )
    return recipes


def _left_out(s: Statement, name: str, restored: set[str], outside: set[str]) -> str:
    """Why statement ``s`` of ``name``'s slice cannot be replayed ("" when it can)."""
    if s.redacted:
        return "may hold a secret, which the cell history never keeps"
    if not s.replayable:
        return "calls IPython (a magic or a shell command), which is never replayed"
    touched = sorted(set(s.changes) & restored)
    if touched:
        return f"also changes restored variable(s) {', '.join(touched)}"
    through = sorted(o for o in outside if o != name and _acts_through(s, o))
    if through:
        return f"acts through {', '.join(through)}, which reach(es) outside the process: never repeated"
    return ""


def _propagate(slices: dict[str, _Slice], needs: dict[str, set[str]], available: set[str]) -> None:
    """Mark missing each recipe that reads a name neither available nor rebuilt (until nothing changes)."""
    changed = True
    while changed:
        changed = False
        for name, found in slices.items():
            if found.missing:
                continue
            absent = sorted(n for n in needs[name] - {name} if n not in available and n not in slices)
            broken = sorted(n for n in needs[name] - {name} if n in slices and slices[n].missing)
            if absent:
                found.missing = f"needs {', '.join(absent)}, which the checkpoint does not hold"
            elif broken:
                found.missing = f"needs {', '.join(broken)}, which cannot be rebuilt"
            changed |= bool(found.missing)


def _groups(links: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each name -> the names it is rebuilt with (connected by reading one another)."""
    parent = {n: n for n in links}

    def root(n: str) -> str:
        while parent[n] != n:
            n = parent[n]
        return n

    for name, others in links.items():
        for other in others:
            if other in parent:
                parent[root(other)] = root(name)
    groups: dict[str, set[str]] = {}
    for name in links:
        groups.setdefault(root(name), set()).add(name)
    return {name: groups[root(name)] for name in links}


def _stale_inputs(statements: list[Statement], indices: list[int], restored: set[str]) -> list[str]:
    """A note for each saved input a statement read that a later statement, not replayed, changed."""
    notes, replayed = [], set(indices)
    for i in indices:
        for name in sorted(set(statements[i].reads) & restored):
            later = next(
                (
                    j
                    for j in range(i + 1, len(statements))
                    if j not in replayed and name in set(statements[j].assigns) | set(statements[j].changes)
                ),
                None,
            )
            if later is not None:
                notes.append(
                    f"{name} changed after {_where(statements[i])} read it ({_where(statements[later])}): "
                    "the replay reads its value at the checkpoint"
                )
    return notes


# -- replay ------------------------------------------------------------------------------------


@dataclass
class Rebuilt:
    """One variable a resume rebuilt, or tried to."""

    name: str
    type: str
    statements: int
    seconds: float
    error: str = ""
    notes: list[str] = field(default_factory=list)
    check: str = observed.NOT_CHECKABLE  # ``proof.observed``: checked, not checkable, or differs
    differs: str = ""  # what was seen at checkpoint time and now, when it differs


@dataclass
class Report:
    """What a resume rebuilt by replay, what it could not, and whether it was switched off."""

    rebuilt: list[Rebuilt] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # name -> why there was nothing to replay
    off: bool = False

    @property
    def done(self) -> list[str]:
        return [r.name for r in self.rebuilt if not r.error]

    def checks(self) -> dict[str, tuple[str, str]]:
        """Each variable rebuilt -> its check (``rebuilt and checked``, ``rebuilt, not checkable``
        or ``rebuilt, differs``) and what differs (``was ..., now ...``; "" unless it differs)."""
        return {r.name: (r.check, r.differs) for r in self.rebuilt if not r.error}

    def lines(self) -> list[str]:
        """The resume summary's lines about rebuilding."""
        if self.off:
            return (
                ["rebuild by replay is off: variables that could not be saved are not rebuilt"] if self.missing else []
            )
        lines = []
        for r in self.rebuilt:
            if r.error:
                lines.append(f"NOT rebuilt: {r.name} ({r.type}): {r.error}")
                continue
            took = units.duration(r.seconds)
            lines.append(f"{r.check}: {r.name} ({r.type}) by replay of {r.statements} statement(s) in {took}")
            if r.differs:
                lines.append(f"  {r.differs}: not the state it had at the checkpoint")
            lines += [f"  {note}" for note in r.notes]
        lines += [f"NOT rebuilt: {name}: {why}" for name, why in self.missing.items()]
        return lines


def replay(recipes: list[RecipeRecord], namespace: dict[str, Any], on: bool = True) -> Report:
    """Rebuild what the recipes can into ``namespace`` (see the module docstring); never raises for a recipe."""
    report = Report(missing={r.name: r.missing for r in recipes if r.missing}, off=not on)
    if not on:
        report.missing = {r.name: "rebuild by replay is off" for r in recipes}
        return report
    groups: dict[tuple[int, ...], list[RecipeRecord]] = {}
    for recipe in recipes:
        if not recipe.missing:
            groups.setdefault(tuple(step.index for step in recipe.steps), []).append(recipe)
    for indices in sorted(groups, key=lambda k: k[:1]):
        members = groups[indices]
        started = time.perf_counter()
        error = _run(members[0].steps, namespace, [m.name for m in members])
        seconds = time.perf_counter() - started
        for m in members:
            done = Rebuilt(m.name, m.type, len(m.steps), seconds, error, list(m.notes))
            if not error:
                done.check, done.differs = observed.check(m.observed, namespace[m.name])
            report.rebuilt.append(done)
    return report


def _run(steps: list[ReplayStep], namespace: dict[str, Any], targets: list[str]) -> str:
    """Run ``steps`` in ``namespace``, keep only ``targets`` of what they bound; the error ("" for none)."""
    before = dict(namespace)
    streams = rng.capture()
    made: dict[str, Any] = {}
    error = ""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            for step in steps:
                try:
                    exec(compile(step.source, f"<replay of cell {step.cell}>", "exec"), namespace)  # noqa: S102
                except Exception as e:  # a recipe that fails is named; the resume goes on
                    error = f"replaying cell {step.cell} ({_short(step.source)}) raised {type(e).__name__}: {e}"
                    break
        if not error:
            unbound = [t for t in targets if t not in namespace]
            made = {t: namespace[t] for t in targets if t in namespace}
            if unbound:
                error = f"its statements ran without binding {', '.join(unbound)}"
    finally:
        for name in [n for n in list(namespace) if n not in before]:  # list(): one step, a thread may bind names
            del namespace[name]
        for name, value in before.items():
            if namespace.get(name, _ABSENT) is not value:
                namespace[name] = value
        rng.restore(streams)
    if not error:
        namespace.update(made)
    return error


_ABSENT = object()


def on_resume(
    manifest: Manifest, blobs: dict[str, Any], namespace: dict[str, Any], on: bool
) -> tuple[Report, list[str]]:
    """A full resume's part: continue the checkpoint's cell history in this kernel, then replay its
    recipes (unless ``on`` is False) and remember the outcome for the restore test. Returns the
    report and notes for the resume summary."""
    notes = []
    ref = manifest.history
    if ref is not None and ref.key not in blobs:
        notes.append("cell history NOT restored: its blob is missing or damaged; what is made from now on is recorded")
    elif ref is not None:
        try:
            loaded = History.from_bytes(blobs[ref.key])
        except ValueError as e:
            notes.append(f"cell history NOT restored: {e}")
        else:
            loaded.recording = history.current.recording  # whether this kernel records its cells
            history.current = loaded
    report = replay(manifest.recipes, namespace, on)
    outcomes = {r.name: r.error for r in report.rebuilt}
    probe.record_rebuilt(manifest.id, {**{n: w for n, w in report.missing.items()}, **outcomes}, report.checks())
    return report, notes


def skipped_line(record: SkippedRecord, recipe: RecipeRecord | None) -> str:
    """How a checkpoint's summary names a variable it could not save: rebuilt on resume, or lost (and why)."""
    if recipe is None:
        return f"{record.name} ({record.type}): {record.reason}"
    if recipe.missing:
        return f"{record.name} ({record.type}): {record.reason}; cannot be rebuilt on resume: {recipe.missing}"
    how = {OUTSIDE: " (only the statement that opened it: it reaches outside the process)"}.get(recipe.reach, "")
    return f"{record.name} ({record.type}): rebuilt on resume from {len(recipe.steps)} statement(s){how}"
