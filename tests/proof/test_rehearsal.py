"""The checkpoint's rehearsal of the restore (``proof.rehearsal``): a variable that will not come
back the same is named when the checkpoint is taken, with why, and the restore test says it was;
everything else is left alone, and large arrays never go through it.

"Another process" is a new process token and forgotten state (``tests.support.processes``), as in
``tests/proof/test_verdict.py``; ``tests/serialize/test_plotting.py`` resumes in real new processes.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

import jupyter_pause as jp
from jupyter_pause.proof import rehearsal
from jupyter_pause.proof.verdict import NAMED_AT_CHECKPOINT
from jupyter_pause.serialize.digests import value_digest
from jupyter_pause.serialize.pickler import dump_variables
from tests.support.dumping import notebook
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")

CRAFTED = """
class Dropper:
    "Pickles only its constructor argument: what was added to it later does not come back."
    def __init__(self, n):
        self.n = n
        self.cache = {"double": n * 2}
    def __reduce__(self):
        return (Dropper, (self.n,))

def refuse(n):
    raise ValueError(f"cannot rebuild from {n}")

class Unloadable:
    "Pickles, but its rebuild raises."
    def __reduce__(self):
        return (refuse, (7,))

d = Dropper(3)
d.cache["seen"] = True
broken = Unloadable()
"""

NORMAL = """
import collections, dataclasses, datetime, decimal, fractions
import numpy as np
import pandas as pd

@dataclasses.dataclass
class Point:
    x: float
    y: float

def scale(p, k=2):
    return Point(p.x * k, p.y * k)

lr, name, flags = 0.01, "run-3", {"a", "b"}
config = {"layers": [64, 64], "dropout": 0.1, "when": datetime.datetime(2024, 1, 2)}
points = [Point(i, -i) for i in range(50)]
counts = collections.Counter("abracadabra")
groups = collections.defaultdict(list, {"x": [1]})
recent = collections.deque([1, 2, 3], maxlen=5)
money, ratio = decimal.Decimal("1.50"), fractions.Fraction(3, 4)
table = pd.DataFrame({"a": np.arange(100), "b": np.linspace(0, 1, 100), "c": ["x"] * 100})
small = np.arange(12.0).reshape(3, 4)
"""


def _rehearse(values: dict[str, Any], **bounds: int) -> rehearsal.Rehearsal:
    """Rehearse ``values`` as a checkpoint does: their dump, their digests, their arrays' bytes."""
    dump = dump_variables(values)
    digests = {name: value_digest(values[name]) for name in dump.segments}
    arrays = {
        name: sum(dump.collector.found[k].size for k in segment.arrays) for name, segment in dump.segments.items()
    }
    return rehearsal.rehearse(values, dump.segments, digests, arrays, **bounds)


def _variables(ns: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ns.items() if not k.startswith("__") and type(v).__name__ != "module"}


def test_what_will_not_come_back_exactly_is_named_at_checkpoint_and_still_saved(tmp_path: Path) -> None:
    ns = notebook(CRAFTED + "xs = [1, 2, 3]\n")
    result = jp.checkpoint(["d", "broken", "xs"], store=str(tmp_path), session="r", namespace=ns)
    named = result.manifest.inexact
    assert sorted(named) == ["broken", "d"]
    assert named["d"].startswith(rehearsal.INEXACT) and "(in .cache)" in named["d"]
    assert "loading it back fails (ValueError: cannot rebuild from 7)" in named["broken"]
    assert {v.name for v in result.manifest.variables} == {"d", "broken", "xs"}  # saved all the same
    assert result.skipped == []
    summary = result.summary()
    assert "named 2 (saved all the same):" in summary
    assert "d (__main__.Dropper): will not come back exactly" in summary


def test_the_restore_test_says_it_was_named_rather_than_finding_it(tmp_path: Path) -> None:
    ns = notebook(CRAFTED + "xs = [1, 2, 3]\n")
    jp.checkpoint(["d", "xs"], store=str(tmp_path), session="r", namespace=ns)
    another_process()
    fresh: dict[str, Any] = {"__name__": "__main__"}
    jp.resume(store=str(tmp_path), session="r", namespace=fresh)
    assert fresh["d"].cache == {"double": 6}  # as named: what was added later did not come back
    verdict = jp.verify(store=str(tmp_path), session="r", namespace=fresh)
    assert verdict.variables["xs"] == "matches"
    assert verdict.variables["d"].startswith(NAMED_AT_CHECKPOINT + ": " + rehearsal.INEXACT)
    assert "d (named at checkpoint)" in verdict.summary()
    assert "d: differs from the checkpoint\n" not in verdict.summary() + "\n"


def test_a_typical_namespace_is_rehearsed_and_nothing_is_named() -> None:
    values = _variables(notebook(NORMAL))
    found = _rehearse(values)
    assert found.inexact == {}
    assert sorted(found.rehearsed) == sorted(values)


def test_large_and_array_heavy_variables_are_not_rehearsed() -> None:
    ns = notebook(
        CRAFTED
        + """
import numpy as np
class HoldsArray(Dropper):
    "Would be named if rehearsed (it drops ``cache`` too), but its bytes are mostly an array's."
    def __reduce__(self):
        return (HoldsArray, (self.n,))
heavy = HoldsArray(np.zeros(10_000))  # 80 kB: under the size bound, out of band
heavy.cache["seen"] = True
grid = np.random.rand(512, 512)  # 2 MB: over the size bound
long_text = "x" * (rehearsal.MAX_BYTES + 1)
""".replace("rehearsal.MAX_BYTES", str(rehearsal.MAX_BYTES))
    )
    values = {k: ns[k] for k in ("heavy", "grid", "long_text", "d")}
    started = time.perf_counter()
    found = _rehearse(values)
    assert found.rehearsed == ["d"] and list(found.inexact) == ["d"]
    assert found.seconds < time.perf_counter() - started  # rehearsal time is part of it
    bounded = _rehearse({"d": ns["d"], "xs": list(range(10))}, max_total_bytes=64)
    assert bounded.rehearsed == ["xs"]  # smallest first, until the budget is spent


def test_kinds_whose_restore_acts_on_the_process_are_left_alone(tmp_path: Path) -> None:
    import io

    log = logging.getLogger("jupyter-pause-rehearsal-test")
    handler = logging.StreamHandler(io.StringIO())
    handler.set_name("rehearsal-test")
    log.addHandler(handler)
    try:
        values = {"log": log, "handler": handler, "holder": {"log": log}, "buffer": io.StringIO("text")}
        found = _rehearse(values)
        assert found.rehearsed == [] and found.inexact == {}
        assert log.handlers == [handler] and logging._handlers["rehearsal-test"] is handler  # type: ignore[attr-defined]
    finally:
        log.removeHandler(handler)


def test_a_hurried_checkpoint_does_not_rehearse(tmp_path: Path) -> None:
    ns = notebook(CRAFTED)
    result = jp.checkpoint(["d"], store=str(tmp_path), session="r", namespace=ns, trigger="sigterm")
    assert result.manifest.inexact == {}
    assert [v.name for v in result.manifest.variables] == ["d"]


#: Reductions whose rebuild acts in the live kernel: a function that writes a file, a class that starts a process.
ACTING = {
    "a function": "(pathlib.Path.write_text, (pathlib.Path(MARKER), 'at checkpoint'))",
    "a process": "(subprocess.Popen, ([sys.executable, '-c', f'open({MARKER!r}, \"w\").close()'],))",
}


@pytest.mark.parametrize("reduction", list(ACTING.values()), ids=list(ACTING))
def test_a_reduction_that_acts_when_rebuilt_is_not_rehearsed_and_nothing_runs(tmp_path, reduction: str) -> None:
    """Rebuilding it would act in the live kernel: only classes and reconstructors are called."""
    marker = tmp_path / "ran"
    ns = notebook(
        f"""
import pathlib, subprocess, sys
MARKER = {str(marker)!r}
class Acting:
    def __reduce__(self):
        return {reduction}
acting = Acting()
plain = [1, 2, 3]
"""
    )
    found = _rehearse({"acting": ns["acting"], "plain": ns["plain"]})
    assert found.rehearsed == ["plain"] and found.inexact == {}
    assert not marker.exists(), "rehearsing it ran its reduction in the live kernel"


def test_a_notebook_lru_cache_function_that_cached_results_is_named(tmp_path: Path) -> None:
    """functools keeps a cache's entries out of reach: the function comes back with an empty
    cache, so ``cache_info()`` (and a function with side effects) differs in the next cell."""
    ns = notebook(
        """
        import functools
        @functools.lru_cache(maxsize=None)
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        fib(20)
        @functools.cache
        def unused(x):
            return x
        """
    )
    result = jp.checkpoint(["fib", "unused"], store=str(tmp_path), session="r", namespace=ns)
    assert sorted(result.manifest.inexact) == ["fib"]
    assert result.manifest.inexact["fib"].startswith(rehearsal.INEXACT)
    assert {v.name for v in result.manifest.variables} == {"fib", "unused"}  # saved all the same
