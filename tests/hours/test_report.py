"""The GPU-hours report's numbers (jupyter_pause.hours: records, timeline, totals) against totals
worked out by hand, and a seeded week against the truth it was generated from."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from jupyter_pause.hours import page, records, text, timeline, totals, whatif
from tests.support.ledger_history import week

H = 3600.0


def rec(event: str, at: float, session: str | None = "s", **fields: object) -> dict[str, object]:
    return {"v": 1, "event": event, "at": at, "session": session, "user": "u", "node": "n", "gpus": 2, **fields}


def report(raw: list[object], since: float | None = 0.0, until: float = 24 * H, **prices: float) -> totals.Hours:
    parsed, malformed = records.parse_all(raw)
    return totals.compute(timeline.timelines(parsed), totals.Window(since, until), malformed=malformed, **prices)


def cycle() -> list[dict[str, object]]:
    """Two GPUs: work, an idle pause at 4 h, a resume at 10 h (kernel ready 30 s later, first cell
    after 60 s), then a plain stop at 12 h."""
    return [
        rec("kernel_started", 0),
        rec("activity", 3 * H, spans=[[0, H], [2 * H, 3 * H]]),
        rec("pause_requested", 4 * H, trigger="idle"),
        rec("checkpoint_committed", 4 * H, bytes=100, bytes_total=1000),
        rec("kernel_stopped", 4 * H),
        rec("resume_requested", 10 * H),
        rec("kernel_ready", 10 * H + 30, bytes=1000),
        rec("next_cell_run", 10 * H + 60),
        rec("activity", 11 * H, spans=[[10 * H + 60, 11 * H]]),
        rec("kernel_stopped", 12 * H),
    ]


def test_one_pause_and_resume_by_hand():
    (s,) = report(cycle()).sessions
    # held 0-4 h and 10 h 30 s-12 h, on two GPUs
    assert s.held == totals.Range.exact(2 * (4 * H + 2 * H - 30) / H)
    # released from the pause's stop to the resumed kernel's start
    assert s.released == totals.Range.exact(2 * (6 * H + 30) / H)
    assert s.active == totals.Range.exact(2 * (3 * H - 60) / H)
    assert (s.pauses, s.resumes, s.waits) == (1, 1, [60.0])
    assert s.snapshot_bytes == 1000


def test_a_plain_stop_releases_nothing_and_a_window_clips():
    raw = [rec("kernel_started", 0), rec("kernel_stopped", 5 * H), rec("kernel_started", 8 * H)]
    (s,) = report(raw, since=2 * H, until=10 * H).sessions
    assert s.held == totals.Range.exact(2 * (3 * H + 2 * H) / H)  # 2-5 h, then 8 h to the window's end
    assert s.released == totals.Range.exact(0)
    assert s.pauses == 0


def test_waits_median_and_p95():
    raw = [rec("kernel_started", 0)]
    for i in range(20):  # waits 10, 20, ..., 200 s in shuffled order
        start = (i + 1) * H
        wait = ((i * 7) % 20 + 1) * 10
        raw += [rec("resume_requested", start), rec("next_cell_run", start + wait)]
    (s,) = report(raw, until=30 * H).sessions
    assert sorted(s.waits) == [10.0 * k for k in range(1, 21)]
    assert s.median_wait == 105.0  # (100 + 110) / 2
    assert s.p95_wait == 190.0  # nearest rank: the 19th of 20


def test_a_start_before_the_records_is_a_range_not_a_zero():
    raw = [rec("activity", 6 * H, spans=[[5 * H, 6 * H]]), rec("kernel_stopped", 7 * H)]
    (s,) = report(raw, since=0).sessions
    # held at least 5-7 h; at most from the window's start
    assert s.held == totals.Range(2 * 2.0, 2 * 7.0)
    (s,) = report(raw, since=None).sessions
    assert s.held == totals.Range(4.0, None)  # no window start: at least


def test_a_pause_before_the_records_is_a_range():
    raw = [rec("resume_requested", 3 * H), rec("kernel_ready", 3 * H), rec("next_cell_run", 3 * H + 10)]
    raw.append(rec("kernel_stopped", 5 * H))
    (s,) = report(raw, since=0).sessions
    assert s.held == totals.Range.exact(4.0)
    assert s.released == totals.Range(0.0, 6.0)


def test_malformed_records_are_skipped_and_counted():
    bad = [
        "not a record",
        {"event": 1, "at": 5},
        {"event": "kernel_started", "at": "noon", "session": "s"},
        {"event": "kernel_started", "at": 5, "session": 7},
        rec("activity", 5, spans=[[1]]),
        rec("activity", 5, spans=[[3, 1]]),
        rec("kernel_started", 5, gpus=-1),
        {"event": "kernel_started", "at": float("nan"), "session": "s"},
    ]
    console = [{"event": "kernel_started", "at": 5, "session": None, "gpus": 1}]  # well formed, no row
    h = report(cycle() + bad + console)
    assert h.malformed == len(bad)
    (s,) = h.sessions
    assert s.held == totals.Range.exact(2 * (6 * H - 30) / H)


def test_a_server_counts_only_what_its_kernels_do_not():
    base = {"user": "u", "server": "gpu", "gpus": 1}
    raw = [
        rec("server_started", 0, session=None, **base),
        rec("kernel_started", H, session="k", **base),
        rec("kernel_stopped", 3 * H, session="k", **base),
        rec("server_stopped", 5 * H, session=None, **base),
    ]
    rows = {s.key: s for s in report(raw).sessions}
    assert rows["k"].held == totals.Range.exact(2.0)
    assert rows[timeline.server_key("u", "gpu")].held == totals.Range.exact(3.0)


def test_two_notebooks_of_one_server_at_once_count_its_gpus_once_in_the_total():
    on_server = {"server": "gpu"}
    raw = [
        rec("kernel_started", 0, session="a", **on_server),
        rec("kernel_started", 2 * H, session="b", **on_server),
        rec("kernel_stopped", 4 * H, session="a", **on_server),
        rec("kernel_stopped", 6 * H, session="b", **on_server),
        # the same hours on a kernel outside any server: nothing says it saw the same GPUs
        rec("kernel_started", 2 * H, session="c"),
        rec("kernel_stopped", 4 * H, session="c"),
    ]
    h = report(raw)
    rows = {s.key: s for s in h.sessions}
    assert rows["a"].held == rows["b"].held == totals.Range.exact(2 * 4.0)  # each notebook's own hours
    assert rows["a"].shared == [] and rows["b"].shared == [(2 * H, 4 * H)]  # b started second
    assert rows["c"].shared == []
    assert h.shared == totals.Range.exact(2 * 2.0)
    assert h.total("held") == totals.Range.exact(2 * 6.0 + 2 * 2.0)  # the server's 0-6 h, and c
    assert h.per_day("held") == {0: pytest.approx(16.0)}
    out = text.report(h)
    assert "4.0 GPU-h of the sessions' HELD is shared" in out and "total: 16.0 GPU-h held" in out
    assert text.to_json(h)["total"]["shared_gpu_hours"] == 4.0


def test_kernels_that_died_are_counted_and_a_restart_keeps_the_gpus_held():
    raw = [
        rec("kernel_started", 0),
        rec("kernel_restarted", H, reason="died"),
        rec("kernel_restarted", 2 * H, reason="user"),
        rec("kernel_restarted", 3 * H, reason="died"),
        rec("kernel_stopped", 4 * H),
    ]
    h = report(raw)
    (s,) = h.sessions
    assert s.deaths == 2 and s.held == totals.Range.exact(2 * 4.0)  # held through every restart
    assert "kernels that died and were restarted by Jupyter (out of memory, say): s 2" in text.report(h)
    out = text.to_json(h)
    assert out["sessions"][0]["kernel_deaths"] == 2 and out["total"]["kernel_deaths"] == 2
    assert "kernels that died" not in text.report(report(cycle()))
    assert "Kernels that died and were restarted by Jupyter: s 2" in page.html(h)


def test_money_and_storage_with_prices_and_hours_only_without():
    raw = [
        rec("kernel_started", 0, gpus=1),
        rec("checkpoint_committed", 0, gpus=1, bytes=10**9, bytes_total=10**9),
        rec("kernel_stopped", 30 * 86400, gpus=1),
    ]
    h = report(raw, until=30 * 86400, price=2.0, storage_price=0.5)
    assert h.money("held") == totals.Range.exact(30 * 24 * 2.0)
    assert h.storage_money() == totals.Range.exact(0.5)  # 1 GB for a 30-day month
    assert report(raw).money("held") is None


def _hours(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans) / H


@pytest.mark.parametrize("seed", [3, 11])
def test_a_generated_week_matches_its_truth(seed):
    history = week(seed)
    h = report(history.records, since=history.start, until=history.end)
    rows = {s.key: s for s in h.sessions}
    assert h.malformed == 0
    for name, truth in history.truth.items():
        s = rows[name]
        assert s.held.low == pytest.approx(_hours(truth.held) * truth.gpus)
        assert s.held.known
        assert s.released.low == pytest.approx(_hours(truth.paused) * truth.gpus)
        assert s.active.low == pytest.approx(_hours(truth.active) * truth.gpus)
        assert sorted(s.waits) == pytest.approx(sorted(truth.waits))
        assert s.median_wait == pytest.approx(statistics.median(truth.waits))
        assert s.resumes == len(truth.waits)
    held = sum(_hours(t.held) * t.gpus for t in history.truth.values())
    server = rows["server:dana/gpu"].held.low  # the server before its kernel started: 7:30 to 9:00
    assert server == pytest.approx(1.5)
    assert h.total("held").low == pytest.approx(held + server)


def test_a_session_resumed_with_fewer_gpus_counts_each_stretch_at_its_own():
    raw = [
        rec("kernel_started", 0, gpus=2),
        rec("pause_requested", 4 * H, gpus=2, trigger="button"),
        rec("kernel_stopped", 4 * H, gpus=2),
        rec("resume_requested", 6 * H, gpus=1),
        rec("kernel_started", 6 * H, gpus=1),
        rec("next_cell_run", 6 * H + 5, gpus=1),
        rec("activity", 8 * H, gpus=1, spans=[[6 * H, 7 * H]]),
        rec("kernel_stopped", 8 * H, gpus=1),
    ]
    (s,) = report(raw).sessions
    assert s.held == totals.Range.exact(2 * 4 + 1 * 2)
    assert s.released == totals.Range.exact(2 * 2)  # the GPUs the paused kernel gave back
    assert s.active == totals.Range.exact(1)
    h = report(raw)
    assert h.per_day("held") == {0: pytest.approx(10.0)}


def test_a_server_started_again_with_no_stop_between_is_a_range():
    base = {"session": None, "user": "u", "server": "u/gpu", "gpus": 1}
    raw = [
        rec("server_started", 0, **base),
        rec("server_started", 10 * H, **base),
        rec("server_stopped", 12 * H, **base),
    ]
    (s,) = report(raw).sessions
    assert s.key == "server:u/gpu"
    assert s.held == totals.Range(2.0, 12.0)  # the stop before 10 h went unrecorded


@pytest.mark.parametrize("seed", range(20))
def test_records_lost_or_out_of_order_never_break_the_report(seed):
    """A ledger with a third of its records missing and some moved in time still adds up to ranges
    that make sense, and its text, JSON and what-if are written."""
    rng = random.Random(seed)
    history = week(7)
    raw = [r for r in history.records if rng.random() > 0.3]
    raw += [{**r, "at": r["at"] + rng.uniform(-6 * H, 6 * H)} for r in rng.sample(raw, 5)]
    since = rng.choice([None, history.start, history.start + 2 * 86400])
    h = report(raw, since=since, until=history.end, price=1.0, storage_price=1.0)
    for s in h.sessions:
        for name in ("held", "active", "released", "storage_gb_months"):
            value = getattr(s, name)
            assert value.low >= 0 and (value.high is None or value.high >= value.low - 1e-9), (s.key, name, value)
    lines = timeline.timelines(records.parse_all(raw)[0])
    outcomes = whatif.what_if(lines, h, {"15m": 900.0, "2h": 7200.0})
    assert all(o.released >= 0 and o.held >= 0 for o in outcomes[1])
    assert "total:" in text.report(h) and "what-if" in text.what_if(*outcomes)
    json.dumps(text.to_json(h, outcomes))


def test_a_resume_inside_a_running_kernel_is_a_resume_with_a_wait_and_nothing_released():
    raw = [
        rec("kernel_started", 0),
        rec("resume_requested", H),  # %resume in the notebook's running kernel
        rec("next_cell_run", H + 12),
        rec("kernel_stopped", 2 * H),
    ]
    (s,) = report(raw).sessions
    assert (s.resumes, s.pauses, s.waits) == (1, 0, [12.0])
    assert s.held == totals.Range.exact(2 * 2.0) and s.released == totals.Range.exact(0)


def test_intersect_and_a_range_less_a_part_of_it():
    from jupyter_pause.hours import intervals

    assert intervals.intersect([(0, 4), (6, 10)], [(2, 7), (9, 20)]) == [(2, 4), (6, 7), (9, 10)]
    assert intervals.intersect([(0, 4)], []) == []
    assert totals.Range(10.0, 12.0).minus(totals.Range(1.0, 3.0)) == totals.Range(7.0, 11.0)
    assert totals.Range(10.0, None).minus(totals.Range(0.0, None)) == totals.Range(0.0, None)  # unknown part
