"""Library values across a library upgrade: fingerprints of what they are, and the check after a resume.

When the notebook image is upgraded while a session is paused, the variables whose types come
from an upgraded library load, but their pickled form, and with it their value digest, changed
with the library: a DataFrame's block layout, an estimator's ``_sklearn_version``. At checkpoint
time each variable of a family below gets a value fingerprint that no library release changes
(``record``), with the versions of the libraries it depends on; the restore test, finding such a
variable's digest changed after one of them changed version, takes the fingerprint again and
compares (``recheck``). The families (a small registry: add one here):

- ``frame``: a pandas DataFrame, Series or Index, by its values (``frames``);
- ``estimator``: a fitted estimator, by its outputs on a few recorded rows (``estimators``).

NumPy arrays need none: their digest is of their dtype, shape and bytes already. Only variables
with a digest are fingerprinted (the others are not compared at all), and a fingerprint is taken
once per value: a variable whose digest (and input) did not change since the last checkpoint
reuses it.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from . import estimators, fingerprint, frames

#: The format of the records; a record of another is not compared.
VERSION = 1
#: Import names whose distribution is named otherwise, looked up without scanning every package.
DISTRIBUTIONS = {"sklearn": "scikit-learn", "skimage": "scikit-image", "PIL": "pillow", "cv2": "opencv-python"}
#: Fingerprints kept for values that have not changed since.
CACHED = 256


@dataclass(frozen=True)
class Family:
    """A kind of library value fingerprinted by what it is rather than by how it pickles."""

    name: str
    #: What agrees when two fingerprints do ("values", "outputs"), by the fingerprint.
    evidence: Callable[[dict[str, Any]], str]
    accepts: Callable[[Any], bool]
    #: (value, the session's values) -> fingerprint; raises ``NoFingerprint``'s causes.
    take: Callable[[Any, dict[str, Any]], dict[str, Any]]
    #: (value, recorded fingerprint) -> the fingerprint now, on what was recorded.
    again: Callable[[Any, dict[str, Any]], dict[str, Any]]
    compare: Callable[[dict[str, Any], dict[str, Any]], tuple[bool, str]]
    #: The classes a value depends on, besides NumPy (``libraries``).
    classes: Callable[[Any], list[type]]
    #: Libraries every value of the family depends on.
    also: tuple[str, ...]


FAMILIES = (
    Family(
        name="frame",
        evidence=lambda _: "values",
        accepts=frames.is_pandas,
        take=lambda value, _: frames.fingerprint(value),
        again=lambda value, _: frames.fingerprint(value),
        compare=frames.compare,
        classes=lambda value: [type(value)],
        also=("pandas", "numpy"),
    ),
    Family(
        name="estimator",
        evidence=estimators.evidence,
        accepts=lambda value: estimators.is_estimator(value),
        take=estimators.fingerprint,
        again=estimators.again,
        compare=estimators.compare,
        classes=estimators.libraries,
        also=("numpy",),
    ),
)
_BY_NAME = {f.name: f for f in FAMILIES}
#: Why there is no fingerprint, by exception type: a value the family cannot read this time.
_REASONS = (estimators.NoInput, frames.Unrecordable)


def family_of(value: Any) -> Family | None:
    """The family that fingerprints ``value``, if any."""
    for family in FAMILIES:
        try:
            if family.accepts(value):
                return family
        except Exception:  # an object that raises when this family looks at it: the next family's
            continue
    return None


@functools.lru_cache(maxsize=None)
def _all_distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()


@functools.lru_cache(maxsize=None)
def distribution(module: str) -> str | None:
    """The installed distribution that provides the top-level package of ``module``."""
    top = module.partition(".")[0]
    if not top or top in ("__main__", "builtins"):
        return None
    for name in (DISTRIBUTIONS.get(top), top):
        if name is not None and version(name) is not None:
            return name
    found = _all_distributions().get(top)
    return found[0] if found else None


#: The installed version of a distribution (read once per process).
version = fingerprint.version


def libraries(family: Family, value: Any, extra: Iterable[str] = ()) -> dict[str, str]:
    """Distribution -> version of what ``value`` depends on: its classes' first, then the family's."""
    names = [distribution(getattr(kind, "__module__", None) or "") for kind in family.classes(value)]
    found: dict[str, str] = {}
    for name in [*names, *family.also, *extra]:
        if name and name not in found and (v := version(name)) is not None:
            found[name] = v
    return found


#: (family, value digest) -> the record taken, and the digest of the session value its input came from.
_cache: OrderedDict[tuple[str, str], tuple[dict[str, Any], str | None]] = OrderedDict()


def _source(entry: dict[str, Any]) -> str:
    """The session variable an estimator's input came from ("" for none, or made up)."""
    source = entry.get("fingerprint", {}).get("input", {}).get("source", "")
    return "" if source == estimators.MADE_UP else source


def _cached(key: tuple[str, str], digests: dict[str, str | None]) -> dict[str, Any] | None:
    """The record taken of this value before, if what its input came from is unchanged too."""
    hit = _cache.get(key)
    if hit is None:
        return None
    entry, source_digest = hit
    source = _source(entry)
    if source and (source_digest is None or digests.get(source) != source_digest):
        return None
    _cache.move_to_end(key)
    return entry


def record(values: dict[str, Any], digests: dict[str, str | None]) -> dict[str, dict[str, Any]]:
    """Per variable of a family that has a digest: its fingerprint (or why none) and its libraries.

    ``values`` are the session's variables (estimators' inputs are looked for among them too);
    ``digests`` their value digests as just taken.
    """
    found: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        digest = digests.get(name)
        family = family_of(value) if digest is not None else None
        if family is None or digest is None:
            continue
        key = (family.name, digest)
        entry = _cached(key, digests)
        if entry is None:
            entry = _take(family, value, values)
            source = _source(entry)
            _cache[key] = (entry, digests.get(source) if source else None)
            while len(_cache) > CACHED:
                _cache.popitem(last=False)
        found[name] = entry
    return found


def _take(family: Family, value: Any, values: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"version": VERSION, "family": family.name}
    try:
        entry["fingerprint"] = family.take(value, values)
    except _REASONS as e:
        entry["none"] = str(e)
    except Exception as e:  # a library object that breaks reading it: named, the checkpoint goes on
        entry["none"] = f"reading it failed: {type(e).__name__}: {e}"
    frame_input = entry.get("fingerprint", {}).get("input", {}).get("kind") == "frame"
    entry["libraries"] = libraries(family, value, ("pandas",) if frame_input else ())
    return entry


@dataclass(frozen=True)
class Recheck:
    """A variable checked by its fingerprint after a library it depends on changed version."""

    library: str
    before: str
    after: str
    evidence: str
    agrees: bool
    how: str
    #: False where no fingerprint could be compared (``how`` says why): the digest's difference stands.
    compared: bool = True

    @property
    def upgrade(self) -> str:
        """``scikit-learn 1.7.2 -> 1.9.1``."""
        return f"{self.library} {self.before} -> {self.after}"

    def status(self) -> str:
        """What the restore test says of a variable that does not agree."""
        if not self.compared:
            return f"differs from the checkpoint, after {self.upgrade}; not compared by value: {self.how}"
        return f"{self.evidence} differ after {self.upgrade} ({self.how})"


def upgraded(recorded: dict[str, Any]) -> tuple[str, str, str] | None:
    """The first library of a record whose version changed since: (name, then, now)."""
    for name, then in recorded.get("libraries", {}).items():
        now = version(name)
        if now != then:
            return name, then, now or "absent"
    return None


def recheck(recorded: dict[str, Any], value: Any) -> Recheck | None:
    """Compare a variable whose digest differs with its recorded fingerprint; None when no library
    it depends on changed version (then the digest's difference stands)."""
    changed = upgraded(recorded)
    if changed is None:
        return None
    family = _BY_NAME.get(recorded.get("family", ""))
    if family is None or recorded.get("version") != VERSION:
        return Recheck(*changed, "values", False, "its fingerprint is of a kind this version does not know", False)
    if "none" in recorded:
        return Recheck(*changed, "values", False, f"none was recorded: {recorded['none']}", False)
    evidence = family.evidence(recorded["fingerprint"])
    if family_of(value) is not family:
        return Recheck(*changed, evidence, False, f"it is now a {type(value).__qualname__}")
    try:
        ok, how = family.compare(family.again(value, recorded["fingerprint"]), recorded["fingerprint"])
    except Exception as e:  # the value no longer reads or runs: it differs, saying how
        return Recheck(*changed, evidence, False, f"taking its fingerprint again failed: {type(e).__name__}: {e}")
    return Recheck(*changed, evidence, ok, how)


def agreed_lines(checks: dict[str, Recheck]) -> list[str]:
    """One line per upgraded library naming the variables that agree, e.g. ``loaded from
    scikit-learn 1.7.2 into 1.9.1: clf, forest; outputs agree``."""
    groups: dict[tuple[str, str, str], list[tuple[str, Recheck]]] = {}
    for name, check in checks.items():
        if check.agrees:
            groups.setdefault((check.library, check.before, check.after), []).append((name, check))
    lines = []
    for (library, before, after), members in groups.items():
        evidence = " and ".join(sorted({c.evidence for _, c in members}))
        gaps = [c.how for _, c in members if c.how.startswith("largest")]
        worst = f" ({max(gaps, key=lambda h: float(h.rsplit(' ', 1)[1]))}, within tolerance)" if gaps else ""
        names = ", ".join(n for n, _ in members)
        lines.append(f"loaded from {library} {before} into {after}: {names}; {evidence} agree{worst}")
    return lines


def _warned_by(message: warnings.WarningMessage, files: dict[str, str]) -> str:
    """The library a warning came from: its category's, else the one whose code issued it
    (``files``: module by file, of the modules loaded)."""
    module = message.category.__module__
    if module == "builtins":
        module = files.get(message.filename, "the notebook's code")
    return distribution(module) or module.partition(".")[0]


def warned(caught: list[warnings.WarningMessage]) -> list[str]:
    """One line for the warnings the libraries gave while the resume loaded the variables (none
    for none): per library, how many of which kind (a library pickled by another version of itself
    warns once per object; the restore test weighs what the values hold)."""
    counts: dict[str, Counter[str]] = {}
    files: dict[str, str] = {}
    if any(message.category.__module__ == "builtins" for message in caught):  # look the modules up once
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str):
                files.setdefault(path, name)
    for message in caught:
        counts.setdefault(_warned_by(message, files), Counter())[message.category.__name__] += 1
    if not counts:
        return []
    parts = [
        f"{library}: " + ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
        for library, kinds in counts.items()
    ]
    return ["warnings while loading (gathered, not shown one by one): " + "; ".join(parts)]
