"""The GPU-hours page (jupyter_pause/hours/page.py) in a real browser: written by
``jupyter pause hours --html`` from the demo week, opened in chromium from a file with no network,
its charts load and its totals are there; the screenshot is kept (and is the README's picture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from jupyter_pause.cli import main
from jupyter_pause.store.storage import Store
from tests.ledger_history import week, write

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"
PICTURE = REPO / "docs" / "hours.png"


def test_the_page_opens_in_chromium_with_its_charts_and_totals(tmp_path, capsys):
    store = str(tmp_path / "store")
    write(Store(store), week())
    page_file = tmp_path / "hours.html"
    argv = ["hours", "--store", store, "--since", "2026-11-16", "--until", "2026-11-23", "--what-if", "15m,30m,1h,2h"]
    assert main([*argv, "--html", str(page_file), "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    source = page_file.read_text()
    assert "http://" not in source and "https://" not in source and "<script" not in source
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
