"""jupyter_pause.proof.frames: a pandas value by what it holds, whatever pandas laid it out."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pytest

from jupyter_pause.proof import frames


def table() -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "city": pd.Series(["paris", None, "nice", "lyon"], dtype=object),
            "size": pd.Categorical(["s", "m", "l", "m"], categories=["s", "m", "l"], ordered=True),
            "when": pd.Series(
                pd.to_datetime(["2024-03-31 00:30", None, "2024-03-31 03:30", "2024-10-27 02:30"]).tz_localize("UTC")
            ).dt.tz_convert(ZoneInfo("Europe/Paris")),
            "x": [0.1, -0.0, np.nan, 2.5],
            "n": pd.array([1, None, 3, 4], dtype="Int64"),
        }
    )
    return frame.set_axis(pd.Index(["a", "b", "c", "d"], name="key"))


def test_strings_are_one_form_whether_object_or_the_str_dtype():
    """pandas 3 reads a column of strings as its ``str`` dtype, pandas 2 as ``object``: one value."""
    as_object = table()
    as_str = table().astype({"city": "string"})
    assert as_object["city"].dtype == object and as_str["city"].dtype != object

    assert frames.fingerprint(as_str) == frames.fingerprint(as_object)
    assert frames.fingerprint(as_object)["dtypes"][0] == "string"


def test_datetimes_are_one_form_whatever_their_unit_and_zone_object():
    """A zone is its name (zoneinfo, datetime.timezone or pytz alike), a time its nanoseconds."""
    stamps = pd.Series(pd.to_datetime(["2024-01-01 10:00", "2024-06-01 12:00"]))
    utc_zoneinfo = stamps.dt.tz_localize(ZoneInfo("UTC"))
    utc_fixed = stamps.dt.tz_localize(dt.timezone.utc)

    assert frames.fingerprint(stamps.astype("datetime64[us]")) == frames.fingerprint(stamps.astype("datetime64[ns]"))
    assert frames.fingerprint(utc_zoneinfo) == frames.fingerprint(utc_fixed)
    assert frames.fingerprint(utc_fixed)["dtypes"] == ["datetime64[ns, UTC]"]
    assert frames.fingerprint(stamps) != frames.fingerprint(utc_fixed)


def test_a_categorical_is_its_categories_and_codes():
    base = frames.fingerprint(table())
    reordered = table()
    reordered["size"] = reordered["size"].cat.reorder_categories(["l", "m", "s"])
    plain = table().astype({"size": object})

    assert frames.fingerprint(table()) == base
    assert frames.compare(frames.fingerprint(reordered), base) == (
        False,
        "column 'size': values differ",
    )
    ok, how = frames.compare(frames.fingerprint(plain), base)
    assert not ok and how == "column 'size' is string, it was category[string, ordered=True]"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda f: f.assign(x=f["x"] + 1e-12), "column 'x': values differ"),
        (lambda f: f.assign(city=f["city"].replace("nice", "Nice")), "column 'city': values differ"),
        (lambda f: f.set_axis(pd.Index(["a", "b", "c", "e"], name="key")), "its index labels differ"),
        (lambda f: f.rename(columns={"x": "y"}), "its columns labels differ"),
        (lambda f: f.iloc[:3], "it is a DataFrame of shape [3, 5], a DataFrame of [4, 5] was saved"),
    ],
)
def test_a_value_that_changed_is_named_by_what_changed(change, said):
    assert frames.compare(frames.fingerprint(change(table())), frames.fingerprint(table())) == (False, said)


def test_series_and_index_have_fingerprints_of_their_own():
    series, index = table()["x"], table().index

    assert frames.compare(frames.fingerprint(series.copy()), frames.fingerprint(series)) == (True, "values equal")
    assert frames.fingerprint(index)["kind"] == "Index"
    assert frames.fingerprint(series)["kind"] == "Series"
    assert frames.fingerprint(pd.Index(["a", "b", "c", "z"], name="key")) != frames.fingerprint(index)


def test_a_few_rows_travel_as_plain_data_and_come_back_the_same():
    rows = table().reset_index(drop=True)
    assert rows["city"].tolist()[:1] == ["paris"] and rows["when"].notna().sum() == 3
    recipe = frames.plain(rows)

    rebuilt = frames.rebuild(recipe)

    assert frames.fingerprint(rebuilt) == frames.fingerprint(rows)
    assert all(type(v) in (str, int, float, bool, type(None)) for c in recipe["columns"] for v in c.get("values", []))


def test_a_column_the_check_cannot_carry_is_named():
    periods = pd.DataFrame({"p": pd.period_range("2024-01", periods=3, freq="M")})

    with pytest.raises(frames.Unrecordable, match="column 'p' is period"):
        frames.plain(periods)
    assert frames.fingerprint(periods)["dtypes"] == ["period[M]"]
