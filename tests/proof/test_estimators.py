"""jupyter_pause.proof.estimators: a fitted estimator by its outputs on a few recorded rows."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from jupyter_pause.proof import estimators


def training() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame(
        {
            "city": ["paris", "lyon", "nice"] * 10,
            "size": pd.Categorical(["s", "m", "l"] * 10, categories=["s", "m", "l"]),
            "x": rng.normal(size=30),
            "label": [0, 1] * 15,
        }
    )


def pipeline(frame: pd.DataFrame) -> Pipeline:
    pre = ColumnTransformer([("cat", OneHotEncoder(), ["city", "size"]), ("num", StandardScaler(), ["x"])])
    return Pipeline([("pre", pre), ("lr", LogisticRegression())]).fit(frame[["city", "size", "x"]], frame["label"])


def test_the_input_is_the_first_rows_of_the_session_frame_that_has_its_columns():
    """The training frame holds the label too: its feature columns are taken, in the fitted order."""
    frame = training()
    clf = pipeline(frame)

    recipe = estimators.find_input(clf, {"clf": clf, "other": np.ones(3), "frame": frame})

    assert recipe["source"] == "frame" and recipe["labels"] == ["city", "size", "x"]
    built = estimators.build(recipe)
    assert built.shape == (estimators.ROWS, 3)
    np.testing.assert_array_equal(clf.predict_proba(built), clf.predict_proba(frame.head(5)[["city", "size", "x"]]))


def test_an_estimator_fitted_on_an_array_takes_an_array_as_wide_else_made_up_rows():
    X = np.arange(40.0).reshape(10, 4)
    forest = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, [0, 1] * 5)

    from_session = estimators.find_input(forest, {"X": X, "narrow": X[:, :2]})
    made = estimators.find_input(forest, {"narrow": X[:, :2]})

    assert from_session["source"] == "X" and from_session["values"] == X[:5].tolist()
    assert made["source"] == estimators.MADE_UP
    assert estimators.build(made).shape == (estimators.ROWS, 4)
    assert made == estimators.find_input(forest, {})  # deterministic


def test_the_outputs_are_those_of_the_methods_it_has():
    frame = training()
    fp = estimators.fingerprint(pipeline(frame), {"frame": frame})

    assert [o["method"] for o in fp["outputs"]] == ["predict", "predict_proba", "decision_function"]
    assert fp["outputs"][1]["shape"] == [estimators.ROWS, 2]


def test_an_unfitted_estimator_is_its_parameters():
    """It computes nothing yet; its parameters, nested estimators' included, are what it is."""
    model = Pipeline([("scale", StandardScaler()), ("lr", LogisticRegression(C=0.5))])
    then = estimators.fingerprint(model, {})

    assert estimators.evidence(then) == "parameters"
    assert estimators.compare(estimators.again(copy.deepcopy(model), then), then) == (True, "identical")
    other = copy.deepcopy(model).set_params(lr__C=2.0)
    assert estimators.compare(estimators.again(other, then), then) == (False, "parameter 'steps' differs")
    older = copy.deepcopy(model)
    del older.steps[1][1].__dict__["tol"]  # pickled by a release without that parameter
    assert not estimators.compare(estimators.again(older, then), then)[0]


def test_an_estimator_nothing_fits_says_why():
    from sklearn.feature_extraction.text import CountVectorizer

    words = CountVectorizer().fit(["red green", "green blue"])

    with pytest.raises(estimators.NoInput, match="records no n_features_in_"):
        estimators.fingerprint(words, {"texts": ["a b"]})


def test_outputs_taken_again_agree_exactly_or_within_the_dtypes_tolerance():
    frame = training()
    clf = pipeline(frame)
    then = estimators.fingerprint(clf, {"frame": frame})

    assert estimators.compare(estimators.again(copy.deepcopy(clf), then), then) == (True, "identical")

    nudged = copy.deepcopy(clf)
    nudged[-1].coef_ = nudged[-1].coef_ * (1 + 1e-12)
    ok, how = estimators.compare(estimators.again(nudged, then), then)
    assert ok and how.startswith("largest difference")

    retrained = copy.deepcopy(clf)
    retrained[-1].coef_ = retrained[-1].coef_ * 1.5
    ok, how = estimators.compare(estimators.again(retrained, then), then)
    assert not ok
    assert how.startswith("predict_proba: largest difference") and "float64 tolerance: rtol 1e-07, atol 1e-07" in how


def test_labels_are_compared_exactly():
    then = {"outputs": [{"method": "predict", "dtype": "object", "kind": "O", "shape": [2], "values": ["a", "b"]}]}
    now = {"outputs": [{"method": "predict", "dtype": "object", "kind": "O", "shape": [2], "values": ["a", "c"]}]}

    assert estimators.compare(now, then) == (False, "predict gives other values (value 1 is 'c', 'b' recorded)")


def test_float32_outputs_are_held_to_float32s_tolerance():
    def out(values: list[float]) -> dict:
        return {"outputs": [{"method": "transform", "dtype": "float32", "kind": "f", "shape": [2], "values": values}]}

    assert estimators.compare(out([1.0, 2.0 + 2e-6]), out([1.0, 2.0]))[0]
    assert not estimators.compare(out([1.0, 2.0 + 1e-4]), out([1.0, 2.0]))[0]
