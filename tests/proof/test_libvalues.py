"""jupyter_pause.proof.libvalues: fingerprints of library values recorded at checkpoint, and the
restore test's second look at a variable whose digest changed with a library's version."""

from __future__ import annotations

import copy
import warnings
from importlib import metadata

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import InconsistentVersionWarning
from sklearn.linear_model import LogisticRegression

from jupyter_pause.proof import estimators, libvalues
from jupyter_pause.serialize.digests import value_digest


@pytest.fixture(autouse=True)
def no_cached_fingerprints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(libvalues, "_cache", type(libvalues._cache)())


def session() -> dict:
    frame = pd.DataFrame({"a": [0.5, -1.0, 2.0, 0.0, 1.5, -0.5], "b": [1.0, 0.0, -2.0, 3.0, 0.5, 1.0]})
    clf = LogisticRegression().fit(frame, [0, 1, 0, 1, 1, 0])
    return {"frame": frame, "clf": clf, "weights": np.ones(3), "count": 3}


def digests(ns: dict) -> dict:
    return {n: value_digest(v) for n, v in ns.items()}


def upgraded_since(monkeypatch: pytest.MonkeyPatch, **then: str) -> None:
    """Make the versions recorded at checkpoint those of ``then`` (distribution names with _ for -)."""
    real = libvalues.version.__wrapped__
    named = {k.replace("_", "-"): v for k, v in then.items()}
    monkeypatch.setattr(libvalues, "version", lambda name: named.get(name) or real(name))


def test_families_are_found_by_what_a_value_is():
    ns = session()

    assert libvalues.family_of(ns["frame"]).name == "frame"
    assert libvalues.family_of(ns["frame"]["a"]).name == "frame"
    assert libvalues.family_of(ns["clf"]).name == "estimator"
    assert libvalues.family_of(LogisticRegression) is None  # the class, not an estimator
    assert libvalues.family_of(ns["weights"]) is None  # digested by its bytes already
    assert libvalues.family_of(3) is None


def test_a_checkpoint_records_library_values_with_the_versions_they_depend_on():
    ns = session()

    recorded = libvalues.record(ns, digests(ns))

    assert set(recorded) == {"frame", "clf"}
    assert recorded["clf"]["libraries"] == {
        "scikit-learn": metadata.version("scikit-learn"),
        "numpy": metadata.version("numpy"),
        "pandas": metadata.version("pandas"),  # its input is a frame
    }
    assert recorded["clf"]["fingerprint"]["input"]["source"] == "frame"
    assert list(recorded["frame"]["libraries"]) == ["pandas", "numpy"]


def test_a_notebook_subclass_of_an_estimator_depends_on_its_library():
    class Tuned(LogisticRegression):
        pass

    ns = session()
    tuned = Tuned().fit(ns["frame"], [0, 1, 0, 1, 1, 0])

    recorded = libvalues.record({"tuned": tuned, "frame": ns["frame"]}, {"tuned": value_digest(tuned)})

    assert list(recorded["tuned"]["libraries"]) == ["scikit-learn", "numpy", "pandas"]


def test_a_variable_without_a_digest_is_not_fingerprinted():
    ns = session()

    assert libvalues.record(ns, {**digests(ns), "frame": None, "clf": None}) == {}


def test_an_unchanged_value_is_not_run_again(monkeypatch):
    ns = session()
    ran = []
    real = estimators.outputs
    monkeypatch.setattr(estimators, "outputs", lambda *a: ran.append(1) or real(*a))

    first = libvalues.record(ns, digests(ns))
    again = libvalues.record(ns, digests(ns))
    assert again == first and len(ran) == 1

    ns["frame"] = ns["frame"] * 2  # the estimator's input changed: taken again
    libvalues.record(ns, digests(ns))
    assert len(ran) == 2


def test_without_a_library_change_the_digest_difference_stands():
    ns = session()
    recorded = libvalues.record(ns, digests(ns))

    assert libvalues.recheck(recorded["clf"], ns["clf"]) is None


def test_after_an_upgrade_a_value_that_computes_the_same_agrees(monkeypatch):
    ns = session()
    with monkeypatch.context() as then:
        upgraded_since(then, scikit_learn="1.7.2", pandas="2.3.3")
        recorded = libvalues.record(ns, digests(ns))

    checks = {n: libvalues.recheck(recorded[n], copy.deepcopy(ns[n])) for n in recorded}

    assert checks["clf"].agrees and checks["clf"].upgrade == f"scikit-learn 1.7.2 -> {metadata.version('scikit-learn')}"
    assert checks["frame"].agrees and checks["frame"].library == "pandas"
    assert libvalues.agreed_lines(checks) == [
        f"loaded from pandas 2.3.3 into {metadata.version('pandas')}: frame; values agree",
        f"loaded from scikit-learn 1.7.2 into {metadata.version('scikit-learn')}: clf; outputs agree",
    ]


def test_after_an_upgrade_a_value_that_computes_otherwise_is_named(monkeypatch):
    ns = session()
    with monkeypatch.context() as then:
        upgraded_since(then, scikit_learn="1.7.2")
        recorded = libvalues.record(ns, digests(ns))
    changed = copy.deepcopy(ns["clf"])
    changed.intercept_ = changed.intercept_ + 0.5

    check = libvalues.recheck(recorded["clf"], changed)

    assert not check.agrees
    status = check.status()
    assert status.startswith(f"outputs differ after scikit-learn 1.7.2 -> {metadata.version('scikit-learn')} (")
    assert "predict gives other values" in status
    assert libvalues.agreed_lines({"clf": check}) == []


def test_a_value_that_had_no_fingerprint_says_why_it_was_not_compared(monkeypatch):
    from sklearn.feature_extraction.text import CountVectorizer

    words = CountVectorizer().fit(["red green", "green blue"])
    with monkeypatch.context() as then:
        upgraded_since(then, scikit_learn="1.7.2")
        recorded = libvalues.record({"words": words}, {"words": value_digest(words)})

    check = libvalues.recheck(recorded["words"], words)

    assert not check.agrees and not check.compared
    assert check.status() == (
        f"differs from the checkpoint, after scikit-learn 1.7.2 -> {metadata.version('scikit-learn')}; "
        "not compared by value: none was recorded: it records no n_features_in_, and no session value is an "
        "input it takes"
    )


def test_an_unfitted_estimator_agrees_by_its_parameters(monkeypatch):
    model = LogisticRegression(C=0.5)
    with monkeypatch.context() as then:
        upgraded_since(then, scikit_learn="1.7.2")
        recorded = libvalues.record({"model": model}, {"model": value_digest(model)})

    checks = {"model": libvalues.recheck(recorded["model"], copy.deepcopy(model))}

    assert libvalues.agreed_lines(checks) == [
        f"loaded from scikit-learn 1.7.2 into {metadata.version('scikit-learn')}: model; parameters agree"
    ]


def test_each_library_is_one_line_naming_each_variable_once():
    def agreeing(library: str, evidence: str, how: str = "identical") -> libvalues.Recheck:
        return libvalues.Recheck(library, "1", "2", evidence, True, how)

    lines = libvalues.agreed_lines(
        {
            "clf": agreeing("scikit-learn", "outputs", "largest difference 2.2e-16"),
            "forest": agreeing("scikit-learn", "outputs"),
            "df": agreeing("pandas", "values"),
        }
    )

    assert lines == [
        "loaded from scikit-learn 1 into 2: clf, forest; outputs agree (largest difference 2.2e-16, within tolerance)",
        "loaded from pandas 1 into 2: df; values agree",
    ]


def test_the_libraries_warnings_while_loading_are_one_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            warnings.warn(
                InconsistentVersionWarning(
                    estimator_name="X", current_sklearn_version="2", original_sklearn_version="1"
                ),
                stacklevel=1,
            )
        warnings.warn_explicit("old layout", FutureWarning, pd.core.frame.__file__, 1, module="pandas.core.frame")

    assert libvalues.warned(caught) == [
        "warnings while loading (gathered, not shown one by one): scikit-learn: 3 InconsistentVersionWarning; "
        "pandas: 1 FutureWarning"
    ]
    assert libvalues.warned([]) == []
