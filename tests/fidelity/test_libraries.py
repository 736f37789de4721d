"""The fidelity corpus across libraries: every object of the libraries notebooks import most comes
back exactly in a new process, or the checkpoint names it with a reason. None is found only at
resume.

Covered (``tests/support/libraries.py``): plotting (plotly, bokeh, altair, seaborn), dataframes (polars,
pyarrow), statistics and science (statsmodels, astropy), tuning (optuna), tree models (lightgbm),
text (a Hugging Face ``tokenizers`` tokenizer trained here on a tiny corpus, and transformers'
``PreTrainedTokenizerFast`` around it; nltk without its data downloads; wordcloud), images
(scikit-image, Pillow), graphs (networkx), arrays (dask), dates (arrow). Nothing is downloaded.
Left out: xgboost (lightgbm stands for the tree models).

Each batch's build cell runs here in folder a and is checkpointed with the default selection; a
new process resumes it in folder c, runs the restore test, digests each variable and runs the
probe cell (the next cell a notebook would run); then it builds an uninterrupted twin in folder b,
digests it and runs the same probe cell there. A variable comes back exactly when it has the
twin's type, the restore test finds its checkpoint digest, and the probe sees what it sees in the
twin (for a variable the probe does not look at: the twin's digest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import jupyter_pause as jp
from tests.support.elsewhere import build, resume_elsewhere
from tests.support.libraries import BATCHES

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("new_process")]


RESUME = r"""
import json, os, sys, warnings
warnings.filterwarnings("ignore")
import jupyter_pause as jp
from jupyter_pause.serialize.digests import value_digest
from jupyter_pause.process.selection import select
from tests.support.libraries import BATCHES, probe

def type_name(value):
    return type(value).__module__ + "." + type(value).__qualname__

store, name, twin_folder = sys.argv[1:]
batch = BATCHES[name]
ns = {"__name__": "__main__"}
cycle = jp.resume_and_verify(store=store, session=name, namespace=ns, write_report=False)
names = list(select(ns).values)
report = {
    "verdict": cycle.verdict.variables,
    "not_restored": cycle.result.skipped,
    "types": {n: type_name(ns[n]) for n in names},
    "digests": {n: value_digest(ns[n]) for n in names},
}
report["seen"] = probe(batch, ns)
# The uninterrupted twin: the same cell run in this process, in its own folder.
os.chdir(twin_folder)
twin = {"__name__": "__main__"}
exec(compile(batch.build, "<cell>", "exec", dont_inherit=True), twin)
twin_names = list(select(twin).values)
report["expected_types"] = {n: type_name(twin[n]) for n in twin_names}
report["expected_digests"] = {n: value_digest(twin[n]) for n in twin_names}
report["expected_seen"] = probe(batch, twin)
print("REPORT " + json.dumps(report, default=str))
"""


def _resume_elsewhere(store: Path, batch: str, tmp_path: Path) -> dict[str, Any]:
    return resume_elsewhere(RESUME, store, batch, tmp_path, timeout=240)


def _named_at_checkpoint(result: Any) -> dict[str, str]:
    """Variables the checkpoint names as not saved, or as saved but not coming back exactly."""
    named = {r.name: r.reason for r in result.manifest.skipped}
    named.update(result.manifest.inexact)  # saved, but the checkpoint's rehearsal of the restore differed
    return named


def _wrong(name: str, got: dict[str, Any]) -> str | None:
    """Why ``name`` did not come back exactly (None: it did)."""
    if name in got["not_restored"]:
        return f"{name}: not restored, found only at resume: {got['not_restored'][name]}"
    expected_type, came = got["expected_types"][name], got["types"].get(name, "nothing")
    if came != expected_type:
        return f"{name}: {expected_type} came back as {came}"
    status = got["verdict"].get(name, "not in the restore test")
    if status != "matches":
        return f"{name}: the restore test says {status!r}"
    if name in got["expected_seen"]:
        seen, expected = got["seen"].get(name), got["expected_seen"][name]
        if seen != expected:
            return f"{name}: the next cell sees {seen!r:.600}, expected {expected!r:.600}"
    elif got["digests"][name] != got["expected_digests"][name]:
        digest, expected = got["digests"][name], got["expected_digests"][name]
        return f"{name}: digest {digest} differs from the uninterrupted twin's {expected}"
    return None


@pytest.mark.parametrize("batch", list(BATCHES))
def test_every_object_comes_back_exactly_or_is_named_at_checkpoint(
    batch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for library in BATCHES[batch].libraries:
        pytest.importorskip(library)
    saved = build(BATCHES[batch].build, tmp_path / "a", monkeypatch)
    result = jp.checkpoint(store=str(tmp_path / "store"), session=batch, namespace=saved)
    named = _named_at_checkpoint(result)

    got = _resume_elsewhere(tmp_path / "store", batch, tmp_path)
    names = sorted(got["expected_types"])
    assert sorted(set(got["types"]) | set(named)) == names, "the resume brought back other variables than the twin has"
    assert set(BATCHES[batch].probes) <= set(names), "a probe looks at a variable the build cell does not make"
    for name, reason in named.items():
        assert reason.strip(), f"{name} is named without a reason"
    wrong = [why for name in names if name not in named and (why := _wrong(name, got)) is not None]
    report = "\n  ".join(wrong)
    assert not wrong, f"{len(wrong)} object(s) came back different and were not named at checkpoint:\n  {report}"
    exact = len(names) - len(named)
    print(f"{batch}: {exact} of {len(names)} back exactly, {len(named)} named at checkpoint: {sorted(named)}")
