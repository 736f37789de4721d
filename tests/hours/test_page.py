"""The GPU-hours page (jupyter_pause/hours/page.py): its time axis at the scale of minutes and of
days, what it says of sessions without GPUs, and, in a real browser, the page written by
``jupyter pause hours --html`` from the demo week, opened in chromium from a file with no network:
its charts load and its totals are there; the screenshot is kept (and is the README's picture)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jupyter_pause.cli import main
from jupyter_pause.hours import page, records, timeline, totals
from jupyter_pause.store.storage import Store
from tests.support.ledger_history import DAY, START, week, write

CHROMIUM = "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
PICTURE = REPO / "docs" / "hours.png"

#: Half an hour of a notebook on a CPU-only server: it works, is released, comes back.
END = START + 9 * 3600


def half_hour(gpus: int = 0) -> list[dict]:
    base = {"v": 1, "session": "cpu-nb", "user": "ann", "node": "n1", "gpus": gpus}
    moments = [
        ("kernel_started", -1500, {}),
        ("activity", -1200, {"spans": [[END - 1490, END - 1300]]}),
        ("pause_requested", -1000, {"trigger": "release"}),
        ("kernel_stopped", -990, {"trigger": "release"}),
        ("resume_requested", -600, {}),
        ("kernel_ready", -560, {}),
        ("next_cell_run", -550, {}),
    ]
    return [{**base, "event": name, "at": END + offset, **more} for name, offset, more in moments]


def report(raw: list[dict], since: float | None, until: float) -> totals.Hours:
    return totals.compute(timeline.timelines(records.parse_all(raw)[0]), totals.Window(since, until))


def axis(h: totals.Hours) -> tuple[list[str], str, list[str]]:
    """The timeline's x tick labels, x label and row labels, as drawn."""
    fig = page.timeline_figure(h)
    fig.canvas.draw()
    ax = fig.axes[0]
    return [t.get_text() for t in ax.get_xticklabels()], ax.get_xlabel(), [t.get_text() for t in ax.get_yticklabels()]


def clock(label: str) -> float:
    """Epoch seconds of an ``HH:MM`` tick label on the day of ``END``."""
    hours, minutes = map(int, label.split(":"))
    return START + hours * 3600 + minutes * 60


@pytest.mark.parametrize("since", [END - 1800, None])
def test_a_window_of_minutes_shows_clock_times_and_says_the_session_holds_no_gpus(since):
    h = report(half_hour(), since, END)
    ticks, xlabel, rows = axis(h)
    assert len(ticks) >= 4 and all(END - 1800 <= clock(t) <= END for t in ticks), ticks  # not epoch dates
    assert xlabel == "UTC, 2026-11-16" and rows == ["cpu-nb (no GPUs)"]
    html = page.html(h)
    assert html.count("<img") == 1  # the timeline; no empty chart of GPU-hours per day
    assert "The session (cpu-nb) held no GPUs (CPUs only): each holds none" in html
    assert "No GPU-hours to chart: the session (cpu-nb) held no GPUs" in html
    assert "<td>none</td>" in html  # the GPUs column


def test_a_window_of_minutes_with_a_gpu_draws_its_hours_and_says_nothing_is_missing():
    h = report(half_hour(gpus=1), END - 1800, END)
    html = page.html(h)
    assert html.count("<img") == 2 and "No GPU-hours" not in html and "held no GPUs" not in html
    assert axis(h)[2] == ["cpu-nb"]


def test_a_window_of_days_shows_days_and_one_of_hours_shows_day_and_time():
    history = week()
    ticks, xlabel, _ = axis(report(history.records, START, START + 7 * DAY))
    days = [time.strftime("%a %d %b", time.gmtime(START + d * DAY)) for d in range(8)]
    assert set(ticks) <= set(days) and len(ticks) >= 4 and xlabel == "UTC", ticks
    ticks, _, _ = axis(report(history.records, START + DAY, START + 2.5 * DAY))
    assert all(t.split()[0] in ("Tue", "Wed") and ":" in t for t in ticks), ticks
    html = page.html(report(history.records, START, START + 7 * DAY))
    assert html.count("<img") == 2 and "No GPU-hours" not in html


@pytest.mark.integration
def test_the_page_opens_in_chromium_with_its_charts_and_totals(tmp_path, capsys):
    store = str(tmp_path / "store")
    write(Store(store), week())
    page_file = tmp_path / "hours.html"
    argv = ["hours", "--store", store, "--since", "2026-11-16", "--until", "2026-11-23", "--what-if", "15m,30m,1h,2h"]
    assert main([*argv, "--html", str(page_file), "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    source = page_file.read_text()
    assert "http://" not in source and "https://" not in source and "<script" not in source
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1240, "height": 900}, offline=True)
            page = context.new_page()
            page.goto(page_file.as_uri())
            images = page.eval_on_selector_all("img", "els => els.map(e => [e.complete, e.naturalWidth, e.alt])")
            assert len(images) == 3
            assert all(done and width > 0 for done, width, _ in images), images
            body = page.inner_text("body")
            assert f"{total['held_gpu_hours']:.1f}" in body
            assert f"{total['released_gpu_hours']:.1f}" in body
            assert "ben-llm" in body and "idle 2h" in body
            shot = tmp_path / "hours.png"
            page.screenshot(path=str(shot), full_page=True)
            ARTIFACTS.mkdir(exist_ok=True)
            (ARTIFACTS / "hours.png").write_bytes(shot.read_bytes())
            PICTURE.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(PICTURE), full_page=True, clip={"x": 0, "y": 0, "width": 1240, "height": 1150})
        finally:
            browser.close()
    assert shot.stat().st_size > 50_000
