"""A session checkpointed before the notebook image was upgraded resumes in the upgraded one.

The checkpointing side runs in ``.venv-old`` (``make test`` builds it: the project venv with older
pinned releases of scikit-learn, pandas and NumPy in front, see the Makefile), the resuming side
in the project's own environment, with the newest releases. A pipeline on a frame of strings,
categories and timestamps, a random forest, an estimator not fitted yet and the frame itself load
with another pickle layout (their digests differ), and the restore test compares what they hold
instead: ``restored``, naming each upgrade once, the libraries' warnings gathered into one line.
A pipeline whose helper module computes something else on the resuming side is still ``partial``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
OLD_PYTHON = ROOT / ".venv-old" / "bin" / "python"
OLD = {"scikit-learn": "1.7.2", "pandas": "2.3.3", "numpy": "2.3.5"}

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_pause_env")]

#: The notebook before the upgrade: what the issue's user had.
UPGRADED = """
import numpy as np
import pandas as pd
from zoneinfo import ZoneInfo
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler

rng = np.random.default_rng(7)
n = 120
df = pd.DataFrame({
    "city": rng.choice(["paris", "lyon", "nice", "lille"], n).astype(object),
    "size": pd.Categorical(rng.choice(["s", "m", "l"], n), categories=["s", "m", "l"], ordered=True),
    "when": pd.date_range("2024-03-30", periods=n, freq="47min", tz=ZoneInfo("Europe/Paris")),
    "x": rng.normal(size=n),
})
y = ((df["x"] > 0) ^ (df["city"] == "nice")).astype(int).to_numpy()

def hour_of_day(frame):
    return frame["when"].dt.hour.to_numpy().reshape(-1, 1)

columns = ColumnTransformer([
    ("cat", OneHotEncoder(handle_unknown="ignore"), ["city", "size"]),
    ("num", StandardScaler(), ["x"]),
    ("hour", FunctionTransformer(hour_of_day), ["when"]),
])
clf = Pipeline([("columns", columns), ("lr", LogisticRegression())]).fit(df, y)
X = np.c_[df["x"].to_numpy(), df["when"].dt.hour.to_numpy()]
forest = RandomForestClassifier(n_estimators=20, random_state=0).fit(X, y)
baseline = LogisticRegression(C=0.5, class_weight="balanced")  # not fitted yet
"""

#: A pipeline calling a function of the notebook's folder, which the resuming side has changed.
CHANGED = """
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
import helpers

frame = pd.DataFrame({"a": [0.5, -1.0, 2.0, 0.0, 1.5, -0.5], "b": [1.0, 0.0, -2.0, 3.0, 0.5, 1.0]})
model = make_pipeline(FunctionTransformer(helpers.features), LogisticRegression()).fit(frame, [0, 1, 0, 1, 1, 0])
"""

CHECKPOINT = f"""
import json, sys
import numpy, pandas, sklearn
import jupyter_pause as jp

store = sys.argv[1]
versions = {{"scikit-learn": sklearn.__version__, "pandas": pandas.__version__, "numpy": numpy.__version__}}
report = {{"versions": versions}}
for session, code in (("upgraded", {UPGRADED!r}), ("changed", {CHANGED!r})):
    ns = {{"__name__": "__main__"}}
    exec(compile(code, "<cell>", "exec", dont_inherit=True), ns)
    jp.checkpoint(store=store, session=session, namespace=ns)
    if session == "upgraded":
        report["proba"] = ns["clf"].predict_proba(ns["df"]).tolist()
        report["forest"] = ns["forest"].predict_proba(ns["X"]).tolist()
print("REPORT " + json.dumps(report))
"""

RESUME = """
import json, sys
import jupyter_pause as jp

report = {}
for session in ("upgraded", "changed"):
    ns = {"__name__": "__main__"}
    cycle = jp.resume_and_verify(store=sys.argv[1], session=session, namespace=ns, write_report=False)
    report[session] = {
        "kind": cycle.verdict.kind,
        "details": cycle.verdict.details,
        "variables": cycle.verdict.variables,
        "resume": cycle.result.summary(),
        "verdict": cycle.verdict.summary(),
    }
    if session == "upgraded":
        report["proba"] = ns["clf"].predict_proba(ns["df"]).tolist()
        report["forest"] = ns["forest"].predict_proba(ns["X"]).tolist()
        report["dtypes"] = [str(t) for t in ns["df"].dtypes]
        ns["clf"][-1].intercept_ = ns["clf"][-1].intercept_ + 1  # the user changes it after the resume
        later = jp.verify(store=sys.argv[1], session=session, namespace=ns)
        report["later"] = {"kind": later.kind, "changed": later.changed, "variables": later.variables}
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def older_image() -> Path:
    """The interpreter of the image before the upgrade (``make test`` builds it)."""
    if not OLD_PYTHON.exists():
        pytest.fail(
            f"{OLD_PYTHON.parent.parent.name} is missing: the upgrade test checkpoints with the older releases "
            f"it holds ({', '.join(f'{k}=={v}' for k, v in OLD.items())}). Build it with `make test`, or "
            "`make .venv-old/.installed` alone"
        )
    return OLD_PYTHON


def _run(python: Path, script: str, folder: Path, store: Path) -> tuple[dict[str, Any], str]:
    """Run ``script`` with ``python`` in ``folder``; (its REPORT, everything else it printed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [str(python), "-c", script, str(store)], capture_output=True, text=True, cwd=folder, env=env, timeout=140
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    report = next(x for x in lines if x.startswith("REPORT "))
    others = [x for x in lines if not x.startswith("REPORT ")]
    return json.loads(report[len("REPORT ") :]), "\n".join(others) + proc.stderr


@pytest.fixture(scope="module")
def upgrade(older_image: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, str]:
    """Checkpoint both sessions with the older releases in folder a, resume them in folder c."""
    root = tmp_path_factory.mktemp("upgrade")
    before, after, store = root / "a", root / "c", root / "store"
    before.mkdir()
    after.mkdir()
    (before / "helpers.py").write_text("def features(X):\n    return X * 2\n")
    (after / "helpers.py").write_text("def features(X):\n    return X * 3\n")  # the helper changed meanwhile
    old, _ = _run(older_image, CHECKPOINT, before, store)
    new, printed = _run(Path(sys.executable), RESUME, after, store)
    return old, new, printed


def test_the_older_image_holds_the_pinned_releases(upgrade):
    old, _, _ = upgrade

    assert old["versions"] == OLD
    assert all(metadata.version(name) != version for name, version in OLD.items())


def test_an_upgraded_session_is_restored_naming_each_upgrade_once(upgrade):
    old, new, printed = upgrade
    run = new["upgraded"]
    sklearn_now, pandas_now = metadata.version("scikit-learn"), metadata.version("pandas")

    assert run["kind"] == "restored", run["verdict"]
    upgrades = [d for d in run["details"] if d.startswith("loaded from ")]
    assert upgrades == [  # one line per library, each variable once, in the session's order
        f"loaded from pandas 2.3.3 into {pandas_now}: df; values agree",
        f"loaded from scikit-learn 1.7.2 into {sklearn_now}: columns, clf, forest, baseline; "
        "outputs and parameters agree",
    ], run["verdict"]
    assert run["details"][0].endswith("match their digests, 5 by value fingerprint after a library upgrade")
    # What the user notices: the same probabilities, the frame's strings, categories and timestamps.
    np.testing.assert_allclose(new["proba"], old["proba"], rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(new["forest"], old["forest"], rtol=0, atol=0)
    assert new["dtypes"][1:3] == ["category", "datetime64[ns, Europe/Paris]"]


def test_the_libraries_warnings_are_one_line_not_tracebacks(upgrade):
    _, new, printed = upgrade
    summary = new["upgraded"]["resume"]

    assert "Warning" not in printed and "Traceback" not in printed, printed
    gathered = [line for line in summary.splitlines() if "InconsistentVersionWarning" in line]
    assert len(gathered) == 1 and gathered[0].strip().startswith("warnings while loading"), summary
    assert "changed type" not in summary  # pandas 3 names DataFrame's module otherwise: the same class


def test_a_value_that_computes_otherwise_after_the_upgrade_is_partial(upgrade):
    _, new, _ = upgrade
    run = new["changed"]
    sklearn_now, pandas_now = metadata.version("scikit-learn"), metadata.version("pandas")

    assert run["kind"] == "partial", run["verdict"]
    said = run["variables"]["model"]
    assert said.startswith(f"outputs differ after scikit-learn 1.7.2 -> {sklearn_now} ("), run["verdict"]
    assert f"loaded from pandas 2.3.3 into {pandas_now}: frame; values agree" in run["details"]
    assert "not back: model" in run["details"]


def test_a_value_changed_after_the_resume_is_the_users_change_not_a_failed_restore(upgrade):
    _, new, _ = upgrade
    later = new["later"]

    assert later["kind"] == "restored", later
    assert later["changed"] == {"clf": "changed since the resume"}
    assert "clf" not in later["variables"] and later["variables"]["forest"] == "matches"
