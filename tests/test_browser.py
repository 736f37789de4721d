"""A real browser on a real JupyterLab: Pause and Resume from the notebook toolbar."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
TOKEN = "pause-browser-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> object:
    request = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on 127.0.0.1 with the extension, its own folders, and a notebook to work in."""
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import torch\nmodel = torch.nn.Linear(3, 1)\nx = 41 + 1\nprint('built', x)"),
        nbformat.v4.new_code_cell("print('value', x, type(model).__name__)"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(root / "browser.ipynb"))
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        env[name] = str(tmp_path / name.lower())
    for name in ("JUPYTER_PAUSE_STORE", "JUPYTER_PAUSE_SESSION", "JPY_SESSION_NAME"):
        env.pop(name, None)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "lab.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--ServerApp.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
            f"--PauseConfig.store={tmp_path / 'store'}",
            "--PauseServer.lease_settle=0.2",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(300):
            try:
                _get(f"{url}/api/status")
                break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError((tmp_path / "lab.log").read_text()[-3000:]) from None
                time.sleep(0.2)
        else:
            raise RuntimeError("JupyterLab did not answer within 60 s")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _run_cell(page, index: int) -> None:
    cell = page.locator(".jp-NotebookPanel .jp-Cell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")


def test_pause_and_resume_from_the_toolbar(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    assert Path(CHROMIUM).exists(), "Debian's chromium is needed: `make test` installs it"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{lab}/lab/tree/browser.ipynb?token={TOKEN}")
            toolbar = page.locator(".jp-NotebookPanel-toolbar")
            status = toolbar.locator(".jp-PauseStatus")
            pause = toolbar.get_by_role("button", name="Pause")
            resume = toolbar.get_by_role("button", name="Resume")
            expect(status).to_have_attribute("data-state", "ready", timeout=60_000)
            expect(pause).to_be_visible()
            expect(resume).to_be_visible()
            expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=60_000)

            _run_cell(page, 0)
            expect(page.locator(".jp-OutputArea-output").first).to_contain_text("built 42", timeout=60_000)

            pause.click()
            expect(status).to_have_attribute("data-state", "paused", timeout=120_000)
            expect(status).to_have_text("paused")
            assert _get(f"{lab}/api/kernels") == []
            page.screenshot(path=str(ARTIFACTS / "paused.png"))

            # Running a cell while paused says so, and starts no empty kernel.
            _run_cell(page, 1)
            dialog = page.locator(".jp-Dialog")
            expect(dialog).to_contain_text("This session is paused", timeout=30_000)
            dialog.get_by_role("button", name="Cancel").click()
            expect(dialog).to_have_count(0)
            time.sleep(1.0)
            assert _get(f"{lab}/api/kernels") == []

            # The sidebar lists the paused session.
            page.locator('.jp-SideBar [data-id="jupyter-pause-sessions"]').click()
            row = page.locator("li.jp-PauseSessions-row", has_text="browser.ipynb")
            expect(row).to_have_attribute("data-state", "paused", timeout=30_000)

            resume.click()
            expect(status).to_contain_text("restored", timeout=120_000)
            expect(status).to_have_attribute("data-state", "ready")
            page.screenshot(path=str(ARTIFACTS / "restored.png"))
            assert len(_get(f"{lab}/api/kernels")) == 1

            _run_cell(page, 1)
            expect(page.locator(".jp-OutputArea-output").nth(1)).to_contain_text("value 42 Linear", timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "after-resume.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "failure.png"))  # what the user would have seen
            raise
        finally:
            browser.close()
