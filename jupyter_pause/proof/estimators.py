"""What a fitted estimator computes, on a few recorded inputs: for the restore test across an upgrade.

An estimator (scikit-learn's, or any object with ``fit`` and ``get_params``) pickles with its
library's version in its state, so after an upgrade its value digest differs even when it computes
what it did. ``fingerprint`` records instead its outputs (``predict``, ``predict_proba``,
``decision_function``, ``transform``: those it has) on a few rows, and ``compare`` says whether
outputs taken again agree: exactly for labels, within the dtype's tolerance for floats. An
unfitted estimator computes nothing yet: its parameters are compared instead.

The rows come from the session where one fits: the first rows of a frame whose columns include
the estimator's ``feature_names_in_``, or of a 2-D array (or all-numeric frame) as wide as its
``n_features_in_``; else they are made up from ``n_features_in_`` (deterministic, exact in binary).
They are recorded as plain data and built back the same way before each pass, at checkpoint as
at resume, so both passes see one input whatever pandas or NumPy builds it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from ..serialize.digests import value_digest
from . import frames, outputs

#: Rows of input each check runs.
ROWS = 5
#: The methods whose outputs are recorded, those an estimator has.
METHODS = ("predict", "predict_proba", "decision_function", "transform")
#: What an estimator lacking a recorded parameter holds instead.
MISSING = "<missing>"
#: The source of an input made up from the estimator's width, none of the session's values fitting.
MADE_UP = "made up"
#: Values kept per output (its shape is kept whole).
KEPT_VALUES = 20_000
#: (rtol, atol) per float dtype, by NumPy's name: ``torch.testing.assert_close``'s defaults, as the
#: model check holds outputs to them. Other outputs are compared exactly.
TOLERANCE = {name.removeprefix("torch."): pair for name, pair in outputs.TOLERANCE.items() if "bfloat" not in name}


class NoInput(Exception):
    """No input the estimator takes could be found or made; the message says why."""


def is_estimator(value: Any) -> bool:
    """An estimator object (not a class): ``fit`` and ``get_params``, looked up on its class."""
    kind = type(value)
    return not isinstance(value, type) and all(callable(getattr(kind, a, None)) for a in ("fit", "get_params"))


def fitted(estimator: Any) -> bool:
    """Whether ``estimator`` was fitted (scikit-learn's own test, where it is loaded)."""
    validation = sys.modules.get("sklearn.utils.validation")
    if validation is not None:
        try:
            validation.check_is_fitted(estimator)
            return True
        except Exception:  # NotFittedError, or an estimator the test does not understand
            return hasattr(estimator, "n_features_in_")
    return hasattr(estimator, "n_features_in_")


def libraries(estimator: Any) -> list[type]:
    """The classes an estimator is made of: its own and its bases (a notebook's subclass of a
    scikit-learn estimator depends on scikit-learn), then those of the estimators among its
    parameters."""
    kinds = list(type(estimator).__mro__)
    try:
        params = estimator.get_params(deep=True)
    except Exception:  # an estimator whose parameters cannot be listed: its own classes only
        return kinds
    for part in params.values():
        if is_estimator(part) and type(part) not in kinds:
            kinds.append(type(part))
    return kinds


def _from_frame(frame: Any, names: list[str] | None) -> dict[str, Any]:
    rows = frame.head(ROWS)
    return frames.plain(rows[names] if names is not None else rows)


def find_input(estimator: Any, namespace: dict[str, Any]) -> dict[str, Any]:
    """An input recipe for ``estimator``: rows of a session frame or array that fits, else made up."""
    import numpy as np

    names = getattr(estimator, "feature_names_in_", None)
    names = [str(n) for n in names] if names is not None else None
    width = getattr(estimator, "n_features_in_", None)
    pd = sys.modules.get("pandas")
    for source, value in namespace.items():
        is_frame = pd is not None and isinstance(value, pd.DataFrame)
        try:
            if is_frame and names is not None and set(names) <= set(map(str, value.columns)):
                return {**_from_frame(value, names), "source": source}
            if names is None and width and getattr(value, "ndim", 0) == 2 and value.shape[1] == width:
                if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
                    rows = value[:ROWS]
                elif is_frame and all(value[c].dtype.kind in "biuf" for c in value.columns):
                    rows = value.head(ROWS).to_numpy()
                else:
                    continue
                return {"kind": "array", "dtype": rows.dtype.str, "values": rows.tolist(), "source": source}
        except frames.Unrecordable:
            continue
    if not width:
        raise NoInput("it records no n_features_in_, and no session value is an input it takes")
    made = [[((i * 7 + j * 3) % 11 - 5) / 4 for j in range(width)] for i in range(ROWS)]
    if names is None:
        return {"kind": "array", "dtype": "<f8", "values": made, "source": MADE_UP}
    columns = [{"form": "numpy", "dtype": "<f8", "values": [row[j] for row in made]} for j in range(width)]
    return {"kind": "frame", "labels": names, "columns": columns, "source": MADE_UP}


def build(recipe: dict[str, Any]) -> Any:
    """The input a recipe describes, built the same way in any release."""
    import numpy as np

    if recipe["kind"] == "frame":
        return frames.rebuild(recipe)
    return np.array(recipe["values"], dtype=recipe["dtype"])


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The libraries' warnings of a check pass are none of the notebook's (main thread only:
    ``catch_warnings`` is process-wide)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _output(method: str, out: Any) -> dict[str, Any]:
    import numpy as np

    if hasattr(out, "toarray"):  # a SciPy sparse matrix (one-hot encodings)
        out = out.toarray()
    if hasattr(out, "to_numpy"):  # set_output(transform="pandas")
        out = out.to_numpy()
    a = np.asarray(out)
    flat = a.reshape(-1)[:KEPT_VALUES]
    if a.dtype.kind == "c":
        flat = flat.view(a.real.dtype) if flat.flags.c_contiguous else np.ascontiguousarray(flat).view(a.real.dtype)
    values = flat.tolist() if a.dtype.kind in "biufcUS" else [str(x) for x in flat.tolist()]
    return {"method": method, "dtype": a.dtype.name, "kind": a.dtype.kind, "shape": list(a.shape), "values": values}


def outputs(estimator: Any, recipe: dict[str, Any]) -> list[dict[str, Any]]:
    """The estimator's outputs on the recipe's input, one record per method it has and that runs."""
    found: list[dict[str, Any]] = []
    failure = ""
    for method in METHODS:
        call = getattr(estimator, method, None)  # scikit-learn hides the methods a model lacks
        if not callable(call):
            continue
        try:
            with _quiet():
                found.append(_output(method, call(build(recipe))))
        except Exception as e:  # a method this input does not suit: the others still count
            failure = failure or f"{method} failed: {type(e).__name__}: {e}"
    if not found:
        raise NoInput(failure or f"it has none of {', '.join(METHODS)}")
    return found


def _param(value: Any) -> Any:
    """A parameter as plain data: a plain value as it is, an estimator by its class and parameters,
    a container by its items, anything else by its value digest."""
    if isinstance(value, (type(None), bool, int, float, str)):
        return value
    if is_estimator(value):
        return {"estimator": type(value).__qualname__, "params": parameters(value)}
    if isinstance(value, (list, tuple)):
        return [_param(v) for v in value]
    if isinstance(value, dict):
        return {"items": {str(k): _param(v) for k, v in value.items()}}
    return {"digest": value_digest(value)}


def parameters(estimator: Any, names: Iterable[str] | None = None) -> dict[str, Any]:
    """An estimator's parameters as plain data. ``names``: only those, read as attributes (a newer
    release lists parameters an estimator pickled by an older one does not have)."""
    names = list(estimator.get_params(deep=False)) if names is None else names
    return {n: _param(getattr(estimator, n, MISSING)) for n in names}


def _param_again(value: Any, then: Any) -> Any:
    """``_param`` of ``value``, an estimator's restricted to the parameters recorded of it."""
    if isinstance(then, dict) and "estimator" in then and is_estimator(value):
        return {"estimator": type(value).__qualname__, "params": _params_again(value, then["params"])}
    if isinstance(then, list) and isinstance(value, (list, tuple)) and len(value) == len(then):
        return [_param_again(v, t) for v, t in zip(value, then, strict=True)]
    return _param(value)


def _params_again(estimator: Any, then: dict[str, Any]) -> dict[str, Any]:
    return {n: _param_again(getattr(estimator, n, MISSING), t) for n, t in then.items()}


def fingerprint(estimator: Any, namespace: dict[str, Any]) -> dict[str, Any]:
    """The recorded input and the outputs on it; an unfitted estimator's parameters (it computes
    nothing yet); ``NoInput`` saying why there is neither."""
    if not fitted(estimator):
        return {"params": parameters(estimator)}
    recipe = find_input(estimator, namespace)
    return {"input": recipe, "outputs": outputs(estimator, recipe)}


def again(estimator: Any, then: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint taken again on what was recorded (after a resume)."""
    if "params" in then:
        return {"params": _params_again(estimator, then["params"])}
    found = {o["method"]: o for o in outputs(estimator, then["input"])}
    return {"input": then["input"], "outputs": [found.get(o["method"]) for o in then["outputs"]]}


def evidence(fingerprint: dict[str, Any]) -> str:
    """What agrees when two fingerprints do: ``outputs``, or an unfitted estimator's ``parameters``."""
    return "parameters" if "params" in fingerprint else "outputs"


def _worst(now: dict[str, Any], then: dict[str, Any]) -> tuple[bool, float]:
    """(within tolerance, largest difference) of two float outputs."""
    import numpy as np

    a, b = np.array(now["values"], dtype=float), np.array(then["values"], dtype=float)
    rtol, atol = TOLERANCE.get(then["dtype"], (0.0, 0.0))
    both_nan = np.isnan(a) & np.isnan(b)
    gap = np.where(both_nan, 0.0, np.abs(a - b))
    worst = float(np.nan_to_num(gap, nan=np.inf).max()) if gap.size else 0.0
    return bool(np.all(both_nan | (gap <= atol + rtol * np.abs(b)))), worst


def compare(now: dict[str, Any], then: dict[str, Any]) -> tuple[bool, str]:
    """Whether the outputs (or parameters) taken again agree with those recorded; (agree, how)."""
    if "params" in then:
        differ = [n for n, v in then["params"].items() if now["params"].get(n) != v]
        return (False, f"parameter {differ[0]!r} differs") if differ else (True, "identical")
    worst = 0.0
    for got, want in zip(now["outputs"], then["outputs"], strict=True):
        method = want["method"]
        if got is None:
            return False, f"{method} no longer runs on the recorded input"
        if got["shape"] != want["shape"]:
            return False, f"{method} gives shape {tuple(got['shape'])}, {tuple(want['shape'])} recorded"
        if got["values"] == want["values"]:
            continue
        if want["kind"] not in "fc" or got["kind"] not in "biufc":
            return False, f"{method} gives other values ({_first_difference(got['values'], want['values'])})"
        ok, gap = _worst(got, want)
        if not ok:
            rtol, atol = TOLERANCE.get(want["dtype"], (0.0, 0.0))
            bound = f"{want['dtype']} tolerance: rtol {rtol:g}, atol {atol:g}"
            return False, f"{method}: largest difference {gap:.3g}, beyond {bound}"
        worst = max(worst, gap)
    return True, f"largest difference {worst:.2g}" if worst else "identical"


def _first_difference(got: list[Any], want: list[Any]) -> str:
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"value {i} is {a!r}, {b!r} recorded"
    return f"{len(got)} values, {len(want)} recorded"
