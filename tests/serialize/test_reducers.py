"""Notebook classes inside libraries' machinery: after a restore in a new process they continue
exactly as the uninterrupted notebook does.

Each case builds its state as notebook cells would (``tests.serialize.test_pickler.notebook``), saves it,
restores it in a fresh Python process that never saw the code, runs the next cell there, and
runs the same cell here: the two outputs must be equal.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jupyter_pause.serialize.digests import value_digest
from tests.support.dumping import notebook, pick, resume_elsewhere


def continues_identically(code: str, names: str, cell: str, tmp_path: Path) -> Any:
    """Run ``code`` as a notebook, save ``names``, and run ``cell`` after a restore elsewhere and
    here; asserts both give the same ``out`` and returns it."""
    ns = notebook(code)
    got = resume_elsewhere(pick(ns, names), cell, tmp_path)
    exec(textwrap.dedent(cell), ns)
    assert got == json.loads(json.dumps(ns["out"]))
    return got


# -- torch -----------------------------------------------------------------------------------------

PRUNED_MODEL = """
import torch
from torch import nn
from torch.nn.utils import prune

class ThresholdPruning(prune.BasePruningMethod):
    PRUNING_TYPE = "unstructured"
    def __init__(self, threshold):
        self.threshold = threshold
    def compute_mask(self, t, default_mask):
        return default_mask * (t.abs() >= self.threshold).to(default_mask.dtype)

def double_input(module, args):
    return (args[0] * 2,)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
ThresholdPruning.apply(model[0], "weight", threshold=0.2)
prune.l1_unstructured(model[2], "weight", amount=0.3)
handle = model[0].register_forward_pre_hook(double_input)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x, y = torch.randn(8, 4), torch.randn(8, 2)
"""

NEXT_STEP = """
hooks = list(model[0]._forward_pre_hooks.values())
losses = []
for _ in range(3):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
kept = int(model[0].weight_mask.sum())
handle.remove()
unhooked = model(x).sum().item()
prune.remove(model[0], "weight")
out = {
    "losses": losses,
    "kept": kept,
    "hooks": sorted(type(h).__name__ for h in hooks),
    "unhooked": unhooked,
    "pruned_again": float((ThresholdPruning(0.3).compute_mask(model[0].weight, torch.ones(16, 4)) == 0).sum()),
}
"""


@pytest.mark.integration  # the new process imports torch: seconds
def test_notebook_pruning_method_and_pre_hook_continue_training_identically(tmp_path: Path) -> None:
    """A notebook subclass of torch's abstract ``BasePruningMethod`` comes back with its masks and hooks."""
    out = continues_identically(
        PRUNED_MODEL, "torch nn prune ThresholdPruning model handle opt x y", NEXT_STEP, tmp_path
    )
    assert out["hooks"] == ["ThresholdPruning", "function"]
    assert out["losses"][0] != out["losses"][2] and 0 < out["kept"] < 64


@pytest.mark.integration
def test_parametrized_modules_keep_training_the_same_tensors(tmp_path: Path) -> None:
    """torch refuses to pickle a parametrized module (weight_norm, a notebook parametrization):
    it comes back parametrized, and the optimizer still updates its original tensors."""
    code = """
    import torch
    from torch import nn
    from torch.nn.utils import parametrizations, parametrize

    class Symmetric(nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)

    torch.manual_seed(0)
    model = nn.Sequential(parametrizations.weight_norm(nn.Linear(3, 3)), nn.Tanh(), nn.Linear(3, 3))
    parametrize.register_parametrization(model[2], "weight", Symmetric())
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    x = torch.randn(6, 3)
    """
    cell = """
    losses = []
    for _ in range(3):
        loss = model(x).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(loss.item())
    w = model[2].weight
    params = list(model.parameters())
    trained = opt.param_groups[0]["params"]
    out = {
        "losses": losses,
        "classes": [type(model[0]).__name__, type(model[2]).__name__],
        "symmetric": bool(torch.equal(w, w.T)),
        "optimizer_holds_originals": all(any(p is q for q in params) for p in trained),
        "original_is_trained": any(p is model[2].parametrizations.weight.original for p in trained),
    }
    parametrize.remove_parametrizations(model[2], "weight")
    out["removed"] = [type(model[2]).__name__, bool(torch.equal(model[2].weight, w))]
    """
    out = continues_identically(code, "torch nn parametrize Symmetric model opt x", cell, tmp_path)
    assert out["classes"] == ["ParametrizedLinear", "ParametrizedLinear"] and out["symmetric"]
    assert out["optimizer_holds_originals"] and out["original_is_trained"] and out["removed"] == ["Linear", True]


@pytest.mark.integration
def test_bound_apply_of_a_notebook_autograd_function_keeps_its_backward(tmp_path: Path) -> None:
    """``relu = MyReLU.apply`` of a notebook ``torch.autograd.Function`` still runs its own backward."""
    code = """
    import torch
    class MyReLU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.clamp(min=0)
        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * (x > 0) * 3  # not the true gradient: proves this backward ran
    relu = MyReLU.apply
    """
    cell = """
    t = torch.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    relu(t).sum().backward()
    out = {"grad": t.grad.tolist(), "bound_to_class": relu.__self__ is MyReLU, "fn": type(relu(t).grad_fn).__name__}
    """
    out = continues_identically(code, "torch MyReLU relu", cell, tmp_path)
    assert out == {"grad": [0.0, 3.0, 3.0], "bound_to_class": True, "fn": "MyReLUBackward"}


# -- scikit-learn ------------------------------------------------------------------------------------

ESTIMATORS = """
import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import make_classification
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.svm import LinearSVC

X, y = make_classification(n_samples=120, n_features=6, random_state=0)

class Center(TransformerMixin, BaseEstimator):
    def __init__(self, scale=1.0):
        self.scale = scale
    def fit(self, X, y=None):
        self.mean_ = X.mean(axis=0)
        return self
    def transform(self, X):
        return (X - self.mean_) * self.scale

class NotebookSVC(LinearSVC):
    def __init__(self, C=1.0, shift=0.0):
        super().__init__(C=C)
        self.shift = shift
    def decision_function(self, X):
        return super().decision_function(X) - self.shift

def smallest_good_C(cv_results):
    means = cv_results["mean_test_score"]
    good = np.flatnonzero(means >= means.max() - 0.05)
    return int(good[np.argmin([cv_results["params"][i]["notebooksvc__C"] for i in good])])

search = GridSearchCV(
    make_pipeline(Center(), NotebookSVC()), {"notebooksvc__C": [0.01, 0.1, 1.0]}, refit=smallest_good_C, cv=3
).fit(X, y)
calibrated = CalibratedClassifierCV(NotebookSVC(C=0.1, shift=0.2), cv=3).fit(X, y)
"""

ESTIMATORS_NEXT = """
again = clone(search).fit(X[:90], y[:90])
out = {
    "search": search.predict(X).tolist(),
    "best": search.best_index_,
    "refit_is_ours": search.refit is smallest_good_C,
    "proba": calibrated.predict_proba(X[:4]).round(12).tolist(),
    "inner": type(calibrated.calibrated_classifiers_[0].estimator).__name__,
    "params": sorted(again.best_estimator_.get_params()),
    "again": again.predict(X[90:]).tolist(),
}
"""


@pytest.mark.integration  # the new process imports scikit-learn: seconds
def test_notebook_estimators_inside_meta_estimators_predict_and_refit_identically(tmp_path: Path) -> None:
    out = continues_identically(
        ESTIMATORS, "np clone X y Center NotebookSVC smallest_good_C search calibrated", ESTIMATORS_NEXT, tmp_path
    )
    assert out["refit_is_ours"] is True and out["inner"] == "NotebookSVC"
    assert "notebooksvc__shift" in out["params"]


# -- classes of the notebook itself -------------------------------------------------------------------


def test_a_class_defined_twice_keeps_both_versions(tmp_path: Path) -> None:
    """Instances of the first and of the redefined class come back, each with its own class."""
    code = """
    class Point:
        def __init__(self, x):
            self.x = x
        def norm(self):
            return abs(self.x)
    old = Point(-3)
    class Point:
        def __init__(self, x, y):
            self.x, self.y = x, y
        def norm(self):
            return (self.x ** 2 + self.y ** 2) ** 0.5
    new = Point(3, 4)
    both = [old, new, old]
    """
    cell = """
    out = {
        "norms": [old.norm(), new.norm()],
        "classes": [type(new) is Point, type(old) is not Point, type(both[0]) is type(old), both[2] is old],
        "old_class_still_builds": type(old)(-5).norm(),
    }
    """
    out = continues_identically(code, "Point old new both", cell, tmp_path)
    assert out == {"norms": [3, 5.0], "classes": [True, True, True, True], "old_class_still_builds": 5}


def test_abc_generic_and_typevar_classes_of_the_notebook(tmp_path: Path) -> None:
    """A notebook ABC keeps its abstract methods and registered virtual subclasses; a notebook
    ``Generic[T]`` class with a notebook ``TypeVar`` comes back (the TypeVar used to fail)."""
    code = """
    from abc import ABC, abstractmethod
    from typing import Generic, TypeVar

    class Shape(ABC):
        @abstractmethod
        def area(self): ...

    class Square(Shape):
        def __init__(self, side):
            self.side = side
        def area(self):
            return self.side ** 2

    Shape.register(tuple)
    T = TypeVar("T", bound=Shape)

    class Box(Generic[T]):
        def __init__(self, item: T):
            self.item = item

    box = Box[Square](Square(3))
    """
    cell = """
    try:
        Shape()
        abstract = False
    except TypeError:
        abstract = True
    out = {
        "area": box.item.area(),
        "abstract": abstract,
        "virtual": issubclass(tuple, Shape),
        "isinstance": isinstance(box.item, Shape),
        "params": [p is T for p in Box.__parameters__],
        "bound": T.__bound__ is Shape,
        "new_box": Box[int](2).item,
    }
    """
    out = continues_identically(code, "Shape Square T Box box", cell, tmp_path)
    assert out == {
        "area": 9,
        "abstract": True,
        "virtual": True,
        "isinstance": True,
        "params": [True],
        "bound": True,
        "new_box": 2,
    }


def test_bound_methods_of_notebook_instances_and_classes(tmp_path: Path) -> None:
    code = """
    class Counter:
        def __init__(self):
            self.n = 0
        def inc(self):
            self.n += 1
            return self.n
        @classmethod
        def fresh(cls):
            return cls()
    counter = Counter()
    counter.inc()
    inc = counter.inc
    fresh = Counter.fresh
    """
    cell = """
    out = [inc(), counter.n, inc.__self__ is counter, fresh.__self__ is Counter, fresh().inc()]
    """
    assert continues_identically(code, "Counter counter inc fresh", cell, tmp_path) == [2, 2, True, True, 1]


def test_methods_sharing_constants_digest_the_same_after_a_restore(tmp_path: Path) -> None:
    """The compiler shares equal constants between the methods of one cell; the restored class
    must hold the same object graph, or the restore test reads "differs from the checkpoint"."""
    code = """
    class Stats:
        def mean(self, a):
            return a.mean(axis=0)
        def spread(self, a):
            return a.std(axis=0)
    """
    ns = notebook(code)
    before = value_digest(ns["Stats"])
    out = resume_elsewhere(
        pick(ns, "Stats"),
        "from jupyter_pause.serialize.digests import value_digest\nout = value_digest(Stats)",
        tmp_path,
    )
    assert out == before


def test_attrs_class_of_the_notebook_validates_and_builds(tmp_path: Path) -> None:
    """attrs compiles ``__init__`` with a copy of the notebook's globals plus its own helpers; the
    restored ``__init__`` must keep those helpers (it failed with NameError)."""
    pytest.importorskip("attrs")
    code = """
    import attrs

    @attrs.define
    class Point:
        x: int
        y: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    p = Point(1, 2)
    """
    cell = """
    try:
        Point(1, -1)
        refused = False
    except ValueError:
        refused = True
    out = [repr(p), repr(Point(3)), refused, attrs.asdict(p)]
    """
    out = continues_identically(code, "attrs Point p", cell, tmp_path)
    assert out == ["Point(x=1, y=2)", "Point(x=3, y=0)", True, {"x": 1, "y": 2}]


def test_pydantic_model_of_the_notebook_validates_and_builds(tmp_path: Path) -> None:
    pytest.importorskip("pydantic")
    code = """
    from pydantic import BaseModel, Field, ValidationError

    class Item(BaseModel):
        name: str
        price: float = Field(gt=0)
        tags: list[str] = []

    item = Item(name="pen", price=1.5, tags=["blue"])
    """
    cell = """
    try:
        Item(name="cup", price=-1)
        refused = False
    except ValidationError:
        refused = True
    out = [item.model_dump(), Item(name="cup", price=3).price, refused, sorted(Item.model_fields)]
    """
    out = continues_identically(code, "Item item ValidationError", cell, tmp_path)
    assert out == [{"name": "pen", "price": 1.5, "tags": ["blue"]}, 3.0, True, ["name", "price", "tags"]]


# -- pandas -------------------------------------------------------------------------------------------


@pytest.mark.integration  # the new process imports pandas
def test_notebook_pandas_accessor_is_registered_again(tmp_path: Path) -> None:
    """pandas keeps accessor registrations on its own classes: they come back with the notebook class."""
    code = """
    import pandas as pd

    @pd.api.extensions.register_dataframe_accessor("spread")
    @pd.api.extensions.register_series_accessor("spread")
    class Spread:
        def __init__(self, obj):
            self._obj = obj
        def range(self):
            return (self._obj.max() - self._obj.min()).tolist()

    df = pd.DataFrame({"a": [1, 5], "b": [2, 9]})
    """
    cell = """
    out = [df.spread.range(), df["b"].spread.range(), type(df.spread) is Spread]
    """
    assert continues_identically(code, "pd Spread df", cell, tmp_path) == [[4, 7], 7, True]


# -- matplotlib ---------------------------------------------------------------------------------------


@pytest.mark.integration  # the new process imports matplotlib: seconds
def test_figure_and_its_artists_redraw_identically(tmp_path: Path) -> None:
    code = """
    import io
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax, bars_ax) = plt.subplots(2, 1, figsize=(3, 3))
    (line,) = ax.plot(np.arange(10), np.arange(10) ** 1.5, label="growth")
    ax.legend()
    note = ax.annotate(
        "here", xy=(5, 11), xytext=(0.2, 0.8), textcoords="axes fraction", arrowprops={"arrowstyle": "->"}
    )
    bars = bars_ax.bar(["a", "b", "c"], [3, 1, 2])
    fig.suptitle("two panels")

    def pixels(figure):
        buffer = io.BytesIO()
        figure.savefig(buffer, format="rgba", dpi=40)
        return buffer.getvalue()
    """
    cell = """
    import hashlib
    first = hashlib.sha256(pixels(fig)).hexdigest()
    line.set_color("red")
    recolored = hashlib.sha256(pixels(fig)).hexdigest()
    out = {
        "first": first,
        "recolored": recolored,
        "links": [line.axes is ax, ax.figure is fig, note.axes is ax, bars[0].axes is bars_ax],
        "title": fig._suptitle.get_text(),
    }
    """
    import matplotlib

    # drawn here under matplotlib's defaults, as in the new process: an earlier test in this
    # process may have set a style (seaborn's set_theme does), which a drawing reads
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        out = continues_identically(code, "io plt np fig ax bars_ax line note bars pixels", cell, tmp_path)
    assert out["first"] != out["recolored"] and out["links"] == [True, True, True, True]
