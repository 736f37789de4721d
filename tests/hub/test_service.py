"""jupyter-pause-hub on a real JupyterHub, with the scopes its docstring documents: an idle server
is released (its sessions paused, the Hub shows it stopped), a server running a cell is left
alone, a server whose token cannot stop it stays paused and the report says which setting to
change (or the service stops it with --stop-paused), and a server without jupyter_pause is
skipped with the reason; a warned server is released only when the warning is due, and one
used after its warning is kept; the metrics count what happened. One Hub serves the whole module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_pause import ledger
from jupyter_pause.store.storage import Store
from tests.support.hub import VENV_BIN, Hub, Service, run_hub, wait_for
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

#: The role the service's docstring documents (load_roles): nothing more is given here.
SCOPES = ["list:users", "read:servers", "delete:servers", "access:servers"]

#: cat's and eve's servers get a token without delete:servers!server.
CONFIG = """
def _server_scopes(spawner):
    scopes = ["access:servers!server", "users:activity!user"]
    if spawner.user.name not in ("cat", "eve"):
        scopes.append("delete:servers!server")
    return scopes


c.Spawner.server_token_scopes = _server_scopes
"""

#: Every test user's server is started with this profile; only it has a short idle timeout.
QUICK = {"profile": "quick"}


@dataclass
class Setup:
    """The module's Hub, its users' kernels and the service's log."""

    hub: Hub
    kernels: dict[str, str]
    logs: Path
    #: The store the service writes server starts and stops to (--store).
    ledger: Path

    def page(self, service: str = "jupyter-pause") -> dict[str, Any]:
        """A service's JSON page, through the proxy, with the harness's token."""
        answer = self.hub.fetch(f"{self.hub.url}/services/{service}/")
        assert answer.code == 200, answer
        return answer.body

    def skipped(self, user: str) -> dict[str, Any] | None:
        return next((row for row in self.page()["skipped"] if row["user"] == user), None)

    def service_log(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.logs.glob("*.log")))


def _service(hub: Hub, name: str, logs: Path, *args: str) -> subprocess.Popen[bytes]:
    command = [str(VENV_BIN / "jupyter-pause-hub"), f"--proxy-url={hub.url}", "--check-every=1", *args]
    out = open(logs / f"{name}.log", "wb")  # noqa: SIM115 (the process holds it)
    return subprocess.Popen(command, env=hub.service_env(name), stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("hub-service")
    # a managed instance too: the Hub runs it with the environment a managed service gets
    managed = [str(VENV_BIN / "jupyter-pause-hub"), "--dry-run", "--users=dan", "--idle-timeout=3", "--check-every=1"]
    services = [
        Service("jupyter-pause", SCOPES),
        Service("jupyter-pause-stopper", SCOPES, url=False),
        Service("jupyter-pause-managed", SCOPES, command=managed),
        Service("jupyter-pause-warner", SCOPES),
    ]
    with run_hub(root / "hub", config=CONFIG, services=services) as hub:
        users = ("ann", "bob", "cat", "dan", "eve", "fay", "gus")
        for user in users:
            hub.create_user(user, extension=user != "dan")
            hub.request_server(user, options=QUICK)
        for user in users:
            hub.wait_ready(user, timeout=240)  # seven servers start at once, beside other tests
        kernels: dict[str, str] = {}
        for user in users:  # one kernel after the other: kernels starting together can race for ports
            kernels[user] = hub.open_notebook(user, f"{user}.ipynb")
            if user != "bob":
                hub.execute(user, kernels[user], f"owner = {user!r}")
        hub.execute("bob", kernels["bob"], "import time\ntime.sleep(600)", wait=False)

        logs = root / "logs"
        logs.mkdir()
        # the servers' idle clocks have run since they started: the service starts once all is set up
        quick = ("--idle-timeout=3600", "--profile-timeout=quick=3")
        processes = [
            _service(
                hub,
                "jupyter-pause",
                logs,
                *quick,
                "--exclude-users=eve,fay,gus",
                f"--store={root / 'ledger'}",
                "--profile-gpus=quick=2",
            ),
            _service(hub, "jupyter-pause-stopper", logs, *quick, "--users=eve", "--stop-paused"),
        ]
        try:
            hub.wait_service("jupyter-pause")
            yield Setup(hub, kernels, logs, root / "ledger")
        finally:
            for p in processes:
                p.terminate()
            for p in processes:
                p.wait(10)
            # bob's cell would hold his server's stop (its sessions are paused first) until the Hub gives up on it
            hub.server_fetch("bob", f"api/kernels/{kernels['bob']}/interrupt", method="POST", body={})


def _released(setup: Setup, user: str) -> list[dict[str, Any]]:
    return [row for row in setup.page()["released"] if row["user"] == user]


def test_an_idle_server_is_released_every_session_paused_and_the_hub_stops_it(setup):
    released = wait_for(lambda: _released(setup, "ann"), bool, 90, "ann released (the service's page)")
    assert len(released) == 1, setup.service_log()
    assert released[0]["profile"] == "quick"  # read from user_options with read:servers
    wait_for(lambda: setup.hub.server_model("ann"), lambda m: m is None, 30, "the Hub shows ann's server stopped")
    # what the server recorded in its store: the service's release, every session paused
    record = json.loads((setup.hub.store("ann") / "releases" / f"{released[0]['release']['id']}.json").read_text())
    assert record["trigger"] == "service"
    assert [(s["path"], s["state"]) for s in record["sessions"]] == [("ann.ipynb", "paused")]
    assert record["sessions"][0]["checkpoint"] is not None


def test_the_service_writes_server_starts_and_stops_to_the_ledger(setup):
    def ann() -> list[tuple[str, str | None, int]]:
        events, _ = ledger.read(Store(str(setup.ledger)))
        return [(e.event, e.trigger, e.gpus) for e in events if e.server == "ann" and e.user == "ann"]

    seen = wait_for(ann, lambda found: len(found) == 2, 90, "ann's server start and stop in the ledger")
    assert seen == [("server_started", None, 2), ("server_stopped", "release", 2)], setup.service_log()


def test_a_server_running_a_cell_is_never_released(setup):
    row = wait_for(lambda: setup.skipped("bob"), lambda r: r is not None, 60, "bob skipped")
    assert row["reason"] == "busy", row
    assert setup.kernels["bob"] in row["detail"]
    # the Hub saw no activity for longer than the timeout, yet the server runs and its cell too
    model = setup.hub.server_model("bob")
    assert model is not None and model["ready"] and not model["pending"]
    kernels = setup.hub.server_fetch("bob", "api/kernels").body
    assert [k["execution_state"] for k in kernels] == ["busy"]


def test_a_server_whose_token_cannot_stop_it_stays_paused_and_the_report_names_the_setting(setup):
    row = wait_for(lambda: setup.skipped("cat"), lambda r: r is not None, 60, "cat skipped")
    assert row["reason"] == "paused-not-stopped", row
    assert "c.Spawner.server_token_scopes" in row["detail"]
    assert (row["release"]["state"], row["release"]["server_stop"]) == ("paused", "missing-scope")
    model = setup.hub.server_model("cat")
    assert model is not None and model["ready"]  # still running: nobody stopped it
    sessions = setup.hub.server_fetch("cat", "jupyter-pause/api/sessions").body
    assert [(s["path"], s["state"]) for s in _rows(sessions)] == [("cat.ipynb", "paused")]


def test_with_stop_paused_the_service_stops_a_server_its_own_token_could_not(setup):
    wait_for(lambda: setup.hub.server_model("eve"), lambda m: m is None, 90, "eve's server stopped")
    wait_for(setup.service_log, lambda text: "eve: released" in text, 30, "the stopper's log")
    # eve was the stopper's to release (--users=eve), and the first service left her alone
    assert not [row for row in setup.page()["released"] if row["user"] == "eve"]
    assert "eve: released: eve: every session paused; the service stopped the server" in setup.service_log()


def test_a_server_without_the_extension_is_skipped_with_the_reason_and_keeps_running(setup):
    row = wait_for(lambda: setup.skipped("dan"), lambda r: r is not None, 60, "dan skipped")
    assert row["reason"] == "no-extension", row
    assert "no jupyter_pause extension" in row["detail"]
    kernels = setup.hub.server_fetch("dan", "api/kernels")
    assert kernels.code == 200 and len(kernels.body) == 1  # its kernel still runs


def test_a_managed_instance_finds_the_hub_in_its_environment_and_a_dry_run_releases_nothing(setup):
    page = wait_for(lambda: setup.page("jupyter-pause-managed"), lambda p: p["skipped"], 60, "the dry run's report")
    assert page["options"]["url"] == setup.hub.api_url  # from JUPYTERHUB_API_URL
    assert page["options"]["proxy_url"] == setup.hub.url  # from JUPYTERHUB_PUBLIC_URL (c.JupyterHub.public_url)
    assert page["last_error"] is None
    assert [(row["user"], row["reason"]) for row in page["skipped"]] == [("dan", "dry-run")]
    assert page["released"] == []


def test_the_page_needs_hub_auth(setup):
    answer = setup.hub.fetch(f"{setup.hub.url}/services/jupyter-pause/", token=None)
    assert answer.code in (302, 403)
    assert not isinstance(answer.body, dict)


def _warning_of(setup: Setup, user: str) -> dict[str, Any] | None:
    page = setup.page("jupyter-pause-warner")
    return next((w for w in page["warnings"] if w["user"] == user), None)


@pytest.fixture
def warner(setup: Setup) -> Iterator[None]:
    """A service that warns fay and gus 10 s before their release, started by the test that uses
    it (their servers have been idle since the module's start: its first check warns both)."""
    args = ("--profile-timeout=quick=10", "--warn-before=10s", "--users=fay,gus")
    process = _service(setup.hub, "jupyter-pause-warner", setup.logs, *args)
    try:
        setup.hub.wait_service("jupyter-pause-warner")
        yield
    finally:
        process.terminate()
        process.wait(10)


def test_a_warned_server_is_released_once_its_warning_is_due_and_one_used_since_is_kept(setup, warner):
    """gus and fay are warned at the same check; fay runs a cell in the window, gus does nothing."""
    warned = wait_for(lambda: _warning_of(setup, "gus"), bool, 60, "gus warned (the warner's page)")
    assert wait_for(lambda: _warning_of(setup, "fay"), bool, 10, "fay warned")
    setup.hub.execute("fay", setup.kernels["fay"], "owner = 'fay, still here'")  # a cell: she is working
    assert warned["reason"].startswith("idle for ")
    assert warned["release_at"] - warned["warned_at"] == pytest.approx(10, abs=1)
    # what the server holds, and shows its front end
    held = setup.hub.server_fetch("gus", "jupyter-pause/api/release/warning").body
    assert held["warned_at"] == warned["warned_at"] and held["reason"] == warned["reason"]
    status = setup.hub.server_fetch("gus", "jupyter-pause/api/status").body
    assert status["warning"]["release_at"] == warned["release_at"]

    wait_for(lambda: setup.hub.server_model("gus"), lambda m: m is None, 90, "gus released after the warning")
    released = [r for r in setup.page("jupyter-pause-warner")["released"] if r["user"] == "gus"]
    assert len(released) == 1 and released[0]["at"] >= warned["release_at"], setup.service_log()
    assert _warning_of(setup, "gus") is None

    # fay's warning ended on her server when the cell ran: the release that came for gus skipped her
    first = wait_for(setup.service_log, lambda t: "fay: keep (warning-ended" in t, 30, "fay's warning ended")
    assert "ended on the server: it was used, or its user chose Keep working" in first
    model = setup.hub.server_model("fay")
    assert model is not None and model["ready"]  # kept running
    assert not [r for r in setup.page("jupyter-pause-warner")["released"] if r["user"] == "fay"]
    # and the next idle period warns her again
    again = wait_for(
        lambda: _warning_of(setup, "fay"), lambda w: w and w["warned_at"] > warned["release_at"], 60, "fay warned again"
    )
    assert again["reason"].startswith("idle for ")
    metrics = str(_metrics(setup, "jupyter-pause-warner").body)
    assert _series(metrics, "jupyter_pause_hub_warnings_issued_total")[""] >= 3  # fay twice, gus once
    assert _series(metrics, "jupyter_pause_hub_warnings_cancelled_total")[""] >= 1  # fay's first


def _metrics(setup: Setup, service: str = "jupyter-pause", token: str | None = "") -> Any:
    return setup.hub.fetch(f"{setup.hub.url}/services/{service}/metrics", token=token)


def _series(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one series in Prometheus's text format."""
    found = {}
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head, value = line.rsplit(" ", 1)
            found[head[len(name) :]] = float(value)
    return found


def test_the_metrics_count_releases_decisions_warnings_and_gpu_hours_behind_hub_auth(setup):
    wait_for(lambda: _released(setup, "ann"), bool, 90, "ann released")
    answer = wait_for(
        lambda: _metrics(setup),
        lambda a: 'outcome="released"' in str(a.body) and 'user="ann"' in str(a.body),
        60,
        "the metrics with ann's release and her GPU-hours",
    )
    assert answer.code == 200
    text = str(answer.body)
    assert _series(text, "jupyter_pause_hub_releases_total")['{outcome="released"}'] >= 1
    assert _series(text, "jupyter_pause_hub_releases_total").get('{outcome="no-extension"}', 0) >= 1  # dan
    assert _series(text, "jupyter_pause_hub_kept_busy_total")[""] >= 1  # bob's running cell
    assert _series(text, "jupyter_pause_hub_last_check_timestamp_seconds")[""] > 0
    assert _series(text, "jupyter_pause_hub_decisions_total")['{reason="busy"}'] >= 1
    hours = _series(text, "jupyter_pause_hub_gpu_hours")
    assert hours['{kind="held",user="ann"}'] > 0 and '{kind="released",user="ann"}' in hours
    assert not any("session" in k or "checkpoint" in k for k in hours)  # low cardinality
    assert _metrics(setup, token=None).code in (302, 403)


def _rows(answer: Any) -> list[dict[str, Any]]:
    return answer["sessions"] if isinstance(answer, dict) else answer


def test_the_service_stops_at_the_hubs_interrupt_though_started_with_interrupts_ignored(tmp_path):
    """The Hub stops a managed service with SIGINT, then SIGTERM once it has waited for it. A Hub
    started where SIGINT is ignored (a shell script's background job) passes that on to what it
    starts, and Python then leaves SIGINT ignored: the Hub's stop waited 30 s for such a service."""
    nobody = free_port()  # no Hub there: each check fails, and the service goes on checking
    command = [
        str(VENV_BIN / "jupyter-pause-hub"),
        f"--url=http://127.0.0.1:{nobody}/hub/api",
        f"--proxy-url=http://127.0.0.1:{nobody}",
        "--check-every=0.2",
    ]
    log = tmp_path / "service.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command,
            env={**os.environ, "JUPYTERHUB_API_TOKEN": "token"},
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    try:
        wait_for(log.read_text, lambda text: "check failed" in text, 60, "the service's first check")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0, log.read_text()  # within the Hub's wait before SIGTERM
    finally:
        process.kill()
        process.wait()
