"""The idle-policy what-if (jupyter_pause.hours.whatif): a replay worked out by hand for each
threshold, the resume-wait model, and a generated week replayed independently."""

from __future__ import annotations

import statistics

import pytest

from jupyter_pause.hours import records, timeline, totals, whatif
from tests.support.ledger_history import week

H = 3600.0
THRESHOLDS = {"15m": 900.0, "30m": 1800.0, "1h": 3600.0, "2h": 7200.0}


def rec(event: str, at: float, session: str = "s", **fields: object) -> dict[str, object]:
    return {"event": event, "at": at, "session": session, "user": "u", "gpus": 1, **fields}


def run(raw: list[dict[str, object]], until: float = 24 * H) -> tuple[whatif.WaitModel, list[whatif.Outcome]]:
    parsed, _ = records.parse_all(raw)
    lines = timeline.timelines(parsed)
    hours = totals.compute(lines, totals.Window(0.0, until))
    return whatif.what_if(lines, hours, THRESHOLDS)


def day() -> list[dict[str, object]]:
    """Work 0-1 h and 1.5-2 h, a recorded pause at 2.5 h, the user back at 4.5 h (kernel ready at
    4.75 h, first cell at 5 h: a 30-minute wait), work to 6 h, a plain stop at 8 h."""
    return [
        rec("kernel_started", 0),
        rec("activity", 2 * H, spans=[[0, H], [1.5 * H, 2 * H]]),
        rec("pause_requested", 2.5 * H, trigger="idle"),
        rec("kernel_stopped", 2.5 * H),
        rec("resume_requested", 4.5 * H),
        rec("kernel_ready", 4.75 * H),
        rec("next_cell_run", 5 * H),
        rec("activity", 6 * H, spans=[[5 * H, 6 * H]]),
        rec("kernel_stopped", 8 * H),
    ]


def test_each_threshold_by_hand():
    model, outcomes = run(day())
    got = {o.policy: (o.held, o.released, o.pauses, o.resumes, o.waiting) for o in outcomes}
    # the session exists 0-8 h; idle gaps: 0.5 h (1-1.5 h), 2.5 h (2 h to the user's return at
    # 4.5 h), and the 2 h tail (6-8 h); each return after a pause costs the measured 0.5 h wait
    assert got["current"] == pytest.approx((5.75, 2.25, 1, 1, 0.5 * H))
    assert got["idle 15m"] == pytest.approx((8 - 4.25, 0.25 + 2.25 + 1.75, 3, 2, 2 * 0.5 * H))
    assert got["idle 30m"] == pytest.approx((8 - 3.5, 2.0 + 1.5, 2, 1, 0.5 * H))
    assert got["idle 1h"] == pytest.approx((8 - 2.5, 1.5 + 1.0, 2, 1, 0.5 * H))
    assert got["idle 2h"] == pytest.approx((8 - 0.5, 0.5, 1, 1, 0.5 * H))  # a 2 h tail is not over 2 h
    assert model.own == {"s": 0.5 * H}


def test_a_pause_never_happens_during_activity():
    raw = [rec("kernel_started", 0), rec("activity", 10 * H, spans=[[0, 10 * H]]), rec("kernel_stopped", 10 * H)]
    _, outcomes = run(raw)
    assert all(o.released == 0 and o.pauses == 0 for o in outcomes)


def test_the_wait_model_own_median_then_a_fit_on_size():
    raw = []
    for name, size, wait in (("a", 10**9, 10.0), ("b", 3 * 10**9, 30.0)):
        raw += [
            rec("kernel_started", 0, name),
            rec("checkpoint_committed", H, name, bytes=size, bytes_total=size),
            rec("kernel_stopped", H, name, trigger="idle"),
            rec("resume_requested", 2 * H, name),
            rec("kernel_ready", 2 * H + 1, name, bytes=size),
            rec("next_cell_run", 2 * H + wait, name),
        ]
    raw.append(rec("checkpoint_committed", H, "c", bytes=2 * 10**9, bytes_total=2 * 10**9))
    model, _ = run(raw)
    assert model.wait("a", None) == 10.0
    assert model.wait("c", 2 * 10**9) == pytest.approx(20.0)  # 0 s + 10 s/GB
    assert "10.00 s/GB" in model.describe()
    assert whatif.WaitModel({}).wait("x", 5) is None  # nothing measured: unknown


def _independent(history, threshold: float) -> tuple[float, int, int]:
    """Released GPU-hours, pauses and returns, from the generator's truth: the user's arrivals."""
    released, pauses, returns = 0.0, 0, 0
    for truth in history.truth.values():
        start, end = truth.exists
        idle_from = start
        for arrival, busy_until in truth.arrivals:
            if arrival - idle_from > threshold:
                released += (arrival - idle_from - threshold) * truth.gpus
                pauses, returns = pauses + 1, returns + 1
            idle_from = max(idle_from, busy_until)
        if end - idle_from > threshold:
            released += (end - idle_from - threshold) * truth.gpus
            pauses += 1
    return released / H, pauses, returns


def test_a_generated_week_replayed_independently():
    history = week(5)
    parsed, _ = records.parse_all(history.records)
    lines = timeline.timelines(parsed)
    hours = totals.compute(lines, totals.Window(history.start, history.end))
    model, outcomes = whatif.what_if(lines, hours, THRESHOLDS)
    for outcome, threshold in zip(outcomes[1:], THRESHOLDS.values(), strict=True):
        released, pauses, returns = _independent(history, threshold)
        # the records start each session at its kernel's start and move arrivals back to resume requests
        assert outcome.released == pytest.approx(released, rel=1e-9)
        assert (outcome.pauses, outcome.resumes) == (pauses, returns)
        # each return waits the session's own median measured wait
        expected = sum(statistics.median(t.waits) * _returns(t, threshold) for t in history.truth.values())
        assert outcome.waiting == pytest.approx(expected)
    # the 30-minute replay reproduces the 30-minute policy the week was generated under
    current, at_30m = outcomes[0], outcomes[2]
    assert (at_30m.pauses, at_30m.resumes) == (current.pauses, current.resumes)


def _returns(truth, threshold: float) -> int:
    idle_from, returns = truth.exists[0], 0
    for arrival, busy_until in truth.arrivals:
        returns += arrival - idle_from > threshold
        idle_from = max(idle_from, busy_until)
    return returns
