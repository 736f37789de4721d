"""What a pandas value holds, in a form no pandas release changes: for the restore test across an upgrade.

A frame's pickled form changes with pandas (its block manager, the module of its classes, the
string dtype of pandas 3), so after an upgrade its value digest differs while its values do not.
``fingerprint`` records what a user would call its value instead: per column a canonical dtype and
a digest of canonical bytes, and the index and column labels the same way. The canonical forms:

- strings, whether in an ``object`` column or pandas 3's ``str`` dtype: ``string``, each value as
  UTF-8, every missing value (``None``, ``NaN``, ``pd.NA``) as one;
- categoricals: ``category[<categories' form>, ordered=...]``, the categories and the codes;
- datetimes: ``datetime64[ns, <tz>]``, int64 nanoseconds since the epoch (UTC) plus the time
  zone's name (a ``pytz`` and a ``zoneinfo`` zone of one name are one); timedeltas likewise;
- NumPy numbers and bools: the dtype (``<f8``) and the bytes; nullable ones (``Int64``): the
  values and the mask;
- anything else (periods, intervals, mixed objects): the dtype's name and the value digest of
  the values as Python objects.

``plain``/``rebuild`` carry a few rows of a frame as plain data (lists of Python values) and
build them back into a frame, the same way in any pandas release: the inputs of an estimator's
check (``estimators``).
"""

from __future__ import annotations

import sys
from typing import Any

import xxhash

from ..serialize.digests import value_digest

#: Column labels kept by name in a fingerprint, to say which column differs.
NAMED_COLUMNS = 200


class Unrecordable(Exception):
    """A column whose dtype the check cannot carry as plain data."""


def is_pandas(value: Any) -> bool:
    """A DataFrame, Series or Index (without importing pandas where the session has not)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(value, (pd.DataFrame, pd.Series, pd.Index))


def _strings(values: Any) -> bool:
    """Whether a Series or Index holds strings (and missing values) only: object or pandas' string dtypes."""
    import pandas as pd

    if isinstance(values.dtype, pd.StringDtype):
        return True
    return values.dtype == object and pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty")


def _string_bytes(items: Any) -> bytes:
    """Length-prefixed UTF-8 of each value, a missing one as length -1."""
    import numpy as np

    encoded = [x.encode("utf-8", "surrogatepass") if isinstance(x, str) else None for x in items]
    lengths = np.array([-1 if e is None else len(e) for e in encoded], dtype="<i8")
    return lengths.tobytes() + b"".join(e for e in encoded if e is not None)


def canonical(values: Any) -> tuple[str, Any]:
    """(canonical dtype, an xxh3-128 hasher fed with the canonical bytes) of a Series' or Index' values."""
    import numpy as np
    import pandas as pd

    array, dtype = values.array, values.dtype
    h = xxhash.xxh3_128()
    if isinstance(dtype, pd.CategoricalDtype):
        form, inner = canonical(dtype.categories)
        h.update(inner.digest())
        h.update(np.asarray(array.codes, dtype="<i8"))
        return f"category[{form}, ordered={bool(dtype.ordered)}]", h
    if _strings(values):
        h.update(_string_bytes(array.to_numpy(dtype=object)))
        return "string", h
    if pd.api.types.is_datetime64_any_dtype(dtype):
        h.update(np.ascontiguousarray(pd.DatetimeIndex(array).as_unit("ns").asi8))
        tz = getattr(dtype, "tz", None)
        return f"datetime64[ns{', ' + str(tz) if tz is not None else ''}]", h
    if pd.api.types.is_timedelta64_dtype(dtype):
        h.update(np.ascontiguousarray(pd.TimedeltaIndex(array).as_unit("ns").asi8))
        return "timedelta64[ns]", h
    if isinstance(dtype, np.dtype) and dtype.kind in "biufc":
        h.update(np.ascontiguousarray(array.to_numpy()))
        return dtype.str, h
    if getattr(dtype, "numpy_dtype", None) is not None and dtype.numpy_dtype.kind in "biufc":  # Int64, boolean
        h.update(np.ascontiguousarray(array.to_numpy(dtype=dtype.numpy_dtype, na_value=0)))
        h.update(np.ascontiguousarray(array.isna()))
        return str(dtype), h
    digest = value_digest(array.to_numpy(dtype=object).tolist())
    if digest is None:
        raise Unrecordable(f"its {dtype} values are too many objects to fingerprint")
    h.update(digest.encode())
    return str(dtype), h


def _labels(index: Any) -> dict[str, Any]:
    """An index by its names, and per level its canonical dtype and digest."""
    levels = [index.get_level_values(i) for i in range(index.nlevels)]
    forms = [canonical(level) for level in levels]
    return {
        "names": [str(n) for n in index.names],
        "dtypes": [form for form, _ in forms],
        "digests": [h.hexdigest() for _, h in forms],
    }


def fingerprint(value: Any) -> dict[str, Any]:
    """What a DataFrame, Series or Index holds (plain data), whatever pandas pickled it."""
    import pandas as pd

    if isinstance(value, pd.Index):
        return {"kind": "Index", "shape": [len(value)], "index": _labels(value)}
    frame = value.to_frame() if isinstance(value, pd.Series) else value
    columns = [canonical(frame.iloc[:, i]) for i in range(frame.shape[1])]
    return {
        "kind": "Series" if isinstance(value, pd.Series) else "DataFrame",
        "shape": list(frame.shape),
        "index": _labels(frame.index),
        "columns": _labels(frame.columns),
        "names": [str(c) for c in frame.columns[:NAMED_COLUMNS]],
        "dtypes": [form for form, _ in columns],
        "digests": [h.hexdigest() for _, h in columns],
    }


def compare(now: dict[str, Any], then: dict[str, Any]) -> tuple[bool, str]:
    """Whether two fingerprints are of one value; (equal, what differs first)."""
    if now["kind"] != then["kind"] or now["shape"] != then["shape"]:
        return False, f"it is a {now['kind']} of shape {now['shape']}, a {then['kind']} of {then['shape']} was saved"
    for part in ("index", "columns"):
        if part in then and now[part] != then[part]:
            return False, f"its {part} labels differ"
    for i, (form, digest) in enumerate(zip(then.get("dtypes", []), then.get("digests", []), strict=True)):
        name = then["names"][i] if i < len(then["names"]) else f"#{i}"
        if now["dtypes"][i] != form:
            return False, f"column {name!r} is {now['dtypes'][i]}, it was {form}"
        if now["digests"][i] != digest:
            return False, f"column {name!r}: values differ"
    return True, "values equal"


def _plain_column(column: Any) -> dict[str, Any]:
    """A few values of a column as plain data, with how to build them back."""
    import numpy as np
    import pandas as pd

    array, dtype = column.array, column.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return {
            "form": "category",
            "codes": array.codes.tolist(),
            "categories": _plain_column(pd.Series(dtype.categories)),
            "ordered": bool(dtype.ordered),
        }
    if _strings(column):
        return {"form": "string", "values": [x if isinstance(x, str) else None for x in array.to_numpy(dtype=object)]}
    if pd.api.types.is_datetime64_any_dtype(dtype):
        tz = getattr(dtype, "tz", None)
        ints = pd.DatetimeIndex(array).as_unit("ns").asi8.tolist()
        return {"form": "datetime", "values": ints, "nat": list(pd.isna(array)), "tz": None if tz is None else str(tz)}
    if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
        return {"form": "numpy", "dtype": dtype.str, "values": array.to_numpy().tolist()}
    if getattr(dtype, "numpy_dtype", None) is not None and dtype.numpy_dtype.kind in "biuf":
        return {"form": "nullable", "dtype": str(dtype), "values": [None if pd.isna(x) else x for x in array.tolist()]}
    raise Unrecordable(f"column {column.name!r} is {dtype}, which the check cannot carry as plain data")


def plain(frame: Any) -> dict[str, Any]:
    """A (small) frame as plain data: its column labels and each column's values and form."""
    return {
        "kind": "frame",
        "labels": frame.columns.tolist(),
        "columns": [_plain_column(frame.iloc[:, i]) for i in range(frame.shape[1])],
    }


def _rebuilt_column(spec: dict[str, Any]) -> Any:
    import numpy as np
    import pandas as pd

    form = spec["form"]
    if form == "category":
        categories = _rebuilt_column(spec["categories"])
        return pd.Series(pd.Categorical.from_codes(spec["codes"], categories=categories, ordered=spec["ordered"]))
    if form == "string":
        return pd.Series(spec["values"], dtype=object)
    if form == "datetime":
        raw = np.array(spec["values"], dtype="<i8").view("datetime64[ns]")
        raw[np.array(spec["nat"], dtype=bool)] = np.datetime64("NaT")
        stamps = pd.Series(raw)
        return stamps if spec["tz"] is None else stamps.dt.tz_localize("UTC").dt.tz_convert(spec["tz"])
    if form == "numpy":
        return pd.Series(np.array(spec["values"], dtype=spec["dtype"]))
    return pd.Series(pd.array(spec["values"], dtype=spec["dtype"]))


def rebuild(recipe: dict[str, Any]) -> Any:
    """The frame ``plain`` recorded, built the same way in any pandas release."""
    import pandas as pd

    columns = [_rebuilt_column(spec) for spec in recipe["columns"]]
    frame = pd.concat(columns, axis=1) if columns else pd.DataFrame()
    frame.columns = recipe["labels"]
    return frame
