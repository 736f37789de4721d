"""A real browser on a real JupyterLab: Pause and Resume from the notebook toolbar."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.support.hub import run_hub, wait_for
from tests.support.kernels import KERNEL_PORT_ARGS
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
# The README's picture of the toolbar, taken while the session is paused.
TOOLBAR_PICTURE = REPO / "docs" / "toolbar.png"
TOKEN = "pause-browser-test"
KERNEL_TIMEOUT = 60_000
# What JupyterLab shows once a notebook has a kernel, and once that kernel is connected and idle.
HAS_KERNEL = re.compile(r"^(?!No Kernel$).+")
STATUS_BAR_KERNEL = "#jp-main-statusbar .jp-StatusBar-TextItem[title^='Change kernel for']"
CONNECTED_IDLE = re.compile(r"^(?!No Kernel ).+ \| Idle$")


def _get(url: str) -> object:
    request = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


# A third cell for the resume_on_open test: a checkpoint of the state so far, then a new model
# (so the pause's checkpoint holds a blob of its own, which the test damages).
CHECKPOINT_THEN_NEW_MODEL = "%load_ext jupyter_pause\n%checkpoint\nmodel = torch.nn.Linear(3, 1)\nprint('new model')"


def _send(url: str, method: str, body: object | None = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _write_notebook(root: Path) -> None:
    """browser.ipynb: a cell that builds some state, one that reads it, one that checkpoints it."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import torch\nmodel = torch.nn.Linear(3, 1)\nx = 41 + 1\nprint('built', x)"),
        nbformat.v4.new_code_cell("print('value', x, type(model).__name__)"),
        nbformat.v4.new_code_cell(CHECKPOINT_THEN_NEW_MODEL),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(root / "browser.ipynb"))


@contextlib.contextmanager
def _lab(tmp_path: Path, *options: str) -> Iterator[str]:
    """JupyterLab on 127.0.0.1 with the extension, its own folders, and a notebook to work in."""
    root = tmp_path / "root"
    root.mkdir()
    _write_notebook(root)
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        env[name] = str(tmp_path / name.lower())
    for name in ("JUPYTER_PAUSE_STORE", "JUPYTER_PAUSE_SESSION", "JPY_SESSION_NAME"):
        env.pop(name, None)
    port = free_port()
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
            *KERNEL_PORT_ARGS,
            *options,
        ],
        env=env,
        # What the server writes beside it stays in the test's folder (jupyter-collaboration's
        # .jupyter_ystore.db, once a notebook is open in a room).
        cwd=tmp_path,
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


@pytest.fixture
def lab(tmp_path):
    """JupyterLab as it is configured by default."""
    with _lab(tmp_path) as url:
        yield url


@pytest.fixture
def lab_resume_on_open(tmp_path):
    """JupyterLab whose server resumes a paused session when its notebook is opened."""
    with _lab(tmp_path, "--PauseServer.resume_on_open=True") as url:
        yield url


@contextlib.contextmanager
def _browser_page(failure: str) -> Iterator[Page]:
    """A chromium page; on failure, a screenshot of what the user would have seen."""
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
            try:
                yield page
            except Exception:
                page.screenshot(path=str(ARTIFACTS / failure))
                raise
        finally:
            browser.close()


def _run_cell(page, index: int) -> None:
    cell = page.locator(".jp-NotebookPanel .jp-Cell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")


def _expect_kernel_idle(page, when: str) -> None:
    """Wait until JupyterLab shows the notebook connected to a kernel that is idle.

    Each step is a state JupyterLab renders, in the order it reaches them; the first one missing
    is named in the failure. The toolbar's execution indicator alone is not enough: it reads
    ``data-status="idle"`` before the notebook has any kernel.
    """
    toolbar = page.locator(".jp-NotebookPanel-toolbar")
    expect(
        toolbar.locator('[data-jp-item-name="kernelName"]'),
        f"{when}: the notebook has no kernel (the toolbar's kernel name shows none)",
    ).to_have_text(HAS_KERNEL, timeout=KERNEL_TIMEOUT)
    # The status bar shows SessionContext.kernelDisplayStatus: the kernel's own status once its
    # websocket is connected, otherwise 'Initializing', 'Connecting', 'Unknown'...
    expect(
        page.locator(STATUS_BAR_KERNEL),
        f"{when}: the notebook's kernel is not connected and idle (status bar: '<kernel> | Idle')",
    ).to_have_text(CONNECTED_IDLE, timeout=KERNEL_TIMEOUT)
    expect(
        toolbar.locator(".jp-Notebook-ExecutionIndicator"),
        f"{when}: the toolbar's execution indicator does not show the kernel idle",
    ).to_have_attribute("data-status", "idle", timeout=KERNEL_TIMEOUT)


def _expect_no_kernel(page, when: str) -> None:
    """Wait until JupyterLab shows the notebook without a kernel."""
    expect(
        page.locator('.jp-NotebookPanel-toolbar [data-jp-item-name="kernelName"]'),
        f"{when}: the notebook still shows a kernel (the toolbar's kernel name does not read 'No Kernel')",
    ).to_have_text("No Kernel", timeout=KERNEL_TIMEOUT)


def _screenshot_toolbar(page, path: Path) -> None:
    """The notebook toolbar from its first button to the pause status, nothing else."""
    toolbar = page.locator(".jp-NotebookPanel-toolbar")
    page.mouse.move(0, 0)  # no hover highlight on the button just clicked
    box = toolbar.bounding_box()
    status = toolbar.locator(".jp-PauseStatus").bounding_box()
    assert box and status, "the notebook toolbar is not on screen"
    right = min(box["x"] + box["width"], status["x"] + status["width"] + 8)
    path.parent.mkdir(exist_ok=True)
    page.screenshot(
        path=str(path),
        clip={"x": box["x"], "y": box["y"], "width": right - box["x"], "height": box["height"]},
    )


def test_pause_and_resume_from_the_toolbar(lab):
    with _browser_page("failure.png") as page:
        page.goto(f"{lab}/lab/tree/browser.ipynb?token={TOKEN}")
        toolbar = page.locator(".jp-NotebookPanel-toolbar")
        status = toolbar.locator(".jp-PauseStatus")
        pause = toolbar.get_by_role("button", name="Pause", exact=True)
        resume = toolbar.get_by_role("button", name="Resume", exact=True)
        # The same buttons as elements (jp-button), for their text and attributes.
        pause_item = toolbar.locator('[data-jp-item-name="jupyter-pause-pause"] jp-button')
        resume_item = toolbar.locator('[data-jp-item-name="jupyter-pause-resume"] jp-button')
        expect(status).to_have_attribute("data-state", "ready", timeout=60_000)
        expect(pause).to_be_visible()
        expect(resume).to_be_visible()
        # Words, not only icons: Pause sits near the kernel's interrupt square.
        for item, label, title in (
            (pause_item, "Pause", r"^Pause: save the notebook"),
            (resume_item, "Resume", r"^Resume: start a kernel"),
        ):
            expect(item.locator(".jp-ToolbarButtonComponent-label")).to_have_text(label)
            expect(item.locator(".jp-ToolbarButtonComponent-label")).to_be_visible()
            expect(item).to_have_attribute("title", re.compile(title))

        _expect_kernel_idle(page, "before running the first cell")
        _run_cell(page, 0)
        expect(page.locator(".jp-OutputArea-output").first).to_contain_text("built 42", timeout=60_000)
        _expect_kernel_idle(page, "after the first cell")

        pause.click()
        expect(status).to_have_attribute("data-state", "paused", timeout=120_000)
        expect(status).to_have_text("paused")
        expect(pause_item).to_have_attribute("aria-disabled", "true")
        expect(resume_item).to_have_attribute("aria-disabled", "false")
        assert _get(f"{lab}/api/kernels") == []
        _expect_no_kernel(page, "after the pause")
        _screenshot_toolbar(page, TOOLBAR_PICTURE)
        page.screenshot(path=str(ARTIFACTS / "paused.png"))

        # Running a cell while paused says so, and starts no empty kernel: the guard declines
        # the start before it opens the dialog (a stray kernel would also show below, after
        # the resume, as a second kernel).
        _run_cell(page, 1)
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text("This session is paused", timeout=30_000)
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_have_count(0)
        _expect_no_kernel(page, "after cancelling the paused dialog")
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

        _expect_kernel_idle(page, "after the resume, before running a cell")
        _run_cell(page, 1)
        expect(page.locator(".jp-OutputArea-output").nth(1)).to_contain_text("value 42 Linear", timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / "after-resume.png"))


def _damage_model_blob(store: Path) -> tuple[str, str]:
    """Flip a byte of the model's weights in the newest checkpoint of browser.ipynb, as a bad
    sector would; the ids of that checkpoint and of the one before it."""
    from jupyter_pause.notebook import session_from_path
    from jupyter_pause.store.catalog import Catalog
    from jupyter_pause.store.storage import Store

    session = session_from_path("browser.ipynb")
    newest, older = Catalog(Store(str(store))).checkpoints(session)[:2]
    (model,) = [v for v in newest.variables if v.name == "model"]
    path = store / newest.blob_key(newest.arrays[model.arrays[0]].blob)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(data)
    return newest.id, older.id


def test_opening_a_paused_notebook_resumes_it_with_resume_on_open(lab_resume_on_open, tmp_path):
    """Opening the notebook resumes it by the same rule as Resume: the pause's checkpoint is
    damaged, so the one before it comes back whole, and the status says which and why."""
    lab = lab_resume_on_open
    with _browser_page("failure-resume-on-open.png") as page:
        page.goto(f"{lab}/lab/tree/browser.ipynb?token={TOKEN}")
        toolbar = page.locator(".jp-NotebookPanel-toolbar")
        status = toolbar.locator(".jp-PauseStatus")
        expect(status).to_have_attribute("data-state", "ready", timeout=60_000)
        _expect_kernel_idle(page, "before running the first cell")
        _run_cell(page, 0)
        expect(page.locator(".jp-OutputArea-output").first).to_contain_text("built 42", timeout=60_000)
        _expect_kernel_idle(page, "after the first cell")
        _run_cell(page, 2)
        expect(page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea")).to_contain_text("new model", timeout=60_000)
        _expect_kernel_idle(page, "after the checkpoint cell")

        toolbar.get_by_role("button", name="Pause", exact=True).click()
        expect(status).to_have_attribute("data-state", "paused", timeout=120_000)
        _expect_no_kernel(page, "after the pause")
        assert _get(f"{lab}/api/kernels") == []
        damaged, intact = _damage_model_blob(tmp_path / "store")

        # Close the notebook (the pause saved it), then open it again from the file browser.
        tab = page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text="browser.ipynb")
        tab.locator(".lm-TabBar-tabCloseIcon").click()
        expect(page.locator(".jp-NotebookPanel")).to_have_count(0)
        entry = page.locator(".jp-DirListing-item", has_text="browser.ipynb")
        if not entry.is_visible():
            page.locator('.jp-SideBar [data-id="filebrowser"]').click()
        entry.dblclick()

        # Opening it resumes it: no paused dialog, no Resume click, and the kernel it gets is
        # the resumed one (a fresh kernel would not know x).
        status = page.locator(".jp-NotebookPanel-toolbar .jp-PauseStatus")
        expect(status).to_have_attribute("data-verdict", "restored", timeout=120_000)
        expect(status).to_have_attribute("data-state", "ready")
        expect(status).to_contain_text(f"restored ({intact})")
        # The words shown (the indicator's tooltip): which checkpoint was passed over, and why.
        expect(status).to_have_attribute(
            "title", re.compile(rf"checkpoint {damaged} is damaged: blob \w+ \(array data of model\) checksum mismatch")
        )
        expect(status).to_have_attribute("title", re.compile(rf"using {intact}, the newest intact checkpoint, instead"))
        expect(page.locator(".jp-Dialog")).to_have_count(0)
        assert len(_get(f"{lab}/api/kernels")) == 1
        _expect_kernel_idle(page, "after opening the paused notebook")
        _run_cell(page, 1)
        expect(page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea")).to_contain_text(
            "value 42 Linear", timeout=60_000
        )
        assert len(_get(f"{lab}/api/kernels")) == 1
        page.screenshot(path=str(ARTIFACTS / "resumed-on-open.png"))


def _warn(lab: str, seconds: float) -> dict:
    """Warn the server as the Hub's pause service does."""
    body = {"reason": "idle for 2.0 h", "release_at": time.time() + seconds, "idle_for": 7200}
    return _send(f"{lab}/jupyter-pause/api/release/warning", "POST", body)


def test_the_warning_of_a_release_counts_down_and_keep_working_or_pause_now_answer_it(lab):
    """What the pause service's warning looks like: a countdown, Keep working, Pause now."""
    warning_url = f"{lab}/jupyter-pause/api/release/warning"
    with _browser_page("failure-warning.png") as page:
        page.goto(f"{lab}/lab/tree/browser.ipynb?token={TOKEN}")
        _expect_kernel_idle(page, "before running the first cell")
        _run_cell(page, 0)
        expect(page.locator(".jp-OutputArea-output").first).to_contain_text("built 42", timeout=60_000)
        _expect_kernel_idle(page, "after the first cell")

        _warn(lab, 300)
        toast = page.locator(".Toastify__toast", has_text="This server will be paused in")
        expect(toast).to_be_visible(timeout=30_000)  # at the next poll of the server's status
        expect(toast).to_contain_text("(idle for 2.0 h). Your notebooks are saved and come back with Resume.")
        first = re.search(r"paused in (\d+:\d\d)", toast.inner_text()).group(1)
        expect(toast).not_to_contain_text(f"paused in {first}", timeout=5_000)  # it counts down
        page.screenshot(path=str(ARTIFACTS / "warning.png"))
        toast.get_by_role("button", name="Keep working").click()
        expect(toast).to_have_count(0)
        assert _get(warning_url) is None

        _warn(lab, 300)
        toast = page.locator(".Toastify__toast", has_text="This server will be paused in")
        expect(toast).to_be_visible(timeout=30_000)
        toast.get_by_role("button", name="Pause now").click()
        status = page.locator(".jp-NotebookPanel-toolbar .jp-PauseStatus")
        # outside a Hub the release pauses every session and leaves the server running
        expect(status).to_have_attribute("data-release", "paused", timeout=120_000)
        expect(page.locator(".Toastify__toast", has_text="This server will be paused in")).to_have_count(0)
        assert _get(warning_url) is None
        release = _get(f"{lab}/jupyter-pause/api/status")["release"]
        assert release["trigger"] == "button" and [s["state"] for s in release["sessions"]] == ["paused"]


# The user's server may stop itself (the Hub's default token scopes leave that out).
HUB_SCOPES = """
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", "delete:servers!server"]
"""
# The notebook toolbar's indicator records every release state it shows, in order.
RECORD_RELEASE_STATES = """() => {
    const status = document.querySelector('.jp-NotebookPanel-toolbar .jp-PauseStatus');
    window.releaseStates = [];
    new MutationObserver(() => {
        const state = status.dataset.release;
        const seen = window.releaseStates;
        if (state && seen[seen.length - 1] !== state) {
            seen.push(state);
        }
    }).observe(status, { attributes: true, attributeFilter: ['data-release'] });
}"""


def test_pause_all_and_stop_server_from_the_file_menu_under_a_hub(tmp_path):
    with run_hub(tmp_path / "hub", config=HUB_SCOPES, lab=True) as hub:
        hub.create_user("eve")
        hub.start_server("eve")
        _write_notebook(hub.home("eve"))
        with _browser_page("failure-release.png") as page:
            page.goto(f"{hub.url}/hub/login?next=/user/eve/lab/tree/browser.ipynb")
            page.fill("#username_input", "eve")
            page.fill("#password_input", "any")
            page.click("#login_submit")
            status = page.locator(".jp-NotebookPanel-toolbar .jp-PauseStatus")
            expect(status).to_have_attribute("data-state", "ready", timeout=60_000)
            _expect_kernel_idle(page, "before running the first cell")
            _run_cell(page, 0)
            expect(page.locator(".jp-OutputArea-output").first).to_contain_text("built 42", timeout=60_000)
            _expect_kernel_idle(page, "after the first cell")
            page.evaluate(RECORD_RELEASE_STATES)

            # Under a Hub the File menu has it.
            page.locator(".lm-MenuBar-itemLabel", has_text="File").first.click()
            item = page.locator('.lm-Menu-item[data-command="jupyter-pause:release"]')
            expect(item).to_be_visible()
            expect(item).to_contain_text("Pause All and Stop Server")
            item.click()

            # The dialog names the notebook it pauses and says the server stops.
            dialog = page.locator(".jp-Dialog")
            expect(dialog.locator('li[data-path="browser.ipynb"]')).to_be_visible(timeout=30_000)
            expect(dialog).to_contain_text("this server stops and its GPU goes back")
            dialog.get_by_role("button", name="Pause all and stop").click()

            # The indicator follows the release to its end, and one notification says what happens
            # next. The Hub stops the server moments after it accepts: the page may never hear
            # "stopped", only that the server went away while it released ("lost").
            expect(status).to_have_attribute("data-release", re.compile("^(stopped|lost)$"), timeout=120_000)
            ended = re.compile("^(server stopped · sessions paused|server gone during the release)$")
            expect(status).to_have_text(ended)
            expect(page.get_by_text("JupyterLab loses its connection now", exact=False)).to_be_visible()
            seen = page.evaluate("window.releaseStates")
            assert seen[0] == "pausing" and seen[-1] in ("stopped", "lost"), seen
            # The Hub's client runs an event loop of its own: not in the thread playwright's runs in.
            stopped = lambda: wait_for(lambda: hub.server_model("eve"), lambda m: m is None, 60, "eve's server stopped")  # noqa: E731
            with concurrent.futures.ThreadPoolExecutor(1) as thread:
                thread.submit(stopped).result()
            page.screenshot(path=str(ARTIFACTS / "released.png"))

            # The server is gone: the notebook polls fail from now on, and say nothing about it.
            page.wait_for_timeout(12_000)
            ours = page.locator(".Toastify__toast", has_text=re.compile("jupyter-pause|Could not"))
            expect(ours).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "released-later.png"))
