"""jupyter_pause.engine.digests.value_digest: the fingerprint the restore test compares values by."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine.digests import value_digest
from tests.processes import another_process

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
    "from jupyter_pause.engine.digests import value_digest; "
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
