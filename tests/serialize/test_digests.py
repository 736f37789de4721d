"""jupyter_pause.serialize.digests.value_digest: the fingerprint the restore test compares values by."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.serialize.arrays import ArrayLoader
from jupyter_pause.serialize.digests import format_of, value_digest
from jupyter_pause.serialize.pickler import load_variables
from tests.support.dumping import dump, roundtrip
from tests.support.processes import another_process
from tests.support.valuekinds import kinds, notebook

pytestmark = pytest.mark.usefixtures("new_process")


# --- equal values, equal digests ---------------------------------------------------------------


def test_equal_plain_values_built_differently_digest_the_same() -> None:
    literal = {"name": "run-7", "losses": [0.5, 0.25, 0.125], "shape": (3, 4), "flags": {"a", "b"}, "none": None}
    built: dict = {}
    built["name"] = "-".join(["run", str(7)])
    built["losses"] = [1 / 2**k for k in range(1, 4)]
    built["shape"] = tuple([3]) + (4,)
    built["flags"] = set("ba")
    built["none"] = None
    assert built == literal
    assert value_digest(built) == value_digest(literal)
    assert value_digest(0.1 + 0.2) == value_digest(0.30000000000000004)


def test_equal_arrays_built_differently_digest_the_same() -> None:
    view = np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2]  # not contiguous
    assert not view.flags.c_contiguous
    copy = np.array([[0, 2], [4, 6], [8, 10]], dtype=np.int64)
    assert value_digest(view) == value_digest(copy)

    transposed = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
    assert not transposed.is_contiguous()
    assert value_digest(transposed) == value_digest(torch.tensor([[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]))


def test_different_values_digest_differently() -> None:
    assert value_digest([1, 2, 3]) != value_digest([1, 2, 4])
    assert value_digest([1, 2, 3]) != value_digest((1, 2, 3))
    assert value_digest({"a": 1}) != value_digest({"a": "1"})
    assert value_digest(1) != value_digest(True)


_SET_SCRIPT = (
    "from jupyter_pause.serialize.digests import value_digest; "
    "print(value_digest({'alpha', 'beta', 'gamma', 'delta', 'epsilon'}), "
    "value_digest(frozenset({'x', 'y', 'zz', 'www'})), value_digest({'k': {'p', 'q', 'r'}}))"
)


def _digests_with_hash_seed(seed: int) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _SET_SCRIPT],
        env={**os.environ, "PYTHONHASHSEED": str(seed)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


def test_sets_of_strings_digest_the_same_in_processes_with_different_hash_seeds() -> None:
    a, b = _digests_with_hash_seed(1), _digests_with_hash_seed(2)
    assert a and "None" not in a
    assert a == b
    # ... and the same as in this process, whatever its hash seed
    here = " ".join(
        [
            value_digest({"alpha", "beta", "gamma", "delta", "epsilon"}),
            value_digest(frozenset({"x", "y", "zz", "www"})),
            value_digest({"k": {"p", "q", "r"}}),
        ]
    )
    assert a == here


def test_dict_order_matters_and_set_order_does_not() -> None:
    assert value_digest({"a": 1, "b": 2}) != value_digest({"b": 2, "a": 1})
    first, second = set(), set()
    first.add(1), first.add(9)  # 1 and 9 share a slot: iteration order follows insertion order
    second.add(9), second.add(1)
    assert first == second and list(first) != list(second)
    assert value_digest(first) == value_digest(second)
    assert value_digest(frozenset(first)) == value_digest(frozenset(second))
    assert value_digest(first) != value_digest(frozenset(first))


def _pair_iterating_in_insertion_order() -> tuple[set, set]:
    """Two equal sets of tuples (sharing one inner tuple) whose iteration orders differ."""
    shared = (1.5, 2.5)
    for i in range(200):
        for j in range(i + 1, 200):
            a, b = (i, shared), (j, shared)
            first, second = {a}, {b}
            first.add(b)
            second.add(a)
            if list(first) != list(second):
                return first, second
    raise AssertionError("no colliding pair found")


def test_set_order_does_not_matter_when_elements_share_an_object() -> None:
    first, second = _pair_iterating_in_insertion_order()
    assert first == second
    assert value_digest(first) == value_digest(second)


def test_cycles_are_digested() -> None:
    loop = [1, 2]
    loop.append(loop)
    again = [1, 2]
    again.append(again)
    d = value_digest(loop)
    assert d is not None
    assert d == value_digest(again)
    assert d != value_digest([1, 2, [1, 2]])
    node: dict = {"name": "n"}
    node["self"] = node
    assert value_digest(node) is not None


def test_value_over_budget_gives_none() -> None:
    small = [[i] for i in range(5)]
    large = [[i] for i in range(20)]
    assert value_digest(small, budget=10) is not None
    assert value_digest(large, budget=10) is None
    assert value_digest(large) is not None  # the default budget is far larger


def test_value_nested_deeper_than_the_digest_follows_gives_none_and_still_checkpoints(tmp_path) -> None:
    deep: list = []
    for _ in range(400):  # pickle follows this deep; the digest takes a few calls per level
        deep = [deep]
    assert value_digest(deep) is None
    result = jp.checkpoint(store=str(tmp_path), session="s", namespace={"deep": deep, "x": 1})
    assert {v.name: v.digest is not None for v in result.manifest.variables} == {"deep": False, "x": True}


def test_object_pickle_cannot_describe_gets_a_stable_digest() -> None:
    lock_a, lock_b = threading.Lock(), threading.Lock()
    with pytest.raises(TypeError):
        lock_a.__reduce_ex__(2)
    assert value_digest(lock_a) is not None
    assert value_digest(lock_a) == value_digest(lock_b)
    # the rest of a value holding one still counts
    assert value_digest({"lock": lock_a, "n": 1}) == value_digest({"lock": lock_b, "n": 1})
    assert value_digest({"lock": lock_a, "n": 1}) != value_digest({"lock": lock_a, "n": 2})


# --- in-place changes and dtypes ---------------------------------------------------------------


def test_in_place_change_of_one_tensor_element_changes_the_digest() -> None:
    t = torch.zeros(1000)
    before = value_digest(t)
    ident, shape, dtype = id(t), t.shape, t.dtype
    t[637] = 1e-6
    assert (id(t), t.shape, t.dtype) == (ident, shape, dtype)
    assert value_digest(t) != before


def test_in_place_change_of_a_model_weight_changes_the_digest() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    before = value_digest(model)
    with torch.no_grad():
        model[2].bias[1] += 1
    assert value_digest(model) != before


def test_in_place_change_of_one_numpy_element_changes_the_digest() -> None:
    a = np.zeros((10, 10), dtype=np.float32)
    before = value_digest(a)
    ident = id(a)
    a[7, 3] += 1
    assert id(a) == ident
    assert value_digest(a) != before
    objects = np.array([[1], [2]], dtype=object)
    before = value_digest(objects)
    objects[1, 0] = 5
    assert value_digest(objects) != before


def test_dtype_change_with_equal_values_changes_the_digest() -> None:
    assert value_digest(torch.zeros(4, dtype=torch.float32)) != value_digest(torch.zeros(4, dtype=torch.float64))
    assert value_digest(torch.ones(4, dtype=torch.float16)) != value_digest(torch.ones(4, dtype=torch.bfloat16))
    assert value_digest(np.zeros(4, dtype=np.int32)) != value_digest(np.zeros(4, dtype=np.int64))
    assert value_digest(np.zeros(4, dtype=np.int32)) != value_digest(np.zeros(4, dtype=np.uint32))


def test_shape_change_with_equal_bytes_changes_the_digest() -> None:
    assert value_digest(np.zeros((2, 3))) != value_digest(np.zeros((3, 2)))
    assert value_digest(torch.zeros(2, 3)) != value_digest(torch.zeros(6))


# --- notebook-defined functions and classes --------------------------------------------------


def _define(source: str, name: str):
    namespace = {"__name__": "__main__"}
    exec(compile(source, "<cell>", "exec"), namespace)
    return namespace[name]


FUNCTION = "def scale(x, factor=2):\n    return x * factor + 1\n"


def test_notebook_functions_digest_by_code() -> None:
    one, two = _define(FUNCTION, "scale"), _define(FUNCTION, "scale")
    assert one is not two
    assert value_digest(one) is not None
    assert value_digest(one) == value_digest(two)
    assert value_digest(_define(FUNCTION.replace("+ 1", "+ 2"), "scale")) != value_digest(one)
    assert value_digest(_define(FUNCTION.replace("factor=2", "factor=3"), "scale")) != value_digest(one)
    assert value_digest(_define(FUNCTION.replace("x * factor", "x - factor"), "scale")) != value_digest(one)


def test_a_notebook_lru_cache_function_digests_its_cache_counts_once_it_has_any() -> None:
    """Its cache is not saved (functools keeps the entries out of reach): once it holds results,
    a restored function, with an empty cache, has another digest; before, the same one."""
    square = _define(
        "import functools\n@functools.lru_cache(maxsize=None)\ndef square(x):\n    return x * x\n", "square"
    )
    fresh = value_digest(square)
    _, loaded, failed = roundtrip({"square": square})
    assert failed == {} and value_digest(loaded["square"]) == fresh
    square(3)
    assert value_digest(square) != fresh
    _, loaded, _ = roundtrip({"square": square})
    assert value_digest(loaded["square"]) == fresh != value_digest(square)


def test_notebook_classes_digest_by_their_methods() -> None:
    source = "class Model:\n    def step(self):\n        return 1\n"
    assert value_digest(_define(source, "Model")) == value_digest(_define(source, "Model"))
    assert value_digest(_define(source.replace("return 1", "return 2"), "Model")) != value_digest(
        _define(source, "Model")
    )


def test_huge_int_gets_a_digest() -> None:
    big = math.factorial(2000)  # 5736 digits
    assert value_digest(big) is not None
    assert value_digest(big) != value_digest(big + 1)


def test_checkpoint_of_a_namespace_holding_a_huge_int_succeeds(tmp_path) -> None:
    result = jp.checkpoint(store=str(tmp_path), session="s", namespace={"big": math.factorial(2000), "x": 1})
    assert {v.name for v in result.manifest.variables} == {"big", "x"}


# --- across a checkpoint and resume ------------------------------------------------------------


def test_model_and_optimizer_digests_survive_checkpoint_and_resume(tmp_path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()  # optimizer state keyed by the model's parameters
    before = (value_digest(model), value_digest(opt), value_digest((model, opt)))
    assert None not in before

    result = jp.checkpoint(store=str(tmp_path), session="s", namespace={"model": model, "opt": opt})
    recorded = {v.name: v.digest for v in result.manifest.variables}
    assert recorded == {"model": before[0], "opt": before[1]}

    another_process()
    restored: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=restored)
    assert restored["model"] is not model
    after = (
        value_digest(restored["model"]),
        value_digest(restored["opt"]),
        value_digest((restored["model"], restored["opt"])),
    )
    assert after == before


# --- the restore test is exact both ways: kind by kind ----------------------------------------
#
# Each kind: how to build it (the same value every time) and how to change one thing in it. A
# value must digest the same after a pickle round trip through the project's pickler (here and
# in a new process with another hash seed), and the changed one must digest differently.


def test_every_kind_digests_the_same_after_a_round_trip_and_differently_when_changed() -> None:
    nb = notebook()
    built = {k: v for k, v in nb.items() if not k.startswith("__") and not isinstance(v, types.ModuleType)}
    built.update({name: build(nb) for name, (build, _) in kinds().items()})
    dumped, segments, records, blobs = dump(built)
    assert not dumped.failed
    loaded, failed = load_variables(segments, ArrayLoader(records, blobs), dict(nb))
    assert not failed
    unstable = [n for n in built if value_digest(loaded[n]) != value_digest(built[n])]
    assert unstable == []
    for name, (build, change) in kinds().items():
        before = value_digest(build(nb))
        assert before is not None, name
        assert before == value_digest(built[name]), f"{name}: built twice, digested differently"
        assert value_digest(change(build(nb))) != before, f"{name}: a change left the digest as it was"
        assert value_digest(change(loaded[name])) != before, f"{name}: a change to the restored value went unseen"


_CHECKPOINT_KINDS = """
import sys
import jupyter_pause as jp
from tests.support.valuekinds import kinds, notebook
nb = notebook()
values = {k: v for k, v in nb.items() if not k.startswith("__")}
values.update({name: build(nb) for name, (build, _) in kinds().items()})
result = jp.checkpoint(store=sys.argv[1], session="kinds", namespace=values)
print(len(result.manifest.variables))
"""

_RESUME_KINDS = """
import json, sys
import jupyter_pause as jp
from jupyter_pause.serialize.digests import format_of, value_digest
from tests.support.valuekinds import kinds
ns = {}
cycle = jp.resume_and_verify(store=sys.argv[1], session="kinds", namespace=ns)
recorded = {v.name: v.digest for v in cycle.result.manifest.variables}
unseen = [n for n, (_, change) in kinds().items() if value_digest(change(ns[n])) == recorded[n]]
print(json.dumps({"verdict": cycle.verdict.summary(), "skipped": cycle.result.skipped,
                  "statuses": cycle.verdict.variables, "recorded": recorded, "unseen": unseen}))
"""


def _run(script: str, store: Path, seed: int) -> str:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script, str(store)],
        env={**os.environ, "PYTHONHASHSEED": str(seed)},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.integration
def test_every_kind_is_restored_in_a_process_with_another_hash_seed_and_changes_are_seen(tmp_path) -> None:
    _run(_CHECKPOINT_KINDS, tmp_path, seed=1)
    report = json.loads(_run(_RESUME_KINDS, tmp_path, seed=2))
    assert report["verdict"].startswith("verdict: restored"), report["verdict"]
    assert report["skipped"] == {}
    assert {n for n, s in report["statuses"].items() if s != "matches"} == set()
    assert set(kinds()) <= set(report["recorded"])
    assert all(format_of(report["recorded"][name]) == 2 for name in kinds())
    assert report["unseen"] == []


def test_a_release_0_1_0_checkpoint_is_compared_in_its_own_digest_format(tmp_path) -> None:
    store = tmp_path / "release"
    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "release-0.1.0", store)
    cycle = jp.resume_and_verify(store=str(store), session="release", namespace={})
    digests = [v.digest for v in cycle.result.manifest.variables if v.digest is not None]
    assert digests and {format_of(d) for d in digests} == {1}
    assert cycle.verdict.kind == "restored", cycle.verdict.summary()
    assert set(cycle.verdict.variables.values()) == {"matches"}
    assert f"{len(digests)} of {len(cycle.result.manifest.variables)} variable(s) match" in cycle.verdict.summary()


class _Noisy:
    """An object whose pickled state comes through a deprecated accessor that warns."""

    def __init__(self) -> None:
        self.value = 1

    def __getstate__(self) -> dict:
        warnings.warn("__getstate__ is deprecated", DeprecationWarning, stacklevel=2)
        return dict(self.__dict__)


def test_digesting_adds_no_warning_to_a_list_the_notebook_is_recording() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("the notebook's own", UserWarning, stacklevel=1)
        before = value_digest(caught)
        assert value_digest(_Noisy()) is not None
        assert len(caught) == 1  # the digest's warning did not land in the notebook's list
        assert value_digest(caught) == before
        warnings.warn("another of the notebook's", UserWarning, stacklevel=1)
    assert len(caught) == 2  # recording still works after a digest


_VERIFY_REGISTRY = """
import json, sys, warnings
warnings.filterwarnings("ignore")
import jupyter_pause as jp
cycle = jp.resume_and_verify(store=sys.argv[1], session=sys.argv[2], namespace={"__name__": "__main__"})
print("REPORT " + json.dumps({n: s for n, s in cycle.verdict.variables.items() if s != "matches"}))
"""

#: Archives come back reopened, not as they were inside: who closes the file (``_extfileobj``,
#: ``_filePassed``), ``filename`` made absolute, members read again lazily. A real difference of
#: state, named by the restore test until the archives are restored as they were.
REOPENED_ARCHIVES = {"k_tar_read", "k_tar_closed", "k_zip_read", "k_zip_closed"}


@pytest.mark.integration
@pytest.mark.parametrize("batch", ["stdlib", "libraries"])
def test_the_fidelity_registry_comes_back_matching_its_digests(batch: str, tmp_path, monkeypatch, capsys) -> None:
    """Every kind of tests/support/registry.py that comes back is compared in a new process with another
    hash seed: none differs from its digest, except archives reopened with other internals."""
    import textwrap

    from tests.support.registry import BATCHES

    (tmp_path / "a").mkdir()
    (tmp_path / "c").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    ns: dict[str, Any] = {"__name__": "__main__"}
    with capsys.disabled():  # the registry's stdout and stderr handles: the real ones, as in a kernel
        exec(compile(textwrap.dedent(BATCHES[batch]), "<cell>", "exec", dont_inherit=True), ns)
        names = [n for n in ns if n.startswith("k_")]
        result = jp.checkpoint(names, store=str(tmp_path / "store"), session=batch, namespace=ns)
    assert all(v.digest is not None for v in result.manifest.variables)
    done = subprocess.run(
        [sys.executable, "-c", _VERIFY_REGISTRY, str(tmp_path / "store"), batch],
        env={
            **os.environ,
            "PYTHONHASHSEED": "7",
            "MPLBACKEND": "Agg",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        },
        cwd=tmp_path / "c",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    differs = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("REPORT "))[len("REPORT ") :])
    assert set(differs) <= REOPENED_ARCHIVES, differs


def test_an_archive_reader_is_digested_by_what_reopens_it(tmp_path: Path) -> None:
    import tarfile
    import zipfile

    member = tmp_path / "member.txt"
    member.write_text("inside")
    for name in ("a", "b"):
        with tarfile.open(tmp_path / f"{name}.tar", "w") as tar:
            tar.add(member, arcname="member.txt")
        with zipfile.ZipFile(tmp_path / f"{name}.zip", "w") as archive:
            archive.write(member, arcname="member.txt")
    opened = [tarfile.open(tmp_path / "a.tar"), zipfile.ZipFile(tmp_path / "a.zip")]
    try:
        taken = [value_digest(x) for x in opened]
        opened[0].getmembers()  # a reader that has loaded its member list: the same archive
        reopened = [tarfile.open(tmp_path / "a.tar"), zipfile.ZipFile(tmp_path / "a.zip")]
        others = [tarfile.open(tmp_path / "b.tar"), zipfile.ZipFile(tmp_path / "b.zip")]
        try:
            assert [value_digest(x) for x in opened] == taken == [value_digest(x) for x in reopened]
            assert all(value_digest(x) != d for x, d in zip(others, taken, strict=True))
        finally:
            for x in reopened + others:
                x.close()
    finally:
        for x in opened:
            x.close()


class _HandsOverAttributes:
    """Reduces as astropy's WCS does: its attribute dictionary (a filtered copy, one key added)
    handed to a function that sets it with ``__dict__.update`` after making the object."""

    def __init__(self) -> None:
        self.size = 2

    def __reduce__(self) -> tuple[Any, ...]:
        handed = {k: v for k, v in self.__dict__.items() if not k.endswith("_cache")}
        handed["key"] = "k"
        return (_rebuild_handed_over, (type(self), handed))


def _rebuild_handed_over(kind: type, attributes: dict[str, Any]) -> Any:
    obj = kind()  # __init__ first: its attributes come first in the new dictionary
    obj.__dict__.update(attributes)
    return obj


def test_attributes_a_python_reduction_hands_over_are_digested_in_name_order() -> None:
    import pickle

    live = _HandsOverAttributes()
    live.label, live.lookup_cache = "a", {1: 2}
    restored = pickle.loads(pickle.dumps(live))
    assert list(vars(restored)) != list(vars(live)) + ["key"]  # another order, and no cache
    assert value_digest(restored) == value_digest(live)
    restored.label = "b"
    assert value_digest(restored) != value_digest(live)


def test_digesting_a_partial_leaves_its_pickling_as_it_was() -> None:
    """A partial makes its attribute dictionary when asked for it, and pickles differently from
    then on: the digest does not ask."""
    import functools

    partial = functools.partial(int, base=2)
    before = partial.__reduce__()
    assert value_digest(partial) == value_digest(partial)
    assert partial.__reduce__() == before
