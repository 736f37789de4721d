"""A notebook's worth of value kinds, each with a way to build it and a way to change it: what
the digest tests and the fidelity registry check round trip after round trip."""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable

import numpy as np
import torch

NOTEBOOK = """
import collections, dataclasses, enum, functools

class Node:
    def __init__(self, name):
        self.name = name
        self.peers = []

class Member:
    def __init__(self, name):
        self.name = name
        self.group = None

class Bare:
    pass

@dataclasses.dataclass
class Config:
    lr: float = 0.1
    layers: list = dataclasses.field(default_factory=lambda: [8, 4])

class Color(enum.Enum):
    RED = 1
    GREEN = 2

class Slotted:
    __slots__ = ("a", "b")
    def __init__(self, a, b):
        self.a, self.b = a, b

class TrainingError(RuntimeError):
    def __init__(self, message, step=None):
        super().__init__(message)
        self.step = step

class Scheduler:
    base = 0.1
    def rate(self, step):
        return self.base * 0.5 ** step

def make_via(cls, value):
    return cls(value)

class ViaPartial:
    def __init__(self, value):
        self.value = value
    def __reduce__(self):  # the repr of this partial holds make_via's address
        return (functools.partial(make_via, ViaPartial), (self.value,))

Pair = collections.namedtuple("Pair", "left right")

def scale(x, factor=2):
    return x * factor

def make_counter(start):
    count = [start]
    def bump():
        count[0] += 1
        return count[0]
    return bump

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
"""


def notebook() -> dict[str, Any]:
    """The notebook's own definitions (``__main__``, so they are saved by value)."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(NOTEBOOK, "<cell>", "exec"), namespace)
    return namespace


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as e:  # a caught exception, with its traceback
        return e


def _looked_at(error: BaseException) -> BaseException:
    """As after a variable inspector or tab completion: ``dir()`` makes its attribute dict."""
    dir(error)
    return error


def _chained() -> BaseException:
    try:
        try:
            {}["missing"]
        except KeyError as e:
            raise ValueError("lookup failed") from e
    except ValueError as e:
        return e


def _recorded_warnings() -> list:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("learning rate is high", UserWarning, stacklevel=1)
        warnings.warn("old API", DeprecationWarning, stacklevel=1)
        np.array([1.0]) / np.array([0.0])  # a RuntimeWarning from C code
    for w in caught:
        _looked_at(w.message)
    return caught


def _mutual(nb: dict[str, Any]) -> Any:
    a, b = nb["Node"]("a"), nb["Node"]("b")
    a.peers.append(b)
    b.peers.append(a)
    return a


def _group(nb: dict[str, Any]) -> set:
    group = {nb["Member"](name) for name in ("ann", "bob", "cyd")}
    for member in group:
        member.group = group  # each element points back at the set
    return group


def _weak_set(nb: dict[str, Any]) -> tuple:
    """Members and a WeakSet of them: pickle gets the members in set order, which follows their
    addresses."""
    members = [nb["Member"](name) for name in ("ann", "bob", "cyd", "dan", "eve")]
    return (members, weakref.WeakSet(members))


def _self_list() -> list:
    loop: list = [1, "two"]
    loop.append(loop)
    return loop


def _self_dict() -> dict:
    node: dict = {"name": "root"}
    node["self"] = node
    return node


def _optimizer() -> Any:
    torch.manual_seed(3)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    return (model, opt)


def _set_first(value: Any, item: Any) -> Any:
    value[0] = item
    return value


def _set_attr(value: Any, name: str, item: Any) -> Any:
    setattr(value, name, item)
    return value


def _bump_tensor(t: Any) -> Any:
    with torch.no_grad():
        t.view(-1)[0] += 1
    return t


def _member_name(group: set) -> set:
    min(group, key=lambda m: m.name).name = "zed"
    return group


def kinds() -> dict[str, tuple[Callable[[dict[str, Any]], Any], Callable[[Any], Any]]]:
    """Kind name -> (build from the notebook's definitions, change one thing in it)."""
    import collections
    import datetime
    import decimal
    import fractions
    import functools
    import re
    import uuid
    from pathlib import PurePosixPath

    import pandas as pd

    return {
        "int": (lambda nb: 2**100, lambda v: v + 1),
        "float": (lambda nb: 0.1 + 0.2, lambda v: 0.3),
        "nan": (lambda nb: float("nan"), lambda v: float("inf")),
        "negative_zero": (lambda nb: -0.0, lambda v: 0.0),
        "list_with_nan": (lambda nb: [float("nan"), 1.0], lambda v: _set_first(v, 0.0)),
        "complex": (lambda nb: 1 - 2j, lambda v: 1 + 2j),
        "bytes": (lambda nb: b"\x00\x01", lambda v: b"\x00\x02"),
        "list": (lambda nb: [1, "a", None, (2, 3)], lambda v: _set_first(v, 2)),
        "dict_order": (lambda nb: {"b": 1, "a": 2}, lambda v: {"a": 2, "b": 1}),
        "set_of_str": (lambda nb: {"alpha", "beta", "gamma", "delta", "epsilon"}, lambda v: v - {"beta"}),
        "frozenset": (lambda nb: frozenset({"x", "yy", ("t", 1)}), lambda v: v | {"z"}),
        "set_of_frozensets": (lambda nb: {frozenset({"a"}), frozenset({"b", "c"})}, lambda v: v | {frozenset()}),
        "mixed_set": (lambda nb: {1, "a", (2, "b"), None, 2.5}, lambda v: v - {2.5}),
        "dict_of_sets": (lambda nb: {"k": {"p", "q", "r"}}, lambda v: v["k"].add("s") or v),
        "range_slice": (lambda nb: (range(1, 9, 2), slice(1, None)), lambda v: (range(1, 9, 3), v[1])),
        "self_list": (lambda nb: _self_list(), lambda v: _set_first(v, 2)),
        "self_dict": (lambda nb: _self_dict(), lambda v: v.update(name="leaf") or v),
        "mutual_objects": (_mutual, lambda v: (_set_attr(v.peers[0], "name", "c"), v)[1]),
        "set_pointing_back": (_group, _member_name),
        "exception": (lambda nb: _raised(ValueError("bad value", 3)), lambda v: ValueError("bad value", 4)),
        "exception_looked_at": (
            lambda nb: _looked_at(_raised(ZeroDivisionError("division by zero"))),
            lambda v: _set_attr(v, "args", ("other",)),
        ),
        "exception_with_note": (
            lambda nb: _raised(_notes(KeyError("k"))),
            lambda v: v.add_note("another") or v,
        ),
        "exception_chained": (lambda nb: _chained(), lambda v: _set_attr(v, "args", ("changed",))),
        "os_error": (lambda nb: OSError(2, "No such file", "data.csv"), lambda v: OSError(2, "No such file", "b.csv")),
        "notebook_exception": (
            lambda nb: _looked_at(_raised(nb["TrainingError"]("diverged", 7))),
            lambda v: _set_attr(v, "step", 8),
        ),
        "exception_group": (
            lambda nb: ExceptionGroup("two", [ValueError(1), TypeError(2)]),
            lambda v: ExceptionGroup("two", [ValueError(1), TypeError(3)]),
        ),
        "recorded_warnings": (lambda nb: _recorded_warnings(), lambda v: _set_attr(v[0], "lineno", v[0].lineno + 1)),
        "warning_message_text": (
            lambda nb: _recorded_warnings(),
            lambda v: _set_attr(v[1], "message", DeprecationWarning("new API")),
        ),
        "object_holding_exception": (
            lambda nb: _set_attr(nb["Bare"](), "error", _looked_at(_raised(RuntimeError("oom")))),
            lambda v: _set_attr(v, "error", RuntimeError("nan")),
        ),
        "default_repr_object": (lambda nb: nb["Bare"](), lambda v: _set_attr(v, "x", 1)),
        "reduce_through_partial": (lambda nb: nb["ViaPartial"](5), lambda v: _set_attr(v, "value", 6)),
        "weak_set": (_weak_set, lambda v: (v[1].discard(v[0][0]), v)[1]),
        "ordered_dict": (lambda nb: collections.OrderedDict(b=1, a=2), lambda v: v.move_to_end("b") or v),
        "defaultdict": (lambda nb: collections.defaultdict(list, a=[1]), lambda v: v["b"] and v or v),
        "counter": (lambda nb: collections.Counter("mississippi"), lambda v: v.update("s") or v),
        "deque": (lambda nb: collections.deque([1, 2, 3], maxlen=5), lambda v: v.rotate(1) or v),
        "fraction_decimal": (
            lambda nb: (fractions.Fraction(3, 7), decimal.Decimal("1.10")),
            lambda v: (v[0], decimal.Decimal("1.1")),
        ),
        "datetime": (
            lambda nb: datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
            lambda v: v + datetime.timedelta(microseconds=1),
        ),
        "regex_uuid_path": (
            lambda nb: (re.compile(r"a+b", re.I), uuid.UUID(int=12345), PurePosixPath("/data/a.csv")),
            lambda v: (re.compile(r"a+b"), v[1], v[2]),
        ),
        "partial": (lambda nb: functools.partial(int, base=2), lambda v: functools.partial(int, base=8)),
        "notebook_dataclass": (lambda nb: nb["Config"](), lambda v: _set_attr(v, "lr", 0.2)),
        "notebook_enum_member": (lambda nb: nb["Color"].GREEN, lambda v: _member(v, "RED")),
        "notebook_slots": (lambda nb: nb["Slotted"](1, [2]), lambda v: _set_attr(v, "b", [3])),
        "notebook_namedtuple": (lambda nb: nb["Pair"](1, "x"), lambda v: v._replace(right="y")),
        "notebook_function": (lambda nb: nb["scale"], lambda v: _set_attr(v, "__defaults__", (3,))),
        "notebook_closure": (lambda nb: nb["make_counter"](10), lambda v: v() and v),
        "notebook_recursive_function": (lambda nb: nb["fib"], lambda v: _set_attr(v, "cache", {})),
        "notebook_class": (lambda nb: nb["Scheduler"], lambda v: _set_attr(v, "base", 0.2)),
        "notebook_lambda": (lambda nb: eval("lambda x: x + 1", {"__name__": "__main__"}), lambda v: lambda x: x + 2),
        "numpy_array": (lambda nb: np.arange(12, dtype=np.float32).reshape(3, 4), lambda v: _bump_array(v)),
        "numpy_view": (lambda nb: np.arange(12).reshape(3, 4)[:, ::2], lambda v: _bump_array(v)),
        "numpy_nan": (lambda nb: np.array([np.nan, -0.0, 1.0]), lambda v: _bump_array(v, 2)),
        "numpy_structured": (
            lambda nb: np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),
            lambda v: v.astype([("a", "<i4"), ("c", "<f8")]),
        ),
        "numpy_object": (lambda nb: np.array([{"a"}, None, 1.5], dtype=object), lambda v: _set_first(v, {"b"})),
        "numpy_masked": (
            lambda nb: np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False]),
            lambda v: _set_mask(v),
        ),
        "numpy_scalar_dtype_rng": (
            lambda nb: (np.float32(1.5), np.dtype("f8"), np.random.default_rng(5)),
            lambda v: (v[0], v[1], np.random.default_rng(6)),
        ),
        "tensor": (lambda nb: torch.linspace(0, 1, 7), _bump_tensor),
        "tensor_requires_grad": (lambda nb: torch.ones(3, requires_grad=True), lambda v: v.detach()),
        "parameter": (lambda nb: torch.nn.Parameter(torch.zeros(2, 2)), _bump_tensor),
        "sparse_tensor": (
            lambda nb: torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2), check_invariants=True),
            lambda v: torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 3.0], (2, 2), check_invariants=True),
        ),
        "model_and_optimizer": (lambda nb: _optimizer(), lambda v: (_bump_tensor(v[0].bias), v)[1]),
        "torch_misc": (
            lambda nb: (torch.float16, torch.device("cpu"), torch.Size([2, 3]), torch.Generator().manual_seed(3)),
            lambda v: (v[0], v[1], torch.Size([3, 2]), v[3]),
        ),
        "matplotlib_figure": (lambda nb: _figure(), lambda v: (v.axes[0].lines[0].set_ydata([3, 2, 1]), v)[1]),
        "dataframe": (
            lambda nb: pd.DataFrame({"a": [1, 2], "b": ["x", "y"], "c": [0.5, float("nan")]}),
            lambda v: _set_cell(v),
        ),
        "series_categorical": (
            lambda nb: (pd.Series([1.0, float("nan")], name="s"), pd.Categorical(["a", "b", "a"])),
            lambda v: (v[0].rename("t"), v[1]),
        ),
        "index_timestamp": (
            lambda nb: (pd.MultiIndex.from_product([["a", "b"], [1, 2]]), pd.Timestamp("2024-01-01", tz="UTC")),
            lambda v: (v[0], v[1] + pd.Timedelta(1)),
        ),
    }


def _figure() -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure()
    FigureCanvasAgg(fig)
    fig.add_subplot().plot([1, 2, 3], label="loss")
    fig.canvas.draw()  # caches filled, nothing stale: a restored figure has neither
    return fig


def _notes(error: BaseException) -> BaseException:
    error.add_note("while loading batch 3")
    return error


def _member(member: Any, name: str) -> Any:
    return type(member)[name]


def _bump_array(a: Any, at: int = 0) -> Any:
    a.flat[at] = 1 if a.flat[at] != 1 else 2
    return a


def _set_mask(a: Any) -> Any:
    a.mask = [False, False, False]
    return a


def _set_cell(frame: Any) -> Any:
    frame.loc[0, "a"] = 5
    return frame
