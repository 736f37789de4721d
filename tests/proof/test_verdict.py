"""jupyter_pause.proof.verdict in one process: "another process" is a new process token and forgotten state.

The same verdicts with real kernels are in tests/proof/test_verdict_kernels.py.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.errors import CheckpointNotFound, IntegrityError
from jupyter_pause.proof import probe
from jupyter_pause.proof.verdict import UNKNOWN_FORMAT, verify_manifest
from jupyter_pause.serialize.digests import value_digest
from jupyter_pause.session.context import make_context
from jupyter_pause.store import report as reports
from jupyter_pause.store.storage import Store
from tests.support.processes import another_process

SESSION = "v"


pytestmark = pytest.mark.usefixtures("new_process")


def state() -> dict:
    torch.manual_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 5)).sum().backward()
    opt.step()
    return {
        "model": model,
        "opt": opt,
        "weights": torch.arange(300_000, dtype=torch.float32),  # over 1 MB: a blob of its own
        "xs": [1, 2, 3],
        "table": {"run": list(range(50)), "score": np.linspace(0, 1, 50)},
        "label": "experiment 3",
    }


def take(store: Path, namespace: dict) -> str:
    return jp.checkpoint(store=str(store), session=SESSION, namespace=namespace).manifest.id


def check(store: Path, namespace: dict, checkpoint: str | None = None) -> jp.Verdict:
    return jp.verify(checkpoint, store=str(store), session=SESSION, namespace=namespace)


def test_the_process_that_took_the_checkpoint_is_live(tmp_path) -> None:
    ns = state()
    cid = take(tmp_path, ns)
    verdict = check(tmp_path, ns)
    assert verdict.kind == "live"
    assert verdict.checkpoint == cid
    assert "nothing was released" in verdict.summary()
    assert verdict.summary().startswith("verdict: live")


def test_the_restore_test_reads_the_checks_the_restore_loaded_not_the_store_again(tmp_path) -> None:
    """The checks blob (probe, model outputs) is read once per resume: a restore test run after
    it takes the one the restore loaded; a process that did not restore it reads the store."""
    cid = take(tmp_path, state())
    another_process()
    ns: dict = {}
    manifest = jp.resume(store=str(tmp_path), session=SESSION, namespace=ns).manifest
    (tmp_path / manifest.blob_key(manifest.checks.key)).unlink()
    verdict = check(tmp_path, ns)
    assert verdict.kind == "restored" and verdict.checkpoint == cid, verdict.summary()
    assert verdict.models["model"].startswith("reproduces")
    held = probe.held(cid)
    probe.forget()
    probe.remember(cid, held)  # the probe, and no checks: they are read, and the blob is gone
    with pytest.raises(IntegrityError, match=f"checkpoint {cid}: its checks blob is missing"):
        check(tmp_path, ns)


def test_a_new_process_that_recomputed_the_variables_is_fresh(tmp_path) -> None:
    cid = take(tmp_path, state())
    another_process()
    recomputed = state()  # the notebook's cells run again: same values, no resume
    verdict = check(tmp_path, recomputed)
    assert verdict.kind == "fresh"
    assert verdict.checkpoint == cid
    assert not verdict.probe
    text = verdict.summary()
    assert "%resume" in text and cid in text
    assert "6 variable(s) of the same names were made here" in text


def test_a_resumed_process_is_restored_and_its_model_check_reproduces(tmp_path) -> None:
    cid = take(tmp_path, state())
    another_process()
    ns: dict = {}
    jp.resume(store=str(tmp_path), session=SESSION, namespace=ns)
    verdict = check(tmp_path, ns)
    assert verdict.kind == "restored", verdict.summary()
    assert verdict.checkpoint == cid and verdict.probe
    assert set(verdict.variables.values()) == {"matches"}
    assert set(verdict.variables) == {"model", "opt", "weights", "xs", "table", "label"}
    assert verdict.models["model"].startswith("reproduces")
    assert verdict.changed == {}
    assert "6 of 6 variable(s) match their digests" in verdict.summary()


def _resumed(tmp_path: Path) -> tuple[str, dict]:
    cid = take(tmp_path, state())
    another_process()
    ns: dict = {}
    jp.resume(store=str(tmp_path), session=SESSION, namespace=ns)
    return cid, ns


def test_changes_made_after_the_resume_are_named_not_held_against_it(tmp_path) -> None:
    _, ns = _resumed(tmp_path)
    ns["xs"].append(4)
    ns["weights"][1234] = -1.0
    with torch.no_grad():
        ns["model"][0].weight[0, 0] += 1  # training went on
    verdict = check(tmp_path, ns)
    assert verdict.kind == "restored", verdict.summary()
    # the optimizer holds the model's parameters, so it changed with them
    assert set(verdict.changed) == {"xs", "weights", "model", "opt"}
    assert verdict.changed["xs"] == "changed since the resume"
    assert "model" not in verdict.models  # a changed model is not checked against the old output
    assert "xs: changed since the resume (not a restore problem)" in verdict.summary()


def test_replacing_or_deleting_a_restored_variable_is_a_change(tmp_path) -> None:
    _, ns = _resumed(tmp_path)
    ns["label"] = "experiment 4"
    del ns["xs"]
    verdict = check(tmp_path, ns)
    assert verdict.kind == "restored", verdict.summary()
    assert verdict.changed == {"label": "changed since the resume", "xs": "deleted since the resume"}


def test_a_variable_not_restored_and_made_here_differs(tmp_path) -> None:
    take(tmp_path, state())
    another_process()
    ns: dict = {}
    jp.resume(store=str(tmp_path), session=SESSION, namespace=ns, only=["model", "opt", "weights", "xs", "table"])
    ns["label"] = "made here"  # not from the resume, so not the user's change of restored state
    verdict = check(tmp_path, ns)
    assert verdict.kind == "partial"
    assert verdict.variables["label"] == "differs from the checkpoint"
    assert "label" not in verdict.changed
    assert "not back: label" in verdict.summary()


def test_a_variable_whose_blob_is_gone_makes_it_partial(tmp_path) -> None:
    ns = state()
    result = jp.checkpoint(store=str(tmp_path), session=SESSION, namespace=ns)
    m = result.manifest
    record = next(v for v in m.variables if v.name == "weights")
    blob = m.arrays[record.arrays[0]].blob
    assert sum(m.arrays[a].blob == blob for v in m.variables for a in v.arrays) == 1  # only weights
    (tmp_path / m.blob_key(blob)).unlink()

    another_process()
    restored: dict = {}
    resumed = jp.resume(store=str(tmp_path), session=SESSION, namespace=restored, allow_partial=True)
    assert "weights" not in restored and "weights" in resumed.skipped
    verdict = check(tmp_path, restored)
    assert verdict.kind == "partial", verdict.summary()
    assert verdict.variables["weights"].startswith("missing")
    assert {n for n, s in verdict.variables.items() if s != "matches"} == {"weights"}
    assert "not back: weights" in verdict.summary()
    assert verdict.models["model"].startswith("reproduces")


def test_a_model_that_no_longer_reproduces_makes_it_partial(tmp_path) -> None:
    cid, ns = _resumed(tmp_path)
    # the restored value's digest is taken as it came back: pretend the restore itself got
    # the weights wrong (the model was never touched by the user)
    with torch.no_grad():
        ns["model"][2].bias[0] += 1
    as_restored = {**probe.as_restored(cid), "model": value_digest(ns["model"])}
    as_restored["opt"] = value_digest(ns["opt"])
    probe.record_restore(cid, as_restored, {})
    verdict = check(tmp_path, ns)
    assert verdict.kind == "partial"
    assert verdict.variables["model"] == "differs from the checkpoint"
    assert verdict.models["model"].startswith("FAILED") and "differs" in verdict.models["model"]
    assert "model check of model" in verdict.summary()


def test_verify_on_an_empty_store_says_to_checkpoint_first(tmp_path) -> None:
    with pytest.raises(CheckpointNotFound, match="%checkpoint"):
        check(tmp_path, {"x": 1})


def test_resume_and_verify_leaves_a_report(tmp_path) -> None:
    cid = take(tmp_path, state())
    another_process()
    ns: dict = {}
    cycle = jp.resume_and_verify(store=str(tmp_path), session=SESSION, namespace=ns, moments={"kernel_stopped": 1.0e9})
    assert cycle.verdict.kind == "restored"
    assert cycle.report_key is not None
    (stored,) = reports.load(Store(str(tmp_path)), SESSION)
    assert stored == cycle.report
    assert stored.verdict == "restored" and stored.checkpoint == cid
    assert sorted(stored.restored) == sorted(["model", "opt", "weights", "xs", "table", "label"])
    for moment in ("resume_requested", "state_restored", "verified", "checkpoint_committed"):
        assert stored.moments[moment] is not None, moment
    assert stored.moments["kernel_stopped"] == 1.0e9
    m = stored.moments
    assert m["checkpoint_committed"] <= m["resume_requested"] <= m["state_restored"] <= m["verified"]
    assert stored.durations()["resume_to_next_cell"] >= 0


def _digest_free_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A checkpoint whose variables are all too large to digest, resumed in a new process."""
    monkeypatch.setattr(sys.modules["jupyter_pause.session.evidence"], "DIGEST_MAX_SEGMENT_BYTES", 0)
    result = jp.checkpoint(store=str(tmp_path), session=SESSION, namespace={"big": list(range(100)), "other": "x"})
    assert all(v.digest is None for v in result.manifest.variables)
    another_process()
    ns: dict = {}
    jp.resume(store=str(tmp_path), session=SESSION, namespace=ns)
    return ns


def test_too_large_variables_restored_are_not_held_against_the_verdict(tmp_path, monkeypatch) -> None:
    ns = _digest_free_checkpoint(tmp_path, monkeypatch)
    verdict = check(tmp_path, ns)
    assert verdict.kind == "restored"
    assert set(verdict.variables) == {"big", "other"}


def test_deleting_a_restored_too_large_variable_is_a_change(tmp_path, monkeypatch) -> None:
    ns = _digest_free_checkpoint(tmp_path, monkeypatch)
    del ns["big"]
    verdict = check(tmp_path, ns)
    assert verdict.kind == "restored", verdict.summary()
    assert verdict.changed == {"big": "deleted since the resume"}


# --- digest formats and values that come back equal ----------------------------------------


def _with_digests(manifest, digests: dict[str, str]):
    records = [dataclasses.replace(v, digest=digests.get(v.name, v.digest)) for v in manifest.variables]
    return dataclasses.replace(manifest, variables=records)


def test_recorded_warnings_and_exceptions_looked_at_come_back_restored(tmp_path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("learning rate is high", UserWarning, stacklevel=1)
        np.log(np.array([0.0]))  # a RuntimeWarning raised from C code
    try:
        raise ValueError("diverged at step", 7)
    except ValueError as e:
        error = e
    for message in [w.message for w in caught] + [error]:
        dir(message)  # what a variable inspector or tab completion does: the attribute dict now exists
    take(tmp_path, {"caught": caught, "error": error, "holder": {"last": error, "log": caught}})
    another_process()
    ns: dict = {}
    cycle = jp.resume_and_verify(store=str(tmp_path), session=SESSION, namespace=ns)
    assert cycle.verdict.kind == "restored", cycle.verdict.summary()
    assert cycle.verdict.variables == {"caught": "matches", "error": "matches", "holder": "matches"}
    ns["caught"][0].lineno += 1  # a real change is still seen
    assert check(tmp_path, ns).changed == {"caught": "changed since the resume", "holder": "changed since the resume"}


def test_digests_of_an_older_format_are_compared_in_that_format(tmp_path) -> None:
    take(tmp_path, state())
    another_process()
    ns: dict = {}
    result = jp.resume(store=str(tmp_path), session=SESSION, namespace=ns)
    old = {name: value_digest(ns[name], like="0" * 32) for name in ("xs", "table", "label")}
    assert all(d is not None and ":" not in d for d in old.values())  # format 1: bare hex
    ctx = make_context(store=str(tmp_path), session=SESSION, namespace=ns)
    verdict = verify_manifest(ctx, _with_digests(result.manifest, old))
    assert verdict.kind == "restored", verdict.summary()
    assert set(verdict.variables.values()) == {"matches"}
    # ... and a value that differs still differs in that format
    wrong = _with_digests(result.manifest, {"xs": value_digest([1, 2, 4], like="0" * 32)})
    verdict = verify_manifest(ctx, wrong)
    assert verdict.kind == "partial" and verdict.variables["xs"] == "differs from the checkpoint"


def test_a_digest_of_an_unknown_format_is_not_compared_and_not_held_against_the_verdict(tmp_path) -> None:
    take(tmp_path, state())
    another_process()
    ns: dict = {}
    result = jp.resume(store=str(tmp_path), session=SESSION, namespace=ns)
    ctx = make_context(store=str(tmp_path), session=SESSION, namespace=ns)
    verdict = verify_manifest(ctx, _with_digests(result.manifest, {"xs": "9:" + "0" * 32}))
    assert verdict.kind == "restored", verdict.summary()
    assert verdict.variables["xs"] == UNKNOWN_FORMAT
    assert "xs: present, its digest is of a format this version does not know" in verdict.summary()


@jp.after_resume
def draw_once() -> None:
    """Draws from torch's stream at the end of a resume, after the resume restored it."""
    torch.rand(1)


def test_a_random_stream_drawn_from_during_the_resume_is_named(tmp_path) -> None:
    take(tmp_path, {**state(), "draw_once": draw_once})
    another_process()
    ns: dict = {}
    jp.resume(store=str(tmp_path), session=SESSION, namespace=ns)
    verdict = check(tmp_path, ns)
    assert verdict.kind == "partial", verdict.summary()
    assert verdict.streams_moved == ["torch"]
    assert "not back: random stream torch" in verdict.summary()
