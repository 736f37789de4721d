"""jupyter_pause.serialize.pickler + reducers: what a notebook's variables look like after a round trip.

Notebook code is simulated by exec'ing it in a ``{"__name__": "__main__"}`` dict, so its functions
and classes have ``__module__ == "__main__"`` and exist nowhere else. The load side of those cases
runs in a fresh Python process that never saw the code: the only way it can get the classes and
functions back is from the saved bytes.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from tests.support.dumping import notebook, pick, restore_elsewhere, resume_elsewhere, roundtrip

# -- notebook functions, in a new process --------------------------------------------------------

FUNCTIONS = """
def add(a, b=2, *, c=3) -> int:
    "Add three numbers."
    return a + b + c
add.tag = "mine"

square = lambda x: x * x

def make_adder(n):
    def adder(x):
        return x + n
    return adder
add5 = make_adder(5)

def make_counter():
    count = 0
    def inc():
        nonlocal count
        count += 1
        return count
    def get():
        return count
    return inc, get
inc, get = make_counter()
inc(); inc()

def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)

def make_fib():
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)
    return fib
fib_closure = make_fib()
"""


def test_function_and_lambda_work_in_a_new_process(tmp_path: Path) -> None:
    ns = notebook(FUNCTIONS)
    out = resume_elsewhere(
        pick(ns, "add square"),
        """
        out = [add(1), add(1, 10, c=0), add.__doc__, add.tag, add.__qualname__,
               add.__annotations__["return"].__name__, square(7), square.__name__]
        """,
        tmp_path,
    )
    assert out == [6, 11, "Add three numbers.", "mine", "add", "int", 49, "<lambda>"]


def test_closure_keeps_its_captured_value(tmp_path: Path) -> None:
    ns = notebook(FUNCTIONS)
    out = resume_elsewhere(pick(ns, "add5"), "out = [add5(1), add5.__qualname__]", tmp_path)
    assert out == [6, "make_adder.<locals>.adder"]


def test_two_closures_sharing_a_cell_still_share_it(tmp_path: Path) -> None:
    ns = notebook(FUNCTIONS)
    out = resume_elsewhere(
        pick(ns, "inc get"),
        "out = [get(), inc(), get(), inc(), get()]",
        tmp_path,
    )
    # The count (2 when saved) continues, and get() sees what inc() does.
    assert out == [2, 3, 3, 4, 4]


def test_recursive_functions_work_in_a_new_process(tmp_path: Path) -> None:
    ns = notebook(FUNCTIONS)
    out = resume_elsewhere(
        pick(ns, "fact fib_closure"),
        "out = [fact(6), fib_closure(15)]",
        tmp_path,
    )
    assert out == [720, 610]


def test_functions_see_globals_the_user_changes_after_restore(tmp_path: Path) -> None:
    ns = notebook(
        """
        FACTOR = 2
        def scale(x):
            return x * FACTOR
        class Scaler:
            def apply(self, x):
                return x * FACTOR
        scaler = Scaler()
        """
    )
    out = resume_elsewhere(
        pick(ns, "FACTOR scale Scaler scaler"),
        """
        before = [scale(3), scaler.apply(3)]
        FACTOR = 10
        out = before + [scale(3), scaler.apply(3), Scaler().apply(1)]
        """,
        tmp_path,
    )
    assert out == [6, 6, 30, 30, 10]


# -- notebook classes and their instances, in a new process --------------------------------------

CLASSES = """
import functools

class Shape:
    "A named shape."
    sides = 0
    def __init__(self, name):
        self.name = name
        self.calls = 0
    def describe(self):
        return f"{self.name} with {self.sides} sides"
    @property
    def upper(self):
        return self.name.upper()
    @upper.setter
    def upper(self, value):
        self.name = value.lower()
    @staticmethod
    def unit():
        return "cm"
    @classmethod
    def make(cls, name):
        return cls(name)
    @functools.cached_property
    def area(self):
        self.calls += 1
        return len(self.name) * 10

class Square(Shape):
    sides = 4
    def describe(self):
        return "square: " + super().describe()

box = Square("box")
box.area
"""


def test_class_methods_properties_and_descriptors_work(tmp_path: Path) -> None:
    ns = notebook(CLASSES)
    out = resume_elsewhere(
        pick(ns, "Shape Square box"),
        """
        new = Square.make("tile")
        box.upper = "BIG"
        out = {
            "same_class": type(box) is Square and type(new) is Square,
            "subclass": issubclass(Square, Shape),
            "names": [Square.__module__, Square.__qualname__, Shape.__doc__],
            "describe": new.describe(),
            "setter": box.name,
            "unit": [Square.unit(), new.unit()],
            "upper": new.upper,
        }
        """,
        tmp_path,
    )
    assert out == {
        "same_class": True,
        "subclass": True,
        "names": ["__main__", "Square", "A named shape."],
        "describe": "square: tile with 4 sides",
        "setter": "big",
        "unit": ["cm", "cm"],
        "upper": "TILE",
    }


def test_cached_property_keeps_cached_value_and_still_caches(tmp_path: Path) -> None:
    ns = notebook(CLASSES)
    out = resume_elsewhere(
        pick(ns, "Square box"),
        """
        fresh = Square("abcd")
        out = [box.area, box.calls, fresh.area, fresh.area, fresh.calls]
        """,
        tmp_path,
    )
    # box.area was computed once before saving; it is not computed again after restore.
    assert out == [30, 1, 40, 40, 1]


def test_slotted_classes_keep_their_slots(tmp_path: Path) -> None:
    ns = notebook(
        """
        class Point:
            __slots__ = ("x", "y")
            def __init__(self, x, y):
                self.x, self.y = x, y
            def norm2(self):
                return self.x ** 2 + self.y ** 2
        class Tagged(Point):
            __slots__ = "tag"
        p = Point(3, 4)
        t = Tagged(1, 2)
        t.tag = "T"
        """
    )
    out = resume_elsewhere(
        pick(ns, "Point p t"),
        """
        try:
            p.z = 1
            refused = False
        except AttributeError:
            refused = True
        out = [p.norm2(), [t.x, t.y, t.tag], hasattr(p, "__dict__"), refused,
               type(t).__mro__[1] is Point, Point.__slots__]
        """,
        tmp_path,
    )
    assert out == [25, [1, 2, "T"], False, True, True, ["x", "y"]]


DATACLASSES = """
from dataclasses import dataclass, field
@dataclass
class Config:
    lr: float = 1e-3
    layers: list = field(default_factory=list)
    name: str = field(default="run", metadata={"help": "run name"})
@dataclass(frozen=True)
class Key:
    a: int
    b: str = "x"
cfg = Config(lr=0.1, layers=[1, 2])
key = Key(1)
"""


def test_dataclass_fields_replace_and_default_factory_work(tmp_path: Path) -> None:
    ns = notebook(DATACLASSES)
    out = resume_elsewhere(
        pick(ns, "Config Key cfg key"),
        """
        import dataclasses
        one, two = Config(), Config()
        one.layers.append(9)
        changed = dataclasses.replace(cfg, lr=0.5)
        try:
            key.a = 5
            frozen = False
        except dataclasses.FrozenInstanceError:
            frozen = True
        out = {
            "fields": [f.name for f in dataclasses.fields(cfg)],
            "metadata": dataclasses.fields(Config)[2].metadata["help"],
            "replace": [type(changed) is Config, changed.lr, changed.layers, changed.name, cfg.lr],
            "asdict": dataclasses.asdict(cfg),
            "fresh_default": [one.layers, two.layers],
            "eq": cfg == Config(lr=0.1, layers=[1, 2]),
            "frozen": frozen,
            "hash": hash(key) == hash(Key(1)),
            "replace_frozen": dataclasses.astuple(dataclasses.replace(key, b="y")),
        }
        """,
        tmp_path,
    )
    assert out == {
        "fields": ["lr", "layers", "name"],
        "metadata": "run name",
        "replace": [True, 0.5, [1, 2], "run", 0.1],
        "asdict": {"lr": 0.1, "layers": [1, 2], "name": "run"},
        "fresh_default": [[9], []],
        "eq": True,
        "frozen": True,
        "hash": True,
        "replace_frozen": [1, "y"],
    }


def test_dataclass_repr_works_after_restore(tmp_path: Path) -> None:
    ns = notebook(DATACLASSES)
    out = resume_elsewhere(pick(ns, "Config cfg"), "out = [repr(cfg), str(Config())]", tmp_path)
    assert out == [
        "Config(lr=0.1, layers=[1, 2], name='run')",
        "Config(lr=0.001, layers=[], name='run')",
    ]


def test_notebook_contextmanager_works_after_restore(tmp_path: Path) -> None:
    ns = notebook(
        """
        import contextlib
        @contextlib.contextmanager
        def timer(label):
            yield label.upper()
        """
    )
    out = resume_elsewhere(pick(ns, "timer"), "with timer('fit') as t:\n    out = t", tmp_path)
    assert out == "FIT"


def test_notebook_lru_cached_function_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main = types.ModuleType("__main__")  # as in a kernel: the notebook namespace is __main__'s
    exec(
        compile(
            "import functools\n@functools.lru_cache(maxsize=None)\ndef double(n):\n    return 2 * n\n",
            "<cell>",
            "exec",
            dont_inherit=True,
        ),
        vars(main),
    )
    monkeypatch.setitem(sys.modules, "__main__", main)
    main.double(3)
    out = resume_elsewhere({"double": main.double}, "out = [double(4), double(4), double.cache_info().hits]", tmp_path)
    assert out == [8, 8, 1]


def test_a_function_rebuilt_into_a_namespace_without_builtins_runs_code_that_imports() -> None:
    """A restoring namespace gets ``__builtins__`` as exec gives a cell's globals: NumPy's C code
    imports from the calling frame's globals (``ndarray.sum``), which raised ``KeyError``."""
    ns = notebook(
        """
        import functools
        import numpy as np
        weighted = functools.partial(lambda x, w: (x * w).sum(), w=np.arange(3.0))
        """
    )
    import numpy as np

    _, loaded, failed = roundtrip(pick(ns, "weighted"))
    assert failed == {}
    assert loaded["weighted"](np.ones(3)) == 3.0


def test_notebook_enum_restores(tmp_path: Path) -> None:
    ns = notebook(
        """
        import enum
        class Color(enum.Enum):
            RED = 1
            GREEN = 2
        favourite = Color.GREEN
        """
    )
    out = resume_elsewhere(
        pick(ns, "Color favourite"),
        "out = [favourite is Color.GREEN, favourite.name, Color(1).name, len(Color)]",
        tmp_path,
    )
    assert out == [True, "GREEN", "RED", 2]


def test_notebook_namedtuple_restores(tmp_path: Path) -> None:
    ns = notebook(
        """
        from typing import NamedTuple
        class Pair(NamedTuple):
            left: int
            right: int = 0
        pair = Pair(1, 2)
        """
    )
    out = resume_elsewhere(
        pick(ns, "Pair pair"),
        "out = [list(pair), pair.right, list(Pair(5)), type(pair) is Pair]",
        tmp_path,
    )
    assert out == [[1, 2], 2, [5, 0], True]


@pytest.mark.integration  # the new process imports torch: seconds
def test_notebook_torch_module_and_optimizer_resume_training(tmp_path: Path) -> None:
    ns = notebook(
        """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self, hidden=8):
                super().__init__()
                self.fc1 = nn.Linear(4, hidden)
                self.fc2 = nn.Linear(hidden, 2)
            def forward(self, x):
                return self.fc2(torch.relu(self.fc1(x)))
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(5, 4)
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        expected = model(x).detach()
        """
    )
    out = resume_elsewhere(
        pick(ns, "torch nn Net model opt x expected"),
        """
        params = list(model.parameters())
        same_output = torch.equal(model(x), expected)
        model(x).sum().backward()
        opt.step()
        out = {
            "class": [type(model) is Net, isinstance(model, nn.Module), type(params[0]).__name__],
            "same_output": same_output,
            "aliased": opt.param_groups[0]["params"][0] is params[0],
            "momentum_kept": all("momentum_buffer" in opt.state[p] for p in params),
            "step_moves_model": not torch.equal(model(x), expected),
            "new_instance": list(Net(hidden=3)(x).shape),
        }
        """,
        tmp_path,
    )
    assert out == {
        "class": [True, True, "Parameter"],
        "same_output": True,
        "aliased": True,
        "momentum_kept": True,
        "step_moves_model": True,
        "new_instance": [5, 2],
    }


# -- aliasing across variables -------------------------------------------------------------------


def test_optimizer_params_are_the_model_params_after_load() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    _, loaded, failed = roundtrip({"model": model, "opt": opt})
    assert failed == {}
    model2, opt2 = loaded["model"], loaded["opt"]
    first = next(model2.parameters())
    assert opt2.param_groups[0]["params"][0] is first
    assert torch.equal(opt2.state[first]["exp_avg"], opt.state[next(model.parameters())]["exp_avg"])
    before = first.detach().clone()
    model2(torch.ones(1, 3)).sum().backward()
    opt2.step()
    assert not torch.equal(first, before)  # the restored optimizer trains the restored model


def test_list_shared_by_two_variables_is_one_object_after_load() -> None:
    shared = [1, 2, 3]
    cyclic: list[Any] = ["self"]
    cyclic.append(cyclic)
    _, loaded, failed = roundtrip({"a": shared, "b": {"inner": shared}, "c": cyclic})
    assert failed == {}
    assert loaded["b"]["inner"] is loaded["a"]
    loaded["a"].append(4)
    assert loaded["b"]["inner"] == [1, 2, 3, 4]
    assert loaded["c"][1] is loaded["c"]


def test_tensor_view_and_base_share_storage_after_load() -> None:
    torch = pytest.importorskip("torch")
    base = torch.arange(10, dtype=torch.float32)
    view = base[2:5]
    transposed = base.view(2, 5).t()
    result, loaded, failed = roundtrip({"base": base, "view": view, "transposed": transposed})
    assert failed == {}
    assert len(result.collector.found) == 1  # one storage saved once
    base2, view2, t2 = loaded["base"], loaded["view"], loaded["transposed"]
    assert view2.untyped_storage().data_ptr() == base2.untyped_storage().data_ptr()
    assert t2.stride() == transposed.stride() and torch.equal(t2, transposed)
    view2.fill_(-1)
    assert base2[2:5].tolist() == [-1, -1, -1]
    assert t2[2, 0].item() == -1  # base[2], seen through the transposed view


# -- failures ------------------------------------------------------------------------------------


def test_unsavable_file_is_reported_and_other_variables_still_load() -> None:
    read_end, write_end = os.pipe()
    os.close(write_end)
    with os.fdopen(read_end) as handle:
        result, loaded, failed = roundtrip({"before": [1], "handle": handle, "after": {"k": "v"}})
    assert set(result.failed) == {"handle"}
    assert f"open descriptor {read_end} is not a regular file" in result.failed["handle"]
    assert "handle" not in result.segments
    assert failed == {}
    assert loaded == {"before": [1], "after": {"k": "v"}}


def test_os_environ_is_refused() -> None:
    result, loaded, _ = roundtrip({"env": os.environ, "ok": 1})
    assert set(result.failed) == {"env"}
    assert "os.environ" in result.failed["env"]
    assert loaded == {"ok": 1}


def test_lock_is_saved_through_dill_fallback() -> None:
    lock = threading.Lock()
    result, loaded, failed = roundtrip({"lock": lock, "n": 5})
    assert result.failed == {} and failed == {}
    assert result.segments["lock"].pickler == "dill"
    assert result.segments["n"].pickler == "pickle"
    restored = loaded["lock"]
    assert restored.acquire(blocking=False)
    assert not restored.acquire(blocking=False)
    restored.release()
    assert loaded["n"] == 5


def test_generator_fails_with_a_reason() -> None:
    gen = (i * i for i in range(3))
    result, loaded, _ = roundtrip({"gen": gen, "ok": "yes"})
    assert set(result.failed) == {"gen"}
    assert "generator" in result.failed["gen"]
    assert loaded == {"ok": "yes"}


def test_variables_after_a_failure_keep_aliasing_with_earlier_ones() -> None:
    shared = {"weights": [0.5, 0.25]}
    gen = (i for i in range(3))
    values = {
        "first": shared,
        # fails half-way, after the pickler has already met `shared`:
        "broken": [shared, gen],
        "later": [shared],
        "lock": threading.Lock(),
        "last": (shared,),
    }
    result, loaded, failed = roundtrip(values)
    assert set(result.failed) == {"broken"}
    assert failed == {}
    assert loaded["later"][0] is loaded["first"]
    assert loaded["last"][0] is loaded["first"]


class FailsOnLoad:
    """Saves fine, fails when loaded (as an object whose class changed since the checkpoint)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, ("not a number",))


def test_a_variable_failing_to_load_does_not_take_later_ones_with_it(tmp_path: Path) -> None:
    # Runs in a subprocess: a confused unpickler can crash the process, not just raise.
    report = restore_elsewhere(
        {"before": [1], "bad": [FailsOnLoad(), "padding" * 4], "after": {"a": 1}, "last": (2, 3)},
        "out = [before, after, list(last)]",
        tmp_path,
    )
    assert list(report["failed"]) == ["bad"]
    assert "ValueError" in report["failed"]["bad"]
    assert report["out"] == [[1], {"a": 1}, [2, 3]]


def test_a_load_failure_does_not_corrupt_later_variables() -> None:
    inner = [1, 2]
    values = {
        "bad": [FailsOnLoad(), "pad1", "pad2", "pad3"],
        "d": {"k": inner, "more": ["m1", "m2", "m3", "m4", "m5"]},
        "e": [inner],  # shares an object with d, nothing with bad
    }
    _, loaded, failed = roundtrip(values)
    assert list(failed) == ["bad"]
    assert loaded["d"] == {"k": [1, 2], "more": ["m1", "m2", "m3", "m4", "m5"]}
    assert loaded["e"] == [[1, 2]], f"e came back as {loaded['e']!r}"
    assert loaded["e"][0] is loaded["d"]["k"]


def test_variables_after_a_load_failure_keep_what_earlier_segments_built() -> None:
    shared = {"weights": [0.5, 0.25]}
    values = {"first": shared, "bad": [FailsOnLoad(), shared], "later": [shared], "half": [FailsOnLoad()]}
    values["after_half"] = [shared, values["half"]]
    _, loaded, failed = roundtrip(values)
    assert sorted(failed) == ["after_half", "bad", "half"]
    assert loaded["later"][0] is loaded["first"] == {"weights": [0.5, 0.25]}


READS_A_FILE = """
import torch

class Table:
    '''Stands for a datasets table: loading it reads its file again.'''
    def __init__(self, path):
        self.path = path
    def __reduce__(self):
        return (read_table, (self.path,))

def read_table(path):
    with open(path, "rb") as f:
        return f.read()

class Row:
    pass

columns = {"w": torch.ones(3), "names": ["a", "b"]}
raw = [Table("/nowhere/train.arrow"), columns, Row]
tokenized = {"columns": columns}
xs = [columns["w"]]
trainer = {"data": tokenized, "steps": 3}
rows = [[1, 2], Row()]
batch = {"first": rows[0]}
"""


def test_a_variable_lost_with_another_is_named_with_it_and_why() -> None:
    ns = notebook(READS_A_FILE)
    _, loaded, failed = roundtrip(pick(ns, "raw tokenized xs trainer rows batch"))
    cause = "FileNotFoundError: [Errno 2] No such file or directory: '/nowhere/train.arrow'"
    assert failed["raw"] == cause
    assert failed["tokenized"] == f"lost with `raw`: {cause}"  # holds an object first saved with raw
    assert failed["xs"] == f"lost with `raw`: {cause}"  # a tensor first saved with raw
    assert failed["trainer"] == f"lost with `raw`: {cause}"  # through tokenized
    assert failed["rows"] == f"lost with `raw`: {cause}"  # failed to load: its class was saved with raw
    assert failed["batch"] == f"lost with `rows`: lost with `raw`: {cause}"
    assert loaded == {}


def test_constants_a_failed_segment_never_reached_still_serve_later_variables() -> None:
    # The failing segment would have memoised the string and the class after the point where it
    # failed; the later variable refers to them through the memo (a RangeIndex's "step" key and
    # a notebook exception's "step" attribute are one string object).
    key = "".join(["st", "ep"])
    values = {"bad": [FailsOnLoad(), key, collections.OrderedDict], "later": {key: 1, "kind": collections.OrderedDict}}
    _, loaded, failed = roundtrip(values)
    assert list(failed) == ["bad"]
    assert loaded["later"] == {"step": 1, "kind": collections.OrderedDict}


def test_missing_or_damaged_segments_fail_alone(tmp_path: Path) -> None:
    def damage(segments: list) -> None:
        segments[0] = ("a", "pickle", None)
        segments[1] = ("b", "pickle", segments[1][2][:-6] + b"\x00garbage")

    report = restore_elsewhere(
        {"a": [1, 2], "b": ["text", 1.5, {"k": "v"}], "c": {"x": 1}, "d": "end"},
        "out = [c, d]",
        tmp_path,
        damage,
    )
    assert sorted(report["failed"]) == ["a", "b"]
    assert "missing" in report["failed"]["a"]
    assert report["out"] == [{"x": 1}, "end"]
