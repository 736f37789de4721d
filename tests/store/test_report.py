"""jupyter_pause.store.report: run reports, their derived durations, and how they are stored."""

from __future__ import annotations

import json

import pytest

from jupyter_pause.errors import IntegrityError
from jupyter_pause.store import report
from jupyter_pause.store.layout import report_prefix
from jupyter_pause.store.report import MOMENTS, RunReport
from jupyter_pause.store.storage import Store

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


def make(checkpoint: str = "20270115-080000-abcdef", verdict: str = "restored", **moments: float | None) -> RunReport:
    return RunReport(
        session="exp--train",
        checkpoint=checkpoint,
        lineage="1a2b3c4d",
        verdict=verdict,
        checkpoint_node="gpu-07",
        resume_node="gpu-12",
        trigger="spot",
        bytes=123_400_000,
        restored=["model", "opt"],
        skipped={"handle": "open file"},
        details=["probe value of the paused kernel is back"],
        moments={k: moments.get(k) for k in MOMENTS},
    )


FULL = dict(
    checkpoint_requested=T0,
    checkpoint_committed=T0 + 2.5,
    kernel_stopped=T0 + 4.0,
    resume_requested=T0 + 3600.0,
    resources_available=T0 + 3720.0,
    kernel_ready=T0 + 3730.0,
    state_restored=T0 + 3742.25,
    verified=T0 + 3743.0,
)


def test_durations_from_every_moment() -> None:
    assert make(**FULL).durations() == {
        "checkpoint": 2.5,
        "paused": 3596.0,  # from the kernel stopping, not the commit
        "waiting_for_resources": 120.0,
        "kernel_start": 10.0,
        "restore": 12.25,
        "verify": 0.75,
        "resume_to_next_cell": 143.0,
    }


def test_paused_counts_from_the_commit_when_the_kernel_stop_is_unknown() -> None:
    moments = {**FULL, "kernel_stopped": None}
    assert make(**moments).durations()["paused"] == 3597.5


def test_fallback_starts_when_resources_and_kernel_moments_are_unknown() -> None:
    moments = {**FULL, "resources_available": None, "kernel_ready": None}
    durations = make(**moments).durations()
    assert durations["waiting_for_resources"] is None
    assert durations["kernel_start"] is None  # its end is unknown
    assert durations["restore"] == 142.25  # from the resume request instead


def test_unknown_moments_give_none() -> None:
    durations = make(resume_requested=T0, state_restored=T0 + 3, verified=T0 + 4).durations()
    assert durations["checkpoint"] is None
    assert durations["paused"] is None
    assert durations["waiting_for_resources"] is None
    assert durations["restore"] == 3.0
    assert durations["resume_to_next_cell"] == 4.0
    assert set(make().durations().values()) == {None}


def test_moments_missing_from_the_dict_count_as_unknown() -> None:
    run = make()
    run.moments = {"resume_requested": T0, "verified": T0 + 1}
    assert run.durations()["resume_to_next_cell"] == 1.0
    assert run.durations()["restore"] is None


def test_write_then_load_round_trip(tmp_path) -> None:
    store = Store(str(tmp_path))
    original = make(**FULL)
    key = report.write(store, original)
    assert key.startswith(report_prefix("exp--train"))
    assert store.exists(key)
    stored = json.loads(bytes(store.read(key)))
    assert stored["durations"]["resume_to_next_cell"] == 143.0
    assert report.load(store, "exp--train") == [original]
    assert report.load(store, "other") == []


def test_load_gives_reports_oldest_first(tmp_path) -> None:
    store = Store(str(tmp_path))
    runs = [make(**{**FULL, "verified": T0 + 100 * i}) for i in (3, 1, 2)]
    for run in runs:
        report.write(store, run)
    loaded = report.load(store, "exp--train")
    assert [r.moments["verified"] for r in loaded] == [T0 + 100, T0 + 200, T0 + 300]


def test_load_gives_reports_oldest_first_across_checkpoints(tmp_path) -> None:
    store = Store(str(tmp_path))
    # resumed the newer checkpoint first, then went back to the older one
    report.write(store, make("20270115-090000-bbbbbb", **{**FULL, "verified": T0 + 100}))
    report.write(store, make("20270115-080000-aaaaaa", **{**FULL, "verified": T0 + 200}))
    loaded = report.load(store, "exp--train")
    assert [r.checkpoint for r in loaded] == ["20270115-090000-bbbbbb", "20270115-080000-aaaaaa"]


def test_text_names_the_verdict_and_the_time_to_the_next_cell() -> None:
    text = make(verdict="partial", **FULL).text()
    assert "verdict partial" in text
    assert "resume to next cell" in text
    line = next(row for row in text.splitlines() if "resume to next cell" in row)
    assert "2.4 min" in line  # 143 s
    assert "gpu-07" in text and "gpu-12" in text
    assert "not restored: handle: open file" in text
    assert "123 MB" in text  # 123_400_000 bytes


def test_text_leaves_out_unknown_durations() -> None:
    text = make(resume_requested=T0, verified=T0 + 4.5).text()
    assert "4.50 s" in text
    assert "paused" not in text and "checkpoint " not in text.split("verdict")[1]


def test_a_corrupt_report_fails_load_naming_it(tmp_path) -> None:
    store = Store(str(tmp_path))
    report.write(store, make(**FULL))
    bad = f"{report_prefix('exp--train')}20270115-080000-abcdef--20270115-090000-000.json"
    store.write(bad, b'{"session": "exp--train", "checkp')
    with pytest.raises(IntegrityError, match=bad):
        report.load(store, "exp--train")


def test_a_report_missing_fields_fails_load_naming_it(tmp_path) -> None:
    store = Store(str(tmp_path))
    bad = f"{report_prefix('exp--train')}x.json"
    store.write(bad, json.dumps({"session": "exp--train"}).encode())
    with pytest.raises(IntegrityError, match=bad):
        report.load(store, "exp--train")


@pytest.mark.parametrize("content", [b"[1, 2]", b"null"])
def test_a_report_that_is_not_an_object_fails_load_naming_it(tmp_path, content) -> None:
    store = Store(str(tmp_path))
    bad = f"{report_prefix('exp--train')}y.json"
    store.write(bad, content)
    with pytest.raises(IntegrityError, match=bad):
        report.load(store, "exp--train")
